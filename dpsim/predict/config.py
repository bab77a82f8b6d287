"""What one prediction is asked: :class:`PredictConfig` (the CLI's flags, in SI units), checked once.

Every rule about the values of one configuration lives here and runs in
:meth:`PredictConfig.__post_init__`: a field's own rule (its type, its range, its
closed set of choices) sits next to the field (:func:`check_value` applies it), and
the rules between fields are :meth:`PredictConfig._check_combination`. Each failure is one
:class:`~dpsim.errors.ConfigError` line naming the command-line flag (:func:`flag_name`),
the value and what is allowed. The facts a rule needs come from their owners (which
strategies take gradient buckets: :mod:`dpsim.strategies.registry`; the ``--algo``/``--proto``
lists: :mod:`dpsim.collectives.nccl_tuning`). Only what needs loading something is checked
where it is loaded (:mod:`dpsim.predict.run`): the topology preset or file, the GPU preset,
the catalog model, the calibration profile.

The docstrings of the fields are the ``--help`` of their flags (:mod:`dpsim.cli.options`),
so they are written for the person typing the command and contain no square brackets
(rich would read them as markup).
"""

from __future__ import annotations

import difflib
import math
import numbers
import typing
import warnings
from dataclasses import field, fields, replace
from functools import cache
from typing import Any, Literal

from dpsim.api_args import checked_constructor
from dpsim.collectives.nccl_tuning import parse_algorithms, parse_protocols
from dpsim.errors import ConfigError, ConfigTypeError
from dpsim.frozen import frozen_dataclass
from dpsim.hardware import GPU_PRESETS, power_cap_throughput
from dpsim.limits import (
    plain_number,
    MAX_BUCKET_CAP_MB,
    MAX_GPUS,
    MAX_GPUS_PER_NODE,
    MAX_GRAD_ACCUM,
    MAX_JOBS,
    MAX_MICRO_BATCH,
    MAX_MTP_DEPTH,
    MAX_OVERLAP_SLOWDOWN,
    MAX_POWER_CAP_W,
    MAX_PIPELINE_SLOTS,
    MAX_POWERSGD_RANK,
    MAX_POWERSGD_START_ITER,
    MAX_SAMPLES_PER_S,
    MAX_SEQ_LEN,
    MAX_SIMULATED_MICRO_BATCHES,
    MAX_EXTRAPOLATED_MICRO_BATCHES,
    MAX_GLOBAL_BATCH,
    MAX_SINGLE_GPU_STEP_S,
    MAX_STEPS,
    MAX_TEXT_CHARS,
    MIN_COMPUTE_EFFICIENCY,
    MIN_SINGLE_GPU_STEP_S,
    Range,
    is_finite,
    short,
)
from dpsim.profile.calibrated import measures_compute
from dpsim.profile.io import load_profile
from dpsim.profile.schema import Profile
from dpsim.strategies.ddp_costs import DdpOptions
from dpsim.strategies.checkpointing import CheckpointPolicy, check_recompute
from dpsim.strategies.offload import OFFLOAD_STRATEGIES, PARAM_OFFLOAD_STRATEGIES, offloads_optimizer
from dpsim.predict.extrapolate import extrapolates, full_path_why
from dpsim.strategies.registry import (
    BUCKET_CAP_MB,
    FSDP_UNIT,
    check_fsdp_options,
    check_gemini_accum,
    check_zero_options,
    honours,
)
from dpsim.topology.load import preset_names
from dpsim.units import seconds_in_words
from dpsim.wording import canonical_choice, count
from dpsim.workload.catalog import list_models
from dpsim.workload.compute import DEFAULT_COMPUTE_EFFICIENCY, MULTI_GPU_TRAINING_EFFICIENCY
from dpsim.workload.library_models import lowered_shape_ref, missing_library
from dpsim.workload.model_ref import is_torch_model_ref
from dpsim.workload.routing import parse_routing

DEFAULT_OVERLAP_SLOWDOWN = 0.189
"""Compute slowdown while a collective runs: the average measured over GPT and Llama training
on 4-GPU A100, H100, MI250 and MI210 servers, 18.9 % (up to 40 %) against the same compute
without communication (Ahmed et al., "Characterizing Compute-Communication Overlap in
GPU-Accelerated Distributed Deep Learning", arXiv:2507.03114, abstract). NCCL's kernels take
SMs (one CTA per channel: ~16 channels are ~12 % of an H100 SXM5's 132 SMs, NVIDIA H100
datasheet) and share memory bandwidth with the compute. Used until ``dpsim calibrate``
measures it on the user's own hardware."""

DEFAULT_LINK = "ethernet"
"""The topology preset of a job that names neither ``--link`` nor ``--topology``."""
DEFAULT_PRECISION = "amp-bf16"
"""``--precision`` left out, without a CPU calibration profile: what PyTorch users train with most."""

PROFILE_DEFAULTED = {"precision": DEFAULT_PRECISION, "overlap_slowdown": DEFAULT_OVERLAP_SLOWDOWN}
"""Fields whose default a calibration profile decides (``None`` until :mod:`dpsim.predict.resolve`
reads it), and their value without a profile, filled in when the config is made. A config made
without ``calibration`` therefore holds these values as if given: add a profile by making the
config with it, not by ``dataclasses.replace``."""

# The closed choices, spelled out so that a type checker and ``--help`` can read them.
# Each mirrors a registry lower down; tests/test_config.py asserts they are equal.
Precision = Literal["fp32", "tf32", "amp-bf16", "fp32-params-bf16-acts", "amp-fp16", "bf16-params", "bf16-fp32-grads", "bf16-fp32-grads-bf16-moments", "fp16-params",
                    "bf16-true", "amp", "bf16-mixed", "fp16-mixed", "bf16"]
"""``--precision``: the keys of :data:`dpsim.workload.precision.PRECISIONS`, then the old names kept
as aliases (:data:`dpsim.workload.precision.PRECISION_ALIASES`)."""
Optimizer = Literal["adamw", "adam", "sgd-momentum", "sgd"]
"""``--optimizer``: the keys of :data:`dpsim.workload.precision.OPTIMIZER_STATES`."""
Strategy = Literal["ddp", "zero1", "zero2", "zero3", "fsdp", "fsdp-shard-grad-op", "fsdp-hybrid"]
"""``--strategy``: the keys of :data:`dpsim.strategies.registry.STRATEGIES`."""
FsdpUnit = Literal["block", "layer", "model"]
"""``--fsdp-unit``: the keys of :data:`dpsim.strategies.registry.FSDP_UNITS`."""
Placement = Literal["packed", "interleaved"]
"""``--placement``: the job layouts :class:`dpsim.collectives.nccl.NcclCollectives` knows."""
RackPlacement = Literal["aligned", "contiguous"]
"""``--rack-placement``: :data:`dpsim.collectives.groups.RACK_PLACEMENTS`."""
MoeA2a = Literal["flat", "hierarchical"]
"""``--moe-a2a``: the keys of :data:`dpsim.collectives.all_to_all.ALL_TO_ALL_ALGORITHMS`."""
Schedule = Literal["1f1b", "gpipe", "1f1b-interleaved", "deepspeed", "zb-h1", "dualpipe"]
"""``--schedule``: the keys of :data:`dpsim.strategies.layout.SCHEDULES`."""
Recompute = Literal["off", "selective", "op", "full", "megatron", "moe", "deepseek"]
"""``--recompute``: the keys of :data:`dpsim.strategies.checkpointing.RECOMPUTE`."""
AttentionKernel = Literal["sdpa", "triton", "flash1", "flash3", "cudnn"]
"""``--attention-kernel``: :data:`dpsim.workload.spec.ATTENTION_KERNELS`."""
Activations = Literal["eager", "megatron", "megatron-legacy"]
"""``--activations``: :data:`dpsim.workload.layers.ACTIVATION_COUNTS`."""
LossImpl = Literal["fused", "eager"]
"""``--loss-impl``: :data:`dpsim.memory.LOSS_IMPLS`."""
FsdpVersion = Literal["1", "2"]
"""``--fsdp-version``: the keys of :data:`dpsim.strategies.registry.FSDP_VERSIONS`."""
FsdpAccumulate = Literal["auto", "unsharded", "sharded"]
"""``--fsdp-accumulate``: the keys of :data:`dpsim.strategies.registry.FSDP_ACCUMULATE`."""
ZeroImpl = Literal["deepspeed", "internlm", "megatron", "gemini"]
"""``--zero-impl``: the keys of :data:`dpsim.strategies.registry.ZERO_IMPLS`."""
Offload = Literal["off", "optimizer", "params+optimizer", "expert-activations"]
"""``--offload``: the keys of :data:`dpsim.strategies.offload.OFFLOAD`."""
CpComm = Literal["p2p", "all-gather", "a2a"]
"""``--cp-comm``: the keys of :data:`dpsim.strategies.context.CP_COMM`."""
TpCommOverlap = Literal["off", "backward", "full", "async"]
"""``--tp-comm-overlap``: the keys of :data:`dpsim.strategies.tensor.TP_COMM_OVERLAP`."""
CommHook = Literal["off", "allreduce", "fp16-compress", "bf16-compress", "powersgd"]
"""``--comm-hook``: the keys of :data:`dpsim.strategies.comm_hooks.COMM_HOOKS`."""
ZeroGrad = Literal["set-to-none", "zero-loop"]
"""``--zero-grad``: :data:`dpsim.workload.compute.ZERO_GRAD_MODES`."""
Fp8 = Literal["te-delayed", "te-current", "torchao-tensorwise", "torchao-rowwise", "mxfp8", "te-blockwise", "deepseek-blockwise"]
"""``--fp8``: the keys of :data:`dpsim.workload.fp8.FP8_RECIPES`."""
DDP_FIELDS = ("gradient_as_bucket_view", "static_graph", "find_unused_parameters", "broadcast_buffers", "comm_hook",
              "powersgd_rank", "powersgd_start_iter")
"""The fields of PyTorch ``DistributedDataParallel``'s arguments (:class:`dpsim.strategies.ddp_costs.DdpOptions`)."""
LAYOUT_FIELDS = ("tp", "pp", "dp", "global_batch", "schedule", "virtual_stages", "stage_layers", "sequence_parallel",
                 "recompute", "tp_comm_overlap", "tp_across_network", "grad_accum_fusion", "ep", "etp")
"""The fields of a tensor x pipeline x data layout (every command that takes a job takes them)."""
MOE_FIELDS = ("moe_routing", "moe_capacity_factor", "moe_a2a", "moe_a2a_overlap", "moe_node_limit", "mtp_depth")
"""The fields of a mixture of experts' routing and all-to-all (and DeepSeek-V3's multi-token prediction, a
workload field its MoE jobs set): ``predict`` and ``goodput`` take them all, so the same job gets the same
step time from both."""
LAYOUT_DP_STRATEGIES = ("ddp", "zero1", "fsdp", "zero3", "fsdp-hybrid")
"""Data-parallel strategies over the replicas of a tensor/pipeline layout: the keys of
:data:`dpsim.strategies.layout.LAYOUT_STRATEGIES`."""
PLAN_DP_STRATEGIES = ("ddp", "zero1", "fsdp", "zero3", "fsdp-hybrid")
"""The data-parallel strategies ``dpsim plan`` searches and estimates in closed form: the layout strategies
(``zero3`` only where ``predict`` runs it: without pipeline stages or expert parallelism, as DeepSpeed's
``PipelineEngine`` refuses ZeRO-2/3) and ``fsdp-hybrid`` (HSDP) with data parallelism alone, every shard group
of ``gpus_per_node x 2^k`` ranks below the data-parallel ranks (``--zero-group``)."""


def _count(maximum: int = MAX_GPUS, **metadata: Any) -> dict[str, Any]:
    # Every count has an upper bound (dpsim/limits.py); one the size of the largest cluster
    # unless the field names a tighter one.
    return {"rule": Range(1, maximum, integer=True), **metadata}


def _range(minimum: float, maximum: float, *, open_below: bool = False, **metadata: Any) -> dict[str, Any]:
    return {"rule": Range(minimum, maximum, open_below=open_below), **metadata}



