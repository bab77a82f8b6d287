"""All-to-all (MoE token dispatch and combine) on a communicator's real fabric.

Rank ``i`` sends ``traffic_bytes[i, j]`` to rank ``j``; the diagonal stays on the GPU. Two
ways to run it:

- ``flat``: NCCL's all-to-all, a group of ``ncclSend``/``ncclRecv`` to every peer (NCCL user
  guide, "Point-to-point communication: All-to-all"): every pair is a flow on the cluster's
  network (NVLink/PCIe inside a server, NICs across).
- ``hierarchical``: what MoE libraries run across servers. DeepEP's normal (high-throughput)
  kernels send each token once over RDMA to the GPU of the same local rank in the target server
  and forward it there over NVLink to the GPU holding the expert (deepseek-ai/DeepEP README,
  "asymmetric-domain bandwidth forwarding, such as forwarding data from NVLink domain to RDMA
  domain"; Megatron-LM's ``flex`` token dispatcher runs DeepEP). So a GPU sends one NIC message
  per destination server, on its own rail, carrying what every GPU of that server receives
  from it, and the NVLink links carry the forwarded bytes too. Inside one server (or one
  NVLink domain) it is the flat one. A token routed to several experts on one server crosses
  the network once and is copied there (DeepEP's normal kernels dispatch a token once per
  destination RDMA rank, then over NVLink to each GPU holding its experts; DeepSeek-V3,
  arXiv:2412.19437, Sec. 3.2.2, sends each token over IB once per target node and forwards it
  over NVLink there, its node-limited routing capping those nodes at 4): ``node_dedup``
  scales the NIC bytes to the distinct servers a token reaches over the copies sent there
  (:func:`node_dedup_factor`; 1 without de-duplication).

**Bandwidth.** Flows are routed on the network model the other collectives use (the
communicator's :class:`~dpsim.network.tiers.TierNetwork`, through
:class:`~dpsim.collectives.nccl.NcclCollectives`), whose link capacities already carry the
achieved fractions of line rate NCCL reaches (``gpu_link_efficiency``, ``nic_efficiency`` of
the topology presets, each cited there). A pattern of flows finishes no earlier than its
busiest link drains, and with equal flows max-min sharing reaches exactly that (the flows of
the first saturated link are the last to finish); with an imbalanced matrix the busiest link
(the busiest rank's NIC, or an uplink) paces it, not the average. The transfer is therefore
``max over links of bytes / capacity``, NIC links slowed by the fabric's per-message overhead
(:meth:`~dpsim.collectives.fabric_facts.FabricFacts.nic_scale`) at NCCL's p2p chunk size.
The communicator's topology already holds its share of the servers' NICs
(:func:`~dpsim.collectives.groups.layout_communicators`); ``--degrade`` and ``--jobs`` are not
applied here. Uniform traffic is counted by symmetry (:meth:`~dpsim.network.model.NetworkModel.symmetric_loads`:
independent of the number of servers) and memoised per communicator.

**Latency.** NCCL's ring/Simple ``baseLat`` and hop latencies scaled to the topology
(:meth:`~dpsim.collectives.nccl_cost.NcclCost.hop_latencies_s`) plus the per-call overhead,
with peers served :data:`P2P_PEERS_IN_FLIGHT` at a time: flat pays one hop per round of peers
(intra-server and inter-server peers apart), hierarchical one inter-server hop per round of
destination *servers* plus the forwarding hop's rounds.
"""

from __future__ import annotations

import dataclasses
import math
from collections import OrderedDict
from functools import cached_property

import numpy as np

from dpsim.collectives.groups import Communicator
from dpsim.collectives.nccl import NcclCollectives
from dpsim.collectives.nccl_tuning import PROTOCOLS
from dpsim.errors import ConfigError
from dpsim.frozen import frozen_dataclass
from dpsim.network.loadmap import FamilyLoad
from dpsim.network.model import CrossingFlows, ServerFlows
from dpsim.units import US, KiB

