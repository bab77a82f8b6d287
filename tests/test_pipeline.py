"""Pipeline and tensor parallelism: the pipeline engine, the schedules, tensor-parallel shards,
memory per stage, the layout's groups on the fabric.

Invariants (a one-stage pipeline is the data-parallel engine; uniform stages take exactly
the bubble of Narayanan et al. 2021; every stage runs each micro-batch once) and golden
formulas (Korthikanti et al. 2022, Table 2 activations; the in-flight micro-batches of
each schedule). ``predict --tp/--pp`` and ``dpsim plan`` are tests/test_layout.py.
"""

from __future__ import annotations

import dataclasses

import pytest

from dpsim.engine.pipeline import (
    PipelineProgram,
    StageOp,
    StageProgram,
    Transfer,
    collective_cost,
    from_step_program,
    run_pipeline,
)
from dpsim.engine.program import CommOp
from dpsim.engine.simulate import run_program
from dpsim.errors import ConfigError
from dpsim.hardware import get_gpu
from dpsim.memory import layout_stage_memory
from dpsim.predict.config import PredictConfig
from dpsim.predict.run import predict
from dpsim.strategies.layout import ChunkWork, LayerWork, Layout, balanced_counts, block_layers, stage_assignment
from dpsim.strategies.pipeline import (
    DataParallelPlan,
    bubble_fraction,
    build_pipeline_program,
    deepspeed_commands,
    in_flight,
    peak_in_flight,
    peak_split,
    schedule_slots,
)
from dpsim.strategies.tensor import layer_activation_bytes, layer_tp_ops, tp_model
from dpsim.workload.architectures import GPT2Config, build_gpt2
from dpsim.workload.catalog import get_model
from dpsim.workload.precision import get_precision

BF16 = get_precision("bf16-mixed")


# ------------------------------------------------------------------ the engine


@pytest.mark.parametrize("strategy", ["ddp", "zero1", "zero2", "zero3", "fsdp", "fsdp-hybrid"])
@pytest.mark.parametrize("grad_accum", [1, 3])
@pytest.mark.parametrize("comm_slowdown", [0.0, 0.3])
def test_a_one_stage_pipeline_is_the_data_parallel_engine(strategy, grad_accum, comm_slowdown):
    # comm_slowdown > 0: a calibration's collectives slowed beside compute, the same rule both ways.
    p = predict(PredictConfig(gpus=32, link="infiniband", model="gpt2", micro_batch=4, strategy=strategy,
                              grad_accum=grad_accum, steps=1))
    piped = run_pipeline(from_step_program(p.program), collective_cost(p.collectives), overlap_slowdown=0.1,
                         comm_slowdown=comm_slowdown)
    simpy = run_program(p.program, p.collectives, steps=1, overlap_slowdown=0.1,
                        comm_slowdown=comm_slowdown).steps[0]
    assert piped.step_time_s == pytest.approx(simpy.step_time_s, rel=1e-12, abs=1e-15)
    assert piped.stages[0].exposed_comm_s == pytest.approx(simpy.exposed_comm_s, rel=1e-9, abs=1e-12)
    assert piped.stages[0].comm_s == pytest.approx(simpy.comm_s, rel=1e-9, abs=1e-12)


def _uniform(p, v, f=1.0, b=2.0, numel=100, w=0.0):
    def lw(i, x, y):
        return LayerWork(index=i, forward_s=x, backward_s=y, compute_forward_s=x, compute_backward_s=y,
                         recompute_s=0.0, tp_comm_s=0.0, tp_exposed_s=0.0, grad_numel=numel, weight_grad_s=w / v)
    return tuple(tuple(ChunkWork(stage=s, chunk=c, layers=(lw(c * p + s, f / v, b / v),)) for c in range(v))
                 for s in range(p))


_NO_DP = DataParallelPlan(strategy="ddp", dp=1, overlap=True, bucket_elements=10**9, grad_bytes=2, weight_bytes=2)


@pytest.mark.parametrize("schedule, v", [("gpipe", 1), ("1f1b", 1), ("1f1b-interleaved", 2), ("1f1b-interleaved", 3),
                                         ("deepspeed", 1)])
@pytest.mark.parametrize("p, m", [(2, 2), (4, 4), (4, 12), (8, 16)])
def test_uniform_stages_take_the_bubble_of_narayanan_2021(schedule, v, p, m):
    """(m + (p - 1)/v) x (F + B) with free transfers (Narayanan et al. 2021, Sec. 2.2)."""
    layout = Layout(pp=p, virtual_stages=v, schedule=schedule, micro_batches=m)
    plan = build_pipeline_program(_uniform(p, v), layout, p2p_bytes=0.0, gather_s=0.0, optimizer_s=[0.0] * p,
                                  dp=_NO_DP)
    result = run_pipeline(plan.program, lambda g, op, s: 0.0)
    assert result.step_time_s == pytest.approx((m + (p - 1) / v) * 3.0, rel=1e-12)
    assert result.stages[0].wait_transfer_s == pytest.approx((p - 1) / v * 3.0, rel=1e-9)


def test_transfers_lengthen_fill_and_drain():
    p, m, tau = 4, 8, 0.25
    layout = Layout(pp=p, schedule="1f1b", micro_batches=m)
    plan = build_pipeline_program(_uniform(p, 1), layout, p2p_bytes=1.0, gather_s=0.0, optimizer_s=[0.0] * p,
                                  dp=_NO_DP)
    free = run_pipeline(plan.program, lambda g, op, s: 0.0).step_time_s
    paid = run_pipeline(plan.program, lambda g, op, s: tau if g == "pp" else 0.0).step_time_s
    # The first activation crosses p - 1 links and the last gradient comes back over them.
    assert paid >= free + 2 * (p - 1) * tau - 1e-12
    assert len([t for t in plan.program.transfers if t.size_bytes > 0]) == 2 * (p - 1) * m


