"""Human-readable output: rich tables for predictions and collective sweeps."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from dpsim import wording
from dpsim.collectives.ops import CollectiveResult
from dpsim.memory import with_subpart_rows
from dpsim.predict.collective import TYPE_BYTES as NCCL_TESTS_TYPE_BYTES
from dpsim.predict.result import Prediction
from dpsim.report.layout import layout_tables
from dpsim.units import format_bytes, format_bytes_against, format_seconds, format_seconds_as


def _pct(x: float | None) -> str:
    if x is None:
        return "n/a"
    value = round(100 * x, 1)
    return f"{value + 0.0 if value != 0 else 0.0:.1f} %"  # never "-0.0 %" for a rounding speck below zero


def _collectives_row(p: Prediction) -> tuple[str, str]:
    """What NCCL's choice ran and what bound it, or the calibration profile the fits came from."""
    links = p.links
    if links is not None and links.algorithms:
        used = ", ".join(f"{algo} x{n}" for algo, n in sorted(links.algorithms.items(), key=lambda kv: -kv[1]))
        bound = links.bottleneck[0].link_class if links.bottleneck else "-"
        return "collectives (bottleneck)", f"{used} ({bound})"
    if p.config.calibration.profile:
        return "collectives", f"fitted from profile {p.config.calibration.profile}"
    return "collectives", "none (one GPU)"


def _provenance_rows(p: Prediction) -> list[tuple[str, str]]:
    """Where compute, network and overlap came from, and the warnings about them."""
    prov = p.provenance
    if prov is None:
        return []
    rows = [(what, f"{origin.source}: {origin.detail}")
            for what, origin in (("compute", prov.compute), ("network", prov.network), ("overlap", prov.overlap),
                                 ("device", prov.device))]
    rows += [("warning", w) for w in prov.warnings]
    sens = prov.transport_sensitivity
    if sens is not None:
        steps = "; ".join(f"{q.nic_efficiency:.2f}{' (used)' if q.used else ''} -> {format_seconds(q.step_time_s)}"
                          for q in sens.points)
        rows.append(("transport", f"assumed ({sens.transport}: {sens.assumption}); NIC efficiency -> step: {steps}"))
    return [(escape(a), escape(b)) for a, b in rows]


def _fsdp_and_checkpointing_text(cfg) -> str:
    # The FSDP options and the checkpointing policy, named only when not the defaults.
    version, accumulate = cfg.parallelism.fsdp_version, cfg.parallelism.fsdp_accumulate
    policy = cfg.execution.checkpointing
    return ((f", FSDP{version}" if version != "1" else "")
            + (f", {accumulate} gradient accumulation" if accumulate != "auto" else "")
            + (f", {policy.describe()}" if policy.active else ""))


def prediction_tables(p: Prediction) -> list[Table]:
    """The step, throughput and memory of a prediction as rich tables."""
    cfg = p.config
    device = "CPU ranks" if p.gpu == "cpu" else p.gpu
    title = (f"{p.model} ({wording.param_count(p.param_count)}) on {p.n_gpus} x {device} "
             f"[{p.topology}, {p.n_nodes} node{'s' if p.n_nodes > 1 else ''}], "
             f"micro-batch {cfg.workload.micro_batch}, {cfg.execution.precision}"
             + (f" + fp8 {cfg.execution.fp8}" if cfg.execution.fp8 else "")
             + (f", {p.strategy}" if p.strategy != "ddp" else "")
             + (f", {cfg.workload.grad_accum} micro-batches per step" if cfg.workload.grad_accum > 1 else "")
             + _fsdp_and_checkpointing_text(cfg))
    step = Table(title=escape(title), show_header=True, header_style="bold")
    step.add_column("step", justify="left")
    step.add_column("value", justify="right")
    rows = [
        ("step time", format_seconds(p.step_time_s) + _model_error_suffix(p)),
        ("  forward", format_seconds(p.forward_s)),
        ("  backward", format_seconds(p.backward_s)),
        ("  optimizer", format_seconds(p.optimizer_s)),
        ("compute (1 GPU step)", format_seconds(p.compute_s)),
        ("all-reduce total" if p.strategy == "ddp" else "communication total", format_seconds(p.comm_s)),
        ("all-reduce exposed" if p.strategy == "ddp" else "communication exposed", format_seconds(p.exposed_comm_s)),
        ("overlap", _pct(p.overlap_fraction)),
        ("buckets" if p.strategy == "ddp" else "gradient reductions",
         f"{p.n_buckets} ({format_bytes(p.gradient_bytes)} of gradients)"),
        _collectives_row(p),
        ("throughput", f"{p.samples_per_s:,.1f} samples/s"),
    ]
    if p.tokens_per_s is not None:
        rows.append(("", f"{p.tokens_per_s:,.0f} tokens/s"))
    rows += [
        ("scaling efficiency vs 1 GPU", _pct(p.scaling_efficiency)),
        ("MFU", _pct(p.mfu) if p.mfu is not None else "n/a (CPU: no peak)"),
    ]
    for name, value in rows:
        step.add_row(name, value)

    m = p.memory
    mem = Table(title=f"memory per {'rank' if p.gpu == 'cpu' else 'GPU'} ({p.strategy})", header_style="bold")
    mem.add_column("category")
    mem.add_column("size", justify="right")
    # The FP8 parts under their categories, as `dpsim memory` shows them (with_subpart_rows).
    for name, value in with_subpart_rows([("weights", m.weights_bytes), ("gradients", m.gradients_bytes),
                                          ("optimizer state", m.optimizer_bytes), ("activations", m.activations_bytes),
                                          ("DDP bucket buffers" if p.strategy == "ddp" else "communication buffers",
                                           m.comm_buffers_bytes), ("framework overhead", m.overhead_bytes)], m):
        mem.add_row(name, format_bytes(value))
    verdict = "[green]fits[/green]" if m.fits else "[bold red]DOES NOT FIT[/bold red]"
    if m.fits:
        mem.add_row("total", f"{format_bytes(m.total_bytes)} of {format_bytes(m.capacity_bytes)}: {verdict}")
    else:
        # The verdict is against the usable memory (capacity less the allocator's headroom): "78.0 GiB of
        # 79.6 GiB: DOES NOT FIT" read as a contradiction.
        total, usable = format_bytes_against(m.total_bytes, m.usable_bytes)
        mem.add_row("total", f"{total} of {usable} usable ({format_bytes(m.capacity_bytes)} on the GPU): {verdict}")
    if not m.fits and m.suggestion:
        mem.add_row("what would fit", escape(m.suggestion))
    tables = [step, mem]
    provenance = _provenance_rows(p) + _model_error_rows(p)
    if provenance:
        where = Table(title="where the numbers come from", header_style="bold")
        where.add_column("what")
        where.add_column("source: detail")
        for name, value in provenance:
            where.add_row(name, value)
        tables.append(where)
    return tables


