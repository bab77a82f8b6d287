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

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from dpsim.collectives import CollectiveModel, CollectiveResult, RingCollectives
from dpsim.engine import CommOp, ComputeTask, StepProgram
from dpsim.errors import ConfigError
from dpsim.topology import Topology
from dpsim.workload.buckets import assign_buckets
from dpsim.workload.compute import ComputeProfile
from dpsim.workload.precision import Precision
from dpsim.workload.spec import ModelSpec, ParamSpec

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

DEEPSPEED_REDUCE_BUCKET_ELEMENTS = 500_000_000
"""DeepSpeed ``zero_optimization.reduce_bucket_size`` default (5e8 elements,
``deepspeed/runtime/zero/config.py``)."""

DEEPSPEED_ALIGNMENT_ELEMENTS = 2
"""DeepSpeed ``nccl_start_alignment_factor`` (``stage_1_and_2.py``: "4-byte
alignment/sizeof(fp16) = 2"): the flat 16-bit buffer is padded to a multiple of
``2 × world_size`` elements before it is partitioned."""

ROOT_UNIT = "(root)"
"""Name of the root unit (embeddings, final norm, head: the layers outside every block)."""


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


# ------------------------------------------------------------------------ units


@dataclass(frozen=True, kw_only=True)
class Unit:
    """One FSDP / ZeRO-3 unit (flat parameter) or activation-checkpointing unit."""

    name: str
    """Block module path, a layer name, or :data:`ROOT_UNIT`."""
    layers: tuple[int, ...]
    """Indices of its layers in forward order."""
    params: tuple[ParamSpec, ...]
    """Its parameters in registration order (the order FSDP flattens them)."""
    is_root: bool = False
    """The root unit (gathered once per micro-batch by FSDP, never checkpointed)."""

    @property
    def numel(self) -> int:
        """Parameters in the unit."""
        return sum(p.numel for p in self.params)


def wrap_units(model: ModelSpec, granularity: str = "block") -> tuple[Unit, ...]:
    """The model's units in forward order of their first layer (the root where it first runs).

    ``block``: layers grouped by :attr:`LayerSpec.unit`, the others in the root unit;
    ``layer``: every layer owning parameters is a unit, the rest is the root; ``model``:
    one root unit.
    """
    check_fsdp_unit(granularity)
    key = []
    for i, layer in enumerate(model.layers):
        if granularity == "model":
            key.append(None)
        elif granularity == "layer":
            key.append(layer.name if layer.params else None)
        else:
            key.append(layer.unit)
    layer_index = model.layer_index_by_param()
    order: list[str | None] = []
    members: dict[str | None, list[int]] = {}
    for i, k in enumerate(key):
        if k not in members:
            order.append(k)
            members[k] = []
        members[k].append(i)
    units = []
    for k in order:
        idx = set(members[k])
        params = tuple(p for p in model.params if layer_index[p.name] in idx)
        units.append(Unit(name=ROOT_UNIT if k is None else k, layers=tuple(members[k]), params=params,
                          is_root=k is None))
    return tuple(units)


# ------------------------------------------------------------------- shard sizes


def fsdp_flat_numel(numels: Sequence[int], world_size: int, *, align_numel: int = 0) -> int:
    """Elements of one FSDP flat parameter before sharding, padding included.

    torch 2.13 ``FlatParamHandle._init_flat_param_and_metadata``: with
    ``use_orig_params=True`` every parameter starts at a multiple of ``align_numel``
    (16 bytes / unsharded dtype size, ``_get_aligned_numel``) and the total is padded to
    a multiple of ``world_size``; with ``use_orig_params=False`` (FSDP's default,
    ``align_numel=0``) there is no padding here.
    """
    total = 0
    for n in numels:
        if align_numel > 0 and total % align_numel:
            total += align_numel - total % align_numel
        total += int(n)
    if align_numel > 0 and total % world_size:
        total += world_size - total % world_size
    return total


