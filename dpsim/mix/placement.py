"""Which cluster servers a job of a mix gets when it arrives (the servers free at that time).

Servers are numbered as the topology numbers them: a leaf group holds ``nodes_per_leaf``
consecutive servers and a block of tier *k* ``group_size`` consecutive blocks of the level
below (:func:`~dpsim.topology.fabric.design_group_sizes`), so every policy is arithmetic on
server numbers:

- ``packed``: the lowest-numbered free servers;
- ``spread``: one server per leaf group in turn (a job on many leaves: more uplink traffic);
- ``rail-aligned`` (rail-optimised fabrics only): whole free leaf groups first, so a job owns
  its rail leaves and its ring hops stay on them;
- ``topology-aware``: the smallest switch block that can hold the job, best fit (fewest
  switches between its servers), leaf groups with most free servers first inside it;
- ``nodes``: the servers the user names.

A job asking for servers that are taken or do not exist, or for more than are free, is
refused with one line (no queueing: a mix says when jobs start).
"""

from __future__ import annotations

import math

from dpsim import wording
from dpsim.errors import ConfigError
from dpsim.topology.fabric import design_group_sizes
from dpsim.topology.spec import nic_fabric


def block_sizes(spec, n_servers: int) -> tuple[int, ...]:
    """Servers per switch block at each level (leaf group, tier 1 block, ...) of ``spec``."""
    if not nic_fabric(spec.fabric):
        return (n_servers,)
    sizes, out = design_group_sizes(spec), []
    span = 1
    for g in sizes:
        span *= g
        out.append(span)
    return tuple(out)


def check_nodes(job, index: int, n_servers_wanted: int, total: int) -> None:
    """``job``'s own ``nodes`` list against its size and the cluster's ``total`` servers, named by its field path
    (``jobs[0].nodes``) as the rest of the mix's checks name theirs: "jobs 'a' at 0 s: nodes 5 does not exist"
    named no field."""
    if job.nodes is None:
        return
    where = f"jobs[{index}].nodes ({job.name})"
    if len(job.nodes) != n_servers_wanted:
        raise ConfigError(f"{where}: lists {wording.count(len(job.nodes), 'server')}; its "
                          f"{wording.count(job.gpus, 'GPU')} need {n_servers_wanted}")
    bad = [x for x in job.nodes if x >= total]
    if bad:
        raise ConfigError(f"{where}: server {bad[0]} does not exist; the cluster has servers 0..{total - 1}")


def place(job, n_servers_wanted: int, free: list[bool], spec, *, at_s: float, index: int) -> list[int]:
    """Servers for ``job`` (a :class:`~dpsim.mix.spec.JobSpec`, ``jobs[index]``) among ``free`` (one flag per
    cluster server), in rank order; :class:`ConfigError` when it cannot be placed."""
    n, total = n_servers_wanted, len(free)
    if job.nodes is not None:
        check_nodes(job, index, n, total)
        taken = [x for x in job.nodes if not free[x]]
        if taken:
            raise ConfigError(f"jobs[{index}].nodes ({job.name}) at {at_s:g} s: server {taken[0]} is already taken "
                              f"by another job (overlapping placement)")
        return list(job.nodes)
    where = f"jobs[{index}] ({job.name}) at {at_s:g} s"
    available = sum(free)
    if n > available:
        raise ConfigError(f"{where}: needs {wording.count(n, 'server')}, only {available} of {total} are free "
                          "(over-subscribed; start it later or shrink it)")
    blocks = block_sizes(spec, total)
    leaf = blocks[0]
    groups = [[s for s in range(g, min(g + leaf, total)) if free[s]] for g in range(0, total, leaf)]
    if job.placement == "packed":
        return [s for s in range(total) if free[s]][:n]
    if job.placement == "spread":
        out: list[int] = []
        depth = 0
        while len(out) < n:
            out += [g[depth] for g in groups if depth < len(g)][: n - len(out)]
            depth += 1
        return sorted(out)
    if job.placement == "rail-aligned":
        if spec.fabric is None or not getattr(spec.fabric, "rail_optimized", False):
            raise ConfigError(f"{where}: placement 'rail-aligned' needs a rail-optimised fabric "
                              "(fabric.rail_optimized: true); choose packed, spread or topology-aware")
        whole = [g for g in groups if len(g) == leaf]
        partial = sorted((g for g in groups if 0 < len(g) < leaf), key=len)
        out = [s for g in whole for s in g][:n]
        if len(out) < n:
            fits = [g for g in partial if len(g) >= n - len(out)]
            out += (fits[0] if fits else [s for g in reversed(partial) for s in g])[: n - len(out)]
        return sorted(out)
    assert job.placement == "topology-aware", job.placement
    for span in blocks + (math.inf,):
        span = total if span == math.inf else span
        cands = []
        for b in range(0, total, span):
            members = list(range(b // leaf, min(-(-(b + span) // leaf), len(groups))))
            count = sum(len(groups[g]) for g in members)
            if count >= n:
                cands.append((count, b, members))
        if cands:
            _, _, members = min(cands)
            ordered = sorted(members, key=lambda g: (-len(groups[g]), g))
            return sorted([s for g in ordered for s in groups[g]][:n])
    raise AssertionError("the whole cluster holds enough free servers")
