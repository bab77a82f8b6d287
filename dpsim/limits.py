"""Every upper limit on what a user may ask for, in one place, checked before any work starts.

Without a limit a typo costs minutes and gigabytes (``--steps 10000000`` grew to 20 GB)
or prints numbers no one can use (``--straggler node0:1e308x`` gave NaN). Each limit here
is far above any real training job and low enough that the worst case allowed still
finishes in about a minute on a laptop; the measured cost of the worst case is given
next to each (this 2-core machine, ``dpsim`` 2026-12). ``PredictConfig``'s fields carry
their range in their field metadata, built from these constants; the other flags and
files read them from here. ``--help`` states them and a value outside is one
:class:`~dpsim.errors.ConfigError` line naming the flag, the value and the range.
"""

from __future__ import annotations

import math
import numbers
import reprlib
from dataclasses import dataclass
from typing import Any

from dpsim.errors import ConfigError

# ------------------------------------------------------------------ one prediction

MAX_GPUS = 1 << 20
"""GPUs of one job, and of all ``--jobs`` together (1,048,576). 65,536 GPUs cost ~0.7 s
(README "Engine"); 1,048,576 on ``infiniband`` ~11 s and 2.8 GB."""
MAX_GPUS_PER_NODE = 1024
"""GPUs in one server or NVLink box (an NVL576 rack is 576)."""
MAX_JOBS = 1024
"""Identical jobs sharing one cluster (``--jobs``)."""
MAX_STEPS = 10_000
"""Simulated training steps (``--steps``): 10,000 DDP steps ~20 s and 1.4 GB."""
MAX_SIMULATED_MICRO_BATCHES = 10_000
"""``--steps`` x ``--grad-accum``: every micro-batch is a task of the engine
(3 steps x 10,000 micro-batches took 40 s and 2 GB)."""
MAX_EXTRAPOLATED_MICRO_BATCHES = 1 << 30
"""Micro-batches per replica per step where ``predict`` extrapolates the steady state instead of simulating each
(:mod:`dpsim.predict.extrapolate`; there, the counts it does simulate are bounded by
:data:`MAX_SIMULATED_MICRO_BATCHES` and :data:`MAX_PIPELINE_SLOTS` as the full path's are, and its cost does not
grow with the micro-batches: ~0.1-0.5 s for any count here). ASSUMED: 1,073,741,824 is far above any training
job's (DeepSeek-V3's largest batch is 15,360 sequences: its technical report, arXiv:2412.19437, Sec. 4.2)
and keeps the extrapolation's ``m x increment`` ~1e-7 of a float's range of exact integers."""
MAX_GLOBAL_BATCH = 1 << 30
"""Samples per optimizer step (``--global-batch``). It was every count's :data:`MAX_GPUS` (1,048,576) while
``predict`` simulated every micro-batch; now that a step past 512 micro-batches costs its sampled counts
(:mod:`dpsim.predict.extrapolate`), ``plan`` at a global batch of 16M samples (16,777,216) costs what it does at
1M, and ``--grad-accum`` already reached :data:`MAX_EXTRAPOLATED_MICRO_BATCHES` micro-batches. ASSUMED: the same
1,073,741,824, far above any training job's batch; the micro-batches per replica it gives stay bounded by
:data:`MAX_EXTRAPOLATED_MICRO_BATCHES` (the config's own check)."""
MAX_GRAD_ACCUM = MAX_EXTRAPOLATED_MICRO_BATCHES
"""Micro-batches per optimizer step (``--grad-accum``): past :data:`MAX_SIMULATED_MICRO_BATCHES` (x ``--steps``)
only where ``predict`` extrapolates (the config's own check refuses the rest, naming that limit)."""
MAX_PIPELINE_SLOTS = 500_000
"""A tensor/pipeline layout's ``--pp`` x ``--virtual-stages`` x micro-batches per step: each is
a forward and a backward op of the pipeline engine (one step is simulated; 64 x 1 x 512 =
32,768 slots take ~1 s, so the limit ~15 s and under 1 GB)."""
MAX_PLAN_CANDIDATES = 300_000
"""Layouts one ``dpsim plan`` search may enumerate (~5,000 a second: about a minute)."""
VERIFY_WORK = 40_000.0
"""Most simulation work the layouts ``plan`` simulates may take together, in pipeline slots (one micro-batch
through one stage's chunk, an op of :func:`~dpsim.engine.pipeline.run_pipeline`; :func:`~dpsim.plan.planner.simulation_work`
counts a layout's). ``predict`` plays every micro-batch of a step, so a layout's simulation grows with its
gradient accumulation: ``plan --gpus 16 --model llama-2-7b --global-batch 1048576`` simulated layouts of up
to 3,333 micro-batches x 3 steps each and ran 293 s (2026-12-07, loaded 2-core machine). A slot took 70-320 µs
there (the pipeline engine plus building its program; more under load), so 40,000 slots are ~3-13 s. Counted,
not timed, so one search simulates the same layouts on every machine. The first layout that would
pass it ends the simulation (``stopped_by`` ``work``), as ``--verify`` does: the rest are ranked by their
estimates. The searches of issue 28 (405B and DeepSeek-V3 on 16,384 GPUs) stay far below it. Past 512
micro-batches per replica a prediction simulates four sampled counts (:mod:`dpsim.predict.extrapolate`), and
that is what is counted (a data-parallel layout: 32 + 33 + 34 + 64 micro-batches x 3 steps, whatever its count):
the same search then simulates 19 layouts, the whole plan taking ~3.5 CPU s at 1M or 16M samples
(tests/benchmarks/bench_plan_speed.py --extrapolation, 2026-12-08, loaded 2-core machine)."""
MAX_LAYERS = 1024
"""Blocks of a transformer given by its shape (``transformer:layers=``, or a transformers config read as one).
The deepest transformers trained have 1,000 layers (Wang et al., "DeepNet: Scaling Transformers to 1,000
Layers", arXiv:2203.00555, abstract). Every block is costed and laid out one by one; measured here (GPT-2
width, 8 GPUs): 1,000 layers ~1.8 s a prediction and ~12 s a ``dpsim plan`` over 64 GPUs, 4,096 layers
~4 s and ~105 s, 2^31 layers never ended."""
MAX_TRACED_MODULES = 32_768
"""Modules of a traced torch model (``--model file.py:fn``, a library model), counted before tracing:
room for :data:`MAX_LAYERS` blocks of up to 32 modules each. Every module is hooked, traced and costed
as its own layer; measured here (2 cores, a stack of ``nn.Linear(8, 8)``, 2 GPUs): 5,000 modules ~9 s a
prediction, 20,000 ~30 s, so the limit costs about a minute where 100,000 took minutes with no end shown."""
MAX_MODEL_LOAD_S = 300.0
"""Wall-clock seconds for importing a user's model file (``--model file.py:fn``, ``pkg.mod:fn``), calling
its builder and example-input function and tracing one forward and backward: user code that never returns
(a ``while True``) is refused in one line instead of hanging dpsim. Measured here (2 cores shared with other
jobs, load ~7): the largest model allowed, :data:`MAX_TRACED_MODULES` ``nn.Linear(8, 8)``, traced in
~103 s; full-size catalog models (``llama-3-405b``, ``gpt2-xl``, ``vit-l-16``, ``bert-large``,
``resnet50``, built by :mod:`dpsim.workload.torch_models`) in 8-12 s for a whole ``dpsim predict``.
The stop is an exception raised into the user's code (again every second); code that catches
``BaseException`` in a loop swallows it. The ``dpsim`` command then ends its own process
:data:`~dpsim.workload.model_ref.RUNAWAY_GRACE_S` (30 s) later, with the one error line and status 2;
through the API (:func:`dpsim.workload.from_torch.load_torch_workload`, ``predict``) the caller's process
is never ended, so such code runs on there. Code in C that never returns (a torch kernel) is out of
reach of both the exception and the alarm."""
MAX_INPUT_ELEMENTS = 1 << 48
"""Elements of ``--input-shape``'s example tensor (all its sizes multiplied): room for
:data:`MAX_MICRO_BATCH` samples of :data:`MAX_SEQ_LEN` tokens and 256 times more. It lives on the meta
device (no memory), but torch takes sizes as 64-bit integers: a 20-digit size was a traceback."""
MAX_MICRO_BATCH = 1 << 20
"""Samples per GPU per micro-batch."""
MAX_SEQ_LEN = 1 << 20
"""Tokens per sample (a 1M-token context)."""
MAX_BUCKET_CAP_MB = 1 << 20
"""Gradient bucket size in MiB (1 TiB)."""
MIN_COMPUTE_EFFICIENCY = 0.01
"""``--compute-efficiency``: compute at most 100x slower than modelled (1e-300 printed 6e293 days)."""
MAX_OVERLAP_SLOWDOWN = 10.0
"""Fractional compute slowdown while communicating (10 = eleven times slower)."""
MAX_POWER_CAP_W = 2000.0
"""``--power-cap-w``: above any accelerator board's power limit (GB300: 1,400 W); each GPU's own
accepted limits are checked where its measured curve is read (:data:`dpsim.hardware.POWER_CAP_RANGE_W`)."""
MIN_SINGLE_GPU_STEP_S = 1e-6
"""Shortest measured one-GPU step (1 us): shorter ones print 300-digit throughputs."""
MAX_SINGLE_GPU_STEP_S = 86_400.0
"""Longest measured one-GPU step (a day)."""
MAX_SAMPLES_PER_S = 1e9
"""``--single-gpu-samples-per-s``, ``--input-samples-per-s``."""
MAX_POWERSGD_RANK = 1024
"""``--powersgd-rank`` (PowerSGD's own guidance: 1-4, 32 for some NLP tasks)."""
MAX_POWERSGD_START_ITER = 10**9
"""``--powersgd-start-iter``."""

