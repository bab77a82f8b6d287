"""Sweeps: predict every point of a grid, serially or on a Dask cluster.

A grid maps axis names to lists of values; every combination is one
:class:`~dpsim.predict.PredictConfig`. The axes are *every* field of ``PredictConfig``
(``gpus``, ``link``, ``model``, ``micro_batch``, ``bucket_cap_mb``, ``overlap``, ...; a
field added later is an axis too), a few with command-line spellings
(``topology`` = ``topology_file``, dashes for underscores). Values are checked before
anything runs: an unknown axis, a wrong type or an unknown preset is one
:class:`~dpsim.errors.ConfigError` naming the axis, the value and what is allowed.

A sweep YAML file (``dpsim sweep --config sweep.yaml``)::

    grid:                        # every combination is predicted
      gpus: [8, 16, 32, 64]
      link: [ethernet, infiniband]
      model: llama-2-7b          # a scalar is a one-value axis
      micro_batch: [1, 2]
      bucket_cap_mb: [null, 25, 100]   # null: PyTorch's default buckets
    tokens: 1T                   # optional: time-to-train and cost for this budget
    gpu_hour_usd: {h100: 2.5}    # optional: override default prices (dpsim.cost)
    degrade: [infiniband:50%]    # optional: links below capacity in every point (predict's --degrade)

Results are one row per point: the point's config, the prediction flattened
(``memory_*``, ``ring_*``), the price and, given a budget, ``time_to_train_s``,
``gpu_hours`` and ``cost_usd``. :func:`run_sweep` returns a pandas DataFrame;
:func:`sweep_records` the same rows as dicts without pandas. Rows come back in grid
order whatever the executor: a Dask run gives exactly the serial run's rows.

pandas and dask are imported only when used (``pip install 'dpsim[plan]'``).
"""

from __future__ import annotations

import logging
import math
import multiprocessing
import os
import re
import time
import typing
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

from dpsim.api_args import checked_arguments
from dpsim.errors import ConfigError, DpsimError
from dpsim.limits import MAX_SWEEP_POINTS, MAX_SWEEP_WORK, MAX_WORKERS, SWEEP_POINT_WORK, check_int, short
from dpsim.files import atomic_output
from dpsim.plan.cost import PriceOverride, gpu_hour_price, training_cost
from dpsim.plan.grid import SweepSpec
from dpsim.plan.planner import predict_work
from dpsim.predict.config import PredictConfig
from dpsim.predict.result import Prediction
from dpsim.predict.run import predict
from dpsim.profile.once import reads_profiles_once
from dpsim.workload.catalog import get_model

# ---------------------------------------------------------------------------- rows

def _plain(value: Any) -> Any:
    if hasattr(value, "item") and not isinstance(value, (list, tuple, dict, str)):
        value = value.item()  # numpy scalar -> Python
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return value


def prediction_record(p: Prediction) -> dict[str, Any]:
    """A prediction as one flat row: config fields, then ``to_dict()`` flattened.

    ``gpu`` is the GPU actually used (the topology's unless overridden); nested
    objects become prefixed columns (``memory_total_bytes``, ``ring_channels``) and
    lists comma-joined text.
    """
    row: dict[str, Any] = {k: _plain(v) for k, v in p.config.to_dict().items()}

    def put(key: str, value: Any) -> None:
        if isinstance(value, dict):  # nested objects at any depth: memory_advice_fits, ...
            for sub, v in value.items():
                put(f"{key}_{sub}", v)
        else:
            row[key] = _plain(value)

    for key, value in p.to_dict().items():
        if key == "model_error" and value is not None:
            # the interval and what widened it; the regime and its row ids stay in predict --json
            value = {k: value[k] for k in ("low_s", "high_s", "coverage", "widened_for")}
        if key not in ("schema", "config"):
            put(key, value)
    return row


