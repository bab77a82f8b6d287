"""Colossal-AI Gemini (``--strategy zero3 --zero-impl gemini``): chunked ZeRO-3 as the GeminiPlugin runs it.

Read at hpcaitech/ColossalAI@0b00def88 (2023-08-28, the commit of the Llama-2 benchmark row R053) in
``colossalai/zero/gemini/`` with the ``GeminiPlugin`` defaults of ``colossalai/booster/plugin/gemini_plugin.py``
(``placement_policy="static"``, ``shard_param_frac=1.0``, no offload, ``search_range_m=32``,
``min_chunk_size_m=32``, ``hidden_dim=None``):

Chunks
    ``GeminiDDP._init_chunks`` registers every parameter, in ``module.parameters()`` order (no memory
    statistics under the static policy, so the registration order, not the run order), into chunks of one
    size: a parameter goes into the last chunk unless it would overflow it (``Chunk.append_tensor`` raises
    ``ChunkFullError``), which closes the chunk and opens a new one (of the parameter's size, rounded up to a
    multiple of the ranks, when the parameter alone is larger: ``ChunkManager.register_tensor``). Every
    chunk is allocated, gathered and reduced at its full size, padding included.
Chunk size (``chunk/search_utils.py`` ``search_chunk_configuration``)
    Parameters more than three standard deviations above the mean size are left out of the search
    (``_filter_exlarge_params``: the embedding and the head of a language model); from the largest remaining
    parameter (at least ``min_chunk_size_m`` x 2^20 elements), rounded up to the search interval (1024:
    ``init_chunk_manager`` without ``hidden_dim``), every size up to ``search_range_m`` x 2^20 elements further
    on is tried and the first that wastes the fewest elements in the chunks' tails (``_get_unused_byte``)
    wins, rounded up to a multiple of the ranks. A model smaller than ``min_chunk_size_m`` x 2^20 elements is
    one chunk kept gathered (``keep_gathered``), reduced by all-reduce.
When a chunk is gathered and freed (``gemini_hook.py`` ``GeminiZeROHook``, ``gemini_mgr.py``, ``placement_policy.py``)
    Every torch operation on a parameter runs ``pre_op``: its parameters go to ``COMPUTE``, the static
    policy releases (re-shards) every gathered chunk all of whose tensors are ``HOLD`` or
    ``HOLD_AFTER_BWD`` (``evict_tensors`` with nothing to keep gathered at ``shard_param_frac`` 1), and the
    op's chunks are gathered (``Chunk.__gather``: ``dist.all_gather`` into the chunk, synchronous: nothing is
    prefetched). ``post_op`` puts them back to ``HOLD`` (``HOLD_AFTER_BWD`` in backward, the recomputation
    of checkpointed blocks included). So a chunk stays gathered until an operation on a parameter of
    another chunk runs, and a block whose parameters run in another order than they were registered in
    gathers a chunk more than once per pass (a Llama decoder layer registers its attention, MLP, then both
    norms, and runs norm, attention, norm, MLP: :func:`registration_order`).
Gradients (``gemini_ddp.py`` ``grad_handle``)
    Each gradient is copied into its parameter's slot of the gathered chunk
    (``copy_tensor_to_chunk_slice``) and marks it ``READY_FOR_REDUCE``; a chunk holding a ready gradient
    cannot be released; when every tensor of the chunk is ready, ``Chunk.reduce`` reduce-scatters the whole
    chunk (``dist.reduce_scatter``, synchronous) and divides the shard by the ranks. There is no separate
    gradient buffer: the 16-bit shard holds the gradient until the optimizer's update copies the fp32
    master back into it (``Chunk.optim_update``).
Memory per rank
    Per chunk a 16-bit shard (parameters, then gradients) and the fp32 master shard of the paired fp32
    chunk (``init_pair``), with HybridAdam's two fp32 moments on it; plus the chunks gathered at the same
    moment (:func:`gemini_schedule`'s peak).

Not modelled: the ``auto`` placement policy (the ``gemini_auto`` plugin choice: a memory tracer's
warm-up iteration, then eviction to CPU by predicted demand), partial sharding (``shard_param_frac`` below 1)
and offload fractions: the rows and defaults run ``static`` with every chunk sharded and nothing offloaded;
the asynchronous prefetch of later versions (``max_prefetch``, absent at this commit).

Costed here: every gather and reduce-scatter where the rule above puts it, exposed (on the compute
stream); torch's list-form collectives' staging copies (``ProcessGroupNCCL::allgather`` gathers into a
flat buffer and copies it out to the list's tensors, ``reduce_scatter`` copies the list into a flat input
first: pytorch/pytorch ``torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp``; a read and a write of the
chunk each); the gradient copy into the chunk and the shard's division. Not costed: the overflow check
(``has_inf_or_nan``, a read of the shard and a host sync per chunk), the optimizer's casts between the
16-bit and fp32 chunks beyond the step's own time, and the host's hook overhead per operation.
"""

