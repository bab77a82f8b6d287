"""Predicted vs published single-GPU training throughput, leave-one-GPU-out.

``python validation/accuracy_compute.py`` prints one line per row of
``tests/data/single_gpu_throughput.csv`` (published throughput, each row citing its
source and exact configuration) with dpsim's prediction from the GPU preset's specs and
the roofline (:mod:`dpsim.workload.compute`), then the summary the issue scores: median
and worst |predicted / measured - 1|. ``--markdown`` prints the table as Markdown;
``--write`` rewrites VALIDATION.md's "Single-GPU throughput" section (only that section,
between its two markers; appended when absent).

Leave one system out. The roofline has two constants that are not datasheet numbers or
measurements (:class:`dpsim.workload.roofline.Efficiencies`: the fraction of the GPU's
streaming bandwidth that element-wise kernels reach, and of the best measured matmul rate
that real layers reach). They are fitted here, by least squares on ln(predicted /
measured), and a row's prediction uses the constants fitted on the rows of the *other*
GPU chips only (:data:`CHIPS`: an A100 PCIe row is never predicted with constants fitted
on an A100 SXM row). The constants shipped in :mod:`dpsim.workload.roofline` are the fit
on every row, printed last; a test checks they agree.

Rows measured on several GPUs (the MPT rows: 8 GPUs, FSDP) are compared per GPU with
dpsim's one-GPU compute of the same micro-batches, the optimizer updating the GPU's
1/N shard; communication is taken as hidden behind compute (FSDP prefetches), which
these rows' own MFU figures cannot confirm or refute: they are flagged ``(8 GPUs)``.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from dpsim.files import write_text_atomic
from dpsim.hardware import get_gpu
from dpsim.workload import roofline
from dpsim.workload.architectures import GPT2Config, ResNetConfig, build_gpt2, build_resnet
from dpsim.workload.catalog import get_entry, get_model
from dpsim.workload.compute import compute_profile, layer_terms, optimizer_terms
from dpsim.workload.precision import get_precision
from dpsim.workload.roofline import HOST_OVERHEAD_PER_OP_S, TRITON_FLASH_SLOWDOWN, Efficiencies
from dpsim.workload.layers import with_attention_kernel
from dpsim.workload.spec import AttentionOp, ModelSpec

DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "single_gpu_throughput.csv"

CHIPS = {
    "v100": "GV100", "v100-16gb": "GV100", "v100-pcie": "GV100",
    "a10": "GA102", "rtx3090": "GA102",
    "a100": "GA100", "a100-pcie-40gb": "GA100", "a100-pcie-80gb": "GA100",
    "h100": "GH100", "h100-pcie": "GH100", "h100-nvl": "GH100", "gh200": "GH100", "h200": "GH100",
    "b200": "GB100", "gb200": "GB100",
}
"""GPU preset -> the silicon it is; the unit left out in the leave-one-out fit."""

MPT = "mosaicml/llm-foundry scripts/train/benchmarking/README.md (NumParams column)"
REFERENCE_MODELS: dict[str, tuple[GPT2Config, int]] = {
    # MPT benchmark configurations: GPT-2 blocks (biases, learned positions) with vocab
    # 50368, GELU, no dropout; the NumParams of the benchmark table equal these configs'.
    "mpt-1b": (GPT2Config(n_embd=2048, n_layer=24, n_head=16, vocab_size=50368, n_positions=2048,
                          activation_function="gelu", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0),
               1_315_950_592),
    "mpt-3b": (GPT2Config(n_embd=2560, n_layer=32, n_head=20, vocab_size=50368, n_positions=2048,
                          activation_function="gelu", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0),
               2_651_837_440),
    "mpt-7b": (GPT2Config(n_embd=4096, n_layer=32, n_head=32, vocab_size=50368, n_positions=2048,
                          activation_function="gelu", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0),
               6_658_859_008),
}
"""Models of the set that are not in the catalog: config and the published parameter count
at the config's ``n_positions`` (:data:`MPT`)."""

FIT_BOUNDS = {"memory": (0.3, 1.0), "matmul": (0.3, 1.2)}
"""Search range of each fitted constant."""


@dataclass(frozen=True, kw_only=True)
class Row:
    """One published measurement and its configuration."""

    id: str
    gpu: str
    system: str
    model: str
    seq_len: int | None
    channels_last: bool
    attention: str
    precision: str
    micro_batch: int
    grad_accum: int
    optimizer: str
    gpus: int
    measured: float
    """Samples per second per GPU: the steady state dpsim predicts (for Lambda's rows, read
    from the run logs by ``validation/lambda_logs.py``)."""
    published: float
    """The figure as the source's table prints it (Lambda's includes the start-up)."""
    optimizer_impl: str
    """``foreach``, ``fused``, ``loop`` or ``loop:N`` (N ops per parameter): how the row's
    optimizer ran (:data:`dpsim.workload.compute.OPTIMIZER_IMPLEMENTATIONS`)."""
    grad_clip: bool
    """The script clips the gradients to a global norm every step (the CSV's ``grad_clip`` is
    ``yes``; blank: no clipping known)."""
    zero_grad_loop: bool
    """The gradients are zeroed one ``zero_()`` per parameter (the CSV's ``zero_grad`` is
    ``loop``: Apex O2's patched ``zero_grad``; blank: set to None or one foreach kernel)."""
    scored: str
    """``yes``, or ``no: <why>`` for a row kept for reference but neither fitted nor scored."""
    source: str

    @property
    def chip(self) -> str:
        return CHIPS[self.gpu]

    @property
    def is_scored(self) -> bool:
        return self.scored == "yes"

    @property
    def optimizer_kernels(self) -> tuple[str, int | None]:
        """(implementation, ops per parameter or None for the optimizer's own count)."""
        impl, _, ops = self.optimizer_impl.partition(":")
        return impl, int(ops) if ops else None


