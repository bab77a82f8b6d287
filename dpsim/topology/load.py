"""Topology YAML files and the built-in presets: strict validation into :mod:`~dpsim.topology.spec`.

Every error names the file, the field path, the value and what is allowed
(``topologies/README.md`` documents the schema).
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Any

from dpsim.errors import ConfigError, TopologyError
from dpsim.files import load_yaml_text, read_yaml_file
from dpsim.hardware import GPU_PRESETS, get_gpu
from dpsim.limits import (
    MAX_GPUS,
    MAX_GPUS_PER_NODE,
    MAX_OVERSUBSCRIPTION,
    MAX_TEXT_CHARS,
    is_finite,
    number_text,
    short,
)
from dpsim.shipped import shipped_dir
from dpsim.topology.server import (
    MESH_KINDS,
    TREE_KINDS,
    check_mesh,
    check_ring_orders,
)
from dpsim.topology.spec import (
    COLLECTIVE_LIBRARIES,
    DEFAULT_HOST_MEMORY_BYTES_PER_S,
    DEFAULT_SHM_BYTES_PER_S,
    FABRIC_KINDS,
    INTRA_NODE_KINDS,
    FabricSpec,
    NodeSpec,
    NvlinkDomainSpec,
    TierSpec,
    TopologySpec,
    nvlink_fabric,
)
from dpsim.topology.transport import (
    NIC_PRESETS,
    TRANSPORT_KINDS,
    TRANSPORTS,
    TransportSpec,
    effective_nic_efficiency,
)
from dpsim.units import GB, US, gbit_per_s_to_bytes_per_s
from dpsim.wording import canonical_choice

# ----------------------------------------------------------------------------- YAML


# Numeric bounds: far beyond any hardware (a GB200 NVLink port is 1.8 TB/s per GPU, the
# fastest NICs 1.6 Tb/s), close enough that a typo cannot turn a time into 1e300 s.
MIN_GBYTE_PER_S, MAX_GBYTE_PER_S = 1e-3, 1e5
"""A GPU link or PCIe rate in GB/s: 1 MB/s to 100 TB/s."""
MIN_NIC_GBIT_PER_S, MAX_NIC_GBIT_PER_S = 1e-3, 1e5
"""A NIC's line rate in Gb/s: 1 Mbit/s to 100 Tbit/s."""
MIN_EFFICIENCY = 0.01
"""The smallest fraction of line rate a collective may be said to achieve."""
MAX_LATENCY_US = 1e6
"""A latency or per-message overhead in microseconds: at most a second."""
MAX_NICS_PER_NODE = 1024
"""NIC ports of one server."""
MAX_TIERS = 8
"""Switch tiers above the leaves (real fat trees have 1-3)."""
MAX_SOURCES = 1000
"""Entries of ``sources``."""
MAX_MESH_LINKS = 4096
"""Entries of ``node.mesh_links`` (every pair of 64 GPUs)."""
MAX_RING_ORDERS = 64
"""Entries of ``node.ring_orders`` (NCCL runs at most 64 channels)."""
DEFAULT_NET_HOP_LATENCY_US = 14.0
"""``fabric.nic_latency_us`` when left out: NCCL's hwLat[NET][ring][Simple]
(NVIDIA/nccl src/graph/tuning.cc@5067397)."""

