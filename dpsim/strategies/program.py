"""Building blocks of the strategies' step programs: what a builder gets and returns, the
program builder, forward and backward passes, bucket launch points.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence

from dpsim.collectives.ops import bus_factor
from dpsim.engine.program import CommOp, ComputeTask, StepProgram
from dpsim.errors import ConfigError
from dpsim.frozen import frozen_dataclass
from dpsim.hardware import GpuSpec
from dpsim.strategies.checkpointing import FULL_CHECKPOINTING, CheckpointPolicy, checkpointed
from dpsim.strategies.ddp_costs import DEFAULT_DDP_OPTIONS, DdpOptions
from dpsim.strategies.shards import Unit, wrap_units
from dpsim.workload.compute import ComputeProfile
from dpsim.workload.precision import Precision
from dpsim.workload.roofline import Efficiencies
from dpsim.workload.spec import ModelSpec

# -------------------------------------------------------------------- programs


@frozen_dataclass
class BuildRequest:
    """What every strategy builder gets (already validated by
    :func:`~dpsim.strategies.build.build_step_program`)."""

    model: ModelSpec
    """The model (parameters, layers, units)."""
    compute: ComputeProfile
    """Per-layer times of one micro-batch, layer for layer the model's."""
    precision: Precision
    """Element sizes of weights and gradients."""
    shard_group_size: int
    """Ranks the strategy shards over (the registry's shard group; 1 for DDP)."""
    grad_accum: int
    """Micro-batches per optimizer step."""
    checkpoint_units: tuple[Unit, ...]
    """Units recomputed before their backward (empty without activation checkpointing)."""
    recompute_share: tuple[float, ...] | None = None
    """Per model layer, the share of its forward a checkpointed unit re-runs (``selective``,
    ``op``: :func:`~dpsim.strategies.checkpointing.recompute_shares`); ``None``: all of it."""
    overlap: bool
    """Communication overlaps backward (DDP's hooks, DeepSpeed's ``overlap_comm``)."""
    bucket_cap_mb: float | None
    """Gradient bucket cap in MiB (``None``: the implementation's default); only
    strategies that honour it get a value."""
    fsdp_unit: str
    """Unit granularity (``--fsdp-unit``)."""
    ddp: DdpOptions = DEFAULT_DDP_OPTIONS
    """``DistributedDataParallel``'s arguments (``ddp`` only)."""
    gpu: GpuSpec | None = None
    """The GPU a strategy's own kernels are costed on (DDP's copies and comm hooks); ``None``:
    not costed."""
    efficiencies: Efficiencies | None = None
    """The roofline's efficiencies for those kernels (``None``: the fitted defaults); a
    calibration profile's measured copy bandwidth is already achieved: memory efficiency 1."""
    fsdp_version: str = "1"
    """The FSDP strategies' API (:data:`~dpsim.strategies.registry.FSDP_VERSIONS`)."""
    unsharded_accumulation: bool = False
    """Gradients accumulate unsharded and are reduced at the last micro-batch only (FSDP's
    ``no_sync``); otherwise every micro-batch reduce-scatters."""
    compute_gpu: GpuSpec | None = None
    """The GPU the strategy's memory-bound staging copies are costed on (FSDP2's copy-in and
    copy-out); ``None``: not costed."""
    zero_impl: str = "deepspeed"
    """Whose ZeRO runs (:data:`~dpsim.strategies.registry.ZERO_IMPLS`): ``internlm`` with ``zero1``, ``gemini``
    with ``zero3``, ``deepspeed`` otherwise."""
    zero_group: str = "world"
    """The communicator of InternLM's ZERO1 group (``world``, or ``zero`` for a ``--zero-group``
    smaller than the data-parallel ranks); its size is :attr:`shard_group_size`."""
    hybrid_replicas: int | None = None
    """``fsdp-hybrid`` with ``--zero-group``: the ranks of its replica group (``inter``), the data-parallel
    ranks over the shard group's; ``None``: the node-sized default (one rank per node)."""


