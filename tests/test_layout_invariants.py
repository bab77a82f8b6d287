"""Invariants of the layout path's time and communication accounting, over a grid of catalog models
and layouts: dense Llama-3-8B/70B with tensor, pipeline, context and data parallelism, and
mixtures of experts (Mixtral-8x7B, Qwen3-30B-A3B, DeepSeek-V3) with expert and expert-tensor
parallelism.

What must hold whatever the model's constants: the step is no shorter than any stage's work; the
reported communication total is the sum of its reported parts (tensor, context, expert all-to-all,
expert-tensor, point-to-point and data-parallel), none negative, and what compute waits for is no
more than what there is; an all-to-all moves what its ranks send, no byte more or less; the same
layout gives the same numbers through ``dpsim predict --json``, the Python API and a sweep; MFU is a
fraction. And the defects these found: DualPipe's stage counted both chunks for every micro-batch,
a dense first stage hid where the all-to-alls are, the JSON lacked two parts of the totals, and
the one-GPU step (and the planner's compute) held the recomputed forward's collective waits.
"""

from __future__ import annotations

import contextlib
import io
import json

import numpy as np
import pytest

from dpsim.collectives.all_to_all import ALL_TO_ALL_ALGORITHMS, all_to_all_cost, all_to_all_link_bytes, \
    uniform_all_to_all_cost
from dpsim.collectives.groups import Communicator
from dpsim.predict.config import PredictConfig
from dpsim.predict.run import predict
from dpsim.topology.cluster import Topology
from dpsim.topology.load import load_preset
from dpsim.units import MB
from dpsim.workload.routing import parse_routing, traffic_matrix

BASE = dict(link="infiniband", gpu="h100", precision="bf16-mixed", steps=1, micro_batch=1)

GRID = {
    # dense: tensor (sequence-parallel or not, each overlap mode), context, pipeline schedules, data
    "8b-tp2-pp2": dict(model="llama-3-8b", gpus=16, tp=2, pp=2, sequence_parallel=True, global_batch=32),
    "8b-tp4-cp2": dict(model="llama-3-8b", gpus=16, tp=4, cp=2, sequence_parallel=True, global_batch=16),
    "8b-tp8-async": dict(model="llama-3-8b", gpus=16, tp=8, sequence_parallel=True, tp_comm_overlap="async",
                         global_batch=16),
    "8b-tp8-off-pp2": dict(model="llama-3-8b", gpus=16, tp=8, pp=2, tp_comm_overlap="off", global_batch=16),
    "8b-dualpipe": dict(model="llama-3-8b", gpus=32, tp=2, pp=4, sequence_parallel=True, schedule="dualpipe",
                        global_batch=64),
    "8b-gpipe-fsdp": dict(model="llama-3-8b", gpus=32, tp=2, pp=4, sequence_parallel=True, schedule="gpipe",
                          strategy="fsdp", global_batch=64),
    "70b-tp8-pp4-i2-full": dict(model="llama-3-70b", gpus=64, tp=8, pp=4, sequence_parallel=True,
                                schedule="1f1b-interleaved", virtual_stages=2, recompute="full", global_batch=64),
    "70b-tp4-cp2-pp4-sel": dict(model="llama-3-70b", gpus=64, tp=4, cp=2, pp=4, sequence_parallel=True,
                                recompute="selective", global_batch=32),
    "70b-tp8-pp2-zb": dict(model="llama-3-70b", gpus=32, tp=8, pp=2, sequence_parallel=True, schedule="zb-h1",
                           global_batch=32),
    "70b-cp4-a2a": dict(model="llama-3-70b", gpus=64, tp=8, cp=4, pp=2, sequence_parallel=True, cp_comm="a2a",
                        seq_len=32768, recompute="full", global_batch=8),
    # mixtures of experts: ep, etp, recomputation, the paired-op overlap, routing skew, across servers
    "mixtral-ep8-pp4": dict(model="mixtral-8x7b", gpus=64, pp=4, ep=8, strategy="zero1", global_batch=64),
    "mixtral-ep4-etp2": dict(model="mixtral-8x7b", gpus=64, pp=4, ep=4, etp=2, strategy="zero1", global_batch=64),
    "mixtral-ep4-etp2-full": dict(model="mixtral-8x7b", gpus=64, pp=4, ep=4, etp=2, recompute="full",
                                  strategy="zero1", global_batch=64),
    "mixtral-tp2-ep4-moe": dict(model="mixtral-8x7b", gpus=64, tp=2, pp=2, ep=4, sequence_parallel=True,
                                recompute="moe", strategy="zero1", global_batch=64),
    "mixtral-a2a-overlap-i2": dict(model="mixtral-8x7b", gpus=64, pp=4, ep=8, strategy="zero1", moe_a2a_overlap=True,
                                   schedule="1f1b-interleaved", virtual_stages=2, global_batch=256),
    "mixtral-zipf-capacity": dict(model="mixtral-8x7b", gpus=64, pp=4, ep=8, moe_routing="zipf:1",
                                  moe_capacity_factor=1.25, strategy="zero1", global_batch=64),
    "qwen3-30b-ep16-hier": dict(model="qwen3-30b-a3b", gpus=128, pp=2, ep=16, moe_a2a="hierarchical",
                                strategy="zero1", global_batch=128),
    "qwen3-30b-cp2-ep8-etp2": dict(model="qwen3-30b-a3b", gpus=64, tp=2, cp=2, pp=2, ep=8, etp=2,
                                   sequence_parallel=True, strategy="zero1", global_batch=64),
    "qwen3-30b-ep8-overlap": dict(model="qwen3-30b-a3b", gpus=16, ep=8, moe_a2a_overlap=True, strategy="zero1",
                                  global_batch=64),
    "mixtral-ep8-dualpipe": dict(model="mixtral-8x7b", gpus=64, pp=4, ep=8, schedule="dualpipe", strategy="zero1",
                                 global_batch=128),
    "deepseek-v3-pp8-ep8": dict(model="deepseek-v3", gpus=256, pp=8, ep=8, strategy="zero1", recompute="full",
                                global_batch=256),
}

