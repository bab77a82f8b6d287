"""The panels ``--help`` groups a command's flags in, named after the layer that reads the flag.

``predict --help`` lists some 65 flags; in one "Options" box a reader cannot find the
one that sets the precision. Each flag is shown in the panel of the part of dpsim that
reads it: the cluster (topology, GPUs, collectives over the fabric), the workload
(model and batch), the parallel layout, precision and memory, calibration (what replaces
the modelled compute and communication), variability and failures, budgets, and what
the command prints or writes.

A ``PredictConfig`` field's flag takes its panel from :data:`CONFIG_PANELS` in every
command that exposes it (:mod:`dpsim.cli.options`); a flag of a command's own names
its panel with ``rich_help_panel=`` where it is declared. A new field needs one line
here; tests/test_cli_flags.py freezes every command's flags and their panels.
"""

from __future__ import annotations

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

CONFIG_PANELS: dict[str, tuple[str, ...]] = {
    CLUSTER: ("gpus", "link", "topology_file", "gpus_per_node", "gpu", "algo", "proto", "jobs", "placement"),
    WORKLOAD: ("model", "input_shape", "seq_len", "micro_batch", "grad_accum", "global_batch", "optimizer",
               "clip_grad_norm", "zero_grad", "input_samples_per_s", "steps"),
    PARALLELISM: ("strategy", "fsdp_unit", "fsdp_version", "fsdp_accumulate", "tp", "pp", "dp", "schedule", "virtual_stages", "stage_layers",
                  "sequence_parallel", "tp_comm_overlap", "tp_across_network", "grad_accum_fusion", "cp",
                  "cp_comm", "cp_balance", "ep", "etp", "moe_routing", "moe_capacity_factor", "moe_a2a"),
    GRADIENT_COMMUNICATION: ("bucket_cap_mb", "overlap", "gradient_as_bucket_view", "static_graph",
                             "find_unused_parameters", "broadcast_buffers", "comm_hook", "powersgd_rank",
                             "powersgd_start_iter"),
    PRECISION_MEMORY: ("precision", "fp8", "compile", "flash_attention", "activation_checkpointing", "recompute", "recompute_every",
                       "offload"),
    CALIBRATION: ("calibration", "op_rates", "single_gpu_step_s", "compute_efficiency", "overlap_slowdown"),
}
"""Panel -> the ``PredictConfig`` fields whose flags it shows."""

FIELD_PANEL: dict[str, str] = {name: panel for panel, names in CONFIG_PANELS.items() for name in names}
"""``PredictConfig`` field -> its flag's panel (a field missing here is shown under typer's "Options")."""


def panel_rank(param: object) -> int:
    """Where ``param``'s panel comes in :data:`PANEL_ORDER`: typer's own "Options" and "Arguments" first, a
    panel missing from the order last (tests/test_cli_flags.py names it)."""
    panel = getattr(param, "rich_help_panel", None)
    if panel is None:
        return -1
    return PANEL_ORDER.index(panel) if panel in PANEL_ORDER else len(PANEL_ORDER)
