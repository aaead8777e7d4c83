"""Sizes as users type them."""

import pytest

from ibdiag.errors import UsageError
from ibdiag.units import format_bytes, format_seconds, parse_size, parse_size_spec


@pytest.mark.parametrize(
    "text, expected",
    [
        ("512", 512),
        ("4K", 4096),
        ("64K", 65536),
        ("1M", 2**20),
        ("25MiB", 25 * 2**20),
        ("8G", 2**33),
        ("8GiB", 2**33),
        ("16GB", 16 * 10**9),
        ("1.5K", 1536),
    ],
)
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "abc", "4X", "-4K", "1.3", "2P", "1e400"])
def test_parse_size_rejects(text):
    with pytest.raises(UsageError) as e:
        parse_size(text)
    assert e.value.hint


@pytest.mark.parametrize(
    ("text", "suggest"), [("8Gb", "8GB"), ("2kb", "2KB"), ("64Kib", "64KiB"), ("512b", "512")]
)
def test_a_size_in_bits_is_refused(text, suggest):
    """Gb is bits everywhere else in ibdiag (400 Gb/s links): 8Gb is not silently 8e9 bytes."""
    with pytest.raises(UsageError) as e:
        parse_size(text, what="--grad-bytes")
    assert "bits" in e.value.message and "--grad-bytes" in e.value.message
    assert suggest in e.value.hint


def test_size_spec_list_and_range():
    assert parse_size_spec("4K,64K,1M") == (4096, 65536, 2**20)
    assert parse_size_spec("4K:64K") == (4096, 8192, 16384, 32768, 65536)
    assert parse_size_spec("8:8G")[-1] == 2**33
    assert parse_size_spec("1M:16M", factor=4) == (2**20, 2**22, 2**24)
    assert parse_size_spec("1M:1M") == (2**20,)


@pytest.mark.parametrize("text", ["64M:4K", "4K:", ":4K", "4K,,8K", "4K:8K:16K", "0:4K"])
def test_size_spec_rejects(text):
    with pytest.raises(UsageError):
        parse_size_spec(text)


def test_size_spec_factor_must_grow_and_stay_bounded():
    with pytest.raises(UsageError):
        parse_size_spec("4K:64K", factor=1)
    with pytest.raises(UsageError, match="more than"):
        parse_size_spec("1:1M", factor=1.1)


def test_formatting():
    assert format_bytes(4096) == "4 KiB"
    assert format_bytes(25 * 2**20) == "25 MiB"
    assert format_bytes(8) == "8 B"
    assert format_bytes(None) == "-"
    assert format_seconds(0.000012) == "12 µs"
    assert format_seconds(0.639) == "639 ms"
    assert format_seconds(2.0) == "2 s"
