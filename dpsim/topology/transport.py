"""How bytes cross a NIC: the transport of each network (``fabric.transport``) and the NIC presets (``fabric.nic``).

A NIC's line rate is not what NCCL gets out of it. What it gets depends on the transport
NCCL's network plugin runs over the NIC:

- **payload efficiency** on a loaded link (headers, encoding, the plugin's own protocol):
  RDMA NICs deliver 0.96-0.97 of line rate to NCCL, TCP over Ethernet at most the TCP/IP
  payload share of a frame;
- **streams**: NCCL's socket transport moves a connection's data over a few TCP sockets,
  and a socket runs at what one CPU thread and one TCP stream reach, not at line rate:
  "the NCCL bandwidth will be the minimum speed of the sockets multiplied by the number
  of sockets" (S. Jeaugey, NVIDIA/nccl-tests#83). The NIC then carries at most
  ``connections_per_nic x streams_per_connection x stream rate``;
- **per-message cost** (LogGP's gap: a message of c bytes through a port of rate r runs
  at r / (1 + g r / c));
- **whether data crosses host memory**: without GPUDirect RDMA (the socket transport
  always; an RDMA NIC whose driver or PCIe topology does not allow it) every byte is
  staged in host memory on both sides, through the GPU's and the NIC's PCIe links, the
  PCIe switch's uplink to the CPU and the host memory (:mod:`dpsim.topology.server`);
- **a per-call host cost** (the proxy thread, the plugin's completion path): ``None``
  takes the fitted default of the transport's kind (:mod:`dpsim.collectives.nccl_tuning`);
- **which NCCL protocols may cross it**: LL and LL128 put a flag in every 8- or 128-byte
  line and read the data as soon as the flag arrives, so they are only safe where the
  network writes those lines whole and in order; a plugin whose NIC cannot promise it
  forces ``NCCL_PROTO=simple`` (AWS EFA v1), and small messages then pay the Simple
  protocol's latencies.

:func:`effective_nic_efficiency` folds the first two into the fraction of line rate the
flow model drives through a NIC port. Every number cites where it comes from; a number
that is an assumption says so (``assumed``), and ``dpsim predict`` then shows how much
the answer moves with it.
"""

from __future__ import annotations

import math

from dpsim.frozen import frozen_dataclass
from dpsim.units import GB

TRANSPORT_KINDS = ("ib", "roce", "socket", "efa", "tcpx", "tcpxo")
"""NCCL network plugins dpsim models: IB verbs over InfiniBand or RoCE, the socket (TCP)
transport, AWS EFA (aws-ofi-nccl over libfabric SRD), Google GPUDirect-TCPX/TCPXO."""

ETHERNET_FRAMING_BYTES = 38
"""Bytes an Ethernet frame costs on the wire beyond its MTU: 14 header + 4 FCS + 8
preamble/SFD + 12 inter-frame gap (IEEE 802.3)."""
TCP_IP_HEADER_BYTES = 52
"""IPv4 header 20 (RFC 791) + TCP header 20 (RFC 793) + timestamps option 12 (RFC 7323,
on by default in Linux)."""


def tcp_payload_efficiency(mtu_bytes: int) -> float:
    """Share of an Ethernet link's line rate that carries TCP payload with full frames of ``mtu_bytes``:
    0.941 at the Linux default MTU 1500, 0.990 with 9000-byte jumbo frames."""
    return (mtu_bytes - TCP_IP_HEADER_BYTES) / (mtu_bytes + ETHERNET_FRAMING_BYTES)


