"""``torch.compile`` (TorchInductor): the element-wise chains between GEMMs fused into one kernel.

Inductor keeps matmuls and fused attention as library calls (cuBLAS, SDPA's flash kernels)
and generates Triton kernels for the rest, fusing pointwise and reduction operators that
feed each other into one kernel so that intermediates stay on chip (Ansel et al. 2024,
"PyTorch 2: Faster Machine Learning Through Dynamic Python Bytecode Transformation and Graph
Compilation", ASPLOS '24, the TorchInductor section: its loop-level IR and the scheduler's
fusion of nodes). So a *chain* -- the memory-bound ops of a layer between two GEMM/attention
ops (norms, activations, rotary, residual adds, dropout, autocast's casts) -- becomes one
kernel that reads the chain's external inputs once and writes its external outputs once,
instead of one pass per eager kernel (:func:`fused_chain_bytes`). GEMMs and attention cost
exactly as in eager mode.

The backward is compiled the same way (AOTAutograd traces forward and backward as one
joint graph ahead of time: Ansel et al., the AOTAutograd section), so a chain's backward
is one kernel too, over its own passes. **Saved tensors and recompute.** The partitioner
Inductor uses (``min_cut_rematerialization_partition``: "Partitions the joint graph such
that the backward recomputes the forward. Recomputing helps in trading off memory bandwidth
with computation", functorch.compile documentation) saves a fused region's inputs and
recomputes its cheap pointwise intermediates inside the backward kernel. That kernel reads
the saved inputs anyway (the backward passes count them as "what it saved"), and the
recomputation is arithmetic on data already on chip, so no traffic is added for it. What it
saves would also lower the activation memory (a chain's inputs instead of its eager
intermediates: SwiGLU's gate and up rather than gate, up, silu(gate) and the product); that is
not modelled: memory counts the eager saved tensors, an upper bound.

FP8: torchao's float8 training is run under torch.compile, which fuses its scaling and
casting kernels (torchtitan docs/float8.md: ``--compile.enable`` is required for it; the
torchao float8 README states its speedups "with torch.compile on"); torchao's own roofline
models the compiled case with ``fuse_with_prev``, which drops the separate amax read of an
activation or gradient cast (fused into the kernel that produced the tensor) and keeps
the cast's read and FP8 write (pytorch/ao torchao/testing/training/roofline_utils.py,
``get_tensor_memory_traffic_ovhd_s``). Weight casts stay kernels of their own (their
amax reduces a parameter, not a chain's output): :func:`dpsim.workload.fp8.compiled_cast_amax_reads`.
With one scale per tensor (tensorwise) the joint graph's repeated casts of the same tensor are
one kernel writing both FP8 layouts (:func:`dpsim.workload.fp8.cast_plan`).

Simplifications, stated: a chain never crosses a layer's boundary (layers are a catalog's or a
trace's modules, so a residual add at the end of one module and the norm at the start of the
next stay two kernels: conservative); without tensor identities (a :class:`MemoryOp` carries
pass counts, not tensors) the chain is taken as a pipeline in which each op reads its
predecessor's output, so that output is internal and every other read is external; only the
chain's last output is written (a residual stream that also leaves the chain earlier, e.g.
``h = x + attn`` read by the next block, is not charged a write: optimistic by one tensor
per such chain); a kernel's dispatch costs :data:`dpsim.workload.roofline.HOST_OVERHEAD_PER_OP_S`
as in eager mode (Inductor's Python wrapper still launches each kernel; CUDA graphs,
``mode="reduce-overhead"``, are not modelled). Saved activations are not changed
(:mod:`dpsim.memory` keeps the eager count).
"""

from __future__ import annotations

from dpsim.workload.precision import Precision
from dpsim.workload.roofline import pass_bytes
from dpsim.workload.spec import MemoryOp, OpSpec

OUTPUT_CLASSES = ("act", "stream", "f32", "cast", "upcast")
"""Byte classes that can be an op's output: by type promotion the widest of them is (a ``cast``
writes the 16-bit ``act`` copy, an ``upcast`` an fp32 one)."""


def chains(ops: tuple[OpSpec, ...]) -> list[tuple[OpSpec, ...]]:
    """``ops`` split into runs: each GEMM or attention op alone, and each maximal run of
    consecutive :class:`MemoryOp` (a chain Inductor fuses)."""
    out: list[tuple[OpSpec, ...]] = []
    run: list[OpSpec] = []
    for op in ops:
        if isinstance(op, MemoryOp):
            run.append(op)
            continue
        if run:
            out.append(tuple(run))
            run = []
        out.append((op,))
    if run:
        out.append(tuple(run))
    return out


def _output_bytes(cls: str, precision: Precision) -> float:
    """Bytes per element of an output of class ``cls`` (:data:`OUTPUT_CLASSES`)."""
    if cls == "cast":
        return float(precision.activation_bytes)
    if cls == "upcast":
        return 4.0
    return pass_bytes(cls, precision)


def _pass_traffic(op: MemoryOp, passes, precision: Precision, micro_batch: int) -> tuple[float, float]:
    """(all bytes, bytes of its one output) of ``op``'s ``passes`` for a micro-batch."""
    per_element = sum(n * pass_bytes(c, precision) for n, c in passes)
    total = op.elements * micro_batch * per_element
    if not total:
        return 0.0, 0.0
    widest = max((_output_bytes(c, precision) for _, c in passes if c in OUTPUT_CLASSES), default=0.0)
    return total, min(total, op.elements * micro_batch * widest)


def fused_chain_bytes(chain: tuple[MemoryOp, ...], precision: Precision, micro_batch: int, *,
                      backward: bool) -> float:
    """Device-memory bytes of one fused kernel running ``chain`` (forward, or backward in reverse
    order): the first op's reads, each later op's reads beyond its predecessor's output (the
    external inputs), and the last op's output (module docstring). Never more than the eager passes."""
    traffic = [_pass_traffic(op, op.backward if backward else op.forward, precision, micro_batch) for op in chain]
    if backward:
        traffic.reverse()
    traffic = [t for t in traffic if t[0]]
    if not traffic:
        return 0.0
    total, written = traffic[0]
    fused = total - written
    for (prev_total, prev_written), (cur_total, cur_written) in zip(traffic, traffic[1:]):
        fused += max(0.0, (cur_total - cur_written) - prev_written)
    fused += traffic[-1][1]
    eager = sum(t for t, _ in traffic)
    return min(fused, eager)


def fixed_backward_bytes(chain: tuple[MemoryOp, ...], precision: Precision) -> float:
    """Bytes of the per-micro-batch backward passes (:attr:`MemoryOp.fixed_backward`) of ``chain``'s
    ops (an embedding's dense weight gradient), which do not scale with the chain's tensors and
    are charged as in eager mode."""
    return sum(op.fixed_elements * sum(n * pass_bytes(c, precision) for n, c in op.fixed_backward) for op in chain)
