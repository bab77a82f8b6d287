"""The training step timed back to back, after streaming 64 MiB through the caches, and after 200 ms idle.

A diagnostic for VALIDATION.md part 2 (not a test): ``dpsim calibrate`` times the step back
to back, but in a communication-bound DDP step the compute of the next step starts after
the ranks waited on the network. Run: ``python validation/step_after_idle.py`` (one thread).
"""
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
torch.set_num_threads(1)
from dpsim.measure.trainstep import build_train_step  # noqa: E402

step = build_train_step("validation/models.py:mlp:mlp_batch:classify", micro_batch=32)
junk = torch.zeros(64 * 2**20 // 4)
def one():
    t0 = time.perf_counter()
    step.optimizer.zero_grad(set_to_none=True)
    step.loss_fn(step.forward()).backward(); step.optimizer.step()
    return time.perf_counter() - t0
for rep in range(3):
    warm, cold, idle = [], [], []
    for i in range(40):
        warm.append(one())
    for i in range(40):
        junk.add_(1.0)   # stream 64 MiB through the caches, as gloo's buffers do during an all-reduce
        cold.append(one())
    for i in range(40):
        time.sleep(0.2)
        idle.append(one())
    m = lambda v: round(1e3 * statistics.median(v[5:]), 2)
    print("warm", m(warm), "after 64 MiB stream", m(cold), "after 200 ms sleep", m(idle), flush=True)
