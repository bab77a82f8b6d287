"""Turn measurements into a :class:`~dpsim.calibrate.profile.Profile`.

Two ways in: parsed nccl-tests logs (:func:`profile_from_nccl_tests`) and the raw
results of dpsim's own torch harness (:func:`profile_from_results`). Both fit every
(link class, op) sweep with :func:`~dpsim.calibrate.fit.fit_alpha_beta` and list a
warning for every poor fit.
"""

from __future__ import annotations

import datetime as _dt
import os
import statistics
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from dpsim.calibrate.nccl_tests import NcclTestsLog, parse_nccl_tests
from dpsim.errors import ProfileError
from dpsim.limits import MAX_OVERLAP_SLOWDOWN, MAX_PROFILE_SLOWDOWN
from dpsim.profile.calibrated import gpu_models
from dpsim.profile.op_rates import from_results
from dpsim.profile.schema import (
    LINK_CLASSES,
    PROFILE_OPS,
    ComputeCalibration,
    LayerTiming,
    Measurement,
    ModelStep,
    OpCalibration,
    Profile,
    after_comm_fields,
    fit_warnings,
    make_op_calibration,
    ranks_share_cores,
)
from dpsim.stats import mean_confidence_interval
from dpsim.wording import count


def utc_now() -> str:
    """Current UTC time, ISO-8601 with a Z."""
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def profile_from_nccl_tests(
    paths: Iterable[str | Path], *, name: str | None = None, description: str = "",
    ranks_per_node: int | None = None, sources: Iterable[str] = (), created_utc: str | None = None,
) -> Profile:
    """Parse nccl-tests logs and fit them into a profile.

    Logs of the same op and link class (one node: ``intra_node``; several:
    ``inter_node``) are merged; every log of one link class must have the same number
    of ranks (a profile holds one communicator size per link class).
    """
    paths = [str(p) for p in paths]
    if not paths:
        raise ProfileError("--from-nccl-tests: no log files given")
    seen: dict[str, str] = {}
    for p in paths:
        # One log given twice was fitted with every size counted twice (status 0): refused as a list that repeats a
        # value is elsewhere (sweep's gpus: [8, 8], --scaling-gpus 8,8).
        key = os.path.realpath(p)
        if key in seen:
            also = "" if seen[key] == p else f" (as {seen[key]!r} too)"
            raise ProfileError(f"--from-nccl-tests: {p!r} is given twice{also}; give each log once")
        seen[key] = p
    logs: list[NcclTestsLog] = [parse_nccl_tests(p, ranks_per_node=ranks_per_node) for p in paths]
    groups: dict[tuple[str, str], list[NcclTestsLog]] = {}
    classes: dict[str, tuple[int, int, str]] = {}
    for log in logs:
        lc = "intra_node" if log.n_nodes == 1 else "inter_node"
        n_ranks = log.n_ranks
        if lc in classes and classes[lc][:2] != (n_ranks, log.n_nodes) and log.op != "sendrecv":
            n0, nodes0, first = classes[lc]
            raise ProfileError(
                f"--from-nccl-tests: {log.path}: {count(n_ranks, 'rank')} on {count(log.n_nodes, 'node')}, but {first} "
                f"measured {lc} on {count(n0, 'rank')} on {count(nodes0, 'node')}; a profile holds one communicator size "
                "per link class (make one profile per size)")
        if log.op != "sendrecv":
            classes.setdefault(lc, (n_ranks, log.n_nodes, log.path))
        groups.setdefault((lc, log.op), []).append(log)
    ops: dict[tuple[str, str], OpCalibration] = {}
    link_classes: dict[str, dict[str, Any]] = {}
    check_one_gpu_model(logs)
    for (lc, op), group in groups.items():
        if lc not in classes:  # only sendrecv logs for this class
            classes[lc] = (group[0].n_ranks, group[0].n_nodes, group[0].path)
        n0, nodes0, _ = classes[lc]
        link_classes[lc] = {"n_ranks": n0, "n_nodes": nodes0}
        meas = [m for log in group for m in log.measurements]
        cites = tuple(dict.fromkeys(s for log in group for s in log.sources)) or tuple(
            Path(log.path).name for log in group)
        ops[lc, op] = make_op_calibration(op, lc, 2 if op == "sendrecv" else n0, meas, sources=cites,
                                          what=f"{', '.join(log.path for log in group)}")
    devices = sorted({d for log in logs for d in log.device_names})
    hosts = max(log.n_nodes for log in logs)
    environment = {
        "backend": "nccl",
        "backend_version": None,
        "tool": "nccl-tests",
        "device_names": devices,
        "hosts": hosts,
        "world_size": max(log.n_ranks for log in logs),
        "logs": [{"path": Path(log.path).name, "op": log.op, "n_ranks": log.n_ranks, "n_nodes": log.n_nodes,
                  "dtype": log.dtype, "header": log.header} for log in logs],
    }
    all_sources = tuple(dict.fromkeys(list(sources) + [s for log in logs for s in log.sources]))
    return Profile(
        name=name or Path(paths[0]).stem,
        description=description or f"fitted from {len(logs)} nccl-tests log(s)",
        created_utc=created_utc or utc_now(),
        method="nccl-tests",
        sources=all_sources,
        environment=environment,
        link_classes={lc: link_classes[lc] for lc in LINK_CLASSES if lc in link_classes},
        ops=ops,
        compute=None,
        warnings=tuple(fit_warnings(ops)),
    )


