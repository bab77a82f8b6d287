"""DeepSpeed ZeRO-1 / ZeRO-2 (``zero1``, ``zero2``; ``stage_1_and_2.py``).

Gradients are reduced in "ipg" buckets of ``reduce_bucket_size`` elements (default 5e8,
``deepspeed/runtime/zero/config.py``; ``--bucket-cap-mb`` sets it, converted from MiB of
gradients to elements by :func:`~dpsim.strategies.shards.deepspeed_reduce_bucket_elements`),
a bucket being flushed when the next gradient would overflow it
(``reduce_independent_p_g_buckets_and_remove_grads``; a gradient larger than the bucket
is reduced alone, ``extra_large_param_to_reduce``), with a partition-aware
reduce of each bucket slice to the rank that owns it (``average_tensor`` with
``reduce_scatter=True``, the default): the volume of a reduce-scatter, which is how dpsim
costs it. DeepSpeed's ZeRO-1 reduces this way too, not with an all-reduce ("Reduce
Scatter for ZeRO stage 1 ... total communication volume reduction 1.5x -> 1x of data
parallelism", DeepSpeed blog 2020-03-17). After the optimizer updates its partition, each
rank all-gathers the updated 16-bit parameters (``all_gather_dp_groups`` -> one
``all_gather_into_tensor`` of the flat buffer) before the step ends. The stages differ in
accumulation: ``DeepSpeedEngine.allreduce_gradients`` says "ZeRO stage >= 2 communicates
during non gradient accumulation boundaries as well", while stage 1 communicates "only at
gradient accumulation boundaries"; and in memory (ZeRO-2 keeps only its gradient
partition). ``overlap`` is DeepSpeed's ``overlap_comm``: on, buckets are reduced on a side
stream as they fill in backward; off, ZeRO-1 reduces after backward (``reduce_gradients``)
and ZeRO-2 reduces in its backward hooks on the compute stream, so backward waits for
each bucket.

``--bucket-cap-mb`` changes only the gradient buckets, not ``allgather_bucket_size``:
``all_gather_dp_groups`` (``deepspeed/runtime/utils.py``) gathers the whole flat buffer
with ``all_gather_into_tensor`` whenever the backend has it and uses that size only
otherwise.

Megatron-Core's distributed optimizer without a layout (``--zero-impl megatron``: tp, pp, cp and ep all 1,
where the layout path does not run; with any of them the layout's ``zero1`` is already Megatron's) reduces
as above, but with ``overlap_param_gather`` it does not gather the updated parameters before the step
ends: ``DistributedOptimizer.step_with_ready_grads`` launches no all-gather when the flag is on ("the first
all-gather is launched asynchronously in the next optimizer.zero_grad() call and subsequent all-gathers are
launched in the forward pre-hook", ``megatron/core/optimizer/distrib_optimizer.py`` lines 2587-2593 at
NVIDIA/Megatron-LM tag 25.09-alpha.rc1, d33919011c70, the ``MCORE_REVISION`` of MLPerf Training v5.1's Llama
3.1 8B Dockerfiles), and each module's forward pre-hook waits for its bucket's gather and dispatches the next
bucket's (``_make_forward_pre_hook``, ``megatron/core/distributed/distributed_data_parallel.py`` lines
409-443; ``finish_param_sync``, ``param_and_grad_buffer.py`` lines 265-301). dpsim gathers one layer at a
time, queued at the step's start in forward order, each layer's forward waiting for its own: the
buckets of those runs (``bucket_size`` 134,217,728 or 768,000,000 parameters in their logs) span 0.6 to
3.5 Llama 3.1 8B blocks, so the layer is the unit (ASSUMED, not Megatron's bucket boundaries). Without
overlap (``--no-overlap``) it gathers after the step, as DeepSpeed. Memory is DeepSpeed's zero1 count.

InternLM's ZeRO-1 (``--zero-impl internlm``, ``HybridZeroOptimizer`` in
``internlm/solver/optimizer/hybrid_zero_optim.py`` at InternLM/InternLM@20fe5ac297e6, the
InternLM training framework later renamed InternEvo) moves state differently:

- its ZERO1 group (``parallel.zero1``, ``--zero-group``) is ``zero1`` consecutive data-parallel
  ranks (``Initializer_Zero1`` in ``internlm/core/context/process_group_initializer.py``; ``zero1 <=
  0`` means every data-parallel rank, ``configs/7B_sft.py``'s "zero1 parallel" note), the optimizer
  states being replicated across groups;
- whole parameters are owned greedily within the group, largest first
  (``_partition_param_list``: :func:`~dpsim.strategies.shards.zero_redundancy_optimizer_partition`),
  so a group larger than the model's parameter count leaves ranks owning nothing;
- gradients go through ``reduce_tensor(..., dst_rank=None, parallel_mode=ParallelMode.DATA)``:
  ``dist.all_reduce`` over *every* data-parallel rank (``reduce_rank`` is always ``None``), one per
  bucket of ``reduce_bucket_size`` elements, in the gradient hooks on a side stream when
  ``zero_overlap_communication`` is on (the hooks are skipped on all but the last micro-batch:
  ``skip_grad_reduce`` in ``no_pipeline_scheduler.py``), the last bucket in ``step()``;
- after the update, ``broadcast_params`` issues one ``dist.broadcast`` of each owner's flat bf16
  parameters (``src`` = that owner, ``group=ParallelMode.ZERO1``) for every rank that owns any, and
  waits for them all before the step returns ("TODO: support broadcast overlap"); the rank with
  the largest share updates last, and it is rank 0, whose broadcast goes first.

Under tensor parallelism (``--tp``, the layout program of :mod:`dpsim.strategies.pipeline`, one
:class:`InternlmZero1` per stage) a rank's parameters are its tensor-parallel shards, partitioned by
the same rule: its DATA group is the ranks holding the same shard (``Initializer_Data``, ``tp x pp``
ranks apart, in ``process_group_initializer.py`` at the commit above) and its ZERO1 group ``zero1``
consecutive ranks of that group (``Initializer_Zero1``: ``i + (j * zero1 + k) * world / dp``), so the
two tensor-parallel ranks of a replica never share one. There the pipeline comes before the
data-parallel ranks (dp slowest), not Megatron's order the layout places, so pipeline stages are not
modelled with it.

InternEvo (InternLM/InternEvo@c628a8c87411, same file) still all-reduces every bucket
(``reduce_rank = None`` in ``_attach_reduction_hook``) and broadcasts per owner; its
``overlap_sync_param`` option, absent from the version above, hides those broadcasts behind the
next forward and is not modelled.

Not modelled: the ``torch.cuda.synchronize()`` before each overlapped bucket (the host waits for
the previous bucket and for the compute queued so far; the comm stream is FIFO here anyway), and
the scalar all-reduces of the overflow flag and gradient norm.
"""

