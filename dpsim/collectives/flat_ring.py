"""Collective algorithms (the "system" layer) built on the network model.

Ring all-reduce is reduce-scatter followed by all-gather: 2(N-1) steps in which every
rank sends S/N bytes (split over the ring's channels) to its successor. NCCL builds one
ring per NIC of a node ("channels"), each ring visiting the GPUs of a node over
NVLink/PCIe and leaving the node through its own NIC.

Every ring step of a homogeneous cluster loads the links identically, so the step is
evaluated *once*, on the topology's representative slice, by the network model (routed
paths, max-min sharing of all channels' concurrent flows). That gives the slowest
flow's rate and each hop's latency; the full collective then costs

    T = base + (steps/N) * sum of hop latencies around the ring + steps * (S/(N*k)) / r

with k channels and r the slowest flow's rate. On a ring of N identical hops of
latency a and per-rank bandwidth B = k*r this is the textbook
2(N-1)a + 2(N-1)/N * S/B for all-reduce. The latency term follows a chunk around the
ring as NCCL's own tuning model does (src/graph/tuning.cc: (nsteps - nInterSteps) *
intraLat + nInterSteps * interLat), rather than charging the slowest hop at every step.

nccl-tests conventions (algbw = S/T; busbw = algbw * 2(N-1)/N for all-reduce, *(N-1)/N
for reduce-scatter and all-gather, *1 for broadcast; GB = 1e9) are in
:class:`CollectiveResult`.

This flat-ring model is one :class:`CollectiveModel`; ``predict`` uses
:class:`dpsim.algorithms.nccl.NcclCollectives` by default, which costs NCCL's ring,
double binary tree, NVLS and NVLS tree (plus hierarchical and halving-doubling on
request) on the whole cluster and picks the fastest per call, as NCCL does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

from dpsim.collectives.ops import (
    BROADCAST_SLICE_BYTES,
    CollectiveResult,
    bus_factor,
    ring_steps,
)
from dpsim.errors import ConfigError
from dpsim.network import Flow, NetworkModel, TierNetwork
from dpsim.topology.cluster import Topology
from dpsim.topology.graph import gpu_id


def ring_orders(topology: Topology, graph=None) -> list[list[str]]:
    """One ring per channel over the GPUs of ``graph`` (default: the whole cluster).

    Channel *c* visits each node's GPUs starting at local index *c* and leaves the node
    towards the next one, so consecutive channels start on different GPUs and, with
    one NIC per GPU, leave through different NICs.
    """
    by_node: dict[int, list[str]] = {}
    if graph is None:
        # Same order as the graph's GPUs (node-major, local index), without building it.
        for n in range(topology.n_nodes):
            by_node[n] = [gpu_id(n, k) for k in range(topology.gpus_per_node)]
    else:
        for v in topology.gpu_ids(graph):
            by_node.setdefault(graph.nodes[v]["node"], []).append(v)
    rings = []
    for c in range(topology.channels):
        ring = []
        for node in sorted(by_node):
            local = by_node[node]
            shift = c % len(local)
            ring.extend(local[shift:] + local[:shift])
        rings.append(ring)
    return rings


def ring_pairs(rings: list[list[str]]) -> list[tuple[str, str]]:
    """Successor pairs of every ring (all concurrent within one step)."""
    return [(r[i], r[(i + 1) % len(r)]) for r in rings for i in range(len(r)) if len(r) > 1]


@dataclass(frozen=True, kw_only=True)
class RingProfile:
    """What one ring step costs on a topology, found once with the network model."""

    channels: int
    """Concurrent rings k."""
    flow_rate_bytes_per_s: float
    """Max-min rate of the slowest flow while every channel's step runs at once."""
    intra_hop_latency_s: float
    """Latency of a hop between GPUs of one node."""
    inter_hop_latency_s: float
    """Latency of a hop that leaves the node."""
    bottleneck_links: tuple[tuple[str, str, str], ...]
    """(source, target, link class) of the links that limit the slowest flow."""

    @property
    def bandwidth_bytes_per_s(self) -> float:
        """Per-rank ring bandwidth B = k * r (what busbw tends to for large S)."""
        return self.channels * self.flow_rate_bytes_per_s


