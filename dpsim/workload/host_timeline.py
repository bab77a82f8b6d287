"""When the host falls behind the GPU after a host synchronisation.

dpsim charges every kernel the longer of its GPU time and its dispatch
(:data:`~dpsim.workload.roofline.HOST_OVERHEAD_PER_OP_S`): right for a stretch of kernels shorter than their
dispatch, and an under-count only of one dispatch where kernels are long, because the CPU runs ahead of
the GPU and queues work. A host synchronisation (a device-to-host copy the host waits for: ``.item()``,
``.tolist()``, ``nonzero``, DeepEP's busy-wait on the received token counts) empties that queue. From there
on, op ``k`` of the ``n`` the host dispatches next cannot start before the host has dispatched ops ``1..k``,
so the stretch ends no earlier than

    max over k of ( host_1 + ... + host_k  +  gpu_k + ... + gpu_n )

(:func:`segment_time_s`; k = 1 is the GPU's own sum plus one dispatch, k = n the host's sum plus the last
kernel). Where the host's per-call cost is larger than the eager dispatch, a framework module's Python and
bookkeeping (a TransformerEngine module call, a grouped GEMM's per-expert launches and allocations), that
maximum can exceed what dpsim charges; the difference is GPU idle time (:func:`segment_excess_s`). Where
every op is charged the longer of its kernel and its dispatch, a stretch gains at most one op's shorter
side (the binding op k is counted on both clocks, every other op on one), so a synchronisation after
plain eager ops costs at most one dispatch: only host time that no op's charge holds can add more.
Without a synchronisation the host runs ahead and nothing here changes.

A model states where its host waits and what its framework's module calls cost on the host with
zero-cost marker ops (:func:`sync_marker`, :func:`call_marker`): they stream nothing, so every path that
does not read them is unchanged; :func:`dpsim.workload.compute.compute_profile` times the stretches they
delimit (:func:`timeline_excess_s`).
"""

from __future__ import annotations

from collections.abc import Sequence

from dpsim.workload.roofline import HOST_OVERHEAD_PER_OP_S
from dpsim.workload.spec import MemoryOp, OpSpec

HOST_SYNC = "host.sync"
"""Name of the marker op at which the host waits for the GPU in the forward pass."""

HOST_SYNC_BACKWARD = "host.sync.backward"
"""Name of the marker op at which the host waits for the GPU in the backward pass (the backward runs the
layer's ops in reverse, so the wait falls before the ops listed ahead of the marker)."""

HOST_CALL_PREFIX = "host.call."
"""Names of the marker ops that charge a framework call's host time: ``host.call.<kind>x<count>``,
``count`` calls of :data:`HOST_CALL_S`'s ``kind`` (the host dispatches them before the op that follows)."""

TE_MODULE_CALL_S = 99.66e-6
"""CPU time of one TransformerEngine module forward (``te.Linear``, BF16, hidden 2048, 8,192 tokens):
99.66 µs on GB200, 90.53 µs on GH200 (NVIDIA/TransformerEngine issue 2053, "High CPU overhead on Grace
systems", 2025-08-11, description table). The issue measures TE only on Grace; on the H100 DGX's Xeon
8480C the same table has ``torch.nn.Linear`` at 13.48 µs against 33.17 µs on GH200, so the larger Grace
figure is an upper bound for an x86 host. The backward is charged the same (no measurement found)."""

GEMM_LAUNCH_S = 13.48e-6
"""CPU time of one ``torch.nn.Linear`` forward on an H100 DGX (Xeon 8480C), one cuBLAS GEMM with its
Python and dispatch (NVIDIA/TransformerEngine issue 2053, description table): what each expert's GEMM
launch of a grouped linear costs at most."""

GROUPED_GEMM_ALLOCATIONS = 2
"""Tensor allocations a TransformerEngine ``GroupedLinear`` makes per GEMM: ``torch.empty()``, "2x
``num_gemms`` calls", with ``torch.split()`` of the input, named by TE's maintainer as the CPU overhead
between the GEMMs (NVIDIA/TransformerEngine issue 1499, comment of 2025-02-24, on release_v1.13
``grouped_linear.py`` line 81 and ``csrc/extensions/transpose.cpp`` lines 377-380); each costed as one
eager op's dispatch (:data:`~dpsim.workload.roofline.HOST_OVERHEAD_PER_OP_S`), an upper bound for an
allocation that launches no kernel."""


