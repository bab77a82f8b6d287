"""One rank of a validation run (torch only here): measure, then train for real.

Run by :mod:`dpsim.validate.runner` in every host of the testbed (or under torchrun),
with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set. Phases, in order:

1. ``collectives``: all-reduce over a size sweep (the calibration of this cluster);
2. ``compute``: per-layer forward/backward and optimizer times with every rank
   computing at once but not communicating (the conditions of the real run: ranks
   share the machine's cores), plus the gradient-ready order;
3. ``overlap``: the same compute while all-reduces run, for the slowdown factor;
4. ``ddp``: the validated run: real DistributedDataParallel training steps.

The prediction is built from phases 1-3 only: it is never fitted to phase 4.
Rank 0 writes one JSON document to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

from dpsim.validate.models import build, make_batch


def _median(xs):
    return statistics.median(xs) if xs else 0.0


def execution_order(model, x) -> list[tuple[str, object]]:
    """Top-level children of ``model`` in the order its forward runs them (one forward pass)."""
    import torch

    seen: list[str] = []
    named = dict(model.named_children())
    handles = [m.register_forward_pre_hook(lambda mod, a, n=n: seen.append(n) if n not in seen else None)
               for n, m in named.items()]
    try:
        with torch.no_grad():
            model(x)
    finally:
        for h in handles:
            h.remove()
    return [(n, named[n]) for n in seen]


def _layer_hooks(blocks, record):
    """Forward and backward-start timestamps of each block."""
    handles = []
    for i, (_, block) in enumerate(blocks):
        handles.append(block.register_forward_pre_hook(lambda m, a, i=i: record("f0", i)))
        handles.append(block.register_forward_hook(lambda m, a, o, i=i: record("f1", i)))
        handles.append(block.register_full_backward_pre_hook(lambda m, g, i=i: record("b0", i)))
    return handles


def measure_compute(model, blocks, x, y, loss_fn, optimizer, iters: int, warmup: int, sync=lambda: None):
    """Per-block forward/backward medians, optimizer median, and gradient-ready order.

    ``sync`` (a barrier) starts every iteration on every rank at once, so ranks that
    share cores contend through the whole iteration as they do in lockstep DDP steps.
    """
    n = len(blocks)
    stamps: dict = {}

    def record(kind, i):
        stamps[(kind, i)] = time.perf_counter()

    handles = _layer_hooks(blocks, record)
    ready: list[str] = []
    names = {p: name for name, p in model.named_parameters()}
    grad_handles = [p.register_post_accumulate_grad_hook(lambda p: ready.append(names[p]))
                    for p in model.parameters()]
    fwd = [[] for _ in range(n)]
    bwd = [[] for _ in range(n)]
    opt = []
    order: list[str] = []
    for it in range(warmup + iters):
        sync()
        stamps.clear()
        ready.clear()
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        t_bwd = time.perf_counter()
        loss.backward()
        t_end = time.perf_counter()
        t0 = time.perf_counter()
        optimizer.step()
        t_opt = time.perf_counter() - t0
        if it < warmup:
            continue
        for i in range(n):
            fwd[i].append(stamps[("f1", i)] - stamps[("f0", i)])
            # Block i's backward runs from its backward pre-hook to block i-1's (or the end);
            # the loss's own backward is charged to the last block.
            start = stamps[("b0", i)] if i < n - 1 else t_bwd
            end = stamps[("b0", i - 1)] if i > 0 else t_end
            bwd[i].append(end - start)
        opt.append(t_opt)
        order = list(ready)
    for h in handles + grad_handles:
        h.remove()
    return [_median(v) for v in fwd], [_median(v) for v in bwd], _median(opt), order


def _loss_for(hint):
    """Cross-entropy for the built-in models; mean square of the output for a user's model."""
    import torch.nn as nn

    if hint and hint[0] == "user":
        def loss(out, _y):
            while isinstance(out, (tuple, list)):
                out = out[0]
            if isinstance(out, dict):
                out = next(iter(out.values()))
            return out.float().pow(2).mean()
        return loss
    return nn.CrossEntropyLoss()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dpsim.validate.worker")
    ap.add_argument("--model", required=True)
    ap.add_argument("--micro-batch", type=int, required=True)
    ap.add_argument("--bucket-cap-mb", type=float, default=None)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--sizes", default="65536,262144,1048576,4194304,16777216")
    ap.add_argument("--out", required=True)
    ap.add_argument("--timeout-s", type=float, default=120.0)
    ap.add_argument("--input-shape", default=None)
    args = ap.parse_args(argv)

    import datetime

    import torch
    import torch.distributed as dist
    import torch.nn as nn


    torch.set_num_threads(1)
    torch.manual_seed(0)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.timeout_s))
    rank, world = dist.get_rank(), dist.get_world_size()
    result: dict = {"schema": "dpsim.validation-run/1", "world_size": world, "model": args.model,
                    "micro_batch": args.micro_batch, "bucket_cap_mb": args.bucket_cap_mb,
                    "torch": torch.__version__}

    model, hint = build(args.model, **({"input_shape": args.input_shape} if ":" in args.model else {}))
    x, y = make_batch(hint, args.micro_batch, seed=rank)
    grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters())

    # 1. collectives: all-reduce sweep, every rank times, the slowest rank's median counts.
    # The sweep reaches past the largest possible bucket (all gradients), so no bucket's
    # time is extrapolated beyond the measured sizes.
    sizes = [int(s) for s in args.sizes.split(",")]
    while sizes[-1] < grad_bytes:
        sizes.append(sizes[-1] * 4)
    coll = []
    for size in sizes:
        t = torch.zeros(size // 4)
        reps = max(3, min(20, int(2e7 // max(size, 1))))
        times = []
        for r in range(reps + 2):
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(t)
            if r >= 2:
                times.append(time.perf_counter() - t0)
        med = torch.tensor([_median(times)])
        dist.all_reduce(med, op=dist.ReduceOp.MAX)
        coll.append({"size_bytes": size, "time_s": float(med)})
        del t
    result["collectives"] = coll

    # 2. compute, all ranks at once (each iteration started together), no communication.
    loss_fn = _loss_for(hint)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    blocks = execution_order(model, x)
    owned = {id(p) for _, blk in blocks for p in blk.parameters()}
    if any(id(p) not in owned for p in model.parameters()):
        raise SystemExit("validate: the model has parameters outside its top-level children; "
                         "wrap them in child modules (each child is one layer for dpsim)")
    fwd, bwd, opt_s, ready = measure_compute(model, blocks, x, y, loss_fn, optimizer, iters=8, warmup=3,
                                             sync=dist.barrier)
    # Memory-copy bandwidth with every rank copying at once (DDP copies gradients into
    # its bucket buffers and back).
    src = torch.ones(max(1 << 20, min(grad_bytes, 64 << 20)) // 4)
    dst = torch.empty_like(src)
    copies = []
    for _ in range(7):
        dist.barrier()
        t0 = time.perf_counter()
        dst.copy_(src)
        copies.append(time.perf_counter() - t0)
    copy_bw = src.numel() * 4 / _median(copies[2:])
    del src, dst

    # 3. overlap: the same compute while all-reduces are in flight.
    big = torch.zeros(16 * 2**20 // 4)
    slow = []
    for _ in range(4):
        dist.barrier()
        works = [dist.all_reduce(big, async_op=True) for _ in range(3)]
        t0 = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        slow.append(time.perf_counter() - t0)
        for w in works:
            w.wait()
    # A collective waits for its slowest rank: predict with the slowest rank's compute.
    mine = {"fwd": fwd, "bwd": bwd, "opt": opt_s, "with_comm": _median(slow), "copy_bw": copy_bw}
    every = [None] * world
    dist.all_gather_object(every, mine)
    slowest = max(every, key=lambda m: sum(m["fwd"]) + sum(m["bwd"]))
    fwd, bwd, opt_s = slowest["fwd"], slowest["bwd"], slowest["opt"]
    result["compute"] = {
        "blocks": [{"name": name, "forward_s": f, "backward_s": b,
                    "params": [{"name": f"{name}.{n}", "shape": list(p.shape)} for n, p in blk.named_parameters()]}
                   for (name, blk), f, b in zip(blocks, fwd, bwd)],
        "optimizer_s": opt_s,
        "grad_ready_order": ready,
        "rank_compute_s": [sum(m["fwd"]) + sum(m["bwd"]) for m in every],
        "copy_bytes_per_s": min(m["copy_bw"] for m in every),
    }
    result["overlap"] = {"compute_alone_s": sum(fwd) + sum(bwd), "compute_with_comm_s": slowest["with_comm"]}

    # 4. the validated run: real DDP (a fresh model, so nothing is reused from the measurements).
    model, hint = build(args.model, **({"input_shape": args.input_shape} if ":" in args.model else {}))
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=args.bucket_cap_mb)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=1e-3, momentum=0.9)
    x, y = make_batch(hint, args.micro_batch, seed=100 + rank)
    dist.barrier()
    stamps, phases = [], []
    for _ in range(args.warmup + args.steps + 1):
        t0 = time.perf_counter()
        stamps.append(t0)
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(ddp(x), y)
        t1 = time.perf_counter()
        loss.backward()  # returns once DDP has waited for every bucket's all-reduce
        t2 = time.perf_counter()
        optimizer.step()
        phases.append((t1 - t0, t2 - t1, time.perf_counter() - t2))
    steps = [b - a for a, b in zip(stamps[args.warmup:], stamps[args.warmup + 1:])]
    kept = phases[args.warmup:args.warmup + args.steps]
    logging = ddp._get_ddp_logging_data()
    result["ddp"] = {"step_times_s": steps,
                     "forward_s": _median([k[0] for k in kept]),
                     "backward_and_wait_s": _median([k[1] for k in kept]),
                     "optimizer_s": _median([k[2] for k in kept]),
                     "rebuilt_bucket_sizes": logging.get("rebuilt_bucket_sizes", "")}
    gathered = [None] * world
    dist.all_gather_object(gathered, steps)
    result["ddp"]["all_rank_step_times_s"] = gathered
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        tmp = args.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(result, f)
        os.replace(tmp, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