MAX_MTP_DEPTH = 16
"""Most multi-token prediction modules a model may be given (``--mtp-depth``): DeepSeek-V3 trained
with one (arXiv:2412.19437, Sec. 4.2); a bound on typing errors, not a published limit."""

MAX_TEXT_CHARS = 4096
"""A flag's text (a name, a path, a comma list)."""

# --------------------------------------------------------------- variability (Monte Carlo)

MAX_MC_SAMPLES = 1000
"""``--mc-samples``."""
MAX_MC_STEPS = 10_000
"""``--mc-steps``."""
MAX_MC_SAMPLE_STEPS = 50_000
"""``--mc-samples`` x ``--mc-steps`` (100 x 1,000 on 64 GPUs took 27 s)."""
MAX_MC_RANK_STEPS = 150_000_000
"""GPUs x ``--mc-samples`` x ``--mc-steps`` with per-rank noise, stragglers or hiccups
(262,144 GPUs x 10 x 50 = 1.3e8 took 27 s and 0.8 GB)."""
MAX_SEED = 2**63 - 1
"""``--seed`` (numpy's seeds are unbounded; a 64-bit value is plenty)."""
MAX_STRAGGLER_FACTOR = 100.0
"""A straggler at most 100x slower (all factors on one rank multiplied)."""
MIN_STRAGGLER_FACTOR = 0.01
"""... and at most 100x faster."""
MAX_HICCUP_RATE_PER_S = 1000.0
"""``--hiccup-rate-per-s``."""
MAX_HICCUP_S = 3600.0
"""``--hiccup-s`` (an hour)."""
MAX_HICCUP_FRACTION = 1.0
"""``--hiccup-rate-per-s`` x ``--hiccup-s``: expected stall time per second of work (1 doubles
the step; 1000/s x 3600 s made a 0.13 s step last six days)."""
MIN_DEGRADED_FRACTION = 1e-3
"""``--degrade`` keeps at least 0.1 % of a link's capacity (all degradations of one link multiplied)."""
MAX_REPEATED_FLAGS = 1024
"""Items of a repeatable flag (``--straggler``, ``--degrade``, ``--gpu-hour-usd``)."""

