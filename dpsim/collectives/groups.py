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
groups share the node's links, for models that have no links of their own. With HSDP's
``--zero-group`` other than one node, ``intra`` is the shard group (consecutive ranks, whole
servers above one) and ``inter`` its replica group, built the same way (:func:`communicators`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import numpy as np

from dpsim.collectives.ops import CollectiveModel, CollectiveResult
from dpsim.errors import ConfigError
from dpsim.frozen import frozen_dataclass
from dpsim.topology.cluster import Topology
from dpsim.topology.server import with_gpus_per_node
from dpsim.topology.spec import nic_fabric, nvlink_fabric

GROUPS = ("world", "intra", "inter", "tp", "dp", "pp", "emb", "cp", "ep", "edp", "zero", "zrep", "ezero", "ezrep",
          "pair-server", "pair-domain")
"""Communicator names a comm op may use (``tp``, ``dp``, ``pp``, ``emb`` and ``cp`` exist only for a
tensor/pipeline/context layout, ``ep`` and ``edp`` for its expert layers, ``pair-server`` and ``pair-domain``
for a DualPipe mirror pair nearer than the job's farthest pair: :func:`layout_communicators`;
``zero`` for InternLM's ZeRO-1 group or HSDP's shard group, ``--zero-group``, ``zrep`` HSDP's replica group;
``ezero`` and ``ezrep`` the routed experts' shard and replica groups of HSDP under expert parallelism)."""

RACK_PLACEMENTS = ("aligned", "contiguous")
"""``--rack-placement``: how a job's groups sit on multi-server NVLink domains (:func:`rank_order_split`).
``aligned``: each group's copies in segments that do not straddle a domain, how every group is costed by
default. That is Slurm's topology/block plugin: topology.conf's ``BlockName``/``BlockSizes`` declare the
NVLink domains as blocks (https://slurm.schedmd.com/topology.conf.html, Topology Guide
https://slurm.schedmd.com/topology.html) and a job's ``--segment`` size keeps each segment of nodes in one
block (CoreWeave's SUNK guide, "Topology and block scheduling in Slurm", for GB200/GB300 NVL72 racks).
``contiguous``: racks filled in rank order (a job's nodes one run, no segments), so at a size that is not
a multiple of the domain some copy of a group straddles two domains (or more: a group wider than a rack that
starts inside one), costed at its real piece sizes (:func:`rank_order_splits`)."""


@frozen_dataclass
class Communicator:
    """One communicator of a job, as a cluster of its own."""

    name: str
    """``world``, ``intra``, ``inter``, a layout's group or ``zero`` (InternLM's ZERO1 group)."""
    topology: Topology
    """Its ranks as a cluster (for ``inter``: one GPU per node with its share of the NICs)."""
    job: Topology
    """The job's whole cluster (link names given for the job, e.g. ``--degrade``, refer to it)."""
    concurrent: int = 1
    """Identical communicators running the same ops at once on the same node links
    (``inter``: the node's GPUs; ``world`` and ``intra``: 1, each on links of its own)."""
    copies: tuple[Topology, ...] = ()
    """Other copies of the group that sit differently on the NVLink domains than :attr:`topology`
    (``--rack-placement contiguous``: each distinct split over the racks, :func:`rank_order_splits`); every op
    is costed on each and the slowest taken (:class:`SlowestCopy`). Empty: every copy sits alike."""


def communicators(job: Topology, shard_group: int | None = None,
                  contiguous: bool = False) -> dict[str, Communicator]:
    """The ``world``, ``intra`` and ``inter`` communicators of ``job`` (see the module docstring).

    ``shard_group``: HSDP's shard group (``--zero-group`` with ``fsdp-hybrid``) when it is not one node
    (``None``: one node). ``intra`` is then that many consecutive ranks (part of one server, or whole
    servers: :func:`consecutive_group`) and ``inter`` the replica group of one rank per shard group,
    ``shard_group`` ranks apart (the ``dp_replicate`` dimension of a ``("dp_replicate", "dp_shard")``
    mesh): :func:`_replica_group`."""
    spec = job.spec
    gpn = job.gpus_per_node
    if shard_group is not None and shard_group != min(gpn, job.n_gpus):
        intra_topo, intra_conc = consecutive_group(job, shard_group)
        inter_topo, inter_conc = _replica_group(job, shard_group)
        inter_topo = spread_domains(job, inter_topo, shard_group)
        intra_split = rank_order_splits(job, intra_topo, 1, shard_group) if contiguous else (intra_topo,)
        inter_split = (rank_order_splits(job, inter_topo, shard_group, job.n_gpus // shard_group) if contiguous
                       else (inter_topo,))
        return {
            "world": Communicator(name="world", topology=job, job=job),
            "intra": Communicator(name="intra", topology=intra_split[0], job=job, concurrent=intra_conc,
                                  copies=intra_split[1:]),
            "inter": Communicator(name="inter", topology=inter_split[0], job=job, concurrent=inter_conc,
                                  copies=inter_split[1:]),
        }
    intra = Topology(spec=spec, n_gpus=gpn) if job.n_gpus >= spec.node.gpus_per_node else job
    fabric = spec.fabric
    if fabric is None or job.n_nodes == 1:
        one = dataclasses.replace(spec, node=with_gpus_per_node(spec.node, 1))
        inter = Topology(spec=one, n_gpus=1)
    else:
        if nvlink_fabric(fabric):
            new_fabric = fabric
        else:
            new_fabric = dataclasses.replace(
                fabric, nics_per_node=1, rail_optimized=False,
                nic_bandwidth_bytes_per_s=fabric.nic_bandwidth_bytes_per_s * fabric.nics_per_node / gpn)
        inter_spec = dataclasses.replace(spec, node=with_gpus_per_node(spec.node, 1),
                                         fabric=new_fabric)
        inter = Topology(spec=inter_spec, n_gpus=job.n_nodes)
    return {
        "world": Communicator(name="world", topology=job, job=job),
        "intra": Communicator(name="intra", topology=intra, job=job),
        "inter": Communicator(name="inter", topology=inter, job=job,
                              concurrent=gpn if nic_fabric(fabric) else 1),
    }


def _replica_group(job: Topology, shard_group: int) -> tuple[Topology, int]:
    """HSDP's replica group on ``job`` for shard groups of ``shard_group`` consecutive ranks (which tile the
    servers): ``n_gpus / shard_group`` ranks ``shard_group`` apart, ``gpus_per_node / shard_group`` of them
    (at least one) in each server they span, as a cluster of its own, and how many such groups share
    each server's NICs. Built as the node-sized default's ``inter`` is (:func:`communicators`): each
    server's GPUs of the group get their share of the server's NICs, on one NIC carrying that share
    (every local rank's group runs at once), an NVLink fabric keeping its per-GPU rate."""
    spec = job.spec
    gpn = job.gpus_per_node
    ranks = job.n_gpus // shard_group
    per_node = max(1, gpn // shard_group)
    nodes = max(1, ranks // per_node)
    fabric = spec.fabric
    node = with_gpus_per_node(spec.node, per_node)
    if nodes == 1:
        return Topology(spec=dataclasses.replace(spec, node=node), n_gpus=ranks), 1
    assert fabric is not None or spec.nvlink_domain is not None, "several nodes need a fabric or an NVLink domain"
    if nic_fabric(fabric):
        fabric = dataclasses.replace(
            fabric, nics_per_node=1, rail_optimized=False,
            nic_bandwidth_bytes_per_s=fabric.nic_bandwidth_bytes_per_s * fabric.nics_per_node * per_node / gpn)
    sub = dataclasses.replace(spec, node=node, fabric=fabric)
    return Topology(spec=sub, n_gpus=ranks), gpn // per_node if nic_fabric(spec.fabric) else 1


@frozen_dataclass
class LayoutShape:
    """A tensor x pipeline x data-parallel layout's sizes, for placing its groups."""

    tp: int
    """Tensor-parallel ranks."""
    pp: int
    """Pipeline stages."""
    dp: int
    """Data-parallel replicas."""
    cp: int = 1
    """Context-parallel ranks (between tensor and data parallel in rank order)."""
    ep: int = 1
    """Expert-parallel ranks of the expert layers (1: no ``ep`` communicator)."""
    etp: int = 1
    """Expert-tensor-parallel ranks of the expert layers."""
    experts: bool = True
    """The model has routed experts: without (a dense model), no HSDP expert-shard communicators (``ezero``,
    ``ezrep``), which a dense tp layout's ``etp`` 1 below ``tp`` would otherwise build, unused."""
    zero_group: int | None = None
    """InternLM's ZERO1 group or HSDP's shard degree (``--zero-group``): that many consecutive data-parallel
    ranks, each with its ``cp`` context-parallel ranks, a ``zero`` communicator when fewer than all of them
    (``None``: all)."""


def _node_group(job: Topology, per_node: int, nodes: int) -> tuple[Topology, int]:
    """A group of ``per_node`` GPUs in each of ``nodes`` servers of ``job``, as a cluster of its
    own, and how many such groups share each server's NICs. Each group gets its share of
    the NICs (whole NICs, rails kept, when they divide evenly; otherwise one NIC carrying
    the share of the bandwidth, as for ``inter``)."""
    spec = job.spec
    gpn = job.gpus_per_node
    if nodes <= 1:
        return Topology(spec=spec, n_gpus=per_node), 1
    share = max(1, gpn // per_node)
    fabric = spec.fabric
    assert fabric is not None or spec.nvlink_domain is not None, "several nodes need a fabric or an NVLink domain"
    if not nic_fabric(fabric) or share == 1:
        new_fabric = fabric
    elif fabric.nics_per_node % share == 0:
        new_fabric = dataclasses.replace(fabric, nics_per_node=fabric.nics_per_node // share)
    else:
        new_fabric = dataclasses.replace(
            fabric, nics_per_node=1, rail_optimized=False,
            nic_bandwidth_bytes_per_s=fabric.nic_bandwidth_bytes_per_s * fabric.nics_per_node / share)
    sub = dataclasses.replace(spec, node=with_gpus_per_node(spec.node, per_node), fabric=new_fabric)
    concurrent = share if nic_fabric(fabric) else 1
    return Topology(spec=sub, n_gpus=per_node * nodes), concurrent


def consecutive_group(job: Topology, size: int) -> tuple[Topology, int]:
    """``size`` neighbouring ranks of ``job`` as a cluster of their own (one server's, or whole servers
    once they outgrow one; ``size`` divides or is a multiple of the GPUs per node), and how many
    such groups share each server's NICs (:func:`_node_group`)."""
    gpn = job.gpus_per_node
    return _node_group(job, size, 1) if size <= gpn else _node_group(job, gpn, size // gpn)


def layout_communicators(job: Topology, shape: LayoutShape, contiguous: bool = False) -> dict[str, Communicator]:
    """The ``tp``, ``dp``, ``pp`` and ``emb`` communicators of a layout on ``job`` (and the expert
    layers' ``ep``, ``edp``, with ``etp`` above 1 ``etp``; with ``cp`` above 1 ``cp``; with a
    ``zero_group`` smaller than the data-parallel group, InternLM's ``zero``).

    Ranks are ordered as Megatron-LM orders them: tensor-parallel rank fastest, then
    data-parallel, then pipeline (``tp-cp-ep-dp-pp``, ``megatron/core/parallel_state.py``),
    so a tensor-parallel group is ``tp`` consecutive GPUs (inside one server when ``tp``
    divides its GPUs), a data-parallel group takes every ``tp``-th GPU (``gpus_per_node /
    tp`` of them per server, or one per server: with a rail-optimised fabric the GPUs of
    one local rank, hence one rail) and two neighbouring pipeline stages are ``tp x dp``
    GPUs apart (the same local rank of two servers once ``tp x dp`` fills a server). The
    ``pp`` communicator is one such pair (a point-to-point transfer is a two-rank
    broadcast), ``emb`` the first and last stage's pair, each placed as the farthest such
    pair sits (across servers, or NVLink domains, once the job spans them). Every server runs all its
    groups at once, so each group gets its share of the server's NICs
    (:attr:`Communicator.concurrent`). ``tp x dp`` must tile the servers (a multiple or a
    divisor of the GPUs per node: :func:`check_layout_placement`).

    ``contiguous`` (``--rack-placement contiguous``): the racks of multi-server NVLink domains filled in rank
    order rather than each group's copies aligned to them; every group's copies are then split over the domains
    at their real piece sizes, each distinct split kept and every op costed as its slowest
    (:func:`rank_order_splits`, :attr:`Communicator.copies`). The ``pp``/``emb`` pairs are placed by the
    job's span either way (:func:`pair_place` already reads rank order).
    """
    gpn = job.gpus_per_node
    # Context-parallel ranks sit between the tensor- and data-parallel ones (tp-cp-ep-dp-pp):
    # the gradient group (dp x cp, every tp-th GPU) is placed as a data-parallel group of dp x cp,
    # and a cp group as one of cp.
    t, d, p = shape.tp, shape.dp * shape.cp, shape.pp
    comms: dict[str, Communicator] = {}

    def placed(topo: Topology, stride: int, size: int) -> tuple[Topology, ...]:
        return rank_order_splits(job, topo, stride, size) if contiguous else (topo,)

    def add(name: str, topos: tuple[Topology, ...], conc: int) -> None:
        comms[name] = Communicator(name=name, topology=topos[0], job=job, concurrent=conc, copies=topos[1:])

    def consecutive(size: int) -> tuple[tuple[Topology, ...], int]:
        topo, conc = consecutive_group(job, size)
        return placed(topo, 1, size), conc

    add("tp", *consecutive(t))

    def strided(stride: int, size: int) -> tuple[tuple[Topology, ...], int]:
        # ``size`` ranks ``stride`` apart: in one server while stride x size fits it, else
        # gpn / stride of them (at least one) in each of the servers they span.
        if stride * size <= gpn:
            return (Topology(spec=job.spec, n_gpus=size),), 1
        per_node = max(1, gpn // stride)
        topo, conc = _node_group(job, per_node, size // per_node)
        return placed(spread_domains(job, topo, stride), stride, size), conc

    add("dp", *strided(t, d))
    # HSDP folds the context-parallel ranks into its shard dimension (torchtitan's dp_shard_cp): a shard group
    # is zero_group data-parallel ranks with their cp ranks, cp being faster than dp in the rank order.
    shard = shape.zero_group * shape.cp if shape.zero_group is not None else None
    if shard is not None and shard < d:
        # InternLM's ZERO1 group: consecutive ranks of one data-parallel group (Initializer_Zero1 in
        # internlm/core/context/process_group_initializer.py@20fe5ac297e6), so tp apart as dp's are.
        add("zero", *strided(t, shard))
        # HSDP's replica group under tp/pp (fsdp-hybrid's dp_replicate mesh dimension, outside dp_shard in
        # torchtitan's pp, dp_replicate, dp_shard_cp, tp order: ParallelDims.build_mesh,
        # torchtitan/distributed/parallel_dims.py@0119de156de5): one rank of each shard group, tp x shard apart.
        add("zrep", *strided(t * shard, d // shard))
    if shard is not None and shard < d and shape.experts and (shape.ep > 1 or shape.etp != t):
        # HSDP under expert parallelism: the routed experts are sharded over the expert-data-parallel ranks of one
        # shard group (torchtitan's dp_shard_in_ep = dp_shard x cp / ep, parallel_dims.py@0119de156de5), in
        # the expert order below etp x ep apart within the shard group's tp x shard consecutive GPUs, and
        # replicated across the shard groups: one rank of each, tp x shard apart, the ranks zrep spans (a group
        # of its own, placed where those ranks are). With ep 1 and etp below tp (experts whole on each
        # tensor-parallel rank) the same: tp x shard / etp consecutive-by-etp ranks.
        eshard = t * shard // (shape.etp * shape.ep)
        add("ezero", *strided(shape.etp * shape.ep, eshard))
        add("ezrep", *strided(t * shard, d // shard))
    # The expert layers' own rank order, tp-ep-dp-pp with tp = etp and dp = edp (Megatron-Core's
    # expert RankGenerator, megatron/core/parallel_state.py): an ``ep`` group is ep ranks etp
    # apart, an ``edp`` group edp ranks etp x ep apart (a dense model uses neither).
    edp = max(1, t * d // (shape.etp * shape.ep))
    add("ep", *strided(shape.etp, shape.ep))
    add("edp", *strided(shape.etp * shape.ep, edp))
    if shape.etp > 1:
        # Expert-tensor ranks are the fastest of that order: etp consecutive GPUs, placed as tp's.
        add("etp", *consecutive(shape.etp))

    # Every pair of neighbouring stages (r, r + t x d) runs its transfers at once and the pipeline waits
    # for the slowest: once the job spans servers (NVLink domains) some pair straddles their boundary,
    # whatever the distance (r = boundary - distance, or 0, is one), so ``pp`` and ``emb`` (the first and
    # last stage) are costed as a pair placed as far apart as the job's own span (:func:`pair_place`).
    # (Taking the pair nearer than a server as inside one left tp 2 x pp 4 on two servers, or tp 4 x pp 2
    # on two NVL72 racks, with their stage-to-stage transfers on NVLink and a degraded NIC changing nothing.)
    far = pair_place(job, 0, job.n_gpus - 1) if p > 1 else "server"
    pp_topo, pp_conc = pair_topology(job, far)
    comms["pp"] = Communicator(name="pp", topology=pp_topo, job=job, concurrent=pp_conc)
    comms["emb"] = Communicator(name="emb", topology=pp_topo, job=job, concurrent=pp_conc)
    # DualPipe's mirror pairs nearer than that (:func:`mirror_pair_group`): one server, or one domain of several.
    nearer = {"server": (), "domain": ("server",), "network": ("server", "domain")}[far]
    for place in nearer:
        if place == "server" or nvlink_domain_gpus(job) > gpn:
            topo, conc = pair_topology(job, place)
            comms[f"pair-{place}"] = Communicator(name=f"pair-{place}", topology=topo, job=job, concurrent=conc)
    if shape.cp > 1:
        # A ring's neighbours are tp apart; its slowest hop crosses servers once t x cp exceeds one.
        add("cp", *strided(t, shape.cp))
    return comms


def multi_server_domain(job: Topology) -> int:
    """Servers per NVLink domain of ``job`` when domains join several servers but not all of them (NVL72
    racks under a scale-out network), else 0: where ``--rack-placement`` can place a group across domains."""
    domain = job.spec.nvlink_domain
    if domain is None or domain.nodes <= 1 or nvlink_fabric(job.spec.fabric):
        return 0
    return domain.nodes


def spread_domains(job: Topology, topo: Topology, stride: int) -> Topology:
    """``topo`` (a group of ranks ``stride`` apart, one in each of its servers, as a cluster of its own) with
    NVLink domains of as many of its ranks as one of ``job``'s multi-server domains holds when they are more
    than a server apart: ``stride`` GPUs apart, a domain of ``D`` servers holds ``D x gpus_per_node // stride``
    of them (whole blocks of ``stride`` ranks, the consecutive groups between them aligned to the domain, as
    aligned placement keeps every group), none of them with another when that is one.

    The group's own servers are its ranks' (one each), but they sit every ``stride // gpus_per_node``-th server:
    with --tp 8 on gb200-nvl72's 4-GPU trays a data-parallel group of 18 spans 36 trays, two racks, and was
    costed inside one rack's NVLink (an 18-server domain for its 18 servers), the all-reduce never on the
    network."""
    per_domain = multi_server_domain(job)
    gpn = job.spec.node.gpus_per_node
    if not per_domain or stride <= gpn or topo.n_nodes <= 1 or topo.spec.nvlink_domain is None:
        return topo
    held = per_domain * gpn // stride
    if held >= topo.spec.nvlink_domain.nodes:
        return topo
    domain = dataclasses.replace(topo.spec.nvlink_domain, nodes=held) if held > 1 else None
    return dataclasses.replace(topo, spec=dataclasses.replace(topo.spec, nvlink_domain=domain))


def rank_order_splits(job: Topology, topo: Topology, stride: int, size: int) -> tuple[Topology, ...]:
    """Every distinct way the copies of ``topo`` (a group of ``size`` ranks ``stride`` apart, as a cluster of
    its own, its servers in NVLink domains of ``job``'s size: aligned) split over ``job``'s racks when they are
    filled in rank order (``--rack-placement contiguous``), worst first; ``(topo,)`` where nothing straddles.

    Copies of the group start every ``stride x size`` ranks (the tp-cp-ep-dp-pp order tiles the job with
    them; a copy offset inside that block sits on the same servers). Each copy's servers fall into domains
    as rank order puts them (server ``rank // gpus_per_node``, domain ``server // nodes``): its *pieces*, the
    group's servers in each domain in server order (a group of 8 trays from tray 2 on racks of 3: 1 + 3 + 3 + 1).
    Each split is the group's cluster with those exact pieces as its domains
    (:attr:`~dpsim.topology.spec.NvlinkDomainSpec.pieces`), so the network routes every flow between two
    pieces over the NICs and the busiest NIC carries what those pieces make it carry (the derivation per
    collective is in tests/test_rack_placement.py). Which copy is slowest depends on the collective (a ring
    crosses once per piece boundary, each on other servers' NICs; a flat all-to-all loads most the NICs of the
    smallest piece; a tree the servers with most tree edges leaving their piece), so every distinct split is
    kept and each op costed on all of them (:class:`SlowestCopy`). Worst first: most pieces, then the smallest
    piece (the one whose link report is shown). A split that is the aligned one (whole domains of ``job``'s
    size, the rest after them) is ``topo`` itself, costed exactly as by default."""
    per_domain = multi_server_domain(job)
    group_nodes = topo.n_nodes
    if not per_domain or group_nodes <= 1 or job.n_nodes <= per_domain:
        return (topo,)
    gpn = job.spec.node.gpus_per_node
    block = stride * size
    blocks = job.n_gpus // block
    # Block k's split depends on k x block modulo a domain's GPUs only: one period of starts is every split.
    period = per_domain * gpn // math.gcd(block, per_domain * gpn)
    offsets = np.arange(size, dtype=np.int64) * stride
    splits: dict[tuple[int, ...], tuple[int, int]] = {}
    # Copies offset inside a block: on the block's servers while the ranks are at most a server apart; further
    # apart, a copy offset by a server's GPUs or more sits on other servers and may straddle where the block's
    # first does not (the edp group of --tp 8 --ep 2 --etp 8 on 160 GB200s: trays 0, 4, ..., 16 in one rack,
    # the copy 8 ranks on at trays 2, ..., 18 across two; only the first was read, and contiguous came out
    # faster than aligned).
    shifts = (0,) if stride <= gpn else range(0, stride, gpn) if stride % gpn == 0 else range(stride)
    for k in range(min(blocks, period)):
        for shift in shifts:
            servers = np.unique((k * block + shift + offsets) // gpn)
            counts = np.unique(servers // per_domain, return_counts=True)[1]
            pieces = tuple(int(c) for c in counts)
            assert sum(pieces) == group_nodes, (pieces, group_nodes)
            splits.setdefault(pieces, (len(pieces), -min(pieces)))
    # Aligned, a domain holds topo's domain of the group's servers (fewer than a domain's servers when they are
    # more than a server apart: spread_domains; none of them together: one each).
    held = topo.spec.nvlink_domain.nodes if topo.spec.nvlink_domain is not None else 1
    whole, rest = divmod(group_nodes, held)
    aligned = (held,) * whole + ((rest,) if rest else ())
    out: list[Topology] = []
    for pieces in sorted(splits, key=splits.__getitem__, reverse=True):  # stable: first copy first on ties
        split = topo if pieces == aligned else _pieces_topology(job, topo, pieces)
        if split not in out:
            out.append(split)
    return tuple(out)


def _pieces_topology(job: Topology, topo: Topology, pieces: tuple[int, ...]) -> Topology:
    """``topo`` with its servers in NVLink domains of ``pieces`` servers each, in server order (``job``'s
    domain's kind; no domain where every piece is one server). Pieces of one size with a shorter last one are
    uniform domains (8 + 2 trays: domains of 8, as a design would say)."""
    if max(pieces) <= 1:
        domain = None
    elif len(pieces) == 1 or (len(set(pieces[:-1])) == 1 and pieces[-1] <= pieces[0]):
        domain = dataclasses.replace(job.spec.nvlink_domain, nodes=pieces[0], pieces=())
    else:
        domain = dataclasses.replace(job.spec.nvlink_domain, nodes=max(pieces), pieces=pieces)
    return dataclasses.replace(topo, spec=dataclasses.replace(topo.spec, nvlink_domain=domain))


def rank_order_split(job: Topology, topo: Topology, stride: int, size: int) -> Topology:
    """The worst of :func:`rank_order_splits` (most pieces, then the smallest piece)."""
    return rank_order_splits(job, topo, stride, size)[0]


def pair_place(job: Topology, first: int, last: int) -> str:
    """Where ranks ``first`` to ``last`` of ``job`` sit: ``server`` (one server), ``domain`` (one multi-node
    NVLink domain, or an NVLink fabric joining every server) or ``network`` (across the NICs). Pairs of
    ranks ``first + i`` and ``last - k + 1 + i`` (two blocks of ``k``) all share one of them exactly when
    the whole span does (the blocks are in rank order and servers and domains are runs of ranks)."""
    gpn = job.gpus_per_node
    if first // gpn == last // gpn:
        return "server"
    domain = nvlink_domain_gpus(job)
    return "domain" if first // domain == last // domain else "network"


def pair_topology(job: Topology, place: str) -> tuple[Topology, int]:
    """Two ranks of ``job`` placed as :func:`pair_place` says, as a cluster of their own, and how many such
    pairs share each server's NICs: two GPUs of one server; one GPU in each of two servers of one NVLink
    domain (or of an NVLink fabric); one GPU in each of two servers that reach each other over the NICs
    (two domains apart: the domain left out, every GPU of a server with its own pair on the NICs)."""
    if place == "server":
        return Topology(spec=job.spec, n_gpus=2), 1
    if place == "network" and job.spec.nvlink_domain is not None:
        job = Topology(spec=dataclasses.replace(job.spec, nvlink_domain=None), n_gpus=job.n_gpus)
    return _node_group(job, 1, 2)


def mirror_pair_group(job: Topology, shape: LayoutShape, stage: int) -> str:
    """The communicator that costs a collective between ``stage`` and its mirror ``pp - 1 - stage``
    (DualPipe's two parameter copies of one stage), as :func:`layout_communicators` places stages:
    ``tp x cp x dp`` consecutive ranks each. ``emb`` (placed as the job's farthest pair) when this pair
    is as far apart, else ``pair-server`` or ``pair-domain`` by where its two blocks of ranks sit
    (:func:`pair_place`): the same pair models, chosen by where this pair really sits rather than where
    the outermost one does."""
    per_stage = shape.tp * shape.cp * shape.dp
    mirror = shape.pp - 1 - stage
    place = pair_place(job, stage * per_stage, (mirror + 1) * per_stage - 1)
    return "emb" if place == pair_place(job, 0, job.n_gpus - 1) else f"pair-{place}"


def nvlink_domain_gpus(job: Topology) -> int:
    """GPUs one NVLink domain joins: a server, or the servers of a multi-node NVLink domain."""
    spec = job.spec
    domain = spec.nvlink_domain.nodes if spec.nvlink_domain is not None else 1
    if nvlink_fabric(spec.fabric):
        return job.n_gpus
    return domain * spec.node.gpus_per_node


def check_layout_placement(job: Topology, shape: LayoutShape, *, tp_across_network: bool = False,
                           tp_comm_overlap: str = "backward") -> None:
    """Refuse a layout whose groups cannot be placed as :func:`layout_communicators` places them
    (one line naming the flag), or whose ``async`` tensor-parallel overlap has no NVSwitch to copy
    over: its peer copies read the other ranks' memory directly (CUDA peer access through
    symmetric memory), which only GPUs on one NVSwitch fabric all have with each other."""
    gpn = job.gpus_per_node
    t, d, p = shape.tp, shape.dp * shape.cp, shape.pp
    if t * d * p != job.n_gpus:
        cp = f" x --cp {shape.cp}" if shape.cp > 1 else ""
        raise ConfigError(f"--gpus: {job.n_gpus} is not --tp {t}{cp} x --pp {p} x --dp {shape.dp} = {t * d * p}; "
                          f"give --gpus {t * d * p} or change the layout")
    c = shape.cp
    if c > 1 and ((t * c < gpn and gpn % (t * c)) or (t * c > gpn and (t * c) % gpn)):
        raise ConfigError(f"--cp: --tp {t} x --cp {c} = {t * c} GPUs per context-parallel group do not tile "
                          f"{gpn}-GPU servers; choose --cp so that tp x cp divides or is a multiple of {gpn}")
    if (t <= gpn and gpn % t) or (t > gpn and t % gpn):
        raise ConfigError(f"--tp: {t} neither divides nor is a multiple of the {gpn} GPUs per node; "
                          f"choose a --tp that tiles the servers")
    domain = nvlink_domain_gpus(job)
    if t > domain and not tp_across_network:
        raise ConfigError(f"--tp: {t} GPUs do not fit in one NVLink domain of {domain} GPUs, so its "
                          f"collectives would cross the network; use --tp {domain} or less, or allow it with "
                          f"--tp-across-network")
    if tp_comm_overlap == "async" and t > 1 and (t > domain or job.spec.node.interconnect != "nvswitch"):
        where, fix = ((f"--tp {t} crosses the network (NVLink domain of {domain} GPUs)", f", or --tp {domain} or less")
                      if t > domain else (f"this server's GPUs are joined by {job.spec.node.interconnect}", ""))
        raise ConfigError(f"--tp-comm-overlap: 'async' copies between GPUs over NVSwitch, but {where}; "
                          f"choose off, backward or full{fix}")
    shown = f"--tp {t} x --dp {d}" if c == 1 else f"--tp {t} x --cp {c} x --dp {shape.dp}"
    if t * d > gpn and (t * d) % gpn:
        raise ConfigError(f"--dp: {shown} = {t * d} GPUs per pipeline stage do not fill whole "
                          f"{gpn}-GPU servers; choose --dp so that tp x dp is a multiple of {gpn}")
    if t * d < gpn and gpn % (t * d):
        raise ConfigError(f"--dp: {shown} = {t * d} GPUs per pipeline stage do not tile "
                          f"{gpn}-GPU servers; choose --dp so that tp x dp divides {gpn}")
    experts = shape.ep * shape.etp
    if (t * d) % experts:
        raise ConfigError(f"--ep: --ep {shape.ep} x --etp {shape.etp} = {experts} does not divide {shown} "
                          f"= {t * d}, the ranks of a stage the expert layers are carved from; choose --ep dividing it")
    if (experts > gpn and experts % gpn) or (experts < gpn and gpn % experts):
        raise ConfigError(f"--ep: --ep {shape.ep} x --etp {shape.etp} = {experts} neither divides nor is a multiple "
                          f"of the {gpn} GPUs per node; choose an --ep that tiles the servers")


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

    def __init__(self, job: Topology, make: ModelFactory, layout: LayoutShape | None = None,
                 zero_group: int | None = None, shard_group: int | None = None, contiguous: bool = False):
        self.job = job
        self._make = make
        self._communicators = communicators(job, shard_group, contiguous)
        if layout is None and zero_group is not None and zero_group < job.n_gpus:
            # InternLM's ZERO1 group: consecutive data-parallel ranks (Initializer_Zero1).
            topo, conc = consecutive_group(job, zero_group)
            split = rank_order_splits(job, topo, 1, zero_group) if contiguous else (topo,)
            self._communicators["zero"] = Communicator(name="zero", topology=split[0], job=job, concurrent=conc,
                                                       copies=split[1:])
        self.layout = layout
        """The tensor x pipeline x data layout whose groups :meth:`group` also knows (``None``: none)."""
        if layout is not None:
            self._communicators.update(layout_communicators(job, layout, contiguous))
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
            known = ", ".join(self._communicators)
            raise ConfigError(f"communicator {name!r} is not known; known: {known}") from None

    def group(self, name: str) -> CollectiveModel:
        """The collective model of communicator ``name`` (of each of its copies that sit differently on the
        racks, the slowest: :class:`SlowestCopy`)."""
        model = self._models.get(name)
        if model is None:
            comm = self.communicator(name)
            model = self._make(comm)
            if comm.copies:
                model = SlowestCopy([model, *(self._make(dataclasses.replace(comm, topology=t, copies=()))
                                              for t in comm.copies)])
            self._models[name] = model
        return model


class SlowestCopy:
    """The collective model of a group whose copies sit differently on the NVLink domains
    (:attr:`Communicator.copies`): each op costed on every copy, the slowest one's result returned (the copies
    run the same op at once and the step waits for the last). Anything else is the first copy's, the worst
    by :func:`rank_order_splits`' order (its links are the ones ``--links`` reports)."""

    def __init__(self, models: list[CollectiveModel]):
        self.models = models
        """One model per copy, the first the worst-placed."""
        self.n_ranks = models[0].n_ranks

    def time(self, op: str, size_bytes: float) -> CollectiveResult:
        results = [m.time(op, size_bytes) for m in self.models]
        return max(results, key=lambda r: r.time_s)  # the first of equals: the worst-placed copy's

    def slowest(self, ops: list[tuple[str, float]]) -> CollectiveModel:
        """The copy's model that takes longest over ``ops`` (``(op, size_bytes)``, a step's collectives on this
        group; the first of equals): the one whose links ``--links`` reports."""
        return max(self.models, key=lambda m: sum(m.time(op, size).time_s for op, size in ops))

    def __getattr__(self, name: str):
        return getattr(self.models[0], name)
