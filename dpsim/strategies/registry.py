"""The strategies by key: one record each, and the checks of the strategy flags.

Every ``--strategy`` key maps to a :class:`StrategyRecord` in :data:`REGISTRY`: what it
does, the small function that builds its step program (in :mod:`~dpsim.strategies.ddp`,
:mod:`~dpsim.strategies.zero` and :mod:`~dpsim.strategies.sharded`, whose docstrings
cite the implementations they follow), the ranks it shards over and the knobs it acts
on. :func:`~dpsim.strategies.build.build_step_program` and :mod:`dpsim.memory` dispatch
through it; :data:`STRATEGIES`, :data:`SHARDED_STRATEGIES`, :data:`FSDP_STRATEGIES` and
:data:`UNIT_STRATEGIES` are derived from it.
"""

from __future__ import annotations

from collections.abc import Callable

from dpsim.errors import ConfigError
from dpsim.frozen import frozen_dataclass
from dpsim.strategies.ddp import build_ddp
from dpsim.strategies.program import BuildRequest, StrategyProgram, check_grad_accum
from dpsim.strategies.sharded import (
    build_fsdp,
    build_fsdp_hybrid,
    build_fsdp_shard_grad_op,
    build_zero3,
)
from dpsim.strategies.shards import (
    FSDP_UNITS,
    check_fsdp_unit,
    deepspeed_partition_numel,
    units_shard_numel,
)
from dpsim.strategies.zero import build_zero1, build_zero2
from dpsim.wording import canonical_choice
from dpsim.workload.spec import ModelSpec

__all__ = [
    "BUCKET_CAP_MB", "FSDP_UNIT", "KNOB_FLAGS", "StrategyRecord", "REGISTRY", "STRATEGIES", "SHARDED_STRATEGIES",
    "FSDP_STRATEGIES", "UNIT_STRATEGIES", "FSDP_UNITS", "get_strategy", "check_strategy", "check_fsdp_unit",
    "check_grad_accum", "check_honoured", "honours", "shard_group_size", "sharded_numel", "FSDP_VERSIONS",
    "FSDP_ACCUMULATE", "check_fsdp_options", "unsharded_accumulation", "ZERO_IMPLS", "ZERO_IMPL_STRATEGY",
    "check_zero_options", "check_gemini_accum",
    "zero_shard_group", "GROUP_STRATEGIES",
]

BUCKET_CAP_MB = "bucket_cap_mb"
"""Knob: the gradient bucket cap (DDP's ``bucket_cap_mb``, DeepSpeed's ``reduce_bucket_size``)."""
FSDP_UNIT = "fsdp_unit"
"""Knob: the unit parameters are sharded and gathered by. Every strategy also takes it as
the activation-checkpointing granularity, so it is never refused."""
KNOB_FLAGS = {BUCKET_CAP_MB: "--bucket-cap-mb", FSDP_UNIT: "--fsdp-unit"}
"""The command-line flag of each knob."""

_SHARD_GROUPS = ("none", "node", "world")


@frozen_dataclass
class StrategyRecord:
    """One ``--strategy``."""

    key: str
    """The ``--strategy`` value."""
    description: str
    """One line: what it shards and what it communicates."""
    build: Callable[[BuildRequest], StrategyProgram]
    """Builds its step program."""
    family: str
    """Implementation it follows: ``ddp`` (torch DDP), ``deepspeed`` (ZeRO) or ``fsdp``
    (torch FSDP: ``no_sync`` keeps full gradients, the root unit stays gathered)."""
    shard_group: str
    """Ranks the model state is sharded over: ``none`` (full replicas), ``node`` (the GPUs
    of one node) or ``world`` (every data-parallel rank)."""
    honours: frozenset[str]
    """Knobs that change what it communicates: :data:`BUCKET_CAP_MB` (gradient buckets),
    :data:`FSDP_UNIT` (it shards per unit)."""

    def __post_init__(self) -> None:
        assert self.shard_group in _SHARD_GROUPS, f"{self.key}: shard group {self.shard_group!r}"
        assert self.family in ("ddp", "deepspeed", "fsdp"), f"{self.key}: family {self.family!r}"
        assert self.honours <= set(KNOB_FLAGS), f"{self.key}: unknown knobs {set(self.honours) - set(KNOB_FLAGS)}"

    @property
    def shards(self) -> bool:
        """Whether a rank holds only part of the model state."""
        return self.shard_group != "none"

    @property
    def shards_per_unit(self) -> bool:
        """Parameters are sharded and gathered per unit (ZeRO-3, FSDP), not as one flat buffer."""
        return FSDP_UNIT in self.honours

    def group_size(self, n_gpus: int, gpus_per_node: int) -> int:
        """Ranks it shards over on ``n_gpus`` GPUs with ``gpus_per_node`` per node."""
        if self.shard_group == "none":
            return 1
        if self.shard_group == "node":
            return min(gpus_per_node, n_gpus)
        return n_gpus


