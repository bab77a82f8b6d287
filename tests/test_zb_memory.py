"""ZB-H1's memory per stage: 1F1B's forwarded micro-batches whole, the ones whose weight-gradient
pass ``W`` waits after their ``B`` holding only what ``W`` reads (each linear's input and output
gradient; Qi et al. 2024, arXiv:2401.10241, Table 1 and the per-stage peak stated after it)."""

from __future__ import annotations

import pytest

from dpsim.hardware import get_gpu
from dpsim.memory import deferred_weight_grad_bytes
from dpsim.predict.layout import stages_memory
from dpsim.strategies.layout import Layout, stage_assignment
from dpsim.strategies.pipeline import (
    deferred_weight_grads,
    in_flight,
    peak_split,
    schedule_slots,
)
from dpsim.strategies.tensor import layer_activation_bytes, tp_model
from dpsim.workload.catalog import get_model
from dpsim.workload.precision import get_precision

BF16 = get_precision("bf16-mixed")
S, H, V = 1024, 768, 50257  # GPT-2 small's sequence, hidden size and vocabulary


@pytest.mark.parametrize("p", [1, 2, 3, 4, 8, 16])
def test_zb_h1_peak_split_is_the_closed_form(p):
    for m in range(1, 3 * p + 1):
        for s in range(p):
            slots = schedule_slots("zb-h1", p, 1, m, s)
            forwarded, deferred = peak_split(slots)
            assert forwarded == in_flight("zb-h1", p, 1, m, s)[0] == min(p - s, m)
            assert deferred == deferred_weight_grads("zb-h1", p, m, s)
            if m >= p:
                assert deferred == s  # the paper's (p - i + 1) M_B + (i - 1) M_W, i = s + 1
    for schedule in ("1f1b", "gpipe", "1f1b-interleaved", "dualpipe"):
        assert deferred_weight_grads(schedule, p, 2 * p, p - 1) == 0


def test_a_deferred_w_holds_qi_table_1_m_w():
    """A GPT block (FFN 4h) keeps 32·s·b·h bytes for its deferred W (Qi et al. 2024, Table 1):
    inputs h (qkv), h (proj), h (fc1), 4h (fc2) and output gradients 3h, h, 4h, h, 2 bytes each.
    The LM head: its input h and the logits' gradient V."""
    model = get_model("gpt2", seq_len=S)
    tpm = tp_model(model, 1)
    layout = Layout(pp=1, micro_batches=1)
    blocks = {}
    for i, layer in enumerate(model.layers):
        if layer.unit is not None:
            blocks.setdefault(layer.unit, []).append(i)
    for layers in blocks.values():
        assert deferred_weight_grad_bytes(tpm, [layers], layout) == 32 * S * H
    head = [i for i, layer in enumerate(model.layers) if layer.name == "lm_head"]
    assert deferred_weight_grad_bytes(tpm, [head], layout) == 2 * S * (H + V)


