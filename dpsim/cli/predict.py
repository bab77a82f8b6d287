"""``dpsim predict``: one data-parallel training step, its throughput and memory.
"""

from __future__ import annotations

import math

from dataclasses import replace
from typing import Any, Optional

import typer

from dpsim.cli.app import _emit_json, loading
from dpsim.cli.checks import warn_other_gpu
from dpsim.cli.options import ALL_FIELDS, config_options
from dpsim.cli.panels import CALIBRATION, OUTPUT, VARIABILITY
from dpsim.errors import ConfigError
from dpsim.limits import (
    MAX_HICCUP_RATE_PER_S,
    MAX_HICCUP_S,
    MAX_MC_RANK_STEPS,
    MAX_MC_SAMPLE_STEPS,
    MAX_MC_SAMPLES,
    MAX_MC_STEPS,
    MAX_REPEATED_FLAGS,
    MAX_SAMPLES_PER_S,
    MAX_SINGLE_GPU_STEP_S,
    MAX_STRAGGLER_FACTOR,
    MIN_DEGRADED_FRACTION,
    MIN_SINGLE_GPU_STEP_S,
    MIN_STRAGGLER_FACTOR,
    check_number,
)
from dpsim.predict.config import PredictConfig

PREDICT_FIELDS = ALL_FIELDS
"""``predict`` (and ``report``) expose every ``PredictConfig`` field."""

SINGLE_GPU_SAMPLES_PER_S = typer.Option(
    None, "--single-gpu-samples-per-s",
    help="Your measured one-GPU throughput, instead of --single-gpu-step-ms: compute is scaled to it.",
    rich_help_panel=CALIBRATION)
"""An alternative input of ``single_gpu_step_s`` (converted with the micro-batch); ``report`` takes it too."""


# predict's variability flags, defined once: goodput takes the same options (the same flags, help and
# defaults), so that the two commands cannot drift apart.
NOISE_CV = typer.Option(
    None, "--noise-cv", help="Per-rank, per-step compute-time noise (coefficient of variation; 0.05 = 5 %). "
                             "Default: the step-time CV a --calibration profile recorded, else 0.",
    rich_help_panel=VARIABILITY)
NOISE_DIST = typer.Option("normal", "--noise-dist", help="Noise distribution: normal or lognormal.",
                          rich_help_panel=VARIABILITY)
STRAGGLER = typer.Option(
    None, "--straggler", help=f"A persistently slow node or GPU, e.g. node3:1.3x or gpu12:2x (repeatable); "
                              f"factors from {MIN_STRAGGLER_FACTOR:g} to {MAX_STRAGGLER_FACTOR:g}.",
    rich_help_panel=VARIABILITY)
DEGRADE = typer.Option(
    None, "--degrade", help=f"A link below capacity: node3.nic0:50%, node0.gpu2:50% or a link class "
                            f"such as ethernet:50% (capacity left, at least {100 * MIN_DEGRADED_FRACTION:g} %; "
                            f"repeatable).", rich_help_panel=VARIABILITY)
HICCUP_RATE_PER_S = typer.Option(
    0.0, "--hiccup-rate-per-s", help=f"Transient stalls per GPU per second (with --hiccup-s); at most "
                                     f"{MAX_HICCUP_RATE_PER_S:g}.", rich_help_panel=VARIABILITY)
HICCUP_S = typer.Option(0.0, "--hiccup-s", help=f"Duration of one stall, seconds; at most {MAX_HICCUP_S:g}.",
                        rich_help_panel=VARIABILITY)
MC_SAMPLES = typer.Option(
    10, "--mc-samples", help=f"Monte-Carlo samples (independent seeds) with noise or hiccups; at most "
                             f"{MAX_MC_SAMPLES:,}, and samples x steps x GPUs at most {MAX_MC_RANK_STEPS:.3g}.",
    rich_help_panel=VARIABILITY)
MC_STEPS = typer.Option(
    None, "--mc-steps", help=f"Steps per Monte-Carlo sample (with variability; default 50); at most "
                             f"{MAX_MC_STEPS:,}, and samples x steps at most {MAX_MC_SAMPLE_STEPS:,}.",
    rich_help_panel=VARIABILITY)


