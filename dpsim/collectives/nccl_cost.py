"""NCCL's estimate of one algorithm x protocol on a communicator, bandwidths from the flow model.

For every call NCCL estimates, for each enabled algorithm x protocol,
``time = latency + bytes / bandwidth`` (``ncclTopoGetAlgoTime``). :class:`NcclCost` does the
same, with two differences: the bandwidth of an algorithm is not NCCL's per-channel guess but
what the flow model gives for its traffic on *this* topology
(:class:`~dpsim.collectives.plan_cost.PlanEvaluator`: max-min sharing of every concurrent flow,
contention with other jobs included), and pipelined algorithms pay a pipeline fill. Everything
else is NCCL's own model, with constants from ``src/graph/tuning.cc`` and ``src/enqueue.cc`` of
NVIDIA/nccl at commit ``5067397c2676d5aed50042fc39e5c8ee96eb0027`` (2026-06; "HEAD" below),
quoted as facts, not code (:mod:`dpsim.collectives.nccl_tuning`), read against the
communicator's fabric facts (:mod:`dpsim.collectives.fabric_facts`):

- **Latency** ``baseLat[algo][proto] + intra_hops * hwLat[NVLINK|PCI][algo][proto] +
  inter_hops * hwLat[NET][algo][proto]`` (:data:`~dpsim.collectives.nccl_tuning.BASE_LATENCY_US`,
  :data:`~dpsim.collectives.nccl_tuning.HW_LATENCY_US`); hop counts per algorithm as NCCL counts them (ring:
  ``nsteps - nInterSteps`` intra, ``nInterSteps`` inter; tree:
  ``2 * ((ppn - 1) intra + log2(nNodes) inter)``; NVLS: one NVLink hop (+ one NET
  hop); NVLS tree: one NVLink hop + ``2 log2(nNodes)`` NET hops). A topology's
  ``gpu_link_latency_us`` / ``nic_latency_us`` are ring/Simple hop latencies; the
  other algorithms and protocols scale with them. Ring/Simple all-reduce across
  servers multiplies the latency by 1.4 (1.9 before Ampere): NCCL's "plateau effect".
  On multi-server rings an intra hop costs at least the network post overhead
  (1 us, x3 for Simple). Plus the topology's ``launch_overhead_us`` per call.
- **Protocols** LL moves 8 data bytes per 16 (bus bandwidth x 0.5, capped at
  ``llMaxBw``), LL128 120 of 128 (x 0.92 on rings; x 120/128 on trees across
  servers, x 7/9 inside one), Simple all of it; tree all-reduce x 0.92, across servers
  at most channels x ``perChMaxTreeBw`` (one CTA per tree channel), and NCCL's per-size
  ``treeCorrectionFactor``; NVLS x ``nvlsEfficiency``. LL128 is enabled only
  on NVLink servers, and across servers only from Hopper on (as NCCL's default); across
  servers only the protocols the NICs' transport allows run (``network_protocols``: the
  AWS plugin forces Simple on EFA v1).
- **Channels** NCCL drops channels while ``bytes < channels * threads * threshold``
  (threshold 64 B/thread for Simple, 8 for LL128 and LL, x ranks for the ring's LL; 512, 640
  and 512 threads): fewer channels use fewer NICs, so a NIC-bound plan's bandwidth scales
  with the channels kept.
- **Pipeline fill** (trees, chains, NVLS tree): the first chunk crosses every stage
  before the pipeline streams: ``chunk * (stages_intra / r_intra + stages_inter /
  r_inter - 1 / r_slowest)``, chunk = ``min(step size, S / channels)``: Simple 512 KiB
  (4 MiB buffer / 8 steps), LL 32 KiB, LL128 576,000 B, NVLS tree NCCL's NVLS chunk
  (:func:`~dpsim.collectives.nccl_tuning.nvls_tuning`) shrunk for small messages as
  ``calcCollChunking`` does.
- **NVLS chunk steps** (one NVLink domain): each step a channel reduces and multicasts one
  chunk per head (every GPU of the domain, at most 32); ``calcCollChunking`` shrinks the chunk
  from 128 KiB to 64 / 32 / 16 KiB for smaller messages, so a mid-size call is a few steps of
  fixed cost. The transfer is the larger of the bandwidth term and steps x the fitted step
  (:attr:`~dpsim.collectives.nccl_tuning.NcclTuning.nvls_step_latency_us`); NVLS has no ramp.

``hierarchical`` and ``halving_doubling`` are costed with the ring's protocol factors
and latencies; NCCL itself never picks them (they run only when ``--algo`` names them).
"""

