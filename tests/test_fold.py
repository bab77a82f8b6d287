"""Folding repeated components of a phase's routes (:meth:`SymmetricRoutes.fold`): what the
costing reads off the folded routes (each block's last finish and its slowest first rates, column by
column inside servers) is what it reads off every flow, bit for bit."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import variant
from test_symmetric import NVL72, _domains, _random_phase

from dpsim.collectives.nccl import NcclCollectives
from dpsim.network.maxmin import Reshare, max_min_routes, progressive_finish
from dpsim.network.model import CrossingFlows, ServerFlows, SymmetricRoutes
from dpsim.network.tiers import TierNetwork
from dpsim.topology.cluster import Topology
from dpsim.topology.load import load_preset, load_topology_file
from dpsim.units import GiB, MiB

ROOT = Path(__file__).resolve().parents[1]


def _sizes(routes, server_size, crossing_size):
    """Bytes of every flow, block by block: a server block's by column, a crossing block's one each."""
    out = []
    for blk in routes.blocks:
        if blk.kind == "server":
            col = np.empty(blk.shape[1])
            col[blk.flow_column] = server_size
            out.append(np.broadcast_to(col, blk.shape).ravel())
        else:
            out.append(np.full(blk.shape[0] * blk.shape[1], crossing_size[blk.pattern]))
    return np.concatenate(out) if out else np.zeros(0)


def _read(routes, caps, server_size, crossing_size):
    """What the costing reads of a phase, per block: the last finish, the distinct finish times, the
    slowest first rate of each column (inside servers) or of all, and the slowest rates of a max-min
    that stops at each group's first frozen flows (:meth:`PlanEvaluator._max_min_phase`). Re-shares
    replayed as the costing does (:class:`Reshare`: a whole max-min's rates, bit for bit)."""
    shapes = [b.shape for b in routes.blocks]
    cuts = np.cumsum([0] + [r * c for r, c in shapes])
    size = _sizes(routes, server_size, crossing_size)
    first = []
    reshare = Reshare(routes, caps)

    def rates_of(alive):
        out = reshare.rates(alive)
        first.append(out.copy()) if not first else None
        return out

    finish = progressive_finish(size, rates_of)
    groups = [np.arange(b.shape[1]) if b.kind == "server" else np.full(b.shape[1], -1) for b in routes.blocks]
    slowest = max_min_routes(routes, caps, groups)
    out = []
    for k, blk in enumerate(routes.blocks):
        f = finish[cuts[k]:cuts[k + 1]]
        r = first[0][cuts[k]:cuts[k + 1]].reshape(shapes[k])
        s = slowest[k]
        if blk.kind == "server":
            out.append((float(f.max()), set(f.tolist()), r.min(axis=0)[blk.flow_column].tolist(),
                        s.min(axis=0)[blk.flow_column].tolist()))
        else:
            out.append((float(f.max()), set(f.tolist()), float(r.min()), float(s.min())))
    return out


def _check(routes: SymmetricRoutes, caps, rng) -> str | None:
    """The folded routes read as the whole (sizes random); which kinds of folding happened."""
    folded = routes.fold(caps)
    if folded is None:
        return None
    assert [b.kind for b in folded.blocks] == [b.kind for b in routes.blocks]
    assert sum(b.shape[0] * b.shape[1] for b in folded.blocks) < sum(b.shape[0] * b.shape[1] for b in routes.blocks)
    server = next((b for b in routes.blocks if b.kind == "server"), None)
    server_size = rng.choice([1.0, 2.0], len(server.flow_column)) if server is not None else None
    crossing_size = rng.choice([1.0, 2.0], 1 + max((b.pattern for b in routes.blocks), default=0))
    assert _read(folded, caps, server_size, crossing_size) == _read(routes, caps, server_size, crossing_size)
    kinds = []
    if any(a.shape[0] < b.shape[0] for a, b in zip(folded.blocks, routes.blocks)):
        kinds.append("servers")
    if any(a.shape[1] < b.shape[1] for a, b in zip(folded.blocks, routes.blocks)):
        kinds.append("lanes")
    return "+".join(kinds)


def _topologies():
    """``(topology, random)``: with ``random``, a phase of random patterns too (many levels, many
    re-shares: seconds on an NVL72 cluster, so in the slow lane there)."""
    nvl72 = load_topology_file(ROOT / NVL72)
    gb200 = Topology(spec=load_preset("gb200-nvl72"), n_gpus=4 * 18 * 2 + 8)
    slow = pytest.mark.slow
    return [
        pytest.param(gb200, False, id="gb200-nvl72-152"),
        pytest.param(Topology(spec=_domains(), n_gpus=4 * 9), True, id="domains-36"),
        pytest.param(Topology(spec=load_preset("ethernet"), n_gpus=8 * 6), True, id="ethernet-48"),
        pytest.param(gb200, True, id="gb200-nvl72-152-random", marks=slow),
        pytest.param(Topology(spec=nvl72, n_gpus=72 * 2 + 4), True, id="nvl72-ib-148", marks=slow),
        pytest.param(Topology(spec=variant("infiniband", fabric__nodes_per_leaf=3), n_gpus=8 * 10), True,
                     id="infiniband-80", marks=slow),
    ]


@pytest.mark.parametrize("topo, random", _topologies())
def test_folded_routes_read_as_every_flow(topo, random):
    """Symmetric phases (a ring of servers on every lane, trees of servers inside blocks of servers),
    random server-level patterns, and a link class slowed: each block's last finish, its distinct
    finish times and its slowest rates are those of every flow of the cluster, bit for bit."""
    net = TierNetwork(topo)
    rng = np.random.default_rng(11 + topo.n_gpus)
    n, g = topo.n_nodes, topo.spec.node.gpus_per_node
    caps = {name: f.capacity_bytes_per_s for name, f in net.families().items()}
    slow = dict(caps)
    name = sorted(caps)[int(rng.integers(len(caps)))]
    slow[name] = caps[name] * 0.3
    kinds = set()
    for trial in range(4 if random else 3):
        server, groups = _random_phase(topo, rng)
        server = ServerFlows(src=server.src, dst=server.dst, weight=rng.choice([1.0, 2.0], len(server.src)))
        if trial < 3:
            # Every server alike: a ring of servers (trial 0), binary trees of servers (heap order)
            # inside blocks of d servers (trials 1, 2), on every lane.
            d = max(2, n // 3) if trial == 1 else n
            a = np.array([s for s in range(n) if s % d], dtype=np.int64)
            b = a - a % d + (a % d - 1) // 2 if trial else (a + 1) % n
            a, b = (np.arange(n), (np.arange(n) + 1) % n) if trial == 0 else (a, b)
            groups = [CrossingFlows(src_server=a, dst_server=b, src_local=np.arange(g), dst_local=np.arange(g)),
                      CrossingFlows(src_server=b, dst_server=a, src_local=rng.permutation(g), dst_local=np.arange(g))]
            groups = [x for x in groups if len(x.src_server)]
        routes = net.symmetric_routes(server=server, crossing=groups)
        for c in (caps, slow):
            kinds.add(_check(routes, c, rng))
    assert kinds - {None}, "nothing folded"


def test_per_link_capacities_are_not_folded():
    topo = Topology(spec=load_preset("gb200-nvl72"), n_gpus=4 * 18 * 2)
    net = TierNetwork(topo)
    n = topo.n_nodes
    routes = net.symmetric_routes(server=ServerFlows(src=np.array([0, 1]), dst=np.array([1, 0]), weight=1.0),
                                  crossing=[CrossingFlows(src_server=np.arange(n), dst_server=(np.arange(n) + 1) % n,
                                                          src_local=np.arange(4), dst_local=np.arange(4))])
    caps = {name: f.capacity_bytes_per_s for name, f in net.families().items()}
    assert routes.fold(caps) is not None
    caps["gpu_up"] = np.full(net.families()["gpu_up"].units * net.families()["gpu_up"].lanes, caps["gpu_up"])
    assert routes.fold(caps) is None


@pytest.mark.parametrize("gpus", [4 * 18 * 3 + 8, 4 * 18 * 8])
@pytest.mark.parametrize("degrade", [None, "nvlink-domain", "infiniband"])
def test_plan_costs_equal_unfolded(gpus, degrade, monkeypatch):
    """Every candidate plan of gb200-nvl72 costed with folding and without: the same numbers."""
    from dpsim.network.degrade import LinkDegradation

    def costs():
        kw = {} if degrade is None else {"degradations": (LinkDegradation(link=degrade, capacity_fraction=0.5),)}
        model = NcclCollectives(Topology(spec=load_preset("gb200-nvl72"), n_gpus=gpus), **kw)
        out = {}
        for op in ("all_reduce", "reduce_scatter", "all_gather"):
            for size in (MiB, GiB):
                out[op, size] = model.time(op, size).time_s
            for algorithm, _ in model.candidates(op):
                pc = model.plans.plan_cost(algorithm, op)
                out[algorithm, op] = (pc.seconds_per_byte, pc.r_intra, pc.r_inter, pc.phase_seconds_per_byte, pc.path)
        return out

    fold, used = SymmetricRoutes.fold, []

    def counted(self, capacity):
        out = fold(self, capacity)
        used.append(out is not None)
        return out

    monkeypatch.setattr(SymmetricRoutes, "fold", counted)
    folded = costs()
    assert any(used)  # NVLS beside tree flows, and pipelined trees: max-min over every flow
    monkeypatch.setattr(SymmetricRoutes, "fold", lambda self, capacity: None)
    assert costs() == folded


def _family(name, units, lanes):
    from dpsim.network.loadmap import Family

    return Family(name=name, offset=0, units=units, lanes=lanes, capacity_bytes_per_s=1.0, link_class=0, nic=False)


def _crossing(servers, links, columns, hops, pattern=0):
    from dpsim.network.model import RouteBlock, ServerSide

    servers = np.asarray(servers)
    return RouteBlock(kind="crossing", shape=(len(servers), np.shape(columns)[1]),
                      sides=(ServerSide(servers=servers, links=tuple(links), columns=np.asarray(columns, dtype=bool)),),
                      hops=tuple((f, np.asarray(c), None if m is None else np.asarray(m, dtype=bool))
                                 for f, c, m in hops),
                      pattern=pattern, edges=np.arange(len(servers)))


def _hand_made():
    """Routes built by hand where what tells components (or lanes) apart is one thing at a time."""
    out = []
    # Shifted components: {0, 2} and {1, 3} alike; {4, 5, 6} (two rows sharing hop link 6) and
    # {8, 10, 11} (two rows sharing link a[8]) as many rows but apart; rows 12 and 13 alike but
    # for a hop mask.
    fams = {"a": _family("a", 16, 1), "h": _family("h", 16, 1)}
    x = _crossing([0, 1, 4, 5, 8, 8], [("a", 0)], [[True]], [("h", [[2], [3], [6], [6], [10], [11]], None)])
    y = _crossing([12, 13], [("a", 0)], [[True, True]], [("h", [[12, 12], [13, 13]], [[True, True], [True, False]])],
                  pattern=1)
    out.append((SymmetricRoutes(blocks=(x, y), families=fams), {"a": 10.0, "h": 4.0}))
    # Lanes apart for one thing (lanes 1 and 2 alike): which units lane 0's hops reach (all three
    # rows one hop link) ...
    fams = {"p": _family("p", 4, 3), "u": _family("u", 2, 3)}
    z = _crossing([0, 1, 2], [("p", 0), ("p", 1), ("p", 2)], np.eye(3),
                  [("u", [[0, 1, 2], [0, 4, 5], [0, 4, 5]], None)])
    out.append((SymmetricRoutes(blocks=(z,), families=fams), {"p": 10.0, "u": 4.0}))
    # ... and which families lane 0 crosses (q besides p).
    fams = {"p": _family("p", 4, 3), "q": _family("q", 4, 3), "u": _family("u", 2, 3)}
    w = _crossing([0, 3], [("p", 0), ("q", 0), ("p", 1), ("p", 2)], [[1, 0, 0], [1, 0, 0], [0, 1, 0], [0, 0, 1]],
                  [("u", [[0, 1, 2], [3, 4, 5]], None)])
    out.append((SymmetricRoutes(blocks=(w,), families=fams), {"p": 10.0, "u": 4.0, "q": 1.0}))
    return out


@pytest.mark.parametrize("case", range(3), ids=["shifted", "lane-units", "lane-families"])
def test_hand_made_repeats_fold_and_the_others_stay(case):
    """Components alike but for one thing (hop links, a mask, how many share a link, which families a
    lane crosses, which units its hops reach) are kept apart; those alike fold; the rates and finish
    times read the same."""
    routes, caps = _hand_made()[case]
    rng = np.random.default_rng(case)
    assert _check(routes, caps, rng) == ("servers" if case == 0 else "lanes")
    folded = routes.fold(caps)
    if case == 0:
        assert [b.shape[0] for b in folded.blocks] == [5, 2]   # {1, 3} folds into {0, 2}
    else:
        assert [b.shape[1] for b in folded.blocks] == [2]   # lane 2 folds into lane 1
