"""Parsing counts and sizes, and the labelled unit formatting in report.py."""

from __future__ import annotations

import re

import pytest

from kvcalc import report
from kvcalc.errors import KvcalcError
from kvcalc.units import parse_count, parse_counts, parse_size


@pytest.mark.parametrize(
    "text,n",
    [("8192", 8192), ("32k", 32_768), ("128K", 131_072), ("1m", 1_048_576), ("8_192", 8192), ("32,000", 32_000)],
)
def test_parse_count(text, n):
    assert parse_count(text) == n


@pytest.mark.parametrize(
    "text,needle",
    [
        ("0", "--seq-len must be a positive integer, got 0"),
        ("-1", "--seq-len must be a positive integer, got -1"),
        ("1.5k", "'1.5k' is not a positive whole number"),
        ("k", "'k' is not a positive whole number"),
        ("", "'' is not a positive whole number"),
        ("12 tokens", "'12 tokens' is not a positive whole number"),
    ],
)
def test_parse_count_refuses(text, needle):
    with pytest.raises(KvcalcError, match=re.escape(needle)):
        parse_count(text)


def test_parse_counts():
    assert parse_counts("1k,8k,32k,128k") == [1024, 8192, 32768, 131072]


@pytest.mark.parametrize(
    "text,n",
    [
        ("80GB", 80 * 10**9),
        ("6.51GiB", 6_990_059_274),  # 6.51 x 2^30 = 6,990,059,274.24 -> floored
        ("512MiB", 512 * 2**20),
        ("4 GiB", 4 * 2**30),
        ("1234B", 1234),  # plain bytes: whole, any size, with the unit written
        ("1048576", 1_048_576),  # no unit: a byte count of at least 1 MiB
        ("1.5kb", 1500),
    ],
)
def test_parse_size(text, n):
    assert parse_size(text) == n


@pytest.mark.parametrize(
    "text,needle",
    [
        ("0", "size must be positive, got 0"),
        ("80 GBs", "'80 GBs' is not a size"),
        ("-1GB", "size must be positive, got -1GB"),
        ("GiB", "'GiB' is not a size"),
        ("1.2.3GB", "'1.2.3GB' is not a size"),
    ],
)
def test_parse_size_refuses(text, needle):
    with pytest.raises(KvcalcError, match=re.escape(needle)):
        parse_size(text)


def test_sizes_always_labelled():
    # 2,684,354,560 B = 2.684 x 10^9 B = 2.5 x 2^30 B
    assert report.size(2_684_354_560) == "2,684,354,560 B (2.68 GB, 2.50 GiB)"
    assert report.mib(2_281_701_376) == "2176.00 MiB"  # 2176 x 2^20


def test_csv_flattens_breakdown_by_kind():
    flat = report.flatten({"a": 1, "breakdown": [{"kind": "full", "n": 2}, {"kind": "sliding", "n": 3}]})
    assert flat == {
        "a": 1,
        "breakdown.full.kind": "full",
        "breakdown.full.n": 2,
        "breakdown.sliding.kind": "sliding",
        "breakdown.sliding.n": 3,
    }


# ----- exact decimal parsing: float would lose a byte ------------------------------------------
# Each of these sizes is exact in decimal but not in binary floating point: float("2.01") x 10^9
# = 2,009,999,999.9999998 floors to 2,009,999,999 B; Decimal gives the exact 2,010,000,000.


@pytest.mark.parametrize(
    "text,n",
    [
        ("2.01GB", 2_010_000_000),
        ("4.35TB", 4_350_000_000_000),  # float: 4,349,999,999,999
        ("2.03MB", 2_030_000),  # float: 2,029,999
        ("8.03kb", 8_030),  # float: 8,029
        ("4.02GB", 4_020_000_000),
        ("0.000000001GB", 1),  # the smallest whole byte in GB
        ("80.000000001GB", 80_000_000_001),
        ("1.0000000005GiB", 1_073_741_824),  # 1 GiB + 0.54 B floors to 1 GiB
    ],
)
def test_parse_size_is_exact_decimal(text, n):
    assert parse_size(text) == n


