"""The op graph's kernels timed one by one on the rank's device (:mod:`dpsim.profile.op_rates` says which
and how predict uses them): GEMMs with ``torch.matmul``, attention with SDPA forward and backward,
an element-wise kernel over a few sizes for its launch time and streaming bandwidth, and one
representative kernel per kind of the model's memory-bound ops (:data:`MEMORY_KIND_KERNELS`), forward
and, where it is a kernel of its own, backward, at a few sizes each. The same code runs on a CPU and
on CUDA: torch picks the device's kernel, as the model's own step does.
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F

from dpsim.measure.timing import Clock, Steps, _median_time


def _gemm(m: int, n: int, k: int, batch: int, dtype, device):
    shape_a, shape_b = ((batch, m, k), (batch, k, n)) if batch > 1 else ((m, k), (k, n))
    a = torch.randn(*shape_a, device=device).to(dtype)
    b = torch.randn(*shape_b, device=device).to(dtype)
    out = torch.empty(*shape_a[:-2], m, n, device=device, dtype=dtype)
    return lambda: torch.matmul(a, b, out=out)


def _attention(batch_heads: int, seq: int, head_dim: int, causal: bool, dtype, device):
    q, k, v = (torch.randn(1, batch_heads, seq, head_dim, device=device).to(dtype).requires_grad_()
               for _ in range(3))
    grad = torch.randn(1, batch_heads, seq, head_dim, device=device).to(dtype)

    def forward():
        with torch.no_grad():
            F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    def forward_backward():
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        torch.autograd.grad(out, (q, k, v), grad)
    return forward, forward_backward


def _elementwise(size_bytes: int, device):
    # x * 2 into a preallocated output: one read and one write of size_bytes / 2 each
    n = max(1, size_bytes // 8)
    x = torch.ones(n, device=device)
    out = torch.empty_like(x)
    return 8 * n, lambda: torch.mul(x, 2.0, out=out)


def _pair(x, y):
    return x + y


def _transpose(x):
    # a (rows, heads, 64) tensor copied head-major, as merging or splitting heads copies it; 64 is
    # GPT-2's and Llama's head size (ASSUMED for a row that is no multiple of it: a plain 2-D transpose)
    rows, row = x.shape
    return (x.view(rows, row // 64, 64).transpose(0, 1) if row % 64 == 0 else x.t()).contiguous()


def _cross_entropy(x):
    target = torch.zeros(x.shape[0], dtype=torch.long, device=x.device)
    return F.cross_entropy(x, target)


MEMORY_KIND_KERNELS = {
    "norm": (lambda x, w, b: F.layer_norm(x, x.shape[-1:], w, b), 2, 3),
    "gelu": (lambda x: F.gelu(x, approximate="tanh"), 2, 3),
    "silu": (F.silu, 2, 3),
    "relu": (F.relu, 2, 3),
    "tanh": (torch.tanh, 2, 3),
    "softmax": (lambda x: torch.softmax(x, dim=-1), 2, 3),
    "cross_entropy": (_cross_entropy, 2, 4),
    "dropout": (lambda x: F.dropout(x, p=0.1, training=True), 2.25, 2.25),
    "add": (_pair, 3, None),
    "mul": (lambda x, y: x * y, 3, None),
    "transpose": (_transpose, 2, None),
    "reduction": (lambda x: x.sum(0), 1, None),
}
"""Each kind's representative kernel (:data:`dpsim.workload.memory_kinds.MEMORY_KINDS`), as the model's
layers call it, and the tensors of its elements it reads and writes forward and backward (``None``: no
backward kernel of its own), so bytes are counted as the roofline counts that kind's passes
(:mod:`dpsim.workload.layers`: a LayerNorm reads x, writes y, its backward reads dy and x and writes dx;
``F.cross_entropy`` is log-softmax (read, write) and NLL, whose backward writes the zero-filled gradient
that log-softmax's backward reads with its output; dropout adds its 1-byte mask, a quarter of a float32
tensor). A ``norm`` takes a weight and bias of the row, ``add`` and ``mul`` a second tensor.

