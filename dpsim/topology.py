"""Cluster topologies as networkx graphs, and their YAML description.

A topology file (see ``topologies/*.yaml`` and ``topologies/README.md``) describes a
*homogeneous* cluster: identical nodes of ``gpus_per_node`` GPUs joined inside the node
by NVSwitch or PCIe and across nodes by NICs on a leaf/spine fabric. :func:`build_graph`
turns it into a directed graph whose nodes are GPUs, NICs and switches and whose edges
(two per full-duplex link) carry ``capacity_bytes_per_s`` (what NCCL can drive through the
link: line rate times protocol efficiency), ``latency_s`` and ``link_class``.

Because every node is identical, collectives only need a *representative* slice of the
cluster (two leaf groups of two nodes) to find the per-link load pattern; uplink
capacities keep the values of the full cluster. :meth:`Topology.graph` builds the whole
cluster when a caller wants it (tests compare both).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Any

import networkx as nx

from dpsim.errors import ConfigError, TopologyError
from dpsim.yamlfile import load_yaml_text, read_yaml_file
from dpsim.hardware import GPU_PRESETS, get_gpu
from dpsim.network.fabric import add_switch_fabric, design_group_sizes, nic_layout
from dpsim.units import GB, US, gbit_per_s_to_bytes_per_s

INTRA_NODE_KINDS = ("nvswitch", "pcie")
FABRIC_KINDS = ("infiniband", "ethernet", "nvlink")


@dataclass(frozen=True, kw_only=True)
class NodeSpec:
    """What is inside one server."""

    gpus_per_node: int
    """GPUs in one server."""
    interconnect: str
    """How GPUs in a node talk: ``nvswitch`` (NVLink to an NVSwitch) or ``pcie`` (through the host)."""
    gpu_link_bandwidth_bytes_per_s: float
    """Line rate of one GPU's NVLink (aggregate) or PCIe link, per direction, bytes/s."""
    gpu_link_efficiency: float
    """Fraction of that line rate NCCL achieves (protocol overhead)."""
    gpu_link_latency_s: float
    """Per-hop latency of a ring step over this link (NCCL's hwLat model)."""
    pcie_bandwidth_bytes_per_s: float
    """GPU-to-NIC PCIe bandwidth per direction, bytes/s."""
    nvls: bool | None = None
    """NVLink SHARP (in-switch reduction) available: ``None`` = decide from the GPU
    (NVSwitch systems of compute capability 9.0 and later, see :mod:`dpsim.algorithms.nccl`)."""


@dataclass(frozen=True, kw_only=True)
class FabricSpec:
    """The network between nodes."""

    kind: str
    """``infiniband``, ``ethernet`` or ``nvlink`` (an NVLink switch domain spanning nodes)."""
    nics_per_node: int
    """Network interfaces per node (``nvlink``: ignored, GPUs attach directly)."""
    nic_bandwidth_bytes_per_s: float
    """Line rate of one NIC (or, for ``nvlink``, one GPU's NVLink), per direction, bytes/s."""
    nic_efficiency: float
    """Fraction of the line rate a collective achieves."""
    nic_latency_s: float
    """Per-hop latency of a ring step that crosses the network."""
    nodes_per_leaf: int
    """Nodes under one leaf switch (per rail when rail-optimised)."""
    oversubscription: float
    """Leaf down-link to up-link bandwidth ratio (1 = non-blocking)."""
    rail_optimized: bool
    """NIC *j* of every node goes to rail *j*'s leaf, rather than all NICs of a node to one leaf."""
    tiers: tuple[TierSpec, ...] = ()
    """Switch tiers above the leaves, bottom-up (empty: one spine tier joins every leaf)."""
    nic_message_overhead_s: float = 0.0
    """NIC time per message (LogGP's gap *g*), seconds: messages of c bytes through a port of
    rate r run at r / (1 + g r / c)."""


