"""Mixture of experts: the catalog's MoE models against their published counts, the shape
syntax, and the invariants of expert layers (FLOPs are the active ones; one expert routed to
by every token is the dense model)."""

from __future__ import annotations

import pytest

from dpsim.errors import WorkloadError
from dpsim.workload.catalog import MOE_PUBLISHED, get_model
from dpsim.workload.shapes import parse_shape, shape_param_count
from dpsim.workload.spec import is_expert_param


@pytest.mark.parametrize("name", sorted(MOE_PUBLISHED))
def test_moe_catalog_counts_match_published_total_and_active(name):
    total, active, card = MOE_PUBLISHED[name]
    # The published counts leave the multi-token prediction module out (deepseek-ai/DeepSeek-V3
    # README_WEIGHTS.md: 671B main model, the MTP module apart): compare the model without it.
    model = get_model(name, mtp_depth=0)
    assert card and model.source
    assert model.param_count == pytest.approx(total, rel=0.01)
    # Active counts are published to two or three digits (3.3B, 37B): within 2 %.
    assert model.active_param_count == pytest.approx(active, rel=0.02)


QWEN3_235B = ("transformer:hidden=4096,layers=94,heads=64,kv_heads=4,head_dim=128,qk_norm=true,experts=128,"
              "top_k=8,moe_ffn=1536,vocab=151936,seq=4096")
MIXTRAL = "transformer:hidden=4096,layers=32,heads=32,kv_heads=8,ffn=14336,experts=8,top_k=2,moe_ffn=14336,vocab=32000,seq=4096"


@pytest.mark.parametrize(("shape", "name"), [(QWEN3_235B, "qwen3-235b-a22b"), (MIXTRAL, "mixtral-8x7b")])
def test_shape_gives_the_catalog_model(shape, name):
    built, catalog = get_model(shape), get_model(name)
    assert shape_param_count(parse_shape(shape)) == built.param_count == catalog.param_count
    assert built.active_param_count == catalog.active_param_count
    assert built.forward_flops_per_sample == catalog.forward_flops_per_sample


def test_deepseek_shape_with_dense_layers_and_shared_expert_counts_in_closed_form():
    shape = ("transformer:hidden=1024,layers=6,heads=8,ffn=4096,dense_layers=2,experts=16,top_k=4,moe_ffn=256,"
             "shared_experts=2,shared_ffn=512,vocab=1000,seq=128")
    model = get_model(shape)
    assert model.param_count == shape_param_count(parse_shape(shape))
    assert [any(is_expert_param(p) for p in l.params) for l in model.layers if l.name.endswith(".mlp")] == \
        [False, False, True, True, True, True]
    # Active: every parameter but the 12 of 16 routed experts a token skips.
    experts = 4 * 16 * 3 * 1024 * 256
    assert model.active_param_count == model.param_count - experts * 12 // 16


def test_one_expert_for_every_token_is_the_dense_model_with_a_router():
    dense = get_model("transformer:hidden=512,layers=2,heads=8,ffn=1024,vocab=1000,seq=64")
    moe = get_model("transformer:hidden=512,layers=2,heads=8,ffn=1024,experts=1,top_k=1,moe_ffn=1024,vocab=1000,seq=64")
    router = 2 * 512 * 1
    assert moe.param_count == dense.param_count + router
    assert moe.active_param_count == moe.param_count
    assert moe.forward_flops_per_sample == dense.forward_flops_per_sample + 2 * router * 64


@pytest.mark.parametrize(("extra", "message"), [
    ("experts=8,moe_ffn=64", "top_k=0 is not valid"),
    ("experts=8,top_k=9,moe_ffn=64", "top_k=9 is not valid"),
    ("experts=8,top_k=2", "moe_ffn missing"),
    ("top_k=2", "give experts= too"),
    ("experts=8,top_k=2,moe_ffn=64,dense_layers=2", "dense_layers=2 is not valid"),
    ("experts=-1", "experts=-1 is not valid"),
])
def test_bad_expert_shapes_are_refused_in_one_line(extra, message):
    with pytest.raises(WorkloadError, match=message) as err:
        parse_shape(f"transformer:hidden=64,layers=2,heads=4,ffn=128,vocab=100,seq=16,{extra}")
    assert "\n" not in str(err.value)


