"""Cluster designs and their graphs (the bottom layer: nothing here knows about traffic).

- :mod:`~dpsim.topology.spec` — a design as frozen dataclasses (node, fabric, tiers, NVLink domains)
- :mod:`~dpsim.topology.load` — strict YAML loading and the built-in presets (``topologies/*.yaml``)
- :mod:`~dpsim.topology.fabric` — leaf/spine/tier arithmetic shared by the graph and the arithmetic router
- :mod:`~dpsim.topology.graph` — :func:`build_graph`: the directed networkx graph of a design
- :mod:`~dpsim.topology.cluster` — :class:`Topology`: a design with a GPU count, and its representative slice
"""

from __future__ import annotations

from dpsim.topology.cluster import Topology
from dpsim.topology.graph import build_graph, gpu_id
from dpsim.topology.load import (
    load_preset,
    load_topology_file,
    preset_names,
    spec_from_dict,
)
from dpsim.topology.spec import (
    FabricSpec,
    NodeSpec,
    NvlinkDomainSpec,
    TierSpec,
    TopologySpec,
)

__all__ = ["FabricSpec", "NodeSpec", "NvlinkDomainSpec", "TierSpec", "Topology", "TopologySpec", "build_graph", "gpu_id", "load_preset", "load_topology_file", "preset_names", "spec_from_dict"]
