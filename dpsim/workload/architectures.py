"""Model families as layer lists: GPT-2, Llama, BERT, ViT and ResNet built from their configs.

Each builder returns a :class:`~dpsim.workload.spec.ModelSpec` whose parameters are named,
shaped and registered exactly as the reference torch implementation registers them
(checked name by name in the tests), with per-layer FLOPs and activation bytes.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable

from dpsim.errors import WorkloadError
from dpsim.frozen import frozen_dataclass
from dpsim.limits import MAX_MTP_DEPTH
from dpsim.workload.layers import (
    ACTIVATION_ELEMENT_BYTES,
    _affine,
    _check_positive_int,
    _conv1d_hf,
    _conv2d,
    _conv_out,
    _hidden_bytes,
    _layer,
    _linear,
    _lm_head_layer,
    _model,
    _Module,
    _norm,
    _param,
    _resolve_seq_len,
    _tensor,
    activation_op,
    attention_matmul_flops,
    attention_ops,
    cast_op,
    dropout_op,
    embedding_op,
    eager_centred_norm_ops,
    eager_rms_norm_ops,
    eager_rms_saved_elements,
    layernorm_saved_elements,
    llama_compiled_saved_elements,
    squared_relu_ops,
    window_causal_share,
    partial_rotary_ops,
    fan_out_ops,
    gated_activation_ops,
    gelu_new_activation_bytes,
    gelu_new_ops,
    korthikanti_block_activation_bytes,
    llama_block_activation_bytes,
    linear_ops,
    megatron_block_activation_bytes,
    megatron_gpt_block_activation_bytes,
    megatron_legacy_block_activation_bytes,
    megatron_moe_activation_bytes,
    moe_activation_bytes,
    moe_ops,
    norm_op,
    residual_ops,
    rope_ops,
)
from dpsim.workload.spec import (
    MTP_UNIT_PREFIX,
    MatmulOp,
    MemoryOp,
    ModelSpec,
    MoeSpec,
    OpSpec,
    ParamSpec,
    dtype_size_bytes,
)

# --------------------------------------------------------------------------- configs


@frozen_dataclass
class GPT2Config:
    """HuggingFace ``GPT2Config`` fields that shape the parameters."""

    vocab_size: int = 50257
    n_positions: int = 1024
    """Learned position table size: the longest sequence the model accepts."""
    n_embd: int = 768
    n_layer: int = 12
    n_head: int = 12
    n_inner: int | None = None
    """MLP width; ``None`` means ``4 * n_embd`` as in HuggingFace."""
    activation_function: str = "gelu_new"
    """MLP activation, as HF names it: ``gelu_new`` (GPT-2's tanh approximation, eight eager
    ops) or ``gelu`` (one kernel); it changes time only, not parameters or FLOPs."""
    resid_pdrop: float = 0.1
    """Dropout after each sub-block (0: no dropout kernels); time only."""
    embd_pdrop: float = 0.1
    """Dropout after the embeddings (0: none); time only."""
    attn_pdrop: float = 0.1
    """Dropout on the attention probabilities (eager attention only; 0: none); time only."""
    position_embedding: str = "learned"
    """``learned`` (a ``wpe`` table of ``n_positions`` rows, GPT-2, OPT) or ``alibi`` (BLOOM: no
    position parameters; the bias ALiBi adds to the attention scores is not costed)."""
    embedding_norm: bool = False
    """A LayerNorm after the word embeddings (BLOOM's ``word_embeddings_layernorm``)."""
    tie_word_embeddings: bool = True
    """``lm_head`` shares ``wte``'s weight (GPT-2, OPT, BLOOM); ``False`` adds an untied ``lm_head``."""

    @property
    def inner(self) -> int:
        return self.n_inner if self.n_inner is not None else 4 * self.n_embd


GATED_MLP_ACTS = ("swiglu", "geglu")
"""Gated MLPs (gate, up and down projections) the Llama builder makes."""
PLAIN_MLP_ACTS = ("gelu", "gelu_new", "relu", "relu2")
"""Two-matrix MLPs the Llama builder makes (``relu2``: squared ReLU, ``relu(x) ** 2``)."""


@frozen_dataclass
class LlamaConfig:
    """HuggingFace ``LlamaConfig`` fields that shape the parameters."""

    vocab_size: int = 32000
    hidden_size: int = 4096
    intermediate_size: int = 11008
    num_hidden_layers: int = 32
    num_attention_heads: int = 32
    num_key_value_heads: int = 32
    max_position_embeddings: int = 4096
    """Training context; RoPE has no learned table, so longer ``seq_len`` is allowed."""
    head_dim: int | None = None
    """``None`` means ``hidden_size // num_attention_heads``."""
    tie_word_embeddings: bool = False
    qk_norm: bool = False
    """An RMSNorm over each query and key head before RoPE (Qwen3's ``q_norm``/``k_norm``)."""
    qk_norm_whole_projection: bool = False
    """With ``qk_norm``: one RMSNorm over the whole query and key projections (weights of
    ``heads x head_dim`` and ``kv_heads x head_dim``) instead of one per head: OLMo 2's ``q_norm``
    and ``k_norm`` (allenai/OLMo-core@e27ba74550f1 ``src/olmo_core/nn/attention.py`` lines 149-153,
    built with ``size=d_model``, applied to ``w_q(x)`` and ``w_k(x)`` at lines 206-208). The
    elementwise work is the same either way (every element of q and k read and written once);
    only the weights' size differs."""
    num_experts: int = 0
    """Routed experts of each MoE layer (Mixtral ``num_local_experts``, Qwen3-MoE ``num_experts``,
    DeepSeek-V3 ``n_routed_experts``); 0: a dense model."""
    num_experts_per_tok: int = 0
    """Experts each token is routed to (top-k)."""
    moe_intermediate_size: int = 0
    """Inner width of one routed expert (Mixtral's experts are ``intermediate_size`` wide)."""
    n_shared_experts: int = 0
    """Shared experts every token runs through (DeepSeek-V3: 1)."""
    shared_expert_intermediate_size: int = 0
    """Inner width of one shared expert; 0: ``moe_intermediate_size`` (DeepSeek-V3)."""
    shared_expert_gate: bool = False
    """The shared experts' output scaled by a sigmoid gate, ``sigmoid(x·w) * shared(x)`` with ``w`` of
    ``hidden x 1`` (Qwen2-MoE's ``shared_expert_gate``: transformers 5.25.0
    ``models/qwen2_moe/modeling_qwen2_moe.py`` ``Qwen2MoeSparseMoeBlock``)."""
    first_k_dense_replace: int = 0
    """Blocks before the first MoE layer, with a dense ``intermediate_size`` MLP (DeepSeek-V3: 3)."""
    router_bias: bool = False
    """The router's per-expert score correction bias (DeepSeek-V3's ``e_score_correction_bias``)."""
    q_lora_rank: int = 0
    """Multi-head latent attention (DeepSeek-V2/V3, with ``kv_lora_rank``): queries through a
    rank-``q_lora_rank`` down projection and norm, or one ``q_proj`` when 0 (DeepSeek-V2-Lite,
    config.json ``q_lora_rank: null``); ``kv_lora_rank``, ``qk_nope_head_dim``, ``qk_rope_head_dim``
    and ``v_head_dim`` shape the rest."""
    kv_lora_rank: int = 0
    """MLA when > 0: the compressed key-value latent's width."""
    qk_nope_head_dim: int = 0
    """MLA: the part of a query/key head without rotary positions."""
    qk_rope_head_dim: int = 0
    """MLA: the rotary part of a query/key head (the key's shared by all heads)."""
    v_head_dim: int = 0
    """MLA: a value head's width."""
    norm: str = "rmsnorm"
    """The blocks' and the final norm: ``rmsnorm`` (weight only, HF's eager ``LlamaRMSNorm``),
    ``layernorm`` (weight and bias, one fused ``torch.nn.functional.layer_norm`` kernel: Nemotron's
    ``NemotronLayerNorm1P``, GPT-NeoX's ``nn.LayerNorm``) or ``layernorm_nobias`` (weight only, run
    eagerly: Cohere's ``CohereLayerNorm``, :func:`~dpsim.workload.layers.eager_centred_norm_ops`; it
    keeps what the eager RMSNorm keeps)."""
    logit_scale: bool = False
    """The logits multiplied by a constant before the loss (Cohere's ``logit_scale``): one eager
    pass over them each way (:func:`~dpsim.workload.layers.logit_scale_ops`)."""
    mlp_act: str = "swiglu"
    """The dense MLP: ``swiglu`` (``down(silu(gate(x)) * up(x))``, Llama) or ``geglu`` (the same
    three matrices with GELU: Gemma's ``gelu_pytorch_tanh``), both of ``intermediate_size``; or a
    two-matrix ``down(act(up(x)))`` with ``gelu``, ``gelu_new``, ``relu`` or ``relu2`` (squared
    ReLU, Nemotron-4: HF ``NemotronMLP``'s ``up_proj``/``down_proj`` with ``ReLUSquaredActivation``)."""
    qkv_bias: bool = False
    """Biases on the q, k and v projections (Qwen2's ``q_proj``/``k_proj``/``v_proj``)."""
    o_bias: bool = False
    """A bias on the output projection (with ``qkv_bias``: HF Llama's ``attention_bias``)."""
    mlp_bias: bool = False
    """Biases on the dense MLP's projections (HF Llama's ``mlp_bias``)."""
    sandwich_norms: bool = False
    """Gemma 2's four norms a block: besides the norms before attention and the MLP, one on each
    sub-block's output before its residual add (``post_attention_layernorm``,
    ``post_feedforward_layernorm``; the MLP's input norm is then ``pre_feedforward_layernorm``:
    transformers 5.25.0 ``models/gemma2/modeling_gemma2.py`` ``Gemma2DecoderLayer``)."""
    attn_softcap: float = 0.0
    """Attention logit soft-capping (Gemma 2's ``attn_logit_softcapping`` 50): see
    :attr:`~dpsim.workload.spec.AttentionOp.softcap`; 0: none."""
    final_softcap: float = 0.0
    """Final logit soft-capping (Gemma 2's ``final_logit_softcapping`` 30):
    :func:`~dpsim.workload.layers.final_softcap_ops`; 0: none."""
    parallel_block: int = 0
    """Attention and the MLP in parallel on the block's input, ``x + attn(norm(x)) + mlp(norm'(x))``
    (GPT-J, GPT-NeoX's ``use_parallel_residual``, Falcon's ``parallel_attn``, PaLM): 1 with one norm
    both read (GPT-J's ``ln_1``, Falcon-7B's ``input_layernorm``), 2 with a norm each (GPT-NeoX's
    ``input_layernorm`` and ``post_attention_layernorm``, Falcon-40B's ``ln_attn``/``ln_mlp``); 0: in
    sequence. The FLOPs are the sequential block's; the op graph keeps attention before the MLP (one
    GPU runs them one after the other either way)."""
    lm_head_bias: bool = False
    """A bias on the untied output head (GPT-J's ``lm_head``); its add is not costed (one pass over the
    logits the loss reads anyway)."""
    rotary_dim: int = 0
    """Rotary positions on the first ``rotary_dim`` of each query/key head only (GPT-J's ``rotary_dim``
    64 of 256; GPT-NeoX's ``rotary_pct`` and Phi-3/Nemotron's ``partial_rotary_factor`` times the head
    width, rounded down as transformers' ``int(head_dim * partial_rotary_factor)``); 0: the whole head."""
    sliding_window: int = 0
    """Sliding-window attention (Mistral's ``sliding_window``): each query attends to itself and the
    ``sliding_window - 1`` tokens before it (:func:`~dpsim.workload.layers.window_causal_share`);
    0: the whole causal prefix."""
    window_layers: str = "all"
    """Which blocks attend over the window: ``all`` (Mistral), ``alternate`` (Gemma 2: the even
    blocks local, the odd ones global; transformers 5.25.0 ``Gemma2Config.layer_types``
    ``"sliding_attention" if bool((i + 1) % 2) else "full_attention"``) or ``N:1``, ``N`` local blocks
    then one global (Gemma 3's ``5:1``: ``Gemma3TextConfig.layer_types`` ``bool((i + 1) % 6)``)."""
    mtp_depth: int = 0
    """Multi-token prediction modules run in training (DeepSeek-V3, arXiv:2412.19437, Sec. 2.2:
    ``D`` sequential modules, the k-th an RMSNorm of the previous depth's hidden state and one of
    the embedding of token ``i + k``, concatenated and projected ``2h -> h``, then a transformer
    block; the embedding and the output head shared with the main model; config.json's
    ``num_nextn_predict_layers``). Each depth adds that block, the projection, and one more pass of
    the output head and its cross-entropy loss; 0: none."""

    @property
    def head_size(self) -> int:
        return self.head_dim if self.head_dim is not None else self.hidden_size // self.num_attention_heads

    @property
    def mla(self) -> bool:
        """Multi-head latent attention: a compressed key-value latent (DeepSeek-V2/V3); the queries go
        through a low-rank ``q_lora_rank`` too, or one ``q_proj`` when it is 0 (DeepSeek-V2-Lite)."""
        return self.kv_lora_rank > 0

    @property
    def gated(self) -> bool:
        """The dense MLP has a gate projection (three matrices)."""
        return self.mlp_act in GATED_MLP_ACTS

    @property
    def moe(self) -> MoeSpec | None:
        """Its expert layers (``None`` for a dense Llama)."""
        if not self.num_experts:
            return None
        return MoeSpec(experts=self.num_experts, top_k=self.num_experts_per_tok,
                       expert_ffn=self.moe_intermediate_size, shared_experts=self.n_shared_experts,
                       shared_ffn=(self.shared_expert_intermediate_size or self.moe_intermediate_size)
                       if self.n_shared_experts else 0,
                       dense_layers=self.first_k_dense_replace)


@frozen_dataclass
class BertConfig:
    """HuggingFace ``BertConfig`` fields that shape the parameters."""

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    add_pooling_layer: bool = True


@frozen_dataclass
class ViTConfig:
    """torchvision ``VisionTransformer`` constructor arguments."""

    image_size: int = 224
    patch_size: int = 16
    num_layers: int = 12
    num_heads: int = 12
    hidden_dim: int = 768
    mlp_dim: int = 3072
    num_classes: int = 1000

    @property
    def seq_length(self) -> int:
        """Patches plus the class token (197 for 224 px / 16)."""
        return (self.image_size // self.patch_size) ** 2 + 1


@frozen_dataclass
class ResNetConfig:
    """torchvision ``ResNet`` with ``Bottleneck`` blocks (ResNet v1.5, stride in the 3×3)."""

    layers: tuple[int, ...] = (3, 4, 6, 3)
    """Bottleneck blocks per stage."""
    planes: tuple[int, ...] = (64, 128, 256, 512)
    """Bottleneck width per stage (torchvision's ``planes``; groups=1, width_per_group=64)."""
    stem_channels: int = 64
    """Output channels of ``conv1`` (torchvision's initial ``inplanes``)."""
    expansion: int = 4
    num_classes: int = 1000
    image_size: int = 224
    in_channels: int = 3
    channels_last: bool = False
    """Tensors in ``torch.channels_last`` (NHWC) rather than PyTorch's default NCHW: cuDNN's
    16-bit tensor-core kernels then need no layout transposes. Changes time only."""


ModelConfig = GPT2Config | LlamaConfig | BertConfig | ViTConfig | ResNetConfig

_WINDOW_PATTERN = re.compile(r"([1-9][0-9]{0,5}):1")


def window_pattern(text: object) -> int | None:
    """Local blocks per global one of a ``window_layers`` value: 0 for ``all`` (every block local), 1 for
    ``alternate`` (Gemma 2), ``N`` for ``N:1`` (Gemma 3's ``5:1``); ``None``: not a value."""
    if not isinstance(text, str):
        return None
    if text in ("all", "alternate"):
        return 0 if text == "all" else 1
    match = _WINDOW_PATTERN.fullmatch(text)
    return int(match.group(1)) if match else None


def build_gpt2(
    cfg: GPT2Config,
    *,
    name: str = "gpt2-custom",
    seq_len: int | None = None,
    dtype: str = "float32",
    flash_attention: bool = False,
    published_param_count: int | None = None,
    source: str = "",
) -> ModelSpec:
    """HuggingFace ``GPT2LMHeadModel`` (tied ``lm_head``); ``seq_len`` defaults to ``n_positions``."""
    dtype_size_bytes(dtype)
    # ALiBi has no table to outgrow: any sequence length is accepted, as with RoPE.
    s = _resolve_seq_len(seq_len, cfg.n_positions, name, max_field="n_positions",
                         max_value=cfg.n_positions if cfg.position_embedding == "learned" else None,
                         positions="ALiBi")
    d, inner, v = cfg.n_embd, cfg.inner, cfg.vocab_size
    # wte is also lm_head's weight; its gradient is complete only after the embedding's
    # backward, so the embedding layer owns it.
    wte = _tensor("transformer.wte.weight", (v, d), dtype)
    if cfg.activation_function not in ("gelu_new", "gelu", "relu"):
        raise WorkloadError(f"activation_function: {cfg.activation_function!r} is not modelled; "
                            f"allowed: gelu_new, gelu, relu")
    if cfg.position_embedding not in ("learned", "alibi"):
        raise WorkloadError(f"position_embedding: {cfg.position_embedding!r} is not modelled; allowed: learned, alibi")
    embedding, embedding_ops = [wte], [embedding_op("wte", s, d, v)]
    if cfg.position_embedding == "learned":
        embedding.append(_tensor("transformer.wpe.weight", (cfg.n_positions, d), dtype))
        embedding_ops += [embedding_op("wpe", s, d, cfg.n_positions),
                          # wte(ids) + wpe(positions): one position row set broadcast over the batch,
                          # whose gradient backward sums over it
                          MemoryOp(name="wte+wpe", elements=float(s * d), forward=((3, "stream"),),
                                   backward=((1, "stream"),))]
    if cfg.embedding_norm:
        embedding.append(_norm("transformer.word_embeddings_layernorm", d, dtype))
        embedding_ops.append(norm_op("word_embeddings_layernorm", float(s * d)))
    registered = list(embedding)
    hd = d // cfg.n_head
    layers = [_layer("transformer.wte", embedding, forward_flops_per_sample=0.0,
                     # embedding dropout mask (1 byte)
                     activation_bytes_per_sample=float(s * d) if cfg.embd_pdrop else 0.0,
                     ops=[*embedding_ops, *([dropout_op("drop", float(s * d), "stream")] if cfg.embd_pdrop else [])])]
    for i in range(cfg.n_layer):
        p = f"transformer.h.{i}"
        attn_act, mlp_act = korthikanti_block_activation_bytes(s, d, cfg.n_head, flash_attention=flash_attention,
                                                               resid_dropout=cfg.resid_pdrop > 0,
                                                               attn_dropout=cfg.attn_pdrop > 0)
        # Megatron's GPT runs a GELU MLP of 4h (its fused bias-GELU): only such blocks have its count.
        attn_megatron, mlp_megatron = megatron_gpt_block_activation_bytes(
            s, d, cfg.n_head, flash_attention=flash_attention, resid_dropout=cfg.resid_pdrop > 0,
            attn_dropout=cfg.attn_pdrop > 0) if cfg.activation_function == "gelu" and inner == 4 * d else (None, None)
        if cfg.activation_function == "gelu_new":
            mlp_act += gelu_new_activation_bytes(float(s * inner))
        ln_1 = _norm(f"{p}.ln_1", d, dtype)
        c_attn = _conv1d_hf(f"{p}.attn.c_attn", d, 3 * d, dtype)
        attn_proj = _conv1d_hf(f"{p}.attn.c_proj", d, d, dtype)
        ln_2 = _norm(f"{p}.ln_2", d, dtype)
        c_fc = _conv1d_hf(f"{p}.mlp.c_fc", d, inner, dtype)
        mlp_proj = _conv1d_hf(f"{p}.mlp.c_proj", inner, d, dtype)
        registered += [ln_1, c_attn, attn_proj, ln_2, c_fc, mlp_proj]
        sd = float(s * d)
        resid_dropout = [dropout_op("resid_dropout", sd)] if cfg.resid_pdrop else []
        layers.append(_layer(
            f"{p}.attn", [ln_1, c_attn, attn_proj],
            forward_flops_per_sample=2.0 * s * d * 3 * d + 2.0 * s * d * d + attention_matmul_flops(s, d),
            activation_bytes_per_sample=attn_act, unit=p, input_bytes_per_sample=_hidden_bytes(s, d), input_byte_class="stream",
            megatron_activation_bytes_per_sample=attn_megatron,
            saved_elements=((sd, "stream"),),  # the LayerNorm's input: the residual stream
            ops=[norm_op("ln_1", sd), cast_op("cast", sd), *linear_ops("c_attn", s, 3 * d, d, bias=True),
                 *attention_ops(s, cfg.n_head, hd, causal=True, fused=flash_attention, dropout=cfg.attn_pdrop > 0),
                 *linear_ops("c_proj", s, d, d, bias=True), *resid_dropout, *residual_ops("residual", sd)],
        ))
        layers.append(_layer(
            f"{p}.mlp", [ln_2, c_fc, mlp_proj],
            forward_flops_per_sample=2.0 * s * d * inner * 2,
            activation_bytes_per_sample=mlp_act, unit=p, input_bytes_per_sample=_hidden_bytes(s, d), input_byte_class="stream",
            megatron_activation_bytes_per_sample=mlp_megatron,
            saved_elements=((sd, "stream"),),  # the LayerNorm's input: the residual stream
            ops=[norm_op("ln_2", sd), cast_op("cast", sd), *linear_ops("c_fc", s, inner, d, bias=True),
                 *(gelu_new_ops("act", float(s * inner)) if cfg.activation_function == "gelu_new"
                   else [activation_op("act", float(s * inner), cfg.activation_function)]),
                 *linear_ops("c_proj", s, d, inner, bias=True), *resid_dropout, *residual_ops("residual", sd)],
        ))
    head = [_norm("transformer.ln_f", d, dtype)]
    if not cfg.tie_word_embeddings:
        head.append(_linear("lm_head", v, d, dtype, bias=False))
    registered += head
    # transformer.ln_f + lm_head (weight tied to transformer.wte.weight unless untied)
    layers.append(_lm_head_layer(head, s, d, v))
    return _model(name, layers, registered, tokens_per_sample=s,
                  published_param_count=published_param_count, source=source)


def build_llama(
    cfg: LlamaConfig,
    *,
    name: str = "llama-custom",
    seq_len: int | None = None,
    dtype: str = "float32",
    flash_attention: bool = False,
    published_param_count: int | None = None,
    source: str = "",
) -> ModelSpec:
    """HuggingFace ``LlamaForCausalLM``; ``seq_len`` defaults to ``max_position_embeddings``.

    RoPE positions are not parameters, so any positive ``seq_len`` is accepted.
    ``LlamaDecoderLayer`` registers ``self_attn, mlp, input_layernorm,
    post_attention_layernorm`` but runs ``input_layernorm`` before attention and
    ``post_attention_layernorm`` before the MLP: the attention layer owns the first
    norm, the MLP layer the second, and ``registration_order`` keeps HF's order.
    """
    dtype_size_bytes(dtype)
    s = _resolve_seq_len(seq_len, cfg.max_position_embeddings, name)
    d, inter, v = cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
    hd = cfg.head_size
    q_dim = cfg.num_attention_heads * hd
    kv_dim = cfg.num_key_value_heads * hd
    embed = _tensor("model.embed_tokens.weight", (v, d), dtype)
    registered = [embed]
    layers = [_layer("model.embed_tokens", [embed], forward_flops_per_sample=0.0,
                     activation_bytes_per_sample=0.0,  # no embedding dropout in Llama
                     ops=[embedding_op("embed_tokens", s, d, v)])]
    moe = cfg.moe
    depth = _check_mtp_depth(cfg.mtp_depth, s, name)
    if cfg.norm not in ("rmsnorm", "layernorm", "layernorm_nobias"):
        raise WorkloadError(f"norm: {cfg.norm!r} is not modelled; allowed: rmsnorm, layernorm, layernorm_nobias")
    if cfg.mlp_act not in GATED_MLP_ACTS + PLAIN_MLP_ACTS:
        raise WorkloadError(f"mlp_act: {cfg.mlp_act!r} is not modelled; allowed: "
                            f"{', '.join(GATED_MLP_ACTS + PLAIN_MLP_ACTS)}")
    layernorm = cfg.norm == "layernorm"
    centred = cfg.norm == "layernorm_nobias"
    if (layernorm or centred) and (moe is not None or cfg.mla or depth):
        # Their norms are costed as HF's eager RMSNorm (_moe_mlp, _mla_attention, the MTP projection).
        raise WorkloadError("norm: layernorm is modelled for dense blocks with multi-head or grouped-query "
                            "attention only; expert layers, MLA and MTP modules take rmsnorm")

    def norm_ops(name_: str) -> list:
        # HF's eager RMSNorm kernel by kernel; a LayerNorm is one fused kernel each way.
        if centred:
            return eager_centred_norm_ops(name_, s, d)
        return eager_rms_norm_ops(name_, s, d) if not layernorm else [norm_op(name_, float(s * d))]

    def saved(readers: int) -> tuple:
        return (layernorm_saved_elements if layernorm else eager_rms_saved_elements)(s, d, readers)

    if cfg.rotary_dim and not 0 < cfg.rotary_dim <= hd:
        raise WorkloadError(f"rotary_dim: {cfg.rotary_dim!r} is not valid; allowed: 1 to the head width {hd}")
    if cfg.rotary_dim and cfg.mla:
        raise WorkloadError("rotary_dim: multi-head latent attention sets its rotary part by qk_rope_head_dim")
    for field_ in ("attn_softcap", "final_softcap"):
        cap = getattr(cfg, field_)
        if isinstance(cap, bool) or not isinstance(cap, (int, float)) or not 0.0 <= cap < math.inf:
            raise WorkloadError(f"{field_}: {cap!r} is not valid; allowed: a cap above 0, or 0 for none")
    if (cfg.sandwich_norms or cfg.attn_softcap) and (moe is not None or cfg.mla or depth or cfg.parallel_block):
        raise WorkloadError("sandwich_norms/attn_softcap: Gemma 2's block is modelled for dense blocks in sequence with "
                            "multi-head or grouped-query attention")
    if cfg.parallel_block not in (0, 1, 2):
        raise WorkloadError(f"parallel_block: {cfg.parallel_block!r} is not valid; allowed: 0 (sequential), 1 (one "
                            f"shared norm), 2 (a norm each)")
    if cfg.parallel_block and (moe is not None or cfg.mla or depth):
        raise WorkloadError("parallel_block: parallel attention and MLP is modelled for dense blocks with "
                            "multi-head or grouped-query attention; expert layers, MLA and MTP modules run in sequence")
    if cfg.lm_head_bias and cfg.tie_word_embeddings:
        raise WorkloadError("lm_head_bias: a bias is on an untied output head (GPT-J); give tie_word_embeddings=False")
    local_per_global = window_pattern(cfg.window_layers)
    if local_per_global is None:
        raise WorkloadError(f"window_layers: {cfg.window_layers!r} is not modelled; allowed: all, alternate, N:1 "
                            f"(N local blocks, then one global)")
    _check_positive_int(cfg.sliding_window or 1, "sliding_window")

    def block(p: str, routed: bool, mtp: tuple[list, list, float, float] | None = None, index: int = 0) -> None:
        """Append block ``p``'s attention and MLP layers; ``mtp``: the (modules, ops, FLOPs,
        activation bytes) a multi-token prediction module runs before its block's attention;
        ``index``: the block's place, which picks its window (:attr:`LlamaConfig.window_layers`)."""
        nonlocal registered
        sd = float(s * d)
        window = cfg.sliding_window if not local_per_global or (index + 1) % (local_per_global + 1) else 0
        # The attention core's FLOPs in the full-square convention, scaled to the window's share.
        window_scale = window_causal_share(s, window) / 0.5
        input_norm = _norm(f"{p}.input_layernorm", d, dtype, bias=layernorm)
        post_norm = _norm(f"{p}.{'pre_feedforward_layernorm' if cfg.sandwich_norms else 'post_attention_layernorm'}",
                          d, dtype, bias=layernorm)
        attn_compiled = None  # MLA, unfused attention and q/k norms: not traced (eager count)
        attn_megatron = None  # MLA: no Megatron-Core count (the eager one is kept)
        if cfg.mla:
            attn_modules, attn_ops, attn_flops, attn_act = _mla_attention(cfg, p, s, dtype, flash_attention, window)
        else:
            q = _linear(f"{p}.self_attn.q_proj", q_dim, d, dtype, bias=cfg.qkv_bias)
            k = _linear(f"{p}.self_attn.k_proj", kv_dim, d, dtype, bias=cfg.qkv_bias)
            v_proj = _linear(f"{p}.self_attn.v_proj", kv_dim, d, dtype, bias=cfg.qkv_bias)
            o = _linear(f"{p}.self_attn.o_proj", d, q_dim, dtype, bias=cfg.o_bias)
            q_norm_dim, k_norm_dim = (q_dim, kv_dim) if cfg.qk_norm_whole_projection else (hd, hd)
            qk_norms = ([_norm(f"{p}.self_attn.q_norm", q_norm_dim, dtype, bias=False),
                         _norm(f"{p}.self_attn.k_norm", k_norm_dim, dtype, bias=False)] if cfg.qk_norm else [])
            attn_modules = [q, k, v_proj, o, *qk_norms]
            attn_ops = [*norm_ops("input_layernorm"), *fan_out_ops("normed", sd, 3),
                        *linear_ops("q_proj", s, q_dim, d, bias=cfg.qkv_bias),
                        *linear_ops("k_proj", s, kv_dim, d, bias=cfg.qkv_bias),
                        *linear_ops("v_proj", s, kv_dim, d, bias=cfg.qkv_bias)]
            if cfg.qk_norm:
                attn_ops += [norm_op("q_norm", float(s * q_dim)), norm_op("k_norm", float(s * kv_dim))]
            rot = cfg.rotary_dim if 0 < cfg.rotary_dim < hd else hd
            attn_ops += [*rope_ops("rope_q", float(s * q_dim) * rot / hd), *rope_ops("rope_k", float(s * kv_dim) * rot / hd)]
            if rot < hd:
                attn_ops += [*partial_rotary_ops("rope_q", float(s * q_dim)), *partial_rotary_ops("rope_k", float(s * kv_dim))]
            sdpa_kv = kv_dim
            if kv_dim < q_dim:
                # repeat_kv (expand + reshape) copies the rotated k (stream dtype) and v (16-bit) out
                # to the query heads; backward copies the gradients back.
                attn_ops += [MemoryOp(name="repeat_k", elements=float(s * q_dim), forward=((2, "stream"),),
                                      backward=((2, "stream"),)),
                             MemoryOp(name="repeat_v", elements=float(s * q_dim), forward=((2, "act"),),
                                      backward=((2, "act"),))]
                sdpa_kv = q_dim
            # Autocast's 16-bit copies of the rotated q and k (promoted to the stream's dtype by the
            # fp32 cos/sin tables) for attention.
            attn_ops += [cast_op("cast_q", float(s * q_dim)), cast_op("cast_k", float(s * sdpa_kv)),
                         *attention_ops(s, cfg.num_attention_heads, hd, causal=True, fused=flash_attention,
                                        window=window, softcap=bool(cfg.attn_softcap)),
                         *linear_ops("o_proj", s, d, q_dim, bias=cfg.o_bias), *residual_ops("residual", sd)]
            attn_act, _ = llama_block_activation_bytes(s, d, q_dim, sdpa_kv, inter, cfg.num_attention_heads,
                                                       flash_attention=flash_attention, layernorm=layernorm)
            attn_megatron = megatron_block_activation_bytes(s, d, q_dim, kv_dim, inter, cfg.num_attention_heads,
                                                            flash_attention=flash_attention, qk_norm=cfg.qk_norm)[0]
            # The compiled count was traced on Llama's block (RMSNorm, gated MLP) only: other blocks
            # keep the eager count under torch.compile.
            if flash_attention and not cfg.qk_norm and not layernorm and not centred and cfg.gated:
                attn_compiled = llama_compiled_saved_elements(s, d, q_dim, sdpa_kv, inter)[0]
            attn_flops = (2.0 * s * d * (q_dim + 2 * kv_dim) + 2.0 * s * q_dim * d
                          + attention_matmul_flops(s, q_dim) * window_scale)
        if routed:
            mlp_compiled = None
            mlp_modules, mlp_ops, mlp_flops, mlp_act = _moe_mlp(cfg, p, s, dtype)
            mlp_megatron = megatron_moe_activation_bytes(s, d, experts=moe.experts, top_k=moe.top_k,
                                                         expert_ffn=moe.expert_ffn,
                                                         shared_ffn=moe.shared_experts * moe.shared_ffn)
            if cfg.shared_expert_gate:
                mlp_megatron += _shared_gate_kept(s, d)
        elif cfg.gated:
            gate = _linear(f"{p}.mlp.gate_proj", inter, d, dtype, bias=cfg.mlp_bias)
            up = _linear(f"{p}.mlp.up_proj", inter, d, dtype, bias=cfg.mlp_bias)
            down = _linear(f"{p}.mlp.down_proj", d, inter, dtype, bias=cfg.mlp_bias)
            mlp_modules = [gate, up, down]
            # GeGLU's GELU is one eager kernel each way, as SiLU is: the same ops.
            mlp_ops = [*norm_ops("post_attention_layernorm"), *fan_out_ops("normed", sd, 2),
                       *linear_ops("gate_proj", s, inter, d, bias=cfg.mlp_bias),
                       *linear_ops("up_proj", s, inter, d, bias=cfg.mlp_bias),
                       *gated_activation_ops("act_fn", float(s * inter)),
                       *linear_ops("down_proj", s, d, inter, bias=cfg.mlp_bias), *residual_ops("residual", sd)]
            mlp_flops = 2.0 * s * d * inter * 3
            mlp_act = llama_block_activation_bytes(s, d, q_dim, kv_dim, inter, cfg.num_attention_heads,
                                                   flash_attention=flash_attention, layernorm=layernorm)[1]
            mlp_compiled = (llama_compiled_saved_elements(s, d, q_dim, kv_dim, inter)[1]
                            if not (layernorm or centred) else None)
            mlp_megatron = megatron_block_activation_bytes(s, d, q_dim, kv_dim, inter, cfg.num_attention_heads)[1]
        else:
            # A two-matrix MLP, down(act(up(x))): HF NemotronMLP's and GPTNeoXMLP's layout.
            up = _linear(f"{p}.mlp.up_proj", inter, d, dtype, bias=cfg.mlp_bias)
            down = _linear(f"{p}.mlp.down_proj", d, inter, dtype, bias=cfg.mlp_bias)
            mlp_modules = [up, down]
            act_elements = float(s * inter)
            act_ops = (squared_relu_ops("act_fn", act_elements) if cfg.mlp_act == "relu2"
                       else gelu_new_ops("act_fn", act_elements) if cfg.mlp_act == "gelu_new"
                       else [activation_op("act_fn", act_elements, cfg.mlp_act)])
            mlp_ops = [*norm_ops("post_attention_layernorm"), *fan_out_ops("normed", sd, 1),
                       *linear_ops("up_proj", s, inter, d, bias=cfg.mlp_bias), *act_ops,
                       *linear_ops("down_proj", s, d, inter, bias=cfg.mlp_bias), *residual_ops("residual", sd)]
            mlp_flops = 2.0 * s * d * inter * 2
            mlp_act = llama_block_activation_bytes(s, d, q_dim, kv_dim, inter, cfg.num_attention_heads,
                                                   flash_attention=flash_attention, layernorm=layernorm,
                                                   gated=False)[1]
            if cfg.mlp_act == "gelu_new":
                mlp_act += gelu_new_activation_bytes(act_elements)
            mlp_compiled = None
            mlp_megatron = megatron_block_activation_bytes(s, d, q_dim, kv_dim, inter, cfg.num_attention_heads,
                                                           gated=False)[1]
        if cfg.parallel_block:
            # The MLP reads the block's input, not attention's output: with one shared norm it has no norm
            # of its own and its projections read the attention norm's output (one more cast and gradient
            # sum per reader); with two its norm reads the input the attention norm already keeps.
            readers = 2 if cfg.gated else 1
            if cfg.parallel_block == 1:
                body = [op for op in mlp_ops if not op.name.startswith(("post_attention_layernorm", "normed."))]
                mlp_ops = [*fan_out_ops("normed", sd, readers + 1)[1:], *body]
                mlp_act -= ACTIVATION_ELEMENT_BYTES * sd * (2 if layernorm else 3)
                mlp_saved = ((float(readers) * sd, "recast"),)
            else:
                mlp_act -= ACTIVATION_ELEMENT_BYTES * sd
                mlp_saved = tuple((n - sd, c) if c == "stream" else (n, c) for n, c in saved(readers))
            # Megatron-Core's and the compiled counts were derived for sequential blocks.
            attn_megatron = mlp_megatron = None
            attn_compiled = mlp_compiled = None
        else:
            mlp_saved = saved(1 if routed or not cfg.gated else 2)
        mlp_norms = [post_norm] if cfg.parallel_block != 1 else []
        attn_saved = saved(2 if cfg.mla else 3)
        out_norms: list = []
        if cfg.sandwich_norms:
            # A norm on each sub-block's output, before its residual add: its kernels, and what it keeps
            # (an eager RMSNorm its input and normalised input, as the input norms).
            out_norms = [_norm(f"{p}.post_attention_layernorm", d, dtype, bias=layernorm),
                         _norm(f"{p}.post_feedforward_layernorm", d, dtype, bias=layernorm)]
            kept = ACTIVATION_ELEMENT_BYTES * sd * (2 if layernorm else 3)
            first = next(i for i, op in enumerate(attn_ops) if op.name == "residual")
            attn_ops = [*attn_ops[:first], *norm_ops("post_attention_layernorm"), *attn_ops[first:]]
            first = next(i for i, op in enumerate(mlp_ops) if op.name == "residual")
            mlp_ops = [*mlp_ops[:first], *norm_ops("post_feedforward_layernorm"), *mlp_ops[first:]]
            attn_act += kept
            mlp_act += kept
            attn_saved, mlp_saved = attn_saved + saved(1), mlp_saved + saved(1)
            attn_megatron = mlp_megatron = None
            attn_compiled = mlp_compiled = None
        # Legacy Megatron-LM's count was read for its plain Llama block only: sequential, RMSNorm, flash
        # attention with as many key-value heads as query heads (no grouped heads in that code), whole rotary,
        # a SwiGLU MLP, no q/k norms, no experts, MLA or MTP modules (megatron_legacy_block_activation_bytes).
        plain = (flash_attention and not cfg.mla and not routed and mtp is None and cfg.mlp_act == "swiglu"
                 and not cfg.qk_norm and kv_dim == q_dim and not layernorm and not centred and not cfg.parallel_block
                 and not cfg.sandwich_norms and not cfg.attn_softcap and cfg.rotary_dim in (0, hd))
        attn_legacy, mlp_legacy = (megatron_legacy_block_activation_bytes(s, d, q_dim, inter, cfg.num_attention_heads)
                                   if plain else (None, None))
        pre_modules: list = []
        if mtp is not None:
            # The MTP module's norms and 2h -> h projection run ahead of its block's attention.
            pre_modules, pre_ops, pre_flops, pre_act = mtp
            attn_ops = [*pre_ops, *attn_ops]
            attn_flops += pre_flops
            attn_act += pre_act
            if attn_megatron is not None:
                attn_megatron += pre_act
        registered += [*pre_modules, *attn_modules, *mlp_modules, input_norm, *out_norms[:1], *mlp_norms,
                       *out_norms[1:]]
        layers.append(_layer(
            f"{p}.self_attn", [*pre_modules, input_norm, *attn_modules, *out_norms[:1]],  # + input_layernorm
            forward_flops_per_sample=attn_flops,
            activation_bytes_per_sample=attn_act, unit=p, input_bytes_per_sample=_hidden_bytes(s, d), input_byte_class="stream", saved_elements=attn_saved,
            compiled_saved_elements=attn_compiled if mlp_compiled is not None else None,
            megatron_activation_bytes_per_sample=attn_megatron,
            megatron_legacy_activation_bytes_per_sample=attn_legacy,
            ops=attn_ops,
        ))
        layers.append(_layer(
            f"{p}.mlp", [*mlp_norms, *mlp_modules, *out_norms[1:]],  # + post_attention_layernorm
            forward_flops_per_sample=mlp_flops,
            activation_bytes_per_sample=mlp_act, unit=p, input_bytes_per_sample=_hidden_bytes(s, d), input_byte_class="stream", saved_elements=mlp_saved,
            compiled_saved_elements=mlp_compiled if attn_compiled is not None else None,
            megatron_activation_bytes_per_sample=mlp_megatron,
            megatron_legacy_activation_bytes_per_sample=mlp_legacy,
            ops=mlp_ops,
        ))

    for i in range(cfg.num_hidden_layers):
        block(f"model.layers.{i}", moe is not None and i >= moe.dense_layers, index=i)
    for k in range(depth):
        block(f"{MTP_UNIT_PREFIX}{k}", moe is not None, _mtp_projection(f"{MTP_UNIT_PREFIX}{k}", s, d, dtype))
    head = [_norm("model.norm", d, dtype, bias=layernorm)]
    if not cfg.tie_word_embeddings:
        head.append(_linear("lm_head", v, d, dtype, bias=cfg.lm_head_bias))
    registered += head
    # model.norm + lm_head, and once more per MTP depth: the head is shared (Sec. 2.2).
    layers.append(_lm_head_layer(head, s, d, v, eager_rms=not layernorm, passes=1 + depth,
                                 softcap=bool(cfg.final_softcap), logit_scale=cfg.logit_scale, centred=centred))
    return _model(name, layers, registered, tokens_per_sample=s,
                  published_param_count=published_param_count, source=source, moe=moe)


def _check_mtp_depth(depth: object, seq_len: int, name: str) -> int:
    """``depth`` if it is a usable MTP depth: an integer from 0, below the sequence (depth ``k``
    predicts token ``i + 1 + k``, so it needs ``k + 1`` tokens after position ``i``) and at most
    :data:`MAX_MTP_DEPTH`; else a one-line WorkloadError."""
    if isinstance(depth, bool) or not isinstance(depth, int) or not 0 <= depth <= MAX_MTP_DEPTH:
        raise WorkloadError(f"--mtp-depth: {depth!r} is not valid for {name}; expected an integer from 0 "
                            f"to {MAX_MTP_DEPTH}")
    if depth and depth >= seq_len - 1:
        raise WorkloadError(f"--mtp-depth: {depth} needs a sequence longer than {depth + 1} tokens; {name} "
                            f"has {seq_len}")
    return depth


def _mtp_projection(p: str, s: int, d: int, dtype: str) -> tuple[list, list, float, float]:
    """What the k-th multi-token prediction module runs before its transformer block (DeepSeek-V3,
    arXiv:2412.19437, Sec. 2.2): the shared embedding's lookup of the tokens ``k`` ahead
    (the table is the main model's: no parameter here, and no second dense gradient table), an
    RMSNorm of it (``enorm``) and one of the previous depth's hidden states (``hnorm``), their
    concatenation, and the projection ``M_k`` from ``2h`` to ``h`` (``eh_proj``; names as
    deepseek-ai/DeepSeek-V3 README_WEIGHTS.md lists the MTP module's weights). Returns (modules,
    ops, forward FLOPs, activation bytes) per sample: ``2·s·2h·h`` FLOPs, and kept for backward
    the two norms' inputs and the projection's ``s x 2h`` input (2 bytes each)."""
    sd = float(s * d)
    mods = [_norm(f"{p}.enorm", d, dtype, bias=False), _norm(f"{p}.hnorm", d, dtype, bias=False),
            _linear(f"{p}.eh_proj", d, 2 * d, dtype, bias=False)]
    ops = [MemoryOp(name="mtp_embed", elements=sd, forward=((2, "stream"),), backward=((2, "stream"),)),
           *eager_rms_norm_ops("enorm", s, d), *eager_rms_norm_ops("hnorm", s, d),
           MemoryOp(name="mtp_concat", elements=2 * sd, forward=((2, "act"),), backward=((2, "act"),)),
           *linear_ops("eh_proj", s, d, 2 * d, bias=False)]
    flops = 2.0 * s * (2 * d) * d
    act = _hidden_bytes(s, d) * 4  # enorm and hnorm inputs (s x h each), the concatenation (s x 2h)
    return mods, ops, flops, act


def _mla_attention(cfg: LlamaConfig, p: str, s: int, dtype: str, flash_attention: bool, window: int = 0):
    """DeepSeek-V3's multi-head latent attention (DeepSeek-V2 paper, arXiv:2405.04434, Sec.
    2.1; transformers ``DeepseekV3Attention``): queries through ``q_a_proj`` (to
    ``q_lora_rank``), an RMSNorm and ``q_b_proj`` (to ``heads x (nope + rope)``); keys and
    values through ``kv_a_proj_with_mqa`` (to ``kv_lora_rank`` plus one shared rotary key), an
    RMSNorm and ``kv_b_proj`` (to ``heads x (nope + v)``); the core attends with ``nope + rope``
    wide query/key heads and ``v`` wide values; ``o_proj`` from ``heads x v``. Returns
    (modules, ops, forward FLOPs, activation bytes) per sample. The core's FLOPs are counted
    at the mean of the query/key and value head widths (``QKᵀ`` at one, ``·V`` at the other)."""
    d, h = cfg.hidden_size, cfg.num_attention_heads
    qk_head = cfg.qk_nope_head_dim + cfg.qk_rope_head_dim
    q_dim, kv_out, o_in = h * qk_head, h * (cfg.qk_nope_head_dim + cfg.v_head_dim), h * cfg.v_head_dim
    kv_a = cfg.kv_lora_rank + cfg.qk_rope_head_dim
    # Without a query latent (DeepSeek-V2-Lite) one q_proj maps the normed input to the query heads
    # (transformers 5.25.0 models/deepseek_v2/modeling_deepseek_v2.py: q_proj when q_lora_rank is None).
    q_mods = ([_linear(f"{p}.self_attn.q_a_proj", cfg.q_lora_rank, d, dtype, bias=False),
               _norm(f"{p}.self_attn.q_a_layernorm", cfg.q_lora_rank, dtype, bias=False),
               _linear(f"{p}.self_attn.q_b_proj", q_dim, cfg.q_lora_rank, dtype, bias=False)] if cfg.q_lora_rank
              else [_linear(f"{p}.self_attn.q_proj", q_dim, d, dtype, bias=False)])
    q_ops = ([*linear_ops("q_a_proj", s, cfg.q_lora_rank, d, bias=False),
              norm_op("q_a_layernorm", float(s * cfg.q_lora_rank)),
              *linear_ops("q_b_proj", s, q_dim, cfg.q_lora_rank, bias=False)] if cfg.q_lora_rank
             else linear_ops("q_proj", s, q_dim, d, bias=False))
    mods = [*q_mods,
            _linear(f"{p}.self_attn.kv_a_proj_with_mqa", kv_a, d, dtype, bias=False),
            _norm(f"{p}.self_attn.kv_a_layernorm", cfg.kv_lora_rank, dtype, bias=False),
            _linear(f"{p}.self_attn.kv_b_proj", kv_out, cfg.kv_lora_rank, dtype, bias=False),
            _linear(f"{p}.self_attn.o_proj", d, o_in, dtype, bias=False)]
    sd = float(s * d)
    core_dim = (qk_head + cfg.v_head_dim) // 2
    ops = [*eager_rms_norm_ops("input_layernorm", s, d), *fan_out_ops("normed", sd, 2),
           *q_ops,
           *linear_ops("kv_a_proj_with_mqa", s, kv_a, d, bias=False),
           norm_op("kv_a_layernorm", float(s * cfg.kv_lora_rank)),
           *linear_ops("kv_b_proj", s, kv_out, cfg.kv_lora_rank, bias=False),
           *rope_ops("rope_q", float(s * h * cfg.qk_rope_head_dim)),
           *rope_ops("rope_k", float(s * cfg.qk_rope_head_dim)),
           cast_op("cast_q", float(s * q_dim)), cast_op("cast_k", float(s * q_dim)),
           *attention_ops(s, h, core_dim, causal=True, fused=flash_attention, window=window),
           *linear_ops("o_proj", s, d, o_in, bias=False), *residual_ops("residual", sd)]
    flops = 2.0 * s * sum(m.params[0].numel for m in mods if len(m.params[0].shape) == 2) \
        + attention_matmul_flops(s, h * core_dim) * window_causal_share(s, window) / 0.5
    act, _ = llama_block_activation_bytes(s, d, q_dim, q_dim, cfg.intermediate_size, h,
                                          flash_attention=flash_attention)
    return mods, ops, flops, act


def _moe_mlp(cfg: LlamaConfig, p: str, s: int, dtype: str):
    """An MoE layer in place of the MLP: the router (``mlp.gate``, ``experts x hidden``, and
    DeepSeek-V3's score correction bias), the routed experts as two stacked tensors
    (``mlp.experts.gate_up_proj``, ``experts x 2·ffn x hidden``, and ``mlp.experts.down_proj``,
    ``experts x hidden x ffn``: transformers v5's fused layout, Megatron-Core's grouped GEMM
    weights), and the shared experts as one gated MLP of ``n_shared x ffn``. Returns (modules,
    ops, forward FLOPs, activation bytes) per sample; the FLOPs are the active ones: the
    router, ``top_k`` experts and the shared ones per token."""
    moe = cfg.moe
    assert moe is not None
    d, e, f = cfg.hidden_size, moe.experts, moe.expert_ffn
    shared = moe.shared_experts * moe.shared_ffn
    router = _linear(f"{p}.mlp.gate", e, d, dtype, bias=False)
    if cfg.router_bias:
        bias = _param(f"{p}.mlp.gate.e_score_correction_bias", (e,), dtype)
        router = _Module(params=(*router.params, bias), ready=(bias.name, *router.ready))
    mods = [router, _tensor(f"{p}.mlp.experts.gate_up_proj", (e, 2 * f, d), dtype),
            _tensor(f"{p}.mlp.experts.down_proj", (e, d, f), dtype)]
    if shared:
        mods += [_linear(f"{p}.mlp.shared_experts.gate_proj", shared, d, dtype, bias=False),
                 _linear(f"{p}.mlp.shared_experts.up_proj", shared, d, dtype, bias=False),
                 _linear(f"{p}.mlp.shared_experts.down_proj", d, shared, dtype, bias=False)]
    sd = float(s * d)
    gate_ops: list = []
    if cfg.shared_expert_gate:
        if not shared:
            raise WorkloadError("shared_expert_gate: the gate scales the shared experts' output; give "
                                "n_shared_experts=")
        mods.append(_linear(f"{p}.mlp.shared_expert_gate", 1, d, dtype, bias=False))
        # A product of width 1 (a GEMV, memory-bound): run as the router is, out of FP8, whose GEMMs need
        # widths that are multiples of 16. Then the sigmoid over one value a token and its product with the
        # shared output (read both, write; backward both operands' gradients, the gate's a row sum).
        gate_ops = [MatmulOp(name="shared_expert_gate", m=s, n=1, k=d, kind="router"),
                    MemoryOp(name="shared_expert_gate.sigmoid", elements=float(s), forward=((2, "act"),),
                             backward=((3, "act"),)),
                    MemoryOp(name="shared_expert_gate.mul", elements=sd, forward=((2 + 1 / d, "act"),),
                             backward=((4 + 1 / d, "act"),))]
    ops = [*eager_rms_norm_ops("post_attention_layernorm", s, d), cast_op("cast", sd),
           *moe_ops(s, d, experts=e, top_k=moe.top_k, expert_ffn=f, shared_ffn=shared), *gate_ops,
           *residual_ops("residual", sd)]
    flops = 2.0 * s * d * (e + 3 * moe.top_k * f + 3 * shared + (1 if gate_ops else 0))
    act = moe_activation_bytes(s, d, experts=e, top_k=moe.top_k, expert_ffn=f, shared_ffn=shared)
    if gate_ops:
        act += _shared_gate_kept(s, d)
    return mods, ops, flops, act


def _shared_gate_kept(s: int, d: int) -> float:
    """What the shared-expert gate keeps for backward: the shared output and the sigmoid's output (16-bit)."""
    return ACTIVATION_ELEMENT_BYTES * (float(s) * d + s)


def build_bert(
    cfg: BertConfig,
    *,
    name: str = "bert-custom",
    seq_len: int | None = None,
    dtype: str = "float32",
    flash_attention: bool = False,
    published_param_count: int | None = None,
    source: str = "",
) -> ModelSpec:
    """HuggingFace ``BertModel`` (encoder + pooler, no pre-training heads)."""
    dtype_size_bytes(dtype)
    s = _resolve_seq_len(seq_len, cfg.max_position_embeddings, name,
                         max_field="max_position_embeddings", max_value=cfg.max_position_embeddings)
    d, inter = cfg.hidden_size, cfg.intermediate_size
    word = _tensor("embeddings.word_embeddings.weight", (cfg.vocab_size, d), dtype)
    position = _tensor("embeddings.position_embeddings.weight", (cfg.max_position_embeddings, d), dtype)
    token_type = _tensor("embeddings.token_type_embeddings.weight", (cfg.type_vocab_size, d), dtype)
    emb_norm = _norm("embeddings.LayerNorm", d, dtype)
    registered = [word, position, token_type, emb_norm]
    sd = float(s * d)
    hd = d // cfg.num_attention_heads
    layers = [_layer(
        "embeddings", [word, token_type, position, emb_norm],  # HF: word + token type, then + position
        forward_flops_per_sample=0.0,
        activation_bytes_per_sample=float(s * d),  # dropout mask after the LayerNorm
        ops=[embedding_op("word_embeddings", s, d, cfg.vocab_size),
             embedding_op("token_type_embeddings", s, d, cfg.type_vocab_size, add=True),
             embedding_op("position_embeddings", s, d, cfg.max_position_embeddings, add=True),
             norm_op("LayerNorm", sd), dropout_op("dropout", sd, "stream")],
    )]
    for i in range(cfg.num_hidden_layers):
        p = f"encoder.layer.{i}"
        attn_act, mlp_act = korthikanti_block_activation_bytes(
            s, d, cfg.num_attention_heads, flash_attention=flash_attention)
        attention = [
            _linear(f"{p}.attention.self.query", d, d, dtype),
            _linear(f"{p}.attention.self.key", d, d, dtype),
            _linear(f"{p}.attention.self.value", d, d, dtype),
            _linear(f"{p}.attention.output.dense", d, d, dtype),
            _norm(f"{p}.attention.output.LayerNorm", d, dtype),
        ]
        ffn = [
            _linear(f"{p}.intermediate.dense", inter, d, dtype),
            _linear(f"{p}.output.dense", d, inter, dtype),
            _norm(f"{p}.output.LayerNorm", d, dtype),
        ]
        registered += attention + ffn
        # Post-LN: each sub-block ends with dropout, the residual add and its LayerNorm.
        layers.append(_layer(
            f"{p}.attention", attention,
            forward_flops_per_sample=2.0 * s * d * d * 4 + attention_matmul_flops(s, d),
            activation_bytes_per_sample=attn_act, unit=p, input_bytes_per_sample=_hidden_bytes(s, d), input_byte_class="stream",
            # The LayerNorm's input (the residual sum), and under autocast query, key and value's
            # own 16-bit copies of the block input (three nn.Linear modules; eager_rms_saved_elements).
            saved_elements=((sd, "stream"), (2 * sd, "recast")),
            ops=[cast_op("cast", sd), *linear_ops("query", s, d, d, bias=True),
                 *linear_ops("key", s, d, d, bias=True), *linear_ops("value", s, d, d, bias=True),
                 *attention_ops(s, cfg.num_attention_heads, hd, causal=False, fused=flash_attention,
                                dropout=True),
                 *linear_ops("output.dense", s, d, d, bias=True), dropout_op("output.dropout", sd),
                 *residual_ops("residual", sd), norm_op("output.LayerNorm", sd)],
        ))
        layers.append(_layer(
            f"{p}.ffn", ffn,  # BertIntermediate + BertOutput (no common module in HF)
            forward_flops_per_sample=2.0 * s * d * inter * 2,
            activation_bytes_per_sample=mlp_act, unit=p, input_bytes_per_sample=_hidden_bytes(s, d), input_byte_class="stream",
            saved_elements=((sd, "stream"),),  # the LayerNorm's input: the residual stream
            ops=[cast_op("cast", sd), *linear_ops("intermediate.dense", s, inter, d, bias=True),
                 activation_op("gelu", float(s * inter)), *linear_ops("output.dense", s, d, inter, bias=True),
                 dropout_op("output.dropout", sd), *residual_ops("residual", sd), norm_op("output.LayerNorm", sd)],
        ))
    if cfg.add_pooling_layer:
        pooler = _linear("pooler.dense", d, d, dtype)
        registered.append(pooler)
        layers.append(_layer(
            "pooler", [pooler],
            forward_flops_per_sample=2.0 * d * d,  # first token only
            activation_bytes_per_sample=float(ACTIVATION_ELEMENT_BYTES * d),
            ops=[*linear_ops("pooler", 1, d, d, bias=True), activation_op("tanh", float(d), "tanh")],
        ))
    return _model(name, layers, registered, tokens_per_sample=s,
                  published_param_count=published_param_count, source=source)


def build_vit(
    cfg: ViTConfig,
    *,
    name: str = "vit-custom",
    seq_len: int | None = None,
    dtype: str = "float32",
    flash_attention: bool = False,
    published_param_count: int | None = None,
    source: str = "",
) -> ModelSpec:
    """torchvision ``VisionTransformer`` (class token, learned positions, linear head).

    ``seq_len`` must be ``1 + k²`` (k patches per side): it sets the image size to
    ``k · patch_size``, which resizes the learned ``encoder.pos_embedding``; the
    published count then no longer applies and is dropped.
    """
    dtype_size_bytes(dtype)
    if seq_len is not None:
        seq_len = _check_positive_int(seq_len, "--seq-len")
        side = math.isqrt(seq_len - 1)
        if seq_len < 2 or side * side != seq_len - 1:
            raise WorkloadError(
                f"--seq-len: {seq_len} is not 1 + k² for {name} (class token + k×k patches of "
                f"{cfg.patch_size} px; default {cfg.seq_length} = 1 + 14²)"
            )
        if side * cfg.patch_size != cfg.image_size:
            cfg = dataclasses.replace(cfg, image_size=side * cfg.patch_size)
            published_param_count = None
    s = cfg.seq_length
    d, patch = cfg.hidden_dim, cfg.patch_size
    n_patches = s - 1
    patch_in = 3 * patch * patch
    class_token = _tensor("class_token", (1, 1, d), dtype)
    conv_proj = _conv2d("conv_proj", (d, 3, patch, patch), dtype, bias=True)
    pos_embedding = _tensor("encoder.pos_embedding", (1, s, d), dtype)
    registered = [class_token, conv_proj, pos_embedding]
    sd = float(s * d)
    image = float(3 * cfg.image_size ** 2)
    layers = [_layer(
        "conv_proj", [conv_proj, class_token, pos_embedding],  # + class_token and encoder.pos_embedding
        forward_flops_per_sample=2.0 * n_patches * patch_in * d,
        activation_bytes_per_sample=float(ACTIVATION_ELEMENT_BYTES * 3 * cfg.image_size ** 2 + s * d),
        ops=[cast_op("cast_image", image),
             *conv_ops("conv_proj", in_elements=image, out_hw=cfg.image_size // patch, in_channels=3,
                       out_channels=d, kernel=patch, channels_last=False, norm=False, relu=False, stride=patch),
             # torch.cat([class_token, x]) promotes the 16-bit patches to the fp32 token's dtype.
             MemoryOp(name="class_token_cat", elements=sd, forward=((1, "act"), (1, "stream")),
                      backward=((1, "stream"), (1, "act"))),
             MemoryOp(name="pos_embedding", elements=sd, forward=((3, "stream"),), backward=((1, "stream"),))],
    )]
    for i in range(cfg.num_layers):
        p = f"encoder.layers.encoder_layer_{i}"
        attn_act, mlp_act = korthikanti_block_activation_bytes(s, d, cfg.num_heads, flash_attention=flash_attention)
        attention = [
            _norm(f"{p}.ln_1", d, dtype),
            _affine(_param(f"{p}.self_attention.in_proj_weight", (3 * d, d), dtype),
                    _param(f"{p}.self_attention.in_proj_bias", (3 * d,), dtype)),
            _linear(f"{p}.self_attention.out_proj", d, d, dtype),
        ]
        mlp = [
            _norm(f"{p}.ln_2", d, dtype),
            _linear(f"{p}.mlp.0", cfg.mlp_dim, d, dtype),
            _linear(f"{p}.mlp.3", d, cfg.mlp_dim, dtype),
        ]
        registered += attention + mlp
        # Dropout is 0.0 in torchvision's and timm's ViTs: F.dropout(p=0) returns its input.
        layers.append(_layer(
            f"{p}.self_attention", attention,  # + ln_1
            forward_flops_per_sample=2.0 * s * d * 3 * d + 2.0 * s * d * d + attention_matmul_flops(s, d),
            activation_bytes_per_sample=attn_act, unit=p, input_bytes_per_sample=_hidden_bytes(s, d), input_byte_class="stream",
            saved_elements=((sd, "stream"),),  # the LayerNorm's input: the residual stream
            ops=[norm_op("ln_1", sd), cast_op("cast", sd), *linear_ops("in_proj", s, 3 * d, d, bias=True),
                 *attention_ops(s, cfg.num_heads, d // cfg.num_heads, causal=False, fused=flash_attention,
                                masked=False),
                 *linear_ops("out_proj", s, d, d, bias=True), *residual_ops("residual", sd)],
        ))
        layers.append(_layer(
            f"{p}.mlp", mlp,  # + ln_2
            forward_flops_per_sample=2.0 * s * d * cfg.mlp_dim * 2,
            activation_bytes_per_sample=mlp_act, unit=p, input_bytes_per_sample=_hidden_bytes(s, d), input_byte_class="stream",
            saved_elements=((sd, "stream"),),  # the LayerNorm's input: the residual stream
            ops=[norm_op("ln_2", sd), cast_op("cast", sd), *linear_ops("mlp.0", s, cfg.mlp_dim, d, bias=True),
                 activation_op("gelu", float(s * cfg.mlp_dim)), *linear_ops("mlp.3", s, d, cfg.mlp_dim, bias=True),
                 *residual_ops("residual", sd)],
        ))
    heads = [_norm("encoder.ln", d, dtype), _linear("heads.head", cfg.num_classes, d, dtype)]
    registered += heads
    layers.append(_layer(
        "heads", heads,  # encoder.ln + heads.head (class token only)
        forward_flops_per_sample=2.0 * d * cfg.num_classes,
        activation_bytes_per_sample=float(ACTIVATION_ELEMENT_BYTES * (s * d + d)),
        ops=[norm_op("encoder.ln", sd), *linear_ops("heads.head", 1, cfg.num_classes, d, bias=True)],
    ))
    return _model(name, layers, registered, tokens_per_sample=s,
                  published_param_count=published_param_count, source=source)


def build_resnet(
    cfg: ResNetConfig,
    *,
    name: str = "resnet-custom",
    seq_len: int | None = None,
    dtype: str = "float32",
    flash_attention: bool = False,
    published_param_count: int | None = None,
    source: str = "",
) -> ModelSpec:
    """torchvision ``ResNet`` with ``Bottleneck`` blocks: stem, one layer per block, ``fc``.

    A block runs ``conv1, bn1, conv2, bn2, conv3, bn3`` and then, where present, its
    ``downsample`` branch (as torchvision's ``Bottleneck.forward`` does), so in backward
    the downsample gradients are ready before ``bn3``'s. ``seq_len`` does not apply to
    an image model and is rejected.
    """
    del flash_attention
    dtype_size_bytes(dtype)
    if seq_len is not None:
        raise WorkloadError(f"--seq-len: {name} is an image model without a sequence length; "
                            f"leave --seq-len unset")
    if len(cfg.layers) != len(cfg.planes):
        raise WorkloadError(f"model {name!r}: layers {cfg.layers} and planes {cfg.planes} differ in length")
    e = ACTIVATION_ELEMENT_BYTES
    hw = _conv_out(cfg.image_size, 7, 2, 3)
    c = cfg.stem_channels
    stem_flops = 2.0 * hw * hw * c * cfg.in_channels * 49
    pool_hw = _conv_out(hw, 3, 2, 1)
    stem_act = e * (cfg.in_channels * cfg.image_size ** 2  # conv1 input
                    + 2 * c * hw * hw  # bn1 input, relu output (= maxpool input)
                    + c * pool_hw * pool_hw) + 8 * c * pool_hw * pool_hw  # maxpool output + int64 indices
    stem = [_conv2d("conv1", (c, cfg.in_channels, 7, 7), dtype), _norm("bn1", c, dtype)]
    registered = list(stem)
    image = float(cfg.in_channels * cfg.image_size ** 2)
    pooled = float(c * pool_hw * pool_hw)
    stem_ops = [cast_op("cast_image", image),
                *conv_ops("conv1", in_elements=image, out_hw=hw, in_channels=cfg.in_channels, out_channels=c,
                          kernel=7, channels_last=cfg.channels_last, stride=2),
                # max_pool2d_with_indices: read the input, write the output and int64 indices;
                # backward zero-fills the input gradient and scatters into it.
                MemoryOp(name="maxpool", elements=float(c * hw * hw), forward=((1, "act"),),
                         backward=((2, "act"),)),
                MemoryOp(name="maxpool.out", elements=pooled, forward=((1, "act"), (2, "f32")),
                         backward=((1, "act"), (2, "f32")))]
    layers = [_layer("conv1", stem,  # + bn1, relu, maxpool
                     forward_flops_per_sample=stem_flops, activation_bytes_per_sample=float(stem_act),
                     ops=stem_ops)]
    hw = pool_hw
    inplanes = c
    for stage, (blocks, planes) in enumerate(zip(cfg.layers, cfg.planes), start=1):
        for b in range(blocks):
            stride = 2 if (stage > 1 and b == 0) else 1
            out_c = planes * cfg.expansion
            p = f"layer{stage}.{b}"
            out_hw = _conv_out(hw, 3, stride, 1)
            modules = [
                _conv2d(f"{p}.conv1", (planes, inplanes, 1, 1), dtype), _norm(f"{p}.bn1", planes, dtype),
                _conv2d(f"{p}.conv2", (planes, planes, 3, 3), dtype), _norm(f"{p}.bn2", planes, dtype),
                _conv2d(f"{p}.conv3", (out_c, planes, 1, 1), dtype), _norm(f"{p}.bn3", out_c, dtype),
            ]
            flops = 2.0 * (hw * hw * planes * inplanes
                           + out_hw * out_hw * planes * planes * 9
                           + out_hw * out_hw * out_c * planes)
            act = 2 * (planes * hw * hw + planes * out_hw * out_hw + out_c * out_hw * out_hw)
            x_in, mid_in, mid_out, y = (float(n) for n in (inplanes * hw * hw, planes * hw * hw,
                                                              planes * out_hw * out_hw, out_c * out_hw * out_hw))
            cl = cfg.channels_last
            ops = [*conv_ops("conv1", in_elements=x_in, out_hw=hw, in_channels=inplanes, out_channels=planes,
                             kernel=1, channels_last=cl),
                   *conv_ops("conv2", in_elements=mid_in, out_hw=out_hw, in_channels=planes,
                             out_channels=planes, kernel=3, channels_last=cl, stride=stride),
                   *conv_ops("conv3", in_elements=mid_out, out_hw=out_hw, in_channels=planes,
                             out_channels=out_c, kernel=1, channels_last=cl, relu=False)]
            if stride != 1 or inplanes != out_c:
                modules += [_conv2d(f"{p}.downsample.0", (out_c, inplanes, 1, 1), dtype),
                            _norm(f"{p}.downsample.1", out_c, dtype)]
                flops += 2.0 * out_hw * out_hw * out_c * inplanes
                act += out_c * out_hw * out_hw
                ops += conv_ops("downsample.0", in_elements=x_in, out_hw=out_hw, in_channels=inplanes,
                                out_channels=out_c, kernel=1, channels_last=cl, relu=False)
            # out += identity; relu. Backward sums the gradient reaching the block input from
            # its two branches.
            ops += [MemoryOp(name="residual", elements=y, forward=((3, "act"),), backward=()),
                    activation_op("relu", y, "relu"),
                    MemoryOp(name="branch_sum", elements=x_in, forward=(), backward=((3, "act"),))]
            registered += modules
            layers.append(_layer(p, modules, forward_flops_per_sample=flops,
                                 activation_bytes_per_sample=float(e * act), unit=p,
                                 input_bytes_per_sample=float(e * inplanes * hw * hw), ops=ops))
            inplanes, hw = out_c, out_hw
    fc = _linear("fc", cfg.num_classes, inplanes, dtype)
    registered.append(fc)
    layers.append(_layer(
        "fc", [fc],  # + avgpool
        forward_flops_per_sample=2.0 * inplanes * cfg.num_classes,
        activation_bytes_per_sample=float(e * inplanes),
        ops=[MemoryOp(name="avgpool", elements=float(inplanes * hw * hw), forward=((1, "act"),),
                      backward=((1, "act"),)),
             *linear_ops("fc", 1, cfg.num_classes, inplanes, bias=True)],
    ))
    # Every BatchNorm2d keeps running_mean and running_var (fp32, one per channel) and an
    # int64 num_batches_tracked (torch/nn/modules/batchnorm.py, _NormBase); its weight is
    # the only 1-D ``.weight`` a ResNet has.
    buffers = tuple(ParamSpec(name=f"{p.name.removesuffix('.weight')}.{b}", shape=shape, dtype=t)
                    for m in registered for p in m.params if p.name.endswith(".weight") and len(p.shape) == 1
                    for b, shape, t in (("running_mean", p.shape, "float32"), ("running_var", p.shape, "float32"),
                                        ("num_batches_tracked", (), "int64")))
    return _model(name, layers, registered, tokens_per_sample=None,
                  published_param_count=published_param_count, source=source, buffers=buffers)


def conv_ops(name: str, *, in_elements: float, out_hw: int, in_channels: int, out_channels: int, kernel: int,
             channels_last: bool, norm: bool = True, relu: bool = True, stride: int = 1) -> list[OpSpec]:
    """A convolution as cuDNN runs it, per sample, with its BatchNorm and ReLU.

    The convolution is an implicit GEMM (output pixels x output channels, reduction over
    input channels x kernel area). In PyTorch's default NCHW layout cuDNN's 16-bit
    tensor-core kernels transpose the input and output to NHWC and back, in the forward and
    in both backward convolutions (``nchwToNhwcKernel``/``nhwcToNchwKernel`` in profiles).
    Training BatchNorm reads its input twice (statistics, then normalisation) and writes
    the output; its backward reads the gradient and the input twice and writes one.
    """
    out = float(out_channels * out_hw * out_hw)
    ops: list[OpSpec] = [MatmulOp(name=name, m=out_hw * out_hw, n=out_channels, k=in_channels * kernel * kernel,
                                  kind="conv", kernel=kernel, stride=stride)]
    if not channels_last:
        ops += [MemoryOp(name=f"{name}.nchw_in", elements=in_elements, forward=((2, "nchw"),),
                         backward=((4, "nchw"),)),
                MemoryOp(name=f"{name}.nchw_out", elements=out, forward=((2, "nchw"),), backward=((4, "nchw"),))]
    if norm:
        ops.append(MemoryOp(name=f"{name}.bn", elements=out, forward=((3, "act"),), backward=((5, "act"),)))
    if relu:
        ops.append(activation_op(f"{name}.relu", out, "relu"))
    return ops


def build_model(cfg: ModelConfig, **kwargs: object) -> ModelSpec:
    """Build a :class:`ModelSpec` from any catalog config (dispatch on its class)."""
    try:
        builder = BUILDERS[type(cfg)]
    except KeyError:
        raise WorkloadError(f"model config {type(cfg).__name__!r} has no builder") from None
    return builder(cfg, **kwargs)



BUILDERS: dict[type, Callable[..., ModelSpec]] = {
    GPT2Config: build_gpt2,
    LlamaConfig: build_llama,
    BertConfig: build_bert,
    ViTConfig: build_vit,
    ResNetConfig: build_resnet,
}
"""Builder for each config class."""
