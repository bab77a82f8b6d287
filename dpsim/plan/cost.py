"""Cost: GPU-hour prices per GPU preset, time-to-train and cost for a token budget.

Every preset has a default on-demand price per GPU-hour with its source. Prices move
often (and negotiated or reserved rates are far lower), so every entry point takes an
override: one price for every GPU (``2.5``) or per preset (``{"h100": 2.5}``; on the
command line ``--gpu-hour-usd h100=2.5``).

Time-to-train = budget / throughput (tokens, or samples for image models); GPU-hours =
GPUs x time; cost = GPU-hours x price. Only the steady-state step is counted: no
start-up, checkpointing, evaluation or failures (multiply by your own goodput factor).

>>> from dpsim.cost import training_cost
>>> c = training_cost(tokens_per_s=1e6, n_gpus=64, gpu="h100", tokens=1e12)
>>> round(c.time_s / 86400, 2), round(c.cost_usd)
(11.57, 109422)
"""

from __future__ import annotations

import math
import re
from typing import Mapping

from dpsim.errors import ConfigError
from dpsim.frozen import frozen_dataclass
from dpsim.hardware import GPU_PRESETS
from dpsim.limits import MAX_GPU_HOUR_USD, MAX_TOKENS, plain_number, short

_MODAL_LAMBDA = ("techbytes.app/posts/serverless-gpu-pricing-matrix-modal-replicate-lambda-2026 (prices verified "
                 "May 7, 2026 from the vendors' pricing pages)")
_COREWEAVE = ("CoreWeave on-demand list price (coreweave.com/pricing, as listed Feb 2026; "
              "the same table is quoted in kaelresearch.com/blog/gpu-economics-real-inference-costs)")


@frozen_dataclass
class GpuPrice:
    """Default rental price of one GPU preset."""

    gpu: str
    """GPU preset key (see :mod:`dpsim.hardware`)."""
    usd_per_gpu_hour: float
    """US dollars per GPU per hour."""
    source: str
    """Where the number comes from."""


