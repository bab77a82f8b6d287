"""Reading and writing calibration profiles (schema in :mod:`dpsim.profile.schema`).

:func:`load_profile` validates everything ``predict`` relies on and raises one
:class:`~dpsim.errors.ProfileError` naming the file, the field path, the value and what
is allowed. :func:`save_profile` writes atomically: a temporary file in the target
directory, fsync, then ``os.replace``, so an existing profile is either kept whole or
replaced whole, never truncated.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

from dpsim.errors import ProfileError
from dpsim.files import (DuplicateJsonKey, json_object_no_duplicates, path_kind, read_text_capped,
                         refuse_special_output, write_text_atomic)
from dpsim.limits import (
    MAX_COLLECTIVE_BYTES,
    MAX_FIT_BUS_BANDWIDTH_BYTES_PER_S,
    MAX_FIT_LATENCY_S,
    MAX_FRESH_PROCESS_RATIO,
    MAX_GPUS,
    MAX_MICRO_BATCH,
    MAX_OVERLAP_SLOWDOWN,
    MAX_PROFILE_BYTES_PER_S,
    MAX_PROFILE_CV,
    MAX_PROFILE_FLOPS_PER_S,
    MAX_PROFILE_FLOPS_PER_SAMPLE,
    MAX_PROFILE_REPEATS,
    MAX_PROFILE_SLOWDOWN,
    MAX_PROFILE_THREADS,
    MAX_SINGLE_GPU_STEP_S,
    MAX_TIMEOUT_S,
    MIN_FIT_BUS_BANDWIDTH_BYTES_PER_S,
    MIN_PROFILE_RATE,
)
from dpsim.profile.fit import AlphaBetaFit, Segment
from dpsim.profile.once import read_profiles
from dpsim.profile.schema import (
    LINK_CLASSES,
    METHODS,
    PROFILE_OPS,
    SCHEMA,
    AttentionRate,
    ComputeCalibration,
    LayerTiming,
    MatmulRate,
    MemoryKindRate,
    OpRates,
    Measurement,
    ModelStep,
    OpCalibration,
    STEP_OPTIONAL,
    Profile,
    op_bus_factor,
)
from dpsim.shipped import shipped_dir
from dpsim.workload.memory_kinds import DIRECTIONS, MEMORY_KINDS
from dpsim.workload.spec import DTYPE_SIZE_BYTES


def shipped_profiles_dir() -> Path:
    """Directory of the profiles shipped with dpsim (``calibration/profiles``)."""
    return Path(str(shipped_dir("dpsim.profiles")))


def shipped_profile_names() -> list[str]:
    """Names accepted by ``--calibration`` instead of a path."""
    try:
        return sorted(p.stem for p in shipped_profiles_dir().glob("*.json"))
    except (ModuleNotFoundError, FileNotFoundError):  # pragma: no cover - broken install
        return []


# ----------------------------------------------------------------------------- from JSON


class _Doc:
    """Strict access to one JSON object; every error names file and field path."""

    def __init__(self, origin: str, path: str, data: Any, allowed: tuple[str, ...] | None):
        self.origin, self.path = origin, path
        if not isinstance(data, dict):
            self.fail(path or "(top level)", data, "a JSON object")
        if allowed is not None:
            unknown = sorted(set(data) - set(allowed))
            if unknown:
                raise ProfileError(f"{origin}: {self.field(unknown[0])}: unknown key; allowed keys: "
                                   f"{', '.join(allowed)}")
        self.data = data

    def field(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def fail(self, where: str, value: Any, expected: str):
        text = json.dumps(value) if not isinstance(value, (dict, list)) else type(value).__name__
        if len(text) > 60:
            text = text[:57] + "..."
        raise ProfileError(f"{self.origin}: {where}: {text} is not valid; expected {expected}")

    def get(self, key: str, expected: str, default: Any = ...) -> Any:
        if key not in self.data:
            if default is ...:
                raise ProfileError(f"{self.origin}: {self.field(key)}: missing; expected {expected}")
            return default
        return self.data[key]

    def number(self, key: str, *, minimum: float = 0.0, strict: bool = False, nullable: bool = False,
               default: Any = ..., expected: str | None = None, maximum: float = math.inf) -> float | None:
        # No lower bound (an r2 may be negative) reads "a finite number", not "a number >= -inf".
        bound = f"a number {'>' if strict else '>='} {minimum:g}" if minimum > -math.inf else "a finite number"
        expected = expected or (bound + (f" and <= {maximum:g}" if maximum < math.inf else "")
                                + (" or null" if nullable else ""))
        value = self.get(key, expected, default)
        if value is None and nullable:
            return None
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        if not ok or (value <= minimum if strict else value < minimum) or value > maximum:
            self.fail(self.field(key), value, expected)
        return float(value)

    def integer(self, key: str, *, minimum: int = 1, default: Any = ..., nullable: bool = False,
                maximum: int | None = None) -> int | None:
        expected = (f"an integer >= {minimum}" + (f" and <= {maximum:,}" if maximum is not None else "")
                    + (" or null" if nullable else ""))
        value = self.get(key, expected, default)
        if value is None and nullable:
            return None
        if (not isinstance(value, int) or isinstance(value, bool) or value < minimum
                or (maximum is not None and value > maximum)):
            self.fail(self.field(key), value, expected)
        return int(value)

    def string(self, key: str, default: Any = ..., nullable: bool = False) -> str | None:
        value = self.get(key, "a string", default)
        if value is None and nullable:
            return None
        if not isinstance(value, str):
            self.fail(self.field(key), value, "a string")
        return value

    def strings(self, key: str, default: Any = ...) -> tuple[str, ...]:
        value = self.get(key, "a list of strings", default)
        if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
            self.fail(self.field(key), value, "a list of strings")
        return tuple(value)

    def numbers(self, key: str, *, maximum: float) -> tuple[float, ...] | None:
        """A list of positive numbers, each at most ``maximum``; ``None`` when absent or null."""
        expected = f"a list of numbers > 0 and <= {maximum:g}, or null"
        value = self.get(key, expected, None)
        if value is None:
            return None
        if not isinstance(value, list) or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and 0 < v <= maximum
                for v in value):
            self.fail(self.field(key), value, expected)
        return tuple(float(v) for v in value)

    def obj(self, key: str, allowed: tuple[str, ...] | None, default: Any = ...) -> _Doc | None:
        value = self.get(key, "a JSON object", default)
        if value is None and default is None:
            return None
        return _Doc(self.origin, self.field(key), value, allowed)

    def list(self, key: str, default: Any = ...) -> list:
        value = self.get(key, "a list", default)
        if not isinstance(value, list):
            self.fail(self.field(key), value, "a list")
        return value


_TOP = ("schema", "name", "description", "created_utc", "method", "sources", "environment",
        "collectives", "compute", "warnings")
_CLASS = ("n_ranks", "n_nodes", "ops")
_OP = ("fit", "measurements", "sources")
_FIT = ("r2", "worst_rel_residual", "poor", "breaks_bytes", "single_line", "segments")
_SEG = ("first_size_bytes", "last_size_bytes", "latency_s", "bus_bandwidth_bytes_per_s", "n_points", "r2",
        "worst_rel_residual", "rms_rel_residual")
_MEAS = ("size_bytes", "time_s", "min_s", "max_s", "q1_s", "q3_s", "repeats", "mean_s", "ci_low_s", "ci_high_s",
         "source")
_COMPUTE = ("device", "matmul_flops_per_s", "memory_bandwidth_bytes_per_s", "overlap_slowdown", "comm_slowdown",
            "model_step", "matmul", "memcpy", "overlap", "op_rates")
_OP_RATES = ("matmul", "attention", "memory", "memory_kinds", "left_out")
_MATMUL_RATE = ("dtype", "m", "n", "k", "batch", "time_s")
_ATTENTION_RATE = ("dtype", "batch_heads", "seq", "head_dim", "causal", "forward_s", "backward_s")
_MEMORY_RATE = ("launch_s", "bandwidth_bytes_per_s", "points")
_MEMORY_KIND_RATE = ("kind", "direction", "launch_s", "bandwidth_bytes_per_s", "points")
_STEP = ("model", "micro_batch", "dtype", "forward_s", "backward_s", "layers") + STEP_OPTIONAL
_LAYER = ("name", "forward_s", "backward_s")


def _read_op(origin: str, path: str, op: str, lc: str, n_ranks: int, raw: Any) -> OpCalibration:
    doc = _Doc(origin, path, raw, _OP)
    fd = doc.obj("fit", _FIT)
    raw_segs = fd.list("segments")
    if not raw_segs:
        fd.fail(fd.field("segments"), raw_segs, "a non-empty list of segments")
    factor = op_bus_factor(op, n_ranks)
    segments = []
    previous_last = 0.0
    for i, raw_seg in enumerate(raw_segs):
        sd = _Doc(origin, f"{fd.field('segments')}[{i}]", raw_seg, _SEG)
        first = sd.number("first_size_bytes", strict=True)
        if i and first <= previous_last:
            sd.fail(sd.field("first_size_bytes"), first,
                    f"a number > {previous_last:g}, the previous segment's last_size_bytes (segments are in "
                    "increasing size order and do not overlap)")
        last = sd.number("last_size_bytes", minimum=first, expected=f"a number >= first_size_bytes ({first:g})")
        latency = sd.number("latency_s", maximum=MAX_FIT_LATENCY_S)
        busbw = sd.number("bus_bandwidth_bytes_per_s", minimum=MIN_FIT_BUS_BANDWIDTH_BYTES_PER_S,
                          maximum=MAX_FIT_BUS_BANDWIDTH_BYTES_PER_S, nullable=True)
        seg = Segment(
            first_size_bytes=first, last_size_bytes=last, latency_s=latency,
            seconds_per_byte=0.0 if busbw is None else factor / busbw,
            n_points=sd.integer("n_points", minimum=0, default=0),
            r2=_r2(sd),
            worst_rel_residual=sd.number("worst_rel_residual", default=0.0),
            rms_rel_residual=_nan(sd.number("rms_rel_residual", nullable=True, default=None)),
        )
        if latency == 0 and seg.seconds_per_byte == 0:
            sd.fail(sd.field("bus_bandwidth_bytes_per_s"), None,
                    "a number > 0 when latency_s is 0 (the segment would cost nothing)")
        if i == len(raw_segs) - 1 and seg.seconds_per_byte == 0:
            # The last piece extends to every larger message (dpsim calibrate refuses to write one without).
            sd.fail(sd.field("bus_bandwidth_bytes_per_s"), None,
                    "a number for the last segment, which extends to every larger message (null: no per-byte "
                    "cost, any size at the same time)")
        segments.append(seg)
        previous_last = last
    fit = AlphaBetaFit(
        segments=tuple(segments),
        r2=_r2(fd),
        worst_rel_residual=fd.number("worst_rel_residual", default=0.0),
    )
    poor = fd.get("poor", "true, false or null", None)
    if poor is not None and not isinstance(poor, bool):
        # Written by dpsim (the fit's own verdict, recomputed on load): "poor": "no" was taken in silence.
        fd.fail(fd.field("poor"), poor, "true, false or null (the fit's verdict, recomputed from r2 and the residual)")
    single = fd.obj("single_line", ("r2", "worst_rel_residual"), default=None)
    measurements = []
    for j, raw_m in enumerate(doc.list("measurements", default=[])):
        md = _Doc(origin, f"{doc.field('measurements')}[{j}]", raw_m, _MEAS)
        # a measured time beyond the longest --timeout, or a size beyond any collective predict
        # takes, is a corrupt file, not a slow network
        t = lambda key, **kw: md.number(key, maximum=MAX_TIMEOUT_S, **kw)  # noqa: E731
        measurements.append(Measurement(
            size_bytes=md.number("size_bytes", strict=True, maximum=MAX_COLLECTIVE_BYTES),
            time_s=t("time_s", strict=True),
            min_s=t("min_s", nullable=True, default=None),
            max_s=t("max_s", nullable=True, default=None),
            q1_s=t("q1_s", nullable=True, default=None),
            q3_s=t("q3_s", nullable=True, default=None),
            repeats=md.integer("repeats", nullable=True, default=None, maximum=MAX_PROFILE_REPEATS),
            mean_s=t("mean_s", nullable=True, default=None),
            ci_low_s=t("ci_low_s", nullable=True, default=None),
            ci_high_s=t("ci_high_s", nullable=True, default=None),
            source=md.string("source", nullable=True, default=None),
        ))
    if measurements:
        times = [m.time_s for m in measurements]
        fit = AlphaBetaFit(segments=fit.segments, r2=fit.r2, worst_rel_residual=fit.worst_rel_residual,
                           time_span=max(times) / min(times))
    return OpCalibration(
        op=op, link_class=lc, n_ranks=n_ranks, fit=fit, measurements=tuple(measurements),
        single_line_r2=_r2(single) if single else math.nan,
        single_line_worst_rel_residual=_nan(single.number("worst_rel_residual", nullable=True, default=None))
        if single else math.nan,
        sources=doc.strings("sources", default=[]),
    )


def _r2(doc: _Doc) -> float:
    """An R² as :func:`~dpsim.profile.fit.log_r2` computes it, 1 - SSres/SStot: at most 1 (a perfect fit), below
    0 for a fit worse than the points' mean, null when every point is equal. A hand-edited ``r2: 2`` was taken."""
    return _nan(doc.number("r2", minimum=-math.inf, maximum=1.0, nullable=True, default=None,
                           expected="a finite number <= 1 or null (R² = 1 - SSres/SStot: 1 for a perfect fit, "
                                    "negative for a fit worse than the mean)"))


