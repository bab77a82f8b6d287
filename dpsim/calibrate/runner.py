"""Orchestration of ``dpsim calibrate``: local processes or a torchrun job, with timeouts.

Two ways to run the same per-rank program (:func:`dpsim.measure.harness.run_rank`):

Local (no ``RANK``/``WORLD_SIZE``/``MASTER_ADDR`` in the environment)
    The CLI process is a supervisor, not a rank: it starts ``nproc`` worker processes
    (``python -m dpsim.calibrate.worker``) with torchrun's variables on 127.0.0.1 and a
    free port, reads their progress lines, and drives the progress bar. A rank that
    exits with an error or a signal, or no progress from any rank for ``timeout_s``
    (at least :data:`STARTUP_GRACE_S` until every rank has started),
    stops every rank (SIGTERM, then SIGKILL) and raises
    :class:`~dpsim.errors.CalibrationError` naming the rank and the step: the
    supervisor never blocks in a collective, so a dead or hung rank cannot hang it.
    Rank 0 hands its results back through a file; only when every rank has exited
    cleanly is anything fitted and written. Ctrl-C or SIGTERM stops every rank and removes
    the working directory on the way out; if the supervisor itself is killed (SIGKILL),
    the kernel kills its ranks (``PR_SET_PDEATHSIG``) and the next calibration removes the
    working directory it left (:func:`reap_stale_workdirs`).

Under torchrun (those variables set)
    This process *is* a rank: it joins the job's process group (gloo or NCCL) and runs
    the program in-process; rank 0 fits and writes the profile. Bounded failure comes
    from the process group's timeout and each rank's watchdog (exit status 3 after
    ``timeout_s`` without progress); torchrun then tears the job down.

Either way the profile is written atomically (:func:`~dpsim.calibrate.profile.save_profile`),
so a failed run leaves an existing file at ``--out`` untouched.
"""

from __future__ import annotations

import json
import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from dpsim.errors import CalibrationError, ConfigError
from dpsim.processes import (  # noqa: F401 - check_torchrun_env and torchrun_count re-exported for command.py
    check_torchrun_env,
    die_with_parent,
    reap_dead_owner_dirs,
    torchrun_count,
)

EVENT_PREFIX = "@@dpsim "
"""Workers print progress events as ``@@dpsim {json}`` lines on stdout."""

TORCHRUN_VARS = ("RANK", "WORLD_SIZE", "MASTER_ADDR")

STARTUP_GRACE_S = 60.0
"""Until every rank has reported once (Python and torch imported), the no-progress limit
is at least this: importing torch on a loaded machine can take longer than --timeout."""


def under_torchrun() -> bool:
    """True when this process was started as one rank of a torchrun/torch.distributed job."""
    return all(os.environ.get(v) for v in TORCHRUN_VARS)



