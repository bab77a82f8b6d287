"""DDP communication hooks: what each does to one gradient bucket, as kernels and collectives.

A hook (``DistributedDataParallel.register_comm_hook``) replaces DDP's all-reduce of a
bucket. Each one here follows torch's own implementation in
``torch/distributed/algorithms/ddp_comm_hooks/`` at v2.13.0 (git cf30153c4c13, the
version installed beside dpsim), read for what it launches and in which order:

* ``off``: no hook, DDP's built-in reduction. The division by the world size is fused into the
  copy of each gradient into the bucket (``at::mul_out`` in ``Reducer::mark_variable_ready_dense``,
  ``torch/csrc/distributed/c10d/reducer.cpp``), so the bucket is all-reduced as it is.
* ``allreduce`` (``default_hooks.allreduce_hook``, and what ``powerSGD_hook`` runs before
  ``start_powerSGD_iter``): ``tensor.div_(world_size)`` on the bucket, then the all-reduce.
* ``fp16-compress`` / ``bf16-compress`` (``default_hooks._compress_hook``):
  ``buffer.to(dtype).div_(world_size)`` (a cast, a no-op when the gradients already have
  that dtype, and a division), an all-reduce of the 16-bit copy, and ``decompress``: the
  result copied back into the bucket in place. The copy runs in a ``Future.then``
  callback, on a stream of its own once the all-reduce is done: nothing waits for it but
  the end of backward.
* ``powersgd`` (``powerSGD_hook.powerSGD_hook``, Vogels et al. 2019, arXiv:1905.13727)
  with torch's defaults (``use_error_feedback``, ``warm_start``, ``min_compression_rate``
  2, no batching of same-shape tensors). Per bucket: the error of the previous step is
  added in and the bucket cloned (error feedback); each gradient viewed as an
  ``n x m`` matrix (``n`` its first dimension) is compressed when
  ``(n + m)·r < n·m / 2`` (``_should_compress``, ``r = min(n, m, rank)``), the others
  (biases, norms: every vector) are concatenated and all-reduced uncompressed; per
  compressed matrix ``Q`` (``m x r``) is orthogonalised (Gram-Schmidt for ``r <= 2``, QR
  above) and ``P = M·Q`` computed; then, in ``Future.then`` callbacks: the uncompressed
  tensors divided and copied back, the ``P`` of every matrix all-reduced as one tensor,
  ``P`` orthogonalised, ``Q = Mᵀ·P`` computed and all-reduced, ``Q`` divided, ``M = P·Qᵀ``
  written back, the new error kept (``input - decompressed``), and
  ``torch.cuda.synchronize(device)``. That synchronisation (added by pytorch/pytorch#49435
  and kept since) blocks the backward thread inside the hook until the GPU has finished
  everything, so the backward after a PowerSGD bucket starts only once the bucket's three
  all-reduces are done: PowerSGD's communication does not overlap backward compute.
  Agarwal et al. 2022 ("On the utility of gradient compression in distributed training
  systems", MLSys, arXiv:2103.00543) measured PowerSGD running faster *without*
  overlap than with it. State kept on the GPU: the error (one gradient-sized tensor per
  bucket), ``P`` and ``Q`` (warm start), and while a bucket is compressed its clone.

Every kernel is costed by the roofline (:mod:`dpsim.workload.roofline`): its device-memory
traffic at the GPU's streaming bandwidth (what a STREAM kernel measures,
:attr:`dpsim.hardware.GpuSpec.streaming_bandwidth_bytes_per_s`, not the datasheet peak) times
the roofline's :data:`~dpsim.workload.roofline.MEMORY_EFFICIENCY`, never less than PyTorch's
per-kernel dispatch time
(:data:`~dpsim.workload.roofline.HOST_OVERHEAD_PER_OP_S`), and the PowerSGD matmuls as GEMMs
in the gradient dtype.
"""

from __future__ import annotations

import math

from dpsim.errors import ConfigError
from dpsim.frozen import frozen_dataclass
from dpsim.hardware import GpuSpec
from dpsim.workload.roofline import Efficiencies, Term, matmul_term, memory_term
from dpsim.workload.spec import DTYPE_SIZE_BYTES, ParamSpec

COMM_HOOKS: dict[str, str] = {
    "off": "no hook: DDP's own all-reduce of each bucket (the division fused into the copy into the bucket)",
    "allreduce": "allreduce_hook: divide the bucket, then all-reduce it (PowerSGD's warm-up)",
    "fp16-compress": "fp16_compress_hook: all-reduce an fp16 copy of each bucket (half the bytes of fp32)",
    "bf16-compress": "bf16_compress_hook: all-reduce a bf16 copy of each bucket (half the bytes of fp32)",
    "powersgd": "powerSGD_hook: low-rank P and Q all-reduced per matrix, vectors uncompressed; "
                "error feedback and warm start; blocks backward until each bucket is done",
}
"""The hooks by ``--comm-hook`` key."""

