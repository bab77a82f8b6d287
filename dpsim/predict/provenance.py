"""Where every number of a prediction came from: a calibration profile, a flag, or a model/preset.

A prediction mixes measured and modelled numbers; :class:`Provenance` says which is which
for compute, the network and the overlap (in the table and in ``--json``'s ``provenance``
block), and lists what makes a number uncertain (sizes beyond what the profile measured,
noisy measurements, a measured step that could not be used and why).

With a profile (:func:`apply_profile`): the measured step replaces the modelled compute
when it is the same model (:mod:`dpsim.profile.match`), else (or with ``--op-rates``) the
measured kernel rates cost the op graph (:mod:`dpsim.profile.op_rates`); the fitted collectives replace
NCCL's model, the measured slowdowns set the overlap, and a CPU profile predicts a CPU
cluster (:func:`dpsim.profile.calibrated.calibrated_device`). The defaults a profile implies
for the fields left out are :mod:`dpsim.predict.resolve`'s.
"""

from __future__ import annotations

from dataclasses import field, replace

from dpsim.errors import ConfigError, ProfileError
from dpsim.frozen import frozen_dataclass
from dpsim.hardware import get_gpu
from dpsim.predict.config import DEFAULT_OVERLAP_SLOWDOWN, PredictConfig, resolved_compute_efficiency
from dpsim.profile.calibrated import (
    calibrated_comm_slowdown,
    calibrated_overlap_slowdown,
    is_cpu_profile,
    measured_compute,
    profile_ranks_per_node,
    range_warnings,
    step_warnings,
)
from dpsim.profile.match import match_model_step
from dpsim.profile.op_rates import describe, op_rate_compute, untimed_kernels
from dpsim.profile.schema import Profile
from dpsim.topology.load import load_cluster_spec
from dpsim.wording import count
from dpsim.workload.precision import get_precision

SOURCES = ("profile", "flag", "model")
"""``profile``: measured by the calibration; ``flag``: given on the command line; ``model``:
dpsim's own model of the preset (or its default)."""


@frozen_dataclass
class Origin:
    """Where one part of the prediction came from."""

    source: str
    """``profile``, ``flag`` or ``model`` (:data:`SOURCES`)."""
    detail: str
    """One phrase: what was measured or modelled, and with what."""

    def to_dict(self) -> dict:
        return {"source": self.source, "detail": self.detail}


@frozen_dataclass
class SensitivityPoint:
    """The step at one NIC efficiency."""

    nic_efficiency: float
    """Fraction of the NIC line rate collectives drive."""
    step_time_s: float
    """The predicted step at that efficiency, seconds."""
    used: bool
    """The efficiency the prediction itself used (the transport's assumption)."""

    def to_dict(self) -> dict:
        return {"nic_efficiency": self.nic_efficiency, "step_time_s": self.step_time_s, "used": self.used}


@frozen_dataclass
class TransportSensitivity:
    """How the step moves with a NIC efficiency that rests on an assumption about the transport."""

    transport: str
    """The transport (``fabric.transport``) whose efficiency is assumed."""
    assumption: str
    """What is assumed, in one phrase."""
    points: tuple[SensitivityPoint, ...]
    """The step at lower, the used and higher efficiencies, in increasing efficiency."""

    def to_dict(self) -> dict:
        return {"transport": self.transport, "assumption": self.assumption,
                "points": [p.to_dict() for p in self.points]}


@frozen_dataclass
class AfterComm:
    """The measured extra time of a step that starts right after waiting on the network."""

    extra_s: float
    """Extra time of the step right after an all-reduce of the gradients' bytes, against
    back to back (:attr:`dpsim.profile.schema.ModelStep.after_comm_extra_s`)."""
    wait_s: float
    """How long that all-reduce took in the calibration."""
    charged_s: float = 0.0
    """What the prediction charged per step: :attr:`extra_s` (never below 0) times the
    step's exposed communication over :attr:`wait_s`, at most 1 (a rank that waits as long as
    the calibration's did pays all of it; one whose communication is hidden pays none); with
    pipeline stages, less what the paying stage's idle tail absorbs (see
    :func:`charge_after_comm`)."""

    def charge(self, exposed_comm_s: float) -> AfterComm:
        """This with :attr:`charged_s` for a step whose exposed communication is ``exposed_comm_s``."""
        share = min(1.0, max(0.0, exposed_comm_s) / self.wait_s) if self.wait_s > 0 else 0.0
        return replace(self, charged_s=max(0.0, self.extra_s) * share)

    def to_dict(self) -> dict:
        return {"extra_s": self.extra_s, "wait_s": self.wait_s, "charged_s": self.charged_s}


