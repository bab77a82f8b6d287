"""FP8 training recipes (``--fp8``, dpsim/workload/fp8.py): GEMM rates, casts, FSDP2 float8
all-gather, memory by hand count, and one-line errors."""

from __future__ import annotations

import typing

import pytest

from dpsim.errors import ConfigError
from dpsim.hardware import GPU_PRESETS, get_gpu
from dpsim.predict import PredictConfig, predict
from dpsim.predict.config import Fp8
from dpsim.predict.run import memory_for_config
from dpsim.workload.catalog import get_model
from dpsim.workload.compute import compute_profile
from dpsim.workload.fp8 import FP8_RECIPES, fp8_weight_numel, get_fp8_recipe
from dpsim.workload.precision import get_precision
from dpsim.workload.roofline import Efficiencies, fp8_cast_terms, op_terms
from dpsim.workload.spec import MatmulOp

FP8_GPUS = [name for name, g in GPU_PRESETS.items() if "float8" in g.peak_flops_per_s
            and g.architecture in ("ada", "hopper", "blackwell")]


def test_fp8_choices_are_the_recipe_table():
    assert typing.get_args(Fp8) == tuple(FP8_RECIPES)


@pytest.mark.parametrize("name", ["h100", "h200", "h800", "h20", "l40s", "rtx4090", "b200", "gb200", "b300", "gb300"])
def test_presets_the_recipes_need_have_an_fp8_rate(name):
    gpu = get_gpu(name)
    assert 0 < gpu.achieved_rate("float8") <= gpu.peak_rate("float8")
    # FP8 tensor cores run twice the 16-bit peak on every one of them.
    assert gpu.peak_rate("float8") == pytest.approx(2 * gpu.peak_rate("bfloat16"), rel=0.02)


@pytest.mark.parametrize("gpu_name", FP8_GPUS)
@pytest.mark.parametrize("recipe", list(FP8_RECIPES))
def test_fp8_gemm_never_slower_than_bf16(gpu_name, recipe):
    gpu = get_gpu(gpu_name)
    if gpu.architecture not in FP8_RECIPES[recipe].architectures:
        pytest.skip("recipe does not run on this GPU")
    bf16 = get_precision("bf16-params")
    fp8 = get_precision("bf16-params", recipe)
    eff = Efficiencies()
    for m, n, k in ((1, 64, 64), (512, 768, 768), (4096, 4096, 11008), (2048, 128256, 4096), (8, 50000, 1024)):
        op = MatmulOp(name="fc", m=m, n=n, k=k)
        for fp8_terms, bf16_terms in zip(op_terms(op, gpu, fp8, 1), op_terms(op, gpu, bf16, 1)):
            assert sum(t.time_s(eff) for t in fp8_terms) <= sum(t.time_s(eff) for t in bf16_terms) * (1 + 1e-12)


def test_grouped_expert_gemms_run_in_fp8_under_transformer_engine_only():
    """Megatron-Core's experts are TE GroupedLinear modules (FP8 under TE's recipes); torchao's
    float8 conversion swaps nn.Linear only, so its grouped expert GEMMs stay 16-bit."""
    gpu, bf16 = get_gpu("b200"), get_precision("bf16-params")
    experts = MatmulOp(name="experts.gate_up", m=4096, n=3072, k=4096, batch=4)
    bf16_s = sum(t.time_s(Efficiencies()) for t in op_terms(experts, gpu, bf16, 1)[0])
    for recipe in ("te-delayed", "mxfp8", "torchao-tensorwise"):
        fp8 = get_precision("bf16-params", recipe)
        fp8_s = sum(t.time_s(Efficiencies()) for t in op_terms(experts, gpu, fp8, 1)[0])
        casts = fp8_cast_terms(experts, gpu, fp8, 1)
        if FP8_RECIPES[recipe].framework == "transformer-engine":
            assert fp8_s < 0.6 * bf16_s and casts[0] and casts[1]
        else:
            assert fp8_s == bf16_s and casts == ([], [])