POWERSGD_MIN_COMPRESSION_RATE = 2
"""``PowerSGDState.min_compression_rate``'s default: a matrix is compressed only when its
low-rank form is less than half its size."""

POWERSGD_DEFAULT_START_ITER = 1000
"""``PowerSGDState.start_powerSGD_iter``'s default: vanilla all-reduce before it."""

_COMPRESS_DTYPES = {"fp16-compress": "float16", "bf16-compress": "bfloat16"}


def check_comm_hook(name: str) -> str:
    """Validate a ``--comm-hook`` key."""
    if not isinstance(name, str) or name not in COMM_HOOKS:
        raise ConfigError(f"--comm-hook: {name!r} is not known; choose one of {', '.join(COMM_HOOKS)}")
    return name


@frozen_dataclass
class HookStage:
    """One collective of a bucket's hook and the compute that precedes it on the GPU."""

    label: str
    """What the collective carries (``bucket``, ``uncompressed``, ``P``, ``Q``)."""
    before_s: float
    """Kernels run after the previous stage's collective (or, for the first, once the bucket
    is ready) and before this collective is launched."""
    size_bytes: float
    """All-reduce message size."""


@frozen_dataclass
class BucketHook:
    """What a hook does to one bucket."""

    stages: tuple[HookStage, ...]
    """Collectives in order, each launched after its ``before_s`` compute."""
    after_s: float
    """Kernels after the last collective (decompression), before the bucket is final."""
    blocking: bool
    """The hook synchronises the device: backward resumes only after ``after_s``."""
    state_bytes: float
    """Device memory the hook keeps for this bucket across steps (error feedback, P, Q)."""
    transient_bytes: float
    """Device memory alive while the bucket is in flight (compressed copy, clone)."""
    hook_s: float
    """All of the hook's compute for this bucket (``before_s`` of every stage + ``after_s``)."""

    @property
    def comm_bytes(self) -> float:
        """Bytes all-reduced for the bucket."""
        return sum(s.size_bytes for s in self.stages)


def _t(term: Term, eff: Efficiencies) -> float:
    return term.time_s(eff)


def _stream(size_bytes: float, gpu: GpuSpec, eff: Efficiencies, kernels: float = 1.0) -> float:
    """Element-wise kernels moving ``size_bytes`` through device memory."""
    return _t(memory_term(size_bytes, gpu, kernels=kernels), eff)


