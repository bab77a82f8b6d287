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

    Degraded links (``--degrade``) run at a fraction of their calibrated rate: a communicator's
    bus bandwidth is scaled by what is left of the slowest degraded link of the kind its fit
    measured (:func:`~dpsim.network.degrade.calibrated_factors`): GPU links for ``intra_node``,
    NICs for ``inter_node``. A multi-node ring also crosses the GPU links, whose calibrated rate is
    the ``intra_node`` fit's: with them slowed to ``g`` it runs at ``min(f_nic, g x H)`` of its own,
    ``H`` the profile's headroom, its peak ``intra_node`` all-reduce bus bandwidth over its peak
    ``inter_node`` one (so NVLink at half its rate leaves a NIC-bound ring as it was, and at a tenth
    paces it). Latencies are kept: a slower link moves the bytes, not the launch.

    An op the profile did not measure on that link class is derived from the class's
    all-reduce fit, as the ring model relates them: per-step latency ``a / steps(AR, N0)``
    and the same busbw B (reduce-scatter and all-gather are each half a ring all-reduce;
    a broadcast is a pipelined chain of ``N - 1`` hops). ``sendrecv`` is never needed by
    the engine; it is reported only.

Compute (:func:`calibrated_device`, :func:`measured_compute`)
    Measured best matmul FLOP/s per dtype replace the GPU preset's *achieved* rates (the
    peaks, used for MFU, stay), and the measured copy bandwidth replaces the memory
    bandwidth (which sets the optimizer step). ``--compute-efficiency`` still applies on
    top, as it does to the preset's rates. A profile measured on CPUs describes a CPU
    cluster: its device replaces the GPU preset altogether (:func:`calibrated_device`:
    the CPU's name, the host's memory shared by its ranks, no peak and so no MFU).

    When the profile timed the same model (:mod:`dpsim.profile.match`: its traced
    structure, what it is fed, the micro-batch and the dtype), the measured step replaces
    the modelled one unless the user gave ``--single-gpu-step-ms``: layer by layer when the
    profile split it per traced layer, else scaled to the modelled proportions; and the
    measured optimizer step too when it timed the same optimizer (or the model file's own).
    With DDP, each gradient's copy into its bucket and back (torch's default
    ``gradient_as_bucket_view=False``: ``Reducer::mark_variable_ready_dense`` and
    ``copy_bucket_to_grad`` in ``torch/csrc/distributed/c10d/reducer.cpp``), which a
    single replica's step does not run, is added to the backward of the layer that made
    it, at the measured copy bandwidth.

    A measured ``overlap_slowdown`` (compute slowed while a collective runs) is the
    default ``--overlap-slowdown``, and a measured ``comm_slowdown`` (a collective slowed
    while compute runs) is played by the engine.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import replace

from dpsim.collectives.ops import (
    CollectiveResult,
    bus_factor,
    check_message,
    ring_steps,
)
from dpsim.errors import ConfigError, ProfileError, UncalibratedLinkClass
from dpsim.hardware import GPU_PRESETS, GpuSpec
from dpsim.profile.fit import Segment, piecewise_time
from dpsim.profile.schema import ModelStep, OpCalibration, Profile
from dpsim.wording import count
from dpsim.workload.spec import ModelSpec

HIGH_CV = 0.05
"""A measured spread (step-time CV, or a size's 95 % interval half-width over its mean)
above which predict warns that the profile's number is uncertain."""


