"""TierNetwork: the flow model on dpsim's own topologies, routed by arithmetic.

:class:`~dpsim.network.graph_network.FlowNetwork` finds routes by breadth-first search on
any graph, one Python BFS per flow: fine for a representative slice, hopeless for the
131,072 ring flows of 16,384 GPUs with 8 channels. Topologies built by
:func:`dpsim.topology.build_graph` are trees of switches above identical servers, so
the fewest-hop route between two GPUs is known in closed form:

- same server: GPU -> NVSwitch/PCIe hub -> GPU;
- same NVLink domain (``nvlink_domain`` or ``fabric.kind: nvlink``): GPU -> hub ->
  NVLink switch tier -> hub -> GPU;
- otherwise: GPU -> PCIe switch -> NIC -> leaf -> (up the tiers to the lowest block
  that holds both leaves, then down) -> leaf -> NIC -> PCIe switch -> GPU.

:class:`TierNetwork` numbers every directed link of that graph by formula, computes
all routes at once with numpy, and shares links max-min with the sparse solver
(:func:`~dpsim.network.maxmin.max_min_sparse`). Link names, capacities, latencies
and classes are exactly the graph's (``tests/test_network.py`` checks route for route
against BFS on :func:`~dpsim.topology.build_graph`), so reports can name a link such as
``leaf3.0 -> spine1``. Switch blocks are collapsed and ECMP is an even split over
equal up-links (see :mod:`dpsim.topology.fabric`, where the hashing it leaves out is costed).

Links come in *families* (:meth:`TierNetwork.families`: GPU up-links, PCIe links, NIC
cables, each tier's up- and down-links...), each a grid of identical links, so the
network never lists its links unless asked (the per-link arrays are built on first
use). :meth:`TierNetwork.symmetric_loads` counts compact flows
(:class:`~dpsim.network.model.ServerFlows`, :class:`~dpsim.network.model.CrossingFlows`)
on every family with the same routes, by arithmetic on server numbers: the degree of
each server in a crossing pattern loads its NIC and PCIe links, and the pattern edges
whose servers lie in different leaf groups (or blocks of a tier, or rails) load that
level's up- and down-links; servers and switch blocks with the same counts form one
class of a :class:`~dpsim.network.loadmap.LoadMap`. The work is a few numpy passes over
the pattern's edges (one per server for a ring or a tree), none over GPUs or flows.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import cached_property

import numpy as np

from dpsim.network.loadmap import Family, FamilyLoad, LoadMap, classify
from dpsim.network.maxmin import max_min_sparse
from dpsim.network.model import (
    CrossingFlows,
    Flow,
    FlowRates,
    LinkLoads,
    RouteBlock,
    ServerFlows,
    ServerSide,
    SymmetricRoutes,
    TransferResult,
    describe_rates,
    run_transfer,
)
from dpsim.topology.fabric import (
    design_group_sizes,
    level_class,
    level_units,
    nic_layout,
    nic_rate,
    switch_levels,
    switch_name,
    uplink_capacities,
)
from dpsim.topology.server import build_server
from dpsim.topology.spec import nic_fabric, nvlink_fabric

_GPU_ID = re.compile(r"n(\d+)\.gpu(\d+)$")
_HUB_ID = re.compile(r"n(\d+)\.(?:nvswitch|pcie)$")



def _server_counts(servers: np.ndarray, n: int) -> np.ndarray:
    """Pattern edges per server, as int32: a few per server, and kept one array per pattern
    until the servers are classed (half the memory of an int64 count at 32,768 servers)."""
    return np.bincount(servers, minlength=n).astype(np.int32)


class TierNetwork:
    """The :class:`~dpsim.network.model.NetworkModel` of a dpsim topology, routed by formula.

    Parameters
    ----------
    topology : dpsim.topology.Topology
        The cluster (whole or a representative slice: its group sizes are used).
    """

    def __init__(self, topology):
        spec = topology.spec
        self.topology = topology
        self.spec = spec
        self.n_nodes = topology.n_nodes
        self.gpn = spec.node.gpus_per_node
        self.fabric = spec.fabric
        self.layout = nic_layout(spec)
        self.server = build_server(spec)
        """The links and routes every server repeats (:mod:`dpsim.topology.server`)."""
        fabric = spec.fabric
        self.nic_kind = nic_fabric(fabric) and self.n_nodes > 1
        self.nvl_fabric = nvlink_fabric(fabric) and self.n_nodes > 1
        dom = spec.nvlink_domain
        self.domain_nodes = dom.nodes if dom is not None and self.n_nodes > 1 else 0
        self._domain_of = dom.domain_of if self.domain_nodes else None
        """Domain index of servers (a communicator's copy split over racks has pieces of its own sizes)."""
        if self.nic_kind:
            design = design_group_sizes(spec)
            tiers = tuple(topology.tier_group_sizes or ())
            self.sizes = (topology.leaf_group_nodes or design[0], *tiers, *design[1 + len(tiers):])
            self.n_levels = switch_levels(self.n_nodes, spec, self.sizes)
            self.units = level_units(self.n_nodes, self.sizes)
            self.uplinks = uplink_capacities(spec)
        else:
            self.sizes, self.n_levels, self.units, self.uplinks = (), 0, [], ()
        # Link blocks: (name, count, capacity, latency, class): the server's families (one unit
        # per server), then the switch tiers, then NVLink tiers.
        n, gpn = self.n_nodes, self.gpn
        blocks: list[tuple[str, int, float, float, str]] = []
        self._server_families = [f for f in self.server.families if f.intra or self.nic_kind]
        for f in self._server_families:
            blocks.append((f.name, n * len(f.links), f.capacity_bytes_per_s, f.latency_s, f.link_class))
        if self.nic_kind:
            n_leaves = self.units[0] * self.layout.rails
            for level in range(self.n_levels):
                count = n_leaves if level == 0 else self.units[level]
                blocks += [(f"up{level}", count, self.uplinks[level], 0.0, level_class(level)),
                           (f"down{level}", count, self.uplinks[level], 0.0, level_class(level))]
        if self.nvl_fabric:
            rate = gpn * nic_rate(spec)
            blocks += [("hub_nvl", n, rate, fabric.nic_latency_s, "nvlink-fabric"),
                       ("nvl_hub", n, rate, 0.0, "nvlink-fabric")]
        if self.domain_nodes:
            rate = gpn * dom.gpu_link_bandwidth_bytes_per_s * dom.efficiency
            blocks += [("hub_dom", n, rate, dom.latency_s, "nvlink-domain"),
                       ("dom_hub", n, rate, 0.0, "nvlink-domain")]
        self._offset: dict[str, int] = {}
        self._blocks = blocks
        counts = np.array([b[1] for b in blocks], dtype=np.int64)
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
        for (name, *_), start in zip(blocks, starts):
            self._offset[name] = int(start)
        self._counts = counts
        self.n_links = int(counts.sum())
        self.link_classes: tuple[str, ...] = tuple(dict.fromkeys(b[4] for b in blocks))
        """Link classes; :attr:`link_class_id` indexes this tuple."""
        self._hub = self.server.hub
        # Every server link's global block offset and lane count, by template link index.
        tmpl = self.server
        self._t_offset = np.full(len(tmpl.links), -1, np.int64)
        self._t_lanes = np.ones(len(tmpl.links), np.int64)
        self._t_lane = np.zeros(len(tmpl.links), np.int64)
        for f in self._server_families:
            for lane, i in enumerate(f.links):
                self._t_offset[i] = self._offset[f.name]
                self._t_lanes[i] = len(f.links)
                self._t_lane[i] = lane

    # The per-link arrays of the NetworkModel interface: built on first use (a symmetric
    # evaluation never needs them, and at 262,144 GPUs they would hold millions of links).
    @cached_property
    def capacity_bytes_per_s(self) -> np.ndarray:
        """Capacity of each link (line rate x NCCL efficiency), bytes/s."""
        return np.repeat(np.array([b[2] for b in self._blocks], dtype=float), self._counts)

    @cached_property
    def latency_s(self) -> np.ndarray:
        """Hop latency charged on each link, seconds."""
        return np.repeat(np.array([b[3] for b in self._blocks], dtype=float), self._counts)

    @cached_property
    def link_class_id(self) -> np.ndarray:
        """Class of each link, as an index into :attr:`link_classes`."""
        return np.repeat(np.array([self.link_classes.index(b[4]) for b in self._blocks], dtype=np.int64),
                         self._counts)

    @property
    def gpus_per_server(self) -> int:
        """Endpoint stride of a server (the design's GPUs per node)."""
        return self.gpn

    def nic_links(self) -> np.ndarray:
        """Indices of the NIC <-> leaf links (what a per-message NIC overhead slows down)."""
        nic = [(self._offset[b], count) for b, count, *_ in self._blocks if b in ("nic_leaf", "leaf_nic")]
        return np.concatenate([np.arange(o, o + c) for o, c in nic]) if nic else np.zeros(0, np.int64)

    def server_links(self) -> int:
        """Links ``0 .. server_links() - 1`` each belong to one server (its GPU, PCIe and NIC links):
        only flows to or from that server cross them."""
        return int(sum(count for _, count, *_ in self._blocks[:len(self._server_families)]))

    def _global(self, server: np.ndarray, tlinks: np.ndarray) -> np.ndarray:
        """Global index of template links ``tlinks`` on servers ``server`` (same shapes)."""
        return self._t_offset[tlinks] + server * self._t_lanes[tlinks] + self._t_lane[tlinks]

    # ------------------------------------------------------------------ symmetry
    def families(self) -> dict[str, Family]:
        """Every block of links as a family of ``units x lanes`` (see :mod:`dpsim.network.loadmap`)."""
        return self._families

    @cached_property
    def _families(self) -> dict[str, Family]:
        out = {}
        for name, count, cap, _, cls in self._blocks:
            lanes = self._lanes(name)
            out[name] = Family(name=name, offset=self._offset[name], units=count // lanes, lanes=lanes,
                               capacity_bytes_per_s=cap, link_class=self.link_classes.index(cls),
                               nic=name in ("nic_leaf", "leaf_nic"))
        return out

    def _lanes(self, block: str) -> int:
        for f in self._server_families:
            if f.name == block:
                return len(f.links)
        if block in ("up0", "down0"):
            return self.layout.rails
        return 1

    @property
    def shared_server_links(self) -> bool:
        """Flows between servers cross links that flows inside a server use too (NVLink switch
        tiers and domains, PCIe trees): flows inside a server are then not independent of the others."""
        if self.nvl_fabric or self.domain_nodes or (not self.nic_kind and self.n_nodes > 1):
            return True
        return bool(self.nic_kind and self.server.shared_with_nic_paths)

    def server_network(self) -> TierNetwork:
        """One server of this design: its links between GPUs, nothing else."""
        if self.n_nodes == 1:
            return self
        from dataclasses import replace

        return TierNetwork(replace(self.topology, n_gpus=self.gpn, leaf_group_nodes=None, tier_group_sizes=None))

    def _template_loads(self, routes: np.ndarray, weights: np.ndarray) -> dict[str, np.ndarray]:
        """Per server family, the load of each lane when flows take ``routes`` (template links,
        ``-1`` padded) with ``weights``."""
        mask = routes >= 0
        w = np.broadcast_to(np.asarray(weights, float)[:, None], routes.shape)[mask]
        per_link = np.bincount(routes[mask], weights=w, minlength=len(self.server.links))
        return {f.name: per_link[list(f.links)] for f in self._server_families
                if per_link[list(f.links)].any()}

    def symmetric_loads(self, *, server: ServerFlows | None = None,
                        crossing: Sequence[CrossingFlows] = ()) -> LoadMap:
        """What every link carries when every server runs ``server`` and every pattern of
        ``crossing`` runs, counted with the same routes as :meth:`routes` (a test compares the two)."""
        fams: dict[str, FamilyLoad] = {}
        n = self.n_nodes
        if server is not None and len(server.src):
            src, dst = np.asarray(server.src), np.asarray(server.dst)
            w = np.broadcast_to(np.asarray(server.weight, float), src.shape)
            for name, row in self._template_loads(self.server.intra_routes(src, dst), w).items():
                fams[name] = FamilyLoad.uniform(n, row)
        if crossing:
            out = LoadMap(fams) + self._crossing_loads(crossing)
            return out
        return LoadMap(fams)

    def _crossing_loads(self, crossing: Sequence[CrossingFlows]) -> LoadMap:
        """Loads of patterns between servers: per server and per switch block, integer counts of
        pattern edges (:func:`numpy.bincount`), times per-lane loads of the servers' routes."""
        n = self.n_nodes
        rails = self.layout.rails
        tmpl = self.server
        node_cols: list[np.ndarray] = []                  # per-server counts
        node_terms: dict[str, list[tuple[int, np.ndarray]]] = {}
        level_cols: list[list[np.ndarray]] = [[] for _ in range(self.n_levels)]
        level_terms: list[dict[str, list[tuple[int, np.ndarray]]]] = [{} for _ in range(self.n_levels)]

        seen: dict[int, int] = {}  # one column per count array, however many families use it

        def column(cols: list[np.ndarray], col: np.ndarray) -> int:
            key = id(col)
            if key not in seen:
                seen[key] = len(cols)
                cols.append(col)
            return seen[key]

        def node_term(family: str, col: np.ndarray, lanes: np.ndarray) -> None:
            if not col.any() or not lanes.any():
                return
            node_terms.setdefault(family, []).append((column(node_cols, col), lanes))

        def route_terms(col: np.ndarray, routes: np.ndarray, w: float) -> None:
            for family, lanes in self._template_loads(routes, np.full(len(routes), w)).items():
                node_term(family, col, lanes)

        def level_term(level: int, family: str, col: np.ndarray, lanes: np.ndarray) -> None:
            if not col.any() or not lanes.any():
                return
            level_terms[level].setdefault(family, []).append((column(level_cols[level], col), lanes))

        for flows in crossing:
            a = np.asarray(flows.src_server)
            b = np.asarray(flows.dst_server)
            i = np.asarray(flows.src_local, dtype=np.int64)
            j = np.asarray(flows.dst_local, dtype=np.int64)
            w = float(flows.weight)
            if (a == b).any():
                raise ValueError("a crossing pattern joins two different servers on every edge")
            q = len(i)
            if self.nic_kind:
                via_nic = (self._domain_of(a) != self._domain_of(b)) if self.domain_nodes else None
            else:
                via_nic = np.zeros(len(a), dtype=bool)
            via_hub = ~via_nic if via_nic is not None else None
            if via_hub is not None and via_hub.any():
                ah, bh = a[via_hub], b[via_hub]
                out, inn = _server_counts(ah, n), _server_counts(bh, n)
                route_terms(out, tmpl.to_hub(i)[:, None], w)
                route_terms(inn, tmpl.from_hub(j)[:, None], w)
                hub_up, hub_down = ("hub_nvl", "nvl_hub") if self.nvl_fabric else ("hub_dom", "dom_hub")
                node_term(hub_up, out, np.array([q * w]))
                node_term(hub_down, inn, np.array([q * w]))
            nic_edges = np.ones(len(a), dtype=bool) if via_nic is None else via_nic
            if not self.nic_kind or not nic_edges.any():
                continue
            an, bn = (a, b) if via_nic is None else (a[nic_edges], b[nic_edges])
            out, inn = _server_counts(an, n), _server_counts(bn, n)
            s, t = tmpl.nic_of[i], tmpl.nic_of[j]
            route_terms(out, tmpl.out_routes(i), w)
            route_terms(inn, tmpl.in_routes(j), w)
            if not self.n_levels:
                continue
            ra = s if self.fabric.rail_optimized else np.zeros_like(s)
            rb = t if self.fabric.rail_optimized else np.zeros_like(t)
            same = ra == rb
            units0 = self.units[0]
            ga, gb = an // self.sizes[0], bn // self.sizes[0]
            differ = ga != gb
            if same.any():
                level_term(0, "up0", np.bincount(ga[differ], minlength=units0),
                           np.bincount(ra[same], minlength=rails) * w)
                level_term(0, "down0", np.bincount(gb[differ], minlength=units0),
                           np.bincount(rb[same], minlength=rails) * w)
            if (~same).any():  # another rail's leaf: up to the spine even within a leaf group
                level_term(0, "up0", np.bincount(ga, minlength=units0), np.bincount(ra[~same], minlength=rails) * w)
                level_term(0, "down0", np.bincount(gb, minlength=units0),
                           np.bincount(rb[~same], minlength=rails) * w)
            span = self.sizes[0]
            for level in range(1, self.n_levels):
                span *= self.sizes[level]
                ba, bb = an // span, bn // span
                differ = ba != bb
                level_term(level, f"up{level}", np.bincount(ba[differ], minlength=self.units[level]),
                           np.array([q * w]))
                level_term(level, f"down{level}", np.bincount(bb[differ], minlength=self.units[level]),
                           np.array([q * w]))
        fams: dict[str, FamilyLoad] = {}
        self._class_families(fams, node_cols, node_terms)
        for level in range(self.n_levels):
            self._class_families(fams, level_cols[level], level_terms[level])
        return LoadMap(fams)

    def symmetric_routes(self, *, server: ServerFlows | None = None,
                         crossing: Sequence[CrossingFlows] = ()) -> SymmetricRoutes:
        """The routes of :meth:`symmetric_loads`' flows in blocks (:class:`~dpsim.network.model.SymmetricRoutes`):
        the same routes as :meth:`routes`, server links by template, switch links by the
        arithmetic of :meth:`routes` on each pattern edge (a test compares the two)."""
        tmpl = self.server
        n = self.n_nodes
        blocks: list[RouteBlock] = []
        if server is not None and len(server.src):
            # One column per distinct (source, destination): flows on one route share its rate. Given
            # a weight per flow, flows of different weights (bytes) keep their own columns: they
            # finish at different times (:func:`~dpsim.network.maxmin.progressive_finish`).
            weight = np.broadcast_to(np.asarray(server.weight, dtype=float), np.shape(server.src)).tolist()
            pairs = list(zip(np.asarray(server.src).tolist(), np.asarray(server.dst).tolist(), weight))
            distinct = list(dict.fromkeys(pairs))
            index = {p: k for k, p in enumerate(distinct)}
            column = np.array([index[p] for p in pairs], dtype=np.int64)
            src, dst = (np.array(x, dtype=np.int64) for x in list(zip(*distinct))[:2])
            routes = tmpl.intra_routes(src, dst)
            mult = np.bincount(column, minlength=len(distinct)).astype(float)
            blocks.append(RouteBlock(kind="server", shape=(n, len(routes)), sides=(self._side(np.arange(n), routes),),
                                     multiplicity=None if (mult == 1).all() else mult, flow_column=column))
        for x, flows in enumerate(crossing):
            a = np.asarray(flows.src_server, dtype=np.int64)
            b = np.asarray(flows.dst_server, dtype=np.int64)
            i = np.asarray(flows.src_local, dtype=np.int64)
            j = np.asarray(flows.dst_local, dtype=np.int64)
            if (a == b).any():
                raise ValueError("a crossing pattern joins two different servers on every edge")
            q = len(i)
            if not self.nic_kind:
                via_nic = np.zeros(len(a), dtype=bool)
            elif self.domain_nodes:
                via_nic = self._domain_of(a) != self._domain_of(b)
            else:
                via_nic = np.ones(len(a), dtype=bool)
            if (~via_nic).any():
                ah, bh = a[~via_nic], b[~via_nic]
                hub_up, hub_down = ("hub_nvl", "nvl_hub") if self.nvl_fabric else ("hub_dom", "dom_hub")
                blocks.append(RouteBlock(
                    kind="crossing", shape=(len(ah), q),
                    sides=(self._side(ah, tmpl.to_hub(i)[:, None]), self._side(bh, tmpl.from_hub(j)[:, None])),
                    hops=((hub_up, ah[:, None], None), (hub_down, bh[:, None], None)),
                    pattern=x, edges=np.flatnonzero(~via_nic)))
            if not via_nic.any():
                continue
            an, bn = a[via_nic], b[via_nic]
            hops = []
            if self.n_levels:
                # As :meth:`routes`: up from the source's leaf, turning at the first common block.
                rails = self.layout.rails
                s, t = tmpl.nic_of[i], tmpl.nic_of[j]
                ra = s if self.fabric.rail_optimized else np.zeros_like(s)
                rb = t if self.fabric.rail_optimized else np.zeros_like(t)
                blk_a, blk_b = an // self.sizes[0], bn // self.sizes[0]
                unit_a = blk_a[:, None] * rails + ra[None, :]
                unit_b = blk_b[:, None] * rails + rb[None, :]
                climbing = unit_a != unit_b
                for level in range(self.n_levels):
                    if not climbing.any():
                        break
                    hops += [(f"up{level}", unit_a, climbing), (f"down{level}", unit_b, climbing)]
                    if level + 1 < len(self.sizes):
                        blk_a, blk_b = blk_a // self.sizes[level + 1], blk_b // self.sizes[level + 1]
                    else:
                        blk_a, blk_b = np.zeros_like(blk_a), np.zeros_like(blk_b)
                    climbing = climbing & (blk_a != blk_b)[:, None]
                    unit_a, unit_b = blk_a[:, None], blk_b[:, None]
            blocks.append(RouteBlock(
                kind="crossing", shape=(len(an), q),
                sides=(self._side(an, tmpl.out_routes(i)), self._side(bn, tmpl.in_routes(j))),
                hops=tuple(hops), pattern=x, edges=np.flatnonzero(via_nic)))
        return SymmetricRoutes(blocks=tuple(blocks), families=self.families())

    def _side(self, servers: np.ndarray, routes: np.ndarray) -> ServerSide:
        """Flows leaving or entering ``servers`` (a row each) by template ``routes`` (a row of
        template links per column, ``-1`` padded) as a :class:`~dpsim.network.model.ServerSide`."""
        fam_of, lane_of = self.server.lane_of
        used = sorted(set(routes[routes >= 0].tolist()))  # not np.unique: it imports numpy.ma
        links = tuple((self.server.families[fam_of[t]].name, int(lane_of[t])) for t in used)
        columns = np.array([(routes == t).any(axis=1) for t in used], dtype=bool).reshape(len(used), len(routes))
        return ServerSide(servers=servers, links=links, columns=columns)

    @staticmethod
    def _class_families(fams: dict[str, FamilyLoad], cols: list[np.ndarray],
                        terms: dict[str, list[tuple[int, np.ndarray]]]) -> None:
        """Units with the same counts in every column form one class (shared by the families
        of these columns); each family's table is its terms' counts times their lane loads."""
        if not cols:
            return
        rows, first, inverse, count = classify(cols)
        for family, parts in terms.items():
            table = sum(rows[:, k, None] * lanes[None, :] for k, lanes in parts)
            fams[family] = FamilyLoad(cls=inverse, table=table, count=count, first=first)

    # ------------------------------------------------------------------ naming
    def gpu_index(self, gpu: str) -> int:
        """Index ``node * gpus_per_node + local`` of a GPU id ``n{node}.gpu{local}``
        (``-1 - node`` for a server's hub ``n{node}.nvswitch``, an NVLS endpoint)."""
        m = _GPU_ID.match(gpu)
        if m is None:
            hub = _HUB_ID.match(gpu)
            if hub is None:
                raise ValueError(f"{gpu!r} is not a GPU of this topology")
            return -1 - int(hub.group(1))
        return int(m.group(1)) * self.gpn + int(m.group(2))

    def server_nic_links(self, node: int, nic: int) -> np.ndarray:
        """Indices of both directions of NIC ``nic``'s cable to its leaf on server ``node``
        (``n{node}.nic{nic} <-> leaf``; ``nic`` counts NIC nodes, multi-port NICs merged)."""
        if not self.nic_kind or not (0 <= node < self.n_nodes and 0 <= nic < self.layout.nic_nodes):
            raise IndexError(f"n{node}.nic{nic} is not a NIC with a leaf link here")
        k = node * self.layout.nic_nodes + nic
        return np.array([self._offset["nic_leaf"] + k, self._offset["leaf_nic"] + k], dtype=np.int64)

    def server_gpu_links(self, node: int, gpu: int) -> np.ndarray:
        """Indices of both directions of GPU ``gpu``'s links inside server ``node``: its NVLink/PCIe
        link to the hub (``n{node}.gpu{gpu} <-> n{node}.nvswitch`` or ``.pcie``) or, on tree and
        mesh layouts, every link that touches it (direct links and its PCIe link)."""
        if not (0 <= node < self.n_nodes and 0 <= gpu < self.gpn):
            raise IndexError(f"n{node}.gpu{gpu} is not a GPU here")
        tmpl = self.server
        name = f"gpu{gpu}"
        if tmpl.hub is not None:
            t = np.array([tmpl.to_hub([gpu])[0], tmpl.from_hub([gpu])[0]], np.int64)
        else:
            present = {i for f in self._server_families for i in f.links}
            t = np.array([i for i, link in enumerate(tmpl.links) if i in present and name in (link.src, link.dst)],
                         np.int64)
        return self._global(np.full(len(t), node), t)

    def uplink_bundles(self) -> list[tuple[str, int, int, int, int, int]]:
        """Every switch with links to the tier above: (its name, its up-link index, its down-link
        index, level, first and last server below it), leaves first. Each link stands for the bundle of
        parallel cables ECMP spreads over."""
        counts = {name: count for name, count, *_ in self._blocks}
        out = []
        for level in range(self.n_levels):
            span = int(np.prod(self.sizes[:level + 1]))
            for k in range(counts[f"up{level}"]):
                block = k // self.layout.rails if level == 0 else k
                out.append((self._name(f"up{level}", k)[0], self._offset[f"up{level}"] + k,
                            self._offset[f"down{level}"] + k, level, block * span,
                            min(self.n_nodes, (block + 1) * span) - 1))
        return out

    @property
    def between_server_classes(self) -> frozenset[str]:
        """Link classes only traffic between servers over NICs crosses: the NIC cables and the switch tiers
        (a class a server's own GPU links share, such as ``pcie``, is not among them)."""
        inside = {f.link_class for f in self._server_families if f.intra}
        nic = {f.link_class for f in self._server_families if not f.intra}
        tiers = {b[4] for b in self._blocks if b[0].startswith(("up", "down"))}
        return frozenset((nic - inside) | tiers)

    def class_links(self, link_class: str) -> np.ndarray:
        """Indices of every link of class ``link_class`` (empty when there is none)."""
        if link_class not in self.link_classes:
            return np.zeros(0, dtype=np.int64)
        return np.flatnonzero(self.link_class_id == self.link_classes.index(link_class))

    def link_name(self, link: int) -> tuple[str, str]:
        """The graph edge ``(u, v)`` of link index ``link``."""
        for name, count, *_ in self._blocks:
            off = self._offset[name]
            if off <= link < off + count:
                k = link - off
                return self._name(name, k)
        raise IndexError(link)

    def _name(self, block: str, k: int) -> tuple[str, str]:
        fam = next((f for f in self._server_families if f.name == block), None)
        if fam is not None:
            node, lane = divmod(k, len(fam.links))
            link = self.server.links[fam.links[lane]]
            if block in ("nic_leaf", "leaf_nic"):
                j = int(link.src[3:]) if block == "nic_leaf" else int(link.dst[3:])
                leaf = f"leaf{node // self.sizes[0]}.{j if self.fabric.rail_optimized else 0}"
                a = f"n{node}.nic{j}"
                return (a, leaf) if block == "nic_leaf" else (leaf, a)
            return f"n{node}.{link.src}", f"n{node}.{link.dst}"
        if block in ("hub_nvl", "nvl_hub"):
            a = f"n{k}.nvswitch"
            return (a, "nvl-spine") if block == "hub_nvl" else ("nvl-spine", a)
        if block in ("hub_dom", "dom_hub"):
            a, b = f"n{k}.nvswitch", f"nvl{self._domain_of(k)}"
            return (a, b) if block == "hub_dom" else (b, a)
        level = int(block[2:] if block.startswith("up") else block[4:])
        if level == 0:
            rails = self.layout.rails
            grp, r = divmod(k, rails)
            child = f"leaf{grp}.{r}"
            parent_block = grp // self.sizes[1] if len(self.sizes) > 1 else 0
        else:
            child = switch_name(level, k, self.n_levels, self.spec)
            parent_block = k // self.sizes[level + 1] if level + 1 < len(self.sizes) else 0
        parent = switch_name(level + 1, parent_block, self.n_levels, self.spec)
        return (child, parent) if block.startswith("up") else (parent, child)

    # ------------------------------------------------------------------ routing
    def routes(self, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Incidence ``(flow_of, link_of)`` of the fewest-hop routes from GPU indices ``src`` to ``dst``."""
        src = np.asarray(src, dtype=np.int64)
        dst = np.asarray(dst, dtype=np.int64)
        gpn, off = self.gpn, self._offset
        tmpl = self.server
        if (src < 0).any() or (dst < 0).any():
            return self._switch_routes(src, dst)
        a, i = np.divmod(src, gpn)
        b, j = np.divmod(dst, gpn)
        flows: list[np.ndarray] = []
        links: list[np.ndarray] = []

        def hop(mask: np.ndarray | None, link: np.ndarray) -> None:
            if mask is None:
                flows.append(np.arange(len(src)))
                links.append(link)
            else:
                idx = np.flatnonzero(mask)
                flows.append(idx)
                links.append(link[idx])

        def template(mask: np.ndarray, server: np.ndarray, routes: np.ndarray) -> None:
            idx = np.flatnonzero(mask)
            r = routes[idx]
            keep = r >= 0
            rows = np.broadcast_to(idx[:, None], r.shape)[keep]
            flows.append(rows)
            links.append(self._global(np.broadcast_to(server[idx][:, None], r.shape)[keep], r[keep]))

        same = a == b
        if self.nic_kind:
            via_nic = ~same
            if self.domain_nodes:
                via_nic = self._domain_of(a) != self._domain_of(b)
        else:
            via_nic = np.zeros(len(src), dtype=bool)
        via_hub = ~same & ~via_nic
        if same.any():
            template(same, a, tmpl.intra_routes(i, j))
        if via_hub.any():
            # Into an NVLink switch tier or domain through the server's hub.
            hop(via_hub, self._global(a, tmpl.to_hub(i)))
            hop(via_hub, self._global(b, tmpl.from_hub(j)))
            if self.nvl_fabric:
                hop(via_hub, off["hub_nvl"] + a)
                hop(via_hub, off["nvl_hub"] + b)
            else:
                hop(via_hub, off["hub_dom"] + a)
                hop(via_hub, off["dom_hub"] + b)
        if self.nic_kind and via_nic.any():
            template(via_nic, a, tmpl.out_routes(i))
            template(via_nic, b, tmpl.in_routes(j))
            s, t = tmpl.nic_of[i], tmpl.nic_of[j]
            rails = self.layout.rails
            ra = s if self.fabric.rail_optimized else 0
            rb = t if self.fabric.rail_optimized else 0
            blk_a, blk_b = a // self.sizes[0], b // self.sizes[0]
            unit_a, unit_b = blk_a * rails + ra, blk_b * rails + rb
            climbing = via_nic & (unit_a != unit_b)
            for level in range(self.n_levels):
                if not climbing.any():
                    break
                hop(climbing, off[f"up{level}"] + unit_a)
                hop(climbing, off[f"down{level}"] + unit_b)
                # Blocks of the next level up: the route turns at the first common one.
                if level + 1 < len(self.sizes):
                    blk_a, blk_b = blk_a // self.sizes[level + 1], blk_b // self.sizes[level + 1]
                else:
                    blk_a, blk_b = np.zeros_like(blk_a), np.zeros_like(blk_b)
                climbing = climbing & (blk_a != blk_b)
                unit_a, unit_b = blk_a, blk_b
        if not flows:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        return np.concatenate(flows), np.concatenate(links)

    def _switch_routes(self, src: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Routes where some endpoints are NVSwitch hubs (in-switch reduction, NVLS).

        An endpoint ``-1 - n`` is the hub of server ``n``: GPU -> hub uses the GPU's
        up-link only, hub -> GPU its down-link only. GPU -> GPU flows route as usual.
        """
        to_hub, from_hub = dst < 0, src < 0
        if (to_hub & from_hub).any():
            raise ValueError("a flow cannot go from a hub to a hub")
        if (to_hub & (src // self.gpn != -1 - dst)).any() or (from_hub & (dst // self.gpn != -1 - src)).any():
            raise ValueError("a GPU only reaches its own server's hub directly")
        if self.server.hub is None:
            raise ValueError(f"a {self.server.layout} server has no switch to reduce in")
        plain = ~(to_hub | from_hub)
        tmpl = self.server
        s_node, s_loc = np.divmod(src[to_hub], self.gpn)
        d_node, d_loc = np.divmod(dst[from_hub], self.gpn)
        parts_f = [np.flatnonzero(to_hub), np.flatnonzero(from_hub)]
        parts_l = [self._global(s_node, tmpl.to_hub(s_loc)), self._global(d_node, tmpl.from_hub(d_loc))]
        if plain.any():
            idx = np.flatnonzero(plain)
            f, l = self.routes(src[plain], dst[plain])
            parts_f.append(idx[f])
            parts_l.append(l)
        return np.concatenate(parts_f), np.concatenate(parts_l)

    def _indices(self, pairs: Sequence[tuple[str, str]]) -> tuple[np.ndarray, np.ndarray]:
        src = np.fromiter((self.gpu_index(s) for s, _ in pairs), dtype=np.int64, count=len(pairs))
        dst = np.fromiter((self.gpu_index(d) for _, d in pairs), dtype=np.int64, count=len(pairs))
        return src, dst

    # ------------------------------------------------------------------ evaluation
    def loads(self, src: np.ndarray, dst: np.ndarray, capacity: np.ndarray | None = None) -> LinkLoads:
        """Max-min rates of concurrent flows ``src[f] -> dst[f]`` (GPU indices), as arrays.

        ``capacity`` replaces the links' capacities (e.g. NIC links derated for small
        messages); default: the topology's.
        """
        flow_of, link_of = self.routes(src, dst)
        cap = self.capacity_bytes_per_s if capacity is None else capacity
        rates = max_min_sparse(flow_of, link_of, cap, len(src))
        latency = np.bincount(flow_of, weights=self.latency_s[link_of], minlength=len(src))
        return LinkLoads(rates_bytes_per_s=rates, latencies_s=latency, flow_of=flow_of,
                         link_of=link_of, n_links=self.n_links)

    def rates(self, pairs: Sequence[tuple[str, str]]) -> FlowRates:
        """Max-min fair rates of concurrent flows between named GPUs (tests, small checks)."""
        return describe_rates(self, self.loads(*self._indices(pairs)))

    def transfer(self, flows: Sequence[Flow]) -> TransferResult:
        """Run named ``flows`` together; rates re-shared max-min each time one finishes."""
        loads = self.loads(*self._indices([(f.src, f.dst) for f in flows]))
        return run_transfer(self, loads, [f.size_bytes for f in flows])


__all__ = ["TierNetwork"]
