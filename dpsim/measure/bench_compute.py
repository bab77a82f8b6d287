"""Compute micro-benchmarks of the harness: matmul rates, copy bandwidth, the user's training step
(in this process, in fresh processes, and right after an all-reduce), and the interference
between compute and a concurrent all-reduce, both ways.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Callable

import torch

from dpsim.errors import CalibrationError
from dpsim.measure.bench_collectives import _reduce_device
from dpsim.measure.timing import Clock, _median_time
from dpsim.measure.trainstep import (
    TrainStep,
    build_train_step,
    gradient_bytes,
    measure_interference,
    measure_step,
    measure_step_after_comm,
    timed_run,
)

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


def bench_memcpy(device: torch.device, clock: Clock, plan: dict, sync: Callable[[], None] = lambda: None) -> dict:
    """Copy bandwidth (read + write) with every rank copying at once (``sync`` aligns the
    repeats): DDP copies each gradient into its bucket and back on every rank together."""
    nbytes = int(plan["memcpy_bytes"])
    src = torch.empty(nbytes, dtype=torch.uint8, device=device).fill_(1)
    dst = torch.empty_like(src)
    dst.copy_(src)
    times = []
    for _ in range(max(5, plan["iters"])):
        sync()
        clock.sync()
        t0 = clock.start()
        dst.copy_(src)
        times.append(clock.stop(t0))
    t = statistics.median(times)
    return {"bytes": nbytes, "time_s": t, "bandwidth_bytes_per_s": 2.0 * nbytes / t}


def make_step(plan: dict, device: torch.device) -> TrainStep:
    """The user's training step (:func:`dpsim.measure.trainstep.build_train_step`) as the plan names it."""
    return build_train_step(plan["model"], micro_batch=plan["micro_batch"], device=device,
                            input_shape=plan.get("input_shape"), seq_len=plan.get("seq_len"),
                            optimizer=plan.get("optimizer") or "adamw", seed=plan.get("seed", 0))


def bench_step(step: TrainStep, plan: dict, agree) -> dict:
    """The user's step as trained, every rank at once (``agree``), per traced layer."""
    layers = [(("" if name == "(root)" else name), params) for name, params in plan.get("model_layers") or []]
    use_bf16 = next(step.model.parameters()).device.type == "cuda" and torch.cuda.is_bf16_supported()
    if use_bf16:  # autocast around forward + loss, as mixed-precision training scripts do
        forward = step.forward

        def autocast_forward():
            with torch.autocast("cuda", dtype=torch.bfloat16):
                return forward()
        step.forward = autocast_forward  # type: ignore[method-assign]
    r = measure_step(step, layers=layers or None, warmup=max(2, plan.get("warmup", 2)),
                     min_iters=plan["iters"], max_iters=plan.get("max_iters", 5 * plan["iters"]),
                     target_rel_ci=plan.get("target_rel_ci", 0.02), budget_s=plan.get("budget_s", 60.0),
                     agree=agree)
    r.update(model=plan["model"], micro_batch=plan["micro_batch"], dtype="bfloat16" if use_bf16 else "float32",
             loss=step.loss_source, optimizer=step.optimizer_source, threads=torch.get_num_threads())
    return r


FRESH_PROCESSES = 3
"""Fresh processes that time the step on a CPU host (:mod:`dpsim.measure.step_probe`)."""

FRESH_PROCESS_POINTS = ("start", "middle", "end")
"""Where in the calibration the fresh processes run: before the collective sweeps, after them,
and after the compute benchmarks. A CPU host's speed drifts over minutes (VALIDATION.md part 2:
one convnet step measured 78.1 and 86.5 ms by two calibrations minutes apart, each the median of
3 back-to-back fresh processes); spread over the calibration, their median samples that drift
rather than one moment of it."""


