"""A job mix: what a YAML file (or the Python API) says runs on one cluster, checked strictly.

```yaml
cluster: {link: infiniband, gpus: 1024}   # or {topology: my-fabric.yaml, gpus: ...}
horizon: 24h                               # cluster time simulated (default: until the last job ends)
placement: packed                          # default policy of the jobs that name none
jobs:
  - {name: a, model: llama-2-7b, gpus: 64, strategy: zero2, micro_batch: 1, start: 0s, steps: 500}
  - {name: b, model: gpt2-xl, gpus: 32, start: 10min, duration: 2h, placement: spread}
  - {name: c, model: gpt2, gpus: 16, nodes: [40, 41]}
  - {name: d, model: qwen3-30b-a3b, gpus: 16, tp: 2, ep: 8, strategy: zero1, sequence_parallel: true}
spares: 2                                  # servers held back to replace failed ones (the last ones)
checkpoint: {interval: 1h, write: 60s, restart: 10min}   # or bandwidth: 10GB/s; a job may override it
storage: 40GB/s                            # the storage the checkpoints share (default: no shared limit)
failures:                                  # explicit events and/or a random process
  repair: 4h                               # a failed server (or its NIC link) is back after this (> 0)
  mtbf_node: 3692h                         # per server; also mtbf_gpu (per GPU), mtbf_link (per NIC link)
  seed: 1
  events: [{at: 2h, node: 5}, {at: 3h, link: 7, nic: 0}]   # link: server 7's NIC 0 (NIC, cable, leaf port)
  # Switch links (cables between switches): the jobs keep running over the cables left.
  mtbf_uplink: {leaf-spine: 100000h}       # per cable of that link class (tiers: leaf-spine, spine-core...)
  uplink_repair: 2h                        # a failed switch cable is back after this (default: repair)
  # events: [{at: 1h, uplink: leaf3.0, cables: 2, repair: 30min}]  # 2 of leaf3.0's uplink cables
```

Every mistake is a :class:`~dpsim.errors.ConfigError` of one line naming the field
(``jobs[1].gpus``), the value and what is allowed; nothing is simulated before the whole
file is valid.
"""

from __future__ import annotations

import math
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from dpsim.errors import ConfigError, DpsimError
from dpsim.files import read_yaml_file
from dpsim.frozen import frozen_dataclass
from dpsim.limits import MAX_GPUS, MAX_MIX_STEPS, MAX_MTBF_S, MAX_RECOVERY_S, MAX_SPAN_S, yaml_written
from dpsim.plan.reliability import DEFAULT_RESTART_S, FailureRates, parse_long_duration_s
from dpsim.units import parse_bandwidth_bytes_per_s
from dpsim.wording import canonical_choice
from dpsim.workload.model_ref import model_ref_next_to

POLICIES = ("packed", "spread", "rail-aligned", "topology-aware")
"""Placement policies a job may name (or give ``nodes``: a user placement)."""

MAX_JOBS = 4096
"""Jobs one mix may hold (each is predicted once per distinct configuration). Jobs on one server each
cost little: 4,096 arriving 2 s apart over 3 h took 6.8 s of CPU here (tests/benchmarks/bench_mix_scale.py);
those spanning servers are bounded apart (:data:`MAX_NETWORK_JOBS`)."""

MAX_NETWORK_JOBS = 1024
"""Jobs of one mix that span more than one server (their collectives cross the network). Every arrival or
departure measures again, step by step, each running job it shares links with, so a day of such jobs
arriving one by one is events in the square of their number. Measured here (2 cores, numba installed;
tests/benchmarks/bench_mix_scale.py: 16-GPU jobs placed spread on the fat-tree-3tier example, one arriving
every 2 s, an hour): 256 jobs 0.69 million events, 16 s of CPU; 512 jobs 2.7 million events, 60 s of CPU
(129 s wall on the loaded machine); 1,024 jobs (the limit) 10.7 million events, 235 s of CPU (281 s wall).
4,096 would be hours. Checked once the cluster's server size is known (:class:`~dpsim.mix.simulate.MixSimulation`);
4,096 one-server jobs over 3 h took 6.8 s of CPU."""

