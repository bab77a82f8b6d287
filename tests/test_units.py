"""Unit parsing at the edges: sizes, bandwidths, durations; GB is not GiB."""

from __future__ import annotations

import math

import pytest

from dpsim import units
from dpsim.errors import ConfigError, DpsimError
from dpsim.units import (
    GB,
    MB,
    GiB,
    KiB,
    MiB,
    gbit_per_s_to_bytes_per_s,
    parse_bandwidth_bytes_per_s,
    parse_duration_s,
    parse_size_bytes,
)


def test_decimal_and_binary_constants_differ():
    assert GB == 1e9 and GiB == 2**30
    assert GB != GiB
    assert GiB / GB == pytest.approx(1.073741824)
    assert units.KB == 1e3 and KiB == 1024
    assert MB == 1e6 and MiB == 2**20
    assert units.TB == 1e12 and units.TiB == 2**40


@pytest.mark.parametrize(
    "text, expected",
    [
        ("8", 8),
        (8, 8),
        (8.0, 8),
        ("1K", 1024),
        ("1k", 1024),
        ("1M", 2**20),
        ("1G", 2**30),  # nccl-tests: -e 1G is 1 GiB
        ("1T", 2**40),
        ("25MB", 25e6),  # explicit B: decimal
        ("1GB", 1e9),
        ("1KB", 1e3),
        ("1GiB", 2**30),
        ("1 GiB", 2**30),
        ("2KiB", 2048),
        ("25MiB", 25 * 2**20),
        ("0.5M", 2**19),
        ("1e3", 1000),
        (" 64 ", 64),
    ],
)
def test_parse_size_bytes(text, expected):
    assert parse_size_bytes(text) == pytest.approx(expected, rel=0, abs=0)


def test_size_gb_is_not_gib():
    assert parse_size_bytes("1GB") == GB
    assert parse_size_bytes("1GiB") == GiB
    assert parse_size_bytes("1GB") != parse_size_bytes("1GiB")


@pytest.mark.parametrize("bad", ["", "abc", "1X", "-1", "1GB/s", "G", "1.2.3", "inf", "nan",
                                 "1e999", True, None, -8, float("inf"), float("nan")])
def test_parse_size_bytes_rejects_with_field_name(bad):
    with pytest.raises(ConfigError) as err:
        parse_size_bytes(bad, "-e/--maxbytes")
    msg = str(err.value)
    assert msg.startswith("-e/--maxbytes:"), msg
    assert "\n" not in msg
    assert isinstance(err.value, DpsimError)


def test_parse_size_bytes_error_names_value_and_allowed():
    with pytest.raises(ConfigError, match=r"-b/--minbytes: '1X' is not a size; use .*1GiB"):
        parse_size_bytes("1X", "-b/--minbytes")


@pytest.mark.parametrize(
    "text, expected",
    [
        ("100Gbps", 12.5e9),
        ("100Gb/s", 12.5e9),
        ("100 Gb/s", 12.5e9),
        ("100gbps", 12.5e9),
        ("400Gbps", 50e9),
        ("400GB/s", 400e9),
        ("25 GBps", 25e9),
        ("1Tbps", 125e9),
        ("800Mb/s", 100e6),
        (12.5e9, 12.5e9),  # a bare number is bytes/s
        (0, 0.0),
    ],
)
def test_parse_bandwidth_bytes_per_s(text, expected):
    assert parse_bandwidth_bytes_per_s(text) == pytest.approx(expected, rel=1e-15)


def test_bandwidth_bits_versus_bytes():
    assert parse_bandwidth_bytes_per_s("8Gbps") * 8 == parse_bandwidth_bytes_per_s("8GB/s")
    # Link rates are decimal: 100 Gb/s is 12.5e9 bytes/s, not 12.5 GiB/s.
    assert parse_bandwidth_bytes_per_s("100Gbps") != 12.5 * GiB
    assert gbit_per_s_to_bytes_per_s(100) == parse_bandwidth_bytes_per_s("100Gbps")


