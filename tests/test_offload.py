"""CPU offload (``predict --offload``): what leaves the GPU, the host-side optimizer step against
a hand count, and the one-line errors. The mechanism: dpsim/strategies/offload.py."""

from __future__ import annotations

import typing

import pytest

from dpsim.errors import ConfigError
from dpsim.predict.config import PredictConfig
from dpsim.predict.run import load_model, predict, resolve_topology
from dpsim.strategies.offload import (CPU_ADAM_BANDWIDTH_EFFICIENCY, CPU_ADAM_BYTES_PER_PARAM, DGX2_HOST_MEMORY_BYTES_PER_S,
                                      OFFLOAD, host_step_s)


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
    host_bw = node.host_memory_bandwidth_bytes_per_s * node.sockets
    if cfg.parallelism.strategy in ("zero3", "fsdp"):
        # ZeRO-3's passes: scale the fp32 gradient in place (4 + 4), Adam reads master, gradient and
        # moments and writes master and moments (16 + 12), then the 16-bit shard cast from the master (4 + 2).
        per_param = (4 + 4) + (16 + 12) + (4 + 2)
    else:
        per_param = CPU_ADAM_BYTES_PER_PARAM
    adam = 8 * shard * per_param / (host_bw * CPU_ADAM_BANDWIDTH_EFFICIENCY)
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
    zero2 = _cfg(strategy="zero2", offload="optimizer")
    assert predict(zero2).optimizer_s == pytest.approx(_host_step_by_hand(zero2), rel=1e-3)


@pytest.mark.parametrize("params, published_s, rel", [(10e9, 2.57, 1e-9), (4e9, 1.03, 0.02)])
def test_cpu_adam_step_reproduces_zero_offloads_own_measurement(params, published_s, rel):
    """ZeRO-Offload's Table 4 (arXiv:2101.06840, Sec. 6.2.4) on its DGX-2 host: the 10B row sets the
    efficiency, and the 4B row, which nothing was taken from, comes out within 2 %."""
    from dpsim.topology.spec import NodeSpec

    node = NodeSpec(gpus_per_node=1, interconnect="pcie", gpu_link_bandwidth_bytes_per_s=1.0, gpu_link_efficiency=1.0,
                    gpu_link_latency_s=0.0, pcie_bandwidth_bytes_per_s=float("inf"),
                    host_memory_bandwidth_bytes_per_s=DGX2_HOST_MEMORY_BYTES_PER_S / 2, sockets=2)
    assert host_step_s(params, 1, node, 2) == pytest.approx(published_s, rel=rel)


def test_the_host_step_is_a_fixed_cost_a_longer_sequence_never_shrinks():
    """The CPU-Adam step and the shard copies depend on the shard, not on the tokens: a longer sequence
    adds forward and backward time only."""
    base = dict(strategy="fsdp", cp=8, activation_checkpointing=False, recompute="full", offload="params+optimizer")
    short, long = (predict(_cfg(seq_len=n, **base)) for n in (65536, 131072))
    assert short.optimizer_s == pytest.approx(long.optimizer_s, rel=1e-9) and short.optimizer_s > 0
    fixed_short, fixed_long = (p.step_time_s - p.forward_s - p.backward_s for p in (short, long))
    # Exposed communication moves by ~1e-4 of it with the overlap; the host step does not.
    assert fixed_long >= fixed_short * (1 - 1e-3) and fixed_short >= short.optimizer_s * (1 - 1e-6)


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
    (dict(strategy="zero2", cp=8, offload="optimizer"), "--offload: optimizer"),  # zero3 with cp composes now
    (dict(offload="expert-activations"), "--offload: expert-activations offloads the MoE layers' activations"),
])
def test_bad_offload_is_one_line(kw, start):
    with pytest.raises(ConfigError) as err:
        _cfg(**kw)
    assert str(err.value).startswith(start) and "\n" not in str(err.value)


# ------------------------------------------------------------------ expert activations (Megatron-Core)


