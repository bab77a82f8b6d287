"""calibrate's step right after an all-reduce (:func:`dpsim.measure.trainstep.measure_step_after_comm`)."""

from __future__ import annotations

import time

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist

from dpsim.measure.trainstep import TrainStep, measure_step_after_comm


def _step() -> TrainStep:
    model = torch.nn.Linear(64, 64)
    return TrainStep(model=model, batch=torch.randn(8, 64), loss_fn=lambda out: out.float().mean(),
                     optimizer=torch.optim.SGD(model.parameters(), lr=1e-3), loss_source="mean",
                     optimizer_source="sgd", samples=8)


@pytest.mark.slow
def test_the_extra_time_is_paired_against_the_back_to_back_step(process_group, monkeypatch):
    """A step that runs 20 ms slower after each all-reduce (a cold cache, an idle core, made
    deterministic here) measures 20 ms extra; the back-to-back step does not pay it."""
    step = _step()
    cold = {"next": False}
    real_all_reduce = dist.all_reduce

    def all_reduce(tensor, *args, **kwargs):
        cold["next"] = True
        return real_all_reduce(tensor, *args, **kwargs)

    real_run = step.run

    def run():
        if cold["next"]:
            cold["next"] = False
            time.sleep(0.02)
        real_run()

    monkeypatch.setattr(dist, "all_reduce", all_reduce)
    monkeypatch.setattr(step, "run", run)
    r = measure_step_after_comm(step, comm_bytes=1 << 20, min_iters=4, max_iters=6, budget_s=10.0)
    assert 4 <= r["iterations"] <= 6 and r["comm_bytes"] == 1 << 20
    assert r["wait_s"] > 0 and r["back_to_back_step_s"] > 0
    # extra_s pairs each after-comm step with its neighbour: the 20 ms survives a busy machine, while
    # the two medians taken apart can each drift by a few ms (seen at load 8: 16 ms apart)
    assert r["extra_s"] >= 0.019
    assert r["back_to_back_step_s"] < r["after_comm_step_s"]
    # one rank on this machine: whether ranks share its cores is recorded, and here they do not
    assert r["cores"]["ranks_per_machine"] == 1 and r["cores"]["threads_per_rank"] == torch.get_num_threads()
    assert r["cores"]["cpu_cores"] >= 1


def test_the_budget_stops_it_and_every_rank_agrees(process_group):
    step = _step()
    seen = []

    def agree(times, flag):
        seen.append(flag)
        return [2 * t for t in times], True  # another rank is slower and out of budget

    r = measure_step_after_comm(step, comm_bytes=4096, min_iters=50, max_iters=100, budget_s=1e-6, agree=agree)
    assert r["iterations"] == 2 == len(seen)  # a median of two at least, then the budget ends it
    assert r["wait_s"] > 0