_BOUNDS: dict[str, tuple[float, float]] = {
    "gpus_per_node": (1, MAX_GPUS_PER_NODE),
    "gpu_link_gbyte_per_s": (MIN_GBYTE_PER_S, MAX_GBYTE_PER_S),
    "gpu_link_efficiency": (MIN_EFFICIENCY, 1.0),
    "gpu_link_latency_us": (0.0, MAX_LATENCY_US),
    "pcie_gbyte_per_s": (MIN_GBYTE_PER_S, MAX_GBYTE_PER_S),
    "nics_per_node": (1, MAX_NICS_PER_NODE),
    "nic_gbit_per_s": (MIN_NIC_GBIT_PER_S, MAX_NIC_GBIT_PER_S),
    "nic_efficiency": (MIN_EFFICIENCY, 1.0),
    "nic_latency_us": (0.0, MAX_LATENCY_US),
    "nodes_per_leaf": (1, MAX_GPUS),
    "oversubscription": (1.0, MAX_OVERSUBSCRIPTION),
    "nic_message_overhead_us": (0.0, MAX_LATENCY_US),
    "group_size": (1, MAX_GPUS),
    "nodes": (1, MAX_GPUS),
    "launch_overhead_us": (0.0, MAX_LATENCY_US),
    "pcie_switches": (1, MAX_GPUS_PER_NODE),
    "sockets": (1, 2),
    "host_pcie_gbyte_per_s": (MIN_GBYTE_PER_S, MAX_GBYTE_PER_S),
    "inter_socket_gbyte_per_s": (MIN_GBYTE_PER_S, MAX_GBYTE_PER_S),
    "host_memory_gbyte_per_s": (MIN_GBYTE_PER_S, MAX_GBYTE_PER_S),
    "host_link_gbyte_per_s": (MIN_GBYTE_PER_S, MAX_GBYTE_PER_S),
    "shm_gbyte_per_s": (MIN_GBYTE_PER_S, MAX_GBYTE_PER_S),
    "wire_efficiency": (MIN_EFFICIENCY, 1.0),
    "streams_per_connection": (1, 1024),
    "stream_gbit_per_s": (MIN_NIC_GBIT_PER_S, MAX_NIC_GBIT_PER_S),
    "connections_per_nic": (1, 1024),
    "message_overhead_us": (0.0, MAX_LATENCY_US),
    "host_memory_passes": (0, 16),
    "call_overhead_us": (0.0, MAX_LATENCY_US),
}
"""Every numeric key's range (the same key means the same quantity wherever it appears)."""


def _bounded(kind: str, key: str) -> str:
    lo, hi = _BOUNDS[key]
    return f"{kind}: {number_text(lo)} to {number_text(hi)}"


