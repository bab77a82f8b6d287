"""The user's training step as torch runs it: model, example batch, loss and optimizer, and how long it takes.

``dpsim calibrate`` and ``dpsim validate`` both time *the step the user trains*:
``optimizer.zero_grad()``, forward, the loss, backward, ``optimizer.step()``. They build
it here, from the same model references ``predict`` accepts (a catalog name, or
``path/file.py:build[:example_fn[:loss_fn]]`` / ``package.module:build[...]``):

* **model**: the builder's ``nn.Module`` (catalog names: the torch reference modules of
  :mod:`dpsim.workload.torch_models`), on the device, in train mode;
* **batch**: ``--input-shape`` (random normal floats, random integers below 2), else the
  example function after the second colon, else a module-level ``example_input()``
  (predict's order, :func:`dpsim.workload.from_torch.load_torch_workload`); its first
  dimension is set to the micro-batch (rows repeated or cut);
* **loss**: the function after the third colon, else a module-level ``loss()``, called
  ``loss(output)`` or ``loss(output, batch)`` (by its number of parameters). Catalog
  models get a cross-entropy over their last dimension (next-token logits, class scores).
  A user's model with neither is timed with the mean of its output, and the step says so
  (:attr:`TrainStep.loss_source`);
* **optimizer**: a module-level ``optimizer(parameters)`` returning a
  ``torch.optim.Optimizer``, else ``--optimizer`` (predict's names: ``adamw``, ``adam``,
  ``sgd-momentum``, ``sgd``; torch's own defaults apart from the learning rate).

:func:`measure_step` times the step repeatedly until the mean is known to a stated
confidence (Student-t interval) or a budget runs out, each iteration started together
on every rank (``agree``, one all-reduce that also carries each iteration's slowest-rank
times), and splits it per layer of the traced :class:`~dpsim.workload.spec.ModelSpec`:
forward from each layer's first entry (forward pre-hooks), backward from the moment
each layer's last gradient is ready (``register_post_accumulate_grad_hook``, the event
DDP's reducer reacts to), so the engine launches each bucket when it was ready in the
real run.

torch is imported at the top: only calibrate's and validate's rank processes import
this module.
"""

from __future__ import annotations

import inspect
import math
import os
import socket
import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
import torch.distributed as dist

from dpsim.errors import WorkloadError
from dpsim.stats import mean_confidence_interval
from dpsim.workload.catalog import CATALOG_ENTRIES
from dpsim.workload.model_ref import import_builder, is_torch_model_ref, parse_input_shape, parse_model_ref

OPTIMIZERS = ("adamw", "adam", "sgd-momentum", "sgd")
"""``--optimizer`` names, as ``predict`` spells them (:data:`dpsim.workload.precision.OPTIMIZER_STATES`)."""

DEFAULT_LR = 1e-3
"""Learning rate of the named optimizers: the step's cost does not depend on it."""


@dataclass
class TrainStep:
    """One replica's training step, ready to run."""

    model: torch.nn.Module
    """The module, on its device, in train mode."""
    batch: Any
    """Its input: a tensor, a tuple of positional arguments or a dict of keyword arguments."""
    loss_fn: Callable[[Any], torch.Tensor]
    """``output -> scalar loss``."""
    optimizer: torch.optim.Optimizer
    """Updates the parameters."""
    loss_source: str
    """Where the loss came from (``loss_fn()``, ``loss()``, ``cross-entropy``, ``mean of the output``)."""
    optimizer_source: str
    """Where the optimizer came from (``optimizer()`` or a name)."""
    samples: int
    """Micro-batch: samples in :attr:`batch`."""
    hooks: list = field(default_factory=list)
    """Handles of timing hooks, removed by :meth:`remove_hooks`."""

    def forward(self) -> Any:
        """The model's output on the batch."""
        b = self.batch
        if isinstance(b, dict):
            return self.model(**b)
        if isinstance(b, (tuple, list)):
            return self.model(*b)
        return self.model(b)

    def run(self) -> None:
        """One whole step: zero_grad, forward, loss, backward, optimizer step."""
        self.optimizer.zero_grad(set_to_none=True)
        self.loss_fn(self.forward()).backward()
        self.optimizer.step()

    def remove_hooks(self) -> None:
        for h in self.hooks:
            h.remove()
        self.hooks.clear()


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:300] + ("..." if len(text) > 300 else "")


