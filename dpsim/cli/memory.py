"""``dpsim memory``: memory per GPU by category, the fits verdict and what would make it fit.
"""

from __future__ import annotations

from typing import Any

import typer

from dpsim.cli.app import _emit_json
from dpsim.cli.options import config_options
from dpsim.cli.panels import OUTPUT
from dpsim.predict.config import LAYOUT_FIELDS

MEMORY_FIELDS = ("gpus", "link", "topology_file", "gpus_per_node", "gpu", "model", "input_shape", "seq_len",
                 "micro_batch", "flash_attention", "activations", "loss_impl", "precision", "fp8", "optimizer", "strategy",
                 "grad_accum", "activation_checkpointing", "fsdp_unit", "fsdp_version", "fsdp_accumulate", "overlap",
                 "bucket_cap_mb", "recompute_every", "zero_impl", "zero_group") + LAYOUT_FIELDS
"""The ``PredictConfig`` fields memory depends on (``overlap``: DeepSpeed keeps one gradient buffer
without it; ``bucket_cap_mb``: the size of ZeRO-1/2's gradient buffers)."""


@config_options(MEMORY_FIELDS)
def memory(
    flags: dict[str, Any],
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of a table.",
                                 rich_help_panel=OUTPUT),
) -> None:
    """Memory per GPU by category for a strategy, the fits / OOM verdict and what would make it fit."""
    from dpsim.memory import HEADROOM_FRACTION
    from dpsim.predict.config import PredictConfig
    from dpsim.predict.run import memory_report
    from dpsim.strategies.registry import STRATEGIES

    report = memory_report(PredictConfig(**flags))
    if as_json:
        _emit_json(report.to_dict())
        return
    config, mem, advice = report.config, report.memory, report.advice
    rows = [("weights", mem.weights_bytes), ("gradients", mem.gradients_bytes),
            ("optimizer state", mem.optimizer_bytes), ("activations", mem.activations_bytes),
            ("communication buffers", mem.comm_buffers_bytes), ("framework overhead", mem.overhead_bytes)]
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from dpsim.units import format_bytes
    ex, wl = config.execution, config.workload
    title = (f"{report.model} ({report.param_count / 1e9:.3g} B params), {config.parallelism.strategy} on "
             f"{report.n_gpus} x {report.gpu}, {ex.precision}{f' (fp8 {ex.fp8})' if ex.fp8 else ''} + {wl.optimizer}, "
             f"micro-batch {wl.micro_batch}"
             + (f" x {wl.grad_accum}" if wl.grad_accum > 1 else "")
             + (f", {ex.checkpointing.describe()}" if ex.checkpointing.active else ""))
    table = Table(title=escape(title), header_style="bold")
    table.add_column("memory per GPU")
    table.add_column("size", justify="right")
    for name, value in rows:
        table.add_row(name, format_bytes(value))
    verdict = "[green]fits[/green]" if mem.fits else "[bold red]DOES NOT FIT (OOM)[/bold red]"
    table.add_row("total", f"{format_bytes(mem.total_bytes)}: {verdict}")
    table.add_row("usable", f"{format_bytes(mem.usable_bytes)} ({format_bytes(mem.capacity_bytes)} less "
                            f"{HEADROOM_FRACTION:.0%} allocator headroom)")
    console = Console()
    console.print(table)
    if config.parallelism.layout_active:
        from dpsim.predict.layout import layout_of
        console.print(f"layout: {escape(layout_of(config).describe())} (the fullest stage's GPU)")
    else:
        console.print(f"{escape(config.parallelism.strategy)}: {escape(STRATEGIES[config.parallelism.strategy])}")
    if not mem.fits:
        console.print(f"what would fit: {escape(mem.suggestion or advice.message)}")
