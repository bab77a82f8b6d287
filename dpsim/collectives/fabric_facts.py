"""What a communicator's topology offers NCCL: the facts its cost model reads off the fabric.

One server or several, one NVLink domain or NICs between servers, which hardware row of
NCCL's latency tables each hop takes, the NICs' transport and what it allows, the library
(NCCL or RCCL), the GPU generation's rows, and NVLS's channels and heads. Everything here
depends on the topology alone (not on the message, the algorithm or the fitted tuning):
:func:`fabric_facts` reads it once per communicator. Whether the servers are joined by an
NVLink fabric is :func:`dpsim.topology.spec.nvlink_fabric`'s answer, and whether the
communicator crosses NICs :attr:`dpsim.topology.cluster.Topology.crosses_nics`'.
"""

from __future__ import annotations


from dpsim.collectives.nccl_tuning import (
    BASE_LATENCY_US,
    GENERATION,
    HW_LATENCY_US,
    LL_MAX_BW_GBPS,
    NVLS_EFFICIENCY,
    NVLS_MAX_ARITY,
    PER_CHANNEL_MAX_RING_LL128_BW_GBPS,
    PER_CHANNEL_MAX_TREE_BW_GBPS,
    PER_CHANNEL_MAX_TREE_LL128_BW_GBPS,
    RCCL_BASE_LATENCY_US,
    RCCL_XGMI_LATENCY_US,
    NvlsTuning,
    library,
    nvls_tuning,
)
from dpsim.frozen import frozen_dataclass
from dpsim.topology.cluster import Topology
from dpsim.topology.fabric import nic_layout
from dpsim.topology.spec import FabricSpec, TopologySpec, nic_fabric, nvlink_fabric
from dpsim.units import US

NVLINK_RING_INTERCONNECTS = ("nvswitch", "nvlink-mesh", "xgmi")
"""Servers whose rings stay on NVLink (or AMD xGMI): NCCL's ``nvlink`` hardware row. Elsewhere NCCL
takes the slowest link of the path: a ring through NVLink bridges still crosses PCIe (``pci``)."""