def _host_call_s() -> dict[str, tuple[float, float]]:
    per_expert = GEMM_LAUNCH_S + GROUPED_GEMM_ALLOCATIONS * HOST_OVERHEAD_PER_OP_S
    return {
        # One TransformerEngine module call (Linear, LayerNormLinear, RMSNorm, DotProductAttention, the
        # fused permutation), forward and backward.
        "te_module": (TE_MODULE_CALL_S, TE_MODULE_CALL_S),
        # One expert of a grouped linear: its GEMM launch and allocations forward; the data and weight
        # gradient GEMMs and their allocations backward.
        "grouped_gemm": (per_expert, 2 * per_expert),
    }


HOST_CALL_S = _host_call_s()
"""Host seconds (forward, backward) of one call of each kind a :func:`call_marker` names."""


def sync_marker(*, backward: bool = False) -> MemoryOp:
    """A zero-cost op marking where the host waits for the GPU (forward, or ``backward``)."""
    return MemoryOp(name=HOST_SYNC_BACKWARD if backward else HOST_SYNC, elements=0.0, forward=())


def call_marker(kind: str, count: int = 1) -> MemoryOp:
    """A zero-cost op charging ``count`` host calls of ``kind`` (:data:`HOST_CALL_S`) before the next op."""
    if kind not in HOST_CALL_S:
        raise KeyError(kind)
    return MemoryOp(name=f"{HOST_CALL_PREFIX}{kind}x{int(count)}", elements=0.0, forward=())


def is_marker(op: OpSpec) -> bool:
    """Whether ``op`` is one of this module's markers."""
    return op.name.startswith("host.")


def marker_host_s(op: OpSpec) -> tuple[float, float]:
    """(forward, backward) host seconds a call marker charges (0 for a sync marker)."""
    if not op.name.startswith(HOST_CALL_PREFIX):
        return 0.0, 0.0
    kind, _, count = op.name[len(HOST_CALL_PREFIX):].rpartition("x")
    fwd, bwd = HOST_CALL_S[kind]
    return fwd * int(count), bwd * int(count)


def has_host_timeline(ops: Sequence[OpSpec]) -> bool:
    """Whether ``ops`` name a host synchronisation (forward or backward)."""
    return any(op.name in (HOST_SYNC, HOST_SYNC_BACKWARD) for op in ops)


def segment_time_s(gpu_s: Sequence[float], host_s: Sequence[float]) -> float:
    """Seconds from an empty GPU queue until the GPU finishes ``n`` ops whose kernels take ``gpu_s`` and
    whose dispatch takes ``host_s`` on the host, in order: ``max_k (sum host[:k+1] + sum gpu[k:])``."""
    assert len(gpu_s) == len(host_s)
    best = 0.0
    host = 0.0
    rest = float(sum(gpu_s))
    for g, h in zip(gpu_s, host_s):
        host += h
        best = max(best, host + rest)
        rest -= g
    return best


def segment_excess_s(gpu_s: Sequence[float], host_s: Sequence[float], charged_s: float) -> float:
    """GPU idle seconds of a stretch after a synchronisation beyond the ``charged_s`` already counted
    for its ops (never negative: a stretch the charge already covers adds nothing)."""
    return max(0.0, segment_time_s(gpu_s, host_s) - charged_s)


def timeline_excess_s(ops: Sequence[tuple[float, float, float, bool]]) -> list[float]:
    """Per op, the idle seconds charged at it: ``ops`` in the order the host dispatches them, each
    ``(gpu_s, host_s, charged_s, sync)``, ``sync`` True for a marker at which the host waits. Each stretch
    from a synchronisation up to the next (or to the end) gets :func:`segment_excess_s`, charged at the
    synchronisation that starts it; ops before the first synchronisation are left as they are (the host
    may be ahead there)."""
    out = [0.0] * len(ops)
    start = None
    gpu: list[float] = []
    host: list[float] = []
    charged = 0.0

    def close() -> None:
        if start is not None and gpu:
            out[start] += segment_excess_s(gpu, host, charged)

    for i, (g, h, c, sync) in enumerate(ops):
        if sync:
            close()
            start, gpu, host, charged = i, [], [], 0.0
            continue
        if start is not None:
            gpu.append(g)
            host.append(h)
            charged += c
    close()
    return out
