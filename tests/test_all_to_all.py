"""All-to-all on the fabric (dpsim.collectives.all_to_all): invariants and nccl-tests' convention."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

from dpsim.collectives.all_to_all import (
    ALL_TO_ALL_ALGORITHMS,
    all_to_all_busbw,
    all_to_all_cost,
    all_to_all_link_bytes,
    uniform_all_to_all_cost,
)
from dpsim.collectives.groups import Communicator, LayoutShape, layout_communicators
from dpsim.errors import ConfigError
from dpsim.topology.cluster import Topology
from dpsim.topology.load import load_preset
from dpsim.units import MB

ALGS = tuple(ALL_TO_ALL_ALGORITHMS)


def comm(preset: str, n: int) -> Communicator:
    t = Topology(spec=load_preset(preset), n_gpus=n)
    return Communicator(name="ep", topology=t, job=t)


def random_traffic(n: int, seed: int = 0, scale: float = 4 * MB) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = rng.gamma(0.7, scale, size=(n, n))
    t[rng.random((n, n)) < 0.1] = 0.0
    return t


@pytest.mark.parametrize("algorithm", ALGS)
def test_bytes_leaving_each_server_are_its_off_server_traffic(algorithm):
    c = comm("infiniband", 32)
    t = random_traffic(32, seed=1)
    net, carried = all_to_all_link_bytes(c, t, algorithm=algorithm)
    fam = net.families()
    gpn, servers = 8, 4
    node = np.arange(32) // gpn
    for name, sign in (("nic_leaf", 1), ("leaf_nic", -1)):
        f = fam[name]
        per_server = carried[f.offset:f.offset + f.units * f.lanes].reshape(f.units, f.lanes).sum(axis=1)
        for s in range(servers):
            rows, cols = (node == s, node != s) if sign == 1 else (node != s, node == s)
            np.testing.assert_allclose(per_server[s], t[np.ix_(rows, cols)].sum(), rtol=1e-12)


def test_busiest_bytes_are_row_and_column_sums():
    c = comm("infiniband", 16)
    t = random_traffic(16, seed=2)
    off = t * (1 - np.eye(16))
    r = all_to_all_cost(c, t)
    assert r.busiest_send_bytes == pytest.approx(off.sum(axis=1).max())
    assert r.busiest_recv_bytes == pytest.approx(off.sum(axis=0).max())


@pytest.mark.parametrize("algorithm", ALGS)
@pytest.mark.parametrize("seed", [0, 3])
def test_time_at_least_nic_share_and_latency(algorithm, seed):
    """No rank finishes before its off-server bytes have crossed its NIC (one NDR NIC per GPU on
    this preset), nor before the latency floor (NCCL's base latency, the call overhead, a hop)."""
    c = comm("infiniband", 32)
    t = random_traffic(32, seed=seed)
    node = np.arange(32) // 8
    off_server = np.where(node[:, None] != node[None, :], t, 0.0)
    net, _ = all_to_all_link_bytes(c, t)
    nic = net.families()["nic_leaf"].capacity_bytes_per_s
    r = all_to_all_cost(c, t, algorithm=algorithm)
    assert r.time_s >= max(off_server.sum(axis=1).max(), off_server.sum(axis=0).max()) / nic * (1 - 1e-12)
    floor = uniform_all_to_all_cost(c, 1.0, algorithm=algorithm).latency_s
    assert r.latency_s >= floor * (1 - 1e-12) and r.time_s >= r.latency_s


def test_imbalance_is_paced_by_the_busiest_rank():
    c = comm("infiniband", 16)
    base = np.full((16, 16), 1 * MB)
    hot = base.copy()
    hot[:, 3] *= 4  # every rank sends four times as much to rank 3 (a hot expert)
    avg = np.full((16, 16), hot.mean())
    assert all_to_all_cost(c, hot).time_s > 1.5 * all_to_all_cost(c, avg).time_s


@pytest.mark.parametrize("preset, n", [("infiniband", 8), ("infiniband", 32), ("ethernet", 16), ("nvlink", 32),
                                       ("aws-p5", 16), ("pcie", 8), ("dgx-a100", 24)])
@pytest.mark.parametrize("algorithm", ALGS)
def test_uniform_is_the_uniform_matrix(preset, n, algorithm):
    """The symmetric count of uniform traffic equals routing every flow of the uniform matrix."""
    c = comm(preset, n)
    for size in (64e3, 256 * MB):
        u = uniform_all_to_all_cost(c, size, algorithm=algorithm)
        m = all_to_all_cost(c, np.full((n, n), size / n), algorithm=algorithm)
        assert u.time_s == pytest.approx(m.time_s, rel=1e-9)
        assert u.busiest_send_bytes == pytest.approx(m.busiest_send_bytes, rel=1e-9)
        assert (u.bottleneck, u.algorithm) == (m.bottleneck, m.algorithm)


def test_nic_message_overhead_slows_small_messages():
    """A NIC that spends g per message (LogGP's gap, ``nic_message_overhead_us``) loses bandwidth on
    small per-pair messages; the hierarchical all-to-all's messages are 8x larger, so it loses less."""
    import dataclasses

    spec = load_preset("infiniband")
    slow = dataclasses.replace(spec, fabric=dataclasses.replace(spec.fabric, nic_message_overhead_s=2e-6))
    t = Topology(spec=slow, n_gpus=32)
    c = Communicator(name="ep", topology=t, job=t)
    plain = comm("infiniband", 32)
    size = 32 * 16e3  # 16 kB per pair
    for algorithm in ALGS:
        u = uniform_all_to_all_cost(c, size, algorithm=algorithm)
        m = all_to_all_cost(c, np.full((32, 32), size / 32), algorithm=algorithm)
        assert u.time_s == pytest.approx(m.time_s, rel=1e-9)
        assert u.transfer_s > uniform_all_to_all_cost(plain, size, algorithm=algorithm).transfer_s
    flat = uniform_all_to_all_cost(c, size, algorithm="flat").transfer_s
    hier = uniform_all_to_all_cost(c, size, algorithm="hierarchical").transfer_s
    assert hier < flat


@pytest.mark.parametrize("algorithm", ALGS)
def test_monotone_in_bytes_and_load_factor(algorithm):
    c = comm("infiniband", 64)
    times = [uniform_all_to_all_cost(c, b, algorithm=algorithm).time_s for b in np.geomspace(1e3, 1e10, 15)]
    assert np.all(np.diff(times) > 0)
    loads = [uniform_all_to_all_cost(c, 64 * MB, load_factor=f, algorithm=algorithm).time_s
             for f in (1.0, 1.1, 1.5, 3.0)]
    assert np.all(np.diff(loads) > 0)
    r = uniform_all_to_all_cost(c, 64 * MB, load_factor=2.0, algorithm=algorithm)
    assert r.busiest_send_bytes == pytest.approx(2 * 64 * MB * 63 / 64)


def test_one_nvlink_server_never_touches_a_nic():
    c = comm("infiniband", 8)
    net, carried = all_to_all_link_bytes(c, random_traffic(8))
    assert carried.sum() > 0
    assert not carried[net.nic_links()].any()
    classes = {net.link_classes[k] for k in net.link_class_id[carried > 0]}
    assert classes == {"nvlink"}
    for algorithm in ALGS:
        assert uniform_all_to_all_cost(c, 256 * MB, algorithm=algorithm).bottleneck == "nvlink"
    # inside one server the hierarchical all-to-all is the flat one
    hier = uniform_all_to_all_cost(c, 1 * MB, algorithm="hierarchical")
    assert hier.time_s == uniform_all_to_all_cost(c, 1 * MB, algorithm="flat").time_s


def test_hierarchical_beats_flat_for_small_messages_across_many_servers():
    """With 32 servers a flat all-to-all posts 248 inter-server messages per GPU, served a few peers
    at a time, each paying the network hop latency; the hierarchical one posts one per destination
    server (31) on its own rail and forwards over NVLink, so its latency is a fraction of the flat
    one's while the bytes on the NICs are the same."""
    c = comm("infiniband", 256)
    for size in (64e3, 1 * MB, 8 * MB):
        flat = uniform_all_to_all_cost(c, size, algorithm="flat")
        hier = uniform_all_to_all_cost(c, size, algorithm="hierarchical")
        assert hier.time_s < flat.time_s
    small = uniform_all_to_all_cost(c, 64e3, algorithm="flat")
    assert small.bottleneck == "latency"
    assert uniform_all_to_all_cost(c, 64e3, algorithm="hierarchical").time_s < 0.5 * small.time_s


@pytest.mark.parametrize("nodes", [2, 4, 16])
def test_large_busbw_follows_the_nccl_maintainers_formula(nodes):
    """nccl-tests' alltoall busbw = algbw (N-1)/N; on servers with one NIC per GPU the off-server
    share (nodes-1)/nodes of the bytes crosses the NICs, so algbw = nodes/(nodes-1) x the NIC's
    rate per GPU (S. Jeaugey, NVIDIA/nccl-tests#130: "On 2 nodes ... 2x network bandwidth per GPU
    ... general formula is N/(N-1)x the bandwidth per GPU, N being the number of nodes"). The
    preset's NDR NIC runs at 48.5 GB/s (NVIDIA/nccl-tests#267: "48-49GB/s per NIC")."""
    n = 8 * nodes
    c = comm("infiniband", n)
    size = 4e9
    r = uniform_all_to_all_cost(c, size)
    busbw = all_to_all_busbw(n, size, r.time_s)
    expected = 48.5e9 * nodes / (nodes - 1) * (n - 1) / n
    assert busbw == pytest.approx(expected, rel=0.01)
    assert r.bottleneck == "infiniband"


def test_fast_for_a_256_rank_group():
    """An EP group of 256 ranks over 32 servers: one symmetric count, then memoised."""
    uniform_all_to_all_cost(comm("aws-p5", 16), 1 * MB)  # numpy's lazily imported parts, once a process
    c = comm("aws-p5", 256)
    # This process's CPU time, not the wall clock: the bars are on the work done, and on a loaded 2-core
    # box the wall clock also counts the time other processes held the core (first call: 0.094 s wall
    # against the 0.05 s bar with two CPU burners running, 0.002 s of CPU).
    start = time.process_time()
    uniform_all_to_all_cost(c, 16 * MB)
    first = time.process_time() - start
    start = time.process_time()
    for b in range(100):
        uniform_all_to_all_cost(c, 1 * MB + b, load_factor=1.3)
    again = (time.process_time() - start) / 100
    assert first < 0.05 and again < 1e-3


def test_layout_group_with_shared_nics():
    """An EP group laid out as a layout's data-parallel group (one GPU per server sharing its NICs)."""
    job = Topology(spec=load_preset("infiniband"), n_gpus=64)
    dp = layout_communicators(job, LayoutShape(tp=8, pp=1, dp=8))["dp"]
    r = uniform_all_to_all_cost(dp, 64 * MB)
    m = all_to_all_cost(dp, np.full((8, 8), 8 * MB))
    assert r.time_s == pytest.approx(m.time_s, rel=1e-9)
    assert r.bottleneck == "infiniband"


@pytest.mark.parametrize("bad, needle", [
    (np.full((4, 4), -1.0), "negative"), (np.full((4, 4), np.nan), "NaN"), (np.ones((4, 3)), "not square"),
    (np.ones((8, 8)), "does not match"), (np.ones(4), "not square"), ([["a"]], "not a matrix"),
])
def test_bad_traffic_is_one_line(bad, needle):
    c = comm("infiniband", 4)
    with pytest.raises(ConfigError) as e:
        all_to_all_cost(c, bad)
    assert "traffic_bytes" in str(e.value) and needle in str(e.value) and "\n" not in str(e.value)


def test_bad_arguments():
    c = comm("infiniband", 16)
    with pytest.raises(ConfigError, match="algorithm: 'ring'"):
        uniform_all_to_all_cost(c, 1.0, algorithm="ring")
    with pytest.raises(ConfigError, match="load_factor"):
        uniform_all_to_all_cost(c, 1.0, load_factor=0.5)
    with pytest.raises(ConfigError, match="bytes_per_rank"):
        uniform_all_to_all_cost(c, float("nan"))


def test_nothing_to_send_costs_nothing():
    c = comm("infiniband", 16)
    assert uniform_all_to_all_cost(c, 0.0).time_s == 0.0
    assert all_to_all_cost(c, np.diag(np.full(16, 1e6))).time_s == 0.0  # only local bytes
    one = comm("infiniband", 1)
    assert uniform_all_to_all_cost(one, 1e9).bottleneck == "none"


# ------------------------------------------------------------------ de-duplication across servers (DeepEP)


@pytest.mark.parametrize(("experts", "top_k", "nodes"), [(8, 2, 4), (8, 3, 2), (12, 4, 3), (6, 2, 6)])
def test_distinct_servers_closed_form_is_the_count_over_every_routing(experts, top_k, nodes):
    """Balanced routing: every set of top_k experts equally likely; count the servers hit."""
    import itertools
    from dpsim.collectives.all_to_all import expected_distinct_groups
    per = experts // nodes
    hits = [len({e // per for e in chosen}) for chosen in itertools.combinations(range(experts), top_k)]
    assert expected_distinct_groups(experts, top_k, nodes) == pytest.approx(sum(hits) / len(hits), rel=1e-12)


def test_dedup_never_adds_bytes_and_is_one_where_nothing_shares_a_server():
    from dpsim.collectives.all_to_all import node_dedup_factor
    for experts in (8, 64, 128, 256):
        for top_k in (1, 2, 4, 8):
            for nodes in (1, 2, 4, 8):
                f = node_dedup_factor(experts, top_k, nodes)
                assert 0 < f <= 1.0
                if nodes == 1 or top_k == 1 or experts == nodes:
                    assert f == pytest.approx(1.0, rel=1e-12)
    assert node_dedup_factor(128, 8, 4) < node_dedup_factor(128, 8, 8) < 1.0  # fewer servers, more sharing


@pytest.mark.parametrize("n", [8, 32])
def test_dedup_scales_only_what_crosses_servers_and_one_server_is_flat(n):
    c = comm("infiniband", n)
    size = 64 * MB
    plain = uniform_all_to_all_cost(c, size, algorithm="hierarchical")
    half = uniform_all_to_all_cost(c, size, algorithm="hierarchical", node_dedup=0.5)
    flat = uniform_all_to_all_cost(c, size, algorithm="flat", node_dedup=0.5)
    assert flat.time_s == uniform_all_to_all_cost(c, size, algorithm="flat").time_s  # NCCL sends every copy
    if n == 8:  # one server: nothing crosses, nothing to de-duplicate
        assert half.time_s == plain.time_s
    else:
        assert half.time_s < plain.time_s
        matrix = all_to_all_cost(c, np.full((n, n), size / n), algorithm="hierarchical", node_dedup=0.5)
        assert half.time_s == pytest.approx(matrix.time_s, rel=1e-9)
        assert half.bottleneck == matrix.bottleneck


def test_bad_dedup_is_one_line():
    with pytest.raises(ConfigError, match=r"node_dedup: 1\.5 is not valid"):
        uniform_all_to_all_cost(comm("infiniband", 16), MB, algorithm="hierarchical", node_dedup=1.5)


# ------------------------------------------------------------------ de-duplication per destination rank (DeepEP)


def _routings(experts: int, top_k: int):
    import itertools
    return list(itertools.combinations(range(experts), top_k))


@pytest.mark.parametrize(("experts", "top_k", "ranks"), [(8, 2, 8), (8, 2, 4), (8, 3, 2), (12, 4, 3), (16, 4, 8),
                                                        (12, 3, 12), (6, 2, 2)])
def test_distinct_ranks_closed_form_is_the_count_over_every_routing(experts, top_k, ranks):
    """Balanced routing (every set of top_k experts equally likely), experts contiguous over the
    ranks: a token goes once to each rank holding one of its experts."""
    from dpsim.collectives.all_to_all import rank_dedup_factor
    per = experts // ranks
    combos = _routings(experts, top_k)
    distinct = sum(len({e // per for e in chosen}) for chosen in combos) / len(combos)
    assert rank_dedup_factor(experts, top_k, ranks) == pytest.approx(distinct / top_k, rel=1e-12)


@pytest.mark.parametrize(("experts", "top_k", "ranks"), [(8, 2, 4), (16, 4, 8), (12, 3, 3)])
def test_deduplicated_dispatch_conserves_bytes_and_combine_returns_them(experts, top_k, ranks):
    """Every rank routes the same tokens over every routing: the matrix of tokens rank i sends rank
    j (once per token and rank) sends in all what the ranks receive; the combine (its transpose:
    one partial sum per token and rank back) returns to each rank what it dispatched; and a rank
    sends the closed form's share of its k copies."""
    from dpsim.collectives.all_to_all import rank_dedup_factor
    per = experts // ranks
    combos = _routings(experts, top_k)
    sends = np.zeros((ranks, ranks))
    copies = np.zeros((ranks, ranks))
    for src in range(ranks):
        for chosen in combos:
            for r in {e // per for e in chosen}:
                sends[src, r] += 1.0 / len(combos)
            for e in chosen:
                copies[src, e // per] += 1.0 / len(combos)
    assert sends.sum(axis=1).sum() == pytest.approx(sends.sum(axis=0).sum(), rel=1e-12)
    combine = sends.T
    assert np.allclose(combine.sum(axis=0), sends.sum(axis=1))  # each rank gets back what it sent
    f = rank_dedup_factor(experts, top_k, ranks)
    assert np.allclose(sends.sum(axis=1), f * copies.sum(axis=1))
    assert np.allclose(copies.sum(axis=1), top_k)
    assert (sends <= copies + 1e-12).all()  # never more than one message per copy


def test_rank_dedup_bounds():
    from dpsim.collectives.all_to_all import rank_dedup_factor
    for experts in (8, 32, 64, 128, 256):
        for top_k in (1, 2, 4, 8):
            for ranks in (1, 2, 4, 8, 16):
                if experts % ranks:
                    continue
                f = rank_dedup_factor(experts, top_k, ranks)
                assert 1.0 / top_k - 1e-12 <= f <= 1.0
                if ranks == 1 or top_k == 1 or experts == ranks:  # each expert on its own rank: k copies
                    assert f == pytest.approx(1.0, rel=1e-12)
    # moe_perf's DeepSeek proxy: 32 experts top-8 over EP8 reach about 5.6 of the 8 ranks.
    assert 8 * rank_dedup_factor(32, 8, 8) == pytest.approx(8 * (1 - math.comb(28, 8) / math.comb(32, 8)), rel=1e-12)


def test_expert_a2a_dedups_only_under_deepep():
    """The flat (alltoall) dispatcher moves every routed copy; the hierarchical (DeepEP) one the
    distinct ranks' share; with one expert per rank both move the same."""
    from types import SimpleNamespace

    from dpsim.collectives.all_to_all import rank_dedup_factor
    from dpsim.predict.layout import expert_a2a_s
    c = comm("nvlink", 8)
    size = 64 * MB
    moe = SimpleNamespace(experts=32, top_k=8)
    flat = expert_a2a_s(c, size, None, "flat", moe)
    assert flat == pytest.approx(uniform_all_to_all_cost(c, size).time_s, rel=1e-12)
    deep = expert_a2a_s(c, size, None, "hierarchical", moe)
    want = uniform_all_to_all_cost(c, size * rank_dedup_factor(32, 8, 8), algorithm="hierarchical").time_s
    assert deep == pytest.approx(want, rel=1e-12) and deep < flat
    one_each = SimpleNamespace(experts=8, top_k=2)
    assert expert_a2a_s(c, size, None, "hierarchical", one_each) == pytest.approx(
        expert_a2a_s(c, size, None, "flat", one_each), rel=1e-12)


# ------------------------------------------------------------------ node-limited routing (DeepSeek-V3)


def _node_limited_routings(experts: int, top_k: int, nodes: int, limit: int):
    """Balanced node-limited routing: every set of ``limit`` servers equally likely, then every set
    of ``top_k`` of their experts (arXiv:2412.19437 Sec. 2.1.2's M nodes, then top-K among them)."""
    import itertools
    per = experts // nodes
    out = []
    for servers in itertools.combinations(range(nodes), limit):
        pool = [e for s in servers for e in range(s * per, (s + 1) * per)]
        out += [(1.0 / math.comb(nodes, limit) / math.comb(len(pool), top_k), chosen)
                for chosen in itertools.combinations(pool, top_k)]
    return out


@pytest.mark.parametrize(("experts", "top_k", "ranks", "nodes", "limit"),
                         [(16, 4, 8, 4, 2), (12, 3, 6, 3, 2), (16, 2, 16, 4, 1), (8, 4, 4, 2, 1)])
def test_node_limited_spread_is_the_count_over_every_routing(experts, top_k, ranks, nodes, limit):
    """The closed form against every node-limited routing: distinct ranks and servers a token
    reaches; the servers never more than the limit; the bytes the ranks receive (one copy per
    distinct rank) are the bytes the senders send, so the limit only moves what crosses servers."""
    from dpsim.collectives.all_to_all import routed_spread
    per_rank, per_node = experts // ranks, experts // nodes
    routings = _node_limited_routings(experts, top_k, nodes, limit)
    assert sum(w for w, _ in routings) == pytest.approx(1.0, rel=1e-12)
    got_ranks = sum(w * len({e // per_rank for e in c}) for w, c in routings)
    got_nodes = sum(w * len({e // per_node for e in c}) for w, c in routings)
    assert max(len({e // per_node for e in c}) for _, c in routings) <= limit
    want_ranks, want_nodes = routed_spread(experts, top_k, ranks, nodes, limit)
    assert want_ranks == pytest.approx(got_ranks, rel=1e-12)
    assert want_nodes == pytest.approx(got_nodes, rel=1e-12)
    assert want_nodes <= limit and want_nodes <= want_ranks <= top_k
    # Bytes conserved: rank i sends each destination rank its share; every rank receives as much.
    sends = np.zeros((ranks, ranks))
    for src in range(ranks):
        for w, c in routings:
            for r in {e // per_rank for e in c}:
                sends[src, r] += w
    assert sends.sum() == pytest.approx(ranks * want_ranks, rel=1e-12)
    assert np.allclose(sends.sum(axis=0), sends.sum(axis=1))
    # Unlimited (or a limit of every server) is the plain closed form.
    from dpsim.collectives.all_to_all import expected_distinct_groups
    assert routed_spread(experts, top_k, ranks, nodes, None) == routed_spread(experts, top_k, ranks, nodes, nodes) \
        == (expected_distinct_groups(experts, top_k, ranks), expected_distinct_groups(experts, top_k, nodes))


def test_deepseek_v3_node_limit_bounds_the_servers_a_token_reaches():
    """256 experts on 64 GPUs of 8 servers, top-8: 5.29 servers a token unlimited, 3.63 with M = 4
    (arXiv:2412.19437 Sec. 4.2), each at most 4; a limit moves fewer bytes over the NICs."""
    from types import SimpleNamespace

    from dpsim.collectives.all_to_all import routed_spread
    from dpsim.predict.layout import expert_a2a_s
    free, limited = routed_spread(256, 8, 64, 8), routed_spread(256, 8, 64, 8, 4)
    assert free[1] == pytest.approx(5.29, abs=0.01) and limited[1] == pytest.approx(3.63, abs=0.01)
    assert limited[1] <= 4 and limited[0] <= 8
    c = comm("infiniband", 64)
    moe = SimpleNamespace(experts=256, top_k=8)
    size = 64 * MB
    unlimited = expert_a2a_s(c, size, None, "hierarchical", moe)
    bound = expert_a2a_s(c, size, None, "hierarchical", moe, node_limit=4)
    assert bound < unlimited
    assert expert_a2a_s(c, size, None, "hierarchical", moe, node_limit=8) == unlimited



def test_node_limited_nic_bytes_are_at_most_m_copies_per_token():
    """On the links: 32 experts top-4 on 16 GPUs of 2 servers, limit 1. Each rank routes T tokens
    of b bytes; the hierarchical all-to-all moves its distinct-rank copies (bytes conserved: every
    rank receives what the others send it), and what crosses the NICs is the distinct servers' share,
    at most M = 1 copy per token, less than unlimited."""
    from dpsim.collectives.all_to_all import _fabric, routed_spread
    c = comm("infiniband", 16)
    fab = _fabric(c)
    tokens, b, n, gpn = 1000, 14336.0, 16, 8
    nic_totals = []
    for limit in (None, 1):
        ranks, nodes = routed_spread(32, 4, n, 2, limit)
        per_rank = tokens * b * ranks  # one copy per distinct rank a token reaches
        traffic = np.full((n, n), per_rank / n)
        assert traffic.sum(axis=0) == pytest.approx(traffic.sum(axis=1))  # conserved
        carried, _ = fab.link_bytes(traffic, "hierarchical", min(1.0, nodes / ranks))
        nic = float(carried[fab.nic_mask].sum())
        nic_totals.append(nic)
        # Each crossing byte is on the sender's and the receiver's NIC link.
        per_token = nic / 2 / (tokens * n) / b
        assert per_token == pytest.approx(nodes * (n - gpn) / n, rel=1e-9)
        if limit is not None:
            assert per_token <= limit
    assert nic_totals[1] < nic_totals[0]


def test_node_limit_below_top_k_experts_is_refused():
    from dpsim.collectives.all_to_all import routed_spread
    with pytest.raises(ConfigError, match="--moe-node-limit: 1 of the 8 servers hold 2 of the 16"):
        routed_spread(16, 4, 8, 8, 1)


def test_node_limit_flag_needs_the_hierarchical_all_to_all():
    from dpsim.predict.config import PredictConfig
    with pytest.raises(ConfigError, match="--moe-node-limit"):
        PredictConfig(gpus=16, ep=16, strategy="zero1", moe_node_limit=2)
    with pytest.raises(ConfigError, match="--moe-node-limit"):
        PredictConfig(gpus=16, ep=16, strategy="zero1", moe_node_limit=0, moe_a2a="hierarchical")
    assert PredictConfig(gpus=16, ep=16, strategy="zero1", moe_node_limit=2,
                         moe_a2a="hierarchical").parallelism.moe_node_limit == 2