def test_experts_need_the_llama_family():
    with pytest.raises(WorkloadError, match="exist only with pos=rope"):
        parse_shape("transformer:hidden=64,layers=2,heads=4,vocab=100,seq=16,norm=layernorm,act=gelu,pos=learned,"
                    "experts=4,top_k=1,moe_ffn=64")


# ------------------------------------------------------------------ expert parallelism in a layout

from dpsim.errors import ConfigError  # noqa: E402
from dpsim.hardware import get_gpu  # noqa: E402
from dpsim.predict.config import PredictConfig  # noqa: E402
from dpsim.predict.layout import layout_memory  # noqa: E402
from dpsim.predict.run import load_model, predict  # noqa: E402
from dpsim.strategies.tensor import ExpertSplit, tp_model  # noqa: E402
from dpsim.workload.precision import get_precision, optimizer_state_bytes_per_param  # noqa: E402

BF16 = get_precision("bf16-mixed")


def _mixtral(**kw):
    base = dict(gpus=64, tp=1, pp=4, ep=8, model="mixtral-8x7b", link="infiniband", gpu="h100", micro_batch=1,
                global_batch=64, precision="bf16-mixed", strategy="zero1", steps=1)
    base.update(kw)
    return PredictConfig(**base)


def test_ep_1_holds_every_expert_as_the_dense_count():
    model = get_model("mixtral-8x7b")
    local = tp_model(model, 1, experts=ExpertSplit())
    assert sum(l.numel_per_rank for l in local.layers) == model.param_count
    split = tp_model(model, 1, experts=ExpertSplit(ep=8))
    assert sum(l.expert_numel_per_rank for l in split.layers) == model.expert_param_count // 8
    assert sum(l.numel_per_rank for l in split.layers) == model.param_count - model.expert_param_count * 7 // 8


def test_memory_per_rank_equals_a_hand_count():
    """Mixtral-8x7B, tp 1 x pp 4 x dp 16, ep 8 (edp = 16 / 8 = 2), zero1: a middle stage holds 8
    blocks; per block its attention (q, o: 4096²; k, v: 4096 x 1024), two RMSNorms, the router
    (8 x 4096) and one of the 8 experts (3 x 4096 x 14336)."""
    h, f = 4096, 14336
    dense_block = 2 * h * h + 2 * h * 1024 + 2 * h + 8 * h
    expert_block = 3 * h * f
    dense, experts = 8 * dense_block, 8 * expert_block
    w, g, k = BF16.weight_bytes, BF16.grad_bytes, optimizer_state_bytes_per_param(BF16, "adamw")
    state = (dense + experts) * (w + g) + (dense / 16 + experts / 2) * k
    config = _mixtral()
    stage = layout_memory(config, load_model(config), get_gpu("h100"), BF16)[1]
    m = stage.breakdown
    assert stage.params_per_gpu == dense + experts
    assert m.weights_bytes + m.gradients_bytes + m.optimizer_bytes == pytest.approx(state, rel=1e-12)


def test_fsdp_without_stages_shards_routed_experts_over_their_own_replicas():
    """torchtitan's EP x FSDP2 (pp 1, resharded after forward): the routed experts' weights and
    gradient shards are split over the expert-data-parallel replicas (edp = 64 / 8 = 8), the
    rest over all 64, as the optimizer state is; dividing the experts by 64 as well held 1/8 of
    their shard (Mixtral-8x7B: 0.21 GiB of weights where 1.36 GiB persist)."""
    import math
    config = _mixtral(pp=1, strategy="fsdp")
    stage = layout_memory(config, load_model(config), get_gpu("h100"), BF16)[0]
    model = load_model(config)
    experts = model.expert_param_count // 8
    dense = stage.params_per_gpu - experts
    m = stage.breakdown
    shard = math.ceil(dense / 64) + math.ceil(experts / 8)
    assert m.weights_bytes == shard * BF16.weight_bytes
    assert m.gradients_bytes == shard * BF16.grad_bytes
    k = optimizer_state_bytes_per_param(BF16, "adamw")
    assert m.optimizer_bytes == shard * k


