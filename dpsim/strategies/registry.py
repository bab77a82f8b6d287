"""Sharding strategies as step programs: DDP, ZeRO-1/2/3 and FSDP (full, shard-grad-op, hybrid).

Each strategy changes both what a GPU holds (:mod:`dpsim.memory`) and the step's
collectives. This module turns a model, its per-layer compute and a strategy into an
engine :class:`~dpsim.engine.StepProgram` — compute tasks that wait for and launch
comm ops on one FIFO stream — scheduled as the real implementations schedule them.
Gradient accumulation (``grad_accum`` micro-batches per step) and activation
checkpointing (recompute the forward of each checkpointed unit in backward) apply to
every strategy.

DDP (``ddp``; torch ``DistributedDataParallel``)
    Gradient buckets (:mod:`dpsim.workload.buckets`) all-reduced as they fill in
    backward; the optimizer waits for every bucket. With accumulation, ``no_sync()``
    skips the all-reduce on the first ``K-1`` micro-batches.

ZeRO-1 / ZeRO-2 (``zero1``, ``zero2``; DeepSpeed ``stage_1_and_2.py``)
    Gradients are reduced in "ipg" buckets of ``reduce_bucket_size`` elements
    (default 5e8, ``deepspeed/runtime/zero/config.py``), a bucket being flushed when the
    next gradient would overflow it (``reduce_independent_p_g_buckets_and_remove_grads``),
    with a partition-aware reduce of each bucket slice to the rank that owns it
    (``average_tensor`` with ``reduce_scatter=True``, the default): the volume of a
    reduce-scatter, which is how dpsim costs it. DeepSpeed's ZeRO-1 reduces this way
    too, not with an all-reduce ("Reduce Scatter for ZeRO stage 1 ... total
    communication volume reduction 1.5x -> 1x of data parallelism", DeepSpeed blog
    2020-03-17). After the optimizer updates its partition, each rank all-gathers the
    updated 16-bit parameters (``all_gather_dp_groups`` -> one
    ``all_gather_into_tensor`` of the flat buffer) before the step ends. The stages
    differ in accumulation: ``DeepSpeedEngine.allreduce_gradients`` says "ZeRO stage >=
    2 communicates during non gradient accumulation boundaries as well", while stage 1
    communicates "only at gradient accumulation boundaries"; and in memory (ZeRO-2
    keeps only its gradient partition). ``overlap`` is DeepSpeed's ``overlap_comm``:
    on, buckets are reduced on a side stream as they fill in backward; off, ZeRO-1
    reduces after backward (``reduce_gradients``) and ZeRO-2 reduces in its backward
    hooks on the compute stream, so backward waits for each bucket.

ZeRO-3 / FSDP full shard (``zero3``, ``fsdp``; ``fsdp-hybrid``)
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
    post-forward for FULL_SHARD"), so only non-root units are gathered twice; dpsim's
    ``zero3`` re-gathers the root too, which gives the ZeRO paper's 1.5x volume of
    DDP exactly (Rajbhandari et al. 2020, Sec. 7.2.2). With accumulation, FSDP runs
    ``no_sync()`` on the first ``K-1`` micro-batches (full unsharded gradients are kept,
    the parameters are still freed and re-gathered: ``_should_free_in_backward``);
    ZeRO-3 reduce-scatters every micro-batch (DeepSpeed refuses ``no_sync`` with
    gradient partitioning).

FSDP ``SHARD_GRAD_OP`` (``fsdp-shard-grad-op``)
    Units are gathered for forward and kept through backward (no backward
    all-gather); gradients reduce-scattered per unit. Under ``no_sync`` the unsharded
    parameters also stay between micro-batches (``_should_free_in_backward``), so
    only the first micro-batch gathers.

FSDP ``HYBRID_SHARD`` (``fsdp-hybrid``)
    ``FULL_SHARD`` within a node (all-gathers and reduce-scatters on the ``intra``
    communicator of the node's GPUs) and replication across nodes: after each
    reduce-scatter, the gradient *shard* is all-reduced on the ``inter`` communicator
    (``dist.all_reduce(new_sharded_grad, group=state._inter_node_pg)`` in
    ``_runtime_utils._reduce_grad``), one rank per node. :func:`hybrid_collectives`
    builds both communicators' collective models from the topology: ``intra`` is one
    node of the same design; ``inter`` is a cluster of one-GPU nodes on the same
    fabric in which each GPU gets its share of its node's NICs (``nics ×
    rate / gpus_per_node``: the ``gpus_per_node`` replica groups of a node run
    concurrently, local rank *j* of every node in group *j*), which keeps the leaf
    uplinks' share too; an NVLink fabric keeps its per-GPU rate. All ops share the
    one FIFO stream (conservative: FSDP issues the inter-node all-reduce on its own
    stream).

Not modelled: DeepSpeed ZeRO-3's per-submodule granularity, prefetch bucket and
``stage3_param_persistence_threshold`` (small parameters kept unsharded) — dpsim's
``zero3`` shards by unit like FSDP; CPU/NVMe offload; FSDP ``BACKWARD_POST``.
"""

