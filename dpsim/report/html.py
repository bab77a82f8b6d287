"""A standalone HTML report of one prediction: tables and plotly figures.

``dpsim report [predict flags] -o report.html`` writes one file that opens offline:
plotly.js is inlined once (``plotly.offline.get_plotlyjs()``, about 4.8 MB), no CDN, no
other file. It holds the prediction's tables (the same rows ``dpsim predict`` prints),
the step timeline, scaling curves of the same job on each fabric, memory per GPU
against capacity, a DDP bucket-size sweep and, given a budget, time and cost to train.
"""

from __future__ import annotations

import dataclasses
import html
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from dpsim.errors import ConfigError, DpsimError
from dpsim.files import check_output_path, write_text_atomic
from dpsim.plan.cost import (
    GPU_HOUR_PRICES,
    check_price_override,
    format_count,
    gpu_hour_price,
    prediction_cost,
)
from dpsim.plan.grid import SweepSpec
from dpsim.plan.sweep import sweep_records
from dpsim.predict.extrapolate import full_simulation
from dpsim.predict.resolve import resolve
from dpsim.predict.run import predict, refuse_past_full_path, resolve_topology
from dpsim.profile.once import reads_profiles_once
from dpsim.report import plots
from dpsim.report.layout import layout_tables
from dpsim.report.text import prediction_tables
from dpsim.strategies.registry import STRATEGIES
from dpsim.units import format_number, format_seconds
from dpsim.workload.precision import PRECISIONS

FABRICS = ("nvlink", "infiniband", "ethernet")
"""Presets compared in the report's scaling figure (plus the job's own)."""

BUCKET_CAPS_MB = (1, 2, 5, 10, 25, 50, 100, 200, 400, 1000)
"""``bucket_cap_mb`` values of the report's bucket sweep (MiB)."""



def scaling_gpu_counts(n_gpus: int, gpus_per_node: int, limit: int = 8192) -> list[int]:
    """GPU counts for a scaling curve around ``n_gpus``: 1, 2, 4, ... within a node, then
    1, 2, 4, ... whole nodes up to 4 x ``n_gpus`` (at least 8 nodes), and ``n_gpus``."""
    top = min(max(4 * n_gpus, 8 * gpus_per_node), limit)
    counts = {n_gpus}
    c = 1
    while c < gpus_per_node:
        counts.add(c)
        c *= 2
    c = gpus_per_node
    while c <= top:
        counts.add(c)
        c *= 2
    return sorted(counts)


@dataclass
class ReportData:
    """Everything a report shows."""

    prediction: Any
    """The :class:`~dpsim.predict.Prediction`."""
    scaling_rows: list[dict] = field(default_factory=list)
    """Sweep rows over GPUs x fabrics."""
    bucket_rows: list[dict] = field(default_factory=list)
    """Sweep rows over ``bucket_cap_mb``."""
    memory_items: list[tuple[str, Any]] = field(default_factory=list)
    """(label, MemoryBreakdown) pairs."""
    cost: Any = None
    """A :class:`~dpsim.cost.TrainingCost`, given a budget."""
    price: dict | None = None
    """``usd_per_gpu_hour`` and ``source`` of the price used."""


def memory_items(config) -> list[tuple[str, Any]]:
    """Memory breakdowns to compare for ``config``: one per sharding strategy (DDP, ZeRO,
    FSDP) when dpsim models them, else DDP at each precision. Each entry is (label,
    MemoryBreakdown), the input of :func:`dpsim.plots.memory_figure`."""

    items = []
    for name in STRATEGIES:
        try:
            memory = predict(dataclasses.replace(config, strategy=name)).memory
        except DpsimError:  # e.g. a hybrid strategy on a single node
            continue
        items.append((name + (" (this job)" if name == config.parallelism.strategy else ""), memory))
    if items:
        return items

    order = [config.execution.precision] + [p for p in PRECISIONS if p != config.execution.precision]
    return [(f"DDP, {name}" + (" (this job)" if name == config.execution.precision else ""),
             predict(dataclasses.replace(config, precision=name)).memory) for name in order]


