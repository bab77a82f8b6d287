"""The kind of kernel a memory-bound op runs, so a profile can rate each kind as its own kernel.

The roofline costs every :class:`~dpsim.workload.spec.MemoryOp` by the bytes it streams, as if all
element-wise kernels moved bytes at one rate. A GPU nearly does (they are bandwidth-bound), but a
CPU runs LayerNorm, tanh, GELU and softmax compute-bound, at a fraction of a copy's bandwidth, and
a transposing copy (heads merged) strided. ``dpsim calibrate --model`` therefore times one
representative kernel per kind the model has (:mod:`dpsim.measure.bench_ops`), and
``predict --calibration`` costs each op at its kind's measured rate
(:mod:`dpsim.profile.op_rates`).

An op's kind is :attr:`MemoryOp.kind <dpsim.workload.spec.MemoryOp.kind>` when its builder set it
(an activation, whose function its name does not say), else read from the last dotted part of its
name: the catalog's builders (:mod:`dpsim.workload.layers`) and the lowering of traced aten
operators (:mod:`dpsim.workload.lowering`, which names an op after its operator) both name ops by
what they run. An op of no listed kind (an embedding, a cast, an eager RMSNorm's row statistics)
is ``""``: costed at the one element-wise fit, as before kinds existed.
"""

from __future__ import annotations

from dpsim.workload.spec import MemoryOp

MEMORY_KINDS: dict[str, bool] = {
    "norm": True,
    "gelu": True,
    "silu": True,
    "relu": True,
    "tanh": True,
    "softmax": True,
    "cross_entropy": True,
    "dropout": True,
    "add": False,
    "mul": False,
    "transpose": False,
    "reduction": False,
}
"""Every kind a profile may rate, and whether its backward is a kernel of its own (timed apart):
``norm`` a fused LayerNorm; the activations (:data:`dpsim.workload.layers.ACTIVATIONS`); ``softmax``
(attention's eager softmax, a router's); ``cross_entropy`` the LM loss (log-softmax, then NLL);
``dropout``; ``add`` (a residual, autograd's gradient sums); ``mul`` (a product, a power, a scale);
``transpose`` (a strided copy: heads merged, experts permuted); ``reduction`` (a bias gradient's
sum over the rows). A kind without a backward kernel of its own costs its backward passes at its
forward kernel's rate (a gradient sum is an add)."""

DIRECTIONS = ("forward", "backward")
"""Which of an op's two passes a kind's rate was timed for."""

_BY_PART = {
    "norm": "norm", "layernorm": "norm", "native_layer_norm": "norm", "layer_norm": "norm",
    "_fused_rms_norm": "norm", "rms_norm": "norm",
    "gelu": "gelu", "silu": "silu", "relu": "relu", "tanh": "tanh",
    "softmax": "softmax", "_softmax": "softmax", "log_softmax": "softmax", "_log_softmax": "softmax",
    "softmax_topk": "softmax",
    "loss": "cross_entropy", "nll_loss_forward": "cross_entropy", "cross_entropy": "cross_entropy",
    "drop": "dropout", "dropout": "dropout", "native_dropout": "dropout",
    "add": "add", "sub": "add", "residual": "add", "one_plus": "add", "branch_sum": "add",
    "mul": "mul", "half": "mul", "coef": "mul", "scale": "mul", "pow": "mul", "cos": "mul", "sin": "mul",
    "div": "mul", "weight": "mul",
    "merge_heads": "transpose", "permute": "transpose", "unpermute": "transpose", "clone": "transpose",
    "bias_grad": "reduction",
}
"""Kind of an op named by its last dotted part (the names :mod:`dpsim.workload.layers`,
:mod:`dpsim.workload.architectures` and :mod:`dpsim.workload.lowering` give)."""

_BATCH_NORMS = frozenset({"native_batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit_functional",
                          "cudnn_batch_norm", "batch_norm"})
"""Batch norm is not LayerNorm's kernel (statistics over the batch): left to the one fit."""


def memory_kind(op: MemoryOp) -> str:
    """The kind of ``op`` (a key of :data:`MEMORY_KINDS`), or ``""`` when it is none of them."""
    if op.kind:
        return op.kind
    part = op.name.rsplit(".", 1)[-1].lower()
    if part in _BATCH_NORMS:
        return ""
    if part in _BY_PART:
        return _BY_PART[part]
    if part.endswith("grad_sum"):
        return "add"
    if part.startswith("ln_") or part in ("ln", "ln_f") or part.endswith("layernorm") or part.endswith("_norm"):
        return "norm"
    if part.endswith("dropout"):
        return "dropout"
    return ""
