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