@reads_profiles_once
def collect(config, *, tokens: float | str | None = None, samples: float | str | None = None,
            gpu_hour_usd=None, scaling_gpus: Sequence[int] | None = None,
            fabrics: Sequence[str] = FABRICS) -> ReportData:
    """Run the prediction and the small sweeps a report shows."""

    # The timeline draws every event of the step: every micro-batch simulated (dpsim.predict.extrapolate), within
    # the full path's limit; the other predictions of the page may be extrapolated.
    refuse_past_full_path(resolve(config).config, "the report's step timeline draws every event of the step")
    with full_simulation():
        prediction = predict(config)
    config = prediction.config  # with the calibration profile's defaults (dpsim.predict.resolve)
    topology = resolve_topology(config)
    base = config.settings()
    base["gpu"] = prediction.gpu
    gpn = topology.spec.node.gpus_per_node
    counts = sorted(set(scaling_gpus)) if scaling_gpus else scaling_gpu_counts(prediction.n_gpus, gpn)
    if config.parallelism.layout_active:  # a tensor/pipeline layout scales by data-parallel replicas
        shard = config.parallelism.tp * config.parallelism.cp * config.parallelism.pp
        if scaling_gpus and any(n % shard for n in counts):
            # The user's own counts were dropped in silence (the figure lost them, or showed only this job).
            bad = next(n for n in counts if n % shard)
            raise ConfigError(f"--scaling-gpus: {bad} is not a multiple of --tp x --cp x --pp = {shard}, the GPUs of "
                              f"one data-parallel replica; give multiples of {shard}")
        counts = [n for n in counts if n % shard == 0] or [prediction.n_gpus]
        base["dp"] = None
    if config.cluster.topology_file:
        links = [config.cluster.link]
    else:
        links = [config.cluster.link] + [f for f in fabrics if f != config.cluster.link]
    budget = dict(tokens=tokens, samples=samples, gpu_hour_usd=gpu_hour_usd)
    if prediction.tokens_per_s is None and tokens is not None:
        raise ConfigError("--tokens: this model has no tokens (an image model); give a sample budget (--samples)")
    grid = {k: [v] for k, v in base.items()}
    grid.update(gpus=counts, link=links)
    records = sweep_records(SweepSpec.from_grid(grid, **budget), skip_invalid=True)
    if scaling_gpus:
        # Counts the user gave that this job cannot run on were dropped in silence (--scaling-gpus 12 on
        # 8-GPU servers: a report without them); the other fabrics' points may still fail and be left out.
        bad = next((r for r in records if r["error"] and r["link"] == config.cluster.link), None)
        if bad is not None:
            raise ConfigError(f"--scaling-gpus: {bad['gpus']} cannot be predicted for this job: {bad['error']}")
    scaling = [r for r in records if not r["error"]]
    buckets: list[dict] = []
    if config.parallelism.strategy == "ddp" and not config.parallelism.layout_active:  # bucket_cap_mb is DDP's knob
        grid = {k: [v] for k, v in base.items()}
        grid["bucket_cap_mb"] = [None, *BUCKET_CAPS_MB]
        buckets = sweep_records(SweepSpec.from_grid(grid))
    overrides = check_price_override(gpu_hour_usd)
    price = {"usd_per_gpu_hour": gpu_hour_price(prediction.gpu, overrides),
             "source": ("your override" if overrides is not None and (
                 not isinstance(overrides, dict) or prediction.gpu in overrides)
                 else GPU_HOUR_PRICES[prediction.gpu].source)}
    cost = None
    if tokens is not None or samples is not None:
        cost = prediction_cost(prediction, tokens=tokens, samples=samples, gpu_hour_usd=gpu_hour_usd)
    return ReportData(prediction=prediction, scaling_rows=scaling, bucket_rows=buckets,
                      memory_items=memory_items(config), cost=cost, price=price)


# --------------------------------------------------------------------------- HTML

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 0; color: #222;
       background: #fafafa; }
