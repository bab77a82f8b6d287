"""``dpsim calibrate``: measure (or parse nccl-tests logs), fit, print, write atomically."""

from __future__ import annotations

import math
import os
import socket
import sys
from pathlib import Path

from dpsim.calibrate.build import profile_from_nccl_tests, profile_from_results
from dpsim.calibrate.runner import (
    CalibrationPlan,
    check_torchrun_env,
    default_backend,
    run_local,
    run_torchrun,
    torchrun_count,
    under_torchrun,
)
from dpsim.calibrate.summary import profile_report
from dpsim.errors import ConfigError
from dpsim.files import path_kind, refuse_special_output
from dpsim.frozen import frozen_dataclass
from dpsim.hardware import get_gpu
from dpsim.limits import MAX_FRESH_PROCESSES, MAX_REPEATS, MAX_TIMEOUT_S, MIN_TIMEOUT_S, check_number
from dpsim.memory import HOST_MEMORY_SHARE, check_cpu_ranks_fit, memory_breakdown
from dpsim.memory import host_available_bytes as _available_memory_bytes
from dpsim.profile.io import save_profile
from dpsim.profile.match import model_fingerprint
from dpsim.profile.op_rates import MEMORY_KERNEL_BYTES, kernels_to_time
from dpsim.profile.schema import PROFILE_OPS, Profile
from dpsim.units import format_bytes
from dpsim.wording import warn
from dpsim.wording import count
from dpsim.workload.catalog import CATALOG_ENTRIES, get_model
from dpsim.workload.from_torch import load_torch_workload
from dpsim.workload.model_ref import is_torch_model_ref, parse_input_shape, parse_model_ref
from dpsim.workload.precision import get_precision
from dpsim.workload.spec import ModelSpec

OPTIMIZERS = ("adamw", "adam", "sgd-momentum", "sgd")
"""``--optimizer`` names (predict's, :data:`dpsim.measure.trainstep.OPTIMIZERS`; this module does not import torch)."""
BACKENDS = ("nccl", "gloo")
"""``--backend`` values: NCCL on GPUs, gloo on CPUs."""
MATMUL_DTYPES = ("float32", "bfloat16", "float16", "float64")
"""``--dtypes`` values the matmul benchmark times."""

GPU_SIZES = (8, 2**30, 2.0)
"""nccl-tests' usual sweep on GPUs: 8 B .. 1 GiB, doubling."""
CPU_SIZES = (4 * 2**10, 32 * 2**20, 2.0)
"""A lighter sweep for gloo on CPU: 4 KiB .. 32 MiB, doubling (past DDP's 25 MiB buckets,
``torch.nn.parallel.DistributedDataParallel``'s ``bucket_cap_mb`` default)."""
MAX_MODEL_SWEEP_BYTES = 2**30
"""A model's gradients extend the sweep up to this (beyond, buckets are extrapolated)."""


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


