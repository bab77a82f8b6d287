"""NCCL's collectives on the flow model: the façade the rest of dpsim calls.

For every call NCCL estimates each enabled algorithm x protocol and runs the fastest;
:class:`NcclCollectives` does the same for one communicator, by concern:

- :mod:`~dpsim.collectives.fabric_facts` — what the topology offers (one server or NICs, NVLink
  domains, the transport, the hardware rows of NCCL's latency tables, NVLS channels);
- :mod:`~dpsim.collectives.plan_cost` — each algorithm's traffic (:mod:`~dpsim.collectives.algorithms`)
  evaluated on the cluster's network, by symmetry where it can be;
- :mod:`~dpsim.collectives.nccl_cost` — NCCL's estimate of one algorithm x protocol on those
  bandwidths (latencies, protocol factors, channels, pipeline fill, NVLS steps, the fitted ramp);
- :mod:`~dpsim.collectives.selection` — which pairs may run an op and the fastest of them.

Plan costs and choices depend only on the model's arguments: models built with the same ones
(every point of a sweep on one cluster) share them (:func:`~dpsim.collectives.plan_cost.shared_state`).
"""

from __future__ import annotations

from dpsim.collectives.algorithms import NCCL_DEFAULT_ALGORITHMS
from dpsim.collectives.fabric_facts import fabric_facts
from dpsim.collectives.nccl_cost import Choice, NcclCost
from dpsim.collectives.nccl_tuning import FITTED_TUNING, PROTOCOLS, NcclTuning, check_job_flags
from dpsim.collectives.ops import CollectiveResult, check_message
from dpsim.collectives.plan_cost import PlanCost, PlanEvaluator, shared_state
from dpsim.collectives.selection import candidates, fastest, no_candidate_error
from dpsim.errors import ConfigError
from dpsim.network.model import NetworkModel


