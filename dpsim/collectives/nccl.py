"""NCCL's choice of algorithm and protocol, on top of the flow model.

For every call NCCL estimates, for each enabled algorithm x protocol,
``time = latency + bytes / bandwidth`` and runs the fastest
(``ncclTopoGetAlgoTime`` / ``topoGetAlgoInfo``). :class:`NcclCollectives` does the
same, with two differences: the bandwidth of an algorithm is not NCCL's per-channel
guess but what the flow model gives for its traffic on *this* topology (max-min
sharing of every concurrent flow, contention with other jobs included), and pipelined
algorithms pay a pipeline fill. Everything else is NCCL's own model, with constants
from ``src/graph/tuning.cc`` and ``src/enqueue.cc`` of NVIDIA/nccl at commit
``5067397c2676d5aed50042fc39e5c8ee96eb0027`` (2026-06; "HEAD" below), quoted as
facts, not code:

- **Latency** ``baseLat[algo][proto] + intra_hops * hwLat[NVLINK|PCI][algo][proto] +
  inter_hops * hwLat[NET][algo][proto]`` (:data:`BASE_LATENCY_US`,
  :data:`HW_LATENCY_US`); hop counts per algorithm as NCCL counts them (ring:
  ``nsteps - nInterSteps`` intra, ``nInterSteps`` inter; tree:
  ``2 * ((ppn - 1) intra + log2(nNodes) inter)``; NVLS: one NVLink hop (+ one NET
  hop); NVLS tree: one NVLink hop + ``2 log2(nNodes)`` NET hops). A topology's
  ``gpu_link_latency_us`` / ``nic_latency_us`` are ring/Simple hop latencies; the
  other algorithms and protocols scale with them. Ring/Simple all-reduce across
  servers multiplies the latency by 1.4 (1.9 before Ampere): NCCL's "plateau effect".
  On multi-server rings an intra hop costs at least the network post overhead
  (1 us, x3 for Simple). Plus the topology's ``launch_overhead_us`` per call.
- **Protocols** LL moves 8 data bytes per 16 (bus bandwidth x 0.5, capped at
  ``llMaxBw``), LL128 120 of 128 (x 0.92 on rings; x 120/128 on trees across
  servers, x 7/9 inside one), Simple all of it; tree all-reduce x 0.92, across servers
  at most channels x ``perChMaxTreeBw`` (one CTA per tree channel), and NCCL's per-size
  ``treeCorrectionFactor``; NVLS x ``nvlsEfficiency``. LL128 is enabled only
  on NVLink servers, and across servers only from Hopper on (as NCCL's default); across
  servers only the protocols the NICs' transport allows run (``network_protocols``: the
  AWS plugin forces Simple on EFA v1).
- **Channels** NCCL drops channels while ``bytes < channels * threads * threshold``
  (threshold 64 B/thread for Simple, 8 for LL128 and 8 x ranks for LL; 512, 640 and
  512 threads): fewer channels use fewer NICs, so a NIC-bound plan's bandwidth scales
  with the channels kept.
- **Pipeline fill** (trees, chains, NVLS tree): the first chunk crosses every stage
  before the pipeline streams: ``chunk * (stages_intra / r_intra + stages_inter /
  r_inter - 1 / r_slowest)``, chunk = ``min(step size, S / channels)``: Simple 512 KiB
  (4 MiB buffer / 8 steps), LL 32 KiB, LL128 576,000 B, NVLS tree NCCL's NVLS chunk
  (:func:`~dpsim.collectives.nccl_tuning.nvls_tuning`) shrunk for small messages as
  ``calcCollChunking`` does.
- **NVLS chunk steps** (one NVLink domain): each step a channel reduces and multicasts one
  chunk per head (every GPU of the domain, at most 32); ``calcCollChunking`` shrinks the chunk
  from 128 KiB to 64 / 32 / 16 KiB for smaller messages, so a mid-size call is a few steps of
  fixed cost. The transfer is the larger of the bandwidth term and steps x the fitted step
  (:attr:`~dpsim.collectives.nccl_tuning.NcclTuning.nvls_step_latency_us`); NVLS has no ramp.

``hierarchical`` and ``halving_doubling`` are costed with the ring's protocol factors
and latencies; NCCL itself never picks them (they run only when ``--algo`` names them).

**Evaluation.** A plan's traffic is evaluated once per (algorithm, op) and NIC rate. By
default by symmetry (:data:`SYMMETRIC`): the plan in symmetric form
(:mod:`dpsim.collectives.symmetric`: one server's flows, server-level patterns), counted on
every link family by the network (:meth:`~dpsim.network.model.NetworkModel.symmetric_loads`),
the flows inside a server max-min shared on one server's links; the cost depends on the
servers only through integer counts per server, not on GPUs, channels or flows, and the
result is the whole-cluster one (``tests/test_symmetric.py``). Flow by flow on the whole
cluster (:data:`WHOLE_CLUSTER`) for what is not symmetric: a user graph
(:class:`~dpsim.network.graph_network.FlowNetwork`), ``--degrade`` naming single links, a
partial server, plans without a symmetric form (a broadcast chain, halving-doubling off
powers of two) and NVLink-domain plans whose flows of different sizes share GPU links.
:attr:`NcclCollectives.evaluation` says which ran.
"""

from __future__ import annotations

import dataclasses
import math
from bisect import bisect_right
from collections import OrderedDict
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from dpsim.collectives.algorithms import ALGORITHMS, NCCL_DEFAULT_ALGORITHMS
from dpsim.collectives.algorithms.base import Cluster, Plan
from dpsim.collectives.nccl_tuning import (
    BASE_LATENCY_US,
    CHUNK_BYTES,
    FITTED_TUNING,
    GENERATION,
    HW_LATENCY_US,
    LL_MAX_BW_GBPS,
    NCCL_STEPS,
    NVLS_EFFICIENCY,
    NVLS_MAX_ARITY,
    PER_CHANNEL_MAX_TREE_BW_GBPS,
    PROTOCOLS,
    RCCL_BASE_LATENCY_US,
    RCCL_XGMI_LATENCY_US,
    THREAD_THRESHOLD,
    THREADS,
    TREE_CORRECTION,
    NcclTuning,
    NvlsTuning,
    check_job_flags,
    library,
    nvls_available,
    nvls_chunk_breaks,
    nvls_steps,
    nvls_tree_chunk_breaks,
    nvls_tree_chunk_bytes,
    nvls_tuning,
)
from dpsim.collectives.ops import (
    BROADCAST_SLICE_BYTES,
    CollectiveResult,
    bus_factor,
    check_message,
)
from dpsim.collectives.symmetric import SymmetricPlan, symmetric_plan
from dpsim.errors import ConfigError
from dpsim.network.degrade import (
    class_factors,
    communicator_degradations,
    degradation_terms,
    same_numbering,
)
from dpsim.network.loadmap import LoadMap
from dpsim.network.model import CrossingFlows, NetworkModel, ServerFlows
from dpsim.network.tiers import TierNetwork
from dpsim.topology.cluster import Topology
from dpsim.topology.fabric import nic_layout
from dpsim.topology.spec import nic_fabric, nvlink_fabric
from dpsim.units import US, KiB

