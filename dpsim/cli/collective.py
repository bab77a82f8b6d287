"""``dpsim collective``: a collective over a size sweep, printed like nccl-tests.
"""

from __future__ import annotations

from typing import Optional

import typer

from dpsim.cli.app import _emit_json
from dpsim.cli.checks import size_sweep
from dpsim.errors import ConfigError
from dpsim.limits import MAX_COLLECTIVE_BYTES, MAX_GPUS, MAX_SIZE_ROWS


def collective(
    op: str = typer.Option("all_reduce", "--op", help="all_reduce, reduce_scatter, all_gather or broadcast."),
    gpus: int = typer.Option(8, "--gpus", help=f"Ranks in the communicator (at most {MAX_GPUS:,})."),
    link: str = typer.Option("nvlink", "--link", help="Topology preset."),
    topology: Optional[str] = typer.Option(None, "--topology", help="A topology YAML file (instead of --link)."),
    gpus_per_node: Optional[int] = typer.Option(None, "--gpus-per-node", help="Override GPUs per node."),
    minbytes: str = typer.Option("8", "-b", "--minbytes", help="Smallest size (nccl-tests -b; 1K = 1024)."),
    maxbytes: str = typer.Option("1G", "-e", "--maxbytes", help="Largest size (nccl-tests -e); at most 1TiB."),
    stepfactor: float = typer.Option(2.0, "-f", "--stepfactor", help=f"Multiply the size by this each row (> 1; at "
                                                                     f"most {MAX_SIZE_ROWS:,} rows)."),
    dtype: str = typer.Option("float", "-d", "--datatype", help="float, half, bfloat16, double or int8."),
    calibration: Optional[str] = typer.Option(
        None, "--calibration", help="A profile from dpsim calibrate (file or shipped name) instead of the preset."),
    algo: Optional[str] = typer.Option(
        None, "--algo", help="Algorithms allowed, like NCCL_ALGO: ring, tree, nvls, nvls_tree, hierarchical, "
                             "halving_doubling (comma list or ^name). Default: NCCL's choice per size."),
    proto: Optional[str] = typer.Option(None, "--proto", help="Protocols allowed, like NCCL_PROTO: LL, LL128, Simple."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of the nccl-tests table."),
) -> None:
    """Predict a collective over a size sweep, printed like nccl-tests' *_perf tools."""
    from dpsim.collectives.ops import OPS
    from dpsim.predict.config import PredictConfig
    from dpsim.predict.resolve import resolve
    from dpsim.predict.run import build_collectives, resolve_topology
    from dpsim.report.text import NCCL_TESTS_TYPE_BYTES, nccl_tests_table

    if op not in OPS:
        raise ConfigError(f"--op: {op!r} is not a collective; choose one of {', '.join(OPS)}")
    if dtype not in NCCL_TESTS_TYPE_BYTES:
        raise ConfigError(f"-d/--datatype: {dtype!r} is not known; choose one of {', '.join(NCCL_TESTS_TYPE_BYTES)}")
    lo, hi, _ = size_sweep(minbytes, maxbytes, stepfactor, max_bytes=MAX_COLLECTIVE_BYTES)
    # The same cluster and collective model predict costs the job's world communicator with
    # (a profile's ranks per node included).
    resolved = resolve(PredictConfig(gpus=gpus, link=link, topology_file=topology, gpus_per_node=gpus_per_node,
                                     algo=algo, proto=proto, calibration=calibration))
    topo = resolve_topology(resolved.config)
    model = build_collectives(resolved.config, topo, profile=resolved.profile).world
    algorithm = "nccl" if calibration is None else f"calibrated ({model.profile.name})"
    elem = NCCL_TESTS_TYPE_BYTES[dtype]
    sizes = []
    size = lo
    while size <= hi * (1 + 1e-12):
        # nccl-tests rounds each size down to whole elements (and whole ranks' shares).
        align = elem * (gpus if op in ("reduce_scatter", "all_gather") else 1)
        sizes.append(max(align, int(size) // align * align))
        size *= stepfactor
    results = [model.time(op, s) for s in sizes]
    if as_json:
        _emit_json({
            "schema": "dpsim.collective/1", "op": op, "n_ranks": topo.n_gpus, "topology": topo.spec.name,
            "dtype": dtype, "algorithm": "nccl" if calibration is None else "calibrated",
            "calibration": calibration,
            "rows": [{"size_bytes": int(r.size_bytes), "count": int(r.size_bytes) // elem, "time_s": r.time_s,
                      "algbw_bytes_per_s": r.algbw_bytes_per_s, "busbw_bytes_per_s": r.busbw_bytes_per_s,
                      "algorithm": r.algorithm, "protocol": r.protocol}
                     for r in results],
        })
    else:
        print(f"# dpsim collective --op {op}: {topo.n_gpus} ranks on {topo.spec.name} "
              f"({topo.n_nodes} node{'s' if topo.n_nodes > 1 else ''}), {algorithm}, predicted")
        print(nccl_tests_table(results, dtype))
        if calibration is None:
            from dpsim.collectives.nccl import describe_choices
            print(describe_choices(results))
