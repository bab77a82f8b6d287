"""Cables between switches that fail in a job mix (``uplink:`` events, ``mtbf_uplink``): the jobs keep
running over the cables left, the tier they cross is narrower until the repair, and the file's checks."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from dpsim.errors import ConfigError, DpsimError
from dpsim.mix import mix_from_dict, simulate_mix
from dpsim.mix.simulate import MixSimulation
from dpsim.network.tiers import TierNetwork
from dpsim.topology import Topology, load_topology_file

DATA = Path(__file__).parent / "data" / "mix"
WIDE = DATA / "fat-tree-1to1.yaml"    # two uplink cables per leaf
NARROW = DATA / "fat-tree-2to1.yaml"  # the same leaves with one of them

# a and b cross the uplinks of leaves 0 and 1 (servers 0-1 and 2-3); leaves 2 and 3 carry nobody.
A = {"name": "a", "model": "gpt2", "gpus": 4, "nodes": [0, 2], "duration": "60s"}
B = {"name": "b", "model": "gpt2", "gpus": 4, "nodes": [1, 3], "duration": "60s"}
LARGE = {"name": "m", "model": "gpt2-medium", "gpus": 4, "nodes": [0, 3], "duration": "60s"}
# A ring over servers 0, 2, 1, 3 sends two flows up each of leaves 0 and 1: alone it needs both cables.
RING = {"name": "r", "model": "gpt2-medium", "gpus": 8, "nodes": [0, 2, 1, 3], "duration": "60s"}


def _mix(*jobs, topology=WIDE, horizon="60s", **top):
    return mix_from_dict({"cluster": {"topology": str(topology), "gpus": 16}, "jobs": list(jobs), "horizon": horizon,
                          **top})


def _down(*switches, at="0s", repair="1h", cables=1):
    return {"repair": "1h", "events": [{"at": at, "uplink": s, "cables": cables, "repair": repair} for s in switches]}


def _steps(result) -> dict:
    return {j.name: j.steps for j in result.jobs}


def test_the_wide_tree_has_two_cables_per_leaf_uplink():
    sim = MixSimulation(_mix(A))
    assert [b[0] for b in sim.net.uplink_bundles()] == ["leaf0.0", "leaf1.0", "leaf2.0", "leaf3.0"]
    assert [b[4:] for b in sim.net.uplink_bundles()] == [(0, 1), (2, 3), (4, 5), (6, 7)]
    from dpsim.topology.fabric import uplink_cables
    assert uplink_cables(sim.design) == (2,) and uplink_cables(load_topology_file(NARROW)) == (1,)


def test_one_of_k_parallel_uplinks_down_is_a_tree_built_with_k_minus_1():
    # The network: every leaf losing one of its two cables has the capacities of the 2:1 tree's.
    every = ("leaf0.0", "leaf1.0", "leaf2.0", "leaf3.0")
    sim = MixSimulation(_mix(A, failures=_down(*every)))
    narrow = TierNetwork(Topology(spec=load_topology_file(NARROW), n_gpus=16)).capacity_bytes_per_s
    from dpsim.mix.outages import FabricOutages
    outages = FabricOutages(sim.net, sim.spec.failures, sim.capacity)
    outages.handle(0.0, lambda links: [])
    np.testing.assert_allclose(outages.capacity(), narrow, rtol=1e-12)
    # The mix: the same steps over the same interval, whether every step is simulated or sampled,
    # with jobs contending (a and b) or not (m alone).
    for jobs in ((A, B), (RING,), (LARGE,)):
        for sample in (None, 20):
            failed = simulate_mix(_mix(*jobs, failures=_down(*every)), sample_steps=sample)
            built = simulate_mix(_mix(*jobs, topology=NARROW), sample_steps=sample)
            for f, b in zip(failed.jobs, built.jobs):
                assert f.steps == pytest.approx(b.steps, rel=1e-9, abs=1e-9)
                assert f.step_time_s == pytest.approx(b.step_time_s, rel=1e-9)
                assert f.failures == 0 and f.restarts == 0  # nobody stops


def test_a_failure_for_part_of_the_run_equals_the_narrow_tree_over_that_part():
    # Down from 0 s to 30 s, the mix's first 30 s are the narrow tree's first 30 s.
    every = ("leaf0.0", "leaf1.0", "leaf2.0", "leaf3.0")
    failed = simulate_mix(_mix(RING, horizon="30s", failures=_down(*every, repair="30s")), sample_steps=None)
    built = simulate_mix(_mix(RING, horizon="30s", topology=NARROW), sample_steps=None)
    wide = simulate_mix(_mix(RING, horizon="30s"), sample_steps=None)
    assert _steps(failed) == pytest.approx(_steps(built), rel=1e-9)
    assert failed.jobs[0].steps < wide.jobs[0].steps * 0.99  # the ring needs both cables


def test_a_link_failure_never_speeds_up_a_job_that_crosses_it():
    slowed = 0
    for jobs in ((A,), (A, B), (LARGE,), (RING,), (A, {**B, "start": "3s"})):
        quiet = simulate_mix(_mix(*jobs), sample_steps=None)
        for switch, at, repair in (("leaf0.0", "0s", "1h"), ("leaf1.0", "5s", "20s"), ("leaf0.0", "12.5s", "3s")):
            hit = simulate_mix(_mix(*jobs, failures=_down(switch, at=at, repair=repair)), sample_steps=None)
            for q, h in zip(quiet.jobs, hit.jobs):
                assert h.steps <= q.steps * (1 + 1e-12) and h.fabric_slowdown >= 1 - 1e-12
                assert h.step_time_s == pytest.approx(q.step_time_s * h.fabric_slowdown, rel=1e-12)
                assert h.alone_step_time_s == q.alone_step_time_s  # alone: on the healthy fabric
                slowed += h.fabric_slowdown > 1.01
    assert slowed >= 5


def test_after_the_repair_the_mix_runs_as_if_nothing_had_failed():
    # The ring runs through the outage (10 s to 20 s) and leaves at 30 s; b arrives after the repair and
    # crosses the repaired leaf.
    a = {**RING, "duration": "30s"}
    b = {**B, "nodes": [0, 2], "start": "35s", "duration": "20s"}
    quiet = simulate_mix(_mix(a, b, failures={"repair": "1h"}), sample_steps=None)
    hit = simulate_mix(_mix(a, b, failures=_down("leaf0.0", at="10s", repair="10s")), sample_steps=None)
    assert hit.jobs[0].steps < quiet.jobs[0].steps
    assert hit.jobs[1].to_dict() == quiet.jobs[1].to_dict()
    # ...and the network is the healthy one again.
    sim = MixSimulation(_mix(a, b, failures=_down("leaf0.0", at="10s", repair="10s")), sample_steps=None)
    sim.run()
    assert sim.capacity is sim.net.capacity_bytes_per_s


def test_a_failed_link_no_job_crosses_changes_nothing():
    # Fast-forwarding: the outage and its repair cut the jumps short, which go on as if uncut.
    quiet = simulate_mix(_mix(A, B, failures={"repair": "1h"}), sample_steps=20)
    for switch in ("leaf2.0", "leaf3.0"):
        hit = simulate_mix(_mix(A, B, failures=_down(switch, at="7s", repair="20s")), sample_steps=20)
        assert [j.to_dict() for j in hit.jobs] == [j.to_dict() for j in quiet.jobs]
        (outage,) = hit.link_outages
        assert outage.switch == switch and outage.jobs == () and outage.cables == 1 and outage.of_cables == 2


def test_outages_name_the_jobs_that_crossed_them_also_those_arriving_while_down():
    late = {**B, "start": "10s", "duration": "20s"}
    result = simulate_mix(_mix({**A, "duration": "5s"}, late, failures=_down("leaf0.0", at="2s", repair="20s")),
                          sample_steps=None)
    (outage,) = result.link_outages
    assert outage.jobs == ("a", "b") and (outage.start_s, outage.end_s) == (2.0, 22.0)
    assert outage.servers == (0, 1) and outage.link_class == "leaf-spine" and not outage.drawn
    assert result.to_dict()["link_outages"][0]["switch"] == "leaf0.0"


def test_random_uplink_failures_reproduce_and_leave_the_server_draws_alone():
    def run(**extra):
        failures = {"repair": "30min", "mtbf_node": "1h", "seed": 3, **extra}
        return simulate_mix(_mix({**A, "duration": "3h"}, {**B, "duration": "3h"}, horizon="3h", spares=1,
                                 failures=failures), sample_steps=20)

    servers_only = run()
    one = run(mtbf_uplink={"leaf-spine": "2h"}, uplink_repair="20min")
    two = run(mtbf_uplink={"leaf-spine": "2h"}, uplink_repair="20min")
    assert one.link_outages and one.to_dict() == two.to_dict()
    assert [(f.at_s, f.server) for f in one.failures] == [(f.at_s, f.server) for f in servers_only.failures]
    assert all(o.drawn and o.end_s - o.start_s == pytest.approx(1200.0) for o in one.link_outages)
    # A switch keeps its last cable: never more than one of two down at once.
    for o in one.link_outages:
        assert not any(p is not o and p.switch == o.switch and p.start_s < o.end_s and o.start_s < p.end_s
                       for p in one.link_outages)


def test_an_event_of_its_own_repair_time_for_a_server():
    mix = _mix(A, failures={"repair": "1h", "events": [{"at": "10s", "node": 0, "repair": "5s"}]})
    a = simulate_mix(mix, sample_steps=None).jobs[0]
    assert [(s.phase, s.start_s, s.end_s) for s in a.timeline if s.phase == "down"] == [("down", 10.0, 15.0)]


def test_the_html_page_marks_the_outages(tmp_path):
    from dpsim.report.mix_html import render_mix
    page = render_mix(simulate_mix(_mix(A, B, failures=_down("leaf0.0", at="5s", repair="20s")), sample_steps=20))
    assert "switch cables down" in page and "leaf0.0" in page and "fabric slowdown" in page


@pytest.mark.parametrize("failures, message", [
    ({"events": [{"at": "1h", "uplink": "rack7"}]}, "failures.events[0].uplink: 'rack7' is not valid; expected a "
                                                    "switch name"),
    ({"events": [{"at": "1h", "uplink": 3}]}, "failures.events[0].uplink: 3 is not valid"),
    ({"events": [{"at": "1h", "uplink": "leaf0.0", "cables": 0}]}, "failures.events[0].cables: 0 is not valid"),
    ({"events": [{"at": "1h", "node": 1, "cables": 2}]}, "failures.events[0].cables: 2 applies only to uplink"),
    ({"events": [{"at": "1h", "node": 1, "uplink": "leaf0.0"}]}, "failures.events[0]: give node"),
    ({"events": [{"at": "1h", "node": 1, "repair": "0s"}]}, "failures.events[0].repair: '0s' is not valid"),
    ({"events": [{"at": "1h", "uplink": "leaf0.0", "repair": "soon"}]}, "failures.events[0].repair: 'soon'"),
    ({"mtbf_uplink": "1000h"}, "failures.mtbf_uplink: '1000h' is not valid; expected a mapping"),
    ({"mtbf_uplink": {}}, "failures.mtbf_uplink: {} is not valid; expected a mapping"),
    ({"mtbf_uplink": {"leaf-spine": "1000"}}, "failures.mtbf_uplink.leaf-spine: '1000' is not valid"),
    ({"uplink_repair": "2"}, "failures.uplink_repair: '2' is not valid"),
    ({"uplink_repair": "0s"}, "failures.uplink_repair: '0s' is not valid; expected a time > 0"),
])
def test_uplink_fields_are_checked_in_the_file(failures, message):
    with pytest.raises(ConfigError) as exc:
        _mix(A, failures={"repair": "1h", **failures})
    assert message in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.parametrize("failures, topology, message", [
    ({"events": [{"at": "1s", "uplink": "leaf9.0"}]}, WIDE,
     "failures.events: uplink 'leaf9.0' is not valid; this cluster's switches with uplinks are leaf0.0, leaf1.0"),
    ({"events": [{"at": "1s", "uplink": "leaf0.0", "cables": 2}]}, WIDE,
     "failures.events: uplink 'leaf0.0' with cables 2 is not valid; it has 2 uplink cable(s), at most 1 may fail"),
    ({"events": [{"at": "1s", "uplink": "leaf0.0"}]}, NARROW,
     "with cables 1 is not valid; it has 1 uplink cable(s), at most 0 may fail"),
    ({"mtbf_uplink": {"spine-core": "1000h"}}, WIDE,
     "failures.mtbf_uplink.spine-core: 'spine-core' is not valid; this cluster's switch link classes are leaf-spine"),
])
def test_uplink_fields_are_checked_against_the_cluster(failures, topology, message):
    with pytest.raises(DpsimError) as exc:
        simulate_mix(_mix(A, topology=topology, failures={"repair": "1h", **failures}), sample_steps=None)
    assert message in str(exc.value) and "\n" not in str(exc.value)


# ---------------------------------------------------------------- NIC ports bundled behind one GPU

BUNDLED = DATA / "fat-tree-2nic.yaml"  # two NIC ports behind each GPU


def test_a_nic_port_of_a_bundle_narrows_it_as_degrade_does_and_the_job_goes_on():
    from dpsim.mix.outages import FabricOutages
    from dpsim.network.degrade import LinkDegradation, degradation_scale
    mix = _mix(RING, topology=BUNDLED, failures={"repair": "1h", "events": [{"at": "5s", "link": 0, "nic": 1}]})
    sim = MixSimulation(mix)
    outages = FabricOutages(sim.net, mix.failures, sim.capacity)
    assert len(outages.fail_port(0, 1, 5.0, 60.0, False, lambda links: [])) == 2
    # --degrade node0.nic0 (NIC node 0: ports 0 and 1) at next to nothing left of one port.
    scale = degradation_scale(sim.net, [LinkDegradation(link="node0.nic0", capacity_fraction=1e-300)])
    np.testing.assert_allclose(outages.capacity(), sim.capacity * scale, rtol=1e-12)
    ring = simulate_mix(mix, sample_steps=None)
    (job,) = ring.jobs
    assert job.failures == 0 and job.restarts == 0 and job.fabric_slowdown > 1.0
    (outage,) = ring.link_outages
    assert (outage.switch, outage.cables, outage.of_cables, outage.servers) == ("n0.nic0", 1, 2, (0, 0))
    assert outage.jobs == ("r",) and outage.link_class == "infiniband" and not ring.failures


def test_the_last_port_of_a_bundle_stops_the_job_like_a_server_failure():
    events = [{"at": "5s", "link": 0, "nic": 0}, {"at": "6s", "link": 0, "nic": 1}]
    ring = simulate_mix(_mix(RING, topology=BUNDLED, failures={"repair": "1h", "events": events}), sample_steps=None)
    assert ring.jobs[0].failures == 1 and [f.at_s for f in ring.failures] == [6.0]
    assert [o.switch for o in ring.link_outages] == ["n0.nic0"]
    # One NIC per GPU: a NIC link failing stops the job at once.
    one = simulate_mix(_mix(RING, failures={"repair": "1h", "events": events[:1]}), sample_steps=None)
    assert one.jobs[0].failures == 1 and not one.link_outages


def test_random_nic_failures_on_bundles_degrade():
    mix = _mix({**RING, "duration": "2h"}, topology=BUNDLED, horizon="2h",
               failures={"repair": "10min", "mtbf_link": "4h", "seed": 2})
    result = simulate_mix(mix, sample_steps=20)
    assert result.link_outages and all(o.drawn and o.switch.startswith("n") for o in result.link_outages)
    assert result.to_dict() == simulate_mix(mix, sample_steps=20).to_dict()


@pytest.mark.parametrize("event, message", [
    ({"at": "1s", "node": 0, "nic": 1}, "failures.events[0].nic: 1 applies only to link: events"),
    ({"at": "1s", "link": 0, "nic": -1}, "failures.events[0].nic: -1 is not valid"),
])
def test_nic_is_checked_in_the_file(event, message):
    with pytest.raises(ConfigError) as exc:
        _mix(A, failures={"repair": "1h", "events": [event]})
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_a_cluster_under_one_leaf_has_no_uplink_to_fail():
    one_leaf = mix_from_dict({"cluster": {"topology": str(WIDE), "gpus": 4}, "horizon": "10s", "jobs": [
        {"name": "a", "model": "gpt2", "gpus": 4}], "failures": {"repair": "1h", "events": [
            {"at": "1s", "uplink": "leaf0.0"}]}})
    with pytest.raises(ConfigError, match="uplink 'leaf0.0' is not valid; this cluster has no switch tier above its "
                                          "leaves"):
        simulate_mix(one_leaf)


def test_nic_is_checked_against_the_servers():
    with pytest.raises(ConfigError, match=r"failures.events\[0\].nic: 4 is not valid; the servers have NICs 0..3"):
        simulate_mix(_mix(A, topology=BUNDLED, failures={"repair": "1h", "events": [{"at": "1s", "link": 0,
                                                                                     "nic": 4}]}))