@frozen_dataclass
class CalibrateOptions:
    """What ``dpsim calibrate`` is asked (the CLI's flags, sizes already parsed), checked by :func:`run_calibrate`."""

    out: str | None = None
    """Profile to write (atomically; default dpsim-calibration-NAME.json). Checked before measuring:
    its directory must exist and be writable, and an existing file is replaced only with --force."""
    force: bool = False
    """Replace an existing --out file."""
    backend: str | None = None
    """nccl or gloo (default: nccl if torch sees GPUs)."""
    nproc: int | None = None
    """Local ranks (default: every GPU; gloo: up to 4 CPU processes). Not under torchrun."""
    ranks_per_node: int | None = None
    """Treat every K consecutive ranks as one node. Default: torchrun's node rank (GROUP_RANK),
    else blocks of LOCAL_WORLD_SIZE, else the host name. With --from-nccl-tests: the ranks per
    node of logs without a device list. predict then takes it as its default --gpus-per-node."""
    minbytes: float | None = None
    """Smallest size (GPU 8, CPU 4K)."""
    maxbytes: float | None = None
    """Largest size (GPU 1G, CPU 32M; with --model, at least the model's gradient bytes, the
    largest bucket DDP can make)."""
    stepfactor: float | None = None
    """Size factor (default 2)."""
    ops: list[str] | None = None
    """Operations to measure (default all)."""
    warmup: int | None = None
    """Untimed calls per size (GPU 5, CPU 3)."""
    iters: int | None = None
    """Fewest timed repeats per size and of the model step (GPU 20, CPU 10)."""
    max_iters: int | None = None
    """Most timed repeats (default 5 x --iters)."""
    ci: float = 0.02
    """Repeat until the 95 % interval of every mean is within this fraction of it (0.02 = +-2 %),
    or --max-iters, or --budget."""
    budget_s: float = 120.0
    """Seconds of timed repeats one sweep or the model step may take beyond --iters."""
    timeout_s: float = 120.0
    """Seconds without progress before a dead or hung rank ends the run."""
    compute: bool = True
    """Run the compute micro-benchmarks."""
    dtypes: list[str] | None = None
    """Matmul dtypes (GPU bfloat16,float16,float32; CPU float32)."""
    model: str | None = None
    """Time this model's training step (forward, loss, backward, optimizer) layer by layer: a
    catalog name, or path/file.py:fn, package.module:fn (optionally :input_fn, then :loss_fn), as
    predict --model takes it."""
    micro_batch: int = 1
    """Micro-batch of the model step."""
    fresh_processes: int = 3
    """On CPU hosts, also time the model step in this many fresh processes per rank, spread over the
    calibration's start, middle and end, and take its level from them (a training run is a
    process of its own; 0: only the calibrating process)."""
    seq_len: int | None = None
    """Sequence length of a catalog token model."""
    input_shape: str | None = None
    """Example input of a builder --model, as predict takes it (8,3,224,224 or 4,1024:int64); the
    batch becomes --micro-batch."""
    optimizer: str = "adamw"
    """Optimizer of the model step when the model file defines no optimizer(parameters): adamw,
    adam, sgd-momentum or sgd (predict's names)."""
    name: str | None = None
    """Profile name (default: the --out file stem)."""
    description: str = ""
    """One line stored in the profile."""
    nccl_tests_logs: list[str] | None = None
    """nccl-tests logs to fit instead of measuring (--from-nccl-tests)."""
    quiet: bool = False
    """No tables or progress bar; warnings and errors only."""


def default_out(name: str) -> str:
    return f"dpsim-calibration-{name}.json"


def profile_name(name: str | None, out: str | None, fallback: str, fallback_flag: str) -> str:
    """``--name``, else the ``--out`` file stem, else ``fallback``; a stem that is not one printable
    line (the loader refuses such a name) is refused here, naming the flag it came from."""
    if name is not None:
        if not name.strip():
            # --name '' fell back to the --out file's stem in silence ('' read as "not given").
            raise ConfigError(f"--name: {name!r} is not valid; expected a non-empty profile name, or leave --name "
                              f"out for the --out file's stem")
        return name
    stem, flag = (Path(out).stem, "--out") if out else (fallback, fallback_flag)
    if not stem.isprintable():
        raise ConfigError(f"{flag}: its name {stem!r} would name the profile, which must be one line of printable "
                          f"text; give --name")
    return stem


def run_from_nccl_tests(opts: CalibrateOptions) -> tuple[Profile, Path | None]:
    """Parse and fit nccl-tests logs; write the profile (``opts.out`` or the default name)."""
    logs = opts.nccl_tests_logs or []
    name = profile_name(opts.name, opts.out, Path(logs[0]).stem if logs else "", "--from-nccl-tests")
    if opts.out is not None:
        check_out(opts.out, force=opts.force, inputs=tuple(("--from-nccl-tests", log) for log in logs))
    profile = profile_from_nccl_tests(logs, name=name, description=opts.description,
                                      ranks_per_node=opts.ranks_per_node)
    return profile, _finish(profile, opts)


