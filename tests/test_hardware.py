"""GPU presets: sane numbers, cited sources, dtype handling."""

from __future__ import annotations

import pytest

from dpsim.errors import ConfigError
from dpsim.hardware import (ARCHITECTURES, GPU_PRESETS, MATMUL_DTYPES, NVIDIA_MEASURED_EFFICIENCY,
                            POWER_LIMITED_EFFICIENCY, STREAM_FRACTION, GpuSpec, get_gpu)

REQUIRED = ("p100", "v100", "v100-16gb", "v100-pcie", "t4", "rtx2080ti", "a10", "l4", "l40s", "a100",
            "a100-pcie-40gb", "a100-pcie-80gb", "h100", "h100-pcie", "h100-nvl", "gh200", "h200", "b200", "gb200",
            "mi250x", "mi300x")
TF = 1e12
GEFORCE = ("rtx2080ti", "rtx3090")
GEFORCE_BOOST = 1.1


def test_required_presets_exist():
    assert set(REQUIRED) <= set(GPU_PRESETS)


@pytest.mark.parametrize("name", sorted(GPU_PRESETS))
def test_preset_numbers_positive_and_achieved_below_peak(name):
    gpu = GPU_PRESETS[name]
    assert isinstance(gpu, GpuSpec) and gpu.name == name
    assert gpu.description and gpu.architecture in ARCHITECTURES
    assert gpu.memory_bytes > 0 and gpu.memory_bandwidth_bytes_per_s > 0
    assert gpu.sm_count is None or gpu.sm_count > 0
    assert gpu.peak_flops_per_s and gpu.achieved_flops_per_s
    assert set(gpu.peak_flops_per_s) <= set(MATMUL_DTYPES)
    for dtype, rate in gpu.peak_flops_per_s.items():
        assert rate > 0, dtype
    for dtype, rate in gpu.achieved_flops_per_s.items():
        assert dtype in gpu.peak_flops_per_s, dtype
        # GeForce boards run above the rated boost clock the datasheet's peak assumes, and
        # measure up to ~10 % above it; every other board measures below its peak.
        assert 0 < rate <= gpu.peak_flops_per_s[dtype] * (GEFORCE_BOOST if name in GEFORCE else 1.0), dtype
        assert gpu.achieved_rate(dtype) == rate
        assert gpu.peak_rate(dtype) == gpu.peak_flops_per_s[dtype]
    # Every training precision's rate key resolves (fp16 always; the fp32 pair on every GPU).
    assert gpu.achieved_rate("float16") > 0
    assert gpu.achieved_rate("float32") >= gpu.achieved_rate("float32-highest") > 0


@pytest.mark.parametrize("name", sorted(GPU_PRESETS))
def test_sources_non_empty(name):
    sources = GPU_PRESETS[name].sources
    assert sources and all(s.strip() for s in sources)


@pytest.mark.parametrize("name", ["a10", "l4", "l40s", "a100", "a100-pcie-40gb", "h100", "h100-pcie", "h100-nvl",
                                  "gh200", "h200", "b200", "gb200", "mi300x"])
def test_tf32_is_half_the_16_bit_peak_and_full_fp32_is_apart(name):
    gpu = GPU_PRESETS[name]
    # Ampere and later: TF32 dense peak is half the bf16/fp16 dense peak (datasheets).
    assert gpu.peak_flops_per_s["float32"] == pytest.approx(gpu.peak_rate("bfloat16") / 2, rel=0.02)
    # PyTorch's default float32 matmul (no TF32) runs on the CUDA cores, far below TF32.
    assert gpu.peak_flops_per_s["float32-highest"] < gpu.peak_flops_per_s["float32"]


@pytest.mark.parametrize("name", ["p100", "v100", "v100-pcie", "t4", "rtx2080ti", "mi250x"])
def test_no_tf32_so_full_fp32_falls_back_to_the_fp32_peak(name):
    gpu = GPU_PRESETS[name]
    assert "float32-highest" not in gpu.peak_flops_per_s
    assert gpu.achieved_rate("float32-highest") == gpu.achieved_rate("float32")


