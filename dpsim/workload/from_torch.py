"""A dpsim workload from a user's ``torch.nn.Module``, traced on the meta device.

``--model path/to/file.py:build`` or ``--model package.module:build`` names a function
that returns an ``nn.Module``. dpsim builds it under ``torch.device("meta")`` (no real
weights are allocated, no GPU is needed), runs one forward and one backward on meta
tensors, and records:

* **parameters** in registration order (``named_parameters()``, shared tensors once),
  with shapes and dtypes;
* **layers**: every module that does work, in the order its forward is first entered.
  A parameter belongs to the module that is running (innermost) when an operator first
  reads it — the module whose backward completes its gradient, so a tied weight goes
  to its first user, as in the catalog;
* **forward FLOPs** per layer: the operators run while the module is innermost,
  counted with ``torch.utils.flop_counter``'s formulas (its registry; operators it does
  not know and that may hide matmuls are decomposed as ``FlopCounterMode`` does). 2 FLOPs
  per multiply-add, element-wise work counts 0, as in the catalog;
* **ops** per layer: the same operators lowered to the catalog's op kinds (matmuls,
  convolutions, fused attention, memory-bound passes: :mod:`dpsim.workload.lowering`), so
  the roofline costs a traced layer as it costs a catalog layer. ``scaled_dot_product_attention``
  runs as the fused kernel a GPU would run (the meta device would take its math fallback)
  and training dropout as CUDA's fused kernel. A token model whose output is per-token
  logits is charged the cross-entropy over them (the catalog's LM loss), which the
  training loop computes outside the module;
* **activations** per layer: the tensors autograd saves for backward
  (``torch.autograd.graph.saved_tensors_hooks``), each storage once, parameters
  excluded, floating-point elements at 2 bytes (the catalog's bf16/fp16 convention),
  others at their own size (fused attention keeps q, k, v, its output and the softmax
  logsumexp, never the scores); and each layer's **input** bytes (what activation
  checkpointing keeps);
* the **gradient-ready order**: the order ``AccumulateGrad`` fires in the meta
  backward (``register_post_accumulate_grad_hook``). Autograd's engine orders work by
  graph topology and sequence numbers, not by device, so the meta order is the CPU/GPU
  order: ``tests/test_from_torch.py`` checks it, and the DDP buckets built from it,
  against real ``DistributedDataParallel``;
* **FSDP / checkpoint units** ("blocks"): the children of ``nn.ModuleList`` /
  ``nn.Sequential`` containers, of the class that holds the most parameters among such
  children (at least two of them) — a transformer block, a ResNet bottleneck — as a
  transformer auto-wrap policy would wrap them; or the modules of the classes given in
  ``unit_classes``.

Everything per sample is the traced value divided by the batch size (the first
dimension of the first input tensor).

What is refused, with one line saying why (:class:`~dpsim.errors.WorkloadError`): a
spec that is not ``file.py:fn`` / ``pkg.mod:fn``, an import that fails, a function that
does not return an ``nn.Module``, a forward that fails on meta tensors (e.g.
data-dependent control flow, ``.item()``, CPU-only custom kernels), operators with
heavy compute whose FLOPs dpsim cannot count (RNN kernels, custom ops), higher-order
operators, frozen parameters (``requires_grad=False``), parameters the forward never
uses (DDP would need ``find_unused_parameters=True``) and sparse gradients.

torch is imported lazily, inside the functions: ``dpsim predict`` with a catalog model
never imports it.
"""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from dpsim.errors import WorkloadError
from dpsim import limits
from dpsim.limits import MAX_LAYERS, MAX_TRACED_MODULES, check_number, number_text
from dpsim.workload.library_models import (
    Call,
    build_module,
    default_example,
    missing_library,
)
from dpsim.workload.model_ref import (
    ModelRef,
    _one_line,
    builder_attribute,
    import_builder,
    parse_input_shape,
    parse_model_ref,
    user_code_time_limit,
)
from dpsim.workload.layers import lm_loss_op
from dpsim.workload.lowering import Lowering
from dpsim.workload.spec import DTYPE_SIZE_BYTES, LayerSpec, ModelSpec, ParamSpec

