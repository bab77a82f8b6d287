"""The emulated cluster: namespaces, shaping, cleanup. Skips where root/iproute2/tbf are missing."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time

import pytest

from dpsim.errors import ConfigError
from dpsim.validate.testbed import (
    Testbed,
    TestbedSpec,
    list_testbeds,
    parse_rate_bits_per_s,
    probe_testbed,
)

AVAILABLE, WHY = probe_testbed()

needs_testbed = pytest.mark.skipif(not AVAILABLE, reason=WHY)


@pytest.fixture(autouse=True)
def isolated_state(tmp_path, monkeypatch):
    """Each test keeps its testbeds' state in a directory of its own (its subprocesses too), so
    `down --all` here never meets the testbeds of anyone else using this machine meanwhile."""
    import dpsim.validate.testbed as testbed

    state = tmp_path / "testbed-state"
    monkeypatch.setenv("DPSIM_TESTBED_STATE", str(state))
    monkeypatch.setattr(testbed, "STATE_DIR", state)
    return state


def _netns() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def _testbed_netns() -> set[str]:
    """Namespaces named like a testbed's (``dpsim<6 hex>-<role>``), whoever made them."""
    import re
    return {ns for ns in _netns() if re.fullmatch(r"dpsim[0-9a-f]{6}-\w+", ns)}


def test_rate_parser_and_spec_validation():
    assert parse_rate_bits_per_s("100mbit") == 100e6
    assert parse_rate_bits_per_s("3gbit") == 3e9
    with pytest.raises(ConfigError, match="--nic"):
        parse_rate_bits_per_s("fast")
    with pytest.raises(ConfigError, match="--emulate-hosts"):
        TestbedSpec(hosts=0, nic_bits_per_s=1e9)
    with pytest.raises(ConfigError, match="--racks"):
        TestbedSpec(hosts=2, nic_bits_per_s=1e9, racks=3)
    with pytest.raises(ConfigError, match="--oversubscription"):
        TestbedSpec(hosts=4, nic_bits_per_s=1e9, racks=2, rack_oversubscription=0.5)
    spec = TestbedSpec(hosts=4, nic_bits_per_s=1e9, racks=2, rack_oversubscription=4.0)
    assert [spec.rack_of(h) for h in range(4)] == [0, 0, 1, 1]
    assert spec.uplink_bits_per_s(0) == pytest.approx(0.5e9)


_RECV = """
import socket, sys, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 5555)); s.listen(1); print('ready', flush=True)
c, _ = s.accept(); n = 0; t = None; buf = bytearray(1 << 20)
while True:
    k = c.recv_into(buf)
    if not k: break
    t = t or time.time(); n += k
print(n / (time.time() - t))
"""
_SEND = """
import socket, sys, time
s = socket.create_connection((sys.argv[1], 5555)); b = b'x' * (1 << 20)
end = time.time() + float(sys.argv[2])
while time.time() < end: s.sendall(b)
s.close()
"""


def _throughput_bytes_per_s(tb: Testbed, src: int, dst: int, seconds: float = 1.5) -> float:
    srv = subprocess.Popen(tb.command(dst, [sys.executable, "-c", _RECV, tb.host_ip(dst)]),
                           stdout=subprocess.PIPE, text=True)
    try:
        assert srv.stdout.readline().strip() == "ready"  # listening: a loaded machine starts it late
        subprocess.run(tb.command(src, [sys.executable, "-c", _SEND, tb.host_ip(dst), str(seconds)]),
                       check=True, timeout=60)
        out, _ = srv.communicate(timeout=60)
    finally:
        if srv.poll() is None:
            srv.kill()
            srv.wait()
    return float(out.strip())


# A NIC that shapes nothing a Python sender can push: the unshaped baseline on the same path.
UNSHAPED_BITS_PER_S = 100e9


