"""Figures of a job mix (:class:`~dpsim.mix.MixResult`): jobs on servers over time, slowdowns, goodput.

They take the result (or its ``to_dict()``), so notebooks and ``dpsim mix --html`` draw the same.
"""

from __future__ import annotations

from typing import Any, Sequence

from dpsim.report.figure_base import _PALETTE, _go, _layout

PHASE_COLORS = {"restart": "#F58518", "down": "#D62728"}
"""Colour of a job's stops in the mix timeline (its training and checkpoints take the job's colour)."""
OUTAGE_COLOR = "#7F7F7F"
"""Colour of the bands that mark switch cables down over the servers below the switch."""

_HOUR_S = 3600.0


def _runs(servers: Sequence[int]) -> list[tuple[int, int]]:
    """Consecutive server numbers as (first, last) runs: one rectangle each."""
    out: list[tuple[int, int]] = []
    for s in sorted(servers):
        if out and s == out[-1][1] + 1:
            out[-1] = (out[-1][0], s)
        else:
            out.append((s, s))
    return out


def _rectangles(stretches, scale: float) -> tuple[list, list]:
    xs: list = []
    ys: list = []
    for st in stretches:
        t0, t1 = st.start_s / scale, st.end_s / scale
        for a, b in _runs(st.servers):
            xs += [t0, t1, t1, t0, t0, None]
            ys += [a - 0.4, a - 0.4, b + 0.4, b + 0.4, a - 0.4, None]
    return xs, ys


def mix_timeline_figure(result: Any, *, title: str | None = None):
    """Gantt chart of a mix: each job's servers (rows) over cluster time, its training in its colour,
    checkpoint writes paler, restarts and waits for repair in their own colours, failures as crosses."""
    go = _go()
    jobs = result.jobs
    span = max([result.horizon_s] + [j.end_s for j in jobs])
    scale = _HOUR_S if span >= 2 * _HOUR_S else 1.0
    unit = "h" if scale == _HOUR_S else "s"
    fig = go.Figure()
    stops: dict[str, list] = {p: [] for p in PHASE_COLORS}
    for k, job in enumerate(jobs):
        color = _PALETTE[k % len(_PALETTE)]
        for phase, opacity in (("trained", 0.85), ("checkpoint", 0.35)):
            stretches = [s for s in job.timeline if s.phase == phase]
            if not stretches:
                continue
            xs, ys = _rectangles(stretches, scale)
            fig.add_trace(go.Scatter(
                x=xs, y=ys, fill="toself", mode="lines", line=dict(width=0.5, color=color), fillcolor=color,
                opacity=opacity, name=job.name if phase == "trained" else f"{job.name} checkpoints",
                legendgroup=job.name, showlegend=phase == "trained", hoverinfo="text",
                text=f"{job.name} ({job.model}, {job.gpus} GPUs): {phase}"))
        for phase in PHASE_COLORS:
            stops[phase] += [s for s in job.timeline if s.phase == phase]
    for phase, stretches in stops.items():
        if stretches:
            xs, ys = _rectangles(stretches, scale)
            fig.add_trace(go.Scatter(x=xs, y=ys, fill="toself", mode="lines", line=dict(width=0.5,
                                     color=PHASE_COLORS[phase]), fillcolor=PHASE_COLORS[phase], opacity=0.8,
                                     name="restarting" if phase == "restart" else "waiting for repair",
                                     hoverinfo="name"))
    failures = list(getattr(result, "failures", ()))
    if failures:
        fig.add_trace(go.Scatter(
            x=[f.at_s / scale for f in failures], y=[f.server for f in failures], mode="markers",
            marker=dict(symbol="x", size=10, color="black", line=dict(width=1)), name="failure",
            hovertext=[f"{f.component} failure of server {f.server}" + (f", stops {f.job}" if f.job else "")
                       for f in failures], hoverinfo="text"))
    _outages(fig, list(getattr(result, "link_outages", ())), scale)
    spares = list(getattr(result, "spares", ()))
    if spares:
        fig.add_hrect(y0=min(spares) - 0.5, y1=max(spares) + 0.5, fillcolor="#BAB0AC", opacity=0.15, line_width=0,
                      annotation_text="spares", annotation_position="top left")
    _layout(fig, title or f"{len(jobs)} jobs on {result.cluster_gpus:,} GPUs of {result.topology}",
            xaxis_title=f"cluster time ({unit})", yaxis_title="server", height=520)
    fig.update_yaxes(autorange="reversed")
    return fig