# ------------------------------------------------------------------- other commands

MAX_COLLECTIVE_BYTES = float(1 << 40)
"""``dpsim collective -b/-e``: 1 TiB."""
MAX_SIZE_ROWS = 1000
"""Rows of a size sweep (``-b``..``-e`` by ``-f``); nccl-tests' 8 B..16 GiB by 2 is 32."""
MAX_SWEEP_POINTS = 100_000
"""Points of a ``dpsim sweep`` grid (the product of its axes; ~10 ms each serially)."""
MAX_SWEEP_WORK = 1e7
"""Simulation work of a whole ``dpsim sweep`` grid, in pipeline slots (:data:`VERIFY_WORK`'s unit), counted before
any point runs by :func:`~dpsim.plan.sweep.sweep_work`: each point's own simulation (as ``plan`` counts a layout's,
:func:`~dpsim.plan.planner.simulation_work`) plus :data:`SWEEP_POINT_WORK`. The point limit alone let 100,000 points
of 3,000 micro-batches each through (~2 s a point here: two days of simulation). A slot took 70-320 µs (see
:data:`VERIFY_WORK`), so 1e7 slots are ~12-53 min serially, about what :data:`MAX_SWEEP_POINTS` of the cheapest
points take (100,000 x ~10 ms ~17 min); ``--workers`` divide the wall time, not the work. Counted, not timed, so
the same grid is refused on every machine."""
SWEEP_POINT_WORK = 60.0
"""What a grid point costs besides its simulation, in pipeline slots: building its cluster, collectives, memory and
step program. Measured: the default point (gpt2-xl, 8 GPUs, ddp, 3 steps of 1 micro-batch: 12 slots of
simulation) took 14 ms once warm, 2026-12-07 on the loaded 2-core machine, at ~160 µs a slot (the same run's
gpt2-xl with --grad-accum 1000: 1.95 s for 12,096 slots): ~88 slots, ~75 of them besides its simulation;
rounded down to 60 (ASSUMED: one loaded machine's timing, so as not to refuse grids of the cheapest points)."""
MAX_WORKERS = 256
"""``dpsim sweep --workers`` (local processes)."""
MAX_SCALING_POINTS = 64
"""GPU counts of ``dpsim report --scaling-gpus``."""
MAX_TOKENS = 1e18
"""A token or sample budget (DeepSeek-V3 was pre-trained on 1.48e13 tokens: arXiv:2412.19437, abstract)."""
MAX_GPU_HOUR_USD = 1e4
"""A price per GPU-hour in US dollars."""
MIN_CHECKPOINT_INTERVAL_S = 1.0
"""``dpsim goodput --checkpoint-interval``: a second of training between checkpoints (frameworks save at
step boundaries, and no training step is shorter)."""
MAX_RECOVERY_S = 365 * 86400.0
"""``dpsim goodput --restart`` / ``--replace``: a year (a job that waits longer than that per failure has no
goodput to plan)."""
MAX_SPAN_S = 100 * 365 * 86400.0
"""A span of cluster time a user gives: ``dpsim goodput --duration`` and ``--checkpoint-interval``, a ``dpsim
mix`` file's start, duration, horizon and failure times. A century: past it the tables printed 30-digit
seconds or days, and a mix start past float precision left a job with an infinite step."""
MAX_MTBF_S = 1e6 * 365 * 86400.0
"""A component's finite MTBF (``--mtbf-gpu/-node/-link``, a mix file's ``mtbf_*``): a million years. Past it
no run dpsim simulates (a century at most, :data:`MAX_SPAN_S`) sees a failure, so ``none`` says it; a
fuzzed ``--mtbf-node 1e300h`` printed the job's MTBF as a 300-digit number of days."""
MAX_MIX_STEPS = 10**12
"""A mix job's ``steps`` (10^12 one-millisecond steps are 30 years of training)."""
MAX_GOODPUT_RUNS = 1000
"""``dpsim goodput --runs`` (1,000 runs at 16,384 GPUs took 105 s; the time grows with the failures simulated)."""
MAX_FAILURES_PER_RUN = 1e5
"""Expected failures of one training run beyond which it cannot be simulated nor be said to finish:
``dpsim goodput`` refuses such a job, ``plan --rank goodput`` ranks such a layout as never finishing
(its closed form gave 6e173 s for --tokens 1e18 at --mtbf-gpu 1h with a 1 MB/s checkpoint)."""
MAX_ELASTIC_EVENTS = 20_000
"""Events (training stretches, failures, restarts) of the slowest run the ``shrink`` policy's event-by-event
simulation plays before it refuses the job: ~0.8 ms each here whatever the runs (one numpy step for all), so
~16 s. ``dpsim goodput`` compares both policies always, and the bounds above are the ``wait`` policy's: with
``--mtbf-node 1h --restart 2h`` on 2 nodes (most restarts interrupted) it passed them and ran for hours,
shrinking to one node (13,000 failures a run for a day of work, 400,000 for the default 30 days). The
16,384-GPU, 30-day default run takes ~1,400."""
MAX_GOODPUT_FAILURES = 5e6
"""Expected failures one goodput simulation covers: runs x failures per run, summed over the configurations
simulated together (the checkpoint-interval study compares 10). Measured here: ``dpsim goodput --gpus 16384
--runs 1000`` (30 days, 449 failures a run: 4.5e6 in its interval study) took 105 s; ``--tokens 1e18`` on
16 GPUs at the default 100 runs would be 8.5e7 (half an hour), which the per-run bound let through."""
MAX_NPROC = 1024
"""``dpsim calibrate --nproc`` / ``--ranks-per-node``: local ranks."""
MAX_CALIBRATE_BYTES = float(64 << 30)
"""``dpsim calibrate -b/-e``: 64 GiB (buffers of this size are really allocated)."""
MAX_REPEATS = 10_000
"""``dpsim calibrate --warmup/--iters``."""
MAX_TIMEOUT_S = 86_400.0
"""``--timeout`` (a day)."""
MIN_TIMEOUT_S = 1.0
"""``--timeout``'s least: each rank's watchdog (dpsim/measure/timing.py) looks every 0.5 s, so a shorter limit
cannot be kept to, and a healthy iteration of a large collective can itself take most of a second;
``--timeout 1e-308`` was taken and ended the run "no progress for 0 s"."""
MAX_EMULATED_HOSTS = 64
"""``dpsim validate --emulate-hosts`` / ``testbed up --hosts``: every host is a network
namespace and a training process on this machine."""
MAX_OVERSUBSCRIPTION = 1000.0
"""A rack uplink's oversubscription."""
MAX_VALIDATE_STEPS = 10_000
"""``dpsim validate --steps``."""