def _moe(**kw) -> PredictConfig:
    base = dict(gpus=64, pp=4, ep=8, model="mixtral-8x7b", link="infiniband", gpu="h100", micro_batch=1,
                global_batch=64, precision="bf16-params", strategy="zero1", steps=1)
    base.update(kw)
    return PredictConfig(**base)


@pytest.mark.parametrize("recompute, both", [("off", True), ("op", False)])
def test_expert_activation_offload_takes_the_expert_gemm_input_and_output_off_each_micro_batch(recompute, both):
    """Per sample of one micro-batch, a chunk keeps less by the first expert GEMM's output of
    every MoE layer, and its input too where the policy keeps it (op keeps matmul outputs only)."""
    from dpsim.memory import stage_activation_bytes
    from dpsim.predict.layout import layout_of
    from dpsim.strategies.layout import stage_assignment
    from dpsim.strategies.tensor import ExpertSplit, tp_model
    from dpsim.workload.precision import get_precision
    tpm = tp_model(load_model(_moe()), 1, experts=ExpertSplit(ep=8))
    grad = get_precision("bf16-params").grad_bytes
    kept, offloaded = (stage_activation_bytes(tpm, stage_assignment(tpm, layout_of(_moe(recompute=recompute,
                                                                                             offload=o), grad)),
                                              layout_of(_moe(recompute=recompute, offload=o), grad))[1]
                       for o in ("off", "expert-activations"))
    gemms = [op for i in stage_assignment(tpm, layout_of(_moe(), grad))[1][0] for op in tpm.spec.layers[i].ops
             if op.name == "experts.gate_up"]
    by_hand = sum(op.m * op.batch * (op.n + (op.k if both else 0)) * 2 for op in gemms)
    assert len(gemms) == 8 and by_hand > 0
    assert kept[0][0] - offloaded[0][0] == pytest.approx(by_hand, rel=1e-12)
    assert offloaded[1] >= kept[1]  # one layer's offloaded bytes are back while it runs its backward
    full = _moe(recompute="moe", offload="expert-activations")  # a layer rerun from its input offloads nothing
    assert predict(full).memory.total_bytes == predict(_moe(recompute="moe")).memory.total_bytes


def test_expert_activation_copies_cost_only_what_the_block_compute_does_not_hide():
    from dpsim.hardware import get_gpu
    from dpsim.predict.layout import layout_of, shard_compute
    from dpsim.strategies.layout import layer_work
    from dpsim.strategies.tensor import ExpertSplit, tp_model
    from dpsim.workload.precision import get_precision
    config = _moe()
    precision = get_precision("bf16-params")
    tpm = tp_model(load_model(config), 1, experts=ExpertSplit(ep=8))
    layout = layout_of(config, precision.grad_bytes)
    compute = shard_compute(tpm, get_gpu("h100"), config, precision)
    base = layer_work(tpm, compute, layout, tp_cost=lambda op, b: 0.0)
    block = [l.index for l in tpm.layers if l.unit == tpm.layers[-2].unit]
    fwd = sum(base[i].compute_forward_s for i in block)
    copies = [0.0] * len(tpm.layers)
    for small, extra in ((0.25, 0.0), (3.0, 2.0)):  # a copy of a quarter of the block's forward hides in it
        copies[block[-1]] = small * fwd
        work = layer_work(tpm, compute, layout, tp_cost=lambda op, b: 0.0, offload_s=copies)
        assert work[block[-1]].forward_s - base[block[-1]].forward_s == pytest.approx(extra * fwd, rel=1e-9)
        assert sum(w.forward_s for w in work) - sum(w.forward_s for w in base) == pytest.approx(extra * fwd,
                                                                                               rel=1e-9)


def test_host_link_reads_from_the_topology_and_defaults_to_pcie():
    from dpsim.topology.load import load_topology_file
    from pathlib import Path
    node = load_topology_file(Path(__file__).parents[1] / "validation/systems/gb200-nvl72.yaml").node
    assert node.host_link_bandwidth_bytes_per_s == 225e9
    assert resolve_topology(_moe()).spec.node.host_link_bandwidth_bytes_per_s == 0.0  # the PCIe rate then