def test_tp_with_sequence_parallelism_keeps_the_first_linears_input_shard():
    model = get_model("gpt2", seq_len=S)
    t = 4
    tpm = tp_model(model, t, sequence_parallel=True)
    attn = [i for i, layer in enumerate(model.layers) if layer.name == "transformer.h.0.attn"]
    layout = Layout(pp=1, tp=t, micro_batches=1, sequence_parallel=True)
    # qkv: input S/t x H (the sequence-parallel shard), output gradient S x 3H/t; proj: input
    # S x H/t, output gradient S x H.
    assert deferred_weight_grad_bytes(tpm, [attn], layout) == 2 * (S // t * H + S * 3 * H // t + S * H // t + S * H)


@pytest.mark.parametrize("p, m", [(4, 8), (4, 3), (6, 12)])
def test_zb_h1_stage_memory_is_an_independent_count(p, m):
    """Stage s of ZB-H1 holds min(p - s, m) micro-batches' activations (1F1B's) and
    min(s, m - min(p - s, m)) deferred W of 32·s·h bytes per block (the head's 2·s·(h + V) on the
    last stage): stage 0 equals 1F1B's, and no stage exceeds 1F1B's plus its deferred W."""
    model = get_model("gpt2", seq_len=S)
    tpm = tp_model(model, 1)
    layout = Layout(pp=p, schedule="zb-h1", micro_batches=m)
    one_f_one_b = Layout(pp=p, schedule="1f1b", micro_batches=m)
    a = stage_assignment(tpm, layout)
    zb = stages_memory(tpm, layout, get_gpu("h100"), BF16, "adamw")
    base = stages_memory(tpm, one_f_one_b, get_gpu("h100"), BF16, "adamw")
    for s in range(p):
        layers = [i for c in a[s] for i in c]
        whole = sum(layer_activation_bytes(tpm.layers[i], 1, sequence_parallel=False, recompute="off") for i in layers)
        blocks = len({model.layers[i].unit for i in layers if model.layers[i].unit is not None})
        w = blocks * 32 * S * H + sum(2 * S * (H + V) for i in layers if model.layers[i].name == "lm_head")
        forwarded = min(p - s, m)
        deferred = min(s, m - forwarded)
        act = zb[s].breakdown.activations_bytes
        assert act == pytest.approx(forwarded * whole + deferred * w, rel=1e-12)
        assert act <= base[s].breakdown.activations_bytes + deferred * w * (1 + 1e-12)
        assert zb[s].in_flight == (forwarded,)
    assert zb[0].breakdown.activations_bytes == pytest.approx(base[0].breakdown.activations_bytes, rel=1e-12)


def test_r121_deepseek_v2_on_zb_h1_fits():
    """R121 (DeepSeek-V2 on 2048 H800, pp 16 ZB-H1, micro-batch 1 of 4096 tokens, recomputation as
    DeepSeek-V3's): a middle stage's deferred W keeps per MoE block the MLA projections' and the shared
    experts' inputs and output gradients (the routed experts' grouped GEMMs finish their weight
    gradient in B), and the run is told it fits."""
    from dpsim.predict import predict
    from published_rows import large_model_job

    _, job = large_model_job("R121")
    assert job.config.execution.recompute == "deepseek"
    assert job.config.parallelism.schedule == "zb-h1"
    p = predict(job.config, model=job.model)
    assert p.memory.fits
    t = 4096
    # q_a, q_b, kv_a, kv_b, o; shared gate, up, down: input + output elements per token.
    per_block = (5120 + 1536) + (1536 + 24576) + (5120 + 576) + (512 + 32768) + (16384 + 5120) + 3 * (5120 + 3072)
    stages = p.layout.stages
    assert [s.memory.in_flight for s in stages] == [(16 - s,) for s in range(16)]
    mid, last = stages[13].memory.breakdown, stages[15].memory.breakdown
    assert mid.total_bytes <= mid.usable_bytes and last.total_bytes <= last.usable_bytes
    # Four MoE blocks on the middle stages: their deferred W by hand, the routed experts left out.
    model = job.model
    units = list(dict.fromkeys(layer.unit for layer in model.layers if layer.unit is not None))
    four = [i for i, layer in enumerate(model.layers) if layer.unit in units[40:44]]
    layout = Layout(pp=16, micro_batches=72)
    assert deferred_weight_grad_bytes(tp_model(model, 1), [four], layout) == 4 * 2 * t * per_block
    # Stage s holds 16 - s whole micro-batches and s deferred W: one more stage trades one for the other.
    act = [stages[s].memory.breakdown.activations_bytes for s in (11, 12, 13)]
    assert act[2] - act[1] == pytest.approx(act[1] - act[0], rel=1e-9)


def test_zb_h1_leaves_the_routed_experts_weight_gradient_in_b():
    """ZB-H1's W of an MoE layer is its shared experts' weight gradient only: the routed experts'
    grouped GEMMs run both gradients in B (as they keep nothing for a deferred W); other schedules
    keep splitting the whole backward by the layer's linears."""
    from dpsim.strategies.layout import _routed_flops, weight_gradient_share

    model = get_model("deepseek-v2", seq_len=4096)
    tpm = tp_model(model, 1)
    i = next(i for i, layer in enumerate(model.layers) if layer.name == "model.layers.1.mlp")
    t = 4096
    shared = 2 * t * 3 * 5120 * 3072  # gate, up and down of the two shared experts (2 x 1536)
    routed = 2 * t * 6 * 3 * 5120 * 1536  # top-6 routed copies of gate_up and down
    assert tpm.layers[i].col_flops_per_sample + tpm.layers[i].row_flops_per_sample == shared
    assert _routed_flops(tpm.spec.layers[i]) == pytest.approx(routed, rel=0.01)  # 154 rows x 160 experts
    assert weight_gradient_share(tpm.layers[i], routed_in_b=_routed_flops(tpm.spec.layers[i])) == \
        pytest.approx(shared / (2 * (shared + routed)), rel=0.01)
    assert weight_gradient_share(tpm.layers[i]) == 0.5
    attn = i - 1
    assert _routed_flops(tpm.spec.layers[attn]) == 0.0
