"""Data-parallel strategies as step programs: DDP, ZeRO-1/2/3 and FSDP (full, shard-grad-op, hybrid).

Each strategy changes both what a GPU holds (:mod:`dpsim.memory`) and the step's collectives.

- :mod:`~dpsim.strategies.registry` — one record per strategy key (builder, shard group, knobs) and the checks
- :mod:`~dpsim.strategies.build` — :func:`build_step_program`: a strategy's program for a model
- :mod:`~dpsim.strategies.ddp`, :mod:`~dpsim.strategies.zero`, :mod:`~dpsim.strategies.sharded` — the builders
- :mod:`~dpsim.strategies.program` — what builders get and return, the forward/backward passes they share
- :mod:`~dpsim.strategies.shards` — shard maths (units, flat parameters, partitions, buckets), shared with memory
- :mod:`~dpsim.strategies.checkpointing` — the activation-checkpointing policy of every layout (``--recompute``)
- :mod:`~dpsim.strategies.tensor` — Megatron tensor parallelism: a rank's shard of the model, its collectives
- :mod:`~dpsim.strategies.layout` — tensor x pipeline x data layouts: stages, per-layer work
- :mod:`~dpsim.strategies.pipeline` — pipeline schedules (GPipe, 1F1B, interleaved) and a layout's step program
Gradient accumulation and activation checkpointing apply to every strategy.
"""

from __future__ import annotations

from dpsim.lazy import lazy_exports

_EXPORTS = {
    "REGISTRY": "dpsim.strategies.registry",
    "StrategyRecord": "dpsim.strategies.registry",
    "STRATEGIES": "dpsim.strategies.registry",
    "SHARDED_STRATEGIES": "dpsim.strategies.registry",
    "FSDP_STRATEGIES": "dpsim.strategies.registry",
    "UNIT_STRATEGIES": "dpsim.strategies.registry",
    "FSDP_UNITS": "dpsim.strategies.registry",
    "get_strategy": "dpsim.strategies.registry",
    "check_strategy": "dpsim.strategies.registry",
    "check_fsdp_unit": "dpsim.strategies.registry",
    "check_grad_accum": "dpsim.strategies.registry",
    "check_honoured": "dpsim.strategies.registry",
    "sharded_numel": "dpsim.strategies.registry",
    "shard_group_size": "dpsim.strategies.registry",
    "build_step_program": "dpsim.strategies.build",
    "ddp_program": "dpsim.strategies.ddp",
    "BuildRequest": "dpsim.strategies.program",
    "StrategyProgram": "dpsim.strategies.program",
    "Unit": "dpsim.strategies.shards",
    "wrap_units": "dpsim.strategies.shards",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
