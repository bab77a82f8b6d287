"""ZeRO-3 and FSDP (``zero3``, ``fsdp``, ``fsdp-shard-grad-op``, ``fsdp-hybrid``): parameters gathered per unit.

ZeRO-3 / FSDP full shard
    Parameters are sharded per *unit* (``fsdp_unit``: a transformer block by default,
    as ``transformer_auto_wrap_policy`` wraps it; everything else forms the root
    unit). Each unit's flat parameter is all-gathered before its forward and, having
    been freed after it, again before its backward; its gradient is reduce-scattered
    in its post-backward hook. Prefetching follows torch FSDP's defaults (torch 2.13
    ``FullyShardedDataParallel.__init__`` and ``fsdp/api.py``): ``backward_prefetch=
    BackwardPrefetch.BACKWARD_PRE`` issues the next unit's all-gather *before* the
    current unit's gradient computation, so in the one FIFO the order is ``AG(k-1),
    RS(k), AG(k-2), ...`` ("for a single process group using NCCL backend, any
    collectives, even if issued from different streams, contend for the same
    per-device NCCL stream", ``BackwardPrefetch`` docstring); ``forward_prefetch=
    False``, but the CPU runs ahead of the GPU so the next unit's all-gather is issued
    while the current one computes, at most two units in flight (``limit_all_gathers=
    True``, "the current instance running computation and the next instance whose
    all-gather is prefetched"). FSDP does not free the *root* unit after forward
    (``_post_forward_reshard``: "Do not free the root's parameters in the
    post-forward for FULL_SHARD"), so only non-root units are gathered twice. ``zero3``
    (DeepSpeed) frees each submodule's parameters unless it is used again within
    ``stage3_max_reuse_distance`` (1e9) elements of trace, and so gathers in backward what that
    rule freed (:mod:`dpsim.strategies.deepspeed_fetch`): nothing of a model under about 5e8
    elements, not the head or the last blocks of a larger one, and, under full checkpointing,
    the submodules of a block freed again after its recomputation (a third gather). With the
    distance at 0 every unit is gathered twice, the ZeRO paper's 1.5x volume of DDP
    (Rajbhandari et al. 2020, Sec. 7.2.2). With accumulation and
    ``--fsdp-accumulate unsharded`` (FSDP1's default here), FSDP runs ``no_sync()`` on the
    first ``K-1`` micro-batches (full unsharded gradients are kept, the parameters are still
    freed and re-gathered: ``_should_free_in_backward``); ``sharded`` (FSDP2's default:
    ``set_requires_gradient_sync`` left on) reduce-scatters every micro-batch, as ZeRO-3
    always does (DeepSpeed refuses ``no_sync`` with gradient partitioning).

FSDP2 (``--fsdp-version 2``, ``fully_shard``)
    The same schedule with each parameter sharded on dim 0 (``unit_shard_numel``), the
    root not resharded after forward either, and the memory-bound copies around each
    collective charged to the compute stream (``_fsdp2_copies``): the gathered and the
    unsharded-gradient copies, and the shard-sized ones (the shard cast into the all-gather
    input, the reduce-scatter output cast and added into the sharded gradient).

FSDP1's gradient passes (``fsdp``, ``fsdp-shard-grad-op``, ``fsdp-hybrid``)
    FSDP1 gathers straight into the flat parameter (no copy-out), but its gradients cost
    memory-bound passes too (``_fsdp1_copies``): every backward concatenates the parameters'
    gradients into the flat gradient, and every reduction divides it before the
    reduce-scatter (``zero3``, DeepSpeed's, is not costed this way).

FSDP ``SHARD_GRAD_OP`` (``fsdp-shard-grad-op``)
    Units are gathered for forward and kept through backward (no backward
    all-gather); gradients reduce-scattered per unit. Under ``no_sync`` the unsharded
    parameters also stay between micro-batches (``_should_free_in_backward``), so
    only the first micro-batch gathers; a synchronising backward frees them.

FSDP ``HYBRID_SHARD`` (``fsdp-hybrid``)
    ``FULL_SHARD`` within a node (all-gathers and reduce-scatters on the ``intra``
    communicator of the node's GPUs), or within ``--zero-group`` consecutive ranks (HSDP's shard group,
    FSDP2's ``dp_shard`` mesh dimension: part of a node, or whole nodes, whose collectives then cross
    the NICs), and replication across the groups: after each
    reduce-scatter, the gradient *shard* is all-reduced on the ``inter`` communicator
    (``dist.all_reduce(new_sharded_grad, group=state._inter_node_pg)`` in
    ``_runtime_utils._reduce_grad``), one rank per node, or per shard group
    (:mod:`dpsim.collectives.groups`); none when the shard group is every rank.
    All ops share the one FIFO stream (conservative: FSDP issues the inter-node
    all-reduce on its own stream).

MiCS (``zero3`` with ``--zero-group``)
    DeepSpeed ZeRO-3 partitioned within shard groups of ``--zero-group`` consecutive ranks and
    replicated across them (Zhang et al. 2022, "MiCS: Near-linear Scaling for Training Gigantic Model
    on Public Cloud", arXiv:2205.00119; its open implementation microsoft/DeepSpeed@ce78a632ac82
    (v0.14.0) ``deepspeed/runtime/zero/mics.py`` and ``mics_utils.py``, contributed by the paper's first
    author from AWS in DeepSpeed pull request 2964): shard groups are
    ``np.arange(world_size).reshape(-1, shard_size)`` and replicate groups the ranks of equal index
    in each (``_generate_mics_config``), so every all-gather and reduce-scatter of ``zero3`` runs on
    the shard group (the ``intra`` communicator, re-formed as for ``fsdp-hybrid``), sized by the
    group's shard. ``MiCS_Optimizer.partition_grads`` then all-reduces the partitioned gradients
    over the replicate group (``allreduce_mics_shard_grads``, pre-divided by the replicas) only at
    the gradient-accumulation boundary: the second hop of MiCS's "2-hop gradient synchronization"
    runs once per step, per reduce bucket, on the ``inter`` communicator. The SageMaker model
    parallel library's sharded data parallelism is this scheme (AWS documents it as MiCS; its
    ``smdistributed/modelparallel/backend/zero_config.py`` builds a DeepSpeed stage-3 config from
    ``ds_config_defaults.json``, with ``zero2d_shard_size`` = ``sharded_data_parallel_degree``,
    ``stage3_max_reuse_distance`` 1e9 and ``reduce_bucket_size`` 5e8 as DeepSpeed's defaults:
    tkazusa/smdistributed_modelparallel@b5e06a875362, a copy of the released Python package; the
    DeepSpeed fork it imports is not published). Not modelled: MiCS's hierarchical all-gather
    (``mics_hierarchical_params_gather``, SMP's ``zero2d_hierarchy_allgather``, on by default there
    when the shard group spans nodes: an all-gather across nodes among ranks of one local index, then
    one within each node; the same bytes leave each node as a ring's), costed as one all-gather over
    the shard group; SMP's ``contiguous_gradients`` false (its config refuses true), which skips the
    copy into the reduce bucket that :func:`_zero3_copies` charges.

FSDP ``BACKWARD_POST`` (Composer's default)
    Costed as ``BACKWARD_PRE``. Composer sets it unless told otherwise
    (``fsdp_config.setdefault('backward_prefetch', 'BACKWARD_POST')`` in
    ``composer/trainer/dist_strategy.py`` at v0.16.4 and v0.17.2, the ranges llm-foundry's
    benchmark runs pinned). Its prefetch is issued in the unit's post-backward hook *before*
    that unit's reduce-scatter (torch ``_post_backward_hook`` calls ``_post_backward_reshard``,
    which prefetches, then ``_reduce_grad``), so the FIFO order is the same ``AG(k-1), RS(k)``;
    the all-gather merely enters it once the CPU has launched unit ``k``'s gradient kernels
    instead of before. With the CPU ahead of the GPU (``limit_all_gathers`` keeps it about one
    unit ahead) the GPU runs the same schedule; the two differ only when the CPU falls behind,
    and dpsim does not model the CPU's launch timing.

Not modelled: DeepSpeed ZeRO-3's per-submodule granularity of the gathers themselves, its
prefetch bucket (``stage3_prefetch_bucket_size``, 5e7 elements ahead) and, in forward,
``stage3_param_persistence_threshold`` (parameters of at most 1e5 elements kept whole, gathered
here with their unit; the backward count leaves them out) — dpsim's ``zero3`` shards and gathers
by unit like FSDP, with the backward bytes of the reuse rule above; NVMe offload (CPU offload:
:mod:`dpsim.strategies.offload`);
the CPU's launch timing (above).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import field

from dpsim.frozen import frozen_dataclass
from dpsim.strategies.program import (
    BuildRequest,
    StrategyProgram,
    _backward_pass,
    _Builder,
    _forward,
    _mb,
    _optimizer_s,
    _recompute_starts,
)
from dpsim.strategies.deepspeed_fetch import backward_gather_numel
from dpsim.strategies.gemini import build_gemini
from dpsim.strategies.shards import DEEPSPEED_REDUCE_BUCKET_ELEMENTS, unit_shard_numel, wrap_units
from dpsim.workload.fp8 import (
    AMAX_ALL_REDUCE_BYTES_PER_LINEAR,
    layers_gathered_bytes,
    runs_in_fp8,
)
from dpsim.hardware import GpuSpec
from dpsim.workload.precision import Precision
from dpsim.workload.roofline import Efficiencies, memory_term


def build_zero3(request: BuildRequest) -> StrategyProgram:
    """``zero3``: every unit, the root too, re-gathered for backward; reduce-scatter every micro-batch. With
    ``--zero-group`` (``hybrid_replicas`` set) MiCS: the same within each shard group, and the gradient shards
    all-reduced across the replicas at the last micro-batch only (the module docstring). ``--zero-impl
    gemini``: Colossal-AI's chunked ZeRO-3 (:mod:`dpsim.strategies.gemini`)."""
    if request.zero_impl == "gemini":
        return build_gemini(request)
    return _unit_program(request, key="zero3", reshard_after_forward=True, keep_root=False,
                         hybrid=request.hybrid_replicas is not None)


