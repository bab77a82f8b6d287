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
from dataclasses import dataclass, field, fields, replace
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Any

import networkx as nx
import yaml

from dpsim.errors import ConfigError, TopologyError
from dpsim.hardware import GPU_PRESETS, get_gpu
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


# ----------------------------------------------------------------------------- YAML

class _StrictLoader(yaml.SafeLoader):
    """Safe YAML loader that refuses a key given twice in one mapping."""


def _no_duplicates(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"key {key!r} appears twice", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicates)


def _load_yaml(text: str):
    return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass

_NODE_KEYS = {
    "gpus_per_node": "int>0",
    "interconnect": "one of " + "|".join(INTRA_NODE_KINDS),
    "gpu_link_gbyte_per_s": "number>0",
    "gpu_link_efficiency": "number in (0, 1]",
    "gpu_link_latency_us": "number>=0",
    "pcie_gbyte_per_s": "number>0",
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
}
_TOP_KEYS = {
    "name": "string",
    "description": "string",
    "gpu": "GPU preset name",
    "sources": "list of strings",
    "node": "mapping",
    "fabric": "mapping or null",
    "collective_base_latency_us": "number>=0",
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
        )
        if fabric.kind != "nvlink" and node.gpus_per_node % fabric.nics_per_node:
            raise TopologyError(
                f"{origin}: fabric.nics_per_node: {fabric.nics_per_node} does not divide "
                f"node.gpus_per_node={node.gpus_per_node}; GPUs share NICs evenly"
            )
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
    )


def load_topology_file(path: str | Path) -> TopologySpec:
    """Read and validate a user's topology YAML file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise TopologyError(f"--topology: cannot read {str(path)!r}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise TopologyError(f"--topology: {str(path)!r} is not a UTF-8 text file; expected a YAML file") from None
    try:
        data = _load_yaml(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        problem = f" ({exc.problem})" if getattr(exc, "problem", None) else ""
        raise TopologyError(f"{path}: not valid YAML{where}{problem}") from None
    return spec_from_dict(data, origin=str(path))


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
    return spec_from_dict(_load_yaml(text), origin=f"topologies/{name}.yaml")


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


def build_graph(spec: TopologySpec, n_nodes: int, *, leaf_groups_of: int | None = None) -> nx.DiGraph:
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
    nvlink_fabric = fabric is not None and fabric.kind == "nvlink"
    nics = 0 if fabric is None or nvlink_fabric else fabric.nics_per_node
    for n in range(n_nodes):
        hub = f"n{n}.{node.interconnect}"
        g.add_node(hub, kind=node.interconnect, node=n)
        for j in range(nics):
            g.add_node(f"n{n}.pcie{j}", kind="pcie", node=n)
            g.add_node(f"n{n}.nic{j}", kind="nic", node=n, rail=j)
            _add_link(g, f"n{n}.pcie{j}", f"n{n}.nic{j}",
                      capacity_bytes_per_s=node.pcie_bandwidth_bytes_per_s,
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
    if fabric is None or n_nodes == 1:
        return g
    group = leaf_groups_of or fabric.nodes_per_leaf
    n_groups = math.ceil(n_nodes / group)
    nic_rate = fabric.nic_bandwidth_bytes_per_s * fabric.nic_efficiency
    if nvlink_fabric:
        # Every node's NVSwitch reaches one NVLink switch tier at full per-GPU rate.
        g.add_node("nvl-spine", kind="spine")
        for n in range(n_nodes):
            _add_link(g, f"n{n}.nvswitch", "nvl-spine", capacity_bytes_per_s=gpn * nic_rate,
                      latency_s=fabric.nic_latency_s, link_class="nvlink-fabric")
        return g
    rails = fabric.nics_per_node if fabric.rail_optimized else 1
    # Uplink of one leaf: its down-links' total over the oversubscription ratio, from
    # the *full* design (NICs of nodes_per_leaf nodes on this rail).
    nics_per_leaf = fabric.nodes_per_leaf * (1 if fabric.rail_optimized else fabric.nics_per_node)
    uplink = nics_per_leaf * nic_rate / fabric.oversubscription
    if n_groups > 1 or rails > 1:
        # Spine switches of a leaf/spine fabric collapsed into one node: ECMP spreads
        # a leaf's traffic over all its uplinks, which together carry `uplink`.
        g.add_node("spine", kind="spine")
    for grp in range(n_groups):
        for r in range(rails):
            leaf = f"leaf{grp}.{r}"
            g.add_node(leaf, kind="leaf")
            if g.has_node("spine"):
                _add_link(g, leaf, "spine", capacity_bytes_per_s=uplink,
                          latency_s=0.0, link_class="leaf-spine")
    for n in range(n_nodes):
        for j in range(nics):
            leaf = f"leaf{n // group}.{j if fabric.rail_optimized else 0}"
            _add_link(g, f"n{n}.nic{j}", leaf, capacity_bytes_per_s=nic_rate,
                      latency_s=fabric.nic_latency_s, link_class=fabric.kind)
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

    def __post_init__(self) -> None:
        gpn = self.spec.node.gpus_per_node
        if self.n_gpus <= 0:
            raise TopologyError(f"--gpus: {self.n_gpus} is not valid; expected an integer >= 1")
        if self.n_gpus > gpn and self.n_gpus % gpn:
            raise TopologyError(
                f"--gpus: {self.n_gpus} is not a multiple of --gpus-per-node={gpn}; "
                f"use a multiple (e.g. {math.ceil(self.n_gpus / gpn) * gpn}) or change --gpus-per-node"
            )
        if self.n_gpus > gpn and self.spec.fabric is None:
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
            if fabric is not None and fabric.kind != "nvlink" and gpus_per_node % fabric.nics_per_node:
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
        return fabric.nics_per_node

    def _graph(self, n_nodes: int, group: int | None) -> nx.DiGraph:
        g = build_graph(self.spec, n_nodes, leaf_groups_of=group)
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
        assert fabric is not None
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
