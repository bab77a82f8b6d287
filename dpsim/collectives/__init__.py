"""The system layer: what a collective costs on a communicator, through the network layer only.

- :mod:`~dpsim.collectives.ops` — operations, nccl-tests conventions, the :class:`CollectiveModel` protocol
- :mod:`~dpsim.collectives.algorithms` — ring, double binary tree, NVLS, NVLS tree, hierarchical,
  halving-doubling: each a compact plan (flows per phase) and an explicit schedule
- :mod:`~dpsim.collectives.nccl` — :class:`NcclCollectives`, NCCL's per-call choice of algorithm x
  protocol, by concern: :mod:`~dpsim.collectives.fabric_facts` (what the topology offers),
  :mod:`~dpsim.collectives.plan_cost` (plans on the flow model), :mod:`~dpsim.collectives.nccl_cost`
  (NCCL's estimate per algorithm x protocol), :mod:`~dpsim.collectives.selection` (what NCCL picks);
  :mod:`~dpsim.collectives.nccl_tuning` holds NCCL's own constants and the fitted ones
- :mod:`~dpsim.collectives.groups` — the job's communicators (world, FSDP hybrid intra/inter)
- :mod:`~dpsim.collectives.links` — per-link utilisation and bottleneck links of a step
"""

from __future__ import annotations

from dpsim.lazy import lazy_exports

_EXPORTS = {
    "OPS": "dpsim.collectives.ops",
    "CollectiveModel": "dpsim.collectives.ops",
    "CollectiveResult": "dpsim.collectives.ops",
    "bus_factor": "dpsim.collectives.ops",
    "ring_steps": "dpsim.collectives.ops",
    "NcclCollectives": "dpsim.collectives.nccl",
    "GroupCollectives": "dpsim.collectives.groups",
    "Communicator": "dpsim.collectives.groups",
    "communicators": "dpsim.collectives.groups",
    "hybrid_topologies": "dpsim.collectives.groups",
    "LinkReport": "dpsim.collectives.links",
    "link_report": "dpsim.collectives.links",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
