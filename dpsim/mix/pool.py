"""Every placed job's group-solve arrays pooled once, for the compiled group solve of a mix.

A contended mix solves tens of thousands of groups of the same few dozen jobs. Joining their arrays
anew for each solve (and shifting every job's classes and private links to their place in it) cost
as much as the max-min itself; here each job's traffic is laid out once in flat pools, its classes and
private links numbered where they stay, and a solve names the jobs by their slot
(:func:`~dpsim.network.maxmin_jit._group_solve` then works on the pools in place). The pools are laid
out again only when a solve meets traffic they do not hold (an arrival, a job routed again).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

_MAX_MEMBERS = 256
"""Traffics a pool keeps (those of jobs gone or routed again stay until it holds more)."""


class GroupPool:
    """The pooled arrays of the jobs' traffic (``_Traffic`` of :mod:`dpsim.mix.simulate`) and the
    compiled kernels that solve groups of them."""

    def __init__(self, kernels: tuple[Callable, Callable], n_shared: int):
        self._solve, self._alone = kernels
        self.n_shared = n_shared
        self.members: list = []
        self.generation = 0
        self._capacity_of = None

    def slots(self, traffic: list, shared_capacity: np.ndarray) -> np.ndarray:
        """The slots of ``traffic`` (laid out first where the pools do not hold one of them)."""
        g = self.generation
        got = [t.slot[1] if t.slot[0] == g else -1 for t in traffic]
        if -1 in got:
            missing = list({id(t): t for t in traffic if t.slot[0] != g}.values())
            members = self.members + missing
            if len(members) > _MAX_MEMBERS:
                members = list({id(t): t for t in traffic}.values())
            self._lay_out(members)
            got = [t.slot[1] for t in traffic]
        if shared_capacity is not self._capacity_of:
            self.capacity = np.concatenate([shared_capacity, self._own_capacity])
            self._capacity_of = shared_capacity
        return np.array(got, dtype=np.int64)

    def _lay_out(self, members: list) -> None:
        self.generation += 1
        self.members = members
        n_cls = np.array([len(t.weight) for t in members], dtype=np.int64)
        n_inc = np.array([len(t.flow_of) for t in members], dtype=np.int64)
        n_own = np.array([len(t.own_capacity) for t in members], dtype=np.int64)
        cls_at = np.concatenate([[0], np.cumsum(n_cls)])
        inc_at = np.concatenate([[0], np.cumsum(n_inc)])
        own_at = self.n_shared + np.concatenate([[0], np.cumsum(n_own)])
        self.cls_lo, self.cls_hi = cls_at[:-1].copy(), cls_at[1:].copy()
        self.c_start = np.concatenate([t.start[:-1] + a for t, a in zip(members, inc_at[:-1].tolist())]
                                      + [inc_at[-1:]]).astype(np.int64)
        self.c_link = np.concatenate([t.local + t.own * o for t, o in zip(members, own_at[:-1].tolist())]
                                     ).astype(np.int64)
        self.weight = np.concatenate([t.weight for t in members]).astype(np.float64)
        self.fraction = np.concatenate([t.fraction for t in members]).astype(np.float64)
        self.detached = np.zeros(len(self.weight), dtype=np.bool_)
        self.fixed = np.zeros(len(self.weight))
        for t, a in zip(members, cls_at[:-1].tolist()):
            if t.detached is not None and len(t.detached):
                self.detached[a + t.detached] = True
                self.fixed[a + t.detached] = t.detached_rate
        # Each member's links once each, sorted (its shared links first): the weight and the classes
        # crossing each (in incidence order); and its incidences on shared links, in incidence order.
        u_link, u_weight, u_count, u_mid, by_link, sh_class, sh_link = [], [], [], [], [], [], []
        own_entry = np.zeros(int(own_at[-1]) - self.n_shared, dtype=np.int64)
        e = 0
        own_min, cover = [], []
        for t, a, i, o in zip(members, cls_at[:-1].tolist(), inc_at[:-1].tolist(), own_at[:-1].tolist()):
            glob = self.c_link[i:i + len(t.flow_of)]
            cls = t.flow_of + a
            order = np.argsort(glob, kind="stable")
            link, count = np.unique(glob[order], return_counts=True)
            n_mine = int(np.searchsorted(link, self.n_shared))
            own_entry[link[n_mine:] - self.n_shared] = e + np.arange(n_mine, len(link))
            u_mid.append(e + n_mine)
            u_link.append(link)
            u_count.append(count)
            u_weight.append(np.add.reduceat(self.weight[cls[order]], np.cumsum(count) - count)
                            if len(link) else np.zeros(0))
            by_link.append(cls[order])
            # Its own links' shares before the first round (as the solve computes them), the least of
            # them, and the most a class waits for (the largest over its classes of the least share on
            # its own links; a class on none waits for ever): see _group_solve.
            capacity = t.own_capacity[link[n_mine:] - o]
            share = np.where((capacity > 0) | np.isnan(capacity), capacity, 0.0) / u_weight[-1][n_mine:]
            own_min.append(share.min() if len(share) else np.inf)
            mine = glob >= self.n_shared
            waits = np.full(len(t.weight), np.inf)
            np.minimum.at(waits, t.flow_of[mine], share[glob[mine] - o])
            crossing = np.bincount(t.flow_of, minlength=len(t.weight)) > 0
            cover.append(waits[crossing].max() if crossing.any() else -np.inf)
            on_shared = glob < self.n_shared
            sh_class.append(cls[on_shared])
            sh_link.append(glob[on_shared])
            e += len(link)
        self.u_lo, self.u_hi, self.u_link = _ranges(u_link)
        self.u_mid = np.array(u_mid, dtype=np.int64)
        self.u_weight = np.concatenate([np.zeros(0)] + u_weight).astype(np.float64)
        self.u_count = np.concatenate([np.zeros(0, np.int64)] + u_count).astype(np.int64)
        self.u_from = (np.cumsum(self.u_count) - self.u_count).astype(np.int64)
        self.by_link = np.concatenate([np.zeros(0, np.int64)] + by_link).astype(np.int64)
        self.own_entry = own_entry
        self.own_min, self.cover = np.array(own_min, dtype=np.float64), np.array(cover, dtype=np.float64)
        self.sh_lo, self.sh_hi, self.sh_class = _ranges(sh_class)
        self.sh_link = np.concatenate([np.zeros(0, np.int64)] + sh_link).astype(np.int64)
        self.al_lo, self.al_hi, self.al_link = _ranges([t.shared for t in members])
        self.al_value = np.concatenate([t.shared_load for t in members]).astype(np.float64)
        self._own_capacity = np.concatenate([np.zeros(0)] + [t.own_capacity for t in members])
        self._capacity_of = None
        for s, t in enumerate(members):
            t.slot = (self.generation, s)
        n_links = int(own_at[-1])
        n_c, n_i = int(cls_at[-1]), int(inc_at[-1])
        # users, load, gone, jobs_on, at, pos, rates, rising, on_link, hit, links, live, share, partial
        self.scratch = (np.zeros(n_links), np.zeros(n_links), np.zeros(n_links), np.zeros(n_links, np.int64),
                        np.zeros(n_links, np.int64), np.zeros(n_links, np.int64), np.zeros(n_c),
                        np.zeros(n_c, np.bool_), np.zeros(n_i, np.int64), np.zeros(n_c, np.int64),
                        np.zeros(n_links, np.int64), np.zeros(n_links, np.int64), np.zeros(n_links),
                        np.zeros(len(members), np.int64))

    def alone_load(self, slots: np.ndarray, over: np.ndarray) -> tuple[np.ndarray, bool]:
        """The shared links' load of the jobs each at its alone allocation, and whether one exceeds ``over``."""
        return self._alone(slots, self.al_lo, self.al_hi, self.al_link, self.al_value, self.n_shared, over)

    def solve(self, slots: np.ndarray, full_at: float) -> tuple:
        """(ok, speeds, binding shared links or -1, shared links' load, crosses a contested link) of the group."""
        return self._solve(slots, self.cls_lo, self.cls_hi, self.c_start, self.c_link, self.weight, self.fraction,
                           self.detached, self.fixed, self.u_lo, self.u_mid, self.u_hi, self.u_link, self.u_weight,
                           self.u_count, self.u_from, self.by_link, self.own_entry, self.own_min, self.cover,
                           self.sh_lo, self.sh_hi,
                           self.sh_class, self.sh_link, self.capacity, self.n_shared, full_at, *self.scratch)


def _ranges(parts: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Arrays joined: (starts, ends, joined)."""
    at = np.concatenate([[0], np.cumsum([len(p) for p in parts])]).astype(np.int64)
    return at[:-1].copy(), at[1:].copy(), np.concatenate([np.zeros(0, np.int64)] + list(parts)).astype(np.int64)
