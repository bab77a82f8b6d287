"""Per-link utilisation of a training step and its bottleneck links, by symmetry group.

Every collective of a step runs the plan :class:`~dpsim.collectives.nccl.NcclCollectives`
chose for it; the plan's evaluation knows how many bytes each directed link carries per
byte of message (every concurrent job included). Summed over the step's collectives,
``bytes / capacity`` is the time the link is busy; over the step time, its
utilisation. The **bottleneck links** are the busiest ones: the links whose upgrade
would shorten the communication.

A homogeneous cluster has thousands of identical links, so the report lists *groups*:
the links of one class with the same capacity and the same bytes, with how many there
are and the first of them by name (``n1.nic0 -> leaf0.0``, and 131,039 more). A link that
differs from the others (a degraded NIC, the root of a tree) is a group of its own. On
the symmetric path the groups come from the classes of identical servers and switch
blocks (:class:`~dpsim.network.loadmap.LoadMap`): the report never walks the links of a
262,144-GPU cluster.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from dpsim.collectives.groups import SlowestCopy
from dpsim.collectives.nccl import NcclCollectives
from dpsim.frozen import frozen_dataclass
from dpsim.network.loadmap import LoadMap


@frozen_dataclass
class LinkUse:
    """A group of directed links that carried the same bytes in a step (often one link)."""

    link: tuple[str, str]
    """Graph edge (source, target) of the group's first link."""
    link_class: str
    """``nvlink``, ``pcie``, ``infiniband``, ``leaf-spine``, ``spine-core``..."""
    capacity_bytes_per_s: float
    """What collectives can drive through each link."""
    bytes: float
    """Bytes each link carried in the step (all jobs)."""
    busy_s: float
    """``bytes / capacity``."""
    utilisation: float
    """``busy_s / step time``."""
    links: int = 1
    """Links in the group (same class, capacity and bytes)."""

    def to_dict(self) -> dict:
        return {"link": f"{self.link[0]} -> {self.link[1]}", "class": self.link_class,
                "capacity_bytes_per_s": self.capacity_bytes_per_s, "bytes": self.bytes,
                "busy_s": self.busy_s, "utilisation": self.utilisation, "links": self.links}


@frozen_dataclass
class LinkReport:
    """Link utilisation of one step."""

    step_time_s: float
    """The step the utilisation is relative to."""
    top: tuple[LinkUse, ...]
    """Busiest groups of links, busiest first."""
    bottleneck: tuple[LinkUse, ...]
    """Up to a few of the links tied for busiest, one by one (busiest first, then by link index)."""
    bottleneck_count: int
    """How many links tie for busiest (within 0.1 %)."""
    by_class: dict[str, dict]
    """Per link class: ``links`` used, ``max_utilisation``, ``mean_utilisation``."""
    algorithms: dict[str, int]
    """How many of the step's collectives each ``algorithm/protocol`` ran."""
    jobs: int
    """Concurrent jobs on the cluster."""
    placement: str
    """``packed`` or ``interleaved``."""
    evaluation: str = "symmetric"
    """How the plans costed for the step's collectives were evaluated
    (:meth:`NcclCollectives.evaluation_of`)."""

    @property
    def bottleneck_class(self) -> str | None:
        """Class of the busiest link (what to upgrade)."""
        return self.bottleneck[0].link_class if self.bottleneck else None

    def to_dict(self) -> dict:
        return {
            "bottleneck_class": self.bottleneck_class,
            "bottleneck": [u.to_dict() for u in self.bottleneck],
            "bottleneck_count": self.bottleneck_count,
            "by_class": self.by_class,
            "top": [u.to_dict() for u in self.top],
            "algorithms": dict(self.algorithms),
            "jobs": self.jobs,
            "placement": self.placement,
            "evaluation": self.evaluation,
        }


def link_report(collectives, ops: list[tuple[str, float]], step_time_s: float, *,
                top: int = 10, named_ties: int = 5) -> LinkReport | None:
    """Utilisation of every link by the collectives ``ops`` (``(op, size_bytes)``) of one step.

    ``collectives`` is a :class:`~dpsim.collectives.nccl.NcclCollectives` (or anything with
    one as ``.world``; of a :class:`~dpsim.collectives.groups.SlowestCopy`, the copy slowest over ``ops``); returns ``None`` for models without links (a calibration's fits).
    ``top`` groups are listed, busiest first.
    """
    model = collectives
    if isinstance(model, SlowestCopy):  # a group whose copies sit differently on the racks: its slowest copy's
        model = model.slowest(ops)
    if not isinstance(model, NcclCollectives):
        model = getattr(collectives, "world", None)
    if not isinstance(model, NcclCollectives):
        return None
    net = model.network
    key = (_Same(model.plans.costs), tuple(ops))  # the model's caches: one per cluster and flags
    cached = _GROUPS.get(key)
    if cached is None:
        cached = _GROUPS[key] = _groups(model, ops)
        while len(_GROUPS) > 256:
            _GROUPS.pop(next(iter(_GROUPS)))
    groups, used = cached[0], dict(cached[1])
    step = max(step_time_s, 1e-30)

    def use(g: _Group, link: int | None = None) -> LinkUse:
        return LinkUse(link=net.link_name(g.first if link is None else link), link_class=g.link_class,
                       capacity_bytes_per_s=g.capacity, bytes=g.bytes, busy_s=g.bytes / g.capacity,
                       utilisation=g.bytes / g.capacity / step, links=g.links if link is None else 1)

    by_class: dict[str, dict] = {}
    for cls in sorted({g.link_class for g in groups}, key=net.link_classes.index):
        mine = [g for g in groups if g.link_class == cls]
        links = sum(g.links for g in mine)
        by_class[cls] = {"links": links, "max_utilisation": max(g.bytes / g.capacity for g in mine) / step,
                         "mean_utilisation": sum(g.links * (g.bytes / g.capacity) for g in mine) / links / step}
    # The plans costed for these calls (every candidate NCCL weighed), however they were evaluated.
    plans = {(a, op) for op in {op for op, size in ops if size > 0} for a, _ in model.candidates(op)}
    base = dict(step_time_s=step_time_s, algorithms=used, jobs=model.jobs, placement=model.placement,
                evaluation=model.evaluation_of(plans), by_class=by_class)
    if not groups:
        return LinkReport(top=(), bottleneck=(), bottleneck_count=0, **base)
    peak = groups[0].bytes / groups[0].capacity
    tied = [g for g in groups if g.bytes / g.capacity >= peak * (1 - 1e-3)]
    # The bottleneck names single links: the first few of the tied groups, busiest first.
    named = sorted(((-(g.bytes / g.capacity), int(i), g) for g in tied for i in g.members(named_ties)),
                   key=lambda t: t[:2])[:named_ties]
    return LinkReport(top=tuple(use(g) for g in groups[:top]), bottleneck=tuple(use(g, i) for _, i, g in named),
                      bottleneck_count=sum(g.links for g in tied), **base)


