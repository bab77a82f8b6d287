"""The per-op roofline: invariants of the shape efficiency, the dtype a precision computes in,
memory-bound ops, attention kernels, the loss and the optimizer, and large batches."""

from __future__ import annotations

import dataclasses

import pytest

from dpsim.errors import ConfigError
from dpsim.hardware import get_gpu
from dpsim.workload.architectures import GPT2Config, ResNetConfig, build_gpt2, build_resnet
from dpsim.workload.catalog import get_model
from dpsim.workload.compute import (
    CLIP_GRAD_NORM_PASSES,
    FLOPS_ONLY_EFFICIENCY,
    OPTIMIZER_OPS,
    compute_profile,
    optimizer_terms,
    optimizer_time_s,
)
from dpsim.workload.precision import get_precision
from dpsim.workload.roofline import (
    HOST_OVERHEAD_PER_OP_S,
    FLASH1_SLOWDOWN,
    TRITON_FLASH_SLOWDOWN,
    Efficiencies,
    matmul_term,
    op_terms,
    op_times,
    pass_bytes,
    shape_efficiency,
)
from dpsim.workload.gemm import gemm_compute_s
from dpsim.workload.spec import AttentionOp, LayerSpec, MatmulOp, MemoryOp, ModelSpec, ParamSpec

A100, H100, V100 = get_gpu("a100"), get_gpu("h100"), get_gpu("v100")
AMP = get_precision("amp-bf16")


def profile(model, gpu=A100, precision=AMP, micro_batch=8, **kw):
    return compute_profile(model, gpu, micro_batch=micro_batch, precision=precision, optimizer="adamw", **kw)


def test_large_aligned_gemm_runs_at_the_best_rate_small_ones_below():
    assert shape_efficiency(8192, 8192, 8192, 1, A100) == pytest.approx(1.0, abs=0.02)
    assert shape_efficiency(64, 64, 4096, 1, A100) < 0.5  # a quarter-filled tile on a few SMs
    # Wave quantization: 109 tiles on 108 SMs need two waves.
    assert shape_efficiency(128 * 109, 128, 128, 1, A100) == pytest.approx(109 / 216, rel=1e-9)


def test_skinny_gemm_is_memory_bound():
    t = matmul_term(16384, 16384, 16, 1, "bfloat16", 2, A100)
    assert t.memory_s > t.compute_s
    big = matmul_term(8192, 8192, 8192, 1, "bfloat16", 2, A100)
    assert big.compute_s > big.memory_s


def test_a_gemm_takes_its_flops_on_the_gemm_surface_times_the_fitted_efficiency():
    eff = Efficiencies()
    t = matmul_term(8192, 8192, 8192, 1, "bfloat16", 2, A100)
    assert t.time_s(eff) == pytest.approx(gemm_compute_s(8192, 8192, 8192, 1, "bfloat16", A100) / eff.matmul)


def test_torch_default_fp32_matmul_is_not_tf32():
    bert = get_model("bert-large", seq_len=128)
    fp32, tf32 = profile(bert, precision=get_precision("fp32")), profile(bert, precision=get_precision("tf32"))
    assert fp32.step_s > 3 * tf32.step_s  # CUDA-core FP32 (19.5 TF/s) vs TF32 tensor cores (156)
    # Volta has no TF32: the two are the same there.
    v_fp32 = profile(bert, gpu=V100, precision=get_precision("fp32"))
    v_tf32 = profile(bert, gpu=V100, precision=get_precision("tf32"))
    assert v_fp32.step_s == pytest.approx(v_tf32.step_s)


def test_fp32_convolutions_use_tf32_by_default():
    resnet = get_model("resnet50")
    fp32, tf32 = profile(resnet, precision=get_precision("fp32")), profile(resnet, precision=get_precision("tf32"))
    assert fp32.step_s == pytest.approx(tf32.step_s, rel=0.02)  # only the fc layer differs


