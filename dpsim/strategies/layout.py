"""A 3D layout: tensor x pipeline x data parallelism, its stages and the work of each.

A :class:`Layout` is ``tp`` tensor-parallel ranks (:mod:`~dpsim.strategies.tensor`) times
``pp`` pipeline stages (:mod:`~dpsim.strategies.pipeline`) times ``dp`` data-parallel
replicas, times ``cp`` context-parallel ranks splitting each sequence
(:mod:`~dpsim.strategies.context`), ``tp x cp x pp x dp`` GPUs, ranked as Megatron-LM ranks
them (tensor-parallel rank fastest, then context-, then data-parallel, then pipeline:
``RankGenerator`` order ``tp-cp-ep-dp-pp`` in ``megatron/core/parallel_state.py``;
:func:`dpsim.collectives.groups.layout_communicators` places the groups on the fabric).

**Stages.** The model's blocks (transformer layers, :attr:`LayerSpec.unit`) are split
over ``pp x virtual_stages`` *virtual stages*; virtual stage ``c x pp + s`` is model chunk
``c`` of stage ``s`` (Megatron's interleaved assignment, Narayanan et al. 2021, Sec.
2.2.2, Fig. 4). By default the virtual stages get block counts that
differ by at most one, the lighter at the ends (:func:`balanced_counts`; equal counts when
they divide; when blocks are fewer than virtual stages by up to two, the end ones hold no
block and run the embedding or the head alone, as Megatron-Core's
``--account-for-embedding-in-pipeline-split`` and ``--account-for-loss-in-pipeline-split``
place them); ``--stage-layers`` gives each stage its own count, split over its chunks the
same way, or each virtual stage its own (``pp x virtual_stages`` counts; Megatron's
``--decoder-first-pipeline-num-layers`` / ``...-last-...`` generalised). The
layers before the first block (embedding) run on the first virtual stage, the layers
after the last (final norm, LM head, loss) on the last one.

**Work.** Per layer and micro-batch: the tensor-parallel shard's compute
(:class:`~dpsim.workload.compute.ComputeProfile` of the shard), the tensor-parallel
collectives the compute stream waits for, and recomputation: ``full`` re-runs each
block's forward (its collectives too) before the block's backward (Megatron's
``--recompute-granularity full --recompute-method uniform --recompute-num-layers 1``);
``selective`` re-runs the attention core only (Korthikanti et al. 2022, Sec. 5).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
import dataclasses
from dataclasses import replace

from dpsim.engine.simulate import comm_rate
from dpsim.errors import ConfigError
from dpsim.frozen import frozen_dataclass
from dpsim.hardware import GpuSpec
from dpsim.strategies.context import ContextParallel, layer_cp_comm, model_hidden
from dpsim.strategies.checkpointing import RECOMPUTE, CheckpointPolicy, checkpointed, selective_recompute_s
from dpsim.strategies.offload import offload_exposed_s
from dpsim.strategies.tensor import TP_COMM_OVERLAP, TpComm, TpModel, chunked_gemm_loss, layer_tp_comm
from dpsim.workload.compute import ComputeProfile
from dpsim.workload.fp8 import Fp8Recipe
from dpsim.workload.roofline import Efficiencies, memory_term
from dpsim.workload.spec import ModelSpec, is_mtp_unit

SCHEDULES: dict[str, str] = {
    "1f1b": "one forward one backward (PipeDream-Flush, Megatron's default): at most pp micro-batches in flight",
    "gpipe": "all forwards, then all backwards: every micro-batch in flight",
    "1f1b-interleaved": "1F1B over virtual stages (Megatron's interleaved schedule): bubble / virtual stages",
    "deepspeed": "DeepSpeed's pipeline engine (TrainSchedule): 1F1B's order in pipe steps, one blocking send or "
                 "receive at a time, gradients reduced after the pipeline",
    "zb-h1": "zero bubble ZB-H1 (Qi et al. 2024): backward split into input and weight gradients, the weight "
             "gradients filling the drain; 1F1B's memory, about a third of its bubble",
    "dualpipe": "DualPipe (DeepSeek-V3): micro-batches fed from both ends, each stage holding two stages' "
                "parameters, forward and backward chunks paired, weight gradients in the bubbles",
}
"""``--schedule`` choices."""

LAYOUT_STRATEGIES: dict[str, str] = {
    "ddp": "gradients all-reduced across the data-parallel replicas of each shard (Megatron DDP)",
    "zero1": "Megatron's distributed optimizer (ZeRO-1): gradients reduce-scattered, optimizer state "
             "sharded, updated parameters all-gathered",
    "fsdp": "parameters, gradients and optimizer state sharded across the replicas of each shard; "
            "with pipeline stages parameters gathered once per step and kept across micro-batches, without "
            "them resharded after each forward and gradients reduce-scattered every micro-batch (FSDP2 as "
            "torchtitan wraps it)",
    "zero3": "DeepSpeed ZeRO-3 over the replicas of each shard (dp x cp ranks): parameters, gradients and "
             "optimizer state partitioned, every micro-batch's forward gathering them, its backward gathering "
             "what DeepSpeed's reuse distance freed, its gradients reduce-scattered through DeepSpeed's "
             "bucket copies; no pipeline stages (DeepSpeed refuses ZeRO-2/3 with pipeline parallelism)",
    "fsdp-hybrid": "HSDP over the replicas of each shard (torchtitan's dp_replicate x dp_shard mesh under tp and pp): "
                   "fsdp within shard groups of --zero-group consecutive data-parallel ranks (its gathers and "
                   "reduce-scatters on that group), each gradient shard then all-reduced across the groups "
                   "(replicate); with --ep the routed experts sharded over the expert-data-parallel part of each "
                   "shard group and all-reduced across the same replicas",
}
"""Data-parallel strategies a tensor/pipeline layout runs over its replicas."""

PARAM_SHARDING_LAYOUT_STRATEGIES = ("fsdp", "zero3", "fsdp-hybrid")
"""Layout strategies that shard the parameters themselves (and gather them for compute)."""
OPTIMIZER_SHARDING_LAYOUT_STRATEGIES = ("zero1", "fsdp", "zero3", "fsdp-hybrid")
"""Layout strategies whose ranks hold a ``1 / shard group`` share of the optimizer state
(:attr:`Layout.shard_group`: ``dp x cp``, HSDP's ``--zero-group``)."""


def reshards_after_forward(layout: "Layout") -> bool:
    """Whether the layout's FSDP frees the gathered parameters after each forward: torchtitan's
    ``apply_fsdp`` (models/llama3/infra/parallelize.py) sets ``reshard_after_forward = not
    pp_enabled`` by default, so FSDP2 under tensor parallelism alone gathers every unit again for
    backward and keeps only its shard (and, FSDP2's default, only the gradient shard) between them,
    while under pipeline stages it keeps the gathered parameters for the step. DeepSpeed ZeRO-3
    (``zero3``, never with pipeline stages) frees every submodule after use unless it is reused soon
    (:mod:`~dpsim.strategies.deepspeed_fetch`) and reduce-scatters every micro-batch, the same shape."""
    return layout.strategy in PARAM_SHARDING_LAYOUT_STRATEGIES and layout.pp == 1


@frozen_dataclass
class Layout:
    """How one job is split: tensor x pipeline x data parallelism and how each runs."""

    tp: int = 1
    """Tensor-parallel ranks."""
    pp: int = 1
    """Pipeline stages."""
    dp: int = 1
    """Data-parallel replicas of each tensor x pipeline shard."""
    virtual_stages: int = 1
    """Model chunks per stage (interleaved schedule)."""
    schedule: str = "1f1b"
    """A key of :data:`SCHEDULES`."""
    micro_batch: int = 1
    """Samples per micro-batch."""
    micro_batches: int = 1
    """Micro-batches per replica per step."""
    sequence_parallel: bool = False
    """Megatron sequence parallelism with the tensor parallelism."""
    recompute: str = "off"
    """A key of :data:`RECOMPUTE`."""
    recompute_every: int = 1
    """With ``full`` recomputation: every ``recompute_every``-th block only."""
    tp_comm_overlap: str = "backward"
    """A key of :data:`~dpsim.strategies.tensor.TP_COMM_OVERLAP`."""
    strategy: str = "ddp"
    """A key of :data:`LAYOUT_STRATEGIES`."""
    overlap: bool = True
    """Data-parallel collectives overlap the last micro-batch's backward (Megatron's
    ``--overlap-grad-reduce``) and, for ``zero1``, the parameter all-gather the next
    step's forward (``--overlap-param-gather``)."""
    stage_blocks: tuple[int, ...] | None = None
    """Blocks per stage, or per virtual stage in virtual-stage order (``None``: :func:`balanced_counts`)."""
    bucket_elements: int | None = None
    """Parameters per data-parallel gradient bucket (``None``: Megatron's default)."""
    grad_accum_fusion: bool = True
    """Weight-gradient GEMMs accumulate into the gradient buffer; ``False``: a separate pass per
    micro-batch (:func:`gradient_accumulation_s`)."""
    cp: int = 1
    """Context-parallel ranks each sequence is split over (:mod:`~dpsim.strategies.context`)."""
    cp_comm: str = "p2p"
    """A key of :data:`~dpsim.strategies.context.CP_COMM`."""
    cp_balance: bool = True
    """Causal load balancing of the context-parallel split."""
    offload: str = "off"
    """A key of :data:`~dpsim.strategies.offload.OFFLOAD`: the sharded optimizer (and parameters), or the
    MoE layers' expert activations, on the host."""

    ep: int = 1
    """Expert-parallel ranks of a mixture of experts: carved, with ``etp``, out of the ``tp x cp x dp``
    ranks of a stage for the expert layers (Megatron-Core's definition)."""
    etp: int = 1
    """Expert-tensor-parallel ranks (each expert's width split over them)."""
    zero_impl: str = "deepspeed"
    """Whose ZeRO-1 ``zero1`` runs: ``deepspeed`` is Megatron's distributed optimizer here; ``internlm``
    InternLM's ``HybridZeroOptimizer`` over the data-parallel ranks of each tensor-parallel rank
    (:func:`~dpsim.strategies.zero.internlm_zero1`)."""
    zero_group: int | None = None
    """InternLM's ZERO1 group: that many consecutive data-parallel ranks (``None``: all of them)."""
    moe_a2a_overlap: bool = False
    """The expert-parallel all-to-alls of one micro-batch run under the compute of another where
    the schedule pairs a forward with a backward (Megatron-Core's
    ``--overlap-moe-expert-parallel-comm``; :func:`~dpsim.strategies.pipeline.a2a_pairs`)."""

    def __post_init__(self) -> None:
        for name in ("tp", "pp", "dp", "cp", "virtual_stages", "micro_batch", "micro_batches", "ep", "etp"):
            v = getattr(self, name)
            assert isinstance(v, int) and not isinstance(v, bool) and v >= 1, f"{name}: {v!r}"
        assert self.schedule in SCHEDULES and self.recompute in RECOMPUTE, (self.schedule, self.recompute)
        assert isinstance(self.recompute_every, int) and self.recompute_every >= 1
        assert self.tp_comm_overlap in TP_COMM_OVERLAP and self.strategy in LAYOUT_STRATEGIES
        assert self.zero_impl == "deepspeed" or self.strategy == "zero1", (self.zero_impl, self.strategy)
        # HSDP's shard group tiles the data-parallel ranks (predict's config refuses the rest in one line).
        assert self.strategy != "fsdp-hybrid" or (self.zero_group is not None and self.dp % self.zero_group == 0
                                                  and self.tp * self.shard_group % (self.ep * self.etp) == 0), \
            (self.zero_group, self.dp, self.ep, self.etp)

    @property
    def n_gpus(self) -> int:
        """``tp x cp x pp x dp``."""
        return self.tp * self.cp * self.pp * self.dp

    @property
    def context(self) -> ContextParallel:
        """The context-parallel split."""
        return ContextParallel(cp=self.cp, comm=self.cp_comm, balanced=self.cp_balance)

    @property
    def grad_group(self) -> int:
        """Ranks a gradient is reduced over, and a sharded state split over: ``dp x cp`` (the
        context-parallel ranks hold the same weights; Megatron's data-parallel group with
        context parallel)."""
        return self.dp * self.cp

    @property
    def shard_group(self) -> int:
        """Ranks a sharding strategy splits the parameters, gradients and optimizer state over: the
        :attr:`grad_group`, or HSDP's shard group (``fsdp-hybrid``: :attr:`zero_group` consecutive
        data-parallel ranks, torchtitan's ``dp_shard``, with their ``cp`` context-parallel ranks, its
        ``dp_shard_cp``; the state replicated across the ``dp / zero_group`` groups, ``dp_replicate``)."""
        if self.strategy == "fsdp-hybrid" and self.zero_group:
            return self.zero_group * self.cp
        return self.grad_group

    @property
    def replicas(self) -> int:
        """HSDP's replica groups (``dp_replicate``): 1 for every other strategy."""
        return self.grad_group // self.shard_group

    @property
    def zero1_group(self) -> int:
        """Ranks InternLM's ZeRO-1 shards the optimizer over (:attr:`zero_group`, at most :attr:`grad_group`)."""
        return min(self.zero_group or self.grad_group, self.grad_group)

    @property
    def edp(self) -> int:
        """Expert-data-parallel replicas, over which the experts' gradients reduce: ``tp x cp x dp /
        (etp x ep)`` (``megatron/core/parallel_state.py``, ``expert_data_parallel_size``)."""
        return self.tp * self.grad_group // (self.etp * self.ep)

    @property
    def experts_apart(self) -> bool:
        """Whether the routed experts' parameters live apart from the dense ones, in buckets (FSDP units) of
        their own on their own group. Megatron-Core (``ddp``, ``zero1``) keeps them in buffers of their own
        reduced over :attr:`edp` whatever ``ep``; a parameter-sharding strategy (``fsdp``, ``fsdp-hybrid``,
        ``zero3``) only under expert parallelism: torchtitan's apply_fsdp wraps
        ``transformer_block.moe.experts`` with a ``fully_shard`` of its own on the expert mesh only ``if
        transformer_block.moe_enabled and ep_degree > 1``, and with ep 1 they are gathered and reduced with
        their block (torchtitan/models/llama4/infra/parallelize.py@05a6cb3895a5), split over the tensor-parallel
        ranks as the dense linears are (``etp = tp``). With ep 1 and ``etp`` below ``tp`` (experts whole on
        each tensor-parallel rank, sharded over ``tp / etp`` times the ranks) they keep units of their own."""
        return self.strategy not in PARAM_SHARDING_LAYOUT_STRATEGIES or self.ep > 1 or self.etp != self.tp

    @property
    def expert_shard_group(self) -> int:
        """Ranks a sharding strategy splits the routed experts' parameters, gradients and optimizer state over.
        Megatron-Core's (``zero1``): :attr:`edp`. A parameter-sharding strategy's: the expert-data-parallel
        ranks of one shard group, ``tp x shard_group / (etp x ep)`` (with ep 1 and etp = tp its
        :attr:`shard_group`: the experts are in their block's unit, :attr:`experts_apart`)
        (:attr:`edp` for ``fsdp``; HSDP's experts replicated across the :attr:`replicas` as the dense
        parameters are). torchtitan carves ep out of ``dp_shard x cp`` and shards the experts over the rest
        (``dp_shard_in_ep = dp_shard * cp // ep`` with etp = tp, ``dp_shard * cp * tp // ep`` with etp = 1), the
        expert region's mesh being ``[pp, dp_replicate, dp_shard_in_ep, ep, tp]`` (ParallelDims.build_mesh,
        torchtitan/distributed/parallel_dims.py@0119de156de5); apply_fsdp wraps the routed experts with
        ``fully_shard(transformer_block.moe.experts, mesh=edp_mesh)``, edp_mesh ``["dp_replicate", "efsdp"]``
        with replicas (torchtitan/models/llama4/infra/parallelize.py@05a6cb3895a5)."""
        if self.strategy not in PARAM_SHARDING_LAYOUT_STRATEGIES:
            return self.edp
        return self.tp * self.shard_group // (self.etp * self.ep)  # shard_group itself with ep 1 and etp = tp

    @property
    def expert_replicas(self) -> int:
        """Replica groups of the routed experts in buckets of their own (:attr:`experts_apart`): HSDP's
        :attr:`replicas` under expert parallelism, else 1 (with ep 1 they replicate with their block)."""
        if self.strategy in PARAM_SHARDING_LAYOUT_STRATEGIES and self.experts_apart:
            return self.replicas
        return 1

    @property
    def chunks(self) -> int:
        """Model chunks per stage (1 unless interleaved; DualPipe's two directions)."""
        if self.schedule == "dualpipe":
            return 2
        return self.virtual_stages if self.schedule == "1f1b-interleaved" else 1

    @property
    def global_batch(self) -> int:
        """Samples per optimizer step over every replica."""
        return self.micro_batch * self.micro_batches * self.dp

    def describe(self) -> str:
        """``tp 8 x pp 4 (1f1b-interleaved, 2 chunks) x dp 16, zero1, micro-batch 1 x 64``."""
        sched = "" if self.pp == 1 else f" ({self.schedule}{f', {self.chunks} chunks' if self.chunks > 1 else ''})"
        extra = "".join([f", ep {self.ep}" + (f" x etp {self.etp}" if self.etp > 1 else "") if self.ep > 1 else "",
                         ", sequence parallel" if self.sequence_parallel and self.tp > 1 else "",
                         f", {self.recompute} recompute" if self.recompute != "off" else ""])
        cp = "" if self.cp == 1 else f" x cp {self.cp} ({self.cp_comm}{'' if self.cp_balance else ', unbalanced'})"
        strategy = self.strategy if self.zero_impl == "deepspeed" else \
            f"{self.strategy} ({self.zero_impl}, group {self.zero1_group})"
        return (f"tp {self.tp}{cp} x pp {self.pp}{sched} x dp {self.dp}, {strategy}, micro-batch "
                f"{self.micro_batch} x {self.micro_batches}{extra}")


MEGATRON_MIN_BUCKET_PARAMS = 40_000_000
"""Megatron-Core's default gradient bucket: ``max(40000000, 1000000 * dp)`` parameters
(``megatron/core/distributed/distributed_data_parallel.py`` @ NVIDIA/Megatron-LM d98e8a6:
"If bucket_size is not provided as an input, use sane default"); one bucket per model
chunk when the reduction is not overlapped."""


def default_bucket_elements(dp: int) -> int:
    """Megatron's default bucket size for ``dp`` replicas (:data:`MEGATRON_MIN_BUCKET_PARAMS`)."""
    return max(MEGATRON_MIN_BUCKET_PARAMS, 1_000_000 * dp)


# ------------------------------------------------------------------- stages


def parse_stage_layers(text: str | None, pp: int, virtual_stages: int = 1) -> tuple[int, ...] | None:
    """``--stage-layers 10,12,12,14`` -> blocks per stage, or per virtual stage when it gives
    ``pp x virtual_stages`` counts (``None`` when not given)."""
    if text is None:
        return None
    try:
        counts = tuple(int(x) for x in str(text).split(","))
    except ValueError:
        raise ConfigError(f"--stage-layers: {text!r} is not valid; expected comma-separated block counts, "
                          f"one per pipeline stage (e.g. 10,12,12,14)") from None
    allowed = sorted({pp, pp * virtual_stages})
    if len(counts) not in allowed or any(c < 0 for c in counts):
        per = f"{pp}" + (f" or {pp * virtual_stages}" if virtual_stages > 1 else "")
        raise ConfigError(f"--stage-layers: {text!r} is not valid; expected {per} block counts >= 0 (one per "
                          f"pipeline stage, --pp {pp}" + (f"; or one per virtual stage, --pp x --virtual-stages "
                                                          f"{virtual_stages}" if virtual_stages > 1 else "") + ")")
    return counts


def balanced_counts(n: int, k: int) -> tuple[int, ...]:
    """``n`` blocks over ``k`` (virtual) stages in forward order, counts differing by at most one;
    the heavier ones fill the middle first, so the first and last (which also run the
    embedding, and the final norm, LM head and loss) are the lighter ones, as large runs
    split layer counts that do not divide (Megatron-Core's ``--decoder-first-pipeline-num-layers``
    and ``--decoder-last-pipeline-num-layers`` set lighter ends the same way)."""
    base, extra = divmod(n, k)
    heavy = set(sorted(range(k), key=lambda g: (-min(g, k - 1 - g), g))[:extra])
    return tuple(base + (g in heavy) for g in range(k))


def block_layers(tpm: TpModel) -> list[list[int]]:
    """Layer indices of each block the pipeline split counts, in forward order: a multi-token
    prediction module's block is none of them (:data:`~dpsim.workload.spec.MTP_UNIT_PREFIX`); it
    follows the last block onto the last stage, as the layers after the last block do."""
    out: list[list[int]] = []
    current: str | None = None
    for layer in tpm.layers:
        if layer.unit is None or is_mtp_unit(layer.unit):
            continue
        if layer.unit != current:
            out.append([])
            current = layer.unit
        out[-1].append(layer.index)
    return out


def stage_assignment(tpm: TpModel, layout: Layout) -> tuple[tuple[tuple[int, ...], ...], ...]:
    """Layer indices of each stage's model chunks: ``result[stage][chunk]`` (see the module docstring).
    DualPipe: the model split over ``pp`` stages, stage ``r`` holding stage ``r`` of the forward
    direction (chunk 0) and stage ``pp - 1 - r`` of the reverse one (chunk 1)."""
    if layout.schedule == "dualpipe":
        one = stage_assignment(tpm, replace(layout, schedule="1f1b", virtual_stages=1))
        p = layout.pp
        return tuple((one[r][0], one[p - 1 - r][0]) for r in range(p))
    p, v = layout.pp, layout.chunks
    blocks = block_layers(tpm)
    n = len(blocks)
    n_virtual = p * v
    if layout.stage_blocks is not None:
        counts = layout.stage_blocks
        if sum(counts) != n:
            raise ConfigError(f"--stage-layers: {','.join(map(str, counts))} sums to {sum(counts)} blocks; "
                              f"{tpm.model.name} has {n}")
        if len(counts) == n_virtual:
            per_virtual = list(counts)
        else:
            # A stage's blocks over its chunks, the first chunks taking the one left over.
            per_virtual = [counts[g % p] // v + (g // p < counts[g % p] % v) for g in range(n_virtual)]
    else:
        per_virtual = list(balanced_counts(n, n_virtual))
        mtp = len({l.unit for l in tpm.layers if is_mtp_unit(l.unit)})
        if mtp and n_virtual > 1:
            # The multi-token prediction blocks run on the last virtual stage: balanced, they take
            # that many of its block slots (as Megatron-Core's --account-for-loss-in-pipeline-split
            # counts the loss as a layer of the split), so it holds that many fewer main blocks.
            per_virtual = list(balanced_counts(n + mtp, n_virtual))
            per_virtual[-1] -= mtp
            if per_virtual[-1] < 0:
                per_virtual = list(balanced_counts(n, n_virtual))
    # An end virtual stage may hold no block: the embedding (or the final norm, head and loss) is
    # then its whole work, as Megatron-Core's --account-for-embedding-in-pipeline-split and
    # --account-for-loss-in-pipeline-split place them (each counted as one layer of the split).
    ends_hold_root = (min(blocks[0]) > 0 if blocks else False,
                      max(blocks[-1]) < len(tpm.layers) - 1 if blocks else False)
    empty_inside = any(c == 0 for g, c in enumerate(per_virtual)
                       if not ((g == 0 and ends_hold_root[0]) or (g == n_virtual - 1 and ends_hold_root[1])))
    if p > 1 and empty_inside:
        if layout.stage_blocks is not None:
            # Yours: 0,1,1,0 runs (the ends hold the embedding and the head), 1,0,0,1 does not; the
            # chunk-count advice below ("use at most 2 chunks") was wrong for it.
            given = ",".join(map(str, layout.stage_blocks))
            chunks = f" (split into --virtual-stages {v} chunks per stage)" if v > 1 else ""
            raise ConfigError(f"--stage-layers: {given} leaves a model chunk between the first and the last "
                              f"without blocks{chunks}; only the first and the last chunk may hold none (they "
                              f"keep the embedding and the loss); give every other chunk at least one block")
        if n_virtual > n:  # more chunks than blocks: no --stage-layers can fill them (it used to be suggested)
            raise ConfigError(f"--pp: {p} stages x {v} chunks = {n_virtual} chunks for {tpm.model.name}'s {n} blocks "
                              f"leave a chunk without blocks; use at most {n} chunks (fewer stages or fewer "
                              f"--virtual-stages)")
        raise ConfigError(f"--pp: {p} stages x {v} chunks leave a chunk without blocks; use fewer stages or "
                          f"--stage-layers with every stage > 0")
    block_of_virtual: list[list[int]] = []
    start = 0
    for g in range(n_virtual):
        block_of_virtual.append(list(range(start, start + per_virtual[g])))
        start += per_virtual[g]
    layers_of_virtual: list[list[int]] = [sorted(i for b in bs for i in blocks[b]) for bs in block_of_virtual]
    # Root layers: before the first block -> first virtual stage; after the last -> last;
    # in between -> with the block that precedes them.
    first = min(blocks[0]) if blocks else len(tpm.layers)
    last = max(blocks[-1]) if blocks else -1
    virtual_of_layer = {i: g for g, layers in enumerate(layers_of_virtual) for i in layers}
    for layer in tpm.layers:
        i = layer.index
        if i in virtual_of_layer:
            continue
        if i < first:
            g = 0
        elif i > last and blocks:
            # After the last block (multi-token prediction blocks, final norm, head, loss): the last
            # virtual stage, even one holding no block. Megatron-Core builds them where post_process
            # holds, is_pipeline_last_stage(ignore_virtual=False, vp_stage=i)
            # (NVIDIA/Megatron-LM@1e057005959b megatron/training/training.py lines 995-999); with
            # --account-for-loss-in-pipeline-split that chunk builds one transformer layer fewer
            # (megatron/core/transformer/transformer_block.py lines 161-166), none when each chunk
            # has one slot (R060: 94 + 2 slots over 32 x 3 chunks).
            g = n_virtual - 1
        else:
            before = [virtual_of_layer[j] for j in range(i) if j in virtual_of_layer]
            g = before[-1] if before else 0
        virtual_of_layer[i] = g
        layers_of_virtual[g].append(i)
    return tuple(tuple(tuple(sorted(layers_of_virtual[c * p + s])) for c in range(v)) for s in range(p))


# --------------------------------------------------------------------- work


@frozen_dataclass
class LayerWork:
    """One layer's work for one micro-batch on one rank."""

    index: int
    """Layer index."""
    forward_s: float
    """Forward: compute plus the tensor-parallel collectives it waits for."""
    backward_s: float
    """Backward: compute, the collectives it waits for, and recomputation."""
    compute_forward_s: float
    """Forward compute alone."""
    compute_backward_s: float
    """Backward compute alone."""
    recompute_s: float
    """Recomputation charged to this layer's backward (full recomputation: the block's
    last layer, the first to run backward, carries the whole block's forward), with the
    re-run forward's exposed tensor- and context-parallel waits (:attr:`recompute_waits_s`)."""
    tp_comm_s: float
    """Tensor-parallel collective time of the micro-batch (forward, backward and recompute): what
    they take, a hidden one slowed beside its GEMM by a calibration's ``comm_slowdown``."""
    tp_exposed_s: float
    """Of which the compute stream waits for."""
    grad_numel: int
    """Parameters of the layer on one rank (gradients it produces)."""
    weight_grad_s: float = 0.0
    """Of :attr:`backward_s`, the weight-gradient GEMMs: the pass ``W`` a zero-bubble schedule
    runs apart from the input gradient ``B`` (:func:`weight_gradient_share`)."""
    cp_comm_s: float = 0.0
    """Context-parallel communication of the micro-batch (forward, backward and recompute)."""
    cp_exposed_s: float = 0.0
    """Of which the compute stream waits for (included in :attr:`forward_s` and :attr:`backward_s`)."""
    ep_comm_s: float = 0.0
    """An MoE layer's all-to-all time of the micro-batch on the ``ep`` communicator: dispatch
    and combine in forward, their reverses in backward (and again when recomputed)."""
    etp_comm_s: float = 0.0
    """An MoE layer's expert-tensor-parallel all-gathers and reduce-scatters of the micro-batch on
    the ``etp`` communicator (forward, backward and recompute)."""
    ep_forward_s: float = 0.0
    """Of :attr:`forward_s`, the blocking all-to-alls and expert-tensor collectives (dispatch and
    combine); the rest of :attr:`ep_comm_s` + :attr:`etp_comm_s` is in :attr:`backward_s`."""
    expert_grad_numel: int = 0
    """Of :attr:`grad_numel`, the routed experts' (reduced over the expert-data-parallel group)."""
    fp8_numel: int = 0
    """Of :attr:`grad_numel`, the linear weights the job's FP8 recipe runs in FP8
    (:meth:`~dpsim.strategies.tensor.TpModel.fp8_weight_numels`, the count the memory holds): what FSDP2's
    float8 all-gather or FP8 primary weights gather in one byte (:attr:`dpsim.strategies.pipeline.DataParallelPlan.fp8`)."""
    expert_fp8_numel: int = 0
    """Of :attr:`fp8_numel`, the routed experts' (in :attr:`expert_grad_numel`: gathered over the
    expert-data-parallel group, in FP8 where the recipe runs the grouped expert GEMMs in FP8)."""
    recompute_waits_s: float = 0.0
    """Of :attr:`recompute_s`, the exposed tensor- and context-parallel waits of the re-run forward
    (counted in :attr:`tp_exposed_s` and :attr:`cp_exposed_s` too): communication, not compute, so
    not in a one-GPU step."""
    unit: str | None = None
    """The decoder block (transformer layer) it belongs to, ``None`` for the embedding, the output head
    and other root layers: what Megatron-Core's combined 1F1B pairs, a forward's block with a
    backward's (:func:`~dpsim.strategies.pipeline.a2a_overlap_cut`)."""
    first_forward_s: float = 0.0
    """Once a step, not in :attr:`forward_s`: the FP8 weight casts a TransformerEngine module runs at
    the step's first micro-batch and keeps for the others (:func:`dpsim.workload.fp8.caches_fp8_weights`),
    charged by the pipeline to the chunk's first forward."""


def weight_gradient_share(layer, *, routed_in_b: float = 0.0) -> float:
    """The weight-gradient GEMMs' share of a layer's backward compute. A linear layer's backward
    is two GEMMs the size of its forward one, the input gradient and the weight gradient (Qi et
    al. 2024, arXiv:2401.10241, Sec. 2: ``B`` and ``W`` each about ``F``); the attention core
    has no weights, its backward (about twice its forward) is all input gradient.
    ``routed_in_b``: forward FLOPs of an MoE layer's routed-expert grouped GEMMs (:func:`_routed_flops`)
    whose whole backward stays in ``B``, as ZB-H1's reference runtime runs them (its
    ``WeightGradStore`` is fed by the tensor-parallel linears only; ``GroupedMLP``'s ``gg.ops.gmm``
    computes both gradients in its backward: sail-sg/zero-bubble-pipeline-parallelism@39f2c186
    megatron/core/tensor_parallel/layers.py, megatron/core/transformer/moe/experts.py); 0 counts
    them in neither share (their time is in the backward the share applies to, split as the rest)."""
    linear = layer.col_flops_per_sample + layer.row_flops_per_sample
    total = 2.0 * (linear + layer.core_flops_per_sample + routed_in_b)
    return linear / total if total > 0 else 0.0


def _routed_flops(spec_layer) -> float:
    """Forward FLOPs per sample of a layer's routed-expert grouped GEMMs on one rank (0 for any other layer)."""
    return sum(op.flops_per_sample for op in spec_layer.ops
               if getattr(op, "name", "").startswith("experts.") and hasattr(op, "k"))


def gradient_accumulation_s(tpm: TpModel, gpu, grad_bytes: int) -> list[float]:
    """Per layer, the unfused gradient accumulation of one micro-batch on one rank: Megatron's
    local DDP hook runs ``param.main_grad.add_(param.grad.data)`` for every parameter after
    every micro-batch's backward (``megatron/model/distributed.py`` ``_make_param_hook``,
    NVIDIA/Megatron-LM@50a4b5fa02, April 2021); without the hook autograd's
    ``AccumulateGrad`` adds into ``.grad`` the same way from the second micro-batch (torch
    DDP, DeepSpeed): one element-wise kernel per parameter reading the new gradient and the
    buffer and writing the buffer, charged here every micro-batch. Fused accumulation (the
    weight-gradient GEMM's ``beta = 1`` epilogue writing ``main_grad``: Megatron-LM
    83b1e42f30 "gradient accumulation fusion", February 2022, on by default with fp32
    accumulation in ``megatron/arguments.py``@2e90a342f5; TransformerEngine) removes the pass
    ("every linear paid an extra full-size read-modify-write of main_grad per microbatch",
    AMD-AGI/Primus pull request #995); the fused GEMM's own read and write of the buffer is part of
    its cost (:func:`dpsim.workload.roofline.wgrad_output_bytes`)."""
    eff = Efficiencies()
    out = []
    for layer in tpm.layers:
        tensors = len(tpm.model.layers[layer.index].params)
        size = 3.0 * layer.numel_per_rank * grad_bytes
        out.append(memory_term(size, gpu, kernels=tensors).time_s(eff) if layer.numel_per_rank else 0.0)
    return out


def overlap_contention(overlap_slowdown: float, comm_slowdown: float = 0.0) -> float:
    """Compute lost per second of a collective hidden beside it: ``overlap_slowdown / (1 +
    overlap_slowdown)`` per second beside the GEMM, and a hidden second lasts ``1 + comm_slowdown``
    seconds there."""
    return overlap_slowdown / (1.0 + overlap_slowdown) / comm_rate(comm_slowdown, True)


def layer_work(tpm: TpModel, shard_compute: ComputeProfile, layout: Layout, *,
               tp_cost: Callable[[str, float], float], act_element_bytes: int = 2,
               time_scale: float = 1.0, overlap_slowdown: float = 0.0, comm_slowdown: float = 0.0,
               accumulate_s: Sequence[float] = (), recompute_share: Sequence[float] | None = None,
               cp_cost: Callable[[str, float], float] | None = None, cp_model: ModelSpec | None = None,
               ep_cost: Callable[[float], float] | None = None,
               etp_cost: Callable[[float], float] | None = None, gpu: GpuSpec | None = None,
               offload_s: Sequence[float] = (), cached_fp8_weights: bool = False,
               sharding_copy_s: Sequence[float] = (), fp8: Fp8Recipe | None = None) -> tuple[LayerWork, ...]:
    """Per-layer work of one micro-batch on one tensor-parallel rank.

    ``shard_compute`` is the compute profile of ``tpm.spec`` at the layout's micro-batch;
    ``time_scale`` multiplies its times (a measured one-GPU step or calibration);
    ``tp_cost(op, bytes)`` the ``tp`` communicator's collective time. A tensor-parallel
    collective hidden under a GEMM still runs its kernels on the GPU's SMs: the GEMM runs
    ``1 + overlap_slowdown`` times slower while it does (``--overlap-slowdown``, the same
    contention the engines charge a data-parallel collective overlapping compute), so the
    hidden time adds ``hidden x overlap_slowdown / (1 + overlap_slowdown)``. A calibration's
    ``comm_slowdown`` slows the other direction: a hidden collective progresses ``1 +
    comm_slowdown`` times slower beside its GEMM (:func:`~dpsim.strategies.tensor.layer_tp_comm`
    exposes what the GEMM then no longer covers), and its hidden part runs ``1 +
    comm_slowdown`` times longer beside the GEMM, which it slows that much longer. Without
    ``layout.grad_accum_fusion`` each layer's backward also runs ``accumulate_s``
    (:func:`gradient_accumulation_s`), and ``sharding_copy_s`` (the data-parallel strategy's own
    gradient passes, :func:`~dpsim.predict.layout.zero3_layout_passes`). ``op`` recomputation re-runs ``recompute_share`` of each
    layer's forward (:func:`~dpsim.strategies.checkpointing.recompute_shares` of the shard). With ``layout.cp``
    above 1, ``tpm`` is the tensor-parallel shard of a context-parallel rank's model
    (:func:`~dpsim.strategies.context.cp_shard`), ``cp_model`` the unsharded model and
    ``cp_cost(op, bytes)`` the ``cp`` communicator's collective time: each attention layer adds
    what of its context-parallel communication its attention does not hide
    (:func:`~dpsim.strategies.context.layer_cp_comm`), and recomputing it re-runs its forward's.

    An MoE layer's routed tokens leave and come back by all-to-all on the ``ep``
    communicator (Megatron-Core's ``MoEAlltoAllTokenDispatcher``): ``ep_cost(bytes)`` is one
    all-to-all in which each rank sends ``bytes`` (its ``top_k`` token copies), run four times
    per micro-batch, dispatch and combine in forward and their reverses in backward, each
    blocking the compute stream (the expert GEMMs need the tokens, the next layer the
    combined output); a block recomputed in full runs its forward pair again, and so does an MoE
    layer under ``moe`` recomputation (which re-runs the MoE layers whole, the others as ``op``).
    With expert-tensor parallelism ``etp_cost(bytes)`` is one pass's gathers and scatters of the
    expert-tensor group around the expert GEMMs (:func:`~dpsim.predict.layout.expert_tp_s`), run
    and re-run with the all-to-alls.

    ``async`` tensor-parallel overlap (``gpu`` needed) adds to each layer's compute what its
    decomposition costs (:attr:`~dpsim.strategies.tensor.TpComm.forward_compute_s`), and its
    hidden copies, on the copy engines, take no SMs from the GEMMs: no ``overlap_slowdown``.

    ``offload_s``: per layer, one micro-batch's activation copy to the host in forward (and back
    in backward), ``--offload expert-activations``
    (:func:`~dpsim.strategies.offload.expert_offload_bytes_per_sample`): a block's copies run on a
    side stream beside its compute in that pass, and only what its compute does not cover
    (:func:`~dpsim.strategies.offload.offload_exposed_s`) is added to the block's last layer.

    ``cached_fp8_weights``: the FP8 recipe's modules keep their weights' casts across the micro-batches
    (:func:`dpsim.workload.fp8.caches_fp8_weights`): each layer's forward weight casts
    (:attr:`~dpsim.workload.compute.LayerTime.fp8_weight_cast_s`) leave its per-micro-batch forward, and
    its recomputed forward, for :attr:`LayerWork.first_forward_s`.

    ``fp8``: the job's FP8 recipe, under which each layer's FP8 weights are counted
    (:attr:`LayerWork.fp8_numel`, :attr:`LayerWork.expert_fp8_numel`; ``None``: no FP8).
    """
    contention = overlap_contention(overlap_slowdown, comm_slowdown)
    tokens = tpm.model.tokens_per_sample or 0
    asynchronous = layout.tp_comm_overlap == "async" and layout.sequence_parallel and layout.tp > 1
    assert gpu is not None or not asynchronous, "async tensor parallelism needs the GPU"
    local_copy_s = (lambda size: memory_term(size, gpu).time_s(Efficiencies())) if asynchronous else None
    fwd_s, bwd_s, comms, core_s = [], [], [], []
    cast_s = [(lt.fp8_weight_cast_s if cached_fp8_weights else 0.0) * time_scale for lt in shard_compute.layers]
    # A model's blocks repeat: layers alike in what layer_tp_comm reads of them (and their forward) share one.
    tp_comms: dict[tuple, TpComm] = {}
    for i, (layer, lt) in enumerate(zip(tpm.layers, shard_compute.layers)):
        fwd = lt.forward_s * time_scale - cast_s[i]
        chunk_loss = chunked_gemm_loss(tpm.spec.layers[i], layout.tp, layout.micro_batch, gpu) \
            if asynchronous and layer.role == "block" else (0.0, 0.0)
        key = (layer.role, layer.tp_collectives, layer.hidden_bytes_per_sample, layer.col_flops_per_sample,
               layer.row_flops_per_sample, layer.core_flops_per_sample, fwd, chunk_loss)
        comm = tp_comms.get(key)
        if comm is None:
            comm = tp_comms[key] = layer_tp_comm(
                layer, fwd, layout.micro_batch, layout.tp, sequence_parallel=layout.sequence_parallel,
                overlap=layout.tp_comm_overlap, cost=tp_cost, tokens_per_sample=tokens,
                act_element_bytes=act_element_bytes, comm_slowdown=comm_slowdown, local_copy_s=local_copy_s,
                chunk_loss=chunk_loss)
        comms.append(comm)
        fwd_s.append(fwd + comm.forward_compute_s)
        bwd_s.append(lt.backward_s * time_scale + comm.backward_compute_s)
        core_s.append(selective_recompute_s(layer, fwd))
    n = len(tpm.layers)
    cpc = [TpComm()] * n
    if layout.cp > 1:
        assert cp_cost is not None and cp_model is not None, "context parallelism needs its communicator and model"
        hidden = model_hidden(cp_model)
        cpc = [layer_cp_comm(layer, tpm.spec.layers[i], cp_model.layers[i], fwd_s[i], ctx=layout.context,
                             micro_batch=layout.micro_batch, tokens_per_rank=tokens, hidden=hidden, tp=layout.tp,
                             cost=cp_cost, act_element_bytes=act_element_bytes) for i, layer in enumerate(tpm.layers)]
        # The ring's exposed waits join the tensor-parallel ones (recomputation re-runs both).
        comms = [dataclasses.replace(c, forward_exposed_s=c.forward_exposed_s + k.forward_exposed_s,
                                     backward_exposed_s=c.backward_exposed_s + k.backward_exposed_s)
                 for c, k in zip(comms, cpc)]
    recompute, recompute_comm, recompute_exposed = [0.0] * n, [0.0] * n, [0.0] * n
    ckpt = checkpointed_blocks(tpm, layout)
    if layout.recompute == "full":
        # The block's forward, its collectives included, re-runs before the backward of its
        # last layer (the first of the block in backward order).
        for unit_layers in ckpt:
            last = max(unit_layers)
            recompute[last] = sum(fwd_s[i] + comms[i].forward_exposed_s for i in unit_layers)
            recompute_comm[last] = sum(comms[i].forward_s for i in unit_layers)
            recompute_exposed[last] = sum(comms[i].forward_exposed_s for i in unit_layers)
    elif layout.recompute == "selective":
        recompute = [core_s[i] + cpc[i].forward_exposed_s for i in range(n)]
    elif layout.recompute in ("op", "megatron", "moe", "deepseek"):
        assert recompute_share is not None and len(recompute_share) == n, "op recomputation needs its shares"
        recompute = [fwd_s[i] * recompute_share[i] for i in range(n)]
    # ``moe``: an MoE layer's whole forward, its collectives included, re-runs before its backward.
    moe_rerun = [i for i, layer in enumerate(tpm.layers) if layer.routed_bytes_per_sample > 0] \
        if layout.recompute == "moe" else []
    for i in moe_rerun:
        recompute[i] = fwd_s[i] + comms[i].forward_exposed_s
        recompute_comm[i], recompute_exposed[i] = comms[i].forward_s, comms[i].forward_exposed_s
    # What of ``recompute`` is waiting on the re-run forward's collectives (comms carry the ring's too).
    recompute_waits = ([cpc[i].forward_exposed_s for i in range(n)] if layout.recompute == "selective"
                       else list(recompute_exposed))
    if asynchronous:  # only the ring's hidden waits contend (comms carry its exposed ones)
        hidden_f = [contention * (k.forward_s - k.forward_exposed_s) for k in cpc]
        hidden_b = [contention * (k.backward_s - k.backward_exposed_s) for k in cpc]
    else:
        hidden_f = [contention * (c.forward_s + k.forward_s - c.forward_exposed_s) for c, k in zip(comms, cpc)]
        hidden_b = [contention * (c.backward_s + k.backward_s - c.backward_exposed_s) for c, k in zip(comms, cpc)]
    if layout.recompute == "full":
        # The re-run forward's hidden collectives contend like the first run's.
        for unit_layers in ckpt:
            hidden_b[max(unit_layers)] += sum(hidden_f[i] for i in unit_layers)
    for i in moe_rerun:
        hidden_b[i] += hidden_f[i]
    accumulate = list(accumulate_s) if not layout.grad_accum_fusion and accumulate_s else [0.0] * n
    if sharding_copy_s:  # a sharded strategy's gradient passes (zero3: DeepSpeed's bucket copies)
        accumulate = [a + c for a, c in zip(accumulate, sharding_copy_s)]
    a2a = [ep_cost(layer.routed_bytes_per_sample * layout.micro_batch * act_element_bytes / 2.0)
           if ep_cost is not None and layer.routed_bytes_per_sample > 0 else 0.0 for layer in tpm.layers]
    etp = [etp_cost(layer.routed_bytes_per_sample * layout.micro_batch * act_element_bytes / 2.0)
           if etp_cost is not None and layer.routed_bytes_per_sample > 0 else 0.0 for layer in tpm.layers]
    a2a_recompute, etp_recompute = [0.0] * n, [0.0] * n
    if layout.recompute == "full":
        for unit_layers in ckpt:
            a2a_recompute[max(unit_layers)] = sum(2.0 * a2a[i] for i in unit_layers)
            etp_recompute[max(unit_layers)] = sum(etp[i] for i in unit_layers)
    for i in moe_rerun:
        a2a_recompute[i] = 2.0 * a2a[i]
        etp_recompute[i] = etp[i]
    offload_f, offload_b = [0.0] * n, [0.0] * n
    if offload_s:
        for unit_layers in _units(tpm):
            last = max(unit_layers)
            copy = sum(offload_s[i] for i in unit_layers)
            offload_f[last] = offload_exposed_s(copy, sum(fwd_s[i] for i in unit_layers))
            offload_b[last] = offload_exposed_s(copy, sum(bwd_s[i] + recompute[i] for i in unit_layers))
    tp_comm = [c.forward_s + c.backward_s + recompute_comm[i] for i, c in enumerate(comms)]
    tp_exposed = [c.forward_exposed_s + c.backward_exposed_s + recompute_exposed[i] for i, c in enumerate(comms)]
    cp_comm, cp_exposed = [0.0] * n, [0.0] * n
    if layout.cp > 1:
        again, again_exp = [0.0] * n, [0.0] * n  # the ring's forward re-run by recomputation
        if layout.recompute == "full":
            for unit_layers in ckpt:
                again[max(unit_layers)] = sum(cpc[i].forward_s for i in unit_layers)
                again_exp[max(unit_layers)] = sum(cpc[i].forward_exposed_s for i in unit_layers)
        elif layout.recompute == "selective":
            again, again_exp = [k.forward_s for k in cpc], [k.forward_exposed_s for k in cpc]
        cp_comm = [k.forward_s + k.backward_s + again[i] for i, k in enumerate(cpc)]
        cp_exposed = [k.forward_exposed_s + k.backward_exposed_s + again_exp[i] for i, k in enumerate(cpc)]
        # tp_exposed carried the ring's exposed waits (comms, recompute_exposed): keep them apart.
        tp_exposed = [t - e + (again_exp[i] if layout.recompute == "selective" else 0.0)
                      for i, (t, e) in enumerate(zip(tp_exposed, cp_exposed))]
    if comm_slowdown > 0 and not asynchronous:  # the hidden part lasts longer (with none, the modelled time bit for bit)
        pace = comm_rate(comm_slowdown, True)
        tp_comm = [e + (t - e) / pace for t, e in zip(tp_comm, tp_exposed)]
    fp8_numels = tpm.fp8_weight_numels(fp8)
    return tuple(LayerWork(
        index=layer.index,
        forward_s=fwd_s[i] + comms[i].forward_exposed_s + hidden_f[i] + 2.0 * a2a[i] + etp[i] + offload_f[i],
        backward_s=bwd_s[i] + comms[i].backward_exposed_s + hidden_b[i] + recompute[i] + accumulate[i]
        + 2.0 * a2a[i] + etp[i] + a2a_recompute[i] + etp_recompute[i] + offload_b[i],
        compute_forward_s=fwd_s[i], compute_backward_s=bwd_s[i], recompute_s=recompute[i],
        tp_comm_s=tp_comm[i], tp_exposed_s=tp_exposed[i],
        grad_numel=layer.numel_per_rank,
        weight_grad_s=bwd_s[i] * weight_gradient_share(layer, routed_in_b=_routed_flops(tpm.spec.layers[i])
                                                          if layout.schedule == "zb-h1" else 0.0) + accumulate[i],
        cp_comm_s=cp_comm[i], cp_exposed_s=cp_exposed[i],
        ep_comm_s=4.0 * a2a[i] + a2a_recompute[i], etp_comm_s=2.0 * etp[i] + etp_recompute[i],
        ep_forward_s=2.0 * a2a[i] + etp[i],
        expert_grad_numel=layer.expert_numel_per_rank,
        fp8_numel=fp8_numels[i][0], expert_fp8_numel=fp8_numels[i][1],
        recompute_waits_s=recompute_waits[i], unit=layer.unit, first_forward_s=cast_s[i])
        for i, layer in enumerate(tpm.layers))


def _units(tpm: TpModel) -> list[list[int]]:
    groups: dict[str, list[int]] = {}
    for layer in tpm.layers:
        if layer.unit is not None:
            groups.setdefault(layer.unit, []).append(layer.index)
    return list(groups.values())


def checkpointed_blocks(tpm: TpModel, layout: Layout) -> list[list[int]]:
    """Layer indices of each block the layout's recomputation checkpoints, in forward order."""
    policy = CheckpointPolicy(mode=layout.recompute, every=layout.recompute_every)
    return checkpointed(_units(tpm), policy)


@frozen_dataclass
class ChunkWork:
    """One model chunk (virtual stage) of one stage: its work per micro-batch."""

    stage: int
    """Pipeline stage."""
    chunk: int
    """Chunk index on the stage."""
    layers: tuple[LayerWork, ...]
    """Its layers, in forward order."""

    @property
    def forward_s(self) -> float:
        """One micro-batch's forward."""
        return sum(l.forward_s for l in self.layers)

    @property
    def backward_s(self) -> float:
        """One micro-batch's backward (recomputation included)."""
        return sum(l.backward_s for l in self.layers)

    @property
    def weight_grad_s(self) -> float:
        """Of :attr:`backward_s`, the weight-gradient pass of one micro-batch."""
        return sum(l.weight_grad_s for l in self.layers)

    @property
    def grad_numel(self) -> int:
        """Parameters of the chunk on one rank."""
        return sum(l.grad_numel for l in self.layers)

    @property
    def expert_grad_numel(self) -> int:
        """Of :attr:`grad_numel`, the routed experts'."""
        return sum(l.expert_grad_numel for l in self.layers)

    @property
    def ep_forward_s(self) -> float:
        """Of :attr:`forward_s`, the blocking expert-parallel communication."""
        return sum(l.ep_forward_s for l in self.layers)

    @property
    def ep_backward_s(self) -> float:
        """Of :attr:`backward_s`, the blocking expert-parallel communication (recomputation's included)."""
        return sum(l.ep_comm_s + l.etp_comm_s - l.ep_forward_s for l in self.layers)


def chunk_work(work: Sequence[LayerWork], assignment: tuple[tuple[tuple[int, ...], ...], ...]
               ) -> tuple[tuple[ChunkWork, ...], ...]:
    """:func:`layer_work` grouped by :func:`stage_assignment`: ``result[stage][chunk]``."""
    return tuple(tuple(ChunkWork(stage=s, chunk=c, layers=tuple(work[i] for i in layers))
                       for c, layers in enumerate(chunks)) for s, chunks in enumerate(assignment))