_JOB_KEYS = ("name", "model", "gpus", "strategy", "micro_batch", "precision", "tp", "pp", "ep", "cp", "tp_across_network",
             "sequence_parallel", "zero_group", "zero_impl",
             "optimizer", "bucket_cap_mb", "calibration", "start", "steps", "duration", "placement", "nodes", "checkpoint")
_PREDICT_KEYS = ("model", "strategy", "micro_batch", "precision", "tp", "pp", "ep", "cp", "tp_across_network",
                 "sequence_parallel", "zero_group", "zero_impl", "optimizer",
                 "bucket_cap_mb", "calibration")
"""A job's keys that are ``dpsim predict``'s (``calibration``: a profile of its step and collectives,
as ``--calibration`` takes it; a relative path is read next to the mix file; ``sequence_parallel``:
true or false, which a mixture of experts with ``tp`` above 1 needs, as Megatron-Core does; ``ep``:
expert parallelism, without which a mixture of experts rarely fits; ``cp``: context parallelism;
``tp_across_network``: true lets ``tp`` span servers, as ``predict`` allows it; ``zero_group`` and ``zero_impl``:
``--zero-group`` and ``--zero-impl``, without which an ``fsdp-hybrid`` job with ``tp`` or ``pp`` was refused naming
``--zero-group``, a flag the file had no key for). A job that does not fit in
its GPUs' memory is refused, as it could not start."""


def predict_flag_to_field(text: str, where: str) -> str:
    """An error of the job's ``predict`` (which names flags: ``--tp``, ``add --sequence-parallel``)
    worded with the mix file's fields (``jobs[0].tp``), which is what the user can change."""
    text = text.replace("add --sequence-parallel", f"set {where}.sequence_parallel: true")
    text = text.replace("allow it with --tp-across-network", f"allow it with {where}.tp_across_network: true")
    # A mix job has no etp (always 1): "--ep 3 x --etp 1 = 3" named a flag the file cannot set.
    text = re.sub(r" x --etp 1 = \d+", "", text)
    text = text.replace("e.g. --model ", f"e.g. {where}.model: ")  # a dense model's refusal of ep
    for key in sorted((*_PREDICT_KEYS, "gpus"), key=len, reverse=True):
        text = re.sub(r"--" + key.replace("_", "-") + r"(?![\w-])", f"{where}.{key}", text)
    return text.replace(f"an {where}.", f"a {where}.")
_TOP_KEYS = ("cluster", "horizon", "placement", "jobs", "spares", "checkpoint", "storage", "failures")
_CHECKPOINT_KEYS = ("interval", "write", "bandwidth", "restart")
_FAILURE_KEYS = ("repair", "seed", "mtbf_gpu", "mtbf_node", "mtbf_link", "mtbf_uplink", "uplink_repair", "events")
_EVENT_KEYS = ("at", "node", "link", "nic", "uplink", "cables", "repair")
_SWITCH = re.compile(r"leaf\d+\.\d+|spine\d*|core\d*|tier\d+(\.\d+)?")
"""What ``uplink:`` names: a switch below the cables (the graph's names: ``leaf3.0`` is leaf group 3's
rail-0 leaf, ``spine1`` a tier-1 block, ``core0`` a tier-2 block)."""
MAX_FAILURE_EVENTS = 100_000
"""Explicit failure events one mix may list."""
MAX_DRAWN_FAILURES = 100_000
"""Random failures one mix may draw (servers and switch cables, each kind). Each is simulated one by
one (~20 us a draw here): an MTBF of 1e-300 s drew forever, 0.01 s on 8 servers over an hour took
51 s for 2.9 million. A cluster of 2,000 servers at a 3,692-h node MTBF draws ~400 a month."""


MAX_SIMULATED_CHECKPOINTS = 100_000
"""Checkpoints one job of a mix with failures may write: each write is simulated (its start and end).
A 1-s interval over a 10-year duration was 3e8 of them (it ran for hours)."""


