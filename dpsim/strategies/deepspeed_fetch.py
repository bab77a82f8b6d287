"""Which parameters DeepSpeed ZeRO-3 all-gathers again in backward: its reuse-distance release rule.

DeepSpeed ZeRO-3 gathers parameters per *submodule* (every module that owns parameters directly),
not per block, and after each submodule's forward or backward decides whether to free them
(microsoft/DeepSpeed@ce78a632ac82 (v0.14.0) ``deepspeed/runtime/zero/partitioned_param_coordinator.py``,
``PartitionedParameterCoordinator.__params_to_release``): it walks the recorded trace of submodules
from the next one on, adding up their parameter elements, and keeps the parameters if their own
submodule reappears before that running sum reaches ``stage3_max_reuse_distance`` (1e9 elements by
default, ``deepspeed/runtime/zero/config.py`` at the same commit; DeepSpeed's configuration docs: "Do
not release a parameter if it will be reused within this threshold of parameters"). Parameters of
at most ``stage3_param_persistence_threshold`` elements (1e5 by default, same file) are never
partitioned (``parameter_offload.py`` ``mark_persistent_parameters``), so never gathered.

Consequences for one micro-batch (forward, then backward; the trace is per forward+backward and
``reset_step`` frees everything at its end, so every forward gathers every partitioned parameter):

- a submodule whose backward comes within 1e9 elements of its forward keeps its parameters: the
  last blocks of a model, the output head, and a whole model smaller than about 5e8 elements are
  not gathered again in backward;
- under full activation checkpointing each block's forward is re-run just before its backward, so
  the trace holds ``... recompute(block) backward(block) ...``; the re-run frees every submodule
  whose own backward lies more than 1e9 elements further on, which is then gathered a third time
  (for Llama-2-70B's 0.86e9-element blocks: q, k, v and o projections, 18 % of each block).

Not modelled: the prefetcher's marks (``__most_recent_step_id_param_fetched_for``: a parameter
already scanned for a later use is kept), which reach only ``stage3_prefetch_bucket_size`` (5e7)
elements ahead, inside the 1e9 window; the per-submodule granularity of the gathers themselves
(dpsim issues one all-gather per unit with the bytes this rule gives).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from dpsim.workload.spec import ModelSpec

DEEPSPEED_MAX_REUSE_DISTANCE_NUMEL = 1_000_000_000
"""``stage3_max_reuse_distance`` default, 1e9 elements (microsoft/DeepSpeed@ce78a632ac82 (v0.14.0)
``deepspeed/runtime/zero/config.py``: ``max_reuse_distance: int = Field(pp_int(1e9), ...)``)."""

DEEPSPEED_PARAM_PERSISTENCE_THRESHOLD_NUMEL = 100_000
"""``stage3_param_persistence_threshold`` default, 1e5 elements (same file:
``param_persistence_threshold: int = Field(pp_int(1e5), ...)``): smaller parameters stay whole."""


def _submodules(model: ModelSpec) -> list[list[tuple[str, int, int]]]:
    """Per layer, its submodules in registration order: ``(module path, elements, elements
    DeepSpeed partitions)`` (a parameter's module is its name less the last component)."""
    out: list[list[tuple[str, int, int]]] = []
    for layer in model.layers:
        mods: dict[str, list[int]] = {}
        for p in layer.params:
            key = p.name.rsplit(".", 1)[0] if "." in p.name else p.name
            entry = mods.setdefault(key, [0, 0])
            entry[0] += p.numel
            if p.numel > DEEPSPEED_PARAM_PERSISTENCE_THRESHOLD_NUMEL:
                entry[1] += p.numel
        out.append([(k, v[0], v[1]) for k, v in mods.items()])
    return out


def backward_gather_numel(model: ModelSpec, unit_of_layer: Sequence[str], recomputed: Iterable[Sequence[int]],
                          *, max_reuse_numel: int | None = None) -> dict[str, int]:
    """Elements of each unit's parameters DeepSpeed ZeRO-3 all-gathers during one micro-batch's
    backward, recomputation included (0: kept from forward; above the unit's size: part of it
    gathered again after its recomputation freed it). ``unit_of_layer``: the unit name of each
    model layer; ``recomputed``: the layer indices of each unit whose forward re-runs in full
    before its backward. ``max_reuse_numel``: ``stage3_max_reuse_distance`` (``None``:
    :data:`DEEPSPEED_MAX_REUSE_DISTANCE_NUMEL`, read at call time)."""
    if max_reuse_numel is None:
        max_reuse_numel = DEEPSPEED_MAX_REUSE_DISTANCE_NUMEL
    mods = _submodules(model)
    redo = {max(layers): tuple(layers) for layers in recomputed if layers}
    trace: list[tuple[str, int, int, str, bool]] = []  # (module, numel, partitioned, unit, backward)
    for i, layer_mods in enumerate(mods):
        trace += [(k, n, part, unit_of_layer[i], False) for k, n, part in layer_mods]
    for i in range(len(mods) - 1, -1, -1):
        for x in redo.get(i, ()):
            trace += [(k, n, part, unit_of_layer[x], True) for k, n, part in mods[x]]
        trace += [(k, n, part, unit_of_layer[i], True) for k, n, part in reversed(mods[i])]
    # prefix[k]: elements of trace[:k]; nxt[k]: the next position of trace[k]'s module.
    prefix = [0]
    for entry in trace:
        prefix.append(prefix[-1] + entry[1])
    nxt: list[int | None] = [None] * len(trace)
    last: dict[str, int] = {}
    for k in range(len(trace) - 1, -1, -1):
        nxt[k] = last.get(trace[k][0])
        last[trace[k][0]] = k
    available: set[str] = set()
    gathered: dict[str, int] = {}
    for k, (key, _, part, unit, backward) in enumerate(trace):
        if not part:
            continue
        if key not in available:
            available.add(key)
            if backward:
                gathered[unit] = gathered.get(unit, 0) + part
        # Kept when the walk from the next submodule reaches this one before max_reuse_numel
        # elements: the walk stops once the sum *before* a submodule reaches the limit.
        j = nxt[k]
        if j is None or prefix[j] - prefix[k + 1] >= max_reuse_numel:
            available.discard(key)
    return gathered