@frozen_dataclass
class TransportSpec:
    """The transport NCCL runs over a NIC, and what it costs."""

    name: str
    """Preset key (``ib``, ``roce``, ``socket``...) or ``custom``."""
    kind: str
    """NCCL network plugin family: one of :data:`TRANSPORT_KINDS`."""
    gpudirect: bool
    """The NIC reads and writes GPU memory directly (GPUDirect RDMA, or TCPX/TCPXO's device
    memory); ``False``: every byte is staged through host memory on both sides."""
    wire_efficiency: float
    """Share of the line rate a loaded NIC delivers as NCCL payload (headers, encoding)."""
    streams_per_connection: int = 1
    """Sockets (``NCCL_NSOCKS_PERTHREAD x max(1, NCCL_SOCKET_NTHREADS)``) or queue pairs
    (``NCCL_IB_QPS_PER_CONNECTION``) one NCCL connection spreads its data over."""
    stream_bytes_per_s: float = math.inf
    """What one stream carries at most, bytes/s (``inf``: no per-stream limit, RDMA)."""
    connections_per_nic: int = 2
    """NCCL connections (channels) through one NIC port, per direction."""
    message_overhead_s: float = 0.0
    """NIC or plugin time per network message, seconds (LogGP's gap)."""
    host_memory_passes: int = 0
    """Times host memory is read or written per staged byte on each side (0 with GPUDirect)."""
    call_overhead_s: float | None = None
    """Per-call host overhead, seconds; ``None``: the fitted default of the transport's kind."""
    network_protocols: tuple[str, ...] = ("LL", "LL128", "Simple")
    """NCCL protocols a collective that crosses this transport may run (the plugin sets
    ``NCCL_PROTO`` to the others' exclusion when the NIC cannot deliver them safely)."""
    assumed: bool = False
    """Its efficiency is an assumption rather than a measurement: ``predict`` shows how much
    the answer moves with it."""
    sources: tuple[str, ...] = ()
    """Where each number comes from."""

    @property
    def stream_cap_bytes_per_s(self) -> float:
        """What all the streams through one NIC port carry at most, bytes/s (``inf``: no limit)."""
        return self.connections_per_nic * self.streams_per_connection * self.stream_bytes_per_s


def effective_nic_efficiency(transport: TransportSpec, line_bytes_per_s: float) -> float:
    """Fraction of a NIC port's line rate NCCL drives through it: the payload share, or less
    when the streams the transport opens cannot fill the port."""
    cap = transport.stream_cap_bytes_per_s
    return min(transport.wire_efficiency, cap / line_bytes_per_s if math.isfinite(cap) else math.inf)


# ----------------------------------------------------------------------------- transports

_NCCL = "NVIDIA/nccl@5067397"

SOCKET_THREAD_BYTES_PER_S = 4.4 * GB
"""What one CPU thread drives through TCP sockets on a bare-metal host, bytes/s: iperf3 up to
3.15 serves all its streams from one thread and stops at 35.2 Gb/s on 100 GbE whatever the
number of streams (esnet/iperf#286, CentOS 7.1 hosts, 16 streams); one stream of a 2024 host
carries 36.7 Gb/s (esnet/iperf#55, ``iperf3 --zerocopy``). 35.2 Gb/s / 8 = 4.4 GB/s of payload.
A thread that drives several sockets splits it (:func:`socket_stream_bytes_per_s`)."""
AWS_FLOW_BYTES_PER_S = 10e9 / 8
"""AWS caps one TCP flow (a 5-tuple) at 10 Gb/s between instances of a cluster placement group
(5 Gb/s outside one): AWS EC2 User Guide, 'Amazon EC2 instance network bandwidth', single-flow traffic."""
GCP_FLOW_BYTES_PER_S = 2.06 * GB
"""One TCP socket between two GCP VMs: NVIDIA/nccl#209 (C. Winter, NCCL 2.3.7, 2x 32 Gb/s VMs, one
ring of one socket) reaches 2.06 GB/s bus bandwidth; 8 rings reach 3.75 GB/s, the VM's line rate."""


def socket_stream_bytes_per_s(sockets_per_thread: int, flow_cap_bytes_per_s: float = math.inf) -> float:
    """What one socket of NCCL's socket transport carries: its thread's rate
    (:data:`SOCKET_THREAD_BYTES_PER_S`) shared by the sockets the thread drives, or less where the
    network caps a flow (a cloud's per-flow limit)."""
    return min(flow_cap_bytes_per_s, SOCKET_THREAD_BYTES_PER_S / sockets_per_thread)


_SOCKET_SOURCES = (
    (f"{_NCCL} src/transport/net_socket.cc ncclNetSocketGetNsockNthread: a NIC that is neither AWS (vendor 0x1d0f: "
    "2 threads x 8 sockets) nor GCP gVNIC (0x1ae0: 4 threads x 1 socket) gets 0 helper threads and 1 socket per "
    "connection, driven by the proxy thread"),
    (f"{_NCCL} src/transport/net_socket.cc ncclNetSocketGetProperties: ptrSupport NCCL_PTR_HOST (data staged in "
    "host memory)"),
    "NVIDIA/nccl-tests#83 (S. Jeaugey): NCCL socket bandwidth = the slowest socket's speed x the number of sockets",
    ("one socket per thread: stream_bytes_per_s 4.4e9, what one thread drives through TCP (esnet/iperf#286: "
    "35.2 Gb/s; esnet/iperf#55: 36.7 Gb/s on one stream; assumed for any bare-metal CPU and kernel: calibrate)"),
    "NVIDIA/nccl-tests#284 (NCCL_DEBUG=INFO log): two channels through one NET/Socket NIC -> connections_per_nic 2",
    ("wire_efficiency: TCP payload share of a 1500-byte-MTU Ethernet frame, (1500 - 52) / (1500 + 38) = 0.941 "
    "(RFC 791/793/7323 headers, IEEE 802.3 framing)"),
    "host_memory_passes 4: DMA write or read by the GPU, the kernel's copy (read + write), DMA by the NIC",
)


