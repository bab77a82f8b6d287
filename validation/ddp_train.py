"""A plain PyTorch DDP training loop, the measurement side of the calibrate -> predict validation.

It imports nothing of dpsim: it is the training script a user would run, launched by
torchrun on every host (gloo, CPU), and it reports how long its steps take:

    torchrun --nnodes N --nproc-per-node 1 --node-rank I --master-addr A --master-port P \\
        validation/ddp_train.py --model validation/models.py:mlp:mlp_batch:classify \\
        --micro-batch 32 --bucket-cap-mb 4 --steps 20 --warmup 5 --out run.json

``--model`` is ``file.py:build[:batch_fn[:loss_fn]]`` (the file's ``example_input()`` and
``loss()`` when left out; its ``optimizer(parameters)``, else SGD with momentum). Each
step is ``optimizer.zero_grad()``, forward, loss, ``backward()`` (which returns once DDP
has all-reduced every bucket), ``optimizer.step()``. The step time is the time between
consecutive step starts on rank 0 (steps run in lockstep: every rank waits for the
slowest in each all-reduce); rank 0 writes the steady-state step times (after
``--warmup`` steps, in which DDP rebuilds its buckets) and their median to ``--out``.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import inspect
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn


def load(ref: str):
    parts = ref.split(":")
    path = Path(parts[0]).resolve()
    spec = importlib.util.spec_from_file_location(f"user_model_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(path.parent))
    spec.loader.exec_module(module)
    build = getattr(module, parts[1])
    batch_fn = getattr(module, parts[2] if len(parts) > 2 else "example_input")
    loss_fn = getattr(module, parts[3] if len(parts) > 3 else "loss")
    make_opt = getattr(module, "optimizer", None) or (lambda ps: torch.optim.SGD(ps, lr=1e-3, momentum=0.9))
    return build, batch_fn, loss_fn, make_opt


def resize(x, n: int):
    if isinstance(x, torch.Tensor):
        return x.index_select(0, torch.arange(n) % x.shape[0])
    if isinstance(x, (tuple, list)):
        return type(x)(resize(v, n) for v in x)
    return x


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--micro-batch", type=int, required=True)
    ap.add_argument("--bucket-cap-mb", type=float, default=None)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=300))
    rank = dist.get_rank()
    torch.manual_seed(0)
    build, batch_fn, loss_fn, make_opt = load(args.model)
    model = build()
    kwargs = {} if args.bucket_cap_mb is None else {"bucket_cap_mb": args.bucket_cap_mb}
    ddp = nn.parallel.DistributedDataParallel(model, **kwargs)
    opt = make_opt(ddp.parameters())
    batch = resize(batch_fn(), args.micro_batch)
    wants_batch = len(inspect.signature(loss_fn).parameters) >= 2

    def loss_of(out):
        return loss_fn(out, batch) if wants_batch else loss_fn(out)

    dist.barrier()
    starts = []
    for _ in range(args.warmup + args.steps + 1):
        starts.append(time.perf_counter())
        opt.zero_grad(set_to_none=True)
        out = ddp(*batch) if isinstance(batch, tuple) else ddp(batch)
        loss_of(out).backward()
        opt.step()
    steps = [b - a for a, b in zip(starts[args.warmup:], starts[args.warmup + 1:])]
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        doc = {"model": args.model, "micro_batch": args.micro_batch, "bucket_cap_mb": args.bucket_cap_mb,
               "world_size": int(os.environ["WORLD_SIZE"]), "threads": torch.get_num_threads(),
               "step_times_s": steps, "median_s": statistics.median(steps)}
        tmp = args.out + ".tmp"
        with open(tmp, "w") as fh:
            json.dump(doc, fh)
        os.replace(tmp, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