from __future__ import annotations

import math
from bisect import bisect_right
from functools import cached_property

from dpsim.collectives.algorithms.base import Plan
from dpsim.collectives.fabric_facts import FabricFacts
from dpsim.collectives.nccl_tuning import (
    CHUNK_BYTES,
    HW_LATENCY_US,
    NCCL_STEPS,
    PROTOCOLS,
    THREAD_THRESHOLD,
    THREADS,
    TREE_CORRECTION,
    NcclTuning,
    nvls_chunk_breaks,
    nvls_steps,
    nvls_tree_chunk_breaks,
    nvls_tree_chunk_bytes,
)
from dpsim.collectives.ops import BROADCAST_SLICE_BYTES, bus_factor
from dpsim.collectives.plan_cost import PlanCost, PlanEvaluator
from dpsim.frozen import frozen_dataclass
from dpsim.units import US, KiB

SOCKET_MIN_TASK_BYTES = 64 * KiB
"""Smallest piece NCCL's socket transport splits a message into across a connection's sockets
(src/transport/net_socket.cc@5067397 ``MIN_CHUNKSIZE``)."""


@frozen_dataclass
class Choice:
    """One costed algorithm x protocol."""

    algorithm: str
    """Algorithm name."""
    protocol: str
    """``LL``, ``LL128`` or ``Simple``."""
    time_s: float
    """Estimated duration."""
    latency_s: float
    """Its size-independent part (launch overhead + NCCL latency)."""
    channels: int
    """Channels NCCL keeps for this size."""
    transfer_s: float = 0.0
    """The flow model's time for the bytes at the full channel count, before NCCL's size
    corrections, the flow-control window and the ramp (what the ramp stretches: linear in
    the size and never longer on faster links, so the ramp keeps both monotone)."""