@pytest.mark.slow
@needs_testbed
@pytest.mark.parametrize("rate", ["100mbit", "1gbit"])
def test_links_are_shaped_to_the_rate(rate):
    """Never above the rate, and the rate reached wherever the sender could push it. A CPU-starved
    Python sender (8 CPU burners on a 2-core box, load average ~23) pushed 383 and 428 Mbit/s over
    a 1 Gbit/s link, and no more over any link; so the shaped goodput is held to the smaller of the
    rate and what the same sender pushes over the same path of an unshaped testbed next to it,
    timed before and after each shaped transfer in turn (a change of load between the moments
    moves both sides of a pair)."""
    bits = parse_rate_bits_per_s(rate)
    shaped, ratios = [], []
    with (Testbed(spec=TestbedSpec(hosts=2, nic_bits_per_s=bits)) as tb,
          Testbed(spec=TestbedSpec(hosts=2, nic_bits_per_s=UNSHAPED_BITS_PER_S)) as free):
        for order in ((free, tb), (tb, free)):
            pair = {id(t): _throughput_bytes_per_s(t, 0, 1) for t in order}
            shaped.append(pair[id(tb)])
            ratios.append(pair[id(tb)] / min(bits / 8, pair[id(free)]))
            print(f"{rate}: shaped {8e-6 * pair[id(tb)]:.0f} Mbit/s, unshaped {8e-6 * pair[id(free)]:.0f} Mbit/s")
    # TCP goodput over a shaped link: 90-100 % of the line rate (headers, slow start).
    assert max(shaped) <= 1.02 * bits / 8, shaped
    assert statistics.median(ratios) > 0.85, (shaped, ratios)


@pytest.mark.slow
@needs_testbed
def test_oversubscribed_uplink_limits_cross_rack_traffic():
    spec = TestbedSpec(hosts=4, nic_bits_per_s=400e6, racks=2, rack_oversubscription=4.0)
    with Testbed(spec=spec) as tb:
        cross = _throughput_bytes_per_s(tb, 0, 2)
        local = _throughput_bytes_per_s(tb, 0, 1)
    # Rack uplink = 2 x 400 Mbit/s / 4 = 200 Mbit/s; within a rack the NIC's 400 Mbit/s.
    assert cross == pytest.approx(200e6 / 8, rel=0.15)
    assert local == pytest.approx(400e6 / 8, rel=0.15)


@pytest.mark.slow
@needs_testbed
def test_cleanup_on_exception_and_foreign_namespaces_untouched():
    foreign = "unrelated-ns-keepme"
    subprocess.run(["ip", "netns", "add", foreign], check=True)
    try:
        with pytest.raises(RuntimeError):
            with Testbed(spec=TestbedSpec(hosts=3, nic_bits_per_s=1e9)) as tb:
                assert set(tb.namespaces) <= _netns()
                assert any(s["tag"] == tb.tag for s in list_testbeds())
                raise RuntimeError("a rank crashed")
        assert not _ours(tb.tag)
        assert foreign in _netns()
        assert not any(s["tag"] == tb.tag for s in list_testbeds())
    finally:
        subprocess.run(["ip", "netns", "del", foreign])