def test_moe_layer_sends_top_k_copies_of_its_tokens_by_all_to_all():
    model = get_model("mixtral-8x7b")
    tpm = tp_model(model, 2, sequence_parallel=True, experts=ExpertSplit(ep=4))
    moe = [l for l in tpm.layers if l.expert_numel_per_rank]
    assert len(moe) == 32
    # top-2 copies of the rank's s / tp = 2048 tokens of 4096 at 2 bytes
    assert all(l.routed_bytes_per_sample == 2 * 2048 * 4096 * 2 for l in moe)
    assert not any(l.tp_collectives for l in moe)  # no shared expert: the tokens travel by all-to-all only
    work = predict(_mixtral()).layout.pipeline
    assert work is not None


def test_expert_parallelism_costs_all_to_all_and_reduces_experts_over_edp():
    p = predict(_mixtral())
    one = predict(_mixtral(ep=1))  # every expert on every rank: no all-to-all, experts over all of dp
    assert p.memory.total_bytes < one.memory.total_bytes
    # Stage 0 (8 of the 32 blocks) reduce-scatters its experts' gradients: one of 8 experts
    # per rank with ep 8, all of them without.
    stage0_experts = get_model("mixtral-8x7b").expert_param_count // 4
    rs = lambda pred: pred.comm_bytes_by_op["reduce_scatter"]
    assert rs(one) - rs(p) == pytest.approx(stage0_experts * 7 / 8 * BF16.grad_bytes, rel=1e-9)
    assert p.step_time_s != one.step_time_s


def test_ep_group_stays_in_a_server_until_it_outgrows_it():
    from dpsim.collectives.groups import LayoutShape, layout_communicators
    from dpsim.predict.run import resolve_topology
    job = resolve_topology(PredictConfig(gpus=256, link="infiniband"))
    inside = layout_communicators(job, LayoutShape(tp=2, pp=8, dp=16, ep=8))
    assert inside["ep"].topology.n_gpus == 8 and inside["ep"].topology.n_nodes == 1
    assert inside["edp"].topology.n_gpus == 4 and inside["edp"].topology.n_nodes == 4
    across = layout_communicators(job, LayoutShape(tp=2, pp=8, dp=16, ep=32))
    assert across["ep"].topology.n_gpus == 32 and across["ep"].topology.n_nodes == 4


@pytest.mark.parametrize(("kw", "needle"), [
    (dict(ep=16, gpus=64), "--ep: 16 does not divide the 8 experts"),
    (dict(model="llama-2-7b"), "--ep: 8 splits the experts of a mixture of experts"),
    (dict(tp=2, ep=8, pp=4), "--sequence-parallel: a mixture of experts with --tp 2 needs it"),
    (dict(ep=3), "--ep: --ep 3 x --etp 1 = 3 does not divide"),
])
def test_bad_expert_layouts_are_refused_in_one_line(kw, needle):
    with pytest.raises(ConfigError, match=needle) as err:
        predict(_mixtral(**kw))
    assert "\n" not in str(err.value)


# ------------------------------------------------------------------ routing and the all-to-all


def test_skewed_routing_slows_the_step_through_the_busiest_rank():
    balanced = predict(_mixtral())
    skewed = predict(_mixtral(moe_routing="zipf:1"))
    assert skewed.layout.expert_load.mean_busiest_factor > 1.5 > balanced.layout.expert_load.mean_busiest_factor
    assert skewed.step_time_s > balanced.step_time_s
    assert skewed.layout.ep_comm_s > balanced.layout.ep_comm_s


