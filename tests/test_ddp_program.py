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
    (dict(copy_bandwidth_bytes_per_s=0.0, param_bytes={}), "copy bandwidth"),
    (dict(copy_bandwidth_bytes_per_s=1e9), "param_bytes"),
    (dict(grad_accum=0), "--grad-accum"),
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


def _run(world_size, copy_bytes_per_s):
    blocks = [{"name": f"b{i}", "forward_s": 0.01, "backward_s": 0.02,
               "params": [{"name": f"b{i}.w", "shape": [256, 256]}]} for i in range(4)]
    sizes = [1e4, 1e5, 1e6, 1e7]
    return {"compute": {"blocks": blocks, "optimizer_s": 0.005, "grad_ready_order": None,
                        "copy_bytes_per_s": copy_bytes_per_s},
            "bucket_cap_mb": 0.25, "world_size": world_size,
            "collectives": [{"size_bytes": s, "time_s": 1e-4 + s / 1e9} for s in sizes],
            "overlap": {"compute_with_comm_s": 1.0, "compute_alone_s": 1.0}}


def test_validate_predicts_its_measured_run_with_the_copies_charged():
    plain = predict_run(_run(2, None))
    copied = predict_run(_run(2, 1e9))
    assert plain["n_buckets"] == 4 and plain["bucket_sizes_bytes"] == [256 * 256 * 4] * 4
    # Four fp32 gradients of 256 KiB, each copied in and out, all on the backward's path.
    assert copied["step_time_s"] - plain["step_time_s"] == pytest.approx(4 * 2 * 256 * 256 * 4 / 1e9, rel=1e-6)
    # One rank: no communication, no copies.
    alone = predict_run(_run(1, 1e9))
    assert alone["step_time_s"] == pytest.approx(4 * 0.03 + 0.005)
