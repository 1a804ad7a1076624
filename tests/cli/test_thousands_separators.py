"""Issue #11 (trial), cosmetics: every integer a table, title or note prints has thousands
separators ("blocks 1,260 of 1040 tokens" and "10000 x 131,072 tokens" were not); a tiny model's
step reads in µs with three significant figures, never "TPOT 0.000 ms"; --swa-full-tokens-ratio
states its range as (0, 1], which both of its refusals now say."""

from __future__ import annotations

import json
import re

import pytest

from kvcalc.report import figure, seconds, significant
from tests.published_configs import NEMOTRON_H_8B


@pytest.fixture
def nemotron(tmp_path):
    p = tmp_path / "nemotron-h-8b" / "config.json"
    p.parent.mkdir()
    p.write_text(json.dumps(NEMOTRON_H_8B))
    return str(p)


def test_vllm_blocks_of_1040_tokens(cli, nemotron):
    # 0.33: 16 x cdiv(4,255,744, 65,536) = 1,040-token blocks of 4 x 1,040 x 4,096 = 17,039,360 B;
    # 20 GiB // 17,039,360 = 1,260 blocks (tests/engines/test_vllm_hybrid.py)
    r = cli("capacity", nemotron, "--engine", "vllm", "--kv-memory", "20GiB", "-s", "8192", env={"COLUMNS": "120"})
    assert r.exit_code == 0, r.output
    assert "│ 1,260 of 1,040 tokens, 17,039,360 B each, 1,259 usable (one null block)" in r.stdout


def test_plan_title_concurrency(cli):
    r = cli("plan", "llama-3.1-8b", "-s", "128k", "--concurrency", "10000", "--gpu", "h200")
    assert r.exit_code == 1
    assert r.stdout.startswith("kvcalc plan: llama-3.1-8b, 10,000 x 131,072 tokens (vllm; 0 of ")


def test_sweep_batch_and_formula(cli):
    r = cli("sweep", "llama-3.1-8b", "-s", "8k", "--batch", "2048", env={"COLUMNS": "120"})
    assert r.exit_code == 0
    # 2,048 x 8,192 tokens x 131,072 B = 2,199,023,255,552 B = 2,048.00 GiB
    assert re.search(r"│\s+8,192 │\s+2,048 │ .* │\s+2,048\.00 │", r.stdout)
    r = cli("estimate", "gemma-3-27b", "-s", "128k", "-f", "json")
    # 52 sliding layers keep 1,024 tokens: 2 x 52 x 16 x 128 x 1,024 x 2 B = 436,207,616; 10 global
    # layers keep 131,072: 2 x 10 x 16 x 128 x 131,072 x 2 B = 10,737,418,240; sum 11,173,625,856
    assert json.loads(r.stdout)["formula"] == (
        "2 x 52 layers x 16 KV heads x 128 head_dim x min(131,072; 1,024) tokens x 1 batch x 2 B + "
        "2 x 10 layers x 16 KV heads x 128 head_dim x 131,072 tokens x 1 batch x 2 B = 11,173,625,856 B"
    )


def test_llamacpp_largest_ctx_note(cli):
    r = cli("capacity", "gemma-3-12b", "--engine", "llamacpp", "--kv-memory", "2GiB", "-f", "json")
    assert json.loads(r.stdout)["notes"][-1] == "largest --ctx-size that fits: 9,728 cells (-c 9728)"


@pytest.mark.parametrize(
    "s,text",
    [
        (2.5, "2.500 s"),
        (0.129e-3, "0.129 ms"),
        (1e-4, "0.100 ms"),
        (0.0642e-3, "64.2 µs"),
        (6.02e-7, "0.602 µs"),
        (1.5e-9, "0.00150 µs"),
        (0.0, "0.000 ms"),
        (None, "n/a"),
    ],
)
def test_seconds_keep_three_significant_figures(s, text):
    assert seconds(s) == text