@pytest.mark.slow
@needs_testbed
def test_cli_up_status_down():
    from dpsim.cli.app import main

    out = subprocess.run([sys.executable, "-m", "dpsim", "testbed", "up", "--hosts", "2", "--nic", "100mbit"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    tag = out.stdout.split()[0]
    assert any(ns.startswith(tag) for ns in _netns())
    status = subprocess.run([sys.executable, "-m", "dpsim", "testbed", "status", "--json"],
                            capture_output=True, text=True, timeout=60)
    assert tag in status.stdout
    assert main(["testbed", "down", tag]) == 0
    assert not _ours(tag)


# --------------------------------------------------------------------------- leaks, ownership, signals

def _ours(tag: str) -> set[str]:
    return {ns for ns in _netns() if ns.startswith(tag)}


def _dpsim(*args, env=None, **kw):
    return subprocess.run([sys.executable, "-m", "dpsim", *args], capture_output=True, text=True, timeout=120,
                          env={**__import__("os").environ, **(env or {})}, **kw)


def _start_up(hosts: int, env=None):
    return subprocess.Popen([sys.executable, "-m", "dpsim", "testbed", "up", "--hosts", str(hosts), "--nic", "1gbit"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**__import__("os").environ, **(env or {})})


def _new_tags(before: set[str]) -> set[str]:
    return {s["tag"] for s in list_testbeds()} - before


def _wait_for_state(timeout_s: float = 30.0) -> str:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        beds = list_testbeds()
        if beds:
            return beds[0]["tag"]
        time.sleep(0.05)
    raise AssertionError("no testbed state appeared")


@pytest.mark.slow
@needs_testbed
@pytest.mark.parametrize("delay_s", [0.6, 1.0, 1.6])
def test_killed_up_leaves_nothing_down_all_cannot_find(delay_s, isolated_state):
    """SIGKILL at any moment of `testbed up`: every namespace it made is in its state (recorded
    before it is created), so `testbed down --all` removes them all."""
    import signal as sig

    proc = _start_up(24)
    time.sleep(delay_s)
    proc.send_signal(sig.SIGKILL)
    proc.wait(timeout=30)
    tags = {s["tag"] for s in list_testbeds()}
    recorded = {ns for s in list_testbeds() for ns in s["namespaces"]}
    mine = {ns for ns in _testbed_netns() if any(ns.startswith(t) for t in tags)}
    assert mine <= recorded  # nothing made and not recorded (the state is written before each namespace)
    out = _dpsim("testbed", "down", "--all")
    assert out.returncode == 0, out.stderr
    assert not any(_ours(t) for t in tags)
    assert not list_testbeds()


@pytest.mark.slow
@needs_testbed
@pytest.mark.parametrize("signame, status", [("SIGINT", 130), ("SIGTERM", 143)])
def test_interrupted_up_removes_what_it_made(signame, status):
    import signal as sig

    proc = _start_up(24)
    tag = _wait_for_state()
    time.sleep(0.3)
    proc.send_signal(getattr(sig, signame))
    _, err = proc.communicate(timeout=60)
    if proc.returncode == 0:  # it finished first: take it down and call it done
        _dpsim("testbed", "down", "--all")
        pytest.skip("testbed up finished before the signal")
    assert proc.returncode == status, err
    assert err.strip().count("\n") == 0 and "did not finish" in err
    assert not _ours(tag) and not list_testbeds()


@pytest.mark.slow
@needs_testbed
def test_down_all_spares_other_users_and_testbeds_in_use():
    import signal as sig

    tags_before = {s["tag"] for s in list_testbeds()}
    alice = _dpsim("testbed", "up", "--hosts", "2", env={"SUDO_USER": "alice-dpsim-test"})
    assert alice.returncode == 0, alice.stderr
    alice_tag = alice.stdout.split()[0]
    # a validate run holds its testbed while it uses it
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time\n"
        "from dpsim.validate.testbed import Testbed, TestbedSpec\n"
        "with Testbed(spec=TestbedSpec(hosts=2, nic_bits_per_s=1e9), kind='validate') as tb:\n"
        "    print(tb.tag, flush=True)\n"
        "    time.sleep(300)\n")], stdout=subprocess.PIPE, text=True)
    try:
        busy_tag = holder.stdout.readline().split()[0]
        out = _dpsim("testbed", "down", "--all")
        assert out.returncode == 0, out.stderr
        assert _ours(alice_tag) and _ours(busy_tag), "another user's testbed and one in use stay up"
        assert f"{busy_tag} is in use by process {holder.pid}" in out.stdout and alice_tag not in out.stdout
        refused = _dpsim("testbed", "down", busy_tag)
        assert refused.returncode == 2 and "in use by process" in refused.stderr
        refused = _dpsim("testbed", "down", alice_tag)
        assert refused.returncode == 2 and "belongs to alice-dpsim-test" in refused.stderr
        status = _dpsim("testbed", "status", "--json")
        beds = {b["tag"]: b for b in json.loads(status.stdout)["testbeds"]}
        assert beds[busy_tag]["in_use"] and beds[busy_tag]["kind"] == "validate"
        assert beds[alice_tag]["owner"] == "alice-dpsim-test" and not beds[alice_tag]["in_use"]
        # the run is killed (no cleanup of its own): its lease is gone with it, down --all takes it down
        holder.send_signal(sig.SIGKILL)
        holder.wait(timeout=30)
        out = _dpsim("testbed", "down", "--all")
        assert f"{busy_tag} down" in out.stdout and not _ours(busy_tag)
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
        _dpsim("testbed", "down", "--all", env={"SUDO_USER": "alice-dpsim-test"})
        _dpsim("testbed", "down", "--all")
    assert not _ours(alice_tag) and not _new_tags(tags_before)