def cost_columns(row: Mapping[str, Any], *, tokens: float | None = None, samples: float | None = None,
                 gpu_hour_usd: PriceOverride = None) -> dict[str, Any]:
    """Price columns of a row, plus time-to-train and cost when a budget is given."""
    out: dict[str, Any] = {}
    try:
        price = gpu_hour_price(row["gpu"], gpu_hour_usd)
    except ConfigError:
        price = None
    out["usd_per_gpu_hour"] = price
    out["usd_per_hour"] = None if price is None else price * row["n_gpus"]
    if tokens is not None or samples is not None:
        out["budget_tokens" if tokens is not None else "budget_samples"] = tokens if tokens is not None else samples
        if price is None:
            out.update(time_to_train_s=None, time_to_train_days=None, gpu_hours=None, cost_usd=None)
        else:
            c = training_cost(n_gpus=row["n_gpus"], gpu=row["gpu"], tokens_per_s=row.get("tokens_per_s"),
                              samples_per_s=row["samples_per_s"], tokens=tokens, samples=samples,
                              gpu_hour_usd=price)
            out.update(time_to_train_s=c.time_s, time_to_train_days=c.time_days, gpu_hours=c.gpu_hours,
                       cost_usd=c.cost_usd)
            if row.get("model_error_low_s") is not None:  # the model-error interval, scaled to the run
                out.update(time_to_train_low_s=c.time_s * row["model_error_low_s"] / row["step_time_s"],
                           time_to_train_high_s=c.time_s * row["model_error_high_s"] / row["step_time_s"])
    return out


def run_point(config: PredictConfig | Mapping[str, Any], *, tokens: float | None = None,
              samples: float | None = None, gpu_hour_usd: PriceOverride = None,
              skip_invalid: bool = False, label: str | None = None, degradations=()) -> dict[str, Any]:
    """Predict one grid point and return its row (an ``error`` column when ``skip_invalid``).
    ``degradations``: links below capacity (``--degrade``), as ``predict`` costs them; the row then
    names them in a ``degrade`` column.

    ``config`` may be the point's ``{field: value}``: its :class:`PredictConfig` is built here,
    so a combination the config refuses is this point's error, not the sweep's. ``label``
    names the point in an error (default: the fields that differ from the defaults).
    """
    point = dict(config) if not isinstance(config, PredictConfig) else None
    try:
        if point is not None:
            config = PredictConfig(**point)
        row = prediction_record(predict(config, degradations=degradations))
        if degradations:
            row["degrade"] = ",".join(d.label for d in degradations)
        if point is not None:
            # An axis is a column of every row: to_dict leaves out a SHOWN_WHEN_SET field at its default,
            # so the compile=false (fsdp_version=1, cp=1...) rows of a sweep over it read empty.
            # A value the config keeps as left out (an etp equal to its default) is the axis's value still.
            settings = config.settings()
            row.update({k: _plain(settings[k] if settings[k] is not None else point[k]) for k in point
                        if k in settings and k not in row})
        row.update(cost_columns(row, tokens=tokens, samples=samples, gpu_hour_usd=gpu_hour_usd))
    except DpsimError as exc:
        if not skip_invalid:
            name = label or ", ".join(f"{k}={v}" for k, v in _point_label(config, point).items())
            raise type(exc)(f"sweep point {name}: {exc}") from None
        row = {k: _plain(v) for k, v in PredictConfig().to_dict().items()} if point is not None \
            else {}
        row.update({k: _plain(v) for k, v in (point.items() if point is not None
                                               else config.to_dict().items())})
        if degradations:
            row["degrade"] = ",".join(d.label for d in degradations)
        row["error"] = str(exc)
        return row
    if skip_invalid:
        row["error"] = None
    return row


def _point_label(config: PredictConfig | None, point: dict | None = None) -> dict[str, Any]:
    default = PredictConfig().settings()
    if point is not None:
        changed = {k: v for k, v in point.items() if default.get(k, object()) != v}
    else:
        changed = {k: v for k, v in config.settings().items() if v != default[k]}
    gpus = config.cluster.gpus if config is not None else default["gpus"]
    return changed or {"gpus": (point or {}).get("gpus", gpus)}


