"""FP8 primary weights (``--fp8-params``: TransformerEngine ``fp8_model_init``, Megatron-LM
``--fp8-param-gather``, NeMo ``fp8_params``) and the FP8 copies of the linears' inputs TransformerEngine
keeps for backward: hand counts through the one memory model (predict, memory, plan), the one-line
refusals, and the all-gathers that move FP8."""

from __future__ import annotations

import pytest

from dpsim.errors import ConfigError
from dpsim.plan.planner import plan_layouts
from dpsim.predict import PredictConfig, predict
from dpsim.predict.run import memory_for_config
from dpsim.workload.catalog import get_model
from dpsim.hardware import get_gpu
from dpsim.memory import layout_stage_memory
from dpsim.strategies.layout import Layout, stage_assignment
from dpsim.strategies.shards import deepspeed_partition_numel
from dpsim.strategies.tensor import tp_model
from dpsim.workload.fp8 import (
    fp8_saved_input_elements,
    fp8_weight_numel,
    get_fp8_recipe,
    saved_fp8_weight_bytes_per_element,
)
from dpsim.workload.precision import get_precision

# GPT-2 (124M): 12 blocks of c_attn 768 x 2304, c_proj 768 x 768, c_fc 768 x 3072, c_proj 3072 x 768.
H, S, BLOCKS = 768, 1024, 12
BLOCK_FP8 = H * (3 * H + H + 4 * H + 4 * H)
LAYOUT = dict(gpus=8, link="infiniband", model="gpt2", tp=2, micro_batch=2, global_batch=16, strategy="zero1",
              precision="bf16-params", sequence_parallel=True, steps=1)


def _stage(gpu="h100", **kw):
    """The (one) stage's memory of GPT-2 under tp 2 with sequence parallelism, zero1 over 4 replicas."""
    p = predict(PredictConfig(**{**LAYOUT, "gpu": gpu, **kw}))
    (stage,) = p.layout.stages
    return stage.memory.breakdown


def test_gpt2_fp8_linear_weights_are_a_hand_count():
    assert sum(fp8_weight_numel(layer) for layer in get_model("gpt2").layers) == BLOCKS * BLOCK_FP8


def test_fp8_params_drop_the_16_bit_copy_of_the_fp8_linears_weights():
    """Per GPU (tp 2): f = 12 blocks x BLOCK_FP8 / 2 FP8 weight elements. Without --fp8-params TE keeps
    the 16-bit weight and, for the step, its FP8 cast and (Hopper) transpose; with it the FP8 parameter
    is that cast: 2 bytes an element less, exactly. Gradients and the sharded fp32 master and Adam state
    stay as they were."""
    f = BLOCKS * BLOCK_FP8 // 2
    te = _stage(fp8="te-delayed")
    params = _stage(fp8="te-delayed", fp8_params=True)
    assert te.total_bytes - params.total_bytes == 2 * f
    assert params.fp8_weights_bytes == 2 * f  # the FP8 parameter and its cached transpose (Hopper)
    assert (params.gradients_bytes, params.optimizer_bytes) == (te.gradients_bytes, te.optimizer_bytes)
    assert params.fp8_inputs_bytes == te.fp8_inputs_bytes


def test_fp8_params_weigh_less_than_bf16_by_the_expected_bytes_on_blackwell():
    """On Blackwell a per-tensor recipe keeps no transpose: the FP8 parameter is one byte against bf16's
    two, f bytes fewer; the activations are bf16's with the FP8 input copies (negative) on top."""
    f = BLOCKS * BLOCK_FP8 // 2
    bf16 = _stage(gpu="b200")
    params = _stage(gpu="b200", fp8="te-delayed", fp8_params=True)
    assert bf16.weights_bytes - params.weights_bytes == f
    assert params.fp8_weights_bytes == f
    assert params.activations_bytes - bf16.activations_bytes == params.fp8_inputs_bytes < 0
    assert bf16.total_bytes - params.total_bytes == f - params.fp8_inputs_bytes


