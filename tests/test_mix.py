"""The job mix (dpsim mix): slowdowns against an independent flow-by-flow evaluation, placement, checks."""

from __future__ import annotations

import json
import math
from pathlib import Path

import networkx as nx
import pytest

from dpsim.cli import main
from dpsim.errors import ConfigError, DpsimError
from dpsim.mix import load_mix, mix_from_dict, simulate_mix
from dpsim.predict import PredictConfig, predict
from dpsim.topology import Topology, load_topology_file

TOPO = Path(__file__).parent / "data" / "mix" / "fat-tree-2to1.yaml"

JOB_A = {"name": "a", "model": "gpt2-medium", "gpus": 8, "nodes": [0, 2, 4, 6], "steps": 12}
JOB_B = {"name": "b", "model": "gpt2", "gpus": 6, "nodes": [1, 3, 5], "start": 0.02, "steps": 15}


def _mix(*jobs, **top):
    return mix_from_dict({"cluster": {"topology": str(TOPO), "gpus": 16}, "jobs": list(jobs), **top})


# ----------------------------------------------------------------------------- independent evaluation
def _progressive_filling(routes: list[list[tuple]], capacity: dict) -> list[float]:
    """Max-min fair rates, one link saturated per round (the textbook algorithm)."""
    rate = [0.0] * len(routes)
    frozen = [False] * len(routes)
    left = dict(capacity)
    while not all(frozen):
        users = {}
        for f, route in enumerate(routes):
            if not frozen[f]:
                for e in route:
                    users[e] = users.get(e, 0) + 1
        e_min = min(users, key=lambda e: left[e] / users[e])
        inc = left[e_min] / users[e_min]
        for f, route in enumerate(routes):
            if not frozen[f]:
                rate[f] += inc
                for e in route:
                    left[e] -= inc
        for f, route in enumerate(routes):
            if not frozen[f] and any(left[e] <= 1e-9 * capacity[e] for e in route):
                frozen[f] = True
    return rate


def _ring_flows(servers: list[int]) -> list[tuple[str, str]]:
    """NCCL's ring over 2-GPU servers with one NIC: in each server GPU1 -> GPU0, then GPU0 -> the next
    server's GPU1 (the GPU that shares its NIC's PCIe switch enters and leaves)."""
    flows = []
    for i, s in enumerate(servers):
        nxt = servers[(i + 1) % len(servers)]
        flows += [(f"n{s}.gpu1", f"n{s}.gpu0"), (f"n{s}.gpu0", f"n{nxt}.gpu1")]
    return flows


def _route(g: nx.DiGraph, no_hub: nx.DiGraph, src: str, dst: str) -> list[tuple]:
    server = src.split(".")[0]
    if server == dst.split(".")[0]:
        path = [src, f"{server}.nvswitch", dst]
    else:
        paths = list(nx.all_shortest_paths(no_hub, src, dst))
        assert len(paths) == 1, paths  # the fat tree's switch blocks are single nodes: one route
        path = paths[0]
    return list(zip(path, path[1:]))


