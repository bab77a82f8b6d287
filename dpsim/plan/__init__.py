"""Capacity planning on top of ``predict``: sweeps, cost and time to train, failures and goodput.

- :mod:`~dpsim.plan.grid` / :mod:`~dpsim.plan.sweep` — grids of configurations, run serially or on Dask
  (``from dpsim.plan.sweep import sweep``: the package does not re-export a name its submodule has)
- :mod:`~dpsim.plan.cost` — GPU-hour prices (cited) and the cost of a token or sample budget
- :mod:`~dpsim.plan.reliability` / :mod:`~dpsim.plan.goodput` — MTBF, checkpoints, restarts, goodput
- :mod:`~dpsim.plan.planner` — tensor x pipeline x data layouts ranked by time and cost; the package
  itself calls :func:`~dpsim.plan.planner.plan_layouts` (``dpsim.plan(base, gpus=..., global_batch=...)``,
  the name ``import dpsim`` exports; :func:`dpsim.lazy.callable_package`)
"""

from __future__ import annotations

from dpsim.lazy import callable_package, lazy_exports

_EXPORTS = {
    "run_sweep": "dpsim.plan.sweep",
    "to_dataframe": "dpsim.plan.sweep",
    "SweepSpec": "dpsim.plan.grid",
    "training_cost": "dpsim.plan.cost",
    "prediction_cost": "dpsim.plan.cost",
    "simulate_goodput": "dpsim.plan.goodput",
    "interval_study": "dpsim.plan.goodput",
    "TrainingJob": "dpsim.plan.reliability",
    "plan_layouts": "dpsim.plan.planner",
    "PlanResult": "dpsim.plan.planner",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
callable_package(__name__, "dpsim.plan.planner:plan_layouts")