def test_v100_fp16_with_fp32_accumulate_vs_fp32():
    gpt2 = get_model("gpt2")
    fp16 = profile(gpt2, gpu=V100, precision=get_precision("amp-fp16"))
    fp32 = profile(gpt2, gpu=V100, precision=get_precision("fp32"))
    assert 2 < fp32.step_s / fp16.step_s < 8  # 125 vs 15.7 TF/s peaks, diluted by memory-bound ops


def test_winograd_only_for_fp32_3x3_stride_1_convolutions_on_cuda_cores():
    conv3 = MatmulOp(name="c", m=56 * 56, n=64, k=64 * 9, kind="conv", kernel=3, stride=1)
    conv3_s2 = dataclasses.replace(conv3, stride=2)
    fp32 = get_precision("fp32")
    assert op_times(conv3, V100, fp32, 64)[0] < op_times(conv3_s2, V100, fp32, 64)[0] / 2
    # On A100 fp32 convolutions run on TF32 tensor cores, costed as implicit GEMMs.
    assert op_times(conv3, A100, fp32, 64)[0] == pytest.approx(op_times(conv3_s2, A100, fp32, 64)[0])


def test_fused_causal_attention_does_half_the_work_at_a_lower_rate():
    full = AttentionOp(seq=2048, heads=16, head_dim=128, causal=False)
    causal = dataclasses.replace(full, causal=True)
    f_full, b_full = op_times(full, A100, AMP, 4)
    f_causal, b_causal = op_times(causal, A100, AMP, 4)
    # Half the FLOPs, but each query block loops over half the keys plus a masked diagonal block.
    assert f_full / 2 < f_causal < f_full and b_full / 2 < b_causal < b_full
    assert b_full > 2.5 * f_full  # the backward recomputes the scores, at a lower rate


def test_flash_attention_is_slower_relative_to_peak_on_hopper():
    op = AttentionOp(seq=4096, heads=32, head_dim=128, causal=True)
    flops = op.flops_per_sample * 0.5
    assert flops / op_times(op, H100, AMP, 1)[0] / H100.peak_rate("bfloat16") \
        < flops / op_times(op, A100, AMP, 1)[0] / A100.peak_rate("bfloat16")


def test_eager_attention_streams_the_score_matrix():
    eager = AttentionOp(seq=1024, heads=16, head_dim=64, fused=False)
    fused = dataclasses.replace(eager, fused=True)
    assert sum(op_times(eager, A100, AMP, 8)) > sum(op_times(fused, A100, AMP, 8))


def test_byte_classes_follow_the_precision():
    fp32, amp, params = get_precision("fp32"), AMP, get_precision("bf16-params")
    assert [pass_bytes(c, amp) for c in ("act", "stream", "f32", "cast", "upcast", "nchw")] == [2, 4, 4, 6, 6, 2]
    assert [pass_bytes(c, fp32) for c in ("act", "stream", "cast", "upcast", "nchw")] == [4, 4, 0, 0, 0]
    assert [pass_bytes(c, params) for c in ("act", "stream", "cast")] == [2, 2, 0]


def test_memory_bound_ops_stream_at_the_measured_rate_not_the_datasheet_peak():
    # HBM3e streams at 66 % of its peak (H200, gpu-benches), HBM2e at 85 % (H100 PCIe): the
    # same bytes take the B200 more than peak bandwidth alone says, relative to an H100.
    op = MemoryOp(name="x", elements=1e8, forward=((2, "act"),))
    b200, h200 = get_gpu("b200"), get_gpu("h200")
    f_b200, _ = op_times(op, b200, AMP, 1)
    f_h200, _ = op_times(op, h200, AMP, 1)
    assert f_b200 == pytest.approx(4e8 / (b200.streaming_bandwidth_bytes_per_s * Efficiencies().memory))
    assert f_b200 > 4e8 / (b200.memory_bandwidth_bytes_per_s * Efficiencies().memory) * 1.4
    assert f_h200 / f_b200 == pytest.approx(8.0 / 4.8)