def test_cited_rows():
    # hardware.csv rows: H013/H020 (A100), H014 (A100 PCIe), H015/H021 (H100; also the 96 GB HBM3
    # GH200, which has no measurement of its own: H016 is the 900 W 141 GiB HBM3e version),
    # H017/H022 (B200), H023 (V100); the MAMF table's GB200 and MI300X rows.
    assert get_gpu("a100").achieved_rate("bfloat16") == pytest.approx(271.2 * TF)
    assert get_gpu("a100").peak_flops_per_s["bfloat16"] == pytest.approx(312 * TF)
    assert get_gpu("a100-pcie-40gb").achieved_rate("bfloat16") == pytest.approx(252.9 * TF)
    assert get_gpu("h100").achieved_rate("bfloat16") == pytest.approx(794.5 * TF)
    assert get_gpu("h100").peak_flops_per_s["bfloat16"] == pytest.approx(989 * TF)
    assert get_gpu("gh200").achieved_rate("bfloat16") == pytest.approx(794.5 * TF)
    assert get_gpu("b200").achieved_rate("bfloat16") == pytest.approx(1745.0 * TF)
    assert get_gpu("b200").peak_flops_per_s["bfloat16"] == pytest.approx(2250 * TF)
    assert get_gpu("gb200").achieved_rate("bfloat16") == pytest.approx(1822.0 * TF)
    assert get_gpu("mi300x").achieved_rate("bfloat16") == pytest.approx(668.4 * TF)
    assert get_gpu("v100").peak_flops_per_s["float16"] == pytest.approx(125 * TF)
    assert get_gpu("a100").peak_flops_per_s["float32-highest"] == pytest.approx(19.5 * TF)
    assert get_gpu("h100").peak_flops_per_s["float32-highest"] == pytest.approx(67 * TF)


def test_unmeasured_nvidia_gpus_use_a_measured_mean_efficiency():
    assert NVIDIA_MEASURED_EFFICIENCY == pytest.approx(
        (271.2 / 312 + 252.9 / 312 + 794.5 / 989 + 828.6 / 989 + 1745.0 / 2250) / 5)
    # The A10 (150 W, no published matmul measurement) takes the datasheet fraction measured on
    # the power-limited boards, which is below what unconstrained boards reach.
    assert POWER_LIMITED_EFFICIENCY == pytest.approx((41.93 / 65 + 70.89 / 121 + 495.93 / 756) / 3)
    assert POWER_LIMITED_EFFICIENCY < NVIDIA_MEASURED_EFFICIENCY
    gpu = get_gpu("a10")
    for dtype in ("float16", "bfloat16", "float32", "float32-highest"):
        assert gpu.achieved_rate(dtype) == pytest.approx(gpu.peak_rate(dtype) * POWER_LIMITED_EFFICIENCY)


def test_community_matmul_measurements():
    # zzc0721/torch-performance-test-data@9d82827 database.md rows (medians where several).
    measured = {("rtx3090", "bfloat16"): 76.58, ("rtx3090", "float16"): 75.64, ("rtx3090", "float32-highest"): 24.79,
                ("t4", "float16"): 41.93, ("l4", "bfloat16"): 70.89, ("l4", "float32"): 31.88,
                ("l40s", "bfloat16"): 269.15, ("v100", "float16"): 94.84, ("v100", "float32"): 14.06,
                ("h100", "float32"): 402.15, ("h100-pcie", "bfloat16"): 495.93, ("h100-pcie", "float32"): 240.43,
                ("h200", "bfloat16"): 790.29, ("a100", "float32-highest"): 19.18}
    for (name, dtype), tflops in measured.items():
        assert get_gpu(name).achieved_rate(dtype) == pytest.approx(tflops * TF), (name, dtype)
    # Power-limited boards measure far below their peak; a GeForce above it (boost clocks).
    for name in ("t4", "l4", "h100-pcie"):
        assert get_gpu(name).achieved_rate("float16") < 0.7 * get_gpu(name).peak_rate("float16"), name
    assert get_gpu("rtx3090").achieved_rate("bfloat16") > get_gpu("rtx3090").peak_rate("bfloat16")


@pytest.mark.parametrize("name", ["a100", "a100-pcie-40gb", "h100", "h200", "gh200", "rtx3090", "l40s", "b200"])
def test_tf32_is_about_half_the_16_bit_rate(name):
    # Measured where published (H100, A100 PCIe, GA102 and AD104 boards), else derived from the
    # measured 16-bit rate by the ratio the same silicon measures.
    gpu = get_gpu(name)
    assert 0.44 < gpu.achieved_rate("float32") / gpu.achieved_rate("bfloat16") < 0.52