GPU_HOUR_PRICES: dict[str, GpuPrice] = {
    p.gpu: p for p in (
        # One provider for every current GPU, so that presets compare like for like:
        # 8-GPU HGX instances, price per instance-hour / 8.
        GpuPrice(gpu="a100", usd_per_gpu_hour=21.60 / 8,
                 source=f"{_COREWEAVE}: NVIDIA A100 80GB, 8-GPU instance $21.60/h -> $2.70 per GPU-hour"),
        GpuPrice(gpu="h100", usd_per_gpu_hour=49.24 / 8,
                 source=f"{_COREWEAVE}: NVIDIA HGX H100, 8-GPU instance $49.24/h -> $6.155 per GPU-hour"),
        GpuPrice(gpu="h200", usd_per_gpu_hour=50.44 / 8,
                 source=f"{_COREWEAVE}: NVIDIA HGX H200, 8-GPU instance $50.44/h -> $6.305 per GPU-hour"),
        GpuPrice(gpu="b200", usd_per_gpu_hour=68.80 / 8,
                 source=f"{_COREWEAVE}: NVIDIA HGX B200, 8-GPU instance $68.80/h -> $8.60 per GPU-hour"),
        # CoreWeave no longer lists V100 in 8-GPU instances; its per-GPU component price was
        # $0.80/h for a Tesla V100 NVLINK (SXM2). Used for both memory sizes.
        GpuPrice(gpu="v100", usd_per_gpu_hour=0.80,
                 source="CoreWeave legacy per-GPU component price: Tesla V100 NVLINK $0.80 per GPU-hour"),
        GpuPrice(gpu="v100-16gb", usd_per_gpu_hour=0.80,
                 source="CoreWeave legacy per-GPU component price: Tesla V100 NVLINK $0.80 per GPU-hour "
                        "(same price as the 32 GB part)"),
        # GPUs CoreWeave does not list: single-GPU on-demand prices of other clouds, each named.
        GpuPrice(gpu="v100-pcie", usd_per_gpu_hour=0.80,
                 source="no separate V100 PCIe price found: the V100 SXM2 price, CoreWeave legacy $0.80 per GPU-hour"),
        GpuPrice(gpu="p100", usd_per_gpu_hour=0.60,
                 source="gpuperhour.com/compare/p100-vs-t4: LeaderGPU Tesla P100 $0.60/GPU/hr"),
        GpuPrice(gpu="t4", usd_per_gpu_hour=0.5904,
                 source=_MODAL_LAMBDA + ": Modal T4 $0.5904/hr"),
        GpuPrice(gpu="l4", usd_per_gpu_hour=0.7992,
                 source=_MODAL_LAMBDA + ": Modal L4 $0.7992/hr"),
        GpuPrice(gpu="l40s", usd_per_gpu_hour=1.9512,
                 source=_MODAL_LAMBDA + ": Modal L40S $1.9512/hr"),
        GpuPrice(gpu="a10", usd_per_gpu_hour=0.86,
                 source=_MODAL_LAMBDA + ": Lambda A10 $0.86/hr"),
        GpuPrice(gpu="a100-pcie-40gb", usd_per_gpu_hour=1.48,
                 source=_MODAL_LAMBDA + ": Lambda A100 40GB $1.48/hr"),
        GpuPrice(gpu="a100-pcie-80gb", usd_per_gpu_hour=2.4984,
                 source=_MODAL_LAMBDA + ": Modal A100 80GB $2.4984/hr"),
        GpuPrice(gpu="h100-pcie", usd_per_gpu_hour=2.86,
                 source=_MODAL_LAMBDA + ": Lambda 1x H100 PCIe $2.86/hr"),
        GpuPrice(gpu="h100-nvl", usd_per_gpu_hour=3.07,
                 source="gpu.blog/gpus/nvidia-h100-nvl: RunPod on-demand H100 NVL $3.07/hour"),
        GpuPrice(gpu="rtx3090", usd_per_gpu_hour=0.00019 * 3600,
                 source="docs.runpod.io/serverless/pricing: L4, A5000, 3090 (24 GB) flex $0.00019 per second "
                        "-> $0.684 per GPU-hour"),
        GpuPrice(gpu="a40", usd_per_gpu_hour=0.00034 * 3600,
                 source="docs.runpod.io/serverless/pricing: A6000, A40 (48 GB) flex $0.00034 per second "
                        "-> $1.224 per GPU-hour"),
        GpuPrice(gpu="a6000", usd_per_gpu_hour=0.00034 * 3600,
                 source="docs.runpod.io/serverless/pricing: A6000, A40 (48 GB) flex $0.00034 per second "
                        "-> $1.224 per GPU-hour"),
        GpuPrice(gpu="rtx4090", usd_per_gpu_hour=0.00031 * 3600,
                 source="docs.runpod.io/serverless/pricing: 4090 PRO (24 GB) flex $0.00031 per second "
                        "-> $1.116 per GPU-hour"),
        GpuPrice(gpu="rtx5090", usd_per_gpu_hour=0.69,
                 source="deploybase.ai/articles/rtx-5090-cloud: RunPod RTX 5090 $0.69/hr"),
        GpuPrice(gpu="a100-40gb", usd_per_gpu_hour=1.99,
                 source="datareceipts/data-receipts 109-gpu-pricing/compare.json (read 2026-11-09): Lambda "
                        "A100 SXM 40GB, 1 GPU, $1.99/hr"),
        GpuPrice(gpu="v100-pcie-16gb", usd_per_gpu_hour=0.80,
                 source="no separate V100 PCIe price found: the V100 SXM2 price, CoreWeave legacy $0.80 per GPU-hour"),
        GpuPrice(gpu="h800", usd_per_gpu_hour=49.24 / 8,
                 source="no list price found in the sources used here: the HGX H100 price ($6.155 per GPU-hour, "
                        "CoreWeave) as a placeholder; override with --gpu-hour-usd h800=PRICE"),
        GpuPrice(gpu="h20", usd_per_gpu_hour=49.24 / 8,
                 source="no list price found in the sources used here: the HGX H100 price ($6.155 per GPU-hour, "
                        "CoreWeave) as a placeholder; override with --gpu-hour-usd h20=PRICE"),
        GpuPrice(gpu="rtx2080ti", usd_per_gpu_hour=0.5904,
                 source="no public list price found: the T4 price ($0.5904/hr, Modal) as a placeholder; "
                        "override with --gpu-hour-usd rtx2080ti=PRICE"),
        GpuPrice(gpu="gh200", usd_per_gpu_hour=49.24 / 8,
                 source="no list price found in the sources used here: the HGX H100 price ($6.155 per GPU-hour, "
                        "CoreWeave) as a placeholder; override with --gpu-hour-usd gh200=PRICE"),
        *(GpuPrice(gpu=g, usd_per_gpu_hour=68.80 / 8,
                   source="no list price found in the sources used here: the HGX B200 price ($8.60 per GPU-hour, "
                          f"CoreWeave) as a placeholder; override with --gpu-hour-usd {g}=PRICE")
          for g in ("gb200", "b300", "gb300")),
        GpuPrice(gpu="mi300x", usd_per_gpu_hour=1.85,
                 source="gpu.blog/gpus/instinct-mi300x-mi300x: Vultr on-demand MI300X $1.85/hour"),
        GpuPrice(gpu="mi250x", usd_per_gpu_hour=1.85 / 2,
                 source="no list price found: half the MI300X price ($1.85/hour, Vultr) per GCD as a placeholder; "
                        "override with --gpu-hour-usd mi250x=PRICE"),
    )
}
"""Default on-demand price per GPU-hour of every GPU preset, each with its source."""