def test_all_to_all_time_is_four_per_moe_layer_and_micro_batch():
    from dpsim.collectives.all_to_all import uniform_all_to_all_cost
    from dpsim.predict.layout import expert_load
    config = _mixtral()
    p = predict(config)
    load = expert_load(config, load_model(config))
    from dpsim.collectives.groups import LayoutShape, layout_communicators
    from dpsim.predict.run import resolve_topology
    ep = layout_communicators(resolve_topology(config), LayoutShape(tp=1, pp=4, dp=16, ep=8))["ep"]
    # top-2 copies of 4096 tokens of 4096 bf16 values per micro-batch
    one = uniform_all_to_all_cost(ep, 2 * 4096 * 4096 * 2, load_factor=load.mean_busiest_factor).time_s
    stage0_moe_layers = 8
    assert p.layout.ep_comm_s == pytest.approx(4 * one * stage0_moe_layers * config.micro_batches, rel=1e-9)


def test_the_all_to_alls_are_communication_the_step_reports_and_waits_for(capsys, monkeypatch):
    """comm_s and exposed_comm_s counted tensor-, context- and data-parallel traffic and left the
    MoE all-to-alls in "compute" (Qwen3-235B tp2 ep32 pp8: 0.41 s exposed of a step that waits 5.5 s
    more on all-to-alls). Without --moe-a2a-overlap they block the compute stream: all exposed;
    with it, the paired ops hide part of them. The step itself does not move."""
    from dpsim.cli import main
    plain = predict(_mixtral())
    hidden = predict(_mixtral(moe_a2a_overlap=True, schedule="1f1b-interleaved", virtual_stages=2, global_batch=256))
    for p in (plain, hidden):
        rep = p.layout
        a2a = rep.ep_comm_s + rep.etp_comm_s
        s0 = rep.stages[rep.critical_stage]
        assert a2a > 0
        # What is left is the critical stage's point-to-point sends, a whole number of transfers.
        sends = (p.comm_s - rep.tp_comm_s - s0.dp_comm_s - a2a) / rep.p2p_s
        assert sends == pytest.approx(round(sends), abs=1e-6) and round(sends) > 0
        assert p.exposed_comm_s == pytest.approx(rep.tp_exposed_s + s0.dp_exposed_s + rep.ep_exposed_s, rel=1e-12)
    assert plain.layout.ep_exposed_s == pytest.approx(plain.layout.ep_comm_s + plain.layout.etp_comm_s, rel=1e-12)
    assert 0 < hidden.layout.ep_exposed_s < hidden.layout.ep_comm_s + hidden.layout.etp_comm_s
    monkeypatch.setenv("COLUMNS", "200")
    assert main(["predict", "--model", "mixtral-8x7b", "--gpus", "64", "--tp", "1", "--pp", "4", "--ep", "8",
                 "--link", "infiniband", "--micro-batch", "1", "--global-batch", "64", "--strategy", "zero1"]) == 0
    assert "expert-parallel all-to-alls waited for" in capsys.readouterr().out


def test_expert_tensor_parallelism_gathers_and_scatters_over_its_own_nvlink_group():
    """--etp 2: per MoE layer and micro-batch, an all-gather and a reduce-scatter of both etp ranks'
    routed copies in forward and their transposes in backward, on 2 neighbouring GPUs of a server;
    --etp 1 has no such term, and the ep all-to-all is the same either way."""
    from dpsim.collectives.groups import LayoutShape, layout_communicators
    from dpsim.collectives.nccl import NcclCollectives
    from dpsim.predict.run import resolve_topology
    one, two = predict(_mixtral(ep=4)), predict(_mixtral(ep=4, etp=2))
    assert one.layout.etp_comm_s == 0 and "etp_comm_s" not in one.layout.to_dict()
    assert two.layout.ep_comm_s == pytest.approx(one.layout.ep_comm_s, rel=1e-9)
    assert two.layout.ep_comm_s + two.layout.etp_comm_s > one.layout.ep_comm_s
    config = _mixtral(ep=4, etp=2)
    etp = layout_communicators(resolve_topology(config), LayoutShape(tp=1, pp=4, dp=16, ep=4, etp=2))["etp"]
    assert etp.topology.n_gpus == 2 and etp.topology.n_nodes == 1
    nccl = NcclCollectives(etp.topology, job=etp.job)
    size = 2 * (2 * 4096 * 4096 * 2) * two.layout.expert_load.mean_busiest_factor  # etp x top-2 copies, bf16
    per_pass = nccl.time("all_gather", size).time_s + nccl.time("reduce_scatter", size).time_s
    stage0_moe_layers = 8
    assert two.layout.etp_comm_s == pytest.approx(2 * per_pass * stage0_moe_layers * config.micro_batches, rel=1e-9)
    assert two.to_dict()["layout"]["etp_comm_s"] == two.layout.etp_comm_s
    # Recomputing the MoE layers re-runs the forward's gather and scatter too.
    again = predict(_mixtral(ep=4, etp=2, recompute="moe"))
    assert again.layout.etp_comm_s == pytest.approx(two.layout.etp_comm_s * 3 / 2, rel=1e-12)