@pytest.mark.parametrize("schedule, v", [("gpipe", 1), ("1f1b", 1), ("1f1b-interleaved", 2), ("1f1b-interleaved", 3),
                                         ("deepspeed", 1)])
@pytest.mark.parametrize("p, m", [(2, 2), (2, 6), (3, 3), (4, 8), (8, 8), (8, 24)])
def test_blocking_exchanges_never_deadlock_and_cost_only_their_transfers(schedule, v, p, m):
    """Megatron's and DeepSpeed's blocking sends and receives: free transfers give the
    asynchronous step exactly; paid ones hold both sides, so the step never gets shorter."""
    if schedule == "1f1b-interleaved" and m % p:
        pytest.skip("the interleaved schedule needs m a multiple of p")
    layout = Layout(pp=p, virtual_stages=v, schedule=schedule, micro_batches=m)
    work = _uniform(p, v, f=1.0, b=3.0)
    steps = {}
    for blocking in (False, True):
        plan = build_pipeline_program(work, layout, p2p_bytes=1.0, gather_s=0.0, optimizer_s=[0.0] * p,
                                      dp=_NO_DP, blocking_p2p=blocking)
        for tau in (0.0, 0.05):
            steps[blocking, tau] = run_pipeline(plan.program, lambda g, op, size: tau if size > 0 else 0.0).step_time_s
    assert steps[True, 0.0] == pytest.approx(steps[False, 0.0], rel=1e-12)
    assert steps[True, 0.05] >= steps[False, 0.05] - 1e-12


def test_deepspeed_runs_1f1b_order_in_pipe_steps():
    """DeepSpeed's TrainSchedule: F(j) at pipe step 2j + s, B(j) at 2j + 2p - 1 - s
    (deepspeed/runtime/pipe/schedule.py@077e6740), so its compute order is 1F1B's; each
    activation and gradient is sent and received exactly once."""
    for p in (2, 3, 4, 7):
        for m in (1, 2, 5, 12):
            sent: dict[tuple[str, int, int], int] = {}
            for s in range(p):
                cmds = deepspeed_commands(p, m, s)
                order = [(k, 0, j) for k, _, j in cmds if k in ("F", "B")]
                assert order == schedule_slots("1f1b", p, 1, m, s)
                for kind, what, j in cmds:
                    if kind == "send":
                        dst = s + 1 if what == "act" else s - 1
                        sent[what, dst, j] = sent.get((what, dst, j), 0) + 1
                    elif kind == "recv":
                        sent[what, s, j] = sent.get((what, s, j), 0) - 1
            assert all(v == 0 for v in sent.values()) and len(sent) == 2 * (p - 1) * m


def test_deepspeed_reduces_gradients_after_the_pipeline():
    p, m = 4, 8
    dp = DataParallelPlan(strategy="zero1", dp=8, overlap=True, bucket_elements=10, grad_bytes=2, weight_bytes=2)
    plan = build_pipeline_program(_uniform(p, 1), Layout(pp=p, dp=8, schedule="deepspeed", micro_batches=m),
                                  p2p_bytes=1.0, gather_s=0.0, optimizer_s=[0.0] * p, dp=dp)
    for st in plan.program.stages:
        launched = [i for op in st.ops for i in op.launches]
        computing = [k for k, op in enumerate(st.ops) if op.kind in ("forward", "backward")]
        launcher = [k for k, op in enumerate(st.ops) if op.launches]
        assert launched and min(launcher) > max(computing)  # nothing overlaps the backward


def test_deepspeed_all_reduces_zero1_gradients():
    """DeepSpeed's engine of 2021 ran ZeRO-1 on stage2.py with contiguous gradients off, so each
    bucket went through ``buffered_reduce_fallback`` -> ``dist.all_reduce``
    (deepspeed/runtime/zero/stage2.py@0457bb1cb6), where Megatron's distributed optimizer
    reduce-scatters; both all-gather the updated parameters after the step."""
    p, m = 4, 8
    dp = DataParallelPlan(strategy="zero1", dp=8, overlap=False, bucket_elements=10, grad_bytes=2, weight_bytes=2)

    def ops(schedule):
        plan = build_pipeline_program(_uniform(p, 1), Layout(pp=p, dp=8, schedule=schedule, micro_batches=m),
                                      p2p_bytes=1.0, gather_s=0.0, optimizer_s=[0.0] * p, dp=dp)
        return sorted({(c.op, c.size_bytes) for c in plan.program.comms if c.group == "dp"})

    deepspeed, megatron = ops("deepspeed"), ops("1f1b")
    assert [op for op, _ in deepspeed] == ["all_gather", "all_reduce"]
    assert [op for op, _ in megatron] == ["all_gather", "reduce_scatter"]
    assert [size for _, size in deepspeed] == [size for _, size in megatron]


def test_deepspeed_gathers_a_stage_output_again_before_its_backward():
    """DeepSpeed keeps only its slice of each output it sent and restores it with an all-gather
    before the backward (deepspeed/runtime/pipe/engine.py@0457bb1cb6): every backward of a stage
    that has a next stage carries two tensor-group all-gathers where Megatron's carries one."""
    p, m, g = 4, 8, 0.25
    dp = DataParallelPlan(strategy="ddp", dp=1, overlap=False, bucket_elements=10, grad_bytes=2, weight_bytes=2)
    work = _uniform(p, 1)

    def backward_extra(schedule):
        plan = build_pipeline_program(work, Layout(pp=p, schedule=schedule, micro_batches=m), p2p_bytes=1.0,
                                      gather_s=g, optimizer_s=[0.0] * p, dp=dp)
        return [sum(op.duration_s for op in st.ops if op.kind == "backward") - m * 2.0
                for st in plan.program.stages]

    assert backward_extra("1f1b") == pytest.approx([m * g] * (p - 1) + [0.0])
    assert backward_extra("deepspeed") == pytest.approx([2 * m * g] * (p - 1) + [0.0])


