"""predict --tp/--pp with a calibration profile: the layout path charges the step right after
a wait on the network exactly as the data-parallel path does (one function, same keys), and
slows the collectives that run beside compute by the profile's measured ``comm_slowdown``
with the data-parallel engines' rule (golden cases on the pipeline engine and layer_work,
a hand-computed move of a calibrated layout, nothing moved without it)."""

from __future__ import annotations

import pytest
from test_calibrate_provenance import config, cpu_profile, measured_step  # helpers only

from dpsim.predict.run import predict


def _layout(path: str, **changes):
    # Two pipeline stages on four one-rank hosts: a data-parallel pair per stage, so stage 0
    # waits on the network for its gradients.
    return config(path, gpus=4, pp=2, global_batch=8, **changes)


def test_the_layout_step_moves_by_exactly_the_after_wait_charge(tmp_path):
    base = predict(_layout(cpu_profile(tmp_path, step=measured_step(), name="plain")))
    assert base.layout is not None and base.provenance.after_comm is None
    assert "after_comm" not in base.provenance.to_dict()
    assert base.exposed_comm_s > 0.05  # bert-base's gradients over 120 MB/s: mostly exposed
    extra_s = 0.004
    for wait_s, share in ((base.exposed_comm_s, 1.0), (2 * base.exposed_comm_s, 0.5)):
        step = measured_step(after_comm_extra_s=extra_s, after_comm_wait_s=wait_s)
        p = predict(_layout(cpu_profile(tmp_path, step=step, name=f"w{share}")))
        assert p.step_time_s == pytest.approx(base.step_time_s + extra_s * share, rel=1e-9)
        assert p.simulation.steps[0].step_time_s == pytest.approx(p.step_time_s, rel=1e-12)
        assert p.samples_per_s == pytest.approx(8 / p.step_time_s, rel=1e-12)
        assert p.compute_s == pytest.approx(base.compute_s)  # one GPU waits on nothing
        assert p.exposed_comm_s == pytest.approx(base.exposed_comm_s)
        after = p.provenance.to_dict()["after_comm"]
        assert after == pytest.approx({"extra_s": extra_s, "wait_s": wait_s, "charged_s": extra_s * share})
        assert "right after waiting on the network" in p.provenance.compute.detail
    # Measured faster within noise: never a credit.
    neg = measured_step(after_comm_extra_s=-0.002, after_comm_wait_s=0.2)
    assert predict(_layout(cpu_profile(tmp_path, step=neg, name="neg"))).step_time_s == pytest.approx(
        base.step_time_s, rel=1e-9)


def test_a_layout_without_network_waits_is_charged_nothing(tmp_path):
    # pp = 2 on two hosts, dp = 1: no gradient all-reduce, so nothing exposed, nothing charged.
    step = measured_step(after_comm_extra_s=0.004, after_comm_wait_s=0.01)
    p = predict(config(cpu_profile(tmp_path, step=step, name="pp"), pp=2, global_batch=8))
    plain = predict(config(cpu_profile(tmp_path, step=measured_step(), name="pp0"), pp=2, global_batch=8))
    assert p.exposed_comm_s == 0.0 and p.provenance.after_comm.charged_s == 0.0
    assert p.step_time_s == pytest.approx(plain.step_time_s, rel=1e-12)


# ------------------------------------------------------------------ a measured comm_slowdown
# A profile's comm_slowdown (a collective 1 + comm_slowdown times slower while compute runs
# beside it) is applied by the layout path with the data-parallel engines' rule
# (dpsim.engine.simulate.comm_rate): golden cases on the pipeline engine, the hidden
# tensor-parallel collectives of layer_work, and a calibrated layout prediction.


def _one_stage(comm_s: float = 2.0):
    from dpsim.engine.pipeline import PipelineProgram, StageOp, StageProgram
    from dpsim.engine.program import CommOp

    # a (1 s) launches the gradient all-reduce, b (1 s) computes beside it, the optimizer waits.
    ops = (StageOp(kind="backward", name="a", duration_s=1.0, launches=(0,)),
           StageOp(kind="backward", name="b", duration_s=1.0),
           StageOp(kind="optimizer", name="opt", duration_s=0.5, waits=(0,)))
    return PipelineProgram(stages=(StageProgram(ops=ops),),
                           comms=(CommOp(name="grads", op="all_reduce", size_bytes=1.0, group="dp"),)), comm_s


