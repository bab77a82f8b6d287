"""PyTorch DDP (``ddp``; torch ``DistributedDataParallel``): gradient buckets all-reduced as they fill in backward.

Buckets are DDP's steady state (:mod:`dpsim.workload.buckets`: rebuilt after the first
iteration in gradient-ready order); the first iteration's single-bucket layout is not
modelled, so every simulated step is a steady-state step. Forward runs layer by layer,
backward in reverse; a bucket is launched, in bucket order, once its last gradient is
ready (without overlap, every bucket after the last backward); the optimizer waits for
every bucket. With accumulation, ``no_sync()`` skips the all-reduce on the first ``K-1``
micro-batches.

:func:`ddp_program` builds the step from a compute profile and any
:class:`~dpsim.workload.buckets.BucketPlan` (``dpsim validate`` passes the buckets of
the measured run); :func:`build_ddp` is the registry's builder, with the model's
buckets at ``--bucket-cap-mb``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from dpsim.errors import ConfigError
from dpsim.strategies.program import (
    BuildRequest,
    StrategyProgram,
    _backward_pass,
    _bucket_launch_points,
    _Builder,
    _forward,
    _recompute_starts,
    check_grad_accum,
)
from dpsim.strategies.shards import Unit
from dpsim.workload.buckets import BucketPlan, assign_buckets
from dpsim.workload.compute import ComputeProfile
from dpsim.workload.spec import ModelSpec, ParamSpec


def ddp_program(compute: ComputeProfile, buckets: BucketPlan, *, overlap: bool = True, grad_accum: int = 1,
                checkpoint_units: Sequence[Unit] = (), copy_bandwidth_bytes_per_s: float | None = None,
                param_bytes: Mapping[str, float] | None = None) -> StrategyProgram:
    """The step of DDP with ``buckets`` (see the module docstring).

    A bucket's parameters must belong to ``compute``'s layers (``LayerTime.param_names``):
    the lowest layer index among them, whose backward runs last, completes it.

    ``copy_bandwidth_bytes_per_s``: with DDP's default ``gradient_as_bucket_view=False``
    every gradient is copied into its bucket's flat buffer when it is ready
    (``Reducer::mark_variable_ready_dense``, ``bucket_view.copy_(grad)`` in
    ``torch/csrc/distributed/c10d/reducer.cpp``) and back after the all-reduce
    (``Reducer::copy_bucket_to_grad``); given a memory-copy bandwidth, both copies (2 x the
    layer's gradient bytes, from ``param_bytes``) are charged to the backward of the layer
    that produced them. Only the synchronising micro-batch copies: under ``no_sync()``
    ``Reducer::autograd_hook`` returns at once ("the user wants to accumulate gradients
    for number of iterations before reducing them"). ``None``: not charged (on a GPU,
    2 x 25 MiB at HBM rates is ~20 us a bucket).
    """
    if copy_bandwidth_bytes_per_s is not None and not copy_bandwidth_bytes_per_s > 0:
        raise ConfigError(f"copy bandwidth: {copy_bandwidth_bytes_per_s!r} is not valid; expected bytes/s > 0")
    if copy_bandwidth_bytes_per_s is not None and param_bytes is None:
        raise ConfigError("param_bytes: needed with copy_bandwidth_bytes_per_s (the bytes each gradient copies)")
    check_grad_accum(grad_accum)
    owner = {name: i for i, layer in enumerate(compute.layers) for name in layer.param_names}
    for bk in buckets.buckets:
        missing = [name for name in bk.param_names if name not in owner]
        if missing:
            raise ConfigError(f"bucket {bk.index}: parameters {missing[:3]} belong to no layer")
    copy_s: dict[int, float] = {}
    if copy_bandwidth_bytes_per_s is not None:
        assert param_bytes is not None
        copy_s = {i: sum(2 * param_bytes[n] for n in layer.param_names) / copy_bandwidth_bytes_per_s
                  for i, layer in enumerate(compute.layers)}
    b = _Builder()
    recompute = _recompute_starts(checkpoint_units)
    points = _bucket_launch_points([bk.param_names for bk in buckets.buckets], owner, len(compute.layers), overlap)
    grad_ops: list[int] = []
    for j in range(grad_accum):
        _forward(b, compute, j, grad_accum)
        after: dict[int, list[int]] = {}
        extra: dict[int, float] = {}
        if j == grad_accum - 1:  # no_sync() on the others
            grad_ops = [b.op(f"bucket {bk.index}", "all_reduce", bk.size_bytes, "allreduce")
                        for bk in buckets.buckets]
            after = {i: [grad_ops[x] for x in xs] for i, xs in points.items()}
            extra = copy_s
        _backward_pass(b, compute, j, grad_accum, recompute=recompute, after=after, extra_s=extra)
    b.task("optimizer", "optimizer", compute.optimizer_s, wait=grad_ops)
    return StrategyProgram(strategy="ddp", program=b.build(), shard_group_size=1, gradient_ops=tuple(grad_ops),
                           units=tuple(checkpoint_units))


def build_ddp(request: BuildRequest) -> StrategyProgram:
    """``ddp``: the model's DDP buckets (gradient dtype, ``bucket_cap_mb``), then :func:`ddp_program`."""
    plan = assign_buckets(with_grad_dtype(request.model, request.precision.grad_dtype),
                          bucket_cap_mb=request.bucket_cap_mb)
    return ddp_program(request.compute, plan, overlap=request.overlap, grad_accum=request.grad_accum,
                       checkpoint_units=request.checkpoint_units)


def with_grad_dtype(model: ModelSpec, dtype: str) -> list[ParamSpec]:
    """The model's parameters in gradient-ready order with the gradient dtype applied.

    The order is ``model.grad_ready_params`` (layers in reverse, each in autograd's
    order), the order DDP's rebuilt buckets follow.
    """
    return [ParamSpec(name=p.name, shape=p.shape, dtype=dtype) for p in model.grad_ready_params]