from __future__ import annotations

import functools
import math
import re
import statistics
from collections.abc import Mapping, Sequence

from dpsim.errors import ConfigError
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
from dpsim.workload.roofline import Efficiencies, memory_term
from dpsim.workload.spec import ModelSpec, ParamSpec

GEMINI_SEARCH_RANGE_M = 32
"""``search_range_m``: chunk sizes tried, in 2^20 elements past the start (``GeminiPlugin.__init__`` default
``search_range_m: int = 32``, hpcaitech/ColossalAI@0b00def88 ``colossalai/booster/plugin/gemini_plugin.py``)."""

GEMINI_MIN_CHUNK_SIZE_M = 32
"""``min_chunk_size_m``: the smallest chunk, in 2^20 elements (same signature, ``min_chunk_size_m: float = 32``)."""

GEMINI_SEARCH_INTERVAL = 1024
"""Step of the search without ``hidden_dim`` (``init_chunk_manager``: ``search_interval = 1024  # defaults to
1024``, ``colossalai/zero/gemini/chunk/utils.py`` at the same commit)."""

_HF_LLAMA_LATE = re.compile(r"\.(input_layernorm|post_attention_layernorm)\.")
"""A Llama-family decoder layer registers ``self_attn`` and ``mlp`` before its two norms
(``LlamaDecoderLayer.__init__`` in huggingface/transformers ``src/transformers/models/llama/modeling_llama.py``,
read in transformers 5.25.0: ``self_attn``, ``mlp``, ``input_layernorm``, ``post_attention_layernorm``; the
Llama-2 row ran a 2023 release, not re-read)."""


GEMINI_PRECISIONS = ("bf16-params", "fp16-params")
"""What Gemini keeps: 16-bit parameter chunks (``mixed_precision`` bf16 or fp16, the GeminiPlugin's only
``precision`` choices, ``SUPPORTED_PRECISION``) whose gradients are reduced in the chunk, beside fp32 master
chunks (``GeminiDDP._init_chunks`` registers an ``fp16_param`` and an ``fp32_param`` chunk per parameter)."""


def check_gemini_precision(impl: str, precision: str) -> None:
    """Refuse a ``--precision`` Gemini does not run (:data:`GEMINI_PRECISIONS`)."""
    if impl == "gemini" and precision not in GEMINI_PRECISIONS:
        raise ConfigError(f"--precision: {precision} is not what --zero-impl gemini runs (16-bit parameter chunks "
                          f"with fp32 master chunks, gradients reduced in 16 bits); use "
                          f"{' or '.join(GEMINI_PRECISIONS)}")


def registration_order(model: ModelSpec) -> list[ParamSpec]:
    """The model's parameters in ``module.parameters()`` order. dpsim lists each layer's parameters in
    the order its operations use them; a Hugging Face Llama-family decoder layer registers its two norms
    last (:data:`_HF_LLAMA_LATE`), so within each block those move behind the block's other parameters.
    Other models are taken as registered in run order."""
    out: list[ParamSpec] = []
    block: list[ParamSpec] = []
    late: list[ParamSpec] = []
    prefix: str | None = None

    def flush() -> None:
        out.extend(block)
        out.extend(late)
        block.clear()
        late.clear()

    for p in model.params:
        m = re.match(r"(.*\.layers\.\d+)\.", p.name)
        key = m.group(1) if m else None
        if key != prefix:
            flush()
            prefix = key
        (late if key is not None and _HF_LLAMA_LATE.search(p.name) else block).append(p)
    flush()
    return out


