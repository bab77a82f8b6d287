"""``dpsim memory``: memory per GPU by category, the fits verdict and what would make it fit.
"""

from __future__ import annotations

from typing import Any

import typer

from dpsim.cli.app import _emit_json
from dpsim.cli.options import ALL_FIELDS, config_options
from dpsim.cli.panels import OUTPUT

MEMORY_FIELDS = ALL_FIELDS
"""Every ``PredictConfig`` field, as ``predict`` takes them: the subset memory had (the layout
fields and 26 others) left out fields that set the memory per rank (``--mtp-depth``'s extra blocks,
the ``--moe-*`` options' capacity and dispatch, ``--cp``, ``--offload``, ``--compile``,
``--attention-kernel``, ``--gradient-as-bucket-view``, ``--calibration``'s defaults), so ``memory``
refused flags under which ``predict`` reported its memory section for the same job. A field that
cannot change memory (``--power-cap-w``, ``--jobs``, ``--steps``, ``--algo``...) is accepted and
ignored, as ``predict``'s memory section ignores it, except that a power cap ``predict`` refuses is
refused here too (:func:`~dpsim.predict.run.memory_report`). The config is built by ``predict``'s
own :func:`~dpsim.cli.predict.predict_config`."""


@config_options(MEMORY_FIELDS)
def memory(
    flags: dict[str, Any],
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of a table.",
                                 rich_help_panel=OUTPUT),
) -> None:
    """Memory per GPU by category for a strategy, the fits / OOM verdict and what would make it fit.

    Takes predict's command line as it is: flags that only time the step (--algo, --jobs, --steps...) are ignored.
    """
    from dpsim.memory import HEADROOM_FRACTION, with_subpart_rows
    from dpsim.cli.predict import predict_config
    from dpsim.predict.run import memory_report
    from dpsim.strategies.registry import STRATEGIES

    report = memory_report(predict_config(flags))
    if as_json:
        _emit_json(report.to_dict())
        return
    config, mem, advice = report.config, report.memory, report.advice
    rows = [("weights", mem.weights_bytes), ("gradients", mem.gradients_bytes),
            ("optimizer state", mem.optimizer_bytes), ("activations", mem.activations_bytes),
            ("communication buffers", mem.comm_buffers_bytes), ("framework overhead", mem.overhead_bytes)]
    # The FP8 parts, where there are any: FP8 primary weights (--fp8-params), TE's FP8 weight copies, FP8 copies
    # of the linears' inputs.
    rows = with_subpart_rows(rows, mem)
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from dpsim import wording
    from dpsim.units import format_bytes
    ex, wl = config.execution, config.workload
    title = (f"{report.model} ({wording.param_count(report.param_count)}), {config.parallelism.strategy} on "
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
