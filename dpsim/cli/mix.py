"""``dpsim mix``: a mix of different jobs on one cluster, each job's slowdown and what causes it.

Named in :data:`dpsim.cli.commands.COMMANDS`; the work is in :mod:`dpsim.mix`.
"""

from __future__ import annotations

from typing import Optional

import typer

from dpsim.cli.app import _emit_json
from dpsim.cli.panels import EXECUTION, OUTPUT
from dpsim.errors import ConfigError


def mix_command(
    file: str = typer.Argument(..., help="The mix: a YAML file (cluster, horizon, placement, jobs)."),
    sample_steps: Optional[int] = typer.Option(
        20, "--sample-steps", help="Steps each job runs between two arrivals/departures before the rest of that "
                                   "interval runs at the measured mean step time (0: simulate every step).",
        rich_help_panel=EXECUTION),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of tables.",
                                 rich_help_panel=OUTPUT),
    html: Optional[str] = typer.Option(
        None, "--html", help="Also write one standalone HTML page: jobs on servers over time (failures marked), "
                             "slowdown per job, hot links.", rich_help_panel=OUTPUT),
) -> None:
    """Run jobs that differ in model, size, placement and start time on one cluster; their
    collectives share links max-min as they overlap. Prints each job's step time, its slowdown
    against running alone on the same servers, the links that slow it, and cluster utilisation."""
    from dpsim.mix import load_mix

    if sample_steps is None or sample_steps < 0:
        raise ConfigError(f"--sample-steps: {sample_steps} is not valid; expected an integer >= 0 (0: every step)")
    if html is not None:
        from dpsim.files import check_output_path
        check_output_path(html, "--html", inputs=(("mix", file),))  # before the work: never costs a simulation
    spec = load_mix(file)
    if html is not None:
        from dpsim.files import refuse_output_over_inputs
        refuse_output_over_inputs(html, "--html", _mix_inputs(spec))
    result = _simulate_with_progress(spec, sample_steps or None)
    if html is not None:
        from dpsim.report.mix_html import write_mix_report
        write_mix_report(html, result)
    if as_json:
        _emit_json({"schema": "dpsim.mix/1", **result.to_dict()})
        return
    from rich.console import Console
    from rich.table import Table

    outages = bool(result.link_outages)
    table = Table(title=f"{len(result.jobs)} jobs on {result.cluster_gpus:,} GPUs of {result.topology}, "
                        f"{result.horizon_s:,.0f} s of cluster time")
    columns = ("job", "model", "GPUs", "placement", "start s", "end s", "steps", "step s", "alone s", "slowdown",
               "bottleneck (shared with)")
    columns += ("failures", "lost s", "goodput") if spec.failures is not None else ()
    columns += ("fabric slowdown",) if outages else ()
    for col in columns:
        table.add_column(col, justify="left" if col in ("job", "model", "placement", "bottleneck (shared with)")
                         else "right")
    for j in result.jobs:
        b = j.bottlenecks[0] if j.bottlenecks else None
        where = f"{b.link[0]} -> {b.link[1]} {b.share:.0%} ({', '.join(b.with_jobs)})" if b else "-"
        table.add_row(j.name, j.model, f"{j.gpus:,}", j.placement, f"{j.start_s:,.0f}", f"{j.end_s:,.0f}",
                      f"{j.steps:,.0f}", f"{j.step_time_s:.4f}", f"{j.alone_step_time_s:.4f}",
                      f"{j.slowdown:.3f}", where,
                      *((f"{j.failures}", f"{j.lost_s:,.0f}", f"{j.goodput:.1%}") if spec.failures is not None else ()),
                      *((f"{j.fabric_slowdown:.3f}",) if outages else ()))
    console = Console()
    console.print(table)
    console.print(f"GPU allocation {result.gpu_allocation:.1%}, busy at alone speed {result.gpu_busy:.1%}; "
                  f"{result.events:,} events, {result.evaluations:,} max-min evaluations")
    if spec.failures is not None:
        console.print(f"{len(result.failures):,} failures; GPU time lost to them {result.gpu_lost_to_failures:.1%} "
                      f"(work thrown away, restarts, waits for repair), writing checkpoints "
                      f"{result.gpu_checkpointing:.1%}")
    if outages:
        console.print(f"{len(result.link_outages):,} switch cable outages (the jobs crossing them kept running on the "
                      f"cables left; fabric slowdown: step time over the same mix's without them)")


def _simulate_with_progress(spec, sample_steps):
    """The mix, with a transient progress line on stderr when it is a terminal: a contended day of
    hundreds of jobs crossing the network runs for minutes, and said nothing while it did."""
    from rich.console import Console

    from dpsim.mix import simulate_mix

    console = Console(stderr=True)
    if not console.is_terminal:
        return simulate_mix(spec, sample_steps=sample_steps)
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    horizon_s = spec.horizon_s
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[state]}"),
                  TimeElapsedColumn(), console=console, transient=True) as bar:
        # Simulated time against the horizon where there is one, else the jobs that have finished.
        total = horizon_s if horizon_s is not None else len(spec.jobs)
        task = bar.add_task("mix", total=total, state="")

        def tell(now_s: float, finished: int, jobs: int) -> None:
            done = now_s if horizon_s is not None else finished
            bar.update(task, completed=min(done, total),
                       state=f"{now_s:,.0f} s simulated, {finished:,} of {jobs:,} jobs done")

        return simulate_mix(spec, sample_steps=sample_steps, progress=tell)


def _mix_inputs(spec) -> list[tuple[str, str | None]]:
    """(what, path) of the files a mix read besides itself: its topology and the jobs' profiles and code."""
    out: list[tuple[str, str | None]] = [("cluster.topology", spec.topology_file)]
    for job in spec.jobs:
        out.extend((f"job {job.name}'s {flag.lstrip('-')}", path) for flag, path in _job_config_files(job))
    return out


def _job_config_files(job) -> tuple[tuple[str, str], ...]:
    settings = job.predict_fields
    out = []
    if settings.get("calibration"):
        out.append(("--calibration", str(settings["calibration"])))
    model = settings.get("model")
    if isinstance(model, str) and ".py" in model:
        out.append(("--model", model.split(".py", 1)[0] + ".py"))
    return tuple(out)