# ------------------------------------------------------------------------ files

MAX_FIT_LATENCY_S = 10.0
"""A calibration profile's fitted fixed cost of one collective (measured ones are microseconds
to milliseconds; a fuzzed 1e300 s printed 300-digit times)."""
MIN_FIT_BUS_BANDWIDTH_BYTES_PER_S = 1e3
"""... and its fitted bus bandwidth: at least 1 kB/s ..."""
MAX_FIT_BUS_BANDWIDTH_BYTES_PER_S = 1e15
"""... and at most 1 PB/s (NVLink 5 is 1.8 TB/s per GPU)."""
MAX_BOUND_BUS_BANDWIDTH_BYTES_PER_S = 1e13
"""The most bus bandwidth a latency-bound sweep may imply (``dpsim calibrate``: times that stay flat over the
sizes measured only bound the bandwidth from below): 10 TB/s, over five times NVLink 5's 1.8 TB/s per GPU
(NVIDIA GB200 NVL72 specifications, nvidia.com/en-us/data-center/gb200-nvl72); a log flat to gigabytes
implies more and is refused as broken."""

MIN_PROFILE_RATE = 1e6
"""A calibration profile's measured matmul FLOP/s or memory-copy bytes/s: at least a million
(a single CPU core does billions) ..."""
MAX_PROFILE_FLOPS_PER_S = 1e17
"""... matmul at most 100 PFLOP/s, ten times any single device (an HGX B200 GPU: 9,000 TFLOPS
dense FP4, per glennklockwood.com/garden/processors/B200 quoting NVIDIA) ..."""
MAX_PROFILE_BYTES_PER_S = 1e15
"""... memory copies at most 1 PB/s (B200: 8 TB/s of HBM3e, same source)."""
MAX_PROFILE_SLOWDOWN = 100.0
"""A measured all-reduce slowdown while compute runs (0.25 = 25 % slower): gloo's measured 2.5
(250 %) beside compute on a loaded 2-core machine; beyond 100 it is a broken measurement. (The
other direction, compute slowed by a collective, is bounded like predict's flag:
:data:`MAX_OVERLAP_SLOWDOWN`.)"""
MAX_PROFILE_CV = 10.0
"""A measured step time's coefficient of variation (1,000 %)."""
MAX_FRESH_PROCESSES = 100
"""``calibrate --fresh-processes``: each costs a torch start-up and the step's repeats per rank."""
MAX_FRESH_PROCESS_RATIO = 10.0
"""A step's time in fresh processes over the calibrating process's: two calibrations on an idle
2-core VM measured one model's step 16 % apart (VALIDATION.md part 2); tenfold is a broken
measurement."""
MAX_PROFILE_FLOPS_PER_SAMPLE = 1e24
"""A traced model's forward FLOPs per sample (a 1T-parameter model over a 1M-token sample is 2e18)."""
MAX_PROFILE_REPEATS = 10**7
"""Repeats behind one measured number of a profile."""
MAX_PROFILE_THREADS = 1 << 16
"""Threads per rank recorded in a profile."""

