"""The torch micro-benchmarks every calibrate rank runs.

:func:`run_rank` is one rank's whole calibration. It joins the process group described
by the usual torchrun variables (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``MASTER_ADDR``, ``MASTER_PORT``), whether torchrun or :mod:`dpsim.calibrate.runner`
set them, so the local gloo run, a local NCCL run and a multi-node torchrun are the
same code with another backend.

Collectives
    Every op in the plan over a geometric size sweep, like nccl-tests: ``size`` is the
    whole buffer (all-gather output, reduce-scatter input), float32 elements, rounded
    down to whole elements (and to a multiple of the ranks for gather/scatter). For
    each size: ``warmup`` calls and one timed call to estimate the cost; then rounds,
    each timing every size once (sizes interleaved, so a burst of outside load hits all
    sizes alike rather than a few): a barrier, then ``inner`` back-to-back calls
    (``inner`` makes a repeat last about ``batch_s``; all ranks agree on it through a
    MAX all-reduce). A repeat's time is the slowest rank's (a collective ends when its
    last rank does). After ``iters`` rounds, rounds go on until every size's mean is
    known within ``target_rel_ci`` (95 % Student-t interval), or ``max_iters`` rounds, or
    ``budget_s`` seconds (:func:`~dpsim.measure.bench_collectives.sweep`); the profile
    keeps the median (what the fit uses: robust to bursts of outside load), min, max,
    quartiles, mean and its interval. On GPU the time comes from CUDA events on the
    current stream (which waits for NCCL's), on CPU from ``time.perf_counter``.

    Nodes are told apart by torchrun's own facts before host names (containers and
    network namespaces share one host name): ``--ranks-per-node`` if given, else
    ``GROUP_RANK`` (torchrun's node rank), else blocks of ``LOCAL_WORLD_SIZE``, else the
    host name. With several nodes, ``intra_node`` is measured on one communicator per
    node (all nodes at once, as DDP's intra-node rings would run) and ``inter_node`` on
    the whole world. ``sendrecv`` is a ping-pong between two ranks (node 0's first two for
    intra-node, the first rank of nodes 0 and 1 for inter-node); its time is half the
    round trip, the one-way alpha + S/B of the DESIGN's point-to-point model.

Compute (every rank at once, as in training: ranks of one host share its cores)
    matmul FLOP/s per dtype over a few shapes (``2*m*n*k / t``; float32 with TF32
    allowed on GPU, as the GPU presets define it; the median over ranks); device copy
    bandwidth (``2 * bytes / t``: read plus write, every rank copying at once); the
    user's training step as trained (:mod:`dpsim.measure.trainstep`: forward, loss, backward,
    optimizer, each iteration started on every rank at once, repeated until the mean
    step is known within ``target_rel_ci`` or a limit, the slowest rank's time per
    iteration, split per traced layer); with several ranks, the same step right after
    an all-reduce of its gradients' bytes, against back to back (a communication-bound
    DDP rank computes after waiting on the network:
    :func:`~dpsim.measure.trainstep.measure_step_after_comm`); and the interference both ways between that
    compute and concurrent all-reduces
    (:func:`~dpsim.measure.bench_compute.bench_interference`): the compute slowdown
    while all-reduces run and the all-reduce slowdown while every rank computes.
    The model is built before any collective is measured, so a model that fails to
    build or run fails the calibration at once.

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
import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from dpsim.collectives.ops import OPS
from dpsim.measure.bench_collectives import (
    _collective_fn,
    _pingpong_fn,
    _reduce_device,
    aligned_size,
    sweep,
)
from dpsim.measure.bench_compute import (
    bench_interference,
    bench_matmul,
    bench_memcpy,
    FRESH_PROCESS_POINTS,
    FRESH_PROCESSES,
    bench_fresh_processes,
    fresh_process_schedule,
    bench_step,
    bench_step_after_comm,
    make_step,
)
from dpsim.measure.bench_ops import bench_ops, op_steps
from dpsim.measure.timing import (
    STARTUP_GRACE_S,
    Clock,
    Emit,
    Steps,
    Watchdog,
    human_bytes,
    kernel_clock,
)
from dpsim.processes import meminfo_bytes

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
    if rank != 0:  # one copy of torch's and gloo's warnings, not one per rank
        warnings.simplefilter("ignore")
    if backend == "gloo" and not os.environ.get("OMP_NUM_THREADS"):
        # What torchrun does for several ranks per node: one intra-op thread each (a
        # single rank per node keeps torch's default, as the training script would).
        if local_world > 1:
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // local_world))
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


def _node_layout(plan: dict, rank: int, world: int) -> tuple[list[list[int]], list[str], str]:
    """Ranks grouped into nodes, every rank's host name, and which fact grouped them."""
    facts: list[Any] = [None] * world
    dist.all_gather_object(facts, (socket.gethostname(), os.environ.get("GROUP_RANK"),
                                   os.environ.get("LOCAL_WORLD_SIZE")))
    hostnames = [f[0] for f in facts]
    rpn = plan.get("ranks_per_node")
    if rpn:
        keys, how = [r // rpn for r in range(world)], "--ranks-per-node"
    elif all(f[1] is not None and f[1].isdigit() for f in facts):
        keys, how = [int(f[1]) for f in facts], "GROUP_RANK (torchrun's node rank)"
    elif all(f[2] is not None and f[2].isdigit() and int(f[2]) > 0 for f in facts) and len({f[2] for f in facts}) == 1:
        lws = int(facts[0][2])
        keys, how = [r // lws for r in range(world)], "LOCAL_WORLD_SIZE"
    else:
        order = list(dict.fromkeys(hostnames))
        keys, how = [order.index(h) for h in hostnames], "host name"
    nodes: dict[int, list[int]] = {}
    for r, k in enumerate(keys):
        nodes.setdefault(k, []).append(r)
    return [nodes[k] for k in sorted(nodes)], hostnames, how


def _agree_max(reduce_device) -> Callable[[list[float], bool], tuple[list[float], bool]]:
    """Every rank's times and flag, each the largest over ranks (the slowest rank's time; a
    flag any rank raised): all ranks see the same values and so stop together."""
    def agree(times: list[float], flag: bool) -> tuple[list[float], bool]:
        t = torch.tensor(list(times) + [1.0 if flag else 0.0], dtype=torch.float64, device=reduce_device)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        values = t.tolist()
        return values[:-1], values[-1] > 0
    return agree


def _calibrate(plan, rank, world, device, clock, steps: Steps, backend, emit) -> dict | None:
    nodes, hostnames, nodes_from = _node_layout(plan, rank, world)
    steps.end("process group start-up")
    user_step = None
    if plan.get("compute") and plan.get("model"):
        # Fail fast: build the user's step (model, batch, loss, optimizer) and run it once
        # before minutes of collectives.
        label = f"model {plan['model']}: build and first step"
        steps.begin(label)
        user_step = make_step(plan, device)
        user_step.run()
        steps.end(label)
    on_cpu_with_step = user_step is not None and device.type == "cpu"
    fresh_counts = fresh_process_schedule(plan.get("fresh_processes", FRESH_PROCESSES) if on_cpu_with_step else 0)
    fresh_runs: list[dict] = []

    def fresh_probe(point: int) -> list[dict]:
        """The step in fresh processes at one point of the calibration, paired with this
        process's (every rank at once); returns every fresh process's so far, in the order they ran."""
        n = fresh_counts[point]
        if n:
            label = (f"training step in {n} fresh process{'es' if n > 1 else ''} "
                     f"({FRESH_PROCESS_POINTS[point]} of the calibration)")
            steps.begin(label)
            fresh_runs.extend(bench_fresh_processes(plan, user_step, _agree_max(_reduce_device(backend, device)), n))
            steps.end(label)
        return list(fresh_runs)

    fresh_probe(0)
    sizes_in = [int(s) for s in plan["sizes"]]
    ops = [op for op in plan["ops"] if op in OPS]
    want_p2p = "sendrecv" in plan["ops"]
    node_sizes = {len(n) for n in nodes}
    classes = []
    if world >= 2 and min(node_sizes) >= 2 and len(node_sizes) == 1:
        classes.append("intra_node")
    if len(nodes) >= 2 and len(node_sizes) == 1:  # a profile's inter_node is n_nodes of n_ranks / n_nodes each
        classes.append("inter_node")
    warnings = []
    if world >= 2 and "intra_node" not in classes and max(node_sizes) > 1:  # one rank per node has no intra-node
        warnings.append(f"intra_node not measured: nodes have {sorted(node_sizes)} ranks "
                        "(need the same number, at least 2, on every node)")
    if len(nodes) >= 2 and len(node_sizes) > 1:
        warnings.append(f"inter_node not measured: nodes have {sorted(node_sizes)} ranks "
                        "(need the same number on every node)")
    model_steps = 1 + (world > 1) + sum(n > 0 for n in fresh_counts)
    compute_steps = (1 + 1 + op_steps(plan) + (model_steps if plan.get("model") else 0) + 1) \
        if plan.get("compute") else 0
    adaptive = dict(max_iters=plan.get("max_iters"), target_rel_ci=plan.get("target_rel_ci"),
                    budget_s=plan.get("budget_s"))
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
            times = sweep(fns, f"{lc} {op}", steps, group=group, **common, **adaptive)
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
        # a repeat's time is the slowest rank's (the sweeps already agree on it; the ping-pong's
        # bystanders hold zeros)
        rows = ops_out.get("sendrecv", [])
        if rows:
            t = torch.tensor([r["times_s"] for r in rows], dtype=torch.float64, device=rd)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            for r, times in zip(rows, t.tolist()):
                r["times_s"] = times
        results["collectives"][lc] = {"n_ranks": n0, "n_nodes": nn, "ops": ops_out}
    if plan.get("compute"):
        results["compute"] = _compute(plan, rank, world, device, clock, steps, backend, node_groups, my_node,
                                      user_step, fresh_probe)
    results["environment"] = _environment(plan, backend, device, hostnames, nodes, world, nodes_from)
    dist.barrier()
    return results if rank == 0 else None


def _compute(plan, rank, world, device, clock, steps, backend, node_groups, my_node, user_step,
             fresh_probe: Callable[[int], list[dict]]) -> dict:
    out: dict[str, Any] = {}
    fresh_probe(1)
    agree = _agree_max(_reduce_device(backend, device))
    steps.begin("matmul throughput")
    mine = {"matmul": bench_matmul(device, clock, plan)}
    steps.end("matmul throughput")
    steps.begin("memory copy bandwidth")
    mine["memcpy"] = bench_memcpy(device, clock, plan, sync=dist.barrier)
    steps.end("memory copy bandwidth")
    if plan.get("op_kernels"):
        dist.barrier()  # every rank times its kernels at once, as ranks compute at once in training
        mine["op_rates"] = bench_ops(device, kernel_clock(device), plan, steps)
    if user_step is not None:
        label = f"model {plan['model']} micro-batch {plan['micro_batch']}: training step"
        steps.begin(label)
        mine["model_step"] = bench_step(user_step, plan, agree)
        steps.end(label)
        if world > 1:
            label = "training step right after an all-reduce of its gradients"
            steps.begin(label)
            mine["model_step"]["after_comm"] = bench_step_after_comm(user_step, plan, agree)
            steps.end(label)
    steps.begin("interference of compute and all-reduce")
    group = node_groups[my_node] if node_groups else dist.group.WORLD
    mine["overlap"] = bench_interference(device, clock, plan, group, backend, user_step)
    steps.end("interference of compute and all-reduce")
    fresh = fresh_probe(2)
    if user_step is not None and fresh:
        mine["model_step"]["fresh_process_medians_s"] = [f["median_s"] for f in fresh]
        mine["model_step"]["fresh_process_ratios"] = [r for f in fresh for r in f["ratios"]]
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
    out["comm_slowdown"] = med(e["overlap"]["comm_slowdown"] for e in everyone)
    out["matmul"] = everyone[0]["matmul"]
    out["memcpy"] = [e["memcpy"] for e in everyone]
    out["overlap"] = {"per_rank": [e["overlap"] for e in everyone]}
    if all("op_rates" in e for e in everyone):
        out["op_rates"] = _merge_op_rates([e["op_rates"] for e in everyone])
        out["op_rates"]["dtype"] = plan["op_dtype"]
    if user_step is not None:
        steps_ = [e["model_step"] for e in everyone]
        # Every rank holds the slowest rank's times (``agree``); the per-layer split is the
        # rank whose own step was slowest.
        first = dict(steps_[0])
        slowest = max(steps_, key=lambda s: statistics.median(s["own_step_times_s"]))
        if "layer_times" in slowest:
            first["layer_times"] = slowest["layer_times"]
        first["own_step_times_s"] = [s["own_step_times_s"] for s in steps_]  # per rank: build takes each one's CV
        if all("fresh_process_ratios" in s for s in steps_):
            # The level from fresh processes (dpsim.measure.step_probe): each rank's median of
            # its paired ratios (a fresh process's step over this process's, timed back to back:
            # bench_fresh_processes), the median over ranks.
            first["fresh_process_medians_s"] = [s["fresh_process_medians_s"] for s in steps_]
            first["fresh_process_ratios"] = [s["fresh_process_ratios"] for s in steps_]
            first["fresh_process_ratio"] = statistics.median(statistics.median(s["fresh_process_ratios"])
                                                             for s in steps_)
        first.update({k: plan.get(k) for k in ("structure_hash", "forward_flops_per_sample")})
        out["model_step"] = first
    return out


def _merge_op_rates(per_rank: list[dict]) -> dict:
    """Every kernel all ranks timed, at the median over ranks (a rank past its budget times fewer)."""
    med = statistics.median
    out: dict[str, Any] = {"left_out": max(r["left_out"] for r in per_rank)}
    for kind, shape, times in (("matmul", ("m", "n", "k", "batch"), ("time_s",)),
                               ("attention", ("batch_heads", "seq", "head_dim", "causal"), ("forward_s", "backward_s")),
                               ("memory", ("size_bytes",), ("time_s",)),
                               ("memory_kinds", ("kind", "direction", "size_bytes"), ("time_s",))):
        by_shape: dict[tuple, list[dict]] = {}
        for rows in per_rank:
            for row in rows.get(kind, []):
                by_shape.setdefault(tuple(row[f] for f in shape), []).append(row)
        merged = []
        for key, rows in by_shape.items():
            if len(rows) == len(per_rank):
                merged.append({**dict(zip(shape, key)), **{t: med(r[t] for r in rows) for t in times}})
            elif kind not in ("memory", "memory_kinds"):
                out["left_out"] += 1
        out[kind] = merged
    return out


def _environment(plan, backend, device, hostnames, nodes, world, nodes_from) -> dict:
    names: list[Any] = [None] * world
    dist.all_gather_object(names, device_name(device))
    memory = (torch.cuda.get_device_properties(device).total_memory if device.type == "cuda"
              else meminfo_bytes("MemTotal"))
    return {
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "backend": backend,
        "backend_version": backend_version(backend),
        "device_names": sorted(set(names)),
        "device_type": device.type,
        "device_memory_bytes": memory,
        "threads_per_rank": torch.get_num_threads(),
        "hosts": len(nodes),
        "hostnames": list(dict.fromkeys(hostnames)),
        "world_size": world,
        "ranks_per_node": [len(n) for n in nodes],
        "ranks_per_node_simulated": bool(plan.get("ranks_per_node")),
        "nodes_from": nodes_from,
        "python_version": platform.python_version(),
        "platform": platform.platform(),
        "date_utc": datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat(),
        "plan": {k: plan[k] for k in ("ops", "sizes", "warmup", "iters", "max_iters", "target_rel_ci", "budget_s",
                                      "batch_s", "dtypes") if k in plan},
    }