@config_options(PREDICT_FIELDS)
def predict(
    flags: dict[str, Any],
    single_gpu_samples_per_s: Optional[float] = SINGLE_GPU_SAMPLES_PER_S,
    links: bool = typer.Option(False, "--links", help="Also print per-link utilisation and the bottleneck links.",
                               rich_help_panel=OUTPUT),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of tables.",
                                 rich_help_panel=OUTPUT),
    timeline: Optional[str] = typer.Option(
        None, "--timeline", help="Also write the step's timeline to this standalone .html file (plotly).",
        rich_help_panel=OUTPUT),
    noise_cv: Optional[float] = NOISE_CV,
    noise_dist: str = NOISE_DIST,
    straggler: Optional[list[str]] = STRAGGLER,
    degrade: Optional[list[str]] = DEGRADE,
    hiccup_rate_per_s: float = HICCUP_RATE_PER_S,
    hiccup_s: float = HICCUP_S,
    seed: int = typer.Option(0, "--seed", help="Seed of the random draws (same seed, same numbers); 0 to 2**63-1.",
                             rich_help_panel=VARIABILITY),
    mc_samples: int = MC_SAMPLES,
    mc_steps: Optional[int] = MC_STEPS,
) -> None:
    """Predict the step time, throughput, scaling efficiency and memory of DDP training."""
    config = predict_config(flags, single_gpu_samples_per_s)
    if timeline is not None:
        from dpsim.files import check_output_path
        check_output_path(timeline, "--timeline", inputs=config.input_files())
    with loading():
        from dpsim.variability.run import predict_with_variability

    # The library resolves the profile's defaults (--noise-cv included) and takes the one-rank
    # fast path when nothing varies.
    variability = _variability_from_flags(noise_cv=noise_cv, noise_dist=noise_dist, straggler=straggler,
                                          degrade=degrade, hiccup_rate_per_s=hiccup_rate_per_s,
                                          hiccup_s=hiccup_s, seed=seed, mc_samples=mc_samples)
    if timeline is None:
        result, report = predict_with_variability(config, variability, steps=mc_steps)
    else:
        # The timeline draws every event of the step: every micro-batch simulated (dpsim.predict.extrapolate),
        # within the full path's limit.
        from dpsim.predict.extrapolate import full_simulation
        from dpsim.predict.resolve import resolve
        from dpsim.predict.run import refuse_past_full_path
        refuse_past_full_path(resolve(config).config, "--timeline draws every event of the step")
        with full_simulation():
            result, report = predict_with_variability(config, variability, steps=mc_steps)
    if timeline is not None:
        # Written before anything is printed: a write that fails (a full disk) is then the command's one
        # error line, never an error after a complete JSON document or tables on stdout.
        from dpsim.report.figure_base import write_figure_html
        from dpsim.report.plots import timeline_figure
        write_figure_html(timeline_figure(result), timeline)
    if as_json:
        out = result.to_dict()
        if report is not None:
            out["variability"] = report.to_dict()
        _emit_json(out)
    else:
        from dpsim.report.text import print_prediction
        print_prediction(result)
        if links:
            from dpsim.report.links import print_link_report
            print_link_report(result.links)
        if report is not None:
            from dpsim.report.variability import print_variability
            print_variability(report)


def predict_config(flags: dict[str, Any], single_gpu_samples_per_s: float | None = None) -> PredictConfig:
    """The PredictConfig of ``predict``'s config flags (``report`` shares it).

    ``flags``: the fields given on the command line (:func:`~dpsim.cli.options.config_options`).
    ``--single-gpu-samples-per-s`` becomes ``single_gpu_step_s`` at the config's micro-batch.
    With ``--calibration``, the fields left out stay ``None`` here: the library gives them the
    profile's values (:mod:`dpsim.predict.resolve`), for the CLI and the Python API alike.
    """
    config = PredictConfig(**flags)
    changes: dict[str, Any] = {}
    if single_gpu_samples_per_s is not None:
        if config.calibration.single_gpu_step_s is not None:
            raise ConfigError("--single-gpu-step-ms and --single-gpu-samples-per-s: give one, not both")
        check_number(single_gpu_samples_per_s, "--single-gpu-samples-per-s", 0, MAX_SAMPLES_PER_S, open_below=True)
        step_s = config.workload.micro_batch / single_gpu_samples_per_s
        if not MIN_SINGLE_GPU_STEP_S <= step_s <= MAX_SINGLE_GPU_STEP_S:
            # A subnormal rate overflows the division: the line said "is a inf s step".
            step = f"a {step_s:.3g} s step" if step_s < math.inf else f"a step over {MAX_SINGLE_GPU_STEP_S:g} s"
            raise ConfigError(f"--single-gpu-samples-per-s: {single_gpu_samples_per_s:g} at --micro-batch "
                              f"{config.workload.micro_batch} is {step}; expected a step from "
                              f"{MIN_SINGLE_GPU_STEP_S:g} s to {MAX_SINGLE_GPU_STEP_S:g} s")
        changes["single_gpu_step_s"] = step_s
    config = replace(config, **changes) if changes else config
    warn_other_gpu(config)  # once per command: every command with --calibration and --gpu builds its config here
    return config


def _variability_from_flags(*, noise_cv, noise_dist, straggler, degrade, hiccup_rate_per_s, hiccup_s, seed,
                            mc_samples):
    """The VariabilitySpec of ``predict``'s variability flags (``noise_cv`` ``None``: left out)."""
    from dpsim.network.degrade import parse_degradation
    from dpsim.variability.spec import VariabilitySpec, parse_straggler

    for flag, items in (("--straggler", straggler), ("--degrade", degrade)):
        if items and len(items) > MAX_REPEATED_FLAGS:
            raise ConfigError(f"{flag}: given {len(items):,} times; expected at most {MAX_REPEATED_FLAGS:,}")

    return VariabilitySpec(
        noise_cv=noise_cv, noise_distribution=noise_dist,
        stragglers=tuple(parse_straggler(x) for x in straggler or ()),
        degradations=tuple(parse_degradation(x) for x in degrade or ()),
        hiccup_rate_per_s=hiccup_rate_per_s, hiccup_s=hiccup_s, seed=seed, samples=mc_samples,
    )
