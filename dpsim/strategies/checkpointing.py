"""Activation checkpointing: one setting (``--recompute``, ``--recompute-every``) for every layout.

Data parallelism alone (every ``--strategy``, FSDP included) and tensor/pipeline layouts
read the same :class:`CheckpointPolicy` and ask this module the same two questions per
layer: what it keeps for backward and what share of its forward re-runs before its
backward. A *checkpointed unit* is a block (the model's ``LayerSpec.unit``; with data
parallelism alone the ``--fsdp-unit``), never the root layers.

- ``full``: a checkpointed unit keeps only its input; its whole forward re-runs before its
  backward, while one unit's full activations are alive again (Korthikanti et al. 2022,
  "Reducing Activation Recomputation in Large Transformer Models", arXiv:2205.05198, Sec.
  5). ``--recompute-every k`` checkpoints every k-th block only, the k-th, 2k-th, ... in
  forward order (torchtitan's layer-level selective checkpointing,
  ``selective_ac_option = k``: ``_apply_layer_sac`` in
  ``torchtitan/distributed/activation_checkpoint.py`` wraps a block when its 1-based count is
  a multiple of k); the other blocks keep everything.
- ``selective``: Megatron's ``--recompute-granularity selective``: the attention core (the
  score and context matmuls, softmax, dropout) is dropped and recomputed, everything else
  kept (Korthikanti et al. 2022, Sec. 5); with fused attention there are no score matrices
  to drop, only the recomputation remains.
- ``op``: op-level selective checkpointing: every block is wrapped with a policy that saves
  the outputs of its matmuls (``aten.mm``) and of fused attention (the SDPA kernels, which
  also save their log-sum-exp statistics) and recomputes every other op (norms,
  activations, rotary, residual adds, casts; eager attention's batched matmuls) from the
  block's input (torchtitan's ``selective_ac_option = "op"``: ``_apply_op_sac`` with
  ``CheckpointPolicy.MUST_SAVE`` for the save list, ``PREFER_RECOMPUTE`` otherwise, through
  ``torch.utils.checkpoint.create_selective_checkpoint_contexts``). A layer known only by its
  FLOPs (no ops) keeps everything and recomputes nothing.
- ``megatron``: Megatron-Core's ``--recompute-granularity selective --recompute-modules
  layernorm moe_act`` (both "use output-discarding checkpointing",
  ``TransformerConfig.recompute_modules``): the norms' and the experts' activation's outputs
  are dropped and recomputed, and each layer keeps what Megatron-Core's modules save for their
  backward (:func:`megatron_saved_bytes_per_sample`): what ``op`` keeps, less the output of a
  layer's last GEMM (it feeds the residual add, which saves nothing) and of the routed experts'
  second GEMM (Megatron-Core v0.13 moved the router probabilities from the unpermutation into
  the activation, so unpermuting saves nothing: ``megatron/core/transformer/moe/README.md``,
  "Memory efficient token permutation"), plus the permuted tokens the experts' first GEMM
  reads (the dispatch all-to-all's output, which no recomputation rebuilds), the input of a dense
  MLP's (or the shared experts') second GEMM (only the routed experts' activation is recomputed),
  and each sub-block's own input, which its norm's output-discarding checkpoint keeps (the MLP's
  too: ``_forward_pre_mlp_layernorm`` in ``megatron/core/transformer/transformer_layer.py``,
  NVIDIA/Megatron-LM@d98e8a64ddf3). Its recomputation
  time is counted as ``op``'s (every element-wise op, an upper bound of the norms and the
  activation).
- ``deepseek``: DeepSeek-V3's (arXiv:2412.19437 Sec. 3.2.3 and 3.3.3): every RMSNorm and the MLA
  up-projections are recomputed in backward, "thereby eliminating the need to persistently store
  their output activations", and the MoE SwiGLU's output is recomputed from its cached input
  (:func:`deepseek_saved_bytes_per_sample`). What it keeps per layer: the layer's input (the
  residual stream the norm re-runs from), the MLA latents (the outputs of the down-projections,
  which the recomputed norms and up-projections re-run from), the attention output (the input of
  the linear after attention, in DeepSeek's E5M6 under FP8) with its softmax statistics, the router
  output, the dispatched tokens the experts' first GEMM reads and that GEMM's output (the SwiGLU
  input), the shared expert's SwiGLU input, and for a dense FFN its SwiGLU input and the down
  projection's input. Under an FP8 recipe the linears' inputs and the MoE SwiGLU inputs are cached
  as the FP8 copies the GEMMs read, one byte an element plus the recipe's scales ("it is a natural
  choice to cache activations in FP8 format for the backward pass of the Linear operator"; the
  attention output is re-tiled 1x128 -> 128x1 in backward, so one copy is cached); without one, at
  2 bytes. Its recomputation time is counted as ``megatron``'s (every element-wise op; the
  up-projection GEMMs' re-run is not charged).
- ``moe``: Megatron-Core's ``--recompute-modules moe layernorm``: each MoE layer is
  checkpointed whole ("moe": recompute the MoE layer, with normal checkpointing): it keeps
  only its input and re-runs its forward, the router, the dispatch all-to-all, the experts and
  the combine all-to-all, before its backward, one MoE layer's activations alive again
  meanwhile; every other layer as ``megatron``. Layouts only (the all-to-all it re-runs is
  expert parallelism's).

Saved matmul outputs are counted at 2 bytes per element (16-bit activations), like the
catalog's activation estimates; :mod:`dpsim.memory` doubles both under fp32 compute.
"""