def test_memory_bound_ops_cost_their_bytes_at_hbm_bandwidth():
    op = MemoryOp(name="x", elements=1e6, forward=((3, "act"),), backward=((5, "act"),))
    f, b = op_times(op, A100, AMP, 100)
    eff = Efficiencies()
    assert f == pytest.approx(3 * 2 * 1e8 / (A100.streaming_bandwidth_bytes_per_s * eff.memory))
    assert b == pytest.approx(5 / 3 * f)


def test_every_catalog_layer_has_ops_and_memory_bound_work_costs_time():
    for name in ("gpt2", "llama-2-7b", "bert-base", "vit-b-16", "resnet50"):
        model = get_model(name)
        assert all(layer.ops for layer in model.layers), name
        p = profile(model, micro_batch=2)
        assert p.breakdown_s["memory"] > 0 and p.breakdown_s["matmul"] > 0, name


def test_the_lm_loss_is_included():
    gpt2 = get_model("gpt2")
    head = next(layer for layer in gpt2.layers if layer.name == "lm_head")
    assert any(op.name == "loss" for op in head.ops)
    loss = next(op for op in head.ops if op.name == "loss")
    # Roughly a third of GPT-2 small's head: the 50257-wide logits are streamed in fp32.
    assert sum(op_times(loss, A100, AMP, 8)) > 0.1 * sum(sum(op_times(o, A100, AMP, 8)) for o in head.ops)


def test_channels_last_removes_the_layout_transposes():
    nchw = build_resnet(ResNetConfig(), name="r")
    nhwc = build_resnet(ResNetConfig(channels_last=True), name="r")
    ratio = profile(nchw, precision=get_precision("amp-fp16"), micro_batch=256).step_s / profile(
        nhwc, precision=get_precision("amp-fp16"), micro_batch=256).step_s
    assert 1.2 < ratio < 1.7  # published: 1.44-1.56 (tests/data/single_gpu_throughput.csv T001/T042, T049/T050)
    # fp32 convolutions need no transposes.
    fp32 = get_precision("tf32")
    assert profile(nchw, precision=fp32).step_s == pytest.approx(profile(nhwc, precision=fp32).step_s)


def test_large_batches_scale_linearly_and_small_ones_do_not():
    gpt2 = get_model("gpt2")
    per_sample = {mb: (profile(gpt2, micro_batch=mb).forward_s + profile(gpt2, micro_batch=mb).backward_s) / mb
                  for mb in (1, 8, 64)}
    assert per_sample[64] == pytest.approx(per_sample[8], rel=0.05)  # compute-bound: linear
    assert per_sample[1] > per_sample[64]  # small GEMMs under-fill the GPU


def test_activation_function_and_dropout_change_time_not_flops():
    base = GPT2Config(n_layer=2)
    new = build_gpt2(base, seq_len=256)
    gelu = build_gpt2(dataclasses.replace(base, activation_function="gelu", resid_pdrop=0.0, embd_pdrop=0.0),
                      seq_len=256)
    assert new.forward_flops_per_sample == gelu.forward_flops_per_sample
    assert profile(new).step_s > profile(gelu).step_s


def test_compute_efficiency_and_measured_step_scale_everything():
    gpt2 = get_model("gpt2")
    full = profile(gpt2)
    half = profile(gpt2, compute_efficiency=0.5)
    assert half.step_s == pytest.approx(2 * full.step_s)
    scaled = profile(gpt2, single_gpu_step_s=0.123)
    assert scaled.step_s == pytest.approx(0.123)
    assert scaled.forward_s / scaled.backward_s == pytest.approx(full.forward_s / full.backward_s)
    with pytest.raises(ConfigError, match="--compute-efficiency"):
        profile(gpt2, compute_efficiency=0)