_NODE_KEYS = {
    "gpus_per_node": _bounded("int>0", "gpus_per_node"),
    "interconnect": "one of " + "|".join(INTRA_NODE_KINDS),
    "gpu_link_gbyte_per_s": _bounded("number>0", "gpu_link_gbyte_per_s"),
    "gpu_link_efficiency": _bounded("number in (0, 1]", "gpu_link_efficiency"),
    "gpu_link_latency_us": _bounded("number>=0", "gpu_link_latency_us"),
    "pcie_gbyte_per_s": _bounded("number>0", "pcie_gbyte_per_s"),
    "nvls": "true|false",
    "pcie_switches": _bounded("int>0", "pcie_switches"),
    "sockets": "1 or 2",
    "host_pcie_gbyte_per_s": _bounded("number>0", "host_pcie_gbyte_per_s"),
    "inter_socket_gbyte_per_s": _bounded("number>0", "inter_socket_gbyte_per_s"),
    "host_memory_gbyte_per_s": _bounded("number>0", "host_memory_gbyte_per_s"),
    "host_link_gbyte_per_s": _bounded("number>0", "host_link_gbyte_per_s"),
    "p2p": "true|false",
    "shm_gbyte_per_s": _bounded("number>0", "shm_gbyte_per_s"),
    "shm_overlaps_backward": "true|false",
    "mesh_links": f"a list of [gpu a, gpu b, links] (at most {MAX_MESH_LINKS:,})",
    "ring_orders": f"a list of orders of the GPUs 0..gpus_per_node-1 (at most {MAX_RING_ORDERS})",
    "collective_library": "one of " + "|".join(COLLECTIVE_LIBRARIES),
}
_FABRIC_KEYS = {
    "kind": "one of " + "|".join(FABRIC_KINDS),
    "nic": "a NIC preset: " + ", ".join(NIC_PRESETS),
    "transport": "a transport (" + ", ".join(TRANSPORTS) + ") or a mapping with preset and overrides",
    "nics_per_node": _bounded("int>0", "nics_per_node"),
    "nic_gbit_per_s": _bounded("number>0", "nic_gbit_per_s"),
    "nic_efficiency": _bounded("number in (0, 1]", "nic_efficiency"),
    "nic_latency_us": _bounded("number>=0", "nic_latency_us"),
    "nodes_per_leaf": _bounded("int>0", "nodes_per_leaf"),
    "oversubscription": _bounded("number>=1", "oversubscription"),
    "rail_optimized": "true|false",
    "tiers": f"a list of tier mappings (group_size, oversubscription), at most {MAX_TIERS}",
    "nic_message_overhead_us": _bounded("number>=0", "nic_message_overhead_us"),
}
_TRANSPORT_KEYS = {
    "preset": "one of " + ", ".join(TRANSPORTS),
    "gpudirect": "true|false",
    "wire_efficiency": _bounded("number in (0, 1]", "wire_efficiency"),
    "streams_per_connection": _bounded("int>0", "streams_per_connection"),
    "stream_gbit_per_s": _bounded("number>0", "stream_gbit_per_s"),
    "connections_per_nic": _bounded("int>0", "connections_per_nic"),
    "message_overhead_us": _bounded("number>=0", "message_overhead_us"),
    "host_memory_passes": _bounded("int>=0", "host_memory_passes"),
    "call_overhead_us": _bounded("number>=0", "call_overhead_us"),
}
_TIER_KEYS = {
    "group_size": _bounded("int>0", "group_size"),
    "oversubscription": _bounded("number>=1", "oversubscription"),
}
_NVLINK_DOMAIN_KEYS = {
    "nodes": _bounded("int>0", "nodes"),
    "gpu_link_gbyte_per_s": _bounded("number>0", "gpu_link_gbyte_per_s"),
    "gpu_link_efficiency": _bounded("number in (0, 1]", "gpu_link_efficiency"),
    "gpu_link_latency_us": _bounded("number>=0", "gpu_link_latency_us"),
}
_TOP_KEYS = {
    "name": f"a string of at most {MAX_TEXT_CHARS:,} characters",
    "description": f"a string of at most {MAX_TEXT_CHARS:,} characters",
    "gpu": "GPU preset name",
    "sources": f"list of strings (at most {MAX_SOURCES:,})",
    "node": "mapping",
    "fabric": "mapping or null",
    "launch_overhead_us": _bounded("number>=0", "launch_overhead_us"),
    "nvlink_domain": "mapping or null",
}