@pytest.mark.parametrize("overlap_slowdown, comm_slowdown, step_s", [
    (0.0, 0.0, 3.5),                    # all-reduce 1..3 s, optimizer 3..3.5 s
    (0.0, 0.5, 1 + 1 + (2.0 - 1 / 1.5) + 0.5),  # 1 s beside b does 1/1.5 s of it, the rest alone
    (0.1, 0.5, 1 + 1.1 + (2.0 - 1.1 / 1.5) + 0.5),  # b lasts 1.1 s beside it, which does 1.1/1.5 s of it
    (0.1, 0.0, 3.5),
])
def test_a_collective_beside_compute_runs_comm_slowdown_slower(overlap_slowdown, comm_slowdown, step_s):
    from dpsim.engine.pipeline import run_pipeline

    prog, comm_s = _one_stage()
    r = run_pipeline(prog, lambda g, op, s: comm_s, overlap_slowdown=overlap_slowdown, comm_slowdown=comm_slowdown)
    assert r.step_time_s == pytest.approx(step_s, rel=1e-12)
    (ar,) = [e for e in r.trace if e.bucket == 0]
    assert ar.start_s == pytest.approx(1.0) and ar.end_s == pytest.approx(step_s - 0.5, rel=1e-12)
    assert r.stages[0].comm_s == pytest.approx(step_s - 1.5, rel=1e-12)  # what it took, slowed


def test_a_collective_of_two_stages_is_slowed_while_either_computes():
    from dpsim.engine.pipeline import (
        PipelineProgram,
        StageOp,
        StageProgram,
        run_pipeline,
    )
    from dpsim.engine.program import CommOp

    # The tied-embedding all-reduce of stage 0 (idle, waiting) and stage 1 (computing 2 s).
    prog = PipelineProgram(
        stages=(StageProgram(ops=(StageOp(kind="backward", name="b0", duration_s=1.0, launches=(0,)),
                                  StageOp(kind="optimizer", name="o0", duration_s=0.5, waits=(0,)))),
                StageProgram(ops=(StageOp(kind="backward", name="b1", duration_s=1.0, launches=(0,)),
                                  StageOp(kind="backward", name="c1", duration_s=2.0)))),
        comms=(CommOp(name="emb", op="all_reduce", size_bytes=1.0, group="emb"),))
    plain = run_pipeline(prog, lambda g, op, s: 2.0)
    slowed = run_pipeline(prog, lambda g, op, s: 2.0, comm_slowdown=1.0)
    assert plain.step_time_s == pytest.approx(1.0 + 2.0 + 0.5)
    # 1..3 s beside c1 at half pace does 1 s of its 2 s; the last second alone: ends at 4 s.
    assert slowed.step_time_s == pytest.approx(4.0 + 0.5, rel=1e-12)
    assert slowed.stages[0].wait_comm_s == pytest.approx(3.0, rel=1e-12)


def test_transfers_and_a_zero_comm_slowdown_play_the_step_unchanged():
    from dpsim.engine.pipeline import (
        PipelineProgram,
        StageOp,
        StageProgram,
        Transfer,
        run_pipeline,
    )

    # Point-to-point transfers block both stages here: nothing computes beside them.
    prog = PipelineProgram(
        stages=(StageProgram(ops=(StageOp(kind="forward", name="f0", duration_s=1.0, sends=(0,)),
                                  StageOp(kind="backward", name="b0", duration_s=2.0, needs=(1,)))),
                StageProgram(ops=(StageOp(kind="forward", name="f1", duration_s=1.0, needs=(0,)),
                                  StageOp(kind="backward", name="b1", duration_s=2.0, sends=(1,))))),
        transfers=(Transfer(name="act", src=0, dst=1, size_bytes=1.0), Transfer(name="grad", src=1, dst=0,
                                                                                 size_bytes=1.0)))
    plain = run_pipeline(prog, lambda g, op, s: 0.25, overlap_slowdown=0.1)
    assert run_pipeline(prog, lambda g, op, s: 0.25, overlap_slowdown=0.1, comm_slowdown=0.7) == plain
    prog1, comm_s = _one_stage()
    assert (run_pipeline(prog1, lambda g, op, s: comm_s, overlap_slowdown=0.1, comm_slowdown=0.0)
            == run_pipeline(prog1, lambda g, op, s: comm_s, overlap_slowdown=0.1))


@pytest.mark.parametrize("bad", [-0.1, float("nan")])
def test_a_negative_comm_slowdown_is_refused_in_one_line(bad):
    from dpsim.engine.pipeline import run_pipeline
    from dpsim.errors import ConfigError

    prog, comm_s = _one_stage()
    with pytest.raises(ConfigError, match=r"^comm slowdown: .* expected a number >= 0$"):
        run_pipeline(prog, lambda g, op, s: comm_s, comm_slowdown=bad)