def _outages(fig, outages, scale: float) -> None:
    """Switch cables down: a hatched band over the rows of the servers below the switch while they are
    down, and a marker at its start naming the switch, the cables and the jobs crossing them."""
    if not outages:
        return
    go = _go()
    xs: list = []
    ys: list = []
    for o in outages:
        t0, t1, (a, b) = o.start_s / scale, o.end_s / scale, o.servers
        xs += [t0, t1, t1, t0, t0, None]
        ys += [a - 0.5, a - 0.5, b + 0.5, b + 0.5, a - 0.5, None]
    fig.add_trace(go.Scatter(x=xs, y=ys, fill="toself", mode="lines", line=dict(width=0), fillcolor=OUTAGE_COLOR,
                             opacity=0.25, fillpattern=dict(shape="/"), name="switch cables down", hoverinfo="name"))
    fig.add_trace(go.Scatter(
        x=[o.start_s / scale for o in outages], y=[o.servers[0] - 0.5 for o in outages], mode="markers",
        marker=dict(symbol="triangle-down", size=9, color=OUTAGE_COLOR), name="switch cable failure",
        hovertext=[f"{o.cables} of {o.switch}'s {o.of_cables} uplink cables ({o.link_class}) down "
                   f"{o.start_s:,.0f}-{o.end_s:,.0f} s" + (f", crossed by {', '.join(o.jobs)}" if o.jobs else
                                                           ", crossed by no job") for o in outages],
        hoverinfo="text"))


def slowdown_figure(result: Any, *, title: str | None = None):
    """Each job's slowdown against running alone on the same servers (1: unaffected), hover: the link
    that bound it and the jobs it shared that link with."""
    go = _go()
    jobs = result.jobs
    hover = []
    for j in jobs:
        b = j.bottlenecks[0] if j.bottlenecks else None
        hover.append(f"{j.name}: step {j.step_time_s:.4g} s vs {j.alone_step_time_s:.4g} s alone"
                     + (f"<br>bound by {b.link[0]} -> {b.link[1]} ({b.link_class}) {b.share:.0%} of its "
                        f"contended time, shared with {', '.join(b.with_jobs)}" if b else ""))
    fig = go.Figure(go.Bar(x=[j.name for j in jobs], y=[j.slowdown for j in jobs],
                           marker_color=[_PALETTE[k % len(_PALETTE)] for k in range(len(jobs))],
                           hovertext=hover, hoverinfo="text", text=[f"{j.slowdown:.3f}" for j in jobs],
                           textposition="outside", showlegend=False))
    if getattr(result, "link_outages", ()):
        fig.add_trace(go.Scatter(x=[j.name for j in jobs], y=[getattr(j, "fabric_slowdown", 1.0) for j in jobs],
                                 mode="markers", marker=dict(symbol="diamond", size=10, color=OUTAGE_COLOR),
                                 name="fabric slowdown (against the same mix with no cable down)"))
    fig.add_hline(y=1.0, line_dash="dot", line_color="#555")
    _layout(fig, title or "Slowdown against running alone on the same servers", xaxis_title="job",
            yaxis_title="step time / step time alone")
    return fig


def goodput_figure(result: Any, *, title: str | None = None):
    """Where each job's held time went: training kept, lost to failures, checkpoints, restarts, waits."""
    go = _go()
    jobs = result.jobs
    parts = (("kept", lambda j: (j.end_s - j.start_s) * j.goodput, "#54A24B"),
             ("lost work", lambda j: j.lost_s, "#E45756"),
             ("checkpoints", lambda j: j.checkpoint_s, "#4C78A8"),
             ("restarts", lambda j: j.restart_s, PHASE_COLORS["restart"]),
             ("waiting for repair", lambda j: j.down_s, PHASE_COLORS["down"]))
    fig = go.Figure()
    for name, value, color in parts:
        fig.add_trace(go.Bar(x=[j.name for j in jobs], y=[value(j) / _HOUR_S for j in jobs], name=name,
                             marker_color=color))
    _layout(fig, title or "Where each job's time went", barmode="stack", xaxis_title="job",
            yaxis_title="hours held")
    return fig
