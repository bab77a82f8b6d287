"""Fit advice searches the micro-batch and the GPU count by bisection, and says what a linear search says.

Memory per GPU grows with the micro-batch (activations are linear in it) and shrinks with
the GPU count (sharded state goes as 1/N), so :func:`dpsim.memory.fit_advice` finds the
largest micro-batch and the smallest whole number of nodes that fit in O(log n) memory
evaluations (``dpsim memory --micro-batch 16384`` took 118 s when it tried every value).
Invariant checks of the two search helpers, then a golden comparison: the advice with
the bisection equals the advice with a linear scan (the search it replaced) over a grid
of small cases. ``tests/benchmarks/bench_fit_advice.py`` prints the times.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dpsim.memory as memory
from dpsim.hardware import get_gpu
from dpsim.memory import fit_advice, largest_true, smallest_true
from dpsim.workload.catalog import get_model
from dpsim.workload.precision import get_precision


@settings(max_examples=200, deadline=None)
@given(lo=st.integers(0, 50), span=st.integers(-3, 5000), cut=st.integers(-10, 6000))
def test_largest_true_finds_the_last_true_of_a_monotone_predicate(lo, span, cut):
    hi = lo + span
    calls = []

    def ok(n):
        calls.append(n)
        assert lo <= n <= hi
        return n <= cut

    expected = max((n for n in range(lo, hi + 1) if n <= cut), default=None)
    assert largest_true(lo, hi, ok) == expected
    assert len(calls) <= 2 * max(1, (hi - lo + 1)).bit_length() + 2


@settings(max_examples=200, deadline=None)
@given(lo=st.integers(0, 50), span=st.integers(-3, 5000), cut=st.integers(-10, 6000))
def test_smallest_true_finds_the_first_true_of_a_monotone_predicate(lo, span, cut):
    hi = lo + span
    expected = min((n for n in range(lo, hi + 1) if n >= cut), default=None)
    assert smallest_true(lo, hi, lambda n: n >= cut) == expected


def _largest_linear(lo, hi, ok):
    # What fit_advice did before: every micro-batch from the top down, the first that fits.
    return next((n for n in range(hi, lo - 1, -1) if ok(n)), None)


def _smallest_linear(lo, hi, ok):
    # ... and every node count from the closed form up.
    return next((n for n in range(lo, hi + 1) if ok(n)), None)


CASES = [
    dict(model=m, gpu=g, strategy=s, n_gpus=n, micro_batch=mb, activation_checkpointing=ck)
    for m, g, s, n, mb, ck in itertools.product(
        ["gpt2-xl", "llama-2-13b"], ["v100-16gb", "a100"], ["ddp", "zero2", "fsdp-shard-grad-op"],
        [16], [1, 7, 24], [False, True])
]


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c.values())))
def test_the_advice_equals_the_linear_searchs(case, monkeypatch):
    model, gpu = get_model(case["model"]), get_gpu(case["gpu"])
    kwargs = dict(precision=get_precision("fp16-mixed" if gpu.name.startswith("v100") else "bf16-mixed"),
                  optimizer="adamw", micro_batch=case["micro_batch"], strategy=case["strategy"],
                  n_gpus=case["n_gpus"], gpus_per_node=8,
                  activation_checkpointing=case["activation_checkpointing"], max_gpus=4096)
    fast = fit_advice(model, gpu, **kwargs)
    monkeypatch.setattr(memory, "largest_true", _largest_linear)
    monkeypatch.setattr(memory, "smallest_true", _smallest_linear)
    assert fit_advice(model, gpu, **kwargs) == fast


def test_a_huge_micro_batch_costs_a_few_dozen_evaluations(monkeypatch):
    calls = []
    real = memory.memory_breakdown

    def counted(*args, **kwargs):
        calls.append(kwargs.get("micro_batch"))
        return real(*args, **kwargs)

    monkeypatch.setattr(memory, "memory_breakdown", counted)
    advice = fit_advice(get_model("gpt2-xl"), get_gpu("h100"), precision=get_precision("bf16-mixed"),
                        optimizer="adamw", micro_batch=1 << 20, n_gpus=64, gpus_per_node=8)
    assert advice.micro_batch is not None and 1 <= advice.micro_batch < 1 << 20
    assert len(calls) <= 60, len(calls)  # a linear search made ~10^6