def charge_after_comm(provenance: Provenance | None, exposed_comm_s: float, *, slack_s: float = 0.0,
                      stage: int | None = None) -> tuple[float, Provenance | None]:
    """``(seconds added to the step, provenance saying so)`` for a step whose exposed
    communication is ``exposed_comm_s``, when the profile measured the step after a wait
    (otherwise ``(0.0, provenance)`` unchanged).

    A rank that waited on the network computes its next optimizer step and forward slower
    than back to back (measured by calibrate): that part of the step starts it, so the
    whole step moves by it. The data-parallel and the layout paths both charge it here.
    ``slack_s``: how long the rank that pays it (pipeline stage ``stage``) is idle at the end of
    the step before the last stage ends it; the step moves only by what exceeds it.
    """
    if provenance is None or provenance.after_comm is None:
        return 0.0, provenance
    after = provenance.after_comm.charge(exposed_comm_s)
    paid_s = after.charged_s
    if slack_s > 0:
        after = replace(after, charged_s=max(0.0, paid_s - slack_s))
    where = "" if stage is None else f" on pipeline stage {stage}"
    absorbed = (f"; {1e3 * (paid_s - after.charged_s):.3g} ms of its {1e3 * paid_s:.3g} ms within that stage's "
                f"{1e3 * slack_s:.3g} ms idle before the step ends" if paid_s > after.charged_s else "")
    detail = (f"{provenance.compute.detail}; +{1e3 * after.charged_s:.3g} ms per step computed right after "
              f"waiting on the network{where} (measured {1e3 * after.extra_s:+.3g} ms after a "
              f"{1e3 * after.wait_s:.3g} ms wait" + (", within noise: nothing charged" if after.extra_s <= 0 else "")
              + absorbed + ")")
    return after.charged_s, replace(provenance, after_comm=after, compute=replace(provenance.compute, detail=detail))


@frozen_dataclass
class Provenance:
    """Where compute, network and overlap came from, and what makes them uncertain."""

    compute: Origin
    """The per-layer compute times and the optimizer step."""
    network: Origin
    """The collectives' times."""
    overlap: Origin
    """The slowdowns while compute and communication overlap."""
    device: Origin
    """The device whose memory and peak the prediction quotes."""
    warnings: tuple[str, ...] = field(default=())
    """What makes the numbers uncertain, one line each."""
    transport_sensitivity: TransportSensitivity | None = None
    """The step at other NIC efficiencies when the one used is an assumption of the transport
    (``None``: measured, written in the topology, or no network crossed)."""
    after_comm: AfterComm | None = None
    """The measured step's extra time after waiting on the network, when the profile
    measured it and its step is used (``None``: not measured, or compute not from it)."""

    def to_dict(self) -> dict:
        """``predict --json``'s ``provenance`` block."""
        sens = self.transport_sensitivity
        return {"compute": self.compute.to_dict(), "network": self.network.to_dict(),
                "overlap": self.overlap.to_dict(), "device": self.device.to_dict(),
                "warnings": list(self.warnings),
                "transport_sensitivity": sens.to_dict() if sens is not None else None,
                **({"after_comm": self.after_comm.to_dict()} if self.after_comm is not None else {})}

    def with_bucket_warnings(self, profile: Profile, topology, sizes_bytes) -> Provenance:
        """Add warnings for message sizes the profile did not measure (or measured noisily)."""
        link_class = "intra_node" if topology.n_nodes == 1 else "inter_node"
        extra = [w for w in range_warnings(profile, link_class, sizes_bytes) if w not in self.warnings]
        return replace(self, warnings=self.warnings + tuple(extra)) if extra else self


def _overlap_origin(config: PredictConfig, measured: float | None, comm_slowdown: float, name: str) -> Origin:
    cal = config.calibration
    comm = (f"; collectives {100 * comm_slowdown:.1f} % slower while compute runs (measured)"
            if comm_slowdown > 0 else "")
    if measured is not None and cal.overlap_slowdown == measured:
        return Origin(source="profile", detail=f"compute {100 * measured:.1f} % slower while a collective runs "
                                               f"(measured by profile {name}){comm}")
    if cal.overlap_slowdown == DEFAULT_OVERLAP_SLOWDOWN:
        return Origin(source="model", detail=f"compute {100 * cal.overlap_slowdown:.0f} % slower while a "
                                             f"collective runs (dpsim's default estimate){comm}")
    return Origin(source="flag", detail=f"compute {100 * cal.overlap_slowdown:.1f} % slower while a collective "
                                        f"runs (--overlap-slowdown){comm}")