def check_out(out: str | Path, *, force: bool, inputs: tuple[tuple[str, str | Path], ...] = ()) -> Path:
    """``--out`` before any measurement: a ``.json`` file name (not a directory) whose directory exists
    and is writable; not an existing file unless ``force``; never one of the ``inputs`` ((flag, path)
    pairs) the command reads. One :class:`ConfigError` line otherwise."""
    p = Path(out)
    for flag, source in inputs:
        # --out LOG --force replaced the nccl-tests log being fitted (--out net.py, the model's code).
        try:
            same = os.path.samefile(p, source)
        except (OSError, ValueError):
            same = False
        if same:
            raise ConfigError(f"--out: {str(out)!r} is the {flag} file it reads; writing the profile would "
                              f"replace it; choose another --out")
    if str(out).strip() == "" or p.name in ("", ".", ".."):
        raise ConfigError(f"--out: {str(out)!r} is not a file name; give e.g. --out node.json")
    # path_kind, not exists()/is_dir(): those raise for a name too long for the file system.
    kind = path_kind(p, "--out")
    if kind == "dir":
        raise ConfigError(f"--out: {str(out)!r} is a directory; give a file name, e.g. {p / 'profile.json'}")
    refuse_special_output(p, "--out")  # --out /dev/zero --force replaced the device with the profile
    if p.suffix.lower() != ".json":
        # As --html and plan's -o refuse a file of another kind: a profile is read back by its .json name
        # (a mix file's calibration, a --calibration that is no existing file, are paths only when they end
        # in .json; a bare NAME is a shipped profile's name), and `--out node` wrote a file 'node' that read
        # as a preset name.
        raise ConfigError(f"--out: {str(out)!r} is not a .json file; give a path ending in .json, e.g. "
                          f"{str(p.with_name(p.name + '.json')) if p.name else 'node.json'}")
    parent = p.parent if str(p.parent) else Path(".")
    # A missing directory is refused, as every other output refuses it (dpsim.files.check_output_path):
    # a typo in it would otherwise leave the profile in a directory tree nobody meant to create.
    parent_kind = path_kind(parent, "--out")
    if parent_kind is None:
        raise ConfigError(f"--out: directory {str(parent)!r} does not exist; create it or choose another --out")
    if parent_kind != "dir":
        raise ConfigError(f"--out: {str(parent)!r} is a file, not a directory; choose another --out")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ConfigError(f"--out: directory {str(parent)!r} is not writable; choose another --out")
    if kind is not None and not force:
        raise ConfigError(f"--out: {str(out)!r} already exists; pass --force to replace it (atomically, once "
                          "the new profile is complete) or choose another --out")
    if kind is not None and not os.access(p, os.W_OK):
        raise ConfigError(f"--out: {str(out)!r} is not writable; choose another --out")
    return p


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
    if opts.backend is not None and opts.backend not in BACKENDS:
        raise ConfigError(f"--backend: {opts.backend!r} is not valid; choose nccl or gloo")
    for flag, value, lo in (("--nproc", opts.nproc, 2), ("--ranks-per-node", opts.ranks_per_node, 1),
                            ("--warmup", opts.warmup, 0), ("--iters", opts.iters, 1),
                            ("--max-iters", opts.max_iters, 1),
                            ("--micro-batch", opts.micro_batch, 1), ("--seq-len", opts.seq_len, 1),
                            ("--fresh-processes", opts.fresh_processes, 0)):
        if value is not None and value < lo:
            raise ConfigError(f"{flag}: {value} is not valid; expected an integer >= {lo}")
    if opts.fresh_processes > MAX_FRESH_PROCESSES:
        raise ConfigError(f"--fresh-processes: {opts.fresh_processes} is not valid; expected an integer from 0 to "
                          f"{MAX_FRESH_PROCESSES}")
    if opts.max_iters is not None and opts.max_iters > MAX_REPEATS:
        raise ConfigError(f"--max-iters: {opts.max_iters} is not valid; expected an integer <= {MAX_REPEATS:,}")
    if opts.max_iters is not None and opts.iters is not None and opts.max_iters < opts.iters:
        raise ConfigError(f"--max-iters: {opts.max_iters} is not valid; expected at least --iters ({opts.iters})")
    check_number(opts.timeout_s, "--timeout", MIN_TIMEOUT_S, MAX_TIMEOUT_S, unit=" s")
    if not (math.isfinite(opts.ci) and 0 < opts.ci < 1):
        raise ConfigError(f"--ci: {opts.ci} is not valid; expected a fraction in (0, 1), e.g. 0.02 for +-2 %")
    if not (math.isfinite(opts.budget_s) and 0 < opts.budget_s <= MAX_TIMEOUT_S):
        raise ConfigError(f"--budget: {opts.budget_s} is not valid; expected a number of seconds > 0 and "
                          f"<= {MAX_TIMEOUT_S:g}")
    if opts.optimizer not in OPTIMIZERS:
        raise ConfigError(f"--optimizer: {opts.optimizer!r} is not valid; choose one of {', '.join(OPTIMIZERS)}")
    for op in opts.ops or []:
        if op not in PROFILE_OPS:
            raise ConfigError(f"--ops: {op!r} is not valid; choose from {', '.join(PROFILE_OPS)}")
    for dtype in opts.dtypes or []:
        if dtype not in MATMUL_DTYPES:
            raise ConfigError(f"--dtypes: {dtype!r} is not valid; choose from {', '.join(MATMUL_DTYPES)}")
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


