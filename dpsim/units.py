"""Units: SI inside, human units only at the edges.

Every quantity inside dpsim is in seconds, bytes, bytes/s or FLOP/s and its name says
so (``latency_s``, ``size_bytes``). Decimal (GB = 1e9) and binary (GiB = 2**30)
prefixes are distinct constants and are never mixed silently: ASTRA-sim and Calculon
disagree by 7 % on this. The parsers here turn what users type (``25MB``, ``1GiB``,
``100Gbps``, ``400GB/s``, ``3us``) into SI floats and raise :class:`ConfigError` with
the field name otherwise.
"""

from __future__ import annotations

import math
import re

from dpsim.errors import ConfigError

KB = 1e3
MB = 1e6
GB = 1e9
TB = 1e12
KiB = 2**10
MiB = 2**20
GiB = 2**30
TiB = 2**40

BITS_PER_BYTE = 8

US = 1e-6
MS = 1e-3
DAY_S = 86_400.0

_SIZE_PREFIX = {
    "": 1, "k": KB, "m": MB, "g": GB, "t": TB,
    "ki": KiB, "mi": MiB, "gi": GiB, "ti": TiB,
}
NUMBER_PATTERN = r"([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)"
"""A plain non-negative decimal number (``1``, ``.5``, ``2e-3``) as one regex group."""
_NUMBER = NUMBER_PATTERN


def _finite_nonneg(value: float, field: str, raw: object) -> float:
    if not math.isfinite(value) or value < 0:
        raise ConfigError(f"{field}: {raw!r} is not a non-negative finite number")
    return value


def parse_size_bytes(raw: str | int | float, field: str = "size") -> float:
    """Parse a size such as ``8``, ``1M``, ``25MB``, ``1GiB`` into bytes.

    nccl-tests reads ``-e 1G`` as 2**30 bytes, so a bare one-letter suffix (``1K``,
    ``1M``, ``1G``) is binary, ``KB``/``MB``/``GB`` decimal and ``KiB``/``MiB``/``GiB``
    binary.
    """
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):
        return _finite_nonneg(float(raw), field, raw)
    text = str(raw).strip()
    if re.fullmatch(_NUMBER + r"\s*[kKmMgGtT]?i?b", text):
        raise ConfigError(f"{field}: {raw!r} looks like bits (lower-case b); sizes are bytes, e.g. 25MB or 1GiB")
    m = re.fullmatch(_NUMBER + r"\s*([kKmMgGtT]?)(i?)(B?)", text)
    if not m:
        raise ConfigError(
            f"{field}: {raw!r} is not a size; use bytes or a unit such as 8, 1K, 25MB, 1GiB"
        )
    number, prefix, binary, byte = m.groups()
    prefix = prefix.lower()
    if prefix and not binary and not byte:
        # nccl-tests convention: -e 1G means 1 GiB.
        scale = _SIZE_PREFIX[prefix + "i"]
    else:
        scale = _SIZE_PREFIX[prefix + binary]
    return _finite_nonneg(float(number) * scale, field, raw)


def parse_bandwidth_bytes_per_s(raw: str | int | float, field: str = "bandwidth") -> float:
    """Parse ``100Gbps``, ``100Gb/s``, ``400GB/s``, ``25 GBps`` into bytes/s.

    A lower-case ``b`` is bits, an upper-case ``B`` bytes; prefixes are decimal as in
    every link datasheet. A bare number is bytes/s.
    """
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):
        return _finite_nonneg(float(raw), field, raw)
    text = str(raw).strip().replace(" ", "")
    if re.fullmatch(_NUMBER, text):
        return _finite_nonneg(float(text), field, raw)
    m = re.fullmatch(_NUMBER + r"([kKmMgGtT]?)(b|B)(ps|/s)", text)
    if not m:
        raise ConfigError(
            f"{field}: {raw!r} is not a bandwidth; use e.g. 100Gbps, 100Gb/s, 400GB/s"
        )
    number, prefix, unit, _ = m.groups()
    value = float(number) * _SIZE_PREFIX[prefix.lower()]
    if unit == "b":
        value /= BITS_PER_BYTE
    return _finite_nonneg(value, field, raw)