class DrawnFailures:
    """Counts a mix's random failures of one kind and refuses, in one line naming the MTBF fields, a
    rate that would draw more than :data:`MAX_DRAWN_FAILURES`: before the run when the mix has a
    horizon, else when the count passes it."""

    def __init__(self, rate_per_s: float, horizon_s: float | None, fields: str, what: str):
        self.rate_per_s, self.fields, self.what, self.drawn = rate_per_s, fields, what, 0
        expected = rate_per_s * horizon_s if horizon_s is not None else 0.0
        if not expected <= MAX_DRAWN_FAILURES:
            about = f"about {expected:.3g}" if math.isfinite(expected) else "over 1e308"
            raise self._error(f"the {horizon_s:g} s horizon would draw {about} of them")

    def _error(self, how: str) -> ConfigError:
        # An MTBF of 1e-308 s overflows the summed rate to inf: the line said "fail every 0 s ... about inf".
        every = 1.0 / self.rate_per_s
        often = f"every {every:.3g} s on average" if every > 0 else "more than 1e308 times a second"
        return ConfigError(f"{self.fields}: the cluster's {self.what} fail {often} and {how}; expected at most "
                           f"{MAX_DRAWN_FAILURES:,} (give longer MTBFs or a shorter horizon)")

    def count(self) -> None:
        """One more failure drawn."""
        self.drawn += 1
        if self.drawn > MAX_DRAWN_FAILURES:
            raise self._error(f"the mix drew more than {MAX_DRAWN_FAILURES:,} before its jobs ended")
DEFAULT_CHECKPOINT_BANDWIDTH_BYTES_PER_S = 10e9
"""Checkpoint write bandwidth of a job when neither it nor the write time is given: the goodput
model's assumption (:data:`dpsim.plan.reliability.DEFAULT_CHECKPOINT_BYTES_PER_S`)."""
_CLUSTER_KEYS = ("link", "topology", "gpus")


@frozen_dataclass
class CheckpointSpec:
    """How a job of a mix saves and restores its state (:class:`~dpsim.plan.reliability.CheckpointPolicy`'s
    terms; what is not given is derived when the job is placed)."""

    interval_s: float | None = None
    """Training time between checkpoints (``None``: the goodput model's optimum for the job's MTBF)."""
    write_s: float | None = None
    """Blocking write time (``None``: weights and optimizer state / :attr:`bandwidth_bytes_per_s`)."""
    bandwidth_bytes_per_s: float = DEFAULT_CHECKPOINT_BANDWIDTH_BYTES_PER_S
    """Write bandwidth of the job's checkpoint when it writes alone (writes at once share the mix's
    :attr:`MixSpec.storage_bytes_per_s`, when it is given)."""
    restart_s: float = DEFAULT_RESTART_S
    """Restart after a failure: relaunch, init, checkpoint load."""


@frozen_dataclass
class FailureEvent:
    """A failure at a given time."""

    at_s: float
    """When (seconds from the mix's start)."""
    server: int
    """The server that fails (or whose NIC link fails)."""
    component: str = "node"
    """``node``, ``link`` (the server's NIC link: NIC, cable, leaf port) or ``gpu``."""
    repair_s: float | None = None
    """Its own repair time (``None``: :attr:`FailureSpec.repair_s`)."""
    nic: int | None = None
    """Of a ``link`` failure: which of the server's NICs (``None``: NIC 0). It matters where several
    NICs are bundled behind one GPU (:mod:`dpsim.mix.outages`)."""


@frozen_dataclass
class UplinkFailure:
    """Cables between switches that fail at a given time: the jobs crossing them keep running over
    the cables left (:mod:`dpsim.mix.outages`)."""

    at_s: float
    """When (seconds from the mix's start)."""
    switch: str
    """The switch whose uplink cables fail (``leaf3.0``, ``spine1``: the lower end of the cables)."""
    cables: int = 1
    """How many of its uplink cables fail."""
    repair_s: float | None = None
    """Time until they are back (``None``: :attr:`FailureSpec.uplink_repair_s`)."""