SOCKET_MIN_TASK_BYTES = 64 * KiB
"""Smallest piece NCCL's socket transport splits a message into across a connection's sockets
(src/transport/net_socket.cc@5067397 ``MIN_CHUNKSIZE``)."""

SYMMETRIC = "symmetric"
"""Evaluation path: one server's flows max-min shared, traffic between servers counted by
symmetry (:mod:`dpsim.collectives.symmetric`); cost independent of the cluster's size."""
WHOLE_CLUSTER = "whole cluster"
"""Evaluation path: every flow of the cluster routed and max-min shared."""


@dataclass(frozen=True, kw_only=True)
class PlanCost:
    """An algorithm's traffic on a cluster, evaluated once by the network model."""

    plan: Plan
    """What was evaluated (on the symmetric path: its hop counts, channels and pipeline depths)."""
    seconds_per_byte: float
    """Bandwidth term per byte of S at full channel count (slowest flow of each phase, summed)."""
    inter_bound: bool
    """The slowest flows of the slowest phase cross servers, none inside one (a per-channel NIC resource)."""
    r_intra: float
    """Slowest intra-server flow rate of a pipelined plan, bytes/s (inf if none; only pipelined
    plans use it, and on an NVLink switch tier's symmetric path only theirs is exact)."""
    r_inter: float
    """Slowest inter-server flow rate of a pipelined plan, bytes/s (inf if none; as :attr:`r_intra`)."""
    loads: LoadMap | np.ndarray = field(repr=False)
    """Bytes each link carries per byte of S, every job included: by class of links
    (:class:`~dpsim.network.loadmap.LoadMap`, symmetric path) or dense over the network's links."""
    max_fraction: float = 0.0
    """Largest bytes of one flow in one repetition, as a fraction of S (a ring step's message)."""
    path: str = WHOLE_CLUSTER
    """How it was evaluated: :data:`SYMMETRIC` or :data:`WHOLE_CLUSTER`."""
    network: NetworkModel | None = field(default=None, repr=False, compare=False)
    """The network whose links :attr:`loads` numbers."""

    @property
    def link_bytes_per_byte(self) -> np.ndarray:
        """:attr:`loads` dense over the network's links (small clusters and tests)."""
        if isinstance(self.loads, LoadMap):
            return self.loads.dense(self.network.families(), self.network.n_links)
        return self.loads


@dataclass(frozen=True, kw_only=True)
class Choice:
    """One costed algorithm x protocol."""

    algorithm: str
    """Algorithm name."""
    protocol: str
    """``LL``, ``LL128`` or ``Simple``."""
    time_s: float
    """Estimated duration."""
    latency_s: float
    """Its size-independent part (launch overhead + NCCL latency)."""
    channels: int
    """Channels NCCL keeps for this size."""
    transfer_s: float = 0.0
    """The flow model's time for the bytes at the full channel count, before NCCL's size
    corrections, the flow-control window and the ramp (what the ramp stretches: linear in
    the size and never longer on faster links, so the ramp keeps both monotone)."""


_SHARED: OrderedDict[tuple, dict] = OrderedDict()
_SHARED_MAX = 64
"""Models whose plan costs and choices are kept for reuse (least recently used dropped first)."""


def _shared_state(key: tuple | None) -> dict:
    """The caches of a model built with arguments ``key`` (fresh ones when ``key`` is ``None``
    or not hashable)."""
    fresh = {"costs": {}, "choices": {}, "symmetric": {}, "paths": {}, "below": {}}
    if key is None:
        return fresh
    try:
        state = _SHARED.get(key)
    except TypeError:
        return fresh
    if state is None:
        state = _SHARED[key] = fresh
        while len(_SHARED) > _SHARED_MAX:
            _SHARED.popitem(last=False)
    else:
        _SHARED.move_to_end(key)
    return state


def _touches(part: LoadMap, both: LoadMap, hits) -> bool:
    """Whether ``part`` (a term of ``both``) loads one of the cells ``hits`` of ``both``
    (:meth:`~dpsim.network.loadmap.LoadMap.min_share`)."""
    for name, mask in hits:
        fam = part.families.get(name)
        if fam is None or not mask.any():
            continue
        units = both.families[name].first  # one unit of each class of ``both``: ``part`` is constant on it
        if (mask & (fam.table[fam.cls[units]] > 0)).any():
            return True
    return False


