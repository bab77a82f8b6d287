"""The defaults a calibration profile decides, applied in one place for every entry point.

A :class:`~dpsim.predict.config.PredictConfig` made with ``calibration`` leaves the fields of
:data:`~dpsim.predict.config.PROFILE_DEFAULTED` (and ``gpus_per_node``) at ``None`` when they are
not given; :func:`resolve` reads the profile once and fills them in:

- ``gpus_per_node``: the profile's ranks per node, when it measured across nodes with a node
  size other than the topology's (its inter-node fit is a measurement of that node layout);
- ``precision``: fp32 for a profile measured on CPUs (the only precision it measured), else
  :data:`~dpsim.predict.config.DEFAULT_PRECISION`;
- ``overlap_slowdown``: the compute slowdown the profile measured while communicating, else
  :data:`~dpsim.predict.config.DEFAULT_OVERLAP_SLOWDOWN`.

:func:`dpsim.variability.run.profile_noise_cv` is the variability default on top (``--noise-cv``
left out: the step-time spread the profile recorded). :func:`dpsim.predict.run.predict`, ``sweep``,
``report``, the variability path and every command go through here, so the same question gets the same number
from the Python API and the command line.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from dpsim.errors import ConfigError
from dpsim.frozen import frozen_dataclass
from dpsim.limits import short
from dpsim.predict.config import DEFAULT_OVERLAP_SLOWDOWN, DEFAULT_PRECISION, PredictConfig
from dpsim.profile.calibrated import (
    calibrated_overlap_slowdown,
    is_cpu_profile,
    profile_ranks_per_node,
)
from dpsim.profile.io import load_profile
from dpsim.profile.schema import Profile
from dpsim.topology.load import load_cluster_spec


@frozen_dataclass
class Resolved:
    """A config with every default filled in, and its calibration profile read once."""

    config: PredictConfig
    """The config, no field left at ``None`` that a profile decides."""
    profile: Profile | None
    """The profile ``config.calibration.profile`` names, loaded (``None`` without one)."""


def resolve(config: PredictConfig, profile: Profile | None = None) -> Resolved:
    """``config`` with the defaults its calibration profile decides (see the module docstring).

    ``profile``: ``config.calibration.profile``'s profile when the caller has already loaded it; read
    here otherwise. Resolving a resolved config changes nothing.
    """
    if not isinstance(config, PredictConfig):  # every API entry passes here first (a str was an AttributeError)
        raise ConfigError(f"config: {short(config)} is not valid; expected a dpsim.PredictConfig "
                          f"(e.g. dpsim.PredictConfig(gpus=8, model='gpt2'))")
    if config.calibration.profile is None:
        return Resolved(config=config, profile=None)
    if profile is None:
        profile = load_profile(config.calibration.profile)
    changes = profile_defaults(config, profile)
    return Resolved(config=replace(config, **changes) if changes else config, profile=profile)


def profile_defaults(config: PredictConfig, profile: Profile) -> dict[str, Any]:
    """Field -> value for the fields of ``config`` left at ``None`` that ``profile`` decides."""
    cl = config.cluster
    out: dict[str, Any] = {}
    if cl.gpus_per_node is None:
        rpn = profile_ranks_per_node(profile)
        if rpn is not None and "inter_node" in profile.link_classes:
            spec = load_cluster_spec(cl.topology_file, cl.link)
            if rpn != spec.node.gpus_per_node:
                out["gpus_per_node"] = rpn
    if config.execution.precision is None:
        out["precision"] = "fp32" if is_cpu_profile(profile) else DEFAULT_PRECISION
    if config.calibration.overlap_slowdown is None:
        measured = calibrated_overlap_slowdown(profile)
        out["overlap_slowdown"] = DEFAULT_OVERLAP_SLOWDOWN if measured is None else measured
    return out
