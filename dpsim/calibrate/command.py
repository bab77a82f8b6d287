"""``dpsim calibrate``: measure (or parse nccl-tests logs), fit, print, write atomically."""

from __future__ import annotations

import math
import os
import socket
import sys
from dataclasses import dataclass
from pathlib import Path

from dpsim.calibrate.build import profile_from_nccl_tests, profile_from_results
from dpsim.calibrate.runner import (
    CalibrationPlan,
    default_backend,
    run_local,
    run_torchrun,
    under_torchrun,
)
from dpsim.calibrate.summary import profile_report
from dpsim.errors import ConfigError
from dpsim.profile.io import save_profile
from dpsim.profile.schema import PROFILE_OPS, Profile
from dpsim.workload.catalog import CATALOG_ENTRIES
from dpsim.workload.from_torch import parse_input_shape, parse_model_ref

GPU_SIZES = (8, 2**30, 2.0)
"""nccl-tests' usual sweep on GPUs: 8 B .. 1 GiB, doubling."""
CPU_SIZES = (4 * 2**10, 4 * 2**20, 2.0)
"""A lighter sweep for gloo on CPU: 4 KiB .. 4 MiB, doubling."""


def size_sweep(lo: float, hi: float, factor: float) -> list[int]:
    """Geometric sweep like nccl-tests' ``-b lo -e hi -f factor``."""
    if lo <= 0 or hi < lo:
        raise ConfigError(f"-b/-e: {lo:g}..{hi:g} is not a valid range; need 0 < minbytes <= maxbytes")
    if not (math.isfinite(factor) and factor > 1):
        raise ConfigError(f"-f/--stepfactor: {factor} is not valid; expected a number > 1")
    sizes, s = [], float(lo)
    while s <= hi * (1 + 1e-12):
        sizes.append(int(s))
        s *= factor
    return sizes


def warn(message: str) -> None:
    """One warning line on stderr."""
    print(f"dpsim: warning: {message}", file=sys.stderr)


@dataclass(kw_only=True)
class CalibrateOptions:
    """The CLI's flags (sizes already parsed)."""

    out: str | None = None
    backend: str | None = None
    nproc: int | None = None
    ranks_per_node: int | None = None
    minbytes: float | None = None
    maxbytes: float | None = None
    stepfactor: float | None = None
    ops: list[str] | None = None
    warmup: int | None = None
    iters: int | None = None
    timeout_s: float = 120.0
    compute: bool = True
    dtypes: list[str] | None = None
    model: str | None = None
    micro_batch: int = 1
    seq_len: int | None = None
    input_shape: str | None = None
    name: str | None = None
    description: str = ""
    nccl_tests_logs: list[str] | None = None
    quiet: bool = False


def default_out(name: str) -> str:
    return f"dpsim-calibration-{name}.json"


def run_from_nccl_tests(opts: CalibrateOptions) -> tuple[Profile, Path | None]:
    """Parse and fit nccl-tests logs; write the profile if ``opts.out``."""
    logs = opts.nccl_tests_logs or []
    name = opts.name or (Path(opts.out).stem if opts.out else Path(logs[0]).stem)
    profile = profile_from_nccl_tests(logs, name=name, description=opts.description,
                                      ranks_per_node=opts.ranks_per_node)
    return profile, _finish(profile, opts)


def _finish(profile: Profile, opts: CalibrateOptions) -> Path | None:
    if not opts.quiet:
        print(profile_report(profile))
    for w in profile.warnings:
        warn(w)
    out = opts.out or default_out(profile.name)
    path = save_profile(profile, out)
    if not opts.quiet:
        print(f"# wrote {path}")
    return path


def _validate(opts: CalibrateOptions) -> None:
    if opts.backend is not None and opts.backend not in ("nccl", "gloo"):
        raise ConfigError(f"--backend: {opts.backend!r} is not valid; choose nccl or gloo")
    for flag, value, lo in (("--nproc", opts.nproc, 2), ("--ranks-per-node", opts.ranks_per_node, 1),
                            ("--warmup", opts.warmup, 0), ("--iters", opts.iters, 1),
                            ("--micro-batch", opts.micro_batch, 1), ("--seq-len", opts.seq_len, 1)):
        if value is not None and value < lo:
            raise ConfigError(f"{flag}: {value} is not valid; expected an integer >= {lo}")
    if not (math.isfinite(opts.timeout_s) and opts.timeout_s > 0):
        raise ConfigError(f"--timeout: {opts.timeout_s} is not valid; expected a number of seconds > 0")
    for op in opts.ops or []:
        if op not in PROFILE_OPS:
            raise ConfigError(f"--ops: {op!r} is not valid; choose from {', '.join(PROFILE_OPS)}")
    for dtype in opts.dtypes or []:
        if dtype not in ("float32", "bfloat16", "float16", "float64"):
            raise ConfigError(f"--dtypes: {dtype!r} is not valid; choose from float32, bfloat16, float16, float64")
    if opts.model and ":" not in opts.model:
        if opts.model not in CATALOG_ENTRIES:
            raise ConfigError(f"--model: {opts.model!r} is not a catalog model or a builder (file.py:fn, "
                              f"package.module:fn); catalog: {', '.join(sorted(CATALOG_ENTRIES))}")
    if opts.model and ":" in opts.model:
        ref = parse_model_ref(opts.model)  # the same syntax as predict --model
        if not ref.is_file:
            _check_importable(ref.target)
    if opts.input_shape is not None:
        parse_input_shape(opts.input_shape)
        if not (opts.model and ":" in opts.model):
            raise ConfigError("--input-shape: only for a builder --model (file.py:fn or package.module:fn)")