def _nan(x: float | None) -> float:
    return math.nan if x is None else x


def _read_compute(origin: str, raw: Any) -> ComputeCalibration:
    doc = _Doc(origin, "compute", raw, _COMPUTE)
    rates = doc.obj("matmul_flops_per_s", None, default={})
    flops = {}
    for dtype in rates.data:
        if dtype not in DTYPE_SIZE_BYTES:
            raise ProfileError(f"{origin}: compute.matmul_flops_per_s.{dtype}: unknown dtype; "
                               f"allowed: {', '.join(DTYPE_SIZE_BYTES)}")
        flops[dtype] = rates.number(dtype, minimum=MIN_PROFILE_RATE, maximum=MAX_PROFILE_FLOPS_PER_S)
    step = None
    if doc.data.get("model_step") is not None:
        sd = doc.obj("model_step", _STEP)
        layers = []
        for i, raw_l in enumerate(sd.list("layers", default=[])):
            ld = _Doc(origin, f"compute.model_step.layers[{i}]", raw_l, _LAYER)
            layers.append(LayerTiming(name=ld.string("name"), forward_s=ld.number("forward_s", maximum=MAX_SINGLE_GPU_STEP_S),
                                      backward_s=ld.number("backward_s", maximum=MAX_SINGLE_GPU_STEP_S)))
        traced = sd.get("layers_traced", "true or false", False)
        if not isinstance(traced, bool):
            sd.fail(sd.field("layers_traced"), traced, "true or false")
        step = ModelStep(model=sd.string("model"), micro_batch=sd.integer("micro_batch", maximum=MAX_MICRO_BATCH),
                         dtype=sd.string("dtype"), forward_s=sd.number("forward_s", strict=True, maximum=MAX_SINGLE_GPU_STEP_S),
                         backward_s=sd.number("backward_s", strict=True, maximum=MAX_SINGLE_GPU_STEP_S), layers=tuple(layers),
                         step_time_cv=sd.number("step_time_cv", nullable=True, default=None, maximum=MAX_PROFILE_CV),
                         structure_hash=sd.string("structure_hash", nullable=True, default=None),
                         forward_flops_per_sample=sd.number("forward_flops_per_sample", nullable=True, default=None,
                                                                   maximum=MAX_PROFILE_FLOPS_PER_SAMPLE),
                         layers_traced=traced,
                         optimizer=sd.string("optimizer", nullable=True, default=None),
                         optimizer_s=sd.number("optimizer_s", nullable=True, default=None, maximum=MAX_SINGLE_GPU_STEP_S),
                         loss=sd.string("loss", nullable=True, default=None),
                         step_time_mean_s=sd.number("step_time_mean_s", nullable=True, default=None,
                                                    maximum=MAX_SINGLE_GPU_STEP_S),
                         step_time_ci_low_s=sd.number("step_time_ci_low_s", nullable=True, default=None,
                                                      maximum=MAX_SINGLE_GPU_STEP_S),
                         step_time_ci_high_s=sd.number("step_time_ci_high_s", nullable=True, default=None,
                                                       maximum=MAX_SINGLE_GPU_STEP_S),
                         repeats=sd.integer("repeats", nullable=True, default=None, maximum=MAX_PROFILE_REPEATS),
                         threads=sd.integer("threads", nullable=True, default=None, maximum=MAX_PROFILE_THREADS),
                         after_comm_extra_s=sd.number("after_comm_extra_s", nullable=True, default=None,
                                                      minimum=-MAX_SINGLE_GPU_STEP_S, maximum=MAX_SINGLE_GPU_STEP_S),
                         after_comm_wait_s=sd.number("after_comm_wait_s", nullable=True, default=None,
                                                     maximum=MAX_SINGLE_GPU_STEP_S),
                         fresh_process_ratio=sd.number("fresh_process_ratio", nullable=True, default=None,
                                                       strict=True, maximum=MAX_FRESH_PROCESS_RATIO),
                         fresh_process_steps_s=sd.numbers("fresh_process_steps_s", maximum=MAX_SINGLE_GPU_STEP_S))
    raw_extra = {k: doc.data[k] for k in ("matmul", "memcpy", "overlap") if k in doc.data}
    return ComputeCalibration(
        device=doc.string("device"),
        matmul_flops_per_s=flops,
        memory_bandwidth_bytes_per_s=doc.number("memory_bandwidth_bytes_per_s", minimum=MIN_PROFILE_RATE,
                                                maximum=MAX_PROFILE_BYTES_PER_S, nullable=True, default=None),
        overlap_slowdown=doc.number("overlap_slowdown", nullable=True, default=None, maximum=MAX_OVERLAP_SLOWDOWN),
        comm_slowdown=doc.number("comm_slowdown", nullable=True, default=None, maximum=MAX_PROFILE_SLOWDOWN),
        model_step=step,
        op_rates=_read_op_rates(doc.obj("op_rates", _OP_RATES)) if doc.data.get("op_rates") is not None else None,
        raw=raw_extra,
    )