@frozen_dataclass
class StrategyProgram:
    """A strategy's step program and what it communicates."""

    strategy: str
    """Strategy key."""
    program: StepProgram
    """What every rank runs in one step."""
    shard_group_size: int
    """Ranks the state is sharded over (1 for DDP)."""
    gradient_ops: tuple[int, ...]
    """Comm ops that reduce gradients (all-reduce buckets, reduce-scatters, inter-node
    all-reduces), all micro-batches."""
    units: tuple[Unit, ...] = ()
    """Units (ZeRO-3 / FSDP and checkpointing), in forward order."""
    communicator_sizes: Mapping[str, int] = dataclasses.field(default_factory=dict)
    """Ranks of each communicator the ops use (``world``, ``intra``, ``inter``)."""
    framework_parts_s: Mapping[str, float] = dataclasses.field(default_factory=dict)
    """Compute time in the program that the strategy itself adds and a one-GPU step without it
    would not run, by part (DDP: ``bucket_copies``, ``comm_hook``, ``host``: its forward
    wrapper, buffer broadcast copies and unused-parameter search)."""
    bucket_count: int | None = None
    """Gradient buckets (``None``: one per gradient op)."""
    reduced_bytes: float | None = None
    """Gradient bytes reduced per step before any compression (``None``: :attr:`gradient_bytes`)."""

    @property
    def framework_s(self) -> float:
        """:attr:`framework_parts_s` summed."""
        return sum(self.framework_parts_s.values())

    @property
    def n_buckets(self) -> int:
        """Gradient buckets of a step."""
        return len(self.gradient_ops) if self.bucket_count is None else self.bucket_count

    @property
    def bytes_by_op(self) -> dict[str, float]:
        """Message bytes per collective type in one step (nccl-tests' sizes)."""
        out: dict[str, float] = {}
        for c in self.program.comms:
            out[c.op] = out.get(c.op, 0.0) + c.size_bytes
        return out

    @property
    def gradient_bytes(self) -> float:
        """Bytes of the gradient reductions in one step."""
        return sum(self.program.comms[i].size_bytes for i in self.gradient_ops)

    def bus_bytes(self) -> float:
        """Bytes each rank sends in one step on the rings (nccl-tests' bus volume):
        all-reduce ``2(N-1)/N·S``, reduce-scatter and all-gather ``(N-1)/N·S``, N the
        ranks of the op's communicator."""
        total = 0.0
        for c in self.program.comms:
            n = self.communicator_sizes.get(c.group, 1)
            if n > 1:
                total += bus_factor(c.op, n) * c.size_bytes
        return total


class _Builder:
    """Collects tasks and comm ops; ``launch`` means "before the next task"."""

    def __init__(self) -> None:
        self.tasks: list[dict] = []
        self.comms: list[CommOp] = []
        self.at_start: list[int] = []
        self.pending_wait: list[int] = []

    def op(self, name: str, op: str, size_bytes: float, kind: str, group: str = "world") -> int:
        self.comms.append(CommOp(name=name, op=op, size_bytes=float(size_bytes), kind=kind, group=group))
        return len(self.comms) - 1

    def launch(self, *ops: int) -> None:
        (self.tasks[-1]["launch_after"] if self.tasks else self.at_start).extend(ops)

    def task(self, kind: str, name: str, duration_s: float, wait: Sequence[int] = ()) -> None:
        waits = list(self.pending_wait) + list(wait)
        self.pending_wait = []
        self.tasks.append({"kind": kind, "name": name, "duration_s": duration_s, "wait_for": waits, "launch_after": []})

    def wait_next(self, *ops: int) -> None:
        """Make the next task wait for ``ops`` (communication run on the compute stream)."""
        self.pending_wait.extend(ops)

    def build(self) -> StepProgram:
        return StepProgram(
            tasks=tuple(ComputeTask(kind=t["kind"], name=t["name"], duration_s=t["duration_s"],
                                    wait_for=tuple(dict.fromkeys(t["wait_for"])),
                                    launch_after=tuple(t["launch_after"])) for t in self.tasks),
            comms=tuple(self.comms),
            launch_at_start=tuple(self.at_start),
        )