ACTIVATION_ELEMENT_BYTES = 2
"""Floating-point activations are counted at 2 bytes (bf16/fp16 training), as in the catalog."""

ROOT_LAYER_NAME = "(root)"
"""Layer name of the work the top-level module's own ``forward`` does."""

_HEAVY_OP = re.compile(r"(mm|matmul|conv|attention|linear|einsum|dot|gemm|fft|lstm|gru|rnn|bilinear|cdist)")
"""Operator names that do matmul-class work: if the FLOP registry does not know one and it
does not decompose, the FLOP count would be wrong, so the model is refused."""


def load_torch_workload(
    ref: str,
    *,
    input_shape: str | None = None,
    name: str | None = None,
    unit_classes: Iterable[str] | None = None,
    time_limit_s: float | None = None,
) -> ModelSpec:
    """The workload of the ``nn.Module`` that ``ref`` (``file.py:fn`` or ``pkg.mod:fn``) builds.

    The example input is, in this order: ``input_shape`` (``"8,3,224,224"``,
    ``"4,1024:int64"``); the function named after a second colon (``file.py:build:inputs``);
    a module-level ``example_input()``. It may return a tensor, a tuple of positional
    arguments or a dict of keyword arguments; it is called under the meta device.

    Importing the module, building, and tracing together may take ``time_limit_s`` seconds of
    wall-clock time (``None``: :data:`~dpsim.limits.MAX_MODEL_LOAD_S`); user code still running
    then (a loop that never ends) is stopped with a :class:`~dpsim.errors.WorkloadError`.
    """
    time_limit_s = (limits.MAX_MODEL_LOAD_S if time_limit_s is None else
                    check_number(time_limit_s, "time_limit_s", 0.0, 86_400.0, open_below=True))
    parsed = parse_model_ref(ref, calls=True)
    stamp = Path(parsed.target).stat().st_mtime_ns if parsed.is_file else None
    key = (ref, input_shape, name, None if unit_classes is None else tuple(unit_classes), stamp)
    if key not in _CACHE:
        if len(_CACHE) >= 16:
            _CACHE.pop(next(iter(_CACHE)))
        import torch  # noqa: F401 - imported before the clock starts: its own import takes seconds on a busy machine

        what = f"{parsed.target}:{parsed.function}"
        message = (f"--model: {what} (importing {parsed.target!r}, calling {parsed.function}() and tracing its "
                   f"forward and backward) did not finish within {number_text(time_limit_s)} s, the limit "
                   f"(dpsim.limits.MAX_MODEL_LOAD_S); does it loop forever?")
        # The user's code prints to stderr: a print() in a builder went to stdout ahead of predict
        # --json's object, which then no longer parsed.
        with user_code_time_limit(time_limit_s, message), contextlib.redirect_stdout(sys.stderr):
            spec = _load(parsed, ref, input_shape=input_shape, name=name, unit_classes=unit_classes)
        _CACHE[key] = spec
    return _CACHE[key]


_CACHE: dict[tuple, ModelSpec] = {}
"""Traced workloads by (reference, input shape, name, unit classes, file mtime): a sweep
over other axes traces a module once per process."""