@reads_profiles_once
def _run_chunk(chunk: list[tuple[int, dict, str]], options: dict) -> list[tuple[int, dict]]:
    """Worker task: a chunk of ``(index, point, label)`` (module-level so Dask can pickle it by reference).

    The points of a chunk share their cluster (see :func:`_locality`), so a worker's caches
    (topology, collective costs, models: :mod:`dpsim.predict.memo`) serve the whole chunk, and a worker
    process reads each calibration profile once per chunk (:mod:`dpsim.profile.once`).
    """
    return [(i, run_point(p, label=label, **options)) for i, p, label in chunk]


def _locality(point: Mapping[str, Any]) -> tuple:
    """Points with equal keys share a cluster and its collective costs: run them together."""
    return tuple(str(point.get(k)) for k in ("link", "topology_file", "gpus_per_node", "gpu", "gpus", "algo",
                                              "proto", "jobs", "placement", "calibration", "model"))


# ------------------------------------------------------------------------ executors

def _check_budget_models(spec: SweepSpec) -> None:
    if spec.tokens is None:
        return

    for name in spec.axes.get("model", (PredictConfig().workload.model,)):
        if get_model(name).tokens_per_sample is None:
            raise ConfigError(f"--tokens: model {name!r} has no tokens (an image model); "
                              f"give a sample budget (--samples) instead")


def check_sweep_size(spec: SweepSpec) -> None:
    """Refuse a grid of more than :data:`~dpsim.limits.MAX_SWEEP_POINTS` points before any is built (from
    Python, ``sweep(gpus=range(1, 1001), micro_batch=range(1, 1001))`` ran on for minutes: only the
    command line checked the size)."""
    if spec.size > MAX_SWEEP_POINTS:
        lengths = " x ".join(f"{len(v)} {k}" for k, v in spec.axes.items() if len(v) > 1)
        raise ConfigError(f"sweep: {lengths} = {spec.size:,} points; expected at most {MAX_SWEEP_POINTS:,} "
                          f"(fewer values per axis, or several sweeps)")


def point_work(config: PredictConfig, layers: Callable[[str], int]) -> float:
    """What predicting ``config`` costs, in pipeline slots (:data:`~dpsim.limits.MAX_SWEEP_WORK`), counted as
    ``plan`` counts a layout's simulation (:func:`~dpsim.plan.planner.simulation_work`): with a layout, stages x
    chunks x micro-batches (one step is played); with data parallelism alone, micro-batches x steps x the model's
    layers (``layers(model)``) x the strategy's weight (the micro-batches simulated: an extrapolated
    prediction's few sampled counts); plus :data:`~dpsim.limits.SWEEP_POINT_WORK`."""
    p = config.parallelism
    return SWEEP_POINT_WORK + predict_work(
        layout=p.layout_active, pp=p.pp, schedule=p.schedule, virtual_stages=p.virtual_stages,
        micro_batches=config.micro_batches, strategy=p.strategy, steps=config.workload.steps,
        layers=0 if p.layout_active else layers(config.workload.model),
        input_rate=bool(config.workload.input_samples_per_s))


def sweep_work(spec: SweepSpec, configs: Sequence[PredictConfig | None]) -> float:
    """The grid's simulation work: :func:`point_work` summed over its points (a point ``PredictConfig``
    refused, ``None`` here, costs :data:`~dpsim.limits.SWEEP_POINT_WORK`: ``--skip-invalid`` records its error)."""
    known: dict[str, int] = {}

    def layers(model: str) -> int:
        if model not in known:
            try:
                known[model] = len(get_model(model).layers)
            except DpsimError:
                known[model] = 1  # refused when its point runs; counted as the cheapest
        return known[model]

    return sum(SWEEP_POINT_WORK if c is None else point_work(c, layers) for c in configs)


