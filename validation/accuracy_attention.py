"""Fit the fused-attention rate model on published kernel benchmarks and score it leaving each source out.

Reads ``tests/data/attention_kernel_rates.csv`` (FlashAttention-2, FlashAttention-3 and cuDNN
forward and backward TFLOP/s by GPU, head dim, sequence length and causal mask; every row cites
its source and figure), fits :class:`dpsim.workload.attention_rates.AttentionRateModel` by least
squares on log(rate), and prints:

* the fit on every row (the numbers :data:`dpsim.workload.attention_rates.FITTED` holds);
* the error of each row predicted by a fit on every *other* source (leave-one-source-out), per
  source and overall (median and worst |error|).

A weak pull towards neutral values (:data:`PRIOR`, weight :data:`PRIOR_WEIGHT`) keeps terms that
only the left-out source measures defined; they then stay near the prior, and that source's error
says how far off a generation or family with no data is.

Run: ``python validation/accuracy_attention.py`` (a second or two).
"""

from __future__ import annotations

import argparse
import csv
import statistics
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from dpsim.hardware import get_gpu
from dpsim.workload.attention_rates import CEILING_KEYS, FAMILIES, AttentionRateModel, FamilyRates, kernel_pair

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "attention_kernel_rates.csv"

_FAMILY_TERMS = ("backward_share", "head_dim_half", "forward_keys_half", "backward_keys_half")

PRIOR = {"ceiling": 0.6, "backward_share": 0.85, "head_dim_half": 32.0, "forward_keys_half": 256.0,
         "backward_keys_half": 256.0, "causal_block_tokens": 128.0}
"""Neutral values each term is weakly pulled to: a kernel at 60 % of peak, a backward 15 % slower,
the fixed cost of about two 128-token blocks, one block of causal masking."""

CEILING_ONLY = ("cudnn@blackwell", "cudnn@blackwell-ultra", "flash2@hopper-h20", "flash3@hopper-h20", "cudnn@hopper-h20")
"""Pairs whose rows fit their ceiling (on their forward rows) and, when they have backward rows, their
own backward share only: cuDNN on B200 (forward) and GB200 (forward and backward), and on GB300
(forward and backward), rows that would otherwise pull the shape terms every other pair shares (the
causal diagonal block, cuDNN's key and head-dim halves, fitted on far more rows); their key-length
shape is Hopper cuDNN's and their head-dim half the family's times
:data:`dpsim.workload.attention_rates.HEAD_DIM_HALF_SCALE`. The H20's three kernels (flash-attention issue
#1310: forward only, 2048 tokens) likewise: their key-length shape is their family's on Hopper, their
backward share the family's."""

STAND_IN = {"cudnn@blackwell-ultra": "cudnn@blackwell", "flash2@hopper-h20": "flash2@hopper",
            "flash3@hopper-h20": "flash3@hopper", "cudnn@hopper-h20": "cudnn@hopper"}
"""A :data:`CEILING_ONLY` pair with no rows of its own (its source left out) takes this pair's ceiling
and backward share: Blackwell Ultra has Blackwell's tensor cores and dense peak, and differs in its
exponential units, which its head-dim half already carries. Leaving the GB300 source out so scores what
the mechanism alone predicts from Blackwell's rows. The H20's pairs take the H100's ceilings: with their
source out the H20 is costed as an H100 but for its exponentials' weight (its head-dim half)."""

PRIOR_WEIGHT = 0.05
"""Weight of the pull, against 1 per row, in log (logit for shares) units."""


@dataclass(frozen=True, kw_only=True)
class Row:
    """One published measurement, as the model sees it."""

    id: str
    """Row id (``A001``...)."""
    source: str
    """Source without the figure or row detail: what leave-one-source-out leaves out."""
    pair: str
    """``family@generation`` of the kernel and GPU."""
    backward: bool
    """Backward pass."""
    head_dim: int
    """Head dim."""
    keys: float
    """Keys each query block loops over (halved under a causal mask)."""
    causal: bool
    """Causal mask."""
    fraction: float
    """Published TFLOP/s / the GPU's dense 16-bit peak."""


