"""Command line: ``dpsim predict`` and ``dpsim collective`` (``calibrate`` in :mod:`dpsim.cli_calibrate`).

Every :class:`~dpsim.errors.DpsimError` and every bad flag is caught once, here, and
printed as one line on stderr (exit status 2); nothing prints a traceback.
"""

from __future__ import annotations

import json
import math
import sys
from typing import Optional

import typer

from dpsim.errors import ConfigError, DpsimError

try:  # typer >= 0.22 parses with its own vendored copy of click (the click package may be absent)
    from typer._click import exceptions as _click_exceptions
except ImportError:  # older typer uses click itself
    from click import exceptions as _click_exceptions  # type: ignore[no-redef]
_CLICK_ERRORS = (_click_exceptions.ClickException,)
_ABORTS = tuple({typer.Abort, getattr(_click_exceptions, "Abort", typer.Abort)})

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Discrete-event simulator of data-parallel GPU training clusters.")


def _json_safe(obj):
    # JSON has no inf/nan (e.g. the ring bandwidth of a 1-GPU "ring" is inf): write null.
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    return obj


def _emit_json(obj: dict) -> None:
    sys.stdout.write(json.dumps(_json_safe(obj), indent=2, allow_nan=False) + "\n")


@app.command()
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
    from dpsim.predict import predict as run_predict

    if timeline is not None:
        from dpsim.html_report import check_output_path
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
        from dpsim.variability import predict_with_variability
        result, report = predict_with_variability(config, variability, steps=mc_steps)
    if as_json:
        out = result.to_dict()
        if report is not None:
            out["variability"] = report.to_dict()
        _emit_json(out)
    else:
        from dpsim.report import print_prediction
        print_prediction(result)
        if links:
            from dpsim.algorithms.links import print_link_report
            print_link_report(result.links)
        if report is not None:
            from dpsim.variability import print_variability
            print_variability(report)
    if timeline is not None:
        from dpsim.plots import timeline_figure, write_figure_html
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
    from dpsim.predict import DEFAULT_OVERLAP_SLOWDOWN, PredictConfig
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
    from dpsim.strategies import check_fsdp_unit, check_grad_accum, check_strategy
    check_strategy(strategy)
    check_grad_accum(grad_accum)
    check_fsdp_unit(fsdp_unit)
    from dpsim.algorithms.nccl import check_job_flags, parse_algorithms, parse_protocols
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
    from dpsim.calibrate.model import calibrated_overlap_slowdown
    from dpsim.calibrate.profile import load_profile
    measured = calibrated_overlap_slowdown(load_profile(calibration))
    return default if measured is None else measured


def _default_noise_cv(calibration: str | None) -> tuple[float, str | None]:
    """``--noise-cv`` left out: (the profile's measured step-time CV, where it came from), else (0, None)."""
    if calibration is None:
        return 0.0, None
    from dpsim.calibrate.model import calibrated_noise_cv
    from dpsim.calibrate.profile import load_profile
    profile = load_profile(calibration)
    measured = calibrated_noise_cv(profile)
    if not measured:
        return 0.0, None
    from dpsim.variability import MAX_NOISE_CV
    capped = " (capped)" if measured > MAX_NOISE_CV else ""
    return min(measured, MAX_NOISE_CV), f"calibration profile {profile.name!r} step_time_cv{capped}"


VARIABILITY_FLAGS = ("noise_cv", "noise_dist", "straggler", "degrade", "hiccup_rate_per_s", "hiccup_s",
                     "seed", "mc_samples", "mc_steps")
"""``predict`` parameters that only the variability report reads (commands that copy
``predict``'s flags can leave them out)."""


def _variability_from_flags(*, noise_cv, noise_dist, straggler, degrade, hiccup_rate_per_s, hiccup_s, seed,
                            mc_samples, mc_steps, noise_source=None):
    """The VariabilitySpec of ``predict``'s variability flags, or ``None`` when none is active."""
    from dpsim.variability import VariabilitySpec, parse_degradation, parse_straggler

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


