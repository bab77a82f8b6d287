"""Capacity-planning commands: ``dpsim report`` and ``dpsim sweep``.

Named in :data:`dpsim.cli.commands.COMMANDS` and imported only when one of them runs. Nothing heavy
is imported here: pandas, dask and plotly load inside the commands, so ``dpsim report``
starts fast.
"""

from __future__ import annotations

import re
from typing import Any, Optional

import typer

from dpsim.cli.app import _emit_json
from dpsim.cli.checks import check_budget, check_prices
from dpsim.cli.options import axis_options, config_options
from dpsim.cli.panels import BUDGET, EXECUTION, GRID, OUTPUT, VARIABILITY
from dpsim.cli.predict import PREDICT_FIELDS, SINGLE_GPU_SAMPLES_PER_S, predict_config
from dpsim.errors import ConfigError, DpsimError
from dpsim.workload.shapes import is_shape_ref
from dpsim.limits import (
    MAX_GPUS,
    MAX_REPEATED_FLAGS,
    MAX_SCALING_POINTS,
    MAX_WORKERS,
    check_int,
    short,
)
from dpsim.predict.config import flag_name

# --------------------------------------------------------------------------- report

@config_options(PREDICT_FIELDS)
def report(
    flags: dict[str, Any],
    single_gpu_samples_per_s: Optional[float] = SINGLE_GPU_SAMPLES_PER_S,
    output: str = typer.Option("report.html", "-o", "--output", help="The .html file to write.",
                               rich_help_panel=OUTPUT),
    tokens: Optional[str] = typer.Option(
        None, "--tokens", help="Token budget for time and cost to train, e.g. 1T, 300B.", rich_help_panel=BUDGET),
    samples: Optional[str] = typer.Option(None, "--samples", help="Sample budget (image models), e.g. 90M.",
                                          rich_help_panel=BUDGET),
    gpu_hour_usd: Optional[list[str]] = typer.Option(
        None, "--gpu-hour-usd", metavar="PRICE", help="Price per GPU-hour: 2.5 (every GPU) or h100=2.5 (repeatable).",
        rich_help_panel=BUDGET),
    scaling_gpus: Optional[str] = typer.Option(
        None, "--scaling-gpus", help=f"GPU counts of the scaling figure, e.g. 8,16,32,64 (at most "
                                     f"{MAX_SCALING_POINTS} counts, each at most {MAX_GPUS:,}).",
        rich_help_panel=OUTPUT),
) -> None:
    """Write one standalone HTML report (tables and figures; opens offline).

    Takes every ``dpsim predict`` flag that defines the job, plus the output file and an optional budget.
    """
    from dpsim.files import check_output_path
    from dpsim.plan.cost import parse_count, parse_price_overrides
    from dpsim.report.html import write_report

    check_output_path(output, "-o/--output")
    if tokens is not None and samples is not None:
        raise ConfigError("--tokens and --samples: give one budget, not both")
    budget = dict(tokens=None if tokens is None else check_budget(parse_count(tokens, "--tokens"), "--tokens"),
                  samples=None if samples is None else check_budget(parse_count(samples, "--samples"), "--samples"))
    counts = None
    if scaling_gpus is not None:
        items = scaling_gpus.split(",")
        if scaling_gpus.strip() and not all(v.strip() for v in items):
            # '8,,16' and '8,16,' were read as 8,16 in silence, as no other comma list is.
            raise ConfigError(f"--scaling-gpus: {short(scaling_gpus)} is not valid; give comma-separated GPU counts "
                              f"without empty items, e.g. 8,16,32")
        items = [v for v in items if v.strip()]
        if len(items) > MAX_SCALING_POINTS:
            raise ConfigError(f"--scaling-gpus: {len(items):,} GPU counts given; expected at most {MAX_SCALING_POINTS}")
        counts = [_int_item(v, "--scaling-gpus") for v in items]
        repeated = sorted({c for c in counts if counts.count(c) > 1})
        if repeated:  # 8,8 predicted and plotted the same point twice
            raise ConfigError(f"--scaling-gpus: {short(scaling_gpus)} repeats {', '.join(map(str, repeated))}; give "
                              f"each GPU count once")
        if not counts:
            raise ConfigError(f"--scaling-gpus: {short(scaling_gpus)} has no GPU counts; give e.g. 8,16,32")
    prices = check_prices(parse_price_overrides(_repeated(gpu_hour_usd, "--gpu-hour-usd")), "--gpu-hour-usd")
    config = predict_config(flags, single_gpu_samples_per_s)
    path = write_report(output, config, gpu_hour_usd=prices, scaling_gpus=counts, **budget)
    print(f"report written to {path} ({path.stat().st_size / 1e6:.1f} MB, opens offline)")


