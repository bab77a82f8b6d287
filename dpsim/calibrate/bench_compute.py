"""Compute micro-benchmarks of the harness: matmul rates, copy bandwidth, overlap interference, a model's step.
"""

from __future__ import annotations

import importlib
import math
import statistics
import sys
import time

import torch
import torch.distributed as dist

from dpsim.calibrate.bench_collectives import ELEMENT, ELEMENT_BYTES, _reduce_device
from dpsim.calibrate.timing import Clock, _median_time
from dpsim.workload.catalog import CATALOG_ENTRIES
from dpsim.workload.from_torch import parse_input_shape, parse_model_ref

# ----------------------------------------------------------------------------- compute


def _matmul_shapes(device: torch.device, plan: dict) -> list[tuple[int, int, int]]:
    if plan.get("matmul_shapes"):
        return [tuple(s) for s in plan["matmul_shapes"]]
    if device.type == "cuda":
        # square sweeps plus the best shapes mamf-finder reported on A100 and H100
        # (hardware.csv H013: 1024x10240x5120, H015: 2048x2048x13312)
        return [(2048, 2048, 2048), (4096, 4096, 4096), (8192, 8192, 8192), (1024, 10240, 5120),
                (2048, 2048, 13312)]
    return [(256, 256, 256), (512, 512, 512), (1024, 1024, 1024)]


def bench_matmul(device: torch.device, clock: Clock, plan: dict) -> list[dict]:
    rows = []
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
    for dtype_name in plan["dtypes"]:
        dtype = getattr(torch, dtype_name)
        for m, n, k in _matmul_shapes(device, plan):
            a = torch.randn(m, k, device=device).to(dtype)
            b = torch.randn(k, n, device=device).to(dtype)
            c = torch.empty(m, n, device=device, dtype=dtype)
            t = _median_time(lambda: torch.mm(a, b, out=c), clock, batch_s=plan["batch_s"])
            rows.append({"dtype": dtype_name, "m": m, "n": n, "k": k, "time_s": t, "flops_per_s": 2.0 * m * n * k / t})
    return rows


def bench_memcpy(device: torch.device, clock: Clock, plan: dict) -> dict:
    nbytes = int(plan["memcpy_bytes"])
    src = torch.empty(nbytes, dtype=torch.uint8, device=device).fill_(1)
    dst = torch.empty_like(src)
    t = _median_time(lambda: dst.copy_(src), clock, batch_s=plan["batch_s"])
    return {"bytes": nbytes, "time_s": t, "bandwidth_bytes_per_s": 2.0 * nbytes / t}