class CalibratedCollectives:
    """Collective costs from a profile's fits, for a communicator of ``n_ranks`` on ``n_nodes``.

    ``concurrent`` identical communicators share the links the fit was measured on (FSDP
    hybrid sharding's ``inter`` groups, one per GPU of a node, share the node's NICs): each
    gets ``1 / concurrent`` of the measured bus bandwidth, as the flow model gives each its
    share of the NICs. ``degraded``: the capacity ``--degrade`` leaves the slowest ``gpu`` and ``nic``
    link the communicator crosses (:func:`~dpsim.network.degrade.calibrated_factors`; the module
    docstring says how they scale it).
    """

    def __init__(self, profile: Profile, n_ranks: int, n_nodes: int = 1, *, concurrent: int = 1,
                 degraded: dict[str, float] | None = None):
        if n_ranks < 1 or n_nodes < 1:
            raise ConfigError(f"--gpus: {count(n_ranks, 'rank')} on {count(n_nodes, 'node')} is not valid; expected >= 1 each")
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
            raise UncalibratedLinkClass(
                f"--calibration: {where} has no {self.link_class} measurements (it has: {have}); "
                f"a communicator of {n_ranks:,} ranks on {n_nodes:,} node{'s' if n_nodes > 1 else ''} needs {need}",
                self.link_class)
        self.notes: list[str] = []
        """Caveats found while predicting (derived ops, extrapolated sizes)."""
        self.bandwidth_factor = degraded_bandwidth_factor(profile, self.link_class, degraded or {})
        """Share of the calibrated bus bandwidth degraded links leave (1: healthy)."""
        self.class_factors: dict[str, float] = {}
        """Per link class, what ``--degrade`` leaves its slowest link (set by
        :func:`~dpsim.predict.run.build_collectives`): the fabric's all-to-alls beside the fits are paced by it."""

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
            busbw = cal.bus_bandwidth_bytes_per_s(seg) / self.concurrent * self.bandwidth_factor
            transfer = factor * size / busbw if math.isfinite(busbw) else 0.0
            return seg.latency_s * step_ratio + transfer

        total = piecewise_time(cal.fit.segments, size_bytes, piece)
        latency = piecewise_time(cal.fit.segments, size_bytes,
                                 lambda seg, size: seg.latency_s * step_ratio)
        return CollectiveResult(op=op, algorithm="calibrated", n_ranks=n, size_bytes=size_bytes,
                                time_s=total, latency_s=min(latency, total))


def calibrated_collectives(profile: Profile, topology, *, concurrent: int = 1,
                           degraded: dict[str, float] | None = None) -> CalibratedCollectives:
    """The calibrated model for a :class:`~dpsim.topology.Topology`'s ranks and nodes
    (``concurrent``, ``degraded``: see :class:`CalibratedCollectives`)."""
    return CalibratedCollectives(profile, topology.n_gpus, topology.n_nodes, concurrent=concurrent,
                                 degraded=degraded)


def peak_bus_bandwidth(profile: Profile, link_class: str) -> float | None:
    """The highest bus bandwidth of ``link_class``'s all-reduce fit (its large-message pieces), if measured."""
    cal = profile.op(link_class, "all_reduce")
    if cal is None:
        return None
    rates = [b for b in (cal.bus_bandwidth_bytes_per_s(seg) for seg in cal.fit.segments) if math.isfinite(b)]
    return max(rates) if rates else None


def degraded_bandwidth_factor(profile: Profile, link_class: str, degraded: dict[str, float]) -> float:
    """Share of ``link_class``'s calibrated bus bandwidth that degraded links leave (the module docstring):
    ``intra_node`` its GPU links' ``g``; ``inter_node`` ``min(f_nic, g x H)``, ``H`` the headroom of the
    profile's GPU links over its NIC-bound ring (a :class:`~dpsim.errors.ProfileError` when slowed GPU links
    meet a profile without both all-reduce fits to tell it)."""
    g, nic = degraded.get("gpu", 1.0), degraded.get("nic", 1.0)
    if link_class == "intra_node":
        return g
    if g >= 1.0:
        return nic
    intra, inter = peak_bus_bandwidth(profile, "intra_node"), peak_bus_bandwidth(profile, "inter_node")
    if intra is None or inter is None:
        raise ProfileError(f"--degrade: GPU links at {100 * g:.3g} % with --calibration {profile.path or profile.name}: "
                           f"a multi-node ring crosses them too, and the profile has no "
                           f"{'intra_node' if intra is None else 'inter_node'} all_reduce fit to say how far their "
                           f"rate is above its NICs'; calibrate on one node and across nodes, or leave one out")
    return min(nic, g * intra / inter)


def measures_compute(profile: Profile) -> bool:
    """Whether ``profile`` measured how fast the device computes (matmul rates, or a model's training step): a
    profile of collectives alone (``"compute": null``) leaves the compute to the GPU preset, as without it."""
    c = profile.compute
    return c is not None and bool(c.matmul_flops_per_s or c.model_step is not None or c.op_rates is not None)


