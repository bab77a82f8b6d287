"""Predicted vs published single-GPU training throughput, leave-one-GPU-out.

``python validation/accuracy_compute.py`` prints one line per row of
``tests/data/single_gpu_throughput.csv`` (published throughput, each row citing its
source and exact configuration) with dpsim's prediction from the GPU preset's specs and
the roofline (:mod:`dpsim.workload.compute`), then the summary the issue scores: median
and worst |predicted / measured - 1|. ``--markdown`` prints the table as Markdown;
``--write`` rewrites VALIDATION.md's "Single-GPU throughput" section (only that section,
between its two markers; appended when absent).

Leave one system out. The roofline has three constants that are not datasheet numbers
(:class:`dpsim.workload.roofline.Efficiencies`: the fraction of peak HBM bandwidth that
element-wise kernels reach, of the best measured matmul rate that real layers reach, and
of the derived TF32 rate). They are fitted here, by least squares on ln(predicted /
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
from dpsim.workload.compute import compute_profile, layer_terms, optimizer_term
from dpsim.workload.precision import get_precision
from dpsim.workload.roofline import Efficiencies
from dpsim.workload.spec import ModelSpec

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

FIT_BOUNDS = {"memory": (0.3, 1.0), "matmul": (0.3, 1.2), "tf32": (0.3, 1.2)}
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
    """Samples per second per GPU."""
    scored: str
    """``yes``, or ``no: <why>`` for a row kept for reference but neither fitted nor scored."""
    source: str

    @property
    def chip(self) -> str:
        return CHIPS[self.gpu]

    @property
    def is_scored(self) -> bool:
        return self.scored == "yes"


def load_rows(path: Path = DATA) -> list[Row]:
    with open(path, newline="") as f:
        return [Row(id=r["id"], gpu=r["gpu"], system=r["system"], model=r["model"],
                    seq_len=int(r["seq_len"]) if r["seq_len"] else None,
                    channels_last=r["channels_last"] == "true", attention=r["attention"],
                    precision=r["precision"], micro_batch=int(r["micro_batch"]), grad_accum=int(r["grad_accum"]),
                    optimizer=r["optimizer"], gpus=int(r["gpus"]), measured=float(r["samples_per_s"]),
                    scored=r["scored"], source=r["source"]) for r in csv.DictReader(f)]


def build(row: Row) -> ModelSpec:
    """The row's model as dpsim builds it (attention kernel and memory layout from the row)."""
    fused = row.attention == "fused"
    if row.model in REFERENCE_MODELS:
        cfg, _ = REFERENCE_MODELS[row.model]
        if row.seq_len and row.seq_len > cfg.n_positions:
            cfg = dataclasses.replace(cfg, n_positions=row.seq_len)
        return build_gpt2(cfg, name=row.model, seq_len=row.seq_len, flash_attention=fused)
    if row.model == "resnet50":
        cfg = dataclasses.replace(get_entry("resnet50").config, channels_last=row.channels_last)
        assert isinstance(cfg, ResNetConfig)
        return build_resnet(cfg, name="resnet50")
    return get_model(row.model, seq_len=row.seq_len, flash_attention=fused)


_KINDS = {"memory": 0, "matmul": 1, "tf32": 2, "attention": 3}


@dataclass(frozen=True)
class Kernels:
    """A row's roofline kernels, flattened for fast re-evaluation under other constants."""

    compute_s: np.ndarray
    memory_s: np.ndarray
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
    terms.append((optimizer_term(model, gpu, precision, row.optimizer), shard))
    return Kernels(compute_s=np.array([t.compute_s for t, _ in terms]),
                   memory_s=np.array([t.memory_s for t, _ in terms]),
                   kind=np.array([_KINDS[t.kind] for t, _ in terms]),
                   weight=np.array([w for _, w in terms]),
                   samples=row.micro_batch * row.grad_accum)


def predicted(k: Kernels, eff: Efficiencies) -> float:
    """Samples per second per GPU under the constants ``eff``."""
    scale = np.where(k.kind == 1, eff.matmul, np.where(k.kind == 2, eff.matmul * eff.tf32, 1.0))
    times = np.maximum(k.compute_s / scale, k.memory_s / eff.memory)
    return k.samples / float(np.dot(times, k.weight))


