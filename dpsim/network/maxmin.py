"""Max-min fair sharing of links by concurrent flows (progressive filling)."""

from __future__ import annotations

from typing import Sequence

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