@dataclass(frozen=True, kw_only=True)
class TierSpec:
    """One switch tier above the leaves of a multi-tier fat tree."""

    group_size: int
    """Units of the tier below (leaf groups, then pods...) under one switch block of this tier."""
    oversubscription: float
    """A block's down-link to up-link bandwidth ratio (1 = non-blocking)."""


@dataclass(frozen=True, kw_only=True)
class NvlinkDomainSpec:
    """An NVLink switch tier joining the NVSwitches of several nodes (NVL72-like)."""

    nodes: int
    """Nodes per NVLink domain."""
    gpu_link_bandwidth_bytes_per_s: float
    """Line rate of one GPU into the NVLink switch tier, per direction, bytes/s."""
    efficiency: float
    """Fraction of that line rate NCCL achieves."""
    latency_s: float
    """Per-hop latency of a step that crosses the NVLink switch tier."""


@dataclass(frozen=True, kw_only=True)
class TopologySpec:
    """A whole homogeneous cluster design, as a topology YAML file describes it."""

    name: str
    """Preset key or file stem."""
    description: str
    """One line for humans."""
    gpu: str
    """Default GPU preset (see :mod:`dpsim.hardware`)."""
    node: NodeSpec
    """One server."""
    fabric: FabricSpec | None
    """Inter-node network; ``None`` for single-node systems."""
    collective_base_latency_s: float
    """Fixed cost of launching one collective (NCCL's baseLat), seconds."""
    sources: tuple[str, ...] = ()
    """Citations for the numbers."""
    nvlink_domain: NvlinkDomainSpec | None = None
    """NVLink switch tier spanning several nodes (with a NIC ``fabric`` between domains)."""
    launch_overhead_s: float = 0.0
    """Per-collective host/launch overhead on top of NCCL's modelled latency, seconds."""


# ----------------------------------------------------------------------------- YAML


_NODE_KEYS = {
    "gpus_per_node": "int>0",
    "interconnect": "one of " + "|".join(INTRA_NODE_KINDS),
    "gpu_link_gbyte_per_s": "number>0",
    "gpu_link_efficiency": "number in (0, 1]",
    "gpu_link_latency_us": "number>=0",
    "pcie_gbyte_per_s": "number>0",
    "nvls": "true|false",
}
_FABRIC_KEYS = {
    "kind": "one of " + "|".join(FABRIC_KINDS),
    "nics_per_node": "int>0",
    "nic_gbit_per_s": "number>0",
    "nic_efficiency": "number in (0, 1]",
    "nic_latency_us": "number>=0",
    "nodes_per_leaf": "int>0",
    "oversubscription": "number>=1",
    "rail_optimized": "true|false",
    "tiers": "a list of tier mappings (group_size, oversubscription)",
    "nic_message_overhead_us": "number>=0",
}
_TIER_KEYS = {
    "group_size": "int>0",
    "oversubscription": "number>=1",
}
_NVLINK_DOMAIN_KEYS = {
    "nodes": "int>0",
    "gpu_link_gbyte_per_s": "number>0",
    "gpu_link_efficiency": "number in (0, 1]",
    "gpu_link_latency_us": "number>=0",
}
_TOP_KEYS = {
    "name": "string",
    "description": "string",
    "gpu": "GPU preset name",
    "sources": "list of strings",
    "node": "mapping",
    "fabric": "mapping or null",
    "collective_base_latency_us": "number>=0",
    "launch_overhead_us": "number>=0",
    "nvlink_domain": "mapping or null",
}


