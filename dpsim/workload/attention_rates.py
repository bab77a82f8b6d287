"""The rate a fused attention kernel reaches: a small mechanistic model fitted on published kernel benchmarks.

A FlashAttention-style kernel gives each block of queries to one thread block, which loads its
queries, loops over the key/value blocks it attends to (two GEMMs and an online softmax per
block) and writes its output. Its achieved rate, as a fraction of the GPU's dense tensor-core
peak, is modelled as the product of three terms:

* **a ceiling** per kernel family and GPU generation (:attr:`AttentionRateModel.ceilings`): what
  the kernel reaches on long sequences at a large head dim. FlashAttention-2 is written for
  Ampere's ``mma.sync`` instructions; on Hopper it still issues them and reaches a smaller share
  of a peak that needs ``wgmma`` (Shah et al. 2024, "FlashAttention-3", arXiv:2407.08608,
  abstract: "only 35% utilization on the H100"), while FlashAttention-3 and cuDNN's fused
  attention are written for Hopper;
* **the head dim**, ``d / (d + d0)``: per score the GEMMs do ``4d`` FLOPs and the softmax one
  exponential on the much slower multi-function units, so the exponentials' share of the time
  falls as ``1/d`` (FlashAttention-3, Sec. 3: the H100 SXM5 does 989 TFLOPS of matmul but 3.9
  TFLOPS of exponentials);
* **the key length** each query block loops over, ``L / (L + s0)``: loading the queries, the
  final rescale and the output write are a fixed cost per query block that a longer loop
  amortises. A causal mask halves the loop (``L`` is ``causal_share`` of the keys) and adds one
  masked diagonal block per query block (:attr:`AttentionRateModel.causal_block_tokens`).

The backward pass (five GEMMs, FLOPs counted as 2.5 forward passes, the convention of the
benchmarks) runs at :attr:`FamilyRates.backward_share` of the forward's ceiling, with its own ``s0``.

The numbers in :data:`FITTED` are the fit on every row of ``tests/data/attention_kernel_rates.csv``
(published FlashAttention-2/3 and cuDNN benchmarks on A100, RTX 4090, H100, B200, GB200 and GB300,
each row cited); ``python validation/accuracy_attention.py`` refits them and reports the error leaving
each source out. cuDNN on Blackwell has rows from two sources (B200 forward, GB200 forward and
backward), and on Blackwell Ultra from one (GB300 forward and backward): each generation's ceiling and
backward share are fitted alone, with Hopper cuDNN's key-length terms and its head-dim term scaled by
:data:`HEAD_DIM_HALF_SCALE` (doubled on Blackwell, whose exponential units did not grow with the tensor
cores; Hopper's on Blackwell Ultra, which doubles them). Generations with no published row (Volta,
Turing, AMD; Blackwell and Blackwell Ultra for every kernel but cuDNN) and PyTorch's memory-efficient
kernel are costed as FlashAttention-2 on Hopper: a kernel not written for the architecture it runs on
(:func:`kernel_pair`). A GPU's generation here is :attr:`dpsim.hardware.GpuSpec.attention_architecture`.
"""

from __future__ import annotations

from dataclasses import field
from dpsim.errors import ConfigError
from dpsim.frozen import frozen_dataclass

FAMILIES = ("flash2", "flash3", "cudnn")
"""Kernel families the model knows: FlashAttention-2 (PyTorch SDPA's flash backend), FlashAttention-3
(Hopper only) and cuDNN's fused attention (SDPA's and TransformerEngine's cuDNN backend)."""

CEILING_KEYS = ("flash2@ampere", "flash2@ada", "flash2@hopper", "flash3@hopper", "cudnn@hopper", "cudnn@blackwell",
                "cudnn@blackwell-ultra", "flash2@hopper-h20", "flash3@hopper-h20", "cudnn@hopper-h20")
"""``family@generation`` pairs with a published benchmark (:attr:`AttentionRateModel.ceilings`)."""

