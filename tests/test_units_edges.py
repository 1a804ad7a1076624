"""`kvcalc/units.py` at its edges: integers passed through, separators, the default names in
messages, empty items, and the reserve parser's zero and unitless forms.

Written for mutation testing (tools/mutation.py). GB = 10^9 B, GiB = 2^30 B, k = 1,024 tokens.
"""

from __future__ import annotations

import pytest

from kvcalc.errors import KvcalcError
from kvcalc.units import parse_count, parse_counts, parse_size


def parse_reserve(text, what):
    """A per-GPU reserve as the CLI parses --cuda-context / --activation-reserve (0 allowed)."""
    return parse_size(text, what, allow_zero=True, hint_unit="MiB")


def test_integers_pass_through():
    assert parse_count(8192) == 8192
    assert parse_size("80B") == 80 and parse_size(2**20) == 1_048_576  # 1 MiB: the least unitless size
    with pytest.raises(KvcalcError, match=r"^size: '80' has no unit, so it would be 80 bytes; did you mean 80GiB\?"):
        parse_size(80)  # a bare number under 1 MiB is a unit left off
    with pytest.raises(KvcalcError, match="^--seq-len must be a positive integer, got 0$"):
        parse_count(0)
    with pytest.raises(KvcalcError, match="^size must be positive, got -1$"):
        parse_size(-1)


def test_default_names_in_messages():
    with pytest.raises(
        KvcalcError, match=r"^--seq-len: 'x' is not a positive whole number \(e\.g\. 16, 8192 or 32k\)$"
    ):
        parse_count("x")
    with pytest.raises(KvcalcError, match=r"^size: 'abc' is not a size \(write 80GB, 6\.51GiB or a byte count\)$"):
        parse_size("abc")
    with pytest.raises(KvcalcError, match="^size must be positive, got 0GB$"):
        parse_size("0GB")
    with pytest.raises(KvcalcError, match="^--seq-len: '1k,,2k' has an empty item"):
        parse_counts("1k,,2k")
    with pytest.raises(KvcalcError, match="^--seq-len: 'y' is not a positive whole number"):
        parse_counts("1k,y")


def test_counts_keep_the_callers_name():
    with pytest.raises(KvcalcError, match="^--batch: 'x' is not a positive whole number"):
        parse_counts("4,x", "--batch")
    assert parse_counts("1k, 8k,1k,32k") == [1024, 8192, 32768]  # a repeat is one point


def test_separators_in_sizes():
    # underscores and commas are dropped: 1_000 B = 1,000 B; 8,192 MiB = 8,192 x 2^20 = 8,589,934,592 B
    assert parse_size("1_000B") == 1000
    assert parse_size("8,192MiB") == 8_589_934_592
    # 6.51 x 2^30 = 6,442,450,944 + 0.51 x 1,073,741,824 = 6,990,059,274.24, floored (Decimal, no float)
    assert parse_size(" 6.51 GiB ") == 6_990_059_274
    assert parse_reserve("1_048_576", "--cuda-context") == 1_048_576
    assert parse_reserve("2,097,152", "--cuda-context") == 2_097_152


def test_reserve_zero_empty_and_names():
    assert parse_reserve("0", "--cuda-context") == 0
    assert parse_reserve("0.0", "--cuda-context") == 0
    assert parse_reserve("2GiB", "--cuda-context") == 2**31
    for text in ("", "."):  # not zero: not a size at all
        with pytest.raises(KvcalcError, match=rf"^--activation-reserve: '{text}' is not a size"):
            parse_reserve(text, "--activation-reserve")
    with pytest.raises(KvcalcError, match="^--cuda-context: 'abc' is not a size"):
        parse_reserve("abc", "--cuda-context")


def test_unitless_reserves_with_separators_are_still_checked():
    # "1_000" and "1,000" are 1,000 unitless bytes, under 1 MiB: refused like "1000"
    for text in ("1_000", "1,000"):
        with pytest.raises(KvcalcError, match=rf"^--cuda-context: '{text}' has no unit, so it would be 1,000 bytes"):
            parse_reserve(text, "--cuda-context")