def fresh_process_schedule(processes: int) -> list[int]:
    """How many of ``processes`` fresh processes run at each of :data:`FRESH_PROCESS_POINTS`:
    evenly, one left over in the middle, two left over at start and end."""
    counts = [processes // 3] * 3
    extra = processes % 3
    if extra == 1:
        counts[1] += 1
    elif extra == 2:
        counts[0] += 1
        counts[2] += 1
    return counts


def fresh_process_plan(plan: dict, threads: int) -> dict:
    """What one fresh process (:mod:`dpsim.measure.step_probe`) is handed: the calibration
    plan's model step, with ``threads`` intra-op threads."""
    child = {k: plan.get(k) for k in ("model", "micro_batch", "input_shape", "seq_len", "optimizer", "seed",
                                       "warmup")}
    child.update(threads=threads)
    return child


def fresh_process_pairs(plan: dict) -> tuple[int, int, float]:
    """How many paired steps one fresh process runs: at least, at most, and the seconds after
    which the pairs stop once the least is reached."""
    least = max(5, plan["iters"])
    return least, max(least, plan.get("max_iters") or 2 * least), min(30.0, plan.get("budget_s", 60.0) / 2)


class _Probe:
    """One fresh process (:mod:`dpsim.measure.step_probe`), driven a step at a time."""

    def __init__(self, plan: dict):
        self.stderr = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen([sys.executable, "-m", "dpsim.measure.step_probe"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.stderr, text=True)
        self._send(json.dumps(fresh_process_plan(plan, threads=torch.get_num_threads())))
        self._receive("ready")

    def _send(self, line: str) -> None:
        try:
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            self._failed()

    def _receive(self, key: str):
        line = self.proc.stdout.readline()
        if not line:
            self._failed()
        return json.loads(line)[key]

    def _failed(self):
        code = self.proc.wait()
        self.stderr.seek(0)
        tail = (self.stderr.read().strip().splitlines() or ["no output"])[-1]
        raise CalibrationError(f"--model: the step in a fresh process failed (exit {code}): {tail}")

    def step(self) -> float:
        self._send("step")
        return float(self._receive("step_s"))

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:  # pragma: no cover - a child that ignores end of input
                self.proc.kill()
                self.proc.wait()
        self.stderr.close()


def bench_fresh_processes(plan: dict, step: TrainStep, agree, processes: int = FRESH_PROCESSES) -> list[dict]:
    """The step in each of ``processes`` fresh processes on this rank, paired step by step with
    this process's own ``step``; every rank at once (``agree``), as training runs it: one process
    per rank, all computing.

    Each pair is one step here and one in the fresh process, back to back, the order alternating
    (a steady drift of the machine's speed then favours neither side); a pair's ratio is fresh
    over here. Timed apart (the fresh processes at three moments, this process's step at
    another) a change of the machine's load between the moments read as a difference of the
    processes: 5.15 and 7.30 with CPU burners on a 2-core box. Returns, per fresh process, its
    median step (``median_s``), this process's median over the same pairs (``own_median_s``)
    and the pairs' ratios (``ratios``).
    """
    least, most, budget_s = fresh_process_pairs(plan)
    out = []
    for _ in range(processes):
        probe = _Probe(plan)
        try:
            agree([], False)  # every rank's pairs start at once
            fresh: list[float] = []
            own: list[float] = []
            start = time.monotonic()
            while True:
                if len(fresh) % 2 == 0:
                    own.append(timed_run(step))
                    fresh.append(probe.step())
                else:
                    fresh.append(probe.step())
                    own.append(timed_run(step))
                _, stop = agree([], time.monotonic() - start > budget_s)
                if len(fresh) >= most or (stop and len(fresh) >= least):
                    break
        finally:
            probe.close()
        out.append({"median_s": statistics.median(fresh), "own_median_s": statistics.median(own),
                    "ratios": [f / o for f, o in zip(fresh, own)]})
    return out


def bench_step_after_comm(step: TrainStep, plan: dict, agree) -> dict:
    """The user's step right after waiting on an all-reduce of its gradients' bytes, against
    back to back (:func:`dpsim.measure.trainstep.measure_step_after_comm`), every rank at once."""
    return measure_step_after_comm(step, comm_bytes=gradient_bytes(step.model), min_iters=max(8, plan["iters"]),
                                   max_iters=plan.get("max_iters", 5 * plan["iters"]),
                                   budget_s=plan.get("budget_s", 60.0) / 2, agree=agree)


def bench_interference(device: torch.device, clock: Clock, plan: dict, group, backend: str,
                       step: TrainStep | None = None) -> dict:
    """The interference of compute and all-reduce both ways (:func:`dpsim.measure.trainstep.measure_interference`),
    with the user's forward + loss + backward as compute when a model is calibrated, else a matmul."""
    if step is not None:
        def compute():
            step.optimizer.zero_grad(set_to_none=True)
            step.loss_fn(step.forward()).backward()
        unit = "model forward + loss + backward"
    else:
        n = 4096 if device.type == "cuda" else 384
        dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
        a = torch.randn(n, n, device=device).to(dtype)
        b = torch.randn(n, n, device=device).to(dtype)
        c = torch.empty(n, n, device=device, dtype=dtype)

        def compute():
            torch.mm(a, b, out=c)
        unit = f"matmul {n}x{n} {str(dtype).removeprefix('torch.')}"
    r = measure_interference(compute, comm_bytes=int(plan["overlap_bytes"]), group=group, device=device,
                             repeats=max(5, plan["iters"]), batch_s=plan["batch_s"],
                             reduce_device=_reduce_device(backend, device))
    r["unit"] = unit
    return r
