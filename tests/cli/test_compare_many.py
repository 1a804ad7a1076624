"""`kvcalc compare A B C ...` (issue 11 item 7): several models, MLA included, each with its own
attention and bytes at one context, batch and KV dtype; one model keeps today's variants table.

Bytes per token in bf16 (each from the model's config.json, bundled in configs/models/):
- llama-3.1-8b: 2 x 32 layers x 8 KV heads x 128 x 2 B = 131,072
- deepseek-v3 (MLA): 61 layers x (512 + 64) latent x 2 B = 70,272 (no factor 2, no heads)
- gemma-3-27b: 62 layers (52 sliding, window 1,024 + 10 full) x 2 x 16 x 128 x 2 B = 507,904
- mistral-7b-v0.1: 2 x 32 x 8 x 128 x 2 B = 131,072, every layer sliding (window 4,096)
"""

from __future__ import annotations

import json
import re

import pytest


def test_three_models_side_by_side(cli):
    r = cli("compare", "llama-3.1-8b", "deepseek-v3", "gemma-3-27b", "-s", "32k", "-f", "json")
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)
    assert [(d["model"], d["attention"], d["seq_len"], d["kv_dtype"]) for d in rows] == [
        ("llama-3.1-8b", "gqa", 32768, "bf16"),
        ("deepseek-v3", "mla", 32768, "bf16"),
        ("gemma-3-27b", "gqa", 32768, "bf16"),
    ]
    assert [d["kv_bytes_per_token"] for d in rows] == [131_072, 70_272, 507_904]
    # 131,072 x 32,768 = 4,294,967,296; 70,272 x 32,768 = 2,302,672,896; gemma: 10 full layers x
    # 8,192 B x 32,768 + 52 sliding x 8,192 B x 1,024 = 2,684,354,560 + 436,207,616 = 3,120,562,176
    assert [d["kv_cache_bytes"] for d in rows] == [4_294_967_296, 2_302_672_896, 3_120_562_176]


def test_table_rows_show_each_models_own_attention(cli):
    r = cli("compare", "llama-3.1-8b", "deepseek-v3", "gemma-3-27b", "-s", "32k")
    cells = [[c.strip() for c in line.strip("│").split("│")] for line in r.stdout.splitlines() if line.startswith("│")]
    assert cells == [
        ["llama-3.1-8b", "gqa 32q/8kv", "131,072", "4,294,967,296", "4.00"],
        ["deepseek-v3", "mla latent 576", "70,272", "2,302,672,896", "2.14"],
        ["gemma-3-27b", "gqa 32q/16kv, sliding", "507,904", "3,120,562,176", "2.91"],
    ]
    assert "MHA" not in r.stdout  # no variants when several models are compared
    assert r.stdout.splitlines()[0].rstrip() == "KV cache at 32,768 tokens, batch 1, bf16"


def test_default_context_is_the_shortest_of_the_models(cli):
    # llama-3.1-8b: 131,072 positions; mistral-7b-v0.1: 32,768 -> both at 32,768; mistral's sliding
    # layers keep 4,096 tokens: 131,072 B x 4,096 = 536,870,912 B
    r = cli("compare", "llama-3.1-8b", "mistral-7b-v0.1", "-f", "json")
    rows = json.loads(r.stdout)
    assert [d["seq_len"] for d in rows] == [32768, 32768]
    assert [d["kv_cache_bytes"] for d in rows] == [4_294_967_296, 536_870_912]
    assert (
        "KV cache at 32,768 tokens (the models' shortest context), batch 1, bf16"
        in cli("compare", "llama-3.1-8b", "mistral-7b-v0.1").stdout
    )


def test_different_dtypes_need_kv_dtype(cli):
    r = cli("compare", "llama-3.1-8b", "gpt2")
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr.strip() == (
        "error: the models' dtypes differ (llama-3.1-8b: bf16, gpt2: fp32): give --kv-dtype "
        "to compare them in one format"
    )
    # gpt2: 2 x 12 layers x 12 heads x 64 x 2 B = 36,864 B/token in fp16; context 1,024 (gpt2's)
    rows = json.loads(cli("compare", "llama-3.1-8b", "gpt2", "--kv-dtype", "fp16", "-f", "json").stdout)
    assert [(d["kv_dtype"], d["seq_len"], d["kv_bytes_per_token"]) for d in rows] == [
        ("fp16", 1024, 131_072),
        ("fp16", 1024, 36_864),
    ]


@pytest.mark.parametrize("columns", ["60", "80", "120"])
def test_no_number_is_cut_at_any_width(cli, columns):
    args = ["compare", "llama-3.1-8b", "deepseek-v3", "gemma-3-27b", "mistral-7b-v0.1", "-s", "32k"]
    rows = json.loads(cli(*args, "-f", "json").stdout)
    text = cli(*args, env={"COLUMNS": columns}).stdout
    assert "…" not in text and max(len(line) for line in text.splitlines()) <= int(columns)
    shown = {int(x.replace(",", "")) for x in re.findall(r"(?<![\d,.])\d{1,3}(?:,\d{3})*(?![\d,])", text)}
    assert {d[k] for d in rows for k in ("seq_len", "kv_bytes_per_token", "kv_cache_bytes")} <= shown


def test_one_model_keeps_the_variants_table(cli):
    r = cli("compare", "llama-3.1-70b", "-s", "8192", "-f", "json")
    assert [d["variant"] for d in json.loads(r.stdout)] == ["MHA", "GQA (8 queries per KV head, own)", "MQA"]
    t = cli("compare", "llama-3.1-70b", "-s", "8192").stdout
    assert all(w in t for w in ("saving", "vs MHA", "%")) and t.startswith(
        "llama-3.1-70b: 64 query heads, 8,192 tokens x batch 1, bf16"
    )


def test_one_mla_model_alone_is_still_refused(cli):
    r = cli("compare", "deepseek-v3")
    assert r.exit_code == 2 and "uses MLA" in r.stderr
