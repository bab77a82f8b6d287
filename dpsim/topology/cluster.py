"""A cluster: a design instantiated with a number of GPUs, and its representative slice.

Every node is identical, so a small *representative* slice of the cluster (two leaf
groups of two nodes, uplink capacities kept from the full design) has every kind of link
the whole cluster has: :meth:`Topology.check_connected` checks it instead of the whole
graph. Collectives do not need a graph at all: they are costed by symmetry on the whole
cluster's numbering (:mod:`dpsim.collectives.symmetric`, :mod:`dpsim.network.tiers`).
:attr:`Topology.graph` builds the whole cluster when a caller wants it (tests compare).
"""

from __future__ import annotations

import math
from dataclasses import replace
from functools import cached_property
from typing import TYPE_CHECKING

from dpsim.errors import TopologyError
from dpsim.frozen import frozen_dataclass
from dpsim.topology.fabric import design_group_sizes, level_units, nic_layout
from dpsim.topology.graph import Reach, build_graph, gpu_id
from dpsim.topology.server import with_gpus_per_node
from dpsim.topology.spec import TopologySpec, nic_fabric, nvlink_fabric

if TYPE_CHECKING:
    import networkx as nx


@frozen_dataclass
class Topology:
    """A cluster: a :class:`TopologySpec` instantiated with a number of GPUs."""

    spec: TopologySpec
    """The design."""
    n_gpus: int
    """Total GPUs (a multiple of ``spec.node.gpus_per_node``)."""
    leaf_group_nodes: int | None = None
    """Nodes per leaf group in *this* graph when it is a representative slice
    (``None``: the design's ``nodes_per_leaf``)."""
    tier_group_sizes: tuple[int, ...] | None = None
    """Units per block of each switch tier in *this* graph when it is a representative
    slice (``None``: the design's ``fabric.tiers`` group sizes)."""

    def __post_init__(self) -> None:
        gpn = self.spec.node.gpus_per_node
        if self.n_gpus <= 0:
            raise TopologyError(f"--gpus: {self.n_gpus} is not valid; expected an integer >= 1")
        if self.n_gpus > gpn and self.n_gpus % gpn:
            raise TopologyError(
                f"--gpus: {self.n_gpus} is not a multiple of --gpus-per-node={gpn}; "
                f"use a multiple (e.g. {math.ceil(self.n_gpus / gpn) * gpn}) or change --gpus-per-node"
            )
        domain = self.spec.nvlink_domain
        within_domain = domain is not None and self.n_gpus <= domain.nodes * gpn
        if self.n_gpus > gpn and self.spec.fabric is None and not within_domain:
            raise TopologyError(
                f"--gpus: {self.n_gpus} GPUs need more than one node, but topology "
                f"{self.spec.name!r} has no fabric between nodes"
            )

    @classmethod
    def from_spec(cls, spec: TopologySpec, n_gpus: int, gpus_per_node: int | None = None) -> Topology:
        """Instantiate ``spec`` with ``n_gpus`` GPUs, optionally overriding GPUs per node."""
        if gpus_per_node is not None:
            if gpus_per_node <= 0:
                raise TopologyError(f"--gpus-per-node: {gpus_per_node} is not valid; expected an integer >= 1")
            fabric = spec.fabric
            gpn = spec.node.gpus_per_node
            if nic_fabric(fabric) and fabric.nics_per_node > gpn:
                # Several NIC ports per GPU: keep the ports per GPU.
                fabric = replace(fabric, nics_per_node=gpus_per_node * (fabric.nics_per_node // gpn))
            elif nic_fabric(fabric) and gpus_per_node % fabric.nics_per_node:
                fabric = replace(fabric, nics_per_node=math.gcd(gpus_per_node, fabric.nics_per_node))
            spec = replace(spec, node=with_gpus_per_node(spec.node, gpus_per_node), fabric=fabric)
        return cls(spec=spec, n_gpus=n_gpus)

    @property
    def gpus_per_node(self) -> int:
        """GPUs per server actually used (a single partial node may use fewer)."""
        return min(self.spec.node.gpus_per_node, self.n_gpus)

    @property
    def n_nodes(self) -> int:
        """Number of servers."""
        return math.ceil(self.n_gpus / self.spec.node.gpus_per_node)

    @property
    def single_nvlink_domain(self) -> bool:
        """Every GPU in one NVLink domain: one server, an NVLink switch tier joining the servers,
        or an ``nvlink_domain`` holding all of them."""
        domain = self.spec.nvlink_domain
        return (self.n_nodes == 1 or nvlink_fabric(self.spec.fabric)
                or (domain is not None and domain.holds(self.n_nodes)))

    @property
    def crosses_nics(self) -> bool:
        """Collectives of all the GPUs cross NICs (not one server, not one NVLink domain)."""
        return self.n_nodes > 1 and nic_fabric(self.spec.fabric) and not self.single_nvlink_domain

    @property
    def channels(self) -> int:
        """Parallel rings NCCL builds across nodes: one per NIC of a node, else one."""
        if self.n_nodes == 1 or not nic_fabric(self.spec.fabric):
            return 1
        return nic_layout(self.spec).nic_nodes

    def _graph(self, n_nodes: int, group: int | None, into: Reach | None = None) -> nx.DiGraph | Reach:
        g = build_graph(self.spec, n_nodes, leaf_groups_of=group, tier_groups_of=self.tier_group_sizes, into=into)
        if self.n_gpus < self.spec.node.gpus_per_node:
            g.remove_nodes_from([gpu_id(0, k) for k in range(self.n_gpus, self.spec.node.gpus_per_node)])
        return g

    @cached_property
    def graph(self) -> nx.DiGraph:
        """The whole cluster's graph (large for big clusters: prefer :attr:`representative`)."""
        return self._graph(self.n_nodes, self.leaf_group_nodes)

    @cached_property
    def representative(self) -> Topology:
        """A small cluster with every kind of link of this one (for connectivity checks).

        One node stays one node; nodes under one leaf become two nodes; several leaf
        groups become two groups of two nodes (multi-tier: two units at the highest level
        that has several, each of two units of every level below); uplink capacities keep
        the full design's.
        """
        if self.n_nodes == 1:
            return self
        fabric = self.spec.fabric
        domain = self.spec.nvlink_domain
        if domain is not None:
            # Domains and leaf groups partition servers independently: two of the larger of the
            # two, with the design's group sizes (every kind of link, not the whole cluster).
            span = max(domain.nodes, fabric.nodes_per_leaf if fabric is not None else 1)
            n_nodes = min(self.n_nodes, 2 * span)
            if n_nodes == self.n_nodes:
                return self
            return Topology(spec=self.spec, n_gpus=n_nodes * self.spec.node.gpus_per_node)
        assert fabric is not None
        if fabric.tiers:
            # Multi-tier: two units at the highest level that has several, each of two
            # (or the design's fewer) units of every level below (see network/fabric.py).
            sizes = design_group_sizes(self.spec)
            units = level_units(self.n_nodes, sizes)
            multi = [lvl for lvl, u in enumerate(units) if u > 1]
            if not multi:
                return Topology(spec=self.spec, n_gpus=min(2, self.n_nodes) * self.spec.node.gpus_per_node)
            small = [min(2, s) for s in sizes[:multi[-1] + 1]]
            n_nodes = 2 * math.prod(small)
            if n_nodes >= self.n_nodes:
                return self
            return Topology(spec=self.spec, n_gpus=n_nodes * self.spec.node.gpus_per_node,
                            leaf_group_nodes=small[0], tier_group_sizes=tuple(small[1:]) or None)
        multi_group = self.n_nodes > fabric.nodes_per_leaf
        n_nodes = 4 if multi_group else 2
        return Topology(spec=self.spec, n_gpus=n_nodes * self.spec.node.gpus_per_node,
                        leaf_group_nodes=2 if multi_group else None)

    @cached_property
    def representative_graph(self) -> nx.DiGraph:
        """Graph of :attr:`representative` (the whole graph when it is the cluster itself)."""
        return self.representative.graph

    def gpu_ids(self, graph: nx.DiGraph | Reach | None = None) -> list[str]:
        """GPU node ids in ring order: node by node, local index within a node."""
        g = self.graph if graph is None else graph
        gpus = [(d["node"], d["local"], v) for v, d in g.nodes(data=True) if d["kind"] == "gpu"]
        return [v for _, _, v in sorted(gpus)]

    def check_connected(self) -> None:
        """Raise :class:`TopologyError` if some GPU cannot reach another one (checked once per
        representative slice in a process: a sweep checks each design once, not each point)."""
        slice_ = self.representative
        key = (build_graph, slice_.spec, slice_.n_gpus, slice_.leaf_group_nodes, slice_.tier_group_sizes)
        if key in _CONNECTED:
            return
        # Not kept (checked once), and walked without networkx (see Reach).
        g = slice_._graph(slice_.n_nodes, slice_.leaf_group_nodes, into=Reach())
        gpus = self.gpu_ids(g)
        reach = g.descendants(gpus[0]) | {gpus[0]}
        missing = [v for v in gpus if v not in reach]
        if missing:
            raise TopologyError(
                f"topology {self.spec.name!r}: GPU {missing[0]} has no path to {gpus[0]}; "
                "check node.interconnect and fabric"
            )
        _CONNECTED.add(key)


_CONNECTED: set[tuple] = set()
"""Representative slices already found connected."""