def test_layers_without_ops_keep_the_flops_only_cost():
    layer = LayerSpec(name="l", params=(ParamSpec(name="w", shape=(10,)),), forward_flops_per_sample=1e12)
    p = profile(ModelSpec(name="m", layers=(layer,)), micro_batch=2)
    fwd = 2e12 / (A100.achieved_rate("bfloat16") * FLOPS_ONLY_EFFICIENCY)
    assert p.layers[0].forward_s == pytest.approx(fwd) and p.layers[0].backward_s == pytest.approx(2 * fwd)
    assert set(p.breakdown_s) == {"flops-only"}


def test_newer_gpus_are_faster_on_every_catalog_model():
    for name in ("gpt2", "resnet50", "vit-b-16"):
        model = get_model(name)
        steps = [profile(model, gpu=get_gpu(g), precision=get_precision("amp-fp16")).step_s
                 for g in ("t4", "v100", "a100", "h100", "b200")]
        assert steps == sorted(steps, reverse=True), name


def test_a_kernel_takes_at_least_its_host_dispatch():
    tiny = MemoryOp(name="x", elements=16.0, forward=((2, "act"),), backward=((3, "act"),))
    assert op_times(tiny, H100, AMP, 1) == pytest.approx((HOST_OVERHEAD_PER_OP_S, HOST_OVERHEAD_PER_OP_S))
    big = MemoryOp(name="x", elements=1e8, forward=((2, "act"),), backward=((3, "act"),))
    assert op_times(big, H100, AMP, 8)[0] > 100 * HOST_OVERHEAD_PER_OP_S  # long kernels: the CPU runs ahead
    # An op with no traffic in a direction launches no kernel there.
    fwd_only = MemoryOp(name="x", elements=16.0, forward=((1, "act"),))
    assert op_times(fwd_only, H100, AMP, 1)[1] == 0.0


def test_a_per_parameter_optimizer_loop_is_host_bound():
    bert = get_model("bert-large", seq_len=384)
    fp32 = get_precision("tf32")
    foreach = optimizer_time_s(optimizer_terms(bert, H100, fp32, "adamw"))
    loop = optimizer_time_s(optimizer_terms(bert, H100, fp32, "adamw", implementation="loop"))
    bert_adam = optimizer_time_s(optimizer_terms(bert, H100, fp32, "adamw", implementation="loop", ops_per_param=18))
    n_params = len(bert.params)
    # The same bytes either way; the loop dispatches every op of every parameter from Python.
    assert loop > foreach and loop >= n_params * OPTIMIZER_OPS["adamw"] * HOST_OVERHEAD_PER_OP_S
    assert bert_adam >= n_params * 18 * HOST_OVERHEAD_PER_OP_S > loop / 2
    # foreach streams at memory speed: the host cost of its few dispatches is hidden.
    traffic = sum(t.memory_s for t in optimizer_terms(bert, H100, fp32, "adamw")) / Efficiencies().memory
    assert foreach == pytest.approx(traffic)
    # The profile carries the implementation through.
    p = profile(bert, gpu=H100, precision=fp32, micro_batch=8, optimizer_impl="loop", optimizer_ops_per_param=18)
    assert p.optimizer_s == pytest.approx(bert_adam)
    with pytest.raises(ConfigError, match="optimizer implementation"):
        profile(bert, optimizer_impl="vectorised")


