"""One server's links and routes: the template every server of a cluster repeats.

A server is a small directed graph: GPUs, the NVSwitch (or a flat PCIe hub), direct
GPU-to-GPU links (NVLink meshes, NVLink bridges, AMD xGMI), PCIe switches, the CPUs'
root complexes joined by the inter-socket link, host memory and the NICs. Each link
belongs to a *family* of identical links (all GPU up-links, all PCIe switch uplinks...),
which :class:`~dpsim.network.tiers.TierNetwork` numbers ``offset + server x lanes + lane``
and counts by symmetry, and which :func:`dpsim.topology.graph.build_graph` writes as
edges ``n{server}.{src} -> n{server}.{dst}``. The routes here (between two GPUs, from a GPU
to its NIC and back, to the NVSwitch) are the fewest-hop paths of that graph where GPUs
never forward (``tests/test_fabric.py`` compares them with a search).

Layouts (``node.interconnect``):

- ``nvswitch``: every GPU's NVLinks go to the NVSwitch (``gpu_up``/``gpu_down``).
- ``pcie``: every GPU on one flat PCIe hub (the original PCIe model, no PCIe tree).
- ``pcie-tree``: GPUs behind ``pcie_switches`` PCIe switches (PLX), the switches under the
  root complexes of ``sockets`` CPUs, the CPUs joined by UPI/xGMI: GPUs on one switch talk
  through it, others through the root complex and, across sockets, the inter-socket link.
  With ``node.p2p: false`` GPUs cannot reach each other's memory (GeForce drivers, an
  IOMMU): NCCL's SHM transport stages every byte between two GPUs in the receiver's host
  memory, GPU -> switch -> CPU (-> other CPU) -> memory -> CPU -> switch -> GPU, even under
  one switch (NVIDIA/nccl src/transport/shm.cc: when the P2P transport cannot connect a pair,
  SHM's buffers in pinned host memory carry it; NVIDIA/nccl-tests#117: GeForce RTX 2080 Ti
  pairs report "CANNOT Access Peer" in p2pBandwidthLatencyTest). The receiving GPU's kernel reads
  those bytes from host memory at ``node.shm_bandwidth_bytes_per_s`` (9 GB/s by default,
  NVIDIA/nccl#406), its link into the GPU capped there, whatever the link's width.
- ``nvlink-mesh``: direct NVLinks between GPU pairs (``mesh_links``, e.g. the DGX-1
  hybrid cube mesh), the rest over the PCIe tree.
- ``nvlink-bridge``: NVLink bridges joining GPU pairs (2k, 2k+1), the rest over the PCIe tree.
- ``xgmi``: AMD Infinity Fabric links between GPU pairs (``mesh_links``; every pair on
  MI300X), the NICs over the PCIe tree.

NICs: with a GPUDirect transport the NIC hangs off a PCIe switch and GPU traffic goes
GPU -> switch (-> root complex -> switch) -> NIC. Without it (sockets, ``*-host``) every
byte is staged in host memory: GPU -> switch -> CPU -> memory -> NIC, the memory link of
each direction carrying ``host_memory / (2 x passes)`` (the memory's bandwidth split between
the two directions, each staged byte costing the transport's ``host_memory_passes``).
"""

from __future__ import annotations

import functools
from dataclasses import field

import numpy as np

from dpsim.frozen import frozen_dataclass
from dpsim.topology.fabric import nic_layout_of
from dpsim.topology.spec import nic_fabric

HUB_KINDS = ("nvswitch", "pcie")
"""Layouts where every GPU has one link to a hub node named after the layout."""
TREE_KINDS = ("pcie-tree", "nvlink-mesh", "nvlink-bridge", "xgmi")
"""Layouts with an explicit PCIe tree (switches, root complexes, inter-socket link)."""
MESH_KINDS = ("nvlink-mesh", "nvlink-bridge", "xgmi")
"""Layouts with direct GPU-to-GPU links."""