def check_sweep_work(spec: SweepSpec, configs: Sequence[PredictConfig | None]) -> None:
    """Refuse a grid whose simulation work (:func:`sweep_work`) passes :data:`~dpsim.limits.MAX_SWEEP_WORK`,
    before any point runs: 100,000 points (the point limit) of 3,000 micro-batches each were taken and ran
    for days. Refused rather than run behind a progress bar: the work is known before the first point, and a
    grid this size is a typo or a grid to split, not one a user waits hours for."""
    work = sweep_work(spec, configs)
    if work > MAX_SWEEP_WORK:
        lengths = " x ".join(f"{len(v)} {k}" for k, v in spec.axes.items() if len(v) > 1) or "1 point"
        raise ConfigError(f"sweep: {lengths} = {spec.size:,} points, ~{work / max(1, spec.size):,.0f} pipeline slots "
                          f"of simulation each = {work:,.0f}; expected at most {MAX_SWEEP_WORK:,.0f} (~30 min "
                          f"serially): fewer points, or fewer micro-batches per point (--grad-accum, "
                          f"--global-batch, --steps), or several sweeps")


def _check_executor(scheduler: str | None, workers: int | None, client: Any = None) -> None:
    if scheduler is not None and workers is not None:
        raise ConfigError("--scheduler and --workers: give one, not both (--scheduler uses an existing "
                          "cluster, --workers starts a local one)")
    if client is not None:
        # From Python only: a client and a scheduler or workers besides were silently dropped, and
        # anything else than a client ended in an AttributeError once the serial part was done.
        if not (callable(getattr(client, "map", None)) and callable(getattr(client, "scheduler_info", None))):
            raise ConfigError(f"client: {short(client)} is not valid; expected a distributed.Client")
        if scheduler is not None or workers is not None:
            raise ConfigError("client and --scheduler/--workers: give one, not both (the client's cluster runs "
                              "the points)")
    if workers is not None:
        # The CLI's range, for Python callers too: workers=10**9 would have started that many processes.
        workers = check_int(workers, "--workers", 1, MAX_WORKERS)
    if scheduler is not None and not re.fullmatch(r"(tcp|tls|ucx|ws|wss|inproc)://[^\s/:]+(:\d+)?[^\s]*",
                                                 str(scheduler)):
        raise ConfigError(f"--scheduler: {scheduler!r} is not a scheduler address; expected e.g. "
                          f"tcp://host:8786")


LOCAL_CLUSTER_PAYOFF_S = 8.0
"""``--workers``: a local Dask cluster is started only when the points left would take longer
than this serially. Starting one costs 2-4 s (worker processes importing dpsim), and its
workers begin with empty caches; below this the serial run finishes first."""

CHUNK_S = 1.0
"""Target work per Dask task: long enough that scheduling costs little, short enough to balance."""


