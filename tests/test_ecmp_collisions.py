"""Invariants of validation/ecmp_collisions.py: the hash-collision bound the ecmp section of
validation/large_model_runs.md quotes (balls into bins; a ring runs at its slowest flow)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "validation"))

import ecmp_collisions as ec  # noqa: E402


def test_one_flow_or_one_cable_loses_nothing_it_did_not_already_share():
    # One flow can never collide; one cable is an even split (no ECMP choice at all).
    assert ec.ring_slowdown(1, 64, 1.0) == 1.0
    assert ec.ring_slowdown(4, 1, 0.25) == 1.0
    # Four flows of a full cable each on one cable: each gets a quarter, the ring runs 4x slower.
    assert ec.ring_slowdown(4, 1, 1.0) == 4.0


def test_flows_that_fit_together_never_lose():
    # k flows of demand 1/k cannot overload any cable however they hash.
    assert ec.ring_slowdown(8, 16, 1 / 8) == 1.0


def test_never_faster_than_even_and_never_slower_than_all_on_one_cable():
    for k, m, d in ((16, 128, 0.25), (64, 32, 0.5), (128, 128, 1.0)):
        s = ec.ring_slowdown(k, m, d, trials=2000)
        assert 1.0 <= s <= max(1.0, k * d)


def test_more_flows_at_the_same_load_balance_better():
    # Same total demand (one cable's worth per cable), split over more flows (NCCL_IB_QPS_PER_CONNECTION):
    # the loss falls, as Meta's QP scaling reports (up to 40% on AllReduce).
    loss = [ec.ring_slowdown(128 * q, 128, 1.0 / q, trials=1000) for q in (1, 2, 4, 8)]
    assert loss == sorted(loss, reverse=True)
    assert loss[0] > 2 * loss[-1] - 1  # a real fall, not noise


def test_refuses_nonsense():
    with pytest.raises(ValueError, match="demand"):
        ec.ring_slowdown(2, 2, 1.5)


def test_ring_ordered_leaf_flows_of_the_lingjun_file():
    from dpsim.topology.load import load_topology_file

    spec = load_topology_file(ROOT / "validation" / "systems" / "alibaba-lingjun-a100.yaml")
    ordered, scattered, cables, demand = ec.leaf_flows(spec)
    # 4 NIC ports on one leaf (not rail-optimised) x 2 NCCL connections x 1 QP; 32 servers a leaf; 128 cables.
    assert (ordered, scattered, cables, demand) == (8, 256, 128, 0.5)
