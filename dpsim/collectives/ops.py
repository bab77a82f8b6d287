"""Collective operations and what a collective model answers: nccl-tests conventions.

nccl-tests conventions: algbw = S/T; busbw = algbw * 2(N-1)/N for all-reduce, *(N-1)/N
for reduce-scatter and all-gather, *1 for broadcast; GB = 1e9. The list of operations
(:data:`OPS`) and the ring step counts (:func:`ring_steps`) are defined once, here, for
the models, the calibration harness and the profiles alike.
"""

from __future__ import annotations

import math
from typing import Protocol

from dpsim.errors import ConfigError
from dpsim.frozen import frozen_dataclass
from dpsim.units import MiB
from dpsim.wording import canonical_choice

OPS = ("all_reduce", "reduce_scatter", "all_gather", "broadcast")
"""Collectives dpsim models, in nccl-tests naming."""

BROADCAST_SLICE_BYTES = 4 * MiB // 8
"""Pipeline slice of a ring broadcast: NCCL_BUFFSIZE (4 MiB default) over NCCL_STEPS (8)
(NCCL environment-variable documentation, NCCL_BUFFSIZE; src/include/collectives.h)."""


def check_op(op: str) -> str:
    """``op`` if it is a collective dpsim models, else a one-line ConfigError."""
    op = canonical_choice(op, OPS)
    if op not in OPS:
        raise ConfigError(f"--op: {op!r} is not a collective; choose one of {', '.join(OPS)}")
    return op


def bus_factor(op: str, n_ranks: int) -> float:
    """nccl-tests' busbw/algbw ratio for ``op`` on ``n_ranks`` ranks."""
    check_op(op)
    if op == "all_reduce":
        return 2 * (n_ranks - 1) / n_ranks
    if op in ("reduce_scatter", "all_gather"):
        return (n_ranks - 1) / n_ranks
    return 1.0


def ring_steps(op: str, n_ranks: int) -> int:
    """Steps of ``op`` on a ring of ``n_ranks``: 2(N-1) for all-reduce (reduce-scatter then
    all-gather), N-1 for reduce-scatter, all-gather and a (chained) broadcast."""
    check_op(op)
    return 2 * (n_ranks - 1) if op == "all_reduce" else n_ranks - 1


def check_message(op: str, size_bytes: float, n_ranks: int) -> None:
    """Validate one call: a known op, a non-negative finite size, at least one rank."""
    check_op(op)
    if not (isinstance(size_bytes, (int, float)) and math.isfinite(size_bytes) and size_bytes >= 0):
        raise ConfigError(f"size: {size_bytes!r} is not a non-negative finite number of bytes")
    if n_ranks < 1:
        raise ConfigError(f"ranks: {n_ranks} is not valid; expected an integer >= 1")


@frozen_dataclass
class CollectiveResult:
    """Cost of one collective call, as the model that costed it saw it."""

    op: str
    """Collective name (``all_reduce``...)."""
    algorithm: str
    """Algorithm used (``ring``, ``tree``, ``nvls``...; ``calibrated`` for a profile's fit)."""
    n_ranks: int
    """Ranks in the communicator."""
    size_bytes: float
    """Message size S in nccl-tests' convention (the full buffer)."""
    time_s: float
    """Predicted duration."""
    latency_s: float
    """The size-independent part of ``time_s``."""
    protocol: str = "Simple"
    """NCCL protocol (``LL``, ``LL128``, ``Simple``; ``none`` when nothing moves)."""
    channels: int = 0
    """Channels used (0: not modelled)."""
    intra_hop_latency_s: float | None = None
    """Latency of one hop between GPUs of a server, for this algorithm and protocol (``None``:
    the model has no hops, e.g. a calibrated fit)."""
    inter_hop_latency_s: float | None = None
    """Latency of one hop across servers (``None``: one server, or no hops in the model)."""

    @property
    def algbw_bytes_per_s(self) -> float:
        """nccl-tests algorithm bandwidth S/T."""
        return self.size_bytes / self.time_s if self.time_s > 0 else 0.0

    @property
    def busbw_bytes_per_s(self) -> float:
        """nccl-tests bus bandwidth: algbw times the op's bus factor."""
        return self.algbw_bytes_per_s * bus_factor(self.op, self.n_ranks)

    @property
    def transfer_bus_bandwidth_bytes_per_s(self) -> float:
        """Bus bandwidth of the size-dependent part alone: ``factor * S / (T - latency)``
        (what busbw tends to for large messages; ``inf`` when nothing moves)."""
        transfer = self.time_s - self.latency_s
        if transfer <= 0:
            return math.inf
        return bus_factor(self.op, self.n_ranks) * self.size_bytes / transfer


class CollectiveModel(Protocol):
    """What the engine needs: the cost of a collective over a communicator's ranks."""

    n_ranks: int

    def time(self, op: str, size_bytes: float) -> CollectiveResult:
        """Cost of ``op`` on a ``size_bytes`` buffer."""
        ...
