"""Capacity-planning commands: ``dpsim report`` and ``dpsim sweep``.

Registered on :data:`dpsim.cli.app` when :mod:`dpsim.cli` is imported. Nothing heavy is
imported here: pandas, dask and plotly load inside the commands, so ``dpsim predict``
stays fast.
"""

from __future__ import annotations

import inspect
from typing import Optional

import typer

from dpsim.cli.app import _emit_json
from dpsim.cli.predict import predict as _predict_command
from dpsim.cli.predict import predict_config_from_flags
from dpsim.errors import ConfigError

# --------------------------------------------------------------------------- report

def report(**flags) -> None:
    """Write one standalone HTML report (tables and figures; opens offline).

    Takes every ``dpsim predict`` flag, plus the output file and an optional budget.
    """
    output = flags.pop("output")
    tokens, samples = flags.pop("tokens"), flags.pop("samples")
    prices = flags.pop("gpu_hour_usd")
    scaling = flags.pop("scaling_gpus")
    from dpsim.files import check_output_path
    from dpsim.plan.cost import parse_count, parse_price_overrides
    from dpsim.report.html import write_report

    check_output_path(output, "-o/--output")
    if tokens is not None and samples is not None:
        raise ConfigError("--tokens and --samples: give one budget, not both")
    budget = dict(tokens=None if tokens is None else parse_count(tokens, "--tokens"),
                  samples=None if samples is None else parse_count(samples, "--samples"))
    counts = None
    if scaling is not None:
        counts = [_int_item(v, "--scaling-gpus") for v in scaling.split(",") if v.strip()]
        if not counts:
            raise ConfigError(f"--scaling-gpus: {scaling!r} has no GPU counts; give e.g. 8,16,32")
    config = predict_config_from_flags(**flags)
    path = write_report(output, config, gpu_hour_usd=parse_price_overrides(prices or []),
                        scaling_gpus=counts, **budget)
    print(f"report written to {path} ({path.stat().st_size / 1e6:.1f} MB, opens offline)")