REGISTRY: dict[str, StrategyRecord] = {r.key: r for r in (
    StrategyRecord(
        key="ddp", family="ddp", shard_group="none", honours=frozenset({BUCKET_CAP_MB}), build=build_ddp,
        description="PyTorch DDP: full replicas, gradient buckets all-reduced during backward"),
    StrategyRecord(
        key="zero1", family="deepspeed", shard_group="world", honours=frozenset({BUCKET_CAP_MB}), build=build_zero1,
        description="DeepSpeed ZeRO-1: optimizer state sharded; gradients reduce-scattered at the "
                    "accumulation boundary, updated parameters all-gathered after the step"),
    StrategyRecord(
        key="zero2", family="deepspeed", shard_group="world", honours=frozenset({BUCKET_CAP_MB}), build=build_zero2,
        description="DeepSpeed ZeRO-2: optimizer state and gradients sharded; gradients reduce-scattered "
                    "every micro-batch, parameters all-gathered after the step"),
    StrategyRecord(
        key="zero3", family="deepspeed", shard_group="world", honours=frozenset({FSDP_UNIT}), build=build_zero3,
        description="ZeRO-3: parameters, gradients and optimizer state sharded; every unit all-gathered "
                    "for forward, and in backward what DeepSpeed's reuse distance freed (a recomputed block's "
                    "freed submodules again); gradients reduce-scattered; with --zero-group MiCS (shard groups, "
                    "gradient shards all-reduced across them at the last micro-batch)"),
    StrategyRecord(
        key="fsdp", family="fsdp", shard_group="world", honours=frozenset({FSDP_UNIT}), build=build_fsdp,
        description="PyTorch FSDP FULL_SHARD: like ZeRO-3, per unit, root unit kept from forward to backward"),
    StrategyRecord(
        key="fsdp-shard-grad-op", family="fsdp", shard_group="world", honours=frozenset({FSDP_UNIT}),
        build=build_fsdp_shard_grad_op,
        description="PyTorch FSDP SHARD_GRAD_OP: parameters gathered once for forward and "
                    "backward, gradients and optimizer state sharded (ZeRO-2-like)"),
    StrategyRecord(
        key="fsdp-hybrid", family="fsdp", shard_group="node", honours=frozenset({FSDP_UNIT}), build=build_fsdp_hybrid,
        description="PyTorch FSDP HYBRID_SHARD: FULL_SHARD within a node (or --zero-group ranks), gradient "
                    "shards all-reduced across nodes (groups)"),
)}
"""Every strategy by ``--strategy`` key, DDP first."""

STRATEGIES: dict[str, str] = {key: r.description for key, r in REGISTRY.items()}
"""Strategy keys (``--strategy``) and what they do."""
SHARDED_STRATEGIES = tuple(key for key, r in REGISTRY.items() if r.shards)
"""Strategies whose ranks hold part of the model state."""
FSDP_STRATEGIES = tuple(key for key, r in REGISTRY.items() if r.family == "fsdp")
"""Strategies that follow torch FSDP."""
UNIT_STRATEGIES = tuple(key for key, r in REGISTRY.items() if r.shards_per_unit)
"""Strategies that gather parameters per unit."""