def _int_item(text: str, flag: str) -> int:
    try:
        value = int(text.strip()) if len(text.strip()) <= 20 else None
    except ValueError:
        value = None
    # One message with the range for text and for a number out of it ('x' left out the upper bound that 0 gave).
    if value is None or not 1 <= value <= MAX_GPUS:
        raise ConfigError(f"{flag}: {short(text.strip()) if value is None else value} is not a GPU count; expected "
                          f"integers >= 1 and <= {MAX_GPUS:,}, comma-separated")
    return value


def _repeated(items: list[str] | None, flag: str) -> list[str]:
    if items and len(items) > MAX_REPEATED_FLAGS:
        raise ConfigError(f"{flag}: given {len(items):,} times; expected at most {MAX_REPEATED_FLAGS:,}")
    return items or []


# ---------------------------------------------------------------------------- sweep

SWEEP_FIELDS = ("gpus", "link", "topology_file", "gpus_per_node", "gpu", "model", "seq_len", "micro_batch",
                "precision", "optimizer", "bucket_cap_mb", "overlap", "overlap_slowdown", "compute_efficiency",
                "steps", "calibration", "strategy", "grad_accum", "activations", "rack_placement")
"""``PredictConfig`` fields with a comma-separated flag of their own in ``sweep`` (any other: ``--axis``)."""
_SHOW_ROWS = 40


