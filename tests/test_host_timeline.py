"""The host timeline after a host synchronisation (dpsim.workload.host_timeline) and Megatron-Core's MoE
layer marked with it (dpsim.workload.layers.with_megatron_moe_host_timeline)."""

import random
from dataclasses import replace

import pytest

from dpsim.errors import ConfigError
from dpsim.hardware import get_gpu
from dpsim.workload.catalog import get_model
from dpsim.workload.compute import compute_profile
from dpsim.workload.host_timeline import (
    GEMM_LAUNCH_S,
    HOST_CALL_S,
    HOST_SYNC,
    HOST_SYNC_BACKWARD,
    TE_MODULE_CALL_S,
    call_marker,
    is_marker,
    marker_host_s,
    segment_excess_s,
    segment_time_s,
    sync_marker,
    timeline_excess_s,
)
from dpsim.workload.layers import MEGATRON_ATTENTION_TE_CALLS, with_megatron_moe_host_timeline
from dpsim.workload.precision import get_precision
from dpsim.workload.roofline import HOST_OVERHEAD_PER_OP_S

H100 = get_gpu("h100")


def _profile(model, micro_batch=1):
    return compute_profile(model, H100, micro_batch=micro_batch, precision=get_precision("amp-bf16"),
                           optimizer="adamw")


def test_a_segment_is_never_shorter_than_its_gpu_or_its_host_and_never_longer_than_both():
    rng = random.Random(24)
    for _ in range(500):
        n = rng.randint(1, 12)
        gpu = [rng.choice([0.0, rng.uniform(0, 1e-3)]) for _ in range(n)]
        host = [rng.choice([0.0, rng.uniform(0, 1e-3)]) for _ in range(n)]
        t = segment_time_s(gpu, host)
        assert t >= sum(gpu) - 1e-15 and t >= sum(host) - 1e-15
        assert t <= sum(gpu) + sum(host) + 1e-15
        # One dispatch ahead of the GPU's sum, at least (the first op cannot start before it is launched).
        assert t >= host[0] + sum(gpu) - 1e-15
        # Charged per op as dpsim does (the longer of the two), a stretch gains at most one op's shorter
        # side: host time only adds where it is host time no op's charge holds (a framework call's).
        charged = sum(max(g, h) for g, h in zip(gpu, host))
        assert segment_excess_s(gpu, host, charged) <= max(min(g, h) for g, h in zip(gpu, host)) + 1e-15
    assert segment_time_s([], []) == 0.0


def test_without_a_synchronisation_nothing_is_added():
    ops = [(1e-4, 5e-4, 5e-4, False), (2e-4, 1e-5, 2e-4, False)] * 5
    assert timeline_excess_s(ops) == [0.0] * 10
    # Ops before the first synchronisation are left as they are; the stretch after it is timed.
    out = timeline_excess_s([(1e-3, 9e-3, 9e-3, False), (0.0, 0.0, 0.0, True), (1e-4, 5e-4, 5e-4, False)])
    assert out[0] == 0.0 and out[2] == 0.0 and out[1] == pytest.approx(1e-4)


def test_one_moe_layers_host_timeline_by_hand():
    # After the wait: the permutation (GPU 70 us, 1 TE call), two grouped linears of 16 experts (GPU 335 and
    # 167 us, a TE call and 16 GEMM launches each), the activation, the unpermutation; then the next block's
    # attention (GPU 590 us, its 5 TE calls first). Each op's own dispatch is the eager 8 us.
    te, expert = HOST_CALL_S["te_module"][0], HOST_CALL_S["grouped_gemm"][0]
    d = HOST_OVERHEAD_PER_OP_S
    ops = [("wait", 0, 0), ("permute", 70e-6, te + d), ("gate_up", 335e-6, te + 16 * expert + d),
           ("act", 66e-6, d), ("down", 167e-6, te + 16 * expert + d), ("unpermute", 70e-6, te + d),
           ("attention", 590e-6, MEGATRON_ATTENTION_TE_CALLS * te + d)]
    timeline = [(g, h, max(g, d), name == "wait") for name, g, h in ops]
    excess = timeline_excess_s(timeline)
    # The host is behind the GPU all the way: the binding k is the last op, so the stretch takes every
    # host call (9 TE calls, 32 expert launches, 6 dispatches) and then the attention kernel.
    host = 9 * te + 32 * expert + 6 * d
    expected = host + 590e-6 - sum(max(g, d) for _, g, _ in ops[1:])
    assert expert == pytest.approx(GEMM_LAUNCH_S + 2 * HOST_OVERHEAD_PER_OP_S)
    assert te == TE_MODULE_CALL_S
    assert excess[0] == pytest.approx(expected)
    assert excess[0] == pytest.approx(1.1803e-3, abs=1e-7)
    assert sum(excess[1:]) == 0.0