def test_a_collective_of_two_stages_waits_for_both():
    prog = PipelineProgram(
        stages=(StageProgram(ops=(StageOp(kind="backward", name="b0", duration_s=1.0, launches=(0,)),
                                  StageOp(kind="optimizer", name="o0", duration_s=0.5, waits=(0,)))),
                StageProgram(ops=(StageOp(kind="backward", name="b1", duration_s=3.0, launches=(0,)),
                                  StageOp(kind="optimizer", name="o1", duration_s=0.5, waits=(0,))))),
        comms=(CommOp(name="emb", op="all_reduce", size_bytes=1.0, group="emb"),))
    r = run_pipeline(prog, lambda g, op, s: 2.0)
    assert r.step_time_s == pytest.approx(3.0 + 2.0 + 0.5)
    assert r.stages[0].wait_comm_s == pytest.approx(4.0)  # idle from 1 s until the all-reduce ends at 5 s


def test_a_program_that_cannot_finish_is_reported():
    prog = PipelineProgram(stages=(
        StageProgram(ops=(StageOp(kind="forward", name="a", duration_s=1.0, needs=(1,), sends=(0,)),)),
        StageProgram(ops=(StageOp(kind="forward", name="b", duration_s=1.0, needs=(0,), sends=(1,)),))),
        transfers=(Transfer(name="x", src=0, dst=1, size_bytes=1.0), Transfer(name="y", src=1, dst=0, size_bytes=1.0)))
    with pytest.raises(RuntimeError, match="deadlocks"):
        run_pipeline(prog, lambda g, op, s: 0.0)


# ------------------------------------------------------------------ schedules


@pytest.mark.parametrize("schedule, v", [("gpipe", 1), ("1f1b", 1), ("1f1b-interleaved", 2), ("1f1b-interleaved", 4)])
@pytest.mark.parametrize("p, m", [(2, 4), (4, 8), (3, 6), (8, 8)])
def test_every_stage_runs_each_forward_and_backward_once(schedule, v, p, m):
    for s in range(p):
        slots = schedule_slots(schedule, p, v, m, s)
        assert sorted(slots) == sorted((k, c, j) for k in "FB" for c in range(v) for j in range(m))
        done = set()
        for kind, c, j in slots:
            if kind == "B":
                assert ("F", c, j) in done  # a backward after its own forward
            done.add((kind, c, j))


@pytest.mark.parametrize("schedule, v", [("gpipe", 1), ("1f1b", 1), ("1f1b-interleaved", 2), ("1f1b-interleaved", 3)])
def test_in_flight_closed_form_is_the_schedules_peak(schedule, v):
    for p in (1, 2, 4, 8):
        for m in range(1, 25):
            if schedule == "1f1b-interleaved" and (p == 1 or m % p):
                continue
            for s in range(p):
                assert in_flight(schedule, p, v, m, s) == peak_in_flight(schedule_slots(schedule, p, v, m, s), v)


def test_first_stage_holds_korthikanti_micro_batches():
    """1F1B: p micro-batches on the first stage; interleaved: p(1 + (p-1)/(p·v)) stages' worth
    (Korthikanti et al. 2022, Sec. 4.2.3)."""
    for p in (2, 4, 8):
        assert in_flight("1f1b", p, 1, 4 * p, 0) == [p]
        for v in (2, 4):
            assert sum(in_flight("1f1b-interleaved", p, v, 4 * p, 0)) / v == pytest.approx(p * (1 + (p - 1) / (p * v)))


# ------------------------------------------------------------------ tensor parallelism


def _gpt(h=1024, layers=4, heads=16, seq=512, vocab=51200, flash=False):
    return build_gpt2(GPT2Config(vocab_size=vocab, n_positions=seq, n_embd=h, n_layer=layers, n_head=heads),
                      name="gpt-test", flash_attention=flash)


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_a_shard_holds_a_tp_th_of_the_split_weights_and_flops(tp):
    model = _gpt()
    tpm = tp_model(model, tp)
    blocks = [(l, t) for l, t in zip(model.layers, tpm.layers) if t.role == "block"]
    for layer, t in blocks:
        split = sum(p.numel for p in layer.params if len(p.shape) >= 2)
        rest = sum(p.numel for p in layer.params if len(p.shape) < 2)
        assert t.numel_per_rank == split // tp + rest
    assert sum(l.forward_flops_per_sample for l in tpm.spec.layers) == pytest.approx(
        model.forward_flops_per_sample / tp)
    emb = next(t for t in tpm.layers if t.role == "embedding") if tp > 1 else None
    if emb is not None:
        assert tpm.embedding_numel_per_rank == 51200 // tp * 1024 and tpm.tied_embedding


def test_activations_per_layer_are_korthikanti_table_2():
    """Per layer, sbh x: 34 + 5as/h (none); 10 + 24/t + 5as/(ht) (tensor); 34/t + 5as/(ht) (tensor +
    sequence); 10 + 24/t (tensor + selective); 34/t (all three) (Korthikanti et al. 2022, Table 2).
    Their GPT runs Megatron's one-kernel GeLU: HF's eager gelu_new keeps more (its nine kernels)."""
    h, a, s, t = 1024, 16, 512, 4
    megatron = build_gpt2(GPT2Config(vocab_size=51200, n_positions=s, n_embd=h, n_layer=4, n_head=a,
                                     activation_function="gelu"), name="gpt-test")
    tpm = tp_model(megatron, t)
    block = [l for l in tpm.layers if l.role == "block"][:2]
    sh = s * h

    def per_layer(sp, recompute):
        return sum(layer_activation_bytes(l, t, sequence_parallel=sp, recompute=recompute) for l in block) / sh
    assert per_layer(False, "off") == pytest.approx(10 + 24 / t + 5 * a * s / (h * t))
    assert per_layer(True, "off") == pytest.approx(34 / t + 5 * a * s / (h * t))
    assert per_layer(False, "selective") == pytest.approx(10 + 24 / t)
    assert per_layer(True, "selective") == pytest.approx(34 / t)
    assert tp_model(megatron, 1).layers[1].core_activation_bytes_per_sample == \
        pytest.approx(5 * a * s * s)