def fsdp_shard_numel(numels: Sequence[int], world_size: int, *, align_numel: int = 0) -> int:
    """Elements of each rank's shard of one flat parameter: ``ceil(flat / world_size)``.

    ``FlatParamHandle._get_shard`` chunks the flat tensor with ``torch.chunk`` and pads
    every rank's chunk to the first chunk's size, ``ceil(numel / world_size)``.
    """
    if world_size < 1:
        raise ConfigError(f"world size: {world_size} is not valid; expected an integer >= 1")
    return -(-fsdp_flat_numel(numels, world_size, align_numel=align_numel) // world_size)


def fsdp2_shard_numel(shapes: Sequence[tuple[int, ...]], world_size: int) -> int:
    """Elements per rank under FSDP2 ``fully_shard``: each parameter is chunked on dim 0
    and every rank's chunk padded to ``ceil(dim0 / world_size)`` rows."""
    total = 0
    for shape in shapes:
        if not shape:
            total += 1  # a 0-dim parameter is not chunked
            continue
        rest = math.prod(shape[1:])
        total += -(-shape[0] // world_size) * rest
    return total


def deepspeed_partition_numel(total_numel: int, world_size: int) -> int:
    """Elements of each rank's partition of DeepSpeed's flat 16-bit buffer (ZeRO-1/2):
    the buffer is padded to a multiple of ``2 × world_size`` (``flatten_dense_tensors_aligned``
    with ``nccl_start_alignment_factor × world_size``) and split evenly."""
    align = DEEPSPEED_ALIGNMENT_ELEMENTS * world_size
    return -(-total_numel // align) * align // world_size


def zero_redundancy_optimizer_partition(params: Sequence[ParamSpec], world_size: int) -> list[list[ParamSpec]]:
    """Which parameters each rank's ``torch.distributed.optim.ZeroRedundancyOptimizer`` owns.

    torch 2.13 ``ZeroRedundancyOptimizer._partition_parameters``: whole parameters,
    sorted by size (largest first, a stable sort), each given greedily to the rank with
    the smallest total so far (the first such rank, ``_get_min_index``).
    """
    if world_size < 1:
        raise ConfigError(f"world size: {world_size} is not valid; expected an integer >= 1")
    sizes = [0] * world_size
    parts: list[list[ParamSpec]] = [[] for _ in range(world_size)]
    for p in sorted(params, key=lambda q: q.numel, reverse=True):
        rank = sizes.index(min(sizes))
        parts[rank].append(p)
        sizes[rank] += p.numel
    return parts


def torch_optimizer_state_bytes(numels: Sequence[int], optimizer: str, state_element_bytes: int = 4) -> int:
    """Bytes of torch optimizer state for parameter tensors of ``numels`` elements.

    Adam/AdamW (torch 2.13, not fused/capturable): ``exp_avg`` and ``exp_avg_sq`` like the
    parameter plus a float32 scalar ``step`` tensor per parameter; SGD with momentum: one
    ``momentum_buffer``; plain SGD: nothing.
    """
    from dpsim.workload.precision import OPTIMIZER_STATES, check_optimizer

    states = OPTIMIZER_STATES[check_optimizer(optimizer)]
    step = 4 if optimizer in ("adam", "adamw") else 0
    return sum(states * n * state_element_bytes + step for n in numels)


def shard_group_size(strategy: str, n_gpus: int, gpus_per_node: int) -> int:
    """Ranks a strategy shards over: 1 for DDP, the node for hybrid, all GPUs otherwise."""
    check_strategy(strategy)
    if strategy == "ddp":
        return 1
    if strategy == "fsdp-hybrid":
        return min(gpus_per_node, n_gpus)
    return n_gpus


def sharded_numel(model: ModelSpec, strategy: str, world_size: int, *, fsdp_unit: str = "block") -> int:
    """Elements of parameters (and of gradient / optimizer partitions) one rank owns.

    DDP: every parameter. ZeRO-1/2: DeepSpeed's partition of the flat buffer. ZeRO-3 and
    FSDP: the sum over units of each flat parameter's shard.
    """
    check_strategy(strategy)
    if strategy == "ddp":
        return model.param_count
    if strategy in ("zero1", "zero2"):
        return deepspeed_partition_numel(model.param_count, world_size)
    return sum(fsdp_shard_numel([p.numel for p in u.params], world_size)
               for u in wrap_units(model, fsdp_unit) if u.params)


# ------------------------------------------------------------- collective models


class GroupCollectives:
    """A collective model for the whole job plus named sub-communicators.

    ``time`` costs an op on all ranks (``world``); :meth:`group` gives the model of a
    sub-communicator (``intra``, ``inter``) that :class:`~dpsim.engine.CommOp.group`
    names.
    """

    def __init__(self, world: CollectiveModel, groups: Mapping[str, CollectiveModel]):
        self.world = world
        self.n_ranks = world.n_ranks
        self.groups = dict(groups)

    def time(self, op: str, size_bytes: float) -> CollectiveResult:
        """Cost of ``op`` over all ranks."""
        return self.world.time(op, size_bytes)

    def group(self, name: str) -> CollectiveModel:
        """The collective model of sub-communicator ``name``."""
        if name == "world":
            return self.world
        try:
            return self.groups[name]
        except KeyError:
            raise ConfigError(f"communicator {name!r} is not known; known: world, {', '.join(self.groups)}") from None

    @property
    def profile(self):
        """The world ring's profile (what :class:`~dpsim.predict.Prediction` reports)."""
        return self.world.profile  # type: ignore[attr-defined]


def hybrid_topologies(topology: Topology) -> tuple[Topology, Topology]:
    """``(intra, inter)``: the communicators of FSDP hybrid sharding on ``topology``.

    ``intra``: one node of the design (its ``gpus_per_node`` GPUs). ``inter``: one GPU
    per node on the same fabric, each GPU with its share of the node's NICs — the
    ``gpus_per_node`` replica groups (local rank *j* of every node) run their
    all-reduces at the same time and split the node's NICs (and hence the leaf
    uplinks) between them; on an NVLink fabric each GPU keeps its own link rate.
    """
    spec = topology.spec
    gpn = topology.gpus_per_node
    intra = Topology(spec=spec, n_gpus=gpn) if topology.n_gpus >= spec.node.gpus_per_node else topology
    fabric = spec.fabric
    if fabric is None or topology.n_nodes == 1:
        one = dataclasses.replace(spec, node=dataclasses.replace(spec.node, gpus_per_node=1))
        return intra, Topology(spec=one, n_gpus=1)
    if fabric.kind == "nvlink":
        new_fabric = fabric
    else:
        new_fabric = dataclasses.replace(
            fabric, nics_per_node=1, rail_optimized=False,
            nic_bandwidth_bytes_per_s=fabric.nic_bandwidth_bytes_per_s * fabric.nics_per_node / gpn)
    inter_spec = dataclasses.replace(spec, node=dataclasses.replace(spec.node, gpus_per_node=1), fabric=new_fabric)
    return intra, Topology(spec=inter_spec, n_gpus=topology.n_nodes)


def hybrid_collectives(topology: Topology, world: CollectiveModel | None = None, *,
                       factory: Callable[[Topology], CollectiveModel] | None = None) -> GroupCollectives:
    """``world`` (default: a ring on ``topology``) plus the ``intra`` and ``inter``
    communicators of :func:`hybrid_topologies`, each costed by ``factory(topology)``
    (default :class:`~dpsim.collectives.RingCollectives`; ``predict`` passes NCCL's
    algorithm choice when the world model is NCCL's)."""
    make = factory or RingCollectives
    intra, inter = hybrid_topologies(topology)
    return GroupCollectives(world or make(topology), {"intra": make(intra), "inter": make(inter)})


# -------------------------------------------------------------------- programs


@dataclass(frozen=True, kw_only=True)
class StrategyProgram:
    """A strategy's step program and what it communicates."""

    strategy: str
    """Strategy key."""
    program: StepProgram
    """What every rank runs in one step."""
    shard_group_size: int
    """Ranks the state is sharded over (1 for DDP)."""
    gradient_ops: tuple[int, ...]
    """Comm ops that reduce gradients (all-reduce buckets, reduce-scatters, inter-node
    all-reduces), all micro-batches."""
    units: tuple[Unit, ...] = ()
    """Units (ZeRO-3 / FSDP and checkpointing), in forward order."""
    communicator_sizes: Mapping[str, int] = dataclasses.field(default_factory=dict)
    """Ranks of each communicator the ops use (``world``, ``intra``, ``inter``)."""

    @property
    def bytes_by_op(self) -> dict[str, float]:
        """Message bytes per collective type in one step (nccl-tests' sizes)."""
        out: dict[str, float] = {}
        for c in self.program.comms:
            out[c.op] = out.get(c.op, 0.0) + c.size_bytes
        return out

    @property
    def gradient_bytes(self) -> float:
        """Bytes of the gradient reductions in one step."""
        return sum(self.program.comms[i].size_bytes for i in self.gradient_ops)

    def bus_bytes(self) -> float:
        """Bytes each rank sends in one step on the rings (nccl-tests' bus volume):
        all-reduce ``2(N-1)/N·S``, reduce-scatter and all-gather ``(N-1)/N·S``, N the
        ranks of the op's communicator."""
        from dpsim.collectives import bus_factor

        total = 0.0
        for c in self.program.comms:
            n = self.communicator_sizes.get(c.group, 1)
            if n > 1:
                total += bus_factor(c.op, n) * c.size_bytes
        return total


class _Builder:
    """Collects tasks and comm ops; ``launch`` means "before the next task"."""

    def __init__(self) -> None:
        self.tasks: list[dict] = []
        self.comms: list[CommOp] = []
        self.at_start: list[int] = []
        self.pending_wait: list[int] = []

    def op(self, name: str, op: str, size_bytes: float, kind: str, group: str = "world") -> int:
        self.comms.append(CommOp(name=name, op=op, size_bytes=float(size_bytes), kind=kind, group=group))
        return len(self.comms) - 1

    def launch(self, *ops: int) -> None:
        (self.tasks[-1]["launch_after"] if self.tasks else self.at_start).extend(ops)

    def task(self, kind: str, name: str, duration_s: float, wait: Sequence[int] = ()) -> None:
        waits = list(self.pending_wait) + list(wait)
        self.pending_wait = []
        self.tasks.append(dict(kind=kind, name=name, duration_s=duration_s, wait_for=waits, launch_after=[]))

    def wait_next(self, *ops: int) -> None:
        """Make the next task wait for ``ops`` (communication run on the compute stream)."""
        self.pending_wait.extend(ops)

    def build(self) -> StepProgram:
        return StepProgram(
            tasks=tuple(ComputeTask(kind=t["kind"], name=t["name"], duration_s=t["duration_s"],
                                    wait_for=tuple(dict.fromkeys(t["wait_for"])),
                                    launch_after=tuple(t["launch_after"])) for t in self.tasks),
            comms=tuple(self.comms),
            launch_at_start=tuple(self.at_start),
        )


def _check_alignment(model: ModelSpec, compute: ComputeProfile) -> None:
    if [l.name for l in compute.layers] != [l.name for l in model.layers]:
        raise ConfigError("compute profile and model disagree on the layers; build both from the same model")


def _checkpoint_units(model: ModelSpec, granularity: str, activation_checkpointing: bool) -> list[Unit]:
    if not activation_checkpointing:
        return []
    units = [u for u in wrap_units(model, granularity) if not u.is_root]
    if not units:
        raise ConfigError(
            f"--activation-checkpointing: model {model.name!r} has no {granularity} units to checkpoint; "
            f"use --fsdp-unit layer")
    return units


def _mb(name: str, j: int, k: int) -> str:
    return name if k == 1 else f"{name} (micro-batch {j + 1})"


def _forward(b: _Builder, compute: ComputeProfile, j: int, k: int, wait_at: Mapping[int, Sequence[int]] = {},
             launch_before: Mapping[int, Sequence[int]] = {}) -> None:
    for i, layer in enumerate(compute.layers):
        if launch_before.get(i):
            b.launch(*launch_before[i])
        b.task("forward", _mb(layer.name, j, k), layer.forward_s, wait=wait_at.get(i, ()))


def _recompute_starts(ckpt_units: Sequence[Unit]) -> dict[int, Unit]:
    """Layer index (the unit's last layer) before whose backward the unit is recomputed."""
    return {max(u.layers): u for u in ckpt_units}


def build_step_program(
    strategy: str,
    model: ModelSpec,
    compute: ComputeProfile,
    *,
    precision: Precision,
    n_gpus: int,
    gpus_per_node: int | None = None,
    grad_accum: int = 1,
    activation_checkpointing: bool = False,
    overlap: bool = True,
    bucket_cap_mb: float | None = None,
    fsdp_unit: str = "block",
) -> StrategyProgram:
    """The step program of ``strategy`` for ``model`` (see the module docstring).

    ``compute`` gives the per-layer times of one micro-batch (from the same ``model``);
    ``n_gpus`` the data-parallel ranks, ``gpus_per_node`` the hybrid shard group.
    """
    check_strategy(strategy)
    check_fsdp_unit(fsdp_unit)
    check_grad_accum(grad_accum)
    if isinstance(n_gpus, bool) or not isinstance(n_gpus, int) or n_gpus < 1:
        raise ConfigError(f"--gpus: {n_gpus!r} is not valid; expected an integer >= 1")
    _check_alignment(model, compute)
    gpn = gpus_per_node or n_gpus
    group_size = shard_group_size(strategy, n_gpus, gpn)
    ckpt = _checkpoint_units(model, fsdp_unit, activation_checkpointing)
    if strategy == "ddp":
        result = _ddp_program(model, compute, precision=precision, grad_accum=grad_accum, ckpt=ckpt,
                              overlap=overlap, bucket_cap_mb=bucket_cap_mb)
    elif strategy in ("zero1", "zero2"):
        result = _zero12_program(strategy, model, compute, precision=precision, world=group_size,
                                 grad_accum=grad_accum, ckpt=ckpt, overlap=overlap)
    else:
        result = _unit_program(strategy, model, compute, precision=precision, world=group_size,
                               grad_accum=grad_accum, ckpt=ckpt, fsdp_unit=fsdp_unit, overlap=overlap)
    sizes = {"world": n_gpus, "intra": min(gpn, n_gpus), "inter": max(1, -(-n_gpus // gpn))}
    return dataclasses.replace(result, communicator_sizes=sizes)


def _backward_pass(b: _Builder, compute: ComputeProfile, j: int, k: int, *, recompute: Mapping[int, Unit],
                   before: Mapping[int, Sequence[int]] = {}, wait_at: Mapping[int, Sequence[int]] = {},
                   after: Mapping[int, Sequence[int]] = {}, block_after: Mapping[int, Sequence[int]] = {}) -> None:
    """Backward layers in reverse; per layer index: ops launched before it (``before``),
    ops it (or its recompute) waits for, ops launched after it, ops the *next* task waits
    for (``block_after``: communication on the compute stream)."""
    blocked: list[int] = []
    for i in range(len(compute.layers) - 1, -1, -1):
        layer = compute.layers[i]
        if before.get(i):
            b.launch(*before[i])
        waits = list(wait_at.get(i, ())) + blocked
        if i in recompute:
            unit = recompute[i]
            b.task("recompute", _mb(f"recompute {unit.name}", j, k),
                   sum(compute.layers[x].forward_s for x in unit.layers), wait=waits)
            waits = []
        b.task("backward", _mb(layer.name, j, k), layer.backward_s, wait=waits)
        if after.get(i):
            b.launch(*after[i])
        blocked = list(block_after.get(i, ()))
    if blocked:
        b.wait_next(*blocked)


def _bucket_launch_points(bucket_params: Sequence[Sequence[str]], owner: Mapping[str, int], n_layers: int,
                          overlap: bool) -> dict[int, list[int]]:
    """Layer index -> buckets launched after its backward (buckets launch in order, each
    once its last gradient is ready; without overlap, all after the last backward)."""
    last_layer = [min(owner[n] for n in names) for names in bucket_params]
    points: dict[int, list[int]] = {}
    nxt = 0
    for idx in range(n_layers - 1, -1, -1):
        launch = []
        while overlap and nxt < len(last_layer) and last_layer[nxt] >= idx:
            launch.append(nxt)
            nxt += 1
        if idx == 0:
            launch.extend(range(nxt, len(last_layer)))
        if launch:
            points[idx] = launch
    return points


def _owner(model: ModelSpec) -> dict[str, int]:
    return model.layer_index_by_param()


def _optimizer_s(compute: ComputeProfile, fraction: float) -> float:
    return compute.optimizer_s * fraction


def _ddp_program(model, compute, *, precision, grad_accum, ckpt, overlap, bucket_cap_mb) -> StrategyProgram:
    from dpsim.predict import with_grad_dtype

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


def deepspeed_buckets(params: Sequence[ParamSpec], bucket_elements: int = DEEPSPEED_REDUCE_BUCKET_ELEMENTS
                      ) -> list[list[ParamSpec]]:
    """DeepSpeed ZeRO-1/2 "ipg" gradient buckets: a bucket is reduced when the next
    gradient would take it over ``reduce_bucket_size`` elements, then that gradient
    starts the next one (``reduce_independent_p_g_buckets_and_remove_grads``)."""
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


def _zero12_program(strategy, model, compute, *, precision, world, grad_accum, ckpt, overlap) -> StrategyProgram:
    b = _Builder()
    recompute = _recompute_starts(ckpt)
    owner = _owner(model)
    n_layers = len(compute.layers)
    if overlap or strategy == "zero2":
        order = list(model.grad_ready_params)  # backward hooks fire in gradient-ready order
    else:
        order = list(model.params)  # ZeRO-1 without overlap_comm: reduce_gradients() walks the group
    buckets = deepspeed_buckets(order)
    padded = deepspeed_partition_numel(model.param_count, world) * world
    grad_ops: list[int] = []
    last_bucket = len(buckets) - 1
    for j in range(grad_accum):
        _forward(b, compute, j, grad_accum)
        reduce_now = strategy == "zero2" or j == grad_accum - 1
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
            points = _bucket_launch_points([[p.name for p in bk] for bk in buckets], owner, n_layers,
                                           overlap or strategy == "zero2")
            after = {i: [ops[x] for x in xs] for i, xs in points.items()}
            if not overlap and strategy == "zero2":
                block = after  # reduced in the hook, on the compute stream
        _backward_pass(b, compute, j, grad_accum, recompute=recompute, after=after, block_after=block)
    b.task("optimizer", "optimizer", _optimizer_s(compute, padded / world / model.param_count), wait=grad_ops)
    ag = b.op("all-gather updated parameters", "all_gather", padded * precision.weight_bytes, "allgather")
    b.launch(ag)
    b.task("optimizer", "wait for parameter all-gather", 0.0, wait=[ag])
    return StrategyProgram(strategy=strategy, program=b.build(), shard_group_size=world,
                           gradient_ops=tuple(grad_ops), units=tuple(ckpt))


def _unit_program(strategy, model, compute, *, precision, world, grad_accum, ckpt, fsdp_unit, overlap
                  ) -> StrategyProgram:
    units = [u for u in wrap_units(model, fsdp_unit)]
    unit_of_layer = {i: u for u in units for i in u.layers}
    shard = {u.name: fsdp_shard_numel([p.numel for p in u.params], world) for u in units}
    group = "intra" if strategy == "fsdp-hybrid" else "world"
    reshard_after_forward = strategy != "fsdp-shard-grad-op"
    root_kept = strategy in FSDP_STRATEGIES  # FSDP keeps the root from forward to backward
    sync_every = strategy == "zero3"
    recompute = _recompute_starts(ckpt)
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
        sync = sync_every or last
        # ---- forward: gather each unit before its first layer, one unit ahead.
        gathered_from_before = strategy == "fsdp-shard-grad-op" and j > 0  # kept under no_sync
        ag_fwd: dict[str, int] = {}
        if not gathered_from_before:
            for u in order_fwd:
                ag_fwd[u.name] = b.op(_mb(f"all-gather {u.name} (forward)", j, grad_accum), "all_gather",
                                      shard[u.name] * world * precision.weight_bytes, "allgather", group)
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
        _forward(b, compute, j, grad_accum, wait_at=wait_at, launch_before=launch_before)
        # ---- backward: re-gather resharded units (BACKWARD_PRE prefetch), reduce-scatter after each.
        need = [u for u in order_bwd
                if reshard_after_forward and not (u.is_root and root_kept)]
        ag_bwd = {u.name: b.op(_mb(f"all-gather {u.name} (backward)", j, grad_accum), "all_gather",
                               shard[u.name] * world * precision.weight_bytes, "allgather", group) for u in need}
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
                if strategy == "fsdp-hybrid":
                    ops.append(b.op(_mb(f"all-reduce {u.name} shard across nodes", j, grad_accum), "all_reduce",
                                    shard[u.name] * precision.grad_bytes, "allreduce", "inter"))
                grad_ops += ops
                after.setdefault(min(u.layers), []).extend(ops)
        _backward_pass(b, compute, j, grad_accum, recompute=recompute, before=before, wait_at=bwait, after=after)
    total_shard = sum(shard.values())
    b.task("optimizer", "optimizer", _optimizer_s(compute, total_shard / model.param_count), wait=grad_ops)
    return StrategyProgram(strategy=strategy, program=b.build(), shard_group_size=world,
                           gradient_ops=tuple(grad_ops), units=tuple(units))


__all__ = [
    "STRATEGIES", "SHARDED_STRATEGIES", "FSDP_STRATEGIES", "UNIT_STRATEGIES", "FSDP_UNITS", "ROOT_UNIT",
    "DEEPSPEED_REDUCE_BUCKET_ELEMENTS", "DEEPSPEED_ALIGNMENT_ELEMENTS", "Unit", "StrategyProgram",
    "GroupCollectives", "check_strategy", "check_fsdp_unit", "check_grad_accum", "wrap_units",
    "fsdp_flat_numel", "fsdp_shard_numel", "fsdp2_shard_numel", "deepspeed_partition_numel",
    "zero_redundancy_optimizer_partition", "torch_optimizer_state_bytes", "shard_group_size", "sharded_numel",
    "hybrid_topologies", "hybrid_collectives", "build_step_program", "deepspeed_buckets",
]
