"""The one DDP step program (:func:`dpsim.strategies.ddp.ddp_program`): the registry's
``ddp`` and ``dpsim validate`` build it, from the model's buckets or measured ones."""

from __future__ import annotations

import pytest

from dpsim.errors import ConfigError
from dpsim.hardware import get_gpu
from dpsim.strategies.build import build_step_program
from dpsim.strategies.ddp import ddp_program, with_grad_dtype
from dpsim.validate.runner import predict_run
from dpsim.workload.buckets import Bucket, BucketPlan, assign_buckets
from dpsim.workload.catalog import get_model
from dpsim.workload.compute import ComputeProfile, LayerTime, compute_profile
from dpsim.workload.precision import get_precision
from dpsim.workload.roofline import HOST_OVERHEAD_PER_OP_S

BF16 = get_precision("bf16-mixed")


def _profile(n_layers, fwd=1.0, bwd=2.0, opt=0.5):
    layers = tuple(LayerTime(name=f"l{i}", forward_s=fwd, backward_s=bwd, param_names=(f"p{i}",))
                   for i in range(n_layers))
    return ComputeProfile(layers=layers, optimizer_s=opt, flops_per_step=1.0)


def _plan(groups, bytes_per_param=4):
    buckets = tuple(Bucket(index=i, param_names=tuple(f"p{j}" for j in g), size_bytes=len(g) * bytes_per_param,
                           dtype="float32", size_limit_bytes=1) for i, g in enumerate(groups))
    return BucketPlan(buckets=buckets, bucket_cap_bytes=1, first_bucket_cap_bytes=1)


def _launches(program):
    return {t.name: t.launch_after for t in program.tasks if t.launch_after}


def test_an_explicit_plan_launches_each_bucket_once_its_last_gradient_is_ready():
    sp = ddp_program(_profile(3), _plan([[2], [1, 0]]))
    # Backward runs l2, l1, l0: bucket 0 completes with l2, bucket 1 only with l0.
    assert _launches(sp.program) == {"l2": (0,), "l0": (1,)}
    assert sp.program.tasks[-1].kind == "optimizer" and sp.program.tasks[-1].wait_for == (0, 1)
    assert [c.size_bytes for c in sp.program.comms] == [4.0, 8.0]
    assert sp.gradient_ops == (0, 1) and sp.shard_group_size == 1 and sp.strategy == "ddp"
    # Without overlap every bucket waits for the whole backward.
    assert _launches(ddp_program(_profile(3), _plan([[2], [1, 0]]), overlap=False).program) == {"l0": (0, 1)}


def test_accumulation_reduces_in_the_last_micro_batch_only():
    sp = ddp_program(_profile(2), _plan([[1], [0]]), grad_accum=3)
    assert _launches(sp.program) == {"l1 (micro-batch 3)": (0,), "l0 (micro-batch 3)": (1,)}
    assert sum(t.kind == "backward" for t in sp.program.tasks) == 6


def test_copy_bandwidth_charges_both_copies_to_the_layer_that_made_the_gradients():
    compute = _profile(3)
    param_bytes = {"p0": 1e6, "p1": 2e6, "p2": 4e6}
    bw = 1e9
    plain = ddp_program(compute, _plan([[2, 1], [0]]), grad_accum=2).program
    copied = ddp_program(compute, _plan([[2, 1], [0]]), grad_accum=2, copy_bandwidth_bytes_per_s=bw,
                         param_bytes=param_bytes).program
    extra = {(t.kind, t.name): c.duration_s - t.duration_s for t, c in zip(plain.tasks, copied.tasks)}
    # Into the bucket when ready, back after the all-reduce: 2 x the layer's gradient bytes.
    charged = {("backward", f"l{i} (micro-batch 2)"): 2 * param_bytes[f"p{i}"] / bw for i in range(3)}
    # Forward, optimizer and the no_sync() micro-batch (the reducer's hooks return at once) copy nothing.
    assert extra == pytest.approx({k: charged.get(k, 0.0) for k in extra})
    assert copied.comms == plain.comms