class RingCollectives:
    """Ring algorithms for every op, on a topology, through a network model."""

    def __init__(self, topology: Topology, network: NetworkModel | None = None):
        self.topology = topology
        self.n_ranks = topology.n_gpus
        rep = topology.representative
        # TierNetwork routes dpsim's topologies by formula: the same routes and sharing as
        # FlowNetwork(rep.graph), without building the graph (tests compare both).
        self.network = network if network is not None else TierNetwork(rep)
        self._rings = ring_orders(rep)

    @cached_property
    def profile(self) -> RingProfile:
        """The ring step on the representative slice, evaluated once."""
        pairs = ring_pairs(self._rings)
        if not pairs:
            return RingProfile(channels=1, flow_rate_bytes_per_s=math.inf, intra_hop_latency_s=0.0,
                               inter_hop_latency_s=0.0, bottleneck_links=())
        rates = self.network.rates(pairs)
        slowest = float(rates.rates_bytes_per_s.min())
        node = _server_of
        intra = [lat for (s, d), lat in zip(pairs, rates.latencies_s) if node(s) == node(d)]
        inter = [lat for (s, d), lat in zip(pairs, rates.latencies_s) if node(s) != node(d)]
        classes = rates.link_class
        if classes is None:
            g = self.topology.representative_graph
            classes = {e: g.edges[e]["link_class"] for e in rates.link_flows}
        # A link limits the slowest flow when its fair share equals that flow's rate.
        bottlenecks = tuple(
            (u, v, classes[(u, v)])
            for (u, v), n in rates.link_flows.items()
            if rates.link_capacity_bytes_per_s[(u, v)] / n <= slowest * (1 + 1e-9)
        )
        return RingProfile(
            channels=len(self._rings),
            flow_rate_bytes_per_s=slowest,
            intra_hop_latency_s=max(intra, default=0.0),
            inter_hop_latency_s=max(inter, default=0.0),
            bottleneck_links=bottlenecks,
        )

    def ring_latency_s(self, hops: float) -> float:
        """Latency of a chunk travelling ``hops`` hops around the full ring."""
        n, nodes = self.n_ranks, self.topology.n_nodes
        p = self.profile
        inter_hops = nodes if nodes > 1 else 0
        per_lap = (n - inter_hops) * p.intra_hop_latency_s + inter_hops * p.inter_hop_latency_s
        return per_lap * hops / n

    def time(self, op: str, size_bytes: float) -> CollectiveResult:
        """Cost of ``op`` on ``size_bytes`` over all ranks of the topology."""
        n = self.n_ranks
        bus_factor(op, n)
        if size_bytes < 0 or not math.isfinite(size_bytes):
            raise ConfigError(f"size: {size_bytes!r} is not a non-negative finite number of bytes")
        if n == 1 or size_bytes == 0:
            return CollectiveResult(op=op, algorithm="ring", n_ranks=n, size_bytes=size_bytes,
                                    time_s=0.0, latency_s=0.0)
        p = self.profile
        base = self.topology.spec.collective_base_latency_s
        if op == "broadcast":
            # Pipelined chain: the root's data flows through N-1 hops in slices.
            slices = max(1, math.ceil(size_bytes / (BROADCAST_SLICE_BYTES * p.channels)))
            latency = base + self.ring_latency_s(n - 1)
            per_slice = size_bytes / (slices * p.bandwidth_bytes_per_s)
            transfer = (slices + n - 2) * per_slice
        else:
            steps = ring_steps(op, n)
            latency = base + self.ring_latency_s(steps)
            transfer = steps * (size_bytes / n) / p.bandwidth_bytes_per_s
        return CollectiveResult(op=op, algorithm="ring", n_ranks=n, size_bytes=size_bytes,
                                time_s=latency + transfer, latency_s=latency)


def _server_of(gpu: str) -> int:
    """Server index of a GPU id ``n{node}.gpu{local}``."""
    return int(gpu[1:gpu.index(".")])


def ring_schedule(op: str, size_bytes: float, rings: list[list[str]]) -> list[list[Flow]]:
    """The explicit ring schedule: for each step, every flow it moves.

    Used to check the fast path and invariants (bytes conserved) on small clusters.
    Broadcast is given unpipelined (one message forwarded hop by hop per channel).
    """
    n, k = len(rings[0]), len(rings)
    if op == "broadcast":
        steps = []
        for hop in range(n - 1):
            steps.append([Flow(src=r[hop], dst=r[hop + 1], size_bytes=size_bytes / k) for r in rings])
        return steps
    chunk = size_bytes / (n * k)
    return [
        [Flow(src=s, dst=d, size_bytes=chunk) for s, d in ring_pairs(rings)]
        for _ in range(ring_steps(op, n))
    ]