def preset_provenance(config: PredictConfig, gpu, topology) -> Provenance:
    """Provenance of a prediction without a profile: presets, dpsim's models, or flags."""
    if config.calibration.single_gpu_step_s is not None:
        compute = Origin(source="flag", detail=f"scaled to the measured one-GPU step "
                                               f"({config.calibration.single_gpu_step_s * 1e3:.4g} ms, --single-gpu-step-ms)")
    else:
        cap = config.cluster.power_cap_w
        efficiency, why = resolved_compute_efficiency(config)
        capped = "" if cap is None else f", x the measured rate at a {cap:g} W power cap (--power-cap-w)"
        compute = Origin(source="model", detail=f"{gpu.name} preset's measured matmul rates and memory bandwidth, "
                                                f"per-layer model (compute efficiency {efficiency:g}: {why})"
                                                f"{capped}")
    where = f"file {config.cluster.topology_file}" if config.cluster.topology_file else f"preset {config.cluster.link}"
    network = Origin(source="model", detail=f"NCCL's algorithm choice on the flow model of topology {where}")
    device = Origin(source="model", detail=f"{gpu.name} preset ({gpu.description})")
    return Provenance(compute=compute, network=network, overlap=_overlap_origin(config, None, 0.0, ""),
                      device=device, warnings=_gpu_override_warnings(config, gpu, where))


def gpu_link_warnings(config: PredictConfig) -> tuple[str, ...]:
    """The warning of :func:`_gpu_override_warnings` for a job's config alone: ``plan`` costs every
    layout on the same links with no prediction to carry it when nothing is simulated, and ``sweep``'s
    rows carry no provenance."""
    if config.cluster.gpu is None:
        return ()
    cl = config.cluster
    where = f"file {cl.topology_file}" if cl.topology_file else f"preset {cl.link}"
    return _gpu_override_warnings(config, get_gpu(cl.gpu), where)


def _gpu_override_warnings(config: PredictConfig, gpu, where: str) -> tuple[str, ...]:
    """``--gpu`` replaces the topology's device, not its links (:func:`dpsim.predict.run.resolve_topology`):
    a GPU of another generation keeps the NVLink and NIC rates the file gives for its own GPU
    (NVLink 4's 450 GB/s per direction on the H100 presets, hardware.csv H003; an A100's NVLink 3 has
    300, H002 in topologies/dgx-a100.yaml; a B200's NVLink 5 900, the b200 preset's "1.8 TB/s per GPU"
    and topologies/README.md), so a tensor- or expert-parallel group's collectives are costed at the
    wrong bandwidth."""
    if config.cluster.gpu is None:
        return ()
    cl = config.cluster
    own = load_cluster_spec(cl.topology_file, cl.link).gpu
    if not own or _link_class(get_gpu(own)) == _link_class(gpu):
        return ()
    return (f"--gpu {gpu.name}: topology {where} is built for {own} ({get_gpu(own).description}); its NVLink and "
            f"NIC rates stay that GPU's, not {gpu.name}'s: give a topology file with {gpu.name}'s links",)


def _link_class(gpu) -> tuple[str, str]:
    """What a GPU's links to its peers depend on beyond its generation: a PCIe card or an
    NVLink-bridged pair (H100 NVL) has no NVSwitch port, a GeForce card none either, and the H800
    has the H100's silicon with NVLink cut to 400 GB/s (:mod:`dpsim.hardware`'s H800 source)."""
    d = gpu.description
    if gpu.name == "h800":
        form = "nvlink-400"
    elif "PCIe" in d or "GeForce" in d or gpu.name.endswith("-nvl"):
        form = "no-nvswitch"
    else:
        form = "sxm"
    return gpu.architecture, form


