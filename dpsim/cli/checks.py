"""Checks shared by several commands, made before any work starts: size sweeps, budgets, prices, torch.

The limits themselves are in :mod:`dpsim.limits`; each failure is one
:class:`~dpsim.errors.ConfigError` line naming the flag, the value and what is allowed.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from typing import Any

from dpsim.errors import ConfigError
from dpsim.limits import MAX_GPU_HOUR_USD, MAX_TOKENS, short
from dpsim.units import format_bytes, parse_size_bytes
from dpsim.wording import warn


def size_sweep(minbytes: str, maxbytes: str, stepfactor: float, *, max_bytes: float,
               flags: tuple[str, str, str] = ("-b/--minbytes", "-e/--maxbytes", "-f/--stepfactor"),
               ) -> tuple[float, float, int]:
    """``(lo, hi, rows)`` of an nccl-tests-style size sweep, checked: ``1 <= lo <= hi <= max_bytes``,
    a factor > 1 and at most :data:`~dpsim.limits.MAX_SIZE_ROWS` rows."""
    from dpsim.predict.collective import check_sizes  # lazy: the CLI's start-up loads no cost model

    b_flag, e_flag, f_flag = flags
    lo = parse_size_bytes(minbytes, b_flag)
    hi = parse_size_bytes(maxbytes, e_flag)
    for flag, raw, value in ((b_flag, minbytes, lo), (e_flag, maxbytes, hi)):
        if value > max_bytes:  # named by the text given, which the library does not see
            raise ConfigError(f"{flag}: {short(raw)} is not valid; expected at most {format_bytes(max_bytes)}")
    if lo < 1 or hi < lo:
        raise ConfigError(f"{b_flag.split('/')[0]}/{e_flag.split('/')[0]}: {short(minbytes)}..{short(maxbytes)} is "
                          f"not a valid range; need 1 byte <= minbytes <= maxbytes")
    return lo, hi, check_sizes(lo, hi, stepfactor, max_bytes=max_bytes, flags=flags)


def warn_other_gpu(config: Any) -> None:
    """Warn once when ``config`` names a ``--gpu`` other than the one its ``--calibration`` profile measured
    (:func:`~dpsim.profile.calibrated.other_gpu_note`): an A100 node's profile with ``--gpu h100`` was taken in
    silence, its NVLink3 fits and A100 compute rates standing for an H100's."""
    if config.cluster.gpu is None or config.calibration.profile is None:
        return
    from dpsim.hardware import get_gpu
    from dpsim.profile.calibrated import other_gpu_note
    from dpsim.profile.io import load_profile

    note = other_gpu_note(load_profile(config.calibration.profile), get_gpu(config.cluster.gpu))
    if note is not None:
        warn(note)


def check_budget(value: float | None, flag: str) -> float | None:
    """A token or sample budget (already parsed) at most :data:`~dpsim.limits.MAX_TOKENS`."""
    if value is not None and not value <= MAX_TOKENS:
        raise ConfigError(f"{flag}: {value:.3g} is not valid; expected at most {MAX_TOKENS:.0e}")
    return value


def check_prices(prices: float | Mapping[str, float] | None, flag: str) -> Any:
    """Prices per GPU-hour (already parsed) at most :data:`~dpsim.limits.MAX_GPU_HOUR_USD`."""
    items = prices.items() if isinstance(prices, Mapping) else [("", prices)] if prices is not None else []
    for gpu, price in items:
        if not price <= MAX_GPU_HOUR_USD:
            where = f" {gpu}" if gpu else ""
            raise ConfigError(f"{flag}{where}: {price:g} USD per GPU-hour is not valid; expected at most "
                              f"{MAX_GPU_HOUR_USD:,.0f}")
    return prices


def require_torch(feature: str) -> None:
    """One line naming the ``dpsim[torch]`` extra when ``feature`` needs PyTorch and it is not installed."""
    try:
        found = importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        raise ConfigError(f"{feature} needs PyTorch, which is not installed; install it with: "
                          f"pip install 'dpsim[torch]'")
