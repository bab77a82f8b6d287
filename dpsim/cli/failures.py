"""The failure and checkpoint flags ``dpsim goodput`` and ``dpsim plan --rank goodput`` share.

Declared once here (the way :data:`dpsim.cli.predict.SINGLE_GPU_SAMPLES_PER_S` is shared), so the
two commands cannot drift apart in spelling, default or help.
"""

from __future__ import annotations

from typing import Optional

import typer

from dpsim.cli.panels import CHECKPOINTS, VARIABILITY
from dpsim.plan.reliability import DEFAULT_NODE_MTBF_S, HOUR_S


def _hours(seconds: float) -> str:
    # The library's default, shown: the flag left out is the library's number (the CLI's own
    # "606674h" once differed from the API's 606,676 h).
    return f"{seconds / HOUR_S:,.0f} h"


MTBF_GPU = typer.Option(
    None, "--mtbf-gpu", help="MTBF per GPU, e.g. 80000h (none = never fails). Default none: the default "
                             "node MTBF already counts GPU failures.", rich_help_panel=VARIABILITY)
MTBF_NODE = typer.Option(
    None, "--mtbf-node", help=f"MTBF per node (host, PSU, software; with the defaults every cause). Default "
                              f"{_hours(DEFAULT_NODE_MTBF_S)}, from Meta's RSC-1: 6.50 failures per 1,000 "
                              f"node-days (Kokolis et al. 2024).", rich_help_panel=VARIABILITY)
MTBF_LINK = typer.Option(
    None, "--mtbf-link", help="MTBF per inter-node link (NIC, cable, switch port). Default none: the default "
                              "node MTBF already counts link failures.", rich_help_panel=VARIABILITY)
CHECKPOINT_BANDWIDTH = typer.Option(
    "10GB/s", "--checkpoint-bandwidth", help="Checkpoint write (and read) bandwidth of one node; every node "
                                             "holding a share writes it in parallel (an assumption; measure yours).",
    rich_help_panel=CHECKPOINTS)
RESTART = typer.Option("10min", "--restart", help="Restart after a failure: relaunch and init (reading the "
                                                  "checkpoint back is added).", rich_help_panel=CHECKPOINTS)
REPLACE = typer.Option(
    "0s", "--replace", help="Time until a failed node is back, e.g. 4h (0 = at once). goodput: the job waits "
                            "for it; plan --rank goodput: sizes the spares that cover it.",
    rich_help_panel=VARIABILITY)


def failure_rates(mtbf_gpu: Optional[str], mtbf_node: Optional[str], mtbf_link: Optional[str]):
    """The :class:`~dpsim.plan.reliability.FailureRates` of the MTBF flags (the library's default where
    one is left out)."""
    from dpsim.plan.reliability import FailureRates, parse_long_duration_s

    return FailureRates(**{name: parse_long_duration_s(raw, flag) for name, flag, raw in (
        ("gpu_mtbf_s", "--mtbf-gpu", mtbf_gpu), ("node_mtbf_s", "--mtbf-node", mtbf_node),
        ("link_mtbf_s", "--mtbf-link", mtbf_link)) if raw is not None})
