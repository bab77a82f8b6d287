"""Tensor x pipeline x data layouts end to end: the config fields and their one-line rules,
predict --tp/--pp (consistency, what each knob moves, placement), dpsim plan.

The engine, schedules and tensor-parallel shards are tests/test_pipeline.py; the
comparison with published measurements is tests/test_accuracy_layouts.py.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

from dpsim.errors import ConfigError
from dpsim.hardware import get_gpu
from dpsim.predict.config import SETTINGS, PredictConfig
from dpsim.predict.layout import layout_memory
from dpsim.predict.run import load_model, predict
from dpsim.workload.precision import get_precision

BF16 = get_precision("bf16-mixed")


# ------------------------------------------------------------------ the config fields


def test_layout_choices_are_the_registries():
    import typing

    from dpsim.predict import config as cfg
    from dpsim.strategies.layout import LAYOUT_STRATEGIES, RECOMPUTE, SCHEDULES
    from dpsim.strategies.tensor import TP_COMM_OVERLAP

    assert typing.get_args(cfg.Schedule) == tuple(SCHEDULES)
    assert typing.get_args(cfg.Recompute) == tuple(RECOMPUTE)
    assert typing.get_args(cfg.TpCommOverlap) == tuple(TP_COMM_OVERLAP)
    assert cfg.LAYOUT_DP_STRATEGIES == tuple(LAYOUT_STRATEGIES)
    fields = list(SETTINGS)
    assert set(cfg.LAYOUT_FIELDS) <= set(fields)
    defaults = PredictConfig().settings()
    assert {k: defaults[k] for k in cfg.LAYOUT_FIELDS} == {
        "tp": 1, "pp": 1, "dp": None, "global_batch": None, "schedule": "1f1b", "virtual_stages": 1,
        "stage_layers": None, "sequence_parallel": False, "recompute": "off", "tp_comm_overlap": "backward",
        "tp_across_network": False, "grad_accum_fusion": True, "ep": 1, "etp": None}


def test_dp_alone_implies_the_gpus():
    from dpsim.predict.config import derived_flags
    assert derived_flags({"tp": 8, "pp": 4, "dp": 16}) == {"tp": 8, "pp": 4, "dp": 16, "gpus": 512}
    assert derived_flags({"dp": 16, "gpus": 64}) == {"dp": 16, "gpus": 64}  # then PredictConfig says they disagree


# ------------------------------------------------------------------ predict --tp/--pp


def _layout_config(**kw):
    base = dict(gpus=64, tp=2, pp=4, model="llama-2-13b", link="infiniband", micro_batch=1, global_batch=64,
                precision="bf16-mixed", steps=1)
    base.update(kw)
    return PredictConfig(**base)


def test_layout_prediction_is_consistent():
    p = predict(_layout_config())
    rep = p.layout
    d = p.to_dict()
    assert d["layout"]["tp"] == 2 and d["layout"]["pp"] == 4 and d["layout"]["dp"] == 8
    assert d["layout"]["micro_batches"] == 8 and len(d["layout"]["stages"]) == 4
    for st in rep.stages:
        assert st.busy_s + st.bubble_s + st.comm_wait_s + st.tail_s == pytest.approx(p.step_time_s, rel=1e-9)
    assert rep.bubble_fraction >= rep.ideal_bubble_fraction * 0.9
    assert p.samples_per_s == pytest.approx(64 / p.step_time_s)
    assert 0 < p.mfu < 1 and p.memory.fits


def test_the_bubble_shrinks_with_micro_batches_and_chunks():
    few = predict(_layout_config(global_batch=32)).layout.bubble_fraction
    many = predict(_layout_config(global_batch=128)).layout.bubble_fraction
    chunks = predict(_layout_config(global_batch=32, schedule="1f1b-interleaved", virtual_stages=2)).layout
    assert many < few and chunks.bubble_fraction < few


def test_sequence_parallelism_and_recomputation_lower_the_memory():
    def mem(**kw):
        return predict(_layout_config(**kw)).memory.activations_bytes
    plain = mem()
    assert mem(sequence_parallel=True) < plain
    assert mem(recompute="full") < mem(recompute="selective") <= plain
    assert predict(_layout_config(schedule="gpipe")).memory.total_bytes > predict(_layout_config()).memory.total_bytes


def test_zero1_shards_the_optimizer_over_the_replicas():
    ddp = predict(_layout_config(strategy="ddp")).memory
    zero1 = predict(_layout_config(strategy="zero1")).memory
    assert zero1.optimizer_bytes == pytest.approx(ddp.optimizer_bytes / 8, rel=1e-3)


def test_memory_command_and_predict_agree_on_the_fullest_stage():
    config = _layout_config(sequence_parallel=True, recompute="selective")
    stages = layout_memory(config, load_model(config), get_gpu("h100"), BF16)
    assert max(s.breakdown.total_bytes for s in stages) == pytest.approx(predict(config).memory.total_bytes)


@pytest.mark.parametrize("kwargs, needles", [
    (dict(gpus=64, tp=3), ["--gpus: 64 is not a multiple of --tp 3"]),
    (dict(gpus=64, tp=2, dp=8), ["--dp: 8 with --tp 2 --pp 1 needs --gpus 16"]),
    (dict(gpus=64, sequence_parallel=True), ["--sequence-parallel", "tensor parallelism"]),
    (dict(gpus=64, schedule="gpipe"), ["--schedule", "pipeline parallelism"]),
    (dict(gpus=64, pp=2, schedule="1f1b-interleaved"), ["--schedule: 1f1b-interleaved needs --virtual-stages"]),
    (dict(gpus=64, pp=2, virtual_stages=2), ["--virtual-stages: 2 applies only to --schedule 1f1b-interleaved"]),
    (dict(gpus=64, pp=2, strategy="zero2"), ["--strategy: 'zero2'", "ddp, zero1, fsdp, zero3"]),
    # DeepSpeed refuses ZeRO-3 under pipeline parallelism (its PipelineEngine's assertion).
    (dict(gpus=64, pp=2, strategy="zero3"), ["--pp: 2 does not combine with --strategy zero3", "--pp 1"]),
    (dict(gpus=64, pp=2, recompute_every=2), ["--recompute-every: 2 applies with --recompute full"]),
    (dict(gpus=64, pp=2, activation_checkpointing=True), ["--activation-checkpointing", "--recompute full"]),
    (dict(gpus=64, global_batch=100, micro_batch=1), ["--global-batch: 100", "64"]),
    (dict(gpus=64, global_batch=128, micro_batch=1, grad_accum=3), ["--grad-accum: 3 disagrees"]),
    (dict(gpus=64, tp=8, tp_comm_overlap="async"), ["--tp-comm-overlap: 'async'", "--sequence-parallel"]),
])
def test_layout_rules_are_one_line(kwargs, needles):
    with pytest.raises(ConfigError) as exc:
        PredictConfig(**kwargs)
    message = str(exc.value)
    assert "\n" not in message
    for needle in needles:
        assert needle in message


@pytest.mark.parametrize("kwargs, needle", [
    (dict(gpus=64, tp=16, link="infiniband", model="llama-2-7b"), "NVLink domain of 8 GPUs"),
    (dict(gpus=48, tp=2, pp=8, link="infiniband", model="llama-2-13b"), "do not tile"),
    (dict(gpus=64, pp=3, dp=None, link="infiniband", model="llama-2-13b"), "not a multiple"),
    (dict(gpus=64, pp=16, link="infiniband", model="llama-2-13b", global_batch=64, micro_batch=1,
          schedule="1f1b-interleaved", virtual_stages=4), "leave a chunk without blocks"),
    # Async tensor parallelism copies peer to peer over NVSwitch: not across the network, not over PCIe.
    (dict(gpus=32, tp=16, link="infiniband", model="llama-2-7b", sequence_parallel=True, tp_across_network=True,
          tp_comm_overlap="async"), "^--tp-comm-overlap: 'async' copies between GPUs over NVSwitch, but --tp 16 "
                                    "crosses the network"),
    (dict(gpus=16, tp=4, link="pcie", model="llama-2-7b", sequence_parallel=True, tp_comm_overlap="async"),
     "^--tp-comm-overlap: 'async' .* joined by pcie"),
])
def test_layouts_that_cannot_be_placed_are_refused(kwargs, needle):
    with pytest.raises(ConfigError, match=needle):
        predict(PredictConfig(**kwargs))


def test_an_end_chunk_may_hold_only_the_embedding_or_the_head():
    """40 blocks over 6 stages x 7 chunks (42 virtual stages): the first virtual stage runs the
    embedding alone and the last the final norm, head and loss alone, as Megatron-Core places them
    with --account-for-embedding-in-pipeline-split and --account-for-loss-in-pipeline-split; an
    empty chunk in the middle is still refused (the case above)."""
    p = predict(PredictConfig(gpus=48, pp=6, link="infiniband", model="llama-2-13b", global_batch=96, micro_batch=1,
                              schedule="1f1b-interleaved", virtual_stages=7, steps=1))
    assert [s.blocks for s in p.layout.stages] == [6, 7, 7, 7, 7, 6]
    assert p.layout.stages[0].layers[0] == ("model.embed_tokens",)
    assert p.step_time_s > 0


def test_an_empty_last_chunk_runs_the_head_alone():
    """The head on the last stage's last chunk, not beside the last block on stage 4's last chunk."""
    p = predict(PredictConfig(gpus=48, pp=6, link="infiniband", model="llama-2-13b", global_batch=96, micro_batch=1,
                              schedule="1f1b-interleaved", virtual_stages=7, steps=1))
    assert p.layout.stages[-1].layers[-1] == ("lm_head",)
    assert "lm_head" not in p.layout.stages[-2].layers[-1]


def test_tp_across_the_network_when_asked():
    p = predict(PredictConfig(gpus=32, tp=16, link="infiniband", model="llama-2-7b", micro_batch=1,
                              tp_across_network=True, steps=1))
    within = predict(PredictConfig(gpus=32, tp=8, link="infiniband", model="llama-2-7b", micro_batch=1, steps=1))
    assert p.layout.tp_exposed_s > within.layout.tp_exposed_s


def test_uneven_stage_split_moves_the_memory():
    even = predict(_layout_config(pp=4, gpus=64)).layout.stages
    uneven = predict(_layout_config(pp=4, gpus=64, stage_layers="8,10,11,11")).layout.stages
    assert [s.blocks for s in uneven] == [8, 10, 11, 11] and [s.blocks for s in even] == [10] * 4
    assert uneven[0].memory.params_per_gpu < even[0].memory.params_per_gpu
    with pytest.raises(ConfigError, match="--stage-layers: '8,10,11' is not valid"):
        predict(_layout_config(stage_layers="8,10,11"))


def test_deepspeed_schedule_pays_its_blocking_transfers():
    """DeepSpeed's pipeline engine runs 1F1B's order with blocking sends and receives and
    reduces gradients only after the pipeline: never faster than Megatron's 1F1B with the
    data-parallel reduction after the pipeline too, and the same memory."""
    megatron = predict(_layout_config(strategy="zero1", overlap=False))
    deepspeed = predict(_layout_config(strategy="zero1", schedule="deepspeed"))
    assert deepspeed.step_time_s >= megatron.step_time_s * (1 - 1e-9)
    assert deepspeed.memory.total_bytes == megatron.memory.total_bytes
    assert deepspeed.layout.transfers == megatron.layout.transfers == 2 * (4 - 1) * 8
    assert deepspeed.layout.to_dict()["schedule"] == "deepspeed"


def test_unfused_gradient_accumulation_costs_each_micro_batch_and_needs_a_layout():
    fused = predict(_layout_config(global_batch=128))
    unfused = predict(_layout_config(global_batch=128, grad_accum_fusion=False))
    assert unfused.step_time_s > fused.step_time_s
    assert unfused.memory.total_bytes == fused.memory.total_bytes
    with pytest.raises(ConfigError, match="^--no-grad-accum-fusion: applies with --tp or --pp above 1"):
        PredictConfig(gpus=8, link="infiniband", grad_accum_fusion=False)


def test_stage_memory_of_the_planner_equals_the_memory_model():
    from dpsim.plan.planner import Candidate, Planner
    base = PredictConfig(model="llama-2-13b", link="infiniband", precision="bf16-mixed")
    planner = Planner(base)
    for kw in (dict(tp=2, pp=4, dp=8, schedule="1f1b", virtual_stages=1, sequence_parallel=True, recompute="off"),
               dict(tp=4, pp=2, dp=8, schedule="1f1b-interleaved", virtual_stages=2, sequence_parallel=False,
                    recompute="full"),
               dict(tp=1, pp=8, dp=8, schedule="1f1b", virtual_stages=1, sequence_parallel=False,
                    recompute="selective")):
        c = Candidate(gpus=64, strategy="zero1", micro_batch=1, global_batch=64, **kw)
        est = planner.estimate(c, global_batch=64)
        config = c.config(base)
        stages = layout_memory(config, load_model(config), get_gpu("h100"), BF16)
        assert est.memory_bytes == pytest.approx(max(s.breakdown.total_bytes for s in stages), rel=1e-12)
        # the closed-form step tracks the simulated one
        assert est.step_time_s == pytest.approx(predict(config).step_time_s, rel=0.06)


@pytest.mark.parametrize("model, kw", [
    ("gpt2-xl", dict(tp=1, pp=5, dp=16, schedule="1f1b", virtual_stages=1)),  # tied embedding, 48 blocks / 5
    ("gpt2-xl", dict(tp=1, pp=6, dp=16, schedule="zb-h1", virtual_stages=1)),
    ("llama-2-13b", dict(tp=2, pp=8, dp=4, schedule="1f1b-interleaved", virtual_stages=3)),  # 40 over 24
    ("llama-2-13b", dict(tp=1, pp=1, dp=64, schedule="1f1b", virtual_stages=1)),  # the data-parallel path
])
@pytest.mark.parametrize("strategy, recompute", [("zero1", "full"), ("ddp", "selective")])
def test_plan_memory_is_predicts_memory(model, kw, strategy, recompute):
    """One memory model: the planner's memory of a candidate is what predict reports for it."""
    from dpsim.plan.planner import Candidate, Planner
    base = PredictConfig(model=model, link="infiniband", precision="bf16-mixed")
    planner = Planner(base)
    if kw["tp"] * kw["pp"] == 1:
        recompute = "full" if recompute == "full" else "off"
    gpus = kw["tp"] * kw["pp"] * kw["dp"]
    c = Candidate(gpus=gpus, strategy=strategy, micro_batch=1, global_batch=kw["dp"] * kw["pp"] * 2,
                  recompute=recompute, sequence_parallel=False, **kw)
    est = planner.estimate(c, global_batch=c.global_batch)
    assert est.memory_bytes == pytest.approx(predict(dataclasses.replace(c.config(base), steps=1)).memory.total_bytes,
                                             rel=1e-12)



