"""``dpsim goodput``: failures, checkpoints, goodput and the best checkpoint interval.

Named in :data:`dpsim.cli.commands.COMMANDS` and imported only when it runs; the work is in
:mod:`dpsim.reliability`.
"""

from __future__ import annotations

import math
from dataclasses import replace

from typing import Any, Optional

import typer

from dpsim.cli.app import _emit_json
from dpsim.cli.checks import check_budget
from dpsim.cli.failures import CHECKPOINT_BANDWIDTH, MTBF_GPU, MTBF_LINK, MTBF_NODE, REPLACE, RESTART, failure_rates
from dpsim.cli.options import ALL_FIELDS, config_options
from dpsim.cli.panels import CHECKPOINTS, OUTPUT, VARIABILITY, WORKLOAD
from dpsim.cli.predict import (
    DEGRADE,
    HICCUP_RATE_PER_S,
    HICCUP_S,
    MC_SAMPLES,
    MC_STEPS,
    NOISE_CV,
    NOISE_DIST,
    SINGLE_GPU_SAMPLES_PER_S,
    STRAGGLER,
    _variability_from_flags,
    predict_config,
)
from dpsim.errors import ConfigError
from dpsim.limits import MAX_GOODPUT_RUNS

GOODPUT_FIELDS = ALL_FIELDS
"""Every ``PredictConfig`` field, as ``predict`` takes them: goodput multiplies the step ``predict``
predicts, so each field that sets that step sets goodput's throughput too. A subset let the two
commands cost different steps for the same job (no ``--calibration``, overlap, ``--algo/--proto``,
``--cp-comm``, offload, DDP or ``--zero-impl`` options here; issue 25 item 2), and the strategy and
optimizer also set what a checkpoint writes (sharded or one replica's, the optimizer's state).
None is left out: no field describes something outside the job goodput costs. ``--jobs``/
``--placement`` are the job's step while sharing the fabric with identical jobs (goodput then
simulates this job's own failures at that contended step); ``--steps`` is the steps predict
averages (a PowerSGD start iteration within them changes the mean)."""