def test_tensor_parallel_collectives_per_sub_block():
    tpm = tp_model(_gpt(), 4)
    block = next(l for l in tpm.layers if l.role == "block")
    size = 512 * 1024 * 2 * 3  # micro-batch 3, bf16
    fwd, bwd = layer_tp_ops(block, 3, sequence_parallel=False, tokens_per_sample=512)
    assert fwd == [("all_reduce", size)] and bwd == [("all_reduce", size)]
    fwd, bwd = layer_tp_ops(block, 3, sequence_parallel=True, tokens_per_sample=512)
    assert [o for o, _ in fwd] == ["all_gather", "reduce_scatter"]
    assert [o for o, _ in bwd] == ["all_gather", "reduce_scatter", "all_gather"]
    assert {s for _, s in fwd + bwd} == {size}


def test_tensor_parallelism_is_refused_where_it_cannot_split():
    with pytest.raises(ConfigError, match="--tp: 2 splits transformer blocks"):
        tp_model(get_model("resnet50"), 2)
    with pytest.raises(ConfigError, match="--tp: 3 does not divide"):
        tp_model(get_model("llama-2-7b"), 3)


def test_stage_assignment_puts_embedding_first_and_head_last():
    model = get_model("llama-2-7b")
    layout = Layout(pp=4, virtual_stages=2, schedule="1f1b-interleaved", micro_batches=8)
    a = stage_assignment(tp_model(model, 1), layout)
    assert a[0][0][0] == 0  # the embedding on virtual stage 0
    assert a[3][1][-1] == len(model.layers) - 1  # the head on the last virtual stage
    assert sorted(i for s in a for c in s for i in c) == list(range(len(model.layers)))


def test_stage_memory_counts_in_flight_micro_batches():
    model = get_model("llama-2-7b")
    layout = Layout(tp=1, pp=4, dp=1, micro_batches=8, schedule="1f1b")
    tpm = tp_model(model, 1)
    stages = layout_stage_memory(tpm, stage_assignment(tpm, layout), layout, get_gpu("h100"), precision=BF16,
                                 optimizer="adamw", in_flight=[in_flight("1f1b", 4, 1, 8, s) for s in range(4)])
    # stage 1 and 2 hold the same blocks; stage 1 holds 3 micro-batches, stage 2 two
    a1, a2 = stages[1].breakdown.activations_bytes, stages[2].breakdown.activations_bytes
    assert a1 / a2 == pytest.approx(3 / 2)
    assert dataclasses.asdict(stages[0])["in_flight"] == (4,)


def test_layout_groups_are_placed_as_megatron_ranks_them():
    from dpsim.collectives.groups import LayoutShape, layout_communicators
    from dpsim.predict.run import resolve_topology
    job = resolve_topology(PredictConfig(gpus=512, link="infiniband"))
    comms = layout_communicators(job, LayoutShape(tp=8, pp=4, dp=16))
    assert comms["tp"].topology.n_gpus == 8 and comms["tp"].topology.n_nodes == 1
    dp = comms["dp"].topology
    # one GPU (one local rank, one rail) per server: the rail's NIC is the group's own
    assert dp.n_gpus == 16 and dp.gpus_per_node == 1 and dp.spec.fabric.nics_per_node == 1
    assert dp.spec.fabric.rail_optimized and comms["dp"].concurrent == 8
    assert comms["pp"].topology.n_gpus == 2 and comms["pp"].topology.n_nodes == 2
    small = layout_communicators(resolve_topology(PredictConfig(gpus=16, link="infiniband")),
                                 LayoutShape(tp=2, pp=2, dp=4))
    assert small["dp"].topology.n_gpus == 4 and small["dp"].topology.n_nodes == 1  # tp x dp = 8: one server
    assert small["pp"].topology.n_nodes == 2


@pytest.mark.parametrize("overlap", ["off", "backward", "full"])
@pytest.mark.parametrize("recompute", ["off", "full"])
def test_hidden_tensor_parallel_collectives_slow_their_gemms(overlap, recompute):
    """A collective hidden under a GEMM takes SMs: the layer pays hidden x s / (1 + s) more,
    s the overlap slowdown (nothing when every collective blocks, nothing with s = 0)."""
    from dpsim.strategies.layout import layer_work
    from dpsim.workload.compute import compute_profile
    tp, s = 4, 0.1
    tpm = tp_model(_gpt(layers=2), tp, sequence_parallel=True)
    shard = compute_profile(tpm.spec, get_gpu("h100"), micro_batch=2, precision=BF16, optimizer="adamw")
    layout = Layout(tp=tp, micro_batch=2, sequence_parallel=True, tp_comm_overlap=overlap, recompute=recompute)

    def cost(op, size):
        return size / 100e9

    base = layer_work(tpm, shard, layout, tp_cost=cost)
    slowed = layer_work(tpm, shard, layout, tp_cost=cost, overlap_slowdown=s)
    extra = sum(b.forward_s + b.backward_s for b in slowed) - sum(b.forward_s + b.backward_s for b in base)
    hidden = sum(w.tp_comm_s - w.tp_exposed_s for w in base)
    assert extra == pytest.approx(hidden * s / (1 + s), rel=1e-9, abs=1e-15)
    assert (hidden == 0) == (overlap == "off")
    assert [w.recompute_s for w in slowed] == [w.recompute_s for w in base]


