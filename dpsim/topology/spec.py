"""A cluster design as frozen dataclasses (what a topology YAML file describes).

A topology describes a *homogeneous* cluster: identical nodes of ``gpus_per_node`` GPUs
joined inside the node by NVSwitch or PCIe and across nodes by NICs on a leaf/spine
(or multi-tier) fabric, optionally NVLink domains spanning nodes. SI units inside.
"""

from __future__ import annotations

from dataclasses import dataclass

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
    sources: tuple[str, ...] = ()
    """Citations for the numbers."""
    nvlink_domain: NvlinkDomainSpec | None = None
    """NVLink switch tier spanning several nodes (with a NIC ``fabric`` between domains)."""
    launch_overhead_s: float = 0.0
    """Per-collective host/launch overhead on top of NCCL's modelled latency, seconds."""