def bench_overlap(device: torch.device, clock: Clock, plan: dict, group, backend: str) -> dict:
    """Matmul time alone and while all-reduces run on ``group``."""
    n = 4096 if device.type == "cuda" else 384
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    c = torch.empty(n, n, device=device, dtype=dtype)

    def compute():
        torch.mm(a, b, out=c)

    comm_bytes = int(plan["overlap_bytes"])
    buf = torch.zeros(comm_bytes // ELEMENT_BYTES, dtype=ELEMENT, device=device)
    repeats = max(3, plan["iters"] // 2)
    # compute alone: `inner` matmuls per repeat, agreed across ranks
    for _ in range(3):
        compute()
    clock.sync()
    t = clock.start()
    compute()
    one = max(clock.stop(t), 1e-7)
    rd = _reduce_device(backend, device)
    agree = torch.tensor([one], dtype=torch.float64, device=rd)
    dist.all_reduce(agree, op=dist.ReduceOp.MAX, group=group)
    inner = int(max(1, math.ceil(4 * plan["batch_s"] / float(agree.item()))))
    alone = []
    for _ in range(repeats):
        dist.barrier(group=group)
        clock.sync()
        t = clock.start()
        for _ in range(inner):
            compute()
        alone.append(clock.stop(t))
    window = statistics.median(alone)
    # one collective alone, then enough of them to cover the compute window 1.5 times
    dist.all_reduce(buf, group=group)
    clock.sync()
    t = clock.start()
    dist.all_reduce(buf, group=group)
    comm_one = max(clock.stop(t), 1e-7)
    agree = torch.tensor([window, comm_one], dtype=torch.float64, device=rd)
    dist.all_reduce(agree, op=dist.ReduceOp.MAX, group=group)
    window_max, comm_max = (float(x) for x in agree.tolist())
    k = int(min(10_000, max(1, math.ceil(1.5 * window_max / comm_max))))
    together = []
    for _ in range(repeats):
        dist.barrier(group=group)
        clock.sync()
        works = [dist.all_reduce(buf, group=group, async_op=True) for _ in range(k)]
        t = clock.start()
        for _ in range(inner):
            compute()
        together.append(clock.stop(t))
        for w in works:
            w.wait()
        clock.sync()
    concurrent = statistics.median(together)
    return {"matmul_n": n, "matmul_dtype": str(dtype).removeprefix("torch."), "matmuls": inner,
            "collective": "all_reduce", "collective_bytes": comm_bytes, "collectives": k,
            "compute_alone_s": window, "compute_concurrent_s": concurrent,
            "slowdown": max(0.0, concurrent / window - 1.0)}


def _first_tensor(out):
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, dict):
        out = list(out.values())
    if hasattr(out, "logits"):
        return out.logits
    if isinstance(out, (list, tuple)):
        for o in out:
            t = _first_tensor(o)
            if t is not None:
                return t
    return None


def layer_modules(model: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    """The model's "layers": leaves and the blocks of its ModuleLists/Sequentials, in order."""
    containers = (torch.nn.ModuleList, torch.nn.Sequential)
    chosen: list[tuple[str, torch.nn.Module]] = []

    def has_blocks(m: torch.nn.Module) -> bool:
        return any(isinstance(x, containers) and len(x) >= 2 for x in m.modules())

    def visit(prefix: str, m: torch.nn.Module) -> None:
        kids = list(m.named_children())
        if isinstance(m, containers) and len(m) >= 2:
            chosen.extend((f"{prefix}.{n}" if prefix else n, c) for n, c in kids)
        elif kids and has_blocks(m):
            for n, c in kids:
                visit(f"{prefix}.{n}" if prefix else n, c)
        else:
            chosen.append((prefix or type(m).__name__, m))

    visit("", model)
    return chosen


def _import_builder_module(ref):
    """The module a parsed ``--model`` reference names (a ``.py`` file or a dotted module)."""
    if ref.is_file:
        from importlib.util import module_from_spec, spec_from_file_location
        from pathlib import Path
        path = Path(ref.target).resolve()
        spec = spec_from_file_location(f"_dpsim_calibrate_model_{abs(hash(str(path)))}", path)
        module = module_from_spec(spec)
        sys.path.insert(0, str(path.parent))  # let the file import its neighbours
        try:
            spec.loader.exec_module(module)
        finally:
            sys.path.remove(str(path.parent))
        return module
    return importlib.import_module(ref.target)


def _with_batch(x, micro_batch: int):
    """An example input resized to ``micro_batch`` along dim 0 (rows repeated or cut)."""
    if isinstance(x, torch.Tensor):
        if x.dim() == 0 or x.shape[0] == micro_batch:
            return x
        return x.index_select(0, torch.arange(micro_batch, device=x.device) % x.shape[0])
    if isinstance(x, tuple):
        return tuple(_with_batch(v, micro_batch) for v in x)
    if isinstance(x, list):
        return [_with_batch(v, micro_batch) for v in x]
    if isinstance(x, dict):
        return {k: _with_batch(v, micro_batch) for k, v in x.items()}
    return x


def _to_device(x, device: torch.device):
    if isinstance(x, torch.Tensor):
        return x.to(device)
    if isinstance(x, (tuple, list)):
        return type(x)(_to_device(v, device) for v in x)
    if isinstance(x, dict):
        return {k: _to_device(v, device) for k, v in x.items()}
    return x


def build_model(spec: str, micro_batch: int, plan: dict, device: torch.device):
    """(module, input batch) for a catalog name or a builder, as ``predict --model`` names them.

    A builder is ``path/file.py:fn`` or ``package.module:fn`` (optionally ``:example_fn``),
    with the example input from, in this order: ``--input-shape`` (predict's syntax,
    ``8,3,224,224`` or ``4,1024:int64``; random normal floats, zero integers), the
    example function, a module-level ``example_input()``, or an ``example_input(batch)``
    method of the module. Its first dimension is set to ``micro_batch``.
    """
    if ":" not in spec:
        from dpsim.workload.torch_models import example_input, torch_model_for
        cfg = CATALOG_ENTRIES[spec].config
        model = torch_model_for(cfg)
        return model.to(device), example_input(cfg, micro_batch, plan.get("seq_len")).to(device)
    ref = parse_model_ref(spec)
    mod = _import_builder_module(ref)
    model = getattr(mod, ref.function)()
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"--model: {spec} returned {type(model).__name__}, expected a torch.nn.Module")
    if plan.get("input_shape"):
        shape, dtype = parse_input_shape(plan["input_shape"])
        tdtype = getattr(torch, dtype)
        x = (torch.randn(shape).to(tdtype) if tdtype.is_floating_point else torch.zeros(shape, dtype=tdtype))
    elif ref.example_function or hasattr(mod, "example_input"):
        x = getattr(mod, ref.example_function or "example_input")()
    elif hasattr(model, "example_input"):
        x = model.example_input(micro_batch)
    else:
        raise TypeError(f"--model: {spec} needs an example input: pass --input-shape (e.g. 8,3,224,224 or "
                        "4,1024:int64) or define example_input()")
    return model.to(device), _to_device(_with_batch(x, micro_batch), device)


def bench_model(spec: str, micro_batch: int, device: torch.device, clock: Clock, plan: dict) -> dict:
    """Forward/backward of a real model: whole (median) and per module (hooks)."""
    model, x = build_model(spec, micro_batch, plan, device)
    model.train()
    use_bf16 = device.type == "cuda" and torch.cuda.is_bf16_supported()
    dtype = "bfloat16" if use_bf16 else "float32"

    def call():
        if isinstance(x, dict):
            return model(**x)
        if isinstance(x, (tuple, list)):
            return model(*x)
        return model(x)

    def forward():
        if use_bf16:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                return _first_tensor(call()).float().mean()
        return _first_tensor(call()).float().mean()

    def step():
        model.zero_grad(set_to_none=True)
        t = clock.start()
        loss = forward()
        f = clock.stop(t)
        t = clock.start()
        loss.backward()
        return f, clock.stop(t)

    for _ in range(2):
        step()
    runs = [step() for _ in range(max(3, plan["iters"] // 2))]
    step_times = [f + b for f, b in runs]  # every timed repeat, for the step-time spread (noise)
    fwd = statistics.median(r[0] for r in runs)
    bwd = statistics.median(r[1] for r in runs)

    layers = layer_modules(model)
    marks: dict[str, dict[str, list]] = {name: {"f": [], "b": []} for name, _ in layers}
    handles = []
    sync_cpu = not clock.cuda

    def now():
        if clock.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            return ev
        return time.perf_counter()

    for name, m in layers:
        rec = marks[name]
        handles.append(m.register_forward_pre_hook(lambda mod, inp, rec=rec: rec["f"].append([now(), None])))
        handles.append(m.register_forward_hook(lambda mod, inp, out, rec=rec: rec["f"][-1].__setitem__(1, now())))
        handles.append(m.register_full_backward_pre_hook(lambda mod, go, rec=rec: rec["b"].append([now(), None])))
        handles.append(m.register_full_backward_hook(
            lambda mod, gi, go, rec=rec: rec["b"][-1].__setitem__(1, now()) if rec["b"] else None))
    per_layer: dict[str, list[tuple[float, float]]] = {name: [] for name, _ in layers}
    try:
        for _ in range(3):
            for rec in marks.values():
                rec["f"].clear()
                rec["b"].clear()
            step()
            clock.sync()
            for name, rec in marks.items():
                def total(pairs):
                    s = 0.0
                    for a, b in pairs:
                        if b is None:
                            continue
                        s += (b - a) if sync_cpu else a.elapsed_time(b) / 1e3
                    return s
                per_layer[name].append((total(rec["f"]), total(rec["b"])))
    finally:
        for h in handles:
            h.remove()
    layer_rows = [{"name": name, "forward_s": statistics.median(t[0] for t in per_layer[name]),
                   "backward_s": statistics.median(t[1] for t in per_layer[name])} for name, _ in layers]
    return {"model": spec, "micro_batch": micro_batch, "dtype": dtype, "forward_s": fwd, "backward_s": bwd,
            "step_times_s": step_times, "layers": layer_rows}
