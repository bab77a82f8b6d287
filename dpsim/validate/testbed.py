"""An emulated cluster on one machine: network namespaces, veth links and tbf shaping.

Each host is a network namespace with one NIC (``eth0``), a veth whose other end sits
in a switch namespace on a Linux bridge. Both directions of every host link are shaped
with ``tc qdisc ... tbf`` to the chosen rate (the host-side qdisc shapes what the host
sends, the switch-side one what it receives). Optionally hosts are grouped in racks:
each rack is a bridge in its own namespace, joined to the core switch by an uplink
shaped to ``hosts_per_rack x rate / oversubscription``, so cross-rack traffic contends.

Processes run inside a host with ``ip netns exec``. Addresses are private (10.77.k.0/24)
and live only inside those namespaces.

Nothing leaks, even when the process building or using a testbed is killed:

- **Recorded before created.** Every namespace is written to the testbed's state file
  (``/run/dpsim-testbed/<tag>.json``, atomically) *before* ``ip netns add`` runs, so a
  kill at any moment leaves no namespace the state file does not name; :meth:`Testbed.down`
  deletes what the file names (a name that was never created is skipped) and only those:
  namespaces this module did not record are never touched.
- **Named to be found.** Every name starts with the testbed's tag (``dpsim`` + 6 hex
  digits); the probe namespace of :func:`check_available` carries its process id, and a
  probe left by a killed process is removed by the next check.
- **Owned and leased.** The state names the owner (``SUDO_USER``, else the user), the kind
  (``up``: made by ``dpsim testbed up`` to stay up; ``validate``: a run's own) and the
  process that made it. While a process builds or uses a testbed it holds a shared
  ``flock`` on ``<tag>.lock`` (the kernel drops it when the process dies, even by
  SIGKILL). :func:`down_all` (``dpsim testbed down --all``) removes only the caller's own
  testbeds that no live process holds: never another user's, never one a running
  ``validate`` uses, and a crashed run's leftovers as soon as its process is gone.
- **Cleaned on the way out.** The context manager removes its testbed on an exception,
  Ctrl-C or SIGTERM (when nobody else handles SIGTERM it is turned into an exception),
  and a new ``validate`` first reaps the caller's dead ``validate`` testbeds.

Needs root, iproute2 (``ip``, ``tc``) and the tbf qdisc; :func:`check_available` says
clearly what is missing.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import pwd
import re
import shutil
import signal
import subprocess
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

from dpsim.errors import ConfigError, DpsimError, Interrupted
from dpsim.files import write_text_atomic
from dpsim.frozen import frozen_dataclass
from dpsim.limits import short
from dpsim.processes import alive

STATE_DIR = Path(os.environ.get("DPSIM_TESTBED_STATE", "/run/dpsim-testbed"))
NAME_PREFIX = "dpsim"
TAG_PATTERN = re.compile(rf"{NAME_PREFIX}[0-9a-f]{{6}}")
"""A testbed's tag; every namespace of the testbed is named ``<tag>-<role>``."""
PROBE_PATTERN = re.compile(rf"{NAME_PREFIX}-probe-(\d+)-[0-9a-f]{{6}}")
"""The namespace :func:`check_available` makes, with the id of the process that made it."""
KINDS = ("up", "validate")
"""Who made a testbed: ``dpsim testbed up`` (stays up) or a ``validate`` run (its own)."""
MIN_BURST_BYTES = 128 * 1024
"""tbf bucket: at least 128 KiB, so a 64 KiB GSO/TSO super-packet (headers included) on a veth
always fits; no more, because the bucket is credit a real NIC does not have. It refills while
the link idles (the forward pass), and each step then sends its first bucket's worth at veth
speed: with 256 KiB the 2 x 100 Mbit convnet case measured 4-8 % faster than predicted (21 ms
of credit on a 186 ms all-reduce per step), with 128 KiB +2.3 % (2026-12-01, quiet machine)."""
BURST_SECONDS = 0.002
"""...and at least 2 ms worth of the rate, so the bucket refills smoothly at high rates."""


class TestbedError(DpsimError):
    """The emulated cluster cannot be built or used here."""

    __test__ = False  # not a pytest test class