@pytest.mark.slow
@needs_testbed
def test_a_dead_validate_testbed_is_reaped_by_the_next_one():
    from dpsim.validate.testbed import Testbed, TestbedSpec, current_owner

    tags_before = {s["tag"] for s in list_testbeds()}
    crashed = subprocess.run([sys.executable, "-c", (
        "import os\n"
        "from dpsim.validate.testbed import Testbed, TestbedSpec\n"
        "tb = Testbed(spec=TestbedSpec(hosts=2, nic_bits_per_s=1e9), kind='validate')\n"
        "tb.up()\n"
        "print(tb.tag, flush=True)\n"
        "os._exit(9)\n")], capture_output=True, text=True, timeout=60)  # dies without cleaning up
    dead_tag = crashed.stdout.split()[0]
    assert _ours(dead_tag)
    with Testbed(spec=TestbedSpec(hosts=2, nic_bits_per_s=1e9), kind="validate") as tb:
        assert not _ours(dead_tag) and tb.owner == current_owner()
    assert not _new_tags(tags_before)


@pytest.mark.slow
@needs_testbed
def test_a_probe_left_by_a_killed_check_is_removed():
    from dpsim.validate.testbed import check_available

    gone = subprocess.Popen(["true"])
    gone.wait()
    stale = f"dpsim-probe-{gone.pid}-abcdef"  # its process is gone
    subprocess.run(["ip", "netns", "add", stale], check=True)
    check_available()
    assert stale not in _netns()


@pytest.mark.slow
@needs_testbed
@pytest.mark.parametrize("signame, status", [("SIGTERM", 143), ("SIGHUP", 129)])
def test_a_script_holding_a_testbed_exits_with_the_signal_not_a_ctrl_c(signame, status):
    """Outside the command line (validation/ scripts, a notebook's subprocess) the testbed turns
    SIGTERM/SIGHUP into dpsim's Interrupted, not a KeyboardInterrupt (a Ctrl-C's 130): the
    script can exit 128 + the signal, and the testbed is removed on the way out."""
    import os
    import signal as sig

    # A script started from a terminal has the default dispositions; one started under
    # `nohup` (as a CI job may be) inherits SIGHUP ignored, which the testbed rightly keeps.
    script = ("import signal, sys, time\n"
              "signal.signal(signal.SIGHUP, signal.SIG_DFL)\n"
              "signal.signal(signal.SIGTERM, signal.SIG_DFL)\n"
              "from dpsim.errors import Interrupted\n"
              "from dpsim.validate.testbed import Testbed, TestbedSpec\n"
              "try:\n"
              "    with Testbed(spec=TestbedSpec(hosts=2, nic_bits_per_s=1e9)) as tb:\n"
              "        print(tb.tag, flush=True)\n"
              "        time.sleep(120)\n"
              "except Interrupted as exc:\n"
              "    sys.exit(exc.exit_status)\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=dict(os.environ))
    tag = proc.stdout.readline().split()[0]
    assert _ours(tag)
    proc.send_signal(getattr(sig, signame))
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == status, err
    assert "KeyboardInterrupt" not in err and "Traceback" not in err
    assert not _ours(tag) and not list_testbeds()