def build_fsdp(request: BuildRequest) -> StrategyProgram:
    """``fsdp`` (``FULL_SHARD``): non-root units re-gathered for backward; ``no_sync`` under accumulation."""
    return _unit_program(request, key="fsdp", reshard_after_forward=True, keep_root=True, hybrid=False)


def build_fsdp_shard_grad_op(request: BuildRequest) -> StrategyProgram:
    """``fsdp-shard-grad-op`` (``SHARD_GRAD_OP``): units kept gathered from forward through backward."""
    return _unit_program(request, key="fsdp-shard-grad-op", reshard_after_forward=False, keep_root=True,
                         hybrid=False)


def build_fsdp_hybrid(request: BuildRequest) -> StrategyProgram:
    """``fsdp-hybrid`` (``HYBRID_SHARD``): ``FULL_SHARD`` on ``intra``, gradient shards all-reduced on ``inter``."""
    return _unit_program(request, key="fsdp-hybrid", reshard_after_forward=True, keep_root=True, hybrid=True)


def _unit_program(request: BuildRequest, *, key: str, reshard_after_forward: bool, keep_root: bool,
                  hybrid: bool) -> StrategyProgram:
    """The step of a per-unit strategy. Every micro-batch reduce-scatters unless the request
    accumulates unsharded gradients (``no_sync``). ``reshard_after_forward``: units are freed after
    forward and re-gathered for backward (else also kept between ``no_sync`` micro-batches);
    ``keep_root``: the root unit is not freed after forward (FSDP); ``hybrid``: shard on
    the ``intra`` communicator and all-reduce each gradient shard on ``inter``."""
    model, compute, precision = request.model, request.compute, request.precision
    world, grad_accum = request.shard_group_size, request.grad_accum
    units = [u for u in wrap_units(model, request.fsdp_unit)]
    unit_of_layer = {i: u for u in units for i in u.layers}
    shard = {u.name: unit_shard_numel(u.params, world, request.fsdp_version) for u in units}
    gathered = {u.name: unit_gathered_bytes(request, u, shard[u.name] * world) for u in units}
    reduce_every_micro_batch = not request.unsharded_accumulation
    # Share of each unit's gathered bytes its backward all-gathers (FSDP: all of it, once).
    bwd_size = _deepspeed_backward_share(request, units, unit_of_layer) if key == "zero3" else {}
    copies = unit_copies(key, units, shard, world, precision=precision, gpu=request.compute_gpu,
                         efficiencies=request.efficiencies, fsdp_version=request.fsdp_version, gathered=gathered)
    copies_s = 0.0
    group = "intra" if hybrid else "world"
    recompute = _recompute_starts(request.checkpoint_units, request.recompute_share)
    b = _Builder()
    n_layers = len(compute.layers)
    grad_ops: list[int] = []
    order_fwd = [u for u in units if u.params]
    # Units in the order backward first needs them.
    seen: list[str] = []
    for i in range(n_layers - 1, -1, -1):
        name = unit_of_layer[i].name
        if name not in seen:
            seen.append(name)
    by_name = {u.name: u for u in units}
    order_bwd = [by_name[n] for n in seen if by_name[n].params]
    for j in range(grad_accum):
        last = j == grad_accum - 1
        sync = reduce_every_micro_batch or last
        # ---- forward: gather each unit before its first layer, one unit ahead.
        # Kept between micro-batches only under no_sync: a synchronising backward frees them
        # (FSDP1 _should_free_in_backward).
        gathered_from_before = not reshard_after_forward and j > 0 and not reduce_every_micro_batch
        ag_fwd: dict[str, int] = {}
        if not gathered_from_before:
            for u in order_fwd:
                ag_fwd[u.name] = b.op(_mb(f"all-gather {u.name} (forward)", j, grad_accum), "all_gather",
                                      gathered[u.name], "allgather", group)
        first_layer = {u.name: min(u.layers) for u in order_fwd}
        wait_at: dict[int, list[int]] = {}
        launch_before: dict[int, list[int]] = {}
        if ag_fwd:
            seq = [u.name for u in order_fwd]
            launch_before[0] = [ag_fwd[n] for n in seq[:2]]
            for k_, n in enumerate(seq):
                wait_at.setdefault(first_layer[n], []).append(ag_fwd[n])
                if k_ >= 1 and k_ + 1 < len(seq):
                    launch_before.setdefault(first_layer[n], []).append(ag_fwd[seq[k_ + 1]])
            # Every layer of a unit waits for its gather (the root's later layers too).
            for u in order_fwd:
                for i in u.layers:
                    if ag_fwd[u.name] not in wait_at.get(i, []):
                        wait_at.setdefault(i, []).append(ag_fwd[u.name])
        fwd_copies: dict[int, float] = {}
        for u in order_fwd:
            if u.name in ag_fwd and u.name in copies.gather:
                fwd_copies[min(u.layers)] = fwd_copies.get(min(u.layers), 0.0) + copies.gather[u.name]
        _forward(b, compute, j, grad_accum, wait_at=wait_at, launch_before=launch_before, extra_s=fwd_copies)
        # ---- backward: re-gather resharded units (BACKWARD_PRE prefetch), reduce-scatter after each.
        # DeepSpeed (zero3) re-gathers only what its reuse-distance rule freed, recomputation's
        # second release included (bwd_size).
        need = [u for u in order_bwd
                if reshard_after_forward and not (u.is_root and keep_root) and bwd_size.get(u.name, 1.0) > 0]
        ag_bwd = {u.name: b.op(_mb(f"all-gather {u.name} (backward)", j, grad_accum), "all_gather",
                               gathered[u.name] * bwd_size.get(u.name, 1.0), "allgather", group) for u in need}
        before: dict[int, list[int]] = {}
        bwait: dict[int, list[int]] = {}
        after: dict[int, list[int]] = {}
        start_layer = {u.name: max(u.layers) for u in units}  # a unit's first layer in backward
        if need:
            before[n_layers - 1] = [ag_bwd[need[0].name]]
        for pos, u in enumerate(order_bwd):
            if u.name in ag_bwd:
                for i in u.layers:
                    bwait.setdefault(i, []).append(ag_bwd[u.name])
            # BACKWARD_PRE: this unit's pre-backward prefetches the next unit's all-gather.
            nxt = order_bwd[pos + 1] if pos + 1 < len(order_bwd) else None
            if nxt is not None and nxt.name in ag_bwd and nxt is not need[0]:
                before.setdefault(start_layer[u.name], []).append(ag_bwd[nxt.name])
            if sync:
                rs = b.op(_mb(f"reduce-scatter {u.name}", j, grad_accum), "reduce_scatter",
                          shard[u.name] * world * precision.grad_bytes, "reducescatter", group)
                ops = [rs]
                # MiCS's second hop waits for the accumulation boundary (allreduce_mics_shard_grads returns
                # early unless is_gradient_accumulation_boundary); HSDP all-reduces every reduce-scatter.
                replicas_now = last or key != "zero3"
                if hybrid and request.hybrid_replicas != 1 and replicas_now:
                    # A shard group of every rank leaves one replica: nothing to all-reduce (torchtitan adds
                    # the dp_replicate mesh dimension only when its degree is above 1, ParallelDims.build_mesh
                    # in torchtitan/distributed/parallel_dims.py@0119de156de5, so FSDP2 runs as FULL_SHARD).
                    across = "shard groups" if key == "zero3" else "nodes"
                    ops.append(b.op(_mb(f"all-reduce {u.name} shard across {across}", j, grad_accum), "all_reduce",
                                    shard[u.name] * precision.grad_bytes, "allreduce", "inter"))
                grad_ops += ops
                after.setdefault(min(u.layers), []).extend(ops)
        bwd_copies: dict[int, float] = {}
        for u in order_bwd:
            if u.name in ag_bwd and u.name in copies.gather:
                bwd_copies[max(u.layers)] = bwd_copies.get(max(u.layers), 0.0) + copies.gather[u.name]
            if u.name in copies.backward:
                bwd_copies[min(u.layers)] = bwd_copies.get(min(u.layers), 0.0) + copies.backward[u.name]
            if sync and u.name in copies.scatter:
                bwd_copies[min(u.layers)] = bwd_copies.get(min(u.layers), 0.0) + copies.scatter[u.name]
                if reduce_every_micro_batch and j > 0:  # the step's first reduce-scatter assigns the gradient
                    bwd_copies[min(u.layers)] += copies.accumulate[u.name]
        copies_s += sum(fwd_copies.values()) + sum(bwd_copies.values())
        _backward_pass(b, compute, j, grad_accum, recompute=recompute, before=before, wait_at=bwait, after=after,
                       extra_s=bwd_copies)
    total_shard = sum(shard.values())
    b.task("optimizer", "optimizer", _optimizer_s(compute, total_shard / model.param_count), wait=grad_ops)
    if precision.fp8 is not None and precision.fp8.fsdp_float8_all_gather:
        # precompute_float8_dynamic_scale_for_fsdp after the step: the amax of every FP8 weight
        # shard (one read of the shards), then one all-reduce of the amaxes for the next step's
        # casts, which the next forward's all-gathers wait for.
        linears = sum(1 for layer in model.layers for op in layer.ops if runs_in_fp8(op, precision.fp8))
        amax = b.op("all-reduce float8 weight amax", "all_reduce", AMAX_ALL_REDUCE_BYTES_PER_LINEAR * linears,
                    "allreduce", group)
        b.launch(amax)
        b.task("optimizer", "float8 scales", _amax_s(request, units, shard), wait=[amax])
    return StrategyProgram(strategy=key, program=b.build(), shard_group_size=world,
                           gradient_ops=tuple(grad_ops), units=tuple(units),
                           framework_parts_s={f"{'zero3' if key == 'zero3' else 'fsdp'}_copies": copies_s}
                           if copies_s else {})


