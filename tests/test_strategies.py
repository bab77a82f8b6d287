"""Sharding strategies as step programs: schedules, invariants and the papers' volumes."""

from __future__ import annotations

import itertools
import json

import pytest

from dpsim.collectives.nccl import NcclCollectives
from dpsim.collectives.groups import (
    GroupCollectives,
    hybrid_topologies,
)
from dpsim.collectives.ops import bus_factor
from dpsim.engine.program import CommOp, ComputeTask, StepProgram
from dpsim.engine.simulate import comm_op_time_s, run_program
from dpsim.errors import ConfigError
from dpsim.hardware import get_gpu
from dpsim.predict.config import PredictConfig
from dpsim.predict.run import predict, resolve_topology
from dpsim.strategies.build import build_step_program
from dpsim.strategies.registry import STRATEGIES
from dpsim.strategies.shards import (
    DEEPSPEED_REDUCE_BUCKET_ELEMENTS,
    deepspeed_partition_numel,
    fsdp2_shard_numel,
    fsdp_flat_numel,
    fsdp_shard_numel,
    wrap_units,
    zero_redundancy_optimizer_partition,
)
from dpsim.strategies.zero import deepspeed_buckets
from dpsim.workload.architectures import (
    GPT2Config,
    LlamaConfig,
    ResNetConfig,
    build_model,
)
from dpsim.workload.catalog import get_model
from dpsim.workload.compute import compute_profile
from dpsim.workload.precision import get_precision
from dpsim.workload.spec import LayerSpec, ModelSpec, ParamSpec

BF16 = get_precision("bf16-mixed")
H100 = get_gpu("h100")


def _case(model, micro_batch=2):
    return model, compute_profile(model, H100, micro_batch=micro_batch, precision=BF16, optimizer="adamw")


def _topology(gpus=16, link="infiniband"):
    return resolve_topology(PredictConfig(gpus=gpus, link=link))


def _program(strategy, model, compute, n=16, gpn=8, **kw):
    return build_step_program(strategy, model, compute, precision=BF16, n_gpus=n, gpus_per_node=gpn, **kw)


def _comm_indices(sp, op=None, group=None):
    return [i for i, c in enumerate(sp.program.comms)
            if (op is None or c.op == op) and (group is None or c.group == group)]


def _launch_position(sp):
    return {op: k for k, op in enumerate(sp.program.launch_order)}


MODELS = {
    "gpt2": get_model("gpt2"),
    "llama-tiny": build_model(LlamaConfig(vocab_size=1000, hidden_size=256, intermediate_size=688,
                                          num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                                          max_position_embeddings=128)),
    "resnet-tiny": build_model(ResNetConfig(layers=(2, 1, 1, 1), planes=(8, 16, 32, 64), stem_channels=16,
                                            num_classes=10, image_size=64)),
}


# ------------------------------------------------------------------- DDP


def test_ddp_accumulation_all_reduces_only_in_the_last_micro_batch():
    model, compute = _case(MODELS["gpt2"])
    sp = _program("ddp", model, compute, grad_accum=3)
    tasks = sp.program.tasks
    launches = [t for t in tasks if t.launch_after]
    assert launches and all("(micro-batch 3)" in t.name for t in launches)
    assert sum(t.kind == "forward" for t in tasks) == 3 * len(model.layers)
    one = _program("ddp", model, compute)
    assert [c.size_bytes for c in sp.program.comms] == [c.size_bytes for c in one.program.comms]


# ------------------------------------------------------------- invariants