@frozen_dataclass
class FailureSpec:
    """Failures of the mix's servers: explicit events and a random (Poisson) process."""

    repair_s: float
    """Time until a failed server (or link) is back in service."""
    rates: FailureRates = FailureRates(gpu_mtbf_s=math.inf, node_mtbf_s=math.inf, link_mtbf_s=math.inf)
    """MTBF of each component class (``inf``: no random failures of that class)."""
    seed: int = 0
    """Seed of the random process (same seed, same failures); switch cables draw from a stream of their
    own, so leaving them out draws the same server failures."""
    events: tuple[FailureEvent, ...] = ()
    """Explicit failures of servers and their NIC links, in the order given."""
    uplink_events: tuple[UplinkFailure, ...] = ()
    """Explicit failures of cables between switches, in the order given."""
    uplink_mtbf_s: tuple[tuple[str, float], ...] = ()
    """MTBF of one cable of each switch link class (``leaf-spine``...), for random failures."""
    uplink_repair_s: float | None = None
    """Time until a failed switch cable is back (``None``: :attr:`repair_s`)."""


@frozen_dataclass
class JobSpec:
    """One job of a mix."""

    name: str
    """Unique name, for reports."""
    gpus: int
    """GPUs of the job (whole servers)."""
    predict: tuple[tuple[str, Any], ...] = ()
    """:class:`~dpsim.predict.config.PredictConfig` fields of its training step (model, strategy...)."""
    start_s: float = 0.0
    """Arrival on the cluster (seconds from the mix's start)."""
    steps: int | None = None
    """Training steps it runs, then leaves (``None``: see :attr:`duration_s`)."""
    duration_s: float | None = None
    """Cluster time it holds its servers, then leaves (``None`` with no :attr:`steps`: until the horizon)."""
    placement: str = "packed"
    """Placement policy (:data:`POLICIES`), unless :attr:`nodes` is given."""
    nodes: tuple[int, ...] | None = None
    """User placement: the cluster servers it runs on, in rank order."""
    checkpoint: CheckpointSpec = CheckpointSpec()
    """Its checkpoints (used only when the mix has failures)."""

    @property
    def predict_fields(self) -> dict[str, Any]:
        """Its step's configuration as ``PredictConfig`` keywords."""
        return dict(self.predict)


@frozen_dataclass
class MixSpec:
    """Jobs sharing one cluster."""

    link: str | None = "infiniband"
    """Topology preset of the cluster (``None`` when :attr:`topology_file` is given)."""
    topology_file: str | None = None
    """A topology YAML file instead of a preset."""
    cluster_gpus: int
    """GPUs of the whole cluster."""
    jobs: tuple[JobSpec, ...]
    """The jobs, in the order given."""
    horizon_s: float | None = None
    """Cluster time simulated (``None``: until every job has left; required when a job runs to it)."""
    spares: int = 0
    """Servers held back (the highest-numbered) to replace failed ones; jobs are not placed on them."""
    failures: FailureSpec | None = None
    """Failures of servers and links (``None``: none, and no checkpoints are written)."""
    storage_bytes_per_s: float | None = None
    """Write bandwidth of the storage every job's checkpoints go to: writes at the same time share it
    max-min, each at most its own bandwidth (``None``: no shared limit, each job writes at its own)."""


def _fail(field: str, value: Any, allowed: str) -> ConfigError:
    return ConfigError(f"{field}: {_written(value)} is not valid; {allowed}")


def _written(value: Any) -> str:
    """A mix file's value as YAML writes it: ``gpus: true`` was refused as ``True`` and ``jobs:`` (empty) as
    ``None``, Python's spellings, which the file does not contain (every time, MTBF and bandwidth field too:
    ``horizon: yes`` was "True is not valid", ``interval: no`` "False")."""
    return yaml_written(value)