def _deepspeed_backward_share(request: BuildRequest, units, unit_of_layer) -> dict[str, float]:
    """Per unit, the elements DeepSpeed ZeRO-3 gathers in one backward over the unit's elements
    (:func:`dpsim.strategies.deepspeed_fetch.backward_gather_numel`): 0 for a unit kept from its
    forward, above 1 for one partly freed again after its recomputation. Only a unit whose whole
    forward re-runs (full checkpointing) runs its parameterised submodules twice; ``selective``
    and ``op`` recomputation re-run none of them."""
    n_layers = len(request.model.layers)
    names = [unit_of_layer[i].name for i in range(n_layers)]
    recomputed = [u.layers for u in request.checkpoint_units] if request.recompute_share is None else []
    numel = backward_gather_numel(request.model, names, recomputed)
    return {u.name: numel.get(u.name, 0) / u.numel for u in units if u.params and u.numel}


def unit_gathered_bytes(request: BuildRequest, unit, full_numel: float) -> float:
    """Bytes of ``unit``'s all-gather: the parameter dtype, or FP8 for its linears' weights under
    FSDP2's float8 all-gather (:func:`dpsim.workload.fp8.gathered_weight_bytes`)."""
    return layers_gathered_bytes(request.model, unit.layers, full_numel, request.precision.weight_bytes,
                                 request.precision.fp8)


