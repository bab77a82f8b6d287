"""The network layer: max-min fair flows over a cluster's links.

Collectives talk to a :class:`~dpsim.network.model.NetworkModel` only: they hand it
arrays of concurrent point-to-point flows and get back rates, latencies and per-link
bytes. :class:`~dpsim.network.tiers.TierNetwork` routes dpsim's own topologies by formula
(100,000 flows in a fraction of a second); :class:`~dpsim.network.graph_network.FlowNetwork`
routes by search on any graph; either can be swapped in without touching
:mod:`dpsim.collectives`. :mod:`~dpsim.network.degrade` names links below capacity
(``--degrade``).
"""

from dpsim.network.graph_network import FlowNetwork
from dpsim.network.model import Flow, FlowRates, LinkLoads, NetworkModel, TransferResult
from dpsim.network.tiers import TierNetwork

__all__ = ["Flow", "FlowNetwork", "FlowRates", "LinkLoads", "NetworkModel", "TierNetwork", "TransferResult"]
