"""Collective micro-benchmarks of the harness: nccl-tests-like size sweeps over torch.distributed.
"""

from __future__ import annotations

import math
import time
from typing import Callable

import torch
import torch.distributed as dist

from dpsim.measure.timing import Clock, Steps, human_bytes

ELEMENT = torch.float32
ELEMENT_BYTES = 4

_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


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
          batch_s: float, max_inner: int, backend: str, device: torch.device, scale: float = 1.0,
          max_iters: int | None = None, target_rel_ci: float | None = None, budget_s: float | None = None
          ) -> dict[int, list]:
    """Per-call times of each size's ``fn`` (the slowest rank's): warm-up per size, then rounds over all sizes.

    Sizes are interleaved (round r times every size once) rather than measured one
    after another, so a burst of load from something else on the machine spreads over
    all sizes instead of biasing a few, and the medians stay comparable. Each round's
    times go through one MAX all-reduce, so every rank of ``group`` holds the slowest
    rank's times (a collective ends when its last rank does) and takes the same decision
    to go on: after ``iters`` rounds, rounds continue until every size's mean is known
    within ``target_rel_ci`` (95 % Student-t interval), ``max_iters`` rounds were made
    or ``budget_s`` has passed (on any rank).
    """
    from dpsim.measure.trainstep import converged

    inner = {}
    for size, fn in fns.items():
        name = f"{label} warm-up {human_bytes(size)}"
        steps.begin(name)
        inner[size] = calls_per_repeat(fn, group=group, clock=clock, warmup=warmup, batch_s=batch_s,
                                       max_inner=max_inner, backend=backend, device=device)
        steps.end(name)
    times: dict[int, list] = {size: [] for size in fns}
    max_iters = max(iters, max_iters if max_iters is not None else iters)
    start = time.monotonic()
    r = 0
    while True:
        name = f"{label} round {r + 1}"
        steps.begin(name)
        row = [scale * time_repeat(fn, inner[size], group=group, clock=clock) for size, fn in fns.items()]
        over = budget_s is not None and time.monotonic() - start > budget_s
        t = torch.tensor(row + [1.0 if over else 0.0], dtype=torch.float64, device=_reduce_device(backend, device))
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
        values = t.tolist()
        for size, v in zip(fns, values):
            times[size].append(v)
        steps.end(name)
        r += 1
        if r < iters:
            continue
        if values[-1] > 0 or r >= max_iters or target_rel_ci is None or all(
                converged(ts, min_n=iters, target_rel_ci=target_rel_ci) for ts in times.values()):
            return times
        steps.grow(1)