def source_key(source: str) -> str:
    """The publication a row comes from, with the figure/panel/row detail dropped, and a paper's
    forward and backward figures kept apart (they are separate measurements)."""
    if source.startswith("Shah et al."):
        return "FlashAttention-3 paper " + ("Fig. 5" if "Fig. 5" in source else "Fig. 6")
    if source.startswith("Dao-AILab/flash-attention "):
        # One pull request or issue per GPU (B200: pull request #2605; H20: issue #1310).
        return source[:source.index("#")] + source[source.index("#"):].split(" ")[0]
    if source.startswith("NVIDIA/cudnn-frontend") and "/results/" in source:
        # One results folder per GPU (gb200_919_only_cudnn, gb300_919_only_cudnn): separate measurements.
        return source.split(" ")[0] + " " + source.split("/results/")[1].split("/")[0]
    return source.split(" ")[0]


def load(path: Path = DATA) -> list[Row]:
    """The data file's rows."""
    rows = []
    with path.open(newline="") as f:
        for r in csv.DictReader(f):
            gpu = get_gpu(r["gpu"])
            pair = kernel_pair(r["kernel"], gpu.attention_architecture)
            assert pair == f"{r['kernel']}@{gpu.attention_architecture}", r["id"]  # every row is a benchmarked pair
            causal = r["causal"] == "true"
            rows.append(Row(id=r["id"], source=source_key(r["source"]), pair=pair,
                            backward=r["direction"] == "bwd", head_dim=int(r["head_dim"]),
                            keys=int(r["seq_len"]) * (0.5 if causal else 1.0), causal=causal,
                            fraction=float(r["tflops"]) * 1e12 / gpu.peak_rate(r["dtype"])))
    return rows


def _names() -> list[str]:
    return [f"{p}.ceiling" for p in CEILING_KEYS] + [f"{f}.{t}" for f in FAMILIES for t in _FAMILY_TERMS] \
        + ["causal_block_tokens"]


def _values(theta: np.ndarray) -> dict[str, float]:
    """Terms from their log, or logit for shares (a kernel never passes the peak, although a GeForce
    board boosting above its datasheet clock measures slightly more; a backward, which recomputes
    the scores, never outruns its forward)."""
    return {n: float(1 / (1 + np.exp(-t)) if _is_share(n) else np.exp(t)) for n, t in zip(_names(), theta)}


def _is_share(name: str) -> bool:
    return name.endswith((".ceiling", ".backward_share"))


def _model(theta: np.ndarray) -> AttentionRateModel:
    v = _values(theta)
    return AttentionRateModel(
        ceilings={p: float(v[f"{p}.ceiling"]) for p in CEILING_KEYS},
        families={f: FamilyRates(**{t: float(v[f"{f}.{t}"]) for t in _FAMILY_TERMS}) for f in FAMILIES},
        causal_block_tokens=float(v["causal_block_tokens"]))


def _prior() -> np.ndarray:
    values = [PRIOR[n.split(".")[-1]] for n in _names()]
    return np.array([np.log(v / (1 - v)) if _is_share(n) else np.log(v) for n, v in zip(_names(), values)])


def _residuals(theta: np.ndarray, rows: list[Row]) -> np.ndarray:
    m = _model(theta)
    fit = [np.log(m.fraction_of_peak(r.pair, r.backward, r.head_dim, r.keys, r.causal) / r.fraction)
           for r in rows]
    return np.concatenate([fit, PRIOR_WEIGHT * (theta - _prior())])