from __future__ import annotations

from collections.abc import Sequence

from dpsim.errors import ConfigError
from dpsim.frozen import frozen_dataclass
from dpsim.hardware import GpuSpec
from dpsim.strategies.tensor import TpLayer, layer_kind, tp_model
from dpsim.workload.fp8 import FP8_BYTES
from dpsim.workload.precision import Precision
from dpsim.workload.roofline import Efficiencies, op_kind, op_terms
from dpsim.workload.spec import AttentionOp, LayerSpec, MatmulOp, ModelSpec

RECOMPUTE: dict[str, str] = {
    "off": "keep every activation",
    "selective": "recompute the attention core only (Korthikanti et al. 2022)",
    "op": "keep matmul and attention outputs, recompute the other ops of each block (torchtitan's op-level "
          "selective checkpointing)",
    "full": "keep each block's input, recompute its forward before its backward (every --recompute-every-th block)",
    "megatron": "keep what Megatron-Core's modules save, recompute the norms and the experts' activation "
                "(--recompute-modules layernorm moe_act)",
    "moe": "keep each MoE layer's input, recompute the whole layer, all-to-alls included (Megatron-Core's "
           "--recompute-modules moe layernorm); the other layers as megatron",
    "deepseek": "DeepSeek-V3's: recompute every RMSNorm, the MLA up-projections and the MoE SwiGLU output; cache "
                "the linears' inputs as their FP8 copies under --fp8 (arXiv:2412.19437 Sec. 3.2.3, 3.3.3)",
}
"""``--recompute`` choices."""

_ACTIVATION_ELEMENT_BYTES = 2
"""Saved outputs at 2 bytes per element, as the catalog's activations are given."""
_SOFTMAX_STAT_BYTES = 4
"""Fused attention saves one fp32 log-sum-exp per query row and head for its backward
(FlashAttention-2, Dao 2023, Algorithm 1: "Write L to HBM")."""