def load_rows(path: Path = DATA) -> list[Row]:
    with open(path, newline="") as f:
        return [Row(id=r["id"], gpu=r["gpu"], system=r["system"], model=r["model"],
                    seq_len=int(r["seq_len"]) if r["seq_len"] else None,
                    channels_last=r["channels_last"] == "true", attention=r["attention"],
                    precision=r["precision"], micro_batch=int(r["micro_batch"]), grad_accum=int(r["grad_accum"]),
                    optimizer=r["optimizer"], gpus=int(r["gpus"]), measured=float(r["samples_per_s"]),
                    published=float(r["published_samples_per_s"]), optimizer_impl=r["optimizer_impl"],
                    grad_clip=r["grad_clip"] == "yes", zero_grad_loop=r["zero_grad"] == "loop",
                    scored=r["scored"], source=r["source"]) for r in csv.DictReader(f)]


def build(row: Row) -> ModelSpec:
    """The row's model as dpsim builds it (attention kernel and memory layout from the row)."""
    fused = row.attention in ("fused", "triton")
    if row.model in REFERENCE_MODELS:
        cfg, _ = REFERENCE_MODELS[row.model]
        if row.seq_len and row.seq_len > cfg.n_positions:
            cfg = dataclasses.replace(cfg, n_positions=row.seq_len)
        model = build_gpt2(cfg, name=row.model, seq_len=row.seq_len, flash_attention=fused)
        return with_attention_kernel(model, "triton") if row.attention == "triton" else model
    if row.model == "resnet50":
        cfg = dataclasses.replace(get_entry("resnet50").config, channels_last=row.channels_last)
        assert isinstance(cfg, ResNetConfig)
        return build_resnet(cfg, name="resnet50")
    return get_model(row.model, seq_len=row.seq_len, flash_attention=fused)


_KINDS = {"memory": 0, "matmul": 1, "attention": 3}


@dataclass(frozen=True)
class Kernels:
    """A row's roofline kernels, flattened for fast re-evaluation under other constants."""

    compute_s: np.ndarray
    memory_s: np.ndarray
    host_s: np.ndarray
    kind: np.ndarray
    weight: np.ndarray
    """How many times each kernel runs per step (gradient accumulation; 1/N of the optimizer)."""
    samples: int
    """Samples per GPU per step."""


def kernels(row: Row) -> Kernels:
    model = build(row)
    gpu = get_gpu(row.gpu)
    precision = get_precision(row.precision)
    terms: list[tuple[roofline.Term, float]] = []
    for layer in model.layers:
        assert layer.ops, f"{row.id}: layer {layer.name} has no ops"
        for _, forward, backward in layer_terms(layer, gpu, precision, row.micro_batch):
            terms += [(t, float(row.grad_accum)) for t in forward + backward]
    shard = 1.0 / row.gpus
    impl, ops = row.optimizer_kernels
    terms += [(t, shard) for t in optimizer_terms(model, gpu, precision, row.optimizer, implementation=impl,
                                                  ops_per_param=ops, clip_grad_norm=row.grad_clip,
                                                  zero_grad_loop=row.zero_grad_loop)]
    return Kernels(compute_s=np.array([t.compute_s for t, _ in terms]),
                   memory_s=np.array([t.memory_s for t, _ in terms]),
                   host_s=np.array([t.host_s for t, _ in terms]),
                   kind=np.array([_KINDS[t.kind] for t, _ in terms]),
                   weight=np.array([w for _, w in terms]),
                   samples=row.micro_batch * row.grad_accum)


def predicted(k: Kernels, eff: Efficiencies) -> float:
    """Samples per second per GPU under the constants ``eff``."""
    scale = np.where(k.kind == 1, eff.matmul, 1.0)
    times = np.maximum(np.maximum(k.compute_s / scale, k.memory_s / eff.memory), k.host_s)
    return k.samples / float(np.dot(times, k.weight))


def log_loss(ks: list[Kernels], measured: list[float], eff: Efficiencies) -> float:
    return sum(math.log(predicted(k, eff) / m) ** 2 for k, m in zip(ks, measured))


def fit(ks: list[Kernels], measured: list[float], start: Efficiencies | None = None) -> Efficiencies:
    """Least squares on ln(predicted / measured) over the fitted constants: coordinate
    descent with a golden-section search of each constant (in log space) inside :data:`FIT_BOUNDS`."""
    eff = start or Efficiencies(memory=0.8, matmul=1.0)
    golden = (math.sqrt(5) - 1) / 2
    for _ in range(8):
        for name, (lo, hi) in FIT_BOUNDS.items():
            a, b = math.log(lo), math.log(hi)
            f = lambda x: log_loss(ks, measured, dataclasses.replace(eff, **{name: math.exp(x)}))  # noqa: E731
            c, d = b - golden * (b - a), a + golden * (b - a)
            fc, fd = f(c), f(d)
            for _ in range(30):
                if fc < fd:
                    b, d, fd = d, c, fc
                    c = b - golden * (b - a)
                    fc = f(c)
                else:
                    a, c, fc = c, d, fd
                    d = a + golden * (b - a)
                    fd = f(d)
            eff = dataclasses.replace(eff, **{name: round(math.exp((a + b) / 2), 4)})
    return eff


@dataclass(frozen=True, kw_only=True)
class Result:
    row: Row
    predicted: float
    """Leave-one-chip-out prediction, samples/s per GPU."""
    efficiencies: Efficiencies
    """Constants fitted without the row's chip."""
    shipped: float
    """Prediction with the constants shipped in dpsim (fitted on every row)."""

    @property
    def error(self) -> float:
        return self.predicted / self.row.measured - 1


def evaluate(rows: list[Row] | None = None) -> tuple[list[Result], Efficiencies]:
    """Every row's leave-one-chip-out prediction, and the fit on all scored rows (unscored
    rows are predicted too, with the fit that leaves their chip out, but never fitted on)."""
    rows = rows if rows is not None else load_rows()
    ks = [kernels(r) for r in rows]
    measured = [r.measured for r in rows]
    scored = [i for i, r in enumerate(rows) if r.is_scored]
    all_rows = fit([ks[i] for i in scored], [measured[i] for i in scored])
    folds: dict[str, Efficiencies] = {}
    for chip in sorted({r.chip for r in rows}):
        keep = [i for i in scored if rows[i].chip != chip]
        # Started from the same fixed point as every fit: nothing of the left-out chip leaks in.
        folds[chip] = fit([ks[i] for i in keep], [measured[i] for i in keep])
    shipped = Efficiencies()
    results = [Result(row=r, predicted=predicted(k, folds[r.chip]), efficiencies=folds[r.chip],
                      shipped=predicted(k, shipped)) for r, k in zip(rows, ks)]
    return results, all_rows