def build_plan(opts: CalibrateOptions, backend: str, model: ModelSpec | None = None) -> CalibrationPlan:
    """What the ranks measure: the size sweep (past the model's largest bucket), repeats, the model step."""
    gpu = backend == "nccl"
    lo, hi, f = GPU_SIZES if gpu else CPU_SIZES
    hi = opts.maxbytes if opts.maxbytes is not None else hi
    factor = opts.stepfactor if opts.stepfactor is not None else f
    sizes = size_sweep(opts.minbytes if opts.minbytes is not None else lo, hi, factor)
    if len(sizes) < 2:
        raise ConfigError(f"-b/-e/-f: the sweep {sizes} has {len(sizes)} size; an alpha-beta fit needs at least 2")
    largest = _largest_bucket_bytes(model) if model is not None else 0
    if largest > sizes[-1]:
        if opts.maxbytes is None:
            # DDP's largest bucket can hold every gradient (a large --bucket-cap-mb): measure it,
            # do not extrapolate to it.
            while sizes[-1] < min(largest, MAX_MODEL_SWEEP_BYTES):
                sizes.append(int(sizes[-1] * factor))
        else:
            warn(f"-e/--maxbytes: {format_bytes(sizes[-1])} is below the model's {format_bytes(largest)} of "
                 "gradients; buckets larger than the sweep will be extrapolated by predict")
    iters = opts.iters if opts.iters is not None else (20 if gpu else 10)
    grad_bytes = largest
    return CalibrationPlan(
        backend=backend, sizes=sizes,
        ops=list(opts.ops) if opts.ops else list(PROFILE_OPS),
        warmup=opts.warmup if opts.warmup is not None else (5 if gpu else 3),
        iters=iters,
        max_iters=opts.max_iters if opts.max_iters is not None else 5 * iters,
        target_rel_ci=opts.ci,
        budget_s=opts.budget_s,
        batch_s=0.005 if gpu else 0.02,
        max_inner=100 if gpu else 20,
        timeout_s=opts.timeout_s,
        ranks_per_node=opts.ranks_per_node,
        compute=opts.compute,
        dtypes=list(opts.dtypes) if opts.dtypes else (["bfloat16", "float16", "float32"] if gpu else ["float32"]),
        memcpy_bytes=2**30 if gpu else max(2**20, min(64 * 2**20, grad_bytes or 64 * 2**20)),
        overlap_bytes=(256 * 2**20 if gpu else 8 * 2**20) if not grad_bytes
        else int(min(25 * 2**20, max(2**20, grad_bytes // 2))) // 4 * 4,
        model=opts.model, micro_batch=opts.micro_batch, seq_len=opts.seq_len,
        input_shape=opts.input_shape, optimizer=opts.optimizer, fresh_processes=opts.fresh_processes,
        model_layers=[[layer.name, [p.name for p in layer.params]] for layer in model.layers]
        if model is not None and is_torch_model_ref(opts.model or "") else None,
        structure_hash=model_fingerprint(model) if model is not None else None,
        forward_flops_per_sample=model.forward_flops_per_sample if model is not None else None,
        op_kernels=_op_kernels(model, opts.micro_batch) if model is not None else None,
        op_dtype="bfloat16" if gpu else "float32",  # the model step's dtype (bench_step: autocast on GPUs)
        op_memory_bytes=list(MEMORY_KERNEL_BYTES),
    )


def _op_kernels(model: ModelSpec, micro_batch: int) -> dict | None:
    """The model's op-graph kernels to time, or ``None`` for a model known only by its FLOPs."""
    kernels = kernels_to_time(model, micro_batch)
    return kernels if kernels["matmul"] or kernels["attention"] else None


def _largest_bucket_bytes(model: ModelSpec) -> int:
    """The largest bucket DDP can make of ``model``'s float32 gradients: all of them (with a
    ``bucket_cap_mb`` above their total)."""
    return int(sum(p.numel for p in model.params) * 4)


def trace_model(opts: CalibrateOptions) -> ModelSpec | None:
    """The ``--model`` as predict sees it (traced on the meta device, or the catalog's), before
    any rank starts: a model that cannot be built or traced fails here, in one line."""
    if not opts.model or not opts.compute:
        return None
    if not is_torch_model_ref(opts.model):
        return get_model(opts.model, seq_len=opts.seq_len, flash_attention=True)
    # package.module:fn is found from this directory, as the ranks (python -m, from here) find it;
    # the loss part of the reference names a function the trace does not need
    return load_torch_workload(opts.model, input_shape=opts.input_shape)


LOCAL_RANKS_PER_CORE = 4
"""Local gloo ranks allowed per core this process may run on. Past a few ranks per core a
collective's time measures the scheduler dealing out the cores, not the transport: VALIDATION
part 1 ran up to 8 ranks on 2 cores (4 per core) and had to leave the step after a wait
uncharged there (:func:`dpsim.profile.schema.ranks_share_cores`); more than that calibrates nothing."""

RANK_PROCESS_BYTES = 256 * 2**20
"""Resident memory of one local gloo rank before its buffers: Python, torch 2.13 (CPU build) and a
gloo process group, measured here at 225 MiB peak RSS (``ru_maxrss`` after ``init_process_group`` and
a 4 MiB all-reduce), rounded up."""


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity, which containers and ``taskset`` narrow)."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def local_rank_capacity(largest_buffer_bytes: float) -> tuple[int, str]:
    """How many local gloo ranks this machine can run, and what sets the bound (cores or memory).

    Each rank holds its process (:data:`RANK_PROCESS_BYTES`) and a collective's input and output
    buffers of up to ``largest_buffer_bytes`` each.
    """
    cores = usable_cores()
    by_cores = LOCAL_RANKS_PER_CORE * cores
    available = _available_memory_bytes()
    per_rank = RANK_PROCESS_BYTES + 2.0 * largest_buffer_bytes
    by_memory = int(available * 0.9 // per_rank) if available is not None else by_cores
    if by_memory < by_cores:
        return by_memory, (f"{format_bytes(available)} of available memory at about {format_bytes(per_rank)} "
                           f"per rank (the process and its largest collective buffers)")
    return by_cores, f"{cores} usable core{'s' if cores != 1 else ''} x {LOCAL_RANKS_PER_CORE} ranks per core"


def check_local_ranks(nproc: int, opts: CalibrateOptions) -> None:
    """Refuse, before any rank starts, more local gloo ranks than this machine can run."""
    hi = opts.maxbytes if opts.maxbytes is not None else CPU_SIZES[1]
    limit, why = local_rank_capacity(max(hi, 64 * 2**20))
    if nproc > limit:
        flag = "--nproc" if opts.nproc is not None else "the default ranks"
        raise ConfigError(f"{flag}: {nproc} local gloo ranks is more than this machine can run ({limit}: {why}); "
                          f"use --nproc {max(2, limit)} or fewer, or run under torchrun across hosts")


def check_memory(model: ModelSpec, opts: CalibrateOptions, *, backend: str, ranks_here: int,
                 device_memory_bytes: float | None) -> None:
    """Refuse, before starting, a model step that cannot fit: on CPU the ranks of this host share
    its available RAM; on a GPU each rank has its device's memory."""
    if backend != "nccl":
        check_cpu_ranks_fit(model, name=opts.model, optimizer=opts.optimizer, micro_batch=opts.micro_batch,
                            ranks=ranks_here, fewer="fewer ranks (--nproc)", available_bytes=_available_memory_bytes())
        return
    breakdown = memory_breakdown(model, get_gpu("h100"), precision=get_precision("bf16-mixed"),
                                 optimizer=opts.optimizer, micro_batch=opts.micro_batch)
    need, have = breakdown.total_bytes, device_memory_bytes
    if have is None or need <= have * HOST_MEMORY_SHARE:
        return
    raise ConfigError(
        f"--model: {opts.model} at --micro-batch {opts.micro_batch} needs about {format_bytes(need)} per rank "
        f"(weights, gradients, {opts.optimizer} state, activations); each GPU has {format_bytes(have)}; "
        "use a smaller --micro-batch or model")


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
        elif kind == "grow":
            total = self.bar.tasks[0].total
            if total is not None:
                self.bar.update(self.task, total=total + ev["by"])
        elif kind == "begin":
            self.bar.update(self.task, description=ev["label"])
        elif kind == "end":
            self.bar.advance(self.task)


def run_calibrate(opts: CalibrateOptions) -> tuple[Profile | None, Path | None]:
    """Measure on this machine (local ranks) or as a torchrun rank; fit; print; write.

    Everything that can be checked is checked before a rank starts: the flags, ``--out``
    (rank 0), the model (traced as predict traces it) and whether its step fits in memory.
    Returns ``(None, None)`` on torchrun ranks other than 0.
    """
    _validate(opts)
    torchrun = under_torchrun()
    if torchrun:
        check_torchrun_env()
    rank0 = not torchrun or os.environ.get("RANK") == "0"
    if torchrun and not rank0:
        # one copy of torch's C++ warnings (gloo's host-name lookups), not one per rank
        os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    host = socket.gethostname().split(".")[0]
    name = profile_name(opts.name, opts.out, host, "the host name")
    if rank0:
        model_file = opts.model.split(":", 1)[0] if opts.model and is_torch_model_ref(opts.model) else None
        check_out(opts.out or default_out(name), force=opts.force,
                  inputs=(("--model", model_file),) if model_file and model_file.endswith(".py") else ())
    detected, n_gpus = default_backend()
    backend = opts.backend or detected
    if backend == "gloo" and opts.compute and opts.dtypes and "float32" not in opts.dtypes:
        # predict costs a CPU profile's compute in float32 alone (check_cpu_compute): --dtypes float16 on CPUs wrote a
        # profile every predict refused ("gpu 'cpu': no achieved rate for dtype 'float32-highest'").
        raise ConfigError(f"--dtypes: {','.join(opts.dtypes)} leaves out float32, the only dtype predict costs a CPU "
                          f"profile's compute in (--backend gloo); add float32 (e.g. --dtypes float32)")
    if backend == "nccl" and n_gpus == 0:
        raise ConfigError("--backend: 'nccl' needs CUDA GPUs and torch sees none; use --backend gloo")
    if torchrun:
        if opts.nproc is not None:
            raise ConfigError("--nproc: not allowed under torchrun; torchrun's --nproc-per-node sets the ranks")
        nproc = torchrun_count("WORLD_SIZE")
        ranks_here = torchrun_count("LOCAL_WORLD_SIZE", default=1)
    else:
        nproc = opts.nproc if opts.nproc is not None else (n_gpus if backend == "nccl" else
                                                          max(2, min(4, os.cpu_count() or 2)))
        if backend == "nccl" and nproc > n_gpus:
            raise ConfigError(f"--nproc: {nproc} is more than the {count(n_gpus, 'GPU')} torch sees; NCCL needs one GPU per rank")
        if backend == "nccl" and nproc < 2:
            raise ConfigError(f"--nproc: {count(nproc, 'GPU')}; collectives need at least 2 ranks (use --backend gloo)")
        if opts.ranks_per_node is not None and nproc % opts.ranks_per_node:
            raise ConfigError(f"--ranks-per-node: {opts.ranks_per_node} does not divide --nproc {nproc}")
        ranks_here = nproc
        if backend == "gloo":
            check_local_ranks(nproc, opts)
    model = trace_model(opts)
    if model is not None:
        check_memory(model, opts, backend=backend, ranks_here=ranks_here,
                     device_memory_bytes=_device_memory_bytes() if backend == "nccl" else None)
    plan = build_plan(opts, backend, model)
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


def _device_memory_bytes() -> float | None:
    import torch
    return float(torch.cuda.get_device_properties(0).total_memory) if torch.cuda.is_available() else None
