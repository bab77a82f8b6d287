"""The strategy registry: one record per ``--strategy``, the derived key lists, dispatch and knob refusal."""

from __future__ import annotations

import dataclasses

import pytest

from dpsim.errors import ConfigError
from dpsim.hardware import get_gpu
from dpsim.memory import memory_breakdown
from dpsim.strategies import registry
from dpsim.strategies.build import build_step_program
from dpsim.strategies.program import BuildRequest, StrategyProgram
from dpsim.strategies.registry import (
    BUCKET_CAP_MB,
    FSDP_STRATEGIES,
    FSDP_UNIT,
    REGISTRY,
    SHARDED_STRATEGIES,
    STRATEGIES,
    UNIT_STRATEGIES,
    get_strategy,
    shard_group_size,
)
from dpsim.workload.catalog import get_model
from dpsim.workload.compute import compute_profile
from dpsim.workload.precision import get_precision

BF16 = get_precision("bf16-mixed")
H100 = get_gpu("h100")
GPT2 = get_model("gpt2")
COMPUTE = compute_profile(GPT2, H100, micro_batch=2, precision=BF16, optimizer="adamw")


def test_every_key_has_one_record_and_the_lists_derive_from_them():
    assert list(REGISTRY) == ["ddp", "zero1", "zero2", "zero3", "fsdp", "fsdp-shard-grad-op", "fsdp-hybrid"]
    assert all(r.key == k and r.description and callable(r.build) for k, r in REGISTRY.items())
    assert STRATEGIES == {k: r.description for k, r in REGISTRY.items()}
    assert SHARDED_STRATEGIES == ("zero1", "zero2", "zero3", "fsdp", "fsdp-shard-grad-op", "fsdp-hybrid")
    assert FSDP_STRATEGIES == ("fsdp", "fsdp-shard-grad-op", "fsdp-hybrid")
    assert UNIT_STRATEGIES == ("zero3", "fsdp", "fsdp-shard-grad-op", "fsdp-hybrid")
    assert [k for k, r in REGISTRY.items() if BUCKET_CAP_MB in r.honours] == ["ddp", "zero1", "zero2"]
    assert [k for k, r in REGISTRY.items() if FSDP_UNIT in r.honours] == list(UNIT_STRATEGIES)
    with pytest.raises(dataclasses.FrozenInstanceError):
        REGISTRY["ddp"].key = "x"  # type: ignore[misc]


@pytest.mark.parametrize("key,expected", [("ddp", 1), ("zero1", 32), ("zero3", 32), ("fsdp", 32),
                                          ("fsdp-hybrid", 8)])
def test_shard_group_of_each_record(key, expected):
    assert shard_group_size(key, 32, 8) == expected == get_strategy(key).group_size(32, 8)
    assert get_strategy(key).shards == (expected > 1)


def test_build_dispatches_through_the_registry(monkeypatch):
    seen: list[BuildRequest] = []
    real = REGISTRY["zero2"].build

    def fake(request: BuildRequest) -> StrategyProgram:
        seen.append(request)
        return real(request)

    monkeypatch.setitem(registry.REGISTRY, "zero2", dataclasses.replace(REGISTRY["zero2"], build=fake))
    sp = build_step_program("zero2", GPT2, COMPUTE, precision=BF16, n_gpus=32, gpus_per_node=8, grad_accum=2,
                            bucket_cap_mb=4.0)
    (request,) = seen
    assert request.shard_group_size == 32 and request.grad_accum == 2 and request.bucket_cap_mb == 4.0
    assert sp.communicator_sizes == {"world": 32, "intra": 8, "inter": 4}


@pytest.mark.parametrize("strategy", [k for k, r in REGISTRY.items() if BUCKET_CAP_MB not in r.honours])
def test_a_bucket_cap_is_refused_where_nothing_is_bucketed(strategy):
    with pytest.raises(ConfigError) as info:
        build_step_program(strategy, GPT2, COMPUTE, precision=BF16, n_gpus=16, bucket_cap_mb=25.0)
    message = str(info.value)
    assert message.startswith("--bucket-cap-mb: 25.0 does not apply to --strategy " + strategy)
    assert "ddp, zero1, zero2" in message and len(message.splitlines()) == 1
    with pytest.raises(ConfigError, match="--bucket-cap-mb"):
        memory_breakdown(GPT2, H100, precision=BF16, optimizer="adamw", micro_batch=1, strategy=strategy,
                         n_gpus=16, bucket_cap_mb=25.0)
    # Unset, it builds.
    build_step_program(strategy, GPT2, COMPUTE, precision=BF16, n_gpus=16)


def test_unknown_strategy_names_the_keys():
    with pytest.raises(ConfigError, match="--strategy: 'zero4' is not known; choose one of ddp, zero1"):
        get_strategy("zero4")
