"""DeepSpeed ZeRO-3 over a context-parallel layout (``--strategy zero3 --cp N``).

XTuner's and EasyContext's sequence parallelism hand DeepSpeed no ``mpu``, so ZeRO-3 partitions over
every rank while Ulysses' all-to-alls run on the sequence-parallel group: the two compose. The layout's
``zero3`` carries the data-parallel path's DeepSpeed mechanisms (the reuse-distance re-gathers and the
gradient passes around each reduce-scatter); these tests hold it to them.
"""

from __future__ import annotations

import pytest

from dpsim.errors import ConfigError
from dpsim.predict.config import PredictConfig
from dpsim.predict.layout import layout_of, zero3_layout_passes
from dpsim.predict.run import load_model, predict
from dpsim.strategies.context import cp_shard
from dpsim.strategies.deepspeed_fetch import backward_gather_numel
from dpsim.strategies.sharded import zero3_grad_pass_bytes
from dpsim.strategies.tensor import tp_model
from dpsim.hardware import get_gpu
from dpsim.workload.precision import get_precision

SEQ = 32768


def _cfg(**kw) -> PredictConfig:
    base = dict(gpus=16, link="aws-p5", model="llama-2-7b", seq_len=SEQ, micro_batch=1, strategy="zero3",
                recompute="full", steps=1, cp=8, cp_comm="a2a", global_batch=4)
    base.update(kw)
    return PredictConfig(**base)


def _gather_bytes(p) -> float:
    return sum(v for k, v in p.comm_bytes_by_op.items() if "gather" in k)


def test_zero3_composes_with_ulysses_and_differs_from_fsdp_by_deepspeed_mechanisms():
    z = predict(_cfg())
    f = predict(_cfg(strategy="fsdp"))
    assert z.layout is not None and z.layout.layout.strategy == "zero3"
    # Same Ulysses all-to-alls: the sharding of parameters does not touch the sequence-parallel group.
    assert z.layout.cp_comm_s == pytest.approx(f.layout.cp_comm_s)
    # Same model state per GPU (both partition over dp x cp).
    assert z.memory.optimizer_bytes == pytest.approx(f.memory.optimizer_bytes)
    # DeepSpeed's gradient passes run on the compute stream: never a faster step.
    assert z.step_time_s >= f.step_time_s


def test_backward_gathers_follow_the_reuse_rule():
    cfg = _cfg()
    model = load_model(cfg)
    layout = layout_of(cfg, 2)
    tpm = tp_model(cp_shard(model, layout.context), 1)
    passes = zero3_layout_passes(tpm, layout, get_gpu("h100"), get_precision("bf16-mixed"))
    names = [l.unit if l.unit is not None else f"layer {l.index}" for l in tpm.layers]
    from dpsim.strategies.layout import checkpointed_blocks
    again = backward_gather_numel(tpm.spec, names, checkpointed_blocks(tpm, layout))
    # Per layer shares add up to each unit's count: nothing invented, nothing lost.
    assert sum(passes.backward_gather_numel) == pytest.approx(sum(again.values()))
    # The last block and the head are reused within 1e9 elements: not gathered again.
    assert passes.backward_gather_numel[-1] == 0.0


def test_gradient_pass_bytes_cover_the_whole_gradient_once_per_pass():
    units = [("a", [300_000_000, 200_000_000], 31_250_000), ("b", [400_000_000], 25_000_000)]
    out = zero3_grad_pass_bytes(units, 16, 2)
    for name, _, shard in units:
        scatter, (add, copy) = out[name]
        assert scatter[2] == 2 * shard * 16 * 2  # the in-place divide reads and writes the unit's gradient
        assert scatter[3] == 2 * shard * 2  # partition_grads' copy of the rank's part
        assert add > copy
    # Every element joins a bucket at most once.
    assert sum(out[n][0][0] for n in out) <= 2 * 2 * 900_000_000


def test_zero3_refuses_pipeline_stages():
    with pytest.raises(ConfigError) as err:
        PredictConfig(gpus=16, link="aws-p5", model="llama-2-7b", strategy="zero3", pp=2, steps=1)
    assert str(err.value).startswith("--pp: 2 does not combine with --strategy zero3") and "\n" not in str(err.value)
