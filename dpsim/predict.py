"""The public API: predict one data-parallel training configuration.

>>> from dpsim.predict import PredictConfig, predict
>>> p = predict(PredictConfig(gpus=16, link="infiniband", model="gpt2"))
>>> p.n_gpus, p.scaling_efficiency <= 1.0
(16, True)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from dpsim.algorithms.links import LinkReport, link_report
from dpsim.collectives import CollectiveModel, RingCollectives, RingProfile
from dpsim.engine import SimulationResult, StepProgram, run_program
from dpsim.errors import ConfigError
from dpsim.hardware import get_gpu
from dpsim.memory import FitAdvice, MemoryBreakdown, fit_advice, memory_breakdown
from dpsim.topology import Topology, TopologySpec, load_preset, load_topology_file
from dpsim.workload.catalog import get_model
from dpsim.workload.compute import DEFAULT_COMPUTE_EFFICIENCY, ComputeProfile, compute_profile
from dpsim.workload.precision import check_optimizer, check_precision_on_gpu, get_precision
from dpsim.workload.spec import ModelSpec, ParamSpec

DEFAULT_OVERLAP_SLOWDOWN = 0.1
"""Compute slowdown while a collective runs. NCCL runs one CTA per channel on its own
SMs; ~16 channels on a 132-SM H100 (NVIDIA H100 datasheet: 132 SMs on SXM5) take
~12 % of the SMs. An estimate until ``dpsim calibrate`` measures it."""


@dataclass(frozen=True, kw_only=True)
class PredictConfig:
    """Everything that defines one prediction (the CLI's flags, in SI units)."""

    gpus: int = 64
    """Data-parallel GPUs."""
    link: str = "ethernet"
    """Topology preset name (ignored when ``topology_file`` is set)."""
    topology_file: str | None = None
    """A user's topology YAML, instead of a preset."""
    gpus_per_node: int | None = None
    """Override the topology's GPUs per node."""
    gpu: str | None = None
    """Override the topology's GPU preset."""
    model: str = "gpt2-xl"
    """Catalog model name, or a torch builder ``path/file.py:fn`` / ``package.module:fn``."""
    seq_len: int | None = None
    """Override the model's sequence length."""
    flash_attention: bool = True
    """Attention without stored score matrices (SDPA/FlashAttention), for activation memory."""
    micro_batch: int = 4
    """Samples per GPU per step."""
    precision: str = "bf16-mixed"
    """Precision key (see :mod:`dpsim.workload.precision`)."""
    optimizer: str = "adamw"
    """Optimizer key."""
    bucket_cap_mb: float | None = None
    """DDP ``bucket_cap_mb`` in MiB; ``None`` = PyTorch default (25 MiB, 1 MiB first bucket)."""
    overlap: bool = True
    """Overlap all-reduce with backward (``False``: all-reduce after backward)."""
    overlap_slowdown: float = DEFAULT_OVERLAP_SLOWDOWN
    """Fractional compute slowdown while communication runs."""
    compute_efficiency: float = DEFAULT_COMPUTE_EFFICIENCY
    """Fraction of the achieved matmul rate real layers reach."""
    single_gpu_step_s: float | None = None
    """A measured one-GPU step time to scale compute to."""
    steps: int = 3
    """Steps to simulate."""
    calibration: str | None = None
    """A calibration profile (path or shipped name): its fitted collectives and measured
    compute rates replace the preset's (:mod:`dpsim.calibrate.model`)."""
    strategy: str = "ddp"
    """Data-parallel strategy: ddp, zero1, zero2, zero3, fsdp, fsdp-shard-grad-op, fsdp-hybrid
    (:mod:`dpsim.strategies`)."""
    grad_accum: int = 1
    """Micro-batches per optimizer step (gradient accumulation)."""
    activation_checkpointing: bool = False
    """Recompute each unit's forward in backward; keep only unit inputs."""
    fsdp_unit: str = "block"
    """FSDP / ZeRO-3 wrap unit and checkpoint unit: block, layer or model."""
    input_shape: str | None = None
    """Example input of a torch-module model (``--model file.py:fn``), e.g. ``8,3,224,224``
    or ``4,1024:int64``; the first dimension is the traced batch."""
    algo: str | None = None
    """Allowed collective algorithms, like NCCL_ALGO (``ring,tree`` or ``^nvls``); ``None``:
    NCCL's own choice per call (:mod:`dpsim.algorithms.nccl`)."""
    proto: str | None = None
    """Allowed NCCL protocols, like NCCL_PROTO (``LL,LL128,Simple`` or ``^LL``)."""
    jobs: int = 1
    """Identical data-parallel jobs sharing the cluster's fabric at once (link contention)."""
    placement: str = "packed"
    """Servers of the jobs: ``packed`` (each job contiguous) or ``interleaved`` (round robin)."""


@dataclass(frozen=True, kw_only=True)
class Prediction:
    """The predicted training step and everything derived from it."""

    config: PredictConfig
    """What was asked."""
    topology: str
    """Topology name."""
    gpu: str
    """GPU preset used."""
    n_gpus: int
    """Data-parallel GPUs."""
    n_nodes: int
    """Servers."""
    model: str
    """Model name."""
    param_count: int
    """Model parameters."""
    tokens_per_sample: int | None
    """Sequence length, for token models."""
    step_time_s: float
    """Predicted steady-state step time (mean over simulated steps)."""
    forward_s: float
    """Forward pass."""
    backward_s: float
    """Backward pass, overlap slowdown included."""
    optimizer_s: float
    """Optimizer step."""
    compute_s: float
    """Forward + backward + optimizer with no communication (the one-GPU step)."""
    comm_s: float
    """Sum of all-reduce durations in one step."""
    exposed_comm_s: float
    """Communication not hidden behind compute."""
    samples_per_s: float
    """Global throughput."""
    tokens_per_s: float | None
    """Global token throughput, for token models."""
    single_gpu_samples_per_s: float
    """Throughput of the same model on one GPU."""
    scaling_efficiency: float
    """samples_per_s / (n_gpus x single_gpu_samples_per_s)."""
    mfu: float
    """Model FLOPs utilisation against the GPU's dense peak."""
    n_buckets: int
    """DDP buckets."""
    gradient_bytes: int
    """Bytes all-reduced per step."""
    ring: RingProfile
    """The collective model's ring step."""
    memory: MemoryBreakdown
    """Memory per GPU."""
    simulation: SimulationResult = field(repr=False)
    """Raw steps and trace."""
    program: StepProgram | None = field(default=None, repr=False)
    """The step every rank runs (replayed per rank by :mod:`dpsim.variability`)."""
    strategy: str = "ddp"
    """Data-parallel strategy."""
    comm_bytes_by_op: dict = field(default_factory=dict)
    """Message bytes per collective type in one step (``all_reduce``, ``reduce_scatter``, ``all_gather``)."""
    fit: FitAdvice | None = field(default=None, repr=False)
    """What would make the job fit in memory (``fit.fits`` when it already does)."""
    collectives: CollectiveModel | None = field(default=None, repr=False)
    """The collective model the step used (ring, degraded ring or calibrated)."""
    links: LinkReport | None = field(default=None, repr=False)
    """Per-link utilisation and bottleneck links of a step (NCCL model only)."""

    @property
    def overlap_fraction(self) -> float:
        """Share of communication hidden behind compute."""
        return 1.0 - self.exposed_comm_s / self.comm_s if self.comm_s > 0 else 1.0

    def to_dict(self) -> dict:
        """Plain JSON-able dict with stable keys (see README, "JSON output")."""
        mem = self.memory
        return {
            "schema": "dpsim.prediction/1",
            "config": asdict(self.config),
            "topology": self.topology,
            "gpu": self.gpu,
            "n_gpus": self.n_gpus,
            "n_nodes": self.n_nodes,
            "model": self.model,
            "param_count": self.param_count,
            "tokens_per_sample": self.tokens_per_sample,
            "step_time_s": self.step_time_s,
            "forward_s": self.forward_s,
            "backward_s": self.backward_s,
            "optimizer_s": self.optimizer_s,
            "compute_s": self.compute_s,
            "comm_s": self.comm_s,
            "exposed_comm_s": self.exposed_comm_s,
            "overlap_fraction": self.overlap_fraction,
            "samples_per_s": self.samples_per_s,
            "tokens_per_s": self.tokens_per_s,
            "single_gpu_samples_per_s": self.single_gpu_samples_per_s,
            "scaling_efficiency": self.scaling_efficiency,
            "mfu": self.mfu,
            "n_buckets": self.n_buckets,
            "gradient_bytes": self.gradient_bytes,
            "ring": {
                "channels": self.ring.channels,
                "bandwidth_bytes_per_s": self.ring.bandwidth_bytes_per_s,
                "intra_hop_latency_s": self.ring.intra_hop_latency_s,
                "inter_hop_latency_s": self.ring.inter_hop_latency_s,
                "bottleneck_link_classes": sorted({c for _, _, c in self.ring.bottleneck_links}),
            },
            "memory": {
                "weights_bytes": mem.weights_bytes,
                "gradients_bytes": mem.gradients_bytes,
                "optimizer_bytes": mem.optimizer_bytes,
                "activations_bytes": mem.activations_bytes,
                "comm_buffers_bytes": mem.comm_buffers_bytes,
                "overhead_bytes": mem.overhead_bytes,
                "total_bytes": mem.total_bytes,
                "capacity_bytes": mem.capacity_bytes,
                "fits": mem.fits,
                "usable_bytes": mem.usable_bytes,
                "strategy": mem.strategy,
                "shard_group_size": mem.shard_group_size,
                "suggestion": mem.suggestion,
                "advice": self.fit.to_dict() if self.fit is not None else None,
            },
            "strategy": self.strategy,
            "comm_bytes_by_op": dict(self.comm_bytes_by_op),
            "links": self.links.to_dict() if self.links is not None else None,
        }


def resolve_topology(config: PredictConfig) -> Topology:
    """The cluster a config describes (preset or file, GPUs, GPUs per node, GPU override)."""
    spec: TopologySpec = (load_topology_file(config.topology_file) if config.topology_file
                          else load_preset(config.link))
    if config.gpu is not None:
        get_gpu(config.gpu)
        from dataclasses import replace
        spec = replace(spec, gpu=config.gpu.lower())
    topology = Topology.from_spec(spec, config.gpus, config.gpus_per_node)
    topology.check_connected()
    return topology


def with_grad_dtype(model: ModelSpec, dtype: str) -> list[ParamSpec]:
    """The model's parameters in gradient-ready order with the gradient dtype applied.

    The order is ``model.grad_ready_params`` (layers in reverse, each in autograd's
    order), the order DDP's rebuilt buckets follow.
    """
    return [ParamSpec(name=p.name, shape=p.shape, dtype=dtype) for p in model.grad_ready_params]


def build_collectives(config: PredictConfig, topology: Topology, *, profile=None,
                      degradations=()) -> CollectiveModel:
    """The collective model ``predict`` costs ``config``'s world communicator with.

    A calibration profile's fitted model when ``config.calibration`` is set (``profile``:
    that profile, already loaded), else NCCL's algorithm/protocol choice on the flow model
    with ``config``'s ``--algo/--proto/--jobs/--placement``
    (:func:`dpsim.algorithms.nccl.collectives_for`), its links scaled by ``degradations``
    (:class:`~dpsim.variability.LinkDegradation`, ``--degrade``).
    """
    if profile is None and config.calibration is not None:
        from dpsim.calibrate.profile import load_profile
        profile = load_profile(config.calibration)
    if profile is not None:
        if degradations:
            raise ConfigError("--degrade: not available with --calibration (a calibrated collective model has no "
                              "links to degrade); leave one of them out")
        from dpsim.calibrate.model import calibrated_collectives
        return calibrated_collectives(profile, topology)
    from dpsim.algorithms.nccl import collectives_for
    return collectives_for(topology, config, degradations=degradations)


def predict(config: PredictConfig, *, collectives: CollectiveModel | None = None,
            degradations=()) -> Prediction:
    """Predict a data-parallel training step.

    ``collectives`` replaces the model :func:`build_collectives` picks (NCCL's, or a
    calibrated one); ``degradations`` (:class:`~dpsim.variability.LinkDegradation`) run
    some links below capacity in that model.
    """
    if collectives is not None and degradations:
        raise ConfigError("degradations: apply to the collective model predict builds; "
                          "give collectives or degradations, not both")
    if config.steps < 1:
        raise ConfigError(f"--steps: {config.steps} is not valid; expected an integer >= 1")
    topology = resolve_topology(config)
    gpu = get_gpu(topology.spec.gpu)
    profile = None
    if config.calibration is not None:
        from dpsim.calibrate.model import calibrated_gpu
        from dpsim.calibrate.profile import load_profile
        profile = load_profile(config.calibration)
        gpu = calibrated_gpu(profile, gpu)
    model = load_model(config)
    precision = get_precision(config.precision)
    check_optimizer(config.optimizer)
    check_precision_on_gpu(precision, gpu)
    compute: ComputeProfile = compute_profile(
        model, gpu, micro_batch=config.micro_batch, precision=precision, optimizer=config.optimizer,
        compute_efficiency=config.compute_efficiency, single_gpu_step_s=config.single_gpu_step_s,
    )
    if profile is not None and config.single_gpu_step_s is None:
        from dpsim.calibrate.model import measured_step_s
        measured = measured_step_s(profile, model=config.model, micro_batch=config.micro_batch,
                                   dtype=precision.compute_dtype)
        if measured is not None:  # measured forward + backward, modelled optimizer
            from dpsim.calibrate.model import with_measured_step
            compute = with_measured_step(compute, measured)
    # A RingCollectives given by the caller reports its own ring.
    ring = collectives if isinstance(collectives, RingCollectives) else RingCollectives(topology)
    if collectives is None:  # a calibration's, or NCCL's algorithm/protocol choice on the flow model
        collectives = build_collectives(config, topology, profile=profile, degradations=degradations)
    from dpsim.strategies import build_step_program, hybrid_collectives

    plan = build_step_program(
        config.strategy, model, compute, precision=precision, n_gpus=topology.n_gpus,
        gpus_per_node=topology.gpus_per_node, grad_accum=config.grad_accum,
        activation_checkpointing=config.activation_checkpointing, overlap=config.overlap,
        bucket_cap_mb=config.bucket_cap_mb, fsdp_unit=config.fsdp_unit)
    program = plan.program
    if any(c.group != "world" for c in program.comms) and not hasattr(collectives, "group"):
        # Hybrid sharding: intra-node and inter-node communicators, costed like the world's
        # (NCCL's choice when the world model is NCCL's, rings otherwise).
        factory = None
        if type(collectives).__name__ == "NcclCollectives":
            from dpsim.algorithms.nccl import collectives_for
            factory = lambda t: collectives_for(t, config, degradations=degradations, job=topology)  # noqa: E731
        collectives = hybrid_collectives(topology, collectives, factory=factory)
    sim = run_program(program, collectives, steps=config.steps, overlap_slowdown=config.overlap_slowdown)
    n = len(sim.steps)
    mean = lambda attr: sum(getattr(s, attr) for s in sim.steps) / n  # noqa: E731
    step_time = mean("step_time_s")
    k = config.grad_accum
    samples = config.micro_batch * k * topology.n_gpus / step_time
    # The one-GPU step runs the same micro-batches (and recompute), unsharded optimizer.
    single_step = (sum(t.duration_s for t in program.tasks if t.kind != "optimizer") + compute.optimizer_s)
    single = config.micro_batch * k / single_step
    memory, advice = memory_with_advice(model, gpu, config, precision, topology)
    links = link_report(getattr(collectives, "world", collectives),
                        [(c.op, c.size_bytes) for c in program.comms if c.group == "world"], step_time)
    peak = gpu.peak_flops_per_s.get(precision.compute_dtype) or max(gpu.peak_flops_per_s.values())
    return Prediction(
        config=config,
        topology=topology.spec.name,
        gpu=gpu.name,
        n_gpus=topology.n_gpus,
        n_nodes=topology.n_nodes,
        model=model.name,
        param_count=model.param_count,
        tokens_per_sample=model.tokens_per_sample,
        step_time_s=step_time,
        forward_s=mean("forward_s"),
        backward_s=mean("backward_s"),
        optimizer_s=mean("optimizer_s"),
        compute_s=single_step,
        comm_s=mean("comm_s"),
        exposed_comm_s=mean("exposed_comm_s"),
        samples_per_s=samples,
        tokens_per_s=samples * model.tokens_per_sample if model.tokens_per_sample else None,
        single_gpu_samples_per_s=single,
        scaling_efficiency=samples / (topology.n_gpus * single),
        mfu=compute.flops_per_step * k / step_time / peak,
        n_buckets=len(plan.gradient_ops),
        gradient_bytes=int(plan.gradient_bytes),
        ring=ring.profile,
        memory=memory,
        simulation=sim,
        program=program,
        collectives=collectives,
        strategy=config.strategy,
        comm_bytes_by_op=plan.bytes_by_op,
        fit=advice,
        links=links,
    )


def load_model(config: PredictConfig) -> ModelSpec:
    """The config's model: a catalog entry, or a torch module (``file.py:fn``, ``pkg.mod:fn``)
    traced on the meta device (torch is imported only then)."""
    from dpsim.workload.from_torch import is_torch_model_ref

    if is_torch_model_ref(config.model):
        if config.seq_len is not None:
            raise ConfigError("--seq-len: does not apply to a torch module (--model file.py:fn); its example "
                              "input (--input-shape) sets the sequence length")
        from dpsim.workload.from_torch import load_torch_workload
        return load_torch_workload(config.model, input_shape=config.input_shape)
    if config.input_shape is not None:
        raise ConfigError("--input-shape: applies only to a torch module (--model file.py:fn); catalog models "
                          "take --seq-len")
    return get_model(config.model, seq_len=config.seq_len, flash_attention=config.flash_attention)


def memory_with_advice(model: ModelSpec, gpu, config: PredictConfig, precision, topology: Topology
                       ) -> tuple[MemoryBreakdown, FitAdvice]:
    """Per-GPU memory of ``config``'s strategy, with the fit advice in ``suggestion`` when it does not fit."""
    from dataclasses import replace

    kwargs = dict(precision=precision, optimizer=config.optimizer, micro_batch=config.micro_batch,
                  strategy=config.strategy, n_gpus=topology.n_gpus, gpus_per_node=topology.gpus_per_node,
                  activation_checkpointing=config.activation_checkpointing, grad_accum=config.grad_accum,
                  fsdp_unit=config.fsdp_unit, overlap=config.overlap)
    memory = memory_breakdown(model, gpu, **kwargs)
    advice = fit_advice(model, gpu, **kwargs)
    if not memory.fits:
        memory = replace(memory, suggestion=advice.message)
    return memory, advice


def memory_for_config(config: PredictConfig) -> tuple[MemoryBreakdown, FitAdvice, ModelSpec, Topology]:
    """Memory per GPU for ``config`` without simulating a step (``dpsim memory``)."""
    topology = resolve_topology(config)
    gpu = get_gpu(topology.spec.gpu)
    model = load_model(config)
    precision = get_precision(config.precision)
    check_optimizer(config.optimizer)
    check_precision_on_gpu(precision, gpu)
    from dpsim.strategies import check_fsdp_unit, check_grad_accum, check_strategy

    check_strategy(config.strategy)
    check_fsdp_unit(config.fsdp_unit)
    check_grad_accum(config.grad_accum)
    memory, advice = memory_with_advice(model, gpu, config, precision, topology)
    return memory, advice, model, topology
