"""Tests of clustersim.units: quantities with units in, SI floats out, and back."""

from __future__ import annotations

import math
import re
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from clustersim import units
from clustersim.units import (
    UnitError,
    format_bandwidth,
    format_flop_rate,
    format_flops,
    format_power,
    format_size,
    format_time,
    parse_bandwidth,
    parse_flop_rate,
    parse_flops,
    parse_power,
    parse_size,
    parse_time,
)

Parse = Callable[[object], float]
Format = Callable[[float], str]

# ----------------------------------------------------------------------------- examples


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("100Gb/s", 1.25e10),
        ("12.5GB/s", 1.25e10),
        ("16 GB/s", 1.6e10),
        ("2TB/s", 2e12),
        ("100Gbps", 1.25e10),
        ("12.5GBps", 1.25e10),
        ("1GiB/s", 2.0**30),
        ("100Gbit/s", 1.25e10),
        ("1kbit/s", 125.0),
        ("1byte/s", 1.0),
        ("8 bits/s", 1.0),
        ("10Mb/s", 1.25e6),
        ("1GB/sec", 1e9),
    ],
)
def test_parse_bandwidth_examples(text: str, expected: float) -> None:
    """Bandwidths in every accepted spelling come out in bytes per second."""
    assert parse_bandwidth(text) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("160MB", 1.6e8),
        ("1GiB", 1073741824.0),
        ("8Gb", 1e9),
        ("1e9B", 1e9),
        ("1KiB", 1024.0),
        ("1kB", 1000.0),
        ("1KB", 1000.0),
        ("2MiB", 2 * 2.0**20),
        ("1TiB", 2.0**40),
        ("1PB", 1e15),
        ("1EB", 1e18),
        ("3 bytes", 3.0),
        ("16 bits", 2.0),
        (".5GB", 5e8),
    ],
)
def test_parse_size_examples(text: str, expected: float) -> None:
    """Sizes come out in bytes, decimal and binary prefixes apart."""
    assert parse_size(text) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1us", 1e-6),
        ("1\u00b5s", 1e-6),
        ("1\u03bcs", 1e-6),
        ("1.5ms", 1.5e-3),
        ("2s", 2.0),
        ("10ns", 1e-8),
        ("1min", 60.0),
        ("2h", 7200.0),
        ("1.5e-6s", 1.5e-6),
        ("3 sec", 3.0),
    ],
)
def test_parse_time_examples(text: str, expected: float) -> None:
    """Times come out in seconds; both micro signs work."""
    assert parse_time(text) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("312TFLOPS", 3.12e14),
        ("312 TFLOP/s", 3.12e14),
        ("1.5PFLOPS", 1.5e15),
        ("2Tflops", 2e12),
        ("10 GFLOPs/s", 1e10),
    ],
)
def test_parse_flop_rate_examples(text: str, expected: float) -> None:
    """FLOP rates come out in FLOP/s."""
    assert parse_flop_rate(text) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("1.2TFLOP", 1.2e12),
        ("5 GFLOPs", 5e9),
        ("3kflop", 3e3),
        ("5e12", 5e12),
        ("1e9", 1e9),
        (5, 5.0),
        (2.5e3, 2.5e3),
    ],
)
def test_parse_flops_examples(value: object, expected: float) -> None:
    """FLOP counts come out in FLOPs; a plain number (even YAML's string "1e9") is a count."""
    assert parse_flops(value) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("700W", 700.0), ("400 W", 400.0), ("1.2kW", 1200.0), ("6.5 kW", 6500.0), ("2MW", 2e6)],
)
def test_parse_power_examples(text: str, expected: float) -> None:
    """Powers come out in watts (a DGX A100's 6.5 kW maximum is 6,500 W)."""
    assert parse_power(text) == pytest.approx(expected)