@app.command()
def memory(
    gpus: int = typer.Option(64, "--gpus", help="Data-parallel GPUs."),
    link: str = typer.Option("ethernet", "--link", help="Topology preset (sets the GPU and GPUs per node)."),
    topology: Optional[str] = typer.Option(None, "--topology", help="A topology YAML file (instead of --link)."),
    gpus_per_node: Optional[int] = typer.Option(None, "--gpus-per-node", help="Override GPUs per node."),
    gpu: Optional[str] = typer.Option(None, "--gpu", help="Override the GPU: v100, a100, h100, h200, b200."),
    model: str = typer.Option(
        "gpt2-xl", "--model", help="Catalog model, or a torch builder path/file.py:fn or package.module:fn."),
    input_shape: Optional[str] = typer.Option(
        None, "--input-shape", help="Example input of a torch --model, batch first: 8,3,224,224 or 4,1024:int64."),
    seq_len: Optional[int] = typer.Option(None, "--seq-len", help="Override the sequence length."),
    micro_batch: int = typer.Option(4, "--micro-batch", help="Samples per GPU per micro-batch."),
    flash_attention: bool = typer.Option(
        True, "--flash-attention/--no-flash-attention", help="Attention keeps no score matrices."),
    precision: str = typer.Option("bf16-mixed", "--precision", help="fp32, amp, bf16-mixed, fp16-mixed or bf16."),
    optimizer: str = typer.Option("adamw", "--optimizer", help="adamw, adam, sgd-momentum or sgd."),
    strategy: str = typer.Option(
        "ddp", "--strategy", help="ddp, zero1, zero2, zero3, fsdp, fsdp-shard-grad-op or fsdp-hybrid."),
    grad_accum: int = typer.Option(1, "--grad-accum", help="Micro-batches per optimizer step."),
    activation_checkpointing: bool = typer.Option(
        False, "--activation-checkpointing/--no-activation-checkpointing", help="Keep only block inputs."),
    fsdp_unit: str = typer.Option("block", "--fsdp-unit", help="block, layer or model."),
    no_overlap: bool = typer.Option(False, "--no-overlap", help="DeepSpeed overlap_comm off (one gradient buffer)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of a table."),
) -> None:
    """Memory per GPU by category for a strategy, the fits / OOM verdict and what would make it fit."""
    from dpsim.memory import HEADROOM_FRACTION
    from dpsim.predict import PredictConfig, memory_for_config
    from dpsim.strategies import STRATEGIES, check_fsdp_unit, check_grad_accum, check_strategy

    check_strategy(strategy)
    check_grad_accum(grad_accum)
    check_fsdp_unit(fsdp_unit)
    if micro_batch < 1:
        raise ConfigError(f"--micro-batch: {micro_batch} is not valid; expected an integer >= 1")
    if seq_len is not None and seq_len < 1:
        raise ConfigError(f"--seq-len: {seq_len} is not valid; expected an integer >= 1")
    config = PredictConfig(gpus=gpus, link=link, topology_file=topology, gpus_per_node=gpus_per_node, gpu=gpu,
                           model=model, input_shape=input_shape, seq_len=seq_len, micro_batch=micro_batch,
                           flash_attention=flash_attention, precision=precision, optimizer=optimizer,
                           strategy=strategy, grad_accum=grad_accum,
                           activation_checkpointing=activation_checkpointing, fsdp_unit=fsdp_unit,
                           overlap=not no_overlap)
    mem, advice, spec, topo = memory_for_config(config)
    rows = [("weights", mem.weights_bytes), ("gradients", mem.gradients_bytes),
            ("optimizer state", mem.optimizer_bytes), ("activations", mem.activations_bytes),
            ("communication buffers", mem.comm_buffers_bytes), ("framework overhead", mem.overhead_bytes)]
    if as_json:
        _emit_json({
            "schema": "dpsim.memory/1", "model": spec.name, "param_count": spec.param_count,
            "gpu": topo.spec.gpu, "n_gpus": topo.n_gpus, "gpus_per_node": topo.gpus_per_node,
            "strategy": strategy, "precision": precision, "optimizer": optimizer, "micro_batch": micro_batch,
            "grad_accum": grad_accum, "activation_checkpointing": activation_checkpointing,
            "shard_group_size": mem.shard_group_size,
            "weights_bytes": mem.weights_bytes, "gradients_bytes": mem.gradients_bytes,
            "optimizer_bytes": mem.optimizer_bytes, "activations_bytes": mem.activations_bytes,
            "comm_buffers_bytes": mem.comm_buffers_bytes, "overhead_bytes": mem.overhead_bytes,
            "total_bytes": mem.total_bytes, "capacity_bytes": mem.capacity_bytes,
            "usable_bytes": mem.usable_bytes, "fits": mem.fits, "suggestion": mem.suggestion,
            "advice": advice.to_dict(),
        })
        return
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from dpsim.units import format_bytes
    title = (f"{spec.name} ({spec.param_count / 1e9:.3g} B params), {strategy} on {topo.n_gpus} x {topo.spec.gpu}, "
             f"{precision} + {optimizer}, micro-batch {micro_batch}"
             + (f" x {grad_accum}" if grad_accum > 1 else "")
             + (", checkpointing" if activation_checkpointing else ""))
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
    console.print(f"{escape(strategy)}: {escape(STRATEGIES[strategy])}")
    if not mem.fits:
        console.print(f"what would fit: {escape(mem.suggestion or advice.message)}")