def test_fp8_input_copies_are_a_hand_count():
    """Per block and sample on one of 2 sequence-parallel ranks (s x h / 2 elements each), TE keeps
    the first norm's output (c_attn's input), the second's (c_fc's) and the GELU output (c_proj's,
    4h wide) as FP8 copies, one byte for two: -(1 + 1 + 4); the attention output stays 16-bit in the
    fused kernel and the output projection keeps its FP8 copy too: +1. So -5 s h / 2 bytes a block
    and sample, 12 blocks, a micro-batch of 2, one micro-batch in flight (no pipeline)."""
    params = _stage(fp8="te-delayed")
    assert params.fp8_inputs_bytes == -5 * S * H / 2 * BLOCKS * 2
    torchao = _stage(fp8="torchao-tensorwise")  # saves the high-precision input
    assert torchao.fp8_inputs_bytes == 0.0


def test_fp8_input_elements_of_a_llama_block_fused_or_not():
    """Megatron-Core's TE layers fuse q/k/v and gate/up (one FP8 copy each); a Hugging Face model whose
    nn.Linear modules are te.Linear keeps one per module. Without a fused attention kernel nothing else
    keeps the attention output: the output projection's FP8 copy replaces it."""
    model = get_model("llama-2-7b", flash_attention=True)
    attn, mlp = model.layers[1], model.layers[2]
    recipe = get_fp8_recipe("te-delayed")
    s, h, inter = 4096, 4096, 11008
    assert fp8_saved_input_elements(attn, recipe) == (s * h, s * h)
    assert fp8_saved_input_elements(mlp, recipe) == (s * h + s * inter, 0)
    assert fp8_saved_input_elements(attn, recipe, fused_projections=False) == (s * h, 3 * s * h)
    assert fp8_saved_input_elements(mlp, recipe, fused_projections=False) == (s * h + s * inter, s * h)
    assert fp8_saved_input_elements(attn, get_fp8_recipe("torchao-rowwise")) == (0, 0)
    eager = get_model("llama-2-7b", flash_attention=False).layers[1]
    assert fp8_saved_input_elements(eager, recipe) == (2 * s * h, 0)


def test_plan_charges_what_predict_charges():
    data_parallel = {k: v for k, v in LAYOUT.items() if k not in ("tp", "sequence_parallel", "global_batch", "strategy")}
    base = PredictConfig(**data_parallel, fp8="te-delayed", fp8_params=True)
    result = plan_layouts(base, gpus=[8], global_batch=16, tps=[2], pps=[1], strategies=["zero1"],
                          micro_batches=[2], recomputes=["off"], sequence_parallel=True, verify=0)
    (estimate,) = [e for e in result.ranked if e.candidate.tp == 2]
    layout = estimate.candidate.config(base)
    assert layout.execution.fp8_params
    mem = memory_for_config(layout)[0]
    assert estimate.memory_bytes == pytest.approx(mem.total_bytes, rel=1e-12)
    assert mem.fp8_weights_bytes > 0


def test_the_distributed_optimizers_parameter_all_gather_moves_fp8():
    """zero1 gathers the updated parameters once a step: the FP8 linears' weights in one byte instead of
    two, so f bytes fewer on each GPU (tp 2), the rest (embeddings, norms, biases) as before."""
    f = BLOCKS * BLOCK_FP8 // 2
    te = predict(PredictConfig(**LAYOUT, fp8="te-delayed")).comm_bytes_by_op
    params = predict(PredictConfig(**LAYOUT, fp8="te-delayed", fp8_params=True)).comm_bytes_by_op
    assert te["all_gather"] - params["all_gather"] == pytest.approx(f, rel=1e-9)
    assert params["reduce_scatter"] == te["reduce_scatter"]  # gradients are reduced in bf16 as before