@frozen_dataclass
class TestbedSpec:
    """Shape of an emulated cluster."""

    __test__ = False  # not a pytest test class

    hosts: int
    """Number of hosts (one namespace and one NIC each)."""
    nic_bits_per_s: float
    """Rate of every host NIC, each direction, bits/s."""
    racks: int = 1
    """Racks the hosts are spread over (consecutive hosts share a rack)."""
    rack_oversubscription: float = 1.0
    """Rack down-link to uplink ratio (1 = non-blocking)."""

    def __post_init__(self) -> None:
        # A bool is no count, and a number of another type made math.isfinite raise TypeError (nic_bits_per_s="1gbit").
        if isinstance(self.hosts, bool) or not isinstance(self.hosts, int) or self.hosts < 1 or self.hosts > 64:
            raise ConfigError(f"--emulate-hosts: {self.hosts!r} is not valid; expected an integer in 1..64")
        if (isinstance(self.nic_bits_per_s, bool) or not isinstance(self.nic_bits_per_s, (int, float))
                or not MIN_NIC_BITS_PER_S <= self.nic_bits_per_s <= MAX_NIC_BITS_PER_S):
            raise ConfigError(f"--nic: {self.nic_bits_per_s!r} bits/s is not valid; expected a number from 1e5 "
                              f"(100kbit) to 1e11 (100gbit)")
        if isinstance(self.racks, bool) or not isinstance(self.racks, int) or not 1 <= self.racks <= self.hosts:
            raise ConfigError(f"--racks: {self.racks!r} is not valid; expected an integer in 1..hosts ({self.hosts})")
        if (isinstance(self.rack_oversubscription, bool) or not isinstance(self.rack_oversubscription, (int, float))
                or not (math.isfinite(self.rack_oversubscription) and self.rack_oversubscription >= 1)):
            raise ConfigError(f"--oversubscription: {self.rack_oversubscription!r} is not valid; expected a number >= 1")

    def rack_of(self, host: int) -> int:
        """Rack of ``host`` (hosts are dealt to racks in consecutive blocks)."""
        return host * self.racks // self.hosts

    def uplink_bits_per_s(self, rack: int) -> float:
        """Rate of one rack's uplink."""
        members = sum(1 for h in range(self.hosts) if self.rack_of(h) == rack)
        return members * self.nic_bits_per_s / self.rack_oversubscription


MIN_NIC_BITS_PER_S = 1e5
"""Slowest NIC rate a testbed shapes (100 kbit/s). ASSUMED: a floor below which one step's gradients of the
smallest model take minutes; the kernel's tbf takes lower rates."""
MAX_NIC_BITS_PER_S = 1e11
"""Fastest NIC rate a testbed shapes (100 Gbit/s). ASSUMED: veth pairs in one host move a few tens of Gbit/s, so
a faster shaper is no shaper at all."""


def parse_rate_bits_per_s(raw: str, field_name: str = "--nic") -> float:
    """Parse ``100mbit``, ``1gbit``, ``3Gbit``, ``1Gbit/s``, ``500Mbps`` into bits/s (decimal prefixes; the letters in
    any case, but ``B/s``/``Bps`` is bytes and refused), within what a testbed shapes."""
    import re

    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[-+]?[0-9]+)?)\s*([kmg]?)(bit/s|bit|bps|b/s)\s*", str(raw), re.I)
    if not m:
        raise ConfigError(f"{field_name}: {short(raw)} is not a rate; use e.g. 100mbit, 1gbit, 3gbit")
    if m.group(3) in ("B/s", "Bps"):
        # "1GB/s" was refused as no rate at all; now named for what it is (bytes), which the NIC's rate is not.
        raise ConfigError(f"{field_name}: {raw!r} is bytes per second; give the NIC rate in bits, e.g. 8gbit for 1GB/s")
    value = float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2).lower()]
    # Checked here, naming the text given: TestbedSpec's check said "200000000000.0 bits/s is not valid" (and
    # "inf bits/s" for a number past a float), and "1GBIT" or "1Gbit/s" were no rate at all.
    if not MIN_NIC_BITS_PER_S <= value <= MAX_NIC_BITS_PER_S:
        raise ConfigError(f"{field_name}: {short(raw)} is not valid; expected a rate from 100kbit to 100gbit")
    return value


def _run(cmd: Sequence[str], *, check: bool = True) -> subprocess.CompletedProcess:
    res = subprocess.run(list(cmd), capture_output=True, text=True)
    if check and res.returncode != 0:
        raise TestbedError(f"testbed: `{' '.join(cmd)}` failed: {res.stderr.strip() or res.stdout.strip()}")
    return res


