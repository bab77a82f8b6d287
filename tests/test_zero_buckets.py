"""``--bucket-cap-mb`` for ZeRO-1/2: DeepSpeed's ``reduce_bucket_size``, in the step and in memory."""

from __future__ import annotations

import math

import pytest

from dpsim.errors import ConfigError
from dpsim.hardware import get_gpu
from dpsim.memory import fit_advice, memory_breakdown
from dpsim.predict.config import PredictConfig
from dpsim.predict.run import predict
from dpsim.strategies.build import build_step_program
from dpsim.strategies.shards import (
    DEEPSPEED_REDUCE_BUCKET_ELEMENTS,
    deepspeed_partition_numel,
    deepspeed_reduce_bucket_elements,
)
from dpsim.units import MiB
from dpsim.workload.catalog import get_model
from dpsim.workload.compute import compute_profile
from dpsim.workload.precision import get_precision
from dpsim.workload.spec import LayerSpec, ModelSpec, ParamSpec

BF16 = get_precision("bf16-mixed")
FP32 = get_precision("fp32")
H100 = get_gpu("h100")


def _program(strategy, model, precision=BF16, n=16, **kw):
    compute = compute_profile(model, H100, micro_batch=1, precision=precision, optimizer="adamw")
    return build_step_program(strategy, model, compute, precision=precision, n_gpus=n, gpus_per_node=8, **kw)


def _reduce_scatters(sp):
    return [c for c in sp.program.comms if c.op == "reduce_scatter"]


def test_mib_of_gradients_become_elements():
    assert deepspeed_reduce_bucket_elements(None, 2) == DEEPSPEED_REDUCE_BUCKET_ELEMENTS == 500_000_000
    assert deepspeed_reduce_bucket_elements(1, 2) == 524_288  # 1 MiB of bf16 gradients
    assert deepspeed_reduce_bucket_elements(1, 4) == 262_144  # of fp32 ones
    assert deepspeed_reduce_bucket_elements(0.1, 2) == int(0.1 * MiB) // 2  # bytes truncated as DDP does
    for bad in (0, -1, float("nan"), True):
        with pytest.raises(ConfigError, match="--bucket-cap-mb"):
            deepspeed_reduce_bucket_elements(bad, 2)


def _uniform(n_params, numel):
    layers = tuple(LayerSpec(name=f"l{i}", params=(ParamSpec(name=f"l{i}.w", shape=(numel,)),),
                             forward_flops_per_sample=1e9) for i in range(n_params))
    return ModelSpec(name="uniform", layers=layers)