def _dtype(doc: _Doc) -> str:
    dtype = doc.string("dtype")
    if dtype not in DTYPE_SIZE_BYTES:
        doc.fail(doc.field("dtype"), dtype, "one of " + ", ".join(DTYPE_SIZE_BYTES))
    return dtype


def _read_op_rates(doc: _Doc) -> OpRates:
    """``compute.op_rates``: every timed kernel, checked as the rest of the profile is."""
    origin = doc.origin
    time = lambda d, key: d.number(key, strict=True, maximum=MAX_SINGLE_GPU_STEP_S)  # noqa: E731
    matmuls = []
    for i, raw in enumerate(doc.list("matmul", default=[])):
        d = _Doc(origin, f"{doc.field('matmul')}[{i}]", raw, _MATMUL_RATE)
        matmuls.append(MatmulRate(dtype=_dtype(d), m=d.integer("m"), n=d.integer("n"), k=d.integer("k"),
                                  batch=d.integer("batch", default=1), time_s=time(d, "time_s")))
    attention = []
    for i, raw in enumerate(doc.list("attention", default=[])):
        d = _Doc(origin, f"{doc.field('attention')}[{i}]", raw, _ATTENTION_RATE)
        causal = d.get("causal", "true or false")
        if not isinstance(causal, bool):
            d.fail(d.field("causal"), causal, "true or false")
        attention.append(AttentionRate(dtype=_dtype(d), batch_heads=d.integer("batch_heads"), seq=d.integer("seq"),
                                       head_dim=d.integer("head_dim"), causal=causal,
                                       forward_s=time(d, "forward_s"), backward_s=time(d, "backward_s")))
    launch = bandwidth = None
    points = []
    md = doc.obj("memory", _MEMORY_RATE, default=None)
    if md is not None:
        launch = md.number("launch_s", nullable=True, default=None, maximum=MAX_FIT_LATENCY_S)
        bandwidth = md.number("bandwidth_bytes_per_s", strict=True, nullable=True, default=None,
                              minimum=MIN_PROFILE_RATE, maximum=MAX_PROFILE_BYTES_PER_S)
        for i, raw in enumerate(md.list("points", default=[])):
            d = _Doc(origin, f"{md.field('points')}[{i}]", raw, ("size_bytes", "time_s"))
            points.append((d.number("size_bytes", strict=True, maximum=MAX_COLLECTIVE_BYTES), time(d, "time_s")))
        if (launch is None) != (bandwidth is None):
            md.fail(md.field("bandwidth_bytes_per_s"), bandwidth, "given together with launch_s (both or neither)")
    return OpRates(matmuls=tuple(matmuls), attention=tuple(attention), launch_s=launch,
                   bandwidth_bytes_per_s=bandwidth, memory_points=tuple(points),
                   memory_kinds=_read_memory_kinds(doc, time),
                   left_out=doc.integer("left_out", minimum=0, default=0))


