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
    model = get_model(name)
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
    with pytest.raises(WorkloadError, match="only in the Llama family"):
        parse_shape("transformer:hidden=64,layers=2,heads=4,vocab=100,seq=16,norm=layernorm,act=gelu,pos=learned,"
                    "experts=4,top_k=1,moe_ffn=64")
