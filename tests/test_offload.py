"""CPU offload (``predict --offload``): what leaves the GPU, the host-side optimizer step against
a hand count, and the one-line errors. The mechanism: dpsim/strategies/offload.py."""

from __future__ import annotations

import typing

import pytest

from dpsim.errors import ConfigError
from dpsim.predict.config import PredictConfig
from dpsim.predict.run import load_model, predict, resolve_topology
from dpsim.strategies.offload import CPU_ADAM_BYTES_PER_PARAM, OFFLOAD


def _cfg(**kw) -> PredictConfig:
    base = dict(gpus=8, link="dgx-a100", model="llama-2-7b", seq_len=4096, micro_batch=1, strategy="zero3",
                precision="bf16-params", activation_checkpointing=True, steps=1)
    base.update(kw)
    return PredictConfig(**base)


def test_offload_choices_are_the_registry():
    from dpsim.predict import config as cfg

    assert typing.get_args(cfg.Offload) == tuple(OFFLOAD)


def _host_step_by_hand(cfg: PredictConfig) -> float:
    node = resolve_topology(cfg).spec.node
    psi = load_model(cfg).param_count
    shard = -(-psi // 8)
    adam = 8 * shard * CPU_ADAM_BYTES_PER_PARAM / (node.host_memory_bandwidth_bytes_per_s * node.sockets)
    # Over PCIe: the bf16 gradient shard down, the updated bf16 shard up, and with offloaded
    # parameters the shard up before the forward, backward and recomputed-forward gathers.
    copies = 2 + (3 if cfg.execution.offload == "params+optimizer" else 0)
    return adam + copies * shard * 2 / node.pcie_bandwidth_bytes_per_s


def test_zero3_offload_moves_the_shards_and_the_adam_step_to_the_host():
    on_gpu = predict(_cfg())
    opt = predict(_cfg(offload="optimizer"))
    both = predict(_cfg(offload="params+optimizer"))
    m0, m1, m2 = on_gpu.memory, opt.memory, both.memory
    assert m1.optimizer_bytes == 0 and m1.gradients_bytes == 0 and m1.weights_bytes == m0.weights_bytes > 0
    assert m2.weights_bytes == 0
    # What stays: activations, the gathered units and gradient buckets, the framework's overhead.
    assert m2.total_bytes == m0.activations_bytes + m0.comm_buffers_bytes + m0.overhead_bytes
    assert opt.optimizer_s == pytest.approx(_host_step_by_hand(_cfg(offload="optimizer")), rel=1e-3)
    assert both.optimizer_s == pytest.approx(_host_step_by_hand(_cfg(offload="params+optimizer")), rel=1e-3)
    assert opt.step_time_s - on_gpu.step_time_s == pytest.approx(opt.optimizer_s - on_gpu.optimizer_s, rel=0.05)


def test_context_parallel_fsdp_offload_keeps_only_the_working_units():
    base = dict(strategy="fsdp", cp=8, seq_len=65536, activation_checkpointing=False, recompute="full")
    on_gpu = predict(_cfg(**base))
    both = predict(_cfg(offload="params+optimizer", **base))
    m = both.memory
    # Resharded after each forward (no pipeline): the gathered units and gradients being reduced
    # are buffers already; every shard goes to the host.
    assert m.optimizer_bytes == m.gradients_bytes == m.weights_bytes == 0
    assert m.comm_buffers_bytes == on_gpu.memory.comm_buffers_bytes > 0
    assert both.optimizer_s == pytest.approx(_host_step_by_hand(_cfg(offload="params+optimizer", **base)), rel=1e-3)


def test_pipelined_fsdp_offload_keeps_the_working_units_in_place_of_the_gathered_stage():
    base = dict(strategy="fsdp", cp=4, pp=2, seq_len=16384, activation_checkpointing=False, recompute="full",
                global_batch=1)
    both = predict(_cfg(offload="params+optimizer", **base))
    model = load_model(_cfg(**base))
    block = sum(layer.param_count for layer in model.layers if layer.unit == model.layers[1].unit)
    (first,) = [st for st in both.layout.stages if st.stage == 0]
    m = first.memory.breakdown
    root = sum(layer.param_count for layer in model.layers[:1])  # stage 0: the embedding
    assert m.optimizer_bytes == 0
    assert m.gradients_bytes == block * 2  # the block being reduced
    assert m.weights_bytes == (root + 2 * block) * 2  # the embedding and two blocks gathered


@pytest.mark.parametrize("kw, start", [
    (dict(strategy="ddp", offload="optimizer"), "--offload: optimizer offloads a sharded optimizer; --strategy ddp"),
    (dict(strategy="zero2", offload="params+optimizer"), "--offload: params+optimizer"),
    (dict(strategy="zero1", cp=8, offload="params+optimizer"), "--offload: params+optimizer"),
    (dict(strategy="zero3", cp=8, offload="optimizer"), "--offload: optimizer"),
])
def test_bad_offload_is_one_line(kw, start):
    with pytest.raises(ConfigError) as err:
        _cfg(**kw)
    assert str(err.value).startswith(start) and "\n" not in str(err.value)
