"""``dpsim validate``: real DDP training on an emulated (or real) cluster vs ``dpsim predict``'s prediction of it.

The model is checked first, as ``predict`` traces it, before any host, rank or
measurement starts (a model that cannot be traced or built fails in one line at once).
The ranks then measure the cluster as ``dpsim calibrate`` would and train the user's step
with real DDP (:mod:`dpsim.validate.worker`); the prediction is ``dpsim predict`` with a
profile made of the measurements (:func:`dpsim.validate.runner.predict_run`).
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from dataclasses import asdict, field

from dpsim.errors import ConfigError
from dpsim.frozen import frozen_dataclass
from dpsim.memory import check_cpu_ranks_fit, host_available_bytes
from dpsim.processes import check_torchrun_env, torchrun_count
from dpsim.validate import worker
from dpsim.validate.models import BUILTINS, check_model, predict_reference, resolve
from dpsim.validate.runner import measured_summary, predict_run, run_ranks
from dpsim.validate.testbed import Testbed, TestbedSpec
from dpsim.wording import canonical_choice
from dpsim.workload.catalog import CATALOG_ENTRIES, get_model
from dpsim.workload.from_torch import load_torch_workload
from dpsim.workload.model_ref import is_torch_model_ref, parse_input_shape
from dpsim.workload.spec import ModelSpec

OPTIMIZERS = ("adamw", "adam", "sgd-momentum", "sgd")
"""``--optimizer`` names (predict's), for a model file without ``optimizer(parameters)``."""


@frozen_dataclass
class ValidationConfig:
    """One validation case."""

    model: str
    """What predict and calibrate accept (a catalog name, path/file.py:fn or package.module:fn,
    optionally :input_fn then :loss_fn), or a built-in: mlp, transformer, convnet."""
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
    """Example input of a builder model, batch first (``32,1024``, ``8,128:int64``), as predict takes it;
    without it, the model file's example function."""
    optimizer: str = "adamw"
    """Optimizer when the model file defines no ``optimizer(parameters)``: adamw, adam, sgd-momentum, sgd."""

    def __post_init__(self) -> None:
        # Choices in any letter case, as predict's (--optimizer AdamW and --model GPT2 were refused).
        object.__setattr__(self, "optimizer", canonical_choice(self.optimizer, OPTIMIZERS))
        if isinstance(self.model, str) and not is_torch_model_ref(self.model):
            object.__setattr__(self, "model", canonical_choice(self.model, (*BUILTINS, *CATALOG_ENTRIES)))
        check_model(self.model)
        if self.input_shape is not None:
            parse_input_shape(self.input_shape)
            if not is_torch_model_ref(resolve(self.model)):
                raise ConfigError(f"--input-shape: only for a builder --model (file.py:fn), not {self.model!r}")
        if isinstance(self.micro_batch, bool) or not isinstance(self.micro_batch, int) or self.micro_batch < 1:
            raise ConfigError(f"--micro-batch: {self.micro_batch!r} is not valid; expected an integer >= 1")
        if self.bucket_cap_mb is not None and not (math.isfinite(self.bucket_cap_mb) and self.bucket_cap_mb > 0):
            raise ConfigError(f"--bucket-cap-mb: {self.bucket_cap_mb} is not valid; expected a number > 0")
        if not 1 <= self.world_size <= 64:
            raise ConfigError(f"--emulate-hosts: {self.world_size} is not valid; expected an integer in 1..64")
        if self.steps < 3 or self.warmup < 2:
            raise ConfigError("--steps/--warmup: need at least 3 measured steps and 2 warm-up steps")
        if self.optimizer not in OPTIMIZERS:
            raise ConfigError(f"--optimizer: {self.optimizer!r} is not valid; choose one of {', '.join(OPTIMIZERS)}")


@frozen_dataclass
class ValidationResult:
    """Measured vs predicted step of one case."""

    config: ValidationConfig
    """The case."""
    measured: dict
    """median_s, p10_s, p90_s of rank 0's steps; phase medians."""
    predicted: dict
    """dpsim's step and where the time goes."""
    run: dict = field(default_factory=dict, repr=False, compare=False)
    """Rank 0's raw document (measurements and DDP steps), which :func:`predict_again` replays."""

    @property
    def error(self) -> float:
        """Relative error of the predicted step time against the measured median."""
        return self.predicted["step_time_s"] / self.measured["median_s"] - 1.0

    def to_dict(self) -> dict:
        """JSON-able."""
        return {"schema": "dpsim.validation/2", "config": asdict(self.config), "measured": self.measured,
                "predicted": self.predicted, "error": self.error}


def trace(config: ValidationConfig) -> ModelSpec:
    """The model as predict sees it (fails fast, in one line, before anything runs)."""
    ref = resolve(config.model)
    if not is_torch_model_ref(ref):
        return get_model(ref, flash_attention=True)
    return load_torch_workload(ref, input_shape=config.input_shape)


def _layers(model: ModelSpec, config: ValidationConfig) -> list | None:
    if not is_torch_model_ref(resolve(config.model)):
        return None  # catalog specs are not module paths: the step is split in their proportions
    return [[layer.name, [p.name for p in layer.params]] for layer in model.layers]


def check_host_memory(config: ValidationConfig, model: ModelSpec, *, ranks: int, fewer: str) -> None:
    """Refuse, before a rank starts, ranks that together cannot train the model in this host's memory:
    each builds it with real weights on the CPU (a catalog model at its full size), and ``--model
    deepseek-v3`` asked each rank for terabytes where calibrate refuses it."""
    check_cpu_ranks_fit(model, name=config.model, optimizer=config.optimizer, micro_batch=config.micro_batch,
                        ranks=ranks, fewer=fewer, available_bytes=host_available_bytes())


def validate(config: ValidationConfig) -> ValidationResult:
    """Run the case for real and predict it from its own measurements."""
    model = trace(config)
    # Every emulated host is a namespace of this machine: all the ranks share its memory.
    check_host_memory(config, model, ranks=config.world_size, fewer="fewer --emulate-hosts")
    if config.nic_bits_per_s is not None:
        spec = TestbedSpec(hosts=config.world_size, nic_bits_per_s=config.nic_bits_per_s, racks=config.racks,
                           rack_oversubscription=config.oversubscription)
        with Testbed(spec=spec, kind="validate") as tb:
            run = _run(config, tb, model)
    else:
        run = _run(config, None, model)
    return _result(config, run, model)


def _run(config: ValidationConfig, testbed, model: ModelSpec) -> dict:
    return run_ranks(world_size=config.world_size, model=resolve(config.model), micro_batch=config.micro_batch,
                     bucket_cap_mb=config.bucket_cap_mb, steps=config.steps, warmup=config.warmup,
                     testbed=testbed, timeout_s=config.timeout_s, input_shape=config.input_shape,
                     optimizer=config.optimizer, layers=_layers(model, config))


def _result(config: ValidationConfig, run: dict, model: ModelSpec) -> ValidationResult:
    measured = measured_summary(run)
    ddp = run["ddp"]
    measured.update(forward_s=ddp["forward_s"], backward_and_wait_s=ddp["backward_and_wait_s"],
                    optimizer_s=ddp["optimizer_s"])
    predicted = predict_run(run, model, reference=predict_reference(config.model), input_shape=config.input_shape,
                            optimizer=config.optimizer)
    return ValidationResult(config=config, measured=measured, predicted=predicted, run=run)


def predict_again(config: ValidationConfig, run: dict) -> ValidationResult:
    """The result of a recorded run (``ValidationResult.run``), predicted anew by today's dpsim:
    a deterministic check of the prediction against real measurements, whatever the machine's load now."""
    return _result(config, run, trace(config))


def validate_under_torchrun(config: ValidationConfig) -> ValidationResult | None:
    """Run this process's rank under torchrun (RANK/WORLD_SIZE set); rank 0 gets the result."""
    check_torchrun_env()
    model = trace(config)
    check_host_memory(config, model, ranks=torchrun_count("LOCAL_WORLD_SIZE", 1),
                      fewer="fewer ranks per host (torchrun --nproc-per-node)")
    rank = int(os.environ["RANK"])
    with tempfile.TemporaryDirectory(prefix=f"dpsim-validate-{os.getpid()}-") as tmp:
        out = os.path.join(tmp, "run.json")
        argv = ["--model", resolve(config.model), "--micro-batch", str(config.micro_batch), "--steps",
                str(config.steps), "--warmup", str(config.warmup), "--out", out, "--optimizer", config.optimizer]
        if config.bucket_cap_mb is not None:
            argv += ["--bucket-cap-mb", str(config.bucket_cap_mb)]
        if config.input_shape is not None:
            argv += ["--input-shape", config.input_shape]
        layers = _layers(model, config)
        if layers is not None:
            path = os.path.join(tmp, "layers.json")
            with open(path, "w") as fh:
                json.dump(layers, fh)
            argv += ["--layers", path]
        worker.main(argv)
        if rank != 0:
            return None
        with open(out) as f:
            run = json.load(f)
    return _result(config, run, model)