def test_figures_in_fixed_columns():
    assert (figure(0.13, 2), figure(12.345, 1), figure(0.0043, 2), figure(0.0, 2), figure(0.05, 1)) == (
        "0.13",
        "12.3",
        "0.00430",
        "0.00",
        "0.0500",
    )
    assert (significant(1234.5), significant(0.000602), significant(99.95)) == ("1,234", "0.000602", "100.0")


def test_tiny_model_tpot_is_not_zero(cli, tmp_path):
    m = tmp_path / "tiny.yaml"
    m.write_text(
        "name: tiny\nsource: test\nn_layers: 2\nn_heads: 4\nn_kv_heads: 2\nhead_dim: 16\nhidden_size: 64\n"
        "intermediate_size: 128\nvocab_size: 256\nmax_position_embeddings: 256\n"
    )
    r = cli("estimate", str(m), "--gpu", "h200", "--batch", "64", "-s", "128", "-f", "json")
    tpot = json.loads(r.stdout)["tpot_s"]
    assert 0 < tpot < 1e-4
    r = cli("estimate", str(m), "--gpu", "h200", "--batch", "64", "-s", "128")
    line = next(ln for ln in r.stdout.splitlines() if "│ TPOT" in ln)
    assert f"│ {seconds(tpot)} " in line and "µs" in line and "0.000 ms" not in r.stdout


@pytest.mark.parametrize("value", ["2", "0", "-1", "nan"])
def test_swa_ratio_range(cli, value):
    r = cli("capacity", "gpt-oss-20b", "--engine", "sglang", "--kv-memory", "10GiB", "--swa-full-tokens-ratio", value)
    assert r.exit_code == 2
    assert r.output.splitlines()[0].startswith(
        "error: --swa-full-tokens-ratio must be in (0, 1]: above 0 and at most 1 (SWA-pool tokens per full-pool token"
    )


#: commands whose tables, titles and notes are scanned for an integer of 4+ digits without separators
SCANNED = [
    ("estimate", "llama-3.1-405b", "-s", "128k", "--gpu", "h100-sxm", "--batch", "64", "--engine", "vllm"),
    ("estimate", "gemma-3-27b", "-s", "128k", "--engine", "llamacpp"),
    ("capacity", "gpt-oss-20b", "--engine", "vllm", "--kv-memory", "10GiB", "-s", "32k"),
    ("capacity", "deepseek-v3", "--engine", "sglang", "--kv-memory", "40GiB", "-s", "32k"),
    ("capacity", "falcon-h1-7b", "--engine", "llamacpp", "-c", "32768"),
    ("capacity", "gemma-3-12b", "--engine", "llamacpp", "--kv-memory", "2GiB"),
    ("sweep", "llama-3.1-8b", "-s", "8k,128k", "--batch", "1,2048", "--gpu", "h100-sxm"),
    ("plan", "llama-3.1-70b", "-s", "32k", "--concurrency", "1024", "--gpu", "h200"),
    ("compare", "llama-3.1-8b", "falcon-h1-7b", "jamba-1.5-mini", "-s", "32k"),
]


@pytest.mark.parametrize("args", SCANNED, ids=lambda a: " ".join(a[:2]))
def test_no_integer_without_separators(cli, args):
    r = cli(*args, env={"COLUMNS": "200"})
    assert r.exit_code in (0, 1), r.output
    bare = re.compile(r"(?:(?<=[\s(=:;])|^)\d{4,}(?=[\s),;:x]|$)")
    engine_text = False
    for line in r.stdout.splitlines():
        # what the engines print (their log lines, their own error text) and the launch line keep
        # the engines' own formats; "-c 9728" is a flag to paste
        if line.endswith("would log:") or line.startswith("launch #"):
            engine_text = True
            continue
        if engine_text and (not line.strip() or line.startswith(("note:", "KV capacity"))):
            engine_text = False
        if engine_text or "memory_pool.py: GB = 1024" in line or "refuses to start" in line:
            continue
        assert not bare.search(re.sub(r"\(-c \d+\)", "", line)), line
