"""``dpsim plan``: search the tensor x pipeline x data layouts of a job, keep those that fit, rank them.

For each GPU count, every layout of the search space is enumerated: tensor-parallel size
(dividing the GPUs of an NVLink domain and the attention heads), pipeline stages
(any count up to the blocks: :func:`~dpsim.strategies.layout.balanced_counts` gives the
first and last stage the lighter share when they do not divide), data-parallel replicas (the rest, placed as
:func:`~dpsim.collectives.groups.check_layout_placement` requires), data-parallel strategy
(``ddp``, ``zero1``, ``fsdp``, ``zero3`` without pipeline stages or experts, and with data parallelism alone
``fsdp-hybrid`` and MiCS (``zero3 --zero-group``) over every whole-server shard group:
:meth:`Planner.strategy_variants`), micro-batch (dividing the
global batch per replica),
recomputation (``none``, ``selective``, ``full``), schedule (``1f1b``, and
``1f1b-interleaved`` with every number of chunks that divides a stage's blocks and those
up to :data:`MAX_UNEVEN_CHUNKS` that do not; ``gpipe``, ``zb-h1`` and ``dualpipe`` when asked: GPipe
takes the time of 1F1B with more memory, so it is never better; DualPipe, with an even ``p`` and at
least ``2p`` micro-batches, costs its order replayed chunk by chunk with free transfers
(:meth:`Planner.dualpipe_s`; with uniform chunks the paper's bubble ``(p/2 - 1)(F&B + B - 3W)`` above each
stage's two chunks of half the micro-batches) and, instead of the tied embedding's, the slowest all-reduce of a stage's
two parameter copies' gradients with its mirror's; for a mixture of experts with ``ep > 1`` the default
schedules add DualPipe, run with the expert-parallel all-to-alls overlapped as ``predict
--schedule dualpipe --moe-a2a-overlap`` runs them, DeepSeek-V3's schedule for it, arXiv:2412.19437 Sec. 3.2.1)
and sequence parallelism (with ``tp > 1``). For a mixture of experts, every expert-parallel size ``ep``
dividing its experts and ``tp x cp x dp`` (``etp`` predict's default unless ``--etp``: ``tp`` with ``ep`` 1, else 1;
sequence parallelism exactly when
``tp > 1``, as ``predict`` requires); for a sequence of :data:`CP_MIN_TOKENS` or more, the
context-parallel sizes :data:`DEFAULT_CPS` that cut it into ``2 x cp`` chunks (GPUs =
``tp x cp x pp x dp``).

**Memory first.** A candidate's memory is ``predict``'s, from the same functions
(:func:`~dpsim.predict.layout.stages_memory` over every stage, the fullest deciding;
:func:`~dpsim.predict.run.strategy_memory` without tensor or pipeline parallelism), so
that ``plan`` and ``predict`` never disagree on a fit; a candidate that does not fit is
dropped before any time is estimated. **Then time**, in closed form from the same per-layer work the simulator
plays (:func:`~dpsim.strategies.layout.layer_work`: compute, tensor-parallel collectives
costed on the ``tp`` communicator, recomputation): with ``X_s`` stage ``s``'s forward +
backward per micro-batch, the pipeline takes ``m·max X + (ΣX - max X)/v`` (Narayanan et
al. 2021, Sec. 2.2: ``(m + (p-1)/v)·X`` for uniform stages) plus ``2(p·v - 1)`` transfers
(activations in, gradients out), then the data-parallel collectives the last
micro-batch's backward cannot hide, the tied-embedding all-reduce and the optimizer (each stage
its own parameters', :func:`~dpsim.predict.layout.stage_optimizer_s`: the latest-ending stage decides).
With data parallelism alone, ``predict`` plays the data-parallel strategies' own programs, and so does the
closed form: :meth:`Planner.unit_dp` (``zero3``, ``fsdp``, ``fsdp-hybrid``: per-unit gathers and reductions
beside each forward and backward, and the copy passes :func:`~dpsim.strategies.sharded.unit_copies` charges)
and :meth:`Planner.flat_dp` (``ddp``, ``zero1``: their own buckets as the backward releases them, DDP's
copies, ZeRO-1's parameter all-gather after the update).
The compute, waits and bubble reported are the critical stage's, as in ``predict``.
Collective models are built once per communicator shape and every cost is memoised.
1F1B, and the interleaved schedule past ``m = p``, are replayed op by op with each stage's own chunks and the
blocking exchanges as the pipeline program plays them (:meth:`Planner.blocking_s`, up to :data:`MAX_REPLAY_OPS`
forwards and backwards; under ``ddp`` with its reductions beside, :meth:`Planner.blocking_dp_s`); beyond, the
closed form above, the interleaved steady state paced step by step by the heaviest pair any stage
runs (:meth:`Planner.interleaved_steady_s`: uneven chunks). With ``m = p`` (every forward before any backward) its
two waves are played exactly, transfers and each stage's data-parallel collectives (their stalls and the
compute they slow) with them (:meth:`Planner.interleaved_all_warmup_dp_s`); DualPipe's replay holds each chunk's
first forward for the parameters ``zero1``/``fsdp`` gather in the order its stage first runs them
(:meth:`Planner.stage_gathers`), as the engine queues them. Otherwise each stage's data-parallel buckets
are played on its stream in closed form (:meth:`Planner.stage_dp`, each chunk at its own time), the worst stage
deciding; the backwards they run beside are slowed as the engine slows compute beside a collective
(:func:`~dpsim.strategies.layout.overlap_contention`): each stage's last one in turn along the drain, and the
earlier ones of an interleaved drain all at once.
**Finally** the fitting candidates are simulated by :func:`dpsim.predict.run.predict` (the
pipeline engine), best estimate first, while an estimate could still beat the best simulated
time given the closed form's measured error (:data:`ESTIMATE_BOUND`), up to ``verify`` layouts
(and ``verify_seconds``, when given: :func:`_verify`); the simulated ones are ranked on their simulated
times, ahead of those only estimated (marked so in the table and in ``--json``). What is simulated is
decided by counts alone unless ``verify_seconds`` is given, so one search prints the same bytes on
every run and every machine.

Ranking: by time to train a token budget (``tokens``) or by step throughput, or by
cost (GPU-hours x price per GPU-hour, :mod:`dpsim.plan.cost`); a USD budget drops the
layouts that would cost more. ``goodput`` ranks by the expected time to train the budget
through failures (:mod:`dpsim.plan.layout_goodput`: the layout's checkpoint write and
restart, the job's MTBF, the best checkpoint interval and spares), then by its expected
cost (spares included).
"""

from __future__ import annotations

import dataclasses
import heapq
import itertools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import field
from typing import Any

import numpy as np

from dpsim.api_args import checked_arguments
from dpsim.collectives.groups import (
    Communicator,
    GroupCollectives,
    LayoutShape,
    check_layout_placement,
    mirror_pair_group,
    nvlink_domain_gpus,
)
from dpsim.collectives.ops import CollectiveModel
from dpsim.errors import ConfigError, DpsimError, UncalibratedLinkClass
from dpsim.frozen import frozen_dataclass
from dpsim.engine.pipeline import gc_paused
from dpsim.hardware import get_gpu
from dpsim.network.degrade import LinkDegradation
from dpsim.limits import (MAX_GPUS, MAX_PIPELINE_SLOTS, MAX_PLAN_CANDIDATES, MAX_SIMULATED_MICRO_BATCHES, MAX_TOKENS,
                          VERIFY_WORK, check_int, check_number, short)
from dpsim.memory import stage_activation_bytes, stage_expert_numels
from dpsim.plan.cost import PriceOverride, check_price_override, gpu_hour_price, parse_count
from dpsim.plan.layout_goodput import FailureInputs, LayoutGoodput, checkpoint_cost, layout_goodput, state_bytes
from dpsim.plan.reliability import (
    DEFAULT_GPU_MTBF_S,
    DEFAULT_LINK_MTBF_S,
    DEFAULT_NODE_MTBF_S,
    DEFAULT_RESTART_S,
    ClusterShape,
)
from dpsim.predict.config import (
    PLAN_DP_STRATEGIES,
    SETTINGS,
    PredictConfig,
    canonical_name,
    default_etp,
    check_moe_node_limit,
    check_value,
    flag_name,
    flag_scale,
    plain_number,
)
from dpsim.predict.extrapolate import EXTRAPOLATE_ABOVE, extrapolated_counts
from dpsim.predict.layout import (
    _heads,
    check_experts,
    check_no_expert_options,
    context_comm_s,
    degraded_classes,
    expert_a2a_s,
    expert_tp_s,
    expert_load,
    expert_split,
    heaviest_stage,
    model_source,
    shard_compute,
    stage_optimizer_s,
    stages_fullest,
    zero3_layout_passes,
)
from dpsim.predict.provenance import check_cpu_compute
from dpsim.predict.resolve import resolve
from dpsim.predict.result import Prediction
from dpsim.predict.run import (
    build_collectives,
    has_placeable_group,
    load_model,
    predict,
    rack_placement_unused,
    refuse_named_links_contiguous,
    resolve_topology,
    strategy_memory,
)
from dpsim.profile.calibrated import calibrated_device
from dpsim.profile.io import load_profile
from dpsim.profile.once import reads_profiles_once
from dpsim.profile.schema import Profile
from dpsim.strategies.layout import (
    ChunkWork,
    PARAM_SHARDING_LAYOUT_STRATEGIES,
    Layout,
    default_bucket_elements,
    gradient_accumulation_s,
    layer_work,
    overlap_contention,
    reshards_after_forward,
    stage_assignment,
)
from dpsim.strategies.checkpointing import OP_RECOMPUTES, CheckpointPolicy, recompute_shares
from dpsim.strategies.context import ContextParallel, check_context, cp_shard
from dpsim.strategies.pipeline import (A2A_OVERLAP_SCHEDULES, a2a_overlap_cut, a2a_pairs, blocking_stage_times,
                                      compute_beside, dualpipe_stage_times,
                                      extra_warmup, layer_buckets, schedule_slots)
from dpsim.strategies.ddp_costs import ddp_buckets, ddp_costs
from dpsim.strategies.deepspeed_fetch import backward_gather_numel
from dpsim.strategies.registry import UNIT_STRATEGIES, unsharded_accumulation, zero_shard_group
from dpsim.strategies.sharded import unit_copies
from dpsim.strategies.shards import (deepspeed_partition_numel, deepspeed_reduce_bucket_elements, unit_shard_numel,
                                     wrap_units)
from dpsim.strategies.zero import deepspeed_buckets
from dpsim.strategies.tensor import NO_EXPERT_SPLIT, ExpertSplit, TpModel, check_tp, tp_model
from dpsim.topology.cluster import Topology
from dpsim.topology.spec import ddp_allreduce_after_backward
from dpsim.units import format_seconds
from dpsim.workload.attention_rates import check_attention_kernel_on_gpu
from dpsim.workload.fp8 import (
    caches_fp8_weights,
    gathered_weight_bytes,
    gathers_fp8_weights,
    layers_fp8_weight_numel,
    layers_gathered_bytes,
)
from dpsim.workload.precision import (FP8_PARAMS_STRATEGIES, check_fp8_params_strategy, check_precision_on_gpu,
                                      get_precision)
from dpsim.workload.routing import parse_routing
from dpsim.variability.spec import VariabilitySpec
from dpsim.wording import canonical_choice, canonical_choices
from dpsim.workload.spec import ModelSpec, is_mtp_unit

_LAYOUT_OWN = frozenset({"gpus", "tp", "pp", "dp", "cp", "ep", "etp", "cp_comm", "cp_balance", "tp_comm_overlap",
                         "tp_across_network", "strategy", "micro_batch", "recompute", "activation_checkpointing",
                         "schedule", "virtual_stages", "sequence_parallel", "grad_accum", "global_batch",
                         "stage_layers", "grad_accum_fusion", "moe_a2a_overlap", "moe_node_limit", "zero_group"})
"""Fields a candidate sets itself (the rest of the command is the job's)."""
_BASE_TOLERATED = frozenset({"gpus", "micro_batch", "cp_comm", "cp_balance", "tp_comm_overlap", "tp_across_network",
                             "grad_accum_fusion", "moe_a2a_overlap"})
"""Of :data:`_LAYOUT_OWN`, what :func:`plan_layouts` accepts on its base: the job's flags it carries to the
candidates (``None`` arguments: the base's), and the counts every caller's base holds (its ``gpus`` argument
and micro-batches replace them)."""
_SEARCH_ARGUMENT = {"tp": "tps", "pp": "pps", "cp": "cps", "ep": "eps", "etp": "etps", "strategy": "strategies",
                    "recompute": "recomputes", "schedule": "schedules"}
"""A base field -> the :func:`plan_layouts` argument that searches it."""

MAX_PLAN_VALUES = 32
"""Values of one searched flag (``--gpus 256,512,...``): the search grows as their product."""

RANKINGS = ("time", "cost", "goodput")
"""``--rank``: fastest to train first, cheapest first, or fastest to train through failures first."""

MAX_UNEVEN_CHUNKS = 4
"""Interleaved chunks per stage searched when they do not divide a stage's blocks (beyond
this, only the counts that divide): each more chunk adds transfers for a bubble that
shrinks as ``1/v``."""

ESTIMATE_BOUND = (0.95, 1.06)
"""The closed-form step over the simulated one (``predict``'s pipeline engine), low and high: what
``validation/plan_estimate_check.py`` measured on 2026-12-07 (validation/large_model_runs.md "est1f1b") plus a
margin of about 0.01 each way, rounded outward. The same 3,581 layouts as "estbound2" (every N-th fitting one of
each search: DeepSeek-V3 on 4,096 GPUs every 8th and on 16,384 every 24th, Mixtral-8x7B on 1,024 every 3rd, and
Llama-3-405B on 2,048, -70B on 1,024 and -8B on 64 searched with 1F1B, interleaved and DualPipe, every 3rd, 4th and
2nd): **0.964 to 1.030**, median 1.000 (0.952 to 1.073 before); per schedule 1F1B 0.982-1.029 (0.983-1.073),
interleaved 0.964-1.030 (0.952-1.045; at ``m = p`` 0.975-1.021, unchanged), DualPipe 0.988-1.030 (unchanged), data
parallelism alone 0.964-1.016 (unchanged). 1F1B and the interleaved schedule past ``m = p`` are now replayed op
by op with their blocking exchanges (:meth:`Planner.blocking_s`): Llama-3-70B's 80 blocks on 64 stages under
1F1B with ``m <= p`` read 1.073, now 1.000. The ends: 1.030 Mixtral-8x7B's interleaved ``m = 2p`` and DualPipe
layouts, 0.964 Mixtral's data parallelism alone (tp8 zero1) and interleaved zero1 with ep2 (the closed-form
data-parallel part, which the replay no longer offsets). The high end is 1.06, not 1.04: FSDP with the float8
all-gather (``--fp8 torchao-tensorwise``) under tp 2, with and without pipeline stages, read 1.045-1.049 (outside
the sampled searches: plan searches fsdp under tp/pp only when ``--strategies`` names it; 1.108-1.111 after the
replay, past the bound, while every candidate's compute was costed with the base strategy's FP8 recipe: 0.999-1.000
with its own, :meth:`Planner.strategy_precision`, fuzz15), and a bound that misses a layout could prune the fastest
one. Only the high end decides what is simulated: a layout
estimated at ``e`` simulates in no less than ``e / 1.06``, so once that is slower than the best simulated layout,
it and every later estimate cannot beat it."""

MAX_REPLAY_OPS = 16_384
"""Forwards and backwards (``2·p·v·m``) up to which the estimate replays 1F1B and the interleaved schedule op by op
with their blocking exchanges (:meth:`Planner.blocking_s`; beyond, the closed form: a long steady state, where it
is within 1-3 %). Why not extend a shorter replay: its step grows by the heaviest stage per micro-batch only once
that stage's warm-up slack is spent, which with uneven stages can take many micro-batches (Llama-3-70B tp8 on 32
stages: extended from ``m = p + 1`` to 256 it read 0.964x its simulation). The replay's order is built once per
``(p, v, m)`` (~40 µs per op) and run in ~1-2 µs per op."""

DEFAULT_VERIFY = 64
"""Most layouts simulated (``--verify``): more than the bound leaves in the searches measured
(DeepSeek-V3 on 16,384 GPUs, global batch 4,096: 27, Llama-3-405B, 2,048: 5, with the bound at 1.06 on
2026-12-07; 13 and 4 at 1.04, "est1f1b"; 39 and 9 at 1.08; 32 and 9 at 1.07 with the estimate and engine before, ea65253; ~3 s of simulation each on a
loaded 2-core machine): issue 28 asks for either 16,384-GPU search under 10 s whole process, and one
simulated layout takes ~0.04 s (DeepSeek-V3) to ~0.15 s (405B)."""
VERIFY_SECONDS: float | None = None
"""Seconds of simulation after the first (``--verify-seconds``); ``None``, the default: no time limit, only
``--verify`` and the bound. A limit in wall time makes which layouts are simulated, hence the ranking and
the chosen layout, depend on the machine and its load: DeepSeek-V3's 16,384-GPU search under the 2 s it
was simulated 17 layouts in one run and 15 in the next (the JSON differed); without it, every one the bound
leaves, every time."""

DP_WORK_PER_LAYER = {"ddp": 0.084, "zero1": 0.084, "zero2": 0.148}
"""Data parallelism alone: pipeline slots one layer's micro-batch of one simulated step costs, measured
against the pipeline engine in the same run (llama-2-7b, 66 layers, 64 GPUs, 1,000 micro-batches x 3 steps:
26.7 µs per layer and micro-batch with ddp, 47 with zero2, 74.5 with fsdp; 318 µs per slot at tp 2 x pp 4,
8,000 micro-batches; 2026-12-07, loaded 2-core machine). Every other strategy (the ZeRO-3/FSDP family gathers
and reduce-scatters per unit and micro-batch): :data:`DP_WORK_PER_LAYER_SHARDED`."""
DP_WORK_PER_LAYER_SHARDED = 0.234
"""As :data:`DP_WORK_PER_LAYER`, for zero3, fsdp and their variants (measured with fsdp, same run)."""

DEFAULT_MICRO_BATCHES = (1, 2, 4, 8, 16)
"""Micro-batch sizes searched unless given."""
CP_MIN_TOKENS = 16_384
"""Sequences this long or longer are also searched with context parallelism: shorter ones keep
``cp`` 1, since their attention is too short a share of the step to hide the ring's exchanges
(Megatron-LM's guidance: context parallelism for long-context training)."""
DEFAULT_CPS = (1, 2, 4, 8)
"""Context-parallel sizes searched for a long sequence unless given (each also cuts the
sequence into ``2 x cp`` chunks that must divide it)."""

DEFAULT_STRATEGIES = ("ddp", "zero1", "zero3", "fsdp-hybrid")
"""Data-parallel strategies searched unless given, each where it applies (:meth:`Planner.strategy_variants`):
``zero3`` without pipeline stages or expert parallelism (DeepSpeed refuses ZeRO-2/3 with pipeline parallelism,
``deepspeed/runtime/pipe/engine.py``; predict refuses it with ``--ep``), with data parallelism alone also as MiCS
over every shard group HSDP takes (``--zero-group``), ``fsdp-hybrid`` with data parallelism
alone, over every shard group it can take (under tensor/pipeline layouts only when ``--strategies`` names it:
there its memory is never below zero1's or zero3's, and a candidate per shard group on every pipelined shape
would take the 16,384-GPU searches past issue 28's 10 s). ``fsdp`` is left out: under pipeline parallelism it is costed like the
distributed optimizer, so it only ties with ``zero1``, and without pipeline stages it shards as ``zero3`` does
(FSDP's one difference, the root unit kept from forward to backward, is asked for with ``--strategies fsdp``)."""


@frozen_dataclass
class Candidate:
    """One layout of the search space."""

    gpus: int
    """GPUs of the job."""
    tp: int
    """Tensor-parallel size."""
    pp: int
    """Pipeline stages."""
    dp: int
    """Data-parallel replicas."""
    strategy: str
    """A key of :data:`~dpsim.predict.config.PLAN_DP_STRATEGIES`."""
    micro_batch: int
    """Samples per micro-batch."""
    recompute: str
    """``none``, ``selective`` or ``full``."""
    schedule: str
    """``1f1b``, ``1f1b-interleaved``, ``gpipe``, ``zb-h1`` or ``dualpipe`` (``1f1b`` without pipeline
    parallelism)."""
    virtual_stages: int
    """Model chunks per stage."""
    sequence_parallel: bool
    """Megatron sequence parallelism."""
    global_batch: int
    """Samples per optimizer step."""
    cp: int = 1
    """Context-parallel size (``tp x cp x pp x dp`` GPUs)."""
    ep: int = 1
    """Expert-parallel size of a mixture of experts, carved with ``etp`` out of ``tp x cp x dp``."""
    etp: int = 1
    """Expert-tensor-parallel size (each expert's width split over it)."""
    experts: bool = False
    """The model has routed experts: its config and command give ``etp`` only where it is not predict's
    default (:func:`~dpsim.predict.config.default_etp`; a dense model's 1 never). A candidate built by hand for a
    model with experts and ``tp`` above 1 with ``ep`` 1 says so, or its ``etp`` 1 reads as that default."""
    grad_accum_fusion: bool = True
    """Weight gradients accumulated by their GEMM (``--no-grad-accum-fusion``: one more add per
    parameter and micro-batch); always on without tensor or pipeline parallelism, where it
    does not apply."""
    tp_comm_overlap: str = "backward"
    """The job's ``--tp-comm-overlap``, which applies when ``tp`` is above 1."""
    tp_across_network: bool = False
    """The job allows a tensor-parallel group across the network (``--tp-across-network``)."""
    cp_comm: str = "p2p"
    """The job's ``--cp-comm``, which applies when ``cp`` is above 1."""
    cp_balance: bool = True
    """The job's ``--cp-balance`` (causal load balancing), which applies when ``cp`` is above 1."""
    moe_a2a_overlap: bool = False
    """The job's ``--moe-a2a-overlap``, on where it applies (``ep`` above 1, without pipeline stages or
    with the interleaved schedule)."""
    moe_node_limit: int | None = None
    """The job's ``--moe-node-limit`` (DeepSeek-V3's node-limited routing), which applies when ``ep``
    is above 1: a layout without expert parallelism has no all-to-all for it to bound."""
    zero_group: int | None = None
    """``fsdp-hybrid``'s or MiCS's (``zero3``) shard group (``--zero-group``: consecutive data-parallel ranks
    sharding the state, replicated across the groups); ``None`` for every other strategy, and for ``zero3``
    sharded over every data-parallel rank."""

    @property
    def sharded(self) -> bool:
        """Tensor, pipeline, context or expert parallelism: the layout path (else data parallelism alone)."""
        return self.tp * self.pp * self.cp * self.ep * self.etp > 1

    @property
    def given_etp(self) -> int | None:
        """``etp`` as the job would give it: left out (``None``) where it is predict's default for the model
        (:attr:`experts`), so the config, and the command, read as the user's would."""
        return None if self.etp == (default_etp(tp=self.tp, ep=self.ep) if self.experts else 1) else self.etp

    def overlap(self, base: PredictConfig) -> bool:
        """Whether its gradients overlap backward: ``base``'s --overlap, except that fsdp with data parallelism
        alone always does (predict models its per-unit traffic overlapped and refuses --no-overlap there)."""
        return base.gradients.overlap or (not self.sharded and self.strategy in UNIT_STRATEGIES)

    def config(self, base: PredictConfig) -> PredictConfig:
        """The :class:`PredictConfig` of this layout on ``base``'s job (``--rack-placement contiguous`` left at
        aligned where it changes nothing for this layout, as ``predict`` would refuse it there: data parallelism
        alone, or a GPU count inside one NVLink domain; the placement is the same)."""
        cfg = self._config(base)
        if cfg.cluster.rack_placement == "contiguous":
            par = cfg.parallelism
            topology = resolve_topology(cfg)
            if rack_placement_unused(topology, groups=has_placeable_group(par, topology.n_gpus)):
                cfg = dataclasses.replace(cfg, rack_placement="aligned")
        return cfg

    def _config(self, base: PredictConfig) -> PredictConfig:
        return dataclasses.replace(
            base, overlap=self.overlap(base),
            gpus=self.gpus, tp=self.tp, pp=self.pp, dp=self.dp, cp=self.cp, ep=self.ep, etp=self.given_etp,
            cp_comm=self.cp_comm if self.cp > 1 else "p2p", cp_balance=self.cp_balance or self.cp == 1,
            strategy=self.strategy,
            micro_batch=self.micro_batch, recompute=self.recompute if self.sharded else "off",
            activation_checkpointing=self.recompute == "full" and not self.sharded,
            schedule=self.schedule, virtual_stages=self.virtual_stages, sequence_parallel=self.sequence_parallel,
            grad_accum=1, global_batch=self.global_batch, tp_comm_overlap=self.tp_comm_overlap if self.tp > 1 else "backward",
            tp_across_network=self.tp_across_network and self.tp > 1,
            grad_accum_fusion=self.grad_accum_fusion or not self.sharded, moe_a2a_overlap=self.moe_a2a_overlap,
            moe_node_limit=self.moe_node_limit if self.ep > 1 else None, zero_group=self.zero_group)

    def command(self, base: PredictConfig, degradations: Sequence[LinkDegradation] = ()) -> str:
        """The whole ``dpsim predict`` command: the job's flags that differ from the defaults, then the layout's
        (``degradations``: the search's ``--degrade``, each named again)."""
        default = PredictConfig().settings()
        job = []
        placed = self.config(base).cluster.rack_placement if base.cluster.rack_placement != "aligned" else None
        for name, value in base.settings().items():
            if name == "rack_placement" and value != placed:  # aligned where contiguous changes nothing (config)
                continue
            # value None: a setting left out where the default is not (no --link with a --topology file).
            if name in _LAYOUT_OWN or value == default[name] or name == "model" or value is None:
                continue
            if name == "overlap" and self.overlap(base):  # fsdp alone: predict refuses --no-overlap
                continue
            flag = flag_name(name)
            if isinstance(value, bool):
                job.append(flag if value else f"--no-{flag[2:]}")
            else:
                scale = flag_scale(name)
                job.append(f"{flag} {value * scale if scale else value}")
        job += [f"--degrade {d.label}" for d in degradations]
        return " ".join(["dpsim predict --model", base.workload.model, *job, self.flags()])

    def flags(self) -> str:
        """The ``dpsim predict`` flags of the layout."""
        cp = f" --cp {self.cp}" if self.cp > 1 else ""
        ep = (f" --ep {self.ep}" if self.ep > 1 else "") + (f" --etp {self.etp}" if self.given_etp is not None else "")
        out = (f"--gpus {self.gpus} --tp {self.tp}{cp} --pp {self.pp} --dp {self.dp}{ep} "
               f"--micro-batch {self.micro_batch} --global-batch {self.global_batch}")
        out += f" --strategy {self.strategy}"
        if self.zero_group is not None:
            out += f" --zero-group {self.zero_group}"
        if self.pp > 1 and self.schedule != "1f1b":
            out += f" --schedule {self.schedule} --virtual-stages {self.virtual_stages}"
        if self.sequence_parallel:
            out += " --sequence-parallel"
        if self.tp > 1 and self.tp_comm_overlap != "backward":
            out += f" --tp-comm-overlap {self.tp_comm_overlap}"
        if self.tp > 1 and self.tp_across_network:
            out += " --tp-across-network"
        if self.cp > 1 and self.cp_comm != "p2p":
            out += f" --cp-comm {self.cp_comm}"
        if self.cp > 1 and not self.cp_balance:
            out += " --no-cp-balance"
        if self.recompute != "off":
            out += " --activation-checkpointing" if not self.sharded else f" --recompute {self.recompute}"
        if not self.grad_accum_fusion and self.sharded:
            out += " --no-grad-accum-fusion"
        if self.moe_a2a_overlap:
            out += " --moe-a2a-overlap"
        if self.ep > 1 and self.moe_node_limit is not None:
            out += f" --moe-node-limit {self.moe_node_limit}"
        return out