def test_lm_head_attention_and_convolutions_stay_16_bit():
    gpu, fp8 = get_gpu("h100"), get_precision("bf16-params", "te-delayed")
    bf16 = get_precision("bf16-params")
    for op in (MatmulOp(name="lm_head", m=2048, n=32000, k=4096), MatmulOp(name="bmm", m=2048, n=2048, k=128, batch=32),
               MatmulOp(name="conv", m=3136, n=64, k=576, kind="conv", kernel=3)):
        assert op_terms(op, gpu, fp8, 1) == op_terms(op, gpu, bf16, 1)
        assert fp8_cast_terms(op, gpu, fp8, 1) == ([], [])


@pytest.mark.parametrize("recipe", ["te-delayed", "te-current", "torchao-tensorwise", "torchao-rowwise"])
def test_cast_bytes_are_a_hand_count_that_scales_with_tokens_times_hidden(recipe):
    """Per linear (m tokens, k in, n out, bf16 activations and weights): each cast reads the 16-bit
    tensor once more per amax pass, once to cast, and writes one FP8 byte per copy."""
    gpu = get_gpu("h100")
    precision = get_precision("bf16-params", recipe)
    m, n, k = 4096, 11008, 4096
    amax = {"te-delayed": 0, "te-current": 1, "torchao-tensorwise": 1, "torchao-rowwise": 1}[recipe]
    copies = 2 if recipe.startswith("te") else 1
    per_elem = (amax + 1) * 2 + copies
    if recipe.startswith("te"):  # x and w in forward, dy once in backward (FP8 copies saved)
        fwd, bwd = (m * k + n * k) * per_elem, m * n * per_elem
    else:  # torchao recasts in backward: dy twice, w and x again
        fwd, bwd = (m * k + n * k) * per_elem, (2 * m * n + n * k + m * k) * per_elem
    bw = gpu.streaming_bandwidth_bytes_per_s
    for tokens in (1, 2, 4):
        op = MatmulOp(name="fc", m=m * tokens // 4 or 1, n=n, k=k)
        f, b = fp8_cast_terms(op, gpu, precision, 4)
        mm = op.m * 4
        want_f = (mm * k + n * k) * per_elem
        want_b = (mm * n + (0 if recipe.startswith("te") else mm * n + n * k + mm * k)) * per_elem
        assert sum(t.memory_s for t in f) * bw == pytest.approx(want_f)
        assert sum(t.memory_s for t in b) * bw == pytest.approx(want_b)
    assert fwd > 0 and bwd > 0


def test_small_models_gain_less_than_large_ones_and_never_2x():
    gpu = get_gpu("h100")
    gains = {}
    for name, mb in (("gpt2", 8), ("llama-2-7b", 2), ("llama-2-70b", 1)):
        model = get_model(name)
        steps = [compute_profile(model, gpu, micro_batch=mb, precision=get_precision("bf16-params", fp8),
                                 optimizer="adamw").step_s for fp8 in (None, "te-delayed")]
        gains[name] = steps[0] / steps[1]
    assert 1 < gains["gpt2"] < gains["llama-2-7b"] < gains["llama-2-70b"] < 2
    # The GEMM rate alone would give 1402.6 / 794.5 = 1.77x on the GEMM share; casts and the
    # 16-bit rest keep every model well below it.
    assert gains["llama-2-70b"] < 1402.6 / 794.5


def _fsdp2(fp8=None, **kw):
    return PredictConfig(gpus=8, link="infiniband", model="llama-2-7b", micro_batch=2, strategy="fsdp",
                         fsdp_version="2", precision="bf16-params", fp8=fp8, steps=1, **kw)


def test_fsdp2_float8_all_gather_moves_half_the_linear_weight_bytes():
    model = get_model("llama-2-7b")
    fp8_numel = sum(fp8_weight_numel(layer) for layer in model.layers)
    # Llama-2-7B's linears (q, k, v, o, gate, up, down) per block, 32 blocks; the LM head stays bf16.
    assert fp8_numel == 32 * (4 * 4096 * 4096 + 3 * 4096 * 11008)
    bf16 = predict(_fsdp2()).comm_bytes_by_op
    fp8 = predict(_fsdp2("torchao-tensorwise")).comm_bytes_by_op
    # Forward gathers every block, backward every block again (the root stays gathered): each
    # gather of a block moves its linear weights in one byte instead of two.
    assert bf16["all_gather"] - fp8["all_gather"] == pytest.approx(2 * fp8_numel, rel=1e-3)
    assert fp8["all_gather"] / bf16["all_gather"] < 0.51
    assert fp8["reduce_scatter"] == bf16["reduce_scatter"]  # gradients are reduced in bf16 as before
    # precompute_float8_dynamic_scale_for_fsdp: one fp32 amax per FP8 weight, one all-reduce.
    assert fp8["all_reduce"] == 4 * 32 * 7


@pytest.mark.parametrize("config", [_fsdp2("torchao-rowwise"), _fsdp2("te-delayed"),
                                    PredictConfig(gpus=8, link="infiniband", model="llama-2-7b", micro_batch=2,
                                                  strategy="fsdp", precision="bf16-params",
                                                  fp8="torchao-tensorwise", steps=1)])
def test_weights_are_gathered_in_bf16_without_the_float8_all_gather(config):
    """Rowwise has no float8 all-gather in torchao; TE recipes cast after the gather; FSDP1 has no
    ``fsdp_pre_all_gather`` extension point."""
    bf16 = predict(PredictConfig(**{**config.to_dict(), "fp8": None})).comm_bytes_by_op
    assert predict(config).comm_bytes_by_op["all_gather"] == bf16["all_gather"]


@pytest.mark.parametrize("recipe", list(FP8_RECIPES)[:4])
@pytest.mark.parametrize("checkpointing", [False, True])
def test_memory_per_recipe_is_a_hand_count(recipe, checkpointing):
    """Every recipe keeps the precision's parameters, gradients, master and Adam state. Under FSDP2
    the tensorwise recipe's gathered blocks (two in flight plus the all-gather staging buffer) hold
    their linear weights in one byte; TransformerEngine keeps each block's FP8 weight from forward
    to backward (one byte an element; under full checkpointing only the block being recomputed),
    torchao the weight FSDP frees and gathers again."""
    base, _, _, _ = memory_for_config(_fsdp2(activation_checkpointing=checkpointing))
    mem, _, _, _ = memory_for_config(_fsdp2(recipe, activation_checkpointing=checkpointing))
    assert (mem.weights_bytes, mem.gradients_bytes, mem.optimizer_bytes) == \
        (base.weights_bytes, base.gradients_bytes, base.optimizer_bytes)
    block_fp8 = 4 * 4096 * 4096 + 3 * 4096 * 11008
    gathered_in_fp8 = recipe == "torchao-tensorwise"
    assert base.comm_buffers_bytes - mem.comm_buffers_bytes == (3 * block_fp8 if gathered_in_fp8 else 0)
    saves_weights = recipe.startswith("te-")
    kept = (block_fp8 if checkpointing else 32 * block_fp8) if saves_weights else 0
    # TransformerEngine also keeps each te.Linear's input as its FP8 copy (one byte) for the 16-bit one
    # (two): per block and sample (s = h = 4096, 11008 wide MLP), the normed input once 16-bit and three
    # times FP8 (q, k, v are three modules), the attention output 16-bit (the fused kernel's) and FP8 (o),
    # the second normed input once 16-bit and twice FP8 (gate, up), the down projection's input FP8 only:
    # 2sh - s*inter bytes, per sample of the micro-batch of 2; under full checkpointing only while the
    # block re-runs.
    s, h, inter = 4096, 4096, 11008
    inputs = (2 * s * h - s * inter) * 2 * (1 if checkpointing else 32) if saves_weights else 0
    assert mem.fp8_inputs_bytes == inputs
    assert mem.activations_bytes - base.activations_bytes == kept + inputs


def test_golden_llama_2_7b_fsdp2_float8_on_8_h100():
    """The float8 blog's setting (torchao tensorwise, FSDP2 float8 all-gather) on one H100 node:
    faster than bf16, by less than the 2x FP8 peak ratio."""
    bf16, fp8 = predict(_fsdp2()), predict(_fsdp2("torchao-tensorwise"))
    assert 1.1 < bf16.step_time_s / fp8.step_time_s < 1.6
    assert fp8.memory.fits


def test_mxfp8_runs_on_b200_only():
    config = dict(gpus=16, link="infiniband", gpu="b200", model="llama-2-7b", micro_batch=2, strategy="fsdp",
                  precision="bf16-params", steps=1)
    bf16, mx = predict(PredictConfig(**config)), predict(PredictConfig(**config, fp8="mxfp8"))
    assert mx.step_time_s < bf16.step_time_s
    with pytest.raises(ConfigError, match=r"--fp8: 'mxfp8' needs FP8 tensor cores of Blackwell"):
        predict(PredictConfig(**{**config, "gpu": "h100"}, fp8="mxfp8"))


@pytest.mark.parametrize("kw, message", [
    ({"fp8": "fp8"}, "--fp8: 'fp8' is not known; choose one of te-delayed"),
    ({"fp8": "te-delayed", "gpu": "a100"}, "--fp8: 'te-delayed' needs FP8 tensor cores of Ada, Hopper or Blackwell"),
    ({"fp8": "torchao-tensorwise", "gpu": "v100"}, "--fp8: 'torchao-tensorwise' needs FP8 tensor cores"),
    ({"fp8": "te-current", "precision": "fp32"}, "--fp8: runs on a 16-bit precision"),
])
def test_errors_are_one_line(kw, message):
    with pytest.raises(ConfigError) as err:
        predict(PredictConfig(**{"gpus": 8, "link": "infiniband", "model": "gpt2", "steps": 1, **kw}))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_recipe_lookup_names_the_choices():
    with pytest.raises(ConfigError, match="choose one of te-delayed, te-current, torchao-tensorwise"):
        get_fp8_recipe("e4m3")


def test_column_wise_copies_follow_the_gemm_layouts_the_gpu_takes():
    """Per element of a cast (bf16 input): TE per-tensor recipes write a transposed copy on Hopper
    (TN-only FP8 GEMMs) but not on Blackwell; MXFP8 writes row- and column-wise copies with one
    E8M0 scale byte per 32 elements."""
    op = MatmulOp(name="fc", m=1024, n=4096, k=4096)
    expect = {("h100", "te-delayed"): 2 + 2, ("b200", "te-delayed"): 2 + 1,
              ("h100", "te-current"): 2 * 2 + 2, ("b200", "mxfp8"): 2 + 2 * (1 + 1 / 32)}
    for (gpu_name, recipe), per_elem in expect.items():
        gpu = get_gpu(gpu_name)
        forward, _ = fp8_cast_terms(op, gpu, get_precision("bf16-params", recipe), 1)
        assert forward[0].memory_s * gpu.streaming_bandwidth_bytes_per_s == pytest.approx(1024 * 4096 * per_elem)


def test_tensor_parallel_layouts_run_the_recipe_too():
    config = dict(gpus=16, link="infiniband", model="llama-2-7b", tp=2, micro_batch=1, global_batch=16,
                  precision="bf16-params", strategy="zero1", steps=1)
    bf16, fp8 = predict(PredictConfig(**config)), predict(PredictConfig(**config, fp8="te-delayed"))
    assert fp8.step_time_s < bf16.step_time_s


@pytest.mark.parametrize("recompute", ["off", "full"])
def test_layout_stages_hold_transformer_engines_cached_fp8_weights(recompute):
    """A Megatron-Core layout's TE linears cache their FP8 weight cast across micro-batches
    (is_first_microbatch), so each stage holds, per FP8 weight element of its shard, the whole step,
    recomputed or not, the row-wise copy and on Hopper its transpose: two bytes (Llama-2-7B tp 2 x
    pp 2: 16 blocks of 4 x 4096^2 + 3 x 4096 x 11008 FP8 elements, halved by tp, per stage).
    torchao keeps no copy."""
    config = dict(gpus=16, link="infiniband", model="llama-2-7b", tp=2, pp=2, micro_batch=1, global_batch=16,
                  precision="bf16-params", strategy="zero1", sequence_parallel=True, recompute=recompute, steps=1)
    bf16 = predict(PredictConfig(**config)).layout.stages
    block_fp8 = 4 * 4096 * 4096 + 3 * 4096 * 11008
    for recipe, kept in (("te-delayed", 2 * 16 * block_fp8 // 2), ("torchao-tensorwise", 0)):
        fp8 = predict(PredictConfig(**config, fp8=recipe)).layout.stages
        for a, b in zip(fp8, bf16):
            inputs = a.memory.breakdown.fp8_inputs_bytes  # the FP8 input copies (test_fp8_params.py)
            assert (inputs < 0) == (recipe == "te-delayed")  # full: the block re-run keeps them too
            assert a.memory.breakdown.activations_bytes - b.memory.breakdown.activations_bytes == kept + inputs


def test_a_traced_output_projection_stays_16_bit():
    """A torch module's ``lm_head`` / ``output`` linear lowers to the catalog's ``lm_head`` op, which
    no recipe runs in FP8; the other linears do."""
    torch = pytest.importorskip("torch")
    from dpsim.workload.from_torch import workload_from_module

    class Lm(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(256, 64)
            self.fc = torch.nn.Linear(64, 64)
            self.output = torch.nn.Linear(64, 256, bias=False)

        def forward(self, x):
            return self.output(self.fc(self.embed(x)))

    spec = workload_from_module(Lm(), torch.randint(0, 256, (2, 32)), name="lm")
    ops = {layer.name: [op for op in layer.ops if isinstance(op, MatmulOp)] for layer in spec.layers}
    assert [op.name for op in ops["output"]] == ["lm_head"]
    assert fp8_weight_numel(next(l for l in spec.layers if l.name == "output")) == 0
    assert fp8_weight_numel(next(l for l in spec.layers if l.name == "fc")) == 64 * 64


def test_tensor_parallel_fsdp_replicas_gather_linear_weights_in_float8():
    """torchtitan enables the float8 all-gather whenever the data-parallel dimension is sharded,
    tensor parallel or not: a layout's fsdp replicas gather each rank's linear weights in one byte
    (the rest in bf16) and cast none of them per micro-batch; rowwise gathers in bf16."""
    config = dict(gpus=16, link="infiniband", model="llama-2-7b", tp=2, micro_batch=1, global_batch=16,
                  precision="bf16-params", strategy="fsdp", steps=1, compile=True)
    bf16 = predict(PredictConfig(**config))
    tensorwise = predict(PredictConfig(**config, fp8="torchao-tensorwise"))
    rowwise = predict(PredictConfig(**config, fp8="torchao-rowwise"))
    assert rowwise.comm_bytes_by_op["all_gather"] == pytest.approx(bf16.comm_bytes_by_op["all_gather"])
    # Per tensor-parallel rank: half of each block's linear weights; every block gathered for its forward
    # and again for its backward, for each of the 2 micro-batches (16 samples over 8 replicas).
    linears = 32 * (4 * 4096 * 4096 + 3 * 4096 * 11008) / 2
    saved = bf16.comm_bytes_by_op["all_gather"] - tensorwise.comm_bytes_by_op["all_gather"]
    assert saved == pytest.approx(linears * 2 * 2, rel=1e-3)
    assert tensorwise.step_time_s < rowwise.step_time_s
    gathered = get_precision("bf16-params", "torchao-tensorwise", strategy="fsdp", layout=True)
    assert gathered.fp8.fsdp_float8_all_gather
    zero1 = get_precision("bf16-params", "torchao-tensorwise", strategy="zero1", layout=True)
    assert not zero1.fp8.fsdp_float8_all_gather


@pytest.mark.parametrize("gpu, recipe, per_element", [
    ("h100", "te-delayed", 2.0), ("h100", "te-current", 2.0), ("b200", "te-delayed", 1.0),
    ("b200", "mxfp8", 2 * (1 + 1 / 32)),
])
def test_cached_fp8_weights_keep_the_transpose_where_the_gemms_take_only_tn(gpu, recipe, per_element):
    """A layout's cached TE weight (row-wise copy, plus the column-wise one the input-gradient GEMM
    reads): a transpose on Hopper, whose FP8 GEMMs take only the TN layout; none on Blackwell under a
    per-tensor recipe, whose GEMMs take any layout; MXFP8's row- and column-wise blocks with one E8M0
    scale byte per 32 elements (TransformerEngine csrc/quantizer.cpp: ``with_transpose =
    columnwise_usage && !is_non_tn_fp8_gemm_supported``). Hand count: tp 2 x pp 2 Llama-2-7B, 16
    blocks a stage of 4 x 4096^2 + 3 x 4096 x 11008 FP8 elements, halved by tp."""
    config = dict(gpus=16, link="infiniband", gpu=gpu, model="llama-2-7b", tp=2, pp=2, micro_batch=1,
                  global_batch=16, precision="bf16-params", strategy="zero1", sequence_parallel=True,
                  recompute="full", steps=1)
    bf16 = predict(PredictConfig(**config)).layout.stages
    fp8 = predict(PredictConfig(**config, fp8=recipe)).layout.stages
    block_fp8 = 4 * 4096 * 4096 + 3 * 4096 * 11008
    for a, b in zip(fp8, bf16):
        kept = a.memory.breakdown.activations_bytes - b.memory.breakdown.activations_bytes \
            - a.memory.breakdown.fp8_inputs_bytes  # less the FP8 input copies (test_fp8_params.py)
        assert kept == pytest.approx(per_element * 16 * block_fp8 / 2)


def test_uncached_te_weights_keep_the_saved_transpose_only():
    """The data-parallel path (no ``is_first_microbatch``): TE 1.x casts into fresh buffers each
    forward and saves only the transposed copy for backward, one byte an element of every block on
    Hopper (Llama-2-7B, 32 blocks, FSDP1 on 8 H100); MXFP8 (TE 2.x only) saves its row- and
    column-wise blocks, none under FSDP2, which quantizes the gathered weight again in backward."""
    block_fp8 = 4 * 4096 * 4096 + 3 * 4096 * 11008
    config = dict(gpus=8, link="infiniband", model="llama-2-7b", micro_batch=1, strategy="fsdp",
                  precision="bf16-params", steps=1)
    # Each difference less the FP8 input copies, counted apart (MemoryBreakdown.fp8_inputs_bytes).
    base = predict(PredictConfig(**config)).memory.activations_bytes
    te = predict(PredictConfig(**config, fp8="te-delayed")).memory
    assert te.activations_bytes - te.fp8_inputs_bytes - base == 32 * block_fp8
    b200 = dict(config, gpu="b200")
    base = predict(PredictConfig(**b200)).memory.activations_bytes
    mx = predict(PredictConfig(**b200, fp8="mxfp8")).memory
    assert mx.activations_bytes - mx.fp8_inputs_bytes - base == pytest.approx(32 * block_fp8 * 2 * (1 + 1 / 32))
    base2 = predict(PredictConfig(**b200, fsdp_version="2")).memory.activations_bytes
    mx2 = predict(PredictConfig(**b200, fsdp_version="2", fp8="mxfp8")).memory
    assert mx2.activations_bytes - mx2.fp8_inputs_bytes == pytest.approx(base2)


def test_blockwise_writes_both_layouts_with_an_fp32_scale_per_128():
    """DeepSeek-V3's fine-grained FP8 (TE Float8BlockScaling): the block maxima come with the cast (no
    amax pass), and each cast writes the 1x128-tile copy and the transposed 128x1 one the backward's
    GEMMs read (arXiv:2412.19437 Sec. 3.3.2, 3.5.2), each with one FP32 scale per 128 elements."""
    op = MatmulOp(name="fc", m=1024, n=4096, k=4096)
    gpu = get_gpu("h800")
    forward, _ = fp8_cast_terms(op, gpu, get_precision("bf16-params", "te-blockwise"), 1)
    assert forward[0].memory_s * gpu.streaming_bandwidth_bytes_per_s == pytest.approx(
        1024 * 4096 * (2 + 2 * (1 + 4 / 128)))


def test_blockwise_runs_on_hopper_only():
    config = dict(gpus=8, link="infiniband", model="llama-2-7b", micro_batch=1, precision="bf16-params",
                  strategy="fsdp", steps=1)
    bf16 = predict(PredictConfig(**config, gpu="h800"))
    assert predict(PredictConfig(**config, gpu="h800", fp8="te-blockwise")).step_time_s < bf16.step_time_s
    with pytest.raises(ConfigError, match=r"--fp8: 'te-blockwise' needs FP8 tensor cores of Hopper"):
        predict(PredictConfig(**config, gpu="b200", fp8="te-blockwise"))