def _first_tensor(out: Any) -> torch.Tensor | None:
    if isinstance(out, torch.Tensor):
        return out
    if hasattr(out, "logits"):
        return out.logits
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (list, tuple)):
        for o in out:
            t = _first_tensor(o)
            if t is not None:
                return t
    return None


def _output_tensor(out: Any, what: str) -> torch.Tensor:
    t = _first_tensor(out)
    if t is None or not t.is_floating_point():
        raise WorkloadError(f"--model: {what}: the output has no floating-point tensor to compute a loss on")
    return t


def _with_batch(x: Any, micro_batch: int) -> Any:
    """``x`` with its first dimension set to ``micro_batch`` (rows repeated or cut)."""
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


def _to_device(x: Any, device: torch.device) -> Any:
    if isinstance(x, torch.Tensor):
        return x.to(device)
    if isinstance(x, (tuple, list)):
        return type(x)(_to_device(v, device) for v in x)
    if isinstance(x, dict):
        return {k: _to_device(v, device) for k, v in x.items()}
    return x


def _cross_entropy(out: Any) -> torch.Tensor:
    """Cross-entropy over the last dimension against class 0: what a classifier or an LM's
    next-token loss costs (the targets' values do not change the time)."""
    t = _output_tensor(out, "cross-entropy")
    logits = t.reshape(-1, t.shape[-1]).float()
    return torch.nn.functional.cross_entropy(logits, torch.zeros(logits.shape[0], dtype=torch.long,
                                                                 device=logits.device))