_CACHE: dict[str, object] = {}


def _predict(name: str):
    if name not in _CACHE:
        _CACHE[name] = predict(PredictConfig(**BASE, **GRID[name]))
    return _CACHE[name]


TOL = 1e-9


# ------------------------------------------------------------------ (a) the step and each stage's work


@pytest.mark.parametrize("name", sorted(GRID))
def test_step_is_no_shorter_than_any_stage_compute(name):
    p = _predict(name)
    rep = p.layout
    # A stage's micro-batch (all its chunks) runs once per micro-batch; DualPipe feeds half of them
    # from each end, each through one of the stage's two chunks.
    m = rep.layout.micro_batches // (2 if rep.layout.schedule == "dualpipe" else 1)
    for s, parts in zip(rep.stages, rep.stage_parts):
        # Every micro-batch's forward and backward and the optimizer step, one after another on the stage.
        assert p.step_time_s >= s.busy_s * (1 - TOL), (name, s.stage)
        assert p.step_time_s >= (m * parts.compute_s + parts.optimizer_s) * (1 - TOL), (name, s.stage)
        # Its micro-batches' forward and backward with the waits they block on, less the all-to-alls
        # --moe-a2a-overlap may hide under the paired op.
        blocking = s.forward_s + s.backward_s - parts.expert_comm_s
        assert p.step_time_s >= m * blocking * (1 - TOL), (name, s.stage)
        # The engine plays that work, stretched (never shortened) where data-parallel collectives
        # run beside it (--overlap-slowdown); only the paired-op overlap takes some off.
        played = rep.pipeline.stages[s.stage].by_kind_s
        run = played.get("forward", 0.0) + played.get("backward", 0.0) + played.get("recompute", 0.0)
        if not rep.layout.moe_a2a_overlap:
            assert run >= m * parts.work_s * (1 - TOL), (name, s.stage)


# ------------------------------------------------------------------ (b) communication: the total and its parts


def _passes(rep) -> int:
    """How many times a stage runs each of its chunks in a step: every micro-batch, but DualPipe
    feeds half of them from each end, each through one of a stage's two chunks."""
    return rep.layout.micro_batches // (2 if rep.layout.schedule == "dualpipe" else 1)