MAX_INPUT_FILE_BYTES = 1 << 20
"""A topology, sweep or profile file a user gives (1 MiB; the largest shipped file is 30 KiB)."""
MAX_YAML_NODES = 1_000_000
"""Scalars, sequences and mappings of a YAML document once its aliases are expanded (a
1 MiB file without aliases holds at most ~550,000; a 711-byte "billion laughs" file
expands to 10^9)."""


def number_text(value: float) -> str:
    """``1,048,576``, ``0.001``, ``1e-06``: a limit as a person reads it."""
    if isinstance(value, int) or (float(value).is_integer() and abs(value) < 1e15):
        return f"{int(value):,}"
    return f"{value:g}"


@dataclass(frozen=True)
class Range:
    """An allowed range ``[minimum, maximum]`` (``(minimum, maximum]`` when ``open_below``)."""

    minimum: float
    """The smallest value allowed (excluded when ``open_below``)."""
    maximum: float
    """The largest value allowed."""
    integer: bool = False
    """Only integers (a bool is not one)."""
    open_below: bool = False
    """The minimum itself is not allowed (``> 0``)."""

    def ok(self, value: Any) -> bool:
        """Whether ``value`` is a number of the right kind inside the range; never raises."""
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not is_finite(value):
            return False
        if self.integer and not isinstance(value, int):
            return False
        above = value > self.minimum if self.open_below else value >= self.minimum
        return above and value <= self.maximum

    def text(self, scale: float = 1.0, unit: str = "") -> str:
        """``an integer >= 1 and <= 10,000``, ``a number > 0 and <= 1``; ``scale`` converts to a flag's units."""
        lo, hi = (number_text(v if scale == 1 else v * scale) for v in (self.minimum, self.maximum))
        kind = "an integer" if self.integer else "a number"
        return f"{kind} {'>' if self.open_below else '>='} {lo}{unit} and <= {hi}{unit}"


