"""``dpsim plan`` searches DualPipe with the expert-parallel all-to-all overlap for a mixture of experts
(DeepSeek-V3's schedule for it, arXiv:2412.19437 Sec. 3.2.1), where DualPipe runs: an even number of
stages and at least 2p micro-batches, an even count."""

from __future__ import annotations

import dataclasses

import pytest

from dpsim.plan.planner import Candidate, Planner
from dpsim.predict.config import PredictConfig
from dpsim.predict.run import predict

MOE = PredictConfig(model="mixtral-8x7b", link="infiniband", precision="bf16-mixed")


def test_default_schedules_add_dualpipe_for_an_moe_with_ep_where_it_runs():
    s = Planner._schedules
    assert ("dualpipe", 1) in s(4, 8, 32, None, moe_dual=True)
    # The pair given is the user's list (fuzz6): the command line passes None for --schedules left out.
    assert ("dualpipe", 1) not in s(4, 8, 32, ("1f1b", "1f1b-interleaved"), moe_dual=True)
    assert ("dualpipe", 1) not in s(4, 8, 32, None)  # dense (or ep 1): as before
    assert ("dualpipe", 1) not in s(4, 8, 32, ("1f1b",), moe_dual=True)  # the schedules asked for, only
    assert ("dualpipe", 1) not in s(4, 6, 32, None, moe_dual=True)  # fewer than 2p micro-batches
    assert ("dualpipe", 1) not in s(4, 9, 32, None, moe_dual=True)  # an odd count
    assert ("dualpipe", 1) not in s(3, 12, 32, None, moe_dual=True)  # an odd number of stages
    assert s(1, 8, 32, None, moe_dual=True) == [("1f1b", 1)]


def test_moe_candidates_run_dualpipe_with_the_overlap_and_dense_ones_do_not():
    cands, _ = Planner(MOE).candidates(64, global_batch=256, pps=(2, 4), micro_batches=(1,), recomputes=("full",))
    dual = [c for c in cands if c.schedule == "dualpipe"]
    assert dual and all(c.ep > 1 and c.moe_a2a_overlap for c in dual)
    assert all(c.pp % 2 == 0 and (256 // c.dp) >= 2 * c.pp for c in dual)
    assert " --schedule dualpipe " in dual[0].flags() and dual[0].flags().endswith(" --moe-a2a-overlap")
    # Without the flag the other schedules keep the all-to-alls blocking, as before.
    assert not any(c.moe_a2a_overlap for c in cands if c.schedule != "dualpipe")
    dense = PredictConfig(model="llama-2-7b", link="infiniband", precision="bf16-mixed")
    plain, _ = Planner(dense).candidates(64, global_batch=256, pps=(2, 4), micro_batches=(1,), recomputes=("full",))
    assert not any(c.schedule == "dualpipe" for c in plain)


def test_dualpipe_overlap_candidate_is_predicts_layout():
    """The candidate is predict's --schedule dualpipe --moe-a2a-overlap: same memory, and the closed
    form tracks the simulated step (the bound the planner's other MoE layouts are held to)."""
    planner = Planner(MOE)
    c = Candidate(gpus=64, tp=1, pp=4, dp=16, ep=8, strategy="zero1", micro_batch=1, global_batch=128,
                  recompute="full", schedule="dualpipe", virtual_stages=1, sequence_parallel=False,
                  moe_a2a_overlap=True)
    config = c.config(MOE)
    assert config.parallelism.moe_a2a_overlap and config.parallelism.schedule == "dualpipe"
    est = planner.estimate(c, global_batch=c.global_batch)
    pred = predict(dataclasses.replace(config, steps=1))
    assert est.memory_bytes == pytest.approx(pred.memory.total_bytes, rel=1e-12)
    assert est.step_time_s == pytest.approx(pred.step_time_s, rel=0.10)


def test_interleaved_chunks_searched_for_the_fuller_stages_when_pp_does_not_divide_the_blocks():
    """126 blocks on 16 stages: stages hold 7 or 8. One block per chunk on the fuller stages (8
    chunks) was never searched, only counts dividing the floor, 7 (modernjobs: Llama-3-405B tp8 pp16
    at 16,384 H100s, 7.53 s a step against the plan's best 7.78 s)."""
    chunks = {v for name, v in Planner._schedules(16, 16, 126, ("1f1b-interleaved",)) if name == "1f1b-interleaved"}
    assert {7, 8} <= chunks and 2 in chunks
    # Where pp divides the blocks nothing changes: 80 blocks on 4 stages, 20 each.
    even = {v for name, v in Planner._schedules(4, 8, 80, ("1f1b-interleaved",)) if name == "1f1b-interleaved"}
    assert even == {2, 3, 4, 5, 10, 20}
    # No count leaves an inner chunk empty: GPT-2's 12 blocks on 8 stages take no second chunk.
    assert not [v for name, v in Planner._schedules(8, 8, 12, ("1f1b-interleaved",)) if name == "1f1b-interleaved"]
