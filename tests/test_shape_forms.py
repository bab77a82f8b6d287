"""Every block the cost model builds is expressible by shape and by a transformers ``config.json``
(issue 28, shapes): Nemotron-4's LayerNorm + squared-ReLU + RoPE + GQA block, GeGLU (Gemma),
multi-query attention, a head width other than hidden / heads, Qwen2's q/k/v biases, a sequential
GPT-NeoX block, tied and untied heads; each has its hand-counted parameters, the same model by
shape, by ``config.json`` and (where the catalog has it) by name predicts exactly the same, and
it runs under tensor, pipeline, context and expert parallelism. Families the builders do not have are
refused in one line (parallel blocks, windows and the rest: tests/test_shape_mechanisms.py)."""

from __future__ import annotations

import json

import pytest

from dpsim.errors import DpsimError, WorkloadError
from dpsim.predict.config import PredictConfig
from dpsim.predict.run import predict
from dpsim.workload.catalog import get_model
from dpsim.workload.shapes import parse_shape, shape_param_count, shape_ref_of_config_json

# Nemotron-4 15B: 32 layers, hidden 6144, 48 heads, 8 KV heads, sequence 4096, vocabulary 256000,
# squared ReLU, RoPE, no biases, untied embeddings (Nemotron-4 15B Technical Report, arXiv:2402.16819,
# Sec. 2 and Table 1, as tests/data/large_model_runs.csv row R110 quotes it); ffn 4 x hidden, fixed by
# the report's 12.5B non-embedding parameters (R110's note). HF NemotronConfig's norm is a LayerNorm.
NEMOTRON_15B = ("transformer:hidden=6144,layers=32,heads=48,kv_heads=8,ffn=24576,vocab=256000,seq=4096,"
                "act=relu2,norm=layernorm,name=nemotron-4-15b")
# Gemma 2B: hidden 2048, 18 blocks, 8 heads, 1 KV head (multi-query) of 256, ffn 16384, vocabulary
# 256128 (token_embd [2048, 256128]), GeGLU, RMSNorm, tied head: the tensors the GGUF of gemma:2b lists
# (ollama.com/library/gemma:2b/blobs/c1864a5eb193, metadata and tensor shapes).
GEMMA_2B = ("transformer:hidden=2048,layers=18,heads=8,kv_heads=1,ffn=16384,vocab=256128,seq=8192,act=geglu,"
            "tied=true,name=gemma-2b")
# Qwen2.5-7B: hidden 3584, 28 blocks, 28 heads, 4 KV heads, ffn 18944, vocabulary 152064, q/k/v biases,
# untied (the J41 row of validation/large_model_runs.md's expressibility sweep, Qwen/Qwen2.5-7B's config).
QWEN25_7B = ("transformer:hidden=3584,layers=28,heads=28,kv_heads=4,ffn=18944,vocab=152064,seq=4096,bias=qkv,"
             "name=qwen2.5-7b")


def _hand_count(v, h, layers, *, q, kv, ffn, gated, layernorm, bias="none", tied=False, table=0):
    """Counted by hand, tensor by tensor, apart from the closed form in shapes.py: per block the q,
    k, v and output weights, their biases, the MLP's two or three matrices and biases, two norms."""
    norm = (2 if layernorm else 1) * h
    block = h * q + 2 * h * kv + q * h + 2 * norm
    block += {"none": 0, "qkv": q + 2 * kv, "attn": q + 2 * kv + h, "all": q + 2 * kv + h}[bias]
    block += (3 if gated else 2) * h * ffn
    block += ((2 if gated else 1) * ffn + h) if bias == "all" else 0
    return v * h + table * h + layers * block + norm + (0 if tied else v * h)