def _amax_s(request: BuildRequest, units, shard: dict[str, int]) -> float:
    """One read of every weight shard for its amax (``torch._foreach_norm(..., ord=math.inf)`` in
    ``precompute_float8_dynamic_scale_for_fsdp``); nothing to cost it on without a GPU."""
    gpu = request.compute_gpu
    if gpu is None:
        return 0.0
    numel = sum(shard[u.name] for u in units)
    return memory_term(numel * request.precision.weight_bytes, gpu).time_s(request.efficiencies or Efficiencies())


@frozen_dataclass
class _Copies:
    """Per unit, seconds of the memory-bound passes a sharded strategy runs around its collectives
    (empty: none costed)."""

    gather: dict[str, float] = field(default_factory=dict)
    """Around each all-gather of the unit."""
    backward: dict[str, float] = field(default_factory=dict)
    """In each backward of the unit, reducing or not."""
    scatter: dict[str, float] = field(default_factory=dict)
    """Around each reduce-scatter of the unit."""
    accumulate: dict[str, float] = field(default_factory=dict)
    """Added to a reduce-scatter after the step's first: its output summed into the gradient shard."""


def unit_copies(key: str, units, shard: dict[str, int], world: int, *, precision: Precision,
                gpu: GpuSpec | None, efficiencies: Efficiencies | None = None, fsdp_version: str = "1",
                gathered: dict[str, float] | None = None) -> _Copies:
    """Per unit, the memory-bound passes strategy ``key`` runs around its collectives on the compute
    stream (:func:`_zero3_copies`, :func:`_fsdp2_copies`, :func:`_fsdp1_copies`), costed on ``gpu`` (none
    without one): ``units`` the wrap units in forward order, ``shard`` each one's elements per rank over
    ``world`` ranks, ``gathered`` each one's all-gather bytes (FSDP2 only). The one costing of
    :func:`_unit_program` and of the planner's closed form (:meth:`dpsim.plan.planner.Planner.unit_dp`)."""
    staging = _staging(precision, gpu, efficiencies)
    if staging is None:
        return _Copies()
    if key == "zero3":
        return _zero3_copies(staging, units, shard, world)
    if fsdp_version == "2":
        assert gathered is not None, "FSDP2's copies are sized by the gathered bytes"
        return _fsdp2_copies(staging, units, shard, world, gathered)
    return _fsdp1_copies(staging, units, shard, world)