def _independent_slowdowns(jobs: list[dict]) -> dict[str, float]:
    """Both jobs on their own clocks, every flow routed on the graph and shared by progressive filling."""
    design = load_topology_file(TOPO)
    g = Topology(spec=design, n_gpus=16).graph
    no_hub = g.subgraph([v for v in g if not v.endswith(".nvswitch")])
    capacity = {(u, v): d["capacity_bytes_per_s"] for u, v, d in g.edges(data=True)}

    def speeds(active: list[dict]) -> list[float]:
        routes, owner = [], []
        for k, job in enumerate(active):
            for s, d in _ring_flows(job["servers"]):
                routes.append(_route(g, no_hub, s, d))
                owner.append(k)
        rates = _progressive_filling(routes, capacity)
        # Every ring flow moves S / N per step: the slowest one sets the collective's pace.
        return [min(r for r, o in zip(rates, owner) if o == k) * job["ranks"] for k, job in enumerate(active)]

    for job in jobs:
        p = predict(PredictConfig(gpus=job["gpus"], link=design.name, model=job["model"]),
                    topology=Topology(spec=design, n_gpus=job["gpus"]))
        assert p.ring.algorithm == "ring"  # the flows above are the ring's
        job["ranks"] = job["gpus"]
        job["compute_s"] = p.step_time_s - p.comm_s
        job["work"] = p.comm_s * speeds([{**job, "servers": list(range(len(job["servers"])))}])[0]
        job["alone_s"] = job["compute_s"] + job["work"] / speeds([job])[0]
    now, state = 0.0, {}
    while True:
        comm = [j for j in jobs if state.get(j["name"], ("", 0))[0] == "comm"]
        rate = dict(zip((j["name"] for j in comm), speeds(comm))) if comm else {}
        nxt = []
        for j in jobs:
            st = state.get(j["name"])
            if st is None:
                nxt.append((j["start_s"], j, "arrive"))
            elif st[0] == "compute":
                nxt.append((now + st[1], j, "compute"))
            elif st[0] == "comm":
                nxt.append((now + st[1] / rate[j["name"]], j, "comm"))
        if not nxt:
            break
        t, j, what = min(nxt, key=lambda x: x[0])
        for k in jobs:
            st = state.get(k["name"])
            if st and st[0] == "compute":
                state[k["name"]] = ("compute", st[1] - (t - now))
            elif st and st[0] == "comm":
                state[k["name"]] = ("comm", st[1] - (t - now) * rate[k["name"]])
        now = t
        if what == "arrive":
            state[j["name"]] = ("compute", j["compute_s"])
            j["done"] = 0
        elif what == "compute":
            state[j["name"]] = ("comm", j["work"])
        else:
            j["done"] += 1
            if j["done"] == j["steps"]:
                state[j["name"]] = ("gone", 0)
                j["end_s"] = now
            else:
                state[j["name"]] = ("compute", j["compute_s"])
    return {j["name"]: (j["end_s"] - j["start_s"]) / j["steps"] / j["alone_s"] for j in jobs}


def test_two_jobs_on_oversubscribed_fat_tree_match_independent_flow_evaluation():
    result = simulate_mix(_mix(JOB_A, JOB_B), sample_steps=None)
    got = {j.name: j.slowdown for j in result.jobs}
    want = _independent_slowdowns([
        {"name": "a", "model": "gpt2-medium", "gpus": 8, "servers": [0, 2, 4, 6], "start_s": 0.0, "steps": 12},
        {"name": "b", "model": "gpt2", "gpus": 6, "servers": [1, 3, 5], "start_s": 0.02, "steps": 15}])
    # They share the 2:1 leaf uplinks: both are slowed, and exactly as the flows say.
    assert got["a"] > 1.01 and got["b"] > 1.01
    for name in want:
        assert got[name] == pytest.approx(want[name], rel=1e-6, abs=0)
    blamed = {j.name: j.bottlenecks[0] for j in result.jobs}
    assert blamed["a"].link_class == "leaf-spine" and blamed["a"].with_jobs == ("b",)


def test_jobs_that_share_no_link_are_not_slowed():
    # Packed: each job under its own leaves, the ring's hops between leaves on different uplinks.
    a = {**JOB_A, "nodes": [0, 1]}
    a["gpus"] = 4
    b = {**JOB_B, "nodes": [2, 3], "gpus": 4}
    result = simulate_mix(_mix(a, b), sample_steps=None)
    for j in result.jobs:
        assert j.slowdown == pytest.approx(1.0, rel=1e-12)
        assert j.alone_step_time_s == pytest.approx(j.reference_step_time_s, rel=1e-9)


def test_fast_forward_agrees_with_every_step():
    jobs = [{**JOB_A, "steps": 400}, {**JOB_B, "steps": 500}]
    exact = simulate_mix(_mix(*jobs), sample_steps=None)
    quick = simulate_mix(_mix(*jobs), sample_steps=20)
    assert quick.events < exact.events / 3
    for e, q in zip(exact.jobs, quick.jobs):
        assert q.slowdown == pytest.approx(e.slowdown, rel=0.02)


