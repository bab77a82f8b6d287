"""Contention: collectives of several jobs share links max-min; the link report names the bottleneck."""

from __future__ import annotations

import json

import pytest
from conftest import variant

from dpsim.cli import main
from dpsim.collectives.links import link_report
from dpsim.collectives.nccl import NcclCollectives
from dpsim.collectives.nccl_tuning import NcclTuning
from dpsim.errors import ConfigError
from dpsim.predict.config import PredictConfig
from dpsim.predict.run import predict
from dpsim.topology.cluster import Topology

GiB = 1 << 30


def oversubscribed(ratio: float = 8.0):
    # 4 servers per leaf group, one 400G NIC per GPU on rail leaves, leaf uplinks ratio:1.
    return variant("infiniband", fabric__nodes_per_leaf=4, fabric__oversubscription=ratio)


def ring_time(spec, jobs: int, placement: str, gpus: int = 128) -> float:
    model = NcclCollectives(Topology(spec=spec, n_gpus=gpus), algorithms=("ring",), protocols=("Simple",),
                            jobs=jobs, placement=placement)
    return model.time("all_reduce", GiB).time_s


def test_two_jobs_on_one_oversubscribed_uplink_slow_each_other():
    spec = oversubscribed()
    alone = ring_time(spec, 1, "packed")
    packed = ring_time(spec, 2, "packed")
    interleaved = ring_time(spec, 2, "interleaved")
    # Packed, each job's ring crosses each leaf uplink once per channel, as when alone.
    assert packed == pytest.approx(alone, rel=1e-9)
    # Interleaved, both jobs' rings leave every leaf group on the same rail: the uplink is
    # shared max-min, each ring gets half of it.
    assert interleaved > 1.8 * alone


def test_non_blocking_fabric_has_no_interference():
    spec = oversubscribed(1.0)
    assert ring_time(spec, 2, "interleaved") == pytest.approx(ring_time(spec, 1, "packed"), rel=1e-9)


def test_link_report_names_the_shared_uplink():
    spec = oversubscribed()
    # NCCL's own model (NcclTuning()): the fitted ramp of Simple leaves a link ~8 % idle even at 1 GiB.
    model = NcclCollectives(Topology(spec=spec, n_gpus=128), algorithms=("ring",), protocols=("Simple",),
                            jobs=2, placement="interleaved", tuning=NcclTuning())
    t = model.time("all_reduce", GiB).time_s
    report = link_report(model, [("all_reduce", GiB)], t)
    assert report.bottleneck_class == "leaf-spine"
    assert report.bottleneck[0].link[1] == "spine" and report.bottleneck[0].link[0].startswith("leaf")
    # Saturated but for the collective's latency.
    assert 0.9 < report.bottleneck[0].utilisation <= 1 + 1e-9
    assert all(u.utilisation <= 1 + 1e-9 for u in report.top)
    assert report.by_class["leaf-spine"]["max_utilisation"] == report.bottleneck[0].utilisation
    assert report.jobs == 2 and report.algorithms == {"ring/Simple": 1}


@pytest.mark.parametrize("link", ["infiniband", "ethernet", "aws-p5", "nvlink"])
def test_step_link_utilisation_never_exceeds_one(link):
    p = predict(PredictConfig(gpus=32, link=link, model="gpt2-medium", jobs=2, placement="interleaved",
                              overlap=False))
    assert p.links is not None and p.links.jobs == 2
    assert all(u.utilisation <= 1 + 1e-9 for u in p.links.top)
    assert all(c["max_utilisation"] <= 1 + 1e-9 for c in p.links.by_class.values())
    assert sum(p.links.algorithms.values()) == p.n_buckets


def test_more_jobs_are_never_faster():
    spec = oversubscribed(3.0)
    times = [ring_time(spec, j, "interleaved", gpus=64) for j in (1, 2, 4)]
    assert times == sorted(times)


def test_job_flags_are_validated():
    topo = Topology(spec=oversubscribed(), n_gpus=16)
    with pytest.raises(ConfigError, match="--jobs: 0"):
        NcclCollectives(topo, jobs=0)
    with pytest.raises(ConfigError, match="--placement: 'random'"):
        NcclCollectives(topo, jobs=2, placement="random")
    with pytest.raises(ConfigError, match="whole servers"):
        NcclCollectives(Topology(spec=oversubscribed(), n_gpus=4), jobs=2)


# ----------------------------------------------------------------------------- CLI

def test_predict_links_table_and_json(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "160")
    args = ["predict", "--gpus", "128", "--link", "infiniband", "--model", "gpt2", "--jobs", "2",
            "--placement", "interleaved", "--algo", "ring", "--no-overlap"]
    assert main(args + ["--links"]) == 0
    out, err = capsys.readouterr()
    assert err == "" and "link utilisation" in out and "busiest links" in out and "bottleneck:" in out
    assert main(args + ["--json"]) == 0
    d = json.loads(capsys.readouterr()[0])
    links = d["links"]
    assert set(links) >= {"bottleneck_class", "bottleneck", "bottleneck_count", "by_class", "top",
                          "algorithms", "jobs", "placement"}
    assert links["jobs"] == 2 and links["placement"] == "interleaved"
    assert set(links["algorithms"]) <= {"ring/LL", "ring/LL128", "ring/Simple"}
    assert d["config"]["algo"] == "ring" and d["config"]["jobs"] == 2
    b = links["bottleneck"][0]
    assert set(b) == {"link", "class", "capacity_bytes_per_s", "bytes", "busy_s", "utilisation", "links"}
    assert " -> " in b["link"] and 0 < b["utilisation"] <= 1


