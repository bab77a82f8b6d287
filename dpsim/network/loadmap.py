"""Per-link loads of a whole cluster, stored once per class of identical links.

A symmetric network (:class:`~dpsim.network.tiers.TierNetwork`) numbers its links in
*families*, one per block of its graph (GPU up-links, PCIe links, NIC cables, leaf
up-links, ...), each a grid of ``units x lanes`` (servers x GPUs, servers x NICs, leaf
groups x rails, switch blocks x 1): link ``offset + unit * lanes + lane``. On a
homogeneous cluster most units of a family carry the same loads, so a
:class:`LoadMap` keeps, per family, the class of each unit and one row of loads per
class (:class:`FamilyLoad`): the memory and the work are per *class* of servers and
switches, plus one small integer per unit, never per link or per flow. Sums of maps
(the collectives of a step) refine the classes; :meth:`LoadMap.groups` lists the
distinct loads with how many links carry each and the first such link (for its name).
"""

from __future__ import annotations


import numpy as np

from dpsim.frozen import frozen_dataclass


@frozen_dataclass
class Family:
    """One block of a network's links, numbered ``offset + unit * lanes + lane``."""

    name: str
    """Block name (``gpu_up``, ``nic_leaf``, ``up0``...)."""
    offset: int
    """Index of its first link."""
    units: int
    """Servers, leaf groups or switch blocks."""
    lanes: int
    """Links per unit (GPUs, NICs, rails, or 1)."""
    capacity_bytes_per_s: float
    """Healthy capacity of each of its links."""
    link_class: int
    """Index into the network's ``link_classes``."""
    nic: bool
    """NIC <-> switch links (what a per-message NIC overhead slows down)."""


@frozen_dataclass
class FamilyLoad:
    """Loads of one family: unit ``u`` lane ``l`` carries ``table[cls[u], l]``."""

    cls: np.ndarray
    """Class of each unit (``0 .. classes - 1``)."""
    table: np.ndarray
    """``(classes, lanes)`` load of each lane of a unit of each class."""
    count: np.ndarray
    """Units in each class."""
    first: np.ndarray
    """Lowest unit of each class."""

    @classmethod
    def uniform(cls_, units: int, row: np.ndarray) -> FamilyLoad:
        """Every unit carries ``row``."""
        # One class: a read-only broadcast of class 0, not an array of one integer per unit
        # (memory independent of the cluster's size: issue 15).
        return cls_(cls=np.broadcast_to(np.zeros(1, dtype=np.int32), (units,)), table=np.asarray(row, float)[None, :],
                    count=np.array([units]), first=np.array([0]))

    def scaled(self, factor: float) -> FamilyLoad:
        return FamilyLoad(cls=self.cls, table=self.table * factor, count=self.count, first=self.first)

    def __add__(self, other: FamilyLoad) -> FamilyLoad:
        if other.cls is self.cls:
            return FamilyLoad(cls=self.cls, table=self.table + other.table, count=self.count, first=self.first)
        if len(self.count) == 1:
            return FamilyLoad(cls=other.cls, table=other.table + self.table[0], count=other.count, first=other.first)
        if len(other.count) == 1:
            return FamilyLoad(cls=self.cls, table=self.table + other.table[0], count=self.count, first=self.first)
        rows, first, inverse, count = classify([self.cls, other.cls])
        return FamilyLoad(cls=inverse, table=self.table[rows[:, 0]] + other.table[rows[:, 1]], count=count,
                          first=first)

    def max(self) -> float:
        return float(self.table.max()) if self.table.size else 0.0


