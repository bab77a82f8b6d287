"""Calibration profiles: the versioned JSON ``dpsim calibrate`` writes and ``predict`` reads.

Schema ``dpsim.calibration/1`` (SI units, one unit in every key)::

    {
      "schema": "dpsim.calibration/1",
      "name": "a100-nvswitch-8gpu", "description": "...", "created_utc": "2025-...Z",
      "method": "torch.distributed" | "nccl-tests",
      "sources": ["C001..C007: stas00/ml-engineering@744d01e ...", ...],
      "environment": {"torch_version": ..., "backend": "nccl", "backend_version": ...,
                      "device_names": [...], "hosts": 2, "world_size": 16, ...},
      "collectives": {
        "intra_node": {                      # a communicator inside one node
          "n_ranks": 8, "n_nodes": 1,
          "ops": {
            "all_reduce": {                  # also reduce_scatter, all_gather, broadcast, sendrecv
              "fit": {"r2": 0.9999, "worst_rel_residual": 0.015, "poor": false,
                      "breaks_bytes": [2.97e6, 1.88e8],
                      "single_line": {"r2": 0.993, "worst_rel_residual": 0.398},
                      "segments": [{"first_size_bytes": 32768, "last_size_bytes": 1048576,
                                    "latency_s": 4.2e-05, "bus_bandwidth_bytes_per_s": 3.1e10,
                                    "n_points": 2, "r2": 1.0, "worst_rel_residual": 0.0}, ...]},
              "measurements": [{"size_bytes": 32768, "time_s": 4.383e-05, "min_s": ...,
                                "max_s": ..., "q1_s": ..., "q3_s": ..., "repeats": 20,
                                "source": "C001"}, ...],
              "sources": ["C001", ...]}}},
        "inter_node": {...}                  # a communicator spanning nodes
      },
      "compute": {"device": "NVIDIA H100 80GB HBM3",
                  "matmul_flops_per_s": {"bfloat16": 7.9e14, ...},
                  "memory_bandwidth_bytes_per_s": 2.9e12, "overlap_slowdown": 0.08,
                  "matmul": [...], "memcpy": [...], "overlap": {...},
                  "model_step": {"model": "gpt2", "micro_batch": 4, "dtype": "bfloat16",
                                 "forward_s": ..., "backward_s": ..., "step_time_cv": 0.03,
                                 "layers": [...]},
                  "op_rates": {"matmul": [{"dtype", "m", "n", "k", "batch", "time_s"}, ...],
                               "attention": [{"dtype", "batch_heads", "seq", "head_dim", "causal",
                                              "forward_s", "backward_s"}, ...],
                               "memory": {"launch_s", "bandwidth_bytes_per_s",
                                          "points": [{"size_bytes", "time_s"}, ...]},
                               "memory_kinds": [{"kind", "direction", "launch_s", "bandwidth_bytes_per_s",
                                                 "points": [...]}, ...],   # optional (older profiles lack it)
                               "left_out": 0}} | null,   # op_rates optional (older profiles lack it)
      "warnings": ["..."]
    }

A segment's time at the measured ``n_ranks`` is ``latency_s + bus_factor(op, n_ranks) *
S / bus_bandwidth_bytes_per_s`` (nccl-tests' busbw convention; ``sendrecv`` has factor
1); ``bus_bandwidth_bytes_per_s: null`` is a latency-only piece. A segment applies over
``[first_size_bytes, last_size_bytes]`` (the first and last extend to 0 and infinity);
between two segments the time is interpolated in log-log (:mod:`dpsim.calibrate.fit`),
and ``breaks_bytes`` (the middle of each gap) is informational.
:mod:`dpsim.calibrate.model` says how a profile is used for other communicator sizes.

:func:`load_profile` validates everything ``predict`` relies on and raises one
:class:`~dpsim.errors.ProfileError` naming the file, the field path, the value and what
is allowed. :func:`save_profile` writes atomically: a temporary file in the target
directory, fsync, then ``os.replace``, so an existing profile is either kept whole or
replaced whole, never truncated.
"""

from __future__ import annotations

