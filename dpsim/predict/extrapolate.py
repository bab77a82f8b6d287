"""A prediction of many micro-batches from a few simulated ones: the steady state's increment, extrapolated.

``predict`` plays every micro-batch of a step (the data-parallel engine's tasks, the pipeline engine's slots), so
its cost grew with the gradient accumulation: 32,768 micro-batches of ``--tp 2 --pp 4`` took 6.4 s and the CLI
refused more than :data:`~dpsim.limits.MAX_SIMULATED_MICRO_BATCHES`. Past the warm-up, every schedule dpsim
plays adds the same work per micro-batch (DDP's accumulation, ZeRO's and FSDP's per-micro-batch collectives,
1F1B's, ZB-H1's and DeepSpeed's steady one-forward-one-backward, the interleaved schedule's groups of ``pp``
micro-batches, DualPipe's F&B pairs of two): each quantity a prediction reports -- times, bytes, call counts,
per-stage busy, bubble and wait times, memory peaks -- is then an affine function of the micro-batch count
``m`` with a period ``d`` (:func:`period`). So a prediction of ``m`` above :data:`EXTRAPOLATE_ABOVE` simulates
four counts instead (:func:`sample_counts`): ``a``, ``a + d`` and ``a + 2d`` past the warm-up, and ``e`` near
``2a``, all congruent to ``m`` modulo ``d``; every leaf of the four predictions must be equal, or show two
equal increments and the far count on their line (within :data:`LINEAR_TOLERANCE` of its size), and is then
carried to ``m`` from ``a`` and ``e``. A ratio of such quantities (throughput, MFU, utilisation, bubble share)
is not affine: its numerator is (the ratio times its denominator, :data:`TIMES`), or its reciprocal is
(:data:`RECIPROCAL`); the model-error interval is computed again from the extrapolated step, and the memory
with its fit at ``m`` itself, in closed form (:data:`DROPPED`: GPipe's peak grows with ``m`` until it no longer
fits, a threshold no line carries). Anything else that
moves (a string, a quantity off its line: random draws per micro-batch) means the steady state did not repeat
and the caller simulates every micro-batch (:class:`NotPeriodic`). The idea is ``plan``'s extrapolation of
DualPipe's replay (:func:`~dpsim.plan.planner.dualpipe_extrapolated`), applied to a whole prediction.

Exactness: the engines add times in absolute time (``t0 + d`` rounds differently at every ``t0``), so a full
simulation of ``m`` and the extrapolation agree to float rounding, not bit for bit: within 1e-9 of each value's
size, or of the step's for a time near 0 (tests/test_predict_extrapolate.py checks every layout kind and
schedule against :func:`full_simulation`). An extrapolated prediction holds no trace of events and no step
program (``simulation.trace`` and ``layout.pipeline.trace`` are empty, ``program`` is ``None``): what reads them
(``--timeline``, per-rank variability) runs the full path and keeps its limit.
"""

from __future__ import annotations

import contextlib
import dataclasses
import numbers
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from dpsim.limits import MAX_EXTRAPOLATED_MICRO_BATCHES, MAX_PIPELINE_SLOTS, MAX_SIMULATED_MICRO_BATCHES

EXTRAPOLATE_ABOVE = 512
"""Micro-batches per step above which a prediction is extrapolated (and only where the four counts it simulates
instead are at most half of them, :data:`SPARSE_FACTOR`): the golden outputs (tests/golden/, at most 128 micro-batches) and
everything up to here keep the full simulation, bit for bit. ASSUMED: where the saving starts to matter (512
DDP micro-batches of llama-2-7b play in ~0.1 s)."""
WARMUP_MICRO_BATCHES = 32
"""The least first count simulated (``a``, :func:`sample_counts`). A pipeline's warm-up and cool-down last
``p - 1`` micro-batches per chunk (1F1B, interleaved: Narayanan et al. 2021, Sec. 2.2), DualPipe's fill its
first ``2p`` (DeepSeek-V3 report, Sec. 3.2.1; its memory peak is settled from ``2p``,
:data:`~dpsim.strategies.pipeline.DUALPIPE_PEAK_SETTLED`), so ``a`` is also at least ``4 p v``."""
SPARSE_FACTOR = 2
"""The counts simulated instead (about ``5a``) are at most this fraction of the ``m`` they stand for (each is a
whole prediction: the collectives, memory and program built again, so below twice their sum the full path is
as cheap)."""
LINEAR_TOLERANCE = 1e-9
"""Relative difference within which two increments count as equal (as ``plan``'s DualPipe extrapolation,
:data:`~dpsim.plan.planner.LINEAR_TOLERANCE`): float rounding of sums of thousands of op times."""

