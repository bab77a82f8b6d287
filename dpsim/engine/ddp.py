"""The plain DDP step program (buckets launched during backward).
"""

from __future__ import annotations

from dpsim.engine.program import CommOp, ComputeTask, StepProgram
from dpsim.errors import ConfigError
from dpsim.workload.buckets import BucketPlan
from dpsim.workload.compute import ComputeProfile


def ddp_program(compute: ComputeProfile, buckets: BucketPlan, *, overlap: bool = True,
                copy_bandwidth_bytes_per_s: float | None = None,
                param_bytes: dict[str, float] | None = None) -> StepProgram:
    """The step of plain DDP: buckets launch during backward (or after it without overlap).

    ``copy_bandwidth_bytes_per_s``: with DDP's default ``gradient_as_bucket_view=False``
    every gradient is copied into its bucket's flat buffer when ready and back after the
    all-reduce; given a memory-copy bandwidth, both copies (2 x the layer's gradient
    bytes, from ``param_bytes``) are charged to the backward of the layer that produced
    them. ``None``: not charged (on a GPU, 2 x 25 MiB at HBM rates is ~20 us a bucket).
    """
    if copy_bandwidth_bytes_per_s is not None and not copy_bandwidth_bytes_per_s > 0:
        raise ConfigError(f"copy bandwidth: {copy_bandwidth_bytes_per_s!r} is not valid; expected bytes/s > 0")
    copy_s = [0.0] * len(compute.layers)
    if copy_bandwidth_bytes_per_s:
        assert param_bytes is not None, "param_bytes is needed with copy_bandwidth_bytes_per_s"
        for i, layer in enumerate(compute.layers):
            copy_s[i] = sum(2 * param_bytes[n] for n in layer.param_names) / copy_bandwidth_bytes_per_s
    owner = {name: i for i, layer in enumerate(compute.layers) for name in layer.param_names}
    last_layer = []
    for b in buckets.buckets:
        missing = [name for name in b.param_names if name not in owner]
        if missing:
            raise ConfigError(f"bucket {b.index}: parameters {missing[:3]} belong to no layer")
        # Backward runs layers in reverse, so the lowest layer index finishes last.
        last_layer.append(min(owner[name] for name in b.param_names))
    n_layers, n_buckets = len(compute.layers), len(buckets.buckets)
    tasks = [ComputeTask(kind="forward", name=l.name, duration_s=l.forward_s) for l in compute.layers]
    next_bucket = 0
    for idx in range(n_layers - 1, -1, -1):
        launch = []
        # Buckets launch in order, each once its last gradient is ready.
        while overlap and next_bucket < n_buckets and last_layer[next_bucket] >= idx:
            launch.append(next_bucket)
            next_bucket += 1
        if idx == 0:
            launch.extend(range(next_bucket, n_buckets))
        layer = compute.layers[idx]
        tasks.append(ComputeTask(kind="backward", name=layer.name, duration_s=layer.backward_s + copy_s[idx],
                                 launch_after=tuple(launch)))
    tasks.append(ComputeTask(kind="optimizer", name="optimizer", duration_s=compute.optimizer_s,
                             wait_for=tuple(range(n_buckets))))
    comms = tuple(CommOp(name=f"bucket {b.index}", op="all_reduce", size_bytes=b.size_bytes)
                  for b in buckets.buckets)
    return StepProgram(tasks=tuple(tasks), comms=comms)