@pytest.mark.parametrize("text", ["700w", "1.2kw", "700mW", "700 watts", "700J"])
def test_power_spellings_outside_the_table_are_refused(text: str) -> None:
    """Case matters (``w`` is not a unit) and ``mW`` is not taken: milliwatts price nothing."""
    with pytest.raises(UnitError, match="unknown unit"):
        parse_power(text)


# ----------------------------------------------------------------------------- bits and bytes


def test_bits_and_bytes_differ_by_eight() -> None:
    """``b`` is a bit and ``B`` a byte: 100Gb/s is an eighth of 100GB/s."""
    assert parse_bandwidth("100Gb/s") * 8 == parse_bandwidth("100GB/s")


def test_bits_in_a_size_are_eighths_of_a_byte() -> None:
    """``8Gb`` is 1e9 bytes."""
    assert parse_size("8Gb") == 1e9


@pytest.mark.parametrize("prefix", ["K", "M", "G", "T", "P", "E"])
def test_binary_prefix_is_a_power_of_1024(prefix: str) -> None:
    """``Xi`` is 1024**n while ``X`` is 1000**n."""
    n = "KMGTPE".index(prefix) + 1
    assert parse_size(f"1{prefix}iB") == 1024.0**n
    assert parse_size(f"1{prefix}B") == 1000.0**n


@pytest.mark.parametrize("text", ["16GB/s", "16 GB/s", "  16GB/s  ", "16  GB/s"])
def test_spaces_around_and_before_the_unit(text: str) -> None:
    """Spaces between number and unit, and around the value, are allowed."""
    assert parse_bandwidth(text) == 1.6e10


# ----------------------------------------------------------------------------- zero and bare numbers


@pytest.mark.parametrize(
    "parse", [parse_size, parse_bandwidth, parse_time, parse_flop_rate, parse_flops, parse_power]
)
@pytest.mark.parametrize("zero", [0, 0.0, "0", "0.0", " 0 "])
def test_zero_needs_no_unit(parse: Parse, zero: object) -> None:
    """0 is 0 in every unit, so it may be written bare."""
    assert parse(zero) == 0.0


@pytest.mark.parametrize(
    "parse", [parse_size, parse_bandwidth, parse_time, parse_flop_rate, parse_power]
)
@pytest.mark.parametrize("bare", [5, 2.5, "5", "1e9", "100"])
def test_bare_number_needs_a_unit(parse: Parse, bare: object) -> None:
    """A nonzero number without a unit is refused: its unit would be a guess."""
    with pytest.raises(UnitError, match="has no unit"):
        parse(bare)


def test_bare_number_message_gives_examples() -> None:
    """The message says what is expected, with examples."""
    with pytest.raises(UnitError) as info:
        parse_bandwidth(100)
    assert "100 has no unit" in str(info.value)
    assert "100Gb/s" in str(info.value)


def test_zero_with_a_unit_is_fine() -> None:
    """``0GB`` and ``0us`` are zero too."""
    assert parse_size("0GB") == 0.0
    assert parse_time("0us") == 0.0


# ----------------------------------------------------------------------------- wrong kind


@pytest.mark.parametrize(
    ("parse", "text", "found", "expected"),
    [
        (parse_bandwidth, "100Gb", "is a size", "expected a bandwidth such as 100Gb/s or 12.5GB/s"),
        (parse_size, "12.5GB/s", "is a bandwidth", "expected a size"),
        (parse_time, "160MB", "is a size", "expected a time"),
        (parse_flop_rate, "1.2TFLOP", "is a FLOP count", "expected a FLOP rate"),
        (parse_flops, "312TFLOPS", "is a FLOP rate", "expected a FLOP count"),
        (parse_size, "1us", "is a time", "expected a size"),
        (parse_power, "700GB/s", "is a bandwidth", "expected a power such as 700W"),
        (parse_time, "700W", "is a power", "expected a time"),
    ],
)
def test_wrong_kind_of_quantity(parse: Parse, text: str, found: str, expected: str) -> None:
    """A quantity of another kind is refused, naming both kinds."""
    with pytest.raises(UnitError) as info:
        parse(text)
    assert f"'{text}' {found}" in str(info.value)
    assert expected in str(info.value)


