"""The network's evaluation of an algorithm's plan on one communicator (and the jobs sharing its cluster).

A plan (:mod:`dpsim.collectives.algorithms`) is the traffic of one op; :class:`PlanEvaluator`
runs it through the network model once per (algorithm, op) and NIC rate and keeps what NCCL's
cost model needs (:class:`PlanCost`: seconds per byte of the slowest flows, which side binds,
the pipelined rates, the links' loads).

**Evaluation.** By default by symmetry (:data:`SYMMETRIC`): the plan in symmetric form
(:mod:`dpsim.collectives.symmetric`: one server's flows, server-level patterns), counted on
every link family by the network (:meth:`~dpsim.network.model.NetworkModel.symmetric_loads`),
the flows inside a server max-min shared on one server's links; the cost depends on the
servers only through integer counts per server, not on GPUs, channels or flows, and the
result is the whole-cluster one (``tests/test_symmetric.py``). Where flows between servers
cross the GPU links that flows inside a server use (NVLink domains and switch tiers, PCIe
trees) and flows of different sizes (or NVLS flows) share them, or a pipelined plan's slowest
rates are set past max-min's first level (the double binary tree, NVLS + tree), max-min runs
over the whole cluster's flows routed by symmetry in blocks of servers and pattern edges
(:func:`~dpsim.network.maxmin.max_min_routes`): the whole-cluster rates bit for bit, without
listing a route per flow (a few numpy passes over servers and pattern edges per level).
On either path a phase whose flows move different bytes re-shares its links as flows finish
(:func:`~dpsim.network.maxmin.progressive_finish`): a fixed share let a flow throttled by a
degraded link free capacity for the largest one, and the phase got shorter.
Flow by flow on the whole cluster (:data:`WHOLE_CLUSTER`) for what is not symmetric: a user
graph (:class:`~dpsim.network.graph_network.FlowNetwork`), ``--degrade`` naming single links,
a partial server, plans without a symmetric form (a broadcast chain, halving-doubling off
powers of two). :attr:`PlanEvaluator.evaluation` says which ran.
"""

from __future__ import annotations

import dataclasses
import math
from collections import OrderedDict
from dataclasses import field
from functools import cached_property

import numpy as np

from dpsim.collectives.algorithms import ALGORITHMS
from dpsim.collectives.algorithms.base import Cluster, Plan
from dpsim.collectives.algorithms.nvls import switch_fractions
from dpsim.collectives.nccl_tuning import nvls_available
from dpsim.collectives.symmetric import SymmetricPlan, symmetric_plan
from dpsim.frozen import frozen_dataclass
from dpsim.network.degrade import (
    class_factors,
    communicator_degradations,
    degradation_terms,
    names_one_link,
    same_numbering,
)
from dpsim.network.loadmap import LoadMap
from dpsim.network.maxmin import Reshare, max_min_routes, progressive_finish
from dpsim.network.model import CrossingFlows, NetworkModel, ServerFlows
from dpsim.network.tiers import TierNetwork
from dpsim.topology.cluster import Topology

SYMMETRIC = "symmetric"
"""Evaluation path: one server's flows max-min shared, traffic between servers counted by
symmetry (:mod:`dpsim.collectives.symmetric`); cost independent of the cluster's size."""
WHOLE_CLUSTER = "whole cluster"
"""Evaluation path: every flow of the cluster routed and max-min shared."""


@frozen_dataclass
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
    phase_seconds_per_byte: tuple[tuple[int, float, float], ...] = ()
    """Per phase ``(repeat, t_in, t_out)``: when its last flow inside a server and its last flow
    between servers finish, per byte of S (``-inf``: none), what NCCL's cost model needs to slow
    only the flows between servers when it keeps fewer channels (a per-channel NIC resource)."""
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



_SHARED: OrderedDict[tuple, dict] = OrderedDict()
_SHARED_MAX = 64
"""Models whose plan costs and choices are kept for reuse (least recently used dropped first)."""


