"""Models from torchvision and transformers (dpsim/workload/library_models.py), traced on the meta device.

Neither library is installed with dpsim's test extra (torchvision from PyPI does not import
beside the CPU build of torch used here), so these tests run against the stand-ins in
``tests/stubs/`` that mimic the API dpsim uses; the real transformers 5.24.0 was checked by
hand with the same references (VALIDATION.md, "Models from libraries").
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from dpsim.errors import ConfigError, WorkloadError
from dpsim.workload.library_models import LIBRARY_EXTRA, missing_library, parse_call
from dpsim.workload.model_ref import parse_model_ref

STUBS = Path(__file__).resolve().parent / "stubs"


@pytest.fixture
def libraries(monkeypatch):
    """``torchvision`` and ``transformers`` are the stand-ins for the test's duration."""
    pytest.importorskip("torch")
    monkeypatch.syspath_prepend(str(STUBS))
    for name in [m for m in sys.modules if m.split(".")[0] in ("torchvision", "transformers")]:
        monkeypatch.delitem(sys.modules, name)
    from dpsim.workload import from_torch

    monkeypatch.setattr(from_torch, "_CACHE", {})
    yield from_torch.load_torch_workload
    # Popped, not monkeypatch.delitem: undoing that would put the stubs back for later tests
    # (the real packages, if imported before, are restored by the first loop's undo).
    for name in [m for m in sys.modules if m.split(".")[0] in ("torchvision", "transformers")]:
        sys.modules.pop(name)


# ----------------------------------------------------------------- the reference syntax


def test_calls_take_literal_keyword_arguments_only():
    call = parse_call("LlamaConfig(hidden_size=2048, rope_scaling={'type': 'linear', 'factor': 2.0}, tie=True)", "r")
    assert call.name == "LlamaConfig"
    assert call.kwargs == (("hidden_size", 2048), ("rope_scaling", {"type": "linear", "factor": 2.0}), ("tie", True))
    assert parse_call("resnet101", "r").kwargs == ()


@pytest.mark.parametrize("text, words", [
    ("f(1)", "positional"),
    ("f(x=__import__('os'))", "not a literal"),
    ("f(**{'a': 1})", "**"),
    ("a.b(x=1)", "not NAME"),
    ("f(x=", "not NAME"),
    ("f(n_layer=2, n_layer=3)", "given twice"),  # ast accepts it; the last value was used without a word
])
def test_anything_but_literals_is_refused_in_one_line(text, words):
    with pytest.raises(WorkloadError) as e:
        parse_call(text, f"m:{text}")
    assert words in str(e.value) and "\n" not in str(e.value)


def test_transformers_log_lines_are_held_back_while_a_reference_is_built(capfd):
    # LlamaConfig(vocab_size=0) logged two warnings to stderr before dpsim's one-line refusal.
    hf_logging = pytest.importorskip("transformers.utils.logging")
    from dpsim.workload.library_models import quiet_transformers

    before = hf_logging.get_verbosity()
    with quiet_transformers():
        hf_logging.get_logger("transformers.configuration_utils").warning("bos_token_id must be ...")
    assert capfd.readouterr().err == "" and hf_logging.get_verbosity() == before


def test_a_ref_with_a_call_parses_with_its_colons_inside():
    ref = parse_model_ref("transformers:LlamaConfig(rope_scaling={'type': 'x'})", calls=True)
    assert (ref.target, ref.function, ref.kwargs) == ("transformers", "LlamaConfig", (("rope_scaling", {"type": "x"}),))
    # calibrate and validate build a model without arguments: refused there, in one line.
    with pytest.raises(WorkloadError, match="only predict"):
        parse_model_ref("torchvision.models:vit_b_16(image_size=384)")


def test_a_missing_library_names_the_extra(monkeypatch):
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    text = missing_library("torchvision.models")
    assert f"dpsim[{LIBRARY_EXTRA}]" in text and "\n" not in text
    assert missing_library("mypackage.models") is None


