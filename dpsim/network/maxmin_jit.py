"""Max-min progressive filling compiled with numba, for the job mix's many group solves.

:func:`~dpsim.network.maxmin.max_min_sparse` spends most of a contended mix's time: tens of
thousands of solves of tens of thousands of flow-link incidences, each round a handful of numpy
passes over every incidence still rising. Compiled, a round touches only the links that saturate
and the flows they freeze (each link's flows and each flow's links are indexed once per solve).

The rounds are the same as numpy's, and so are the numbers, bit for bit, for whole-number weights
(flow counts, as the mix's classes have): every round's level is the least share
``max(capacity left, 0) / users`` over the loaded links, computed with the same operations; every
flow on a link whose share is within max-min's tolerance of it freezes at it; each link's capacity
left is lowered once per round by its frozen weight (a whole number, so summed exactly in any
order) times the level. ``tests/test_maxmin_jit.py`` checks that against numpy.

numba is optional (it is no dependency of dpsim): :func:`compiled` returns ``None`` without it,
and the mix then solves with numpy, at its pace, to the same results. Only the mix imports this
module, and only when it solves a group (``dpsim predict`` never loads numba).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Callable

import numpy as np


@lru_cache(maxsize=1)
def compiled() -> Callable | None:
    """:func:`max_min_whole` once numba has compiled it, or ``None`` where numba is not installed."""
    try:
        import numba
    except ImportError:
        return None
    fill = numba.njit(cache=True)(_fill)

    def max_min_whole(flow_of: np.ndarray, link_of: np.ndarray, capacity: np.ndarray, n_flows: int,
                      weight: np.ndarray) -> np.ndarray:
        """:func:`~dpsim.network.maxmin.max_min_sparse`'s rates for whole-number weights of at least 1
        (``weight`` per flow), bit for bit."""
        return fill(np.ascontiguousarray(flow_of, dtype=np.int64), np.ascontiguousarray(link_of, dtype=np.int64),
                    np.ascontiguousarray(capacity, dtype=np.float64), int(n_flows),
                    np.ascontiguousarray(weight, dtype=np.float64))

    return max_min_whole


def _fill(flow_of, link_of, capacity, n_flows, weight):  # pragma: no cover (compiled by numba)
    n_links = capacity.size
    m = flow_of.size
    rates = np.full(n_flows, np.inf)
    remaining = capacity.copy()
    users = np.zeros(n_links)
    by_flow = np.zeros(n_flows + 1, np.int64)
    by_link = np.zeros(n_links + 1, np.int64)
    for i in range(m):
        users[link_of[i]] += weight[flow_of[i]]
        by_flow[flow_of[i] + 1] += 1
        by_link[link_of[i] + 1] += 1
    for f in range(n_flows):
        by_flow[f + 1] += by_flow[f]
    for k in range(n_links):
        by_link[k + 1] += by_link[k]
    links_of_flow = np.empty(m, np.int64)
    flows_on_link = np.empty(m, np.int64)
    at_flow = by_flow[:-1].copy()
    at_link = by_link[:-1].copy()
    for i in range(m):
        f, k = flow_of[i], link_of[i]
        links_of_flow[at_flow[f]] = k
        at_flow[f] += 1
        flows_on_link[at_link[k]] = f
        at_link[k] += 1
    rising = np.ones(n_flows, np.bool_)
    loaded = np.empty(n_links, np.int64)
    n_loaded = 0
    for k in range(n_links):
        if users[k] > 0:
            loaded[n_loaded] = k
            n_loaded += 1
    share = np.empty(n_links)
    gone = np.zeros(n_links)
    touched = np.empty(n_links, np.int64)
    hit = np.empty(n_flows, np.int64)
    while n_loaded > 0:
        fair = np.inf
        for j in range(n_loaded):
            k = loaded[j]
            left = remaining[k]
            s = (left if left > 0.0 or left != left else 0.0) / users[k]  # np.maximum(left, 0.0) / users
            share[j] = s
            if s < fair:
                fair = s
        reach = fair * (1 + 1e-9) + 1e-300
        n_hit = 0
        for j in range(n_loaded):
            if share[j] <= reach:
                k = loaded[j]
                for p in range(by_link[k], by_link[k + 1]):
                    f = flows_on_link[p]
                    if rising[f]:
                        rising[f] = False
                        rates[f] = fair
                        hit[n_hit] = f
                        n_hit += 1
        n_touched = 0
        for h in range(n_hit):
            f = hit[h]
            w = weight[f]
            for p in range(by_flow[f], by_flow[f + 1]):
                k = links_of_flow[p]
                if gone[k] == 0.0:
                    touched[n_touched] = k
                    n_touched += 1
                gone[k] += w
        for t in range(n_touched):
            k = touched[t]
            remaining[k] -= gone[k] * fair
            users[k] -= gone[k]
            gone[k] = 0.0
        j = 0
        for i in range(n_loaded):
            k = loaded[i]
            if users[k] > 0:
                loaded[j] = k
                j += 1
        n_loaded = j
    return rates


def group_kernels() -> tuple[Callable, Callable] | None:
    """(:func:`_group_solve`, :func:`_alone_load`) compiled, or ``None`` where numba is not installed
    (looked up through :func:`compiled` on every call, so a run without numba is one without them)."""
    return None if compiled() is None else _group_kernels()


@lru_cache(maxsize=1)
def _group_kernels() -> tuple[Callable, Callable]:
    import numba

    return numba.njit(cache=True)(_group_solve), numba.njit(cache=True)(_alone_load)


def _alone_load(slots, lo, hi, link, value, n_links, over):  # pragma: no cover (compiled by numba)
    """Each slot's ``value`` added onto its ``link`` (``lo[s]:hi[s]``), the slots in order and each in
    its own order (as ``np.bincount`` of the joined arrays adds: the same sums), and whether a sum
    exceeds ``over``."""
    load = np.zeros(n_links)
    for s in slots:
        for e in range(lo[s], hi[s]):
            load[link[e]] += value[e]
    above = False
    for s in slots:
        for e in range(lo[s], hi[s]):
            if load[link[e]] > over[link[e]]:
                above = True
                break
        if above:
            break
    return load, above


def _group_solve(slots, cls_lo, cls_hi, c_start, c_link, weight, fraction, detached, fixed, u_lo, u_mid, u_hi,
                 u_link, u_weight, u_count, u_from, by_link, own_entry, own_min, cover, sh_lo, sh_hi, sh_class,
                 sh_link, capacity, n_shared, full_at, users, load, gone, jobs_on, at, pos, rates, rising, on_link,
                 hit, links, live, share, partial):  # pragma: no cover (compiled by numba)
    """A group of flow sets solved at once: the max-min rates of every class of the sets ``slots``
    (:func:`_fill`'s rounds, the same numbers), then each set's speed (``1 / max(fraction / rate)``),
    the first contested shared link on its first slowest class's route (-1: none), the shared links'
    load, and whether the set crosses a contested shared link.

    The sets are pooled. Set ``s`` owns classes ``cls_lo[s]:cls_hi[s]``; class ``c`` crosses links
    ``c_link[c_start[c]:c_start[c + 1]]`` in route order, links below ``n_shared`` shared by the sets,
    the others one set's own; ``detached`` classes cross no solved link and take their ``fixed`` rate.
    Set ``s``'s links once each are entries ``u_lo[s]:u_hi[s]`` (its shared links first, up to
    ``u_mid[s]``): entry ``e`` is link ``u_link[e]``, crossed ``u_count[e]`` times by classes of weights
    summing to ``u_weight[e]``, those classes ``by_link[u_from[e]:u_from[e] + u_count[e]]``; an own
    link ``k``'s entry is ``own_entry[k - n_shared]``. Its incidences on shared links are
    ``sh_class``/``sh_link`` ``[sh_lo[s]:sh_hi[s]]``, in incidence order.

    An own link's share before the first round is the set's alone: ``own_min[s]`` is the least of the
    set's, ``cover[s]`` the most any of its classes waits for (the largest over its classes of the least
    share on its own links). A set whose ``cover`` is within the first round's reach has every class
    frozen in it, by its own links (where the first round is the rounds' most work): its classes take
    the level, its weights leave the shared links, and its own links (none left loaded) are never
    visited. Only the other sets' classes are indexed and go on. Load adds in the order numpy's
    bincount of the sets' joined incidences adds it (the same sums). A shared link is contested when
    its load reaches ``capacity * full_at`` and two sets or more cross it. ``users``, ``load``,
    ``gone``, ``jobs_on`` and ``at`` are zero on entry and left so; the other scratch arrays are any
    content. Returns ``ok`` False (and nothing sound) where a set's slowest ratio is NaN (numpy's
    results then stand)."""
    n_sets = slots.size
    n_links = 0
    for s in slots:
        for e in range(u_lo[s], u_mid[s]):
            k = u_link[e]
            if users[k] == 0.0:  # (every class weighs 1 or more)
                links[n_links] = k
                n_links += 1
            users[k] += u_weight[e]
            jobs_on[k] += 1
    # The first round's level: the least share of a shared link or of a set's own links.
    first = np.inf
    for t in range(n_links):
        k = links[t]
        left = capacity[k]
        load[k] = left  # ``load`` holds the capacity left until the rounds end (then zero again)
        v = (left if left > 0.0 or left != left else 0.0) / users[k]  # np.maximum(left, 0.0) / users
        if v < first:
            first = v
    for s in slots:
        if own_min[s] < first:
            first = own_min[s]
    reach = first * (1 + 1e-9) + 1e-300
    n_shared_links = n_links
    n_part = 0
    n_classes = 0
    for s in slots:
        if cover[s] <= reach:
            for c in range(cls_lo[s], cls_hi[s]):
                rates[c] = first if c_start[c + 1] > c_start[c] else np.inf
            for e in range(u_lo[s], u_mid[s]):
                gone[u_link[e]] += u_weight[e]
            continue
        partial[n_part] = s
        n_part += 1
        n_classes += cls_hi[s] - cls_lo[s]
        for c in range(cls_lo[s], cls_hi[s]):
            rates[c] = np.inf
            rising[c] = True
        for e in range(u_mid[s], u_hi[s]):
            k = u_link[e]
            links[n_links] = k
            n_links += 1
            users[k] += u_weight[e]
            load[k] = capacity[k]
        for e in range(u_lo[s], u_mid[s]):
            at[u_link[e]] += u_count[e]  # (the shared link's incidences, until its start is known)
    total = 0
    for t in range(n_shared_links):
        k = links[t]
        n = at[k]
        at[k] = total
        pos[k] = total
        total += n
    for q in range(n_part):
        s = partial[q]
        for p in range(sh_lo[s], sh_hi[s]):
            k = sh_link[p]
            on_link[pos[k]] = sh_class[p]
            pos[k] += 1
    for t in range(n_links):
        live[t] = links[t]
    n_loaded = n_links
    round_one = True
    while n_loaded > 0:
        fair = np.inf
        for j in range(n_loaded):
            k = live[j]
            left = load[k]
            s = (left if left > 0.0 or left != left else 0.0) / users[k]  # np.maximum(left, 0.0) / users
            share[j] = s
            if s < fair:
                fair = s
        if round_one:
            fair = first  # (the least share may be a link of a set frozen whole, not among these)
            round_one = False
        reach = fair * (1 + 1e-9) + 1e-300
        n_hit = 0
        for j in range(n_loaded):
            if share[j] <= reach:
                k = live[j]
                if k < n_shared:
                    for p in range(at[k], pos[k]):
                        f = on_link[p]
                        if rising[f]:
                            rising[f] = False
                            rates[f] = fair
                            hit[n_hit] = f
                            n_hit += 1
                else:
                    e = own_entry[k - n_shared]
                    for p in range(u_from[e], u_from[e] + u_count[e]):
                        f = by_link[p]
                        if rising[f]:
                            rising[f] = False
                            rates[f] = fair
                            hit[n_hit] = f
                            n_hit += 1
        if 16 * n_hit < n_classes:
            for h in range(n_hit):
                f = hit[h]
                w = weight[f]
                for p in range(c_start[f], c_start[f + 1]):
                    gone[c_link[p]] += w
        else:  # most classes froze: in pool order, the incidences read in a row
            for q in range(n_part):
                s = partial[q]
                for f in range(cls_lo[s], cls_hi[s]):
                    if rates[f] == fair and not rising[f]:
                        w = weight[f]
                        for p in range(c_start[f], c_start[f + 1]):
                            gone[c_link[p]] += w
        # A frozen class's links are all loaded: lowering the live links that lost some covers them all.
        j = 0
        for i in range(n_loaded):
            k = live[i]
            g = gone[k]
            if g != 0.0:
                load[k] -= g * fair
                users[k] -= g
                gone[k] = 0.0
            if users[k] > 0:
                live[j] = k
                j += 1
        n_loaded = j
    for t in range(n_links):
        k = links[t]
        users[k] = 0.0
        load[k] = 0.0
        if k < n_shared:
            at[k] = 0
    # The shared links' load (own links are never contested), added in the sets' order, each in its
    # incidences' order.
    for s in slots:
        for p in range(sh_lo[s], sh_hi[s]):
            c = sh_class[p]
            load[sh_link[p]] += rates[c] * weight[c]
    speed = np.empty(n_sets)
    binding = np.full(n_sets, -1, np.int64)
    crosses = np.zeros(n_sets, np.bool_)
    ok = True
    for j in range(n_sets):
        s = slots[j]
        # The slowest class, the first of equals (numpy's maximum, then the first equal to it).
        top = -np.inf
        worst = -1
        for c in range(cls_lo[s], cls_hi[s]):
            if detached[c]:
                rates[c] = fixed[c]
            r = fraction[c] / rates[c]
            if r != r:
                worst = -2
                break
            if r > top or worst == -1:
                top = r
                worst = c
        if worst < 0:
            ok = False
            continue
        speed[j] = 1.0 / top
        for i in range(c_start[worst], c_start[worst + 1]):
            k = c_link[i]
            if k < n_shared and jobs_on[k] > 1 and load[k] >= capacity[k] * full_at:
                binding[j] = k
                break
        for e in range(u_lo[s], u_mid[s]):
            k = u_link[e]
            if jobs_on[k] > 1 and load[k] >= capacity[k] * full_at:
                crosses[j] = True
                break
    shared_load = np.zeros(n_shared)
    for t in range(n_links):
        k = links[t]
        if k < n_shared:
            shared_load[k] = load[k]
            load[k] = 0.0
            jobs_on[k] = 0
    return ok, speed, binding, shared_load, crosses
