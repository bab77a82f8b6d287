"""Collective algorithms beyond the flat ring, and NCCL's choice among them.

Each algorithm module gives a compact :class:`~dpsim.algorithms.base.Plan` (the
concurrent flows of each phase, evaluated at full scale by the network model) and an
explicit :class:`~dpsim.algorithms.base.Schedule` (the same bytes step by step, for
invariant tests on small clusters). :class:`~dpsim.collectives.nccl.NcclCollectives`
costs every algorithm x protocol with NCCL's tuning model on top of the flow model and
picks the fastest per call, as NCCL does; ``--algo``/``--proto`` restrict the choice
like ``NCCL_ALGO``/``NCCL_PROTO``.
"""

from dpsim.collectives.algorithms.base import Cluster, Phase, Plan, Schedule, Send
from dpsim.collectives.algorithms.halving_doubling import HalvingDoubling
from dpsim.collectives.algorithms.hierarchical import Hierarchical
from dpsim.collectives.algorithms.nvls import Nvls, NvlsTree
from dpsim.collectives.algorithms.ring import Ring
from dpsim.collectives.algorithms.tree import Tree
from dpsim.collectives.nccl_tuning import NCCL_DEFAULT_ALGORITHMS

ALGORITHMS = {a.name: a for a in (Ring(), Tree(), Nvls(), NvlsTree(), Hierarchical(), HalvingDoubling())}
"""Every algorithm by name (``--algo`` values; the names are
:data:`dpsim.collectives.nccl_tuning.ALGORITHM_NAMES`, which the flags parse without importing this)."""


__all__ = ["ALGORITHMS", "NCCL_DEFAULT_ALGORITHMS", "Cluster", "HalvingDoubling", "Hierarchical", "Nvls",
           "NvlsTree", "Phase", "Plan", "Ring", "Schedule", "Send", "Tree"]
