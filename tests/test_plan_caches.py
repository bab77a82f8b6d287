"""The planner's caches shared across candidates give exactly the answer of a planner that costs each
candidate afresh (issue 28: the 16,384-GPU searches were made faster by sharing work between layouts,
not by changing any number)."""

from __future__ import annotations

import dataclasses

import pytest

import dpsim.strategies.tensor as tensor
from dpsim.memory import stage_activation_bytes, stage_expert_numels
from dpsim.plan.planner import Planner
from dpsim.predict.config import PredictConfig
from dpsim.predict.resolve import resolve
from dpsim.strategies.pipeline import _dualpipe_steps, dualpipe_steps

CASES = [
    # A mixture of experts (expert splits, DualPipe, all-to-alls) and a dense model (interleaved chunks).
    (dict(model="mixtral-8x7b", link="infiniband", precision="bf16-params"), dict(gpus=[32], global_batch=64,
                                                                                   micro_batches=[1])),
    (dict(model="llama-3-8b", link="infiniband", precision="bf16-params"), dict(gpus=[32], global_batch=64,
                                                                                 micro_batches=[1, 2])),
]


def _fresh_caches() -> None:
    tensor._TP_CACHE.clear()
    tensor._DENSE_CACHE.clear()
    _dualpipe_steps.cache_clear()


@pytest.mark.parametrize("job,search", CASES, ids=["mixtral", "llama"])
def test_shared_caches_give_each_candidates_own_answer(job, search):
    base = resolve(PredictConfig(**job)).config  # as plan_layouts resolves it
    _fresh_caches()
    shared = Planner(base)
    cands, _ = shared.candidates(search["gpus"][0], global_batch=search["global_batch"],
                                 micro_batches=search["micro_batches"])
    together = [shared.estimate(c, global_batch=search["global_batch"]) for c in cands]
    # A few candidates costed alone (a planner each is slow): fitting ones of each schedule, and one that does not fit.
    picked: dict[tuple, int] = {}
    for k, (c, e) in enumerate(zip(cands, together)):
        picked.setdefault((c.schedule, e.fits, c.ep > 1, c.strategy), k)
    sample = sorted(picked.values())[:8]
    assert any(together[k].fits for k in sample) and any(not together[k].fits for k in sample)
    for c, e in ((cands[k], together[k]) for k in sample):
        _fresh_caches()
        alone = Planner(base).estimate(c, global_batch=search["global_batch"])
        assert dataclasses.asdict(alone) == dataclasses.asdict(e), c


def test_memos_match_the_plain_functions():
    base = PredictConfig(model="mixtral-8x7b", link="infiniband", precision="bf16-params")
    planner = Planner(base)
    planner.topology(64)
    from dpsim.strategies.tensor import ExpertSplit
    split = ExpertSplit(ep=4, etp=1, load=1.25)
    # Dense layers shared from an earlier split's shard; the routed ones' ops from another MoE layer's.
    tensor.tp_model(planner.model, 2, sequence_parallel=True)
    cached = tensor.tp_model(planner.model, 2, sequence_parallel=True, experts=split)
    plain = tensor._tp_model(planner.model, 2, True, split)
    assert cached.layers == plain.layers and cached.spec == plain.spec
    for p, m in ((4, 8), (8, 16)):
        steps = [tuple(dualpipe_steps(p, m, s)) for s in range(p)]
        assert [_dualpipe_steps(p, m, s) for s in range(p)] == steps
    c = next(c for c in planner.candidates(64, global_batch=128, micro_batches=[1])[0] if c.pp == 4 and c.tp == 2)
    layout = planner.layout(c, 128 // c.dp)
    assignment = planner.assignment(c.tp, layout)
    tpm = planner.tp_model(c.tp, c.sequence_parallel, c.cp, planner.experts(c)[0])
    memo: dict = {}
    for recompute in ("off", "selective", "full", "off"):
        lay = dataclasses.replace(layout, recompute=recompute)
        assert stage_activation_bytes(tpm, assignment, lay, planner.layout_precision, per_layer=memo) == \
            stage_activation_bytes(tpm, assignment, lay, planner.layout_precision)
    assert stage_expert_numels(tpm, assignment) == tuple(
        sum(tpm.layers[i].expert_numel_per_rank for chunk in stage for i in chunk) for stage in assignment)
