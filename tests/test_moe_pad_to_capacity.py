"""``--moe-pad-to-capacity``: every expert computes and receives its capacity in rows (Megatron-Core's
``--moe-pad-expert-input-to-capacity``; GShard's and DeepSpeed-MoE's fixed-shape dispatch)."""

import math

import pytest

from dpsim import PredictConfig, predict
from dpsim.errors import ConfigError
from dpsim.workload.routing import parse_routing, rank_load


def _mixtral(**kw):
    base = dict(model="mixtral-8x7b", gpus=64, link="infiniband", gpu="h100", micro_batch=1, tp=2,
                sequence_parallel=True, ep=8, pp=2, global_batch=64, strategy="zero1", precision="bf16-params",
                recompute="full")
    base.update(kw)
    return PredictConfig(**base)


@pytest.mark.parametrize("routing", ["balanced", "zipf:1.2", "gini:0.6", "maxvio:0.5"])
@pytest.mark.parametrize("capacity", [0.5, 1.0, 1.25, 2.0])
def test_padded_ranks_carry_exactly_the_capacity(routing, capacity):
    experts, ep, tokens, top_k = 8, 4, 4096, 2
    kw = dict(experts=experts, ep=ep, tokens_per_rank=tokens, top_k=top_k, capacity_factor=capacity)
    padded = rank_load(parse_routing(routing), pad_to_capacity=True, **kw)
    unpadded = rank_load(parse_routing(routing), **kw)
    pairs = tokens * ep * top_k
    cap = math.floor(capacity * pairs / experts)
    # every expert holds its capacity: each rank the same rows, capacity x experts over the group's pairs
    assert padded.padded_rows_factor == pytest.approx(cap * experts / pairs, rel=1e-12)
    assert padded.row_scale == padded.padded_rows_factor
    assert padded.mean_busiest_factor == 1.0 and set(padded.step_factors) == {1.0}
    # the same pairs dropped as without padding: padding adds rows, it keeps no more tokens
    assert padded.dropped_fraction == unpadded.dropped_fraction
    # padding never leaves a rank with fewer rows than the busiest unpadded one had (capacity bounds them; the
    # unpadded factor is a mean over steps of ratios times a mean kept fraction: up to some parts in 100,000 over)
    assert padded.row_scale >= unpadded.mean_busiest_factor * unpadded.row_scale * (1 - 1e-4)


def test_padding_costs_the_capacity_in_compute_all_to_all_and_memory():
    plain = predict(_mixtral(moe_capacity_factor=1.5))
    padded = predict(_mixtral(moe_capacity_factor=1.5, moe_pad_to_capacity=True))
    assert plain.layout.expert_load.dropped_fraction == 0  # a balanced router never fills 1.5x
    assert padded.step_time_s > plain.step_time_s
    assert padded.forward_s > plain.forward_s and padded.backward_s > plain.backward_s
    assert padded.memory.activations_bytes > plain.memory.activations_bytes
    # at capacity 1.0 a balanced router's padding is about its sampling excess: the steps agree closely
    one = predict(_mixtral(moe_capacity_factor=1.0))
    one_padded = predict(_mixtral(moe_capacity_factor=1.0, moe_pad_to_capacity=True))
    assert one_padded.step_time_s == pytest.approx(one.step_time_s, rel=0.02)


def test_more_capacity_padded_never_costs_less():
    steps = [predict(_mixtral(moe_capacity_factor=c, moe_pad_to_capacity=True)).step_time_s for c in (1.0, 1.25, 2.0)]
    assert steps == sorted(steps) and steps[0] < steps[-1]


def test_padding_without_a_capacity_or_experts_is_refused():
    with pytest.raises(ConfigError, match=r"^--moe-pad-to-capacity: .* no --moe-capacity-factor is given"):
        predict(_mixtral(moe_pad_to_capacity=True))
    with pytest.raises(ConfigError, match=r"^--moe-pad-to-capacity: .* but gpt2 is dense"):
        predict(PredictConfig(model="gpt2", gpus=16, link="nvlink", tp=2, moe_pad_to_capacity=True))
    with pytest.raises(ConfigError, match=r"^--moe-pad-to-capacity: 'yes' "):
        predict(_mixtral(moe_capacity_factor=1.25, moe_pad_to_capacity="yes"))


def test_the_cli_takes_the_flag_and_names_it_in_json(capsys):
    from dpsim.cli import main
    import json

    argv = ["predict", "--gpus", "64", "--link", "infiniband", "--gpu", "h100", "--model", "mixtral-8x7b", "--ep", "8",
            "--tp", "2", "--sequence-parallel", "--pp", "2", "--moe-capacity-factor", "1.25", "--json"]
    assert main([*argv, "--moe-pad-to-capacity"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["config"]["moe_pad_to_capacity"] is True and doc["layout"]["expert_load_factor"] == 1.0
    assert main(argv) == 0
    assert "moe_pad_to_capacity" not in json.loads(capsys.readouterr().out)["config"]  # shown only when set