class _Reader:
    """Strict reader of one YAML mapping: every error names the field path."""

    def __init__(self, origin: str, path: str, data: Any, allowed: dict[str, str]):
        self.origin, self.path, self.allowed = origin, path, allowed
        if not isinstance(data, dict):
            self.fail(path or "(top level)", data, "a mapping of keys")
        unknown = sorted(short(k) if not isinstance(k, str) else k for k in data if k not in allowed)
        if unknown:
            raise TopologyError(
                f"{origin}: {self._field(unknown[0][:80])}: unknown key; "
                f"allowed keys: {', '.join(allowed)}"
            )
        self.data = data

    def _field(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def fail(self, key: str, value: Any, allowed: str) -> None:
        raise TopologyError(f"{self.origin}: {key}: {short(value)} is not valid; expected {allowed}")

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
        lo, hi = _BOUNDS[key]
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and is_finite(value)
        ok = ok and (value > minimum if strict else value >= minimum)
        ok = ok and (maximum is None or value <= maximum) and lo <= value <= hi
        if not ok:
            self.fail(self._field(key), value, self.allowed[key])
        return float(value)

    def integer(self, key: str, default: Any = ...) -> int:
        value = self.get(key, default)
        lo, hi = _BOUNDS[key]
        if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
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
        if key in self.data and (not isinstance(value, str) or not value.strip() or len(value) > MAX_TEXT_CHARS):
            self.fail(self._field(key), value, self.allowed[key])
        return value


_RETIRED_KEYS = {
    "collective_base_latency_us": "the NCCL model charges NCCL's own per-algorithm base latency (baseLat, "
                                  "src/graph/tuning.cc); put an extra fixed per-call cost in launch_overhead_us",
}
"""Keys that once existed and would now change nothing: refused with what to use instead."""


def spec_from_dict(data: Any, origin: str = "topology") -> TopologySpec:
    """Validate a parsed topology YAML document and build its :class:`TopologySpec`."""
    if isinstance(data, dict):
        for key, instead in _RETIRED_KEYS.items():
            if key in data:
                raise TopologyError(f"{origin}: {key}: no longer read ({instead}); remove it")
    top = _Reader(origin, "", data, _TOP_KEYS)
    sources = top.get("sources", [])
    if (not isinstance(sources, list) or len(sources) > MAX_SOURCES
            or not all(isinstance(s, str) and len(s) <= MAX_TEXT_CHARS for s in sources)):
        top.fail("sources", sources, _TOP_KEYS["sources"])
    n = _Reader(origin, "node", top.get("node"), _NODE_KEYS)
    node = _node(n, origin)
    fabric = None
    raw_fabric = top.get("fabric", None)
    if raw_fabric is not None:
        fabric = _fabric(_Reader(origin, "fabric", raw_fabric, _FABRIC_KEYS), origin)
        if not nvlink_fabric(fabric) and not _nics_fit(node.gpus_per_node, fabric.nics_per_node):
            raise TopologyError(
                f"{origin}: fabric.nics_per_node: {fabric.nics_per_node} does not divide "
                f"node.gpus_per_node={node.gpus_per_node} nor is a multiple of it; GPUs share NICs evenly"
            )
        if nvlink_fabric(fabric) and fabric.tiers:
            raise TopologyError(f"{origin}: fabric.tiers: not valid with fabric.kind nvlink "
                                "(an NVLink switch tier has no leaves); use nvlink_domain plus a NIC fabric")
        if nvlink_fabric(fabric) and node.interconnect != "nvswitch":
            raise TopologyError(f"{origin}: fabric.kind: nvlink needs node.interconnect nvswitch "
                                f"(got {node.interconnect!r}); an NVLink switch tier joins NVSwitches")
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
        if nvlink_fabric(fabric):
            raise TopologyError(f"{origin}: nvlink_domain: not valid with fabric.kind nvlink "
                                "(already one NVLink domain); use an infiniband or ethernet fabric between domains")
    gpu = top.string("gpu")
    try:
        get_gpu(gpu)
    except ConfigError:
        top.fail("gpu", gpu, "a GPU preset: " + ", ".join(sorted(GPU_PRESETS)))
    name = top.string("name")
    if not name.isprintable():  # the name titles every table: a newline split it, an escape coloured the terminal
        top.fail("name", name, "one line of printable text")
    return TopologySpec(
        name=name,
        description=top.string("description", ""),
        gpu=gpu,
        node=node,
        fabric=fabric,
        sources=tuple(sources),
        nvlink_domain=nvlink_domain,
        launch_overhead_s=(top.number("launch_overhead_us") * US if "launch_overhead_us" in top.data else None),
    )


def _node(n: _Reader, origin: str) -> NodeSpec:
    """The ``node`` mapping, its layout's own rules checked."""
    gpn = n.integer("gpus_per_node")
    interconnect = n.choice("interconnect", INTRA_NODE_KINDS)
    tree = interconnect in TREE_KINDS
    for key in ("pcie_switches", "sockets", "host_pcie_gbyte_per_s", "inter_socket_gbyte_per_s", "mesh_links"):
        if key in n.data and not tree:
            raise TopologyError(f"{origin}: node.{key}: only read for node.interconnect {', '.join(TREE_KINDS)} "
                                f"(got {interconnect!r}); remove it")
    if "mesh_links" in n.data and interconnect not in MESH_KINDS:
        raise TopologyError(f"{origin}: node.mesh_links: only read for node.interconnect {', '.join(MESH_KINDS)}; "
                            "remove it")
    if "p2p" in n.data and interconnect != "pcie-tree":
        raise TopologyError(f"{origin}: node.p2p: only read for node.interconnect pcie-tree "
                            f"(got {interconnect!r}); remove it")
    for key in ("shm_gbyte_per_s", "shm_overlaps_backward"):
        if key in n.data and (interconnect != "pcie-tree" or n.data.get("p2p", True) is not False):
            raise TopologyError(f"{origin}: node.{key}: only read with node.p2p: false on node.interconnect "
                                "pcie-tree (NCCL's SHM transport); remove it")
    switches = n.integer("pcie_switches", 1)
    sockets = n.integer("sockets", 1)
    if tree and (switches > gpn or gpn % switches):
        n.fail("node.pcie_switches", switches, f"a divisor of node.gpus_per_node={gpn} (GPUs split evenly)")
    if tree and switches % sockets:
        n.fail("node.sockets", sockets, f"1 or 2, dividing node.pcie_switches={switches}")
    if sockets == 2 and "inter_socket_gbyte_per_s" not in n.data:
        raise TopologyError(f"{origin}: node.inter_socket_gbyte_per_s: missing; two sockets need the link between "
                            f"them ({_NODE_KEYS['inter_socket_gbyte_per_s']})")
    mesh = _int_rows(n, "mesh_links", MAX_MESH_LINKS, width=3)
    orders = _int_rows(n, "ring_orders", MAX_RING_ORDERS, width=None)
    node = NodeSpec(
        gpus_per_node=gpn,
        interconnect=interconnect,
        gpu_link_bandwidth_bytes_per_s=n.number("gpu_link_gbyte_per_s", strict=True) * GB,
        gpu_link_efficiency=n.number("gpu_link_efficiency", strict=True, maximum=1.0),
        gpu_link_latency_s=n.number("gpu_link_latency_us") * US,
        pcie_bandwidth_bytes_per_s=n.number("pcie_gbyte_per_s", strict=True) * GB,
        nvls=n.boolean("nvls", None) if "nvls" in n.data else None,
        pcie_switches=switches,
        sockets=sockets,
        host_pcie_bandwidth_bytes_per_s=(n.number("host_pcie_gbyte_per_s", strict=True) * GB
                                         if "host_pcie_gbyte_per_s" in n.data else 0.0),
        inter_socket_bandwidth_bytes_per_s=(n.number("inter_socket_gbyte_per_s", strict=True) * GB
                                            if "inter_socket_gbyte_per_s" in n.data else 0.0),
        host_link_bandwidth_bytes_per_s=(n.number("host_link_gbyte_per_s", strict=True) * GB
                                         if "host_link_gbyte_per_s" in n.data else 0.0),
        host_memory_bandwidth_bytes_per_s=(n.number("host_memory_gbyte_per_s", strict=True) * GB
                                           if "host_memory_gbyte_per_s" in n.data
                                           else DEFAULT_HOST_MEMORY_BYTES_PER_S),
        p2p=n.boolean("p2p", True),
        shm_bandwidth_bytes_per_s=(n.number("shm_gbyte_per_s", strict=True) * GB
                                   if "shm_gbyte_per_s" in n.data else DEFAULT_SHM_BYTES_PER_S),
        shm_overlaps_backward=n.boolean("shm_overlaps_backward", False),
        mesh_links=tuple(tuple(r) for r in mesh),
        ring_orders=tuple(tuple(r) for r in orders),
        collective_library=(n.choice("collective_library", COLLECTIVE_LIBRARIES)
                            if "collective_library" in n.data else None),
    )
    if interconnect in ("nvlink-mesh", "xgmi") and not node.mesh_links:
        raise TopologyError(f"{origin}: node.mesh_links: missing; {interconnect} needs its direct links "
                            f"({_NODE_KEYS['mesh_links']})")
    if interconnect == "nvlink-bridge" and not node.mesh_links and gpn % 2:
        n.fail("node.gpus_per_node", gpn, "an even number for nvlink-bridge (GPUs bridged in pairs), or mesh_links")
    why = check_mesh(node) or check_ring_orders(node)
    if why:
        key = "mesh_links" if check_mesh(node) else "ring_orders"
        raise TopologyError(f"{origin}: node.{key}: {why}")
    if node.nvls and interconnect != "nvswitch":
        n.fail("node.nvls", True, "false unless node.interconnect is nvswitch (NVLink SHARP is in the NVSwitch)")
    return node


def _int_rows(r: _Reader, key: str, limit: int, *, width: int | None) -> list[list[int]]:
    """A list of lists of non-negative integers (``width`` each when given)."""
    raw = r.get(key, [])
    ok = isinstance(raw, list) and len(raw) <= limit and all(
        isinstance(row, list) and (width is None or len(row) == width) and len(row) <= 1024
        and all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x < MAX_GPUS_PER_NODE for x in row)
        for row in raw)
    if not ok:
        r.fail(f"{r.path}.{key}", raw, r.allowed[key])
    return raw