def get_strategy(name: str) -> StrategyRecord:
    """The record of a ``--strategy`` key (a :class:`ConfigError` naming the keys if unknown)."""
    record = REGISTRY.get(canonical_choice(name, REGISTRY)) if isinstance(name, str) else None
    if record is None:
        raise ConfigError(f"--strategy: {name!r} is not known; choose one of {', '.join(REGISTRY)}")
    return record


def check_strategy(name: str) -> str:
    """Validate a ``--strategy`` key."""
    return get_strategy(name).key


def honours(strategy: str, knob: str) -> bool:
    """Whether ``strategy`` acts on ``knob`` (:data:`BUCKET_CAP_MB`, :data:`FSDP_UNIT`)."""
    assert knob in KNOB_FLAGS, f"unknown knob {knob!r}"
    return knob in get_strategy(strategy).honours


def check_honoured(strategy: str, knob: str, value: object) -> None:
    """Refuse a ``knob`` given (not ``None``) to a strategy that would silently ignore it."""
    if value is None or honours(strategy, knob):
        return
    takers = ", ".join(key for key, r in REGISTRY.items() if knob in r.honours)
    raise ConfigError(f"{KNOB_FLAGS[knob]}: {value!r} does not apply to --strategy {strategy}; "
                      f"allowed with {takers} only, otherwise leave it unset")


FSDP_VERSIONS: dict[str, str] = {
    "1": "FullyShardedDataParallel: one flat parameter per unit, padded to a multiple of the ranks",
    "2": "fully_shard: every parameter sharded on dim 0 (DTensor), all-gathered and reduce-scattered through "
         "copy-in/copy-out buffers",
}
"""``--fsdp-version`` choices (the FSDP strategies)."""

FSDP_ACCUMULATE: dict[str, str] = {
    "auto": "what the version does by default: unsharded with FSDP1 (a trainer's no_sync()), sharded with FSDP2",
    "unsharded": "no reduce-scatter until the last micro-batch; full gradients kept between micro-batches "
                 "(FSDP1 no_sync(), FSDP2 set_requires_gradient_sync(False))",
    "sharded": "reduce-scatter after every micro-batch; only the gradient shard kept (FSDP2's default, FSDP1 "
               "without no_sync)",
}
"""``--fsdp-accumulate`` choices: how FSDP accumulates gradients over micro-batches."""


def check_fsdp_options(strategy: str, fsdp_version: str = "1", accumulate: str = "auto") -> None:
    """Validate ``--fsdp-version`` and ``--fsdp-accumulate`` and refuse them where they would be ignored."""
    if fsdp_version not in FSDP_VERSIONS:
        raise ConfigError(f"--fsdp-version: {fsdp_version!r} is not known; choose one of {', '.join(FSDP_VERSIONS)}")
    if accumulate not in FSDP_ACCUMULATE:
        raise ConfigError(f"--fsdp-accumulate: {accumulate!r} is not known; choose one of "
                          f"{', '.join(FSDP_ACCUMULATE)}")
    if get_strategy(strategy).family == "fsdp":
        return
    takers = ", ".join(FSDP_STRATEGIES)
    if fsdp_version != "1":
        raise ConfigError(f"--fsdp-version: {fsdp_version} applies to {takers}, not --strategy {strategy}; "
                          f"leave it out")
    if accumulate != "auto":
        raise ConfigError(f"--fsdp-accumulate: {accumulate} applies to {takers}, not --strategy {strategy}, "
                          f"whose implementation fixes when it reduces (DDP and ZeRO-1 at the last micro-batch, "
                          f"ZeRO-2/3 every one); leave it out")


