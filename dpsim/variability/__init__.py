"""Stragglers and variability: per-rank stochastic steps and Monte-Carlo statistics on top of ``predict``.

- :mod:`~dpsim.variability.spec` — what makes ranks differ (noise, stragglers, hiccups) and the flags' parsers
- :mod:`~dpsim.variability.monte_carlo` — factors drawn per rank and step, replayed exactly, summarised
- :mod:`~dpsim.variability.run` — :func:`predict_with_variability` (degraded links + statistics)

Default noise: ``dpsim calibrate --model`` records the step-time coefficient of variation
(``ModelStep.step_time_cv``) and ``predict --calibration`` uses it when ``--noise-cv`` is not
given, from the CLI as from the API (``VariabilitySpec.noise_cv`` left at ``None``); an explicit
``--noise-cv`` (0 included) wins; without such a profile there is no noise.
"""

from __future__ import annotations

from dpsim.lazy import lazy_exports

_EXPORTS = {
    "VariabilitySpec": "dpsim.variability.spec",
    "Straggler": "dpsim.variability.spec",
    "parse_straggler": "dpsim.variability.spec",
    "StepStatistics": "dpsim.variability.monte_carlo",
    "VariabilityReport": "dpsim.variability.run",
    "predict_with_variability": "dpsim.variability.run",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