@frozen_dataclass
class ClusterConfig:
    """The cluster a job runs on: its topology, GPUs and how collectives may run over the fabric.

    Read by the topology, hardware and collective layers (:mod:`dpsim.topology`, :mod:`dpsim.hardware`,
    :mod:`dpsim.collectives`); ``--help`` shows these flags in the Cluster panel.
    """
    gpus: int = field(default=64, metadata=_count(MAX_GPUS))
    """Data-parallel GPUs of one job; a multiple of the GPUs per node."""
    link: str | None = None
    """Topology preset, the name of a file in topologies/: e.g. nvlink, infiniband, ethernet,
    pcie, dgx-a100, aws-p4de, aws-p5, dgx-b200, gb200-nvl72. Left out: ethernet, or none with a topology file (refused with
    one: the file describes the whole cluster)."""
    topology_file: str | None = field(default=None, metadata={"flag": "--topology"})
    """A topology YAML file of your own (schema: topologies/README.md), instead of a preset."""
    gpus_per_node: int | None = field(default=None, metadata=_count(MAX_GPUS_PER_NODE))
    """GPUs per node, instead of the topology's; left out with a calibration profile measured across
    nodes: the profile's ranks per node."""
    gpu: str | None = None
    """GPU preset, instead of the topology's: v100, a100, h100, h200, b200, ... (dpsim/hardware.py)."""
    algo: str | None = None
    """Collective algorithms allowed, like NCCL_ALGO: ring, tree, nvls, nvls_tree, hierarchical,
    halving_doubling (comma list, or ^name to exclude); left out: NCCL's choice per call."""
    proto: str | None = None
    """NCCL protocols allowed, like NCCL_PROTO: LL, LL128, Simple (comma list, or ^name to
    exclude); left out: all."""
    jobs: int = field(default=1, metadata=_count(MAX_JOBS))
    """Identical data-parallel jobs sharing the fabric at once; their collectives share links
    max-min."""
    placement: Placement = "packed"
    """Servers of the jobs: packed (each job contiguous) or interleaved (round robin)."""
    rack_placement: RackPlacement = "aligned"
    """Where a job's groups sit on multi-server NVLink domains (NVL72 racks): aligned (each group's copies in
    segments inside one domain, as Slurm's topology/block places a job) or contiguous (racks filled in rank
    order, so a group may straddle two domains and cross the scale-out network)."""
    power_cap_w: float | None = field(default=None, metadata=_range(0, MAX_POWER_CAP_W, open_below=True))
    """Per-GPU power limit (nvidia-smi -pl), W: compute runs at the measured fraction of its uncapped
    rate at that cap (A100 SXM4: 100-400 W, dpsim/hardware.py POWER_CAP_THROUGHPUT); left out: the
    board's own limit, uncapped."""

    def __post_init__(self) -> None:
        _check_part(self)
        # link defaults to None ("not given") so that a preset given with a file can be told from the
        # default: the file won and the preset was dropped in silence (mix refuses the pair).
        if self.link is not None and self.topology_file is not None:
            raise ConfigError(f"--link and --topology: {short(self.link)} and {short(self.topology_file)}; the "
                              f"topology file describes the whole cluster, so give the preset or the file, not both")
        if self.link is None and self.topology_file is None:
            object.__setattr__(self, "link", DEFAULT_LINK)


@frozen_dataclass
class WorkloadConfig:
    """What is trained: the model, its batch and the steps of the training loop around it.

    Read by the workload layer (:mod:`dpsim.workload`); the Workload panel of ``--help``.
    """
    model: str = "gpt2-xl"
    """Catalog model (dpsim models lists them), a decoder by its shape
    (transformer:hidden=4096,layers=32,heads=32,ffn=11008,vocab=32000,seq=4096, plus kv_heads, act,
    norm, pos, positions, tied, embed_norm, dropout, name), a transformers config.json file (Llama,
    Mistral, Qwen2, GPT-2, OPT, BLOOM: built from its shape), or a torch builder returning an
    nn.Module: path/file.py:fn or package.module:fn."""
    input_shape: str | None = None
    """Example input of a torch-module model, batch first: 8,3,224,224 or 4,1024:int64."""
    seq_len: int | None = field(default=None, metadata=_count(MAX_SEQ_LEN))
    """Sequence length of a catalog model, instead of its own."""
    mtp_depth: int | None = field(default=None, metadata={"rule": Range(0, MAX_MTP_DEPTH, integer=True)})
    """Multi-token prediction modules trained with a Llama-style decoder (DeepSeek-V3's MTP,
    arXiv:2412.19437 Sec. 2.2): each one more transformer block, a 2h -> h projection and one more
    pass of the shared output head and its loss, on the last pipeline stage. Left out: the model's
    own (deepseek-v3: 1; others: 0)."""
    micro_batch: int = field(default=4, metadata=_count(MAX_MICRO_BATCH))
    """Samples per GPU per micro-batch."""
    grad_accum: int = field(default=1, metadata=_count(MAX_GRAD_ACCUM))
    """Micro-batches per optimizer step (gradient accumulation)."""
    global_batch: int | None = field(default=None, metadata=_count(MAX_GLOBAL_BATCH))
    """Samples per optimizer step over all replicas; sets the micro-batches per step to
    global-batch / (micro-batch x data-parallel replicas). Left out: --grad-accum micro-batches."""
    optimizer: Optimizer = "adamw"
    """Optimizer: sets the optimizer state kept per parameter."""
    clip_grad_norm: bool = False
    """The step clips the gradients to a global norm (torch.nn.utils.clip_grad_norm_): a norm pass and a
    scale pass over every gradient before the optimizer."""
    zero_grad: ZeroGrad = "set-to-none"
    """How gradients are reset each step: set-to-none (optimizer.zero_grad() since torch 2.0, free) or
    zero-loop (zero_grad(set_to_none=False) without foreach, torch before 2.0, Apex O2: one zero_() per
    parameter, each paying its dispatch)."""
    input_samples_per_s: float | None = field(default=None, metadata=_range(0, MAX_SAMPLES_PER_S,
                                                                             open_below=True))
    """Samples per second one GPU's input pipeline (its data loader) delivers: a step is never shorter
    than loading its micro-batches. Left out: unlimited (synthetic data)."""
    steps: int = field(default=3, metadata=_count(MAX_STEPS))
    """Training steps to simulate."""

    def __post_init__(self) -> None:
        _check_part(self)


