"""A cluster design as frozen dataclasses (what a topology YAML file describes).

A topology describes a *homogeneous* cluster: identical nodes of ``gpus_per_node`` GPUs
joined inside the node by NVSwitch, NVLink meshes or bridges, AMD xGMI or a PCIe tree
(:mod:`dpsim.topology.server`) and across nodes by NICs running a transport
(:mod:`dpsim.topology.transport`) on a leaf/spine (or multi-tier) fabric, optionally NVLink
domains spanning nodes. SI units inside.
"""

from __future__ import annotations


from dpsim.frozen import frozen_dataclass
from dpsim.topology.transport import TRANSPORTS, TransportSpec

INTRA_NODE_KINDS = ("nvswitch", "pcie", "pcie-tree", "nvlink-mesh", "nvlink-bridge", "xgmi")
FABRIC_KINDS = ("infiniband", "ethernet", "nvlink")
COLLECTIVE_LIBRARIES = ("nccl", "rccl")
DEFAULT_HOST_MEMORY_BYTES_PER_S = 307.2e9
"""Memory bandwidth of one CPU socket when the server's file does not say (it is applied per
socket, :attr:`NodeSpec.host_memory_bandwidth_bytes_per_s`): eight DDR5-4800 channels,
8 x 4800 MT/s x 8 B = 307.2 GB/s (JEDEC JESD79-5 DDR5-4800; eight channels per socket on
Intel Xeon 4th gen (Sapphire Rapids), the CPU of DGX/HGX H100 servers, Intel ARK)."""
DEFAULT_SHM_BYTES_PER_S = 9e9
"""What NCCL's SHM transport carries into one GPU, per direction, when the server's file does not
say: 9 GB/s, NCCL's own price of GPU traffic through a Skylake-class CPU. NCCL's author gave SHM's
rate as "9 or 6" GB/s against 12 GB/s for a path that stays inside a PCIe switch (S. Jeaugey,
NVIDIA/nccl#406, 2020-10-14); those are the topology constants of NCCL's release of that month,
SKL_QPI_WIDTH 9.0 (Skylake UPI), QPI_WIDTH 6.0 (older QPI) and PCI_WIDTH 12.0 (PCIe Gen3 x16),
NVIDIA/nccl@033d7995 (v2.7.8-1) src/graph/topo.h lines 17-19, still SKL_QPI_BW 9.0 at
@da8152e5 (v2.15.1-1, the release of the Lambda runs' period) line 20 and raised to 10.0 only in
2.18.1-1 (@d97a32fa). Assumed: the same rate on one socket and on newer PCIe generations. NCCL's
graph search would plan a one-socket Gen4 path at its link's 24 GB/s (``ncclTopoAddPci``: width x
120 / 80 at @da8152e5), but that is the search's ceiling for choosing channels, not a rate measured
for SHM; the receiving GPU's kernel pulls every byte from pinned host memory with reads
(non-posted PCIe requests, a round trip each through the root complex), bounded by the reads it
keeps in flight rather than by the link's width, and NVIDIA says SM-driven transfers do poorly
through CPU interconnects (NVIDIA/nccl#1163). Not chosen on any row: the value and its source
predate the PCIe training rows, whose logs imply 3.8-7.2 GB/s (validation/pcie_runs.md)."""

