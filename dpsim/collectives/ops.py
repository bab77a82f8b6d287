"""Collective operations and what a collective model answers: nccl-tests conventions.

nccl-tests conventions: algbw = S/T; busbw = algbw * 2(N-1)/N for all-reduce, *(N-1)/N
for reduce-scatter and all-gather, *1 for broadcast; GB = 1e9. Ring step counts
(2(N-1) for all-reduce, N-1 for reduce-scatter/all-gather) are defined once, here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from dpsim.errors import ConfigError
from dpsim.units import MiB

OPS = ("all_reduce", "reduce_scatter", "all_gather", "broadcast")
"""Collectives dpsim models, in nccl-tests naming."""

BROADCAST_SLICE_BYTES = 4 * MiB // 8
"""Pipeline slice of a ring broadcast: NCCL_BUFFSIZE (4 MiB default) over NCCL_STEPS (8)
(NCCL environment-variable documentation, NCCL_BUFFSIZE; src/include/collectives.h)."""


def bus_factor(op: str, n_ranks: int) -> float:
    """nccl-tests' busbw/algbw ratio for ``op`` on ``n_ranks`` ranks."""
    if op == "all_reduce":
        return 2 * (n_ranks - 1) / n_ranks
    if op in ("reduce_scatter", "all_gather"):
        return (n_ranks - 1) / n_ranks
    if op == "broadcast":
        return 1.0
    raise ConfigError(f"--op: {op!r} is not a collective; choose one of {', '.join(OPS)}")


def ring_steps(op: str, n_ranks: int) -> int:
    """Ring steps of ``op``: 2(N-1) for all-reduce, N-1 for reduce-scatter/all-gather."""
    bus_factor(op, n_ranks)  # validates op
    if op == "all_reduce":
        return 2 * (n_ranks - 1)
    return n_ranks - 1


@dataclass(frozen=True, kw_only=True)
class CollectiveResult:
    """Cost of one collective call."""

    op: str
    """Collective name (``all_reduce``...)."""
    algorithm: str
    """Algorithm used (``ring``)."""
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

    @property
    def algbw_bytes_per_s(self) -> float:
        """nccl-tests algorithm bandwidth S/T."""
        return self.size_bytes / self.time_s if self.time_s > 0 else 0.0

    @property
    def busbw_bytes_per_s(self) -> float:
        """nccl-tests bus bandwidth: algbw times the op's bus factor."""
        return self.algbw_bytes_per_s * bus_factor(self.op, self.n_ranks)


class CollectiveModel(Protocol):
    """What the engine needs: the cost of a collective over all data-parallel ranks."""

    n_ranks: int

    def time(self, op: str, size_bytes: float) -> CollectiveResult:
        """Cost of ``op`` on a ``size_bytes`` buffer."""
        ...