from __future__ import annotations

from dpsim.errors import ConfigError

STRATEGIES: dict[str, str] = {
    "ddp": "PyTorch DDP: full replicas, gradient buckets all-reduced during backward",
    "zero1": "DeepSpeed ZeRO-1: optimizer state sharded; gradients reduce-scattered at the "
             "accumulation boundary, updated parameters all-gathered after the step",
    "zero2": "DeepSpeed ZeRO-2: optimizer state and gradients sharded; gradients reduce-scattered "
             "every micro-batch, parameters all-gathered after the step",
    "zero3": "ZeRO-3: parameters, gradients and optimizer state sharded; every unit all-gathered "
             "for forward and again for backward (1.5x DDP's volume), gradients reduce-scattered",
    "fsdp": "PyTorch FSDP FULL_SHARD: like ZeRO-3, per unit, root unit kept from forward to backward",
    "fsdp-shard-grad-op": "PyTorch FSDP SHARD_GRAD_OP: parameters gathered once for forward and "
                          "backward, gradients and optimizer state sharded (ZeRO-2-like)",
    "fsdp-hybrid": "PyTorch FSDP HYBRID_SHARD: FULL_SHARD within a node, gradient shards "
                   "all-reduced across nodes",
}
"""Strategy keys (``--strategy``) and what they do."""

SHARDED_STRATEGIES = ("zero1", "zero2", "zero3", "fsdp", "fsdp-shard-grad-op", "fsdp-hybrid")
FSDP_STRATEGIES = ("fsdp", "fsdp-shard-grad-op", "fsdp-hybrid")
UNIT_STRATEGIES = ("zero3",) + FSDP_STRATEGIES
"""Strategies that gather parameters per unit."""

FSDP_UNITS: dict[str, str] = {
    "block": "each transformer block / residual block (the model's LayerSpec.unit), the rest is the root",
    "layer": "each layer that owns parameters",
    "model": "the whole model as one unit",
}
"""Unit granularities (``--fsdp-unit``)."""


def check_strategy(name: str) -> str:
    """Validate a ``--strategy`` key."""
    if name not in STRATEGIES:
        raise ConfigError(f"--strategy: {name!r} is not known; choose one of {', '.join(STRATEGIES)}")
    return name


def check_fsdp_unit(name: str) -> str:
    """Validate a ``--fsdp-unit`` key."""
    if name not in FSDP_UNITS:
        raise ConfigError(f"--fsdp-unit: {name!r} is not known; choose one of {', '.join(FSDP_UNITS)}")
    return name


def check_grad_accum(value: int) -> int:
    """Validate ``--grad-accum``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"--grad-accum: {value!r} is not valid; expected an integer >= 1 (micro-batches per step)")
    return value