def _socket(name: str, streams: int, stream_bytes_per_s: float, wire_efficiency: float,
            extra: tuple[str, ...]) -> TransportSpec:
    """NCCL's socket transport with ``streams`` sockets per connection at ``stream_bytes_per_s`` each."""
    return TransportSpec(name=name, kind="socket", gpudirect=False, wire_efficiency=round(wire_efficiency, 4),
                         streams_per_connection=streams, stream_bytes_per_s=stream_bytes_per_s,
                         connections_per_nic=2, host_memory_passes=4, assumed=True, sources=_SOCKET_SOURCES + extra)


TRANSPORTS: dict[str, TransportSpec] = {
    "ib": TransportSpec(
        name="ib", kind="ib", gpudirect=True, wire_efficiency=0.97, streams_per_connection=1,
        sources=(("hardware.csv H011 / NVIDIA/nccl-tests#267 (AddyLaddy): CX-7 at NDR reaches 48-49 of 50 GB/s per "
                 "NIC in NCCL -> 0.97"),
                 f"{_NCCL} src/transport/net_ib/connect.cc: NCCL_IB_QPS_PER_CONNECTION default 1",
                 "NVIDIA/nccl docs env.rst NCCL_NET_GDR_LEVEL: GPUDirect RDMA when GPU and NIC share a PCIe switch")),
    "ib-host": TransportSpec(
        name="ib-host", kind="ib", gpudirect=False, wire_efficiency=0.97, streams_per_connection=1,
        host_memory_passes=2,
        sources=(("as ib, without GPUDirect RDMA (NCCL_NET_GDR_LEVEL=LOC, or GPU and NIC across the CPU): NCCL "
                 "stages every byte in host memory, written by one device and read by the other (2 passes)"),)),
    "roce": TransportSpec(
        name="roce", kind="roce", gpudirect=True, wire_efficiency=0.96, streams_per_connection=1,
        sources=("NVIDIA/nccl-tests#119 (S. Jeaugey): 24 GB/s is the peak per 200G NIC, 12 GB/s per 100G NIC -> 0.96",
                 ("NVIDIA/nccl docs troubleshooting/performance_and_tuning.rst: on RoCE several QPs per connection "
                 "are often needed (NCCL_IB_QPS_PER_CONNECTION, default 1)"))),
    "roce-host": TransportSpec(
        name="roce-host", kind="roce", gpudirect=False, wire_efficiency=0.96, streams_per_connection=1,
        host_memory_passes=2,
        sources=("as roce, without GPUDirect RDMA: staged in host memory (2 passes)",)),
    "socket": _socket("socket", 1, socket_stream_bytes_per_s(1), tcp_payload_efficiency(1500), ()),
    "socket-aws": _socket(
        "socket-aws", 2 * 8, socket_stream_bytes_per_s(8, AWS_FLOW_BYTES_PER_S), tcp_payload_efficiency(9001),
        ((f"{_NCCL} net_socket.cc: on an AWS ENA NIC (vendor 0x1d0f) 2 threads x 8 sockets = 16 sockets per "
          "connection, each thread's 4.4 GB/s shared by its 8 (0.55 GB/s a socket, under AWS's 10 Gb/s per flow)"),
         "AWS EC2 User Guide 'Network MTU': 9001-byte jumbo frames inside a VPC -> TCP payload share 0.990")),
    "socket-gcp": _socket(
        "socket-gcp", 4 * 1, socket_stream_bytes_per_s(1, GCP_FLOW_BYTES_PER_S), tcp_payload_efficiency(1460),
        ((f"{_NCCL} net_socket.cc: on a GCP gVNIC (vendor 0x1ae0) 4 threads x 1 socket = 4 sockets per connection"),
         ("NVIDIA/nccl#209 (NCCL 2.3.7, GCP VMs): one ring of one socket 2.06 GB/s -> 2.06 GB/s per socket "
          "(assumed for today's VMs: calibrate)"),
         "GCP VPC default MTU 1460 bytes (Google Cloud VPC docs, 'Maximum transmission unit')")),
    "ipoib": _socket(
        "ipoib", 1, socket_stream_bytes_per_s(1), tcp_payload_efficiency(4092),
        (("IPoIB datagram mode MTU 4092 (RFC 4391: 4096-byte IB MTU less the 4-byte IPoIB header): TCP payload "
          "share (4092 - 52) / (4092 + 38) = 0.978, with the framing cost of Ethernet as an upper bound"),)),
    "efa": TransportSpec(
        name="efa", kind="efa", gpudirect=True, wire_efficiency=0.969, streams_per_connection=1,
        sources=(("stas00/ml-engineering@744d01e18b79 network/README.md 'Measuring the inter-node fabric': "
                 "ib_write_bw over SRD on one p5en EFA adapter, 193.72 of 200 Gb/s -> 0.969"),
                 ("aws/aws-ofi-nccl: NCCL's net plugin for EFA (libfabric SRD), progressed by NCCL's proxy thread; "
                 "its per-call cost is the fitted default of kind efa"))),
    "efa-sendrecv": TransportSpec(
        name="efa-sendrecv", kind="efa", gpudirect=True, wire_efficiency=0.969, streams_per_connection=1,
        network_protocols=("Simple",),
        sources=(("as efa, on EFA v1 (p4d/p4de): no RDMA write, so aws-ofi-nccl runs its SENDRECV protocol "
                 "(libfabric tagged send/recv; aws/aws-ofi-nccl#802, B. Barrett: 'different on P4 and P5 (and "
                 "later)')"),
                 ("aws/aws-ofi-nccl#76 (2021, p4d): 'NCCL_PROTO=simple is a must ... EFA doesn't support LL and "
                 "LL128'; aws/aws-ofi-nccl@2daf7d30 src/platform-aws.cpp forces NCCL_PROTO=simple when the "
                 "endpoint cannot set FI_OPT_EFA_*_IN_ORDER_ALIGNED_128_BYTES (byte delivery ordering); "
                 "aws/aws-ofi-nccl#280 and #516 stopped forcing it on P5 (EFA v2), which reports it"))),
    "tcpx": TransportSpec(
        name="tcpx", kind="tcpx", gpudirect=True, wire_efficiency=round(tcp_payload_efficiency(8244), 4),
        streams_per_connection=4, connections_per_nic=2, assumed=True, network_protocols=("Simple",),
        sources=(("GPUDirect-TCPX (Google A3): TCP with payloads received into and sent from GPU memory "
                 "(devmem TCP), no host copy; 4 sockets per connection (NCCL_NSOCKS_PERTHREAD=4 in Google's "
                 "TCPX configuration)"),
                 ("wire_efficiency: TCP payload share of an 8244-byte MTU frame, the MTU of the four GPUDirect-TCPX "
                 "data VPCs of an a3-highgpu-8g cluster (dstackai/dstack@620677d1c "
                 "examples/misc/a3high-clusters/README.md: gcloud compute networks create ... --mtu=8244)"),
                 ("Simple only: Google's TCPX nccl-tests run sets NCCL_PROTO=Simple and NCCL_ALGO=Ring "
                 "(GoogleCloudPlatform/container-engine-accelerators@3a1b61d gpudirect-tcpxo/nccl-config.yaml, "
                 "run-nccl.sh with the NCCL_GPUDIRECTTCPX_* variables)"))),
    "tcpxo": TransportSpec(
        name="tcpxo", kind="tcpxo", gpudirect=True, wire_efficiency=round(tcp_payload_efficiency(8244), 4),
        streams_per_connection=1, connections_per_nic=2, assumed=True, network_protocols=("Simple",),
        sources=(("GPUDirect-TCPXO (Google A3 Mega): TCPX with the data path offloaded to the NIC (no per-socket "
                 "CPU limit modelled)"),
                 "wire_efficiency: as tcpx (assumed)",
                 ("Simple only: Google's TCPXO settings set NCCL_PROTO=Simple (AI-Hypercomputer/gpu-recipes@c72e38d "
                 "src/helm-charts/a3mega/nemo-training/templates/nemo-launcher-job.yaml, 'should likely not be "
                 "adjusted')"))),
}
"""The transports ``fabric.transport`` names (or starts from, as a mapping with overrides)."""