@frozen_dataclass
class NodeSpec:
    """What is inside one server."""

    gpus_per_node: int
    """GPUs in one server."""
    interconnect: str
    """How GPUs in a node talk: one of :data:`INTRA_NODE_KINDS` (see :mod:`dpsim.topology.server`)."""
    gpu_link_bandwidth_bytes_per_s: float
    """Line rate per direction, bytes/s, of one GPU's NVLink (aggregate, ``nvswitch``) or PCIe
    link (``pcie``, ``pcie-tree``), or of one direct link between two GPUs (meshes, bridges, xGMI)."""
    gpu_link_efficiency: float
    """Fraction of that line rate NCCL achieves (protocol overhead)."""
    gpu_link_latency_s: float
    """Per-hop latency of a ring step over this link (NCCL's hwLat model)."""
    pcie_bandwidth_bytes_per_s: float
    """GPU-to-NIC PCIe bandwidth per direction, bytes/s."""
    nvls: bool | None = None
    """NVLink SHARP (in-switch reduction) available: ``None`` = decide from the GPU
    (NVSwitch systems of compute capability 9.0 and later, see :mod:`dpsim.algorithms.nccl`)."""
    pcie_switches: int = 1
    """PCIe switches the GPUs sit behind (tree layouts), GPUs split evenly in order."""
    sockets: int = 1
    """CPU sockets (1 or 2) whose root complexes hold the PCIe switches, split evenly."""
    host_pcie_bandwidth_bytes_per_s: float = 0.0
    """A PCIe switch's uplink to its CPU, per direction, bytes/s (0: the node's PCIe rate)."""
    inter_socket_bandwidth_bytes_per_s: float = 0.0
    """The link between two CPU sockets (UPI, xGMI), per direction, bytes/s (two sockets only)."""
    host_link_bandwidth_bytes_per_s: float = 0.0
    """A GPU's own link to host memory, per direction, bytes/s, what activation offload copies over
    (NVLink-C2C on Grace superchips); 0: :attr:`pcie_bandwidth_bytes_per_s`."""
    host_memory_bandwidth_bytes_per_s: float = DEFAULT_HOST_MEMORY_BYTES_PER_S
    """Memory bandwidth of one CPU socket, bytes/s: bounds traffic staged in host memory."""
    p2p: bool = True
    """GPUs read and write each other's memory over PCIe (CUDA peer-to-peer). ``False`` (GeForce
    cards, whose driver refuses it; ``NCCL_P2P_DISABLE=1``; an IOMMU or ACS in the way): NCCL
    falls back to its SHM transport and every byte between two GPUs of the server is written to
    host memory by one and read back by the other (``pcie-tree`` only)."""
    shm_bandwidth_bytes_per_s: float = DEFAULT_SHM_BYTES_PER_S
    """With ``p2p`` off, what NCCL's SHM transport carries into one GPU from host memory, per
    direction, bytes/s (the GPU's reads of the staged bytes, not its link's width)."""
    shm_overlaps_backward: bool = False
    """With ``p2p`` off, whether DDP's gradient all-reduce over NCCL's SHM transport runs beside
    backward (``True``) or, as dpsim assumes by default, adds its whole time after it (see
    :func:`ddp_allreduce_after_backward`, where the evidence is)."""
    mesh_links: tuple[tuple[int, int, int], ...] = ()
    """Direct GPU-to-GPU links ``(gpu a, gpu b, links)`` of ``nvlink-mesh``/``xgmi`` (``nvlink-bridge``: pairs by default)."""
    ring_orders: tuple[tuple[int, ...], ...] = ()
    """Orders of the GPUs that rings follow inside a server (empty: found from the links)."""
    collective_library: str | None = None
    """``nccl`` or ``rccl`` (AMD): whose tuning constants and algorithm rules apply (``None``:
    RCCL on AMD GPU presets, NCCL otherwise)."""


@frozen_dataclass
class FabricSpec:
    """The network between nodes."""

    kind: str
    """``infiniband``, ``ethernet`` or ``nvlink`` (an NVLink switch domain spanning nodes)."""
    nics_per_node: int
    """Network interfaces per node (``nvlink``: ignored, GPUs attach directly)."""
    nic_bandwidth_bytes_per_s: float
    """Line rate of one NIC (or, for ``nvlink``, one GPU's NVLink), per direction, bytes/s."""
    nic_efficiency: float
    """Fraction of the line rate a collective drives through a NIC port: the transport's
    payload share, or less when its streams cannot fill the port
    (:func:`~dpsim.topology.transport.effective_nic_efficiency`), unless the file sets it."""
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
    transport: TransportSpec = TRANSPORTS["ib"]
    """What NCCL runs over the NICs (:mod:`dpsim.topology.transport`)."""
    nic: str | None = None
    """The NIC preset the rate and transport came from (``fabric.nic``), if any."""
    efficiency_given: bool = False
    """``nic_efficiency`` was written in the file rather than derived from the transport."""


def nvlink_fabric(fabric: FabricSpec | None) -> bool:
    """Servers are joined by an NVLink switch tier (``fabric.kind: nvlink``): GPUs reach it
    through their NVSwitch, there are no NICs. Every "is this an NVLink fabric" question is
    answered here."""
    return fabric is not None and fabric.kind == "nvlink"