def check_one_gpu_model(logs: Iterable[NcclTestsLog]) -> None:
    """Refuse logs of one profile run on different GPU models: a profile describes one system. Checked per op and
    link class alone, an A100 node's intra_node log and an H100 pair's inter_node log made one profile (status 0)."""
    ran_on = [(log, gpu_models(log.device_names)) for log in logs if log.device_names]
    other = next(((log, m) for log, m in ran_on if m != ran_on[0][1]), None)
    if other is not None:
        first, models0 = ran_on[0]
        raise ProfileError(f"--from-nccl-tests: {other[0].path} ran on {', '.join(sorted(other[1]))} "
                           f"({', '.join(other[0].device_names)}), but {first.path} on {', '.join(sorted(models0))} "
                           f"({', '.join(first.device_names)}); a profile describes one system (make one profile "
                           f"per system)")


def summarize(times_s: list[float], size_bytes: float, source: str | None = None) -> Measurement:
    """Median, spread, mean and its 95 % interval of repeated timings of one size."""
    xs = sorted(times_s)
    if not xs:
        raise ProfileError(f"size {size_bytes:.0f} B: no timings")
    q = statistics.quantiles(xs, n=4, method="inclusive") if len(xs) >= 2 else [xs[0]] * 3
    mean, lo, hi = mean_confidence_interval(xs)
    return Measurement(size_bytes=float(size_bytes), time_s=statistics.median(xs), min_s=xs[0], max_s=xs[-1],
                       q1_s=q[0], q3_s=q[2], repeats=len(xs), mean_s=mean, ci_low_s=max(0.0, lo), ci_high_s=hi,
                       source=source)


def coefficient_of_variation(values: Iterable[float]) -> float | None:
    """Sample standard deviation / mean of ``values``; ``None`` with fewer than two or a mean <= 0."""
    xs = [float(v) for v in values]
    if len(xs) < 2:
        return None
    mean = statistics.fmean(xs)
    return statistics.stdev(xs) / mean if mean > 0 else None


def step_time_cv(step_times_s: Iterable[Iterable[float]]) -> float | None:
    """The model step's noise: each rank's CV of its timed step times, the median over ranks."""
    cvs = [cv for cv in map(coefficient_of_variation, step_times_s) if cv is not None]
    return statistics.median(cvs) if cvs else None


def _bounded_slowdown(value: float | None, limit: float, what: str, warnings: list[str]) -> float | None:
    """A measured slowdown, capped where the profile loader (and predict) would refuse it: a
    machine busy enough to slow work a hundredfold measured the load, not the interference."""
    if value is None or value <= limit:
        return value
    warnings.append(f"{what}: measured {100 * value:,.0f} % slower, kept as {100 * limit:,.0f} % (the most a "
                    "profile holds); the machine was too busy to measure the interference")
    return limit


def _fresh_process_steps(per_rank: list[list[float]] | None) -> tuple[float, ...] | None:
    """Each fresh process's median step, the slowest rank's (ranks ran theirs at once)."""
    if not per_rank or len({len(r) for r in per_rank}) != 1 or not per_rank[0]:
        return None
    return tuple(max(times) for times in zip(*per_rank))


