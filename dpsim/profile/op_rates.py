"""The op graph costed with a profile's measured kernel rates, and the kernels calibrate times for it.

``dpsim calibrate --model`` times the kernels the model's op graph runs
(:attr:`dpsim.workload.spec.LayerSpec.ops`) on the rank's device: every distinct GEMM
(:func:`gemms`: a matmul's forward and its two backward GEMMs, ``m`` times the micro-batch),
every fused attention kernel (SDPA at the op's shape; on a CPU torch runs its math kernel, as CPU
training does), an element-wise kernel at a few sizes, fitted as
``time = launch_s + bytes / bandwidth`` (:class:`~dpsim.profile.schema.OpRates`), and one
representative kernel of each kind of memory-bound op the model has
(:data:`dpsim.workload.memory_kinds.MEMORY_KINDS`: LayerNorm, GELU, cross-entropy, a residual add,
a transposing copy, ...; forward and, where it is a kernel of its own, backward) at the model's
size and two smaller ones (:func:`memory_kind_sizes`), fitted the same way per kind and direction.
``predict --calibration`` then costs each op of the model it predicts with them
(:func:`op_rate_compute`) instead of the GPU preset's roofline:

* **a GEMM** takes its FLOPs over the measured rate of that exact shape (dtype, m, n, k, batch);
  for a shape not timed, the rate of the nearest timed shapes of that dtype, *nearest* by the
  Euclidean distance between ``(ln m, ln n, ln k, ln batch)`` (size and aspect at once): the two
  nearest, their log-rates averaged with weights ``1 / distance`` (one timed shape: its rate).
  Rates, not times, carry over: a shape twice as large at the same rate takes twice as long.
* **fused attention** takes its forward FLOPs (``4 · seq² · heads · head_dim``, half when
  causal) over the measured kernel's forward FLOP/s, and 2.5 times those FLOPs over its
  backward FLOP/s (the roofline's convention, so an exact shape gets its measured times back);
  the nearest kernel by the same rule over ``(ln seq, ln head_dim, ln batch·heads)``, among
  those with the same mask when any.
* **a memory-bound op** takes ``launch_s + bytes / bandwidth`` per kernel each way, its bytes
  the roofline's (:func:`dpsim.workload.roofline.pass_bytes`), at its kind's fit for that way
  (:func:`dpsim.workload.memory_kinds.memory_kind`; a kind without a backward kernel of its own
  costs its backward at its forward fit), else at the one element-wise fit, as do autocast's
  weight casts (one kernel per weight). A CPU runs LayerNorm, GELU's tanh and softmax
  compute-bound, far below a copy's bandwidth, so one fit for all of them under-costs them.

What the profile did not time is costed as without op rates, at the profile's measured matmul
rates and copy bandwidth, and said so: a convolution (timed as a plain GEMM it would be
flattered), eager (unfused) attention, a dtype not timed, a layer known only by its FLOPs; the
optimizer step stays modelled at the measured copy bandwidth.
"""

from __future__ import annotations

import math
from dataclasses import replace
from functools import lru_cache

from dpsim.profile.fit import fit_alpha_beta
from dpsim.profile.schema import AttentionRate, MatmulRate, MemoryKindRate, OpRates
from dpsim.workload.compute import autocast_weight_bytes, layer_times
from dpsim.workload.memory_kinds import MEMORY_KINDS, memory_kind
from dpsim.workload.roofline import FUSED_ATTENTION_BACKWARD_FLOPS, op_kind, op_times, pass_bytes
from dpsim.workload.spec import AttentionOp, LayerSpec, MatmulOp, MemoryOp, ModelSpec

MAX_TIMED_KERNELS = 48
"""Most GEMM shapes plus attention kernels one calibration times (the ones with the most FLOPs
in the step first); the rest are costed from their nearest timed neighbour (:class:`OpRates.left_out`)."""

MEMORY_KERNEL_BYTES = tuple(4**i * 2**12 for i in range(8))
"""Bytes one element-wise kernel moves (read + write) in the launch + bandwidth fit: 4 KiB to
64 MiB by factors of 4, small enough to time the launch and large enough to leave the caches."""


