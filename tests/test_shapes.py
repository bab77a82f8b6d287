"""A transformer given by its shape (``--model transformer:...``, dpsim/workload/shapes.py): the same
model as the catalog entry of that shape under every layout, parameter counts against published
ones and an independent closed form, a transformers configuration read by its attribute names,
pipeline stages of a traced stack of blocks, and one-line refusals."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from dpsim.errors import ConfigError, DpsimError, WorkloadError
from dpsim.predict.config import PredictConfig
from dpsim.predict.layout import layout_of
from dpsim.predict.run import load_model, predict
from dpsim.strategies.layout import stage_assignment
from dpsim.strategies.tensor import tp_model
from dpsim.workload.catalog import get_model
from dpsim.workload.shapes import parse_shape, shape_of_hf_config, shape_param_count, shape_ref

LLAMA_2_7B = "transformer:hidden=4096,layers=32,heads=32,ffn=11008,vocab=32000,seq=4096"
GPT2 = "transformer:hidden=768,layers=12,heads=12,vocab=50257,seq=1024,act=gelu_new,norm=layernorm,pos=learned,tied=true"
# bigscience/bloom config.json on the Hugging Face Hub (n_embed 14336, n_layer 70,
# num_attention_heads 112, vocab_size 250880; BloomForCausalLM: ALiBi, word_embeddings_layernorm,
# hidden_dropout 0.0; tied head, 4h GELU MLP); sequence length 2048 from the bigscience/bloom model card.
BLOOM_176B = ("transformer:hidden=14336,layers=70,heads=112,vocab=250880,seq=2048,act=gelu,norm=layernorm,"
              "pos=alibi,tied=true,embed_norm=true,dropout=0,name=bloom-176b")
# OPT-175B: 96 layers, width 12288, 96 heads, FFN 4 x width from metaseq's
# metaseq/launcher/opt_job_constants.py (MODEL_SIZES["175b"]); vocab 50272, context 2048 (+2 rows
# of OPTLearnedPositionalEmbedding), ReLU, dropout 0.1, tied head from the facebook/opt-* config.json files on
# the Hugging Face Hub (OPT-175B's own weights are not on the Hub).
OPT_175B = ("transformer:hidden=12288,layers=96,heads=96,vocab=50272,seq=2048,positions=2050,act=relu,"
            "norm=layernorm,pos=learned,tied=true,name=opt-175b")


def _independent_gpt_count(v: int, h: int, layers: int, *, table: int = 0, embed_norm: bool = False) -> int:
    """A tied, biased, 4h-MLP layernorm decoder counted by hand: per block QKV 3h²+3h, output
    h²+h, MLP 8h²+5h, two norms 4h; then the embedding, a learned table, the final norm."""
    return v * h + table * h + layers * (12 * h * h + 13 * h) + 2 * h + (2 * h if embed_norm else 0)


# ------------------------------------------------------------------ the same model as the catalog's


@pytest.mark.parametrize("shape, name", [(LLAMA_2_7B, "llama-2-7b"), (GPT2, "gpt2")])
def test_a_catalog_shape_builds_the_catalog_layers(shape, name):
    assert get_model(shape).layers == get_model(name).layers
    assert shape_param_count(parse_shape(shape)) == get_model(name).published_param_count


@pytest.mark.parametrize("layout", [dict(strategy="ddp"), dict(strategy="fsdp"), dict(tp=2, pp=2)])
def test_a_shape_predicts_what_its_catalog_entry_predicts(layout):
    def run(model):
        return predict(PredictConfig(model=model, gpus=16, gpu="h100", link="infiniband", steps=1, **layout))
    shaped, catalog = run(LLAMA_2_7B), run("llama-2-7b")
    assert shaped.step_time_s == catalog.step_time_s
    assert shaped.memory.total_bytes == catalog.memory.total_bytes


# ------------------------------------------------------------------ parameter counts


def test_bloom_176b_has_its_published_count():
    shape = parse_shape(BLOOM_176B)
    count = 176_247_271_424  # bigscience/bloom model card: "176,247,271,424 parameters"
    assert get_model(BLOOM_176B).param_count == shape_param_count(shape) == count
    assert count == _independent_gpt_count(250880, 14336, 70, embed_norm=True)


def test_opt_175b_has_its_published_count():
    shape = parse_shape(OPT_175B)
    count = get_model(OPT_175B).param_count
    assert count == shape_param_count(shape) == _independent_gpt_count(50272, 12288, 96, table=2050)
    assert round(count / 1e9) == 175  # "OPT-175B" (facebook/opt model cards)


@pytest.mark.parametrize("shape", [LLAMA_2_7B, GPT2, BLOOM_176B, OPT_175B,
                                   "transformer:hidden=512,layers=6,heads=8,kv_heads=2,ffn=1408,vocab=1000,seq=256,tied=true"])
def test_the_closed_form_equals_the_built_model(shape):
    assert shape_param_count(parse_shape(shape)) == get_model(shape).param_count


@pytest.mark.parametrize("tp, pp", [(1, 2), (1, 5), (2, 7), (4, 10)])
def test_stage_parameters_sum_to_the_whole(tp, pp):
    config = PredictConfig(model=BLOOM_176B, gpus=tp * pp, tp=tp, pp=pp,
                           global_batch=4 * pp, micro_batch=1, link="infiniband", steps=1)
    model = load_model(config)
    tpm = tp_model(model, tp)
    stages = stage_assignment(tpm, layout_of(config))
    per_stage = [sum(tpm.layers[i].numel_per_rank for chunk in stage for i in chunk) for stage in stages]
    assert sum(per_stage) == sum(layer.numel_per_rank for layer in tpm.layers)
    if tp == 1:
        assert sum(per_stage) == model.param_count
    assert sorted(i for stage in stages for chunk in stage for i in chunk) == list(range(len(model.layers)))


def test_bloom_176b_runs_under_a_layout():
    p = predict(PredictConfig(model=BLOOM_176B, gpus=160, tp=8, pp=10, global_batch=80, micro_batch=1,
                              gpu="h100", link="infiniband", recompute="full", precision="bf16-mixed", steps=1))
    assert len(p.layout.stages) == 10 and p.layout.embedding_grad_bytes > 0  # tied head on the last stage
    assert p.step_time_s > 0 and p.memory.fits


# ------------------------------------------------------------------ transformers configurations


def _cfg(model_type, **attrs):
    return SimpleNamespace(model_type=model_type, **attrs)


def test_a_llama_config_is_the_catalog_llama():
    cfg = _cfg("llama", vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
               num_attention_heads=32, num_key_value_heads=32, hidden_act="silu", max_position_embeddings=4096,
               tie_word_embeddings=False, head_dim=128)
    assert get_model(shape_ref(shape_of_hf_config(cfg, name="llama"))).layers == get_model("llama-2-7b").layers


def test_bloom_and_opt_configs_read_their_attribute_names():
    # The attribute names of bigscience/bloom's config.json and of transformers' OPTConfig.
    bloom = _cfg("bloom", n_embed=14336, n_layer=70, num_attention_heads=112, vocab_size=250880, hidden_dropout=0.0)
    assert shape_ref(shape_of_hf_config(bloom, name="bloom-176b")) == shape_ref(parse_shape(BLOOM_176B))
    opt = _cfg("opt", hidden_size=12288, num_hidden_layers=96, num_attention_heads=96, ffn_dim=49152,
               vocab_size=50272, max_position_embeddings=2048, word_embed_proj_dim=12288, do_layer_norm_before=True,
               activation_function="relu", tie_word_embeddings=True, dropout=0.1)
    assert shape_ref(shape_of_hf_config(opt, name="opt-175b")) == shape_ref(parse_shape(OPT_175B))
    gpt2 = _cfg("gpt2", vocab_size=50257, n_positions=1024, n_embd=768, n_layer=12, n_head=12, n_inner=None,
                activation_function="gelu_new", resid_pdrop=0.1)
    assert get_model(shape_ref(shape_of_hf_config(gpt2, name="gpt2"))).layers == get_model("gpt2").layers


@pytest.mark.parametrize("cfg", [
    _cfg("falcon", hidden_size=4544, num_hidden_layers=32),  # a family the builders do not have
    _cfg("opt", hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, ffn_dim=4096, vocab_size=50272,
         max_position_embeddings=2048, word_embed_proj_dim=512, do_layer_norm_before=False,
         activation_function="relu"),  # OPT-350m: project_in/out and post-norm
    _cfg("llama", hidden_size=4096, num_attention_heads=32, head_dim=256, hidden_act="silu"),
    _cfg("llama"),  # attributes missing
])
def test_other_configs_are_left_to_tracing(cfg):
    assert shape_of_hf_config(cfg, name="x") is None


# ------------------------------------------------------------------ a traced stack of blocks


BLOCKS = '''
import torch
from torch import nn

class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.ln, self.fc, self.proj = nn.LayerNorm(d), nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        return x + self.proj(torch.relu(self.fc(self.ln(x))))

class Net(nn.Module):
    def __init__(self, d=64, n=8):
        super().__init__()
        self.emb, self.head = nn.Embedding(100, d), nn.Linear(d, 100)
        self.h = nn.ModuleList(Block(d) for _ in range(n))

    def forward(self, x):
        x = self.emb(x)
        for block in self.h:
            x = block(x)
        return self.head(x)

def build():
    return Net()

def flat():
    return nn.Linear(64, 64)

def example_input():
    return torch.zeros((2, 32), dtype=torch.int64)
'''


def test_a_traced_stack_of_blocks_is_split_into_stages(tmp_path):
    pytest.importorskip("torch")
    path = tmp_path / "blocks.py"
    path.write_text(BLOCKS)
    p = predict(PredictConfig(model=f"{path}:build", gpus=8, pp=4, link="nvlink", steps=1, micro_batch=1,
                              global_batch=16))
    assert [s.blocks for s in p.layout.stages] == [2, 2, 2, 2]
    with pytest.raises(ConfigError, match="--tp: 2 splits the layers of a known transformer block"):
        PredictConfig(model=f"{path}:build", gpus=8, tp=2)
    with pytest.raises(ConfigError, match="found none"):
        predict(PredictConfig(model=f"{path}:flat", gpus=8, pp=2, link="nvlink", steps=1,
                              input_shape="2,64"))


# ------------------------------------------------------------------ one-line refusals


@pytest.mark.parametrize("text, needle", [
    ("transformer:hidden=4096,layers=32,heads=33,ffn=1,vocab=10,seq=8", "heads=33 is not valid; it must divide hidden=4096"),
    ("transformer:hidden=4096,layers=32,heads=32,kv_heads=5,ffn=1,vocab=10,seq=8", "kv_heads=5 is not valid; it must divide heads=32"),
    ("transformer:hidden=4096,layers=32,heads=32,vocab=10,seq=8", "ffn missing"),
    ("transformer:hidden=4096,layers=32", "heads, vocab, seq missing"),
    ("transformer:hidden=4096,layers=0,heads=32,ffn=1,vocab=10,seq=8", "layers=0 is not valid"),
    ("transformer:hidden=4096,layers=2.5,heads=32,ffn=1,vocab=10,seq=8", "layers=2.5 is not valid"),
    # 2^31 blocks were accepted, then costed one by one: the prediction never ended.
    ("transformer:hidden=64,layers=2147483648,heads=4,ffn=1,vocab=10,seq=8", "layers=2147483648 is not valid; "
                                                                              "expected at most 1,024 blocks"),
    ("transformer:hidden=64,layers=2,heads=4,ffn=1,vocab=10,seq=8,act=tanh", "act=tanh is not valid; allowed: swiglu"),
    # A gelu MLP with rmsnorm and RoPE is now a modelled block (the Llama builder); learned positions
    # with RMSNorm or a gated MLP are not (the GPT-2 builder's blocks are LayerNorm, two-matrix MLPs).
    ("transformer:hidden=64,layers=2,heads=4,vocab=10,seq=8,act=gelu,norm=rmsnorm,pos=learned", "not a modelled block"),
    ("transformer:hidden=64,layers=2,heads=4,ffn=8,vocab=10,seq=8,norm=layernorm,pos=alibi", "not a modelled block"),
    ("transformer:hidden=64,layers=2,heads=4,vocab=10,seq=8,act=relu2,norm=layernorm,pos=learned",
     "not a modelled block"),
    ("transformer:hidden=64,layers=2,heads=4,vocab=10,seq=8,act=gelu,norm=layernorm,pos=learned,bias=none",
     "bias=none is not valid; blocks with learned or ALiBi positions"),
    ("transformer:hidden=64,layers=2,heads=4,ffn=8,vocab=10,seq=8,bias=some", "bias=some is not valid; allowed: none, qkv"),
    ("transformer:hidden=64,layers=2,heads=4,vocab=10,seq=8,act=geglu", "ffn missing; act=geglu needs the MLP width"),
    ("transformer:hidden=64,layers=2,heads=4,ffn=8,vocab=10,seq=8,norm=layernorm,dropout=0.1",
     "pos=rope blocks have no dropout"),
    ("transformer:hidden=64,layers=2,heads=4,ffn=8,vocab=10,seq=8,norm=layernorm,experts=4,top_k=1,moe_ffn=8",
     "norm=layernorm is not valid; expert layers are built with norm=rmsnorm"),
    ("transformer:hidden=64,layers=2,heads=4,ffn=8,vocab=10,seq=8,bias=all,experts=4,top_k=1,moe_ffn=8",
     "bias=all is not valid; expert MLPs have no biases"),
    ("transformer:hidden=64,layers=2,heads=4,ffn=8,vocab=10,seq=8,embed_norm=true,norm=layernorm",
     "embed_norm=true is not valid"),
    ("transformer:hidden=64,layers=2,heads=4,vocab=10,seq=8,act=gelu,norm=layernorm,pos=learned,positions=4",
     "positions=4 is not valid"),
    ("transformer:hidden=64,layers=2,heads=4,kv_heads=2,vocab=10,seq=8,act=gelu,norm=layernorm,pos=alibi",
     "kv_heads=2 is not valid"),
    ("transformer:hidden=64,layers=2,heads=4,ffn=1,vocab=10,seq=8,tied=maybe", "tied=maybe is not valid; allowed: true, false"),
    ("transformer:hidden=64,hidden=32", "hidden is given twice"),
    ("transformer:width=64", "'width' is not a shape key"),
    ("transformer:hidden=64,layers=2,heads=4,ffn=1,vocab=10,seq=8,dropout=0.1", "rmsnorm (Llama) blocks have no dropout"),
    ("transformer:hidden=64,layers=2,heads=4,vocab=10,seq=8,act=gelu,norm=layernorm,pos=alibi,dropout=1",
     "dropout=1 is not valid"),
    ("transformer:LlamaConfig()", "transformers:LlamaConfig(...)"),
    # The name went raw into every table's title: a newline split it, an escape sequence coloured the terminal.
    ("transformer:hidden=64,layers=2,heads=4,ffn=1,vocab=10,seq=8,name=a\nb", "name='a\\nb' is not valid"),
    ("transformer:hidden=64,layers=2,heads=4,ffn=1,vocab=10,seq=8,name=\x1b[31mred", "expected printable text"),
])
def test_bad_shapes_are_refused_in_one_line(text, needle):
    with pytest.raises(DpsimError) as exc:
        get_model(text)
    assert needle in str(exc.value) and "\n" not in str(exc.value)


def test_a_tp_that_does_not_divide_the_shape_heads_is_refused():
    with pytest.raises(ConfigError, match="does not divide"):
        predict(PredictConfig(model=BLOOM_176B, gpus=48, tp=3, pp=2, link="infiniband", steps=1,
                              global_batch=16, micro_batch=1))


def test_seq_len_is_bounded_by_a_learned_table_only():
    assert get_model(BLOOM_176B, seq_len=8192).tokens_per_sample == 8192  # ALiBi: no table
    with pytest.raises(DpsimError, match="exceeds"):
        get_model(OPT_175B, seq_len=4096)
    assert get_model(OPT_175B, seq_len=2050).tokens_per_sample == 2050


def test_a_transformers_config_deeper_than_the_limit_is_refused():
    # GPT2Config(n_layer=100000) ran for minutes (each block costed one by one) before this limit.
    cfg = _cfg("gpt2", n_embd=64, n_layer=100_000, n_head=4, n_inner=None, vocab_size=10, n_positions=8,
               activation_function="gelu_new", resid_pdrop=0.1)
    with pytest.raises(WorkloadError, match="n_layer=100000 is not valid; expected at most 1,024 blocks"):
        shape_of_hf_config(cfg, name="deep")


@pytest.mark.parametrize("model_type,attrs,message", [
    ("gpt2", dict(n_layer=0), "n_layer=0 is not valid; expected an integer from 1"),
    ("gpt2", dict(n_head=0), "n_head=0 is not valid"),  # was a ZeroDivisionError traceback
    ("gpt2", dict(n_layer=5000), "n_layer=5000 is not valid; expected at most 1,024 blocks"),
    ("gpt2", dict(n_embd=770), "n_head=12 is not valid; it must divide n_embd=770"),
    ("llama", dict(num_key_value_heads=5), "num_key_value_heads=5 is not valid; it must divide num_attention_heads=32"),
    # Qwen2Config divides by nothing: dpsim's own hidden // heads was a ZeroDivisionError traceback.
    ("qwen2", dict(num_attention_heads=0), "num_attention_heads=0 is not valid; expected an integer from 1"),
    # 0 used to read as "left out" (x or default): multi-head attention, an MLP of 4 x hidden.
    ("llama", dict(num_key_value_heads=0), "num_key_value_heads=0 is not valid; expected an integer from 1"),
    ("gpt2", dict(n_inner=0), "n_inner=0 is not valid; expected an integer from 1"),
    # A dropout out of range was blamed on the shape key (--model transformer: dropout=2.0).
    ("gpt2", dict(resid_pdrop=2.0), "resid_pdrop=2.0 is not valid; expected a probability"),
    ("gpt2", dict(resid_pdrop=float("nan")), "resid_pdrop=nan is not valid; expected a probability"),
])
def test_a_config_is_refused_by_its_own_attribute_names(model_type, attrs, message):
    base = {"gpt2": dict(vocab_size=50257, n_positions=1024, n_embd=768, n_layer=12, n_head=12, n_inner=None,
                         activation_function="gelu_new", resid_pdrop=0.1),
            "llama": dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                          num_attention_heads=32, num_key_value_heads=32, hidden_act="silu",
                          max_position_embeddings=4096, tie_word_embeddings=False, head_dim=None)}
    base["qwen2"] = base["llama"]
    base = base[model_type]
    with pytest.raises(WorkloadError) as err:
        shape_of_hf_config(_cfg(model_type, **{**base, **attrs}), name="Cfg(...)")
    text = str(err.value)
    assert text.startswith("--model transformers:Cfg(...): ") and message in text and "\n" not in text
    assert "layers=" not in text and "head_dim=" not in text


def test_a_shape_sequence_past_the_seq_len_limit_is_refused():
    """fuzz5: --seq-len stops at MAX_SEQ_LEN, a shape's own seq= did not (seq=10000000 predicted a
    24-day step at an MFU of 96 %); a shorter --seq-len still runs the same shape."""
    from dpsim.limits import MAX_SEQ_LEN

    ref = f"transformer:hidden=256,layers=2,heads=4,ffn=512,vocab=1000,seq={MAX_SEQ_LEN + 1},name=long"
    with pytest.raises(WorkloadError, match=rf"^--model long: its sequence of {MAX_SEQ_LEN + 1:,} tokens .* is over "
                                            rf"{MAX_SEQ_LEN:,}; give a shorter one: --seq-len"):
        get_model(ref)
    assert get_model(ref, seq_len=4096).tokens_per_sample == 4096
    assert get_model(ref.replace(str(MAX_SEQ_LEN + 1), str(MAX_SEQ_LEN))).tokens_per_sample == MAX_SEQ_LEN


def test_a_transformers_config_json_file_is_built_from_its_shape(tmp_path):
    """`--model path/config.json` (the file a model repository ships) reads as the equivalent
    `transformers:LlamaConfig(...)`, without transformers: Llama-3-8B's config gives the catalog's
    model to the parameter, named after its folder; `--seq-len` overrides its context length; a
    family the builders do not cover, a missing file and a non-object are one-line errors (modernjobs)."""
    import json

    from dpsim.errors import WorkloadError
    from dpsim.workload.catalog import get_model

    folder = tmp_path / "Meta-Llama-3-8B"
    folder.mkdir()
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
              "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
              "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 8192,
              "rope_theta": 500000.0, "tie_word_embeddings": False, "hidden_act": "silu",
              "torch_dtype": "bfloat16", "transformers_version": "4.40.0.dev0"}
    (folder / "config.json").write_text(json.dumps(config))
    path = str(folder / "config.json")
    model = get_model(path)
    catalog = get_model("llama-3-8b")
    assert model.name == "Meta-Llama-3-8B"
    assert model.param_count == catalog.param_count == 8_030_261_248
    assert model.forward_flops_per_sample == catalog.forward_flops_per_sample
    assert get_model(path, seq_len=2048).tokens_per_sample == 2048
    (tmp_path / "moe.json").write_text(json.dumps({"model_type": "qwen3_moe", "hidden_size": 2048}))
    (tmp_path / "list.json").write_text("[1, 2]")
    for bad, says in (("moe.json", "qwen3_moe"), ("missing.json", "does not exist"), ("list.json", "list")):
        with pytest.raises(WorkloadError, match=says):
            get_model(str(tmp_path / bad))
