"""Two real DDP jobs sharing one shaped link on the emulated cluster, against ``dpsim mix``'s prediction.

The testbed has two racks of two hosts; each rack's uplink is shaped to one NIC's rate (2:1
oversubscribed), and each job puts one rank in each rack, so both jobs' all-reduces cross both
uplinks: alone a job has the uplink to itself, together they share it whenever their
communication overlaps in time.

1. **Each job alone** runs as ``dpsim validate`` runs it (:func:`dpsim.validate.runner.run_ranks`):
   the measurement phases, from which its calibration profile is made
   (:func:`~dpsim.validate.runner.profile_from_run`, what ``dpsim calibrate`` would have written),
   then its DDP steps: the measured step alone.
2. **Both jobs at once**, DDP steps only (the worker's ``--ddp-only``): each job's median step over
   the stretch of time both were training (steps are stamped with the machine's clock).
3. **The prediction** is ``dpsim mix`` on a YAML file describing the same cluster (a topology of
   one-"GPU" servers, two per leaf, 2:1 oversubscribed, NICs at the testbed's rate) and the same
   jobs on the same servers, each with its profile: its step alone and its step in the mix.
   Nothing is fitted to the DDP steps of either phase.
"""

from __future__ import annotations

import statistics
import tempfile
import threading
from dataclasses import field
from pathlib import Path

from dpsim.errors import ConfigError
from dpsim.files import write_text_atomic
from dpsim.frozen import frozen_dataclass
from dpsim.mix.simulate import simulate_mix
from dpsim.mix.spec import load_mix
from dpsim.profile.io import save_profile
from dpsim.validate.api import ValidationConfig, trace
from dpsim.validate.models import check_model, predict_reference, resolve
from dpsim.validate.runner import ValidationError, measured_summary, profile_from_run, run_ranks
from dpsim.validate.testbed import Testbed, TestbedSpec

HOSTS, RACKS, OVERSUBSCRIPTION = 4, 2, 2.0
"""The testbed: two racks of two hosts, each rack's uplink shaped to one NIC's rate."""


@frozen_dataclass
class MixJobCase:
    """One job of the two-job case."""

    name: str
    """Its name in the mix."""
    model: str
    """A built-in (mlp, transformer, convnet) or a builder reference, as ``dpsim validate --model``."""
    micro_batch: int
    """Samples per rank per step."""
    hosts: tuple[int, int]
    """The testbed hosts of its two ranks (one per rack, so it crosses the uplinks)."""
    bucket_cap_mb: float | None = None
    """DDP bucket_cap_mb (MiB); None = PyTorch default."""

    def __post_init__(self) -> None:
        check_model(self.model)
        if len(self.hosts) != 2 or len(set(self.hosts)) != 2 or not all(0 <= h < HOSTS for h in self.hosts):
            raise ConfigError(f"hosts: {self.hosts!r} is not valid; expected two different hosts in 0..{HOSTS - 1}")


@frozen_dataclass
class MixCheckConfig:
    """The two-job case."""

    jobs: tuple[MixJobCase, MixJobCase]
    """The two jobs."""
    nic_bits_per_s: float
    """Rate of every NIC (and of each rack uplink), bits/s."""
    steps: int = 20
    """DDP steps of each alone run (after warm-up)."""
    together_steps: int = 40
    """DDP steps of each job in the run together (its steady stretch is where both train)."""
    warmup: int = 5
    """Warm-up steps of every DDP run."""
    optimizer: str = "sgd-momentum"
    """Optimizer of the built-ins' step."""
    timeout_s: float = 600.0
    """Deadline of each run."""