MEMORY_KIND_SIZE_FRACTIONS = (1 / 16, 1 / 4, 1.0)
"""Sizes each memory-bound kind is timed at, as fractions of its largest op in the model (rounded to whole
rows): the model's own size, and two smaller ones to fit ``launch_s + bytes / bandwidth`` (ASSUMED: a
factor of 4 apart, the element-wise sweep's step, spans launch- and bytes-bound at the model's sizes)."""

DEFAULT_ROW_ELEMENTS = 1024
"""Row length of a kind's timed tensor when the model's tokens per sample do not give one (ASSUMED: a
LayerNorm or softmax costs per element about alike at any row of this order)."""


def gemms(op: MatmulOp, micro_batch: int) -> tuple[tuple[int, int, int, int], ...]:
    """``(m, n, k, batch)`` of the forward GEMM and of backward's input- and weight-gradient GEMMs."""
    m = op.m * micro_batch
    return (m, op.n, op.k, op.batch), (m, op.k, op.n, op.batch), (op.n, op.k, m, op.batch)


def _attention_flops(seq: int, heads: int, head_dim: int, causal: bool) -> float:
    return 4.0 * seq * seq * heads * head_dim * (0.5 if causal else 1.0)


def _kernel_flops(model: ModelSpec, micro_batch: int) -> dict[tuple, float]:
    """FLOPs per step of each distinct timeable kernel: ``("matmul", m, n, k, batch)`` or
    ``("attention", batch_heads, seq, head_dim, causal)``."""
    flops: dict[tuple, float] = {}
    for layer in model.layers:
        for op in layer.ops:
            if isinstance(op, MatmulOp) and op.kind == "linear":
                for shape in gemms(op, micro_batch):
                    flops[("matmul", *shape)] = flops.get(("matmul", *shape), 0.0) + 2.0 * math.prod(shape)
            elif isinstance(op, AttentionOp) and op.fused:
                key = ("attention", op.heads * micro_batch, op.seq, op.head_dim, op.causal)
                flops[key] = flops.get(key, 0.0) + _attention_flops(op.seq, op.heads * micro_batch, op.head_dim,
                                                                    op.causal) * (1 + FUSED_ATTENTION_BACKWARD_FLOPS)
    return flops