def _groups(model: NcclCollectives, ops: list[tuple[str, float]]) -> tuple[list[_Group], dict[str, int]]:
    """The groups of equal links under ``ops``, and how many calls each algorithm/protocol ran."""
    net = model.network
    # Calls that ran the same plan add their sizes first: one sum per plan, not per call.
    per_plan: dict[tuple, list] = {}
    used: dict[str, int] = {}
    for op, size in ops:
        if size <= 0 or model.n_ranks == 1:
            continue
        choice = model.choose(op, size)
        scale = model.facts.nic_scale(model.costs.message_bytes(choice.algorithm, choice.protocol, op, size)) \
            if model.topology.n_nodes > 1 else 1.0
        pc = model.plan_cost(choice.algorithm, op, scale)
        entry = per_plan.setdefault((choice.algorithm, op, round(scale, 6)), [pc, 0.0])
        entry[1] += size
        key = f"{choice.algorithm}/{choice.protocol}"
        used[key] = used.get(key, 0) + 1
    loads = [(pc.loads, size) for pc, size in per_plan.values()]
    if loads and all(isinstance(x, LoadMap) for x, _ in loads):
        total = LoadMap()
        for x, size in loads:
            total = total + x.scaled(size)
        groups = _symmetric_groups(model, total)
    else:
        dense = np.zeros(net.n_links)
        for x, size in loads:
            dense += (x.dense(net.families(), net.n_links) if isinstance(x, LoadMap) else x) * size
        groups = _dense_groups(model, dense)
    # Busiest first; among equals, the group whose first link comes first in the network's numbering.
    groups.sort(key=lambda g: (-(g.bytes / g.capacity), g.first))
    return groups, used


class _Same:
    """A key part that matches one object only (and holds it, so its identity is not reused)."""

    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def __hash__(self) -> int:
        return id(self.obj)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Same) and other.obj is self.obj


_GROUPS: dict[tuple, tuple] = {}
"""Link groups by (model caches, ops): a sweep's points on one cluster with one model's buckets share them."""


@dataclass(kw_only=True)
class _Group:
    """Links of one class with the same capacity and bytes."""

    link_class: str
    capacity: float
    bytes: float
    links: int
    first: int
    members: Callable[[int], np.ndarray]
    """The first ``k`` link indices of the group."""


def _symmetric_groups(model: NcclCollectives, total: LoadMap) -> list[_Group]:
    net = model.network
    fams = net.families()
    caps = model.plans.family_capacity(1.0)
    merged: dict[tuple, tuple[_Group, list]] = {}
    for fam, value, count, first, cell in total.groups(fams):
        cls = net.link_classes[fam.link_class]
        key = (cls, caps[fam.name], value)
        if key not in merged:
            cells: list = []
            g = _Group(link_class=cls, capacity=caps[fam.name], bytes=value, links=0, first=first,
                       members=lambda k, cells=cells: np.sort(np.concatenate(
                           [total.members(fams, c, k) for c in cells]))[:k])
            merged[key] = (g, cells)
        g, cells = merged[key]
        g.links += count
        g.first = min(g.first, first)
        cells.append(cell)
    return [g for g, _ in merged.values()]


def _dense_groups(model: NcclCollectives, link_bytes: np.ndarray) -> list[_Group]:
    """The same groups from bytes on every link (the whole-cluster path)."""
    net = model.network
    idx = np.flatnonzero(link_bytes > 0)
    if not len(idx):
        return []
    cid = net.link_class_id[idx]
    cap = model.plans.capacity_bytes_per_s[idx]
    rows = np.stack([cid.astype(float), cap, link_bytes[idx]], axis=1)
    _, first, inverse, count = np.unique(rows, axis=0, return_index=True, return_inverse=True, return_counts=True)
    inverse = np.asarray(inverse).ravel()
    return [_Group(link_class=net.link_classes[int(cid[f])], capacity=float(cap[f]), bytes=float(link_bytes[idx[f]]),
                   links=int(c), first=int(idx[f]), members=lambda k, j=j: idx[inverse == j][:k])
            for j, (f, c) in enumerate(zip(first, count))]