H20_TENSOR_OVER_CUDA_CORE = (148.0 / 44.0) / (989.0 / 67.0)
"""The H20's dense FP16 tensor-core rate over its FP32 CUDA-core rate, as a share of the H100 SXM's: 148 / 44
TFLOPS (zangshuxian.com/new/674733024499207168, the ``h20`` preset's source) against 989 / 67 (NVIDIA's
H100 datasheet, the ``h100`` preset's): 0.23. The H20 is a GH100 with its tensor cores capped; the work
beside them (exponentials on the special function units, the softmax rescale on the CUDA cores) runs
at the rate of its SMs' other units, so it weighs 0.23 of what it weighs on an H100 against a tensor FLOP."""

HEAD_DIM_HALF_SCALE = {"blackwell": 2.0, "blackwell-ultra": 1.0, "hopper-h20": H20_TENSOR_OVER_CUDA_CORE}
"""How many times a generation's ``d0`` (:attr:`FamilyRates.head_dim_half`) exceeds the family's
fitted one. ``d0`` is where the exponentials' time equals the GEMMs' (per score ``4d`` tensor-core
FLOPs against one exponential), so it scales with tensor-core FLOPs per exponential: on Blackwell
"tensor core throughput doubles while other functional units (shared memory bandwidth, exponential
units) scale more slowly or remain unchanged" (Zadouri et al. 2026, "FlashAttention-4",
arXiv:2603.05451, abstract; www.together.ai/blog/flashattention-4: the SFU count is unchanged
from H100 to B200 while BF16 tensor-core throughput goes from 1 to 2.25 PFLOPS). The one
same-source check, cuDNN on B200 at 1k non-causal tokens (flash-attention PR #2605, rows A174 and
A184 of ``tests/data/attention_kernel_rates.csv``), runs head dim 128 1.366x faster than 64:
``d/(d + 2 d0)`` gives 1.37 with the fitted cuDNN ``d0``, ``d/(d + d0)`` 1.23.

Blackwell Ultra (B300, GB300: :attr:`dpsim.hardware.GpuSpec.attention_generation`) doubles the
exponential units' throughput and keeps Blackwell's dense 16-bit peak (NVIDIA Technical Blog,
"Making Softmax More Efficient with NVIDIA Blackwell Ultra"; verda.com/blog/gb300-nvl72-architecture,
per-GPU table: 10.7 against 5 TeraExponentials/s, BF16 2.5 PFLOPS on both GB300 and GB200), so its
tensor-core FLOPs per exponential return to about Hopper's (GB300 2500 / 10.7 = 234, H100 989 / 3.9
= 254, GB200 2500 / 5 = 500): the family's ``d0`` unscaled.

The H20 (``hopper-h20``) does :data:`H20_TENSOR_OVER_CUDA_CORE` = 0.23 of the H100's tensor-core FLOPs per
exponential (its special function units scale with its CUDA cores, not with its capped tensor cores), so
its ``d0`` is the family's times that, and so are its key-length halves (:data:`KEYS_HALF_SCALE`)."""

KEYS_HALF_SCALE = {"hopper-h20": H20_TENSOR_OVER_CUDA_CORE}
"""How many times a generation's key-length halves ``s0`` (:attr:`FamilyRates.forward_keys_half`,
:attr:`FamilyRates.backward_keys_half`) exceed the family's fitted ones. ``s0`` is a query block's fixed
cost (loading its queries, the final rescale, the output write) in key tokens of tensor-core work, so it
scales with tensor-core FLOPs per unit of that other work: on the H20 the tensor cores are capped and the
rest is not (its loads even run at 2x an H100 SM's share of device bandwidth, 4.0 TB/s over 78 SMs
against 3.35 over 132; the CUDA-core ratio is taken, the smaller gain). Its ceilings are fitted on its own
rows (a published H20 benchmark, Dao-AILab/flash-attention issue #1310: forward, 2048 tokens), where every
kernel reaches 1.5-1.7x the share of its peak that the H100's fit gives it. The masked diagonal block
(:attr:`AttentionRateModel.causal_block_tokens`) is tensor-core work and is not scaled."""

FALLBACK = "flash2@hopper"
"""The pair every unbenchmarked one is costed as: FlashAttention-2 on a generation it was not written for."""


