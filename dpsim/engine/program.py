"""A training step as a program: compute tasks every rank runs, comm ops on one FIFO stream.

A compute task may *wait* for comm ops (the optimizer waits for every bucket; an FSDP
layer's forward waits for its all-gather) and *launches* comm ops when it ends (a
layer's backward completes the buckets whose last gradient it produced). A comm op
names its communicator (:attr:`CommOp.group`): all ranks, or a sub-group such as the
GPUs of one node (FSDP hybrid sharding); the ops of every communicator share the one
FIFO stream. :mod:`dpsim.strategies` builds the programs of DDP, ZeRO and FSDP.
"""

from __future__ import annotations


from dpsim.frozen import frozen_dataclass


@frozen_dataclass
class ComputeTask:
    """One piece of compute every rank runs, in program order."""

    kind: str
    """``forward``, ``backward``, ``recompute`` or ``optimizer``."""
    name: str
    """Layer name, or ``optimizer``."""
    duration_s: float
    """Time on an unslowed, unscaled rank."""
    wait_for: tuple[int, ...] = ()
    """Comm ops that must have finished before this task starts."""
    launch_after: tuple[int, ...] = ()
    """Comm ops this rank launches when the task ends, in this order."""


@frozen_dataclass
class CommOp:
    """One collective on the communication stream."""

    name: str
    """E.g. ``bucket 3``."""
    op: str
    """Collective (``all_reduce``, ``reduce_scatter``, ``all_gather``, ``broadcast``)."""
    size_bytes: float
    """Message size (nccl-tests convention)."""
    kind: str = "allreduce"
    """Trace category (``allreduce``, ``allgather``, ``reducescatter``)."""
    group: str = "world"
    """Communicator: ``world`` (every data-parallel rank) or a sub-communicator the
    collective model knows by name (``intra``: a node's GPUs, ``inter``: one GPU per
    node, for FSDP hybrid sharding; see :class:`dpsim.collectives.groups.GroupCollectives`)."""


@frozen_dataclass
class StepProgram:
    """What every rank does in one training step."""

    tasks: tuple[ComputeTask, ...]
    """Compute tasks in execution order."""
    comms: tuple[CommOp, ...]
    """Communication ops, indexed by ``wait_for``/``launch_after``."""
    launch_at_start: tuple[int, ...] = ()
    """Comm ops launched before the first task (e.g. FSDP's first all-gather)."""

    def __post_init__(self) -> None:
        order = list(self.launch_at_start) + [i for t in self.tasks for i in t.launch_after]
        assert sorted(order) == list(range(len(self.comms))), "every comm op is launched exactly once"
        position = {op: k for k, op in enumerate(order)}
        launched = set(self.launch_at_start)
        for t in self.tasks:
            assert all(w in launched for w in t.wait_for), f"task {t.name} waits for an op not yet launched"
            launched.update(t.launch_after)
        object.__setattr__(self, "_launch_order", tuple(sorted(range(len(self.comms)), key=position.__getitem__)))

    @property
    def launch_order(self) -> tuple[int, ...]:
        """Comm op indices in the order ranks launch them (the stream's FIFO order)."""
        return self._launch_order  # type: ignore[attr-defined]