def check_available() -> None:
    """Raise :class:`TestbedError` saying what is missing (root, ip, tc, netns, tbf)."""
    if os.name != "posix" or os.geteuid() != 0:
        raise TestbedError("testbed: needs root (network namespaces and tc); run as root or skip emulation")
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            raise TestbedError(f"testbed: `{tool}` not found; install iproute2")
    _reap_probes()
    probe = f"{NAME_PREFIX}-probe-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    try:
        _run(["ip", "netns", "add", probe])
        _run(["ip", "netns", "exec", probe, "ip", "link", "add", "p0", "type", "veth", "peer", "name", "p1"])
        _run(["ip", "netns", "exec", probe, "tc", "qdisc", "add", "dev", "p0", "root", "tbf",
              "rate", "1mbit", "burst", "32kb", "latency", "50ms"])
    except TestbedError as exc:
        raise TestbedError(f"testbed: network namespaces, veth or the tbf qdisc are not usable here ({exc})") from None
    finally:
        _run(["ip", "netns", "del", probe], check=False)


def probe_testbed() -> tuple[bool, str]:
    """(whether the testbed can run here, why not): :func:`check_available` as a pair, for skip markers."""
    try:
        check_available()
    except TestbedError as exc:
        return False, str(exc)
    return True, ""


def _netns_names() -> set[str]:
    out = _run(["ip", "netns", "list"], check=False).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def _reap_probes() -> None:
    """Delete probe namespaces whose process is gone (a kill during :func:`check_available`)."""
    for name in _netns_names():
        m = PROBE_PATTERN.fullmatch(name)
        if m and not alive(int(m.group(1))):
            _run(["ip", "netns", "del", name], check=False)


def current_owner() -> str:
    """Who is asking: the user behind ``sudo``, else this process's user."""
    sudo = os.environ.get("SUDO_USER")
    if sudo:
        return sudo
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