def _fabric(f: _Reader, origin: str) -> FabricSpec:
    """The ``fabric`` mapping: a NIC preset and a transport fill what the file leaves out."""
    nic = None
    if "nic" in f.data:
        nic = NIC_PRESETS.get(f.data["nic"]) if isinstance(f.data["nic"], str) else None
        if nic is None:
            f.fail("fabric.nic", f.data["nic"], _FABRIC_KEYS["nic"])
    kind = f.choice("kind", FABRIC_KINDS, nic.fabric_kind if nic is not None else ...)
    line_gbit = (f.number("nic_gbit_per_s", strict=True) if "nic_gbit_per_s" in f.data or nic is None
                 else nic.line_gbit_per_s)
    line = gbit_per_s_to_bytes_per_s(line_gbit)
    transport = _transport(f, origin, kind, nic.transport if nic is not None else None)
    given = "nic_efficiency" in f.data
    if kind == "nvlink" and not given:
        raise TopologyError(f"{origin}: fabric.nic_efficiency: missing; expected {_FABRIC_KEYS['nic_efficiency']} "
                            "(an NVLink switch tier has no transport to derive it from)")
    efficiency = (f.number("nic_efficiency", strict=True, maximum=1.0) if given
                  else effective_nic_efficiency(transport, line))
    overhead = (f.number("nic_message_overhead_us") * US if "nic_message_overhead_us" in f.data
                else transport.message_overhead_s)
    return FabricSpec(
        kind=kind,
        nics_per_node=f.integer("nics_per_node", 1),
        nic_bandwidth_bytes_per_s=line,
        nic_efficiency=efficiency,
        nic_latency_s=f.number("nic_latency_us", default=DEFAULT_NET_HOP_LATENCY_US) * US,
        nodes_per_leaf=f.integer("nodes_per_leaf", 32),
        oversubscription=f.number("oversubscription", minimum=1.0, default=1.0),
        rail_optimized=f.boolean("rail_optimized", False),
        tiers=_tiers(f, origin),
        nic_message_overhead_s=overhead,
        transport=transport,
        nic=nic.name if nic is not None else None,
        efficiency_given=given,
    )