def test_fsdp2_gathers_halve_the_fp8_linear_weights():
    """FSDP2 with FP8 parameters: every all-gather moves the FP8 linears' weights in one byte (forward
    and backward gather each block: 2 x 12 x BLOCK_FP8 bytes fewer), as torchao's float8 all-gather does."""
    config = dict(gpus=8, link="infiniband", model="gpt2", micro_batch=2, strategy="fsdp", fsdp_version="2",
                  precision="bf16-params", fp8="te-delayed", steps=1)
    te = predict(PredictConfig(**config)).comm_bytes_by_op
    params = predict(PredictConfig(**config, fp8_params=True))
    assert te["all_gather"] - params.comm_bytes_by_op["all_gather"] == pytest.approx(2 * BLOCKS * BLOCK_FP8, rel=1e-3)
    assert params.memory.fp8_weights_bytes > 0


@pytest.mark.parametrize("kw, message", [
    ({}, "--fp8-params: keeps the FP8 linears' weights in FP8 and needs an FP8 recipe"),
    ({"fp8": "torchao-tensorwise"}, "--fp8-params: FP8 primary weights are TransformerEngine's"),
    ({"fp8": "te-delayed", "precision": "amp-bf16"}, "--fp8-params: needs 16-bit parameters with an fp32 master"),
    ({"fp8": "te-delayed", "tp": 1, "global_batch": None, "sequence_parallel": False, "strategy": "fsdp"},
     "--strategy fsdp --fsdp-version 1 without --tp/--pp/--cp is not one"),
    ({"fp8": "te-delayed", "strategy": "ddp"}, "--fp8-params: runs with a distributed optimizer"),
    ({"fp8": "te-delayed", "strategy": "ddp", "tp": 1, "global_batch": None, "sequence_parallel": False},
     "--strategy ddp without --tp/--pp/--cp is not one"),
])
def test_refusals_are_one_line_naming_the_flag(kw, message):
    with pytest.raises(ConfigError) as err:
        predict(PredictConfig(**{**LAYOUT, **kw, "fp8_params": True}))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_off_by_default_and_named_only_when_set():
    config = PredictConfig(**LAYOUT, fp8="te-delayed")
    assert not config.execution.fp8_params
    assert "fp8_params" not in config.to_dict()
    assert PredictConfig(**LAYOUT, fp8="te-delayed", fp8_params=True).to_dict()["fp8_params"] is True


# Data parallelism alone: zero1 is Megatron-Core's distributed optimizer at tp = pp = cp = 1 (MLPerf's Llama 3.1
# 8B, NeMo FP8_PARAM_GATHER with USE_DIST_OPTIMIZER), the same mechanism and count as a layout's zero1 stage.
DP = dict(gpus=8, link="infiniband", model="gpt2", micro_batch=2, strategy="zero1", precision="bf16-params", steps=1)


def _dp(gpu="h100", **kw):
    return predict(PredictConfig(**{**DP, "gpu": gpu, **kw}))


def test_data_parallel_zero1_fp8_params_are_a_hand_count():
    """GPT-2 on 8 GPUs, every parameter whole on each: psi - F 16-bit weights and F = 12 x BLOCK_FP8 FP8 ones,
    each the FP8 parameter and (Hopper) its cached transpose, 2 bytes, so the weights weigh what bf16's do and
    the FP8 copies TE saves for backward (in the activations without --fp8-params) are gone. On Blackwell (no
    transpose) F bytes fewer than bf16. Gradients and the sharded fp32 master and Adam state as before."""
    f = BLOCKS * BLOCK_FP8
    psi = get_model("gpt2").param_count
    te, params = _dp(fp8="te-delayed").memory, _dp(fp8="te-delayed", fp8_params=True).memory
    assert params.weights_bytes == 2 * (psi - f) + 2 * f == te.weights_bytes
    assert params.fp8_weights_bytes == 2 * f
    assert (params.gradients_bytes, params.optimizer_bytes) == (te.gradients_bytes, te.optimizer_bytes)
    assert params.optimizer_bytes == deepspeed_partition_numel(psi, 8) * (4 + 4 + 4)  # fp32 master, m, v
    saved = f * saved_fp8_weight_bytes_per_element(get_fp8_recipe("te-delayed"), "hopper", cached=False)
    assert te.activations_bytes - params.activations_bytes == saved > 0
    bf16, b200 = _dp(gpu="b200").memory, _dp(gpu="b200", fp8="te-delayed", fp8_params=True).memory
    assert bf16.weights_bytes - b200.weights_bytes == f
    assert b200.fp8_weights_bytes == f


