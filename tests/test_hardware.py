"""GPU presets: sane numbers, cited sources, dtype handling."""

from __future__ import annotations

import pytest

from dpsim.errors import ConfigError
from dpsim.hardware import GPU_PRESETS, GpuSpec, get_gpu

REQUIRED = ("v100", "a100", "h100", "h200", "b200")
TF = 1e12


def test_required_presets_exist():
    assert set(REQUIRED) <= set(GPU_PRESETS)


@pytest.mark.parametrize("name", sorted(GPU_PRESETS))
def test_preset_numbers_positive_and_achieved_below_peak(name):
    gpu = GPU_PRESETS[name]
    assert isinstance(gpu, GpuSpec) and gpu.name == name
    assert gpu.description
    assert gpu.memory_bytes > 0 and gpu.memory_bandwidth_bytes_per_s > 0
    assert gpu.peak_flops_per_s and gpu.achieved_flops_per_s
    for dtype, rate in gpu.peak_flops_per_s.items():
        assert rate > 0, dtype
    for dtype, rate in gpu.achieved_flops_per_s.items():
        assert dtype in gpu.peak_flops_per_s, dtype
        assert 0 < rate <= gpu.peak_flops_per_s[dtype], dtype
        assert gpu.achieved_rate(dtype) == rate
        assert gpu.peak_rate(dtype) == gpu.peak_flops_per_s[dtype]


@pytest.mark.parametrize("name", sorted(GPU_PRESETS))
def test_sources_non_empty(name):
    sources = GPU_PRESETS[name].sources
    assert sources and all(s.strip() for s in sources)


@pytest.mark.parametrize("name", ["a100", "h100", "h200", "b200"])
def test_training_dtypes_present(name):
    gpu = GPU_PRESETS[name]
    for dtype in ("bfloat16", "float16", "float32"):
        assert gpu.achieved_rate(dtype) > 0
    # TF32 dense peak is half the bf16 dense peak on Ampere/Hopper/Blackwell.
    assert gpu.peak_flops_per_s["float32"] == pytest.approx(gpu.peak_flops_per_s["bfloat16"] / 2)


def test_cited_rows():
    # hardware.csv rows: H013/H020 (A100), H015/H021 (H100), H017/H022 (B200), H023 (V100).
    assert get_gpu("a100").achieved_rate("bfloat16") == pytest.approx(271.2 * TF)
    assert get_gpu("a100").peak_flops_per_s["bfloat16"] == pytest.approx(312 * TF)
    assert get_gpu("h100").achieved_rate("bfloat16") == pytest.approx(794.5 * TF)
    assert get_gpu("h100").peak_flops_per_s["bfloat16"] == pytest.approx(989 * TF)
    assert get_gpu("b200").achieved_rate("bfloat16") == pytest.approx(1745.0 * TF)
    assert get_gpu("b200").peak_flops_per_s["bfloat16"] == pytest.approx(2250 * TF)
    assert get_gpu("v100").peak_flops_per_s["float16"] == pytest.approx(125 * TF)


def test_h200_same_compute_die_as_h100():
    h100, h200 = get_gpu("h100"), get_gpu("h200")
    assert h200.peak_flops_per_s == h100.peak_flops_per_s
    # Derived: H015 x H019/H018, between H100's and GH200's (H016) measurements.
    assert 794.5 * TF < h200.achieved_rate("bfloat16") < 828.6 * TF
    assert h200.achieved_rate("bfloat16") == pytest.approx(794.5 * 1453.4 / 1402.6 * TF)


def test_memory_datasheet_numbers():
    assert get_gpu("v100").memory_bandwidth_bytes_per_s == pytest.approx(900e9)
    assert get_gpu("a100").memory_bytes == pytest.approx(80e9)
    assert get_gpu("a100").memory_bandwidth_bytes_per_s == pytest.approx(2039e9)
    assert get_gpu("h100").memory_bandwidth_bytes_per_s == pytest.approx(3.35e12)
    assert get_gpu("h200").memory_bytes == pytest.approx(141e9)
    assert get_gpu("h200").memory_bandwidth_bytes_per_s == pytest.approx(4.8e12)
    assert get_gpu("b200").memory_bandwidth_bytes_per_s == pytest.approx(8e12)


def test_v100_has_no_bf16_and_bf16_runs_as_fp16():
    v100 = get_gpu("v100")
    assert "bfloat16" not in v100.peak_flops_per_s
    assert "bfloat16" not in v100.achieved_flops_per_s
    # bf16 mixed precision on Volta runs as fp16 AMP: same rate, never a faster one.
    assert v100.achieved_rate("bfloat16") == v100.achieved_rate("float16")
    assert v100.peak_rate("bfloat16") == v100.peak_flops_per_s["float16"]
    assert v100.achieved_rate("float16") < v100.peak_flops_per_s["float16"]


def test_float16_falls_back_to_bf16_and_unknown_dtype_raises():
    gpu = GpuSpec(name="x", description="test", peak_flops_per_s={"bfloat16": 2.0},
                  achieved_flops_per_s={"bfloat16": 1.0}, memory_bytes=1.0,
                  memory_bandwidth_bytes_per_s=1.0)
    assert gpu.achieved_rate("float16") == 1.0
    with pytest.raises(ConfigError, match="float64"):
        gpu.achieved_rate("float64")
    with pytest.raises(ConfigError, match="float8"):
        get_gpu("a100").achieved_rate("float8")
    with pytest.raises(ConfigError, match="float8"):
        get_gpu("b200").peak_rate("float8")


def test_get_gpu_case_insensitive_and_unknown():
    assert get_gpu("H100") is GPU_PRESETS["h100"]
    with pytest.raises(ConfigError) as err:
        get_gpu("tpu")
    for name in REQUIRED:
        assert name in str(err.value)