def memory_kind_sizes(model: ModelSpec, micro_batch: int) -> list[dict]:
    """Each kind of memory-bound op ``model`` has (:data:`MEMORY_KINDS` order): ``{"kind", "row",
    "elements": [...]}``, the tensor's row length (its largest op's elements per token, e.g. the hidden
    size of a LayerNorm, the vocabulary of the loss) and the element counts to time it at
    (:data:`MEMORY_KIND_SIZE_FRACTIONS` of that op's elements at ``micro_batch``, whole rows)."""
    largest: dict[str, float] = {}
    for layer in model.layers:
        for op in layer.ops:
            if isinstance(op, MemoryOp) and (kind := memory_kind(op)):
                largest[kind] = max(largest.get(kind, 0.0), op.elements)
    tokens = model.tokens_per_sample or 0
    out = []
    for kind in MEMORY_KINDS:
        if kind not in largest:
            continue
        per_sample = largest[kind]
        row = int(per_sample // tokens) if tokens and per_sample % tokens == 0 and per_sample >= tokens \
            else DEFAULT_ROW_ELEMENTS
        total = max(row, int(per_sample * micro_batch))
        elements = sorted({max(1, int(total * f) // row) * row for f in MEMORY_KIND_SIZE_FRACTIONS})
        out.append({"kind": kind, "row": row, "elements": elements})
    return out


def kernels_to_time(model: ModelSpec, micro_batch: int) -> dict:
    """The distinct kernels of ``model``'s op graph at ``micro_batch``, at most :data:`MAX_TIMED_KERNELS`
    GEMMs and attention kernels (those with the most FLOPs per step first), and its memory-bound kinds:
    ``{"matmul": [[m, n, k, batch], ...], "attention": [[batch_heads, seq, head_dim, causal], ...],
    "memory_kinds": [{"kind", "row", "elements"}, ...] (:func:`memory_kind_sizes`), "left_out": int}``;
    JSON-able, for the ranks."""
    flops = _kernel_flops(model, micro_batch)
    ranked = sorted(flops, key=lambda key: (-flops[key], key))
    kept = ranked[:MAX_TIMED_KERNELS]
    return {"matmul": [list(k[1:]) for k in kept if k[0] == "matmul"],
            "attention": [list(k[1:]) for k in kept if k[0] == "attention"],
            "memory_kinds": memory_kind_sizes(model, micro_batch),
            "left_out": len(ranked) - len(kept)}


def untimed_kernels(model: ModelSpec, rates: OpRates, micro_batch: int) -> tuple[int, int]:
    """(kernels of ``model`` at ``micro_batch`` whose exact shape the profile did not time, all its kernels)."""
    timed = {("matmul", r.m, r.n, r.k, r.batch) for r in rates.matmuls}
    timed |= {("attention", a.batch_heads, a.seq, a.head_dim, a.causal) for a in rates.attention}
    kernels = _kernel_flops(model, micro_batch)
    return len(set(kernels) - timed), len(kernels)


def _nearest_log_rate(query: tuple[float, ...], points: list[tuple[tuple[float, ...], float]]) -> float:
    """Rate at ``query`` from ``(shape, rate)`` points: the module docstring's rule."""
    lq = [math.log(x) for x in query]
    scored = sorted(((math.dist(lq, [math.log(x) for x in shape]), rate) for shape, rate in points),
                    key=lambda p: p[0])
    (d1, r1), rest = scored[0], scored[1:]
    if d1 == 0.0 or not rest:
        return r1
    d2, r2 = rest[0]
    w1, w2 = 1.0 / d1, 1.0 / d2
    return math.exp((w1 * math.log(r1) + w2 * math.log(r2)) / (w1 + w2))


def matmul_rate(rates: OpRates, dtype: str, m: int, n: int, k: int, batch: int) -> float | None:
    """FLOP/s of a ``(m, n, k, batch)`` GEMM in ``dtype``; ``None`` when no GEMM of that dtype was timed."""
    points = [((r.m, r.n, r.k, r.batch), r.flops_per_s) for r in rates.matmuls if r.dtype == dtype]
    return _nearest_log_rate((m, n, k, batch), points) if points else None


def attention_rates(rates: OpRates, dtype: str, batch_heads: int, seq: int, head_dim: int,
                    causal: bool) -> tuple[float, float] | None:
    """(forward, backward) FLOP/s of a fused attention kernel; ``None`` when none of that dtype was timed."""
    timed = [a for a in rates.attention if a.dtype == dtype]
    timed = [a for a in timed if a.causal == causal] or timed
    if not timed:
        return None

    def flops(a: AttentionRate) -> float:
        return _attention_flops(a.seq, a.batch_heads, a.head_dim, a.causal)

    query = (seq, head_dim, batch_heads)
    fwd = _nearest_log_rate(query, [((a.seq, a.head_dim, a.batch_heads), flops(a) / a.forward_s) for a in timed])
    bwd = _nearest_log_rate(query, [((a.seq, a.head_dim, a.batch_heads),
                                     FUSED_ATTENTION_BACKWARD_FLOPS * flops(a) / a.backward_s) for a in timed])
    return fwd, bwd


def memory_kernel_s(rates: OpRates, size_bytes: float, kernels: float) -> float:
    """``kernels`` element-wise kernels moving ``size_bytes`` in all."""
    assert rates.launch_s is not None and rates.bandwidth_bytes_per_s, "checked by the caller"
    return kernels * rates.launch_s + size_bytes / rates.bandwidth_bytes_per_s


def memory_fit(rates: OpRates, kind: str, direction: str) -> tuple[float, float]:
    """``(launch_s, bandwidth_bytes_per_s)`` a memory-bound op of ``kind`` is costed at one way: its kind's
    fit for ``direction``; backward, the kind's forward fit when its backward is no kernel of its own;
    else (``kind`` ``""``, or not timed) the one element-wise fit."""
    by = _kind_table(rates.memory_kinds)
    found = by.get((kind, direction))
    if found is None and direction == "backward" and not MEMORY_KINDS.get(kind, True):
        found = by.get((kind, "forward"))
    if found is not None:
        return found.launch_s, found.bandwidth_bytes_per_s
    assert rates.launch_s is not None and rates.bandwidth_bytes_per_s, "checked by the caller"
    return rates.launch_s, rates.bandwidth_bytes_per_s


@lru_cache(maxsize=8)
def _kind_table(memory_kinds: tuple[MemoryKindRate, ...]) -> dict[tuple[str, str], MemoryKindRate]:
    """A profile's kind fits by ``(kind, direction)``, built once per profile, not once per op costed."""
    return {(k.kind, k.direction): k for k in memory_kinds}


def timed_dtype(rate_key: str) -> str:
    """The dtype kernels were timed in for a matmul rate key (:attr:`Precision.matmul_dtype`): full-precision
    ``float32-highest`` is float32 timed without TF32 (what the harness runs on a CPU; on GPUs it times the
    16-bit dtype of the model step, so a float32 prediction there falls back to the roofline)."""
    return rate_key.removesuffix("-highest")


def measured_op_times(op, rates: OpRates, precision, micro_batch: int) -> tuple[float, float] | None:
    """(forward, backward) seconds of one op from the measured rates; ``None`` when they do not cover it."""
    dtype = timed_dtype(precision.matmul_dtype)
    if isinstance(op, MatmulOp):
        if op.kind != "linear":
            return None
        times = []
        for m, n, k, batch in gemms(op, micro_batch):
            rate = matmul_rate(rates, dtype, m, n, k, batch)
            if rate is None:
                return None
            times.append(2.0 * m * n * k * batch / rate)
        return times[0], times[1] + times[2]
    if isinstance(op, AttentionOp):
        heads = op.heads * micro_batch
        found = attention_rates(rates, dtype, heads, op.seq, op.head_dim, op.causal) \
            if op.fused else None
        if found is None:
            return None
        flops = _attention_flops(op.seq, heads, op.head_dim, op.causal)
        if op.kv_seq is not None:  # a context-parallel rank's queries against every key, at the measured rate
            flops = op.flops_per_sample * micro_batch * (op.causal_share if op.causal else 1.0)
        return flops / found[0], FUSED_ATTENTION_BACKWARD_FLOPS * flops / found[1]
    assert isinstance(op, MemoryOp)
    if rates.launch_s is None:
        return None
    per_sample = lambda passes: sum(n * pass_bytes(c, precision) for n, c in passes)  # noqa: E731
    fwd = op.elements * micro_batch * per_sample(op.forward)
    bwd = op.elements * micro_batch * per_sample(op.backward) + op.fixed_elements * per_sample(op.fixed_backward)
    kind = memory_kind(op)

    def cost(size_bytes: float, direction: str) -> float:
        launch, bandwidth = memory_fit(rates, kind, direction)
        return launch + size_bytes / bandwidth
    return (cost(fwd, "forward") if fwd else 0.0), (cost(bwd, "backward") if bwd else 0.0)


def _layer(layer: LayerSpec, rates: OpRates, gpu, precision, micro_batch: int, breakdown: dict[str, float],
           fallback: dict[str, int]) -> tuple[float, float]:
    if not layer.ops:
        fallback["layers known only by their FLOPs"] = fallback.get("layers known only by their FLOPs", 0) + 1
        return layer_times(layer, gpu, precision, micro_batch, breakdown)
    fwd = bwd = 0.0
    for op in layer.ops:
        kind = op_kind(op)
        times = measured_op_times(op, rates, precision, micro_batch)
        if times is None:
            what = {"matmul": "convolutions / untimed matmul dtypes", "attention": "eager / untimed attention",
                    "memory": "memory ops (no element-wise fit)"}[kind]
            fallback[what] = fallback.get(what, 0) + 1
            times = op_times(op, gpu, precision, micro_batch)
        fwd += times[0]
        bwd += times[1]
        breakdown[kind] = breakdown.get(kind, 0.0) + times[0] + times[1]
    cast_f, cast_b = autocast_weight_bytes(layer, precision)
    if cast_f and rates.launch_s is not None:
        n = float(len(layer.params))
        f, b = memory_kernel_s(rates, cast_f, n), memory_kernel_s(rates, cast_b, n)
        fwd, bwd = fwd + f, bwd + b
        breakdown["memory"] = breakdown.get("memory", 0.0) + f + b
    return fwd, bwd


def op_rate_compute(model: ModelSpec, compute, rates: OpRates, gpu, precision, *, micro_batch: int,
                    compute_efficiency: float = 1.0):
    """``compute`` (a :class:`~dpsim.workload.compute.ComputeProfile` of ``model`` on ``gpu``, the profile's
    device) with every layer costed op by op from ``rates``; returns ``(compute, fallback)``, ``fallback``
    counting the ops costed without them, by what they are. The optimizer step is kept."""
    breakdown: dict[str, float] = {}
    fallback: dict[str, int] = {}
    layers = []
    for layer, timed in zip(model.layers, compute.layers):
        fwd, bwd = _layer(layer, rates, gpu, precision, micro_batch, breakdown, fallback)
        layers.append(replace(timed, forward_s=fwd / compute_efficiency, backward_s=bwd / compute_efficiency))
    return replace(compute, layers=tuple(layers), breakdown_s=breakdown), fallback


def describe(rates: OpRates) -> str:
    """One phrase: what the profile timed."""
    parts = [f"{len(rates.matmuls)} GEMM shape{'s' if len(rates.matmuls) != 1 else ''}",
             f"{len(rates.attention)} attention kernel{'s' if len(rates.attention) != 1 else ''}"]
    if rates.launch_s is not None and rates.bandwidth_bytes_per_s:
        parts.append(f"element-wise {1e6 * rates.launch_s:.3g} us + bytes at "
                     f"{rates.bandwidth_bytes_per_s / 1e9:.3g} GB/s")
    if rates.memory_kinds:
        kinds = sorted({k.kind for k in rates.memory_kinds}, key=list(MEMORY_KINDS).index)
        parts.append(f"{len(kinds)} memory-bound kind{'s' if len(kinds) != 1 else ''} ({', '.join(kinds)})")
    return ", ".join(parts)


def from_results(raw: dict, dtype: str) -> OpRates:
    """:class:`OpRates` from the harness's merged ``op_rates`` record (medians over ranks already taken).
    An attention backward timed at or below zero (forward + backward within the forward's noise, a
    kernel too small to tell) is kept at 1 ns, so the profile stays loadable."""
    matmuls = tuple(MatmulRate(dtype=dtype, m=int(r["m"]), n=int(r["n"]), k=int(r["k"]), batch=int(r["batch"]),
                               time_s=float(r["time_s"])) for r in raw.get("matmul", []))
    attention = tuple(AttentionRate(dtype=dtype, batch_heads=int(r["batch_heads"]), seq=int(r["seq"]),
                                    head_dim=int(r["head_dim"]), causal=bool(r["causal"]),
                                    forward_s=float(r["forward_s"]), backward_s=max(float(r["backward_s"]), 1e-9))
                      for r in raw.get("attention", []))
    points = tuple((float(p["size_bytes"]), float(p["time_s"])) for p in raw.get("memory", []))
    launch = bandwidth = None
    if len(points) >= 2:
        fit = fit_alpha_beta([b for b, _ in points], [t for _, t in points], max_segments=1,
                             what="element-wise kernel")
        seg = fit.segments[0]
        if seg.seconds_per_byte > 0:
            launch, bandwidth = seg.latency_s, 1.0 / seg.seconds_per_byte
    return OpRates(matmuls=matmuls, attention=attention, launch_s=launch, bandwidth_bytes_per_s=bandwidth,
                   memory_points=points, memory_kinds=_kind_fits(raw.get("memory_kinds", [])),
                   left_out=int(raw.get("left_out", 0)))


def _kind_fits(rows: list[dict]) -> tuple[MemoryKindRate, ...]:
    """Each ``(kind, direction)``'s ``launch + bytes / bandwidth`` fit from the harness's rows ``{"kind",
    "direction", "size_bytes", "time_s"}``; one timed at fewer than two sizes, or whose time does not grow
    with its bytes (no bandwidth to fit), is left out: its ops are costed at the one element-wise fit."""
    grouped: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for r in rows:
        grouped.setdefault((str(r["kind"]), str(r["direction"])), []).append((float(r["size_bytes"]),
                                                                              float(r["time_s"])))
    order = list(MEMORY_KINDS)
    fits = []
    for (kind, direction), points in sorted(grouped.items(), key=lambda kv: (order.index(kv[0][0]), kv[0][1])):
        points = sorted(points)
        if len({b for b, _ in points}) < 2:
            continue
        seg = fit_alpha_beta([b for b, _ in points], [t for _, t in points], max_segments=1,
                             what=f"{kind} {direction} kernel").segments[0]
        if seg.seconds_per_byte > 0:
            fits.append(MemoryKindRate(kind=kind, direction=direction, launch_s=seg.latency_s,
                                       bandwidth_bytes_per_s=1.0 / seg.seconds_per_byte, points=tuple(points)))
    return tuple(fits)
