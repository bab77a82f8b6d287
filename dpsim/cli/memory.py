"""``dpsim memory``: memory per GPU by category, the fits verdict and what would make it fit.
"""

from __future__ import annotations

from typing import Optional

import typer

from dpsim.cli.app import _emit_json
from dpsim.errors import ConfigError


def memory(
    gpus: int = typer.Option(64, "--gpus", help="Data-parallel GPUs."),
    link: str = typer.Option("ethernet", "--link", help="Topology preset (sets the GPU and GPUs per node)."),
    topology: Optional[str] = typer.Option(None, "--topology", help="A topology YAML file (instead of --link)."),
    gpus_per_node: Optional[int] = typer.Option(None, "--gpus-per-node", help="Override GPUs per node."),
    gpu: Optional[str] = typer.Option(None, "--gpu", help="Override the GPU: v100, a100, h100, h200, b200."),
    model: str = typer.Option(
        "gpt2-xl", "--model", help="Catalog model, or a torch builder path/file.py:fn or package.module:fn."),
    input_shape: Optional[str] = typer.Option(
        None, "--input-shape", help="Example input of a torch --model, batch first: 8,3,224,224 or 4,1024:int64."),
    seq_len: Optional[int] = typer.Option(None, "--seq-len", help="Override the sequence length."),
    micro_batch: int = typer.Option(4, "--micro-batch", help="Samples per GPU per micro-batch."),
    flash_attention: bool = typer.Option(
        True, "--flash-attention/--no-flash-attention", help="Attention keeps no score matrices."),
    precision: str = typer.Option("bf16-mixed", "--precision", help="fp32, amp, bf16-mixed, fp16-mixed or bf16."),
    optimizer: str = typer.Option("adamw", "--optimizer", help="adamw, adam, sgd-momentum or sgd."),
    strategy: str = typer.Option(
        "ddp", "--strategy", help="ddp, zero1, zero2, zero3, fsdp, fsdp-shard-grad-op or fsdp-hybrid."),
    grad_accum: int = typer.Option(1, "--grad-accum", help="Micro-batches per optimizer step."),
    activation_checkpointing: bool = typer.Option(
        False, "--activation-checkpointing/--no-activation-checkpointing", help="Keep only block inputs."),
    fsdp_unit: str = typer.Option("block", "--fsdp-unit", help="block, layer or model."),
    no_overlap: bool = typer.Option(False, "--no-overlap", help="DeepSpeed overlap_comm off (one gradient buffer)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of a table."),
) -> None:
    """Memory per GPU by category for a strategy, the fits / OOM verdict and what would make it fit."""
    from dpsim.memory import HEADROOM_FRACTION
    from dpsim.predict.config import PredictConfig
    from dpsim.predict.run import memory_for_config
    from dpsim.strategies.registry import (
        STRATEGIES,
        check_fsdp_unit,
        check_grad_accum,
        check_strategy,
    )

    check_strategy(strategy)
    check_grad_accum(grad_accum)
    check_fsdp_unit(fsdp_unit)
    if micro_batch < 1:
        raise ConfigError(f"--micro-batch: {micro_batch} is not valid; expected an integer >= 1")
    if seq_len is not None and seq_len < 1:
        raise ConfigError(f"--seq-len: {seq_len} is not valid; expected an integer >= 1")
    config = PredictConfig(gpus=gpus, link=link, topology_file=topology, gpus_per_node=gpus_per_node, gpu=gpu,
                           model=model, input_shape=input_shape, seq_len=seq_len, micro_batch=micro_batch,
                           flash_attention=flash_attention, precision=precision, optimizer=optimizer,
                           strategy=strategy, grad_accum=grad_accum,
                           activation_checkpointing=activation_checkpointing, fsdp_unit=fsdp_unit,
                           overlap=not no_overlap)
    mem, advice, spec, topo = memory_for_config(config)
    rows = [("weights", mem.weights_bytes), ("gradients", mem.gradients_bytes),
            ("optimizer state", mem.optimizer_bytes), ("activations", mem.activations_bytes),
            ("communication buffers", mem.comm_buffers_bytes), ("framework overhead", mem.overhead_bytes)]
    if as_json:
        _emit_json({
            "schema": "dpsim.memory/1", "model": spec.name, "param_count": spec.param_count,
            "gpu": topo.spec.gpu, "n_gpus": topo.n_gpus, "gpus_per_node": topo.gpus_per_node,
            "strategy": strategy, "precision": precision, "optimizer": optimizer, "micro_batch": micro_batch,
            "grad_accum": grad_accum, "activation_checkpointing": activation_checkpointing,
            "shard_group_size": mem.shard_group_size,
            "weights_bytes": mem.weights_bytes, "gradients_bytes": mem.gradients_bytes,
            "optimizer_bytes": mem.optimizer_bytes, "activations_bytes": mem.activations_bytes,
            "comm_buffers_bytes": mem.comm_buffers_bytes, "overhead_bytes": mem.overhead_bytes,
            "total_bytes": mem.total_bytes, "capacity_bytes": mem.capacity_bytes,
            "usable_bytes": mem.usable_bytes, "fits": mem.fits, "suggestion": mem.suggestion,
            "advice": advice.to_dict(),
        })
        return
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from dpsim.units import format_bytes
    title = (f"{spec.name} ({spec.param_count / 1e9:.3g} B params), {strategy} on {topo.n_gpus} x {topo.spec.gpu}, "
             f"{precision} + {optimizer}, micro-batch {micro_batch}"
             + (f" x {grad_accum}" if grad_accum > 1 else "")
             + (", checkpointing" if activation_checkpointing else ""))
    table = Table(title=escape(title), header_style="bold")
    table.add_column("memory per GPU")
    table.add_column("size", justify="right")
    for name, value in rows:
        table.add_row(name, format_bytes(value))
    verdict = "[green]fits[/green]" if mem.fits else "[bold red]DOES NOT FIT (OOM)[/bold red]"
    table.add_row("total", f"{format_bytes(mem.total_bytes)}: {verdict}")
    table.add_row("usable", f"{format_bytes(mem.usable_bytes)} ({format_bytes(mem.capacity_bytes)} less "
                            f"{HEADROOM_FRACTION:.0%} allocator headroom)")
    console = Console()
    console.print(table)
    console.print(f"{escape(strategy)}: {escape(STRATEGIES[strategy])}")
    if not mem.fits:
        console.print(f"what would fit: {escape(mem.suggestion or advice.message)}")