def calibrated_gpu(profile: Profile, gpu: GpuSpec) -> GpuSpec:
    """``gpu`` with the profile's measured matmul rates and memory bandwidth, if any."""
    c = profile.compute
    if c is None:
        return gpu
    achieved = dict(gpu.achieved_flops_per_s)
    achieved.update(c.matmul_flops_per_s)
    bandwidth = c.memory_bandwidth_bytes_per_s or gpu.memory_bandwidth_bytes_per_s
    # A measured copy is a streaming measurement: the roofline's memory rate too.
    stream = c.memory_bandwidth_bytes_per_s or gpu.stream_bandwidth_bytes_per_s
    return replace(gpu, achieved_flops_per_s=achieved, memory_bandwidth_bytes_per_s=bandwidth,
                   stream_bandwidth_bytes_per_s=stream,
                   sources=gpu.sources + (f"compute measured on {c.device} (profile {profile.name})",))


# A GPU model as nccl-tests' device list and torch.cuda.get_device_name spell it within a longer name: "A100" in
# "NVIDIA A100-SXM4-80GB" and in "AWS p4de.24xlarge x2 (16x A100 80GB)", "H100" in "NVIDIA H100 80GB HBM3", "MI300X",
# "L40S", "GH200"; the GPU presets' descriptions spell theirs the same way ("NVIDIA H100 SXM5 80GB").
_GPU_MODEL = re.compile(r"(?<![A-Za-z0-9])([A-Z]{1,2}\d{2,3}[A-Z]?)(?![A-Za-z0-9])")


def gpu_models(device_names: Iterable[str]) -> frozenset[str]:
    """The GPU models ``device_names`` name (each name itself where it spells none dpsim recognises)."""
    return frozenset(next((m.group(1) for m in _GPU_MODEL.finditer(d)), d) for d in device_names)


def _recognised_models(names: Iterable[str]) -> frozenset[str]:
    return frozenset(m.group(1) for d in names for m in [_GPU_MODEL.search(d)] if m)


def other_gpu_note(profile: Profile, gpu: GpuSpec, flag: str = "--gpu") -> str | None:
    """Why ``profile``'s rates may not be ``gpu``'s: the line to warn with when the profile names the GPU models
    it was measured on (its ``environment.device_names``, its compute ``device``) and ``gpu``'s is not one of them;
    ``None`` when it is, when either names no model dpsim recognises, or for a CPU profile (no GPU preset used).

    A warning, not a refusal: an inter-node fit is mostly the NICs', which a what-if on another GPU's nodes may
    mean to keep; but every intra-node fit is the measured GPUs' links (NVLink3 on A100, NVLink4 on H100), and
    measured compute rates replace the preset's (:func:`calibrated_gpu`), so the user is told which of them came
    from another GPU and how to match them."""
    if is_cpu_profile(profile):
        return None
    names = [d for d in profile.environment.get("device_names") or () if isinstance(d, str)]
    if profile.compute is not None and profile.compute.device:
        names.append(profile.compute.device)
    measured = _recognised_models(names)
    ours = _recognised_models([gpu.description])
    if not measured or not ours or ours & measured:
        return None
    rates = ", ".join(part for part, on in (("intra-node collective fits", "intra_node" in profile.link_classes),
                                            ("inter-node collective fits", "inter_node" in profile.link_classes),
                                            ("compute rates", measures_compute(profile))) if on)
    presets = [m.lower() for m in sorted(measured) if m.lower() in GPU_PRESETS]
    match = f"give --gpu {' or '.join(presets)} to match it, or " if presets else ""
    return (f"{flag} {gpu.name}: the calibration profile {profile.name!r} was measured on "
            f"{', '.join(sorted(measured))}, not {', '.join(sorted(ours))}; its {rates or 'rates'} are that GPU's "
            f"({match}calibrate on {', '.join(sorted(ours))})")


def is_cpu_profile(profile: Profile) -> bool:
    """Whether the profile was measured on CPUs (gloo ranks without GPUs)."""
    env = profile.environment
    if env.get("device_type") is not None:
        return env.get("device_type") == "cpu"
    return env.get("backend") == "gloo" and profile.compute is not None


