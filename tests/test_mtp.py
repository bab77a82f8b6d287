"""Multi-token prediction (DeepSeek-V3, arXiv:2412.19437, Sec. 2.2): each depth one more transformer
block after the main ones, a 2h -> h projection, and one more pass of the shared output head and its
loss, on the last pipeline stage (Sec. 3.2.3; Megatron-Core's default placement). Depth 0 is the model
without it; the FLOPs and parameters it adds are counted here by hand."""

from __future__ import annotations

import dataclasses

import pytest

from dpsim.errors import ConfigError, WorkloadError
from dpsim.predict.config import PredictConfig
from dpsim.strategies.layout import Layout, stage_assignment
from dpsim.strategies.tensor import tp_model
from dpsim.workload.architectures import LlamaConfig, build_llama
from dpsim.workload.catalog import get_entry, get_model
from dpsim.workload.spec import MTP_UNIT_PREFIX, is_mtp_unit

# A DeepSeek-V3-shaped toy: MLA attention, one dense block then MoE blocks with a shared expert.
D, V, S, H = 256, 1000, 128, 4
Q_LORA, KV_LORA, NOPE, ROPE, VH = 64, 32, 32, 16, 32
E, K, F = 8, 2, 64
TOY = LlamaConfig(vocab_size=V, hidden_size=D, intermediate_size=512, num_hidden_layers=4, num_attention_heads=H,
                  num_key_value_heads=H, max_position_embeddings=S, num_experts=E, num_experts_per_tok=K,
                  moe_intermediate_size=F, n_shared_experts=1, first_k_dense_replace=1, router_bias=True,
                  q_lora_rank=Q_LORA, kv_lora_rank=KV_LORA, qk_nope_head_dim=NOPE, qk_rope_head_dim=ROPE,
                  v_head_dim=VH)


def _toy(depth: int):
    return build_llama(dataclasses.replace(TOY, mtp_depth=depth), name="toy")


def _mtp_layers(model):
    return [layer for layer in model.layers if is_mtp_unit(layer.unit)]


def test_depth_zero_is_the_model_without_mtp():
    plain, with_mtp = _toy(0), _toy(1)
    assert not _mtp_layers(plain)
    assert [l.name for l in plain.layers] == [l.name for l in with_mtp.layers if not is_mtp_unit(l.unit)]
    # Every layer but the shared head is the same; the catalog models without MTP do not move.
    same = [(a, b) for a, b in zip(plain.layers, with_mtp.layers) if a.name != "lm_head"]
    assert all(a == b for a, b in same)
    assert get_model("mixtral-8x7b") == get_model("mixtral-8x7b", mtp_depth=0)
    assert get_entry("deepseek-v3").config.mtp_depth == 1  # its pretraining ran D = 1 (Sec. 4.2)