def fit(rows: list[Row], iterations: int = 200) -> AttentionRateModel:
    """The shared terms fitted on the rows of every pair but :data:`CEILING_ONLY`'s (:func:`_fit_shared`),
    then each :data:`CEILING_ONLY` pair's ceiling alone on its own rows with those terms held."""
    model = _fit_shared([r for r in rows if r.pair not in CEILING_ONLY], iterations)
    ceilings, shares = dict(model.ceilings), {}
    for pair in CEILING_ONLY:
        own = [r for r in rows if r.pair == pair]
        if not own and pair in STAND_IN:
            ceilings[pair] = ceilings[STAND_IN[pair]]
            if STAND_IN[pair] in shares:
                shares[pair] = shares[STAND_IN[pair]]
        if own:
            # log(rate) is linear in log(ceiling): the least-squares ceiling is the geometric mean of
            # published / predicted-at-ceiling-one over the pair's rows.
            unit = replace(model, ceilings={**ceilings, pair: 1.0})
            forward = [r for r in own if not r.backward] or own
            ceilings[pair] = float(np.exp(np.mean([np.log(r.fraction / unit.fraction_of_peak(
                pair, r.backward, r.head_dim, r.keys, r.causal)) for r in forward])))
            backward = [r for r in own if r.backward]
            if backward and len(forward) < len(own):  # its own backward share, the same way
                unit = replace(model, ceilings={**ceilings}, backward_shares={**shares, pair: 1.0})
                shares[pair] = float(np.exp(np.mean([np.log(r.fraction / unit.fraction_of_peak(
                    pair, r.backward, r.head_dim, r.keys, r.causal)) for r in backward])))
    return replace(model, ceilings=ceilings, backward_shares=shares)


def _fit_shared(rows: list[Row], iterations: int) -> AttentionRateModel:
    """Levenberg-Marquardt on log(rate) in log (logit for shares) terms with a numerical Jacobian (19 terms, a few hundred rows)."""
    theta, damping = _prior(), 1e-2
    r = _residuals(theta, rows)
    for _ in range(iterations):
        jac = np.empty((r.size, theta.size))
        for j in range(theta.size):
            step = np.zeros_like(theta)
            step[j] = 1e-6
            jac[:, j] = (_residuals(theta + step, rows) - r) / 1e-6
        normal = jac.T @ jac
        delta = np.linalg.solve(normal + damping * np.diag(np.diag(normal) + 1e-9), -jac.T @ r)
        trial = _residuals(theta + delta, rows)
        if trial @ trial < r @ r:
            theta, r, damping = theta + delta, trial, damping / 3
            if np.max(np.abs(delta)) < 1e-9:
                break
        else:
            damping *= 4
    return _model(theta)


def errors(model: AttentionRateModel, rows: list[Row]) -> list[float]:
    """Signed relative error of each row's predicted rate."""
    return [model.fraction_of_peak(r.pair, r.backward, r.head_dim, r.keys, r.causal) / r.fraction - 1
            for r in rows]


def leave_one_source_out(rows: list[Row]) -> dict[str, list[float]]:
    """Each source's rows predicted by the fit on every other source."""
    out = {}
    for source in dict.fromkeys(r.source for r in rows):
        held = [r for r in rows if r.source == source]
        out[source] = errors(fit([r for r in rows if r.source != source]), held)
    return out


def describe(model: AttentionRateModel) -> str:
    """The model as the Python literal :data:`dpsim.workload.attention_rates.FITTED` holds."""
    ceilings = ", ".join(f'"{p}": {c:.4g}' for p, c in model.ceilings.items())
    fams = ",\n".join(
        f'        "{f}": FamilyRates(' + ", ".join(f"{t}={getattr(r, t):.4g}" for t in _FAMILY_TERMS) + ")"
        for f, r in model.families.items())
    shares = ", ".join(f'"{p}": {c:.4g}' for p, c in model.backward_shares.items())
    return (f"AttentionRateModel(\n    ceilings={{{ceilings}}},\n    families={{\n{fams},\n    }},\n"
            f"    causal_block_tokens={model.causal_block_tokens:.4g},\n    backward_shares={{{shares}}},\n)")


def _stats(errs: list[float]) -> str:
    abs_errs = [abs(e) for e in errs]
    return f"median |error| {100 * statistics.median(abs_errs):.1f} %, worst {100 * max(abs_errs):.1f} %"


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    rows = load()
    model = fit(rows)
    print(f"{len(rows)} rows from {len({r.source for r in rows})} sources")
    print(describe(model))
    print(f"fit on all rows: {_stats(errors(model, rows))}")
    loso = leave_one_source_out(rows)
    for source, errs in loso.items():
        print(f"  left out {source} ({len(errs)} rows): {_stats(errs)}")
    print(f"leave-one-source-out, all rows: {_stats([e for errs in loso.values() for e in errs])}")


if __name__ == "__main__":
    main()