def tree_correction(protocol: str, size_bytes: float) -> float:
    """NCCL's ``treeCorrectionFactor`` for a message size (1 outside its 64 B .. 256 MiB table)."""
    log_size = int(math.log2(max(size_bytes, 64) // 64)) if size_bytes >= 64 else 0
    table = TREE_CORRECTION[protocol]
    return table[log_size] if log_size < len(table) else 1.0



def cost_family(algorithm: str) -> str:
    """Whose protocol factors and latencies an algorithm takes: ``tree``, ``nvls`` and ``nvls_tree``
    their own; ``ring``, ``hierarchical`` and ``halving_doubling`` the ring's (NCCL itself never
    picks the last two: they run only when ``--algo`` names them)."""
    return algorithm if algorithm in ("tree", "nvls", "nvls_tree") else "ring"


def channel_bytes(protocol: str, n_ranks: int, algorithm: str = "ring") -> int:
    """Bytes per channel NCCL wants before it keeps one more: ``threads * threshold`` (the ring's
    LL threshold counts every rank, the tree's does not: ``threadThresholds[RING][LL] *= nRanks``,
    src/graph/tuning.cc@5067397)."""
    ranks = n_ranks if protocol == "LL" and cost_family(algorithm) == "ring" else 1
    return THREADS[protocol] * THREAD_THRESHOLD[protocol] * ranks


def channels_kept(protocol: str, size_bytes: float, channels: int, n_ranks: int, algorithm: str = "ring") -> int:
    """Channels NCCL keeps of ``channels`` for a message: it drops them while
    ``bytes < channels * threads * threshold`` (src/enqueue.cc@5067397, ring/tree channel tuning)."""
    return max(1, min(channels, int(size_bytes // channel_bytes(protocol, n_ranks, algorithm))))


class NcclCost:
    """What each algorithm x protocol takes on one communicator: NCCL's model on the flow model.

    ``facts`` are the communicator's fabric facts, ``plans`` evaluates its plans on the network,
    ``tuning`` the fitted constants; ``below`` caches the regime changes of models built with the
    same arguments (shared across a sweep).
    """

    def __init__(self, facts: FabricFacts, plans: PlanEvaluator, tuning: NcclTuning, below: dict | None = None):
        self.facts = facts
        """The communicator's fabric facts."""
        self.plans = plans
        """Its plans' network evaluation."""
        self.tuning = tuning
        """The fitted constants."""
        self._below: dict[tuple[str, str, str], tuple[list[float], list[float]]] = below if below is not None else {}

    def hop_latencies_s(self, algorithm: str, protocol: str) -> tuple[float, float]:
        """(intra-server, inter-server) latency of one hop of ``algorithm`` in ``protocol``
        (NCCL's ``hwLat`` scaled to the topology's ring/Simple hop latencies)."""
        family = cost_family(algorithm)
        p = PROTOCOLS.index(protocol)
        f = self.facts
        intra_scale, inter_scale, intra_hw, inter_hw = f.intra_hop_scale, f.inter_hop_scale, f.intra_hw, f.inter_hw
        intra_lat = self.facts.hw_latency_us(intra_hw, family, p) * US * intra_scale
        # NCCL charges the tree's NET latency on every algorithm when one GPU per server leaves a
        # hop fully exposed (src/graph/tuning.cc@5067397, ``ppn == 1``); not modelled: it lowers the
        # ``ib`` overhead #150's row gives the #309 systems left out (LOSO median 6.7 -> 7.1 %).
        inter_lat = HW_LATENCY_US[inter_hw][family][p] * US * inter_scale
        if family == "ring" and self.facts.n_nodes > 1 and inter_hw == "net":
            intra_lat = max(intra_lat, (3.0 if protocol == "Simple" else 1.0) * US)
        return intra_lat, inter_lat

    def latency_s(self, plan: Plan, protocol: str) -> float:
        """NCCL's latency of ``plan`` in ``protocol``: base latency plus the plan's hops (without
        the per-call overhead)."""
        family = cost_family(plan.algorithm)
        p = PROTOCOLS.index(protocol)
        intra_lat, inter_lat = self.hop_latencies_s(plan.algorithm, protocol)
        multi = self.facts.n_nodes > 1
        lat = self.facts.base_latency_us(family, p) * US + plan.intra_hops * intra_lat + plan.inter_hops * inter_lat
        if plan.algorithm == "ring" and protocol == "Simple" and multi and plan.op == "all_reduce" and not self.facts.rccl:
            lat *= 1.9 if self.facts.generation == "volta" else 1.4
        return lat

    def message_bytes(self, algorithm: str, protocol: str, op: str, size_bytes: float) -> float:
        """Bytes per network message (one NCCL step/chunk of a channel) for this call."""
        pc = self.plans.plan_cost(algorithm, op)
        plan = pc.plan
        if algorithm == "nvls_tree":
            return self._nvls_tree_chunk(size_bytes)
        if algorithm == "tree":
            return min(CHUNK_BYTES[protocol], size_bytes / max(1, plan.channels))
        # Rings: one step of one flow at a time.
        per_step = pc.max_fraction * size_bytes
        return max(1.0, min(CHUNK_BYTES[protocol], per_step))

    def _nvls_tree_chunk(self, size_bytes: float) -> float:
        return nvls_tree_chunk_bytes(self.facts.nvls, self.facts.gpus_per_node, size_bytes)

    def socket_tasks_scale(self, algorithm: str, protocol: str, op: str, size_bytes: float) -> float:
        """Fraction of the socket transport's stream cap one connection's messages can use.

        NCCL's socket transport splits each message (one step of one channel) into tasks of
        ``max(64 KiB, size / sockets)`` spread over the connection's sockets
        (src/transport/net_socket.cc@5067397, ``MIN_CHUNKSIZE``): a message under
        ``sockets x 64 KiB`` leaves sockets idle, and the NIC then carries at most
        ``connections x busy sockets x stream rate``. Each channel has its own connection
        (``connections_per_nic``), so a step is ``S x fraction x plan channels / connections``.
        """
        fabric = self.facts.spec.fabric
        transport = fabric.transport
        if (transport.kind != "socket" or transport.streams_per_connection <= 1
                or not math.isfinite(transport.stream_bytes_per_s) or algorithm not in ("ring", "tree")):
            return 1.0
        pc = self.plans.plan_cost(algorithm, op)
        channels = max(1, pc.plan.channels)
        connections = max(channels, transport.connections_per_nic)
        step = pc.max_fraction * size_bytes if algorithm == "ring" else size_bytes / channels
        per_connection = min(CHUNK_BYTES[protocol], step * channels / connections)
        busy = min(transport.streams_per_connection, max(1, math.ceil(per_connection / SOCKET_MIN_TASK_BYTES)))
        line = fabric.nic_bandwidth_bytes_per_s
        full = min(transport.wire_efficiency, transport.stream_cap_bytes_per_s / line)
        part = min(transport.wire_efficiency,
                   transport.connections_per_nic * busy * transport.stream_bytes_per_s / line)
        return part / full if full > 0 else 1.0

    def cost(self, algorithm: str, protocol: str, op: str, size_bytes: float) -> Choice:
        """What one algorithm x protocol takes: NCCL's estimate, the per-call overhead and the
        measured bandwidth ramp of the Simple protocol included.

        NCCL's regimes change at fixed sizes (channels kept, NVLS-tree chunk size, the
        tree correction table), where the raw estimate can drop as the message grows; a
        bigger message is never faster here: the time is the largest of the raw estimate
        and its values just below each regime change under ``size_bytes``.
        """
        raw = self.raw_cost(algorithm, protocol, op, size_bytes)
        worst = max(raw.time_s + self._ramp_extra_s(raw, size_bytes),
                    self._below_regime_changes_s(algorithm, protocol, op, size_bytes))
        if worst > raw.time_s:
            raw = Choice(algorithm=raw.algorithm, protocol=raw.protocol, time_s=worst,
                         latency_s=raw.latency_s, channels=raw.channels, transfer_s=raw.transfer_s)
        return raw

    def _below_regime_changes_s(self, algorithm: str, protocol: str, op: str, size_bytes: float) -> float:
        """The largest time just below a regime change at or under ``size_bytes`` (0 when none).

        The changes sit at fixed sizes, so their times are computed once per algorithm x
        protocol x op, with their running maximum (a sweep asks for hundreds of sizes)."""
        key = (algorithm, protocol, op)
        table = self._below.get(key)
        if table is None:
            sizes = sorted(self._breakpoints(algorithm, protocol, op))
            tops, top = [], 0.0
            for b in sizes:
                below = self.raw_cost(algorithm, protocol, op, b - 1)
                top = max(top, below.time_s + self._ramp_extra_s(below, b - 1))
                tops.append(top)
            table = self._below[key] = (sizes, tops)
        sizes, tops = table
        i = bisect_right(sizes, size_bytes)
        return tops[i - 1] if i else 0.0

    def _ramp_extra_s(self, raw: Choice, size_bytes: float) -> float:
        """What the Simple protocol's bandwidth ramp (:meth:`NcclTuning.ramp`) adds to a transfer:
        LL and LL128 carry their own factors from NCCL's model, Simple reaches its bandwidth
        only on large messages (measured; see ``validation/accuracy_collectives.py``).

        The ramp is fitted per scope on whole calls (``node`` halves the bandwidth at 64 MiB,
        ``verbs`` has none): a Simple call across servers whose NVLink flows bound it can come
        out cheaper than the same call inside one server (left alone:
        ``tests/test_collective_tier_monotone.py``, ``RAMPED``)."""
        if raw.protocol != "Simple" or raw.algorithm == "nvls":
            return 0.0  # NVLS: its chunk steps (:meth:`nvls_steps_s`) are its mid-size cost
        if raw.algorithm == "nvls_tree" and self.facts.crosses_nics:
            scope = "nvls_tree"  # its 32-128 KiB chunks stream unlike a ring's or tree's 512 KiB ones
        else:
            scope = self.facts.ramp_scope
        return raw.transfer_s * (1.0 / self.tuning.ramp(scope, size_bytes) - 1.0)

    def _breakpoints(self, algorithm: str, protocol: str, op: str) -> list[float]:
        """Sizes where NCCL's regime changes: channels kept, NVLS(-tree) chunk, tree correction."""
        out: list[float] = []
        k = self.plans.plan_cost(algorithm, op).plan.channels
        per = channel_bytes(protocol, self.facts.n_ranks, algorithm)
        out += [j * per for j in range(2, k + 1)]
        if algorithm == "nvls_tree":
            out += nvls_tree_chunk_breaks(self.facts.nvls, self.facts.gpus_per_node)
        if algorithm == "nvls":
            # A bigger chunk halves the steps at each break: the step term drops there.
            out += nvls_chunk_breaks(self.facts.nvls, self.facts.nvls_heads)
        if algorithm == "tree" or (algorithm == "nvls_tree" and self.facts.generation == "blackwell"):
            out += [64 * 2 ** i for i in range(1, len(TREE_CORRECTION[protocol]) + 1)]
        return out

    def raw_cost(self, algorithm: str, protocol: str, op: str, size_bytes: float) -> Choice:
        """NCCL's estimate of one call, the per-call overhead included, before the Simple
        protocol's ramp and the regime changes (:meth:`cost` adds both)."""
        scale = 1.0
        if self.facts.n_nodes > 1:
            scale = (self.facts.nic_scale(self.message_bytes(algorithm, protocol, op, size_bytes))
                     * self.socket_tasks_scale(algorithm, protocol, op, size_bytes))
        pc = self.plans.plan_cost(algorithm, op, scale)
        plan = pc.plan
        n = self.facts.n_ranks
        spb = pc.seconds_per_byte
        k = plan.channels
        kept = channels_kept(protocol, size_bytes, k, self.facts.n_ranks, algorithm)
        if pc.inter_bound and kept < k:
            spb *= k / kept
        elif kept < k and pc.phase_seconds_per_byte:
            # Bound inside servers overall, but the flows between servers of a phase may still be
            # the slower once fewer channels carry them: else a slower GPU link (a --degrade) that
            # moved the bound inside the servers made the call faster.
            spb = max(spb, sum(r * max(t_in, t_out * (k / kept), 0.0)
                               for r, t_in, t_out in pc.phase_seconds_per_byte))
        algbw = 1.0 / spb if spb > 0 else math.inf
        family = cost_family(algorithm)
        # NCCL's "bus bandwidth" of the algorithm, to apply its protocol factors and caps.
        ratio = 2.0 if family == "tree" else (bus_factor(op, n) if op != "broadcast" else 1.0)
        algbw = self.protocol_bus_bandwidth(family, protocol, op, algbw * ratio, kept, size_bytes,
                                            nccl_channels=algorithm in ("ring", "tree")) / ratio
        latency = self.latency_s(plan, protocol)
        transfer = size_bytes / algbw if algbw > 0 else math.inf
        transfer = max(transfer, self._window_s(pc, protocol, op, size_bytes))
        if family == "nvls":
            transfer = max(transfer, self.nvls_steps_s(op, size_bytes))
        # The fill runs through every stage at its own rate, slowed by the protocol (not by caps).
        nominal = {"LL": 0.5, "LL128": 0.92, "Simple": 1.0}[protocol] if family != "nvls" else 1.0
        fill = self._fill_s(pc, protocol, size_bytes, nominal)
        overhead = self.call_overhead_s
        return Choice(algorithm=algorithm, protocol=protocol, time_s=overhead + latency + transfer + fill,
                      latency_s=overhead + latency, channels=kept, transfer_s=size_bytes * pc.seconds_per_byte)

    def protocol_bus_bandwidth(self, family: str, protocol: str, op: str, bus: float, kept: int,
                               size_bytes: float, nccl_channels: bool = True) -> float:
        """NCCL's protocol factors and caps on the bus bandwidth ``bus`` (bytes/s) of an algorithm
        of ``family`` (:func:`cost_family`) running on ``kept`` channels. ``nccl_channels``: the
        plan's channels are NCCL's own (its ring or tree); the per-channel caps do not apply to the
        what-if algorithms (``hierarchical``, ``halving_doubling``), whose channels NCCL never builds."""
        # NCCL's graph search binds each ring or tree channel across servers to one NIC port (NET
        # device); a NIC node of several ports is one channel here but that many in NCCL.
        nic_channels = (kept * self.facts.ports_per_nic
                        if nccl_channels and self.facts.nccl_picks_tree_channels else 0)
        if family == "ring":
            if protocol == "LL":
                bus = min(self.facts.ll_max_bw_bytes_per_s, bus * 0.5)
            elif protocol == "LL128":
                bus *= 0.92
                if nic_channels:
                    bus = min(bus, nic_channels * self.facts.ring_ll128_channel_max_bw_bytes_per_s)
        elif family == "tree":
            bus *= 0.92
            if nic_channels and op == "all_reduce":
                bus = min(bus, nic_channels * self.facts.tree_channel_max_bw_bytes_per_s)
            if protocol == "LL":
                bus = min(bus / 3.8, self.facts.ll_max_bw_bytes_per_s)
            elif protocol == "LL128":
                bus *= 7.0 / 9.0 if self.facts.n_nodes == 1 else 120.0 / 128.0
                if nic_channels:
                    bus = min(bus, nic_channels * self.facts.tree_ll128_channel_max_bw_bytes_per_s)
            bus *= tree_correction(protocol, size_bytes)
        elif family == "nvls_tree" and self.facts.generation == "blackwell" and op == "all_reduce":
            # NCCL applies the trees' size correction to NVLS tree on Blackwell (x86 hosts)
            # too (src/graph/tuning.cc@5067397 ncclTopoGetAlgoTime): its ramp differs from Hopper's.
            bus *= tree_correction(protocol, size_bytes)
        return bus

    @cached_property
    def call_overhead_s(self) -> float:
        """Per-call host overhead: the topology's ``launch_overhead_us``, else the transport's own,
        else the fitted default of the scope (one server, or the NICs' transport kind)."""
        if self.facts.spec.launch_overhead_s is not None:
            return self.facts.spec.launch_overhead_s
        if self.facts.crosses_nics:
            transport = self.facts.spec.fabric.transport
            if transport.call_overhead_s is not None:
                return transport.call_overhead_s
            return self.tuning.call_overhead_s(transport.kind)
        return self.tuning.call_overhead_s("node")

    def _window_s(self, pc: PlanCost, protocol: str, op: str, size_bytes: float) -> float:
        """Flow-control bound: a channel keeps at most NCCL_STEPS chunks in flight and a
        chunk slot comes back after one intra + one inter hop latency (NCCL's own hwLat),
        so a channel moves at most ``NCCL_STEPS * chunk / rtt`` bytes/s. Binds only with
        small chunks and slow hops (NVLS tree's 32-64 KiB chunks across servers)."""
        plan = pc.plan
        if self.facts.n_nodes == 1 or plan.algorithm not in ("nvls_tree", "tree"):
            return 0.0
        f = self.facts
        intra_scale, inter_scale, intra_hw, inter_hw = f.intra_hop_scale, f.inter_hop_scale, f.intra_hw, f.inter_hw
        p = PROTOCOLS.index(protocol)
        family = plan.algorithm
        rtt = (HW_LATENCY_US[intra_hw][family][p] * intra_scale
               + HW_LATENCY_US[inter_hw][family][p] * inter_scale) * US
        if rtt <= 0:
            return 0.0
        if family == "nvls_tree":
            chunk = self._nvls_tree_chunk(size_bytes)
            streams = self.facts.nvls.channels
            rtt *= self.tuning.nvls_tree_rtt_scale
        else:
            chunk = min(CHUNK_BYTES[protocol], size_bytes / max(1, plan.channels))
            streams = plan.channels
        return (size_bytes / streams) * rtt / (NCCL_STEPS * chunk)

    def nvls_steps_s(self, op: str, size_bytes: float) -> float:
        """NVLS in chunk steps: each step a channel reduces and multicasts one chunk per head
        (``calcCollChunking``'s chunk, :func:`nvls_steps`); a step takes the fitted
        :meth:`NcclTuning.nvls_step_s`. Reduce-scatter and all-gather run one of all-reduce's two
        switch passes per chunk, so their steps move half its bytes (an assumption: only
        all-reduce is measured). 0 without fitted step constants."""
        steps, chunk = nvls_steps(self.facts.nvls, self.facts.nvls_heads, size_bytes)
        passes = 1.0 if op == "all_reduce" else 0.5
        return steps * self.tuning.nvls_step_s(passes * self.facts.nvls_heads * chunk)

    def _fill_s(self, pc: PlanCost, protocol: str, size_bytes: float, proto_factor: float) -> float:
        """Pipeline fill of a pipelined plan: the first chunk crosses every stage at its own rate,
        slowed by ``proto_factor``, before the pipeline streams (0 for other plans)."""
        plan = pc.plan
        if plan.pipeline_intra == 0 and plan.pipeline_inter == 0:
            return 0.0
        if plan.algorithm == "nvls_tree":
            chunk = self._nvls_tree_chunk(size_bytes)
        elif plan.algorithm == "ring":  # broadcast chain
            chunk = BROADCAST_SLICE_BYTES
        else:
            chunk = CHUNK_BYTES[protocol]
        if plan.algorithm != "nvls_tree":
            chunk = min(chunk, size_bytes / max(1, plan.channels))
        stages = 0.0
        slowest = min(pc.r_intra, pc.r_inter)
        if plan.pipeline_intra and math.isfinite(pc.r_intra):
            stages += plan.pipeline_intra / pc.r_intra
        if plan.pipeline_inter and math.isfinite(pc.r_inter):
            stages += plan.pipeline_inter / pc.r_inter
        if math.isfinite(slowest) and stages > 0:
            stages -= 1.0 / slowest
        return max(0.0, chunk * stages / max(proto_factor, 1e-12))
