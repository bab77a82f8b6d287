"""The residuals behind every prediction's model-error interval: ``python validation/model_error.py``.

Gathers, from the accuracy scripts, every scored validation row predicted with nothing fitted on
its own system, as ``ln(measured time / predicted time)`` with its regime
(:mod:`dpsim.predict.model_error`):

* ``compute``: ``accuracy_compute.py``'s single-GPU rows, each predicted with the roofline
  constants fitted on the other GPU chips (the unit left out is the chip);
* ``ddp``: ``accuracy_ddp.py``'s DDP scaling rows, predicted from the measured one-GPU step
  (nothing is fitted; the unit is the server);
* ``layout``: ``accuracy_layouts.py``'s Megatron-LM / DeepSpeed rows, predicted from the presets
  (nothing is fitted on them; the unit is the publication's run set: the cluster with its
  software stack, e.g. Selene under Megatron-LM 2021, Selene under DeepSpeed, Eos under
  Megatron-Core), and ``accuracy_large_models.py``'s published FSDP / ZeRO / HSDP, 3D and MoE
  runs, predicted from the presets with the one fitted number, the multi-GPU compute efficiency,
  chosen without the row's system (that script's leave-one-system-out column; the unit is the
  table's system: one publisher's cluster and software, e.g. MosaicML's llm-foundry tables,
  InternLM's, Megatron-Core MoE's ModelZoo); each
  layout row with its step's fabric class, exposed share and typical all-reduce, as ``predict``
  gives its query's regime, so that it is scored as that query's interval is built.

``--write`` stores them in ``dpsim/predict/model_error_rows.json`` (shipped: predictions read it)
with the collective classes that published nccl-tests rows validate
(``tests/data/collectives_reference.csv``), and rewrites VALIDATION.md's "Model-error intervals"
section with the leave-one-system-out coverage; without it, prints the coverage and says whether
the committed file is current. ``--rows-out PATH`` also stores the rows at ``PATH`` for
``validation/model_error_variants.py --rows PATH`` to score (or ``--gather`` there: one command).
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "validation"))

from dpsim.files import write_text_atomic  # noqa: E402
from dpsim.hardware import get_gpu  # noqa: E402
from dpsim.predict.model_error import (  # noqa: E402
    COLLECTIVE_POOL,
    COVERAGE,
    KNOBS,
    MIN_ROWS,
    ROWS_FILE,
    ResidualRow,
    coverage_by,
    forget_loaded,
    layout_kind,
    loso_coverage,
    model_family,
    query_features,
    regime_coverage,
    step_fabric,
)
from dpsim.predict.run import resolve_topology  # noqa: E402

VALIDATION = ROOT / "VALIDATION.md"
HEADING = "## Model-error intervals, leave one system out (issue 25)"
COLLECTIVES = ROOT / "tests" / "data" / "collectives_reference.csv"


def _short(source: str) -> str:
    return " ".join(source.split())[:160]


def compute_rows() -> list[ResidualRow]:
    import accuracy_compute as ac

    results, _ = ac.evaluate()
    out = []
    for r in results:
        if not r.row.is_scored:
            continue
        model = ac.build(r.row)
        out.append(ResidualRow(id=r.row.id, pool="compute", system=r.row.chip, log_ratio=math.log(1 + r.error),
                               gpu_arch=get_gpu(r.row.gpu).architecture, model_family=model_family(model),
                               params=float(model.param_count), gpus=r.row.gpus, source=_short(r.row.source)))
    return out


def ddp_rows() -> list[ResidualRow]:
    import accuracy_ddp as ad
    from dpsim.workload.catalog import get_model

    out = []
    data = ad.rows()
    for res in ad.leave_one_system_out(data):
        row = res.row
        model = get_model(row["model"])
        out.append(ResidualRow(id=row["id"], pool="ddp", system=row["system"], log_ratio=math.log(1 + res.error),
                               gpu_arch=get_gpu(row["gpu"]).architecture, model_family=model_family(model),
                               params=float(model.param_count), gpus=int(row["gpus"]), source=_short(row["source"])))
    return out


def _as_queried(topology, gpus: int, exposed_s: float, step_s: float, message_bytes: float) -> dict:
    """A layout row's fabric class, exposed share and typical all-reduce, as ``predict`` gives its
    query's regime (:func:`dpsim.predict.model_error.regime_of`), for its interval to be scored as
    the prediction's is built."""
    fabric, _ = step_fabric(topology, gpus)
    share = min(1.0, max(0.0, exposed_s / step_s)) if gpus > 1 and step_s > 0 else 0.0
    return {"fabric": fabric, "exposed_share": share, "message_bytes": float(message_bytes)}