@reads_profiles_once
def sweep_records(spec: SweepSpec, *, scheduler: str | None = None, workers: int | None = None,
                  client: Any = None, progress: bool = False, skip_invalid: bool = False,
                  connect_timeout_s: float = 10.0,
                  on_result: Callable[[int], None] | None = None) -> list[dict[str, Any]]:
    """Run every grid point and return the rows in grid order.

    Serial by default: one process shares topologies, collective costs, models and step
    programs between points (:mod:`dpsim.predict.memo`). ``workers=N`` runs points serially
    until the rest would take longer than :data:`LOCAL_CLUSTER_PAYOFF_S`, then starts a
    ``dask.distributed.LocalCluster`` of N single-threaded worker processes for the rest
    (chunks of points that share a cluster, about :data:`CHUNK_S` of work each), closed
    before returning. ``scheduler="tcp://host:8786"`` uses an existing cluster (its workers
    must have the same dpsim installed); ``client`` uses a ``distributed.Client`` you already
    have (``connect_timeout_s`` bounds the wait for ``scheduler``). ``progress`` shows a rich
    progress bar on stderr. With ``skip_invalid`` a point that raises, or that
    :class:`PredictConfig` refuses, gets its message in an ``error`` column instead of
    stopping the sweep.
    """
    check_sweep_size(spec)
    _check_executor(scheduler, workers, client)
    for flag, value in (("--progress", progress), ("--skip-invalid", skip_invalid)):
        if not isinstance(value, bool):  # a string was taken as true
            raise ConfigError(f"{flag}: {short(value)} is not valid; expected True or False")
    _check_budget_models(spec)
    points = spec.points()
    if not skip_invalid:
        configs: list[PredictConfig | None] = list(spec.configs())  # a refused combination fails the sweep first
    else:
        configs = []
        for point in points:
            try:
                configs.append(PredictConfig(**point))
            except DpsimError:
                configs.append(None)  # its error becomes its row's
    check_sweep_work(spec, configs)
    options = dict(tokens=spec.tokens, samples=spec.samples, gpu_hour_usd=spec.gpu_hour_usd,
                   skip_invalid=skip_invalid, degradations=spec.degradations)
    rows: list[dict | None] = [None] * len(points)
    with _Progress(len(points), enabled=progress) as bar:
        def done(n: int) -> None:
            bar.advance(n)
            if on_result is not None:
                on_result(n)

        start, per_point_s = 0, None
        if scheduler is None and client is None:
            # Serial, while the points left do not pay for starting workers.
            t0 = time.perf_counter()
            while start < len(points):
                rows[start] = run_point(points[start], label=spec.point_label(points[start]), **options)
                start += 1
                done(1)
                per_point_s = (time.perf_counter() - t0) / start
                left = len(points) - start
                if workers is not None and workers > 1 and left > workers \
                        and left * per_point_s > LOCAL_CLUSTER_PAYOFF_S:
                    break
        if start < len(points):
            bar.describe(f"sweep ({workers or 'cluster'} workers)")
            _run_dask(spec, points, start, options, rows, done, scheduler=scheduler, workers=workers,
                      client=client, connect_timeout_s=connect_timeout_s, per_point_s=per_point_s)
    return typing.cast(list, rows)


