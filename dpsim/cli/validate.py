"""``dpsim validate``: real DDP training against dpsim's prediction of it.
"""

from __future__ import annotations

from typing import Optional

import typer

from dpsim.cli.app import _emit_json
from dpsim.cli.checks import require_torch
from dpsim.cli.panels import CLUSTER, GRADIENT_COMMUNICATION, OUTPUT, WORKLOAD
from dpsim.errors import ConfigError
from dpsim.limits import (
    MAX_BUCKET_CAP_MB,
    MAX_EMULATED_HOSTS,
    MAX_MICRO_BATCH,
    MAX_OVERSUBSCRIPTION,
    MAX_VALIDATE_STEPS,
    check_int,
    check_number,
)


def validate(
    model: str = typer.Option(
        "mlp", "--model", help="What predict and calibrate take (a catalog name, path/file.py:fn or "
                               "package.module:fn, optionally :input_fn then :loss_fn), or mlp, transformer, "
                               "convnet.", rich_help_panel=WORKLOAD),
    input_shape: Optional[str] = typer.Option(
        None, "--input-shape", help="Input of your model, batch first (32,1024 or 8,128:int64); without it, the "
                                    "model file's example function.", rich_help_panel=WORKLOAD),
    optimizer: str = typer.Option("adamw", "--optimizer", help="Optimizer when the model file defines no "
                                                               "optimizer(parameters): adamw, adam, sgd-momentum, "
                                                               "sgd.", rich_help_panel=WORKLOAD),
    micro_batch: int = typer.Option(32, "--micro-batch", help="Samples per rank per step.", rich_help_panel=WORKLOAD),
    bucket_cap_mb: Optional[float] = typer.Option(None, "--bucket-cap-mb", help="DDP bucket_cap_mb (MiB).",
                                                  rich_help_panel=GRADIENT_COMMUNICATION),
    emulate_hosts: Optional[int] = typer.Option(
        None, "--emulate-hosts", help="Emulated hosts (one rank each); without it, run under torchrun.",
        rich_help_panel=CLUSTER),
    nic: str = typer.Option("1gbit", "--nic", help="Emulated NIC rate, e.g. 100mbit, 1gbit, 3gbit.",
                            rich_help_panel=CLUSTER),
    racks: int = typer.Option(1, "--racks", help="Emulated racks.", rich_help_panel=CLUSTER),
    oversubscription: float = typer.Option(1.0, "--oversubscription", help="Rack uplink oversubscription.",
                                           rich_help_panel=CLUSTER),
    steps: int = typer.Option(20, "--steps", help="Measured DDP steps.", rich_help_panel=WORKLOAD),
    as_json: bool = typer.Option(False, "--json", help="Print JSON.", rich_help_panel=OUTPUT),
) -> None:
    """Train with real DDP (gloo) and compare the measured step with dpsim's prediction.

    Limits, checked before anything runs: --emulate-hosts at most 64, --steps at most 10,000,
    --oversubscription at most 1,000.
    """
    import os

    check_int(micro_batch, "--micro-batch", 1, MAX_MICRO_BATCH)
    check_int(steps, "--steps", 1, MAX_VALIDATE_STEPS)
    check_int(racks, "--racks", 1, MAX_EMULATED_HOSTS)
    check_number(oversubscription, "--oversubscription", 1, MAX_OVERSUBSCRIPTION)
    if emulate_hosts is not None:
        check_int(emulate_hosts, "--emulate-hosts", 1, MAX_EMULATED_HOSTS)
    if bucket_cap_mb is not None:
        check_number(bucket_cap_mb, "--bucket-cap-mb", 0, MAX_BUCKET_CAP_MB, open_below=True)
    require_torch("dpsim validate")

    from dpsim.processes import torchrun_count
    from dpsim.validate.api import ValidationConfig, validate_under_torchrun
    from dpsim.validate.api import validate as run_validation
    from dpsim.validate.testbed import parse_rate_bits_per_s

    nic_bits_per_s = parse_rate_bits_per_s(nic)  # a bad rate is named before what is missing
    under_torchrun = emulate_hosts is None
    if under_torchrun and not {"RANK", "WORLD_SIZE", "MASTER_ADDR"} <= set(os.environ):
        raise ConfigError("validate: give --emulate-hosts N, or run under torchrun (RANK/WORLD_SIZE/MASTER_ADDR)")
    config = ValidationConfig(
        model=model, micro_batch=micro_batch, bucket_cap_mb=bucket_cap_mb,
        world_size=torchrun_count("WORLD_SIZE") if under_torchrun else emulate_hosts,
        nic_bits_per_s=None if under_torchrun else nic_bits_per_s,
        racks=racks, oversubscription=oversubscription, steps=steps, input_shape=input_shape, optimizer=optimizer,
    )
    result = validate_under_torchrun(config) if under_torchrun else run_validation(config)
    if result is None:
        return
    if as_json:
        _emit_json(result.to_dict())
        return
    from rich.console import Console
    from rich.table import Table

    m, p = result.measured, result.predicted
    table = Table(title=f"{model}, micro-batch {micro_batch}, {config.world_size} ranks, "
                        f"{'torchrun' if under_torchrun else nic}, bucket cap {bucket_cap_mb or 'default'}")
    for col in ("", "measured", "predicted"):
        table.add_column(col, justify="right" if col else "left")
    ms = lambda s: f"{s * 1e3:.2f} ms"  # noqa: E731
    table.add_row("step (median)", f"{ms(m['median_s'])} (p10 {ms(m['p10_s'])}, p90 {ms(m['p90_s'])})",
                  ms(p["step_time_s"]))
    table.add_row("  forward", ms(m["forward_s"]), ms(p["forward_s"]))
    table.add_row("  backward + waiting for all-reduce", ms(m["backward_and_wait_s"]), ms(p["backward_and_wait_s"]))
    table.add_row("  optimizer", ms(m["optimizer_s"]), ms(p["optimizer_s"]))
    table.add_row("all-reduce (sum, exposed)", "", f"{ms(p['comm_s'])}, {ms(p['exposed_comm_s'])}")
    table.add_row("error", "", f"{100 * result.error:+.1f} %")
    Console().print(table)