@config_options(GOODPUT_FIELDS)
def goodput_command(
    flags: dict[str, Any],
    single_gpu_samples_per_s: Optional[float] = SINGLE_GPU_SAMPLES_PER_S,
    tokens: Optional[str] = typer.Option(
        None, "--tokens", help="Token budget, e.g. 300B, 1T (time = budget / predicted tokens/s).",
        rich_help_panel=WORKLOAD),
    duration: Optional[str] = typer.Option(
        None, "--duration", help="Failure-free training time instead of a token budget, e.g. 30d, 720h "
                                 "(default 30d when neither is given).", rich_help_panel=WORKLOAD),
    mtbf_gpu: Optional[str] = MTBF_GPU,
    mtbf_node: Optional[str] = MTBF_NODE,
    mtbf_link: Optional[str] = MTBF_LINK,
    checkpoint_interval: Optional[str] = typer.Option(
        None, "--checkpoint-interval", help="Training time between checkpoints, e.g. 30min "
                                            "(default: the interval that maximises expected goodput).",
        rich_help_panel=CHECKPOINTS),
    checkpoint_write: Optional[str] = typer.Option(
        None, "--checkpoint-write", help="Blocking checkpoint write time, e.g. 45s "
                                         "(default: the busiest node's share of the weights and optimizer "
                                         "state / --checkpoint-bandwidth).",
        rich_help_panel=CHECKPOINTS),
    checkpoint_bandwidth: str = CHECKPOINT_BANDWIDTH,
    restart: str = RESTART,
    replace_after: str = REPLACE,
    elastic: str = typer.Option("wait", "--elastic", help="After a failure: wait (for a replacement) or "
                                "shrink (continue on fewer nodes); both are always compared.",
                                rich_help_panel=VARIABILITY),
    min_nodes: int = typer.Option(1, "--min-nodes", help="shrink: wait for a replacement below this many nodes.",
                                  rich_help_panel=VARIABILITY),
    runs: int = typer.Option(100, "--runs", help=f"Monte-Carlo runs per configuration (1 to {MAX_GOODPUT_RUNS:,}).",
                             rich_help_panel=VARIABILITY),
    seed: int = typer.Option(0, "--seed", help="Seed (same seed, same failures; and the same step draws with "
                                               "--noise-cv, --straggler or --hiccup-*); 0 to 2**63-1.",
                             rich_help_panel=VARIABILITY),
    # predict's variability flags, its own definitions: the token budget is trained at the mean step they
    # give (each step waits for its slowest rank).
    noise_cv: Optional[float] = NOISE_CV,
    noise_dist: str = NOISE_DIST,
    straggler: Optional[list[str]] = STRAGGLER,
    degrade: Optional[list[str]] = DEGRADE,
    hiccup_rate_per_s: float = HICCUP_RATE_PER_S,
    hiccup_s: float = HICCUP_S,
    mc_samples: int = MC_SAMPLES,
    mc_steps: Optional[int] = MC_STEPS,
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of tables.",
                                 rich_help_panel=OUTPUT),
) -> None:
    """Simulate a training run through failures: wall time, goodput, lost work, best checkpoint interval."""
    from dpsim.limits import MAX_MC_STEPS, check_int
    from dpsim.plan.job import DEFAULT_CHECKPOINT_BANDWIDTH_BYTES_PER_S, VARIABILITY_NEEDS_TOKENS, goodput
    from dpsim.plan.reliability import parse_long_duration_s
    from dpsim.units import parse_bandwidth_bytes_per_s

    if tokens is not None and duration is not None:
        raise ConfigError("--tokens and --duration: give one amount of work, not both")
    if checkpoint_write is not None and checkpoint_bandwidth != CHECKPOINT_BANDWIDTH.default:
        # The write time wins and the bandwidth was never read (not even checked): say so, as a mix file does.
        raise ConfigError(f"--checkpoint-write and --checkpoint-bandwidth: {checkpoint_write!r} and "
                          f"{checkpoint_bandwidth!r}; give the write time or the bandwidth it follows from, not both")
    # A variability flag left at its default is not given: goodput's step is then predict's plain one, as before.
    varied = [flag for flag, value, default in (
        ("--noise-cv", noise_cv, None), ("--noise-dist", noise_dist, NOISE_DIST.default),
        ("--straggler", straggler or None, None), ("--degrade", degrade or None, None),
        ("--hiccup-rate-per-s", hiccup_rate_per_s, HICCUP_RATE_PER_S.default),
        ("--hiccup-s", hiccup_s, HICCUP_S.default), ("--mc-samples", mc_samples, MC_SAMPLES.default),
        ("--mc-steps", mc_steps, None)) if value != default]
    variability = None
    if varied:
        # Each value against its own rule first: --noise-cv -0.1 without --tokens was refused for the missing
        # budget, and the bad value came up only once the budget was given.
        variability = _variability_from_flags(noise_cv=noise_cv, noise_dist=noise_dist, straggler=straggler,
                                              degrade=degrade, hiccup_rate_per_s=hiccup_rate_per_s,
                                              hiccup_s=hiccup_s, seed=0, mc_samples=mc_samples)
    if mc_steps is not None:
        check_int(mc_steps, "--mc-steps", 1, MAX_MC_STEPS)
    if varied and tokens is None:
        raise ConfigError(VARIABILITY_NEEDS_TOKENS.format(flag=varied[0]))
    if varied:
        if variability.per_rank:  # the failures' seed draws the ranks' factors too (nothing to draw otherwise)
            variability = replace(variability, seed=seed)
    rates = failure_rates(mtbf_gpu, mtbf_node, mtbf_link)
    budget = None
    if tokens is not None:
        from dpsim.plan.cost import parse_count
        budget = check_budget(parse_count(tokens, "--tokens"), "--tokens")
    # predict's own config (its --single-gpu-samples-per-s included): the same flags, the same step.
    config = predict_config(flags, single_gpu_samples_per_s)
    report = goodput(
        config, tokens=budget,
        duration_s=None if duration is None else parse_long_duration_s(duration, "--duration"),
        rates=rates,
        checkpoint_interval_s=(None if checkpoint_interval is None
                               else parse_long_duration_s(checkpoint_interval, "--checkpoint-interval")),
        checkpoint_write_s=(None if checkpoint_write is None
                            else parse_long_duration_s(checkpoint_write, "--checkpoint-write")),
        checkpoint_bandwidth_bytes_per_s=(
            parse_bandwidth_bytes_per_s(checkpoint_bandwidth, "--checkpoint-bandwidth") if checkpoint_write is None
            else DEFAULT_CHECKPOINT_BANDWIDTH_BYTES_PER_S),
        restart_s=parse_long_duration_s(restart, "--restart"),
        replace_s=parse_long_duration_s(replace_after, "--replace"),
        policy=elastic, min_nodes=min_nodes, runs=runs, seed=seed, variability=variability, mc_steps=mc_steps)
    if as_json:
        _emit_json(report.to_dict())
    else:
        _print(report)


def _days(s: float) -> str:
    if not math.isfinite(s):
        # Every MTBF infinite (--mtbf-node none): no failure ever comes, and Young's and Daly's
        # intervals are infinite too; "inf d" was printed.
        return "unbounded (no failures)"
    if s >= 2 * 86400:
        return f"{s / 86400:.2f} d"
    if s >= 3600:
        return f"{s / 3600:.2f} h"
    if s >= 60:
        return f"{s / 60:.1f} min"
    return f"{s:.1f} s"