@frozen_dataclass
class Estimate:
    """A candidate's closed-form step, memory and cost."""

    candidate: Candidate
    """The layout."""
    step_time_s: float
    """Estimated step."""
    memory_bytes: float
    """Per GPU, the fuller of the first and last stage."""
    usable_bytes: float
    """Device memory less the allocator headroom."""
    compute_s: float
    """The critical stage's forward + backward compute of the step (recomputation included): the
    stage with the most compute and waits for its own collectives, as ``predict``'s headline
    (:func:`~dpsim.predict.layout.critical_stage`, here on the closed form's per-stage times)."""
    tp_exposed_s: float
    """Tensor-parallel collectives the critical stage waits for."""
    bubble_s: float
    """Pipeline fill and drain: what the critical stage's own forward and backward leave of the pipeline."""
    p2p_s: float
    """Transfers on the critical path."""
    dp_exposed_s: float
    """Data-parallel and embedding collectives not hidden by the last backward."""
    optimizer_s: float
    """Optimizer step: what the step waits for of the stages' updates after the exposed reductions
    (the latest-ending stage's update, less how much earlier than the exposed reductions its own end;
    stage 0's update when stage 0 ends last)."""
    samples_per_s: float
    """Global throughput."""
    tokens_per_s: float | None
    """Token throughput (token models)."""
    mfu: float | None
    """Model FLOPs utilisation."""
    usd_per_hour: float | None
    """Price of the job's GPUs per hour."""
    time_to_train_s: float | None = None
    """With a token (or sample) budget."""
    cost_usd: float | None = None
    """With a budget and a price."""
    reliability: LayoutGoodput | None = None
    """Through failures (``rank_by="goodput"``): checkpoint, expected time to train, interval, spares."""
    verified: Prediction | None = field(default=None, repr=False)
    """The simulated prediction, for the candidates that were verified."""

    @property
    def fits(self) -> bool:
        """Memory within the usable capacity."""
        return self.memory_bytes <= self.usable_bytes

    def to_dict(self) -> dict:
        """JSON-able form."""
        c = self.candidate
        return {
            "gpus": c.gpus, "tp": c.tp, "pp": c.pp, "dp": c.dp, "cp": c.cp, "ep": c.ep, "strategy": c.strategy,
            "zero_group": c.zero_group, "micro_batch": c.micro_batch,
            "recompute": c.recompute, "schedule": c.schedule, "virtual_stages": c.virtual_stages,
            "sequence_parallel": c.sequence_parallel, "flags": c.flags(),
            "step_time_s": self.step_time_s, "memory_bytes": self.memory_bytes, "usable_bytes": self.usable_bytes,
            "compute_s": self.compute_s, "tp_exposed_s": self.tp_exposed_s, "bubble_s": self.bubble_s,
            "p2p_s": self.p2p_s, "dp_exposed_s": self.dp_exposed_s, "optimizer_s": self.optimizer_s,
            "samples_per_s": self.samples_per_s, "tokens_per_s": self.tokens_per_s, "mfu": self.mfu,
            "usd_per_hour": self.usd_per_hour, "time_to_train_s": self.time_to_train_s, "cost_usd": self.cost_usd,
            "simulated": self.verified is not None,
            "verified_step_time_s": self.verified.step_time_s if self.verified is not None else None,
            "model_error": self.model_error.to_dict() if self.model_error is not None else None,
            "expected_cost_usd": self.expected_cost_usd,
            "reliability": self.reliability.to_dict() if self.reliability is not None else None,
        }

    @property
    def expected_cost_usd(self) -> float | None:
        """Cost of the expected time to train through failures, the spare nodes' GPUs paid too."""
        r = self.reliability
        if r is None or self.usd_per_hour is None:
            return None
        return self.usd_per_hour * (1 + r.spare_gpus / self.candidate.gpus) * r.expected_wall_s / 3600.0

    @property
    def model_error(self):
        """The simulated step's model-error interval (:mod:`dpsim.predict.model_error`); ``None``
        for a closed-form estimate, which only ranks (the verified candidates carry the numbers)."""
        return self.verified.model_error if self.verified is not None else None


@frozen_dataclass
class PlanResult:
    """What :func:`plan_layouts` found."""

    ranked: tuple[Estimate, ...]
    """Layouts that fit (and meet the budget), best first: the simulated ones by their simulated
    time, then those only estimated (:attr:`Estimate.verified` ``None``) by their estimate."""
    counts: dict
    """Candidates enumerated, refused by placement, not fitting, over budget, ranked; with ``--fp8-params``
    also ``no_fp8_params``, the layouts left out for a strategy that cannot hold FP8 primary weights."""
    wall_s: float = field(compare=False)
    """Time the search took (wall clock): neither compared nor in :meth:`to_dict` (``--json``), so that one
    search gives equal results and the same output on every run."""
    rank_by: str
    """``time`` or ``cost``."""
    failures: FailureInputs | None = None
    """What failures cost (``rank_by="goodput"``)."""
    best_memory: object = None
    """Nothing ranked: the candidate closest to being ranked (an :class:`Estimate`), else ``None``: the cheapest
    layout over ``--budget-usd`` when some fit in memory, else the one closest to fitting in memory."""
    base: PredictConfig | None = field(default=None, repr=False)
    """The job searched (for the chosen layout's whole command)."""
    degradations: tuple[LinkDegradation, ...] = ()
    """Links below capacity every layout was costed with (``--degrade``)."""
    uncalibrated: dict = field(default_factory=dict)
    """Per link class a ``--calibration`` profile has no fit of, the layouts refused for a communicator on it
    (counted in ``counts["refused_by_placement"]`` too)."""
    verification: dict = field(default_factory=dict)
    """What was simulated: ``simulated`` (layouts), ``within_bound`` (layouts whose estimate could
    beat the best simulated one, :data:`ESTIMATE_BOUND`), ``stopped_by`` (``bound``: every such
    layout was simulated; ``count``: ``--verify``; ``time``: ``--verify-seconds``; ``work``: the next
    layout's simulation would pass :data:`VERIFY_WORK`; ``none``: nothing
    fit or ``--verify 0``), ``bound``."""

    @property
    def best(self) -> Estimate | None:
        """The chosen layout."""
        return self.ranked[0] if self.ranked else None

    def to_dict(self) -> dict:
        """JSON-able form (schema ``dpsim.plan/1``)."""
        best = self.best
        return {
            "schema": "dpsim.plan/1", "rank_by": self.rank_by,
            "failures": None if self.failures is None else {
                "gpu_mtbf_s": self.failures.rates.gpu_mtbf_s, "node_mtbf_s": self.failures.rates.node_mtbf_s,
                "link_mtbf_s": self.failures.rates.link_mtbf_s, "restart_s": self.failures.restart_s,
                "replace_s": self.failures.replace_s,
                "checkpoint_bandwidth_bytes_per_s": self.failures.node_bandwidth_bytes_per_s,
                "spare_risk": self.failures.spare_risk}, "counts": dict(self.counts),
            "verification": dict(self.verification),
            "layouts": [e.to_dict() for e in self.ranked],
            "best": best.to_dict() if best is not None else None,
            "command": best.candidate.command(self.base, self.degradations)
            if best is not None and self.base is not None else None,
            "best_prediction": best.verified.to_dict() if best is not None and best.verified is not None else None,
            "closest_to_fitting": self.best_memory.to_dict() if self.best_memory is not None else None,
        }


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def parse_int_list(text: str | None, flag: str, *, maximum: int = MAX_GPUS,
                   max_items: int = MAX_PLAN_VALUES) -> tuple[int, ...] | None:
    """``"1,2,4"`` -> ``(1, 2, 4)`` (``None`` stays ``None``); a one-line error naming ``flag`` otherwise."""
    if text is None:
        return None
    expected = f"expected at most {max_items} comma-separated integers in [1, {maximum:,}]"
    try:
        values = tuple(int(v) for v in str(text).split(","))
    except ValueError:
        raise ConfigError(f"{flag}: {short(text)} is not valid; {expected}") from None
    if not values or len(values) > max_items or any(not 1 <= v <= maximum for v in values):
        raise ConfigError(f"{flag}: {short(text)} is not valid; {expected}")
    return values  # repeats refused by check_search, for the command line and the API alike


def parse_choice_list(text: str | None, flag: str, choices: Sequence[str]) -> tuple[str, ...] | None:
    """``"ddp,zero1"`` -> ``("ddp", "zero1")`` checked against ``choices``."""
    if text is None:
        return None
    values = canonical_choices(tuple(v.strip() for v in str(text).split(",")), choices)
    bad = [v for v in values if v not in choices]
    if not values or bad:
        raise ConfigError(f"{flag}: {text!r} is not valid; choose from {', '.join(choices)} (comma-separated)")
    return values


PLAN_RECOMPUTES = ("off", "selective", "full", "op", "megatron", "moe")
"""``--recompute`` values the search takes (``dpsim plan --recompute``)."""
PLAN_SCHEDULES = ("1f1b", "1f1b-interleaved", "gpipe", "zb-h1", "dualpipe")
"""``--schedules`` values the search takes (``dpsim plan --schedules``)."""
DEFAULT_SCHEDULES = ("1f1b", "1f1b-interleaved")
"""What the search takes when ``schedules`` is ``None`` (``--schedules`` not given)."""
DEFAULT_RECOMPUTES = ("off", "selective", "full")
"""What the search takes when ``recomputes`` is ``None`` (``--recompute`` not given)."""
MAX_TOP = 10_000
MAX_VERIFY = 100


def _check_int_values(values: Any, flag: str, *, optional: bool = True) -> None:
    """A search axis given through the Python API as it comes from :func:`parse_int_list` on the
    command line: a sequence of integers in [1, MAX_GPUS], at most MAX_PLAN_VALUES of them."""
    if values is None and optional:
        return
    expected = f"expected an integer or a list of at most {MAX_PLAN_VALUES} integers in [1, {MAX_GPUS:,}]"
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values \
            or len(values) > MAX_PLAN_VALUES:
        raise ConfigError(f"{flag}: {short(values)} is not valid; {expected}")
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_GPUS:
            raise ConfigError(f"{flag}: {short(v)} is not valid; {expected}")
    _refuse_repeats(values, flag)


def _plain_ints(values: Any) -> Any:
    """A search axis of numpy integers (a list of them, a range or a 1-D array) as a list of Python ints; anything
    else as it is, for :func:`_check_int_values` to judge. A single integer is a one-value axis, as ``dpsim.sweep``
    takes one (``dpsim.plan(base, gpus=8)`` was refused "8 is not valid; expected a list" where ``sweep(gpus=8)``
    ran)."""
    values = plain_number(values, int)
    if isinstance(values, int) and not isinstance(values, bool):
        return [values]
    if isinstance(values, range) or (hasattr(values, "tolist") and getattr(values, "ndim", 0) == 1):
        values = list(values)
    if isinstance(values, (list, tuple)):
        return type(values)(plain_number(v, int) for v in values)
    return values


def _refuse_repeats(values: Sequence, flag: str) -> None:
    """A search axis names each value once: dpsim.plan(gpus=[8, 8]) ranked every layout twice (the command
    line dropped the repeat in silence), as report --scaling-gpus 8,8 refuses it."""
    seen: set = set()
    for v in values:
        if v in seen:
            raise ConfigError(f"{flag}: {','.join(map(str, values))} repeats {v}; give each value once")
        seen.add(v)


def _check_choice_values(values: Any, flag: str, choices: Sequence[str]) -> None:
    """A search axis of names, as :func:`parse_choice_list` gives it."""
    if values is None:
        return
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values \
            or any(v not in choices for v in values):
        raise ConfigError(f"{flag}: {short(values)} is not valid; choose a list from {', '.join(choices)}")
    _refuse_repeats(values, flag)


def check_search(*, gpus: Any, tps: Any, pps: Any, cps: Any, eps: Any, etps: Any, micro_batches: Any,
                 strategies: Any, recomputes: Any, schedules: Any, top: Any, verify: Any, budget_usd: Any,
                 gpu_hour_usd: PriceOverride, verify_seconds: Any = None) -> None:
    """The search's own inputs, refused in one line naming the flag as the CLI refuses them, so that
    ``dpsim.plan`` called from Python does not end in an assertion or a division by zero
    (``tps=[0]``, ``micro_batches=[-1]``, ``strategies=["zero2"]``) nor silently drop a price
    (``gpu_hour_usd=-1`` was caught as "no price" and left the cost out)."""
    _check_int_values(gpus, "--gpus", optional=False)
    for flag, values in (("--tp", tps), ("--pp", pps), ("--cp", cps), ("--ep", eps), ("--etp", etps),
                         ("--micro-batches", micro_batches)):
        _check_int_values(values, flag)
    _check_choice_values(strategies, "--strategies", PLAN_DP_STRATEGIES)
    _check_choice_values(recomputes, "--recompute", PLAN_RECOMPUTES)
    _check_choice_values(schedules, "--schedules", PLAN_SCHEDULES)
    check_int(top, "--top", 1, MAX_TOP)
    check_int(verify, "--verify", 0, MAX_VERIFY)
    if verify_seconds is not None:
        check_number(verify_seconds, "--verify-seconds", 0, 86_400)
    if budget_usd is not None:
        check_number(budget_usd, "--budget-usd", 0, 1e300, open_below=True)
    check_price_override(gpu_hour_usd, "--gpu-hour-usd")


class _Tables:
    """Per-layer work of one (tp, micro-batch, sequence parallelism, recompute), for summing by stage."""

    def __init__(self, work):
        self.forward = [w.forward_s for w in work]
        self.backward = [w.backward_s for w in work]
        # Compute only: the re-run forward's waits are in tp_exposed (and were counted twice).
        self.compute = [w.compute_forward_s + w.compute_backward_s + w.recompute_s - w.recompute_waits_s for w in work]
        self.tp_exposed = [w.tp_exposed_s for w in work]
        self.weight_grad = [w.weight_grad_s for w in work]
        # Once a step, in each chunk's first forward: cached FP8 weight casts (LayerWork.first_forward_s).
        self.first_forward = [w.first_forward_s for w in work]
        self.work = tuple(work)


@frozen_dataclass
class _ExpertAsk:
    """What :func:`~dpsim.predict.layout.check_experts` reads of a config's parallelism part, for a shape
    being enumerated."""

    tp: int
    """Tensor-parallel size."""
    cp: int
    """Context-parallel size."""
    ep: int
    """Expert-parallel size."""
    etp: int = 1
    """Expert-tensor-parallel size."""
    sequence_parallel: bool = True
    """Always on for an MoE with ``tp > 1`` (the candidates never leave it off)."""
    moe_a2a_overlap: bool = False
    """Checked by the job's own config, not per candidate."""

    def etp_for(self, experts: bool) -> int:
        """The enumerated ``etp`` (already predict's default where ``--etp`` was left out)."""
        return self.etp