def check_profile_layout(config: PredictConfig, profile: Profile, topology) -> None:
    """Refuse, with the fix, a ``--gpus``/``--gpus-per-node`` that cannot use the profile's link
    classes: a prediction on several nodes needs its ``inter_node`` fit, on one node its
    ``intra_node`` fit; the profile's own ranks per node is the fix to suggest."""
    need = "intra_node" if topology.n_nodes == 1 else "inter_node"
    if topology.n_gpus <= 1 or need in profile.link_classes:
        return
    rpn = profile_ranks_per_node(profile)
    have = ", ".join(profile.link_classes) or "none"
    with_rpn = None if rpn is None else ("intra_node" if topology.n_gpus <= rpn else "inter_node")
    if rpn is not None and rpn != topology.gpus_per_node and with_rpn in profile.link_classes:
        fix = f"; the profile was measured with {count(rpn, 'rank')} per node: use --gpus-per-node {rpn}"
    else:
        fix = "; calibrate under torchrun across nodes" if need == "inter_node" else "; calibrate on one node"
    raise ProfileError(f"--calibration: {profile.path or profile.name} has no {need} measurements (it has: {have}); "
                       f"--gpus {topology.n_gpus} with {topology.gpus_per_node} GPUs per node is "
                       f"{topology.n_nodes} node{'s' if topology.n_nodes > 1 else ''}{fix}")


def check_cpu_compute(config: PredictConfig, profile: Profile, device):
    """A CPU profile's device, ready for the compute model: its float32 is the only precision it
    measured (another is refused, naming fp32); a profile that measured no matmul
    rate (``calibrate --no-compute``) predicts compute only from ``--single-gpu-step-ms`` (its
    rates then only set the proportions between layers); without it, one line says so."""
    if device.name != "cpu":
        return device
    dtype = get_precision(config.execution.precision).compute_dtype
    if dtype != "float32":
        raise ConfigError(f"--precision: {config.execution.precision} computes in {dtype}, but profile {profile.name} was "
                          "measured on CPUs in float32; use --precision fp32")
    if device.achieved_flops_per_s and "float32" not in device.achieved_flops_per_s:
        # A CPU profile of other dtypes alone (calibrate --backend gloo --dtypes float16) was refused as "gpu 'cpu':
        # no achieved rate for dtype 'float32-highest'", naming no flag.
        raise ProfileError(f"--calibration: profile {profile.name} timed CPU matmuls in "
                           f"{', '.join(device.achieved_flops_per_s)} only, and predict costs a CPU step in float32; "
                           f"calibrate again with --dtypes float32 (or leave --dtypes out)")
    if device.achieved_flops_per_s:
        return device
    if config.calibration.single_gpu_step_s is None:
        raise ProfileError(f"--calibration: profile {profile.name} was measured on CPUs without compute benchmarks "
                           "(calibrate --no-compute), so it cannot say how fast they compute; give "
                           "--single-gpu-step-ms, or calibrate with compute (and --model)")
    return replace(device, achieved_flops_per_s={"float32": 1e11, "float32-highest": 1e11})


