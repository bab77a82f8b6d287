"""Tensor x pipeline x data layouts against published Megatron-LM measurements: ``python validation/accuracy_layouts.py``.

Every row of ``tests/data/layout_reference.csv`` (each citing its source) is predicted
from the presets alone (the row's topology preset, or its file in ``validation/systems/`` where
no preset has the published network, its GPU, the model built from the
published hidden size, layers, heads, sequence and vocabulary as Megatron builds a GPT:
learned positions, tied embeddings, GELU MLP of 4h) with the layout the row documents.
The prediction is turned into the published quantity with the publication's own FLOP
count:

- ``narayanan-eq3``: Narayanan et al. 2021, Eq. 3, FLOPs per iteration with full
  recomputation ``96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h))``, over the step and the GPUs:
  teraFLOP/s per GPU (their Table 1);
- ``model-flops``: ``72·B·s·l·h²·(1 + s/(6h) + V/(12·l·h))`` (Korthikanti et al. 2022,
  Sec. 6; ``num_floating_point_operations`` in ``megatron/training/training.py``@f2e5db402c
  for a GPT with a 4h GELU MLP), per GPU: MFU against the dense bf16 peak (Korthikanti's
  rows) or teraFLOP/s per GPU (Megatron-Core's table);
- ``published-time``: the iteration time itself (Megatron-Turing NLG).

The error is the predicted throughput over the published one, minus one (positive:
dpsim predicts faster). Nothing is fitted on these rows.

``--markdown`` prints the table; ``--write`` rewrites the section of VALIDATION.md between
``<!-- layouts: begin -->`` and ``<!-- layouts: end -->`` (appended when absent): the table
and the summary this script computes, then the hand-written analysis kept from the file.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dpsim.errors import ConfigError
from dpsim.hardware import get_gpu
from dpsim.predict.config import PredictConfig
from dpsim.predict.run import predict, resolve_topology
from dpsim.workload.architectures import GPT2Config, build_gpt2
from dpsim.workload.layers import with_activation_count
from dpsim.workload.spec import AttentionOp, MatmulOp, MemoryOp

DATA = ROOT / "tests" / "data" / "layout_reference.csv"
BF16_PEAK_FLOPS = {"a100": 312e12, "h100": 989e12}
"""Dense bf16 peaks the MFU columns are quoted against (A100 and H100 datasheets)."""


def rows() -> list[dict]:
    """The reference rows."""
    with DATA.open() as f:
        return list(csv.DictReader(f))


def model_of(row: dict):
    """A Megatron GPT of the row's shape: the GPT-2 architecture (learned positions, tied
    embeddings, 4h GELU MLP) with Megatron's kernels where they differ from HuggingFace's:
    the fused bias-GELU (one kernel, ``megatron/model/fused_bias_gelu.py``) and, before
    FlashAttention (2021-22 rows), the attention core as Megatron runs it: two batched GEMMs
    around one fused scale-mask-softmax kernel reading and writing 16-bit scores
    (``FusedScaleMaskSoftmax``, ``megatron/model/fused_softmax.py``@50a4b5fa02) and the
    attention dropout. Megatron-Core's rows (2024) run TransformerEngine's fused attention.
    Every row's loss is Megatron's vocab-parallel cross-entropy (:func:`_megatron_cross_entropy`).
    Every row ran Megatron's GPT model (Megatron-LM, Megatron-Core, and Megatron-DeepSpeed for
    MT-NLG), so every block keeps what Megatron keeps for backward: ``--activations megatron``
    (:func:`~dpsim.workload.layers.megatron_gpt_block_activation_bytes`, Korthikanti et al. 2022's
    count with the fused attention's softmax statistics)."""
    kwargs = {"vocab_size": int(row["vocab"]), "n_positions": int(row["seq_len"]), "n_embd": int(row["hidden"]),
              "n_layer": int(row["layers"]), "n_head": int(row["heads"]), "activation_function": "gelu"}
    flash = row["set"] == "mcore2024"
    model = build_gpt2(GPT2Config(**kwargs), name=row["model"], flash_attention=flash)
    layers = tuple(dataclasses.replace(layer, ops=tuple(o for op in layer.ops for o in _megatron_ops(op, flash)))
                   for layer in model.layers)
    return with_activation_count(dataclasses.replace(model, layers=layers), "megatron")


def _megatron_ops(op, flash: bool) -> tuple:
    if isinstance(op, MemoryOp) and op.name == "loss":
        return (_megatron_cross_entropy(op.elements),)
    return (op,) if flash else _megatron_attention(op)


def _megatron_cross_entropy(elements: float) -> MemoryOp:
    """Megatron's ``_VocabParallelCrossEntropy`` over the logits, pass by pass
    (``megatron/core/tensor_parallel/cross_entropy.py``@937571cfd4, Megatron-Core r0.8 whose
    ``--cross-entropy-loss-fusion`` is off by default; the same passes in
    ``megatron/mpu/cross_entropy.py``@34ed99d1 with the ``.float()`` in the GPT model):
    forward casts the 16-bit logits to fp32, reads them for the max, subtracts it in place,
    exponentiates in place, reads them for the sum and divides in place (the softmax kept
    for backward); backward multiplies the softmax by the loss gradient in place and the
    cast's backward writes it back in 16 bits."""
    return MemoryOp(name="vocab_parallel_cross_entropy", elements=elements,
                    forward=((1, "act"), (9, "f32")), backward=((3, "f32"), (1, "act")))


def _megatron_attention(op) -> tuple:
    if not isinstance(op, AttentionOp) or op.fused:
        return (op,)
    s, d, heads = op.seq, op.head_dim, op.heads
    scores = float(s) * s * heads
    return (MatmulOp(name="qk", m=s, n=s, k=d, batch=heads),
            MemoryOp(name="fused_scale_mask_softmax", elements=scores, forward=((2, "act"),),
                     backward=((3, "act"),)),
            MemoryOp(name="attention_dropout", elements=scores, forward=((2, "act"), (1, "byte")),
                     backward=((2, "act"), (1, "byte"))),
            MatmulOp(name="av", m=s, n=d, k=s, batch=heads))


def config_of(row: dict) -> PredictConfig:
    """The row's layout as a :class:`PredictConfig`."""
    tp, pp = int(row["tp"]), int(row["pp"])
    layout = tp * pp > 1
    recompute = row["recompute"]
    # A topology preset, or a file in validation/systems/ written from the interconnect the source
    # publishes (MegaScale's cluster: no preset has its 8x 200 Gb/s RoCE multi-rail fabric).
    topology = row["topology"]
    where = ({"topology_file": str(ROOT / "validation" / "systems" / topology)} if topology.endswith(".yaml")
             else {"link": topology})
    kw = {"gpus": int(row["gpus"]), **where, "model": row["model"], "micro_batch": int(row["micro_batch"]),
              "global_batch": int(row["global_batch"]), "precision": row["precision"], "strategy": row["strategy"],
              "overlap": row["dp_overlap"] == "true", "steps": 1,
              "bucket_cap_mb": float(row["bucket_cap_mb"]) if row["bucket_cap_mb"] else None,
              # Every row's run clipped the gradient norm at 1.0: Megatron-LM's default
              # (--clip-grad 1.0, megatron/arguments.py@00129014dc, as for every Megatron set
              # here) and MT-NLG's stated setting (Smith et al. 2022, arXiv:2201.11990, Sec. 3:
              # "gradient norm clipping at 1.0").
              "clip_grad_norm": True}
    if layout:
        kw.update(tp=tp, pp=pp, dp=int(row["dp"]), schedule=row["schedule"],
                  virtual_stages=int(row["virtual_stages"]), recompute=recompute,
                  sequence_parallel=row["sequence_parallel"] == "true" and tp > 1)
        if tp > 1:
            kw["tp_comm_overlap"] = row["tp_comm_overlap"]
        kw["grad_accum_fusion"] = row["grad_accum_fusion"] == "true"
    else:
        kw["activation_checkpointing"] = recompute == "full"
    return PredictConfig(**kw)


def flops(row: dict) -> float:
    """The publication's FLOPs per iteration (see the module docstring)."""
    b, s, l, h, v = (int(row[k]) for k in ("global_batch", "seq_len", "layers", "hidden", "vocab"))
    if row["flop_formula"] == "narayanan-eq3":
        return 96.0 * b * s * l * h * h * (1 + s / (6 * h) + v / (16 * l * h))
    return 72.0 * b * s * l * h * h * (1 + s / (6 * h) + v / (12 * l * h))


_EVALUATED: dict[tuple, dict] = {}
"""The evaluations already made in this process, keyed by the row's whole contents and the
efficiency: the table's test fixture and ``validation/model_error.py``'s gathering (the residual
rows) both predict every row at the presets; a row whose text differs is predicted afresh."""


def evaluate(row: dict, *, compute_efficiency: float | None = None) -> dict:
    """Prediction, the published value, both as the published quantity, and the error
    (``compute_efficiency``: ``--compute-efficiency`` for the leave-one-system-out fit)."""
    key = (tuple(sorted(row.items())), compute_efficiency)
    if key not in _EVALUATED:
        _EVALUATED[key] = _evaluate(row, compute_efficiency=compute_efficiency)
    return dict(_EVALUATED[key])  # a copy: a caller's change stays its own


def _evaluate(row: dict, *, compute_efficiency: float | None) -> dict:
    config = config_of(row)
    if compute_efficiency is not None:
        config = dataclasses.replace(config, compute_efficiency=compute_efficiency)
    p = predict(config, model=model_of(row))
    step = p.step_time_s
    n = int(row["gpus"])
    published = float(row["published"])
    if row["flop_formula"] == "published-time":
        predicted = step
        error = published / step - 1
    elif row["unit"].startswith("%"):
        peak = BF16_PEAK_FLOPS[get_gpu(p.gpu).name]
        predicted = 100 * flops(row) / (step * n * peak)
        error = predicted / published - 1
    else:
        predicted = flops(row) / (step * n) / 1e12
        error = predicted / published - 1
    rep = p.layout
    return {"id": row["id"], "set": row["set"], "model": row["model"], "layout": f"{row['tp']}x{row['pp']}x{row['dp']}",
            "gpus": n, "published": published, "predicted": predicted, "unit": row["unit"], "error": error,
            "step_s": step, "bubble": rep.bubble_fraction if rep is not None else 0.0,
            "tp_exposed_s": rep.tp_exposed_s if rep is not None else 0.0, "fits": p.memory.fits,
            "exposed_comm_s": p.exposed_comm_s, "message_bytes": p.gradient_bytes / max(1, p.n_buckets),
            "global_batch": int(row["global_batch"])}


def dp_decomposition(results: list[dict], key: str) -> tuple[float, float]:
    """Split the step times of one model and layout run at several data-parallel sizes into
    ``work / dp + fixed`` (least squares over the rows): with the global batch fixed, the
    micro-batches each pipeline runs go as ``1/dp`` and everything else (the bubble, the
    reductions after the pipeline, the optimizer) does not depend on ``dp``. Returns the work
    per sample of one pipeline (seconds: ``work / global batch``) and the fixed part (s).
    ``key`` is ``published`` or ``step_s``. Two numbers from three rows: a diagnosis of where
    the time goes, never an input of a prediction."""
    xs = [1.0 / int(r["layout"].split("x")[2]) for r in results]
    ys = [float(r[key]) for r in results]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return slope / int(results[0]["global_batch"]), my - slope * mx


MICRO_BATCHES = (1, 2, 4)
"""Micro-batches tried where a row's micro-batch is an assumption (:func:`micro_batch_sensitivity`)."""


def micro_batch_sensitivity(rows_: list[dict], sizes: tuple[int, ...] = MICRO_BATCHES) -> list[dict]:
    """The rows whose micro-batch is not published (their notes say "micro-batch 1 ... assumed")
    predicted again at each of ``sizes`` that divides the replica's share of the global batch (and gives a
    micro-batch count the row's schedule can run):
    what the assumption carries, a diagnosis never used by a prediction. Returns per row its id,
    set and ``{micro-batch: error}`` (``None`` where the layout does not fit in memory)."""
    out = []
    for r in rows_:
        notes = r["notes"]
        if not ("micro-batch 1" in notes and "assumed" in notes):
            continue
        errors: dict[int, float | None] = {}
        for mb in sizes:
            if int(r["global_batch"]) % (mb * int(r["dp"])):
                continue
            try:
                e = evaluate(dict(r, micro_batch=str(mb)))
            except ConfigError:  # a micro-batch count the row's schedule cannot run (interleaving's multiple of pp)
                continue
            errors[mb] = e["error"] if e["fits"] else None
        out.append({"id": r["id"], "set": r["set"], "model": r["model"], "layout": f"{r['tp']}x{r['pp']}x{r['dp']}",
                    "errors": errors})
    return out


def sensitivity_markdown(sens: list[dict], sizes: tuple[int, ...] = MICRO_BATCHES) -> str:
    """The micro-batch sensitivity as a table (a dash: not a divisor of the replica's batch)."""
    def cell(row, mb):
        if mb not in row["errors"]:
            return "-"
        err = row["errors"][mb]
        return "does not fit" if err is None else f"{100 * err:+.1f} %"
    lines = ["| id | model | tp x pp x dp | " + " | ".join(f"micro-batch {mb}" for mb in sizes) + " |",
             "|---|---|---|" + "---|" * len(sizes)]
    lines += [f"| {r['id']} | {r['model']} | {r['layout']} | " + " | ".join(cell(r, mb) for mb in sizes) + " |"
              for r in sens]
    return "\n".join(lines)


SYSTEMS = {"dgx-a100": "Selene (A100)", "infiniband": "Eos (H100)",
           "megascale-a100-roce.yaml": "MegaScale cluster (ByteDance, Ampere)"}
"""The systems of the rows, by topology preset: leave-one-system-out holds each out in turn."""
EFFICIENCY_GRID = tuple(round(0.80 + 0.02 * i, 2) for i in range(11))
"""``--compute-efficiency`` values the leave-one-system-out fit tries (0.80 ... 1.00)."""


def leave_one_system_out(rows_: list[dict]) -> tuple[list[dict], dict]:
    """One fitted number, ``--compute-efficiency`` (an overall factor on the roofline's compute),
    chosen on the other system's rows (the value of :data:`EFFICIENCY_GRID` with the smallest
    median |error| there) and used to predict the held-out system's rows."""
    by_eff = {e: [evaluate(r, compute_efficiency=e) for r in rows_] for e in EFFICIENCY_GRID}
    out, fitted = [], {}
    for topo, name in SYSTEMS.items():
        train = [i for i, r in enumerate(rows_) if r["topology"] != topo]
        best = min(EFFICIENCY_GRID, key=lambda e: statistics.median(abs(by_eff[e][i]["error"]) for i in train))
        fitted[name] = best
        out += [dict(by_eff[best][i], fitted_on="other system", compute_efficiency=best)
                for i, r in enumerate(rows_) if r["topology"] == topo]
    order = {r["id"]: k for k, r in enumerate(rows_)}
    return sorted(out, key=lambda r: order[r["id"]]), fitted


def shard_diagnosis(row: dict) -> dict:
    """What one GPU's shard of the row computes, as the roofline costs it (a diagnosis,
    nothing here enters the tables): the FLOP-weighted tile/wave efficiency of its forward
    and backward GEMMs after the tensor-parallel split, the matmuls' share of its layer
    time, and what Megatron's per-step gradient clipping (``--clip-grad`` 1.0 by default:
    ``megatron/arguments.py``@00129014dc; ``clip_grad_norm_fp32``, one read for the norm and
    a read and write to scale, :data:`dpsim.workload.compute.CLIP_GRAD_NORM_PASSES`) over the
    fp32 gradients of the GPU's optimizer shard would add, which dpsim's layout path does not
    charge."""
    from dpsim.strategies.tensor import tp_model
    from dpsim.workload.compute import CLIP_GRAD_NORM_PASSES, compute_profile
    from dpsim.workload.precision import get_precision
    from dpsim.workload.roofline import MEMORY_EFFICIENCY, shape_efficiency

    config, model = config_of(row), model_of(row)
    gpu, precision = get_gpu(resolve_topology(config).spec.gpu), get_precision(config.execution.precision)
    tp = config.parallelism.tp if config.parallelism.layout_active else 1
    tpm = tp_model(model, tp, sequence_parallel=config.parallelism.sequence_parallel)
    useful = total = 0.0
    for layer in tpm.spec.layers:
        for op in layer.ops:
            if isinstance(op, MatmulOp):
                m = op.m * config.workload.micro_batch
                for a, b, c in ((m, op.n, op.k), (m, op.k, op.n), (op.n, op.k, m)):
                    f = 2.0 * a * b * c * op.batch
                    useful += f * shape_efficiency(a, b, c, op.batch, gpu)
                    total += f
    shard = compute_profile(tpm.spec, gpu, micro_batch=config.workload.micro_batch, precision=precision,
                            optimizer=config.workload.optimizer)
    times = shard.breakdown_s
    pp = config.parallelism.pp if config.parallelism.layout_active else 1
    dp = config.data_parallel if config.parallelism.layout_active else config.cluster.gpus
    params = tpm.spec.param_count / pp / (dp if config.parallelism.strategy in ("zero1", "fsdp") else 1)
    clip_s = CLIP_GRAD_NORM_PASSES * 4 * params / (gpu.streaming_bandwidth_bytes_per_s * MEMORY_EFFICIENCY)
    step = predict(config, model=model).step_time_s
    return {"id": row["id"], "gemm_efficiency": useful / total if total else 1.0,
            "matmul_share": times.get("matmul", 0.0) / sum(times.values()), "clip_share": clip_s / step}


def summary(results: list[dict]) -> dict:
    """Median and worst |error|, overall and per set."""
    out = {}
    for key in ["all"] + sorted({r["set"] for r in results}):
        errs = [abs(r["error"]) for r in results if key == "all" or r["set"] == key]
        out[key] = {"n": len(errs), "median": statistics.median(errs), "worst": max(errs)}
    return out


def markdown(results: list[dict]) -> str:
    lines = ["| id | model | tp x pp x dp | GPUs | published | dpsim | error | bubble |",
             "|---|---|---|---|---|---|---|---|"]
    for r in results:
        unit = {"TFLOP/s per GPU": "TF/s", "% MFU": "% MFU", "s per iteration": "s"}[r["unit"]]
        lines.append(f"| {r['id']} | {r['model']} | {r['layout']} | {r['gpus']} | {r['published']:g} {unit} | "
                     f"{r['predicted']:.1f} {unit} | {100 * r['error']:+.1f} % | {100 * r['bubble']:.1f} % |")
    s = summary(results)
    lines.append("")
    for key, v in s.items():
        lines.append(f"- {key}: {v['n']} rows, median |error| {100 * v['median']:.1f} %, worst {100 * v['worst']:.1f} %")
    return "\n".join(lines)


BEGIN, END, ANALYSIS = "<!-- layouts: begin -->", "<!-- layouts: end -->", "<!-- layouts: analysis -->"
VALIDATION = ROOT / "VALIDATION.md"


def write_section(results: list[dict], loso: list[dict] | None = None, fitted: dict | None = None,
                  path: Path = VALIDATION, sensitivity: list[dict] | None = None) -> None:
    """Replace the generated part of VALIDATION.md's layout section, keeping its analysis."""
    from dpsim.files import write_text_atomic

    text = path.read_text()
    analysis = ""
    if BEGIN in text and END in text:
        old = text.split(BEGIN, 1)[1].split(END, 1)[0]
        if ANALYSIS in old:
            analysis = old.split(ANALYSIS, 1)[1].strip("\n")
    s = summary(results)
    fit_lines: list[str] = []
    if loso:
        ls = summary(loso)
        fit_lines = ["", "### Leave one system out: one fitted number", "",
                     "The roofline is fast on every system (above). One number, `--compute-efficiency` (an overall "
                     "factor on the roofline's compute), fitted on the *other* system's rows (the value of 0.80, "
                     "0.82 ... 1.00 with the smallest median |error| there) and used to predict the held-out one: "
                     + ", ".join(f"{name} predicted with {eff:.2f}" for name, eff in (fitted or {}).items()) + ".",
                     "", (f"**all rows: median |error| {100 * ls['all']['median']:.1f} %, worst "
                          f"{100 * ls['all']['worst']:.1f} %**"), "", markdown(loso)]
    if sensitivity:
        fit_lines += ["", "### What the assumed micro-batch carries", "",
                      ("The rows whose micro-batch is not published (the CSV assumes 1) predicted again at 2 and 4 "
                       "(error as above; a diagnosis, nothing here enters the tables above):"), "",
                      sensitivity_markdown(sensitivity)]
    head = ["## Tensor x pipeline x data layouts against published Megatron-LM runs (issue 16)", "",
            ("Generated by `python validation/accuracy_layouts.py --write`. Each row of "
             "`tests/data/layout_reference.csv` (its source in the file) is predicted from the presets alone "
             "(topology, GPU, the model built from the published shape) with the row's layout, and turned "
             "into the published quantity with the publication's FLOP count; error = predicted throughput / "
             "published - 1 (positive: dpsim is fast). Nothing is fitted on these rows."), "",
            (f"**all rows: median |error| {100 * s['all']['median']:.1f} % (target 5 %), worst "
             f"{100 * s['all']['worst']:.1f} % (target 12 %)**"), "", markdown(results), *fit_lines, "", ANALYSIS]
    section = "\n".join(head) + ("\n" + analysis if analysis else "") + "\n"
    if BEGIN in text and END in text:
        before, rest = text.split(BEGIN, 1)
        after = rest.split(END, 1)[1]
        text = before + BEGIN + "\n" + section + END + after
    else:
        text = text.rstrip("\n") + "\n\n" + BEGIN + "\n" + section + END + "\n"
    write_text_atomic(path, text)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--markdown", action="store_true", help="print the VALIDATION.md table")
    ap.add_argument("--write", action="store_true", help="rewrite VALIDATION.md's layout section")
    ap.add_argument("--loso", action="store_true", help="also fit --compute-efficiency leaving one system out "
                                                         "(~4 min)")
    ap.add_argument("--sensitivity", action="store_true", help="also predict the rows whose micro-batch is "
                                                                "assumed at micro-batches 2 and 4 (~1 min)")
    ap.add_argument("--diagnose", action="store_true", help="also print each row's GEMM tile/wave efficiency "
                                                             "after the tensor split, matmul share and the "
                                                             "uncharged gradient clipping (shard_diagnosis)")
    ap.add_argument("--only", help="comma-separated row ids")
    args = ap.parse_args(argv)
    from row_ids import only_ids

    try:
        only = only_ids(args.only, rows(), DATA.name) if args.only else None
    except ValueError as e:  # a bad id ran the table over no row: a StatisticsError traceback
        print(f"{ap.prog}: error: {e}", file=sys.stderr)
        return 2
    selected = [r for r in rows() if only is None or r["id"] in only]
    results = [evaluate(r) for r in selected]
    if args.markdown:
        print(markdown(results))
        return 0
    loso, fitted = leave_one_system_out(selected) if args.loso else (None, None)
    sens = micro_batch_sensitivity(selected) if args.sensitivity else None
    if args.write:
        write_section(results, loso, fitted, sensitivity=sens)
    for r in results:
        print(f"{r['id']:4s} {r['model']:16s} {r['layout']:>9s} {r['gpus']:5d}  published {r['published']:8.2f} "
              f"dpsim {r['predicted']:8.2f} {r['unit']:18s} error {100 * r['error']:+6.1f} %  "
              f"step {r['step_s']:.3f} s bubble {100 * r['bubble']:.1f} % tp-exposed {r['tp_exposed_s']:.3f} s"
              f"{'' if r['fits'] else '  (does not fit)'}")
    for key, v in summary(results).items():
        print(f"{key}: {v['n']} rows, median |error| {100 * v['median']:.1f} %, worst {100 * v['worst']:.1f} %")
    mt = [r for r in results if r["set"] == "mtnlg2022"]
    if len(mt) >= 3:
        (pw, pf), (dw, df) = dp_decomposition(mt, "published"), dp_decomposition(mt, "step_s")
        print(f"mtnlg2022 as work/dp + fixed: published {1e3 * pw:.1f} ms per sample + {pf:.1f} s, "
              f"dpsim {1e3 * dw:.1f} ms per sample + {df:.1f} s")
    if args.diagnose:
        for d in (shard_diagnosis(r) for r in selected):
            print(f"{d['id']:4s} GEMM tile/wave efficiency {d['gemm_efficiency']:.3f}  matmul share "
                  f"{100 * d['matmul_share']:.0f} %  clipping {100 * d['clip_share']:.2f} % of the step")
    if sens:
        print("micro-batch sensitivity (rows whose micro-batch is assumed):")
        print(sensitivity_markdown(sens))
    if loso:
        print("leave one system out, --compute-efficiency fitted on the other system:",
              ", ".join(f"{k} {v:.2f}" for k, v in fitted.items()))
        for r in loso:
            print(f"{r['id']:4s} error {100 * r['error']:+6.1f} %")
        for key, v in summary(loso).items():
            print(f"{key}: {v['n']} rows, median |error| {100 * v['median']:.1f} %, worst {100 * v['worst']:.1f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