FORMS = {
    "nemotron-4-15b": (NEMOTRON_15B, _hand_count(256000, 6144, 32, q=6144, kv=1024, ffn=24576, gated=False,
                                                  layernorm=True)),
    "gemma-2b (MQA, GeGLU, tied)": (GEMMA_2B, _hand_count(256128, 2048, 18, q=2048, kv=256, ffn=16384, gated=True,
                                                          layernorm=False, tied=True)),
    "gemma-7b-like head_dim 256": (
        "transformer:hidden=3072,layers=28,heads=16,head_dim=256,ffn=24576,vocab=256000,seq=8192,act=geglu,tied=true",
        _hand_count(256000, 3072, 28, q=4096, kv=4096, ffn=24576, gated=True, layernorm=False, tied=True)),
    "qwen2.5-7b (qkv biases)": (QWEN25_7B, _hand_count(152064, 3584, 28, q=3584, kv=512, ffn=18944, gated=True,
                                                       layernorm=False, bias="qkv")),
    "gpt-neox-sequential (layernorm, gelu, rope, biases)": (
        "transformer:hidden=512,layers=4,heads=8,vocab=1000,seq=256,act=gelu,norm=layernorm,bias=all",
        _hand_count(1000, 512, 4, q=512, kv=512, ffn=2048, gated=False, layernorm=True, bias="all")),
    "relu, rmsnorm, attention biases": (
        "transformer:hidden=512,layers=4,heads=8,kv_heads=2,ffn=1024,vocab=1000,seq=256,act=relu,bias=attn,tied=true",
        _hand_count(1000, 512, 4, q=512, kv=128, ffn=1024, gated=False, layernorm=False, bias="attn", tied=True)),
    "gelu_new, layernorm, MQA": (
        "transformer:hidden=512,layers=4,heads=8,kv_heads=1,vocab=1000,seq=256,act=gelu_new,norm=layernorm",
        _hand_count(1000, 512, 4, q=512, kv=64, ffn=2048, gated=False, layernorm=True)),
    "gpt-3-like learned positions": (
        "transformer:hidden=512,layers=4,heads=8,vocab=1000,seq=256,act=gelu,norm=layernorm,pos=learned,tied=true,dropout=0",
        _hand_count(1000, 512, 4, q=512, kv=512, ffn=2048, gated=False, layernorm=True, bias="all", tied=True,
                    table=256)),
}


@pytest.mark.parametrize("form", list(FORMS))
def test_each_form_has_its_hand_counted_parameters(form):
    text, count = FORMS[form]
    assert get_model(text).param_count == shape_param_count(parse_shape(text)) == count


def test_nemotron_4_15b_has_the_reported_embedding_and_non_embedding_parameters():
    # arXiv:2402.16819 (row R110's source): 3.2B embedding and 12.5B non-embedding parameters, rounded.
    model = get_model(NEMOTRON_15B)
    embedding = 2 * 256000 * 6144
    assert abs(embedding / 1e9 - 3.2) < 0.06  # 3.146B: the report's "3.2B" is not rounded to nearest
    assert round((model.param_count - embedding) / 1e9, 1) == 12.5


def test_qwen25_7b_has_its_published_count():
    # Qwen/Qwen2.5-7B model card: 7.61B parameters, 6.53B non-embedding (rounded as published).
    count = get_model(QWEN25_7B).param_count
    # 7,615,616,512 and 6,525,621,760: within the card's last digit (it truncates one, rounds the other).
    assert abs(count / 1e9 - 7.61) < 0.01 and abs((count - 2 * 152064 * 3584) / 1e9 - 6.53) < 0.01


def test_the_nemotron_block_is_its_own_not_the_swiglu_stand_in():
    """Squared ReLU runs two matrices of ffn, LayerNorm has biases: the parameters and FLOPs equal
    the SwiGLU stand-in of 2/3 the width (the validation rows' costing), the element-wise work differs."""
    nemotron = get_model(NEMOTRON_15B)
    stand_in = get_model("transformer:hidden=6144,layers=32,heads=48,kv_heads=8,ffn=16384,vocab=256000,seq=4096")
    names = {p.name for p in nemotron.params}
    assert "model.layers.0.mlp.up_proj.weight" in names and "model.layers.0.mlp.gate_proj.weight" not in names
    assert "model.layers.0.input_layernorm.bias" in names and "model.norm.bias" in names
    assert nemotron.forward_flops_per_sample == stand_in.forward_flops_per_sample
    assert nemotron.param_count - stand_in.param_count == 32 * 2 * 6144 + 6144  # the LayerNorm biases


