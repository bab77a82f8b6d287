"""NIC transports and presets (dpsim/topology/transport.py) and predict's sensitivity to an assumed one.

Invariants: the TCP payload share follows from the header and frame sizes; a transport's
streams cap what a NIC carries; every preset is cited; a file naming a NIC preset gets its
rate, kind and transport. When the NIC efficiency rests on an assumption (an ``assumed``
transport, the efficiency not written in the file), ``predict`` shows the step at other
efficiencies, and the step never grows with the efficiency.
"""

from __future__ import annotations

import json

import pytest

from dpsim.cli import main
from dpsim.predict import PredictConfig, predict
from dpsim.topology.load import spec_from_dict
from dpsim.topology.transport import (
    NIC_PRESETS,
    TRANSPORT_ASSUMPTION_NOTE,
    TRANSPORTS,
    effective_nic_efficiency,
    tcp_payload_efficiency,
)
from dpsim.units import GB

NODE = {"gpus_per_node": 8, "interconnect": "nvswitch", "gpu_link_gbyte_per_s": 450,
        "gpu_link_efficiency": 0.822, "gpu_link_latency_us": 3.4, "pcie_gbyte_per_s": 63.0}


def _file(tmp_path, fabric: dict) -> str:
    import yaml

    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump({"name": "cluster", "gpu": "h100", "node": NODE, "fabric": fabric}))
    return str(path)


def test_tcp_payload_share_follows_from_headers_and_framing():
    # (MTU - 52 B TCP/IP headers) / (MTU + 38 B Ethernet framing)
    assert tcp_payload_efficiency(1500) == pytest.approx(1448 / 1538)
    assert tcp_payload_efficiency(9000) == pytest.approx(8948 / 9038)
    assert tcp_payload_efficiency(1500) < tcp_payload_efficiency(9000) < 1


def test_socket_streams_cap_a_fast_nic_but_not_a_slow_one():
    socket = TRANSPORTS["socket"]
    # 2 connections x 1 socket x 2.06 GB/s = 4.12 GB/s: below 100 GbE's 12.5 GB/s, above 10 GbE's.
    assert effective_nic_efficiency(socket, 12.5 * GB) == pytest.approx(4.12 / 12.5)
    assert effective_nic_efficiency(socket, 1.25 * GB) == socket.wire_efficiency
    assert effective_nic_efficiency(TRANSPORTS["ib"], 50 * GB) == TRANSPORTS["ib"].wire_efficiency


def test_every_preset_is_cited_and_assumptions_are_named():
    for name, t in TRANSPORTS.items():
        assert t.sources, name
        assert 0 < t.wire_efficiency <= 1
        assert (t.host_memory_passes == 0) == t.gpudirect, name
        if t.assumed:
            assert name in TRANSPORT_ASSUMPTION_NOTE
    for name, nic in NIC_PRESETS.items():
        assert nic.transport in TRANSPORTS and nic.source, name


def test_a_nic_preset_fills_rate_kind_and_transport():
    spec = spec_from_dict({"name": "x", "gpu": "h100", "node": NODE, "fabric": {"nic": "ib-ndr"}})
    f = spec.fabric
    assert f.kind == "infiniband" and f.nic == "ib-ndr" and f.transport.name == "ib"
    assert f.nic_bandwidth_bytes_per_s == pytest.approx(50 * GB)
    assert f.nic_efficiency == 0.97 and not f.efficiency_given
    tcp = spec_from_dict({"name": "x", "gpu": "h100", "node": NODE,
                          "fabric": {"nic": "25gbe-tcp", "transport": {"preset": "socket", "connections_per_nic": 4}}})
    # 4 x 2.06 GB/s would exceed 25 GbE's payload share: the wire bounds it.
    assert tcp.fabric.nic_efficiency == TRANSPORTS["socket"].wire_efficiency
    assert tcp.fabric.transport.name == "socket (custom)"


def test_predict_shows_the_step_at_other_efficiencies_of_an_assumed_transport(tmp_path):
    config = PredictConfig(gpus=32, topology_file=_file(tmp_path, {"nic": "100gbe-tcp"}), model="gpt2")
    p = predict(config)
    sens = p.provenance.transport_sensitivity
    assert sens is not None and sens.transport == "socket" and "2.06 GB/s" in sens.assumption
    effs = [q.nic_efficiency for q in sens.points]
    steps = [q.step_time_s for q in sens.points]
    assert effs == sorted(effs) and len(effs) == 3
    assert [q.used for q in sens.points] == [False, True, False]
    assert steps[1] == p.step_time_s
    assert steps[0] >= steps[1] >= steps[2]  # more bandwidth is never slower
    assert steps[0] > steps[2]  # and this job is network-bound enough to show it


@pytest.mark.parametrize("fabric, gpus", [
    ({"nic": "100gbe-tcp", "nic_efficiency": 0.4}, 32),  # measured, written in the file
    ({"nic": "ib-ndr", "nics_per_node": 8}, 32),  # IB: not an assumption
    ({"nic": "100gbe-tcp"}, 8),  # one server: no NIC crossed
])
def test_no_sensitivity_when_the_efficiency_is_not_an_assumption(tmp_path, fabric, gpus):
    p = predict(PredictConfig(gpus=gpus, topology_file=_file(tmp_path, fabric), model="gpt2"))
    assert p.provenance.transport_sensitivity is None


def test_sensitivity_in_json_and_table(tmp_path, capsys):
    path = _file(tmp_path, {"nic": "100gbe-tcp"})
    assert main(["predict", "--topology", path, "--gpus", "16", "--model", "gpt2", "--json"]) == 0
    block = json.loads(capsys.readouterr()[0])["provenance"]["transport_sensitivity"]
    assert block["transport"] == "socket" and [q["used"] for q in block["points"]] == [False, True, False]
    assert main(["predict", "--topology", path, "--gpus", "16", "--model", "gpt2"]) == 0
    out = capsys.readouterr()[0]
    assert "transport" in out and "(used)" in out
    assert main(["predict", "--link", "ethernet", "--gpus", "16", "--model", "gpt2", "--json"]) == 0
    assert json.loads(capsys.readouterr()[0])["provenance"]["transport_sensitivity"] is None
