"""``dpsim collective``: a collective over a size sweep, printed like nccl-tests.
"""

from __future__ import annotations

from typing import Optional

import typer

from dpsim.cli.app import _emit_json
from dpsim.cli.checks import size_sweep
from dpsim.cli.panels import CALIBRATION, CLUSTER, OUTPUT, WORKLOAD
from dpsim.limits import MAX_COLLECTIVE_BYTES, MAX_GPUS, MAX_SIZE_ROWS
from dpsim.wording import canonical_choice


def collective(
    op: str = typer.Option("all_reduce", "--op", help="all_reduce, reduce_scatter, all_gather or broadcast.",
                           rich_help_panel=WORKLOAD),
    gpus: int = typer.Option(8, "--gpus", help=f"Ranks in the communicator (at most {MAX_GPUS:,}).",
                             rich_help_panel=CLUSTER),
    # None: not given, so that --link with --topology is refused (the file won in silence) as predict's is.
    link: Optional[str] = typer.Option(None, "--link", help="Topology preset (default nvlink; not with --topology).",
                                       rich_help_panel=CLUSTER),
    topology: Optional[str] = typer.Option(None, "--topology", help="A topology YAML file (instead of --link).",
                                           rich_help_panel=CLUSTER),
    gpus_per_node: Optional[int] = typer.Option(None, "--gpus-per-node", help="Override GPUs per node.",
                                                rich_help_panel=CLUSTER),
    minbytes: str = typer.Option("8", "-b", "--minbytes", help="Smallest size (nccl-tests -b; 1K = 1024).",
                                 rich_help_panel=WORKLOAD),
    maxbytes: str = typer.Option("1G", "-e", "--maxbytes", help="Largest size (nccl-tests -e); at most 1TiB.",
                                 rich_help_panel=WORKLOAD),
    stepfactor: float = typer.Option(2.0, "-f", "--stepfactor", help=f"Multiply the size by this each row (> 1; at "
                                                                     f"most {MAX_SIZE_ROWS:,} rows).",
                                     rich_help_panel=WORKLOAD),
    dtype: str = typer.Option("float", "-d", "--datatype", help="float, half, bfloat16, double or int8.",
                              rich_help_panel=WORKLOAD),
    calibration: Optional[str] = typer.Option(
        None, "--calibration", help="A profile from dpsim calibrate (file or shipped name) instead of the preset.",
        rich_help_panel=CALIBRATION),
    algo: Optional[str] = typer.Option(
        None, "--algo", help="Algorithms allowed, like NCCL_ALGO: ring, tree, nvls, nvls_tree, hierarchical, "
                             "halving_doubling (comma list or ^name). Default: NCCL's choice per size.",
        rich_help_panel=CLUSTER),
    proto: Optional[str] = typer.Option(None, "--proto", help="Protocols allowed, like NCCL_PROTO: LL, LL128, Simple.",
                                        rich_help_panel=CLUSTER),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of the nccl-tests table.",
                                 rich_help_panel=OUTPUT),
) -> None:
    """Predict a collective over a size sweep, printed like nccl-tests' *_perf tools."""
    from dpsim.predict.collective import TYPE_BYTES, predict_collective
    from dpsim.predict.config import PredictConfig
    from dpsim.collectives.ops import OPS
    from dpsim.report.text import nccl_tests_table

    op, dtype = canonical_choice(op, OPS), canonical_choice(dtype, TYPE_BYTES)  # the table prints the names too
    lo, hi, _ = size_sweep(minbytes, maxbytes, stepfactor, max_bytes=MAX_COLLECTIVE_BYTES)
    report = predict_collective(PredictConfig(gpus=gpus, link=link if link is not None or topology is not None
                                                              else "nvlink", topology_file=topology, gpus_per_node=gpus_per_node,
                                              algo=algo, proto=proto, calibration=calibration),
                                op=op, minbytes=lo, maxbytes=hi, stepfactor=stepfactor, dtype=dtype)
    results = list(report.results)
    if as_json:
        _emit_json(report.to_dict())
    else:
        algorithm = "nccl" if calibration is None else f"calibrated ({report.profile})"
        print(f"# dpsim collective --op {op}: {report.n_ranks} ranks on {report.topology} "
              f"({report.n_nodes} node{'s' if report.n_nodes > 1 else ''}), {algorithm}, predicted")
        print(nccl_tests_table(results, dtype))
        if calibration is None:
            from dpsim.collectives.selection import describe_choices
            print(describe_choices(results))