@frozen_dataclass
class CheckpointPolicy:
    """What activation checkpointing does (``--recompute``, ``--recompute-every``)."""

    mode: str = "off"
    """A key of :data:`RECOMPUTE`."""
    every: int = 1
    """With ``full``: checkpoint every ``every``-th block (1: all of them)."""

    def __post_init__(self) -> None:
        check_recompute(self.mode, self.every)

    @property
    def active(self) -> bool:
        """Anything is recomputed."""
        return self.mode != "off"

    def describe(self) -> str:
        """A few words for a report title ("" when nothing is recomputed)."""
        if self.mode == "full":
            return "activation checkpointing" + (f" of one block in {self.every}" if self.every != 1 else "")
        return {"off": "", "selective": "selective recomputation", "op": "op-level checkpointing",
                "megatron": "selective recomputation of norms and activations", "moe": "MoE-layer recomputation",
                "deepseek": "DeepSeek-V3's recomputation of norms, MLA up-projections and SwiGLU"}[self.mode]

    def checkpoints(self, position: int) -> bool:
        """Whether the block at ``position`` (0-based, forward order, root excluded) is checkpointed."""
        if self.mode == "off":
            return False
        return self.mode != "full" or (position + 1) % self.every == 0


def check_recompute(mode: object, every: object = 1) -> None:
    """One line naming the flag unless ``mode`` and ``every`` make a policy."""
    if not isinstance(mode, str) or mode not in RECOMPUTE:
        raise ConfigError(f"--recompute: {mode!r} is not known; choose one of {', '.join(RECOMPUTE)}")
    if isinstance(every, bool) or not isinstance(every, int) or every < 1:
        raise ConfigError(f"--recompute-every: {every!r} is not valid; expected an integer >= 1")
    if every != 1 and mode != "full":
        raise ConfigError(f"--recompute-every: {every} applies with --recompute full (every k-th block fully "
                          f"recomputed), not {mode}; give --recompute full or leave it out")


NO_CHECKPOINTING = CheckpointPolicy()
"""Nothing recomputed."""
FULL_CHECKPOINTING = CheckpointPolicy(mode="full")
"""Every block fully recomputed (``--activation-checkpointing``)."""


def policy_of(activation_checkpointing: bool = False, checkpointing: CheckpointPolicy | None = None
              ) -> CheckpointPolicy:
    """The policy of the library's two spellings: ``checkpointing`` when given, else
    ``activation_checkpointing`` (``True`` is ``full`` on every block)."""
    if checkpointing is not None:
        if activation_checkpointing and checkpointing.mode != "full":
            raise ConfigError(f"--activation-checkpointing: means --recompute full, which contradicts --recompute "
                              f"{checkpointing.mode}; give one of them")
        return checkpointing
    return FULL_CHECKPOINTING if activation_checkpointing else NO_CHECKPOINTING


def checkpointed(units: Sequence, policy: CheckpointPolicy) -> list:
    """The units ``policy`` checkpoints, of ``units`` (non-root, forward order)."""
    if policy.mode == "full" and policy.every > len(units):
        # --recompute full --recompute-every 1000 on 32 blocks checkpointed none of them: a run without
        # recomputation reported as one with it (every caller passes the whole model's units).
        raise ConfigError(f"--recompute-every: {policy.every} checkpoints every {policy.every}-th block, but the "
                          f"model has {len(units)}, so none would be recomputed; give at most {len(units)}, or "
                          f"--recompute off")
    return [u for pos, u in enumerate(units) if policy.checkpoints(pos)]


# ------------------------------------------------------------------ op level


def op_saved_bytes_per_sample(layer: LayerSpec) -> float | None:
    """What ``op`` keeps of a layer per sample: its matmul outputs and its attention output
    (plus the softmax statistics of a fused kernel); ``None`` for a layer without ops."""
    if not layer.ops:
        return None
    total = 0.0
    for op in layer.ops:
        if isinstance(op, MatmulOp):
            total += op.m * op.n * op.batch * _ACTIVATION_ELEMENT_BYTES
        elif isinstance(op, AttentionOp):
            total += op.seq * op.heads * op.head_dim * _ACTIVATION_ELEMENT_BYTES
            if op.fused:
                total += op.seq * op.heads * _SOFTMAX_STAT_BYTES
    return total


_RESIDUAL_GEMMS = ("o_proj", "down_proj", "c_proj", "out_proj", "output.dense", "experts.down")
"""Names (ends) of the GEMMs whose output Megatron-Core's modules do not keep: a block's output
projection (its residual add saves nothing) and the routed experts' second GEMM (unpermuting saves
nothing once the probabilities are applied in the activation)."""


