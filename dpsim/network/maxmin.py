"""Max-min fair sharing of links by concurrent flows (progressive filling), and the finish times of
flows that re-share the links as they finish (progressive completion)."""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np


def max_min_rates(paths: Sequence[Sequence[int]], capacity: np.ndarray) -> np.ndarray:
    """Max-min fair rates of flows over links.

    Parameters
    ----------
    paths : sequence of sequences of int
        For each flow, the indices of the links it crosses.
    capacity : numpy.ndarray
        Capacity of each link (bytes/s).

    Returns
    -------
    numpy.ndarray
        Rate of each flow; a flow with an empty path gets ``inf``.

    Examples
    --------
    >>> import numpy as np
    >>> max_min_rates([[0], [0, 1], [1]], np.array([10.0, 4.0])).tolist()
    [8.0, 2.0, 2.0]
    """
    lengths = np.fromiter((len(p) for p in paths), dtype=np.int64, count=len(paths))
    flow_of = np.repeat(np.arange(len(paths)), lengths)
    link_of = np.fromiter((l for p in paths for l in p), dtype=np.int64, count=int(lengths.sum()))
    return max_min_sparse(flow_of, link_of, np.asarray(capacity, dtype=float), len(paths))


def max_min_sparse(flow_of: np.ndarray, link_of: np.ndarray, capacity: np.ndarray,
                   n_flows: int, weight: np.ndarray | None = None) -> np.ndarray:
    """Max-min fair rates from a sparse flow-link incidence (progressive filling).

    ``(flow_of[i], link_of[i])`` says flow ``flow_of[i]`` crosses link ``link_of[i]``
    (each pair once). Every round raises all unfrozen flows equally until links
    saturate, and freezes every flow on *every* link that saturates at that level
    (ties together), so a homogeneous pattern of 100,000 flows settles in a few rounds
    of O(incidences) numpy work instead of one round per link. Frozen flows' incidences
    are dropped as they freeze, so later rounds cost only what is still rising.

    ``weight`` (default 1 each): how many identical flows each entry stands for. Flows that
    cross the same links always get one rate (they freeze together), so ``w`` of them as one
    entry of weight ``w`` give exactly the rates of the ``w`` flows (integer weights sum
    exactly in floating point: the same shares, bit for bit).

    Once fewer than half the links still carry a rising flow, the links are renumbered to those
    (each later round's link-wide work then follows them, not every link given; a group of jobs
    on a cluster leaves most links behind after its first rounds). Renumbering changes no sum:
    the rates are those of rounds over every link, bit for bit. With whole-number weights (or none)
    the users of each link are counted once and lowered as flows freeze (whole numbers: the same
    counts as counting again every round).
    """
    n_links = len(capacity)
    rates = np.full(n_flows, np.inf)
    if n_flows == 0 or len(flow_of) == 0:
        return rates
    remaining = capacity.astype(float).copy()
    weight = None if weight is None else np.asarray(weight, dtype=float)
    w = None if weight is None else weight[flow_of]
    newly = np.zeros(n_flows, dtype=bool)
    whole = weight is None or bool(np.all(weight == np.floor(weight)))
    users = np.bincount(link_of, weights=w, minlength=n_links).astype(float)
    while len(flow_of):
        if not whole:
            users = np.bincount(link_of, weights=w, minlength=n_links).astype(float)
        loaded = users > 0
        n_loaded = int(np.count_nonzero(loaded))
        if 2 * n_loaded < n_links:
            kept = np.flatnonzero(loaded)
            renumber = np.zeros(n_links, dtype=np.int64)
            renumber[kept] = np.arange(n_loaded)
            link_of, remaining, users, loaded = renumber[link_of], remaining[kept], users[kept], loaded[kept]
            n_links = n_loaded
        share = np.full(n_links, np.inf)
        share[loaded] = np.maximum(remaining[loaded], 0.0) / users[loaded]
        fair = float(share.min())
        saturated = share <= fair * (1 + 1e-9) + 1e-300
        hit = flow_of[saturated[link_of]]
        rates[hit] = fair
        newly[hit] = True
        done = newly[flow_of]
        gone = np.bincount(link_of[done], weights=None if w is None else w[done], minlength=n_links)
        remaining -= gone * fair
        users -= gone
        newly[hit] = False
        keep = ~done
        flow_of, link_of = flow_of[keep], link_of[keep]
        if w is not None:
            w = w[keep]
    return rates