class Planner:
    """The searches of one job (model, cluster design, precision): caches shared by every candidate."""

    def __init__(self, base: PredictConfig, *, grad_accum_fusion: bool = True, tp_comm_overlap: str | None = None,
                 tp_across_network: bool | None = None, cp_comm: str | None = None,
                 moe_a2a_overlap: bool | None = None, cp_balance: bool | None = None,
                 moe_node_limit: int | None = None, degradations: Sequence[LinkDegradation] = (),
                 profile: Profile | None = None):
        self.base = base
        self.profile = profile if profile is not None or base.calibration.profile is None \
            else load_profile(base.calibration.profile)
        """``base``'s calibration profile, read once for the search (``None`` without one): the device, the
        collectives and the compute efficiency of every candidate, and the layouts it simulates."""
        self.degradations = tuple(degradations)
        """Links below capacity (``--degrade``): every candidate's communicators are costed on them, as
        ``predict --degrade`` costs its own (:func:`~dpsim.predict.run.build_collectives`)."""
        self._factories: dict[int, object] = {}
        # The job's settings, kept apart from ``base``: a config without --tp/--pp refuses
        # --no-grad-accum-fusion, one without --tp the tensor-parallel flags, one without --cp
        # --cp-comm or --no-cp-balance, and the search's base has none of them (``None``: base's own).
        self.grad_accum_fusion = grad_accum_fusion
        self.tp_comm_overlap = base.parallelism.tp_comm_overlap if tp_comm_overlap is None else tp_comm_overlap
        self.tp_across_network = base.parallelism.tp_across_network if tp_across_network is None else tp_across_network
        self.cp_comm = base.parallelism.cp_comm if cp_comm is None else cp_comm
        self.cp_balance = base.parallelism.cp_balance if cp_balance is None else cp_balance
        self.moe_a2a_overlap = base.parallelism.moe_a2a_overlap if moe_a2a_overlap is None else moe_a2a_overlap
        self.moe_node_limit = base.parallelism.moe_node_limit if moe_node_limit is None else moe_node_limit
        self.model: ModelSpec = load_model(base)
        self.precision = get_precision(base.execution.precision, base.execution.fp8, strategy=base.parallelism.strategy,
                                       fsdp_version=base.parallelism.fsdp_version, compile=base.execution.compile,
                                       fp8_params=base.execution.fp8_params)
        self._topologies: dict[int, Topology] = {}
        self._models: dict[object, CollectiveModel] = {}
        self._collectives: dict[tuple[int, int, int, int], GroupCollectives] = {}
        self._costs: dict[tuple, dict[float, float]] = {}
        self._cost_tables: dict[tuple, dict[float, float]] = {}
        self._comm_values: dict[tuple, int] = {}
        self._comm_index: dict[tuple[int, str], int] = {}
        self._tables: dict[tuple, _Tables] = {}
        self._compute: dict[tuple[int, int], object] = {}
        self.heads = _heads(model_source(base))
        self.forward_flops_per_sample = self.model.forward_flops_per_sample
        # The blocks --pp splits: a multi-token prediction module's rides on the last stage.
        self.n_blocks = len({l.unit for l in self.model.layers if l.unit is not None and not is_mtp_unit(l.unit)})
        self._assignments: dict[tuple[int, int, int], tuple] = {}
        self._tpms: dict[tuple, TpModel] = {}
        self.too_long = 0
        """Candidates left out for more micro-batches than predict simulates (:meth:`_variants`; counted per call)."""
        self.no_fp8_params = 0
        """Layouts left out under ``--fp8-params`` for a strategy that cannot hold FP8 primary weights as predict
        runs it (:func:`~dpsim.workload.precision.check_fp8_params_strategy`: ddp, zero3, FSDP1 without tp/pp/cp;
        counted per call, as :attr:`too_long`)."""
        self._splits: dict[tuple[int, int, int, int], tuple] = {}
        self._activations: dict[tuple, tuple] = {}
        self._layer_activations: dict[tuple, dict] = {}
        self._layer_times: dict[tuple, dict] = {}
        self._shard_params: dict[tuple, int] = {}
        self._checkpoints: dict[tuple, tuple[ClusterShape, object]] = {}
        self._steady: dict[tuple, float] = {}
        self._stage_sums: dict[tuple, tuple] = {}
        self._dp_costs: dict[tuple, tuple] = {}
        self._buckets: dict[tuple, tuple] = {}
        self._bucket_fp8: dict[int, tuple[int, ...]] = {}  # id of stage_buckets' tuple -> per bucket FP8 weights
        self.gpu = None
        """The GPU preset of the cluster design (set by the first :meth:`topology`)."""

    def _shm_after_backward(self, c: Candidate) -> bool:
        """As predict (:func:`dpsim.predict.run.shm_after_backward`): plain DDP over NCCL's SHM
        transport all-reduces after backward unless the topology says it overlaps."""
        if c.strategy != "ddp" or max(c.tp, c.pp, c.cp, c.ep, c.etp) > 1:
            return False
        topo = self.topology(c.gpus)
        return ddp_allreduce_after_backward(topo.spec.node, topo.gpus_per_node)

    def topology(self, gpus: int) -> Topology:
        """The job's cluster at ``gpus`` GPUs."""
        topo = self._topologies.get(gpus)
        if topo is None:
            topo = self._topologies[gpus] = resolve_topology(dataclasses.replace(
                self.base, gpus=gpus, tp=1, pp=1, dp=None, global_batch=None, grad_accum=1, schedule="1f1b",
                virtual_stages=1, stage_layers=None, recompute="off", sequence_parallel=False,
                tp_comm_overlap="backward", tp_across_network=False))
            if self.gpu is None:
                self.gpu = get_gpu(topo.spec.gpu)
                if self.base.calibration.profile is not None:
                    # As predict's device: the profile's measured matmul rates and copy bandwidth where it
                    # measured them (plan costed the preset's: 0.59x its simulation at a measured 120 TFLOP/s).
                    self.gpu = check_cpu_compute(self.base, self.profile, calibrated_device(self.profile, self.gpu))
                # As predict does: --fp8 (or bf16) on a GPU without those tensor cores is the flag's error,
                # not a missing 'float8' rate found while costing the first layout.
                check_precision_on_gpu(self.precision, self.gpu)
                check_attention_kernel_on_gpu(self.base.execution.attention_kernel, self.gpu)
        return topo

    def collectives(self, gpus: int, tp: int, pp: int, dp: int, cp: int = 1, ep: int = 1,
                    etp: int = 1, zero_group: int | None = None) -> GroupCollectives:
        """The layout's communicators, their models shared with every other layout of the same shapes
        (``zero_group``: HSDP's shard group under tp/pp, adding its ``zero`` and ``zrep`` communicators)."""
        key = (gpus, tp, pp, dp, cp, ep, etp, zero_group)
        gc = self._collectives.get(key)
        if gc is None:
            shape = LayoutShape(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, etp=etp, zero_group=zero_group,
                                experts=self.model.moe is not None)
            gc = self._collectives[key] = GroupCollectives(self.topology(gpus), self.factory(gpus), layout=shape,
                                                           contiguous=self.contiguous(gpus))
        return gc

    def contiguous(self, gpus: int) -> bool:
        """Whether the candidates on ``gpus`` GPUs place their groups contiguously on the racks (the base's
        ``--rack-placement contiguous``, where it can change anything: :func:`~dpsim.predict.run.rack_placement_unused`)."""
        return (self.base.cluster.rack_placement == "contiguous"
                and rack_placement_unused(self.topology(gpus)) is None)

    def factory(self, gpus: int):
        """The job's collective-model factory on ``gpus`` GPUs (predict's
        :func:`~dpsim.predict.run.build_collectives`, ``--degrade`` included), memoised by communicator
        shape (:meth:`_shared`); built once per GPU count: it depends on the job, not the layout, and
        building it checks the degraded links' names against that cluster."""
        make = self._factories.get(gpus)
        if make is None:
            try:
                # The factory costs one communicator at a time, whatever the placement (the groups are placed
                # by GroupCollectives): built from an aligned base, predict's refusal of contiguous for data
                # parallelism alone (no layout here) does not apply to it.
                inner = build_collectives(dataclasses.replace(self.base, rack_placement="aligned"),
                                          self.topology(gpus), profile=self.profile, degradations=self.degradations)
            except ConfigError as exc:
                if not str(exc).startswith("--degrade:") or " names " not in str(exc):
                    raise
                # A node or NIC the smallest of several GPU counts does not have: name the count.
                raise ConfigError(f"{exc} (on --gpus {gpus}); name links that every searched GPU count has") \
                    from None
            make = self._factories[gpus] = self._shared(inner._make)
        return make

    def _shared(self, make):
        """``make`` (the factory of the job's models) memoised by communicator shape, across layouts."""
        def shared(comm: Communicator) -> CollectiveModel:
            k = (comm.topology, comm.concurrent)
            model = self._models.get(k)
            if model is None:
                model = self._models[k] = make(comm)
            return model
        return shared

    def hybrid_collectives(self, gpus: int, shard_group: int) -> GroupCollectives:
        """HSDP's communicators on ``gpus`` GPUs of data parallelism alone, as ``predict --strategy
        fsdp-hybrid --zero-group`` builds them (:func:`~dpsim.predict.run.build_collectives`): ``intra``
        the shard group of consecutive ranks, ``inter`` its replica group."""
        key = ("hybrid", gpus, shard_group)
        gc = self._collectives.get(key)
        if gc is None:
            gc = self._collectives[key] = GroupCollectives(self.topology(gpus), self.factory(gpus),
                                                           shard_group=shard_group, contiguous=self.contiguous(gpus))
        return gc

    def cost(self, gc: GroupCollectives, group: str, op: str, size: float) -> float:
        """A collective's time on ``gc``'s communicator ``group`` (memoised)."""
        # Memoised by the communicator's value (its cluster and concurrency), shared between layouts;
        # that value, a tree of frozen dataclasses hashed field by field on every lookup, is numbered
        # once per communicator (``gc`` is cached for the planner's life, :meth:`collectives`, so its
        # id is stable): DeepSeek-V3 on 16,384 GPUs costs ~290,000 collectives.
        table = self.cost_table(gc, group, op)
        t = table.get(size)
        if t is None:
            t = table[size] = gc.group(group).time(op, size).time_s
        return t

    def cost_table(self, gc: GroupCollectives, group: str, op: str) -> dict[float, float]:
        """The memo of :meth:`cost` for one communicator's value and op: bytes -> seconds (a hot loop
        looks sizes up in it directly, falling back on :meth:`cost` for a new one)."""
        key = (id(gc), group, op)
        table = self._cost_tables.get(key)
        if table is None:
            index = self._comm_index.get((id(gc), group))
            if index is None:
                comm = gc.communicator(group)
                index = self._comm_index[(id(gc), group)] = self._comm_values.setdefault(
                    (comm.topology, comm.concurrent, comm.copies), len(self._comm_values))
            table = self._cost_tables[key] = self._costs.setdefault((index, op), {})
        return table

    def experts(self, c: Candidate) -> tuple[ExpertSplit, object]:
        """How ``c``'s ranks hold and run the routed experts, and the busiest rank's load
        (``predict``'s :func:`~dpsim.predict.layout.expert_split` and ``expert_load``, cached). The
        closed form takes the load one sample per micro-batch routes, the most uneven, for every
        micro-batch: a shard (thousands of ops) per micro-batch would be most of the search, and
        the verified candidates are simulated with their own."""
        if self.model.moe is None:
            return NO_EXPERT_SPLIT, None
        key = (c.tp, c.cp, c.ep, c.etp)
        hit = self._splits.get(key)
        if hit is None:
            cfg = dataclasses.replace(c, micro_batch=1).config(self.base)
            hit = self._splits[key] = (expert_split(cfg, self.model), expert_load(cfg, self.model))
        return hit

    def cps(self, cps=None) -> Sequence[int]:
        """The context-parallel sizes searched: ``cps``, else :data:`DEFAULT_CPS` for a sequence of
        :data:`CP_MIN_TOKENS` or more, else 1."""
        return cps or (DEFAULT_CPS if (self.model.tokens_per_sample or 0) >= CP_MIN_TOKENS else (1,))

    def context(self, cp: int) -> ContextParallel:
        """The job's context parallelism at ``cp`` ranks."""
        return ContextParallel(cp=cp, comm=self.cp_comm if cp > 1 else "p2p",
                               balanced=self.cp_balance or cp == 1)

    def tables(self, c: Candidate, gc: GroupCollectives, zero3=None) -> _Tables:
        """Per-layer work (cached); ``zero3``: DeepSpeed ZeRO-3's gradient passes on the compute stream
        (:func:`~dpsim.predict.layout.zero3_layout_passes`, :meth:`zero3_passes`), as predict charges them."""
        tp, micro_batch, sp, recompute = c.tp, c.micro_batch, c.sequence_parallel, c.recompute
        split, load = self.experts(c)
        comms = tuple((g, gc.communicator(g).topology, gc.communicator(g).concurrent, gc.communicator(g).copies)
                      for g, on in (("cp", c.cp > 1), ("ep", c.ep > 1), ("etp", c.etp > 1)) if on)
        precision = self.strategy_precision(c.strategy)
        key = (tp, micro_batch, sp, recompute, id(gc.group("tp")), c.grad_accum_fusion, c.cp, split, comms,
               id(zero3), precision)
        tab = self._tables.get(key)
        if tab is not None:
            return tab
        tpm = self.tp_model(tp, sp, c.cp, split)
        ckey = (tp, micro_batch, sp, c.cp, split, precision)
        compute = self._compute.get(ckey)
        if compute is None:
            cfg = dataclasses.replace(self.base, micro_batch=micro_batch)
            # One memo of layer times per micro-batch and precision: the shards of every split share their dense
            # layers.
            compute = self._compute[ckey] = shard_compute(tpm, self.gpu, cfg, precision,
                                                          memo=self._layer_times.setdefault((micro_batch, precision),
                                                                                            {}), profile=self.profile)
        ctx = self.context(c.cp)
        layout = Layout(tp=tp, micro_batch=micro_batch, sequence_parallel=sp, recompute=recompute,
                        tp_comm_overlap=self.tp_comm_overlap if tp > 1 else "backward",
                        grad_accum_fusion=c.grad_accum_fusion, cp=c.cp, cp_comm=ctx.comm, cp_balance=ctx.balanced,
                        ep=c.ep, etp=c.etp)
        act_bytes = 4 if self.precision.compute_dtype == "float32" else 2
        # Op-level modes re-run a share of each layer's forward, as predict costs them.
        shares = recompute_shares(tpm.spec, CheckpointPolicy(mode=recompute, every=self.base.execution.recompute_every),
                                  gpu=self.gpu, precision=precision, micro_batch=micro_batch) \
            if recompute in OP_RECOMPUTES else None
        accumulate = () if layout.grad_accum_fusion else \
            gradient_accumulation_s(tpm, self.gpu, self.precision.grad_bytes)

        def cost(group: str, op: str, size: float) -> float:
            return self.cost(gc, group, op, size)

        tp_tables: dict[str, dict[float, float]] = {}

        def tp_cost(op: str, size: float) -> float:
            # Every layer asks: the memo's table of each op looked up directly (:meth:`cost_table`).
            table = tp_tables.get(op)
            if table is None:
                table = tp_tables[op] = self.cost_table(gc, "tp", op)
            t = table.get(size)
            return self.cost(gc, "tp", op, size) if t is None else t

        # --degrade: the slowest link of each class the all-to-all crosses paces it (predict's expert_a2a_s).
        ep_classes = degraded_classes(gc, "ep") if c.ep > 1 and self.degradations else None
        a2a_of: dict[float, float] = {}

        def ep_cost(size: float) -> float:
            # Every MoE layer of a model sends the same bytes: one costing per size, not per layer
            # (DeepSeek-V3's 58 MoE layers cost ~24,000 all-to-alls per search otherwise).
            t = a2a_of.get(size)
            if t is None:
                t = a2a_of[size] = expert_a2a_s(gc.communicator("ep"), size, load, self.base.parallelism.moe_a2a,
                                                self.model.moe, self.moe_node_limit, class_factors=ep_classes)
            return t

        work = layer_work(tpm, compute, layout, tp_cost=tp_cost,
                          act_element_bytes=act_bytes, overlap_slowdown=self.base.calibration.overlap_slowdown,
                          accumulate_s=accumulate,
                          cp_cost=(lambda op, size: context_comm_s(gc, cost, op, size)) if c.cp > 1 else None,
                          cp_model=self.model if c.cp > 1 else None,
                          ep_cost=ep_cost if c.ep > 1 else None,
                          etp_cost=(lambda size: expert_tp_s(cost, size, load, c.etp)) if c.etp > 1 else None,
                          gpu=self.gpu, recompute_share=shares,
                          cached_fp8_weights=caches_fp8_weights(precision.fp8),
                          sharding_copy_s=zero3.copy_s if zero3 is not None else (), fp8=precision.fp8)
        tab = self._tables[key] = _Tables(work)
        return tab

    def zero3_passes(self, c: Candidate, layout: Layout):
        """DeepSpeed ZeRO-3 over a tensor/context layout's replicas: what backward gathers again and the
        gradient passes (``predict``'s :func:`~dpsim.predict.layout.zero3_layout_passes`, cached by shape;
        kept for the planner's life, so its id keys :meth:`tables`)."""
        split = self.experts(c)[0]
        key = ("zero3", c.tp, c.sequence_parallel, c.cp, split, layout.recompute, layout.recompute_every,
               layout.grad_group, layout.micro_batches)
        hit = self._steady.get(key)
        if hit is None:
            hit = self._steady[key] = zero3_layout_passes(self.tp_model(c.tp, c.sequence_parallel, c.cp, split),
                                                          layout, self.gpu, self.strategy_precision(c.strategy))
        return hit

    def units(self):
        """The model's wrap units (``--fsdp-unit``), as the data-parallel path's ZeRO-3/FSDP shard and gather
        them, with parameters only; and each one's name per model layer (cached)."""
        hit = self._steady.get("units")
        if hit is None:
            units = wrap_units(self.model, self.base.parallelism.fsdp_unit)
            names = [""] * len(self.model.layers)
            for u in units:
                for i in u.layers:
                    names[i] = u.name
            hit = self._steady["units"] = (tuple(u for u in units if u.params and u.numel), names)
        return hit

    def unit_dp(self, c: Candidate, m: int, forward_s: float, backward_s: float) -> tuple[float, float, float]:
        """Data parallelism alone under ``zero3``, ``fsdp`` or ``fsdp-hybrid``: ``(exposed collectives, optimizer
        share of the parameters, the strategy's copy passes)`` in closed form from the step ``predict``'s unit
        program plays (:func:`~dpsim.strategies.sharded._unit_program`): each micro-batch gathers every unit for
        its forward and again for its backward (FSDP keeps the root; DeepSpeed re-gathers only what its
        reuse distance freed, :func:`~dpsim.strategies.deepspeed_fetch.backward_gather_numel`) and
        reduce-scatters each unit's gradient (every micro-batch, or at the last one under FSDP1's
        ``no_sync``, :func:`~dpsim.strategies.registry.unsharded_accumulation`), HSDP then all-reducing the
        gradient shard over its replica group (``inter``) after each, MiCS (``zero3`` with a shard group) once a
        step, at the last micro-batch. All of it on one stream beside the compute
        (``forward_s`` and ``backward_s`` per micro-batch and the memory-bound passes around the collectives
        that the program charges to the compute stream, :func:`~dpsim.strategies.sharded.unit_copies`, returned
        as seconds per step): the step waits for the first unit's gather, the last reduction (the first unit's,
        after the backward) and whatever the stream needs beyond the compute of each phase. Forward and
        backward are costed apart: a forward's gathers run at most one unit ahead of it (``limit_all_gathers``)
        and queue behind the previous backward's reductions in the one stream, so a forward with compute to
        spare cannot hide a backward's excess (HSDP's slow replica all-reduces beside its fast gathers)."""
        units, names = self.units()
        hybrid = c.strategy == "fsdp-hybrid"
        # MiCS: zero3's passes on the shard group; its gradient shards all-reduced across the groups once a step.
        mics = c.strategy == "zero3" and c.zero_group is not None
        world = zero_shard_group(c.strategy, c.dp, self.topology(c.gpus).gpus_per_node, c.zero_group)
        if hybrid or mics:
            gc, group = self.hybrid_collectives(c.gpus, world), "intra"
        else:
            gc, group = self.collectives(c.gpus, 1, 1, c.dp), "dp"
        g = self.precision.grad_bytes
        if c.strategy == "zero3":
            recomputed = [u.layers for u in units if not u.is_root] if c.recompute == "full" else []
            again = backward_gather_numel(self.model, names, recomputed)
            bwd = {u.name: again.get(u.name, 0) for u in units}
        else:
            bwd = {u.name: 0 if u.is_root else u.numel for u in units}
        # FSDP2's float8 all-gather moves the FP8 linears' weights in one byte (as predict's gathered_weight_bytes).
        recipe = self.gather_fp8(c.strategy, False)
        fp8 = {u.name: layers_fp8_weight_numel(self.model, u.layers, recipe) if recipe is not None else 0 for u in units}
        gather_fwd = [self.cost(gc, group, "all_gather", self._gather_bytes(u.numel, fp8[u.name], recipe))
                      for u in units]
        gather_bwd = sum(self.cost(gc, group, "all_gather",
                                   self._gather_bytes(bwd[u.name], fp8[u.name] if bwd[u.name] == u.numel else 0,
                                                      recipe))
                         for u in units if bwd[u.name] > 0)
        replicas = c.dp // world
        reduce = [self.cost(gc, group, "reduce_scatter", u.numel * g)
                  + (self.cost(gc, "inter", "all_reduce", -(-u.numel // world) * g) if hybrid and replicas > 1
                     else 0.0) for u in units]
        # MiCS's second hop waits for the accumulation boundary (allreduce_mics_shard_grads): once a step, each
        # unit's right behind its last reduce-scatter, as predict's program queues it.
        second = [self.cost(gc, "inter", "all_reduce", -(-u.numel // world) * g) if mics and replicas > 1 else 0.0
                  for u in units]
        p = self.base.parallelism
        sharded_accumulation = not unsharded_accumulation(c.strategy, m, p.fsdp_version, p.fsdp_accumulate)
        syncs = m if sharded_accumulation else 1
        # The program's copy passes (the same per-unit costing): around every gather (forward, and the
        # backward's re-gathers), in every backward, around each reduce-scatter, and each later micro-batch's
        # reduce-scatter adding into the gradient shard.
        copies = self.unit_copies(c.strategy, world)
        copy_fwd = sum(copies.gather.get(u.name, 0.0) for u in units)
        copy_bwd = sum(copies.gather.get(u.name, 0.0) for u in units if bwd[u.name] > 0) + sum(copies.backward.values())
        # A reducing backward's passes; under sharded accumulation all but the step's first add into the shard.
        copy_sync = sum(copies.scatter.values()) + (
            (m - 1) / m * sum(copies.accumulate.values()) if sharded_accumulation else 0.0)
        copies_s = m * (copy_fwd + copy_bwd) + syncs * copy_sync
        head, tail = (gather_fwd[0], reduce[0] + second[0]) if units else (0.0, 0.0)
        # Per micro-batch and phase, its collectives beside its compute: every forward gathers (the step's
        # first waits for the first unit's), every backward re-gathers, and the reducing ones (the last
        # only, under no_sync) reduce too, the last reduction left after the step's last backward.
        fwd_comm, fwd_compute = sum(gather_fwd), forward_s + copy_fwd
        sync_comm, sync_compute = gather_bwd + sum(reduce), backward_s + copy_bwd + copy_sync
        # MiCS's second hop rides on the step's last reducing backward only.
        last_comm = sync_comm + sum(second)
        phase = self._phase_exposed
        exposed = (head + phase(fwd_comm - head, fwd_compute) + (m - 1) * phase(fwd_comm, fwd_compute)
                   + tail + phase(last_comm - tail, sync_compute) + (syncs - 1) * phase(sync_comm, sync_compute)
                   + (m - syncs) * phase(gather_bwd, backward_s + copy_bwd))
        return exposed, sum(-(-u.numel // world) for u in units), copies_s

    def _phase_exposed(self, comm_s: float, compute_s: float) -> float:
        """``comm_s`` of collectives on one stream beside ``compute_s`` of compute, both starting together:
        how much longer than the compute the two take. The engine runs compute ``1 + s`` times slower
        beside a collective (``overlap_slowdown``), so the compute loses
        :func:`~dpsim.strategies.layout.overlap_contention` per second of collective beside it, unless the
        collectives outlast it anyway."""
        if comm_s <= 0.0:
            return 0.0
        return max(comm_s - compute_s, overlap_contention(self.base.calibration.overlap_slowdown) * comm_s)

    def unit_copies(self, strategy: str, world: int):
        """Per wrap unit, the copy passes ``strategy`` runs over ``world`` shard ranks (predict's
        :func:`~dpsim.strategies.sharded.unit_copies`, on the job's GPU; cached)."""
        p = self.base.parallelism
        key = ("copies", strategy, world, p.fsdp_version)
        hit = self._steady.get(key)
        if hit is None:
            units, _ = self.units()
            shard = {u.name: unit_shard_numel(u.params, world, p.fsdp_version) for u in units}
            gathered = {u.name: layers_gathered_bytes(self.model, u.layers, shard[u.name] * world,
                                                      self.precision.weight_bytes, self.precision.fp8)
                        for u in units}
            hit = self._steady[key] = unit_copies(strategy, units, shard, world, precision=self.precision,
                                                  gpu=self.gpu, fsdp_version=p.fsdp_version, gathered=gathered)
        return hit

    def flat_dp(self, c: Candidate, gc: GroupCollectives, m: int, backward: Sequence[float]) -> tuple[float, float]:
        """Data parallelism alone under ``ddp`` or DeepSpeed's ``zero1``: ``(exposed seconds, the strategy's
        own compute per step)`` in closed form from the step predict's program plays. ``ddp``
        (:func:`~dpsim.strategies.ddp.ddp_program`): DDP's buckets (:func:`~dpsim.strategies.ddp_costs.ddp_buckets`)
        all-reduced as the last of ``m`` backwards (``backward``: one micro-batch's, per model layer) fills
        them, its own work (:func:`~dpsim.strategies.ddp_costs.ddp_costs`: copies into the buckets during that
        backward, the forward wrappers, the buffer broadcast) on the compute stream and its copies back after
        the last all-reduce. ``zero1`` (:func:`~dpsim.strategies.zero._zero12_program`): DeepSpeed's
        5e8-element buckets (:func:`~dpsim.strategies.zero.deepspeed_buckets`) reduce-scattered, the optimizer,
        then the whole updated 16-bit buffer all-gathered before the step ends (exposed). Each bucket leaves
        once the backward has passed the layer of its first parameter (the rule of
        :func:`~dpsim.strategies.program._bucket_launch_points`; DeepSpeed's buckets are few and large, so
        when they leave matters), one after the other on one stream; the backward runs slower beside them
        (``overlap_contention``)."""
        overlap = c.overlap(self.base) and not self._shm_after_backward(c)
        key = ("flat", id(gc), c.strategy, c.overlap(self.base))
        hit = self._steady.get(key)
        if hit is None:
            options = self.base.gradients.ddp_options()
            cap = self.base.gradients.bucket_cap_mb
            g, w = self.precision.grad_bytes, self.precision.weight_bytes
            owner = self.model.layer_index_by_param()
            gather = compute = after = before = per_mb = 0.0
            if c.strategy == "ddp":
                plan = ddp_buckets(self.model, self.precision.grad_dtype, options, bucket_cap_mb=cap)
                costs = ddp_costs(self.model, plan, self.gpu, self.precision.grad_dtype, options)
                ops = [sum(self.cost(gc, "dp", "all_reduce", st.size_bytes) for st in h.stages if st.size_bytes > 0)
                       for h in costs.hooks]
                layers = [min(owner[n] for n in bk.param_names) for bk in plan.buckets]
                # In the synchronising backward: the copies in and the hook's kernels; each micro-batch's
                # forward wrapper; before the first forward the buffers' broadcast and copies.
                compute = sum(costs.copy_in_s.values()) + costs.hooks_s + costs.unused_search_s
                before = (costs.buffer_flatten_s + costs.buffer_unflatten_s
                          + (self.cost(gc, "dp", "broadcast", costs.buffer_bytes) if costs.buffer_bytes > 0 else 0.0))
                after = sum(costs.copy_out_s)
                per_mb = costs.pre_forward_s
            else:
                order = list(self.model.grad_ready_params) if c.overlap(self.base) else list(self.model.params)
                buckets = deepspeed_buckets(order, deepspeed_reduce_bucket_elements(cap, g))
                padded = deepspeed_partition_numel(self.model.param_count, c.dp) * c.dp
                sizes = [sum(q.numel for q in bk) for bk in buckets]
                sizes[-1] += padded - self.model.param_count
                ops = [self.cost(gc, "dp", "reduce_scatter", n * g) for n in sizes]
                layers = [min(owner[q.name] for q in bk) for bk in buckets]
                # FP8 primary weights gather the FP8 linears' weights in FP8 (predict's zero1 program).
                gather = self.cost(gc, "dp", "all_gather", layers_gathered_bytes(
                    self.model, range(len(self.model.layers)), padded, w, self.precision.fp8))
            hit = self._steady[key] = (tuple(zip(layers, ops)), compute, before, after, gather, per_mb)
        buckets, compute, before, after, gather, per_mb = hit
        total = sum(op for _, op in buckets)
        n = len(self.model.layers)
        hide = sum(backward) + compute
        if overlap and len(backward) == n and hide > 0:
            # Backward runs from the last layer down: when it has passed each layer (DDP's copies spread alike).
            done, elapsed = [0.0] * n, 0.0
            for i in range(n - 1, -1, -1):
                elapsed += backward[i]
                done[i] = elapsed
            scale = hide / elapsed if elapsed > 0 else 1.0
            contention = overlap_contention(self.base.calibration.overlap_slowdown)

            def stream_end(stretch: float) -> float:
                t = 0.0
                for layer, op in buckets:
                    t = max(t, done[layer] * scale * stretch) + op
                return t

            # The backward slowed by the collectives it runs beside (those done before it ends), then the
            # buckets leaving from the slowed backward.
            beside = total - max(0.0, stream_end(1.0) - hide)
            slowed = hide + contention * beside
            exposed = max(stream_end(slowed / hide), slowed) - hide
        elif overlap:
            last_one = buckets[-1][1] if buckets else 0.0
            exposed = last_one + self._phase_exposed(total - last_one, hide)
        else:
            exposed = total
        return exposed + before + after + gather, compute + m * per_mb

    def _stream_exposed(self, head: float, tail: float, total: float, compute_s: float) -> float:
        """Collectives of ``total`` seconds on one stream beside ``compute_s`` of compute, the first
        (``head``) before it and the last (``tail``) after it: what the step waits for, with the compute
        the rest slows while hidden (``overlap_slowdown``: the engine runs compute ``1 + s`` times slower
        beside a collective, :func:`~dpsim.strategies.layout.overlap_contention` per hidden second)."""
        rest = max(0.0, total - head - tail)
        hidden = min(rest, compute_s)
        contention = overlap_contention(self.base.calibration.overlap_slowdown)
        # Whichever is longer: the stream beyond the compute, or what the compute loses beside it. A stream longer
        # than the slowed compute paces the step alone (fsdp + ep under tp 2, the experts whole on each tp rank and
        # gathered over a NIC each: charging both read 1.10x the simulation).
        return head + tail + max(rest - hidden, contention * hidden)

    def reshard_dp(self, gc: GroupCollectives, tab: _Tables, assignment, c: Candidate, layout: Layout,
                   zero3, compute_s: float) -> tuple[float, float]:
        """A tensor/context layout without pipeline stages whose replicas reshard after each forward
        (``zero3``, ``fsdp``: :func:`~dpsim.strategies.layout.reshards_after_forward`), as predict's pipeline
        program plays them: each micro-batch all-gathers every bucket for its forward and again (``zero3``:
        what DeepSpeed's reuse distance freed) for its backward, and reduce-scatters its gradients, on the
        one ``dp`` stream beside ``compute_s`` per micro-batch. ``(reductions left after the last backward,
        gathers the forwards wait for)``: the last bucket's reduce-scatter; the first bucket's gather and
        whatever the stream needs beyond the compute."""
        m = layout.micro_batches
        # Under expert parallelism the routed experts in buckets of their own on their shard group (fsdp's "edp",
        # HSDP's "ezero", each reduce-scatter's shard then all-reduced across their replicas on "ezrep"), as
        # predict's program; none when each rank holds its experts whole and unreplicated (edp 1).
        eshard, ereplicas = layout.expert_shard_group, layout.expert_replicas
        split = layout.experts_apart and self.model.moe is not None
        groups = (("dp", "edp") if eshard * ereplicas > 1 else ("dp",)) if split else ("all",)
        buckets = self.stage_buckets(tab, assignment, 0, bucket=self.bucket(layout.grad_group),
                                     overlap=True, groups=groups)
        g = self.precision.grad_bytes
        numel = sum(b[2] for b in buckets)
        share = 1.0
        if zero3 is not None and numel:
            share = sum(zero3.backward_gather_numel) / numel
        shard, replicas = layout.shard_group, layout.replicas
        comm = "zero" if replicas > 1 else "dp"
        of = {"edp": ("ezero" if ereplicas > 1 else "edp", "ezrep", eshard)}
        place = [of.get(b[0], (comm, "zrep", shard)) for b in buckets]
        # An expert shard group of one rank gathers and reduce-scatters nothing.
        moved = [q[2] > 1 for q in place]
        # FSDP2's float8 all-gather moves the FP8 linears' weights in one byte (gathered_weight_bytes, as
        # predict's DataParallelPlan.gather_bytes).
        recipe = self.gather_fp8(c.strategy, True)
        fp8 = self._bucket_fp8[id(buckets)]
        gathers = [self.cost(gc, q[0], "all_gather", self._gather_bytes(b[2], f, recipe)) if x else 0.0
                   for b, f, q, x in zip(buckets, fp8, place, moved)]
        again = sum(self.cost(gc, q[0], "all_gather", self._gather_bytes(b[2] * share, f * min(1.0, share), recipe))
                    for b, f, q, x in zip(buckets, fp8, place, moved) if x) if share > 0 else 0.0
        # HSDP: each reduce-scatter's shard then all-reduced across the replica groups, behind it.
        reduces = [(self.cost(gc, q[0], "reduce_scatter", b[2] * g) if x else 0.0)
                   + (self.cost(gc, q[1], "all_reduce", -(-b[2] // q[2]) * g) if replicas > 1 else 0.0)
                   for b, q, x in zip(buckets, place, moved)]
        if not buckets:
            return 0.0, 0.0
        total = m * (sum(gathers) + again + sum(reduces))
        # Buckets are in forward order: the first is gathered first, its reduction leaves last.
        head, tail = gathers[0], reduces[0]
        return tail, self._stream_exposed(head, 0.0, total - tail, m * compute_s)

    def candidates(self, gpus: int, *, tps=None, pps=None, strategies=None, micro_batches=None, recomputes=None,
                   schedules=None, sequence_parallel=None, global_batch: int, cps=None,
                   eps=None, etps=None) -> tuple[list[Candidate], dict]:
        """Every layout of the search space on ``gpus`` GPUs, and how many were refused by placement."""
        topo = self.topology(gpus)
        domain = nvlink_domain_gpus(topo)
        # A module without repeated blocks (an MLP of two attributes) splits into no stages, but runs whole on
        # each GPU: it had no candidate at all, not even --pp 1 ("no layout ... exists"), while predict ran it.
        n_blocks = max(self.n_blocks, 1)
        moe = self.model.moe
        refused = 0
        no_fp8_params = self.no_fp8_params
        out: list[Candidate] = []
        tp_values = tps or [t for t in _divisors(gpus) if t <= (gpus if self.tp_across_network else domain)]
        for tp in tp_values:
            if gpus % tp:
                refused += 1
                continue
            if tp > 1:
                try:
                    check_tp(self.model, tp)
                except ConfigError:
                    refused += 1
                    continue
                if self.heads is not None and any(h % tp for h in self.heads):
                    refused += 1
                    continue
            for cp in self.cps(cps):
                if (gpus // tp) % cp:
                    continue
                try:
                    check_context(self.model, self.context(cp), tp)
                except ConfigError:
                    refused += 1
                    continue
                # Any stage count up to the blocks: the split need not divide (balanced_counts).
                for pp in (pps or [p for p in _divisors(gpus // (tp * cp)) if p <= n_blocks]):
                    if (gpus // (tp * cp)) % pp:
                        continue
                    dp = gpus // (tp * cp * pp)
                    if pp > n_blocks:
                        refused += 1
                        continue
                    # Expert parallelism carved out of tp x cp x dp, as predict requires.
                    ep_values = (eps or _divisors(moe.experts)) if moe is not None else (1,)
                    # --etp left out: predict's default (tp with ep 1, else 1); a dense model's 1.
                    experts = [(ep, etp) for ep in ep_values
                               for etp in ((etps or (default_etp(tp=tp, ep=ep),)) if moe is not None else (1,))]
                    for ep, etp in experts:
                        if (tp * cp * dp) % (ep * etp):
                            continue
                        try:
                            if moe is not None:
                                check_experts(self.model, _ExpertAsk(tp=tp, cp=cp, ep=ep, etp=etp))
                            check_layout_placement(topo, LayoutShape(tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, etp=etp,
                                                                     experts=moe is not None),
                                                   tp_across_network=self.tp_across_network,
                                                   tp_comm_overlap=self.tp_comm_overlap)
                        except ConfigError:
                            refused += 1
                            continue
                        out += self._variants(gpus, tp, cp, pp, dp, ep, etp, global_batch=global_batch,
                                              strategies=strategies, micro_batches=micro_batches,
                                              recomputes=recomputes, schedules=schedules,
                                              sequence_parallel=sequence_parallel)
        return out, {"refused_by_placement": refused, "no_fp8_params": self.no_fp8_params - no_fp8_params}

    def _variants(self, gpus: int, tp: int, cp: int, pp: int, dp: int, ep: int, etp: int = 1, *, global_batch: int,
                  strategies,
                  micro_batches, recomputes, schedules, sequence_parallel) -> list[Candidate]:
        """The strategies, micro-batches, recomputations, sequence parallelism and schedules of one shape."""
        out = []
        sharded = tp * cp * pp * ep * etp > 1
        # Megatron-Core runs an MoE's router and all-to-all on the sequence-parallel shard.
        sps = (sequence_parallel,) if sequence_parallel is not None else \
            ((tp > 1,) if self.model.moe is not None else (True, False))
        for mb in (micro_batches or DEFAULT_MICRO_BATCHES):
            if global_batch % (mb * dp):
                continue
            m = global_batch // (mb * dp)
            for strategy, zero_group in self.strategy_variants(gpus, dp=dp, cp=cp, pp=pp, ep=ep, etp=etp, tp=tp,
                                                               sharded=sharded, strategies=strategies):
                for recompute in (recomputes or DEFAULT_RECOMPUTES):
                    if not sharded and recompute != "off" and recompute != "full":
                        continue  # the layout path's modes
                    if recompute == "moe" and self.model.moe is None:
                        continue
                    if recompute != "off" and not self.n_blocks:
                        continue  # predict: "--recompute full: model ... has no block units to checkpoint"
                    for sp in sps:
                        if sp and tp == 1:
                            continue
                        if tp > 1 and not sp and self.tp_comm_overlap == "async":
                            continue  # async TP decomposes sequence parallelism's collectives only
                        moe_dual = self.model.moe is not None and ep > 1
                        for schedule, v in self._schedules(pp, m, self.n_blocks, schedules, moe_dual=moe_dual):
                            # Past predict's simulation limits (PredictConfig refuses them: the engine plays
                            # every micro-batch): plan --global-batch 1048576 on 16 GPUs ended in predict's
                            # "--global-batch ... (raise --micro-batch or lower --steps)", flags plan has not.
                            # A layout whose prediction extrapolates its steady state (a few counts simulated,
                            # dpsim/predict/extrapolate.py) is kept past them, as PredictConfig takes it.
                            chunks = 2 if schedule == "dualpipe" else v
                            if (m * self.base.workload.steps > MAX_SIMULATED_MICRO_BATCHES if not sharded
                                    else pp * chunks * m > MAX_PIPELINE_SLOTS) and extrapolated_counts(
                                        m, layout=sharded, pp=pp, schedule=schedule, virtual_stages=v,
                                        steps=self.base.workload.steps,
                                        input_rate=bool(self.base.workload.input_samples_per_s)) is None:
                                self.too_long += 1
                                continue
                            # DualPipe pairs a forward chunk with a backward one to hide the expert-parallel
                            # all-to-alls (arXiv:2412.19437 Sec. 3.2.1): searched for an MoE with ep > 1, it
                            # runs them overlapped (predict's --moe-a2a-overlap with --schedule dualpipe).
                            overlap = ep > 1 and (
                                (self.moe_a2a_overlap and (pp == 1 and m > 1 or schedule in A2A_OVERLAP_SCHEDULES))
                                or (schedule == "dualpipe" and self._dual_default(schedules)))
                            if self.base.execution.fp8_params and not self._holds_fp8_params(strategy,
                                                                                             layout=sharded):
                                # predict's own rule (one validator), with the layout predict's command for it
                                # runs: the search ranked ddp, ZeRO-3/MiCS and FSDP1 layouts predict refuses.
                                self.no_fp8_params += 1
                                continue
                            out.append(Candidate(gpus=gpus, tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, etp=etp,
                                                 experts=self.model.moe is not None, strategy=strategy,
                                                 micro_batch=mb, recompute=recompute, schedule=schedule,
                                                 virtual_stages=v, sequence_parallel=sp, global_batch=global_batch,
                                                 grad_accum_fusion=self.grad_accum_fusion or not sharded,
                                                 tp_comm_overlap=self.tp_comm_overlap,
                                                 tp_across_network=self.tp_across_network, cp_comm=self.cp_comm,
                                                 cp_balance=self.cp_balance or cp == 1,
                                                 moe_a2a_overlap=overlap,
                                                 moe_node_limit=self.moe_node_limit if ep > 1 else None,
                                                 zero_group=zero_group))
        return out

    def strategy_variants(self, gpus: int, *, dp: int, cp: int, pp: int, ep: int, etp: int, sharded: bool, tp: int = 1,
                          strategies) -> list[tuple[str, int | None]]:
        """The data-parallel strategies of one shape, each with its shard group (``None`` but for
        ``fsdp-hybrid`` and MiCS), where they apply as ``predict`` runs them: none but ``ddp`` without data-parallel
        replicas; ``zero3`` without pipeline stages or expert parallelism (DeepSpeed's ``PipelineEngine``
        asserts ZeRO stage below 2, microsoft/DeepSpeed ``deepspeed/runtime/pipe/engine.py``; ZeRO-3 with
        experts is not modelled, as ``predict --strategy zero3 --ep`` refuses), with data parallelism alone
        also as MiCS over each shard group :meth:`shard_groups` gives; ``fsdp-hybrid`` with data
        parallelism alone, once per shard group :meth:`shard_groups` gives, and, when ``strategies`` names it,
        under ``--tp``/``--pp``/``--cp``/``--ep`` too (torchtitan's ``dp_replicate x dp_shard x cp x tp x pp``, ep
        carved out of each shard group), its collectives in :meth:`stage_dp` and :meth:`reshard_dp`."""
        out: list[tuple[str, int | None]] = []
        for strategy in (strategies or DEFAULT_STRATEGIES):
            if dp * cp == 1 and strategy != "ddp":
                continue
            # etp = tp with ep 1 (the default) splits the experts as the dense linears are, as predict takes it.
            if strategy == "zero3" and (pp > 1 or ep > 1 or (etp > 1 and not (ep == 1 and etp == tp))):
                continue
            if strategy == "zero3" and not sharded:
                # MiCS (predict's zero3 --zero-group, dpsim/strategies/sharded.py): ZeRO-3 over every rank, then
                # over each whole-server shard group HSDP takes. Under tp/cp predict refuses the group (its
                # zero3 there shards over every data-parallel rank), so the layouts keep full sharding.
                out += [(strategy, None)] + [(strategy, g) for g in self.shard_groups(gpus, dp)]
                continue
            if strategy == "fsdp-hybrid":
                if not sharded:
                    out += [(strategy, g) for g in self.shard_groups(gpus, dp)]
                elif strategies:
                    # Under tp/pp only when asked: HSDP's memory there is never below zero1's (pipelined) or
                    # zero3's (not), so the default search, bounded by issue 28's 10 s, leaves it out. With
                    # ep, the shard groups ep (x etp) divides: the experts are carved out of tp x group x cp
                    # (torchtitan's (dp_shard * cp) % ep == 0, as predict requires).
                    per_rank = gpus // (dp * pp)  # tp x cp
                    out += [(strategy, g) for g in self.shard_groups(gpus, dp, tp=per_rank)
                            if (per_rank * g) % (ep * etp) == 0]
                continue
            out.append((strategy, None))
        return out

    def _holds_fp8_params(self, strategy: str, *, layout: bool) -> bool:
        """Whether ``strategy`` holds FP8 primary weights (``--fp8-params``) as predict runs it."""
        try:
            check_fp8_params_strategy(strategy, fsdp_version=self.base.parallelism.fsdp_version, layout=layout)
        except ConfigError:
            return False
        return True

    def shard_groups(self, gpus: int, dp: int, tp: int = 1) -> list[int]:
        """HSDP's shard groups searched on ``dp`` data-parallel ranks: ``gpus_per_node x 2^k`` consecutive
        ranks (whole servers, as ``--zero-group`` must tile them: one node, HYBRID_SHARD's default, then
        two, four, ... nodes: torchtitan's ``data_parallel_shard_degree``), dividing ``dp`` and below it
        (a group of every rank leaves one replica: that is ``fsdp``, torchtitan's FULL_SHARD without the
        ``dp_replicate`` dimension, ParallelDims.build_mesh in torchtitan/distributed/parallel_dims.py
        @0119de156de5). The memory model keeps those that fit and the closed form ranks them: a model that
        fits only sharded over two nodes ranks its 16-rank group (8-GPU servers) and the larger ones."""
        # Under tp (a layout's replicas), a server holds gpus_per_node / tp data-parallel ranks (at least
        # one); a group of one rank shards nothing, so the smallest searched is two.
        gpn = max(2, self.topology(gpus).gpus_per_node // tp)
        out, g = [], gpn
        while g < dp:
            if dp % g == 0:
                out.append(g)
            g *= 2
        return out

    @staticmethod
    def _dual_default(schedules) -> bool:
        """Whether the schedules searched are the default pair (``None``: --schedules not given), to which
        a mixture of experts adds DualPipe; a pair given is the user's list (fuzz6: the command line
        passes None for a flag left out, so it is no longer compared with the default)."""
        return not schedules

    @staticmethod
    def _schedules(pp: int, m: int, n_blocks: int, schedules, *, moe_dual: bool = False) -> list[tuple[str, int]]:
        """The schedules of a ``pp``-stage shape with ``m`` micro-batches: ``schedules`` (default 1F1B and
        interleaved); with ``moe_dual`` (a mixture of experts with ep > 1) the default adds DualPipe,
        DeepSeek-V3's schedule for it (arXiv:2412.19437 Sec. 3.2.1), where it runs."""
        wanted = tuple(schedules or DEFAULT_SCHEDULES)
        if moe_dual and Planner._dual_default(schedules):
            wanted += ("dualpipe",)
        out = []
        if pp == 1:
            return [("1f1b", 1)]
        if "1f1b" in wanted:
            out.append(("1f1b", 1))
        if "gpipe" in wanted:
            out.append(("gpipe", 1))
        if "zb-h1" in wanted:
            out.append(("zb-h1", 1))
        if "dualpipe" in wanted and pp % 2 == 0 and m % 2 == 0 and m >= 2 * pp:
            out.append(("dualpipe", 1))
        if "1f1b-interleaved" in wanted and m % pp == 0:
            # The chunk counts that divide a stage's blocks, and the small ones that do not
            # (chunks then differ by one block). Where pp does not divide the blocks, stages hold
            # the floor or the ceiling of blocks / pp, and both counts' divisors are searched: with
            # the floor alone, one block per chunk on the fuller stages was never tried (Llama-3-405B's
            # 126 blocks on 16 stages: 8 chunks of 7 or 8, 7.53 s a step at 16,384 H100s with full
            # recomputation, where the plan's best was 7.78 s).
            low, high = n_blocks // pp, -(-n_blocks // pp)
            chunks = sorted(set(_divisors(low)) | set(_divisors(high))
                            | set(range(2, min(high, MAX_UNEVEN_CHUNKS) + 1)))
            # At most two chunks may hold no block, the first and the last (they run the embedding
            # and the loss: dpsim.strategies.layout.balanced_counts leaves the ends the lighter).
            out += [("1f1b-interleaved", v) for v in chunks if v > 1 and pp * v <= n_blocks + 2]
        return out

    def layout(self, c: Candidate, micro_batches: int) -> Layout:
        """The :class:`Layout` of ``c`` (what its memory and stages depend on)."""
        ctx = self.context(c.cp)
        return Layout(tp=c.tp, pp=c.pp, dp=c.dp, virtual_stages=c.virtual_stages, schedule=c.schedule,
                      micro_batch=c.micro_batch, micro_batches=micro_batches, sequence_parallel=c.sequence_parallel,
                      recompute=c.recompute, recompute_every=self.base.execution.recompute_every,
                      # HSDP (data parallelism alone) shards per unit as fsdp does; its optimizer share and
                      # collectives are the estimate's own (Planner.unit_dp).
                      strategy="fsdp" if c.strategy == "fsdp-hybrid" and not c.sharded else c.strategy,
                      zero_group=c.zero_group if c.sharded else None, cp=c.cp, cp_comm=ctx.comm, cp_balance=ctx.balanced, ep=c.ep, etp=c.etp,
                      moe_a2a_overlap=c.moe_a2a_overlap)

    def assignment(self, tp: int, layout: Layout):
        """Layers of each stage's chunks, as ``predict`` splits them (cached by shape)."""
        key = (tp, layout.pp, layout.chunks, layout.schedule == "dualpipe")
        a = self._assignments.get(key)
        if a is None:
            a = self._assignments[key] = stage_assignment(self.tp_model(tp, False), layout)
        return a

    def tp_model(self, tp: int, sp: bool, cp: int = 1, experts: ExpertSplit = NO_EXPERT_SPLIT) -> TpModel:
        """The tensor-parallel shard of a context-parallel rank's model, its experts split (cached)."""
        key = (tp, sp, cp, experts)
        tpm = self._tpms.get(key)
        if tpm is None:
            tpm = self._tpms[key] = tp_model(cp_shard(self.model, self.context(cp)), tp, sequence_parallel=sp,
                                             experts=experts)
        return tpm

    def memory(self, c: Candidate, layout: Layout, assignment) -> tuple[float, float, tuple[int, ...]]:
        """``(bytes per GPU of the fullest stage, usable bytes, parameters of each stage per GPU)``:
        the memory ``predict`` reports for ``c`` (the layout's stages, or the data-parallel
        strategy's breakdown without tensor or pipeline parallelism)."""
        if not c.sharded:
            cfg = c.config(self.base)
            mem = strategy_memory(self.model, self.gpu, cfg, self.precision, self.topology(c.gpus))
            return mem.total_bytes, mem.usable_bytes, (self.model.param_count,)
        # A rank holds experts / ep of each layer whatever the routing's load (which scales the
        # busiest rank's rows of compute, not its bytes), so the closed form's shard serves too.
        split = self.experts(c)[0]
        tpm = self.tp_model(c.tp, c.sequence_parallel, c.cp, split)
        precision = self.strategy_precision(c.strategy)
        key = (c.tp, c.sequence_parallel, layout.recompute, layout.recompute_every, layout.pp, layout.chunks,
               layout.schedule == "dualpipe", c.cp, split, precision)
        hit = self._activations.get(key)
        if hit is None:
            hit = self._activations[key] = (stage_activation_bytes(
                tpm, assignment, layout, precision,
                per_layer=self._layer_activations.setdefault((c.tp, c.sequence_parallel, c.cp, split, precision), {})),
                stage_expert_numels(tpm, assignment))
        activations, expert_numels = hit
        return stages_fullest(tpm, layout, self.gpu, precision, self.base.workload.optimizer, assignment,
                              activations, cp_model=self.model, expert_numels=expert_numels)

    def through_failures(self, e: Estimate, failures: FailureInputs) -> Estimate:
        """``e`` with its expected time to train through failures (it needs a time to train)."""
        if e.time_to_train_s is None:
            return e
        c = e.candidate
        key = (c.gpus, c.tp, c.pp, c.dp, c.cp, c.strategy, c.zero_group, failures.node_bandwidth_bytes_per_s)
        shape = self._checkpoints.get(key)
        if shape is None:
            topo = self.topology(c.gpus)
            shape = self._checkpoints[key] = (ClusterShape.from_topology(topo), checkpoint_cost(
                state_bytes=state_bytes(self.model.param_count, self.precision, self.base.workload.optimizer),
                gpus_per_node=topo.gpus_per_node, tp=c.tp, pp=c.pp, dp=c.dp * c.cp,
                shard_group=zero_shard_group(c.strategy, c.dp * c.cp, topo.gpus_per_node,
                                             c.zero_group * c.cp if c.zero_group and c.sharded else c.zero_group),
                node_bandwidth_bytes_per_s=failures.node_bandwidth_bytes_per_s))
        cluster, ck = shape
        return dataclasses.replace(e, reliability=layout_goodput(
            work_s=e.time_to_train_s, cluster=cluster, checkpoint=ck, failures=failures,
            compute_fraction=e.compute_s / e.step_time_s if e.step_time_s > 0 else 1.0))

    def bucket(self, grad_group: int) -> int:
        """Parameters per gradient bucket, as predict sizes them (``--bucket-cap-mb``, else Megatron's default)."""
        return default_bucket_elements(grad_group) if self.base.gradients.bucket_cap_mb is None else \
            max(1, int(self.base.gradients.bucket_cap_mb * 2**20) // self.precision.grad_bytes)

    def stage_sums(self, tab: _Tables, assignment) -> tuple[tuple[float, float, int], ...]:
        """Per stage: its first chunk's forward and backward of one micro-batch, and its routed experts'
        parameters per GPU (cached by the per-layer tables and the split)."""
        key = (id(tab), id(assignment))
        hit = self._stage_sums.get(key)
        if hit is None:
            hit = self._stage_sums[key] = tuple(
                (sum(tab.forward[i] for i in chunks[0]), sum(tab.backward[i] for i in chunks[0]),
                 sum(tab.work[i].expert_grad_numel for layers in chunks for i in layers)) for chunks in assignment)
        return hit

    def stage_work(self, tab: _Tables, assignment, v: int) -> tuple[tuple[float, ...], ...]:
        """Per stage, one micro-batch's forward + backward, compute and tensor-parallel waits over its
        first ``v`` chunks (cached by the per-layer tables and the split, as :meth:`stage_sums`: the
        candidates that differ only in replicas, strategy or micro-batches per step share them)."""
        key = ("work", id(tab), id(assignment), v)
        hit = self._stage_sums.get(key)
        if hit is None:
            p = len(assignment)
            hit = self._stage_sums[key] = (
                tuple(sum(tab.forward[i] + tab.backward[i] for ch in range(v) for i in assignment[s][ch])
                      for s in range(p)),
                tuple(sum(tab.compute[i] for ch in range(v) for i in assignment[s][ch]) for s in range(p)),
                tuple(sum(tab.tp_exposed[i] for ch in range(v) for i in assignment[s][ch]) for s in range(p)))
        return hit

    def dp_collectives(self, gc: GroupCollectives, strategy: str, numel: int) -> tuple[float, float, float, float]:
        """Data parallelism alone: ``numel`` gradients over dp x cp in buckets of :meth:`bucket`
        elements, ``(reductions, the last bucket's, parameter gathers, the first bucket's)``
        (gathers 0 under ``ddp``)."""
        # ``gc`` is cached for the planner's life (:meth:`collectives`), so its id is stable.
        key = (id(gc), strategy, numel)
        hit = self._dp_costs.get(key)
        if hit is not None:
            return hit
        g, w = self.precision.grad_bytes, self.precision.weight_bytes
        bucket = self.bucket(gc.layout.dp * gc.layout.cp)
        full, rest = divmod(numel, bucket)
        op = "all_reduce" if strategy == "ddp" else "reduce_scatter"
        one = self.cost(gc, "dp", op, bucket * g) if full else 0.0
        tail = self.cost(gc, "dp", op, rest * g) if rest else 0.0
        total = full * one + tail
        last_one = min(one, total) if full else tail
        gather_total = first_gather = 0.0
        if strategy in ("zero1", "fsdp"):
            ag_full = self.cost(gc, "dp", "all_gather", bucket * w) if full else 0.0
            ag_rest = self.cost(gc, "dp", "all_gather", rest * w) if rest else 0.0
            gather_total = full * ag_full + ag_rest
            first_gather = ag_full if full else ag_rest
        out = self._dp_costs[key] = (total, last_one, gather_total, first_gather)
        return out

    def stage_buckets(self, tab: _Tables, assignment, s: int, *, bucket: int, overlap: bool,
                      groups: tuple[str, ...]) -> tuple[tuple[str, int, int, float, float], ...]:
        """Stage ``s``'s gradient buckets as predict cuts them
        (:func:`~dpsim.strategies.pipeline.gradient_buckets`: per chunk, in backward order, a layer
        larger than a bucket one of its own; one per chunk without ``overlap``), the dense
        parameters' over ``dp`` and a mixture of experts' routed experts' over ``edp``
        (:class:`~dpsim.strategies.pipeline.DataParallelPlan`): ``(group, chunk, parameters, when its
        reduction launches after its chunk's backward starts, when its chunk's forward first needs
        it)``, groups in turn, then chunks, then buckets in forward order (:meth:`_gathers_ready` queues the
        gathers in the order the schedule first uses them); cached by shape."""
        key = (id(tab), id(assignment), s, bucket, overlap, groups)
        hit = self._buckets.get(key)
        if hit is not None:
            return hit
        # "all": every parameter over dp (a resharding layout's buckets, experts too, as predict's program).
        numel_of = {"dp": lambda lw: lw.grad_numel - lw.expert_grad_numel, "edp": lambda lw: lw.expert_grad_numel,
                    "all": lambda lw: lw.grad_numel}
        out = []
        # Per bucket, its FP8 linears' weights under the job's recipe (the routed experts' in the experts' buckets:
        # predict's gather_bytes, the memory's count).
        fp8 = []
        fp8_group = {"dp": lambda lw: lw.fp8_numel - lw.expert_fp8_numel, "edp": lambda lw: lw.expert_fp8_numel,
                     "all": lambda lw: lw.fp8_numel}
        # Per chunk, what every group's buckets read: its layers' work and, with ``overlap``, when the backward
        # reaches each layer and when the forward does (a bucket is launched once the backward reaches its
        # earliest layer, needed by the forward at its earliest layer); else the chunk's backward.
        forward, backward = tab.forward, tab.backward
        chunks = []
        for layers in assignment[s]:
            work = [tab.work[i] for i in layers]
            if overlap:
                before_f, after_b, run_f = {}, {}, 0.0
                for i in layers:
                    before_f[i] = run_f
                    run_f += forward[i]
                run_b = 0.0
                for i in reversed(layers):
                    run_b += backward[i]
                    after_b[i] = run_b
                chunks.append((work, before_f, after_b, 0.0))
            else:
                chunks.append((work, None, None, sum(backward[i] for i in layers)))
        for group in groups:
            for ch, (work, before_f, after_b, chunk_backward) in enumerate(chunks):
                if overlap:
                    for _, numel, members in reversed(layer_buckets(work, bucket, numel_of[group])):
                        first = min(members)
                        out.append((group, ch, numel, after_b[first], before_f[first]))
                        fp8.append(sum(fp8_group[group](tab.work[i]) for i in members))
                else:
                    numel = sum(numel_of[group](lw) for lw in work)
                    if numel:
                        out.append((group, ch, numel, chunk_backward, 0.0))
                        fp8.append(sum(fp8_group[group](lw) for lw in work))
        hit = self._buckets[key] = tuple(out)
        self._bucket_fp8[id(hit)] = tuple(fp8)
        return hit

    def strategy_precision(self, strategy: str, layout: bool = True):
        """The precision a candidate of ``strategy`` runs, as ``predict`` resolves it for that strategy: over a
        tensor/pipeline ``layout`` (its ``fsdp`` is torchtitan's FSDP2) or data parallelism alone. Its recipe is
        the one place the planner resolves the FP8 recipe, for the compute and memory as for the gathers
        (:meth:`gather_fp8`): ``fsdp`` gathers the float8 weights (:func:`~dpsim.workload.fp8.fp8_all_gather`),
        cast once on the shard rather than in every forward, which the base config's strategy (ddp unless given)
        does not (plan estimated fsdp under ``--fp8 torchao-tensorwise`` at 1.11x its simulation with the base's),
        with the job's FP8 primary weights (``--fp8-params``: left out, a layout was charged TE's per-step FP8
        weight cache on top of 16-bit weights); cached."""
        key = ("strategy precision", strategy, layout)
        hit = self._steady.get(key)
        if hit is None:
            b = self.base
            hit = self._steady[key] = get_precision(b.execution.precision, b.execution.fp8, strategy=strategy,
                                                    fsdp_version=b.parallelism.fsdp_version,
                                                    compile=b.execution.compile, layout=layout,
                                                    fp8_params=b.execution.fp8_params)
        return hit

    def gather_fp8(self, strategy: str, layout: bool):
        """The FP8 recipe whose float8 all-gather ``strategy``'s parameter gathers run (:meth:`strategy_precision`'s,
        where it gathers FP8 weights: :func:`~dpsim.workload.fp8.gathers_fp8_weights`), else ``None``: their bytes
        are then the parameters' dtype."""
        recipe = self.strategy_precision(strategy, layout).fp8
        return recipe if gathers_fp8_weights(recipe) else None

    def _gather_bytes(self, numel: float, fp8_numel: float, recipe) -> float:
        """One all-gather's bytes: ``fp8_numel`` of its ``numel`` parameters in one byte under ``recipe``'s float8
        all-gather (:meth:`gather_fp8`; ``None``: all in the parameters' dtype)."""
        return gathered_weight_bytes(numel, fp8_numel, self.precision.weight_bytes, recipe)

    def stage_dp(self, gc: GroupCollectives, tab: _Tables, assignment, s: int, *, strategy: str, bucket: int,
                 grad_group: int, edp: int, overlap: bool,
                 leads: tuple[float, ...] | None = None) -> tuple[float, float, float, float]:
        """Stage ``s``'s data-parallel collectives that its step waits for (:meth:`stage_buckets`):
        ``(gradient reductions left after its last backward, parameter gathers its forwards wait
        for, seconds of reductions run beside its last backward, and before it)``, played in closed form
        on the one stream they share. The last two are hidden behind backwards, which they slow
        (:func:`~dpsim.strategies.layout.overlap_contention` per second, as the engine plays compute beside
        a collective).

        Reductions: a chunk's buckets launch as its last micro-batch's backward passes their layers
        (all after it without ``overlap``), chunk ``v - 1``'s first, each next chunk's about ``p``
        backwards later (the drain runs a chunk's last ``p`` micro-batches together), one after
        another: what is left after chunk 0's backward is exposed (a few buckets of 2e9
        parameters, Megatron's default at dp 2,048, leave most of theirs: DeepSeek-V3 tp8 ep128).
        Gathers (``zero1``, ``fsdp``): launched at the step's start, in the order the forwards first use
        them (:meth:`_gathers_ready`: chunk by chunk, a block's dense bucket before its routed experts',
        on ``edp``), each layer's first forward waiting for its bucket: the
        stall is the worst bucket's lateness (after the update, all of them, without
        ``overlap``; DualPipe's are in its replay instead, :meth:`dualpipe_s`). The routed experts' buckets, on their own communicator strided across nodes,
        cost more than the same bytes over ``dp`` would (Mixtral tp2 ep4 on 1,024 GPUs: 0.56 s of
        collectives where all over dp read 0.2 s)."""
        groups, buckets, comm_of, alone, ereplicas, shard, replicated = self._dp_groups(
            gc, tab, assignment, s, strategy=strategy, bucket=bucket, grad_group=grad_group, edp=edp, overlap=overlap)
        # ``gc`` and ``buckets`` are cached for the planner's life (:meth:`collectives`,
        # :meth:`stage_buckets`), so their ids are stable.
        key = (id(gc), id(buckets), strategy, leads)
        hit = self._dp_costs.get(key)
        if hit is not None:
            return hit
        forward, backward, paced_b = self.chunk_sums(tab, assignment)
        chunk_backward, chunk_forward = backward[s], forward[s]
        g = self.precision.grad_bytes
        op = "all_reduce" if strategy == "ddp" else "reduce_scatter"
        p = gc.layout.pp if gc.layout is not None else 1
        # Chunk c's last backward ends p backwards of each chunk before it ahead of chunk 0's (the drain
        # runs the chunks' last p micro-batches in turn, v - 1 first; each paced by the stage slowest at
        # that chunk, whose gradients the wave waits for), and its first forward starts p forwards of each
        # chunk before it after chunk 0's: each chunk's own times, not chunk 0's (a first stage's chunk 0
        # holding the embedding and dense blocks is lighter than the rest: DeepSeek-V3 had its gathers
        # and reductions late by up to 0.17 s and estimated 1.11-1.30x its simulation).
        before_b = tuple(p * t for t in itertools.accumulate(paced_b[:-1], initial=0.0))
        before_f = tuple(p * t for t in itertools.accumulate(chunk_forward[:-1], initial=0.0))
        # Times relative to the end of chunk 0's last backward.
        if leads is None:
            launches = sorted((-before_b[ch] - chunk_backward[ch] + launch, k)
                              for k, (_, ch, _, launch, _) in enumerate(buckets))
        else:
            # DualPipe: a chunk's buckets launch layer by layer in its last weight-gradient pass W
            # (the program's), which ends ``leads[ch]`` before the stage's last op.
            wgrad = tuple(sum(tab.weight_grad[i] for i in layers) for layers in assignment[s])
            launches = sorted((-leads[ch] - wgrad[ch] + (launch * wgrad[ch] / chunk_backward[ch]
                                                          if chunk_backward[ch] > 0 else 0.0), k)
                              for k, (_, ch, _, launch, _) in enumerate(buckets))
        end = -math.inf
        hidden = early = 0.0
        # The memo's tables of each group's op, looked up directly in the loops (:meth:`cost_table`).
        reduce_of = {group: self.cost_table(gc, comm_of.get(group, group), op) for group in groups}
        backward0 = -chunk_backward[0]
        for t, k in launches:
            group, _, numel, _, _ = buckets[k]
            start = max(end, t)
            seconds, replica = self._bucket_reduce_s(gc, reduce_of, comm_of, alone, group, numel, g, op,
                                                     replicated=replicated, shard=shard, ereplicas=ereplicas, edp=edp)
            end = start + seconds + replica
            hidden += max(0.0, min(end, 0.0) - max(start, backward0))
            early += max(0.0, min(end, backward0) - start)
        reduce_left = max(0.0, end) if launches else 0.0
        stall = 0.0
        fsdp = strategy in ("fsdp", "fsdp-hybrid")
        if strategy == "zero1" or fsdp:
            ready, queue = self._gathers_ready(gc, buckets, groups, comm_of, alone, tuple(range(len(chunk_forward))),
                                               self.gather_fp8(strategy, True))
            if leads is None:
                stall = max(0.0, *(r - before_f[ch] for ch, r in enumerate(ready)))
            # DualPipe: its replay waits for them (:meth:`dualpipe_s`, :meth:`stage_gathers`).
            if not (overlap or fsdp):
                stall = queue
        out = self._dp_costs[key] = (reduce_left, stall, hidden, early)
        return out

    def _dp_groups(self, gc: GroupCollectives, tab: _Tables, assignment, s: int, *, strategy: str, bucket: int,
                   grad_group: int, edp: int, overlap: bool):
        """What :meth:`stage_dp` and :meth:`stage_gathers` read of stage ``s``'s data-parallel collectives:
        ``(groups, buckets, communicator of each group, groups of one rank, HSDP's replica groups of the
        routed experts, its shard group or None, whether the dense shard group is replicated)``."""
        ereplicas = self._expert_replicas(gc, strategy)
        # FSDP with ep 1 reduces (and gathers) the experts with their block: every parameter over dp.
        apart = self.model.moe is None or self._experts_apart(gc, strategy)
        groups = tuple(group for group, size in (("dp", grad_group), ("edp", edp))
                       if size > 1 or (group == "edp" and ereplicas > 1 and self.model.moe is not None)) \
            if apart else (("all",) if grad_group > 1 else ())
        buckets = self.stage_buckets(tab, assignment, s, bucket=bucket, overlap=overlap, groups=groups)
        # HSDP (fsdp-hybrid under tp/pp): fsdp's collectives on the shard group ("zero": its data-parallel ranks with
        # their context-parallel ones), each reduce-scatter's shard then all-reduced across the replica groups
        # ("zrep") behind it, as predict's program queues them.
        # Under expert parallelism the routed experts likewise on theirs ("ezero", "ezrep").
        shard = gc.layout.zero_group * gc.layout.cp if strategy == "fsdp-hybrid" and gc.layout is not None else None
        replicated = shard is not None and shard < grad_group
        comm_of = {"dp": "zero", "all": "zero"} if replicated else {"all": "dp"}
        if ereplicas > 1:
            comm_of["edp"] = "ezero"
        # An expert shard group of one rank (ep x etp = tp x dp x cp): the experts are whole on each rank, only
        # HSDP's replica all-reduce runs.
        alone = {"edp": edp == 1}
        return groups, buckets, comm_of, alone, ereplicas, shard, replicated

    def _bucket_reduce_s(self, gc, reduce_of, comm_of, alone, group: str, numel: int, g: float, op: str, *,
                         replicated: bool, shard, ereplicas: int, edp: int) -> tuple[float, float]:
        """One gradient bucket's reduction on its group (0 where the group is one rank), and the
        all-reduce of its shard across the replicas after it (HSDP's ``zrep``, the experts' ``ezrep``;
        0 without replicas), apart so each caller adds them in its own order (bit for bit as before)."""
        if alone.get(group):
            seconds = 0.0
        else:
            size = numel * g
            seconds = reduce_of[group].get(size)
            if seconds is None:
                seconds = self.cost(gc, comm_of.get(group, group), op, size)
        if replicated and group in ("dp", "all"):
            return seconds, self.cost(gc, "zrep", "all_reduce", -(-numel // shard) * g)
        if ereplicas > 1 and group == "edp":
            return seconds, self.cost(gc, "ezrep", "all_reduce", -(-numel // max(1, edp)) * g)
        return seconds, 0.0

    def _gathers_ready(self, gc: GroupCollectives, buckets, groups, comm_of, alone,
                       order: tuple[int, ...], recipe=None) -> tuple[tuple[float, ...], float]:
        """The parameter all-gathers of a stage's ``buckets`` (:meth:`stage_buckets`), launched at the step's
        start and played one after another on its stream in the order its schedule first uses them (as
        predict's program queues them): the chunks in ``order``, each's buckets by the layer that first needs
        them, a block's dense bucket before its experts'. ``(per chunk, the earliest its first forward can
        start, each layer's first forward waiting for its bucket; all of them)``; ``recipe``: the float8
        all-gather's (:meth:`gather_fp8`), its buckets' FP8 weights in one byte; cached."""
        key = ("gathers", id(gc), id(buckets), order, tuple(comm_of.items()), alone["edp"], recipe is not None)
        hit = self._dp_costs.get(key)
        if hit is not None:
            return hit
        fp8 = self._bucket_fp8[id(buckets)] if recipe is not None else (0,) * len(buckets)
        rank = {ch: k for k, ch in enumerate(order)}
        place = {group: k for k, group in enumerate(groups)}
        gather_of = {group: self.cost_table(gc, comm_of.get(group, group), "all_gather") for group in groups}
        ready = [0.0] * len(order)
        queue = 0.0
        for (group, ch, numel, _, needed), f in sorted(zip(buckets, fp8),
                                                       key=lambda b: (rank[b[0][1]], b[0][4], place[b[0][0]])):
            if alone.get(group):
                continue
            size = self._gather_bytes(numel, f, recipe)
            seconds = gather_of[group].get(size)
            if seconds is None:
                seconds = self.cost(gc, comm_of.get(group, group), "all_gather", size)
            queue += seconds
            ready[ch] = max(ready[ch], queue - needed)
        hit = self._dp_costs[key] = (tuple(ready), queue)
        return hit

    def stage_gathers(self, gc: GroupCollectives, tab: _Tables, assignment, s: int, *, strategy: str, bucket: int,
                      grad_group: int, edp: int, overlap: bool,
                      order: tuple[int, ...]) -> tuple[tuple[float, ...], float]:
        """Per chunk of stage ``s``, the earliest its first forward can start for the parameters
        ``zero1`` (with ``overlap``) and ``fsdp`` gather at the step's start, and when they all are
        (:meth:`_gathers_ready`; ``order``: its chunks in the order its schedule first runs them); zeros for
        the other strategies."""
        v = len(assignment[s])
        if not (strategy in ("fsdp", "fsdp-hybrid") or (strategy == "zero1" and overlap)):
            return (0.0,) * v, 0.0
        groups, buckets, comm_of, alone, *_ = self._dp_groups(
            gc, tab, assignment, s, strategy=strategy, bucket=bucket, grad_group=grad_group, edp=edp, overlap=overlap)
        return self._gathers_ready(gc, buckets, groups, comm_of, alone, order, self.gather_fp8(strategy, True))

    @staticmethod
    def _experts_apart(gc: GroupCollectives, strategy: str) -> bool:
        """Whether the routed experts have buckets of their own on ``gc``'s layout
        (:attr:`~dpsim.strategies.layout.Layout.experts_apart`: not a parameter-sharding strategy's with ep 1)."""
        shape = gc.layout
        return (strategy not in PARAM_SHARDING_LAYOUT_STRATEGIES or shape is None or shape.ep > 1
                or shape.etp != shape.tp)

    @staticmethod
    def _expert_replicas(gc: GroupCollectives, strategy: str) -> int:
        """HSDP's replica groups of the routed experts on ``gc``'s layout (1 unless ``fsdp-hybrid`` with a shard
        group below every data-parallel rank and ep above 1: :attr:`~dpsim.strategies.layout.Layout.expert_replicas`)."""
        shape = gc.layout
        if strategy != "fsdp-hybrid" or shape is None or shape.zero_group is None \
                or not Planner._experts_apart(gc, strategy):
            return 1
        return shape.dp // shape.zero_group

    def chunk_sums(self, tab: _Tables, assignment) -> tuple[tuple[tuple[float, ...], ...],
                                                             tuple[tuple[float, ...], ...], tuple[float, ...]]:
        """Per stage and chunk, one micro-batch's forward and backward; per chunk, the slowest stage's backward
        (cached by the per-layer tables and the split)."""
        key = ("chunks", id(tab), id(assignment))
        hit = self._steady.get(key)
        if hit is None:
            forward = tuple(tuple(sum(tab.forward[i] for i in layers) for layers in chunks) for chunks in assignment)
            backward = tuple(tuple(sum(tab.backward[i] for i in layers) for layers in chunks) for chunks in assignment)
            hit = self._steady[key] = (forward, backward, tuple(map(max, zip(*backward))))
        return hit

    def blocking_s(self, tab: _Tables, assignment, p: int, v: int, m: int, transfer: float = 0.0, token: float = 0.0,
                   gather: float = 0.0) -> float:
        """1F1B's (``v`` 1) or the interleaved schedule's step from the first forward to the last exchange, replayed
        with each stage's own chunks and the blocking exchanges as the pipeline program plays them
        (:func:`~dpsim.strategies.pipeline.blocking_stage_times`; ``transfer``, ``token``, ``gather``: its
        transfer, ready message and receiver's all-gather; 0: transfers free); only where :data:`MAX_REPLAY_OPS`
        allows; cached."""
        key = ("blocking", id(tab), id(assignment), p, v, m, transfer, token, gather)
        hit = self._steady.get(key)
        if hit is None:
            forward, backward, _ = self.chunk_sums(tab, assignment)
            casts = [[sum(tab.first_forward[i] for i in layers) for layers in chunks] for chunks in assignment]
            hit = self._steady[key] = max(blocking_stage_times(p, v, m, forward, backward, casts, transfer, token,
                                                               gather)[1])
        return hit

    def blocking_dp_s(self, tab: _Tables, assignment, p: int, v: int, m: int, streams, contention: float,
                      transfer: float, token: float, gather: float) -> tuple[float, tuple[float, ...], tuple[float, ...]]:
        """:meth:`blocking_s` with each stage's data-parallel collectives
        played beside its compute (``streams``: :meth:`stage_streams`; compute beside them ``contention`` per
        second slower, as the engine plays it): ``(step, per stage its last backward's end, its reductions')``.
        Why here and not after the pipeline (:meth:`stage_dp`'s 1F1B drain): the parameter gathers hold the
        first forwards, which every later stage waits for, and the reductions of a chunk's last backward slow
        the backwards that pace the drain (Mixtral-8x7B tp2 pp4 ep8 ddp, interleaved 8 chunks, ``m = 2p``:
        0.96x with the closed form's drain); cached."""
        key = ("blocking dp", id(tab), id(assignment), p, v, m, id(streams), contention, transfer, token, gather)
        hit = self._steady.get(key)
        if hit is None:
            forward, backward, _ = self.chunk_sums(tab, assignment)
            casts = [[sum(tab.first_forward[i] for i in layers) for layers in chunks] for chunks in assignment]
            slow = 1.0 / (1.0 - contention) if contention < 1.0 else math.inf
            last_b, clock, reduced = blocking_stage_times(p, v, m, forward, backward, casts, transfer, token, gather,
                                                          streams, slow)
            hit = self._steady[key] = (max(clock), tuple(last_b), tuple(reduced))
        return hit

    def interleaved_steady_s(self, tab: _Tables, assignment, p: int, v: int, *, all_warmup: bool) -> float:
        """The interleaved schedule's steady state per ``p`` micro-batches (every chunk of every
        stage run ``p`` times forward and backward), paced step by step by its heaviest stage.

        Why not ``p`` times the heaviest stage's forward + backward (what uniform chunks give):
        each stage runs its ops in Megatron's fixed order (:func:`~dpsim.strategies.pipeline.schedule_slots`),
        and in the steady state the forward wave advances one stage per step (stage ``s`` runs the
        forward of virtual micro-batch ``T - s`` at step ``T``) and the backward wave one stage per
        step the other way (the backward of ``T + s - (v + 1)p + 2``, from Megatron's ``(p - s - 1)·2
        + (v - 1)·p`` warm-up forwards; Narayanan et al. 2021, Sec. 2.2.2), with one step of
        slack between neighbours. A step then lasts as long as the heaviest forward + backward
        any stage runs in it. When the chunks differ (:func:`~dpsim.strategies.layout.balanced_counts`
        gives the middle virtual stages the extra block, so one chunk index is heavier on most
        stages, and the LM head sits in the last chunk), the two waves cross the heavy chunks at
        different steps on each stage, and the step is paced by every one of them: ``Σ_T max_s
        (F[s, cf] + B[s, cb])``. Uniform chunks give ``p·X`` (the closed form of Narayanan et al.).
        The simulator with non-blocking exchanges shows the same cost (405B, 32 stages x 3
        chunks: 1.20x the per-stage sum), so it is the order, not the blocking transfers
        (validation/large_model_runs.md, "plan's estimate"). With ``m = p`` (``all_warmup``) Megatron
        runs every forward before any backward: the two waves pace separately."""
        # Both are cached for the planner's life (:meth:`tables`, :meth:`assignment`), so their ids are stable.
        key = (id(tab), id(assignment), p, v, all_warmup)
        hit = self._steady.get(key)
        if hit is not None:
            return hit
        fwd = np.array([[sum(tab.forward[i] for i in assignment[s][ch]) for ch in range(v)] for s in range(p)])
        bwd = np.array([[sum(tab.backward[i] for i in assignment[s][ch]) for ch in range(v)] for s in range(p)])
        step = np.arange(p * v)[:, None]
        stage = np.arange(p)[None, :]
        cf = ((step - stage) % (p * v)) // p
        cb = v - 1 - ((step + stage - (v + 1) * p + 2) % (p * v)) // p
        if all_warmup:
            out = float(fwd[stage, cf].max(axis=1).sum() + bwd[stage, cb].max(axis=1).sum())
        else:
            out = float((fwd[stage, cf] + bwd[stage, cb]).max(axis=1).sum())
        self._steady[key] = out
        return out

    def interleaved_all_warmup_s(self, tab: _Tables, assignment, p: int, v: int, transfer: float = 0.0) -> float:
        """The interleaved schedule with ``m = p`` micro-batches, transfers free: Megatron then runs every
        forward before any backward (:func:`~dpsim.strategies.pipeline.warmup_forwards`), stage ``s`` its
        chunks' forwards chunk by chunk, micro-batches in turn, then the backwards from the last chunk back.
        Played exactly as two waves of max-plus recurrences: forward ``(s, c, j)`` starts once the stage's
        previous op and virtual stage ``c·p + s - 1``'s forward of ``j`` are done, backward ``(s, c, j)`` once
        the previous op and ``c·p + s + 1``'s backward of ``j`` are. Why not the steady state plus
        ``(ΣX - max X)/v``: that fill and drain charge every stage its mean chunk, while the first forwards
        (and the last backwards) cross the light outer chunks (the embedding's, the output layer's) first:
        DeepSeek-V3 tp4 pp16 v3 read 1.06x its simulation. ``transfer``: the seconds each activation or gradient
        takes from one stage to the next (the closed form's ``2(p·v - 1) + m·v`` transfers overcount the waves':
        Llama-3-8B pp2 v16 1.03x)."""
        return self.interleaved_all_warmup_dp_s(tab, assignment, p, v, transfer=transfer)[0]

    def interleaved_all_warmup_dp_s(self, tab: _Tables, assignment, p: int, v: int, streams=None,
                                    contention: float = 0.0,
                                    transfer: float = 0.0) -> tuple[float, tuple[float, ...], tuple[float, ...]]:
        """:meth:`interleaved_all_warmup_s` with each stage's data-parallel collectives played beside its
        compute: ``streams[s]`` is ``(ready, gathers, reductions)``: per chunk the earliest its first forward
        starts (its parameters gathered), the gathers' seconds on the stream from the step's start, and per
        chunk its buckets' ``(seconds into its last backward they launch, seconds)``, queued on the same stream
        in launch order. A compute op runs ``contention`` seconds longer per second of collective beside it
        (:func:`~dpsim.strategies.layout.overlap_contention`, as the engine slows compute while a collective
        is in flight). Why here and not after the pipeline: with ``m = p`` the interleaved waves are tight
        around the ring of virtual stages, so every stage's slowdown delays the next (DeepSeek-V3 tp8 pp8 ep8
        zero1 v4: 0.21 s of reductions' slowdown where the stage-by-stage drain read 0.06 s, 0.95x).
        ``(makespan, per stage its last backward's end, its reductions' end)``, transfers free; cached."""
        # ``streams`` is cached for the planner's life (:meth:`stage_streams`), so its id is stable.
        key = ("all_warmup", id(tab), id(assignment), p, v, id(streams), contention, transfer)
        hit = self._steady.get(key)
        if hit is not None:
            return hit
        forward, backward, _ = self.chunk_sums(tab, assignment)
        slow = 1.0 / (1.0 - contention) if contention < 1.0 else math.inf  # 1 + overlap_slowdown
        # Per stage: its stream's busy intervals in time order, and the first not yet behind its compute.
        busy: list[list[list[float]]] = [[] for _ in range(p)]
        at = [0] * p
        stream_end = [0.0] * p

        def run(s: int, t: float, d: float) -> float:
            """When ``d`` seconds of compute started at ``t`` on stage ``s`` end, slowed beside its stream."""
            end, at[s] = compute_beside(busy[s], at[s], t, d, slow)
            return end

        ready = [None] * p
        if streams is not None:
            for s, (chunk_ready, gathers, _) in enumerate(streams):
                ready[s] = chunk_ready
                if gathers > 0:
                    busy[s].append([0.0, gathers])
                    stream_end[s] = gathers
        # done[s][k]: when stage s's k-th forward (then backward) of the wave ends.
        done = [[0.0] * (p * v) for _ in range(p)]
        for k in range(p * v):
            c = k // p
            arrived = done[p - 1][k - p] + transfer if k >= p else 0.0
            for s in range(p):
                row = done[s]
                before = row[k - 1] if k else 0.0
                t = before if before > arrived else arrived
                if streams is None:
                    row[k] = t + forward[s][c]
                else:
                    if ready[s][c] > t:
                        t = ready[s][c]
                    row[k] = t + forward[s][c] if t >= stream_end[s] else run(s, t, forward[s][c])
                arrived = row[k] + transfer
        back = [[0.0] * (p * v) for _ in range(p)]
        for k in range(p * v):
            c = v - 1 - k // p
            last = k % p == p - 1  # the chunk's last backward: its buckets launch as it passes their layers
            arrived = back[0][k - p] + transfer if k >= p else 0.0
            for s in reversed(range(p)):
                row = back[s]
                before = row[k - 1] if k else done[s][-1]
                t = before if before > arrived else arrived
                if streams is None:
                    row[k] = t + backward[s][c]
                    arrived = row[k] + transfer
                    continue
                if last:
                    end = stream_end[s]
                    for launch, seconds in streams[s][2][c]:
                        start = max(end, t + launch)
                        end = start + seconds
                        if seconds > 0:
                            busy[s].append([start, end])
                    stream_end[s] = end
                row[k] = t + backward[s][c] if t >= stream_end[s] else run(s, t, backward[s][c])
                arrived = row[k] + transfer
        ends = tuple(row[-1] for row in back)
        out = self._steady[key] = (max(ends), ends, tuple(stream_end))
        return out

    def stage_streams(self, gc: GroupCollectives, tab: _Tables, assignment, *, strategy: str, bucket: int,
                      grad_group: int, edp: int, kinds: tuple) -> tuple:
        """Each stage's data-parallel stream for :meth:`interleaved_all_warmup_dp_s` (buckets launched layer by
        layer, ``overlap``): its chunks' gather-ready times and gathers' seconds (``zero1``, ``fsdp``:
        :meth:`_gathers_ready`, chunks in order) and per chunk its reductions, costed as :meth:`stage_dp` costs
        them; stages of one of ``kinds`` (as :meth:`estimate_steps` tells stages alike) share one; cached."""
        key = ("streams", id(gc), id(tab), id(assignment), strategy, bucket, grad_group, edp)
        hit = self._dp_costs.get(key)
        if hit is not None:
            return hit
        g = self.precision.grad_bytes
        op = "all_reduce" if strategy == "ddp" else "reduce_scatter"
        gathering = strategy in ("zero1", "fsdp", "fsdp-hybrid")
        out = []
        alike: dict = {}
        for s in range(len(assignment)):
            if kinds[s] in alike:
                out.append(alike[kinds[s]])
                continue
            v = len(assignment[s])
            groups, buckets, comm_of, alone, ereplicas, shard, replicated = self._dp_groups(
                gc, tab, assignment, s, strategy=strategy, bucket=bucket, grad_group=grad_group, edp=edp,
                overlap=True)
            ready, queue = self._gathers_ready(gc, buckets, groups, comm_of, alone, tuple(range(v)),
                                               self.gather_fp8(strategy, True)) \
                if gathering else ((0.0,) * v, 0.0)
            reduce_of = {group: self.cost_table(gc, comm_of.get(group, group), op) for group in groups}
            chunks: list[list[tuple[float, float]]] = [[] for _ in range(v)]
            for group, ch, numel, launch, _ in buckets:
                seconds, replica = self._bucket_reduce_s(gc, reduce_of, comm_of, alone, group, numel, g, op,
                                                         replicated=replicated, shard=shard, ereplicas=ereplicas,
                                                         edp=edp)
                chunks[ch].append((launch, seconds + replica))
            out.append((ready, queue, tuple(tuple(sorted(c)) for c in chunks)))
            alike[kinds[s]] = out[-1]
        hit = self._dp_costs[key] = tuple(out)
        return hit

    def dualpipe_s(self, c: Candidate, tab: _Tables, assignment, m: int,
                   ready: tuple[tuple[float, ...], ...] | None = None,
                   gathers: tuple[float, ...] | None = None) -> tuple[list[float], list[list[float]]]:
        """DualPipe's per stage end of its last op and of each direction's last ``W``, transfers free
        (:func:`~dpsim.strategies.pipeline.dualpipe_stage_times`): stage ``s``'s chunk ``d`` is
        ``assignment[s][d]``; with ``moe_a2a_overlap`` each F&B pair runs shorter by
        :func:`~dpsim.strategies.pipeline.a2a_overlap_cut` of its two chunks, as the pipeline
        program takes it off; ``ready[s][d]``: the earliest chunk ``d``'s first forward on stage ``s`` can
        start, its parameters gathered (:meth:`stage_gathers`), ``gathers[s]`` when they all are: the compute
        beside them slowed as the engine slows it (``overlap_slowdown``)."""
        key = ("dualpipe", id(tab), id(assignment), c.pp, m, c.moe_a2a_overlap, ready, gathers)
        hit = self._steady.get(key)
        if hit is not None:
            return hit
        p = c.pp

        def per_chunk(values) -> list[list[float]]:
            return [[sum(values[i] for i in layers) for layers in assignment[s]] for s in range(p)]

        cut_of = None
        if c.moe_a2a_overlap:
            contention = overlap_contention(self.base.calibration.overlap_slowdown)
            works = [[ChunkWork(stage=s, chunk=d, layers=tuple(tab.work[i] for i in layers))
                      for d, layers in enumerate(assignment[s])] for s in range(p)]
            cuts: dict[tuple[int, int, int], tuple[float, float]] = {}

            def pair_cut(s: int, df: int, db: int) -> tuple[float, float]:
                hit = cuts.get((s, df, db))
                if hit is None:
                    hit = cuts[s, df, db] = a2a_overlap_cut(works[s][df], works[s][db], contention)
                return hit
            cut_of = pair_cut
        forward, backward, weight = per_chunk(tab.forward), per_chunk(tab.backward), per_chunk(tab.weight_grad)

        def replay(n: int) -> tuple[list[float], list[list[float]]]:
            return dualpipe_stage_times(p, n, forward, backward, weight, cut_of, ready, gathers,
                                        self.base.calibration.overlap_slowdown)

        out = dualpipe_extrapolated(replay, p, m)
        self._steady[key] = out
        return out

    def estimate(self, c: Candidate, *, global_batch: int) -> Estimate:
        """Closed-form memory and, when it fits, step of ``c`` (see the module docstring); a layout
        that does not fit has no time estimated (its times are 0)."""
        steps = self.estimate_steps(c, global_batch=global_batch)
        try:
            while True:
                next(steps)
        except StopIteration as done:
            return done.value

    def estimate_steps(self, c: Candidate, *, global_batch: int):
        """:meth:`estimate` as a generator: for a tensor/pipeline layout that fits, it first yields a floor
        of its step (the pipeline and its transfers, to which the data-parallel collectives and the
        update only add), then returns the :class:`Estimate` (``StopIteration.value``); any other it
        returns at once. A layout whose pipeline is replayed first yields a cheaper floor (its heaviest
        stage's compute), before the replay: each floor is no lower than the one before. :func:`plan_layouts`
        finishes only the layouts whose floor could still rank them where the output reads them
        (:class:`_Ranking`)."""
        self.topology(c.gpus)
        gpu = self.gpu
        p, v = c.pp, c.virtual_stages
        m = global_batch // (c.micro_batch * c.dp)
        layout = self.layout(c, m)
        assignment = self.assignment(c.tp, layout)
        # The one memory model (predict's): every stage, the fullest decides.
        memory, usable, stage_params = self.memory(c, layout, assignment)
        numel0 = stage_params[0]
        if memory > usable:
            return Estimate(candidate=c, step_time_s=math.inf, memory_bytes=memory, usable_bytes=usable,
                            compute_s=0.0, tp_exposed_s=0.0, bubble_s=0.0, p2p_s=0.0, dp_exposed_s=0.0,
                            optimizer_s=0.0, samples_per_s=0.0, tokens_per_s=None, mfu=None, usd_per_hour=None)
        gc = self.collectives(c.gpus, c.tp, c.pp, c.dp, c.cp, c.ep, c.etp,
                              c.zero_group if c.sharded and c.strategy == "fsdp-hybrid" else None)
        zero3 = self.zero3_passes(c, layout) if c.strategy == "zero3" and c.sharded else None
        tab = self.tables(c, gc, zero3)
        split = self.experts(c)[0]
        tpm = self.tp_model(c.tp, c.sequence_parallel, c.cp, split)
        virtual_layers = [assignment[g % p][g // p] for g in range(p * v)]
        n_virtual = p * v
        # Each chunk of a stage and the micro-batches it runs: DualPipe's two chunks (a stage of each
        # direction) run half of them each.
        dual = c.schedule == "dualpipe"
        stage_chunks = [[(layers, m / 2.0) for layers in assignment[s]] for s in range(p)] if dual else []
        # Per stage: one micro-batch's forward and backward over its chunks (DualPipe: half through each).
        if dual:
            x = [sum(n / m * sum(tab.forward[i] + tab.backward[i] for i in layers) for layers, n in chunks)
                 for chunks in stage_chunks]
        else:
            x = list(self.stage_work(tab, assignment, v)[0])
        xmax = max(x)
        pipe = m * xmax + (sum(x) - xmax) / v
        if c.schedule == "1f1b-interleaved" and v > 1 and m == p:
            pipe = self.interleaved_all_warmup_s(tab, assignment, p, v)
        elif c.schedule == "1f1b-interleaved" and v > 1:
            pipe = m / p * self.interleaved_steady_s(tab, assignment, p, v, all_warmup=False) + (sum(x) - xmax) / v
        if dual:
            # DualPipe's order replayed chunk by chunk (dualpipe_compute_s), not the paper's bubble for the
            # heaviest chunk: the stages holding both ends are heavier than the middle ones that fill
            # their bubble. With the overlap, its F&B pairs (a2a_pairs) run shorter by a2a_overlap_cut.
            dual_end, dual_grads = self.dualpipe_s(c, tab, assignment, m)
            pipe = max(dual_end)
        elif c.schedule == "zb-h1" and sum(x) > 0:
            # Fill and drain of (p - 1)(F + B - W) instead of (p - 1)(F + B + W) (Qi et al. 2024).
            share = sum(tab.weight_grad[i] for layers in virtual_layers for i in layers) / sum(x)
            pipe = m * xmax + (sum(x) - xmax) * max(0.0, 1.0 - 2.0 * share)
        # 1F1B and the interleaved schedule with m > p (m = p: the two waves) replayed with their blocking exchanges
        # (an a2a overlap's pairs are cut below, from the closed form).
        replayed = p > 1 and not c.moe_a2a_overlap and 2 * p * v * m <= MAX_REPLAY_OPS and (
            c.schedule == "1f1b" or (c.schedule == "1f1b-interleaved" and v > 1 and m > p))
        if replayed:
            if c.sharded:
                # A floor before the replays: each stage runs every forward and backward of its chunks one after
                # another (the replay's ops last that or longer), less a rounding margin (the replay sums them in
                # another order). The ranking replays only the layouts this could rank where it reads (a search of
                # Mixtral-8x7B on 256 GPUs replayed all 9,345 layouts for their floor: 45 of its 97 s).
                forward, backward, _ = self.chunk_sums(tab, assignment)
                yield max(m * sum(f + b for f, b in zip(fs, bs)) for fs, bs in zip(forward, backward)) \
                    * (1.0 - FLOOR_MARGIN)
            # Stage by stage, each first forward's FP8 casts with it.
            pipe = self.blocking_s(tab, assignment, p, v, m)
        else:
            # Each chunk's first forward also casts its FP8 weights (LayerWork.first_forward_s): the first
            # micro-batch's path through the stages runs every one of them.
            pipe += sum(tab.first_forward)
        if c.moe_a2a_overlap and not dual:
            # The heaviest stage's paired ops (a2a_pairs) each run shorter by a2a_overlap_cut of a
            # forward and a backward of its average chunk.
            s = x.index(xmax)
            contention = overlap_contention(self.base.calibration.overlap_slowdown)
            cut = sum(sum(a2a_overlap_cut(ChunkWork(stage=s, chunk=ch, layers=w),
                                          ChunkWork(stage=s, chunk=ch, layers=w), contention))
                      for ch in range(v) for w in [tuple(tab.work[i] for i in virtual_layers[ch * p + s])]) / v
            pairs = len(a2a_pairs(layout, schedule_slots(c.schedule, p, v, m, s, extra_warmup(layout)), s))
            pipe -= pairs * cut
        hidden = next((l.hidden_bytes_per_sample for l in tpm.layers if l.role == "block"), 0.0)
        act_bytes = 4 if self.precision.compute_dtype == "float32" else 2
        full_hidden = hidden * c.micro_batch * act_bytes / 2.0
        p2p_bytes = full_hidden / c.tp
        p2p_one = self.cost(gc, "pp", "broadcast", p2p_bytes) if p > 1 else 0.0
        gather = self.cost(gc, "tp", "all_gather", full_hidden) if c.tp > 1 and not c.sequence_parallel else 0.0
        # Fill and drain cross every link; in the steady state the blocking exchanges (one per
        # micro-batch and chunk on the critical path, as the simulator plays them) add theirs.
        p2p = (2 * (n_virtual - 1) + m * v) * (p2p_one + gather) if p > 1 else 0.0
        all_warmup = c.schedule == "1f1b-interleaved" and v > 1 and m == p
        if all_warmup:
            # The two waves with each transfer on their path, as many as cross it.
            p2p = self.interleaved_all_warmup_s(tab, assignment, p, v, p2p_one + gather) \
                - self.interleaved_all_warmup_s(tab, assignment, p, v)
        if replayed:
            # The replay with each transfer, ready message and all-gather where the blocking exchanges put them.
            p2p = self.blocking_s(tab, assignment, p, v, m, p2p_one, self.cost(gc, "pp", "broadcast", 0.0),
                                  gather) - pipe
        if c.sharded:
            # The step is pipe + p2p + dp_exposed + optimizer, the last two never negative below (each
            # stage's exposed reductions, stage 0's at least, and its gathers' stall are maxima with 0; the
            # update is the latest stage's end less the latest reduction's, no earlier than that stage's
            # own), and pipe gains no dp_compute here.
            yield pipe + p2p
        g = self.precision.grad_bytes
        shard = self._compute[(c.tp, c.micro_batch, c.sequence_parallel, c.cp, split, self.strategy_precision(c.strategy))]
        shard_params = self._shard_params.get((c.tp, c.cp, split))
        if shard_params is None:
            shard_params = self._shard_params[(c.tp, c.cp, split)] = tpm.spec.param_count
        per_param = shard.optimizer_s / shard_params if shard_params else 0.0
        # Data-parallel collectives: what each stage's last backward cannot hide, and what its first
        # forward waits for of the parameters gathered at the step's start; the step waits for the
        # worst stage (a middle stage of a mixture of experts holds more experts than the first).
        dp_exposed = 0.0
        grad_group = c.dp * c.cp
        # HSDP under expert parallelism: the experts' shard group, their replicas all-reducing behind (stage_dp).
        edp = layout.expert_shard_group if self.model.moe is not None and c.sharded else 1
        per_stage = self.stage_sums(tab, assignment)
        overlap = c.overlap(self.base)
        critical = 0
        # Data parallelism alone: the strategy's own compute-stream work per step (copies, DDP's wrappers),
        # which predict's data-parallel programs charge beside the layer compute.
        dp_compute = 0.0
        if not c.sharded and c.strategy in ("zero3", "fsdp", "fsdp-hybrid"):
            dp_exposed, owned, dp_compute = self.unit_dp(c, m, per_stage[0][0], per_stage[0][1])
            optimizer = per_param * owned
        elif not c.sharded:
            if grad_group > 1 and (c.strategy == "ddp" or self.base.parallelism.zero_impl == "deepspeed"):
                # Data parallelism alone (predict plays the data-parallel engine): its buckets and copies.
                dp_exposed, dp_compute = self.flat_dp(c, gc, m, tab.backward)
            elif grad_group > 1:
                # Data parallelism alone (predict plays the data-parallel engine): stage 0's buckets as before;
                # plain DDP over NCCL's SHM transport all-reduces after the backward (as predict).
                total, last_one, gather_total, first_gather = self.dp_collectives(gc, c.strategy, numel0)
                hide = per_stage[0][1] if overlap and not self._shm_after_backward(c) else 0.0
                dp_exposed = max(last_one, total - hide)
                # The part hidden behind the backward slows it as the engine plays compute beside a
                # collective (overlap_contention per hidden second, as _stream_exposed charges zero3's).
                hidden = max(0.0, total - dp_exposed)
                dp_exposed += overlap_contention(self.base.calibration.overlap_slowdown) * hidden
                if c.strategy in ("zero1", "fsdp"):
                    # Steady state: gathered during the next step's first forward (overlap), else after the update.
                    dp_exposed += first_gather if overlap or c.strategy == "fsdp" else gather_total
            # A sharded optimizer updates the parameters / (dp x cp) per GPU (as predict).
            optimizer = stage_optimizer_s(per_param, numel0, 0, layout)
        else:
            # Every stage updates its own parameters (predict's stage_optimizer_s: a sharded optimizer
            # the dense ones / (dp x cp) and its routed experts / edp) once its reductions end, after
            # its last backward, which ends ``drain`` before stage 0's: the step ends with the latest
            # of them (a stage of DeepSeek-V3's past its dense first blocks, or the last one with the
            # output layer, has more to update than stage 0). Its first forward starts ``fill`` after
            # stage 0's (gathers launched at the step's start have that long more).
            gather_exposed = slow_early = 0.0
            collectives = grad_group > 1 or edp > 1 or layout.expert_replicas > 1
            if dual and collectives:
                # DualPipe: each stage's gathers, queued in the order its chunks first run (stages from p/2 on
                # start with chunk 1), hold its chunks' first forwards in the replay, whose waits delay the
                # stages its transfers feed (no separate stall: the interleaved offsets misplaced them, 0.92x).
                ready, gathers = zip(*(self.stage_gathers(gc, tab, assignment, s, strategy=c.strategy,
                                                          bucket=self.bucket(grad_group), grad_group=grad_group,
                                                          edp=edp, overlap=overlap,
                                                          order=(0, 1) if s < p // 2 else (1, 0))
                                       for s in range(p)))
                if any(gathers):
                    free = max(dual_end)
                    dual_end, dual_grads = self.dualpipe_s(c, tab, assignment, m, ready, gathers)
                    pipe += max(dual_end) - free
            # The engine runs compute 1 + overlap_slowdown times slower beside a collective: the reductions
            # hidden behind a stage's backwards slow them (DualPipe's too: its gathers' slowdown is in the replay).
            contention = overlap_contention(self.base.calibration.overlap_slowdown)
            # The interleaved schedule with m = p: every stage's collectives played in the two waves
            # (interleaved_all_warmup_dp_s), their stalls and slowdowns with them.
            waves = None
            # 1F1B and the interleaved schedule past m = p, where replayed: likewise in the replay.
            # Not with parameter gathers (zero1, fsdp): played at the step's start they read up to 1.033x (Mixtral
            # tp8 pp2 ep8 zero1 v4 m = 2p, 1.03x more slowdown than the engine's), the closed form's stall 0.99x.
            played = overlap and collectives and not reshards_after_forward(layout)
            replay_dp = played and replayed and c.strategy == "ddp"
            if replay_dp or (played and all_warmup):
                streams = self.stage_streams(gc, tab, assignment, strategy=c.strategy, bucket=self.bucket(grad_group),
                                             grad_group=grad_group, edp=edp,
                                             kinds=tuple((stage_params[s], per_stage[s][2],
                                                          tuple(len(layers) for layers in assignment[s]))
                                                         for s in range(p)))
            if replay_dp:
                token = self.cost(gc, "pp", "broadcast", 0.0)
                waves = self.blocking_dp_s(tab, assignment, p, v, m, streams, contention, p2p_one, token, gather)
                pipe += waves[0] - self.blocking_s(tab, assignment, p, v, m, p2p_one, token, gather)
            elif played and all_warmup:
                waves = self.interleaved_all_warmup_dp_s(tab, assignment, p, v, streams, contention,
                                                         p2p_one + gather)
                pipe += waves[0] - self.interleaved_all_warmup_s(tab, assignment, p, v, p2p_one + gather)
            fill = drain = 0.0  # forward (backward) time from stage 0 to stage s (s to 0) of one micro-batch
            own = []  # per stage: compute and its waits for its own collectives (critical_stage's)
            stage_dp = []  # per stage: reductions left, its last backward's slowdown, update, drain
            # Per kind of stage: reductions left, gather stall, slowdown of its last backward and of the
            # backwards before it, update.
            seen: dict[tuple, tuple[float, float, float, float, float]] = {}
            own_before = []  # per stage: the slowdown of the backwards before its last one
            for s, (first_forward, last_backward, experts) in enumerate(per_stage):
                # Stages alike (as the middle ones are: same parameters and chunk sizes) wait as long.
                # DualPipe: each direction's gradients complete in its last W, before the stage's end.
                leads = tuple(dual_end[s] - t for t in dual_grads[s]) if dual else None
                kind = (stage_params[s], experts, tuple(len(layers) for layers in assignment[s]), leads)
                hit = seen.get(kind)
                if hit is None and reshards_after_forward(layout) and grad_group > 1:
                    # Without pipeline stages (s is 0): every micro-batch gathers and reduce-scatters
                    # (reshard_dp charges its own contention).
                    left, stall = self.reshard_dp(gc, tab, assignment, c, layout, zero3, x[s])
                    hit = seen[kind] = (left, stall, 0.0, 0.0,
                                        stage_optimizer_s(per_param, stage_params[s], experts, layout))
                if hit is None:
                    left, stall, hidden, before = self.stage_dp(
                        gc, tab, assignment, s, strategy=c.strategy, bucket=self.bucket(grad_group),
                        grad_group=grad_group, edp=edp, overlap=overlap, leads=leads) \
                        if collectives else (0.0, 0.0, 0.0, 0.0)
                    hit = seen[kind] = (left, stall, contention * hidden, contention * before,
                                        stage_optimizer_s(per_param, stage_params[s], experts, layout))
                left, stall, slow, slow_before, update = hit
                if waves is not None:
                    left = stall = slow = slow_before = 0.0
                # An interleaved drain's earlier backwards run on every stage at once: the most slowed paces it.
                slow_early = max(slow_early, slow_before)
                gather_exposed = max(gather_exposed, stall - fill)
                stage_dp.append((left, slow, update, drain))
                own_before.append(slow_before)
                own.append(m * x[s] + left + stall + update)
                fill += first_forward
                drain += last_backward
            # When each stage's reductions end after stage 0's last backward would without the slowdowns:
            # stage s's last backward waits for stage s + 1's gradient, so a stage's slowdown delays every
            # stage before it on the drain (DeepSeek-V3 tp8 pp8 ep32 ddp: 8 x ~0.025 s, estimated 0.93x its
            # simulation without), after the earlier backwards all slowed together; its own reductions, not
            # slowed, are left that much less exposed.
            ends = [0.0] * p
            later = 0.0
            for s in reversed(range(p)):
                left, slow, _, drain_s = stage_dp[s]
                ends[s] = later + max(left, slow + slow_early) - drain_s
                later += slow
            if waves is not None:
                ends = [max(b, r) - waves[0] for b, r in zip(waves[1], waves[2])]
            if dual:
                # DualPipe: each stage's reductions (stage_dp: after its own last op) from when that op ends,
                # not along a 1F1B drain (which read the middle stages' ends up to 0.08 s early, where the
                # last reductions end: DeepSeek-V3 tp4 pp8 ep32 zero1 0.96x).
                last = max(dual_end)
                ends = [max(left, slow + slow_b) - (last - t)
                        for (left, slow, _, _), slow_b, t in zip(stage_dp, own_before, dual_end)]
            if not dual and tpm.tied_embedding and p > 1:
                # The tied embedding's gradients (a multi-token prediction module's copy too) all-reduced
                # between the first and last stage once both are done, before either updates.
                ends[0] = ends[p - 1] = max(ends[0], ends[p - 1]) + \
                    self.cost(gc, "emb", "all_reduce", tpm.embedding_numel_per_rank * g)
            reduce_exposed = max(ends)
            # The figures reported are the critical stage's, as predict's headline (critical_stage).
            critical = heaviest_stage(own)
            dp_exposed = reduce_exposed + gather_exposed
            # What the step waits for of the updates after the exposed reductions: the latest-ending
            # stage's update, less its lead on the exposed reductions.
            optimizer = max(end + update for end, (_, _, update, _) in zip(ends, stage_dp)) - reduce_exposed
        pipe += dp_compute
        if dual:
            compute_k = sum(n * sum(tab.compute[i] for i in layers) for layers, n in stage_chunks[critical])
            tp_exposed_k = sum(n * sum(tab.tp_exposed[i] for i in layers) for layers, n in stage_chunks[critical])
        else:
            _, compute_sums, exposed_sums = self.stage_work(tab, assignment, v)
            compute_k = m * compute_sums[critical]
            tp_exposed_k = m * exposed_sums[critical]
        # Its chunks' once-a-step FP8 weight casts (LayerWork.first_forward_s) are its compute too.
        compute_k += sum(tab.first_forward[i] for layers in assignment[critical] for i in layers) + dp_compute
        if dual:
            # The two parameter copies' gradients summed between each stage and its mirror after the
            # last backward, behind the stage's data-parallel collectives (the embedding's among them):
            # the slowest pair, on the communicator where it sits.
            shape = LayoutShape(tp=c.tp, pp=p, dp=c.dp, cp=c.cp, ep=c.ep, etp=c.etp, experts=self.model.moe is not None)
            job = self.topology(c.gpus)
            dp_exposed += max(self.cost(gc, mirror_pair_group(job, shape, r), "all_reduce",
                                        sum(tab.work[i].grad_numel for layers in assignment[r] for i in layers) * g)
                              for r in range(p // 2))
        step = pipe + p2p + dp_exposed + optimizer
        samples = global_batch / step
        tokens = samples * self.model.tokens_per_sample if self.model.tokens_per_sample else None
        peak = (gpu.peak_flops_per_s.get(self.precision.compute_dtype) or max(gpu.peak_flops_per_s.values())
                if gpu.peak_flops_per_s else None)
        model_flops = 3.0 * self.forward_flops_per_sample * global_batch
        mfu = model_flops / step / c.gpus / peak if peak else None
        return Estimate(candidate=c, step_time_s=step, memory_bytes=memory, usable_bytes=usable, compute_s=compute_k,
                        tp_exposed_s=tp_exposed_k, bubble_s=pipe - m * x[critical] if p > 1 else 0.0, p2p_s=p2p,
                        dp_exposed_s=dp_exposed, optimizer_s=optimizer, samples_per_s=samples, tokens_per_s=tokens,
                        mfu=mfu, usd_per_hour=None)


@gc_paused
@reads_profiles_once
@checked_arguments("dpsim.plan", config_settings=SETTINGS)
def plan_layouts(base: PredictConfig, *, gpus: Sequence[int], global_batch: int, tps=None, pps=None,
                 strategies=None, micro_batches=None, recomputes=None, schedules=None, sequence_parallel=None,
                 tokens: float | None = None, samples: float | None = None, budget_usd: float | None = None,
                 gpu_hour_usd: PriceOverride = None, rank_by: str = "time", top: int = 10,
                 verify: int = DEFAULT_VERIFY, verify_seconds: float | None = VERIFY_SECONDS,
                 grad_accum_fusion: bool = True,
                 failures: FailureInputs | None = None, cps=None, eps=None, etps=None,
                 tp_comm_overlap: str | None = None, tp_across_network: bool | None = None,
                 moe_a2a_overlap: bool | None = None,
                 cp_comm: str | None = None, cp_balance: bool | None = None,
                 moe_node_limit: int | None = None, degradations: Sequence[LinkDegradation] = ()) -> PlanResult:
    """Search the layouts of ``base``'s job on each GPU count (see the module docstring); the fields of
    ``base`` a calibration profile decides take its values, as in ``predict`` (:mod:`dpsim.predict.resolve`).
    A search axis left ``None`` is not given (the command line's flag left out): ``strategies``
    :data:`DEFAULT_STRATEGIES`, ``recomputes`` :data:`DEFAULT_RECOMPUTES`, ``schedules``
    :data:`DEFAULT_SCHEDULES`; a list given is the user's, refused where it cannot apply (``schedules``
    other than 1f1b with ``pps=[1]``). ``failures``: what failures cost when ``rank_by`` is ``goodput`` (default :class:`FailureInputs`);
    ``cps``/``eps``: the context- and expert-parallel sizes to search (default: :data:`DEFAULT_CPS` for a
    sequence of :data:`CP_MIN_TOKENS` or more, else 1; every divisor of an MoE's experts, else 1); ``etps``: the
    expert-tensor-parallel sizes to search (default 1); ``tokens``/``samples``: the budget to train, a number or
    the command line's text (``"1B"``, ``"300B"``: :func:`~dpsim.plan.cost.parse_count`);
    ``tp_comm_overlap``/``tp_across_network``/``cp_comm``/``cp_balance``/``moe_a2a_overlap``/``moe_node_limit``: the
    job's flags that apply to the candidates with that parallelism (a base without ``--tp``/``--cp``/``--ep`` cannot
    hold them; ``None``: ``base``'s). ``verify``: most layouts simulated, ``verify_seconds``: seconds of simulation after the first
    (``None``: no limit), see :func:`_verify`. ``degradations``: links below capacity (``--degrade``,
    :func:`~dpsim.network.degrade.parse_degradation`), checked as ``predict`` checks them and applied to every
    candidate, closed form and simulation alike.

    Run with the cyclic garbage collector paused (:func:`~dpsim.engine.pipeline.gc_paused`): estimating thousands
    of layouts creates millions of objects, none in a reference cycle, which it would only walk (~10 % of
    DeepSeek-V3's 16,384-GPU search)."""
    t0 = time.perf_counter()
    resolved = resolve(base)
    base = resolved.config
    # The layout a candidate sets itself, given on the base (the API's PredictConfig(tp=4)): the search replaced
    # it in silence (tp=4 searched every tp, ep=2 on a dense model was not even refused). gpus and micro_batch
    # are the search's own arguments (every caller's base carries them: the command line's micro-batch 1).
    default = PredictConfig().settings()
    for name in sorted(_LAYOUT_OWN - _BASE_TOLERATED, key=list(default).index):
        value = base.value_of(name)
        if value != default[name]:
            axis = _SEARCH_ARGUMENT.get(name)
            instead = (f"give {axis}=[{value!r}] to search it" if axis else
                       f"give it as plan's global_batch={value!r}" if name == "global_batch" else
                       "give recomputes=['full'] to search it" if name == "activation_checkpointing" else
                       "the search sets it for each layout")
            raise ConfigError(f"{flag_name(name)}: {short(value)} on the base config is not used by plan ({instead}); "
                              f"leave it at its default")
    if base.cluster.jobs != 1:
        # A candidate is one job's layout: the base's --jobs 2 ended in a line about '--gpus 1' no one gave.
        raise ConfigError(f"--jobs: {base.cluster.jobs} on the base config is not used by plan (it searches one job's "
                          f"layouts); leave it at 1")
    # The search's own inputs, checked as predict checks them: --global-batch 0 reached Layout's
    # assertion (a traceback), --tokens 1e300 printed a 1.6e+294-s time to train.
    if global_batch is None:
        raise ConfigError("--global-batch: the layouts are searched for one global batch; give it "
                          "(samples per optimizer step, e.g. --global-batch 1024)")
    # numpy's integers (np.arange, a DataFrame's column) as Python's, as PredictConfig and sweep take them: a plan
    # over gpus=np.array([64]) or global_batch=np.int64(256) was refused "np.int64(256) is not valid".
    global_batch = plain_number(global_batch, int)
    top, verify = plain_number(top, int), plain_number(verify, int)
    # A budget as the command line's text (--tokens 1B), as dpsim.sweep and dpsim.goodput take it: plan alone
    # refused tokens="1B".
    tokens, samples = (parse_count(v, flag) if isinstance(v, str) else v
                       for v, flag in ((tokens, "--tokens"), (samples, "--samples")))
    verify_seconds, budget_usd, tokens, samples = (plain_number(v, float) for v in (verify_seconds, budget_usd,
                                                                                    tokens, samples))
    gpus, tps, pps, cps, eps, etps, micro_batches = (_plain_ints(v) for v in (gpus, tps, pps, cps, eps, etps,
                                                                               micro_batches))
    check_value("global_batch", global_batch)
    # A single name is a one-value axis, as a single number is (_plain_ints) and as sweep takes both.
    strategies, recomputes, schedules = ([v] if isinstance(v, str) else v for v in (strategies, recomputes, schedules))
    strategies, recomputes, schedules = (canonical_choices(v, c) for v, c in (
        (strategies, PLAN_DP_STRATEGIES), (recomputes, PLAN_RECOMPUTES), (schedules, PLAN_SCHEDULES)))
    # The job's choices in any letter case, as PredictConfig takes the same fields (--cp-comm A2A was refused).
    tp_comm_overlap, cp_comm = canonical_name("tp_comm_overlap", tp_comm_overlap), canonical_name("cp_comm", cp_comm)
    check_search(gpus=gpus, tps=tps, pps=pps, cps=cps, eps=eps, etps=etps, micro_batches=micro_batches,
                 strategies=strategies, recomputes=recomputes, schedules=schedules, top=top, verify=verify,
                 verify_seconds=verify_seconds,
                 budget_usd=budget_usd, gpu_hour_usd=gpu_hour_usd)
    # The job's own flags, by PredictConfig's rules for the same fields: from Python, tp_comm_overlap="x"
    # ended in Layout's assertion, sequence_parallel=[True] in a TypeError, and a string where a bool
    # belongs (tp_across_network="no") was taken as true.
    for name, value in (("sequence_parallel", sequence_parallel), ("tp_comm_overlap", tp_comm_overlap),
                        ("tp_across_network", tp_across_network), ("moe_a2a_overlap", moe_a2a_overlap),
                        ("cp_comm", cp_comm), ("cp_balance", cp_balance), ("grad_accum_fusion", grad_accum_fusion),
                        ("moe_node_limit", moe_node_limit)):
        if value is not None or name == "grad_accum_fusion":
            check_value(name, value)
    for flag, budget in (("--tokens", tokens), ("--samples", samples)):
        if budget is not None:
            check_number(budget, flag, 1, MAX_TOKENS)  # at least one, as the command line's parse_count
    rank_by = canonical_choice(rank_by, RANKINGS)
    if rank_by not in RANKINGS:
        raise ConfigError(f"--rank: {rank_by!r} is not known; choose one of {', '.join(RANKINGS)}")
    if rank_by in ("cost", "goodput") and tokens is None and samples is None:
        raise ConfigError(f"--rank: {rank_by} needs a budget to train; give --tokens (or --samples)")
    if failures is not None and rank_by != "goodput":
        raise ConfigError(f"--mtbf-*/--restart/--replace/--checkpoint-bandwidth: apply to --rank goodput, not "
                          f"--rank {rank_by}")
    if rank_by == "goodput" and failures is None:
        failures = FailureInputs()
    if budget_usd is not None and tokens is None and samples is None:
        raise ConfigError("--budget-usd: needs --tokens (or --samples) to cost the training")
    # predict's own checks of --degrade (a tuple of LinkDegradation, at most MAX_REPEATED_FLAGS, what all of one
    # link's leave it at least MIN_DEGRADED_FRACTION): one validator, in the variability spec that carries them.
    degradations = VariabilitySpec(degradations=degradations).degradations
    planner = Planner(base, grad_accum_fusion=grad_accum_fusion, tp_comm_overlap=tp_comm_overlap,
                      tp_across_network=tp_across_network, cp_comm=cp_comm, moe_a2a_overlap=moe_a2a_overlap,
                      cp_balance=cp_balance, moe_node_limit=moe_node_limit, degradations=degradations,
                      profile=resolved.profile)
    if base.cluster.rack_placement == "contiguous":
        # As predict refuses it where it changes nothing: on no searched GPU count does a group straddle a rack
        # (no multi-server NVLink domain, or every count inside one). A candidate of data parallelism alone, or a
        # GPU count inside one domain, is costed (and its command printed) aligned: the same placement there.
        reasons = [rack_placement_unused(planner.topology(n)) for n in gpus]
        if all(reasons):
            why = reasons[-1]
            raise ConfigError(why if len(gpus) == 1 else why.replace(
                f"{planner.topology(gpus[-1]).n_gpus:,} GPUs fit", f"--gpus {','.join(map(str, gpus))} all fit"))
        refuse_named_links_contiguous(degradations)
    if degradations:
        for n in gpus:
            # The names against each GPU count's cluster (node<K> beyond the smallest one is named with it),
            # and --calibration's refusal, before any layout is searched.
            planner.factory(n)
    if base.execution.fp8_params and strategies:
        # A strategy named that holds FP8 primary weights in no layout (predict's rule, with and without one).
        never = [s for s in strategies if not any(planner._holds_fp8_params(s, layout=x) for x in (False, True))]
        if never:
            one = len(never) == 1
            raise ConfigError(f"--fp8-params: runs with {FP8_PARAMS_STRATEGIES}; --strategies {','.join(never)} "
                              f"{'is' if one else 'are'} not one: drop {'it' if one else 'them'} or leave "
                              f"--fp8-params out")
    if planner.moe_a2a_overlap and planner.model.moe is None:
        raise ConfigError(f"--moe-a2a-overlap: hides a mixture of experts' all-to-alls, but {planner.model.name} is "
                          f"dense; leave it out or give a model with experts= (e.g. --model mixtral-8x7b)")
    if planner.model.moe is None:
        check_no_expert_options(planner.model.name, base.parallelism)
    if eps and max(eps) > 1 and planner.model.moe is None:
        raise ConfigError(f"--ep: {','.join(map(str, eps))} splits the experts of a mixture of experts, but "
                          f"{planner.model.name} is dense; leave it out or give a model with experts (e.g. "
                          f"--model mixtral-8x7b)")
    if etps and planner.model.moe is None and (not tps or set(etps) != set(tps)):
        # As predict takes it: on a dense model an --etp is its default, --tp's own value, or refused. `plan --tp
        # 2,4 --etp 1` searched tp 2 and 4 (each refused by predict with that --etp) while `--etp 2,4` was refused.
        taken = f"--etp {','.join(map(str, tps))}, the --tp searched" if tps else "none without --tp"
        raise ConfigError(f"--etp: {','.join(map(str, etps))} sets how a mixture of experts' experts are split, but "
                          f"{planner.model.name} is dense (no expert layers; as predict, the search takes only "
                          f"--etp equal to --tp, its default: {taken}); leave it out or give a model with experts "
                          f"(e.g. --model mixtral-8x7b)")
    if pps and max(pps) == 1 and schedules and set(schedules) - {"1f1b"}:
        # A layout without a pipeline has no schedule: `plan --pp 1 --schedules dualpipe` searched 1F1B only.
        # ``schedules`` is None unless given (the command line's default too), so a given list is blamed.
        raise ConfigError(f"--schedules: {','.join(schedules)} applies only to pipeline-parallel layouts, and --pp "
                          f"{','.join(map(str, pps))} searches none; give --pp 2 or more, or leave --schedules out")
    if planner.cp_comm != "p2p" and max(planner.cps(cps)) == 1:
        # As --no-cp-balance below: `plan --cp-comm a2a` on a short sequence searched no cp and dropped it.
        raise ConfigError(f"--cp-comm: {planner.cp_comm!r} applies only with context parallelism, and the search has "
                          f"none; give --cp 2 or more (searched by default for a sequence of {CP_MIN_TOKENS:,} tokens "
                          f"or more), or leave it out")
    if not planner.cp_balance and max(planner.cps(cps)) == 1:
        raise ConfigError(f"--no-cp-balance: applies only with context parallelism, and the search has none; give "
                          f"--cp 2 or more (searched by default for a sequence of {CP_MIN_TOKENS:,} tokens or more), "
                          f"or leave it out")
    counts = {"candidates": 0, "refused_by_placement": 0, "do_not_fit": 0, "over_budget": 0, "ranked": 0,
              "verified": 0}
    fitting: list[Estimate] = []
    closest: Estimate | None = None
    cheapest: Estimate | None = None
    searches = []
    uncalibrated: dict[str, list] = {}
    for n in gpus:
        cands, info = planner.candidates(n, tps=tps, pps=pps, strategies=strategies, micro_batches=micro_batches,
                                         recomputes=recomputes, schedules=schedules,
                                         sequence_parallel=sequence_parallel, global_batch=global_batch,
                                         cps=cps, eps=eps, etps=etps)
        counts["candidates"] += len(cands)
        counts["refused_by_placement"] += info["refused_by_placement"]
        if base.execution.fp8_params:
            counts["no_fp8_params"] = counts.get("no_fp8_params", 0) + info["no_fp8_params"]
        if counts["candidates"] > MAX_PLAN_CANDIDATES:
            raise ConfigError(f"--gpus: {counts['candidates']:,}+ layouts to search is not valid; expected at most "
                              f"{MAX_PLAN_CANDIDATES:,}: narrow the search with fewer --gpus, --tp, --pp, "
                              f"--micro-batches, --recompute or --schedules values")
        searches.append((n, cands))
    if not counts["candidates"] and counts.get("no_fp8_params"):
        raise ConfigError(f"--fp8-params: runs with {FP8_PARAMS_STRATEGIES}, and no layout searched on --gpus "
                          f"{','.join(map(str, gpus))} has one (ddp, zero3 and FSDP1 without --tp/--pp/--cp keep "
                          f"16-bit weights); add GPUs or stages, or leave --fp8-params out")
    if not counts["candidates"]:
        # Nothing to estimate: the flags contradict each other or the model (--tp 3 on 16 GPUs, a
        # --micro-batches that divides no global batch). It used to print "no layout fits; add GPUs",
        # exit 0, as though memory were the reason.
        raise ConfigError(_no_candidate_message(planner, gpus, global_batch, counts["refused_by_placement"],
                                                dict(tps=tps, pps=pps, cps=cps, eps=eps, etps=etps,
                                                     micro_batches=micro_batches, strategies=strategies,
                                                     recomputes=recomputes, schedules=schedules,
                                                     sequence_parallel=sequence_parallel)))
    # predict's own rule (one validator): the limit needs --moe-a2a hierarchical and a layout with --ep 2 or
    # more; ``plan --moe-node-limit 4 --ep 1`` would otherwise have dropped it in silence.
    check_moe_node_limit(planner.moe_node_limit, ep=max(c.ep for _, cands in searches for c in cands),
                         moe_a2a=base.parallelism.moe_a2a)
    if planner.moe_a2a_overlap and not any(c.moe_a2a_overlap for _, cands in searches for c in cands):
        # As --cp-comm above: `plan --moe-a2a-overlap --ep 1`, or --pp 2 with --schedules 1f1b, searched no
        # layout the overlap applies to and dropped the flag in silence (predict refuses both).
        raise ConfigError(f"--moe-a2a-overlap: applies to layouts with --ep 2 or more, without pipeline stages or "
                          f"with a schedule that pairs a forward and a backward ({', '.join(A2A_OVERLAP_SCHEDULES)}), "
                          f"and the search has none; widen --ep, --pp or --schedules, or leave it out")
    a2a = planner.base.parallelism.moe_a2a
    if a2a != "flat" and not any(c.ep > 1 for _, cands in searches for c in cands):
        # As --moe-a2a-overlap above: `plan --moe-a2a hierarchical --ep 1` searched no layout with an all-to-all
        # and dropped the flag in silence (predict refuses it with --ep 1).
        raise ConfigError(f"--moe-a2a: {a2a!r} shapes the expert-parallel all-to-all of layouts with --ep 2 or more, "
                          f"and the search has none; widen --ep, or leave it out")
    if base.cluster.rack_placement == "contiguous" and not any(
            planner.contiguous(n) and (max(c.tp, c.pp, c.cp, c.ep) > 1 or c.zero_group is not None)
            for n, cands in searches for c in cands):
        # As predict refuses it for data parallelism alone: every candidate would be costed aligned.
        raise ConfigError("--rack-placement: 'contiguous' changes nothing here: every searched layout is data "
                          "parallelism alone (no group smaller than its job) on GPUs spanning several NVLink "
                          "domains; widen --tp, --pp, --cp or --ep (or search fsdp-hybrid), or give aligned (the "
                          "default) or leave it out")
    routing = planner.base.parallelism.moe_routing
    if (planner.model.moe is not None and not parse_routing(routing).uniform
            and planner.base.parallelism.moe_capacity_factor is None
            and not any(c.ep > 1 for _, cands in searches for c in cands)):
        # As predict refuses it (check_all_to_all_options): with --ep 1 every rank holds every expert, its
        # work is the mean, and dpsim.plan(PredictConfig(moe_routing="gini:0.5"), eps=[1]) dropped the routing.
        raise ConfigError(f"--moe-routing: {routing!r} loads the experts unevenly, which moves the step of layouts "
                          f"with --ep 2 or more, and the search has none; widen --ep, or leave it out")
    # Ranked by step alone (no budget, failures or calibration profile, whose figures or refusals come only
    # with a finished estimate): a fitting layout's estimate is finished only if its floor could rank it
    # where the verification or the table reads (_Ranking); the rest are counted, never printed.
    lazy = (rank_by == "time" and failures is None and budget_usd is None and tokens is None and samples is None
            and base.calibration.profile is None)
    pending: list[tuple[float, int, Any, float | None]] = []
    for n, cands in searches:
        try:
            price = gpu_hour_price(planner.topology(n).spec.gpu, gpu_hour_usd)
        except ConfigError:
            price = None
        for c in cands:
            try:
                if lazy:
                    steps = planner.estimate_steps(c, global_batch=global_batch)
                    try:
                        floor = next(steps)
                    except StopIteration as done:
                        e = done.value
                    else:
                        pending.append((floor, len(fitting) + len(pending), steps, price))
                        continue
                else:
                    e = planner.estimate(c, global_batch=global_batch)
            except UncalibratedLinkClass as exc:
                # A layout with a communicator on a link class --calibration did not measure (tp or a shard
                # group inside one server, with a profile measured across servers), as predict refuses it;
                # the search ranks the rest (one such row, the zero3 search's MiCS group, refused all of it).
                counts["refused_by_placement"] += 1
                uncalibrated.setdefault(exc.link_class, [0, str(exc)])[0] += 1
                continue
            if not e.fits:
                counts["do_not_fit"] += 1
                if closest is None or e.memory_bytes < closest.memory_bytes:
                    closest = e
                continue
            e = _priced(e, price, tokens=tokens, samples=samples)
            if failures is not None:
                e = planner.through_failures(e, failures)
            if budget_usd is not None and (e.cost_usd is None or e.cost_usd > budget_usd):
                counts["over_budget"] += 1
                # What a budget that ranks something would be: the layout closest to fitting in memory, named
                # when every fitting layout cost more, was no answer to a budget.
                if e.cost_usd is not None and (cheapest is None or e.cost_usd < cheapest.cost_usd):
                    cheapest = e
                continue
            fitting.append((len(fitting) + len(pending), e) if lazy else e)
    if lazy:
        fitting = _Ranking(fitting, pending, global_batch=global_batch, rank_by=rank_by)
    if uncalibrated and not fitting and not counts["do_not_fit"]:
        (_, message), = list(uncalibrated.values())[:1]
        raise ConfigError(f"{message} (every layout searched has one; widen --gpus, --tp, --pp or --strategies, "
                          f"or give a profile that measured it)")
    if failures is not None and fitting and not any(e.reliability.expected_wall_s < math.inf for e in fitting):
        raise ConfigError(_never_done_message(fitting, failures))
    if not lazy:
        fitting.sort(key=lambda e: _key(e, rank_by))
    verified, verification = _verify(planner, base, fitting, rank_by=rank_by, verify=verify,
                                     verify_seconds=verify_seconds, failures=failures, tokens=tokens, samples=samples)
    simulated = {id(e): v for e, v in verified}
    ranked_verified = sorted((v for v in simulated.values() if v is not None), key=lambda e: _key(e, rank_by))
    # A layout the simulation finds does not fit is dropped; one it cannot play stays an estimate. Only the
    # first of the rest are listed: read in order as far as they are (a _Ranking finishes no more).
    rest = []
    for e in fitting:
        if len(ranked_verified) + len(rest) >= max(top, 1):
            break
        if id(e) not in simulated or simulated[id(e)] is None and not verification["refused"].get(id(e)):
            rest.append(e)
    ranked = tuple(ranked_verified + rest)[:max(top, 1)]
    # Every fitting layout is ranked but those the simulation found do not fit.
    counts["ranked"] = len(fitting) - len(verification["refused"])
    del verification["refused"]
    counts["verified"] = len(ranked_verified)
    return PlanResult(ranked=ranked, counts=counts, wall_s=time.perf_counter() - t0, rank_by=rank_by,
                      failures=failures, best_memory=None if fitting else cheapest or closest, base=base,
                      verification=verification, degradations=planner.degradations,
                      uncalibrated={lc: n for lc, (n, _) in uncalibrated.items()})


class _Ranking:
    """The fitting layouts in :func:`_key` order (``rank_by`` ``time``, unpriced), as ``sorted`` gives them (ties
    in search order), their estimates finished only as far as they are read: a layout whose floor
    (:meth:`Planner.estimate_steps`) ranks it behind the next finished one cannot come before it, so the
    verification and the table, which read the first few dozen, leave most of a large search's
    data-parallel costing undone. Its length is every fitting layout's."""

    def __init__(self, done: list[tuple[int, Estimate]], pending: list[tuple[float, int, Any, float | None]], *,
                 global_batch: int, rank_by: str):
        assert rank_by == "time", "only the step ranks by a floor of the step"
        self._rank_by = rank_by
        self._global_batch = global_batch
        self._done = [(_key(e, rank_by), order, e) for order, e in done]
        heapq.heapify(self._done)
        # _key's first item (1 / samples per second, as _priced leaves it without a budget) at the floor,
        # no later than at the step: the same operations, each non-decreasing in the step.
        self._pending = [(self._first_key(floor), order, steps, price) for floor, order, steps, price in pending]
        heapq.heapify(self._pending)
        self._read: list[Estimate] = []
        self._n = len(done) + len(pending)

    def _first_key(self, step_s: float) -> float:
        return 1.0 / (self._global_batch / step_s) if step_s > 0 else 0.0

    def __len__(self) -> int:
        return self._n

    def _next(self) -> Estimate:
        while self._pending and (not self._done or self._done[0][0][0] >= self._pending[0][0]):
            floor, order, steps, price = heapq.heappop(self._pending)
            try:
                # A tighter floor (estimate_steps may yield several, each no lower than the last): back in line.
                tighter = self._first_key(next(steps))
            except StopIteration as finished:
                e = _priced(finished.value, price, tokens=None, samples=None)
            else:
                assert tighter >= floor, "a floor below the one before"
                heapq.heappush(self._pending, (tighter, order, steps, price))
                continue
            assert e.fits and _key(e, self._rank_by)[0] >= floor, "an estimate below its floor"
            heapq.heappush(self._done, (_key(e, self._rank_by), order, e))
        return heapq.heappop(self._done)[2]

    def __iter__(self):
        k = 0
        while k < self._n:
            if k == len(self._read):
                self._read.append(self._next())
            yield self._read[k]
            k += 1


def _with_step(planner: Planner, e: Estimate, pred: Prediction | None, step_s: float, *, failures, tokens,
               samples) -> Estimate:
    """``e`` at another step (a simulation's ``pred``, or a bound with ``pred`` ``None``): its
    throughput, MFU, time to train, cost and, with ``failures``, its time through failures."""
    if pred is not None:
        v = dataclasses.replace(e, step_time_s=pred.step_time_s, samples_per_s=pred.samples_per_s,
                                tokens_per_s=pred.tokens_per_s, mfu=pred.mfu, memory_bytes=pred.memory.total_bytes,
                                verified=pred)
    else:
        scale = e.step_time_s / step_s
        v = dataclasses.replace(e, step_time_s=step_s, samples_per_s=e.samples_per_s * scale,
                                tokens_per_s=e.tokens_per_s * scale if e.tokens_per_s is not None else None,
                                mfu=e.mfu * scale if e.mfu is not None else None)
    v = _priced(v, e.usd_per_hour / e.candidate.gpus if e.usd_per_hour else None, tokens=tokens, samples=samples)
    return planner.through_failures(v, failures) if failures is not None else v


FLOOR_MARGIN = 1e-9
"""Relative margin a floor of the step keeps below the sum it is (:meth:`Planner.estimate_steps`): the replay
adds the same op times one by one, in another order, and may round below it."""
LINEAR_TOLERANCE = 1e-9
"""Relative difference within which two successive increments of a replay count as equal
(:func:`dualpipe_extrapolated`): float rounding of sums of thousands of op times, far below any
difference a schedule's shape makes."""


def dualpipe_extrapolated(replay: Callable[[int], tuple[list[float], list[list[float]]]], p: int, m: int
                          ) -> tuple[list[float], list[list[float]]]:
    """``replay(m)`` (:func:`~dpsim.strategies.pipeline.dualpipe_stage_times` of ``p`` stages and ``m``
    micro-batches), extrapolated past :data:`MAX_REPLAY_OPS` from a replay of its steady state.

    The replay costs ~3·p·m steps (a search of Mixtral-8x7B on 256 GPUs replayed DualPipe for hundreds of
    layouts of up to thousands of micro-batches: 412 of its 598 s, 2026-12-07). Two more micro-batches (one
    each way) add one F&B pair per stage to DualPipe's steady middle, so once the fill and drain are
    settled every stage's end and each direction's last ``W`` grow by the same seconds each time: the
    replays of ``m0``, ``m0 + 2`` and ``m0 + 4`` micro-batches (``m0``: the most within the replay limit,
    at least ``2p``) must show two increments equal within :data:`LINEAR_TOLERANCE` of the times, else the
    whole ``m`` is replayed. Up to the limit, the replay itself (bit for bit as before)."""
    m0 = max(2 * p, (MAX_REPLAY_OPS // (2 * p) - 4) // 2 * 2)
    if 2 * p * m <= MAX_REPLAY_OPS or m <= m0 + 4 or m % 2:
        return replay(m)
    runs = [replay(n) for n in (m0, m0 + 2, m0 + 4)]
    flat = [[*end, *(t for pair in grads for t in pair)] for end, grads in runs]
    a, b, c = flat
    if not all(abs((z - y) - (y - x)) <= LINEAR_TOLERANCE * max(abs(z), 1e-300) for x, y, z in zip(a, b, c)):
        return replay(m)
    k = (m - m0 - 4) // 2
    out = [z + k * (z - y) for y, z in zip(b, c)]
    return out[:p], [out[p + 2 * s:p + 2 * s + 2] for s in range(p)]


def simulation_work(planner: Planner, c: Candidate) -> float:
    """What simulating ``c`` (its ``predict``) costs, in pipeline slots (:data:`VERIFY_WORK`): with a layout,
    its stages x chunks x micro-batches (the pipeline engine plays one step); with data parallelism alone,
    its micro-batches x ``--steps`` x the model's layers, weighted by :data:`DP_WORK_PER_LAYER`; the
    micro-batches being the few an extrapolated prediction simulates (:func:`predict_work`)."""
    return predict_work(layout=c.sharded, pp=c.pp, schedule=c.schedule, virtual_stages=c.virtual_stages,
                        micro_batches=c.global_batch // (c.micro_batch * c.dp), strategy=c.strategy,
                        steps=planner.base.workload.steps, layers=len(planner.model.layers),
                        input_rate=bool(planner.base.workload.input_samples_per_s))


def predict_work(*, layout: bool, pp: int, schedule: str, virtual_stages: int, micro_batches: int, strategy: str,
                 steps: int, layers: int, input_rate: bool = False) -> float:
    """One prediction's simulation cost in pipeline slots, the one count ``plan`` (:func:`simulation_work`) and
    ``sweep`` (:func:`dpsim.plan.sweep.point_work`) bound: with a layout, stages x chunks x micro-batches (the
    pipeline engine plays one step); with data parallelism alone, micro-batches x ``steps`` x layers, weighted
    by :data:`DP_WORK_PER_LAYER`. The micro-batches are those simulated: where the prediction extrapolates its
    steady state (:func:`~dpsim.predict.extrapolate.extrapolated_counts`; ``input_rate``: a data loader's rate
    is set, which keeps every micro-batch) the four sampled counts' sum, whatever ``micro_batches`` is, as
    the prediction's cost is (a 16M-sample sweep point was refused, or plan's verification stopped, for work
    it never does)."""
    counts = extrapolated_counts(micro_batches, layout=layout, pp=pp, schedule=schedule,
                                 virtual_stages=virtual_stages, steps=steps, input_rate=input_rate)
    simulated = micro_batches if counts is None else sum(counts)
    if layout:
        return float(pp * (2 if schedule == "dualpipe" else virtual_stages) * simulated)
    return simulated * steps * layers * DP_WORK_PER_LAYER.get(strategy, DP_WORK_PER_LAYER_SHARDED)


def _verify(planner: Planner, base: PredictConfig, fitting: list[Estimate], *, rank_by: str, verify: int,
            verify_seconds: float | None, failures, tokens, samples) -> tuple[list[tuple[Estimate, Estimate | None]], dict]:
    """Simulate (``predict``) the fitting layouts, best estimate first, while one could still beat the
    best simulated so far: a layout estimated at ``e`` simulates in no less than ``e /``
    ``ESTIMATE_BOUND[1]``, so the first whose time at that bound ranks behind the best simulated one
    ends it (the estimates are in order, so every later one would too). Also ended by ``verify``
    layouts, by :data:`VERIFY_WORK` (the first layout whose simulation would pass it, counted by
    :func:`simulation_work`) or, after the first, ``verify_seconds`` of simulation. Returns ``(estimate, simulated or
    None)`` pairs and what was done (:attr:`PlanResult.verification`)."""
    t0 = time.perf_counter()
    high = ESTIMATE_BOUND[1]
    out: list[tuple[Estimate, Estimate | None]] = []
    refused: dict[int, bool] = {}
    best = None
    stopped = "none" if not fitting or verify == 0 else "bound"
    within = 0
    spent = 0.0
    for e in fitting:
        if best is not None:
            bound = _with_step(planner, e, None, e.step_time_s / high, failures=failures, tokens=tokens,
                               samples=samples)
            if not _key(bound, rank_by) < best:
                break
        within += 1
        if stopped != "bound":
            continue  # counting the layouts within the bound that were not simulated
        if len(out) >= verify:
            stopped = "count"
            continue
        if out and verify_seconds is not None and time.perf_counter() - t0 > verify_seconds:
            stopped = "time"
            continue
        work = simulation_work(planner, e.candidate)
        if spent + work > VERIFY_WORK:
            stopped = "work"
            continue
        spent += work
        try:
            # Within plan_layouts' scope: the profile read once for the search (dpsim.profile.once).
            pred = predict(e.candidate.config(base), degradations=planner.degradations)
        except DpsimError:
            out.append((e, None))
            continue
        if not pred.memory.fits:  # the one memory model: not expected, but never listed as fitting
            refused[id(e)] = True
            out.append((e, None))
            continue
        v = _with_step(planner, e, pred, pred.step_time_s, failures=failures, tokens=tokens, samples=samples)
        out.append((e, v))
        key = _key(v, rank_by)
        best = key if best is None or key < best else best
    return out, {"simulated": sum(1 for _, v in out if v is not None), "within_bound": within,
                 "stopped_by": stopped, "bound": list(ESTIMATE_BOUND),
                 "refused": refused}


_SEARCH_FLAGS = {"tps": "--tp", "pps": "--pp", "cps": "--cp", "eps": "--ep", "etps": "--etp",
                 "micro_batches": "--micro-batches", "strategies": "--strategies", "recomputes": "--recompute",
                 "schedules": "--schedules", "sequence_parallel": "--sequence-parallel"}


def _given(name: str, value: Any) -> str:
    if isinstance(value, bool):
        return _SEARCH_FLAGS[name] if value else "--no-" + _SEARCH_FLAGS[name][2:]
    return f"{_SEARCH_FLAGS[name]} {','.join(map(str, value))}"


def _no_candidate_message(planner: Planner, gpus: Sequence[int], global_batch: int, refused: int,
                          search: dict[str, Any]) -> str:
    """Why the search has no layout at all: the restricting flags without which it would have some."""
    # None is "not given" (the command line passes None for a flag left out), so every list here was given.
    given = {k: v for k, v in search.items() if v is not None and (v or isinstance(v, bool))}

    def count(without: str | None) -> int:
        kwargs = {k: v for k, v in given.items() if k != without}
        return sum(len(planner.candidates(n, global_batch=global_batch, **kwargs)[0]) for n in gpus)

    culprits = [name for name in given if count(name)]
    where = f"--gpus {','.join(map(str, gpus))} and --global-batch {global_batch}"
    if given:
        first, *others = culprits or list(given)
        value = _given(first, given[first]).split(" ", 1)
        joined = " or " if culprits else " with "
        named = (f"{value[0]}: {value[1] if len(value) > 1 else 'set'}"
                 + "".join(f"{joined}{_given(k, given[k])}" for k in others))
        # The schedules' own rules on the micro-batches per replica (m), which a --schedules dualpipe that
        # found no layout did not name (_schedules: DualPipe needs an even p and an even m >= 2p).
        rules = {"dualpipe": "dualpipe needs an even --pp and an even number of micro-batches per replica, at "
                             "least 2 x --pp",
                 "1f1b-interleaved": "1f1b-interleaved needs micro-batches per replica a multiple of --pp"}
        needs = [rules[s] for s in (given.get("schedules") or ()) if s in rules and "schedules" in (culprits or given)]
        # And the strategies' (strategy_variants): where DeepSpeed ZeRO-3 and HSDP run.
        strategy_rules = {"zero3": "zero3 runs without pipeline stages or expert parallelism (--pp 1, --ep 1)",
                          "fsdp-hybrid": "fsdp-hybrid needs more data-parallel ranks than one server holds (its "
                                         "shard groups are whole servers' ranks below them; with --ep, a group "
                                         "whose tp x group x cp ranks ep x etp divides)"}
        if "strategies" in (culprits or given):
            needs += [strategy_rules[s] for s in given["strategies"] if s in strategy_rules]
        # And the recomputation modes' (_variants): the layout path's modes need a sharded layout, moe experts.
        recomputes = given.get("recomputes") or ()
        if "recomputes" in (culprits or given):
            dense = planner.model.moe is None
            if set(recomputes) & ({"op", "megatron"} if dense else {"op", "megatron", "moe"}):
                needs.append("op, megatron and moe recompute layouts with --tp, --pp, --cp or --ep above 1")
            if "moe" in recomputes and dense:
                needs.append(f"moe recomputes a mixture of experts' layers, and {planner.model.name} is dense")
        return (f"{named} leaves no layout of {planner.model.name} on {where} "
                f"(a size must divide the GPUs, the heads or the blocks, and micro-batch x data-parallel "
                f"replicas the global batch{''.join('; ' + n for n in needs)}{_too_long(planner)}); "
                f"widen or drop {'it' if len(culprits) == 1 else 'them'}")
    return (f"--gpus: no layout of {planner.model.name} exists on {where}"
            + (f" ({refused} refused by the model's shape or the placement)" if refused else "")
            + "; change the GPU count or the global batch (a multiple of the data-parallel replicas x micro-batch"
            + f"{_too_long(planner)})")


def _too_long(planner: Planner) -> str:
    """The layouts left out for more micro-batches per replica than predict simulates, if any."""
    if not planner.too_long:
        return ""
    return (f"; layouts with more micro-batches per replica than predict simulates are left out (micro-batches "
            f"x steps at most {MAX_SIMULATED_MICRO_BATCHES:,} without a pipeline, stages x chunks x micro-batches at "
            f"most {MAX_PIPELINE_SLOTS:,} with one; past {EXTRAPOLATE_ABOVE} micro-batches a steady state is "
            f"extrapolated from a few instead, but not with a data loader's rate, nor where those few pass the "
            f"limit): a smaller global batch, more GPUs or fewer steps")


def _never_done_message(fitting: list[Estimate], failures: FailureInputs) -> str:
    """One line for a search whose every fitting layout fails faster than it restarts: ranking
    them by a time to train that is infinite for all would name a 'best' layout that never ends."""
    r = max((e.reliability for e in fitting), key=lambda r: r.mtbf_s - r.restart_s)
    rates = failures.rates
    given = [f"{flag} {format_seconds(v)}" for flag, v, default in (
        ("--mtbf-gpu", rates.gpu_mtbf_s, DEFAULT_GPU_MTBF_S), ("--mtbf-node", rates.node_mtbf_s, DEFAULT_NODE_MTBF_S),
        ("--mtbf-link", rates.link_mtbf_s, DEFAULT_LINK_MTBF_S)) if v != default]
    if failures.restart_s != DEFAULT_RESTART_S:
        given.append(f"--restart {format_seconds(failures.restart_s)}")
    named = ", ".join(given) if given else "the default MTBFs and --restart"
    return (f"{named}: none of the {len(fitting):,} layouts that fit would finish training: the best "
            f"of them fails every {format_seconds(r.mtbf_s)} and takes {format_seconds(r.restart_s)} to restart "
            f"and read its checkpoint; give longer MTBFs (e.g. --mtbf-node 1000h) or a shorter --restart")


def _priced(e: Estimate, price: float | None, *, tokens, samples) -> Estimate:
    usd_per_hour = price * e.candidate.gpus if price is not None else None
    ttt = None
    if tokens is not None and e.tokens_per_s:
        ttt = tokens / e.tokens_per_s
    elif samples is not None and e.samples_per_s:
        ttt = samples / e.samples_per_s
    cost = usd_per_hour * ttt / 3600.0 if usd_per_hour is not None and ttt is not None else None
    return dataclasses.replace(e, usd_per_hour=usd_per_hour, time_to_train_s=ttt, cost_usd=cost)


_SIMPLER = {"ddp": 0, "zero1": 1, "fsdp": 2, "fsdp-hybrid": 3, "zero3": 4}
"""Between layouts that tie, the simpler data-parallel strategy first."""


def _key(e: Estimate, rank_by: str) -> tuple:
    # A smaller HSDP shard group first: fewer ranks to gather from, the same replicas' state.
    simpler = (_SIMPLER.get(e.candidate.strategy, len(_SIMPLER)), e.candidate.zero_group or 0, e.memory_bytes)
    if rank_by == "cost":
        return (e.cost_usd if e.cost_usd is not None else math.inf, e.step_time_s, *simpler)
    if rank_by == "goodput" and e.reliability is not None:
        cost = e.expected_cost_usd
        return (e.reliability.expected_wall_s, cost if cost is not None else 0.0, *simpler)
    ttt = e.time_to_train_s if e.time_to_train_s is not None else 1.0 / e.samples_per_s
    return (ttt, e.cost_usd if e.cost_usd is not None else 0.0, *simpler)
