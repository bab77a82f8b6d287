"""Using a profile in predictions: a calibrated collective model and compute rates.

Collectives (:class:`CalibratedCollectives`, a :class:`~dpsim.collectives.CollectiveModel`)
    A profile holds, per link class and op, a piecewise fit measured on a communicator
    of ``N0`` ranks: ``T(S) = a + f(op, N0) * S / B`` on each size range, with ``f`` the
    nccl-tests bus factor and B the bus bandwidth. It is the ring's alpha-beta cost
    ``steps * alpha + steps * (S/N) / B`` with the measured numbers in it, so a
    communicator of ``N`` ranks is predicted the way a ring scales:

    - bandwidth: the busbw B of a ring does not depend on N, so the transfer term is
      ``f(op, N) * S / B``;
    - latency: the fitted intercept ``a`` is charged to the ring's steps (no separate
      base latency can be told apart from one N), so it scales with the step count,
      ``a * steps(op, N) / steps(op, N0)`` (``2(N-1)`` for all-reduce, ``N-1`` for the
      others). This is exact for N = N0 and follows the ring model elsewhere; NCCL's
      trees make large-N latency grow like log N instead, so latency-bound sizes at
      N >> N0 are predicted pessimistically;
    - the size ranges (protocol/algorithm changes) are kept in bytes of the whole buffer,
      and between two pieces the time is interpolated in log-log as in the fit.

    The link class follows the prediction: one node uses ``intra_node``; several nodes
    use ``inter_node``, measured on a communicator spanning nodes, whose busbw already is
    the multi-node ring's bottleneck (NICs) and whose mean hop latency mixes intra and
    inter hops in the measured node's proportion (the same for any node count with the
    same GPUs per node). A prediction needing a link class the profile lacks is refused
    with :class:`~dpsim.errors.ProfileError` rather than silently mixing measured and
    preset numbers: a profile from one node cannot speak for a fabric it never used.
    Every communicator of the job is costed this way (:class:`dpsim.collectives.groups.GroupCollectives`):
    FSDP hybrid sharding's ``intra`` groups from ``intra_node``, its ``inter`` groups from
    ``inter_node`` with the node's bandwidth shared by the node's concurrent groups.

    An op the profile did not measure on that link class is derived from the class's
    all-reduce fit, as the ring model relates them: per-step latency ``a / steps(AR, N0)``
    and the same busbw B (reduce-scatter and all-gather are each half a ring all-reduce;
    a broadcast is a pipelined chain of ``N - 1`` hops). ``sendrecv`` is never needed by
    the engine; it is reported only.

Compute (:func:`calibrated_gpu`, :func:`measured_step_s`)
    Measured best matmul FLOP/s per dtype replace the GPU preset's *achieved* rates (the
    peaks, used for MFU, stay), and the measured copy bandwidth replaces the memory
    bandwidth (which sets the optimizer step). ``--compute-efficiency`` still applies on
    top, as it does to the preset's rates. When the profile timed the same model at the
    same micro-batch and dtype, its measured forward + backward replaces the modelled one
    (the optimizer stays modelled) unless the user gave ``--single-gpu-step-ms``.
    A measured ``overlap_slowdown`` is the CLI's default for ``--overlap-slowdown``.
"""

from __future__ import annotations

import math
from dataclasses import replace

from dpsim.collectives.ops import (
    CollectiveResult,
    bus_factor,
    check_message,
    ring_steps,
)
from dpsim.errors import ConfigError, ProfileError
from dpsim.hardware import GpuSpec
from dpsim.profile.fit import Segment, piecewise_time
from dpsim.profile.schema import OpCalibration, Profile