SMALL = {
    "relu2-layernorm-gqa": "transformer:hidden=512,layers=8,heads=8,kv_heads=2,ffn=2048,vocab=1024,seq=1024,act=relu2,"
                           "norm=layernorm",
    "geglu-gqa-head_dim": "transformer:hidden=512,layers=8,heads=8,kv_heads=2,head_dim=128,ffn=1024,vocab=1024,"
                          "seq=1024,act=geglu,tied=true",
    "gelu-rope-biases": "transformer:hidden=512,layers=8,heads=8,vocab=1024,seq=1024,act=gelu,norm=layernorm,bias=all",
    "qkv-bias": "transformer:hidden=512,layers=8,heads=8,kv_heads=4,ffn=1024,vocab=1024,seq=1024,bias=qkv",
}


@pytest.mark.parametrize("layout", [dict(tp=2), dict(pp=2), dict(cp=2), dict(tp=2, pp=2, cp=2),
                                    dict(strategy="fsdp")])
@pytest.mark.parametrize("form", list(SMALL))
def test_each_form_runs_under_every_layout(form, layout):
    p = predict(PredictConfig(model=SMALL[form], gpus=8, gpu="h100", link="infiniband", steps=1, global_batch=8,
                              micro_batch=1, **layout))
    assert p.step_time_s > 0 and p.memory.total_bytes > 0


MQA = "transformer:hidden=512,layers=8,heads=8,kv_heads=1,ffn=1024,vocab=1024,seq=1024,act=geglu,tied=true"


@pytest.mark.parametrize("layout", [dict(pp=2), dict(cp=2), dict(strategy="fsdp")])
def test_multi_query_attention_runs_where_tp_needs_no_split_key_value_head(layout):
    p = predict(PredictConfig(model=MQA, gpus=8, gpu="h100", link="infiniband", steps=1, global_batch=8,
                              micro_batch=1, **layout))
    assert p.step_time_s > 0
    with pytest.raises(DpsimError, match="does not divide .* 1 key-value heads"):
        predict(PredictConfig(model=MQA, gpus=8, gpu="h100", link="infiniband", steps=1, global_batch=8,
                              micro_batch=1, tp=2))


def _write(tmp_path, folder, data):
    (tmp_path / folder).mkdir()
    path = tmp_path / folder / "config.json"
    path.write_text(json.dumps(data))
    return str(path)


def _same(a, b, **layout):
    def run(model):
        return predict(PredictConfig(model=model, gpus=16, gpu="h100", link="infiniband", steps=1, global_batch=16,
                                     micro_batch=1, seq_len=1024, **layout))
    pa, pb = run(a), run(b)
    assert pa.step_time_s == pb.step_time_s and pa.memory.total_bytes == pb.memory.total_bytes


# Each family's config.json with the attribute names transformers' configuration classes use.
NEMOTRON_JSON = {"model_type": "nemotron", "hidden_size": 6144, "intermediate_size": 24576, "num_hidden_layers": 32,
                 "num_attention_heads": 48, "num_key_value_heads": 8, "vocab_size": 256000,
                 "max_position_embeddings": 4096, "hidden_act": "relu2", "tie_word_embeddings": False,
                 "attention_bias": False, "mlp_bias": False, "partial_rotary_factor": 0.5}
GEMMA_JSON = {"model_type": "gemma", "hidden_size": 2048, "intermediate_size": 16384, "num_hidden_layers": 18,
              "num_attention_heads": 8, "num_key_value_heads": 1, "head_dim": 256, "vocab_size": 256128,
              "max_position_embeddings": 8192, "hidden_act": "gelu_pytorch_tanh", "hidden_activation": None}
QWEN2_JSON = {"model_type": "qwen2", "hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
              "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064,
              "max_position_embeddings": 4096, "hidden_act": "silu", "tie_word_embeddings": False}


@pytest.mark.parametrize("folder, data, shape", [
    # The configuration rotates half of each head (partial_rotary_factor 0.5), which the shape then says.
    ("nemotron-4-15b", NEMOTRON_JSON, NEMOTRON_15B + ",rotary_pct=0.5"),
    ("gemma-2b", GEMMA_JSON, GEMMA_2B),
    ("qwen2.5-7b", QWEN2_JSON, QWEN25_7B),
])
def test_a_config_json_is_the_same_model_as_its_shape(tmp_path, folder, data, shape):
    path = _write(tmp_path, folder, data)
    assert shape_ref_of_config_json(path) == parse_shape_ref(shape)
    assert get_model(path).layers == get_model(shape).layers


def parse_shape_ref(text):
    from dpsim.workload.shapes import shape_ref
    return shape_ref(parse_shape(text))


