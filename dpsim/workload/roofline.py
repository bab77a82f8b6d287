"""Per-op roofline: the time of each matmul, attention and memory-bound op on one GPU.

Every op takes the longer of its compute time and its device-memory time (Williams,
Waterman and Patterson 2009, "Roofline: an insightful visual performance model", CACM
52(4)), with the GPU's rates from :mod:`dpsim.hardware`:

* **Matmuls** (linear layers, convolutions as implicit GEMMs) compute at the GPU's best measured
  matmul rate for the op's rate key (:attr:`Precision.matmul_dtype` or :attr:`Precision.conv_dtype`)
  lost to tile and wave quantization over the SMs (split-K when the tiles do not fill them);
  :mod:`dpsim.workload.gemm`'s surface, fitted on published GEMM sweeps, adds the main loop's
  fixed cost on short reductions and a kernel's floor when switched on (off by default: see
  there why). Their memory time moves the input, the weights and the
  output once (a convolution's im2col operand is gathered on chip, so its input tensor counts,
  not the im2col matrix). Small and skinny GEMMs therefore run below the best rate, large ones
  near it.
* **Fused attention** (SDPA's flash kernels, FlashAttention-2/3, cuDNN) runs at the fraction
  of the dense peak that :mod:`dpsim.workload.attention_rates` gives for its kernel, GPU
  generation, head dim, key length and mask (a model fitted on published kernel benchmarks),
  on half the square when causal, with a backward of 2.5x the forward FLOPs (it recomputes
  the scores: Dao 2023, "FlashAttention-2", arXiv:2307.08691, whose benchmark counts fwd + bwd
  as 3.5x fwd); the Triton FlashAttention kernel :data:`TRITON_FLASH_SLOWDOWN` and FlashAttention 1.x
  :data:`FLASH1_SLOWDOWN` slower. Eager attention
  is two batched matmuls plus element-wise passes over the scores (softmax in fp32 under
  autocast, in the scores' dtype without it).
* **Memory-bound ops** (norms, activations, dropout, residual adds, casts, softmax, the
  loss, embedding gathers, the optimizer) stream their bytes at :data:`MEMORY_EFFICIENCY` of
  the GPU's streaming bandwidth: the rate a STREAM kernel measures on it, not the datasheet
  peak, because the fraction of the peak that DRAM delivers differs by memory technology
  (83-94 % on HBM2/HBM2e/GDDR6 boards, 66 % on the H200's HBM3e: :data:`dpsim.hardware.STREAM_FRACTION`).
* **Host-bound ops**: PyTorch's eager mode spends CPU time on every op it dispatches
  (Python, the dispatcher, autograd bookkeeping, the kernel launch), about
  :data:`HOST_OVERHEAD_PER_OP_S`. The CPU runs ahead of the GPU while kernels are long, so
  this costs nothing then; once kernels are shorter than their dispatch, the GPU waits
  for the CPU. A kernel therefore takes at least its dispatch time (:attr:`Term.host_s`):
  a bound that binds for small tensors and for per-parameter optimizer loops (thousands
  of tiny kernels after a host synchronisation).

Two constants are not datasheet numbers or measurements, :data:`MEMORY_EFFICIENCY` and
:data:`MATMUL_EFFICIENCY`; ``python validation/accuracy_compute.py`` fits them on
published single-GPU throughput leaving each GPU chip out (nothing fitted on the GPU
predicted), and the defaults here are the fit on all rows, which that script prints.
TF32 needs no constant of its own: its rates are measured or derived from measured
16-bit rates (:mod:`dpsim.hardware`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from dpsim.errors import ConfigError
from dpsim.frozen import frozen_dataclass
from dpsim.hardware import GpuSpec
from dpsim.workload.attention_rates import attention_fraction_of_peak
from dpsim.workload.fp8 import (
    FP8_RATE_KEY,
    cast_pass_bytes_per_element,
    cast_pass_kernels,
    cast_plan,
    runs_in_fp8,
)
from dpsim.workload.gemm import (  # noqa: F401 (TILE, SPLIT_K_MIN_K, shape_efficiency re-exported)
    SPLIT_K_MIN_K,
    TILE,
    gemm_compute_s,
    shape_efficiency,
    uses_tf32,
)
from dpsim.workload.precision import Precision, element_bytes
from dpsim.workload.spec import AttentionOp, MatmulOp, MemoryOp, OpSpec

HOST_OVERHEAD_PER_OP_S = 8e-6
"""CPU time PyTorch's eager mode takes to dispatch one CUDA op and launch its kernel.
Measured: 8 µs per op submitted back to back (``add`` on a 512x512 tensor, A100 host; the
vendor CUDA path of flagos-ai/Torch-FL pull request #27, 'Findings (NVIDIA A100, µs/op)',
column cuda_sub); about 7 µs per eager op on tiny tensors (flagos-ai/FlagGems issue #4812,
'sigmoid/relu/abs/silu/gelu ... ~7 us eager'); 4 µs per op on CUDA under torch 1.12
(pytorch/pytorch issue #82793, description). Python-level optimizer loops pay it per
parameter and per op."""

MEMORY_EFFICIENCY = 0.739
"""Fraction of the GPU's *streaming* bandwidth (:attr:`dpsim.hardware.GpuSpec.streaming_bandwidth_bytes_per_s`:
what a STREAM ``scale`` kernel measures, 66-94 % of the datasheet peak depending on the memory
technology) that PyTorch's eager element-wise kernels reach, as the ops are counted here. Fitted
leave-one-chip-out by ``validation/accuracy_compute.py`` (it prints every fold); this default is
the fit on all scored rows. Real kernels lose more than a pure stream to launch tails, partial
waves and less regular access (strided norms, gathers)."""

MATMUL_EFFICIENCY = 0.997
"""Fraction of the best-shape measured matmul rate (:mod:`dpsim.hardware`) that a
full-wave, full-tile GEMM of a real layer reaches. Fitted like :data:`MEMORY_EFFICIENCY`."""

WINOGRAD_SPEEDUP = 2.25
"""Fewer multiplications of a 3x3, stride-1 convolution run with Winograd's F(2x2, 3x3)
(16 instead of 36 per 2x2 output tile: Lavin and Gray 2016, "Fast Algorithms for
Convolutional Neural Networks", CVPR), which cuDNN picks for fp32 convolutions on CUDA
cores (GPUs without TF32). Tensor-core convolutions are costed as plain implicit GEMMs."""

FUSED_ATTENTION_BACKWARD_FLOPS = 2.5
"""Backward / forward FLOPs of a fused attention kernel, which recomputes ``QKᵀ``
(FlashAttention-2's benchmark convention)."""

TRITON_FLASH_SLOWDOWN = math.sqrt(1.3 * 2.5)
"""How much slower the Triton FlashAttention kernel (HazyResearch ``flash_attn_triton``,
run by llm-foundry's ``attn_impl: triton``) is than FlashAttention-2: "1.3-2.5x faster
than FlashAttention in Triton" (Dao 2023, "FlashAttention-2", Sec. 4.1, A100); the
geometric middle of that range, 1.8."""

FLASH1_SLOWDOWN = math.sqrt(1.7 * 3.0)
"""How much slower FlashAttention 1.x (HazyResearch ``flash-attn`` before 2.0, one thread block
per batch x head, "sliced-K" work split between warps) is than FlashAttention-2: "1.7-3.0x faster
than FlashAttention" (Dao 2023, "FlashAttention-2", arXiv:2307.08691, Sec. 4, A100 80GB SXM4,
head dims 64 and 128, with and without a causal mask; "around 2x" in Sec. 4.1); the geometric
middle of that range, 2.26, as for :data:`TRITON_FLASH_SLOWDOWN`."""

FUSED_ATTENTION_SLOWDOWN = {"triton": TRITON_FLASH_SLOWDOWN, "flash1": FLASH1_SLOWDOWN}
"""Fused attention kernels costed as FlashAttention-2 at a lower rate (the kernel's published
speed against FlashAttention-2 on the same GPU)."""


@frozen_dataclass
class Efficiencies:
    """The fitted constants, as one value (``validation/accuracy_compute.py`` varies them)."""

    memory: float = MEMORY_EFFICIENCY
    """:data:`MEMORY_EFFICIENCY`."""
    matmul: float = MATMUL_EFFICIENCY
    """:data:`MATMUL_EFFICIENCY`."""


@dataclass(frozen=True)
class Term:
    """One kernel's (or a group of kernels') roofline times before the fitted efficiencies:
    compute at the nominal rate and traffic at the streaming bandwidth; the kernel takes the
    longer once each is divided by its efficiency, and never less than the CPU time to
    dispatch it (:meth:`time_s`)."""

    compute_s: float
    """FLOPs / nominal rate (best matmul rate x shape efficiency, or attention's rate)."""
    memory_s: float
    """Bytes / the streaming bandwidth (:attr:`dpsim.hardware.GpuSpec.streaming_bandwidth_bytes_per_s`)."""
    kind: str = "memory"
    """``matmul`` (compute scales with the matmul efficiency), ``attention`` (fixed fraction
    of peak) or ``memory`` (no compute)."""
    host_s: float = 0.0
    """CPU time to dispatch the kernels (:data:`HOST_OVERHEAD_PER_OP_S` each): the least the
    GPU can take for them when the CPU cannot run ahead."""

    def time_s(self, eff: Efficiencies) -> float:
        """Seconds of the kernel under ``eff``."""
        compute = self.compute_s / eff.matmul if self.kind == "matmul" else self.compute_s
        return max(compute, self.memory_s / eff.memory, self.host_s)


def pass_bytes(byte_class: str, precision: Precision) -> float:
    """Bytes per element of one tensor pass of ``byte_class`` (:data:`dpsim.workload.spec.BYTE_CLASSES`)."""
    plain = element_bytes(byte_class, precision)
    if plain is not None:
        return plain
    act, stream = precision.activation_bytes, precision.residual_bytes
    if byte_class == "byte":
        return 1.0
    if byte_class == "cast":
        return 0.0 if stream == act else float(stream + act)
    if byte_class == "upcast":
        return 0.0 if act == 4 else float(act + 4)
    if byte_class == "nchw":
        return 0.0 if act == 4 else float(act)
    raise AssertionError(byte_class)


def matmul_term(m: int, n: int, k: int, batch: int, rate_key: str, element_bytes: float, gpu: GpuSpec,
                *, flops_divisor: float = 1.0, traffic_elements: float | None = None) -> Term:
    """One (batched) GEMM: its compute on the fitted GEMM surface
    (:func:`dpsim.workload.gemm.gemm_compute_s`) and its traffic (A, B
    and C once, or ``traffic_elements`` per batch entry when the operands are not stored
    whole, as a convolution's implicit im2col matrix is not). ``flops_divisor`` > 1 for an
    algorithm doing fewer multiplications (Winograd)."""
    if min(m, n, k, batch) <= 0:
        return Term(0.0, 0.0, "matmul")
    compute = gemm_compute_s(m, n, k, batch, rate_key, gpu) / flops_divisor
    if traffic_elements is None:
        traffic_elements = float(m) * k + float(k) * n + float(m) * n
    traffic = element_bytes * batch * traffic_elements
    return Term(compute, traffic / gpu.streaming_bandwidth_bytes_per_s, "matmul", HOST_OVERHEAD_PER_OP_S)


def memory_term(size_bytes: float, gpu: GpuSpec, kernels: float = 1.0) -> Term:
    """``kernels`` kernels that only stream ``size_bytes`` through device memory."""
    return Term(0.0, size_bytes / gpu.streaming_bandwidth_bytes_per_s, host_s=kernels * HOST_OVERHEAD_PER_OP_S)


def memory_time_s(size_bytes: float, gpu: GpuSpec, eff: Efficiencies | None = None) -> float:
    """Time to stream ``size_bytes`` through device memory."""
    return memory_term(size_bytes, gpu).time_s(eff or Efficiencies())


def _peak_or_achieved(rate_key: str, gpu: GpuSpec) -> float:
    """The dense peak for ``rate_key``, or the measured rate of a device with no published peak
    (a calibration profile's CPU)."""
    try:
        return gpu.peak_rate(rate_key)
    except ConfigError:
        return gpu.achieved_rate(rate_key)


def _rate_key(op: MatmulOp, precision: Precision) -> str:
    if op.kind == "router":
        return "float32"  # MATMUL_KINDS: the router runs in fp32
    return precision.conv_dtype if op.kind == "conv" else precision.matmul_dtype


def _fp8_matmul(op: MatmulOp, gpu: GpuSpec, precision: Precision, micro_batch: int) -> tuple[list[Term], list[Term]]:
    """A linear's three GEMMs (each batched over the experts of a grouped GEMM) at the FP8 rate, with
    the same shape efficiency as 16-bit ones: FP8 operands (one byte), a 16-bit output."""
    m, e = op.m * micro_batch, precision.activation_bytes

    def gemm(rows: int, cols: int, depth: int, out_bytes: float = e) -> Term:
        return matmul_term(rows, cols, depth, op.batch, FP8_RATE_KEY, 1.0, gpu,
                           traffic_elements=float(rows) * depth + float(depth) * cols + out_bytes * float(rows) * cols)

    return [gemm(m, op.n, op.k)], [gemm(m, op.k, op.n), gemm(op.n, op.k, m, wgrad_output_bytes(precision))]


def fp8_cast_terms(op: OpSpec, gpu: GpuSpec, precision: Precision, micro_batch: int, *,
                   input_cast: bool = True, operands: tuple[str, ...] | None = None
                   ) -> tuple[list[Term], list[Term]]:
    """(forward, backward) cast kernels that feed one FP8 linear for a micro-batch
    (:func:`dpsim.workload.fp8.cast_plan`); empty for an op that stays in 16 bits. Inputs and
    output gradients are read in the activation dtype, weights in the parameter dtype; a weight
    the FSDP2 float8 all-gather already delivers in FP8 is not cast. ``input_cast`` False: the
    input's casts are another linear's (:func:`dpsim.workload.fp8.shares_compiled_input_cast`).
    ``operands``: only the casts of these operands (:class:`~dpsim.workload.fp8.CastPass`); ``None``: all."""
    recipe = precision.fp8
    if recipe is None or not runs_in_fp8(op, recipe):
        return [], []
    assert isinstance(op, MatmulOp)
    m = op.m * micro_batch
    numel = {"x": float(m) * op.k, "x_bwd": float(m) * op.k, "dy": float(m) * op.n,
             "w": float(op.n) * op.k, "w_bwd": float(op.n) * op.k, "w_t": float(op.n) * op.k}
    high = {"x": precision.activation_bytes, "x_bwd": precision.activation_bytes, "dy": precision.activation_bytes,
            "w": precision.weight_bytes, "w_bwd": precision.weight_bytes, "w_t": precision.weight_bytes}
    forward: list[Term] = []
    backward: list[Term] = []
    for cast in cast_plan(recipe, gpu.architecture, compiled=precision.compiled):
        if not input_cast and cast.operand in ("x", "x_bwd"):
            continue
        if operands is not None and cast.operand not in operands:
            continue
        per_element = cast_pass_bytes_per_element(recipe, cast, high[cast.operand])
        size = cast.casts * numel[cast.operand] * op.batch * per_element
        term = memory_term(size, gpu, kernels=cast.casts * cast_pass_kernels(cast))
        (backward if cast.backward else forward).append(term)
    return forward, backward


def _matmul(op: MatmulOp, gpu: GpuSpec, precision: Precision, micro_batch: int) -> tuple[list[Term], list[Term]]:
    if precision.fp8 is not None and runs_in_fp8(op, precision.fp8):
        return _fp8_matmul(op, gpu, precision, micro_batch)
    key = _rate_key(op, precision)
    e = precision.activation_bytes
    m = op.m * micro_batch
    simt_fp32 = key.startswith("float32") and not uses_tf32(key, gpu)
    winograd = WINOGRAD_SPEEDUP if (op.kind == "conv" and op.kernel == 3 and op.stride == 1 and simt_fp32) else 1.0
    # Every pass moves the input activation, the weights and the output once. A convolution's
    # GEMM operand is the implicit im2col matrix (m x k), which repeats each input pixel
    # kernel²/stride² times; it is gathered on chip from the input tensor, whose size
    # device memory sees.
    im2col = max(1.0, op.kernel * op.kernel / (op.stride * op.stride)) if op.kind == "conv" else 1.0
    traffic = float(m) * op.k / im2col + float(op.k) * op.n + float(m) * op.n
    forward = [matmul_term(m, op.n, op.k, op.batch, key, e, gpu, flops_divisor=winograd, traffic_elements=traffic)]
    # Input gradient (m x n)(n x k) and weight gradient (n x m)(m x k); the weight gradient's
    # output (k x n) in the bytes its epilogue moves (wgrad_output_bytes), the rest as forward.
    wgrad = traffic + (wgrad_output_bytes(precision) / e - 1.0) * float(op.k) * op.n
    backward = [matmul_term(m, op.k, op.n, op.batch, key, e, gpu, flops_divisor=winograd, traffic_elements=traffic),
                matmul_term(op.n, op.k, m, op.batch, key, e, gpu, flops_divisor=winograd, traffic_elements=wgrad)]
    return forward, backward


def wgrad_output_bytes(precision: Precision) -> float:
    """Bytes per weight element a weight-gradient GEMM's epilogue moves: the 16-bit gradient it
    writes (``activation_bytes``), or, with :attr:`Precision.fused_wgrad_accumulation`, the
    gradient buffer it reads and writes (``2 x grad_bytes``). TransformerEngine's ``Linear`` and
    ``GroupedLinear`` with ``fuse_wgrad_accumulation`` pass ``weight.main_grad`` as the GEMM's
    output with ``accumulate`` set, in the buffer's dtype (NVIDIA/TransformerEngine@c55e425ac575,
    v2.2, ``transformer_engine/pytorch/module/grouped_linear.py`` lines 256-304: cuBLAS
    ``beta = 1``), which Megatron-Core turns on from ``--gradient-accumulation-fusion``
    (``TEGroupedLinear``: ``fuse_wgrad_accumulation=self.config.gradient_accumulation_fusion``,
    NVIDIA/Megatron-LM ``megatron/core/extensions/transformer_engine.py``); under ``--bf16`` that
    buffer is fp32 (``accumulate_allreduce_grads_in_fp32``, ``megatron/training/arguments.py``).
    Invisible where the GEMM is compute-bound (a dense layer's thousands of tokens); it binds on
    the expert GEMMs of a fine-grained MoE at a small micro-batch, whose weight gradients reduce over a
    few hundred rows each (R061, 527 rows a local expert: 8 bytes of buffer traffic per
    2 x 527 FLOPs, below the H100's ridge). TransformerEngine skips the read on a step's first
    micro-batch (``is_first_microbatch``); charged every micro-batch (at most 1 / micro-batches
    of the read too much)."""
    if precision.fused_wgrad_accumulation:
        return 2.0 * precision.grad_bytes
    return float(precision.activation_bytes)


def _attention(op: AttentionOp, gpu: GpuSpec, precision: Precision, micro_batch: int) -> tuple[list[Term], list[Term]]:
    e = precision.activation_bytes
    heads = op.heads * micro_batch
    bw = gpu.streaming_bandwidth_bytes_per_s
    if op.fused:
        share = op.causal_share if op.causal else 1.0
        flops = op.flops_per_sample * micro_batch * share
        peak = _peak_or_achieved(precision.matmul_dtype, gpu) / FUSED_ATTENTION_SLOWDOWN.get(op.kernel, 1.0)
        # Each query block loops over the keys it attends to: a causal rank's share of them.
        keys = (op.seq if op.kv_seq is None else op.kv_seq) * share
        fwd_rate, bwd_rate = (peak * attention_fraction_of_peak(op.kernel, gpu.attention_architecture, backward=backward,
                                                                head_dim=op.head_dim, keys=keys, causal=op.causal)
                              for backward in (False, True))
        # Q, K, V read and O written once (K and V of the whole sequence on a context-parallel rank).
        tokens = op.seq if op.kv_seq is None else (op.seq + op.kv_seq) / 2.0
        io = float(tokens) * op.head_dim * heads * e
        return ([Term(flops / fwd_rate, 4 * io / bw, "attention", HOST_OVERHEAD_PER_OP_S)],
                [Term(FUSED_ATTENTION_BACKWARD_FLOPS * flops / bwd_rate, 8 * io / bw, "attention", HOST_OVERHEAD_PER_OP_S)])
    key, s, d = precision.matmul_dtype, op.seq, op.head_dim
    forward = [matmul_term(s, s, d, heads, key, e, gpu), matmul_term(s, d, s, heads, key, e, gpu)]
    backward = [matmul_term(s, d, s, heads, key, e, gpu), matmul_term(s, d, s, heads, key, e, gpu),
                matmul_term(s, s, d, heads, key, e, gpu), matmul_term(d, s, s, heads, key, e, gpu)]
    scores = float(s) * s * heads
    # Eager attention: scale, mask, softmax, dropout. Autocast runs softmax in fp32 (a cast
    # there and back); without autocast (16-bit parameters: apex O2, Megatron, FSDP) softmax
    # reads and writes the scores in their own dtype.
    if precision.autocast:
        fwd_passes = [(2, "act"), (1, "upcast"), (2, "f32"), (1, "upcast")]
        bwd_passes = [(2, "act"), (1, "upcast"), (3, "f32"), (1, "upcast")]
    else:
        fwd_passes = [(2, "act"), (2, "act")]
        bwd_passes = [(2, "act"), (3, "act")]
    if op.masked:
        fwd_passes.append((2, "act"))
        bwd_passes.append((2, "act"))
    if op.dropout:
        fwd_passes += [(2, "act"), (1, "byte")]
        bwd_passes += [(2, "act"), (1, "byte")]
    if op.softcap:
        # transformers' eager Gemma 2 attention: scores / cap, tanh, * cap (tanh's backward also reads
        # its saved output).
        fwd_passes += [(2, "act"), (2, "act"), (2, "act")]
        bwd_passes += [(2, "act"), (3, "act"), (2, "act")]
    # One kernel per listed pass group (scale, cast, softmax, mask, dropout, soft-cap).
    forward.append(memory_term(scores * sum(n * pass_bytes(c, precision) for n, c in fwd_passes), gpu,
                               kernels=len(fwd_passes)))
    backward.append(memory_term(scores * sum(n * pass_bytes(c, precision) for n, c in bwd_passes), gpu,
                                kernels=len(bwd_passes)))
    return forward, backward


def _memory(op: MemoryOp, gpu: GpuSpec, precision: Precision, micro_batch: int) -> tuple[list[Term], list[Term]]:
    per_sample = lambda passes: sum(n * pass_bytes(c, precision) for n, c in passes)  # noqa: E731
    # At least one kernel each way (an op with no traffic in a direction launches none).
    fwd_bytes = op.elements * micro_batch * per_sample(op.forward)
    bwd_bytes = op.elements * micro_batch * per_sample(op.backward) + op.fixed_elements * per_sample(op.fixed_backward)
    forward = memory_term(fwd_bytes, gpu, kernels=1.0 if fwd_bytes else 0.0)
    backward = memory_term(bwd_bytes, gpu, kernels=1.0 if bwd_bytes else 0.0)
    return [forward], [backward]


def op_terms(op: OpSpec, gpu: GpuSpec, precision: Precision, micro_batch: int) -> tuple[list[Term], list[Term]]:
    """(forward, backward) kernels of one op for a micro-batch of ``micro_batch`` samples."""
    if isinstance(op, MatmulOp):
        return _matmul(op, gpu, precision, micro_batch)
    if isinstance(op, AttentionOp):
        return _attention(op, gpu, precision, micro_batch)
    return _memory(op, gpu, precision, micro_batch)


def op_times(op: OpSpec, gpu: GpuSpec, precision: Precision, micro_batch: int,
             eff: Efficiencies | None = None) -> tuple[float, float]:
    """(forward, backward) seconds of one op for a micro-batch of ``micro_batch`` samples."""
    eff = eff or Efficiencies()
    forward, backward = op_terms(op, gpu, precision, micro_batch)
    return sum(t.time_s(eff) for t in forward), sum(t.time_s(eff) for t in backward)


def op_kind(op: OpSpec) -> str:
    """``matmul``, ``attention`` or ``memory``: the breakdown category of an op."""
    if isinstance(op, MatmulOp):
        return "matmul"
    if isinstance(op, AttentionOp):
        return "attention"
    return "memory"
