"""`kvcalc/report/__init__.py`: the unit helpers (every size labelled: GB = 10^9, GiB = 2^30,
MiB = 2^20), the layer-kind summary, the machine formats and the markdown table. Expected
strings are written out by hand, with the division beside each."""

from __future__ import annotations

import csv
import io
import json

import pytest
import yaml

from kvcalc import report
from kvcalc.results import KindBreakdown


@pytest.mark.parametrize(
    "n,text",
    [
        (None, "n/a"),
        (0, "0 B"),
        (999, "999 B"),  # under 1,000: bytes only
        (1_000, "1,000 B (1.00 KB, 1,000 B)"),  # 1e3 B is 1 KB but under 1 KiB
        (1_024, "1,024 B (1.02 KB, 1.00 KiB)"),
        (20_480, "20,480 B (20.48 KB, 20.00 KiB)"),
        (33_554_432, "33,554,432 B (33.55 MB, 32.00 MiB)"),  # 32 x 2^20
        (2_684_354_560, "2,684,354,560 B (2.68 GB, 2.50 GiB)"),  # 2.5 x 2^30
        (1_500_000_000_000, "1,500,000,000,000 B (1.50 TB, 1.36 TiB)"),  # 1.5e12 / 2^40 = 1.364
        (5 * 10**15, "5,000,000,000,000,000 B (5,000.00 TB, 4,547.47 TiB)"),  # TB/TiB are the largest
    ],
)
def test_size(n, text):
    assert report.size(n) == text


def test_gib_mib():
    assert report.gib(2_684_354_560) == "2.50 GiB"  # / 2^30
    assert report.gib(2**40) == "1,024.00 GiB"
    assert report.gib(0.5 * 2**30) == "0.50 GiB"  # floats accepted
    # MiB as llama.cpp / vLLM print it: no thousands separator
    assert report.mib(2176 * 2**20) == "2176.00 MiB"
    assert report.mib(12_704_808_960) == "12116.25 MiB"  # 5385 x 2,359,296 / 2^20
    assert report.mib(1) == "0.00 MiB"


@pytest.mark.parametrize(
    "s,text",
    [
        (None, "n/a"),
        (0.025645, "25.645 ms"),
        (6.0763e-6, "6.08 µs"),  # under 0.1 ms: microseconds, three significant figures
        (0.9999, "999.900 ms"),  # under one second: milliseconds
        (1, "1.000 s"),
        (3.2039, "3.204 s"),
        (1234.5, "1,234.500 s"),
    ],
)
def test_seconds(s, text):
    assert report.seconds(s) == text


@pytest.mark.parametrize(
    "kinds,text",
    [
        (["sliding"] * 5 + ["full"] + ["sliding"] * 5 + ["full"], "10 sliding + 2 full"),  # first-seen order
        (["full", "mamba", "mamba", "mamba"], "1 full + 3 mamba"),
        (["mamba", "full", "mamba"], "2 mamba + 1 full"),
        (["mla"] * 61, "61 mla"),
        ([], ""),
    ],
)
def test_kinds_summary(kinds, text):
    assert report.kinds_summary(kinds) == text


# ----- machine formats ------------------------------------------------------------------------


def small_result() -> dict:
    """A result as commands hand it to `machine`: scalars, a None, and a breakdown of models."""
    return {
        "model": "t",
        "kv_cache_bytes": 8192,
        "state_bytes": None,
        "breakdown": [
            KindBreakdown(
                kind="full",
                n_layers=1,
                kv_bytes_per_token=64,
                tokens_cached=64,
                kv_cache_bytes=4096,
                kv_cache_bytes_per_gpu=4096,
            ),
            KindBreakdown(
                kind="sliding",
                n_layers=1,
                kv_bytes_per_token=64,
                tokens_cached=64,
                kv_cache_bytes=4096,
                kv_cache_bytes_per_gpu=4096,
                window=64,
            ),
        ],
    }