def layout_rows() -> list[ResidualRow]:
    import accuracy_layouts as al

    out = []
    for row in al.rows():
        result = al.evaluate(row)
        # The family from the model as built with fused attention: the 2021-22 rows' eager
        # attention (two GEMMs around a softmax) is the same decoder.
        model = al.model_of(dict(row, set="mcore2024"))
        config = al.config_of(row)
        # The row's topology preset, or its system file (validation/systems/) where no preset fits.
        topology = resolve_topology(config)
        gpu = get_gpu(topology.spec.gpu)
        par = config.parallelism
        out.append(ResidualRow(id=row["id"], pool="layout", system=row["set"], log_ratio=math.log(1 + result["error"]),
                               gpu_arch=gpu.architecture, model_family=model_family(model),
                               params=float(model.param_count), gpus=int(row["gpus"]), source=_short(row["source"]),
                               suite="layouts", layout_kind=layout_kind(model, tp=par.tp, pp=par.pp, cp=par.cp),
                               **_as_queried(topology, int(row["gpus"]), result["exposed_comm_s"], result["step_s"],
                                             result["message_bytes"]), **query_features(config, model)))
    return out


AT_SHIPPED_DEFAULT: dict[str, float] = {}
"""The large-model rows' residuals at the shipped default efficiency (``ln(measured / predicted)`` by
id), kept by :func:`large_model_rows` for :func:`main` to print the figure they would give."""


def large_model_rows() -> list[ResidualRow]:
    """``accuracy_large_models.py``'s rows, each residual its leave-one-system-out one: the row
    predicted with ``--compute-efficiency`` chosen without its system
    (``accuracy_large_models.leave_one_system_out``, the script's own LOSO column, reused here, not
    recomputed), since the shipped default :data:`dpsim.workload.compute.MULTI_GPU_TRAINING_EFFICIENCY`
    was fitted on these very rows and a residual at it carries the row's own system's share of the
    fit. The regime facts (fabric class, exposed share, typical all-reduce) stay those of the preset
    prediction, as ``predict`` gives a user's query of the row. Until 2026-12-07 (width) the residuals
    were taken at the shipped default: 357 of 444 inside (80.4 %), half-width / error 2.113 under the
    rule then shipped; at their leave-one-system-out residuals 355 (79.95 %), 2.148."""
    import accuracy_large_models as alm

    dense, _ = alm.split(alm.rows())
    by_id = {r["id"]: r for r in dense}
    presets, loso, _, _ = alm.run()
    loso_by_id = {res.id: res for res in loso}
    out = []
    for res in presets:
        row = by_id[res.id]
        model = alm.model_of(row)
        config = alm.job_of(row).config
        par = config.parallelism
        error = loso_by_id[res.id].error
        AT_SHIPPED_DEFAULT[res.id] = math.log(1 + res.error)
        out.append(ResidualRow(id=res.id, pool="layout", system=res.system, log_ratio=math.log(1 + error),
                               gpu_arch=get_gpu(res.gpu).architecture, model_family=model_family(model),
                               params=float(model.param_count), gpus=res.gpus, source=_short(row["source"]),
                               suite="large-models", layout_kind=layout_kind(model, tp=par.tp, pp=par.pp, cp=par.cp),
                               **_as_queried(resolve_topology(config), res.gpus, res.exposed_comm_s, res.step_s,
                                             res.message_bytes), **query_features(config, model)))
    return out


def collective_rows() -> list[ResidualRow]:
    import accuracy_collectives as acc

    results = acc.load_results()
    tunings = {system: acc.tuning_from(fit) for system, fit in results["fits"].items()}
    out = []
    for point in acc.evaluate(tunings):
        row = point.row
        if not row.scored:
            continue
        out.append(ResidualRow(id=row.id, pool=COLLECTIVE_POOL, system=acc.platform(row.system),
                               log_ratio=math.log(row.measured_s / point.predicted_s),
                               gpu_arch=get_gpu(acc.system_spec(row.system).gpu).architecture, model_family="none",
                               params=0.0, gpus=row.gpus, source=f"tests/data/collectives_reference.csv {row.id}",
                               fabric=row.system_class, message_bytes=float(row.size_bytes)))
    return out


