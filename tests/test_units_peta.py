"""Sizes in PB / PiB, and negative sizes (issue 11, user trial item 5): `-m 1PB` and `-m 1PiB`
were refused as "not a size" while the bound's own message says "(1 PiB)"; `-m -1GiB` said
"not a size" where the size is merely not positive."""

from __future__ import annotations

import pytest

from kvcalc.errors import KvcalcError
from kvcalc.units import MAX_DEVICE_BYTES, parse_size


@pytest.mark.parametrize(
    "text,n",
    [
        ("1PB", 10**15),  # decimal: 10^15 B
        ("1PiB", 2**50),  # binary: 2^50 = 1,125,899,906,842,624 B
        ("0.5PiB", 2**49),
        ("2.5pb", 2_500_000_000_000_000),  # 2.5 x 10^15
        ("1TiB", 2**40),
        ("3TB", 3 * 10**12),  # TB / TiB were there before; kept
        ("1,024TiB", 2**50),  # 1,024 x 2^40 = 2^50
    ],
)
def test_peta_units(text, n):
    assert parse_size(text) == n


def test_one_pib_is_the_device_bound_and_one_pb_lies_within_it():
    # the bound is 2^50 B = 1 PiB; 1 PB = 10^15 B < 1.1259 x 10^15 B
    assert parse_size("1PiB", "--kv-memory") == MAX_DEVICE_BYTES
    assert parse_size("1PB", "--kv-memory") < MAX_DEVICE_BYTES
    with pytest.raises(
        KvcalcError,
        match=r"^--kv-memory 2,251,799,813,685,248 is beyond any device's memory "
        r"\(at most 1,125,899,906,842,624 B \(1 PiB\)\)$",
    ):
        parse_size("2PiB", "--kv-memory")  # 2 x 2^50 = 2,251,799,813,685,248


@pytest.mark.parametrize("text", ["1P", "1Pi"])
def test_a_bare_peta_prefix_gets_a_did_you_mean(text):
    with pytest.raises(KvcalcError, match=r"^size: '1Pi?' is not a size; did you mean 1PB or 1PiB\?$"):
        parse_size(text)


@pytest.mark.parametrize("text", ["-1GiB", "-1PB", "-0.5", "-1", "-1,024MiB", "-6.51GiB"])
def test_a_negative_size_is_not_positive(text):
    with pytest.raises(KvcalcError, match=f"^--kv-memory must be positive, got {text}$"):
        parse_size(text, "--kv-memory")


def test_minus_zero_is_zero_where_zero_is_allowed():
    assert parse_size("-0", "--cuda-context", allow_zero=True) == 0
    with pytest.raises(KvcalcError, match="^--kv-memory must be positive, got -0$"):
        parse_size("-0", "--kv-memory")


@pytest.mark.parametrize("text", ["-abc", "--1GiB", "-1PiBx", "- 1GiB"])
def test_a_minus_before_what_is_no_size_is_still_no_size(text):
    with pytest.raises(KvcalcError, match=f"^--kv-memory: '{text}' is not a size"):
        parse_size(text, "--kv-memory")


def test_cli_one_line_for_each(cli):
    r = cli("capacity", "llama-3.1-8b", "-m", "-1GiB")
    assert r.exit_code == 2
    assert r.output.splitlines() == ["error: --kv-memory must be positive, got -1GiB"]
    r = cli("capacity", "llama-3.1-8b", "-m", "1PiB", "-f", "json")
    assert r.exit_code == 0
    import json

    assert json.loads(r.stdout)["kv_memory_bytes"] == 2**50