def test_parse_size_floors_fractions_of_a_byte_only_under_a_prefixed_unit():
    # 6.51 x 2^30 = 6,990,059,274.24 -> 6,990,059,274; 0.0000000001GB = 0.1 B -> 0 -> refused.
    # Without a unit (or in plain bytes) a fraction is refused: 1.9999 is no byte count
    assert parse_size("6.51GiB") == 6_990_059_274
    with pytest.raises(KvcalcError, match="^kv must be positive, got 0.0000000001GB$"):
        parse_size("0.0000000001GB", "kv")
    with pytest.raises(
        KvcalcError,
        match=r"^kv: '1.9999' has no unit and is not a whole number of bytes; "
        r"did you mean 1.9999GiB\?$",
    ):
        parse_size("1.9999", "kv")


@pytest.mark.parametrize(
    "text,n",
    [
        ("1KiB", 1024),
        ("1 kib", 1024),
        ("2TiB", 2 * 2**40),
        ("3tb", 3 * 10**12),
        ("1_000B", 1000),
        ("1,000,000B", 1_000_000),
        ("7b", 7),
    ],
)
def test_parse_size_units_and_separators(text, n):
    assert parse_size(text) == n


def test_parse_size_messages_name_the_option():
    with pytest.raises(
        KvcalcError, match=r"^--kv-memory: '80 GBs' is not a size \(write 80GB, 6.51GiB or a byte count\)$"
    ):
        parse_size("80 GBs", "--kv-memory")
    with pytest.raises(KvcalcError, match=r"^--kv-memory must be positive, got 0$"):
        parse_size("0", "--kv-memory")


# ----- strict sizes (issue 11, item 2): one rule, exact messages --------------------------------


@pytest.mark.parametrize(
    "text,n",
    [
        ("1.5e9", 1_500_000_000),  # exponent: Decimal("1.5") x 10^9, whole
        ("2e30B", None),  # past 10^21: refused below
        ("24GiB", 24 * 2**30),
        ("80 GB", 80 * 10**9),
        ("1,048,576", 1_048_576),  # commas group thousands
        (85_899_345_920, 80 * 2**30),  # an int (a YAML int) is a byte count
        (7.68e11, 768 * 10**9),  # a float (a YAML float) is read from its shortest decimal, 768000000000.0
    ],
)
def test_parse_size_forms(text, n):
    if n is None:
        with pytest.raises(KvcalcError, match=r"^size: '2e30B' is beyond what kvcalc sizes \(at most 10\^21\)$"):
            parse_size(text)
    else:
        assert parse_size(text) == n


@pytest.mark.parametrize(
    "text,message",
    [
        # a bare number under 1 MiB where memory is meant: a unit left off
        ("6.5", "--kv-memory: '6.5' has no unit and is not a whole number of bytes; did you mean 6.5GiB?"),
        ("6", "--kv-memory: '6' has no unit, so it would be 6 bytes; did you mean 6GiB? (write 6B for bytes)"),
        ("1.5e3", "--kv-memory: '1.5e3' has no unit, so it would be 1,500 bytes; write the unit (1.5e3B for bytes)"),
        (
            "1000000",
            "--kv-memory: '1000000' has no unit, so it would be 1,000,000 bytes; write the unit (1000000B for bytes)",
        ),
        # plain bytes are counted: 1.5 B is no size, never 1 byte
        ("1.5B", "--kv-memory: '1.5B' is not a whole number of bytes; did you mean 1.5GiB?"),
        ("24G", "--kv-memory: '24G' is not a size; did you mean 24GB or 24GiB?"),
        ("1,5GiB", "--kv-memory: '1,5GiB' is not a size (commas may only group thousands: 1,048,576)"),
        ("3.35TB/s", "--kv-memory: '3.35TB/s' is not a size (write 80GB, 6.51GiB or a byte count)"),
        ("1e9999", "--kv-memory: '1e9999' is beyond what kvcalc sizes (at most 10^21)"),
    ],
)
def test_parse_size_refusals_say_what_was_meant(text, message):
    with pytest.raises(KvcalcError) as e:
        parse_size(text, "--kv-memory")
    assert str(e.value) == message


