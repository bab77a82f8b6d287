"""The torch micro-benchmarks every rank runs (the only calibrate module importing torch).

:func:`run_rank` is one rank's whole calibration. It joins the process group described
by the usual torchrun variables (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``MASTER_ADDR``, ``MASTER_PORT``), whether torchrun or :mod:`dpsim.calibrate.runner`
set them, so the local gloo run, a local NCCL run and a multi-node torchrun are the
same code with another backend.

Collectives
    Every op in the plan over a geometric size sweep, like nccl-tests: ``size`` is the
    whole buffer (all-gather output, reduce-scatter input), float32 elements, rounded
    down to whole elements (and to a multiple of the ranks for gather/scatter). For
    each size: ``warmup`` calls and one timed call to estimate the cost; then ``iters``
    rounds, each timing every size once (sizes interleaved, so a burst of outside load
    hits all sizes alike rather than a few): a barrier, then ``inner`` back-to-back
    calls (``inner`` makes a repeat last about ``batch_s``; all ranks agree on it
    through a MAX all-reduce). A repeat's time is the slowest rank's (a collective ends when its
    last rank does), and the profile keeps the median, min, max and quartiles. On GPU
    the time comes from CUDA events on the current stream (which waits for NCCL's), on
    CPU from ``time.perf_counter``.

    With several nodes, ``intra_node`` is measured on one communicator per node (all
    nodes at once, as DDP's intra-node rings would run) and ``inter_node`` on the whole
    world. ``sendrecv`` is a ping-pong between two ranks (node 0's first two for
    intra-node, the first rank of nodes 0 and 1 for inter-node); its time is half the
    round trip, the one-way alpha + S/B of the DESIGN's point-to-point model.

Compute (per rank, concurrently; the profile keeps the median over ranks)
    matmul FLOP/s per dtype over a few shapes (``2*m*n*k / t``; float32 with TF32
    allowed on GPU, as the GPU presets define it); device copy bandwidth
    (``2 * bytes / t``: read plus write); a real model's forward/backward, whole and
    per module (forward pre/post hooks and full backward pre/post hooks), with every timed
    repeat's forward+backward time kept per rank (the profile's ``step_time_cv``: each
    rank's std/mean over the repeats after warm-up, the median over ranks); and the
    overlap interference: the same matmul loop alone and while all-reduces run
    concurrently, ``slowdown = t_concurrent / t_alone - 1``.

A watchdog thread ends the rank (exit status 3, one line on stderr) when no step has
progressed for ``timeout_s``; the process group's own timeout is a little longer.
``DPSIM_CALIBRATE_FAULT=die:RANK:STEP`` or ``hang:RANK:STEP`` makes a rank die or hang
when it reaches a step, for testing those paths.
"""

from __future__ import annotations

import datetime
import importlib
import math
import os
import platform
import socket
import statistics
import sys
import threading
import time
from typing import Any, Callable

import torch
import torch.distributed as dist

Emit = Callable[[dict], None]

ELEMENT = torch.float32
ELEMENT_BYTES = 4
COLLECTIVE_OPS = ("all_reduce", "reduce_scatter", "all_gather", "broadcast")

_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


# ----------------------------------------------------------------------------- plumbing


STARTUP_GRACE_S = 60.0
"""Joining the process group may take at least this long (ranks of a multi-node job
start at different times) whatever ``timeout_s`` is."""


class Watchdog:
    """Ends the process when no step has begun or ended for ``timeout_s`` seconds.

    Until the first step has ended (the process group is up) the limit is at least
    :data:`STARTUP_GRACE_S`.
    """

    def __init__(self, rank: int, timeout_s: float):
        self.rank, self.timeout_s = rank, timeout_s
        self.started = False
        self.label = "start-up"
        self.last = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="dpsim-watchdog", daemon=True)
        self._thread.start()

    def beat(self, label: str) -> None:
        self.label, self.last = label, time.monotonic()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            idle = time.monotonic() - self.last
            if idle > (self.timeout_s if self.started else max(self.timeout_s, STARTUP_GRACE_S)):
                sys.stderr.write(f"dpsim: error: calibrate: rank {self.rank}: no progress for {idle:.0f} s "
                                 f"during {self.label}; a rank has died or hung; aborting, no profile written\n")
                sys.stderr.flush()
                os._exit(3)