def _divisors(n: int) -> list[int]:
    """The divisors of ``n``, smallest first."""
    small = [k for k in range(1, math.isqrt(n) + 1) if n % k == 0]
    return small + [n // k for k in reversed(small) if k * k != n]


def default_etp(*, tp: int, ep: int) -> int:
    """``--etp`` left out: ``tp`` with ``ep`` 1, else 1.

    With expert parallelism off both frameworks split every routed expert over the tensor-parallel ranks:
    Megatron-Core defaults ``--expert-tensor-parallel-size`` to ``--tensor-model-parallel-size``
    (megatron/training/arguments.py validate_args, ``if args.expert_tensor_parallel_size is None:
    args.expert_tensor_parallel_size = args.tensor_model_parallel_size``, and
    megatron/core/model_parallel_config.py ``__post_init__`` alike, NVIDIA/Megatron-LM@d98e8a64ddf3), and
    torchtitan's ``apply_moe_ep_tp`` gives the experts ``TensorParallel()`` on the tp mesh when there is no ep
    mesh ("EP disabled: shard routed expert weights across TP mesh", torchtitan/models/llama4/parallelize.py
    @c4b409af2bc7; the ``expert_tensor_parallel_degree`` it removed had "No effect ... when ep = 1",
    torchtitan/config/configs.py@a2b5ee66ccb7). With expert parallelism they differ: torchtitan's
    ``expert_tensor_parallel_degree`` defaulted to 1 (ep borrowing the tp ranks, ``efsdp = dp_shard * cp * tp
    // (etp * ep)``, torchtitan/distributed/parallel_dims.py@a2b5ee66ccb7), and since c4b409af2bc7 ("deprecate
    expert tensor parallel (ETP)") experts are never tensor-split under ep (torchtitan/config/configs.py@b5bcd76c66d0,
    expert_parallel_degree: "EP borrows ranks from FSDP and TP"); Megatron-Core keeps etp = tp. dpsim has no framework setting to
    choose between them, so it keeps 1 there (what it did before, and what the published Megatron-Core MoE
    recipes it is checked against set: ``--expert-tensor-parallel-size: 1`` in
    yanring/Megatron-MoE-ModelZoo model_configs/benchmarking/*.yaml@c1ad0b5c89f4)."""
    return tp if ep == 1 else 1


@frozen_dataclass
class ParallelismConfig:
    """How the job is split over its GPUs: the data-parallel strategy and the tensor, pipeline,
    context and expert layout.

    Read by the strategies layer (:mod:`dpsim.strategies`); the Parallelism panel of ``--help``.
    """
    strategy: Strategy = "ddp"
    """Data-parallel strategy: PyTorch DDP, DeepSpeed ZeRO-1/2/3, or PyTorch FSDP full shard,
    shard-grad-op or hybrid (dpsim/strategies/)."""
    fsdp_unit: FsdpUnit = "block"
    """ZeRO-3/FSDP wrap unit, also the checkpointing unit: each block, each layer that owns
    parameters, or the whole model."""
    fsdp_version: FsdpVersion = "1"
    """PyTorch FSDP API of the fsdp strategies: 1 (FullyShardedDataParallel: one flat parameter per
    unit) or 2 (fully_shard: each parameter sharded on dim 0, collectives staged through copy-in and
    copy-out buffers)."""
    fsdp_accumulate: FsdpAccumulate = "auto"
    """How the fsdp strategies accumulate gradients over micro-batches: unsharded (FSDP1 no_sync(),
    FSDP2 set_requires_gradient_sync(False): full gradients kept, one reduce-scatter at the last
    micro-batch), sharded (reduce-scatter after every micro-batch, only the gradient shard kept:
    FSDP2's default, FSDP1 without no_sync) or auto (unsharded with --fsdp-version 1, sharded with 2)."""
    zero_impl: ZeroImpl = "deepspeed"
    """Whose ZeRO-1 runs --strategy zero1: deepspeed (gradients reduce-scattered, the flat buffer
    all-gathered after the step; with --tp/--pp Megatron's distributed optimizer) or internlm (InternLM's
    HybridZeroOptimizer: gradients all-reduced over every data-parallel rank, each owner's parameters
    broadcast in its --zero-group; with --tp too, not with --pp/--cp/--ep) or megatron (Megatron-Core's
    distributed optimizer with data parallelism alone: as deepspeed, but with overlap each layer's updated
    parameters all-gathered ahead of its next forward, --overlap-param-gather; a layout's zero1 is already
    Megatron's); whose ZeRO-3 runs --strategy zero3:
    deepspeed, or gemini (Colossal-AI's chunked ZeRO-3 as its GeminiPlugin runs it: chunks gathered and
    reduce-scattered on the compute stream; data parallelism alone, no accumulation)."""
    zero_group: int | None = field(default=None, metadata=_count())
    """Ranks of one shard group, consecutive data-parallel ranks that shard the state, replicated across
    the groups: with --strategy fsdp-hybrid HSDP's shard degree (torchtitan's data_parallel_shard_degree,
    FSDP2's dp_shard mesh dimension; gradient shards all-reduced over the gpus / N replicas), left out one
    node; with --strategy zero3 MiCS's shard group (DeepSpeed's mics_shard_size, SageMaker's
    sharded_data_parallel_degree: gradient shards all-reduced over the replicas at the last micro-batch),
    left out every rank; with --strategy zero1 --zero-impl internlm InternLM's zero1 group (optimizer
    states), left out every rank. Must divide the data-parallel ranks and tile the servers; other
    strategies refuse it. With fsdp-hybrid and --ep, ep must divide tp x N x cp (the experts are sharded
    over what it leaves of each shard group)."""
    tp: int = field(default=1, metadata=_count())
    """Tensor-parallel GPUs per model replica (Megatron-style: each transformer block's linears
    split over them, inside one NVLink domain)."""
    pp: int = field(default=1, metadata=_count())
    """Pipeline stages: the model's blocks split over them, micro-batches flowing through."""
    dp: int | None = field(default=None, metadata=_count())
    """Data-parallel replicas of each tensor x pipeline shard; left out: gpus / (tp x pp). Given
    without --gpus, --gpus becomes tp x pp x dp."""
    schedule: Schedule = "1f1b"
    """Pipeline schedule: 1f1b (Megatron's default), gpipe, 1f1b-interleaved (with
    --virtual-stages model chunks per stage), deepspeed (DeepSpeed's pipeline engine: 1F1B
    with blocking sends and receives, gradients reduced after the pipeline), zb-h1 (zero
    bubble: weight gradients deferred into the drain, 1F1B's memory) or dualpipe (DeepSeek-V3's
    bidirectional schedule: two parameter copies per stage, an even --pp, at least 2 x pp
    micro-batches)."""
    virtual_stages: int = field(default=1, metadata=_count())
    """Model chunks per pipeline stage for --schedule 1f1b-interleaved (bubble divided by it)."""
    stage_layers: str | None = None
    """Blocks per pipeline stage, comma-separated (uneven splits, e.g. 7,8,8,9), or per virtual stage
    (pp x virtual-stages counts); left out: counts differing by at most one, lighter first and last. The
    Python API takes a list or tuple of integers too (7, 8, 8, 9), kept as that text."""
    sequence_parallel: bool = False
    """Megatron sequence parallelism with --tp: norms and dropouts split along the sequence,
    all-reduces replaced by reduce-scatter + all-gather, activations divided by tp."""
    tp_comm_overlap: TpCommOverlap = "backward"
    """Tensor-parallel communication hidden behind GEMMs: off, backward (input-gradient reductions
    under the weight-gradient GEMM, Megatron's default), full (TransformerEngine userbuffers) or async
    (PyTorch's micro-pipelined async TP as torchtitan runs it; with --sequence-parallel, on NVSwitch)."""
    tp_across_network: bool = False
    """Allow a tensor-parallel group larger than one NVLink domain (its collectives cross the network)."""
    grad_accum_fusion: bool = True
    """With --tp/--pp: each micro-batch's weight gradients are accumulated by their GEMM into the
    gradient buffer (Megatron's --gradient-accumulation-fusion, TransformerEngine); off (Megatron
    before 2022, DeepSpeed's pipeline engine): one more kernel per parameter adds them in,
    reading and writing the buffer every micro-batch."""
    cp: int = field(default=1, metadata=_count())
    """Context-parallel GPUs each sequence is split over (Megatron's --context-parallel-size): every
    rank runs s/cp tokens, attention exchanges keys and values (see --cp-comm); GPUs = tp x cp x pp x dp."""
    cp_comm: CpComm = "p2p"
    """How context-parallel attention gets the other ranks' keys and values: p2p (ring attention,
    transfers overlapped with attention), all-gather (KV all-gathered, exposed) or a2a
    (DeepSpeed-Ulysses head scatter; heads must divide by tp x cp)."""
    cp_balance: bool = True
    """Causal load balancing of --cp: the sequence cut into 2 x cp chunks, rank i holding chunks i and
    2cp-1-i, so every rank does the same attention work; off: contiguous pieces, the last rank paces."""
    ep: int = field(default=1, metadata=_count())
    """Expert-parallel GPUs of a mixture of experts: each holds experts / ep of every MoE layer's
    experts, tokens sent to them by all-to-all; carved with --etp out of tp x dp (Megatron-Core)."""
    etp: int | None = field(default=None, metadata=_count())
    """Expert-tensor-parallel GPUs: each expert's width split over them (Megatron-Core's
    --expert-tensor-parallel-size). Left out: --tp with --ep 1 (each expert split over the
    tensor-parallel ranks, as the dense linears are: what Megatron-Core and torchtitan both do), 1
    with --ep 2 or more (experts whole, expert parallelism borrowing the tensor-parallel ranks:
    torchtitan's default; Megatron-Core's is --tp, so give --etp to match a Megatron-Core job that
    leaves it out). A value equal to that default is the same job and is kept as left out; a dense model
    takes no other."""
    moe_routing: str = "balanced"
    """How a mixture of experts' router spreads tokens over its experts: balanced, zipf:S (expert i's
    share proportional to (i + 1)^-S), histogram:PATH.json (measured per-expert counts), maxvio:V
    (an auxiliary-loss-balanced router whose busiest expert gets 1 + V times the mean load) or gini:G
    (a trained router's per-layer expert loads, log-normal with Gini coefficient G, a fresh
    popularity each dispatch); the busiest expert-parallel GPU paces the expert GEMMs and the
    all-to-all."""
    moe_capacity_factor: float | None = field(default=None, metadata=_range(0, 1e6, open_below=True))
    """Expert capacity (GShard, Switch Transformer): an expert takes at most this x its balanced share
    of the routed tokens, dropping the rest; left out: dropless."""
    moe_pad_to_capacity: bool = False
    """Pad every expert's input to its capacity (Megatron-Core's ``--moe-pad-expert-input-to-capacity``, the
    fixed-shape dispatch of GShard and DeepSpeed-MoE): each expert computes and receives its capacity in rows
    whatever the router sent, so a capacity factor above 1 costs its padding and no rank waits on a busier
    one; needs --moe-capacity-factor."""

    moe_a2a: MoeA2a = "flat"
    """The MoE dispatch and combine all-to-all: flat (Megatron-Core's alltoall dispatcher: NCCL
    send/recv to every peer, a row per routed copy) or hierarchical (DeepEP, Megatron-Core's flex
    dispatcher: a token sent once per destination rank and expanded to its experts there, one NIC
    transfer per destination server, forwarded over NVLink there)."""
    moe_a2a_overlap: bool = False
    """Overlap the expert-parallel all-to-alls of one micro-batch with another's compute where the
    schedule pairs a forward with a backward (Megatron-Core's ``--overlap-moe-expert-parallel-comm``):
    needs ``--ep`` 2 or more and, with ``--pp``, the interleaved schedule or DualPipe (its F&B pairs)."""
    moe_node_limit: int | None = field(default=None, metadata=_count(MAX_GPUS))
    """Node-limited routing (DeepSeek-V3's, arXiv:2412.19437 Sec. 2.1.2; config.json topk_group): each
    token's experts lie on at most this many of the expert-parallel group's servers, so the hierarchical
    all-to-all sends it over the network to at most that many; needs --moe-a2a hierarchical. Left
    out: unlimited."""

    @property
    def layout_active(self) -> bool:
        """Tensor, pipeline, context or expert parallelism is asked for (``tp``, ``pp``, ``cp``, ``ep`` or
        a given ``etp`` above 1; its default is above 1 only with ``tp``)."""
        return self.tp > 1 or self.pp > 1 or self.cp > 1 or self.ep > 1 or (self.etp or 1) > 1

    @property
    def layout_flags(self) -> str:
        """The flags that make :attr:`layout_active`, as given (``--ep 8``, ``--tp 2 --pp 4``): its
        refusals said "with --tp/--cp/--pp" to a job that gave only --ep."""
        return " ".join(f"--{name} {value}" for name, value in (("tp", self.tp), ("pp", self.pp), ("cp", self.cp),
                                                                ("ep", self.ep), ("etp", self.etp or 1)) if value > 1)

    def etp_for(self, experts: bool) -> int:
        """The expert-tensor-parallel size a job runs: ``--etp`` as given, else :func:`default_etp` for a model
        with routed experts (``experts``) and 1 for a dense one (it has no expert layers to split)."""
        if self.etp is not None:
            return self.etp
        return default_etp(tp=self.tp, ep=self.ep) if experts else 1

    def __post_init__(self) -> None:
        _check_part(self)
        if self.etp is not None and self.etp == default_etp(tp=self.tp, ep=self.ep):
            # An --etp equal to its default says what leaving it out says: kept as left out, so the two configs
            # are equal (and hash alike), a dense model takes both, and --json's config names neither (tp=2 vs
            # tp=2, etp=2 compared unequal, and the second was refused on gpt2 while tp=2, etp=1 was taken).
            object.__setattr__(self, "etp", None)


@frozen_dataclass
class GradientConfig:
    """How gradients are communicated: buckets, overlap with backward, and PyTorch DDP's arguments.

    Read by the data-parallel strategies (:mod:`dpsim.strategies.ddp_costs`, the bucketed ones);
    the DDP & gradient communication panel of ``--help``.
    """
    bucket_cap_mb: float | None = field(default=None, metadata=_range(0, MAX_BUCKET_CAP_MB, open_below=True))
    """Gradient bucket size in MiB: DDP's bucket_cap_mb, or ZeRO-1/2's reduce_bucket_size; left
    out, each framework's default (PyTorch: 25 MiB with a 1 MiB first bucket; DeepSpeed: 5e8
    elements). ZeRO-3 and FSDP communicate per unit instead: their lever is --fsdp-unit."""
    overlap: bool = True
    """Communicate gradients during backward (DDP; DeepSpeed's overlap_comm); off:
    after backward."""
    gradient_as_bucket_view: bool = False
    """DDP's gradient_as_bucket_view: gradients are views of the all-reduce buckets, which saves one
    gradient-sized buffer and the copy back after each all-reduce; off (PyTorch's default): every
    gradient is copied into its bucket and back."""
    static_graph: bool = False
    """DDP's static_graph: the graph is the same every step, so --find-unused-parameters searches it
    in the first step only and the buckets are rebuilt in gradient-ready order."""
    find_unused_parameters: bool = False
    """DDP's find_unused_parameters: walk the autograd graph after every forward, keep the buckets in
    reverse parameter order (never rebuilt) and all-reduce the map of used parameters."""
    broadcast_buffers: bool = True
    """DDP's broadcast_buffers (PyTorch's default on): broadcast the module's buffers, e.g. BatchNorm
    statistics, from rank 0 before the forward of every step."""
    comm_hook: CommHook = "off"
    """DDP communication hook (torch/distributed/algorithms/ddp_comm_hooks): off (DDP's own
    all-reduce), allreduce, fp16-compress or bf16-compress (all-reduce 16-bit copies: half the bytes of
    fp32 gradients), powersgd (low-rank P and Q per matrix, see --powersgd-rank)."""
    powersgd_rank: int = field(default=1, metadata=_count(MAX_POWERSGD_RANK))
    """PowerSGD's matrix_approximation_rank, with --comm-hook powersgd."""
    powersgd_start_iter: int = field(default=1000, metadata={"rule": Range(2, MAX_POWERSGD_START_ITER,
                                                                             integer=True)})
    """PowerSGD's start_powerSGD_iter, with --comm-hook powersgd: steps of plain all-reduce before it
    compresses. The step predicted is the compressed one; --json's ddp block gives the warm-up step."""

    def ddp_options(self) -> DdpOptions:
        """The DDP arguments as :class:`~dpsim.strategies.ddp_costs.DdpOptions`."""
        return DdpOptions(**{name: getattr(self, name) for name in DDP_FIELDS})

    def __post_init__(self) -> None:
        _check_part(self)


@frozen_dataclass
class ExecutionConfig:
    """How each GPU executes the model: number formats, compilation, fused attention, and the
    memory levers (activation recompute, CPU offload).

    Read by the workload's op costing and the memory model (:mod:`dpsim.workload.precision`,
    :mod:`dpsim.memory`); the Precision & memory panel of ``--help``.
    """
    precision: Precision | None = None
    """The framework setting trained with (dpsim/workload/precision.py): fp32, tf32, amp-bf16
    (torch.autocast bf16: fp32 params and grads, so DDP all-reduces fp32), amp-fp16 (+ GradScaler),
    bf16-params or fp16-params (16-bit params and grads, fp32 master: DeepSpeed, Megatron --fp16, FSDP
    MixedPrecision), bf16-fp32-grads (Megatron --bf16: gradients accumulated and reduced in fp32), bf16-fp32-grads-bf16-moments (the same with bf16 Adam moments: DeepSeek-V3), bf16-true (everything bf16). Old names: amp = amp-bf16, bf16-mixed = bf16-params,
    fp16-mixed = fp16-params, bf16 = bf16-true. Left out: amp-bf16, or fp32 with a calibration profile
    measured on CPUs."""

    fp8: Fp8 | None = None
    """FP8 training recipe on top of --precision: the linear layers' GEMMs run at the GPU's FP8 rate, with
    their casts (te-delayed, te-current: TransformerEngine; torchao-tensorwise, torchao-rowwise: torchao
    float8, tensorwise gathering float8 weights under --fsdp-version 2; mxfp8: TransformerEngine MXFP8,
    Blackwell only; te-blockwise: DeepSeek-V3's 1x128 / 128x128 block scaling, TE Float8BlockScaling, Hopper; deepseek-blockwise: the same as DeepSeek's HAI-LLM keeps its weights, one row-wise FP8 copy). Attention, embedding and LM head stay 16-bit. Left out: no FP8."""
    fp8_params: bool = False
    """FP8 primary weights (TransformerEngine fp8_model_init: Megatron-LM --fp8-param-gather, NeMo fp8_params),
    with a te-* or mxfp8 --fp8 and an fp32 master copy (bf16-params, bf16-fp32-grads, fp16-params): the FP8
    linears' weights are held in FP8 with no 16-bit copy, the master copy and optimizer state stay in the
    sharded optimizer, and the distributed optimizer's or FSDP's parameter all-gather moves FP8. Runs with
    zero1 (the distributed optimizer, with or without --tp/--pp/--cp), fsdp in a --tp/--pp/--cp layout, or
    fsdp --fsdp-version 2. Sets
    weight memory and all-gather sizes. Left out: weights in the precision's dtype."""
    compile: bool = False
    """The model runs under torch.compile (Inductor): each chain of element-wise and reduction ops between
    two GEMM/attention ops (norms, activations, rotary, residual adds, casts, FP8 amax) is one fused kernel
    reading its inputs and writing its outputs once; GEMMs and attention are unchanged."""
    flash_attention: bool = True
    """Attention keeps no score matrices (SDPA, FlashAttention): sets activation memory."""
    attention_kernel: AttentionKernel = "sdpa"
    """The fused attention kernel the run calls: sdpa (PyTorch SDPA's flash backend, FlashAttention-2),
    flash1 (flash-attn 1.x, about 2.3x slower), triton (the Triton FlashAttention of llm-foundry's
    attn_impl triton, about 1.8x slower), flash3 (FlashAttention-3, Hopper) or cudnn (cuDNN's fused
    attention, as TransformerEngine runs it). Time only; needs --flash-attention."""
    activations: Activations = "eager"
    """Whose count of the activations each layer keeps for backward: eager (Hugging Face modules run
    eagerly: key and value repeated to every query head, gate, up, SiLU output and their product kept,
    an eager RMSNorm's normalised input) or megatron (Megatron-Core with TransformerEngine: key and
    value at the grouped heads' width, the fused SwiGLU keeping only its input, fused norms, no expert
    outputs kept for the combine; Korthikanti et al. arXiv:2205.05198 Sec. 4.1 as Megatron-Core runs
    it; Llama-family models only) or megatron-legacy (legacy Megatron-LM's megatron/model with flash-attn,
    apex's fused norms and an eager SwiGLU: sequential Llama blocks with flash attention and equal query
    and key-value heads only). Sets activation memory."""
    loss_impl: LossImpl = "fused"
    """How the language-model loss holds the fp32 logits: fused (one fp32 copy kept for the backward, as
    counted so far: a fused or chunked cross-entropy holds no more) or eager (transformers'
    ForCausalLMLoss: logits.float(), then F.cross_entropy, whose backward holds its saved fp32 log-softmax,
    the fp32 gradient nll_loss_backward zero-fills and log_softmax's fp32 gradient at once: 12 bytes a token
    and vocabulary entry, 8 more than fused, at the loss's backward). Data-parallel path only. Sets
    activation memory."""
    activation_checkpointing: bool = False
    """Recompute each unit's forward in backward and keep only unit inputs (memory down,
    compute up); the same as --recompute full."""
    recompute: Recompute = "off"
    """Activation checkpointing of every layout: selective (attention core only, Megatron), op (keep
    matmul and attention outputs, recompute the other ops of each block, torchtitan's op-level
    policy), full (each block keeps its input and re-runs its forward in backward), megatron
    (Megatron-Core's --recompute-modules layernorm moe_act: norms and the experts' activation
    recomputed, each layer keeping what its modules save) or moe (each MoE layer keeps its input and
    re-runs its whole forward, all-to-alls included, the other layers as megatron: Megatron-Core's
    --recompute-modules moe layernorm)."""
    recompute_every: int = field(default=1, metadata=_count())
    """With --recompute full: checkpoint every k-th block only (the k-th, 2k-th, ...), the others keep
    their activations."""
    offload: Offload = "off"
    """CPU offload of the sharded optimizer (DeepSpeed): optimizer (ZeRO-Offload: fp32 master, Adam
    moments and gradient shard in host memory, the Adam step on the CPU, the updated shard copied
    back over PCIe), params+optimizer (DeepSpeed offload_param: the parameter shard on the host too; zero3,
    or fsdp with --tp/--cp/--pp), or expert-activations (a layout's MoE layers copy their expert GEMM
    and gated-activation inputs to the host, overlapped with compute: Megatron-Core's --offload-modules
    expert_fc1 moe_act)."""

    @property
    def checkpointing(self) -> CheckpointPolicy:
        """The activation-checkpointing policy (``--activation-checkpointing`` is ``--recompute full``)."""
        mode = "full" if self.activation_checkpointing else self.recompute
        return CheckpointPolicy(mode=mode, every=self.recompute_every)

    def __post_init__(self) -> None:
        _check_part(self)


@frozen_dataclass
class CalibrationConfig:
    """What replaces the modelled rates: a calibration profile, a measured one-GPU step, and the
    overall factors on compute and on compute slowed by communication.

    Read where the model's rates are resolved (:mod:`dpsim.predict.resolve`, :mod:`dpsim.profile`);
    the Calibration panel of ``--help``.
    """
    profile: str | None = field(default=None, metadata={"key": "calibration"})
    """A profile from dpsim calibrate (file or shipped name): its fitted collectives and
    measured compute replace the preset's."""
    op_rates: bool = False
    """With --calibration: cost the op graph with the profile's measured kernel rates even when it
    timed this model's whole step (which is used otherwise)."""
    single_gpu_step_s: float | None = field(
        default=None, metadata=_range(MIN_SINGLE_GPU_STEP_S, MAX_SINGLE_GPU_STEP_S, flag="--single-gpu-step-ms",
                                     flag_scale=1e3, unit=" ms"))
    """Your measured one-GPU step time: compute is scaled to it."""
    compute_efficiency: float | None = field(default=None, metadata=_range(MIN_COMPUTE_EFFICIENCY, 1))
    """Overall factor on every modelled compute time: 1 keeps the per-op roofline as it is, 0.8 makes
    compute 1/0.8 slower. Left out: 0.95 for preset-costed compute on several GPUs (the rate published
    multi-GPU training sustains against the single-GPU roofline, fitted on the large-model runs), 1 on
    one GPU, with a --calibration profile that measured compute or --single-gpu-step-ms (measured rates)."""
    overlap_slowdown: float | None = field(default=None, metadata=_range(0, MAX_OVERLAP_SLOWDOWN))
    """Fractional compute slowdown while communication runs (0.1 = 10 %); left out: a calibration
    profile's measured slowdown, else 0.189 (dpsim's estimate: the average measured in GPT and
    Llama training, arXiv:2507.03114)."""

    def __post_init__(self) -> None:
        _check_part(self)


PARTS: dict[str, type] = {"cluster": ClusterConfig, "workload": WorkloadConfig, "parallelism": ParallelismConfig,
                          "gradients": GradientConfig, "execution": ExecutionConfig,
                          "calibration": CalibrationConfig}
"""Part of :class:`PredictConfig` -> its class, each owned by the layer that reads it."""


def setting_key(f: Any) -> str:
    """The flat name of the setting a part's field holds (its flag without dashes, the key of --json's
    config): the field's name unless the field names it otherwise (CalibrationConfig.profile is the
    setting ``calibration``)."""
    return f.metadata.get("key", f.name)


def _places() -> dict[str, tuple[str, str]]:
    places: dict[str, tuple[str, str]] = {}
    for part, cls in PARTS.items():
        for f in fields(cls):
            assert setting_key(f) not in places, f"setting {setting_key(f)!r} is in two parts"
            places[setting_key(f)] = (part, f.name)
    return places


SETTING_PLACES: dict[str, tuple[str, str]] = _places()
"""Setting (flat name: ``tp``, ``micro_batch``, ``calibration``) -> (part, attribute): ``tp`` is
``config.parallelism.tp``."""

SETTINGS: tuple[str, ...] = (
    "gpus", "link", "topology_file", "gpus_per_node", "gpu", "model", "seq_len", "flash_attention", "micro_batch",
    "precision", "optimizer", "bucket_cap_mb", "overlap", "overlap_slowdown", "compute_efficiency",
    "single_gpu_step_s", "steps", "calibration", "strategy", "grad_accum", "activation_checkpointing", "fsdp_unit",
    "input_shape", "algo", "proto", "jobs", "placement", "tp", "pp", "ep", "etp", "dp", "global_batch", "schedule",
    "virtual_stages", "stage_layers", "sequence_parallel", "recompute", "tp_comm_overlap", "tp_across_network", "cp",
    "cp_comm", "offload", "cp_balance", "grad_accum_fusion", "gradient_as_bucket_view", "static_graph",
    "find_unused_parameters", "broadcast_buffers", "comm_hook", "powersgd_rank", "powersgd_start_iter",
    "clip_grad_norm", "zero_grad", "input_samples_per_s", "fsdp_version", "fsdp_accumulate", "recompute_every",
    "op_rates", "fp8", "compile", "moe_routing", "moe_capacity_factor", "moe_a2a", "zero_impl", "zero_group",
    "moe_a2a_overlap", "attention_kernel", "mtp_depth", "moe_node_limit", "activations", "power_cap_w",
    "loss_impl", "rack_placement", "fp8_params", "moe_pad_to_capacity")
"""Every setting by its flat name, in the order ``--json``'s ``config``, a sweep's columns and the
flags are listed in (the order they were added in, kept so that outputs do not move)."""


_MOVED = {"layout_active": ("parallelism", "layout_active"), "checkpointing": ("execution", "checkpointing"),
          "ddp_options": ("gradients", "ddp_options")}
"""What ``PredictConfig`` computed before its parts and its parts compute now."""


class FlatSettingWarning(DeprecationWarning):
    """A setting read as ``config.tp`` rather than through its part (``config.parallelism.tp``)."""


@checked_constructor("dpsim.PredictConfig")
@frozen_dataclass(init=False)
class PredictConfig:
    """Everything that defines one prediction (the CLI's flags, in SI units), validated on creation.

    The settings are grouped into parts, each owned by the layer that reads it: ``cluster``,
    ``workload``, ``parallelism``, ``gradients``, ``execution`` and ``calibration``. A config is
    made from parts, from settings by their flat names (as the CLI spells them: ``tp=4``,
    ``micro_batch=2``, ``calibration="profile.json"``), or both, the settings applied over the
    parts::

        PredictConfig(gpus=64, tp=4)
        PredictConfig(parallelism=ParallelismConfig(tp=4), gpus=64)
        dataclasses.replace(config, tp=8)

    Field metadata of the parts (read by :func:`flag_name`, :func:`check_value` and the CLI):
    ``flag`` spells the flag when it is not ``--`` + the name with dashes, ``flag_scale``
    converts a flag in human units (flag value = field value x ``flag_scale``), ``rule``
    is the field's range rule, ``key`` the setting's flat name when it differs from the field's.
    """

    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    """The cluster: topology, GPUs, collectives allowed."""
    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    """The model, its batch and the training loop."""
    parallelism: ParallelismConfig = field(default_factory=ParallelismConfig)
    """The data-parallel strategy and the tensor/pipeline/context/expert layout."""
    gradients: GradientConfig = field(default_factory=GradientConfig)
    """Gradient buckets, overlap and DDP's arguments."""
    execution: ExecutionConfig = field(default_factory=ExecutionConfig)
    """Number formats, compilation, fused attention, recompute and offload."""
    calibration: CalibrationConfig = field(default_factory=CalibrationConfig)
    """The calibration profile and the factors that replace modelled rates."""

    def __init__(self, *, cluster: ClusterConfig | None = None, workload: WorkloadConfig | None = None,
                 parallelism: ParallelismConfig | None = None, gradients: GradientConfig | None = None,
                 execution: ExecutionConfig | None = None, calibration: Any = None, **settings: Any) -> None:
        given = {"cluster": cluster, "workload": workload, "parallelism": parallelism, "gradients": gradients,
                 "execution": execution, "calibration": calibration}
        if calibration is not None and not isinstance(calibration, CalibrationConfig):
            # ``calibration`` names both a part and a setting (the profile, a path): a value that is
            # not the part is the setting, as the CLI and every caller before the parts passed it.
            given["calibration"] = None
            settings["calibration"] = calibration
        if cluster is None and "gpus" not in settings:
            # --dp without --gpus means --gpus tp x cp x pp x dp, in the API as on the command line: it was
            # refused "needs --gpus 2 ..., not 64; leave --gpus out" (PredictConfig(dp=2), sweep --axis dp=1,2).
            layout = {k: getattr(parallelism, k) for k in ("dp", "tp", "pp", "cp")} \
                if isinstance(parallelism, ParallelismConfig) else {}
            layout.update({k: settings[k] for k in ("dp", "tp", "pp", "cp") if k in settings})
            derived = derived_flags(layout) if layout.get("dp") is not None else {}
            if "gpus" in derived:
                settings = {**settings, "gpus": derived["gpus"]}
        by_part: dict[str, dict[str, Any]] = {}
        for key, value in settings.items():
            place = SETTING_PLACES.get(key)
            if place is None:
                # A TypeError, as Python's own for an unknown keyword, but a DpsimError too (one line, the
                # settings to choose from): it was a bare TypeError that named nothing to give instead.
                near = difflib.get_close_matches(str(key), SETTINGS, n=3)
                raise ConfigTypeError(f"PredictConfig got an unexpected setting {key!r}; "
                                      + (f"did you mean {', '.join(near)}? " if near else "")
                                      + "the settings are dpsim.predict.config.SETTINGS (every dpsim predict flag, "
                                        "with underscores)")
            by_part.setdefault(place[0], {})[place[1]] = value
        for name, cls in PARTS.items():
            part, changes = given[name], by_part.get(name)
            if part is None:
                part = cls(**(changes or {}))
            elif not isinstance(part, cls):
                # Was a bare TypeError ("parallelism must be a ParallelismConfig, not dict"; "a ExecutionConfig"),
                # no DpsimError: a caller catching dpsim's errors saw a traceback.
                flat = [f"{key}=..." for key, (where, _) in SETTING_PLACES.items() if where == name][:2]
                if isinstance(part, dict) and part and all(isinstance(k, str) for k in part):
                    flat = [f"{k}={short(v, 20)}" for k, v in list(part.items())[:3]]  # the dict's own, flat
                article = "an" if cls.__name__[0] in "AEIOU" else "a"
                raise ConfigTypeError(f"PredictConfig {name}: {short(part)} is not valid; expected {article} "
                                      f"{cls.__name__} (dpsim.predict.config), or its settings given flat "
                                      f"(PredictConfig({', '.join(flat)}))")
            elif changes:
                part = replace(part, **changes)
            object.__setattr__(self, name, part)
        self.__post_init__()

    def __post_init__(self) -> None:
        if self.calibration.profile is None:
            # Nothing to read: these defaults are known now. With a profile they wait for
            # dpsim.predict.resolve, which reads it.
            for key, value in PROFILE_DEFAULTED.items():
                part, attr = SETTING_PLACES[key]
                if getattr(getattr(self, part), attr) is None:
                    object.__setattr__(self, part, replace(getattr(self, part), **{attr: value}))
        self._normalise_zero_group()
        self._check_combination()
        self._check_layout()
        self._check_ddp()

    def __getattr__(self, name: str) -> Any:
        # Called only when normal lookup fails: a setting read flat, as before the parts. Kept for
        # scripts written then; dpsim itself reads through the parts (pytest turns this warning into
        # an error).
        place = SETTING_PLACES.get(name) or _MOVED.get(name)
        if place is None or name in PARTS:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        warnings.warn(f"PredictConfig.{name} is read through its part now: config.{place[0]}.{place[1]}",
                      FlatSettingWarning, stacklevel=2)
        return getattr(object.__getattribute__(self, place[0]), place[1])

    def value_of(self, key: str) -> Any:
        """The value of the setting ``key`` by its flat name (``"tp"`` -> ``self.parallelism.tp``)."""
        part, attr = SETTING_PLACES[key]
        return getattr(getattr(self, part), attr)

    def settings(self) -> dict[str, Any]:
        """Every setting by its flat name, in :data:`SETTINGS` order: ``PredictConfig(**c.settings()) == c``."""
        return {key: self.value_of(key) for key in SETTINGS}

    def input_files(self) -> tuple[tuple[str, str], ...]:
        """(flag, path) of each file this prediction reads by name: the topology file, the calibration
        profile, a routing histogram, a model's code. An output of the same command is refused over them
        (:func:`dpsim.files.refuse_output_over_inputs`); a shipped profile's name is no path and is skipped there."""
        out = []
        if self.cluster.topology_file:
            out.append(("--topology", self.cluster.topology_file))
        if self.calibration.profile:
            out.append(("--calibration", self.calibration.profile))
        routing = str(self.parallelism.moe_routing)
        if routing.strip().lower().startswith("histogram:"):
            out.append(("--moe-routing", routing.split(":", 1)[1].strip()))
        model = self.workload.model
        if isinstance(model, str) and is_torch_model_ref(model) and ".py" in model:
            out.append(("--model", model.split(".py", 1)[0] + ".py"))
        return tuple(out)

    @property
    def data_parallel(self) -> int:
        """Data-parallel replicas: ``dp``, or ``gpus / (tp x cp x pp)``."""
        p = self.parallelism
        return p.dp if p.dp is not None else self.cluster.gpus // (p.tp * p.cp * p.pp)

    @property
    def micro_batches(self) -> int:
        """Micro-batches per replica per optimizer step: from ``global_batch``, else ``grad_accum``."""
        w = self.workload
        if w.global_batch is None:
            return w.grad_accum
        return w.global_batch // (w.micro_batch * self.data_parallel)


    def _normalise_zero_group(self) -> None:
        """A --zero-group of every data-parallel rank is kept as left out where that is its default (zero3's MiCS
        group, InternLM's ZeRO-1 group): the two configs predicted the same step to the last digit yet compared
        unequal and hashed apart (as an --etp equal to its default did). fsdp-hybrid's default is one node, which
        the config does not know, so its group is kept as given."""
        p, c = self.parallelism, self.cluster
        takes_every_rank = p.strategy == "zero3" and p.zero_impl == "deepspeed" or (
            p.strategy == "zero1" and p.zero_impl == "internlm")
        if p.zero_group is None or not takes_every_rank or isinstance(p.zero_group, bool) \
                or not isinstance(p.zero_group, int):
            return
        shard = p.tp * p.pp * p.cp
        if c.gpus % shard or (p.dp is not None and p.dp * shard != c.gpus):
            return  # refused by _check_layout, naming what does not fit
        if p.zero_group == c.gpus // shard:
            object.__setattr__(self, "parallelism", replace(p, zero_group=None))

    def _check_combination(self) -> None:
        """The rules between fields (each field's own value is already valid)."""
        c, w, p, g, e, k = self.cluster, self.workload, self.parallelism, self.gradients, self.execution, self.calibration
        if c.gpus * c.jobs > MAX_GPUS:
            raise ConfigError(f"--gpus x --jobs: {c.gpus:,} x {c.jobs:,} = {c.gpus * c.jobs:,} GPUs is "
                              f"not valid; the whole cluster may have at most {MAX_GPUS:,}")
        if c.placement != "packed" and c.jobs == 1:
            # One job has one server order: the placement lays out several jobs' servers, so alone it
            # changes nothing and would be dropped without a word.
            raise ConfigError(f"--placement: {c.placement!r} only applies with --jobs above 1 (how several "
                              f"jobs' servers interleave); add --jobs N or leave --placement out")
        extrapolated = extrapolates(self)  # the steady state's increment carried past a few micro-batches
        if w.steps * w.grad_accum > MAX_SIMULATED_MICRO_BATCHES and not extrapolated:
            raise ConfigError(f"--steps x --grad-accum: {w.steps:,} x {w.grad_accum:,} = "
                              f"{w.steps * w.grad_accum:,} simulated micro-batches is not valid; expected at "
                              f"most {MAX_SIMULATED_MICRO_BATCHES:,} (lower --steps: every step is the same){full_path_why(self)}")
        if self.micro_batches > MAX_EXTRAPOLATED_MICRO_BATCHES:
            raise ConfigError(f"micro-batches per replica: {self.micro_batches:,} is not valid; expected at most "
                              f"{MAX_EXTRAPOLATED_MICRO_BATCHES:,} (raise --micro-batch or lower --global-batch)")
        if k.op_rates and k.profile is None:
            raise ConfigError("--op-rates: needs --calibration PROFILE, whose measured kernel rates it uses")
        if e.compile and k.single_gpu_step_s is not None:
            raise ConfigError("--compile: does not apply with --single-gpu-step-ms, whose measured step already "
                              "says how the model ran; leave one of them out")
        if e.attention_kernel != "sdpa":
            if not e.flash_attention:
                raise ConfigError(f"--attention-kernel: {e.attention_kernel!r} is a fused kernel, but "
                                  f"--no-flash-attention runs eager attention; drop one of them")
            if k.single_gpu_step_s is not None:
                raise ConfigError(f"--attention-kernel: {e.attention_kernel!r} does not apply with "
                                  f"--single-gpu-step-ms, whose measured step already says how the model ran; "
                                  f"leave one of them out")
        torch_model = is_torch_model_ref(w.model)
        if w.input_shape is not None and not torch_model:
            raise ConfigError(f"--input-shape: applies only to a torch module (--model file.py:fn), not to "
                              f"catalog model {w.model!r} ({w.input_shape!r} given); catalog models "
                              f"take --seq-len")
        if w.seq_len is not None and torch_model:
            raise ConfigError(f"--seq-len: does not apply to a torch module (--model {w.model}), "
                              f"{w.seq_len} given; its example input (--input-shape) sets the sequence length, "
                              f"or for a transformers configuration its context length (e.g. "
                              f"max_position_embeddings={w.seq_len}), which keeps it built from its shape")
        # A torch module is traced unless it is a transformers configuration built from its shape (no --input-shape):
        # tested on --input-shape alone, a file.py:fn builder took --mtp-depth 16 and dropped it in silence. (Without
        # transformers installed, --model's own line says so.)
        if w.mtp_depth is not None and torch_model and (w.input_shape is not None or (
                lowered_shape_ref(w.model) is None and missing_library(w.model.strip().partition(":")[0]) is None)):
            raise ConfigError(f"--mtp-depth: {w.mtp_depth} applies to a decoder dpsim builds (a catalog model or a "
                              f"shape), not to a traced torch module (--model {w.model}), whose own modules say what "
                              f"it runs; leave --mtp-depth out")
        check_fsdp_options(p.strategy, p.fsdp_version, p.fsdp_accumulate)
        per_unit = honours(p.strategy, FSDP_UNIT)
        if p.fsdp_unit != "block" and not per_unit and not e.activation_checkpointing and not p.layout_active:
            # The unit is what a sharded strategy gathers and what checkpointing recomputes: with
            # neither, --fsdp-unit layer was dropped in silence. (With --tp/--cp/--pp it has its own message.)
            takers = ", ".join(s for s in typing.get_args(Strategy) if honours(s, FSDP_UNIT))
            raise ConfigError(f"--fsdp-unit: {p.fsdp_unit!r} is the unit {takers} shard and gather, and the unit "
                              f"--activation-checkpointing recomputes; --strategy {p.strategy} without "
                              f"--activation-checkpointing has neither, so leave it out")
        if not g.overlap and k.overlap_slowdown not in (None, DEFAULT_OVERLAP_SLOWDOWN) and not per_unit \
                and not p.layout_active and k.profile is None:
            # Only overlapped communication slows compute; --no-overlap leaves a bucketed strategy
            # none (a sharded one still prefetches, a layout still overlaps tp/pp traffic), so the
            # slowdown was dropped in silence. (The default, or a profile's own value, may stand unused.)
            raise ConfigError(f"--overlap-slowdown: {k.overlap_slowdown:g} slows compute while communication "
                              f"overlaps it, but --no-overlap with --strategy {p.strategy} overlaps none; "
                              f"drop one of them")
        if not g.overlap and per_unit and not p.layout_active:
            # The data-parallel-only zero3/fsdp programs (dpsim/strategies/sharded.py) prefetch each unit's
            # gather and reduce-scatter it from backward with no switch for it: --no-overlap predicted the
            # overlapped step to the last digit, in silence. (A --tp/--cp/--pp layout's replicas honour it.)
            raise ConfigError(f"--no-overlap: --strategy {p.strategy} with data parallelism alone gathers and "
                              f"reduce-scatters per unit, overlapped with compute as it is modelled, so the flag "
                              f"would change nothing; it applies to ddp, zero1 and zero2 (gradient buckets) and to "
                              f"--tp/--cp/--pp layouts; leave it out")
        check_zero_options(p.strategy, p.zero_impl, p.zero_group, n_gpus=None if p.layout_active else c.gpus)
        if p.zero_impl == "megatron":
            # The data-parallel path's zero1 with Megatron-Core's overlapped parameter gather
            # (dpsim/strategies/zero.py); a layout's zero1 already runs Megatron's distributed optimizer.
            if p.layout_active:
                raise ConfigError(f"--zero-impl: megatron is the data-parallel-only zero1; with {p.layout_flags} "
                                  f"--strategy zero1 already runs Megatron-Core's distributed optimizer; leave "
                                  f"--zero-impl out")
            if e.offload != "off":
                raise ConfigError(f"--offload: {e.offload} does not combine with --zero-impl megatron (Megatron's "
                                  f"optimizer CPU offload is not modelled); leave one of them out")
        if p.zero_impl == "gemini":
            # Gemini is modelled as the GeminiPlugin runs it: data parallelism alone, its own placement, no
            # accumulation (dpsim/strategies/gemini.py).
            if p.layout_active:
                raise ConfigError(f"--zero-impl: gemini is modelled for data parallelism alone, not with "
                                  f"{p.layout_flags}; leave one of them out")
            if e.offload != "off":
                raise ConfigError(f"--offload: {e.offload} does not combine with --zero-impl gemini (Gemini's own "
                                  f"offload placement is not modelled); leave it out")
            # Gemini gathers and reduce-scatters chunks, on the compute stream (dpsim/strategies/gemini.py): a wrap
            # unit other than the checkpointing one and an overlap slowdown each predicted Gemini's step to the last
            # digit, in silence.
            if p.fsdp_unit != "block" and not e.activation_checkpointing:
                raise ConfigError(f"--fsdp-unit: {p.fsdp_unit!r} does not apply to --zero-impl gemini, which gathers "
                                  f"and reduce-scatters chunks, not wrapped units (the unit is only what "
                                  f"--activation-checkpointing recomputes); leave it out")
            if k.overlap_slowdown not in (None, DEFAULT_OVERLAP_SLOWDOWN) and k.profile is None:
                raise ConfigError(f"--overlap-slowdown: {k.overlap_slowdown:g} slows compute while communication "
                                  f"overlaps it, but --zero-impl gemini runs its chunk collectives on the compute "
                                  f"stream, overlapping none; leave it out")
            if w.global_batch is None:
                check_gemini_accum(p.zero_impl, w.grad_accum)
        if g.bucket_cap_mb is not None and not honours(p.strategy, BUCKET_CAP_MB):
            # Every strategy without gradient buckets shards per unit (tests/test_config.py
            # checks it), so the unit is the lever to name.
            takers = [s for s in typing.get_args(Strategy) if honours(s, BUCKET_CAP_MB)]
            raise ConfigError(f"--bucket-cap-mb: {g.bucket_cap_mb} does not apply to --strategy "
                              f"{p.strategy}, which communicates per unit (gathers and reduce-scatters "
                              f"each wrapped unit); set the unit with --fsdp-unit, or leave --bucket-cap-mb "
                              f"out (it applies to {', '.join(takers)})")

    def _check_layout(self) -> None:
        """The rules of the tensor/pipeline layout fields (each field's own value is already valid)."""
        c, w, p, e = self.cluster, self.workload, self.parallelism, self.execution
        shard = p.tp * p.pp * p.cp
        extrapolated = extrapolates(self)  # the steady state's increment carried past a few micro-batches
        cp = f" --cp {p.cp}" if p.cp > 1 else ""
        if p.dp is not None and shard * p.dp != c.gpus:
            raise ConfigError(f"--dp: {p.dp} with --tp {p.tp}{cp} --pp {p.pp} needs --gpus {shard * p.dp} "
                              f"(tp x {'cp x ' if cp else ''}pp x dp), not {c.gpus}; leave --gpus out or make them "
                              f"agree")
        if c.gpus % shard:
            raise ConfigError(f"--gpus: {c.gpus} is not a multiple of --tp {p.tp} x --pp {p.pp}"
                              f"{f' x --cp {p.cp}' if cp else ''} = {shard}")
        if e.loss_impl == "eager" and p.layout_active:
            # The layouts split the logits over tensor-parallel ranks and stages (Megatron's vocab-parallel
            # cross-entropy); transformers' eager loss is counted on the data-parallel path only.
            raise ConfigError("--loss-impl: eager is transformers' loss on whole logits, counted on the "
                              "data-parallel path; leave out --tp/--pp/--cp/--ep, or choose fused")
        if e.offload == "expert-activations" and not p.layout_active:
            raise ConfigError("--offload: expert-activations offloads the MoE layers' activations of an "
                              "expert-parallel layout; give --ep (or --tp/--pp), or leave it out")
        if offloads_optimizer(e.offload):
            takers = OFFLOAD_STRATEGIES if e.offload == "optimizer" else PARAM_OFFLOAD_STRATEGIES
            layout = p.layout_active
            allowed = [s for s in takers if (s in LAYOUT_DP_STRATEGIES if layout else s != "fsdp")]
            if p.strategy not in allowed:
                where = f"with {p.layout_flags}" if layout else "with data parallelism alone"
                raise ConfigError(f"--offload: {e.offload} offloads a sharded optimizer; --strategy {p.strategy} "
                                  f"{where} does not shard it that way; use {' or '.join(allowed)}, or leave it out")
        if p.cp == 1:
            for name, default in (("cp_comm", "p2p"), ("cp_balance", True)):
                if self.value_of(name) != default:
                    raise ConfigError(f"{_given_flag(name, self.value_of(name))} applies only with context "
                                      f"parallelism; give --cp 2 or more, or leave it out")
        parse_routing(p.moe_routing)  # a one-line --moe-routing error now, not mid-prediction
        # A left-out --etp's default (tp or 1) divides tp x cp x dp whenever --ep does: checked as 1 here.
        etp = p.etp or 1
        experts = p.ep * etp
        total = p.tp * p.cp * self.data_parallel
        if total % experts:
            carved = (f"--tp {p.tp} x --cp {p.cp} x {self.data_parallel} data-parallel replicas = {total}, the GPUs "
                      f"of a stage the expert layers are carved from")
            if p.etp is not None and (p.ep == 1 or total % etp):
                # The given --etp is what does not fit: "choose an --ep" sent the user to a flag that, at --ep 1,
                # no value of fixes (--tp 2 --etp 3 on 16 GPUs).
                allowed = ", ".join(str(k) for k in _divisors(total) if total % (p.ep * k) == 0)
                raise ConfigError(f"--etp: {etp} x --ep {p.ep} = {experts} does not divide "
                                  f"{carved}; choose an --etp among {allowed}, or leave it out")
            raise ConfigError(f"--ep: --ep {p.ep} x --etp {etp} = {experts} does not divide {carved}; choose an --ep "
                              f"that divides it")
        if w.global_batch is not None:
            per_step = w.micro_batch * self.data_parallel
            if w.global_batch % per_step:
                raise ConfigError(f"--global-batch: {w.global_batch} is not a multiple of --micro-batch "
                                  f"{w.micro_batch} x {self.data_parallel} data-parallel replicas = {per_step}")
            if w.grad_accum != 1 and w.grad_accum != w.global_batch // per_step:
                raise ConfigError(f"--grad-accum: {w.grad_accum} disagrees with --global-batch "
                                  f"{w.global_batch} ({w.global_batch // per_step} micro-batches per replica); "
                                  f"give one of them")
            if not p.layout_active and w.steps * self.micro_batches > MAX_SIMULATED_MICRO_BATCHES and not extrapolated:
                raise ConfigError(f"--global-batch: {w.global_batch:,} gives {self.micro_batches:,} micro-batches per "
                                  f"replica x --steps {w.steps} = {w.steps * self.micro_batches:,} simulated; "
                                  f"expected at most {MAX_SIMULATED_MICRO_BATCHES:,} (raise --micro-batch or lower "
                                  f"--steps){full_path_why(self)}")
        # DualPipe's stage holds two chunks (one of each direction) and the engine plays each one's
        # forwards, backwards and split weight gradients: measured 1.8x 1F1B's CPU time per micro-batch
        # (gpt2, --pp 2, 16,384-65,536 micro-batches), so at the limit it ran twice the bound.
        chunks, named = (2, "2 (dualpipe's chunks)") if p.schedule == "dualpipe" else (p.virtual_stages,
                                                                                        str(p.virtual_stages))
        slots = p.pp * chunks * self.micro_batches
        if p.layout_active and slots > MAX_PIPELINE_SLOTS and not extrapolated:
            raise ConfigError(f"--pp x --virtual-stages x micro-batches: {p.pp} x {named} x "
                              f"{self.micro_batches:,} = {slots:,} pipeline slots is not valid; expected at most "
                              f"{MAX_PIPELINE_SLOTS:,} (raise --micro-batch or lower --global-batch){full_path_why(self)}")
        if p.tp == 1:
            for name, default in (("sequence_parallel", False), ("tp_comm_overlap", "backward"),
                                  ("tp_across_network", False)):
                if self.value_of(name) != default:
                    raise ConfigError(f"{_given_flag(name, self.value_of(name))} applies only with tensor "
                                      f"parallelism; give --tp 2 or more, or leave it out")
        if p.tp_comm_overlap == "async" and not p.sequence_parallel:
            # torch's micro-pipeline pass fuses all-gather and reduce-scatter with their matmuls, no all-reduce.
            raise ConfigError("--tp-comm-overlap: 'async' decomposes the all-gathers and reduce-scatters of "
                              "sequence parallelism; add --sequence-parallel or choose off, backward or full")
        check_moe_node_limit(p.moe_node_limit, ep=p.ep, moe_a2a=p.moe_a2a)
        if p.moe_a2a_overlap and p.ep == 1:
            raise ConfigError("--moe-a2a-overlap: hides the expert-parallel all-to-alls, and --ep is 1; give --ep 2 "
                              "or more, or leave it out")
        if p.pp == 1:
            for name, default in (("schedule", "1f1b"), ("virtual_stages", 1), ("stage_layers", None)):
                if self.value_of(name) != default:
                    raise ConfigError(f"{flag_name(name)}: {self.value_of(name)!r} applies only with pipeline "
                                      f"parallelism; give --pp 2 or more, or leave it out")
        if p.schedule != "1f1b-interleaved" and p.virtual_stages != 1:
            raise ConfigError(f"--virtual-stages: {p.virtual_stages} applies only to --schedule "
                              f"1f1b-interleaved; use that schedule or leave --virtual-stages out")
        if p.schedule == "1f1b-interleaved" and p.virtual_stages < 2:
            raise ConfigError("--schedule: 1f1b-interleaved needs --virtual-stages 2 or more (model chunks per "
                              "stage)")
        if p.pp > 1 and w.global_batch is None:
            # The schedules' own rule (dpsim/strategies/pipeline.py check_schedule) names --global-batch, which
            # this job did not give: "--global-batch: 16 gives 1 micro-batches" answered the default --grad-accum 1.
            m = w.grad_accum
            per_replica = f"{count(m, 'micro-batch', 'micro-batches')} per replica"
            if p.schedule == "1f1b-interleaved" and m % p.pp:
                raise ConfigError(f"--grad-accum: {per_replica} is not a multiple of --pp {p.pp}, as "
                                  f"the interleaved schedule needs; give --grad-accum {p.pp * (m // p.pp + 1)} (or a "
                                  f"--global-batch that makes a multiple)")
            if p.schedule == "dualpipe" and (m % 2 or m < 2 * p.pp):
                want = max(2 * p.pp, m + m % 2)
                raise ConfigError(f"--grad-accum: {per_replica}; --schedule dualpipe needs an even "
                                  f"number, at least 2 x --pp = {2 * p.pp} (half enter from each end); give "
                                  f"--grad-accum {want} (or a --global-batch that makes it)")
        if e.activation_checkpointing and e.recompute not in ("off", "full"):
            raise ConfigError(f"--activation-checkpointing: means --recompute full, which contradicts --recompute "
                              f"{e.recompute}; give one of them")
        check_recompute(e.checkpointing.mode, e.recompute_every)
        if not p.layout_active:
            if e.recompute in ("megatron", "moe", "deepseek"):
                owner = "DeepSeek-V3's (HAI-LLM)" if e.recompute == "deepseek" else "Megatron-Core's"
                raise ConfigError(f"--recompute: {e.recompute} is {owner}, for a tensor/pipeline/expert "
                                  f"layout; give --tp, --pp or --ep, or choose op or full")
            if not p.grad_accum_fusion:
                raise ConfigError("--no-grad-accum-fusion: applies with --tp or --pp above 1 (Megatron's "
                                  "gradient buffers); leave it out")
            return
        if p.zero_impl == "internlm":
            # InternLM's ZeRO-1 is modelled under tensor parallelism only: its rank order puts the
            # pipeline before the data-parallel ranks (Initializer_Data, process_group_initializer.py
            # @20fe5ac297e6), unlike the layout's Megatron order, and it has no context or expert groups.
            for name, value in (("pp", p.pp), ("cp", p.cp), ("ep", p.ep)):
                if value != 1:
                    raise ConfigError(f"--{name}: {value} does not combine with --zero-impl internlm, modelled with "
                                      f"--tp alone; use --{name} 1 or --zero-impl deepspeed (Megatron's distributed "
                                      f"optimizer)")
            if e.offload != "off":
                raise ConfigError(f"--offload: {e.offload} does not combine with --zero-impl internlm; leave it out")
            check_zero_options(p.strategy, p.zero_impl, p.zero_group, n_gpus=self.data_parallel)
        elif p.strategy == "fsdp-hybrid":
            # HSDP under tp/pp as torchtitan runs it (dp_replicate x dp_shard x cp x tp x pp, ParallelDims in
            # torchtitan/distributed/parallel_dims.py@0119de156de5): its shard degree is given, not a node's.
            if p.zero_group is None:
                raise ConfigError(f"--zero-group: --strategy fsdp-hybrid with {p.layout_flags} needs its shard group, "
                                  f"the data-parallel ranks that shard the state (torchtitan's "
                                  f"data_parallel_shard_degree), e.g. --zero-group "
                                  f"{max(1, self.data_parallel // 2)}; it must divide the "
                                  f"{self.data_parallel} data-parallel ranks")
            check_zero_options(p.strategy, p.zero_impl, p.zero_group, n_gpus=self.data_parallel)
        elif p.zero_group is not None:
            check_zero_options(p.strategy, p.zero_impl, p.zero_group)
            if p.strategy == "zero3":
                # The layout path's zero3 shards over every data-parallel rank; MiCS's groups are modelled for
                # data parallelism alone (dpsim/strategies/sharded.py).
                raise ConfigError(f"--zero-group: {p.zero_group} (MiCS's shard group) is modelled for --strategy "
                                  f"zero3 without {p.layout_flags}; leave --zero-group out or run data parallelism "
                                  f"alone")
        for name in ("fsdp_version", "fsdp_accumulate"):
            if self.value_of(name) != _fields()[name].default:
                raise ConfigError(f"{flag_name(name)}: {self.value_of(name)!r} applies to data parallelism alone; "
                                  f"with {p.layout_flags} the fsdp replicas run as torchtitan's FSDP2 (resharded after "
                                  f"each forward without --pp, kept gathered for the step with it), so leave it out")
        if p.strategy not in LAYOUT_DP_STRATEGIES:
            raise ConfigError(f"--strategy: {p.strategy!r} does not combine with {p.layout_flags} here; over the "
                              f"replicas of a tensor/pipeline layout choose one of {', '.join(LAYOUT_DP_STRATEGIES)}")
        etp = p.etp or 1  # the default (tp with ep 1) divides the shard group's tp x zero_group x cp ranks
        if p.strategy == "fsdp-hybrid" and (p.ep > 1 or etp > 1):
            # torchtitan carves ep out of each shard group (dp_shard x cp, with etp 1 x tp too) and shards the
            # experts over the rest inside each replica: it asserts (dp_shard * cp) % ep == 0
            # (ParallelDims._validate, torchtitan/distributed/parallel_dims.py@0119de156de5).
            ranks = p.tp * p.zero_group * p.cp
            if ranks % (p.ep * etp):
                allowed = [k for k in range(1, ranks + 1) if ranks % (k * etp) == 0]
                name, value = ("ep", p.ep) if etp == 1 else ("ep", f"{p.ep} x --etp {etp}")
                raise ConfigError(f"--{name}: {value} does not divide the HSDP shard group the experts are carved "
                                  f"from, --zero-group {p.zero_group} x --cp {p.cp}"
                                  + (f" x --tp {p.tp}" if p.tp > 1 else "") + f" = {ranks} ranks; choose --ep "
                                  f"among {', '.join(map(str, allowed))}, or a --zero-group that --ep divides")
        # An --etp equal to --tp with --ep 1 is the default: the experts split as the dense linears are.
        etp_apart = etp if etp > 1 and not (p.ep == 1 and etp == p.tp) else 1
        if p.strategy == "zero3" and (p.pp > 1 or p.ep > 1 or etp_apart > 1):
            # DeepSpeed's PipelineEngine asserts ``zero_optimization_stage() < 2`` ("ZeRO-2 and ZeRO-3 are
            # incompatible with pipeline parallelism", microsoft/DeepSpeed deepspeed/runtime/pipe/engine.py);
            # expert parallelism under ZeRO-3 is not modelled.
            name, value = next((n, v) for n, v in (("pp", p.pp), ("ep", p.ep), ("etp", etp_apart)) if v > 1)
            raise ConfigError(f"--{name}: {value} does not combine with --strategy zero3 (DeepSpeed ZeRO-3 runs "
                              f"with tensor and context/sequence parallelism only); use --{name} 1, or --strategy "
                              f"fsdp or zero1")
        if e.activation_checkpointing:
            raise ConfigError(f"--activation-checkpointing: with {p.layout_flags} use --recompute full (or selective)")
        if p.tp > 1 and is_torch_model_ref(w.model) and not w.model.strip().startswith("transformers:"):
            # A transformers configuration may have a shape (checked when the model is built).
            raise ConfigError(f"--tp: {p.tp} splits the layers of a known transformer block, which a traced "
                              f"torch module ({w.model}) does not give; use --tp 1 (--pp splits its blocks "
                              f"into stages), or give its shape with --model transformer:hidden=...")
        if p.fsdp_unit != "block":
            raise ConfigError(f"--fsdp-unit: {p.fsdp_unit!r} does not apply with {p.layout_flags} (the stage's "
                              f"model chunk is the unit); leave it out")
        if c.jobs != 1:
            raise ConfigError(f"--jobs: {c.jobs} is not modelled with {p.layout_flags}; leave it at 1")


    def _check_ddp(self) -> None:
        """The rules of the DDP fields and the input pipeline."""
        w, p, g = self.workload, self.parallelism, self.gradients
        changed = [name for name in DDP_FIELDS if self.value_of(name) != _fields()[name].default]
        if changed and p.strategy != "ddp":
            name = changed[0]
            raise ConfigError(f"{_given_flag(name, self.value_of(name), it=True)} is an argument of PyTorch DDP and does "
                              f"not apply to --strategy {p.strategy}; use --strategy ddp or leave it out")
        if changed and p.layout_active:
            name = changed[0]
            raise ConfigError(f"{_given_flag(name, self.value_of(name), it=True)} is an argument of PyTorch DDP; with "
                              f"{p.layout_flags} the replicas are reduced by Megatron's DDP (contiguous gradient "
                              f"buffers, no hooks), so leave it out")
        if w.input_samples_per_s is not None and p.layout_active:
            raise ConfigError(f"--input-samples-per-s: {w.input_samples_per_s:g} is not modelled with "
                              f"{p.layout_flags}; leave it out")
        if w.input_samples_per_s is not None:
            # The step is never shorter than loading it: a loader slower than a day per step
            # (1e-300 samples/s once printed a 4.6e+295-day step) is a typo, not a measurement;
            # the same bound as a single GPU's step (--single-gpu-step-ms).
            load_s = w.micro_batch * self.micro_batches / w.input_samples_per_s
            if load_s > MAX_SINGLE_GPU_STEP_S:
                raise ConfigError(f"--input-samples-per-s: {w.input_samples_per_s:g} loads the "
                                  f"{w.micro_batch * self.micro_batches:,} samples of a GPU's step in "
                                  f"{seconds_in_words(load_s)}; "
                                  f"expected a step of at most {MAX_SINGLE_GPU_STEP_S:g} s (a faster loader)")
        if g.comm_hook != "powersgd":
            for name in ("powersgd_rank", "powersgd_start_iter"):
                if self.value_of(name) != _fields()[name].default:
                    raise ConfigError(f"{flag_name(name)}: {self.value_of(name)!r} applies only with --comm-hook "
                                      f"powersgd; give that hook or leave it out")

    def to_dict(self) -> dict[str, Any]:
        """Every setting by its flat name (:meth:`settings`), except the :data:`SHOWN_WHEN_SET` ones left at
        their default. Each is a plain value (numbers, text, ``None``); a sweep writes two per point."""
        out = self.settings()
        for name in SHOWN_WHEN_SET:
            if out[name] == _fields()[name].default:
                del out[name]
        return out


def derived_flags(flags: dict[str, Any]) -> dict[str, Any]:
    """The flags a user gave, with what they imply filled in: ``--dp`` without ``--gpus`` means
    ``--gpus tp x cp x pp x dp``."""
    dp, tp, pp, cp = flags.get("dp"), flags.get("tp", 1), flags.get("pp", 1), flags.get("cp", 1)
    if "gpus" in flags or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in (dp, tp, pp, cp)):
        return flags  # nothing to derive, or a bad value PredictConfig names by its own flag
    if tp * pp * cp * dp > MAX_GPUS:
        return flags
    return {**flags, "gpus": tp * pp * cp * dp}


