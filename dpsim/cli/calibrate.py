"""``dpsim calibrate``: the command line of :mod:`dpsim.calibrate` (named in ``dpsim.cli.commands.COMMANDS``)."""

from __future__ import annotations

from typing import Optional

import typer

from dpsim.cli.app import _emit_json
from dpsim.cli.checks import require_torch, size_sweep
from dpsim.cli.panels import CLUSTER, MEASURED_COLLECTIVES, MEASURED_COMPUTE, NCCL_TESTS_LOGS, OUTPUT, REPEATS
from dpsim.errors import ConfigError
from dpsim.wording import canonical_choice, canonical_choices
from dpsim.limits import (
    MAX_CALIBRATE_BYTES,
    MAX_MICRO_BATCH,
    MAX_NPROC,
    MAX_REPEATS,
    MAX_SEQ_LEN,
    MAX_TEXT_CHARS,
    MAX_TIMEOUT_S,
    MIN_TIMEOUT_S,
    check_int,
    check_number,
    short,
)


def _names(raw: Optional[str], flag: str, choices=()) -> Optional[list[str]]:
    """A comma list of ``choices``, each in its canonical letter case (``--ops All_Reduce`` was refused where
    every other choice flag takes any case), refused in one line when an item is empty or repeated."""
    if raw is None:
        return None
    names = canonical_choices([x.strip() for x in raw.split(",")], choices)
    if not all(names):
        # An empty list read as "left out" (every op, the default dtypes): --ops '' measured everything.
        raise ConfigError(f"{flag}: {raw!r} is not valid; give comma-separated names without empty items, or leave "
                          f"{flag} out for the default")
    repeated = sorted({x for x in names if names.count(x) > 1})
    if repeated:
        # --ops all_reduce,all_reduce measured the same sweep twice (minutes on a CPU host), one overwriting the other.
        raise ConfigError(f"{flag}: {raw!r} repeats {', '.join(repeated)}; give each name once")
    return names


