"""What every figure shares: colours, grouping of sweep rows into lines, plotly layout, HTML output.

plotly is imported inside the functions (:func:`_go`) so ``dpsim predict`` never pays for it.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping, Sequence

from dpsim.errors import ConfigError
from dpsim.files import check_output_path, write_text_atomic
from dpsim.plan.sweep import prediction_record
from dpsim.predict.result import Prediction

KIND_COLORS = {
    "forward": "#4C78A8",
    "backward": "#F58518",
    "recompute": "#B279A2",
    "optimizer": "#54A24B",
    "allreduce": "#7B4FC9",
    "reducescatter": "#9D755D",
    "allgather": "#E45756",
    "exposed": "#D62728",
}
"""Colour of each trace-event kind in timelines."""

LINK_COLORS = {"nvlink": "#54A24B", "infiniband": "#4C78A8", "ethernet": "#F58518", "pcie": "#B279A2"}
"""Colour of each topology preset in scaling figures."""

_PALETTE = ["#4C78A8", "#F58518", "#54A24B", "#E45756", "#72B7B2", "#B279A2", "#FF9DA6", "#9D755D",
            "#EECA3B", "#BAB0AC"]
_TEMPLATE = "plotly_white"
_GB = 1e9

MEMORY_LABELS = {
    "weights_bytes": "weights",
    "gradients_bytes": "gradients",
    "optimizer_bytes": "optimizer state",
    "activations_bytes": "activations",
    "comm_buffers_bytes": "comm buffers",
    "overhead_bytes": "framework overhead",
}
MEMORY_COLORS = {"weights_bytes": "#4C78A8", "gradients_bytes": "#F58518", "optimizer_bytes": "#E45756",
                 "activations_bytes": "#72B7B2", "comm_buffers_bytes": "#B279A2", "overhead_bytes": "#BAB0AC"}

GROUP_CANDIDATES = ("model", "gpu", "micro_batch", "seq_len", "precision", "optimizer", "bucket_cap_mb",
                    "overlap", "gpus_per_node", "topology_file", "calibration", "strategy")
"""Columns that split lines automatically when they vary within the data."""


def _go():
    try:
        import plotly.graph_objects as go
    except ImportError:  # pragma: no cover - plotly is a core dependency
        raise ConfigError("figures need plotly; pip install plotly") from None
    return go


# ----------------------------------------------------------------------- helpers

def _is_missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v))


def records(data: Any, *, figure: str = "figure") -> list[dict[str, Any]]:
    """Rows of a sweep DataFrame, a list of dicts, or a list of Predictions, as dicts."""

    if data is None:
        raise ConfigError(f"{figure}: no data; give a sweep DataFrame, rows or predictions")
    if hasattr(data, "to_dict") and hasattr(data, "columns"):  # a pandas DataFrame
        rows = data.to_dict(orient="records")
    elif isinstance(data, (Prediction, Mapping)):
        rows = [data]
    else:
        rows = list(data)
    out = []
    for row in rows:
        if isinstance(row, Prediction):

            row = prediction_record(row)
        elif not isinstance(row, Mapping):
            raise ConfigError(f"{figure}: a row is {type(row).__name__}; expected a dict, a DataFrame row "
                              f"or a Prediction")
        out.append({k: (None if _is_missing(v) else v) for k, v in row.items()})
    if not out:
        raise ConfigError(f"{figure}: the data has no rows")
    if any("error" in r and r["error"] for r in out):
        out = [r for r in out if not r.get("error")]
        if not out:
            raise ConfigError(f"{figure}: every row has an error")
    return out


def _require(rows: list[dict], columns: Sequence[str], figure: str) -> None:
    for col in columns:
        if any(col not in r for r in rows):
            raise ConfigError(f"{figure}: the rows have no {col!r} column; give sweep results or predictions")


def _group_keys(rows: list[dict], group_by: str | Sequence[str] | None, exclude: Sequence[str]) -> list[str]:
    if isinstance(group_by, str):
        keys = [group_by]
    elif group_by is None:
        keys = []
    else:
        keys = list(group_by)
    for col in GROUP_CANDIDATES:
        if col in keys or col in exclude:
            continue
        values = {repr(r.get(col)) for r in rows}
        if len(values) > 1:
            keys.append(col)
    return keys


def _stem(path: Any) -> str:
    """A file name without directories or extension (profile and topology labels)."""
    from pathlib import PurePath

    return PurePath(str(path).replace("\\", "/")).stem


def _label(row: dict, keys: Sequence[str]) -> str:
    parts = []
    for k in keys:
        v = row.get(k)
        if k in ("link", "model", "gpu", "precision", "optimizer", "strategy"):
            parts.append(str(v))
        elif k == "topology_file":
            parts.append(_stem(v) if v else "preset")
        elif k == "calibration":
            parts.append(f"calibrated: {_stem(v)}" if v else "uncalibrated")
        elif k == "overlap":
            parts.append("overlap" if v else "no overlap")
        elif k == "bucket_cap_mb":
            parts.append("default buckets" if v is None else f"{v:g} MiB buckets")
        elif k == "micro_batch":
            parts.append(f"mb {v}")
        elif k in ("gpus", "n_gpus"):
            parts.append(f"{v} GPUs")
        else:
            parts.append(f"{k}={v}")
    if not parts:  # nothing varies: describe the job
        parts = [str(row.get("model", "")), f"{row.get('n_gpus', row.get('gpus'))} GPUs", str(row.get("link", ""))]
    return ", ".join(p for p in parts if p and p != "None")


def _groups(rows: list[dict], keys: Sequence[str]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in rows:
        out.setdefault(_label(r, keys), []).append(r)
    return out


def _color(label: str, index: int) -> str:
    first = label.split(",")[0].strip()
    return LINK_COLORS.get(first, _PALETTE[index % len(_PALETTE)])


def _layout(fig, title: str, **kwargs: Any) -> None:
    fig.update_layout(template=_TEMPLATE, title=dict(text=title, x=0.01, xanchor="left"),
                      legend=dict(orientation="h", yanchor="bottom", y=-0.3, x=0),
                      margin=dict(l=70, r=30, t=70, b=90), **kwargs)


def _gpu_ticks(counts: Iterable[int]) -> dict:
    values = sorted({int(c) for c in counts})
    return dict(type="log", tickmode="array", tickvals=values, ticktext=[str(v) for v in values])


# ------------------------------------------------------------------------ output

def figure_html(fig, *, full_html: bool = True, div_id: str | None = None) -> str:
    """A figure as HTML with plotly.js inlined (no CDN) when ``full_html``."""
    return fig.to_html(full_html=full_html, include_plotlyjs=True if full_html else False, div_id=div_id,
                       config={"displaylogo": False, "responsive": True})


def write_figure_html(fig, path) -> None:
    """Write one figure as a standalone HTML file that opens offline."""

    write_text_atomic(check_output_path(path, "--timeline"), figure_html(fig), flag="--timeline")
