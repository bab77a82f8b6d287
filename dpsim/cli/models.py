"""``dpsim models``: the model catalog.
"""

from __future__ import annotations

import typer

from dpsim.cli.app import _emit_json


def models(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List the built-in models with their parameter counts."""
    from dpsim.workload.catalog import get_model, list_models

    rows = []
    for name in list_models():
        m = get_model(name)
        rows.append({"name": name, "param_count": m.param_count, "tokens_per_sample": m.tokens_per_sample,
                     "forward_flops_per_sample": m.forward_flops_per_sample})
    if as_json:
        _emit_json({"schema": "dpsim.models/1", "models": rows})
        return
    from rich.console import Console
    from rich.table import Table
    table = Table(title="built-in models")
    for col in ("name", "parameters", "tokens/sample", "forward GFLOP/sample"):
        table.add_column(col, justify="right" if col != "name" else "left")
    for r in rows:
        table.add_row(r["name"], f"{r['param_count']:,}", str(r["tokens_per_sample"] or "-"),
                      f"{r['forward_flops_per_sample'] / 1e9:,.1f}")
    Console().print(table)