def test_plan_costs_a_float8_fsdp_layout_as_predict_does():
    """A tensor/pipeline candidate's fsdp is torchtitan's FSDP2 with the float8 all-gather in predict
    (its weights reach the GEMMs in FP8, uncast): the planner's shard compute and memory are the same."""
    from dpsim.plan.planner import Candidate, Planner
    base = PredictConfig(model="llama-2-13b", link="infiniband", precision="bf16-params", fp8="torchao-tensorwise",
                         compile=True, strategy="fsdp")
    planner = Planner(base)
    assert planner.strategy_precision(planner.base.parallelism.strategy).fp8.fsdp_float8_all_gather
    assert not planner.precision.fp8.fsdp_float8_all_gather  # FSDP1 without a layout casts locally
    c = Candidate(gpus=64, strategy="fsdp", micro_batch=1, global_batch=32, tp=2, pp=4, dp=8, schedule="1f1b",
                  virtual_stages=1, sequence_parallel=True, recompute="full")
    est = planner.estimate(c, global_batch=32)
    predicted = predict(dataclasses.replace(c.config(base), steps=1))
    assert est.memory_bytes == pytest.approx(predicted.memory.total_bytes, rel=1e-12)
    assert est.step_time_s == pytest.approx(predicted.step_time_s, rel=0.06)