def test_markers_cost_nothing_and_a_model_without_waits_is_unchanged():
    model = get_model("qwen3-30b-a3b", seq_len=4096, flash_attention=True)
    for op in (sync_marker(), sync_marker(backward=True), call_marker("te_module", 5), call_marker("grouped_gemm", 16)):
        assert is_marker(op)
    assert marker_host_s(call_marker("grouped_gemm", 16)) == (16 * HOST_CALL_S["grouped_gemm"][0],
                                                              16 * HOST_CALL_S["grouped_gemm"][1])
    assert marker_host_s(sync_marker()) == (0.0, 0.0)
    with pytest.raises(KeyError):
        call_marker("python")
    base = _profile(model)
    # Call markers alone (no wait): the host runs ahead, nothing changes.
    calls_only = replace(model, layers=tuple(replace(l, ops=(call_marker("te_module", 50),) + l.ops)
                                             for l in model.layers))
    assert _profile(calls_only) == base
    marked = with_megatron_moe_host_timeline(model, local_experts=16)
    stripped = replace(marked, layers=tuple(replace(l, ops=tuple(o for o in l.ops if not is_marker(o)))
                                            for l in marked.layers))
    assert stripped == model
    assert with_megatron_moe_host_timeline(marked, local_experts=16) == marked  # applied once
    with pytest.raises(ConfigError, match="local_experts"):
        with_megatron_moe_host_timeline(model, local_experts=0)


def test_megatron_moe_host_waits_land_on_the_moe_layers_and_only_add_time():
    model = get_model("qwen3-30b-a3b", seq_len=4096, flash_attention=True)
    base = _profile(model)
    marked = with_megatron_moe_host_timeline(model, local_experts=16)
    for layer in marked.layers:
        names = [op.name for op in layer.ops]
        if "experts.permute" in names:
            assert names.index(HOST_SYNC) == names.index("experts.permute") - 2  # the wait, the TE permute call
            assert HOST_SYNC_BACKWARD not in names
    after = _profile(marked)
    moe = {i for i, l in enumerate(model.layers) if any(o.name == "experts.permute" for o in l.ops)}
    assert len(moe) == 48
    for i, (a, b) in enumerate(zip(base.layers, after.layers)):
        assert b.forward_s >= a.forward_s and b.backward_s == a.backward_s
        if i not in moe:
            assert b == a
    added = after.forward_s - base.forward_s
    assert added > 0
    # A waiting backward (the eager multihot's masked index_put_) can only add to the backward.
    both = _profile(with_megatron_moe_host_timeline(model, local_experts=16, backward_sync=True))
    assert both.forward_s == pytest.approx(after.forward_s)
    assert both.backward_s >= base.backward_s
    # Fewer local experts, fewer launches: never more idle time.
    fewer = _profile(with_megatron_moe_host_timeline(model, local_experts=4))
    assert base.forward_s <= fewer.forward_s <= after.forward_s
    # The ops' own times are untouched: the optimizer and the FLOPs are the same.
    assert after.optimizer_s == base.optimizer_s and after.flops_per_step == base.flops_per_step
