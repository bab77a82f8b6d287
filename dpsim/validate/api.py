"""``dpsim validate``: real DDP training on an emulated (or real) cluster vs prediction."""

from __future__ import annotations

import math
import os
import tempfile
from dataclasses import asdict, dataclass

from dpsim.errors import ConfigError
from dpsim.validate import worker
from dpsim.validate.models import check_model
from dpsim.validate.runner import measured_summary, predict_run, run_ranks
from dpsim.validate.testbed import Testbed, TestbedSpec
from dpsim.workload.from_torch import parse_input_shape


@dataclass(frozen=True, kw_only=True)
class ValidationConfig:
    """One validation case."""

    model: str
    """Validation model: mlp, transformer or convnet, or a user's ``file.py:fn`` / ``pkg.mod:fn``."""
    micro_batch: int
    """Samples per rank per step."""
    bucket_cap_mb: float | None
    """DDP bucket_cap_mb (MiB); None = PyTorch default."""
    world_size: int
    """Ranks (one per emulated host)."""
    nic_bits_per_s: float | None
    """Emulated NIC rate; None = local processes on loopback (no shaping)."""
    racks: int = 1
    """Emulated racks."""
    oversubscription: float = 1.0
    """Rack uplink oversubscription."""
    steps: int = 20
    """Measured DDP steps (after warm-up)."""
    warmup: int = 5
    """Warm-up steps (bucket rebuild happens here)."""
    timeout_s: float = 600.0
    """Whole-run deadline; a hung rank ends the run then."""
    input_shape: str | None = None
    """Input of a user's model, batch first (``32,1024``, ``8,128:int64``)."""

    def __post_init__(self) -> None:
        check_model(self.model)
        if ":" in self.model:

            if self.input_shape is None:
                raise ConfigError(f"--input-shape: needed for {self.model!r} (batch first, e.g. 32,1024)")
            parse_input_shape(self.input_shape)
        if self.micro_batch < 1:
            raise ConfigError(f"--micro-batch: {self.micro_batch} is not valid; expected an integer >= 1")
        if self.bucket_cap_mb is not None and not (math.isfinite(self.bucket_cap_mb) and self.bucket_cap_mb > 0):
            raise ConfigError(f"--bucket-cap-mb: {self.bucket_cap_mb} is not valid; expected a number > 0")
        if not 1 <= self.world_size <= 64:
            raise ConfigError(f"--emulate-hosts: {self.world_size} is not valid; expected an integer in 1..64")
        if self.steps < 3 or self.warmup < 2:
            raise ConfigError("--steps/--warmup: need at least 3 measured steps and 2 warm-up steps")


@dataclass(frozen=True, kw_only=True)
class ValidationResult:
    """Measured vs predicted step of one case."""

    config: ValidationConfig
    """The case."""
    measured: dict
    """median_s, p10_s, p90_s of rank 0's steps; phase medians."""
    predicted: dict
    """dpsim's step and where the time goes."""

    @property
    def error(self) -> float:
        """Relative error of the predicted step time against the measured median."""
        return self.predicted["step_time_s"] / self.measured["median_s"] - 1.0

    def to_dict(self) -> dict:
        """JSON-able."""
        return {"schema": "dpsim.validation/1", "config": asdict(self.config), "measured": self.measured,
                "predicted": self.predicted, "error": self.error}


def validate(config: ValidationConfig) -> ValidationResult:
    """Run the case for real and predict it from its own micro-benchmarks."""
    if config.nic_bits_per_s is not None:

        spec = TestbedSpec(hosts=config.world_size, nic_bits_per_s=config.nic_bits_per_s, racks=config.racks,
                           rack_oversubscription=config.oversubscription)
        with Testbed(spec=spec) as tb:
            run = _run(config, tb)
    else:
        run = _run(config, None)
    return _result(config, run)


def _run(config: ValidationConfig, testbed) -> dict:
    return run_ranks(world_size=config.world_size, model=config.model, micro_batch=config.micro_batch,
                     bucket_cap_mb=config.bucket_cap_mb, steps=config.steps, warmup=config.warmup,
                     testbed=testbed, timeout_s=config.timeout_s, input_shape=config.input_shape)


def _result(config: ValidationConfig, run: dict) -> ValidationResult:
    measured = measured_summary(run)
    ddp = run["ddp"]
    measured.update(forward_s=ddp["forward_s"], backward_and_wait_s=ddp["backward_and_wait_s"],
                    optimizer_s=ddp["optimizer_s"])
    return ValidationResult(config=config, measured=measured, predicted=predict_run(run))


def validate_under_torchrun(config: ValidationConfig) -> ValidationResult | None:
    """Run this process's rank under torchrun (RANK/WORLD_SIZE set); rank 0 gets the result."""

    rank = int(os.environ["RANK"])
    with tempfile.TemporaryDirectory(prefix="dpsim-validate-") as tmp:
        out = os.path.join(tmp, "run.json")
        argv = ["--model", config.model, "--micro-batch", str(config.micro_batch), "--steps", str(config.steps),
                "--warmup", str(config.warmup), "--out", out]
        if config.bucket_cap_mb is not None:
            argv += ["--bucket-cap-mb", str(config.bucket_cap_mb)]
        if config.input_shape is not None:
            argv += ["--input-shape", config.input_shape]
        worker.main(argv)
        if rank != 0:
            return None
        import json

        with open(out) as f:
            run = json.load(f)
    return _result(config, run)