@frozen_dataclass
class FabricFacts:
    """The fabric facts of one communicator (:func:`fabric_facts`)."""

    spec: TopologySpec
    """The cluster design."""
    fabric: FabricSpec | None
    """The network between servers (``spec.fabric``)."""
    n_ranks: int
    """GPUs in the communicator."""
    n_nodes: int
    """Servers it spans."""
    gpus_per_node: int
    """GPUs per server it uses."""
    generation: str | None
    """NCCL's generation row of the GPU (``None``: a GPU without a preset; the tables then read
    Hopper's row where NCCL has a default)."""
    rccl: bool
    """AMD's RCCL runs the collectives (its own latency rows and algorithm rules)."""
    crosses_nics: bool
    """Collectives cross NICs (not one server, not one NVLink domain)."""
    intra_hw: str
    """NCCL's hardware row of a hop inside a server: ``nvlink`` (:data:`NVLINK_RING_INTERCONNECTS`) or ``pci``."""
    inter_hw: str
    """NCCL's hardware row of a hop between servers: ``nvlink`` (an NVLink fabric or domain) or ``net``."""
    intra_hop_scale: float
    """The topology's ring/Simple hop latency inside a server over NCCL's (scales every intra hwLat)."""
    inter_hop_scale: float
    """The same between servers (1 without a fabric)."""
    ports_per_nic: int
    """NIC ports bundled in one NIC node (NCCL binds one tree channel to each)."""
    nccl_picks_tree_channels: bool
    """Across NICs, NCCL's own tuning sets the tree's channels (one per NIC port): not over Google's
    TCPX/TCPXO, whose tuner plugin (``NCCL_TUNER_PLUGIN``, with ``NCCL_MIN_NCHANNELS``) picks
    algorithm, protocol and channels by size from a table Google does not publish
    (AI-Hypercomputer/gpu-recipes@c72e38d a3mega ``nemo-launcher-job.yaml``). False without NICs."""
    ramp_scope: str
    """Which fitted bandwidth ramp applies (:attr:`~dpsim.collectives.nccl_tuning.NcclTuning.ramp_half_bytes`):
    ``node`` inside one NVLink domain (``network`` inside a PCIe-only server); across NICs ``verbs`` over NCCL's IB verbs transport (IB or
    RoCE, with GPUDirect RDMA or not; and the socket transport's default of one socket driven by
    the proxy thread), ``staged`` over the socket transport with helper threads (several sockets
    per connection: each step's size exchange and task hand-off add stages), ``tcpx`` over
    Google's GPUDirect-TCPX/TCPXO, else ``network``."""
    nvls: NvlsTuning
    """NCCL's NVLS channels and chunk sizes for this communicator (:func:`~dpsim.collectives.nccl_tuning.nvls_tuning`)."""
    nvls_heads: int
    """NVLS heads: every GPU of the NVLink domain, at most 32 (:data:`~dpsim.collectives.nccl_tuning.NVLS_MAX_ARITY`)."""
    nvls_weight: float
    """Bytes a flow through the switch's in-network reduction costs per byte: 1 / NCCL's ``nvlsEfficiency``."""
    ll_max_bw_bytes_per_s: float
    """NCCL's ``llMaxBw`` for this GPU and server count, bytes/s."""
    tree_channel_max_bw_bytes_per_s: float
    """What one channel of the double binary tree moves across servers at most, bytes/s of bus
    bandwidth (NCCL's ``perChMaxTreeBws``).

    A tree channel is one CTA that receives, reduces and forwards along the chain and the tree
    at once, so it runs out of SM throughput before a fast NIC does: NVLS tree "can achieve peak
    bandwidth with only 16 SMs ... whereas tree would require 32 SMs" (S. Jeaugey,
    NVIDIA/nccl#1649). With the flow model's tree unbounded, two servers' tree moved each NIC's
    share once instead of a ring's 2(n-1)/n and won where NCCL, bounding it by this, runs the
    ring: two 8x A100 servers with 4 HDR NICs each (4 channels: 4 x 23.6 = 94 GB/s of tree bus
    bandwidth against a ring's 4 x 24) measure the ring's 47.8 GB/s of algorithm bandwidth
    (NVIDIA/nccl-tests#152), not a tree's 85. Applied across NICs only: there a channel is one
    NIC port's ring or tree, as NCCL's graph search builds them (one server's tree, or an NVLink
    domain's, has no NIC to bind its channels)."""

    ring_ll128_channel_max_bw_bytes_per_s: float
    """What one ring channel moves across servers at most in the LL128 protocol, bytes/s of bus
    bandwidth (NCCL's ``perChMaxRingLL128Bws``): like a tree channel, one CTA, whose LL128 threads
    also store a flag with every 120 bytes and poll the peer's. Applied where
    :attr:`tree_channel_max_bw_bytes_per_s` is, one channel per NIC port, for the same reason."""
    tree_ll128_channel_max_bw_bytes_per_s: float
    """The same for a tree channel (NCCL's ``perChMaxTreeLL128Bws``)."""

    def hw_latency_us(self, hw: str, family: str, p: int) -> float:
        """NCCL's hwLat of row ``hw`` (RCCL's for xGMI and the same algorithms), protocol index ``p``."""
        return _hw_latency_us(self.rccl, hw, family, p)

    def base_latency_us(self, family: str, p: int) -> float:
        """NCCL's baseLat (RCCL's where it has its own)."""
        if self.rccl and family in RCCL_BASE_LATENCY_US:
            return RCCL_BASE_LATENCY_US[family][p]
        return BASE_LATENCY_US[family][p]

    def nic_scale(self, message_bytes: float) -> float:
        """Fraction of a NIC port's rate left with messages of ``message_bytes``: LogGP's
        ``1 / (1 + g r / c)`` with g = ``fabric.nic_message_overhead_us`` (1 without one)."""
        fabric = self.fabric
        if not nic_fabric(fabric) or fabric.nic_message_overhead_s <= 0:
            return 1.0
        rate = fabric.nic_bandwidth_bytes_per_s * fabric.nic_efficiency
        return 1.0 / (1.0 + fabric.nic_message_overhead_s * rate / message_bytes)