@dataclass(kw_only=True)
class CalibrationPlan:
    """What to measure (JSON-able: it is handed to every rank)."""

    backend: str
    """``nccl`` or ``gloo``."""
    sizes: list[int]
    """Message sizes in bytes (nccl-tests convention)."""
    ops: list[str] = field(default_factory=lambda: ["all_reduce", "reduce_scatter", "all_gather", "broadcast",
                                                    "sendrecv"])
    """Operations to measure."""
    warmup: int = 5
    """Untimed calls per size."""
    iters: int = 20
    """Fewest timed repeats per size (each of ``inner`` calls; median and spread over repeats)
    and of the model step."""
    max_iters: int | None = None
    """Most timed repeats (``None``: ``iters``)."""
    target_rel_ci: float | None = None
    """Repeat until the 95 % interval of each mean is within this fraction of it (``None``: no)."""
    budget_s: float | None = None
    """Seconds of repeats one sweep (or the model step) may take beyond ``iters``."""
    batch_s: float = 0.005
    """Target duration of one repeat (sets ``inner``)."""
    max_inner: int = 100
    """Most calls in one repeat."""
    timeout_s: float = 120.0
    """Longest time without progress before the run is stopped."""
    ranks_per_node: int | None = None
    """Group consecutive ranks into nodes of this size (default: by host name)."""
    compute: bool = True
    """Run the compute micro-benchmarks."""
    dtypes: list[str] = field(default_factory=lambda: ["float32"])
    """Matmul dtypes."""
    matmul_shapes: list[list[int]] | None = None
    """(m, n, k) shapes; default depends on the device."""
    memcpy_bytes: int = 64 * 2**20
    """Copy benchmark buffer."""
    overlap_bytes: int = 8 * 2**20
    """All-reduce size for the overlap benchmark."""
    model: str | None = None
    """Catalog model or builder (``file.py:fn``, ``package.module:fn``) to time layer by layer."""
    micro_batch: int = 1
    """Micro-batch for the model benchmark."""
    seq_len: int | None = None
    """Sequence length override for catalog token models."""
    input_shape: str | None = None
    """Example input of a builder model, predict's syntax (``8,3,224,224``, ``4,1024:int64``);
    its first dimension is replaced by ``micro_batch``."""
    optimizer: str = "adamw"
    """Optimizer of the model step when the model file defines no ``optimizer(parameters)``."""
    model_layers: list[list] | None = None
    """The traced model's layers as ``[module path or "(root)", [parameter names]]``, in
    forward order: the step is split per layer as predict's engine plays it."""
    structure_hash: str | None = None
    """:func:`dpsim.profile.match.model_fingerprint` of the traced model (stored in the profile)."""
    fresh_processes: int = 3
    """Fresh processes per rank that time the model step on a CPU host (0: none)."""
    forward_flops_per_sample: float | None = None
    """The traced model's forward FLOPs per sample (stored in the profile)."""
    seed: int = 0
    """Seed of the model's weights and the example batch."""
    op_kernels: dict | None = None
    """The model's op-graph kernels to time one by one (:func:`dpsim.profile.op_rates.kernels_to_time`);
    ``None``: none (no model, or one known only by its FLOPs)."""
    op_dtype: str = "float32"
    """Dtype the kernels run in: the model step's (bfloat16 under autocast on GPUs, else float32)."""
    op_memory_bytes: list[int] | None = None
    """Bytes the element-wise kernel moves at each size of its launch + bandwidth fit."""

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def step_count(plan: CalibrationPlan) -> int:
    """Rough number of steps (the workers send the exact one)."""
    return len(plan.sizes) * len(plan.ops)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ----------------------------------------------------------------------------- local supervisor


@dataclass
class _Rank:
    rank: int
    proc: subprocess.Popen
    stderr_path: Path
    last_label: str = "start-up"
    last_index: int = -1
    in_step: bool = True
    reported: bool = False


def _reader(rank: int, stream, events: queue.Queue) -> None:
    for raw in iter(stream.readline, ""):
        if raw.startswith(EVENT_PREFIX):
            try:
                events.put((rank, json.loads(raw[len(EVENT_PREFIX):])))
            except json.JSONDecodeError:
                pass
    stream.close()


def _tail(path: Path, n: int = 400) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    lines = [l.strip() for l in text.splitlines() if l.strip() and "Warning" not in l and not l.startswith("warnings.")]
    # the last line of a traceback names the error
    return lines[-1][:n] if lines else ""


_PEER_FAILURE = ("closed by peer", "connection reset", "remote worker", "broken pipe", "aborted", "timed out",
                 "timeout", "econnreset", "distnetworkerror", "distbackenderror", "connection refused")
"""Words of the error a rank raises when a *peer* failed (so it is not the culprit)."""


def _peer_failure(rank: "_Rank") -> bool:
    try:
        text = rank.stderr_path.read_text(encoding="utf-8", errors="replace").lower()
    except OSError:
        return False
    return any(w in text for w in _PEER_FAILURE)


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with status {code}"


