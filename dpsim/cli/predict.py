"""``dpsim predict``: one data-parallel training step, its throughput and memory.
"""

from __future__ import annotations

import math
from typing import Optional

import typer

from dpsim.cli.app import _emit_json
from dpsim.errors import ConfigError


def predict(
    gpus: int = typer.Option(64, "--gpus", help="Data-parallel GPUs."),
    link: str = typer.Option("ethernet", "--link", help="Topology preset: nvlink, infiniband, ethernet, pcie."),
    topology: Optional[str] = typer.Option(None, "--topology", help="A topology YAML file (instead of --link)."),
    gpus_per_node: Optional[int] = typer.Option(None, "--gpus-per-node", help="Override GPUs per node."),
    gpu: Optional[str] = typer.Option(None, "--gpu", help="Override the GPU: v100, a100, h100, h200, b200."),
    model: str = typer.Option(
        "gpt2-xl", "--model", help="Catalog model (dpsim models lists them), or a torch builder: "
                                   "path/file.py:fn or package.module:fn returning an nn.Module."),
    seq_len: Optional[int] = typer.Option(None, "--seq-len", help="Override the sequence length."),
    micro_batch: int = typer.Option(4, "--micro-batch", help="Samples per GPU per step."),
    flash_attention: bool = typer.Option(
        True, "--flash-attention/--no-flash-attention", help="Attention keeps no score matrices (activation memory)."),
    precision: str = typer.Option("bf16-mixed", "--precision", help="fp32, amp, bf16-mixed, fp16-mixed or bf16."),
    optimizer: str = typer.Option("adamw", "--optimizer", help="adamw, adam, sgd-momentum or sgd."),
    bucket_cap_mb: Optional[float] = typer.Option(
        None, "--bucket-cap-mb", help="DDP bucket_cap_mb in MiB (default: PyTorch's 25 with a 1 MiB first bucket)."),
    no_overlap: bool = typer.Option(False, "--no-overlap", help="All-reduce after backward instead of during it."),
    overlap_slowdown: Optional[float] = typer.Option(
        None, "--overlap-slowdown", help="Compute slowdown while communicating (0.1 = 10 %)."),
    compute_efficiency: Optional[float] = typer.Option(
        None, "--compute-efficiency", help="Fraction of the achieved matmul rate layers reach (default 0.6)."),
    single_gpu_step_ms: Optional[float] = typer.Option(
        None, "--single-gpu-step-ms", help="Your measured one-GPU step (ms): compute is scaled to it."),
    single_gpu_samples_per_s: Optional[float] = typer.Option(
        None, "--single-gpu-samples-per-s", help="Your measured one-GPU throughput: compute is scaled to it."),
    steps: int = typer.Option(3, "--steps", help="Training steps to simulate."),
    strategy: str = typer.Option(
        "ddp", "--strategy", help="ddp, zero1, zero2, zero3, fsdp, fsdp-shard-grad-op or fsdp-hybrid."),
    grad_accum: int = typer.Option(1, "--grad-accum", help="Micro-batches per optimizer step (gradient accumulation)."),
    activation_checkpointing: bool = typer.Option(
        False, "--activation-checkpointing/--no-activation-checkpointing",
        help="Recompute each block's forward in backward (memory down, compute up)."),
    fsdp_unit: str = typer.Option(
        "block", "--fsdp-unit", help="ZeRO-3/FSDP wrap unit and checkpoint unit: block, layer or model."),
    input_shape: Optional[str] = typer.Option(
        None, "--input-shape", help="Example input of a torch --model, batch first: 8,3,224,224 or 4,1024:int64."),
    calibration: Optional[str] = typer.Option(
        None, "--calibration", help="A profile from dpsim calibrate (file or shipped name): fitted collectives "
                                    "and measured compute replace the preset's."),
    algo: Optional[str] = typer.Option(
        None, "--algo", help="Collective algorithms allowed, like NCCL_ALGO: ring, tree, nvls, nvls_tree, "
                             "hierarchical, halving_doubling (comma list, or ^name to exclude). Default: NCCL's choice."),
    proto: Optional[str] = typer.Option(
        None, "--proto", help="NCCL protocols allowed, like NCCL_PROTO: LL, LL128, Simple (comma list or ^name)."),
    jobs: int = typer.Option(
        1, "--jobs", help="Identical DP jobs sharing the fabric at once; their collectives share links max-min."),
    placement: str = typer.Option(
        "packed", "--placement", help="Servers of the --jobs: packed (contiguous) or interleaved (round robin)."),
    links: bool = typer.Option(False, "--links", help="Also print per-link utilisation and the bottleneck links."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of tables."),
    timeline: Optional[str] = typer.Option(
        None, "--timeline", help="Also write the step's timeline to this standalone .html file (plotly)."),
    noise_cv: Optional[float] = typer.Option(
        None, "--noise-cv", help="Per-rank, per-step compute-time noise (coefficient of variation; 0.05 = 5 %). "
                                 "Default: the step-time CV a --calibration profile recorded, else 0."),
    noise_dist: str = typer.Option("normal", "--noise-dist", help="Noise distribution: normal or lognormal."),
    straggler: Optional[list[str]] = typer.Option(
        None, "--straggler", help="A persistently slow node or GPU, e.g. node3:1.3x or gpu12:2x (repeatable)."),
    degrade: Optional[list[str]] = typer.Option(
        None, "--degrade", help="A link below capacity: node3.nic0:50%, node0.gpu2:50% or a link class "
                                "such as ethernet:50% (capacity left; repeatable)."),
    hiccup_rate_per_s: float = typer.Option(
        0.0, "--hiccup-rate-per-s", help="Transient stalls per GPU per second (with --hiccup-s)."),
    hiccup_s: float = typer.Option(0.0, "--hiccup-s", help="Duration of one stall, seconds."),
    seed: int = typer.Option(0, "--seed", help="Seed of the random draws (same seed, same numbers)."),
    mc_samples: int = typer.Option(
        10, "--mc-samples", help="Monte-Carlo samples (independent seeds) with noise or hiccups."),
    mc_steps: int = typer.Option(50, "--mc-steps", help="Steps per Monte-Carlo sample (with variability)."),
) -> None:
    """Predict the step time, throughput, scaling efficiency and memory of DDP training."""
    config = predict_config_from_flags(**locals())
    from dpsim.predict.run import predict as run_predict

    if timeline is not None:
        from dpsim.files import check_output_path
        check_output_path(timeline, "--timeline")
    noise_source = None
    if noise_cv is None:
        noise_cv, noise_source = _default_noise_cv(calibration)
    variability = _variability_from_flags(noise_cv=noise_cv, noise_dist=noise_dist, straggler=straggler,
                                          degrade=degrade, hiccup_rate_per_s=hiccup_rate_per_s,
                                          hiccup_s=hiccup_s, seed=seed, mc_samples=mc_samples,
                                          mc_steps=mc_steps, noise_source=noise_source)
    report = None
    if variability is None:
        result = run_predict(config)  # a homogeneous, healthy cluster: the engine's one-rank fast path
    else:
        from dpsim.variability.run import predict_with_variability
        result, report = predict_with_variability(config, variability, steps=mc_steps)
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
    if timeline is not None:
        from dpsim.report.figure_base import write_figure_html
        from dpsim.report.plots import timeline_figure
        write_figure_html(timeline_figure(result), timeline)


def predict_config_from_flags(
    *, gpus, link, topology, gpus_per_node, gpu, model, seq_len, micro_batch, flash_attention, precision,
    optimizer, bucket_cap_mb, no_overlap, overlap_slowdown, compute_efficiency, single_gpu_step_ms,
    single_gpu_samples_per_s, steps, calibration=None, strategy="ddp", grad_accum=1,
    activation_checkpointing=False, fsdp_unit="block", input_shape=None, algo=None, proto=None, jobs=1,
    placement="packed", **_output_flags,
):
    """The validated PredictConfig that ``predict``'s flags describe (``report`` shares it).

    Flags that only choose the output (``--json``, ``--timeline``) land in ``_output_flags``.
    """
    from dpsim.predict.config import DEFAULT_OVERLAP_SLOWDOWN, PredictConfig
    from dpsim.workload.compute import DEFAULT_COMPUTE_EFFICIENCY

    if single_gpu_step_ms is not None and single_gpu_samples_per_s is not None:
        raise ConfigError("--single-gpu-step-ms and --single-gpu-samples-per-s: give one, not both")
    single_s = None
    if single_gpu_step_ms is not None:
        _positive("--single-gpu-step-ms", single_gpu_step_ms)
        single_s = single_gpu_step_ms / 1e3
    if single_gpu_samples_per_s is not None:
        _positive("--single-gpu-samples-per-s", single_gpu_samples_per_s)
        single_s = micro_batch / single_gpu_samples_per_s
    if bucket_cap_mb is not None:
        _positive("--bucket-cap-mb", bucket_cap_mb)
    if micro_batch < 1:
        raise ConfigError(f"--micro-batch: {micro_batch} is not valid; expected an integer >= 1")
    if seq_len is not None and seq_len < 1:
        raise ConfigError(f"--seq-len: {seq_len} is not valid; expected an integer >= 1")
    if overlap_slowdown is not None and not (math.isfinite(overlap_slowdown) and overlap_slowdown >= 0):
        raise ConfigError(f"--overlap-slowdown: {overlap_slowdown} is not valid; expected a number >= 0")
    from dpsim.strategies.registry import (
        check_fsdp_unit,
        check_grad_accum,
        check_strategy,
    )
    check_strategy(strategy)
    check_grad_accum(grad_accum)
    check_fsdp_unit(fsdp_unit)
    from dpsim.collectives.nccl_tuning import (
        check_job_flags,
        parse_algorithms,
        parse_protocols,
    )
    parse_algorithms(algo)
    parse_protocols(proto)
    check_job_flags(jobs, placement)
    config = PredictConfig(
        gpus=gpus, link=link, topology_file=topology, gpus_per_node=gpus_per_node, gpu=gpu,
        model=model, seq_len=seq_len, flash_attention=flash_attention, micro_batch=micro_batch, precision=precision, optimizer=optimizer,
        bucket_cap_mb=bucket_cap_mb, overlap=not no_overlap,
        overlap_slowdown=_default_overlap_slowdown(calibration, DEFAULT_OVERLAP_SLOWDOWN)
        if overlap_slowdown is None else overlap_slowdown,
        compute_efficiency=DEFAULT_COMPUTE_EFFICIENCY if compute_efficiency is None else compute_efficiency,
        single_gpu_step_s=single_s, steps=steps, calibration=calibration,
        strategy=strategy, grad_accum=grad_accum, activation_checkpointing=activation_checkpointing,
        fsdp_unit=fsdp_unit, input_shape=input_shape, algo=algo, proto=proto, jobs=jobs, placement=placement,
    )
    return config


def _default_overlap_slowdown(calibration: str | None, default: float) -> float:
    """``--overlap-slowdown`` left out: the profile's measured slowdown, else the default."""
    if calibration is None:
        return default
    from dpsim.profile.calibrated import calibrated_overlap_slowdown
    from dpsim.profile.io import load_profile
    measured = calibrated_overlap_slowdown(load_profile(calibration))
    return default if measured is None else measured


def _default_noise_cv(calibration: str | None) -> tuple[float, str | None]:
    """``--noise-cv`` left out: (the profile's measured step-time CV, where it came from), else (0, None)."""
    if calibration is None:
        return 0.0, None
    from dpsim.profile.calibrated import calibrated_noise_cv
    from dpsim.profile.io import load_profile
    profile = load_profile(calibration)
    measured = calibrated_noise_cv(profile)
    if not measured:
        return 0.0, None
    from dpsim.variability.spec import MAX_NOISE_CV
    capped = " (capped)" if measured > MAX_NOISE_CV else ""
    return min(measured, MAX_NOISE_CV), f"calibration profile {profile.name!r} step_time_cv{capped}"


VARIABILITY_FLAGS = ("noise_cv", "noise_dist", "straggler", "degrade", "hiccup_rate_per_s", "hiccup_s",
                     "seed", "mc_samples", "mc_steps")
"""``predict`` parameters that only the variability report reads (commands that copy
``predict``'s flags can leave them out)."""


def _variability_from_flags(*, noise_cv, noise_dist, straggler, degrade, hiccup_rate_per_s, hiccup_s, seed,
                            mc_samples, mc_steps, noise_source=None):
    """The VariabilitySpec of ``predict``'s variability flags, or ``None`` when none is active."""
    from dpsim.network.degrade import parse_degradation
    from dpsim.variability.spec import VariabilitySpec, parse_straggler

    if mc_steps < 1:
        raise ConfigError(f"--mc-steps: {mc_steps} is not valid; expected an integer >= 1")
    spec = VariabilitySpec(
        noise_cv=noise_cv, noise_distribution=noise_dist,
        stragglers=tuple(parse_straggler(x) for x in straggler or ()),
        degradations=tuple(parse_degradation(x) for x in degrade or ()),
        hiccup_rate_per_s=hiccup_rate_per_s, hiccup_s=hiccup_s, seed=seed, samples=mc_samples,
        noise_source=noise_source,
    )
    return spec if spec.active else None


def _positive(flag: str, value: float) -> None:
    if not (math.isfinite(value) and value > 0):
        raise ConfigError(f"{flag}: {value} is not valid; expected a number > 0")
