"""NVLink SHARP: reductions inside the NVSwitch (NCCL's ``NVLS`` and ``NVLS_TREE``).

NVLS (one NVLink domain: a server, or servers joined by an NVLink switch tier, where
NCCL treats the domain as one node): each GPU issues ``multimem.ld_reduce`` for its shard of S/g, so the
switch reads every GPU's copy of that shard and returns the sum (per GPU: S up, S/g
down), then ``multimem.st`` writes the shard once and the switch multicasts it to all
g GPUs (S/g up, S down). Per GPU S(1 + 1/g) each way instead of the ring's
2(g-1)/g S, which is why NVLS beats the ring on NVSwitch systems; NCCL's own model
derates the switch path by ``nvlsEfficiency`` (0.85 on Hopper, 0.74 on Blackwell,
NVIDIA/nccl src/graph/tuning.cc@5067397), applied here to those flows.

NVLS_TREE (several servers): NVLS reduce-scatter inside each server, then GPU *l* of
every server all-reduces shard *l* with the same-index GPUs of the other servers over
the double binary tree (two halves, two trees), then NVLS all-gather. A server sends
S across the network per direction, whatever the server count.
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

NVLS_OPS = ("all_reduce", "reduce_scatter", "all_gather")
NVLS_TREE_OPS = ("all_reduce",)

# (GPU -> switch, switch -> GPU) bytes per GPU as a fraction of S, times g for the shard part.
_SWITCH_TRAFFIC = {
    "all_reduce": (lambda g: 1 + 1 / g, lambda g: 1 + 1 / g),
    "reduce_scatter": (lambda g: 1.0, lambda g: 1 / g),
    "all_gather": (lambda g: 1 / g, lambda g: 1.0),
}


def switch_fractions(op: str, shards: int) -> tuple[float, float]:
    """Bytes one GPU sends into the switch and receives from it, as fractions of S, for NVLS
    over ``shards`` shards (the GPUs that reduce together)."""
    up, down = _SWITCH_TRAFFIC[op]
    return up(shards), down(shards)


def _switch_flows(c: Cluster, op: str, nodes: np.ndarray, shards: int | None = None):
    """GPU <-> NVSwitch flows of NVLS. Across an NVLink switch tier the reduction happens in
    the tier's switches, reached through the server's own; a server's link into the tier
    carries its GPUs' traffic at their combined rate, so the GPU links are what bind (with the
    tier degraded its link binds: :meth:`~dpsim.collectives.plan_cost.PlanEvaluator._nvls_tier_bound`)."""
    g = c.gpus_per_node
    shards = shards or g
    up, down = switch_fractions(op, shards)
    gpus = c.index(nodes[:, None], np.arange(g)[None, :]).ravel()
    hubs = np.repeat(-1 - nodes, g)
    src = np.concatenate([gpus, hubs])
    dst = np.concatenate([hubs, gpus])
    frac = np.concatenate([np.full(len(gpus), up), np.full(len(gpus), down)])
    return src, dst, frac


class Nvls:
    """NVLS inside one NVLink domain."""

    name = "nvls"
    ops = NVLS_OPS

    def supports(self, op: str, c: Cluster) -> bool:
        return op in NVLS_OPS and c.nvls and c.single_domain and c.n_ranks > 1

    def plan(self, op: str, c: Cluster) -> Plan:
        check_op(op, NVLS_OPS, self.name)
        src, dst, frac = _switch_flows(c, op, np.arange(c.n_nodes), shards=c.n_ranks)
        phase = Phase(src=src, dst=dst, fraction=frac, name="in-switch reduction")
        return Plan(algorithm=self.name, op=op, phases=(phase,), intra_hops=1, inter_hops=0,
                    nvls_flows=np.ones(len(src), dtype=bool))

    def schedule(self, op: str, c: Cluster) -> Schedule:
        check_op(op, NVLS_OPS, self.name)
        if c.n_nodes > 1:
            raise NotImplementedError("explicit NVLS schedules are spelled out for one server")
        g = c.gpus_per_node
        gpus = [int(c.index(0, l)) for l in range(g)]
        hub = -1
        every = tuple(range(g))
        frac = 1.0 / g
        steps: list[list[Send]] = []
        if op in ("all_reduce", "reduce_scatter"):
            steps.append([Send(src=x, dst=hub, chunks=every, chunk_fraction=frac, reduce=True) for x in gpus])
            steps.append([Send(src=hub, dst=x, chunks=(l,), chunk_fraction=frac, reduce=False)
                          for l, x in enumerate(gpus)])
        if op in ("all_reduce", "all_gather"):
            steps.append([Send(src=x, dst=hub, chunks=(l,), chunk_fraction=frac, reduce=False)
                          for l, x in enumerate(gpus)])
            steps.append([Send(src=hub, dst=x, chunks=every, chunk_fraction=frac, reduce=False) for x in gpus])
        return Schedule(steps=steps, n_chunks=g, owners={l: gpus[l] for l in range(g)})


class NvlsTree:
    """NVLS inside servers plus a double binary tree across them."""

    name = "nvls_tree"
    ops = NVLS_TREE_OPS

    def supports(self, op: str, c: Cluster) -> bool:
        return op in NVLS_TREE_OPS and c.nvls and c.n_nodes > 1 and not c.single_domain and c.gpus_per_node > 1

    def plan(self, op: str, c: Cluster) -> Plan:
        check_op(op, NVLS_TREE_OPS, self.name)
        g, n = c.gpus_per_node, c.n_nodes
        nodes = np.arange(n)
        s1, d1, f1 = _switch_flows(c, op, nodes)
        src, dst, frac = [s1], [d1], [f1]
        trees = dtree_parents(n)
        for parent in trees:
            child = nodes[parent >= 0]
            for l in range(g):
                src += [c.index(child, l), c.index(parent[child], l)]
                dst += [c.index(parent[child], l), c.index(child, l)]
                frac += [np.full(2 * len(child), 1.0 / (2 * g))]
        src_a, dst_a, frac_a = np.concatenate(src), np.concatenate(dst), np.concatenate(frac)
        mask = np.zeros(len(src_a), dtype=bool)
        mask[:len(s1)] = True
        depth = max(tree_depth(t) for t in trees)
        phase = Phase(src=src_a, dst=dst_a, fraction=frac_a, name="NVLS + inter-server tree")
        return Plan(algorithm=self.name, op=op, phases=(phase,), intra_hops=1, inter_hops=2 * log2_floor(n),
                    channels=2 * g, pipeline_intra=2, pipeline_inter=2 * depth, nvls_flows=mask)

    def schedule(self, op: str, c: Cluster) -> Schedule:
        check_op(op, NVLS_TREE_OPS, self.name)
        g, n = c.gpus_per_node, c.n_nodes
        trees = dtree_parents(n)
        n_chunks = 2 * g                 # chunk 2l + t: half t of shard l
        frac = 1.0 / n_chunks
        every = tuple(range(n_chunks))
        steps: list[list[Send]] = []
        steps.append([Send(src=int(c.index(x, l)), dst=-1 - x, chunks=every, chunk_fraction=frac, reduce=True)
                      for x in range(n) for l in range(g)])
        steps.append([Send(src=-1 - x, dst=int(c.index(x, l)), chunks=(2 * l, 2 * l + 1), chunk_fraction=frac,
                           reduce=False) for x in range(n) for l in range(g)])
        depth = [np.array([_depth(t, x) for x in range(n)]) for t in trees]
        max_depth = max(int(d.max()) for d in depth)
        ups, downs = [], []
        for level in range(max_depth, 0, -1):
            up, down = [], []
            for t, parent in enumerate(trees):
                for x in np.flatnonzero(depth[t] == level):
                    p = int(parent[x])
                    for l in range(g):
                        up.append(Send(src=int(c.index(x, l)), dst=int(c.index(p, l)), chunks=(2 * l + t,),
                                       chunk_fraction=frac, reduce=True))
                        down.append(Send(src=int(c.index(p, l)), dst=int(c.index(x, l)), chunks=(2 * l + t,),
                                         chunk_fraction=frac, reduce=False))
            ups.append(up)
            downs.insert(0, down)
        steps += ups + downs
        steps.append([Send(src=int(c.index(x, l)), dst=-1 - x, chunks=(2 * l, 2 * l + 1), chunk_fraction=frac,
                           reduce=False) for x in range(n) for l in range(g)])
        steps.append([Send(src=-1 - x, dst=int(c.index(x, l)), chunks=every, chunk_fraction=frac, reduce=False)
                      for x in range(n) for l in range(g)])
        return Schedule(steps=steps, n_chunks=n_chunks)


def _depth(parent: np.ndarray, x: int) -> int:
    d = 0
    while parent[x] >= 0:
        x = int(parent[x])
        d += 1
    return d
