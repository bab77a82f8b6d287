"""Models from the libraries users already have: torchvision and Hugging Face transformers.

``--model`` names a callable of a module, optionally called with keyword arguments::

    torchvision.models:resnet101                      # a torchvision builder (weights=None: no download)
    torchvision.models:vit_b_16(image_size=384)       # ... with arguments
    transformers:LlamaConfig(hidden_size=2048, num_hidden_layers=16, num_attention_heads=16)
    transformers:BertForMaskedLM(num_hidden_layers=12)
    transformers:GPT2Config()                         # GPT-2 small as its config class defines it

``MODULE:NAME(ARGS)``: ``MODULE`` a dotted module (or ``file.py``), ``NAME`` an attribute of
it, ``ARGS`` keyword arguments whose values are Python literals (numbers, strings, booleans,
``None``, tuples, lists and dicts of them; read with :func:`ast.literal_eval`, never
evaluated as code). What ``NAME(**ARGS)`` gives decides what is built, on the meta device
(no weights, no download, no GPU), then traced by :mod:`dpsim.workload.from_torch`:

* an ``nn.Module`` (a torchvision builder, any function of yours): traced as it is;
* a transformers configuration (a ``PretrainedConfig``, ``PreTrainedConfig`` since 5.0): the model of its architecture
  with a language-modelling head: ``AutoModelForMaskedLM.from_config(config)`` for an
  encoder such as BERT (its pretraining head), else ``AutoModelForCausalLM``;
* a transformers model class (a ``PreTrainedModel`` subclass) named without calling it
  with a config: ``NAME(NAME.config_class(**ARGS))``.

The example input, unless ``--input-shape`` gives one: a torchvision model takes one image
batch ``1 x 3 x S x S`` with ``S`` its ``image_size`` attribute when it has one (ViT), 299
for Inception v3, else 224 (torchvision's documented input sizes); a transformers model
takes ``1 x L`` token ids, ``L`` the configuration's context length
(``max_position_embeddings``, ``n_positions``, ``seq_length`` or ``max_seq_len``). Give
``--input-shape 8,2048:int64`` to train at another sequence length.

A transformers configuration of a decoder family that the catalog builders cover (Llama, Mistral,
Qwen2/3, Phi-3, Gemma, Nemotron, Mixtral, Qwen3-MoE, GPT-2, OPT, BLOOM: :func:`dpsim.workload.shapes.shape_of_hf_config`) is not
traced: :func:`lowered_shape_ref` reads its shape, and the catalog's builder makes the model, so
it takes every layout (``--tp/--pp``). With ``--input-shape`` the module is traced as before.

Neither library is a dependency of dpsim: ``pip install 'dpsim[models]'`` adds both; a
reference to a library that is not installed stops with one line naming the extra.
"""

from __future__ import annotations

import ast
import contextlib
import difflib
import functools
import warnings
from collections.abc import Iterator
from typing import Any

from dpsim.errors import WorkloadError
from dpsim.frozen import frozen_dataclass
from dpsim.limits import MAX_LAYERS, MAX_SEQ_LEN
from dpsim.workload.shapes import shape_of_hf_config, shape_ref

LIBRARY_EXTRA = "models"
"""The optional extra that installs torchvision and transformers (``pip install 'dpsim[models]'``)."""

CONTEXT_FIELDS = ("max_position_embeddings", "n_positions", "seq_length", "max_seq_len")
"""Configuration attributes that give a transformers model's context length, in order of preference."""

TORCHVISION_DEFAULT_IMAGE = 224
"""torchvision's classification models take 224 x 224 images ("The models expect ... H and W
expected to be at least 224", torchvision models documentation), Inception v3 299 x 299."""

_INCEPTION_IMAGE = 299

_LITERAL_USAGE = ("keyword arguments with literal values, e.g. torchvision.models:vit_b_16(image_size=384) or "
                  "transformers:LlamaConfig(hidden_size=2048, num_hidden_layers=16)")


@frozen_dataclass
class Call:
    """``NAME(ARGS)`` of a model reference."""

    name: str
    """The attribute called."""
    kwargs: tuple[tuple[str, Any], ...]
    """Its keyword arguments, in order."""