PriceOverride = float | Mapping[str, float] | None
"""One price for every GPU, prices per GPU preset, or ``None`` (the defaults)."""

_COUNT_SUFFIX = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9, "g": 1e9, "t": 1e12, "p": 1e15}


def parse_count(raw: str | int | float, field: str = "tokens") -> float:
    """Parse a decimal count such as ``1T``, ``300B``, ``2.5e12`` or ``15M`` (>= 1).

    Suffixes are decimal (K = 1e3, M = 1e6, B or G = 1e9, T = 1e12, P = 1e15), as token
    budgets are quoted ("1T tokens").
    """
    if isinstance(raw, bool):
        raise ConfigError(f"{field}: {raw!r} is not a count; use e.g. 1T, 300B, 2.5e12")
    if isinstance(raw, (int, float)):
        value = float(raw)
    else:
        m = re.fullmatch(r"([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([kKmMbBgGtTpP]?)", str(raw).strip())
        if not m:
            raise ConfigError(f"{field}: {raw!r} is not a count; use e.g. 1T, 300B, 2.5e12")
        value = float(m.group(1)) * _COUNT_SUFFIX[m.group(2).lower()]
    # At least one: a budget of 1e-308 tokens passed "> 0" and costed a run at 1.7e-313 USD.
    if not (math.isfinite(value) and value >= 1):
        raise ConfigError(f"{field}: {raw!r} is not valid; expected a count >= 1 (e.g. 1T, 300B)")
    if value > MAX_TOKENS:  # the CLI checked this after parsing; dpsim.sweep(tokens=1e300) did not (1e293-s times)
        raise ConfigError(f"{field}: {value:.3g} is not valid; expected at most {MAX_TOKENS:.0e}")
    return value