def calibrate(
    ctx: typer.Context,
    logs: Optional[list[str]] = typer.Argument(None, help="nccl-tests logs (with --from-nccl-tests)."),
    from_nccl_tests: bool = typer.Option(
        False, "--from-nccl-tests", help="Fit the given nccl-tests logs (all_reduce_perf, all_gather_perf, "
                                         "reduce_scatter_perf, ...) instead of measuring.",
        rich_help_panel=NCCL_TESTS_LOGS),
    out: Optional[str] = typer.Option(
        None, "--out", help="Profile to write, a .json file (atomically; default dpsim-calibration-NAME.json); checked before "
                            "measuring.", rich_help_panel=OUTPUT),
    force: bool = typer.Option(False, "--force", help="Replace an existing --out file.", rich_help_panel=OUTPUT),
    backend: Optional[str] = typer.Option(None, "--backend", help="nccl or gloo (default: nccl if torch sees GPUs).",
                                          rich_help_panel=CLUSTER),
    nproc: Optional[int] = typer.Option(
        None, "--nproc", help="Local ranks (default: every GPU; gloo: up to 4 CPU processes; at most 4 per usable core and what memory holds). Not under torchrun.",
        rich_help_panel=CLUSTER),
    ranks_per_node: Optional[int] = typer.Option(
        None, "--ranks-per-node", help="Treat every K consecutive ranks as one node: when measuring (default: "
                                       "torchrun's node rank GROUP_RANK, else LOCAL_WORLD_SIZE, else the host "
                                       "name) and for nccl-tests logs without a device list. predict takes the "
                                       "profile's ranks per node as its default --gpus-per-node.",
        rich_help_panel=CLUSTER),
    minbytes: Optional[str] = typer.Option(None, "-b", "--minbytes", help="Smallest size (GPU 8, CPU 4K).",
                                           rich_help_panel=MEASURED_COLLECTIVES),
    maxbytes: Optional[str] = typer.Option(None, "-e", "--maxbytes", help="Largest size (GPU 1G, CPU 4M).",
                                           rich_help_panel=MEASURED_COLLECTIVES),
    stepfactor: Optional[float] = typer.Option(None, "-f", "--stepfactor", help="Size factor (default 2).",
                                               rich_help_panel=MEASURED_COLLECTIVES),
    ops: Optional[str] = typer.Option(
        None, "--ops", help="Comma-separated: all_reduce,reduce_scatter,all_gather,broadcast,sendrecv (default all).",
        rich_help_panel=MEASURED_COLLECTIVES),
    warmup: Optional[int] = typer.Option(None, "--warmup", help="Untimed calls per size (GPU 5, CPU 3).",
                                         rich_help_panel=REPEATS),
    iters: Optional[int] = typer.Option(None, "--iters", help="Fewest timed repeats per size and of the model "
                                                             "step (GPU 20, CPU 10).", rich_help_panel=REPEATS),
    max_iters: Optional[int] = typer.Option(None, "--max-iters", help="Most timed repeats (default 5 x --iters).",
                                            rich_help_panel=REPEATS),
    ci: float = typer.Option(0.02, "--ci", help="Repeat until the 95 % interval of every mean is within this "
                                                "fraction of it (0.02 = +-2 %), or --max-iters, or --budget.",
                             rich_help_panel=REPEATS),
    budget: float = typer.Option(120.0, "--budget", help="Seconds of repeats one sweep or the model step may "
                                                         "take beyond --iters.", rich_help_panel=REPEATS),
    timeout: float = typer.Option(120.0, "--timeout", help="Seconds without progress before a dead or hung rank "
                                                         "ends the run.", rich_help_panel=REPEATS),
    compute: bool = typer.Option(True, "--compute/--no-compute", help="Run the compute micro-benchmarks.",
                                 rich_help_panel=MEASURED_COMPUTE),
    fresh_processes: int = typer.Option(3, "--fresh-processes", help="On CPU hosts, also time the --model step in "
                                        "this many fresh processes per rank and take its level from them (a "
                                        "training run is a process of its own); 0: only the calibrating process.",
                                        rich_help_panel=MEASURED_COMPUTE),
    dtypes: Optional[str] = typer.Option(
        None, "--dtypes", help="Matmul dtypes (GPU bfloat16,float16,float32; CPU float32).",
        rich_help_panel=MEASURED_COMPUTE),
    model: Optional[str] = typer.Option(
        None, "--model", help="Time a model's training step (forward, loss, backward, optimizer) layer by layer: "
                              "a catalog name, or path/file.py:fn or package.module:fn returning an nn.Module, "
                              "optionally :input_fn then :loss_fn (as predict --model; else the module's "
                              "example_input() and loss()).", rich_help_panel=MEASURED_COMPUTE),
    optimizer: str = typer.Option("adamw", "--optimizer", help="Optimizer of the model step when the model file "
                                                               "defines no optimizer(parameters): adamw, adam, "
                                                               "sgd-momentum, sgd.",
                                  rich_help_panel=MEASURED_COMPUTE),
    micro_batch: int = typer.Option(1, "--micro-batch", help="Micro-batch of the model benchmark.",
                                    rich_help_panel=MEASURED_COMPUTE),
    seq_len: Optional[int] = typer.Option(None, "--seq-len", help="Sequence length of a catalog token model.",
                                          rich_help_panel=MEASURED_COMPUTE),
    input_shape: Optional[str] = typer.Option(
        None, "--input-shape", help="Example input of a builder --model, as predict takes it (8,3,224,224 or "
                                    "4,1024:int64); the batch becomes --micro-batch.",
        rich_help_panel=MEASURED_COMPUTE),
    name: Optional[str] = typer.Option(None, "--name", help="Profile name (default: the --out file stem).",
                                       rich_help_panel=OUTPUT),
    description: str = typer.Option("", "--description", help="One line stored in the profile.",
                                    rich_help_panel=OUTPUT),
    quiet: bool = typer.Option(False, "--quiet", help="No tables or progress bar; warnings and errors only.",
                               rich_help_panel=OUTPUT),
    as_json: bool = typer.Option(False, "--json", help="Print the written profile as JSON instead of tables.",
                                 rich_help_panel=OUTPUT),
) -> None:
    """Measure collectives and compute with torch (or fit nccl-tests logs) and write a profile for predict.

    Limits, checked before anything runs: --nproc and --ranks-per-node at most 1,024, -b/-e at most 64 GiB
    (buffers are really allocated) and 1,000 sizes, --warmup/--iters at most 10,000, --timeout at most a day.
    """
    from dpsim.calibrate.command import (
        BACKENDS,
        MATMUL_DTYPES,
        OPTIMIZERS,
        CalibrateOptions,
        run_calibrate,
        run_from_nccl_tests,
    )
    from dpsim.profile.schema import PROFILE_OPS
    from dpsim.units import parse_size_bytes
    from dpsim.workload.catalog import CATALOG_ENTRIES

    _check_bounds(nproc=nproc, ranks_per_node=ranks_per_node, minbytes=minbytes, maxbytes=maxbytes,
                  stepfactor=stepfactor, warmup=warmup, iters=iters, timeout=timeout, micro_batch=micro_batch,
                  seq_len=seq_len)
    for flag, text in (("--name", name), ("--description", description)):
        _check_one_line(flag, text)
    if not from_nccl_tests:
        require_torch("dpsim calibrate (measuring; --from-nccl-tests only fits logs)")
    if logs and not from_nccl_tests:
        raise ConfigError(f"LOG: {logs[0]!r} given without --from-nccl-tests; dpsim calibrate measures unless "
                          "--from-nccl-tests is set")
    if from_nccl_tests and not logs:
        raise ConfigError("--from-nccl-tests: no log files given; e.g. dpsim calibrate --from-nccl-tests "
                          "all_reduce_perf.log --out node.json")
    # Flags of a measurement were silently ignored where nothing of theirs runs: a user who gave
    # --model with --no-compute (or with --from-nccl-tests) got a profile without the model step, status 0.
    measuring = {"--backend": backend, "--nproc": nproc, "-b/--minbytes": minbytes, "-e/--maxbytes": maxbytes,
                 "-f/--stepfactor": stepfactor, "--ops": ops, "--warmup": warmup, "--iters": iters,
                 "--max-iters": max_iters, "--dtypes": dtypes, "--model": model, "--seq-len": seq_len,
                 "--input-shape": input_shape}
    if from_nccl_tests:
        # Those with a default of their own were dropped the same way, an invalid value included
        # (--from-nccl-tests LOG --budget -1 or --ci 5 wrote a profile, status 0): refused when given.
        for flag, param, value in (("--ci", "ci", ci), ("--budget", "budget", budget), ("--timeout", "timeout", timeout),
                                   ("--compute" if compute else "--no-compute", "compute", None),
                                   ("--fresh-processes", "fresh_processes", fresh_processes),
                                   ("--optimizer", "optimizer", optimizer), ("--micro-batch", "micro_batch", micro_batch)):
            source = ctx.get_parameter_source(param)
            if source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP"):
                measuring[flag] = flag if value is None else value
    given = [flag for flag, value in measuring.items() if value is not None]
    if from_nccl_tests and given:
        shown = "" if measuring[given[0]] == given[0] else f" {short(measuring[given[0]])}"
        raise ConfigError(f"{given[0]}:{shown} applies to a measurement; --from-nccl-tests "
                          f"only fits the logs given: leave {given[0]} out")
    if not compute:
        skipped = [flag for flag in ("--model", "--dtypes", "--seq-len", "--input-shape") if measuring[flag] is not None]
        if skipped:
            raise ConfigError(f"{skipped[0]}: {short(measuring[skipped[0]])} is measured by the compute benchmarks, "
                              f"which --no-compute turns off; drop --no-compute or {skipped[0]}")
    if not from_nccl_tests and (model is None or not compute):
        # The model step's own settings (they have defaults, so they are told apart by their source): with no
        # --model, or with --no-compute, no step runs and `calibrate --micro-batch 8` or `--optimizer sgd`
        # wrote a profile without a word about them (status 0).
        for flag, param, value in (("--optimizer", "optimizer", optimizer), ("--micro-batch", "micro_batch", micro_batch),
                                   ("--fresh-processes", "fresh_processes", fresh_processes)):
            source = ctx.get_parameter_source(param)
            if source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP"):
                why = "--no-compute turns the model step off" if model is not None else "no --model is given"
                raise ConfigError(f"{flag}: {short(value)} applies to the --model step, and {why}; give --model "
                                  f"(without --no-compute) or leave {flag} out")
    # Every choice in any letter case, as predict's (--backend GLOO, --optimizer AdamW, --model GPT2 were refused).
    backend, optimizer = canonical_choice(backend, BACKENDS), canonical_choice(optimizer, OPTIMIZERS)
    model = canonical_choice(model, CATALOG_ENTRIES) if model is not None and ":" not in model else model
    opts = CalibrateOptions(
        out=out, force=force, backend=backend, nproc=nproc, ranks_per_node=ranks_per_node,
        minbytes=parse_size_bytes(minbytes, "-b/--minbytes") if minbytes is not None else None,
        maxbytes=parse_size_bytes(maxbytes, "-e/--maxbytes") if maxbytes is not None else None,
        stepfactor=stepfactor, ops=_names(ops, "--ops", PROFILE_OPS), warmup=warmup, iters=iters, max_iters=max_iters, ci=ci,
        budget_s=budget, optimizer=optimizer, timeout_s=timeout,
        compute=compute, dtypes=_names(dtypes, "--dtypes", MATMUL_DTYPES), model=model, micro_batch=micro_batch, seq_len=seq_len,
        input_shape=input_shape, fresh_processes=fresh_processes,
        name=name, description=description, nccl_tests_logs=logs, quiet=quiet or as_json,
    )
    if ranks_per_node is not None and ranks_per_node < 1:
        raise ConfigError(f"--ranks-per-node: {ranks_per_node} is not valid; expected an integer >= 1")
    if from_nccl_tests:
        profile, path = run_from_nccl_tests(opts)
    else:
        profile, path = run_calibrate(opts)
    if as_json and profile is not None:
        _emit_json(profile.to_dict())