import math
from dataclasses import field
from typing import Any

from dpsim.collectives.ops import OPS, bus_factor
from dpsim.errors import ProfileError
from dpsim.frozen import frozen_dataclass
from dpsim.limits import MAX_BOUND_BUS_BANDWIDTH_BYTES_PER_S, MAX_FIT_BUS_BANDWIDTH_BYTES_PER_S
from dpsim.profile.fit import AlphaBetaFit, Segment, fit_alpha_beta, fit_given_slope
from dpsim.stats import fixed

SCHEMA = "dpsim.calibration/1"
"""Schema tag of the current profile format."""
LINK_CLASSES = ("intra_node", "inter_node")
"""Communicators a profile describes: inside one node, and across nodes."""
PROFILE_OPS = OPS + ("sendrecv",)
"""Measured operations: the collectives plus point-to-point (``sendrecv``, ping-pong)."""
METHODS = ("torch.distributed", "nccl-tests")
"""How the measurements were taken."""


def op_bus_factor(op: str, n_ranks: int) -> float:
    """nccl-tests' busbw/algbw factor, with ``sendrecv`` (point-to-point) at 1."""
    return 1.0 if op == "sendrecv" else bus_factor(op, n_ranks)


# ----------------------------------------------------------------------------- data


@frozen_dataclass
class Measurement:
    """One size of a sweep: the median time over repeats and its spread."""

    size_bytes: float
    """Message size (nccl-tests convention: the whole buffer)."""
    time_s: float
    """Median time (nccl-tests logs: the out-of-place time)."""
    min_s: float | None = None
    """Fastest repeat."""
    max_s: float | None = None
    """Slowest repeat."""
    q1_s: float | None = None
    """First quartile of the repeats."""
    q3_s: float | None = None
    """Third quartile of the repeats."""
    repeats: int | None = None
    """Timed repeats behind the median (each the slowest rank's time)."""
    mean_s: float | None = None
    """Mean of the repeats."""
    ci_low_s: float | None = None
    """Low end of the 95 % Student-t interval of the mean (``dpsim calibrate`` repeats a size
    until it is within its ``--ci`` target, or its budget runs out)."""
    ci_high_s: float | None = None
    """High end of that interval."""
    source: str | None = None
    """Where the number comes from (a reference row id, a log file and line)."""

    @property
    def spread(self) -> float | None:
        """(max - min) / median: how noisy this size was."""
        if self.min_s is None or self.max_s is None or self.time_s <= 0:
            return None
        return (self.max_s - self.min_s) / self.time_s


@frozen_dataclass
class OpCalibration:
    """Fitted timing of one operation on one link class."""

    op: str
    """``all_reduce``, ``reduce_scatter``, ``all_gather``, ``broadcast`` or ``sendrecv``."""
    link_class: str
    """``intra_node`` or ``inter_node``."""
    n_ranks: int
    """Communicator size it was measured on (2 for ``sendrecv``)."""
    fit: AlphaBetaFit
    """Piecewise alpha-beta fit (times at ``n_ranks``)."""
    measurements: tuple[Measurement, ...] = ()
    """Raw sweep."""
    single_line_r2: float = math.nan
    """R² of the best one-line fit, to show what the pieces buy."""
    single_line_worst_rel_residual: float = math.nan
    """Worst relative residual of the best one-line fit."""
    sources: tuple[str, ...] = ()
    """Citations of the measurements."""

    def bus_bandwidth_bytes_per_s(self, segment: Segment) -> float:
        """busbw a segment tends to (``inf`` for a latency-only piece)."""
        if segment.seconds_per_byte <= 0:
            return math.inf
        return op_bus_factor(self.op, self.n_ranks) / segment.seconds_per_byte

    @property
    def description(self) -> str:
        """One line: pieces, breaks, quality."""
        segs = self.fit.segments
        breaks = ", ".join(f"{_human_bytes(lo)}..{_human_bytes(hi)}" for lo, hi in self.fit.gaps_bytes)
        shape = f"{len(segs)} pieces (breaks between {breaks})" if len(segs) > 1 else "one line"
        return (f"{self.link_class} {self.op} at {self.n_ranks} ranks: {shape}; "
                f"R² {fixed(self.fit.r2, '.4f')}, worst residual {100 * self.fit.worst_rel_residual:.1f} %")