@pytest.mark.parametrize("strategy", list(STRATEGIES))
@pytest.mark.parametrize("model_name", list(MODELS))
@pytest.mark.parametrize("accum,ckpt,overlap", [(1, False, True), (3, True, True), (2, False, False)])
def test_step_between_max_and_sum_of_compute_and_comm(strategy, model_name, accum, ckpt, overlap):
    model, compute = _case(MODELS[model_name])
    topo = _topology(16)
    coll = GroupCollectives(topo, lambda comm: NcclCollectives(comm.topology))
    sp = _program(strategy, model, compute, grad_accum=accum, activation_checkpointing=ckpt, overlap=overlap)
    sim = run_program(sp.program, coll, steps=2, overlap_slowdown=0.0)
    compute_s = sum(t.duration_s for t in sp.program.tasks)
    comm_s = sum(comm_op_time_s(coll, c) for c in sp.program.comms)
    for step in sim.steps:
        assert step.step_time_s >= max(compute_s, comm_s) * (1 - 1e-12)
        assert step.step_time_s <= (compute_s + comm_s) * (1 + 1e-12)
    # every gradient is reduced: once per synchronising micro-batch
    syncs = accum if strategy in ("zero2", "zero3") else 1
    grad = sum(sp.program.comms[i].size_bytes for i in sp.gradient_ops
               if sp.program.comms[i].group != "inter")
    assert grad >= syncs * model.param_count * BF16.grad_bytes
    assert grad <= syncs * (model.param_count + 64 * len(model.layers)) * BF16.grad_bytes


def _bus(sp, n):
    return sum(bus_factor(c.op, n) * c.size_bytes for c in sp.program.comms)


@pytest.mark.parametrize("n", [8, 16, 64])
def test_papers_volumes_zero12_like_ddp_zero3_one_and_a_half(n, monkeypatch):
    """ZeRO paper Sec. 7: P_os and P_os+g move what DDP's all-reduce moves (reduce-scatter +
    all-gather), P_os+g+p 1.5x (parameters gathered for forward and again for backward). DeepSpeed
    frees every submodule after use only with ``stage3_max_reuse_distance`` 0 (its 1e9 default keeps
    a model this small gathered from forward to backward, and its 1e5-element persistence threshold
    leaves parameters this small whole: tests/test_deepspeed_fetch.py)."""
    monkeypatch.setattr("dpsim.strategies.deepspeed_fetch.DEEPSPEED_MAX_REUSE_DISTANCE_NUMEL", 0)
    monkeypatch.setattr("dpsim.strategies.deepspeed_fetch.DEEPSPEED_PARAM_PERSISTENCE_THRESHOLD_NUMEL", 0)
    # Parameter counts divisible by 2n: no padding, exact ratios.
    d = 64 * n
    layers = [LayerSpec(name="emb", params=(ParamSpec(name="emb.weight", shape=(8, d)),),
                        forward_flops_per_sample=1e6)]
    for i in range(4):
        layers.append(LayerSpec(name=f"b{i}", unit=f"b{i}", forward_flops_per_sample=1e9, input_bytes_per_sample=1e3,
                                params=(ParamSpec(name=f"b{i}.w", shape=(d, 4 * n)),
                                        ParamSpec(name=f"b{i}.v", shape=(2 * n,)))))
    layers.append(LayerSpec(name="head", params=(ParamSpec(name="head.w", shape=(d, 2)),),
                            forward_flops_per_sample=1e6))
    model, compute = _case(ModelSpec(name="toy", layers=tuple(layers)))
    ddp = _bus(_program("ddp", model, compute, n=n), n)
    assert ddp == pytest.approx(2 * (n - 1) / n * model.param_count * 2, rel=1e-12)
    for s in ("zero1", "zero2", "fsdp-shard-grad-op"):
        assert _bus(_program(s, model, compute, n=n), n) == pytest.approx(ddp, rel=1e-12), s
    assert _bus(_program("zero3", model, compute, n=n), n) == pytest.approx(1.5 * ddp, rel=1e-12)
    fsdp = _bus(_program("fsdp", model, compute, n=n), n)
    root = model.layers[0].param_count + model.layers[-1].param_count
    # FSDP keeps the root unit from forward to backward: one all-gather of it saved.
    assert fsdp == pytest.approx(1.5 * ddp - (n - 1) / n * root * 2, rel=1e-12)