def _unused(sizes: Sequence[int], chunk: int) -> int:
    """Elements left empty in the chunks' tails when ``sizes`` fill chunks of ``chunk`` elements in
    order (``_get_unused_byte``)."""
    acc = left = 0
    for s in sizes:
        if s > left:
            acc += left
            left = chunk
        left -= s
    return left + acc


def gemini_chunk_size(numels: Sequence[int], world: int, *, search_range_m: float = GEMINI_SEARCH_RANGE_M,
                      min_chunk_size_m: float = GEMINI_MIN_CHUNK_SIZE_M,
                      interval: int = GEMINI_SEARCH_INTERVAL) -> tuple[int, bool]:
    """``(chunk elements, keep_gathered)`` that ``search_chunk_configuration`` picks for parameters of
    ``numels`` (registration order) on ``world`` ranks (the module docstring)."""
    return _chunk_size(tuple(numels), world, search_range_m, min_chunk_size_m, interval)


@functools.lru_cache(maxsize=64)
def _chunk_size(numels: tuple[int, ...], world: int, search_range_m: float, min_chunk_size_m: float,
                interval: int) -> tuple[int, bool]:
    # The search tries up to 32,769 sizes over every parameter: cached, since a prediction asks for the same
    # model's chunks for its memory and for its step.
    search_range = round(search_range_m * 1024 ** 2)
    min_chunk = round(min_chunk_size_m * 1024 ** 2)
    total = sum(numels)
    if total < min_chunk:
        return total, True
    sizes = list(numels)
    if len(sizes) > 1:
        # _filter_exlarge_params: numpy's std is the population one.
        upper = statistics.fmean(sizes) + 3 * statistics.pstdev(sizes)
        sizes = [s for s in sizes if s <= upper]
    start = int(math.ceil(max([min_chunk, *sizes]) / interval) * interval)
    best, waste = start, math.inf
    for size in range(start, start + search_range + 1, interval):
        w = _unused(sizes, size)
        if w < waste:
            best, waste = size, w
    return best + (-best % world), False


@frozen_dataclass
class GeminiChunk:
    """One chunk: its parameters (registration order) and its elements, padding included."""

    params: tuple[str, ...]
    """Names of the parameters it holds, in the order the model registers them."""
    numel: int
    """Elements of the chunk, padding included (a rank keeps ``numel / world`` of a sharded chunk)."""


def gemini_chunks(params: Sequence[ParamSpec], chunk_size: int, world: int, *, keep_gathered: bool = False
                  ) -> tuple[GeminiChunk, ...]:
    """The chunks ``ChunkManager.register_tensor`` fills from ``params`` (registration order)."""
    if keep_gathered:
        return (GeminiChunk(params=tuple(p.name for p in params), numel=sum(p.numel for p in params)),)
    chunks: list[tuple[list[str], int, int]] = []  # (names, capacity, used)
    for p in params:
        if chunks and chunks[-1][2] + p.numel <= chunks[-1][1]:
            names, cap, used = chunks[-1]
            names.append(p.name)
            chunks[-1] = (names, cap, used + p.numel)
            continue
        cap = chunk_size if p.numel <= chunk_size else p.numel + (-p.numel % world)
        chunks.append(([p.name], cap, p.numel))
    return tuple(GeminiChunk(params=tuple(n), numel=cap) for n, cap, _ in chunks)


@frozen_dataclass
class GeminiEvent:
    """A collective the hooks issue: ``op`` (``all_gather``, ``reduce_scatter`` or, for a kept-gathered
    chunk, ``all_reduce``) of chunk ``chunk`` during ``phase`` (``forward``, ``recompute``, ``backward``)
    of model layer ``layer``."""

    phase: str
    """``forward``, ``recompute`` or ``backward``."""
    layer: int
    """The model layer whose operation issues it."""
    op: str
    """``all_gather``, ``reduce_scatter`` or ``all_reduce`` (a kept-gathered chunk)."""
    chunk: int
    """Index of the chunk in :class:`GeminiPlan`'s ``chunks``."""