``gelu`` is GELU's tanh form, one kernel: what GPT-2's ``gelu_new`` computes, what Megatron's fused
bias-GELU and the reference GPT-2 module calibrate times run (:mod:`dpsim.workload.torch_models`,
``GPT2MLP``: ``nn.GELU(approximate="tanh")``), and what ``dpsim.workload.lowering`` names ``gelu``
either way. On a GPU both forms stream at copy speed; on a CPU the erf form runs faster (on
2026-12-07, an AVX-512 host, torch 2.13, one thread: 130 us against 447 us over 256 x 1024 float32),
so an erf-GELU model (BERT, torchvision's ViT) is over-costed there by the difference."""


def _memory_kind(kind: str, row: int, elements: int, dtype, device):
    """(bytes forward, bytes backward or None, forward, forward + backward) of ``kind`` on ``elements``."""
    fn, passes_f, passes_b = MEMORY_KIND_KERNELS[kind]
    rows = max(1, elements // row)
    x = torch.randn(rows, row, device=device).to(dtype).requires_grad_(passes_b is not None)
    args = [x]
    if kind == "norm":
        args += [torch.ones(row, device=device, dtype=dtype).requires_grad_(),
                 torch.zeros(row, device=device, dtype=dtype).requires_grad_()]
    elif kind in ("add", "mul"):
        args.append(torch.randn(rows, row, device=device).to(dtype))
    size = x.element_size() * rows * row

    def forward():
        with torch.no_grad():
            fn(*args)

    with torch.no_grad():
        grad = torch.ones_like(fn(*args))  # made once: the backward's incoming gradient is no part of it

    def forward_backward():
        torch.autograd.grad(fn(*args), [a for a in args if a.requires_grad], grad)
    return (passes_f * size, passes_b * size if passes_b is not None else None, forward,
            forward_backward if passes_b is not None else None)


def op_steps(plan: dict) -> int:
    """Progress steps :func:`bench_ops` takes: one per kernel, one for the element-wise sweep, one per
    memory-bound kind."""
    kernels = plan.get("op_kernels")
    return len(kernels["matmul"]) + len(kernels["attention"]) + 1 + len(kernels.get("memory_kinds", [])) \
        if kernels else 0


def bench_ops(device: torch.device, clock: Clock, plan: dict, steps: Steps) -> dict:
    """Times ``plan["op_kernels"]`` (:func:`dpsim.profile.op_rates.kernels_to_time`) in ``plan["op_dtype"]``,
    one progress step each (the watchdog and the supervisor see a long sweep progress); stops timing
    kernels when ``plan["budget_s"]`` has passed (those left count in ``left_out``). ``clock`` is the
    harness's :func:`~dpsim.measure.timing.kernel_clock`: a kernel's own time, not the machine's load."""
    kernels = plan["op_kernels"]
    dtype = getattr(torch, plan["op_dtype"])
    batch_s = plan["batch_s"]
    deadline = time.monotonic() + float(plan.get("budget_s") or 60.0)
    out: dict = {"matmul": [], "attention": [], "memory": [], "memory_kinds": [],
                 "left_out": int(kernels.get("left_out", 0))}

    def gemm(m: int, n: int, k: int, batch: int) -> dict:
        t = _median_time(_gemm(m, n, k, batch, dtype, device), clock, batch_s=batch_s)
        return {"m": m, "n": n, "k": k, "batch": batch, "time_s": t}

    def attention(batch_heads: int, seq: int, head_dim: int, causal: bool) -> dict:
        forward, forward_backward = _attention(batch_heads, seq, head_dim, causal, dtype, device)
        fwd = _median_time(forward, clock, batch_s=batch_s)
        both = _median_time(forward_backward, clock, batch_s=batch_s)
        return {"batch_heads": batch_heads, "seq": seq, "head_dim": head_dim, "causal": causal,
                "forward_s": fwd, "backward_s": both - fwd}

    for kind, time_one in (("matmul", gemm), ("attention", attention)):
        for shape in kernels[kind]:
            if time.monotonic() > deadline:
                out["left_out"] += 1
                continue
            label = f"{'GEMM' if kind == 'matmul' else kind} {'x'.join(str(int(x)) for x in shape)}"
            steps.begin(label)
            out[kind].append(time_one(*shape))
            steps.end(label)
    steps.begin("element-wise kernel: launch and bandwidth")
    for size in plan["op_memory_bytes"]:
        moved, fn = _elementwise(int(size), device)
        out["memory"].append({"size_bytes": moved, "time_s": _median_time(fn, clock, batch_s=batch_s)})
    steps.end("element-wise kernel: launch and bandwidth")
    for spec in kernels.get("memory_kinds", []):
        if time.monotonic() > deadline:  # a kind not timed is costed at the element-wise fit
            continue
        kind, row = spec["kind"], int(spec["row"])
        label = f"{kind} kernel ({'forward and backward' if MEMORY_KIND_KERNELS[kind][2] else 'forward'})"
        steps.begin(label)
        for elements in spec["elements"]:
            bytes_f, bytes_b, forward, forward_backward = _memory_kind(kind, row, int(elements), dtype, device)
            fwd = _median_time(forward, clock, batch_s=batch_s)
            out["memory_kinds"].append({"kind": kind, "direction": "forward", "size_bytes": bytes_f, "time_s": fwd})
            if forward_backward is not None:
                # the backward alone: forward + backward less the forward, as for attention
                both = _median_time(forward_backward, clock, batch_s=batch_s)
                out["memory_kinds"].append({"kind": kind, "direction": "backward", "size_bytes": bytes_b,
                                            "time_s": max(both - fwd, 1e-9)})
        steps.end(label)
    return out