def check_grad_accum(value: int) -> int:
    """Validate ``--grad-accum``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"--grad-accum: {value!r} is not valid; expected an integer >= 1 (micro-batches per step)")
    return value


def _check_alignment(model: ModelSpec, compute: ComputeProfile) -> None:
    if [l.name for l in compute.layers] != [l.name for l in model.layers]:
        raise ConfigError("compute profile and model disagree on the layers; build both from the same model")


def _checkpoint_units(model: ModelSpec, granularity: str, policy: CheckpointPolicy) -> list[Unit]:
    if not policy.active:
        return []
    units = [u for u in wrap_units(model, granularity) if not u.is_root]
    if not units:
        flag = "--activation-checkpointing" if policy == FULL_CHECKPOINTING else f"--recompute {policy.mode}"
        raise ConfigError(
            f"{flag}: model {model.name!r} has no {granularity} units to checkpoint; "
            f"use --fsdp-unit layer")
    return checkpointed(units, policy)


def _mb(name: str, j: int, k: int) -> str:
    return name if k == 1 else f"{name} (micro-batch {j + 1})"


def _forward(b: _Builder, compute: ComputeProfile, j: int, k: int, wait_at: Mapping[int, Sequence[int]] = {},
             launch_before: Mapping[int, Sequence[int]] = {}, extra_s: Mapping[int, float] = {}) -> None:
    """Forward layers in order; per layer index: ops it waits for, ops launched before it, and
    time added to it (``extra_s``: work the implementation runs on the compute stream first)."""
    for i, layer in enumerate(compute.layers):
        if launch_before.get(i):
            b.launch(*launch_before[i])
        duration_s = layer.forward_s + extra_s[i] if i in extra_s else layer.forward_s
        b.task("forward", _mb(layer.name, j, k), duration_s, wait=wait_at.get(i, ()))


@frozen_dataclass
class _Recompute:
    name: str
    layers: tuple[int, ...]
    share: tuple[float, ...] | None  # per model layer; None: the whole forward


def _recompute_starts(ckpt_units: Sequence[Unit], share: Sequence[float] | None = None) -> dict[int, _Recompute]:
    """Layer index (the unit's last layer) before whose backward the unit is recomputed, with
    the share of each layer's forward that re-runs (``None``: all of it)."""
    share = None if share is None else tuple(share)
    return {max(u.layers): _Recompute(name=u.name, layers=u.layers, share=share) for u in ckpt_units}


def _backward_pass(b: _Builder, compute: ComputeProfile, j: int, k: int, *, recompute: Mapping[int, _Recompute],
                   before: Mapping[int, Sequence[int]] = {}, wait_at: Mapping[int, Sequence[int]] = {},
                   after: Mapping[int, Sequence[int]] = {}, block_after: Mapping[int, Sequence[int]] = {},
                   extra_s: Mapping[int, float] = {}, then: Mapping[int, Callable[[_Builder], None]] = {}) -> None:
    """Backward layers in reverse; per layer index: ops launched before it (``before``),
    ops it (or its recompute) waits for, ops launched after it, ops the *next* task waits
    for (``block_after``: communication on the compute stream), and time added to its
    backward (``extra_s``: work the implementation does in the layer's gradient hooks), and
    what the implementation runs right after it (``then``: adds tasks and ops, e.g. DDP's comm
    hooks)."""
    blocked: list[int] = []
    for i in range(len(compute.layers) - 1, -1, -1):
        layer = compute.layers[i]
        if before.get(i):
            b.launch(*before[i])
        waits = list(wait_at.get(i, ())) + blocked
        if i in recompute:
            unit = recompute[i]
            redo_s = (sum(compute.layers[x].forward_s for x in unit.layers) if unit.share is None else
                      sum(compute.layers[x].forward_s * unit.share[x] for x in unit.layers))
            b.task("recompute", _mb(f"recompute {unit.name}", j, k), redo_s, wait=waits)
            waits = []
        duration_s = layer.backward_s + extra_s[i] if i in extra_s else layer.backward_s
        b.task("backward", _mb(layer.name, j, k), duration_s, wait=waits)
        if after.get(i):
            b.launch(*after[i])
        if i in then:
            then[i](b)
        blocked = list(block_after.get(i, ()))
    if blocked:
        b.wait_next(*blocked)


def _bucket_launch_points(bucket_params: Sequence[Sequence[str]], owner: Mapping[str, int], n_layers: int,
                          overlap: bool) -> dict[int, list[int]]:
    """Layer index -> buckets launched after its backward (buckets launch in order, each
    once its last gradient is ready; without overlap, all after the last backward)."""
    last_layer = [min(owner[n] for n in names) for names in bucket_params]
    points: dict[int, list[int]] = {}
    nxt = 0
    for idx in range(n_layers - 1, -1, -1):
        launch = []
        while overlap and nxt < len(last_layer) and last_layer[nxt] >= idx:
            launch.append(nxt)
            nxt += 1
        if idx == 0:
            launch.extend(range(nxt, len(last_layer)))
        if launch:
            points[idx] = launch
    return points


def _owner(model: ModelSpec) -> dict[str, int]:
    return model.layer_index_by_param()


def _optimizer_s(compute: ComputeProfile, fraction: float) -> float:
    return compute.optimizer_s * fraction