@pytest.mark.parametrize("model, seq_len, kw", [
    ("mixtral-8x7b", None, dict(tp=2, pp=2, dp=16, ep=8, sequence_parallel=True)),
    ("mixtral-8x7b", None, dict(tp=1, pp=4, dp=16, ep=4, sequence_parallel=False)),
    ("mixtral-8x7b", None, dict(tp=2, pp=2, dp=16, ep=4, etp=2, sequence_parallel=True)),
    ("llama-3-8b", 32768, dict(tp=2, cp=4, pp=1, dp=8, sequence_parallel=True)),
    ("llama-3-8b", 32768, dict(tp=1, cp=2, pp=2, dp=16, sequence_parallel=False)),
])
def test_plan_memory_and_step_of_expert_and_context_layouts_are_predicts(model, seq_len, kw):
    """One memory model with ep and cp too, and the closed form tracks the simulated step (the
    expert gradients' own group and the routing load of one sample per micro-batch set apart)."""
    from dpsim.plan.planner import Candidate, Planner
    base = PredictConfig(model=model, link="infiniband", precision="bf16-mixed", seq_len=seq_len)
    planner = Planner(base)
    gpus = kw["tp"] * kw.get("cp", 1) * kw["pp"] * kw["dp"]
    c = Candidate(gpus=gpus, strategy="zero1", micro_batch=1, global_batch=kw["dp"] * 4, recompute="full",
                  schedule="1f1b", virtual_stages=1, **kw)
    est = planner.estimate(c, global_batch=c.global_batch)
    pred = predict(dataclasses.replace(c.config(base), steps=1))
    assert est.memory_bytes == pytest.approx(pred.memory.total_bytes, rel=1e-12)
    assert est.step_time_s == pytest.approx(pred.step_time_s, rel=0.10)


def test_plan_searches_ep_for_an_moe_and_cp_for_a_long_sequence_only():
    from dpsim.plan.planner import CP_MIN_TOKENS, Planner, plan_layouts
    moe = PredictConfig(model="mixtral-8x7b", link="infiniband", precision="bf16-mixed")
    cands, _ = Planner(moe).candidates(64, global_batch=256, micro_batches=(1,), recomputes=("full",))
    # etp as predict defaults it: tp with ep 1 (the experts split as the dense linears are), else 1.
    assert {c.ep for c in cands} == {1, 2, 4, 8} and all(c.etp == (c.tp if c.ep == 1 else 1) for c in cands)
    assert all(8 % c.ep == 0 and (c.tp * c.cp * c.dp) % c.ep == 0 and c.cp == 1 for c in cands)
    # --etp: the expert-tensor-parallel sizes asked for, carved with ep out of tp x cp x dp
    both, _ = Planner(moe).candidates(64, global_batch=256, tps=(2,), eps=(4, 8), etps=(1, 2), micro_batches=(1,),
                                      recomputes=("full",))
    assert {(c.ep, c.etp) for c in both} == {(4, 1), (4, 2), (8, 1), (8, 2)}
    assert all((c.tp * c.cp * c.dp) % (c.ep * c.etp) == 0 for c in both)
    assert " --ep 8 --etp 2 " in next(c for c in both if c.etp == 2 and c.ep == 8).flags()
    # Megatron-Core runs an MoE's router on the sequence-parallel shard: sp exactly when tp > 1.
    assert all(c.sequence_parallel == (c.tp > 1) for c in cands)
    result = plan_layouts(moe, gpus=[64], global_batch=256, tps=(1, 2), pps=(1, 2), micro_batches=(1,),
                          recomputes=("full",), verify=1, top=200)
    assert any(e.candidate.ep > 1 for e in result.ranked)
    expert = next(e.candidate for e in result.ranked if e.candidate.ep > 1)
    assert f" --ep {expert.ep} " in expert.flags() and expert.config(moe).parallelism.ep == expert.ep
    dense = PredictConfig(model="llama-3-8b", link="infiniband", precision="bf16-mixed")
    short, _ = Planner(dense).candidates(64, global_batch=64, micro_batches=(1,), recomputes=("full",))
    assert {(c.cp, c.ep) for c in short} == {(1, 1)}
    long_cfg = dataclasses.replace(dense, seq_len=2 * CP_MIN_TOKENS)
    long, _ = Planner(long_cfg).candidates(64, global_batch=64, micro_batches=(1,), recomputes=("full",))
    assert {c.cp for c in long} == {1, 2, 4, 8} and {c.ep for c in long} == {1}
    assert all(c.tp * c.cp * c.pp * c.dp == 64 for c in long)
    # Asked for (--cp/--ep), the sizes are searched as given; ep on a dense model is refused.
    asked, _ = Planner(dense).candidates(64, global_batch=64, micro_batches=(1,), recomputes=("full",), cps=(2,))
    assert {c.cp for c in asked} == {2}
    with pytest.raises(ConfigError, match="^--ep: 2 splits the experts of a mixture of experts, but llama-3-8b is "
                                          "dense"):
        plan_layouts(dense, gpus=[64], global_batch=64, eps=(2,))
    with pytest.raises(ConfigError, match="^--etp: 2 sets how a mixture of experts' experts are split, but llama-3-8b is dense"):
        plan_layouts(dense, gpus=[64], global_batch=64, etps=(2,))


