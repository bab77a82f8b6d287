"""Communicators: the job's world plus named sub-communicators, every one costed the same way.

A step's comm ops name their communicator (:attr:`dpsim.engine.program.CommOp.group`):
``world`` (every data-parallel rank) or, for FSDP ``HYBRID_SHARD``, ``intra`` (the GPUs of
one node: ``FULL_SHARD`` within it) and ``inter`` (one GPU per node: gradient shards
all-reduced across nodes). :class:`GroupCollectives` builds the collective model of each
communicator with **one** factory, so a job's sub-communicators are costed exactly like
its world (NCCL's choice on the flow model, or the same calibration profile).

:func:`communicators` describes them: ``intra`` is one node of the same design (every
node's group runs at once on its own links); ``inter`` is a cluster of one-GPU nodes on
the same fabric in which each GPU gets its share of its node's NICs (``nics x rate /
gpus_per_node``: the ``gpus_per_node`` replica groups of a node, local rank *j* of every
node in group *j*, run concurrently), which keeps the leaf uplinks' share too; an NVLink
fabric keeps its per-GPU rate. :attr:`Communicator.concurrent` says how many identical
groups share the node's links, for models that have no links of their own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from dpsim.collectives.ops import CollectiveModel, CollectiveResult
from dpsim.errors import ConfigError
from dpsim.topology.cluster import Topology

GROUPS = ("world", "intra", "inter")
"""Communicator names a comm op may use."""


@dataclass(frozen=True, kw_only=True)
class Communicator:
    """One communicator of a job, as a cluster of its own."""

    name: str
    """``world``, ``intra`` or ``inter``."""
    topology: Topology
    """Its ranks as a cluster (for ``inter``: one GPU per node with its share of the NICs)."""
    job: Topology
    """The job's whole cluster (link names given for the job, e.g. ``--degrade``, refer to it)."""
    concurrent: int = 1
    """Identical communicators running the same ops at once on the same node links
    (``inter``: the node's GPUs; ``world`` and ``intra``: 1, each on links of its own)."""


def communicators(job: Topology) -> dict[str, Communicator]:
    """The ``world``, ``intra`` and ``inter`` communicators of ``job`` (see the module docstring)."""
    spec = job.spec
    gpn = job.gpus_per_node
    intra = Topology(spec=spec, n_gpus=gpn) if job.n_gpus >= spec.node.gpus_per_node else job
    fabric = spec.fabric
    if fabric is None or job.n_nodes == 1:
        one = dataclasses.replace(spec, node=dataclasses.replace(spec.node, gpus_per_node=1))
        inter = Topology(spec=one, n_gpus=1)
    else:
        if fabric.kind == "nvlink":
            new_fabric = fabric
        else:
            new_fabric = dataclasses.replace(
                fabric, nics_per_node=1, rail_optimized=False,
                nic_bandwidth_bytes_per_s=fabric.nic_bandwidth_bytes_per_s * fabric.nics_per_node / gpn)
        inter_spec = dataclasses.replace(spec, node=dataclasses.replace(spec.node, gpus_per_node=1),
                                         fabric=new_fabric)
        inter = Topology(spec=inter_spec, n_gpus=job.n_nodes)
    return {
        "world": Communicator(name="world", topology=job, job=job),
        "intra": Communicator(name="intra", topology=intra, job=job),
        "inter": Communicator(name="inter", topology=inter, job=job,
                              concurrent=gpn if fabric is not None and fabric.kind != "nvlink" else 1),
    }


def hybrid_topologies(job: Topology) -> tuple[Topology, Topology]:
    """``(intra, inter)`` topologies of FSDP hybrid sharding on ``job`` (:func:`communicators`)."""
    comms = communicators(job)
    return comms["intra"].topology, comms["inter"].topology


ModelFactory = Callable[[Communicator], CollectiveModel]
"""Builds the collective model of one communicator."""


class GroupCollectives:
    """The collective models of a job's communicators, all built by one factory.

    ``time`` costs an op on all ranks (``world``); :meth:`group` gives the model of a
    communicator that :attr:`~dpsim.engine.program.CommOp.group` names, built on first use.
    """

    def __init__(self, job: Topology, make: ModelFactory):
        self.job = job
        self._make = make
        self._communicators = communicators(job)
        self._models: dict[str, CollectiveModel] = {}
        self.world = self.group("world")
        self.n_ranks = self.world.n_ranks

    def time(self, op: str, size_bytes: float) -> CollectiveResult:
        """Cost of ``op`` over all ranks."""
        return self.world.time(op, size_bytes)

    def communicator(self, name: str) -> Communicator:
        """The communicator called ``name``."""
        try:
            return self._communicators[name]
        except KeyError:
            raise ConfigError(f"communicator {name!r} is not known; known: {', '.join(GROUPS)}") from None

    def group(self, name: str) -> CollectiveModel:
        """The collective model of communicator ``name``."""
        model = self._models.get(name)
        if model is None:
            model = self._models[name] = self._make(self.communicator(name))
        return model