TRANSPORT_ASSUMPTION_NOTE = {
    "socket": ("one TCP socket per NCCL connection carries what one CPU thread drives, ~4.4 GB/s "
               "(esnet/iperf#286, #55), two connections per NIC"),
    "socket-aws": "16 sockets per connection share 2 threads' ~4.4 GB/s each (AWS ENA auto-detection)",
    "socket-gcp": "4 sockets per connection at ~2.06 GB/s each, one GCP VM socket (NVIDIA/nccl#209)",
    "ipoib": "as socket, over IPoIB",
    "tcpx": "TCPX payload share assumed from the MTU",
    "tcpxo": "TCPXO payload share assumed from the MTU",
}
"""What the assumption of an ``assumed`` transport is, in one phrase (for ``predict``)."""


# ----------------------------------------------------------------------------- NIC presets

@frozen_dataclass
class NicPreset:
    """A NIC as sold, and the transport NCCL runs on it by default."""

    name: str
    """``fabric.nic`` value."""
    line_gbit_per_s: float
    """Line rate per port, Gb/s (decimal)."""
    fabric_kind: str
    """``infiniband`` or ``ethernet`` (the link class)."""
    transport: str
    """Key of :data:`TRANSPORTS`."""
    source: str
    """Where the rate comes from."""