@pytest.mark.parametrize("name", sorted(GRID))
def test_the_critical_stage_reports_the_waits_of_the_micro_batches_it_runs(name):
    """The critical stage's tensor-, context- and expert-parallel time is what its played chunks
    wait: each chunk times the micro-batches it runs. DualPipe's stage runs each of its two chunks
    for half of them; the report counted both chunks for every micro-batch, twice the stage's comm_s
    and exposed_comm_s parts (Llama-3-8B tp2 pp4: tp_comm_s 0.374 s where the stage spends 0.187 s)."""
    p = _predict(name)
    rep = p.layout
    n = _passes(rep)
    parts = rep.stage_parts[rep.critical_stage]
    if not rep.layout.moe_a2a_overlap:
        assert rep.tp_exposed_s + rep.cp_exposed_s + rep.ep_exposed_s == pytest.approx(
            n * (parts.work_s - parts.compute_s), rel=1e-9, abs=1e-15)
    assert rep.ep_comm_s + rep.etp_comm_s == pytest.approx(n * parts.expert_comm_s, rel=1e-12, abs=1e-15)


def _parts(p) -> dict[str, float]:
    rep = p.layout
    crit = rep.stages[rep.critical_stage]
    return {"tp": rep.tp_comm_s, "cp": rep.cp_comm_s, "ep": rep.ep_comm_s, "etp": rep.etp_comm_s,
            "dp": crit.dp_comm_s}


@pytest.mark.parametrize("name", sorted(GRID))
def test_communication_total_is_the_sum_of_its_parts_none_negative(name):
    p = _predict(name)
    rep = p.layout
    parts = _parts(p)
    assert all(v >= 0 for v in parts.values()), parts
    assert rep.p2p_s >= 0
    # What is left is the critical stage's point-to-point sends: a whole number of transfers (none
    # without --pp; the last stage sends only gradients, one per micro-batch).
    rest = p.comm_s - sum(parts.values())
    if rep.layout.pp == 1:
        assert rest == pytest.approx(0.0, abs=1e-12)
    else:
        sends = rest / rep.p2p_s
        assert sends == pytest.approx(round(sends), abs=1e-6) and round(sends) >= rep.layout.micro_batches


@pytest.mark.parametrize("name", sorted(GRID))
def test_exposed_communication_is_the_sum_of_its_exposed_parts_each_at_most_its_total(name):
    p = _predict(name)
    rep = p.layout
    crit = rep.stages[rep.critical_stage]
    for exposed, total in ((rep.tp_exposed_s, rep.tp_comm_s), (rep.cp_exposed_s, rep.cp_comm_s),
                           (rep.ep_exposed_s, rep.ep_comm_s + rep.etp_comm_s), (crit.dp_exposed_s, crit.dp_comm_s)):
        assert 0 <= exposed <= total * (1 + TOL) + 1e-15
    assert p.exposed_comm_s == pytest.approx(rep.tp_exposed_s + rep.cp_exposed_s + rep.ep_exposed_s
                                             + crit.dp_exposed_s, rel=1e-12, abs=1e-15)
    assert 0 <= p.exposed_comm_s <= p.comm_s * (1 + TOL)


@pytest.mark.parametrize("name", sorted(GRID))
def test_json_communication_parts_add_up_to_its_totals(name):
    """``predict --json``'s layout gives every part of ``comm_s`` and ``exposed_comm_s``: the
    critical stage's point-to-point sends (``p2p_comm_s``) and its expert communication's exposed
    part (``ep_exposed_s``) were missing, so the total could not be taken apart from the output.
    ``critical_stage`` (with pipeline stages) says whose they are."""
    d = json.loads(json.dumps(_predict(name).to_dict()))
    lay = d["layout"]
    assert ("critical_stage" in lay) == (lay["pp"] > 1)
    s0 = lay["stages"][lay.get("critical_stage", 0)]
    parts = [lay["tp_comm_s"], lay.get("cp_comm_s", 0.0), lay.get("ep_comm_s", 0.0), lay.get("etp_comm_s", 0.0),
             lay["p2p_comm_s"], s0["dp_comm_s"]]
    assert all(v >= 0 for v in parts)
    assert d["comm_s"] == pytest.approx(sum(parts), rel=1e-12, abs=1e-15)
    assert lay["p2p_comm_s"] == pytest.approx(round(lay["p2p_comm_s"] / lay["p2p_s"]) * lay["p2p_s"]
                                              if lay["pp"] > 1 else 0.0, rel=1e-12, abs=1e-15)
    exposed = [lay["tp_exposed_s"], lay.get("cp_exposed_s", 0.0), lay.get("ep_exposed_s", 0.0), s0["dp_exposed_s"]]
    assert d["exposed_comm_s"] == pytest.approx(sum(exposed), rel=1e-12, abs=1e-15)
    if "ep_comm_s" in lay:
        assert lay["ep_exposed_s"] <= (lay["ep_comm_s"] + lay.get("etp_comm_s", 0.0)) * (1 + TOL)


