"""The public API: predict one data-parallel training configuration.

>>> from dpsim.predict import PredictConfig, predict
>>> p = predict(PredictConfig(gpus=16, link="infiniband", model="gpt2"))
>>> p.n_gpus, p.scaling_efficiency <= 1.0
(16, True)

The package itself calls :func:`dpsim.predict.run.predict` (``dpsim.predict(config)``, the
name ``import dpsim`` exports; :func:`dpsim.lazy.callable_package`).
"""

from __future__ import annotations

from dpsim.lazy import callable_package, lazy_exports

_EXPORTS = {
    "PredictConfig": "dpsim.predict.config",
    "DEFAULT_OVERLAP_SLOWDOWN": "dpsim.predict.config",
    "Prediction": "dpsim.predict.result",
    "predict": "dpsim.predict.run",
    "resolve_topology": "dpsim.predict.run",
    "build_collectives": "dpsim.predict.run",
    "load_model": "dpsim.predict.run",
    "memory_for_config": "dpsim.predict.run",
    "memory_report": "dpsim.predict.run",
    "MemoryReport": "dpsim.predict.result",
    "Resolved": "dpsim.predict.resolve",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
callable_package(__name__, "dpsim.predict.run:predict")