def summary(results: list[Result]) -> dict[str, float]:
    """Median and worst |error| of the scored rows among ``results``."""
    errors = [abs(r.error) for r in results if r.row.is_scored]
    return {"rows": len(errors), "median": statistics.median(errors), "worst": max(errors),
            "within_10": sum(e <= 0.10 for e in errors) / len(errors),
            "within_25": sum(e <= 0.25 for e in errors) / len(errors)}


def flops_only(row: Row) -> float:
    """What dpsim predicted before the roofline (for comparison): every layer's matmul FLOPs at
    0.6 of the best matmul rate, backward twice the forward, plus the optimizer."""
    model = build(row)
    bare = dataclasses.replace(model, layers=tuple(dataclasses.replace(layer, ops=()) for layer in model.layers))
    profile = compute_profile(bare, get_gpu(row.gpu), micro_batch=row.micro_batch,
                              precision=get_precision(row.precision), optimizer=row.optimizer)
    step = row.grad_accum * (profile.forward_s + profile.backward_s) + profile.optimizer_s / row.gpus
    return row.micro_batch * row.grad_accum / step


def check_profile_agrees(row: Row) -> float:
    """The flattened kernels reproduce :func:`compute_profile` (relative difference), so the
    fit scores exactly what ``dpsim predict`` computes."""
    model, gpu, precision = build(row), get_gpu(row.gpu), get_precision(row.precision)
    impl, ops = row.optimizer_kernels
    profile = compute_profile(model, gpu, micro_batch=row.micro_batch, precision=precision, optimizer=row.optimizer,
                              optimizer_impl=impl, optimizer_ops_per_param=ops, clip_grad_norm=row.grad_clip,
                              zero_grad_loop=row.zero_grad_loop)
    step = row.grad_accum * (profile.forward_s + profile.backward_s) + profile.optimizer_s / row.gpus
    direct = row.micro_batch * row.grad_accum / step
    return direct / predicted(kernels(row), Efficiencies()) - 1


def _label(r: Row) -> str:
    extra = []
    if r.seq_len:
        extra.append(f"seq {r.seq_len}")
    if r.model == "resnet50":
        extra.append("NHWC" if r.channels_last else "NCHW")
    if r.attention:
        extra.append(f"{r.attention} attn")
    return r.model + (f" ({', '.join(extra)})" if extra else "")


def table(results: list[Result], markdown: bool) -> list[str]:
    head = ("row", "GPU", "model", "precision", "batch", "optimizer", "measured /s", "published /s",
            "predicted /s", "error", "fit without chip")
    lines = []
    if markdown:
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    else:
        lines.append(f"{'row':5} {'GPU':15} {'model':40} {'precision':12} {'batch':>9} {'optimizer':9} {'measured':>9} "
                     f"{'published':>9} {'predicted':>9} {'error':>7}  fit without chip (memory, matmul)")
    for res in results:
        r, e = res.row, res.efficiencies
        batch = f"{r.micro_batch}" + (f"x{r.grad_accum}" if r.grad_accum > 1 else "")
        gpu = r.gpu + (f" ({r.gpus} GPUs)" if r.gpus > 1 else "")
        consts = f"{e.memory:.3f}, {e.matmul:.3f}"
        if not r.is_scored:
            consts += " (not scored)"
        if markdown:
            lines.append(f"| {r.id} | {gpu} | {_label(r)} | {r.precision} | {batch} | {r.optimizer_impl} | "
                         f"{r.measured:.1f} | {r.published:.1f} | {res.predicted:.1f} | {res.error * 100:+.1f} % | "
                         f"{consts} |")
        else:
            lines.append(f"{r.id:5} {gpu:15} {_label(r):40} {r.precision:12} {batch:>9} {r.optimizer_impl:9} "
                         f"{r.measured:9.1f} {r.published:9.1f} {res.predicted:9.1f} {res.error * 100:+6.1f}%  {consts}")
    return lines


MULTI_GPU_LINKS = {"a100": "dgx-a100", "h100": "nvlink"}
"""Topology preset of each multi-GPU row's GPU: one 8-GPU NVSwitch node."""


@dataclass(frozen=True, kw_only=True)
class MultiGpuResult:
    row: Row
    fsdp: float
    """``dpsim predict --strategy fsdp``'s samples/s per GPU (shipped constants, which are
    never fitted on these rows)."""
    compute_only: float
    """The one-GPU roofline of the same micro-batches with a 1/N optimizer shard (what the
    single-GPU table predicted for these rows before): communication taken as hidden."""
    exposed_comm_s: float
    """Communication the FSDP step waits for."""
    step_s: float
    """The FSDP step."""

    @property
    def error(self) -> float:
        return self.fsdp / self.row.measured - 1


def multi_gpu(row: Row) -> MultiGpuResult:
    """A multi-GPU row through dpsim's own path for it: ``predict`` with FSDP FULL_SHARD over one
    NVSwitch node, the row's micro-batches and model (attention kernel included)."""
    from dpsim.predict.config import PredictConfig
    from dpsim.predict.run import predict

    config = PredictConfig(gpus=row.gpus, gpus_per_node=row.gpus, link=MULTI_GPU_LINKS[row.gpu], gpu=row.gpu,
                           micro_batch=row.micro_batch, grad_accum=row.grad_accum, precision=row.precision,
                           optimizer=row.optimizer, strategy="fsdp", steps=2)
    p = predict(config, model=build(row))
    return MultiGpuResult(row=row, fsdp=p.samples_per_s / row.gpus, compute_only=predicted(kernels(row), Efficiencies()),
                          exposed_comm_s=p.exposed_comm_s, step_s=p.step_time_s)