def test_data_parallel_zero1_counts_as_a_tp1_layout_stage():
    """The same job through the layout path (tp = pp = 1, zero1 over 8 replicas): the same weights, FP8
    weights, gradients and sharded optimizer state (one count, fp8_param_weight_bytes). Activations and
    buffers are each path's own framework model (DeepSpeed's buckets, Megatron-Core's fused TE layers)."""
    model = get_model("gpt2")
    precision = get_precision("bf16-params", "te-delayed", strategy="zero1", layout=True, fp8_params=True)
    layout = Layout(tp=1, pp=1, dp=8, micro_batches=1, micro_batch=2, strategy="zero1")
    tpm = tp_model(model, 1)
    (stage,) = layout_stage_memory(tpm, stage_assignment(tpm, layout), layout, get_gpu("h100"), precision=precision,
                                   optimizer="adamw", in_flight=[[1]])
    dp = _dp(fp8="te-delayed", fp8_params=True).memory
    lay = stage.breakdown
    assert (lay.weights_bytes, lay.fp8_weights_bytes, lay.gradients_bytes) == \
        (dp.weights_bytes, dp.fp8_weights_bytes, dp.gradients_bytes)
    assert lay.optimizer_bytes == pytest.approx(dp.optimizer_bytes, abs=12 * 8)  # DeepSpeed's alignment padding


def test_data_parallel_zero1_gathers_the_updated_parameters_in_fp8():
    """The post-step all-gather of the updated parameters moves the FP8 linears' weights in one byte: F bytes
    fewer (the same gathered_weight_bytes as the layout path); the reduce-scatter of bf16 gradients as before."""
    f = BLOCKS * BLOCK_FP8
    te = _dp(fp8="te-delayed").comm_bytes_by_op
    params = _dp(fp8="te-delayed", fp8_params=True).comm_bytes_by_op
    assert te["all_gather"] - params["all_gather"] == pytest.approx(f, rel=1e-12)
    assert params["reduce_scatter"] == te["reduce_scatter"]


def test_data_parallel_zero1_plan_memory_is_predicts():
    base = PredictConfig(**{k: v for k, v in DP.items() if k != "strategy"}, gpu="h100", fp8="te-delayed",
                         fp8_params=True)
    result = plan_layouts(base, gpus=[8], global_batch=16, tps=[1], pps=[1], strategies=["zero1"],
                          micro_batches=[2], recomputes=["off"], verify=0)
    (estimate,) = [e for e in result.ranked if e.candidate.tp == 1 and e.candidate.strategy == "zero1"]
    config = estimate.candidate.config(base)
    assert config.execution.fp8_params and not config.parallelism.layout_active
    mem = memory_for_config(config)[0]
    assert estimate.memory_bytes == pytest.approx(mem.total_bytes, rel=1e-12)
    assert mem.fp8_weights_bytes == 2 * BLOCKS * BLOCK_FP8