_FORCED_FULL = [False]
_TIME_SCALE = [0.0]
"""The sampled steps' longest: a time (a field in seconds) is compared within :data:`LINEAR_TOLERANCE` of it at
least, as the engines round each time at the absolute time it ends (a stage's tail or wait, the difference of
two such, is rounding noise of the step's size where it is near 0)."""


@contextlib.contextmanager
def full_simulation() -> Iterator[None]:
    """Within it, every prediction simulates every micro-batch (tests compare the two paths; ``--timeline``
    needs the events)."""
    before = _FORCED_FULL[0]
    _FORCED_FULL[0] = True
    try:
        yield
    finally:
        _FORCED_FULL[0] = before


def forced_full() -> bool:
    """Whether :func:`full_simulation` is in force."""
    return _FORCED_FULL[0]


class NotPeriodic(Exception):
    """A quantity of the sampled predictions is not affine in the micro-batch count (internal: the caller
    simulates every micro-batch, or refuses past the full path's limit)."""


def period(config) -> int:
    """Micro-batches after which a step's schedule repeats: a group of ``pp`` for the interleaved schedule
    (Megatron runs them in groups of ``pp``, and ``m`` is a multiple of it), DualPipe's pair (one micro-batch
    each way; ``m`` is even), one otherwise."""
    par = config.parallelism
    return _period(layout=par.layout_active, pp=par.pp, schedule=par.schedule, virtual_stages=par.virtual_stages)


def _period(*, layout: bool, pp: int, schedule: str, virtual_stages: int) -> int:
    if not layout:
        return 1
    if schedule == "dualpipe":
        return 2
    return pp if virtual_stages > 1 else 1


def chunks_of(config) -> int:
    """Chunks per stage: DualPipe's two, else ``--virtual-stages`` (1 without a layout)."""
    par = config.parallelism
    return _chunks(layout=par.layout_active, schedule=par.schedule, virtual_stages=par.virtual_stages)


def _chunks(*, layout: bool, schedule: str, virtual_stages: int) -> int:
    if not layout:
        return 1
    return 2 if schedule == "dualpipe" else virtual_stages


def sample_counts(config) -> tuple[int, int, int, int] | None:
    """The four micro-batch counts simulated instead of ``config``'s ``m`` (``a``, ``a + d``, ``a + 2d``, ``e``),
    or ``None`` where all ``m`` are simulated: ``m`` at most :data:`EXTRAPOLATE_ABOVE` or under
    :data:`SPARSE_FACTOR` times the counts, a data loader's rate (``--input-samples-per-s``: the step is the
    larger of two lines, which may cross past the counts), or :func:`full_simulation` in force."""
    if config.workload.input_samples_per_s:
        return None
    par = config.parallelism
    return counts_for(config.micro_batches, layout=par.layout_active, pp=par.pp, schedule=par.schedule,
                      virtual_stages=par.virtual_stages)