# ----------------------------------------------------------------- torchvision


def test_torchvision_builder_traces_with_its_default_image(libraries):
    model = libraries("torchvision.models:resnet18")
    assert model.param_count == 11_689_512  # torchvision's resnet18 (BasicBlock [2, 2, 2, 2], 1000 classes)
    assert len(model.buffers) == 3 * 20  # 20 BatchNorm2d: running_mean, running_var, num_batches_tracked
    assert model.tokens_per_sample is None
    # ~1.82 GFLOPs multiply-adds per 224x224 image in torchvision's table; 2 FLOPs each.
    assert model.forward_flops_per_sample == pytest.approx(2 * 1.814e9, rel=0.01)


def test_torchvision_arguments_and_image_size(libraries):
    small = libraries("torchvision.models:resnet18(num_classes=10)")
    assert small.param_count == 11_689_512 - 990 * 513
    vit = libraries("torchvision.models:vit_tiny(image_size=64)")
    vit224 = libraries("torchvision.models:vit_tiny")
    # Attention and MLP FLOPs grow with the patches: 16 at 64 px, 196 at 224 px.
    assert vit224.forward_flops_per_sample > 10 * vit.forward_flops_per_sample


# ----------------------------------------------------------------- transformers


def test_a_transformers_config_builds_its_lm_with_the_context_length(libraries):
    gpt = libraries("transformers:TinyGPTConfig(n_layer=3, n_positions=12)")
    assert gpt.tokens_per_sample == 12
    d, v = 32, 100
    block = 2 * d + (d * 4 * d + 4 * d) + (4 * d * d + d)
    assert gpt.param_count == v * d + 3 * block + d * v
    assert {l.unit for l in gpt.layers if l.unit} == {"h.0", "h.1", "h.2"}


def test_an_encoder_config_gets_the_masked_lm_and_its_buffers(libraries):
    bert = libraries("transformers:TinyBertConfig()")
    assert bert.tokens_per_sample == 24
    assert [b.name for b in bert.buffers] == ["position_ids"] and bert.buffers[0].dtype == "int64"


def test_a_model_class_is_built_from_its_config_class(libraries):
    by_class = libraries("transformers:TinyGPTForCausalLM(n_layer=1)", input_shape="2,8:int64")
    by_config = libraries("transformers:TinyGPTConfig(n_layer=1)", input_shape="2,8:int64")
    assert by_class.param_count == by_config.param_count and by_class.tokens_per_sample == 8


def test_a_config_without_a_model_or_a_length_is_one_line(libraries):
    with pytest.raises(WorkloadError, match="no causal-LM, masked-LM or base model"):
        libraries("transformers:NoLengthConfig()")
    with pytest.raises(WorkloadError, match="failed on the meta device"):
        libraries("transformers:TinyGPTConfig(n_layer='x')")


@pytest.mark.parametrize("ref, needle", [
    ("transformers:TinyGPTConfig(n_layers=3)", "TinyGPTConfig() has no setting 'n_layers' (did you mean n_layer?)"),
    ("transformers:TinyGPTForCausalLM(n_layers=1)", "TinyGPTForCausalLM() has no setting 'n_layers'"),
    ("transformers:LlamaConfig(num_hidden_layer=2)", "LlamaConfig() has no setting 'num_hidden_layer'"),
])
def test_a_misspelt_config_setting_is_refused(libraries, ref, needle):
    # A transformers configuration keeps any keyword as an attribute: the misspelt setting was
    # dropped in silence and the default model (32 layers for Llama) predicted.
    from dpsim.workload.library_models import lowered_shape_ref

    lowered_shape_ref.cache_clear()
    with pytest.raises(WorkloadError) as exc:
        libraries(ref)
    assert needle in str(exc.value) and "\n" not in str(exc.value)


