"""The interface between the collective layer and any network model.

A network numbers its directed links ``0 .. n_links - 1`` and its endpoints by server:
GPU ``local`` of server ``s`` is endpoint ``s * gpus_per_server + local`` and ``-1 - s``
is server ``s``'s switch (the NVSwitch of an in-switch reduction, NVLS). Collectives hand
it arrays of concurrent flows (source and destination endpoints) and get back each flow's
max-min fair rate and route latency, plus the flow/link incidence to count bytes per link
(:class:`LinkLoads`). That is all :mod:`dpsim.collectives` may use: a network model can be
swapped (:class:`~dpsim.network.tiers.TierNetwork`, routed by formula on dpsim's own
fabrics; :class:`~dpsim.network.graph_network.FlowNetwork`, routed by search on any graph)
without touching the collectives.

A network that knows its own symmetry (every server identical, switch blocks identical)
also takes flows in compact form, so that a collective on 262,144 GPUs costs what one
on 16 does: :class:`ServerFlows` (what every server runs inside itself) and
:class:`CrossingFlows` (a server-level pattern, e.g. a ring or a binary tree of servers,
run on a few lanes, e.g. one per NIC). :meth:`NetworkModel.symmetric_loads` counts
their load on every link as a :class:`~dpsim.network.loadmap.LoadMap` (per class of
identical links), and :meth:`NetworkModel.server_network` is one server's own links,
where max-min sharing of the flows inside a server is exact when no flow between
servers uses them (:attr:`NetworkModel.shared_server_links` false). A network without
that knowledge returns ``None`` and collectives evaluate every flow.

The string-named helpers (:class:`Flow`, :class:`FlowRates`, :class:`TransferResult`)
serve tests and explicit schedules on small graphs.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cached_property
from typing import Protocol, Sequence, runtime_checkable

import numpy as np

from dpsim.frozen import frozen_dataclass
from dpsim.network.loadmap import Family, LoadMap
from dpsim.network.maxmin import _sorted_unique, max_min_sparse


@frozen_dataclass
class LinkLoads:
    """Steady max-min rates of concurrent flows, in array form."""

    rates_bytes_per_s: np.ndarray
    """Rate of each flow, in the order given."""
    latencies_s: np.ndarray
    """Sum of hop latencies along each flow's route."""
    flow_of: np.ndarray
    """Incidence: flow index of each (flow, link) pair."""
    link_of: np.ndarray
    """Incidence: link index of each (flow, link) pair."""
    n_links: int
    """Links of the network that numbered them (length of the dense per-link arrays)."""

    def link_bytes(self, flow_bytes: np.ndarray) -> np.ndarray:
        """Bytes each link carries when flow *f* moves ``flow_bytes[f]`` (dense over all links)."""
        return np.bincount(self.link_of, weights=np.asarray(flow_bytes, float)[self.flow_of],
                           minlength=self.n_links)

    def flow_counts(self) -> np.ndarray:
        """Flows crossing each link (dense over all links)."""
        return np.bincount(self.link_of, minlength=self.n_links)


@frozen_dataclass
class ServerFlows:
    """Flows inside a server that *every* server of the cluster runs at once."""

    src: np.ndarray
    """Local GPU index of each flow's source (``-1``: the server's switch, an NVLS endpoint)."""
    dst: np.ndarray
    """Local GPU index of each flow's destination (``-1``: the server's switch)."""
    weight: np.ndarray
    """What each flow puts on every link of its route (1: count flows; a fraction of S: bytes)."""


@frozen_dataclass
class CrossingFlows:
    """Flows between servers: every edge of a server-level pattern, on every lane.

    Flow ``(e, k)`` goes from GPU ``src_local[k]`` of server ``src_server[e]`` to GPU
    ``dst_local[k]`` of server ``dst_server[e]`` (``src_server != dst_server``): e.g. a
    ring of servers run on one lane per NIC, or a binary tree of servers run from each
    server's channel heads.
    """

    src_server: np.ndarray
    """Source server of each pattern edge."""
    dst_server: np.ndarray
    """Destination server of each pattern edge."""
    src_local: np.ndarray
    """Source GPU (local index) of each lane."""
    dst_local: np.ndarray
    """Destination GPU (local index) of each lane."""
    weight: float = 1.0
    """What each flow puts on every link of its route (1: count flows; a fraction of S: bytes)."""


