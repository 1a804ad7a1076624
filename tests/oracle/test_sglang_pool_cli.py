"""The SGLang pool oracle through kvcalc's command line, end to end (issue 20 item 1: attention
data-parallel with each engine's flag names): SGLang 0.5.23's own figures for a launch of
`--tp-size 8 --dp-size 8 --enable-dp-attention` (tests/oracle/fixtures/sglang_0523_pools.json,
`sglang_pool_harness.py`: attention TP = tp / dp = 1, each attention rank its own pool) are what
`kvcalc capacity --engine sglang` prints for the same flags, per GPU; `estimate --engine sglang`
and `plan --engine sglang` size each attention-DP rank with the same cell. Runs in the default
suite (no SGLang needed)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvcalc.cli import app

sys.path.insert(0, str(Path(__file__).parent))
import sglang_pool_fixture as fx  # noqa: E402

runner = CliRunner()
#: the fixture's GPU -> a `--gpu` of that compute capability (9.0, 10.0, 12.0)
GPU = {"hopper": "h100-sxm", "blackwell": "b200", "sm120": "rtx-5090"}
#: every (tp 8, attention dp 8) case the pool oracle ran, allocated pools aside
DPA = [r for r in fx.records() if (r["inputs"]["tp"], r["inputs"]["dp"]) == (8, 8) and not r["inputs"]["allocate"]]


def cli(*args: str) -> tuple[int, str]:
    out = runner.invoke(app, list(args))
    return out.exit_code, out.output


def capacity_args(case: dict, *layout: str) -> list[str]:
    return [
        "capacity",
        str(fx.DATA / case["config"]),
        "--engine",
        "sglang",
        *layout,
        "--kv-memory",
        f"{case['budget_bytes']}B",
        "--kv-cache-dtype",
        case["kv_dtype"],
        "--page-size",
        str(case["page_size"]),
        "--gpu",
        GPU[case["arch"]],
        "-f",
        "json",
    ]


def test_the_dp_attention_cases_cover_the_mla_and_dsa_models():
    names = {r["inputs"]["config"].split("--")[-1] for r in DPA}
    assert {"Kimi-K2.5.json", "DeepSeek-V3.2.json", "GLM-5.2.json"} <= names
    assert len(DPA) == 174


@pytest.mark.parametrize("record", DPA, ids=[fx.case_id(r["inputs"]) for r in DPA])
def test_capacity_cli_is_sglang_per_gpu(record):
    """`kvcalc capacity --engine sglang --tp-size 8 --dp-size 8 --enable-dp-attention` (SGLang's
    own flag names): the per-GPU tokens and cell SGLang computes for that launch, or its refusal
    (one line, exit 2, SGLang's first sentence in it)."""
    case, want = record["inputs"], record["sglang"]
    code, out = cli(*capacity_args(case, "--tp-size", "8", "--dp-size", "8", "--enable-dp-attention"))
    if "error" in want:
        assert code == 2, out
        assert want["error"].split(". ")[0].rstrip(".") in " ".join(out.split()), out
        return
    assert code == 0, out
    got = json.loads(out)
    if isinstance(got, list):
        got = got[0]
    assert got["kv_cache_tokens"] == want["tokens"]
    assert got["block_size"] == want["page_size"]
    if "full_per_token" not in want:  # the SWA pool's cell is a float: its tokens are held above
        assert got["page_size_bytes"] == want["cell"] * want["page_size"]


@pytest.mark.parametrize(
    "layout",
    [
        ("--tp", "8", "--dp", "8", "--enable-dp-attention"),
        ("--tp", "1", "--dp-attention", "8"),  # kvcalc's own words: tp per attention rank
    ],
)
def test_capacity_cli_spellings_agree(layout):
    """Kimi-K2.5 fp8_e4m3 on Hopper, 57,123,456,789 B a rank: 61 x (512 + 64) x 1 B = 35,136 B a
    token; 57,123,456,789 // 35,136 = 1,625,781 (SGLang's own figure, the fixture)."""
    record = next(
        r
        for r in DPA
        if "Kimi" in r["inputs"]["config"]
        and r["inputs"]["kv_dtype"] == "fp8_e4m3"
        and r["inputs"]["page_size"] == 1
        and r["inputs"]["budget_bytes"] == 57_123_456_789
    )
    assert record["sglang"]["tokens"] == 1_625_781
    code, out = cli(*capacity_args(record["inputs"], *layout))
    assert code == 0, out
    assert json.loads(out)["kv_cache_tokens"] == 1_625_781


@pytest.mark.parametrize(
    "config, kv_dtype",
    [
        ("hf-configs-2026/moonshotai--Kimi-K2.5.json", "fp8_e4m3"),
        ("hf-configs-2026/moonshotai--Kimi-K2.5.json", "bf16"),
        ("hf-configs-2026/deepseek-ai--DeepSeek-V3.2.json", "fp8_e4m3"),
        ("hf-configs-2026/zai-org--GLM-5.2.json", "bf16"),
    ],
)
def test_estimate_cli_sizes_each_rank_with_sglangs_cell(config, kv_dtype):
    """`estimate --engine sglang --tp 8 --dp 8 --enable-dp-attention --batch 16 -s 8192` (no
    --gpu: Hopper assumed): each of the 8 attention ranks holds 16 / 8 = 2 requests of 8,192
    tokens (whole pages) in the pool SGLang sizes with the fixture's Hopper cell at tp 8, dp 8."""
    want = next(
        r["sglang"]
        for r in DPA
        if r["inputs"]["config"] == config
        and r["inputs"]["kv_dtype"] == kv_dtype
        and r["inputs"]["arch"] == "hopper"
        and "cell" in r["sglang"]
    )
    code, out = cli(
        "estimate", str(fx.DATA / config), "--engine", "sglang", "--tp", "8", "--dp", "8",
        "--enable-dp-attention", "--kv-cache-dtype", kv_dtype, "-s", "8192", "--batch", "16", "-f", "json",
    )  # fmt: skip
    assert code == 0, out
    got = json.loads(out)
    assert (got["tp"], got["dp_attention"]) == (1, 8)
    assert got["page_size_bytes"] == want["cell"] * got["block_size"]
    assert got["kv_memory_bytes"] == 2 * 8192 * want["cell"]


def test_plan_cli_dp_attention_rows_use_sglangs_cell():
    """`plan --engine sglang` for Kimi-K2.5 fp8_e4m3 on H200, 64 requests of 8,192 tokens: every
    attention-DP row launches `--tp-size tp x dpa --dp-size dpa --enable-dp-attention` and holds
    cdiv(64, dpa) requests a rank at SGLang's MLA cell, 35,136 B a token (the fixture's, the same
    at tp 8 dp 1 and tp 8 dp 8: the latent has no heads to split)."""
    cells = {
        (r["inputs"]["tp"], r["inputs"]["dp"]): r["sglang"]["cell"]
        for r in fx.records()
        if "Kimi" in r["inputs"]["config"]
        and r["inputs"]["kv_dtype"] == "fp8_e4m3"
        and r["inputs"]["tp"] == 8
        and "cell" in r["sglang"]
    }
    assert set(cells.values()) == {35_136}
    code, out = cli(
        "plan", str(fx.DATA / "hf-configs-2026/moonshotai--Kimi-K2.5.json"), "--engine", "sglang",
        "--kv-cache-dtype", "fp8_e4m3", "--gpu", "h200", "-s", "8192", "--concurrency", "64", "-f", "json",
    )  # fmt: skip
    assert code == 0, out
    rows = [row for row in json.loads(out)["layouts"] if row["dp_attention"] > 1]
    assert rows
    for row in rows:
        tp, dpa = row["tp"], row["dp_attention"]
        assert re.search(rf"--tp-size {tp * dpa} --dp-size {dpa} --enable-dp-attention\b", row["launch"]), row
        assert row["kv_cache_bytes_per_gpu"] == -(-64 // dpa) * 8192 * 35_136