def test_padding_of_indivisible_models_is_the_implementations():
    model, compute = _case(MODELS["gpt2"])
    n = 48
    z1 = _program("zero1", model, compute, n=n)
    ag = [c for c in z1.program.comms if c.op == "all_gather"]
    assert len(ag) == 1 and ag[0].size_bytes == deepspeed_partition_numel(model.param_count, n) * n * 2
    f = _program("fsdp", model, compute, n=n)
    rs = sum(c.size_bytes for c in f.program.comms if c.op == "reduce_scatter")
    assert rs == sum(fsdp_shard_numel([p.numel for p in u.params], n) * n * 2
                     for u in wrap_units(model) if u.params)


# ------------------------------------------------------------- schedules


def test_fsdp_backward_pre_prefetch_order_and_root_kept():
    model, compute = _case(MODELS["llama-tiny"])
    sp = _program("fsdp", model, compute)
    comms = sp.program.comms
    pos = _launch_position(sp)
    names = {c.name: i for i, c in enumerate(comms)}
    blocks = [f"model.layers.{i}" for i in range(4)]
    # Root and the first block are gathered before the first forward task; the next one when
    # the previous starts (one unit in flight ahead).
    assert set(sp.program.launch_at_start) == {names["all-gather (root) (forward)"],
                                               names[f"all-gather {blocks[0]} (forward)"]}
    assert "all-gather (root) (backward)" not in names  # root kept (_post_forward_reshard)
    # BACKWARD_PRE: AG(k-1) is issued before RS(k), and RS(k) before AG(k-2).
    for k in range(3, 1, -1):
        ag_prev = pos[names[f"all-gather {blocks[k - 1]} (backward)"]]
        rs_k = pos[names[f"reduce-scatter {blocks[k]}"]]
        assert ag_prev < rs_k
        if k - 2 >= 0:
            assert rs_k < pos[names[f"all-gather {blocks[k - 2]} (backward)"]]
    # the root's gradients are reduced last, after the embedding's backward
    assert sp.program.launch_order[-1] == names["reduce-scatter (root)"]
    # every layer of a block waits for its gather
    forward = {t.name: t.wait_for for t in sp.program.tasks if t.kind == "forward"}
    backward = {t.name: t.wait_for for t in sp.program.tasks if t.kind == "backward"}
    assert names[f"all-gather {blocks[2]} (forward)"] in forward[f"{blocks[2]}.mlp"]
    assert names[f"all-gather {blocks[2]} (backward)"] in backward[f"{blocks[2]}.mlp"]


def test_zero3_regathers_the_root_and_shard_grad_op_never_regathers(monkeypatch):
    monkeypatch.setattr("dpsim.strategies.deepspeed_fetch.DEEPSPEED_MAX_REUSE_DISTANCE_NUMEL", 0)
    model, compute = _case(MODELS["llama-tiny"])
    z3 = {c.name for c in _program("zero3", model, compute).program.comms}
    assert "all-gather (root) (backward)" in z3
    sgo = _program("fsdp-shard-grad-op", model, compute, grad_accum=3).program.comms
    ag = [c.name for c in sgo if c.op == "all_gather"]
    assert ag and all("micro-batch 1" in n and "(forward)" in n for n in ag)  # kept under no_sync
    rs = [c.name for c in sgo if c.op == "reduce_scatter"]
    assert rs and all("micro-batch 3" in n for n in rs)


def test_accumulation_per_strategy():
    model, compute = _case(MODELS["llama-tiny"])
    n_units = len([u for u in wrap_units(model) if u.params])

    def rs_micro_batches(strategy):
        sp = _program(strategy, model, compute, grad_accum=3)
        return {c.name.rsplit("(micro-batch ", 1)[1].rstrip(")") for c in sp.program.comms
                if c.op == "reduce_scatter"}

    assert rs_micro_batches("zero1") == {"3"}  # only at the accumulation boundary
    assert rs_micro_batches("zero2") == {"1", "2", "3"}  # ZeRO >= 2 communicates every micro-batch
    assert rs_micro_batches("zero3") == {"1", "2", "3"}
    assert rs_micro_batches("fsdp") == {"3"}  # no_sync()
    fsdp = _program("fsdp", model, compute, grad_accum=3)
    assert sum(c.op == "all_gather" for c in fsdp.program.comms) == 3 * (2 * n_units - 1)


