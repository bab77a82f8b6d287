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

from collections.abc import Callable, Mapping, Sequence

from dpsim.errors import ConfigError
from dpsim.strategies.ddp_costs import DdpCosts, ddp_buckets, ddp_costs
from dpsim.strategies.program import (
    BuildRequest,
    StrategyProgram,
    _backward_pass,
    _bucket_launch_points,
    _Builder,
    _forward,
    _mb,
    _recompute_starts,
    check_grad_accum,
)
from dpsim.strategies.shards import Unit
from dpsim.workload.buckets import BucketPlan
from dpsim.workload.compute import ComputeProfile
from dpsim.workload.spec import ModelSpec, ParamSpec


def ddp_program(compute: ComputeProfile, buckets: BucketPlan, *, overlap: bool = True, grad_accum: int = 1,
                checkpoint_units: Sequence[Unit] = (), copy_bandwidth_bytes_per_s: float | None = None,
                param_bytes: Mapping[str, float] | None = None, costs: DdpCosts | None = None,
                recompute_share: Sequence[float] | None = None) -> StrategyProgram:
    """The step of DDP with ``buckets`` (see the module docstring).

    A bucket's parameters must belong to ``compute``'s layers (``LayerTime.param_names``):
    the lowest layer index among them, whose backward runs last, completes it.

    ``costs`` (:func:`~dpsim.strategies.ddp_costs.ddp_costs`, for the same buckets) adds
    DDP's own work: the copies into the buckets charged to the backward of the layer that
    produced the gradients; after the layer that completes each bucket, the comm hook's
    kernels and collectives (a blocking hook, PowerSGD, holds the backward until its
    bucket is done); at the end of backward, per bucket once its last collective is done,
    the hook's decompression and the copies back; the forward wrapper, the buffer broadcast
    before the first micro-batch's forward, the unused-parameter search after the
    synchronised forward and its all-reduce after the last bucket. These tasks are named
    ``ddp ...``; :attr:`StrategyProgram.framework_s` sums DDP's time.

    ``copy_bandwidth_bytes_per_s`` (``dpsim validate``'s measured copies, without ``costs``):
    with DDP's default ``gradient_as_bucket_view=False`` every gradient is copied into its
    bucket's flat buffer when it is ready (``Reducer::mark_variable_ready_dense``,
    ``bucket_view.copy_(grad)`` in ``torch/csrc/distributed/c10d/reducer.cpp``) and back after
    the all-reduce (``Reducer::copy_bucket_to_grad``); given a memory-copy bandwidth, both
    copies (2 x the layer's gradient bytes, from ``param_bytes``) are charged to the backward
    of the layer that produced them. Only the synchronising micro-batch copies: under
    ``no_sync()`` ``Reducer::autograd_hook`` returns at once ("the user wants to accumulate
    gradients for number of iterations before reducing them").
    """
    if copy_bandwidth_bytes_per_s is not None and not copy_bandwidth_bytes_per_s > 0:
        raise ConfigError(f"copy bandwidth: {copy_bandwidth_bytes_per_s!r} is not valid; expected bytes/s > 0")
    if copy_bandwidth_bytes_per_s is not None and param_bytes is None:
        raise ConfigError("param_bytes: needed with copy_bandwidth_bytes_per_s (the bytes each gradient copies)")
    if copy_bandwidth_bytes_per_s is not None and costs is not None:
        raise ConfigError("copy bandwidth: give either measured copies or DDP's modelled costs, not both")
    check_grad_accum(grad_accum)
    owner = {name: i for i, layer in enumerate(compute.layers) for name in layer.param_names}
    for bk in buckets.buckets:
        missing = [name for name in bk.param_names if name not in owner]
        if missing:
            raise ConfigError(f"bucket {bk.index}: parameters {missing[:3]} belong to no layer")
    if costs is not None and len(costs.hooks) != len(buckets.buckets):
        raise ConfigError("DDP costs: computed for other buckets than the step's")
    copy_s: dict[int, float] = {}
    if copy_bandwidth_bytes_per_s is not None:
        assert param_bytes is not None
        copy_s = {i: sum(2 * param_bytes[n] for n in layer.param_names) / copy_bandwidth_bytes_per_s
                  for i, layer in enumerate(compute.layers)}
    elif costs is not None:
        copy_s = dict(costs.copy_in_s)
    b = _Builder()
    recompute = _recompute_starts(checkpoint_units, recompute_share)
    points = _bucket_launch_points([bk.param_names for bk in buckets.buckets], owner, len(compute.layers), overlap)
    host_s = 0.0
    grad_ops: list[int] = []
    last_op: list[int] = []  # per bucket, its final collective
    for j in range(grad_accum):
        synced = j == grad_accum - 1  # no_sync() on the others
        if costs is not None:
            host_s += _ddp_forward_prologue(b, costs, j, grad_accum)
        _forward(b, compute, j, grad_accum)
        if synced and costs is not None and costs.unused_search_s > 0:
            b.task("forward", "ddp unused-parameter search", costs.unused_search_s)
            host_s += costs.unused_search_s
        after: dict[int, list[int]] = {}
        then: dict[int, Callable[[_Builder], None]] = {}
        extra: dict[int, float] = {}
        if synced:
            extra = copy_s
            if costs is None:
                grad_ops = [b.op(f"bucket {bk.index}", "all_reduce", bk.size_bytes, "allreduce")
                            for bk in buckets.buckets]
                last_op = list(grad_ops)
                after = {i: [grad_ops[x] for x in xs] for i, xs in points.items()}
            else:
                last_op = [-1] * len(buckets.buckets)
                then = {i: _hook_launcher(costs, xs, grad_ops, last_op) for i, xs in points.items()}
        _backward_pass(b, compute, j, grad_accum, recompute=recompute, after=after, extra_s=extra, then=then)
    parts: dict[str, float] = {}
    if costs is not None:
        copies_out = _ddp_epilogue(b, costs, grad_ops)
        parts = {"bucket_copies": sum(copy_s.values()) + copies_out, "comm_hook": costs.hooks_s, "host": host_s}
    # With DDP's costs the copies back already waited for every collective (_ddp_epilogue).
    b.task("optimizer", "optimizer", compute.optimizer_s, wait=grad_ops if costs is None else [])
    return StrategyProgram(strategy="ddp", program=b.build(), shard_group_size=1, gradient_ops=tuple(grad_ops),
                           units=tuple(checkpoint_units), framework_parts_s=parts,
                           bucket_count=len(buckets.buckets), reduced_bytes=float(buckets.total_size_bytes))