def flag_name(name: str) -> str:
    """The command-line flag of field ``name`` (``micro_batch`` -> ``--micro-batch``)."""
    return setting_field(name).metadata.get("flag", "--" + name.replace("_", "-"))


def range_help(name: str) -> str | None:
    """What field ``name``'s flag allows, in the flag's units (``an integer >= 1 and <= 10,000``), if it has a range."""
    rule: Range | None = setting_field(name).metadata.get("rule")
    if rule is None:
        return None
    return rule.text(flag_scale(name) or 1.0, setting_field(name).metadata.get("unit", ""))


def flag_scale(name: str) -> float | None:
    """Flag value / field value for a flag in human units (``--single-gpu-step-ms``: 1e3), else None."""
    return setting_field(name).metadata.get("flag_scale")


@cache
def _fields() -> dict[str, Any]:
    """Setting (flat name) -> the field of its part that holds it."""
    return {setting_key(f): f for cls in PARTS.values() for f in fields(cls)}


def setting_field(name: str):
    """The :class:`dataclasses.Field` of setting ``name`` (its default, metadata), in whichever part holds it."""
    try:
        return _fields()[name]
    except KeyError:
        raise AssertionError(f"PredictConfig has no setting {name!r}") from None


@cache
def _type_hints() -> dict[str, Any]:
    # Resolving the string annotations of every field costs ~1 ms; the CLI asks per field.
    hints = {}
    for cls in PARTS.values():
        own = typing.get_type_hints(cls)
        hints.update({setting_key(f): own[f.name] for f in fields(cls)})
    return hints