def shared_state(key: tuple | None) -> dict:
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



def _differ(size: np.ndarray) -> bool:
    """Whether flows of a phase move different bytes: then a fixed max-min share can mis-order
    them and they are costed as they finish (:func:`~dpsim.network.maxmin.progressive_finish`)."""
    return bool(size.size) and bool((size != size.flat[0]).any())


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



class PlanEvaluator:
    """The plans of one communicator's algorithms, evaluated on the cluster's network.

    Parameters are :class:`~dpsim.collectives.nccl.NcclCollectives`' (``jobs``, ``placement``,
    ``degradations``, ``job``, ``network``, ``symmetric``); ``nvls_weight`` is what a byte through
    the switch's in-network reduction costs (:attr:`~dpsim.collectives.fabric_facts.FabricFacts.nvls_weight`),
    ``cache`` the shared caches of models built with the same arguments (:func:`shared_state`).
    """

    def __init__(self, topology: Topology, *, jobs: int = 1, placement: str = "packed", degradations=(),
                 job=None, network: NetworkModel | None = None, symmetric: bool = True,
                 nvls_weight: float = 1.0, cache: dict | None = None):
        self.topology = topology
        self.spec = topology.spec
        self.jobs = jobs
        self.placement = placement
        self.cluster_topology = (topology if jobs == 1 else
                                 Topology(spec=topology.spec, n_gpus=topology.n_gpus * jobs))
        """Every job's servers."""
        self.network: NetworkModel = network if network is not None else TierNetwork(self.cluster_topology)
        """The cluster's links (every job's), through the network interface only."""
        self.degradations = tuple(degradations)
        """Links below capacity, as given."""
        self._job = job
        self._terms: list = []
        if self.degradations:
            strict = job is None or same_numbering(job, topology)
            named = self.degradations if job is None else communicator_degradations(self.degradations, job, topology)
            self._terms = degradation_terms(self.network, named, strict=strict)
        self.cluster = Cluster.of(topology, nvls=nvls_available(topology.spec))
        """The communicator's ranks as the algorithms see them."""
        self.nvls_weight = nvls_weight
        """Bytes a flow through the switch's reduction costs per byte of S."""
        self._class_factor = class_factors(self._terms)
        self.whole_cluster_reason: str | None = self._whole_cluster_reason() if symmetric else "asked for"
        """Why plans are evaluated flow by flow on the whole cluster (``None``: by symmetry)."""
        cache = cache if cache is not None else shared_state(None)
        self.costs: dict[tuple, PlanCost] = cache["costs"]
        """Every plan cost evaluated so far, by (algorithm, op, NIC scale): shared by the models
        built with the same arguments (its identity names them)."""
        self._symmetric: dict[tuple[str, str], tuple | None] = cache["symmetric"]
        self.paths: dict[tuple[str, str], str] = cache["paths"]
        """How each (algorithm, op) evaluated so far was evaluated."""

    @cached_property
    def _healthy(self) -> PlanEvaluator:
        """The same communicator on the same network with no link degraded."""
        return PlanEvaluator(self.topology, jobs=self.jobs, placement=self.placement, network=self.network,
                             symmetric=self.whole_cluster_reason != "asked for", nvls_weight=self.nvls_weight)

    @cached_property
    def _inside_server(self) -> PlanEvaluator | None:
        """The same communicator with only the degraded links a server has inside it (its GPU links' classes,
        named GPU links); ``None`` when that is all of them, or none (then :attr:`_healthy` bounds alike)."""
        server = self.network.server_network()
        if server is None:
            return None
        classes = set(server.link_classes)
        inside = tuple(d for d in self.degradations if d.link in classes
                       or (names_one_link(d.link) and ".gpu" in d.link))
        if not inside or len(inside) == len(self.degradations):
            return None
        return PlanEvaluator(self.topology, jobs=self.jobs, placement=self.placement, degradations=inside,
                             job=self._job, network=self.network, symmetric=self.whole_cluster_reason != "asked for",
                             nvls_weight=self.nvls_weight)

    def slowest_class_factors(self) -> dict[str, float]:
        """Per link class of the network, the lowest capacity factor ``--degrade`` leaves any of its
        links (classes with no degraded link left out): an exchange whose links of a class all carry
        the same bytes (a uniform all-to-all, by symmetry) is paced by its slowest one."""
        if not self._terms:
            return {}
        net = self.network
        scale = np.ones(net.n_links)
        for kind, what, f in self._terms:
            scale[net.class_links(what) if kind == "class" else what] *= f
        ids = net.link_class_id
        return {cls: float(scale[ids == i].min()) for i, cls in enumerate(net.link_classes)
                if (ids == i).any() and scale[ids == i].min() < 1.0}

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
        running at ``nic_scale`` of their rate (per-message overhead,
        :meth:`~dpsim.collectives.fabric_facts.FabricFacts.nic_scale`).

        Evaluated by symmetry (:data:`SYMMETRIC`) when the plan has a symmetric form and the
        network can count it (:meth:`_symmetric_cost`), else flow by flow on the whole cluster."""
        key = (algorithm, op, round(nic_scale, 6))
        if key in self.costs:
            return self.costs[key]
        cost = self._symmetric_cost(algorithm, op, nic_scale)
        if cost is None:
            cost = self._whole_cluster_cost(algorithm, op, nic_scale)
        if self._terms and (cost.plan.pipeline_intra or cost.plan.pipeline_inter):
            # A pipeline's stages relay one stream of chunks: a stage whose max-min rate rises only
            # because a degraded link throttles the flows it shares links with (stages of the same
            # pipeline) runs no faster than healthy, so a degraded link never shortens the fill.
            healthy = self._healthy.plan_cost(algorithm, op, nic_scale)
            r_intra = min(cost.r_intra, healthy.r_intra)
            if self._inside_server is not None:
                # Nor faster than with the server's own links alone degraded: nvlink:50% with nvlink-domain:10%
                # too ran the stages inside a server at their healthy rate (the domain's links held back the
                # flows between servers that share the GPU links), faster than nvlink:50% alone (576 GPUs of
                # gb200-nvl72, all_reduce of 256 KiB: 0.26 % faster with the one more link degraded).
                r_intra = min(r_intra, self._inside_server.plan_cost(algorithm, op, nic_scale).r_intra)
            cost = dataclasses.replace(cost, r_intra=r_intra, r_inter=min(cost.r_inter, healthy.r_inter))
        if self._terms and algorithm in ("nvls", "nvls_tree"):
            cost = self._nvls_tier_bound(algorithm, op, cost)
        self.paths[(algorithm, op)] = cost.path
        self.costs[key] = cost
        return cost

    def _nvls_tier_bound(self, algorithm: str, op: str, cost: PlanCost) -> PlanCost:
        """NVLS over an NVLink domain (or switch tier) of several servers, with that tier's links degraded.

        The reduction runs in the tier's switches; the plan's flows stop at the server's switch
        (:func:`~dpsim.collectives.algorithms.nvls._switch_flows`), since healthy a server's link into the tier
        carries its GPUs' traffic at their combined rate and the GPU links bind. Degraded, that link binds: every
        GPU's flow gets at most its share, the link's capacity over the server's GPUs (every copy of the
        communicator runs at once). ``--degrade nvlink-domain:1%`` on a 72-GPU NVL72 job predicted the healthy
        step to the last digit, NVLS being NCCL's choice there. A tier class is degraded whole (no link of it
        can be named), so every server's link is alike.

        NVLS + tree (several domains) reduces inside each server alike (an NVL72 tray has no switch of its own),
        and its tree's flows between the servers of one domain cross the same link: the link's bytes, both kinds,
        over its degraded capacity bound the phase, the NVLS flows getting their bytes' share of the link (with
        no tree on it, as NVLS alone, the bound above). Before, NVLS + tree's in-server part was charged to the
        GPU links only and ran faster with the domain degraded than healthy (288 GPUs of nvl72-ib at
        ``nvlink-domain:10%``: 2.61 against 3.04 ps per byte)."""
        net = self.network
        if self.cluster.n_nodes < 2 or not isinstance(net, TierNetwork):
            return cost
        factors = self.slowest_class_factors()
        families = net.families()
        tiers = [(cls, up, down) for cls, up, down in (("nvlink-domain", "hub_dom", "dom_hub"),
                                                        ("nvlink-fabric", "hub_nvl", "nvl_hub"))
                 if factors.get(cls, 1.0) < 1.0 and up in families]
        if not tiers:
            return cost
        # NVLS plans are one phase: the tree's bytes on the tier (the plan's loads) are that phase's.
        assert len(cost.phase_seconds_per_byte) == 1, cost.phase_seconds_per_byte
        shards = self.cluster.n_ranks if algorithm == "nvls" else self.cluster.gpus_per_node
        nvls_w = self.nvls_weight
        t_tier, r_tier = 0.0, math.inf
        for cls, *blocks in tiers:
            rate = families[blocks[0]].capacity_bytes_per_s * factors[cls] / net.gpn  # a GPU's share of the link
            for fraction, block in zip(switch_fractions(op, shards), blocks):  # into the tier, out of it
                mine = fraction * nvls_w
                other = self._tier_load(cost, block) / net.gpn  # the tree's bytes on the link, per GPU
                t_tier = max(t_tier, (mine + other) / rate)
                r_tier = min(r_tier, rate / nvls_w * (mine / (mine + other)))
        phases = tuple((repeat, max(t_in, t_tier), t_out) for repeat, t_in, t_out in cost.phase_seconds_per_byte)
        total = sum(repeat * max(t_in, t_out, 0.0) for repeat, t_in, t_out in phases)
        (_, t_in, t_out), = phases
        return dataclasses.replace(cost, seconds_per_byte=max(cost.seconds_per_byte, total), inter_bound=t_out > t_in,
                                   r_intra=min(cost.r_intra, r_tier), phase_seconds_per_byte=phases)

    def _tier_load(self, cost: PlanCost, block: str) -> float:
        """Bytes per byte of S on the most loaded link of family ``block`` (the plan's flows between servers)."""
        if isinstance(cost.loads, LoadMap):
            fam = cost.loads.families.get(block)
            return fam.max() if fam is not None else 0.0
        fam = self.network.families()[block]
        part = cost.loads[fam.offset:fam.offset + fam.units * fam.lanes]
        return float(part.max()) if part.size else 0.0

    def _whole_cluster_cost(self, algorithm: str, op: str, nic_scale: float) -> PlanCost:
        """Every flow of every job routed and max-min shared on the whole network."""
        capacity = self.capacity_bytes_per_s
        if nic_scale != 1.0:
            capacity = capacity.copy()
            capacity[self.network.nic_links()] *= self.nic_link_scale(nic_scale)
        plan = ALGORITHMS[algorithm].plan(op, self.cluster)
        nvls_w = self.nvls_weight
        total = 0.0
        worst_phase, inter_bound = -1.0, False
        r_intra = r_inter = math.inf
        link_bytes = np.zeros(self.network.n_links)
        phases = []
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
            size = frac * w
            if _differ(size):
                t_flow = progressive_finish(size, self._flow_rates(self.network, src, dst, capacity, loads))
            else:
                t_flow = size / loads.rates_bytes_per_s
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
            phases.append((ph.repeat, t_in, t_out))
            if ph.repeat * phase_t > worst_phase:
                worst_phase, inter_bound = ph.repeat * phase_t, t_out > t_in
        return PlanCost(plan=plan, seconds_per_byte=total, inter_bound=inter_bound, r_intra=r_intra,
                        r_inter=r_inter, loads=link_bytes, network=self.network, phase_seconds_per_byte=tuple(phases),
                        max_fraction=max(float(ph.fraction.max()) for ph in plan.phases), path=WHOLE_CLUSTER)

    @staticmethod
    def _flow_rates(net: NetworkModel, src: np.ndarray, dst: np.ndarray, capacity: np.ndarray, loads):
        """``rates_of`` for :func:`~dpsim.network.maxmin.progressive_finish`: the flows left max-min
        shared flow by flow on ``net`` (``loads``: all of them)."""
        def rates_of(alive: np.ndarray) -> np.ndarray:
            if alive.all():
                return loads.rates_bytes_per_s
            out = np.full(len(src), np.inf)
            out[alive] = net.loads(src[alive], dst[alive], capacity).rates_bytes_per_s
            return out
        return rates_of

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
                counted, loads, placed = self._count(sp)
                # The server-level patterns are counted: keep what costing needs, not the patterns,
                # unless flows between servers share links with those inside one (a max-min over
                # both may need them, :meth:`_max_min_phase`: a few integers per server).
                keep = self.network.shared_server_links
                light = tuple(dataclasses.replace(ph, crossing=tuple(x) if keep else ())
                              for ph, x in zip(sp.phases, placed))
                parts = (sp.plan, light, sp.max_fraction, counted, loads)
        self._symmetric[key] = parts
        return parts

    def _count(self, sp: SymmetricPlan) -> tuple[list, LoadMap, list]:
        net = self.network
        jobs = range(self.jobs)
        counted, placed_phases = [], []
        loads = LoadMap()
        for ph in sp.phases:
            server = None
            if len(ph.server_src):
                server = net.symmetric_loads(server=ServerFlows(src=ph.server_src, dst=ph.server_dst, weight=1.0))
                served = net.symmetric_loads(server=ServerFlows(src=ph.server_src, dst=ph.server_dst,
                                                                weight=ph.server_fraction))
                loads = loads + served.scaled(ph.repeat)
            crossing, placed = None, ()
            if ph.crossing:
                placed = ph.crossing if self.jobs == 1 else [
                    CrossingFlows(src_server=np.concatenate([self._place_server(x.src_server, j) for j in jobs]),
                                  dst_server=np.concatenate([self._place_server(x.dst_server, j) for j in jobs]),
                                  src_local=x.src_local, dst_local=x.dst_local) for x in ph.crossing]
                crossing = net.symmetric_loads(crossing=placed)
                loads = loads + crossing.scaled(ph.repeat * ph.crossing_fraction)
            counted.append((server, crossing))
            placed_phases.append(placed)
        return counted, loads, placed_phases

    def family_capacity(self, nic_scale: float) -> dict[str, float]:
        """Capacity of each link family (degraded link classes and NIC message overhead applied)."""
        net = self.network
        out = {}
        nic = self.nic_link_scale(nic_scale) if nic_scale != 1.0 else None
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
        cluster. Where they do (NVLink switch tiers and domains, PCIe trees) and every flow of
        the phase moves φ (no NVLS derating), the slowest rates are read off the first level
        too; otherwise (flows of different sizes on shared links, or a pipelined plan whose
        slowest intra- or inter-server rate is set at a later level) max-min runs over every
        flow of the cluster, routed by symmetry in blocks (:meth:`_max_min_phase`).
        """
        parts = self._symmetric_parts(algorithm, op)
        if parts is None:
            return None
        plan, phases, max_fraction, counted, loads = parts
        caps = self.family_capacity(nic_scale)
        shared = self.network.shared_server_links
        pipelined = bool(plan.pipeline_intra or plan.pipeline_inter)
        nvls_w = self.nvls_weight
        total = 0.0
        worst_phase, inter_bound = -1.0, False
        r_intra = r_inter = math.inf
        phase_s = []
        for ph, (server, crossing) in zip(phases, counted):
            t_in = t_out = -math.inf
            if not shared or crossing is None:
                if server is not None:
                    net, cap = self._server
                    w = np.where(ph.server_nvls, nvls_w, 1.0)
                    res = net.loads(ph.server_src, ph.server_dst, cap)
                    size = ph.server_fraction * w
                    if _differ(size):
                        # One server's flows alone on its links: every server's finish as they re-share.
                        rates_of = self._flow_rates(net, np.asarray(ph.server_src), np.asarray(ph.server_dst),
                                                    cap, res)
                        t_in = float(progressive_finish(size, rates_of).max())
                    else:
                        t_in = float((size / res.rates_bytes_per_s).max())
                    r_intra = min(r_intra, float((res.rates_bytes_per_s / w).min()))
                if crossing is not None:
                    fair, _ = crossing.min_share(caps)
                    t_out = ph.crossing_fraction * 1.0 / fair
                    r_inter = min(r_inter, fair)
            else:
                phi = ph.crossing_fraction
                first = None
                both = crossing if server is None else server + crossing
                if server is None or not (ph.server_nvls.any() or (ph.server_fraction != phi).any()):
                    fair, hits = both.min_share(caps)
                    intra_hit = server is not None and _touches(server, both, hits)
                    inter_hit = _touches(crossing, both, hits)
                    if not pipelined or ((server is None or intra_hit) and inter_hit):
                        first = fair, intra_hit, inter_hit
                if first is not None:
                    # Every flow moves φ: the slowest run at max-min's first level, on the links
                    # that saturate at it.
                    fair, intra_hit, inter_hit = first
                    t = phi * 1.0 / fair
                    if intra_hit:
                        r_intra, t_in = min(r_intra, fair), t
                    if inter_hit:
                        r_inter, t_out = min(r_inter, fair), t
                else:
                    # Flows of different sizes (or NVLS flows) share links, or a pipelined plan's
                    # slowest flows inside or between servers are set at a later level: max-min
                    # over every level.
                    t_in, t_out, ri, ro = self._max_min_phase(ph, caps, both)
                    r_intra, r_inter = min(r_intra, ri), min(r_inter, ro)
            phase_t = max(t_in, t_out, 0.0)
            total += ph.repeat * phase_t
            phase_s.append((ph.repeat, t_in, t_out))
            if ph.repeat * phase_t > worst_phase:
                worst_phase, inter_bound = ph.repeat * phase_t, t_out > t_in
        return PlanCost(plan=plan, seconds_per_byte=total, inter_bound=inter_bound, r_intra=r_intra,
                        r_inter=r_inter, loads=loads, network=self.network, max_fraction=max_fraction,
                        phase_seconds_per_byte=tuple(phase_s), path=SYMMETRIC)

    def _max_min_phase(self, ph, caps: dict[str, float], counts: LoadMap) -> tuple[float, float, float, float]:
        """One phase's flows max-min shared on the whole cluster, routed by symmetry
        (:func:`~dpsim.network.maxmin.max_min_routes`: the rates of :meth:`_whole_cluster_cost`'s
        max-min, bit for bit): ``(t_in, t_out, r_intra, r_inter)`` as there. ``counts``: the flows
        on every link (:meth:`_count`; counted again on the routes when they fold). Components of
        flows that repeat one another (NVLink domains of one shape, rails alike) run once
        (:meth:`~dpsim.network.model.SymmetricRoutes.fold`: the same slowest rates, bit for bit)."""
        server = None
        w_in = np.where(ph.server_nvls, self.nvls_weight, 1.0)
        size_in = ph.server_fraction * w_in
        sizes = np.concatenate([size_in, [ph.crossing_fraction * 1.0] if ph.crossing else []])
        if _differ(sizes):
            return self._progressive_phase(ph, caps, size_in, w_in)
        if len(ph.server_src):
            server = ServerFlows(src=ph.server_src, dst=ph.server_dst, weight=1.0)
        routes = self.network.symmetric_routes(server=server, crossing=ph.crossing)
        # Repeated components (NVLink domains of one shape, rails alike) run as one: the same
        # slowest rates (SymmetricRoutes.fold), the links then counted on the folded routes.
        folded = routes.fold(caps)
        users = None
        if folded is not None:
            routes = folded
        else:
            # Fresh arrays (max_min_routes uses them up).
            users = {name: f.table[f.cls].ravel() for name, f in counts.families.items() if f.table.any()}
        # Only the slowest flows count: of each route inside a server (their bytes and NVLS weights
        # differ) and between servers (all alike).
        groups = [np.arange(blk.shape[1]) if blk.kind == "server" else np.full(blk.shape[1], -1)
                  for blk in routes.blocks]
        rates = max_min_routes(routes, caps, groups, users)
        t_in = t_out = -math.inf
        r_intra = r_inter = math.inf
        for blk, r in zip(routes.blocks, rates):
            if not r.size:
                continue
            if blk.kind == "server":
                w = np.where(ph.server_nvls, self.nvls_weight, 1.0)
                r = r.min(axis=0)[blk.flow_column]  # the slowest of each flow inside a server
                t_in = max(t_in, float((ph.server_fraction * w / r).max()))
                r_intra = min(r_intra, float((r / w).min()))
            else:
                t_out = max(t_out, float((ph.crossing_fraction * 1.0 / r).max()))
                r_inter = min(r_inter, float(r.min()))
        return t_in, t_out, r_intra, r_inter

    def _progressive_phase(self, ph, caps: dict[str, float], size_in: np.ndarray,
                           w_in: np.ndarray) -> tuple[float, float, float, float]:
        """:meth:`_max_min_phase` where the phase's flows move different bytes: every flow of the
        cluster, routed by symmetry, finishing as the links re-share
        (:func:`~dpsim.network.maxmin.progressive_finish`, the whole cluster's arithmetic flow for
        flow); the slowest rates are the first max-min's, as there. Repeated components run once
        (:meth:`~dpsim.network.model.SymmetricRoutes.fold`: the same finish times and rates)."""
        server = None
        if len(ph.server_src):
            # Flows of one route but different bytes get columns of their own (they finish apart).
            server = ServerFlows(src=ph.server_src, dst=ph.server_dst, weight=size_in)
        routes = self.network.symmetric_routes(server=server, crossing=ph.crossing)
        # Repeated components run as one: the same finish times and first rates, block by block
        # and column by column (SymmetricRoutes.fold).
        routes = routes.fold(caps) or routes
        blocks = routes.blocks
        shapes = [b.shape for b in blocks]
        cuts = np.cumsum([0] + [r * c for r, c in shapes])
        size = []
        for blk in blocks:
            if blk.kind == "server":
                col = np.empty(blk.shape[1])
                col[blk.flow_column] = size_in
                size.append(np.broadcast_to(col, blk.shape).ravel())
            else:
                size.append(np.full(blk.shape[0] * blk.shape[1], ph.crossing_fraction * 1.0))
        size = np.concatenate(size) if size else np.zeros(0)
        # Each re-share replayed on the links near the flows that finished where that gives the
        # whole max-min's rates bit for bit (:class:`~dpsim.network.maxmin.Reshare`), else a whole one.
        reshare = Reshare(routes, caps)
        first: list = []

        def rates_of(alive: np.ndarray) -> np.ndarray:
            out = reshare.rates(alive)
            if not first:
                first.extend(out[cuts[k]:cuts[k + 1]].reshape(shapes[k]) for k in range(len(blocks)))
            return out

        finish = progressive_finish(size, rates_of) if size.size else size
        t_in = t_out = -math.inf
        r_intra = r_inter = math.inf
        for k, (blk, r) in enumerate(zip(blocks, first)):
            if not r.size:
                continue
            t = float(finish[cuts[k]:cuts[k + 1]].max())
            if blk.kind == "server":
                r_intra = min(r_intra, float((r.min(axis=0)[blk.flow_column] / w_in).min()))
                t_in = max(t_in, t)
            else:
                r_inter = min(r_inter, float(r.min()))
                t_out = max(t_out, t)
        return t_in, t_out, r_intra, r_inter

    def nic_link_scale(self, nic_scale: float) -> np.ndarray | float:
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