# --- TransformerEngine's FP8 weight copies without --fp8-params: a named part of the activations --------------------
def test_the_fp8_weight_cache_is_named_inside_the_activations():
    """Without --fp8-params TE keeps an FP8 copy of each FP8 linear's 16-bit weight from forward to backward:
    its own part of the activations (MemoryBreakdown.fp8_weight_cache_bytes), every category and the total as
    before. A layout's stage (Megatron-Core passes is_first_microbatch: cached, the copy and its transpose on
    Hopper, 2 bytes) and the data-parallel path (no is_first_microbatch: TE 1.x saves the transpose only, 1 byte)
    through the one count, saved_fp8_weight_copy_bytes. With --fp8-params the copies are the parameters: 0."""
    from dpsim.memory import saved_fp8_weight_copy_bytes

    te_recipe = get_precision("bf16-params", "te-delayed")
    f = BLOCKS * BLOCK_FP8 // 2  # a tp-2 rank's share
    stage, params = _stage(fp8="te-delayed"), _stage(fp8="te-delayed", fp8_params=True)
    assert stage.fp8_weight_cache_bytes == saved_fp8_weight_copy_bytes(f, te_recipe, "hopper", cached=True) == 2 * f
    assert params.fp8_weight_cache_bytes == 0.0
    assert stage.activations_bytes - params.activations_bytes == stage.fp8_weight_cache_bytes
    assert _stage(gpu="b200", fp8="te-delayed").fp8_weight_cache_bytes == f  # Blackwell: no transpose
    dp, dp_params = _dp(fp8="te-delayed").memory, _dp(fp8="te-delayed", fp8_params=True).memory
    whole = BLOCKS * BLOCK_FP8
    assert dp.fp8_weight_cache_bytes == saved_fp8_weight_copy_bytes(whole, te_recipe, "hopper", cached=False) == whole
    assert dp_params.fp8_weight_cache_bytes == 0.0
    assert dp.activations_bytes - dp_params.activations_bytes == dp.fp8_weight_cache_bytes
    for mem in (stage, dp):  # a part, not a category: the total is the categories' sum
        assert mem.total_bytes == mem.weights_bytes + mem.gradients_bytes + mem.optimizer_bytes \
            + mem.activations_bytes + mem.comm_buffers_bytes + mem.overhead_bytes
    assert _dp().memory.fp8_weight_cache_bytes == 0.0 == _dp(fp8="torchao-tensorwise").memory.fp8_weight_cache_bytes


def test_the_fp8_weight_cache_is_shown_by_memory_and_predict(capsys):
    """`dpsim memory` (text and --json) and the predict report (text and JSON) name the copies; a job without them
    names nothing."""
    from dpsim.report.text import prediction_tables
    from tests.fuzz_harness import run_cli
    from tests.fuzz_harness import run_json

    job = ["--model", "gpt2", "--gpu", "h100", "--gpus", "8", "--link", "infiniband", "--precision", "bf16-params",
           "--strategy", "zero1", "--micro-batch", "2", "--steps", "1"]
    cache = _dp(fp8="te-delayed").memory.fp8_weight_cache_bytes
    memory = run_json(["memory"] + job + ["--fp8", "te-delayed", "--json"], capsys)
    assert memory["fp8_weight_cache_bytes"] == cache > 0
    assert "fp8_weight_cache_bytes" not in run_json(["memory"] + job + ["--json"], capsys)
    assert "fp8_weight_cache_bytes" not in run_json(["memory"] + job + ["--fp8", "te-delayed", "--fp8-params",
                                                                         "--json"], capsys)
    text = run_cli(["memory"] + job + ["--fp8", "te-delayed"], capsys).out
    lines = text.splitlines()
    at = next(i for i, line in enumerate(lines) if "of which FP8 weight copies" in line)
    assert "activations" in lines[at - 1]
    predicted = _dp(fp8="te-delayed")
    assert predicted.to_dict()["memory"]["fp8_weight_cache_bytes"] == cache
    (table,) = [t for t in prediction_tables(predicted) if str(t.title).startswith("memory per")]
    assert "  of which FP8 weight copies" in table.columns[0]._cells