def _user_loss(fn: Callable, batch: Any, name: str) -> Callable[[Any], torch.Tensor]:
    try:
        params = [p for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        wants_batch = len(params) >= 2
    except (TypeError, ValueError):
        wants_batch = False

    def loss(out: Any) -> torch.Tensor:
        value = fn(out, batch) if wants_batch else fn(out)
        if not isinstance(value, torch.Tensor) or value.numel() != 1:
            raise WorkloadError(f"--model: {name}() returned {type(value).__name__}, expected a scalar tensor")
        return value

    return loss


def make_optimizer(name: str, parameters) -> torch.optim.Optimizer:
    """A named optimizer (predict's ``--optimizer`` names) with torch's defaults."""
    if name == "adamw":
        return torch.optim.AdamW(parameters, lr=DEFAULT_LR)
    if name == "adam":
        return torch.optim.Adam(parameters, lr=DEFAULT_LR)
    if name == "sgd-momentum":
        return torch.optim.SGD(parameters, lr=DEFAULT_LR, momentum=0.9)
    if name == "sgd":
        return torch.optim.SGD(parameters, lr=DEFAULT_LR)
    raise WorkloadError(f"--optimizer: {name!r} is not known; choose one of {', '.join(OPTIMIZERS)}")


def build_train_step(model: str, *, micro_batch: int, device: torch.device | str = "cpu",
                     input_shape: str | None = None, seq_len: int | None = None,
                     optimizer: str = "adamw", seed: int = 0) -> TrainStep:
    """The training step of ``model`` (see the module docstring) at ``micro_batch`` samples."""
    device = torch.device(device)
    torch.manual_seed(seed)
    if not is_torch_model_ref(model):
        from dpsim.workload.torch_models import example_input, torch_model_for

        if model not in CATALOG_ENTRIES:
            raise WorkloadError(f"--model: {model!r} is not a catalog model or a builder (file.py:fn)")
        cfg = CATALOG_ENTRIES[model].config
        module = torch_model_for(cfg).to(device)
        batch = example_input(cfg, micro_batch, seq_len).to(device)
        loss_fn, loss_source = _cross_entropy, "cross-entropy over the output's last dimension"
        opt, opt_source = make_optimizer(optimizer, module.parameters()), optimizer
        module.train()
        return TrainStep(model=module, batch=batch, loss_fn=loss_fn, optimizer=opt, loss_source=loss_source,
                         optimizer_source=opt_source, samples=micro_batch)
    ref = parse_model_ref(model)
    mod = import_builder(ref)
    builder = getattr(mod, ref.function, None)
    if builder is None or not callable(builder):
        raise WorkloadError(f"--model: {ref.target!r} has no function {ref.function!r}")
    try:
        module = builder()
    except Exception as exc:
        raise WorkloadError(f"--model: {ref.function}() failed: {type(exc).__name__}: {_one_line(exc)}") from None
    if not isinstance(module, torch.nn.Module):
        raise WorkloadError(f"--model: {ref.function}() returned {type(module).__name__}, not a torch.nn.Module")
    if input_shape is not None:
        shape, dtype = parse_input_shape(input_shape)
        tdtype = getattr(torch, dtype)
        g = torch.Generator().manual_seed(seed)
        if tdtype.is_floating_point:
            batch = torch.randn(shape, generator=g).to(tdtype)
        elif tdtype == torch.bool:
            batch = torch.randint(0, 2, shape, generator=g) > 0
        else:
            batch = torch.randint(0, 2, shape, generator=g, dtype=tdtype)
    else:
        name = ref.example_function or "example_input"
        fn = getattr(mod, name, None)
        if fn is None or not callable(fn):
            raise WorkloadError(f"--model: {model!r} needs an example input: pass --input-shape (e.g. 8,3,224,224 "
                                f"or 4,1024:int64) or define example_input() (no function {name!r} in {ref.target!r})")
        try:
            batch = fn()
        except Exception as exc:
            raise WorkloadError(f"--model: {name}() failed: {type(exc).__name__}: {_one_line(exc)}") from None
    batch = _to_device(_with_batch(batch, micro_batch), device)
    module = module.to(device)
    module.train()
    loss_name = ref.loss_function or ("loss" if callable(getattr(mod, "loss", None)) else None)
    if loss_name is not None:
        fn = getattr(mod, loss_name, None)
        if fn is None or not callable(fn):
            raise WorkloadError(f"--model: no loss function {loss_name!r} in {ref.target!r}")
        loss_fn, loss_source = _user_loss(fn, batch, loss_name), f"{loss_name}()"
    else:
        loss_fn = lambda out: _output_tensor(out, model).float().mean()  # noqa: E731
        loss_source = "mean of the output (no loss given: add :loss_fn to --model or define loss())"
    make = getattr(mod, "optimizer", None)
    if callable(make):
        try:
            opt = make(module.parameters())
        except Exception as exc:
            raise WorkloadError(f"--model: optimizer() failed: {type(exc).__name__}: {_one_line(exc)}") from None
        if not isinstance(opt, torch.optim.Optimizer):
            raise WorkloadError(f"--model: optimizer() returned {type(opt).__name__}, not a torch.optim.Optimizer")
        opt_source = "optimizer()"
    else:
        opt, opt_source = make_optimizer(optimizer, module.parameters()), optimizer
    return TrainStep(model=module, batch=batch, loss_fn=loss_fn, optimizer=opt, loss_source=loss_source,
                     optimizer_source=opt_source, samples=micro_batch)


# ----------------------------------------------------------------------------- timing


class _Clock:
    """Wall time on CPU, CUDA events on the current stream on GPU."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"

    def now(self):
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            return ev
        return time.perf_counter()

    def between(self, a, b) -> float:
        return a.elapsed_time(b) / 1e3 if self.cuda else b - a

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize()


Agree = Callable[[list[float], bool], tuple[list[float], bool]]
"""``agree(times, flag) -> (slowest rank's times, any rank's flag)``: one all-reduce (MAX)
that also starts the next iteration on every rank at once."""


def solo(times: list[float], flag: bool) -> tuple[list[float], bool]:
    """:data:`Agree` of a single process."""
    return times, flag


def converged(values: list[float], *, min_n: int, target_rel_ci: float, confidence: float = 0.95) -> bool:
    """Whether the ``confidence`` interval of the mean of ``values`` is within ``target_rel_ci`` of it."""
    if len(values) < max(2, min_n):
        return False
    mean, lo, hi = mean_confidence_interval(values, confidence)
    return mean > 0 and (hi - lo) / 2 <= target_rel_ci * mean


def interval(values: list[float], confidence: float = 0.95) -> dict:
    """Mean, its Student-t interval and the median of ``values``."""
    mean, lo, hi = mean_confidence_interval(values, confidence)
    return {"mean_s": mean, "ci_low_s": max(0.0, lo), "ci_high_s": hi, "confidence": confidence,
            "median_s": statistics.median(values), "n": len(values)}


def measure_step(step: TrainStep, *, layers: list[tuple[str, list[str]]] | None = None, warmup: int = 2,
                 min_iters: int = 5, max_iters: int = 50, target_rel_ci: float = 0.02, budget_s: float = 60.0,
                 agree: Agree = solo) -> dict:
    """Time ``step`` until the mean step is known within ``target_rel_ci`` (95 %) or a limit.

    ``layers``: the traced model's layers in forward order as ``(module path, parameter
    names)`` (the root module is ``""``); each gets forward and backward times that add
    up to the step's (see the module docstring). Returns the per-iteration times
    (``step_times_s``: the slowest rank's, from ``agree``), their medians, the interval of
    the mean, the optimizer's time and, with ``layers``, ``layer_times``.
    """
    device = next((p.device for p in step.model.parameters()), torch.device("cpu"))
    clock = _Clock(device)
    modules = dict(step.model.named_modules())
    stamps: dict[str, Any] = {}
    ready: dict[str, Any] = {}
    if layers:
        missing = [name for name, _ in layers if name not in modules]
        if missing:
            raise WorkloadError(f"--model: the traced layer {missing[0]!r} is not a module of the built model "
                                "(the builder returns a different module than when traced?)")
        def entered(name: str) -> None:  # a pre-hook returning a value would replace the input
            if name not in stamps:
                stamps[name] = clock.now()

        for name, _ in layers:
            step.hooks.append(modules[name].register_forward_pre_hook(lambda m, a, name=name: entered(name)))
        for pname, p in step.model.named_parameters():
            step.hooks.append(p.register_post_accumulate_grad_hook(
                lambda _p, pname=pname: ready.__setitem__(pname, clock.now())))
    rows: list[tuple[float, float, float]] = []
    layer_rows: list[tuple[list[float], list[float]]] = []
    mine: list[float] = []
    start = time.monotonic()
    i = 0
    try:
        while True:
            stamps.clear()
            ready.clear()
            clock.sync()
            t0 = clock.now()
            step.optimizer.zero_grad(set_to_none=True)
            t_f = clock.now()
            loss = step.loss_fn(step.forward())
            t_b = clock.now()
            loss.backward()
            t_o = clock.now()
            step.optimizer.step()
            t_end = clock.now()
            clock.sync()
            fwd, bwd = clock.between(t_f, t_b), clock.between(t_b, t_o)
            opt = clock.between(t0, t_f) + clock.between(t_o, t_end)
            i += 1
            counted = i > warmup
            if counted:
                mine.append(fwd + bwd + opt)
                if layers:
                    layer_rows.append(_split_layers(layers, stamps, ready, clock, t_f, t_b, t_o))
            slowest, over_budget = agree([fwd, bwd, opt], time.monotonic() - start > budget_s)
            if not counted:
                continue
            rows.append((slowest[0], slowest[1], slowest[2]))
            # Every rank sees the same slowest times and budget flag, so all stop together.
            if (over_budget or len(rows) >= max_iters
                    or converged([sum(r) for r in rows], min_n=min_iters, target_rel_ci=target_rel_ci)):
                break
    finally:
        step.remove_hooks()
    steps = [f + b + o for f, b, o in rows]
    out = {
        "step_times_s": steps,
        "own_step_times_s": mine,
        "forward_s": statistics.median(r[0] for r in rows),
        "backward_s": statistics.median(r[1] for r in rows),
        "optimizer_s": statistics.median(r[2] for r in rows),
        "interval": interval(steps),
        "iterations": len(rows),
        "converged": converged(steps, min_n=min_iters, target_rel_ci=target_rel_ci),
        "target_rel_ci": target_rel_ci,
    }
    if layers:
        fw = [statistics.median(r[0][k] for r in layer_rows) for k in range(len(layers))]
        bw = [statistics.median(r[1][k] for r in layer_rows) for k in range(len(layers))]
        out["layer_times"] = [{"name": name or "(root)", "forward_s": f, "backward_s": b}
                              for (name, _), f, b in zip(layers, _scaled(fw, out["forward_s"]),
                                                          _scaled(bw, out["backward_s"]))]
    return out


def timed_run(step: TrainStep, clock: _Clock | None = None) -> float:
    """Wall seconds of one whole :meth:`TrainStep.run` (the device synchronised on both sides)."""
    if clock is None:
        clock = _Clock(next((p.device for p in step.model.parameters()), torch.device("cpu")))
    clock.sync()
    t0 = time.perf_counter()
    step.run()
    clock.sync()
    return time.perf_counter() - t0


def measure_step_after_comm(step: TrainStep, *, comm_bytes: int, group=None, min_iters: int = 8,
                            max_iters: int = 30, budget_s: float = 30.0, agree: Agree = solo) -> dict:
    """The step right after the rank waited on an all-reduce of ``comm_bytes``, against the
    step back to back, as pairs.

    A communication-bound DDP rank starts its optimizer step and the next forward right
    after waiting on the gradients' all-reduce, its caches flushed by the collective's
    buffers and its core idle meanwhile (VALIDATION.md part 2: that step is slower than
    the back-to-back step :func:`measure_step` times). Each iteration is a blocking
    all-reduce of ``comm_bytes`` on ``group``, the step (``after``), then the step again
    (``back to back``); the extra time is the median of the paired differences, so a drift
    of the machine's speed cancels. Returns ``extra_s``, ``wait_s`` (the all-reduce's
    median), both steps' medians (each iteration's slowest rank, from ``agree``) and
    ``iterations``.
    """
    device = next((p.device for p in step.model.parameters()), torch.device("cpu"))
    clock = _Clock(device)
    buf = torch.zeros(max(1, comm_bytes // 4), dtype=torch.float32, device=device)

    def timed_step() -> float:
        return timed_run(step, clock)

    timed_step()
    waits, after, back = [], [], []
    start = time.monotonic()
    while True:
        clock.sync()
        t0 = time.perf_counter()
        dist.all_reduce(buf, group=group)
        clock.sync()
        w = time.perf_counter() - t0
        a = timed_step()
        b = timed_step()
        (w, a, b), over_budget = agree([w, a, b], time.monotonic() - start > budget_s)
        waits.append(w)
        after.append(a)
        back.append(b)
        if len(after) >= max_iters or (over_budget and len(after) >= 2) or (
                len(after) >= min_iters and converged(after, min_n=min_iters, target_rel_ci=0.02)):
            break
    out = {"extra_s": statistics.median(x - y for x, y in zip(after, back)), "wait_s": statistics.median(waits),
           "after_comm_step_s": statistics.median(after), "back_to_back_step_s": statistics.median(back),
           "comm_bytes": comm_bytes, "iterations": len(after)}
    if device.type == "cpu":
        out["cores"] = _core_sharing(group)
    return out


def _machine_id() -> str:
    """What ranks on one machine share: the kernel's boot id (network namespaces, which
    validate's emulated hosts are, share it), else the host name."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read().strip()
    except OSError:
        return socket.gethostname()