@frozen_dataclass
class GeminiSchedule:
    """One micro-batch's collectives in issue order and the most chunk elements gathered at once."""

    events: tuple[GeminiEvent, ...]
    """The collectives in issue order."""
    peak_gathered_numel: int
    """The most chunk elements gathered at one time (what memory must hold beside the shards)."""


_HOLD, _COMPUTE, _HOLD_AFTER_BWD, _READY = "hold", "compute", "hold_after_bwd", "ready"


def gemini_schedule(model: ModelSpec, chunks: Sequence[GeminiChunk], recomputed: Mapping[int, Sequence[int]],
                    *, keep_gathered: bool = False) -> GeminiSchedule:
    """Replays one micro-batch through the hooks' state machine (the module docstring). ``recomputed``:
    for the last layer of each checkpointed unit, the unit's layers, whose forward re-runs before that
    layer's backward. Each operation uses one parameter, in dpsim's order of use within a layer."""
    chunk_of = {name: c for c, ch in enumerate(chunks) for name in ch.params}
    members = [list(ch.params) for ch in chunks]
    state = {name: _HOLD for ch in chunks for name in ch.params}
    gathered: set[int] = set(range(len(chunks))) if keep_gathered else set()
    events: list[GeminiEvent] = []
    peak = sum(chunks[c].numel for c in gathered)

    def pre_op(name: str, phase: str, layer: int) -> None:
        nonlocal peak
        state[name] = _COMPUTE
        c = chunk_of[name]
        if not keep_gathered:
            for other in sorted(gathered):
                if all(state[n] in (_HOLD, _HOLD_AFTER_BWD) for n in members[other]):
                    gathered.discard(other)  # StaticPlacementPolicy.evict_tensors -> release_chunk
            if c not in gathered:
                gathered.add(c)
                events.append(GeminiEvent(phase=phase, layer=layer, op="all_gather", chunk=c))
        peak = max(peak, sum(chunks[x].numel for x in gathered))

    layers = [[p.name for p in layer.params] for layer in model.layers]
    for i, names in enumerate(layers):
        for n in names:
            pre_op(n, "forward", i)
            state[n] = _HOLD
    for i in range(len(layers) - 1, -1, -1):
        for x in recomputed.get(i, ()):
            for n in layers[x]:
                pre_op(n, "recompute", i)
                state[n] = _HOLD_AFTER_BWD
        for n in reversed(layers[i]):
            pre_op(n, "backward", i)
            state[n] = _READY  # post_backward (HOLD_AFTER_BWD), then grad_handle
            c = chunk_of[n]
            if all(state[m] == _READY for m in members[c]):
                events.append(GeminiEvent(phase="backward", layer=i, op="all_reduce" if keep_gathered
                                          else "reduce_scatter", chunk=c))
                for m in members[c]:
                    state[m] = _HOLD
                if not keep_gathered:
                    gathered.discard(c)
    return GeminiSchedule(events=tuple(events), peak_gathered_numel=peak)