@frozen_dataclass
class LayerTiming:
    """Measured time of one module of a real model."""

    name: str
    """Module path."""
    forward_s: float
    """Forward time for one micro-batch."""
    backward_s: float
    """Backward time for one micro-batch."""


@frozen_dataclass
class ModelStep:
    """A real model's training step at one micro-batch, as trained: forward, loss, backward, optimizer."""

    model: str
    """The ``--model`` reference as given (catalog name, ``file.py:fn...``); informational:
    predictions match a model by :attr:`structure_hash`."""
    micro_batch: int
    """Samples per step."""
    dtype: str
    """Compute dtype (``bfloat16`` under autocast, else ``float32``)."""
    forward_s: float
    """Median forward time, the loss included."""
    backward_s: float
    """Median backward time."""
    layers: tuple[LayerTiming, ...] = ()
    """Per-layer times; with :attr:`layers_traced`, one per layer of the traced model
    (forward from each layer's first entry, backward up to its last gradient being ready),
    adding up to the medians above."""
    step_time_cv: float | None = None
    """Coefficient of variation (sample std / mean) of the step time over the timed repeats
    after warm-up, the median over ranks; ``predict``'s default per-rank noise
    (``--noise-cv``). ``None`` in profiles written before it was recorded."""
    structure_hash: str | None = None
    """SHA-256 of the traced model's structure (parameter names, shapes and dtypes in
    registration order, layers in execution order with their parameters:
    :func:`dpsim.profile.match.model_fingerprint`); ``None`` in older profiles."""
    forward_flops_per_sample: float | None = None
    """Forward FLOPs per sample of the traced model: what it was fed (sequence length,
    image size) must match too."""
    layers_traced: bool = False
    """:attr:`layers` are the traced model's layers (``predict`` then uses them one by one)."""
    optimizer: str | None = None
    """Optimizer timed: a ``--optimizer`` name, or ``optimizer()`` (the model file's own)."""
    optimizer_s: float | None = None
    """Median optimizer step (``zero_grad`` + ``step``); ``None`` in older profiles."""
    loss: str | None = None
    """Loss timed: ``loss_fn()`` of the reference, ``loss()`` of the module, or a stand-in."""
    step_time_mean_s: float | None = None
    """Mean step time (forward + backward + optimizer) over the timed repeats, each the
    slowest rank's."""
    step_time_ci_low_s: float | None = None
    """Low end of the 95 % Student-t interval of that mean."""
    step_time_ci_high_s: float | None = None
    """High end of that interval."""
    repeats: int | None = None
    """Timed repeats behind the medians."""
    threads: int | None = None
    """torch intra-op threads per rank while timing."""
    after_comm_extra_s: float | None = None
    """How much longer the step takes right after the rank waited on an all-reduce of the
    gradients' bytes than back to back (median of paired differences:
    :func:`dpsim.measure.trainstep.measure_step_after_comm`); may be negative within noise.
    ``None``: not measured (one rank, or an older profile)."""
    after_comm_wait_s: float | None = None
    """How long that all-reduce took: the wait :attr:`after_comm_extra_s` followed."""
    fresh_process_ratio: float | None = None
    """How much longer the step takes in fresh processes than in the calibrating process
    (:mod:`dpsim.measure.step_probe`, CPU hosts): the median of paired ratios, each a fresh
    process's step over the calibrating process's timed back to back (each rank's median, the
    median over ranks; profiles before pairing took the ratio of medians timed minutes apart).
    Every time above is the in-process time scaled by it. ``None``: not measured (a GPU, or an
    older profile)."""
    fresh_process_steps_s: tuple[float, ...] | None = None
    """Each fresh process's median step, the slowest rank's, in the order they ran (spread over
    the calibration's start, middle and end): how far the host's speed drifted meanwhile.
    ``None``: not measured."""

    @property
    def step_s(self) -> float:
        """Median forward + backward, plus the optimizer when it was timed."""
        return self.forward_s + self.backward_s + (self.optimizer_s or 0.0)