def test_zero12_param_all_gather_after_the_optimizer_ends_the_step():
    model, compute = _case(MODELS["gpt2"])
    sp = _program("zero2", model, compute)
    tasks = sp.program.tasks
    opt = next(k for k, t in enumerate(tasks) if t.name == "optimizer")
    ag = next(i for i, c in enumerate(sp.program.comms) if c.op == "all_gather")
    assert tasks[opt].launch_after == (ag,) and tasks[-1].wait_for == (ag,) and tasks[-1].duration_s == 0
    # the optimizer updates 1/N of the parameters
    assert tasks[opt].duration_s == pytest.approx(
        compute.optimizer_s * deepspeed_partition_numel(model.param_count, 16) / model.param_count)
    # ZeRO-2 without overlap_comm: backward waits for each bucket it reduced (5e8-element
    # buckets: llama-2-7b has several)
    big, big_compute = _case(get_model("llama-2-7b"), micro_batch=1)
    blocking = _program("zero2", big, big_compute, overlap=False).program
    assert len([c for c in blocking.comms if c.op == "reduce_scatter"]) == 14
    assert [t for t in blocking.tasks if t.kind == "backward" and t.wait_for]
    overlapped = _program("zero2", big, big_compute).program
    assert not [t for t in overlapped.tasks if t.kind == "backward" and t.wait_for]


def test_deepspeed_buckets_flush_before_overflow():
    ps = [ParamSpec(name=f"p{i}", shape=(n,)) for i, n in enumerate([3, 4, 2, 9, 1])]
    assert [[p.name for p in b] for b in deepspeed_buckets(ps, 7)] == [["p0", "p1"], ["p2"], ["p3"], ["p4"]]
    assert DEEPSPEED_REDUCE_BUCKET_ELEMENTS == 500_000_000


def test_activation_checkpointing_recomputes_each_block_before_its_backward():
    model, compute = _case(MODELS["llama-tiny"])
    plain = _program("ddp", model, compute)
    ck = _program("ddp", model, compute, activation_checkpointing=True)
    rec = [t for t in ck.program.tasks if t.kind == "recompute"]
    assert len(rec) == 4
    fwd_blocks = sum(l.forward_s for l, spec in zip(compute.layers, model.layers) if spec.unit is not None)
    assert sum(t.duration_s for t in rec) == pytest.approx(fwd_blocks)
    names = [(t.kind, t.name) for t in ck.program.tasks]
    assert names.index(("recompute", "recompute model.layers.3")) == names.index(("backward", "model.layers.3.mlp")) - 1
    sim = lambda sp: run_program(sp.program, NcclCollectives(_topology(16)), overlap_slowdown=0).steps[0]  # noqa
    assert sim(ck).backward_s == pytest.approx(sim(plain).backward_s + fwd_blocks)
    flat = build_model(ResNetConfig(layers=(1, 1, 1, 1), planes=(4, 8, 8, 8), num_classes=3, image_size=32))
    with pytest.raises(ConfigError, match="--activation-checkpointing"):
        _program("ddp", *_case(flat), activation_checkpointing=True, fsdp_unit="model")


# ------------------------------------------------------------- hybrid