def profile_ranks_per_node(profile: Profile) -> int | None:
    """Ranks per node of the profile's multi-node communicator (or of its one node when it
    measured only inside one), the natural ``--gpus-per-node`` of a prediction with it."""
    inter = profile.link_classes.get("inter_node")
    if inter and inter["n_ranks"] % inter["n_nodes"] == 0:
        return inter["n_ranks"] // inter["n_nodes"]
    rpn = profile.environment.get("ranks_per_node")
    if isinstance(rpn, list) and rpn and len(set(rpn)) == 1 and isinstance(rpn[0], int) and rpn[0] >= 1:
        return rpn[0]
    return None


def calibrated_device(profile: Profile, gpu: GpuSpec) -> GpuSpec:
    """The device a prediction with ``profile`` runs on: ``gpu`` with the measured rates
    (:func:`calibrated_gpu`), or, for a CPU profile, the CPU it measured (no GPU preset's
    numbers: its measured matmul rates and copy bandwidth, the host's memory over the
    host's ranks, and no peak, so no MFU)."""
    if not is_cpu_profile(profile):
        return calibrated_gpu(profile, gpu)
    c = profile.compute
    env = profile.environment
    per_host = profile_ranks_per_node(profile) or 1
    memory = env.get("device_memory_bytes")
    rates = dict(c.matmul_flops_per_s) if c is not None else {}
    if "float32" in rates:
        rates.setdefault("float32-highest", rates["float32"])  # no TF32 on a CPU: one float32 rate
    return GpuSpec(
        name="cpu",
        description=f"{c.device if c is not None else 'CPU'} (profile {profile.name})",
        peak_flops_per_s={},
        achieved_flops_per_s=rates,
        memory_bytes=float(memory) / per_host if isinstance(memory, (int, float)) and memory > 0 else math.inf,
        memory_bandwidth_bytes_per_s=(c.memory_bandwidth_bytes_per_s if c is not None
                                      and c.memory_bandwidth_bytes_per_s else gpu.memory_bandwidth_bytes_per_s),
        sources=(f"measured by dpsim calibrate on {c.device if c is not None else 'CPUs'} (profile {profile.name})",),
    )


def measured_compute(step: ModelStep, model: ModelSpec, compute, *, optimizer: str, ddp_copy_bandwidth: float | None):
    """``compute`` (a :class:`~dpsim.workload.compute.ComputeProfile` of ``model``) with the
    measured step in it (see the module docstring); returns ``(compute, details)``.

    ``details`` says what was measured: ``layers`` ("per traced layer" or "scaled to the
    model's proportions"), ``optimizer`` ("measured" or why modelled), ``ddp_copy_s``.
    """
    names = [layer.name for layer in model.layers]
    by_name = {l.name: l for l in step.layers}
    details: dict = {}
    if step.layers_traced and set(by_name) == set(names) and len(by_name) == len(names):
        # A layer's FP8 weight casts keep their share of its forward (LayerTime.fp8_weight_cast_s).
        layers = tuple(replace(l, forward_s=by_name[l.name].forward_s, backward_s=by_name[l.name].backward_s,
                               fp8_weight_cast_s=l.fp8_weight_cast_s * by_name[l.name].forward_s / l.forward_s
                               if l.forward_s > 0 else 0.0)
                       for l in compute.layers)
        details["layers"] = "per traced layer"
    else:
        compute = with_measured_step(compute, step.forward_s + step.backward_s)
        layers = compute.layers
        details["layers"] = "whole step, split in the model's proportions"
    copy_s = 0.0
    if ddp_copy_bandwidth:
        sizes = {p.name: p.size_bytes for p in model.params}
        layers = tuple(replace(l, backward_s=l.backward_s + sum(2 * sizes[n] for n in l.param_names)
                               / ddp_copy_bandwidth) for l in layers)
        copy_s = sum(2 * sizes[n] for n in sizes) / ddp_copy_bandwidth
    details["ddp_copy_s"] = copy_s
    optimizer_s = compute.optimizer_s
    if step.optimizer_s is not None and step.optimizer in (optimizer, "optimizer()"):
        # The measured step neither clips nor zeroes in a loop: what those options add stays modelled.
        optimizer_s = step.optimizer_s + compute.step_options_s
        details["optimizer"] = f"measured ({step.optimizer})" + (
            f" + {compute.step_options_s * 1e3:.3g} ms modelled clipping/zero_grad loop"
            if compute.step_options_s else "")
    elif step.optimizer_s is not None:
        details["optimizer"] = f"modelled: the profile timed {step.optimizer}, not {optimizer}"
    else:
        details["optimizer"] = "modelled: the profile did not time an optimizer"
    return replace(compute, layers=layers, optimizer_s=optimizer_s), details