@frozen_dataclass
class MatmulRate:
    """One GEMM shape timed alone: ``batch`` products ``(m x k) @ (k x n)``."""

    dtype: str
    """Element dtype it ran in (torch's name)."""
    m: int
    """Output rows."""
    n: int
    """Output columns."""
    k: int
    """Reduction length."""
    batch: int = 1
    """Independent products (a batched matmul)."""
    time_s: float
    """Median time of one call."""

    @property
    def flops_per_s(self) -> float:
        """Achieved FLOP/s (a multiply-add counts 2)."""
        return 2.0 * self.m * self.n * self.k * self.batch / self.time_s


@frozen_dataclass
class AttentionRate:
    """One scaled-dot-product attention kernel timed alone (``torch.nn.functional.scaled_dot_product_attention``)."""

    dtype: str
    """Element dtype it ran in."""
    batch_heads: int
    """Micro-batch x heads."""
    seq: int
    """Query and key length."""
    head_dim: int
    """Size of one head."""
    causal: bool
    """Causal mask."""
    forward_s: float
    """Median forward time."""
    backward_s: float
    """Median backward time (forward + backward less the forward)."""


@frozen_dataclass
class MemoryKindRate:
    """One kind of memory-bound kernel timed alone (:data:`dpsim.workload.memory_kinds.MEMORY_KINDS`), one way,
    fitted as ``time = launch_s + bytes / bandwidth`` over the sizes it ran at."""

    kind: str
    """The kind (``norm``, ``gelu``, ``cross_entropy``, ...)."""
    direction: str
    """``forward`` or ``backward`` (a kind whose backward is no kernel of its own has only ``forward``)."""
    launch_s: float
    """Fixed time per kernel: the fit's intercept."""
    bandwidth_bytes_per_s: float
    """Bytes the kernel reads and writes per second: the fit's slope (a compute-bound kernel's is low)."""
    points: tuple[tuple[float, float], ...] = ()
    """``(bytes moved, median time_s)`` the fit is made on."""


@frozen_dataclass
class OpRates:
    """The rates of the op graph's kernels on the calibrated device (:mod:`dpsim.profile.op_rates`)."""

    matmuls: tuple[MatmulRate, ...] = ()
    """Every GEMM shape timed (forward and both backward GEMMs of the model's matmuls)."""
    attention: tuple[AttentionRate, ...] = ()
    """Every attention kernel timed."""
    launch_s: float | None = None
    """Fixed time per element-wise kernel: the intercept of ``time = launch_s + bytes / bandwidth``
    fitted on :attr:`memory_points`."""
    bandwidth_bytes_per_s: float | None = None
    """Streaming bandwidth of an element-wise kernel (bytes read + written per second): that fit's slope."""
    memory_points: tuple[tuple[float, float], ...] = ()
    """The element-wise kernel's ``(bytes moved, median time_s)`` the fit is made on."""
    memory_kinds: tuple[MemoryKindRate, ...] = ()
    """Each kind of the model's memory-bound kernels timed apart (empty in older profiles: every
    memory-bound op at :attr:`launch_s` and :attr:`bandwidth_bytes_per_s`)."""
    left_out: int = 0
    """Kernels of the model not timed (over the cap or the budget): costed from the nearest timed one."""


@frozen_dataclass
class ComputeCalibration:
    """Compute micro-benchmarks of one device type."""

    device: str
    """Device name (``torch.cuda.get_device_name`` or the CPU model)."""
    matmul_flops_per_s: dict[str, float] = field(default_factory=dict)
    """Best achieved matmul FLOP/s per dtype over the benchmarked shapes."""
    memory_bandwidth_bytes_per_s: float | None = None
    """Device copy bandwidth (bytes read + written per second)."""
    overlap_slowdown: float | None = None
    """Fractional compute slowdown while a collective runs concurrently."""
    comm_slowdown: float | None = None
    """Fractional all-reduce slowdown while every rank computes (the other direction of
    the interference: on shared cores, gloo's threads compete with compute)."""
    model_step: ModelStep | None = None
    """A real model's measured step, when one was benchmarked."""
    op_rates: OpRates | None = None
    """The op graph's kernels timed one by one (``None``: not measured, or an older profile)."""
    raw: dict[str, Any] = field(default_factory=dict)
    """Raw results: ``matmul``, ``memcpy``, ``overlap`` lists/dicts."""


