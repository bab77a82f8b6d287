"""DeepSeek-V3's stated memory mechanisms (arXiv:2412.19437 Sec. 3.2.3, 3.3.3) against a hand count."""

import pytest

from dpsim.strategies.checkpointing import (
    E5M6_BYTES,
    deepseek_cache_bytes,
    deepseek_saved_bytes_per_sample,
)
from dpsim.workload.catalog import get_model
from dpsim.workload.precision import get_precision, optimizer_state_bytes_per_param

T = 4096  # tokens of one micro-batch (one 4K sequence)
H = 7168  # hidden
FP8 = 1 + 4 / 128  # an E4M3 element and its share of one FP32 scale per 128 (1x128 tiles)


@pytest.fixture(scope="module")
def v3():
    return get_model("deepseek-v3", seq_len=T)


def test_bf16_moments_precision_keeps_eight_bytes_of_optimizer_state():
    # FP32 master (4) + BF16 first and second moments (2 + 2); gradients stay FP32.
    p = get_precision("bf16-fp32-grads-bf16-moments")
    assert optimizer_state_bytes_per_param(p, "adamw") == 8
    assert (p.weight_bytes, p.grad_bytes) == (2, 4)


def test_fp8_cache_bytes_of_the_blockwise_recipe():
    b = deepseek_cache_bytes(get_precision("bf16-fp32-grads", "te-blockwise", layout=True))
    assert b == {"cached_element_bytes": FP8, "attention_output_bytes": E5M6_BYTES + 4 / 128}
    assert deepseek_cache_bytes(get_precision("bf16-fp32-grads")) == {"cached_element_bytes": 2.0,
                                                                       "attention_output_bytes": 2.0}


def test_mla_layer_keeps_latents_attention_output_and_statistics(v3):
    attn = v3.layers[15]  # model.layers.7.self_attn (MoE block)
    assert attn.name.endswith("layers.7.self_attn")
    saved = deepseek_saved_bytes_per_sample(attn, cached_element_bytes=FP8, attention_output_bytes=1.5 + 4 / 128)
    fused = next(o for o in attn.ops if o.name == "attention").fused
    hand = (T * 1536 * 2          # query latent c_q (q_a_proj output), bf16: the recomputed norm's input
            + T * 576 * 2         # kv latent 512 + rope key 64 (kv_a_proj_with_mqa output), bf16
            + T * 128 * 128 * (1.5 + 4 / 128)  # attention output (o_proj input) in E5M6
            + T * 128 * 4 * fused)  # fp32 log-sum-exp per query row and head (a fused kernel's)
    assert saved == pytest.approx(hand)
    # Not a full MHA KV: nothing of the up-projections' 128 x (192 + 192 + 128) per token is kept.
    assert saved < T * 128 * 192 * 2


def test_moe_layer_keeps_dispatched_tokens_and_swiglu_inputs_in_fp8(v3):
    moe = v3.layers[16]  # model.layers.7.mlp
    saved = deepseek_saved_bytes_per_sample(moe, cached_element_bytes=FP8, attention_output_bytes=1.5)
    hand = (T * 256 * 2               # router output
            + T * 8 * H * FP8         # the 8 dispatched copies of each token (experts' first GEMM input)
            + T * 8 * 2 * 2048 * FP8  # the routed SwiGLU inputs (gate and up, 2048 each)
            + T * 2 * 2048 * FP8)     # the shared expert's SwiGLU input
    assert saved == pytest.approx(hand)