@pytest.mark.parametrize("kwargs,needle", [
    ({"copy_bandwidth_bytes_per_s": 0.0, "param_bytes": {}}, "copy bandwidth"),
    ({"copy_bandwidth_bytes_per_s": 1e9}, "param_bytes"),
    ({"grad_accum": 0}, "--grad-accum"),
])
def test_bad_arguments_are_refused(kwargs, needle):
    with pytest.raises(ConfigError, match=needle):
        ddp_program(_profile(2), _plan([[1], [0]]), **kwargs)


def test_a_bucket_of_unknown_parameters_is_refused():
    with pytest.raises(ConfigError, match="belong to no layer"):
        ddp_program(_profile(2), _plan([[1], [0, 7]]))


@pytest.mark.parametrize("cap", [None, 1, 100])
def test_the_registry_builds_it_from_the_models_gradient_buckets(cap):
    model = get_model("gpt2")
    compute = compute_profile(model, get_gpu("h100"), micro_batch=2, precision=BF16, optimizer="adamw")
    sp = build_step_program("ddp", model, compute, precision=BF16, n_gpus=16, bucket_cap_mb=cap)
    plan = assign_buckets(with_grad_dtype(model, BF16.grad_dtype), bucket_cap_mb=cap)
    assert [c.size_bytes for c in sp.program.comms] == [float(b.size_bytes) for b in plan.buckets]
    assert sp.gradient_bytes == model.param_count * BF16.grad_bytes
    assert sp.communicator_sizes["world"] == 16


VALIDATE_MLP = "dpsim.validate.models:mlp:mlp_batch"


def _run(model, world_size, copy_bytes_per_s):
    """A ``dpsim validate`` run record (its measurement phases only) of ``model`` on
    ``world_size`` CPU ranks: 1 ms forward and 2 ms backward per layer, fast collectives."""
    layers = [{"name": layer.name, "forward_s": 1e-3, "backward_s": 2e-3} for layer in model.layers]
    n = len(layers)
    return {"model": VALIDATE_MLP, "micro_batch": 32, "world_size": world_size, "ranks_per_node": world_size,
            "bucket_cap_mb": 1.0, "threads": 1, "step": {"optimizer": "sgd", "loss": "classify"},
            "compute": {"forward_s": 1e-3 * n, "backward_s": 2e-3 * n, "layer_times": layers, "optimizer_s": 5e-3,
                        "own_step_times_s": [0.05, 0.05, 0.05], "iterations": 3,
                        "copy_bytes_per_s": copy_bytes_per_s, "matmul_flops_per_s": 5e10},
            "collectives": [{"size_bytes": s, "times_s": [1e-5 + s / 1e12] * 5} for s in (1e4, 1e5, 1e6, 1e7)],
            "overlap": {"slowdown": 0.0, "comm_slowdown": 0.0}}


def test_validate_predicts_its_measured_run_with_the_copies_charged():
    # dpsim validate times the bare model, not the DDP-wrapped one (dpsim.measure.trainstep.measure_step):
    # predict must add DDP's copy of every gradient into its bucket and back, at the measured
    # copy bandwidth (read + write bytes per second, as the worker measures it).
    pytest.importorskip("torch")
    from dpsim.workload.from_torch import load_torch_workload

    model = load_torch_workload(VALIDATE_MLP)
    measured_step_s = 3e-3 * len(model.layers) + 5e-3
    slow, fast = 1e9, 1e15
    alone = predict_run(_run(model, 1, slow), model, reference=VALIDATE_MLP, optimizer="sgd")
    assert alone["step_time_s"] == pytest.approx(measured_step_s)  # one rank: no DDP, no copies
    runs = {bw: predict_run(_run(model, 2, bw), model, reference=VALIDATE_MLP, optimizer="sgd")
            for bw in (slow, fast)}
    assert runs[slow]["n_buckets"] > 1
    assert "bucket copies at the measured copy bandwidth" in runs[slow]["provenance"]["compute"]["detail"]

    def copies_s(bw):  # two copies per gradient, each at least one kernel dispatch
        return sum(2 * max(2 * 4 * p.numel / bw, HOST_OVERHEAD_PER_OP_S) for p in model.params)

    # Every copy is on the step's path: into the bucket during backward, back after the all-reduce.
    moved = runs[slow]["step_time_s"] - runs[fast]["step_time_s"]
    assert moved == pytest.approx(copies_s(slow) - copies_s(fast), rel=1e-3)
    assert moved > 0.99 * 4 * 4 * model.param_count / slow  # fp32 gradients: 4 bytes, 4 passes over them
    assert runs[fast]["step_time_s"] >= measured_step_s + copies_s(fast)