@frozen_dataclass
class ServerLink:
    """One directed link of a server."""

    family: str
    """Family of identical links it belongs to."""
    src: str
    """Local node it leaves (``gpu3``, ``nvswitch``, ``pcie1``, ``cpu0``, ``mem0``, ``nic2``)."""
    dst: str
    """Local node it enters (``leaf`` for a NIC's cable: named by the fabric)."""
    capacity_bytes_per_s: float
    """What NCCL drives through it."""
    latency_s: float
    """Hop latency charged on it."""
    link_class: str
    """``nvlink``, ``xgmi``, ``pcie``, ``upi``, ``host-memory``, or the fabric kind for NIC cables."""


@frozen_dataclass
class Family:
    """Links of one family, in lane order."""

    name: str
    """Family name."""
    links: tuple[int, ...]
    """Template link indices, lane by lane."""
    capacity_bytes_per_s: float
    """Capacity of each of its links."""
    latency_s: float
    """Latency of each of its links."""
    link_class: str
    """Link class of its links."""
    intra: bool
    """Used by routes between GPUs of one server (always present); else only by NIC paths."""
    nic: bool = False
    """NIC <-> switch cables (what a per-message NIC overhead slows down)."""


@frozen_dataclass
class ServerTemplate:
    """A server's links, families and routes (see the module docstring)."""

    gpus: int
    """GPUs per server."""
    layout: str
    """``node.interconnect``."""
    links: tuple[ServerLink, ...]
    """Every directed link."""
    families: tuple[Family, ...]
    """Families in numbering order."""
    nodes: tuple[tuple[str, str], ...]
    """Local nodes and their kinds (``gpu``, ``nvswitch``, ``pcie``, ``cpu``, ``mem``, ``nic``)."""
    nic_nodes: int
    """NIC nodes (0 without a NIC fabric)."""
    nic_of: np.ndarray
    """NIC node each GPU's traffic leaves through."""
    ring_orders: tuple[tuple[int, ...], ...]
    """Cycles over the local GPUs that rings follow (one per ring; the identity for hubs)."""
    _intra: np.ndarray = field(repr=False)
    """``(g, g, L)`` link indices of the route between two GPUs, ``-1`` padded."""
    _out: np.ndarray = field(repr=False)
    """``(g, L)`` route from a GPU to its NIC's cable (the cable included), ``-1`` padded."""
    _in: np.ndarray = field(repr=False)
    """``(g, L)`` route from a NIC's cable to a GPU."""
    _to_hub: np.ndarray = field(repr=False)
    """``(g,)`` GPU -> hub link (``-1`` without a hub)."""
    _from_hub: np.ndarray = field(repr=False)
    """``(g,)`` hub -> GPU link."""

    @property
    def hub(self) -> str | None:
        """The hub's local name (``nvswitch`` or ``pcie``) on hub layouts."""
        return self.layout if self.layout in HUB_KINDS else None

    def family(self, name: str) -> Family:
        """The family called ``name``."""
        for f in self.families:
            if f.name == name:
                return f
        raise KeyError(name)

    @functools.cached_property
    def lane_of(self) -> tuple[np.ndarray, np.ndarray]:
        """``(family index, lane)`` of every link."""
        fam = np.full(len(self.links), -1, np.int64)
        lane = np.full(len(self.links), -1, np.int64)
        for k, f in enumerate(self.families):
            fam[list(f.links)] = k
            lane[list(f.links)] = np.arange(len(f.links))
        return fam, lane

    def intra_routes(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """``(flows, L)`` link indices of local routes (``-1`` endpoints are the hub; ``-1`` padded)."""
        src, dst = np.asarray(src, np.int64), np.asarray(dst, np.int64)
        out = np.full((len(src), self._intra.shape[2]), -1, np.int64)
        plain = (src >= 0) & (dst >= 0)
        out[plain] = self._intra[src[plain], dst[plain]]
        up, down = dst < 0, src < 0
        out[up, 0] = self._to_hub[src[up]]
        out[down, 0] = self._from_hub[dst[down]]
        return out

    def out_routes(self, local: np.ndarray) -> np.ndarray:
        """``(flows, L)`` links from each GPU to the leaf side of its NIC."""
        return self._out[np.asarray(local, np.int64)]

    def in_routes(self, local: np.ndarray) -> np.ndarray:
        """``(flows, L)`` links from the leaf side of a NIC to each GPU."""
        return self._in[np.asarray(local, np.int64)]

    def to_hub(self, local: np.ndarray) -> np.ndarray:
        """GPU -> hub link of each GPU."""
        return self._to_hub[np.asarray(local, np.int64)]

    def from_hub(self, local: np.ndarray) -> np.ndarray:
        """Hub -> GPU link of each GPU."""
        return self._from_hub[np.asarray(local, np.int64)]

    @functools.cached_property
    def shared_with_nic_paths(self) -> bool:
        """Some link carries both traffic between two GPUs of the server and traffic to a NIC."""
        # Sets of the link ids straight away: np.unique would also import numpy.ma (~13 ms of a
        # predict's start-up) for its masked-array check.
        intra = set(self._intra[self._intra >= 0].tolist())
        nic = set(self._out[self._out >= 0].tolist()) | set(self._in[self._in >= 0].tolist())
        return bool(intra & nic)


def pcie_switch_of_gpu(node, gpn: int) -> np.ndarray:
    """PCIe switch of each GPU of a tree layout (GPUs split evenly, in order)."""
    s = node.pcie_switches
    return np.arange(gpn) * s // gpn


def _nic_switch(j: int, nn: int, switches: int) -> int:
    return j * switches // nn


def build_server(spec) -> ServerTemplate:
    """The template of one server of ``spec`` (a :class:`~dpsim.topology.spec.TopologySpec`)."""
    return _build(spec.node, spec.fabric)


@functools.lru_cache(maxsize=256)
def _build(node, fabric) -> ServerTemplate:
    g = node.gpus_per_node
    layout = node.interconnect
    links: list[ServerLink] = []
    fam_links: dict[str, list[int]] = {}
    fam_intra: dict[str, bool] = {}
    nodes: dict[str, str] = {}

    def add(family: str, src: str, dst: str, cap: float, lat: float, cls: str, intra: bool) -> int:
        links.append(ServerLink(family=family, src=src, dst=dst, capacity_bytes_per_s=cap, latency_s=lat,
                                link_class=cls))
        fam_links.setdefault(family, []).append(len(links) - 1)
        fam_intra[family] = fam_intra.get(family, False) or intra
        return len(links) - 1

    for k in range(g):
        nodes[f"gpu{k}"] = "gpu"
    gpu_rate = node.gpu_link_bandwidth_bytes_per_s * node.gpu_link_efficiency
    nics = nic_fabric(fabric)
    layout_nics = nic_layout_of(g, fabric)
    nn = layout_nics.nic_nodes if nics else 0
    ports = layout_nics.ports_per_nic
    transport = fabric.transport if nics else None
    staged = transport is not None and not transport.gpudirect
    tree = layout in TREE_KINDS
    L = 7
    intra = np.full((g, g, L), -1, np.int64)
    out = np.full((g, L), -1, np.int64)
    inn = np.full((g, L), -1, np.int64)
    to_hub = np.full(g, -1, np.int64)
    from_hub = np.full(g, -1, np.int64)

    # ---- inside the server
    hub_cls = "nvlink" if layout == "nvswitch" else "pcie"
    if layout in HUB_KINDS:
        nodes[layout] = layout
        up = [add("gpu_up", f"gpu{k}", layout, gpu_rate, node.gpu_link_latency_s, hub_cls, True) for k in range(g)]
        down = [add("gpu_down", layout, f"gpu{k}", gpu_rate, 0.0, hub_cls, True) for k in range(g)]
        to_hub[:] = up
        from_hub[:] = down
        for a in range(g):
            for b in range(g):
                if a != b:
                    intra[a, b, :2] = (up[a], down[b])
        switches = nn
        sw_of_gpu = np.arange(g) // (g // nn) if nn else np.zeros(g, np.int64)
        sockets = 1
    else:
        switches = node.pcie_switches
        sw_of_gpu = pcie_switch_of_gpu(node, g)
        sockets = node.sockets
    # PCIe switches (tree layouts: the tree; hub layouts: one per NIC, NIC side only).
    has_switches = tree or nn > 0
    gpu_pcie = pcie_gpu = None
    if has_switches:
        for s in range(switches):
            nodes[f"pcie{s}"] = "pcie"
        pcie_rate = gpu_rate if layout == "pcie-tree" else node.pcie_bandwidth_bytes_per_s
        pcie_lat = node.gpu_link_latency_s if layout == "pcie-tree" else 0.0
        gpu_pcie = [add("gpu_pcie", f"gpu{k}", f"pcie{sw_of_gpu[k]}", pcie_rate, pcie_lat, "pcie", tree)
                    for k in range(g)]
        # Without P2P every byte reaching a GPU is read by its kernel from host memory (SHM, and a
        # staged NIC's bytes), at the SHM rate rather than the link's (NodeSpec.shm_bandwidth_bytes_per_s).
        # A GPUDirect NIC's writes into such a GPU are capped too: an approximation, on no system here.
        shm_in = layout == "pcie-tree" and not node.p2p
        into_gpu = min(pcie_rate, node.shm_bandwidth_bytes_per_s) if shm_in else pcie_rate
        pcie_gpu = [add("pcie_gpu", f"pcie{sw_of_gpu[k]}", f"gpu{k}", into_gpu, 0.0, "pcie", tree) for k in range(g)]
    socket_of_switch = np.arange(max(switches, 1)) * sockets // max(switches, 1)
    need_cpu = tree or staged
    pcie_host = host_pcie = None
    cpu_cpu: dict[tuple[int, int], int] = {}
    if need_cpu:
        for c in range(sockets):
            nodes[f"cpu{c}"] = "cpu"
        host_rate = node.host_pcie_bandwidth_bytes_per_s or node.pcie_bandwidth_bytes_per_s
        pcie_host = [add("pcie_host", f"pcie{s}", f"cpu{socket_of_switch[s]}", host_rate, 0.0, "pcie", tree)
                     for s in range(switches)]
        host_pcie = [add("host_pcie", f"cpu{socket_of_switch[s]}", f"pcie{s}", host_rate, 0.0, "pcie", tree)
                     for s in range(switches)]
        if sockets == 2:
            for a, b in ((0, 1), (1, 0)):
                cpu_cpu[(a, b)] = add("cpu_cpu", f"cpu{a}", f"cpu{b}", node.inter_socket_bandwidth_bytes_per_s, 0.0,
                                      "upi", tree)

    shm = layout == "pcie-tree" and not node.p2p
    host_mem: list[int] = []
    mem_host: list[int] = []

    def add_host_memory() -> None:
        """One memory node per socket, once. Each staged byte is written and read there: a NIC
        transport's ``host_memory_passes`` times on each side, NCCL's SHM transport once each way
        (the sender's GPU writes the receiver's host buffer, the receiver's GPU reads it)."""
        if host_mem:
            return
        passes = max(1, transport.host_memory_passes) if staged else 1
        for c in range(sockets):
            nodes[f"mem{c}"] = "mem"
        mem_rate = node.host_memory_bandwidth_bytes_per_s / (2 * passes)
        host_mem.extend(add("host_mem", f"cpu{c}", f"mem{c}", mem_rate, 0.0, "host-memory", shm)
                        for c in range(sockets))
        mem_host.extend(add("mem_host", f"mem{c}", f"cpu{c}", mem_rate, 0.0, "host-memory", shm)
                        for c in range(sockets))

    if shm:
        add_host_memory()

    def pcie_path(a_sw: int, b_sw: int) -> list[int]:
        """Switch ``a_sw`` to switch ``b_sw`` through the root complexes (empty when the same)."""
        if a_sw == b_sw:
            return []
        ca, cb = int(socket_of_switch[a_sw]), int(socket_of_switch[b_sw])
        hops = [pcie_host[a_sw]]
        if ca != cb:
            hops.append(cpu_cpu[(ca, cb)])
        hops.append(host_pcie[b_sw])
        return hops

    def shm_path(a_sw: int, b_sw: int) -> list[int]:
        """Switch ``a_sw`` up to host memory and down to switch ``b_sw`` (NCCL's SHM transport).
        The buffer is placed in the receiver's socket, so a byte crosses sockets on its way
        there (an assumption: which NUMA node holds it is not modelled further)."""
        ca, cb = int(socket_of_switch[a_sw]), int(socket_of_switch[b_sw])
        hops = [pcie_host[a_sw]]
        if ca != cb:
            hops.append(cpu_cpu[(ca, cb)])
        return [*hops, host_mem[cb], mem_host[cb], host_pcie[b_sw]]

    if tree:
        mesh_cls = "xgmi" if layout == "xgmi" else "nvlink"
        direct: dict[tuple[int, int], int] = {}
        groups: dict[int, list[tuple[int, int]]] = {}
        for a, b, m in mesh_pairs(node):
            groups.setdefault(m, []).extend([(a, b), (b, a)])
        for m in sorted(groups):
            fam = "mesh" if len(groups) == 1 else f"mesh_x{m}"
            for a, b in sorted(groups[m]):
                direct[(a, b)] = add(fam, f"gpu{a}", f"gpu{b}", m * gpu_rate, node.gpu_link_latency_s, mesh_cls, True)
        for a in range(g):
            for b in range(g):
                if a == b:
                    continue
                if (a, b) in direct:
                    hops = [direct[(a, b)]]
                elif shm:
                    hops = [gpu_pcie[a], *shm_path(int(sw_of_gpu[a]), int(sw_of_gpu[b])), pcie_gpu[b]]
                else:
                    hops = [gpu_pcie[a], *pcie_path(int(sw_of_gpu[a]), int(sw_of_gpu[b])), pcie_gpu[b]]
                intra[a, b, :len(hops)] = hops

    # ---- NICs
    nic_of = np.zeros(g, np.int64)
    if nn:
        for j in range(nn):
            nodes[f"nic{j}"] = "nic"
        nic_of = np.arange(g) // (g // nn) if nn <= g else np.arange(g)
        nic_sw = ([_nic_switch(j, nn, switches) for j in range(nn)] if tree else list(range(nn)))
        port_pcie = node.pcie_bandwidth_bytes_per_s * ports
        rate = fabric.nic_bandwidth_bytes_per_s * fabric.nic_efficiency * ports
        if staged:
            add_host_memory()
            nic_cpu = [int(socket_of_switch[s]) for s in nic_sw]
            mem_nic = [add("mem_nic", f"mem{nic_cpu[j]}", f"nic{j}", port_pcie, 0.0, "pcie", False) for j in range(nn)]
            nic_mem = [add("nic_mem", f"nic{j}", f"mem{nic_cpu[j]}", port_pcie, 0.0, "pcie", False) for j in range(nn)]
        else:
            pcie_nic = [add("pcie_nic", f"pcie{nic_sw[j]}", f"nic{j}", port_pcie, 0.0, "pcie", False) for j in range(nn)]
            nic_pcie = [add("nic_pcie", f"nic{j}", f"pcie{nic_sw[j]}", port_pcie, 0.0, "pcie", False) for j in range(nn)]
        nic_leaf = [add("nic_leaf", f"nic{j}", "leaf", rate, fabric.nic_latency_s, fabric.kind, False)
                    for j in range(nn)]
        leaf_nic = [add("leaf_nic", "leaf", f"nic{j}", rate, 0.0, fabric.kind, False) for j in range(nn)]
        for k in range(g):
            j = int(nic_of[k])
            sw = int(sw_of_gpu[k])
            if staged:
                c_gpu, c_nic = int(socket_of_switch[sw]), nic_cpu[j]
                cross_out = [cpu_cpu[(c_gpu, c_nic)]] if c_gpu != c_nic else []
                cross_in = [cpu_cpu[(c_nic, c_gpu)]] if c_gpu != c_nic else []
                o = [gpu_pcie[k], pcie_host[sw], *cross_out, host_mem[c_nic], mem_nic[j], nic_leaf[j]]
                i = [leaf_nic[j], nic_mem[j], mem_host[c_nic], *cross_in, host_pcie[sw], pcie_gpu[k]]
            else:
                o = [gpu_pcie[k], *pcie_path(sw, nic_sw[j]), pcie_nic[j], nic_leaf[j]]
                i = [leaf_nic[j], nic_pcie[j], *pcie_path(nic_sw[j], sw), pcie_gpu[k]]
            out[k, :len(o)] = o
            inn[k, :len(i)] = i

    # ---- families, in numbering order (the hub layouts keep the historical order)
    order = ["gpu_up", "gpu_down", *sorted(f for f in fam_links if f.startswith("mesh")), "gpu_pcie", "pcie_gpu",
             "pcie_host", "host_pcie", "cpu_cpu", "pcie_nic", "nic_pcie", "host_mem", "mem_host", "mem_nic", "nic_mem",
             "nic_leaf", "leaf_nic"]
    families = []
    for name in order:
        if name not in fam_links:
            continue
        idx = fam_links[name]
        first = links[idx[0]]
        caps = {links[i].capacity_bytes_per_s for i in idx}
        assert len(caps) == 1, f"family {name} mixes capacities"
        families.append(Family(name=name, links=tuple(idx), capacity_bytes_per_s=first.capacity_bytes_per_s,
                               latency_s=first.latency_s, link_class=first.link_class, intra=fam_intra[name],
                               nic=name in ("nic_leaf", "leaf_nic")))
    return ServerTemplate(gpus=g, layout=layout, links=tuple(links), families=tuple(families),
                          nodes=tuple(nodes.items()), nic_nodes=nn, nic_of=nic_of,
                          ring_orders=ring_orders(node), _intra=intra, _out=out, _in=inn, _to_hub=to_hub,
                          _from_hub=from_hub)


def mesh_pairs(node) -> list[tuple[int, int, int]]:
    """``(a, b, links)`` of every GPU pair joined directly (``a < b``)."""
    if node.interconnect == "nvlink-bridge" and not node.mesh_links:
        return [(2 * k, 2 * k + 1, 1) for k in range(node.gpus_per_node // 2)]
    return sorted((min(a, b), max(a, b), m) for a, b, m in node.mesh_links)


def ring_orders(node) -> tuple[tuple[int, ...], ...]:
    """Cycles over a server's GPUs that NCCL's rings follow.

    Hubs and PCIe trees: the GPUs in order (one ring reaches every link it needs; GPUs on a
    switch are numbered together). Meshes: ``node.ring_orders`` when given (RCCL's own ring
    table for MI300X), else edge-disjoint Hamiltonian cycles over the direct links, each
    both ways, found by a small search (the DGX-1 cube mesh has three), as NCCL's ring search
    keeps rings on NVLink; a mesh without a Hamiltonian cycle falls back to the GPUs in order
    (missing hops then go over PCIe).
    """
    g = node.gpus_per_node
    if node.ring_orders:
        return tuple(tuple(int(x) for x in r) for r in node.ring_orders)
    if node.interconnect not in MESH_KINDS or g <= 2:
        return (tuple(range(g)),)
    left = {}
    for a, b, m in mesh_pairs(node):
        left[(a, b)] = m
        left[(b, a)] = m
    cycles = []
    while len(cycles) < 16:
        cyc = _hamiltonian(g, left)
        if cyc is None:
            break
        cycles.append(cyc)
        for x, y in zip(cyc, cyc[1:] + cyc[:1]):
            for e in ((x, y), (y, x)):
                left[e] -= 1
                if left[e] == 0:
                    del left[e]
    if not cycles:
        return (tuple(range(g)),)
    out = []
    for cyc in cycles:
        out.append(tuple(cyc))
        out.append((cyc[0], *reversed(cyc[1:])))
    return tuple(out)


def _hamiltonian(g: int, edges: dict[tuple[int, int], int]) -> list[int] | None:
    """A Hamiltonian cycle from GPU 0 over ``edges`` (depth-first, lowest neighbour first)."""
    adj = {a: sorted(b for (x, b) in edges if x == a) for a in range(g)}
    path = [0]
    seen = {0}

    def extend() -> bool:
        if len(path) == g:
            return (path[-1], 0) in edges
        for b in adj[path[-1]]:
            if b not in seen:
                path.append(b)
                seen.add(b)
                if extend():
                    return True
                seen.discard(b)
                path.pop()
        return False

    return list(path) if g <= 16 and extend() else None


def with_gpus_per_node(node, n: int):
    """``node`` with ``n`` GPUs: a hub layout as it is; a tree or mesh layout keeps its first
    ``n`` GPUs (the links among them, the switches they sit behind) — how a communicator of
    ``n`` GPUs per server (FSDP hybrid, a tensor-parallel group) or ``--gpus-per-node`` sees it."""
    from dataclasses import replace

    if n == node.gpus_per_node:
        return node
    if node.interconnect in HUB_KINDS:
        return replace(node, gpus_per_node=n)
    g = node.gpus_per_node
    switches = max(1, min(node.pcie_switches, n, -(-node.pcie_switches * n // g)))
    while n % switches:
        switches -= 1
    sockets = node.sockets if switches % node.sockets == 0 else 1
    links = tuple((a, b, m) for a, b, m in node.mesh_links if a < n and b < n)
    layout = node.interconnect
    if layout == "nvlink-bridge" and not node.mesh_links and n % 2:
        layout = "pcie-tree"
    if layout in ("nvlink-mesh", "xgmi") and not links:
        layout = "pcie-tree"
    return replace(node, gpus_per_node=n, interconnect=layout, pcie_switches=switches, sockets=sockets,
                   mesh_links=links, ring_orders=())


def check_mesh(node) -> str | None:
    """Why ``node``'s mesh links are not valid (``None`` when they are)."""
    g = node.gpus_per_node
    seen = set()
    for item in node.mesh_links:
        a, b, m = item
        if not (0 <= a < g and 0 <= b < g) or a == b:
            return f"{list(item)} joins GPUs outside 0..{g - 1} or a GPU to itself"
        if m < 1:
            return f"{list(item)} has {m} links; expected at least 1"
        key = (min(a, b), max(a, b))
        if key in seen:
            return f"{list(item)} repeats the pair {list(key)}"
        seen.add(key)
    return None


def check_ring_orders(node) -> str | None:
    """Why ``node.ring_orders`` are not valid (``None`` when they are)."""
    g = node.gpus_per_node
    for r in node.ring_orders:
        if sorted(r) != list(range(g)):
            return f"{list(r)} is not an order of the {g} GPUs 0..{g - 1}"
    return None


__all__ = [
    "HUB_KINDS",
    "MESH_KINDS",
    "TREE_KINDS",
    "Family",
    "ServerLink",
    "ServerTemplate",
    "build_server",
    "check_mesh",
    "check_ring_orders",
    "mesh_pairs",
    "ring_orders",
    "with_gpus_per_node",
]