def multi_gpu_table(results: list[MultiGpuResult]) -> list[str]:
    lines = ["| row | GPUs | model | micro-batch | measured /s per GPU | FSDP path /s per GPU | error | "
             "exposed comm / step | compute only /s |", "|" + "---|" * 9]
    for m in results:
        r = m.row
        lines.append(f"| {r.id} | {r.gpus}x {r.gpu} | {_label(r)} | {r.micro_batch}x{r.grad_accum} | {r.measured:.2f} | "
                     f"{m.fsdp:.2f} | {m.error * 100:+.1f} % | {m.exposed_comm_s * 1e3:.0f} / {m.step_s * 1e3:.0f} ms | "
                     f"{m.compute_only:.2f} |")
    return lines


_DLE_BERT = ("NVIDIA/DeepLearningExamples@{commit} PyTorch/LanguageModeling/BERT/README.md, "
             "table '{table}' (SQuAD), {column}")


@dataclass(frozen=True, kw_only=True)
class ForwardCheck:
    """A published *inference* throughput of the same script, container and GPU as training
    rows of the set: ``run_squad.py``'s prediction loop runs the forward alone (eval mode, no
    dropout, no backward, no optimizer), so it separates the forward's kernels from the
    per-step work only training does."""

    gpu: str
    precision: str
    batch: int
    measured: float
    """Sequences per second as the table prints them."""
    training_row: str
    """The training row of the same table (same container and GPU)."""
    source: str


FORWARD_CHECKS = (
    ForwardCheck(gpu="a100", precision="tf32", batch=32, measured=216.0, training_row="T045",
                 source=_DLE_BERT.format(commit="729963dd47e7c8bd462ad10bfac7a7b0b604e6dd",
                                         table="Fine-tuning inference on NVIDIA DGX A100 (1x A100 80GB)",
                                         column="Throughput - TF32, batch 32, seq 384, pytorch:21.11-py3")),
    ForwardCheck(gpu="a100", precision="fp16-params", batch=32, measured=312.0, training_row="T046",
                 source=_DLE_BERT.format(commit="729963dd47e7c8bd462ad10bfac7a7b0b604e6dd",
                                         table="Fine-tuning inference on NVIDIA DGX A100 (1x A100 80GB)",
                                         column="Throughput - Mixed Precision, batch 32, seq 384, pytorch:21.11-py3")),
    ForwardCheck(gpu="v100", precision="fp32", batch=8, measured=48.0, training_row="T047",
                 source=_DLE_BERT.format(commit="78ec680207ad61bb2644f39dd2f117b80f893fa8",
                                         table="Fine-tuning inference on NVIDIA DGX-1 with 32G",
                                         column="Throughput - FP32, batch 8, seq 384, pytorch:20.06-py3")),
    ForwardCheck(gpu="v100", precision="fp16-params", batch=8, measured=143.0, training_row="T048",
                 source=_DLE_BERT.format(commit="78ec680207ad61bb2644f39dd2f117b80f893fa8",
                                         table="Fine-tuning inference on NVIDIA DGX-1 with 32G",
                                         column="Throughput - Mixed Precision, batch 8, seq 384, pytorch:20.06-py3")),
)
"""NVIDIA's own BERT-large SQuAD inference rows, the forward-only counterparts of its training
rows T045-T048 (the V100 ones from the README of the 20.06 container, a generation before the
training rows' 21.11: the README at the training rows' commit has no V100 inference row)."""


def forward_only(check: ForwardCheck, eff: Efficiencies) -> float:
    """dpsim's forward-only throughput of ``check``: BERT-large's forward kernels in eval mode
    (dropout off), sequences per second."""
    model = get_model("bert-large", seq_len=384)
    gpu, precision = get_gpu(check.gpu), get_precision(check.precision)
    seconds = 0.0
    for layer in model.layers:
        ops = tuple(dataclasses.replace(op, dropout=False) if isinstance(op, AttentionOp) else op
                    for op in layer.ops if "dropout" not in getattr(op, "name", ""))
        for _, forward, _ in layer_terms(dataclasses.replace(layer, ops=ops), gpu, precision, check.batch):
            seconds += sum(t.time_s(eff) for t in forward)
    return check.batch / seconds


def forward_table(results: list[Result]) -> list[str]:
    """Markdown rows: each inference check against dpsim's forward, beside its training row."""
    by_id = {r.row.id: r for r in results}
    lines = ["| GPU | precision | batch | inference measured /s | dpsim forward /s | error | training row | "
             "training error |", "|" + "---|" * 8]
    for c in FORWARD_CHECKS:
        train = by_id[c.training_row]
        pred = forward_only(c, train.efficiencies)
        lines.append(f"| {c.gpu} | {c.precision} | {c.batch} | {c.measured:.0f} | {pred:.0f} | "
                     f"{(pred / c.measured - 1) * 100:+.0f} % | {c.training_row} | {train.error * 100:+.0f} % |")
    return lines


VALIDATION = Path(__file__).resolve().parents[1] / "VALIDATION.md"
HEADING = "## Single-GPU throughput from specs (issue 12)"
"""VALIDATION.md's section of this script: from this heading to the next ``## `` heading
(the rule ``validation/sections.py`` applies to every script that writes the file)."""
LEGACY_MARKERS = ("<!-- single-gpu-throughput: begin -->", "<!-- single-gpu-throughput: end -->")
"""Markers an earlier version put around the section; removed when the section is rewritten."""


def _per_chip(results: list[Result]) -> str:
    return "; ".join(f"{c} {x['median'] * 100:.1f} % / {x['worst'] * 100:.1f} %"
                     for c in sorted({r.row.chip for r in results if r.row.is_scored})
                     for x in [summary([r for r in results if r.row.chip == c])])


def _span(results: list[Result], keep) -> str:
    """``lo to hi %`` of the leave-one-chip-out errors of the scored rows ``keep`` selects."""
    errors = sorted(r.error * 100 for r in results if r.row.is_scored and keep(r.row))
    return f"{errors[0]:+.0f} to {errors[-1]:+.0f} %" if errors else "none"