def test_hybrid_topologies_split_intra_and_inter_node():
    topo = _topology(32, "ethernet")  # one 100 GbE NIC shared by 8 GPUs
    intra, inter = hybrid_topologies(topo)
    assert intra.n_gpus == 8 and intra.n_nodes == 1
    assert inter.n_gpus == 4 and inter.n_nodes == 4 and inter.spec.node.gpus_per_node == 1
    f, g = topo.spec.fabric, inter.spec.fabric
    assert g.nic_bandwidth_bytes_per_s == pytest.approx(f.nic_bandwidth_bytes_per_s * f.nics_per_node / 8)
    ib_intra, ib_inter = hybrid_topologies(_topology(32, "infiniband"))  # a NIC per GPU: full rate each
    fi = _topology(32, "infiniband").spec.fabric
    assert ib_inter.spec.fabric.nic_bandwidth_bytes_per_s == pytest.approx(fi.nic_bandwidth_bytes_per_s)
    coll = GroupCollectives(topo, lambda comm: NcclCollectives(comm.topology))
    size = 1e9
    # the inter-node ring of 4 ranks on 1/8 of a NIC each is slower per byte than the 8-GPU NVSwitch ring
    assert coll.group("inter").time("all_reduce", size).time_s > coll.group("intra").time("all_reduce", size).time_s
    assert coll.group("world") is coll.world and coll.time("all_gather", size) == coll.world.time("all_gather", size)
    with pytest.raises(ConfigError, match="communicator 'x'"):
        coll.group("x")


def test_hybrid_program_runs_on_sub_communicators():
    model, compute = _case(MODELS["llama-tiny"])
    sp = _program("fsdp-hybrid", model, compute, n=32, gpn=8)
    assert sp.shard_group_size == 8
    groups = {(c.op, c.group) for c in sp.program.comms}
    assert groups == {("all_gather", "intra"), ("reduce_scatter", "intra"), ("all_reduce", "inter")}
    pos = _launch_position(sp)
    for i, c in enumerate(sp.program.comms):
        if c.op == "all_reduce":  # the shard all-reduce right after its reduce-scatter
            rs = next(j for j, d in enumerate(sp.program.comms) if d.op == "reduce_scatter"
                      and d.name.removeprefix("reduce-scatter ") == c.name.removeprefix("all-reduce ")
                      .removesuffix(" shard across nodes"))
            assert pos[i] == pos[rs] + 1
            assert c.size_bytes * 8 == sp.program.comms[rs].size_bytes
    with pytest.raises(ConfigError, match="sub-communicators"):
        run_program(sp.program, NcclCollectives(_topology(32)))


def test_engine_comm_op_time_uses_the_group():
    topo = _topology(16)
    coll = GroupCollectives(topo, lambda comm: NcclCollectives(comm.topology))
    op = CommOp(name="x", op="all_reduce", size_bytes=1e8, group="intra")
    assert comm_op_time_s(coll, op) == coll.group("intra").time("all_reduce", 1e8).time_s
    prog = StepProgram(tasks=(ComputeTask(kind="forward", name="f", duration_s=0.0, launch_after=(0,)),
                              ComputeTask(kind="optimizer", name="o", duration_s=0.0, wait_for=(0,))),
                       comms=(op,))
    assert run_program(prog, coll).steps[0].step_time_s == pytest.approx(comm_op_time_s(coll, op))
    assert isinstance(coll, GroupCollectives)


# ------------------------------------------------------------- shard sizes


def test_shard_size_rules():
    assert fsdp_flat_numel([33, 33, 3333], 2) == 3399
    assert fsdp_shard_numel([33, 33, 3333], 2) == 1700
    # use_orig_params=True: each parameter 16-byte aligned (4 fp32), total padded to N
    assert fsdp_flat_numel([33, 33], 2, align_numel=4) == 36 + 33 + 1
    assert fsdp_flat_numel([33, 33], 3, align_numel=4) == 36 + 33
    assert fsdp2_shard_numel([(5, 3), (7,), ()], 2) == 3 * 3 + 4 + 1
    assert deepspeed_partition_numel(10, 4) == 4  # padded to 16 = 2 x 2 x 4
    ps = [ParamSpec(name=n, shape=(s,)) for n, s in [("a", 5), ("b", 9), ("c", 5), ("d", 1)]]
    parts = zero_redundancy_optimizer_partition(ps, 2)
    assert [[p.name for p in part] for part in parts] == [["b", "d"], ["a", "c"]]


