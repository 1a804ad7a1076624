"""Which device pools each engine's tier below the GPU is sized for (issue 22, item 3).

SGLang 0.5.23 keeps a sliding-window model in one `MHATokenToKVPool` (its sliding layers sized as full
ones) unless `configs/model_config.py` `is_hybrid_swa_model` lists the architecture (or with
--disable-hybrid-swa-memory): HiCache then builds the one MHA host pool (`mem_cache/pool_host/mha.py`,
`get_size_per_token` = head_dim x head_num x layer_num x itemsize x 2), sized like a full model's. The
SWAKVPool, NSA and Mamba host pools, LMCache's per-group objects and a Mamba layer's transfer stay
refused, each naming the engine, its version and why."""

from __future__ import annotations

import json

import pytest


def capacity_json(cli, *args):
    r = cli("capacity", *args, "-f", "json")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_sglang_hicache_on_one_mha_pool_with_sliding_layers(cli):
    """Gemma-3-27B (configs/models/gemma-3-27b.yaml: 62 layers, 52 sliding + 10 full, 16 KV heads of 128,
    bf16; Gemma3 is not in is_hybrid_swa_model): a token is 62 x 2 x 16 x 128 x 2 B = 507,904 B on every
    layer. --hicache-size 100 (GB per rank): 100e9 // 507,904 = 196,887 + one padding page = 196,888
    tokens = 100,000,202,752 B. Sessions of 32,768 with a 4,096-token prefix once (page 1):
    (196,888 - 4,096) // (32,768 - 4,096) = 6; the GPU's 42,281 tokens: (42,281 - 4,096) // 28,672 = 1."""
    d = capacity_json(
        cli, "gemma-3-27b", "--engine", "sglang", "--kv-memory", "20GiB", "-L", "32k", "--hicache-size", "100",
        "--shared-prefix", "4k",
    )  # fmt: skip
    assert d["page_size_bytes"] == 507_904
    o = d["offload"]
    assert [(t["tier"], t["tokens_per_rank"], t["bytes_per_rank"], t["sessions"]) for t in o["tiers"]] == [
        ("GPU", 42_281, 21_475_196_928, 1),
        ("host", 196_888, 100_000_202_752, 6),
    ]
    assert o["log_lines"] == ["Allocating kv hierarchical KV host pool: 196888 tokens, 100.00 GB host memory."]


def test_sglang_hicache_with_hybrid_swa_memory_off(cli):
    """gpt-oss-20b (configs/models/gpt-oss-20b.yaml: 24 layers, 8 KV heads of 64, bf16) with
    --disable-hybrid-swa-memory: one MHA pool of 24 x 2 x 8 x 64 x 2 = 49,152 B a token; --hicache-ratio 2:
    int(436,906 x 2) = 873,812 + one padding page = 873,813 tokens."""
    d = capacity_json(
        cli, "gpt-oss-20b", "--engine", "sglang", "--kv-memory", "20GiB", "-L", "32k", "--hicache-ratio", "2",
        "--disable-hybrid-swa-memory",
    )  # fmt: skip
    assert d["page_size_bytes"] == 49_152 and d["kv_cache_tokens"] == 436_906
    host = d["offload"]["tiers"][1]
    assert (host["tokens_per_rank"], host["bytes_per_rank"]) == (873_813, 873_813 * 49_152)
    assert host["sessions"] == 873_813 // 32_768 == 26


def test_sglang_shared_prefix_on_one_mha_pool(cli):
    """Gemma-3-27B's 42,281 pool tokens (20 GiB // 507,904 B), requests of 8,192, 4,096 shared:
    (42,281 - 4,096) // 4,096 = 9 with sharing, 42,281 // 8,192 = 5 without."""
    p = capacity_json(
        cli, "gemma-3-27b", "--engine", "sglang", "--kv-memory", "20GiB", "-L", "8k", "--shared-prefix", "4k"
    )["shared_prefix"]
    assert (p["max_concurrency_shared"], p["max_concurrency_unshared"]) == (9, 5)


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (
            ("gpt-oss-20b", "--engine", "sglang", "--kv-memory", "20GiB", "--hicache-ratio", "2"),
            "SGLang 0.5.23 gives its sliding layers their own SWAKVPool",
        ),
        (
            ("gpt-oss-20b", "--engine", "sglang", "--kv-memory", "20GiB", "--shared-prefix", "1k"),
            "not its SWA, NSA or Mamba pools",
        ),
        (
            ("deepseek-v3.2", "--engine", "sglang", "--kv-memory", "20GiB", "--tp", "8", "--hicache-ratio", "2"),
            "SGLang 0.5.23's HiCache host pool for NSA",
        ),
        (
            ("gpt-oss-20b", "--engine", "vllm", "--kv-memory", "20GiB", "--lmcache-cpu-size", "10"),
            "LMCache 0.5.6 stores each group as its own objects",
        ),
    ],
    ids=["sglang-swa-pool", "sglang-swa-prefix", "sglang-nsa", "lmcache-hybrid"],
)
def test_refused_naming_engine_version_and_why(cli, args, words):
    r = cli("capacity", *args, "-L", "8k")
    assert r.exit_code == 2, r.output
    assert words in " ".join(r.stderr.split())


def test_transfer_of_mamba_state_refused_naming_vllm(cli):
    r = cli("transfer", "qwen3-next-80b-a3b", "--tokens", "8k", "--prefill-tp", "4", "--decode-tp", "2")
    assert r.exit_code == 2, r.output
    err = " ".join(r.stderr.split())
    assert "vLLM 0.33's NIXL connector" in err and "derive_mamba_conv_split" in err