def _stop_all(ranks: list[_Rank], grace_s: float = 2.0) -> None:
    for r in ranks:
        if r.proc.poll() is None:
            try:
                r.proc.terminate()
            except OSError:
                pass
    deadline = time.monotonic() + grace_s
    for r in ranks:
        remaining = max(0.0, deadline - time.monotonic())
        try:
            r.proc.wait(timeout=remaining)
        except subprocess.TimeoutExpired:
            try:
                r.proc.kill()
            except OSError:
                pass
            r.proc.wait()


WORKDIR_PREFIX = "dpsim-calibrate-"
"""Working directories are ``<tmp>/dpsim-calibrate-<pid>-<random>``: the process id tells a
leftover of a killed supervisor from a running one."""


def reap_stale_workdirs(tmp: str | None = None) -> list[Path]:
    """Remove the working directories of supervisors that are gone (killed by SIGKILL)."""
    return reap_dead_owner_dirs(WORKDIR_PREFIX, tmp)


def run_local(plan: CalibrationPlan, nproc: int, on_event: Callable[[int, dict], None] | None = None) -> dict:
    """Run ``nproc`` local ranks under supervision; rank 0's raw results."""
    if nproc < 2:
        raise ConfigError(f"--nproc: {nproc} is not valid; collectives need at least 2 ranks")
    reap_stale_workdirs()
    workdir = Path(tempfile.mkdtemp(prefix=f"{WORKDIR_PREFIX}{os.getpid()}-"))
    plan_path = workdir / "plan.json"
    result_path = workdir / "result.json"
    plan_path.write_text(json.dumps(plan.to_dict()))
    port = free_port()
    events: queue.Queue = queue.Queue()
    ranks: list[_Rank] = []
    try:
        for rank in range(nproc):
            env = dict(os.environ)
            env.update({
                "RANK": str(rank), "WORLD_SIZE": str(nproc), "LOCAL_RANK": str(rank),
                "LOCAL_WORLD_SIZE": str(nproc), "GROUP_RANK": "0", "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(port), "PYTHONUNBUFFERED": "1", "PYTHONWARNINGS": "ignore",
            })
            if rank:
                env.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
            stderr_path = workdir / f"rank{rank}.stderr"
            with open(stderr_path, "w") as stderr:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "dpsim.calibrate.worker", str(plan_path), str(result_path)],
                    stdout=subprocess.PIPE, stderr=stderr, stdin=subprocess.DEVNULL,
                    env=env, text=True, bufsize=1, preexec_fn=die_with_parent,
                    # Ctrl-C in a terminal signals the whole foreground group: the ranks ignore it
                    # and the supervisor stops them in order (SIGTERM, then SIGKILL).
                    start_new_session=True,
                )
            ranks.append(_Rank(rank=rank, proc=proc, stderr_path=stderr_path))
            threading.Thread(target=_reader, args=(rank, proc.stdout, events), daemon=True).start()
        _supervise(ranks, events, plan.timeout_s, on_event)
        try:
            return json.loads(result_path.read_text())
        except (OSError, json.JSONDecodeError):
            raise CalibrationError("calibrate: rank 0 finished without results; no profile written") from None
    finally:
        _stop_all(ranks)
        shutil.rmtree(workdir, ignore_errors=True)