@pytest.mark.parametrize("granularity", ["block", "layer", "model"])
def test_wrap_units_partition_the_parameters(granularity):
    model = MODELS["gpt2"]
    units = wrap_units(model, granularity)
    names = [p.name for u in units for p in u.params]
    assert sorted(names) == sorted(p.name for p in model.params)
    assert sum(u.is_root for u in units) <= 1
    if granularity == "block":
        assert len([u for u in units if not u.is_root]) == 12
    if granularity == "model":
        assert len(units) == 1 and units[0].is_root


@pytest.mark.parametrize("bad,flag", [
    (dict(strategy="zero4"), "--strategy"), (dict(grad_accum=0), "--grad-accum"),
    (dict(grad_accum=True), "--grad-accum"), (dict(fsdp_unit="tile"), "--fsdp-unit"),
])
def test_invalid_inputs_name_the_flag(bad, flag):
    model, compute = _case(MODELS["gpt2"])
    kwargs = dict(grad_accum=1, fsdp_unit="block")
    strategy = bad.pop("strategy", "ddp")
    kwargs.update(bad)
    with pytest.raises(ConfigError) as info:
        build_step_program(strategy, model, compute, precision=BF16, n_gpus=8, **kwargs)
    assert str(info.value).startswith(flag)


# ------------------------------------------------------------- predict


@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_predict_every_strategy(strategy):
    p = predict(PredictConfig(gpus=16, link="infiniband", model="gpt2", strategy=strategy, steps=1,
                              overlap_slowdown=0.0))
    assert p.strategy == strategy and p.memory.strategy == strategy
    assert p.step_time_s >= max(p.forward_s + p.backward_s, p.comm_s) * (1 - 1e-12)
    d = p.to_dict()
    assert d["strategy"] == strategy and set(d["comm_bytes_by_op"]) <= {"all_reduce", "reduce_scatter", "all_gather"}
    assert d["memory"]["strategy"] == strategy


def test_predict_accumulation_counts_every_micro_batch():
    one = predict(PredictConfig(gpus=16, link="infiniband", model="gpt2", steps=1))
    four = predict(PredictConfig(gpus=16, link="infiniband", model="gpt2", grad_accum=4, steps=1))
    assert four.samples_per_s == pytest.approx(4 * 4 * 16 / four.step_time_s)
    assert four.samples_per_s > one.samples_per_s  # comm amortised over 4 micro-batches
    assert four.comm_s == pytest.approx(one.comm_s)
    assert four.scaling_efficiency > one.scaling_efficiency


def test_predict_json_keeps_the_old_keys(capsys):
    from dpsim.cli.app import main

    assert main(["predict", "--gpus", "16", "--model", "gpt2", "--strategy", "zero3", "--grad-accum", "2",
                 "--activation-checkpointing", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    for key in ("step_time_s", "comm_s", "exposed_comm_s", "n_buckets", "gradient_bytes", "ring", "memory"):
        assert key in out
    for key in ("weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes", "comm_buffers_bytes",
                "overhead_bytes", "total_bytes", "capacity_bytes", "fits"):
        assert key in out["memory"]
    assert out["config"]["strategy"] == "zero3" and out["config"]["grad_accum"] == 2
    assert out["config"]["activation_checkpointing"] is True


@pytest.mark.parametrize("args,needle", [
    (["--strategy", "zero4"], "--strategy: 'zero4' is not known"),
    (["--grad-accum", "0"], "--grad-accum: 0 is not valid"),
    (["--fsdp-unit", "tile"], "--fsdp-unit: 'tile' is not known"),
])
def test_cli_bad_strategy_flags(capsys, args, needle):
    from dpsim.cli.app import main

    assert main(["predict", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1


def test_strategies_cover_the_issue_list():
    assert set(STRATEGIES) == {"ddp", "zero1", "zero2", "zero3", "fsdp", "fsdp-shard-grad-op", "fsdp-hybrid"}
    assert list(itertools.islice(STRATEGIES, 1)) == ["ddp"]
    _ = GPT2Config  # catalog configs build the tiny models above