from __future__ import annotations

from collections.abc import Sequence

from dpsim.frozen import frozen_dataclass
from dpsim.strategies.layout import Layout
from dpsim.strategies.program import (
    BuildRequest,
    StrategyProgram,
    _backward_pass,
    _bucket_launch_points,
    _Builder,
    _forward,
    _mb,
    _optimizer_s,
    _owner,
    _recompute_starts,
)
from dpsim.strategies.shards import (
    DEEPSPEED_REDUCE_BUCKET_ELEMENTS,
    INTERNLM_REDUCE_BUCKET_ELEMENTS,
    deepspeed_partition_numel,
    deepspeed_reduce_bucket_elements,
    internlm_owned_numel,
)
from dpsim.strategies.tensor import TpModel
from dpsim.workload.fp8 import layers_gathered_bytes
from dpsim.workload.spec import ModelSpec, ParamSpec


def deepspeed_buckets(params: Sequence[ParamSpec], bucket_elements: int = DEEPSPEED_REDUCE_BUCKET_ELEMENTS
                      ) -> list[list[ParamSpec]]:
    """DeepSpeed ZeRO-1/2 "ipg" gradient buckets: a bucket is reduced when the next
    gradient would take it over ``reduce_bucket_size`` elements, then that gradient
    starts the next one (``reduce_independent_p_g_buckets_and_remove_grads``); an empty
    bucket reduces nothing, so a gradient larger than the bucket travels alone."""
    buckets: list[list[ParamSpec]] = []
    current: list[ParamSpec] = []
    count = 0
    for p in params:
        if current and count + p.numel > bucket_elements:
            buckets.append(current)
            current, count = [], 0
        current.append(p)
        count += p.numel
    if current:
        buckets.append(current)
    return buckets


