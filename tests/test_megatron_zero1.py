"""Megatron-Core's distributed optimizer with data parallelism alone (``--strategy zero1 --zero-impl megatron``,
dpsim/strategies/zero.py).

With ``overlap_param_gather`` Megatron-Core launches no parameter all-gather in the optimizer step
(``megatron/core/optimizer/distrib_optimizer.py`` lines 2587-2593 at NVIDIA/Megatron-LM 25.09-alpha.rc1):
each module's forward pre-hook waits for its bucket's gather and dispatches the next
(``distributed_data_parallel.py`` lines 409-443). dpsim gathers one layer at a time, queued at the step's
start, each layer's forward waiting for its own; DeepSpeed's ZeRO-1 gathers the whole flat buffer before the
step ends.
"""

from __future__ import annotations

import pytest

from dpsim.errors import ConfigError
from dpsim.predict.config import PredictConfig
from dpsim.predict.run import predict


def _job(impl: str, **kw) -> PredictConfig:
    base = dict(gpus=16, gpu="h100", link="infiniband", model="llama-2-7b", micro_batch=1, strategy="zero1",
                precision="bf16-params", steps=1, zero_impl=impl)
    return PredictConfig(**{**base, **kw})


def _gathers(p):
    return [i for i, c in enumerate(p.program.comms) if c.op == "all_gather"]


@pytest.mark.parametrize("kw", [{}, {"fp8": "te-current", "fp8_params": True}], ids=["bf16", "fp8-params"])
def test_each_layer_is_gathered_once_ahead_of_its_forward(kw):
    megatron, deepspeed = predict(_job("megatron", **kw)), predict(_job("deepspeed", **kw))
    ops = _gathers(megatron)
    layers = [t for t in megatron.program.tasks if t.kind == "forward"]
    # One gather per layer with parameters, all queued at the step's start, each waited on by its layer's
    # forward and by nothing else; the bytes are DeepSpeed's one flat gather's, split by layer (FP8 weights
    # in one byte under --fp8-params).
    assert len(ops) == len(layers)  # every Llama-2-7B layer holds parameters
    assert set(ops) <= set(megatron.program.launch_at_start)
    assert sorted(o for t in layers for o in t.wait_for if o in ops) == ops
    assert not any(t.name == "wait for parameter all-gather" for t in megatron.program.tasks)
    total = sum(megatron.program.comms[i].size_bytes for i in ops)
    (flat,) = _gathers(deepspeed)
    assert total == pytest.approx(deepspeed.program.comms[flat].size_bytes, rel=1e-12)
    # The gradient reduce-scatters are DeepSpeed's.
    rs = [c.size_bytes for c in megatron.program.comms if c.op == "reduce_scatter"]
    assert rs == [c.size_bytes for c in deepspeed.program.comms if c.op == "reduce_scatter"]


def test_the_overlapped_gather_hides_behind_the_forward():
    # Two H100 servers on InfiniBand: DeepSpeed's gather after the step is exposed whole; Megatron's waits
    # only where a layer's gather outlasts the layer before it.
    megatron, deepspeed = predict(_job("megatron")), predict(_job("deepspeed"))
    assert megatron.step_time_s < deepspeed.step_time_s
    assert megatron.exposed_comm_s < deepspeed.exposed_comm_s
    # The step saves no more than DeepSpeed's whole exposed communication.
    assert deepspeed.step_time_s - megatron.step_time_s <= deepspeed.exposed_comm_s + 1e-12


def test_without_overlap_it_is_deepspeeds_step():
    # --no-overlap: Megatron's step_with_ready_grads gathers synchronously after the update, as DeepSpeed.
    megatron, deepspeed = predict(_job("megatron", overlap=False)), predict(_job("deepspeed", overlap=False))
    assert megatron.step_time_s == deepspeed.step_time_s
    assert [c.size_bytes for c in megatron.program.comms] == [c.size_bytes for c in deepspeed.program.comms]


def test_memory_is_deepspeeds_count():
    assert predict(_job("megatron")).memory == predict(_job("deepspeed")).memory


@pytest.mark.parametrize("kw, expected", [
    ({"tp": 2}, "--zero-impl: megatron is the data-parallel-only zero1"),
    ({"offload": "optimizer"}, "does not combine with --zero-impl megatron"),
    ({"strategy": "zero3"}, "--zero-impl: megatron applies to --strategy zero1"),
])
def test_refused_with_one_line(kw, expected):
    with pytest.raises(ConfigError) as err:
        predict(_job("megatron", **kw))
    assert expected in str(err.value) and "\n" not in str(err.value)
