"""Data-parallel strategies as step programs: DDP, ZeRO-1/2/3 and FSDP (full, shard-grad-op, hybrid).

Each strategy changes both what a GPU holds (:mod:`dpsim.memory`) and the step's collectives.

- :mod:`~dpsim.strategies.registry` — the strategy keys and their checks
- :mod:`~dpsim.strategies.build` — :func:`build_step_program`: a strategy's program for a model
- :mod:`~dpsim.strategies.ddp`, :mod:`~dpsim.strategies.zero`, :mod:`~dpsim.strategies.sharded` — the programs
- :mod:`~dpsim.strategies.program` — the builder and the forward/backward passes they share
- :mod:`~dpsim.strategies.shards` — shard maths (units, flat parameters, partitions) shared with memory
Gradient accumulation and activation checkpointing apply to every strategy.
"""

from __future__ import annotations

from dpsim.lazy import lazy_exports

_EXPORTS = {
    "STRATEGIES": "dpsim.strategies.registry",
    "FSDP_UNITS": "dpsim.strategies.registry",
    "check_strategy": "dpsim.strategies.registry",
    "check_fsdp_unit": "dpsim.strategies.registry",
    "check_grad_accum": "dpsim.strategies.registry",
    "build_step_program": "dpsim.strategies.build",
    "StrategyProgram": "dpsim.strategies.program",
    "Unit": "dpsim.strategies.shards",
    "wrap_units": "dpsim.strategies.shards",
    "sharded_numel": "dpsim.strategies.shards",
    "shard_group_size": "dpsim.strategies.shards",
}

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