ALL_TO_ALL_ALGORITHMS: dict[str, str] = {
    "flat": "NCCL send/recv to every peer: intra-server pairs over NVLink/PCIe, the others over the NICs",
    "hierarchical": "DeepEP-style: one NIC transfer per destination server on the sender's rail, "
                    "forwarded over NVLink inside the target server",
}
"""The all-to-all algorithms and what each runs."""

P2P_NET_CHUNK_BYTES = 128 * KiB
"""NCCL's p2p chunk over the network, ``NCCL_P2P_NET_CHUNKSIZE`` default 131072 (NCCL user guide,
Environment Variables): the message size the NIC's per-message overhead is charged on."""

P2P_PEERS_IN_FLIGHT = 4
"""Peers one rank's send/recv kernel serves at once: NCCL's p2p channels over its channels per
peer, 8 p2p channels and 2 per peer on an 8-GPU H20 server (NVIDIA/nccl#1189, NCCL INFO
"8 p2p channels, 2 p2p channels per peer"; ``NCCL_NCHANNELS_PER_NET_PEER`` "is typically 2",
NVIDIA/nccl#1424). An all-to-all over N peers pays ``ceil(N / 4)`` rounds of hop latency."""


@frozen_dataclass
class AllToAllCost:
    """What one all-to-all costs on a communicator."""

    time_s: float
    """Until the last rank has received everything, seconds."""
    busiest_send_bytes: float
    """Bytes the busiest rank sends to other ranks (its diagonal excluded)."""
    busiest_recv_bytes: float
    """Bytes the busiest rank receives from other ranks."""
    bottleneck: str
    """The link class that limits the transfer (``infiniband``, ``nvlink``, ``leaf-spine``...),
    ``latency`` when the latency terms exceed the transfer, ``none`` without traffic."""
    algorithm: str
    """``flat`` or ``hierarchical`` (:data:`ALL_TO_ALL_ALGORITHMS`)."""
    latency_s: float = 0.0
    """Its size-independent part (call overhead, base and hop latencies)."""
    transfer_s: float = 0.0
    """Its bandwidth part: the busiest link's bytes over its capacity."""


# ---------------------------------------------------------------------------- de-duplication
def expected_distinct_groups(experts: int, top_k: int, groups: int) -> float:
    """Expected number of distinct groups (servers) a token's ``top_k`` experts fall in, when the
    ``experts`` are split evenly and contiguously over ``groups`` and every set of ``top_k``
    distinct experts is equally likely (balanced routing): each group is missed with probability
    ``C(experts - experts/groups, top_k) / C(experts, top_k)``."""
    if groups <= 1:
        return 1.0
    per = experts // groups
    assert per * groups == experts and 1 <= top_k <= experts, (experts, top_k, groups)
    missed = math.comb(experts - per, top_k) / math.comb(experts, top_k)
    return groups * (1.0 - missed)


def node_dedup_factor(experts: int, top_k: int, nodes: int) -> float:
    """The network bytes of a de-duplicating all-to-all over those of one message per copy: the
    distinct remote servers a token reaches over its ``top_k (nodes - 1) / nodes`` copies sent to
    remote servers (balanced routing, :func:`expected_distinct_groups`; the same for every remote
    server by symmetry). 1 on one server or with one expert per server; never above 1."""
    if nodes <= 1:
        return 1.0
    return min(1.0, expected_distinct_groups(experts, top_k, nodes) / top_k)


