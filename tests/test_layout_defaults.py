"""Layout defaults as the frameworks people plan with run them (issue 28, "any shape").

``--etp`` left out: ``tp`` with ``ep`` 1 (Megatron-Core's ``--expert-tensor-parallel-size`` defaults to the
tensor-parallel size; torchtitan shards the routed experts over the tp mesh when ep is 1), 1 with ``ep`` above 1
(torchtitan's default, ep borrowing the tp ranks): :func:`dpsim.predict.config.default_etp` cites both. A dense
model's HSDP under tp builds no expert-shard communicators.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from dpsim.collectives.groups import LayoutShape, layout_communicators
from dpsim.predict.config import PredictConfig, default_etp
from dpsim.predict.layout import layout_shape
from dpsim.predict.run import load_model, predict, resolve_topology
from expert_layouts import MIXTRAL


def _moe(**kw) -> PredictConfig:
    base = dict(MIXTRAL, gpus=16, tp=2, sequence_parallel=True, pp=2, global_batch=32, strategy="zero1")
    return PredictConfig(**{**base, **kw})


def _summary(r) -> tuple:
    lay = r.layout
    return (r.step_time_s, r.memory.total_bytes, r.gradient_bytes, lay.layout.etp, lay.layout.edp, lay.etp_comm_s)


@pytest.mark.parametrize("tp, ep, want", [(1, 1, 1), (2, 1, 2), (8, 1, 8), (2, 4, 1), (4, 8, 1)])
def test_default_etp_is_tp_without_expert_parallelism_else_one(tp, ep, want):
    assert default_etp(tp=tp, ep=ep) == want
    par = PredictConfig(tp=tp, ep=ep).parallelism
    assert par.etp is None and par.etp_for(True) == want and par.etp_for(False) == 1
    assert PredictConfig(tp=tp, ep=ep, etp=1).parallelism.etp_for(True) == 1


def test_tp_with_ep_one_splits_each_expert_over_the_tensor_parallel_ranks():
    # Mixtral, tp 2 x pp 2 x dp 4, ep 1. Before: etp 1, each tp rank held its stage's experts whole (edp 8). Now
    # etp 2 as Megatron-Core and torchtitan run it: half of every expert per rank, the expert-data-parallel group
    # tp x dp / etp = 4, and each MoE layer all-gathers its routed tokens over the two ranks before the expert
    # GEMMs and reduce-scatters the partial outputs after (the etp collectives).
    default, one = predict(_moe()), predict(_moe(etp=1))
    assert default.layout.layout.etp == 2 and default.layout.layout.edp == 4 and default.layout.etp_comm_s > 0
    assert one.layout.layout.etp == 1 and one.layout.layout.edp == 8 and one.layout.etp_comm_s == 0
    assert default.memory.total_bytes < one.memory.total_bytes  # the routed experts' share halves
    assert _summary(default) == _summary(predict(_moe(etp=2)))


def test_expert_parallelism_keeps_etp_one():
    # With ep above 1 the default is what dpsim ran before (torchtitan's; the published Megatron-Core recipes set it).
    kw = dict(ep=4, gpus=16, pp=1, global_batch=32)
    default = predict(_moe(**kw))
    assert default.layout.layout.etp == 1 and default.layout.etp_comm_s == 0
    assert _summary(default) == _summary(predict(_moe(etp=1, **kw)))


def test_given_etp_is_kept_and_named_in_the_command():
    c = _moe(etp=1)
    assert c.parallelism.etp == 1 and c.parallelism.layout_flags == "--tp 2 --pp 2"
    assert _moe().parallelism.layout_flags == "--tp 2 --pp 2"


def test_dense_model_keeps_etp_one_and_builds_no_expert_shard_groups():
    # HSDP under tp on a dense model: the ezero/ezrep pair (the routed experts' shard and replica groups) used to be
    # built, unused, because a dense layout's etp 1 differs from tp; a model with experts still gets them.
    dense = PredictConfig(model="llama-2-7b", link="infiniband", gpus=32, tp=2, sequence_parallel=True,
                          global_batch=64, strategy="fsdp-hybrid", zero_group=8, micro_batch=1, steps=1)
    model = load_model(dense)
    shape = layout_shape(dense, model)
    assert shape.etp == 1 and not shape.experts
    comms = layout_communicators(resolve_topology(dense), shape)
    assert {"zero", "zrep"} <= set(comms) and not {"ezero", "ezrep", "etp"} & set(comms)
    with_experts = layout_communicators(resolve_topology(dense), dataclasses.replace(shape, experts=True))
    assert {"ezero", "ezrep"} <= set(with_experts)
    assert predict(dense).step_time_s > 0


def test_plan_searches_the_default_etp_and_names_it_only_when_it_differs():
    from dpsim.plan.planner import Candidate

    kw = dict(gpus=16, tp=2, pp=1, dp=8, strategy="zero1", micro_batch=1, global_batch=32, sequence_parallel=True,
              recompute="off", schedule="1f1b", virtual_stages=1)
    assert "--etp" not in Candidate(**kw, ep=1, etp=2, experts=True).flags()
    assert "--etp 1" in Candidate(**kw, ep=1, etp=1, experts=True).flags()
    assert "--etp" not in Candidate(**kw, ep=4, etp=1, experts=True).flags()
    assert "--etp 2" in Candidate(**kw, ep=4, etp=2, experts=True).flags()
    assert "--etp" not in Candidate(**kw, ep=1, etp=1).flags() and Candidate(**kw, ep=1, etp=1).given_etp is None


def test_default_and_given_etp_print_the_same_json(capsys):
    from dpsim.cli.app import main

    argv = ["predict", "--gpus", "16", "--link", "infiniband", "--gpu", "h100", "--model", "mixtral-8x7b",
            "--micro-batch", "1", "--tp", "2", "--sequence-parallel", "--pp", "2", "--global-batch", "32",
            "--strategy", "zero1", "--precision", "bf16-mixed", "--recompute", "full", "--json"]
    outs = []
    for extra in ([], ["--etp", "2"]):
        assert main([*argv, *extra]) == 0
        out = json.loads(capsys.readouterr().out)
        out["config"].pop("etp", None)
        outs.append(out)
    assert outs[0]["layout"]["etp"] == 2 and outs[0] == outs[1]


def test_shape_default_builds_expert_groups_as_before():
    # LayoutShape's experts flag defaults on: direct callers keep every communicator they had.
    shape = LayoutShape(tp=2, pp=1, dp=32, zero_group=8)
    assert shape.experts