def _read_memory_kinds(doc: _Doc, time) -> tuple[MemoryKindRate, ...]:
    """``compute.op_rates.memory_kinds``: each kind's fit, at most one per kind and direction."""
    kinds: list[MemoryKindRate] = []
    seen: set[tuple[str, str]] = set()
    for i, raw in enumerate(doc.list("memory_kinds", default=[])):
        d = _Doc(doc.origin, f"{doc.field('memory_kinds')}[{i}]", raw, _MEMORY_KIND_RATE)
        kind = d.string("kind")
        if kind not in MEMORY_KINDS:
            d.fail(d.field("kind"), kind, "one of " + ", ".join(MEMORY_KINDS))
        direction = d.string("direction")
        if direction not in DIRECTIONS:
            d.fail(d.field("direction"), direction, "one of " + ", ".join(DIRECTIONS))
        if (kind, direction) in seen:
            d.fail(d.field("direction"), direction, f"one entry per kind and direction ({kind} {direction} repeats)")
        seen.add((kind, direction))
        points = []
        for j, raw_point in enumerate(d.list("points", default=[])):
            p = _Doc(doc.origin, f"{d.field('points')}[{j}]", raw_point, ("size_bytes", "time_s"))
            points.append((p.number("size_bytes", strict=True, maximum=MAX_COLLECTIVE_BYTES), time(p, "time_s")))
        kinds.append(MemoryKindRate(kind=kind, direction=direction,
                                    launch_s=d.number("launch_s", maximum=MAX_FIT_LATENCY_S),
                                    bandwidth_bytes_per_s=d.number("bandwidth_bytes_per_s", strict=True,
                                                                   minimum=MIN_PROFILE_RATE,
                                                                   maximum=MAX_PROFILE_BYTES_PER_S),
                                    points=tuple(points)))
    return tuple(kinds)