def _misses(results: list[Result], multi: list[MultiGpuResult]) -> str:
    """The "where it misses" bullets, with the current errors."""
    by_id = {r.row.id: r for r in results}
    resnet_amp = _span(results, lambda r: r.model == "resnet50" and r.precision == "amp-fp16")
    resnet_tf32 = _span(results, lambda r: r.model == "resnet50" and r.precision == "tf32")
    bert16 = _span(results, lambda r: r.model == "bert-large" and r.precision == "fp16-params")
    gh200 = _span(results, lambda r: r.gpu == "gh200")
    nvidia = _span(results, lambda r: r.system.startswith("NVIDIA DGX"))
    h200 = [r for r in results if r.row.gpu == "h200"]
    forward = {c.training_row: forward_only(c, by_id[c.training_row].efficiencies) / c.measured - 1
               for c in FORWARD_CHECKS}
    sixteen = [c.training_row for c in FORWARD_CHECKS if c.precision == "fp16-params"]
    fwd16 = " and ".join(f"{forward[t] * 100:+.0f} %" for t in sixteen)
    train16 = " and ".join(f"{by_id[t].error * 100:+.0f} %" for t in sixteen)
    mpt = {}
    for gpu in ("h100", "a100"):
        errors = sorted(m.error * 100 for m in multi if m.row.gpu == gpu)
        mpt[gpu] = f"{errors[0]:+.0f} to {errors[-1]:+.0f} %" if errors else "none"
    t046 = kernels(by_id["T046"].row)
    t046_kernels = float(np.dot(t046.host_s, t046.weight)) / HOST_OVERHEAD_PER_OP_S
    t046_dispatch_ms = t046_kernels * HOST_OVERHEAD_PER_OP_S * 1e3
    t046_step_ms = t046.samples / by_id["T046"].predicted * 1e3
    pairs = [("T033", "T029"), ("T034", "T030"), ("T035", "T031"), ("T036", "T032")]
    model_ratio = sorted(by_id[a].predicted / by_id[b].predicted for a, b in pairs)
    meas_ratio = sorted(by_id[a].row.measured / by_id[b].row.measured for a, b in pairs)
    gh_model = f"{(model_ratio[0] - 1) * 100:.0f}-{(model_ratio[-1] - 1) * 100:.0f} %"
    gh_meas = f"{(meas_ratio[0] - 1) * 100:.0f}-{(meas_ratio[-1] - 1) * 100:.0f} %"
    h200_errors = ", ".join(f"{r.row.id} {r.error * 100:+.1f} %" for r in h200)
    return f"""- **Out of sample, H200** (T059-T062: Lambda's engineering runs, logs only, not scored:
  they were added after their prediction was seen): {h200_errors}, predicted
  (without the GH100 rows) from the H200's own measured streaming bandwidth (3165 of
  4800 GB/s). The model before it (peak bandwidth x one fitted fraction, its shipped
  constants) put the same rows +5 to +31 % fast.
- **ResNet-50's 16-bit speed-up is under-stated**: its mixed-precision rows are off by
  {resnet_amp} (mostly slow: V100, GA102, H100 PCIe) and its TF32 rows by {resnet_tf32}
  (mostly fast). Measured AMP/TF32 ratios (NCHW, same GPU and source) are 1.4-1.8x, modelled
  1.3-1.4x. cuDNN's per-layer choices (layout transposes, batch-norm kernels, TF32
  convolution algorithms) are costed by one rule for all layers. Charging the NCHW->NHWC
  transposes of 16-bit convolutions to TF32 ones too (NVIDIA recommends NHWC for TF32
  tensor cores: tensorflow/tensorflow pull request #55761) over-corrects: the TF32 rows then
  come out 5-24 % slow (and the median 11.9 %). What cuDNN does per layer in TF32 is not
  published; not modelled.
- **BERT with apex O2 (16-bit parameters)** is predicted {bert16}; its TF32 rows are
  centred. The worst row is NVIDIA's own DGX A100 T046 (NGC 21.11, batch 32), {by_id["T046"].error * 100:+.0f} % (+38 %
  before apex O2's fp32-master copies, its per-parameter `zero_grad` and `run_squad.py`'s
  clipping were charged: about 9 ms of its ~220 ms step). What is left is not per-step work.
  NVIDIA's inference rows of the same script and container (the forward-only table above) are over-predicted *more* than its training
  rows ({fwd16} for the 16-bit forward where the training rows are {train16}), and inference has
  no backward, optimizer, clipping, loss-scale check or per-step `.item()`; so the time the
  model misses is in the 16-bit kernels of the forward (and backward), not in the step around
  them. It is not the kernel launches either: the step's {t046_kernels:.0f} kernels need
  {t046_dispatch_ms:.0f} ms of CPU dispatch at {HOST_OVERHEAD_PER_OP_S * 1e6:.0f} µs each against {t046_step_ms:.0f} ms of GPU time, so
  the CPU runs ahead (apex's per-parameter `zero_grad`, which follows a sync, is charged at its dispatch cost).
  Nor the batch: the same loop on Lambda's GH200 runs at 346.9 seq/s at batch 112 and
  347.9 at batch 152 (lambdal/deeplearning-benchmark@aa5addb6 pytorch/results_v2/
  LambdaOD_1x_Test_1xGH200_96GB_192-222-56-184_v2 and LambdaOD_1x_1xGH200_96GB_192-222-57-0_v2,
  steady state of the logs): +0.3 %, which bounds what a larger batch amortises to about
  5 ms per step (give or take 4 ms: two machines and two containers), where the model, with
  the per-step costs above, says +1.2 % (13 ms per step); and
  Lambda's A100 SXM at batch 112 (T019, NGC 22.x) is predicted {by_id["T019"].error * 100:+.0f} %. The software
  generation is what differs: on the V100 at the same batch (16) and precision, NVIDIA's NGC
  21.11 run (T048, 52 seq/s) is 12 % slower than Lambda's (T003, 59.2 seq/s, PyTorch 1.13 =
  NGC 22.x per its `sys_pytorch.txt`), and NVIDIA's 16-bit inference rows are over-predicted
  in both of its container generations (20.06 on the V100, 21.11 on the A100). Which
  kernels of the 2020-2021 containers (cuBLAS 11,
  apex, PyTorch 1.x's fp16 element-wise and LayerNorm kernels) are slower is not published;
  the container generation is not an input of the model; not modelled. One candidate was
  tried and dropped: charging 16-bit element-wise kernels as if they moved 1.6x their bytes
  (PyTorch loads 4 elements per thread whatever the dtype until its 128-bit vectorization,
  pytorch/pytorch pull request #141959, so 16-bit kernels have half the bytes in flight)
  brings T046 to +23 % only by refitting the memory constant so that T043 goes to +46 %
  and the 16-bit ResNet-50 rows 5 points slower (median 12.4 %). A last look at what
  `run_squad.py` does per step besides its kernels (NVIDIA/DeepLearningExamples@729963dd
  PyTorch/LanguageModeling/BERT/run_squad.py, the training loop) finds nothing of that size.
  The README's figure is the whole run over its wall time (`training_sequences_per_second`,
  `max_steps` -1 in its benchmark command), so per-step host work counts: after each of the
  step's three host synchronisations (apex's loss-scale overflow flag, `GradientClipper`'s
  `total_norm.item()`, `loss.item()`) the GPU waits while Python batches the next 32 sequences
  from a `TensorDataset` in the main process (a `DataLoader` without workers), copies them from
  pageable memory and builds apex's and FusedAdam's per-parameter lists (391 tensors). Counting
  every such step at a whole eager op's {HOST_OVERHEAD_PER_OP_S * 1e6:.0f} µs (more than Python
  attribute work costs), 2 x 391 + 32 x 5 + 10 steps take at most 7.6 ms, part of it hidden
  behind the clip's scale pass: under 3 % of the 290 ms measured step, against a 74 ms gap,
  and in line with the ~5 ms the GH200 batch comparison above allows. Its model code
  (`modeling.py`, same commit) runs PyTorch's `nn.LayerNorm`, and the encoder in (sequence,
  batch) layout with one `contiguous()` copy of the attention context per layer each way
  (dpsim's `merge_heads` charges it). LayerNorm kernels of that time were slow: apex's
  reached 896 GB/s forward and 572 GB/s backward on the GA100 at batch 32, sequence 512
  (NVIDIA/apex pull request #1037, January 2021), and charging BERT-large's 49 LayerNorms at
  those rates would add about 5 ms (2 %); PyTorch's own kernel, reworked in pytorch/pytorch
  pull request #68238 (November 2021, around the 21.11 container), has no published rate.
  Together under 13 ms of the 74, and neither can be charged honestly: the first is a bound,
  not a measured cost, and the second is apex's kernel, not the one the script ran; not modelled.
- **NVIDIA's own tables** (T041-T048: NGC 21.03/21.11, DGX-1 and DGX A100) are off by
  {nvidia}, less regularly than Lambda's rows of the same GPUs. T043 (ResNet-50 TF32 NCHW on
  the DGX A100, NGC 21.03, DALI on real images) is {by_id["T043"].error * 100:+.0f} % where Lambda's A100 SXM row of the
  same script, precision and layout (T018, NGC 22.x, synthetic data) is {by_id["T018"].error * 100:+.0f} %: NVIDIA's run
  is 13 % slower (938 vs 1073 img/s) and batch 256 vs 640 explains 1-2 % in the model. DALI's
  GPU work does not close it: decoding a typical 500x375 ImageNet JPEG writes 0.56 MB, the
  random-resized crop reads at most that and writes 0.15 MB (224x224x3), the normalisation
  writes 0.6 MB of fp32: under 2 MB per image, about 2 GB/s at 938 img/s, 0.1 % of the
  A100's bandwidth.
  The container generation remains, as for T046; the same README's DGX A100 TF32 row read
  680 img/s in its 2020 version (A100 40 GB, 20.06 container: NVIDIA/DeepLearningExamples@9061083098da
  PyTorch/Classification/ConvNets/resnet50v1.5/README.md) and 945 in 2021 (A100 80 GB,
  20.12: @097c7ff917b7), a change of GPU memory and software together; not modelled.
- **GH200** (96 GB HBM3, 'NVIDIA_GH200_480GB' in Lambda's `sys_pytorch.txt`): {gh200}. The
  model puts it {gh_model} faster than H100 SXM (its 4.0 vs 3.35 TB/s); Lambda measures
  {gh_meas}. It is not the software: Lambda also ran both GPUs in the *same* containers,
  and the ratio stays: NGC 24.03 (GH200 run `..._56-184_v2_bk` vs the H100 SXM rows' run, same
  batches): ResNet-50 AMP 2992 vs 2804 img/s (1.07), TF32 2095 vs 1904 (1.10), BERT 16-bit 338.8
  vs 319.1 seq/s (1.06), TF32 148.3 vs 148.2 (1.00); NGC 24.10 (the scored GH200 run vs
  H100 SXM run `..._192-222-52-83_v2`): 2871 vs 2694 (1.07), 2083 vs 1902 (1.10), 347.9 vs
  328.0 (1.06), 150.8 vs 143.4 (1.05) (lambdal/deeplearning-benchmark@aa5addb6
  pytorch/results_v2/, each run's logs and `sys_pytorch.txt`). The container moves both GPUs
  alike, by at most 4 %. Nor is it the memory's datasheet rate: a 96 GB GH200 reads at 3.61
  TB/s and writes at 3.70 TB/s (clinfo-style OpenCL benchmark, 132 SMs at 1980 MHz as on H100
  SXM: mredenti/PowerCapping@f57c11cb configuration/OpenCL_benchmark.md). The GH200 module's
  power (up to 1000 W, NVIDIA GH200 datasheet) covers the Grace CPU, its LPDDR5X and the GPU,
  and Lambda's logs record neither the power limit nor the clocks under load; what holds its GPU to H100 SXM's
  speed on these workloads is not measured; not modelled.
- **Streaming measurements disagree by source**: BabelStream on Azure's H200 (ND H200 v5)
  measures `Mul` (STREAM's scale) at 4.00 TB/s, 83 % of 4.8 TB/s, and on its H100 SXM 2.90 TB/s,
  87 % of 3.35 (samuel-bohman/AI-benchmarking-guide@5e2c4e55 Azure_Results/ND_H200_v5_results.md,
  @a6533f14 ND_H100_v5_results.md, 'HBM Bandwidth'), where gpu-stream's H200 run, which the
  H200 and B200 presets use, measures 66 %. The H200 rows (out of sample) agree with the
  66 %; which HBM3e boards stream at which fraction is open, and B200 inherits it.
- **A10** (150 W, GA102): no matmul measurement is published, and the unconstrained boards'
  mean efficiency (0.82 of the datasheet peak) put its BERT rows 16-22 % fast. It takes the
  mean measured on the power-limited boards T4, L4 and H100 PCIe (0.63,
  `dpsim.hardware.POWER_LIMITED_EFFICIENCY`): the 300 W RTX A6000 (same GA102) measures 2.5 W
  per achieved TFLOP/s, so 150 W cannot sustain the 125 TFLOPS datasheet rate. This choice
  was made after seeing the A10 rows; it is a datasheet fraction, not a measurement of the A10.
- **B200**: with HBM3e's measured streaming fraction, BERT is {by_id["T039"].error * 100:+.0f} % (16-bit) and
  {by_id["T040"].error * 100:+.0f} % (TF32); its ResNet-50 rows stay unscored (not GPU-bound, see above).
- **8-GPU LLM pretraining on H100** (the multi-GPU table, not scored) is predicted {mpt["h100"]}
  fast, on A100 {mpt["a100"]}: llm-foundry measured 42-46 % MFU on H100 and 60-64 % on A100
  (its own column). The H100 runs used torch 2.1 / CUDA 12.1 (Oct. 2023) with a Triton
  attention kernel written for Ampere, while the H100 GEMM rate dpsim starts from
  (755 TFLOP/s, the sustained rate mamf-finder measured on the same 700 W GH100 in an H200 node:
  `dpsim.hardware.GH100_SUSTAINED_TFLOPS`) was measured with torch 2.14; FSDP's collectives on NVLink
  are hidden behind compute (the exposed column), so they do not explain the gap."""