@frozen_dataclass
class Profile:
    """A whole calibration profile."""

    name: str
    """Short name (file stem by default)."""
    description: str = ""
    """One line for humans."""
    created_utc: str = ""
    """ISO-8601 creation time."""
    method: str = "torch.distributed"
    """``torch.distributed`` (dpsim's harness) or ``nccl-tests`` (parsed logs)."""
    sources: tuple[str, ...] = ()
    """Citations."""
    environment: dict[str, Any] = field(default_factory=dict)
    """torch/NCCL/gloo versions, device names, host count, world size, date..."""
    link_classes: dict[str, dict[str, Any]] = field(default_factory=dict)
    """``{link_class: {"n_ranks": int, "n_nodes": int}}``."""
    ops: dict[tuple[str, str], OpCalibration] = field(default_factory=dict)
    """Fits by ``(link_class, op)``."""
    compute: ComputeCalibration | None = None
    """Compute benchmarks, if run."""
    warnings: tuple[str, ...] = ()
    """Poor fits and other caveats, also printed when the profile is made."""
    path: str | None = None
    """File it was loaded from."""

    def op(self, link_class: str, op: str) -> OpCalibration | None:
        """The fit of ``op`` on ``link_class``, if measured."""
        return self.ops.get((link_class, op))

    def to_dict(self) -> dict:
        """The JSON document (see the module docstring)."""
        collectives: dict[str, Any] = {}
        for lc in LINK_CLASSES:
            if lc not in self.link_classes:
                continue
            info = self.link_classes[lc]
            ops = {op: _op_to_dict(c) for (cls, op), c in sorted(self.ops.items(), key=_op_order) if cls == lc}
            collectives[lc] = {"n_ranks": info["n_ranks"], "n_nodes": info["n_nodes"], "ops": ops}
        return {
            "schema": SCHEMA,
            "name": self.name,
            "description": self.description,
            "created_utc": self.created_utc,
            "method": self.method,
            "sources": list(self.sources),
            "environment": self.environment,
            "collectives": collectives,
            "compute": _compute_to_dict(self.compute) if self.compute else None,
            "warnings": list(self.warnings),
        }


def ranks_share_cores(record: dict | None) -> str | None:
    """Why a measured step-after-a-wait is not charged, or ``None`` when it is.

    ``record``: :func:`dpsim.measure.trainstep.measure_step_after_comm`'s result. When more rank
    threads than cores run on one machine (validate's emulated hosts, or CPU ranks packed
    on a node), every rank leaves the all-reduce at once and the paired difference times
    how the scheduler deals the shared cores out, not a cost of the wait: the step it
    predicts is already timed with the ranks sharing the cores. VALIDATION.md part 1 has
    the evidence: chosen on one run of the matrix, checked on a fresh one.
    """
    cores = (record or {}).get("cores")
    if not cores:
        return None
    busy = int(cores["ranks_per_machine"]) * int(cores["threads_per_rank"])
    if busy <= int(cores["cpu_cores"]):
        return None
    return (f"{cores['ranks_per_machine']} ranks x {cores['threads_per_rank']} threads share "
            f"{cores['cpu_cores']} cores")


def after_comm_fields(record: dict | None) -> dict:
    """The :class:`ModelStep` fields of a measured step-after-a-wait record (``None`` each
    when not measured, or when :func:`ranks_share_cores` says it is not to be charged)."""
    if not record or ranks_share_cores(record):
        return {"after_comm_extra_s": None, "after_comm_wait_s": None}
    return {"after_comm_extra_s": record.get("extra_s"), "after_comm_wait_s": record.get("wait_s")}