def _int_item(text: str, flag: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise ConfigError(f"{flag}: {text.strip()!r} is not a GPU count; expected integers >= 1, "
                          f"comma-separated") from None
    if value < 1:
        raise ConfigError(f"{flag}: {value} is not a GPU count; expected integers >= 1, comma-separated")
    return value


def _report_signature() -> inspect.Signature:
    """``predict``'s flags (less output and variability flags) plus the report's own."""
    sig = inspect.signature(_predict_command, eval_str=True)
    from dpsim.cli.predict import VARIABILITY_FLAGS
    params = [p for name, p in sig.parameters.items() if name not in ("as_json", "timeline", *VARIABILITY_FLAGS)]
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    extra = [
        inspect.Parameter("output", kind, annotation=str, default=typer.Option(
            "report.html", "-o", "--output", help="The .html file to write.")),
        inspect.Parameter("tokens", kind, annotation=Optional[str], default=typer.Option(
            None, "--tokens", help="Token budget for time and cost to train, e.g. 1T, 300B.")),
        inspect.Parameter("samples", kind, annotation=Optional[str], default=typer.Option(
            None, "--samples", help="Sample budget (image models), e.g. 90M.")),
        inspect.Parameter("gpu_hour_usd", kind, annotation=Optional[list[str]], default=typer.Option(
            None, "--gpu-hour-usd", metavar="PRICE", help="Price per GPU-hour: 2.5 (every GPU) or h100=2.5 (repeatable).")),
        inspect.Parameter("scaling_gpus", kind, annotation=Optional[str], default=typer.Option(
            None, "--scaling-gpus", help="GPU counts of the scaling figure, e.g. 8,16,32,64.")),
    ]
    return sig.replace(parameters=params + extra, return_annotation=None)


report.__signature__ = _report_signature()  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------- sweep

_AXIS_FLAGS = {
    "gpus": "--gpus", "link": "--link", "topology_file": "--topology", "gpus_per_node": "--gpus-per-node",
    "gpu": "--gpu", "model": "--model", "seq_len": "--seq-len", "micro_batch": "--micro-batch",
    "precision": "--precision", "optimizer": "--optimizer", "bucket_cap_mb": "--bucket-cap-mb",
    "overlap": "--overlap", "overlap_slowdown": "--overlap-slowdown",
    "compute_efficiency": "--compute-efficiency", "steps": "--steps", "calibration": "--calibration",
    "strategy": "--strategy", "grad_accum": "--grad-accum",
}
_SHOW_ROWS = 40


def sweep_command(
    config: Optional[str] = typer.Option(None, "--config", "-c", help="A sweep YAML file (grid:, tokens:, gpu_hour_usd:)."),
    gpus: Optional[str] = typer.Option(None, "--gpus", help="GPU counts, comma-separated: 8,16,32,64."),
    link: Optional[str] = typer.Option(None, "--link", help="Topology presets: nvlink,infiniband,ethernet,pcie."),
    topology: Optional[str] = typer.Option(None, "--topology", help="Topology YAML files, comma-separated."),
    gpus_per_node: Optional[str] = typer.Option(None, "--gpus-per-node", help="GPUs per node values."),
    gpu: Optional[str] = typer.Option(None, "--gpu", help="GPU presets: a100,h100,..."),
    model: Optional[str] = typer.Option(None, "--model", help="Catalog models: gpt2-xl,llama-2-7b,..."),
    seq_len: Optional[str] = typer.Option(None, "--seq-len", help="Sequence lengths."),
    micro_batch: Optional[str] = typer.Option(None, "--micro-batch", help="Samples per GPU per step: 1,2,4."),
    precision: Optional[str] = typer.Option(None, "--precision", help="fp32, amp, bf16-mixed, bf16."),
    optimizer: Optional[str] = typer.Option(None, "--optimizer", help="adamw, adam, sgd-momentum, sgd."),
    bucket_cap_mb: Optional[str] = typer.Option(
        None, "--bucket-cap-mb", help="DDP bucket caps in MiB; 'default' = PyTorch's (25, 1 MiB first)."),
    overlap: Optional[str] = typer.Option(None, "--overlap", help="on, off or on,off."),
    overlap_slowdown: Optional[str] = typer.Option(None, "--overlap-slowdown", help="Compute slowdowns while communicating."),
    compute_efficiency: Optional[str] = typer.Option(None, "--compute-efficiency", help="Fractions of the matmul rate."),
    steps: Optional[str] = typer.Option(None, "--steps", help="Training steps to simulate."),
    calibration: Optional[str] = typer.Option(
        None, "--calibration", help="Calibration profiles (names or files); 'none' = the preset's model."),
    strategy: Optional[str] = typer.Option(None, "--strategy", help="Sharding strategies: ddp,zero1,zero2,zero3,fsdp,..."),
    grad_accum: Optional[str] = typer.Option(None, "--grad-accum", help="Micro-batches per optimizer step: 1,4,16."),
    axis: Optional[list[str]] = typer.Option(
        None, "--axis", metavar="NAME=V1,V2", help="Any PredictConfig field as NAME=V1,V2 (repeatable), e.g. flash_attention=true,false."),
    tokens: Optional[str] = typer.Option(None, "--tokens", help="Token budget: adds time_to_train and cost_usd (1T, 300B)."),
    samples: Optional[str] = typer.Option(None, "--samples", help="Sample budget, for image models."),
    gpu_hour_usd: Optional[list[str]] = typer.Option(
        None, "--gpu-hour-usd", metavar="PRICE", help="Price per GPU-hour: 2.5 (every GPU) or h100=2.5 (repeatable)."),
    output: Optional[str] = typer.Option(None, "-o", "--output", help="Write results to .csv, .parquet or .json."),
    workers: Optional[int] = typer.Option(None, "--workers", help="Run on a local Dask cluster of N worker processes."),
    scheduler: Optional[str] = typer.Option(
        None, "--scheduler", help="Run on an existing dask.distributed cluster, e.g. tcp://host:8786."),
    skip_invalid: bool = typer.Option(
        False, "--skip-invalid", help="Record a point's error in an 'error' column instead of stopping."),
    progress: Optional[bool] = typer.Option(
        None, "--progress/--no-progress", help="Progress bar on stderr (default: when stderr is a terminal)."),
    as_json: bool = typer.Option(False, "--json", help="Print the rows as JSON (schema dpsim.sweep/1)."),
) -> None:
    """Predict every combination of a grid (flags and/or a YAML file): table, CSV/Parquet/JSON."""
    from dpsim.plan.cost import parse_count, parse_price_overrides
    from dpsim.plan.grid import SweepSpec
    from dpsim.plan.sweep import OUTPUT_FORMATS, records_json, run_sweep, write_results

    if output is not None:
        from pathlib import Path
        if Path(output).suffix.lower() not in OUTPUT_FORMATS:
            raise ConfigError(f"-o/--output: {output!r} has no known extension; use one of "
                              f"{', '.join(OUTPUT_FORMATS)}")
        if not Path(output).parent.is_dir():
            raise ConfigError(f"-o/--output: directory {str(Path(output).parent)!r} does not exist")
    flags = dict(gpus=gpus, link=link, topology_file=topology, gpus_per_node=gpus_per_node, gpu=gpu, model=model,
                 seq_len=seq_len, micro_batch=micro_batch, precision=precision, optimizer=optimizer,
                 bucket_cap_mb=bucket_cap_mb, overlap=overlap, overlap_slowdown=overlap_slowdown,
                 compute_efficiency=compute_efficiency, steps=steps, calibration=calibration, strategy=strategy,
                 grad_accum=grad_accum)
    spec = SweepSpec.from_yaml(config) if config else SweepSpec()
    for name, raw in flags.items():
        if raw is not None:
            spec = spec.with_axes(SweepSpec.from_grid({name: _split(raw, _AXIS_FLAGS[name])},
                                                      origin=_AXIS_FLAGS[name]))
    for item in axis or []:
        name, sep, values = item.partition("=")
        if not sep or not name.strip():
            raise ConfigError(f"--axis: {item!r} is not valid; expected NAME=V1,V2 (e.g. flash_attention=true,false)")
        spec = spec.with_axes(SweepSpec.from_grid({name.strip(): _split(values, f"--axis {name.strip()}")},
                                                  origin="--axis"))
    if tokens is not None or samples is not None or gpu_hour_usd:
        spec = spec.with_axes(SweepSpec(
            tokens=None if tokens is None else parse_count(tokens, "--tokens"),
            samples=None if samples is None else parse_count(samples, "--samples"),
            gpu_hour_usd=parse_price_overrides(gpu_hour_usd or [])))
    if progress is None:
        from rich.console import Console
        progress = Console(stderr=True).is_terminal
    df = run_sweep(spec, scheduler=scheduler, workers=workers, progress=progress, skip_invalid=skip_invalid)
    if output is not None:
        write_results(df, output, spec)
    if as_json:
        _emit_json(records_json(df.to_dict(orient="records"), spec))
        return
    _print_table(df, spec)
    if output is not None:
        print(f"{len(df)} rows written to {output}")


def _split(raw: str, flag: str) -> list[str]:
    values = [v.strip() for v in str(raw).split(",")]
    if not values or any(not v for v in values):
        raise ConfigError(f"{flag}: {raw!r} is not valid; give comma-separated values without empty items")
    return values


def _print_table(df, spec) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from dpsim.units import format_bytes, format_seconds

    axes = spec.varying or list(spec.axes) or ["gpus"]
    table = Table(title=f"dpsim sweep: {len(df)} point{'s' if len(df) != 1 else ''}", header_style="bold")
    tokens = "tokens_per_s" in df.columns and df["tokens_per_s"].notna().any()
    result_cols = [("step", "step_time_s"), ("tokens/s" if tokens else "samples/s",
                                             "tokens_per_s" if tokens else "samples_per_s"),
                   ("efficiency", "scaling_efficiency"), ("exposed comm", "exposed_comm_s"),
                   ("memory/GPU", "memory_total_bytes"), ("fits", "memory_fits"), ("$/hour", "usd_per_hour")]
    if "cost_usd" in df.columns:
        result_cols += [("days", "time_to_train_days"), ("cost", "cost_usd")]
    if "error" in df.columns and df["error"].notna().any():
        result_cols.append(("error", "error"))
    for a in axes:
        table.add_column(a)
    for name, _ in result_cols:
        table.add_column(name, justify="left" if name == "error" else "right")

    def fmt(col: str, v) -> str:
        import math
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return "-"
        if col in ("step_time_s", "exposed_comm_s"):
            return format_seconds(v)
        if col in ("tokens_per_s", "samples_per_s"):
            return f"{v:,.0f}"
        if col == "scaling_efficiency":
            return f"{100 * v:.1f} %"
        if col == "memory_total_bytes":
            return format_bytes(v)
        if col == "memory_fits":
            return "yes" if v else "[red]NO[/red]"
        if col in ("usd_per_hour", "cost_usd"):
            return f"${v:,.0f}"
        if col == "time_to_train_days":
            return f"{v:,.1f}"
        return escape(str(v))

    for row in df.head(_SHOW_ROWS).to_dict(orient="records"):
        cells = ["default" if row.get(a) is None or row.get(a) != row.get(a) else escape(str(row.get(a)))
                 for a in axes]
        cells += [fmt(col, row.get(col)) for _, col in result_cols]
        table.add_row(*cells)
    console = Console()
    console.print(table)
    if len(df) > _SHOW_ROWS:
        console.print(f"... {len(df) - _SHOW_ROWS} more rows: write them all with -o results.csv (or .parquet, .json)")