def _check_importable(module: str) -> None:
    """Fail early, in one line, when the ranks could not import a builder's module.

    The ranks run ``python -m`` from this directory, so it is on their path.
    """
    import importlib.util
    sys.path.insert(0, os.getcwd())
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    finally:
        sys.path.remove(os.getcwd())
    if not found:
        raise ConfigError(f"--model: cannot import module {module!r} (from {os.getcwd()!r} or PYTHONPATH); "
                          "give path/file.py:fn or fix PYTHONPATH")


def build_plan(opts: CalibrateOptions, backend: str):
    gpu = backend == "nccl"
    lo, hi, f = GPU_SIZES if gpu else CPU_SIZES
    sizes = size_sweep(opts.minbytes if opts.minbytes is not None else lo,
                       opts.maxbytes if opts.maxbytes is not None else hi,
                       opts.stepfactor if opts.stepfactor is not None else f)
    if len(sizes) < 2:
        raise ConfigError(f"-b/-e/-f: the sweep {sizes} has {len(sizes)} size; an alpha-beta fit needs at least 2")
    return CalibrationPlan(
        backend=backend, sizes=sizes,
        ops=list(opts.ops) if opts.ops else list(PROFILE_OPS),
        warmup=opts.warmup if opts.warmup is not None else (5 if gpu else 3),
        iters=opts.iters if opts.iters is not None else (20 if gpu else 10),
        batch_s=0.005 if gpu else 0.02,
        max_inner=100 if gpu else 20,
        timeout_s=opts.timeout_s,
        ranks_per_node=opts.ranks_per_node,
        compute=opts.compute,
        dtypes=list(opts.dtypes) if opts.dtypes else (["bfloat16", "float16", "float32"] if gpu else ["float32"]),
        memcpy_bytes=2**30 if gpu else 64 * 2**20,
        overlap_bytes=256 * 2**20 if gpu else 8 * 2**20,
        model=opts.model, micro_batch=opts.micro_batch, seq_len=opts.seq_len,
        input_shape=opts.input_shape,
    )


class _Progress:
    """A rich progress bar on stderr fed by rank events (silent when quiet or not a terminal)."""

    def __init__(self, quiet: bool):
        self.bar = None
        self.task = None
        if quiet:
            return
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )
        console = Console(stderr=True)
        if not console.is_terminal:
            return  # no bar in logs and pipes: the tables and the one-line errors stay clean
        self.bar = Progress(TextColumn("[bold]calibrate[/bold] {task.description}"), BarColumn(),
                            MofNCompleteColumn(), TimeElapsedColumn(), console=console, transient=True)

    def __enter__(self):
        if self.bar:
            self.bar.__enter__()
            self.task = self.bar.add_task("starting ranks", total=None)
        return self

    def __exit__(self, *exc):
        if self.bar:
            self.bar.__exit__(*exc)

    def on_event(self, rank: int, ev: dict) -> None:
        if not self.bar or rank != 0:
            return
        kind = ev.get("event")
        if kind == "plan":
            self.bar.update(self.task, total=ev["total"])
        elif kind == "begin":
            self.bar.update(self.task, description=ev["label"])
        elif kind == "end":
            self.bar.advance(self.task)


def run_calibrate(opts: CalibrateOptions) -> tuple[Profile | None, Path | None]:
    """Measure on this machine (local ranks) or as a torchrun rank; fit; print; write.

    Returns ``(None, None)`` on torchrun ranks other than 0.
    """
    _validate(opts)
    torchrun = under_torchrun()
    detected, n_gpus = default_backend()
    backend = opts.backend or detected
    if backend == "nccl" and n_gpus == 0:
        raise ConfigError("--backend: 'nccl' needs CUDA GPUs and torch sees none; use --backend gloo")
    if torchrun:
        if opts.nproc is not None:
            raise ConfigError("--nproc: not allowed under torchrun; torchrun's --nproc-per-node sets the ranks")
        nproc = int(os.environ["WORLD_SIZE"])
    else:
        nproc = opts.nproc if opts.nproc is not None else (n_gpus if backend == "nccl" else
                                                          max(2, min(4, os.cpu_count() or 2)))
        if backend == "nccl" and nproc > n_gpus:
            raise ConfigError(f"--nproc: {nproc} is more than the {n_gpus} GPU(s) torch sees; NCCL needs one GPU per rank")
        if backend == "nccl" and nproc < 2:
            raise ConfigError(f"--nproc: {nproc} GPU(s); collectives need at least 2 ranks (use --backend gloo)")
        if opts.ranks_per_node is not None and nproc % opts.ranks_per_node:
            raise ConfigError(f"--ranks-per-node: {opts.ranks_per_node} does not divide --nproc {nproc}")
    plan = build_plan(opts, backend)
    host = socket.gethostname().split(".")[0]
    name = opts.name or (Path(opts.out).stem if opts.out else host)
    rank0 = not torchrun or os.environ.get("RANK") == "0"
    with _Progress(opts.quiet or not rank0) as progress:
        if torchrun:
            results = run_torchrun(plan, progress.on_event)
        else:
            results = run_local(plan, nproc, progress.on_event)
    if results is None:
        return None, None
    if not torchrun and backend == "gloo":
        results.setdefault("environment", {})["note"] = (
            f"{nproc} local gloo processes on CPU: measures this host's loopback and CPU, not a GPU fabric")
    profile = profile_from_results(results, name=name, description=opts.description)
    return profile, _finish(profile, opts)