def profile_from_dict(data: Any, origin: str = "profile") -> Profile:
    """Validate a parsed profile document and build its :class:`Profile`."""
    top = _Doc(origin, "", data, _TOP)
    schema = top.get("schema", f"{SCHEMA!r}")
    if schema != SCHEMA:
        top.fail("schema", schema, f"{SCHEMA!r} (this dpsim reads that version)")
    method = top.string("method", default="torch.distributed")
    if method not in METHODS:
        top.fail("method", method, "one of " + ", ".join(METHODS))
    env = top.obj("environment", None, default={})
    # The two environment fields predict reads (is_cpu_profile, profile_ranks_per_node): a hand-edited
    # "device_type": 3 was read as a GPU profile and "ranks_per_node": [0] or ["8"] dropped, in silence.
    device_type = env.data.get("device_type")
    if device_type is not None and not (isinstance(device_type, str) and device_type.strip()):
        env.fail(env.field("device_type"), device_type, "a torch device type (e.g. \"cuda\", \"cpu\") or null")
    per_node = env.data.get("ranks_per_node")
    if per_node is not None and not (isinstance(per_node, list) and per_node and all(
            isinstance(k, int) and not isinstance(k, bool) and 1 <= k <= MAX_GPUS for k in per_node)):
        env.fail(env.field("ranks_per_node"), per_node, "a list of each host's ranks (integers >= 1) or null")
    # The run's size, informational (predict reads n_ranks and n_nodes of each link class) but written by every
    # calibration: a hand-edited "world_size": 0 or "hosts": "1" was taken in silence, so both are checked.
    counts = {}
    for key in ("hosts", "world_size"):
        value = env.data.get(key)
        if value is not None and not (isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_GPUS):
            env.fail(env.field(key), value, f"an integer >= 1 and <= {MAX_GPUS:,} or null")
        counts[key] = value
    if counts["hosts"] is not None and counts["world_size"] is not None and counts["hosts"] > counts["world_size"]:
        env.fail(env.field("hosts"), counts["hosts"], f"at most world_size ({counts['world_size']:,}): every host "
                                                      f"runs a rank")
    collectives = top.obj("collectives", LINK_CLASSES)
    link_classes: dict[str, dict[str, Any]] = {}
    ops: dict[tuple[str, str], OpCalibration] = {}
    for lc in LINK_CLASSES:
        if lc not in collectives.data:
            continue
        cd = collectives.obj(lc, _CLASS)
        # A cluster dpsim can simulate (a 31-digit n_ranks was printed in predict's header).
        n_ranks = cd.integer("n_ranks", minimum=2, maximum=MAX_GPUS)
        n_nodes = cd.integer("n_nodes", minimum=1, maximum=MAX_GPUS)
        if n_nodes > n_ranks:
            cd.fail(cd.field("n_nodes"), n_nodes, f"at most n_ranks ({n_ranks:,})")
        if n_ranks % n_nodes:  # every host runs the same number of ranks (what profile_ranks_per_node reads)
            cd.fail(cd.field("n_ranks"), n_ranks, f"a multiple of n_nodes ({n_nodes:,}): the same ranks on each node")
        if lc == "intra_node" and n_nodes != 1:
            cd.fail(cd.field("n_nodes"), n_nodes, "1 for intra_node")
        if lc == "inter_node" and n_nodes < 2:
            cd.fail(cd.field("n_nodes"), n_nodes, "an integer >= 2 for inter_node")
        link_classes[lc] = {"n_ranks": n_ranks, "n_nodes": n_nodes}
        od = cd.obj("ops", PROFILE_OPS)
        if not od.data:
            od.fail(od.path, od.data, "at least one of " + ", ".join(PROFILE_OPS))
        for op in PROFILE_OPS:
            if op in od.data:
                ops[lc, op] = _read_op(origin, od.field(op), op, lc, 2 if op == "sendrecv" else n_ranks,
                                       od.data[op])
    compute_raw = top.get("compute", "a JSON object or null", None)
    name = top.string("name")
    if not name.strip() or not name.isprintable():  # it titles collective's header and the report
        top.fail(top.field("name"), name, "one line of printable text, not empty")
    return Profile(
        name=name,
        description=top.string("description", default=""),
        created_utc=top.string("created_utc", default=""),
        method=method,
        sources=top.strings("sources", default=[]),
        environment=env.data,
        link_classes=link_classes,
        ops=ops,
        compute=None if compute_raw is None else _read_compute(origin, compute_raw),
        warnings=top.strings("warnings", default=[]),
        path=None if origin == "profile" else origin,
    )


