"""What one prediction answers: :class:`Prediction` and its stable JSON form.
"""

from __future__ import annotations

from dataclasses import field
from typing import Any

from dpsim.collectives.links import LinkReport
from dpsim.collectives.ops import CollectiveModel, CollectiveResult
from dpsim.engine.program import StepProgram
from dpsim.engine.simulate import SimulationResult
from dpsim.frozen import frozen_dataclass
from dpsim.memory import FitAdvice, MemoryBreakdown
from dpsim.predict.config import PredictConfig
from dpsim.predict.model_error import ModelErrorInterval
from dpsim.predict.provenance import Provenance


@frozen_dataclass
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
    mfu: float | None
    """Model FLOPs utilisation against the GPU's dense peak (``None`` on CPUs: no peak to quote)."""
    n_buckets: int
    """DDP buckets."""
    gradient_bytes: int
    """Bytes all-reduced per step."""
    ring: CollectiveResult | None
    """The step's largest gradient collective as the model that ran costs it (algorithm,
    protocol, channels, latency, hop latencies); ``None`` when nothing is communicated."""
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
    collectives: CollectiveModel | None = field(default=None, repr=False, compare=False)
    """The job's collective models (:class:`~dpsim.collectives.groups.GroupCollectives`: NCCL's
    choice on the flow model, degraded links included, or a calibration profile's fits)."""
    links: LinkReport | None = field(default=None, repr=False)
    """Per-link utilisation and bottleneck links of a step (NCCL model only)."""
    provenance: Provenance | None = field(default=None, repr=False)
    """Where compute, network and overlap came from (profile, flag or model) and what makes
    them uncertain (:mod:`dpsim.predict.provenance`)."""
    layout: Any = field(default=None, repr=False)
    """Where a tensor x pipeline x data layout's step goes, stage by stage
    (:class:`dpsim.predict.layout.LayoutReport`; ``None`` for data parallelism alone)."""
    ddp: dict | None = None
    """PyTorch DDP's own work per step (``bucket_copies_s``, ``comm_hook_s``, ``host_s``), the
    gradient bytes before and after its comm hook, PowerSGD's warm-up step; ``None`` for other
    strategies and tensor/pipeline layouts."""
    input_step_s: float | None = None
    """Time the input pipeline needs for one step's micro-batches (``--input-samples-per-s``)."""
    input_bound: bool = False
    """The input pipeline, not compute or communication, sets the step time."""
    model_error: ModelErrorInterval | None = None
    """How far the model's step time is to be trusted: a p10-p90 interval from the validation
    rows of the prediction's regime (:mod:`dpsim.predict.model_error`); not run-to-run variability."""

    @property
    def overlap_fraction(self) -> float:
        """Share of communication hidden behind compute, in [0, 1]: the exposed time is summed apart from the whole,
        and a step with nothing hidden (gpt2 on 8 GPUs under zero2) came out 3e-18 s over it, a fraction of
        -1.3e-15 in ``--json``."""
        return min(1.0, max(0.0, 1.0 - self.exposed_comm_s / self.comm_s)) if self.comm_s > 0 else 1.0

    def _gradient_collective_dict(self) -> dict | None:
        """``ring``: the largest gradient collective, from the model that ran (key kept from the
        days of a flat-ring model; ``algorithm`` says what actually ran)."""
        r = self.ring
        if r is None:
            return None
        classes = sorted({u.link_class for u in self.links.bottleneck}) if self.links is not None else []
        return {
            "op": r.op, "size_bytes": r.size_bytes, "n_ranks": r.n_ranks, "algorithm": r.algorithm,
            "protocol": r.protocol, "channels": r.channels, "time_s": r.time_s, "latency_s": r.latency_s,
            "bandwidth_bytes_per_s": r.transfer_bus_bandwidth_bytes_per_s,
            "intra_hop_latency_s": r.intra_hop_latency_s, "inter_hop_latency_s": r.inter_hop_latency_s,
            "bottleneck_link_classes": classes,
        }

    def to_dict(self) -> dict:
        """Plain JSON-able dict with stable keys (see README, "JSON output")."""
        mem = self.memory
        return {
            "schema": "dpsim.prediction/1",
            "config": self.config.to_dict(),
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
            "ring": self._gradient_collective_dict(),
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
                **fp8_memory_parts(mem),
                "strategy": mem.strategy,
                "shard_group_size": mem.shard_group_size,
                "suggestion": mem.suggestion,
                "advice": self.fit.to_dict() if self.fit is not None else None,
            },
            "strategy": self.strategy,
            "comm_bytes_by_op": dict(self.comm_bytes_by_op),
            "links": self.links.to_dict() if self.links is not None else None,
            "provenance": self.provenance.to_dict() if self.provenance is not None else None,
            "layout": self.layout.to_dict() if self.layout is not None else None,
            "ddp": dict(self.ddp) if self.ddp is not None else None,
            "input_step_s": self.input_step_s,
            "input_bound": self.input_bound,
            "model_error": self.model_error.to_dict() if self.model_error is not None else None,
        }


@frozen_dataclass
class MemoryReport:
    """Memory per GPU of one configuration without simulating a step (``dpsim memory``)."""

    config: PredictConfig
    """What was asked (resolved: :mod:`dpsim.predict.resolve`)."""
    model: str
    """Model name."""
    param_count: int
    """Parameters of the model."""
    gpu: str
    """GPU preset used."""
    n_gpus: int
    """GPUs of the job."""
    gpus_per_node: int
    """GPUs per node."""
    memory: MemoryBreakdown
    """Memory per GPU by category, and the verdict."""
    advice: FitAdvice
    """What would make it fit."""

    def to_dict(self) -> dict[str, Any]:
        """``dpsim memory --json`` (schema ``dpsim.memory/1``)."""
        c, mem = self.config, self.memory
        return {
            "schema": "dpsim.memory/1", "model": self.model, "param_count": self.param_count,
            "gpu": self.gpu, "n_gpus": self.n_gpus, "gpus_per_node": self.gpus_per_node,
            "strategy": c.parallelism.strategy, "precision": c.execution.precision, "optimizer": c.workload.optimizer,
            "micro_batch": c.workload.micro_batch, "grad_accum": c.workload.grad_accum,
            "activation_checkpointing": c.execution.activation_checkpointing,
            "shard_group_size": mem.shard_group_size,
            "weights_bytes": mem.weights_bytes, "gradients_bytes": mem.gradients_bytes,
            "optimizer_bytes": mem.optimizer_bytes, "activations_bytes": mem.activations_bytes,
            "comm_buffers_bytes": mem.comm_buffers_bytes, "overhead_bytes": mem.overhead_bytes,
            "total_bytes": mem.total_bytes, "capacity_bytes": mem.capacity_bytes,
            "usable_bytes": mem.usable_bytes, "fits": mem.fits, "suggestion": mem.suggestion,
            **fp8_memory_parts(mem),
            "advice": self.advice.to_dict(),
        }


def fp8_memory_parts(mem) -> dict:
    """The FP8 parts of a memory breakdown, named only where there are any: the FP8 primary weights
    (``--fp8-params``) in the weights, TransformerEngine's FP8 weight copies in the activations (without
    ``--fp8-params``), and what the FP8 input copies change the activations by."""
    out = {}
    if mem.fp8_weights_bytes:
        out["fp8_weights_bytes"] = mem.fp8_weights_bytes
    if mem.fp8_weight_cache_bytes:
        out["fp8_weight_cache_bytes"] = mem.fp8_weight_cache_bytes
    if mem.fp8_inputs_bytes:
        out["fp8_inputs_bytes"] = mem.fp8_inputs_bytes
    return out