@dataclass
class Testbed:
    """A running emulated cluster (use as a context manager, or :meth:`up`/:meth:`down`)."""

    __test__ = False  # not a pytest test class

    spec: TestbedSpec
    tag: str = field(default_factory=lambda: f"{NAME_PREFIX}{uuid.uuid4().hex[:6]}")
    subnet: int = 0
    namespaces: list[str] = field(default_factory=list)
    kind: str = "up"
    """``up`` or ``validate`` (:data:`KINDS`)."""
    owner: str = field(default_factory=current_owner)
    """The user it belongs to (:func:`current_owner`)."""
    pid: int = field(default_factory=os.getpid)
    """The process that made it."""
    _old_handlers: dict = field(default_factory=dict, repr=False)
    _lease: object = field(default=None, repr=False)

    # ---------------------------------------------------------------- naming
    def host_ns(self, host: int) -> str:
        """Namespace of ``host``."""
        return f"{self.tag}-h{host}"

    def host_ip(self, host: int) -> str:
        """Address of ``host``'s NIC."""
        return f"10.77.{self.subnet}.{host + 1}"

    @property
    def switch_ns(self) -> str:
        """Namespace of the core switch."""
        return f"{self.tag}-sw"

    def rack_ns(self, rack: int) -> str:
        """Namespace of a rack switch (the core switch when there is one rack)."""
        return self.switch_ns if self.spec.racks == 1 else f"{self.tag}-r{rack}"

    # ---------------------------------------------------------------- lifecycle
    def __enter__(self) -> Testbed:
        self._trap_signals()
        try:
            self.up()
        except BaseException:
            try:
                self.down()
            finally:
                self._restore_signals()
            raise
        return self

    def __exit__(self, *exc) -> None:
        try:
            self.down()
        finally:
            self._restore_signals()

    def _trap_signals(self) -> None:
        """SIGTERM and SIGHUP raise :class:`~dpsim.errors.Interrupted`, so the ``finally`` on the
        way removes the testbed and the caller can exit 128 + the signal (143, 129), not a
        Ctrl-C's 130; only where nobody handles them already (the command line does)."""
        def handler(signum, frame):
            raise Interrupted(signum)
        for sig in (signal.SIGTERM, signal.SIGHUP):
            try:
                if signal.getsignal(sig) in (signal.SIG_DFL, None):
                    self._old_handlers[sig] = signal.signal(sig, handler)
            except ValueError:  # not the main thread: the caller must clean up
                pass

    def _restore_signals(self) -> None:
        for sig, old in self._old_handlers.items():
            signal.signal(sig, old)
        self._old_handlers.clear()

    def _ns(self, name: str) -> None:
        self.namespaces.append(name)
        self._save_state()  # recorded before it exists: a kill now leaves nothing unrecorded
        _run(["ip", "netns", "add", name])
        _run(["ip", "netns", "exec", name, "ip", "link", "set", "lo", "up"])

    def _shape(self, ns: str, dev: str, bits_per_s: float) -> None:
        burst = max(MIN_BURST_BYTES, int(bits_per_s / 8 * BURST_SECONDS))
        _run(["ip", "netns", "exec", ns, "tc", "qdisc", "replace", "dev", dev, "root", "tbf",
              "rate", f"{int(bits_per_s)}bit", "burst", str(burst), "latency", "100ms"])

    def _bridge(self, ns: str) -> None:
        _run(["ip", "netns", "exec", ns, "ip", "link", "add", "br0", "type", "bridge"])
        _run(["ip", "netns", "exec", ns, "ip", "link", "set", "br0", "up"])

    def _wire(self, ns_a: str, dev_a: str, ns_b: str, dev_b: str, bits_per_s: float) -> None:
        """A veth between two namespaces, ``dev_b`` enslaved to ``ns_b``'s bridge, shaped both ways."""
        tmp_a, tmp_b = f"t{uuid.uuid4().hex[:8]}", f"t{uuid.uuid4().hex[:8]}"
        _run(["ip", "netns", "exec", ns_a, "ip", "link", "add", tmp_a, "type", "veth", "peer", "name", tmp_b,
              "netns", ns_b])
        _run(["ip", "netns", "exec", ns_a, "ip", "link", "set", tmp_a, "name", dev_a])
        _run(["ip", "netns", "exec", ns_b, "ip", "link", "set", tmp_b, "name", dev_b])
        _run(["ip", "netns", "exec", ns_b, "ip", "link", "set", dev_b, "master", "br0"])
        for ns, dev in ((ns_a, dev_a), (ns_b, dev_b)):
            _run(["ip", "netns", "exec", ns, "ip", "link", "set", dev, "up"])
            self._shape(ns, dev, bits_per_s)

    def up(self) -> None:
        """Create namespaces, bridges and shaped links (holding the testbed's lease meanwhile)."""
        if self.kind not in KINDS:
            raise ConfigError(f"testbed kind: {self.kind!r} is not valid; choose one of {', '.join(KINDS)}")
        check_available()
        if self.kind == "validate":
            reap_dead(self.owner)
        self.lease()
        self.subnet = self._free_subnet()
        self._save_state()
        spec = self.spec
        self._ns(self.switch_ns)
        self._bridge(self.switch_ns)
        if spec.racks > 1:
            for r in range(spec.racks):
                self._ns(self.rack_ns(r))
                self._bridge(self.rack_ns(r))
                # Uplink: the rack-side end joins the rack bridge; the core end the core bridge.
                self._wire(self.rack_ns(r), "up0", self.switch_ns, f"r{r}", spec.uplink_bits_per_s(r))
                _run(["ip", "netns", "exec", self.rack_ns(r), "ip", "link", "set", "up0", "master", "br0"])
        for h in range(spec.hosts):
            ns = self.host_ns(h)
            self._ns(ns)
            self._wire(ns, "eth0", self.rack_ns(spec.rack_of(h)), f"h{h}", spec.nic_bits_per_s)
            _run(["ip", "netns", "exec", ns, "ip", "addr", "add", f"{self.host_ip(h)}/24", "dev", "eth0"])

    def down(self) -> None:
        """Delete every namespace this testbed recorded (their veths go with them), then its state."""
        existing = _netns_names()
        for ns in reversed(self.namespaces):
            if ns in existing:
                _run(["ip", "netns", "del", ns], check=False)
        self.namespaces.clear()
        self._state_path().unlink(missing_ok=True)
        self.release()
        self._lock_path().unlink(missing_ok=True)

    # ---------------------------------------------------------------- lease
    def _lock_path(self) -> Path:
        return STATE_DIR / f"{self.tag}.lock"

    def lease(self) -> None:
        """Hold a shared lock on the testbed while this process builds or uses it (:func:`down_all`
        leaves a leased testbed alone; the kernel releases the lock when the process dies)."""
        if self._lease is not None:
            return
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        fh = open(self._lock_path(), "a")
        fcntl.flock(fh, fcntl.LOCK_SH)
        self._lease = fh

    def release(self) -> None:
        """Drop this process's lease."""
        if self._lease is not None:
            self._lease.close()
            self._lease = None

    # ---------------------------------------------------------------- use
    def command(self, host: int, argv: Sequence[str]) -> list[str]:
        """``argv`` wrapped to run inside ``host``'s namespace."""
        if not 0 <= host < self.spec.hosts:
            raise ConfigError(f"host: {host} is not valid; expected 0..{self.spec.hosts - 1}")
        return ["ip", "netns", "exec", self.host_ns(host), *argv]

    # ---------------------------------------------------------------- state
    def _state_path(self) -> Path:
        return STATE_DIR / f"{self.tag}.json"

    def _save_state(self) -> None:
        STATE_DIR.mkdir(parents=True, exist_ok=True)
        write_text_atomic(self._state_path(), json.dumps({
            "tag": self.tag, "subnet": self.subnet, "spec": asdict(self.spec), "namespaces": self.namespaces,
            "kind": self.kind, "owner": self.owner, "pid": self.pid, "created_unix_s": time.time()}))

    def _free_subnet(self) -> int:
        used = {s.get("subnet") for s in list_testbeds()}
        for k in range(256):
            if k not in used:
                return k
        raise TestbedError("testbed: 256 testbeds already up; run `dpsim testbed down --all`")

    @classmethod
    def from_state(cls, tag: str) -> Testbed:
        """Re-attach to a testbed created by an earlier process (``dpsim testbed up``)."""
        path = STATE_DIR / f"{tag}.json"
        try:
            state = json.loads(path.read_text())
        except (OSError, ValueError):
            raise TestbedError(f"testbed: no testbed {tag!r} is up (no state in {STATE_DIR})") from None
        return cls(spec=TestbedSpec(**state["spec"]), tag=state["tag"], subnet=state["subnet"],
                   namespaces=list(state["namespaces"]), kind=state.get("kind", "up"),
                   owner=state.get("owner", "?"), pid=int(state.get("pid", 0)))