@pytest.mark.parametrize("ref, needle", [
    ("transformers:TinyGPTConfig(n_layer=100000)", "TinyGPTConfig() has n_layer=100,000; expected at most 1,024 blocks"),
    ("transformers:TinyGPTForCausalLM(n_layer=5000)", "TinyGPTForCausalLM() has n_layer=5,000; expected at most 1,024"),
    # fuzz6: DeepseekV3Config(num_hidden_layers=0) predicted its embedding and head alone.
    ("transformers:TinyGPTConfig(n_layer=0)", "TinyGPTConfig() has n_layer=0; expected 1 to 1,024 blocks"),
    ("transformers:TinyGPTForCausalLM(n_layer=-2)", "TinyGPTForCausalLM() has n_layer=-2; expected 1 to 1,024 blocks"),
])
def test_a_config_deeper_than_the_layer_limit_is_refused_before_it_is_built(libraries, ref, needle, monkeypatch):
    """fuzz5: num_hidden_layers=100000 constructed modules on the meta device for minutes (until the
    300-s load limit); now refused before the model is built."""
    import transformers

    def never(*args, **kwargs):
        raise AssertionError("the model was built")

    monkeypatch.setattr(transformers.TinyGPTForCausalLM, "__init__", never)
    with pytest.raises(WorkloadError) as exc:
        libraries(ref)
    assert needle in str(exc.value) and "\n" not in str(exc.value)


def test_predict_runs_a_library_model(libraries):
    from dpsim.predict import PredictConfig, predict

    p = predict(PredictConfig(gpus=8, link="nvlink", model="transformers:TinyGPTConfig(n_layer=2)", micro_batch=2))
    assert p.model == "transformers:TinyGPTConfig(n_layer=2)" and p.tokens_per_sample == 16
    assert p.step_time_s > 0 and p.n_buckets >= 1


def test_a_llama_config_is_lowered_to_its_shape_under_every_layout(libraries):
    """Not traced (the stand-in LlamaConfig has no model behind it): built from its shape, so it
    predicts what the same shape and the catalog's llama-2-7b predict, under --tp/--pp too."""
    from dpsim.predict import PredictConfig, predict
    from dpsim.workload.library_models import lowered_shape_ref

    lowered_shape_ref.cache_clear()
    ref = "transformers:LlamaConfig(max_position_embeddings=4096)"
    for layout in (dict(strategy="fsdp"), dict(tp=2, pp=2)):
        def run(model):
            return predict(PredictConfig(model=model, gpus=16, gpu="h100", link="infiniband", steps=1, **layout))
        assert run(ref).step_time_s == run("llama-2-7b").step_time_s
    # A configuration without a shape stays traced, and takes --pp over its blocks but not --tp.
    traced = "transformers:TinyGPTConfig(n_layer=4)"
    assert lowered_shape_ref(traced) is None
    p = predict(PredictConfig(model=traced, gpus=4, pp=2, link="nvlink", steps=1, micro_batch=1, global_batch=8))
    assert len(p.layout.stages) == 2
    with pytest.raises(ConfigError, match="is traced"):
        predict(PredictConfig(model=traced, gpus=4, tp=2, link="nvlink", steps=1))


@pytest.mark.parametrize("positions", [0, 10_000_000])
def test_a_traced_config_context_outside_the_sequence_limit_is_refused(libraries, positions):
    """fuzz6: a traced configuration's context length is its example's sequence: DeepseekV3Config(
    max_position_embeddings=10000000) traced a 10-million-token sample (a 5-day step, exit 0), =0 failed
    inside the forward ("cannot reshape tensor of 0 elements"); a configuration read as a shape refuses both."""
    with pytest.raises(WorkloadError) as exc:
        libraries(f"transformers:TinyGPTConfig(n_positions={positions})")
    assert f"n_positions={positions:,} sets the example's sequence, which must be 1 to 1,048,576 tokens" \
        in str(exc.value) and "\n" not in str(exc.value)
