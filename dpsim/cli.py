"""Command line: ``dpsim predict`` and ``dpsim collective``.

Every :class:`~dpsim.errors.DpsimError` and every bad flag is caught once, here, and
printed as one line on stderr (exit status 2); nothing prints a traceback.
"""

from __future__ import annotations

import json
import math
import sys
from typing import Optional

import typer

from dpsim.errors import ConfigError, DpsimError

try:  # typer >= 0.22 parses with its own vendored copy of click (the click package may be absent)
    from typer._click import exceptions as _click_exceptions
except ImportError:  # older typer uses click itself
    from click import exceptions as _click_exceptions  # type: ignore[no-redef]
_CLICK_ERRORS = (_click_exceptions.ClickException,)
_ABORTS = tuple({typer.Abort, getattr(_click_exceptions, "Abort", typer.Abort)})

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Discrete-event simulator of data-parallel GPU training clusters.")


def _json_safe(obj):
    # JSON has no inf/nan (e.g. the ring bandwidth of a 1-GPU "ring" is inf): write null.
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    return obj


def _emit_json(obj: dict) -> None:
    sys.stdout.write(json.dumps(_json_safe(obj), indent=2, allow_nan=False) + "\n")


@app.command()
def predict(
    gpus: int = typer.Option(64, "--gpus", help="Data-parallel GPUs."),
    link: str = typer.Option("ethernet", "--link", help="Topology preset: nvlink, infiniband, ethernet, pcie."),
    topology: Optional[str] = typer.Option(None, "--topology", help="A topology YAML file (instead of --link)."),
    gpus_per_node: Optional[int] = typer.Option(None, "--gpus-per-node", help="Override GPUs per node."),
    gpu: Optional[str] = typer.Option(None, "--gpu", help="Override the GPU: v100, a100, h100, h200, b200."),
    model: str = typer.Option("gpt2-xl", "--model", help="Catalog model (dpsim models lists them)."),
    seq_len: Optional[int] = typer.Option(None, "--seq-len", help="Override the sequence length."),
    micro_batch: int = typer.Option(4, "--micro-batch", help="Samples per GPU per step."),
    flash_attention: bool = typer.Option(
        True, "--flash-attention/--no-flash-attention", help="Attention keeps no score matrices (activation memory)."),
    precision: str = typer.Option("bf16-mixed", "--precision", help="fp32, amp, bf16-mixed or bf16."),
    optimizer: str = typer.Option("adamw", "--optimizer", help="adamw, adam, sgd-momentum or sgd."),
    bucket_cap_mb: Optional[float] = typer.Option(
        None, "--bucket-cap-mb", help="DDP bucket_cap_mb in MiB (default: PyTorch's 25 with a 1 MiB first bucket)."),
    no_overlap: bool = typer.Option(False, "--no-overlap", help="All-reduce after backward instead of during it."),
    overlap_slowdown: Optional[float] = typer.Option(
        None, "--overlap-slowdown", help="Compute slowdown while communicating (0.1 = 10 %)."),
    compute_efficiency: Optional[float] = typer.Option(
        None, "--compute-efficiency", help="Fraction of the achieved matmul rate layers reach (default 0.6)."),
    single_gpu_step_ms: Optional[float] = typer.Option(
        None, "--single-gpu-step-ms", help="Your measured one-GPU step (ms): compute is scaled to it."),
    single_gpu_samples_per_s: Optional[float] = typer.Option(
        None, "--single-gpu-samples-per-s", help="Your measured one-GPU throughput: compute is scaled to it."),
    steps: int = typer.Option(3, "--steps", help="Training steps to simulate."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of tables."),
) -> None:
    """Predict the step time, throughput, scaling efficiency and memory of DDP training."""
    from dpsim.predict import DEFAULT_OVERLAP_SLOWDOWN, PredictConfig, predict as run_predict
    from dpsim.workload.compute import DEFAULT_COMPUTE_EFFICIENCY

    if single_gpu_step_ms is not None and single_gpu_samples_per_s is not None:
        raise ConfigError("--single-gpu-step-ms and --single-gpu-samples-per-s: give one, not both")
    single_s = None
    if single_gpu_step_ms is not None:
        _positive("--single-gpu-step-ms", single_gpu_step_ms)
        single_s = single_gpu_step_ms / 1e3
    if single_gpu_samples_per_s is not None:
        _positive("--single-gpu-samples-per-s", single_gpu_samples_per_s)
        single_s = micro_batch / single_gpu_samples_per_s
    if bucket_cap_mb is not None:
        _positive("--bucket-cap-mb", bucket_cap_mb)
    if micro_batch < 1:
        raise ConfigError(f"--micro-batch: {micro_batch} is not valid; expected an integer >= 1")
    if seq_len is not None and seq_len < 1:
        raise ConfigError(f"--seq-len: {seq_len} is not valid; expected an integer >= 1")
    if overlap_slowdown is not None and not (math.isfinite(overlap_slowdown) and overlap_slowdown >= 0):
        raise ConfigError(f"--overlap-slowdown: {overlap_slowdown} is not valid; expected a number >= 0")
    config = PredictConfig(
        gpus=gpus, link=link, topology_file=topology, gpus_per_node=gpus_per_node, gpu=gpu,
        model=model, seq_len=seq_len, flash_attention=flash_attention, micro_batch=micro_batch, precision=precision, optimizer=optimizer,
        bucket_cap_mb=bucket_cap_mb, overlap=not no_overlap,
        overlap_slowdown=DEFAULT_OVERLAP_SLOWDOWN if overlap_slowdown is None else overlap_slowdown,
        compute_efficiency=DEFAULT_COMPUTE_EFFICIENCY if compute_efficiency is None else compute_efficiency,
        single_gpu_step_s=single_s, steps=steps,
    )
    result = run_predict(config)
    if as_json:
        _emit_json(result.to_dict())
    else:
        from dpsim.report import print_prediction
        print_prediction(result)


def _positive(flag: str, value: float) -> None:
    if not (math.isfinite(value) and value > 0):
        raise ConfigError(f"{flag}: {value} is not valid; expected a number > 0")


@app.command()
def collective(
    op: str = typer.Option("all_reduce", "--op", help="all_reduce, reduce_scatter, all_gather or broadcast."),
    gpus: int = typer.Option(8, "--gpus", help="Ranks in the communicator."),
    link: str = typer.Option("nvlink", "--link", help="Topology preset."),
    topology: Optional[str] = typer.Option(None, "--topology", help="A topology YAML file (instead of --link)."),
    gpus_per_node: Optional[int] = typer.Option(None, "--gpus-per-node", help="Override GPUs per node."),
    minbytes: str = typer.Option("8", "-b", "--minbytes", help="Smallest size (nccl-tests -b; 1K = 1024)."),
    maxbytes: str = typer.Option("1G", "-e", "--maxbytes", help="Largest size (nccl-tests -e)."),
    stepfactor: float = typer.Option(2.0, "-f", "--stepfactor", help="Multiply the size by this each row."),
    dtype: str = typer.Option("float", "-d", "--datatype", help="float, half, bfloat16, double or int8."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of the nccl-tests table."),
) -> None:
    """Predict a collective over a size sweep, printed like nccl-tests' *_perf tools."""
    from dpsim.collectives import OPS, RingCollectives
    from dpsim.predict import PredictConfig, resolve_topology
    from dpsim.report import NCCL_TESTS_TYPE_BYTES, nccl_tests_table
    from dpsim.units import parse_size_bytes

    if op not in OPS:
        raise ConfigError(f"--op: {op!r} is not a collective; choose one of {', '.join(OPS)}")
    if dtype not in NCCL_TESTS_TYPE_BYTES:
        raise ConfigError(f"-d/--datatype: {dtype!r} is not known; choose one of {', '.join(NCCL_TESTS_TYPE_BYTES)}")
    lo = parse_size_bytes(minbytes, "-b/--minbytes")
    hi = parse_size_bytes(maxbytes, "-e/--maxbytes")
    if lo <= 0 or hi < lo:
        raise ConfigError(f"-b/-e: {minbytes!r}..{maxbytes!r} is not a valid range; need 0 < minbytes <= maxbytes")
    if not (math.isfinite(stepfactor) and stepfactor > 1):
        raise ConfigError(f"-f/--stepfactor: {stepfactor} is not valid; expected a number > 1")
    topo = resolve_topology(PredictConfig(gpus=gpus, link=link, topology_file=topology, gpus_per_node=gpus_per_node))
    model = RingCollectives(topo)
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
            "dtype": dtype, "algorithm": "ring",
            "rows": [{"size_bytes": int(r.size_bytes), "count": int(r.size_bytes) // elem, "time_s": r.time_s,
                      "algbw_bytes_per_s": r.algbw_bytes_per_s, "busbw_bytes_per_s": r.busbw_bytes_per_s}
                     for r in results],
        })
    else:
        print(f"# dpsim collective --op {op}: {topo.n_gpus} ranks on {topo.spec.name} "
              f"({topo.n_nodes} node{'s' if topo.n_nodes > 1 else ''}), ring, predicted")
        print(nccl_tests_table(results, dtype))