def _matrix_shape(p: ParamSpec) -> tuple[int, int]:
    # tensor.view(tensor.shape[0], -1): a 0-d tensor is one element.
    n = p.shape[0] if p.shape else 1
    return n, max(1, p.numel // max(1, n))


def powersgd_split(params: tuple[ParamSpec, ...], rank: int) -> tuple[list[tuple[int, int, int]], int]:
    """``([(n, m, r) per compressed matrix], uncompressed elements)`` of one bucket, as
    ``powerSGD_hook`` divides it (``_should_compress`` with ``min_compression_rate`` 2)."""
    compressed: list[tuple[int, int, int]] = []
    uncompressed = 0
    for p in params:
        n, m = _matrix_shape(p)
        r = min(n, m, rank)
        if (n + m) * r * POWERSGD_MIN_COMPRESSION_RATE < n * m:
            compressed.append((n, m, r))
        else:
            uncompressed += p.numel
    return compressed, uncompressed


def _orthogonalize_s(rows: int, r: int, element_bytes: float, gpu: GpuSpec, eff: Efficiencies,
                     half: bool) -> float:
    """``_orthogonalize`` of one ``rows x r`` matrix: Gram-Schmidt (per column a norm and a
    division, then a product, a sum, a product and a subtraction against the rest) when
    ``r <= 2`` or 16-bit, else ``torch.linalg.qr`` (a factorisation and the Q it forms)."""
    size = rows * r * element_bytes
    if r <= 2 or half:
        kernels = 2 * r + 4 * (r - 1)
        return _stream(size * (2 * r + 4 * (r - 1)), gpu, eff, kernels=kernels)
    return _stream(4 * size, gpu, eff, kernels=2)


def _gemm_s(m: int, n: int, k: int, rate_key: str, element_bytes: float, gpu: GpuSpec, eff: Efficiencies) -> float:
    return _t(matmul_term(m, n, k, 1, rate_key, element_bytes, gpu), eff)


def _rate_key(grad_dtype: str) -> str:
    """The matmul rate of the gradient dtype: fp32 GEMMs at full precision, PyTorch's default
    (``torch.backends.cuda.matmul.allow_tf32 = False``)."""
    return "float32-highest" if grad_dtype == "float32" else grad_dtype


def bucket_hook(hook: str, params: tuple[ParamSpec, ...], grad_dtype: str, gpu: GpuSpec, *,
                powersgd_rank: int = 1, eff: Efficiencies | None = None) -> BucketHook:
    """What ``hook`` does to the bucket of ``params`` (gradients in ``grad_dtype``) on ``gpu``
    (see the module docstring)."""
    check_comm_hook(hook)
    eff = eff or Efficiencies()
    g = DTYPE_SIZE_BYTES[grad_dtype]
    size = float(sum(p.numel for p in params) * g)
    if hook == "off":
        return BucketHook(stages=(HookStage(label="bucket", before_s=0.0, size_bytes=size),), after_s=0.0,
                          blocking=False, state_bytes=0.0, transient_bytes=0.0, hook_s=0.0)
    if hook == "allreduce":
        div = _stream(2 * size, gpu, eff)
        return BucketHook(stages=(HookStage(label="bucket", before_s=div, size_bytes=size),), after_s=0.0,
                          blocking=False, state_bytes=0.0, transient_bytes=0.0, hook_s=div)
    if hook in _COMPRESS_DTYPES:
        c = DTYPE_SIZE_BYTES[_COMPRESS_DTYPES[hook]]
        small = size / g * c
        cast = 0.0 if grad_dtype == _COMPRESS_DTYPES[hook] else _stream(size + small, gpu, eff)
        before = cast + _stream(2 * small, gpu, eff)
        after = _stream(small + size, gpu, eff)
        return BucketHook(stages=(HookStage(label="bucket", before_s=before, size_bytes=small),), after_s=after,
                          blocking=False, state_bytes=0.0, transient_bytes=small, hook_s=before + after)
    if isinstance(powersgd_rank, bool) or not isinstance(powersgd_rank, int) or powersgd_rank < 1:
        raise ConfigError(f"--powersgd-rank: {powersgd_rank!r} is not valid; expected an integer >= 1")
    half = g == 2
    key = _rate_key(grad_dtype)
    compressed, uncompressed = powersgd_split(params, powersgd_rank)
    u_bytes = float(uncompressed * g)
    p_bytes = float(sum(n * r for n, _, r in compressed) * g)
    q_bytes = float(sum(m * r for _, m, r in compressed) * g)
    # Error feedback (add, clone), the concatenation of the uncompressed tensors, then per
    # matrix: orthogonalise Q, P = M Q.
    compress = _stream(3 * size, gpu, eff) + _stream(2 * size, gpu, eff) + _stream(2 * u_bytes, gpu, eff)
    compress += sum(_orthogonalize_s(m, r, g, gpu, eff, half) + _gemm_s(n, r, m, key, g, gpu, eff)
                    for n, m, r in compressed)
    # Uncompressed: divided, copied back tensor by tensor.
    n_vectors = len(params) - len(compressed)
    unpack = _stream(2 * u_bytes, gpu, eff) + (_stream(2 * u_bytes, gpu, eff, kernels=n_vectors) if n_vectors else 0.0)
    # Orthogonalise P, Q = Mᵀ P.
    compute_q = sum(_orthogonalize_s(n, r, g, gpu, eff, half) + _gemm_s(m, r, n, key, g, gpu, eff)
                    for n, m, r in compressed)
    # Q divided, M = P Qᵀ, the new error = clone - decompressed.
    decompress = _stream(2 * q_bytes, gpu, eff) + sum(_gemm_s(n, m, r, key, g, gpu, eff) for n, m, r in compressed)
    decompress += _stream(3 * size, gpu, eff)
    stages = (HookStage(label="uncompressed", before_s=compress, size_bytes=u_bytes),
              HookStage(label="P", before_s=unpack, size_bytes=p_bytes),
              HookStage(label="Q", before_s=compute_q, size_bytes=q_bytes))
    return BucketHook(stages=stages, after_s=decompress, blocking=True, state_bytes=size + p_bytes + q_bytes,
                      transient_bytes=size + u_bytes,
                      hook_s=compress + unpack + compute_q + decompress)


def compression_ratio(params: tuple[ParamSpec, ...], rank: int) -> float:
    """Elements before / after PowerSGD's compression of ``params`` (``PowerSGDState.compression_stats``)."""
    compressed, uncompressed = powersgd_split(params, rank)
    before = sum(p.numel for p in params)
    after = uncompressed + sum((n + m) * r for n, m, r in compressed)
    return before / after if after else math.inf
