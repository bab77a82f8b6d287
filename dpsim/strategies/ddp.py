"""PyTorch DDP (``ddp``): gradient buckets all-reduced as they fill in backward.

The optimizer waits for every bucket. With accumulation, ``no_sync()`` skips the
all-reduce on the first ``K-1`` micro-batches.
"""

from __future__ import annotations

from dpsim.strategies.program import (
    StrategyProgram,
    _backward_pass,
    _bucket_launch_points,
    _Builder,
    _forward,
    _owner,
    _recompute_starts,
)
from dpsim.workload.buckets import assign_buckets
from dpsim.workload.spec import ModelSpec, ParamSpec


def _ddp_program(model, compute, *, precision, grad_accum, ckpt, overlap, bucket_cap_mb) -> StrategyProgram:
    from dpsim.strategies.ddp import with_grad_dtype

    plan = assign_buckets(with_grad_dtype(model, precision.grad_dtype), bucket_cap_mb=bucket_cap_mb)
    b = _Builder()
    recompute = _recompute_starts(ckpt)
    owner = _owner(model)
    points = _bucket_launch_points([bk.param_names for bk in plan.buckets], owner, len(compute.layers), overlap)
    grad_ops: list[int] = []
    for j in range(grad_accum):
        _forward(b, compute, j, grad_accum)
        after: dict[int, list[int]] = {}
        if j == grad_accum - 1:  # no_sync() on the others
            ops = [b.op(f"bucket {bk.index}", "all_reduce", bk.size_bytes, "allreduce") for bk in plan.buckets]
            grad_ops = ops
            after = {i: [ops[x] for x in xs] for i, xs in points.items()}
        _backward_pass(b, compute, j, grad_accum, recompute=recompute, after=after)
    b.task("optimizer", "optimizer", compute.optimizer_s, wait=grad_ops)
    return StrategyProgram(strategy="ddp", program=b.build(), shard_group_size=1, gradient_ops=tuple(grad_ops),
                           units=tuple(ckpt))



def with_grad_dtype(model: ModelSpec, dtype: str) -> list[ParamSpec]:
    """The model's parameters in gradient-ready order with the gradient dtype applied.

    The order is ``model.grad_ready_params`` (layers in reverse, each in autograd's
    order), the order DDP's rebuilt buckets follow.
    """
    return [ParamSpec(name=p.name, shape=p.shape, dtype=dtype) for p in model.grad_ready_params]
