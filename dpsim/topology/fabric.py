"""The switch fabric of a topology: NIC layout, leaves, multi-tier fat trees, NVLink domains.

:func:`dpsim.topology.build_graph` builds each server (GPUs, NVSwitch or PCIe hub, PCIe
switches, NICs) and calls :func:`add_switch_fabric` for what joins servers. The same
layout functions are used by :class:`~dpsim.network.tiers.TierNetwork`, which routes
flows arithmetically on the very graph this module describes, so both always agree.

Layout (``topologies/README.md`` has the user-facing version):

- **NICs.** ``nics_per_node`` divides ``gpus_per_node`` (GPUs share a NIC through its
  PCIe switch) or is a multiple of it (each GPU has ``nics/gpus`` NIC ports behind its
  PCIe switch, e.g. AWS p5: 32 x 100 Gb/s EFA for 8 GPUs). Several ports of one GPU
  are one *bundled* NIC node whose links carry ``ports x rate``: NCCL stripes a GPU's
  traffic over its NICs, and an even split over equal links is one link of their sum.
- **Leaves.** NIC *j* of a server goes to rail *j*'s leaf when ``rail_optimized``
  (otherwise every NIC of a server to the same leaf); ``nodes_per_leaf`` servers share
  a leaf group (one leaf per rail).
- **Tiers.** Leaves join level-1 switch blocks; ``fabric.tiers[i].group_size`` units of
  level *i* form one block of level *i+1*; the top block joins all blocks below it.
  With no ``tiers`` the single level-1 block is the classic ``spine``. Each block's
  parallel switches are collapsed into one node and its parallel uplinks into one
  link: **ECMP is modelled as an even split of every flow over the equal-cost
  up-links** (per-packet spraying / adaptive routing), not as per-flow hashing, so
  uplink capacity is never lost to hash collisions. On Ethernet fabrics that hash RoCE
  flows (5-tuple ECMP) that is an assumption: computed for NCCL's flows on these routes
  (consecutive servers are ring neighbours, so one edge per ring leaves a leaf group)
  the collision loss is under 1 %; it reaches ~3x the network time only when a job's
  servers are scattered over leaves, which no validation source publishes
  (``validation/ecmp_collisions.py``; validation/large_model_runs.md, section "Does ECMP
  hashing on Ethernet explain the multi-node rows?"). A block's uplink capacity is its
  down-link total over the tier's oversubscription, always from the *full* design.
- **NVLink domain.** ``nvlink_domain.nodes`` servers' NVSwitches join an NVLink switch
  tier (``nvl{d}``, NVL72-like); across domains traffic takes the NIC fabric.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from dpsim.frozen import frozen_dataclass
from dpsim.topology.spec import nic_fabric, nvlink_fabric

if TYPE_CHECKING:
    import networkx as nx


@frozen_dataclass
class NicLayout:
    """How a server's NIC ports appear in the graph."""

    nic_nodes: int
    """NIC nodes per server (one per PCIe switch); 0 without a NIC fabric."""
    ports_per_nic: int
    """NIC ports bundled into one NIC node (1 unless NICs outnumber GPUs)."""
    rails: int
    """Leaf rails: ``nic_nodes`` when rail-optimised, else 1."""


def nic_layout(spec) -> NicLayout:
    """NIC nodes, ports per NIC node and rails of ``spec`` (a TopologySpec)."""
    return nic_layout_of(spec.node.gpus_per_node, spec.fabric)


def nic_layout_of(gpn: int, fabric) -> NicLayout:
    """NIC nodes, ports per NIC node and rails of servers of ``gpn`` GPUs on ``fabric``."""
    if not nic_fabric(fabric):
        return NicLayout(nic_nodes=0, ports_per_nic=1, rails=1)
    nics = fabric.nics_per_node
    nodes = min(nics, gpn)
    ports = nics // nodes if nics >= gpn else 1
    return NicLayout(nic_nodes=nodes, ports_per_nic=ports, rails=nodes if fabric.rail_optimized else 1)