def _supervise(ranks: list[_Rank], events: queue.Queue, timeout_s: float,
               on_event: Callable[[int, dict], None] | None) -> None:
    last_progress = time.monotonic()
    exit_seen: dict[int, float] = {}
    while True:
        try:
            while True:
                rank, ev = events.get(timeout=0.1)
                last_progress = time.monotonic()
                r = ranks[rank]
                r.reported = True
                if ev.get("event") in ("begin", "end"):
                    r.last_label, r.last_index = ev["label"], ev["index"]
                    r.in_step = ev["event"] == "begin"
                if on_event:
                    on_event(rank, ev)
        except queue.Empty:
            pass
        codes = [r.proc.poll() for r in ranks]
        now = time.monotonic()
        for r, c in zip(ranks, codes):
            if c is not None:
                exit_seen.setdefault(r.rank, now)
        failed = [r for r, c in zip(ranks, codes) if c not in (None, 0)]
        if failed:
            time.sleep(0.5)  # let the rank that died first exit too, not only the peers it took down
            for r in ranks:
                if r.proc.poll() is not None:
                    exit_seen.setdefault(r.rank, time.monotonic())
            failed = [r for r in ranks if r.proc.poll() not in (None, 0)]
            # the culprit: killed by a signal, else not complaining about a peer, else first seen, else lowest
            culprit = min(failed, key=lambda r: (r.proc.returncode >= 0, _peer_failure(r), exit_seen[r.rank], r.rank))
            code = culprit.proc.returncode
            detail = _tail(culprit.stderr_path)
            _stop_all(ranks)
            raise CalibrationError(
                f"calibrate: rank {culprit.rank} {_describe_exit(code)} during {culprit.last_label}"
                + (f" ({detail})" if detail else "")
                + "; stopped the other ranks; no profile written")
        if all(c == 0 for c in codes):
            return
        idle = time.monotonic() - last_progress
        limit = timeout_s if all(r.reported for r in ranks) else max(timeout_s, STARTUP_GRACE_S)
        if idle > limit:
            behind = min(ranks, key=lambda r: r.last_index)
            ahead = max(r.last_index for r in ranks)
            if behind.last_index < ahead:
                who = f"rank {behind.rank} stopped after {behind.last_label} while others went on"
            else:
                who = f"all ranks stuck in {behind.last_label}"
            _stop_all(ranks)
            raise CalibrationError(f"calibrate: no progress for {idle:.0f} s (--timeout {timeout_s:g}"
                                   f"{'' if limit == timeout_s else f', {limit:g} s at start-up'}): {who}; "
                                   "a rank has hung; stopped all ranks; no profile written")


# ----------------------------------------------------------------------------- torchrun


def run_torchrun(plan: CalibrationPlan, on_event: Callable[[int, dict], None] | None = None) -> dict | None:
    """Run this process as one rank of the surrounding job; rank 0 gets the raw results."""
    from dpsim.measure.harness import run_rank

    def emit(ev: dict) -> None:
        if on_event and int(os.environ.get("RANK", "0")) == 0:
            on_event(0, ev)

    try:
        return run_rank(plan.to_dict(), emit)
    except Exception as exc:  # a peer died: gloo/NCCL raise; make it one line
        msg = " ".join(str(exc).split())[:300]
        raise CalibrationError(f"calibrate: rank {os.environ.get('RANK')}: {type(exc).__name__}: {msg}; "
                               "no profile written") from None


def worker_main(argv: list[str]) -> int:
    """Entry point of one local worker (``python -m dpsim.calibrate.worker PLAN RESULT``)."""
    plan_path, result_path = argv
    plan = json.loads(Path(plan_path).read_text())
    from dpsim.measure.harness import run_rank

    def emit(ev: dict) -> None:
        sys.stdout.write(EVENT_PREFIX + json.dumps(ev) + "\n")
        sys.stdout.flush()

    result = run_rank(plan, emit)
    if result is not None:
        tmp = Path(result_path + ".tmp")
        tmp.write_text(json.dumps(result))
        os.replace(tmp, result_path)
    return 0


def default_backend() -> tuple[str, int]:
    """(backend, local device count): NCCL when torch sees CUDA GPUs, else gloo."""
    import torch
    import torch.distributed as dist
    if torch.cuda.is_available() and torch.cuda.device_count() > 0 and dist.is_nccl_available():
        return "nccl", torch.cuda.device_count()
    return "gloo", 0