def _run_dask(spec: SweepSpec, points: list[dict], start: int, options: dict, rows: list,
              done: Callable[[int], None], *, scheduler: str | None, workers: int | None, client: Any,
              connect_timeout_s: float, per_point_s: float | None) -> None:
    try:
        from distributed import Client, LocalCluster, as_completed
    except ImportError:
        raise ConfigError("--workers/--scheduler: dask.distributed is not installed; "
                          "pip install 'dpsim[plan]'") from None
    cluster = own_client = None
    try:
        if client is None:
            if workers is not None:
                before = set(multiprocessing.active_children())
                cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                       dashboard_address=":0", silence_logs=logging.ERROR)
                children = [p for p in multiprocessing.active_children() if p not in before]
                own_client = client = Client(cluster)
            else:
                try:
                    own_client = client = Client(scheduler, timeout=f"{connect_timeout_s}s")
                except (OSError, TimeoutError) as exc:
                    raise ConfigError(f"--scheduler: cannot connect to {scheduler!r}: "
                                      f"{' '.join(str(exc).split())[:200]}") from None
        n_workers = max(1, len(client.scheduler_info().get("workers", {})) or (workers or 1))
        left = sorted(range(start, len(points)), key=lambda i: (_locality(points[i]), i))
        if per_point_s:
            size = max(1, int(CHUNK_S / per_point_s))
        else:
            size = max(1, -(-len(left) // (4 * n_workers)))
        # Never fewer chunks than workers x 2, so that the last ones balance.
        size = max(1, min(size, -(-len(left) // (2 * n_workers))))
        chunks = [[(i, points[i], spec.point_label(points[i])) for i in left[k:k + size]]
                  for k in range(0, len(left), size)]
        futures = client.map(_run_chunk, chunks, options=options, pure=False)
        for future in as_completed(futures):
            part = future.result()
            for i, row in part:
                rows[i] = row
            done(len(part))
    finally:
        if own_client is not None:
            own_client.close()
        if cluster is not None:
            cluster.close()
            # Wait for (and reap) the worker processes: none outlives the sweep, not even as a zombie.
            for proc in children:
                proc.join(timeout=10)
                if proc.is_alive():
                    proc.terminate()
                    proc.join(timeout=5)
            multiprocessing.active_children()


class _Progress:
    """A rich progress bar on stderr, or nothing."""

    def __init__(self, total: int, enabled: bool):
        self.total, self.enabled = total, enabled
        self._progress = self._task = None

    def __enter__(self) -> _Progress:
        if self.enabled:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                      TimeElapsedColumn(), TimeRemainingColumn(),
                                      console=Console(stderr=True), transient=True)
            self._progress.__enter__()
            self._task = self._progress.add_task("sweep", total=self.total)
        return self

    def advance(self, n: int) -> None:
        if self._progress is not None:
            self._progress.advance(self._task, n)

    def describe(self, text: str) -> None:
        if self._progress is not None:
            self._progress.update(self._task, description=text)

    def __exit__(self, *exc: object) -> None:
        if self._progress is not None:
            self._progress.__exit__(*exc)


def run_sweep(spec: SweepSpec, **kwargs: Any):
    """Run a sweep (see :func:`sweep_records` for the options) as a pandas DataFrame."""
    return to_dataframe(sweep_records(spec, **kwargs))


@reads_profiles_once
@checked_arguments("dpsim.sweep")
def sweep(grid: Mapping[str, Any] | None = None, *, tokens: float | str | None = None,
          samples: float | str | None = None, gpu_hour_usd: PriceOverride = None,
          scheduler: str | None = None, workers: int | None = None, client: Any = None,
          progress: bool = False, skip_invalid: bool = False, degrade: Any = None, **axes: Any):
    """Sweep a grid given as a mapping and/or keyword axes; returns a pandas DataFrame. ``degrade``: links below
    capacity in every point (``"infiniband:50%"``, a list of them, or ``LinkDegradation``). ``tokens``/``samples``:
    a budget as a number or the command line's text (``"1B"``, ``"300B"``: :func:`~dpsim.plan.cost.parse_count`), as
    ``dpsim.plan`` and ``dpsim.goodput`` take it.

    >>> df = sweep(gpus=[8, 16], link=["nvlink", "ethernet"], model="gpt2")  # doctest: +SKIP
    """
    if grid is not None and not isinstance(grid, Mapping):  # dict(3) was a TypeError traceback
        raise ConfigError(f"sweep: grid is {type(grid).__name__}; expected a mapping of axis to values")
    merged = dict(grid or {})
    for name, values in axes.items():
        if name in merged:
            raise ConfigError(f"sweep: axis {name!r} is given twice")
        merged[name] = values
    spec = SweepSpec.from_grid(merged, tokens=tokens, samples=samples, gpu_hour_usd=gpu_hour_usd, degrade=degrade)
    return run_sweep(spec, scheduler=scheduler, workers=workers, client=client, progress=progress,
                     skip_invalid=skip_invalid)


# ---------------------------------------------------------------------------- output

def to_dataframe(rows: Sequence[Mapping[str, Any]]):
    """Rows as a pandas DataFrame with a stable column order (first row's keys first)."""
    import pandas as pd

    rows = list(rows)
    columns: list[str] = []
    for row in rows:
        columns.extend(k for k in row if k not in columns)
    df = pd.DataFrame.from_records(rows, columns=columns)
    for col in columns:
        # An integer column with a null in it (seq_len=none,512; a point's error row) became float64, so the JSON
        # and CSV wrote 512.0, which predict --seq-len refuses: pandas' nullable integers keep 512.
        values = [row.get(col) for row in rows]
        given = [v for v in values if v is not None]
        if len(given) < len(values) and given and all(isinstance(v, int) and not isinstance(v, bool) for v in given):
            df[col] = df[col].astype("Int64")
    return df


OUTPUT_FORMATS = {".csv": "csv", ".parquet": "parquet", ".json": "json"}


def _json_value(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if v is not None and not isinstance(v, (str, bool, int, float)):
        if hasattr(v, "item"):
            return _json_value(v.item())
    try:
        import pandas as pd

        if v is not None and not isinstance(v, (str, bool)) and pd.isna(v):
            return None
    except (ImportError, TypeError, ValueError):
        pass
    return v


def records_json(rows: Iterable[Mapping[str, Any]], spec: SweepSpec | None = None) -> dict:
    """The JSON document ``dpsim sweep --json`` prints (schema ``dpsim.sweep/1``)."""
    doc: dict[str, Any] = {"schema": "dpsim.sweep/1"}
    if spec is not None:
        doc["axes"] = {k: list(v) for k, v in spec.axes.items()}
        doc["tokens"] = spec.tokens
        doc["samples"] = spec.samples
        if spec.degradations:
            doc["degrade"] = [d.label for d in spec.degradations]
    doc["rows"] = [{k: _json_value(v) for k, v in row.items()} for row in rows]
    return doc


def _input_files(spec: SweepSpec) -> Iterator[tuple[str, str, str]]:
    """(axis, value, path) of each file a point of ``spec`` reads: a calibration profile, a topology file, a routing
    histogram (``moe_routing: histogram:PATH``)."""
    for name, values in spec.axes.items():
        for value in values:
            if not isinstance(value, str):
                continue
            if name in ("calibration", "topology_file"):
                yield name, value, value
            elif name == "moe_routing" and value.strip().lower().startswith("histogram:"):
                yield name, value, value.split(":", 1)[1].strip()


def check_output_not_input(path: str | Path, spec: SweepSpec, flag: str = "-o/--output") -> None:
    """Refuse an output ``path`` that is a file the sweep's points read: ``--axis calibration=p.json -o p.json``
    replaced the profile with the results table (the sweep had read it, so it ran, and the next sweep did not)."""
    for name, value, source in _input_files(spec):
        try:
            same = os.path.samefile(path, source)
        except (OSError, ValueError):  # either missing (a shipped profile's name), or not a path at all
            same = False
        if same:
            raise ConfigError(f"{flag}: {str(path)!r} is a file the sweep reads (its {name} {short(value)}); "
                              f"writing the results would replace it; choose another -o")


def write_results(df, path: str | Path, spec: SweepSpec | None = None) -> Path:
    """Write a results DataFrame to ``.csv``, ``.parquet`` or ``.json`` (by extension); never over a file
    ``spec``'s points read (:func:`check_output_not_input`)."""
    import json

    path = Path(path)
    if spec is not None:
        check_output_not_input(path, spec)
    fmt = OUTPUT_FORMATS.get(path.suffix.lower())
    if fmt is None:
        raise ConfigError(f"-o/--output: {str(path)!r} has no known extension; use one of "
                          f"{', '.join(OUTPUT_FORMATS)}")
    if not path.parent.is_dir():
        what = "is not a directory" if path.parent.exists() else "does not exist"
        raise ConfigError(f"-o/--output: directory {str(path.parent)!r} {what}")
    # Through a temporary file: an interrupted or failed write leaves the old file (or none).
    with atomic_output(path, flag="-o/--output") as tmp:
        if fmt == "csv":
            df.to_csv(tmp, index=False)
        elif fmt == "parquet":
            try:
                df.to_parquet(tmp, index=False)
            except ImportError:
                raise ConfigError("-o/--output: writing Parquet needs pyarrow; pip install 'dpsim[plan]'") from None
        else:
            doc = records_json(df.to_dict(orient="records"), spec)
            tmp.write_text(json.dumps(doc, indent=1, allow_nan=False) + "\n", encoding="utf-8")
    return path


def read_results(path: str | Path):
    """Read results written by :func:`write_results` back into a DataFrame."""
    import json

    import pandas as pd

    path = Path(path)
    fmt = OUTPUT_FORMATS.get(path.suffix.lower())
    if fmt == "csv":
        return pd.read_csv(path)
    if fmt == "parquet":
        return pd.read_parquet(path)
    if fmt == "json":
        return to_dataframe(json.loads(path.read_text(encoding="utf-8"))["rows"])
    raise ConfigError(f"results: {str(path)!r} has no known extension; use one of {', '.join(OUTPUT_FORMATS)}")
