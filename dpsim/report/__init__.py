"""Presentation: rich tables, plotly figures and the standalone HTML report.

- :mod:`~dpsim.report.text` — a prediction's tables, nccl-tests-style collective tables
- :mod:`~dpsim.report.links` / :mod:`~dpsim.report.variability` — link-utilisation and variability tables
- :mod:`~dpsim.report.plots` (on :mod:`~dpsim.report.figure_base`) — timeline, scaling, memory, bucket, cost figures
- :mod:`~dpsim.report.html` — ``dpsim report``: one self-contained HTML file
- :mod:`~dpsim.report.mix_plots` / :mod:`~dpsim.report.mix_html` — a job mix's figures and ``dpsim mix --html`` page
"""

from __future__ import annotations

from dpsim.lazy import lazy_exports

_EXPORTS = {
    "print_prediction": "dpsim.report.text",
    "prediction_tables": "dpsim.report.text",
    "write_report": "dpsim.report.html",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
