"""Every algorithm's plan in symmetric form: what one server does, and server-level patterns.

An algorithm's :class:`~dpsim.collectives.algorithms.base.Plan` lists every flow of the
cluster (8 channels x 262,144 GPUs is two million ring flows). But every algorithm here
is built the same way on every server: in each phase, every server runs the same flows
inside itself (the ring's intra-server hops, the tree's chains, NVLS's switch traffic),
and the flows between servers follow a *server-level* pattern (a ring of servers, NCCL's
double binary tree of servers, XOR partners) on a few *lanes*: the GPUs (and so the
NICs) that carry it on each server. A :class:`SymmetricPlan` says exactly that:

- :attr:`SymmetricPhase.server_src`, :attr:`~SymmetricPhase.server_dst` (with their fractions and NVLS
  marks): the flows inside server 0 (local GPU indices, ``-1`` the NVSwitch), which every server runs;
- :attr:`SymmetricPhase.crossing`: :class:`~dpsim.network.model.CrossingFlows`, each a
  server-level pattern (one edge per server pair) times its lanes.

Its size is the GPUs of one server plus the edges of the server pattern, never GPUs x
channels. :meth:`SymmetricPlan.expand` gives back every flow, and the tests check, for
every algorithm, operation and cluster variant, that it equals the algorithm's own plan
flow for flow (as multisets per phase) with the same hop counts, channels and pipeline
depths. The ring's server order is rotated per server, but every server runs every
rotation once over its channels, so the multiset of (server pair, lane) flows is a
product: consecutive servers on every rail, plus the wrap from the last server to the
first, which changes rail when the server count is not a multiple of the GPUs per server.

Not every plan has this form: a broadcast chain starts mid-server at the root, and
halving-doubling with a number of ranks or GPUs per server that is not a power of two
pairs ranks differently on different servers; :func:`symmetric_plan` returns ``None`` for
them and the collective model evaluates their full plan.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from dpsim.collectives.algorithms.base import (
    Cluster,
    Phase,
    Plan,
    dtree_parents,
    log2_floor,
    tree_depth,
)
from dpsim.collectives.algorithms.nvls import _switch_flows
from dpsim.collectives.algorithms.tree import chain, tree_channels
from dpsim.collectives.ops import ring_steps
from dpsim.frozen import frozen_dataclass
from dpsim.network.model import CrossingFlows


@frozen_dataclass
class SymmetricPhase:
    """Concurrent flows of one phase: the same inside every server, plus server-level patterns."""

    server_src: np.ndarray
    """Local source GPU of each flow inside a server (``-1``: the server's NVSwitch)."""
    server_dst: np.ndarray
    """Local destination of each flow inside a server."""
    server_fraction: np.ndarray
    """Bytes of each flow inside a server per repetition, as a fraction of S."""
    server_nvls: np.ndarray
    """Flows inside a server moved by in-switch reduction (NVLS efficiency applies)."""
    crossing: tuple[CrossingFlows, ...]
    """Flows between servers (weights 1: each flow counts once)."""
    crossing_fraction: float
    """Bytes of every flow between servers per repetition, as a fraction of S."""
    repeat: int = 1
    """Identical repetitions (ring steps)."""
    name: str = ""
    """For reports."""


@frozen_dataclass
class SymmetricPlan:
    """An algorithm's plan for one op, in symmetric form."""

    plan: Plan
    """Hop counts, channels and pipeline depths of the full plan (its ``phases`` left empty)."""
    phases: tuple[SymmetricPhase, ...]
    """Run one after another."""

    @property
    def max_fraction(self) -> float:
        """Largest bytes of one flow in one repetition, as a fraction of S."""
        out = 0.0
        for ph in self.phases:
            if len(ph.server_fraction):
                out = max(out, float(ph.server_fraction.max()))
            if ph.crossing:
                out = max(out, ph.crossing_fraction)
        return out

    def expand(self, c: Cluster) -> list[Phase]:
        """Every flow of every phase, endpoints numbered as the algorithms number them."""
        out = []
        nodes = np.arange(c.n_nodes)
        for ph in self.phases:
            def place(local, node):
                local, node = np.asarray(local), np.asarray(node)
                return np.where(local < 0, -1 - node, node * c.stride + local)

            k = len(ph.server_src)
            src = [place(np.tile(ph.server_src, c.n_nodes), np.repeat(nodes, k))]
            dst = [place(np.tile(ph.server_dst, c.n_nodes), np.repeat(nodes, k))]
            frac = [np.tile(ph.server_fraction, c.n_nodes)]
            for x in ph.crossing:
                m, q = len(x.src_server), len(x.src_local)
                src.append(place(np.tile(x.src_local, m), np.repeat(x.src_server, q)))
                dst.append(place(np.tile(x.dst_local, m), np.repeat(x.dst_server, q)))
                frac.append(np.full(m * q, ph.crossing_fraction))
            out.append(Phase(src=np.concatenate(src), dst=np.concatenate(dst), fraction=np.concatenate(frac),
                             repeat=ph.repeat, name=ph.name))
        return out


def symmetric_plan(algorithm: str, op: str, c: Cluster) -> SymmetricPlan | None:
    """``algorithm``'s plan for ``op`` on ``c`` in symmetric form, or ``None`` when it has none
    (a broadcast chain; halving-doubling off powers of two; a partial server)."""
    if c.gpus_per_node != c.stride:
        return None
    build = _BUILDERS.get(algorithm)
    return build(op, c) if build is not None else None


def _phase(server=None, crossing=(), crossing_fraction=0.0, repeat=1, name="", nvls=False) -> SymmetricPhase:
    src, dst, frac = server if server is not None else (np.zeros(0, np.int64),) * 2 + (np.zeros(0),)
    src, dst = np.asarray(src, dtype=np.int64), np.asarray(dst, dtype=np.int64)
    return SymmetricPhase(server_src=src, server_dst=dst,
                          server_fraction=np.broadcast_to(np.asarray(frac, float), src.shape).copy(),
                          server_nvls=np.full(len(src), nvls), crossing=tuple(crossing),
                          crossing_fraction=float(crossing_fraction), repeat=repeat, name=name)


def _pattern(src_server, dst_server, src_local, dst_local) -> CrossingFlows:
    # Server numbers fit 32 bits: half the memory of the (one per server) pattern arrays.
    return CrossingFlows(src_server=np.asarray(src_server, dtype=np.int32),
                         dst_server=np.asarray(dst_server, dtype=np.int32),
                         src_local=np.asarray(src_local, dtype=np.int64),
                         dst_local=np.asarray(dst_local, dtype=np.int64))


def _ring(op: str, c: Cluster) -> SymmetricPlan | None:
    if op == "broadcast":
        return None  # the chain starts at the root, mid-server: server 0 differs from the others
    n, g, ranks = c.n_nodes, c.gpus_per_node, c.n_ranks
    k = c.channels if n > 1 else c.intra_rings
    per_nic = g // c.nic_nodes if c.nic_nodes and n > 1 else 0
    src, dst = [], []
    for ch in range(k):  # server 0's order of each channel (ring.ring_order_indices)
        cyc = c.ring_cycle(ch)
        if per_nic >= 2:
            order = cyc[(np.arange(g) + ch * per_nic + 1) % g]
        else:
            order = cyc[(np.arange(g) + ch) % g]
        if n == 1:
            src.append(order)
            dst.append(np.roll(order, -1))
        else:
            src.append(order[:-1])
            dst.append(order[1:])
    crossing = []
    if n > 1:
        nodes = np.arange(n, dtype=np.int32)
        lanes = np.arange(k)
        if per_nic == 1:
            # Channel c enters server i at position (c - i) mod g of the (one) cycle and leaves from
            # the position before it, on the same NIC as the next server's entry: over the
            # channels, every GPU once.
            cyc = c.ring_cycle(0)
            crossing.append(_pattern(nodes[:-1], nodes[1:], cyc[lanes], cyc[lanes]))
            # The wrap (last server to server 0) leaves from position (c - n) mod g and enters at c.
            crossing.append(_pattern([n - 1], [0], cyc[(lanes - n) % g], cyc[lanes]))
        elif per_nic >= 2:
            exits = [c.ring_cycle(ch)[ch * per_nic % g] for ch in range(k)]
            entries = [c.ring_cycle(ch)[(ch * per_nic + 1) % g] for ch in range(k)]
            crossing.append(_pattern(nodes, (nodes + 1) % n, exits, entries))
        else:
            exits = [c.ring_cycle(ch)[(ch + g - 1) % g] for ch in range(k)]
            entries = [c.ring_cycle(ch)[ch % g] for ch in range(k)]
            crossing.append(_pattern(nodes, (nodes + 1) % n, exits, entries))
    s = ring_steps(op, ranks)
    frac = 1.0 / (ranks * k)
    phase = _phase((np.concatenate(src), np.concatenate(dst), frac), crossing, frac, repeat=s, name="ring step")
    inter = 0 if n == 1 else (2 * (n - 1) if op == "all_reduce" else n - 1)
    meta = Plan(algorithm="ring", op=op, phases=(), intra_hops=s - inter, inter_hops=inter, channels=k)
    return SymmetricPlan(plan=meta, phases=(phase,))


def _tree(op: str, c: Cluster) -> SymmetricPlan | None:
    if op != "all_reduce":
        return None
    k = tree_channels(c)
    g, n = c.gpus_per_node, c.n_nodes
    src, dst = [], []
    heads: dict[int, list[int]] = {0: [], 1: []}
    for ch in range(k):
        order = chain(c, ch)
        if g > 1:
            lo, hi = order[:-1], order[1:]
            src += [hi, lo]
            dst += [lo, hi]
        heads[ch % 2].append(int(order[0]))
    crossing = []
    depth = 0
    if n > 1:
        trees = dtree_parents(n)
        nodes = np.arange(n, dtype=np.int32)
        for t, parent in enumerate(trees):
            if not heads[t]:
                continue
            child = nodes[parent >= 0]
            crossing.append(_pattern(np.concatenate([child, parent[child]]), np.concatenate([parent[child], child]),
                                     heads[t], heads[t]))
        depth = max(tree_depth(t) for t in trees)
    empty = np.zeros(0, np.int64)
    phase = _phase((np.concatenate(src) if src else empty, np.concatenate(dst) if dst else empty, 1.0 / k),
                   crossing, 1.0 / k, name="pipelined tree")
    meta = Plan(algorithm="tree", op=op, phases=(), intra_hops=2 * (g - 1), inter_hops=2 * log2_floor(n), channels=k,
                pipeline_intra=2 * (g - 1), pipeline_inter=2 * depth)
    return SymmetricPlan(plan=meta, phases=(phase,))


def _nvls(op: str, c: Cluster) -> SymmetricPlan | None:
    src, dst, frac = _switch_flows(c, op, np.array([0]), shards=c.n_ranks)
    phase = _phase((src, dst, frac), name="in-switch reduction", nvls=True)
    meta = Plan(algorithm="nvls", op=op, phases=(), intra_hops=1, inter_hops=0)
    return SymmetricPlan(plan=meta, phases=(phase,))


def _nvls_tree(op: str, c: Cluster) -> SymmetricPlan | None:
    g, n = c.gpus_per_node, c.n_nodes
    src, dst, frac = _switch_flows(c, op, np.array([0]))
    trees = dtree_parents(n)
    nodes = np.arange(n, dtype=np.int32)
    lanes = np.arange(g)
    crossing = []
    for parent in trees:
        child = nodes[parent >= 0]
        crossing.append(_pattern(np.concatenate([child, parent[child]]), np.concatenate([parent[child], child]),
                                 lanes, lanes))
    phase = _phase((src, dst, frac), crossing, 1.0 / (2 * g), name="NVLS + inter-server tree", nvls=True)
    depth = max(tree_depth(t) for t in trees)
    meta = Plan(algorithm="nvls_tree", op=op, phases=(), intra_hops=1, inter_hops=2 * log2_floor(n), channels=2 * g,
                pipeline_intra=2, pipeline_inter=2 * depth)
    return SymmetricPlan(plan=meta, phases=(phase,))


def _hierarchical(op: str, c: Cluster) -> SymmetricPlan | None:
    g, n = c.gpus_per_node, c.n_nodes
    local = np.arange(g)
    cyc = c.cycle(0)
    rs, ag = op in ("all_reduce", "reduce_scatter"), op in ("all_reduce", "all_gather")
    intra = _phase((cyc, np.roll(cyc, -1), 1.0 / g), repeat=g - 1, name="intra-server ring")
    phases, intra_steps, inter_steps = [], 0, 0
    if rs and g > 1:
        phases.append(intra)
        intra_steps += g - 1
    if n > 1:
        steps = (2 if op == "all_reduce" else 1) * (n - 1)
        nodes = np.arange(n, dtype=np.int32)
        phases.append(_phase(crossing=[_pattern(nodes, (nodes + 1) % n, local, local)],
                             crossing_fraction=1.0 / (g * n), repeat=steps, name="per-rail inter-server ring"))
        inter_steps += steps
    if ag and g > 1:
        phases.append(intra)
        intra_steps += g - 1
    meta = Plan(algorithm="hierarchical", op=op, phases=(), intra_hops=intra_steps, inter_hops=inter_steps)
    return SymmetricPlan(plan=meta, phases=tuple(phases))


def _halving_doubling(op: str, c: Cluster) -> SymmetricPlan | None:
    n_ranks, g, n = c.n_ranks, c.gpus_per_node, c.n_nodes
    if n_ranks & (n_ranks - 1) or g & (g - 1):
        return None  # extra ranks fold on some servers only; partners straddle servers unevenly
    m = n_ranks.bit_length() - 1
    local, nodes = np.arange(g), np.arange(n, dtype=np.int32)
    phases, intra, inter = [], 0, 0

    def add(s: int, name: str) -> None:
        nonlocal intra, inter
        d = 1 << s
        if d < g:
            phases.append(_phase((local, local ^ d, 1.0 / (2 << s)), name=name))
            intra += 1
        else:
            phases.append(_phase(crossing=[_pattern(nodes, nodes ^ (d // g), local, local)],
                                 crossing_fraction=1.0 / (2 << s), name=name))
            inter += 1

    if op in ("all_reduce", "reduce_scatter"):
        for s in range(m):
            add(s, f"halving, distance {1 << s}")
    if op in ("all_reduce", "all_gather"):
        for s in range(m - 1, -1, -1):
            add(s, f"doubling, distance {1 << s}")
    meta = Plan(algorithm="halving_doubling", op=op, phases=(), intra_hops=intra, inter_hops=inter)
    return SymmetricPlan(plan=meta, phases=tuple(phases))


_BUILDERS = {"ring": _ring, "tree": _tree, "nvls": _nvls, "nvls_tree": _nvls_tree, "hierarchical": _hierarchical,
             "halving_doubling": _halving_doubling}


def flow_multiset(phase: Phase) -> Counter:
    """``(src, dst, fraction) -> count`` of a phase's flows (to compare two plans flow for flow)."""
    return Counter(zip(phase.src.tolist(), phase.dst.tolist(), np.round(phase.fraction, 15).tolist()))