def _ddp_forward_prologue(b: _Builder, costs: DdpCosts, j: int, k: int) -> float:
    """DDP's forward wrapper and, before the first micro-batch, the buffer broadcast; returns their time."""
    if j == 0 and costs.buffer_bytes > 0:
        b.task("forward", "ddp pre-forward, flatten buffers", costs.pre_forward_s + costs.buffer_flatten_s)
        op = b.op("broadcast buffers", "broadcast", costs.buffer_bytes, "broadcast")
        b.launch(op)
        b.task("forward", "ddp copy buffers back", costs.buffer_unflatten_s, wait=[op])
        return costs.pre_forward_s + costs.buffer_flatten_s + costs.buffer_unflatten_s
    b.task("forward", _mb("ddp pre-forward", j, k), costs.pre_forward_s)
    return costs.pre_forward_s


def _hook_launcher(costs: DdpCosts, bucket_indices: Sequence[int], grad_ops: list[int],
                   last_op: list[int]) -> Callable[[_Builder], None]:
    """After the layer that completes ``bucket_indices``: each bucket's hook, stage by stage
    (a stage's kernels wait for the previous stage's collective)."""

    def run(b: _Builder) -> None:
        for x in bucket_indices:
            hook = costs.hooks[x]
            pending: int | None = None  # the collective the next kernels wait for
            last: int | None = None
            for stage in hook.stages:
                name = f"bucket {x}" if len(hook.stages) == 1 else f"bucket {x} {stage.label}"
                if stage.before_s > 0 or pending is not None:
                    b.task("backward", f"ddp {name} hook", stage.before_s, wait=[] if pending is None else [pending])
                    pending = None
                if stage.size_bytes <= 0 and len(hook.stages) > 1:
                    continue  # NCCL returns at once for an empty all-reduce (PowerSGD: no vectors, or no matrices)
                op = b.op(name, "all_reduce", stage.size_bytes, "allreduce")
                grad_ops.append(op)
                b.launch(op)
                pending = last = op
            assert last is not None, "a bucket's hook communicates something"
            last_op[x] = last
            if hook.blocking:
                b.task("backward", f"ddp bucket {x} decompress", hook.after_s, wait=[last])

    return run