@frozen_dataclass
class FamilyRates:
    """The fitted shape terms of one kernel family (its ceilings are per generation)."""

    backward_share: float
    """Backward ceiling / forward ceiling."""
    head_dim_half: float
    """``d0``: the head dim at which the exponentials halve the rate."""
    forward_keys_half: float
    """``s0`` of the forward: the key length per query block at which the fixed per-block cost halves the rate."""
    backward_keys_half: float
    """``s0`` of the backward."""


@frozen_dataclass
class AttentionRateModel:
    """Every fitted term of the attention rate model (see the module docstring)."""

    ceilings: dict[str, float]
    """Forward rate / dense peak at long keys and large head dim, per ``family@generation``
    (:data:`CEILING_KEYS`)."""
    families: dict[str, FamilyRates]
    """Shape terms per kernel family (:data:`FAMILIES`)."""
    causal_block_tokens: float
    """Extra key tokens of work per query block under a causal mask (the masked diagonal block)."""
    backward_shares: dict[str, float] = field(default_factory=dict)
    """Backward ceiling / forward ceiling of a ``family@generation`` fitted on its own backward rows
    (a pair of ``validation/accuracy_attention.py``'s ``CEILING_ONLY``), in place of its family's
    :attr:`FamilyRates.backward_share`."""

    def fraction_of_peak(self, pair: str, backward: bool, head_dim: int, keys: float, causal: bool) -> float:
        """Achieved rate / dense peak of the kernel ``pair`` (``family@generation``, one of
        :data:`CEILING_KEYS`) for query blocks that loop over ``keys`` key tokens each (already
        halved by a causal mask)."""
        family, generation = pair.split("@")
        rates = self.families[family]
        share = self.backward_shares.get(pair, rates.backward_share)
        ceiling = self.ceilings[pair] * (share if backward else 1.0)
        half = (rates.backward_keys_half if backward else rates.forward_keys_half) * KEYS_HALF_SCALE.get(generation, 1.0)
        if causal:
            half += self.causal_block_tokens
        d0 = rates.head_dim_half * HEAD_DIM_HALF_SCALE.get(generation, 1.0)
        return ceiling * head_dim / (head_dim + d0) * keys / (keys + half)


FITTED = AttentionRateModel(
    ceilings={"flash2@ampere": 0.6042, "flash2@ada": 0.9739, "flash2@hopper": 0.3421, "flash3@hopper": 0.8879,
              "cudnn@hopper": 0.7018, "cudnn@blackwell": 0.923, "cudnn@blackwell-ultra": 0.9725,
              "flash2@hopper-h20": 0.5489, "flash3@hopper-h20": 0.9452, "cudnn@hopper-h20": 0.9433},
    families={
        "flash2": FamilyRates(backward_share=0.9363, head_dim_half=3.373, forward_keys_half=42.92,
                              backward_keys_half=275.4),
        "flash3": FamilyRates(backward_share=0.9347, head_dim_half=45.9, forward_keys_half=237.8,
                              backward_keys_half=404.1),
        "cudnn": FamilyRates(backward_share=0.977, head_dim_half=37.41, forward_keys_half=99.73,
                             backward_keys_half=304.1),
    },
    causal_block_tokens=133.6,
    backward_shares={"cudnn@blackwell": 0.9653, "cudnn@blackwell-ultra": 0.7925},
)
"""The fit on all 236 rows of ``tests/data/attention_kernel_rates.csv`` (``python
validation/accuracy_attention.py`` prints these numbers, ``tests/test_attention_rates.py`` checks they
still match it): median |error| 5.0 %, worst 31 % (cuDNN on B200, causal at 512 tokens); each source
predicted from the others, median 10.1 %, worst 49 % (the RTX 4090 rows, the only Ada source: with it
out, its ceiling has nothing to go on). The H20's three pairs are fitted on their 12 forward rows
(flash-attention issue #1310, 2048 tokens, head dims 64 and 128, causal or not) by their ceilings alone,
with the H100's shape terms scaled by :data:`H20_TENSOR_OVER_CUDA_CORE`: every row within -4 to +7.5 %.
With those rows left out the H20 is costed with the H100's ceilings and that scaling alone, 26 % under
(median; worst 40 %, FlashAttention-2): the scaling is not the whole of it. ``cudnn@blackwell`` is fitted alone, its ceiling on its 21
forward rows and its backward share on its 10 backward rows (B200: Dao-AILab/flash-attention pull
request #2605; GB200: NVIDIA/cudnn-frontend's cuDNN 9.19 training benchmark), the shared terms held:
GB200's long forward rows come out 16-18 % under, B200's short causal ones up to 31 % over (a steeper
key-length ramp than Hopper's that one ceiling cannot follow). ``cudnn@blackwell-ultra`` is fitted the
same way on GB300's 10 forward and 10 backward rows (the same cuDNN 9.19 benchmark): -8 to +3 % from 4k
to 32k tokens, over by 11-21 % at 2k (the same too-shallow ramp). Its backward share, 0.79 against
Blackwell's 0.97, is where doubling the exponential units gains the backward less than the forward (it
does 2.5 forward passes of FLOPs per exponential) while the head-dim term is shared by both directions.
Leaving the GB300 rows out, ``cudnn@blackwell-ultra`` takes ``cudnn@blackwell``'s ceiling and backward
share (``validation/accuracy_attention.py``'s ``STAND_IN``): GB300's forward comes out within 15 %
(median 9.5 %; costed as a GB200 it was 25 % under), its backward 8-33 % over. Only head dim 128 is
fitted: the same benchmark's gpt-oss (head dim 64, window 1024) and DeepSeek-V3 (192/128) shapes gain
1.09-1.18x forward from GB200 to GB300 where this model gives 1.44x at 64 and 1.25x at 160
(``validation/large_model_runs.md``).
FlashAttention-2's head dim term is near zero: on Hopper it is slower at head dim 256 than at 128
(register pressure), which ``d / (d + d0)`` cannot follow, so the fit flattens it."""


