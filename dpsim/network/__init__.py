"""The network layer: routed transfers over a topology graph.

Collectives talk to a :class:`~dpsim.network.model.NetworkModel` only: they hand it
sets of concurrent point-to-point flows and get back rates, latencies and completion
times. :class:`~dpsim.network.flow_model.FlowNetwork` is the built-in model (routed
paths, max-min fair sharing); another model can be swapped in without touching
:mod:`dpsim.collectives`.
"""

from dpsim.network.flow_model import FlowNetwork
from dpsim.network.model import Flow, FlowRates, NetworkModel, TransferResult

__all__ = ["Flow", "FlowNetwork", "FlowRates", "NetworkModel", "TransferResult"]