@pytest.mark.parametrize("name", [n for n in sorted(GRID) if GRID[n].get("ep", 1) > 1])
def test_expert_communication_is_counted_once(name):
    """The expert all-to-alls and the expert-tensor collectives are two disjoint parts: the stages'
    blocking expert communication (what routing load stretches) is their sum, the critical stage's
    is the report's, and each of them sits in the total once."""
    p = _predict(name)
    rep = p.layout
    parts = rep.stage_parts[rep.critical_stage]
    assert rep.ep_comm_s > 0 or parts.moe_layers == 0
    assert parts.expert_comm_s * _passes(rep) == pytest.approx(rep.ep_comm_s + rep.etp_comm_s, rel=1e-12)
    if rep.layout.etp == 1:
        assert rep.etp_comm_s == 0


# ------------------------------------------------------------------ (c) bytes conserved per all-to-all


def _comm(preset: str, n: int) -> Communicator:
    t = Topology(spec=load_preset(preset), n_gpus=n)
    return Communicator(name="ep", topology=t, job=t)


def _family_total(net, carried, name) -> float:
    f = net.families()[name]
    return float(carried[f.offset:f.offset + f.units * f.lanes].sum())


@pytest.mark.parametrize("algorithm", sorted(ALL_TO_ALL_ALGORITHMS))
@pytest.mark.parametrize("preset", ["infiniband", "aws-p5"])
def test_all_to_all_links_carry_what_the_ranks_send(algorithm, preset):
    """Every byte a rank sends to another leaves one GPU and arrives at one: out of the GPUs (NVLink
    and NICs) as much as into them; flat, what crosses servers crosses one NIC each way and the rest
    one NVLink each way; hierarchical, what crosses goes over the NICs once and is forwarded over
    NVLink where the target is not the sender's rail."""
    n, gpn = 32, 8
    rng = np.random.default_rng(5)
    t = rng.gamma(0.7, 4 * MB, size=(n, n))
    t[rng.random((n, n)) < 0.1] = 0.0
    net, carried = all_to_all_link_bytes(_comm(preset, n), t, algorithm=algorithm)
    node = np.arange(n) // gpn
    off = t * (1 - np.eye(n))
    same = node[:, None] == node[None, :]
    crossing, inside = off[~same].sum(), off[same].sum()
    up, down = _family_total(net, carried, "gpu_up"), _family_total(net, carried, "gpu_down")
    out, into = _family_total(net, carried, "nic_leaf"), _family_total(net, carried, "leaf_nic")
    assert up == pytest.approx(down, rel=1e-12) and out == pytest.approx(into, rel=1e-12)
    assert out == pytest.approx(crossing, rel=1e-12)
    if algorithm == "flat":
        assert up == pytest.approx(inside, rel=1e-12)
    else:
        local = np.arange(n) % gpn
        forwarded = off[~same & (local[:, None] != local[None, :])].sum()
        assert up == pytest.approx(inside + forwarded, rel=1e-12)
    cost = all_to_all_cost(_comm(preset, n), t, algorithm=algorithm)
    assert cost.busiest_send_bytes == pytest.approx(off.sum(axis=1).max(), rel=1e-12)
    assert cost.busiest_recv_bytes == pytest.approx(off.sum(axis=0).max(), rel=1e-12)