def test_master_weights_and_clipping_cost_their_passes():
    bert = get_model("bert-large", seq_len=384)
    n = bert.param_count
    mem = Efficiencies().memory * H100.streaming_bandwidth_bytes_per_s

    def seconds(precision, **kw):
        return optimizer_time_s(optimizer_terms(bert, H100, get_precision(precision), "adamw", **kw))

    # Apex O2 / Megatron --fp16: copy g16 into fp32 (6 B), fused step on fp32 (28 B), copy the
    # master into the fp16 weights (6 B); the fp32 model's fused step is the 28 B alone.
    assert seconds("fp16-params") == pytest.approx(40 * n / mem)
    assert seconds("fp16-params") - seconds("tf32", fused=True) == pytest.approx(12 * n / mem)
    # Clipping to a global norm: a read for the norm, a read and a write to scale, in the
    # dtype the optimizer reads the gradients (the fp32 master gradients here).
    assert seconds("fp16-params", clip_grad_norm=True) - seconds("fp16-params") == pytest.approx(
        CLIP_GRAD_NORM_PASSES * 4 * n / mem)
    assert seconds("bf16-true", clip_grad_norm=True) - seconds("bf16-true") == pytest.approx(
        CLIP_GRAD_NORM_PASSES * 2 * n / mem)
    # Apex O2's zero_grad: one zero_() per parameter from Python, bound by its dispatch.
    looped = seconds("fp16-params", zero_grad_loop=True) - seconds("fp16-params")
    assert looped == pytest.approx(len(bert.params) * HOST_OVERHEAD_PER_OP_S)


def test_triton_flash_attention_is_slower_than_sdpa():
    sdpa = AttentionOp(seq=2048, heads=16, head_dim=128, causal=True)
    triton = dataclasses.replace(sdpa, kernel="triton")
    assert sum(op_times(triton, A100, AMP, 8)) == pytest.approx(TRITON_FLASH_SLOWDOWN * sum(op_times(sdpa, A100, AMP, 8)))
    with pytest.raises(Exception, match="kernel"):
        AttentionOp(seq=8, heads=1, head_dim=8, kernel="xformers")


def test_flash_attention_1_is_slower_than_flash_attention_2_by_the_published_range():
    # Dao 2023 (arXiv:2307.08691) Sec. 4: FlashAttention-2 "1.7-3.0x faster than FlashAttention" on A100.
    assert 1.7 < FLASH1_SLOWDOWN < 3.0
    sdpa = AttentionOp(seq=2048, heads=32, head_dim=128, causal=True)
    flash1 = dataclasses.replace(sdpa, kernel="flash1")
    assert sum(op_times(flash1, A100, AMP, 2)) == pytest.approx(FLASH1_SLOWDOWN * sum(op_times(sdpa, A100, AMP, 2)))


def test_a_convolution_moves_its_input_not_its_im2col_matrix():
    conv = MatmulOp(name="c", m=56 * 56, n=64, k=64 * 9, kind="conv", kernel=3, stride=1)
    (fwd,), _ = op_terms(conv, A100, AMP, 32)
    im2col = matmul_term(56 * 56 * 32, 64, 64 * 9, 1, "float16", 2, A100)
    # Input 56x56x64 + weights + output, not 9x the input.
    expected = 2 * (32 * 56 * 56 * 64 + 64 * 9 * 64 + 32 * 56 * 56 * 64) / A100.streaming_bandwidth_bytes_per_s
    assert fwd.memory_s == pytest.approx(expected) and fwd.memory_s < im2col.memory_s / 3
    # A linear layer's operand is stored whole.
    linear = MatmulOp(name="l", m=512, n=1024, k=1024)
    (lf,), _ = op_terms(linear, A100, AMP, 4)
    assert lf.memory_s == pytest.approx(matmul_term(2048, 1024, 1024, 1, "bfloat16", 2, A100).memory_s)


def test_eager_softmax_runs_in_the_scores_dtype_without_autocast():
    eager = AttentionOp(seq=384, heads=16, head_dim=64, fused=False, dropout=True)
    amp_fp16, apex_o2 = get_precision("amp-fp16"), get_precision("fp16-params")
    # Both keep 16-bit scores; autocast's softmax also writes and reads an fp32 copy.
    assert sum(op_times(eager, A100, apex_o2, 32)) < sum(op_times(eager, A100, amp_fp16, 32))