def routed_spread(experts: int, top_k: int, ranks: int, nodes: int, node_limit: int | None = None
                  ) -> tuple[float, float]:
    """``(distinct ranks, distinct servers)`` a token's ``top_k`` experts reach, expected under
    balanced routing with the ``experts`` split evenly and contiguously over ``ranks`` GPUs on
    ``nodes`` servers. ``node_limit`` is DeepSeek-V3's node-limited routing (arXiv:2412.19437, Sec.
    2.1.2: each token "will be sent to at most M nodes, which are selected according to the sum of
    the highest K_r / M affinity scores of the experts distributed on each node"; M = 4 of the 8
    nodes its routed experts span, Sec. 3.2.2 and 4.2; deepseek-ai/DeepSeek-V3 config.json
    ``n_group`` 8, ``topk_group`` 4): the token's experts then lie on ``node_limit`` servers, balanced
    routing picking those servers evenly and its ``top_k`` experts evenly among their
    ``node_limit x experts / nodes``, so the servers it reaches never exceed ``node_limit``.
    ``None`` (or a limit of ``nodes`` or more): unlimited, :func:`expected_distinct_groups` over all."""
    if node_limit is None or node_limit >= nodes:
        return expected_distinct_groups(experts, top_k, ranks), expected_distinct_groups(experts, top_k, nodes)
    if node_limit < 1:
        raise ConfigError(f"--moe-node-limit: {node_limit!r} is not valid; expected an integer >= 1")
    pool, pool_ranks = experts * node_limit // nodes, ranks * node_limit // nodes
    if top_k > pool:
        raise ConfigError(f"--moe-node-limit: {node_limit} of the {nodes} servers hold {pool} of the {experts} "
                          f"experts, fewer than the {top_k} each token is routed to; give a larger limit")
    return (expected_distinct_groups(pool, top_k, pool_ranks), expected_distinct_groups(pool, top_k, node_limit))


def rank_dedup_factor(experts: int, top_k: int, ranks: int) -> float:
    """The bytes of a dispatch (or combine) that sends a token once per destination rank over
    those of one message per routed copy: the distinct ranks a token's ``top_k`` experts fall on
    over ``top_k`` (balanced routing, :func:`expected_distinct_groups` with the ``ranks`` as the
    groups). DeepEP's normal kernels work this way: ``Buffer.get_dispatch_layout`` turns the
    tokens' top-k expert indices into ``is_token_in_rank`` (``[num_tokens, num_ranks]``, "whether
    a token be sent to a rank") and ``num_tokens_per_rank``, ``dispatch`` delivers each token once
    to every such rank with its top-k indices and weights (the receiver expands it to its local
    experts), and ``combine`` returns one partial sum per token and rank, reduced at the source
    ("Combine (reduce) tokens ... from different ranks"; deepseek-ai/DeepEP@04b06f7a299c
    ``deep_ep/buffer.py``). NVIDIA's HybridEP (Megatron-Core's flex backend ``hybridep``) does
    the same: its dispatch returns the "Tokens for local experts" with a local expert routing
    map, sizes the permuted output at up to ``min(topk, num_experts_per_rank)`` rows per
    dispatched token and its RDMA buffer at one token per remote node (deepseek-ai/DeepEP@0b18ed2a386c
    ``docs/Hybrid-EP_Implementation.md``, sections 2, 4.2 and 7.2). 1 with one expert per rank
    (each copy goes to its own rank) or one rank; never above 1 nor below ``1 / top_k``."""
    if ranks <= 1:
        return 1.0
    return min(1.0, expected_distinct_groups(experts, top_k, ranks) / top_k)


# ---------------------------------------------------------------------------- validation
def check_algorithm(algorithm: str) -> str:
    """``algorithm`` if it is an all-to-all algorithm, else a one-line ConfigError."""
    if algorithm not in ALL_TO_ALL_ALGORITHMS:
        raise ConfigError(f"algorithm: {algorithm!r} is not an all-to-all algorithm; "
                          f"choose one of {', '.join(ALL_TO_ALL_ALGORITHMS)}")
    return algorithm


def _check_traffic(comm: Communicator, traffic_bytes) -> np.ndarray:
    n = comm.topology.n_gpus
    try:
        t = np.asarray(traffic_bytes, dtype=float)
    except (TypeError, ValueError):
        raise ConfigError("traffic_bytes: is not a matrix of numbers; give an N x N array of bytes") from None
    if t.ndim != 2 or t.shape[0] != t.shape[1]:
        raise ConfigError(f"traffic_bytes: shape {t.shape} is not square; give an N x N array of bytes")
    if t.shape[0] != n:
        raise ConfigError(f"traffic_bytes: {t.shape[0]} x {t.shape[0]} does not match the communicator's "
                          f"{n} ranks; give a {n} x {n} array")
    if not np.isfinite(t).all() or (t < 0).any():
        raise ConfigError("traffic_bytes: has negative, NaN or infinite entries; bytes must be finite and >= 0")
    return t