def profile_from_results(results: dict, *, name: str, description: str = "",
                         created_utc: str | None = None) -> Profile:
    """Fit the raw results of the torch harness (see :mod:`dpsim.measure.harness`).

    ``results`` has ``environment``, ``collectives`` (``{link_class: {"n_ranks",
    "n_nodes", "ops": {op: [{"size_bytes", "times_s": [...]}, ...]}}}``) and ``compute``
    (its ``model_step`` has ``own_step_times_s``: every rank's own step time of each timed
    repeat, which :func:`step_time_cv` turns into ``ModelStep.step_time_cv``).
    """
    ops: dict[tuple[str, str], OpCalibration] = {}
    link_classes: dict[str, dict[str, Any]] = {}
    for lc, info in results.get("collectives", {}).items():
        if lc not in LINK_CLASSES:
            raise ProfileError(f"results: unknown link class {lc!r}")
        link_classes[lc] = {"n_ranks": int(info["n_ranks"]), "n_nodes": int(info["n_nodes"])}
        for op, rows in info["ops"].items():
            if op not in PROFILE_OPS or not rows:
                continue
            meas = [summarize(r["times_s"], r["size_bytes"]) for r in rows]
            n0 = 2 if op == "sendrecv" else int(info["n_ranks"])
            ops[lc, op] = make_op_calibration(op, lc, n0, meas)
    compute = None
    capped: list[str] = []
    c = results.get("compute")
    if c:
        step = None
        if c.get("model_step"):
            s = c["model_step"]
            interval = s.get("interval") or {}
            if (why := ranks_share_cores(s.get("after_comm"))) is not None:
                capped.append(f"the step right after a wait on the network measured "
                              f"{1e3 * s['after_comm']['extra_s']:+.3g} ms but is not charged: {why}, so it "
                              "times how the scheduler deals the cores out, not the wait")
            layer_rows = s.get("layer_times") or s.get("layers") or []
            # The in-process times hold the step's split; fresh processes (a training run is
            # one) set its level: every time scaled by their ratio.
            k = float(s.get("fresh_process_ratio") or 1.0)
            if k != 1.0:
                s = {**s, **{key: s[key] * k for key in ("forward_s", "backward_s", "optimizer_s")
                             if s.get(key) is not None}}
                interval = {key: (v * k if key.endswith("_s") and v is not None else v) for key, v in interval.items()}
                layer_rows = [{**l, "forward_s": l["forward_s"] * k, "backward_s": l["backward_s"] * k}
                              for l in layer_rows]
            step = ModelStep(model=s["model"], micro_batch=int(s["micro_batch"]), dtype=s["dtype"],
                             forward_s=float(s["forward_s"]), backward_s=float(s["backward_s"]),
                             step_time_cv=step_time_cv(s.get("own_step_times_s", s.get("step_times_s", ()))),
                             layers=tuple(LayerTiming(name=l["name"], forward_s=l["forward_s"],
                                                      backward_s=l["backward_s"]) for l in layer_rows),
                             layers_traced="layer_times" in s,
                             structure_hash=s.get("structure_hash"),
                             forward_flops_per_sample=s.get("forward_flops_per_sample"),
                             optimizer=s.get("optimizer"), optimizer_s=s.get("optimizer_s"), loss=s.get("loss"),
                             step_time_mean_s=interval.get("mean_s"), step_time_ci_low_s=interval.get("ci_low_s"),
                             step_time_ci_high_s=interval.get("ci_high_s"), repeats=s.get("iterations"),
                             threads=s.get("threads"),
                             **after_comm_fields(s.get("after_comm")),
                             fresh_process_ratio=s.get("fresh_process_ratio"),
                             fresh_process_steps_s=_fresh_process_steps(s.get("fresh_process_medians_s")))
        overlap = _bounded_slowdown(c.get("overlap_slowdown"), MAX_OVERLAP_SLOWDOWN, "compute while a collective runs",
                                    capped)
        comm = _bounded_slowdown(c.get("comm_slowdown"), MAX_PROFILE_SLOWDOWN, "all-reduce while compute runs",
                                 capped)
        compute = ComputeCalibration(
            device=c.get("device", "unknown"),
            matmul_flops_per_s={k: float(v) for k, v in c.get("matmul_flops_per_s", {}).items()},
            memory_bandwidth_bytes_per_s=c.get("memory_bandwidth_bytes_per_s"),
            overlap_slowdown=overlap,
            comm_slowdown=comm,
            model_step=step,
            op_rates=from_results(c["op_rates"], c["op_rates"].get("dtype", "float32")) if c.get("op_rates") else None,
            raw={k: c[k] for k in ("matmul", "memcpy", "overlap") if k in c},
        )
    warnings = fit_warnings(ops) + list(results.get("warnings", [])) + capped
    if compute is not None and compute.model_step is not None and (compute.model_step.loss or "").startswith("mean"):
        warnings.append(f"model step timed with a stand-in loss, the {compute.model_step.loss}")
    return Profile(
        name=name,
        description=description or "measured with dpsim calibrate",
        created_utc=created_utc or utc_now(),
        method="torch.distributed",
        sources=(f"dpsim calibrate on {results.get('environment', {}).get('hostnames', ['?'])[0]}",),
        environment=results.get("environment", {}),
        link_classes={lc: link_classes[lc] for lc in LINK_CLASSES if lc in link_classes},
        ops=ops,
        compute=compute,
        warnings=tuple(warnings),
    )
