"""Issue 28 (fuzzing, "memory per rank"): the memory of an MoE job ignored uneven routing and the capacity
factor. ``dpsim memory`` gave the same GiB for every ``--moe-routing`` and ``--moe-capacity-factor``, though the
busiest expert-parallel rank receives more (token, expert) pairs than the mean and keeps their activations (the
dispatched tokens, the expert FFN intermediates, the combine buffer) for backward. The memory now reads the same
busiest-rank load the step time does (:func:`dpsim.predict.layout.expert_split`), so it rises with imbalance, is
bounded by the experts' capacity, and is unchanged under balanced routing."""

from __future__ import annotations

import pytest

import dpsim
from dpsim.predict.layout import expert_split
from dpsim.predict.resolve import resolve
from dpsim.strategies.tensor import ExpertSplit, tp_model
from dpsim.predict.run import load_model

GiB = 2 ** 30
BASE = dict(model="mixtral-8x7b", gpus=8, link="nvlink", ep=8, micro_batch=1)
BALANCED_ACTIVATIONS_BYTES = 44652560384.0
"""``dpsim memory`` of :data:`BASE` before the change (balanced routing)."""


def _mem(**kw):
    return dpsim.memory_report(dpsim.PredictConfig(**{**BASE, **kw})).memory


def _act(**kw) -> float:
    return _mem(**kw).activations_bytes


def _model():
    """The model ``predict`` and ``memory`` build for :data:`BASE`."""
    return load_model(resolve(dpsim.PredictConfig(**BASE)).config)


def test_balanced_routing_keeps_todays_memory():
    # Measured before the change on this job (bytes): balanced routing and zipf:0, its other name, alike.
    balanced = _mem()
    assert balanced.activations_bytes == BALANCED_ACTIVATIONS_BYTES
    assert _mem(moe_routing="zipf:0").total_bytes == balanced.total_bytes
    assert expert_split(resolve(dpsim.PredictConfig(**BASE)).config, _model()).activation_load == 1.0


@pytest.mark.parametrize("kind, values", [("gini", (0.0, 0.2, 0.4, 0.6)), ("zipf", (0.0, 0.5, 1.0, 1.5))])
def test_memory_rises_with_imbalance(kind, values):
    acts = [_act(moe_routing=f"{kind}:{v}") for v in values]
    assert all(b > a for a, b in zip(acts, acts[1:])), [a / GiB for a in acts]
    totals = [_mem(moe_routing=f"{kind}:{v}").total_bytes for v in values]
    assert totals[-1] > totals[0]


@pytest.mark.parametrize("capacity", [1.0, 1.25, 2.0])
def test_memory_is_capped_by_the_capacity_factor(capacity):
    balanced = _act()
    skewed = _act(moe_routing="zipf:1.5")
    capped = _act(moe_routing="zipf:1.5", moe_capacity_factor=capacity)
    assert balanced <= capped <= skewed
    # Every expert keeps at most capacity x its balanced share: the busiest rank's routed activations at most
    # capacity x the balanced ones, so the growth over balanced is at most (capacity - 1) x the routed part.
    routed = _routed_activation_bytes_per_rank()
    assert capped - balanced <= (capacity - 1.0) * routed * (1 + 1e-9)


def test_tighter_capacity_keeps_less():
    acts = [_act(moe_routing="zipf:1.5", moe_capacity_factor=c) for c in (1.0, 1.25, 2.0)]
    assert acts[0] < acts[1] < acts[2]


def _routed_activation_bytes_per_rank() -> float:
    """Independent count (mixtral-8x7b, micro-batch 1, no tensor parallelism, no recomputation): per MoE
    layer the eager count keeps, per routed copy, the dispatched token ``h`` and the combine buffer ``h``
    (2 bytes each) and the experts' fused gate/up output ``2·ffn`` and GLU output ``ffn`` (2 bytes each):
    ``2·(2h + 3·ffn)`` bytes per copy, ``s·top_k`` copies a layer, 32 layers."""
    s, h, ffn, k, layers = 4096, 4096, 14336, 2, 32
    return layers * s * k * 2.0 * (2 * h + 3 * ffn)


def test_independent_count_one_case():
    cfg = resolve(dpsim.PredictConfig(**{**BASE, "moe_routing": "zipf:1.0"})).config
    model = _model()
    load = expert_split(cfg, model).load
    assert load > 1.0
    balanced = tp_model(model, 1, experts=ExpertSplit(ep=8, etp=1))
    skewed = tp_model(model, 1, experts=ExpertSplit(ep=8, etp=1, load=load, activation_load=load))
    moe = [i for i, layer in enumerate(balanced.layers) if layer.routed_bytes_per_sample > 0]
    assert len(moe) == 32
    i = moe[0]
    grown = (skewed.layers[i].split_activation_bytes_per_sample
             - balanced.layers[i].split_activation_bytes_per_sample)
    assert grown == pytest.approx((load - 1.0) * _routed_activation_bytes_per_rank() / 32, rel=1e-12)
    # And what the job's memory reports: the same growth on every MoE layer of the one stage.
    assert _act(moe_routing="zipf:1.0") - _act() == pytest.approx(32 * grown, rel=1e-9)