def test_llm_foundrys_flash_path_adds_its_unpad_and_pad_copies():
    # attn_impl flash: q, k, v gathered (2 passes each) and the output zero-filled and scattered
    # back (3) in the forward; the gradient gathered (2) and each of q, k, v zero-filled and
    # scattered (3 each) in the backward: 9 and 11 passes over tokens x heads·head_dim 16-bit.
    from dpsim.workload.layers import UNPAD_BACKWARD_PASSES, UNPAD_FORWARD_PASSES, with_unpadded_attention

    assert (UNPAD_FORWARD_PASSES, UNPAD_BACKWARD_PASSES) == (9, 11)
    model = build_gpt2(GPT2Config(n_embd=1024, n_layer=2, n_head=8, n_positions=2048), name="t", flash_attention=True)
    unpadded = with_unpadded_attention(model)
    added = [op for layer in unpadded.layers for op in layer.ops if op.name == "attention.unpad"]
    assert len(added) == 2 and all(op.elements == 2048 * 1024 for op in added)
    f, b = op_times(added[0], H100, AMP, 8)
    eff = Efficiencies()
    assert f == pytest.approx(9 * 2 * 8 * 2048 * 1024 / (H100.streaming_bandwidth_bytes_per_s * eff.memory))
    assert b == pytest.approx(11 / 9 * f)
    before, after = profile(model, H100, micro_batch=8), profile(unpadded, H100, micro_batch=8)
    assert after.forward_s - before.forward_s == pytest.approx(2 * f)
    assert after.backward_s - before.backward_s == pytest.approx(2 * b)
    # Eager attention has no varlen kernel to unpad for.
    eager = build_gpt2(GPT2Config(n_embd=1024, n_layer=2, n_head=8, n_positions=2048), name="t", flash_attention=False)
    assert with_unpadded_attention(eager) == eager


def test_megatron_flex_dispatchers_eager_multihot_ops_cost_their_dispatch_time():
    # Megatron-LM@1e057005 _DeepepManager._indices_to_multihot: 11 eager ops a layer forward (two
    # zeros, ne, a boolean index, arange, sum, repeat_interleave, two index assignments, a boolean
    # index, .bool()), 3 in backward; each kernel is tiny, so each costs the host's dispatch time.
    from dpsim.workload.layers import (EAGER_MULTIHOT_BACKWARD_OPS, EAGER_MULTIHOT_FORWARD_OPS,
                                       with_eager_multihot)
    from dpsim.workload.roofline import HOST_OVERHEAD_PER_OP_S

    assert (len(EAGER_MULTIHOT_FORWARD_OPS), len(EAGER_MULTIHOT_BACKWARD_OPS)) == (11, 3)
    model = get_model("qwen3-235b-a22b", seq_len=4096, flash_attention=True)
    eager = with_eager_multihot(model)
    assert with_eager_multihot(eager) == eager  # applied once
    moe = [i for i, layer in enumerate(model.layers) if any(op.name == "experts.permute" for op in layer.ops)]
    assert len(moe) == 94
    for i, (before, after) in enumerate(zip(model.layers, eager.layers)):
        added = [op for op in after.ops if op.name.startswith("experts.multihot.")]
        assert len(added) == (14 if i in moe else 0)
        assert [op for op in after.ops if not op.name.startswith("experts.multihot.")] == list(before.ops)
    layer = eager.layers[moe[0]]
    added = [op for op in layer.ops if op.name.startswith("experts.multihot.")]
    assert all(op.elements == 4096 * 8 for op in added)  # tokens x top_k routed copies a sample
    # Host-bound even at the largest micro-batch the rows run (4 x 4096 tokens, R059).
    fwd = sum(op_times(op, H100, AMP, 4)[0] for op in added)
    bwd = sum(op_times(op, H100, AMP, 4)[1] for op in added)
    assert fwd == pytest.approx(11 * HOST_OVERHEAD_PER_OP_S)
    assert bwd == pytest.approx(3 * HOST_OVERHEAD_PER_OP_S)
    before, after = profile(model, H100, micro_batch=1), profile(eager, H100, micro_batch=1)
    assert after.forward_s - before.forward_s == pytest.approx(94 * 11 * HOST_OVERHEAD_PER_OP_S)
    assert after.backward_s - before.backward_s == pytest.approx(94 * 3 * HOST_OVERHEAD_PER_OP_S)