def test_unfused_gradient_accumulation_streams_the_gradients_each_micro_batch():
    """Megatron's local DDP adds every micro-batch's gradients into main_grad (read both, write
    one); fused accumulation (the default) does it inside the weight-gradient GEMM."""
    from dpsim.strategies.layout import gradient_accumulation_s, layer_work
    from dpsim.workload.compute import compute_profile
    from dpsim.workload.roofline import MEMORY_EFFICIENCY
    gpu = get_gpu("a100")
    tpm = tp_model(_gpt(h=4096, layers=2), 2)
    acc = gradient_accumulation_s(tpm, gpu, 2)
    for layer, t in zip(tpm.layers, acc):
        stream = 3 * 2 * layer.numel_per_rank / (gpu.streaming_bandwidth_bytes_per_s * MEMORY_EFFICIENCY)
        assert t >= stream * (1 - 1e-12) and (layer.numel_per_rank == 0) == (t == 0)
        if layer.numel_per_rank > 10**7:
            assert t == pytest.approx(stream, rel=1e-12)
    shard = compute_profile(tpm.spec, gpu, micro_batch=1, precision=BF16, optimizer="adamw")
    fused = layer_work(tpm, shard, Layout(tp=2), tp_cost=lambda op, s: 0.0, accumulate_s=acc)
    unfused = layer_work(tpm, shard, Layout(tp=2, grad_accum_fusion=False), tp_cost=lambda op, s: 0.0,
                         accumulate_s=acc)
    assert [u.backward_s - f.backward_s for f, u in zip(fused, unfused)] == pytest.approx(acc, rel=1e-12)
    assert [u.forward_s for u in unfused] == [f.forward_s for f in fused]


# ------------------------------------------------------------------ zero bubble, uneven stages


@pytest.mark.parametrize("f, b, w", [(1.0, 2.0, 1.0), (1.0, 1.9, 0.7), (1.0, 1.5, 0.5)])
@pytest.mark.parametrize("p, m", [(2, 4), (4, 4), (4, 8), (8, 16), (8, 24)])
def test_zb_h1_takes_the_bubble_of_qi_2024(f, b, w, p, m):
    """Uniform stages, free transfers: ZB-H1 idles (p - 1)(F + B - W) beside m(F + B + W) of work
    (Qi et al. 2024, Sec. 3.1, W <= F), a third of 1F1B's (p - 1)(F + B + W) when F = B = W;
    every stage holds p micro-batches at its peak, stage s 1F1B's p - s whole and s between B and W."""
    layout = Layout(pp=p, schedule="zb-h1", micro_batches=m)
    plan = build_pipeline_program(_uniform(p, 1, f=f, b=b, w=w), layout, p2p_bytes=0.0, gather_s=0.0,
                                  optimizer_s=[0.0] * p, dp=_NO_DP)
    step = run_pipeline(plan.program, lambda g, op, s: 0.0).step_time_s
    b_input = b - w
    assert step == pytest.approx(m * (f + b) + (p - 1) * (f + b_input - w), rel=1e-12)
    assert 1 - m * (f + b) / step == pytest.approx(bubble_fraction(layout, weight_share=w / (f + b)), rel=1e-12)
    one_f_one_b = run_pipeline(build_pipeline_program(_uniform(p, 1, f=f, b=b), Layout(pp=p, micro_batches=m),
                                                      p2p_bytes=0.0, gather_s=0.0, optimizer_s=[0.0] * p,
                                                      dp=_NO_DP).program, lambda g, op, s: 0.0).step_time_s
    if f == b_input == w:
        assert step - m * (f + b) == pytest.approx((one_f_one_b - m * (f + b)) / 3, rel=1e-12)
    for s in range(p):
        slots = schedule_slots("zb-h1", p, 1, m, s)
        assert sorted(slots) == sorted((k, 0, j) for k in "FBW" for j in range(m))
        assert all(slots.index(("F", 0, j)) < slots.index(("B", 0, j)) < slots.index(("W", 0, j)) for j in range(m))
        # p micro-batches at the peak, 1F1B's p - s of them whole, the rest between B and W.
        assert peak_in_flight(slots, 1) == [min(p, m)]
        assert in_flight("zb-h1", p, 1, m, s) == [peak_split(slots)[0]] == [min(p - s, m)]
        assert sum(peak_split(slots)) == min(p, m)


def test_balanced_counts_put_the_lighter_stages_at_the_ends():
    assert balanced_counts(126, 16) == (7,) + (8,) * 14 + (7,)
    assert balanced_counts(32, 4) == (8, 8, 8, 8)
    assert balanced_counts(30, 4) == (7, 8, 8, 7)
    for n in range(1, 60):
        for k in range(1, n + 1):
            counts = balanced_counts(n, k)
            assert sum(counts) == n and max(counts) - min(counts) <= 1
            if n % k <= k - 2:  # the blocks left over fit between the ends
                assert counts[0] == counts[-1] == n // k


