"""Families once refused by ``model_type`` (issue #28: any model shape under every layout; issue #24: the catalog,
a shape and a transformers ``config.json`` are one lowering): each against its published configuration in
``tests/data/hf_configs/`` (tests/data/README.md names the repositories), its parameter count against the modules
transformers builds from the same file on the meta device, by shape and by ``config.json`` at the same cost, and
under the layouts that apply."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dpsim.errors import DpsimError
from dpsim.predict.config import PredictConfig
from dpsim.predict.run import predict
from dpsim.workload.catalog import get_model
from dpsim.workload.shapes import parse_shape, shape_param_count, shape_ref_of_config_json
from dpsim.workload.spec import AttentionOp

CONFIGS = Path(__file__).parent / "data" / "hf_configs"


def _config(folder: str) -> str:
    return str(CONFIGS / folder / "config.json")


def _run(model, **layout):
    layout.setdefault("seq_len", 2048)
    return predict(PredictConfig(model=model, gpus=8, gpu="h100", link="infiniband", steps=1, global_batch=8,
                                 micro_batch=1, **layout))


def _transformers_count(folder: str, config_class: str, model_class: str) -> int:
    """Parameters of the transformers module built from the fixture on the meta device (no weights)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    fields = {k: v for k, v in json.loads(Path(_config(folder)).read_text()).items() if k != "model_type"}
    config = getattr(transformers, config_class)(**fields)
    with torch.device("meta"):
        module = getattr(transformers, model_class)(config)
    return sum(p.numel() for p in module.parameters())


def _counts_by_config_and_shape(folder: str) -> tuple[int, int]:
    """The parameter count of ``folder``'s config.json read as a config and as the shape it gives."""
    return (get_model(_config(folder)).param_count,
            shape_param_count(parse_shape(shape_ref_of_config_json(_config(folder)))))


def _same_cost(folder: str, **layout) -> None:
    text = shape_ref_of_config_json(_config(folder))
    a, b = _run(_config(folder), **layout), _run(text, **layout)
    assert a.step_time_s == pytest.approx(b.step_time_s, rel=0.01)
    assert a.memory.total_bytes == pytest.approx(b.memory.total_bytes, rel=0.01)


def _refused(model: str, says: str, **layout) -> None:
    with pytest.raises(DpsimError) as err:
        _run(model, **layout) if layout else get_model(model)
    assert says in str(err.value) and "\n" not in str(err.value)


# --------------------------------------------------------------------------- Gemma 3

# Gemma-3-1B: tests/data/hf_configs/gemma-3-1b-pt/config.json (google/gemma-3-1b-pt's fields). 999,885,952
# parameters: keras-team/keras-hub keras_hub/src/models/gemma3/gemma3_presets.py "gemma3_1b" "params", and by hand:
# embedding 262144 x 1152, 26 blocks of q/k/v/o (4 query heads and 1 key-value head of 256), a GeGLU MLP of 6912,
# four RMSNorms of 1152 and q/k norms of 256, the final norm; the head tied.
GEMMA3_1B_COUNT = 999_885_952


def test_gemma3_1b_by_config_json_has_the_published_count():
    v, h, hd, ffn = 262144, 1152, 256, 6912
    block = h * (4 * hd + 2 * hd) + 4 * hd * h + 3 * h * ffn + 4 * h + 2 * hd
    assert v * h + 26 * block + h == GEMMA3_1B_COUNT
    assert _counts_by_config_and_shape("gemma-3-1b-pt") == (GEMMA3_1B_COUNT, GEMMA3_1B_COUNT)


def test_gemma3_1b_count_is_what_transformers_builds():
    assert _transformers_count("gemma-3-1b-pt", "Gemma3TextConfig", "Gemma3ForCausalLM") == GEMMA3_1B_COUNT


def test_gemma3_has_five_local_blocks_to_one_global_qk_norms_and_no_caps():
    model = get_model(_config("gemma-3-1b-pt"))
    ops = [op for layer in model.layers for op in layer.ops if isinstance(op, AttentionOp)]
    assert [op.window for op in ops[:12]] == [512] * 5 + [0] + [512] * 5 + [0]
    assert sum(op.window == 0 for op in ops) == 26 // 6 and not any(op.softcap for op in ops)
    names = {p.name for p in model.params}
    for norm in ("input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
                 "post_feedforward_layernorm", "self_attn.q_norm", "self_attn.k_norm"):
        assert f"model.layers.0.{norm}.weight" in names
    assert not any(op.name.startswith("final_softcap") for op in model.layers[-1].ops)


def test_gemma3_by_shape_and_by_config_json_cost_the_same():
    _same_cost("gemma-3-1b-pt", pp=2, seq_len=4096)