def test_megatron_alltoall_dispatchers_sort_moves_every_received_row_once_each_way():
    # Megatron-Core's alltoall dispatcher (core_r0.11.0, main 1e057005959b) sorts the rows it receives by
    # local expert after the all-to-all (and the expert-TP all-gather) and unsorts them before the combine:
    # a read and a write of each received row, forward and backward; the flex (DeepEP) dispatcher does not.
    from dpsim.workload.layers import ALLTOALL_SORT_OPS, alltoall_sort_ops, with_alltoall_sort

    model = get_model("qwen3-30b-a3b", seq_len=8192, flash_attention=True)
    for etp in (1, 2):
        sorted_ = with_alltoall_sort(model, etp=etp)
        assert with_alltoall_sort(sorted_, etp=etp) == sorted_  # applied once
        moe = 0
        for before, after in zip(model.layers, sorted_.layers):
            names = [op.name for op in after.ops]
            assert [op for op in after.ops if op.name not in ALLTOALL_SORT_OPS] == list(before.ops)
            if "experts.permute" not in names:
                assert after == before
                continue
            moe += 1
            # The sort right after the permutation, the unsort right before the unpermutation.
            assert names.index("experts.sort_chunks") == names.index("experts.permute") + 1
            assert names.index("experts.unsort_chunks") == names.index("experts.unpermute") - 1
            permute = after.ops[names.index("experts.permute")]
            for op in after.ops:
                if op.name in ALLTOALL_SORT_OPS:
                    # Bytes conserved: the rows the all-to-all delivered (times the etp ranks gathered).
                    assert op.elements == permute.elements * etp == 8192 * 8 * 2048 * etp
                    f, b = op_times(op, H100, AMP, 1)
                    pf, pb = op_times(permute, H100, AMP, 1)
                    assert (f, b) == (pytest.approx(pf * etp), pytest.approx(pb * etp))
        assert moe == 48
    # Two ops of the permutation's time each way a layer, etp 1.
    before, after = profile(model, H100, micro_batch=1), profile(with_alltoall_sort(model), H100, micro_batch=1)
    permute = next(op for layer in model.layers for op in layer.ops if op.name == "experts.permute")
    pf, pb = op_times(permute, H100, AMP, 1)
    assert after.forward_s - before.forward_s == pytest.approx(48 * 2 * pf)
    assert after.backward_s - before.backward_s == pytest.approx(48 * 2 * pb)
    with pytest.raises(ConfigError, match="etp"):
        alltoall_sort_ops(1.0, 0)