ZERO_IMPLS: dict[str, str] = {
    "deepspeed": "DeepSpeed stage 1: gradients reduce-scattered in reduce_bucket_size buckets, the updated flat "
                 "buffer all-gathered after the step",
    "internlm": "InternLM's HybridZeroOptimizer: gradients all-reduced over every data-parallel rank in "
                "reduce_bucket_size buckets, whole parameters owned greedily within the --zero-group, each "
                "owner's updated parameters broadcast to its group after the step",
    "megatron": "Megatron-Core's distributed optimizer (use_distributed_optimizer) without a layout: gradients "
                "reduce-scattered in buckets during backward (overlap_grad_reduce), the updated parameters "
                "all-gathered layer by layer ahead of each layer's next forward (overlap_param_gather)",
    "gemini": "Colossal-AI Gemini (--strategy zero3): parameters in equal chunks, each all-gathered when an "
              "operation first needs it and freed when an operation on another chunk runs, reduce-scattered when "
              "all its gradients are in, every collective blocking the compute stream",
}
"""``--zero-impl`` choices: whose ZeRO-1 runs ``--strategy zero1`` (:mod:`dpsim.strategies.zero`), whose ZeRO-3
runs ``--strategy zero3`` (``gemini``: :mod:`dpsim.strategies.gemini`)."""

ZERO_IMPL_STRATEGY = {"internlm": "zero1", "megatron": "zero1", "gemini": "zero3"}
"""The one strategy each non-default ``--zero-impl`` applies to."""


GROUP_STRATEGIES = ("zero1", "fsdp-hybrid", "zero3")
"""Strategies whose shard group ``--zero-group`` sets: ``zero1`` with ``--zero-impl internlm`` (InternLM's ZERO1
group, ``parallel.zero1``), ``zero3`` (MiCS's shard group, DeepSpeed's ``mics_shard_size`` and the SageMaker
model parallel library's ``sharded_data_parallel_degree``: :mod:`dpsim.strategies.sharded`) and ``fsdp-hybrid``
(HSDP's shard group: torch FSDP2 ``fully_shard`` on a 2-D
``DeviceMesh`` ``("dp_replicate", "dp_shard")``, torchtitan's ``data_parallel_shard_degree``, FSDP1
``HYBRID_SHARD`` given its own ``(shard, replicate)`` process-group pair; default: one node). All shard the
state within groups of that many consecutive data-parallel ranks and replicate it across the groups
(torchtitan's mesh orders its dimensions ``pp, dp_replicate, dp_shard_cp, tp``, so a shard group is
consecutive ranks: ``ParallelDims.build_mesh``, torchtitan/distributed/parallel_dims.py@0119de156de5; MiCS's
shard groups are ``np.arange(world_size).reshape(-1, shard_size)``, ``_generate_mics_config`` in
deepspeed/runtime/zero/mics_utils.py at microsoft/DeepSpeed@ce78a632ac82)."""