# --- FP8 primary weights of a mixture of experts: the grouped expert GEMMs are FP8 under TransformerEngine -----------
QWEN3_MOE_FP8 = 48 * (2048 * 4096 + 2 * 2048 * 512 + 4096 * 2048 + 128 * (2048 * 1536 + 768 * 2048))
"""FP8 linear weights of Qwen3-30B-A3B counted from its config (48 layers, hidden 2048, 32 query and 4 key-value heads
of 128, 128 experts of intermediate 768; Qwen/Qwen3-30B-A3B config.json): q, k, v and o of each layer and every
expert's gate, up and down. TransformerEngine runs the grouped expert GEMMs in FP8 (Megatron-Core's TEGroupedLinear);
the router and the LM head stay 16-bit."""


@pytest.mark.parametrize("recipe, gpu", [("te-delayed", "h100"), ("te-current", "b200"), ("te-blockwise", "h100"),
                                         ("mxfp8", "b200")])
def test_zero1_gathers_a_mixture_of_experts_fp8_weights_in_one_byte(recipe, gpu):
    """Before: the zero1 parameter all-gather (predict's program, plan's estimate) and its memory counted the FP8
    weights without the recipe, so a TE recipe's FP8 expert weights were gathered and held as 16-bit ones (29.9 G
    elements of Qwen3-30B-A3B's 30.5 G moved in two bytes)."""
    from dpsim.workload.fp8 import saved_fp8_weight_bytes_per_element

    job = dict(model="qwen3-30b-a3b", gpus=64, link="infiniband", gpu=gpu, strategy="zero1", micro_batch=1,
               precision="bf16-params", fp8=recipe, steps=1)
    te = predict(PredictConfig(**job)).comm_bytes_by_op
    params = predict(PredictConfig(**job, fp8_params=True))
    assert te["all_gather"] - params.comm_bytes_by_op["all_gather"] == QWEN3_MOE_FP8
    # Held as the FP8 parameters (and their cached transpose on Hopper, their scales), the same weights.
    per = get_precision("bf16-params", recipe, fp8_params=True)
    assert params.memory.fp8_weights_bytes == QWEN3_MOE_FP8 * saved_fp8_weight_bytes_per_element(
        per.fp8, "blackwell" if gpu == "b200" else "hopper", cached=True)
    if params.memory.fits:  # Blackwell's 180 GB: plan ranks it, with predict's memory
        base = PredictConfig(**{k: v for k, v in job.items() if k != "strategy"}, fp8_params=True)
        result = plan_layouts(base, gpus=[64], global_batch=64, tps=[1], pps=[1], eps=[1], strategies=["zero1"],
                              micro_batches=[1], recomputes=["off"], verify=0)
        (estimate,) = result.ranked
        assert estimate.memory_bytes == pytest.approx(params.memory.total_bytes, rel=1e-12)