def test_validate_charges_the_step_after_a_wait_as_predict_does():
    """A run that measured the step right after an all-reduce (as calibrate does) is predicted
    with predict's charge for it: the exposed communication's share of the measured extra."""
    pytest.importorskip("torch")
    from dpsim.workload.from_torch import load_torch_workload

    model = load_torch_workload(VALIDATE_MLP)
    run = _run(model, 2, 1e15)
    run["collectives"] = [{"size_bytes": s, "times_s": [1e-4 + s / 1e8] * 5} for s in (1e4, 1e5, 1e6, 1e7, 1e8)]
    plain = predict_run(run, model, reference=VALIDATE_MLP, optimizer="sgd")
    assert plain["after_comm_s"] == 0.0 and "after_comm" not in plain["provenance"]
    wait_s = 2 * plain["exposed_comm_s"]  # the calibration waited twice as long: half the extra is charged
    charged = predict_run(dict(run, after_comm={"extra_s": 0.004, "wait_s": wait_s, "iterations": 8}), model,
                          reference=VALIDATE_MLP, optimizer="sgd")
    assert charged["after_comm_s"] == pytest.approx(0.002, rel=1e-6)
    assert charged["step_time_s"] == pytest.approx(plain["step_time_s"] + 0.002, rel=1e-9)
    assert charged["provenance"]["after_comm"]["charged_s"] == pytest.approx(0.002, rel=1e-6)
    assert "after_comm_not_charged" not in charged


@pytest.mark.parametrize("ranks, threads, cores, charged", [(2, 1, 2, True), (4, 1, 2, False), (2, 2, 2, False),
                                                            (8, 1, 8, True), (1, 1, 1, True)])
def test_the_step_after_a_wait_is_not_charged_when_ranks_share_cores(ranks, threads, cores, charged):
    """With more rank threads than cores on one machine the paired probe times how the
    scheduler deals the cores out, which the compute measurement already holds (VALIDATION.md
    part 1): validate's and calibrate's profiles leave it out and say why."""
    from dpsim.profile.schema import after_comm_fields, ranks_share_cores

    record = {"extra_s": 0.004, "wait_s": 0.1, "iterations": 8,
              "cores": {"ranks_per_machine": ranks, "threads_per_rank": threads, "cpu_cores": cores}}
    why = ranks_share_cores(record)
    assert (why is None) == charged
    assert after_comm_fields(record) == ({"after_comm_extra_s": 0.004, "after_comm_wait_s": 0.1} if charged else
                                         {"after_comm_extra_s": None, "after_comm_wait_s": None})
    if not charged:
        assert why == f"{ranks} ranks x {threads} threads share {cores} cores"
    # a record from before the probe counted cores is charged as it was
    assert after_comm_fields({"extra_s": 0.004, "wait_s": 0.1})["after_comm_extra_s"] == 0.004
    assert after_comm_fields(None) == {"after_comm_extra_s": None, "after_comm_wait_s": None}


def test_validate_says_why_a_shared_core_run_is_not_charged():
    pytest.importorskip("torch")
    from dpsim.workload.from_torch import load_torch_workload

    model = load_torch_workload(VALIDATE_MLP)
    run = _run(model, 4, 1e15)
    run["collectives"] = [{"size_bytes": s, "times_s": [1e-4 + s / 1e8] * 5} for s in (1e4, 1e5, 1e6, 1e7, 1e8)]
    plain = predict_run(run, model, reference=VALIDATE_MLP, optimizer="sgd")
    shared = predict_run(dict(run, after_comm={"extra_s": 0.004, "wait_s": 1.0, "iterations": 8, "cores": {
        "ranks_per_machine": 4, "threads_per_rank": 1, "cpu_cores": 2}}), model, reference=VALIDATE_MLP, optimizer="sgd")
    assert shared["after_comm_s"] == 0.0 and shared["step_time_s"] == plain["step_time_s"]
    assert shared["after_comm_not_charged"] == "4 ranks x 1 threads share 2 cores"
