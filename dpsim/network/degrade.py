"""Links below capacity (``--degrade``): names of links, and their capacities in a network.

``node<K>.nic<J>``, ``node<K>.gpu<J>`` or a link class name a set of links of a
:class:`~dpsim.network.tiers.TierNetwork`; a degraded step is costed by the same
collective model as a healthy one, on the network with those capacities scaled.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any, Sequence

import numpy as np

from dpsim.errors import ConfigError, DpsimError
from dpsim.frozen import frozen_dataclass
from dpsim.limits import MAX_REPEATED_FLAGS, MIN_DEGRADED_FRACTION, short
from dpsim.network.tiers import TierNetwork
from dpsim.topology.cluster import Topology
from dpsim.topology.spec import nic_fabric
from dpsim.units import NUMBER_PATTERN
from dpsim.wording import count, count_are, index_range, there_are


@frozen_dataclass
class LinkDegradation:
    """A link, or a class of links, running below its capacity."""

    link: str
    """``node<K>.nic<J>`` (NIC J of node K and its cable to the leaf), ``node<K>.gpu<J>``
    (GPU J's NVLink/PCIe link inside node K) or a link class (``ethernet``, ``infiniband``,
    ``nvlink``, ``pcie``, ``leaf-spine``, ``nvlink-fabric``: every link of that class)."""
    capacity_fraction: float
    """Share of the healthy capacity left, in (0, 1] (``50%`` -> 0.5)."""

    @property
    def label(self) -> str:
        """The flag value that describes it, e.g. ``node3.nic0:50%``."""
        return f"{self.link}:{100 * self.capacity_fraction:g}%"


def check_parsed_items(items: Any, flag: str, kind: type, parser: str) -> None:
    """A repeatable flag's items as Python gives them: a tuple (or list) of ``kind``, at most
    :data:`~dpsim.limits.MAX_REPEATED_FLAGS`; a string where the parsed objects belong was an AttributeError
    deep in the run. ``parser``: how to parse text into ``kind``, named in the refusal."""
    if isinstance(items, (str, bytes)) or not isinstance(items, (tuple, list)) \
            or not all(isinstance(x, kind) for x in items):
        raise ConfigError(f"{flag}: {short(items)} is not valid; expected a tuple of {kind.__name__} "
                          f"(parse text with {parser})")
    if len(items) > MAX_REPEATED_FLAGS:
        raise ConfigError(f"{flag}: given {len(items):,} times; expected at most {MAX_REPEATED_FLAGS:,}")


def check_degradations(degradations: Any) -> None:
    """``--degrade`` as every entry takes it (predict, plan, sweep, the variability spec): a tuple of
    :class:`LinkDegradation` whose degradations of one link, multiplied, leave it at least
    :data:`~dpsim.limits.MIN_DEGRADED_FRACTION` of its capacity."""
    check_parsed_items(degradations, "--degrade", LinkDegradation,
                       "dpsim.network.degrade.parse_degradation('nvlink:50%')")
    left: dict[str, float] = {}
    for d in degradations:
        # Degradations of one link multiply: keep what is left of it within reach.
        left[d.link] = left.get(d.link, 1.0) * d.capacity_fraction
        if not left[d.link] >= MIN_DEGRADED_FRACTION:
            raise ConfigError(f"--degrade: {d.label!r} leaves {100 * left[d.link]:.3g} % of {d.link}'s capacity "
                              f"(all --degrade of that link multiplied); expected at least "
                              f"{100 * MIN_DEGRADED_FRACTION:g} %")


def parse_degradation(raw: str) -> LinkDegradation:
    """Parse ``node3.nic0:50%``, ``node0.gpu2:25%`` or ``ethernet:50%`` (capacity left)."""
    m = re.fullmatch(r"\s*([A-Za-z0-9_.\-]+)\s*:\s*" + NUMBER_PATTERN + r"\s*%\s*", str(raw))
    pct = float(m.group(2)) if m else math.nan
    if not m or not (0 < pct <= 100):
        raise ConfigError(
            f"--degrade: {raw!r} is not valid; expected LINK:PCT% with PCT in (0, 100] the capacity left, "
            "LINK being node<K>.nic<J>, node<K>.gpu<J> or a link class (e.g. ethernet:50%)")
    return LinkDegradation(link=m.group(1).lower(), capacity_fraction=pct / 100)


_NAMED_LINK = re.compile(r"node(\d+)\.(nic|gpu)(\d+)")


def names_one_link(link: str) -> bool:
    """Whether a degradation's ``link`` names one server's NIC or GPU link (``node<K>.nic<J>``,
    ``node<K>.gpu<J>``) rather than a whole link class."""
    return _NAMED_LINK.fullmatch(link) is not None


def degradation_terms(network, degradations: Sequence[LinkDegradation], *,
                      strict: bool = True) -> list[tuple[str, object, float]]:
    """``degradations`` checked against ``network`` (a :class:`~dpsim.network.tiers.TierNetwork`),
    in order: ``("class", name, factor)`` for every link of a class, ``("links", indices,
    factor)`` for named links. See :func:`degradation_scale` for the names and ``strict``."""
    terms: list[tuple[str, object, float]] = []
    spec = network.spec
    n_nodes = network.n_nodes
    # Servers that are one NVLink domain (nvl72-ib's 16 GPUs) talk over NVLink alone: their NICs and switch
    # tiers are in the network but carry none of the job's traffic, and a --degrade of them changed nothing.
    topology = getattr(network, "topology", None)
    idle = (frozenset(network.between_server_classes) if topology is not None and network.nic_kind
            and not topology.crosses_nics else frozenset())
    for deg in degradations:
        f = deg.capacity_fraction
        m = _NAMED_LINK.fullmatch(deg.link)
        if m:
            node, kind, j = int(m.group(1)), m.group(2), int(m.group(3))
            if node >= n_nodes:
                raise ConfigError(f"--degrade: {deg.label!r} names node {node}, but "
                                  f"{there_are(n_nodes, 'node')} ({index_range('node', n_nodes)})")
            if kind == "nic":
                ports = network.layout.ports_per_nic
                nics = network.layout.nic_nodes * ports if network.nic_kind else 0
                if idle and j < nics:
                    if strict:
                        raise ConfigError(f"--degrade: {deg.label!r} names NIC {j}, which carries none of the job's "
                                          f"traffic: its {count_are(n_nodes, 'server')} one NVLink domain of "
                                          f"{spec.name}")
                    continue
                if j >= nics:
                    allowed = (("nic0" if nics == 1 else f"nic0..nic{nics - 1}") if nics
                               else "no NIC carrying traffic between servers")
                    raise ConfigError(f"--degrade: {deg.label!r} names NIC {j}; {spec.name} with "
                                      f"{count(n_nodes, 'node')} has {allowed}")
                terms.append(("links", network.server_nic_links(node, j // ports), (ports - 1 + f) / ports))
            else:
                if j >= network.gpn:
                    raise ConfigError(f"--degrade: {deg.label!r} names GPU {j}; nodes have "
                                      f"{index_range('gpu', network.gpn)}")
                # A job on part of one server (--gpus 4 of 8) uses its first GPUs: node0.gpu5 is in the
                # model's server but carries none of the job's traffic, and was taken in silence (no effect).
                topology = getattr(network, "topology", None)
                used = topology.gpus_per_node if topology is not None else network.gpn
                if j >= used:
                    raise ConfigError(f"--degrade: {deg.label!r} names GPU {j}, which the job does not use: its "
                                      f"{count(used, 'GPU')} of the server {'is' if used == 1 else 'are'} "
                                      f"{index_range('gpu', used)}")
                terms.append(("links", network.server_gpu_links(node, j), f))
        elif deg.link in idle:
            if strict:
                raise ConfigError(f"--degrade: {deg.link!r} carries none of the job's traffic: its "
                                  f"{count_are(n_nodes, 'server')} one NVLink domain of "
                                  f"{spec.name}; degrade a link class they use: "
                                  f"{', '.join(sorted(set(network.link_classes) - idle))}")
        elif deg.link in network.link_classes:
            terms.append(("class", deg.link, f))
        elif strict:
            present = ', '.join(sorted(set(network.link_classes) - idle)) or 'none'
            if n_nodes == 1 and deg.link in _classes_between_servers(topology):
                # The preset's NICs and switches exist once the job spans servers; on one server they carry
                # nothing, which "not a link of infiniband" (on the infiniband preset) did not say.
                raise ConfigError(f"--degrade: {deg.link!r} carries none of the job's traffic: its one server's GPUs "
                                  f"talk over {present} alone; degrade a link class it uses: {present}")
            raise ConfigError(
                f"--degrade: {deg.link!r} is not a link of {spec.name}; use node<K>.nic<J>, node<K>.gpu<J> "
                f"or a link class present here: {present}")
    return terms


def _classes_between_servers(topology) -> frozenset[str]:
    """The link classes ``topology``'s design adds once a job spans two of its servers (none without a
    fabric, or where the cluster cannot be widened)."""
    if topology is None or topology.spec.fabric is None:
        return frozenset()
    try:
        two = TierNetwork(dataclasses.replace(topology, n_gpus=2 * topology.spec.node.gpus_per_node,
                                              leaf_group_nodes=None, tier_group_sizes=None))
    except DpsimError:
        return frozenset()
    return frozenset(two.link_classes)


def degradation_scale(network, degradations: Sequence[LinkDegradation], *, strict: bool = True) -> np.ndarray:
    """Capacity multiplier of every link of ``network`` (a :class:`~dpsim.network.tiers.TierNetwork`)
    under ``degradations``: 1 where healthy; degradations of one link multiply.

    ``node<K>`` counts the servers of the network's cluster (with ``--jobs``, every job's
    servers, as placed). ``node<K>.nic<J>`` scales both directions of that NIC's cable to
    its leaf (with more NICs than GPUs, NICs are merged per GPU: one NIC of a bundle of
    ``p`` scales the bundle's link to ``(p - 1 + f) / p``); ``node<K>.gpu<J>`` both
    directions of that GPU's NVLink/PCIe link to its server's hub; a link class every link
    of that class. A name that matches no link of the network is an error.

    ``strict=False`` skips link classes the network lacks (a hybrid-sharding
    communicator's network, whose names :func:`communicator_degradations` mapped).
    """
    scale = np.ones(network.n_links)
    for kind, what, f in degradation_terms(network, degradations, strict=strict):
        scale[network.class_links(what) if kind == "class" else what] *= f
    return scale


def class_factors(terms: Sequence[tuple[str, object, float]]) -> dict[str, float] | None:
    """The capacity factor of each degraded link class when :func:`degradation_terms` names
    only whole classes (every link of a class alike: the cluster stays symmetric); ``None``
    when a single link is named below its full rate."""
    out: dict[str, float] = {}
    for kind, what, f in terms:
        if kind != "class":
            if f == 1.0:
                continue  # a link left at its full rate changes nothing
            return None
        out[what] = out.get(what, 1.0) * f
    return out


def same_numbering(job: Topology, group: Topology) -> bool:
    """True when ``group``'s servers and GPUs are numbered like ``job``'s (the names apply as they are)."""
    return group.n_nodes == job.n_nodes and group.gpus_per_node == job.gpus_per_node


def communicator_degradations(degradations: Sequence[LinkDegradation], job: Topology,
                              group: Topology) -> tuple[LinkDegradation, ...]:
    """``degradations`` named on ``job``'s cluster, as seen by one of its communicators.

    A communicator's ``group`` stands for every copy of it, which all run the same ops at once
    (:class:`~dpsim.collectives.groups.Communicator`): ``group.gpus_per_node`` GPUs in each of
    ``group.n_nodes`` servers, the copies tiling the job's GPUs. Every GPU and every NIC is in one
    copy, and a synchronous step waits for the slowest copy, so the group is costed as the copy
    that holds the degraded link:

    - ``node<K>.gpu<J>`` becomes ``node<K mod n>.gpu<J mod g>`` (``n``, ``g``: the group's servers and
      GPUs per server; which of its own slots the slow GPU takes does not change the cost of a
      group whose slots are alike).
    - ``node<K>.nic<J>`` is dropped by a group inside one server (it crosses no NIC); else it becomes
      ``node<K mod n>.nic<J mod m>`` (``m``: the group's NICs per server) when the group's NICs are
      whole NICs of the job, or, when one group NIC carries ``r`` job NICs' bandwidth (several NICs
      merged, :func:`~dpsim.collectives.groups._node_group`), ``node<K mod n>.nic0`` at the share
      left, ``(r - 1 + f) / r`` (``r`` at most 1: a share of one NIC, all of it slowed by ``f``).

    Link classes are kept as they are.
    """
    if group.n_gpus <= 1:
        return ()
    if same_numbering(job, group):
        return tuple(degradations)
    nodes, gpn = group.n_nodes, group.gpus_per_node
    job_fabric, fabric = job.spec.fabric, group.spec.fabric
    out = []
    for d in degradations:
        m = _NAMED_LINK.fullmatch(d.link)
        if not m:
            out.append(d)
            continue
        node, kind, j = int(m.group(1)), m.group(2), int(m.group(3))
        f = d.capacity_fraction
        # A group on every server (the node-sized default's inter) keeps the server names: with --jobs
        # they count every job's servers.
        node = node if nodes == job.n_nodes else node % nodes
        if kind == "gpu":
            out.append(LinkDegradation(link=f"node{node}.gpu{j % gpn}", capacity_fraction=f))
        elif nodes > 1 and nic_fabric(fabric) and nic_fabric(job_fabric):
            # How many of the job's NICs one of the group's NICs stands for.
            r = fabric.nic_bandwidth_bytes_per_s / job_fabric.nic_bandwidth_bytes_per_s
            if math.isclose(r, 1.0):
                out.append(LinkDegradation(link=f"node{node}.nic{j % fabric.nics_per_node}",
                                           capacity_fraction=f))
            else:
                share = (r - 1 + f) / r if r > 1 else f
                out.append(LinkDegradation(link=f"node{node}.nic0", capacity_fraction=share))
    return tuple(out)


CALIBRATED_SCOPES = ("gpu", "nic")
"""What a calibration profile measured a rate for, that a degraded link can be a fraction of: the
GPUs' links inside a server (its ``intra_node`` fits) and the NICs (its ``inter_node`` fits: the
multi-node ring's bottleneck, :mod:`dpsim.profile.calibrated`)."""


def calibrated_factors(degradations: Sequence[LinkDegradation], job: Topology,
                       group: Topology) -> dict[str, float]:
    """Capacity left of the slowest degraded link of each :data:`CALIBRATED_SCOPES` scope that a
    communicator ``group`` of ``job`` (its copy holding the link, :func:`communicator_degradations`)
    crosses, for a calibrated collective model: ``{"gpu": f, "nic": f}`` (1 where none is degraded).

    ``node<K>.gpu<J>`` and the link classes of the server's GPU-to-GPU links (``nvlink``, or ``pcie``
    in a PCIe server) are ``gpu``; ``node<K>.nic<J>`` and the NIC cables' class (``infiniband``,
    ``ethernet``) are ``nic``; degradations of one link multiply and the slowest link of a scope
    paces a ring through it, as on the flow model. A class with no measured rate of its own (the
    switch tiers ``leaf-spine``/``spine``..., an NVLink fabric or domain, a PCIe link on the NIC path
    only) is a :class:`~dpsim.errors.ConfigError`: the profile's fits mix it into rates it cannot be
    told apart from. A named link also carries its scope's class degradation (they multiply, as on
    the flow model)."""
    network = TierNetwork(group) if group.n_gpus > 1 else None
    scope_of: dict[str, str] = {}
    if network is not None:
        for f in network.server.families:
            if f.nic:
                scope_of.setdefault(f.link_class, "nic")
            elif f.intra:
                scope_of[f.link_class] = "gpu"
    left: dict[tuple[str, str], float] = {}
    for d in communicator_degradations(degradations, job, group):
        m = _NAMED_LINK.fullmatch(d.link)
        scope = ("gpu" if m.group(2) == "gpu" else "nic") if m else scope_of.get(d.link)
        if scope is None:
            if network is not None and d.link not in network.link_classes:
                continue  # a class this communicator's copy does not cross (nvlink of a one-GPU-per-node group)
            raise ConfigError(f"--degrade: {d.label!r} with --calibration: a calibration profile measured the "
                              f"GPUs' links inside a server and the NICs, and {d.link} has no rate of its own "
                              f"there; degrade {', '.join(sorted(scope_of)) or 'a GPU or NIC link'} or a named "
                              f"node<K>.gpu<J>/node<K>.nic<J>, or leave --calibration out")
        left[(scope, d.link)] = left.get((scope, d.link), 1.0) * d.capacity_fraction
    out = {}
    for scope in CALIBRATED_SCOPES:
        # A named link is also of its scope's class: a class degraded as well slows it further (the slowest
        # class of the scope, when a server's GPU links are of two).
        whole = min([f for (s, link), f in left.items() if s == scope and not names_one_link(link)], default=1.0)
        named = [f * whole for (s, link), f in left.items() if s == scope and names_one_link(link)]
        out[scope] = min([whole, *named])
    return out


def slowest_class_factors(network, degradations: Sequence[LinkDegradation]) -> dict[str, float]:
    """Per link class of ``network``, the lowest capacity factor ``degradations`` (already named on its
    cluster, :func:`communicator_degradations`) leave any of its links; classes left whole are left out.
    What paces a uniform exchange over the class (the all-to-alls), on a flow model or beside a calibrated
    one (:meth:`~dpsim.collectives.plan_cost.PlanEvaluator.slowest_class_factors` for the former)."""
    terms = degradation_terms(network, degradations, strict=False)
    if not terms:
        return {}
    scale = np.ones(network.n_links)
    for kind, what, f in terms:
        scale[network.class_links(what) if kind == "class" else what] *= f
    ids = network.link_class_id
    return {cls: float(scale[ids == i].min()) for i, cls in enumerate(network.link_classes)
            if (ids == i).any() and scale[ids == i].min() < 1.0}