def check_zero_options(strategy: str, impl: str = "deepspeed", group: int | None = None, *,
                       n_gpus: int | None = None, gpus_per_node: int | None = None, tp: int = 1) -> None:
    """Validate ``--zero-impl`` and ``--zero-group`` and refuse them where they would be ignored;
    with ``n_gpus`` (the data-parallel ranks) and ``gpus_per_node``, also the group's placement:
    consecutive data-parallel ranks (InternLM's ZERO1 groups, ``process_group_initializer.py``; HSDP's
    shard groups, the mesh's last, fastest-varying dimension ``dp_shard``), with
    ``tp`` above 1 ``gpus_per_node / tp`` of them per server, tiling the servers."""
    if impl not in ZERO_IMPLS:
        raise ConfigError(f"--zero-impl: {impl!r} is not known; choose one of {', '.join(ZERO_IMPLS)}")
    if impl != "deepspeed" and strategy != ZERO_IMPL_STRATEGY[impl]:
        raise ConfigError(f"--zero-impl: {impl} applies to --strategy {ZERO_IMPL_STRATEGY[impl]}, not {strategy}; "
                          f"leave it out")
    if group is None:
        return
    if impl == "gemini":
        raise ConfigError(f"--zero-group: {group} does not apply to --zero-impl gemini, whose chunks are sharded over "
                          f"every data-parallel rank (GeminiDDP's process group); leave it out")
    if strategy not in GROUP_STRATEGIES:
        raise ConfigError(f"--zero-group: {group} applies to --strategy fsdp-hybrid (ranks per shard group), zero3 "
                          f"(MiCS's shard group) or zero1 with --zero-impl internlm (InternLM's ZeRO-1 group), not "
                          f"--strategy {strategy}; leave it out")
    if strategy == "zero1" and impl != "internlm":
        raise ConfigError(f"--zero-group: {group} needs --zero-impl internlm (DeepSpeed's ZeRO-1 shards over "
                          f"every data-parallel rank); add --zero-impl internlm or leave --zero-group out")
    if isinstance(group, bool) or not isinstance(group, int) or group < 1:
        raise ConfigError(f"--zero-group: {group!r} is not valid; expected an integer >= 1")
    if n_gpus is not None and n_gpus % group:
        raise ConfigError(f"--zero-group: {group} does not divide the {n_gpus} data-parallel ranks; choose a "
                          f"divisor of {n_gpus}")
    gpn = None if gpus_per_node is None else max(1, gpus_per_node // tp)
    if n_gpus is not None and gpn is not None and group < n_gpus and (
            (group < gpn and gpn % group) or (group > gpn and group % gpn)):
        what = "GPUs per node" if tp == 1 else f"data-parallel ranks per node (--tp {tp})"
        raise ConfigError(f"--zero-group: {group} neither divides nor is a multiple of the {gpn} {what}; "
                          f"choose a group that tiles the servers")


def zero_shard_group(strategy: str, n_gpus: int, gpus_per_node: int, zero_group: int | None = None) -> int:
    """Ranks ``strategy`` shards over, with ``--zero-group`` when given (:data:`GROUP_STRATEGIES`)."""
    if zero_group is not None and strategy in GROUP_STRATEGIES:
        return min(zero_group, n_gpus)
    return shard_group_size(strategy, n_gpus, gpus_per_node)


def unsharded_accumulation(strategy: str, grad_accum: int, fsdp_version: str = "1", accumulate: str = "auto") -> bool:
    """Whether full (unsharded) gradients are kept between micro-batches and reduced only at
    the last one: FSDP under ``no_sync`` (``--fsdp-accumulate``; ``auto`` is FSDP1's). DeepSpeed
    ZeRO-3 reduce-scatters every micro-batch."""
    check_fsdp_options(strategy, fsdp_version, accumulate)
    if grad_accum <= 1 or get_strategy(strategy).family != "fsdp":
        return False
    return fsdp_version == "1" if accumulate == "auto" else accumulate == "unsharded"


def shard_group_size(strategy: str, n_gpus: int, gpus_per_node: int) -> int:
    """Ranks a strategy shards over: 1 for DDP, the node for hybrid, all GPUs otherwise
    (:func:`zero_shard_group` with ``--zero-group``)."""
    return get_strategy(strategy).group_size(n_gpus, gpus_per_node)


def sharded_numel(model: ModelSpec, strategy: str, world_size: int, *, fsdp_unit: str = "block",
                  fsdp_version: str = "1") -> int:
    """Elements of parameters (and of gradient / optimizer partitions) one rank owns.

    DDP: every parameter. ZeRO-1/2: DeepSpeed's partition of the flat buffer. ZeRO-3 and
    FSDP: the sum over units of each unit's shard (per parameter with ``fsdp_version`` 2).
    """
    record = get_strategy(strategy)
    if not record.shards:
        return model.param_count
    if record.shards_per_unit:
        return units_shard_numel(model, world_size, fsdp_unit, fsdp_version if record.family == "fsdp" else "1")
    return deepspeed_partition_numel(model.param_count, world_size)


def check_gemini_accum(impl: str, grad_accum: int) -> None:
    """Refuse gradient accumulation with ``--zero-impl gemini``: GeminiDDP copies each gradient into its
    parameter's chunk and reduce-scatters the chunk once all its gradients are in, every backward
    (``grad_handle``, hpcaitech/ColossalAI@0b00def88 ``colossalai/zero/gemini/gemini_ddp.py``), and the
    GeminiPlugin there has no ``no_sync`` (``support_no_sync`` False): nothing carries gradients from one
    micro-batch to the next."""
    if impl == "gemini" and grad_accum > 1:
        raise ConfigError(f"--grad-accum: {grad_accum} is not supported with --zero-impl gemini (Gemini reduces "
                          f"each chunk's gradients into the chunk every backward); use --grad-accum 1")