@axis_options(SWEEP_FIELDS)
def sweep_command(
    axes: dict[str, str],
    config: Optional[str] = typer.Option(None, "--config", "-c", help="A sweep YAML file (grid:, tokens:, gpu_hour_usd:).",
                                         rich_help_panel=GRID),
    axis: Optional[list[str]] = typer.Option(
        None, "--axis", metavar="NAME=V1,V2", help="Any PredictConfig field as NAME=V1,V2 (repeatable), e.g. flash_attention=true,false; "
             "V1;V2 when a value has commas of its own (stage_layers=5,7;6,6, algo=ring,tree;nvls).",
        rich_help_panel=GRID),
    tokens: Optional[str] = typer.Option(None, "--tokens", help="Token budget: adds time_to_train and cost_usd (1T, 300B).",
                                         rich_help_panel=BUDGET),
    samples: Optional[str] = typer.Option(None, "--samples", help="Sample budget, for image models.",
                                          rich_help_panel=BUDGET),
    gpu_hour_usd: Optional[list[str]] = typer.Option(
        None, "--gpu-hour-usd", metavar="PRICE", help="Price per GPU-hour: 2.5 (every GPU) or h100=2.5 (repeatable).",
        rich_help_panel=BUDGET),
    output: Optional[str] = typer.Option(None, "-o", "--output", help="Write results to .csv, .parquet or .json "
                                                                     "(atomically: replaced whole or not at all).",
                                         rich_help_panel=OUTPUT),
    workers: Optional[int] = typer.Option(None, "--workers", help=f"Run on a local Dask cluster of N worker processes "
                                                                  f"(1 to {MAX_WORKERS}).",
                                          rich_help_panel=EXECUTION),
    scheduler: Optional[str] = typer.Option(
        None, "--scheduler", help="Run on an existing dask.distributed cluster, e.g. tcp://host:8786.",
        rich_help_panel=EXECUTION),
    skip_invalid: bool = typer.Option(
        False, "--skip-invalid", help="Record a point's error in an 'error' column instead of stopping.",
        rich_help_panel=EXECUTION),
    progress: Optional[bool] = typer.Option(
        None, "--progress/--no-progress", help="Progress bar on stderr (default: when stderr is a terminal).",
        rich_help_panel=OUTPUT),
    as_json: bool = typer.Option(False, "--json", help="Print the rows as JSON (schema dpsim.sweep/1).",
                                 rich_help_panel=OUTPUT),
    degrade: Optional[list[str]] = typer.Option(
        None, "--degrade", help="A link below capacity in every point, as predict takes it (node3.nic0:50%, "
                                "node0.gpu2:50% or a link class such as infiniband:50%; repeatable; replaces the "
                                "file's degrade:).", rich_help_panel=VARIABILITY),
) -> None:
    """Predict every combination of a grid (flags and/or a YAML file): table, CSV/Parquet/JSON.

    At most 100,000 points (the product of the axes' lengths) and 1e7 pipeline slots of simulation in all
    (micro-batches x steps x layers per point, counted before any point runs; ~30 min serially).
    """
    from dpsim.plan.cost import parse_count, parse_price_overrides
    from dpsim.plan.grid import SweepSpec, axis_name
    from dpsim.plan.sweep import (
        OUTPUT_FORMATS,
        check_output_not_input,
        check_sweep_size,
        records_json,
        run_sweep,
        write_results,
    )

    if output is not None:
        from pathlib import Path
        if Path(output).suffix.lower() not in OUTPUT_FORMATS:
            raise ConfigError(f"-o/--output: {output!r} has no known extension; use one of "
                              f"{', '.join(OUTPUT_FORMATS)}")
        from dpsim.files import check_writable_dir, path_kind
        parent = path_kind(Path(output).parent, "-o/--output")
        if parent != "dir":
            # A file where the directory should be (out.csv/r.csv) is not a missing directory (as check_output_path).
            what = "does not exist" if parent is None else "is not a directory"
            raise ConfigError(f"-o/--output: directory {str(Path(output).parent)!r} {what}")
        if path_kind(output, "-o/--output") == "dir":
            raise ConfigError(f"-o/--output: {output!r} is a directory; give a file path")
        check_writable_dir(output, "-o/--output")  # before the sweep: not an OSError after it
        import os
        try:  # --config grid.json -o grid.json replaced the sweep's own file with its results
            same = config is not None and os.path.samefile(output, config)
        except (OSError, ValueError):
            same = False
        if same:
            raise ConfigError(f"-o/--output: {output!r} is the --config file the sweep reads; writing the "
                              f"results would replace it; choose another -o")
    if workers is not None:
        check_int(workers, "--workers", 1, MAX_WORKERS)
    # ``-c ''`` is a file name to refuse, not "no file": it swept the defaults in silence.
    spec = SweepSpec.from_yaml(config) if config is not None else SweepSpec()
    for name, raw in axes.items():
        flag = flag_name(name)
        spec = spec.with_axes(SweepSpec.from_grid({name: _split(raw, flag)}, origin=flag))
    given = {name: flag_name(name) for name in axes}  # axis -> the flag that gave it, to refuse it twice
    for item in axis or []:
        name, sep, values = item.partition("=")
        if not sep or not name.strip():
            raise ConfigError(f"--axis: {short(item)} is not valid; expected NAME=V1,V2 (e.g. "
                              f"flash_attention=true,false)")
        key = axis_name(name, "--axis")  # an unknown axis is named as such first
        if key in given:
            # The later one silently replaced the earlier: a sweep of other points than asked for.
            raise ConfigError(f"--axis {name.strip()}: the axis is also given by {given[key]}; give its values "
                              f"once (V1,V2,... in one flag)")
        given[key] = f"--axis {name.strip()}"
        spec = spec.with_axes(SweepSpec.from_grid({name.strip(): _split(values, f"--axis {name.strip()}", key)},
                                                  origin=f"--axis {name.strip()}"))
    if degrade:
        spec = spec.with_axes(SweepSpec.from_grid(degrade=_repeated(degrade, "--degrade"), origin="--degrade"))
    if tokens is not None or samples is not None or gpu_hour_usd:
        spec = spec.with_axes(SweepSpec(
            tokens=None if tokens is None else parse_count(tokens, "--tokens"),
            samples=None if samples is None else parse_count(samples, "--samples"),
            gpu_hour_usd=parse_price_overrides(_repeated(gpu_hour_usd, "--gpu-hour-usd"))))
    check_budget(spec.tokens, "--tokens" if tokens is not None else f"{config}: tokens")
    check_budget(spec.samples, "--samples" if samples is not None else f"{config}: samples")
    check_prices(spec.gpu_hour_usd, "--gpu-hour-usd" if gpu_hour_usd else f"{config}: gpu_hour_usd")
    check_sweep_size(spec)
    if output is not None:
        check_output_not_input(output, spec)  # before the sweep: its files are the grid's, known only now
    if progress is None:
        from rich.console import Console
        progress = Console(stderr=True).is_terminal
    try:
        df = run_sweep(spec, scheduler=scheduler, workers=workers, progress=progress, skip_invalid=skip_invalid)
    except DpsimError as exc:
        raise type(exc)(sweep_spelling(str(exc))) from None
    if "error" in df.columns:
        df["error"] = [sweep_spelling(e) if isinstance(e, str) else e for e in df["error"]]
    if output is not None:
        write_results(df, output, spec)
    if as_json:
        _emit_json(records_json(df.to_dict(orient="records"), spec))
        return
    _print_table(df, spec)
    _print_gpu_link_warnings(df)
    if output is not None:
        print(f"{len(df)} rows written to {output}")


