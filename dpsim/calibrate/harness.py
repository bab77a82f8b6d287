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
import os
import platform
import socket
import statistics
from typing import Any

import torch
import torch.distributed as dist

from dpsim.calibrate.bench_collectives import (
    _collective_fn,
    _pingpong_fn,
    _reduce_device,
    aligned_size,
    sweep,
)
from dpsim.calibrate.bench_compute import (
    bench_matmul,
    bench_memcpy,
    bench_model,
    bench_overlap,
)
from dpsim.calibrate.timing import (
    STARTUP_GRACE_S,
    Clock,
    Emit,
    Steps,
    Watchdog,
    human_bytes,
)
from dpsim.collectives.ops import OPS

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
    ops = [op for op in plan["ops"] if op in OPS]
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