@pytest.mark.parametrize("layout", [dict(pp=2), dict(strategy="fsdp"), dict(pp=2, strategy="zero1")])
def test_gemma3_1b_runs_under_every_layout_its_one_key_value_head_allows(layout):
    assert _run(_config("gemma-3-1b-pt"), **layout).step_time_s > 0


GEMMA3_SHAPE = ("transformer:hidden=1024,layers=12,heads=8,kv_heads=4,head_dim=256,ffn=4096,vocab=32000,seq=4096,"
                "act=geglu,tied=true,qk_norm=true,sandwich_norms=true,window=512,window_layers=5:1")


@pytest.mark.parametrize("layout", [dict(tp=2), dict(pp=2), dict(tp=2, pp=2), dict(strategy="fsdp")])
def test_a_gemma3_shape_runs_under_tp_and_pp(layout):
    assert _run(GEMMA3_SHAPE, **layout).step_time_s > 0


def test_five_to_one_windows_cost_between_all_local_and_alternate():
    def step(layers: str) -> float:
        return _run(GEMMA3_SHAPE.replace("5:1", layers), seq_len=4096).step_time_s
    assert step("all") < step("5:1") < step("alternate")
    assert parse_shape(GEMMA3_SHAPE.replace("5:1", "1:1")).window_layers == "alternate"


@pytest.mark.parametrize("value", ["0:1", "5:2", "x", "5:", ":1"])
def test_a_bad_window_pattern_is_refused_in_one_line(value):
    _refused(GEMMA3_SHAPE.replace("5:1", value), f"window_layers={value} is not valid")


def test_a_multimodal_gemma3_config_reads_its_text_config(tmp_path):
    text = json.loads(Path(_config("gemma-3-1b-pt")).read_text())
    folder = tmp_path / "gemma-3-mm"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "gemma3", "text_config": text,
                                                    "vision_config": {"model_type": "siglip_vision_model"}}))
    assert get_model(str(folder / "config.json")).param_count == GEMMA3_1B_COUNT
    del text["num_attention_heads"]  # left to Gemma3TextConfig's default: refused naming it
    (folder / "config.json").write_text(json.dumps({"model_type": "gemma3", "text_config": text}))
    _refused(str(folder / "config.json"), "num_attention_heads")


def test_a_gemma3_layer_pattern_the_keys_cannot_say_is_refused(tmp_path):
    data = json.loads(Path(_config("gemma-3-1b-pt")).read_text())
    data["layer_types"] = ["full_attention"] + ["sliding_attention"] * 25
    (tmp_path / "config.json").write_text(json.dumps(data))
    _refused(str(tmp_path / "config.json"), "gemma3_text configuration has a field")


# --------------------------------------------------------------------------- Cohere (Command R)

# Command R (35B): tests/data/hf_configs/c4ai-command-r-v01/config.json (CohereForAI/c4ai-command-r-v01's fields; its
# model card: "35 billion"). By hand: embedding 256000 x 8192 (tied head), 40 blocks of q/k/v/o (64 heads of 128),
# a SiLU-gated MLP of 22528 and one weight-only LayerNorm, the final norm.
COMMAND_R_COUNT = 34_980_831_232


def test_command_r_by_config_json_has_its_count():
    v, h, ffn = 256000, 8192, 22528
    assert v * h + 40 * (4 * h * h + 3 * h * ffn + h) + h == COMMAND_R_COUNT
    assert abs(COMMAND_R_COUNT / 35e9 - 1) < 0.01
    assert _counts_by_config_and_shape("c4ai-command-r-v01") == (COMMAND_R_COUNT, COMMAND_R_COUNT)


def test_command_r_count_is_what_transformers_builds():
    assert _transformers_count("c4ai-command-r-v01", "CohereConfig", "CohereForCausalLM") == COMMAND_R_COUNT


def test_cohere_use_qk_norm_has_a_weight_per_head(tmp_path):
    data = json.loads(Path(_config("c4ai-command-r-v01")).read_text())
    data.update(use_qk_norm=True, num_key_value_heads=8)
    (tmp_path / "config.json").write_text(json.dumps(data))
    # q_norm (64, 128) and k_norm (8, 128) a block; 8 key-value heads of 128 for k and v: transformers 5.25.0's
    # CohereForCausalLM from this config on the meta device has 30,283,579,392.
    qk = 40 * (64 + 8) * 128 - 40 * 2 * 8192 * (64 - 8) * 128
    assert get_model(str(tmp_path / "config.json")).param_count == COMMAND_R_COUNT + qk == 30_283_579_392