class NcclCollectives:
    """NCCL-like collectives: every algorithm x protocol costed, the fastest chosen per call.

    Parameters
    ----------
    topology : dpsim.topology.Topology
        One job's communicator (all its GPUs).
    algorithms, protocols : tuple of str, optional
        Allowed choices (``--algo``/``--proto``); default: NCCL's default set.
    jobs : int
        Identical jobs running at once on the cluster (``--jobs``); their collectives
        share links max-min (lockstep: each runs the same phase at the same time).
    placement : str
        ``packed`` (job *j* on servers ``j*n .. j*n+n-1``) or ``interleaved``
        (server *x* of job *j* is cluster server ``x*jobs + j``).
    degradations : sequence of :class:`~dpsim.network.degrade.LinkDegradation`
        Links below capacity (``--degrade``): their capacities in
        :attr:`~dpsim.collectives.plan_cost.PlanEvaluator.capacity_bytes_per_s`
        are scaled (:func:`~dpsim.network.degrade.degradation_scale`; ``node<K>`` counts the
        cluster's servers, every job's). Default: a healthy cluster.
    job : dpsim.topology.Topology, optional
        The job whose cluster ``degradations`` name, when ``topology`` is one of its
        hybrid-sharding communicators (names are mapped onto it,
        :func:`~dpsim.network.degrade.communicator_degradations`).
    network : dpsim.network.model.NetworkModel, optional
        The cluster's network (every job's servers); default: a
        :class:`~dpsim.network.tiers.TierNetwork` of the cluster. Any model of the
        :class:`~dpsim.network.model.NetworkModel` interface will do (the tests run the same
        collectives on a :class:`~dpsim.network.graph_network.FlowNetwork` of the graph).
    tuning : dpsim.collectives.nccl_tuning.NcclTuning, optional
        The fitted constants (default :data:`~dpsim.collectives.nccl_tuning.FITTED_TUNING`).
    symmetric : bool
        Evaluate plans by symmetry where they have a symmetric form and the cluster is
        symmetric (:data:`~dpsim.collectives.plan_cost.SYMMETRIC`, the default); ``False`` evaluates every flow of the
        whole cluster (the tests compare both).
    """

    def __init__(self, topology, *, algorithms: tuple[str, ...] | None = None,
                 protocols: tuple[str, ...] | None = None, jobs: int = 1, placement: str = "packed",
                 tuning: NcclTuning | None = None, degradations=(), job=None,
                 network: NetworkModel | None = None, symmetric: bool = True):
        check_job_flags(jobs, placement)
        if jobs > 1 and topology.n_gpus < topology.spec.node.gpus_per_node:
            raise ConfigError("--jobs: jobs share servers' NICs and switches, so each job needs whole "
                              f"servers; --gpus {topology.n_gpus} is less than one server")
        self.topology = topology
        self.spec = topology.spec
        self.n_ranks = topology.n_gpus
        self.jobs = jobs
        self.placement = placement
        self.algorithms = algorithms or NCCL_DEFAULT_ALGORITHMS
        self.protocols = protocols or PROTOCOLS
        self._forced = algorithms is not None or protocols is not None
        self.tuning = tuning or FITTED_TUNING
        # Plan costs and choices depend only on the arguments: models built with the same ones
        # (every point of a sweep on one cluster) share them, on the default network. Plan costs
        # do not depend on the fitted tuning either (a fit tries many on one cluster).
        key = choice_key = None
        if network is None:
            key = (topology, self.algorithms, self.protocols, jobs, placement, tuple(degradations), job, symmetric)
            choice_key = (*key, self.tuning)
        state, tuned = shared_state(key), shared_state(choice_key)
        self.facts = fabric_facts(topology)
        """What the topology offers NCCL."""
        self.plans = PlanEvaluator(topology, jobs=jobs, placement=placement, degradations=degradations, job=job,
                                   network=network, symmetric=symmetric, nvls_weight=self.facts.nvls_weight,
                                   cache=state)
        """The algorithms' plans evaluated on the cluster's network."""
        self.costs = NcclCost(self.facts, self.plans, self.tuning, below=tuned["below"])
        """NCCL's estimate of each algorithm x protocol."""
        self.network: NetworkModel = self.plans.network
        """The cluster's links (every job's), through the network interface only."""
        self.cluster = self.plans.cluster
        """The communicator's ranks as the algorithms see them."""
        self.degradations = self.plans.degradations
        """Links below capacity, as given."""
        self._choices: dict[tuple[str, float], Choice] = tuned["choices"]

    @property
    def evaluation(self) -> str:
        """How the plans evaluated so far were evaluated (:meth:`~dpsim.collectives.plan_cost.PlanEvaluator.evaluation`)."""
        return self.plans.evaluation

    def evaluation_of(self, plans) -> str:
        """How the plans ``(algorithm, op)`` among ``plans`` were evaluated
        (:meth:`~dpsim.collectives.plan_cost.PlanEvaluator.evaluation_of`)."""
        return self.plans.evaluation_of(plans)

    def plan_cost(self, algorithm: str, op: str, nic_scale: float = 1.0) -> PlanCost:
        """The network evaluation of ``algorithm``'s plan for ``op`` (:meth:`~dpsim.collectives.plan_cost.PlanEvaluator.plan_cost`)."""
        return self.plans.plan_cost(algorithm, op, nic_scale)

    def cost(self, algorithm: str, protocol: str, op: str, size_bytes: float) -> Choice:
        """What one algorithm x protocol takes (:meth:`~dpsim.collectives.nccl_cost.NcclCost.cost`)."""
        return self.costs.cost(algorithm, protocol, op, size_bytes)

    def candidates(self, op: str) -> list[tuple[str, str]]:
        """Algorithm x protocol pairs that can run ``op`` here."""
        return candidates(self.facts, self.cluster, self.algorithms, self.protocols, op)

    def choose(self, op: str, size_bytes: float) -> Choice:
        """The fastest allowed algorithm x protocol for one call (cached per op and size)."""
        key = (op, float(size_bytes))
        if key not in self._choices:
            options = self.candidates(op)
            if not options:
                raise no_candidate_error(self.facts, self.algorithms, self.protocols, op, self._forced)
            self._choices[key] = fastest(options, lambda a, p: self.cost(a, p, op, size_bytes))
        return self._choices[key]

    def time(self, op: str, size_bytes: float) -> CollectiveResult:
        """Cost of ``op`` on ``size_bytes`` (the :class:`~dpsim.collectives.ops.CollectiveModel` call)."""
        check_message(op, size_bytes, self.n_ranks)
        if self.n_ranks == 1 or size_bytes == 0:
            return CollectiveResult(op=op, algorithm="none", n_ranks=self.n_ranks, size_bytes=size_bytes,
                                    time_s=0.0, latency_s=0.0, protocol="none")
        c = self.choose(op, size_bytes)
        intra, inter = self.costs.hop_latencies_s(c.algorithm, c.protocol)
        return CollectiveResult(op=op, algorithm=c.algorithm, n_ranks=self.n_ranks, size_bytes=size_bytes,
                                time_s=c.time_s, latency_s=c.latency_s, protocol=c.protocol,
                                channels=c.channels, intra_hop_latency_s=intra,
                                inter_hop_latency_s=inter if self.topology.n_nodes > 1 else None)

    def table(self, op: str, size_bytes: float) -> list[Choice]:
        """Every allowed algorithm x protocol's estimate, fastest first (``--explain``)."""
        return sorted((self.cost(a, p, op, size_bytes) for a, p in self.candidates(op)), key=lambda c: c.time_s)