def _load(parsed: ModelRef, ref: str, *, input_shape, name, unit_classes) -> ModelSpec:
    import torch

    missing = None if parsed.is_file else missing_library(parsed.target)
    if missing:
        raise WorkloadError(missing)
    mod = import_builder(parsed)
    builder = builder_attribute(mod, parsed.function, parsed.target)
    if builder is None or not callable(builder):
        raise WorkloadError(f"--model: {parsed.target!r} has no function {parsed.function!r}")
    example_fn = None
    no_example = None
    if input_shape is None:
        ex_name = parsed.example_function or "example_input"
        example_fn = builder_attribute(mod, ex_name, parsed.target)
        if example_fn is None or not callable(example_fn):
            example_fn = None
            where = f"no function {ex_name!r} in {parsed.target!r}"
            no_example = (f"--model: {ref!r} needs an example input: pass --input-shape "
                          f"(e.g. 8,3,224,224 or 4,1024:int64) or define example_input() ({where})")
    elif parsed.example_function is not None:
        raise WorkloadError(f"--input-shape: give it or the example function in --model {ref!r}, not both")
    with torch.device("meta"):
        module = build_module(builder, Call(name=parsed.function, kwargs=parsed.kwargs), ref)
        if not isinstance(module, torch.nn.Module):
            raise WorkloadError(f"--model: {parsed.function}() returned {type(module).__name__}, "
                                f"not a torch.nn.Module")
        if input_shape is not None:
            shape, dtype = parse_input_shape(input_shape)
            tdtype = getattr(torch, dtype)
            example = torch.zeros(shape, dtype=tdtype)
        elif example_fn is None:
            # A torchvision or transformers model has a documented input; anything else needs one given.
            example = default_example(torch, module, ref)
            if example is None:
                raise WorkloadError(no_example)
        else:
            try:
                example = example_fn()
            except (Exception, SystemExit) as exc:  # noqa: BLE001 - anything user code raises, sys.exit too: one line
                raise WorkloadError(f"--model: the example-input function failed: {type(exc).__name__}: "
                                    f"{_one_line(exc)}") from None
    label = name or (ref.strip() if parsed.kwargs else
                     f"{Path(parsed.target).stem if parsed.is_file else parsed.target}:{parsed.function}")
    return workload_from_module(module, example, name=label, unit_classes=unit_classes)


class _Tracer:
    """Module stack, per-module FLOPs, first parameter use and saved activations."""

    def __init__(self, torch, module, unit_classes):
        self.torch = torch
        self.names = {id(m): n for n, m in module.named_modules()}
        self.stack: list[str] = []
        self.order: list[str] = []  # modules in order of first entry
        self.classes = {n: type(m).__name__ for n, m in module.named_modules()}
        self.flops: dict[str, float] = {}
        self.act: dict[str, float] = {}
        self.inputs: dict[str, float] = {}
        self.first_use: dict[str, str] = {}  # param name -> module name
        self.use_order: list[str] = []
        self.param_ids: dict[int, str] = {}
        self.seen_storage: set[int] = set()
        self.keep: list = []  # keep saved tensors alive so ids stay unique
        self.lowering: Lowering | None = None

    def current(self) -> str:
        return self.stack[-1] if self.stack else ""

    def pre_hook(self, mod, args, kwargs=None):
        name = self.names[id(mod)]
        if name not in self.inputs:
            self.order.append(name)
            self.inputs[name] = self._tensor_bytes(args) + self._tensor_bytes(kwargs or {})
        self.stack.append(name)

    def post_hook(self, mod, args, output):
        name = self.names[id(mod)]
        if self.stack and self.stack[-1] == name:
            self.stack.pop()

    def _tensor_bytes(self, obj) -> float:
        from torch.utils._pytree import tree_flatten

        leaves, _ = tree_flatten(obj)
        total = 0.0
        for t in leaves:
            if isinstance(t, self.torch.Tensor) and id(t) not in self.param_ids:
                total += t.numel() * (ACTIVATION_ELEMENT_BYTES if t.is_floating_point() else t.element_size())
        return total

    def saw_param(self, pname: str) -> None:
        if pname not in self.first_use:
            self.first_use[pname] = self.current()
            self.use_order.append(pname)

    def pack(self, t):
        base = t
        while getattr(base, "_base", None) is not None:
            base = base._base
        key = id(base)
        if key in self.param_ids or key in self.seen_storage:
            return t
        self.seen_storage.add(key)
        self.keep.append(base)
        nbytes = base.numel() * (ACTIVATION_ELEMENT_BYTES if base.is_floating_point() else base.element_size())
        cur = self.current()
        self.act[cur] = self.act.get(cur, 0.0) + nbytes
        return t