def range_warnings(profile: Profile, link_class: str, sizes_bytes) -> list[str]:
    """Warnings for message sizes outside the profile's measured range, or noisy measurements near them."""
    out = []
    cal = profile.op(link_class, "all_reduce")
    sizes = [s for s in sizes_bytes if s > 0]
    if cal is None or not cal.measurements or not sizes:
        return out
    lo = min(m.size_bytes for m in cal.measurements)
    hi = max(m.size_bytes for m in cal.measurements)
    big = [s for s in sizes if s > hi * 1.0001]
    small = [s for s in sizes if s < lo * 0.9999]
    if big:
        out.append(f"{len(big)} all-reduce(s) of up to {_bytes(max(big))} are larger than the profile measured "
                   f"({link_class} up to {_bytes(hi)}): extrapolated; calibrate with a larger -e")
    if small:
        out.append(f"{len(small)} all-reduce(s) of {_bytes(min(small))} and up are smaller than the profile "
                   f"measured ({link_class} from {_bytes(lo)}): extrapolated; calibrate with a smaller -b")
    noisy = [m for m in cal.measurements if m.ci_low_s is not None and m.ci_high_s is not None and m.mean_s
             and (m.ci_high_s - m.ci_low_s) / 2 > HIGH_CV * m.mean_s and lo <= m.size_bytes
             and any(m.size_bytes / 2 <= s <= m.size_bytes * 2 for s in sizes)]
    if noisy:
        worst = max(noisy, key=lambda m: (m.ci_high_s - m.ci_low_s) / m.mean_s)
        out.append(f"the profile's {link_class} all-reduce at {_bytes(worst.size_bytes)} is known only to "
                   f"+-{50 * (worst.ci_high_s - worst.ci_low_s) / worst.mean_s:.0f} % (95 %): a noisy "
                   "measurement near this job's bucket sizes")
    return out


def step_warnings(step: ModelStep) -> list[str]:
    """Warnings for a noisy measured step."""
    out = []
    if step.step_time_cv is not None and step.step_time_cv > HIGH_CV:
        out.append(f"the measured step varied by {100 * step.step_time_cv:.0f} % (CV) between repeats: the "
                   "compute times are uncertain (outside load while calibrating?)")
    if (step.step_time_mean_s and step.step_time_ci_low_s is not None and step.step_time_ci_high_s is not None
            and (step.step_time_ci_high_s - step.step_time_ci_low_s) / 2 > HIGH_CV * step.step_time_mean_s):
        out.append(f"the measured step's mean is known only to +-"
                   f"{50 * (step.step_time_ci_high_s - step.step_time_ci_low_s) / step.step_time_mean_s:.0f} % (95 %)")
    return out


def _bytes(n: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"


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
    layers = tuple(replace(l, forward_s=l.forward_s * k, backward_s=l.backward_s * k,
                           fp8_weight_cast_s=l.fp8_weight_cast_s * k) for l in compute.layers)
    return replace(compute, layers=layers)


def calibrated_overlap_slowdown(profile: Profile) -> float | None:
    """The measured compute slowdown under a concurrent collective, if measured."""
    return None if profile.compute is None else profile.compute.overlap_slowdown


def calibrated_comm_slowdown(profile: Profile) -> float | None:
    """The measured all-reduce slowdown while every rank computes, if measured."""
    return None if profile.compute is None else profile.compute.comm_slowdown


def calibrated_noise_cv(profile: Profile) -> float | None:
    """The measured step-time coefficient of variation (``predict``'s default ``--noise-cv``), if recorded.

    It is the timing jitter of the calibrated machine, so it applies to any model predicted
    with the profile, not only the one whose step was measured.
    """
    c = profile.compute
    return None if c is None or c.model_step is None else c.model_step.step_time_cv