def list_testbeds() -> list[dict]:
    """State of every testbed this machine has up, each with ``in_use`` (a live process holds it)."""
    if not STATE_DIR.exists():
        return []
    out = []
    for p in sorted(STATE_DIR.glob("*.json")):
        try:
            state = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        if not isinstance(state, dict) or not TAG_PATTERN.fullmatch(str(state.get("tag", ""))):
            continue
        state["in_use"] = in_use(state["tag"])
        out.append(state)
    return out


def in_use(tag: str) -> bool:
    """Whether a live process holds ``tag``'s lease (builds it, or runs on it)."""
    path = STATE_DIR / f"{tag}.lock"
    try:
        fh = open(path, "r")  # no lock file: nobody ever leased it (and probing creates none)
    except OSError:
        return False
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        fh.close()  # closing drops the probe lock too
    return False


def down_all(owner: str | None = None) -> tuple[list[str], list[str]]:
    """Remove ``owner``'s testbeds (default: the caller's) that no live process uses.

    Returns ``(removed tags, skipped lines)``: another user's testbeds are not touched (not
    even listed as skipped), and one in use says so.
    """
    owner = owner or current_owner()
    removed, skipped = [], []
    for state in list_testbeds():
        if state.get("owner", owner) != owner:
            continue
        if state["in_use"]:
            skipped.append(f"{state['tag']} is in use by process {state.get('pid', '?')} "
                           f"({state.get('kind', 'up')}); left up")
            continue
        Testbed.from_state(state["tag"]).down()
        removed.append(state["tag"])
    return removed, skipped


def down_tag(tag: str) -> None:
    """Remove testbed ``tag`` (``dpsim testbed down TAG``): refused while a live process uses it, or
    when it belongs to another user."""
    state = next((s for s in list_testbeds() if s["tag"] == tag), None)
    if state is None:
        raise TestbedError(f"testbed: no testbed {tag!r} is up (no state in {STATE_DIR})")
    owner = current_owner()
    if state.get("owner", owner) != owner:
        raise TestbedError(f"testbed: {tag} belongs to {state['owner']}, not {owner}; it is left up")
    if state["in_use"]:
        raise TestbedError(f"testbed: {tag} is in use by process {state.get('pid', '?')} ({state.get('kind', 'up')}); "
                           "it is left up (stop that process first)")
    Testbed.from_state(tag).down()


def reap_dead(owner: str) -> list[str]:
    """Remove ``owner``'s ``validate`` testbeds whose process is gone (a run killed by SIGKILL)."""
    removed = []
    for state in list_testbeds():
        if (state.get("kind") == "validate" and state.get("owner") == owner and not state["in_use"]
                and not alive(int(state.get("pid", 0) or 0))):
            Testbed.from_state(state["tag"]).down()
            removed.append(state["tag"])
    return removed