def counts_for(m: int, *, layout: bool, pp: int, schedule: str, virtual_stages: int
               ) -> tuple[int, int, int, int] | None:
    """:func:`sample_counts` of a job of ``m`` micro-batches per replica laid out so (``layout``: a pipeline or
    model-parallel layout is active), without a data loader's rate: ``plan`` and ``sweep`` count a layout's
    work from these numbers before any config is built (:func:`dpsim.plan.planner.predict_work`)."""
    if forced_full():
        return None
    d = _period(layout=layout, pp=pp, schedule=schedule, virtual_stages=virtual_stages)
    p = pp if layout else 1
    a = max(WARMUP_MICRO_BATCHES, 4 * p * _chunks(layout=layout, schedule=schedule, virtual_stages=virtual_stages))
    a = -(-a // d) * d + (m % d)
    e = a + d * -(-a // d)
    if m <= EXTRAPOLATE_ABOVE or m < SPARSE_FACTOR * (3 * a + 3 * d + e):
        return None
    return a, a + d, a + 2 * d, e


def extrapolates(config) -> bool:
    """Whether ``config``'s prediction takes the extrapolated path when its steady state repeats (its limit is
    then :data:`~dpsim.limits.MAX_EXTRAPOLATED_MICRO_BATCHES`, and the work of the counts it simulates is
    bounded as the full path's is: :func:`sample_work_ok`)."""
    counts = sample_counts(config)
    return counts is not None and sample_work_ok(config, counts)


def full_path_why(config) -> str:
    """Why a config past the full path's limit is not extrapolated instead (the end of its refusal), or ``""``
    where nothing about it is extrapolable (few micro-batches, too many steps)."""
    if config.micro_batches <= EXTRAPOLATE_ABOVE:
        return ""
    if config.workload.input_samples_per_s:
        return ("; a data loader's rate (--input-samples-per-s) makes every micro-batch simulated, as past "
                f"{EXTRAPOLATE_ABOVE} micro-batches a step's steady state is extrapolated only without one")
    return (f"; past {EXTRAPOLATE_ABOVE} micro-batches the steady state is extrapolated from a few simulated ones, "
            "but here those alone pass the limit (lower --steps)")


def not_periodic_message(config, what: str) -> str:
    """The refusal of a prediction past the full path's limit whose sampled steady state did not repeat."""
    return (f"micro-batches per replica: {config.micro_batches:,} x --steps {config.workload.steps} is more than the "
            f"{MAX_SIMULATED_MICRO_BATCHES:,} simulated micro-batches (stages x chunks x micro-batches "
            f"{MAX_PIPELINE_SLOTS:,} with a pipeline) the full simulation allows, and its steady state does not "
            f"repeat ({what} is not the same increment per micro-batch), so it cannot be extrapolated; raise "
            f"--micro-batch or lower --global-batch")


def sample_work_ok(config, counts) -> bool:
    """The counts an extrapolation simulates, counted as the full path's limit counts work: micro-batches x
    ``--steps`` within :data:`~dpsim.limits.MAX_SIMULATED_MICRO_BATCHES` without a layout, stages x chunks x
    micro-batches within :data:`~dpsim.limits.MAX_PIPELINE_SLOTS` with one."""
    par = config.parallelism
    return counts_work_ok(counts, config.micro_batches, layout=par.layout_active, pp=par.pp, schedule=par.schedule,
                          virtual_stages=par.virtual_stages, steps=config.workload.steps)


def counts_work_ok(counts, m: int, *, layout: bool, pp: int, schedule: str, virtual_stages: int, steps: int) -> bool:
    """:func:`sample_work_ok` of a layout's numbers (:func:`counts_for`)."""
    total = sum(counts)
    if layout:
        return pp * _chunks(layout=layout, schedule=schedule, virtual_stages=virtual_stages) * total \
            <= MAX_PIPELINE_SLOTS
    return steps * total <= MAX_SIMULATED_MICRO_BATCHES and m <= MAX_EXTRAPOLATED_MICRO_BATCHES


def extrapolated_counts(m: int, *, layout: bool, pp: int, schedule: str, virtual_stages: int, steps: int,
                        input_rate: bool = False) -> tuple[int, int, int, int] | None:
    """The counts a prediction of these numbers simulates where :func:`extrapolates` holds for it (its steady
    state repeating), else ``None`` (every micro-batch is simulated): what ``plan`` keeps past the full
    path's limit and what ``plan`` and ``sweep`` count as its work (``input_rate``: a data loader's
    ``--input-samples-per-s`` is set)."""
    if input_rate:
        return None
    counts = counts_for(m, layout=layout, pp=pp, schedule=schedule, virtual_stages=virtual_stages)
    if counts is None or not counts_work_ok(counts, m, layout=layout, pp=pp, schedule=schedule,
                                            virtual_stages=virtual_stages, steps=steps):
        return None
    return counts


def at_micro_batches(config, n: int):
    """``config`` with ``n`` micro-batches per replica per step (its ``--global-batch`` or ``--grad-accum``)."""
    w = config.workload
    if w.global_batch is None:
        return dataclasses.replace(config, grad_accum=n)
    changes = {"global_batch": n * w.micro_batch * config.data_parallel}
    if w.grad_accum != 1:
        changes["grad_accum"] = n
    return dataclasses.replace(config, **changes)


def extrapolated(predict_at: Callable[[Any], Any], config, counts) -> Any:
    """The prediction of ``config`` carried from ``predict_at`` of its sampled ``counts``; raises
    :class:`NotPeriodic` where a quantity is off its line."""
    samples = [predict_at(at_micro_batches(config, n)) for n in counts]
    _TIME_SCALE[0] = max(abs(getattr(s, "step_time_s", 0.0)) for s in samples)
    out = _combine(samples, counts, config.micro_batches, (), "prediction")
    return dataclasses.replace(out, config=config, program=None, model_error=None)


TIMES = {("Prediction", "samples_per_s"): "step_time_s", ("Prediction", "tokens_per_s"): "step_time_s",
         ("Prediction", "mfu"): "step_time_s", ("Prediction", "scaling_efficiency"): "step_time_s",
         ("Prediction", "single_gpu_samples_per_s"): "compute_s",
         ("LayoutReport", "bubble_fraction"): "pipeline.step_time_s",
         ("LinkUse", "utilisation"): "@link_step", ("by_class", "max_utilisation"): "@link_step",
         ("by_class", "mean_utilisation"): "@link_step"}
"""A ratio whose product with another quantity of the same object is affine (``samples_per_s`` x the step is
samples per step): ``(class, field)`` -> that quantity's path (``@link_step``: the enclosing
:class:`~dpsim.collectives.links.LinkReport`'s step, over which it states utilisation)."""
RECIPROCAL = {("LayoutReport", "ideal_bubble_fraction")}
"""A ratio whose reciprocal is affine: ``(p - 1) / (v m + p - 1)`` and its ZB-H1 and DualPipe forms."""
EMPTIED = {("SimulationResult", "trace"), ("PipelineResult", "trace")}
"""Events of every micro-batch: an extrapolated prediction has none (see the module docstring)."""
DROPPED = {("Prediction", "config"), ("Prediction", "program"), ("Prediction", "model_error"),
           ("Prediction", "memory"), ("Prediction", "fit"), ("StageReport", "memory")}
"""Set by :func:`extrapolated` (the config asked for) or computed again by the caller at the config's own count,
in closed form: the model-error interval, and the memory with its fit (a peak grows with the micro-batches
GPipe holds, and whether it fits, with the advice, is no line to carry)."""


def _combine(xs: list, ks, m: int, ctx: tuple, where: str) -> Any:
    x0 = xs[0]
    if dataclasses.is_dataclass(x0) and not isinstance(x0, type):
        if any(type(x) is not type(x0) for x in xs):
            raise NotPeriodic(where)
        return _combine_dataclass(xs, ks, m, ctx, where)
    if isinstance(x0, (tuple, list)):
        if any(type(x) is not type(x0) or len(x) != len(x0) for x in xs):
            raise NotPeriodic(where)
        items = [_combine([x[i] for x in xs], ks, m, ctx, f"{where}[{i}]") for i in range(len(x0))]
        return type(x0)(items) if not hasattr(x0, "_fields") else type(x0)(*items)
    if isinstance(x0, dict):
        if any(not isinstance(x, dict) or list(x) != list(x0) for x in xs):
            raise NotPeriodic(where)
        out = {}
        for key in x0:
            rule = TIMES.get(("by_class", key)) if isinstance(key, str) else None
            values = [x[key] for x in xs]
            out[key] = (_times(values, ks, m, ctx[0], ctx[1], f"{where}.{key}") if rule and ctx
                        else _combine(values, ks, m, ctx, f"{where}.{key}"))
        return out
    if isinstance(x0, np.ndarray):
        if any(not isinstance(x, np.ndarray) or x.shape != x0.shape for x in xs):
            raise NotPeriodic(where)
        if all(np.array_equal(x, x0) for x in xs):
            return xs[-1]
        flat = [_combine([float(x.flat[i]) for x in xs], ks, m, ctx, where) for i in range(x0.size)]
        return np.array(flat, dtype=x0.dtype).reshape(x0.shape)
    if x0 is None or isinstance(x0, (str, bool, np.bool_)):
        if any(type(x) is not type(x0) or x != x0 for x in xs):
            raise NotPeriodic(where)
        return xs[-1]
    if isinstance(x0, numbers.Integral):
        return _affine_int(xs, ks, m, where)
    if isinstance(x0, numbers.Real):
        if any(not isinstance(x, numbers.Real) for x in xs):
            raise NotPeriodic(where)
        return type(x0)(_affine(xs, ks, m, where))
    # An opaque model (the collectives, a profile): the same configuration's, built again for each count.
    return xs[-1]


def _combine_dataclass(xs: list, ks, m: int, ctx: tuple, where: str) -> Any:
    cls = type(xs[0]).__name__
    done: dict[str, Any] = {}
    names = [f.name for f in dataclasses.fields(xs[0]) if f.init]
    # Denominators first: a ratio is carried through its product with them.
    first = [n for n in names if n in ("step_time_s", "compute_s", "pipeline")]
    for name in first + [n for n in names if n not in first]:
        if (cls, name) in DROPPED:
            continue
        if (cls, name) in EMPTIED:
            done[name] = ()
            continue
        values = [getattr(x, name) for x in xs]
        if (cls, name) in TIMES:
            path = TIMES[(cls, name)]
            if path == "@link_step":
                done[name] = _times(values, ks, m, ctx[0], ctx[1], f"{where}.{name}")
            else:
                head, _, tail = path.partition(".")
                dens, final = [getattr(x, head) for x in xs], done[head]
                if tail:
                    dens, final = [getattr(d, tail) for d in dens], getattr(final, tail)
                done[name] = _times(values, ks, m, dens, final, f"{where}.{name}")
        elif (cls, name) in RECIPROCAL:
            if all(v == values[0] for v in values):
                done[name] = values[-1]
            elif any(v == 0 for v in values):
                raise NotPeriodic(f"{where}.{name}")
            else:
                done[name] = 1.0 / _affine([1.0 / v for v in values], ks, m, f"{where}.{name}")
        else:
            done[name] = _combine(values, ks, m, ctx, f"{where}.{name}")
        if cls == "LinkReport" and name == "step_time_s":
            ctx = (values, done[name])
    return dataclasses.replace(xs[-1], **done)


def _times(values: list, ks, m: int, dens: list, final: float, where: str) -> Any:
    """A ratio carried as ``ratio x denominator`` (:data:`TIMES`)."""
    if all(v == values[0] for v in values) or values[0] is None:
        return _combine(values, ks, m, (), where)
    if any(d == 0 for d in dens) or final == 0:
        raise NotPeriodic(where)
    return _affine([v * d for v, d in zip(values, dens)], ks, m, where) / final


def _affine(xs: list, ks, m: int, where: str) -> float:
    """``xs`` (at counts ``ks``: ``a``, ``a + d``, ``a + 2d``, ``e``) carried to ``m`` along their line; raises
    :class:`NotPeriodic` off it. Values equal within the tolerance stay the last one's (rounding noise is not
    a slope to multiply by ``m``)."""
    a, b, c, e = (float(x) for x in xs)
    ka, kb, _, ke = ks
    size = max(abs(a), abs(b), abs(c), abs(e), 1e-300)
    if where.endswith("_s") or "_s." in where or "_s[" in where:
        size = max(size, _TIME_SCALE[0])
    tol = LINEAR_TOLERANCE * size
    if not all(np.isfinite((a, b, c, e))):
        if a == b == c == e:
            return e
        raise NotPeriodic(where)
    if max(a, b, c, e) - min(a, b, c, e) <= tol:
        return e
    step = b - a
    if abs((c - b) - step) > tol or abs(a + (ke - ka) / (kb - ka) * step - e) > tol:
        raise NotPeriodic(where)
    return e + (m - ke) * ((e - a) / (ke - ka))


def _affine_int(xs: list, ks, m: int, where: str) -> int:
    """An integer (a count of calls, bytes, micro-batches) carried exactly: equal increments only."""
    if any(not isinstance(x, numbers.Integral) for x in xs):
        raise NotPeriodic(where)
    a, b, c, e = (int(x) for x in xs)
    ka, kb, _, ke = ks
    d = kb - ka
    if c - b != b - a or (e - a) * d != (ke - ka) * (b - a) or (m - ka) % d:
        raise NotPeriodic(where)
    return type(xs[0])(a + (m - ka) // d * (b - a))