def collective_classes() -> list[str]:
    with COLLECTIVES.open(newline="") as fh:
        return sorted({r["system_class"] for r in csv.DictReader(fh)})


def gather() -> dict:
    rows = compute_rows() + ddp_rows() + layout_rows() + large_model_rows() + collective_rows()
    return {"schema": "dpsim.model-error-rows/6",
            "written_by": "python validation/model_error.py --write",
            "collective_classes": collective_classes(),
            "rows": [{k: getattr(r, k) for k in ResidualRow.__dataclass_fields__} for r in rows]}


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def _table(cov: dict, first: str = "pool") -> list[str]:
    lines = [f"| {first} | rows | inside | coverage | median abs. error | median half-width | half-width / error |",
             "|---|---|---|---|---|---|---|"]
    for pool in cov:
        c = cov[pool]
        lines.append(f"| {pool} | {c.rows} | {c.inside} | {_pct(c.fraction)} | {_pct(c.median_abs_error)} | "
                     f"{_pct(c.median_half_width)} | {c.median_half_width / c.median_abs_error:.2f} |")
    return lines


def section(data: dict) -> str:
    rows = tuple(ResidualRow(**r) for r in data["rows"])
    cov = loso_coverage(rows)
    keys = "; ".join(f"{pool}: {' > '.join(k.keys)}" for pool, k in KNOBS.items())
    return "\n".join([
        "Every prediction of `predict`, `sweep`, `plan` and `goodput` carries a model-error interval "
        f"(p10-p90, nominal {COVERAGE:.0%}) on its step time and time to train, built from the rows below "
        "in the regime the query falls in (`dpsim/predict/model_error.py`). Here each row's interval is built "
        "*without its own system*, exactly as a prediction would build it, and we count how many measured "
        "times fall inside. Half-width: (high - low) / 2 relative to the prediction.",
        "",
        "Each interval is conformalised quantile regression (CQR, Romano, Patterson and Candes 2019; "
        "the module's docstring): the narrowest window holding 80 % of the residuals of the query's "
        "regime (so it follows the regime's bias and spread, and may be asymmetric), widened on both "
        "sides by one conformal margin for all pools, the ceil(0.8 (N + 1))-th smallest of the scores of "
        "every pool's rows: how far the ends of each row's interval, its regime's window taken without "
        "its own system and widened for each way it extrapolates from the others, must move out to hold "
        "it; every quantile an order statistic. This rule (X1J in `validation/model_error_variants.py`) "
        "was chosen after about 25 registered variants had been scored, so its figures below are not "
        "out of sample; chosen afresh for each left-out system among it, X1 and the rule before it "
        "(p10-p90 with a margin per pool: 80.9 %, 2.087) on the other systems' rows alone, it reads "
        "80.9 %, 1.944 (`python validation/model_error_variants.py --nested W0 X1 X1J`). "
        "The large-model runs' residuals are their leave-one-system-out ones (the multi-GPU compute "
        "efficiency chosen without the row's system, as `accuracy_large_models.py`'s LOSO column), "
        "since the shipped default was fitted on those rows (scored at it on 2026-12-07: 80.4 %, 2.113). "
        f"Regime keys, kept while at least {MIN_ROWS} rows remain (the last dropped first): {keys}. "
        "The compute pool's order (model family first) and the order statistics were compared on these "
        "rows (82.3 % inside at 2.45 before them and the widened scores), so this score is not wholly out "
        "of sample; the layout pool's kind key (dp / 3d / moe) was registered before its score (80.1 % "
        "inside at 2.43 without it); the alternatives tried and their figures, per-row error scales "
        "(normalised conformal) among them, are in the module's docstring:",
        "",
        *_table(cov),
        "",
        "Per regime (a step pool split by GPU architecture, the collectives by all-reduce size band):",
        "",
        *_table(regime_coverage(rows), "regime"),
        "",
        "The layout pool by the table its rows come from (both pooled alike; until 2026-12-05 the pool "
        "held only the Megatron-LM / DeepSpeed rows, 88.5 % inside at 4.91, the whole 82.6 % at 2.07, "
        "and the large-model runs, judged out of sample by those intervals, fell 73 % inside "
        "(78 of 107)):",
        "",
        *_table(coverage_by(lambda r: f"layout {r.suite}" if r.pool == "layout" else None, rows), "table"),
        "",
        "The layout pool by layout kind, its first key (dp: data parallelism alone, DDP / FSDP / ZeRO / "
        "HSDP; 3d: tensor, pipeline or context parallelism; moe: a mixture of experts):",
        "",
        *_table(coverage_by(lambda r: f"layout {r.layout_kind}" if r.pool == "layout" else None, rows), "kind"),
        "",
        "The bar (issue 25): at least 80 % inside, and the median half-width at most twice the median error. "
        f"{_pct(cov['all'].fraction)} inside, half-width / error "
        f"{cov['all'].median_half_width / cov['all'].median_abs_error:.3f}: the width bar is "
        f"{'met' if cov['all'].median_half_width <= 2 * cov['all'].median_abs_error else 'not met'}. "
        "The residuals are heavy-tailed across systems (a left-out platform's bias is unknown to the others: "
        "EFA on B200 measured 1.8x the prediction at small messages, an NVLink-bridge pair 2.1x). "
        "The earlier method (normalised split conformal with three knobs per pool picked from a grid by "
        "coverage) read 80.0 % inside at 2.98 with its knobs re-chosen without each left-out system; "
        "the alternatives tried and their figures are listed in the module's docstring.",
        "",
        "Units left out: the GPU chip (compute), the server (ddp), the publication's run set (layout: a "
        "Megatron-LM / DeepSpeed run set, or a large-model table's system), the "
        "hardware platform (collective: all-reduce >= 1 MiB, with the NCCL constants fitted without it, as "
        "`accuracy_collectives.py` scores them). A collective row is scored as a step that is all exposed "
        "communication over its fabric; a layout row as its query, with its step's fabric class and exposed "
        "share: the collective pool's error is added (in proportion to the share) only where no other "
        "system's layout row crossed that fabric, as a prediction's interval adds it. "
        "The combined compute + ddp interval of a preset multi-GPU prediction is not scored here: no "
        "published row predicts such a step from presets end to end apart from the compute pool's.",
        "",
        f"Written by `python validation/model_error.py --write` from {len(rows)} rows; the rows are shipped "
        "in `dpsim/predict/model_error_rows.json`, each with its source.",
    ])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true", help="store the rows and rewrite VALIDATION.md's section")
    ap.add_argument("--rows-out", type=Path, metavar="PATH",
                    help="also store the gathered rows at PATH (not shipped), for "
                         "`validation/model_error_variants.py --rows PATH` to score")
    args = ap.parse_args(argv)
    data = gather()
    text = json.dumps(data, indent=1, sort_keys=True) + "\n"
    if args.rows_out is not None:
        write_text_atomic(args.rows_out, text)
    body = section(data)
    print(body)
    if AT_SHIPPED_DEFAULT:
        rows = tuple(ResidualRow(**r) for r in data["rows"])
        at_default = tuple(dataclasses.replace(r, log_ratio=AT_SHIPPED_DEFAULT[r.id])
                           if r.suite == "large-models" else r for r in rows)
        for label, cov in (("leave-one-system-out residuals (as gathered)", loso_coverage(rows)["all"]),
                           ("residuals at the shipped default efficiency", loso_coverage(at_default)["all"])):
            ratio = cov.median_half_width / cov.median_abs_error
            print(f"# large-model rows at their {label}: {cov.inside} of {cov.rows} inside "
                  f"({100 * cov.fraction:.2f} %), half-width / error {ratio:.3f}")
    if args.write:
        write_text_atomic(ROWS_FILE, text)
        from sections import replace_section
        replace_section(VALIDATION, HEADING, body)
        forget_loaded()
        print(f"# wrote {ROWS_FILE.relative_to(ROOT)} and VALIDATION.md's section")
    else:
        current = ROWS_FILE.exists() and ROWS_FILE.read_text() == text
        print(f"# {ROWS_FILE.relative_to(ROOT)} is {'current' if current else 'STALE: run with --write'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