def _tp_work(overlap: str, *, sequence_parallel: bool, cost_per_byte_s: float, overlap_slowdown: float,
             comm_slowdown: float):
    from dpsim.hardware import get_gpu
    from dpsim.strategies.layout import Layout, layer_work
    from dpsim.strategies.tensor import tp_model
    from dpsim.workload.catalog import get_model
    from dpsim.workload.compute import compute_profile
    from dpsim.workload.precision import get_precision

    tpm = tp_model(get_model("gpt2"), 4, sequence_parallel=sequence_parallel)
    bf16 = get_precision("bf16-mixed")
    shard = compute_profile(tpm.spec, get_gpu("h100"), micro_batch=2, precision=bf16, optimizer="adamw")
    layout = Layout(tp=4, micro_batch=2, sequence_parallel=sequence_parallel, tp_comm_overlap=overlap)
    work = layer_work(tpm, shard, layout, tp_cost=lambda op, size: size * cost_per_byte_s,
                      overlap_slowdown=overlap_slowdown, comm_slowdown=comm_slowdown)
    return tpm, work


def _total_s(work) -> float:
    return sum(w.forward_s + w.backward_s for w in work)


@pytest.mark.parametrize("sequence_parallel", [False, True])
def test_blocking_tensor_parallel_collectives_are_not_slowed(sequence_parallel):
    kw = {"sequence_parallel": sequence_parallel, "cost_per_byte_s": 1 / 100e9, "overlap_slowdown": 0.1}
    assert _tp_work("off", comm_slowdown=0.5, **kw)[1] == _tp_work("off", comm_slowdown=0.0, **kw)[1]


@pytest.mark.parametrize("overlap", ["backward", "full"])
def test_hidden_tensor_parallel_collectives_slow_their_gemms_longer(overlap):
    # Collectives far shorter than their GEMMs stay hidden even 1.5x slower (nothing more
    # exposed), but each hidden second now lasts 1.5 s beside its GEMM, slowing it that long.
    o, c = 0.1, 0.5
    kw = {"sequence_parallel": False, "cost_per_byte_s": 1 / 1e15, "overlap_slowdown": o}
    _, base = _tp_work(overlap, comm_slowdown=0.0, **kw)
    _, slowed = _tp_work(overlap, comm_slowdown=c, **kw)
    hidden = sum(w.tp_comm_s - w.tp_exposed_s for w in base)
    assert [w.tp_exposed_s for w in slowed] == [w.tp_exposed_s for w in base]
    if overlap == "backward":
        assert hidden > 0
    assert _total_s(slowed) - _total_s(base) == pytest.approx(hidden * o / (1 + o) * c, rel=1e-9, abs=1e-18)
    # What the collectives take: the hidden part 1 + c times its modelled time.
    assert sum(w.tp_comm_s for w in slowed) == pytest.approx(sum(w.tp_comm_s for w in base) + c * hidden, rel=1e-9)


def test_a_gemm_covers_less_of_a_slowed_collective():
    # Collectives longer than their GEMMs, no SM contention: each block's input-gradient
    # all-reduce hides behind the weight-gradient GEMM (~ the column-parallel linears'
    # forward), which now covers only 1 / (1 + c) of its time's worth: g·c/(1 + c) more exposed.
    c = 0.5
    kw = {"sequence_parallel": False, "cost_per_byte_s": 1 / 1e6, "overlap_slowdown": 0.0}
    tpm, base = _tp_work("backward", comm_slowdown=0.0, **kw)
    _, slowed = _tp_work("backward", comm_slowdown=c, **kw)
    covers = []
    for layer, w in zip(tpm.layers, base):
        flops = layer.col_flops_per_sample + layer.row_flops_per_sample + layer.core_flops_per_sample
        if layer.role == "block" and w.tp_comm_s > 0:
            covers.append(w.compute_forward_s * layer.col_flops_per_sample / flops)
    assert covers and all(g > 0 for g in covers)
    expected = sum(covers) * c / (1 + c)
    assert sum(w.tp_exposed_s for w in slowed) - sum(w.tp_exposed_s for w in base) == pytest.approx(expected,
                                                                                                     rel=1e-9)
    assert _total_s(slowed) - _total_s(base) == pytest.approx(expected, rel=1e-9)
    # Each hidden piece now takes its whole GEMM: covered g/(1 + c) of it, g of wall time.
    taken = sum(w.tp_comm_s for w in slowed) - sum(w.tp_comm_s for w in base)
    assert taken == pytest.approx(expected, rel=1e-9)