@app.command()
def models(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List the built-in models with their parameter counts."""
    from dpsim.workload.catalog import get_model, list_models

    rows = []
    for name in list_models():
        m = get_model(name)
        rows.append({"name": name, "param_count": m.param_count, "tokens_per_sample": m.tokens_per_sample,
                     "forward_flops_per_sample": m.forward_flops_per_sample})
    if as_json:
        _emit_json({"schema": "dpsim.models/1", "models": rows})
        return
    from rich.console import Console
    from rich.table import Table
    table = Table(title="built-in models")
    for col in ("name", "parameters", "tokens/sample", "forward GFLOP/sample"):
        table.add_column(col, justify="right" if col != "name" else "left")
    for r in rows:
        table.add_row(r["name"], f"{r['param_count']:,}", str(r["tokens_per_sample"] or "-"),
                      f"{r['forward_flops_per_sample'] / 1e9:,.1f}")
    Console().print(table)


testbed_app = typer.Typer(help="An emulated cluster: network namespaces with shaped NICs (needs root).",
                          no_args_is_help=True)
app.add_typer(testbed_app, name="testbed")


@testbed_app.command("up")
def testbed_up(
    hosts: int = typer.Option(2, "--hosts", help="Hosts (namespaces) to create."),
    nic: str = typer.Option("1gbit", "--nic", help="NIC rate of every host, e.g. 100mbit, 1gbit, 3gbit."),
    racks: int = typer.Option(1, "--racks", help="Racks; hosts are split into consecutive blocks."),
    oversubscription: float = typer.Option(1.0, "--oversubscription", help="Rack uplink oversubscription."),
) -> None:
    """Create a testbed and leave it up; prints its tag (give it to `testbed down`)."""
    from dpsim.testbed import Testbed, TestbedSpec, parse_rate_bits_per_s

    spec = TestbedSpec(hosts=hosts, nic_bits_per_s=parse_rate_bits_per_s(nic), racks=racks,
                       rack_oversubscription=oversubscription)
    tb = Testbed(spec=spec)
    try:
        tb.up()
    except BaseException:
        tb.down()
        raise
    print(f"{tb.tag} up: {hosts} hosts at {nic}; host i runs in namespace {tb.tag}-h<i> at {tb.host_ip(0)[:-1]}<i+1>")


@testbed_app.command("down")
def testbed_down(
    tag: Optional[str] = typer.Argument(None, help="Tag printed by `testbed up`."),
    all_: bool = typer.Option(False, "--all", help="Remove every testbed dpsim has up."),
) -> None:
    """Remove a testbed (only namespaces dpsim created for it)."""
    from dpsim.testbed import Testbed, list_testbeds

    if all_ == (tag is not None):
        raise ConfigError("testbed down: give a TAG or --all (one of them)")
    tags = [s["tag"] for s in list_testbeds()] if all_ else [tag]
    for t in tags:
        Testbed.from_state(t).down()
        print(f"{t} down")


@testbed_app.command("status")
def testbed_status(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List the testbeds that are up."""
    from dpsim.testbed import list_testbeds

    beds = list_testbeds()
    if as_json:
        _emit_json({"schema": "dpsim.testbeds/1", "testbeds": beds})
        return
    if not beds:
        print("no testbed is up")
    for s in beds:
        spec = s["spec"]
        print(f"{s['tag']}: {spec['hosts']} hosts, {spec['nic_bits_per_s'] / 1e6:g} Mbit/s, "
              f"{spec['racks']} rack(s), namespaces: {' '.join(s['namespaces'])}")


@app.command()
def validate(
    model: str = typer.Option("mlp", "--model", help="Validation model: mlp, transformer or convnet."),
    micro_batch: int = typer.Option(32, "--micro-batch", help="Samples per rank per step."),
    bucket_cap_mb: Optional[float] = typer.Option(None, "--bucket-cap-mb", help="DDP bucket_cap_mb (MiB)."),
    emulate_hosts: Optional[int] = typer.Option(
        None, "--emulate-hosts", help="Emulated hosts (one rank each); without it, run under torchrun."),
    nic: str = typer.Option("1gbit", "--nic", help="Emulated NIC rate, e.g. 100mbit, 1gbit, 3gbit."),
    racks: int = typer.Option(1, "--racks", help="Emulated racks."),
    oversubscription: float = typer.Option(1.0, "--oversubscription", help="Rack uplink oversubscription."),
    steps: int = typer.Option(20, "--steps", help="Measured DDP steps."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Train with real DDP (gloo) and compare the measured step with dpsim's prediction."""
    import os

    from dpsim.testbed import parse_rate_bits_per_s
    from dpsim.validate.api import ValidationConfig, validate as run_validation, validate_under_torchrun

    under_torchrun = emulate_hosts is None
    if under_torchrun and not {"RANK", "WORLD_SIZE", "MASTER_ADDR"} <= set(os.environ):
        raise ConfigError("validate: give --emulate-hosts N, or run under torchrun (RANK/WORLD_SIZE/MASTER_ADDR)")
    config = ValidationConfig(
        model=model, micro_batch=micro_batch, bucket_cap_mb=bucket_cap_mb,
        world_size=int(os.environ["WORLD_SIZE"]) if under_torchrun else emulate_hosts,
        nic_bits_per_s=None if under_torchrun else parse_rate_bits_per_s(nic),
        racks=racks, oversubscription=oversubscription, steps=steps,
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


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the CLI, turning every user error into one line on stderr."""
    command = typer.main.get_command(app)
    try:
        command.main(args=argv, prog_name="dpsim", standalone_mode=False)
    except _ABORTS:
        print("dpsim: aborted", file=sys.stderr)
        return 130
    except _CLICK_ERRORS as exc:
        message = " ".join(exc.format_message().split())
        if type(exc).__name__ == "NoArgsIsHelpError":
            # Bare ``dpsim``: typer's rich help is already on stdout (or is the message).
            if message:
                print(exc.format_message())
            message = f"missing command; choose one of {', '.join(sorted(command.commands))}"
        print(f"dpsim: error: {message}", file=sys.stderr)
        return 2
    except DpsimError as exc:
        print(f"dpsim: error: {exc}", file=sys.stderr)
        return 2
    return 0


def run() -> None:
    """Console-script entry point (``dpsim``)."""
    sys.exit(main())
