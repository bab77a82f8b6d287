"""NIC transports and presets (dpsim/topology/transport.py) and predict's sensitivity to an assumed one.

Invariants: the TCP payload share follows from the header and frame sizes; a transport's
streams cap what a NIC carries; every preset is cited; a file naming a NIC preset gets its
rate, kind and transport; host memory bounds what a staged transport moves, not a
GPUDirect one's. When the NIC efficiency rests on an assumption (an ``assumed``
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
    # 2 connections x 1 socket x 4.4 GB/s (one thread's TCP rate) = 8.8 GB/s: below 100 GbE's
    # 12.5 GB/s, above 25 GbE's 3.1.
    assert effective_nic_efficiency(socket, 12.5 * GB) == pytest.approx(8.8 / 12.5)
    assert effective_nic_efficiency(socket, 3.125 * GB) == socket.wire_efficiency
    assert effective_nic_efficiency(TRANSPORTS["ib"], 50 * GB) == TRANSPORTS["ib"].wire_efficiency


def test_socket_count_and_per_socket_rate_follow_nccls_auto_detection():
    # net_socket.cc: AWS ENA 2 threads x 8 sockets, GCP gVNIC 4 x 1, any other NIC 1 socket on
    # the proxy thread. A thread's rate is shared by its sockets; a cloud may cap each flow lower.
    from dpsim.topology.transport import (
        AWS_FLOW_BYTES_PER_S,
        GCP_FLOW_BYTES_PER_S,
        SOCKET_THREAD_BYTES_PER_S,
        socket_stream_bytes_per_s,
    )

    aws, gcp, plain = TRANSPORTS["socket-aws"], TRANSPORTS["socket-gcp"], TRANSPORTS["socket"]
    assert (aws.streams_per_connection, gcp.streams_per_connection, plain.streams_per_connection) == (16, 4, 1)
    assert aws.stream_bytes_per_s == pytest.approx(SOCKET_THREAD_BYTES_PER_S / 8)
    assert aws.stream_bytes_per_s < AWS_FLOW_BYTES_PER_S
    assert gcp.stream_bytes_per_s == GCP_FLOW_BYTES_PER_S < SOCKET_THREAD_BYTES_PER_S
    assert plain.stream_bytes_per_s == SOCKET_THREAD_BYTES_PER_S
    assert socket_stream_bytes_per_s(1, 1e9) == 1e9
    # More sockets per connection carry more, until the wire binds.
    assert plain.stream_cap_bytes_per_s < gcp.stream_cap_bytes_per_s < aws.stream_cap_bytes_per_s
    assert effective_nic_efficiency(aws, 12.5 * GB) == aws.wire_efficiency


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
    # 4 x 4.4 GB/s would exceed 25 GbE's payload share: the wire bounds it.
    assert tcp.fabric.nic_efficiency == TRANSPORTS["socket"].wire_efficiency
    assert tcp.fabric.transport.name == "socket (custom)"


def test_predict_shows_the_step_at_other_efficiencies_of_an_assumed_transport(tmp_path):
    config = PredictConfig(gpus=32, topology_file=_file(tmp_path, {"nic": "100gbe-tcp"}), model="gpt2")
    p = predict(config)
    sens = p.provenance.transport_sensitivity
    assert sens is not None and sens.transport == "socket" and "4.4 GB/s" in sens.assumption
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
    # The ethernet preset leaves its efficiency to the (assumed) socket transport: it shows it too.
    assert main(["predict", "--link", "ethernet", "--gpus", "16", "--model", "gpt2", "--json"]) == 0
    assert json.loads(capsys.readouterr()[0])["provenance"]["transport_sensitivity"]["transport"] == "socket"
    assert main(["predict", "--link", "infiniband", "--gpus", "16", "--model", "gpt2", "--json"]) == 0
    assert json.loads(capsys.readouterr()[0])["provenance"]["transport_sensitivity"] is None


def _efa_cluster(nic: str, gpus: int):
    from dpsim.collectives.nccl import NcclCollectives
    from dpsim.topology.cluster import Topology

    spec = spec_from_dict({"name": "efa", "gpu": "a100", "node": {**NODE, "gpu_link_gbyte_per_s": 300},
                           "fabric": {"nic": nic, "nics_per_node": 4}})
    return NcclCollectives(Topology.from_spec(spec, gpus))


def test_efa_v1_runs_only_the_simple_protocol_across_servers():
    # aws-ofi-nccl forces NCCL_PROTO=simple where EFA cannot deliver 128-byte-aligned writes in
    # order (EFA v1, p4d/p4de); from EFA v2 (p5) on, LL and LL128 stay on.
    assert NIC_PRESETS["efa-v1"].transport == "efa-sendrecv"
    assert TRANSPORTS["efa-sendrecv"].network_protocols == ("Simple",)
    assert TRANSPORTS["efa"].network_protocols == ("LL", "LL128", "Simple")
    v1, v2 = _efa_cluster("efa-v1", 16), _efa_cluster("efa-v2", 16)
    for size in (8, 64 * 1024, 4 * 2**20, 2**30):
        assert v1.choose("all_reduce", size).protocol == "Simple"
        assert {p for _, p in v1.candidates("all_reduce")} == {"Simple"}
    assert v2.choose("all_reduce", 8).protocol == "LL"
    # Small messages pay the Simple protocol's latencies: slower than where LL may cross the NIC.
    assert v1.time("all_reduce", 8).time_s > v2.time("all_reduce", 8).time_s
    # Inside one server the NICs are not crossed: every protocol stays available.
    assert {p for _, p in _efa_cluster("efa-v1", 8).candidates("all_reduce")} == {"LL", "LL128", "Simple"}


def test_forcing_a_protocol_the_transport_forbids_names_what_is_allowed():
    from dpsim.collectives.nccl import NcclCollectives
    from dpsim.errors import ConfigError

    model = _efa_cluster("efa-v1", 16)
    forced = NcclCollectives(model.topology, protocols=("LL",))
    with pytest.raises(ConfigError, match="lets only the protocols Simple cross servers"):
        forced.time("all_reduce", 1024)


def test_the_nvls_tree_ramp_is_its_own_scope():
    # NVLS tree's 32-128 KiB chunks ramp unlike rings' and trees' 512 KiB ones across a network:
    # its ramp scope moves its Simple cost only, the network's (verbs, over IB) the others only.
    from dpsim.collectives.nccl import NcclCollectives
    from dpsim.collectives.nccl_tuning import NcclTuning
    from dpsim.topology.cluster import Topology

    spec = spec_from_dict({"name": "ib", "gpu": "h100", "node": NODE, "fabric": {"nic": "ib-ndr", "nics_per_node": 8}})
    topo = Topology.from_spec(spec, 16)
    size = 64 * 2**20

    def cost(half: dict, algorithm: str) -> float:
        tuning = NcclTuning(ramp_half_bytes=tuple(half.items()))
        return NcclCollectives(topo, tuning=tuning).cost(algorithm, "Simple", "all_reduce", size).time_s

    bare = {a: cost({}, a) for a in ("nvls_tree", "ring", "tree")}
    assert cost({"nvls_tree": 16 * 2**20}, "nvls_tree") > bare["nvls_tree"]
    assert cost({"nvls_tree": 16 * 2**20}, "ring") == bare["ring"]
    assert cost({"verbs": 16 * 2**20}, "nvls_tree") == bare["nvls_tree"]
    assert cost({"verbs": 16 * 2**20}, "tree") > bare["tree"]
    assert cost({"network": 16 * 2**20}, "tree") == bare["tree"]


def test_a_host_staged_transport_ramps_in_its_own_scope():
    # Sockets driven by helper threads (NCCL_SOCKET_NTHREADS > 0: a size exchange and a task
    # hand-off per step) ramp in their own scope. RDMA without GPUDirect only moves NCCL's
    # buffers to host memory (the GPU writes them, the NIC reads them): it ramps as the verbs
    # transport, and so does NCCL's default socket path (no helper thread, one socket that
    # the proxy thread drives).
    from dpsim.collectives.nccl import NcclCollectives
    from dpsim.topology.cluster import Topology

    def scope(fabric: dict) -> str:
        spec = spec_from_dict({"name": "x", "gpu": "h100", "node": NODE, "fabric": fabric})
        return NcclCollectives(Topology.from_spec(spec, 16)).facts.ramp_scope

    assert scope({"nic": "100gbe-tcp", "transport": {"preset": "socket", "streams_per_connection": 2}}) == "staged"
    assert scope({"nic": "100gbe-tcp", "transport": "socket-aws"}) == "staged"
    assert scope({"nic": "100gbe-tcp"}) == scope({"nic": "100gbe-tcp", "transport": "ipoib"}) == "verbs"
    assert scope({"nic": "ib-ndr", "transport": "ib-host"}) == scope({"nic": "100gbe-roce", "transport": "roce-host"}) \
        == "verbs"
    # NCCL's verbs transport (IB, RoCE: the NIC RDMA-writes into GPU memory) is not EFA's plugin.
    assert scope({"nic": "ib-ndr"}) == scope({"nic": "400gbe-roce"}) == "verbs"
    assert scope({"nic": "efa-v2"}) == "network"
    # Google's TCPX/TCPXO receive into GPU memory through their own daemon: their own scope.
    assert scope({"nic": "gpudirect-tcpxo", "nics_per_node": 8}) == scope({"nic": "gpudirect-tcpx"}) == "tcpx"
    spec = spec_from_dict({"name": "x", "gpu": "h100", "node": NODE, "fabric": {"nic": "100gbe-tcp"}})
    assert NcclCollectives(Topology.from_spec(spec, 8)).facts.ramp_scope == "node"


def test_host_memory_bounds_what_a_staged_transport_moves():
    # The socket transport crosses the host memory of the NIC's CPU socket 4 times a side per
    # byte, both directions sharing it (dpsim.topology.server): a DGX-1-era socket (4 DDR4-2133
    # channels, 68.3 GB/s) carries 68.3 / (2 x 4) = 8.5 GB/s per direction, under a 100 GbE
    # NIC's 11.8; GPUDirect NICs never touch host memory.
    from dpsim.collectives.nccl import NcclCollectives
    from dpsim.collectives.ops import bus_factor
    from dpsim.topology.cluster import Topology

    def busbw(nic: str, host_gbyte_per_s: float | None) -> float:
        node = dict(NODE, **({"host_memory_gbyte_per_s": host_gbyte_per_s} if host_gbyte_per_s else {}))
        fabric = {"nic": nic, "nics_per_node": 1}
        if nic.endswith("tcp"):  # enough sockets to fill the NIC (NVIDIA/nccl#450's settings)
            fabric["transport"] = {"preset": "socket", "streams_per_connection": 2, "connections_per_nic": 4}
        spec = spec_from_dict({"name": "x", "gpu": "h100", "node": node, "fabric": fabric})
        size = 2**32
        # A ring crosses each NIC once per direction: its bus bandwidth is what one direction carries.
        t = NcclCollectives(Topology.from_spec(spec, 16), algorithms=("ring",)).time("all_reduce", size).time_s
        return size * bus_factor("all_reduce", 16) / t

    slow_host = busbw("100gbe-tcp", 68.3)
    assert slow_host <= 68.3e9 / 8 * 1.001
    assert slow_host < 0.9 * busbw("100gbe-tcp", None)
    assert busbw("ib-ndr", 68.3) == pytest.approx(busbw("ib-ndr", None), rel=1e-9)


def test_the_aws_p4de_preset_runs_efa_v1():
    # p4de's NICs are EFA v1 (aws-hpc-tutorials): aws-ofi-nccl's send/recv path, Simple only.
    from dpsim.topology.load import load_preset

    spec = load_preset("aws-p4de")
    assert spec.fabric.transport.name == "efa-sendrecv"
    assert spec.fabric.transport.network_protocols == ("Simple",)


def test_no_ll128_across_servers_without_gpudirect():
    # NCCL enables LL128 only where the GPU reaches the NIC within PATH_PXB (PATH_PXN on sm90+);
    # a NIC without GPUDirect RDMA is reached through the CPU (PATH_PHB or worse), so sockets
    # and host-staged RDMA run LL and Simple only across servers, GPUDirect NICs all three.
    from dpsim.collectives.nccl import NcclCollectives
    from dpsim.topology.cluster import Topology

    def protocols(fabric: dict, gpus: int = 16) -> set[str]:
        spec = spec_from_dict({"name": "x", "gpu": "h100", "node": NODE, "fabric": fabric})
        return {p for _, p in NcclCollectives(Topology.from_spec(spec, gpus)).candidates("all_reduce")}

    assert protocols({"nic": "100gbe-tcp"}) == {"LL", "Simple"}
    assert protocols({"nic": "ib-ndr", "transport": "ib-host"}) == {"LL", "Simple"}
    assert protocols({"nic": "ib-ndr"}) == protocols({"nic": "400gbe-roce"}) == {"LL", "LL128", "Simple"}
    assert protocols({"nic": "100gbe-tcp"}, gpus=8) == {"LL", "LL128", "Simple"}  # inside one server


def test_socket_messages_under_64_kib_per_socket_leave_sockets_idle():
    # net_socket.cc splits a message into tasks of at least 64 KiB over the connection's
    # sockets: with 2 sockets per connection, a 64 KiB step uses one, a 128 KiB step both.
    from dpsim.collectives.nccl import NcclCollectives
    from dpsim.collectives.nccl_cost import SOCKET_MIN_TASK_BYTES
    from dpsim.topology.cluster import Topology

    fabric = {"nic": "100gbe-tcp", "nics_per_node": 1,
              "transport": {"preset": "socket", "streams_per_connection": 2, "connections_per_nic": 1}}
    spec = spec_from_dict({"name": "x", "gpu": "h100", "node": NODE, "fabric": fabric})
    model = NcclCollectives(Topology.from_spec(spec, 16), algorithms=("ring",))
    pc = model.plan_cost("ring", "all_reduce")
    size_one_task = SOCKET_MIN_TASK_BYTES / (pc.max_fraction * max(1, pc.plan.channels))
    assert model.costs.socket_tasks_scale("ring", "Simple", "all_reduce", size_one_task) == pytest.approx(0.5)
    assert model.costs.socket_tasks_scale("ring", "Simple", "all_reduce", 2 * size_one_task) == pytest.approx(1.0)
    # One socket per connection (NCCL's default off AWS/GCP): nothing to leave idle.
    single = spec_from_dict({"name": "x", "gpu": "h100", "node": NODE, "fabric": {"nic": "100gbe-tcp"}})
    assert NcclCollectives(Topology.from_spec(single, 16)).costs.socket_tasks_scale("ring", "Simple", "all_reduce", 1e3) == 1.0


def test_tcpx_and_tcpxo_run_simple_only_as_google_sets_them():
    # Google's TCPXO settings: NCCL_PROTO=Simple (AI-Hypercomputer/gpu-recipes a3mega chart).
    from dpsim.collectives.nccl import NcclCollectives
    from dpsim.topology.cluster import Topology

    assert TRANSPORTS["tcpxo"].network_protocols == TRANSPORTS["tcpx"].network_protocols == ("Simple",)
    spec = spec_from_dict({"name": "x", "gpu": "h100", "node": NODE,
                           "fabric": {"nic": "gpudirect-tcpxo", "nics_per_node": 8}})
    assert {p for _, p in NcclCollectives(Topology.from_spec(spec, 16)).candidates("all_reduce")} == {"Simple"}


def test_tcpx_payload_share_is_that_of_the_a3_high_data_vpcs_mtu():
    # dstack's a3-highgpu-8g cluster creates its four GPUDirect-TCPX data VPCs with --mtu=8244
    # (dstackai/dstack@620677d1c examples/misc/a3high-clusters/README.md): the frame TCPX sends.
    assert TRANSPORTS["tcpx"].wire_efficiency == round(tcp_payload_efficiency(8244), 4) == 0.9891
    assert any("--mtu=8244" in s for s in TRANSPORTS["tcpx"].sources)


def test_the_ethernet_preset_leaves_its_efficiency_to_the_socket_transport():
    # NCCL's default sockets (net_socket.cc: one per connection) over 100 GbE: 2 x 4.4 GB/s;
    # the same transport fills a 10 GbE NIC up to TCP's payload share, not a fixed 40 %.
    from dpsim.topology.load import load_preset

    f = load_preset("ethernet").fabric
    assert not f.efficiency_given and f.transport.name == "socket"
    assert f.nic_efficiency == pytest.approx(8.8 / 12.5)
    assert effective_nic_efficiency(f.transport, 1.25 * GB) == pytest.approx(0.94, abs=0.005)


def test_the_default_host_memory_is_one_ddr5_socket():
    # Applied per CPU socket: 8 channels x 4800 MT/s x 8 B (JEDEC DDR5-4800), not two sockets' sum.
    from dpsim.topology.spec import DEFAULT_HOST_MEMORY_BYTES_PER_S

    assert DEFAULT_HOST_MEMORY_BYTES_PER_S == pytest.approx(8 * 4800e6 * 8)
    spec = spec_from_dict({"name": "x", "gpu": "h100", "node": NODE, "fabric": {"nic": "100gbe-tcp"}})
    assert spec.node.host_memory_bandwidth_bytes_per_s == DEFAULT_HOST_MEMORY_BYTES_PER_S
