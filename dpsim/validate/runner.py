"""Launch validation ranks (emulated hosts or local processes) and predict their step with ``dpsim predict``.

:func:`run_ranks` starts one :mod:`dpsim.validate.worker` per rank, each in its own
testbed host when a :class:`~dpsim.validate.testbed.Testbed` is given, with a deadline: a
rank that dies or hangs ends the run with a clear message and every rank is killed
(ranks also die with this process: ``PR_SET_PDEATHSIG``). :func:`profile_from_run` turns
the run's measurement phases into a calibration profile, exactly what ``dpsim calibrate``
would have written on that cluster, and :func:`predict_run` predicts the DDP phase with
``dpsim predict`` and that profile: validate checks predict's own path.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dpsim.errors import DpsimError
from dpsim.predict import PredictConfig, predict
from dpsim.processes import die_with_parent, reap_dead_owner_dirs
from dpsim.profile.io import save_profile
from dpsim.profile.match import model_fingerprint
from dpsim.profile.schema import (
    ComputeCalibration,
    LayerTiming,
    Measurement,
    ModelStep,
    Profile,
    after_comm_fields,
    make_op_calibration,
    ranks_share_cores,
)
from dpsim.stats import mean_confidence_interval
from dpsim.wording import count
from dpsim.workload.spec import ModelSpec


class ValidationError(DpsimError):
    """A validation run failed (a rank died, hung, or produced no result)."""


class RankCrashed(ValidationError):
    """A rank was ended by a signal it did not get from us (gloo's C++ side aborting, the kernel's
    OOM killer): the machine or the runtime failed the run, which says nothing about the model."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


TMP_PREFIX = "dpsim-validate-"
"""Temporary directories are ``<tmp>/dpsim-validate-<pid>-<random>``."""


def reap_stale_tmpdirs(tmp: str | None = None) -> list[Path]:
    """Remove the temporary directories of validate runs whose process is gone (killed by SIGKILL)."""
    return reap_dead_owner_dirs(TMP_PREFIX, tmp)


def run_ranks(*, world_size: int, model: str, micro_batch: int, bucket_cap_mb: float | None,
              steps: int = 20, warmup: int = 5, testbed=None, timeout_s: float = 600.0,
              input_shape: str | None = None, optimizer: str = "adamw", layers: list | None = None,
              hosts: list[int] | None = None, ddp_only: bool = False) -> dict:
    """Run one validation (all phases) and return rank 0's JSON document.

    ``model`` is a resolved reference (:func:`dpsim.validate.models.resolve`); ``layers`` the
    traced model's layers, ``[[name, [parameter names]], ...]``, for the per-layer split.
    ``hosts``: the testbed hosts of the ranks, in rank order (default: hosts 0..world_size-1);
    ``ddp_only``: the DDP steps only (the worker's ``--ddp-only``).
    """
    hosts = list(range(world_size)) if hosts is None else list(hosts)
    if len(hosts) != world_size:
        raise ValidationError(f"validate: {count(len(hosts), 'host')} for {count(world_size, 'rank')}")
    reap_stale_tmpdirs()
    with tempfile.TemporaryDirectory(prefix=f"{TMP_PREFIX}{os.getpid()}-") as tmp:
        out = str(Path(tmp) / "run.json")
        layers_path = None
        if layers is not None:
            layers_path = str(Path(tmp) / "layers.json")
            Path(layers_path).write_text(json.dumps(layers))
        if testbed is not None:
            master, port = testbed.host_ip(hosts[0]), 29500 + (os.getpid() % 1000)
        else:
            master, port = "127.0.0.1", _free_port()
        procs = []
        for rank in range(world_size):
            # torchrun's facts: one rank per emulated host, or every rank on this one
            env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world_size), MASTER_ADDR=master,
                       MASTER_PORT=str(port), OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1",
                       LOCAL_RANK="0" if testbed is not None else str(rank),
                       LOCAL_WORLD_SIZE="1" if testbed is not None else str(world_size),
                       GROUP_RANK=str(rank) if testbed is not None else "0")
            if testbed is not None:
                env["GLOO_SOCKET_IFNAME"] = "eth0"
            if rank:
                env.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")  # one copy of gloo's warnings
            argv = [sys.executable, "-m", "dpsim.validate.worker", "--model", model,
                    "--micro-batch", str(micro_batch), "--steps", str(steps), "--warmup", str(warmup),
                    "--out", out, "--timeout-s", str(max(30.0, timeout_s / 2)), "--optimizer", optimizer]
            if bucket_cap_mb is not None:
                argv += ["--bucket-cap-mb", str(bucket_cap_mb)]
            if input_shape is not None:
                argv += ["--input-shape", input_shape]
            if layers_path is not None:
                argv += ["--layers", layers_path]
            if ddp_only:
                argv.append("--ddp-only")
            if testbed is not None:
                argv = testbed.command(hosts[rank], argv)
            procs.append(subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                          text=True, preexec_fn=die_with_parent))
        deadline = time.monotonic() + timeout_s
        failed = None
        try:
            while any(p.poll() is None for p in procs):
                for rank, p in enumerate(procs):
                    if p.poll() not in (None, 0) and failed is None:
                        failed = (rank, p.returncode)
                if failed or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
        finally:
            killed = set()
            for rank, p in enumerate(procs):
                if p.poll() is None:
                    p.kill()
                    killed.add(rank)
            logs = [p.communicate()[0] for p in procs]  # also reaps every rank: no zombie is left
        if failed is None:  # a rank that failed between the last poll and the kill; not one we killed
            failed = next(((r, p.returncode) for r, p in enumerate(procs) if p.returncode != 0 and r not in killed),
                          None)
        if failed is not None:
            rank, code = failed
            tail = " | ".join(logs[rank].strip().splitlines()[-6:])
            error = RankCrashed if code < 0 else ValidationError
            raise error(f"validate: rank {rank} exited with status {code}: {tail}")
        if any(p.returncode != 0 for p in procs) or not Path(out).exists():
            raise ValidationError(f"validate: ranks did not finish within {timeout_s:.0f} s (hung rank?)")
        return json.loads(Path(out).read_text())


