"""A collective never gets cheaper by crossing a slower tier or by adding ranks.

The per-call host overhead and the Simple protocol's bandwidth ramp are fitted per scope
(:class:`~dpsim.collectives.nccl_tuning.NcclTuning`); fitted apart, they make a call across
InfiniBand cheaper than the same call inside one NVLink domain (the ``ib`` overhead is 0 where
``node``'s is 28.2 us; the ``verbs`` ramp is none where ``node``'s halves the bandwidth at
64 MiB): an 8 B all-reduce of 80 GB200s takes 38.3 us, of 8 of them 40.0 us, and ``--algo ring
--proto Simple`` on ``infiniband`` 1.99 ms on 8 GPUs, 1.47 ms on 16 at 256 MiB. Both are
diagnosed, not closed (:data:`OVERHEAD_INVERTED`, :data:`RAMPED`): each fix tried cost
reference rows (validation/large_model_runs.md, latfix2).
"""

from __future__ import annotations

import pytest

from dpsim.collectives.algorithms import ALGORITHMS
from dpsim.collectives.nccl import NcclCollectives
from dpsim.collectives.nccl_cost import channels_kept
from dpsim.collectives.nccl_tuning import CALL_SCOPES, FITTED_TUNING, PROTOCOLS, NcclTuning
from dpsim.topology.cluster import Topology
from dpsim.topology.load import load_preset, preset_names
from dpsim.units import KiB, MiB

SIZES = (8, 4 * KiB, 64 * KiB, 1 * MiB, 16 * MiB, 256 * MiB, 1 << 30)
OPS = ("all_reduce", "all_gather", "reduce_scatter")
GPU_COUNTS = (2, 4, 8, 16, 24, 32, 64, 72, 80, 144)

KNOWN_TREE_PLAN = {("aws-p5", "tree"), ("infiniband", "tree")}
"""Left alone (not the overhead or the ramp): the tree all-reduce inside one server is costed as
one chain channel (the flow model's in-server time 5.4 ps/B on aws-p5) where the same server's
part of a tree across servers runs eight (4.7 ps/B), and NCCL's own LL128 factor is 7/9 inside one
server against 120/128 across (src/graph/tuning.cc@5067397): from 256 MiB the 16-GPU tree is up to
23 % faster than the 8-GPU one."""

RAMPED = ("ring", "tree", "hierarchical", "halving_doubling")
"""Not closed, the Simple protocol of these (diagnosed): from 64 KiB up a Simple call across
servers can come out cheaper than the same call inside one server (infiniband ring all-reduce
8 -> 16 GPUs, 256 MiB: 1.99 -> 1.47 ms). The ramp is fitted per scope on whole calls: ``node``
halves the bandwidth at 64 MiB (exponent 0.5), ``verbs`` (IB, RoCE) has none and ``network``
(EFA) halves it at 2 MiB, so a call whose NVLink flows bound it drops the server's ramp once it
crosses the NICs. Tried: a ring across the NICs paced by its slower stage, the flows inside
the servers at the server's ramp (the verbs/network ramps refitted with it, unchanged: none /
2 MiB). The reference rows gained (LOSO with NCCL's ppn-1 latency too: per-system median
6.7 -> 6.4 %, p4de 7.6 -> 6.4 %) and
the ring inversions closed to 64 MiB, but the server's ramp is extrapolated to sizes its rows
never constrain (0.2 of the bandwidth at 4 MiB): two L40S servers on PCIe
(``validation/accuracy_pcie.py``, never fitted on) went from 7-23 % to 9-92 % slow at
1-256 MiB, and unmeasured A100 two-server calls of 1-32 MiB moved by up to 52 %. On trees it
moved GCP A3 Mega's 128 MiB - 1 GiB rows from -12..+7 % to +1..+17 %. From 256 MiB it also
left the rings of 8-NIC servers up to 4.4 % cheaper across (one channel in eight leaves each
GPU through its NIC, so the ring's NVLink flows carry 0.94 of the server ring's)."""

OVERHEAD_INVERTED = {"dgx-b200", "gb200-nvl72", "infiniband", "pcie"}
"""Not closed: the per-call overhead is fitted per scope, ``node`` 28.2 us on the single servers'
32 KiB rows and ``ib`` 0 on the 8-16 B rows of the two XE9680 systems of NVIDIA/nccl-tests#309
(1 us under NCCL's own latency), so below ~1 MiB a call across IB/RoCE NICs costs less than the
same call inside one NVLink domain. Flooring ``ib`` at ``node`` moved the worst reference row
(I050, four #309 VMs at 1 MiB) from 92.3 to 117.0 %; one cost shared by every scope with LL's
per-channel bound taking the single servers' size-dependent part (1.5 GB/s per kept channel,
9.1 us shared) improved the per-system median (6.7 -> 6.4 %) but moved I050 to 98.0 % and
dgx-a100-node from 8.8 to 13.6 %: the single servers' rows (torch benchmark, nccl-tests
``-g 8``) measure 6-15 us more fixed cost than the #309 runs (``-g 1`` under MPI) even with the
bound, which no shared constant gives both."""

KNOWN_FROM_BYTES = 256 * MiB


def _known(name: str, algorithm: str, protocol: str, size: int) -> bool:
    if protocol == "Simple" and algorithm in RAMPED:
        return True
    return algorithm == "tree" and size >= KNOWN_FROM_BYTES and (name, algorithm) in KNOWN_TREE_PLAN


