"""Recursive halving-doubling (Rabenseifner): log2 N steps each way.

Reduce-scatter by recursive halving: at step s (s = 0..m-1, P = 2**m ranks) every rank
exchanges half of what it still holds with the rank at distance 2**s and reduces,
S/2, S/4, ... S/P. All-gather by recursive doubling mirrors it (S/P ... S/2). Ranks are
in node-major order and distances *grow*, so the big early exchanges stay inside a
server and only the small late ones cross the network (the same per-server network
bytes as a ring, in log2 steps). A non-power-of-two all-reduce folds the N - P extra
ranks into their partners first and hands them the result at the end (two extra
full-size steps); reduce-scatter and all-gather need a power of two.
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
from dpsim.errors import ConfigError

OPS = ("all_reduce", "reduce_scatter", "all_gather")


def _power(n: int) -> int:
    return 1 << (n.bit_length() - 1)


class HalvingDoubling:
    """Rabenseifner's recursive halving reduce-scatter + recursive doubling all-gather."""

    name = "halving_doubling"
    ops = OPS

    def supports(self, op: str, c: Cluster) -> bool:
        return op in OPS and (op == "all_reduce" or c.n_ranks == _power(c.n_ranks))

    def plan(self, op: str, c: Cluster) -> Plan:
        check_op(op, OPS, self.name)
        if not self.supports(op, c):
            raise ConfigError(f"--algo: halving_doubling {op} needs a power-of-two number of ranks, got {c.n_ranks}")
        n = c.n_ranks
        p = _power(n)
        m = p.bit_length() - 1
        ranks = np.arange(p)
        phases: list[Phase] = []
        intra = inter = 0

        def add(src_r, dst_r, frac, name):
            nonlocal intra, inter
            src, dst = c.rank_index(src_r), c.rank_index(dst_r)
            phases.append(Phase(src=src, dst=dst, fraction=np.full(len(src), frac), name=name))
            crosses = bool(((np.asarray(src_r) // c.gpus_per_node) != (np.asarray(dst_r) // c.gpus_per_node)).any())
            if crosses:
                inter += 1
            else:
                intra += 1

        extra = np.arange(p, n)
        if op == "all_reduce" and len(extra):
            add(extra, extra - p, 1.0, "fold extra ranks")
        if op in ("all_reduce", "reduce_scatter"):
            for s in range(m):
                add(ranks, ranks ^ (1 << s), 1.0 / (2 << s), f"halving, distance {1 << s}")
        if op in ("all_reduce", "all_gather"):
            for s in range(m - 1, -1, -1):
                add(ranks, ranks ^ (1 << s), 1.0 / (2 << s), f"doubling, distance {1 << s}")
        if op == "all_reduce" and len(extra):
            add(extra - p, extra, 1.0, "unfold extra ranks")
        return Plan(algorithm=self.name, op=op, phases=tuple(phases), intra_hops=intra, inter_hops=inter)

    def schedule(self, op: str, c: Cluster) -> Schedule:
        check_op(op, OPS, self.name)
        n = c.n_ranks
        p = _power(n)
        m = p.bit_length() - 1
        idx = lambda r: int(c.rank_index(r))  # noqa: E731
        frac = 1.0 / p
        steps: list[list[Send]] = []
        extra = range(p, n)
        every = tuple(range(p))
        if op == "all_reduce" and len(extra):
            steps.append([Send(src=idx(r), dst=idx(r - p), chunks=every, chunk_fraction=frac, reduce=True)
                          for r in extra])
        # held[r]: chunks rank r is responsible for; after halving, chunk r.
        held = {r: set(every) for r in range(p)}
        if op in ("all_reduce", "reduce_scatter"):
            for s in range(m):
                bit = 1 << s
                step = []
                new_held = {}
                for r in range(p):
                    partner = r ^ bit
                    give = tuple(sorted(ch for ch in held[r] if (ch & bit) != (r & bit)))
                    step.append(Send(src=idx(r), dst=idx(partner), chunks=give, chunk_fraction=frac, reduce=True))
                    new_held[r] = {ch for ch in held[r] if (ch & bit) == (r & bit)}
                held = new_held
                steps.append(step)
        else:
            held = {r: {r} for r in range(p)}
        if op in ("all_reduce", "all_gather"):
            for s in range(m - 1, -1, -1):
                bit = 1 << s
                step = []
                new_held = {}
                for r in range(p):
                    step.append(Send(src=idx(r), dst=idx(r ^ bit), chunks=tuple(sorted(held[r])),
                                     chunk_fraction=frac, reduce=False))
                    new_held[r] = held[r] | held[r ^ bit]
                held = new_held
                steps.append(step)
        if op == "all_reduce" and len(extra):
            steps.append([Send(src=idx(r - p), dst=idx(r), chunks=every, chunk_fraction=frac, reduce=False)
                          for r in extra])
        return Schedule(steps=steps, n_chunks=p, owners={r: idx(r) for r in range(p)})
