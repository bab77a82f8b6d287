"""The variability report as a rich table.
"""

from __future__ import annotations

from dpsim.units import format_seconds
from dpsim.variability.run import VariabilityReport


def variability_table(report: VariabilityReport):
    """The report as a rich table (step-time percentiles and the throughput interval)."""
    from rich.markup import escape
    from rich.table import Table


    spec = report.spec
    what = []
    if spec.noise_cv:
        source = f", from {spec.noise_source}" if spec.noise_source else ""
        what.append(f"noise {100 * spec.noise_cv:g} % CV ({spec.noise_distribution}{source})")
    what += [f"straggler {s.label}" for s in spec.stragglers]
    if spec.hiccup_rate_per_s:
        what.append(f"hiccups {spec.hiccup_rate_per_s:g}/s/GPU x {format_seconds(spec.hiccup_s)}")
    what += [f"degraded {d.label}" for d in spec.degradations]
    sync = report.layout
    if sync is not None and sync.routing is not None:
        what.append(f"MoE routing {sync.routing} per dispatch")
    title = "routing variability: " if report.routing_only else "variability: "
    table = Table(title=escape(title + ", ".join(what)), header_style="bold")
    table.add_column("step", justify="left")
    table.add_column("value", justify="right")
    d = report.degradation
    if d is not None:
        ratio = lambda a, b: f", x{a / b:.3f}" if b > 0 else ""  # noqa: E731
        table.add_row("step, degraded links", f"{format_seconds(d.step_s)} (healthy "
                      f"{format_seconds(d.healthy_step_s)}{ratio(d.step_s, d.healthy_step_s)})")
        table.add_row("communication / step", f"{format_seconds(d.comm_s)} (healthy "
                      f"{format_seconds(d.healthy_comm_s)}{ratio(d.comm_s, d.healthy_comm_s)})")
        if d.bottleneck_class is not None:
            more = d.bottleneck_count - len(d.bottleneck_links)
            table.add_row("bottleneck", escape(f"{d.bottleneck_class}: {', '.join(d.bottleneck_links)}"
                                               + (f" (+{more} tied)" if more > 0 else "")))
    s = report.statistics
    if s is not None:
        pct = f"{100 * s.confidence:g} %"
        rows = [
            ("noise-free step", format_seconds(s.nominal_step_s)),
            ("mean step", f"{format_seconds(s.mean_s)} (x{s.slowdown:.3f}; {pct} CI "
                          f"{format_seconds(s.mean_ci_s[0])} .. {format_seconds(s.mean_ci_s[1])})"),
            ("p50 / p90 / p99 step", " / ".join(format_seconds(x) for x in (s.p50_s, s.p90_s, s.p99_s))),
            ("throughput", f"{s.samples_per_s:,.6g} samples/s ({pct} CI {s.samples_per_s_ci[0]:,.6g} .. "
                           f"{s.samples_per_s_ci[1]:,.6g})"),
            ("Monte Carlo", f"{s.samples} sample(s) x {s.steps} steps, seed {s.seed}; "
                            f"{s.ranks_simulated} distinct rank(s), front <= {s.max_front}") if sync is None else
            ("Monte Carlo", f"{s.samples} sample(s) x {s.steps} steps, seed {s.seed}; layout closed form: slowest "
                            f"of {sync.block} rank(s) per stage block, {sync.stages} stage(s) x {sync.replicas} "
                            f"replica(s), {sync.micro_batches} micro-batch(es)"),
        ]
        for name, value in rows:
            table.add_row(name, value)
    return table


def print_variability(report: VariabilityReport, console=None) -> None:
    """Print :func:`variability_table`."""
    from rich.console import Console

    (console or Console()).print(variability_table(report))