def _core_sharing(group) -> dict:
    """How many ranks of ``group`` run on the busiest machine, with how many intra-op threads
    each, against the cores this rank may run on (one all-gather; every rank calls it)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    mine = (_machine_id(), torch.get_num_threads(), cores)
    everyone = [None] * dist.get_world_size(group)
    dist.all_gather_object(everyone, mine, group=group)
    per_machine: dict[str, int] = {}
    for machine, _, _ in everyone:
        per_machine[machine] = per_machine.get(machine, 0) + 1
    return {"ranks_per_machine": max(per_machine.values()), "threads_per_rank": max(t for _, t, _ in everyone),
            "cpu_cores": min(c for _, _, c in everyone)}


def _scaled(parts: list[float], total: float) -> list[float]:
    s = sum(parts)
    if s <= 0:
        return [total / len(parts)] * len(parts) if parts else []
    return [p * total / s for p in parts]


def _split_layers(layers, stamps, ready, clock: _Clock, t_f, t_b, t_o) -> tuple[list[float], list[float]]:
    """One iteration's forward and backward time per layer (they add up to the iteration's)."""
    n = len(layers)
    entered = [stamps.get(name) for name, _ in layers]
    fwd = [0.0] * n
    known = [k for k in range(n) if entered[k] is not None]
    for j, k in enumerate(known):
        end = entered[known[j + 1]] if j + 1 < len(known) else t_b
        fwd[k] = max(0.0, clock.between(entered[k], end))
    if known:  # work before the first layer is entered (argument handling) belongs to it
        fwd[known[0]] += max(0.0, clock.between(t_f, entered[known[0]]))
    else:
        fwd[0] = clock.between(t_f, t_b)
    total_b = clock.between(t_b, t_o)
    bwd = [0.0] * n
    done = 0.0
    last = None
    for k in reversed(range(n)):
        times = [clock.between(t_b, ready[p]) for p in layers[k][1] if p in ready]
        if not times:
            continue
        r = min(max(times), total_b)
        bwd[k] = max(0.0, r - done)
        done += bwd[k]
        last = k
    bwd[last if last is not None else 0] += max(0.0, total_b - done)
    return fwd, bwd


def gradient_bytes(model: torch.nn.Module) -> int:
    """Bytes of every trainable parameter's gradient."""
    return sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)