def parse_call(text: str, ref: str) -> Call:
    """``NAME`` or ``NAME(key=literal, ...)``, or a one-line :class:`WorkloadError` naming ``ref``."""
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        raise WorkloadError(f"--model: {text!r} in {ref!r} is not NAME or NAME(...) with {_LITERAL_USAGE}") from None
    if isinstance(node, ast.Name):
        return Call(name=node.id, kwargs=())
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
        raise WorkloadError(f"--model: {text!r} in {ref!r} is not NAME or NAME(...) with {_LITERAL_USAGE}")
    if node.args:
        raise WorkloadError(f"--model: {node.func.id}() in {ref!r} takes {_LITERAL_USAGE}; positional arguments "
                            f"are not accepted")
    kwargs = []
    for kw in node.keywords:
        if kw.arg is None:
            raise WorkloadError(f"--model: ** in {ref!r} is not accepted; write each keyword argument")
        if any(kw.arg == name for name, _ in kwargs):  # ast accepts f(a=1, a=2); Python refuses it to compile
            raise WorkloadError(f"--model: {kw.arg}= is given twice in {ref!r}; give it once")
        try:
            value = ast.literal_eval(kw.value)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            raise WorkloadError(f"--model: {kw.arg}= in {ref!r} is not a literal value (number, string, "
                                f"True/False/None, or a tuple, list or dict of them)") from None
        kwargs.append((kw.arg, value))
    return Call(name=node.func.id, kwargs=tuple(kwargs))


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """transformers' own log lines held back while a reference is built: its config checks write
    warnings to stderr ("bos_token_id must be ... within the vocabulary" for vocab_size=0), which
    broke dpsim's one-line error into three. What dpsim refuses it says itself."""
    try:
        from transformers.utils import logging as hf_logging
    except ImportError:
        yield
        return
    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)


def _library(obj: Any) -> str:
    return (getattr(obj, "__module__", "") or "").split(".")[0]


def _is_hf_config(obj: Any) -> bool:
    # PretrainedConfig until transformers 4.x, PreTrainedConfig in 5.x.
    return any(c.__name__ in ("PretrainedConfig", "PreTrainedConfig") and _library(c) == "transformers"
               for c in type(obj).__mro__)


def _is_hf_model_class(obj: Any) -> bool:
    return isinstance(obj, type) and any(c.__name__ == "PreTrainedModel" and _library(c) == "transformers"
                                         for c in obj.__mro__)


def build_module(builder: Any, call: Call, ref: str) -> Any:
    """``builder(**kwargs)`` turned into an ``nn.Module`` (see the module docstring); call it
    under ``torch.device("meta")``."""
    kwargs = dict(call.kwargs)
    try:
        if _library(builder) == "transformers":
            with quiet_transformers():
                return _build(builder, kwargs)
        return _build(builder, kwargs)
    except WorkloadError:
        raise
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - a library's constructor may raise anything: one line
        text = " ".join(str(exc).split())
        raise WorkloadError(f"--model: {call.name}({', '.join(k + '=...' for k in kwargs)}) failed on the meta "
                            f"device: {type(exc).__name__}: {text[:300]}") from None


def _build(builder: Any, kwargs: dict[str, Any]) -> Any:
    if _is_hf_model_class(builder):
        check_config_kwargs(builder.config_class, kwargs, builder.__name__)
        config = builder.config_class(**kwargs)
        _check_depth(config, builder.__name__, kwargs)
        return builder(config)
    made = builder(**kwargs)
    if _is_hf_config(made):
        name = getattr(builder, "__name__", type(made).__name__)
        check_config_kwargs(type(made), kwargs, name)
        _check_depth(made, name, kwargs)
        return _model_for_config(made)
    return made


_DEPTH_FIELDS = ("num_hidden_layers", "num_layers", "num_decoder_layers", "n_layer")
"""A transformers configuration's block counts (GPT-2's ``n_layer`` is also ``num_hidden_layers``
through its ``attribute_map``; T5 counts its decoder apart)."""