@pytest.mark.parametrize("args, needles", [
    (["--jobs", "0"], ["--jobs", "0"]),
    (["--placement", "spread"], ["--placement", "'spread'", "packed"]),
    (["--algo", "rings"], ["--algo", "'rings'", "ring"]),
    (["--proto", "LL64"], ["--proto", "'LL64'", "Simple"]),
    (["--link", "pcie", "--algo", "nvls"], ["--algo/--proto", "nvls"]),
])
def test_predict_bad_fabric_flags_are_one_line_errors(capsys, args, needles):
    rc = main(["predict", "--gpus", "16", *args])
    out, err = capsys.readouterr()
    assert rc == 2 and out == "" and len(err.splitlines()) == 1 and err.startswith("dpsim: error: ")
    for needle in needles:
        assert needle in err, (needle, err)


def test_collective_command_takes_algo_and_reports_choices(capsys):
    assert main(["collective", "--gpus", "16", "--link", "aws-p5", "-b", "1M", "-e", "1G", "-f", "32"]) == 0
    out = capsys.readouterr()[0]
    assert "# algorithm:" in out and "nvls_tree/Simple" in out
    assert main(["collective", "--gpus", "16", "--link", "aws-p5", "-b", "1M", "-e", "1G", "-f", "32",
                 "--algo", "ring", "--proto", "Simple", "--json"]) == 0
    d = json.loads(capsys.readouterr()[0])
    assert {(r["algorithm"], r["protocol"]) for r in d["rows"]} == {("ring", "Simple")}
    assert main(["collective", "--op", "reduce_scatter", "--algo", "tree"]) == 2
    assert "tree" in capsys.readouterr()[1]


# ----------------------------------------------------------------------------- evaluation shortcuts

@pytest.mark.parametrize("link, gpus, jobs", [("infiniband", 64, 1), ("ethernet", 48, 2), ("aws-p5", 32, 3),
                                             ("pcie", 24, 2)])
def test_evaluating_one_server_s_intra_flows_equals_the_whole_cluster(link, gpus, jobs):
    """Intra-server flows are evaluated on server 0 and copied (they share no link with
    flows between servers); evaluating every flow of every server gives the same."""
    from dpsim.topology.load import load_preset

    topo = Topology.from_spec(load_preset(link), gpus)
    fast = NcclCollectives(topo, jobs=jobs, placement="interleaved",
                           algorithms=("ring", "tree", "nvls_tree", "hierarchical", "halving_doubling"))
    slow = NcclCollectives(topo, jobs=jobs, placement="interleaved",
                           algorithms=("ring", "tree", "nvls_tree", "hierarchical", "halving_doubling"))
    slow.__dict__["_intra_is_separate"] = False
    for algo in fast.algorithms:
        if not fast.candidates("all_reduce") or algo not in {a for a, _ in fast.candidates("all_reduce")}:
            continue
        a, b = fast.plan_cost(algo, "all_reduce"), slow.plan_cost(algo, "all_reduce")
        assert a.seconds_per_byte == pytest.approx(b.seconds_per_byte, rel=1e-9), algo
        assert a.link_bytes_per_byte == pytest.approx(b.link_bytes_per_byte, rel=1e-9, abs=1e-12), algo
        assert (a.r_intra, a.r_inter) == pytest.approx((b.r_intra, b.r_inter), rel=1e-9), algo


def test_nic_message_overhead_costs_small_messages_bandwidth():
    spec = variant("infiniband", fabric__nic_message_overhead_s=5e-6)
    topo = Topology(spec=spec, n_gpus=64)
    model = NcclCollectives(topo, algorithms=("ring",), protocols=("Simple",))
    rate = spec.fabric.nic_bandwidth_bytes_per_s * spec.fabric.nic_efficiency
    assert model.facts.nic_scale(512 * 1024) == pytest.approx(1 / (1 + 5e-6 * rate / (512 * 1024)))
    plain = NcclCollectives(Topology(spec=variant("infiniband"), n_gpus=64), algorithms=("ring",),
                            protocols=("Simple",))
    for size in (1 << 20, 1 << 26, 1 << 32):
        assert model.time("all_reduce", size).time_s > plain.time("all_reduce", size).time_s


def test_nvls_spans_an_nvlink_domain_and_nvls_tree_crosses_domains():
    from dpsim.topology.spec import NvlinkDomainSpec

    spec = variant("infiniband", node__gpus_per_node=4, fabric__nics_per_node=4,
                   nvlink_domain=NvlinkDomainSpec(nodes=18, gpu_link_bandwidth_bytes_per_s=450e9, efficiency=0.822,
                                                  latency_s=3.4e-6))
    inside = NcclCollectives(Topology(spec=spec, n_gpus=72))
    assert inside.time("all_reduce", 1 << 30).algorithm == "nvls"
    assert {a for a, _ in inside.candidates("all_reduce")} == {"ring", "tree", "nvls"}
    across = NcclCollectives(Topology(spec=spec, n_gpus=144))
    assert {a for a, _ in across.candidates("all_reduce")} == {"ring", "tree", "nvls_tree"}