def test_wrong_kind_message_is_the_documented_one() -> None:
    """The message reads as the documentation shows it."""
    with pytest.raises(UnitError) as info:
        parse_bandwidth("100Gb")
    assert str(info.value) == "'100Gb' is a size, expected a bandwidth such as 100Gb/s or 12.5GB/s"


def test_unit_error_lists_the_allowed_units() -> None:
    """:attr:`UnitError.allowed` names the units of the expected quantity."""
    with pytest.raises(UnitError) as info:
        parse_bandwidth("100Gb")
    assert "b/s" in info.value.allowed and "B/s" in info.value.allowed


def test_unit_error_is_a_value_error() -> None:
    """UnitError derives from ValueError (pydantic validators rely on it)."""
    assert issubclass(UnitError, ValueError)


# ----------------------------------------------------------------------------- bad values


@pytest.mark.parametrize("value", ["-3GB", -3, -0.5, "-1e9B"])
def test_negative_is_refused(value: object) -> None:
    """Negative sizes do not exist."""
    with pytest.raises(UnitError, match="negative"):
        parse_size(value)


@pytest.mark.parametrize(
    "value", [math.nan, math.inf, -math.inf, "1e999GB", pytest.param(10**400, id="huge-int")]
)
def test_nan_and_inf_are_refused(value: object) -> None:
    """NaN and infinite values are refused."""
    with pytest.raises(UnitError):
        parse_size(value)


@pytest.mark.parametrize("value", ["inf", "nan", "NaN GB", "infs"])
def test_nan_and_inf_words_are_refused(value: str) -> None:
    """The words inf and nan are not numbers here."""
    with pytest.raises(UnitError):
        parse_time(value)


@pytest.mark.parametrize("value", [None, True, False, [1], {"a": 1}, b"1GB"])
def test_non_numbers_are_refused(value: object) -> None:
    """None, booleans, lists, mappings and bytes are refused with a UnitError."""
    with pytest.raises(UnitError, match="is not a size"):
        parse_size(value)


@pytest.mark.parametrize("value", ["", "   "])
def test_empty_text_is_refused(value: str) -> None:
    """Empty text is refused."""
    with pytest.raises(UnitError, match="empty"):
        parse_size(value)


@pytest.mark.parametrize("value", ["GB", "fast", "1.2.3GB", "1 2 GB"])
def test_text_that_is_not_a_quantity(value: str) -> None:
    """Text without a leading number, or with junk, is refused."""
    with pytest.raises(UnitError):
        parse_size(value)


@pytest.mark.parametrize("value", ["100mb", "100mB", "1mb/s", "1mB/s", "3mbps", "2mib"])
def test_lower_case_m_before_b_is_ambiguous(value: str) -> None:
    """``mb``: milli or mega?  Refused, telling how to write it."""
    parse = parse_bandwidth if "/" in value or "ps" in value else parse_size
    with pytest.raises(UnitError) as info:
        parse(value)
    assert "ambiguous" in str(info.value)
    assert "MB" in str(info.value) and "Mb" in str(info.value)


def test_ms_is_still_milliseconds() -> None:
    """The ambiguity check does not touch ``ms``."""
    assert parse_time("5ms") == pytest.approx(5e-3)


def test_unknown_unit_names_the_unit() -> None:
    """An unknown unit is named, with a hint when one is close."""
    with pytest.raises(UnitError) as info:
        parse_time("3 mins")
    assert "unknown unit 'mins'" in str(info.value)
    assert "did you mean 'min'?" in str(info.value)


def test_unit_in_wrong_case_suggests_both_bits_and_bytes() -> None:
    """``gb/s`` could be Gb/s or GB/s: both are suggested, none is guessed."""
    with pytest.raises(UnitError) as info:
        parse_bandwidth("10gb/s")
    assert "'Gb/s'" in str(info.value) and "'GB/s'" in str(info.value)