def test_h200_same_compute_die_as_h100():
    h100, h200 = get_gpu("h100"), get_gpu("h200")
    assert h200.peak_flops_per_s == h100.peak_flops_per_s
    # Measured bf16 within 1 % of H100's (H015): the same die and clocks.
    assert h200.achieved_rate("bfloat16") == pytest.approx(h100.achieved_rate("bfloat16"), rel=0.01)


def test_memory_datasheet_numbers():
    expected = {"v100": (32e9, 900e9), "a100": (80e9, 2039e9), "a100-pcie-40gb": (40e9, 1555e9),
                "a100-pcie-80gb": (80e9, 1935e9), "h100": (80e9, 3.35e12), "h100-pcie": (80e9, 2.0e12),
                "h100-nvl": (94e9, 3.9e12), "h200": (141e9, 4.8e12), "b200": (180e9, 8e12), "t4": (16e9, 320e9),
                "l4": (24e9, 300e9), "l40s": (48e9, 864e9), "a10": (24e9, 600e9), "mi300x": (192e9, 5.3e12)}
    for name, (capacity, bandwidth) in expected.items():
        gpu = get_gpu(name)
        assert gpu.memory_bytes == pytest.approx(capacity), name
        assert gpu.memory_bandwidth_bytes_per_s == pytest.approx(bandwidth), name


@pytest.mark.parametrize("name", sorted(GPU_PRESETS))
def test_every_preset_streams_below_its_peak_and_cites_how(name):
    gpu = GPU_PRESETS[name]
    assert gpu.stream_bandwidth_bytes_per_s is not None
    assert 0.6 * gpu.memory_bandwidth_bytes_per_s < gpu.streaming_bandwidth_bytes_per_s < gpu.memory_bandwidth_bytes_per_s
    assert any("gpu-benches" in s for s in gpu.sources), name


def test_streaming_bandwidth_is_the_published_measurement_where_there_is_one():
    # te42kyfo/gpu-benches@1c36d509 gpu-stream, 'scale' at full occupancy.
    measured = {"v100": 802e9, "v100-16gb": 802e9, "a100": 1732e9, "a100-pcie-40gb": 1381e9,
                "h100-pcie": 1704e9, "h200": 3165e9}
    for name, rate in measured.items():
        assert get_gpu(name).streaming_bandwidth_bytes_per_s == pytest.approx(rate), name
    assert all(0.6 < f < 0.95 for f in STREAM_FRACTION.values())
    # HBM3e streams at a much smaller fraction of its peak than HBM2e: B200's 8 TB/s is not 2.4x H100's.
    assert get_gpu("b200").streaming_bandwidth_bytes_per_s / get_gpu("h100").streaming_bandwidth_bytes_per_s < 1.9


def test_a_spec_without_a_streaming_measurement_streams_at_its_peak():
    gpu = GpuSpec(name="x", description="test", peak_flops_per_s={"bfloat16": 2.0},
                  achieved_flops_per_s={"bfloat16": 1.0}, memory_bytes=1.0, memory_bandwidth_bytes_per_s=5.0)
    assert gpu.streaming_bandwidth_bytes_per_s == 5.0


def test_mi250x_is_one_gcd_as_pytorch_sees_it():
    gcd = get_gpu("mi250x")
    assert gcd.memory_bytes == pytest.approx(64e9)
    assert gcd.peak_rate("bfloat16") == pytest.approx(383 * TF / 2)
    assert gcd.memory_bandwidth_bytes_per_s == pytest.approx(3276.8e9 / 2)


@pytest.mark.parametrize("name", ["p100", "v100", "v100-16gb", "v100-pcie", "t4", "rtx2080ti"])
def test_pre_ampere_has_no_bf16_and_bf16_lookups_fall_back(name):
    gpu = get_gpu(name)
    assert "bfloat16" not in gpu.peak_flops_per_s
    assert gpu.achieved_rate("bfloat16") == gpu.achieved_rate("float16")


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
        get_gpu("a10").peak_rate("float8")


def test_get_gpu_case_insensitive_and_unknown():
    assert get_gpu("H100") is GPU_PRESETS["h100"]
    with pytest.raises(ConfigError) as err:
        get_gpu("tpu")
    for name in REQUIRED:
        assert name in str(err.value)
