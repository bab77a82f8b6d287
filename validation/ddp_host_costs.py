"""DDP's host-side costs measured on real ``DistributedDataParallel`` (gloo, one rank, this machine's CPU).

``python validation/ddp_host_costs.py`` times forward + backward of a chain of tiny linear
layers (negligible arithmetic, so what it measures is dispatch and DDP's bookkeeping) bare and
wrapped in DDP with its options, interleaved over repeats (minimum of each kept), and prints:

* the forward wrapper's time per call (a one-parameter module): dpsim charges
  ``DDP_FORWARD_DISPATCHES`` x ``HOST_OVERHEAD_PER_OP_S`` (:mod:`dpsim.strategies.ddp_costs`);
* DDP's extra time per parameter with and without ``gradient_as_bucket_view`` (the autograd
  hook and the copies: two CPU ops per parameter, one with the view). On a GPU each copy is a
  CUDA kernel whose dispatch dpsim floors at ``HOST_OVERHEAD_PER_OP_S``; on the CPU an op costs
  about 1 us, so this is the CPU-side share only;
* the unused-parameter search per autograd node (``find_unused_parameters=True`` against the
  same with ``static_graph=True``, which skips it; two nodes per layer: the matmul's and the
  parameter's ``AccumulateGrad``): dpsim's ``UNUSED_SEARCH_PER_NODE_S``.

A timing script, not a test: run it on an idle machine, by hand.
"""

from __future__ import annotations

import os
import tempfile
import time
import warnings

import torch
import torch.distributed as dist
from torch import nn

from dpsim.strategies.ddp_costs import DDP_FORWARD_DISPATCHES, UNUSED_SEARCH_PER_NODE_S
from dpsim.workload.roofline import HOST_OVERHEAD_PER_OP_S


def _chain(n: int) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(*[nn.Linear(4, 4, bias=False) for _ in range(n)])


def _best(fns: dict, repeats: int) -> dict:
    for fn in fns.values():
        for _ in range(5):
            fn()
    best = {k: float("inf") for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            t = time.perf_counter()
            fn()
            best[k] = min(best[k], time.perf_counter() - t)
    return best


def main() -> int:
    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as d:
        dist.init_process_group("gloo", init_method=f"file://{os.path.join(d, 'pg')}", rank=0, world_size=1)
        x = torch.randn(2, 4)
        one, one_ddp = _chain(1), nn.parallel.DistributedDataParallel(_chain(1), broadcast_buffers=False)
        b = _best({"bare": lambda: one(x), "ddp": lambda: one_ddp(x)}, 400)
        print(f"forward wrapper: {(b['ddp'] - b['bare']) * 1e6:.1f} us per call "
              f"(dpsim: {DDP_FORWARD_DISPATCHES} x {HOST_OVERHEAD_PER_OP_S * 1e6:g} us)")
        for n in (400, 1600):
            variants = {
                "bare": _chain(n),
                "ddp": nn.parallel.DistributedDataParallel(_chain(n), broadcast_buffers=False),
                "view": nn.parallel.DistributedDataParallel(_chain(n), broadcast_buffers=False,
                                                            gradient_as_bucket_view=True),
                "unused": nn.parallel.DistributedDataParallel(_chain(n), broadcast_buffers=False,
                                                              find_unused_parameters=True),
                "static": nn.parallel.DistributedDataParallel(_chain(n), broadcast_buffers=False,
                                                              find_unused_parameters=True, static_graph=True),
            }

            def step(m):
                for p in m.parameters():
                    p.grad = None
                m(x).sum().backward()

            b = _best({k: (lambda m=m: step(m)) for k, m in variants.items()}, 30)
            per = lambda k, b=b, n=n: (b[k] - b["bare"]) / n * 1e6
            print(f"{n} parameters: DDP {per('ddp'):.2f} us/parameter, with gradient_as_bucket_view "
                  f"{per('view'):.2f}; unused-parameter search {(b['unused'] - b['static']) / (2 * n) * 1e6:.2f} "
                  f"us/node (dpsim: {UNUSED_SEARCH_PER_NODE_S * 1e6:g})")
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