def classify(cols: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Units with equal values in every column (small non-negative integers, one array per
    column) form a class: ``(rows, first unit, class of each unit, units per class)``, classes
    in order of their first unit.

    The columns are packed into one integer per unit (mixed radix) and classed by counting,
    so the work and the memory are a few arrays of one integer per unit, whatever the classes.
    """
    units = len(cols[0]) if cols else 0
    if not cols or units == 0:
        return (np.zeros((1 if units else 0, len(cols)), np.int64), np.zeros(1 if units else 0, np.int64),
                np.zeros(units, np.int32), np.array([units] if units else [], np.int64))
    spans = [int(c.max()) + 1 for c in cols]
    if float(np.prod(np.array(spans, dtype=float))) >= 2.0 ** 62:  # too wide to pack: sort the rows
        sig = np.stack(cols, axis=1)
        _, first, inverse, count = np.unique(sig, axis=0, return_index=True, return_inverse=True,
                                             return_counts=True)
        order = np.argsort(first, kind="stable")
        relabel = np.empty(len(order), np.int64)
        relabel[order] = np.arange(len(order))
        return sig[first[order]], first[order], relabel[np.asarray(inverse).ravel()].astype(np.int32), count[order]
    key = np.zeros(units, dtype=np.int64)
    radix = 1
    for c, span in zip(cols, spans):
        if span > 1:
            key += c * np.int64(radix) if radix > 1 else c  # int64: a column may be int32
        radix *= span
    small = radix <= 4 * units + 64
    # Ascending. (With return_counts np.unique skips its masked-array check, which imports numpy.ma:
    # ~13 ms of a predict's start-up; the values are the same.)
    values = np.flatnonzero(np.bincount(key, minlength=radix)) if small else np.unique(key, return_counts=True)[0]
    if len(values) <= 64:
        first = np.array([int(np.argmax(key == v)) for v in values], dtype=np.int64)
    else:  # many classes: the first unit of each value from one stable sort
        perm = np.argsort(key, kind="stable")
        starts = np.flatnonzero(np.concatenate([[True], np.diff(key[perm]) != 0]))
        first = perm[starts]
    order = np.argsort(first, kind="stable")
    rank = np.empty(len(values), dtype=np.int32)
    rank[order] = np.arange(len(values), dtype=np.int32)
    if small:
        lookup = np.zeros(radix, dtype=np.int32)
        lookup[values] = rank
        inverse = lookup[key]
    else:
        inverse = rank[np.searchsorted(values, key)]
    first = first[order]
    count = np.bincount(inverse, minlength=len(values))
    rows = np.stack([c[first] for c in cols], axis=1).astype(np.int64)
    return rows, first, inverse, count


class LoadMap:
    """Loads on every link of a network, family by family (missing families carry nothing)."""

    def __init__(self, families: dict[str, FamilyLoad] | None = None):
        self.families: dict[str, FamilyLoad] = dict(families or {})

    def scaled(self, factor: float) -> LoadMap:
        """Every load times ``factor``."""
        return LoadMap({k: v.scaled(factor) for k, v in self.families.items()})

    def __add__(self, other: LoadMap) -> LoadMap:
        out = dict(self.families)
        for k, v in other.families.items():
            out[k] = out[k] + v if k in out else v
        return LoadMap(out)

    def max_ratio(self, capacity: dict[str, float]) -> float:
        """Largest ``load / capacity`` over every link (``capacity`` per family name)."""
        return max((f.max() / capacity[k] for k, f in self.families.items()), default=0.0)

    def min_share(self, capacity: dict[str, float]) -> tuple[float, list[tuple[str, np.ndarray]]]:
        """Max-min's first level when every link's load counts its flows: the smallest
        ``capacity / load`` over loaded links, and, per family, which (class, lane) cells attain it
        (within max-min's own tolerance, :func:`~dpsim.network.maxmin.max_min_sparse`)."""
        fair = np.inf
        shares = {}
        for k, f in self.families.items():
            with np.errstate(divide="ignore"):
                share = np.where(f.table > 0, capacity[k] / np.where(f.table > 0, f.table, 1.0), np.inf)
            shares[k] = share
            if share.size:
                fair = min(fair, float(share.min()))
        hits = [(k, s <= fair * (1 + 1e-9) + 1e-300) for k, s in shares.items()]
        return fair, hits

    def groups(self, families: dict[str, Family]) -> list[tuple[Family, float, int, int, tuple[str, int, int]]]:
        """Every distinct non-zero load: ``(family, load, links, first link index, cell)``; ``cell``
        (family name, class, lane) names the group for :meth:`members`."""
        out = []
        for name, f in self.families.items():
            fam = families[name]
            for c in range(len(f.count)):
                row = f.table[c]
                for lane in np.flatnonzero(row > 0):
                    out.append((fam, float(row[lane]), int(f.count[c]),
                                fam.offset + int(f.first[c]) * fam.lanes + int(lane), (name, c, int(lane))))
        return out

    def members(self, families: dict[str, Family], cell: tuple[str, int, int], k: int) -> np.ndarray:
        """The first ``k`` link indices of a group of :meth:`groups` (one pass over its family's units)."""
        name, c, lane = cell
        fam = families[name]
        units = np.flatnonzero(self.families[name].cls == c)[:k]
        return fam.offset + units * fam.lanes + lane

    def dense(self, families: dict[str, Family], n_links: int) -> np.ndarray:
        """The load of every link (for small networks and tests)."""
        out = np.zeros(n_links)
        for name, f in self.families.items():
            fam = families[name]
            out[fam.offset:fam.offset + fam.units * fam.lanes] = f.table[f.cls].ravel()
        return out