def _make_mode(torch, tracer: _Tracer):
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.flop_counter import flop_registry

    skip = {torch.ops.prim.device.default}

    class _TraceMode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if isinstance(func, torch._ops.HigherOrderOperator):
                raise WorkloadError(f"--model: module {tracer.current() or ROOT_LAYER_NAME!r} runs the "
                                    f"higher-order operator {func}, which dpsim cannot trace")
            for a in list(args) + list(kwargs.values()):
                if isinstance(a, torch.Tensor) and id(a) in tracer.param_ids:
                    tracer.saw_param(tracer.param_ids[id(a)])
                elif isinstance(a, (list, tuple)):
                    for b in a:
                        if isinstance(b, torch.Tensor) and id(b) in tracer.param_ids:
                            tracer.saw_param(tracer.param_ids[id(b)])
            packet = func._overloadpacket
            # Only an operator that may hide matmuls is decomposed to count them; any other runs
            # as the one kernel eager CUDA runs for it (native_dropout is one fused kernel, not
            # bernoulli_ + mul + div_), so that it is lowered as one memory op.
            if packet not in flop_registry and func not in skip and _HEAVY_OP.search(packet.__name__):
                with self:
                    r = func.decompose(*args, **kwargs)
                if r is not NotImplemented:
                    return r
                if _HEAVY_OP.search(packet.__name__):
                    raise WorkloadError(
                        f"--model: module {tracer.current() or ROOT_LAYER_NAME!r} runs {func.name()}, "
                        f"whose FLOPs dpsim cannot count; rewrite it with supported ops (matmul, conv, "
                        f"scaled_dot_product_attention) or use a catalog model")
            out = func(*args, **kwargs)
            if packet in flop_registry:
                flops = flop_registry[packet](*args, **kwargs, out_val=out)
                cur = tracer.current()
                tracer.flops[cur] = tracer.flops.get(cur, 0.0) + float(flops)
            tracer.lowering.lower(torch, func, args, kwargs, out, tracer.current())
            return out

    return _TraceMode()


