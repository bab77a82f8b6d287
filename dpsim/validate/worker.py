"""One rank of a validation run (torch only here): measure as ``dpsim calibrate`` does, then train for real.

Run by :mod:`dpsim.validate.runner` in every host of the testbed (or under torchrun),
with RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT set. Phases, in order:

0. ``step``: build the user's training step (:mod:`dpsim.measure.trainstep`: model, batch, loss,
   optimizer) and run it once, so a model that cannot train fails before any
   measurement;
1. ``collectives``: all-reduce over a size sweep reaching the model's gradient bytes
   (the largest bucket DDP can make), every rank timing, the slowest rank's median;
2. ``compute``: the training step as trained, every rank at once (ranks share the
   machine's cores as in the real run), split per traced layer
   (:func:`dpsim.measure.trainstep.measure_step`), and the memory-copy bandwidth with every rank
   copying (DDP copies gradients into its buckets and back);
3. ``overlap``: the interference of that compute and all-reduces, both ways
   (:func:`dpsim.measure.trainstep.measure_interference`), and ``after_comm``: the step right after
   waiting on an all-reduce of its gradients against back to back
   (:func:`dpsim.measure.trainstep.measure_step_after_comm`), as calibrate measures both;
4. ``ddp``: the validated run: real DistributedDataParallel training of the same step;
5. ``compute_after``: phase 2's step timed again (briefly, no layers): a control of the
   machine's speed across the run. On a shared machine a change of speed between the
   measurements and the DDP steps (another job starting, clocks) moves the DDP step without
   any fault of the model's; the control says so without looking at the DDP steps.
   ``collectives_after``: phase 1's largest all-reduce timed again, as phase 1 timed it: the
   same control for the network (the emulated NICs are the kernel's work, which a busy host
   slows as it slows compute), whose time dominates a communication-bound case.

With ``--ddp-only`` the rank runs phases 0 and 4 alone: a job measured while another job shares
its network (:mod:`dpsim.validate.mix`), whose measurements come from a run of its own alone.

The prediction is built from phases 1-3 only (by ``dpsim predict`` with a profile made
of them, :func:`dpsim.validate.runner.predict_run`): it is never fitted to phase 4.
Rank 0 writes one JSON document to ``--out``.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import statistics
import time

from dpsim.processes import run_as_rank


def _median(xs):
    return statistics.median(xs) if xs else 0.0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dpsim.validate.worker")
    ap.add_argument("--model", required=True, help="resolved reference (catalog name or builder)")
    ap.add_argument("--micro-batch", type=int, required=True)
    ap.add_argument("--bucket-cap-mb", type=float, default=None)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--sizes", default="65536,262144,1048576,4194304,16777216")
    ap.add_argument("--out", required=True)
    ap.add_argument("--timeout-s", type=float, default=120.0)
    ap.add_argument("--input-shape", default=None)
    ap.add_argument("--optimizer", default="adamw")
    ap.add_argument("--layers", default=None, help="JSON file: the traced layers [[name, [params]], ...]")
    ap.add_argument("--ddp-only", action="store_true", help="only build the step and train it with DDP")
    args = ap.parse_args(argv)

    import warnings

    import torch
    import torch.distributed as dist

    from dpsim.measure.trainstep import (
        build_train_step,
        gradient_bytes,
        measure_interference,
        measure_step,
        measure_step_after_comm,
    )

    if int(os.environ.get("RANK", "0")) != 0:  # one copy of torch's warnings, not one per rank
        warnings.simplefilter("ignore")
    if not os.environ.get("OMP_NUM_THREADS"):
        torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.timeout_s))
    rank, world = dist.get_rank(), dist.get_world_size()
    result: dict = {"schema": "dpsim.validation-run/2", "world_size": world, "model": args.model,
                    "micro_batch": args.micro_batch, "bucket_cap_mb": args.bucket_cap_mb,
                    "torch": torch.__version__, "threads": torch.get_num_threads()}
    facts = [None] * world
    dist.all_gather_object(facts, (os.environ.get("GROUP_RANK"), os.environ.get("LOCAL_WORLD_SIZE")))
    result["ranks_per_node"] = (int(facts[0][1]) if all(f[1] == facts[0][1] for f in facts) and facts[0][1]
                                else 1)

    def make_step(seed: int):
        return build_train_step(args.model, micro_batch=args.micro_batch, input_shape=args.input_shape,
                                optimizer=args.optimizer, seed=seed)

    # 0. the user's step, built and run once before anything is measured
    step = make_step(0)
    step.run()
    grad_bytes = gradient_bytes(step.model)
    result["step"] = {"loss": step.loss_source, "optimizer": step.optimizer_source, "gradient_bytes": grad_bytes}

    if args.ddp_only:
        del step
        _ddp(args, result, make_step, rank, world)
        return _finish(args, result, rank)

    # 1. collectives: all-reduce sweep past the largest possible bucket (all gradients), so
    # no bucket's time is extrapolated; every rank times, the slowest rank's median counts.
    # Below, down to the smallest bucket a small cap can make (one gradient tensor): with a cap under
    # the sweep's start each small tensor is its own all-reduce, whose per-call cost is measured then.
    sizes = [int(s) for s in args.sizes.split(",")]
    while sizes[-1] < grad_bytes:
        sizes.append(sizes[-1] * 4)
    if args.bucket_cap_mb is not None:
        smallest = max(int(args.bucket_cap_mb * 2**20), min(p.numel() * p.element_size()
                                                            for p in step.model.parameters() if p.requires_grad))
        while sizes[0] > max(4, smallest):
            sizes.insert(0, max(4, sizes[0] // 4 // 4 * 4))
    coll = [_time_all_reduce(size) for size in sizes]
    result["collectives"] = coll

    # 2. compute: the step as trained, every rank at once, per traced layer
    layers = None
    if args.layers:
        with open(args.layers) as fh:
            layers = [("" if name == "(root)" else name, params) for name, params in json.load(fh)]

    def agree(times, flag):
        t = torch.tensor(list(times) + [1.0 if flag else 0.0], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        values = t.tolist()
        return values[:-1], values[-1] > 0

    measured = measure_step(step, layers=layers, warmup=3, min_iters=8, max_iters=30, target_rel_ci=0.02,
                            budget_s=max(10.0, args.timeout_s / 4), agree=agree)
    a, b = torch.randn(512, 512), torch.randn(512, 512)
    mm = []
    for _ in range(7):
        t0 = time.perf_counter()
        torch.mm(a, b)
        mm.append(time.perf_counter() - t0)
    matmul_flops = 2 * 512**3 / _median(mm[2:])
    src = torch.ones(max(1 << 20, min(grad_bytes, 64 << 20)) // 4)
    dst = torch.empty_like(src)
    copies = []
    for _ in range(9):
        dist.barrier()
        t0 = time.perf_counter()
        dst.copy_(src)
        copies.append(time.perf_counter() - t0)
    copy_bw = 2 * src.numel() * 4 / _median(copies[2:])  # read + write, as calibrate reports it
    del src, dst
    result["compute"] = {**measured, "copy_bytes_per_s": copy_bw, "matmul_flops_per_s": matmul_flops}

    # 3. the interference of that compute and all-reduces, both ways
    def compute():
        step.optimizer.zero_grad(set_to_none=True)
        step.loss_fn(step.forward()).backward()

    result["overlap"] = measure_interference(
        compute, comm_bytes=int(min(25 * 2**20, max(2**20, grad_bytes // 2))) // 4 * 4,
        group=dist.group.WORLD, device=torch.device("cpu"), repeats=5)
    everyone = [None] * world
    dist.all_gather_object(everyone, {k: result["overlap"][k] for k in ("slowdown", "comm_slowdown")}
                           | {"copy": copy_bw})
    result["overlap"]["slowdown"] = _median([e["slowdown"] for e in everyone])
    result["overlap"]["comm_slowdown"] = _median([e["comm_slowdown"] for e in everyone])
    result["compute"]["copy_bytes_per_s"] = _median([e["copy"] for e in everyone])
    if world > 1:
        result["after_comm"] = measure_step_after_comm(step, comm_bytes=grad_bytes, min_iters=8, max_iters=15,
                                                       budget_s=max(5.0, args.timeout_s / 8), agree=agree)
    del step

    _ddp(args, result, make_step, rank, world)

    # 5. the control: phase 2's step (same seed) timed again, as phase 2 timed it
    again = make_step(0)
    after = measure_step(again, warmup=2, min_iters=8, max_iters=15, target_rel_ci=0.02,
                         budget_s=max(5.0, args.timeout_s / 8), agree=agree)
    result["compute_after"] = {"step_times_s": after["step_times_s"], "iterations": after["iterations"]}
    del again
    if world > 1:
        result["collectives_after"] = _time_all_reduce(coll[-1]["size_bytes"])
    return _finish(args, result, rank)


def _time_all_reduce(size: int) -> dict:
    """``size_bytes`` all-reduced a few times after two untimed ones, each rank timing; each repeat's
    slowest rank's time (``times_s``)."""
    import torch
    import torch.distributed as dist

    t = torch.zeros(size // 4)
    reps = max(5, min(20, int(2e7 // max(size, 1))))
    times = []
    for r in range(reps + 2):
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(t)
        if r >= 2:
            times.append(time.perf_counter() - t0)
    worst = torch.tensor(times, dtype=torch.float64)
    dist.all_reduce(worst, op=dist.ReduceOp.MAX)
    return {"size_bytes": size, "times_s": worst.tolist()}


def _ddp(args, result: dict, make_step, rank: int, world: int) -> None:
    """Phase 4: real DDP of a fresh step (nothing reused from the measurements)."""
    import torch.distributed as dist
    import torch.nn as nn

    step = make_step(100 + rank)
    kwargs = {} if args.bucket_cap_mb is None else {"bucket_cap_mb": args.bucket_cap_mb}
    ddp = nn.parallel.DistributedDataParallel(step.model, **kwargs)
    step = dataclasses.replace(step, model=ddp)
    dist.barrier()
    stamps, clock, phases = [], [], []
    for _ in range(args.warmup + args.steps + 1):
        t0 = time.perf_counter()
        stamps.append(t0)
        clock.append(time.time())  # shared by every process on the machine: jobs' steps line up in time
        step.optimizer.zero_grad(set_to_none=True)
        loss = step.loss_fn(step.forward())
        t1 = time.perf_counter()
        loss.backward()  # returns once DDP has waited for every bucket's all-reduce
        t2 = time.perf_counter()
        step.optimizer.step()
        phases.append((t1 - t0, t2 - t1, time.perf_counter() - t2))
    steps = [b - a for a, b in zip(stamps[args.warmup:], stamps[args.warmup + 1:])]
    kept = phases[args.warmup:args.warmup + args.steps]
    logging = ddp._get_ddp_logging_data()
    result["ddp"] = {"step_times_s": steps, "step_starts_unix_s": clock[args.warmup:],
                     "forward_s": _median([k[0] for k in kept]),
                     "backward_and_wait_s": _median([k[1] for k in kept]),
                     "optimizer_s": _median([k[2] for k in kept]),
                     "rebuilt_bucket_sizes": logging.get("rebuilt_bucket_sizes", "")}
    gathered = [None] * world
    dist.all_gather_object(gathered, steps)
    result["ddp"]["all_rank_step_times_s"] = gathered


def _finish(args, result: dict, rank: int) -> int:
    import torch.distributed as dist

    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        tmp = args.out + ".tmp"
        with open(tmp, "w") as f:
            json.dump(result, f)
        os.replace(tmp, args.out)
    return 0


def run_as_process() -> None:
    """:func:`main` as a rank's process (:func:`dpsim.processes.run_as_rank`): the runner reads a signal
    as the machine's failure (:class:`~dpsim.validate.runner.RankCrashed`, measured again), so a Python
    error must exit with status 1, not abort in gloo's threads at shutdown."""
    run_as_rank(lambda: main())


if __name__ == "__main__":
    run_as_process()