def format_count(value: float) -> str:
    """A count with a decimal suffix, the way budgets are quoted: ``1T``, ``300B``, ``2.5M``."""
    if abs(value) >= 1e18:  # beyond the largest suffix: no "1e+03P"
        return f"{value:.3g}"
    for suffix, scale in (("P", 1e15), ("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g}{suffix}"
    return f"{value:.3g}"


def _check_price(value: object, field: str) -> float:
    if isinstance(value, str):
        # Numeric text as the command line reads it (``--gpu-hour-usd 2.5``, ``$2.5``): a sweep file's quoted
        # ``gpu_hour_usd: "2.5"`` (or the API's gpu_hour_usd="2.5") was refused while the flag took the same text.
        value = _number(value.strip(), field)
    value = plain_number(value, float)  # numpy's scalars, as the other numbers of the API take them
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{field}: {value!r} is not a price; expected US dollars per GPU-hour, a number >= 0")
    # Bounded here, not only in the CLI's check_prices: `dpsim plan --gpu-hour-usd 1e250` (and plan's
    # API) costed layouts at 7e254 USD in its JSON, and 1e308 overflowed every cost to null while
    # --rank cost still ranked by it.
    if not (math.isfinite(value) and 0 <= value <= MAX_GPU_HOUR_USD):
        raise ConfigError(f"{field}: {value!r} is not valid; expected US dollars per GPU-hour, a number >= 0 and "
                          f"<= {MAX_GPU_HOUR_USD:,.0f}")
    return float(value)


def check_price_override(override: PriceOverride, field: str = "gpu_hour_usd") -> PriceOverride:
    """Validate a price override: a number >= 0, or a mapping of GPU preset to number."""
    if override is None:
        return None
    if isinstance(override, Mapping):

        out = {}
        for gpu, price in override.items():
            key = str(gpu).lower()
            if key not in GPU_PRESETS:
                raise ConfigError(f"{field}: {gpu!r} is not a GPU preset; choose among "
                                  f"{', '.join(sorted(GPU_PRESETS))}")
            if key in out:  # {h100: 1, H100: 2}: one GPU, two prices, the later silently kept
                raise ConfigError(f"{field}: {gpu!r} is given two prices ({out[key]:g} and {short(price)}); give "
                                  f"one price per GPU")
            out[key] = _check_price(price, f"{field}.{key}")
        return out
    return _check_price(override, field)


def parse_price_overrides(items: list[str] | tuple[str, ...], field: str = "--gpu-hour-usd") -> PriceOverride:
    """Command-line prices: ``2.5`` (every GPU) or ``h100=2.5`` (repeatable, per preset)."""
    if not items:
        return None
    flat = [part.strip() for item in items for part in str(item).split(",")]
    if not all(flat):
        # `--gpu-hour-usd ''` (or 'h100=1,,a100=2') read as no price there: the default prices, in silence.
        empty = next(str(item) for item in items if not all(p.strip() for p in str(item).split(",")))
        raise ConfigError(f"{field}: {short(empty)} has an empty price; give one price for every GPU (2.5) or "
                          f"GPU=PRICE pairs (h100=2.5), comma-separated without empty items")
    if len(flat) == 1 and "=" not in flat[0]:
        return check_price_override(_number(flat[0], field), field)
    prices: dict[str, float] = {}
    for part in flat:
        gpu, sep, value = part.partition("=")
        if not sep or not gpu.strip():
            raise ConfigError(f"{field}: {part!r} is not valid; give one price for every GPU (2.5) "
                              f"or GPU=PRICE pairs (h100=2.5)")
        key = gpu.strip().lower()
        if key in prices:  # the later price silently replaced the earlier (h100=1 --gpu-hour-usd H100=9)
            raise ConfigError(f"{field}: {gpu.strip()!r} is given two prices ({prices[key]:g} and {value.strip()}); "
                              f"give one price per GPU")
        prices[key] = _number(value.strip(), f"{field} {gpu.strip()}")
    return check_price_override(prices, field)


def _number(text: str, field: str) -> float:
    try:
        return float(text.lstrip("$"))
    except ValueError:
        raise ConfigError(f"{field}: {text!r} is not a price; expected US dollars per GPU-hour, "
                          f"a number >= 0") from None


def gpu_hour_price(gpu: str, override: PriceOverride = None) -> float:
    """US dollars per GPU-hour of ``gpu``: the override if it covers ``gpu``, else the default."""
    key = gpu.lower()
    override = check_price_override(override)
    if isinstance(override, Mapping):
        if key in override:
            return override[key]
    elif override is not None:
        return override
    try:
        return GPU_HOUR_PRICES[key].usd_per_gpu_hour
    except KeyError:
        raise ConfigError(f"gpu_hour_usd: no default price for GPU {gpu!r}; give one "
                          f"(--gpu-hour-usd {key}=PRICE)") from None


@frozen_dataclass
class TrainingCost:
    """Time and money to process a training budget at a predicted throughput."""

    budget: float
    """Tokens (or samples) to train on."""
    budget_unit: str
    """``tokens`` or ``samples``."""
    rate_per_s: float
    """Throughput in ``budget_unit`` per second."""
    n_gpus: int
    """GPUs rented."""
    usd_per_gpu_hour: float
    """Price of one GPU-hour."""
    time_s: float
    """Wall-clock time to train."""
    gpu_hours: float
    """GPUs x hours."""
    cost_usd: float
    """GPU-hours x price."""

    @property
    def time_days(self) -> float:
        """Wall-clock time in days."""
        return self.time_s / 86400.0


def training_cost(*, n_gpus: int, gpu: str, tokens_per_s: float | None = None,
                  samples_per_s: float | None = None, tokens: float | str | None = None,
                  samples: float | str | None = None, gpu_hour_usd: PriceOverride = None) -> TrainingCost:
    """Time-to-train and cost for a budget of ``tokens`` (or ``samples``).

    Give exactly one budget and the matching throughput.
    """
    if (tokens is None) == (samples is None):
        raise ConfigError("budget: give a token budget (--tokens) or a sample budget (--samples), exactly one")
    if not (isinstance(n_gpus, int) and n_gpus >= 1):
        raise ConfigError(f"n_gpus: {n_gpus!r} is not valid; expected an integer >= 1")
    if tokens is not None:
        budget, unit, rate = parse_count(tokens, "--tokens"), "tokens", tokens_per_s
        if rate is None:
            raise ConfigError("--tokens: this model has no tokens per sample (an image model); "
                              "give a sample budget (--samples) instead")
    else:
        budget, unit, rate = parse_count(samples, "--samples"), "samples", samples_per_s
        if rate is None:
            raise ConfigError("--samples: no samples_per_s given")
    if not (math.isfinite(rate) and rate > 0):
        raise ConfigError(f"{unit}_per_s: {rate!r} is not valid; expected a number > 0")
    price = gpu_hour_price(gpu, gpu_hour_usd)
    time_s = budget / rate
    gpu_hours = n_gpus * time_s / 3600.0
    return TrainingCost(budget=budget, budget_unit=unit, rate_per_s=rate, n_gpus=n_gpus,
                        usd_per_gpu_hour=price, time_s=time_s, gpu_hours=gpu_hours,
                        cost_usd=gpu_hours * price)


def prediction_cost(prediction, *, tokens: float | str | None = None, samples: float | str | None = None,
                    gpu_hour_usd: PriceOverride = None) -> TrainingCost:
    """:func:`training_cost` of a :class:`~dpsim.predict.Prediction`."""
    return training_cost(n_gpus=prediction.n_gpus, gpu=prediction.gpu, tokens_per_s=prediction.tokens_per_s,
                         samples_per_s=prediction.samples_per_s, tokens=tokens, samples=samples,
                         gpu_hour_usd=gpu_hour_usd)
