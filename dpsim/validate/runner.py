"""Launch validation ranks (emulated hosts or local processes) and predict their step.

:func:`run_ranks` starts one :mod:`dpsim.validate.worker` per rank, each in its own
testbed host when a :class:`~dpsim.testbed.Testbed` is given, with a deadline: a rank
that dies or hangs ends the run with a clear message and every rank is killed.
:func:`predict_run` turns the measurement phases of a run into a dpsim prediction of
its DDP phase, with dpsim's own engine, buckets and collective model.
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
from dataclasses import dataclass
from pathlib import Path

from dpsim.collectives.ops import CollectiveResult
from dpsim.engine.simulate import run_program
from dpsim.errors import DpsimError
from dpsim.profile.fit import AlphaBetaFit, fit_alpha_beta
from dpsim.strategies.ddp import ddp_program
from dpsim.workload.buckets import assign_buckets
from dpsim.workload.compute import ComputeProfile, LayerTime
from dpsim.workload.spec import ParamSpec


class ValidationError(DpsimError):
    """A validation run failed (a rank died, hung, or produced no result)."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(*, world_size: int, model: str, micro_batch: int, bucket_cap_mb: float | None,
              steps: int = 20, warmup: int = 5, testbed=None, timeout_s: float = 600.0,
              input_shape: str | None = None) -> dict:
    """Run one validation (all phases) and return rank 0's JSON document."""
    with tempfile.TemporaryDirectory(prefix="dpsim-validate-") as tmp:
        out = str(Path(tmp) / "run.json")
        if testbed is not None:
            master, port = testbed.host_ip(0), 29500 + (os.getpid() % 1000)
        else:
            master, port = "127.0.0.1", _free_port()
        procs = []
        for rank in range(world_size):
            env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world_size), MASTER_ADDR=master,
                       MASTER_PORT=str(port), OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
            if testbed is not None:
                env["GLOO_SOCKET_IFNAME"] = "eth0"
            argv = [sys.executable, "-m", "dpsim.validate.worker", "--model", model,
                    "--micro-batch", str(micro_batch), "--steps", str(steps), "--warmup", str(warmup),
                    "--out", out, "--timeout-s", str(max(30.0, timeout_s / 2))]
            if bucket_cap_mb is not None:
                argv += ["--bucket-cap-mb", str(bucket_cap_mb)]
            if input_shape is not None:
                argv += ["--input-shape", input_shape]
            if testbed is not None:
                argv = testbed.command(rank, argv)
            procs.append(subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                          text=True))
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
            for p in procs:
                if p.poll() is None:
                    p.kill()
            logs = [p.communicate()[0] for p in procs]
        if failed is None and any(p.returncode != 0 for p in procs):
            failed = next((r, p.returncode) for r, p in enumerate(procs) if p.returncode != 0)
        if failed is not None:
            rank, code = failed
            tail = " | ".join(logs[rank].strip().splitlines()[-3:])
            raise ValidationError(f"validate: rank {rank} exited with status {code}: {tail}")
        if any(p.returncode != 0 for p in procs) or not Path(out).exists():
            raise ValidationError(f"validate: ranks did not finish within {timeout_s:.0f} s (hung rank?)")
        return json.loads(Path(out).read_text())


@dataclass(frozen=True, kw_only=True)
class FittedAllReduce:
    """All-reduce cost of this cluster: ``dpsim calibrate``'s piecewise alpha-beta fit of the run's sweep."""

    n_ranks: int
    """Ranks it was measured on (the prediction is for the same ranks)."""
    fit: AlphaBetaFit
    """The fit of the measured (size, median time) points."""

    def time(self, op: str, size_bytes: float) -> CollectiveResult:
        """Fitted all-reduce time of a ``size_bytes`` bucket."""
        t = self.fit.time_s(size_bytes)
        return CollectiveResult(op=op, algorithm="gloo-fitted", n_ranks=self.n_ranks, size_bytes=size_bytes,
                                time_s=float(t), latency_s=float(self.fit.segments[0].latency_s))


def predict_run(run: dict, *, steps: int = 5) -> dict:
    """Predict the DDP phase of ``run`` from its measurement phases with dpsim's engine."""
    comp = run["compute"]
    layers = tuple(
        LayerTime(name=b["name"], forward_s=b["forward_s"], backward_s=b["backward_s"],
                  param_names=tuple(p["name"] for p in b["params"]))
        for b in comp["blocks"]
    )
    compute = ComputeProfile(layers=layers, optimizer_s=comp["optimizer_s"], flops_per_step=0.0)
    shapes = {p["name"]: tuple(p["shape"]) for b in comp["blocks"] for p in b["params"]}
    ready = comp["grad_ready_order"] or list(reversed(list(shapes)))
    params = [ParamSpec(name=n, shape=shapes[n], dtype="float32") for n in ready]
    buckets = assign_buckets(params, bucket_cap_mb=run["bucket_cap_mb"])
    coll = run["collectives"]
    fit = fit_alpha_beta([c["size_bytes"] for c in coll], [c["time_s"] for c in coll], what="all-reduce sweep")
    model = FittedAllReduce(n_ranks=run["world_size"], fit=fit)
    ov = run["overlap"]
    slowdown = max(0.0, ov["compute_with_comm_s"] / ov["compute_alone_s"] - 1.0) if ov["compute_alone_s"] else 0.0
    copy_bw = comp.get("copy_bytes_per_s")
    param_bytes = {p.name: p.size_bytes for p in params}
    program = ddp_program(compute, buckets, copy_bandwidth_bytes_per_s=copy_bw if run["world_size"] > 1 else None,
                          param_bytes=param_bytes).program
    sim = run_program(program, model if run["world_size"] > 1 else _NoComm(),
                      steps=steps, overlap_slowdown=slowdown)
    s = sim.steps[-1]
    return {"step_time_s": s.step_time_s, "compute_s": compute.step_s, "comm_s": s.comm_s,
            "forward_s": s.forward_s, "backward_and_wait_s": s.step_time_s - s.forward_s - s.optimizer_s,
            "optimizer_s": s.optimizer_s,
            "exposed_comm_s": s.exposed_comm_s, "n_buckets": len(buckets.buckets),
            "bucket_sizes_bytes": [b.size_bytes for b in buckets.buckets], "overlap_slowdown": slowdown}


class _NoComm:
    n_ranks = 1

    def time(self, op, size_bytes):
        return CollectiveResult(op=op, algorithm="none", n_ranks=1, size_bytes=size_bytes, time_s=0.0, latency_s=0.0)


def measured_summary(run: dict) -> dict:
    """Median, p10 and p90 of rank 0's steady-state step times."""
    xs = sorted(run["ddp"]["step_times_s"])
    q = lambda f: xs[min(len(xs) - 1, max(0, int(round(f * (len(xs) - 1)))))]  # noqa: E731
    return {"median_s": statistics.median(xs), "p10_s": q(0.1), "p90_s": q(0.9), "n": len(xs)}