def megatron_saved_bytes_per_sample(layer: LayerSpec) -> float | None:
    """What ``megatron`` keeps of a layer per sample (see the module docstring): ``op``'s matmul
    and attention outputs less those of :data:`_RESIDUAL_GEMMS`, plus the permuted tokens the
    routed experts' first GEMM reads; ``None`` for a layer without ops."""
    saved = op_saved_bytes_per_sample(layer)
    if saved is None:
        return None
    mlp = layer_kind(layer) == "mlp"
    for op in layer.ops:
        if isinstance(op, MatmulOp) and op.name.endswith(_RESIDUAL_GEMMS):
            saved -= op.m * op.n * op.batch * _ACTIVATION_ELEMENT_BYTES
            if mlp and op.name != "experts.down":
                # A dense MLP's (or the shared experts') second GEMM keeps its input, the activation's
                # output: only the routed experts' activation is recomputed (moe_act); the shared experts'
                # needs "shared_experts" (NVIDIA/Megatron-LM@d98e8a64ddf3 megatron/core/transformer/moe/
                # shared_experts.py line 156), a dense MLP's is never recomputed alone (mlp.py has no such
                # module).
                saved += op.m * op.k * op.batch * _ACTIVATION_ELEMENT_BYTES
        elif isinstance(op, MatmulOp) and op.name == "experts.gate_up":
            saved += op.m * op.k * op.batch * _ACTIVATION_ELEMENT_BYTES
    return saved


E5M6_BYTES = 1.5
"""Bytes of one element of DeepSeek-V3's E5M6 format (1 sign, 5 exponent and 6 mantissa bits, 12 in all),
in which it caches "the inputs of the Linear after the attention operator" (arXiv:2412.19437 Sec. 3.3.3 (1))."""

_MLA_LATENT_GEMMS = ("q_a_proj", "kv_a_proj_with_mqa")
"""MLA's down-projections: their outputs (the query and key-value latents, the decoupled rope key) are what
the recomputed norms and up-projections re-run from (DeepSeek-V3 Sec. 2.1.1 and 3.2.3)."""
_MLA_UP_GEMMS = ("q_b_proj", "kv_b_proj")
"""MLA's up-projections, recomputed in backward (DeepSeek-V3 Sec. 3.2.3): nothing of theirs is kept."""


def deepseek_cache_bytes(precision: Precision | None) -> dict[str, float]:
    """:func:`deepseek_saved_bytes_per_sample`'s element bytes under ``precision``: with an FP8 recipe one
    FP8 byte plus the recipe's scale bytes for a cached linear or SwiGLU input, E5M6 plus the same scales
    for the attention output (DeepSeek-V3 Sec. 3.3.3: its scales "round scaled", their storage not
    stated, counted as the recipe's); without one, the precision's activations."""
    if precision is None or precision.fp8 is None:
        element = 2.0 if precision is None else float(precision.activation_bytes)
        return {"cached_element_bytes": element, "attention_output_bytes": element}
    scales = precision.fp8.scale_bytes_per_element
    return {"cached_element_bytes": FP8_BYTES + scales, "attention_output_bytes": E5M6_BYTES + scales}