def _staging(precision: Precision, gpu: GpuSpec | None, efficiencies: Efficiencies | None):
    """``(w, g, stored, t)`` for costing a strategy's staging passes: the parameters', gradients'
    and sharded parameters' bytes per element, and ``t(bytes)``, the seconds one kernel takes to
    stream them through ``gpu``'s memory; ``None`` without a GPU to cost them on."""
    if gpu is None:
        return None
    eff = efficiencies or Efficiencies()
    w, g = precision.weight_bytes, precision.grad_bytes
    t = lambda size: memory_term(size, gpu).time_s(eff) if size else 0.0  # noqa: E731
    return w, g, precision.master_bytes or w, t


def _fsdp2_copies(staging, units, shard: dict[str, int], world: int, gathered: dict[str, float]) -> _Copies:
    """FSDP2's copies (``staging``: :func:`_staging`'s). All-gather: the copy-in
    (``foreach_all_gather``: ``_get_param_all_gather_inputs`` casts the shard, kept in the unsharded
    optimizer's dtype, to the gathered dtype under a ``MixedPrecisionPolicy`` or torchao's float8
    ``fsdp_pre_all_gather``, and ``all_gather_copy_in`` copies it into the all-gather input) and the
    copy-out (``foreach_all_gather_copy_out``: ``split_with_sizes_copy`` of the gathered buffer into
    the unsharded parameters, on the compute stream once the all-gather is done). Reduce-scatter:
    the copy-in (``foreach_reduce``: ``chunk_cat`` of the unsharded gradients into the
    reduce-scatter input, cast to the reduce dtype) and the output cast back to the sharded
    parameter's dtype when the two differ; on a later micro-batch of the step the output is added
    into the sharded gradient (``sharded_param.grad += new_sharded_grad``; the first assigns it,
    ``zero_grad`` having set it to ``None``). Each streams through device memory once; the
    all-gather copy-in runs on FSDP2's all-gather copy-in stream and the reduce-scatter's work on
    its reduce-scatter stream, charged here to the compute stream they share device memory with
    (an upper bound)."""
    out = _Copies()
    w, g, stored, t = staging
    for u in (u for u in units if u.params):
        n = shard[u.name]
        gathered_shard = gathered[u.name] / world
        cast_in = n * stored + gathered_shard if n * stored != gathered_shard else 0.0
        out.gather[u.name] = t(2 * gathered[u.name]) + t(cast_in + 2 * gathered_shard)
        out.scatter[u.name] = t(n * world * (w + g)) + t(n * (g + stored) if g != stored else 0.0)
        out.accumulate[u.name] = t(3 * n * stored)
    return out