@frozen_dataclass
class InternlmZero1:
    """What InternLM's ``HybridZeroOptimizer`` moves for one rank's parameters (the module
    docstring): the data-parallel path's and the tensor-parallel layout's (whose rank holds its
    tensor-parallel shard of each parameter) one rule."""

    owned_numel: tuple[int, ...]
    """Elements each rank of the ZERO1 group owns, in rank order (zeros for ranks owning nothing)."""
    bucket_elements: int
    """Gradient elements per all-reduce bucket (``reduce_bucket_size``)."""

    @property
    def largest_owned(self) -> int:
        """The largest share: the rank that updates last, which the step waits for."""
        return max(self.owned_numel)

    def broadcasts(self, weight_bytes: int) -> list[tuple[str, float]]:
        """``broadcast_params``: ``(name, bytes)`` of each owner's broadcast over the ZERO1 group, in
        rank order (none when the group is one rank, whose update needs no broadcast)."""
        if len(self.owned_numel) == 1:
            return []
        return [(f"broadcast parameters of rank {r}", float(n * weight_bytes))
                for r, n in enumerate(self.owned_numel) if n]


def internlm_zero1(params: Sequence[ParamSpec], group: int, *, bucket_cap_mb: float | None,
                   grad_bytes: int) -> InternlmZero1:
    """InternLM's ZeRO-1 over ``params`` (one rank's) in a ZERO1 group of ``group`` ranks;
    ``bucket_cap_mb`` (``--bucket-cap-mb``) replaces the shipped ``reduce_bucket_size``."""
    return InternlmZero1(owned_numel=tuple(internlm_owned_numel(params, group)),
                         bucket_elements=deepspeed_reduce_bucket_elements(
                             bucket_cap_mb, grad_bytes, default=INTERNLM_REDUCE_BUCKET_ELEMENTS))


def internlm_stages(tpm: TpModel, assignment: Sequence[Sequence[Sequence[int]]], layout: Layout,
                    bucket_cap_mb: float | None, grad_bytes: int) -> tuple[InternlmZero1, ...]:
    """Per stage, InternLM's ZeRO-1 over the parameters one rank holds there (its tensor-parallel
    shards: ``HybridZeroOptimizer`` partitions each rank's own parameters within its ZERO1 group,
    whose ranks share its tensor-parallel rank); empty unless ``--zero-impl internlm``."""
    if layout.zero_impl != "internlm":
        return ()
    return tuple(internlm_zero1([p for chunk in stage for i in chunk for p in tpm.spec.layers[i].params],
                                layout.zero1_group, bucket_cap_mb=bucket_cap_mb, grad_bytes=grad_bytes)
                 for stage in assignment)


def build_zero1(request: BuildRequest) -> StrategyProgram:
    """``zero1``: optimizer state partitioned; gradients reduced only at the accumulation boundary."""
    if request.zero_impl == "internlm":
        return _internlm_program(request)
    return _zero12_program(request, stage=1)


def _internlm_program(request: BuildRequest) -> StrategyProgram:
    """InternLM's ``HybridZeroOptimizer`` step (the module docstring)."""
    model, compute, precision = request.model, request.compute, request.precision
    group, grad_accum, overlap = request.shard_group_size, request.grad_accum, request.overlap
    b = _Builder()
    recompute = _recompute_starts(request.checkpoint_units, request.recompute_share)
    owner = _owner(model)
    n_layers = len(compute.layers)
    # With overlap the AccumulateGrad hooks fill buckets in gradient-ready order; without it
    # step() walks the parameter group.
    order = list(model.grad_ready_params) if overlap else list(model.params)
    plan = internlm_zero1(model.params, group, bucket_cap_mb=request.bucket_cap_mb, grad_bytes=precision.grad_bytes)
    # The same flush rule as DeepSpeed's: a bucket is full when the next gradient would overflow it.
    buckets = deepspeed_buckets(order, plan.bucket_elements)
    grad_ops: list[int] = []
    for j in range(grad_accum):
        _forward(b, compute, j, grad_accum)
        after: dict[int, list[int]] = {}
        if j == grad_accum - 1:
            grad_ops = [b.op(_mb(f"all-reduce bucket {x}", j, grad_accum), "all_reduce",
                             sum(p.numel for p in bk) * precision.grad_bytes, "allreduce")
                        for x, bk in enumerate(buckets)]
            points = _bucket_launch_points([[p.name for p in bk] for bk in buckets], owner, n_layers, overlap)
            after = {i: [grad_ops[x] for x in xs] for i, xs in points.items()}
        _backward_pass(b, compute, j, grad_accum, recompute=recompute, after=after)
    b.task("optimizer", "optimizer", _optimizer_s(compute, plan.largest_owned / model.param_count), wait=grad_ops)
    casts = [b.op(name, "broadcast", size, "broadcast", request.zero_group)
             for name, size in plan.broadcasts(precision.weight_bytes)]
    if casts:
        b.launch(*casts)
        b.task("optimizer", "wait for parameter broadcasts", 0.0, wait=casts)
    return StrategyProgram(strategy="zero1", program=b.build(), shard_group_size=group,
                           gradient_ops=tuple(grad_ops), units=tuple(request.checkpoint_units))