def _check_dedup(value) -> float:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and 0.0 < value <= 1.0):
        raise ConfigError(f"node_dedup: {value!r} is not valid; expected a number in (0, 1]")
    return float(value)


def _check_positive(name: str, value, low: float) -> float:
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= low):
        raise ConfigError(f"{name}: {value!r} is not valid; expected a finite number >= {low:g}")
    return float(value)


# ---------------------------------------------------------------------------- the fabric
_UniformFamily = tuple[str, "FamilyLoad | None", "FamilyLoad | None", float, bool]
"""A link family under uniform traffic: class, loads from flows inside and between servers, capacity, NIC."""

class _Fabric:
    """One communicator's network, NCCL facts and latencies (memoised per topology)."""

    def __init__(self, topology):
        self.topology = topology
        self.nccl = NcclCollectives(topology)
        self.network = self.nccl.network
        self.facts = self.nccl.facts
        self.n_ranks = topology.n_gpus
        self.gpn = topology.gpus_per_node
        self.n_nodes = topology.n_nodes
        self.stride = self.network.gpus_per_server
        rank = np.arange(self.n_ranks)
        self.node_of = rank // self.gpn
        self.endpoint = self.node_of * self.stride + rank % self.gpn
        intra, inter = self.nccl.costs.hop_latencies_s("ring", "Simple")
        self.intra_hop_s, self.inter_hop_s = intra, inter
        self.base_s = (self.facts.base_latency_us("ring", PROTOCOLS.index("Simple")) * US
                       + self.nccl.costs.call_overhead_s)
        self._uniform: dict[str, list[_UniformFamily] | None] = {}

    @cached_property
    def nic_mask(self) -> np.ndarray:
        """NIC <-> switch links (what the per-message overhead slows), over the network's links."""
        mask = np.zeros(self.network.n_links, dtype=bool)
        mask[self.network.nic_links()] = True
        return mask

    def nic_scale(self, message_bytes: float) -> float:
        if self.n_nodes == 1 or message_bytes <= 0:
            return 1.0
        return self.facts.nic_scale(min(P2P_NET_CHUNK_BYTES, message_bytes))

    def hierarchical_here(self, algorithm: str) -> bool:
        """Whether the hierarchical path differs from the flat one: several servers joined by NICs."""
        return algorithm == "hierarchical" and self.topology.crosses_nics

    def latency_s(self, algorithm: str, intra_peers: int, inter_peers: int, inter_servers: int) -> float:
        """Base latency and per-call overhead plus a hop per round of peers."""
        rounds = lambda k: math.ceil(k / P2P_PEERS_IN_FLIGHT)  # noqa: E731
        if self.hierarchical_here(algorithm):
            return self.base_s + rounds(inter_servers) * self.inter_hop_s + rounds(self.gpn - 1) * self.intra_hop_s
        return self.base_s + rounds(intra_peers) * self.intra_hop_s + rounds(inter_peers) * self.inter_hop_s

    # ------------------------------------------------------------------ uniform, by symmetry
    def uniform_loads(self, algorithm: str) -> list[_UniformFamily] | None:
        """Per link family, ``(class, its links' bytes per byte of one pair from the flows inside
        servers, the same from the flows between servers, capacity, NIC)`` when every pair of ranks
        exchanges the same bytes (``None``: no symmetric form)."""
        if algorithm in self._uniform:
            return self._uniform[algorithm]
        fams = self.network.families()
        out = None
        if fams is not None:
            g, n = self.gpn, self.n_nodes
            loc = np.arange(g)
            si, di = np.meshgrid(loc, loc, indexing="ij")
            off = si != di
            hier = self.hierarchical_here(algorithm)
            # Hierarchical: every intra-server pair also forwards what the n - 1 other servers sent.
            server = ServerFlows(src=si[off], dst=di[off], weight=np.full(int(off.sum()), float(n if hier else 1)))
            crossing = ()
            if n > 1:
                a, b = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
                edges = a != b
                if hier:
                    lanes = CrossingFlows(src_server=a[edges], dst_server=b[edges], src_local=loc, dst_local=loc,
                                          weight=float(g))
                else:
                    lanes = CrossingFlows(src_server=a[edges], dst_server=b[edges], src_local=si.ravel(),
                                          dst_local=di.ravel(), weight=1.0)
                crossing = (lanes,)
            # Only the hierarchical path de-duplicates what crosses servers: count it apart there.
            apart = hier and bool(crossing)
            inside = self.network.symmetric_loads(server=server if g > 1 else None,
                                                  crossing=() if apart else crossing)
            across = self.network.symmetric_loads(crossing=crossing) if apart else None
            if inside is not None and (across is not None or not apart):
                classes = self.network.link_classes
                out = []
                for k in fams:
                    a = inside.families.get(k)
                    b = across.families.get(k) if across is not None else None
                    if (a is not None and a.max() > 0) or (b is not None and b.max() > 0):
                        out.append((classes[fams[k].link_class], a, b, fams[k].capacity_bytes_per_s, fams[k].nic))
        self._uniform[algorithm] = out
        return out

    # ------------------------------------------------------------------ any matrix, flow by flow
    def link_bytes(self, traffic: np.ndarray, algorithm: str, node_dedup: float = 1.0
                   ) -> tuple[np.ndarray, np.ndarray]:
        """``(bytes, NIC-time bytes)`` on every link of the network: what each link carries, and
        the same with each flow's bytes stretched by the NIC's per-message overhead (used on NIC
        links only); the hierarchical path's messages between servers scaled by ``node_dedup``."""
        n = self.n_ranks
        src, dst = np.nonzero(traffic * (1 - np.eye(n)))
        size = traffic[src, dst]
        hops_s, hops_d, hops_b, hops_msg = [], [], [], []
        if self.hierarchical_here(algorithm):
            local = self.node_of[src] == self.node_of[dst]
            # Intra-server pairs go direct.
            hops_s.append(src[local]), hops_d.append(dst[local]), hops_b.append(size[local])
            hops_msg.append(size[local])
            far = ~local
            g = self.gpn
            rail = self.node_of[dst[far]] * g + src[far] % g   # same local rank, target server
            # One NIC message per (sender, target server), carrying all that server's share.
            key = src[far] * n + rail
            uniq, inv = np.unique(key, return_inverse=True)
            agg = np.bincount(inv, weights=size[far]) * node_dedup
            hops_s.append(uniq // n), hops_d.append(uniq % n), hops_b.append(agg), hops_msg.append(agg)
            fwd = rail != dst[far]
            hops_s.append(rail[fwd]), hops_d.append(dst[far][fwd]), hops_b.append(size[far][fwd])
            hops_msg.append(size[far][fwd])
        else:
            hops_s, hops_d, hops_b, hops_msg = [src], [dst], [size], [size]
        s, d = np.concatenate(hops_s), np.concatenate(hops_d)
        b, m = np.concatenate(hops_b), np.concatenate(hops_msg)
        if not len(s):
            z = np.zeros(self.network.n_links)
            return z, z
        loads = self.network.loads(self.endpoint[s], self.endpoint[d])
        # A message size per flow; expected traffic has few distinct ones, so scale each size once.
        sizes, which = np.unique(m, return_inverse=True)
        scale = np.array([self.nic_scale(float(x)) for x in sizes])[np.asarray(which).ravel()]
        return loads.link_bytes(b), loads.link_bytes(b / scale)


_FABRICS: OrderedDict = OrderedDict()
_FABRICS_MAX = 64


def _fabric(comm: Communicator) -> _Fabric:
    key = comm.topology
    fab = _FABRICS.get(key)
    if fab is None:
        fab = _FABRICS[key] = _Fabric(key)
        while len(_FABRICS) > _FABRICS_MAX:
            _FABRICS.popitem(last=False)
    else:
        _FABRICS.move_to_end(key)
    return fab


def _peers(fab: _Fabric, traffic: np.ndarray) -> tuple[int, int, int]:
    """Most intra-server peers, inter-server peers and distinct other servers any rank sends to
    or receives from."""
    sent = traffic > 0
    np.fill_diagonal(sent, False)
    same = fab.node_of[:, None] == fab.node_of[None, :]
    both = np.concatenate([sent, sent.T])
    intra = int((both & np.concatenate([same, same])).sum(axis=1).max(initial=0))
    far = both & ~np.concatenate([same, same])
    inter = int(far.sum(axis=1).max(initial=0))
    servers = 0
    if inter:
        nodes = np.zeros((2 * fab.n_ranks, fab.n_nodes), dtype=bool)
        rows, cols = np.nonzero(far)
        nodes[rows, fab.node_of[cols]] = True
        servers = int(nodes.sum(axis=1).max())
    return intra, inter, servers


def _result(fab: _Fabric, algorithm: str, transfer_s: float, link_class: str, latency_s: float,
            send: float, recv: float) -> AllToAllCost:
    if send <= 0 and recv <= 0:
        return AllToAllCost(time_s=0.0, busiest_send_bytes=0.0, busiest_recv_bytes=0.0, bottleneck="none",
                            algorithm=algorithm)
    bottleneck = link_class if transfer_s >= latency_s else "latency"
    return AllToAllCost(time_s=latency_s + transfer_s, busiest_send_bytes=send, busiest_recv_bytes=recv,
                        bottleneck=bottleneck, algorithm=algorithm, latency_s=latency_s, transfer_s=transfer_s)


def all_to_all_cost(comm: Communicator, traffic_bytes: np.ndarray, *, algorithm: str = "flat",
                    node_dedup: float = 1.0, class_factors: dict[str, float] | None = None) -> AllToAllCost:
    """The cost of one all-to-all on ``comm`` where rank ``i`` sends ``traffic_bytes[i, j]`` to
    rank ``j`` (the diagonal stays local); every flow routed on the communicator's network. With
    ``hierarchical``, ``node_dedup`` (in (0, 1]) scales what crosses between servers
    (:func:`node_dedup_factor`). ``class_factors``: degraded links' capacity left per link class
    (``--degrade``, :meth:`~dpsim.collectives.plan_cost.PlanEvaluator.slowest_class_factors`).
    A group whose copies sit differently on the racks (:attr:`~dpsim.collectives.groups.Communicator.copies`)
    costs its slowest copy's."""
    if comm.copies:
        return _slowest(all_to_all_cost, comm, traffic_bytes, algorithm=algorithm, node_dedup=node_dedup,
                        class_factors=class_factors)
    check_algorithm(algorithm)
    dedup = _check_dedup(node_dedup)
    traffic = _check_traffic(comm, traffic_bytes)
    fab = _fabric(comm)
    off = traffic * (1 - np.eye(fab.n_ranks))
    send, recv = float(off.sum(axis=1).max(initial=0.0)), float(off.sum(axis=0).max(initial=0.0))
    if send <= 0:
        return _result(fab, algorithm, 0.0, "none", 0.0, 0.0, 0.0)
    carried, nic_time = fab.link_bytes(traffic, algorithm, dedup)
    net = fab.network
    cap = net.capacity_bytes_per_s
    if class_factors:
        cap = cap * np.array([class_factors.get(c, 1.0) for c in net.link_classes])[net.link_class_id]
    nic = fab.nic_mask
    busy = np.where(nic, nic_time, carried) / cap
    worst = int(np.argmax(busy))
    latency = fab.latency_s(algorithm, *_peers(fab, traffic))
    return _result(fab, algorithm, float(busy[worst]), net.link_classes[int(net.link_class_id[worst])],
                   latency, send, recv)


def _slowest(cost, comm: Communicator, *args, **kwargs) -> AllToAllCost:
    """``cost`` on every copy of ``comm`` (:attr:`~dpsim.collectives.groups.Communicator.copies`), the slowest
    (the first of equals: the worst-placed copy's)."""
    results = [cost(dataclasses.replace(comm, topology=t, copies=()), *args, **kwargs)
               for t in (comm.topology, *comm.copies)]
    return max(results, key=lambda r: r.time_s)


def _family_max(inside: FamilyLoad | None, across: FamilyLoad | None, dedup: float) -> float:
    """The busiest link of a family carrying ``inside`` and ``dedup`` times ``across``."""
    if across is None:
        return inside.max() if inside is not None else 0.0
    across = across.scaled(dedup) if dedup != 1.0 else across
    return (inside + across).max() if inside is not None else across.max()


def uniform_all_to_all_cost(comm: Communicator, bytes_per_rank: float, *, load_factor: float = 1.0,
                            algorithm: str = "flat", node_dedup: float = 1.0,
                            class_factors: dict[str, float] | None = None) -> AllToAllCost:
    """The cost of an all-to-all where every rank sends ``bytes_per_rank`` spread evenly over all
    ranks (itself included: that share stays local), the busiest rank ``load_factor`` times that
    (routing imbalance: its links then pace the exchange), ``hierarchical``'s bytes between servers
    scaled by ``node_dedup``. Equal to :func:`all_to_all_cost` of the uniform matrix at
    ``load_factor`` 1; counted by symmetry and memoised per communicator. ``class_factors``: the
    capacity ``--degrade`` leaves the slowest link of each class (every link of a family carries the
    same bytes here, so the slowest one paces the exchange). A group whose copies sit differently on the racks
    costs its slowest copy's."""
    if comm.copies:
        return _slowest(uniform_all_to_all_cost, comm, bytes_per_rank, load_factor=load_factor,
                        algorithm=algorithm, node_dedup=node_dedup, class_factors=class_factors)
    check_algorithm(algorithm)
    dedup = _check_dedup(node_dedup)
    size = _check_positive("bytes_per_rank", bytes_per_rank, 0.0)
    factor = _check_positive("load_factor", load_factor, 1.0)
    fab = _fabric(comm)
    n = fab.n_ranks
    if n == 1 or size == 0:
        return _result(fab, algorithm, 0.0, "none", 0.0, 0.0, 0.0)
    pair = size / n * factor
    moved = pair * (n - 1)
    families = fab.uniform_loads(algorithm)
    hier = fab.hierarchical_here(algorithm)
    if not hier:
        dedup = 1.0
    if families is None:
        cost = all_to_all_cost(comm, np.full((n, n), pair), algorithm=algorithm, node_dedup=dedup,
                               class_factors=class_factors)
        return cost
    msg = pair * (fab.gpn * dedup if hier else 1)
    scale = fab.nic_scale(msg)
    transfer, cls = 0.0, "none"
    for link_class, inside, across, cap, is_nic in families:
        load = _family_max(inside, across, dedup)
        left = class_factors.get(link_class, 1.0) if class_factors else 1.0
        t = load * pair / (cap * left * (scale if is_nic else 1.0))
        if t > transfer:
            transfer, cls = t, link_class
    inter_peers = n - fab.gpn
    latency = fab.latency_s(algorithm, fab.gpn - 1, inter_peers, fab.n_nodes - 1)
    return _result(fab, algorithm, transfer, cls, latency, moved, moved)


def all_to_all_link_bytes(comm: Communicator, traffic_bytes: np.ndarray, *,
                          algorithm: str = "flat") -> tuple[object, np.ndarray]:
    """``(network, bytes)``: what every link of ``comm``'s network carries in one all-to-all
    (dense over :attr:`~dpsim.network.model.NetworkModel.n_links`; for reports and tests)."""
    check_algorithm(algorithm)
    traffic = _check_traffic(comm, traffic_bytes)
    fab = _fabric(comm)
    return fab.network, fab.link_bytes(traffic, algorithm)[0]


def all_to_all_busbw(n_ranks: int, bytes_per_rank: float, time_s: float) -> float:
    """nccl-tests' bus bandwidth of an all-to-all: ``algbw x (N - 1) / N``, algbw = S / T with S the
    bytes each rank sends (NVIDIA/nccl-tests#130: "1/n of the data is local")."""
    if time_s <= 0:
        return math.inf
    return bytes_per_rank / time_s * (n_ranks - 1) / n_ranks