def _check_one_line(flag: str, text: str | None) -> None:
    """A profile's name and description are shown as one line in tables and in ``# fit:`` headers:
    a newline or control character would break them, and a profile is a file people share."""
    if text is None:
        return
    if len(text) > MAX_TEXT_CHARS or any(not ch.isprintable() for ch in text):
        raise ConfigError(f"{flag}: {short(text)} is not valid; expected one line of printable text, at most "
                          f"{MAX_TEXT_CHARS:,} characters")


def _check_bounds(*, nproc, ranks_per_node, minbytes, maxbytes, stepfactor, warmup, iters, timeout, micro_batch,
                  seq_len) -> None:
    """Every count and size of a calibration within :mod:`dpsim.limits`, before anything is measured."""
    for flag, value, lo, hi in (("--nproc", nproc, 1, MAX_NPROC), ("--ranks-per-node", ranks_per_node, 1, MAX_NPROC),
                                ("--warmup", warmup, 0, MAX_REPEATS), ("--iters", iters, 1, MAX_REPEATS),
                                ("--micro-batch", micro_batch, 1, MAX_MICRO_BATCH),
                                ("--seq-len", seq_len, 1, MAX_SEQ_LEN)):
        if value is not None:
            check_int(value, flag, lo, hi)
    check_number(timeout, "--timeout", MIN_TIMEOUT_S, MAX_TIMEOUT_S, unit=" s")
    if minbytes is not None or maxbytes is not None or stepfactor is not None:
        # Unset ends take the GPU defaults (8 B .. 1 GiB, by 2) for the row count.
        size_sweep(minbytes or "8", maxbytes or "1G", 2.0 if stepfactor is None else stepfactor,
                   max_bytes=MAX_CALIBRATE_BYTES)
