"""Shard maths shared by the strategies and the memory model: units, flat parameters, partitions.

Sizes follow the implementations to the element: FSDP's flat parameters and their
padding, FSDP2's per-parameter dim-0 chunks, DeepSpeed's aligned flat buffer, torch's
``ZeroRedundancyOptimizer`` greedy partition and torch optimizer state.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from dpsim.errors import ConfigError
from dpsim.strategies.registry import check_fsdp_unit, check_strategy
from dpsim.workload.spec import ModelSpec, ParamSpec

DEEPSPEED_REDUCE_BUCKET_ELEMENTS = 500_000_000
"""DeepSpeed ``zero_optimization.reduce_bucket_size`` default (5e8 elements,
``deepspeed/runtime/zero/config.py``)."""

DEEPSPEED_ALIGNMENT_ELEMENTS = 2
"""DeepSpeed ``nccl_start_alignment_factor`` (``stage_1_and_2.py``: "4-byte
alignment/sizeof(fp16) = 2"): the flat 16-bit buffer is padded to a multiple of
``2 × world_size`` elements before it is partitioned."""

ROOT_UNIT = "(root)"
"""Name of the root unit (embeddings, final norm, head: the layers outside every block)."""


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
