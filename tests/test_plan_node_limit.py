"""``dpsim plan --moe-node-limit``: DeepSeek-V3's node-limited routing (arXiv:2412.19437 Sec. 2.1.2),
as predict takes it, on every searched layout with expert parallelism, in its closed form and in the
layouts it simulates, refused by predict's own rule (:func:`~dpsim.predict.config.check_moe_node_limit`)."""

from __future__ import annotations

import json

import pytest

import dpsim.plan.planner as planner_module
from dpsim.cli import main
from dpsim.errors import ConfigError
from dpsim.plan.planner import plan_layouts
from dpsim.predict.config import PredictConfig

# Mixtral's 8 experts (top-2) on 4-GPU servers: an ep 8 group spans 2 servers, so a limit of 1 server
# per token is below the 2 a token reaches unlimited, and 1 server holds 4 >= 2 experts (allowed).
BASE = dict(model="mixtral-8x7b", link="infiniband", gpus_per_node=4, precision="bf16-mixed",
            moe_a2a="hierarchical")
SEARCH = dict(gpus=[64], global_batch=256, tps=[1], pps=[1], eps=[1, 8], strategies=["zero1"],
              micro_batches=[1], recomputes=["full"])
CLI = ["plan", "--model", "mixtral-8x7b", "--link", "infiniband", "--gpus-per-node", "4", "--precision",
       "bf16-mixed", "--moe-a2a", "hierarchical", "--gpus", "64", "--global-batch", "256", "--tp", "1", "--pp", "1",
       "--ep", "1,8", "--strategies", "zero1", "--micro-batches", "1", "--recompute", "full", "--json"]


def _by_ep(result):
    return {e.candidate.ep: e for e in result.ranked}


def test_the_limit_reaches_every_expert_parallel_candidate_and_its_simulation(monkeypatch):
    simulated = []
    real = planner_module.predict

    def spy(config, *args, **kwargs):
        simulated.append(config)
        return real(config, *args, **kwargs)

    monkeypatch.setattr(planner_module, "predict", spy)
    free = _by_ep(plan_layouts(PredictConfig(**BASE), verify=0, **SEARCH))
    limited = _by_ep(plan_layouts(PredictConfig(**BASE), moe_node_limit=1, verify=2, verify_seconds=None,
                                  **SEARCH))
    assert set(limited) == {8}  # ep 1 does not fit in memory (the experts whole on every GPU)
    # ep 8: the candidate, its predict config and the command it prints carry the limit.
    c8 = limited[8].candidate
    assert c8.moe_node_limit == 1 and c8.config(PredictConfig(**BASE)).parallelism.moe_node_limit == 1
    assert c8.flags().endswith(" --moe-node-limit 1")
    # The closed form costs it: fewer servers a token reaches, a shorter all-to-all.
    assert limited[8].step_time_s < free[8].step_time_s
    # The layout simulated is predict's with the limit.
    assert [(c.parallelism.ep, c.parallelism.moe_node_limit) for c in simulated] == [(8, 1)]
    assert limited[8].verified is not None
    assert limited[8].verified.step_time_s == pytest.approx(
        real(c8.config(PredictConfig(**BASE))).step_time_s, rel=1e-12)


def test_a_candidate_without_expert_parallelism_leaves_it_out():
    """ep 1 has no all-to-all to bound: the layout's config leaves the limit out (predict refuses it there)."""
    cands, _ = planner_module.Planner(PredictConfig(**BASE), moe_node_limit=1).candidates(
        64, global_batch=256, tps=[1], pps=[1], eps=[1, 8], strategies=["zero1"], micro_batches=[1],
        recomputes=["full"])
    by_ep = {c.ep: c for c in cands}
    assert set(by_ep) == {1, 8}
    assert by_ep[1].config(PredictConfig(**BASE)).parallelism.moe_node_limit is None
    assert "--moe-node-limit" not in by_ep[1].flags()
    assert by_ep[8].config(PredictConfig(**BASE)).parallelism.moe_node_limit == 1


def test_cli_with_and_without_the_flag(capsys):
    assert main(CLI) == 0
    free = json.loads(capsys.readouterr().out)
    assert main([*CLI, "--moe-node-limit", "1"]) == 0
    limited = json.loads(capsys.readouterr().out)
    rows = {r["ep"]: r for r in limited["layouts"]}
    free_rows = {r["ep"]: r for r in free["layouts"]}
    assert rows[8]["flags"].endswith("--moe-node-limit 1") and "--moe-node-limit" not in free_rows[8]["flags"]
    assert rows[8]["step_time_s"] < free_rows[8]["step_time_s"]
    # The whole predict command of the chosen layout (ep 8) carries it, once.
    assert limited["command"].count("--moe-node-limit 1") == 1 and "--moe-node-limit" not in free["command"]


@pytest.mark.parametrize("extra, match", [
    ({"moe_a2a": "flat"}, r"^--moe-node-limit: 1 bounds the servers the hierarchical all-to-all sends a token to, "
                          r"and this job has --ep 8 --moe-a2a flat; give --ep 2 or more and --moe-a2a hierarchical"),
    ({"eps": [1]}, r"^--moe-node-limit: 1 bounds .* this job has --ep 1 --moe-a2a hierarchical"),
])
def test_refused_by_predicts_rule(extra, match):
    base = dict(BASE, moe_a2a=extra.get("moe_a2a", "hierarchical"))
    search = dict(SEARCH, eps=extra.get("eps", SEARCH["eps"]))
    with pytest.raises(ConfigError, match=match):
        plan_layouts(PredictConfig(**base), moe_node_limit=1, verify=0, **search)
    # predict's words for the same job, from the same validator.
    with pytest.raises(ConfigError, match=match):
        PredictConfig(**base, gpus=64, ep=max(search["eps"]), strategy="zero1", moe_node_limit=1)


@pytest.mark.parametrize("value", [0, -1, True, 2.5, "4"])
def test_bad_value_is_refused_as_predict_refuses_it(value):
    with pytest.raises(ConfigError) as from_predict:
        PredictConfig(**BASE, gpus=64, ep=8, strategy="zero1", moe_node_limit=value)
    with pytest.raises(ConfigError) as from_plan:
        plan_layouts(PredictConfig(**BASE), moe_node_limit=value, verify=0, **SEARCH)
    assert str(from_plan.value) == str(from_predict.value)
    assert str(from_plan.value).startswith("--moe-node-limit: ")


def test_cli_bad_value_is_one_line(capsys):
    assert main([*CLI, "--moe-node-limit", "0"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("dpsim: error: --moe-node-limit: 0 is not valid")