def _check_depth(config: Any, name: str, given: dict[str, Any]) -> None:
    """Refuse a configuration deeper than :data:`~dpsim.limits.MAX_LAYERS` blocks before its model is
    built: ``num_hidden_layers=100000`` spent minutes constructing modules on the meta device before the
    traced module's own limit (or the 300-s load limit) said so."""
    # The spelling the user gave first (GPT2Config(n_layer=...), not its alias num_hidden_layers).
    for field in sorted(_DEPTH_FIELDS, key=lambda f: f not in given):
        value = getattr(config, field, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > MAX_LAYERS:
            raise WorkloadError(f"--model: {name}() has {field}={value:,}; expected at most {MAX_LAYERS:,} blocks "
                                f"(each is traced and costed as a layer)")
        if field in given and isinstance(value, int) and not isinstance(value, bool) and value < 1:
            # DeepseekV3Config(num_hidden_layers=0) predicted its embedding and head alone, where the
            # configurations read as a shape (LlamaConfig) refuse it.
            raise WorkloadError(f"--model: {name}() has {field}={value}; expected 1 to {MAX_LAYERS:,} blocks")


def check_config_kwargs(config_class: Any, kwargs: dict[str, Any], name: str) -> None:
    """Refuse a keyword argument that ``config_class`` does not know. A transformers configuration
    keeps any keyword as an attribute, so a misspelt one (``num_hidden_layer=16``) was dropped in
    silence and the default model predicted."""
    if not kwargs:
        return
    import inspect

    try:
        default = config_class()
        params = set(inspect.signature(config_class).parameters)
    except Exception:  # noqa: BLE001 - a class that cannot say: its own checks stand
        return
    known = params | set(getattr(config_class, "attribute_map", None) or {})
    with quiet_transformers(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # deprecated aliases (torch_dtype) warn when read
        unknown = [k for k in kwargs if k not in known and not hasattr(default, k)]
    if unknown:
        near = difflib.get_close_matches(unknown[0], sorted(k for k in known if not k.startswith("_")), n=1)
        hint = f" (did you mean {near[0]}?)" if near else ""
        raise WorkloadError(f"--model: {name}() has no setting {unknown[0]!r}{hint}; {config_class.__name__} "
                            f"would keep it unused and build its default model")


def _model_for_config(config: Any) -> Any:
    """A transformers configuration's model with a language-modelling head: masked for an
    encoder, else causal, else the bare model."""
    import transformers

    errors = []
    # Encoders (BERT, RoBERTa) have both heads; their pretraining head is the masked one.
    for auto in ("AutoModelForMaskedLM", "AutoModelForCausalLM", "AutoModel"):
        cls = getattr(transformers, auto, None)
        if cls is None:
            continue
        try:
            return cls.from_config(config)
        except ValueError as exc:  # "Unrecognized configuration class ... for this kind of AutoModel"
            errors.append(str(exc).split("\n")[0])
    raise WorkloadError(f"--model: transformers has no causal-LM, masked-LM or base model for "
                        f"{type(config).__name__}: {errors[-1] if errors else 'no AutoModel classes'}")


def default_example(torch: Any, module: Any, ref: str) -> Any | None:
    """The example input of a library model (see the module docstring), or ``None`` for a
    module of another origin."""
    library = _library(type(module))
    if library == "torchvision":
        if type(module).__name__ == "Inception3":
            size = _INCEPTION_IMAGE
        else:
            size = int(getattr(module, "image_size", TORCHVISION_DEFAULT_IMAGE))
        return torch.zeros((1, 3, size, size))
    if library == "transformers":
        config = getattr(module, "config", None)
        field = next((f for f in CONTEXT_FIELDS if isinstance(getattr(config, f, None), int)
                      and not isinstance(getattr(config, f), bool)), None)
        if field is None:
            raise WorkloadError(f"--model: {ref!r}: its configuration gives no context length; pass --input-shape "
                                f"(e.g. 4,2048:int64)")
        length = getattr(config, field)
        if not 1 <= length <= MAX_SEQ_LEN:
            # As a configuration read as a shape refuses it: DeepseekV3Config(max_position_embeddings=10000000)
            # traced a 10-million-token sample (a 5-day step), =0 failed inside the forward ("cannot reshape").
            raise WorkloadError(f"--model: {ref!r}: its {field}={length:,} sets the example's sequence, which must "
                                f"be 1 to {MAX_SEQ_LEN:,} tokens; change {field} or give --input-shape (e.g. "
                                f"4,2048:int64)")
        return torch.zeros((1, length), dtype=torch.int64)
    return None


def missing_library(target: str) -> str | None:
    """The one-line reason a library reference cannot be imported, or ``None`` if it can."""
    import importlib.util

    top = target.split(".")[0]
    if top not in ("torchvision", "transformers"):
        return None
    try:
        found = importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        found = False
    if found:
        return None
    return (f"--model: {target!r} needs the {top} package, which is not installed; "
            f"pip install 'dpsim[{LIBRARY_EXTRA}]' adds torchvision and transformers")


@functools.lru_cache(maxsize=32)
def lowered_shape_ref(ref: str) -> str | None:
    """``transformer:KEY=VALUE,...`` for ``transformers:NAME(ARGS)`` when ``NAME(**ARGS)`` is a
    configuration whose family the catalog builders cover; ``None`` for anything else (traced,
    or refused there with its own one-line reason)."""
    target, colon, rest = ref.strip().partition(":")
    if target != "transformers" or not colon or missing_library(target) is not None:
        return None
    try:
        call = parse_call(rest, ref)
        import transformers

        with quiet_transformers():
            made = getattr(transformers, call.name)(**dict(call.kwargs))
    except Exception:  # noqa: BLE001 - the traced path reports this reference's failure in one line
        return None
    if not _is_hf_config(made):
        return None
    try:
        check_config_kwargs(type(made), dict(call.kwargs), call.name)
    except WorkloadError:
        return None  # the traced path refuses it in one line
    shape = shape_of_hf_config(made, name=f"{call.name}()" if not call.kwargs else f"{call.name}(...)")
    return None if shape is None else shape_ref(shape)