@pytest.mark.parametrize("algorithm", sorted(ALL_TO_ALL_ALGORITHMS))
def test_uniform_all_to_all_sends_and_receives_the_same_bytes(algorithm):
    c = _comm("infiniband", 32)
    size = 64 * MB
    u = uniform_all_to_all_cost(c, size, algorithm=algorithm)
    # 1/n of each rank's bytes stay local; the rest leave it and arrive somewhere.
    assert u.busiest_send_bytes == u.busiest_recv_bytes == pytest.approx(size * 31 / 32, rel=1e-12)
    m = all_to_all_cost(c, np.full((32, 32), size / 32), algorithm=algorithm)
    assert m.busiest_send_bytes == pytest.approx(u.busiest_send_bytes, rel=1e-12)
    assert m.time_s == pytest.approx(u.time_s, rel=1e-9)


@pytest.mark.parametrize("routing", ["balanced", "zipf:1.2"])
def test_routed_traffic_sends_every_copy_once(routing):
    """Each rank's dispatch sends its top-k copies of every token (dropless), and the group receives
    exactly what it sends."""
    ep, experts, top_k, tokens, bpt = 8, 64, 6, 4096, 2 * 2048
    t = traffic_matrix(parse_routing(routing), experts=experts, ep=ep, tokens_per_rank=tokens, top_k=top_k,
                       bytes_per_token=bpt)
    np.testing.assert_allclose(t.sum(axis=1), tokens * top_k * bpt, rtol=1e-12)
    assert t.sum(axis=0).sum() == pytest.approx(ep * tokens * top_k * bpt, rel=1e-12)


# ------------------------------------------------------------------ (d) one layout, three ways in


def _argv(kw: dict) -> list[str]:
    out = ["predict", "--json"]
    for k, v in kw.items():
        flag = "--" + k.replace("_", "-")
        if v is True:
            out.append(flag)
        elif v is not False:
            out += [flag, str(v)]
    return out


@pytest.mark.parametrize("name", ["70b-tp4-cp2-pp4-sel", "mixtral-ep4-etp2", "mixtral-a2a-overlap-i2",
                                  "qwen3-30b-ep16-hier"])
def test_predict_json_python_api_and_sweep_give_the_same_numbers(name):
    from dpsim.cli import main
    from dpsim.plan.grid import SweepSpec
    from dpsim.plan.sweep import prediction_record, sweep_records

    kw = {**BASE, **GRID[name]}
    api = _predict(name)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(_argv(kw)) == 0
    cli = json.loads(out.getvalue())
    assert cli == json.loads(json.dumps(api.to_dict()))
    row = sweep_records(SweepSpec.from_grid({k: [v] for k, v in kw.items()}))[0]
    expected = prediction_record(api)
    for key in ("step_time_s", "comm_s", "exposed_comm_s", "mfu", "samples_per_s", "tokens_per_s",
                "layout_tp_comm_s", "layout_ep_comm_s", "layout_bubble_fraction", "memory_total_bytes"):
        assert key not in expected or row[key] == expected[key], key
    assert {k: v for k, v in row.items() if k in expected} == expected


# ------------------------------------------------------------------ (e) MFU


@pytest.mark.parametrize("name", sorted(GRID))
def test_mfu_is_a_fraction(name):
    p = _predict(name)
    assert p.mfu is not None and 0 < p.mfu < 1
    assert 0 < p.scaling_efficiency


# ------------------------------------------------------------------ the stages' expert communication