def _print_gpu_link_warnings(df) -> None:
    """predict's --gpu warning, once for each GPU and topology of the rows whose links are another
    generation's (a row carries no provenance)."""
    from rich.console import Console
    from rich.markup import escape

    from dpsim.errors import DpsimError
    from dpsim.predict.config import PredictConfig
    from dpsim.predict.provenance import gpu_link_warnings

    if "gpu" not in df.columns:
        return
    if "error" in df.columns:
        df = df[df["error"].isna()]  # a point refused (--skip-invalid) has its own line
    seen: set[str] = set()
    for gpu, link, topology_file in df[["gpu", "link", "topology_file"]].drop_duplicates().itertuples(index=False):
        if not isinstance(gpu, str):
            continue
        # A row on a topology file has no preset (link None, or NaN in the frame).
        topology = topology_file if isinstance(topology_file, str) else None
        preset = link if isinstance(link, str) and topology is None else None
        try:
            warnings = gpu_link_warnings(PredictConfig(gpu=gpu, link=preset, topology_file=topology))
        except DpsimError:  # the row's own error says what was wrong with it
            continue
        for w in warnings:
            if w not in seen:
                seen.add(w)
                Console().print(f"[bold yellow]warning[/bold yellow]: {escape(w)}")


_SWEEP_SPELLINGS = ((re.compile(r"--input-shape(?=:)"), "--axis input_shape"),
                    (re.compile(r"--input-shape\b"), "--axis input_shape=SHAPE"))
"""predict flags a refusal names that sweep has no option for, as sweep takes them (``--axis``)."""


def sweep_spelling(text: str) -> str:
    """A refusal's advice as sweep takes it: ``pass --input-shape (e.g. 8,64)`` read "No such option" when
    followed; sweep takes it as ``--axis input_shape=8,64`` (:data:`COMMA_VALUED_AXES`: one point)."""
    for pattern, spelling in _SWEEP_SPELLINGS:
        text = pattern.sub(spelling, text)
    return text


COMMA_VALUED_AXES = ("stage_layers", "input_shape")
"""Axes whose one value is itself a comma list (7,8,8,9; 4,1024:int64): ``--axis stage_layers=5,7`` is one point,
not the points 5 and 7 (each refused as "'5' is not valid; expected 2 block counts", a rule the user had kept)."""


def _split(raw: str, flag: str, axis: str | None = None) -> list[str]:
    # V1;V2 separates the values when one has commas of its own (stage_layers=5,7;6,6, algo=ring,tree;nvls).
    # (--axis only: ``axis`` is None for a field's own flag, --gpus 8,16.)
    sep = ";" if axis is not None and ";" in str(raw) else None if axis in COMMA_VALUED_AXES else ","
    values = [v.strip() for v in (str(raw).split(sep) if sep else [str(raw)])]
    if not values or any(not v for v in values):
        raise ConfigError(f"{flag}: {raw!r} is not valid; give {'semicolon' if sep == ';' else 'comma'}-separated "
                          f"values without empty items")
    # A model's shape has commas of its own (transformer:hidden=64,layers=2,...): its KEY=VALUE items
    # stay with it. They were values of their own, so the shape lost every key after the first.
    joined: list[str] = []
    for v in values:
        if joined and is_shape_ref(joined[-1]) and "=" in v and ":" not in v:
            joined[-1] += "," + v
        else:
            joined.append(v)
    return joined


def _model_error_cell(col: str, row: dict) -> str:
    """`` (low - high)`` after the step, when the row carries its model-error interval."""
    from dpsim.units import format_seconds_as

    low, high = row.get("model_error_low_s"), row.get("model_error_high_s")
    if col != "step_time_s" or low is None or high is None or low != low:
        return ""
    step = row.get("step_time_s", high)
    return f" ({format_seconds_as(low, step)} - {format_seconds_as(high, step)})"


def _print_table(df, spec) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from dpsim.units import format_bytes, format_number, format_seconds

    axes = spec.varying or list(spec.axes) or ["gpus"]
    table = Table(title=f"dpsim sweep: {len(df)} point{'s' if len(df) != 1 else ''}", header_style="bold")
    tokens = "tokens_per_s" in df.columns and df["tokens_per_s"].notna().any()
    result_cols = [("step (p10-p90 model error)", "step_time_s"), ("tokens/s" if tokens else "samples/s",
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
            return format_number(v)
        if col == "scaling_efficiency":
            return f"{100 * v:.1f} %"
        if col == "memory_total_bytes":
            return format_bytes(v)
        if col == "memory_fits":
            return "yes" if v else "[red]NO[/red]"
        if col in ("usd_per_hour", "cost_usd"):
            return f"${format_number(v)}"
        if col == "time_to_train_days":
            return format_number(v, 1)
        return escape(str(v))

    for row in df.head(_SHOW_ROWS).to_dict(orient="records"):
        cells = ["default" if row.get(a) is None or row.get(a) != row.get(a) else escape(str(row.get(a)))
                 for a in axes]
        cells += [fmt(col, row.get(col)) + _model_error_cell(col, row) for _, col in result_cols]
        table.add_row(*cells)
    console = Console()
    console.print(table)
    if len(df) > _SHOW_ROWS:
        console.print(f"... {len(df) - _SHOW_ROWS} more rows: write them all with -o results.csv (or .parquet, .json)")
