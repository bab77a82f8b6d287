"""Goodput by Monte Carlo: failures, restarts and checkpoints over a whole training run (``dpsim goodput``).
"""

from __future__ import annotations

import heapq
import math
import typing
from dataclasses import field, replace
from typing import Sequence

import numpy as np

from dpsim.errors import ConfigError
from dpsim.frozen import frozen_dataclass
from dpsim.limits import MAX_ELASTIC_EVENTS, MAX_FAILURES_PER_RUN, MAX_GOODPUT_FAILURES, MIN_CHECKPOINT_INTERVAL_S
from dpsim.plan.reliability import (
    COMPONENTS,
    POLICIES,
    TrainingJob,
    daly_interval_s,
    expected_wall_time_s,
    model_optimum_s,
    young_interval_s,
)
from dpsim.stats import mean_confidence_interval

# ----------------------------------------------------------------------------- simulation

@frozen_dataclass
class RunOutcome:
    """One simulated training run."""

    wall_s: float
    """Wall-clock time from start to the end of the work."""
    work_s: float
    """Useful work done: failure-free time at full size."""
    lost_s: float
    """Training time thrown away by failures (wall seconds)."""
    checkpoint_s: float
    """Time spent writing checkpoints (completed or interrupted)."""
    restart_s: float
    """Time spent restarting (completed or interrupted)."""
    down_s: float
    """Time spent waiting for replacement nodes, nothing running."""
    reduced_s: float
    """Time trained on fewer nodes than the full job (``shrink``)."""
    failures: int
    """Failures during the run."""
    failures_by_component: dict[str, int]
    """Failures per component class."""

    @property
    def goodput(self) -> float:
        """Useful work / wall time."""
        return self.work_s / self.wall_s


def simulate_run(job: TrainingJob, seed: int) -> RunOutcome:
    """One run of ``job``: a direct event simulation (training segments, checkpoints, failures).

    Candidate failures arrive at the full job's rate on the clock of *exposed* time (time
    spent training, writing or restarting); a candidate striking a job of n < N nodes
    is real with probability rate(n)/rate(N) (thinning). Every candidate has its three draws
    (:class:`_Streams`: time, thinning, class), so runs with one seed see the same failure
    sequence whatever the interval or policy (common random numbers: comparisons are sharp).
    This is the reference the fast path (:func:`_simulate_lanes`) is tested against.
    """
    cluster, ck = job.cluster, job.checkpoint
    n_full = cluster.n_nodes
    full_rates = cluster.rates_per_s(job.rates)
    rate_full = sum(full_rates.values())
    tau, delta, restart = ck.interval_s, ck.write_s, ck.restart_s
    shrink = job.policy == "shrink"

    st = dict(t=0.0, e=0.0, n=n_full, lost=0.0, ckpt=0.0, rst=0.0, down=0.0, reduced=0.0)
    by_class = {c: 0 for c in COMPONENTS}
    returns: list[float] = []
    stream = _Streams([seed], rate_full)
    ptr = [0]

    def strike(length: float) -> float | None:
        """Exposed time of the first real failure in the next ``length`` of exposure, if any."""
        end = st["e"] + length
        while True:
            stream.ensure(ptr[0])
            c = float(stream.times[0, ptr[0]])
            if not c < end:
                return None
            u_thin, u_class = float(stream.u_thin[0, ptr[0]]), float(stream.u_class[0, ptr[0]])
            ptr[0] += 1
            rates = full_rates if st["n"] == n_full else cluster.rates_per_s(job.rates, st["n"])
            total = sum(rates.values())
            if u_thin * rate_full < total:
                acc = 0.0
                for name in COMPONENTS:
                    acc += rates[name]
                    if u_class * total < acc:
                        break
                by_class[name] += 1
                return c

    def elapse(dt: float, exposed: bool = True) -> None:
        st["t"] += dt
        if exposed:
            st["e"] += dt
        if st["n"] < n_full:
            st["reduced"] += dt if exposed else 0.0

    def fail_and_restart() -> None:
        """After a failure: lose a node, get it back or go on without it, restart (may fail again)."""
        while True:
            if shrink:
                st["n"] -= 1
                heapq.heappush(returns, st["t"] + job.replace_s)
                while st["n"] < job.training_nodes_floor:
                    back = heapq.heappop(returns)
                    if back > st["t"]:
                        st["down"] += back - st["t"]
                        elapse(back - st["t"], exposed=False)
                    st["n"] += 1
            else:
                st["down"] += job.replace_s
                elapse(job.replace_s, exposed=False)
            f = strike(restart)
            if f is None:
                st["rst"] += restart
                elapse(restart)
                return
            st["rst"] += f - st["e"]
            elapse(f - st["e"])

    saved = 0.0
    while True:
        speed = st["n"] // job.replica_nodes * job.replica_nodes / n_full  # whole replicas train
        remaining = (job.work_s - saved) / speed
        final = remaining <= tau * (1 + 1e-12)
        seg = remaining if final else tau
        length = seg + (0.0 if final else delta)
        f = strike(length)
        if f is None:
            elapse(length)
            if final:
                break
            saved += seg * speed
            st["ckpt"] += delta
            if shrink and st["n"] < n_full and returns and returns[0] <= st["t"]:
                # Replacements have arrived: rejoin them at this checkpoint (one restart).
                while returns and returns[0] <= st["t"] and st["n"] < n_full:
                    heapq.heappop(returns)
                    st["n"] += 1
                g = strike(restart)
                if g is None:
                    st["rst"] += restart
                    elapse(restart)
                else:
                    st["rst"] += g - st["e"]
                    elapse(g - st["e"])
                    fail_and_restart()
            continue
        dt = f - st["e"]
        st["lost"] += min(dt, seg)
        st["ckpt"] += max(0.0, dt - seg)
        elapse(dt)
        fail_and_restart()
    return RunOutcome(
        wall_s=st["t"], work_s=job.work_s, lost_s=st["lost"], checkpoint_s=st["ckpt"], restart_s=st["rst"],
        down_s=st["down"], reduced_s=st["reduced"], failures=sum(by_class.values()),
        failures_by_component=by_class,
    )