class _Reader:
    """Strict reader of one YAML mapping: every error names the field path."""

    def __init__(self, origin: str, path: str, data: Any, allowed: dict[str, str]):
        self.origin, self.path, self.allowed = origin, path, allowed
        if not isinstance(data, dict):
            self.fail(path or "(top level)", data, "a mapping of keys")
        unknown = sorted(set(map(str, data)) - set(allowed))
        if unknown:
            raise TopologyError(
                f"{origin}: {self._field(unknown[0])}: unknown key; "
                f"allowed keys: {', '.join(allowed)}"
            )
        self.data = data

    def _field(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def fail(self, key: str, value: Any, allowed: str) -> None:
        raise TopologyError(f"{self.origin}: {key}: {value!r} is not valid; expected {allowed}")

    def get(self, key: str, default: Any = ...) -> Any:
        if key not in self.data:
            if default is ...:
                raise TopologyError(
                    f"{self.origin}: {self._field(key)}: missing; expected {self.allowed[key]}"
                )
            return default
        return self.data[key]

    def number(self, key: str, *, minimum: float = 0.0, strict: bool = False,
               maximum: float | None = None, default: Any = ...) -> float:
        value = self.get(key, default)
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        ok = ok and (value > minimum if strict else value >= minimum)
        ok = ok and (maximum is None or value <= maximum)
        if not ok:
            self.fail(self._field(key), value, self.allowed[key])
        return float(value)

    def integer(self, key: str, default: Any = ...) -> int:
        value = self.get(key, default)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            self.fail(self._field(key), value, self.allowed[key])
        return int(value)

    def choice(self, key: str, choices: tuple[str, ...], default: Any = ...) -> str:
        value = self.get(key, default)
        if value not in choices:
            self.fail(self._field(key), value, self.allowed[key])
        return str(value)

    def boolean(self, key: str, default: Any = ...) -> bool:
        value = self.get(key, default)
        if not isinstance(value, bool):
            self.fail(self._field(key), value, self.allowed[key])
        return value

    def string(self, key: str, default: Any = ...) -> str:
        value = self.get(key, default)
        if key in self.data and (not isinstance(value, str) or not value.strip()):
            self.fail(self._field(key), value, self.allowed[key])
        return value


def spec_from_dict(data: Any, origin: str = "topology") -> TopologySpec:
    """Validate a parsed topology YAML document and build its :class:`TopologySpec`."""
    top = _Reader(origin, "", data, _TOP_KEYS)
    sources = top.get("sources", [])
    if not isinstance(sources, list) or not all(isinstance(s, str) for s in sources):
        top.fail("sources", sources, _TOP_KEYS["sources"])
    n = _Reader(origin, "node", top.get("node"), _NODE_KEYS)
    node = NodeSpec(
        gpus_per_node=n.integer("gpus_per_node"),
        interconnect=n.choice("interconnect", INTRA_NODE_KINDS),
        gpu_link_bandwidth_bytes_per_s=n.number("gpu_link_gbyte_per_s", strict=True) * GB,
        gpu_link_efficiency=n.number("gpu_link_efficiency", strict=True, maximum=1.0),
        gpu_link_latency_s=n.number("gpu_link_latency_us") * US,
        pcie_bandwidth_bytes_per_s=n.number("pcie_gbyte_per_s", strict=True) * GB,
        nvls=n.boolean("nvls", None) if "nvls" in n.data else None,
    )
    fabric = None
    raw_fabric = top.get("fabric", None)
    if raw_fabric is not None:
        f = _Reader(origin, "fabric", raw_fabric, _FABRIC_KEYS)
        fabric = FabricSpec(
            kind=f.choice("kind", FABRIC_KINDS),
            nics_per_node=f.integer("nics_per_node", 1),
            nic_bandwidth_bytes_per_s=gbit_per_s_to_bytes_per_s(f.number("nic_gbit_per_s", strict=True)),
            nic_efficiency=f.number("nic_efficiency", strict=True, maximum=1.0),
            nic_latency_s=f.number("nic_latency_us") * US,
            nodes_per_leaf=f.integer("nodes_per_leaf", 32),
            oversubscription=f.number("oversubscription", minimum=1.0, default=1.0),
            rail_optimized=f.boolean("rail_optimized", False),
            tiers=_tiers(f, origin),
            nic_message_overhead_s=f.number("nic_message_overhead_us", default=0.0) * US,
        )
        if fabric.kind != "nvlink" and not _nics_fit(node.gpus_per_node, fabric.nics_per_node):
            raise TopologyError(
                f"{origin}: fabric.nics_per_node: {fabric.nics_per_node} does not divide "
                f"node.gpus_per_node={node.gpus_per_node} nor is a multiple of it; GPUs share NICs evenly"
            )
        if fabric.kind == "nvlink" and fabric.tiers:
            raise TopologyError(f"{origin}: fabric.tiers: not valid with fabric.kind nvlink "
                                "(an NVLink switch tier has no leaves); use nvlink_domain plus a NIC fabric")
    nvlink_domain = None
    raw_domain = top.get("nvlink_domain", None)
    if raw_domain is not None:
        d = _Reader(origin, "nvlink_domain", raw_domain, _NVLINK_DOMAIN_KEYS)
        nvlink_domain = NvlinkDomainSpec(
            nodes=d.integer("nodes"),
            gpu_link_bandwidth_bytes_per_s=d.number("gpu_link_gbyte_per_s", strict=True) * GB,
            efficiency=d.number("gpu_link_efficiency", strict=True, maximum=1.0),
            latency_s=d.number("gpu_link_latency_us") * US,
        )
        if node.interconnect != "nvswitch":
            raise TopologyError(f"{origin}: nvlink_domain: needs node.interconnect nvswitch "
                                f"(got {node.interconnect!r}); an NVLink switch tier joins NVSwitches")
        if fabric is not None and fabric.kind == "nvlink":
            raise TopologyError(f"{origin}: nvlink_domain: not valid with fabric.kind nvlink "
                                "(already one NVLink domain); use an infiniband or ethernet fabric between domains")
    gpu = top.string("gpu")
    try:
        get_gpu(gpu)
    except ConfigError:
        top.fail("gpu", gpu, "a GPU preset: " + ", ".join(sorted(GPU_PRESETS)))
    return TopologySpec(
        name=top.string("name"),
        description=top.string("description", ""),
        gpu=gpu,
        node=node,
        fabric=fabric,
        collective_base_latency_s=top.number("collective_base_latency_us", default=0.0) * US,
        sources=tuple(sources),
        nvlink_domain=nvlink_domain,
        launch_overhead_s=top.number("launch_overhead_us", default=0.0) * US,
    )


def _nics_fit(gpus_per_node: int, nics_per_node: int) -> bool:
    """GPUs share NICs evenly, or each GPU has the same number of NIC ports."""
    return gpus_per_node % nics_per_node == 0 or nics_per_node % gpus_per_node == 0


def _tiers(f: _Reader, origin: str) -> tuple[TierSpec, ...]:
    raw = f.get("tiers", [])
    if not isinstance(raw, list):
        f.fail("fabric.tiers", raw, _FABRIC_KEYS["tiers"])
    tiers = []
    for i, item in enumerate(raw):
        t = _Reader(origin, f"fabric.tiers[{i}]", item, _TIER_KEYS)
        tiers.append(TierSpec(group_size=t.integer("group_size"),
                              oversubscription=t.number("oversubscription", minimum=1.0, default=1.0)))
    return tuple(tiers)


def load_topology_file(path: str | Path) -> TopologySpec:
    """Read and validate a user's topology YAML file."""
    return spec_from_dict(read_yaml_file(path, "--topology", TopologyError), origin=str(path))


def preset_names() -> list[str]:
    """Names of the built-in topology presets (``--link`` values)."""
    return sorted(
        p.name.removesuffix(".yaml")
        for p in resources.files("dpsim.topologies").iterdir()
        if p.name.endswith(".yaml")
    )


def load_preset(name: str) -> TopologySpec:
    """Load a built-in topology preset by name."""
    names = preset_names()
    if name not in names:
        raise TopologyError(f"--link: {name!r} is not a preset; choose one of {', '.join(names)}")
    text = resources.files("dpsim.topologies").joinpath(f"{name}.yaml").read_text()
    return spec_from_dict(load_yaml_text(text), origin=f"topologies/{name}.yaml")


# ----------------------------------------------------------------------------- graph

def gpu_id(node: int, local: int) -> str:
    """Graph node id of GPU ``local`` in server ``node``."""
    return f"n{node}.gpu{local}"


def _add_link(g: nx.DiGraph, a: str, b: str, *, capacity_bytes_per_s: float,
              latency_s: float, link_class: str) -> None:
    # Full duplex: one directed edge per direction, each with the full rate. A hop's
    # latency (NCCL's per-step hwLat) is charged once, on the edge leaving the
    # endpoint side ``a``, so a GPU->switch->GPU or NIC->leaf->NIC path pays it once.
    g.add_edge(a, b, capacity_bytes_per_s=capacity_bytes_per_s,
               latency_s=latency_s, link_class=link_class)
    g.add_edge(b, a, capacity_bytes_per_s=capacity_bytes_per_s,
               latency_s=0.0, link_class=link_class)


def build_graph(spec: TopologySpec, n_nodes: int, *, leaf_groups_of: int | None = None,
                tier_groups_of: tuple[int, ...] | None = None) -> nx.DiGraph:
    """Build the directed graph of ``n_nodes`` servers of ``spec``.

    Parameters
    ----------
    spec : TopologySpec
        The cluster design.
    n_nodes : int
        Number of servers to build.
    leaf_groups_of : int, optional
        Nodes per leaf group *in this graph*; defaults to ``spec.fabric.nodes_per_leaf``.
        Uplink capacities always follow the full design's ``nodes_per_leaf``, so a
        representative slice built with small groups loads each link like the full
        cluster does.
    tier_groups_of : tuple of int, optional
        Units per block of each switch tier (``fabric.tiers``) *in this graph*; defaults
        to the design's ``group_size`` values (see :mod:`dpsim.network.fabric`).

    Returns
    -------
    networkx.DiGraph
        Nodes carry ``kind`` (gpu, nvswitch, pcie, nic, leaf, spine) and GPUs their
        ``node``/``local`` index; edges carry ``capacity_bytes_per_s``, ``latency_s`` and
        ``link_class``.

    Examples
    --------
    >>> from dpsim.topology import load_preset, build_graph
    >>> g = build_graph(load_preset("ethernet"), 2)
    >>> sum(1 for _, d in g.nodes(data=True) if d["kind"] == "gpu")
    16
    """
    node, fabric = spec.node, spec.fabric
    g = nx.DiGraph(name=spec.name)
    gpn = node.gpus_per_node
    gpu_link = node.gpu_link_bandwidth_bytes_per_s * node.gpu_link_efficiency
    layout = nic_layout(spec)
    nics = layout.nic_nodes
    for n in range(n_nodes):
        hub = f"n{n}.{node.interconnect}"
        g.add_node(hub, kind=node.interconnect, node=n)
        for j in range(nics):
            g.add_node(f"n{n}.pcie{j}", kind="pcie", node=n)
            g.add_node(f"n{n}.nic{j}", kind="nic", node=n, rail=j)
            _add_link(g, f"n{n}.pcie{j}", f"n{n}.nic{j}",  # each bundled NIC port has its own PCIe link
                      capacity_bytes_per_s=node.pcie_bandwidth_bytes_per_s * layout.ports_per_nic,
                      latency_s=0.0, link_class="pcie")
        for k in range(gpn):
            gid = gpu_id(n, k)
            g.add_node(gid, kind="gpu", node=n, local=k)
            _add_link(g, gid, hub, capacity_bytes_per_s=gpu_link,
                      latency_s=node.gpu_link_latency_s,
                      link_class="nvlink" if node.interconnect == "nvswitch" else "pcie")
            if nics:
                # GPUs share NICs evenly, each through its PCIe switch.
                _add_link(g, gid, f"n{n}.pcie{k // (gpn // nics)}",
                          capacity_bytes_per_s=node.pcie_bandwidth_bytes_per_s,
                          latency_s=0.0, link_class="pcie")
    # Leaves, spine/core tiers (uplinks from the *full* design) and NVLink domains
    # live in dpsim.network.fabric, shared with the arithmetic router (TierNetwork).
    groups = None
    if fabric is not None and fabric.kind != "nvlink":
        design = design_group_sizes(spec)
        tiers = tuple(tier_groups_of or ())
        groups = (leaf_groups_of or design[0], *tiers, *design[1 + len(tiers):])
    add_switch_fabric(g, spec, n_nodes, groups)
    return g


@dataclass(frozen=True, kw_only=True)
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
            if fabric is not None and fabric.kind != "nvlink" and fabric.nics_per_node > gpn:
                # Several NIC ports per GPU: keep the ports per GPU.
                fabric = replace(fabric, nics_per_node=gpus_per_node * (fabric.nics_per_node // gpn))
            elif fabric is not None and fabric.kind != "nvlink" and gpus_per_node % fabric.nics_per_node:
                fabric = replace(fabric, nics_per_node=math.gcd(gpus_per_node, fabric.nics_per_node))
            spec = replace(spec, node=replace(spec.node, gpus_per_node=gpus_per_node), fabric=fabric)
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
    def channels(self) -> int:
        """Parallel rings NCCL builds across nodes: one per NIC of a node, else one."""
        fabric = self.spec.fabric
        if self.n_nodes == 1 or fabric is None or fabric.kind == "nvlink":
            return 1
        return nic_layout(self.spec).nic_nodes

    def _graph(self, n_nodes: int, group: int | None) -> nx.DiGraph:
        g = build_graph(self.spec, n_nodes, leaf_groups_of=group, tier_groups_of=self.tier_group_sizes)
        if self.n_gpus < self.spec.node.gpus_per_node:
            g.remove_nodes_from([gpu_id(0, k) for k in range(self.n_gpus, self.spec.node.gpus_per_node)])
        return g

    @cached_property
    def graph(self) -> nx.DiGraph:
        """The whole cluster's graph (large for big clusters: prefer :attr:`representative`)."""
        return self._graph(self.n_nodes, self.leaf_group_nodes)

    @cached_property
    def representative(self) -> Topology:
        """A small cluster with the same per-link ring load pattern as this one.

        One node stays one node; nodes under one leaf become two nodes; several leaf
        groups become two groups of two nodes. Ring steps load every link class of the
        slice as they load the full cluster (each NIC, leaf port and leaf uplink carries
        one flow per channel and direction), and uplink capacities keep the full design's.
        """
        if self.n_nodes == 1:
            return self
        fabric = self.spec.fabric
        if self.spec.nvlink_domain is not None:
            return self  # domains and leaf groups partition nodes independently: no slice
        assert fabric is not None
        if fabric.tiers:
            # Multi-tier: two units at the highest level that has several, each of two
            # (or the design's fewer) units of every level below (see network/fabric.py).
            from dpsim.network.fabric import level_units
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

    def gpu_ids(self, graph: nx.DiGraph | None = None) -> list[str]:
        """GPU node ids in ring order: node by node, local index within a node."""
        g = self.graph if graph is None else graph
        gpus = [(d["node"], d["local"], v) for v, d in g.nodes(data=True) if d["kind"] == "gpu"]
        return [v for _, _, v in sorted(gpus)]

    def check_connected(self) -> None:
        """Raise :class:`TopologyError` if some GPU cannot reach another one."""
        g = self.representative_graph
        gpus = self.gpu_ids(g)
        reach = nx.descendants(g, gpus[0]) | {gpus[0]}
        missing = [v for v in gpus if v not in reach]
        if missing:
            raise TopologyError(
                f"topology {self.spec.name!r}: GPU {missing[0]} has no path to {gpus[0]}; "
                "check node.interconnect and fabric"
            )