def log_loss(ks: list[Kernels], measured: list[float], eff: Efficiencies) -> float:
    return sum(math.log(predicted(k, eff) / m) ** 2 for k, m in zip(ks, measured))


def fit(ks: list[Kernels], measured: list[float], start: Efficiencies | None = None) -> Efficiencies:
    """Least squares on ln(predicted / measured) over the fitted constants: coordinate
    descent with a golden-section search of each constant (in log space) inside :data:`FIT_BOUNDS`."""
    eff = start or Efficiencies(memory=0.8, matmul=1.0, tf32=1.0)
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
    profile = compute_profile(model, gpu, micro_batch=row.micro_batch, precision=precision, optimizer=row.optimizer)
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
    head = ("row", "GPU", "model", "precision", "batch", "measured /s", "predicted /s", "error", "fit without chip")
    lines = []
    if markdown:
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    else:
        lines.append(f"{'row':5} {'GPU':15} {'model':40} {'precision':12} {'batch':>9} {'measured':>9} "
                     f"{'predicted':>9} {'error':>7}  fit without chip (memory, matmul, tf32)")
    for res in results:
        r, e = res.row, res.efficiencies
        batch = f"{r.micro_batch}" + (f"x{r.grad_accum}" if r.grad_accum > 1 else "")
        gpu = r.gpu + (f" ({r.gpus} GPUs)" if r.gpus > 1 else "")
        consts = f"{e.memory:.3f}, {e.matmul:.3f}, {e.tf32:.3f}"
        if not r.is_scored:
            consts += " (not scored)"
        if markdown:
            lines.append(f"| {r.id} | {gpu} | {_label(r)} | {r.precision} | {batch} | {r.measured:.1f} | "
                         f"{res.predicted:.1f} | {res.error * 100:+.1f} % | {consts} |")
        else:
            lines.append(f"{r.id:5} {gpu:15} {_label(r):40} {r.precision:12} {batch:>9} {r.measured:9.1f} "
                         f"{res.predicted:9.1f} {res.error * 100:+6.1f}%  {consts}")
    return lines


VALIDATION = Path(__file__).resolve().parents[1] / "VALIDATION.md"
BEGIN, END = "<!-- single-gpu-throughput: begin -->", "<!-- single-gpu-throughput: end -->"


