"""Plotly figures for capacity planning.

- :func:`timeline_figure`: one training step as a Gantt chart (compute layers, each
  bucket's all-reduce on the communication stream, the exposed part of it, the
  optimizer), so overlap is visible.
- :func:`scaling_figure`: throughput and scaling efficiency vs GPU count per fabric,
  with the ideal (linear) line.
- :func:`memory_figure`: memory per GPU by category for several (label, breakdown)
  pairs (strategies, precisions), against the GPU's capacity.
- :func:`bucket_figure`: step time vs DDP ``bucket_cap_mb`` (the U shape of Li et al.
  2020, "PyTorch Distributed", figure 8), with total and exposed communication.
- :func:`cost_figure`: time-to-train and cost vs GPU count.

Functions take predictions or sweep results (a pandas DataFrame from
:mod:`dpsim.sweep`, or its rows as dicts) and return a ``plotly.graph_objects.Figure``.
plotly is imported inside each function so ``dpsim predict`` never pays for it.
Times are shown in ms, memory in GB (1e9 bytes, as GPU capacities are quoted).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence

from dpsim.errors import ConfigError
from dpsim.memory import BREAKDOWN_SUBPARTS
from dpsim.plan.cost import format_count
from dpsim.report.figure_base import (
    _GB,
    _PALETTE,
    KIND_COLORS,
    MEMORY_COLORS,
    MEMORY_LABELS,
    _color,
    _go,
    _gpu_ticks,
    _group_keys,
    _groups,
    _layout,
    _require,
    records,
)

# ---------------------------------------------------------------------- timeline

def _subtract(intervals: list[tuple[float, float]], cover: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """Parts of ``intervals`` not covered by ``cover``."""
    merged: list[list[float]] = []
    for a, b in sorted(cover):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    out = []
    for a, b in sorted(intervals):
        start = a
        for c, d in merged:
            if d <= start or c >= b:
                continue
            if c > start:
                out.append((start, c))
            start = max(start, d)
            if start >= b:
                break
        if start < b:
            out.append((start, b))
    return [(a, b) for a, b in out if b - a > 1e-15]


def timeline_figure(prediction: Any, *, step: int | None = None, title: str | None = None,
                    max_ranks: int = 8):
    """A Gantt chart of one simulated step.

    ``prediction`` is a :class:`~dpsim.predict.Prediction` (or a
    :class:`~dpsim.engine.SimulationResult`). Rows, top to bottom: each distinct rank's
    compute (forward, backward, optimizer; a homogeneous job has one representative
    rank), the communication stream (one bar per bucket's collective) and the exposed
    communication (collectives running while rank 0 computes nothing). ``step``
    defaults to the last simulated step (steady state).

    A tensor/pipeline layout's prediction is drawn stage by stage instead: per pipeline
    stage a compute row (each micro-batch's forward and backward, the optimizer) with its
    idle time before the last backward shaded as the *bubble*, and a row of its
    collectives and point-to-point transfers; ``max_ranks`` caps the stages shown (the
    first and last half of them).
    """
    if getattr(prediction, "layout", None) is not None:
        return _stage_timeline(prediction, title=title, max_stages=max(max_ranks, 2))
    go = _go()
    sim = getattr(prediction, "simulation", prediction)
    trace = getattr(sim, "trace", None)
    if not trace:
        raise ConfigError("timeline_figure: the prediction has no trace; give a Prediction or a SimulationResult")
    steps = sorted({e.step for e in trace})
    if step is None:
        step = steps[-1]
    if step not in steps:
        raise ConfigError(f"timeline_figure: step {step!r} is not simulated; choose one of {steps}")
    events = [e for e in trace if e.step == step]
    t0 = min(float(e.start_s) for e in events)
    compute_kinds = ("forward", "backward", "recompute", "optimizer")
    ranks = sorted({e.rank for e in events if e.kind in compute_kinds})
    shown = ranks[:max_ranks]
    homogeneous = len(ranks) == 1
    n_gpus = getattr(prediction, "n_gpus", None)

    def rank_row(r: int) -> str:
        if homogeneous:
            return f"compute (every rank{'' if n_gpus is None else f', x{n_gpus}'})"
        return f"rank group {r} compute"

    comm_row, exposed_row = "communication stream", "exposed communication"
    rows_order = [rank_row(r) for r in shown] + [comm_row, exposed_row]
    fig = go.Figure()
    ms = 1e3

    span = max(float(e.end_s) for e in events) - t0 or 1.0

    def add(kind: str, row: str, items: list[tuple[float, float, str]], legend: str) -> None:
        if not items:
            return
        # A thin white edge separates neighbouring bars, unless bars are so narrow that the
        # edge would wash their colour out (~1000 px plot: keep edges above ~4 px per bar).
        mean_width = sum(b - a for a, b, _ in items) / len(items)
        edge = 0.5 if mean_width / span > 0.004 else 0.0
        fig.add_trace(go.Bar(
            name=legend, legendgroup=kind, orientation="h", y=[row] * len(items),
            base=[(a - t0) * ms for a, _, _ in items], x=[(b - a) * ms for a, b, _ in items],
            customdata=[[label, (a - t0) * ms, (b - t0) * ms, (b - a) * ms] for a, b, label in items],
            hovertemplate="%{customdata[0]}<br>%{customdata[1]:.3f} - %{customdata[2]:.3f} ms"
                          "<br>duration %{customdata[3]:.3f} ms<extra>" + legend + "</extra>",
            marker=dict(color=KIND_COLORS.get(kind, "#888888"), line=dict(width=edge, color="white")),
            showlegend=not any(t.legendgroup == kind for t in fig.data),
        ))

    for r in shown:
        for kind in compute_kinds:
            items = [(float(e.start_s), float(e.end_s), f"{kind} {e.name}") for e in events
                     if e.rank == r and e.kind == kind and e.end_s > e.start_s]
            add(kind, rank_row(r), items, kind)
    comm = [e for e in events if e.kind not in compute_kinds]
    for kind in sorted({e.kind for e in comm}):
        items = [(float(e.start_s), float(e.end_s), e.name) for e in comm if e.kind == kind and e.end_s > e.start_s]
        add(kind, comm_row, items, {"allreduce": "all-reduce (per bucket)"}.get(kind, kind))
    busy = [(float(e.start_s), float(e.end_s)) for e in events if e.kind in compute_kinds and e.rank == ranks[0]]
    exposed = _subtract([(float(e.start_s), float(e.end_s)) for e in comm], busy)
    add("exposed", exposed_row, [(a, b, "exposed (no compute on rank 0)") for a, b in exposed],
        "exposed communication")
    step_ms = (max(float(e.end_s) for e in events) - t0) * ms
    exposed_ms = sum(b - a for a, b in exposed) * ms
    comm_ms = sum(float(e.end_s) - float(e.start_s) for e in comm) * ms
    if title is None:
        name = (f"{prediction.model} on {prediction.n_gpus} x {prediction.gpu} [{prediction.topology}]: "
                if hasattr(prediction, "model") else "")
        hidden = f", {100 * (1 - exposed_ms / comm_ms):.0f} % hidden" if comm_ms > 0 else ""
        title = (f"{name}step {step} = {step_ms:.2f} ms; communication {comm_ms:.2f} ms, "
                 f"exposed {exposed_ms:.2f} ms{hidden}")
    _layout(fig, title, barmode="overlay", bargap=0.25, height=200 + 60 * len(rows_order),
            xaxis=dict(title="time since step start (ms)", rangemode="tozero"),
            yaxis=dict(categoryorder="array", categoryarray=rows_order[::-1]))
    return fig


_STAGE_COLORS = {"bubble": "#BDBDBD", "p2p": "#72B7B2"}
"""Colours of the pipeline view's bubble and transfers (the other kinds: ``KIND_COLORS``)."""


def _stage_timeline(prediction: Any, *, title: str | None, max_stages: int):
    """Timeline of a tensor/pipeline layout: a compute row and a communication row per stage."""
    go = _go()
    rep = prediction.layout
    events = list(prediction.simulation.trace)
    n = len(rep.stages)
    stages = list(range(n)) if n <= max_stages else (list(range(max_stages // 2))
                                                     + list(range(n - max_stages // 2, n)))
    compute_kinds = ("forward", "backward", "recompute", "optimizer")
    rows_order: list[str] = []
    for st in stages:
        rows_order += [f"stage {st} compute", f"stage {st} communication"]
    fig = go.Figure()
    ms = 1e3
    step = prediction.step_time_s

    def add(kind: str, row: str, items: list[tuple[float, float, str]], legend: str) -> None:
        if not items:
            return
        color = _STAGE_COLORS.get(kind) or KIND_COLORS.get(kind, "#888888")
        fig.add_trace(go.Bar(
            name=legend, legendgroup=kind, orientation="h", y=[row] * len(items),
            base=[a * ms for a, _, _ in items], x=[(b - a) * ms for a, b, _ in items],
            customdata=[[label, a * ms, b * ms, (b - a) * ms] for a, b, label in items],
            hovertemplate="%{customdata[0]}<br>%{customdata[1]:.3f} - %{customdata[2]:.3f} ms"
                          "<br>duration %{customdata[3]:.3f} ms<extra>" + legend + "</extra>",
            marker=dict(color=color, line=dict(width=0)),
            showlegend=not any(t.legendgroup == kind for t in fig.data)))

    for st in stages:
        mine = [e for e in events if e.rank == st]
        busy = [(float(e.start_s), float(e.end_s)) for e in mine if e.kind in compute_kinds]
        last_b = max((float(e.end_s) for e in mine if e.kind in ("forward", "backward", "recompute")), default=0.0)
        for kind in compute_kinds:
            add(kind, f"stage {st} compute", [(float(e.start_s), float(e.end_s), e.name) for e in mine
                                              if e.kind == kind and e.end_s > e.start_s], kind)
        idle = _subtract([(0.0, last_b)], busy)
        add("bubble", f"stage {st} compute", [(a, b, "bubble (stage idle)") for a, b in idle], "pipeline bubble")
        comm = [e for e in mine if e.kind not in compute_kinds]
        for kind in sorted({e.kind for e in comm}):
            add(kind, f"stage {st} communication",
                [(float(e.start_s), float(e.end_s), e.name) for e in comm if e.kind == kind and e.end_s > e.start_s],
                {"p2p": "point-to-point transfer", "allreduce": "all-reduce",
                 "reducescatter": "reduce-scatter", "allgather": "all-gather"}.get(kind, kind))
    if title is None:
        lay = rep.layout
        title = (f"{prediction.model} on {prediction.n_gpus} x {prediction.gpu}, {lay.describe()}: step "
                 f"{step * ms:.1f} ms, bubble {100 * rep.bubble_fraction:.1f} % of stage 0 (ideal "
                 f"{100 * rep.ideal_bubble_fraction:.1f} %)")
        if len(stages) < n:
            title += f"; stages {', '.join(map(str, stages))} of {n}"
    _layout(fig, title, barmode="overlay", bargap=0.25, height=200 + 45 * len(rows_order),
            xaxis=dict(title="time since step start (ms)", rangemode="tozero"),
            yaxis=dict(categoryorder="array", categoryarray=rows_order[::-1]))
    return fig


# ----------------------------------------------------------------------- scaling

def scaling_figure(data: Any, *, group_by: str | Sequence[str] | None = "link", metric: str | None = None,
                   title: str | None = None):
    """Throughput (left) and scaling efficiency (right) vs GPU count, one line per fabric.

    ``data``: sweep results over ``gpus`` (and ``link``), or a list of predictions.
    ``metric`` is ``tokens_per_s`` (default when every row has tokens) or
    ``samples_per_s``. The ideal line is N x the one-GPU throughput.
    """
    go = _go()
    from plotly.subplots import make_subplots

    rows = records(data, figure="scaling_figure")
    _require(rows, ("n_gpus", "samples_per_s", "scaling_efficiency", "single_gpu_samples_per_s"), "scaling_figure")
    if metric is None:
        metric = "tokens_per_s" if all(r.get("tokens_per_s") for r in rows) else "samples_per_s"
    if metric not in ("tokens_per_s", "samples_per_s"):
        raise ConfigError(f"scaling_figure: metric {metric!r} is not valid; choose tokens_per_s or samples_per_s")
    _require(rows, (metric,), "scaling_figure")
    per_sample = {"tokens_per_s": lambda r: r["tokens_per_sample"] or 0, "samples_per_s": lambda r: 1}[metric]
    unit = "tokens/s" if metric == "tokens_per_s" else "samples/s"
    keys = _group_keys(rows, group_by, exclude=("gpus", "n_gpus"))
    groups = _groups(rows, keys)
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.1,
                        subplot_titles=(f"throughput ({unit})", "scaling efficiency vs 1 GPU"))
    counts = sorted({int(r["n_gpus"]) for r in rows})
    ideals: dict[float, list[str]] = {}
    for i, (label, grp) in enumerate(groups.items()):
        grp = sorted(grp, key=lambda r: r["n_gpus"])
        color = _color(label, i)
        x = [int(r["n_gpus"]) for r in grp]
        hover = [[r["step_time_s"] * 1e3 if r.get("step_time_s") is not None else float("nan"),
                  (r.get("exposed_comm_s") or 0) * 1e3, 100 * r["scaling_efficiency"]] for r in grp]
        template = ("%{x} GPUs<br>%{y:,.4s} " + unit + "<br>step %{customdata[0]:.2f} ms, exposed comm "
                    "%{customdata[1]:.2f} ms<br>efficiency %{customdata[2]:.1f} %<extra>" + label + "</extra>")
        fig.add_trace(go.Scatter(x=x, y=[r[metric] for r in grp], mode="lines+markers", name=label,
                                 legendgroup=label, line=dict(color=color), customdata=hover,
                                 hovertemplate=template), row=1, col=1)
        fig.add_trace(go.Scatter(x=x, y=[100 * r["scaling_efficiency"] for r in grp], mode="lines+markers",
                                 name=label, legendgroup=label, showlegend=False, line=dict(color=color),
                                 customdata=hover, hovertemplate=template.replace("%{y:,.4s} " + unit, "%{y:.1f} %")),
                      row=1, col=2)
        # 9 significant digits: the one-GPU rate of 1 and of N GPUs may differ in the last bit.
        rates = {float(f'{r["single_gpu_samples_per_s"] * per_sample(r):.9g}') for r in grp}
        for rate in rates:
            ideals.setdefault(rate, []).append(label)
    for k, (rate, labels) in enumerate(sorted(ideals.items())):
        name = "ideal (N x one GPU)"
        if len(ideals) > 1:  # name each ideal line by what its groups share (e.g. the GPU)
            common = [part for part in labels[0].split(", ") if all(part in lab.split(", ") for lab in labels)]
            name = f"ideal ({', '.join(common) or f'{rate:,.4g} {unit} per GPU'})"
        fig.add_trace(go.Scatter(x=counts, y=[rate * c for c in counts], mode="lines", name=name,
                                 legendgroup="ideal", showlegend=True,
                                 line=dict(color="#555555", dash="dash", width=1),
                                 hovertemplate="%{x} GPUs: " + name + " %{y:,.4s} " + unit + "<extra></extra>"),
                      row=1, col=1)
    fig.add_trace(go.Scatter(x=counts, y=[100] * len(counts), mode="lines", name="ideal (100 %)",
                             legendgroup="ideal", showlegend=False, line=dict(color="#555555", dash="dash", width=1),
                             hoverinfo="skip"), row=1, col=2)
    if title is None:
        models = sorted({str(r.get("model")) for r in rows})
        title = f"Scaling of {', '.join(models)}: throughput and efficiency vs GPUs"
    _layout(fig, title, height=480)
    fig.update_xaxes(title_text="GPUs", **_gpu_ticks(counts))
    fig.update_yaxes(title_text=unit, type="log", row=1, col=1)
    fig.update_yaxes(title_text="efficiency (%)", range=[0, 105], row=1, col=2)
    return fig


def cost_figure(data: Any, *, group_by: str | Sequence[str] | None = "link", title: str | None = None):
    """Time-to-train (days, left) and cost (USD, right) vs GPU count, one line per fabric.

    ``data``: sweep results run with a token (or sample) budget.
    """
    go = _go()
    from plotly.subplots import make_subplots

    rows = records(data, figure="cost_figure")
    if any(r.get("cost_usd") is None for r in rows):
        raise ConfigError("cost_figure: the rows have no cost_usd; run the sweep with a budget "
                          "(tokens=... or samples=...)")
    _require(rows, ("n_gpus", "time_to_train_days"), "cost_figure")
    keys = _group_keys(rows, group_by, exclude=("gpus", "n_gpus"))
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.1,
                        subplot_titles=("time to train (days)", "cost (USD)"))
    for i, (label, grp) in enumerate(_groups(rows, keys).items()):
        grp = sorted(grp, key=lambda r: r["n_gpus"])
        color = _color(label, i)
        x = [int(r["n_gpus"]) for r in grp]
        custom = [[r["time_to_train_days"], r["cost_usd"], r.get("usd_per_gpu_hour") or float("nan"),
                   100 * r.get("scaling_efficiency", float("nan"))] for r in grp]
        hover = ("%{x} GPUs<br>%{customdata[0]:,.1f} days, $%{customdata[1]:,.0f}<br>"
                 "$%{customdata[2]:.2f}/GPU-hour, efficiency %{customdata[3]:.0f} %<extra>" + label + "</extra>")
        fig.add_trace(go.Scatter(x=x, y=[r["time_to_train_days"] for r in grp], mode="lines+markers", name=label,
                                 legendgroup=label, line=dict(color=color), customdata=custom,
                                 hovertemplate=hover), row=1, col=1)
        fig.add_trace(go.Scatter(x=x, y=[r["cost_usd"] for r in grp], mode="lines+markers", name=label,
                                 legendgroup=label, showlegend=False, line=dict(color=color), customdata=custom,
                                 hovertemplate=hover), row=1, col=2)
    if title is None:
        tokens, samples = rows[0].get("budget_tokens"), rows[0].get("budget_samples")

        budget = (f" {format_count(tokens)} tokens" if tokens else f" {format_count(samples)} samples"
                  if samples else "")
        title = f"Time and cost to train on{budget} vs GPUs" if budget else "Time and cost to train vs GPUs"
    _layout(fig, title, height=480)
    fig.update_xaxes(title_text="GPUs", **_gpu_ticks(r["n_gpus"] for r in rows))
    fig.update_yaxes(title_text="days", type="log", row=1, col=1)
    fig.update_yaxes(title_text="USD", type="log", row=1, col=2)
    return fig


# ------------------------------------------------------------------------ memory

def memory_figure(items: Sequence[tuple[str, Any]] | Mapping[str, Any], *, title: str | None = None):
    """Stacked memory per GPU for each ``(label, MemoryBreakdown)``, against capacity.

    A second element may also be a Prediction (its ``memory`` is used). Every
    ``*_bytes`` field of the breakdown other than ``capacity_bytes`` is one stacked
    category, so breakdowns of other strategies (ZeRO, FSDP) plug in as they are.
    """
    go = _go()
    pairs = list(items.items()) if isinstance(items, Mapping) else list(items)
    if not pairs:
        raise ConfigError("memory_figure: no items; give a list of (label, MemoryBreakdown)")
    breakdowns = []
    for k, pair in enumerate(pairs):
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2):
            raise ConfigError(f"memory_figure: item {k} is {pair!r}; expected a (label, MemoryBreakdown) pair")
        label, mem = pair
        mem = getattr(mem, "memory", mem)
        if not (dataclasses.is_dataclass(mem) and hasattr(mem, "capacity_bytes") and hasattr(mem, "total_bytes")):
            raise ConfigError(f"memory_figure: item {label!r} is {type(mem).__name__}; expected a MemoryBreakdown")
        breakdowns.append((str(label), mem))
    labels = [lab for lab, _ in breakdowns]
    if len(set(labels)) != len(labels):
        raise ConfigError(f"memory_figure: labels {labels!r} repeat; give each item its own label")
    categories: list[str] = []  # the breakdown's own categories, not their parts (BREAKDOWN_SUBPARTS)
    for _, mem in breakdowns:
        for f in dataclasses.fields(mem):
            if f.name.endswith("_bytes") and f.name != "capacity_bytes" and f.name not in BREAKDOWN_SUBPARTS \
                    and f.name not in categories:
                categories.append(f.name)
    fig = go.Figure()
    for i, cat in enumerate(categories):
        name = MEMORY_LABELS.get(cat, cat.removesuffix("_bytes").replace("_", " "))
        values = [getattr(mem, cat, 0.0) / _GB for _, mem in breakdowns]
        fig.add_trace(go.Bar(x=labels, y=values, name=name, marker_color=MEMORY_COLORS.get(cat, _PALETTE[i % 10]),
                             hovertemplate="%{x}<br>" + name + ": %{y:,.1f} GB<extra></extra>"))
    caps = [mem.capacity_bytes / _GB for _, mem in breakdowns]
    usable = [getattr(mem, "usable_bytes", mem.capacity_bytes) / _GB for _, mem in breakdowns]
    if len(set(caps)) == 1 and len(set(usable)) == 1:
        # Full-width lines (shapes), named in the legend through empty line traces.
        for y, name, dash, width, color in ((caps[0], "GPU capacity", "solid", 2, "black"),
                                            (usable[0], "usable (less allocator headroom)", "dash", 1.5, "#666666")):
            fig.add_hline(y=y, line=dict(color=color, width=width, dash=dash))
            fig.add_trace(go.Scatter(x=[None], y=[None], mode="lines", name=f"{name}: {y:,.0f} GB",
                                     line=dict(color=color, width=width, dash=dash), hoverinfo="skip"))
    else:
        for ys, name, color in ((caps, "GPU capacity", "black"), (usable, "usable (less allocator headroom)", "#666666")):
            fig.add_trace(go.Scatter(x=labels, y=ys, mode="markers", name=name,
                                     marker=dict(symbol="line-ew", size=60, color=color,
                                                 line=dict(width=3 if color == "black" else 2, color=color)),
                                     hovertemplate="%{x}<br>" + name + " %{y:,.0f} GB<extra></extra>"))
    top = max(max(mem.total_bytes / _GB for _, mem in breakdowns), max(caps))
    for label, mem in breakdowns:
        verdict = "fits" if mem.fits else "DOES NOT FIT"
        fig.add_annotation(x=label, y=mem.total_bytes / _GB, text=f"{mem.total_bytes / _GB:,.0f} GB<br>{verdict}",
                           showarrow=False, yshift=18, font=dict(color="#2CA02C" if mem.fits else "#D62728"))
    _layout(fig, title or "Memory per GPU by category, against the GPU's capacity", barmode="stack",
            height=520, yaxis=dict(title="GB per GPU (1 GB = 1e9 B)", range=[0, top * 1.2]),
            legend_traceorder="normal")
    return fig


# ----------------------------------------------------------------------- buckets

def bucket_figure(data: Any, *, group_by: str | Sequence[str] | None = None, title: str | None = None):
    """Step time (top) and communication (bottom) vs DDP ``bucket_cap_mb``.

    ``data``: sweep results over ``bucket_cap_mb``. Rows with the default cap (None:
    PyTorch's 25 MiB with a 1 MiB first bucket) are drawn as a dotted reference line.
    Small buckets pay a collective's latency many times; large ones start
    communicating late and hide less of it: the optimum sits in between.
    """
    go = _go()
    from plotly.subplots import make_subplots

    rows = records(data, figure="bucket_figure")
    _require(rows, ("bucket_cap_mb", "step_time_s", "comm_s", "exposed_comm_s", "n_buckets"), "bucket_figure")
    sized = [r for r in rows if r["bucket_cap_mb"] is not None]
    if not sized:
        raise ConfigError("bucket_figure: no row has a bucket_cap_mb; sweep bucket_cap_mb over a few values")
    keys = _group_keys(rows, group_by, exclude=("bucket_cap_mb",))
    for col in ("gpus", "link"):
        if col not in keys and len({r.get(col) for r in rows}) > 1:
            keys.append(col)
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08, row_heights=[0.6, 0.4],
                        subplot_titles=("step time", "communication per step: total (dashed) and exposed"))
    caps = sorted({r["bucket_cap_mb"] for r in sized})
    for i, (label, grp) in enumerate(_groups(rows, keys).items()):
        color = _PALETTE[i % len(_PALETTE)]
        pts = sorted((r for r in grp if r["bucket_cap_mb"] is not None), key=lambda r: r["bucket_cap_mb"])
        if not pts:
            continue
        x = [r["bucket_cap_mb"] for r in pts]
        custom = [[r["n_buckets"], r["comm_s"] * 1e3, r["exposed_comm_s"] * 1e3] for r in pts]
        fig.add_trace(go.Scatter(
            x=x, y=[r["step_time_s"] * 1e3 for r in pts], mode="lines+markers", name=label, legendgroup=label,
            line=dict(color=color), customdata=custom,
            hovertemplate="bucket_cap_mb %{x:g} MiB: %{customdata[0]} buckets<br>step %{y:.2f} ms<br>"
                          "communication %{customdata[1]:.2f} ms, exposed %{customdata[2]:.2f} ms<extra>"
                          + label + "</extra>"), row=1, col=1)
        best = min(pts, key=lambda r: r["step_time_s"])
        fig.add_trace(go.Scatter(
            x=[best["bucket_cap_mb"]], y=[best["step_time_s"] * 1e3], mode="markers", legendgroup=label,
            name=f"best: {best['bucket_cap_mb']:g} MiB", showlegend=True,
            marker=dict(symbol="star", size=14, color=color, line=dict(width=1, color="black")),
            hovertemplate="best %{x:g} MiB: %{y:.2f} ms<extra>" + label + "</extra>"), row=1, col=1)
        default = [r for r in grp if r["bucket_cap_mb"] is None]
        if default:
            d = default[0]["step_time_s"] * 1e3
            fig.add_trace(go.Scatter(x=[caps[0], caps[-1]], y=[d, d], mode="lines", legendgroup=label,
                                     name="PyTorch default (25 MiB, 1 MiB first)", showlegend=i == 0,
                                     line=dict(color=color, dash="dot", width=1),
                                     hovertemplate="default buckets: %{y:.2f} ms<extra>" + label + "</extra>"),
                          row=1, col=1)
        fig.add_trace(go.Scatter(x=x, y=[r["comm_s"] * 1e3 for r in pts], mode="lines", legendgroup=label,
                                 showlegend=False, name=f"{label} total", line=dict(color=color, dash="dash"),
                                 hovertemplate="%{x:g} MiB: total %{y:.2f} ms<extra>" + label + "</extra>"),
                      row=2, col=1)
        fig.add_trace(go.Scatter(x=x, y=[r["exposed_comm_s"] * 1e3 for r in pts], mode="lines+markers",
                                 legendgroup=label, showlegend=False, name=f"{label} exposed",
                                 line=dict(color=color),
                                 hovertemplate="%{x:g} MiB: exposed %{y:.2f} ms<extra>" + label + "</extra>"),
                      row=2, col=1)
    if title is None:
        models = sorted({str(r.get("model")) for r in rows})
        title = f"DDP bucket size: step time vs bucket_cap_mb ({', '.join(models)})"
    _layout(fig, title, height=620)
    fig.update_xaxes(type="log", tickmode="array", tickvals=caps, ticktext=[f"{c:g}" for c in caps])
    fig.update_xaxes(title_text="bucket_cap_mb (MiB, log scale)", row=2, col=1)
    fig.update_yaxes(title_text="ms", row=1, col=1)
    fig.update_yaxes(title_text="ms", rangemode="tozero", row=2, col=1)
    return fig