@pytest.mark.parametrize("depth", [1, 2])
def test_flops_added_are_the_hand_count(depth):
    """Per depth: the projection 2·s·2h·h, an MLA block (its five matrices and the full-square core
    at the mean head width), an MoE MLP (router, top-k experts of three matrices, the shared expert)
    and the shared head once more, 2·s·h·v."""
    added = _toy(depth).forward_flops_per_sample - _toy(0).forward_flops_per_sample
    mla = (D * Q_LORA + Q_LORA * H * (NOPE + ROPE) + D * (KV_LORA + ROPE) + KV_LORA * H * (NOPE + VH) + H * VH * D)
    core = 4 * S * S * H * ((NOPE + ROPE + VH) // 2)
    moe = D * E + 3 * D * F * K + 3 * D * F
    per_depth = 2 * S * 2 * D * D + 2 * S * mla + core + 2 * S * moe + 2 * S * D * V
    assert added == pytest.approx(depth * per_depth, rel=1e-12)


def test_params_added_are_the_projection_norms_and_block_only():
    plain, one = _toy(0), _toy(1)
    block = sum(l.param_count for l in plain.layers if l.unit == "model.layers.3")  # an MoE block
    assert one.param_count - plain.param_count == block + 2 * D * D + 2 * D  # eh_proj, enorm, hnorm
    # No second embedding or head: the MTP module shares them.
    assert sum(1 for p in one.params if p.name.endswith(("embed_tokens.weight", "lm_head.weight"))) == 2


def test_deepseek_v3_mtp_module_has_its_published_unique_parameters():
    """deepseek-ai/DeepSeek-V3 README_WEIGHTS.md: the MTP module has 11.5B unique parameters (the
    shared 0.9B embedding and 0.9B head excluded)."""
    v3 = get_model("deepseek-v3")
    assert sum(l.param_count for l in _mtp_layers(v3)) == pytest.approx(11.5e9, rel=0.015)
    assert v3.param_count - get_model("deepseek-v3", mtp_depth=0).param_count == \
        sum(l.param_count for l in _mtp_layers(v3))


def test_mtp_block_runs_on_the_last_stage():
    model = _toy(1)
    tpm = tp_model(model, 1)
    mtp = {i for i, l in enumerate(model.layers) if is_mtp_unit(l.unit)}
    head = len(model.layers) - 1
    for layout in (Layout(pp=2, micro_batches=4), Layout(pp=2, virtual_stages=2, schedule="1f1b-interleaved",
                                                          micro_batches=4)):
        a = stage_assignment(tpm, layout)
        assert mtp | {head} <= set(a[-1][-1])  # the last virtual stage: with the head
        assert sorted(i for s in a for c in s for i in c) == list(range(len(model.layers)))
    # DualPipe: on the rank that also holds the embedding (arXiv:2412.19437 Sec. 3.2.3).
    a = stage_assignment(tpm, Layout(pp=2, schedule="dualpipe", micro_batches=4))
    assert mtp <= set(a[1][0]) and mtp <= set(a[0][1]) and 0 in a[0][0]
    # --stage-layers counts the main blocks only; the MTP block follows the last.
    a = stage_assignment(tpm, Layout(pp=2, micro_batches=4, stage_blocks=(3, 1)))
    assert mtp <= set(a[1][0])
    with pytest.raises(ConfigError, match="has 4"):
        stage_assignment(tpm, Layout(pp=2, micro_batches=4, stage_blocks=(3, 2)))


def test_balanced_split_gives_the_mtp_block_a_slot_of_the_last_stage():
    """4 main blocks + 1 MTP block over 2 stages: 3 slots and 2, the MTP block one of the last's."""
    tpm = tp_model(_toy(1), 1)
    a = stage_assignment(tpm, Layout(pp=2, micro_batches=4))
    units = [{tpm.layers[i].unit for i in a[s][0] if tpm.layers[i].unit} for s in range(2)]
    assert units == [{"model.layers.0", "model.layers.1", "model.layers.2"}, {"model.layers.3", MTP_UNIT_PREFIX + "0"}]


def test_last_stage_keeps_the_shared_embedding_as_a_tied_one():
    assert tp_model(_toy(1), 1).tied_embedding and not tp_model(_toy(0), 1).tied_embedding


@pytest.mark.parametrize("depth", [-1, 17, True, 1.0])
def test_invalid_depth_is_refused(depth):
    with pytest.raises(WorkloadError, match="--mtp-depth"):
        _toy(depth)


def test_depth_needs_a_sequence_longer_than_it_and_a_llama_decoder():
    with pytest.raises(WorkloadError, match="needs a sequence longer"):
        build_llama(dataclasses.replace(TOY, mtp_depth=3), seq_len=4)
    with pytest.raises(WorkloadError, match=r"^--mtp-depth: 1 adds multi-token prediction modules, built for a "
                                            r"Llama-style decoder .* gpt2 is not one"):
        get_model("gpt2", mtp_depth=1)


def test_depth_flag_is_validated():
    with pytest.raises(ConfigError, match="--mtp-depth"):
        PredictConfig(mtp_depth=-1)
    assert PredictConfig(mtp_depth=2).workload.mtp_depth == 2
    assert "mtp_depth" not in PredictConfig().to_dict()