def section(results: list[Result], all_rows: Efficiencies) -> str:
    """VALIDATION.md's section: method, summary, table and where the model misses."""
    s = summary(results)
    before = [abs(flops_only(r.row) / r.row.measured - 1) for r in results if r.row.is_scored]
    chips = "; ".join(f"{c} {x['median'] * 100:.1f} % / {x['worst'] * 100:.1f} %"
                      for c in sorted({r.row.chip for r in results if r.row.is_scored})
                      for x in [summary([r for r in results if r.row.chip == c])])
    unscored = "\n".join(f"- {r.row.id} ({r.row.gpu}, {_label(r.row)}, {r.row.precision}): {r.row.scored[4:]}."
                          for r in results if not r.row.is_scored)
    return f"""{BEGIN}
## Single-GPU throughput from specs (issue 12)

Generated by `python validation/accuracy_compute.py --write`; checked by
`tests/test_accuracy_compute.py`. Each row of `tests/data/single_gpu_throughput.csv` is a
published training throughput (NVIDIA DeepLearningExamples READMEs, Lambda's
deeplearning-benchmark CSVs, timm's benchmark CSVs, llm-foundry's MPT benchmark tables;
every row names the repository at a commit, the file, the table and the row) with its
exact configuration: GPU, model, micro-batch, gradient accumulation, the precision as
the framework set it (apex O2 = `fp16-params`, `torch.cuda.amp` = `amp-fp16`, NGC's
default TF32 = `tf32`), memory layout and attention kernel. dpsim predicts each from the
GPU preset (datasheet peaks, HBM bandwidth, SM count, published GEMM benchmarks) and the
per-op roofline (`dpsim/workload/roofline.py`). Its three fitted constants (fraction of
peak HBM bandwidth element-wise kernels reach, of the best measured matmul rate real
GEMMs reach, of the derived TF32 rate) are fitted on the rows of the *other* GPU chips
only (leave one chip out: GV100, GA100, GA102, GH100, GB100); the last column shows the
constants each row was predicted with. The 8-GPU MPT rows (FSDP) are compared per GPU with
dpsim's one-GPU compute of the same micro-batches (optimizer on a 1/8 shard,
communication taken as hidden).

**{s['rows']} scored rows, leave one chip out: median |error| {s['median'] * 100:.1f} %, worst {s['worst'] * 100:.1f} %**
(issue target: median <= 10 %, worst <= 25 %; {s['within_10'] * 100:.0f} % of rows within 10 %,
{s['within_25'] * 100:.0f} % within 25 %). Per chip, median / worst: {chips}. Before the roofline
(matmul FLOPs at 0.6 of the best matmul rate) the same rows were off by a median of
{statistics.median(before) * 100:.0f} % (worst {max(before) * 100:.0f} %). Fit on all scored rows (shipped in
`dpsim/workload/roofline.py`): memory {all_rows.memory:.3f}, matmul {all_rows.matmul:.3f}, TF32 {all_rows.tf32:.3f}.

{chr(10).join(table(results, markdown=True))}

Not scored (kept in the file, never fitted on):
{unscored}

Where it misses:
- **Decoder LLMs under FSDP (MPT rows) are predicted fast**, by about a quarter on A100
  and a half on H100: llm-foundry measured 60 % (A100) and 42-46 % (H100) MFU where the
  roofline, with mamf-finder's best-shape GEMM rates and FlashAttention-2's published
  efficiency, gives about 75 % and 60 %. The same roofline is within about 12 % on Lambda's
  single-GPU BERT-large rows of both GPUs, so the gap is specific to these runs (8-GPU
  FSDP with Composer: per-module hooks, sustained clocks under long full load,
  communication kernels sharing SMs), none of which dpsim's compute model sees. Use
  `--single-gpu-step-ms` or `dpsim calibrate` when planning LLM pretraining.
- **GA102 (RTX 3090, A10) is predicted slow**, the RTX 3090 by 20-35 % on memory-bound
  (ResNet-50) and matmul-bound (BERT, ViT) rows alike: no matmul benchmark of GA102 is
  published, so its rates are derived from the datasheet peaks at rated boost clocks,
  which GeForce boards exceed under load.
- **TF32 rows** need their own constant (0.70 of TF32 peak x the GPU's bf16 efficiency):
  no TF32 GEMM benchmark is published, so the preset's TF32 rate is derived.
- GH200 and B200 are predicted fast (+10-40 %): both rows come from early software
  stacks (Grace CPU, NGC 25.06 on Blackwell).
{END}
"""


def write_section(text: str, path: Path = VALIDATION) -> None:
    """Replace the marked section of VALIDATION.md (append it when absent), atomically."""
    doc = path.read_text() if path.exists() else ""
    if BEGIN in doc and END in doc:
        head, rest = doc.split(BEGIN, 1)
        tail = rest.split(END, 1)[1].lstrip("\n")
        doc = head + text + tail
    else:
        doc = doc.rstrip("\n") + "\n\n" + text
    write_text_atomic(path, doc)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    ap.add_argument("--write", action="store_true", help="rewrite VALIDATION.md's single-GPU section")
    args = ap.parse_args()
    results, all_rows = evaluate()
    if args.write:
        write_section(section(results, all_rows))
        print(f"wrote the single-GPU throughput section of {VALIDATION}")
    for line in table(results, args.markdown):
        print(line)
    s = summary(results)
    print()
    unscored = [r.row for r in results if not r.row.is_scored]
    for r in unscored:
        print(f"{r.id} not scored ({r.scored[4:]})")
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
    print(f"fit on all rows: memory {all_rows.memory:.3f}, matmul {all_rows.matmul:.3f}, tf32 {all_rows.tf32:.3f}; "
          f"shipped in dpsim/workload/roofline.py: {shipped.memory:.3f}, {shipped.matmul:.3f}, {shipped.tf32:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