main { max-width: 1200px; margin: 0 auto; padding: 24px 32px 48px; }
h1 { font-size: 1.6em; margin: 0.2em 0; }
h2 { font-size: 1.25em; margin-top: 2em; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
.sub { color: #555; margin-bottom: 1.2em; }
.cards { display: flex; flex-wrap: wrap; gap: 12px; margin: 16px 0; }
.card { background: white; border: 1px solid #e3e3e3; border-radius: 8px; padding: 10px 16px; min-width: 150px; }
.card .v { font-size: 1.35em; font-weight: 600; }
.card .k { color: #666; font-size: 0.85em; }
.bad { color: #c62828; } .good { color: #2e7d32; }
.tables { display: flex; flex-wrap: wrap; gap: 24px; align-items: flex-start; }
table { border-collapse: collapse; background: white; font-size: 0.92em; }
caption { text-align: left; font-weight: 600; padding: 4px 0; max-width: 560px; }
th, td { border: 1px solid #e0e0e0; padding: 4px 10px; }
th { background: #f3f3f3; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.src { font-size: 0.85em; color: #555; max-width: 360px; }
.fig { background: white; border: 1px solid #e3e3e3; border-radius: 8px; padding: 8px; margin: 8px 0; }
.note { color: #555; font-size: 0.92em; max-width: 900px; }
details pre { background: white; border: 1px solid #e3e3e3; padding: 8px; overflow: auto; font-size: 0.8em; }
"""


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("dpsim")
    except PackageNotFoundError:
        return "(not installed)"


def _plain(cell: Any) -> str:
    from rich.text import Text

    if isinstance(cell, str):
        return Text.from_markup(cell).plain
    return getattr(cell, "plain", str(cell))


def rich_table_html(table) -> str:
    """A rich ``Table`` (as ``dpsim predict`` prints it) as an HTML table."""
    columns = table.columns
    cells = [[_plain(c) for c in col.cells] for col in columns]
    n_rows = max((len(c) for c in cells), default=0)
    out = ["<table>"]
    if table.title:
        out.append(f"<caption>{html.escape(_plain(table.title))}</caption>")
    out.append("<tr>" + "".join(f"<th>{html.escape(_plain(col.header))}</th>" for col in columns) + "</tr>")
    for i in range(n_rows):
        row = []
        for j, col in enumerate(columns):
            text = cells[j][i] if i < len(cells[j]) else ""
            cls = ' class="num"' if col.justify == "right" else ""
            if "DOES NOT FIT" in text:
                cls = ' class="num bad"'
            row.append(f"<td{cls}>{html.escape(text)}</td>")
        out.append("<tr>" + "".join(row) + "</tr>")
    out.append("</table>")
    return "\n".join(out)


def _kv_table(title: str, rows: Sequence[tuple[str, str]], wide_last: bool = False) -> str:
    cells = []
    for i, (k, v) in enumerate(rows):
        cls = "src" if wide_last and i == len(rows) - 1 else "num"
        cells.append(f"<tr><th>{html.escape(k)}</th><td class=\"{cls}\">{html.escape(v)}</td></tr>")
    return f"<table class=\"kv\"><caption>{html.escape(title)}</caption>{''.join(cells)}</table>"


def _card(key: str, value: str, cls: str = "") -> str:
    return (f'<div class="card"><div class="v {cls}">{html.escape(value)}</div>'
            f'<div class="k">{html.escape(key)}</div></div>')


def _fig_div(fig, div_id: str) -> str:
    return '<div class="fig">' + fig.to_html(full_html=False, include_plotlyjs=False, div_id=div_id,
                                              config={"displaylogo": False, "responsive": True}) + "</div>"


def _json_safe(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    return obj


def figures(data: ReportData) -> dict[str, Any]:
    """The report's plotly figures by id."""

    figs = {"timeline": plots.timeline_figure(data.prediction)}
    if data.scaling_rows:
        figs["scaling"] = plots.scaling_figure(data.scaling_rows)
    if data.memory_items:
        figs["memory"] = plots.memory_figure(data.memory_items, title=(
            f"Memory per GPU: {data.prediction.model}, micro-batch {data.prediction.config.workload.micro_batch}, "
            f"on {data.prediction.gpu}"))
    if data.bucket_rows:
        figs["buckets"] = plots.bucket_figure(data.bucket_rows)
    if data.cost is not None and data.scaling_rows and all(r.get("cost_usd") is not None for r in data.scaling_rows):
        figs["cost"] = plots.cost_figure(data.scaling_rows)
    return figs


def render(data: ReportData, *, title: str | None = None) -> str:
    """The report as one HTML document (plotly.js inlined)."""
    p = data.prediction
    cfg = p.config
    title = title or f"dpsim report: {p.model} on {p.n_gpus} x {p.gpu} [{p.topology}]"
    figs = figures(data)
    rate = (f"{format_number(p.tokens_per_s)} tokens/s" if p.tokens_per_s is not None
            else f"{format_number(p.samples_per_s, 1)} samples/s")
    cards = [
        _card("step time", format_seconds(p.step_time_s)),
        _card("throughput", rate),
        _card("scaling efficiency vs 1 GPU", f"{100 * p.scaling_efficiency:.1f} %",
              "good" if p.scaling_efficiency >= 0.9 else "bad" if p.scaling_efficiency < 0.7 else ""),
        _card("communication hidden", f"{100 * p.overlap_fraction:.0f} %"),
        _card("MFU", "n/a (CPU)" if p.mfu is None else f"{100 * p.mfu:.1f} %"),
        _card("memory per GPU (GB = 1e9 B)", ("fits" if p.memory.fits else "DOES NOT FIT")
              + f": {p.memory.total_bytes / 1e9:,.1f} of {p.memory.capacity_bytes / 1e9:,.0f} GB",
              "good" if p.memory.fits else "bad"),
    ]
    if data.cost is not None:
        cards.append(_card(f"time to train on {format_count(data.cost.budget)} {data.cost.budget_unit}",
                           f"{format_number(data.cost.time_days, 1)} days"))
        cards.append(_card("cost", f"${format_number(data.cost.cost_usd)}"))
    tables = [rich_table_html(t) for t in prediction_tables(p)]
    if p.layout is not None:
        tables += [rich_table_html(t) for t in layout_tables(p)]
    inputs = [(name, "default" if value is None else str(value)) for name, value in cfg.settings().items()]
    tables.append(_kv_table("inputs (PredictConfig)", inputs))
    if data.price is not None:
        cost_rows = [("price per GPU-hour", f"${data.price['usd_per_gpu_hour']:.3f}"),
                     ("cluster per hour", f"${format_number(data.price['usd_per_gpu_hour'] * p.n_gpus, 2)}")]
        if data.cost is not None:
            c = data.cost
            cost_rows += [("budget", f"{format_count(c.budget)} {c.budget_unit}"),
                          ("time to train", f"{format_number(c.time_days, 2)} days "
                                            f"({format_number(c.time_s / 3600, 1)} h)"),
                          ("GPU-hours", format_number(c.gpu_hours)), ("cost", f"${format_number(c.cost_usd)}")]
        cost_rows.append(("price source", data.price["source"]))
        tables.append(_kv_table("cost (steady-state steps only: no start-up, checkpoints or failures)", cost_rows,
                                wide_last=True))
    notes = {
        "timeline": "One steady-state step. Compute runs layer by layer (backward in reverse); each DDP bucket's "
                    "all-reduce starts on the communication stream once its last gradient is ready and the stream "
                    "is free. Red bars are communication no compute hides; the optimizer waits for every bucket.",
        "scaling": "The same job (model, micro-batch, precision, buckets) at other GPU counts and on each fabric "
                   "preset, with the job's GPU. Dashed: ideal linear scaling.",
        "memory": "Memory per GPU of this job under each strategy dpsim models (DDP keeps full weights, gradients "
                  "and optimizer state on every GPU; ZeRO and FSDP shard them). The black line is the GPU's "
                  "capacity, the dashed one what is usable after allocator headroom.",
        "buckets": "Step time vs DDP bucket_cap_mb for this job. Small buckets pay collective latency many times; "
                   "large ones start late and overlap less. Dotted: PyTorch's default (25 MiB, 1 MiB first bucket).",
        "cost": "Time and cost for the budget at each GPU count and fabric (default or overridden prices).",
    }
    headings = {"timeline": "Step timeline", "scaling": "Scaling across fabrics", "memory": "Memory per GPU",
                "buckets": "Bucket size", "cost": "Time and cost to train"}
    sections = []
    for key, fig in figs.items():
        sections.append(f"<h2>{headings[key]}</h2><p class=\"note\">{html.escape(notes[key])}</p>"
                        + _fig_div(fig, f"fig-{key}"))
    prediction_json = json.dumps(_json_safe(p.to_dict()), indent=1, allow_nan=False)
    return html_page(title, [
        f'<div class="sub">{html.escape(cfg.execution.precision)}, micro-batch {cfg.workload.micro_batch}, {p.n_nodes} '
        f'node{"s" if p.n_nodes > 1 else ""}; dpsim {html.escape(_version())}, '
        f"a discrete-event prediction (not a measurement).</div>",
        '<div class="cards">' + "".join(cards) + "</div>",
        '<h2>Prediction</h2><div class="tables">' + "".join(tables) + "</div>",
        *sections,
        f"<h2>Raw prediction (JSON, schema dpsim.prediction/1)</h2><details><summary>show</summary>"
        f"<pre>{html.escape(prediction_json)}</pre></details>"])


def html_page(title: str, body: Sequence[str]) -> str:
    """A standalone HTML document: the report's style, plotly.js inlined once, ``title`` as its heading,
    then ``body``'s parts."""
    from plotly.offline import get_plotlyjs

    return "\n".join([
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{html.escape(title)}</title>",
        f"<style>{_CSS}</style>",
        f'<script type="text/javascript">{get_plotlyjs()}</script>',
        "</head><body><main>",
        f"<h1>{html.escape(title)}</h1>",
        *body,
        "</main></body></html>",
    ]) + "\n"


def write_report(path: str | Path, config, **kwargs: Any) -> Path:
    """Predict ``config``, run the report's sweeps and write the HTML file (see :func:`collect`)."""
    path = check_output_path(path, "-o/--output", inputs=config.input_files())
    data = collect(config, **kwargs)
    write_text_atomic(path, render(data), flag="-o/--output")
    return path