def progressive_finish(size: np.ndarray, rates_of: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """When each flow of ``size`` bytes finishes, all starting at 0, their rates max-min shared
    among the flows not yet finished: ``rates_of(alive)`` gives the rates of the flows ``alive``
    (a boolean per flow; the others ignored).

    A fixed share (every flow at its first max-min rate to the end) is exact only while flows
    that share links move the same bytes: otherwise a small flow finishes early and leaves its
    capacity to the others, and a flow slowed elsewhere (a degraded link) frees capacity for the
    largest one, so ``max(size / rate)`` could fall when a link gets slower. Here the flows
    re-share at every finish (time advances to the first finish, finished flows leave, max-min
    runs again on those left), and the last finish is the phase's end.

    Each flow keeps when its rate last changed, its bytes left then and its rate, and is touched
    only when its own rate changes: a flow whose rate never changes finishes at ``size / rate``
    exactly, and flows coupled to no others by links evolve bit for bit as they would alone
    (what lets the symmetric evaluation, which costs independent parts apart, equal the whole
    cluster's). Flows finish together only when their finish times are equal (no tolerance:
    the same flows finish in each round whatever else runs).
    """
    size = np.asarray(size, dtype=float)
    alive = np.ones(size.shape, dtype=bool)
    rate = np.asarray(rates_of(alive), dtype=float).copy()
    t0 = np.zeros(size.shape)
    left = size.copy()
    finish = size / rate
    while True:
        t = float(finish[alive].min())
        alive &= ~(finish <= t)
        if not alive.any():
            return finish
        new = np.asarray(rates_of(alive), dtype=float)
        ch = alive & (new != rate)
        if ch.any():
            left[ch] = np.maximum(left[ch] - rate[ch] * (t - t0[ch]), 0.0)
            t0[ch] = t
            rate[ch] = new[ch]
            finish[ch] = t0[ch] + left[ch] / rate[ch]


def max_min_routes(routes, capacity: dict[str, float], groups: Sequence[np.ndarray] | None = None,
                   users: dict[str, np.ndarray] | None = None,
                   alive: Sequence[np.ndarray] | None = None, merged: list | None = None,
                   saturated: dict[str, np.ndarray] | None = None) -> list[np.ndarray]:
    """Max-min fair rates of flows routed by symmetry (:class:`~dpsim.network.model.SymmetricRoutes`),
    one array per block (``inf``: not set); ``capacity`` per family name.

    ``groups`` (per block, a group number per column): when given, only the slowest flows of
    each group are wanted; the rounds stop once every group has a frozen flow (levels only
    rise, so a group's first frozen flows are its slowest), and flows still rising then are
    left at ``inf``. ``users``: the flows on each link (per family, dense, float), when already
    counted (over the flows ``alive`` when given; the arrays are used up: they end as the flows
    left rising). ``alive`` (per block, a
    boolean per flow): share among these flows only (the others left at ``inf``), for
    :func:`progressive_finish`. ``merged``: when given, gets ``True`` appended if some round froze
    a link whose share was within the tolerance of the level but not equal to it (then a flow's
    rate can depend on flows that share no link with it). ``saturated`` (per family, dense): gets
    the level each link froze its flows at (a link freezes once: its users drop to none).

    The rounds of :func:`max_min_sparse`, with the same arithmetic on every link: each round the
    smallest ``max(remaining, 0) / users`` over loaded links, every rising flow on a link within
    its tolerance frozen at it, its links' remaining capacity lowered by (frozen flows) x (level)
    and their users by the frozen flows. Users and frozen flows are whole numbers, whatever order
    they are counted in, so the rates are :func:`max_min_sparse`'s on the same flows, bit for bit;
    but no route is listed flow by flow: which flows a saturated link freezes and how many leave
    each link are counted by blocks of servers and pattern edges
    (:meth:`~dpsim.network.model.SymmetricRoutes.crossed`, :meth:`~dpsim.network.model.SymmetricRoutes.count`),
    over the rows that still hold a rising flow. A link's share is recomputed only when its
    flows change (the same value as recomputing it every round).
    """
    if alive is None:
        live = [np.arange(b.shape[0]) for b in routes.blocks]
        rising = [np.ones(b.shape, dtype=bool) for b in routes.blocks]
    else:
        live = [np.flatnonzero(a.any(axis=1)) for a in alive]
        rising = [a[rows] for a, rows in zip(alive, live)]
    rates = [np.full(b.shape, np.inf) for b in routes.blocks]
    users = routes.count(rising, live) if users is None else {f: np.asarray(u, dtype=float) for f, u in users.items()}
    remaining = {f: np.full(len(u), capacity[f], dtype=float) for f, u in users.items()}  # a number or one per link
    share = {}
    for f, u in users.items():
        share[f] = np.full(len(u), np.inf)
        loaded = u > 0
        share[f][loaded] = np.maximum(remaining[f][loaded], 0.0) / u[loaded]
    waiting = None
    if groups is not None:
        waiting = {int(g) for b, gr in zip(routes.blocks, groups) if b.shape[0] for g in np.asarray(gr).tolist()}
    lowest = {f: float(x.min()) if x.size else np.inf for f, x in share.items()}  # kept per family
    while any(len(r) for r in live) and (waiting is None or waiting):
        fair = min(lowest.values(), default=np.inf)
        if fair == np.inf:
            break  # rising flows that cross no link (none here: every flow has a route)
        limit = fair * (1 + 1e-9) + 1e-300
        marked = {f: share[f] <= limit for f, low in lowest.items() if low <= limit}
        if merged is not None and not merged and any((share[f][m] != fair).any() for f, m in marked.items()):
            merged.append(True)
        if saturated is not None:
            for f, m in marked.items():
                saturated[f][m] = fair
        hit = [a & c for a, c in zip(rising, routes.crossed(marked, live))]
        for k, (r, rows, h) in enumerate(zip(rates, live, hit)):
            if h.any():
                if waiting is not None:
                    waiting -= set(np.asarray(groups[k])[h.any(axis=0)].tolist())
                sub = r[rows]
                sub[h] = fair
                r[rows] = sub
        if waiting is not None and not waiting:
            break
        for f, g in routes.count(hit, live).items():
            ch = np.flatnonzero(g)
            remaining[f][ch] -= g[ch] * fair
            users[f][ch] -= g[ch]
            u, left = users[f][ch], remaining[f][ch]
            share[f][ch] = np.where(u > 0, np.maximum(left, 0.0) / np.where(u > 0, u, 1.0), np.inf)
            lowest[f] = float(share[f].min())
        for k, h in enumerate(hit):
            if not h.any():
                continue
            still = rising[k] & ~h
            keep = still.any(axis=1)
            live[k], rising[k] = live[k][keep], still[keep]
    return rates


def _sorted_unique(x: np.ndarray) -> np.ndarray:
    """The distinct values of ``x``, sorted (not np.unique: it imports numpy.ma)."""
    x = np.sort(x)
    return x[np.concatenate(([True], x[1:] != x[:-1]))] if len(x) else x


class Reshare:
    """The rates of :func:`max_min_routes` over the flows still alive, for
    :func:`progressive_finish`, re-shared near the flows that finished instead of over the whole
    cluster where that gives the same rates bit for bit (else a whole max-min).

    A whole max-min (no tolerance merge) leaves a trace: each flow's rate, the level at which each
    link froze its flows (``saturated``), and the levels (every round's). When flows finish, the
    links they crossed are the *region*; a flow on a region link keeps its rate if another of its
    links, outside the region, froze at that rate (its *certificate*: an outside link's flows and
    counts are those of the last max-min, so it freezes at the same level again), otherwise it joins
    the region with its links, until every flow on a region link is in the region or certified.
    Then the max-min's rounds are replayed on the region links only: the levels are the least share
    of a region link and every level of the last max-min (where links outside may freeze), each
    round a region link's capacity left lowered by (its flows frozen in the round: region flows, and
    certified ones at their rate) x (level), as the whole max-min lowers it round by round (the same
    numbers, the same operations). Why the links outside keep the last max-min's course: the flows
    they carry are certified or never touch the region, so they freeze at the same levels; a round
    that only region links reach freezes region flows only (a certified flow's level is one where an
    outside link freezes); and between levels every link's share is at least the last max-min's next
    level (its least share then), so a region level with no level of the last max-min within its
    tolerance above it freezes no link outside. The whole max-min runs instead when the replay would
    leave these terms: a link frozen within the tolerance of a level but not at it (a merge), a level
    within the tolerance of a level of the last max-min (links outside could merge), or a certified
    flow frozen at another rate. Levels of the last max-min that no longer occur are kept among the
    levels (harmless: at most a needless whole max-min).
    """

    def __init__(self, routes, capacity: dict[str, float]):
        self.routes = routes
        self.capacity = capacity
        self.offsets, self.n_links, self.links, self.weight = routes.flow_links()
        self.cap = np.zeros(self.n_links)
        for name, f in routes.families.items():
            self.cap[self.offsets[name]:self.offsets[name] + f.units * f.lanes] = capacity.get(name, 0.0)
        shapes = [b.shape for b in routes.blocks]
        self.cuts = np.cumsum([0] + [r * c for r, c in shapes])
        self.shapes = shapes
        self.state = None
        self._by_link = None
        self.replayed = 0
        """Re-shares done on a region (the others were whole max-mins)."""

    def rates(self, alive: np.ndarray) -> np.ndarray:
        """Each flow's rate among the flows ``alive`` (``inf`` for the others)."""
        if self.state is not None:
            out = self._replay(alive)
            if out is not None:
                self.replayed += 1
                return out
        return self._whole(alive)

    def _whole(self, alive: np.ndarray) -> np.ndarray:
        masks = [alive[self.cuts[k]:self.cuts[k + 1]].reshape(self.shapes[k]) for k in range(len(self.shapes))]
        sat = {name: np.full(f.units * f.lanes, np.inf) for name, f in self.routes.families.items()}
        merged: list = []
        rates = max_min_routes(self.routes, self.capacity, alive=masks, merged=merged, saturated=sat)
        out = np.concatenate([r.ravel() for r in rates]) if rates else np.zeros(0)
        if merged:
            self.state = None
        else:
            saturated = np.full(self.n_links + 1, np.nan)  # the spare slot matches no rate
            for name, s in sat.items():
                saturated[self.offsets[name]:self.offsets[name] + len(s)] = s
            live = out[alive]
            self.state = (alive.copy(), out, saturated, _sorted_unique(live[np.isfinite(live)]))
        return out

    def _flows_on(self, links: np.ndarray) -> np.ndarray:
        """The flows that cross any of ``links`` (sorted, each once)."""
        if self._by_link is None:
            flat = self.links.ravel()
            at = np.flatnonzero(flat < self.n_links)
            link = flat[at]
            flow = at // max(self.links.shape[1], 1)
            order = np.argsort(link, kind="stable")
            start = np.zeros(self.n_links + 1, dtype=np.int64)
            np.cumsum(np.bincount(link, minlength=self.n_links), out=start[1:])
            self._by_link = (flow[order], start)
        flow, start = self._by_link
        s, e = start[links], start[links + 1]
        cnt = e - s
        at = np.repeat(s - np.cumsum(cnt) + cnt, cnt) + np.arange(int(cnt.sum()))
        seen = np.zeros(len(self.links), dtype=bool)
        seen[flow[at]] = True
        return np.flatnonzero(seen)

    def _replay(self, alive: np.ndarray) -> np.ndarray | None:
        was, rate, sat, levels = self.state
        if (alive & ~was).any():
            return None
        gone = np.flatnonzero(was & ~alive)
        n = self.n_links
        out = np.where(alive, rate, np.inf)
        if not gone.size:
            return out
        region_link = np.zeros(n + 1, dtype=bool)
        region_link[self.links[gone].ravel()] = True
        region_link[n] = False
        region = np.zeros(len(alive), dtype=bool)
        budget = int(np.count_nonzero(alive)) // 4
        while True:
            cand = self._flows_on(np.flatnonzero(region_link[:n]))
            cand = cand[alive[cand]]
            new = cand[~region[cand]]
            lk = self.links[new]
            certified = (~region_link[lk] & (sat[lk] == rate[new][:, None])).any(axis=1)
            grow = new[~certified]
            if not grow.size:
                break
            region[grow] = True
            region_link[self.links[grow].ravel()] = True
            region_link[n] = False
            if np.count_nonzero(region) > budget:
                return None  # most of the cluster: a whole max-min costs less
        rl = np.flatnonzero(region_link[:n])
        local = np.full(n + 1, -1, dtype=np.int32)
        local[rl] = np.arange(len(rl))
        ll = local[self.links[cand]]
        inc_f, slot = np.nonzero(ll >= 0)
        inc_l = ll[inc_f, slot]
        w = self.weight[cand][inc_f]
        users = np.bincount(inc_l, weights=w, minlength=len(rl))
        remaining = self.cap[rl].copy()
        share = np.full(len(rl), np.inf)
        loaded = users > 0
        share[loaded] = np.maximum(remaining[loaded], 0.0) / users[loaded]
        outside = ~region[cand]
        old = rate[cand]
        rising = np.ones(len(cand), dtype=bool)
        new_rate = np.full(len(cand), np.inf)
        sat_new = np.full(len(rl), np.inf)
        p, last = 0, -np.inf
        while rising.any():
            while p < len(levels) and levels[p] <= last:
                p += 1
            x_region = float(share.min()) if len(share) else np.inf
            x_level = float(levels[p]) if p < len(levels) else np.inf
            fair = min(x_region, x_level)
            if fair == np.inf:
                return None
            limit = fair * (1 + 1e-9) + 1e-300
            if x_level != fair and x_level <= limit:
                return None  # links outside the region could freeze within the tolerance
            mark = share <= limit
            if (share[mark] != fair).any():
                return None  # a merge: the trace's terms no longer hold
            on_marked = np.zeros(len(cand), dtype=bool)
            on_marked[inc_f[mark[inc_l]]] = True
            hit = rising & (on_marked | (outside & (old == fair)))
            if (hit & outside & (old != fair)).any():
                return None  # a certified flow frozen off its rate
            new_rate[hit] = fair
            sat_new[mark] = fair
            h = hit[inc_f]
            g = np.bincount(inc_l[h], weights=w[h], minlength=len(rl))
            ch = np.flatnonzero(g)
            remaining[ch] -= g[ch] * fair
            users[ch] -= g[ch]
            u, left = users[ch], remaining[ch]
            share[ch] = np.where(u > 0, np.maximum(left, 0.0) / np.where(u > 0, u, 1.0), np.inf)
            rising &= ~hit
            last = fair
        mine = cand[~outside]
        out[mine] = new_rate[~outside]
        sat = sat.copy()
        sat[rl] = sat_new
        fresh = new_rate[~outside]
        self.state = (alive.copy(), out, sat, _sorted_unique(np.concatenate([levels, fresh[np.isfinite(fresh)]])))
        return out