@frozen_dataclass
class ServerSide:
    """The links a block's flows cross on one server (their source's or their destination's)."""

    servers: np.ndarray
    """Server of each row of the block."""
    links: tuple[tuple[str, int], ...]
    """``(family, lane)`` of each server link some flow of the block crosses on the row's server."""
    columns: np.ndarray
    """``(links, columns)``: which columns' flows cross each of :attr:`links`."""

    @cached_property
    def column_index(self) -> list[np.ndarray]:
        """The columns that cross each of :attr:`links`."""
        return [np.flatnonzero(c) for c in self.columns]


@frozen_dataclass
class RouteBlock:
    """``rows x cols`` flows of one kind, routed by symmetry: server links by template, the
    others by formula."""

    kind: str
    """``server`` (flows inside a server: a row per server, a column per flow of
    :class:`ServerFlows`) or ``crossing`` (a row per pattern edge, a column per lane)."""
    shape: tuple[int, int]
    """Rows and columns."""
    sides: tuple[ServerSide, ...]
    """Links on the servers at either end."""
    hops: tuple[tuple[str, np.ndarray, np.ndarray | None], ...] = ()
    """Other links, ``(family, cells, mask)``: ``cells`` (a row each, or one row for all; broadcast
    over the columns) is each flow's link as ``unit x lanes + lane`` of the family, ``mask`` (as
    ``cells``; ``None`` for all) the flows that cross it."""
    multiplicity: np.ndarray | None = None
    """Flows each column stands for (``None``: one each): flows inside a server that take one
    route cross the same links, so they always freeze together at one rate."""
    flow_column: np.ndarray | None = None
    """Flows inside servers: the column of each flow of the :class:`ServerFlows` given."""
    pattern: int = -1
    """Index of its pattern in the ``crossing`` given (``-1``: flows inside servers)."""
    edges: np.ndarray | None = None
    """The pattern edge of each row (``None``: flows inside servers, a row per server)."""