def section(results: list[Result], all_rows: Efficiencies, multi: list[MultiGpuResult]) -> str:
    """VALIDATION.md's section (heading first, no other ``## `` heading): method, summary,
    tables and where the model misses."""
    s = summary(results)
    before = [abs(flops_only(r.row) / r.row.measured - 1) for r in results if r.row.is_scored]
    unscored = "\n".join(f"- {r.row.id} ({r.row.gpu}, {_label(r.row)}, {r.row.precision}): {r.row.scored[4:]}."
                          for r in results if not r.row.is_scored and r.row.gpus == 1)
    worst = max((r for r in results if r.row.is_scored), key=lambda r: abs(r.error))
    return f"""{HEADING}

Generated by `python validation/accuracy_compute.py --write`; checked by
`tests/test_accuracy_compute.py`. Each row of `tests/data/single_gpu_throughput.csv` is a
published training throughput (NVIDIA DeepLearningExamples READMEs, Lambda's
deeplearning-benchmark, timm's benchmark CSVs, llm-foundry's MPT benchmark tables; every
row names the repository at a commit, the file, the table and the row) with its exact
configuration: GPU, model, micro-batch, gradient accumulation, the precision as the
framework set it (apex O2 = `fp16-params`, `torch.cuda.amp` = `amp-fp16`, NGC's default
TF32 = `tf32`), memory layout, attention kernel and how the optimizer ran (`foreach`,
`fused`, or a per-parameter Python `loop`: PyTorch's default before 2.0, and BERT's
`BertAdam`, which also clips every gradient on its own: `loop:18`, 18 ops per parameter
in `optimization.py`) and whether the script clips the gradients to a global norm every step
(`grad_clip`: NVIDIA's `run_squad.py`, which Lambda's BERT runs use too) and zeroes them
parameter by parameter (`zero_grad`: apex O2). Lambda's tables divide whole runs, start-up
included, by their wall time; the "measured" column is the steady state read from Lambda's published run logs
(`validation/lambda_logs.py`), the "published" column the table's figure.

dpsim predicts each row from the GPU preset (datasheet peaks, SM count, measured GEMM rates
and measured streaming bandwidth: `dpsim/hardware.py`) and the per-op roofline
(`dpsim/workload/roofline.py`): matmuls at the measured rate times tile/wave quantization,
memory-bound ops at the GPU's streaming bandwidth, and at least {HOST_OVERHEAD_PER_OP_S * 1e6:.0f} µs of CPU
dispatch per kernel (PyTorch eager's measured per-op overhead), which is what a per-parameter
optimizer loop costs. The optimizer step streams the bytes of the kernels the framework runs:
PyTorch's `foreach` ops, one fused pass, or, with an fp32 master copy (apex O2, Megatron,
DeepSpeed), the copy of the 16-bit gradients into fp32 ones, the fused update and the copy of
the master back into the 16-bit weights; clipping adds a norm pass and a scale pass over the
gradients. `dpsim predict --clip-grad-norm --zero-grad zero-loop` charges these two through the
same terms (`tests/test_step_options.py` checks that `predict --gpus 1` gives T003's and T046's
predictions). The streaming bandwidth is what a STREAM `scale` kernel measures
(te42kyfo/gpu-benches@1c36d509 gpu-stream), on the GPU itself where published (V100, A100 40 GB
and 80 GB, H100 PCIe, H200) and otherwise the peak times the fraction measured on a GPU with
the same memory technology: DRAM delivers 83-94 % of the datasheet peak on HBM2/HBM2e/GDDR6
boards but 66 % on the H200's HBM3e, so B200's 8 TB/s is not 2.4x H100's in practice (HBM3:
H100 SXM and GH200, has no gpu-stream measurement and takes the HBM2e fraction measured on the
H100 PCIe, the same GH100 memory system; other benchmarks' figures, below, are not mixed in). Two constants are fitted, the fraction of the streaming
bandwidth that element-wise kernels reach and the fraction of the best-shape GEMM rate that
real layers reach, on the rows of the *other* GPU chips only (leave one chip out: GV100, GA100,
GA102, GH100, GB100); the last column shows the constants each row was predicted with.

**{s['rows']} scored rows, leave one chip out: median |error| {s['median'] * 100:.1f} %, worst {s['worst'] * 100:.1f} %**
(issue target: median <= 10 %, worst <= 25 %; {s['within_10'] * 100:.0f} % of rows within 10 %,
{s['within_25'] * 100:.0f} % within 25 %; worst: {worst.row.id}, {worst.row.gpu} {_label(worst.row)}). Per chip, median /
worst: {_per_chip(results)}. Before the roofline (matmul FLOPs at 0.6 of the best matmul
rate) the same rows were off by a median of {statistics.median(before) * 100:.0f} % (worst {max(before) * 100:.0f} %). Fit on
all scored rows (shipped in `dpsim/workload/roofline.py`): memory {all_rows.memory:.3f}, matmul
{all_rows.matmul:.3f}.

{chr(10).join(table([r for r in results if r.row.gpus == 1], markdown=True))}

Not scored (kept in the file, never fitted on):
{unscored}

**Multi-GPU rows.** llm-foundry's MPT rows are per-GPU throughputs of 8-GPU FSDP
(FULL_SHARD) jobs, not single-GPU measurements: they are predicted through dpsim's own
path for such a job (`predict --strategy fsdp --gpus 8` on one NVSwitch node, constants fitted
on the single-GPU rows, never on these) and kept out of the single-GPU score. The runs used
llm-foundry's default `attn_impl: triton` (the Triton FlashAttention kernel, costed at
FlashAttention-2's rate / {TRITON_FLASH_SLOWDOWN:.1f}), torch 2.1 and Composer's per-parameter
DecoupledAdamW.

{chr(10).join(multi_gpu_table(multi))}

**Forward only.** NVIDIA's BERT README also publishes inference throughput of the same
`run_squad.py` (its prediction loop: eval mode, so no dropout, and no backward, optimizer,
clipping or loss-scale check), for the GPUs and containers of the training rows T045-T048
(the V100 rows from the README of the 20.06 container). dpsim's forward of the same batch
(dropout removed; the constants fitted without the chip) against them, beside the training
row's error:

{chr(10).join(forward_table(results))}

Where it misses:
{_misses(results, multi)}
"""