def check_attention_kernel_on_gpu(kernel: str, gpu) -> None:
    """Refuse ``--attention-kernel flash3`` on a GPU it does not run on: FlashAttention-3 is built on
    Hopper's ``wgmma`` and TMA (Dao-AILab/flash-attention README, "FlashAttention-3 beta release":
    "optimized for Hopper GPUs (e.g. H100)", "Requirements: H100 / H800 GPU, CUDA >= 12.3"), so
    elsewhere the run could not have used it.
    (:func:`kernel_pair` still costs an op that names it as FlashAttention-2 off Hopper, for models
    built with it.)"""
    if kernel == "flash3" and gpu.architecture != "hopper":
        raise ConfigError(f"--attention-kernel: 'flash3' (FlashAttention-3) runs on Hopper GPUs (H100, H200, H800, "
                          f"H20) only, not on {gpu.name}; use sdpa (FlashAttention-2) or cudnn")


def kernel_pair(kernel: str, architecture: str) -> str:
    """The ``family@generation`` (:data:`CEILING_KEYS`) that costs an
    :class:`~dpsim.workload.spec.AttentionOp` of ``kernel`` on a GPU of ``architecture``. ``sdpa``
    is PyTorch's flash backend, FlashAttention-2 (``triton`` and ``flash1`` are costed from it by
    :mod:`dpsim.workload.roofline`); ``flash3`` needs Hopper's ``wgmma`` and TMA, and cuDNN's fused
    attention has a published rate on Hopper, Blackwell and Blackwell Ultra only, so elsewhere
    FlashAttention-2 stands in; a generation with no published FlashAttention-2 rate (Volta and Turing,
    which run SDPA's memory-efficient kernel, Blackwell, Blackwell Ultra, AMD) is costed as
    :data:`FALLBACK`. ``architecture`` is :attr:`dpsim.hardware.GpuSpec.attention_architecture`."""
    family = {"sdpa": "flash2", "triton": "flash2", "flash1": "flash2"}.get(kernel, kernel)
    for pair in (f"{family}@{architecture}", f"flash2@{architecture}"):
        if pair in CEILING_KEYS:
            return pair
    return FALLBACK


def attention_fraction_of_peak(kernel: str, architecture: str, *, backward: bool, head_dim: int,
                               keys: float, causal: bool, model: AttentionRateModel = FITTED) -> float:
    """Achieved rate / dense peak of a fused attention kernel (see the module docstring); ``keys``
    is the key length each query attends to (the whole sequence, or its causal share)."""
    return model.fraction_of_peak(kernel_pair(kernel, architecture), backward, head_dim, keys, causal)