def check_int(value: Any, flag: str, minimum: int, maximum: int) -> int:
    """``value`` (numpy's integer scalars as Python's int) if it is an integer in ``[minimum, maximum]``, else one
    ConfigError line naming ``flag``."""
    value = plain_number(value, int)
    rule = Range(minimum, maximum, integer=True)
    if not rule.ok(value):
        raise ConfigError(f"{flag}: {short(value)} is not valid; expected {rule.text()}")
    return value


def check_number(value: Any, flag: str, minimum: float, maximum: float, *, open_below: bool = False,
                 unit: str = "") -> float:
    """``value`` as a float if it is a finite number (numpy's scalars too) in ``[minimum, maximum]``
    (``(minimum, ...`` with ``open_below``)."""
    value = plain_number(value, float)
    rule = Range(minimum, maximum, open_below=open_below)
    if not rule.ok(value):
        raise ConfigError(f"{flag}: {short(value)}{unit} is not valid; expected {rule.text(unit=unit)}")
    return float(value)


def is_finite(value: Any) -> bool:
    """A finite int or float, not a bool; never raises (``math.isfinite(10**400)`` would overflow).
    ``True`` is an int to Python: ``VariabilitySpec(noise_cv=True)`` ran with a 100 % CV."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return abs(value) < 1e300
    return isinstance(value, float) and math.isfinite(value)


def short(value: Any, limit: int = 60) -> str:
    """``repr(value)`` cut to ``limit`` characters: an error line never grows with the input
    (a YAML alias bomb's repr would never finish)."""
    r = reprlib.Repr()
    r.maxstring, r.maxother, r.maxlist, r.maxdict, r.maxtuple, r.maxlevel = limit, limit, 4, 4, 4, 2
    try:
        text = r.repr(value)
    except ValueError:  # an int past Python's 4,300-digit str() limit
        text = f"<{type(value).__name__} of {value.bit_length() if isinstance(value, int) else '?'} bits>"
    return text if len(text) <= limit else text[:limit - 3] + "..."


def yaml_written(value: Any, limit: int = 60) -> str:
    """A value as a YAML file writes it (``true``, ``null``), else :func:`short`: an error about a file's value
    names what the file holds, not Python's ``True``/``None``."""
    if isinstance(value, bool):
        return str(value).lower()
    return "null" if value is None else short(value, limit)


def plain_number(value: Any, kind: type) -> Any:
    """``value`` as Python's own number when it is another library's scalar of ``kind`` (numpy's int64, float32,
    bool_: ``PredictConfig(gpus=np.int64(16))`` from ``np.arange`` or a DataFrame was refused "np.int64(16) is not
    valid; expected an integer"); anything else as it is, for :func:`check_value` to judge. A float that is a whole
    number stays a float (refused for an integer field: 16.0 GPUs is a typo's sign), as a bool is not an integer."""
    if type(value) in (int, float, bool, str) or value is None:
        return value
    if kind is bool and type(value).__name__ == "bool_":
        return bool(value)
    if kind in (int, float) and isinstance(value, numbers.Integral) and type(value).__name__ != "bool_":
        return int(value)
    if kind is float and isinstance(value, numbers.Real) and type(value).__name__ != "bool_":
        return float(value)
    return value