def test_r118_worst_stage_matches_the_hand_count():
    """One middle DualPipe rank of R118: 8 MoE layers (two chunks of 4), PP + 1 = 17 chunk micro-batches
    in flight, ZeRO-1 over dp 128 (routed experts over their 2 replicas)."""
    from dpsim.predict import predict
    from published_rows import large_model_job

    _, job = large_model_job("R118")
    assert job.config.execution.recompute == "deepseek"
    assert job.config.execution.precision == "bf16-fp32-grads-bf16-moments"
    p = predict(job.config, model=job.model)
    mid = p.layout.stages[7].memory
    assert sum(mid.in_flight) == 16 + 1
    b = mid.breakdown
    n = mid.params_per_gpu
    assert b.weights_bytes == 2 * n and b.gradients_bytes == 4 * n
    # Per layer and micro-batch: the two sub-layers' inputs (56 MiB each) and what each keeps.
    layer = 2 * T * H * 2 + (T * 1536 * 2 + T * 576 * 2 + T * 16384 * (1.5 + 4 / 128) + T * 128 * 4) + (
        T * 256 * 2 + T * 8 * H * FP8 + T * 8 * 4096 * FP8 + T * 4096 * FP8)
    # dpsim's busiest-rank routing load puts 8295 rather than 8192 tokens on each local expert.
    routed = (T * 8 * H + T * 8 * 4096) * FP8 * (8295 / 8192 - 1)
    per_mb = 4 * (layer + routed)
    kept = 17 * per_mb
    assert kept / 2**30 == pytest.approx(40.8, abs=0.05)
    # One row-wise FP8 copy of every FP8 weight (all but the norms and the router), a scale per 128x128.
    assert job.config.execution.fp8 == "deepseek-blockwise"
    fp8_weights = (1 + 4 / 128**2) * n  # at most: the norms' and the router's weights stay bf16
    rest = b.activations_bytes - kept - fp8_weights  # one layer's recomputed rest while it runs backward
    assert 1.7 * 2**30 < rest < 1.85 * 2**30
    # Model state: bf16 weights, fp32 gradients, 8-byte optimizer state over the replicas.
    assert b.optimizer_bytes / 2**30 == pytest.approx(5.36, abs=0.01)
    assert b.total_bytes / 2**30 == pytest.approx(71.29, abs=0.01)


def test_deepseek_blockwise_keeps_one_rowwise_weight_copy():
    from dpsim.workload.fp8 import get_fp8_recipe, saved_fp8_weight_bytes_per_element
    hai = get_fp8_recipe("deepseek-blockwise")
    te = get_fp8_recipe("te-blockwise")
    assert saved_fp8_weight_bytes_per_element(hai, "hopper", cached=True) == 1 + 4 / 128**2
    assert saved_fp8_weight_bytes_per_element(te, "hopper", cached=True) == 2 * (1 + 4 / 128)
    # The casts (hence the step time) are te-blockwise's.
    for field in ("amax_reads", "column_copy", "scale_bytes_per_element", "recast_in_backward"):
        assert getattr(hai, field) == getattr(te, field)


def test_deepseek_recompute_on_a_gqa_layout_keeps_megatrons_set_and_each_sublayers_input():
    """Mixtral 8x7B (GQA, no MLA), bf16, no FP8: per layer ``deepseek`` keeps what ``megatron`` keeps (the
    q, k, v and attention outputs, the router output, the permuted tokens, the experts' first GEMM output),
    and both keep the MoE sub-layer's own input, the residual its recomputed norm re-runs from (Megatron-Core's
    pre-MLP norm checkpoint keeps its input: NVIDIA/Megatron-LM@d98e8a64ddf3
    megatron/core/transformer/transformer_layer.py, _forward_pre_mlp_layernorm); the step time is the same
    (its recomputation costed as megatron's)."""
    from dpsim.predict import PredictConfig, predict
    from dpsim.strategies.checkpointing import megatron_saved_bytes_per_sample
    model = get_model("mixtral-8x7b", seq_len=T)
    for layer in model.layers:
        if layer.unit is not None:
            assert deepseek_saved_bytes_per_sample(layer) == megatron_saved_bytes_per_sample(layer)
    base = dict(model="mixtral-8x7b", gpus=16, gpu="h100", tp=1, pp=2, ep=8, dp=8, micro_batch=1, global_batch=64,
                precision="bf16-fp32-grads", strategy="zero1", seq_len=T)
    meg = predict(PredictConfig(**base, recompute="megatron"))
    ds = predict(PredictConfig(**base, recompute="deepseek"))
    # Stage 0 holds 16 of the 32 blocks and pp = 2 micro-batches in flight, each MoE input kept by both.
    assert ds.memory.activations_bytes == pytest.approx(meg.memory.activations_bytes, rel=1e-12)
    assert ds.step_time_s == pytest.approx(meg.step_time_s, rel=1e-12)
