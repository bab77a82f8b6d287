"""dpsim: a discrete-event simulator of data-parallel GPU training clusters.

The public API, each name imported on first use (``import dpsim`` loads nothing else, and
``dpsim predict`` never imports torch)::

    import dpsim
    p = dpsim.predict(dpsim.PredictConfig(gpus=64, link="infiniband", model="llama-2-7b", micro_batch=1))
    df = dpsim.sweep(gpus=[8, 64], link=["infiniband", "ethernet"], model="gpt2")
    layouts = dpsim.plan(dpsim.PredictConfig(model="llama-2-70b", link="infiniband"), gpus=[256], global_batch=1024)
    g = dpsim.goodput(dpsim.PredictConfig(gpus=1024, link="infiniband"), duration_s=7 * 86400)

Every command of the CLI goes through these, so they give the same numbers (tests/test_api.py).
"""

from __future__ import annotations

import importlib
from typing import Any

from dpsim.lazy import lazy_exports

_EXPORTS = {
    "PredictConfig": "dpsim.predict.config",
    "Prediction": "dpsim.predict.result",
    "memory_report": "dpsim.predict.run",
    "MemoryReport": "dpsim.predict.result",
    "predict_collective": "dpsim.predict.collective",
    "CollectiveReport": "dpsim.predict.collective",
    "predict_with_variability": "dpsim.variability.run",
    "VariabilitySpec": "dpsim.variability.spec",
    "VariabilityReport": "dpsim.variability.run",
    "sweep": "dpsim.plan.sweep",
    "SweepSpec": "dpsim.plan.grid",
    "PlanResult": "dpsim.plan.planner",
    "goodput": "dpsim.plan.job",
    "GoodputReport": "dpsim.plan.job",
    "DpsimError": "dpsim.errors",
    "ConfigError": "dpsim.errors",
}

_PACKAGES = ("predict", "plan")
"""Exports that are subpackages made callable (:func:`dpsim.lazy.callable_package`): ``dpsim.predict``
calls :func:`dpsim.predict.run.predict`, ``dpsim.plan`` :func:`dpsim.plan.planner.plan_layouts`."""

_getattr, _dir = lazy_exports(__name__, _EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _PACKAGES:
        return importlib.import_module(f"{__name__}.{name}")
    return _getattr(name)


def __dir__() -> list[str]:
    return sorted([*_dir(), *_PACKAGES])


__all__ = sorted([*_EXPORTS, *_PACKAGES])
