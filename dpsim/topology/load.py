"""Topology YAML files and the built-in presets: strict validation into :mod:`~dpsim.topology.spec`.

Every error names the file, the field path, the value and what is allowed
(``topologies/README.md`` documents the schema).
"""

from __future__ import annotations

import functools
import hashlib
from importlib import resources
from pathlib import Path
from typing import Any

from dpsim.errors import ConfigError, TopologyError
from dpsim.files import load_yaml_text, read_yaml_file
from dpsim.hardware import GPU_PRESETS, get_gpu
from dpsim.topology.spec import (
    FABRIC_KINDS,
    INTRA_NODE_KINDS,
    FabricSpec,
    NodeSpec,
    NvlinkDomainSpec,
    TierSpec,
    TopologySpec,
)
from dpsim.limits import MAX_GPUS, MAX_GPUS_PER_NODE, MAX_OVERSUBSCRIPTION, MAX_TEXT_CHARS, is_finite, number_text, short
from dpsim.units import GB, US, gbit_per_s_to_bytes_per_s

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
}
_FABRIC_KEYS = {
    "kind": "one of " + "|".join(FABRIC_KINDS),
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
        sources=tuple(sources),
        nvlink_domain=nvlink_domain,
        launch_overhead_s=top.number("launch_overhead_us", default=0.0) * US,
    )


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


_CACHED_FILE_BYTES = 1 << 20
"""Files up to this size are remembered by content (a topology file is a few KB)."""
_FILES: dict[tuple, TopologySpec] = {}
"""Topology files already read, by (path, SHA-256 of the content)."""


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
    return _preset(name)


@functools.lru_cache(maxsize=None)
def _preset(name: str) -> TopologySpec:
    # Presets ship with the package: parsed once per process (a sweep loads them at every point).
    text = resources.files("dpsim.topologies").joinpath(f"{name}.yaml").read_text()
    return spec_from_dict(load_yaml_text(text), origin=f"topologies/{name}.yaml")
