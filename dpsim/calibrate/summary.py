"""Tables of a calibration: nccl-tests columns, measured and fitted side by side.

Bandwidths use the decimal unit that suits them (GB/s, MB/s, kB/s; nccl-tests' GB = 1e9):
a 100 Mbit/s link reads "12.1 MB/s", not "0.01 GB/s". A table uses one unit for all its
rows, named in its header.
"""

from __future__ import annotations

import math

from dpsim.profile.op_rates import describe
from dpsim.profile.schema import OpCalibration, Profile, op_bus_factor
from dpsim.stats import fixed
from dpsim.wording import count

_REDOP = {"all_reduce": "sum", "reduce_scatter": "sum"}
_RATE_UNITS = (("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3), ("B/s", 1.0))


def rate_unit(bytes_per_s: float) -> tuple[str, float]:
    """The decimal unit in which ``bytes_per_s`` reads with at least one digit before the point."""
    for unit, scale in _RATE_UNITS:
        if bytes_per_s >= scale:
            return unit, scale
    return _RATE_UNITS[-1]


def format_rate(bytes_per_s: float) -> str:
    """``12.1 MB/s``, ``48.5 GB/s``: a bandwidth in its own unit, three significant digits."""
    if not math.isfinite(bytes_per_s):
        return "unbounded"
    unit, scale = rate_unit(bytes_per_s)
    return f"{bytes_per_s / scale:.3g} {unit}"


def rate_cell(value: float) -> str:
    """A bandwidth in a table's unit (or a time: a latency in us, a step in ms): two decimals
    from 1 up (nccl-tests' style), three significant digits below, so a slow small message reads ``0.0312``, never
    ``0.00``; an exact zero (a fitted latency at its bound) reads ``0``."""
    if not math.isfinite(value):
        return "inf"
    if value <= 0:
        return "0"
    if value >= 1:
        return f"{value:.2f}"
    return f"{value:.{2 - math.floor(math.log10(value))}f}"


def fit_summary(c: OpCalibration) -> str:
    """Parameters and quality of one fit, one line per piece."""
    lines = [f"# fit: {c.description}"]
    if len(c.fit.segments) > 1:
        lines.append(f"#   one line would give R² {fixed(c.single_line_r2, '.4f')}, worst residual "
                     f"{100 * c.single_line_worst_rel_residual:.1f} %")
    for s in c.fit.segments:
        bw = c.bus_bandwidth_bytes_per_s(s)
        bw_text = "latency only" if bw == float("inf") else f"busbw {format_rate(bw)}"
        rms = f", rms {100 * s.rms_rel_residual:.1f} %" if math.isfinite(s.rms_rel_residual) else ""
        lines.append(f"#   {s.first_size_bytes:.4g}..{s.last_size_bytes:.4g} B: latency {rate_cell(s.latency_s * 1e6)} us, {bw_text} "
                     f"({s.n_points} sizes, residual worst {100 * s.worst_rel_residual:.1f} %{rms})")
    return "\n".join(lines)


def calibration_table(c: OpCalibration, dtype: str = "float", elem_bytes: int = 4) -> str:
    """nccl-tests' out-of-place table of one sweep plus the fit's time, busbw and error."""
    n = c.n_ranks
    factor = op_bus_factor(c.op, n)
    redop = _REDOP.get(c.op, "none")
    root = "0" if c.op == "broadcast" else "-1"
    top = max((m.size_bytes / m.time_s * max(factor, 1.0) for m in c.measurements), default=1e9)
    unit, scale = rate_unit(top)
    lines = [
        fit_summary(c),
        "#                                                           measured                                 fitted",
        "#       size         count      type   redop    root     time  spread    algbw    busbw     time    busbw     err",
        f"#        (B)    (elements)                               (us)     (%)  {f'({unit})':>7s}  {f'({unit})':>7s}"
        f"     (us)  {f'({unit})':>7s}     (%)",
    ]
    for m in c.measurements:
        t = m.time_s
        fit_t = c.fit.time_s(m.size_bytes)
        spread = f"{100 * m.spread:7.1f}" if m.spread is not None else "    n/a"
        lines.append(
            f"{int(m.size_bytes):>12d}  {int(m.size_bytes) // elem_bytes:>12d}  {dtype:>8s}  {redop:>6s}  {root:>6s}"
            f"  {t * 1e6:>7.2f}  {spread}  {rate_cell(m.size_bytes / t / scale):>7s}"
            f"  {rate_cell(m.size_bytes / t * factor / scale):>7s}"
            f"  {fit_t * 1e6:>7.2f}  {rate_cell(m.size_bytes / fit_t * factor / scale):>7s}  {_signed_pct(fit_t, t):>6s}"
        )
    return "\n".join(lines)


def _signed_pct(fit_t: float, t: float) -> str:
    return fixed(100 * (fit_t - t) / t, "+.1f")


def profile_report(profile: Profile) -> str:
    """Every sweep's table and the compute results, for the terminal."""
    env = profile.environment
    head = (f"# dpsim calibration profile {profile.name!r} ({profile.method}"
            + (f", {env.get('backend')}" if env.get("backend") else "")
            + (f", {', '.join(env.get('device_names', []))}" if env.get("device_names") else "") + ")")
    parts = [head]
    for lc, info in profile.link_classes.items():
        for (cls, op), c in profile.ops.items():
            if cls != lc:
                continue
            ranks = 2 if op == "sendrecv" else info["n_ranks"]
            parts.append(f"#\n# {lc} {op}: {count(ranks, 'rank')} on "
                         f"{count(info['n_nodes'], 'node') if op != 'sendrecv' else '- nodes'}")
            parts.append(calibration_table(c))
    if profile.compute is not None:
        cc = profile.compute
        parts.append(f"#\n# compute on {cc.device}")
        for dtype, rate in cc.matmul_flops_per_s.items():
            unit, scale = ("TFLOP/s", 1e12) if rate >= 1e12 else ("GFLOP/s", 1e9)
            parts.append(f"#   matmul {dtype}: {rate / scale:.3g} {unit} (best shape)")
        if cc.memory_bandwidth_bytes_per_s:
            parts.append(f"#   memory copy: {format_rate(cc.memory_bandwidth_bytes_per_s)} (read + write)")
        if cc.overlap_slowdown is not None:
            parts.append(f"#   compute slowdown while a collective runs: {fixed(100 * cc.overlap_slowdown, '.1f')} %")
        if cc.comm_slowdown is not None:
            parts.append(f"#   all-reduce slowdown while every rank computes: {fixed(100 * cc.comm_slowdown, '.1f')} %")
        if cc.model_step is not None:
            s = cc.model_step
            opt = f", optimizer {s.optimizer_s * 1e3:.2f} ms ({s.optimizer})" if s.optimizer_s is not None else ""
            parts.append(f"#   {s.model} micro-batch {s.micro_batch} ({s.dtype}): forward + loss "
                         f"{s.forward_s * 1e3:.2f} ms, backward {s.backward_s * 1e3:.2f} ms{opt}, {len(s.layers)} layers"
                         + (f", step-time CV {100 * s.step_time_cv:.2f} %" if s.step_time_cv is not None else ""))
            if s.step_time_mean_s is not None and s.step_time_ci_low_s is not None:
                # A noisy few repeats can put the interval's low end at or near zero: three
                # significant digits below 1 ms ("0", "0.004"), never "0.00".
                ms = [rate_cell(x * 1e3) for x in (s.step_time_mean_s, s.step_time_ci_low_s, s.step_time_ci_high_s)]
                parts.append(f"#     mean step {ms[0]} ms, 95 % interval "
                             f"{ms[1]}..{ms[2]} ms over {s.repeats} "
                             f"repeats; loss {s.loss}")
            if s.fresh_process_ratio is not None:
                parts.append(f"#     in fresh processes the step takes {s.fresh_process_ratio:.3f} x this process's "
                             "time: the times above are scaled by it")
                if s.fresh_process_steps_s:
                    ms = ", ".join(rate_cell(x * 1e3) for x in s.fresh_process_steps_s)
                    parts.append(f"#     fresh processes over the calibration (start to end): {ms} ms")
            if s.after_comm_extra_s is not None and s.after_comm_wait_s is not None:
                parts.append(f"#     right after waiting {s.after_comm_wait_s * 1e3:.3g} ms on an all-reduce of its "
                             f"gradients the step takes {'-' if s.after_comm_extra_s < 0 else '+'}"
                             f"{rate_cell(abs(s.after_comm_extra_s) * 1e3)} ms against back to back")
        if cc.op_rates is not None:
            left = f"; {cc.op_rates.left_out} left out (cap or --budget)" if cc.op_rates.left_out else ""
            parts.append(f"#   the model's kernels one by one: {describe(cc.op_rates)}{left}")
    return "\n".join(parts)