def _zero3_copies(staging, units, shard: dict[str, int], world: int) -> _Copies:
    """DeepSpeed ZeRO-3's gradient passes (``staging``: :func:`_staging`'s), as
    microsoft/DeepSpeed@ce78a632ac82 (v0.14.0) ``deepspeed/runtime/zero/stage3.py`` and
    ``runtime/comm/coalesced_collectives.py`` run them with the defaults (``contiguous_gradients``
    and ``reduce_scatter`` true, ``reduce_bucket_size`` 5e8 elements, the gradient in the model's
    dtype). In backward order each gradient joins the bucket, which is reduced first when the
    gradient would take it past 5e8 elements (``reduce_independent_p_g_buckets_and_remove_grads``);
    one that fits is copied into the flat bucket (``__add_grad_to_ipg_bucket``). The bucket goes to
    ``reduce_scatter_coalesced``, which interleaves the rank-sized chunks of its gradients into
    one buffer (``torch.cat``) unless it holds one gradient whose size the ranks divide, then
    divides that buffer by the ranks in place (``tensor_partition_flat_buffer.div_``) before the
    reduce-scatter; ``partition_grads`` copies the rank's partition into the gradient partition
    (the first micro-batch of a step) or adds it (later ones). Each pass streams through device
    memory once; they run on DeepSpeed's reduce-and-partition stream, charged here to the compute
    stream (an upper bound, as FSDP's). Not costed: the gather side's copy-out
    (``AllGatherCoalescedHandle.wait``'s ``torch.cat``), which only gathers of several parameters at
    once pay."""
    out = _Copies()
    _, g, _, t = staging
    passes = zero3_grad_pass_bytes([(u.name, [p.numel for p in u.params], shard[u.name]) for u in units if u.params],
                                   world, g)
    for name, (scatter, accumulate) in passes.items():
        out.scatter[name] = sum(t(b) for b in scatter)
        out.accumulate[name] = t(accumulate[0]) - t(accumulate[1])  # add_ instead of copy_
    return out


