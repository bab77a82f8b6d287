"""The panels ``--help`` groups a command's flags in, named after the layer that reads the flag.

``predict --help`` lists some 65 flags; in one "Options" box a reader cannot find the
one that sets the precision. Each flag is shown in the panel of the part of dpsim that
reads it: the cluster (topology, GPUs, collectives over the fabric), the workload
(model and batch), the parallel layout, precision and memory, calibration (what replaces
the modelled compute and communication), variability and failures, budgets, and what
the command prints or writes.

A ``PredictConfig`` field's flag takes its panel from :data:`CONFIG_PANELS` in every
command that exposes it (:mod:`dpsim.cli.options`); a flag of a command's own names
its panel with ``rich_help_panel=`` where it is declared. A new field goes into the part
that reads it; tests/test_cli_flags.py freezes every command's flags and their panels.
"""

from __future__ import annotations

import dataclasses
from typing import Any

CLUSTER = "Cluster"
WORKLOAD = "Workload"
PARALLELISM = "Parallelism"
GRADIENT_COMMUNICATION = "DDP & gradient communication"
PRECISION_MEMORY = "Precision & memory"
CALIBRATION = "Calibration"
VARIABILITY = "Variability & failures"
CHECKPOINTS = "Checkpoints & restarts"
BUDGET = "Budget & cost"
GRID = "Grid"
SEARCH = "Layouts searched"
NCCL_TESTS_LOGS = "nccl-tests logs"
MEASURED_COLLECTIVES = "Collectives measured"
MEASURED_COMPUTE = "Compute measured"
REPEATS = "Repeats & time limits"
EXECUTION = "Execution"
OUTPUT = "Output"

PANEL_ORDER = (GRID, NCCL_TESTS_LOGS, CLUSTER, WORKLOAD, SEARCH, PARALLELISM, GRADIENT_COMMUNICATION,
               PRECISION_MEMORY, CALIBRATION, MEASURED_COLLECTIVES, MEASURED_COMPUTE, REPEATS, VARIABILITY,
               CHECKPOINTS, BUDGET, EXECUTION, OUTPUT)
"""The order ``--help`` shows the panels in: what the job is, then how it runs, then what is printed."""

PART_PANELS: dict[str, str] = {"cluster": CLUSTER, "workload": WORKLOAD, "parallelism": PARALLELISM,
                               "gradients": GRADIENT_COMMUNICATION, "execution": PRECISION_MEMORY,
                               "calibration": CALIBRATION}
"""Part of :class:`~dpsim.predict.config.PredictConfig` -> the panel showing its settings: a setting's panel
is its part's, so the configuration and ``--help`` are grouped the same way."""

def _config_panels() -> dict[str, tuple[str, ...]]:
    from dpsim.predict.config import PARTS, setting_key

    return {PART_PANELS[part]: tuple(setting_key(f) for f in dataclasses.fields(cls)) for part, cls in PARTS.items()}


def __getattr__(name: str) -> Any:
    # CONFIG_PANELS and FIELD_PANEL need dpsim.predict.config (every strategy and workload module,
    # ~0.5 s), which the command line's own start-up (dpsim.cli.app sorts flags by panel_rank) and
    # commands without config flags never read: built on first use, then kept as plain globals.
    if name == "CONFIG_PANELS":
        globals()[name] = _config_panels()
    elif name == "FIELD_PANEL":
        globals()[name] = {field: panel for panel, names in __getattr__("CONFIG_PANELS").items()
                           for field in names}
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return globals()[name]


CONFIG_PANELS: dict[str, tuple[str, ...]]
"""Panel -> the ``PredictConfig`` settings (flat names) whose flags it shows, in their part's order
(built on first use)."""

FIELD_PANEL: dict[str, str]
"""``PredictConfig`` field -> its flag's panel (a field missing here is shown under typer's "Options");
built on first use."""


def panel_rank(param: object) -> int:
    """Where ``param``'s panel comes in :data:`PANEL_ORDER`: typer's own "Options" and "Arguments" first, a
    panel missing from the order last (tests/test_cli_flags.py names it)."""
    panel = getattr(param, "rich_help_panel", None)
    if panel is None:
        return -1
    return PANEL_ORDER.index(panel) if panel in PANEL_ORDER else len(PANEL_ORDER)
