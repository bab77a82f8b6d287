"""``--attention-kernel``: the fused attention kernel a run calls, the same costing the validation
rows use (llm-foundry's Triton kernel, flash-attn 1.x for InternLM, cuDNN for TransformerEngine)."""

from __future__ import annotations

import pytest

from dpsim.errors import ConfigError
from dpsim.predict.config import PredictConfig
from dpsim.predict.run import load_model, predict
from dpsim.workload.layers import with_attention_kernel
from dpsim.workload.spec import AttentionOp

BASE = dict(model="llama-2-7b", gpus=8, link="infiniband", micro_batch=1)


def _attention_ops(model):
    return [op for layer in model.layers for op in layer.ops if isinstance(op, AttentionOp)]


def test_the_kernel_reaches_every_fused_attention_op_and_only_the_time_moves():
    base = predict(PredictConfig(**BASE))
    times = {}
    for kernel in ("sdpa", "triton", "flash1", "flash3", "cudnn"):
        config = PredictConfig(**BASE, attention_kernel=kernel)
        ops = _attention_ops(load_model(config))
        assert ops and all(op.kernel == kernel for op in ops)
        p = predict(config)
        assert p.memory.total_bytes == base.memory.total_bytes  # time only
        times[kernel] = p.step_time_s
    # FlashAttention-2's published speed-ups: over the Triton kernel 1.3-2.5x, over flash-attn 1.x 1.7-3.0x
    # (Dao 2023, arXiv:2307.08691, Sec. 4.1); FlashAttention-3 faster again on Hopper.
    assert times["flash1"] > times["triton"] > times["sdpa"] > times["flash3"]
    assert times["sdpa"] == base.step_time_s


def test_eager_attention_is_left_as_it_is():
    model = load_model(PredictConfig(**BASE, flash_attention=False))
    assert with_attention_kernel(model, "flash1") == model  # no fused op to change


@pytest.mark.parametrize("extra,message", [
    (dict(attention_kernel="flash1", flash_attention=False), "--attention-kernel: 'flash1' is a fused kernel"),
    (dict(attention_kernel="flash3", gpu="a100"), "'flash3' (FlashAttention-3) runs on Hopper GPUs"),
    (dict(attention_kernel="flash2"), "--attention-kernel: 'flash2' is not known; choose one of sdpa"),
    (dict(attention_kernel="triton", single_gpu_step_s=0.5), "does not apply with --single-gpu-step-ms"),
])
def test_bad_kernels_are_one_line_errors(extra, message):
    with pytest.raises(ConfigError) as exc:
        predict(PredictConfig(**{**BASE, **extra}))
    assert message in str(exc.value) and "\n" not in str(exc.value)
