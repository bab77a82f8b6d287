"""Communicators: the job's world plus named sub-communicators (FSDP hybrid sharding).

FSDP ``HYBRID_SHARD`` runs ``FULL_SHARD`` within a node (the ``intra`` communicator of the
node's GPUs) and all-reduces gradient shards across nodes (the ``inter`` communicator,
one rank per node). :func:`hybrid_topologies` builds both communicators' topologies:
``intra`` is one node of the same design; ``inter`` is a cluster of one-GPU nodes on the
same fabric in which each GPU gets its share of its node's NICs (``nics x rate /
gpus_per_node``: the ``gpus_per_node`` replica groups of a node run concurrently), which
keeps the leaf uplinks' share too; an NVLink fabric keeps its per-GPU rate.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

from dpsim.collectives.flat_ring import RingCollectives
from dpsim.collectives.ops import CollectiveModel, CollectiveResult
from dpsim.errors import ConfigError
from dpsim.topology.cluster import Topology

# ------------------------------------------------------------- collective models


class GroupCollectives:
    """A collective model for the whole job plus named sub-communicators.

    ``time`` costs an op on all ranks (``world``); :meth:`group` gives the model of a
    sub-communicator (``intra``, ``inter``) that :class:`~dpsim.engine.CommOp.group`
    names.
    """

    def __init__(self, world: CollectiveModel, groups: Mapping[str, CollectiveModel]):
        self.world = world
        self.n_ranks = world.n_ranks
        self.groups = dict(groups)

    def time(self, op: str, size_bytes: float) -> CollectiveResult:
        """Cost of ``op`` over all ranks."""
        return self.world.time(op, size_bytes)

    def group(self, name: str) -> CollectiveModel:
        """The collective model of sub-communicator ``name``."""
        if name == "world":
            return self.world
        try:
            return self.groups[name]
        except KeyError:
            raise ConfigError(f"communicator {name!r} is not known; known: world, {', '.join(self.groups)}") from None

    @property
    def profile(self):
        """The world ring's profile (what :class:`~dpsim.predict.Prediction` reports)."""
        return self.world.profile  # type: ignore[attr-defined]


def hybrid_topologies(topology: Topology) -> tuple[Topology, Topology]:
    """``(intra, inter)``: the communicators of FSDP hybrid sharding on ``topology``.

    ``intra``: one node of the design (its ``gpus_per_node`` GPUs). ``inter``: one GPU
    per node on the same fabric, each GPU with its share of the node's NICs — the
    ``gpus_per_node`` replica groups (local rank *j* of every node) run their
    all-reduces at the same time and split the node's NICs (and hence the leaf
    uplinks) between them; on an NVLink fabric each GPU keeps its own link rate.
    """
    spec = topology.spec
    gpn = topology.gpus_per_node
    intra = Topology(spec=spec, n_gpus=gpn) if topology.n_gpus >= spec.node.gpus_per_node else topology
    fabric = spec.fabric
    if fabric is None or topology.n_nodes == 1:
        one = dataclasses.replace(spec, node=dataclasses.replace(spec.node, gpus_per_node=1))
        return intra, Topology(spec=one, n_gpus=1)
    if fabric.kind == "nvlink":
        new_fabric = fabric
    else:
        new_fabric = dataclasses.replace(
            fabric, nics_per_node=1, rail_optimized=False,
            nic_bandwidth_bytes_per_s=fabric.nic_bandwidth_bytes_per_s * fabric.nics_per_node / gpn)
    inter_spec = dataclasses.replace(spec, node=dataclasses.replace(spec.node, gpus_per_node=1), fabric=new_fabric)
    return intra, Topology(spec=inter_spec, n_gpus=topology.n_nodes)


def hybrid_collectives(topology: Topology, world: CollectiveModel | None = None, *,
                       factory: Callable[[Topology], CollectiveModel] | None = None) -> GroupCollectives:
    """``world`` (default: a ring on ``topology``) plus the ``intra`` and ``inter``
    communicators of :func:`hybrid_topologies`, each costed by ``factory(topology)``
    (default :class:`~dpsim.collectives.RingCollectives`; ``predict`` passes NCCL's
    algorithm choice when the world model is NCCL's)."""
    make = factory or RingCollectives
    intra, inter = hybrid_topologies(topology)
    return GroupCollectives(world or make(topology), {"intra": make(intra), "inter": make(inter)})