def _model(spec, n: int) -> NcclCollectives:
    return NcclCollectives(Topology(spec=spec, n_gpus=n), algorithms=tuple(ALGORITHMS), protocols=PROTOCOLS)


def _models(name: str) -> dict[int, NcclCollectives]:
    spec = load_preset(name)
    return {n: _model(spec, n) for n in GPU_COUNTS}


def _violations(small: NcclCollectives, big: NcclCollectives, ops, algorithms=None, skip=None) -> list[str]:
    out = []
    for op in ops:
        for algorithm, protocol in sorted(set(small.candidates(op)) & set(big.candidates(op))):
            if algorithms is not None and algorithm not in algorithms:
                continue
            for size in SIZES:
                if skip is not None and skip(algorithm, protocol, size):
                    continue
                t_small = small.cost(algorithm, protocol, op, size).time_s
                t_big = big.cost(algorithm, protocol, op, size).time_s
                if t_big < t_small * (1 - 1e-9):
                    out.append(f"{op} {algorithm}/{protocol} {size} B: {t_small * 1e6:.1f} -> {t_big * 1e6:.1f} us")
    return out


@pytest.mark.parametrize("name", [
    pytest.param(n, marks=pytest.mark.xfail(strict=True, reason="per-call overhead fitted per scope (OVERHEAD_INVERTED)"))
    if n in OVERHEAD_INVERTED else n for n in preset_names()])
def test_crossing_a_slower_tier_is_never_cheaper(name):
    # The largest communicator inside one server / NVLink domain against every superset of it
    # that crosses the NICs: the same op, algorithm, protocol and size never costs less.
    models = _models(name)
    inside = [n for n, m in models.items() if not m.facts.crosses_nics]
    across = [n for n, m in models.items() if m.facts.crosses_nics]
    assert inside
    if not across:
        pytest.skip(f"{name}: no NICs to cross")
    bad = []
    for n in across:
        if n <= max(inside):
            continue
        skip = lambda algorithm, protocol, size: _known(name, algorithm, protocol, size)  # noqa: E731
        bad += [f"{max(inside)} -> {n}: {v}" for v in _violations(models[max(inside)], models[n], OPS, skip=skip)]
    assert not bad, "\n".join(bad)


@pytest.mark.xfail(strict=True, reason="tree all-reduce in one server costed as one chain channel (KNOWN_TREE_PLAN)")
def test_tree_all_reduce_across_servers_is_never_cheaper():
    models = _models("aws-p5")
    assert not _violations(models[8], models[16], ("all_reduce",), algorithms=("tree",))


@pytest.mark.xfail(strict=True, reason="the Simple ramp is fitted per scope on whole calls (RAMPED)")
def test_simple_ring_across_infiniband_is_never_cheaper():
    models = _models("infiniband")
    assert not _violations(models[8], models[16], ("all_reduce",), algorithms=("ring",))


@pytest.mark.parametrize("name", preset_names())
def test_ring_all_reduce_never_cheaper_with_more_ranks_on_the_same_tier(name):
    # Fixed bytes per rank: adding ranks on the same tier (all inside one server, or all across
    # the NICs) adds ring steps and never removes cost, for every protocol.
    models = _models(name)
    for crossing in (False, True):
        counts = [n for n, m in models.items() if m.facts.crosses_nics == crossing]
        for a, b in zip(counts, counts[1:]):
            bad = _violations(models[a], models[b], ("all_reduce",), algorithms=("ring",))
            assert not bad, f"{a} -> {b}: " + "\n".join(bad)


@pytest.mark.xfail(strict=True, reason="per-call overhead fitted per scope (OVERHEAD_INVERTED)")
def test_crossing_call_overhead_is_never_below_the_servers():
    # The host work of a call (launch, enqueue, completion) is paid inside a server too: every
    # transport kind's fitted overhead is at least node's, and so is a tuning that says less.
    node = FITTED_TUNING.call_overhead_s("node")
    assert node > 0
    for kind in CALL_SCOPES:
        assert FITTED_TUNING.call_overhead_s(kind) >= node
    low = NcclTuning(call_overhead_us=(("node", 30.0), ("ib", 5.0)))
    assert low.call_overhead_s("ib") == pytest.approx(30e-6)
    assert low.call_overhead_s("node") == pytest.approx(30e-6)


@pytest.mark.xfail(strict=True, reason="per-call overhead fitted per scope (OVERHEAD_INVERTED)")
def test_reported_cases_no_longer_cheaper_across():
    # The adversarial round's small-message case: an 8 B all-reduce on 80 GB200s (across racks)
    # against 8 of them (one NVLink domain), 38.3 vs 40.0 us before.
    gb200 = load_preset("gb200-nvl72")
    assert _model(gb200, 80).time("all_reduce", 8).time_s >= _model(gb200, 8).time("all_reduce", 8).time_s
    for name in ("infiniband", "dgx-b200", "aws-p5"):
        spec = load_preset(name)
        for size in (8, 64 * KiB):
            assert _model(spec, 16).time("all_reduce", size).time_s >= _model(spec, 8).time("all_reduce", size).time_s


def test_nccls_ll_thresholds():
    # NCCL's ring LL threshold counts every rank, the tree's does not (tuning.cc threadThresholds).
    assert channels_kept("LL", 32 * KiB, 8, 16, "ring") == 1
    assert channels_kept("LL", 32 * KiB, 8, 16, "tree") == 8
