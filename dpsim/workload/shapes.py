"""A decoder transformer given by its shape, ``--model transformer:KEY=VALUE,...``, built by the catalog's builders.

::

    transformer:hidden=4096,layers=32,heads=32,ffn=11008,vocab=32000,seq=4096     # Llama-2-7B's shape
    transformer:hidden=14336,layers=70,heads=112,vocab=250880,seq=2048,act=gelu,norm=layernorm,pos=alibi,tied=true,embed_norm=true,dropout=0

A shape is lowered to the config of the catalog family that has its parts
(:func:`shape_config`): rmsnorm + swiglu + rope to :class:`~dpsim.workload.architectures.LlamaConfig`
(``LlamaForCausalLM``: no biases, grouped-query attention), layernorm + gelu/relu + learned or
ALiBi positions to :class:`~dpsim.workload.architectures.GPT2Config` (GPT-2, OPT and BLOOM
blocks: biases everywhere, fused QKV, MLP of ``ffn``); a shape that mixes the two families is
refused, naming the two that exist. The model is then the catalog's own layer list, so a
shape equal to a catalog entry predicts exactly what that entry predicts, under every layout.

RoPE blocks also take a sliding window (``window``, ``window_layers``: all, alternate or Gemma 3's ``5:1``),
partial rotary (``rotary_pct``), parallel attention and MLP (``parallel``), Gemma 2's extra norms and logit soft-caps
(``sandwich_norms``, ``attn_softcap``, ``final_softcap``), Cohere's weight-only eager LayerNorm, logit scale and
per-head query/key norm weights (``norm=layernorm_nobias``, ``logit_scale``, ``qk_norm_whole``), Qwen2-MoE's gated
shared expert (``shared_gate``) and DeepSeek's multi-head latent attention (``kv_lora_rank`` and its widths); see
docs/models.md.

A transformers configuration of such a family (:func:`shape_of_hf_config`) is read into a
shape by its attribute names, so ``--model transformers:LlamaConfig(...)`` and the other
decoders it lists need no torch tracing.
"""

from __future__ import annotations

import math
import re
from dataclasses import fields, replace
from collections.abc import Mapping
from typing import Any

from dpsim.errors import WorkloadError
from dpsim.files import DuplicateJsonKey, json_object_no_duplicates, path_kind, read_text_capped
from dpsim.frozen import frozen_dataclass
from dpsim.limits import MAX_LAYERS
from dpsim.workload.architectures import GPT2Config, LlamaConfig, window_pattern

SHAPE_PREFIX = "transformer:"
"""What starts a shape ``--model`` (``transformers:`` with an s is the library's configs)."""

ACTIVATIONS = ("swiglu", "geglu", "gelu", "gelu_new", "relu", "relu2")
GATED = ("swiglu", "geglu")
"""Gated MLPs: three matrices of ``ffn`` (gate, up, down), whose width is a model's choice."""
GPT_ACTIVATIONS = ("gelu", "gelu_new", "relu")
"""The MLPs of GPT-2, OPT and BLOOM blocks (learned or ALiBi positions)."""
NORMS = ("rmsnorm", "layernorm", "layernorm_nobias")
"""``layernorm_nobias``: a LayerNorm with a weight and no bias, run eagerly (Cohere's ``CohereLayerNorm``)."""
POSITIONS = ("rope", "learned", "alibi")
BIASES = ("none", "qkv", "attn", "mlp", "all")
"""Which projections have biases: ``none`` (Llama, Mistral, Nemotron-4, Gemma), ``qkv`` (Qwen2's q, k
and v), ``attn`` (q, k, v and the output: HF Llama's ``attention_bias``), ``mlp`` (the MLP's alone:
GPT-J's ``fc_in``/``fc_out``, HF Llama's ``mlp_bias``), ``all`` (attention and MLP:
GPT-2, OPT, BLOOM, GPT-NeoX). The default is the family's: ``all`` with learned or ALiBi positions
(the GPT-2 builder's blocks), ``none`` with RoPE."""
_BOOLS = {"true": True, "false": False, "1": True, "0": False, "yes": True, "no": False}
GPT2_DROPOUT = 0.1
"""HF ``GPT2Config``'s ``resid_pdrop``/``embd_pdrop``/``attn_pdrop``: layernorm shapes' default dropout."""
_MAX_DIM = 2 ** 31
"""Upper bound of every integer field: larger shapes are typos, and the counts stay exact in floats."""


@frozen_dataclass
class TransformerShape:
    """A decoder-only transformer's shape, as ``--model transformer:...`` gives it."""

    hidden: int
    """Model width (``hidden_size``, ``n_embd``, ``d_model``)."""
    layers: int
    """Transformer blocks."""
    heads: int
    """Query attention heads; divides ``hidden``."""
    kv_heads: int
    """Key-value heads (grouped-query attention); divides ``heads``. Equal to ``heads`` unless given."""
    ffn: int
    """MLP inner width (``intermediate_size``, ``ffn_dim``); ``4 * hidden`` unless given (required
    with swiglu, whose width is a model's choice)."""
    vocab: int
    """Vocabulary size: rows of the embedding table."""
    seq: int
    """Training sequence length in tokens."""
    act: str
    """MLP activation: ``swiglu``, ``geglu`` (gated, three matrices) or ``gelu``, ``gelu_new``,
    ``relu``, ``relu2`` (squared ReLU, Nemotron-4) (two)."""
    norm: str
    """``rmsnorm`` (weight only), ``layernorm`` (weight and bias) or ``layernorm_nobias`` (weight only, centred:
    Cohere)."""
    pos: str
    """Positions: ``rope`` and ``alibi`` have no parameters, ``learned`` a table of ``positions`` rows."""
    positions: int
    """Rows of a learned position table (OPT keeps 2 more than its context); ``seq`` unless given."""
    tied: bool
    """The LM head shares the embedding's weight."""
    embed_norm: bool
    """A LayerNorm after the word embeddings (BLOOM)."""
    dropout: float
    """Dropout probability after the embeddings, each sub-block and on the attention
    probabilities (layernorm blocks; GPT-2's 0.1 unless given, BLOOM trains with 0); time only."""
    name: str
    """The model's name in the output."""
    head_dim: int = 0
    """Width of one attention head; 0: ``hidden / heads`` (Qwen3 sets 128 whatever the width)."""
    qk_norm: bool = False
    """An RMSNorm over each query and key head (Qwen3)."""
    experts: int = 0
    """Routed experts in each MoE layer; 0: a dense model (rmsnorm + swiglu blocks only)."""
    top_k: int = 0
    """Experts each token is routed to (required with ``experts``)."""
    moe_ffn: int = 0
    """Inner width of one routed expert (required with ``experts``)."""
    shared_experts: int = 0
    """Experts every token runs through (DeepSeek's shared expert)."""
    shared_ffn: int = 0
    """Inner width of one shared expert; 0: ``moe_ffn``."""
    shared_gate: bool = False
    """A sigmoid gate on the shared experts' output, ``sigmoid(x·w) * shared(x)``, ``w`` of ``hidden x 1``
    (Qwen2-MoE's ``shared_expert_gate``)."""
    dense_layers: int = 0
    """Blocks before the first MoE layer, with the dense ``ffn`` MLP (DeepSeek-V3: 3)."""
    bias: str = ""
    """Which projections have biases (:data:`BIASES`); empty: the family's default, which
    :func:`check_shape` fills in."""
    parallel: int = 0
    """Attention and the MLP in parallel on the block's input: 1 with one norm both read (GPT-J,
    Falcon-7B, PaLM), 2 with a norm each (GPT-NeoX's ``use_parallel_residual``); 0: in sequence."""
    head_bias: bool = False
    """A bias on the untied output head (GPT-J's ``lm_head``)."""
    q_lora_rank: int = 0
    """Multi-head latent attention (with ``kv_lora_rank``): the query latent's width; 0: one ``q_proj``
    (DeepSeek-V2-Lite)."""
    kv_lora_rank: int = 0
    """Multi-head latent attention (DeepSeek-V2/V3) when > 0: the compressed key-value latent's width."""
    qk_nope_head_dim: int = 0
    """MLA: the part of a query/key head without rotary positions."""
    qk_rope_head_dim: int = 0
    """MLA: the rotary part of a query/key head (one rotary key shared by all heads)."""
    v_head_dim: int = 0
    """MLA: a value head's width."""
    router_bias: bool = False
    """The router's per-expert score correction bias (DeepSeek-V3's ``e_score_correction_bias``)."""
    sandwich_norms: bool = False
    """Gemma 2's four norms a block: one more on each sub-block's output before its residual add."""
    attn_softcap: float = 0.0
    """Attention logit soft-cap (Gemma 2: 50), ``cap · tanh(scores / cap)``; 0: none."""
    final_softcap: float = 0.0
    """Final logit soft-cap (Gemma 2: 30); 0: none."""
    rotary_pct: float = 1.0
    """The share of each query/key head that RoPE rotates (GPT-NeoX's ``rotary_pct`` 0.25, Phi-3's and
    Nemotron's ``partial_rotary_factor``, GPT-J's ``rotary_dim / head_dim``); 1: the whole head."""
    window: int = 0
    """Sliding-window attention: each query attends to itself and the ``window - 1`` tokens before it
    (Mistral's ``sliding_window``); 0: the whole causal prefix (RoPE blocks)."""
    qk_norm_whole: bool = False
    """With ``qk_norm``: the query and key norms' weights span every head (``heads x head_dim`` and
    ``kv_heads x head_dim``: Cohere's ``use_qk_norm``, OLMo 2), not one head's width shared by all."""
    logit_scale: bool = False
    """The logits multiplied by a constant before the loss (Cohere's ``logit_scale``): one element-wise pass."""
    window_layers: str = "all"
    """With ``window``: ``all`` blocks local (Mistral), ``alternate`` (Gemma 2: even blocks local,
    odd ones global) or ``N:1``, ``N`` local blocks then one global (Gemma 3: ``5:1``)."""


