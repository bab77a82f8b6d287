"""Per-link utilisation of a training step and its bottleneck links.

Every collective of a step runs the plan :class:`~dpsim.algorithms.nccl.NcclCollectives`
chose for it; the plan's evaluation knows how many bytes each directed link carries per
byte of message (every concurrent job included). Summed over the step's collectives,
``bytes / capacity`` is the time the link is busy; over the step time, its
utilisation. The **bottleneck links** are the busiest ones: the links whose upgrade
would shorten the communication (with a homogeneous cluster many links tie, e.g. every
NIC; the report counts them and names a few).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dpsim.collectives.nccl import NcclCollectives


@dataclass(frozen=True, kw_only=True)
class LinkUse:
    """One directed link over a step."""

    link: tuple[str, str]
    """Graph edge (source, target)."""
    link_class: str
    """``nvlink``, ``pcie``, ``infiniband``, ``leaf-spine``, ``spine-core``..."""
    capacity_bytes_per_s: float
    """What collectives can drive through it."""
    bytes: float
    """Bytes it carried in the step (all jobs)."""
    busy_s: float
    """``bytes / capacity``."""
    utilisation: float
    """``busy_s / step time``."""

    def to_dict(self) -> dict:
        return {"link": f"{self.link[0]} -> {self.link[1]}", "class": self.link_class,
                "capacity_bytes_per_s": self.capacity_bytes_per_s, "bytes": self.bytes,
                "busy_s": self.busy_s, "utilisation": self.utilisation}


@dataclass(frozen=True, kw_only=True)
class LinkReport:
    """Link utilisation of one step."""

    step_time_s: float
    """The step the utilisation is relative to."""
    top: tuple[LinkUse, ...]
    """Busiest links, busiest first."""
    bottleneck: tuple[LinkUse, ...]
    """Up to a few of the links tied for busiest."""
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
        }


def link_report(collectives, ops: list[tuple[str, float]], step_time_s: float, *,
                top: int = 10, named_ties: int = 5) -> LinkReport | None:
    """Utilisation of every link by the collectives ``ops`` (``(op, size_bytes)``) of one step.

    ``collectives`` is a :class:`~dpsim.collectives.nccl.NcclCollectives` (or anything with
    one as ``.world``); returns ``None`` for models without links (a calibration's fits).
    """
    model = collectives
    if not isinstance(model, NcclCollectives):
        model = getattr(collectives, "world", None)
    if not isinstance(model, NcclCollectives):
        return None
    net = model.network
    link_bytes = np.zeros(net.n_links)
    used: dict[str, int] = {}
    for op, size in ops:
        if size <= 0 or model.n_ranks == 1:
            continue
        choice = model.choose(op, size)
        scale = model.nic_scale(model.message_bytes(choice.algorithm, choice.protocol, op, size)) \
            if model.topology.n_nodes > 1 else 1.0
        pc = model.plan_cost(choice.algorithm, op, scale)
        link_bytes += pc.link_bytes_per_byte * size
        key = f"{choice.algorithm}/{choice.protocol}"
        used[key] = used.get(key, 0) + 1
    capacity = model.capacity_bytes_per_s
    busy = link_bytes / capacity
    step = max(step_time_s, 1e-30)
    idx = np.flatnonzero(link_bytes > 0)

    def use(i: int) -> LinkUse:
        return LinkUse(link=net.link_name(int(i)), link_class=net.link_classes[net.link_class_id[i]],
                       capacity_bytes_per_s=float(capacity[i]), bytes=float(link_bytes[i]),
                       busy_s=float(busy[i]), utilisation=float(busy[i] / step))

    order = idx[np.argsort(-busy[idx], kind="stable")]
    by_class: dict[str, dict] = {}
    cid = net.link_class_id[idx]
    for c in np.unique(cid):
        cls = net.link_classes[int(c)]
        sel = idx[cid == c]
        by_class[cls] = {"links": int(len(sel)), "max_utilisation": float(busy[sel].max() / step),
                         "mean_utilisation": float(busy[sel].mean() / step)}
    if len(order) == 0:
        return LinkReport(step_time_s=step_time_s, top=(), bottleneck=(), bottleneck_count=0, by_class={},
                          algorithms=used, jobs=model.jobs, placement=model.placement)
    peak = busy[order[0]]
    tied = order[busy[order] >= peak * (1 - 1e-3)]
    return LinkReport(step_time_s=step_time_s, top=tuple(use(i) for i in order[:top]),
                      bottleneck=tuple(use(i) for i in tied[:named_ties]), bottleneck_count=int(len(tied)),
                      by_class=by_class, algorithms=used, jobs=model.jobs, placement=model.placement)