def pcie_switch_of(spec, local: int) -> int:
    """PCIe switch (and NIC node) index of GPU ``local`` of a server."""
    layout = nic_layout(spec)
    return local // (spec.node.gpus_per_node // layout.nic_nodes)


def nic_rate(spec) -> float:
    """What a collective drives through one NIC port, bytes/s."""
    f = spec.fabric
    return f.nic_bandwidth_bytes_per_s * f.nic_efficiency


def design_group_sizes(spec) -> tuple[int, ...]:
    """Full-design unit sizes per level: nodes per leaf group, then each tier's group size."""
    f = spec.fabric
    return (f.nodes_per_leaf, *(t.group_size for t in f.tiers))


def uplink_capacities(spec) -> tuple[float, ...]:
    """Capacity of one block's uplink at each level (leaf, tier 1, ...), full design, bytes/s.

    Level 0 is one leaf's uplink: ``nodes_per_leaf`` servers times their NIC ports on
    that leaf, over ``fabric.oversubscription``. Level *i* (a block of tier *i*) is
    ``group_size`` units of level *i-1*'s uplinks (a leaf group has ``rails`` leaves)
    over that tier's oversubscription.
    """
    f = spec.fabric
    layout = nic_layout(spec)
    ports_per_leaf_per_node = layout.nic_nodes * layout.ports_per_nic // layout.rails
    caps = [f.nodes_per_leaf * ports_per_leaf_per_node * nic_rate(spec) / f.oversubscription]
    below = caps[0] * layout.rails
    for t in f.tiers:
        cap = t.group_size * below / t.oversubscription
        caps.append(cap)
        below = cap
    return tuple(caps)


def uplink_cables(spec) -> tuple[int, ...]:
    """Parallel cables in one block's uplink at each level (the bundle :func:`uplink_capacities`
    sums), assuming switch ports run at the NIC port rate: the bundle's capacity over one port's,
    rounded, at least 1. ECMP spreads a bundle's flows evenly over them."""
    return tuple(max(1, round(cap / nic_rate(spec))) for cap in uplink_capacities(spec))


def level_units(n_nodes: int, group_sizes: tuple[int, ...]) -> list[int]:
    """Units at each level for ``n_nodes`` servers: leaf groups, tier-1 blocks, ..."""
    units = [math.ceil(n_nodes / group_sizes[0])]
    for g in group_sizes[1:]:
        units.append(math.ceil(units[-1] / g))
    return units


def switch_levels(n_nodes: int, spec, group_sizes: tuple[int, ...]) -> int:
    """Number of switch levels above the leaves that exist in a graph of ``n_nodes``.

    0: a single leaf (no uplinks). Otherwise the levels up to the first one whose single
    block holds every leaf; with no ``tiers`` that is the one ``spine``.
    """
    layout = nic_layout(spec)
    units = level_units(n_nodes, group_sizes)
    if units[0] * layout.rails <= 1:
        return 0
    for level in range(1, len(group_sizes)):
        if units[level] == 1:
            return level
    return len(group_sizes)


def switch_name(level: int, index: int, n_levels: int, spec) -> str:
    """Graph node id of block ``index`` of switch level ``level`` (1 = first above leaves)."""
    tiers = spec.fabric.tiers
    top = level == n_levels
    if not tiers:
        return "spine"
    if level == 1:
        return "spine" if top else f"spine{index}"
    if level == 2:
        return "core" if top else f"core{index}"
    return f"tier{level}" if top else f"tier{level}.{index}"


def level_class(level: int) -> str:
    """Link class of the uplinks from level ``level`` (0 = leaves) to the level above."""
    names = ["leaf", "spine", "core"]
    lo = names[level] if level < 3 else f"tier{level}"
    hi = names[level + 1] if level + 1 < 3 else f"tier{level + 1}"
    return f"{lo}-{hi}"