def zero3_grad_pass_bytes(units: Sequence[tuple[str, Sequence[int], int]], world: int, grad_bytes: int
                          ) -> dict[str, tuple[tuple[float, ...], tuple[float, float]]]:
    """The bytes of DeepSpeed ZeRO-3's gradient passes per unit for one micro-batch (the mechanism of
    :func:`_zero3_copies`, which costs them): ``units`` are ``(name, its parameters' elements in
    registration order, the rank's shard elements)`` in forward order, ``world`` the ranks the
    partition spans. Returns per unit the bytes of each pass around its reduce-scatter (the copy into
    the 5e8-element bucket, ``reduce_scatter_coalesced``'s interleave, its in-place divide of the whole
    bucket, ``partition_grads``' copy of the rank's partition) and, for a later micro-batch of the
    step, the partition's ``add_`` against the first micro-batch's ``copy_`` (``(add, copy)``).
    Each pass reads and writes what it moves, so bytes are ``2 x`` (``3 x`` for ``add_``) the
    elements at ``grad_bytes``; the whole unit's gradient is ``shard x world`` elements."""
    g = grad_bytes
    copied = {name: 0 for name, _, _ in units}
    interleaved = dict(copied)
    bucket: list[tuple[str, int]] = []
    elements = 0

    def reduce() -> None:
        if len(bucket) == 1 and bucket[0][1] % world == 0:
            return  # reduce_scatter_coalesced reduces the gradient in place
        for name, n in bucket:
            interleaved[name] += n

    for name, params, _ in reversed(units):
        for numel in reversed(params):
            if elements + numel > DEEPSPEED_REDUCE_BUCKET_ELEMENTS and elements > 0:
                reduce()
                bucket, elements = [], 0
            if elements + numel <= DEEPSPEED_REDUCE_BUCKET_ELEMENTS:
                copied[name] += numel
            bucket.append((name, numel))
            elements += numel
    reduce()
    out = {}
    for name, _, n in units:
        full = n * world
        out[name] = ((2 * copied[name] * g, 2 * interleaved[name] * g, 2 * full * g, 2 * n * g),
                     (3 * n * g, 2 * n * g))
    return out