def _op_order(item):
    (lc, op), _ = item
    return LINK_CLASSES.index(lc), PROFILE_OPS.index(op)


def _human_bytes(n: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"


# ----------------------------------------------------------------------------- building


LINE_FALLBACK_MIN_R2 = 0.9
"""How well the one line over every size must explain a sweep whose piecewise fit ends without a per-byte cost
before it stands in for that fit (:func:`make_op_calibration`): a judgement, not a measurement; a flat or falling
top (R^2 below zero in the nccl-tests case the fuzz round found) is far below it."""

LATENCY_BOUND_MAX_SPAN = 2.0
"""A sweep whose slowest time is under this many times its fastest never let the transfer outgrow the fixed cost:
its times bound the bandwidth from below but cannot measure it (:func:`latency_bound_bus_bandwidth`). A
judgement, not a measurement: any log that grows to dominate its latency spans more."""


def latency_bound_bus_bandwidth(op: str, n_ranks: int, measurements) -> float | None:
    """The bus bandwidth a latency-bound sweep's times imply at least, or ``None`` when the sweep is not one.

    Flat times say only that moving the sweep's extra bytes took no longer than its times spread
    (slowest minus fastest median): a per-byte cost above ``spread / (largest - smallest size)`` would have
    shown. Costing at that bound is the slowest reading the times allow, so a bucket larger than the sweep is
    not predicted free. ``inf`` when every time is equal (no bound at all).
    """
    sizes = [m.size_bytes for m in measurements]
    times = [m.time_s for m in measurements]
    if len(set(sizes)) < 2 or min(times) <= 0 or max(times) / min(times) >= LATENCY_BOUND_MAX_SPAN:
        return None
    spread_s = max(times) - min(times)
    if spread_s <= 0:
        return math.inf
    return op_bus_factor(op, n_ranks) * (max(sizes) - min(sizes)) / spread_s


def make_op_calibration(op: str, link_class: str, n_ranks: int, measurements: list[Measurement],
                        sources: tuple[str, ...] = (), what: str | None = None) -> OpCalibration:
    """Fit a sweep into an :class:`OpCalibration` (also fits one line for comparison)."""
    what = what or f"{link_class} {op}"
    sizes = [m.size_bytes for m in measurements]
    times = [m.time_s for m in measurements]
    sigma = relative_uncertainties(measurements)
    fit = fit_alpha_beta(sizes, times, what=what, rel_sigma=sigma)
    line = fit_alpha_beta(sizes, times, max_segments=1, what=what, rel_sigma=sigma)

    def no_bandwidth(f: AlphaBetaFit) -> bool:
        return f.segments[-1].seconds_per_byte * MAX_FIT_BUS_BANDWIDTH_BYTES_PER_S <= op_bus_factor(op, n_ranks)

    if no_bandwidth(fit):
        # The last piece extends to every larger message, so it needs a per-byte cost: a log whose time stayed flat
        # or fell over its largest sizes made a profile predicting a 2 GiB all-reduce on 8 A100s in 18.75 us. Timing
        # noise on a busy machine can flatten the last piece of a measurement that grows overall: then the one line
        # over every size serves where it explains the sweep (R^2 >= LINE_FALLBACK_MIN_R2; its slope is the sweep's
        # bandwidth). A sweep of small messages that never outgrew its latency (gloo's 16-64 KiB on a busy CI box)
        # gives only a lower bound on the bandwidth: it is costed at that bound, and fit_warnings says so. A log
        # that grows and then stays flat or falls, or whose bound is beyond any interconnect, is refused.
        if not no_bandwidth(line) and line.r2 >= LINE_FALLBACK_MIN_R2:
            fit = line
        else:
            bound = latency_bound_bus_bandwidth(op, n_ranks, measurements)
            if bound is None or bound > MAX_BOUND_BUS_BANDWIDTH_BYTES_PER_S:
                last = fit.segments[-1]
                why = ("" if bound is None else "; every size took the same time" if math.isinf(bound) else
                       f"; its times stay within {LATENCY_BOUND_MAX_SPAN:g}x of each other, which would mean at least "
                       f"{bound:.3g} B/s of bus bandwidth (more than any interconnect, "
                       f"{MAX_BOUND_BUS_BANDWIDTH_BYTES_PER_S:g} B/s)")
                raise ProfileError(f"{what}: {op}'s time does not grow with size from {last.first_size_bytes:,.0f} "
                                   f"to {last.last_size_bytes:,.0f} B, its largest sizes, nor over all its sizes, so "
                                   f"the fit has no bandwidth and larger messages would cost no more{why}; check "
                                   f"the times (or measure larger sizes)")
            fit = fit_given_slope(sizes, times, op_bus_factor(op, n_ranks) / bound, rel_sigma=sigma)
    return OpCalibration(op=op, link_class=link_class, n_ranks=n_ranks, fit=fit,
                         measurements=tuple(sorted(measurements, key=lambda m: m.size_bytes)),
                         single_line_r2=line.r2, single_line_worst_rel_residual=line.worst_rel_residual,
                         sources=sources)


def relative_uncertainties(measurements) -> list[float] | None:
    """Each measurement's relative uncertainty, when every one has repeats to judge it by.

    The fit uses medians, so the median's standard error: ``1.2533 * sigma / sqrt(n)``
    with ``sigma = IQR / 1.349`` (normal-theory constants; the quartiles keep a burst of
    outside load from inflating it as it inflates a standard deviation), over the median;
    else the half-width of the mean's 95 % interval over the mean. ``None`` when a size has
    neither (nccl-tests logs): then every size weighs the same
    (:func:`dpsim.profile.fit.fit_alpha_beta`).
    """
    out = []
    for m in measurements:
        if m.q1_s is not None and m.q3_s is not None and m.repeats and m.repeats >= 4 and m.time_s > 0:
            out.append(max(0.0, 1.2533 * (m.q3_s - m.q1_s) / 1.349 / math.sqrt(m.repeats) / m.time_s))
        elif m.ci_low_s is not None and m.ci_high_s is not None and m.mean_s:
            out.append(max(0.0, (m.ci_high_s - m.ci_low_s) / 2 / m.mean_s))
        else:
            return None
    return out


def fit_warnings(ops: dict[tuple[str, str], OpCalibration]) -> list[str]:
    """A warning for every poor fit, naming where it misses most."""
    out = []
    for (lc, op), c in sorted(ops.items(), key=_op_order):
        bound = latency_bound_bus_bandwidth(op, c.n_ranks, c.measurements) if c.measurements else None
        if bound is not None and math.isclose(c.bus_bandwidth_bytes_per_s(c.fit.segments[-1]), bound, rel_tol=1e-6):
            sizes = [m.size_bytes for m in c.measurements]
            out.append(f"{lc} {op}: its times stay within {LATENCY_BOUND_MAX_SPAN:g}x of each other from "
                       f"{_human_bytes(min(sizes))} to {_human_bytes(max(sizes))}, so the sweep shows its latency but "
                       f"not its bandwidth: larger messages are costed at the least bandwidth those times allow "
                       f"({_human_bytes(bound)}/s bus); measure larger sizes for a real figure")
        if not c.fit.poor:
            continue
        worst = max(c.measurements, key=lambda m: abs(c.fit.time_s(m.size_bytes) - m.time_s) / m.time_s,
                    default=None)
        where = f" (at {_human_bytes(worst.size_bytes)})" if worst else ""
        out.append(f"poor fit for {lc} {op}: R² {fixed(c.fit.r2, '.4f')}, worst relative residual "
                   f"{100 * c.fit.worst_rel_residual:.1f} %{where}; predictions near those sizes are uncertain")
    return out



# ----------------------------------------------------------------------------- to JSON


def _num(x: float | None) -> float | None:
    return None if x is None or not math.isfinite(x) else float(x)


def _op_to_dict(c: OpCalibration) -> dict:
    segs = []
    for s in c.fit.segments:
        segs.append({
            "first_size_bytes": s.first_size_bytes,
            "last_size_bytes": s.last_size_bytes,
            "latency_s": s.latency_s,
            "bus_bandwidth_bytes_per_s": _num(c.bus_bandwidth_bytes_per_s(s)),
            "n_points": s.n_points,
            "r2": _num(s.r2),
            "worst_rel_residual": s.worst_rel_residual,
            **({"rms_rel_residual": s.rms_rel_residual} if math.isfinite(s.rms_rel_residual) else {}),
        })
    meas = []
    for m in c.measurements:
        d = {"size_bytes": m.size_bytes, "time_s": m.time_s}
        for key in ("min_s", "max_s", "q1_s", "q3_s", "repeats", "mean_s", "ci_low_s", "ci_high_s", "source"):
            if getattr(m, key) is not None:
                d[key] = getattr(m, key)
        meas.append(d)
    return {
        "fit": {
            "r2": _num(c.fit.r2),
            "worst_rel_residual": c.fit.worst_rel_residual,
            "poor": c.fit.poor,
            "breaks_bytes": list(c.fit.breaks_bytes),
            "single_line": {"r2": _num(c.single_line_r2),
                            "worst_rel_residual": _num(c.single_line_worst_rel_residual)},
            "segments": segs,
        },
        "measurements": meas,
        "sources": list(c.sources),
    }


def _compute_to_dict(c: ComputeCalibration) -> dict:
    step = None
    if c.model_step is not None:
        s = c.model_step
        step = {"model": s.model, "micro_batch": s.micro_batch, "dtype": s.dtype,
                "forward_s": s.forward_s, "backward_s": s.backward_s}
        for key in STEP_OPTIONAL:
            value = getattr(s, key)
            if value is not None and value is not False:
                step[key] = list(value) if isinstance(value, tuple) else value
        step["layers"] = [{"name": l.name, "forward_s": l.forward_s, "backward_s": l.backward_s} for l in s.layers]
    d = {
        "device": c.device,
        "matmul_flops_per_s": dict(c.matmul_flops_per_s),
        "memory_bandwidth_bytes_per_s": c.memory_bandwidth_bytes_per_s,
        "overlap_slowdown": c.overlap_slowdown,
        **({"comm_slowdown": c.comm_slowdown} if c.comm_slowdown is not None else {}),
        "model_step": step,
        **({"op_rates": _op_rates_to_dict(c.op_rates)} if c.op_rates is not None else {}),
    }
    d.update(c.raw)
    return d


def _op_rates_to_dict(r: OpRates) -> dict:
    return {
        "matmul": [{"dtype": x.dtype, "m": x.m, "n": x.n, "k": x.k, "batch": x.batch, "time_s": x.time_s}
                   for x in r.matmuls],
        "attention": [{"dtype": a.dtype, "batch_heads": a.batch_heads, "seq": a.seq, "head_dim": a.head_dim,
                       "causal": a.causal, "forward_s": a.forward_s, "backward_s": a.backward_s}
                      for a in r.attention],
        "memory": {"launch_s": r.launch_s, "bandwidth_bytes_per_s": r.bandwidth_bytes_per_s,
                   "points": [{"size_bytes": b, "time_s": t} for b, t in r.memory_points]},
        **({"memory_kinds": [{"kind": k.kind, "direction": k.direction, "launch_s": k.launch_s,
                              "bandwidth_bytes_per_s": k.bandwidth_bytes_per_s,
                              "points": [{"size_bytes": b, "time_s": t} for b, t in k.points]}
                             for k in r.memory_kinds]} if r.memory_kinds else {}),
        "left_out": r.left_out,
    }


STEP_OPTIONAL = ("step_time_cv", "structure_hash", "forward_flops_per_sample", "layers_traced", "optimizer",
                 "optimizer_s", "loss", "step_time_mean_s", "step_time_ci_low_s", "step_time_ci_high_s", "repeats",
                 "threads", "after_comm_extra_s", "after_comm_wait_s", "fresh_process_ratio",
                 "fresh_process_steps_s")
""":class:`ModelStep` fields written only when known (older profiles lack them)."""