@frozen_dataclass
class MixJobResult:
    """One job: measured and predicted, alone and in the mix."""

    name: str
    """Its name."""
    measured_alone_s: float
    """Median DDP step alone."""
    measured_together_s: float
    """Median DDP step while the other job trained too."""
    predicted_alone_s: float
    """``dpsim mix``'s step alone on the same servers."""
    predicted_together_s: float
    """``dpsim mix``'s step in the mix."""
    speed_drift: float | None = None
    """The alone run's control (:func:`dpsim.validate.runner.speed_drift`)."""

    @property
    def measured_slowdown(self) -> float:
        """Together over alone, measured."""
        return self.measured_together_s / self.measured_alone_s

    @property
    def predicted_slowdown(self) -> float:
        """Together over alone, predicted."""
        return self.predicted_together_s / self.predicted_alone_s

    @property
    def error_alone(self) -> float:
        """Relative error of the predicted step alone."""
        return self.predicted_alone_s / self.measured_alone_s - 1.0

    @property
    def error_together(self) -> float:
        """Relative error of the predicted step in the mix."""
        return self.predicted_together_s / self.measured_together_s - 1.0

    @property
    def error_slowdown(self) -> float:
        """Relative error of the predicted slowdown."""
        return self.predicted_slowdown / self.measured_slowdown - 1.0

    def to_dict(self) -> dict:
        return {"name": self.name, "measured_alone_s": self.measured_alone_s,
                "measured_together_s": self.measured_together_s, "predicted_alone_s": self.predicted_alone_s,
                "predicted_together_s": self.predicted_together_s, "measured_slowdown": self.measured_slowdown,
                "predicted_slowdown": self.predicted_slowdown, "error_alone": self.error_alone,
                "error_together": self.error_together, "error_slowdown": self.error_slowdown,
                "speed_drift": self.speed_drift}


@frozen_dataclass
class MixCheckResult:
    """Both jobs."""

    jobs: tuple[MixJobResult, ...]
    """Each job's figures."""
    overlap_s: float
    """How long both trained at once in the run together."""
    mix_yaml: str = field(default="", repr=False)
    """The mix file the prediction read (its profiles were temporary)."""
    runs: dict = field(default_factory=dict, repr=False, compare=False)
    """The measured runs (:func:`measure`), which :func:`predict_runs` predicts again."""

    def to_dict(self) -> dict:
        return {"jobs": [j.to_dict() for j in self.jobs], "overlap_s": self.overlap_s}


def mix_yaml(config: MixCheckConfig, profiles: dict[str, str]) -> tuple[str, str]:
    """(topology YAML, mix YAML) of the case: the testbed as a cluster, each job with its profile."""
    gbit = config.nic_bits_per_s / 1e9
    topology = "\n".join([
        "name: testbed-2x2",
        "description: the emulated testbed, one rank per server, two servers per rack, uplinks 2:1",
        "gpu: h100  # unused: each job's profile (its CPU ranks' measured step) replaces it",
        "sources:",
        "  - \"dpsim.validate.testbed: tbf-shaped veths; each rack uplink shaped to its NICs' total over the "
        "oversubscription\"",
        "node:",
        "  gpus_per_node: 1",
        "  interconnect: pcie",
        "  gpu_link_gbyte_per_s: 32  # unused: one rank per server",
        "  gpu_link_efficiency: 1.0  # unused",
        "  gpu_link_latency_us: 1.0  # unused",
        "  pcie_gbyte_per_s: 32  # unused",
        "fabric:",
        "  kind: ethernet",
        "  nics_per_node: 1",
        f"  nic_gbit_per_s: {gbit!r}",
        # tbf holds every link to its rate exactly; what gloo makes of it alone is in the profile's
        # measured all-reduce, and sharing depends only on the links' ratios
        "  nic_efficiency: 1.0",
        f"  nodes_per_leaf: {HOSTS // RACKS}",
        f"  oversubscription: {OVERSUBSCRIPTION!r}",
        "  rail_optimized: false",
        ""])
    lines = ["cluster: {topology: testbed.yaml, gpus: %d}" % HOSTS, "horizon: 1h", "jobs:"]
    for job in config.jobs:
        cap = "" if job.bucket_cap_mb is None else f", bucket_cap_mb: {job.bucket_cap_mb!r}"
        lines.append(f"  - {{name: {job.name}, model: \"{predict_reference(job.model)}\", gpus: 2, "
                     f"micro_batch: {job.micro_batch}, optimizer: {config.optimizer}{cap}, "
                     f"calibration: {profiles[job.name]}, nodes: [{job.hosts[0]}, {job.hosts[1]}]}}")
    return topology, "\n".join(lines) + "\n"