def _transport(f: _Reader, origin: str, kind: str, nic_default: str | None) -> TransportSpec:
    """``fabric.transport``: a preset name, or a mapping of a preset and overrides."""
    default = nic_default or ("ib" if kind == "infiniband" else "roce" if kind == "ethernet" else "ib")
    raw = f.data.get("transport", default)
    if isinstance(raw, str):
        if raw not in TRANSPORTS:
            f.fail("fabric.transport", raw, _FABRIC_KEYS["transport"])
        return TRANSPORTS[raw]
    t = _Reader(origin, "fabric.transport", raw, _TRANSPORT_KEYS)
    base = TRANSPORTS[t.choice("preset", tuple(TRANSPORTS))]
    changes: dict[str, Any] = {}
    if "gpudirect" in t.data:
        changes["gpudirect"] = t.boolean("gpudirect")
    if "wire_efficiency" in t.data:
        changes["wire_efficiency"] = t.number("wire_efficiency", strict=True, maximum=1.0)
    for key in ("streams_per_connection", "connections_per_nic", "host_memory_passes"):
        if key in t.data:
            changes[key] = t.integer(key)
    if "stream_gbit_per_s" in t.data:
        changes["stream_bytes_per_s"] = gbit_per_s_to_bytes_per_s(t.number("stream_gbit_per_s", strict=True))
    if "message_overhead_us" in t.data:
        changes["message_overhead_s"] = t.number("message_overhead_us") * US
    if "call_overhead_us" in t.data:
        changes["call_overhead_s"] = t.number("call_overhead_us") * US
    if changes.get("gpudirect") is False and base.host_memory_passes == 0 and "host_memory_passes" not in changes:
        changes["host_memory_passes"] = 2
    if changes.get("gpudirect") and "host_memory_passes" not in changes:
        changes["host_memory_passes"] = 0
    assert base.kind in TRANSPORT_KINDS
    return dataclasses.replace(base, name=base.name if not changes else f"{base.name} (custom)", **changes)