@pytest.mark.parametrize("kwargs, needle", [
    (dict(global_batch=0), "^--global-batch: 0 is not valid; expected an integer >= 1"),  # was an AssertionError
    (dict(global_batch=2.5), "^--global-batch: 2.5 is not valid"),
    (dict(global_batch=64, tokens=1e300), r"^--tokens: 1e\+300 is not valid"),  # printed a 1.6e+294-s time to train
    (dict(global_batch=64, samples=float("nan")), "^--samples: nan is not valid"),
    (dict(global_batch=64, tokens=-1.0), "^--tokens: -1"),
    (dict(global_batch=None), "^--global-batch: the layouts are searched for one global batch"),
    # The search axes through dpsim.plan (the CLI parses them first): each was a ZeroDivisionError,
    # an AssertionError or a TypeError; gpu_hour_usd=-1 was taken as "no price" and the cost left out.
    # A single number or name is a one-value axis, as dpsim.sweep takes it (test_fuzz_round23); a float is not.
    (dict(global_batch=64, gpus=8.0), "^--gpus: 8.0 is not valid; expected an integer or a list"),
    (dict(global_batch=64, gpus=[]), "^--gpus: "),
    (dict(global_batch=64, tps=[0]), "^--tp: 0 is not valid"),
    (dict(global_batch=64, pps=[0]), "^--pp: 0 is not valid"),
    (dict(global_batch=64, cps=[0]), "^--cp: 0 is not valid"),
    (dict(global_batch=64, tps=["2"]), "^--tp: '2' is not valid"),
    (dict(global_batch=64, micro_batches=[-1]), "^--micro-batches: -1 is not valid"),
    (dict(global_batch=64, strategies=["zero2"]), "^--strategies: "),
    (dict(global_batch=64, strategies="zero2"), "^--strategies: "),
    (dict(global_batch=64, recomputes=["bogus"]), "^--recompute: "),
    (dict(global_batch=64, schedules=["bogus"]), "^--schedules: "),
    (dict(global_batch=64, top=0), r"^--top: 0 is not valid"),
    (dict(global_batch=64, verify=-1), r"^--verify: -1 is not valid"),
    (dict(global_batch=64, tokens=1e9, budget_usd=float("nan")), "^--budget-usd: nan"),
    (dict(global_batch=64, tokens=1e9, gpu_hour_usd=-1.0), "^--gpu-hour-usd: -1.0 is not valid"),
    # Unbounded prices (fuzz5): 1e250 USD per GPU-hour costed layouts at ~1e254 USD in plan's JSON, and
    # 1e308 overflowed every cost to null while --rank cost still ranked by it.
    (dict(global_batch=64, tokens=1e9, gpu_hour_usd=1e250), r"^--gpu-hour-usd: 1e\+250 is not valid.*<= 10,000"),
    (dict(global_batch=64, tokens=1e9, gpu_hour_usd={"h100": 1e308}), r"^--gpu-hour-usd.h100: 1e\+308 is not valid"),
    # --cp-comm with a search that has no context parallelism was silently dropped (--no-cp-balance said so).
    (dict(global_batch=64, cp_comm="a2a"), "^--cp-comm: 'a2a' applies only with context parallelism, and the search "
                                           "has none"),
    (dict(global_batch=64, pps=[1], schedules=["zb-h1", "dualpipe"]),  # searched 1F1B only, in silence
     "^--schedules: zb-h1,dualpipe applies only to pipeline-parallel layouts, and --pp 1 searches none"),
    # The default pair given (fuzz6): it passed because the command line always sent that pair and the
    # check could not tell it from the same pair given; None is now "not given".
    (dict(global_batch=64, pps=[1], schedules=["1f1b", "1f1b-interleaved"]),
     "^--schedules: 1f1b,1f1b-interleaved applies only to pipeline-parallel layouts"),
])
def test_plan_refuses_a_bad_global_batch_or_budget_in_one_line(kwargs, needle):
    from dpsim.plan.planner import plan_layouts

    with pytest.raises(ConfigError, match=needle) as exc:
        plan_layouts(PredictConfig(model="gpt2", link="nvlink", gpus=8), **{"gpus": [8], **kwargs})
    assert "\n" not in str(exc.value)


@pytest.mark.slow
def test_plan_places_deepseek_v3_on_16384_gpus_with_expert_parallelism():
    """Issue 28: the MoE's plan lists fitting layouts with ep > 1 (its time, under 10 s, is a figure of
    tests/benchmarks/bench_plan.py, not asserted here: this shared machine's wall clock is no test)."""
    from dpsim.plan.planner import plan_layouts
    base = PredictConfig(model="deepseek-v3", link="infiniband", precision="bf16-params")
    result = plan_layouts(base, gpus=[16384], global_batch=2048, top=50, verify=3)
    assert result.best is not None and result.best.verified is not None
    assert any(e.candidate.ep > 1 for e in result.ranked)
    assert all(e.memory_bytes <= e.usable_bytes for e in result.ranked)


@pytest.mark.slow
def test_plan_places_llama_3_405b_on_16384_gpus():
    """Issue 28: 126 blocks over 16 stages (lighter first and last) fit, and tp 8 x pp 16 is among the
    layouts listed (the search's time is tests/benchmarks/bench_plan.py's figure)."""
    from dpsim.plan.planner import plan_layouts
    base = PredictConfig(model="llama-3-405b", link="infiniband", precision="bf16-params")
    result = plan_layouts(base, gpus=[16384], global_batch=2048, top=50, verify=3)
    assert result.counts["ranked"] > 0
    assert any(e.candidate.tp == 8 and e.candidate.pp == 16 for e in result.ranked)