@cache
def _given_flag(name: str, value: Any, *, it: bool = False) -> str:
    """``--sequence-parallel:``, ``--no-cp-balance:`` or ``--cp-comm: 'a2a'`` as the user typed it (a
    boolean read "--sequence-parallel: True applies only with..."); ``it``: a switch is followed by "it"
    (a sentence whose subject the value was)."""
    if isinstance(value, bool):
        flag = flag_name(name)
        return (f"{flag}:" if value else f"--no-{flag.removeprefix('--')}:") + (" it" if it else "")
    return f"{flag_name(name)}: {value!r}"


def field_kind(name: str) -> tuple[type, bool, tuple[str, ...]]:
    """(base type, whether None is allowed, the choices of a Literal or ``()``) of field ``name``."""
    annotation = _type_hints()[name]
    args = typing.get_args(annotation)
    optional = type(None) in args
    if optional:
        (annotation,) = [a for a in args if a is not type(None)]
    if typing.get_origin(annotation) is Literal:
        return str, optional, typing.get_args(annotation)
    assert annotation in (bool, int, float, str), f"{name}: no rule for type {annotation!r}"
    return annotation, optional, ()


_DESCRIPTIONS = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}


def _has_type(value: Any, kind: type) -> bool:
    if kind is float:  # an integer is a number; a bool is not
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


