"""What one prediction is asked: :class:`PredictConfig` (the CLI's flags, in SI units).
"""

from __future__ import annotations

from dataclasses import dataclass

from dpsim.workload.compute import DEFAULT_COMPUTE_EFFICIENCY

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