@pytest.mark.parametrize("policy, servers", [
    ("packed", (0, 1, 2)),
    ("spread", (0, 2, 4)),
    ("topology-aware", (0, 1, 2)),
])
def test_placement_policies(policy, servers):
    result = simulate_mix(_mix({"name": "a", "model": "gpt2", "gpus": 6, "steps": 2, "placement": policy}),
                          sample_steps=None)
    assert result.jobs[0].servers == servers


def test_topology_aware_keeps_a_job_under_one_leaf_after_fragmentation():
    first = {"name": "x", "model": "gpt2", "gpus": 2, "nodes": [0], "duration": "1h"}
    second = {"name": "y", "model": "gpt2", "gpus": 4, "steps": 2, "placement": "topology-aware"}
    result = simulate_mix(_mix(first, second), sample_steps=None)
    assert result.jobs[1].servers == (2, 3)  # one whole leaf, not server 1 and a second leaf


def test_allocation_counts_held_gpus():
    result = simulate_mix(_mix({"name": "a", "model": "gpt2", "gpus": 8, "duration": "10s"}, horizon="20s"),
                          sample_steps=None)
    assert result.gpu_allocation == pytest.approx(8 * 10 / (16 * 20))
    assert 0 < result.gpu_busy <= result.gpu_allocation


@pytest.mark.parametrize("jobs, top, message", [
    ([{**JOB_A, "colour": 1}], {}, "jobs[0].colour: unknown key"),
    ([{**JOB_A, "gpus": 0}], {}, "jobs[0].gpus: 0 is not valid"),
    ([{**JOB_A, "start": "5"}], {}, "jobs[0].start: '5' is not valid"),
    ([{"name": "a", "gpus": 2, "steps": 1, "placement": "random"}], {}, "jobs[0].placement: 'random'"),
    ([{"name": "a", "gpus": 2}], {}, "give steps or duration"),
    ([JOB_A, {**JOB_A}], {}, "jobs[1].name: 'a' is not valid; names must be unique"),
    ([{**JOB_A, "duration": "1h"}], {}, "give steps or duration, not both"),
    ([JOB_A], {"horizon": "-1s"}, "horizon"),
    ([JOB_A], {"placement": "best"}, "placement: 'best' is not valid"),
    # A list or mapping as a predict field reached an lru_cache key: TypeError "unhashable type" traceback.
    ([{**JOB_A, "model": ["gpt2"]}], {}, "jobs[0].model: ['gpt2'] is not valid; expected a single value"),
    ([{**JOB_A, "precision": {"a": 1}}], {}, "jobs[0].precision: {'a': 1} is not valid; expected a single value"),
    # Times past a century printed 30-digit seconds; a start of 1e300 s left a step of inf s.
    ([{**JOB_A, "start": "1e300s"}], {}, "jobs[0].start: '1e300s' is not valid; expected a time of at most"),
    ([{**JOB_A, "steps": None, "duration": "1e30h"}], {}, "jobs[0].duration: '1e30h' is not valid"),
    ([JOB_A], {"horizon": "100000d"}, "horizon: '100000d' is not valid; expected a time of at most"),
    ([{**JOB_A, "steps": 10**15}], {}, "jobs[0].steps: 1000000000000000 is not valid"),
    # A newline or an escape sequence in a job's name went raw into the tables.
    ([{**JOB_A, "name": "a\nb"}], {}, "jobs[0].name: 'a\\nb' is not valid; expected a non-empty line of printable"),
])
def test_mix_file_errors_name_the_field(jobs, top, message):
    jobs = [{k: v for k, v in j.items() if v is not None} for j in jobs]
    with pytest.raises(ConfigError) as exc:
        _mix(*jobs, **top)
    assert message in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.parametrize("jobs, message", [
    ([JOB_A, {**JOB_B, "nodes": [1, 2, 3]}], "jobs[1].nodes (b) at 0.02 s: server 2 is already taken"),
    ([JOB_A, {**JOB_B, "nodes": None, "gpus": 12, "placement": "packed"}], "needs 6 servers, only 4 of 8 are free"),
    ([{**JOB_A, "nodes": [0, 2, 4, 9]}], "jobs[0].nodes (a): server 9 does not exist"),
    ([{"name": "a", "model": "gpt2", "gpus": 2, "steps": 1, "placement": "rail-aligned"}], "rail-optimised"),
    ([{**JOB_A, "gpus": 3}], "jobs[0].gpus: 3 is not whole servers"),
    ([{**JOB_A, "model": "no-such-model"}], "jobs[0].model (a): 'no-such-model'"),
    # fuzz6: "jobs[0].ep 3 x --etp 1 = 3 ...; choose an jobs[0].ep" named a flag a mix job has no key for.
    ([{**JOB_A, "model": "mixtral-8x7b", "ep": 3}], "jobs[0].ep (a): jobs[0].ep 3 does not divide jobs[0].tp 1 x "
                                                    "jobs[0].cp 1 x 8 data-parallel replicas = 8"),
    ([{**JOB_A, "model": "mixtral-8x7b", "ep": 3}], "; choose a jobs[0].ep that divides it"),
    ([{**JOB_A, "ep": 2}], "(e.g. jobs[0].model: mixtral-8x7b)"),
])
def test_placement_and_job_errors(jobs, message):
    jobs = [{k: v for k, v in j.items() if v is not None} for j in jobs]
    with pytest.raises(DpsimError) as exc:
        simulate_mix(_mix(*jobs), sample_steps=None)
    assert message in str(exc.value)