COHERE_SHAPE = ("transformer:hidden=1024,layers=4,heads=8,ffn=2816,vocab=32000,seq=2048,norm=layernorm_nobias,"
                "parallel=1,tied=true,logit_scale=true")


def test_cohere_block_is_the_parallel_block_with_its_norm_and_logit_scale():
    model = get_model(_config("c4ai-command-r-v01"))
    names = {p.name for p in model.params}
    assert "model.layers.0.input_layernorm.weight" in names and "model.layers.0.input_layernorm.bias" not in names
    assert "model.layers.0.post_attention_layernorm.weight" not in names
    assert any(op.name == "logit_scale" for op in model.layers[-1].ops)
    rms = get_model(COHERE_SHAPE.replace("norm=layernorm_nobias", "norm=rmsnorm").replace(",logit_scale=true", ""))
    cohere = get_model(COHERE_SHAPE)
    assert cohere.param_count == rms.param_count and cohere.forward_flops_per_sample == rms.forward_flops_per_sample
    assert _run(COHERE_SHAPE).step_time_s > _run(COHERE_SHAPE.replace("norm=layernorm_nobias", "norm=rmsnorm")
                                                 ).step_time_s > _run(COHERE_SHAPE.replace("norm=layernorm_nobias",
                                                                                           "norm=rmsnorm").replace(
                                                                          ",logit_scale=true", "")).step_time_s


def test_command_r_by_shape_and_by_config_json_cost_the_same():
    _same_cost("c4ai-command-r-v01", pp=2, strategy="fsdp")


@pytest.mark.parametrize("layout", [dict(tp=2), dict(pp=2), dict(tp=2, pp=2), dict(strategy="fsdp"), dict(cp=2)])
def test_cohere_runs_under_every_layout(layout):
    assert _run(COHERE_SHAPE + ",qk_norm=true,qk_norm_whole=true", **layout).step_time_s > 0


def test_command_r_runs_under_tp_and_pp():
    assert _run(_config("c4ai-command-r-v01"), tp=4, pp=2, seq_len=4096).step_time_s > 0


@pytest.mark.parametrize("extra, says", [(",qk_norm_whole=true", "qk_norm_whole=true is not valid"),
                                         (",norm=layernorm_nobias,pos=learned,act=gelu", "not a modelled block")])
def test_cohere_keys_refuse_in_one_line(extra, says):
    _refused("transformer:hidden=512,layers=2,heads=8,ffn=1024,vocab=100,seq=64" + extra, says)


# --------------------------------------------------------------------------- Qwen2-MoE: the gated shared expert

# Qwen1.5-MoE-A2.7B: tests/data/hf_configs/Qwen1.5-MoE-A2.7B/config.json (Qwen/Qwen1.5-MoE-A2.7B's fields; its model
# card: "14.3B parameters in total and 2.7B activated"). By hand: embedding and untied head 151936 x 2048, 24 blocks
# of q/k/v/o with q/k/v biases, two RMSNorms, a router of 60, 60 experts of 1408, one shared expert of 5632 and its
# gate (2048 x 1), the final norm.
QWEN2_MOE_COUNT = 14_315_784_192


def test_qwen1_5_moe_by_config_json_has_its_count():
    v, h = 151936, 2048
    block = 4 * h * h + 3 * h + 2 * h + 60 * h + 3 * h * (60 * 1408 + 5632) + h
    assert 2 * v * h + 24 * block + h == QWEN2_MOE_COUNT
    assert abs(QWEN2_MOE_COUNT / 14.3e9 - 1) < 0.005
    assert _counts_by_config_and_shape("Qwen1.5-MoE-A2.7B") == (QWEN2_MOE_COUNT, QWEN2_MOE_COUNT)


def test_qwen1_5_moe_count_is_what_transformers_builds():
    assert _transformers_count("Qwen1.5-MoE-A2.7B", "Qwen2MoeConfig", "Qwen2MoeForCausalLM") == QWEN2_MOE_COUNT


QWEN2_MOE_SHAPE = ("transformer:hidden=1024,layers=4,heads=8,ffn=2816,vocab=32000,seq=2048,experts=8,top_k=2,"
                   "moe_ffn=704,shared_experts=1,shared_ffn=2816,bias=qkv")


def test_the_shared_gate_adds_its_weight_its_product_and_time():
    plain, gated = get_model(QWEN2_MOE_SHAPE), get_model(QWEN2_MOE_SHAPE + ",shared_gate=true")
    assert gated.param_count == plain.param_count + 4 * 1024
    assert gated.forward_flops_per_sample == plain.forward_flops_per_sample + 4 * 2.0 * 2048 * 1024
    assert "model.layers.0.mlp.shared_expert_gate.weight" in {p.name for p in gated.params}
    assert _run(QWEN2_MOE_SHAPE + ",shared_gate=true").step_time_s > _run(QWEN2_MOE_SHAPE).step_time_s


