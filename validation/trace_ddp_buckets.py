"""Where a DDP step's time goes, bucket by bucket, against the same all-reduces run alone (gloo).

A diagnostic for VALIDATION.md part 2 (not a test): a validation model (``mlp``, the
default, at micro-batch 32; ``lm``; ``convnet`` at 16: the first argument), PyTorch's
default buckets (or ``bucket_cap_mb``, the second argument), SGD with momentum, each bucket
all-reduced by a hook that records when DDP handed it over and when it completed. Launch
one rank per testbed host:

    dpsim testbed up --hosts 2 --nic 1gbit      # prints TAG
    ip netns exec TAG-h<i> env OMP_NUM_THREADS=1 GLOO_SOCKET_IFNAME=eth0 \
        python -m torch.distributed.run --nnodes 2 --nproc-per-node 1 --node-rank <i> \
        --master-addr 10.77.<subnet>.1 --master-port 29613 validation/trace_ddp_buckets.py

Rank 0 prints, for the last steps, each bucket's (hand-over, completion) in ms from the
step's start and when backward returned; then the medians of forward, backward and the
optimizer, and each bucket's all-reduce time in training, alone, and alone after 30 ms idle.
"""
import datetime
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
import models  # noqa: E402

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
rank = dist.get_rank()
torch.manual_seed(0)
name = sys.argv[1] if len(sys.argv) > 1 else "mlp"
if name not in ("mlp", "lm", "convnet"):
    sys.exit(f"trace_ddp_buckets.py: model {name!r} is not valid; expected mlp, lm or convnet")
model = getattr(models, name)()
cap = {} if len(sys.argv) < 3 else {"bucket_cap_mb": float(sys.argv[2])}
ddp = nn.parallel.DistributedDataParallel(model, **cap)
opt = models.optimizer(ddp.parameters())
x = getattr(models, f"{name}_batch")()
loss_of = models.next_token if name == "lm" else (lambda out, batch: models.classify(out))
events = []
def hook(state, bucket):
    t0 = time.perf_counter()
    buf = bucket.buffer()
    fut = dist.all_reduce(buf, async_op=True).get_future()
    def done(f):
        events.append((bucket.index(), buf.numel() * 4, t0, time.perf_counter()))
        return f.value()[0] / dist.get_world_size()
    return fut.then(done)
ddp.register_comm_hook(None, hook)
steps = []
phase = []
for i in range(25):
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    out = ddp(x); loss = loss_of(out, x)
    t1 = time.perf_counter()
    loss.backward()
    t2 = time.perf_counter()
    opt.step()
    t3 = time.perf_counter()
    steps.append(t0); phase.append((t1 - t0, t2 - t1, t3 - t2, t0))
ev = [e for e in events if e[2] > phase[5][3]]
by = {}
for idx, nb, a, b in ev:
    by.setdefault((idx, nb), []).append(b - a)
# standalone all-reduce of the same sizes, back-to-back
alone = {}
for (idx, nb) in by:
    t = torch.zeros(nb // 4)
    ts = []
    for _ in range(12):
        dist.barrier(); a = time.perf_counter(); dist.all_reduce(t); ts.append(time.perf_counter() - a)
    alone[(idx, nb)] = statistics.median(ts[2:])
# standalone with a 30 ms idle gap before each
gap = {}
for (idx, nb) in by:
    t = torch.zeros(nb // 4)
    ts = []
    for _ in range(10):
        dist.barrier(); time.sleep(0.03); a = time.perf_counter(); dist.all_reduce(t); ts.append(time.perf_counter() - a)
    gap[(idx, nb)] = statistics.median(ts[2:])
if rank == 0:
    import collections
    rows = collections.defaultdict(dict)
    starts = [p[3] for p in phase]
    for idx, nb, a, b in ev:
        i = max(j for j, s0 in enumerate(starts) if s0 <= a)
        rows[i][idx] = (1e3 * (a - starts[i]), 1e3 * (b - starts[i]))
    for i in sorted(rows)[-6:]:
        print("step", i, {k: tuple(round(x, 1) for x in v) for k, v in sorted(rows[i].items())}, "bwd end", round(1e3 * (phase[i][0] + phase[i][1]), 1))
    st = [b - a for a, b in zip(steps[5:], steps[6:])]
    print("step median ms", 1e3 * statistics.median(st))
    f, bw, o, _ = zip(*phase[5:])
    print("fwd+loss ms", 1e3 * statistics.median(f), "backward(incl. AR wait) ms", 1e3 * statistics.median(bw), "opt ms", 1e3 * statistics.median(o))
    for k in sorted(by):
        print("bucket", k[0], "bytes", k[1], "in-training AR ms", round(1e3 * statistics.median(by[k]), 2),
              "alone ms", round(1e3 * alone[k], 2), "after 30ms idle ms", round(1e3 * gap[k], 2))
dist.destroy_process_group()