def check_moe_node_limit(limit: Any, *, ep: int, moe_a2a: str) -> None:
    """Refuse ``--moe-node-limit`` where it cannot apply (one line naming the flag): its own range
    (:func:`check_value`), then an expert-parallel group (``ep`` above 1) sending over the hierarchical
    all-to-all. ``predict`` passes its config's ``ep``; ``plan`` the largest ``ep`` it searches. One rule
    for both, so the two commands refuse the same jobs with the same words."""
    if limit is None:
        return
    check_value("moe_node_limit", limit)
    if ep == 1 or moe_a2a != "hierarchical":
        # The flat all-to-all sends every routed copy apart: the limit moves none off the network.
        raise ConfigError(f"--moe-node-limit: {limit} bounds the servers the hierarchical all-to-all "
                          f"sends a token to, and this job has --ep {ep} --moe-a2a {moe_a2a}; give --ep 2 or "
                          f"more and --moe-a2a hierarchical, or leave it out")


def check_value(name: str, value: Any) -> None:
    """Raise a one-line :class:`ConfigError` naming the flag unless ``value`` suits field ``name``.

    The field's own rule only: its type (a bool is not an integer), its choices, its
    range, and for ``algo``/``proto`` that the list parses. The rules between fields are
    checked when a :class:`PredictConfig` is built.
    """
    kind, optional, choices = field_kind(name)
    flag = flag_name(name)
    if value is None and optional:
        return
    if choices:
        if not (isinstance(value, str) and value in choices):
            if not isinstance(value, str) and str(value) in choices:
                # fsdp_version=2 read "2 is not known; choose one of 1, 2"
                raise ConfigError(f"{flag}: {value!r} is a number, but its choices are text: give "
                                  f"{str(value)!r} (one of {', '.join(map(repr, choices))})")
            raise ConfigError(f"{flag}: {short(value)} is not known; choose one of {', '.join(choices)}")
        return
    rule: Range | None = setting_field(name).metadata.get("rule")
    if not (_has_type(value, kind) and (rule is None or rule.ok(value))):
        scale = flag_scale(name)
        unit = setting_field(name).metadata.get("unit", "")
        if scale is not None and _has_type(value, kind) and is_finite(value):
            # In the flag's units, as typed; 12 digits: --single-gpu-step-ms 1e-308 went to seconds (a subnormal)
            # and back as 9.999999999999475e-309.
            shown = f"{short(float(f'{value * scale:.12g}'))}{unit}"
        else:
            shown = short(value)
        expected = rule.text(scale or 1.0, unit) if rule else _DESCRIPTIONS[kind]
        raise ConfigError(f"{flag}: {shown} is not valid; expected {expected}")
    if isinstance(value, str) and len(value) > MAX_TEXT_CHARS:
        raise ConfigError(f"{flag}: {short(value)} is not valid; expected at most {MAX_TEXT_CHARS:,} characters")
    if name in ("algo", "proto"):
        (parse_algorithms if name == "algo" else parse_protocols)(value, flag)
    if name in _FILE_FIELDS and isinstance(value, str) and not value.strip():
        # --topology '' predicted on the --link preset in silence (an empty path read as "no file"), and
        # --calibration '' said "cannot read '.'".
        raise ConfigError(f"{flag}: {value!r} is not valid; expected the path of {_FILE_FIELDS[name]}, or leave "
                          f"{flag} out")


