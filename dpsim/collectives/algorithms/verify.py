"""Execute a :class:`~dpsim.algorithms.base.Schedule` symbolically (tests and debugging).

Every endpoint holds, per chunk, a multiset of the ranks whose data it has summed. A
reducing send adds the sender's multiset to the receiver's, a copy replaces it. At the
end an all-reduce must leave every rank with every chunk summed over all ranks exactly
once; reduce-scatter must leave each chunk complete at its owner; all-gather and
broadcast must leave every rank with every chunk exactly as its owner had it.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from dpsim.collectives.algorithms.base import Schedule


def execute(schedule: Schedule, op: str, ranks: list[int]) -> dict[int, dict[int, Counter]]:
    """Run ``schedule`` and return ``state[endpoint][chunk]`` (contributions)."""
    state: dict[int, dict[int, Counter]] = defaultdict(dict)
    for r in ranks:
        for ch in range(schedule.n_chunks):
            if op in ("all_reduce", "reduce_scatter"):
                state[r][ch] = Counter({r: 1})
            elif schedule.owners.get(ch) == r:
                state[r][ch] = Counter({r: 1})
    for step in schedule.steps:
        # Sends of one step read the state before the step (they are concurrent).
        before = {e: {ch: Counter(v) for ch, v in chunks.items()} for e, chunks in state.items()}
        for s in step:
            for ch in s.chunks:
                if ch not in before.get(s.src, {}):
                    raise AssertionError(f"endpoint {s.src} sends chunk {ch} it does not hold")
                data = before[s.src][ch]
                if s.reduce and ch in state[s.dst]:
                    state[s.dst][ch] = state[s.dst][ch] + data
                else:
                    state[s.dst][ch] = Counter(data)
    return state


def check(schedule: Schedule, op: str, ranks: list[int]) -> None:
    """Raise AssertionError unless ``schedule`` computes ``op`` over ``ranks``."""
    state = execute(schedule, op, ranks)
    everyone = Counter({r: 1 for r in ranks})
    if op == "all_reduce":
        for r in ranks:
            for ch in range(schedule.n_chunks):
                assert state[r].get(ch) == everyone, (r, ch, state[r].get(ch))
    elif op == "reduce_scatter":
        assert set(schedule.owners) == set(range(schedule.n_chunks))
        for ch, r in schedule.owners.items():
            assert state[r].get(ch) == everyone, (r, ch, state[r].get(ch))
    else:  # all_gather, broadcast: copies of the owner's chunk everywhere
        for r in ranks:
            for ch in range(schedule.n_chunks):
                owner = schedule.owners[ch]
                assert state[r].get(ch) == Counter({owner: 1}), (r, ch, state[r].get(ch))


def pair_bytes(schedule: Schedule) -> dict[tuple[int, int], float]:
    """Bytes (as a fraction of S) each (source, destination) pair moves in ``schedule``."""
    out: dict[tuple[int, int], float] = defaultdict(float)
    for step in schedule.steps:
        for s in step:
            out[(s.src, s.dst)] += s.fraction
    return dict(out)


def plan_pair_bytes(plan) -> dict[tuple[int, int], float]:
    """Bytes (as a fraction of S) each pair moves according to ``plan``."""
    out: dict[tuple[int, int], float] = defaultdict(float)
    for ph in plan.phases:
        for s, d, f in zip(ph.src.tolist(), ph.dst.tolist(), ph.fraction.tolist()):
            out[(s, d)] += f * ph.repeat
    return dict(out)