def _forward_gathers(b: _Builder, model: ModelSpec, padded: int, precision) -> dict[int, list[int]]:
    """Megatron-Core's ``overlap_param_gather`` on the data-parallel path (``--zero-impl megatron``, the module
    docstring): one all-gather of each layer's updated parameters (the alignment padding with the last
    layer's), queued at the step's start in forward order on the one communication stream; each layer's
    forward waits for its own. Returns layer index -> the op its forward waits for."""
    waits: dict[int, list[int]] = {}
    ops = []
    last = len(model.layers) - 1
    for i, layer in enumerate(model.layers):
        numel = layer.param_count + (padded - model.param_count if i == last else 0)
        if not numel:
            continue
        # FP8 primary weights (--fp8-params): the layer's FP8 linears' weights gathered in one byte.
        size = layers_gathered_bytes(model, (i,), numel, precision.weight_bytes, precision.fp8)
        op = b.op(f"all-gather updated parameters of {layer.name}", "all_gather", size, "allgather")
        ops.append(op)
        waits[i] = [op]
    b.launch(*ops)
    return waits


def build_zero2(request: BuildRequest) -> StrategyProgram:
    """``zero2``: gradients partitioned too, so reduced in every micro-batch."""
    return _zero12_program(request, stage=2)


def _zero12_program(request: BuildRequest, *, stage: int) -> StrategyProgram:
    model, compute, precision = request.model, request.compute, request.precision
    world, grad_accum, overlap = request.shard_group_size, request.grad_accum, request.overlap
    # Stage 2 partitions gradients: it reduces in its backward hooks in every micro-batch,
    # on the compute stream when overlap_comm is off.
    hooks = overlap or stage == 2
    b = _Builder()
    recompute = _recompute_starts(request.checkpoint_units, request.recompute_share)
    owner = _owner(model)
    n_layers = len(compute.layers)
    if hooks:
        order = list(model.grad_ready_params)  # backward hooks fire in gradient-ready order
    else:
        order = list(model.params)  # ZeRO-1 without overlap_comm: reduce_gradients() walks the group
    buckets = deepspeed_buckets(order, deepspeed_reduce_bucket_elements(request.bucket_cap_mb, precision.grad_bytes))
    padded = deepspeed_partition_numel(model.param_count, world) * world
    grad_ops: list[int] = []
    last_bucket = len(buckets) - 1
    # Megatron-Core's distributed optimizer with overlap: the previous step's update gathered ahead of each
    # layer's forward; otherwise (DeepSpeed, or Megatron without overlap) all-gathered before the step ends.
    gathers = _forward_gathers(b, model, padded, precision) if request.zero_impl == "megatron" and overlap else {}
    for j in range(grad_accum):
        _forward(b, compute, j, grad_accum, wait_at=gathers if j == 0 else {})
        reduce_now = stage == 2 or j == grad_accum - 1
        after: dict[int, list[int]] = {}
        block: dict[int, list[int]] = {}
        if reduce_now:
            ops = []
            for x, bk in enumerate(buckets):
                size = sum(p.numel for p in bk)
                if x == last_bucket:
                    size += padded - model.param_count  # the alignment padding travels with the last slice
                ops.append(b.op(_mb(f"reduce-scatter bucket {x}", j, grad_accum), "reduce_scatter",
                                size * precision.grad_bytes, "reducescatter"))
            grad_ops += ops
            points = _bucket_launch_points([[p.name for p in bk] for bk in buckets], owner, n_layers, hooks)
            after = {i: [ops[x] for x in xs] for i, xs in points.items()}
            if not overlap and stage == 2:
                block = after  # reduced in the hook, on the compute stream
        _backward_pass(b, compute, j, grad_accum, recompute=recompute, after=after, block_after=block)
    b.task("optimizer", "optimizer", _optimizer_s(compute, padded / world / model.param_count), wait=grad_ops)
    if not gathers:
        # FP8 primary weights (--fp8-params): the FP8 linears' weights gathered in FP8 (the alignment padding 16-bit).
        gathered = layers_gathered_bytes(model, range(len(model.layers)), padded, precision.weight_bytes,
                                         precision.fp8)
        ag = b.op("all-gather updated parameters", "all_gather", gathered, "allgather")
        b.launch(ag)
        b.task("optimizer", "wait for parameter all-gather", 0.0, wait=[ag])
    return StrategyProgram(strategy=f"zero{stage}", program=b.build(), shard_group_size=world,
                           gradient_ops=tuple(grad_ops), units=tuple(request.checkpoint_units))
