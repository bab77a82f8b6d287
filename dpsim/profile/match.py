"""Whether a profile's measured step is the step being predicted: models matched by what they are.

A model is identified by its traced structure, not by how ``--model`` spelled it (a
relative path, an absolute one, ``package.module:fn`` and ``file.py:fn:input_fn`` all
name the same module): :func:`model_fingerprint` hashes the parameters (names, shapes,
dtypes, in registration order) and the layers in execution order with the parameters
each owns. What the model is fed matters as much (a longer sequence is more work for the
same parameters), so the per-sample forward FLOPs must agree too, as must the
micro-batch and the compute dtype. :func:`match_model_step` says which of these differ.
"""

from __future__ import annotations

import json
import math

from dpsim.frozen import frozen_dataclass
from dpsim.profile.schema import ModelStep, Profile
from dpsim.workload.spec import ModelSpec

FLOPS_REL_TOLERANCE = 1e-6
"""Per-sample FLOPs of the same module fed the same sample shape agree to rounding."""


def model_fingerprint(model: ModelSpec) -> str:
    """SHA-256 (hex) of ``model``'s structure: parameters and layer order, not its name."""
    doc = {
        "params": [[p.name, list(p.shape), p.dtype] for p in model.params],
        "layers": [[layer.name, [p.name for p in layer.params]] for layer in model.layers],
    }
    import hashlib  # here: its OpenSSL start-up (~5 ms) is for fingerprints alone, not every predict

    return hashlib.sha256(json.dumps(doc, separators=(",", ":")).encode()).hexdigest()


@frozen_dataclass
class StepMatch:
    """The outcome of matching a profile's measured step against a prediction's model."""

    step: ModelStep | None
    """The measured step when it applies, else ``None``."""
    reason: str
    """Why it applies or not, one phrase (for the provenance report)."""


def match_model_step(profile: Profile, model: ModelSpec, *, micro_batch: int, dtype: str,
                     config_model: str) -> StepMatch:
    """The profile's measured step if it is ``model`` at ``micro_batch`` in ``dtype``, else why not.

    Profiles written before fingerprints were recorded match by the ``--model`` string.
    """
    c = profile.compute
    if c is None or c.model_step is None:
        return StepMatch(step=None, reason=f"profile {profile.name} timed no model step")
    s = c.model_step
    if s.structure_hash is not None:
        if s.structure_hash != model_fingerprint(model):
            return StepMatch(step=None, reason=f"profile {profile.name} timed another model ({s.model}: "
                                               "different parameters or layers)")
        if (s.forward_flops_per_sample is not None and model.forward_flops_per_sample > 0
                and not math.isclose(s.forward_flops_per_sample, model.forward_flops_per_sample,
                                     rel_tol=FLOPS_REL_TOLERANCE)):
            return StepMatch(step=None, reason=f"profile {profile.name} timed {s.model} on other inputs "
                                               f"({s.forward_flops_per_sample:.4g} forward FLOPs per sample, "
                                               f"{model.forward_flops_per_sample:.4g} here)")
    elif s.model != config_model:
        return StepMatch(step=None, reason=f"profile {profile.name} timed {s.model}, not {config_model}")
    if s.micro_batch != micro_batch:
        return StepMatch(step=None, reason=f"profile {profile.name} timed micro-batch {s.micro_batch}, "
                                           f"not {micro_batch} (calibrate with --micro-batch {micro_batch})")
    if s.dtype != dtype:
        return StepMatch(step=None, reason=f"profile {profile.name} timed {s.dtype} compute, this precision "
                                           f"computes in {dtype}")
    return StepMatch(step=s, reason=f"measured by profile {profile.name}")
