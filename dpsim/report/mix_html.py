"""``dpsim mix FILE.yaml --html out.html``: one standalone HTML page of a job mix.

The page of :mod:`dpsim.report.html` (its style, cards, tables, plotly.js inlined once), for a
:class:`~dpsim.mix.MixResult`: jobs on servers over time with failures marked, each job's slowdown
against running alone, the links that caused it (the bottleneck report per job) and, when the mix
has failures, where each job's time went.
"""

from __future__ import annotations

import html
import json
import math
from pathlib import Path
from typing import Any

from dpsim.files import check_output_path, write_text_atomic
from dpsim.report import mix_plots
from dpsim.report.html import _card, _fig_div, _json_safe, _kv_table, _version, html_page

_NOTES = {
    "timeline": "Each job's servers (rows) over cluster time: training in the job's colour, checkpoint writes "
                "paler, restarts and waits for a repair in their own colours; crosses are failures (hover: "
                "which server, which job it stopped). A job that took a spare moves to it. Hatched grey bands: "
                "switch cables down, over the servers below the switch (the jobs crossing them keep running on "
                "the cables left).",
    "slowdown": "Step time in the mix over step time alone on the same servers: what the other jobs' traffic "
                "(and switch cables down) cost each job (hover: the link that bound it and the jobs it shared it "
                "with). Diamonds: the fabric slowdown, step time over the same mix's without the cable failures.",
    "goodput": "Each job's time on its servers: training kept, training lost to failures (since the last "
               "checkpoint), checkpoint writes, restarts, waits for a repair.",
}
_MAX_OUTAGE_ROWS = 50
"""Switch cable outages listed in the page's table (all of them are in the figure and the raw JSON)."""
_HEADINGS = {"timeline": "Jobs on servers", "slowdown": "Slowdown per job", "goodput": "Failures' cost per job"}


def _servers(servers) -> str:
    runs = mix_plots._runs(servers)
    text = ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs[:6])
    return text + (f", ... ({len(servers)} servers)" if len(runs) > 6 else "")


def _table(caption: str, header: list[str], rows: list[list[str]], numeric: set[int]) -> str:
    out = [f"<table><caption>{html.escape(caption)}</caption><tr>"
           + "".join(f"<th>{html.escape(h)}</th>" for h in header) + "</tr>"]
    for row in rows:
        out.append("<tr>" + "".join(("<td class=\"num\">" if k in numeric else "<td>") + html.escape(c) + "</td>"
                                    for k, c in enumerate(row)) + "</tr>")
    out.append("</table>")
    return "".join(out)


def render_mix(result: Any, *, title: str | None = None, failures: bool | None = None) -> str:
    """The mix as one HTML document (plotly.js inlined). ``failures``: show the failure columns and
    figure (default: when the mix had failures or checkpoints)."""
    jobs = result.jobs
    outages = tuple(getattr(result, "link_outages", ()))
    if failures is None:
        failures = bool(result.failures) or bool(outages) or any(j.checkpoint_s > 0 for j in jobs)
    title = title or f"dpsim mix: {len(jobs)} jobs on {result.cluster_gpus:,} GPUs of {result.topology}"
    figs = {"timeline": mix_plots.mix_timeline_figure(result), "slowdown": mix_plots.slowdown_figure(result)}
    if failures:
        figs["goodput"] = mix_plots.goodput_figure(result)
    worst = max(jobs, key=lambda j: j.slowdown)
    cards = [_card("jobs", f"{len(jobs)}"), _card("cluster time", f"{result.horizon_s / 3600:,.2f} h"),
             _card("GPU allocation", f"{result.gpu_allocation:.1%}"),
             _card("busy at alone speed", f"{result.gpu_busy:.1%}"),
             _card(f"worst slowdown ({worst.name})", f"{worst.slowdown:.3f}", "bad" if worst.slowdown > 1.1 else "")]
    if failures:
        cards += [_card("failures", f"{len(result.failures)}"),
                  _card("GPU time lost to failures", f"{result.gpu_lost_to_failures:.1%}",
                        "bad" if result.gpu_lost_to_failures > 0.05 else ""),
                  _card("GPU time writing checkpoints", f"{result.gpu_checkpointing:.1%}")]
    if outages:
        cards.append(_card("switch cable outages", f"{len(outages)}"))
    header = ["job", "model", "GPUs", "placement", "servers", "start s", "end s", "steps", "step s", "alone s",
              "slowdown"]
    rows = [[j.name, j.model, f"{j.gpus:,}", j.placement, _servers(j.servers), f"{j.start_s:,.0f}",
             f"{j.end_s:,.0f}", f"{j.steps:,.0f}", f"{j.step_time_s:.4f}", f"{j.alone_step_time_s:.4f}",
             f"{j.slowdown:.3f}"] for j in jobs]
    if failures:
        header += ["failures", "restarts", "lost s", "checkpoint every", "goodput"]
        for row, j in zip(rows, jobs):
            every = f"{j.checkpoint_interval_s:,.0f} s" if math.isfinite(j.checkpoint_interval_s) else "never"
            row += [f"{j.failures}", f"{j.restarts}", f"{j.lost_s:,.0f}", every, f"{j.goodput:.1%}"]
    if outages:
        header.append("fabric slowdown")
        for row, j in zip(rows, jobs):
            row.append(f"{j.fabric_slowdown:.3f}")
    numeric = {2} | set(range(5, len(header)))
    tables = [_table("jobs", header, rows, numeric)]
    if outages:
        shown = outages[:_MAX_OUTAGE_ROWS]
        tables.append(_table(
            "switch cables down" + (f" (the first {len(shown)} of {len(outages)})" if len(shown) < len(outages) else ""),
            ["switch", "class", "cables down", "from s", "to s", "crossed by"],
            [[o.switch, o.link_class, f"{o.cables} of {o.of_cables}", f"{o.start_s:,.0f}", f"{o.end_s:,.0f}",
              ", ".join(o.jobs) or "-"] for o in shown], {2, 3, 4}))
    hot = [[j.name, f"{b.link[0]} -> {b.link[1]}", b.link_class, f"{b.share:.0%}", ", ".join(b.with_jobs)]
           for j in jobs for b in j.bottlenecks]
    tables.append(_table("hot links: what bound each job while shared (share of its contended communication "
                         "time)", ["job", "link", "class", "share", "shared with"], hot, {3})
                  if hot else _kv_table("hot links", [("none", "no job was slowed by a link it shared")]))
    sections = [f"<h2>{_HEADINGS[k]}</h2><p class=\"note\">{html.escape(_NOTES[k])}</p>" + _fig_div(f, f"fig-{k}")
                for k, f in figs.items()]
    raw = json.dumps(_json_safe(result.to_dict()), indent=1, allow_nan=False)
    return html_page(title, [
        f'<div class="sub">dpsim {html.escape(_version())}, a discrete-event prediction (not a measurement): each '
        "job on its own clock, collectives sharing links max-min as they overlap.</div>",
        '<div class="cards">' + "".join(cards) + "</div>",
        '<h2>Jobs and hot links</h2><div class="tables">' + "".join(tables) + "</div>",
        *sections,
        "<h2>Raw result (JSON, schema dpsim.mix/1)</h2><details><summary>show</summary>"
        f"<pre>{html.escape(raw)}</pre></details>"])


def write_mix_report(path: str | Path, result: Any, **kwargs: Any) -> Path:
    """Write :func:`render_mix` of ``result`` to ``path`` atomically."""
    path = check_output_path(path, "--html")
    write_text_atomic(path, render_mix(result, **kwargs), flag="--html")
    return path