def write_section(text: str, path: Path = VALIDATION) -> None:
    """Replace this script's section of VALIDATION.md (appended when absent), atomically,
    leaving every other section as it is. The section runs from :data:`HEADING` to the next
    ``## `` heading or the next ``<!-- `` marker line, whichever comes first: other scripts
    delimit their sections by headings (``validation/sections.py``) or by markers placed
    before their heading (``validation/accuracy_layouts.py``), and neither may be eaten."""
    doc = path.read_text() if path.exists() else "# Validation: dpsim against real DDP training\n"
    for marker in LEGACY_MARKERS:
        doc = doc.replace(marker + "\n", "").replace(marker, "")
    body = text.rstrip("\n") + "\n"
    if HEADING in doc:
        head, _, rest = doc.partition(HEADING)
        ends = [i for i in (rest.find("\n## "), rest.find("\n<!-- ")) if i >= 0]
        tail = rest[min(ends):].lstrip("\n") if ends else ""
        doc = head + body + ("\n" + tail if tail else "")
    else:
        doc = doc.rstrip("\n") + "\n\n" + body
    write_text_atomic(path, doc)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    ap.add_argument("--write", action="store_true", help="rewrite VALIDATION.md's single-GPU section")
    args = ap.parse_args()
    results, all_rows = evaluate()
    multi = [multi_gpu(r.row) for r in results if r.row.gpus > 1]
    if args.write:
        write_section(section(results, all_rows, multi))
        print(f"wrote the single-GPU throughput section of {VALIDATION}")
    for line in table(results, args.markdown):
        print(line)
    s = summary(results)
    print()
    for r in results:
        if not r.row.is_scored:
            print(f"{r.row.id} not scored ({r.row.scored[4:]})")
    print(f"{s['rows']} scored rows, leave one chip out: median |error| {s['median'] * 100:.1f} %, worst "
          f"{s['worst'] * 100:.1f} %, within 10 %: {s['within_10'] * 100:.0f} %, within 25 %: "
          f"{s['within_25'] * 100:.0f} %")
    for chip in sorted({r.row.chip for r in results if r.row.is_scored}):
        chip_s = summary([r for r in results if r.row.chip == chip])
        print(f"  {chip}: {chip_s['rows']} rows, median {chip_s['median'] * 100:.1f} %, worst {chip_s['worst'] * 100:.1f} %")
    before = [abs(flops_only(r.row) / r.row.measured - 1) for r in results if r.row.is_scored]
    print(f"before the roofline (matmul FLOPs at 0.6 of the best matmul rate): median |error| "
          f"{statistics.median(before) * 100:.1f} %, worst {max(before) * 100:.1f} %")
    shipped = Efficiencies()
    print(f"fit on all rows: memory {all_rows.memory:.3f}, matmul {all_rows.matmul:.3f}; "
          f"shipped in dpsim/workload/roofline.py: {shipped.memory:.3f}, {shipped.matmul:.3f}")
    print("\nforward only, against NVIDIA's inference rows of the same script (fit without the chip):")
    for line in forward_table(results)[2:]:
        print("  " + line)
    print("\nmulti-GPU rows through the FSDP path (shipped constants):")
    for m in multi:
        print(f"  {m.row.id} {m.row.gpus}x {m.row.gpu} {_label(m.row)}: measured {m.row.measured:.2f}, FSDP path "
              f"{m.fsdp:.2f} ({m.error * 100:+.1f} %), exposed comm {m.exposed_comm_s * 1e3:.0f} of "
              f"{m.step_s * 1e3:.0f} ms, compute only {m.compute_only:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
