"""Predict a tensor x pipeline x data-parallel layout (``predict --tp/--pp``): one step, its bubble, memory per stage.

:func:`predict_layout` builds the layout (:class:`~dpsim.strategies.layout.Layout`) from a
:class:`PredictConfig`, the tensor-parallel shard of the model
(:func:`~dpsim.strategies.tensor.tp_model`) and its compute profile, each layer's work
with its tensor-parallel collectives costed on the ``tp`` communicator, the stages'
step program (:func:`~dpsim.strategies.pipeline.build_pipeline_program`) and plays it on
the pipeline engine (:func:`~dpsim.engine.pipeline.run_pipeline`) with the ``pp``,
``dp`` and ``emb`` communicators placed on the job's fabric
(:func:`~dpsim.collectives.groups.layout_communicators`). :func:`layout_memory` gives the
memory of every stage and the fits verdict of the fullest. The prediction's forward, backward
and optimizer times and its communication (total and exposed) are the critical stage's
(:func:`critical_stage`: the one whose own work and waits set the step), not stage 0's.

A ``--single-gpu-step-ms`` (or a calibration's measured step) scales the shard's compute
by the same factor it scales the whole model's modelled step. A calibration's measured
``comm_slowdown`` slows every collective that runs beside compute, as on the data-parallel
path: the data-parallel and embedding collectives in the pipeline engine, the hidden
tensor-parallel ones in :func:`~dpsim.strategies.layout.layer_work` (see each for what is
not slowed: blocking collectives and point-to-point transfers run beside no compute).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import field, replace
from typing import Any

from dpsim.collectives.all_to_all import routed_spread, uniform_all_to_all_cost
from dpsim.collectives.groups import (
    GroupCollectives,
    LayoutShape,
    SlowestCopy,
    check_layout_placement,
    mirror_pair_group,
)
from dpsim.collectives.links import link_report
from dpsim.engine.pipeline import PipelineResult, collective_cost, run_pipeline
from dpsim.engine.simulate import SimulationResult, StepTiming
from dpsim.errors import ConfigError
from dpsim.frozen import frozen_dataclass
from dpsim.memory import (
    FitAdvice,
    MemoryBreakdown,
    StageMemory,
    layout_stage_memory,
    layout_stage_totals,
    offload_memory,
    worst_stage,
)
from dpsim.predict.config import ParallelismConfig, PredictConfig, capped_compute_efficiency, one_gpu_compute_ratio
from dpsim.predict.memo import memoized
from dpsim.predict.provenance import charge_after_comm
from dpsim.predict.result import Prediction
from dpsim.strategies.layout import (
    OPTIMIZER_SHARDING_LAYOUT_STRATEGIES,
    ChunkWork,
    Layout,
    checkpointed_blocks,
    chunk_work,
    default_bucket_elements,
    gradient_accumulation_s,
    layer_work,
    overlap_contention,
    parse_stage_layers,
    reshards_after_forward,
    stage_assignment,
)
from dpsim.strategies.pipeline import (
    DataParallelPlan,
    a2a_overlap_cut,
    a2a_pairs,
    schedule_slots,
    bubble_fraction,
    build_pipeline_program,
    extra_warmup,
    check_schedule,
    stage_deferred_weight_grads,
    stage_in_flight,
)
from dpsim.strategies.checkpointing import recompute_shares
from dpsim.strategies.context import check_context, cp_buffer_bytes, cp_shard
from dpsim.strategies.offload import (expert_offload_bytes_per_sample, host_bytes_per_param, host_step_s, offloads_optimizer,
                                      param_fetches)
from dpsim.strategies.deepspeed_fetch import backward_gather_numel
from dpsim.strategies.registry import check_zero_options
from dpsim.strategies.sharded import zero3_grad_pass_bytes
from dpsim.strategies.shards import unit_shard_numel
from dpsim.strategies.stage_parts import stage_parts
from dpsim.strategies.tensor import ExpertSplit, TpModel, check_tp, tp_model
from dpsim.strategies.zero import internlm_stages
from dpsim.wording import count
from dpsim.workload.routing import RankLoad, parse_routing, rank_load
from dpsim.topology.cluster import Topology
from dpsim.units import MiB, format_bytes_against
from dpsim.workload.catalog import find_entry
from dpsim.workload.library_models import lowered_shape_ref
from dpsim.workload.model_ref import is_torch_model_ref
from dpsim.workload.compute import ComputeProfile, compute_profile
from dpsim.workload.fp8 import caches_fp8_weights
from dpsim.workload.roofline import Efficiencies, memory_term
from dpsim.workload.spec import ModelSpec


def layout_of(config: PredictConfig, grad_element_bytes: int = 2, model: ModelSpec | None = None) -> Layout:
    """The :class:`Layout` a config asks for (its own rules already checked); ``--bucket-cap-mb``
    (MiB of gradients) becomes parameters per bucket at ``grad_element_bytes``. ``model``: whether it has routed
    experts decides a left-out ``--etp`` (:meth:`~dpsim.predict.config.ParallelismConfig.etp_for`; without it,
    a dense model's 1)."""
    par = config.parallelism
    dp = config.data_parallel
    bucket = None
    if config.gradients.bucket_cap_mb is not None:
        bucket = max(1, int(config.gradients.bucket_cap_mb * MiB) // grad_element_bytes)
    return Layout(tp=par.tp, pp=par.pp, dp=dp, virtual_stages=par.virtual_stages,
                  schedule=par.schedule, micro_batch=config.workload.micro_batch, micro_batches=config.micro_batches,
                  sequence_parallel=par.sequence_parallel, recompute=config.execution.recompute,
                  recompute_every=config.execution.recompute_every,
                  tp_comm_overlap=par.tp_comm_overlap, strategy=par.strategy, overlap=config.gradients.overlap,
                  stage_blocks=parse_stage_layers(par.stage_layers, par.pp, par.virtual_stages),
                  bucket_elements=bucket,
                  grad_accum_fusion=par.grad_accum_fusion, cp=par.cp, cp_comm=par.cp_comm,
                  cp_balance=par.cp_balance, offload=config.execution.offload, ep=par.ep, etp=par.etp_for(_has_experts(model)),
                  moe_a2a_overlap=par.moe_a2a_overlap, zero_impl=par.zero_impl, zero_group=par.zero_group)


def _has_experts(model: ModelSpec | None) -> bool:
    return model is not None and model.moe is not None


def layout_shape(config: PredictConfig, model: ModelSpec | None = None) -> LayoutShape | None:
    """The layout's group sizes for :class:`~dpsim.collectives.groups.GroupCollectives` (``None``
    without tensor/pipeline parallelism); ``model`` as for :func:`layout_of` (without it, no expert
    communicators beyond ``ep`` and ``edp``)."""
    par = config.parallelism
    if not par.layout_active:
        return None
    experts = _has_experts(model)
    return LayoutShape(tp=par.tp, pp=par.pp, dp=config.data_parallel, cp=par.cp, ep=par.ep,
                       etp=par.etp_for(experts), zero_group=par.zero_group, experts=experts)


def check_layout(config: PredictConfig, model: ModelSpec, topology: Topology) -> None:
    """What needs the model or the cluster: the split, the heads, the placement (one line each)."""
    par = config.parallelism
    shape = layout_shape(config, model)
    assert shape is not None
    source = model_source(config)
    if is_torch_model_ref(source):
        if par.tp > 1:
            raise ConfigError(f"--tp: {par.tp} splits the layers of a known transformer block; {config.workload.model} is "
                              f"traced (not a configuration of a family built from its shape, see docs/models.md, given "
                              f"without --input-shape), so use --tp 1 (--pp splits its blocks into stages)")
        if par.pp > 1 and not any(layer.unit is not None for layer in model.layers):
            raise ConfigError(f"--pp: {par.pp} splits a model's repeated blocks into stages, but tracing "
                              f"{config.workload.model} found none (no ModuleList of blocks); use --pp 1")
    check_tp(model, par.tp)
    check_experts(model, config.parallelism)
    if model.moe is None and config.execution.offload == "expert-activations":
        # As --recompute moe below: a dense model has no expert GEMMs, and the flag was dropped in silence.
        raise ConfigError(f"--offload: expert-activations offloads the MoE layers' expert activations, but "
                          f"{model.name} is dense; choose optimizer or params+optimizer, or leave it out")
    if model.moe is None and config.execution.recompute == "moe":
        raise ConfigError(f"--recompute: moe recomputes the MoE layers, but {model.name} is dense; choose op, "
                          f"selective or full")
    heads = _heads(source)
    if heads is not None and par.tp > 1 and any(h % par.tp for h in heads):
        what = (f"{heads[0]} attention heads" if len(heads) == 1 or heads[0] == heads[1]
                else f"{heads[0]} query and {heads[1]} key-value heads")
        raise ConfigError(f"--tp: {par.tp} does not divide {config.workload.model}'s {what}; choose a --tp that "
                          f"divides them")
    check_layout_placement(topology, shape, tp_across_network=par.tp_across_network,
                           tp_comm_overlap=par.tp_comm_overlap)
    if par.strategy == "fsdp-hybrid":
        # The shard group's placement: consecutive data-parallel ranks tiling the servers (tp x cp apart: each
        # data-parallel rank's context-parallel ranks are in its shard group).
        check_zero_options(par.strategy, par.zero_impl, par.zero_group, n_gpus=config.data_parallel,
                           gpus_per_node=topology.gpus_per_node, tp=par.tp * par.cp)
    if par.zero_impl == "internlm":
        if model.moe is not None:
            raise ConfigError(f"--zero-impl: internlm is modelled for dense models; {model.name} is a mixture of "
                              f"experts, so use --zero-impl deepspeed (Megatron's distributed optimizer)")
        check_zero_options(par.strategy, par.zero_impl, par.zero_group, n_gpus=config.data_parallel,
                           gpus_per_node=topology.gpus_per_node, tp=par.tp)
    check_context(model, layout_of(config).context, par.tp)


def check_no_expert_options(name: str, parallelism: Any) -> None:
    """Refuse a router or expert all-to-all option on a dense model, as --ep and --moe-a2a-overlap are:
    they were silently ignored (``--moe-routing zipf:1.2`` on gpt2 predicted the balanced dense step).
    ``parallelism``: anything with those fields (the planner's ask has none: nothing to check)."""
    routing = getattr(parallelism, "moe_routing", "balanced")
    capacity = getattr(parallelism, "moe_capacity_factor", None)
    a2a = getattr(parallelism, "moe_a2a", "flat")
    pad = getattr(parallelism, "moe_pad_to_capacity", False)
    for flag, value, given in (("--moe-routing", routing, str(routing).strip().lower() != "balanced"),
                               ("--moe-capacity-factor", capacity, capacity is not None),
                               ("--moe-pad-to-capacity", pad, pad is not False),
                               ("--moe-a2a", a2a, a2a != "flat")):
        if given:
            raise ConfigError(f"{flag}: {value!r} applies to a mixture of experts' router and all-to-alls, but "
                              f"{name} is dense; leave it out or give a model with experts= (e.g. --model "
                              f"mixtral-8x7b)")


def check_all_to_all_options(model: ModelSpec, parallelism: Any) -> None:
    """Refuse an all-to-all option on a mixture of experts with ``--ep 1`` (every path: a data-parallel-only
    prediction too). As --moe-a2a-overlap and --moe-node-limit are: with --ep 1 every GPU holds every expert and
    the ep group is one rank, so ``--moe-a2a hierarchical`` costed nothing and was dropped in silence."""
    a2a = getattr(parallelism, "moe_a2a", "flat")
    if model.moe is not None and a2a != "flat" and parallelism.ep == 1:
        raise ConfigError(f"--moe-a2a: {a2a!r} shapes the expert-parallel all-to-all, and --ep is 1 (every GPU holds "
                          f"all {model.moe.experts} experts: no all-to-all); give --ep 2 or more, or leave it out")
    if model.moe is None or parallelism.ep != 1:
        return
    # With --ep 1 every GPU holds every expert: an uneven router leaves the busiest rank with the mean work
    # (rank_load over a group of one), so the step does not move; tokens are dropped at an expert's capacity
    # only on the layout path (the data-parallel-only path runs its experts dropless). Both flags were taken
    # and dropped in silence there (--moe-routing gini:0.9 and --moe-capacity-factor 1.0 on mixtral-8x7b
    # --gpus 8 predicted the balanced step to the last digit).
    routing_text = getattr(parallelism, "moe_routing", "balanced")
    capacity = getattr(parallelism, "moe_capacity_factor", None)
    layout = getattr(parallelism, "layout_active", False)
    if capacity is not None and not layout:
        raise ConfigError(f"--moe-capacity-factor: {capacity:g} drops tokens over an expert's capacity in an expert "
                          f"layout; with data parallelism alone (no --tp/--pp/--cp/--ep) {model.name}'s experts run "
                          f"dropless here; give --ep 2 or more (or --tp), or leave it out")
    if not parse_routing(routing_text).uniform and capacity is None:
        raise ConfigError(f"--moe-routing: {routing_text!r} loads the experts unevenly, and --ep is 1: every GPU holds "
                          f"all {model.moe.experts} experts, so its work is the mean and the step is the balanced one; "
                          f"give --ep 2 or more{' (or --moe-capacity-factor, whose drops it sets)' if layout else ''}, "
                          f"or leave it out")


def check_experts(model: ModelSpec, parallelism: ParallelismConfig) -> None:
    """Refuse an expert layout the model cannot take (one line naming the flag); reads only the
    config's parallelism part."""
    moe = model.moe
    if moe is None and parallelism.moe_a2a_overlap:
        raise ConfigError(f"--moe-a2a-overlap: hides a mixture of experts' all-to-alls, but {model.name} is dense; "
                          f"leave it out or give a model with experts= (e.g. --model mixtral-8x7b)")
    if moe is None:
        check_no_expert_options(model.name, parallelism)
        if parallelism.ep > 1:
            raise ConfigError(f"--ep: {parallelism.ep} splits the experts of a mixture of experts, but {model.name} is "
                              f"dense; leave it out or give a model with experts= (e.g. --model mixtral-8x7b)")
        if parallelism.etp is not None:
            # Any --etp but its default (which the config keeps as left out): 1 was taken and 2 refused under
            # --tp 2, though neither splits anything in a dense model.
            raise ConfigError(f"--etp: {parallelism.etp} sets how a mixture of experts' experts are split, but "
                              f"{model.name} is dense (no expert layers; its default, --tp {parallelism.tp}'s, is "
                              f"the only value it takes); leave it out or give a model with experts= (e.g. --model "
                              f"mixtral-8x7b)")
        return
    # The planner's per-shape ask has neither (the job's own config is checked once).
    if getattr(parallelism, "moe_pad_to_capacity", False) and getattr(parallelism, "moe_capacity_factor", None) is None:
        raise ConfigError("--moe-pad-to-capacity: pads every expert's input to its capacity, and no "
                          "--moe-capacity-factor is given (dropless experts have no capacity); give "
                          "--moe-capacity-factor (e.g. 1.25) or leave it out")
    check_all_to_all_options(model, parallelism)
    if moe.experts % parallelism.ep:
        raise ConfigError(f"--ep: {parallelism.ep} does not divide the {moe.experts} experts of {model.name}; choose an "
                          f"--ep that divides them")
    etp = parallelism.etp_for(True)
    if moe.expert_ffn % etp:
        given = "" if parallelism.etp is not None else f" (left out: --tp {parallelism.tp}'s, with --ep 1)"
        raise ConfigError(f"--etp: {etp}{given} does not divide the experts' width {moe.expert_ffn}; choose an --etp "
                          f"that divides it")
    # The routed experts' rows, read only where cp splits them (every layer's every op: plan checks each
    # expert split it enumerates, and its verification each layout it simulates).
    rows = {op.m for layer in model.layers for op in layer.ops
            if getattr(op, "name", "").startswith("experts.") and hasattr(op, "m")} if parallelism.cp > 1 else ()
    bad = min((m for m in rows if m % parallelism.cp), default=None)  # the rows it fails on, not the fewest
    if parallelism.cp > 1 and bad is not None:
        raise ConfigError(f"--cp: {parallelism.cp} does not divide the {count(bad, 'token')} each expert of "
                          f"{model.name} gets per sample; choose a --cp that divides them")
    if parallelism.tp > 1 and not parallelism.sequence_parallel:
        # megatron/training/arguments.py: "When using MoE and tensor parallelism, sequence
        # parallelism must be used" (the router and dispatcher work on the s / tp shard).
        raise ConfigError(f"--sequence-parallel: a mixture of experts with --tp {parallelism.tp} needs it (Megatron-Core "
                          f"runs its router and all-to-all on the sequence-parallel shard); add --sequence-parallel")


ROUTING_STEPS = 64
"""Steps of routing sampled for the busiest rank's load (:func:`~dpsim.workload.routing.rank_load`)."""


def expert_load(config: PredictConfig, model: ModelSpec) -> RankLoad | None:
    """How ``--moe-routing`` (and ``--moe-capacity-factor``) load the busiest of the ``ep`` GPUs:
    each routes its ``micro_batch x seq / (tp x cp)`` tokens (the sequence-parallel shard) per
    micro-batch (``None`` for a dense model)."""
    par = config.parallelism
    moe = model.moe
    if moe is None:
        return None
    tokens = config.workload.micro_batch * (model.tokens_per_sample or 0) // (par.tp * par.cp)
    return rank_load(parse_routing(par.moe_routing), experts=moe.experts, ep=par.ep, tokens_per_rank=tokens,
                     top_k=moe.top_k, capacity_factor=par.moe_capacity_factor, steps=ROUTING_STEPS,
                     pad_to_capacity=par.moe_pad_to_capacity)


def expert_split(config: PredictConfig, model: ModelSpec | None = None) -> ExpertSplit:
    """How one rank holds and runs the routed experts: its share of them and, for ``model``, the
    busiest rank's rows over the balanced mean (the routing's factor, less what capacity drops, or the
    capacity when padded to it)."""
    load = expert_load(config, model) if model is not None else None
    factor = load.mean_busiest_factor * load.row_scale if load is not None else 1.0
    # The memory reads the same factor: the busiest rank keeps the activations of the copies it gets. Under a
    # uniform router its excess is the sampling of each micro-batch's pairs (about 1.6 % on mixtral-8x7b, ep 8,
    # 4,096 tokens a rank), which the step pays and the memory keeps at the balanced mean, as every memory
    # row was counted; a capacity under that mean still bounds it. An expert keeps at most capacity x its
    # balanced share, so a rank at most capacity x its balanced mean: the factor (a mean over steps of each
    # step's ratio, times the mean kept fraction) can pass that by a few parts in a million, held to it here.
    uniform = load is not None and parse_routing(config.parallelism.moe_routing).uniform
    # Padded to capacity, every rank keeps the capacity's rows, whatever the router.
    padded = load is not None and load.padded_rows_factor is not None
    kept = min(1.0, factor) if uniform and not padded else factor
    capacity = config.parallelism.moe_capacity_factor
    return ExpertSplit(ep=config.parallelism.ep, etp=config.parallelism.etp_for(_has_experts(model)), load=factor,
                       activation_load=kept if capacity is None or load is None else min(kept, capacity))


def degraded_classes(collectives: GroupCollectives, name: str) -> dict[str, float] | None:
    """The capacity ``--degrade`` leaves the slowest link of each class that any copy of the ``name``
    communicator crosses (``None`` when nothing is degraded).

    Under ``--rack-placement contiguous`` the copies sit differently on the racks
    (:class:`~dpsim.collectives.groups.SlowestCopy`) and the all-to-alls cost each of them with these factors:
    read from the worst-placed copy alone, a class it does not cross was left whole in the copies that do (16
    GPUs on racks of 3 trays, --ep 8: the copy split over two racks has no rack NVLink, the one inside rack 0
    does, and --degrade nvlink-domain:1% left its all-to-all at the healthy time). A class degradation leaves
    the same factor in every copy that has the class, so the lowest over the copies is each one's."""
    model = collectives.group(name)
    factors: dict[str, float] = {}
    for copy in model.models if isinstance(model, SlowestCopy) else (model,):
        plans = getattr(copy, "plans", None)  # NCCL's flow model
        # A calibrated one: the factors build_collectives gave it beside its fits, if any.
        found = plans.slowest_class_factors() if plans is not None else getattr(copy, "class_factors", None)
        for cls, left in (found or {}).items():
            factors[cls] = min(left, factors.get(cls, 1.0))
    return factors or None


def context_comm_s(collectives: GroupCollectives, cost, op: str, size: float) -> float:
    """One context-parallel exchange on the ``cp`` communicator: Ulysses' head scatter
    (``all_to_all``) as the fabric's all-to-all, not a collective of OPS; the rest by ``cost``."""
    if op == "all_to_all":
        return uniform_all_to_all_cost(collectives.communicator("cp"), size,
                                       class_factors=degraded_classes(collectives, "cp")).time_s
    return cost("cp", op, size)


def expert_a2a_s(comm, bytes_per_rank: float, load: RankLoad | None, algorithm: str, moe=None,
                 node_limit: int | None = None, class_factors: dict[str, float] | None = None) -> float:
    """One dispatch (or combine) all-to-all on the ``ep`` communicator ``comm``: the routed
    copies less what capacity drops (or the capacity's rows when padded to it), the busiest rank's links pacing the exchange.

    ``hierarchical`` is DeepEP's normal kernels (Megatron-Core's ``flex`` dispatcher): a token
    goes once to each *rank* holding some of its experts and is expanded to those experts there
    (combine: one partial sum back per token and rank), so the bytes are ``moe``'s routed copies
    times :func:`~dpsim.collectives.all_to_all.rank_dedup_factor` over the group's ranks; and
    across servers once to each *server*, so what crosses the NICs is scaled further by the
    distinct servers over the distinct ranks a token reaches
    (:func:`~dpsim.collectives.all_to_all.expected_distinct_groups`). Both are the balanced
    closed forms, whatever the routing. ``flat`` (Megatron-Core's ``alltoall`` dispatcher, which
    permutes a row per routed copy before ``all_to_all``) moves every copy. ``node_limit``
    (``--moe-node-limit``, hierarchical only) draws a token's experts from that many of the group's
    servers (:func:`~dpsim.collectives.all_to_all.routed_spread`): fewer distinct servers, so fewer
    bytes over the NICs, and the ranks it reaches among theirs. ``class_factors``: degraded links
    (:func:`degraded_classes`), the slowest of each class pacing the exchange."""
    row_scale = load.row_scale if load is not None else 1.0
    size, node_dedup = bytes_per_rank, 1.0
    if moe is not None and algorithm == "hierarchical":
        ranks, nodes = comm.topology.n_gpus, comm.topology.n_nodes
        distinct_ranks, distinct_nodes = routed_spread(moe.experts, moe.top_k, ranks, nodes, node_limit)
        size = bytes_per_rank * min(1.0, distinct_ranks / moe.top_k)
        if nodes > 1:
            # Of the distinct ranks a token reaches, one message per distinct server crosses the NICs.
            node_dedup = min(1.0, distinct_nodes / distinct_ranks)
    return uniform_all_to_all_cost(comm, size * row_scale,
                                   load_factor=max(1.0, load.mean_busiest_factor if load else 1.0),
                                   algorithm=algorithm, node_dedup=node_dedup, class_factors=class_factors).time_s


def expert_tp_s(cost, bytes_per_rank: float, load: RankLoad | None, etp: int) -> float:
    """One pass's (forward or backward) expert-tensor-parallel collectives of an MoE layer on the
    ``etp`` communicator (``cost(group, op, size)``). Megatron-Core's ``MoEAlltoAllTokenDispatcher``
    (``megatron/core/transformer/moe/token_dispatcher.py``) with ``expert_tensor_parallel_size``
    above 1 all-gathers the tokens the ep all-to-all delivered over the expert-tensor group before
    the expert GEMMs (each of its ranks holds ``1 / etp`` of every local expert's width) and
    reduce-scatters the experts' partial outputs back before the combine all-to-all; backward runs
    the transposes (reduce-scatter, all-gather). Each moves ``etp`` ranks' routed copies, the
    busiest rank's load less what capacity drops (or padded to it), and blocks the stream as the all-to-alls do."""
    if etp <= 1:
        return 0.0
    row_scale = load.row_scale if load is not None else 1.0
    busiest = max(1.0, load.mean_busiest_factor if load else 1.0)
    size = etp * bytes_per_rank * row_scale * busiest
    return cost("etp", "all_gather", size) + cost("etp", "reduce_scatter", size)


def activation_offload_s(tpm: TpModel, layout: Layout, node, act_element_bytes: int) -> tuple[float, ...]:
    """Per layer, one micro-batch's ``--offload expert-activations`` copy in one direction over the
    GPU's host link (:func:`~dpsim.strategies.offload.expert_offload_bytes_per_sample`); empty
    without that offload."""
    if layout.offload != "expert-activations":
        return ()
    rate = node.host_link_bandwidth_bytes_per_s or node.pcie_bandwidth_bytes_per_s
    scale = layout.micro_batch * act_element_bytes / 2.0 / rate
    return tuple(expert_offload_bytes_per_sample(spec, layout.recompute) * scale for spec in tpm.spec.layers)


def model_source(config: PredictConfig) -> str:
    """``--model`` as the model is built: a transformers configuration given without
    ``--input-shape`` as its shape when it has one (:func:`lowered_shape_ref`), else as given."""
    wl = config.workload
    if is_torch_model_ref(wl.model) and wl.input_shape is None:
        return lowered_shape_ref(wl.model) or wl.model
    return wl.model


def _heads(name: str) -> tuple[int, ...] | None:
    entry = find_entry(name)
    if entry is None:
        return None
    cfg = entry.config
    for attrs in (("num_attention_heads", "num_key_value_heads"), ("n_head",), ("num_attention_heads",),
                  ("num_heads",)):
        if all(hasattr(cfg, a) for a in attrs):
            return tuple(getattr(cfg, a) for a in attrs)
    return None


@frozen_dataclass
class StageReport:
    """One pipeline stage of a predicted layout."""

    stage: int
    """Stage index."""
    blocks: int
    """Transformer blocks (over all its model chunks)."""
    layers: tuple[tuple[str, ...], ...]
    """Layer names of each model chunk."""
    forward_s: float
    """One micro-batch's forward over all its chunks (tensor-parallel waits included)."""
    backward_s: float
    """One micro-batch's backward over all its chunks (recomputation included)."""
    busy_s: float
    """Compute of the whole step (every micro-batch, optimizer included)."""
    bubble_s: float
    """Idle waiting for another stage: pipeline fill and drain, transfers on the critical path."""
    comm_wait_s: float
    """Idle waiting for its own collectives: parameter gathers before a forward, gradient
    reductions (and the tied-embedding all-reduce) before the optimizer."""
    tail_s: float
    """After its last op, until the slowest stage ends the step."""
    dp_comm_s: float
    """Its data-parallel (and embedding) collectives' time."""
    dp_exposed_s: float
    """Of which it computed nothing."""
    memory: StageMemory
    """Memory per GPU."""
    ep_comm_s: float = 0.0
    """Its MoE all-to-all time of the step (every micro-batch it runs, forward and backward): a
    stage without MoE layers (DeepSeek-V3's first, dense, blocks) has none while the others wait
    on theirs."""
    etp_comm_s: float = 0.0
    """Its expert-tensor-parallel all-gathers and reduce-scatters of the step."""

    def to_dict(self) -> dict:
        """JSON-able form (the expert keys are added by :meth:`LayoutReport.to_dict` for a mixture
        of experts)."""
        m = self.memory.breakdown
        return {"stage": self.stage, "blocks": self.blocks, "forward_s": self.forward_s,
                "backward_s": self.backward_s, "busy_s": self.busy_s, "bubble_s": self.bubble_s,
                "comm_wait_s": self.comm_wait_s, "tail_s": self.tail_s, "dp_comm_s": self.dp_comm_s, "dp_exposed_s": self.dp_exposed_s,
                "params_per_gpu": self.memory.params_per_gpu, "in_flight": list(self.memory.in_flight),
                "memory_total_bytes": m.total_bytes, "memory_activations_bytes": m.activations_bytes,
                "memory_weights_bytes": m.weights_bytes, "memory_gradients_bytes": m.gradients_bytes,
                "memory_optimizer_bytes": m.optimizer_bytes, "fits": m.fits}


@frozen_dataclass
class LayoutReport:
    """Where a layout's step goes, stage by stage."""

    layout: Layout
    """What was predicted."""
    stages: tuple[StageReport, ...]
    """Per stage."""
    bubble_fraction: float
    """Stage 0's bubble (waiting for other stages) over the step: the pipeline's fill and drain as
    the first stage sees them (compared with :attr:`ideal_bubble_fraction`)."""
    ideal_bubble_fraction: float
    """The bubble of uniform stages without transfers: ``(p - 1) / (v·m + p - 1)``, ZB-H1's
    smaller (:func:`~dpsim.strategies.pipeline.bubble_fraction`)."""
    tp_comm_s: float
    """Tensor-parallel collective time of the critical stage's step (all micro-batches,
    recomputation included; :attr:`critical_stage`)."""
    tp_exposed_s: float
    """Of which the critical stage's compute stream waits for."""
    p2p_bytes: float
    """Bytes one GPU sends per activation or gradient transfer."""
    p2p_s: float
    """Duration of one transfer on the ``pp`` communicator (0 without pipeline parallelism)."""
    transfers: int
    """Transfers of the step (all stages)."""
    embedding_grad_bytes: float = 0.0
    """Tied word embedding's gradient all-reduced between the first and last stage (per GPU)."""
    cp_comm_s: float = 0.0
    """Context-parallel communication of the critical stage's step (all micro-batches, recomputation
    included)."""
    cp_exposed_s: float = 0.0
    """Of which the critical stage's compute stream waits for."""
    pipeline: PipelineResult | None = field(default=None, repr=False)
    """The simulated step."""
    expert_load: RankLoad | None = None
    """A mixture of experts' routing: the busiest expert-parallel GPU's load over the mean, per
    sampled step and on average, and what capacity drops (``None``: dense)."""
    ep_comm_s: float = 0.0
    """The critical stage's MoE all-to-all time of the step (every micro-batch, forward and backward)."""
    etp_comm_s: float = 0.0
    """The critical stage's expert-tensor-parallel all-gathers and reduce-scatters of the step (every
    micro-batch, forward and backward; 0 with ``etp`` 1)."""
    ep_exposed_s: float = 0.0
    """Of :attr:`ep_comm_s` + :attr:`etp_comm_s`, what the critical stage's compute stream waits for
    (all of it but what ``--moe-a2a-overlap`` hides)."""
    p2p_comm_s: float = 0.0
    """The critical stage's point-to-point sends of the step (activations and gradients it sends, each
    :attr:`p2p_s`): the pipeline's part of the prediction's ``comm_s`` (the waits for them are
    the bubble, not exposed communication)."""
    critical_stage: int = 0
    """The stage whose own work and waits set the step (:func:`critical_stage`: the most compute and
    waits for its own collectives, the least idle for other stages). The prediction's forward,
    backward and optimizer times, its ``comm_s`` and ``exposed_comm_s``, and the tensor-, context-,
    expert-parallel and point-to-point figures here are its (0 without pipeline parallelism)."""
    stage_parts: tuple = field(default=(), repr=False)
    """Every stage's micro-batch split by what per-rank factors and routing load stretch
    (:class:`dpsim.strategies.stage_parts.StageParts`; read by ``predict --noise-cv``)."""

    def to_dict(self) -> dict:
        """JSON-able form (see README, "JSON output")."""
        lay = self.layout
        return {
            "tp": lay.tp, "pp": lay.pp, "dp": lay.dp, "schedule": lay.schedule, "virtual_stages": lay.chunks,
            "micro_batch": lay.micro_batch, "micro_batches": lay.micro_batches, "global_batch": lay.global_batch,
            "sequence_parallel": lay.sequence_parallel, "recompute": lay.recompute,
            "tp_comm_overlap": lay.tp_comm_overlap, "strategy": lay.strategy,
            "bubble_fraction": self.bubble_fraction, "ideal_bubble_fraction": self.ideal_bubble_fraction,
            "tp_comm_s": self.tp_comm_s, "tp_exposed_s": self.tp_exposed_s, "p2p_bytes": self.p2p_bytes,
            "p2p_s": self.p2p_s, "transfers": self.transfers, "p2p_comm_s": self.p2p_comm_s,
            "embedding_grad_bytes": self.embedding_grad_bytes,
            **({"critical_stage": self.critical_stage} if lay.pp > 1 else {}),
            "stages": [{**s.to_dict(), **({"ep_comm_s": s.ep_comm_s, "etp_comm_s": s.etp_comm_s}
                                           if self.expert_load else {})} for s in self.stages],
            **({"cp": lay.cp, "cp_comm": lay.cp_comm, "cp_balance": lay.cp_balance, "cp_comm_s": self.cp_comm_s,
                "cp_exposed_s": self.cp_exposed_s} if lay.cp > 1 else {}),
            **({"ep": lay.ep, "etp": lay.etp, "edp": lay.edp, "ep_comm_s": self.ep_comm_s,
                "ep_exposed_s": self.ep_exposed_s,
                "expert_load_factor": self.expert_load.mean_busiest_factor,
                "expert_load_p90": _p90(self.expert_load.step_factors),
                "expert_dropped_fraction": self.expert_load.dropped_fraction} if self.expert_load else {}),
            # HSDP's routed experts in units of their own: their shard group (of edp) and their replicas.
            **({"expert_shard_group": lay.expert_shard_group, "expert_replicas": lay.expert_replicas}
               if lay.expert_replicas > 1 and self.expert_load else {}),
            **({"etp_comm_s": self.etp_comm_s} if lay.etp > 1 else {}),
        }


def _p90(values) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]


def _act_bytes(precision) -> int:
    return 4 if precision.compute_dtype == "float32" else 2


_SHARD_TIMES: dict[tuple, tuple[ModelSpec, Any, dict]] = {}
_SHARD_TIMES_SIZE = 32
""":func:`shard_compute`'s layer-time memos, by model and GPU object (both kept, so that their ids are not
reused), precision and micro-batch."""


def shard_compute(tpm: TpModel, gpu, config: PredictConfig, precision, memo: dict | None = None,
                  profile=None) -> ComputeProfile:
    """The compute profile of one tensor-parallel rank's shard at the config's micro-batch; with
    ``--grad-accum-fusion`` (the default) every weight-gradient GEMM accumulates into the gradient
    buffer (:attr:`~dpsim.workload.precision.Precision.fused_wgrad_accumulation`). ``memo``: the layer
    times' (:func:`~dpsim.workload.compute.compute_profile`), kept by a caller for one GPU, precision,
    micro-batch and ``--grad-accum-fusion``. ``profile``: ``config``'s calibration profile, loaded
    (:func:`~dpsim.predict.config.resolved_compute_efficiency`)."""
    wl = config.workload
    if config.parallelism.grad_accum_fusion:
        precision = replace(precision, fused_wgrad_accumulation=True)
    # Not memoized: the shard's spec is a new object per layout, and keying it by value (every layer
    # and expert) cost more than the profile on large MoE models (DeepSeek-V3's 16,384-GPU plan 5.4 -> 8.1 s).
    # Its layer times are, per model object, GPU, precision and micro-batch: the shards of one model share
    # their dense layers (plan simulates ~30 layouts of one model in a search).
    if memo is None:
        key = (id(tpm.model), id(gpu), precision, wl.micro_batch)
        held = _SHARD_TIMES.get(key)
        if held is None or held[0] is not tpm.model or held[1] is not gpu:
            if len(_SHARD_TIMES) >= _SHARD_TIMES_SIZE:
                _SHARD_TIMES.pop(next(iter(_SHARD_TIMES)))
            held = _SHARD_TIMES[key] = (tpm.model, gpu, {})
        memo = held[2]
    return compute_profile(tpm.spec, gpu, micro_batch=wl.micro_batch, precision=precision,
                           optimizer=wl.optimizer, compute_efficiency=capped_compute_efficiency(config, gpu, profile),
                           clip_grad_norm=wl.clip_grad_norm, zero_grad_loop=wl.zero_grad == "zero-loop", memo=memo)


def _scales(config: PredictConfig, model: ModelSpec, gpu, precision, compute: ComputeProfile,
            profile=None) -> tuple[float, float]:
    """(compute, optimizer) factors a measured step applied to the modelled whole-model profile."""
    wl = config.workload
    plain = memoized(compute_profile, model, gpu, micro_batch=wl.micro_batch, precision=precision,
                     optimizer=wl.optimizer, compute_efficiency=capped_compute_efficiency(config, gpu, profile),
                     clip_grad_norm=wl.clip_grad_norm, zero_grad_loop=wl.zero_grad == "zero-loop")
    fb = plain.forward_s + plain.backward_s
    scale = (compute.forward_s + compute.backward_s) / fb if fb > 0 else 1.0
    opt = compute.optimizer_s / plain.optimizer_s if plain.optimizer_s > 0 else 1.0
    return scale, opt


def layout_memory(config: PredictConfig, model: ModelSpec, gpu, precision) -> tuple[StageMemory, ...]:
    """Memory per GPU of every stage of ``config``'s layout."""
    layout = layout_of(config, model=model)
    return stages_memory(tp_model(cp_shard(model, layout.context), config.parallelism.tp, experts=expert_split(config, model)),
                         layout, gpu, precision, config.workload.optimizer, cp_model=model)


def stages_memory(tpm: TpModel, layout: Layout, gpu, precision, optimizer: str,
                  assignment=None, activations=None, cp_model: ModelSpec | None = None,
                  expert_numels=None) -> tuple[StageMemory, ...]:
    """Memory per GPU of every stage of ``layout`` (the one count ``predict``, ``memory`` and
    ``plan`` use): its stages' layers (``assignment``, :func:`~dpsim.strategies.layout.stage_assignment`
    when not given) and the micro-batches its schedule holds in flight; ``activations``: the
    split's :func:`~dpsim.memory.stage_activation_bytes`, when a caller keeps them. With context
    parallelism ``tpm`` is the shard of a context-parallel rank's model and ``cp_model`` the
    unsharded one, whose attention layer adds its transient buffers
    (:func:`~dpsim.strategies.context.cp_buffer_bytes`). ``expert_numels``: the split's
    :func:`~dpsim.memory.stage_expert_numels`, when a caller keeps them."""
    check_schedule(layout)
    if assignment is None:
        assignment = stage_assignment(tpm, layout)
    flights = stage_in_flight(layout.schedule, layout.pp, layout.chunks, layout.micro_batches, extra_warmup(layout))
    deferred = stage_deferred_weight_grads(layout.schedule, layout.pp, layout.micro_batches)
    stages = layout_stage_memory(tpm, assignment, layout, gpu, precision=precision, optimizer=optimizer,
                                 in_flight=flights, activations=activations, deferred_w=deferred,
                                 expert_numels=expert_numels)
    if offloads_optimizer(layout.offload):
        stages = _offloaded(stages, tpm, assignment, layout, precision)
    if layout.cp == 1:
        return stages
    assert cp_model is not None, "context parallelism needs the unsharded model"
    extra = cp_buffer_bytes(cp_model, layout.context, tp=layout.tp, micro_batch=layout.micro_batch,
                            tokens_per_rank=tpm.model.tokens_per_sample or 0, act_element_bytes=_act_bytes(precision))
    return tuple(replace(m, breakdown=replace(m.breakdown, comm_buffers_bytes=m.breakdown.comm_buffers_bytes + extra))
                 for m in stages)


def stages_fullest(tpm: TpModel, layout: Layout, gpu, precision, optimizer: str, assignment, activations=None,
                   cp_model: ModelSpec | None = None, expert_numels=None) -> tuple[float, float, tuple[int, ...]]:
    """What a search reads of :func:`stages_memory` (same arguments, ``assignment`` given): ``(bytes per GPU of
    the fullest stage, usable bytes, parameters per GPU of each stage)``, the same figures, without a
    breakdown per stage where nothing is moved after the count (no offload, no context parallelism)."""
    if offloads_optimizer(layout.offload) or layout.cp != 1:
        stages = stages_memory(tpm, layout, gpu, precision, optimizer, assignment, activations, cp_model=cp_model,
                               expert_numels=expert_numels)
        worst = worst_stage(stages).breakdown
        return worst.total_bytes, worst.usable_bytes, tuple(st.params_per_gpu for st in stages)
    check_schedule(layout)
    flights = stage_in_flight(layout.schedule, layout.pp, layout.chunks, layout.micro_batches, extra_warmup(layout))
    deferred = stage_deferred_weight_grads(layout.schedule, layout.pp, layout.micro_batches)
    return layout_stage_totals(tpm, assignment, layout, gpu, precision=precision, optimizer=optimizer,
                               in_flight=flights, activations=activations, deferred_w=deferred,
                               expert_numels=expert_numels)


def _offloaded(stages: tuple[StageMemory, ...], tpm: TpModel, assignment, layout: Layout, precision
               ) -> tuple[StageMemory, ...]:
    """``stages`` with ``layout.offload``'s state on the host (:func:`~dpsim.memory.offload_memory`).
    Where the fsdp parameters stay gathered for the step (under pipeline stages), each stage keeps
    one block's gradients while they are reduced and, with its parameters offloaded, its gathered
    working set instead (the blocks in use and prefetched, two, and the layers outside blocks, as
    ZeRO-3 gathers them)."""
    if reshards_after_forward(layout) and layout.grad_group > 1:
        # Only shards persist there; the gathered units and the gradients being reduced are buffers already.
        return tuple(replace(m, breakdown=offload_memory(m.breakdown, layout.offload)) for m in stages)
    out = []
    for m, chunks in zip(stages, assignment):
        layers = [i for chunk in chunks for i in chunk]
        blocks: dict[str, int] = {}
        root = 0
        for i in layers:
            unit = tpm.layers[i].unit
            if unit is None:
                root += tpm.layers[i].numel_per_rank
            else:
                blocks[unit] = blocks.get(unit, 0) + tpm.layers[i].numel_per_rank
        largest = max(blocks.values(), default=0)
        working = (root + min(2, len(blocks)) * largest) * precision.weight_bytes
        out.append(replace(m, breakdown=offload_memory(m.breakdown, layout.offload, working_weight_bytes=working,
                                                       working_grad_bytes=largest * precision.grad_bytes)))
    return tuple(out)


def layout_fit(stages: tuple[StageMemory, ...], config: PredictConfig) -> tuple[MemoryBreakdown, FitAdvice]:
    """The fullest stage's breakdown (with a suggestion when it does not fit) and the advice."""
    ex = config.execution
    worst = worst_stage(stages)
    m = worst.breakdown
    if m.fits:
        return m, FitAdvice(fits=True, total_bytes=m.total_bytes, message="fits")
    hints = []
    if config.parallelism.strategy == "ddp" and config.data_parallel > 1:
        hints.append("--strategy zero1")
    if ex.recompute == "full" and ex.recompute_every != 1:
        hints.append("--recompute-every 1")
    elif ex.recompute != "full":
        hints.append("--recompute selective or full" if ex.recompute == "off" else "--recompute full")
    if config.parallelism.tp > 1 and not config.parallelism.sequence_parallel:
        hints.append("--sequence-parallel")
    if config.workload.micro_batch > 1:
        hints.append("a smaller --micro-batch")
    hints.append("more --tp or --pp (dpsim plan searches the layouts that fit)")
    need, usable = format_bytes_against(m.total_bytes, m.usable_bytes)
    message = f"stage {worst.stage} needs {need} of {usable} usable per GPU; try {', '.join(hints)}"
    return replace(m, suggestion=message), FitAdvice(fits=False, total_bytes=m.total_bytes, message=message)


def predict_layout(config: PredictConfig, *, topology: Topology, gpu, model: ModelSpec, precision,
                   compute: ComputeProfile, collectives: GroupCollectives, provenance=None,
                   comm_slowdown: float = 0.0, profile=None, seen: dict | None = None) -> Prediction:
    """Predict one step of ``config``'s tensor x pipeline x data layout (see the module docstring).

    ``compute`` is the whole model's profile at the micro-batch (scaled to a measured step
    when the config gives one); ``collectives`` the job's models with the layout's groups;
    ``comm_slowdown`` a calibration profile's measured one (0 without); ``profile`` that
    profile, whose measured message sizes the step's collectives are checked against as the
    data-parallel path checks its buckets. ``seen`` (when given) receives ``memory_at``: the stages' memory
    and its fit for the same job at another micro-batch count (what an extrapolated prediction computes at its
    own count, :mod:`dpsim.predict.extrapolate`: a peak is not affine past where it stops fitting).
    """
    layout = layout_of(config, precision.grad_bytes, model)
    check_schedule(layout)
    load = expert_load(config, model)
    tpm = tp_model(cp_shard(model, layout.context), config.parallelism.tp, sequence_parallel=config.parallelism.sequence_parallel,
                   experts=expert_split(config, model))
    cost = collective_cost(collectives)

    def tp_cost(op: str, size: float) -> float:
        return cost("tp", op, size)

    def cp_cost(op: str, size: float) -> float:
        return context_comm_s(collectives, cost, op, size)

    ep_classes = degraded_classes(collectives, "ep")

    a2a_of: dict[float, float] = {}

    def ep_cost(bytes_per_rank: float) -> float:
        # Every MoE layer sends the same bytes: one costing per size, not one per layer.
        t = a2a_of.get(bytes_per_rank)
        if t is None:
            t = a2a_of[bytes_per_rank] = expert_a2a_s(
                collectives.communicator("ep"), bytes_per_rank, load, config.parallelism.moe_a2a, model.moe,
                config.parallelism.moe_node_limit, class_factors=ep_classes)
        return t

    def etp_cost(bytes_per_rank: float) -> float:
        return expert_tp_s(cost, bytes_per_rank, load, layout.etp)

    scale, opt_scale = _scales(config, model, gpu, precision, compute, profile)
    shard = shard_compute(tpm, gpu, config, precision, profile=profile)
    act = _act_bytes(precision)
    accumulate = () if layout.grad_accum_fusion else gradient_accumulation_s(tpm, gpu, precision.grad_bytes)
    shares = recompute_shares(tpm.spec, config.execution.checkpointing, gpu=gpu, precision=precision,
                              micro_batch=config.workload.micro_batch) \
        if config.execution.recompute in ("op", "megatron", "moe", "deepseek") else None
    zero3 = zero3_layout_passes(tpm, layout, gpu, precision) if layout.strategy == "zero3" else None
    work = layer_work(tpm, shard, layout, tp_cost=tp_cost, act_element_bytes=act, time_scale=scale,
                      overlap_slowdown=config.calibration.overlap_slowdown, comm_slowdown=comm_slowdown,
                      accumulate_s=accumulate, recompute_share=shares,
                      cp_cost=cp_cost if layout.cp > 1 else None, cp_model=model if layout.cp > 1 else None,
                      ep_cost=ep_cost if layout.ep > 1 else None, etp_cost=etp_cost if layout.etp > 1 else None,
                      gpu=gpu,
                      offload_s=activation_offload_s(tpm, layout, topology.spec.node, act),
                      cached_fp8_weights=caches_fp8_weights(precision.fp8),
                      sharding_copy_s=zero3.copy_s if zero3 is not None else (), fp8=precision.fp8)
    assignment = stage_assignment(tpm, layout)
    chunks = chunk_work(work, assignment)
    hidden = next((l.hidden_bytes_per_sample for l in tpm.layers if l.role == "block"), 0.0)
    full_hidden = hidden * layout.micro_batch * act / 2.0
    p2p_bytes = full_hidden / layout.tp
    gather_s = tp_cost("all_gather", full_hidden) if layout.tp > 1 and not layout.sequence_parallel else 0.0
    p, d = layout.pp, layout.grad_group
    memory = stages_memory(tpm, layout, gpu, precision, config.workload.optimizer, assignment, cp_model=model)
    if seen is not None:
        def memory_at(other: PredictConfig):
            stages = stages_memory(tpm, layout_of(other, precision.grad_bytes, model), gpu, precision,
                                   other.workload.optimizer, assignment, cp_model=model)
            return stages, *layout_fit(stages, other)
        seen["memory_at"] = memory_at
    per_param_opt = shard.optimizer_s / tpm.spec.param_count * opt_scale if tpm.spec.param_count else 0.0
    # A sharded optimizer updates dense parameters / dp (x cp) and routed experts / edp per GPU.
    experts = [sum(c.expert_grad_numel for c in stage) for stage in chunks]
    optimizer_s = [stage_optimizer_s(per_param_opt, m.params_per_gpu, e, layout) for m, e in zip(memory, experts)]
    internlm = internlm_stages(tpm, assignment, layout, config.gradients.bucket_cap_mb, precision.grad_bytes)
    if internlm:  # the rank owning the most updates last, and every broadcast waits for it
        optimizer_s = [per_param_opt * z.largest_owned for z in internlm]
    if offloads_optimizer(layout.offload):
        ranks = min(topology.gpus_per_node, topology.n_gpus)
        fetches = param_fetches(layout.offload, layout.recompute == "full")
        optimizer_s = [host_step_s(-(-m.params_per_gpu // d), ranks, topology.spec.node, precision.weight_bytes,
                                   grad_bytes=precision.grad_bytes, param_fetches=fetches,
                                   host_bytes=host_bytes_per_param(layout.strategy)) for m in memory]
    dp_plan = DataParallelPlan(strategy=layout.strategy, dp=d, overlap=layout.overlap,
                               bucket_elements=internlm[0].bucket_elements if internlm else
                               layout.bucket_elements or default_bucket_elements(d),
                               grad_bytes=precision.grad_bytes, weight_bytes=precision.weight_bytes,
                               edp=layout.expert_shard_group if model.moe is not None else 1, internlm=internlm,
                               # HSDP under expert parallelism: the experts on their shard group ("ezero"),
                               # each gradient shard all-reduced over their replica group ("ezrep").
                               expert_comm="ezero" if layout.expert_replicas > 1 else "edp",
                               expert_replicas=layout.expert_replicas if model.moe is not None else 1,
                               # FSDP with ep 1 gathers and reduces the experts with their block.
                               experts_apart=layout.experts_apart,
                               zero_comm="zero" if layout.zero1_group < d else "dp",
                               # HSDP: fsdp on its shard group ("zero"), each gradient shard all-reduced
                               # over the replica group ("zrep").
                               shard_comm="zero" if layout.replicas > 1 else "dp",
                               replicas=layout.replicas,
                               # FSDP2's float8 all-gather, or FP8 primary weights wherever parameters are
                               # gathered (the distributed optimizer's gather of the updated ones too): the
                               # recipe as the precision runs it under this strategy says which.
                               fp8=precision.fp8,
                               backward_gather_numel=zero3.backward_gather_numel if zero3 is not None else ())
    # DualPipe sums each stage's two parameter copies instead (the embedding's among them).
    emb_bytes = (tpm.embedding_numel_per_rank * precision.grad_bytes
                 if tpm.tied_embedding and p > 1 and layout.schedule != "dualpipe" else 0.0)
    plan = build_pipeline_program(chunks, layout, p2p_bytes=p2p_bytes, gather_s=gather_s, optimizer_s=optimizer_s,
                                  dp=dp_plan, embedding_grad_bytes=emb_bytes,
                                  mirror_groups=mirror_groups(config, topology),
                                  a2a_contention=overlap_contention(config.calibration.overlap_slowdown, comm_slowdown))
    result = run_pipeline(plan.program, cost, overlap_slowdown=config.calibration.overlap_slowdown, comm_slowdown=comm_slowdown)
    step = result.step_time_s
    reports = _stage_reports(result, chunks, memory, model, layout)
    m_total = layout.micro_batches
    contention = overlap_contention(config.calibration.overlap_slowdown, comm_slowdown)
    # The headline (forward, backward, optimizer, communication and what of it is exposed) is the
    # critical stage's: the one whose own work and waits are the most of the step (critical_stage).
    k = critical_stage(result)
    crit = stage_comm(layout, chunks[k], k, contention)
    p2p_s = cost("pp", "broadcast", p2p_bytes) if p > 1 else 0.0
    data_transfers = [t for t in plan.program.transfers if t.size_bytes > 0]  # not DeepSpeed's handshakes
    sent = sum(1 for t in data_transfers if t.src == k)
    mem, advice = layout_fit(memory, config)
    s0 = chunks[0]
    report = LayoutReport(layout=layout, stages=reports, bubble_fraction=reports[0].bubble_s / step if step else 0.0,
                          ideal_bubble_fraction=bubble_fraction(layout, weight_share=_share(s0, "weight_grad_s"),
                                                                backward_share=_share(s0, "backward_s")),
                          tp_comm_s=crit.tp_comm_s, tp_exposed_s=crit.tp_exposed_s,
                          p2p_bytes=p2p_bytes, p2p_s=p2p_s, transfers=len(data_transfers),
                          embedding_grad_bytes=emb_bytes, cp_comm_s=crit.cp_comm_s, cp_exposed_s=crit.cp_exposed_s,
                          pipeline=result, expert_load=load,
                          ep_comm_s=reports[k].ep_comm_s, etp_comm_s=reports[k].etp_comm_s,
                          ep_exposed_s=crit.ep_exposed_s, p2p_comm_s=sent * p2p_s, critical_stage=k,
                          stage_parts=stage_parts(chunks, [l.routed_bytes_per_sample > 0 for l in tpm.layers],
                                                  optimizer_s))
    stk = result.stages[k]
    fwd = stk.by_kind_s.get("forward", 0.0)
    bwd = stk.by_kind_s.get("backward", 0.0) + stk.by_kind_s.get("recompute", 0.0)
    opt = stk.by_kind_s.get("optimizer", 0.0)
    exposed = crit.tp_exposed_s + stk.exposed_comm_s + crit.cp_exposed_s + crit.ep_exposed_s
    # The same charge as the data-parallel path's, on the tensor-, context- and data-parallel waits
    # (the all-to-alls are not charged, as before they were reported). Each stage computes slower
    # after its own waits, in its optimizer step at its end; the step is the last stage's end, so
    # it moves once, by the most any stage's charge exceeds that stage's idle tail before the step
    # ends (all of stage 0's with one stage). The pipeline's own report (bubble, tails) keeps the
    # played step, which the charge does not reshape.
    if provenance is not None and provenance.after_comm is not None:
        waits = [c.tp_exposed_s + st.exposed_comm_s + c.cp_exposed_s
                 for c, st in zip((crit if s == k else stage_comm(layout, chunks[s], s, contention)
                                   for s in range(p)), result.stages)]
        tails = [step - st.end_s for st in result.stages]
        binding = max(range(p), key=lambda s: provenance.after_comm.charge(waits[s]).charged_s - tails[s])
        charged_s, provenance = charge_after_comm(provenance, waits[binding], slack_s=tails[binding],
                                                  stage=binding if p > 1 else None)
    else:
        charged_s, provenance = charge_after_comm(provenance, 0.0)
    step += charged_s
    if profile is not None and provenance is not None:
        provenance = provenance.with_bucket_warnings(profile, topology, [c.size_bytes for c in plan.program.comms])
    samples = layout.global_batch / step
    # The one-GPU step: the whole model's micro-batches with their recomputation, no communication
    # (the re-run forward's tensor- and context-parallel waits are not the one GPU's).
    full_fb = (compute.forward_s + compute.backward_s)
    recompute_full = sum(l.recompute_s - l.recompute_waits_s for l in work) * layout.tp * layout.cp
    # TransformerEngine's cached FP8 weight casts once a step there too (caches_fp8_weights).
    cast_once = sum(l.fp8_weight_cast_s for l in compute.layers) if caches_fp8_weights(precision.fp8) else 0.0
    single_step = m_total * (full_fb - cast_once + recompute_full) + cast_once + compute.optimizer_s
    single = layout.micro_batch * m_total / (single_step * one_gpu_compute_ratio(config, profile))
    peak = (gpu.peak_flops_per_s.get(precision.compute_dtype) or max(gpu.peak_flops_per_s.values())
            if gpu.peak_flops_per_s else None)
    flops_per_gpu = compute.flops_per_step * m_total / (layout.tp * layout.pp * layout.cp)
    dp_ops = [plan.program.comms[i] for i in plan.gradient_ops if plan.program.comm_stages[i] == (k,)]
    largest = max(dp_ops, key=lambda c: c.size_bytes) if dp_ops else None
    ring = collectives.group("dp").time(largest.op, largest.size_bytes) if largest is not None else None
    by_op: dict[str, float] = {}
    for i, c in enumerate(plan.program.comms):
        if k in plan.program.comm_stages[i]:
            by_op[c.op] = by_op.get(c.op, 0.0) + c.size_bytes
    timing = StepTiming(step_time_s=step, forward_s=fwd, backward_s=bwd, optimizer_s=opt,
                        comm_s=crit.tp_comm_s + stk.comm_s + report.p2p_comm_s + crit.cp_comm_s + crit.ep_comm_s,
                        exposed_comm_s=exposed)
    sim = SimulationResult(steps=(timing,) * config.workload.steps, trace=result.trace)
    return Prediction(
        config=config, topology=topology.spec.name, gpu=gpu.name, n_gpus=topology.n_gpus, n_nodes=topology.n_nodes,
        model=model.name, param_count=model.param_count, tokens_per_sample=model.tokens_per_sample,
        step_time_s=step, forward_s=fwd, backward_s=bwd, optimizer_s=opt, compute_s=single_step,
        comm_s=timing.comm_s, exposed_comm_s=timing.exposed_comm_s, samples_per_s=samples,
        tokens_per_s=samples * model.tokens_per_sample if model.tokens_per_sample else None,
        single_gpu_samples_per_s=single, scaling_efficiency=samples / (topology.n_gpus * single),
        mfu=flops_per_gpu / step / peak if peak else None, n_buckets=len(dp_ops), gradient_bytes=int(sum(c.size_bytes for c in dp_ops)),
        ring=ring, memory=mem, simulation=sim, program=None, collectives=collectives, strategy=config.parallelism.strategy,
        comm_bytes_by_op=by_op, fit=advice, provenance=provenance, layout=report,
        # The links of one data-parallel group's cluster, as its collectives load them.
        links=link_report(collectives.group("dp"), [(c.op, c.size_bytes) for c in dp_ops], step) if dp_ops else None)


CRITICAL_TIE = 1e-9
"""Relative margin within which stages' own time counts as equal (float noise of identical
stages): the lowest-numbered of them is the critical stage, so stage 0 where all are alike."""


def critical_stage(result: PipelineResult) -> int:
    """The stage whose own time sets the step: its compute (every micro-batch's forward, backward and
    recomputation, the optimizer, with the collective waits inside its ops and the overlap slowdown)
    plus its idle waits for its own collectives, the most of any stage.

    Every stage starts at 0 and is computing, waiting for its collectives, waiting for another
    stage (the bubble) or done (the tail) until the step ends
    (:class:`~dpsim.engine.pipeline.StageTiming`: ``end_s = busy_s + wait_comm_s + wait_transfer_s``),
    so the stage with the most own time is the one idle least for the others: the bottleneck whose
    work the rest wait on. It is not always the last to finish: with 1F1B stage 0 runs the last
    backward of the drain and ends the step, waiting (bubble) for a heavier last stage that set it.
    With one stage it is stage 0."""
    return heaviest_stage([st.busy_s + st.wait_comm_s for st in result.stages])


def heaviest_stage(own_s: Sequence[float]) -> int:
    """The stage with the most own time (``own_s``, per stage: compute plus waits for its own
    collectives), the lowest-numbered of those within :data:`CRITICAL_TIE` of it: the rule of
    :func:`critical_stage`, also applied by ``plan``'s closed form to its per-stage estimates."""
    top = max(own_s)
    return next(s for s, t in enumerate(own_s) if t >= top * (1 - CRITICAL_TIE))


@frozen_dataclass
class Zero3LayoutPasses:
    """What DeepSpeed ZeRO-3 adds to a layout's data-parallel plan, per model layer (by index)."""

    backward_gather_numel: tuple[float, ...]
    """Elements each layer's backward all-gathers (:attr:`DataParallelPlan.backward_gather_numel`)."""
    copy_s: tuple[float, ...]
    """Seconds of DeepSpeed's gradient passes in each layer's backward, averaged over the step's
    micro-batches (:func:`~dpsim.strategies.sharded.zero3_grad_pass_bytes`)."""


def zero3_layout_passes(tpm: TpModel, layout: Layout, gpu, precision) -> Zero3LayoutPasses:
    """DeepSpeed ZeRO-3 over a layout's ``dp x cp`` replicas (XTuner's sequence parallelism gives
    DeepSpeed no ``mpu``, so its partition spans every rank: ``xtuner/engine/_strategy/deepspeed.py``
    at InternLM/xtuner@7575f2c9137c), with the two DeepSpeed mechanisms the data-parallel path's
    ``zero3`` models: the reuse-distance rule for what backward gathers again
    (:func:`~dpsim.strategies.deepspeed_fetch.backward_gather_numel`, on the rank's tensor-parallel
    shard: what its modules hold) and the gradient passes around each reduce-scatter
    (:func:`~dpsim.strategies.sharded.zero3_grad_pass_bytes`), each pass one memory-bound kernel on the
    compute stream (as :func:`~dpsim.strategies.sharded._zero3_copies` charges them). A unit is a
    block, or a layer outside the blocks, as the layout's gathers are."""
    spec, world = tpm.spec, layout.grad_group
    names = [layer.unit if layer.unit is not None else f"layer {layer.index}" for layer in tpm.layers]
    members: dict[str, list[int]] = {}
    for i, name in enumerate(names):
        members.setdefault(name, []).append(i)
    recomputed = checkpointed_blocks(tpm, layout) if layout.recompute == "full" else []
    again = backward_gather_numel(spec, names, recomputed)
    numel = [float(layer.param_count) for layer in spec.layers]
    unit_numel = {name: sum(numel[i] for i in idx) for name, idx in members.items()}
    bwd = tuple(again.get(names[i], 0) * numel[i] / unit_numel[names[i]] if unit_numel[names[i]] else 0.0
                for i in range(len(names)))
    units = [(name, [p.numel for i in idx for p in spec.layers[i].params],
              unit_shard_numel([p for i in idx for p in spec.layers[i].params], world))
             for name, idx in members.items() if unit_numel[name]]
    passes = zero3_grad_pass_bytes(units, world, precision.grad_bytes)
    eff = Efficiencies()

    def t(size: float) -> float:
        return memory_term(size, gpu).time_s(eff) if size else 0.0
    m = layout.micro_batches
    unit_s = {name: sum(t(b) for b in scatter) + (m - 1) / m * (t(acc[0]) - t(acc[1]))
              for name, (scatter, acc) in passes.items()}
    # Charged in the backward of the unit's first layer in backward order (its last), where its
    # gradients are complete and its reduce-scatter leaves.
    copy = [0.0] * len(names)
    for name, idx in members.items():
        copy[max(idx)] += unit_s.get(name, 0.0)
    return Zero3LayoutPasses(backward_gather_numel=bwd, copy_s=tuple(copy))


def stage_optimizer_s(per_param_s: float, params_per_gpu: int, expert_numel: int, layout: Layout) -> float:
    """One stage's optimizer step per GPU, ``per_param_s`` a parameter: all ``params_per_gpu`` it holds,
    or with a sharded optimizer (``zero1``, ``fsdp``) its share: the dense parameters over ``dp x cp``
    (:attr:`~dpsim.strategies.layout.Layout.grad_group`) and its ``expert_numel`` routed experts'
    over ``edp``, each rounded up."""
    if layout.strategy in OPTIMIZER_SHARDING_LAYOUT_STRATEGIES:
        return per_param_s * (-(-(params_per_gpu - expert_numel) // layout.shard_group)
                              + -(-expert_numel // layout.expert_shard_group))
    return per_param_s * params_per_gpu


@frozen_dataclass
class StageComm:
    """A stage's communication inside its ops over the step (every micro-batch it runs)."""

    tp_comm_s: float
    """Tensor-parallel collectives."""
    tp_exposed_s: float
    """Of which its compute stream waits for."""
    cp_comm_s: float
    """Context-parallel transfers."""
    cp_exposed_s: float
    """Of which its compute stream waits for."""
    ep_comm_s: float
    """MoE all-to-alls and expert-tensor collectives."""
    ep_exposed_s: float
    """Of which its compute stream waits for (all but what ``--moe-a2a-overlap`` hides)."""


def stage_comm(layout: Layout, stage_chunks: tuple[ChunkWork, ...], stage: int, contention: float) -> StageComm:
    """Stage ``stage``'s :class:`StageComm`: each chunk's times the micro-batches the stage runs
    through it (:func:`chunk_runs`); ``contention``: the slowdown the paired-op overlap of the
    all-to-alls runs under (:func:`~dpsim.strategies.layout.overlap_contention`)."""
    slots = schedule_slots(layout.schedule, layout.pp, layout.chunks, layout.micro_batches, stage,
                           extra_warmup(layout))
    runs = chunk_runs(layout, stage, slots)

    def total(part) -> float:
        return stage_comm_s(stage_chunks, runs, part)

    # The MoE all-to-alls (and expert-tensor collectives) block the stage's compute stream: they are
    # communication the step waits for, all of it but what --moe-a2a-overlap hides under the paired
    # op (the cut the pipeline program takes off those ops, a2a_overlap_cut).
    ep_comm = total(lambda l: l.ep_comm_s + l.etp_comm_s)
    ep_exposed = ep_comm
    if ep_comm > 0 and layout.moe_a2a_overlap:
        ep_exposed -= sum(sum(a2a_overlap_cut(stage_chunks[slots[f][1]], stage_chunks[slots[b][1]], contention))
                          for f, b in a2a_pairs(layout, slots, stage))
        ep_exposed = max(0.0, ep_exposed)
    return StageComm(tp_comm_s=total(lambda l: l.tp_comm_s), tp_exposed_s=total(lambda l: l.tp_exposed_s),
                     cp_comm_s=total(lambda l: l.cp_comm_s), cp_exposed_s=total(lambda l: l.cp_exposed_s),
                     ep_comm_s=ep_comm, ep_exposed_s=ep_exposed)


def mirror_groups(config: PredictConfig, topology: Topology) -> tuple[str, ...]:
    """With DualPipe, the communicator of each stage ``r < pp/2`` and its mirror (where the two
    copies of its parameters sit on ``topology``); empty otherwise."""
    par = config.parallelism
    if par.schedule != "dualpipe":
        return ()
    shape = layout_shape(config)
    return tuple(mirror_pair_group(topology, shape, r) for r in range(par.pp // 2))


def _share(chunks: tuple[ChunkWork, ...], part: str) -> float:
    """A stage's ``part`` (weight-gradient pass, backward) over its forward and backward (the
    closed-form bubbles of ZB-H1 and DualPipe)."""
    total = sum(c.forward_s + c.backward_s for c in chunks)
    return sum(getattr(c, part) for c in chunks) / total if total > 0 else 0.0


def chunk_runs(layout: Layout, stage: int, slots=None) -> list[int]:
    """Per chunk of ``stage``, the micro-batches it runs in a step (its forwards in the schedule):
    every micro-batch for most schedules, half of them per chunk for DualPipe (each end feeds one of
    a stage's two chunks). ``slots``: the stage's schedule when the caller has it already."""
    if slots is None:
        slots = schedule_slots(layout.schedule, layout.pp, layout.chunks, layout.micro_batches, stage,
                               extra_warmup(layout))
    return [sum(1 for kind, chunk, _ in slots if kind == "F" and chunk == c) for c in range(layout.chunks)]


def stage_comm_s(stage_chunks: tuple[ChunkWork, ...], runs: list[int], part) -> float:
    """A stage's ``part(layer_work)`` over its step: each chunk's times the micro-batches it runs
    (:func:`chunk_runs`)."""
    if len(set(runs)) == 1:  # every chunk as often (all but DualPipe): summed first, as it always was
        return sum(part(l) for c in stage_chunks for l in c.layers) * runs[0]
    return sum(n * sum(part(l) for l in c.layers) for n, c in zip(runs, stage_chunks))


def _stage_reports(result: PipelineResult, chunks: tuple[tuple[ChunkWork, ...], ...],
                   memory: tuple[StageMemory, ...], model: ModelSpec, layout: Layout) -> tuple[StageReport, ...]:
    out = []
    step = result.step_time_s
    for s, st in enumerate(result.stages):
        runs = chunk_runs(layout, s)
        blocks = len({model.layers[w.index].unit for c in chunks[s] for w in c.layers if model.layers[w.index].unit})
        out.append(StageReport(
            stage=s, blocks=blocks, layers=tuple(tuple(model.layers[w.index].name for w in c.layers) for c in chunks[s]),
            forward_s=sum(c.forward_s for c in chunks[s]), backward_s=sum(c.backward_s for c in chunks[s]),
            busy_s=st.busy_s, bubble_s=st.wait_transfer_s, comm_wait_s=st.wait_comm_s,
            tail_s=max(0.0, step - st.end_s), dp_comm_s=st.comm_s, dp_exposed_s=st.exposed_comm_s,
            memory=memory[s], ep_comm_s=stage_comm_s(chunks[s], runs, lambda l: l.ep_comm_s),
            etp_comm_s=stage_comm_s(chunks[s], runs, lambda l: l.etp_comm_s)))
    return tuple(out)
