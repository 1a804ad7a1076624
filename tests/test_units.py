"""Parsing counts and sizes, and the labelled unit formatting in report.py."""

from __future__ import annotations

import pytest

from kvcalc import report
from kvcalc.errors import KvcalcError
from kvcalc.units import parse_count, parse_counts, parse_size


@pytest.mark.parametrize("text,n", [("8192", 8192), ("32k", 32_768), ("128K", 131_072),
                                     ("1m", 1_048_576), ("8_192", 8192), ("32,000", 32_000)])
def test_parse_count(text, n):
    assert parse_count(text) == n


@pytest.mark.parametrize("text", ["0", "-1", "1.5k", "k", "", "12 tokens"])
def test_parse_count_refuses(text):
    with pytest.raises(KvcalcError):
        parse_count(text)


def test_parse_counts():
    assert parse_counts("1k,8k,32k,128k") == [1024, 8192, 32768, 131072]


@pytest.mark.parametrize("text,n", [
    ("80GB", 80 * 10**9),
    ("6.51GiB", 6_990_059_274),  # 6.51 x 2^30 = 6,990,059,274.24 -> floored
    ("512MiB", 512 * 2**20),
    ("4 GiB", 4 * 2**30),
    ("1234", 1234),
    ("1.5kb", 1500),
])
def test_parse_size(text, n):
    assert parse_size(text) == n


@pytest.mark.parametrize("text", ["0", "80 GBs", "-1GB", "GiB", "1.2.3GB"])
def test_parse_size_refuses(text):
    with pytest.raises(KvcalcError):
        parse_size(text)


def test_sizes_always_labelled():
    # 2,684,354,560 B = 2.684 x 10^9 B = 2.5 x 2^30 B
    assert report.size(2_684_354_560) == "2,684,354,560 B (2.68 GB, 2.50 GiB)"
    assert report.mib(2_281_701_376) == "2176.00 MiB"  # 2176 x 2^20


def test_csv_flattens_breakdown_by_kind():
    flat = report.flatten({"a": 1, "breakdown": [{"kind": "full", "n": 2}, {"kind": "sliding", "n": 3}]})
    assert flat == {"a": 1, "breakdown.full.kind": "full", "breakdown.full.n": 2,
                    "breakdown.sliding.kind": "sliding", "breakdown.sliding.n": 3}
