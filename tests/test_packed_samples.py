"""Packed rows of whole samples (``dpsim.workload.layers.with_packed_samples``): one causal attention
per sample, against a hand count of the scores, and the one-line refusals.

ms-swift's ``--packing`` (Megatron-Core ``PackedSeqParams`` with ``cu_seqlens``) is the mechanism;
the validation row that uses it is R144 (``validation/accuracy_large_models.py``).
"""

from __future__ import annotations

import pytest

from dpsim.errors import ConfigError
from dpsim.predict.config import PredictConfig
from dpsim.predict.run import predict
from dpsim.strategies.context import ContextParallel, check_context
from dpsim.workload.catalog import get_model
from dpsim.workload.layers import packed_sample_tokens, with_packed_samples
from dpsim.workload.spec import AttentionOp

SEQ = 32768
# Llama-2-7B (meta-llama/Llama-2-7b-hf config.json): 32 layers, 32 heads of 128.
LAYERS, ATTN_DIM = 32, 32 * 128


def _llama(*, flash: bool = True):
    return get_model("llama-2-7b", seq_len=SEQ, flash_attention=flash)


def test_the_per_token_length_is_the_second_moment_over_the_first():
    # Two samples of 1000 and 3000 tokens: scores 1000² + 3000² over 4000 tokens = 2500 per token;
    # mean 2000, standard deviation 1000 (population) give (2000² + 1000²) / 2000 = 2500.
    assert packed_sample_tokens(2000.0, 1000.0) == pytest.approx((1000**2 + 3000**2) / 4000)
    assert packed_sample_tokens(4096.0, 0.0) == 4096.0


def test_attention_keeps_the_samples_triangles_and_nothing_else_changes():
    full = _llama()
    mean, std = 5009.0, 2932.8  # R144's LongWriter-6k statistic
    length = (mean**2 + std**2) / mean
    packed = with_packed_samples(full, mean_tokens=mean, std_tokens=std)
    for a, b in zip(full.layers, packed.layers):
        for x, y in zip(a.ops, b.ops):
            if isinstance(x, AttentionOp):
                assert y.causal_share == pytest.approx(0.5 * length / SEQ)
                assert (y.seq, y.heads, y.head_dim) == (x.seq, x.heads, x.head_dim)
            else:
                assert y == x
    # Hand count, the full-square convention: 4·S²·(heads x head size) per layer becomes 4·S·L·(...).
    dropped = LAYERS * 4.0 * SEQ * (SEQ - length) * ATTN_DIM
    assert full.forward_flops_per_sample - packed.forward_flops_per_sample == pytest.approx(dropped, rel=1e-9)
    assert packed.param_count == full.param_count


def test_eager_attention_computes_the_masked_square_anyway():
    eager = _llama(flash=False)
    assert with_packed_samples(eager, mean_tokens=2048.0, std_tokens=0.0).layers == eager.layers


def test_a_spread_past_the_row_is_capped_at_the_row():
    full = _llama()
    capped = with_packed_samples(full, mean_tokens=SEQ / 2, std_tokens=float(SEQ))
    assert capped.forward_flops_per_sample == pytest.approx(full.forward_flops_per_sample)


def test_a_packed_step_is_shorter_and_the_shorter_the_samples_the_shorter():
    cfg = PredictConfig(gpus=8, link="aws-p5", model="llama-2-7b", seq_len=SEQ, micro_batch=1, strategy="zero1",
                        recompute="full", steps=1)
    full = _llama()
    steps = [predict(cfg, model=m).step_time_s for m in (
        full, with_packed_samples(full, mean_tokens=8192.0, std_tokens=0.0),
        with_packed_samples(full, mean_tokens=2048.0, std_tokens=0.0))]
    assert steps[0] > steps[1] > steps[2]


@pytest.mark.parametrize("mean,std", [(0.0, 1.0), (-5.0, 0.0), (100.0, -1.0), (SEQ + 1.0, 0.0)])
def test_bad_statistics_are_one_line(mean, std):
    with pytest.raises(ConfigError) as err:
        with_packed_samples(_llama(), mean_tokens=mean, std_tokens=std)
    assert "packed samples" in str(err.value) and "allowed" in str(err.value) and "\n" not in str(err.value)


def test_a_ring_over_packed_samples_is_refused_and_ulysses_is_not():
    packed = with_packed_samples(_llama(), mean_tokens=4096.0, std_tokens=0.0)
    with pytest.raises(ConfigError, match="--cp-comm a2a"):
        check_context(packed, ContextParallel(cp=2, comm="p2p"), tp=1)
    check_context(packed, ContextParallel(cp=2, comm="a2a"), tp=1)