@pytest.mark.slow
def test_plan_finds_layouts_that_fit_and_ranks_them():
    from dpsim.plan.planner import plan_layouts
    base = PredictConfig(model="llama-2-70b", link="infiniband", precision="bf16-mixed")
    result = plan_layouts(base, gpus=[128], global_batch=256, tokens=1e11, verify=2, top=5)
    assert result.ranked and all(e.fits for e in result.ranked)
    assert result.counts["do_not_fit"] > 0  # 70B does not fit every way on 128 GPUs
    best = result.best
    assert best.verified is not None and best.verified.memory.fits
    times = [e.time_to_train_s for e in result.ranked[:2]]
    assert times == sorted(times)
    cost = plan_layouts(base, gpus=[128], global_batch=256, tokens=1e11, verify=0, rank_by="cost",
                        budget_usd=best.cost_usd * 0.999)
    assert all(e.cost_usd <= best.cost_usd * 0.999 for e in cost.ranked)


@pytest.mark.slow
def test_predict_and_plan_on_the_command_line():
    out = subprocess.run([sys.executable, "-m", "dpsim", "predict", "--tp", "2", "--pp", "2", "--dp", "4",
                          "--model", "llama-2-7b", "--link", "infiniband", "--micro-batch", "1",
                          "--global-batch", "16", "--json"], capture_output=True, text=True, check=True)
    d = json.loads(out.stdout)
    assert d["n_gpus"] == 16 and d["config"]["gpus"] == 16 and d["layout"]["pp"] == 2
    out = subprocess.run([sys.executable, "-m", "dpsim", "plan", "--model", "llama-2-7b", "--gpus", "16",
                          "--link", "infiniband", "--global-batch", "64", "--verify", "1", "--top", "3", "--json"],
                         capture_output=True, text=True, check=True)
    d = json.loads(out.stdout)
    assert d["schema"] == "dpsim.plan/1" and d["best"]["flags"] and len(d["layouts"]) <= 3
    assert d["command"].startswith("dpsim predict --model llama-2-7b --link infiniband ")
    bad = subprocess.run([sys.executable, "-m", "dpsim", "plan", "--model", "llama-2-7b", "--gpus", "16"],
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "--global-batch" in bad.stderr and bad.stderr.count("\n") == 1


def _plan_json(capsys, *args: str) -> dict:
    """``dpsim plan ARGS --json`` in this process (the module entry point's own process is tests/test_cli.py's)."""
    from dpsim.cli import main

    capsys.readouterr()
    rc = main(["plan", *args, "--json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    return json.loads(out)


def test_plan_takes_no_grad_accum_fusion_as_predict_does(capsys):
    d = _plan_json(capsys, "--model", "llama-2-7b", "--gpus", "16", "--link", "infiniband", "--global-batch", "64",
                   "--tp", "2", "--pp", "2", "--verify", "1", "--top", "2", "--no-grad-accum-fusion")
    assert "--no-grad-accum-fusion" in d["best"]["flags"]
    # the planner's closed form and the verified prediction charge the same separate adds
    from dpsim.plan.planner import plan_layouts
    base = PredictConfig(model="llama-2-7b", link="infiniband")
    fused, unfused = (plan_layouts(base, gpus=[16], global_batch=64, tps=[2], pps=[2], verify=1, top=1,
                                   grad_accum_fusion=f).best for f in (True, False))
    assert fused.candidate.flags() + " --no-grad-accum-fusion" == unfused.candidate.flags() or \
        fused.candidate != unfused.candidate
    assert unfused.verified.config.parallelism.grad_accum_fusion is False
    assert unfused.step_time_s > fused.step_time_s


def test_pipeline_parallelism_alone_on_any_block_model():
    p = predict(PredictConfig(gpus=16, pp=4, link="nvlink", model="gpt2-xl", micro_batch=2, global_batch=64,
                              recompute="full", steps=1))
    assert p.layout.tp_comm_s == 0 and len(p.layout.stages) == 4
    # GPT-2's embedding is tied to its head: the last stage keeps a copy, both all-reduce its gradient
    assert p.layout.embedding_grad_bytes > 0
    assert p.layout.stages[-1].memory.params_per_gpu > p.layout.stages[1].memory.params_per_gpu


def test_a_layout_with_degraded_links_is_slower_and_reported():
    """Degraded links reach a layout's communicators (dpsim.network.degrade.communicator_degradations)."""
    from dpsim.network.degrade import parse_degradation
    from dpsim.variability.run import predict_with_variability
    from dpsim.variability.spec import VariabilitySpec
    prediction, report = predict_with_variability(
        _layout_config(), VariabilitySpec(degradations=(parse_degradation("nvlink:50%"),)))
    effect = report.degradation
    assert effect.step_s == prediction.step_time_s and effect.step_s > effect.healthy_step_s
    assert report.statistics is None  # nothing spreads the steps


def test_data_parallel_configs_keep_their_path():
    """tp = pp = 1 runs the data-parallel engine and prints no layout (tests/test_golden.py
    freezes the numbers)."""
    p = predict(PredictConfig(gpus=16, link="infiniband", model="gpt2", steps=1))
    assert p.layout is None and p.program is not None and p.to_dict()["layout"] is None
    q = predict(PredictConfig(gpus=16, link="infiniband", model="gpt2", steps=1, global_batch=128))
    assert q.step_time_s == pytest.approx(
        predict(PredictConfig(gpus=16, link="infiniband", model="gpt2", steps=1, grad_accum=2)).step_time_s)




def test_the_timeline_shows_each_stage_and_its_bubble():
    pytest.importorskip("plotly")
    from dpsim.report.plots import timeline_figure
    p = predict(_layout_config(schedule="1f1b-interleaved", virtual_stages=2))
    fig = timeline_figure(p)
    rows = {y for trace in fig.data for y in trace.y}
    assert {f"stage {s} compute" for s in range(4)} <= rows
    assert {f"stage {s} communication" for s in range(4)} <= rows
    bubble = [t for t in fig.data if t.name == "pipeline bubble"]
    assert bubble and "bubble" in fig.layout.title.text
    # stage 0's shaded bubble is its simulated wait for the other stages
    shaded = sum(x for t in bubble for x, y in zip(t.x, t.y) if y == "stage 0 compute") / 1e3
    assert shaded == pytest.approx(p.layout.stages[0].bubble_s, rel=1e-6)


def test_fsdp_without_pipeline_stages_reshards_after_forward():
    """torchtitan's FSDP2 under tensor parallelism alone (``reshard_after_forward = not pp_enabled``):
    only the shards persist, and every micro-batch gathers each bucket for its forward and again for
    its backward and reduce-scatters it once; under pipeline stages the gathered parameters and the
    accumulated gradients stay for the step."""
    import math

    from dpsim.strategies.tensor import tp_model
    base = dict(gpus=64, model="llama-2-13b", link="infiniband", micro_batch=1, global_batch=48,
                precision="bf16-mixed", steps=1, strategy="fsdp")
    config = PredictConfig(tp=4, pp=1, **base)  # 16 replicas, 3 micro-batches each
    flat = predict(config)
    numel = sum(layer.numel_per_rank for layer in tp_model(load_model(config), 4).layers)
    w, g = BF16.weight_bytes, BF16.grad_bytes
    assert flat.memory.weights_bytes == math.ceil(numel / 16) * w
    assert flat.memory.gradients_bytes == math.ceil(numel / 16) * g
    assert 0 < flat.memory.comm_buffers_bytes < numel * w / 10  # a block or two, not the model
    trace = flat.layout.pipeline.trace
    gathered = sum(1 for e in trace if e.kind == "allgather")
    reduced = sum(1 for e in trace if e.kind == "reducescatter")
    assert reduced == 3 * len({e.name.split(" bucket ")[1] for e in trace if e.kind == "reducescatter"})
    assert gathered == 2 * reduced
    piped = predict(PredictConfig(tp=4, pp=2, **base))
    assert piped.memory.weights_bytes > numel / 2 * w * 0.9  # the stage's parameters, gathered for the step


def test_plan_takes_the_flags_of_its_tensor_and_context_parallel_candidates(capsys):
    """--tp-comm-overlap and --cp-comm apply to the candidates with tp or cp above 1 (plan's base has
    neither, and predict refuses them without); async tensor parallelism searches sequence
    parallelism only."""
    d = _plan_json(capsys, "--model", "llama-2-7b", "--gpus", "16", "--link", "aws-p5", "--seq-len", "32768",
                   "--global-batch", "16", "--tp", "2", "--cp", "4", "--tp-comm-overlap", "async", "--cp-comm", "a2a",
                   "--recompute", "full", "--verify", "1", "--top", "3")
    assert "--sequence-parallel --tp-comm-overlap async --cp-comm a2a " in d["best"]["flags"]
    assert all("--sequence-parallel --tp-comm-overlap async" in e["flags"] for e in d["layouts"])
    config = d["best_prediction"]["config"]
    assert config["tp_comm_overlap"] == "async" and config["cp_comm"] == "a2a"
    from dpsim.plan.planner import plan_layouts
    base = PredictConfig(model="llama-2-7b", link="aws-p5", seq_len=32768)
    kw = dict(gpus=[16], global_batch=16, tps=[2], cps=[4], pps=[1], micro_batches=[1], recomputes=["full"],
              strategies=["zero1"], sequence_parallel=True, verify=0, top=1)
    ring, ulysses = (plan_layouts(base, cp_comm=c, **kw).best for c in ("p2p", "a2a"))
    assert ring.candidate.cp_comm == "p2p" and ulysses.candidate.cp_comm == "a2a"
    assert ring.step_time_s != ulysses.step_time_s


def test_plan_takes_the_routing_and_a_calibration(capsys):
    """--moe-routing: the busiest expert rank paces the closed form and the verified step alike;
    --calibration: the profile's measured collectives cost every candidate."""
    from dpsim.plan.planner import plan_layouts
    base = PredictConfig(model="mixtral-8x7b", link="infiniband", precision="bf16-params")
    kw = dict(gpus=[64], global_batch=256, tps=[1], pps=[1], eps=[8], micro_batches=[1], recomputes=["full"],
              strategies=["zero1"], verify=1, top=1)
    balanced = plan_layouts(base, **kw)
    skewed = plan_layouts(dataclasses.replace(base, moe_routing="zipf:1.2"), **kw)
    assert skewed.best.candidate == balanced.best.candidate
    assert skewed.best.step_time_s > balanced.best.step_time_s
    assert "--moe-routing zipf:1.2 " in skewed.to_dict()["command"]
    d = _plan_json(capsys, "--model", "llama-2-7b", "--gpus", "16", "--link", "aws-p4de", "--calibration",
                   "aws-p4de-2node", "--global-batch", "64", "--tp", "2", "--pp", "1", "--micro-batches", "4",
                   "--strategies", "zero1", "--recompute", "full", "--no-sequence-parallel", "--verify", "1", "--top", "1")
    assert "--calibration aws-p4de-2node " in d["command"]
    assert d["best_prediction"]["config"]["calibration"] == "aws-p4de-2node"
    plain = plan_layouts(PredictConfig(model="llama-2-7b", link="aws-p4de"), gpus=[16], global_batch=64, tps=[2],
                         pps=[1], micro_batches=[4], strategies=["zero1"], recomputes=["full"], sequence_parallel=False,
                         verify=1, top=1).best
    assert d["best"]["flags"] == plain.candidate.flags() and d["best"]["step_time_s"] != plain.step_time_s


def test_plan_searches_dualpipe_when_asked():
    """DualPipe (--schedules dualpipe): searched where it runs (p even, m even and >= 2p); its
    closed form (the paper's bubble) is the simulation's step within 3 %, its memory (each stage
    holds two stages' parameters) predict's own, and it idles less than 1F1B."""
    from dpsim.plan.planner import plan_layouts
    base = PredictConfig(model="llama-2-13b", link="infiniband", precision="bf16-params")
    kw = dict(gpus=[64], global_batch=256, tps=[4], pps=[4], micro_batches=[1], recomputes=["full"],
              strategies=["zero1"], sequence_parallel=True, top=1)
    one_f, dual = (plan_layouts(base, schedules=[s], verify=0, **kw).best for s in ("1f1b", "dualpipe"))
    assert dual.candidate.schedule == "dualpipe" and dual.bubble_s < one_f.bubble_s
    assert dual.memory_bytes > one_f.memory_bytes
    verified = plan_layouts(base, schedules=["dualpipe"], verify=1, **kw).best
    assert verified.verified.config.parallelism.schedule == "dualpipe"
    assert verified.memory_bytes == dual.memory_bytes
    assert dual.step_time_s == pytest.approx(verified.step_time_s, rel=0.03)
    from dpsim.plan.planner import Planner
    planner = Planner(base)
    shapes, _ = planner.candidates(96, global_batch=96, tps=(4,), pps=(3, 4), micro_batches=(1,),
                                   recomputes=("full",), schedules=("dualpipe",))
    assert {(c.pp, c.schedule) for c in shapes} == {(4, "dualpipe")}  # not 3 stages: an even count
    few, _ = planner.candidates(96, global_batch=36, tps=(4,), pps=(4,), micro_batches=(1,), recomputes=("full",),
                                schedules=("dualpipe",))
    assert few == []  # 6 micro-batches per replica, fewer than 2 x 4


@pytest.mark.parametrize("model, gpus, kw", [
    ("llama-2-7b", 32, dict(tp=2, pp=4, dp=4)),  # every pair across servers
    ("llama-2-7b", 16, dict(tp=1, pp=8, dp=2)),  # 4 stages a server: the middle pair too crosses
    ("gpt2-xl", 8, dict(tp=1, pp=4, dp=2)),  # tied embedding, every pair inside one server
    ("llama-2-7b", 24, dict(tp=1, pp=6, dp=4)),  # uneven stages; the middle pair (2, 3) in one server
])
def test_plan_estimate_of_dualpipe_is_predicts(model, gpus, kw):
    """DualPipe's closed form counts what predict plays: both parameter copies' memory, and the
    gradient all-reduce between each stage and its mirror on where that pair sits."""
    from dpsim.plan.planner import Candidate, Planner
    base = PredictConfig(model=model, link="infiniband", precision="bf16-params")
    c = Candidate(gpus=gpus, strategy="zero1", micro_batch=1, global_batch=kw["dp"] * kw["pp"] * 4, recompute="full",
                  schedule="dualpipe", virtual_stages=1, sequence_parallel=kw["tp"] > 1, **kw)
    est = Planner(base).estimate(c, global_batch=c.global_batch)
    pred = predict(dataclasses.replace(c.config(base), steps=1))
    assert est.memory_bytes == pytest.approx(pred.memory.total_bytes, rel=1e-12)
    assert est.step_time_s == pytest.approx(pred.step_time_s, rel=0.06)


def test_dualpipe_pair_exchange_bytes_and_placement():
    """Stage 0 and its mirror all-reduce the gradients of both copies they hold: for Llama-2-7B
    (hidden 4096, FFN 11008, vocabulary 32000, 32 blocks) over 4 stages, 8 blocks each, the
    embedding with stage 0 and the final norm and head with stage 3, in bf16 (2 bytes)."""
    from dpsim.collectives.groups import LayoutShape, mirror_pair_group
    h, ffn, vocab = 4096, 11008, 32000
    block = 4 * h * h + 3 * h * ffn + 2 * h
    pair0 = 2 * 8 * block + 2 * vocab * h + h
    pred = predict(PredictConfig(model="llama-2-7b", link="infiniband", precision="bf16-params", gpus=16, tp=1,
                                 pp=4, schedule="dualpipe", micro_batch=1, global_batch=32, strategy="zero1", recompute="full",
                                 steps=1))
    # zero1's gradients reduce-scatter, so stage 0's one all-reduce is the pair's.
    assert pred.comm_bytes_by_op["all_reduce"] == 2 * pair0
    # Stages of 2 ranks on 8-GPU servers: stages 0-3 in one, 4-7 in the next; with 12 stages of
    # two ranks on 24 GPUs, the middle pair (5, 6) shares a server while (3, 8) does not. ``emb`` is placed as the
    # job's farthest pair (across servers once the job spans them), so a pair as far apart takes it.
    from dpsim.topology.cluster import Topology
    from dpsim.topology.load import load_preset
    ib = load_preset("infiniband")
    assert [mirror_pair_group(Topology(spec=ib, n_gpus=16), LayoutShape(tp=1, pp=8, dp=2), r)
            for r in range(4)] == ["emb"] * 4
    assert [mirror_pair_group(Topology(spec=ib, n_gpus=8), LayoutShape(tp=1, pp=8, dp=1), r)
            for r in range(4)] == ["emb"] * 4
    assert [mirror_pair_group(Topology(spec=ib, n_gpus=24), LayoutShape(tp=1, pp=12, dp=2), r)
            for r in (3, 5)] == ["emb", "pair-server"]


def test_plan_takes_cp_balance_to_every_context_parallel_candidate(capsys):
    """--no-cp-balance (contiguous sequence pieces, the last rank pacing a causal mask's attention)
    reaches every candidate with cp above 1 and its simulation: plan's best is then no faster than
    with causal load balancing; without any cp searched the flag is refused, as predict refuses it."""
    from dpsim.plan.planner import plan_layouts
    base = PredictConfig(model="llama-3-8b", link="infiniband", seq_len=32768, precision="bf16-params")
    kw = dict(gpus=[16], global_batch=16, tps=[2], cps=[1, 4], pps=[1], micro_batches=[1], recomputes=["full"],
              strategies=["zero1"], sequence_parallel=True, verify=1, top=5)
    on, off = (plan_layouts(base, cp_balance=b, **kw) for b in (True, False))
    assert any(e.candidate.cp > 1 for e in off.ranked)
    for e in off.ranked:
        assert e.candidate.cp_balance == (e.candidate.cp == 1)
        assert ("--no-cp-balance" in e.candidate.flags()) == (e.candidate.cp > 1)
    assert off.best.verified.config.parallelism.cp_balance == (off.best.candidate.cp == 1)
    assert off.best.step_time_s >= on.best.step_time_s
    forced = dict(kw, cps=[4])
    balanced, unbalanced = (plan_layouts(base, cp_balance=b, **forced).best for b in (True, False))
    assert unbalanced.step_time_s > balanced.step_time_s
    with pytest.raises(ConfigError, match="^--no-cp-balance: applies only with context parallelism"):
        plan_layouts(base, cp_balance=False, **dict(kw, cps=[1]))
    from dpsim.cli import main

    capsys.readouterr()
    rc = main(["plan", "--model", "llama-2-7b", "--gpus", "16", "--link", "infiniband", "--global-batch", "16",
               "--no-cp-balance"])
    assert rc != 0 and "--no-cp-balance: applies only with context parallelism" in capsys.readouterr().err


def test_plan_refuses_fp8_on_a_gpu_without_fp8_naming_the_flag(capsys):
    # The planner never checked the precision against the GPU: the first layout's costing failed with
    # "gpu 'a100': no achieved rate for dtype 'float8'", naming neither --fp8 nor what is allowed.
    from dpsim.cli import main

    rc = main(["plan", "--model", "llama-2-7b", "--link", "pcie", "--gpus", "16", "--global-batch", "96",
               "--fp8", "te-delayed"])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.splitlines()) == 1, err
    assert err.startswith("dpsim: error: --fp8: 'te-delayed' needs FP8 tensor cores") and "a100" in err


def test_plan_lists_layouts_recomputed_by_op_megatron_or_moe(capsys):
    # Labelling such a layout in the table raised KeyError: 'op' (a traceback after the whole search).
    from dpsim.cli import main

    # A search of 40 layouts (tp and pp 1 or 2, 1F1B, micro-batches 1 or 2) lists both recomputations with and
    # without tensor and pipeline parallelism; the default search (1,022 layouts) labels them the same way.
    rc = main(["plan", "--model", "llama-2-7b", "--link", "nvlink", "--gpus", "16", "--global-batch", "96",
               "--recompute", "op,megatron", "--tp", "1,2", "--pp", "1,2", "--schedules", "1f1b",
               "--micro-batches", "1,2", "--top", "40", "--verify", "0"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert " op" in out and " megatron" in out


def test_plan_refuses_router_options_on_a_dense_model(capsys):
    # dpsim plan --moe-routing zipf:1 on gpt2 searched the dense layouts as if the flag were not there.
    from dpsim.cli import main

    rc = main(["plan", "--model", "gpt2", "--link", "nvlink", "--gpus", "16", "--global-batch", "64",
               "--moe-routing", "zipf:1"])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("dpsim: error: --moe-routing: 'zipf:1' applies to a mixture of experts'"), err


def test_more_chunks_than_blocks_says_how_many_chunks_fit():
    # 4 stages x 9 chunks of llama-2-7b's 32 blocks suggested --stage-layers, which cannot fill 36 chunks.
    config = PredictConfig(model="llama-2-7b", gpus=16, link="nvlink", pp=4, micro_batch=1, global_batch=32,
                           schedule="1f1b-interleaved", virtual_stages=9)
    with pytest.raises(ConfigError, match=r"^--pp: 4 stages x 9 chunks = 36 chunks for llama-2-7b's 32 blocks leave "
                                          r"a chunk without blocks; use at most 32 chunks \(fewer stages or fewer "
                                          r"--virtual-stages\)$"):
        predict(config)


def test_one_server_without_a_network_has_no_pair_across_servers():
    """A PCIe server with no fabric, data-parallel over all of it (pp 1: the pipeline pair's
    distance t x d is the whole job), used to trip an internal assertion in ``dpsim plan``."""
    from pathlib import Path

    from dpsim.collectives.groups import LayoutShape, layout_communicators
    from dpsim.predict.run import resolve_topology

    system = Path(__file__).resolve().parents[1] / "validation" / "systems" / "lambda-h12dsg-rtx6000ada-x8.yaml"
    job = resolve_topology(PredictConfig(gpus=8, topology_file=str(system)))
    assert job.spec.fabric is None
    for shape in (LayoutShape(tp=1, pp=1, dp=8), LayoutShape(tp=2, pp=1, dp=4), LayoutShape(tp=1, pp=8, dp=1)):
        comms = layout_communicators(job, shape)
        assert comms["pp"].topology.n_gpus == 2 and comms["pp"].topology.n_nodes == 1


def test_fused_gradient_accumulation_charges_the_weight_gradient_gemms_their_buffer():
    # Megatron's --gradient-accumulation-fusion: each weight-gradient GEMM reads and writes the
    # gradient buffer. A dense layer's GEMMs over 4096 tokens stay compute-bound; a fine-grained
    # MoE's local experts at a small micro-batch (qwen3-235b-a22b, TP4 EP8: about 520 rows an
    # expert) are bound by that traffic, so only their backward grows.
    from dpsim.hardware import get_gpu
    from dpsim.predict.layout import expert_split, shard_compute
    from dpsim.strategies.tensor import tp_model
    from dpsim.workload.catalog import get_model
    from dpsim.workload.precision import get_precision

    def backward(model, config):
        tpm = tp_model(get_model(model), config.parallelism.tp, sequence_parallel=config.parallelism.sequence_parallel,
                       experts=expert_split(config))
        unfused = dataclasses.replace(config, parallelism=dataclasses.replace(config.parallelism, grad_accum_fusion=False))
        precision = get_precision("bf16-fp32-grads")
        a, b = (shard_compute(tpm, get_gpu("h100"), c, precision) for c in (config, unfused))
        assert a.forward_s == b.forward_s
        return a.backward_s, b.backward_s

    fused, unfused = backward("llama-2-13b", _layout_config(gpus=64, precision="bf16-fp32-grads"))
    assert fused == pytest.approx(unfused, rel=1e-3)
    moe = _layout_config(gpus=256, tp=4, pp=8, ep=8, model="qwen3-235b-a22b", precision="bf16-fp32-grads",
                         sequence_parallel=True, global_batch=256)
    fused, unfused = backward("qwen3-235b-a22b", moe)
    assert fused > unfused * 1.05


def _megatron_layers_to_build(num_layers: int, pp: int, vp: int, stage: int, chunk: int) -> int:
    """Transformer layers Megatron-Core builds on one chunk with --account-for-embedding-in-pipeline-split
    and --account-for-loss-in-pipeline-split (an independent count of get_num_layers_to_build,
    NVIDIA/Megatron-LM@1e057005959b megatron/core/transformer/transformer_block.py lines 107-166: one slot
    each for the embedding and the loss, the slots split evenly over stages then chunks, the first
    virtual stage one layer fewer, the last one fewer)."""
    slots = num_layers + 2
    assert slots % pp == 0 and (slots // pp) % vp == 0
    n = slots // pp // vp
    return n - (stage == 0 and chunk == 0) - (stage == pp - 1 and chunk == vp - 1)


def _r060_assignment():
    """R060's layout (Qwen3-235B-A22B, 94 blocks, TP 2, PP 32, 3 chunks a stage; the ModelZoo's
    Qwen3-235B-A22B.yaml@c1ad0b5c89f4 passes both --account-for-*-in-pipeline-split flags)."""
    from dpsim.predict.layout import expert_split, layout_of
    from dpsim.strategies.layout import stage_assignment
    from dpsim.strategies.tensor import tp_model
    config = PredictConfig(gpus=256, tp=2, pp=32, ep=8, link="infiniband", model="qwen3-235b-a22b",
                           global_batch=2048, micro_batch=1, schedule="1f1b-interleaved", virtual_stages=3,
                           strategy="zero1", sequence_parallel=True, steps=1)
    model = load_model(config)
    tpm = tp_model(model, 2, sequence_parallel=True, experts=expert_split(config, model))
    return tpm, stage_assignment(tpm, layout_of(config))


def test_r060_split_is_megatrons():
    """Each of R060's 32 x 3 chunks holds the blocks Megatron-Core builds there, and the embedding runs
    alone on stage 0's first chunk."""
    tpm, assignment = _r060_assignment()
    assert len({l.unit for l in tpm.layers if l.unit is not None}) == 94
    blocks = [[len({tpm.layers[i].unit for i in chunk if tpm.layers[i].unit is not None}) for chunk in stage]
              for stage in assignment]
    assert blocks == [[_megatron_layers_to_build(94, 32, 3, s, c) for c in range(3)] for s in range(32)]
    first_block = min(i for i, l in enumerate(tpm.layers) if l.unit is not None)
    before = [(s, c) for s, stage in enumerate(assignment) for c, chunk in enumerate(stage)
              for i in chunk if i < first_block]
    assert before and set(before) == {(0, 0)}
    assert all(tpm.layers[i].unit is None for i in assignment[0][0])


def test_r060_head_runs_alone_on_the_empty_last_chunk():
    """The final norm, head and loss alone on stage 31's last chunk (post_process:
    is_pipeline_last_stage(ignore_virtual=False, vp_stage), megatron/training/training.py lines 995-999
    at NVIDIA/Megatron-LM@1e057005959b), not beside stage 30's last block."""
    tpm, assignment = _r060_assignment()
    last_block = max(i for i, l in enumerate(tpm.layers) if l.unit is not None)
    after = [(s, c) for s, stage in enumerate(assignment) for c, chunk in enumerate(stage)
             for i in chunk if i > last_block]
    assert after and set(after) == {(31, 2)}
    assert all(tpm.layers[i].unit is None for i in assignment[31][2])