def _model_error_suffix(p: Prediction) -> str:
    """`` (low-high, 80 %)``: the model-error interval of the step time, when there is one."""
    e = p.model_error
    if e is None:
        return ""
    return (f" ({format_seconds_as(e.low_s, p.step_time_s)} - {format_seconds_as(e.high_s, p.step_time_s)}, "
            f"{e.coverage:.0%})")


def _model_error_rows(p: Prediction) -> list[tuple[str, str]]:
    """What set the model-error interval: the validation rows of the regime, and any extrapolation."""
    e = p.model_error
    if e is None:
        return []
    pools = " + ".join(e.regime.get("pools", []))
    keys = "; ".join(f"{pool}: " + (", ".join(f"{k} {v}" for k, v in e.regime[pool].items()) or "all rows")
                     for pool in e.regime.get("pools", []))
    rows = [("model error", escape(f"p10-p90 of {len(e.rows)} validation rows ({pools}; {keys}), each "
                                   "predicted without its own system; VALIDATION.md reports the coverage"))]
    rows += [("  widened", escape(w)) for w in e.widened_for]
    return rows


def print_prediction(p: Prediction, console: Console | None = None) -> None:
    """Print a prediction's tables."""
    console = console or Console()
    for table in prediction_tables(p):
        console.print(table)
    if p.layout is not None:
        for table in layout_tables(p):
            console.print(table)




def nccl_tests_table(results: list[CollectiveResult], dtype: str) -> str:
    """Results formatted as nccl-tests prints them (out-of-place columns), for diffing."""
    elem = NCCL_TESTS_TYPE_BYTES[dtype]
    redop = "sum" if results and results[0].op in ("all_reduce", "reduce_scatter") else "none"
    root = "0" if results and results[0].op == "broadcast" else "-1"
    lines = [
        "#",
        "#                                                              out-of-place",
        "#       size         count      type   redop    root     time   algbw   busbw",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)",
    ]
    # The smallest sizes of a reduce_scatter/all_gather sweep round up to one element per rank, so several
    # requested sizes are the same size: `-b 8 -e 256` on 8 GPUs printed three 32 B rows. The table shows each
    # size once and says what it left out; the JSON keeps one result per requested size (its goldens pin them).
    shown = [r for i, r in enumerate(results) if i == 0 or r.size_bytes != results[i - 1].size_bytes]
    for r in shown:
        lines.append(
            f"{int(r.size_bytes):>12d}  {int(r.size_bytes) // elem:>12d}  {dtype:>8s}  {redop:>6s}  {root:>6s}"
            f"  {r.time_s * 1e6:>7.2f}  {r.algbw_bytes_per_s / 1e9:>6.2f}  {r.busbw_bytes_per_s / 1e9:>6.2f}"
        )
    if len(shown) < len(results):
        lines.append(f"# {len(results) - len(shown)} repeated row(s) left out: sizes below one {dtype} element per "
                     f"rank round up to {int(shown[0].size_bytes)} B")
    if shown:
        avg = sum(r.busbw_bytes_per_s for r in shown) / len(shown) / 1e9
        lines.append(f"# Avg bus bandwidth    : {avg:.4f} ")
    return "\n".join(lines)