@pytest.mark.parametrize("bad", ["", "abc", "100G", "100Gbit/s", "-5GB/s", "fastGB/s", None,
                                 float("inf"), -1.0])
def test_parse_bandwidth_rejects_with_field_name(bad):
    with pytest.raises(ConfigError) as err:
        parse_bandwidth_bytes_per_s(bad, "fabric.nic")
    assert str(err.value).startswith("fabric.nic:")
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    "text, expected",
    [
        ("3us", 3e-6),
        ("3 us", 3e-6),
        ("5µs", 5e-6),
        ("10ns", 10e-9),
        ("1.5ms", 1.5e-3),
        ("2s", 2.0),
        ("2", 2.0),
        (0.25, 0.25),
        (0, 0.0),
    ],
)
def test_parse_duration_s(text, expected):
    assert parse_duration_s(text) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("bad", ["", "abc", "1min", "-1s", "3 hours", True, None, -1, float("nan")])
def test_parse_duration_rejects_with_field_name(bad):
    with pytest.raises(ConfigError) as err:
        parse_duration_s(bad, "--latency")
    assert str(err.value).startswith("--latency:")


def test_results_are_si_floats():
    for value in (parse_size_bytes("1K"), parse_bandwidth_bytes_per_s("1GB/s"), parse_duration_s("1ms")):
        assert isinstance(value, float) and math.isfinite(value)


def test_formatters():
    assert units.format_bytes(25 * MiB) == "25.0 MiB"
    assert units.format_bytes(GiB) == "1.0 GiB"
    assert units.format_bytes(GB) == "953.7 MiB"  # 1 GB is less than 1 GiB
    assert units.format_bytes(512) == "512 B"
    assert units.format_seconds(2.5) == "2.500 s"
    assert units.format_seconds(0.0123) == "12.30 ms"
    assert units.format_seconds(3e-6) == "3.0 us"


def test_bare_number_string_is_bytes_per_s():
    # The docstring's promise: a bare number is bytes/s, as a string too.
    assert parse_bandwidth_bytes_per_s("100") == 100.0


def test_lower_case_b_in_a_size_is_refused_as_bits():
    with pytest.raises(ConfigError, match="bits"):
        parse_size_bytes("1Mb", "-b")


def test_sizes_against_a_limit_differ_when_they_differ():
    """fuzz6: a layout 11 MB over its usable memory printed "needs 75.7 GiB of 75.7 GiB usable"."""
    from dpsim.units import format_bytes_against
    assert format_bytes_against(81256251392.0, 81244769484.8) == ("75.68 GiB", "75.67 GiB")
    assert format_bytes_against(78.0 * 2**30, 75.7 * 2**30) == ("78.0 GiB", "75.7 GiB")  # as format_bytes
    assert format_bytes_against(2**30, 2**30) == ("1.0 GiB", "1.0 GiB")
    over, limit = format_bytes_against(81244769486, 81244769484.8)
    assert over != limit


def test_a_range_reads_in_its_centres_unit():
    """A model-error interval across a unit threshold read ``2.82 h (7737.893 s - 3.40 h, 80%)``."""
    from dpsim.units import format_seconds, format_seconds_as

    assert format_seconds_as(7737.893, 10152.0) == "2.15 h"
    assert format_seconds_as(12240.0, 10152.0) == "3.40 h"
    assert format_seconds_as(0.0009, 0.0012) == "0.90 ms"
    for value, ref in ((257.771, 221.861), (0.0123, 0.0456), (3 * 86400.0, 4 * 86400.0), (5e-6, 6e-6)):
        assert format_seconds_as(value, ref) == format_seconds(value)  # one unit already: unchanged
    assert format_seconds_as(float("inf"), 1.0) == format_seconds(float("inf"))
