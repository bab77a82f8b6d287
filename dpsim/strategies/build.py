"""TODO."""

from __future__ import annotations

import dataclasses

from dpsim.errors import ConfigError
from dpsim.strategies.ddp import _ddp_program
from dpsim.strategies.program import (
    StrategyProgram,
    _check_alignment,
    _checkpoint_units,
)
from dpsim.strategies.registry import check_fsdp_unit, check_grad_accum, check_strategy
from dpsim.strategies.sharded import _unit_program
from dpsim.strategies.shards import shard_group_size
from dpsim.strategies.zero import _zero12_program
from dpsim.workload.compute import ComputeProfile
from dpsim.workload.precision import Precision
from dpsim.workload.spec import ModelSpec


def build_step_program(
    strategy: str,
    model: ModelSpec,
    compute: ComputeProfile,
    *,
    precision: Precision,
    n_gpus: int,
    gpus_per_node: int | None = None,
    grad_accum: int = 1,
    activation_checkpointing: bool = False,
    overlap: bool = True,
    bucket_cap_mb: float | None = None,
    fsdp_unit: str = "block",
) -> StrategyProgram:
    """The step program of ``strategy`` for ``model`` (see the module docstring).

    ``compute`` gives the per-layer times of one micro-batch (from the same ``model``);
    ``n_gpus`` the data-parallel ranks, ``gpus_per_node`` the hybrid shard group.
    """
    check_strategy(strategy)
    check_fsdp_unit(fsdp_unit)
    check_grad_accum(grad_accum)
    if isinstance(n_gpus, bool) or not isinstance(n_gpus, int) or n_gpus < 1:
        raise ConfigError(f"--gpus: {n_gpus!r} is not valid; expected an integer >= 1")
    _check_alignment(model, compute)
    gpn = gpus_per_node or n_gpus
    group_size = shard_group_size(strategy, n_gpus, gpn)
    ckpt = _checkpoint_units(model, fsdp_unit, activation_checkpointing)
    if strategy == "ddp":
        result = _ddp_program(model, compute, precision=precision, grad_accum=grad_accum, ckpt=ckpt,
                              overlap=overlap, bucket_cap_mb=bucket_cap_mb)
    elif strategy in ("zero1", "zero2"):
        result = _zero12_program(strategy, model, compute, precision=precision, world=group_size,
                                 grad_accum=grad_accum, ckpt=ckpt, overlap=overlap)
    else:
        result = _unit_program(strategy, model, compute, precision=precision, world=group_size,
                               grad_accum=grad_accum, ckpt=ckpt, fsdp_unit=fsdp_unit, overlap=overlap)
    sizes = {"world": n_gpus, "intra": min(gpn, n_gpus), "inter": max(1, -(-n_gpus // gpn))}
    return dataclasses.replace(result, communicator_sizes=sizes)