def test_nemotron_by_config_json_and_by_shape_predict_the_same(tmp_path):
    path = _write(tmp_path, "nemotron-4-15b", NEMOTRON_JSON)
    _same(path, NEMOTRON_15B + ",rotary_pct=0.5", tp=4, pp=2, sequence_parallel=True)


MIXTRAL_JSON = {"model_type": "mixtral", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
                "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 32000,
                "max_position_embeddings": 32768, "num_local_experts": 8, "num_experts_per_tok": 2,
                "hidden_act": "silu", "tie_word_embeddings": False}
QWEN3_MOE_JSON = {"model_type": "qwen3_moe", "hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 48,
                  "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "vocab_size": 151936,
                  "max_position_embeddings": 40960, "num_experts": 128, "num_experts_per_tok": 8,
                  "moe_intermediate_size": 768, "hidden_act": "silu", "tie_word_embeddings": False,
                  "decoder_sparse_step": 1, "mlp_only_layers": [], "attention_bias": False}


@pytest.mark.parametrize("folder, data, catalog", [("Mixtral-8x7B-v0.1", MIXTRAL_JSON, "mixtral-8x7b"),
                                                    ("Qwen3-30B-A3B", QWEN3_MOE_JSON, "qwen3-30b-a3b")])
def test_an_moe_config_json_is_the_catalog_model(tmp_path, folder, data, catalog):
    path = _write(tmp_path, folder, data)
    assert get_model(path, seq_len=4096).layers == get_model(catalog).layers
    _same(path, catalog, ep=8, pp=2)


@pytest.mark.parametrize("model_type, extra, says", [
    ("gemma3", {}, "no text_config"),  # Gemma 3 is built from its text_config (tests/test_hf_families.py)
    # Parallel blocks (Falcon, GPT-J, GPT-NeoX's parallel residual) are built now (tests/test_shape_mechanisms.py);
    # Falcon's ALiBi is not.
    ("falcon", {"parallel_attn": True, "alibi": True}, "Falcon's ALiBi"),
    ("cohere", {"hidden_act": "gelu"}, "a field the builders do not cover"),  # Cohere is built (test_hf_families)
    ("deepseek_v3", {"moe_layer_freq": 2}, "moe_layer_freq"),
    ("qwen2_moe", {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 256,
                   "shared_expert_intermediate_size": 512, "mlp_only_layers": [0]},
     "mlp_only_layers"),  # Qwen2-MoE is built (tests/test_hf_families.py), all its blocks expert layers
    ("mamba", {}, "'mamba' is not one dpsim builds"),
])
def test_other_families_are_refused_in_one_line(tmp_path, model_type, extra, says):
    base = {"hidden_size": 512, "intermediate_size": 1024, "num_hidden_layers": 2, "num_attention_heads": 8,
            "vocab_size": 1000, "max_position_embeddings": 256}
    path = _write(tmp_path, model_type, {"model_type": model_type, **base, **extra})
    with pytest.raises(WorkloadError) as err:
        get_model(path)
    text = str(err.value)
    assert model_type in text and says in text and "\n" not in text


def test_a_sequential_gpt_neox_config_is_built(tmp_path):
    data = {"model_type": "gpt_neox", "hidden_size": 512, "intermediate_size": 2048, "num_hidden_layers": 4,
            "num_attention_heads": 8, "vocab_size": 1000, "max_position_embeddings": 256, "hidden_act": "gelu",
            "use_parallel_residual": False, "tie_word_embeddings": False}
    path = _write(tmp_path, "neox", data)
    text, count = FORMS["gpt-neox-sequential (layernorm, gelu, rope, biases)"]
    assert get_model(path).param_count == count
    assert get_model(path).layers == get_model(text).layers


def test_refusals_of_the_new_keys_are_one_line():
    for text, says in [
        ("transformer:hidden=64,layers=2,heads=4,ffn=8,vocab=10,seq=8,act=swish", "act=swish is not valid; allowed: "
                                                                                 "swiglu, geglu, gelu, gelu_new, relu, relu2"),
        ("transformer:hidden=64,layers=2,heads=4,ffn=8,vocab=10,seq=8,norm=batchnorm", "allowed: rmsnorm, layernorm"),
    ]:
        with pytest.raises(DpsimError) as err:
            get_model(text)
        assert says in str(err.value) and "\n" not in str(err.value)
