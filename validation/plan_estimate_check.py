"""How far ``dpsim plan``'s closed-form estimate is from the simulation it prunes for:
``python validation/plan_estimate_check.py``.

For each job (model, GPU count, global batch, on the ``infiniband`` preset with H100s and
``bf16-params``, as issue 28's ``plan`` commands), every layout of the planner's default search
is estimated (:meth:`dpsim.plan.planner.Planner.estimate`); of those that fit, the ``--best``
fastest estimates and ``--sample`` more drawn at random (seeded) are simulated by ``predict``
(the pipeline engine); with ``--every N`` every N-th fitting layout instead (``--every 1 --only deepseek-v3
--gpus 16384``: the whole search, ~4 min on a 2-core machine). Printed: per job and over all of them, the
distribution of estimate / simulation (below 1: the closed form is optimistic), and the layouts furthest off.

With ``--data-parallel``, data parallelism alone (:data:`DATA_PARALLEL_JOBS`: 1.5B to 13B models on 8 to 512
GPUs of seven presets, with and without full recomputation), every strategy and HSDP shard group that fits.

With ``--exhaustive``, small searches (:data:`EXHAUSTIVE_JOBS`: dense models on 64 and 256 GPUs, mixtures
of experts with and without dense first blocks) are simulated layout by layout, every one that fits
(:func:`exhaustive`): the ratio over all of them, and whether ``plan``'s pruned ranking
(:func:`dpsim.plan.planner.plan_layouts`, the verification bounded by :data:`ESTIMATE_BOUND` alone)
puts the truly fastest layout first (``tests/test_plan_prune.py`` asserts it).

Nothing here is a measurement of hardware: it checks one dpsim model (the closed form)
against another (the step-by-step simulation), whose error against published runs is
measured elsewhere (``accuracy_large_models.py``). The bound the planner uses to decide what
to simulate (:data:`dpsim.plan.planner.ESTIMATE_BOUND`) is checked against this distribution.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dpsim.errors import DpsimError  # noqa: E402
from dpsim.plan.planner import Planner  # noqa: E402
from dpsim.predict.config import PredictConfig  # noqa: E402
from dpsim.predict.resolve import resolve  # noqa: E402
from dpsim.predict.run import predict  # noqa: E402

JOBS = (
    ("llama-3-70b", 1024, 1024),
    ("llama-3-70b", 4096, 2048),
    ("llama-3-405b", 2048, 2048),
    ("llama-3-405b", 16384, 2048),
    ("mixtral-8x7b", 1024, 1024),
    ("deepseek-v3", 4096, 2048),
    ("deepseek-v3", 16384, 2048),
)
"""(model, GPUs, global batch): dense and mixture-of-experts models, 1k to 16k GPUs."""


EXHAUSTIVE_JOBS = (
    # Stage 0 holds the embedding, the last stage the output layer and loss; 32 and 80 blocks split
    # unevenly over interleaved chunks that do not divide them.
    ("llama-3-8b", 64, 256, dict(tps=(2, 4, 8), micro_batches=(1,), recomputes=("off", "full"))),
    ("llama-3-70b", 256, 256, dict(tps=(4, 8), micro_batches=(1,), recomputes=("full",), strategies=("zero1",))),
    # Mixtures of experts: every expert-parallel size; DeepSeek-V2's first block is dense (on stage 0).
    ("mixtral-8x7b", 64, 256, dict(tps=(1, 2), micro_batches=(1,), recomputes=("full",), strategies=("zero1",))),
    ("deepseek-v2", 256, 512, dict(tps=(4,), pps=(2, 4, 8), micro_batches=(1,), recomputes=("full",),
                                   strategies=("zero1",))),
)
"""(model, GPUs, global batch, the search's restrictions): small enough to simulate every layout
that fits (~70-200 each)."""


DATA_PARALLEL_JOBS = (
    ("gpt2-xl", "infiniband", 128, 512, 2, "off"),
    ("gpt2-xl", "ethernet", 64, 512, 2, "off"),
    ("gpt2-xl", "infiniband", 256, 2048, 4, "full"),
    ("gpt2-large", "ethernet", 128, 1024, 4, "full"),
    ("gpt2-xl", "pcie", 8, 64, 2, "off"),
    ("gpt2-large", "nvlink", 8, 64, 4, "full"),
    ("gpt2-xl", "aws-p5", 64, 512, 4, "off"),
    ("gpt2-large", "dgx-a100", 32, 256, 8, "off"),
    ("llama-2-7b", "infiniband", 64, 256, 1, "off"),
    ("llama-2-7b", "infiniband", 64, 256, 2, "full"),
    ("llama-2-7b", "infiniband", 64, 1024, 1, "off"),
    ("llama-2-7b", "ethernet", 256, 512, 1, "off"),
    ("llama-2-7b", "ethernet", 256, 1024, 2, "full"),
    ("llama-2-7b", "ethernet", 128, 1024, 1, "full"),
    ("llama-2-7b", "dgx-b200", 256, 1024, 2, "full"),
    ("llama-3-8b", "infiniband", 128, 512, 1, "full"),
    ("llama-3-8b", "infiniband", 512, 1024, 1, "full"),
    ("llama-2-13b", "infiniband", 512, 1024, 1, "off"),
    ("llama-2-13b", "infiniband", 512, 1024, 2, "full"),
    ("llama-2-13b", "ethernet", 128, 512, 1, "full"),
    ("llama-2-13b", "ethernet", 256, 512, 1, "full"),
)
"""(model, preset, GPUs, global batch, micro-batch, recomputation) of the ``--data-parallel`` check: data
parallelism alone (``tp = pp = 1``), every strategy ``plan`` searches there (``fsdp`` too, and ``fsdp-hybrid``
over each shard group), ``bf16-mixed``; the layouts whose state does not fit are left out (``ddp`` fits only
the GPT-2 ones)."""
DATA_PARALLEL_STRATEGIES = ("ddp", "zero1", "zero3", "fsdp", "fsdp-hybrid")


def data_parallel(model: str, link: str, gpus: int, global_batch: int, micro_batch: int, recompute: str
                  ) -> list[dict]:
    """Rows as :func:`check_job`'s for every data-parallel-only layout of one :data:`DATA_PARALLEL_JOBS` job."""
    base = resolve(PredictConfig(model=model, link=link, precision="bf16-mixed", micro_batch=micro_batch)).config
    planner = Planner(base)
    cands, _ = planner.candidates(gpus, global_batch=global_batch, tps=[1], pps=[1], micro_batches=[micro_batch],
                                  recomputes=[recompute], strategies=DATA_PARALLEL_STRATEGIES)
    rows = []
    for e in (planner.estimate(c, global_batch=global_batch) for c in cands):
        if not e.fits:
            continue
        sim = predict(e.candidate.config(base)).step_time_s
        rows.append({"model": f"{model} {link}", "gpus": gpus, "flags": e.candidate.flags(), "top": False,
                     "estimate_s": e.step_time_s, "simulated_s": sim, "ratio": e.step_time_s / sim})
    return rows


def job_base(model: str) -> PredictConfig:
    """The job every check here searches: ``model`` on the ``infiniband`` preset, ``bf16-params``."""
    return resolve(PredictConfig(model=model, link="infiniband", precision="bf16-params", micro_batch=1)).config


def _simulate(configs: list) -> list[tuple[float, bool] | None]:
    """Each configuration's simulated step time and whether its memory fits (None: dpsim refuses it)."""
    out = []
    for config in configs:
        try:
            pred = predict(config)
        except DpsimError:
            out.append(None)
            continue
        out.append((pred.step_time_s, pred.memory.fits))
    return out


EXHAUSTIVE_CHUNKS = 8
"""Chunks the layouts of an exhaustive search are simulated in by forked workers (dealt out in turn:
neighbouring layouts cost alike, so each chunk holds a share of the costly ones)."""


def _simulations_in_workers(configs: list):
    """Futures of :func:`_simulate` over chunks of ``configs`` (as :data:`EXHAUSTIVE_CHUNKS`), computed
    by forked worker processes while the caller runs ``plan`` on the same search; None where the
    platform cannot fork or there is one core. Each layout's simulation is a whole ``predict``,
    independent of the others, so they are shared out; on CI's two cores ``tests/test_plan_prune.py``
    (four searches, 70-400 layouts each) left a core idle."""
    import multiprocessing
    import os
    from concurrent.futures import ProcessPoolExecutor

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if cores < 2 or "fork" not in multiprocessing.get_all_start_methods() or len(configs) < 2:
        return None
    pool = ProcessPoolExecutor(max_workers=min(cores, len(configs)), mp_context=multiprocessing.get_context("fork"))
    chunks = [pool.submit(_simulate, configs[k::EXHAUSTIVE_CHUNKS]) for k in range(min(EXHAUSTIVE_CHUNKS, len(configs)))]
    pool.shutdown(wait=False)
    return chunks


def _gathered(chunks: list, n: int) -> list[tuple[float, bool] | None]:
    """The chunks' simulations (:func:`_simulations_in_workers`) back in the order of the ``n`` configurations."""
    sims: list = [None] * n
    for k, chunk in enumerate(chunks):
        sims[k::EXHAUSTIVE_CHUNKS] = chunk.result()
    return sims


def exhaustive(model: str, gpus: int, global_batch: int, search: dict) -> tuple[list[dict], object]:
    """Every layout of the search that fits, estimated and simulated: rows as :func:`check_job`'s
    (``top`` False) with ``candidate``, and ``plan``'s own result on the same search (the
    verification bounded by :data:`ESTIMATE_BOUND` alone: no count or time limit). The layouts are
    simulated by forked workers while ``plan`` runs here (:func:`_simulations_in_workers`); the
    figures are the same either way."""
    from dpsim.plan.planner import MAX_VERIFY, plan_layouts

    base = job_base(model)
    planner = Planner(base)
    cands, _ = planner.candidates(gpus, global_batch=global_batch, **search)
    fitting = [e for e in (planner.estimate(c, global_batch=global_batch) for c in cands) if e.fits]
    configs = [e.candidate.config(base) for e in fitting]
    chunks = _simulations_in_workers(configs)

    if chunks is None:  # the simulations first, as they ran before the workers (plan's order unchanged)
        sims = _simulate(configs)
    result = plan_layouts(base, gpus=[gpus], global_batch=global_batch, verify=MAX_VERIFY, verify_seconds=None,
                          top=10_000, **search)
    if chunks is not None:
        sims = _gathered(chunks, len(configs))
    rows = []
    for e, sim in zip(fitting, sims):
        if sim is None or not sim[1]:
            continue
        step_s = sim[0]
        rows.append({"model": model, "gpus": gpus, "flags": e.candidate.flags(), "top": False,
                     "candidate": e.candidate, "estimate_s": e.step_time_s, "simulated_s": step_s,
                     "ratio": e.step_time_s / step_s})
    return rows, result


def quantiles(values: list[float]) -> dict:
    s = sorted(values)
    q = statistics.quantiles(s, n=20, method="inclusive") if len(s) > 1 else s * 19
    return {"n": len(s), "min": s[0], "p5": q[0], "median": statistics.median(s), "p95": q[-1], "max": s[-1]}


def check_job(model: str, gpus: int, global_batch: int, *, best: int, sample: int, seed: int,
              every: int | None = None, schedules=None) -> list[dict]:
    """Rows (estimate, simulation, their ratio) of one :data:`JOBS` job: the ``best`` fastest estimates and
    ``sample`` more drawn at random, or with ``every`` each ``every``-th fitting layout in the order of their
    flags (1: the whole search; a draw is not the search: DeepSeek-V3 on 16,384 GPUs read 0.930 to 1.065 in
    its draw of 24 and 0.903 to 1.301 over all 2,163 layouts at the same commit); ``schedules``: the search's
    (default: plan's)."""
    base = job_base(model)
    planner = Planner(base)
    cands, _ = planner.candidates(gpus, global_batch=global_batch, schedules=schedules)
    t0 = time.perf_counter()
    fitting = [e for e in (planner.estimate(c, global_batch=global_batch) for c in cands) if e.fits]
    t_est = time.perf_counter() - t0
    fitting.sort(key=lambda e: e.step_time_s)
    # Drawn from the rest in a fixed order (their flags), so that a change of the estimate changes
    # which layouts are the fastest estimates but not which are drawn.
    rest = sorted(fitting[best:], key=lambda e: e.candidate.flags())
    chosen = [(e, True) for e in fitting[:best]] + \
        [(e, False) for e in random.Random(seed).sample(rest, min(sample, len(rest)))]
    if every:
        fastest = {id(e) for e in fitting[:best]}
        chosen = [(e, id(e) in fastest) for e in sorted(fitting, key=lambda e: e.candidate.flags())[::every]]
    rows = []
    t0 = time.perf_counter()
    for e, top in chosen:
        try:
            sim = predict(e.candidate.config(base)).step_time_s
        except DpsimError as exc:
            print(f"  {e.candidate.flags()}: {exc}", file=sys.stderr)
            continue
        rows.append({"model": model, "gpus": gpus, "flags": e.candidate.flags(), "top": top,
                     "schedule": e.candidate.schedule,
                     "estimate_s": e.step_time_s, "simulated_s": sim, "ratio": e.step_time_s / sim})
    print(f"{model} on {gpus:,} GPUs (global batch {global_batch}): {len(cands):,} layouts, {len(fitting):,} fit, "
          f"estimated in {t_est:.2f} s; {len(rows)} simulated in {time.perf_counter() - t0:.1f} s")
    return rows


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--best", type=int, default=8, help="fastest estimates simulated per job")
    ap.add_argument("--sample", type=int, default=16, help="more layouts drawn at random per job")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--only", help="comma-separated models")
    ap.add_argument("--gpus", help="comma-separated GPU counts of JOBS (default: all)")
    ap.add_argument("--every", type=int, help="simulate every N-th fitting layout of each job (1: all of them) "
                    "instead of the fastest estimates and a draw")
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--schedules", help="comma-separated schedules searched (default: plan's; a dense model's "
                    "default leaves DualPipe out)")
    ap.add_argument("--job", action="append", help="MODEL:GPUS:GLOBAL_BATCH instead of JOBS (repeatable)")
    ap.add_argument("--exhaustive", action="store_true",
                    help="simulate every fitting layout of the small searches (EXHAUSTIVE_JOBS) and check plan's first row")
    ap.add_argument("--data-parallel", action="store_true",
                    help="data parallelism alone: every strategy on each of DATA_PARALLEL_JOBS")
    args = ap.parse_args(argv)
    only = set(args.only.split(",")) if args.only else None
    rows = []
    if args.data_parallel:
        for job in DATA_PARALLEL_JOBS:
            if not only or job[0] in only:
                rows += data_parallel(*job)
    if args.exhaustive:
        for model, gpus, gb, search in EXHAUSTIVE_JOBS:
            if only and model not in only:
                continue
            t0 = time.perf_counter()
            job_rows, result = exhaustive(model, gpus, gb, search)
            best = min(job_rows, key=lambda r: r["simulated_s"])
            chosen = result.best
            print(f"{model} on {gpus:,} GPUs (global batch {gb}): {len(job_rows)} layouts simulated in "
                  f"{time.perf_counter() - t0:.1f} s; fastest {best['flags']} {best['simulated_s']:.4f} s; "
                  f"plan simulated {result.verification['simulated']}, first row {chosen.candidate.flags()} "
                  f"{chosen.step_time_s:.4f} s ({'the fastest' if chosen.candidate == best['candidate'] else 'NOT the fastest'})")
            for r in job_rows:
                del r["candidate"]
            rows += job_rows
    gpu_counts = {int(g) for g in args.gpus.split(",")} if args.gpus else None
    jobs = [(j.split(":")[0], int(j.split(":")[1]), int(j.split(":")[2])) for j in args.job] if args.job else JOBS
    schedules = tuple(args.schedules.split(",")) if args.schedules else None
    for model, gpus, gb in () if args.exhaustive or args.data_parallel else jobs:
        if (only and model not in only) or (gpu_counts and gpus not in gpu_counts):
            continue
        rows += check_job(model, gpus, gb, best=args.best, sample=args.sample, seed=args.seed, every=args.every,
                          schedules=schedules)
    print()
    print(f"{'estimate / simulation':32s} {'n':>4s} {'min':>6s} {'p5':>6s} {'median':>6s} {'p95':>6s} {'max':>6s} "
          f"{'median |e/s-1|':>14s} {'worst':>6s}")
    groups = {}
    for r in rows:
        groups.setdefault(f"{r['model']} @ {r['gpus']}", []).append(r["ratio"])
    for r in rows:
        if "schedule" in r:
            groups.setdefault(f"  {r['schedule']}", []).append(r["ratio"])
    groups["all"] = [r["ratio"] for r in rows]
    groups["all, fastest estimates"] = [r["ratio"] for r in rows if r["top"]]
    for name, ratios in groups.items():
        if ratios:
            q = quantiles(ratios)
            off = [abs(r - 1) for r in ratios]
            print(f"{name:32s} {q['n']:4d} {q['min']:6.3f} {q['p5']:6.3f} {q['median']:6.3f} {q['p95']:6.3f} "
                  f"{q['max']:6.3f} {statistics.median(off):14.3f} {max(off):6.3f}")
    print("\nfurthest off:")
    for r in sorted(rows, key=lambda r: abs(r["ratio"] - 1), reverse=True)[:8]:
        print(f"  {r['ratio']:.3f}  {r['model']} {r['flags']}  ({r['estimate_s']:.3f} s vs {r['simulated_s']:.3f} s)")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
