"""Hierarchical (2-level ring) all-reduce: NVLink inside servers, one ring per rail across.

All-reduce = intra-server reduce-scatter (a ring over the g GPUs of each server,
g-1 steps of S/g) + inter-server all-reduce of each GPU's shard S/g with the
same-index GPUs of the other servers (one ring per rail, 2(n-1) steps of S/(g*n))
+ intra-server all-gather (g-1 steps of S/g). The phases run one after another (no
overlap), so the time is exactly the sum of the three rings: the golden case of the
tests. Each server sends only 2(n-1)/n * S across the network per direction, like a
flat ring, but every inter-server step is a rail-local hop. Reduce-scatter and
all-gather use the first two / last two phases.
"""

from __future__ import annotations

import numpy as np

from dpsim.collectives.algorithms.base import (
    Cluster,
    Phase,
    Plan,
    Schedule,
    Send,
    check_op,
)

OPS = ("all_reduce", "reduce_scatter", "all_gather")


class Hierarchical:
    """Intra-server ring + per-rail inter-server ring."""

    name = "hierarchical"
    ops = OPS

    def supports(self, op: str, c: Cluster) -> bool:
        return op in OPS

    def _intra(self, c: Cluster):
        n = c.n_nodes
        cyc = c.cycle(0)
        nodes = np.arange(n)[:, None]
        return c.index(nodes, cyc[None, :]).ravel(), c.index(nodes, np.roll(cyc, -1)[None, :]).ravel()

    def _inter(self, c: Cluster):
        g, n = c.gpus_per_node, c.n_nodes
        nodes, local = np.arange(n)[:, None], np.arange(g)[None, :]
        return c.index(nodes, local).ravel(), c.index((nodes + 1) % n, local).ravel()

    def plan(self, op: str, c: Cluster) -> Plan:
        check_op(op, OPS, self.name)
        g, n = c.gpus_per_node, c.n_nodes
        phases = []
        intra_steps = inter_steps = 0
        s_in, d_in = self._intra(c)
        s_x, d_x = self._inter(c)
        rs = op in ("all_reduce", "reduce_scatter")
        ag = op in ("all_reduce", "all_gather")
        intra = Phase(src=s_in, dst=d_in, fraction=np.full(len(s_in), 1.0 / g), repeat=g - 1,
                      name="intra-server ring")
        if rs and g > 1:
            phases.append(intra)
            intra_steps += g - 1
        if n > 1:
            steps = (2 if op == "all_reduce" else 1) * (n - 1)
            phases.append(Phase(src=s_x, dst=d_x, fraction=np.full(len(s_x), 1.0 / (g * n)), repeat=steps,
                                name="per-rail inter-server ring"))
            inter_steps += steps
        if ag and g > 1:
            phases.append(intra)
            intra_steps += g - 1
        return Plan(algorithm=self.name, op=op, phases=tuple(phases), intra_hops=intra_steps,
                    inter_hops=inter_steps)

    def schedule(self, op: str, c: Cluster) -> Schedule:
        check_op(op, OPS, self.name)
        g, n = c.gpus_per_node, c.n_nodes
        n_chunks = g * n                     # chunk l*n + j: part j of shard l
        frac = 1.0 / n_chunks
        shard = lambda l: tuple(l * n + j for j in range(n))
        rs = op in ("all_reduce", "reduce_scatter")
        ag = op in ("all_reduce", "all_gather")
        steps: list[list[Send]] = []
        cyc = [int(v) for v in c.cycle(0)]
        nxt = {cyc[p]: cyc[(p + 1) % g] for p in range(g)}
        pos = {v: p for p, v in enumerate(cyc)}
        if rs:
            for s in range(g - 1):
                steps.append([Send(src=int(c.index(x, i)), dst=int(c.index(x, nxt[i])),
                                   chunks=shard(cyc[(pos[i] - s - 1) % g]), chunk_fraction=frac, reduce=True)
                              for x in range(n) for i in range(g)])
            # Local GPU l now holds shard l summed over its server.
            for s in range(n - 1):
                steps.append([Send(src=int(c.index(x, l)), dst=int(c.index((x + 1) % n, l)),
                                   chunks=(l * n + (x - s - 1) % n,), chunk_fraction=frac, reduce=True)
                              for x in range(n) for l in range(g)])
        owners = {l * n + j: int(c.index(j, l)) for l in range(g) for j in range(n)}
        if ag:
            for s in range(n - 1):
                steps.append([Send(src=int(c.index(x, l)), dst=int(c.index((x + 1) % n, l)),
                                   chunks=(l * n + (x - s) % n,), chunk_fraction=frac, reduce=False)
                              for x in range(n) for l in range(g)])
            for s in range(g - 1):
                steps.append([Send(src=int(c.index(x, i)), dst=int(c.index(x, nxt[i])),
                                   chunks=shard(cyc[(pos[i] - s) % g]), chunk_fraction=frac, reduce=False)
                              for x in range(n) for i in range(g)])
        return Schedule(steps=steps, n_chunks=n_chunks, owners=owners)