def _ddp_epilogue(b: _Builder, costs: DdpCosts, grad_ops: list[int]) -> float:
    """After the last backward: the used-parameter all-reduce, then per bucket its
    decompression (non-blocking hooks) and copies back; returns the copies' time (the
    decompression is in ``costs.hooks_s``).

    ``finalize_backward`` queues each bucket's copies behind that bucket's own collective, so
    those of the early buckets can run while the last buckets' all-reduces do. Here they all
    start once every collective is done: a step ends with one wait for the last collective,
    which keeps the per-rank player's synchronous end (:func:`dpsim.engine.replay.simulate_ranks`
    plays only the Pareto front of ranks through a step with it: 16,384 noisy ranks in about a
    second instead of two minutes). The step is at most the last collectives' overlap with the
    early copies longer (gpt2-xl, 64 GPUs, InfiniBand: 243.6 -> 245.3 ms)."""
    copies = 0.0
    first_wait: list[int] = list(grad_ops)
    if costs.used_map_bytes > 0:
        op = b.op("used-parameter map", "all_reduce", costs.used_map_bytes, "allreduce")
        b.launch(op)
        grad_ops.append(op)
        first_wait.append(op)
    for x, hook in enumerate(costs.hooks):
        work = (0.0 if hook.blocking else hook.after_s) + costs.copy_out_s[x]
        if work > 0:
            b.task("backward", f"ddp bucket {x} copy back", work, wait=first_wait)
            first_wait = []
            copies += costs.copy_out_s[x]
    if first_wait:
        b.wait_next(*first_wait)
    return copies


def build_ddp(request: BuildRequest) -> StrategyProgram:
    """``ddp``: the model's DDP buckets (gradient dtype, ``bucket_cap_mb``, the DDP options), then
    :func:`ddp_program`, with DDP's own costs when the request names a GPU to cost them on."""
    options = request.ddp
    plan = ddp_buckets(request.model, request.precision.grad_dtype, options, bucket_cap_mb=request.bucket_cap_mb)
    costs = None
    if request.gpu is not None:
        costs = ddp_costs(request.model, plan, request.gpu, request.precision.grad_dtype, options,
                          eff=request.efficiencies)
    return ddp_program(request.compute, plan, overlap=request.overlap, grad_accum=request.grad_accum,
                       checkpoint_units=request.checkpoint_units, costs=costs,
                       recompute_share=request.recompute_share)


def with_grad_dtype(model: ModelSpec, dtype: str) -> list[ParamSpec]:
    """The model's parameters in gradient-ready order with the gradient dtype applied.

    The order is ``model.grad_ready_params`` (layers in reverse, each in autograd's
    order), the order DDP's rebuilt buckets follow.
    """
    return [ParamSpec(name=p.name, shape=p.shape, dtype=dtype) for p in model.grad_ready_params]