_FILE_FIELDS = {"topology_file": "a topology YAML file (without it, the --link preset)",
                "calibration": "a profile JSON file (dpsim calibrate --out) or a profile name"}
"""Fields that name a file, whose empty value is no file."""




def stage_layers_text(value: Any) -> Any:
    """``stage_layers`` given to the Python API as a sequence of block counts (``[10, 12, 12, 14]``) as the
    flag spells it (``"10,12,12,14"``), to be checked as the flag is (it was refused "expected a string");
    anything else as it is. A sequence holding anything but integers (a bool is not one) is refused here."""
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
        return value
    if not value or not all(isinstance(c, numbers.Integral) and not isinstance(c, bool) and type(c).__name__ != "bool_"
               for c in value):
        raise ConfigError(f"--stage-layers: {short(value)} is not valid; expected block counts, one per pipeline "
                          f"stage, as integers (e.g. [10, 12, 12, 14]) or comma-separated text (e.g. '10,12,12,14')")
    return ",".join(str(int(c)) for c in value)


def _named_choices(key: str) -> Any:
    """The names a setting without a ``Literal`` type chooses among (read only for a value not already
    lower-case, so the common case reads no directory)."""
    if key == "link":
        return preset_names()
    if key == "gpu":
        return GPU_PRESETS
    if key == "model":
        return list_models()
    return field_kind(key)[2]


