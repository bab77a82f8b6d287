"""A strategy's step program for a model: checks the inputs once, then calls the registry's builder.

The program is an engine :class:`~dpsim.engine.program.StepProgram` (compute tasks that
wait for and launch comm ops on one FIFO stream), scheduled as the implementation
schedules it. Gradient accumulation (``grad_accum`` micro-batches per step) and
activation checkpointing (the forward of each checkpointed unit recomputed before its
backward) apply to every strategy.
"""

from __future__ import annotations

import dataclasses

from dpsim.errors import ConfigError
from dpsim.hardware import GpuSpec
from dpsim.strategies.checkpointing import CheckpointPolicy, policy_of, recompute_shares
from dpsim.strategies.ddp_costs import DEFAULT_DDP_OPTIONS, DdpOptions
from dpsim.strategies.program import (
    BuildRequest,
    StrategyProgram,
    _check_alignment,
    _checkpoint_units,
)
from dpsim.strategies.registry import (
    check_gemini_accum,
    BUCKET_CAP_MB,
    check_fsdp_unit,
    check_grad_accum,
    check_fsdp_options,
    check_honoured,
    check_zero_options,
    get_strategy,
    unsharded_accumulation,
    zero_shard_group,
)
from dpsim.workload.compute import ComputeProfile
from dpsim.workload.precision import Precision
from dpsim.workload.roofline import Efficiencies
from dpsim.workload.spec import ModelSpec



_REPLICATED = ("fsdp-hybrid", "zero3")
"""Strategies that, given ``--zero-group``, shard within each group and replicate across the groups on the
``intra`` / ``inter`` communicators (HSDP; MiCS, :mod:`dpsim.strategies.sharded`)."""

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
    ddp: DdpOptions | None = None,
    gpu: GpuSpec | None = None,
    efficiencies: Efficiencies | None = None,
    checkpointing: CheckpointPolicy | None = None,
    micro_batch: int = 1,
    compute_gpu: GpuSpec | None = None,
    fsdp_version: str = "1",
    fsdp_accumulate: str = "auto",
    zero_impl: str = "deepspeed",
    zero_group: int | None = None,
) -> StrategyProgram:
    """The step program of ``strategy`` for ``model`` (see the module docstring).

    ``compute`` gives the per-layer times of one micro-batch (from the same ``model``);
    ``n_gpus`` the data-parallel ranks, ``gpus_per_node`` the hybrid shard group unless ``zero_group`` sets it.
    ``bucket_cap_mb`` (MiB) is DDP's ``bucket_cap_mb`` or ZeRO-1/2's ``reduce_bucket_size``;
    a strategy without gradient buckets refuses it rather than ignore it. ``ddp``: DDP's
    arguments (refused by the other strategies unless torch's defaults); ``gpu``: cost the
    strategy's own kernels on it (DDP's copies and comm hooks; ``None``: not costed), with
    ``efficiencies`` (``None``: the roofline's fitted ones). ``checkpointing``: the
    activation-checkpointing policy (``activation_checkpointing`` is ``full``); its ``op``
    level recomputes the share of each layer the roofline gives on ``compute_gpu`` at
    ``micro_batch`` (:func:`~dpsim.strategies.checkpointing.recompute_shares`).
    ``fsdp_version``, ``fsdp_accumulate``: the FSDP strategies' API and gradient accumulation
    (:data:`~dpsim.strategies.registry.FSDP_ACCUMULATE`); FSDP2's staging copies are costed on
    ``compute_gpu`` too. ``zero_impl``, ``zero_group``: whose ZeRO runs (InternLM's ZeRO-1, Colossal-AI's
    Gemini) and InternLM's ZERO1 group size (:data:`~dpsim.strategies.registry.ZERO_IMPLS`; ``None``: every rank), or with ``fsdp-hybrid``
    the ranks of one HSDP shard group (``None``: one node), with ``zero3`` those of one MiCS shard group
    (``None``: every rank).
    """
    record = get_strategy(strategy)
    check_fsdp_unit(fsdp_unit)
    check_grad_accum(grad_accum)
    check_fsdp_options(record.key, fsdp_version, fsdp_accumulate)
    policy = policy_of(activation_checkpointing, checkpointing)
    if isinstance(n_gpus, bool) or not isinstance(n_gpus, int) or n_gpus < 1:
        raise ConfigError(f"--gpus: {n_gpus!r} is not valid; expected an integer >= 1")
    check_honoured(record.key, BUCKET_CAP_MB, bucket_cap_mb)
    _check_alignment(model, compute)
    ddp = DEFAULT_DDP_OPTIONS if ddp is None else ddp
    if record.family != "ddp" and not ddp.is_default:
        raise ConfigError(f"DDP options: {ddp} apply to --strategy ddp only, not {record.key}")
    gpn = gpus_per_node or n_gpus
    check_zero_options(record.key, zero_impl, zero_group, n_gpus=n_gpus, gpus_per_node=gpn)
    check_gemini_accum(zero_impl, grad_accum)
    group = zero_shard_group(record.key, n_gpus, gpn, zero_group)
    request = BuildRequest(
        model=model, compute=compute, precision=precision, shard_group_size=group,
        zero_impl=zero_impl, zero_group="world" if group == n_gpus else "zero",
        hybrid_replicas=n_gpus // group if record.key in _REPLICATED and zero_group is not None else None,
        grad_accum=grad_accum, checkpoint_units=tuple(_checkpoint_units(model, fsdp_unit, policy)),
        recompute_share=recompute_shares(model, policy, gpu=compute_gpu, precision=precision, micro_batch=micro_batch),
        overlap=overlap, bucket_cap_mb=bucket_cap_mb, fsdp_unit=fsdp_unit, ddp=ddp, gpu=gpu,
        efficiencies=efficiencies, fsdp_version=fsdp_version, compute_gpu=compute_gpu,
        unsharded_accumulation=unsharded_accumulation(record.key, grad_accum, fsdp_version, fsdp_accumulate))
    result = record.build(request)
    sizes = {"world": n_gpus, "intra": min(gpn, n_gpus), "inter": max(1, -(-n_gpus // gpn))}
    if record.key in _REPLICATED and zero_group is not None:
        # HSDP's and MiCS's shard group (--zero-group) is the intra communicator, its replica group the inter one.
        sizes["intra"], sizes["inter"] = group, n_gpus // group
    if request.zero_group == "zero":
        sizes["zero"] = group
    return dataclasses.replace(result, communicator_sizes=sizes)
