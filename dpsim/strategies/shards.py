"""Shard maths shared by the strategies and the memory model: units, flat parameters, partitions, buckets.

Sizes follow the implementations to the element: FSDP's flat parameters and their
padding, FSDP2's per-parameter dim-0 chunks, DeepSpeed's aligned flat buffer and its
``reduce_bucket_size``, torch's ``ZeroRedundancyOptimizer`` greedy partition and torch
optimizer state. Nothing here knows a strategy key: :mod:`~dpsim.strategies.registry`
says which strategy uses which rule.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterator, Sequence

from dpsim.errors import ConfigError
from dpsim.frozen import frozen_dataclass
from dpsim.workload.buckets import bucket_caps_bytes
from dpsim.workload.precision import OPTIMIZER_STATES, check_optimizer
from dpsim.workload.spec import ModelSpec, ParamSpec

DEEPSPEED_REDUCE_BUCKET_ELEMENTS = 500_000_000
"""DeepSpeed ``zero_optimization.reduce_bucket_size`` default (5e8 elements,
``deepspeed/runtime/zero/config.py``)."""

INTERNLM_REDUCE_BUCKET_ELEMENTS = 512 * 1024 * 1024
"""InternLM's ``hybrid_zero_optimizer.reduce_bucket_size`` in its shipped configuration
(``configs/7B_sft.py`` at InternLM/InternLM@20fe5ac297e6: ``reduce_bucket_size=512 * 1024 * 1024``,
compared with a bucket's element count in ``_store_and_try_reduce_grads_by_bucket``); the code
has no default of its own."""

DEEPSPEED_ALIGNMENT_ELEMENTS = 2
"""DeepSpeed ``nccl_start_alignment_factor`` (``stage_1_and_2.py``: "4-byte
alignment/sizeof(fp16) = 2"): the flat 16-bit buffer is padded to a multiple of
``2 × world_size`` elements before it is partitioned."""

ROOT_UNIT = "(root)"
"""Name of the root unit (embeddings, final norm, head: the layers outside every block)."""

FSDP_UNITS: dict[str, str] = {
    "block": "each transformer block / residual block (the model's LayerSpec.unit), the rest is the root",
    "layer": "each layer that owns parameters",
    "model": "the whole model as one unit",
}
"""Unit granularities (``--fsdp-unit``)."""


def check_fsdp_unit(name: str) -> str:
    """Validate a ``--fsdp-unit`` key."""
    if name not in FSDP_UNITS:
        raise ConfigError(f"--fsdp-unit: {name!r} is not known; choose one of {', '.join(FSDP_UNITS)}")
    return name


# ------------------------------------------------------------------------ units


@frozen_dataclass
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
    # One pass over the parameters (each keeps its registration order within its unit).
    params_of: dict[str | None, list] = {k: [] for k in order}
    for p in model.params:
        params_of[key[layer_index[p.name]]].append(p)
    return tuple(Unit(name=ROOT_UNIT if k is None else k, layers=tuple(members[k]), params=tuple(params_of[k]),
                      is_root=k is None) for k in order)


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


def deepspeed_reduce_bucket_elements(bucket_cap_mb: float | None, grad_element_bytes: int,
                                     default: int = DEEPSPEED_REDUCE_BUCKET_ELEMENTS) -> int:
    """DeepSpeed's ``reduce_bucket_size`` (elements) for dpsim's ``--bucket-cap-mb``.

    DeepSpeed counts the ipg gradient bucket in *elements* (``reduce_bucket_size``,
    default 5e8, ``deepspeed/runtime/zero/config.py``: "Number of elements
    reduced/allreduced at a time"); dpsim's flag, shared with DDP, is in *MiB of
    gradients*. A cap of ``x`` MiB is ``int(x * 2**20)`` bytes (truncated as DDP
    truncates it, :func:`~dpsim.workload.buckets.bucket_caps_bytes`), divided by the
    gradient element size and rounded down: 1 MiB of bf16 gradients is 524,288
    elements. ``None`` keeps ``default`` (DeepSpeed's; InternLM's optimizer counts its bucket in
    elements too, :data:`INTERNLM_REDUCE_BUCKET_ELEMENTS`).
    """
    if bucket_cap_mb is None:
        return default
    assert grad_element_bytes > 0, "gradient elements have a size"
    _, cap_bytes = bucket_caps_bytes(bucket_cap_mb)  # validates the flag's value
    return cap_bytes // grad_element_bytes


def zero_redundancy_optimizer_partition(params: Sequence[ParamSpec], world_size: int) -> list[list[ParamSpec]]:
    """Which parameters each rank's ``torch.distributed.optim.ZeroRedundancyOptimizer`` owns.

    torch 2.13 ``ZeroRedundancyOptimizer._partition_parameters``: whole parameters,
    sorted by size (largest first, a stable sort), each given greedily to the rank with
    the smallest total so far (the first such rank, ``_get_min_index``). InternLM's
    ``HybridZeroOptimizer._partition_param_list`` (``internlm/solver/optimizer/hybrid_zero_optim.py``
    at InternLM/InternLM@20fe5ac297e6) is the same rule over its ZERO1 group: ``sorted(...,
    key=numel, reverse=True)``, then ``numel_per_rank.index(min(numel_per_rank))``; ranks left
    without a parameter own nothing (``no_params_ranks``).
    """
    if world_size < 1:
        raise ConfigError(f"world size: {world_size} is not valid; expected an integer >= 1")
    parts: list[list[ParamSpec]] = [[] for _ in range(world_size)]
    for p, rank in _greedy_owners(params, world_size):
        parts[rank].append(p)
    return parts


def _greedy_owners(params: Sequence[ParamSpec], world_size: int) -> Iterator[tuple[ParamSpec, int]]:
    """(parameter, owner) by :func:`zero_redundancy_optimizer_partition`'s rule. The ranks given
    something sit in a heap of (total, rank), the untouched ones are taken in rank order while
    none of those holds nothing: the first rank with the smallest total, without a scan of every
    rank per parameter (a group may span 65,536 ranks)."""
    heap: list[tuple[int, int]] = []
    fresh = 0
    for p in sorted(params, key=lambda q: q.numel, reverse=True):
        if fresh < world_size and not (heap and heap[0][0] == 0):
            total, rank = 0, fresh
            fresh += 1
        else:
            total, rank = heapq.heappop(heap)
        yield p, rank
        heapq.heappush(heap, (total + p.numel, rank))


def internlm_owned_numel(params: Sequence[ParamSpec], group: int) -> list[int]:
    """Elements each rank of an InternLM ZERO1 group of ``group`` ranks owns, in rank order
    (zeros for ranks left without a parameter): :func:`zero_redundancy_optimizer_partition`."""
    if group < 1:
        raise ConfigError(f"--zero-group: {group} is not valid; expected an integer >= 1")
    owned = [0] * group
    for p, rank in _greedy_owners(params, group):
        owned[rank] += p.numel
    return owned


def torch_optimizer_state_bytes(numels: Sequence[int], optimizer: str, state_element_bytes: int = 4) -> int:
    """Bytes of torch optimizer state for parameter tensors of ``numels`` elements.

    Adam/AdamW (torch 2.13, not fused/capturable): ``exp_avg`` and ``exp_avg_sq`` like the
    parameter plus a float32 scalar ``step`` tensor per parameter; SGD with momentum: one
    ``momentum_buffer``; plain SGD: nothing.
    """
    states = OPTIMIZER_STATES[check_optimizer(optimizer)]
    step = 4 if optimizer in ("adam", "adamw") else 0
    return sum(states * n * state_element_bytes + step for n in numels)


def unit_shard_numel(params: Sequence[ParamSpec], world_size: int, fsdp_version: str = "1") -> int:
    """Elements each rank holds of one unit's parameters: FSDP1 (and ZeRO-3 as dpsim runs it)
    shards the unit's flat parameter (:func:`fsdp_shard_numel`); FSDP2 shards each parameter
    on dim 0 (:func:`fsdp2_shard_numel`)."""
    if fsdp_version == "2":
        return fsdp2_shard_numel([p.shape for p in params], world_size)
    return fsdp_shard_numel([p.numel for p in params], world_size)


def units_shard_numel(model: ModelSpec, world_size: int, fsdp_unit: str = "block", fsdp_version: str = "1") -> int:
    """Elements one rank owns when every unit is sharded (ZeRO-3, FSDP): the sum over units
    of :func:`unit_shard_numel`."""
    return sum(unit_shard_numel(u.params, world_size, fsdp_version)
               for u in wrap_units(model, fsdp_unit) if u.params)