def deepseek_saved_bytes_per_sample(layer: LayerSpec, *, cached_element_bytes: float = 2.0,
                                    attention_output_bytes: float = 2.0) -> float | None:
    """What ``deepseek`` keeps of a layer per sample besides its input (see the module docstring), for
    the layer names of the Hugging Face DeepSeek/Llama lowering: ``cached_element_bytes`` per element of
    a linear's or the MoE SwiGLU's cached input (an FP8 copy and its scales under an FP8 recipe),
    ``attention_output_bytes`` per element of the attention output (E5M6 under FP8); ``None`` for a
    layer without ops. A linear whose input is a norm's output keeps nothing (the norm is recomputed),
    nor do the up-projections, the attention block's output projection's output or the experts' second
    GEMM (its input is the recomputed SwiGLU output; the router probabilities applied in the activation,
    as ``megatron`` counts it)."""
    if not layer.ops:
        return None
    total = 0.0
    for op in layer.ops:
        if isinstance(op, AttentionOp):
            if op.fused:
                total += op.seq * op.heads * _SOFTMAX_STAT_BYTES
            continue
        if not isinstance(op, MatmulOp):
            continue
        rows = op.m * op.batch
        name = op.name
        if name.endswith(_MLA_LATENT_GEMMS):
            total += rows * op.n * _ACTIVATION_ELEMENT_BYTES  # the latent, kept for the recomputed norm
        elif name.endswith(_MLA_UP_GEMMS):
            continue
        elif name.endswith(("o_proj", "out_proj", "c_proj")) and any(isinstance(o, AttentionOp) for o in layer.ops):
            total += rows * op.k * attention_output_bytes  # the attention output, also read by its backward
        elif name == "experts.gate_up":
            # The dispatched tokens (the GEMM's input) and its output (the SwiGLU input), both cached.
            total += rows * (op.k + op.n) * cached_element_bytes
        elif name.startswith("shared_experts.") and name.endswith(("gate_proj", "up_proj")):
            total += rows * op.n * cached_element_bytes  # the shared expert's SwiGLU input
        elif name.endswith(("gate_proj", "up_proj")):
            total += rows * op.n * _ACTIVATION_ELEMENT_BYTES  # a dense SwiGLU's input (its caching not stated)
        elif name.endswith("down_proj") and not name.startswith("shared_experts."):
            total += rows * op.k * cached_element_bytes  # a dense FFN's down-projection input
        elif name.endswith(_RESIDUAL_GEMMS) or name.endswith("down_proj"):
            continue
        else:
            total += rows * op.n * _ACTIVATION_ELEMENT_BYTES  # any other GEMM's output (the router's), as op keeps
    return total


def op_recompute_share(layer: LayerSpec, gpu: GpuSpec | None, precision: Precision, micro_batch: int) -> float:
    """Share of a layer's forward time that ``op`` re-runs: its memory-bound ops (and eager
    attention), costed by the roofline on ``gpu``; 0 for a layer without ops or no GPU."""
    if not layer.ops or gpu is None:
        return 0.0
    eff = Efficiencies()
    total = redo = 0.0
    for op in layer.ops:
        t = sum(term.time_s(eff) for term in op_terms(op, gpu, precision, micro_batch)[0])
        total += t
        kind = op_kind(op)
        if kind == "memory" or (kind == "attention" and not getattr(op, "fused", True)):
            redo += t
    return redo / total if total > 0 else 0.0


def selective_recompute_s(layer: TpLayer, forward_s: float) -> float:
    """What ``selective`` re-runs of a layer whose forward takes ``forward_s``: the attention
    core's share of its FLOPs (0 outside attention)."""
    flops = layer.col_flops_per_sample + layer.row_flops_per_sample + layer.core_flops_per_sample
    return forward_s * layer.core_flops_per_sample / flops if flops > 0 else 0.0


OP_RECOMPUTES = ("op", "megatron", "moe", "deepseek")
"""Modes that re-run a share of each layer's forward (:func:`recompute_shares`) rather than none or all."""


def recompute_shares(model: ModelSpec, policy: CheckpointPolicy, *, gpu: GpuSpec | None, precision: Precision,
                     micro_batch: int) -> tuple[float, ...] | None:
    """Per layer of ``model``, the share of its forward a checkpointed unit re-runs before its
    backward; ``None`` when that is all of it (``full``) or nothing is checkpointed."""
    if policy.mode in ("off", "full"):
        return None
    if policy.mode == "selective":
        return tuple(selective_recompute_s(layer, 1.0) for layer in tp_model(model, 1).layers)
    # ``megatron`` re-runs at most what op does; ``moe``: the MoE layers re-run all of their
    # forward (the layout's work sets theirs), the others as megatron.
    return tuple(op_recompute_share(layer, gpu, precision, micro_batch) for layer in model.layers)