def test_zero_only_where_allowed_and_the_hint_unit():
    assert parse_size("0", "--cuda-context", allow_zero=True) == 0
    assert parse_size("0GiB", "--swap-space", allow_zero=True) == 0
    with pytest.raises(
        KvcalcError,
        match=r"^--cuda-context: '500' has no unit, so it would be 500 bytes; did you "
        r"mean 500MiB\? \(write 500B for bytes\)$",
    ):
        parse_size("500", "--cuda-context", allow_zero=True, hint_unit="MiB")


@pytest.mark.parametrize(
    "text,kind,n",
    [
        ("3.35TB/s", "bytes_per_s", 3_350_000_000_000),
        ("768GB/s", "bytes_per_s", 768 * 10**9),
        ("768e9", "bytes_per_s", 768 * 10**9),
        ("4.8 TBps", "bytes_per_s", 4_800_000_000_000),
        ("989.4TFLOPS", "flops_per_s", 989_400_000_000_000),
        ("989.4 TFLOP/s", "flops_per_s", 989_400_000_000_000),
        ("1978.9e12", "flops_per_s", 1_978_900_000_000_000),
    ],
)
def test_rates_and_flops(text, kind, n):
    assert parse_size(text, kind=kind, min_unitless=10**6) == n


# ----- the CLI's size options all follow the rule ------------------------------------------------


@pytest.mark.parametrize(
    "args,line",
    [
        (
            ["capacity", "llama-3.1-8b", "--kv-memory", "6.5"],
            "error: --kv-memory: '6.5' has no unit and is not a whole number of bytes; did you mean 6.5GiB?",
        ),
        (
            ["capacity", "llama-3.1-8b", "-m", "1.5B"],
            "error: --kv-memory: '1.5B' is not a whole number of bytes; did you mean 1.5GiB?",
        ),
        (
            ["estimate", "llama-3.1-8b", "-s", "8k", "--gpu", "h100-sxm", "--cuda-context", "500"],
            "error: --cuda-context: '500' has no unit, so it would be 500 bytes; did you mean 500MiB? (write 500B for bytes)",
        ),
        (
            ["estimate", "llama-3.1-8b", "-s", "8k", "--gpu", "h100-sxm", "--activation-reserve", "2.5"],
            "error: --activation-reserve: '2.5' has no unit and is not a whole number of bytes; did you mean 2.5GiB?",
        ),
        (
            ["capacity", "llama-3.1-8b", "-e", "vllm", "--vllm-v0", "-m", "10GiB", "--swap-space", "4"],
            "error: --swap-space: '4' has no unit, so it would be 4 bytes; did you mean 4GiB? (write 4B for bytes)",
        ),
    ],
)
def test_cli_sizes_are_strict(cli, args, line):
    r = cli(*args)
    assert (r.exit_code, r.output) == (2, line + "\n")


@pytest.mark.parametrize(
    "value,n", [("2.01GB", 2_010_000_000), ("1.5e9", 1_500_000_000), ("6.51GiB", 6_990_059_274), ("1073741824", 2**30)]
)
def test_cli_kv_memory_is_exact(cli, value, n):
    import json

    r = cli("capacity", "llama-3.1-8b", "-m", value, "-f", "json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["kv_memory_bytes"] == n


def test_cli_reserves_take_zero_and_units(cli):
    import json

    r = cli(
        "estimate",
        "llama-3.1-8b",
        "-s",
        "8k",
        "--gpu",
        "h100-sxm",
        "--cuda-context",
        "0",
        "--activation-reserve",
        "1.5GiB",
        "-f",
        "json",
    )
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert (d["cuda_context_bytes"], d["activation_reserve_bytes"]) == (0, 1_610_612_736)  # 1.5 x 2^30


@pytest.mark.parametrize(
    "text, one, listed", [("8,192", "8192", "8, 192"), ("128,256,512", "128256512", "128, 256, 512")]
)
def test_digit_grouping_or_list_is_refused_not_guessed(text, one, listed):
    # '8,192' is 8,192 tokens written with a thousands separator, or the list [8, 192]: kvcalc
    # refuses rather than guess, and names both ways to write what was meant.
    with pytest.raises(KvcalcError) as e:
        parse_counts(text)
    assert one in str(e.value) and f"'{listed}'" in str(e.value)
    assert parse_counts(listed) == [int(x) for x in listed.split(", ")]
    assert parse_counts("8k,32k") == [8192, 32768] and parse_counts("512,1024") == [512, 1024]