def _vs(fraction: float) -> str:
    return f"{100 * fraction:+.1f} %" if math.isfinite(fraction) else ""


def _print(report) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from dpsim.units import format_bytes_against

    out, headline, study, choice = report.to_dict(), report.result, report.interval_study, report.elastic
    console = Console()
    title = (f"{out['model']} on {out['n_gpus']} GPUs [{out['topology']}, {out['n_nodes']} nodes]: "
             f"job MTBF {_days(out['mtbf_s'])}, policy {headline.policy}, {headline.runs} runs")
    t = Table(title=escape(title), header_style="bold")
    t.add_column("run", justify="left")
    t.add_column("value", justify="right")
    lo, hi = headline.wall_ci_s
    rows = [
        ("failure-free time", _days(out["work_s"]) + (
            "" if out["work_model_error"] is None else
            f" (model error p10-p90 {_days(out['work_model_error']['low_s'])} .. "
            f"{_days(out['work_model_error']['high_s'])})")),
        ("checkpoint every / write / restart",
         f"{_days(out['checkpoint_interval_s'])} / {_days(out['checkpoint_write_s'])} / {_days(out['restart_s'])}"),
        ("wall-clock time", f"{_days(headline.wall_s)} (failure variability 95 % CI {_days(lo)} .. {_days(hi)})"),
        ("goodput", f"{100 * headline.goodput:.2f} % (95 % CI {100 * headline.goodput_ci[0]:.2f} .. "
                    f"{100 * headline.goodput_ci[1]:.2f} %)"),
        ("failures", f"{headline.failures:.1f}"),
        ("lost work", _days(headline.lost_s)),
        ("checkpointing / restarting / waiting",
         f"{_days(headline.checkpoint_s)} / {_days(headline.restart_s)} / {_days(headline.down_s)}"),
    ]
    if headline.expected_wall_s is not None:
        rows.append(("closed-form wall time", _days(headline.expected_wall_s)))
    for r in rows:
        t.add_row(*r)
    console.print(t)
    # The prediction's own warnings (--gpu of another generation than the --topology file's links), which
    # predict prints among its sources: goodput's throughput is that prediction's.
    for warning in report.prediction.provenance.warnings:
        console.print(f"[bold yellow]warning[/bold yellow]: {escape(warning)}")
    memory = report.prediction.memory
    if not memory.fits:  # the throughput above is of a job that could not start
        need, usable = format_bytes_against(memory.total_bytes, memory.usable_bytes)
        console.print(f"[bold red]does not fit[/bold red]: {need} per GPU of {usable} usable; dpsim memory with the "
                      f"same flags says what "
                      f"would fit (--strategy, --activation-checkpointing, --tp/--pp)")
    s = Table(title="checkpoint interval that maximises goodput (policy wait)", header_style="bold")
    for col in ("interval", "value", "vs optimum", "goodput (closed form)", "goodput (simulated)"):
        s.add_column(col, justify="right" if col != "interval" else "left")
    s.add_row("optimum (closed form, exact)", _days(study.model_optimum_s), "",
              f"{100 * study.expected_goodput_at_optimum:.3f} %", f"{100 * study.goodput_at_model_optimum:.3f} %")
    s.add_row("Young sqrt(2 delta M)", _days(study.young_s), _vs(study.young_vs_optimum),
              f"{100 * study.expected_goodput_at_young:.3f} %", f"{100 * study.goodput_at_young:.3f} %")
    s.add_row("Daly (higher order)", _days(study.daly_s), _vs(study.daly_vs_optimum),
              f"{100 * study.expected_goodput_at_daly:.3f} %", f"{100 * study.goodput_at_daly:.3f} %")
    gap, lo, hi = study.simulated_gap
    # Agreement: the paired interval contains 0, or the gap is under a hundredth of a point.
    verdict = "agrees" if lo <= 0 <= hi or abs(gap) < 1e-4 else "differs"
    s.add_row("best simulated (grid)", _days(study.simulated_optimum_s),
              f"{100 * (study.simulated_optimum_s / study.model_optimum_s - 1):+.1f} %", "",
              f"{100 * study.goodput_at_simulated_optimum:.3f} % ({verdict}: paired gap "
              f"{100 * gap:+.3f} pt, 95 % CI {100 * lo:+.3f} .. {100 * hi:+.3f})")
    console.print(s)
    e = Table(title=f"elastic choice (replacement after {_days(out['replace_s'])})", header_style="bold")
    for col in ("policy", "wall-clock", "goodput", "waiting", "on fewer nodes"):
        e.add_column(col, justify="right" if col != "policy" else "left")
    for name, g in choice.items():
        mark = " (better)" if name == out["elastic"]["better"] else ""
        e.add_row(name + mark, _days(g.wall_s), f"{100 * g.goodput:.2f} %", _days(g.down_s), _days(g.reduced_s))
    console.print(e)
