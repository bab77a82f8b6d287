"""The op graph's kernels timed one by one on the rank's device (:mod:`dpsim.profile.op_rates` says which
and how predict uses them): GEMMs with ``torch.matmul``, attention with SDPA forward and backward,
and an element-wise kernel over a few sizes for its launch time and streaming bandwidth.
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


def op_steps(plan: dict) -> int:
    """Progress steps :func:`bench_ops` takes: one per kernel, one for the element-wise sweep."""
    kernels = plan.get("op_kernels")
    return len(kernels["matmul"]) + len(kernels["attention"]) + 1 if kernels else 0


def bench_ops(device: torch.device, clock: Clock, plan: dict, steps: Steps) -> dict:
    """Times ``plan["op_kernels"]`` (:func:`dpsim.profile.op_rates.kernels_to_time`) in ``plan["op_dtype"]``,
    one progress step each (the watchdog and the supervisor see a long sweep progress); stops timing
    kernels when ``plan["budget_s"]`` has passed (those left count in ``left_out``). ``clock`` is the
    harness's :func:`~dpsim.measure.timing.kernel_clock`: a kernel's own time, not the machine's load."""
    kernels = plan["op_kernels"]
    dtype = getattr(torch, plan["op_dtype"])
    batch_s = plan["batch_s"]
    deadline = time.monotonic() + float(plan.get("budget_s") or 60.0)
    out: dict = {"matmul": [], "attention": [], "memory": [], "left_out": int(kernels.get("left_out", 0))}

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
    return out