def test_olmo_cores_eager_fp32_loss_paths_are_priced_from_their_kernels():
    # OLMo-core before 00d34f693: the model casts the logits to fp32, the trainer copies the shifted
    # slice and runs either F.cross_entropy plus the z-loss's logsumexp or the Triton fused kernel, all
    # eagerly. Bytes per logit (bf16 logits): eager 6 + 8 + 8 + 24 forward, 24 + 4 + 12 + 12 + 12 + 6
    # backward; Triton 6 + 8 + 4 forward, 8 + 12 + 6 backward; the catalog's autocast loss 14 and 22.
    from dpsim.errors import WorkloadError
    from dpsim.workload.layers import LM_LOSSES, lm_loss_passes, with_lm_loss
    from dpsim.workload.roofline import pass_bytes

    bf16 = get_precision("bf16-params")

    def per_logit(passes):
        return sum(n * pass_bytes(c, bf16) for n, c in passes)

    assert LM_LOSSES == ("eager-fp32-z-loss", "triton-fp32")
    assert [per_logit(p) for p in lm_loss_passes("eager-fp32-z-loss", shift_copy=True)] == [46.0, 70.0]
    assert [per_logit(p) for p in lm_loss_passes("triton-fp32", shift_copy=True)] == [18.0, 26.0]
    assert [per_logit(p) for p in lm_loss_passes("triton-fp32", shift_copy=False)] == [10.0, 26.0]
    with pytest.raises(WorkloadError, match="not one of"):
        lm_loss_passes("liger", shift_copy=True)

    model = get_model("llama-2-7b", seq_len=1024)
    eager = with_lm_loss(model, "eager-fp32-z-loss", shift_copy=True)
    loss = [op for layer in eager.layers for op in layer.ops if op.name == "loss"]
    assert len(loss) == 1 and loss[0].elements == 1024 * 32000
    # Nothing but the loss changes, and under --compile it stays one unfused kernel's traffic.
    assert [op for layer in eager.layers for op in layer.ops if op.name != "loss"] == \
        [op for layer in model.layers for op in layer.ops if op.name != "loss"]
    for precision in (bf16, dataclasses.replace(bf16, compiled=True)):
        before, after = profile(model, H100, precision, 4), profile(eager, H100, precision, 4)
        eff = Efficiencies()
        extra = (46.0 + 70.0 - 14.0 - 22.0) * 4 * 1024 * 32000 / (H100.streaming_bandwidth_bytes_per_s * eff.memory)
        assert (after.forward_s + after.backward_s) - (before.forward_s + before.backward_s) == pytest.approx(extra)
    with pytest.raises(WorkloadError, match="no LM loss"):
        with_lm_loss(build_resnet(ResNetConfig()), "triton-fp32", shift_copy=True)


def test_fused_wgrad_accumulation_reads_and_writes_the_gradient_buffer():
    # TransformerEngine's fuse_wgrad_accumulation: the weight-gradient GEMM's output is the fp32
    # main_grad, read and written (beta = 1), where an unfused one writes a 16-bit gradient.
    megatron = get_precision("bf16-fp32-grads")
    fused = dataclasses.replace(megatron, fused_wgrad_accumulation=True)
    # A local expert's GEMMs at a small micro-batch: 527 rows against a 3072 x 4096 weight.
    op = MatmulOp(name="experts.gate_up", m=527, n=3072, k=4096, batch=16)
    (f0,), (d0, w0) = op_terms(op, H100, megatron, 1)
    (f1,), (d1, w1) = op_terms(op, H100, fused, 1)
    assert (f1, d1) == (f0, d0)  # forward and the input gradient are untouched
    assert w1.compute_s == w0.compute_s
    weight = 16 * 3072 * 4096
    assert w1.memory_s - w0.memory_s == pytest.approx((2 * 4 - 2) * weight / H100.streaming_bandwidth_bytes_per_s)
    assert w1.time_s(Efficiencies()) > w0.time_s(Efficiencies())  # the buffer traffic binds here
    # A dense layer's weight gradient over thousands of tokens stays compute-bound.
    dense = MatmulOp(name="up_proj", m=8192, n=3072, k=4096)
    assert op_times(dense, H100, fused, 1) == op_times(dense, H100, megatron, 1)
    # FP8 GEMMs accumulate into the same buffer.
    fp8 = dataclasses.replace(get_precision("bf16-fp32-grads", "mxfp8"), fused_wgrad_accumulation=True)
    (_,), (_, w8) = op_terms(op, get_gpu("gb200"), fp8, 1)
    (_,), (_, w8u) = op_terms(op, get_gpu("gb200"), get_precision("bf16-fp32-grads", "mxfp8"), 1)
    assert w8.memory_s > w8u.memory_s