def test_qwen1_5_moe_by_shape_and_by_config_json_cost_the_same():
    _same_cost("Qwen1.5-MoE-A2.7B", ep=4, pp=2)


@pytest.mark.parametrize("layout", [dict(tp=2, sequence_parallel=True), dict(ep=4), dict(tp=2, ep=4, sequence_parallel=True),
                                    dict(pp=2), dict(strategy="fsdp"),
                                    dict(tp=2, sequence_parallel=True, pp=2)])
def test_qwen1_5_moe_runs_under_every_layout(layout):
    assert _run(_config("Qwen1.5-MoE-A2.7B"), **layout).step_time_s > 0


def test_a_shared_gate_without_shared_experts_is_refused():
    _refused(QWEN2_MOE_SHAPE.replace(",shared_experts=1,shared_ffn=2816", "") + ",shared_gate=true",
             "shared_gate=true is not valid")


# --------------------------------------------------------------------------- Falcon with ALiBi (Falcon-RW)

# Falcon-RW-1B: tests/data/hf_configs/falcon-rw-1b/config.json (tiiuae/falcon-rw-1b's fields). 1,311,625,216
# parameters: keras-team/keras-hub's Falcon preset "falcon_refinedweb_1b_en" "params"; by hand: embedding 50304 x 2048
# (tied), 24 blocks in sequence of a fused query_key_value and dense with biases, two LayerNorms and a GELU MLP of
# 8192 with biases, the final LayerNorm.
FALCON_RW_1B_COUNT = 1_311_625_216


def test_falcon_rw_1b_by_config_json_has_the_published_count():
    v, h = 50304, 2048
    block = 3 * h * h + 3 * h + h * h + h + 2 * h * 4 * h + 4 * h + h + 2 * 2 * h
    assert v * h + 24 * block + 2 * h == FALCON_RW_1B_COUNT
    assert _counts_by_config_and_shape("falcon-rw-1b") == (FALCON_RW_1B_COUNT, FALCON_RW_1B_COUNT)


def test_falcon_rw_1b_count_is_what_transformers_builds():
    assert _transformers_count("falcon-rw-1b", "FalconConfig", "FalconForCausalLM") == FALCON_RW_1B_COUNT


def test_falcon_rw_is_blooms_block_without_the_embedding_norm():
    text = shape_ref_of_config_json(_config("falcon-rw-1b"))
    assert "pos=alibi" in text and "embed_norm=false" in text and "parallel" not in text
    bloom_like = get_model(text.replace("embed_norm=false", "embed_norm=true"))
    assert bloom_like.param_count == FALCON_RW_1B_COUNT + 2 * 2048


def test_falcon_rw_by_shape_and_by_config_json_cost_the_same():
    _same_cost("falcon-rw-1b", tp=2, pp=2)


@pytest.mark.parametrize("layout", [dict(tp=2), dict(pp=2), dict(tp=2, pp=2), dict(strategy="fsdp")])
def test_falcon_rw_runs_under_every_layout(layout):
    assert _run(_config("falcon-rw-1b"), **layout).step_time_s > 0


@pytest.mark.parametrize("extra, says", [({"parallel_attn": True}, "Falcon's ALiBi with parallel_attn"),
                                         ({"multi_query": True}, "num_kv_heads=1 is not valid")])
def test_falcon_alibi_it_does_not_build_is_refused_in_one_line(tmp_path, extra, says):
    data = {**json.loads(Path(_config("falcon-rw-1b")).read_text()), **extra}
    (tmp_path / "config.json").write_text(json.dumps(data))
    _refused(str(tmp_path / "config.json"), says)


@pytest.mark.parametrize("layer_types, says", [(["sliding_attention", "local"] * 13, "has a field"),
                                               ([1] * 26, "has a field")])
def test_gemma3_layer_types_of_other_kinds_are_refused_in_one_line(tmp_path, layer_types, says):
    data = {**json.loads(Path(_config("gemma-3-1b-pt")).read_text()), "layer_types": layer_types}
    (tmp_path / "config.json").write_text(json.dumps(data))
    _refused(str(tmp_path / "config.json"), says)


def test_a_one_block_gemma2_still_reads_its_window(tmp_path):
    data = {**json.loads(Path(CONFIGS / "gemma-2-9b" / "config.json").read_text()), "num_hidden_layers": 1}
    (tmp_path / "config.json").write_text(json.dumps(data))
    assert "window=4096" in shape_ref_of_config_json(str(tmp_path / "config.json"))