_INT_FIELDS = ("hidden", "layers", "heads", "kv_heads", "ffn", "vocab", "seq", "positions")
_MOE_INT_FIELDS = ("head_dim", "experts", "top_k", "moe_ffn", "shared_experts", "shared_ffn", "dense_layers",
                   "window", "parallel", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
                   "v_head_dim")
"""Integer keys that may be 0 (not set): the head width, the expert layers and the attention window."""
WINDOW_LAYERS = ("all", "alternate", "N:1")
"""``window_layers`` values; ``N:1`` is any count of local blocks before each global one (``1:1`` is read as
``alternate``)."""
_REQUIRED = ("hidden", "layers", "heads", "vocab", "seq")
_KEYS = tuple(f.name for f in fields(TransformerShape))
_CHOICES = {"act": ACTIVATIONS, "norm": NORMS, "pos": POSITIONS}
_FAMILIES = ("pos=rope with any norm and act (the Llama builder: Llama, Nemotron-4, Gemma), or "
             "norm=layernorm with act=gelu/gelu_new/relu and pos=learned/alibi (GPT-2, OPT, BLOOM)")


def is_shape_ref(model: object) -> bool:
    """Whether ``--model`` gives a transformer by its shape (``transformer:KEY=VALUE,...``)."""
    return isinstance(model, str) and model.strip().lower().startswith(SHAPE_PREFIX)


def _fail(key: str, value: object, allowed: str) -> WorkloadError:
    return WorkloadError(f"--model transformer: {key}={value} is not valid; {allowed}")


def parse_shape(text: str) -> TransformerShape:
    """``transformer:KEY=VALUE,...`` as a checked :class:`TransformerShape` (one-line errors)."""
    body = text.strip()[len(SHAPE_PREFIX):]
    given: dict[str, str] = {}
    for item in body.split(","):
        if not item.strip():
            continue
        key, eq, value = item.partition("=")
        key, value = key.strip().lower(), value.strip()
        if not eq or not value:
            hint = " (a transformers config is transformers:LlamaConfig(...))" if "(" in item else ""
            raise WorkloadError(f"--model transformer: {item.strip()!r} is not KEY=VALUE{hint}; keys: {', '.join(_KEYS)}")
        if key not in _KEYS:
            raise WorkloadError(f"--model transformer: {key!r} is not a shape key; keys: {', '.join(_KEYS)}")
        if key in given:
            raise WorkloadError(f"--model transformer: {key} is given twice ({given[key]} and {value}); give it once")
        given[key] = value
    missing = [k for k in _REQUIRED if k not in given]
    if missing:
        raise WorkloadError(f"--model transformer: {', '.join(missing)} missing; required: {', '.join(_REQUIRED)}")
    values: dict[str, Any] = {}
    for keys, low in ((_INT_FIELDS, 1), (_MOE_INT_FIELDS, 0)):
        for key in keys:
            if key in given:
                value = _ascii_int(given[key])
                if value is None or not low <= value <= _MAX_DIM:
                    raise _fail(key, given[key], f"expected an integer from {low} to {_MAX_DIM:,}")
                values[key] = value
    for key, choices in _CHOICES.items():
        value = given.get(key, choices[0]).lower()
        if value not in choices:
            raise _fail(key, given[key], f"allowed: {', '.join(choices)}")
        values[key] = value
    layers_text = given.get("window_layers", "all").lower()
    if window_pattern(layers_text) is None:
        raise _fail("window_layers", given["window_layers"], "allowed: all, alternate, or N:1 (N local blocks, "
                                                             "then one global: Gemma 3's 5:1)")
    values["window_layers"] = "alternate" if layers_text == "1:1" else layers_text
    if "bias" in given:
        if given["bias"].lower() not in BIASES:
            raise _fail("bias", given["bias"], f"allowed: {', '.join(BIASES)}")
        values["bias"] = given["bias"].lower()
    for key in ("tied", "embed_norm", "qk_norm", "head_bias", "sandwich_norms", "router_bias", "qk_norm_whole",
                "logit_scale", "shared_gate"):
        value = given.get(key, "false").lower()
        if value not in _BOOLS:
            raise _fail(key, given[key], "allowed: true, false")
        values[key] = _BOOLS[value]
    if "ffn" not in values and values["act"] in GATED and values.get("experts") and not values.get("dense_layers"):
        values["ffn"] = values.get("moe_ffn") or 4 * values["hidden"]  # no dense MLP: unused
    if "ffn" not in values and values["act"] in GATED:
        raise WorkloadError(f"--model transformer: ffn missing; act={values['act']} needs the MLP width (e.g. "
                            f"ffn=11008 for hidden=4096), or give act=gelu for 4 x hidden")
    values.setdefault("ffn", 4 * values["hidden"])
    values.setdefault("kv_heads", values["heads"])
    values.setdefault("positions", values["seq"])
    values["dropout"] = _dropout(given.get("dropout"), values["norm"], values["pos"])
    for key in ("attn_softcap", "final_softcap"):
        if key in given:
            values[key] = _ascii_float(key, given[key], _CAP_ALLOWED, lambda cap: 0.0 <= cap < float("inf"))
    if "rotary_pct" in given:
        values["rotary_pct"] = _ascii_float("rotary_pct", given["rotary_pct"], _SHARE_ALLOWED,
                                            lambda pct: 0.0 < pct <= 1.0)
    values["name"] = given.get("name", "transformer")
    if not values["name"].isprintable():  # a newline or an escape sequence went raw into every table's title
        raise _fail("name", repr(values["name"]), "expected printable text on one line")
    return check_shape(TransformerShape(**values))


_ASCII_INT = re.compile(r"[0-9](_?[0-9])*")
"""A shape's integer: ASCII digits, ``_`` between them as Python writes ``4_096``. ``str.isdigit`` took
``window=²`` (a superscript two) and ``int`` then raised ValueError: a traceback, not a line."""
_ASCII_FLOAT = re.compile(r"[+-]?([0-9](_?[0-9])*(\.([0-9](_?[0-9])*)?)?|\.[0-9](_?[0-9])*)([eE][+-]?[0-9]+)?")
"""A shape's number: ASCII decimal (``0.25``, ``.5``, ``1e-3``); Python's ``float`` also read ``nan``, ``inf``,
Arabic-Indic digits and ``1_0``."""
_CAP_ALLOWED = "expected a cap above 0, or 0 for none"
_SHARE_ALLOWED = "expected a share above 0 and at most 1"


def _ascii_int(text: str) -> int | None:
    return int(text) if _ASCII_INT.fullmatch(text) else None


def _ascii_float(key: str, text: str, allowed: str, ok) -> float:
    """``text`` as a finite float that ``ok`` accepts, else refused naming the text as given: ``rotary_pct=1e-400``
    was refused as ``rotary_pct=0.0`` and ``final_softcap=1e400`` as ``inf``, values the user never wrote."""
    value = float(text) if _ASCII_FLOAT.fullmatch(text) else math.nan
    if not (math.isfinite(value) and ok(value)):
        raise _fail(key, text, allowed)
    return value


def _shown(value: object) -> object:
    """A field's value in a refusal: a JSON string keeps its quotes (``"0.5"`` printed as 0.5 read as valid), a
    boolean is written as the shape and JSON write it (``true``, not Python's ``True``)."""
    if isinstance(value, bool):
        return str(value).lower()
    return repr(value) if isinstance(value, str) else value


def _dropout(text: str | None, norm: str, pos: str) -> float:
    # Only the GPT-2 builder's blocks (learned or ALiBi positions) have dropout kernels.
    gpt = norm == "layernorm" and pos != "rope"
    if text is None:
        return GPT2_DROPOUT if gpt else 0.0
    value = float(text) if _ASCII_FLOAT.fullmatch(text) else -1.0
    if not 0.0 <= value < 1.0:
        raise _fail("dropout", text, "expected a probability from 0 up to (not including) 1")
    if value == 0.0 and any(c in "123456789" for c in text.lower().partition("e")[0]):
        # dropout=1e-400 underflowed to 0 and built blocks with no dropout kernels, a value the user never wrote.
        raise _fail("dropout", text, "it underflows to 0 in double precision; give dropout=0 or a probability "
                                     "from 1e-300 up to (not including) 1")
    if value and not gpt:
        which = "rmsnorm (Llama)" if norm == "rmsnorm" else "pos=rope"
        raise _fail("dropout", text, f"{which} blocks have no dropout; give dropout=0 or leave it out")
    return value