class Clock:
    """Wall time on CPU, CUDA events on the current stream on GPU."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    def start(self):
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            return ev
        return time.perf_counter()

    def stop(self, start) -> float:
        if self.cuda:
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3
        return time.perf_counter() - start

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()


def _fault() -> tuple[str, int, int] | None:
    raw = os.environ.get("DPSIM_CALIBRATE_FAULT")
    if not raw:
        return None
    kind, rank, step = raw.split(":")
    return kind, int(rank), int(step)


class Steps:
    """Counts steps, reports them (``emit``) and feeds the watchdog; injects test faults."""

    def __init__(self, rank: int, emit: Emit, watchdog: Watchdog | None):
        self.rank, self.emit, self.watchdog = rank, emit, watchdog
        self.index = 0
        self.fault = _fault()

    def begin(self, label: str) -> None:
        if self.watchdog:
            self.watchdog.beat(label)
        if self.fault and self.fault[1] == self.rank and self.index >= self.fault[2]:
            if self.fault[0] == "die":
                os._exit(17)
            if self.fault[0] == "hang":
                while True:
                    time.sleep(3600)
        self.emit({"event": "begin", "rank": self.rank, "index": self.index, "label": label})

    def end(self, label: str) -> None:
        if self.watchdog:
            self.watchdog.beat(label)
            self.watchdog.started = True
        self.emit({"event": "end", "rank": self.rank, "index": self.index, "label": label})
        self.index += 1


def human_bytes(n: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:g} {unit}"
    return f"{n:g} B"


# ----------------------------------------------------------------------------- collectives


def aligned_size(op: str, size_bytes: int, group_size: int) -> int:
    """``size_bytes`` rounded down to whole float32 elements (and ranks' shares), at least one each."""
    unit = ELEMENT_BYTES * (group_size if op in ("all_gather", "reduce_scatter") else 1)
    return max(unit, int(size_bytes) // unit * unit)


def _collective_fn(op: str, size_bytes: int, group, group_ranks: list[int], device: torch.device):
    n = len(group_ranks)
    count = size_bytes // ELEMENT_BYTES
    if op == "all_reduce":
        buf = torch.zeros(count, dtype=ELEMENT, device=device)
        return lambda: dist.all_reduce(buf, group=group)
    if op == "reduce_scatter":
        inp = torch.zeros(count, dtype=ELEMENT, device=device)
        out = torch.empty(count // n, dtype=ELEMENT, device=device)
        return lambda: _reduce_scatter(out, inp, group=group)
    if op == "all_gather":
        inp = torch.zeros(count // n, dtype=ELEMENT, device=device)
        out = torch.empty(count, dtype=ELEMENT, device=device)
        return lambda: _all_gather(out, inp, group=group)
    if op == "broadcast":
        buf = torch.zeros(count, dtype=ELEMENT, device=device)
        root = group_ranks[0]
        return lambda: dist.broadcast(buf, src=root, group=group)
    raise ValueError(op)


def _pingpong_fn(size_bytes: int, me: int, a: int, b: int, device: torch.device):
    buf = torch.zeros(size_bytes // ELEMENT_BYTES, dtype=ELEMENT, device=device)
    if me == a:
        def fn():
            dist.send(buf, b)
            dist.recv(buf, b)
    else:
        def fn():
            dist.recv(buf, a)
            dist.send(buf, a)
    return fn


def _reduce_device(backend: str, device: torch.device) -> torch.device:
    return device if backend == "nccl" else torch.device("cpu")


def calls_per_repeat(fn, *, group, clock: Clock, warmup: int, batch_s: float, max_inner: int, backend: str,
                     device: torch.device) -> int:
    """Warm ``fn`` up and choose how many back-to-back calls one timed repeat makes.

    Every rank of ``group`` gets the same answer (a MAX all-reduce of the estimate), so
    they all make the same number of calls.
    """
    for _ in range(warmup):
        fn()
    clock.sync()
    t = clock.start()
    fn()
    est = clock.stop(t)
    est_t = torch.tensor([est], dtype=torch.float64, device=_reduce_device(backend, device))
    dist.all_reduce(est_t, op=dist.ReduceOp.MAX, group=group)
    return int(min(max_inner, max(1, math.ceil(batch_s / max(float(est_t.item()), 1e-7)))))


def time_repeat(fn, inner: int, *, group, clock: Clock) -> float:
    """One timed repeat: align the ranks with a barrier, then ``inner`` calls; per-call time."""
    dist.barrier(group=group)
    clock.sync()
    t = clock.start()
    for _ in range(inner):
        fn()
    return clock.stop(t) / inner


def sweep(fns: dict[int, Callable], label: str, steps: "Steps", *, group, clock: Clock, warmup: int, iters: int,
          batch_s: float, max_inner: int, backend: str, device: torch.device, scale: float = 1.0) -> dict[int, list]:
    """Per-call times of each size's ``fn``: warm-up per size, then ``iters`` rounds over all sizes.

    Sizes are interleaved (round r times every size once) rather than measured one
    after another, so a burst of load from something else on the machine spreads over
    all sizes instead of biasing a few, and the medians stay comparable.
    """
    inner = {}
    for size, fn in fns.items():
        name = f"{label} warm-up {human_bytes(size)}"
        steps.begin(name)
        inner[size] = calls_per_repeat(fn, group=group, clock=clock, warmup=warmup, batch_s=batch_s,
                                       max_inner=max_inner, backend=backend, device=device)
        steps.end(name)
    times: dict[int, list] = {size: [] for size in fns}
    for r in range(iters):
        name = f"{label} round {r + 1}/{iters}"
        steps.begin(name)
        for size, fn in fns.items():
            times[size].append(scale * time_repeat(fn, inner[size], group=group, clock=clock))
        steps.end(name)
    return times


# ----------------------------------------------------------------------------- compute


def _matmul_shapes(device: torch.device, plan: dict) -> list[tuple[int, int, int]]:
    if plan.get("matmul_shapes"):
        return [tuple(s) for s in plan["matmul_shapes"]]
    if device.type == "cuda":
        # square sweeps plus the best shapes mamf-finder reported on A100 and H100
        # (hardware.csv H013: 1024x10240x5120, H015: 2048x2048x13312)
        return [(2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192), (1024, 10240, 5120),
                (2048, 2048, 13312)]
    return [(256, 256, 256), (512, 512, 512), (1024, 1024, 1024)]


def _median_time(fn, clock: Clock, *, warmup: int = 2, repeats: int = 5, batch_s: float = 0.02,
                 max_inner: int = 1000) -> float:
    for _ in range(warmup):
        fn()
    clock.sync()
    t = clock.start()
    fn()
    est = max(clock.stop(t), 1e-7)
    inner = int(min(max_inner, max(1, math.ceil(batch_s / est))))
    times = []
    for _ in range(repeats):
        clock.sync()
        t = clock.start()
        for _ in range(inner):
            fn()
        times.append(clock.stop(t) / inner)
    return statistics.median(times)


def bench_matmul(device: torch.device, clock: Clock, plan: dict) -> list[dict]:
    rows = []
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    for dtype_name in plan["dtypes"]:
        dtype = getattr(torch, dtype_name)
        for m, n, k in _matmul_shapes(device, plan):
            a = torch.randn(m, k, device=device).to(dtype)
            b = torch.randn(k, n, device=device).to(dtype)
            c = torch.empty(m, n, device=device, dtype=dtype)
            t = _median_time(lambda: torch.mm(a, b, out=c), clock, batch_s=plan["batch_s"])
            rows.append({"dtype": dtype_name, "m": m, "n": n, "k": k, "time_s": t, "flops_per_s": 2.0 * m * n * k / t})
    return rows


def bench_memcpy(device: torch.device, clock: Clock, plan: dict) -> dict:
    nbytes = int(plan["memcpy_bytes"])
    src = torch.empty(nbytes, dtype=torch.uint8, device=device).fill_(1)
    dst = torch.empty_like(src)
    t = _median_time(lambda: dst.copy_(src), clock, batch_s=plan["batch_s"])
    return {"bytes": nbytes, "time_s": t, "bandwidth_bytes_per_s": 2.0 * nbytes / t}


def bench_overlap(device: torch.device, clock: Clock, plan: dict, group, backend: str) -> dict:
    """Matmul time alone and while all-reduces run on ``group``."""
    n = 4096 if device.type == "cuda" else 384
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    c = torch.empty(n, n, device=device, dtype=dtype)

    def compute():
        torch.mm(a, b, out=c)

    comm_bytes = int(plan["overlap_bytes"])
    buf = torch.zeros(comm_bytes // ELEMENT_BYTES, dtype=ELEMENT, device=device)
    repeats = max(3, plan["iters"] // 2)
    # compute alone: `inner` matmuls per repeat, agreed across ranks
    for _ in range(3):
        compute()
    clock.sync()
    t = clock.start()
    compute()
    one = max(clock.stop(t), 1e-7)
    rd = _reduce_device(backend, device)
    agree = torch.tensor([one], dtype=torch.float64, device=rd)
    dist.all_reduce(agree, op=dist.ReduceOp.MAX, group=group)
    inner = int(max(1, math.ceil(4 * plan["batch_s"] / float(agree.item()))))
    alone = []
    for _ in range(repeats):
        dist.barrier(group=group)
        clock.sync()
        t = clock.start()
        for _ in range(inner):
            compute()
        alone.append(clock.stop(t))
    window = statistics.median(alone)
    # one collective alone, then enough of them to cover the compute window 1.5 times
    dist.all_reduce(buf, group=group)
    clock.sync()
    t = clock.start()
    dist.all_reduce(buf, group=group)
    comm_one = max(clock.stop(t), 1e-7)
    agree = torch.tensor([window, comm_one], dtype=torch.float64, device=rd)
    dist.all_reduce(agree, op=dist.ReduceOp.MAX, group=group)
    window_max, comm_max = (float(x) for x in agree.tolist())
    k = int(min(10_000, max(1, math.ceil(1.5 * window_max / comm_max))))
    together = []
    for _ in range(repeats):
        dist.barrier(group=group)
        clock.sync()
        works = [dist.all_reduce(buf, group=group, async_op=True) for _ in range(k)]
        t = clock.start()
        for _ in range(inner):
            compute()
        together.append(clock.stop(t))
        for w in works:
            w.wait()
        clock.sync()
    concurrent = statistics.median(together)
    return {"matmul_n": n, "matmul_dtype": str(dtype).removeprefix("torch."), "matmuls": inner,
            "collective": "all_reduce", "collective_bytes": comm_bytes, "collectives": k,
            "compute_alone_s": window, "compute_concurrent_s": concurrent,
            "slowdown": max(0.0, concurrent / window - 1.0)}


def _first_tensor(out):
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, dict):
        out = list(out.values())
    if hasattr(out, "logits"):
        return out.logits
    if isinstance(out, (list, tuple)):
        for o in out:
            t = _first_tensor(o)
            if t is not None:
                return t
    return None


def layer_modules(model: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    """The model's "layers": leaves and the blocks of its ModuleLists/Sequentials, in order."""
    containers = (torch.nn.ModuleList, torch.nn.Sequential)
    chosen: list[tuple[str, torch.nn.Module]] = []

    def has_blocks(m: torch.nn.Module) -> bool:
        return any(isinstance(x, containers) and len(x) >= 2 for x in m.modules())

    def visit(prefix: str, m: torch.nn.Module) -> None:
        kids = list(m.named_children())
        if isinstance(m, containers) and len(m) >= 2:
            chosen.extend((f"{prefix}.{n}" if prefix else n, c) for n, c in kids)
        elif kids and has_blocks(m):
            for n, c in kids:
                visit(f"{prefix}.{n}" if prefix else n, c)
        else:
            chosen.append((prefix or type(m).__name__, m))

    visit("", model)
    return chosen


def _import_builder_module(ref):
    """The module a parsed ``--model`` reference names (a ``.py`` file or a dotted module)."""
    if ref.is_file:
        from importlib.util import module_from_spec, spec_from_file_location
        from pathlib import Path
        path = Path(ref.target).resolve()
        spec = spec_from_file_location(f"_dpsim_calibrate_model_{abs(hash(str(path)))}", path)
        module = module_from_spec(spec)
        sys.path.insert(0, str(path.parent))  # let the file import its neighbours
        try:
            spec.loader.exec_module(module)
        finally:
            sys.path.remove(str(path.parent))
        return module
    return importlib.import_module(ref.target)


def _with_batch(x, micro_batch: int):
    """An example input resized to ``micro_batch`` along dim 0 (rows repeated or cut)."""
    if isinstance(x, torch.Tensor):
        if x.dim() == 0 or x.shape[0] == micro_batch:
            return x
        return x.index_select(0, torch.arange(micro_batch, device=x.device) % x.shape[0])
    if isinstance(x, tuple):
        return tuple(_with_batch(v, micro_batch) for v in x)
    if isinstance(x, list):
        return [_with_batch(v, micro_batch) for v in x]
    if isinstance(x, dict):
        return {k: _with_batch(v, micro_batch) for k, v in x.items()}
    return x


def _to_device(x, device: torch.device):
    if isinstance(x, torch.Tensor):
        return x.to(device)
    if isinstance(x, (tuple, list)):
        return type(x)(_to_device(v, device) for v in x)
    if isinstance(x, dict):
        return {k: _to_device(v, device) for k, v in x.items()}
    return x


def build_model(spec: str, micro_batch: int, plan: dict, device: torch.device):
    """(module, input batch) for a catalog name or a builder, as ``predict --model`` names them.

    A builder is ``path/file.py:fn`` or ``package.module:fn`` (optionally ``:example_fn``),
    with the example input from, in this order: ``--input-shape`` (predict's syntax,
    ``8,3,224,224`` or ``4,1024:int64``; random normal floats, zero integers), the
    example function, a module-level ``example_input()``, or an ``example_input(batch)``
    method of the module. Its first dimension is set to ``micro_batch``.
    """
    if ":" not in spec:
        from dpsim.workload.catalog import CATALOG_ENTRIES
        from dpsim.workload.torch_models import example_input, torch_model_for
        cfg = CATALOG_ENTRIES[spec].config
        model = torch_model_for(cfg)
        return model.to(device), example_input(cfg, micro_batch, plan.get("seq_len")).to(device)
    from dpsim.workload.from_torch import parse_input_shape, parse_model_ref
    ref = parse_model_ref(spec)
    mod = _import_builder_module(ref)
    model = getattr(mod, ref.function)()
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"--model: {spec} returned {type(model).__name__}, expected a torch.nn.Module")
    if plan.get("input_shape"):
        shape, dtype = parse_input_shape(plan["input_shape"])
        tdtype = getattr(torch, dtype)
        x = (torch.randn(shape).to(tdtype) if tdtype.is_floating_point else torch.zeros(shape, dtype=tdtype))
    elif ref.example_function or hasattr(mod, "example_input"):
        x = getattr(mod, ref.example_function or "example_input")()
    elif hasattr(model, "example_input"):
        x = model.example_input(micro_batch)
    else:
        raise TypeError(f"--model: {spec} needs an example input: pass --input-shape (e.g. 8,3,224,224 or "
                        "4,1024:int64) or define example_input()")
    return model.to(device), _to_device(_with_batch(x, micro_batch), device)


def bench_model(spec: str, micro_batch: int, device: torch.device, clock: Clock, plan: dict) -> dict:
    """Forward/backward of a real model: whole (median) and per module (hooks)."""
    model, x = build_model(spec, micro_batch, plan, device)
    model.train()
    use_bf16 = device.type == "cuda" and torch.cuda.is_bf16_supported()
    dtype = "bfloat16" if use_bf16 else "float32"

    def call():
        if isinstance(x, dict):
            return model(**x)
        if isinstance(x, (tuple, list)):
            return model(*x)
        return model(x)

    def forward():
        if use_bf16:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                return _first_tensor(call()).float().mean()
        return _first_tensor(call()).float().mean()

    def step():
        model.zero_grad(set_to_none=True)
        t = clock.start()
        loss = forward()
        f = clock.stop(t)
        t = clock.start()
        loss.backward()
        return f, clock.stop(t)

    for _ in range(2):
        step()
    runs = [step() for _ in range(max(3, plan["iters"] // 2))]
    step_times = [f + b for f, b in runs]  # every timed repeat, for the step-time spread (noise)
    fwd = statistics.median(r[0] for r in runs)
    bwd = statistics.median(r[1] for r in runs)

    layers = layer_modules(model)
    marks: dict[str, dict[str, list]] = {name: {"f": [], "b": []} for name, _ in layers}
    handles = []
    sync_cpu = not clock.cuda

    def now():
        if clock.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            return ev
        return time.perf_counter()

    for name, m in layers:
        rec = marks[name]
        handles.append(m.register_forward_pre_hook(lambda mod, inp, rec=rec: rec["f"].append([now(), None])))
        handles.append(m.register_forward_hook(lambda mod, inp, out, rec=rec: rec["f"][-1].__setitem__(1, now())))
        handles.append(m.register_full_backward_pre_hook(lambda mod, go, rec=rec: rec["b"].append([now(), None])))
        handles.append(m.register_full_backward_hook(
            lambda mod, gi, go, rec=rec: rec["b"][-1].__setitem__(1, now()) if rec["b"] else None))
    per_layer: dict[str, list[tuple[float, float]]] = {name: [] for name, _ in layers}
    try:
        for _ in range(3):
            for rec in marks.values():
                rec["f"].clear()
                rec["b"].clear()
            step()
            clock.sync()
            for name, rec in marks.items():
                def total(pairs):
                    s = 0.0
                    for a, b in pairs:
                        if b is None:
                            continue
                        s += (b - a) if sync_cpu else a.elapsed_time(b) / 1e3
                    return s
                per_layer[name].append((total(rec["f"]), total(rec["b"])))
    finally:
        for h in handles:
            h.remove()
    layer_rows = [{"name": name, "forward_s": statistics.median(t[0] for t in per_layer[name]),
                   "backward_s": statistics.median(t[1] for t in per_layer[name])} for name, _ in layers]
    return {"model": spec, "micro_batch": micro_batch, "dtype": dtype, "forward_s": fwd, "backward_s": bwd,
            "step_times_s": step_times, "layers": layer_rows}


# ----------------------------------------------------------------------------- environment


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def device_name(device: torch.device) -> str:
    return torch.cuda.get_device_name(device) if device.type == "cuda" else _cpu_name()


def backend_version(backend: str) -> str | None:
    if backend == "nccl":
        try:
            v = torch.cuda.nccl.version()
            return ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
        except Exception:  # pragma: no cover - no NCCL build
            return None
    return f"gloo (bundled with torch {torch.__version__})"


# ----------------------------------------------------------------------------- one rank


def _env_int(name: str, default: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None:
        if default is None:
            raise RuntimeError(f"{name} is not set")
        return default
    return int(raw)


def setup_device(backend: str, local_rank: int) -> torch.device:
    if backend == "nccl":
        if not torch.cuda.is_available():
            raise RuntimeError("--backend nccl needs CUDA GPUs, and torch sees none")
        if local_rank >= torch.cuda.device_count():
            raise RuntimeError(f"LOCAL_RANK {local_rank} but only {torch.cuda.device_count()} GPU(s) visible")
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def run_rank(plan: dict, emit: Emit) -> dict | None:
    """One rank's calibration; returns the merged raw results on rank 0, ``None`` elsewhere."""
    rank = _env_int("RANK")
    world = _env_int("WORLD_SIZE")
    local_rank = _env_int("LOCAL_RANK", 0)
    local_world = _env_int("LOCAL_WORLD_SIZE", world)
    backend = plan["backend"]
    watchdog = Watchdog(rank, plan["timeout_s"] + plan.get("watchdog_grace_s", 5.0))
    steps = Steps(rank, emit, watchdog)
    if backend == "gloo":
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // max(1, local_world)))
    device = setup_device(backend, local_rank)
    clock = Clock(device)
    timeout = datetime.timedelta(seconds=max(plan["timeout_s"], STARTUP_GRACE_S) + plan.get("pg_grace_s", 10.0))
    kwargs: dict[str, Any] = {"backend": backend, "timeout": timeout}
    if device.type == "cuda":
        kwargs["device_id"] = device
    steps.begin("process group start-up")
    dist.init_process_group(**kwargs)
    try:
        result = _calibrate(plan, rank, world, device, clock, steps, backend, emit)
    finally:
        watchdog.stop()
        try:
            dist.destroy_process_group()
        except Exception:  # pragma: no cover - best effort on the way out
            pass
    return result


def _node_layout(plan: dict, rank: int, world: int) -> tuple[list[list[int]], list[str]]:
    hostnames: list[Any] = [None] * world
    dist.all_gather_object(hostnames, socket.gethostname())
    rpn = plan.get("ranks_per_node")
    if rpn:
        keys = [r // rpn for r in range(world)]
    else:
        order = list(dict.fromkeys(hostnames))
        keys = [order.index(h) for h in hostnames]
    nodes: dict[int, list[int]] = {}
    for r, k in enumerate(keys):
        nodes.setdefault(k, []).append(r)
    return [nodes[k] for k in sorted(nodes)], hostnames


def _calibrate(plan, rank, world, device, clock, steps: Steps, backend, emit) -> dict | None:
    nodes, hostnames = _node_layout(plan, rank, world)
    steps.end("process group start-up")
    sizes_in = [int(s) for s in plan["sizes"]]
    ops = [op for op in plan["ops"] if op in COLLECTIVE_OPS]
    want_p2p = "sendrecv" in plan["ops"]
    node_sizes = {len(n) for n in nodes}
    classes = []
    if world >= 2 and min(node_sizes) >= 2 and len(node_sizes) == 1:
        classes.append("intra_node")
    if len(nodes) >= 2:
        classes.append("inter_node")
    warnings = []
    if world >= 2 and "intra_node" not in classes:
        warnings.append(f"intra_node not measured: nodes have {sorted(node_sizes)} ranks "
                        "(need the same number, at least 2, on every node)")
    compute_steps = (1 + 1 + (1 if plan.get("model") else 0) + 1) if plan.get("compute") else 0
    def per_sweep(op: str, group_size: int) -> int:  # warm-ups (distinct sizes), then rounds over all sizes
        return len({aligned_size(op, s, group_size) for s in sizes_in}) + plan["iters"]

    # Every rank creates every group, in the same order (torch.distributed requires it).
    node_groups = [dist.new_group(n) for n in nodes] if "intra_node" in classes else []
    my_node = next(i for i, n in enumerate(nodes) if rank in n)
    pairs = {}
    if want_p2p and "intra_node" in classes:
        pairs["intra_node"] = (nodes[0][0], nodes[0][1])
    if want_p2p and "inter_node" in classes:
        pairs["inter_node"] = (nodes[0][0], nodes[1][0])
    pair_groups = {lc: dist.new_group(list(p)) for lc, p in pairs.items()}
    rd = _reduce_device(backend, device)
    results: dict[str, Any] = {"collectives": {}, "warnings": warnings}
    common = dict(clock=clock, warmup=plan["warmup"], iters=plan["iters"], batch_s=plan["batch_s"],
                  max_inner=plan["max_inner"], backend=backend, device=device)
    sizes_of = {"intra_node": len(nodes[0]), "inter_node": world}
    total = 1 + compute_steps + sum(sum(per_sweep(op, sizes_of[lc]) for op in ops)
                                    + (per_sweep("sendrecv", 2) if lc in pairs else 0) for lc in classes)
    if rank == 0:
        emit({"event": "plan", "total": total, "classes": classes, "nodes": len(nodes), "world": world})
    for lc in classes:
        if lc == "intra_node":
            group, granks = node_groups[my_node], nodes[my_node]
            n0, nn = len(nodes[0]), 1
        else:
            group, granks = dist.group.WORLD, list(range(world))
            n0, nn = world, len(nodes)
        ops_out: dict[str, list[dict]] = {}
        for op in ops:
            fns = {}
            for s in sizes_in:
                size = aligned_size(op, s, len(granks))
                fns.setdefault(size, _collective_fn(op, size, group, granks, device))
            times = sweep(fns, f"{lc} {op}", steps, group=group, **common)
            del fns
            ops_out[op] = [{"size_bytes": size, "times_s": t} for size, t in times.items()]
        if lc in pairs:
            a, b = pairs[lc]
            label = f"{lc} sendrecv (ranks {a}<->{b})"
            sizes_p2p = list(dict.fromkeys(aligned_size("sendrecv", s, 2) for s in sizes_in))
            if rank in (a, b):
                fns = {size: _pingpong_fn(size, rank, a, b, device) for size in sizes_p2p}
                times = sweep(fns, label, steps, group=pair_groups[lc], scale=0.5, **common)
                del fns
            else:  # not in the pair: keep the step count in step with the pair's ranks
                for size in sizes_p2p:
                    steps.begin(f"{label} warm-up {human_bytes(size)}")
                    steps.end(f"{label} warm-up {human_bytes(size)}")
                for r in range(plan["iters"]):
                    steps.begin(f"{label} round {r + 1}/{plan['iters']}")
                    steps.end(f"{label} round {r + 1}/{plan['iters']}")
                times = {size: [0.0] * plan["iters"] for size in sizes_p2p}
            ops_out["sendrecv"] = [{"size_bytes": size, "times_s": t} for size, t in times.items()]
        # a repeat's time is the slowest rank's
        for op, rows in ops_out.items():
            t = torch.tensor([r["times_s"] for r in rows], dtype=torch.float64, device=rd)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            for r, times in zip(rows, t.tolist()):
                r["times_s"] = times
        results["collectives"][lc] = {"n_ranks": n0, "n_nodes": nn, "ops": ops_out}
    if plan.get("compute"):
        results["compute"] = _compute(plan, rank, world, device, clock, steps, backend, node_groups, my_node)
    results["environment"] = _environment(plan, backend, device, hostnames, nodes, world)
    dist.barrier()
    return results if rank == 0 else None


def _compute(plan, rank, world, device, clock, steps, backend, node_groups, my_node) -> dict:
    out: dict[str, Any] = {}
    steps.begin("matmul throughput")
    mine = {"matmul": bench_matmul(device, clock, plan)}
    steps.end("matmul throughput")
    steps.begin("memory copy bandwidth")
    mine["memcpy"] = bench_memcpy(device, clock, plan)
    steps.end("memory copy bandwidth")
    if plan.get("model"):
        label = f"model {plan['model']} micro-batch {plan['micro_batch']}"
        steps.begin(label)
        mine["model_step"] = bench_model(plan["model"], plan["micro_batch"], device, clock, plan)
        steps.end(label)
    steps.begin("overlap interference")
    group = node_groups[my_node] if node_groups else dist.group.WORLD
    mine["overlap"] = bench_overlap(device, clock, plan, group, backend)
    steps.end("overlap interference")
    everyone: list[Any] = [None] * world
    dist.all_gather_object(everyone, mine)
    if rank != 0:
        return {}
    med = statistics.median
    best: dict[str, float] = {}
    for dtype in plan["dtypes"]:
        per_rank = [max(r["flops_per_s"] for r in e["matmul"] if r["dtype"] == dtype) for e in everyone]
        best[dtype] = med(per_rank)
    out["device"] = device_name(device)
    out["matmul_flops_per_s"] = best
    out["memory_bandwidth_bytes_per_s"] = med(e["memcpy"]["bandwidth_bytes_per_s"] for e in everyone)
    out["overlap_slowdown"] = med(e["overlap"]["slowdown"] for e in everyone)
    out["matmul"] = everyone[0]["matmul"]
    out["memcpy"] = [e["memcpy"] for e in everyone]
    out["overlap"] = {"per_rank": [e["overlap"] for e in everyone]}
    if plan.get("model"):
        steps_ = [e["model_step"] for e in everyone]
        first = dict(steps_[0])
        first["forward_s"] = med(s["forward_s"] for s in steps_)
        first["backward_s"] = med(s["backward_s"] for s in steps_)
        first["step_times_s"] = [s["step_times_s"] for s in steps_]  # per rank: build takes each one's CV
        out["model_step"] = first
    return out


def _environment(plan, backend, device, hostnames, nodes, world) -> dict:
    names: list[Any] = [None] * world
    dist.all_gather_object(names, device_name(device))
    return {
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "backend": backend,
        "backend_version": backend_version(backend),
        "device_names": sorted(set(names)),
        "device_type": device.type,
        "hosts": len(nodes),
        "hostnames": list(dict.fromkeys(hostnames)),
        "world_size": world,
        "ranks_per_node": [len(n) for n in nodes],
        "ranks_per_node_simulated": bool(plan.get("ranks_per_node")),
        "python_version": platform.python_version(),
        "platform": platform.platform(),
        "date_utc": datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat(),
        "plan": {k: plan[k] for k in ("ops", "sizes", "warmup", "iters", "batch_s", "dtypes") if k in plan},
    }