@frozen_dataclass
class GeminiPlan:
    """Gemini's chunks for one model on ``world`` ranks and one micro-batch's schedule."""

    chunk_size: int
    """Elements per chunk, as the plugin's chunk-size search picks it."""
    keep_gathered: bool
    """Whether every parameter sits in one chunk kept whole on each rank (no sharding)."""
    chunks: tuple[GeminiChunk, ...]
    """The chunks in registration order."""
    schedule: GeminiSchedule
    """One micro-batch's collectives."""
    world: int
    """Ranks the chunks are sharded over."""

    @property
    def shard_numel(self) -> int:
        """Elements of every chunk one rank keeps (a kept-gathered chunk whole)."""
        return sum(c.numel if self.keep_gathered else c.numel // self.world for c in self.chunks)

    @property
    def padded_numel(self) -> int:
        """Elements of all chunks, padding included."""
        return sum(c.numel for c in self.chunks)


def gemini_plan(model: ModelSpec, world: int, recomputed: Mapping[int, Sequence[int]]) -> GeminiPlan:
    """Chunks, chunk size and one micro-batch's schedule of ``model`` on ``world`` ranks."""
    params = registration_order(model)
    size, keep = gemini_chunk_size([p.numel for p in params], world)
    keep = keep or world == 1
    chunks = gemini_chunks(params, size, world, keep_gathered=keep)
    return GeminiPlan(chunk_size=size, keep_gathered=keep, chunks=chunks,
                      schedule=gemini_schedule(model, chunks, recomputed, keep_gathered=keep), world=world)


def build_gemini(request: BuildRequest) -> StrategyProgram:
    """``zero3 --zero-impl gemini``: one step of Gemini (the module docstring). Every collective runs on
    the compute stream: each gather is launched before the layer whose operation issues it, which waits
    for it; each reduce-scatter after the layer whose gradient completes its chunk, the next task waiting
    for it."""
    model, compute, precision = request.model, request.compute, request.precision
    world, grad_accum = request.shard_group_size, request.grad_accum
    check_gemini_precision("gemini", precision.name)
    recomputed = ({max(u.layers): tuple(u.layers) for u in request.checkpoint_units}
                  if request.recompute_share is None else {})
    plan = gemini_plan(model, world, recomputed)
    w, g = precision.weight_bytes, precision.grad_bytes
    # Each staging pass streams its bytes through the compute GPU's memory once (not costed without one).
    gpu, eff = request.compute_gpu, request.efficiencies or Efficiencies()
    t = (lambda size: memory_term(size, gpu).time_s(eff) if size else 0.0) if gpu is not None else (  # noqa: E731
        lambda size: 0.0)
    sizes = {"all_gather": w, "reduce_scatter": g, "all_reduce": g}
    kinds = {"all_gather": "allgather", "reduce_scatter": "reducescatter", "all_reduce": "allreduce"}
    grad_copy: dict[int, float] = {}
    for i, layer in enumerate(model.layers):
        # grad_handle's copy of each gradient into its chunk slot: a read and a write.
        grad_copy[i] = t(2 * sum(p.numel for p in layer.params) * g)
    recompute = _recompute_starts(request.checkpoint_units, request.recompute_share)
    b = _Builder()
    grad_ops: list[int] = []
    copies_s = 0.0
    for j in range(grad_accum):
        fwd_launch: dict[int, list[int]] = {}
        fwd_extra: dict[int, float] = {}
        bwd_before: dict[int, list[int]] = {}
        bwd_after: dict[int, list[int]] = {}
        bwd_extra: dict[int, float] = dict(grad_copy)
        for e in plan.schedule.events:
            numel = plan.chunks[e.chunk].numel
            name = f"{e.op.replace('_', '-')} chunk {e.chunk} ({e.phase})"
            op = b.op(_mb(name, j, grad_accum), e.op, numel * sizes[e.op], kinds[e.op])
            if e.op == "all_gather":
                # torch's list-form all_gather copies its flat output into the chunk's views.
                extra = t(2 * numel * w)
                if e.phase == "forward":
                    fwd_launch.setdefault(e.layer, []).append(op)
                    fwd_extra[e.layer] = fwd_extra.get(e.layer, 0.0) + extra
                else:
                    bwd_before.setdefault(e.layer, []).append(op)
                    bwd_extra[e.layer] = bwd_extra.get(e.layer, 0.0) + extra
            else:
                grad_ops.append(op)
                bwd_after.setdefault(e.layer, []).append(op)
                # reduce_scatter's copy of the chunk into its flat input, then the shard's div_.
                shard = numel if e.op == "all_reduce" else numel // world
                bwd_extra[e.layer] = bwd_extra.get(e.layer, 0.0) + (
                    t(2 * numel * g) if e.op == "reduce_scatter" else 0.0) + t(2 * shard * g)
        _forward(b, compute, j, grad_accum, wait_at=fwd_launch, launch_before=fwd_launch, extra_s=fwd_extra)
        _backward_pass(b, compute, j, grad_accum, recompute=recompute, before=bwd_before, wait_at=bwd_before,
                       after=bwd_after, block_after=bwd_after, extra_s=bwd_extra)
        copies_s += sum(fwd_extra.values()) + sum(bwd_extra.values())
    b.task("optimizer", "optimizer", _optimizer_s(compute, plan.shard_numel / model.param_count), wait=grad_ops)
    return StrategyProgram(strategy="zero3", program=b.build(), shard_group_size=world,
                           gradient_ops=tuple(grad_ops), units=tuple(request.checkpoint_units),
                           framework_parts_s={"gemini_copies": copies_s} if copies_s else {})

