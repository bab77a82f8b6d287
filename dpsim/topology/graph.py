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

from typing import TYPE_CHECKING

from dpsim.topology.fabric import add_switch_fabric, design_group_sizes
from dpsim.topology.server import build_server
from dpsim.topology.spec import TopologySpec, nic_fabric

if TYPE_CHECKING:
    import networkx as nx

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


class Reach:
    """The part of :class:`networkx.DiGraph` that :func:`build_graph` writes (``add_node``,
    ``add_edge``, ``nodes``, ``remove_nodes_from``), keeping each node's attributes and
    successors only: enough to walk a graph for :meth:`Topology.check_connected`, which every
    ``predict`` runs, without importing networkx (about 0.15 s of a 2-core machine's start-up,
    with the entry-point scan its backends make)."""

    def __init__(self) -> None:
        self.nodes = _Nodes()
        self._succ: dict[str, set[str]] = {}

    def add_node(self, v: str, **attrs) -> None:
        self.nodes.setdefault(v, {}).update(attrs)
        self._succ.setdefault(v, set())

    def add_edge(self, a: str, b: str, **attrs) -> None:
        self.add_node(a)
        self.add_node(b)
        self._succ[a].add(b)

    def remove_nodes_from(self, vs) -> None:
        for v in vs:
            if v in self.nodes:
                del self.nodes[v]
                del self._succ[v]
                for succ in self._succ.values():
                    succ.discard(v)

    def descendants(self, source: str) -> set[str]:
        """The nodes reachable from ``source`` (not itself unless on a cycle), as
        :func:`networkx.descendants`."""
        seen: set[str] = set()
        todo = [source]
        while todo:
            for w in self._succ[todo.pop()]:
                if w not in seen:
                    seen.add(w)
                    todo.append(w)
        seen.discard(source)
        return seen


class _Nodes(dict):
    """``Reach.nodes``: ``nodes[v]`` is ``v``'s attributes and ``nodes(data=True)`` the pairs, as in networkx."""

    def __call__(self, data: bool = False):
        return self.items() if data else self.keys()


def build_graph(spec: TopologySpec, n_nodes: int, *, leaf_groups_of: int | None = None,
                tier_groups_of: tuple[int, ...] | None = None, into: Reach | None = None) -> nx.DiGraph:
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
    into : Reach, optional
        An empty graph to fill instead of a new :class:`networkx.DiGraph` (which is then
        not imported).

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
    fabric = spec.fabric
    if into is None:
        import networkx as nx  # here, not above: predict's connectivity check fills a Reach

        g = nx.DiGraph(name=spec.name)
    else:
        g = into
    server = build_server(spec)
    nics = nic_fabric(fabric)
    for n in range(n_nodes):
        for name, kind in server.nodes:
            if kind == "nic" and not nics:
                continue
            attrs = {"kind": kind, "node": n}
            if kind == "gpu":
                attrs["local"] = int(name[3:])
            elif kind == "nic":
                attrs["rail"] = int(name[3:])
            g.add_node(f"n{n}.{name}", **attrs)
        for fam in server.families:
            if not fam.intra and not nics:
                continue
            if fam.name in ("nic_leaf", "leaf_nic"):
                continue  # the cables to the leaves: dpsim.topology.fabric
            for i in fam.links:
                link = server.links[i]
                g.add_edge(f"n{n}.{link.src}", f"n{n}.{link.dst}", capacity_bytes_per_s=link.capacity_bytes_per_s,
                           latency_s=link.latency_s, link_class=link.link_class)
    # Leaves, spine/core tiers (uplinks from the *full* design) and NVLink domains
    # live in dpsim.network.fabric, shared with the arithmetic router (TierNetwork).
    groups = None
    if nic_fabric(fabric):
        design = design_group_sizes(spec)
        tiers = tuple(tier_groups_of or ())
        groups = (leaf_groups_of or design[0], *tiers, *design[1 + len(tiers):])
    add_switch_fabric(g, spec, n_nodes, groups)
    return g