# ----------------------------------------------------------------------------- the fast path
#
# simulate_run plays a run event by event: every checkpoint segment of every run (a 54-day run
# with a 3-minute interval has 20,000 of them). The fast path below plays the same runs with
# the same random draws (candidate failures are drawn exactly as simulate_run draws them, one
# stream per seed, shared by every job that has the same failure rate: common random numbers)
# but jumps from event to event: between two failures a run goes through whole segments, so
# the number that fit is one division. The ``wait`` policy is played for every run of every
# job at once with numpy (one loop step per failure, whatever the runs); ``shrink``, whose
# speed and failure rate change with the nodes left, run by run. tests/test_reliability.py
# checks both against simulate_run run for run.


class _Streams:
    """Candidate failures of every seed: exposed times of a Poisson process at ``rate``, each
    with a thinning draw and a class draw, from ``numpy.random.default_rng(seed)``, drawn in
    blocks as runs need them (the same values however they are grown)."""

    BLOCK = 256

    def __init__(self, seeds: list[int], rate: float):
        self.rate = rate
        self.rngs = [np.random.default_rng(s) for s in seeds]
        self.last = np.zeros(len(seeds))
        self.times = np.zeros((len(seeds), 0))
        self.u_thin = np.zeros((len(seeds), 0))
        self.u_class = np.zeros((len(seeds), 0))

    def grow(self, blocks: int) -> None:
        """Draw ``blocks`` more blocks of candidates for every seed."""
        k = blocks * self.BLOCK
        times, u_thin, u_class = [], [], []
        for i, rng in enumerate(self.rngs):
            for _ in range(blocks):  # block by block: the same draws whatever the growth steps
                gaps = rng.exponential(1.0 / self.rate, self.BLOCK) if self.rate > 0 else np.full(self.BLOCK, np.inf)
                u = rng.random((2, self.BLOCK))
                t = np.cumsum(np.concatenate([[self.last[i]], gaps]))[1:]
                self.last[i] = t[-1]
                times.append(t)
                u_thin.append(u[0])
                u_class.append(u[1])
        shape = (len(self.rngs), k)
        reorder = lambda parts: np.array(parts).reshape(len(self.rngs), blocks, self.BLOCK).reshape(shape)  # noqa: E731
        self.times = np.concatenate([self.times, reorder(times)], axis=1)
        self.u_thin = np.concatenate([self.u_thin, reorder(u_thin)], axis=1)
        self.u_class = np.concatenate([self.u_class, reorder(u_class)], axis=1)

    def ensure(self, k: int) -> None:
        """At least ``k + 1`` candidates per seed."""
        if k >= self.times.shape[1]:
            need = -(-(k + 1 - self.times.shape[1]) // self.BLOCK)
            self.grow(max(need, self.times.shape[1] // self.BLOCK, 1))


def _simulate_lanes(jobs: list[TrainingJob], seeds: list[int], streams: _Streams) -> list[list[RunOutcome]]:
    """Every run of every job at once (lanes = jobs x seeds), one numpy step per event of a run.

    The same rules as :func:`simulate_run`, event by event but not segment by segment: a run in
    training goes through as many whole segments as fit before its next real failure, the end of
    the work or (``shrink``) the first checkpoint at which a replacement can rejoin. Replacements
    come back in the order they were asked for (the same wait after every failure), so each
    run's pending returns are a queue.
    """
    nj, ns = len(jobs), len(seeds)
    lane_job = np.repeat(np.arange(nj), ns)
    lane_seed = np.tile(np.arange(ns), nj)
    n_lanes = len(lane_job)
    lanes = np.arange(n_lanes)

    def per_job(f) -> np.ndarray:
        return np.array([f(j) for j in jobs], dtype=float)[lane_job]

    work, tau = per_job(lambda j: j.work_s), per_job(lambda j: j.checkpoint.interval_s)
    delta, restart = per_job(lambda j: j.checkpoint.write_s), per_job(lambda j: j.checkpoint.restart_s)
    replace_s, min_nodes = per_job(lambda j: j.replace_s), per_job(lambda j: j.training_nodes_floor)
    replica = per_job(lambda j: j.replica_nodes)
    shrink = per_job(lambda j: j.policy == "shrink") > 0
    cluster = jobs[0].cluster
    n_full = cluster.n_nodes
    full_rates = cluster.rates_per_s(jobs[0].rates)
    rate_full = sum(full_rates.values())
    # Failure rate of each component class with k nodes left (thinning and class draws), with
    # ClusterShape.rates_per_s's own operations, so that they are the same numbers.
    k = np.arange(n_full + 1)
    r = jobs[0].rates
    node_rates = np.stack([k * cluster.gpus_per_node / r.gpu_mtbf_s, k / r.node_mtbf_s,
                           k * cluster.links_per_node / r.link_mtbf_s], axis=1)
    node_total = node_rates[:, 0] + node_rates[:, 1] + node_rates[:, 2]
    assert list(full_rates) == list(COMPONENTS) and node_total[n_full] == rate_full
    seg = tau + delta

    t, e, saved = np.zeros(n_lanes), np.zeros(n_lanes), np.zeros(n_lanes)
    lost, ckpt, rst = np.zeros(n_lanes), np.zeros(n_lanes), np.zeros(n_lanes)
    down, reduced = np.zeros(n_lanes), np.zeros(n_lanes)
    nodes = np.full(n_lanes, n_full, dtype=np.int64)
    ptr = np.zeros(n_lanes, dtype=np.int64)
    by_class = np.zeros((n_lanes, len(COMPONENTS)), dtype=np.int64)
    TRAIN, FAILED, RESTART, DONE = 0, 1, 2, 3
    phase = np.zeros(n_lanes, dtype=np.int64)
    queue = np.full((n_lanes, 8), np.inf)        # pending returns, oldest first
    head = np.zeros(n_lanes, dtype=np.int64)
    tail = np.zeros(n_lanes, dtype=np.int64)

    def strike(mask: np.ndarray, length: np.ndarray) -> np.ndarray:
        """Exposed time of the first real failure within ``length`` (inf: none), candidates
        consumed as simulate_run consumes them (rejected ones too), classes counted."""
        end = e + length
        found = np.full(n_lanes, np.inf)
        open_ = mask.copy()
        while open_.any():
            streams.ensure(int(ptr[open_].max()) + 1)
            idx = lanes[open_]
            c = streams.times[lane_seed[idx], ptr[idx]]
            inside = c < end[idx]
            idx, c = idx[inside], c[inside]
            open_[lanes[open_][~inside]] = False
            if not len(idx):
                break
            u_thin = streams.u_thin[lane_seed[idx], ptr[idx]]
            u_class = streams.u_class[lane_seed[idx], ptr[idx]]
            ptr[idx] += 1
            real = u_thin * rate_full < node_total[nodes[idx]]
            hit = idx[real]
            found[hit] = c[real]
            rates = node_rates[nodes[hit]]
            edges = np.cumsum(rates, axis=1)
            cls = np.minimum((u_class[real][:, None] * node_total[nodes[hit]][:, None] >= edges).sum(axis=1),
                             len(COMPONENTS) - 1)
            np.add.at(by_class, (hit, cls), 1)
            open_[hit] = False
        return found

    def elapse(mask: np.ndarray, dt: np.ndarray, exposed: bool = True) -> None:
        nonlocal t, e, reduced
        dt = np.where(mask, dt, 0.0)
        t = t + dt
        if exposed:
            e = e + dt
            reduced = reduced + np.where(nodes < n_full, dt, 0.0)

    events = 0
    while (phase != DONE).any():
        events += 1
        if events > MAX_ELASTIC_EVENTS:
            job = jobs[lane_job[int(np.argmax(phase != DONE))]]
            raise ConfigError(
                f"--elastic shrink: a run on fewer nodes passes {MAX_ELASTIC_EVENTS:,} failures and restarts "
                f"unfinished (the job fails every {job.mtbf_s:.3g} s and restarts in {job.checkpoint.restart_s:g} s, "
                f"so most restarts are interrupted); goodput compares both policies: give longer MTBFs (with a "
                f"unit: e.g. 80000h), a shorter --restart or less work (--tokens or --duration)")
        # ------------------------------------------------------------------ training
        tr = phase == TRAIN
        if tr.any():
            speed = np.floor(nodes / replica) * replica / n_full  # whole replicas train (simulate_run)
            remaining = (work - saved) / speed
            k_left = np.where(tr, np.maximum(0.0, np.ceil(remaining / tau - 1.0 - 1e-12)), 0.0)
            pending = head < tail
            ret0 = np.where(pending, queue[lanes, np.minimum(head, queue.shape[1] - 1)], np.inf)
            rejoin_cap = np.where(shrink & (nodes < n_full) & pending,
                                  np.maximum(1.0, np.ceil((ret0 - t) / seg - 1e-12)), np.inf)
            k = np.minimum(k_left, rejoin_cap)
            whole = tr & (k > 0)
            final = tr & (k == 0)
            span = np.where(whole, k * seg, np.where(final, remaining, 0.0))
            f = strike(tr, span)
            failed = tr & np.isfinite(f)
            # Failed during whole segments: the segments before it are done.
            fw = failed & whole
            j = np.where(fw, np.minimum(k - 1, np.floor((f - e) / seg)), 0.0)
            elapse(fw, j * seg)
            saved = saved + np.where(fw, j * tau * speed, 0.0)
            ckpt = ckpt + np.where(fw, j * delta, 0.0)
            dt = f - e
            lost = lost + np.where(fw, np.minimum(dt, tau), np.where(failed & final, dt, 0.0))
            ckpt = ckpt + np.where(fw, np.maximum(0.0, dt - tau), 0.0)
            elapse(failed, dt)
            # No failure: the segments (or the final stretch) are done.
            ok_whole, ok_final = whole & ~failed, final & ~failed
            elapse(ok_whole | ok_final, np.where(ok_whole, k * seg, remaining))
            saved = saved + np.where(ok_whole, k * tau * speed, 0.0)
            ckpt = ckpt + np.where(ok_whole, k * delta, 0.0)
            phase = np.where(failed, FAILED, np.where(ok_final, DONE, phase))
            # Replacements that have arrived rejoin at this checkpoint, then one restart.
            back = ok_whole & shrink & (nodes < n_full) & (head < tail)
            joined = np.zeros(n_lanes, dtype=bool)
            while back.any():
                ready = back & (queue[lanes, np.minimum(head, queue.shape[1] - 1)] <= t)
                if not ready.any():
                    break
                head[ready] += 1
                nodes[ready] += 1
                joined |= ready
                back = ready & (nodes < n_full) & (head < tail)
            phase = np.where(joined, RESTART, phase)
        # ------------------------------------------------------------------ after a failure
        fl = phase == FAILED
        if fl.any():
            wait = fl & ~shrink
            down = down + np.where(wait, replace_s, 0.0)
            elapse(wait, replace_s, exposed=False)
            sh = fl & shrink
            if sh.any():
                nodes[sh] -= 1
                if int(tail[sh].max()) >= queue.shape[1]:
                    queue = np.concatenate([queue, np.full_like(queue, np.inf)], axis=1)
                queue[lanes[sh], tail[sh]] = (t + replace_s)[sh]
                tail[sh] += 1
                short = sh & (nodes < min_nodes)
                while short.any():
                    back_t = queue[lanes, np.minimum(head, queue.shape[1] - 1)]
                    late = short & (back_t > t)
                    down = down + np.where(late, back_t - t, 0.0)
                    elapse(late, back_t - t, exposed=False)
                    head[short] += 1
                    nodes[short] += 1
                    short = short & (nodes < min_nodes)
            phase = np.where(fl, RESTART, phase)
        # ------------------------------------------------------------------ restarts
        rs = phase == RESTART
        if rs.any():
            f = strike(rs, restart)
            hit = rs & np.isfinite(f)
            rst = rst + np.where(hit, f - e, np.where(rs, restart, 0.0))
            elapse(rs, np.where(hit, f - e, restart))
            phase = np.where(hit, FAILED, np.where(rs, TRAIN, phase))
    out: list[list[RunOutcome]] = [[] for _ in jobs]
    for i in range(n_lanes):
        out[lane_job[i]].append(RunOutcome(
            wall_s=float(t[i]), work_s=float(work[i]), lost_s=float(lost[i]), checkpoint_s=float(ckpt[i]),
            restart_s=float(rst[i]), down_s=float(down[i]), reduced_s=float(reduced[i]),
            failures=int(by_class[i].sum()),
            failures_by_component={name: int(by_class[i, k]) for k, name in enumerate(COMPONENTS)}))
    return out


def _simulate_wait(jobs: list[TrainingJob], seeds: list[int], streams: _Streams) -> list[list[RunOutcome]]:
    """Every run of every ``wait`` job at once, with no loop over events.

    With ``wait`` every candidate failure is real (the job always has all its nodes), and each
    failure is followed by a replacement wait and a restart, which the next failure interrupts
    when it comes within ``restart_s``. So the training stretches are known from the failure
    times alone: before the first failure, and between a successful restart and the next
    failure; a stretch does ``floor(length / (interval + write))`` whole segments. The run ends
    in the first stretch long enough for the segments still to do plus the last one: a search
    over cumulative sums, for every run at once. Times, losses and writes are sums over the
    failures before it.
    """
    nj, ns = len(jobs), len(seeds)
    lane_job = np.repeat(np.arange(nj), ns)
    lane_seed = np.tile(np.arange(ns), nj)

    def per_job(f) -> np.ndarray:
        return np.array([f(j) for j in jobs], dtype=float)[lane_job][:, None]

    work, tau = per_job(lambda j: j.work_s), per_job(lambda j: j.checkpoint.interval_s)
    delta, restart = per_job(lambda j: j.checkpoint.write_s), per_job(lambda j: j.checkpoint.restart_s)
    replace_s = per_job(lambda j: j.replace_s)
    seg = tau + delta
    k_need = np.maximum(0.0, np.ceil(work / tau - 1.0 - 1e-12))   # non-final segments
    final = work - k_need * tau                                 # the last one, without a write
    rates = jobs[0].cluster.rates_per_s(jobs[0].rates)
    # Failures per run: about the expected exposed time over the MTBF (closed form); start
    # above it so that the search rarely needs a second pass.
    mtbf = jobs[0].mtbf_s
    expect = max(expected_wall_time_s(j.work_s, min(j.checkpoint.interval_s, j.work_s), j.checkpoint.write_s,
                                      j.checkpoint.restart_s, mtbf) for j in jobs) / mtbf if math.isfinite(mtbf) else 0
    m = max(16, int(expect + 6 * math.sqrt(expect) + 16))
    while True:
        streams.ensure(m)
        c = np.minimum(streams.times[lane_seed, :m + 1], 1e300)  # failures c[0] < c[1] < ... (never: 1e300)
        gap = np.diff(c, axis=1)                     # from failure j to failure j + 1
        # Training stretch j: before failure 0 (j = 0), else after failure j - 1's restart.
        x = np.concatenate([c[:, :1], np.where(gap[:, :m - 1] >= restart, gap[:, :m - 1] - restart, -1.0)],
                           axis=1)
        k = np.where(x >= 0, np.floor(x / seg), 0.0)
        before = np.cumsum(k, axis=1) - k            # segments done before stretch j
        done = (x >= 0) & (x >= (k_need - before) * seg + final)
        if done.any(axis=1).all():
            break
        m *= 2
    end = np.argmax(done, axis=1)                    # the stretch in which the run ends = failures before it
    j = np.arange(m)[None, :]
    failed = (j < end[:, None]) & (x >= 0)           # interrupted stretches
    off = x - k * seg
    lost = np.where(failed, np.minimum(off, tau), 0.0).sum(axis=1)
    extra = np.where(failed, np.maximum(0.0, off - tau), 0.0).sum(axis=1)
    rows = np.arange(len(end))
    start = np.where(end > 0, c[rows, np.maximum(end - 1, 0)] + restart[:, 0], 0.0)
    exposed = start + (k_need[:, 0] - before[rows, end]) * seg[:, 0] + final[:, 0]
    rst = np.where(j < end[:, None], np.minimum(gap[:, :m], restart), 0.0).sum(axis=1)
    cls = np.minimum(np.searchsorted(np.cumsum([rates[n] for n in COMPONENTS]),
                                     streams.u_class[lane_seed, :m] * sum(rates.values()), side="right"),
                     len(COMPONENTS) - 1)
    counts = np.stack([((cls == q) & (j < end[:, None])).sum(axis=1) for q in range(len(COMPONENTS))], axis=1)
    down = end * replace_s[:, 0]
    wall, ckpt = exposed + down, k_need[:, 0] * delta[:, 0] + extra
    out: list[list[RunOutcome]] = [[] for _ in jobs]
    for i in range(len(end)):
        out[lane_job[i]].append(RunOutcome(
            wall_s=float(wall[i]), work_s=float(work[i, 0]), lost_s=float(lost[i]), checkpoint_s=float(ckpt[i]),
            restart_s=float(rst[i]), down_s=float(down[i]), reduced_s=0.0, failures=int(end[i]),
            failures_by_component={name: int(counts[i, q]) for q, name in enumerate(COMPONENTS)}))
    return out


_MAX_FAILURES_PER_RUN = MAX_FAILURES_PER_RUN
"""Beyond this many expected failures per run a job cannot be simulated (nor finish): refused."""


def _check_feasible(job: TrainingJob) -> float:
    """A job that would fail millions of times per run is refused with the reason (one line); else its
    expected failures per run."""
    m = job.mtbf_s
    if math.isinf(m):
        return 0.0
    ck = job.checkpoint
    wall = expected_wall_time_s(job.work_s, min(ck.interval_s, job.work_s), ck.write_s, ck.restart_s, m,
                                job.replace_s)
    if not wall / m <= _MAX_FAILURES_PER_RUN:
        raise ConfigError(
            f"--mtbf-gpu/--mtbf-node/--mtbf-link: the job fails every {m:.3g} s on average, so a run would fail "
            f"{'an astronomical number of' if math.isinf(wall) else f'about {wall / m:.2g}'} times "
            f"(expected wall time {'beyond 1e308 s' if math.isinf(wall) else f'{wall:.3g} s'}, restart "
            f"{ck.restart_s:g} s, checkpoint interval {ck.interval_s:g} s); give longer MTBFs (with a unit: "
            f"e.g. 80000h) or a shorter --restart")
    return wall / m


def _simulate_jobs(jobs: list[TrainingJob], seeds: list[int]) -> list[list[RunOutcome]]:
    """Every run of every job (jobs that fail at the same rate share their candidate draws)."""
    out: list[list[RunOutcome] | None] = [None] * len(jobs)
    groups: dict[tuple, list[int]] = {}
    failures = 0.0
    for i, job in enumerate(jobs):
        failures += len(seeds) * _check_feasible(job)
        key = (sum(job.cluster.rates_per_s(job.rates).values()), (job.cluster, job.rates))
        groups.setdefault(key, []).append(i)
    if failures > MAX_GOODPUT_FAILURES:
        # Each failure is simulated; the per-run bound alone let --runs 1,000 x 1e5 failures (hours) through.
        per_run = failures / len(seeds)
        raise ConfigError(
            f"--runs: {len(seeds):,} runs of about {per_run / len(jobs):.3g} failures each"
            f"{f' (x {len(jobs)} configurations compared)' if len(jobs) > 1 else ''} are {failures:.3g} failures "
            f"to simulate; expected at most {MAX_GOODPUT_FAILURES:.3g}: give fewer --runs, less work to train "
            f"(--tokens or --duration) or longer MTBFs")
    for (rate, cluster), idx in groups.items():
        streams = _streams(tuple(seeds), rate)
        for policy, run in (("wait", _simulate_wait), ("shrink", _simulate_lanes)):
            mine = [i for i in idx if jobs[i].policy == policy]
            if mine:
                for i, runs in zip(mine, run([jobs[i] for i in mine], seeds, streams)):
                    out[i] = runs
    return typing.cast(list, out)


_STREAMS: dict[tuple, _Streams] = {}


def _streams(seeds: tuple[int, ...], rate: float) -> _Streams:
    """The candidate draws of ``seeds`` at ``rate``, shared by every simulation in the process."""
    key = (seeds, rate)
    if key not in _STREAMS:
        _STREAMS[key] = _Streams(list(seeds), rate)
        while len(_STREAMS) > 8:
            _STREAMS.pop(next(iter(_STREAMS)))
    return _STREAMS[key]


@frozen_dataclass
class GoodputStats:
    """Monte-Carlo summary of many runs of one job."""

    policy: str
    """``wait`` or ``shrink``."""
    interval_s: float
    """Checkpoint interval simulated."""
    runs: int
    """Independent runs."""
    wall_s: float
    """Mean wall-clock time."""
    wall_ci_s: tuple[float, float]
    """Confidence interval on the mean wall time."""
    goodput: float
    """Useful work / mean wall time."""
    goodput_ci: tuple[float, float]
    """Interval on the goodput (from the wall-time interval)."""
    lost_s: float
    """Mean training time lost to failures."""
    checkpoint_s: float
    """Mean time writing checkpoints."""
    restart_s: float
    """Mean time restarting."""
    down_s: float
    """Mean time waiting for replacements."""
    reduced_s: float
    """Mean time on fewer nodes (``shrink``)."""
    failures: float
    """Mean failures per run."""
    expected_wall_s: float | None
    """Closed-form expected wall time (``wait`` only)."""
    walls_s: tuple[float, ...] = field(default=(), repr=False)
    """Each run's wall time, in seed order (for paired comparisons)."""

    def to_dict(self) -> dict:
        """JSON-able dict (seconds)."""
        return {
            "policy": self.policy, "interval_s": self.interval_s, "runs": self.runs,
            "wall_s": self.wall_s, "wall_ci_s": list(self.wall_ci_s), "goodput": self.goodput,
            "goodput_ci": list(self.goodput_ci), "lost_s": self.lost_s, "checkpoint_s": self.checkpoint_s,
            "restart_s": self.restart_s, "down_s": self.down_s, "reduced_s": self.reduced_s,
            "failures": self.failures, "expected_wall_s": self.expected_wall_s,
        }


def simulate_goodput(job: TrainingJob, *, runs: int = 100, seed: int = 0, confidence: float = 0.95) -> GoodputStats:
    """``runs`` independent runs of ``job`` (run i uses seed ``seed * 1_000_003 + i``)."""
    return _goodput_of([job], runs=runs, seed=seed, confidence=confidence)[0]


_STATS: dict[tuple, GoodputStats] = {}
"""Results by (job, runs, seed, confidence): the headline job is also the interval study's model
optimum and the elastic choice's ``wait``; it is simulated once."""


def _goodput_of(jobs: list[TrainingJob], *, runs: int, seed: int, confidence: float = 0.95) -> list[GoodputStats]:
    """:func:`simulate_goodput` of several jobs, simulated together (same seeds: common random numbers)."""
    if isinstance(runs, bool) or not isinstance(runs, int) or runs < 1:
        raise ConfigError(f"--runs: {runs!r} is not valid; expected an integer >= 1")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ConfigError(f"--seed: {seed!r} is not valid; expected an integer >= 0")
    keys = [(job, runs, seed, confidence) for job in jobs]
    todo = [i for i, k in enumerate(keys) if k not in _STATS]
    if todo:
        seeds = [seed * 1_000_003 + i for i in range(runs)]
        for i, outs in zip(todo, _simulate_jobs([jobs[i] for i in todo], seeds)):
            _STATS[keys[i]] = _summarise(jobs[i], outs, confidence)
        while len(_STATS) > 256:
            _STATS.pop(next(iter(_STATS)))
    return [_STATS[k] for k in keys]


def _summarise(job: TrainingJob, outs: list[RunOutcome], confidence: float) -> GoodputStats:
    runs = len(outs)
    walls = [o.wall_s for o in outs]
    mean, lo, hi = mean_confidence_interval(walls, confidence)
    # No run is shorter than the failure-free one (the work and its checkpoint writes), so neither is
    # the mean: a symmetric t-interval over a few runs, most of them failure-free, reached below it
    # (a goodput interval above 100 %). The floor is taken from the runs too, against rounding.
    ck = job.checkpoint
    floor = min(expected_wall_time_s(job.work_s, ck.interval_s, ck.write_s, ck.restart_s, math.inf), min(walls))
    lo = max(lo, floor)
    avg = lambda attr: sum(getattr(o, attr) for o in outs) / runs  # noqa: E731
    expected = None
    if job.policy == "wait":
        expected = expected_wall_time_s(job.work_s, ck.interval_s, ck.write_s, ck.restart_s, job.mtbf_s,
                                        job.replace_s)
    return GoodputStats(
        policy=job.policy, interval_s=job.checkpoint.interval_s, runs=runs, wall_s=mean, wall_ci_s=(lo, hi),
        goodput=job.work_s / mean, goodput_ci=(job.work_s / hi, job.work_s / lo if lo > 0 else math.inf),
        lost_s=avg("lost_s"), checkpoint_s=avg("checkpoint_s"), restart_s=avg("restart_s"), down_s=avg("down_s"),
        reduced_s=avg("reduced_s"), failures=avg("failures"), expected_wall_s=expected, walls_s=tuple(walls),
    )


# ----------------------------------------------------------------------------- the optimum interval

@frozen_dataclass
class IntervalStudy:
    """The checkpoint interval that maximises goodput, against Young and Daly.

    The model optimum maximises the closed-form *expected* goodput (exact for the
    ``wait`` policy with exponential failures); the simulation checks it on a grid with
    common random numbers, so differences between intervals are paired, not noise
    between runs. Near the optimum goodput is flat: intervals tens of percent apart
    can differ by a hundredth of a point, which the paired interval shows.
    """

    mtbf_s: float
    """The job's MTBF."""
    write_s: float
    """Checkpoint write time."""
    model_optimum_s: float
    """Interval maximising the closed-form expected goodput."""
    young_s: float
    """Young's sqrt(2 delta M)."""
    daly_s: float
    """Daly's higher-order estimate."""
    expected_goodput_at_optimum: float
    """Closed-form expected goodput at the model optimum."""
    expected_goodput_at_young: float
    """Closed-form expected goodput at Young's interval."""
    expected_goodput_at_daly: float
    """Closed-form expected goodput at Daly's interval."""
    young_vs_optimum: float
    """young_s / model_optimum_s - 1."""
    daly_vs_optimum: float
    """daly_s / model_optimum_s - 1."""
    simulated_optimum_s: float
    """Grid interval with the highest simulated goodput."""
    goodput_at_simulated_optimum: float
    """Simulated goodput there."""
    goodput_at_model_optimum: float
    """Simulated goodput at the model optimum."""
    goodput_at_young: float
    """Simulated goodput at Young's interval."""
    goodput_at_daly: float
    """Simulated goodput at Daly's interval."""
    simulated_gap: tuple[float, float, float]
    """Goodput of the simulated optimum minus that of the model optimum, paired over runs:
    (mean, low, high) of the 95 % interval; an interval containing 0 means the two agree."""
    grid: tuple[GoodputStats, ...]
    """Simulated goodput at each grid interval (Young, Daly, model optimum included)."""

    def to_dict(self) -> dict:
        """JSON-able dict (seconds; goodputs as fractions)."""
        return {
            "mtbf_s": self.mtbf_s, "write_s": self.write_s, "model_optimum_s": self.model_optimum_s,
            "young_s": self.young_s, "daly_s": self.daly_s,
            "expected_goodput_at_optimum": self.expected_goodput_at_optimum,
            "expected_goodput_at_young": self.expected_goodput_at_young,
            "expected_goodput_at_daly": self.expected_goodput_at_daly,
            "young_vs_optimum": self.young_vs_optimum, "daly_vs_optimum": self.daly_vs_optimum,
            "simulated_optimum_s": self.simulated_optimum_s,
            "goodput_at_simulated_optimum": self.goodput_at_simulated_optimum,
            "goodput_at_model_optimum": self.goodput_at_model_optimum,
            "goodput_at_young": self.goodput_at_young, "goodput_at_daly": self.goodput_at_daly,
            "simulated_gap": list(self.simulated_gap),
            "grid": [{"interval_s": g.interval_s, "goodput": g.goodput, "wall_s": g.wall_s,
                      "expected_wall_s": g.expected_wall_s} for g in self.grid],
        }


def interval_study(job: TrainingJob, *, runs: int = 100, seed: int = 0, points: int = 9,
                   extra: Sequence[float] = ()) -> IntervalStudy:
    """The goodput-maximising interval (closed form), checked by simulation, vs Young/Daly.

    Simulates ``points`` log-spaced intervals from a third to three times the model
    optimum, plus Young's, Daly's and the model optimum itself, with the same seeds.
    """
    if job.policy != "wait":
        job = replace(job, policy="wait")
    ck = job.checkpoint
    m = job.mtbf_s
    w = job.work_s
    opt = model_optimum_s(w, ck.write_s, ck.restart_s, m, job.replace_s)
    young, daly = young_interval_s(ck.write_s, m), daly_interval_s(ck.write_s, m)
    expected = lambda tau: w / expected_wall_time_s(w, tau, ck.write_s, ck.restart_s, m, job.replace_s)  # noqa: E731
    # Floored at the shortest interval a checkpoint policy takes: a near-free write puts the optimum (and
    # the grid's low end) under it.
    clip = lambda tau: max(MIN_CHECKPOINT_INTERVAL_S,  # noqa: E731
                           min(w, tau) if tau > 0 and math.isfinite(tau) else w)
    taus = {clip(x) for x in (opt, young, daly, *extra)}
    if math.isfinite(opt) and opt > 0:
        for i in range(points):
            taus.add(clip(opt * 3.0 ** (2 * i / max(1, points - 1) - 1)))
    grid = _goodput_of([replace(job, checkpoint=replace(ck, interval_s=tau)) for tau in sorted(taus)],
                       runs=runs, seed=seed)
    best = max(grid, key=lambda g: g.goodput)
    at = {g.interval_s: g for g in grid}
    at_opt = at[clip(opt)]
    diffs = [w / a - w / b for a, b in zip(best.walls_s, at_opt.walls_s)]
    return IntervalStudy(
        mtbf_s=m, write_s=ck.write_s, model_optimum_s=opt, young_s=young, daly_s=daly,
        expected_goodput_at_optimum=expected(clip(opt)), expected_goodput_at_young=expected(clip(young)),
        expected_goodput_at_daly=expected(clip(daly)),
        young_vs_optimum=young / opt - 1 if opt > 0 else math.nan,
        daly_vs_optimum=daly / opt - 1 if opt > 0 else math.nan,
        simulated_optimum_s=best.interval_s, goodput_at_simulated_optimum=best.goodput,
        goodput_at_model_optimum=at_opt.goodput, goodput_at_young=at[clip(young)].goodput,
        goodput_at_daly=at[clip(daly)].goodput, simulated_gap=mean_confidence_interval(diffs),
        grid=tuple(grid),
    )


def elastic_choice(job: TrainingJob, *, runs: int = 100, seed: int = 0) -> dict[str, GoodputStats]:
    """Both policies on the same failures: ``{"wait": ..., "shrink": ...}``."""
    return dict(zip(POLICIES, _goodput_of([replace(job, policy=p) for p in POLICIES], runs=runs, seed=seed)))