def parse_duration_s(raw: str | int | float, field: str = "duration") -> float:
    """Parse ``3us``, ``1.5ms``, ``2s`` (or a bare number of seconds) into seconds."""
    if isinstance(raw, (int, float)) and not isinstance(raw, bool):
        return _finite_nonneg(float(raw), field, raw)
    m = re.fullmatch(_NUMBER + r"\s*(ns|us|µs|ms|s)?", str(raw).strip())
    if not m:
        raise ConfigError(f"{field}: {raw!r} is not a duration; use e.g. 3us, 1.5ms, 2s")
    number, unit = m.groups()
    scale = {"ns": 1e-9, "us": US, "µs": US, "ms": MS, "s": 1.0, None: 1.0}[unit]
    return _finite_nonneg(float(number) * scale, field, raw)


def gbit_per_s_to_bytes_per_s(gbit_per_s: float) -> float:
    """A link rate in Gb/s (datasheet units) as bytes/s."""
    return gbit_per_s * GB / BITS_PER_BYTE


def format_bytes(size_bytes: float) -> str:
    """Human-readable binary size, e.g. ``25.0 MiB``; never more than a few digits."""
    if not math.isfinite(size_bytes):
        return "n/a"
    for unit, scale in (("EiB", 2**60), ("PiB", 2**50), ("TiB", TiB), ("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if abs(size_bytes) >= scale:
            value = size_bytes / scale
            return f"{value:.1f} {unit}" if abs(value) < 1e4 else f"{value:.3g} {unit}"
    return f"{size_bytes:.0f} B"


def format_bytes_against(size_bytes: float, limit_bytes: float) -> tuple[str, str]:
    """``size_bytes`` and ``limit_bytes`` as :func:`format_bytes` writes them, with more decimals while two
    different sizes would print the same: a layout 11 MB over printed "needs 75.7 GiB of 75.7 GiB usable"
    beside its "does not fit"."""
    a, b = format_bytes(size_bytes), format_bytes(limit_bytes)
    if a != b or size_bytes == limit_bytes or not (math.isfinite(size_bytes) and math.isfinite(limit_bytes)):
        return a, b
    unit, scale = next(((u, k) for u, k in (("EiB", 2**60), ("PiB", 2**50), ("TiB", TiB), ("GiB", GiB),
                                              ("MiB", MiB), ("KiB", KiB)) if abs(size_bytes) >= k), ("B", 1))
    for decimals in range(2, 10):
        a, b = (f"{size_bytes / scale:.{decimals}f} {unit}", f"{limit_bytes / scale:.{decimals}f} {unit}")
        if a != b:
            return a, b
    return f"{size_bytes:,.0f} B", f"{limit_bytes:,.0f} B"


def format_number(value: float, decimals: int = 0) -> str:
    """``1,234.5`` with thousands separators up to a trillion, ``3.75e+19`` beyond: never 20 digits."""
    if not math.isfinite(value):
        return "n/a"
    return f"{value:,.{decimals}f}" if abs(value) < 1e12 else f"{value:.3g}"


def seconds_in_words(value_s: float) -> str:
    """``12.3 s``, or ``over 1e308 s`` for a time that overflowed: an error line never prints ``inf``
    (``--input-samples-per-s 1e-308`` loaded a step "in inf s")."""
    return f"{value_s:.3g} s" if math.isfinite(value_s) else "over 1e308 s"


def format_seconds_as(duration_s: float, reference_s: float) -> str:
    """``duration_s`` in the unit :func:`format_seconds` gives ``reference_s``, so that a range reads
    in one unit: ``2.82 h (2.15 h - 3.40 h)``, not ``2.82 h (7737.893 s - 3.40 h)``."""
    if not (math.isfinite(duration_s) and math.isfinite(reference_s)):
        return format_seconds(duration_s)
    ref = abs(reference_s)
    if ref >= 2 * DAY_S:
        days = duration_s / DAY_S
        return f"{days:,.1f} d" if abs(days) < 1e5 else f"{days:.3g} d"
    if ref >= 1e4:
        return f"{duration_s / 3600:.2f} h"
    if ref >= 1:
        return f"{duration_s:.3f} s"
    if ref >= 1e-3:
        return f"{duration_s * 1e3:.2f} ms"
    text = f"{duration_s * 1e6:.1f} us"
    if duration_s > 0 and text == "0.0 us":
        # plan --rank goodput at --mtbf-gpu 1e-308s said "fails every 0.0 us"; as goodput words it, three
        # significant digits in seconds.
        return f"{duration_s:.3g} s"
    return text


def format_seconds(duration_s: float) -> str:
    """Human-readable duration, e.g. ``12.3 ms``, ``2.50 h``, ``3.1 d``; never more than a few digits."""
    if not math.isfinite(duration_s):
        return "n/a"
    if duration_s < 0:
        return "-" + format_seconds(-duration_s)
    return format_seconds_as(duration_s, duration_s)
