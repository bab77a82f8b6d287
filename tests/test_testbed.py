"""The emulated cluster: namespaces, shaping, cleanup. Skips where root/iproute2/tbf are missing."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from dpsim.errors import ConfigError
from dpsim.validate.testbed import (
    Testbed,
    TestbedError,
    TestbedSpec,
    check_available,
    list_testbeds,
    parse_rate_bits_per_s,
)

try:
    check_available()
    AVAILABLE, WHY = True, ""
except TestbedError as exc:
    AVAILABLE, WHY = False, str(exc)

needs_testbed = pytest.mark.skipif(not AVAILABLE, reason=WHY)


def _netns() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


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
s.bind((sys.argv[1], 5555)); s.listen(1); c, _ = s.accept(); n = 0; t = None
while True:
    d = c.recv(1 << 20)
    if not d: break
    t = t or time.time(); n += len(d)
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
    time.sleep(0.4)
    subprocess.run(tb.command(src, [sys.executable, "-c", _SEND, tb.host_ip(dst), str(seconds)]),
                   check=True, timeout=30)
    out, _ = srv.communicate(timeout=30)
    return float(out.strip())


@needs_testbed
@pytest.mark.parametrize("rate", ["100mbit", "1gbit"])
def test_links_are_shaped_to_the_rate(rate):
    bits = parse_rate_bits_per_s(rate)
    with Testbed(spec=TestbedSpec(hosts=2, nic_bits_per_s=bits)) as tb:
        got = _throughput_bytes_per_s(tb, 0, 1)
    # TCP goodput over a shaped link: 90-100 % of the line rate (headers, slow start).
    assert 0.85 * bits / 8 < got <= 1.02 * bits / 8


@needs_testbed
def test_oversubscribed_uplink_limits_cross_rack_traffic():
    spec = TestbedSpec(hosts=4, nic_bits_per_s=400e6, racks=2, rack_oversubscription=4.0)
    with Testbed(spec=spec) as tb:
        cross = _throughput_bytes_per_s(tb, 0, 2)
        local = _throughput_bytes_per_s(tb, 0, 1)
    # Rack uplink = 2 x 400 Mbit/s / 4 = 200 Mbit/s; within a rack the NIC's 400 Mbit/s.
    assert cross == pytest.approx(200e6 / 8, rel=0.15)
    assert local == pytest.approx(400e6 / 8, rel=0.15)


@needs_testbed
def test_cleanup_on_exception_and_foreign_namespaces_untouched():
    foreign = "unrelated-ns-keepme"
    subprocess.run(["ip", "netns", "add", foreign], check=True)
    try:
        before = _netns()
        with pytest.raises(RuntimeError):
            with Testbed(spec=TestbedSpec(hosts=3, nic_bits_per_s=1e9)) as tb:
                assert set(tb.namespaces) <= _netns()
                assert any(s["tag"] == tb.tag for s in list_testbeds())
                raise RuntimeError("a rank crashed")
        assert _netns() == before
        assert foreign in _netns()
        assert not any(s["tag"] == tb.tag for s in list_testbeds())
    finally:
        subprocess.run(["ip", "netns", "del", foreign])


@needs_testbed
def test_cli_up_status_down():
    from dpsim.cli.app import main

    before = _netns()
    out = subprocess.run([sys.executable, "-m", "dpsim", "testbed", "up", "--hosts", "2", "--nic", "100mbit"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    tag = out.stdout.split()[0]
    assert any(ns.startswith(tag) for ns in _netns())
    status = subprocess.run([sys.executable, "-m", "dpsim", "testbed", "status", "--json"],
                            capture_output=True, text=True, timeout=60)
    assert tag in status.stdout
    assert main(["testbed", "down", tag]) == 0
    assert _netns() == before