def _nics() -> dict[str, NicPreset]:
    out = {}
    eth = "IEEE 802.3 (10GBASE, 25GBASE, 100GBASE, 200GBASE, 400GBASE): {r} Gb/s per port"
    for rate in (10, 25, 100, 200, 400):
        out[f"{rate}gbe-tcp"] = NicPreset(name=f"{rate}gbe-tcp", line_gbit_per_s=rate, fabric_kind="ethernet",
                                          transport="socket", source=eth.format(r=rate))
        out[f"{rate}gbe-roce"] = NicPreset(name=f"{rate}gbe-roce", line_gbit_per_s=rate, fabric_kind="ethernet",
                                           transport="roce", source=eth.format(r=rate))
    ib = "stas00/ml-engineering@744d01e18b79 network/README.md 'InfiniBand' rates (hardware.csv {row}): {r} Gb/s per 4x port"
    for name, rate, row in (("hdr", 200, "H006"), ("ndr", 400, "H007"), ("xdr", 800, "H008")):
        out[f"ib-{name}"] = NicPreset(name=f"ib-{name}", line_gbit_per_s=rate, fabric_kind="infiniband",
                                      transport="ib", source=ib.format(row=row, r=rate))
        out[f"ipoib-{name}"] = NicPreset(name=f"ipoib-{name}", line_gbit_per_s=rate, fabric_kind="infiniband",
                                         transport="ipoib", source=ib.format(row=row, r=rate))
    efa = ("stas00/ml-engineering@744d01e18b79 network/README.md 'EFA': EFA v1 4x100 Gb/s (p4), v2 32x100 Gb/s (p5), "
           "v3 16x200 Gb/s (p5en), v4 8x400 Gb/s (p6-b200)")
    for name, rate in (("efa-v1", 100), ("efa-v2", 100), ("efa-v3", 200), ("efa-v4", 400)):
        # EFA v1 cannot deliver 128-byte-aligned writes in order: LL/LL128 off (TRANSPORTS["efa-sendrecv"]).
        out[name] = NicPreset(name=name, line_gbit_per_s=rate, fabric_kind="ethernet",
                              transport="efa-sendrecv" if name == "efa-v1" else "efa", source=efa)
    gcp = ("stas00/ml-engineering@744d01e18b79 network/README.md inter-node table note 29: A3 High 4x200 Gb/s, "
           "A3 Mega 8x200 Gb/s of accelerator fabric")
    out["gpudirect-tcpx"] = NicPreset(name="gpudirect-tcpx", line_gbit_per_s=200, fabric_kind="ethernet",
                                      transport="tcpx", source=gcp)
    out["gpudirect-tcpxo"] = NicPreset(name="gpudirect-tcpxo", line_gbit_per_s=200, fabric_kind="ethernet",
                                       transport="tcpxo", source=gcp)
    return out


NIC_PRESETS: dict[str, NicPreset] = _nics()
"""The NICs ``fabric.nic`` names: line rate, link class and default transport."""