def _add_link(g: nx.DiGraph, a: str, b: str, *, capacity_bytes_per_s: float,
              latency_s: float, link_class: str) -> None:
    # Same convention as dpsim.topology: latency charged on the edge leaving ``a``.
    g.add_edge(a, b, capacity_bytes_per_s=capacity_bytes_per_s, latency_s=latency_s, link_class=link_class)
    g.add_edge(b, a, capacity_bytes_per_s=capacity_bytes_per_s, latency_s=0.0, link_class=link_class)


def add_switch_fabric(g: nx.DiGraph, spec, n_nodes: int, group_sizes: tuple[int, ...] | None = None) -> None:
    """Add NVLink domains, leaves and switch tiers joining the ``n_nodes`` servers of ``g``.

    ``group_sizes`` are the unit sizes *in this graph* (a representative slice uses
    small ones); capacities always follow the full design.
    """
    node, fabric = spec.node, spec.fabric
    gpn = node.gpus_per_node
    dom = spec.nvlink_domain
    if dom is not None and n_nodes > 1:
        for n in range(n_nodes):
            _add_link(g, f"n{n}.nvswitch", f"nvl{dom.domain_of(n)}",
                      capacity_bytes_per_s=gpn * dom.gpu_link_bandwidth_bytes_per_s * dom.efficiency,
                      latency_s=dom.latency_s, link_class="nvlink-domain")
            g.nodes[f"nvl{dom.domain_of(n)}"]["kind"] = "nvl"
    if fabric is None or n_nodes == 1:
        return
    rate = nic_rate(spec)
    if nvlink_fabric(fabric):
        # Every node's NVSwitch reaches one NVLink switch tier at full per-GPU rate.
        g.add_node("nvl-spine", kind="spine")
        for n in range(n_nodes):
            _add_link(g, f"n{n}.nvswitch", "nvl-spine", capacity_bytes_per_s=gpn * rate,
                      latency_s=fabric.nic_latency_s, link_class="nvlink-fabric")
        return
    layout = nic_layout(spec)
    sizes = tuple(group_sizes) if group_sizes is not None else design_group_sizes(spec)
    n_levels = switch_levels(n_nodes, spec, sizes)
    caps = uplink_capacities(spec)
    units = level_units(n_nodes, sizes)
    for grp in range(units[0]):
        for r in range(layout.rails):
            g.add_node(f"leaf{grp}.{r}", kind="leaf")
    # Blocks of each level and their uplinks.
    for level in range(1, n_levels + 1):
        for b in range(units[level] if level < len(units) else 1):
            g.add_node(switch_name(level, b, n_levels, spec), kind="spine" if level == 1 else "core")
    if n_levels:
        for grp in range(units[0]):
            parent = switch_name(1, grp // sizes[1] if len(sizes) > 1 else 0, n_levels, spec)
            for r in range(layout.rails):
                _add_link(g, f"leaf{grp}.{r}", parent, capacity_bytes_per_s=caps[0],
                          latency_s=0.0, link_class=level_class(0))
        for level in range(1, n_levels):
            for b in range(units[level]):
                child = switch_name(level, b, n_levels, spec)
                parent = switch_name(level + 1, b // sizes[level + 1] if level + 1 < len(sizes) else 0,
                                     n_levels, spec)
                _add_link(g, child, parent, capacity_bytes_per_s=caps[level],
                          latency_s=0.0, link_class=level_class(level))
    for n in range(n_nodes):
        for j in range(layout.nic_nodes):
            leaf = f"leaf{n // sizes[0]}.{j if fabric.rail_optimized else 0}"
            _add_link(g, f"n{n}.nic{j}", leaf, capacity_bytes_per_s=rate * layout.ports_per_nic,
                      latency_s=fabric.nic_latency_s, link_class=fabric.kind)