def _steady_median(ddp: dict, start: float, end: float) -> float:
    """Median of the steps that began and ended inside ``[start, end]`` (machine clock)."""
    starts, times = ddp["step_starts_unix_s"], ddp["step_times_s"]
    inside = [t for s, t in zip(starts, times) if s >= start and s + t <= end]
    if len(inside) < 3:
        raise ValidationError(f"validate mix: only {len(inside)} steps of a job fell where both jobs trained; "
                              "raise together_steps")
    return statistics.median(inside)


def measure(config: MixCheckConfig) -> dict:
    """Run the case for real: ``{"alone": {job: run}, "together": {job: run}}``, each run rank 0's
    document (:func:`dpsim.validate.runner.run_ranks`)."""
    spec = TestbedSpec(hosts=HOSTS, nic_bits_per_s=config.nic_bits_per_s, racks=RACKS,
                       rack_oversubscription=OVERSUBSCRIPTION)
    common = dict(world_size=2, warmup=config.warmup, optimizer=config.optimizer, timeout_s=config.timeout_s)
    alone, together, errors = {}, {}, []
    with Testbed(spec=spec, kind="validate") as tb:
        for job in config.jobs:
            alone[job.name] = run_ranks(model=resolve(job.model), micro_batch=job.micro_batch,
                                        bucket_cap_mb=job.bucket_cap_mb, testbed=tb, hosts=list(job.hosts),
                                        steps=config.steps, **common)

        def train(job: MixJobCase) -> None:
            try:
                together[job.name] = run_ranks(
                    model=resolve(job.model), micro_batch=job.micro_batch, bucket_cap_mb=job.bucket_cap_mb,
                    testbed=tb, hosts=list(job.hosts), ddp_only=True, steps=config.together_steps, **common)
            except BaseException as exc:  # raised again in the caller's thread
                errors.append(exc)

        threads = [threading.Thread(target=train, args=(job,)) for job in config.jobs]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    if errors:
        raise errors[0]
    return {"alone": alone, "together": together}


def predict_runs(config: MixCheckConfig, runs: dict) -> MixCheckResult:
    """``dpsim mix``'s prediction of measured ``runs`` (:func:`measure`) against them: deterministic,
    whatever the machine's load now."""

    with tempfile.TemporaryDirectory(prefix="dpsim-validate-mix-") as tmp:
        profiles = {job.name: save_profile(profile_from_run(runs["alone"][job.name], _trace(job.model)),
                                           Path(tmp) / f"{job.name}.json").name for job in config.jobs}
        topology, mix = mix_yaml(config, profiles)
        write_text_atomic(Path(tmp) / "testbed.yaml", topology)
        write_text_atomic(Path(tmp) / "mix.yaml", mix)
        predicted = {j.name: j for j in simulate_mix(load_mix(Path(tmp) / "mix.yaml")).jobs}
    ddps = [runs["together"][j.name]["ddp"] for j in config.jobs]
    start = max(d["step_starts_unix_s"][0] for d in ddps)
    end = min(d["step_starts_unix_s"][-1] for d in ddps)
    jobs = []
    for job, ddp in zip(config.jobs, ddps):
        m = measured_summary(runs["alone"][job.name])
        p = predicted[job.name]
        jobs.append(MixJobResult(name=job.name, measured_alone_s=m["median_s"],
                                 measured_together_s=_steady_median(ddp, start, end),
                                 predicted_alone_s=p.alone_step_time_s, predicted_together_s=p.step_time_s,
                                 speed_drift=m["speed_drift"]))
    return MixCheckResult(jobs=tuple(jobs), overlap_s=max(0.0, end - start), mix_yaml=mix, runs=runs)


def check(config: MixCheckConfig) -> MixCheckResult:
    """Run the case for real and predict it with ``dpsim mix`` (see the module docstring)."""
    return predict_runs(config, measure(config))


def _trace(model: str):
    """The model as predict sees it (:func:`dpsim.validate.api.trace`)."""
    return trace(ValidationConfig(model=model, micro_batch=1, bucket_cap_mb=None, world_size=2,
                                  nic_bits_per_s=None))
