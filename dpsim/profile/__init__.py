"""Calibration profiles: the fitted, versioned product of ``dpsim calibrate``, and how predictions use it.

- :mod:`~dpsim.profile.schema` — the data (measurements, piecewise fits, compute) as dataclasses
- :mod:`~dpsim.profile.fit` — numpy least-squares alpha-beta fits, piecewise by size
- :mod:`~dpsim.profile.io` — strict JSON loading, atomic saving, the shipped profiles
- :mod:`~dpsim.profile.calibrated` — a profile as a collective model and as compute rates
No torch here: ``predict --calibration`` reads profiles without it.
"""

from __future__ import annotations

from dpsim.lazy import lazy_exports

_EXPORTS = {
    "Profile": "dpsim.profile.schema",
    "Measurement": "dpsim.profile.schema",
    "OpCalibration": "dpsim.profile.schema",
    "ComputeCalibration": "dpsim.profile.schema",
    "ModelStep": "dpsim.profile.schema",
    "fit_alpha_beta": "dpsim.profile.fit",
    "AlphaBetaFit": "dpsim.profile.fit",
    "load_profile": "dpsim.profile.io",
    "save_profile": "dpsim.profile.io",
    "shipped_profile_names": "dpsim.profile.io",
    "CalibratedCollectives": "dpsim.profile.calibrated",
    "calibrated_collectives": "dpsim.profile.calibrated",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
