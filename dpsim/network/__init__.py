"""The network layer: routed transfers over a topology graph.

Collectives talk to a :class:`~dpsim.network.model.NetworkModel` only: they hand it
sets of concurrent point-to-point flows and get back rates, latencies and completion
times. :class:`~dpsim.network.flow_model.FlowNetwork` routes by search on any graph;
:class:`~dpsim.network.tiers.TierNetwork` routes dpsim's own topologies by formula
(same routes, same max-min sharing, 100,000 flows in a fraction of a second); another
model can be swapped in without touching :mod:`dpsim.collectives`.
"""

from dpsim.network.flow_model import FlowNetwork
from dpsim.network.model import Flow, FlowRates, NetworkModel, TransferResult
from dpsim.network.tiers import TierNetwork

__all__ = ["Flow", "FlowNetwork", "FlowRates", "NetworkModel", "TierNetwork", "TransferResult"]