@app.command()
def collective(
    op: str = typer.Option("all_reduce", "--op", help="all_reduce, reduce_scatter, all_gather or broadcast."),
    gpus: int = typer.Option(8, "--gpus", help="Ranks in the communicator."),
    link: str = typer.Option("nvlink", "--link", help="Topology preset."),
    topology: Optional[str] = typer.Option(None, "--topology", help="A topology YAML file (instead of --link)."),
    gpus_per_node: Optional[int] = typer.Option(None, "--gpus-per-node", help="Override GPUs per node."),
    minbytes: str = typer.Option("8", "-b", "--minbytes", help="Smallest size (nccl-tests -b; 1K = 1024)."),
    maxbytes: str = typer.Option("1G", "-e", "--maxbytes", help="Largest size (nccl-tests -e)."),
    stepfactor: float = typer.Option(2.0, "-f", "--stepfactor", help="Multiply the size by this each row."),
    dtype: str = typer.Option("float", "-d", "--datatype", help="float, half, bfloat16, double or int8."),
    calibration: Optional[str] = typer.Option(
        None, "--calibration", help="A profile from dpsim calibrate (file or shipped name) instead of the preset."),
    algo: Optional[str] = typer.Option(
        None, "--algo", help="Algorithms allowed, like NCCL_ALGO: ring, tree, nvls, nvls_tree, hierarchical, "
                             "halving_doubling (comma list or ^name). Default: NCCL's choice per size."),
    proto: Optional[str] = typer.Option(None, "--proto", help="Protocols allowed, like NCCL_PROTO: LL, LL128, Simple."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of the nccl-tests table."),
) -> None:
    """Predict a collective over a size sweep, printed like nccl-tests' *_perf tools."""
    from dpsim.collectives import OPS
    from dpsim.predict import PredictConfig, resolve_topology
    from dpsim.report import NCCL_TESTS_TYPE_BYTES, nccl_tests_table
    from dpsim.units import parse_size_bytes

    if op not in OPS:
        raise ConfigError(f"--op: {op!r} is not a collective; choose one of {', '.join(OPS)}")
    if dtype not in NCCL_TESTS_TYPE_BYTES:
        raise ConfigError(f"-d/--datatype: {dtype!r} is not known; choose one of {', '.join(NCCL_TESTS_TYPE_BYTES)}")
    lo = parse_size_bytes(minbytes, "-b/--minbytes")
    hi = parse_size_bytes(maxbytes, "-e/--maxbytes")
    if lo <= 0 or hi < lo:
        raise ConfigError(f"-b/-e: {minbytes!r}..{maxbytes!r} is not a valid range; need 0 < minbytes <= maxbytes")
    if not (math.isfinite(stepfactor) and stepfactor > 1):
        raise ConfigError(f"-f/--stepfactor: {stepfactor} is not valid; expected a number > 1")
    topo = resolve_topology(PredictConfig(gpus=gpus, link=link, topology_file=topology, gpus_per_node=gpus_per_node))
    from dpsim.algorithms.nccl import NcclCollectives, parse_algorithms, parse_protocols
    model = NcclCollectives(topo, algorithms=parse_algorithms(algo), protocols=parse_protocols(proto))
    algorithm = "nccl"
    if calibration is not None:
        from dpsim.calibrate.model import calibrated_collectives
        from dpsim.calibrate.profile import load_profile
        profile = load_profile(calibration)
        model = calibrated_collectives(profile, topo)
        algorithm = f"calibrated ({profile.name})"
    elem = NCCL_TESTS_TYPE_BYTES[dtype]
    sizes = []
    size = lo
    while size <= hi * (1 + 1e-12):
        # nccl-tests rounds each size down to whole elements (and whole ranks' shares).
        align = elem * (gpus if op in ("reduce_scatter", "all_gather") else 1)
        sizes.append(max(align, int(size) // align * align))
        size *= stepfactor
    results = [model.time(op, s) for s in sizes]
    if as_json:
        _emit_json({
            "schema": "dpsim.collective/1", "op": op, "n_ranks": topo.n_gpus, "topology": topo.spec.name,
            "dtype": dtype, "algorithm": "nccl" if calibration is None else "calibrated",
            "calibration": calibration,
            "rows": [{"size_bytes": int(r.size_bytes), "count": int(r.size_bytes) // elem, "time_s": r.time_s,
                      "algbw_bytes_per_s": r.algbw_bytes_per_s, "busbw_bytes_per_s": r.busbw_bytes_per_s,
                      "algorithm": r.algorithm, "protocol": r.protocol}
                     for r in results],
        })
    else:
        print(f"# dpsim collective --op {op}: {topo.n_gpus} ranks on {topo.spec.name} "
              f"({topo.n_nodes} node{'s' if topo.n_nodes > 1 else ''}), {algorithm}, predicted")
        print(nccl_tests_table(results, dtype))
        if calibration is None:
            from dpsim.algorithms.nccl import describe_choices
            print(describe_choices(results))


@app.command()
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


testbed_app = typer.Typer(help="An emulated cluster: network namespaces with shaped NICs (needs root).",
                          no_args_is_help=True)
app.add_typer(testbed_app, name="testbed")


@testbed_app.command("up")
def testbed_up(
    hosts: int = typer.Option(2, "--hosts", help="Hosts (namespaces) to create."),
    nic: str = typer.Option("1gbit", "--nic", help="NIC rate of every host, e.g. 100mbit, 1gbit, 3gbit."),
    racks: int = typer.Option(1, "--racks", help="Racks; hosts are split into consecutive blocks."),
    oversubscription: float = typer.Option(1.0, "--oversubscription", help="Rack uplink oversubscription."),
) -> None:
    """Create a testbed and leave it up; prints its tag (give it to `testbed down`)."""
    from dpsim.testbed import Testbed, TestbedSpec, parse_rate_bits_per_s

    spec = TestbedSpec(hosts=hosts, nic_bits_per_s=parse_rate_bits_per_s(nic), racks=racks,
                       rack_oversubscription=oversubscription)
    tb = Testbed(spec=spec)
    try:
        tb.up()
    except BaseException:
        tb.down()
        raise
    print(f"{tb.tag} up: {hosts} hosts at {nic}; host i runs in namespace {tb.tag}-h<i> at {tb.host_ip(0)[:-1]}<i+1>")


@testbed_app.command("down")
def testbed_down(
    tag: Optional[str] = typer.Argument(None, help="Tag printed by `testbed up`."),
    all_: bool = typer.Option(False, "--all", help="Remove every testbed dpsim has up."),
) -> None:
    """Remove a testbed (only namespaces dpsim created for it)."""
    from dpsim.testbed import Testbed, list_testbeds

    if all_ == (tag is not None):
        raise ConfigError("testbed down: give a TAG or --all (one of them)")
    tags = [s["tag"] for s in list_testbeds()] if all_ else [tag]
    for t in tags:
        Testbed.from_state(t).down()
        print(f"{t} down")


@testbed_app.command("status")
def testbed_status(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List the testbeds that are up."""
    from dpsim.testbed import list_testbeds

    beds = list_testbeds()
    if as_json:
        _emit_json({"schema": "dpsim.testbeds/1", "testbeds": beds})
        return
    if not beds:
        print("no testbed is up")
    for s in beds:
        spec = s["spec"]
        print(f"{s['tag']}: {spec['hosts']} hosts, {spec['nic_bits_per_s'] / 1e6:g} Mbit/s, "
              f"{spec['racks']} rack(s), namespaces: {' '.join(s['namespaces'])}")


@app.command()
def validate(
    model: str = typer.Option(
        "mlp", "--model", help="mlp, transformer, convnet, or your path/to/file.py:build / package.module:build."),
    input_shape: Optional[str] = typer.Option(
        None, "--input-shape", help="Input of your model, batch first (32,1024 or 8,128:int64)."),
    micro_batch: int = typer.Option(32, "--micro-batch", help="Samples per rank per step."),
    bucket_cap_mb: Optional[float] = typer.Option(None, "--bucket-cap-mb", help="DDP bucket_cap_mb (MiB)."),
    emulate_hosts: Optional[int] = typer.Option(
        None, "--emulate-hosts", help="Emulated hosts (one rank each); without it, run under torchrun."),
    nic: str = typer.Option("1gbit", "--nic", help="Emulated NIC rate, e.g. 100mbit, 1gbit, 3gbit."),
    racks: int = typer.Option(1, "--racks", help="Emulated racks."),
    oversubscription: float = typer.Option(1.0, "--oversubscription", help="Rack uplink oversubscription."),
    steps: int = typer.Option(20, "--steps", help="Measured DDP steps."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Train with real DDP (gloo) and compare the measured step with dpsim's prediction."""
    import os

    from dpsim.testbed import parse_rate_bits_per_s
    from dpsim.validate.api import ValidationConfig, validate as run_validation, validate_under_torchrun

    under_torchrun = emulate_hosts is None
    if under_torchrun and not {"RANK", "WORLD_SIZE", "MASTER_ADDR"} <= set(os.environ):
        raise ConfigError("validate: give --emulate-hosts N, or run under torchrun (RANK/WORLD_SIZE/MASTER_ADDR)")
    config = ValidationConfig(
        model=model, micro_batch=micro_batch, bucket_cap_mb=bucket_cap_mb,
        world_size=int(os.environ["WORLD_SIZE"]) if under_torchrun else emulate_hosts,
        nic_bits_per_s=None if under_torchrun else parse_rate_bits_per_s(nic),
        racks=racks, oversubscription=oversubscription, steps=steps, input_shape=input_shape,
    )
    result = validate_under_torchrun(config) if under_torchrun else run_validation(config)
    if result is None:
        return
    if as_json:
        _emit_json(result.to_dict())
        return
    from rich.console import Console
    from rich.table import Table

    m, p = result.measured, result.predicted
    table = Table(title=f"{model}, micro-batch {micro_batch}, {config.world_size} ranks, "
                        f"{'torchrun' if under_torchrun else nic}, bucket cap {bucket_cap_mb or 'default'}")
    for col in ("", "measured", "predicted"):
        table.add_column(col, justify="right" if col else "left")
    ms = lambda s: f"{s * 1e3:.2f} ms"  # noqa: E731
    table.add_row("step (median)", f"{ms(m['median_s'])} (p10 {ms(m['p10_s'])}, p90 {ms(m['p90_s'])})",
                  ms(p["step_time_s"]))
    table.add_row("  forward", ms(m["forward_s"]), ms(p["forward_s"]))
    table.add_row("  backward + waiting for all-reduce", ms(m["backward_and_wait_s"]), ms(p["backward_and_wait_s"]))
    table.add_row("  optimizer", ms(m["optimizer_s"]), ms(p["optimizer_s"]))
    table.add_row("all-reduce (sum, exposed)", "", f"{ms(p['comm_s'])}, {ms(p['exposed_comm_s'])}")
    table.add_row("error", "", f"{100 * result.error:+.1f} %")
    Console().print(table)


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the CLI, turning every user error into one line on stderr."""
    command = typer.main.get_command(app)
    try:
        command.main(args=argv, prog_name="dpsim", standalone_mode=False)
    except _ABORTS:
        print("dpsim: aborted", file=sys.stderr)
        return 130
    except _CLICK_ERRORS as exc:
        message = " ".join(exc.format_message().split())
        if type(exc).__name__ == "NoArgsIsHelpError":
            # Bare ``dpsim``: typer's rich help is already on stdout (or is the message).
            if message:
                print(exc.format_message())
            message = f"missing command; choose one of {', '.join(sorted(command.commands))}"
        print(f"dpsim: error: {message}", file=sys.stderr)
        return 2
    except DpsimError as exc:
        print(f"dpsim: error: {exc}", file=sys.stderr)
        return 2
    return 0


def run() -> None:
    """Console-script entry point (``dpsim``)."""
    sys.exit(main())


# ``dpsim report`` and ``dpsim sweep`` (capacity planning) live in their own module.
from dpsim import cli_plan as _cli_plan  # noqa: E402,F401  (registers the commands on ``app``)
# ``dpsim goodput`` (failures, checkpoints, goodput) lives in its own module.
from dpsim import cli_reliability as _cli_reliability  # noqa: E402,F401  (registers the command on ``app``)
# ``dpsim calibrate`` (torch benchmarks, nccl-tests logs -> profiles) lives in its own module.
from dpsim import cli_calibrate as _cli_calibrate  # noqa: E402,F401  (registers the command on ``app``)
