"""The link-utilisation report as rich tables (``predict --links``)."""

from __future__ import annotations

from dpsim.collectives.links import LinkReport


def print_link_report(report: LinkReport | None, console=None) -> None:
    """The report as rich tables (``predict --links``)."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = console or Console()
    if report is None:
        console.print("link utilisation: not available for this collective model (calibrated or custom)")
        return
    title = (f"link utilisation over a {report.step_time_s * 1e3:.3g} ms step"
             + (f" ({report.jobs} jobs, {report.placement})" if report.jobs > 1 else ""))
    classes = Table(title=escape(title), header_style="bold")
    for col in ("link class", "links used", "max utilisation", "mean utilisation"):
        classes.add_column(col, justify="left" if col == "link class" else "right")
    for cls, d in sorted(report.by_class.items(), key=lambda kv: -kv[1]["max_utilisation"]):
        classes.add_row(cls, str(d["links"]), f"{100 * d['max_utilisation']:.1f} %",
                        f"{100 * d['mean_utilisation']:.1f} %")
    console.print(classes)
    # Identical links are one row: the first of them by name, and how many there are.
    top = Table(title="busiest links (identical links grouped)", header_style="bold")
    for col in ("first link", "links", "class", "GB/s", "busy", "utilisation"):
        top.add_column(col, justify="left" if col in ("first link", "class") else "right")
    for u in report.top:
        top.add_row(escape(f"{u.link[0]} -> {u.link[1]}"), f"{u.links:,}", u.link_class, f"{u.capacity_bytes_per_s / 1e9:.1f}",
                    f"{u.busy_s * 1e3:.3g} ms", f"{100 * u.utilisation:.1f} %")
    console.print(top)
    if report.bottleneck:
        b = report.bottleneck[0]
        more = f" (and {report.bottleneck_count - 1:,} more tied)" if report.bottleneck_count > 1 else ""
        console.print(f"bottleneck: {b.link_class} link {escape(b.link[0])} -> {escape(b.link[1])}{more}, "
                      f"busy {100 * b.utilisation:.1f} % of the step: upgrade this link class first")
    used = ", ".join(f"{k} x{v}" for k, v in sorted(report.algorithms.items()))
    console.print(f"collectives: {used} (evaluated: {report.evaluation})")