def canonical_name(key: str, value: Any) -> Any:
    """A choice typed in other letter case as its canonical (lower-case) name, so ``--link InfiniBand`` is
    taken as ``--gpu H100`` always was and ``--json``'s ``config`` echoes ``infiniband``; a model path or shape
    (``transformer:...``, ``config.json``) is no catalog name and is kept as typed."""
    if not isinstance(value, str) or value == value.lower() or key not in _case_free():
        return value
    return canonical_choice(value, _named_choices(key))


@cache
def _case_free() -> frozenset[str]:
    """Settings whose value is one of a closed set of lower-case names: any letter case names the same one
    (found on first use: reading the type hints at import would slow every command's start)."""
    return frozenset({"link", "gpu", "model"}) | frozenset(k for k in SETTINGS if field_kind(k)[2])


def _check_part(part: Any) -> None:
    """Each setting of one part against its own rule (:func:`check_value`); a part is valid alone."""
    for f in fields(part):
        key = setting_key(f)
        value = getattr(part, f.name)
        plain = stage_layers_text(value) if key == "stage_layers" else plain_number(value, field_kind(key)[0])
        plain = canonical_name(key, plain)
        if plain is not value:
            object.__setattr__(part, f.name, plain)
        check_value(key, plain)


assert set(SETTINGS) == set(SETTING_PLACES), "SETTINGS lists every setting of the parts once"
SHOWN_WHEN_SET = ("fp8", "compile", "clip_grad_norm", "zero_grad", "fsdp_version", "fsdp_accumulate", "recompute_every", "op_rates",
                  "cp", "cp_comm", "cp_balance", "offload", "ep", "etp", "moe_routing", "moe_capacity_factor", "moe_a2a",
                  "zero_impl", "zero_group", "moe_a2a_overlap", "attention_kernel", "mtp_depth", "moe_node_limit",
                  "activations", "power_cap_w", "loss_impl", "rack_placement", "fp8_params", "moe_pad_to_capacity")
"""Fields that ``to_dict`` (``--json``'s ``config``, a sweep's columns) names only when they differ
from their default: options of the training script that most configurations leave alone."""


def resolved_compute_efficiency(config: PredictConfig, profile: Profile | None = None) -> tuple[float, str]:
    """``(factor, why)``: ``--compute-efficiency`` where given, else its default for this job.

    The default is :data:`~dpsim.workload.compute.MULTI_GPU_TRAINING_EFFICIENCY` where the compute is
    costed from the presets and the job runs on more than one GPU, and
    :data:`~dpsim.workload.compute.DEFAULT_COMPUTE_EFFICIENCY` (1) where the roofline is already what it
    predicts (one GPU: its constants are fitted on single-GPU steps) or where compute is measured (a
    calibration profile's rates, ``--single-gpu-step-ms``): a factor there would count twice. A profile that
    measured collectives alone (every shipped one) leaves the compute to the presets, and so to their default
    (:func:`~dpsim.profile.calibrated.measures_compute`).

    ``profile``: the profile ``config.calibration.profile`` names, as the caller loaded it
    (:func:`dpsim.predict.resolve.resolve` reads it once per prediction); read here where left out."""
    cal = config.calibration
    if cal.compute_efficiency is not None:
        return cal.compute_efficiency, "--compute-efficiency"
    if cal.profile is not None:
        if profile is None:
            profile = load_profile(cal.profile)  # refused there, naming what is wrong, where it cannot be read
        if measures_compute(profile):
            return DEFAULT_COMPUTE_EFFICIENCY, "default with --calibration: measured rates"
    if cal.single_gpu_step_s is not None:
        return DEFAULT_COMPUTE_EFFICIENCY, "default with --single-gpu-step-ms: a measured step"
    if config.cluster.gpus == 1:
        return DEFAULT_COMPUTE_EFFICIENCY, "default on one GPU"
    return MULTI_GPU_TRAINING_EFFICIENCY, ("default on several GPUs: the rate published multi-GPU training "
                                           "sustains against the single-GPU roofline")


def one_gpu_compute_ratio(config: PredictConfig, profile: Profile | None = None) -> float:
    """One GPU's compute time over this job's per GPU, for ``single_gpu_samples_per_s`` (the same model
    on one GPU, as ``predict --gpus 1`` gives it) and so the scaling efficiency: the multi-GPU default of
    :func:`resolved_compute_efficiency` is what a job on several GPUs loses, so one GPU runs without it;
    any other factor (given, or 1) is shared. ``profile``: as :func:`resolved_compute_efficiency` takes it."""
    efficiency, _ = resolved_compute_efficiency(config, profile)
    if config.calibration.compute_efficiency is None and efficiency == MULTI_GPU_TRAINING_EFFICIENCY \
            and config.cluster.gpus > 1:
        return MULTI_GPU_TRAINING_EFFICIENCY / DEFAULT_COMPUTE_EFFICIENCY
    return 1.0


def capped_compute_efficiency(config: PredictConfig, gpu, profile: Profile | None = None) -> float:
    """:func:`resolved_compute_efficiency` times the fraction of its rate ``gpu`` (a
    :class:`~dpsim.hardware.GpuSpec`) keeps under ``--power-cap-w`` (:func:`dpsim.hardware.power_cap_throughput`;
    1 without a cap): the one factor every compute profile of a prediction is built with. ``profile``: as
    :func:`resolved_compute_efficiency` takes it."""
    return resolved_compute_efficiency(config, profile)[0] * power_cap_throughput(gpu.name, config.cluster.power_cap_w)