def predivide_factor(world: int) -> int:
    """FSDP1's gradient pre-division factor: a power of two ``f``, doubled while it divides ``world``
    and stays below ``world / f`` (about the square root: 4 of 8, 32 of 512), so the reduce-scatter
    sums gradients already divided by ``f`` and the shard is divided by ``world / f`` after it (``DefaultState._get_gradient_predivide_factor``,
    torch/distributed/algorithms/_comm_hooks/default_hooks.py, read by FSDP1's ``_init_core_state``)."""
    factor = 1
    while world % factor == 0 and world / factor > factor:
        factor *= 2
    return factor


def _fsdp1_copies(staging, units, shard: dict[str, int], world: int) -> _Copies:
    """FSDP1's gradient passes (``staging``: :func:`_staging`'s). FSDP1 runs the forward on
    views of the flat parameter (``FlatParamHandle._get_unflat_views``: ``torch.split`` of it,
    each piece ``view``-ed to its parameter's shape), so every backward's ``split`` backward
    concatenates the parameters' gradients into the flat gradient (a read and a write of it in the
    parameters' dtype). Each reduction (``_post_backward_hook`` and ``_reduce_grad``) then casts the
    flat gradient to the reduce dtype when that differs, divides it in place by
    :func:`predivide_factor` before the reduce-scatter (``_div_if_needed``) and the shard by the
    rest after it, casts the shard back to the parameter's dtype (``_cast_grad_to_param_dtype``), and
    on a later micro-batch adds it into the saved one (``_accumulate_sharded_grad``:
    ``_saved_grad_shard += sharded_grad``). With a ``MixedPrecision`` parameter dtype each
    all-gather first casts the shard into its low-precision copy (``_use_low_precision_shard``);
    the all-gather writes the flat parameter itself, so there is no copy-out. Costed on the compute
    stream (the reduction's run on FSDP1's post-backward stream: an upper bound, as FSDP2's)."""
    out = _Copies()
    w, g, stored, t = staging
    pre = predivide_factor(world)
    for u in (u for u in units if u.params):
        n, full = shard[u.name], shard[u.name] * world
        if stored != w:
            out.gather[u.name] = t(n * (stored + w))
        out.backward[u.name] = t(2 * full * w)
        out.scatter[u.name] = (t(full * (w + g) if w != g else 0.0) + t(2 * full * g if pre > 1 else 0.0)
                               + t(2 * n * g if world > pre else 0.0) + t(n * (g + stored) if g != stored else 0.0))
        out.accumulate[u.name] = t(3 * n * stored)
    return out
