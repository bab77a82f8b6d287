"""Tables of a calibration: nccl-tests columns, measured and fitted side by side."""

from __future__ import annotations

from dpsim.profile.schema import OpCalibration, Profile, op_bus_factor

_REDOP = {"all_reduce": "sum", "reduce_scatter": "sum"}


def fit_summary(c: OpCalibration) -> str:
    """Parameters and quality of one fit, one line per piece."""
    lines = [f"# fit: {c.description}"]
    if len(c.fit.segments) > 1:
        lines.append(f"#   one line would give R² {c.single_line_r2:.4f}, worst residual "
                     f"{100 * c.single_line_worst_rel_residual:.1f} %")
    for s in c.fit.segments:
        bw = c.bus_bandwidth_bytes_per_s(s)
        bw_text = "latency only" if bw == float("inf") else f"busbw {bw / 1e9:.2f} GB/s"
        lines.append(f"#   {s.first_size_bytes:.4g}..{s.last_size_bytes:.4g} B: latency {s.latency_s * 1e6:.2f} us, {bw_text} "
                     f"({s.n_points} sizes, worst {100 * s.worst_rel_residual:.1f} %)")
    return "\n".join(lines)


def calibration_table(c: OpCalibration, dtype: str = "float", elem_bytes: int = 4) -> str:
    """nccl-tests' out-of-place table of one sweep plus the fit's time, busbw and error."""
    n = c.n_ranks
    factor = op_bus_factor(c.op, n)
    redop = _REDOP.get(c.op, "none")
    root = "0" if c.op == "broadcast" else "-1"
    lines = [
        fit_summary(c),
        "#                                                           measured                              fitted",
        "#       size         count      type   redop    root     time  spread   algbw   busbw     time   busbw     err",
        "#        (B)    (elements)                               (us)     (%)  (GB/s)  (GB/s)     (us)  (GB/s)     (%)",
    ]
    for m in c.measurements:
        t = m.time_s
        fit_t = c.fit.time_s(m.size_bytes)
        spread = f"{100 * m.spread:7.1f}" if m.spread is not None else "    n/a"
        lines.append(
            f"{int(m.size_bytes):>12d}  {int(m.size_bytes) // elem_bytes:>12d}  {dtype:>8s}  {redop:>6s}  {root:>6s}"
            f"  {t * 1e6:>7.2f}  {spread}  {m.size_bytes / t / 1e9:>6.2f}  {m.size_bytes / t * factor / 1e9:>6.2f}"
            f"  {fit_t * 1e6:>7.2f}  {m.size_bytes / fit_t * factor / 1e9:>6.2f}  {100 * (fit_t - t) / t:>+6.1f}"
        )
    return "\n".join(lines)


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
            parts.append(f"#\n# {lc} {op}: {ranks} ranks on {info['n_nodes'] if op != 'sendrecv' else '-'} "
                         f"node(s)")
            parts.append(calibration_table(c))
    if profile.compute is not None:
        cc = profile.compute
        parts.append(f"#\n# compute on {cc.device}")
        for dtype, rate in cc.matmul_flops_per_s.items():
            parts.append(f"#   matmul {dtype}: {rate / 1e12:.3f} TFLOP/s (best shape)")
        if cc.memory_bandwidth_bytes_per_s:
            parts.append(f"#   memory copy: {cc.memory_bandwidth_bytes_per_s / 1e9:.1f} GB/s (read + write)")
        if cc.overlap_slowdown is not None:
            parts.append(f"#   compute slowdown while a collective runs: {100 * cc.overlap_slowdown:.1f} %")
        if cc.model_step is not None:
            s = cc.model_step
            parts.append(f"#   {s.model} micro-batch {s.micro_batch} ({s.dtype}): forward "
                         f"{s.forward_s * 1e3:.2f} ms, backward {s.backward_s * 1e3:.2f} ms, {len(s.layers)} layers"
                         + (f", step-time CV {100 * s.step_time_cv:.2f} %" if s.step_time_cv is not None else ""))
    return "\n".join(parts)
