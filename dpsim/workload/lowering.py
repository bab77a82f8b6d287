"""Lowering of the aten operators a traced torch module runs to the roofline's ops.

:mod:`dpsim.workload.from_torch` runs a module's forward on the meta device under a
dispatch mode; every operator it sees is handed to :class:`Lowering`, which turns it into
the op kinds the catalog's builders write (:mod:`dpsim.workload.spec`), per sample, so that
:mod:`dpsim.workload.roofline` costs a traced layer exactly as a catalog layer:

* **matmuls** (``mm``, ``addmm``, ``bmm``, ``baddbmm``; ``linear`` and ``matmul`` arrive
  decomposed into them) become :class:`~dpsim.workload.spec.MatmulOp`; a convolution becomes
  the implicit GEMM ``kind="conv"`` with its kernel and stride, plus cuDNN's NCHW transposes
  when the input is channels-first (as :func:`dpsim.workload.architectures.conv_ops`);
* **fused attention**: ``scaled_dot_product_attention`` is intercepted *before* it
  decomposes (on the meta device it would run its math fallback, scores and all) and run as
  the flash kernel (the memory-efficient one when given a mask), the kernels SDPA picks on
  Ampere and later; it becomes one fused :class:`~dpsim.workload.spec.AttentionOp`, and
  autograd saves what those kernels save: q, k, v, the output and the softmax logsumexp,
  never the ``seq x seq`` scores. Attention written as matmul + softmax stays eager: its
  batched matmuls and its passes over the scores are lowered one by one;
* every other operator that is not a view becomes a :class:`~dpsim.workload.spec.MemoryOp`
  with the tensors its eager kernel reads and writes (one pass per tensor), and the
  tensors its backward reads and writes (:func:`backward_passes`).

**Byte classes.** The trace runs in the module's own dtype, but the roofline sizes each
pass for the precision trained with (:data:`dpsim.workload.spec.BYTE_CLASSES`). So each
tensor carries the class autocast would give it: parameters, float inputs and anything
computed from them are ``stream`` (the parameters' dtype); a matmul, convolution or
attention output is ``act`` (16-bit under autocast); an element-wise op on an ``act`` and a
``stream`` tensor promotes to ``stream``, as type promotion does; autocast's fp32 ops
(norms, softmax, ``pow``, ``exp``, ``rsqrt``, ...) give ``stream`` and charge a ``cast``
pass for an ``act`` input. A matmul input of class ``stream`` is copied to 16 bits every
time a matmul reads it (autocast caches only the casts of leaf tensors, the weights, whose
casts :func:`dpsim.workload.compute.autocast_weight_bytes` charges per layer); its
backward casts the gradient back.

**Gradient accumulation.** A tensor that several operators read gets several gradients,
which autograd sums (``InputBuffer::add``): each extra reader costs a read of two and a
write of one in backward, charged to the layer where the extra reader runs (the residual
stream's skip connection is one such reader).

torch is never imported here: the tracer passes its tensors in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from dpsim.workload.spec import AttentionOp, MatmulOp, MemoryOp, OpSpec

MATMUL_OPS = frozenset({"mm", "addmm", "bmm", "baddbmm"})
"""aten matmul-class operators (``linear`` and ``matmul`` decompose into these)."""

LM_HEAD_MODULES = frozenset({"lm_head", "output"})
"""Module names of a language model's output projection: transformers' ``lm_head``, Meta's and
torchtitan's Llama ``output`` (the layer torchtitan's float8 converter filters out)."""

CONV_OPS = frozenset({"convolution", "_convolution", "cudnn_convolution"})
"""aten convolution operators."""

FUSED_ATTENTION_OPS = frozenset({"_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
                                 "_scaled_dot_product_cudnn_attention", "_flash_attention_forward",
                                 "_efficient_attention_forward", "_scaled_dot_product_flash_attention_for_cpu"})
"""aten fused attention kernels (SDPA's backends): one :class:`AttentionOp` each."""

AUTOCAST_FP32_OPS = frozenset({
    "native_layer_norm", "native_group_norm", "_softmax", "_log_softmax", "pow", "exp", "expm1", "log", "log10",
    "log2", "log1p", "rsqrt", "reciprocal", "acos", "asin", "cosh", "sinh", "tan", "erfinv", "softplus",
    "logsumexp", "cumsum", "cumprod", "prod", "sum", "norm", "linalg_vector_norm", "renorm", "dist", "cdist",
    "_cdist_forward", "_pdist_forward", "nll_loss_forward", "nll_loss2d_forward", "mse_loss", "l1_loss",
    "smooth_l1_loss", "huber_loss", "binary_cross_entropy_with_logits", "kl_div", "_fused_rms_norm",
})
"""Operators autocast runs in fp32, at the aten level the dispatch mode sees: PyTorch's
"Automatic Mixed Precision package" documentation, "CUDA Ops that can autocast to float32"
(``pow``, ``exp``, ``log*``, ``rsqrt``, ``layer_norm``, ``group_norm``, ``softmax``,
``log_softmax``, ``sum``, ``prod``, ``cumsum``, the losses, ...). An ``act`` input is cast
up (a ``cast`` pass), the output is ``stream``."""

NO_TRAFFIC_OPS = frozenset({"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided",
                            "lift_fresh", "detach", "_local_scalar_dense", "scalar_tensor", "arange", "sym_size",
                            "sym_stride", "sym_numel", "size", "stride", "is_same_size", "_philox_seed"})
"""Operators that move no tensor through device memory (allocations, aliases, index ranges)."""

BATCH_NORM_OPS = frozenset({"native_batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit_functional",
                            "cudnn_batch_norm"})
"""Training batch norm: it reads its input twice (statistics, then normalisation), as
:func:`dpsim.workload.architectures.conv_ops` counts it, and keeps the input's dtype."""

ZERO_BACKWARD_OPS = frozenset({"add", "sub", "cat", "stack", "clone", "_to_copy", "copy", "copy_", "alias",
                               "index_select", "gather", "repeat", "repeat_interleave", "expand_copy",
                               "slice_copy", "constant_pad_nd", "_unsafe_view", "neg", "fill", "zeros_like",
                               "ones_like", "full_like"})
"""Operators whose backward hands the gradient on as it is, or as views of it, or as one
copy it makes anyway (:func:`backward_passes`)."""


@dataclass
class _Tensor:
    """What the lowering knows of one tensor object the trace produced."""

    byte_class: str
    """``act`` or ``stream`` (:data:`dpsim.workload.spec.BYTE_CLASSES`)."""
    root: int
    """Id of the tensor whose storage this one views (itself when it owns its storage)."""
    numel: float
    """Elements of the tensor."""


@dataclass
class Lowering:
    """Per-layer ops of a trace, built operator by operator (see the module docstring)."""

    batch: int
    """Samples in the example input: every op is stored per sample."""
    param_ids: dict[int, str]
    """``id()`` of each parameter tensor."""
    ops: dict[str, list[OpSpec]] = field(default_factory=dict)
    """Ops of each layer (module name), in forward order."""
    tensors: dict[int, _Tensor] = field(default_factory=dict)
    """Class and storage root of every tensor the trace produced, by ``id()``."""
    readers: dict[int, int] = field(default_factory=dict)
    """Operators that read each storage root and need its gradient."""
    producer: dict[int, str] = field(default_factory=dict)
    """Layer that produced each storage root."""
    keep: list = field(default_factory=list)
    """The tensors indexed above, kept alive so that their ids stay unique."""

    # ---------------------------------------------------------------- tensor bookkeeping

    def info(self, t) -> _Tensor:
        """Class and root of ``t``: parameters and tensors the trace did not make are ``stream``."""
        known = self.tensors.get(id(t))
        if known is None:
            known = _Tensor(byte_class="stream", root=id(t), numel=float(t.numel()))
            self.tensors[id(t)] = known
            self.keep.append(t)
        return known

    def _record(self, t, byte_class: str, root: int | None, layer: str) -> None:
        self.keep.append(t)
        self.tensors[id(t)] = _Tensor(byte_class=byte_class, root=id(t) if root is None else root,
                                      numel=float(t.numel()))
        if root is None:
            self.producer[id(t)] = layer
            # A new value (also one an in-place operator wrote over its input): no readers yet.
            self.readers.pop(id(t), None)

    def _add(self, layer: str, op: OpSpec) -> None:
        self.ops.setdefault(layer, []).append(op)

    # ---------------------------------------------------------------- one operator

    def lower(self, torch, func, args, kwargs, out, layer: str) -> None:
        """Lower one aten operator run in ``layer`` (its inputs ``args``/``kwargs``, its result ``out``)."""
        name = func._overloadpacket.__name__
        if name.endswith("_") and not name.endswith("__"):
            name = name[:-1]  # an in-place variant (add_, relu_) streams as its out-of-place operator
        inputs = list(_tensors(torch, args, kwargs))
        outputs = list(_tensors(torch, out if isinstance(out, (tuple, list)) else (out,), {}))
        if _is_view(func):
            src = next((t for t in inputs), None)
            if src is not None:
                base = self.info(src)
                for o in outputs:
                    self._record(o, base.byte_class, base.root, layer)
            return
        floats_in = [t for t in inputs if t.is_floating_point()]
        needs_grad = [t for t in floats_in if t.requires_grad]
        self._count_readers(needs_grad, layer)
        if name in MATMUL_OPS or name in CONV_OPS:
            self._matmul(name, args, outputs, layer)
        elif name in FUSED_ATTENTION_OPS:
            self._attention(_named_args(func, args, kwargs), outputs, layer)
        elif name == "embedding":
            self._embedding(args, outputs, layer)
        elif name in NO_TRAFFIC_OPS or not outputs:
            for o in outputs:
                self._record(o, "stream", None, layer)
        else:
            self._memory(name, inputs, floats_in, needs_grad, outputs, layer)

    def _count_readers(self, needs_grad, layer: str) -> None:
        for root in {self.info(t).root for t in needs_grad}:
            if root in self.param_ids:
                continue
            self.readers[root] = self.readers.get(root, 0) + 1
            if self.readers[root] > 1:
                # Autograd sums this extra gradient into the others: read two, write one.
                src = self.tensors[root]
                self._add(layer, MemoryOp(name="grad_sum", elements=src.numel / self.batch, forward=(),
                                          backward=((3, src.byte_class),)))

    def _cast_inputs(self, tensors, layer: str) -> None:
        """Autocast's 16-bit copy of each ``stream`` activation a matmul reads (and its
        gradient's copy back)."""
        for t in tensors:
            if not t.is_floating_point():
                continue
            info = self.info(t)
            if info.root not in self.param_ids and info.byte_class == "stream":
                self._add(layer, MemoryOp(name="cast", elements=t.numel() / self.batch, forward=((1, "cast"),),
                                          backward=((1, "cast"),) if t.requires_grad else ()))

    def _matmul(self, name: str, args, outputs, layer: str) -> None:
        b = self.batch
        out = outputs[0]
        if name in CONV_OPS:
            x, w = args[0], args[1]
            stride = args[3] if len(args) > 3 else (1,)
            groups = int(args[8]) if len(args) > 8 else 1
            kernel = int(w.shape[2]) if w.dim() > 2 else 1
            out_px = math.prod(int(d) for d in out.shape[2:])
            op: OpSpec = MatmulOp(name="conv", m=out_px, n=int(w.shape[0]) // groups,
                                  k=int(w.shape[1]) * math.prod(int(d) for d in w.shape[2:]), batch=groups,
                                  kind="conv", kernel=kernel, stride=int(stride[0]))
            self._cast_inputs([x], layer)
            self._add(layer, op)
            if x.dim() == 4 and x.is_contiguous():
                # cuDNN's 16-bit tensor-core kernels transpose NCHW to NHWC and back (conv_ops).
                self._add(layer, MemoryOp(name="conv.nchw_in", elements=x.numel() / b, forward=((2, "nchw"),),
                                          backward=((4, "nchw"),)))
                self._add(layer, MemoryOp(name="conv.nchw_out", elements=out.numel() / b, forward=((2, "nchw"),),
                                          backward=((4, "nchw"),)))
            bias = args[2] if len(args) > 2 else None
        else:
            if name in ("addmm", "baddbmm"):
                bias, a, w = args[0], args[1], args[2]
            else:
                bias, a, w = None, args[0], args[1]
            self._cast_inputs([a, w], layer)
            if name in ("mm", "addmm"):
                m, k, n = int(a.shape[0]), int(a.shape[1]), int(w.shape[1])
                # An output projection keeps the catalog's name, which FP8 recipes leave in 16 bits.
                head = layer.rsplit(".", 1)[-1] in LM_HEAD_MODULES
                op = MatmulOp(name="lm_head" if head else name, m=max(1, math.ceil(m / b)), n=n, k=k)
            else:
                batch, m, k, n = int(a.shape[0]), int(a.shape[1]), int(a.shape[2]), int(w.shape[2])
                op = MatmulOp(name=name, m=m, n=n, k=k, batch=max(1, batch // b))
            self._add(layer, op)
        if bias is not None and getattr(bias, "requires_grad", False):
            self._add(layer, MemoryOp(name="bias_grad", elements=out.numel() / b, forward=(), backward=((1, "act"),)))
        for o in outputs:
            self._record(o, "act", None, layer)

    def _attention(self, named: dict, outputs, layer: str) -> None:
        q = named.get("query", named.get("q"))
        causal = bool(named.get("is_causal", named.get("causal", False)))
        self._cast_inputs([t for t in (q, named.get("key", named.get("k")), named.get("value", named.get("v")))
                           if t is not None], layer)
        self._add(layer, AttentionOp(seq=int(q.shape[-2]), heads=int(q.shape[1]) if q.dim() == 4 else 1,
                                     head_dim=int(q.shape[-1]), causal=causal, fused=True))
        for o in outputs:
            self._record(o, "act", None, layer)

    def _embedding(self, args, outputs, layer: str) -> None:
        weight, idx = args[0], args[1]
        rows, dim = int(weight.shape[0]), int(weight.shape[1])
        tokens = idx.numel() / self.batch
        self._add(layer, MemoryOp(name="embedding", elements=tokens * dim, forward=((2, "stream"),),
                                  backward=((2, "stream"),), fixed_elements=float(rows * dim),
                                  fixed_backward=((2, "stream"),)))
        for o in outputs:
            self._record(o, "stream", None, layer)

    def _memory(self, name, inputs, floats_in, needs_grad, outputs, layer: str) -> None:
        b = self.batch
        fp32 = name in AUTOCAST_FP32_OPS
        cls_in = [self.info(t).byte_class for t in floats_in]
        if fp32:
            out_cls = "stream"
        elif name in BATCH_NORM_OPS:
            out_cls = cls_in[0]  # cuDNN's batch norm keeps the input's dtype with fp32 statistics
        else:
            # Type promotion: a stream operand with elements makes the result stream (a 0-dim
            # tensor does not promote; an empty one, e.g. a cache being filled, moves nothing).
            out_cls = "stream" if any(c == "stream" and t.dim() > 0 and t.numel() > 0
                                      for t, c in zip(floats_in, cls_in)) or not floats_in else "act"
        main = max(outputs, key=lambda t: t.numel())
        elements = float(main.numel())
        if elements == 0:
            return
        fwd: list[tuple[float, str]] = []
        if name in BATCH_NORM_OPS:
            fwd.append((floats_in[0].numel() / elements, cls_in[0]))  # statistics first, then normalise
        for t, c in zip(floats_in, cls_in):
            fwd.append((t.numel() / elements, c))
            if fp32 and c == "act":
                fwd.append((t.numel() / elements, "cast"))
        for t in inputs:
            if not t.is_floating_point():
                fwd.append((t.numel() * t.element_size() / elements, "byte"))
        for o in outputs:
            fwd.append((o.numel() / elements, out_cls) if o.is_floating_point()
                       else (o.numel() * o.element_size() / elements, "byte"))
        bwd = backward_passes(name, main, floats_in, needs_grad, cls_in, out_cls)
        self._add(layer, MemoryOp(name=name, elements=elements / b, forward=_merge(fwd), backward=_merge(bwd)))
        for o in outputs:
            self._record(o, out_cls if o.is_floating_point() else "stream", None, layer)


def backward_passes(name, out, floats_in, needs_grad, cls_in, out_cls) -> list[tuple[float, str]]:
    """Tensor passes (in units of ``out``'s elements) of an element-wise or reduction
    operator's backward, as eager autograd runs it: nothing when no input needs a gradient;
    norms read the gradient and the input and write the input gradient (batch norm reads
    the input twice, as in its forward); softmax reads the gradient and its output; a
    product or quotient of two tensors computes each operand's gradient as its own kernel
    (read the gradient and the other operand, write); dropout and ``masked_fill`` read the
    1-byte mask too; a reduction writes the expanded gradient; sums, concatenations and
    copies pass the gradient on (a copy of a strided tensor copies it back into that
    layout); a product with a constant reads the gradient and writes; any other operator reads the gradient and what it saved and writes the input
    gradient. A gradient whose dtype class differs from its input's (an ``act`` input of a
    ``stream`` result) is cast back."""
    if not needs_grad:
        return []
    e = float(out.numel())
    scalar_like = [t for t in floats_in if t.dim() == 0 or t.numel() == 1]
    full = [t for t in needs_grad if t.dim() > 0 and t.numel() > 1]
    passes: list[tuple[float, str]] = []
    if name in ("native_layer_norm", "_fused_rms_norm"):
        x = needs_grad[0]
        passes.append((3 * x.numel() / e, out_cls))
    elif name in BATCH_NORM_OPS:
        passes.append((5.0, out_cls))
    elif name in ("_softmax", "_log_softmax"):
        passes.append((3.0, out_cls))
    elif name in ("native_dropout", "masked_fill"):
        passes += [(2.0, out_cls), (1.0, "byte")]
    elif name in ("sum", "mean", "amax", "amin", "max", "min", "var", "std", "avg_pool2d",
                  "adaptive_avg_pool2d", "_adaptive_avg_pool2d"):
        passes += [(t.numel() / e, c) for t, c in zip(floats_in, cls_in) if t.requires_grad]
    elif name in ("mul", "div") and len(floats_in) == 2 and not scalar_like:
        passes += [(3.0, out_cls)] * len(needs_grad)
    elif name in ("mul", "div") and len(full) == 1 and len(floats_in) - len(scalar_like) == 1:
        passes.append((2.0, out_cls))  # times a constant: read the gradient, write
    elif name in ZERO_BACKWARD_OPS:
        if name in ("clone", "_to_copy", "copy", "copy_") and floats_in and not floats_in[0].is_contiguous():
            passes.append((2.0, out_cls))
        if name in ("add", "sub"):
            passes += [(1.0, out_cls) for t in full if t.numel() < e]  # broadcast: sum the gradient
    else:
        passes += [(3.0 * t.numel() / e, out_cls) for t in needs_grad]
    for t, c in zip(floats_in, cls_in):
        if t.requires_grad and c == "act" and out_cls == "stream":
            passes.append((t.numel() / e, "cast"))
    return passes


def _merge(passes: list[tuple[float, str]]) -> tuple[tuple[float, str], ...]:
    """Passes summed by byte class, in first-seen order (the roofline sums them anyway)."""
    total: dict[str, float] = {}
    for n, c in passes:
        if n:
            total[c] = total.get(c, 0.0) + n
    return tuple((n, c) for c, n in total.items())


def _named_args(func, args, kwargs) -> dict:
    """An operator's arguments by schema name (defaults left out)."""
    named = dict(kwargs)
    for spec, value in zip(func._schema.arguments, args):
        named[spec.name] = value
    return named


VIEW_OPS = frozenset({"_unsafe_view", "_reshape_alias", "lift_fresh"})
"""Operators that return a view although their schema does not say so."""


def _is_view(func) -> bool:
    if func._overloadpacket.__name__ in VIEW_OPS:
        return True
    schema = func._schema
    if schema.is_mutable:
        return False
    return any(r.alias_info is not None for r in schema.returns)


def _tensors(torch, args, kwargs):
    for a in list(args) + list(kwargs.values()):
        if isinstance(a, torch.Tensor):
            yield a
        elif isinstance(a, (list, tuple)):
            for x in a:
                if isinstance(x, torch.Tensor):
                    yield x