def _nics_fit(gpus_per_node: int, nics_per_node: int) -> bool:
    """GPUs share NICs evenly, or each GPU has the same number of NIC ports."""
    return gpus_per_node % nics_per_node == 0 or nics_per_node % gpus_per_node == 0


def _tiers(f: _Reader, origin: str) -> tuple[TierSpec, ...]:
    raw = f.get("tiers", [])
    if not isinstance(raw, list) or len(raw) > MAX_TIERS:
        f.fail("fabric.tiers", raw, _FABRIC_KEYS["tiers"])
    tiers = []
    for i, item in enumerate(raw):
        t = _Reader(origin, f"fabric.tiers[{i}]", item, _TIER_KEYS)
        tiers.append(TierSpec(group_size=t.integer("group_size"),
                              oversubscription=t.number("oversubscription", minimum=1.0, default=1.0)))
    return tuple(tiers)


def load_topology_file(path: str | Path) -> TopologySpec:
    """Read and validate a user's topology YAML file (parsed once per content: a sweep's points
    share it; a file edited between two calls is read again)."""
    key = None
    try:
        p = Path(path)
        if p.is_file() and p.stat().st_size <= _CACHED_FILE_BYTES:
            import hashlib  # here: its OpenSSL start-up (~5 ms) is for --topology files alone

            key = (str(p.resolve()), hashlib.sha256(p.read_bytes()).hexdigest())
    except OSError:
        key = None  # read_yaml_file says what is wrong
    if key is not None and key in _FILES:
        return _FILES[key]
    spec = spec_from_dict(read_yaml_file(path, "--topology", TopologyError), origin=str(path))
    if key is not None:
        _FILES[key] = spec
        while len(_FILES) > 64:
            _FILES.pop(next(iter(_FILES)))
    return spec



def load_cluster_spec(topology_file: str | Path | None, link: str | None) -> TopologySpec:
    """The topology a job names: its ``--topology`` file if it gives one, else its ``--link`` preset
    (both cached, so a second caller pays nothing)."""
    return load_topology_file(topology_file) if topology_file else load_preset(link)

_CACHED_FILE_BYTES = 1 << 20
"""Files up to this size are remembered by content (a topology file is a few KB)."""
_FILES: dict[tuple, TopologySpec] = {}
"""Topology files already read, by (path, SHA-256 of the content)."""


def preset_names() -> list[str]:
    """Names of the built-in topology presets (``--link`` values)."""
    return sorted(
        p.name.removesuffix(".yaml")
        for p in shipped_dir("dpsim.topologies").iterdir()
        if p.name.endswith(".yaml")
    )


def load_preset(name: str) -> TopologySpec:
    """Load a built-in topology preset by name."""
    names = preset_names()
    name = canonical_choice(name, names)
    if name not in names:
        raise TopologyError(f"--link: {name!r} is not a preset; choose one of {', '.join(names)}")
    return _preset(name)


@functools.cache
def _preset(name: str) -> TopologySpec:
    # Presets ship with the package: parsed once per process (a sweep loads them at every point).
    text = shipped_dir("dpsim.topologies").joinpath(f"{name}.yaml").read_text()
    return spec_from_dict(load_yaml_text(text), origin=f"topologies/{name}.yaml")