def check_shape(shape: TransformerShape, *, origin: str = "--model transformer",
                names: Mapping[str, str] | None = None) -> TransformerShape:
    """The rules between fields, each refused in one line naming the field, value and what is allowed.

    ``origin`` and ``names`` say where the shape came from: a transformers configuration is refused
    by its own class and attribute names (``n_layer=0``), not by the shape keys it was read into."""
    def n(key: str) -> str:
        return (names or {}).get(key, key)

    def fail(key: str, value: object, allowed: str) -> WorkloadError:
        value = str(value).lower() if isinstance(value, bool) else value  # sandwich_norms=True: the shape says true
        return WorkloadError(f"{origin}: {n(key)}={value} is not valid; {allowed}")

    for key in _INT_FIELDS + _MOE_INT_FIELDS:  # before any division by them
        value, low = getattr(shape, key), 1 if key in _INT_FIELDS else 0
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= _MAX_DIM:
            # A config.json's "1024" (a JSON string) printed as 1024 read as a valid integer refused.
            raise fail(key, repr(value) if isinstance(value, str) else value,
                       f"expected an integer from {low} to {_MAX_DIM:,}")
    dropout = shape.dropout
    if isinstance(dropout, bool) or not isinstance(dropout, (int, float)) or not 0.0 <= dropout < 1.0:
        raise fail("dropout", dropout, "expected a probability from 0 up to (not including) 1")
    if shape.layers > MAX_LAYERS:  # every block is costed one by one: 2^31 of them never finished (limits.py)
        raise fail("layers", shape.layers, f"expected at most {MAX_LAYERS:,} blocks (the deepest transformers "
                                           f"trained have 1,000)")
    if shape.hidden % shape.heads and not shape.head_dim:
        raise fail("heads", shape.heads, f"it must divide {n('hidden')}={shape.hidden}"
                                           f"{'' if names else ' (or give head_dim=)'}")
    if shape.heads % shape.kv_heads:
        raise fail("kv_heads", shape.kv_heads, f"it must divide {n('heads')}={shape.heads}")
    if shape.pos == "learned" and shape.positions < shape.seq:
        raise fail("positions", shape.positions, f"a learned table needs at least {n('seq')}={shape.seq} rows")
    for key, choices in (("norm", NORMS), ("act", ACTIVATIONS), ("pos", POSITIONS), ("bias", ("",) + BIASES)):
        if getattr(shape, key) not in choices:  # a config's value (parse_shape checked the shape keys)
            raise fail(key, getattr(shape, key), f"allowed: {', '.join(c for c in choices if c)}")
    if window_pattern(shape.window_layers) is None:
        raise fail("window_layers", _shown(shape.window_layers), f"allowed: {', '.join(WINDOW_LAYERS)}")
    # RoPE blocks are built by the Llama builder (any norm, MLP and biases); learned and ALiBi
    # positions by the GPT-2 builder (GPT-2, OPT, BLOOM: LayerNorm, a two-matrix MLP, biases everywhere).
    rope = shape.pos == "rope"
    gpt = not rope and shape.norm == "layernorm" and shape.act in GPT_ACTIVATIONS
    if not (rope or gpt):
        raise WorkloadError(f"{origin}: norm={shape.norm}, act={shape.act}, pos={shape.pos} is not a "
                            f"modelled block; allowed: {_FAMILIES}")
    bias = shape.bias or ("none" if rope else "all")
    if gpt and bias != "all":
        raise fail("bias", bias, "blocks with learned or ALiBi positions (GPT-2, OPT, BLOOM) have biases on every "
                                 "projection: give bias=all, or pos=rope")
    if gpt and shape.kv_heads != shape.heads:
        raise fail("kv_heads", shape.kv_heads, f"blocks with learned or ALiBi positions have full multi-head "
                                               f"attention: give {n('kv_heads')}={shape.heads}, or pos=rope")
    if rope and shape.embed_norm:
        raise fail("embed_norm", "true", "the embedding LayerNorm exists only with learned or ALiBi positions "
                                         "(BLOOM)")
    if shape.parallel not in (0, 1, 2):
        raise fail("parallel", shape.parallel, "allowed: 0 (in sequence), 1 (parallel, one shared norm: GPT-J, "
                                               "Falcon), 2 (parallel, a norm each: GPT-NeoX)")
    if shape.parallel and not rope:
        raise fail("parallel", shape.parallel, "parallel blocks are built with pos=rope (GPT-J, GPT-NeoX, Falcon)")
    if shape.parallel and shape.experts:
        raise fail("parallel", shape.parallel, "expert layers run after attention: give parallel=0")
    if shape.head_bias and (shape.tied or not rope):
        raise fail("head_bias", "true", "a bias is on an untied output head with pos=rope (GPT-J): give tied=false")
    for key in ("attn_softcap", "final_softcap"):
        cap = getattr(shape, key)
        if isinstance(cap, bool) or not isinstance(cap, (int, float)) or not 0.0 <= cap < float("inf"):
            raise fail(key, _shown(cap), _CAP_ALLOWED)
    if (shape.sandwich_norms or shape.attn_softcap or shape.final_softcap) and not rope:
        key = "sandwich_norms" if shape.sandwich_norms else "attn_softcap" if shape.attn_softcap else "final_softcap"
        raise fail(key, getattr(shape, key), "Gemma 2's norms and soft-caps are built with pos=rope")
    if (shape.sandwich_norms or shape.attn_softcap) and (shape.experts or shape.parallel):
        key = "sandwich_norms" if shape.sandwich_norms else "attn_softcap"
        raise fail(key, getattr(shape, key), "Gemma 2's block runs in sequence without expert layers: give "
                                             "parallel=0 and no experts")
    mla_keys = ("q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
    if shape.kv_lora_rank:
        missing = [n(k) for k in mla_keys[1:] if not getattr(shape, k)]
        if missing:
            raise WorkloadError(f"{origin}: {', '.join(missing)} missing; multi-head latent attention "
                                f"({n('kv_lora_rank')}={shape.kv_lora_rank}) needs the widths of its heads' parts")
        clash = next((k for k in ("head_dim", "qk_norm", "parallel", "window", "sandwich_norms", "attn_softcap")
                      if getattr(shape, k)), None) or ("norm" if shape.norm != "rmsnorm" or not rope else None) \
            or ("kv_heads" if shape.kv_heads != shape.heads else None) or ("bias" if bias != "none" else None) \
            or ("rotary_pct" if shape.rotary_pct != 1.0 else None)
        if clash:
            raise fail(clash, getattr(shape, clash), f"multi-head latent attention ({n('kv_lora_rank')}=) is built "
                                                     f"as DeepSeek-V2/V3 run it: RoPE, rmsnorm, no biases, one "
                                                     f"key-value latent for all {n('heads')}")
    elif any(getattr(shape, k) for k in mla_keys):
        key = next(k for k in mla_keys if getattr(shape, k))
        raise fail(key, getattr(shape, key), f"it shapes multi-head latent attention: give {n('kv_lora_rank')}= too")
    if shape.qk_norm_whole and not shape.qk_norm:
        raise fail("qk_norm_whole", "true", f"it shapes the query and key norms: give {n('qk_norm')}=true too")
    if shape.logit_scale and not rope:
        raise fail("logit_scale", "true", "the logit scale is built with pos=rope (Cohere)")
    if shape.shared_gate and not shape.shared_experts:
        raise fail("shared_gate", "true", f"the gate scales the shared experts' output: give "
                                          f"{n('shared_experts')}= too")
    if shape.router_bias and not shape.experts:
        raise fail("router_bias", "true", f"a router's bias needs expert layers: give {n('experts')}=")
    pct = shape.rotary_pct
    if isinstance(pct, bool) or not isinstance(pct, (int, float)) or not 0.0 < pct <= 1.0:
        raise fail("rotary_pct", _shown(pct), _SHARE_ALLOWED)
    if pct != 1.0 and not rope:
        raise fail("rotary_pct", pct, "partial rotary embeddings exist only with pos=rope")
    if pct != 1.0 and int((shape.head_dim or shape.hidden // shape.heads) * pct) < 1:
        raise fail("rotary_pct", pct, "it rotates no element of a head: give a larger share")
    if shape.window_layers != "all" and not shape.window:
        raise fail("window_layers", shape.window_layers, f"alternating local blocks need a window: give "
                                                         f"{n('window')}=TOKENS, or leave {n('window_layers')} out")
    if not rope and shape.window:
        raise fail("window", shape.window, "sliding-window attention is built for RoPE blocks (Mistral, Gemma 2): "
                                           "give pos=rope, or window=0")
    if not rope and (shape.experts or shape.qk_norm or shape.head_dim):
        key = "experts" if shape.experts else "qk_norm" if shape.qk_norm else "head_dim"
        raise fail(key, getattr(shape, key), "expert layers, qk_norm and head_dim exist only with pos=rope")
    if shape.experts and (shape.norm, shape.act) != ("rmsnorm", "swiglu"):
        key = "norm" if shape.norm != "rmsnorm" else "act"
        raise fail(key, getattr(shape, key), "expert layers are built with norm=rmsnorm, act=swiglu (Mixtral, "
                                             "Qwen3-MoE, DeepSeek)")
    if shape.experts and bias in ("mlp", "all"):
        raise fail("bias", bias, "expert MLPs have no biases: give bias=none, qkv or attn")
    if shape.experts:
        if not 1 <= shape.top_k <= shape.experts:
            raise fail("top_k", shape.top_k, f"give the experts each token is routed to, 1 to "
                                             f"{n('experts')}={shape.experts}")
        if not shape.moe_ffn:
            raise WorkloadError(f"{origin}: {n('moe_ffn')} missing; {n('experts')}= needs the width of one expert "
                                "(e.g. moe_ffn=14336 for Mixtral-8x7B)")
        if shape.dense_layers >= shape.layers:
            raise fail("dense_layers", shape.dense_layers, f"it must be below {n('layers')}={shape.layers}")
    elif any(getattr(shape, k) for k in ("top_k", "moe_ffn", "shared_experts", "shared_ffn", "dense_layers")):
        key = next(k for k in ("top_k", "moe_ffn", "shared_experts", "shared_ffn", "dense_layers") if getattr(shape, k))
        raise fail(key, getattr(shape, key), f"it shapes expert layers: give {n('experts')}= too")
    return replace(shape, bias=bias)


def shape_ref(shape: TransformerShape) -> str:
    """The ``--model`` text that gives ``shape`` (:func:`parse_shape` reads it back)."""
    def text(value: object) -> str:
        return str(value).lower() if isinstance(value, bool) else str(value)
    def default(key: str) -> bool:
        if key == "bias":  # the family's own biases are left out
            return shape.bias in ("", "none" if shape.pos == "rope" else "all")
        if key == "window_layers":
            return shape.window_layers == "all"
        if key == "rotary_pct":
            return shape.rotary_pct == 1.0
        if key in ("attn_softcap", "final_softcap", "sandwich_norms", "router_bias", "qk_norm_whole", "logit_scale",
                   "shared_gate"):
            return not getattr(shape, key)
        return key in _MOE_INT_FIELDS + ("qk_norm", "head_bias") and not getattr(shape, key)
    # The head width, expert keys and biases only when set, so a shape reads as it always has.
    return SHAPE_PREFIX + ",".join(f"{f.name}={text(getattr(shape, f.name))}" for f in fields(shape)
                                   if not default(f.name))


def shape_config(shape: TransformerShape) -> GPT2Config | LlamaConfig:
    """The catalog config whose builder makes ``shape`` (see the module docstring)."""
    if shape.pos == "rope":
        bias = shape.bias or "none"
        return LlamaConfig(vocab_size=shape.vocab, hidden_size=shape.hidden, intermediate_size=shape.ffn,
                           norm=shape.norm, mlp_act=shape.act, qkv_bias=bias in ("qkv", "attn", "all"),
                           o_bias=bias in ("attn", "all"), mlp_bias=bias in ("mlp", "all"),
                           parallel_block=shape.parallel, lm_head_bias=shape.head_bias,
                           q_lora_rank=shape.q_lora_rank, kv_lora_rank=shape.kv_lora_rank,
                           qk_nope_head_dim=shape.qk_nope_head_dim, qk_rope_head_dim=shape.qk_rope_head_dim,
                           v_head_dim=shape.v_head_dim, router_bias=shape.router_bias,
                           sandwich_norms=shape.sandwich_norms, attn_softcap=shape.attn_softcap,
                           final_softcap=shape.final_softcap, qk_norm_whole_projection=shape.qk_norm_whole,
                           logit_scale=shape.logit_scale,
                           num_hidden_layers=shape.layers, num_attention_heads=shape.heads,
                           num_key_value_heads=shape.kv_heads, max_position_embeddings=shape.seq,
                           tie_word_embeddings=shape.tied, head_dim=shape.head_dim or None, qk_norm=shape.qk_norm,
                           num_experts=shape.experts, num_experts_per_tok=shape.top_k,
                           moe_intermediate_size=shape.moe_ffn, n_shared_experts=shape.shared_experts,
                           shared_expert_intermediate_size=shape.shared_ffn,
                           first_k_dense_replace=shape.dense_layers, shared_expert_gate=shape.shared_gate, sliding_window=shape.window,
                           rotary_dim=int((shape.head_dim or shape.hidden // shape.heads) * shape.rotary_pct)
                           if shape.rotary_pct != 1.0 else 0,
                           window_layers=shape.window_layers)
    return GPT2Config(vocab_size=shape.vocab, n_positions=shape.positions if shape.pos == "learned" else shape.seq,
                      n_embd=shape.hidden, n_layer=shape.layers, n_head=shape.heads, n_inner=shape.ffn,
                      activation_function=shape.act, position_embedding=shape.pos,
                      embedding_norm=shape.embed_norm, tie_word_embeddings=shape.tied,
                      resid_pdrop=shape.dropout, embd_pdrop=shape.dropout, attn_pdrop=shape.dropout)


def shape_param_count(shape: TransformerShape) -> int:
    """Parameters in closed form, independent of the builders (the tests compare the two).

    Per block: attention ``h·(q + 2·kv) + q·h`` weights (``q = heads·head_dim``, ``kv =
    kv_heads·head_dim``) and an MLP of ``(3 if gated else 2)·h·ffn``; biases ``q + 2·kv`` (``qkv``),
    ``+ h`` for the output projection (``attn``), ``+ ffn·(2 if gated else 1) + h`` for the MLP's
    (``all``, or the MLP's alone with ``mlp``); two norms, ``2·h`` each for LayerNorm (weight and bias),
    ``h`` for RMSNorm (one with ``parallel=1``, four with ``sandwich_norms``), q/k norms of a head's width each
    (``qk_norm``) or of the whole projections (``qk_norm_whole``). Multi-head latent attention
    in place of q/k/v/o: the query latent and its norm (or one ``q_proj``), the key-value latent with
    the shared rotary key, its norm, the up-projection and the output. Plus the embedding ``vocab·h``,
    a learned table ``positions·h``, the final norm, an untied head ``vocab·h`` (and its bias with
    ``head_bias``), a router bias per expert and MoE layer, the shared experts' gate ``h`` per MoE layer
    (``shared_gate``), and an embedding LayerNorm ``2·h``.
    """
    h, head_dim = shape.hidden, shape.head_dim or shape.hidden // shape.heads
    q, kv = shape.heads * head_dim, shape.kv_heads * head_dim
    norm = 2 * h if shape.norm == "layernorm" else h
    bias = shape.bias or ("none" if shape.pos == "rope" else "all")
    gated = shape.act in GATED
    # A parallel block's one shared norm (GPT-J, Falcon-7B); Gemma 2's four.
    norms = 1 if shape.parallel == 1 else 4 if shape.sandwich_norms else 2
    qk_norms = (q + kv if shape.qk_norm_whole else 2 * head_dim) if shape.qk_norm else 0
    attention = h * (q + 2 * kv) + q * h + norms * norm + qk_norms
    attention += (q + 2 * kv if bias in ("qkv", "attn", "all") else 0) + (h if bias in ("attn", "all") else 0)
    if shape.kv_lora_rank:
        # MLA: the query path (a latent with its norm, or one q_proj), the key-value latent plus the shared
        # rotary key, its norm, the up-projection to every head's key (no-rope part) and value, the output.
        qk, r = shape.qk_nope_head_dim + shape.qk_rope_head_dim, shape.kv_lora_rank
        lq = shape.q_lora_rank
        query = (h * lq + lq + lq * shape.heads * qk) if lq else h * shape.heads * qk
        attention = (query + h * (r + shape.qk_rope_head_dim) + r
                     + r * shape.heads * (shape.qk_nope_head_dim + shape.v_head_dim)
                     + shape.heads * shape.v_head_dim * h + norms * norm)
    block = attention + (3 if gated else 2) * h * shape.ffn
    block += shape.ffn * (2 if gated else 1) + h if bias in ("mlp", "all") else 0
    moe_layers = shape.layers - shape.dense_layers if shape.experts else 0
    # An MoE layer: router h x E (and its bias), E gated experts of moe_ffn, the shared ones of shared_ffn and
    # their gate (h x 1).
    moe_block = (attention + h * shape.experts + (shape.experts if shape.router_bias else 0)
                 + (h if shape.shared_gate else 0)
                 + 3 * h * (shape.experts * shape.moe_ffn + shape.shared_experts * (shape.shared_ffn or shape.moe_ffn)))
    total = (shape.layers - moe_layers) * block + moe_layers * moe_block + shape.vocab * h + norm
    total += shape.positions * h if shape.pos == "learned" else 0
    total += 0 if shape.tied else shape.vocab * h
    total += shape.vocab if shape.head_bias else 0
    total += 2 * h if shape.embed_norm else 0
    return total


# --------------------------------------------------------------------------- transformers configs

def _attr(config: Any, *names: str) -> Any:
    for name in names:
        value = getattr(config, name, None)
        if value is not None:
            return value
    return None


def _head_dim(config: Any, name: str) -> int | None:
    """``head_dim`` as the configuration gives it, ``None`` where left out. 0 is refused: the shape's
    ``head_dim or hidden // heads`` read it as left out, in silence (Gemma 3's ``head_dim: 0``)."""
    value = getattr(config, "head_dim", None)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise WorkloadError(f"--model transformers:{name}: head_dim={_shown(value)} is not valid; expected an integer "
                            f"from 1 to {_MAX_DIM:,}, or head_dim left out (hidden_size / num_attention_heads)")
    return value


_LLAMA_NAMES = {"rotary_pct": "partial_rotary_factor", "hidden": "hidden_size", "layers": "num_hidden_layers", "heads": "num_attention_heads",
                "kv_heads": "num_key_value_heads", "ffn": "intermediate_size", "vocab": "vocab_size",
                "seq": "max_position_embeddings", "positions": "max_position_embeddings", "window": "sliding_window"}
_MOE_NAMES = {**_LLAMA_NAMES, "experts": "num_experts", "top_k": "num_experts_per_tok",
              "moe_ffn": "moe_intermediate_size"}
_HF_NAMES = {
    "llama": _LLAMA_NAMES, "mistral": _LLAMA_NAMES, "qwen2": _LLAMA_NAMES, "qwen3": _LLAMA_NAMES,
    "phi": _LLAMA_NAMES, "phi3": _LLAMA_NAMES, "gemma": _LLAMA_NAMES, "nemotron": _LLAMA_NAMES,
    "gpt_neox": {**_LLAMA_NAMES, "kv_heads": "num_attention_heads", "rotary_pct": "rotary_pct"},
    "mixtral": {**_MOE_NAMES, "experts": "num_local_experts", "moe_ffn": "intermediate_size"},
    "qwen3_moe": _MOE_NAMES,
    "qwen2_moe": {**_MOE_NAMES, "shared_ffn": "shared_expert_intermediate_size"},
    "cohere": {**_LLAMA_NAMES, "qk_norm": "use_qk_norm", "qk_norm_whole": "use_qk_norm"},
    "deepseek_v2": {**_LLAMA_NAMES, "kv_heads": "num_attention_heads", "experts": "n_routed_experts",
                    "top_k": "num_experts_per_tok", "moe_ffn": "moe_intermediate_size",
                    "shared_experts": "n_shared_experts", "dense_layers": "first_k_dense_replace"},
    "gemma2": {**_LLAMA_NAMES, "attn_softcap": "attn_logit_softcapping", "final_softcap": "final_logit_softcapping"},
    "gemma3_text": {**_LLAMA_NAMES, "attn_softcap": "attn_logit_softcapping",
                    "final_softcap": "final_logit_softcapping"},
    "gptj": {"hidden": "n_embd", "layers": "n_layer", "heads": "n_head", "kv_heads": "n_head", "ffn": "n_inner",
             "vocab": "vocab_size", "seq": "n_positions", "positions": "n_positions", "rotary_pct": "rotary_dim"},
    "falcon": {**_LLAMA_NAMES, "kv_heads": "num_kv_heads", "ffn": "ffn_hidden_size",
               "parallel": "num_ln_in_parallel_attn"},
    "gpt2": {"hidden": "n_embd", "layers": "n_layer", "heads": "n_head", "kv_heads": "n_head", "ffn": "n_inner",
             "vocab": "vocab_size", "seq": "n_positions", "positions": "n_positions", "dropout": "resid_pdrop"},
    "opt": {**_LLAMA_NAMES, "kv_heads": "num_attention_heads", "ffn": "ffn_dim", "dropout": "dropout"},
    "bloom": {"hidden": "hidden_size", "layers": "n_layer", "heads": "n_head", "kv_heads": "n_head",
              "vocab": "vocab_size", "seq": "seq_length", "positions": "seq_length", "dropout": "hidden_dropout"},
}
"""Each configuration family's attribute for a shape key, so its errors name what the user wrote."""
_HF_NAMES["deepseek_v3"] = _HF_NAMES["deepseek_v2"]

_ROPE_ACTS = {"silu": "swiglu", "swish": "swiglu", "gelu": "geglu", "gelu_pytorch_tanh": "geglu"}
"""The gated MLP of a Llama-style family by its ``hidden_act`` (Gemma's GeGLU runs ``gelu_pytorch_tanh``)."""

HF_NOT_BUILT: dict[str, str] = {}
"""Families whose ``config.json`` is refused by ``model_type``, and why (the one-line message names it). Gemma 3,
Cohere, Qwen2-MoE and Falcon's ALiBi are built now; a covered family's field the builders do not have is refused
by :func:`shape_ref_of_config_json` naming it."""


def _layer_types(layers: int, every: int) -> list[str]:
    """transformers' ``layer_types`` of a sliding-window pattern: each ``every``-th block full attention
    (Gemma2Config and Gemma3TextConfig: ``"sliding_attention" if bool((i + 1) % pattern)``)."""
    return ["sliding_attention" if (i + 1) % every else "full_attention" for i in range(layers)]


def _window_layers_of(types: list, layers: int) -> str | None:
    """The ``window_layers`` of a config's ``layer_types``: ``all`` sliding, ``none`` (no window), ``alternate``
    or ``N:1`` (N sliding then one full, repeated from the first block); ``None``: a pattern the key does not
    express (or a list of another length)."""
    if len(types) != layers:
        return None
    if all(t == "sliding_attention" for t in types):
        return "all"
    if all(t == "full_attention" for t in types):
        return "none"
    if "full_attention" not in types:  # another kind of block (a typo, a number): not a pattern the key says
        return None
    local = types.index("full_attention")
    if not local or types != _layer_types(layers, local + 1):
        return None
    return "alternate" if local == 1 else f"{local}:1"


def shape_of_hf_config(config: Any, *, name: str) -> TransformerShape | None:
    """The shape of a transformers configuration whose family the catalog builders cover, read
    by attribute names (``model_type`` picks the family); ``None`` for any other (it is traced).

    Llama, Mistral and Qwen2 (``LlamaForCausalLM``'s block; Qwen2's q/k/v biases; Mistral's,
    Mixtral's and Phi-3's ``sliding_window``), GPT-2, OPT (learned table of ``max_position_embeddings + 2`` rows, ReLU) and
    BLOOM (ALiBi, embedding LayerNorm) as their transformers classes define them. A Llama
    ``head_dim`` other than ``hidden / heads``, a gated activation other than SiLU, OPT's
    ``project_in``/``project_out`` (``word_embed_proj_dim != hidden_size``) and a post-norm
    OPT are not in the builders: such configs return ``None``.
    """
    kind = getattr(config, "model_type", None)
    if kind == "gemma3":
        # Gemma3Config (the multimodal models, 4B and up) nests its language model's fields in text_config: that
        # model is read; the SigLIP vision tower and its projector are not costed (text-only training).
        text = getattr(config, "text_config", None)
        if isinstance(text, Mapping):
            from types import SimpleNamespace
            text = SimpleNamespace(**text)
        if text is None:
            return None
        config, kind = text, "gemma3_text"
        if getattr(config, "model_type", kind) != kind:
            return None

    def check(shape: TransformerShape) -> TransformerShape:
        return check_shape(shape, origin=f"--model transformers:{name}", names=_HF_NAMES[kind])

    def given(attr: str, default: Any) -> Any:
        # 0 is a value the user gave (refused by check_shape naming the attribute), not "left out".
        value = getattr(config, attr, None)
        return default if value is None else value

    try:
        if kind in ("llama", "mistral", "qwen2", "qwen3", "phi", "phi3", "gemma", "nemotron", "gpt_neox", "mixtral",
                    "qwen3_moe", "qwen2_moe"):
            h, heads = config.hidden_size, config.num_attention_heads
            if isinstance(heads, int) and heads < 1:  # before h // heads (Qwen2Config does not divide by it)
                raise WorkloadError(f"--model transformers:{name}: num_attention_heads={heads} is not valid; "
                                    f"expected an integer from 1 to {_MAX_DIM:,}")
            head_dim = _head_dim(config, name)
            parallel = 0
            if kind == "gpt_neox":
                # GPTNeoXLayer: x + attn(input_layernorm(x)) + mlp(post_attention_layernorm(x)) when parallel.
                parallel = 2 if getattr(config, "use_parallel_residual", True) else 0
                norm, bias = "layernorm", "all" if getattr(config, "attention_bias", True) else "mlp"
                # gelu_fast (GPT-NeoX-20B) is the tanh approximation gelu_new computes, in as many eager
                # kernels (transformers activations.py FastGELUActivation, NewGELUActivation).
                act = {"gelu": "gelu", "relu": "relu", "gelu_new": "gelu_new", "gelu_fast": "gelu_new"}.get(
                    config.hidden_act)
            elif kind == "phi":
                # PhiDecoderLayer (transformers 5.25.0 models/phi/modeling_phi.py): x + attn(ln(x)) + mlp(ln(x)),
                # biases on q/k/v, dense, fc1 and fc2, a LayerNorm at the end and a biased lm_head.
                if getattr(config, "qk_layernorm", False):
                    return None
                parallel, norm, bias = 1, "layernorm", "all"
                act = config.hidden_act if config.hidden_act in ("gelu", "relu", "gelu_new") else None
            elif kind == "nemotron":
                # NemotronLayerNorm1P (a LayerNorm, weight and bias), NemotronMLP up/down with relu2.
                norm, act = "layernorm", {"relu2": "relu2", "gelu": "gelu", "relu": "relu"}.get(config.hidden_act)
                attention_bias, mlp_bias = getattr(config, "attention_bias", False), getattr(config, "mlp_bias", False)
                bias = ("none" if not (attention_bias or mlp_bias) else "attn" if not mlp_bias
                        else "all" if attention_bias else "mlp")
            else:
                norm = "rmsnorm"
                hidden_act = _attr(config, "hidden_activation", "hidden_act") if kind == "gemma" \
                    else getattr(config, "hidden_act", "silu")
                act = _ROPE_ACTS.get(hidden_act)
                # Qwen2Attention's q/k/v projections have biases, its o_proj none (transformers'
                # modeling_qwen2.py); Llama's attention_bias puts one on all four, mlp_bias on the MLP.
                attention_bias, mlp_bias = getattr(config, "attention_bias", False), getattr(config, "mlp_bias", False)
                bias = ("qkv" if kind == "qwen2" or (kind == "qwen2_moe" and getattr(config, "qkv_bias", True))
                        else "none" if not (attention_bias or mlp_bias)
                        else "attn" if not mlp_bias else "all" if attention_bias else "mlp")
            if act is None or bias is None:
                return None
            experts: dict[str, Any] = {}
            if kind == "mixtral":
                experts = dict(experts=config.num_local_experts, top_k=config.num_experts_per_tok,
                               moe_ffn=config.intermediate_size)
            elif kind == "qwen2_moe":
                # Qwen2MoeSparseMoeBlock: num_experts routed experts, one shared expert of
                # shared_expert_intermediate_size behind its sigmoid shared_expert_gate.
                if getattr(config, "mlp_only_layers", None) or getattr(config, "decoder_sparse_step", 1) != 1:
                    return None
                shared = given("shared_expert_intermediate_size", 0)
                experts = dict(experts=config.num_experts, top_k=config.num_experts_per_tok,
                               moe_ffn=config.moe_intermediate_size, shared_experts=1 if shared else 0,
                               shared_ffn=shared, shared_gate=bool(shared))
            elif kind == "qwen3_moe":
                if getattr(config, "mlp_only_layers", None) or getattr(config, "decoder_sparse_step", 1) != 1:
                    return None  # dense blocks between MoE ones: not a prefix of dense_layers
                experts = dict(experts=config.num_experts, top_k=config.num_experts_per_tok,
                               moe_ffn=config.moe_intermediate_size)
            # Mistral, Mixtral and Phi-3 attend over sliding_window tokens in every block (None: the whole
            # prefix); Qwen2/Qwen3 only with use_sliding_window, and then in the blocks from max_window_layers
            # on, a split the window keys do not express.
            window = 0
            if kind in ("mistral", "mixtral", "phi3"):
                window = given("sliding_window", 0)
            elif getattr(config, "use_sliding_window", False):
                return None
            # transformers v5 keeps the rotary share in rope_parameters; older config.json files at the top
            # level (GPT-NeoX's rotary_pct, Phi-3's and Nemotron's partial_rotary_factor).
            rope = getattr(config, "rope_parameters", None) or {}
            pct = _attr(config, "partial_rotary_factor", "rotary_pct")
            pct = rope.get("partial_rotary_factor", 1.0) if pct is None and isinstance(rope, dict) else pct
            return check(TransformerShape(
                hidden=h, layers=config.num_hidden_layers, heads=heads, window=window, parallel=parallel,
                head_bias=kind == "phi" and not getattr(config, "tie_word_embeddings", False),
                rotary_pct=1.0 if pct is None else pct,
                kv_heads=given("num_key_value_heads", heads) if kind != "gpt_neox" else heads,
                ffn=config.intermediate_size, vocab=config.vocab_size, seq=config.max_position_embeddings,
                act=act, norm=norm, pos="rope", positions=config.max_position_embeddings,
                tied=bool(getattr(config, "tie_word_embeddings", kind == "gemma")), embed_norm=False, dropout=0.0,
                name=name, head_dim=head_dim if head_dim not in (None, h // heads) else 0,
                qk_norm=kind in ("qwen3", "qwen3_moe"), bias=bias, **experts))
        if kind == "cohere":
            # CohereDecoderLayer (transformers 5.25.0 models/cohere/modeling_cohere.py): x + attn(ln(x)) + mlp(ln(x))
            # with one input_layernorm, a CohereLayerNorm (weight, no bias, eager); q/k/v/o with attention_bias,
            # a SiLU-gated MLP without biases; use_qk_norm: CohereLayerNorms of (heads, head_dim) and (kv_heads,
            # head_dim) over q and k; CohereForCausalLM multiplies the logits by logit_scale; the head is tied.
            h, heads = config.hidden_size, config.num_attention_heads
            act = _ROPE_ACTS.get(getattr(config, "hidden_act", "silu"))
            if act != "swiglu" or not isinstance(heads, int) or heads < 1:
                return None
            qk = bool(getattr(config, "use_qk_norm", False))
            return check(TransformerShape(
                hidden=h, layers=config.num_hidden_layers, heads=heads, kv_heads=given("num_key_value_heads", heads),
                ffn=config.intermediate_size, vocab=config.vocab_size, seq=config.max_position_embeddings,
                act=act, norm="layernorm_nobias", pos="rope", positions=config.max_position_embeddings,
                tied=bool(getattr(config, "tie_word_embeddings", True)), embed_norm=False, dropout=0.0, name=name,
                bias="attn" if getattr(config, "attention_bias", False) else "none", parallel=1, qk_norm=qk,
                qk_norm_whole=qk, logit_scale=True))
        if kind in ("deepseek_v2", "deepseek_v3"):
            # DeepseekV2/V3 (transformers 5.25.0 models/deepseek_v3/configuration_deepseek_v3.py): MLA, the first
            # first_k_dense_replace blocks dense, then MoE blocks of n_routed_experts (top num_experts_per_tok)
            # and n_shared_experts; V3's noaux_tc router keeps a score correction bias. Its multi-token
            # prediction module (num_nextn_predict_layers) is --mtp-depth's.
            if getattr(config, "moe_layer_freq", 1) != 1 or getattr(config, "hidden_act", "silu") != "silu":
                return None
            h, heads = config.hidden_size, config.num_attention_heads
            return check(TransformerShape(
                hidden=h, layers=config.num_hidden_layers, heads=heads, kv_heads=heads,
                ffn=config.intermediate_size, vocab=config.vocab_size, seq=config.max_position_embeddings,
                act="swiglu", norm="rmsnorm", pos="rope", positions=config.max_position_embeddings,
                tied=bool(getattr(config, "tie_word_embeddings", False)), embed_norm=False, dropout=0.0, name=name,
                experts=config.n_routed_experts, top_k=config.num_experts_per_tok,
                moe_ffn=config.moe_intermediate_size, shared_experts=given("n_shared_experts", 0),
                dense_layers=given("first_k_dense_replace", 0), q_lora_rank=given("q_lora_rank", 0),
                kv_lora_rank=config.kv_lora_rank, qk_nope_head_dim=config.qk_nope_head_dim,
                qk_rope_head_dim=config.qk_rope_head_dim, v_head_dim=config.v_head_dim,
                router_bias=getattr(config, "topk_method", "") == "noaux_tc"))
        if kind in ("gemma2", "gemma3_text"):
            # Gemma2DecoderLayer (transformers 5.25.0 models/gemma2/modeling_gemma2.py): four RMSNorms, GeGLU
            # (gelu_pytorch_tanh), head_dim, attention and final logit soft-caps, and layer_types: sliding and
            # full attention alternating from a sliding first block (Gemma2Config's default), or all sliding.
            # Gemma3DecoderLayer (models/gemma3/modeling_gemma3.py) is that block plus an RMSNorm over each query
            # and key head (q_norm, k_norm of head_dim), no soft-caps unless given (Gemma3TextConfig: None), and
            # five sliding blocks to one full (layer_types from sliding_window_pattern 6); the global blocks'
            # other RoPE base (rope_theta vs rope_local_base_freq) costs nothing.
            gemma3 = kind == "gemma3_text"
            h, heads = config.hidden_size, config.num_attention_heads
            act = _ROPE_ACTS.get(_attr(config, "hidden_activation", "hidden_act"))
            types = list(getattr(config, "layer_types", None) or [])
            layers = config.num_hidden_layers
            window = given("sliding_window", 0)
            # sliding_window_pattern: older Gemma 3 config.json files; Gemma3TextConfig keeps it as a private
            # attribute and spells the layers out in layer_types.
            every = given("sliding_window_pattern", 6) if gemma3 else 2
            if isinstance(every, bool) or not isinstance(every, int) or every < 1:
                raise WorkloadError(f"--model transformers:{name}: sliding_window_pattern={_shown(every)} is not "
                                    f"valid; expected an integer from 1 (every that many blocks one is global)")
            window_layers = _window_layers_of(types or _layer_types(layers, every), layers)
            if window_layers is None:
                return None
            if window_layers == "none":
                window, window_layers = 0, "all"
            if act is None or getattr(config, "attention_bias", False) or not isinstance(heads, int) or heads < 1:
                return None
            head_dim = _head_dim(config, name)
            return check(TransformerShape(
                hidden=h, layers=layers, heads=heads, kv_heads=given("num_key_value_heads", heads),
                ffn=config.intermediate_size, vocab=config.vocab_size, seq=config.max_position_embeddings,
                act=act, norm="rmsnorm", pos="rope", positions=config.max_position_embeddings,
                tied=bool(getattr(config, "tie_word_embeddings", True)), embed_norm=False, dropout=0.0, name=name,
                head_dim=head_dim if head_dim not in (None, h // heads) else 0, window=window if window else 0,
                window_layers=window_layers if window else "all", sandwich_norms=True, qk_norm=gemma3,
                attn_softcap=given("attn_logit_softcapping", 0.0), final_softcap=given("final_logit_softcapping", 0.0)))
        if kind == "gptj":
            # GPTJBlock: x + attn(ln_1(x)) + mlp(ln_1(x)); q/k/v/out_proj without biases, fc_in/fc_out and
            # lm_head with them (transformers 5.25.0 models/gptj/modeling_gptj.py); RoPE on rotary_dim of a head.
            h, heads = config.n_embd, config.n_head
            act = config.activation_function
            if act not in ("gelu", "gelu_new", "relu") or not isinstance(heads, int) or heads < 1:
                return None
            rotary = _attr(config, "rotary_dim")
            head = h // heads if isinstance(h, int) and not h % heads else None
            if head and rotary is not None and (isinstance(rotary, bool) or not isinstance(rotary, int)
                                                or not 1 <= rotary <= head):
                # Checked here, by its own name and value: the share it becomes (rotary_dim=300 was refused as
                # "rotary_dim=1.171875 ... a share above 0") is not what the file says; 64.5 and true were taken.
                raise WorkloadError(f"--model transformers:{name}: rotary_dim={_shown(rotary)} is not valid; expected "
                                    f"an integer from 1 to a head's width, n_embd / n_head = {head}")
            tied = bool(getattr(config, "tie_word_embeddings", False))
            return check(TransformerShape(
                hidden=h, layers=config.n_layer, heads=heads, kv_heads=heads, ffn=given("n_inner", 4 * h),
                vocab=config.vocab_size, seq=config.n_positions, act=act, norm="layernorm", pos="rope",
                positions=config.n_positions, tied=tied, embed_norm=False, dropout=0.0, name=name, bias="mlp",
                parallel=1, head_bias=not tied,
                # No whole head (n_embd 3 of 16 heads: 3 // 16 = 0 divided rotary_dim, a ZeroDivisionError
                # traceback): check() refuses the width in its own words, naming n_embd and n_head.
                rotary_pct=1.0 if rotary is None or not head else rotary / head))
        if kind == "falcon":
            # FalconDecoderLayer (transformers 5.25.0 models/falcon/modeling_falcon.py): parallel_attn with one
            # input_layernorm (Falcon-7B) or, under new_decoder_architecture, ln_attn and ln_mlp
            # (num_ln_in_parallel_attn 2, Falcon-40B/180B); multi_query: one key-value head; fused
            # query_key_value and dense, MLP dense_h_to_4h/dense_4h_to_h, biases all or none (bias).
            if getattr(config, "apply_residual_connection_post_layernorm", False):
                return None
            h, heads = config.hidden_size, config.num_attention_heads
            if getattr(config, "alibi", False):
                # Falcon-RW-1B/7B: alibi with the classic block in sequence (parallel_attn false), full multi-head
                # attention and biases everywhere, GELU MLP of 4 x hidden, no embedding norm: BLOOM's block
                # without its embedding LayerNorm, built by the GPT-2 builder. FalconAttention adds the ALiBi
                # bias to the scores (not costed, as BLOOM's).
                if (getattr(config, "parallel_attn", True) or getattr(config, "new_decoder_architecture", False)
                        or getattr(config, "activation", "gelu") != "gelu"):
                    return None
                seq = given("max_position_embeddings", 2048)
                kv = 1 if getattr(config, "multi_query", True) else heads
                return check(TransformerShape(
                    hidden=h, layers=config.num_hidden_layers, heads=heads, kv_heads=kv,
                    ffn=given("ffn_hidden_size", 4 * h), vocab=config.vocab_size, seq=seq, act="gelu",
                    norm="layernorm", pos="alibi", positions=seq,
                    tied=bool(getattr(config, "tie_word_embeddings", True)), embed_norm=False,
                    dropout=given("hidden_dropout", 0.0), name=name,
                    bias="all" if getattr(config, "bias", False) else "none"))
            new_arch = bool(getattr(config, "new_decoder_architecture", False))
            kv = (given("num_kv_heads", heads) if new_arch else 1 if getattr(config, "multi_query", True) else heads)
            if not getattr(config, "parallel_attn", True):
                parallel = 0
            elif new_arch:
                parallel = given("num_ln_in_parallel_attn", 2)
                if isinstance(parallel, bool) or parallel not in (1, 2):
                    # FalconDecoderLayer builds ln_attn and ln_mlp for 2 and one input_layernorm otherwise, and
                    # its forward gives the MLP a norm only for 1 or 2; 0 was read as blocks in sequence.
                    raise WorkloadError(f"--model transformers:{name}: num_ln_in_parallel_attn={_shown(parallel)} is "
                                        f"not valid; allowed: 1 (one input_layernorm both read) or 2 (ln_attn and "
                                        f"ln_mlp), or leave it out (2)")
            else:
                parallel = 1
            act = getattr(config, "activation", "gelu")
            if act not in ("gelu", "relu"):
                return None
            return check(TransformerShape(
                hidden=h, layers=config.num_hidden_layers, heads=heads, kv_heads=kv,
                ffn=given("ffn_hidden_size", 4 * h), vocab=config.vocab_size,
                seq=given("max_position_embeddings", 2048), act=act, norm="layernorm", pos="rope",
                positions=given("max_position_embeddings", 2048), tied=bool(getattr(config, "tie_word_embeddings", True)),
                embed_norm=False, dropout=0.0, name=name, bias="all" if getattr(config, "bias", False) else "none",
                parallel=parallel))
        if kind == "gpt2":
            # A config.json without the key gets GPT2Config's default, as transformers reads it
            # (transformers 5.25.0 models/gpt2/configuration_gpt2.py: activation_function="gelu_new").
            act = getattr(config, "activation_function", "gelu_new")
            if act not in ACTIVATIONS or act == "swiglu":
                return None
            return check(TransformerShape(
                hidden=config.n_embd, layers=config.n_layer, heads=config.n_head, kv_heads=config.n_head,
                ffn=given("n_inner", 4 * config.n_embd), vocab=config.vocab_size,
                seq=config.n_positions, act=act, norm="layernorm", pos="learned", positions=config.n_positions,
                tied=bool(getattr(config, "tie_word_embeddings", True)), embed_norm=False,
                dropout=_attr(config, "resid_pdrop") or 0.0, name=name))
        if kind == "opt":
            h = config.hidden_size
            # OPTConfig's default when a config.json leaves it out (transformers 5.25.0
            # models/opt/configuration_opt.py: activation_function="relu").
            act = getattr(config, "activation_function", "relu")
            if (getattr(config, "word_embed_proj_dim", h) != h or not getattr(config, "do_layer_norm_before", True)
                    or act not in ACTIVATIONS or act == "swiglu"):
                return None
            return check(TransformerShape(
                hidden=h, layers=config.num_hidden_layers, heads=config.num_attention_heads,
                kv_heads=config.num_attention_heads, ffn=config.ffn_dim, vocab=config.vocab_size,
                seq=config.max_position_embeddings, act=act, norm="layernorm",
                # OPTLearnedPositionalEmbedding keeps 2 rows more than the context (offset = 2).
                pos="learned", positions=config.max_position_embeddings + 2,
                tied=bool(getattr(config, "tie_word_embeddings", True)), embed_norm=False,
                dropout=_attr(config, "dropout") or 0.0, name=name))
        if kind == "bloom":
            h = _attr(config, "hidden_size", "n_embed")
            layers = _attr(config, "n_layer", "num_hidden_layers")
            heads = _attr(config, "n_head", "num_attention_heads")
            seq = _attr(config, "seq_length", "max_position_embeddings") or 2048
            return check(TransformerShape(
                hidden=h, layers=layers, heads=heads, kv_heads=heads, ffn=4 * h, vocab=config.vocab_size, seq=seq,
                act="gelu", norm="layernorm", pos="alibi", positions=seq,
                tied=bool(getattr(config, "tie_word_embeddings", True)), embed_norm=True,
                dropout=_attr(config, "hidden_dropout") or 0.0, name=name))
    except (AttributeError, TypeError):
        return None
    return None


_HF_REQUIRED = {
    "bloom": ("vocab_size",),  # its size keys have two spellings each (n_embed / hidden_size, ...): read by _attr
    "gpt2": ("n_embd", "n_layer", "n_head", "vocab_size", "n_positions"),
    "gptj": ("n_embd", "n_layer", "n_head", "vocab_size", "n_positions"),  # n_inner null: 4 x n_embd
    "falcon": ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size"),  # ffn_hidden_size null: 4 x
    "opt": ("hidden_size", "num_hidden_layers", "num_attention_heads", "ffn_dim", "vocab_size",
            "max_position_embeddings"),
}
"""The keys a family's ``config.json`` must give (a Llama-style family: :data:`_LLAMA_NAMES`' own keys; MoE
families also their expert keys): without one, the builder read no size at all."""

_HF_BOOLS = ("tie_word_embeddings", "attention_bias", "mlp_bias", "use_parallel_residual", "do_layer_norm_before",
             "parallel_attn", "multi_query", "new_decoder_architecture", "bias", "alibi",
             "apply_residual_connection_post_layernorm", "use_sliding_window", "qk_layernorm", "use_qk_norm")
"""``config.json`` switches the builders read as booleans: a JSON string ``"false"`` was truthy, so it was
taken as true in silence (``bool("false")``: Falcon's ``"bias": "false"`` built biases on every projection,
``"multi_query": "false"`` one key-value head)."""


def _check_config_json_fields(data: dict, kind: str, path: str) -> None:
    """A covered family's ``config.json`` keys that are missing, ``null``, of the wrong JSON type: one line
    naming the key. Without this a missing ``hidden_size`` or a ``"hidden_size": "1024"`` (a string) read as
    "a field the builders do not cover", which sent the user looking for the wrong thing."""
    if kind in _HF_REQUIRED:
        required = _HF_REQUIRED[kind]
    else:
        names = _HF_NAMES[kind]
        required = tuple(dict.fromkeys(names[k] for k in ("hidden", "layers", "heads", "ffn", "vocab", "seq")))
        if kind in ("mixtral", "qwen3_moe", "qwen2_moe"):
            required += tuple(dict.fromkeys(names[k] for k in ("experts", "top_k", "moe_ffn")))
        if kind == "qwen2_moe":
            # Qwen2MoeSparseMoeBlock (transformers 5.25.0 models/qwen2_moe/modeling_qwen2_moe.py) builds its shared
            # expert and sigmoid gate unconditionally: a file without the width was built without either.
            required += ("shared_expert_intermediate_size",)
    for key in required:
        value = data.get(key)
        if value is None:
            raise WorkloadError(f"--model: {path!r}: its {kind} configuration has no {key} "
                                f"({'null' if key in data else 'missing'}); expected an integer")
        if isinstance(value, bool) or not isinstance(value, int):
            raise WorkloadError(f"--model: {path!r}: {key}={_shown(value)} is not valid; expected an integer (a JSON "
                                f"number without quotes)")
    heads = _HF_NAMES[kind].get("heads")
    if isinstance(data.get(heads), int) and not isinstance(data[heads], bool) and data[heads] < 1:
        # Before h // heads: Cohere, Gemma 2/3 and GPT-J builders returned no shape, refused as "a field the builders
        # do not cover", which named no field (the Llama-style ones named it).
        raise WorkloadError(f"--model: {path!r}: {heads}={data[heads]} is not valid; expected an integer from 1 to "
                            f"{_MAX_DIM:,} (the attention heads)")
    for key in _HF_BOOLS:
        value = data.get(key)
        if value is not None and not isinstance(value, bool):
            raise WorkloadError(f"--model: {path!r}: {key}={_shown(value)} is not valid; expected true or false (a JSON "
                                f"boolean without quotes)")
    if kind == "qwen2_moe" and data["shared_expert_intermediate_size"] < 1:
        raise WorkloadError(f"--model: {path!r}: shared_expert_intermediate_size={data['shared_expert_intermediate_size']} "
                            f"is not valid; expected an integer "
                            f"from 1 (Qwen2MoeSparseMoeBlock always builds its shared expert and its gate); for MoE "
                            f"blocks without one give the model by its shape (transformer:...,experts=...)")
    for key, what in _HF_POSITIVE_NUMBERS.items():
        # Cost nothing (a RoPE base, a constant factor), so nothing downstream looked at them: "1e4" (a string),
        # 0 or -5 were taken in silence.
        value = data.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not math.isfinite(value) or value <= 0):
            raise WorkloadError(f"--model: {path!r}: {key}={_shown(value)} is not valid; expected a number above 0 "
                                f"({what}; a JSON number without quotes)")
    types = data.get("layer_types")
    if kind in ("gemma2", "gemma3_text") and types is not None and (
            not isinstance(types, list) or len(types) != data["num_hidden_layers"]):
        # [] was read as "left out" (the sliding_window_pattern's blocks); transformers refuses a list of another
        # length than the blocks (layer_type_validation), and a string was read as a list of its letters.
        shown = f"[{len(types)} entries]" if isinstance(types, list) else _shown(types)
        raise WorkloadError(f"--model: {path!r}: layer_types={shown} is not valid; expected a list of one entry per "
                            f"block, num_hidden_layers={data['num_hidden_layers']} (each \"sliding_attention\" or "
                            f"\"full_attention\")")


_HF_POSITIVE_NUMBERS = {"rope_theta": "the rotary base", "rope_local_base_freq": "the local blocks' rotary base",
                        "logit_scale": "the factor on the logits"}
"""``config.json`` numbers that shape no cost but must be numbers above 0 when given (``null``: left out)."""


CONFIG_JSON_SUFFIX = ".json"
"""``--model`` ending so names a transformers ``config.json`` file (:func:`shape_ref_of_config_json`)."""


def is_config_json_ref(model: object) -> bool:
    """Whether ``--model`` names a transformers ``config.json`` file (the file a model repository
    ships, read without transformers) rather than a catalog key, a shape or a torch builder."""
    return isinstance(model, str) and model.strip().lower().endswith(CONFIG_JSON_SUFFIX) and ":" not in model


def shape_ref_of_config_json(path: str) -> str:
    """The ``transformer:KEY=VALUE,...`` of a transformers ``config.json`` whose ``model_type`` the
    catalog builders cover (:func:`shape_of_hf_config`: Llama-style, Nemotron, Gemma 1-3, Cohere, Falcon (ALiBi
    too), MoE, GPT-2, OPT, BLOOM),
    read by the same attribute names as ``transformers:LlamaConfig(...)``; its sequence is the
    configuration's context length unless ``--seq-len`` gives another. A capacity planner has the
    file of the model it plans (``config.json`` of its repository), not a Python call. Any other
    family, a missing or malformed file: one line naming what to give instead."""
    import json
    import re
    from pathlib import Path
    from types import SimpleNamespace

    file = Path(path.strip())
    if path_kind(file, "--model", WorkloadError) is None:
        raise WorkloadError(f"--model: file {path!r} does not exist (a transformers config.json)")
    # Capped and regular files only: a FIFO named x.json blocked the read for ever (a hang, no message).
    text = read_text_capped(file, "--model", WorkloadError, what="transformers config.json")
    try:
        data = json.loads(text, object_pairs_hook=json_object_no_duplicates)
    except DuplicateJsonKey as exc:
        # A hand-edited file with "hidden_size" twice was read in silence at whichever came last (json's rule, and
        # transformers'): a 3.7B model planned where the user may have meant the 8B the first line says.
        raise WorkloadError(f"--model: {path!r}: {exc}; give each key once") from None
    except (ValueError, RecursionError) as exc:  # RecursionError: "[[[[..." nesting
        raise WorkloadError(f"--model: {path!r} is not a readable JSON configuration ({type(exc).__name__}); "
                            f"expected a transformers config.json") from None
    if not isinstance(data, dict):
        raise WorkloadError(f"--model: {path!r} holds a JSON {type(data).__name__}, not a configuration object; "
                            f"expected a transformers config.json")
    # A shape's name= is one token: the file's folder (a repository's name) or stem, made safe.
    stem = file.parent.name if file.stem == "config" and file.parent.name else file.stem
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", stem).strip("-") or "config"
    kind = data.get("model_type")
    if kind is not None and not isinstance(kind, str):
        # A list or an object here ended in "TypeError: unhashable type" (the family lookup), a traceback.
        raise WorkloadError(f"--model: {path!r}: model_type={_shown(kind)} is not valid; expected the family's name "
                            f"as a string, one of {', '.join(_HF_NAMES)}")
    if kind == "gemma3" and isinstance(data.get("text_config"), dict):
        # The multimodal Gemma 3 (4B and up): its language model's fields, checked as a Gemma 3 text config's (a
        # text_config that leaves a size to Gemma3TextConfig's defaults is refused naming the key).
        inner = data["text_config"].get("model_type")
        if inner not in (None, "gemma3_text"):
            # transformers' Gemma3Config builds a text_config dict as Gemma3TextConfig(**text_config) whatever its
            # model_type (models/gemma3/configuration_gemma3.py), so "llama" there names a model it does not build.
            raise WorkloadError(f"--model: {path!r}: text_config.model_type={_shown(inner)} is not valid; expected "
                                f"'gemma3_text' or left out (Gemma3Config reads its text_config as a Gemma 3 text "
                                f"model); for another model give its own config.json")
        data, kind = {**data["text_config"], "model_type": "gemma3_text"}, "gemma3_text"
    elif kind == "gemma3":
        raise WorkloadError(f"--model: {path!r}: its gemma3 configuration has no text_config object (the language "
                            f"model's fields, which dpsim reads); give the text_config's fields with model_type "
                            f"gemma3_text, or the model by its shape (transformer:hidden=...,layers=...)")
    if kind in _HF_NAMES:
        _check_config_json_fields(data, kind, path)
    shape = shape_of_hf_config(SimpleNamespace(**data), name=name) if kind in _HF_NAMES else None
    if shape is None:
        covered = ", ".join(_HF_NAMES)
        why = (f"its model_type {kind!r} is not built from a shape: {HF_NOT_BUILT[kind]}" if kind in HF_NOT_BUILT
               else f"its model_type {kind!r} is not one dpsim builds from a shape ({covered})" if kind not in _HF_NAMES
               else f"its {kind} configuration has a field the builders do not cover (an activation other than "
                    f"the family's, Falcon's ALiBi with parallel_attn or new_decoder_architecture, Qwen2's use_sliding_window, Gemma's layer_types other than N sliding "
                    f"blocks then one full, DeepSeek's moe_layer_freq, "
                    f"Qwen2-MoE's and Qwen3-MoE's mlp_only_layers "
                    f"or decoder_sparse_step, OPT's projections or post-norm)")
        raise WorkloadError(f"--model: {path!r}: {why}; give the model as transformers:CONFIGCLASS(KEY=VALUE, ...) "
                            f"to trace it, or by its shape (transformer:hidden=...,layers=...)")
    return shape_ref(shape)