QWEN3_MOE_STAGE_FP8 = 24 * ((2048 * 4096 + 2 * 2048 * 512 + 4096 * 2048) // 2 + 128 // 4 * (2048 * 1536 + 768 * 2048))
"""FP8 linear weights one GPU of either stage holds of Qwen3-30B-A3B under tp 2, pp 2, ep 4, counted from its config
(as :data:`QWEN3_MOE_FP8`): 24 of the 48 layers a stage, q, k, v and o split over the 2 tensor-parallel ranks, the
128 routed experts' gate, up and down over the 4 expert-parallel ranks (32 whole experts a rank, etp 1)."""


def test_a_layout_gathers_and_holds_a_mixture_of_experts_fp8_weights_under_the_recipe():
    """Before: on the tensor/pipeline path the per-layer FP8 count (``TpModel.fp8_weight_numels``) had no recipe,
    so predict's program and plan's estimate gathered the routed experts' FP8 primary weights in 16 bits (and the
    dense buckets only the attention's FP8) while the memory held them as FP8: 3.6 G of a stage's 3.85 G FP8
    elements moved in two bytes. Now all three read one count: the 16-bit gather less one byte per FP8 element."""
    from dpsim.plan.planner import Candidate, Planner

    job = dict(model="qwen3-30b-a3b", gpus=16, link="infiniband", gpu="h100", tp=2, pp=2, ep=4, strategy="zero1",
               micro_batch=1, global_batch=32, precision="bf16-params", fp8="te-delayed", sequence_parallel=True,
               steps=1)
    te = predict(PredictConfig(**job))
    params = predict(PredictConfig(**job, fp8_params=True))
    # predict's program: TE without FP8 primary weights gathers the 16-bit parameters.
    assert te.comm_bytes_by_op["all_gather"] - params.comm_bytes_by_op["all_gather"] == QWEN3_MOE_STAGE_FP8
    # The memory: each stage holds them as the FP8 parameter and its cached transpose (Hopper).
    per = saved_fp8_weight_bytes_per_element(get_fp8_recipe("te-delayed"), "hopper", cached=True)
    for stage in params.layout.stages:
        assert stage.memory.breakdown.fp8_weights_bytes == QWEN3_MOE_STAGE_FP8 * per
    # plan's estimate: its gradient buckets' all-gathers (dense over dp, routed experts over edp), stage by stage.
    base = PredictConfig(**{k: v for k, v in job.items()
                            if k not in ("tp", "pp", "ep", "strategy", "sequence_parallel", "global_batch")},
                         fp8_params=True)
    planner = Planner(base)
    c = Candidate(gpus=16, tp=2, pp=2, dp=4, ep=4, sequence_parallel=True, strategy="zero1", micro_batch=1,
                  global_batch=32, recompute="off", schedule="1f1b", virtual_stages=1)
    assignment = planner.assignment(c.tp, planner.layout(c, 8))
    tab = planner.tables(c, planner.collectives(c.gpus, c.tp, c.pp, c.dp, c.cp, c.ep, c.etp))
    recipe = planner.gather_fp8("zero1", True)
    gathered = []
    for s in range(c.pp):
        buckets = planner.stage_buckets(tab, assignment, s, bucket=1 << 62, overlap=False, groups=("dp", "edp"))
        fp8 = planner._bucket_fp8[id(buckets)]
        assert sum(fp8) == QWEN3_MOE_STAGE_FP8
        sixteen = sum(b[2] for b in buckets) * 2
        gathered.append(sum(planner._gather_bytes(b[2], f, recipe) for b, f in zip(buckets, fp8)))
        assert gathered[-1] == sixteen - QWEN3_MOE_STAGE_FP8
    assert max(gathered) == params.comm_bytes_by_op["all_gather"]
    estimate = planner.estimate(c, global_batch=32)
    assert estimate.memory_bytes == pytest.approx(max(s.memory.breakdown.total_bytes for s in params.layout.stages),
                                                  rel=1e-12)


def test_an_fsdp_unit_with_its_experts_local_gathers_only_its_dense_fp8_weights():
    """Where each rank holds its routed experts whole (never gathered), an FSDP unit's gathered FP8 weights are its
    dense ones: q, k, v and o of Qwen3-30B-A3B (the experts' FP8 weights were counted in the dense gather, more FP8
    elements than it holds)."""
    from dpsim.memory import _unit_numels
    from dpsim.strategies.tensor import ExpertSplit

    tpm = tp_model(get_model("qwen3-30b-a3b"), 1, experts=ExpertSplit(ep=8, etp=1))
    precision = get_precision("bf16-params", "te-delayed", fp8_params=True)
    blocks = [i for i, layer in enumerate(tpm.layers) if layer.unit is not None]
    units = _unit_numels(tpm, [blocks], experts_local=True, fp8_precision=precision)
    attention = 2048 * 4096 + 2 * 2048 * 512 + 4096 * 2048
    assert {f for _, f in units} == {attention} and all(f <= n for n, f in units)
    whole = _unit_numels(tpm, [blocks], fp8_precision=precision)
    assert {f for _, f in whole} == {attention + 128 // 8 * (2048 * 1536 + 768 * 2048)}