# ----------------------------------------------------------------------------- interference


class _CommWatcher:
    """Waits for a list of async collectives on a thread and records when the last ended.

    ``Work.wait`` releases the GIL, so the main thread keeps computing meanwhile; the
    end time is known to within the wake-up of this thread, not a compute unit. NCCL's
    ``wait`` only orders streams, so on a GPU the thread polls ``is_completed`` instead.
    """

    def __init__(self, works, clock_now: Callable[[], float], poll: bool = False):
        self.end: float | None = None
        self._works, self._now, self._poll = works, clock_now, poll
        self.done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            for w in self._works:
                if self._poll:
                    while not w.is_completed():
                        time.sleep(2e-4)
                else:
                    w.wait()
        finally:
            self.end = self._now()
            self.done.set()

    def join(self) -> None:
        self._thread.join()


def measure_interference(compute: Callable[[], Any], *, comm_bytes: int, group, device: torch.device,
                         repeats: int = 5, batch_s: float = 0.02, reduce_device: torch.device | None = None) -> dict:
    """How ``compute`` and concurrent all-reduces of ``comm_bytes`` on ``group`` slow each other,
    every rank of ``group`` at once.

    Four timings, each repeated ``repeats`` times with the ranks aligned by a barrier and
    kept as a median:

    - ``compute_alone_s``: ``units`` calls of ``compute``;
    - ``compute_concurrent_s``: the same while enough all-reduces run to cover them 1.5
      times: ``slowdown = concurrent / alone - 1`` (compute slowed by communication, the
      engine's ``overlap_slowdown``);
    - ``comm_alone_s``: ``collectives`` all-reduces, launched together and waited for;
    - ``comm_concurrent_s``: the same while every rank calls ``compute`` until they have
      ended: ``comm_slowdown = concurrent / alone - 1`` (communication slowed by compute,
      the engine's ``comm_slowdown``: on CPU, gloo's threads compete with compute for the
      cores; on a GPU, NCCL's kernels for SMs and memory bandwidth).
    """
    clock = _Clock(device)
    rd = reduce_device or (device if device.type == "cuda" else torch.device("cpu"))
    buf = torch.zeros(max(1, comm_bytes // 4), dtype=torch.float32, device=device)

    def agree_max(*values: float) -> list[float]:
        t = torch.tensor(values, dtype=torch.float64, device=rd)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
        return [float(v) for v in t.tolist()]

    def timed(fn) -> float:
        clock.sync()
        t0 = time.perf_counter()
        fn()
        clock.sync()
        return time.perf_counter() - t0

    for _ in range(2):
        compute()
    one = max(timed(compute), 1e-7)
    dist.all_reduce(buf, group=group)
    comm_one = max(timed(lambda: dist.all_reduce(buf, group=group)), 1e-7)
    one, comm_one = agree_max(one, comm_one)
    units = int(max(1, math.ceil(4 * batch_s / one)))
    k_cover = int(min(10_000, max(1, math.ceil(1.5 * units * one / comm_one))))
    k = int(min(10_000, max(2, math.ceil(max(4 * batch_s, 3 * one) / comm_one))))

    def run_units() -> None:
        for _ in range(units):
            compute()

    alone, together, comm_alone, comm_together = [], [], [], []
    for _ in range(repeats):
        dist.barrier(group=group)
        alone.append(timed(run_units))
        dist.barrier(group=group)
        works = [dist.all_reduce(buf, group=group, async_op=True) for _ in range(k_cover)]
        together.append(timed(run_units))
        for w in works:
            w.wait()
        clock.sync()
        dist.barrier(group=group)

        def comm_only() -> None:
            for w in [dist.all_reduce(buf, group=group, async_op=True) for _ in range(k)]:
                w.wait()
        comm_alone.append(timed(comm_only))
        dist.barrier(group=group)
        t0 = time.perf_counter()
        watcher = _CommWatcher([dist.all_reduce(buf, group=group, async_op=True) for _ in range(k)],
                               time.perf_counter, poll=device.type == "cuda")
        while not watcher.done.is_set():
            compute()
        clock.sync()
        watcher.join()
        comm_together.append(watcher.end - t0)
    c_alone, c_conc = statistics.median(alone), statistics.median(together)
    m_alone, m_conc = statistics.median(comm_alone), statistics.median(comm_together)
    return {"units": units, "collective": "all_reduce", "collective_bytes": int(buf.numel() * 4),
            "collectives_covering_compute": k_cover, "collectives": k,
            "compute_alone_s": c_alone, "compute_concurrent_s": c_conc,
            "comm_alone_s": m_alone, "comm_concurrent_s": m_conc,
            "slowdown": max(0.0, c_conc / c_alone - 1.0), "comm_slowdown": max(0.0, m_conc / m_alone - 1.0)}