def _hw_latency_us(rccl: bool, hw: str, family: str, p: int) -> float:
    if rccl and hw == "nvlink" and family in RCCL_XGMI_LATENCY_US:
        return RCCL_XGMI_LATENCY_US[family][p]
    return HW_LATENCY_US[hw][family][p]


def _server_columns(n_nodes: int) -> int:
    """Column of NCCL's per-GPU-generation tables: one server, two, more."""
    return 0 if n_nodes == 1 else (1 if n_nodes == 2 else 2)


def _inter_hop(spec: TopologySpec, n_nodes: int) -> tuple[float, str]:
    """(scale, hardware row) of a hop between servers: the topology's ring/Simple hop latency over
    NCCL's on an NVLink fabric or inside an NVLink domain, else over the network's."""
    fabric, dom = spec.fabric, spec.nvlink_domain
    nvlink = HW_LATENCY_US["nvlink"]["ring"][2] * US
    if nvlink_fabric(fabric):
        return fabric.nic_latency_s / nvlink, "nvlink"
    if dom is not None and dom.holds(n_nodes):
        return dom.latency_s / nvlink, "nvlink"
    if fabric is None:
        return 1.0, "net"
    return fabric.nic_latency_s / (HW_LATENCY_US["net"]["ring"][2] * US), "net"


PCIE_ONLY_INTERCONNECTS = ("pcie", "pcie-tree")
"""Servers whose GPUs have no NVLink or xGMI link at all: every hop is PCIe."""


def _ramp_scope(fabric: FabricSpec | None, crosses: bool, interconnect: str) -> str:
    """:attr:`FabricFacts.ramp_scope` of collectives that cross the NICs of ``fabric`` or not.

    Inside a PCIe-only server the rings take the network's ramp, not the NVLink domains' ``node``
    one: the ramp is the bandwidth-delay product of the Simple protocol's 512 KiB chunk pipeline,
    and a PCIe 4.0 x16 ring flow (25 GB/s) runs at a NIC's per-flow rate (12-50 GB/s), not at
    the 150-480 GB/s of the NVSwitch servers the ``node`` ramp (64 MiB half) was fitted on. Four
    RTX 4090 on PCIe 4.0 (tinygrad/open-gpu-kernel-modules#36) hold 25.7-26.0 GB/s of bus
    bandwidth from 256 MiB to 1 GiB: the ``node`` ramp made them 29-54 % slow
    (``python validation/accuracy_pcie.py``; those rows are never fitted on)."""
    if not crosses:
        return "network" if interconnect in PCIE_ONLY_INTERCONNECTS else "node"
    transport = fabric.transport
    # Without GPUDirect RDMA the verbs transport keeps its pipeline: the Simple buffers move to
    # pinned host memory that the GPU kernel writes and the NIC reads (NVIDIA/nccl@5067397
    # src/transport/net.cc, NCCL_NET_MAP_ADD_POINTER on device memory only with useGdr), with no
    # proxy copy; the socket transport's proxy copies each chunk through the kernel, a stage more.
    if transport.kind in ("ib", "roce"):
        return "verbs"
    # The socket transport's ``staged`` ramp was fitted on a run with helper threads
    # (NCCL_SOCKET_NTHREADS=2): there each step first sends its size on the control socket, then
    # is cut into tasks of at least 64 KiB queued to helper threads woken through a mutex and a
    # condition variable (NVIDIA/nccl src/transport/net_socket.cc, ncclNetSocketTest /
    # ncclNetSocketGetTask / persistentSocketThread), stages each step crosses in turn. NCCL's
    # default on a NIC that is neither AWS's nor GCP's starts no helper thread ("By default, we
    # only use the main thread and do not spawn extra threads", autoNt = 0, autoNs = 1 in
    # ncclNetSocketGetNsockNthread): the proxy thread moves the host buffer the GPU filled on one
    # socket itself, as the verbs transport's proxy posts it without GPUDirect. One socket per
    # connection (streams_per_connection 1) is that default; more sockets need helper threads.
    if transport.kind == "socket" and transport.streams_per_connection <= 1:
        return "verbs"
    if not transport.gpudirect:
        return "staged"
    return "tcpx" if transport.kind in ("tcpx", "tcpxo") else "network"