def test_a_job_error_from_a_transformers_config_keeps_its_name_whole():
    # The job's name went after the first colon, inside the reference: "jobs[0].model transformers (a):GPT2Config".
    pytest.importorskip("transformers.utils.logging")  # the real library (the tests' stubs have no GPT2Config)
    job = {**JOB_A, "model": "transformers:GPT2Config(n_head=0)"}
    with pytest.raises(DpsimError) as exc:
        simulate_mix(_mix(job), sample_steps=None)
    assert str(exc.value).startswith("jobs[0].model transformers:GPT2Config(...) (a): n_head=0 is not valid")


def test_cluster_gpus_are_capped():
    # 100,000,000 GPUs tried to allocate a 6 GiB link array (numpy's ArrayMemoryError as a traceback).
    with pytest.raises(ConfigError, match=r"cluster\.gpus: 100000000 is not valid; expected an integer >= 1 and "
                                          r"<= 1,048,576"):
        mix_from_dict({"cluster": {"link": "infiniband", "gpus": 10**8}, "jobs": [JOB_A]})


def test_cli_json_and_bad_file(tmp_path, capsys):
    path = tmp_path / "mix.yaml"
    path.write_text(f"cluster: {{topology: {TOPO}, gpus: 16}}\njobs:\n  - {json.dumps(JOB_A)}\n  - {json.dumps(JOB_B)}\n")
    assert main(["mix", str(path), "--json", "--sample-steps", "0"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["schema"] == "dpsim.mix/1" and [j["name"] for j in data["jobs"]] == ["a", "b"]
    assert all(math.isfinite(j["slowdown"]) for j in data["jobs"])
    path.write_text("cluster: {link: infiniband, gpus: 16}\njobs: []\n")
    assert main(["mix", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "jobs:" in err


def test_load_mix_reads_topology_next_to_the_file(tmp_path):
    (tmp_path / "t.yaml").write_text(TOPO.read_text())
    (tmp_path / "m.yaml").write_text("cluster: {topology: t.yaml, gpus: 16}\njobs: [{gpus: 2, steps: 1}]\n")
    spec = load_mix(tmp_path / "m.yaml")
    assert Path(spec.topology_file) == tmp_path / "t.yaml"


def test_load_mix_reads_a_model_file_next_to_the_file(tmp_path, monkeypatch):
    # A relative builder file was looked for in the working directory, unlike the topology and the
    # calibration profiles the same file names.
    (tmp_path / "m.yaml").write_text("cluster: {link: nvlink, gpus: 16}\n"
                                     "jobs: [{model: net.py:build, gpus: 8, steps: 1}, {model: gpt2, gpus: 8, steps: 1},"
                                     " {model: os.path:join, gpus: 8, steps: 1}]\n")
    monkeypatch.chdir(tmp_path.parent)
    models = [job.predict_fields["model"] for job in load_mix(tmp_path / "m.yaml").jobs]
    assert models == [f"{tmp_path / 'net.py'}:build", "gpt2", "os.path:join"]


def _flow_by_flow(sim, placed):
    """Each job's speed and binding link from one max-min of every flow of the jobs placed on ``placed``
    (no classes, no private links left out, no vectorised bookkeeping): what ``sim.speeds`` must give."""
    import numpy as np

    from dpsim.network.maxmin import max_min_sparse

    flows = []
    for j, s in zip(sim.spec.jobs, placed):
        phase = sim.solo[j.name].phase
        gpn, place = sim.gpn, np.asarray(s)

        def on_cluster(e):
            hub = e < 0
            node = np.where(hub, -1 - e, e // gpn)
            return np.where(hub, -1 - place[node], place[node] * gpn + e % gpn)

        flows.append((*sim.net.routes(on_cluster(phase.src), on_cluster(phase.dst)), np.asarray(phase.fraction)))
    offsets = np.cumsum([0] + [len(f[2]) for f in flows])
    flow_of = np.concatenate([f[0] + o for f, o in zip(flows, offsets)])
    link_of = np.concatenate([f[1] for f in flows])
    rates = max_min_sparse(flow_of, link_of, sim.capacity, int(offsets[-1]))
    load = np.bincount(link_of, weights=rates[flow_of], minlength=len(sim.capacity))
    jobs_on = sum(np.isin(np.arange(len(sim.capacity)), f[1]).astype(int) for f in flows)
    speeds, binding = [], []
    for f, o in zip(flows, offsets):
        r = rates[o:o + len(f[2])]
        speeds.append(1.0 / float(np.max(f[2] / r)))
        on = f[1][f[0] == int(np.argmax(f[2] / r))]
        hit = on[(load[on] >= sim.capacity[on] * (1 - 1e-9)) & (jobs_on[on] > 1)]
        binding.append(int(hit[0]) if len(hit) else None)
    return speeds, binding, sum(len(f[2]) for f in flows)


TOP3 = Path(__file__).parents[1] / "topologies" / "examples" / "fat-tree-3tier.yaml"


def _ring_top3(tmp_path: Path) -> Path:
    """The 3-tier fat tree with A100 servers: no NVLink SHARP, so NCCL's ring carries every job's all-reduce and
    each of its hops crosses the 4:1 tier. On H100 servers the jobs take NVLS trees since NCCL's per-channel
    LL128 limit slowed the ring across NICs (2026-12-07), and those trees do not load that tier enough to contend."""
    path = tmp_path / "fat-tree-3tier-a100.yaml"
    text = TOP3.read_text()
    assert "\ngpu: h100\n" in text
    path.write_text(text.replace("\ngpu: h100\n", "\ngpu: a100\n", 1))
    return path


def test_flow_classes_give_the_flow_by_flow_speeds(tmp_path):
    # Jobs whose every ring hop crosses the 4:1 tier of the 3-tier rail-optimised fat tree: their flows
    # merged into classes of flows on the same links (fewer than the flows) give each job the speed and
    # binding link of a flow-by-flow max-min of all their flows at once.
    from dpsim.mix.simulate import MixSimulation

    models = ["gpt2-medium", "gpt2-xl", "gpt2-large", "gpt2"]
    jobs = [{"name": f"j{k}", "model": models[k], "gpus": 64 * (1 + k % 2), "steps": 5} for k in range(4)]
    sim = MixSimulation(mix_from_dict({"cluster": {"topology": str(_ring_top3(tmp_path)), "gpus": 2048}, "jobs": jobs}))
    assert {j.algorithm for j in sim.solo.values()} == {"ring"}
    placed = [[(m % 2) * 128 + 16 * (m // 2) + k for m in range(j.gpus // 8)] for k, j in enumerate(sim.spec.jobs)]
    traffic = [sim.traffic(j, s) for j, s in zip(sim.spec.jobs, placed)]
    speeds, binding = sim.speeds(traffic)
    want, want_binding, n_flows = _flow_by_flow(sim, placed)
    assert sum(len(t.weight) for t in traffic) < n_flows
    assert min(speeds / [t.alone_speed for t in traffic]) < 0.9  # they do contend
    assert speeds.tolist() == pytest.approx(want, rel=1e-9, abs=0)
    assert binding == want_binding


@pytest.mark.parametrize("seed", range(6))
def test_group_solve_matches_flow_by_flow_on_random_groups(seed, tmp_path):
    # Four jobs of random models and sizes at random offsets under the leaves of the 3-tier fat tree: the
    # group solve (classes, private links apart, every job's binding link found at once) gives each job
    # the speed and binding link of the flow-by-flow max-min.
    import random

    from dpsim.mix.simulate import MixSimulation

    rng = random.Random(seed)
    models = rng.sample(["gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl"], 4)
    jobs = [{"name": f"j{k}", "model": m, "gpus": rng.choice([64, 128]), "steps": 5} for k, m in enumerate(models)]
    sim = MixSimulation(mix_from_dict({"cluster": {"topology": str(_ring_top3(tmp_path)), "gpus": 2048}, "jobs": jobs}))
    assert {j.algorithm for j in sim.solo.values()} == {"ring"}
    # Each ring alternates between the cluster's halves, one server per leaf (every hop crosses the 4:1
    # tier), each job at its own random offset under the same leaves.
    offsets = rng.sample(range(4), len(jobs))
    placed = [[(m % 2) * 128 + 16 * (m // 2) + o for m in range(j.gpus // 8)] for o, j in zip(offsets, sim.spec.jobs)]
    traffic = [sim.traffic(j, s) for j, s in zip(sim.spec.jobs, placed)]
    speeds, binding = sim.speeds(traffic)
    want, want_binding, _ = _flow_by_flow(sim, placed)
    assert min(speeds / [t.alone_speed for t in traffic]) < 0.95  # they do contend
    assert speeds.tolist() == pytest.approx(want, rel=1e-9, abs=0)
    assert binding == want_binding


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_shares_without_a_solve_agree_with_the_full_solve_on_random_mixes(seed, monkeypatch):
    # Jobs that start and stop communicating on a 4:1 tier take their shares from the group they join
    # or leave where that is exact; solving every group instead gives every per-job figure alike.
    import random

    from dpsim.mix.simulate import MixSimulation

    rng = random.Random(seed)
    top = Path(__file__).parents[1] / "topologies" / "examples" / "fat-tree-3tier.yaml"
    models = ["gpt2-medium", "gpt2-large", "gpt2-xl"]
    # Each ring alternates between the two halves of the cluster: every hop crosses the 4:1 tier.
    pods = [rng.sample(range(128), 128), rng.sample(range(128, 256), 128)]
    jobs = []
    for k in range(8):
        n = rng.choice([4, 8, 12])
        jobs.append({"name": f"j{k}", "model": rng.choice(models), "gpus": 8 * n, "steps": rng.randint(8, 20),
                     "nodes": [pods[m % 2].pop() for m in range(n)], "start": rng.uniform(0, 0.5)})
    spec = mix_from_dict({"cluster": {"topology": str(top), "gpus": 2048}, "jobs": jobs})
    used = []
    shared_from = MixSimulation.shared_from

    def counted(self, *args):
        got = shared_from(self, *args)
        used.append(got is not None)
        return got

    monkeypatch.setattr(MixSimulation, "shared_from", counted)
    quick = simulate_mix(spec, sample_steps=None)
    monkeypatch.setattr(MixSimulation, "shared_from", lambda self, *args: None)
    full = simulate_mix(spec, sample_steps=None)
    assert any(used)
    assert quick.evaluations <= full.evaluations and quick.events == full.events
    for q, f in zip(quick.jobs, full.jobs):
        assert q.steps == f.steps and [b.link for b in q.bottlenecks] == [b.link for b in f.bottlenecks]
        for name in ("step_time_s", "end_s", "slowdown"):
            assert getattr(q, name) == pytest.approx(getattr(f, name), rel=1e-9, abs=0)
        for bq, bf in zip(q.bottlenecks, f.bottlenecks):
            assert bq.share == pytest.approx(bf.share, rel=1e-9, abs=0) and bq.with_jobs == bf.with_jobs


@pytest.mark.parametrize("cluster, message", [
    ({"link": "nosuch", "gpus": 16}, "cluster.link: 'nosuch' is not a preset"),
    ({"link": "infiniband", "gpus": 12}, "cluster.gpus: 12 is not whole servers of the 8 GPUs per server"),
    ({"topology": "/nonexistent-dpsim/t.yaml", "gpus": 16}, "cluster.topology: cannot read"),
])
def test_cluster_errors_name_the_mix_field_not_a_flag(cluster, message):
    # They named --link, --gpus and --topology: flags dpsim mix does not have (the file's cluster: has them).
    spec = mix_from_dict({"cluster": cluster, "jobs": [{"name": "a", "model": "gpt2", "gpus": 8, "steps": 2}]})
    with pytest.raises(DpsimError) as exc:
        simulate_mix(spec, sample_steps=None)
    assert str(exc.value).startswith(message), str(exc.value)


def test_an_empty_cluster_topology_is_refused():
    # fuzz6: it was read next to the mix file, "cannot read '/dir/of/the/mix': it is a directory".
    with pytest.raises(ConfigError, match=r"^cluster.topology: '' is not valid; expected the path of a topology YAML"):
        mix_from_dict({"cluster": {"topology": "", "gpus": 16}, "jobs": [{"name": "a", "model": "gpt2", "gpus": 8}]})


MOE_JOB = {"name": "m", "model": "qwen3-30b-a3b", "gpus": 16, "tp": 2, "ep": 8, "strategy": "zero1", "micro_batch": 1,
           "steps": 3}


def test_a_moe_job_with_tp_takes_sequence_parallel():
    # A mixture of experts with tp > 1 could not be written: the error asked for a flag mix has none of.
    with pytest.raises(ConfigError) as exc:
        simulate_mix(mix_from_dict({"cluster": {"link": "infiniband", "gpus": 32}, "jobs": [MOE_JOB]}),
                     sample_steps=None)
    text = str(exc.value)
    assert text.startswith("jobs[0].sequence_parallel (m): ") and "set jobs[0].sequence_parallel: true" in text
    assert "--" not in text, text
    result = simulate_mix(mix_from_dict({"cluster": {"link": "infiniband", "gpus": 32},
                                         "jobs": [{**MOE_JOB, "sequence_parallel": True}]}), sample_steps=None)
    alone = predict(PredictConfig(gpus=16, link="infiniband", model="qwen3-30b-a3b", tp=2, ep=8, strategy="zero1",
                                  micro_batch=1, sequence_parallel=True))
    assert result.jobs[0].reference_step_time_s == pytest.approx(alone.step_time_s)
    with pytest.raises(ConfigError, match=r"^jobs\[0\]\.sequence_parallel \(m\): 'maybe' is not valid"):
        simulate_mix(mix_from_dict({"cluster": {"link": "infiniband", "gpus": 32},
                                    "jobs": [{**MOE_JOB, "sequence_parallel": "maybe"}]}), sample_steps=None)


def test_a_job_spanning_servers_with_tp_is_told_the_mix_field_that_allows_it():
    # The error named --tp-across-network, a flag a mix file has no place for.
    job = {"name": "a", "model": "llama-2-7b", "gpus": 16, "tp": 16, "strategy": "zero1", "micro_batch": 1, "steps": 1}
    with pytest.raises(ConfigError) as exc:
        simulate_mix(mix_from_dict({"cluster": {"link": "infiniband", "gpus": 32}, "jobs": [job]}))
    assert "allow it with jobs[0].tp_across_network: true" in str(exc.value) and "--" not in str(exc.value)
    result = simulate_mix(mix_from_dict({"cluster": {"link": "infiniband", "gpus": 32},
                                         "jobs": [{**job, "tp_across_network": True}]}), sample_steps=None)
    assert result.jobs[0].reference_step_time_s > 0


def test_a_job_that_does_not_fit_in_memory_is_refused():
    # It used to share the network as if it ran: llama-2-7b under DDP needs ~149 GiB per GPU.
    with pytest.raises(ConfigError, match=r"^jobs\[0\] \(a\): does not fit in memory on 16 GPUs: .* GiB per GPU of "):
        simulate_mix(mix_from_dict({"cluster": {"link": "infiniband", "gpus": 32},
                                    "jobs": [{"name": "a", "model": "llama-2-7b", "gpus": 16, "steps": 1}]}))


def test_cluster_gpus_not_whole_servers_names_the_mix_fields():
    # The error advised "change --gpus-per-node", a flag mix does not have.
    with pytest.raises(DpsimError) as exc:
        simulate_mix(mix_from_dict({"cluster": {"link": "infiniband", "gpus": 12},
                                    "jobs": [{"name": "a", "model": "gpt2", "gpus": 4, "steps": 1}]}))
    text = str(exc.value)
    assert text.startswith("cluster.gpus: 12 is not whole servers of the 8 GPUs per server of cluster.link "
                           "'infiniband'") and "--gpus-per-node" not in text, text


def test_a_long_mix_reports_its_progress_and_the_result_does_not_depend_on_it():
    # dpsim mix showed nothing for minutes on a contended day; the hook feeds its progress line.
    spec = _mix({**JOB_A, "steps": 400}, {**JOB_B, "steps": 400})
    calls = []
    told = simulate_mix(spec, sample_steps=None, progress=lambda *x: calls.append(x))
    assert told.to_dict() == simulate_mix(spec, sample_steps=None).to_dict()
    assert calls, "a mix of over a thousand events reported no progress"
    times = [c[0] for c in calls]
    assert times == sorted(times) and all(0 < t for t in times)
    assert all(0 <= done <= jobs == 2 for _, done, jobs in calls)


def test_too_many_jobs_crossing_the_network_is_one_line_naming_the_time_cost():
    """Jobs spanning servers are events in the square of their number (tests/benchmarks/bench_mix_scale.py:
    512 such jobs about a minute of CPU, 4,096 hours): past MAX_NETWORK_JOBS the mix is refused before any job
    is predicted, in one line; as many one-server jobs are fine."""
    from dpsim.mix.spec import MAX_JOBS, MAX_NETWORK_JOBS

    assert MAX_NETWORK_JOBS < MAX_JOBS
    jobs = [{"name": f"j{j}", "model": "gpt2", "gpus": 16, "steps": 1} for j in range(MAX_NETWORK_JOBS + 1)]
    spec = mix_from_dict({"cluster": {"link": "infiniband", "gpus": 64}, "jobs": jobs})
    with pytest.raises(ConfigError) as exc:
        simulate_mix(spec)
    text = str(exc.value)
    assert "\n" not in text and text.startswith(f"jobs: {MAX_NETWORK_JOBS + 1:,} of the") and "square" in text
    assert f"at most {MAX_NETWORK_JOBS:,}" in text
    one_server = [{"name": f"j{j}", "model": "gpt2", "gpus": 8, "steps": 1, "start": f"{j}s"}
                  for j in range(MAX_NETWORK_JOBS + 1)]
    result = simulate_mix(mix_from_dict({"cluster": {"link": "infiniband", "gpus": 64}, "jobs": one_server}))
    assert len(result.jobs) == MAX_NETWORK_JOBS + 1


def test_a_layout_job_loads_the_shared_network_with_its_network_traffic_only():
    """A tp8 pp4 job's tensor-parallel all-reduces stay inside its servers' NVLink: its network phase is
    the data-parallel gradients and the pipeline sends, not the 1.35 s of tp collectives it used to carry."""
    from dpsim.mix.simulate import _solo
    from dpsim.predict.config import PredictConfig
    from dpsim.predict.run import predict
    from dpsim.topology import load_preset

    fields = (("model", "llama-3-70b"), ("tp", 8), ("pp", 4), ("global_batch", 64), ("precision", "bf16-params"))
    solo = _solo(load_preset("infiniband"), 64, fields)
    p = predict(PredictConfig(gpus=64, link="infiniband", **dict(fields)))
    assert p.layout.tp_comm_s > 10 * solo.comm_s
    assert solo.comm_s == pytest.approx(p.comm_s - p.layout.tp_comm_s - p.layout.cp_comm_s, rel=1e-12)
    # The network phase is the critical stage's (the one pacing the pipeline): its gradients and sends.
    assert solo.comm_s == pytest.approx(p.layout.stages[p.layout.critical_stage].dp_comm_s + p.layout.p2p_comm_s,
                                        rel=1e-9)
