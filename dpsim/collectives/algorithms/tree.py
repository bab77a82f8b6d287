"""Double binary tree all-reduce (NCCL's ``TREE``): latency ~ log2 of the servers.

Inside a server the GPUs form a chain whose head (the GPU of the channel's NIC) talks
to the other servers; across servers the heads form NCCL's double binary tree
(:func:`~dpsim.algorithms.base.dtree_parents`): even channels use the first tree, odd
channels the second, so every server is an inner node in one tree and a leaf in the
other. Reduction flows up (chain to head, child head to parent head) while the result
flows down, both pipelined in chunks: every tree and chain edge carries its channel's
share of S once in each direction, all at once, and the first chunk pays a pipeline
fill through 2(g-1) chain hops and 2*depth tree hops.
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
    dtree_parents,
    log2_floor,
    tree_depth,
)

OPS = ("all_reduce",)


def tree_channels(c: Cluster) -> int:
    """Channels of the double tree: the cluster's channels, made even (two trees)."""
    if c.n_nodes == 1:
        return 1
    k = max(1, c.channels)
    return k if k % 2 == 0 else 2 * k


def chain(c: Cluster, channel: int) -> np.ndarray:
    """Local GPUs of a server in chain order for ``channel``: the head first, then along the
    server's ring cycle (NVLink hops on a mesh)."""
    g = c.gpus_per_node
    head = c.head(channel % max(1, c.channels)) if c.n_nodes > 1 else 0
    cyc = c.ring_cycle(channel)
    start = int(np.flatnonzero(cyc == head)[0])
    return cyc[(np.arange(g) + start) % g]


class Tree:
    """NCCL's double binary tree."""

    name = "tree"
    ops = OPS

    def supports(self, op: str, c: Cluster) -> bool:
        return op in OPS

    def plan(self, op: str, c: Cluster) -> Plan:
        check_op(op, OPS, self.name)
        k = tree_channels(c)
        g, n = c.gpus_per_node, c.n_nodes
        trees = dtree_parents(n)
        nodes = np.arange(n)
        src, dst = [], []
        for ch in range(k):
            order = chain(c, ch)
            if g > 1:
                lo = c.index(nodes[:, None], order[None, :-1]).ravel()
                hi = c.index(nodes[:, None], order[None, 1:]).ravel()
                src += [hi, lo]      # reduce up the chain, broadcast down
                dst += [lo, hi]
            if n > 1:
                parent = trees[ch % 2]
                child = nodes[parent >= 0]
                h = order[0]
                src += [c.index(child, h), c.index(parent[child], h)]
                dst += [c.index(parent[child], h), c.index(child, h)]
        s, d = np.concatenate(src), np.concatenate(dst)
        phase = Phase(src=s, dst=d, fraction=np.full(len(s), 1.0 / k), name="pipelined tree")
        depth = max(tree_depth(t) for t in trees) if n > 1 else 0
        return Plan(algorithm=self.name, op=op, phases=(phase,), intra_hops=2 * (g - 1),
                    inter_hops=2 * log2_floor(n), channels=k,
                    pipeline_intra=2 * (g - 1), pipeline_inter=2 * depth)

    def schedule(self, op: str, c: Cluster) -> Schedule:
        check_op(op, OPS, self.name)
        k = tree_channels(c)
        g, n = c.gpus_per_node, c.n_nodes
        trees = dtree_parents(n)
        frac = 1.0 / k
        up: list[list[Send]] = []
        down: list[list[Send]] = []
        # Chain reduce (tail to head) in every server, one hop per step.
        for i in range(g - 1, 0, -1):
            step = []
            for ch in range(k):
                order = chain(c, ch)
                for x in range(n):
                    step.append(Send(src=int(c.index(x, order[i])), dst=int(c.index(x, order[i - 1])),
                                     chunks=(ch,), chunk_fraction=frac, reduce=True))
            up.append(step)
        # Tree reduce across servers, deepest heads first; then broadcast back.
        if n > 1:
            depths = [np.array([_depth(t, x) for x in range(n)]) for t in trees]
            max_depth = max(int(d.max()) for d in depths)
            for level in range(max_depth, 0, -1):
                step, back = [], []
                for ch in range(k):
                    t = ch % 2
                    h = chain(c, ch)[0]
                    for x in np.flatnonzero(depths[t] == level):
                        p = int(trees[t][x])
                        step.append(Send(src=int(c.index(x, h)), dst=int(c.index(p, h)), chunks=(ch,),
                                         chunk_fraction=frac, reduce=True))
                        back.append(Send(src=int(c.index(p, h)), dst=int(c.index(x, h)), chunks=(ch,),
                                         chunk_fraction=frac, reduce=False))
                up.append(step)
                down.insert(0, back)
        for i in range(g - 1):
            step = []
            for ch in range(k):
                order = chain(c, ch)
                for x in range(n):
                    step.append(Send(src=int(c.index(x, order[i])), dst=int(c.index(x, order[i + 1])),
                                     chunks=(ch,), chunk_fraction=frac, reduce=False))
            down.append(step)
        return Schedule(steps=up + down, n_chunks=k)


def _depth(parent: np.ndarray, x: int) -> int:
    d = 0
    while parent[x] >= 0:
        x = int(parent[x])
        d += 1
    return d
