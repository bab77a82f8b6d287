"""FlowNetwork: the flow model on any topology graph, routed by search.

Each flow follows one route through the directed topology graph (fewest hops; GPUs
are endpoints, never transit). Flows that share a link share it max-min fairly
(:mod:`dpsim.network.maxmin`). Any graph whose GPU nodes carry ``node`` and ``local``
(as :func:`dpsim.topology.graph.build_graph` writes them) is a full
:class:`~dpsim.network.model.NetworkModel`: the collectives run on it unchanged, one
Python search per route (fine for small clusters; :class:`~dpsim.network.tiers.TierNetwork`
routes dpsim's own fabrics by formula). The tests compare both route for route.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Sequence

import numpy as np

from dpsim.network.maxmin import max_min_sparse
from dpsim.network.model import (
    Flow,
    FlowRates,
    LinkLoads,
    TransferResult,
    describe_rates,
    run_transfer,
)

if TYPE_CHECKING:
    import networkx as nx

Edge = tuple[str, str]

_HUB_KINDS = ("nvswitch", "pcie")


class FlowNetwork:
    """A :class:`~dpsim.network.model.NetworkModel` over a directed graph.

    Parameters
    ----------
    graph : networkx.DiGraph
        Edges carry ``capacity_bytes_per_s``, ``latency_s`` and ``link_class``; GPU nodes
        ``kind="gpu"``, ``node`` and ``local``; a server's switch ``kind`` nvswitch/pcie and ``node``.
    gpus_per_server : int, optional
        Endpoint stride of a server (default: the largest ``local`` + 1).

    Examples
    --------
    >>> from dpsim.topology import Topology, load_preset
    >>> net = FlowNetwork(Topology(spec=load_preset("infiniband"), n_gpus=16).graph)
    >>> float(net.loads([0], [8]).rates_bytes_per_s[0]) > 0
    True
    """

    def __init__(self, graph: nx.DiGraph, gpus_per_server: int | None = None):
        self.graph = graph
        self._edges: list[Edge] = list(graph.edges)
        self._edge_index = {e: i for i, e in enumerate(self._edges)}
        self.n_links = len(self._edges)
        data = [graph.edges[e] for e in self._edges]
        self.capacity_bytes_per_s = np.array([d.get("capacity_bytes_per_s", np.inf) for d in data], dtype=float)
        self.latency_s = np.array([d.get("latency_s", 0.0) for d in data], dtype=float)
        classes = [d.get("link_class", "") for d in data]
        self.link_classes = tuple(dict.fromkeys(classes))
        self.link_class_id = np.array([self.link_classes.index(c) for c in classes], dtype=np.int64)
        gpus = [(d["node"], d["local"], v) for v, d in graph.nodes(data=True)
                if d.get("kind") == "gpu" and "node" in d and "local" in d]
        self.gpus_per_server = gpus_per_server or (max(loc for _, loc, _ in gpus) + 1 if gpus else 1)
        self._name_of: dict[int, str] = {n * self.gpus_per_server + loc: v for n, loc, v in gpus}
        for v, d in graph.nodes(data=True):
            if d.get("kind") in _HUB_KINDS and "node" in d and str(v).endswith("." + d["kind"]):
                self._name_of[-1 - d["node"]] = v
        self._index_of = {v: k for k, v in self._name_of.items()}
        self._routes: dict[Edge, tuple[Edge, ...]] = {}

    # ------------------------------------------------------------------ naming
    def endpoint_name(self, endpoint: int) -> str:
        """Graph node of an endpoint index."""
        try:
            return self._name_of[int(endpoint)]
        except KeyError:
            raise ValueError(f"endpoint {endpoint} is not a GPU or server switch of this graph") from None

    def endpoint_index(self, node: str) -> int:
        """Endpoint index of a GPU (or server switch) node."""
        try:
            return self._index_of[node]
        except KeyError:
            raise ValueError(f"{node!r} is not a GPU or server switch of this graph") from None

    def link_name(self, link: int) -> tuple[str, str]:
        """The graph edge of a link index."""
        return self._edges[int(link)]

    def nic_links(self) -> np.ndarray:
        """Edges between a NIC and the switch it plugs into."""
        kind = lambda v: self.graph.nodes[v].get("kind")  # noqa: E731
        return np.array([i for i, (u, v) in enumerate(self._edges)
                         if (kind(u) == "nic") != (kind(v) == "nic") and {kind(u), kind(v)} - {"nic", "pcie"}],
                        dtype=np.int64)

    # No symmetry is assumed on an arbitrary graph: collectives evaluate every flow.
    def families(self) -> None:
        """No link families on an arbitrary graph."""
        return None

    def server_network(self) -> None:
        """No server is known to stand for the others on an arbitrary graph."""
        return None

    @property
    def shared_server_links(self) -> bool:
        """Unknown on an arbitrary graph: assume shared."""
        return True

    def symmetric_loads(self, *, server=None, crossing=()) -> None:
        """No symmetric counting on an arbitrary graph."""
        return None

    def symmetric_routes(self, *, server=None, crossing=()) -> None:
        """No symmetric routing on an arbitrary graph."""
        return None

    # ------------------------------------------------------------------ routing
    def route(self, src: str, dst: str) -> tuple[Edge, ...]:
        """Fewest-hop path from ``src`` to ``dst`` as directed edges (GPUs never transit)."""
        key = (src, dst)
        if key in self._routes:
            return self._routes[key]
        g = self.graph
        parent: dict[str, str | None] = {src: None}
        queue = deque([src])
        while queue and dst not in parent:
            u = queue.popleft()
            if u != src and g.nodes[u].get("kind") == "gpu":
                continue
            for v in g.successors(u):
                if v not in parent:
                    parent[v] = u
                    queue.append(v)
        if dst not in parent:
            import networkx as nx  # here: importing networkx is ~0.15 s that no route found needs

            raise nx.NetworkXNoPath(f"no route from {src} to {dst}")
        path: list[Edge] = []
        v = dst
        while parent[v] is not None:
            path.append((parent[v], v))
            v = parent[v]
        route = tuple(reversed(path))
        self._routes[key] = route
        return route

    def _incidence(self, pairs: Sequence[tuple[str, str]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        routes = [self.route(s, d) for s, d in pairs]
        lengths = np.fromiter((len(r) for r in routes), dtype=np.int64, count=len(routes))
        flow_of = np.repeat(np.arange(len(routes)), lengths)
        link_of = np.fromiter((self._edge_index[e] for r in routes for e in r), dtype=np.int64,
                              count=int(lengths.sum()))
        latency = np.bincount(flow_of, weights=self.latency_s[link_of], minlength=len(routes))
        return flow_of, link_of, latency

    def loads(self, src, dst, capacity: np.ndarray | None = None) -> LinkLoads:
        """Max-min rates of concurrent flows between endpoint indices (NetworkModel)."""
        pairs = [(self.endpoint_name(s), self.endpoint_name(d)) for s, d in zip(np.asarray(src), np.asarray(dst))]
        return self._loads(pairs, capacity)

    def _loads(self, pairs: Sequence[tuple[str, str]], capacity: np.ndarray | None = None) -> LinkLoads:
        flow_of, link_of, latency = self._incidence(pairs)
        cap = self.capacity_bytes_per_s if capacity is None else capacity
        rates = max_min_sparse(flow_of, link_of, cap, len(pairs))
        return LinkLoads(rates_bytes_per_s=rates, latencies_s=latency, flow_of=flow_of, link_of=link_of,
                         n_links=self.n_links)

    # ------------------------------------------------------------------ named flows
    def rates(self, pairs: Sequence[tuple[str, str]]) -> FlowRates:
        """Max-min fair rates of concurrent flows between named nodes (any graph)."""
        return describe_rates(self, self._loads(pairs))

    def transfer(self, flows: Sequence[Flow]) -> TransferResult:
        """Run named ``flows`` together; rates are re-shared max-min each time one finishes."""
        return run_transfer(self, self._loads([(f.src, f.dst) for f in flows]), [f.size_bytes for f in flows])