def _measurement(size_bytes: float, times_s: list[float]) -> Measurement:
    xs = sorted(times_s)
    q = statistics.quantiles(xs, n=4, method="inclusive") if len(xs) >= 2 else [xs[0]] * 3
    mean, lo, hi = mean_confidence_interval(xs)
    return Measurement(size_bytes=float(size_bytes), time_s=statistics.median(xs), min_s=xs[0], max_s=xs[-1],
                       q1_s=q[0], q3_s=q[2], repeats=len(xs), mean_s=mean, ci_low_s=max(0.0, lo), ci_high_s=hi)


def _cv(values: list[float]) -> float | None:
    if len(values) < 2 or statistics.fmean(values) <= 0:
        return None
    return statistics.stdev(values) / statistics.fmean(values)


def profile_from_run(run: dict, model: ModelSpec, *, name: str = "validate") -> Profile:
    """The calibration profile of a validation run's measurement phases (never its DDP steps):
    what ``dpsim calibrate --ops all_reduce --model ...`` would have written on that cluster."""
    n = int(run["world_size"])
    rpn = max(1, int(run.get("ranks_per_node") or 1))
    link_class = "intra_node" if rpn >= n else "inter_node"
    n_nodes = 1 if link_class == "intra_node" else n // rpn
    ops, link_classes = {}, {}
    if n >= 2:
        meas = [_measurement(c["size_bytes"], c["times_s"]) for c in run["collectives"]]
        ops[link_class, "all_reduce"] = make_op_calibration("all_reduce", link_class, n, meas)
        link_classes[link_class] = {"n_ranks": n, "n_nodes": n_nodes}
    comp, ov = run["compute"], run["overlap"]
    interval = comp.get("interval") or {}
    step = ModelStep(
        model=run["model"], micro_batch=int(run["micro_batch"]), dtype="float32", forward_s=comp["forward_s"],
        backward_s=comp["backward_s"],
        layers=tuple(LayerTiming(name=l["name"], forward_s=l["forward_s"], backward_s=l["backward_s"])
                     for l in comp.get("layer_times", [])),
        layers_traced="layer_times" in comp, structure_hash=model_fingerprint(model),
        forward_flops_per_sample=model.forward_flops_per_sample, optimizer=run["step"]["optimizer"],
        optimizer_s=comp["optimizer_s"], loss=run["step"]["loss"], step_time_cv=_cv(comp["own_step_times_s"]),
        step_time_mean_s=interval.get("mean_s"), step_time_ci_low_s=interval.get("ci_low_s"),
        step_time_ci_high_s=interval.get("ci_high_s"), repeats=comp.get("iterations"), threads=run.get("threads"),
        **after_comm_fields(run.get("after_comm")))
    compute = ComputeCalibration(
        device="CPU (dpsim validate)", matmul_flops_per_s={"float32": float(comp["matmul_flops_per_s"])},
        memory_bandwidth_bytes_per_s=comp["copy_bytes_per_s"], overlap_slowdown=ov["slowdown"],
        comm_slowdown=ov["comm_slowdown"], model_step=step)
    return Profile(
        name=name, description="measured by dpsim validate before its DDP run", method="torch.distributed",
        sources=("dpsim validate's measurement phases",),
        environment={"backend": "gloo", "device_type": "cpu", "world_size": n, "hosts": n_nodes,
                     "ranks_per_node": [rpn] * n_nodes, "threads_per_rank": run.get("threads")},
        link_classes=link_classes, ops=ops, compute=compute)