def test_plan_tables_cost_expert_tensor_parallelism_as_predict_does():
    """The planner's per-layer work (which its estimate sums) is predict's, etp collectives included."""
    import dataclasses
    from dpsim.plan.planner import Candidate, Planner
    base = PredictConfig(model="mixtral-8x7b", link="infiniband", precision="bf16-mixed")
    planner = Planner(base)
    sums = {}
    for etp in (1, 2):
        c = Candidate(gpus=64, tp=2, pp=2, dp=16, ep=4, etp=etp, sequence_parallel=True, strategy="zero1",
                      micro_batch=1, global_batch=64, recompute="full", schedule="1f1b", virtual_stages=1)
        tables = planner.tables(c, planner.collectives(c.gpus, c.tp, c.pp, c.dp, c.cp, c.ep, c.etp))
        pred = predict(dataclasses.replace(c.config(base), steps=1))
        assert sum(tables.forward) == pytest.approx(sum(s.forward_s for s in pred.layout.stages), rel=1e-12)
        assert sum(tables.backward) == pytest.approx(sum(s.backward_s for s in pred.layout.stages), rel=1e-12)
        sums[etp] = sum(tables.forward) + sum(tables.backward), planner.estimate(c, global_batch=64).step_time_s
    assert sums[2][0] > sums[1][0] and sums[2][1] > sums[1][1]


def test_capacity_factor_drops_tokens_and_caps_the_busiest_rank():
    dropless = predict(_mixtral(moe_routing="zipf:1"))
    capped = predict(_mixtral(moe_routing="zipf:1", moe_capacity_factor=1.0))
    assert capped.layout.expert_load.dropped_fraction > 0.1
    assert dropless.layout.expert_load.dropped_fraction == 0
    assert capped.step_time_s < dropless.step_time_s


def test_a_capacity_under_one_pair_is_refused_and_drops_are_printed(capsys, monkeypatch):
    """fuzz5: --moe-capacity-factor 1e-300 dropped every token (MFU 108 %) and the tables never said
    that any were dropped (only the JSON's expert_dropped_fraction did)."""
    from dpsim.cli import main

    monkeypatch.setenv("COLUMNS", "200")  # rich sizes tables to COLUMNS: keep the row on one line
    with pytest.raises(ConfigError, match=r"^--moe-capacity-factor: 1e-300 gives each of the 8 experts a capacity "
                                          r"of .* under one, so every token would be dropped; expected at least"):
        predict(_mixtral(moe_capacity_factor=1e-300))
    argv = ["predict", "--model", "mixtral-8x7b", "--gpus", "64", "--pp", "4", "--ep", "8", "--link", "infiniband",
            "--gpu", "h100", "--micro-batch", "1", "--global-batch", "64", "--strategy", "zero1", "--steps", "1"]
    assert main([*argv, "--moe-capacity-factor", "0.5"]) == 0
    out = capsys.readouterr().out
    assert "dropped at expert capacity" in out and "MFU still counts their FLOPs" in out
    assert main(argv) == 0 and "dropped at expert capacity" not in capsys.readouterr().out