def test_a_dense_first_stage_still_shows_where_the_all_to_alls_are(capsys, monkeypatch):
    """DeepSeek-V3's first three blocks are dense: with 16 stages (lighter first and last) stage 0
    holds only them, so its all-to-all time was zero in comm_s and the table while every other
    stage waits on its MoE layers' all-to-alls. The headline is now the critical stage's, one of
    the MoE stages (stage 0 is the lightest); each stage's expert communication is in the JSON."""
    from dpsim.cli import main

    kw = {**BASE, **GRID["deepseek-v3-pp8-ep8"], "pp": 16}
    p = predict(PredictConfig(**kw))
    rep = p.layout
    k = rep.critical_stage
    assert rep.stage_parts[0].moe_layers == 0 and rep.stages[0].ep_comm_s == 0
    assert k > 0 and rep.stage_parts[k].moe_layers > 0 and rep.ep_comm_s == rep.stages[k].ep_comm_s > 0
    n = _passes(rep)
    stages = p.to_dict()["layout"]["stages"]
    for s, parts, d in zip(rep.stages, rep.stage_parts, stages):
        assert s.ep_comm_s + s.etp_comm_s == pytest.approx(n * parts.expert_comm_s, rel=1e-12, abs=1e-15)
        assert d["ep_comm_s"] == s.ep_comm_s and d["etp_comm_s"] == s.etp_comm_s
        assert (s.ep_comm_s > 0) == (parts.moe_layers > 0)
    assert stages[0]["ep_comm_s"] == 0 < stages[1]["ep_comm_s"]
    assert "ep_comm_s" not in predict(PredictConfig(**BASE, **GRID["8b-tp2-pp2"])).to_dict()["layout"]["stages"][0]
    monkeypatch.setenv("COLUMNS", "200")
    assert main([a for a in _argv(kw) if a != "--json"]) == 0
    out = capsys.readouterr().out
    assert f"step of stage {k} (critical)" in out and "expert-parallel all-to-alls waited for" in out
    assert "none on stage" not in out


# ------------------------------------------------------------------ the one-GPU step holds no communication


@pytest.mark.parametrize("name", ["70b-tp8-pp4-i2-full", "70b-cp4-a2a", "mixtral-ep4-etp2-full",
                                  "mixtral-tp2-ep4-moe", "70b-tp4-cp2-pp4-sel"])
def test_one_gpu_step_does_not_move_with_the_tensor_and_context_collectives(name, monkeypatch):
    """``compute_s`` (the one-GPU step that single-GPU throughput and scaling efficiency divide by)
    took each layer's recomputation with the re-run forward's exposed tensor- and context-parallel
    waits in it, times tp x cp: Llama-3-70B tp8 pp4 with full recomputation had a 301.4 s "one GPU"
    step of which 32.8 s were tensor-parallel waits (12 %). Free collectives leave it as it is."""
    import dpsim.predict.layout as lay

    kw = {**BASE, **GRID[name]}
    real = predict(PredictConfig(**kw))
    cost = lay.collective_cost

    def free_tp_cp(collectives):
        c = cost(collectives)
        return lambda group, op, size: 0.0 if group in ("tp", "cp") else c(group, op, size)

    monkeypatch.setattr(lay, "collective_cost", free_tp_cp)
    monkeypatch.setattr(lay, "context_comm_s", lambda collectives, c, op, size: 0.0)
    free = predict(PredictConfig(**kw))
    assert free.layout.tp_comm_s == free.layout.cp_comm_s == 0
    assert real.compute_s == pytest.approx(free.compute_s, rel=1e-12)
    assert real.single_gpu_samples_per_s == pytest.approx(free.single_gpu_samples_per_s, rel=1e-12)


def test_plan_estimate_counts_the_recomputed_forwards_waits_once(monkeypatch):
    """The planner's closed-form compute_s (stage 0's compute, and the goodput's compute fraction)
    held the fully recomputed forward's exposed tensor-parallel waits that its tp_exposed_s holds
    too (Llama-3-70B tp8 pp4 full: compute 9.60 s with 1.03 s of those waits in it): with free
    tensor-parallel collectives the compute does not move."""
    from dpsim.plan.planner import Candidate, Planner

    base = PredictConfig(model="llama-3-70b", link="infiniband", precision="bf16-mixed", gpu="h100")
    c = Candidate(gpus=64, tp=8, pp=4, dp=2, sequence_parallel=True, strategy="zero1", micro_batch=1,
                  global_batch=64, recompute="full", schedule="1f1b", virtual_stages=1)
    real = Planner(base).estimate(c, global_batch=64)
    cost = Planner.cost
    monkeypatch.setattr(Planner, "cost", lambda self, gc, group, op, size:
                        0.0 if group == "tp" else cost(self, gc, group, op, size))
    free = Planner(base).estimate(c, global_batch=64)
    assert free.tp_exposed_s == 0 < real.tp_exposed_s
    assert real.compute_s == pytest.approx(free.compute_s, rel=1e-12)