def _tree_correction(protocol: str, size_bytes: float) -> float:
    """NCCL's ``treeCorrectionFactor`` for a message size (1 outside its 64 B .. 256 MiB table)."""
    log_size = int(math.log2(max(size_bytes, 64) // 64)) if size_bytes >= 64 else 0
    table = TREE_CORRECTION[protocol]
    return table[log_size] if log_size < len(table) else 1.0


def describe_choices(results) -> str:
    """``# algorithm: 8..32768 B ring/LL; 65536..1073741824 B tree/Simple`` for a size sweep."""
    spans: list[list] = []
    for r in results:
        key = f"{r.algorithm}/{r.protocol}"
        if spans and spans[-1][0] == key:
            spans[-1][2] = int(r.size_bytes)
        else:
            spans.append([key, int(r.size_bytes), int(r.size_bytes)])
    return "# algorithm: " + "; ".join(f"{lo}..{hi} B {key}" if lo != hi else f"{lo} B {key}" for key, lo, hi in spans)


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
        Links below capacity (``--degrade``): their capacities in :attr:`capacity_bytes_per_s`
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
    symmetric : bool
        Evaluate plans by symmetry where they have a symmetric form and the cluster is
        symmetric (:data:`SYMMETRIC`, the default); ``False`` evaluates every flow of the
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
        self.cluster_topology = (topology if jobs == 1 else
                                 Topology(spec=topology.spec, n_gpus=topology.n_gpus * jobs))
        self.network: NetworkModel = network if network is not None else TierNetwork(self.cluster_topology)
        """The cluster's links (every job's), through the network interface only."""
        self.degradations = tuple(degradations)
        """Links below capacity, as given."""
        self._terms: list = []
        if self.degradations:
            strict = job is None or same_numbering(job, topology)
            named = self.degradations if job is None else communicator_degradations(self.degradations, job, topology)
            self._terms = degradation_terms(self.network, named, strict=strict)
        self.cluster = Cluster.of(topology, nvls=nvls_available(topology.spec))
        self.algorithms = algorithms or NCCL_DEFAULT_ALGORITHMS
        self.protocols = protocols or PROTOCOLS
        self._forced = algorithms is not None or protocols is not None
        self.tuning = tuning or FITTED_TUNING
        self._class_factor = class_factors(self._terms)
        self.whole_cluster_reason: str | None = self._whole_cluster_reason() if symmetric else "asked for"
        """Why plans are evaluated flow by flow on the whole cluster (``None``: by symmetry)."""
        # Plan costs and choices depend only on the arguments: models built with the same ones
        # (every point of a sweep on one cluster) share them, on the default network. Plan costs
        # do not depend on the fitted tuning either (a fit tries many on one cluster).
        key = choice_key = None
        if network is None:
            key = (topology, self.algorithms, self.protocols, jobs, placement, self.degradations, job, symmetric)
            choice_key = (*key, self.tuning)
        state = _shared_state(key)
        self._costs: dict[tuple, PlanCost] = state["costs"]
        tuned = _shared_state(choice_key)
        self._choices: dict[tuple[str, float], Choice] = tuned["choices"]
        self._below: dict[tuple[str, str, str], tuple[list[float], list[float]]] = tuned["below"]
        self._symmetric: dict[tuple[str, str], tuple | None] = state["symmetric"]
        self.paths: dict[tuple[str, str], str] = state["paths"]
        """How each (algorithm, op) evaluated so far was evaluated."""

    def _whole_cluster_reason(self) -> str | None:
        if self.network.families() is None:
            return "the network has no known symmetry (a graph searched flow by flow)"
        if self._class_factor is None:
            return "--degrade names single links, so servers differ"
        if self.topology.n_gpus < self.spec.node.gpus_per_node:
            return "a partial server"
        return None

    @property
    def evaluation(self) -> str:
        """How the plans evaluated so far were evaluated (:meth:`evaluation_of` all of them)."""
        return self.evaluation_of(self.paths)

    def evaluation_of(self, plans) -> str:
        """How the plans ``(algorithm, op)`` among ``plans`` were evaluated: :data:`SYMMETRIC` when
        all of them were (the cost does not grow with the cluster), else ``whole cluster`` and why."""
        whole = sorted(f"{a}/{op}" for a, op in plans if self.paths.get((a, op), SYMMETRIC) != SYMMETRIC)
        if not whole:
            return SYMMETRIC
        reason = self.whole_cluster_reason or f"{', '.join(whole)} have no symmetric form here"
        return f"{WHOLE_CLUSTER} ({reason})"

    @cached_property
    def capacity_scale(self) -> np.ndarray:
        """Capacity left on each link of :attr:`network` (1 = healthy), dense."""
        scale = np.ones(self.network.n_links)
        for kind, what, f in self._terms:
            scale[self.network.class_links(what) if kind == "class" else what] *= f
        return scale

    @cached_property
    def capacity_bytes_per_s(self) -> np.ndarray:
        """What each link can carry in this model (healthy capacity x :attr:`capacity_scale`), dense."""
        return self.network.capacity_bytes_per_s * self.capacity_scale

    # ------------------------------------------------------------------ evaluation
    def _place(self, endpoints: np.ndarray, job: int) -> np.ndarray:
        stride, n = self.spec.node.gpus_per_node, self.topology.n_nodes
        hub = endpoints < 0
        node = np.where(hub, -1 - endpoints, endpoints // stride)
        local = np.where(hub, 0, endpoints % stride)
        cnode = job * n + node if self.placement == "packed" else node * self.jobs + job
        return np.where(hub, -1 - cnode, cnode * stride + local)

    def _place_server(self, server: np.ndarray, job: int) -> np.ndarray:
        n = self.topology.n_nodes
        return job * n + server if self.placement == "packed" else server * self.jobs + job

    def plan_cost(self, algorithm: str, op: str, nic_scale: float = 1.0) -> PlanCost:
        """The network evaluation of ``algorithm``'s plan for ``op`` (cached), with NIC links
        running at ``nic_scale`` of their rate (per-message overhead, see :meth:`nic_scale`).

        Evaluated by symmetry (:data:`SYMMETRIC`) when the plan has a symmetric form and the
        network can count it (:meth:`_symmetric_cost`), else flow by flow on the whole cluster."""
        key = (algorithm, op, round(nic_scale, 6))
        if key in self._costs:
            return self._costs[key]
        cost = self._symmetric_cost(algorithm, op, nic_scale)
        if cost is None:
            cost = self._whole_cluster_cost(algorithm, op, nic_scale)
        self.paths[(algorithm, op)] = cost.path
        self._costs[key] = cost
        return cost

    def _nvls_weight(self) -> float:
        gen = GENERATION.get(self.spec.gpu, "hopper")
        return 1.0 / NVLS_EFFICIENCY.get(gen, 0.85)

    def _whole_cluster_cost(self, algorithm: str, op: str, nic_scale: float) -> PlanCost:
        """Every flow of every job routed and max-min shared on the whole network."""
        capacity = self.capacity_bytes_per_s
        if nic_scale != 1.0:
            capacity = capacity.copy()
            capacity[self.network.nic_links()] *= self._nic_link_scale(nic_scale)
        plan = ALGORITHMS[algorithm].plan(op, self.cluster)
        nvls_w = self._nvls_weight()
        total = 0.0
        worst_phase, inter_bound = -1.0, False
        r_intra = r_inter = math.inf
        link_bytes = np.zeros(self.network.n_links)
        stride = self.spec.node.gpus_per_node
        jobs = self.jobs
        for ph in plan.phases:
            weight = np.ones(len(ph.src))
            if plan.nvls_flows is not None:
                weight = np.where(plan.nvls_flows, nvls_w, 1.0)
            s_node = np.where(ph.src < 0, -1 - ph.src, ph.src // stride)
            d_node = np.where(ph.dst < 0, -1 - ph.dst, ph.dst // stride)
            src = np.concatenate([self._place(ph.src, j) for j in range(jobs)])
            dst = np.concatenate([self._place(ph.dst, j) for j in range(jobs)])
            frac = np.tile(ph.fraction, jobs)
            w = np.tile(weight, jobs)
            cross = np.tile(s_node != d_node, jobs)
            loads = self.network.loads(src, dst, capacity)
            t_flow = frac * w / loads.rates_bytes_per_s
            t_in = float(t_flow[~cross].max()) if (~cross).any() else -math.inf
            t_out = float(t_flow[cross].max()) if cross.any() else -math.inf
            phase_t = max(t_in, t_out, 0.0)
            link_bytes += ph.repeat * loads.link_bytes(frac)
            rates = loads.rates_bytes_per_s / w
            if (~cross).any():
                r_intra = min(r_intra, float(rates[~cross].min()))
            if cross.any():
                r_inter = min(r_inter, float(rates[cross].min()))
            total += ph.repeat * phase_t
            if ph.repeat * phase_t > worst_phase:
                worst_phase, inter_bound = ph.repeat * phase_t, t_out > t_in
        return PlanCost(plan=plan, seconds_per_byte=total, inter_bound=inter_bound, r_intra=r_intra,
                        r_inter=r_inter, loads=link_bytes, network=self.network,
                        max_fraction=max(float(ph.fraction.max()) for ph in plan.phases), path=WHOLE_CLUSTER)

    # ------------------------------------------------------------------ symmetric evaluation
    def _symmetric_parts(self, algorithm: str, op: str) -> tuple | None:
        """The plan in symmetric form with what does not depend on capacities: per phase, flows
        counted on every link (each flow once: the phase's flows share one fraction), and the
        plan's bytes per byte of S on every link. ``None`` when there is no symmetric form."""
        key = (algorithm, op)
        if key in self._symmetric:
            return self._symmetric[key]
        parts = None
        if self.whole_cluster_reason is None:
            sp = symmetric_plan(algorithm, op, self.cluster)
            if sp is not None:
                counted, loads = self._count(sp)
                # The server-level patterns are counted: keep what costing needs, not the patterns.
                light = tuple(dataclasses.replace(ph, crossing=()) for ph in sp.phases)
                parts = (sp.plan, light, sp.max_fraction, counted, loads)
        self._symmetric[key] = parts
        return parts

    def _count(self, sp: SymmetricPlan) -> tuple[list, LoadMap]:
        net = self.network
        jobs = range(self.jobs)
        counted = []
        loads = LoadMap()
        for ph in sp.phases:
            server = None
            if len(ph.server_src):
                server = net.symmetric_loads(server=ServerFlows(src=ph.server_src, dst=ph.server_dst, weight=1.0))
                served = net.symmetric_loads(server=ServerFlows(src=ph.server_src, dst=ph.server_dst,
                                                                weight=ph.server_fraction))
                loads = loads + served.scaled(ph.repeat)
            crossing = None
            if ph.crossing:
                placed = ph.crossing if self.jobs == 1 else [
                    CrossingFlows(src_server=np.concatenate([self._place_server(x.src_server, j) for j in jobs]),
                                  dst_server=np.concatenate([self._place_server(x.dst_server, j) for j in jobs]),
                                  src_local=x.src_local, dst_local=x.dst_local) for x in ph.crossing]
                crossing = net.symmetric_loads(crossing=placed)
                loads = loads + crossing.scaled(ph.repeat * ph.crossing_fraction)
            counted.append((server, crossing))
        return counted, loads

    def _family_capacity(self, nic_scale: float) -> dict[str, float]:
        """Capacity of each link family (degraded link classes and NIC message overhead applied)."""
        net = self.network
        out = {}
        nic = self._nic_link_scale(nic_scale) if nic_scale != 1.0 else None
        for name, fam in net.families().items():
            cap = fam.capacity_bytes_per_s * self._class_factor.get(net.link_classes[fam.link_class], 1.0)
            if nic is not None and fam.nic:
                cap *= nic if np.ndim(nic) == 0 else float(nic[0])
            out[name] = cap
        return out

    @cached_property
    def _server(self) -> tuple[NetworkModel, np.ndarray]:
        """One server's network and its links' capacities (degraded link classes applied)."""
        server = self.network.server_network()
        factor = np.array([self._class_factor.get(c, 1.0) for c in server.link_classes])
        return server, server.capacity_bytes_per_s * factor[server.link_class_id]

    def _symmetric_cost(self, algorithm: str, op: str, nic_scale: float) -> PlanCost | None:
        """The plan costed by symmetry: exact, as the whole-cluster evaluation (tests compare both).

        Every phase's flows between servers share one fraction φ of S, so the slowest of them
        runs at max-min's first level, the smallest ``capacity / flows`` of a link they cross,
        and the phase takes ``φ`` over that rate: a count of flows per link, no max-min over them.
        Where flows between servers do not touch the GPU <-> switch links (NIC fabrics), the
        flows inside a server are max-min shared on one server's links, exactly as on the whole
        cluster. Where they do (NVLink switch tiers and domains), every flow of the phase must
        share φ (and no NVLS derating) and the slowest rates are read off the first level too;
        a pipelined plan whose slowest intra- or inter-server rate is set at a later level of
        max-min returns ``None`` (the whole cluster is evaluated).
        """
        parts = self._symmetric_parts(algorithm, op)
        if parts is None:
            return None
        plan, phases, max_fraction, counted, loads = parts
        caps = self._family_capacity(nic_scale)
        shared = self.network.shared_server_links
        pipelined = bool(plan.pipeline_intra or plan.pipeline_inter)
        nvls_w = self._nvls_weight()
        total = 0.0
        worst_phase, inter_bound = -1.0, False
        r_intra = r_inter = math.inf
        for ph, (server, crossing) in zip(phases, counted):
            t_in = t_out = -math.inf
            if not shared or crossing is None:
                if server is not None:
                    net, cap = self._server
                    w = np.where(ph.server_nvls, nvls_w, 1.0)
                    res = net.loads(ph.server_src, ph.server_dst, cap)
                    t_in = float((ph.server_fraction * w / res.rates_bytes_per_s).max())
                    r_intra = min(r_intra, float((res.rates_bytes_per_s / w).min()))
                if crossing is not None:
                    fair, _ = crossing.min_share(caps)
                    t_out = ph.crossing_fraction * 1.0 / fair
                    r_inter = min(r_inter, fair)
            else:
                phi = ph.crossing_fraction
                if server is not None and (ph.server_nvls.any() or (ph.server_fraction != phi).any()):
                    return None  # flows of different sizes share links: a full max-min is needed
                both = crossing if server is None else server + crossing
                fair, hits = both.min_share(caps)
                t = phi * 1.0 / fair
                intra_hit = server is not None and _touches(server, both, hits)
                inter_hit = _touches(crossing, both, hits)
                if pipelined and ((server is not None and not intra_hit) or not inter_hit):
                    return None
                # Flows on links that saturate at max-min's first level run at it: the slowest ones.
                if intra_hit:
                    r_intra, t_in = min(r_intra, fair), t
                if inter_hit:
                    r_inter, t_out = min(r_inter, fair), t
            phase_t = max(t_in, t_out, 0.0)
            total += ph.repeat * phase_t
            if ph.repeat * phase_t > worst_phase:
                worst_phase, inter_bound = ph.repeat * phase_t, t_out > t_in
        return PlanCost(plan=plan, seconds_per_byte=total, inter_bound=inter_bound, r_intra=r_intra,
                        r_inter=r_inter, loads=loads, network=self.network, max_fraction=max_fraction,
                        path=SYMMETRIC)

    def _nic_link_scale(self, nic_scale: float) -> np.ndarray | float:
        """Per-message overhead on each NIC link: ``nic_scale`` on a healthy link; a link left
        at a fraction f of its rate spends the same time per message, so it keeps
        ``1 / (1 + (1 / nic_scale - 1) f)`` of its (degraded) rate."""
        if self._class_factor is not None:
            f = self._class_factor.get(self.spec.fabric.kind, 1.0) if self.spec.fabric is not None else 1.0
            if f == 1.0:
                return nic_scale
            return np.array([1.0 / (1.0 + (1.0 / nic_scale - 1.0) * f)])
        f = self.capacity_scale[self.network.nic_links()]
        if (f == 1.0).all():
            return nic_scale
        return np.where(f == 1.0, nic_scale, 1.0 / (1.0 + (1.0 / nic_scale - 1.0) * f))

    # ------------------------------------------------------------------ NCCL's model
    @cached_property
    def _intra_hw(self) -> str:
        """NCCL's hardware row for hops inside a server: ``nvlink`` when rings stay on NVLink
        (NVSwitch, NVLink meshes) or AMD xGMI, else ``pci`` (NCCL takes the slowest link of the
        path: a ring through NVLink bridges still crosses PCIe)."""
        return "nvlink" if self.spec.node.interconnect in ("nvswitch", "nvlink-mesh", "xgmi") else "pci"

    @cached_property
    def _rccl(self) -> bool:
        return library(self.spec) == "rccl"

    def _hw_latency_us(self, hw: str, family: str, p: int) -> float:
        """NCCL's hwLat (RCCL's for xGMI and the same algorithms)."""
        if self._rccl and hw == "nvlink" and family in RCCL_XGMI_LATENCY_US:
            return RCCL_XGMI_LATENCY_US[family][p]
        return HW_LATENCY_US[hw][family][p]

    def _base_latency_us(self, family: str, p: int) -> float:
        if self._rccl and family in RCCL_BASE_LATENCY_US:
            return RCCL_BASE_LATENCY_US[family][p]
        return BASE_LATENCY_US[family][p]

    @cached_property
    def _hop_scale(self) -> tuple[float, float, str, str]:
        """(intra scale, inter scale, intra hw, inter hw): preset hop latency over NCCL's ring/Simple one."""
        node, fabric = self.spec.node, self.spec.fabric
        intra_hw = self._intra_hw
        intra = node.gpu_link_latency_s / (self._hw_latency_us(intra_hw, "ring", 2) * US)
        dom = self.spec.nvlink_domain
        if nvlink_fabric(fabric):
            return intra, fabric.nic_latency_s / (HW_LATENCY_US["nvlink"]["ring"][2] * US), intra_hw, "nvlink"
        if dom is not None and self.topology.n_nodes <= dom.nodes:
            return intra, dom.latency_s / (HW_LATENCY_US["nvlink"]["ring"][2] * US), intra_hw, "nvlink"
        if fabric is None:
            return intra, 1.0, intra_hw, "net"
        return intra, fabric.nic_latency_s / (HW_LATENCY_US["net"]["ring"][2] * US), intra_hw, "net"

    def hop_latencies_s(self, algorithm: str, protocol: str) -> tuple[float, float]:
        """(intra-server, inter-server) latency of one hop of ``algorithm`` in ``protocol``
        (NCCL's ``hwLat`` scaled to the topology's ring/Simple hop latencies)."""
        family = algorithm if algorithm in BASE_LATENCY_US else "ring"
        p = PROTOCOLS.index(protocol)
        intra_scale, inter_scale, intra_hw, inter_hw = self._hop_scale
        intra_lat = self._hw_latency_us(intra_hw, family, p) * US * intra_scale
        inter_lat = HW_LATENCY_US[inter_hw][family][p] * US * inter_scale
        if family == "ring" and self.topology.n_nodes > 1 and inter_hw == "net":
            intra_lat = max(intra_lat, (3.0 if protocol == "Simple" else 1.0) * US)
        return intra_lat, inter_lat

    def _latency_s(self, plan: Plan, protocol: str) -> float:
        family = plan.algorithm if plan.algorithm in BASE_LATENCY_US else "ring"
        p = PROTOCOLS.index(protocol)
        intra_lat, inter_lat = self.hop_latencies_s(plan.algorithm, protocol)
        multi = self.topology.n_nodes > 1
        lat = self._base_latency_us(family, p) * US + plan.intra_hops * intra_lat + plan.inter_hops * inter_lat
        if plan.algorithm == "ring" and protocol == "Simple" and multi and plan.op == "all_reduce" and not self._rccl:
            lat *= 1.9 if GENERATION.get(self.spec.gpu) == "volta" else 1.4
        return lat

    def _protocol_enabled(self, algorithm: str, protocol: str) -> bool:
        if algorithm in ("nvls", "nvls_tree"):
            return protocol == "Simple"
        if self.crosses_network and protocol not in self.spec.fabric.transport.network_protocols:
            return False  # the network plugin set NCCL_PROTO (e.g. Simple only on EFA v1)
        if protocol == "LL128":
            # NCCL enables LL128 only where rings stay on NVLink (typeIntra <= PATH_NVB); RCCL only
            # on the systems its model table marks ll128Enabled (not MI300X's, rome_model_79).
            if self._rccl or self._intra_hw != "nvlink":
                return False
            if self.topology.n_nodes > 1 and GENERATION.get(self.spec.gpu) in ("volta", "ampere"):
                return False
            # ... and where the path to the NIC is at most PATH_PXB (PATH_PXN from sm90); without
            # GPUDirect RDMA NCCL diverts it through the CPU (src/graph/paths.cc@5067397
            # ncclTopoComputePaths, ncclTopoCheckGdr == 0: PATH_PHB or worse), so sockets and
            # host-staged RDMA never run LL128 across servers (src/graph/tuning.cc@5067397).
            if self.crosses_network and not self.spec.fabric.transport.gpudirect:
                return False
        # ROCm/rccl@0cbce2a7 src/graph/tuning.cc: no tree/Simple when every rank of a gfx94x
        # (MI300) communicator is on one node.
        return not (self._rccl and algorithm == "tree" and protocol == "Simple" and self.topology.n_nodes == 1
                    and self.spec.gpu == "mi300x")

    def _ll_max_bw(self) -> float:
        n = self.topology.n_nodes
        col = 0 if n == 1 else (1 if n == 2 else 2)
        gen = GENERATION.get(self.spec.gpu, "hopper")
        row = (gen if gen in LL_MAX_BW_GBPS else "ampere") if n == 1 else "volta"  # Intel CPU row across servers
        return LL_MAX_BW_GBPS[row][col] * 1e9

    @cached_property
    def _nccl_picks_channels(self) -> bool:
        """NCCL's own tuning sets the tree's channels (one per NIC port): not over Google's
        TCPX/TCPXO, whose tuner plugin (``NCCL_TUNER_PLUGIN``, with ``NCCL_MIN_NCHANNELS``) picks
        algorithm, protocol and channels by size from a table Google does not publish
        (AI-Hypercomputer/gpu-recipes@c72e38d a3mega ``nemo-launcher-job.yaml``)."""
        return self.spec.fabric.transport.kind not in ("tcpx", "tcpxo")

    def _tree_channel_max_bw(self) -> float:
        """What one channel of the double binary tree moves across servers at most, bytes/s of bus
        bandwidth (NCCL's ``perChMaxTreeBws``, :data:`PER_CHANNEL_MAX_TREE_BW_GBPS`).

        A tree channel is one CTA that receives, reduces and forwards along the chain and the tree
        at once, so it runs out of SM throughput before a fast NIC does: NVLS tree "can achieve peak
        bandwidth with only 16 SMs ... whereas tree would require 32 SMs" (S. Jeaugey,
        NVIDIA/nccl#1649). With the flow model's tree unbounded, two servers' tree moved each NIC's
        share once instead of a ring's 2(n-1)/n and won where NCCL, bounding it by this, runs the
        ring: two 8x A100 servers with 4 HDR NICs each (4 channels: 4 x 23.6 = 94 GB/s of tree bus
        bandwidth against a ring's 4 x 24) measure the ring's 47.8 GB/s of algorithm bandwidth
        (NVIDIA/nccl-tests#152), not a tree's 85. Applied across NICs only: there a channel is one
        NIC port's ring or tree, as NCCL's graph search builds them (one server's tree, or an NVLink
        domain's, has no NIC to bind its channels)."""
        n = self.topology.n_nodes
        col = 0 if n == 1 else (1 if n == 2 else 2)
        gen = GENERATION.get(self.spec.gpu, "hopper")
        return PER_CHANNEL_MAX_TREE_BW_GBPS.get(gen, PER_CHANNEL_MAX_TREE_BW_GBPS["hopper"])[col] * 1e9

    def _channels(self, protocol: str, size_bytes: float, k: int) -> int:
        per = THREADS[protocol] * THREAD_THRESHOLD[protocol] * (self.n_ranks if protocol == "LL" else 1)
        return max(1, min(k, int(size_bytes // per)))

    def message_bytes(self, algorithm: str, protocol: str, op: str, size_bytes: float) -> float:
        """Bytes per network message (one NCCL step/chunk of a channel) for this call."""
        pc = self.plan_cost(algorithm, op)
        plan = pc.plan
        if algorithm == "nvls_tree":
            return self._nvls_tree_chunk(size_bytes)
        if algorithm == "tree":
            return min(CHUNK_BYTES[protocol], size_bytes / max(1, plan.channels))
        # Rings: one step of one flow at a time.
        per_step = pc.max_fraction * size_bytes
        return max(1.0, min(CHUNK_BYTES[protocol], per_step))

    @cached_property
    def nvls(self) -> NvlsTuning:
        """NCCL's NVLS channels and chunk sizes for this communicator (:func:`nvls_tuning`)."""
        fabric = self.spec.fabric
        n_nodes = self.topology.n_nodes if self.crosses_network else 1
        nic_gbyte_per_s = fabric.nic_bandwidth_bytes_per_s / 1e9 if fabric is not None else 0.0
        # A NIC per GPU is what puts one behind each GPU's PCIe switch (PATH_PXB) on the NVSwitch
        # servers NVLS runs on (DGX/HGX H100 and B200, AWS P5/P6).
        behind = fabric is not None and fabric.nics_per_node >= self.topology.gpus_per_node
        return nvls_tuning(GENERATION.get(self.spec.gpu, "hopper"), n_nodes, nic_gbyte_per_s,
                           self.topology.gpus_per_node, behind)

    def _nvls_tree_chunk(self, size_bytes: float) -> float:
        return nvls_tree_chunk_bytes(self.nvls, self.topology.gpus_per_node, size_bytes)

    def nic_scale(self, message_bytes: float) -> float:
        """Fraction of a NIC port's rate left with messages of ``message_bytes``: LogGP's
        ``1 / (1 + g r / c)`` with g = ``fabric.nic_message_overhead_us`` (1 without one)."""
        fabric = self.spec.fabric
        if not nic_fabric(fabric) or fabric.nic_message_overhead_s <= 0:
            return 1.0
        rate = fabric.nic_bandwidth_bytes_per_s * fabric.nic_efficiency
        return 1.0 / (1.0 + fabric.nic_message_overhead_s * rate / message_bytes)

    def _socket_tasks_scale(self, algorithm: str, protocol: str, op: str, size_bytes: float) -> float:
        """Fraction of the socket transport's stream cap one connection's messages can use.

        NCCL's socket transport splits each message (one step of one channel) into tasks of
        ``max(64 KiB, size / sockets)`` spread over the connection's sockets
        (src/transport/net_socket.cc@5067397, ``MIN_CHUNKSIZE``): a message under
        ``sockets x 64 KiB`` leaves sockets idle, and the NIC then carries at most
        ``connections x busy sockets x stream rate``. Each channel has its own connection
        (``connections_per_nic``), so a step is ``S x fraction x plan channels / connections``.
        """
        fabric = self.spec.fabric
        transport = fabric.transport
        if (transport.kind != "socket" or transport.streams_per_connection <= 1
                or not math.isfinite(transport.stream_bytes_per_s) or algorithm not in ("ring", "tree")):
            return 1.0
        pc = self.plan_cost(algorithm, op)
        channels = max(1, pc.plan.channels)
        connections = max(channels, transport.connections_per_nic)
        step = pc.max_fraction * size_bytes if algorithm == "ring" else size_bytes / channels
        per_connection = min(CHUNK_BYTES[protocol], step * channels / connections)
        busy = min(transport.streams_per_connection, max(1, math.ceil(per_connection / SOCKET_MIN_TASK_BYTES)))
        line = fabric.nic_bandwidth_bytes_per_s
        full = min(transport.wire_efficiency, transport.stream_cap_bytes_per_s / line)
        part = min(transport.wire_efficiency,
                   transport.connections_per_nic * busy * transport.stream_bytes_per_s / line)
        return part / full if full > 0 else 1.0

    def cost(self, algorithm: str, protocol: str, op: str, size_bytes: float) -> Choice:
        """What one algorithm x protocol takes: NCCL's estimate, the per-call overhead and the
        measured bandwidth ramp of the Simple protocol included.

        NCCL's regimes change at fixed sizes (channels kept, NVLS-tree chunk size, the
        tree correction table), where the raw estimate can drop as the message grows; a
        bigger message is never faster here: the time is the largest of the raw estimate
        and its values just below each regime change under ``size_bytes``.
        """
        raw = self._raw_cost(algorithm, protocol, op, size_bytes)
        worst = max(raw.time_s + self._ramp_extra_s(raw, size_bytes),
                    self._below_regime_changes_s(algorithm, protocol, op, size_bytes))
        if worst > raw.time_s:
            raw = Choice(algorithm=raw.algorithm, protocol=raw.protocol, time_s=worst,
                         latency_s=raw.latency_s, channels=raw.channels, transfer_s=raw.transfer_s)
        return raw

    def _below_regime_changes_s(self, algorithm: str, protocol: str, op: str, size_bytes: float) -> float:
        """The largest time just below a regime change at or under ``size_bytes`` (0 when none).

        The changes sit at fixed sizes, so their times are computed once per algorithm x
        protocol x op, with their running maximum (a sweep asks for hundreds of sizes)."""
        key = (algorithm, protocol, op)
        table = self._below.get(key)
        if table is None:
            sizes = sorted(self._breakpoints(algorithm, protocol, op))
            tops, top = [], 0.0
            for b in sizes:
                below = self._raw_cost(algorithm, protocol, op, b - 1)
                top = max(top, below.time_s + self._ramp_extra_s(below, b - 1))
                tops.append(top)
            table = self._below[key] = (sizes, tops)
        sizes, tops = table
        i = bisect_right(sizes, size_bytes)
        return tops[i - 1] if i else 0.0

    def _ramp_extra_s(self, raw: Choice, size_bytes: float) -> float:
        """What the Simple protocol's bandwidth ramp (:meth:`NcclTuning.ramp`) adds to a transfer:
        LL and LL128 carry their own factors from NCCL's model, Simple reaches its bandwidth
        only on large messages (measured; see ``validation/accuracy_collectives.py``)."""
        if raw.protocol != "Simple" or raw.algorithm == "nvls":
            return 0.0  # NVLS: its chunk steps (:meth:`_nvls_steps_s`) are its mid-size cost
        if raw.algorithm == "nvls_tree" and self.crosses_network:
            scope = "nvls_tree"  # its 32-128 KiB chunks stream unlike a ring's or tree's 512 KiB ones
        else:
            scope = self.ramp_scope
        return raw.transfer_s * (1.0 / self.tuning.ramp(scope, size_bytes) - 1.0)

    def _breakpoints(self, algorithm: str, protocol: str, op: str) -> list[float]:
        out: list[float] = []
        k = self.plan_cost(algorithm, op).plan.channels
        per = THREADS[protocol] * THREAD_THRESHOLD[protocol] * (self.n_ranks if protocol == "LL" else 1)
        out += [j * per for j in range(2, k + 1)]
        if algorithm == "nvls_tree":
            out += nvls_tree_chunk_breaks(self.nvls, self.topology.gpus_per_node)
        if algorithm == "nvls":
            # A bigger chunk halves the steps at each break: the step term drops there.
            out += nvls_chunk_breaks(self.nvls, self.nvls_heads)
        if algorithm == "tree" or (algorithm == "nvls_tree" and GENERATION.get(self.spec.gpu) == "blackwell"):
            out += [64 * 2 ** i for i in range(1, len(TREE_CORRECTION[protocol]) + 1)]
        return out

    def _raw_cost(self, algorithm: str, protocol: str, op: str, size_bytes: float) -> Choice:
        scale = 1.0
        if self.topology.n_nodes > 1:
            scale = (self.nic_scale(self.message_bytes(algorithm, protocol, op, size_bytes))
                     * self._socket_tasks_scale(algorithm, protocol, op, size_bytes))
        pc = self.plan_cost(algorithm, op, scale)
        plan = pc.plan
        n = self.n_ranks
        spb = pc.seconds_per_byte
        k = plan.channels
        kept = self._channels(protocol, size_bytes, k)
        if pc.inter_bound and kept < k:
            spb *= k / kept
        algbw = 1.0 / spb if spb > 0 else math.inf
        family = algorithm if algorithm in ("tree", "nvls", "nvls_tree") else "ring"
        # NCCL's "bus bandwidth" of the algorithm, to apply its protocol factors and caps.
        ratio = 2.0 if family == "tree" else (bus_factor(op, n) if op != "broadcast" else 1.0)
        bus = algbw * ratio
        single = self.topology.n_nodes == 1
        if family == "ring":
            if protocol == "LL":
                bus = min(self._ll_max_bw(), bus * 0.5)
            elif protocol == "LL128":
                bus *= 0.92
        elif family == "tree":
            bus *= 0.92
            if self.crosses_network and op == "all_reduce" and self._nccl_picks_channels:
                # NCCL's graph search binds each tree channel to one NIC port (NET device);
                # a NIC node of several ports is one channel here but that many in NCCL.
                bus = min(bus, kept * nic_layout(self.spec).ports_per_nic * self._tree_channel_max_bw())
            if protocol == "LL":
                bus = min(bus / 3.8, self._ll_max_bw())
            elif protocol == "LL128":
                bus *= 7.0 / 9.0 if single else 120.0 / 128.0
            bus *= _tree_correction(protocol, size_bytes)
        elif family == "nvls_tree" and GENERATION.get(self.spec.gpu) == "blackwell" and op == "all_reduce":
            # NCCL applies the trees' size correction to NVLS tree on Blackwell (x86 hosts)
            # too (src/graph/tuning.cc@5067397 ncclTopoGetAlgoTime): its ramp differs from Hopper's.
            bus *= _tree_correction(protocol, size_bytes)
        algbw = bus / ratio
        latency = self._latency_s(plan, protocol)
        transfer = size_bytes / algbw if algbw > 0 else math.inf
        transfer = max(transfer, self._window_s(pc, protocol, op, size_bytes))
        if family == "nvls":
            transfer = max(transfer, self._nvls_steps_s(op, size_bytes))
        # The fill runs through every stage at its own rate, slowed by the protocol (not by caps).
        nominal = {"LL": 0.5, "LL128": 0.92, "Simple": 1.0}[protocol] if family != "nvls" else 1.0
        fill = self._fill_s(pc, protocol, size_bytes, nominal)
        overhead = self.call_overhead_s
        return Choice(algorithm=algorithm, protocol=protocol, time_s=overhead + latency + transfer + fill,
                      latency_s=overhead + latency, channels=kept, transfer_s=size_bytes * pc.seconds_per_byte)

    @cached_property
    def crosses_network(self) -> bool:
        """The communicator's collectives cross NICs (not one server, not one NVLink domain)."""
        return self.topology.crosses_nics

    @cached_property
    def ramp_scope(self) -> str:
        """``network`` when collectives cross NICs (``verbs`` over NCCL's IB verbs transport, IB or
        RoCE; ``staged`` when the transport stages every byte through host memory, ``tcpx`` over
        Google's GPUDirect-TCPX/TCPXO), else ``node``
        (:attr:`NcclTuning.ramp_half_bytes`)."""
        if not self.crosses_network:
            return "node"
        transport = self.spec.fabric.transport
        if not transport.gpudirect:
            return "staged"
        if transport.kind in ("ib", "roce"):
            return "verbs"
        return "tcpx" if transport.kind in ("tcpx", "tcpxo") else "network"

    @cached_property
    def call_overhead_s(self) -> float:
        """Per-call host overhead: the topology's ``launch_overhead_us``, else the transport's own,
        else the fitted default of the scope (one server, or the NICs' transport kind)."""
        if self.spec.launch_overhead_s is not None:
            return self.spec.launch_overhead_s
        if self.crosses_network:
            transport = self.spec.fabric.transport
            if transport.call_overhead_s is not None:
                return transport.call_overhead_s
            return self.tuning.call_overhead_s(transport.kind)
        return self.tuning.call_overhead_s("node")

    def _window_s(self, pc: PlanCost, protocol: str, op: str, size_bytes: float) -> float:
        """Flow-control bound: a channel keeps at most NCCL_STEPS chunks in flight and a
        chunk slot comes back after one intra + one inter hop latency (NCCL's own hwLat),
        so a channel moves at most ``NCCL_STEPS * chunk / rtt`` bytes/s. Binds only with
        small chunks and slow hops (NVLS tree's 32-64 KiB chunks across servers)."""
        plan = pc.plan
        if self.topology.n_nodes == 1 or plan.algorithm not in ("nvls_tree", "tree"):
            return 0.0
        intra_scale, inter_scale, intra_hw, inter_hw = self._hop_scale
        p = PROTOCOLS.index(protocol)
        family = plan.algorithm
        rtt = (HW_LATENCY_US[intra_hw][family][p] * intra_scale
               + HW_LATENCY_US[inter_hw][family][p] * inter_scale) * US
        if rtt <= 0:
            return 0.0
        if family == "nvls_tree":
            chunk = self._nvls_tree_chunk(size_bytes)
            streams = self.nvls.channels
            rtt *= self.tuning.nvls_tree_rtt_scale
        else:
            chunk = min(CHUNK_BYTES[protocol], size_bytes / max(1, plan.channels))
            streams = plan.channels
        return (size_bytes / streams) * rtt / (NCCL_STEPS * chunk)

    @cached_property
    def nvls_heads(self) -> int:
        """NVLS heads: every GPU of the NVLink domain, at most 32 (:data:`NVLS_MAX_ARITY`)."""
        return max(1, min(NVLS_MAX_ARITY, self.n_ranks))

    def _nvls_steps_s(self, op: str, size_bytes: float) -> float:
        """NVLS in chunk steps: each step a channel reduces and multicasts one chunk per head
        (``calcCollChunking``'s chunk, :func:`nvls_steps`); a step takes the fitted
        :meth:`NcclTuning.nvls_step_s`. Reduce-scatter and all-gather run one of all-reduce's two
        switch passes per chunk, so their steps move half its bytes (an assumption: only
        all-reduce is measured). 0 without fitted step constants."""
        steps, chunk = nvls_steps(self.nvls, self.nvls_heads, size_bytes)
        passes = 1.0 if op == "all_reduce" else 0.5
        return steps * self.tuning.nvls_step_s(passes * self.nvls_heads * chunk)

    def _fill_s(self, pc: PlanCost, protocol: str, size_bytes: float, proto_factor: float) -> float:
        plan = pc.plan
        if plan.pipeline_intra == 0 and plan.pipeline_inter == 0:
            return 0.0
        if plan.algorithm == "nvls_tree":
            chunk = self._nvls_tree_chunk(size_bytes)
        elif plan.algorithm == "ring":  # broadcast chain
            chunk = BROADCAST_SLICE_BYTES
        else:
            chunk = CHUNK_BYTES[protocol]
        if plan.algorithm != "nvls_tree":
            chunk = min(chunk, size_bytes / max(1, plan.channels))
        stages = 0.0
        slowest = min(pc.r_intra, pc.r_inter)
        if plan.pipeline_intra and math.isfinite(pc.r_intra):
            stages += plan.pipeline_intra / pc.r_intra
        if plan.pipeline_inter and math.isfinite(pc.r_inter):
            stages += plan.pipeline_inter / pc.r_inter
        if math.isfinite(slowest) and stages > 0:
            stages -= 1.0 / slowest
        return max(0.0, chunk * stages / max(proto_factor, 1e-12))

    def candidates(self, op: str) -> list[tuple[str, str]]:
        """Algorithm x protocol pairs that can run ``op`` here."""
        out = []
        for a in self.algorithms:
            algo = ALGORITHMS[a]
            if not algo.supports(op, self.cluster):
                continue
            for p in self.protocols:
                if self._protocol_enabled(a, p):
                    out.append((a, p))
        return out

    def choose(self, op: str, size_bytes: float) -> Choice:
        """The fastest allowed algorithm x protocol for one call (cached per op and size)."""
        key = (op, float(size_bytes))
        if key not in self._choices:
            self._choices[key] = self._choose(op, size_bytes)
        return self._choices[key]

    def _choose(self, op: str, size_bytes: float) -> Choice:
        options = self.candidates(op)
        if not options:
            if self._forced:
                raise ConfigError(
                    f"--algo/--proto: none of {', '.join(self.algorithms)} x {', '.join(self.protocols)} can run "
                    f"{op} on {self.n_ranks} GPUs of {self.spec.name!r} (nvls needs NVSwitch and Hopper or later; "
                    "nvls runs inside one server, nvls_tree across several; halving_doubling reduce_scatter and "
                    "all_gather need a power-of-two number of GPUs; the NICs' transport lets only the protocols "
                    f"{', '.join(self.spec.fabric.transport.network_protocols) if self.crosses_network else 'any'} "
                    "cross servers)")
            raise ConfigError(f"no algorithm can run {op} here")
        # The fastest option *with* the measured ramp, not NCCL's own pick (its estimate has no
        # ramp): switching by that estimate from a ramped Simple option to LL one size up would
        # make a larger message finish sooner, which no reference table shows; a minimum of
        # options each monotone in size stays monotone.
        return min((self.cost(a, p, op, size_bytes) for a, p in options), key=lambda c: c.time_s)

    def time(self, op: str, size_bytes: float) -> CollectiveResult:
        """Cost of ``op`` on ``size_bytes`` (the :class:`~dpsim.collectives.ops.CollectiveModel` call)."""
        check_message(op, size_bytes, self.n_ranks)
        if self.n_ranks == 1 or size_bytes == 0:
            return CollectiveResult(op=op, algorithm="none", n_ranks=self.n_ranks, size_bytes=size_bytes,
                                    time_s=0.0, latency_s=0.0, protocol="none")
        c = self.choose(op, size_bytes)
        intra, inter = self.hop_latencies_s(c.algorithm, c.protocol)
        return CollectiveResult(op=op, algorithm=c.algorithm, n_ranks=self.n_ranks, size_bytes=size_bytes,
                                time_s=c.time_s, latency_s=c.latency_s, protocol=c.protocol,
                                channels=c.channels, intra_hop_latency_s=intra,
                                inter_hop_latency_s=inter if self.topology.n_nodes > 1 else None)

    def table(self, op: str, size_bytes: float) -> list[Choice]:
        """Every allowed algorithm x protocol's estimate, fastest first (``--explain``)."""
        return sorted((self.cost(a, p, op, size_bytes) for a, p in self.candidates(op)), key=lambda c: c.time_s)