def test_hierarchical_all_to_all_differs_only_across_servers():
    inside = [predict(_mixtral(moe_a2a=a)).layout.ep_comm_s for a in ("flat", "hierarchical")]
    assert inside[0] == inside[1]  # ep 8 fits one 8-GPU server
    across = [predict(_mixtral(model="qwen3-30b-a3b", gpus=128, ep=16, global_batch=128, moe_a2a=a)).layout.ep_comm_s
              for a in ("flat", "hierarchical")]
    assert across[0] != across[1]


def test_routing_flags_are_refused_in_one_line():
    with pytest.raises(ConfigError, match="--moe-routing") as err:
        _mixtral(moe_routing="zipf:-1")
    assert "\n" not in str(err.value)
    with pytest.raises(ConfigError, match="--moe-capacity-factor"):
        _mixtral(moe_capacity_factor=0.0)


# ------------------------------------------------------------------ recomputing the MoE layers (--recompute moe)


def test_moe_recompute_runs_the_all_to_alls_again_six_per_layer_and_micro_batch():
    """Megatron-Core's --recompute-modules moe re-runs the dispatch and combine before the backward."""
    kept, again = predict(_mixtral(recompute="op")), predict(_mixtral(recompute="moe"))
    assert again.layout.ep_comm_s == pytest.approx(kept.layout.ep_comm_s * 6 / 4, rel=1e-12)
    assert again.step_time_s > kept.step_time_s


def test_moe_recompute_keeps_each_moe_layer_input_and_one_layer_while_it_reruns():
    """Per sample of one micro-batch, a chunk keeps its attention layers as megatron does (block
    input, what the modules save) and of each MoE layer only its input; the working set is the
    larger of one MoE layer's activations and an attention layer's recomputed rest."""
    from dpsim.memory import stage_activation_bytes
    from dpsim.strategies.checkpointing import megatron_saved_bytes_per_sample
    from dpsim.strategies.layout import stage_assignment
    from dpsim.predict.layout import layout_of
    config = _mixtral(recompute="moe")
    model = load_model(config)
    tpm = tp_model(model, 1, experts=ExpertSplit(ep=8))
    layout = layout_of(config, BF16.grad_bytes)
    assignment = stage_assignment(tpm, layout)
    (per_chunk,), working, _ = stage_activation_bytes(tpm, assignment, layout)[1]
    keep = rerun = 0.0
    for i in assignment[1][0]:
        layer, spec = tpm.layers[i], tpm.spec.layers[i]
        if layer.routed_bytes_per_sample:
            keep += layer.input_bytes_per_sample
            rerun = max(rerun, spec.activation_bytes_per_sample)
        else:  # the attention layer opens its block: op keeps the block's input too
            every = spec.activation_bytes_per_sample
            kept = min(every, megatron_saved_bytes_per_sample(spec) + layer.input_bytes_per_sample)
            keep += kept
            rerun = max(rerun, every - kept)
    assert per_chunk == pytest.approx(keep, rel=1e-12)
    assert working == pytest.approx(rerun, rel=1e-12)
    kept = predict(_mixtral(recompute="megatron")).memory.activations_bytes
    full = predict(_mixtral(recompute="full")).memory.activations_bytes
    assert full < predict(config).memory.activations_bytes < kept


@pytest.mark.parametrize(("kw", "needle"), [
    (dict(model="llama-2-7b", ep=1, recompute="moe"), "--recompute: moe recomputes the MoE layers, but"),
    (dict(ep=1, pp=1, recompute="moe"), "--recompute: moe is Megatron-Core's, for a tensor/pipeline/expert"),
    (dict(ep=1, pp=1, recompute="megatron"), "--recompute: megatron is Megatron-Core's"),
    (dict(ep=1, pp=1, recompute="deepseek"), r"--recompute: deepseek is DeepSeek-V3's \(HAI-LLM\), for a tensor"),
])
def test_moe_recompute_is_refused_without_experts_or_a_layout(kw, needle):
    with pytest.raises(ConfigError, match=needle) as err:
        predict(_mixtral(**kw))
    assert "\n" not in str(err.value)