def test_a_measured_comm_slowdown_moves_an_overlapped_layout_prediction(tmp_path):
    # Stage 0's gradient all-reduces start in its last micro-batch's backward and (bert-base's
    # gradients over 120 MB/s) keep its stream busy to the end: beside that backward they run
    # 1 + c times slower, so the step ends later by c / (1 + c) of the compute they overlapped
    # (its communication time less its exposed part), and never by more than c times one
    # micro-batch's backward (what can run beside them, slowed by the overlap slowdown).
    step = measured_step()
    base = predict(_layout(cpu_profile(tmp_path, step=step, comm_slowdown=0.0, name="c0")))
    absent = predict(_layout(cpu_profile(tmp_path, step=step, comm_slowdown=None, name="cnone")))
    assert absent.step_time_s == base.step_time_s and absent.exposed_comm_s == base.exposed_comm_s
    st0 = base.layout.pipeline.stages[0]
    assert st0.end_s == base.layout.pipeline.step_time_s  # stage 0 ends the step
    beside_s = st0.comm_s - st0.exposed_comm_s
    assert beside_s > 0
    one_backward_s = base.layout.stages[0].backward_s * (1 + base.config.calibration.overlap_slowdown)
    for c in (0.2, 0.5, 1.0):
        p = predict(_layout(cpu_profile(tmp_path, step=step, comm_slowdown=c, name=f"c{c}")))
        moved = p.step_time_s - base.step_time_s
        assert 0 < moved <= c * one_backward_s
        assert moved == pytest.approx(beside_s * c / (1 + c), rel=1e-6)
        assert p.layout.pipeline.stages[0].comm_s == pytest.approx(st0.comm_s + moved, rel=1e-9)
        assert p.compute_s == base.compute_s  # the one-GPU step has no collectives
        detail = p.provenance.to_dict()["overlap"]["detail"]
        assert f"collectives {100 * c:.1f} % slower while compute runs (measured)" in detail
    assert "slower while compute runs" not in base.provenance.overlap.detail


def test_the_layout_shows_the_comm_slowdown_as_the_data_parallel_path_does(tmp_path):
    path = cpu_profile(tmp_path, step=measured_step(), comm_slowdown=0.5, name="shown")
    ddp = predict(config(path, gpus=4)).provenance.to_dict()["overlap"]
    lay = predict(_layout(path)).provenance.to_dict()["overlap"]
    assert lay == ddp and "collectives 50.0 % slower while compute runs (measured)" in lay["detail"]


def test_a_measured_comm_slowdown_exposes_more_of_the_hidden_tensor_parallel_collectives(tmp_path):
    # tp = 2 across two CPU hosts (120 MB/s): each block's input-gradient all-reduce is longer
    # than the weight-gradient GEMM it hides behind, so the GEMM covered g of it; slowed 1 + c
    # times beside it, it covers g / (1 + c): c / (1 + c) of the hidden time is exposed.
    step = measured_step()

    def run(c):
        return predict(config(cpu_profile(tmp_path, step=step, comm_slowdown=c, name=f"tp{c}"), gpus=2, tp=2,
                              tp_across_network=True, global_batch=4))

    base, c = run(0.0), 0.5
    hidden_s = base.layout.tp_comm_s - base.layout.tp_exposed_s
    assert hidden_s > 0 and base.layout.layout.tp_comm_overlap == "backward"
    p = run(c)
    moved = p.step_time_s - base.step_time_s
    assert moved == pytest.approx(hidden_s * c / (1 + c), rel=1e-6)
    assert p.layout.tp_exposed_s - base.layout.tp_exposed_s == pytest.approx(moved, rel=1e-6)


def test_the_layout_warns_of_collectives_the_profile_did_not_measure_as_ddp_does(tmp_path):
    # The CPU fixture measured all-reduces up to 32 MiB; bert-base's gradients are larger, in
    # one bucket-sized all-reduce on the data-parallel path and in each stage's reduction here.
    path = cpu_profile(tmp_path, step=measured_step(), name="range")
    ddp = predict(config(path, gpus=4)).provenance.warnings
    lay = predict(_layout(path)).provenance.warnings
    assert any("larger than the profile measured (inter_node up to 32 MiB)" in w for w in ddp)
    assert any("larger than the profile measured (inter_node up to 32 MiB)" in w for w in lay)