# ----------------------------------------------------------------------------- formatting


@pytest.mark.parametrize(
    ("formatter", "value", "expected"),
    [
        (format_size, 1.6e8, "160 MB"),
        (format_size, 0, "0 B"),
        (format_size, 512, "512 B"),
        (format_size, 2.0**30, "1.074 GB"),
        (format_bandwidth, 1.25e10, "12.5 GB/s"),
        (format_bandwidth, 2e12, "2 TB/s"),
        (format_time, 1.5e-6, "1.5 us"),
        (format_time, 2e-9, "2 ns"),
        (format_time, 0.03, "30 ms"),
        (format_time, 2.5, "2.5 s"),
        (format_time, 600.0, "600 s"),
        (format_time, 0, "0 s"),
        (format_flop_rate, 3.12e14, "312 TFLOP/s"),
        (format_flops, 1.2e12, "1.2 TFLOP"),
        (format_power, 700.0, "700 W"),
        (format_power, 1200.0, "1.2 kW"),
    ],
)
def test_format_examples(formatter: Format, value: float, expected: str) -> None:
    """Formatters pick a readable unit and 4 significant digits."""
    assert formatter(value) == expected


@pytest.mark.parametrize(
    ("formatter", "parse"),
    [
        (format_size, parse_size),
        (format_bandwidth, parse_bandwidth),
        (format_time, parse_time),
        (format_flop_rate, parse_flop_rate),
        (format_flops, parse_flops),
        (format_power, parse_power),
    ],
)
@given(value=st.floats(min_value=1e-12, max_value=1e21, allow_nan=False, allow_infinity=False))
def test_format_then_parse_round_trips(formatter: Format, parse: Parse, value: float) -> None:
    """What a formatter writes, the matching parser reads back (to 4 digits)."""
    assert parse(formatter(value)) == pytest.approx(value, rel=1e-3)


# ----------------------------------------------------------------------------- table and patterns


@pytest.mark.parametrize("key", sorted(units.QUANTITIES))
def test_unit_pattern_matches_exactly_the_accepted_spellings(key: str) -> None:
    """The JSON Schema pattern of a quantity accepts its spellings and no other."""
    pattern = re.compile(units.unit_pattern(key))
    for spelling, (found, _) in units._UNITS.items():
        assert bool(pattern.match(f"1.5 {spelling}")) == (found == key), spelling


def test_unit_pattern_refuses_bare_numbers_except_for_counts() -> None:
    """Only FLOP counts may be bare numbers in the schema pattern (0 is allowed apart)."""
    assert not re.match(units.unit_pattern("size"), "5")
    assert re.match(units.unit_pattern("flops"), "5e12")


@given(value=st.sampled_from(sorted(units._UNITS)), number=st.floats(0, 1e6))
def test_every_table_spelling_parses(value: str, number: float) -> None:
    """Every spelling in the unit table is accepted by its own parser."""
    key, factor = units._UNITS[value]
    parse = {
        "size": parse_size,
        "bandwidth": parse_bandwidth,
        "time": parse_time,
        "flop_rate": parse_flop_rate,
        "flops": parse_flops,
        "power": parse_power,
    }[key]
    assert parse(f"{number!r}{value}") == pytest.approx(number * factor)


@given(value=st.one_of(st.text(max_size=12), st.floats(), st.integers(), st.none(), st.booleans()))
def test_any_input_gives_a_number_or_a_unit_error(value: object) -> None:
    """Whatever comes in, the result is a finite non-negative float or a UnitError."""
    for parse in (
        parse_size,
        parse_bandwidth,
        parse_time,
        parse_flop_rate,
        parse_flops,
        parse_power,
    ):
        try:
            result = parse(value)
        except UnitError as exc:
            assert str(exc)
        else:
            assert math.isfinite(result) and result >= 0