def apply_profile(config: PredictConfig, profile: Profile, model, compute, precision, topology, gpu=None):
    """``(compute, comm_slowdown, provenance)`` of a prediction with ``profile`` (see the module docstring).

    ``gpu``: the profile's device the compute was modelled on (the fallback of ops its kernel rates
    do not cover)."""
    wl = config.workload
    cal = config.calibration
    warnings: list[str] = []
    after_comm = None
    cpu = is_cpu_profile(profile)
    gpn = topology.gpus_per_node
    link_class = "intra_node" if topology.n_nodes == 1 else "inter_node"
    info = profile.link_classes.get(link_class, {})
    measured_rpn = profile_ranks_per_node(profile)
    network = Origin(source="profile", detail=f"fitted {link_class} collectives of profile {profile.name} "
                                              f"(measured on {_counted(info, 'n_ranks', 'rank')}, "
                                              f"{_counted(info, 'n_nodes', 'node')})")
    if measured_rpn is not None and link_class == "inter_node" and gpn != measured_rpn:
        warnings.append(f"the profile measured {count(measured_rpn, 'rank')} per node, this prediction has {gpn}: its "
                        f"inter-node fit assumes the measured node's share of the NICs")
    if cal.single_gpu_step_s is not None:
        compute_origin = Origin(source="flag", detail=f"scaled to the measured one-GPU step "
                                                      f"({cal.single_gpu_step_s * 1e3:.4g} ms, --single-gpu-step-ms)")
    else:
        match = match_model_step(profile, model, micro_batch=wl.micro_batch, dtype=precision.compute_dtype,
                                 config_model=wl.model)
        op_rates = profile.compute.op_rates if profile.compute is not None else None
        if cal.op_rates and op_rates is None:
            raise ProfileError(f"--op-rates: profile {profile.name} has no measured kernel rates (calibrated without "
                               "--model, or by an older dpsim); calibrate with --model, or leave --op-rates out")
        if config.execution.compile and ((op_rates is not None and gpu is not None) or match.step is not None):
            # What calibrate measured ran eagerly: its step, or its element-wise kernel rates.
            raise ConfigError(f"--compile: profile {profile.name} measured this model's compute in eager mode "
                              "(its step or kernel rates), which would be used as it is; leave --compile out, "
                              "or --calibration")
        if op_rates is not None and gpu is not None and (match.step is None or cal.op_rates):
            compute, fallback = op_rate_compute(model, compute, op_rates, gpu, precision,
                                                micro_batch=wl.micro_batch,
                                                compute_efficiency=resolved_compute_efficiency(config, profile)[0])
            why = "--op-rates" if match.step is not None else f"measured step not used: {match.reason}"
            untimed, kernels = untimed_kernels(model, op_rates, wl.micro_batch)
            if untimed:
                why += f"; {untimed} of its {kernels} GEMM/attention shapes from the nearest timed ones"
            rest = "; ".join(f"{n} {what} at the measured matmul rates / copy bandwidth"
                             for what, n in sorted(fallback.items()))
            compute_origin = Origin(source="profile", detail=f"profile op rates ({describe(op_rates)}) of profile "
                                                             f"{profile.name}, op by op ({why}"
                                                             + (f"; {rest}" if rest else "")
                                                             + "; optimizer modelled at the measured copy bandwidth)")
        elif match.step is not None:
            # DDP's bucket copies are the step program's (dpsim.strategies.ddp_costs), at the
            # measured copy bandwidth: not folded into the measured step here
            compute, details = measured_compute(match.step, model, compute, optimizer=wl.optimizer,
                                                ddp_copy_bandwidth=None)
            copy = (", DDP's bucket copies at the measured copy bandwidth"
                    if config.parallelism.strategy == "ddp" and topology.n_gpus > 1 and profile.compute.memory_bandwidth_bytes_per_s
                    else "")
            compute_origin = Origin(source="profile", detail=f"training step {match.reason} ({details['layers']}; "
                                                             f"loss {match.step.loss or 'not recorded'}; optimizer "
                                                             f"{details['optimizer']}{copy})")
            warnings += step_warnings(match.step)
            if (topology.n_gpus > 1 and match.step.after_comm_extra_s is not None
                    and match.step.after_comm_wait_s):
                after_comm = AfterComm(extra_s=match.step.after_comm_extra_s, wait_s=match.step.after_comm_wait_s)
        else:
            rates = "measured matmul rates" if profile.compute is not None and profile.compute.matmul_flops_per_s \
                else "the preset's matmul rates"
            efficiency, why = resolved_compute_efficiency(config, profile)
            compute_origin = Origin(source="model", detail=f"per-layer model with {rates} "
                                                           f"(measured step not used: {match.reason}; compute "
                                                           f"efficiency {efficiency:g}: {why})")
            if profile.compute is not None and profile.compute.model_step is not None:
                warnings.append(f"compute is modelled, not measured: {match.reason}")
    comm_slowdown = calibrated_comm_slowdown(profile) or 0.0
    overlap = _overlap_origin(config, calibrated_overlap_slowdown(profile), comm_slowdown, profile.name)
    if cpu:
        mem = "RAM" if profile.environment.get("device_memory_bytes") else "RAM (not recorded: not checked)"
        cpu_name = profile.compute.device if profile.compute is not None else "CPU"
        device = Origin(source="profile", detail=f"CPU ranks as measured ({cpu_name}); memory: the host's {mem} "
                                                 "shared by its ranks; no MFU (no peak)")
    else:
        device = Origin(source="model", detail=f"{topology.spec.gpu} preset's memory and peak; measured rates from "
                                               f"profile {profile.name}" if profile.compute is not None else
                        f"{topology.spec.gpu} preset")
    return compute, comm_slowdown, Provenance(compute=compute_origin, network=network, overlap=overlap,
                                              device=device, warnings=tuple(warnings), after_comm=after_comm)


def _counted(info: dict, key: str, noun: str) -> str:
    return count(info[key], noun) if key in info else f"? {noun}s"