BREAKDOWN = [
    {
        "kind": "full",
        "n_layers": 1,
        "kv_bytes_per_token": 64,
        "tokens_cached": 64,
        "kv_cache_bytes": 4096,
        "kv_cache_bytes_per_gpu": 4096,
        "window": None,
    },
    {
        "kind": "sliding",
        "n_layers": 1,
        "kv_bytes_per_token": 64,
        "tokens_cached": 64,
        "kv_cache_bytes": 4096,
        "kv_cache_bytes_per_gpu": 4096,
        "window": 64,
    },
]


def test_machine_json():
    text = report.machine(small_result(), "json")
    assert json.loads(text) == {"model": "t", "kv_cache_bytes": 8192, "state_bytes": None, "breakdown": BREAKDOWN}
    assert text.startswith('{\n  "model": "t",\n  "kv_cache_bytes": 8192,\n  "state_bytes": null,')  # indent 2


def test_machine_yaml():
    text = report.machine(small_result(), "yaml")
    assert yaml.safe_load(text) == {"model": "t", "kv_cache_bytes": 8192, "state_bytes": None, "breakdown": BREAKDOWN}
    # keys in the result's order (sort_keys=False), no trailing newline
    assert text.splitlines()[:4] == ["model: t", "kv_cache_bytes: 8192", "state_bytes: null", "breakdown:"]
    assert not text.endswith("\n")


def test_machine_csv_flattens_by_kind():
    text = report.machine(small_result(), "csv")
    header, row = text.split("\n")
    assert header.split(",")[:5] == [
        "model",
        "kv_cache_bytes",
        "state_bytes",
        "breakdown.full.kind",
        "breakdown.full.n_layers",
    ]
    d = next(csv.DictReader(io.StringIO(text)))
    assert (d["model"], d["kv_cache_bytes"], d["state_bytes"]) == ("t", "8192", "")
    assert (d["breakdown.full.window"], d["breakdown.sliding.window"]) == ("", "64")
    assert len(header.split(",")) == 3 + 2 * 7


def test_machine_markdown_one_result_is_field_value():
    text = report.machine({"model": "t", "kv_cache_bytes": 8192, "state_bytes": None}, "markdown")
    assert text == ("| field | value |\n| --- | --- |\n| model | t |\n| kv_cache_bytes | 8192 |\n| state_bytes |  |")


def test_machine_markdown_rows_share_a_header():
    rows = [{"seq_len": 1024, "fits": True}, {"seq_len": 2048, "fits": False, "note": "x"}]
    assert report.machine(rows, "markdown") == (
        "| seq_len | fits | note |\n| --- | --- | --- |\n| 1024 | True |  |\n| 2048 | False | x |"
    )
    assert report.machine(rows, "csv") == "seq_len,fits,note\n1024,True,\n2048,False,x"


def test_machine_refuses_unknown_format():
    with pytest.raises(ValueError, match="unknown format xml"):
        report.machine({"a": 1}, "xml")


# ----- markdown_table ------------------------------------------------------------------------


def _columns(line: str) -> list[str]:
    """Cells of a markdown row, splitting on pipes that are not escaped (as GitHub does)."""
    cells, cur, i = [], "", 0
    body = line.strip()[1:-1]
    while i < len(body):
        if body[i] == "\\" and i + 1 < len(body) and body[i + 1] == "|":
            cur += "\\|"
            i += 2
            continue
        if body[i] == "|":
            cells.append(cur.strip())
            cur = ""
        else:
            cur += body[i]
        i += 1
    cells.append(cur.strip())
    return cells


def test_markdown_table_escapes_pipes():
    # a deployment named "a|b" must stay one cell, or the table gains a column
    text = report.markdown_table(["deployment", "status"], [["a|b", "ok"], ["plain", None]])
    assert text == ("| deployment | status |\n| --- | --- |\n| a\\|b | ok |\n| plain |  |")
    assert [len(_columns(ln)) for ln in text.splitlines()] == [2, 2, 2, 2]
    assert _columns(text.splitlines()[2]) == ["a\\|b", "ok"]


def test_markdown_table_escapes_header_and_numbers():
    text = report.markdown_table(["x|y"], [[3], [0.5]])
    assert text == "| x\\|y |\n| --- |\n| 3 |\n| 0.5 |"
