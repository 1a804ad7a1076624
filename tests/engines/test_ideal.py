"""The `ideal` engine profile (`kvcalc/engines/ideal.py`, the default of `kvcalc capacity`): the
exact formula with no block, page or padding rule. Every figure below is worked out by hand from
the spec fixtures in tests/conftest.py (bf16: 2 B per value)."""

from __future__ import annotations

import json

import pytest

from kvcalc.engines import ideal
from kvcalc.errors import KvcalcError
from kvcalc.formats import kv_format
from kvcalc.schema import ModelSpec

BF16 = kv_format("bf16")
MiB = 2**20


def test_tokens_are_memory_floor_divided_by_bytes_per_token(gqa_spec):
    # 2 (K, V) x 4 layers x 2 KV heads x 64 x 2 B = 2,048 B per token;
    # 1,000,000 // 2,048 = 488 tokens (488 x 2,048 = 999,424 B; 489 x 2,048 = 1,001,472 > 1e6)
    r = ideal.capacity(gqa_spec, 1_000_000, BF16, BF16)
    assert (r.engine, r.page_size_bytes, r.kv_cache_tokens, r.engine_kv_bytes) == ("ideal", 2_048, 488, 999_424)
    assert r.kv_cache_dtype == "bf16" and r.kv_memory_bytes == 1_000_000
    # concurrency at the model's 4,096 positions: 1,000,000 / (4,096 x 2,048 = 8,388,608)
    assert r.max_model_len == 4096 and r.max_concurrency == 1_000_000 / 8_388_608 == 0.11920928955078125
    assert r.longest_context is None and r.concurrency is None  # no --concurrency asked
    assert r.log_lines == ["488 tokens of 2,048 B each fit in 1,000,000 B; 0.12 requests of 4,096 tokens"]


def test_longest_context_for_a_concurrency(gqa_spec):
    # one request of L tokens costs 2,048 L B: L <= 1,000,000 / 2,048 = 488.28 -> 488
    assert ideal.capacity(gqa_spec, 1_000_000, BF16, BF16, concurrency=1).longest_context == 488
    # three requests: 3 x 2,048 L <= 1,000,000 -> L <= 162.76 -> 162
    assert ideal.capacity(gqa_spec, 1_000_000, BF16, BF16, concurrency=3).longest_context == 162
    # max_model_len overrides the model's positions: 1,000,000 / (1,000 x 2,048) = 0.48828125
    assert ideal.capacity(gqa_spec, 1_000_000, BF16, BF16, max_model_len=1000).max_concurrency == 0.48828125


def test_tensor_parallel_halves_the_token_cost(gqa_spec):
    # tp 2: 1 of the 2 KV heads per rank: 2 x 4 x 1 x 64 x 2 = 1,024 B; 1,000,000 // 1,024 = 976
    r = ideal.capacity(gqa_spec, 1_000_000, BF16, BF16, tp=2)
    assert (r.page_size_bytes, r.kv_cache_tokens, r.engine_kv_bytes) == (1_024, 976, 999_424)
    # tp 4 > 2 KV heads: each rank keeps one (replicated), so still 1,024 B per token
    assert ideal.capacity(gqa_spec, 1_000_000, BF16, BF16, tp=4).page_size_bytes == 1_024
    with pytest.raises(KvcalcError, match="--tp 3"):
        ideal.capacity(gqa_spec, 1_000_000, BF16, BF16, tp=3)


def test_sliding_model_concurrency_and_longest_context(sliding_spec):
    # 256 B per layer per token (2 x 2 KV heads x 32 x 2 B); 6 layers -> 1,536 B per token while
    # inside the window; 8 MiB = 8,388,608 // 1,536 = 5,461 tokens (8,388,096 B)
    r = ideal.capacity(sliding_spec, 8 * MiB, BF16, BF16, max_model_len=1024, concurrency=4)
    assert (r.page_size_bytes, r.kv_cache_tokens, r.engine_kv_bytes) == (1_536, 5_461, 8_388_096)
    # one request of 1,024 tokens: 4 sliding layers x 256 B x min(1024, 256) + 2 full x 256 B x 1,024
    # = 262,144 + 524,288 = 786,432 B; 8,388,608 / 786,432 = 10.666...
    assert r.max_concurrency == 8 * MiB / 786_432
    assert r.log_lines == ["5,461 tokens of 1,536 B each fit in 8,388,608 B; 10.67 requests of 1,024 tokens"]
    # 4 requests of L > 256 tokens: 4 x (262,144 + 512 L) <= 8,388,608 -> 512 L <= 1,835,008 -> L = 3,584
    # (the window-blind bound would be 8,388,608 / 4 / 1,536 = 1,365)
    assert r.longest_context == 3_584