@pytest.mark.parametrize("strategy", ["zero1", "zero2"])
@pytest.mark.parametrize("cap_mb,per_bucket", [(1, 8), (0.25, 2), (0.2, 1), (1000, 10)])
def test_reduce_scatters_follow_the_flush_rule(strategy, cap_mb, per_bucket):
    """10 gradients of 2**16 bf16 elements: a bucket takes floor(cap / 2**16) of them."""
    model = _uniform(10, 2**16)
    assert min(deepspeed_reduce_bucket_elements(cap_mb, 2) // 2**16, 10) == per_bucket
    ops = _reduce_scatters(_program(strategy, model, bucket_cap_mb=cap_mb))
    assert len(ops) == math.ceil(10 / per_bucket)
    padded = deepspeed_partition_numel(model.param_count, 16) * 16
    assert sum(c.size_bytes for c in ops) == padded * 2
    assert all(c.size_bytes == per_bucket * 2**16 * 2 for c in ops[:-1])


def test_gpt2_buckets_obey_deepspeeds_rule_at_any_cap():
    model = get_model("gpt2")
    numel = {p.name: p.numel for p in model.params}
    for cap_mb in (0.5, 1, 4, 64):
        cap = deepspeed_reduce_bucket_elements(cap_mb, 2)
        sizes = [c.size_bytes / 2 for c in _reduce_scatters(_program("zero2", model, bucket_cap_mb=cap_mb))]
        sizes[-1] -= deepspeed_partition_numel(model.param_count, 16) * 16 - model.param_count  # padding
        assert sum(sizes) == model.param_count
        # Every pair of neighbours overflows the cap (the second one's first gradient did
        # not fit), so fewer than twice ceil(total / cap) buckets; only a gradient larger
        # than the cap makes a larger bucket, alone, so the others need ceil(rest / cap).
        big = [v for v in numel.values() if v > cap]
        assert all(a + b > cap for a, b in zip(sizes, sizes[1:]))
        assert sorted(s for s in sizes if s > cap) == sorted(big)
        rest = model.param_count - sum(big)
        assert len(big) + math.ceil(rest / cap) <= len(sizes) <= 2 * math.ceil(model.param_count / cap)


def test_zero2_step_and_op_count_move_with_the_cap():
    """The issue's check: zero2 gave the same step at 1 and 1000 MiB."""
    default_mib = 500_000_000 * 2 / MiB  # DeepSpeed's 5e8 bf16 elements, exactly
    runs = {cap: predict(PredictConfig(gpus=32, link="ethernet", strategy="zero2", bucket_cap_mb=cap,
                                       precision="bf16-params"))  # DeepSpeed bf16: 2-byte gradients
            for cap in (None, 1, 1000, default_mib)}
    ops = {cap: sum(c.op == "reduce_scatter" for c in p.program.comms) for cap, p in runs.items()}
    assert ops[1] > 10 * ops[1000]
    assert runs[1].step_time_s != runs[1000].step_time_s
    assert runs[1].comm_bytes_by_op == pytest.approx(runs[1000].comm_bytes_by_op)  # same volume, cut finer
    # Unset is DeepSpeed's default bucket.
    assert ops[default_mib] == ops[None] and runs[default_mib].step_time_s == runs[None].step_time_s


def test_zero1_accumulation_and_no_overlap_follow_the_cap():
    model = _uniform(10, 2**16)
    sp = _program("zero1", model, bucket_cap_mb=0.25, grad_accum=3, overlap=False)
    ops = _reduce_scatters(sp)
    assert len(ops) == 5 and all("(micro-batch 3)" in c.name for c in ops)
    z2 = _reduce_scatters(_program("zero2", model, bucket_cap_mb=0.25, grad_accum=3))
    assert len(z2) == 3 * 5


@pytest.mark.parametrize("strategy", ["zero1", "zero2"])
@pytest.mark.parametrize("overlap,buffers", [(True, 2), (False, 1)])
def test_memory_buffers_follow_the_cap(strategy, overlap, buffers):
    model = get_model("llama-2-7b")

    def mem(cap, precision=BF16):
        return memory_breakdown(model, H100, precision=precision, optimizer="adamw", micro_batch=1,
                                strategy=strategy, n_gpus=64, overlap=overlap, bucket_cap_mb=cap)

    assert mem(None).comm_buffers_bytes == buffers * 500_000_000 * 2
    assert mem(1).comm_buffers_bytes == buffers * MiB
    assert mem(1, FP32).comm_buffers_bytes == buffers * MiB
    assert mem(0.1).comm_buffers_bytes == buffers * (int(0.1 * MiB) // 2) * 2
    # Only the buffers move.
    assert mem(1).model_state_bytes == mem(None).model_state_bytes


def test_ddp_memory_does_not_depend_on_the_cap():
    model = get_model("gpt2")
    kw = dict(precision=BF16, optimizer="adamw", micro_batch=4, n_gpus=16)
    assert memory_breakdown(model, H100, bucket_cap_mb=1, **kw) == memory_breakdown(model, H100, **kw)


def test_predict_memory_follows_the_cap():
    kw = dict(gpus=32, link="ethernet", strategy="zero1", steps=1, precision="bf16-params")  # DeepSpeed bf16
    one = predict(PredictConfig(bucket_cap_mb=1, **kw))
    default = predict(PredictConfig(**kw))
    assert one.memory.comm_buffers_bytes == 2 * MiB
    assert default.memory.total_bytes - one.memory.total_bytes == 2 * (500_000_000 * 2 - MiB)


def test_advice_to_a_strategy_without_buckets_says_to_drop_the_cap():
    model = get_model("llama-2-70b")
    kw = dict(precision=BF16, optimizer="adamw", micro_batch=1, n_gpus=64, gpus_per_node=8)
    for strategy in ("ddp", "zero1"):
        advice = fit_advice(model, H100, strategy=strategy, bucket_cap_mb=25, **kw)
        assert advice.strategy == "zero3" and "--strategy zero3 without --bucket-cap-mb" in advice.message
        assert advice.message == fit_advice(model, H100, strategy=strategy, **kw).message.replace(
            "--strategy zero3", "--strategy zero3 without --bucket-cap-mb")