def nic_fabric(fabric: FabricSpec | None) -> bool:
    """Servers are joined through NICs (InfiniBand, Ethernet): a fabric that is not NVLink."""
    return fabric is not None and not nvlink_fabric(fabric)


@frozen_dataclass
class TierSpec:
    """One switch tier above the leaves of a multi-tier fat tree."""

    group_size: int
    """Units of the tier below (leaf groups, then pods...) under one switch block of this tier."""
    oversubscription: float
    """A block's down-link to up-link bandwidth ratio (1 = non-blocking)."""


@frozen_dataclass
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
    pieces: tuple[int, ...] = ()
    """Servers of each domain in server order, when they are not ``nodes`` each (the last may be short):
    a communicator's copy split over racks at its real piece sizes (``--rack-placement contiguous``,
    :func:`dpsim.collectives.groups.rank_order_split`: 1 + 3 + 3 + 1 servers); servers past them continue
    in domains of ``nodes``. Empty for every design: server ``s`` is in domain ``s // nodes``."""

    def domain_of(self, servers):
        """The domain index of each server of ``servers`` (an int or an integer array)."""
        if not self.pieces:
            return servers // self.nodes
        import numpy as np

        ends = np.cumsum(self.pieces)
        s = np.asarray(servers)
        out = np.where(s < ends[-1], np.searchsorted(ends, s, side="right"),
                       len(self.pieces) + (s - ends[-1]) // self.nodes)
        return int(out) if out.ndim == 0 else out

    def holds(self, n_nodes: int) -> bool:
        """Servers ``0 .. n_nodes - 1`` all sit in the first domain."""
        return n_nodes <= (self.pieces[0] if self.pieces else self.nodes)


@frozen_dataclass
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
    launch_overhead_s: float | None = None
    """Per-collective host/launch overhead on top of NCCL's modelled latency, seconds
    (``None``: the fitted default of the GPU and transport, :mod:`dpsim.collectives.nccl_tuning`)."""


def ddp_allreduce_after_backward(node: NodeSpec, gpus_per_node: int) -> bool:
    """DDP's gradient all-reduce is charged after backward, not hidden behind it: the GPUs of a
    server talk through NCCL's SHM transport (``pcie-tree`` with ``p2p: false``, two or more of
    them in the job's servers) and the file does not say ``shm_overlaps_backward: true``.

    An empirical behaviour read off logs, not a mechanism found in NCCL's or PyTorch's source
    (NCCL's default SHM path has no proxy thread or copy engine that would wait for compute,
    validation/pcie_runs.md). Lambda's deeplearning-benchmark ran its 2-GPU ResNet-50 (torch DDP)
    and BERT-large (apex DDP) benchmarks with ``export NCCL_P2P_DISABLE=1`` (lambdal/
    deeplearning-benchmark@0a684b62..aad0d1cd, ``pytorch/scripts/benchmark_pytorch.sh``; logs at
    @aa5addb6 ``pytorch/results/2x<name>_v1``). On six of the eight server pairs (RTX 4090 and RTX
    3090 on a Threadripper PRO 5995WX, RTX A6000 and A100 80GB PCIe on an EPYC 7502, A100 80GB
    SXM4 on an EPYC 7H12, H100 80GB PCIe on an EPYC 7302) the two-GPU step exceeds the one-GPU
    step by the gradient bytes over one rate per pair, the same in fp32 and fp16 (BERT fp32 : fp16
    = 1.98-2.46 : 1, the bytes' 2 : 1) though the fp16 batch, and the backward that could hide it,
    is 1.75-2x the fp32 one: an all-reduce nothing hides. Two pairs hide most of it: H100 80GB
    PCIe on a Xeon Platinum 8480+ and RTX 6000 Ada on the same Threadripper PRO 5995WX board as
    the GeForce pair; no logged property (driver, container, board, die) separates them, so
    their files would set ``shm_overlaps_backward: true`` only from a measurement of their own.
    NVLink, NVSwitch, xGMI and PCIe servers with P2P are untouched."""
    return node.interconnect == "pcie-tree" and not node.p2p and not node.shm_overlaps_backward \
        and gpus_per_node > 1