@frozen_dataclass
class SymmetricRoutes:
    """Every flow of a phase routed by symmetry, in blocks: which flows cross marked links, and
    how many flows of a subset cross each link, without listing a route per flow.

    Per-link arrays are dense per family (``units x lanes``, flat), what a max-min over the flows
    (:func:`~dpsim.network.maxmin.max_min_routes`) tracks link by link. Both methods take the
    rows of each block still of interest (``rows``), so that later rounds of a max-min cost
    what is still rising.
    """

    blocks: tuple[RouteBlock, ...]
    """The flows, block by block."""
    families: dict[str, Family]
    """The network's link families (units and lanes of each)."""

    def crossed(self, marked: dict[str, np.ndarray], rows: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Per block, which flows of rows ``rows`` cross a link that ``marked`` (per family, a boolean
        per link ``unit x lanes + lane``; missing families: none) marks."""
        some = {f: bool(m.any()) for f, m in marked.items()}
        out = []
        for blk, r in zip(self.blocks, rows):
            hit = np.zeros((len(r), blk.shape[1]), dtype=bool)
            if not len(r):
                out.append(hit)
                continue
            for side in blk.sides:
                on = [k for k, (f, _) in enumerate(side.links) if some.get(f)]
                if not on:
                    continue
                # Per server, which of its links are marked (a bit each), then which columns cross
                # one of them, once per combination that occurs.
                srv = side.servers[r]
                mk = [marked[side.links[k][0]].reshape(-1, self.families[side.links[k][0]].lanes)[:, side.links[k][1]]
                      for k in on]
                if len(on) <= 16:
                    bits = np.zeros(len(mk[0]), dtype=np.int32)
                    for b, m in enumerate(mk):
                        bits |= m.astype(np.int32) << b
                    bits = bits[srv]
                    table = np.zeros((1 << len(on), blk.shape[1]), dtype=bool)
                    for combo in np.flatnonzero(np.bincount(bits, minlength=1 << len(on))).tolist():
                        table[combo] = side.columns[[on[b] for b in range(len(on)) if combo >> b & 1]].any(axis=0)
                    hit |= table[bits]
                else:
                    for k, m in zip(on, mk):
                        sel = m[srv]
                        hit[sel] |= side.columns[k]
            for fam, cells, mask in blk.hops:
                if not some.get(fam):
                    continue
                x = marked[fam][cells[r] if len(cells) > 1 else cells]
                hit |= x if mask is None else (x & (mask[r] if len(mask) > 1 else mask))
            out.append(hit)
        return out

    def count(self, which: Sequence[np.ndarray], rows: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
        """How many flows of ``which`` (per block, a boolean per flow of its rows ``rows``) cross each
        link, per family (dense ``unit x lanes + lane``; families none of them crosses left out).
        Whole numbers: exact in any order of summation."""
        out: dict[str, np.ndarray] = {}

        def dense(fam: str) -> np.ndarray:
            if fam not in out:
                f = self.families[fam]
                out[fam] = np.zeros(f.units * f.lanes)
            return out[fam]

        for blk, w, r in zip(self.blocks, which, rows):
            if not w.any():
                continue
            rr = np.flatnonzero(w.any(axis=1))
            wr = w[rr]
            for side in blk.sides:
                if not side.links:
                    continue
                srv = side.servers[r[rr]]
                by_family: dict[str, tuple[list, list]] = {}
                for k, (fam, lane) in enumerate(side.links):
                    idx = side.column_index[k]
                    if blk.multiplicity is not None:
                        per_row = (wr[:, idx] * blk.multiplicity[idx]).sum(axis=1)  # whole numbers: exact
                    elif len(idx) == 1:
                        per_row = wr[:, idx[0]]
                    else:
                        per_row = np.count_nonzero(wr[:, idx], axis=1)
                    lanes_of, rows_of = by_family.setdefault(fam, ([], []))
                    lanes_of.append(lane)
                    rows_of.append(per_row)
                # One histogram per family over its cells (server x lane), not one per link: whole
                # numbers, so the same sums.
                for fam, (lanes_of, rows_of) in by_family.items():
                    f = self.families[fam]
                    cell = (srv[:, None] * f.lanes + np.asarray(lanes_of)).ravel()
                    dense(fam)[:] += np.bincount(cell, weights=np.stack(rows_of, axis=1).astype(float).ravel(),
                                                 minlength=f.units * f.lanes)
            for fam, cells, mask in blk.hops:
                on = w if mask is None else (w & (mask[r] if len(mask) > 1 else mask))
                if not on.any():
                    continue
                c = np.broadcast_to(cells[r] if len(cells) > 1 else cells, on.shape)
                d = dense(fam)
                if blk.multiplicity is None:
                    d += np.bincount(c[on], minlength=len(d))
                else:
                    d += np.bincount(c[on], weights=np.broadcast_to(blk.multiplicity, on.shape)[on], minlength=len(d))
        return out

    def fold(self, capacity: dict[str, object]) -> SymmetricRoutes | None:
        """The same flows with every *component* that repeats another left out (``None`` when none
        repeats): one of each kind kept, links renumbered.

        A component is a set of flows that share links only among themselves. Two components are
        repeats when a renaming of links within each family (same capacity) maps one onto the other,
        row for row and column for column: max-min then runs on repeats as on one, bit for bit. A
        round's level is the least share over the links and a repeat's links hold the same shares
        (the same capacities lowered by the same counts times the same levels, round by round), so
        its flows freeze in the same rounds at the same levels; :func:`~dpsim.network.maxmin.progressive_finish`
        re-shares at the union of the finish times, which repeats share. Each flow left out thus has
        the rate and the finish time of its kept image, and any maximum or minimum over a block's
        flows (or a column's, or a group's of :func:`~dpsim.network.maxmin.max_min_routes`) is the
        same over the folded routes. Flows of a repeat move the bytes of their image: rows drop from
        any block, columns only from crossing blocks (all of one size).

        Families that some block uses together form a group, folded apart (two groups share no link).
        Two kinds of repeats are found:

        - *shifted by servers*: in a group whose families all have the same units, each link of unit
          ``u`` is a node ``u``; components of the node graph (unions of components of flows) that
          are the same rows shifted by ``d`` units (each link ``d`` units further in its family). On
          an NVLink-domain cluster, each domain's flows (NVLink links only) against the other shapes
          of domain.
        - *another lane*: in a group of crossing blocks whose families have the same lanes, where
          each column crosses links of one lane only, the flows of one lane against another's whose
          columns are the same in each block (the same units, masks and families crossed): the rails
          of a NIC fabric.

        Capacities given per link (an array) are not folded.
        """
        fams = self.families
        if any(np.ndim(capacity.get(f, 0.0)) for f in fams):
            return None
        if any(np.ndim(c) != 2 or (m is not None and np.ndim(m) != 2) for b in self.blocks for _, c, m in b.hops):
            return None
        parent = {f: f for f in fams}

        def root(f: str) -> str:
            while parent[f] != f:
                f = parent[f]
            return f

        names = []
        for blk in self.blocks:
            used = [f for s in blk.sides for f, _ in s.links] + [f for f, _, _ in blk.hops]
            names.append(used)
            for f in used[1:]:
                a, b = root(used[0]), root(f)
                if a != b:
                    parent[b] = a
        groups: dict[str, list[int]] = {}
        for k, used in enumerate(names):
            if used and self.blocks[k].shape[0]:
                groups.setdefault(root(used[0]), []).append(k)
        blocks = list(self.blocks)
        families = dict(fams)
        changed = False
        for g, ks in groups.items():
            members = [f for f in fams if root(f) == g]
            done = None
            if len({fams[f].units for f in members}) == 1:
                done = _fold_shifted([self.blocks[k] for k in ks], fams, fams[members[0]].units)
            if done is None and len({fams[f].lanes for f in members}) == 1:
                done = _fold_lanes([self.blocks[k] for k in ks], fams, fams[members[0]].lanes)
            if done is None:
                continue
            changed = True
            new_blocks, field, value = done
            for k, b in zip(ks, new_blocks):
                blocks[k] = b
            for f in members:
                families[f] = replace(fams[f], **{field: value})
        return SymmetricRoutes(blocks=tuple(blocks), families=families) if changed else None

    def flow_links(self) -> tuple[dict[str, int], int, np.ndarray, np.ndarray]:
        """Every flow's links listed: ``(offsets, n_links, links, weight)``. Links are numbered over
        all the families (each family's ``unit x lanes + lane`` after ``offsets[family]``); flows in
        block order, row by row (a row's columns in order); ``links`` is ``(flows, slots)`` with
        spare slots ``n_links``, int32; ``weight`` the flows each stands for (:attr:`RouteBlock.multiplicity`)."""
        offsets: dict[str, int] = {}
        n = 0
        for name, f in self.families.items():
            offsets[name] = n
            n += f.units * f.lanes
        parts, weights = [], []
        for blk in self.blocks:
            rows, cols = blk.shape
            slots = []
            for side in blk.sides:
                # A column crosses the side's links its column marks: a slot per link, the slots of
                # a column that crosses fewer of them left spare.
                width = int(side.columns.sum(axis=0).max()) if side.links else 0
                part = np.full((rows, cols, width), n, dtype=np.int32)
                for c in range(cols):
                    for slot, k in enumerate(np.flatnonzero(side.columns[:, c]).tolist()):
                        fam, lane = side.links[k]
                        part[:, c, slot] = offsets[fam] + side.servers * self.families[fam].lanes + lane
                slots.append(part)
            for fam, cells, mask in blk.hops:
                cell = offsets[fam] + np.broadcast_to(cells, blk.shape)
                if mask is not None:
                    cell = np.where(np.broadcast_to(mask, blk.shape), cell, n)
                slots.append(np.asarray(cell, dtype=np.int32)[:, :, None])
            parts.append(np.concatenate(slots, axis=2).reshape(rows * cols, -1) if slots
                         else np.full((rows * cols, 0), n, dtype=np.int32))
            mult = np.ones(cols) if blk.multiplicity is None else np.asarray(blk.multiplicity, dtype=float)
            weights.append(np.broadcast_to(mult, blk.shape).ravel())
        width = max((p.shape[1] for p in parts), default=0)
        links = np.full((sum(len(p) for p in parts), width), n, dtype=np.int32)  # half the memory of int64
        at = 0
        for p in parts:
            links[at:at + len(p), :p.shape[1]] = p
            at += len(p)
        return offsets, n, links, (np.concatenate(weights) if weights else np.zeros(0))


def _components(nodes: list[np.ndarray], units: int) -> np.ndarray:
    """The least node of each node's component, rows of ``nodes`` joining their nodes."""
    lab = np.arange(units, dtype=np.int64)
    a = np.concatenate([np.repeat(n[:, 0], n.shape[1] - 1) for n in nodes])
    b = np.concatenate([n[:, 1:].ravel() for n in nodes])
    apart = a != b
    a, b = a[apart], b[apart]
    while True:  # hook each root on the lesser, then jump pointers
        la, lb = lab[a], lab[b]
        differ = la != lb
        if not differ.any():
            return lab
        la, lb = la[differ], lb[differ]
        np.minimum.at(lab, np.maximum(la, lb), np.minimum(la, lb))
        while True:
            up = lab[lab]
            if (up == lab).all():
                break
            lab = up


def _distinct_columns(m: np.ndarray, keep_constant: bool = True) -> np.ndarray:
    """``m`` without the columns that repeat an earlier one, nor (unless ``keep_constant``) those that hold
    one value in every row: what tells rows apart, and no less."""
    keep = []
    for j in range(m.shape[1]):
        c = m[:, j]
        if not keep_constant and len(c) and (c == c[0]).all():
            continue
        if not any(np.array_equal(c, m[:, i]) for i in keep):
            keep.append(j)
    return m[:, keep]


def _fold_shifted(blocks: list[RouteBlock], fams: dict[str, Family],
                  units: int) -> tuple[list[RouteBlock], str, int] | None:
    """:meth:`SymmetricRoutes.fold` of one group by shifts of units: its blocks with one component of
    each shape kept and the kept units renumbered (``None``: no two alike)."""
    nodes = []
    for blk in blocks:
        rows = blk.shape[0]
        cols = [np.asarray(s.servers, dtype=np.int64)[:, None] for s in blk.sides]
        for f, cells, _ in blk.hops:
            c = np.asarray(cells, dtype=np.int64)
            cols.append(np.broadcast_to(c // fams[f].lanes, (rows, c.shape[1])))
        nodes.append(np.concatenate(cols, axis=1))
    lab = _components([_distinct_columns(n) for n in nodes], units)
    comp = [lab[n[:, 0]] for n in nodes]
    rel = []
    for blk, cp in zip(blocks, comp):
        # Each row as it reads from its component's least node: what must match row for row.
        rows = blk.shape[0]
        parts = [np.asarray(s.servers, dtype=np.int64)[:, None] - cp[:, None] for s in blk.sides]
        for f, cells, mask in blk.hops:
            c = np.asarray(cells, dtype=np.int64)
            parts.append(np.broadcast_to(c, (rows, c.shape[1])) - cp[:, None] * fams[f].lanes)
            if mask is not None:
                mk = np.asarray(mask)
                parts.append(np.broadcast_to(mk, (rows, mk.shape[1])).astype(np.int64))
        r = _distinct_columns(np.concatenate(parts, axis=1), keep_constant=False)
        low = r.min(axis=0) if r.size else r[:0].sum(axis=0)
        span = (r.max(axis=0) - low + 1) if r.size else low + 1
        if float(np.prod(span.astype(float))) * units < 2.0 ** 62:
            # The row as one number (after its component): a sort of one key.
            key = cp.copy()
            for j in range(r.shape[1]):
                key = key * int(span[j]) + (r[:, j] - low[j])
            order = np.argsort(key, kind="stable")
        else:
            order = np.lexsort(tuple(r[:, j] for j in range(r.shape[1] - 1, -1, -1)) + (cp,))
        rel.append((np.ascontiguousarray(r[order]), cp[order]))
    labels = _sorted_unique(np.concatenate(comp))
    lo = [np.searchsorted(c, labels) for _, c in rel]
    many = np.stack([np.searchsorted(c, labels, side="right") - start for (_, c), start in zip(rel, lo)], axis=1)
    # Components with as many rows in each block side by side, each one line of its rows' numbers:
    # alike lines are repeats (the first of each kept).
    rep = np.zeros(units, dtype=bool)
    kinds = 0
    order = np.lexsort(many.T[::-1])
    edge = np.flatnonzero(np.concatenate(([True], (many[order][1:] != many[order][:-1]).any(axis=1), [True])))
    for a, b in zip(edge[:-1].tolist(), edge[1:].tolist()):
        which = np.sort(order[a:b])
        lines = [np.zeros((len(which), 0), dtype=np.int64)]
        for (r, _), start, k in zip(rel, lo, many[which[0]].tolist()):
            if k:
                at = start[which][:, None] + np.arange(k)
                lines.append(r[at].reshape(len(which), -1))
        line = np.concatenate(lines, axis=1)
        if line.shape[1]:
            o = np.lexsort(line.T[::-1])
            first = np.concatenate(([True], (line[o][1:] != line[o][:-1]).any(axis=1)))
            # The least component of each kind (o is stable, which ascending).
            firsts = np.minimum.reduceat(o, np.flatnonzero(first))
        else:
            firsts = np.zeros(1, dtype=np.int64)
        rep[labels[which[firsts]]] = True
        kinds += len(firsts)
    if kinds == len(labels):
        return None
    keep = [rep[cp] for cp in comp]
    touched = np.zeros(units, dtype=bool)
    for n, kp in zip(nodes, keep):
        touched[n[kp].ravel()] = True
    new = np.cumsum(touched) - 1
    out = []
    for blk, kp in zip(blocks, keep):
        hops = []
        for f, cells, mask in blk.hops:
            c = np.asarray(cells, dtype=np.int64)
            c = c[kp] if c.shape[0] > 1 else c
            lanes = fams[f].lanes
            m = None if mask is None else (np.asarray(mask)[kp] if np.shape(mask)[0] > 1 else mask)
            hops.append((f, new[c // lanes] * lanes + c % lanes, m))
        sides = tuple(ServerSide(servers=new[np.asarray(s.servers)[kp]], links=s.links, columns=s.columns)
                      for s in blk.sides)
        out.append(replace(blk, shape=(int(np.count_nonzero(kp)), blk.shape[1]), sides=sides, hops=tuple(hops),
                           edges=None if blk.edges is None else blk.edges[kp]))
    return out, "units", int(np.count_nonzero(touched))


def _fold_lanes(blocks: list[RouteBlock], fams: dict[str, Family],
                lanes: int) -> tuple[list[RouteBlock], str, int] | None:
    """:meth:`SymmetricRoutes.fold` of one group by lanes: its blocks with the columns of one lane of
    each kind kept, lanes renumbered (``None``: not one lane a column, or no two lanes alike)."""
    if lanes < 2 or any(blk.kind != "crossing" for blk in blocks):
        return None
    lane_of, content = [], []
    for blk in blocks:
        cols = blk.shape[1]
        seen = [set() for _ in range(cols)]
        what = [[] for _ in range(cols)]
        for s in blk.sides:
            for j in range(cols):
                on = np.flatnonzero(s.columns[:, j]).tolist()
                seen[j].update(s.links[k][1] for k in on)
                what[j].append(tuple(s.links[k][0] for k in on))
        for f, cells, mask in blk.hops:
            c = np.asarray(cells, dtype=np.int64)
            if c.shape[1] != cols:
                return None
            for j in range(cols):
                ln = _sorted_unique(c[:, j] % lanes).tolist()
                seen[j].update(ln)
                what[j].append((f, (c[:, j] // lanes).tobytes(),
                                None if mask is None else np.asarray(np.broadcast_to(mask, c.shape)[:, j]).tobytes()))
        if any(len(x) != 1 for x in seen):
            return None
        lane_of.append([x.pop() for x in seen])
        mult = blk.multiplicity
        content.append([(tuple(w), None if mult is None else float(mult[j])) for j, w in enumerate(what)])
    kinds: dict[tuple, int] = {}
    for ln in range(lanes):
        key = tuple(tuple(c for c, l in zip(cs, lo) if l == ln) for cs, lo in zip(content, lane_of))
        kinds.setdefault(key, ln)
    kept = sorted(kinds.values())
    if len(kept) == lanes:
        return None
    new = np.full(lanes, -1, dtype=np.int64)
    new[kept] = np.arange(len(kept))
    out = []
    for blk, lo in zip(blocks, lane_of):
        cols = np.array([new[l] >= 0 for l in lo])
        sides = []
        for s in blk.sides:
            on = [k for k, (_, l) in enumerate(s.links) if new[l] >= 0]
            links = tuple((s.links[k][0], int(new[s.links[k][1]])) for k in on)
            sides.append(ServerSide(servers=s.servers, links=links, columns=s.columns[on][:, cols]))
        hops = []
        for f, cells, mask in blk.hops:
            c = np.asarray(cells, dtype=np.int64)[:, cols]
            m = None if mask is None else np.asarray(np.broadcast_to(mask, np.shape(cells)))[:, cols]
            hops.append((f, c // lanes * len(kept) + new[c % lanes], m))
        out.append(replace(blk, shape=(blk.shape[0], int(np.count_nonzero(cols))), sides=tuple(sides),
                           hops=tuple(hops),
                           multiplicity=None if blk.multiplicity is None else blk.multiplicity[cols]))
    return out, "lanes", len(kept)


@runtime_checkable
class NetworkModel(Protocol):
    """What collectives need from a network (see the module docstring for the numbering)."""

    n_links: int
    """Directed links."""
    gpus_per_server: int
    """Endpoint stride of a server."""
    capacity_bytes_per_s: np.ndarray
    """Healthy capacity of each link (what collectives can drive through it)."""
    latency_s: np.ndarray
    """Hop latency charged to a flow crossing each link."""
    link_classes: tuple[str, ...]
    """Link class names (``nvlink``, ``pcie``, ``infiniband``, ``leaf-spine``...)."""
    link_class_id: np.ndarray
    """Class of each link, as an index into :attr:`link_classes`."""

    def loads(self, src: np.ndarray, dst: np.ndarray, capacity: np.ndarray | None = None) -> LinkLoads:
        """Max-min rates of concurrent flows ``src[f] -> dst[f]``; ``capacity`` overrides the links'."""
        ...

    def link_name(self, link: int) -> tuple[str, str]:
        """The graph edge ``(u, v)`` of a link index, for reports."""
        ...

    def nic_links(self) -> np.ndarray:
        """Indices of the NIC <-> switch links (what a per-message NIC overhead slows down)."""
        ...

    def families(self) -> dict[str, Family] | None:
        """Its links as families of ``units x lanes`` (:mod:`~dpsim.network.loadmap`), or ``None``
        when it has no such structure (then it has no :meth:`symmetric_loads` either)."""
        ...

    def server_network(self) -> NetworkModel | None:
        """A network of one server: its GPU <-> switch links with this network's capacities,
        endpoints numbered like server 0's (``None`` when unknown)."""
        ...

    @property
    def shared_server_links(self) -> bool:
        """Whether flows between servers also cross the GPU <-> switch links (an NVLink switch
        tier or domain), so that flows inside a server are not evaluated on their own."""
        ...

    def symmetric_loads(self, *, server: ServerFlows | None = None,
                        crossing: Sequence[CrossingFlows] = ()) -> LoadMap | None:
        """The weight every link carries when every server runs ``server`` and every pattern of
        ``crossing`` runs (``None`` when the network cannot count them by symmetry)."""
        ...

    def symmetric_routes(self, *, server: ServerFlows | None = None,
                         crossing: Sequence[CrossingFlows] = ()) -> SymmetricRoutes | None:
        """The routes of the flows of :meth:`symmetric_loads`, in blocks (the flows of ``server`` on
        every server, then each pattern of ``crossing``), for a max-min over them; ``None`` when
        the network cannot route them by symmetry."""
        ...


@frozen_dataclass
class Flow:
    """One point-to-point transfer between named graph nodes."""

    src: str
    """Sending endpoint (graph node id)."""
    dst: str
    """Receiving endpoint (graph node id)."""
    size_bytes: float
    """Bytes to move."""


@frozen_dataclass
class FlowRates:
    """Steady rates of a set of named flows that start together and never finish."""

    rates_bytes_per_s: np.ndarray
    """Max-min fair rate of each flow, in the order given."""
    latencies_s: np.ndarray
    """Propagation/hop latency of each flow's path."""
    link_flows: dict[tuple[str, str], int]
    """Number of these flows crossing each directed link."""
    link_capacity_bytes_per_s: dict[tuple[str, str], float]
    """Capacity of each link that carries at least one flow."""
    link_class: dict[tuple[str, str], str] | None = None
    """Link class (``nvlink``, ``infiniband``, ``leaf-spine``...) of each of those links, when known."""

    def completion_time_s(self, size_bytes: float) -> float:
        """Time until the last of these flows finishes when each carries ``size_bytes``.

        With equal sizes the flows on the most loaded link keep their fair share to
        the end, so the finish time is exactly ``max(latency + size / rate)``.
        """
        if len(self.rates_bytes_per_s) == 0:
            return 0.0
        return float(np.max(self.latencies_s + size_bytes / self.rates_bytes_per_s))


@frozen_dataclass
class TransferResult:
    """What happened to a set of concurrent named flows of possibly different sizes."""

    finish_times_s: np.ndarray
    """When each flow's last byte arrived, in the order given."""
    link_bytes: dict[tuple[str, str], float]
    """Bytes carried by each directed link."""
    link_capacity_bytes_per_s: dict[tuple[str, str], float]
    """Capacity of each link that carried bytes."""

    @property
    def makespan_s(self) -> float:
        """When the last flow finished."""
        return float(self.finish_times_s.max()) if len(self.finish_times_s) else 0.0

    def link_utilisation(self) -> dict[tuple[str, str], float]:
        """Average utilisation of each used link over the makespan (never above 1)."""
        span = self.makespan_s
        if span <= 0:
            return {}
        return {e: b / (self.link_capacity_bytes_per_s[e] * span) for e, b in self.link_bytes.items()}


def describe_rates(net: NetworkModel, loads: LinkLoads) -> FlowRates:
    """:class:`FlowRates` of evaluated flows, links named by :meth:`NetworkModel.link_name`."""
    counts = loads.flow_counts()
    used = np.flatnonzero(counts)
    names = [net.link_name(int(link)) for link in used]
    return FlowRates(
        rates_bytes_per_s=loads.rates_bytes_per_s,
        latencies_s=loads.latencies_s,
        link_flows={e: int(c) for e, c in zip(names, counts[used])},
        link_capacity_bytes_per_s={e: float(c) for e, c in zip(names, net.capacity_bytes_per_s[used])},
        link_class={e: net.link_classes[c] for e, c in zip(names, net.link_class_id[used])},
    )


def transfer_times(flow_of: np.ndarray, link_of: np.ndarray, capacity: np.ndarray,
                   sizes: np.ndarray) -> np.ndarray:
    """Finish time of each flow when all start together and rates are re-shared max-min
    each time one finishes (no latency)."""
    n = len(sizes)
    remaining = sizes.astype(float).copy()
    finish = np.zeros(n)
    active = remaining > 0
    now = 0.0
    while active.any():
        keep = active[flow_of]
        idx = np.flatnonzero(active)
        remap = np.full(n, -1)
        remap[idx] = np.arange(len(idx))
        rates = max_min_sparse(remap[flow_of[keep]], link_of[keep], capacity, len(idx))
        dt = float(np.min(remaining[idx] / rates))
        remaining[idx] -= rates * dt
        now += dt
        # Flows within a rounding error of zero finish together.
        done = remaining[idx] <= 1e-9 * np.maximum(1.0, sizes[idx])
        finish[idx[done]] = now
        remaining[idx[done]] = 0.0
        active[idx[done]] = False
    return finish


def run_transfer(net: NetworkModel, loads: LinkLoads, sizes: Sequence[float]) -> TransferResult:
    """Flows of ``sizes`` bytes on the routes of ``loads``, run together, rates re-shared each time
    one finishes: when each one's last byte arrives (route latency included) and bytes per link."""
    sizes = np.asarray(sizes, dtype=float)
    finish = transfer_times(loads.flow_of, loads.link_of, net.capacity_bytes_per_s, sizes)
    link_bytes = loads.link_bytes(sizes)
    used = np.flatnonzero(link_bytes > 0)
    names = [net.link_name(int(link)) for link in used]
    return TransferResult(
        finish_times_s=finish + loads.latencies_s,
        link_bytes={e: float(b) for e, b in zip(names, link_bytes[used])},
        link_capacity_bytes_per_s={e: float(c) for e, c in zip(names, net.capacity_bytes_per_s[used])},
    )
