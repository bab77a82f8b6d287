"""Precision semantics: each name is a framework setting, with that setting's bytes, reduce dtype and compute.

Invariants (bytes per parameter, what DDP/FSDP communicate) and the framework facts they
encode: torch.autocast keeps fp32 parameters and gradients, so plain DDP all-reduces fp32;
FSDP MixedPrecision(param_dtype=bf16) reduces in bf16 (reduce_dtype defaults to
param_dtype); PyTorch's default float32 matmul is not TF32.
"""

from __future__ import annotations

import typing

import pytest

from dpsim.errors import ConfigError
from dpsim.hardware import get_gpu
from dpsim.memory import memory_breakdown
from dpsim.predict import PredictConfig, predict
from dpsim.predict.config import Precision as PrecisionLiteral
from dpsim.workload.catalog import get_model
from dpsim.workload.precision import (
    DEFAULT_PRECISION,
    PRECISION_ALIASES,
    PRECISIONS,
    check_precision_on_gpu,
    get_precision,
    optimizer_state_bytes_per_param,
    optimizer_traffic_bytes_per_param,
)
from dpsim.workload.spec import LayerSpec, ModelSpec, ParamSpec

H100 = get_gpu("h100")


def flat(n: int) -> ModelSpec:
    return ModelSpec(name="flat", layers=(LayerSpec(name="l", params=(ParamSpec(name="w", shape=(n,)),),
                                                    forward_flops_per_sample=2.0 * n),))


def test_the_default_is_plain_ddp_with_autocast_bf16():
    assert DEFAULT_PRECISION == "amp-bf16"
    assert PredictConfig().execution.precision == DEFAULT_PRECISION
    amp = get_precision("amp-bf16")
    assert amp.autocast and amp.weight_bytes == 4 and amp.grad_dtype == "float32" and amp.matmul_dtype == "bfloat16"


def test_literal_lists_every_precision_then_the_aliases():
    assert typing.get_args(PrecisionLiteral) == tuple(PRECISIONS) + tuple(PRECISION_ALIASES)


@pytest.mark.parametrize("name, weights, grads, optimizer, grad_dtype", [
    ("fp32", 4, 4, 8, "float32"),
    ("tf32", 4, 4, 8, "float32"),
    ("amp-bf16", 4, 4, 8, "float32"),  # autocast: fp32 params, grads and Adam moments
    ("amp-fp16", 4, 4, 8, "float32"),
    ("bf16-params", 2, 2, 12, "bfloat16"),  # ZeRO paper: 2 + 2 + 12
    ("fp16-params", 2, 2, 12, "float16"),
    ("bf16-true", 2, 2, 4, "bfloat16"),  # the seed's 8 B/param
])
def test_bytes_per_parameter_with_adam(name, weights, grads, optimizer, grad_dtype):
    p = get_precision(name)
    assert (p.weight_bytes, p.grad_bytes, optimizer_state_bytes_per_param(p, "adamw"), p.grad_dtype) == (
        weights, grads, optimizer, grad_dtype)
    m = memory_breakdown(flat(1_000_000), H100, precision=p, optimizer="adamw", micro_batch=1)
    assert m.model_state_bytes == (weights + grads + optimizer) * 1_000_000


@pytest.mark.parametrize("old, new", sorted(PRECISION_ALIASES.items()))
def test_old_names_keep_their_old_meaning(old, new):
    assert get_precision(old) is PRECISIONS[new]


def test_old_bf16_mixed_meant_16_bit_gradients():
    # dpsim's old default: bf16 params and grads with an fp32 master (now bf16-params).
    assert get_precision("bf16-mixed").grad_bytes == 2 and get_precision("bf16-mixed").master_bytes == 4


def test_unknown_precision_is_one_line_naming_the_choices():
    with pytest.raises(ConfigError) as err:
        get_precision("fp8")
    assert "\n" not in str(err.value) and "amp-bf16" in str(err.value) and "'fp8'" in str(err.value)


def test_fp32_matmuls_are_full_precision_but_convolutions_use_tf32():
    fp32, tf32 = get_precision("fp32"), get_precision("tf32")
    assert fp32.matmul_dtype == "float32-highest" and fp32.conv_dtype == "float32"
    assert tf32.matmul_dtype == "float32" and tf32.conv_dtype == "float32"