def resolve_profile_path(path_or_name: str, flag: str = "--calibration") -> Path:
    """A file path, or the name of a shipped profile (``dpsim calibrate`` list)."""
    path = Path(path_or_name)
    if path_kind(path, flag, ProfileError) is not None or path.suffix == ".json" or os.sep in path_or_name:
        return path
    shipped = shipped_profile_names()
    if path_or_name in shipped:
        return shipped_profiles_dir() / f"{path_or_name}.json"
    raise ProfileError(f"{flag}: {path_or_name!r} is neither a file nor a shipped profile; "
                       f"shipped: {', '.join(shipped) or '(none)'}")


def load_profile(path_or_name: str | Path, flag: str = "--calibration") -> Profile:
    """Read and validate a profile file (or a shipped profile by name)."""
    path = resolve_profile_path(str(path_or_name), flag)
    if path_kind(path, flag, ProfileError) is None and not path.is_symlink():
        raise ProfileError(f"{flag}: {str(path)!r} does not exist")
    read = read_profiles()
    key = _file_key(path) if read is not None else None
    if key is not None and key in read:
        return read[key]
    profile = _read_profile(path, flag)
    if key is not None:
        read[key] = profile
    return profile


def _file_key(path: Path) -> tuple[str, str, int, int] | None:
    """``path`` as given (the profile's ``path`` says it), the file it names, its modification time and size
    (``None``: it cannot be stat'ed; read, and the read names what is wrong)."""
    try:
        st = path.stat()
        return str(path), str(path.resolve()), st.st_mtime_ns, st.st_size
    except OSError:
        return None


