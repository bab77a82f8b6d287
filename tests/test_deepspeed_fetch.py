"""DeepSpeed ZeRO-3's reuse-distance release (dpsim.strategies.deepspeed_fetch) in ``zero3``'s step."""

from __future__ import annotations

import pytest

from dpsim.collectives.nccl import NcclCollectives
from dpsim.engine.simulate import run_program
from dpsim.hardware import get_gpu
from dpsim.predict.config import PredictConfig
from dpsim.predict.run import resolve_topology
from dpsim.strategies.build import build_step_program
from dpsim.strategies.deepspeed_fetch import (
    DEEPSPEED_PARAM_PERSISTENCE_THRESHOLD_NUMEL,
    backward_gather_numel,
)
from dpsim.strategies.shards import wrap_units
from dpsim.workload.architectures import LlamaConfig, build_model
from dpsim.workload.catalog import get_model
from dpsim.workload.compute import compute_profile
from dpsim.workload.precision import get_precision

BF16 = get_precision("bf16-mixed")
A100 = get_gpu("a100")
LLAMA_70B = get_model("llama-2-70b")
TINY = build_model(LlamaConfig(vocab_size=1000, hidden_size=256, intermediate_size=688, num_hidden_layers=4,
                               num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128))


def _gathers(model, checkpointed, **kw):
    units = wrap_units(model)
    of = {i: u.name for u in units for i in u.layers}
    recomputed = [u.layers for u in units if not u.is_root] if checkpointed else []
    return units, backward_gather_numel(model, [of[i] for i in range(len(model.layers))], recomputed, **kw)


def _partitioned(unit):
    return sum(p.numel for p in unit.params if p.numel > DEEPSPEED_PARAM_PERSISTENCE_THRESHOLD_NUMEL)


def _program(model, *, ac=True, n=16):
    compute = compute_profile(model, A100, micro_batch=1, precision=BF16, optimizer="adamw")
    return build_step_program("zero3", model, compute, precision=BF16, n_gpus=n, gpus_per_node=8,
                              activation_checkpointing=ac)


def test_a_model_inside_the_reuse_distance_is_never_gathered_again():
    # 1e9 elements of trace cover this model's whole forward and backward: nothing is freed.
    units, numel = _gathers(TINY, checkpointed=True)
    assert sum(numel.values()) == 0
    names = [c.name for c in _program(TINY).program.comms if c.op == "all_gather"]
    assert names and all("(forward)" in n for n in names)


def test_llama2_70b_blocks_regather_their_attention_projections_after_recomputation():
    """Hand count (DeepSpeed v0.14.0 ``__params_to_release``, 1e9 elements): after a block's
    recomputation the walk from q_proj to its own backward passes k, v, o, the MLP's three
    matrices twice (1.58e9); o_proj's passes 2 x 3 x 234881024 = 1.41e9; gate_proj's only up and
    down twice (0.94e9): q, k, v and o are freed and gathered again, the MLP is kept."""
    units, numel = _gathers(LLAMA_70B, checkpointed=True)
    block = next(u for u in units if u.name == "model.layers.40")
    attention = 2 * 8192 * 8192 + 2 * 8192 * 1024  # q, o; k, v (8 KV heads of 128)
    assert numel[block.name] == _partitioned(block) + attention
    root = next(u for u in units if u.is_root)
    # The head's backward follows its forward at once (kept); the embedding is gathered again.
    assert numel[root.name] == 32000 * 8192
    # Without recomputation no block is gathered twice, and the last one is kept whole.
    _, plain = _gathers(LLAMA_70B, checkpointed=False)
    assert all(plain.get(u.name, 0) <= _partitioned(u) for u in units)
    assert plain.get("model.layers.79", 0) < _partitioned(next(u for u in units if u.name == "model.layers.79"))


def test_bytes_per_step_are_the_gathers_counted_times_the_parameters():
    units, numel = _gathers(LLAMA_70B, checkpointed=True)
    comms = {c.name: c.size_bytes for c in _program(LLAMA_70B).program.comms if c.op == "all_gather"}
    for u in units:
        forward = comms[f"all-gather {u.name} (forward)"]
        backward = comms.get(f"all-gather {u.name} (backward)", 0.0)
        assert backward == pytest.approx(forward * numel.get(u.name, 0) / u.numel, rel=1e-12)
    assert sum(comms.values()) == pytest.approx(sum(comms[f"all-gather {u.name} (forward)"] for u in units)
                                                * (1 + sum(numel.values()) / LLAMA_70B.param_count), rel=1e-3)


@pytest.mark.parametrize("ac", [True, False])
def test_more_all_gathers_never_speed_a_step(ac, monkeypatch):
    coll = NcclCollectives(resolve_topology(PredictConfig(gpus=16, link="infiniband")))

    def step(reuse):
        monkeypatch.setattr("dpsim.strategies.deepspeed_fetch.DEEPSPEED_MAX_REUSE_DISTANCE_NUMEL", reuse)
        sp = _program(LLAMA_70B, ac=ac)
        gathered = sum(c.size_bytes for c in sp.program.comms if c.op == "all_gather")
        return gathered, run_program(sp.program, coll).steps[0].step_time_s

    results = [step(r) for r in (10**12, 10**9, 0)]  # ever fewer parameters kept
    for (b0, t0), (b1, t1) in zip(results, results[1:]):
        assert b1 >= b0 and t1 >= t0 * (1 - 1e-12)
    assert results[-1][0] > results[0][0]


def test_a_gradient_past_the_bucket_is_neither_copied_nor_interleaved():
    """DeepSpeed v0.14.0: a gradient larger than ``reduce_bucket_size`` (5e8) stays where it is
    (``__add_grad_to_ipg_bucket`` copies only what fits) and, alone in its bucket with a size the
    ranks divide, is reduce-scattered in place (``reduce_scatter_coalesced``): only the in-place
    division and the partition's copy remain. Two gradients sharing a bucket pay both copies."""
    from dpsim.workload.roofline import Efficiencies, memory_term
    from dpsim.workload.spec import LayerSpec, ModelSpec, ParamSpec

    def model(shapes):
        layers = [LayerSpec(name=f"b{i}", unit=f"b{i}", forward_flops_per_sample=1e9,
                            params=tuple(ParamSpec(name=f"b{i}.p{k}", shape=s) for k, s in enumerate(ps)))
                  for i, ps in enumerate(shapes)]
        return ModelSpec(name="toy", layers=tuple(layers), tokens_per_sample=8)

    def copies(m):
        compute = compute_profile(m, A100, micro_batch=1, precision=BF16, optimizer="adamw")
        return build_step_program("zero3", m, compute, precision=BF16, n_gpus=8, compute_gpu=A100).framework_s

    t = lambda size: memory_term(size, A100).time_s(Efficiencies())  # noqa: E731
    big = 8 * 75_000_000  # 6e8 elements, past the bucket; 8 ranks divide it
    assert copies(model([[(big,)]])) == pytest.approx(t(2 * big * 2) + t(2 * (big // 8) * 2))
    small = 8 * 1_000_000
    assert copies(model([[(small,), (small,)]])) == pytest.approx(
        2 * t(2 * 2 * small * 2) + t(2 * 2 * small * 2) + t(2 * (2 * small // 8) * 2))