def predict_run(run: dict, model: ModelSpec, *, reference: str, input_shape: str | None = None,
                optimizer: str = "adamw") -> dict:
    """Predict the DDP phase of ``run`` with ``dpsim predict`` and :func:`profile_from_run`'s profile.

    ``reference``: the model as predict takes it (:func:`dpsim.validate.models.predict_reference`).
    """
    profile = profile_from_run(run, model)
    n = int(run["world_size"])
    with tempfile.TemporaryDirectory(prefix=f"dpsim-validate-{os.getpid()}-") as tmp:
        path = save_profile(profile, Path(tmp) / "profile.json")
        config = PredictConfig(gpus=n, gpus_per_node=min(n, max(1, int(run.get("ranks_per_node") or 1))),
                               link="ethernet", model=reference, micro_batch=int(run["micro_batch"]),
                               precision="fp32", optimizer=optimizer, bucket_cap_mb=run["bucket_cap_mb"],
                               overlap_slowdown=profile.compute.overlap_slowdown, calibration=str(path),
                               input_shape=input_shape, steps=5)
        p = predict(config)
    s = p.simulation.steps[-1]
    after = p.provenance.after_comm if p.provenance is not None else None
    # p.step_time_s, not the played step's: it includes what predict charges beyond the
    # engine (the step computed right after waiting on the network, when measured).
    return {"step_time_s": p.step_time_s, "compute_s": p.compute_s, "comm_s": s.comm_s,
            "after_comm_s": after.charged_s if after is not None else 0.0,
            "forward_s": s.forward_s, "backward_and_wait_s": s.step_time_s - s.forward_s - s.optimizer_s,
            "optimizer_s": s.optimizer_s, "exposed_comm_s": s.exposed_comm_s, "n_buckets": p.n_buckets,
            "overlap_slowdown": profile.compute.overlap_slowdown, "comm_slowdown": profile.compute.comm_slowdown,
            "provenance": p.provenance.to_dict() if p.provenance is not None else None,
            **({"after_comm_not_charged": why} if (why := ranks_share_cores(run.get("after_comm"))) else {})}


def measured_summary(run: dict) -> dict:
    """Median, p10 and p90 of rank 0's steady-state step times, and ``speed_drift``: how much
    slower (positive) the machine ran the measured step after the DDP steps than before them
    (:func:`speed_drift`)."""
    xs = sorted(run["ddp"]["step_times_s"])
    q = lambda f: xs[min(len(xs) - 1, max(0, int(round(f * (len(xs) - 1)))))]
    return {"median_s": statistics.median(xs), "p10_s": q(0.1), "p90_s": q(0.9), "n": len(xs),
            "speed_drift": speed_drift(run), "training_compute_drift": training_compute_drift(run),
            "network_drift": network_drift(run)}


def speed_drift(run: dict) -> float | None:
    """Median of the control step times (phase 5, after the DDP steps) over the median of the
    measured ones (phase 2, before), less one; ``None`` for runs recorded without the control.

    Neither is a DDP step, so a drift is the machine's doing (another job, clocks), never the
    model's: a validation judged on a run whose machine changed speed judges the machine.
    """
    after = (run.get("compute_after") or {}).get("step_times_s")
    before = run["compute"].get("step_times_s")
    if not after or not before:
        return None
    return statistics.median(after) / statistics.median(before) - 1.0


def training_compute_drift(run: dict) -> float | None:
    """The DDP steps' forward and optimizer step (medians) over the measured ones (phase 2), less one;
    ``None`` for runs recorded without them.

    :func:`speed_drift` compares the machine before and after the DDP steps; a machine slowed only
    while they ran (another job's burst, a neighbour's steal) passes it. These two parts of every
    DDP step are compute with no collective running (DDP waits on its last bucket inside backward),
    so they time the machine *during* the steps; the backward, where communication overlaps and
    the model's overlap and interference terms act, is left out, so the model's error cannot show here.
    """
    ddp, comp = run.get("ddp") or {}, run.get("compute") or {}
    keys = ("forward_s", "optimizer_s")
    if not all(isinstance(ddp.get(k), (int, float)) and isinstance(comp.get(k), (int, float)) for k in keys):
        return None
    before = comp["forward_s"] + comp["optimizer_s"]
    if before <= 0:
        return None
    return (ddp["forward_s"] + ddp["optimizer_s"]) / before - 1.0


def network_drift(run: dict) -> float | None:
    """Phase 1's largest all-reduce timed again after the DDP steps (``collectives_after``, median)
    over its phase-1 median, less one; ``None`` for runs recorded without it (or one rank).

    The network's :func:`speed_drift`: the emulated NICs' shaping and the loopback traffic are the
    kernel's work on the same cores, so a busy host slows the collectives too, and a
    communication-bound case then measures the host. Neither time is a DDP step.
    """
    after = run.get("collectives_after")
    if not after or not after.get("times_s"):
        return None
    same = [c for c in run.get("collectives") or [] if c["size_bytes"] == after["size_bytes"] and c["times_s"]]
    if not same:
        return None
    return statistics.median(after["times_s"]) / statistics.median(same[-1]["times_s"]) - 1.0