def _read_profile(path: Path, flag: str) -> Profile:
    """Read, parse and validate the profile file ``path`` (:func:`load_profile`'s work, once per file within
    :func:`~dpsim.profile.once.profiles_read_once`)."""
    text = read_text_capped(path, flag, ProfileError, what="profile JSON file")
    try:
        data = json.loads(text, object_pairs_hook=json_object_no_duplicates)
    except json.JSONDecodeError as exc:
        raise ProfileError(f"{path}: not valid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
    except DuplicateJsonKey as exc:
        raise ProfileError(f"{path}: not valid JSON ({exc}); give each key once") from None
    except (ValueError, RecursionError):  # a number past 4,300 digits; nesting past the recursion limit
        raise ProfileError(f"{path}: not valid JSON (a number with too many digits, or nested too deeply)") from None
    return profile_from_dict(data, origin=str(path))


def _existing_mode(path: Path) -> int | None:
    """An existing profile's permission bits, kept when it is rewritten (``None``: a new file, the umask's)."""
    try:
        return path.stat().st_mode & 0o777
    except OSError:
        return None


def save_profile(profile: Profile, out: str | Path) -> Path:
    """Write ``profile`` to ``out`` atomically (validated first; its directory must exist, as every
    output's must)."""
    out = Path(out)
    refuse_special_output(out, "--out", ProfileError)
    doc = profile.to_dict()
    profile_from_dict(json.loads(json.dumps(doc)), origin=f"(profile for {out})")  # never write what load rejects
    text = json.dumps(doc, indent=1, allow_nan=False) + "\n"
    return write_text_atomic(out, text, mode=_existing_mode(out), flag="--out", error=ProfileError)