def test_all_sliding_model_has_no_longest_context():
    # every layer slides over 128 tokens: a request never costs more than 2 layers x 256 B x 128 =
    # 65,536 B, so 4 of them (262,144 B) fit 1 MiB at any length: no limit (None)
    m = ModelSpec(
        name="all-swa",
        n_layers=2,
        n_heads=4,
        n_kv_heads=2,
        head_dim=32,
        sliding_window=128,
        max_position_embeddings=8192,
    )
    r = ideal.capacity(m, MiB, BF16, BF16, concurrency=4)
    assert r.longest_context is None
    # at 8,192 tokens: 1,048,576 / 65,536 = 16 requests
    assert r.max_concurrency == 16.0


def test_mla_hybrid_and_too_small(mla_spec, hybrid_spec, gqa_spec):
    # MLA: 3 layers x (64 + 16) latent x 2 B = 480 B per token, no factor 2; 48,000 // 480 = 100
    r = ideal.capacity(mla_spec, 48_000, BF16, BF16)
    assert (r.page_size_bytes, r.kv_cache_tokens, r.engine_kv_bytes) == (480, 100, 48_000)
    # hybrid: only the one full layer caches: 2 x 2 x 32 x 2 = 256 B; 2,560 // 256 = 10
    assert ideal.capacity(hybrid_spec, 2_560, BF16, BF16).kv_cache_tokens == 10
    # 2,047 B holds no 2,048-B token; the longest context for one request is 0
    r = ideal.capacity(gqa_spec, 2_047, BF16, BF16, concurrency=1)
    assert (r.kv_cache_tokens, r.engine_kv_bytes, r.longest_context) == (0, 0, 0)


def test_k_and_v_formats_differ(gqa_spec):
    # K bf16 + V fp8: 4 layers x 2 heads x (64 x 2 + 64 x 1) = 1,536 B; 1,000,000 // 1,536 = 651
    r = ideal.capacity(gqa_spec, 1_000_000, BF16, kv_format("fp8"))
    assert (r.page_size_bytes, r.kv_cache_tokens, r.kv_cache_dtype) == (1_536, 651, "bf16/fp8_e4m3")


def test_default_kv_dtype_is_the_models(gqa_spec):
    assert ideal.default_kv_dtype(gqa_spec) == ("bf16", "auto (bf16)")
    fp32 = ModelSpec(name="f", n_layers=1, n_heads=1, head_dim=8, dtype="fp32")
    assert ideal.default_kv_dtype(fp32) == ("fp32", "auto (fp32)")


def test_capacity_cli_defaults_to_ideal_json(cli, gqa_spec, write_spec):
    r = cli("capacity", write_spec(gqa_spec), "--kv-memory", "1000000B", "--concurrency", "1", "-f", "json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    # the same figures as test_tokens_are_memory_floor_divided_by_bytes_per_token
    assert (d["engine"], d["kv_cache_dtype"], d["kv_memory_bytes"]) == ("ideal", "auto (bf16)", 1_000_000)
    assert (d["page_size_bytes"], d["kv_cache_tokens"], d["engine_kv_bytes"]) == (2_048, 488, 999_424)
    assert (d["max_model_len"], d["max_concurrency"], d["longest_context"]) == (4096, 0.11920928955078125, 488)
    assert d["num_gpu_blocks"] is None and d["notes"] == []
    # --tp 2 through the CLI: 976 tokens of 1,024 B
    d2 = json.loads(cli("capacity", write_spec(gqa_spec), "-m", "1000000B", "--tp", "2", "-f", "json").stdout)
    assert (d2["page_size_bytes"], d2["kv_cache_tokens"]) == (1_024, 976)


def test_capacity_cli_ideal_table(cli, sliding_spec, write_spec):
    r = cli("capacity", write_spec(sliding_spec), "--kv-memory", "8MiB", "-L", "1024")
    assert r.exit_code == 0, r.output
    out = r.stdout
    assert "KV capacity: t-swa on ideal" in out
    assert "5,461" in out and "8,388,096 B" in out and "10.67x requests of 1,024 tokens" in out
