"""The small interface between collectives and any network model."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np


@dataclass(frozen=True, kw_only=True)
class Flow:
    """One point-to-point transfer."""

    src: str
    """Sending endpoint (graph node id)."""
    dst: str
    """Receiving endpoint (graph node id)."""
    size_bytes: float
    """Bytes to move."""


@dataclass(frozen=True, kw_only=True)
class FlowRates:
    """Steady rates of a set of flows that start together and never finish."""

    rates_bytes_per_s: np.ndarray
    """Max-min fair rate of each flow, in the order given."""
    latencies_s: np.ndarray
    """Propagation/hop latency of each flow's path."""
    link_flows: dict[tuple[str, str], int]
    """Number of these flows crossing each directed link."""
    link_capacity_bytes_per_s: dict[tuple[str, str], float]
    """Capacity of each link that carries at least one flow."""
    link_class: dict[tuple[str, str], str] | None = None
    """Link class (``nvlink``, ``infiniband``, ``leaf-spine``...) of each of those links, when known."""

    def completion_time_s(self, size_bytes: float) -> float:
        """Time until the last of these flows finishes when each carries ``size_bytes``.

        With equal sizes the flows on the most loaded link keep their fair share to
        the end, so the finish time is exactly ``max(latency + size / rate)``.
        """
        if len(self.rates_bytes_per_s) == 0:
            return 0.0
        return float(np.max(self.latencies_s + size_bytes / self.rates_bytes_per_s))


@dataclass(frozen=True, kw_only=True)
class TransferResult:
    """What happened to a set of concurrent flows of possibly different sizes."""

    finish_times_s: np.ndarray
    """When each flow's last byte arrived, in the order given."""
    link_bytes: dict[tuple[str, str], float]
    """Bytes carried by each directed link."""
    link_capacity_bytes_per_s: dict[tuple[str, str], float]
    """Capacity of each link that carried bytes."""

    @property
    def makespan_s(self) -> float:
        """When the last flow finished."""
        return float(self.finish_times_s.max()) if len(self.finish_times_s) else 0.0

    def link_utilisation(self) -> dict[tuple[str, str], float]:
        """Average utilisation of each used link over the makespan (never above 1)."""
        span = self.makespan_s
        if span <= 0:
            return {}
        return {e: b / (self.link_capacity_bytes_per_s[e] * span) for e, b in self.link_bytes.items()}


class NetworkModel(Protocol):
    """What collectives need from a network."""

    def rates(self, pairs: Sequence[tuple[str, str]]) -> FlowRates:
        """Fair rates of concurrent flows between ``pairs`` (cached by the model)."""
        ...

    def transfer(self, flows: Sequence[Flow]) -> TransferResult:
        """Move ``flows`` concurrently and report when each finishes."""
        ...