def test_megatron_recompute_keeps_gemm_inputs_not_residual_outputs_by_hand():
    """Qwen3-235B at 4096 tokens, one rank (tp 1, ep 1), per sample at 2 bytes: the attention layer
    keeps q, k, v (8192 + 2 x 512 wide) and the attention output (8192) with its fp32 softmax
    statistics (64 heads), not o_proj's output; the MoE layer keeps the router's fp32 logits as
    their 2-byte outputs (128), the permuted tokens (8 copies x 4096 wide) and the first GEMM's
    output (8 copies x 2 x 1536), not the second GEMM's."""
    from dpsim.strategies.checkpointing import megatron_saved_bytes_per_sample, op_saved_bytes_per_sample
    s, h = 4096, 4096
    model = get_model("qwen3-235b-a22b", seq_len=s, flash_attention=True)
    attn, moe = model.layers[1], model.layers[2]
    assert megatron_saved_bytes_per_sample(attn) == s * (8192 + 2 * 512 + 8192) * 2 + s * 64 * 4
    assert megatron_saved_bytes_per_sample(moe) == s * 128 * 2 + 8 * s * h * 2 + 8 * s * 2 * 1536 * 2
    assert op_saved_bytes_per_sample(attn) - megatron_saved_bytes_per_sample(attn) == s * h * 2  # o_proj's output


@pytest.mark.parametrize("recompute", ["op", "megatron", "moe"])
def test_plan_searches_op_level_recomputation_costed_as_predict_does(recompute):
    """``plan --recompute op,megatron,moe``: the candidates' per-layer work (recomputed shares
    included) is predict's, and their memory predict's."""
    import dataclasses
    from dpsim.plan.planner import Candidate, Planner
    base = PredictConfig(model="mixtral-8x7b", link="infiniband", gpu="h100", precision="bf16-params")
    planner = Planner(base)
    c = Candidate(gpus=64, tp=1, pp=4, dp=16, ep=8, sequence_parallel=False, strategy="zero1", micro_batch=1,
                  global_batch=64, recompute=recompute, schedule="1f1b", virtual_stages=1)
    tables = planner.tables(c, planner.collectives(c.gpus, c.tp, c.pp, c.dp, c.cp, c.ep, c.etp))
    pred = predict(dataclasses.replace(c.config(base), steps=1))
    assert sum(tables.backward) == pytest.approx(sum(s.backward_s for s in pred.layout.stages), rel=1e-12)
    off = planner.tables(dataclasses.replace(c, recompute="off"),
                         planner.collectives(c.gpus, c.tp, c.pp, c.dp, c.cp, c.ep, c.etp))
    assert sum(tables.backward) > sum(off.backward)
    est = planner.estimate(c, global_batch=64)
    assert est.memory_bytes == pytest.approx(max(s.memory.breakdown.total_bytes for s in pred.layout.stages), rel=1e-9)
    cands, _ = planner.candidates(64, tps=[1], pps=[1, 4], eps=[8], micro_batches=[1], strategies=["zero1"],
                                  recomputes=[recompute], global_batch=64)
    assert cands and all(x.recompute == recompute for x in cands)


@pytest.mark.parametrize("flag, kw", [("--moe-routing", dict(moe_routing="zipf:1.2")),
                                      ("--moe-capacity-factor", dict(moe_capacity_factor=1.25)),
                                      ("--moe-a2a", dict(moe_a2a="hierarchical"))])
@pytest.mark.parametrize("layout", [dict(), dict(tp=2)])
def test_router_options_on_a_dense_model_are_refused(flag, kw, layout):
    # They were silently ignored (the dense step predicted), while --ep and --moe-a2a-overlap were refused.
    config = PredictConfig(model="gpt2", gpus=16, link="nvlink", **kw, **layout)
    with pytest.raises(ConfigError, match=f"^{flag}: .* applies to a mixture of experts' router and all-to-alls, "
                                          f"but gpt2 is dense"):
        predict(config)