@pytest.mark.parametrize("gpu", ["v100", "t4", "rtx2080ti", "p100"])
def test_bf16_refused_where_there_are_no_bf16_tensor_cores(gpu):
    g = get_gpu(gpu)
    for name in ("amp-bf16", "bf16-params", "bf16-true"):
        with pytest.raises(ConfigError) as err:
            check_precision_on_gpu(get_precision(name), g)
        assert str(err.value).startswith("--precision: ") and "amp-fp16" in str(err.value)
    for name in ("fp32", "tf32", "amp-fp16", "fp16-params"):
        check_precision_on_gpu(get_precision(name), g)


@pytest.mark.parametrize("name, optimizer, expected", [
    ("fp32", "adamw", 80.0),  # _multi_tensor_adam with decoupled weight decay: 4p + 14s + 2g
    ("fp32", "adam", 72.0),
    ("fp32", "sgd-momentum", 32.0),
    ("fp32", "sgd", 12.0),
    ("amp-bf16", "adamw", 80.0),  # autocast changes nothing in the optimizer
    ("amp-fp16", "adamw", 88.0),  # + GradScaler's unscale (read and write the grads)
    ("bf16-true", "adamw", 40.0),  # the same kernels on 2-byte tensors
    # fused on the fp32 master: copy g16 into fp32 (6), rw master, read g32, rw m, v (28), copy
    # the master into the 16-bit weights (6); fp16 unscales and checks overflow in the first copy
    ("bf16-params", "adamw", 40.0),
    ("fp16-params", "adamw", 40.0),
    ("bf16-fp32-grads", "adamw", 34.0),  # fp32 gradients already: no first copy
])
def test_optimizer_bytes_are_torchs_foreach_kernels(name, optimizer, expected):
    assert optimizer_traffic_bytes_per_param(get_precision(name), optimizer) == expected


def test_fused_optimizer_is_one_pass():
    assert optimizer_traffic_bytes_per_param(get_precision("fp32"), "adamw", fused=True) == 28.0
    assert optimizer_traffic_bytes_per_param(get_precision("fp32"), "adamw", fused=False) == 80.0


def test_ddp_with_autocast_all_reduces_fp32_gradients():
    base = dict(gpus=16, link="infiniband", model="gpt2", steps=1)
    amp = predict(PredictConfig(**base, precision="amp-bf16"))
    params = predict(PredictConfig(**base, precision="bf16-params"))
    assert amp.gradient_bytes == 4 * amp.param_count
    assert params.gradient_bytes == 2 * params.param_count
    assert amp.comm_s > params.comm_s


def test_fsdp_communicates_in_the_parameter_dtype():
    # FSDP without MixedPrecision (autocast only): fp32 all-gathers and reduce-scatters;
    # MixedPrecision(param_dtype=bf16): both in bf16 (reduce_dtype defaults to param_dtype).
    base = dict(gpus=16, link="infiniband", model="gpt2", strategy="fsdp", steps=1)
    amp = predict(PredictConfig(**base, precision="amp-bf16")).comm_bytes_by_op
    mp = predict(PredictConfig(**base, precision="bf16-params")).comm_bytes_by_op
    for op in ("all_gather", "reduce_scatter"):
        assert amp[op] == pytest.approx(2 * mp[op])


def test_autocast_memory_follows_the_fp32_parameters():
    model = get_model("gpt2")
    kw = dict(optimizer="adamw", micro_batch=1, strategy="ddp")
    amp = memory_breakdown(model, H100, precision=get_precision("amp-bf16"), **kw)
    mixed = memory_breakdown(model, H100, precision=get_precision("bf16-params"), **kw)
    assert amp.weights_bytes == 2 * mixed.weights_bytes
    assert amp.gradients_bytes == 2 * mixed.gradients_bytes
    assert amp.model_state_bytes == mixed.model_state_bytes  # 16 B/param both ways
    # DDP's bucket copies hold gradients in their dtype.
    assert amp.comm_buffers_bytes == 2 * mixed.comm_buffers_bytes
