"""Ring: reduce-scatter then all-gather around one ring per channel (NCCL's ``RING``).

Channel *c* visits every server's GPUs in turn and leaves servers through different
GPUs and NICs than the other channels; hops between servers stay on one rail
(:func:`ring_order_indices`). All-reduce is 2(N-1) steps in which every rank sends
S/(N*k) to its successor on each of the k channels; reduce-scatter and all-gather
N-1 steps; broadcast a pipelined chain from rank 0 in slices of
:data:`dpsim.collectives.BROADCAST_SLICE_BYTES` per channel.
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
from dpsim.collectives.ops import ring_steps

OPS = ("all_reduce", "reduce_scatter", "all_gather", "broadcast")


def ring_order_indices(c: Cluster) -> list[np.ndarray]:
    """One ring per channel, as endpoint indices.

    Every hop between servers leaves from the NIC that the next server's entry GPU
    uses, so on a rail-optimised fabric it stays on its rail (one leaf, no spine), as
    NCCL's ring search arranges: with one NIC per GPU, channel *c* enters server *i* at
    local GPU ``(c - i) mod g`` and leaves from the GPU before it (each server still
    runs every rotation once over its g channels); with m >= 2 GPUs per NIC, channel
    *c* enters every server at GPU ``c*m + 1`` and leaves from GPU ``c*m``, both on NIC
    *c*. Either way every server carries the same intra-server flows. Positions are along
    the server's ring cycle (:meth:`Cluster.ring_cycle`: the GPUs in order on NVSwitch and
    PCIe servers, a Hamiltonian cycle of direct links on meshes), and a single server runs
    one ring per cycle.
    """
    g = c.gpus_per_node
    rings = []
    nodes = np.arange(c.n_nodes)[:, None]
    k = c.channels if c.n_nodes > 1 else c.intra_rings
    per_nic = g // c.nic_nodes if c.nic_nodes and c.n_nodes > 1 else 0
    for ch in range(k):
        cyc = c.ring_cycle(ch)
        if per_nic == 1:
            pos = (np.arange(g)[None, :] + ch - nodes) % g
        elif per_nic >= 2:
            pos = np.broadcast_to((np.arange(g) + ch * per_nic + 1) % g, (c.n_nodes, g))
        else:
            pos = np.broadcast_to((np.arange(g) + ch) % g, (c.n_nodes, g))
        rings.append((nodes * c.stride + cyc[pos]).ravel())
    return rings


def broadcast_chain(ring: np.ndarray, root: int = 0) -> np.ndarray:
    """``ring`` rotated to start at endpoint ``root``."""
    start = int(np.flatnonzero(ring == root)[0])
    return np.roll(ring, -start)


class Ring:
    """NCCL's ring algorithm."""

    name = "ring"
    ops = OPS

    def supports(self, op: str, c: Cluster) -> bool:
        return op in OPS

    def plan(self, op: str, c: Cluster) -> Plan:
        check_op(op, OPS, self.name)
        rings = ring_order_indices(c)
        k, n = len(rings), c.n_ranks
        src = np.concatenate(rings)
        dst = np.concatenate([np.roll(r, -1) for r in rings])
        nodes = c.n_nodes
        if op == "broadcast":
            # Each channel's ring, cut into a chain that starts at the root (rank 0).
            chains = [broadcast_chain(r) for r in rings]
            src = np.concatenate([ch[:-1] for ch in chains])
            dst = np.concatenate([ch[1:] for ch in chains])
            phase = Phase(src=src, dst=dst, fraction=np.full(len(src), 1.0 / k), name="pipelined chain")
            inter = nodes - 1
            return Plan(algorithm=self.name, op=op, phases=(phase,), intra_hops=(n - 1) - inter,
                        inter_hops=inter, channels=k, pipeline_intra=(n - 1) - inter, pipeline_inter=inter)
        s = ring_steps(op, n)
        phase = Phase(src=src, dst=dst, fraction=np.full(len(src), 1.0 / (n * k)), repeat=s,
                      name="ring step")
        inter = 0 if nodes == 1 else (2 * (nodes - 1) if op == "all_reduce" else nodes - 1)
        return Plan(algorithm=self.name, op=op, phases=(phase,), intra_hops=s - inter, inter_hops=inter,
                    channels=k)

    def schedule(self, op: str, c: Cluster) -> Schedule:
        check_op(op, OPS, self.name)
        rings = ring_order_indices(c)
        k, n = len(rings), c.n_ranks
        n_chunks = n * k
        frac = 1.0 / n_chunks
        steps_out: list[list[Send]] = []
        owners: dict[int, int] = {}
        if op == "broadcast":
            # Unpipelined: each channel forwards its share hop by hop from the root.
            rings = [broadcast_chain(r) for r in rings]
            for ch, ring in enumerate(rings):
                for i in range(n):
                    owners[ch * n + i] = int(ring[0])
            for hop in range(n - 1):
                steps_out.append([Send(src=int(r[hop]), dst=int(r[hop + 1]),
                                       chunks=tuple(ch * n + i for i in range(n)), chunk_fraction=frac,
                                       reduce=False) for ch, r in enumerate(rings)])
            return Schedule(steps=steps_out, n_chunks=n_chunks, owners=owners)
        # Chunk (ch, j): position j of channel ch's ring owns it after reduce-scatter.
        rs = op in ("all_reduce", "reduce_scatter")
        ag = op in ("all_reduce", "all_gather")
        if rs:
            for s in range(n - 1):
                step = []
                for ch, r in enumerate(rings):
                    for i in range(n):
                        # position i sends the partial of chunk (i - s - 1) mod n to i + 1
                        j = (i - s - 1) % n
                        step.append(Send(src=int(r[i]), dst=int(r[(i + 1) % n]), chunks=(ch * n + j,),
                                         chunk_fraction=frac, reduce=True))
                steps_out.append(step)
            for ch, r in enumerate(rings):
                for j in range(n):
                    owners[ch * n + j] = int(r[j])
        else:
            for ch, r in enumerate(rings):
                for j in range(n):
                    owners[ch * n + j] = int(r[j])
        if ag:
            for s in range(n - 1):
                step = []
                for ch, r in enumerate(rings):
                    for i in range(n):
                        j = (i - s) % n
                        step.append(Send(src=int(r[i]), dst=int(r[(i + 1) % n]), chunks=(ch * n + j,),
                                         chunk_fraction=frac, reduce=False))
                steps_out.append(step)
        return Schedule(steps=steps_out, n_chunks=n_chunks, owners=owners)