def fabric_facts(topology: Topology) -> FabricFacts:
    """The fabric facts of the communicator ``topology``."""
    spec, node, fabric = topology.spec, topology.spec.node, topology.spec.fabric
    n_nodes, gpn = topology.n_nodes, topology.gpus_per_node
    gen = GENERATION.get(spec.gpu)
    row = gen or "hopper"  # the tables' row for a GPU without a preset
    rccl = library(spec) == "rccl"
    crosses = topology.crosses_nics
    intra_hw = "nvlink" if node.interconnect in NVLINK_RING_INTERCONNECTS else "pci"
    inter, inter_hw = _inter_hop(spec, n_nodes)
    nic_gbyte_per_s = fabric.nic_bandwidth_bytes_per_s / 1e9 if fabric is not None else 0.0
    # A NIC per GPU is what puts one behind each GPU's PCIe switch (PATH_PXB) on the NVSwitch
    # servers NVLS runs on (DGX/HGX H100 and B200, AWS P5/P6).
    behind = fabric is not None and fabric.nics_per_node >= gpn
    col = _server_columns(n_nodes)
    ll_row = (row if row in LL_MAX_BW_GBPS else "ampere") if n_nodes == 1 else "volta"  # Intel CPU row across servers
    return FabricFacts(
        spec=spec, fabric=fabric, n_ranks=topology.n_gpus, n_nodes=n_nodes, gpus_per_node=gpn, generation=gen,
        rccl=rccl, crosses_nics=crosses, intra_hw=intra_hw, inter_hw=inter_hw,
        intra_hop_scale=node.gpu_link_latency_s / (_hw_latency_us(rccl, intra_hw, "ring", 2) * US),
        inter_hop_scale=inter, ports_per_nic=nic_layout(spec).ports_per_nic,
        nccl_picks_tree_channels=crosses and fabric.transport.kind not in ("tcpx", "tcpxo"),
        ramp_scope=_ramp_scope(fabric, crosses, node.interconnect),
        nvls=nvls_tuning(row, n_nodes if crosses else 1, nic_gbyte_per_s, gpn, behind),
        nvls_heads=max(1, min(NVLS_MAX_ARITY, topology.n_gpus)),
        nvls_weight=1.0 / NVLS_EFFICIENCY.get(row, 0.85),
        ll_max_bw_bytes_per_s=LL_MAX_BW_GBPS[ll_row][col] * 1e9,
        tree_channel_max_bw_bytes_per_s=_per_channel(PER_CHANNEL_MAX_TREE_BW_GBPS, row, col),
        ring_ll128_channel_max_bw_bytes_per_s=_per_channel(PER_CHANNEL_MAX_RING_LL128_BW_GBPS, row, col),
        tree_ll128_channel_max_bw_bytes_per_s=_per_channel(PER_CHANNEL_MAX_TREE_LL128_BW_GBPS, row, col),
    )


def _per_channel(table: dict[str, tuple[float, float, float]], row: str, col: int) -> float:
    """A per-channel cap of NCCL's table (GB/s by generation x server column) in bytes/s; Hopper's
    row for a generation the table lacks."""
    return table.get(row, table["hopper"])[col] * 1e9