@pytest.mark.parametrize("pp, v, stage_blocks", [
    (4, 3, None),  # 32 blocks over 12 virtual stages: 2 or 3 each
    (16, 2, None),  # 32 blocks over 32 virtual stages
    (4, 2, (7, 9, 9, 7)),  # per stage, odd counts split over the chunks
    (4, 2, (3, 4, 4, 4, 4, 4, 4, 5)),  # per virtual stage, lighter first and last
])
def test_interleaving_splits_any_block_count(pp, v, stage_blocks):
    model = get_model("llama-2-7b")
    tpm = tp_model(model, 1)
    layout = Layout(pp=pp, virtual_stages=v, schedule="1f1b-interleaved", micro_batches=pp, stage_blocks=stage_blocks)
    a = stage_assignment(tpm, layout)
    blocks = block_layers(tpm)
    per_virtual = [sum(1 for b in blocks if b[0] in a[g % pp][g // pp]) for g in range(pp * v)]
    assert sum(per_virtual) == len(blocks) == 32
    if stage_blocks is None:
        assert per_virtual == list(balanced_counts(32, pp * v))
    elif len(stage_blocks) == pp * v:
        assert per_virtual == list(stage_blocks)
    else:
        assert [sum(per_virtual[c * pp + s] for c in range(v)) for s in range(pp)] == list(stage_blocks)
        assert all(abs(per_virtual[s] - per_virtual[pp + s]) <= 1 for s in range(pp))
    # virtual stages run the blocks in order
    flat = [i for g in range(pp * v) for i in a[g % pp][g // pp]]
    assert flat == sorted(flat) == list(range(len(model.layers)))


@pytest.mark.parametrize("schedule, v", [("1f1b", 1), ("gpipe", 1), ("zb-h1", 1), ("1f1b-interleaved", 3)])
def test_stage_memory_is_an_independent_count(schedule, v):
    """Weights, gradients and optimizer state of the stage's own layers (the tied embedding's copy on
    the last stage) plus its schedule's peak micro-batches of each chunk's activations."""
    model = get_model("llama-2-7b")
    p, m, d = 4, 8, 4
    layout = Layout(pp=p, dp=d, virtual_stages=v, schedule=schedule, micro_batches=m, strategy="zero1",
                    stage_blocks=(7, 9, 9, 7))
    tpm = tp_model(model, 1)
    a = stage_assignment(tpm, layout)
    stages = layout_stage_memory(tpm, a, layout, get_gpu("h100"), precision=BF16, optimizer="adamw",
                                 in_flight=[in_flight(schedule, p, v, m, s) for s in range(p)])
    for s, st in enumerate(stages):
        numel = sum(model.layers[i].param_count for c in a[s] for i in c)
        slots = schedule_slots(schedule, p, v, m, s)
        # ZB-H1's micro-batches between B and W are test_zb_memory's (no deferred_w given here).
        peak = [peak_split(slots)[0]] if schedule == "zb-h1" else peak_in_flight(slots, v)
        act = sum(peak[c] * sum(layer_activation_bytes(tpm.layers[i], 1, sequence_parallel=False, recompute="off")
                                     for i in a[s][c]) for c in range(v))
        b = st.breakdown
        assert st.params_per_gpu == numel
        assert b.weights_bytes == numel * BF16.weight_bytes and b.gradients_bytes == numel * BF16.grad_bytes
        assert b.optimizer_bytes == -(-numel // d) * 12
        assert b.activations_bytes == pytest.approx(act, rel=1e-12)


@pytest.mark.parametrize("p, m", [(2, 4), (4, 8), (4, 12), (6, 12), (8, 16), (8, 40)])
def test_dualpipe_runs_each_chunk_once_and_holds_p_plus_one(p, m):
    """DualPipe (DeepSeek-V3 report, Table 2): every stage runs each direction's m/2 micro-batches
    through its chunk once (B after F, W after B) and holds p + 1 chunks' activations at its peak."""
    for s in range(p):
        slots = schedule_slots("dualpipe", p, 2, m, s)
        assert sorted(slots) == sorted((k, c, j) for k in "FBW" for c in range(2) for j in range(m // 2))
        assert all(slots.index(("F", c, j)) < slots.index(("B", c, j)) < slots.index(("W", c, j))
                   for c in range(2) for j in range(m // 2))
        assert sum(in_flight("dualpipe", p, 2, m, s)) == p + 1


@pytest.mark.parametrize("f, b, w", [(1.0, 2.0, 1.0), (1.0, 2.0, 0.5), (1.0, 1.5, 0.6)])
@pytest.mark.parametrize("p", [2, 4, 8])
def test_dualpipe_takes_the_bubble_of_its_paper(f, b, w, p):
    """Uniform stages, free transfers, the runtime's commits waited on: the bubble is the paper's
    (p/2 - 1)(F&B + B - 3W) (DeepSeek-V3 report, Table 2; F&B = F + B) when F = B - W = W, the
    chunks its figure draws, for any number of micro-batches, and none with p = 2."""
    paper = (p / 2 - 1) * ((f + b) + b - 3 * w)
    idle = []
    for m in (2 * p, 4 * p + 2):
        layout = Layout(pp=p, schedule="dualpipe", micro_batches=m)
        plan = build_pipeline_program(_uniform(p, 2, f=2 * f, b=2 * b, w=2 * w), layout, p2p_bytes=0.0,
                                      gather_s=0.0, optimizer_s=[0.0] * p, dp=_NO_DP)
        idle.append(run_pipeline(plan.program, lambda g, op, s: 0.0).step_time_s - m * (f + b))
        assert bubble_fraction(layout, weight_share=w / (f + b), backward_share=b / (f + b)) == pytest.approx(
            paper / (m * (f + b) + paper), rel=1e-12)
    assert idle[0] == pytest.approx(idle[1], abs=1e-9)
    if f == b - w == w:
        assert idle[0] == pytest.approx(paper, abs=1e-9)
    assert (idle[0] == pytest.approx(0.0, abs=1e-12)) == (p == 2)


def test_dualpipe_commits_every_message_once():
    """Each activation and gradient a stage sends is received once by the next stage of its
    direction, in the commits of :func:`dualpipe_steps`."""
    from dpsim.strategies.pipeline import dualpipe_steps
    for p, m in ((2, 4), (4, 8), (6, 14), (8, 16)):
        balance: dict = {}
        for s in range(p):
            for step in dualpipe_steps(p, m, s):
                if step[0] != "commit":
                    continue
                for what, d, j in step[1]:
                    step_dir = 1 if (what == "act") == (d == 0) else -1
                    key = (what, d, j, s + step_dir)
                    balance[key] = balance.get(key, 0) + 1
                for what, d, j in step[2]:
                    key = (what, d, j, s)
                    balance[key] = balance.get(key, 0) - 1
        assert all(v == 0 for v in balance.values()) and len(balance) == 2 * 2 * (p - 1) * (m // 2)


def test_dualpipe_holds_two_stages_parameters():
    """Stage r holds stages r and p - 1 - r of the model: twice a 1F1B stage's parameters
    (Table 2), the tied embedding not copied again on the last stage (it holds the first stage's layers)."""
    for name in ("llama-2-7b", "gpt2-xl"):
        model = get_model(name)
        tpm = tp_model(model, 1)
        p, m = 4, 8
        one = stage_assignment(tpm, Layout(pp=p, micro_batches=m))
        dual_layout = Layout(pp=p, schedule="dualpipe", micro_batches=m)
        dual = stage_assignment(tpm, dual_layout)
        assert dual == tuple((one[r][0], one[p - 1 - r][0]) for r in range(p))
        stages = layout_stage_memory(tpm, dual, dual_layout, get_gpu("h100"), precision=BF16, optimizer="adamw",
                                     in_flight=[in_flight("dualpipe", p, 2, m, s) for s in range(p)])
        for r in range(p):
            assert stages[r].params_per_gpu == sum(model.layers[i].param_count for c in dual[r] for i in c)
        assert sum(s.params_per_gpu for s in stages) == 2 * model.param_count


@pytest.mark.parametrize("pp, m, needle", [(3, 12, "even number of stages"), (4, 6, "at least 2 x --pp = 8"),
                                           (4, 9, "even number")])
def test_dualpipe_refuses_what_it_cannot_run(pp, m, needle):
    from dpsim.strategies.pipeline import check_schedule
    with pytest.raises(ConfigError, match=needle):
        check_schedule(Layout(pp=pp, schedule="dualpipe", micro_batches=m))


# ------------------------------------------------------------------ asynchronous tensor parallelism


def _async_work(overlap: str, *, cost_per_byte_s: float, h: int = 4096, tp: int = 8, recompute: str = "off"):
    from dpsim.strategies.layout import layer_work
    from dpsim.workload.compute import compute_profile
    gpu = get_gpu("h100")
    tpm = tp_model(_gpt(h=h, layers=2, heads=32, seq=2048), tp, sequence_parallel=True)
    shard = compute_profile(tpm.spec, gpu, micro_batch=2, precision=BF16, optimizer="adamw")
    layout = Layout(tp=tp, micro_batch=2, sequence_parallel=True, tp_comm_overlap=overlap, recompute=recompute)
    return layer_work(tpm, shard, layout, tp_cost=lambda op, size: size * cost_per_byte_s, gpu=gpu)


def test_async_tp_exposes_a_flow_shop_of_gemm_chunks_and_peer_copies():
    """tp GEMM chunks and tp - 1 copies, one at a time: what the GEMMs cannot cover of the copies
    is exposed; with one rank nothing overlaps and the whole transfer is exposed (sequential)."""
    from dpsim.strategies.tensor import async_tp_exposed
    assert async_tp_exposed(3.0, 5.0, 1) == 3.0
    assert async_tp_exposed(3.0, 8.0, 8) == 0.0  # 8 chunks of 1 s hide 7 copies of 3/7 s
    assert async_tp_exposed(7.0, 8.0, 8) == pytest.approx(0.0)
    # Copies of 2 s behind chunks of 1 s: the last chunk starts at 7 x 2 s and ends at 15 s, 7 s after 8.
    assert async_tp_exposed(14.0, 8.0, 8) == pytest.approx(7.0)
    for comm, gemm, tp in ((1.0, 0.5, 2), (2.0, 9.0, 4), (5.0, 1.0, 8)):
        chunks = [gemm / tp] * tp
        copy = comm / (tp - 1)
        # The reduce-scatter's order (peers' chunks first, each copied after it, own chunk last).
        gemm_end = copy_end = 0.0
        for i, g in enumerate(chunks):
            gemm_end += g
            if i < tp - 1:
                copy_end = max(copy_end, gemm_end) + copy
        assert async_tp_exposed(comm, gemm, tp) == pytest.approx(max(gemm_end, copy_end) - gemm)


def test_async_tp_with_one_rank_costs_nothing():
    from dpsim.strategies.tensor import TpComm, layer_tp_comm
    tpm = tp_model(_gpt(layers=1), 1)
    block = next(l for l in tpm.layers if l.role == "block")
    assert layer_tp_comm(block, 1e-3, 2, 1, sequence_parallel=True, overlap="async", cost=lambda op, s: 1.0,
                         tokens_per_sample=512, local_copy_s=lambda b: 1.0) == TpComm()


@pytest.mark.parametrize("recompute", ["off", "full"])
def test_async_tp_is_never_slower_than_no_overlap_when_compute_dominates(recompute):
    """NVLink-fast collectives beside large GEMMs (h 4096, tp 8): the copies hide, the local copies,
    reductions and chunked GEMMs cost less than the blocking collectives did."""
    for cost in (1 / 400e9, 1 / 100e9, 1 / 30e9):
        off, asyn = (_async_work(o, cost_per_byte_s=cost, recompute=recompute) for o in ("off", "async"))
        assert sum(w.forward_s + w.backward_s for w in asyn) < sum(w.forward_s + w.backward_s for w in off)
        assert sum(w.tp_exposed_s for w in asyn) < sum(w.tp_exposed_s for w in off)
        assert [w.tp_comm_s for w in asyn] == [w.tp_comm_s for w in off]


def test_async_tp_pays_for_its_chunks_local_copies_and_reductions():
    """With free collectives async TP is slower than off by exactly what it adds to the compute
    stream: each block's GEMMs in chunks, its own shard copied, the partials summed."""
    from dpsim.strategies.tensor import chunked_gemm_loss
    off, asyn = _async_work("off", cost_per_byte_s=0.0), _async_work("async", cost_per_byte_s=0.0)
    extra = [a.compute_forward_s - o.compute_forward_s for o, a in zip(off, asyn)]
    tpm = tp_model(_gpt(h=4096, layers=2, heads=32, seq=2048), 8, sequence_parallel=True)
    blocks = [i for i, l in enumerate(tpm.layers) if l.role == "block"]
    assert all(extra[i] > 0 for i in blocks) and all(extra[i] == 0 for i in range(len(tpm.layers)) if i not in blocks)
    # 4096 rows x 1536 QKV columns per rank is 32 x 12 tiles, 3 waves of 132 SMs; two chunks of
    # 512 rows at once are 96 tiles, one wave of 132 SMs. The row-parallel GEMM's 4096 columns
    # keep whole waves.
    col, row = chunked_gemm_loss(tpm.spec.layers[blocks[0]], 8, 2, get_gpu("h100"))
    assert col == pytest.approx((384 / 396) / (96 / 132) - 1.0) and row == pytest.approx(0.0)
    assert chunked_gemm_loss(tpm.spec.layers[blocks[0]], 1, 2, get_gpu("h100")) == (0.0, 0.0)


@pytest.mark.parametrize("p, m", [(2, 4), (2, 10), (4, 8), (4, 18), (8, 16), (8, 34)])
def test_dualpipe_compute_replays_the_program_with_free_transfers(p, m):
    """plan's closed form for DualPipe (dualpipe_compute_s) is the pipeline program's step with free
    transfers, also where the chunks differ: the end stages hold the embedding and the output layer
    (heavier chunks), where the paper's bubble for the heaviest chunk overcounts."""
    from dpsim.strategies.pipeline import dualpipe_compute_s, dualpipe_stage_times

    def size(s, c):  # stage 0's chunk 1 and stage p-1's chunk 0 end their direction: the output layer
        return 1.0 + (0.5 if (s, c) in ((0, 1), (p - 1, 0)) else 0.0) + (0.2 if (s, c) in ((0, 0), (p - 1, 1)) else 0.0)

    f = [[1.0 * size(s, c) for c in range(2)] for s in range(p)]
    b = [[2.0 * size(s, c) for c in range(2)] for s in range(p)]
    w = [[0.7 * size(s, c) for c in range(2)] for s in range(p)]
    chunks = tuple(tuple(ChunkWork(stage=s, chunk=c, layers=(
        LayerWork(index=c * p + s, forward_s=f[s][c], backward_s=b[s][c], compute_forward_s=f[s][c],
                  compute_backward_s=b[s][c], recompute_s=0.0, tp_comm_s=0.0, tp_exposed_s=0.0, grad_numel=100,
                  weight_grad_s=w[s][c]),)) for c in range(2)) for s in range(p))
    layout = Layout(pp=p, schedule="dualpipe", micro_batches=m)
    plan = build_pipeline_program(chunks, layout, p2p_bytes=0.0, gather_s=0.0, optimizer_s=[0.0] * p, dp=_NO_DP)
    played = run_pipeline(plan.program, lambda g, op, s: 0.0).step_time_s
    assert dualpipe_compute_s(p, m, f, b, w) == pytest.approx(played, rel=1e-12)
    # Each stage ends with a weight-gradient pass W (where its reductions launch, plan's stage_dp):
    # one direction's last W is the stage's last op, the other's ends before it.
    ends, grads = dualpipe_stage_times(p, m, f, b, w)
    assert all(max(g) == end and min(g) < end for g, end in zip(grads, ends))
    # The paper's bubble for the heaviest chunk (what plan used before) is above it once p > 2.
    heavy = (p / 2 - 1) * (f[0][1] + b[0][1] + b[0][1] - 3 * w[0][1])
    if p > 2:
        assert dualpipe_compute_s(p, m, f, b, w) < m / 2 * max(sum(f[s]) + sum(b[s]) for s in range(p)) + heavy


@pytest.mark.parametrize("schedule, v", [("1f1b", 1), ("1f1b-interleaved", 2), ("zb-h1", 1), ("dualpipe", 2)])
@pytest.mark.parametrize("strategy", ["zero1", "fsdp"])
def test_parameter_gathers_follow_first_use(schedule, v, strategy):
    """Each stage queues its parameter all-gathers in the order its schedule first runs their layers
    (a framework prefetches them so): the chunk whose first forward comes first, then by layer. DualPipe's
    stages past p/2 start with chunk 1 (the direction fed from the last stage)."""
    p, m = 4, 8
    dp = DataParallelPlan(strategy=strategy, dp=8, overlap=True, bucket_elements=100, grad_bytes=2, weight_bytes=2)
    layout = Layout(pp=p, dp=8, virtual_stages=v, schedule=schedule, micro_batches=m, strategy=strategy)
    plan = build_pipeline_program(_uniform(p, v), layout, p2p_bytes=0.0, gather_s=0.0, optimizer_s=[0.0] * p,
                                  dp=dp)
    for s, st in enumerate(plan.program.stages):
        names = [plan.program.comms[c].name for c in st.comms_at_start]
        chunks = [int(n.split("chunk ")[1].split()[0]) for n in names if "all-gather" in n]
        assert len(chunks) == v
        slots = schedule_slots(schedule, p, v, m, s)
        first_f = sorted(range(v), key=lambda c: slots.index(next(x for x in slots if x[0] == "F" and x[1] == c)))
        assert chunks == first_f
        if schedule == "dualpipe":
            assert chunks == ([0, 1] if s < p // 2 else [1, 0])