def _make_kernel_mode(torch):
    """A function mode that runs two operators as eager CUDA runs them rather than as the meta
    device would (:mod:`dpsim.workload.lowering`): ``scaled_dot_product_attention`` as the fused
    kernel SDPA picks on a GPU (flash; memory-efficient when there is a mask), not the math
    fallback, so that the trace sees one fused op and autograd saves what the fused kernel saves;
    and training dropout as CUDA's fused ``native_dropout`` kernel (output and 1-byte mask), not
    the ``bernoulli_``, ``mul`` and ``div_`` it decomposes into elsewhere."""
    from torch.overrides import TorchFunctionMode

    sdpa = torch.nn.functional.scaled_dot_product_attention
    dropouts = (torch.nn.functional.dropout, torch.dropout)
    aten = torch.ops.aten

    class _KernelMode(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func in dropouts:
                x = args[0]
                p = kwargs.get("p", args[1] if len(args) > 1 else 0.5)
                train = kwargs.get("training", kwargs.get("train", args[2] if len(args) > 2 else True))
                inplace = kwargs.get("inplace", args[3] if len(args) > 3 else False)
                if train and 0 < p < 1 and not inplace and isinstance(x, torch.Tensor) and x.is_floating_point():
                    return torch.native_dropout(x, p, True)[0]
                return func(*args, **kwargs)
            if func is not sdpa:
                return func(*args, **kwargs)
            q, k, v = args[:3]
            mask = kwargs.get("attn_mask", args[3] if len(args) > 3 else None)
            dropout_p = kwargs.get("dropout_p", args[4] if len(args) > 4 else 0.0)
            causal = kwargs.get("is_causal", args[5] if len(args) > 5 else False)
            scale = kwargs.get("scale", args[6] if len(args) > 6 else None)
            if q.dim() != 4:
                return func(*args, **kwargs)
            # Flash needs q, k and v of one head size, at most 256 (pytorch/pytorch
            # aten/src/ATen/native/transformers/cuda/sdp_utils.cpp, check_head_dim_size_flash); SDPA then
            # runs the memory-efficient kernel, which takes a value head of its own size (MLA: 192 for q
            # and k, 128 for v). The meta flash kernel gives no error but q's head size, which broke the
            # output projection of transformers' DeepseekV2/V3 attention (fuzz6).
            flash = q.shape[-1] == k.shape[-1] == v.shape[-1] <= 256
            try:
                if mask is None and flash:
                    return aten._scaled_dot_product_flash_attention(q, k, v, dropout_p, causal, scale=scale)[0]
                if mask is None:
                    return aten._scaled_dot_product_efficient_attention(q, k, v, None, True, dropout_p, causal,
                                                                        scale=scale)[0]
                if mask.dtype == torch.bool:
                    mask = torch.zeros(mask.shape, dtype=q.dtype).masked_fill(mask.logical_not(), float("-inf"))
                mask = mask.expand(q.shape[0], q.shape[1], q.shape[2], k.shape[2])
                return aten._scaled_dot_product_efficient_attention(q, k, v, mask, True, dropout_p, causal,
                                                                    scale=scale)[0]
            except RuntimeError:
                # Shapes the fused kernels refuse: SDPA falls back to its math path on a GPU too.
                return func(*args, **kwargs)

    return _KernelMode()


def _charge_lm_loss(tracer: _Tracer, outputs, batch: int, tokens: int | None) -> None:
    """A token model that returns per-token logits (``batch x tokens x vocab``) is trained
    with cross-entropy over them, outside the module: charge it, as the catalog's LM head
    does (:func:`dpsim.workload.layers.lm_loss_op`), to the layer that produced the logits,
    with the fp32 log-probabilities it keeps for backward. A module that computes its own
    loss returns a scalar and is traced as it is."""
    if tokens is None or len(outputs) != 1:
        return
    logits = outputs[0]
    if logits.dim() != 3 or int(logits.shape[0]) != batch or int(logits.shape[1]) != tokens:
        return
    info = tracer.lowering.tensors.get(id(logits))
    layer = tracer.lowering.producer.get(info.root, "") if info is not None else ""
    vocab = int(logits.shape[2])
    tracer.lowering.ops.setdefault(layer, []).append(lm_loss_op(tokens, vocab))
    tracer.act[layer] = tracer.act.get(layer, 0.0) + 4.0 * batch * tokens * vocab


def _find_units(module, unit_classes) -> list[str]:
    """Module paths of the FSDP / checkpoint units ("blocks")."""
    import torch

    named = list(module.named_modules())
    if unit_classes is not None:
        wanted = set(unit_classes)
        accepted: set[str] = set()
        units: list[str] = []
        for n, m in named:  # parents before children: an accepted unit's descendants are skipped
            if n and type(m).__name__ in wanted and _unit_of(n.rpartition(".")[0], accepted) is None:
                units.append(n)
                accepted.add(n)
        return units
    # Children of module containers, grouped by class: the class holding the most
    # parameters is the block (GPT blocks in one ModuleList; ResNet bottlenecks across
    # layer1..layer4).
    by_class: dict[type, list[tuple[str, Any]]] = {}
    for n, m in named:
        if not isinstance(m, (torch.nn.ModuleList, torch.nn.Sequential)):
            continue
        for cn, c in m.named_children():
            by_class.setdefault(type(c), []).append((f"{n}.{cn}" if n else cn, c))
    best: tuple[int, list[str]] = (0, [])
    for group in by_class.values():
        if len(group) < 2:
            continue
        size = sum(p.numel() for _, c in group for p in c.parameters())
        if size > best[0]:
            best = (size, [name for name, _ in group])
    chosen = set(best[1])
    # Outermost only: a unit inside another unit (an ancestor by dotted name) is not a unit.
    return [name for name in sorted(best[1], key=len) if _unit_of(name.rpartition(".")[0], chosen) is None]


def _unit_of(name: str, units: set[str]) -> str | None:
    """The outermost of ``units`` that is ``name`` or one of its ancestors (dotted prefixes); by
    walking the name's prefixes, not the units (a deep stack has thousands of both)."""
    if not name:
        return None
    parts = name.split(".")
    for i in range(1, len(parts) + 1):
        prefix = ".".join(parts[:i])
        if prefix in units:
            return prefix
    return None


def workload_from_module(module, example: Any, *, name: str, unit_classes: Iterable[str] | None = None) -> ModelSpec:
    """Trace ``module`` (on the meta device) with ``example`` and build its :class:`ModelSpec`.

    ``example`` is a tensor, a tuple of positional arguments or a dict of keyword
    arguments; tensors are moved to the meta device. See the module docstring for what
    is recorded and what is refused.
    """
    import torch
    from torch.utils._pytree import tree_flatten, tree_map

    if not isinstance(module, torch.nn.Module):
        raise WorkloadError(f"--model: got {type(module).__name__}, not a torch.nn.Module")
    modules = sum(1 for _ in module.modules())
    if modules > MAX_TRACED_MODULES:
        raise WorkloadError(f"--model: {name!r} has {modules:,} modules; expected at most {MAX_TRACED_MODULES:,} "
                            f"(each is traced and costed as a layer: {MAX_LAYERS:,} blocks of up to 32 modules); "
                            f"give a deep transformer by its shape instead (--model transformer:layers=...)")
    for n, m in module.named_modules():
        if isinstance(m, (torch.nn.Embedding, torch.nn.EmbeddingBag)) and getattr(m, "sparse", False):
            raise WorkloadError(f"--model: module {n!r} has sparse gradients (sparse=True); dpsim models "
                                f"dense gradients only")
    module = module.to("meta")
    module.train()
    named_params = list(module.named_parameters())
    if not named_params:
        raise WorkloadError(f"--model: {name!r} has no parameters")
    lazy = [n for n, p in named_params if isinstance(p, torch.nn.parameter.UninitializedParameter)]
    if lazy:  # registering the gradient hooks below raised torch's ValueError (a traceback)
        raise WorkloadError(f"--model: parameter {lazy[0]!r} is not initialized (a torch.nn.Lazy* module sizes it "
                            f"on its first forward); give the layer its input size, or run one forward in the "
                            f"builder before returning the model")
    frozen = [n for n, p in named_params if not p.requires_grad]
    if frozen:
        raise WorkloadError(f"--model: parameter {frozen[0]!r} has requires_grad=False; dpsim models every "
                            f"parameter as trained (DDP skips frozen ones): leave them out of the model")
    for n, p in named_params:
        if str(p.dtype).removeprefix("torch.") not in DTYPE_SIZE_BYTES:
            raise WorkloadError(f"--model: parameter {n!r} has dtype {p.dtype}, which dpsim does not model")

    def to_meta(x):
        return x.to("meta") if isinstance(x, torch.Tensor) else x

    example = tree_map(to_meta, example)
    if isinstance(example, dict):
        args, kwargs = (), example
    elif isinstance(example, (tuple, list)):
        args, kwargs = tuple(example), {}
    else:
        args, kwargs = (example,), {}
    first = next((t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)), None)
    if first is None or first.dim() == 0:
        raise WorkloadError("--input-shape: the example input has no tensor with a batch dimension")
    batch = int(first.shape[0])
    tokens = int(first.shape[1]) if (not first.is_floating_point() and first.dim() >= 2) else None

    tracer = _Tracer(torch, module, unit_classes)
    tracer.param_ids = {id(p): n for n, p in named_params}
    tracer.lowering = Lowering(batch=batch, param_ids=tracer.param_ids)
    handles = []
    for _, m in module.named_modules():
        handles.append(m.register_forward_pre_hook(tracer.pre_hook, with_kwargs=True))
        handles.append(m.register_forward_hook(tracer.post_hook))
    ready: list[str] = []
    for n, p in named_params:
        handles.append(p.register_post_accumulate_grad_hook(lambda _p, n=n: ready.append(n)))
    try:
        try:
            with torch.device("meta"), torch.autograd.graph.saved_tensors_hooks(tracer.pack, lambda t: t), \
                    _make_kernel_mode(torch), _make_mode(torch, tracer):
                out = module(*args, **kwargs)
        except WorkloadError:
            raise
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - anything user code raises, sys.exit too: one line
            where = tracer.current() or ROOT_LAYER_NAME
            raise WorkloadError(
                f"--model: forward failed on the meta device in module {where!r} ({type(exc).__name__}: "
                f"{_one_line(exc)}); data-dependent control flow, .item() or device-specific kernels "
                f"cannot be traced without real weights") from None
        losses = [t for t in tree_flatten(out)[0]
                  if isinstance(t, torch.Tensor) and t.requires_grad and t.is_floating_point()]
        if not losses:
            raise WorkloadError("--model: the forward output has no floating-point tensor that requires grad")
        _charge_lm_loss(tracer, losses, batch, tokens)
        try:
            loss = sum(t.float().sum() for t in losses)
            loss.backward()
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - anything user code raises, sys.exit too: one line
            raise WorkloadError(f"--model: backward failed on the meta device ({type(exc).__name__}: "
                                f"{_one_line(exc)})") from None
    finally:
        for h in handles:
            h.remove()

    unused = [n for n, _ in named_params if n not in tracer.first_use]
    if unused:
        raise WorkloadError(f"--model: parameter {unused[0]!r} is not used by forward; DDP would need "
                            f"find_unused_parameters=True, which dpsim does not model")
    got_grad = set(ready)
    no_grad = [n for n, _ in named_params if n not in got_grad]
    if no_grad:
        raise WorkloadError(f"--model: parameter {no_grad[0]!r} got no gradient in backward (used only "
                            f"under no_grad or detached?)")
    if len(ready) != len(named_params):
        raise WorkloadError("--model: a parameter's gradient was accumulated more than once in one "
                            "backward; dpsim cannot order it")

    units = _find_units(module, unit_classes)
    unit_set = set(units)
    shapes = {n: (tuple(int(d) for d in p.shape), str(p.dtype).removeprefix("torch.")) for n, p in named_params}
    owned: dict[str, list[str]] = {}
    for pname in tracer.use_order:
        owned.setdefault(tracer.first_use[pname], []).append(pname)
    ready_pos = {n: i for i, n in enumerate(ready)}
    layers = []
    for mod_name in tracer.order:
        params = owned.get(mod_name, [])
        flops = tracer.flops.get(mod_name, 0.0)
        act = tracer.act.get(mod_name, 0.0)
        ops = tuple(tracer.lowering.ops.get(mod_name, ()))
        if not params and flops == 0 and act == 0 and not ops:
            continue
        unit = _unit_of(mod_name, unit_set)
        layers.append(LayerSpec(
            name=mod_name or ROOT_LAYER_NAME,
            params=tuple(ParamSpec(name=p, shape=shapes[p][0], dtype=shapes[p][1]) for p in params),
            grad_ready_order=tuple(sorted(params, key=ready_pos.__getitem__)),
            forward_flops_per_sample=flops / batch,
            activation_bytes_per_sample=act / batch,
            input_bytes_per_sample=tracer.inputs.get(mod_name, 0.0) / batch,
            unit=unit,
            ops=ops,
        ))
    # What DDP's broadcast_buffers sends before each synchronised forward: every buffer
    # (persistent or not) that named_buffers() lists.
    buffers = tuple(ParamSpec(name=n, shape=tuple(int(d) for d in b.shape), dtype=str(b.dtype).removeprefix("torch."))
                    for n, b in module.named_buffers() if str(b.dtype).removeprefix("torch.") in DTYPE_SIZE_BYTES)
    registration = tuple(n for n, _ in named_params)
    in_layers = tuple(p.name for layer in layers for p in layer.params)
    derived_ready = tuple(p for layer in reversed(layers) for p in (layer.grad_ready_order or ()))
    return ModelSpec(
        name=name,
        layers=tuple(layers),
        registration_order=None if registration == in_layers else registration,
        grad_ready_order=None if tuple(ready) == derived_ready else tuple(ready),
        tokens_per_sample=tokens,
        source=f"traced from torch module {type(module).__name__} on the meta device (batch {batch})",
        buffers=buffers,
    )


def trace_summary(model: ModelSpec) -> dict:
    """A small JSON-able summary of a traced workload (for ``--json`` outputs and tests)."""
    return {
        "name": model.name,
        "param_count": model.param_count,
        "layers": len(model.layers),
        "units": sorted({l.unit for l in model.layers if l.unit is not None}, key=_natural_key),
        "forward_flops_per_sample": model.forward_flops_per_sample,
        "activation_bytes_per_sample": model.activation_bytes_per_sample,
        "tokens_per_sample": model.tokens_per_sample,
    }


def _natural_key(text: str) -> list:
    return [int(t) if t.isdecimal() else t for t in re.split(r"(\d+)", text)]  # isdigit: "²" broke int()