def _int(field: str, value: Any, minimum: int = 1, maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum or (
            maximum is not None and value > maximum):
        raise _fail(field, value, f"expected an integer >= {minimum}"
                                  + (f" and <= {maximum:,}" if maximum is not None else ""))
    return value


TIME_FORMS = "a time with its unit (90s, 10min, 4h, 1d) or a plain YAML number of seconds (90)"
"""What every time of a mix file (``horizon``, a job's ``start``, an event's ``at``, ...) takes, one rule for all: a
bare number is seconds, as the Python API's dicts have always given them; quoted text must carry its unit."""


def _seconds(field: str, value: Any, maximum: float = MAX_SPAN_S, what: str = "a century") -> float:
    try:
        s = parse_long_duration_s(value, field)
    except DpsimError as exc:
        raise ConfigError(f"{field}: {_written(value)} is not valid; expected {TIME_FORMS}") from exc
    if not math.isfinite(s):
        raise _fail(field, value, "expected a finite time, e.g. 90s, 10min, 4h, 1d")
    if s > maximum:  # past it the tables print 30-digit seconds, and a start past 2^53 s makes a step infinite
        raise _fail(field, value, f"expected a time of at most {maximum:g} s ({what})")
    return s


def _scalar(field: str, value: Any) -> Any:
    """A predict field's value: one string, number or boolean (a list or mapping is no flag's value)."""
    if isinstance(value, (list, dict)):
        raise _fail(field, value, "expected a single value (a string or a number), as its dpsim predict flag takes")
    return value


def _keys(field: str, data: Any, allowed: tuple[str, ...]) -> dict:
    if not isinstance(data, dict):
        raise _fail(field, data, f"expected a mapping with keys {', '.join(allowed)}")
    for key in data:
        if key not in allowed:
            raise ConfigError(f"{field}.{key}: unknown key; allowed: {', '.join(allowed)}")
    return data


def _job(i: int, data: Any, default_policy: str, names: set[str], default_checkpoint: CheckpointSpec) -> JobSpec:
    where = f"jobs[{i}]"
    data = _keys(where, data, _JOB_KEYS)
    name = data.get("name", f"job{i}")
    if not isinstance(name, str) or not name or len(name) > 64 or not name.isprintable():
        # isprintable: a newline or an escape sequence went raw into the tables (and split the error line).
        raise _fail(f"{where}.name", name, "expected a non-empty line of printable text, at most 64 characters")
    if name in names:
        raise _fail(f"{where}.name", name, "names must be unique within the mix")
    names.add(name)
    if "gpus" not in data:
        raise ConfigError(f"{where}.gpus: missing; give the job's GPU count (whole servers)")
    gpus = _int(f"{where}.gpus", data["gpus"])
    start = _seconds(f"{where}.start", data.get("start", 0))
    steps = _int(f"{where}.steps", data["steps"], maximum=MAX_MIX_STEPS) if data.get("steps") is not None else None
    duration = _seconds(f"{where}.duration", data["duration"]) if data.get("duration") is not None else None
    if steps is not None and duration is not None:
        raise ConfigError(f"{where}: give steps or duration, not both (steps={steps}, duration={_written(data['duration'])})")
    if duration is not None and duration <= 0:
        raise _fail(f"{where}.duration", data["duration"], "expected a time > 0")
    policy = canonical_choice(data.get("placement", default_policy), POLICIES)
    nodes = data.get("nodes")
    if nodes is not None:
        if "placement" in data:
            raise ConfigError(f"{where}: give placement or nodes, not both")
        if not isinstance(nodes, list) or not nodes:
            raise _fail(f"{where}.nodes", nodes, "expected a list of server indices")
        nodes = tuple(_int(f"{where}.nodes[{k}]", x, 0) for k, x in enumerate(nodes))
        if len(set(nodes)) != len(nodes):
            raise _fail(f"{where}.nodes", list(nodes), "a server may appear once")
        policy = "nodes"
    elif policy not in POLICIES:
        raise _fail(f"{where}.placement", policy, f"choose one of {', '.join(POLICIES)} (or give nodes)")
    predict = tuple((k, _scalar(f"{where}.{k}", data[k])) for k in _PREDICT_KEYS if k in data)
    checkpoint = _checkpoint(f"{where}.checkpoint", data["checkpoint"], default_checkpoint) \
        if "checkpoint" in data else default_checkpoint
    return JobSpec(name=name, gpus=gpus, predict=predict, start_s=start, steps=steps, duration_s=duration,
                   placement=policy, nodes=nodes, checkpoint=checkpoint)


def _bandwidth(field: str, value: Any) -> float:
    try:
        bw = parse_bandwidth_bytes_per_s(value, field)
    except DpsimError as exc:
        raise ConfigError(f"{field}: {_written(value)} is not valid; expected a bandwidth, e.g. 10GB/s") from exc
    if not (bw > 0 and math.isfinite(bw)):
        raise _fail(field, value, "expected a bandwidth > 0, e.g. 10GB/s")
    return bw


def _checkpoint(field: str, data: Any, base: CheckpointSpec) -> CheckpointSpec:
    data = _keys(field, data, _CHECKPOINT_KEYS)
    if "write" in data and "bandwidth" in data:
        raise ConfigError(f"{field}: give write or bandwidth, not both")
    out = {}
    if "interval" in data:
        out["interval_s"] = _seconds(f"{field}.interval", data["interval"])
        if out["interval_s"] <= 0:
            raise _fail(f"{field}.interval", data["interval"], "expected a time > 0, e.g. 1h")
    if "write" in data:
        out["write_s"] = _seconds(f"{field}.write", data["write"], MAX_RECOVERY_S, "a year")
    if "bandwidth" in data:
        out["bandwidth_bytes_per_s"], out["write_s"] = _bandwidth(f"{field}.bandwidth", data["bandwidth"]), None
    if "restart" in data:
        out["restart_s"] = _seconds(f"{field}.restart", data["restart"], MAX_RECOVERY_S, "a year")
    return replace(base, **out)


def _mtbf(field: str, value: Any) -> float:
    try:
        s = parse_long_duration_s(value, field)
    except DpsimError as exc:
        raise ConfigError(f"{field}: {_written(value)} is not valid; expected an MTBF with its unit, e.g. 3692h, "
                          "or none") from exc
    if not s > 0:
        raise _fail(field, value, "expected an MTBF > 0, e.g. 3692h, or none")
    if math.isfinite(s) and s > MAX_MTBF_S:
        # As --mtbf-*: named here by its key (FailureRates would name the flag, which a mix file has not).
        raise _fail(field, value, f"expected at most {MAX_MTBF_S:.4g} s (a million years), or none")
    return s


def _failures(data: Any, horizon_s: float | None) -> FailureSpec:
    data = _keys("failures", data, _FAILURE_KEYS)
    if "repair" not in data:
        raise ConfigError("failures.repair: missing; give the time a failed server or link takes to come back, "
                          "e.g. 4h")
    repair = _seconds("failures.repair", data["repair"])
    # One rule for the three repair times (this, uplink_repair, an event's repair): a time > 0. At 0 a failed
    # switch cable is back the instant it fails, so its failure changes nothing (a fault that silently does
    # nothing); a server back at once is what spares: model (a server held back replaces it). repair: 0 alone
    # was taken while uplink_repair: 0 and an event's repair: 0 were refused.
    if repair <= 0:
        raise _fail("failures.repair", data["repair"], "expected a time > 0, e.g. 4h (spares: replace a failed "
                    "server at once)")
    seed = data.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        raise _fail("failures.seed", seed, "expected an integer from 0 to 2**63-1")
    rates = FailureRates(**{f"{c}_mtbf_s": _mtbf(f"failures.mtbf_{c}", data[f"mtbf_{c}"]) if f"mtbf_{c}" in data
                            else math.inf for c in ("gpu", "node", "link")})
    uplink_mtbf = ()
    if "mtbf_uplink" in data:
        raw_mtbf = data["mtbf_uplink"]
        if not isinstance(raw_mtbf, dict) or not raw_mtbf:
            raise _fail("failures.mtbf_uplink", raw_mtbf, "expected a mapping of switch link class to MTBF per "
                        "cable, e.g. {leaf-spine: 100000h}")
        uplink_mtbf = tuple((str(c), _mtbf(f"failures.mtbf_uplink.{c}", v)) for c, v in raw_mtbf.items())
    uplink_repair = _seconds("failures.uplink_repair", data["uplink_repair"]) if "uplink_repair" in data else None
    if uplink_repair is not None and uplink_repair <= 0:
        raise _fail("failures.uplink_repair", data["uplink_repair"], "expected a time > 0, e.g. 2h")
    raw = data.get("events", [])
    if not isinstance(raw, list) or len(raw) > MAX_FAILURE_EVENTS:
        raise _fail("failures.events", raw if not isinstance(raw, list) else f"{len(raw)} events",
                    f"expected a list of at most {MAX_FAILURE_EVENTS:,} events like {{at: 2h, node: 5}}")
    events, uplinks = [], []
    seen: dict[int, FailureEvent] = {}
    for k, e in enumerate(raw):
        where = f"failures.events[{k}]"
        e = _keys(where, e, _EVENT_KEYS)
        if "at" not in e:
            raise ConfigError(f"{where}.at: missing; give the time of the failure, e.g. 2h")
        what = [c for c in ("node", "link", "uplink") if c in e]
        if len(what) != 1:
            raise ConfigError(f"{where}: give node: SERVER, link: SERVER (its NIC link) or uplink: SWITCH (cables "
                              f"between switches), one of them")
        at = _seconds(f"{where}.at", e["at"])
        own_repair = _seconds(f"{where}.repair", e["repair"]) if "repair" in e else None
        if own_repair is not None and own_repair <= 0:
            raise _fail(f"{where}.repair", e["repair"], "expected a time > 0, e.g. 30min")
        if "nic" in e and what[0] != "link":
            raise ConfigError(f"{where}.nic: {_written(e['nic'])} applies only to link: events (a server's NIC); leave it "
                              f"out of this {what[0]}: event")
        if what[0] == "uplink":
            switch = e["uplink"]
            if not isinstance(switch, str) or not _SWITCH.fullmatch(switch):
                raise _fail(f"{where}.uplink", switch, "expected a switch name such as leaf3.0, spine1 or core0")
            uplinks.append(UplinkFailure(at_s=at, switch=switch, cables=_int(f"{where}.cables", e.get("cables", 1)),
                                         repair_s=own_repair))
            continue
        if "cables" in e:
            raise ConfigError(f"{where}.cables: {_written(e['cables'])} applies only to uplink: events (cables between "
                              f"switches); leave it out of a {what[0]} failure")
        event = FailureEvent(at_s=at, server=_int(f"{where}.{what[0]}", e[what[0]], 0), component=what[0],
                             repair_s=own_repair, nic=_int(f"{where}.nic", e["nic"], 0) if "nic" in e else None)
        same = next((j for j, o in seen.items() if (o.at_s, o.server, o.component, o.nic) ==
                     (event.at_s, event.server, event.component, event.nic)), None)
        if same is not None:
            # One failure given twice (a copied line): the mix reported two failures at that moment, the second of a
            # server already down (charged to no job).
            raise ConfigError(f"{where}: repeats failures.events[{same}] ({what[0]} {event.server} at "
                              f"{event.at_s:g} s); give each failure once")
        seen[k] = event
        events.append(event)
    for k, e in enumerate(raw):
        # After every field is checked (they name the mistake first). The mix ends before such an event
        # would fire: a typo, not a no-op.
        if horizon_s is not None and _seconds(f"failures.events[{k}].at", e["at"]) >= horizon_s:
            raise _fail(f"failures.events[{k}].at", e["at"], f"it must come before the horizon ({horizon_s:g} s)")
    return FailureSpec(repair_s=repair, rates=rates, seed=seed, events=tuple(events), uplink_events=tuple(uplinks),
                       uplink_mtbf_s=uplink_mtbf, uplink_repair_s=uplink_repair)


def mix_from_dict(data: Any) -> MixSpec:
    """A :class:`MixSpec` from parsed YAML, every field checked (:class:`ConfigError` naming it)."""
    data = _keys("mix", data, _TOP_KEYS)
    if "cluster" not in data:
        raise ConfigError("cluster: missing; give cluster: {link: PRESET, gpus: N} or {topology: FILE, gpus: N}")
    cluster = _keys("cluster", data["cluster"], _CLUSTER_KEYS)
    if "link" in cluster and "topology" in cluster:
        raise ConfigError("cluster: give link or topology, not both")
    link, topology = cluster.get("link", "infiniband"), cluster.get("topology")
    for key, value in (("link", link), ("topology", topology)):
        if value is not None and not isinstance(value, str):
            raise _fail(f"cluster.{key}", value, "expected a string")
    if topology is not None and not topology.strip():
        # It was read next to the mix file: "cannot read '/dir/of/the/mix': it is a directory".
        raise _fail("cluster.topology", topology, "expected the path of a topology YAML file")
    if "gpus" not in cluster:
        raise ConfigError("cluster.gpus: missing; give the cluster's GPU count")
    cluster_gpus = _int("cluster.gpus", cluster["gpus"], maximum=MAX_GPUS)
    horizon = _seconds("horizon", data["horizon"]) if data.get("horizon") is not None else None
    if horizon is not None and horizon <= 0:
        raise _fail("horizon", data["horizon"], "expected a time > 0")
    policy = canonical_choice(data.get("placement", "packed"), POLICIES)
    if policy not in POLICIES:
        raise _fail("placement", policy, f"choose one of {', '.join(POLICIES)}")
    raw_jobs = data.get("jobs")
    if not isinstance(raw_jobs, list) or not raw_jobs or len(raw_jobs) > MAX_JOBS:
        given = (_written(raw_jobs) if not isinstance(raw_jobs, list)
                 else f"a list of {len(raw_jobs):,} jobs" if raw_jobs else "[]")
        raise ConfigError(f"jobs: {given} is not valid; expected a list of 1 to {MAX_JOBS} jobs")
    checkpoint = _checkpoint("checkpoint", data["checkpoint"], CheckpointSpec()) if "checkpoint" in data \
        else CheckpointSpec()
    spares = _int("spares", data["spares"], 0) if "spares" in data else 0
    storage = _bandwidth("storage", data["storage"]) if data.get("storage") is not None else None
    failures = _failures(data["failures"], horizon) if data.get("failures") is not None else None
    if storage is not None and failures is None:
        raise ConfigError(f"storage: {_written(data['storage'])} applies only to a mix with failures (checkpoints are "
                          f"written only then); add failures: or leave storage out")
    names: set[str] = set()
    jobs = tuple(_job(i, j, policy, names, checkpoint) for i, j in enumerate(raw_jobs))
    if failures is None:
        # As storage above: without failures no checkpoint is written, and a checkpoint: block (the mix's or a
        # job's) was dropped in silence, its blocking writes never costed.
        given = ["checkpoint"] if "checkpoint" in data else []
        given += [f"jobs[{i}].checkpoint" for i, j in enumerate(raw_jobs) if isinstance(j, dict) and "checkpoint" in j]
        if given:
            raise ConfigError(f"{given[0]}: applies only to a mix with failures (checkpoints are written only then); "
                              f"add failures: (e.g. failures: {{repair: 4h}}) or leave {given[0]} out")
    for i, job in enumerate(jobs):
        if job.gpus > cluster_gpus:
            raise _fail(f"jobs[{i}].gpus", job.gpus, f"the cluster has {cluster_gpus} GPUs")
        if horizon is None and job.steps is None and job.duration_s is None:
            raise ConfigError(f"jobs[{i}] ({job.name}): give steps or duration, or a mix horizon it runs to")
        if horizon is not None and job.start_s >= horizon:
            # Named as the file writes it (start: 2h), as failures.events[k].at is: it was the parsed 7200.0.
            raise _fail(f"jobs[{i}].start", raw_jobs[i]["start"], f"it must start before the horizon ({horizon:g} s)")
    return MixSpec(link=None if topology else link, topology_file=topology, cluster_gpus=cluster_gpus,
                   jobs=jobs, horizon_s=horizon, spares=spares, failures=failures, storage_bytes_per_s=storage)


def load_mix(path: str | Path) -> MixSpec:
    """Read and check a mix YAML file (:func:`mix_from_dict`); a relative ``cluster.topology`` is
    read next to the file."""
    spec = mix_from_dict(read_yaml_file(path, "mix file", ConfigError))
    if spec.topology_file is not None and not Path(spec.topology_file).is_absolute():
        spec = replace(spec, topology_file=str(Path(path).parent / spec.topology_file))
    jobs = tuple(replace(job, predict=tuple((k, _next_to(path, v) if k == "calibration" else
                                             model_ref_next_to(v, Path(path).parent) if k == "model" else v)
                                            for k, v in job.predict))
                 for job in spec.jobs)
    return replace(spec, jobs=jobs)


def _next_to(path: str | Path, value: Any) -> Any:
    """A profile named by a relative path is the one next to the mix file (a preset name stays)."""
    if isinstance(value, str) and value.endswith(".json") and not Path(value).is_absolute():
        return str(Path(path).parent / value)
    return value