class CalibratedCollectives:
    """Collective costs from a profile's fits, for a communicator of ``n_ranks`` on ``n_nodes``.

    ``concurrent`` identical communicators share the links the fit was measured on (FSDP
    hybrid sharding's ``inter`` groups, one per GPU of a node, share the node's NICs): each
    gets ``1 / concurrent`` of the measured bus bandwidth, as the flow model gives each its
    share of the NICs.
    """

    def __init__(self, profile: Profile, n_ranks: int, n_nodes: int = 1, *, concurrent: int = 1):
        if n_ranks < 1 or n_nodes < 1:
            raise ConfigError(f"--gpus: {n_ranks} ranks on {n_nodes} nodes is not valid; expected >= 1 each")
        assert concurrent >= 1, "at least the communicator itself runs"
        self.profile = profile
        self.n_ranks = n_ranks
        self.n_nodes = n_nodes
        self.concurrent = concurrent
        self.link_class = "intra_node" if n_nodes == 1 else "inter_node"
        where = profile.path or profile.name
        if n_ranks > 1 and self.link_class not in profile.link_classes:
            have = ", ".join(profile.link_classes) or "none"
            need = ("a multi-node communicator: calibrate under torchrun across nodes, or fit "
                    "nccl-tests logs from a multi-node run" if self.link_class == "inter_node"
                    else "a single-node communicator: calibrate on one node")
            raise ProfileError(
                f"--calibration: {where} has no {self.link_class} measurements (it has: {have}); "
                f"a prediction on {n_nodes} node{'s' if n_nodes > 1 else ''} needs {need}")
        self.notes: list[str] = []
        """Caveats found while predicting (derived ops, extrapolated sizes)."""

    def _source(self, op: str) -> tuple[OpCalibration, str]:
        own = self.profile.op(self.link_class, op)
        if own is not None:
            return own, op
        ar = self.profile.op(self.link_class, "all_reduce")
        if ar is None:
            have = ", ".join(o for (lc, o) in self.profile.ops if lc == self.link_class)
            wanted = "all_reduce fit" if op == "all_reduce" else f"{op} fit, nor an all_reduce fit to derive it from"
            raise ProfileError(
                f"--calibration: {self.profile.path or self.profile.name} has no {self.link_class} "
                f"{wanted} (it has: {have})")
        note = f"{self.link_class} {op} derived from the all_reduce fit (ring relations)"
        if note not in self.notes:
            self.notes.append(note)
        return ar, "all_reduce"

    def time(self, op: str, size_bytes: float) -> CollectiveResult:
        """Cost of ``op`` on ``size_bytes`` over the ``n_ranks`` ranks."""
        n = self.n_ranks
        check_message(op, size_bytes, n)
        if n == 1 or size_bytes == 0:
            return CollectiveResult(op=op, algorithm="calibrated", n_ranks=n, size_bytes=size_bytes,
                                    time_s=0.0, latency_s=0.0)
        cal, fitted_op = self._source(op)
        step_ratio = ring_steps(op, n) / ring_steps(fitted_op, cal.n_ranks)
        factor = bus_factor(op, n)

        def piece(seg: Segment, size: float) -> float:
            busbw = cal.bus_bandwidth_bytes_per_s(seg) / self.concurrent
            transfer = factor * size / busbw if math.isfinite(busbw) else 0.0
            return seg.latency_s * step_ratio + transfer

        total = piecewise_time(cal.fit.segments, size_bytes, piece)
        latency = piecewise_time(cal.fit.segments, size_bytes,
                                 lambda seg, size: seg.latency_s * step_ratio)
        return CollectiveResult(op=op, algorithm="calibrated", n_ranks=n, size_bytes=size_bytes,
                                time_s=total, latency_s=min(latency, total))


def calibrated_collectives(profile: Profile, topology, *, concurrent: int = 1) -> CalibratedCollectives:
    """The calibrated model for a :class:`~dpsim.topology.Topology`'s ranks and nodes
    (``concurrent``: see :class:`CalibratedCollectives`)."""
    return CalibratedCollectives(profile, topology.n_gpus, topology.n_nodes, concurrent=concurrent)


def calibrated_gpu(profile: Profile, gpu: GpuSpec) -> GpuSpec:
    """``gpu`` with the profile's measured matmul rates and memory bandwidth, if any."""
    c = profile.compute
    if c is None:
        return gpu
    achieved = dict(gpu.achieved_flops_per_s)
    achieved.update(c.matmul_flops_per_s)
    bandwidth = c.memory_bandwidth_bytes_per_s or gpu.memory_bandwidth_bytes_per_s
    return replace(gpu, achieved_flops_per_s=achieved, memory_bandwidth_bytes_per_s=bandwidth,
                   sources=gpu.sources + (f"compute measured on {c.device} (profile {profile.name})",))


def measured_step_s(profile: Profile, *, model: str, micro_batch: int, dtype: str) -> float | None:
    """Measured forward + backward of ``model`` at ``micro_batch`` in ``dtype``, if the profile has it."""
    c = profile.compute
    if c is None or c.model_step is None:
        return None
    s = c.model_step
    if s.model != model or s.micro_batch != micro_batch or s.dtype != dtype:
        return None
    return s.forward_s + s.backward_s


def with_measured_step(compute, forward_backward_s: float):
    """``compute`` (a :class:`~dpsim.workload.compute.ComputeProfile`) with every layer scaled
    so forward + backward take ``forward_backward_s``; the optimizer step is kept."""
    modelled = compute.forward_s + compute.backward_s
    if modelled <= 0:
        return compute
    k = forward_backward_s / modelled
    layers = tuple(replace(l, forward_s=l.forward_s * k, backward_s=l.backward_s * k) for l in compute.layers)
    return replace(compute, layers=layers)


def calibrated_overlap_slowdown(profile: Profile) -> float | None:
    """The measured compute slowdown under a concurrent collective, if measured."""
    return None if profile.compute is None else profile.compute.overlap_slowdown


def calibrated_noise_cv(profile: Profile) -> float | None:
    """The measured step-time coefficient of variation (``predict``'s default ``--noise-cv``), if recorded.

    It is the timing jitter of the calibrated machine, so it applies to any model predicted
    with the profile, not only the one whose step was measured.
    """
    c = profile.compute
    return None if c is None or c.model_step is None else c.model_step.step_time_cv
