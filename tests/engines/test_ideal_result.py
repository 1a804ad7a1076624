"""The `ideal` profile (`kvcalc/engines/ideal.py`), every field of its result pinned exactly.

Written for mutation testing (tools/mutation.py): before these tests no test called
`ideal.capacity` directly. Model figures come from the bundled configs
(configs/models/llama-3.1-8b.yaml, gemma-3-27b.yaml); GiB = 2^30 B.
"""

from __future__ import annotations

import pytest

from kvcalc.engines import ideal
from kvcalc.errors import KvcalcError
from kvcalc.formats import kv_format
from kvcalc.load.models import load_model
from kvcalc.schema import ModelSpec

BF16, FP8, FP16 = kv_format("bf16"), kv_format("fp8"), kv_format("fp16")
GiB = 2**30
VERSION = "kvcalc exact formula (no engine rounding)"
EMPTY = dict(
    engine_state_bytes=None,
    kv_memory_basis=None,
    block_size=None,
    num_gpu_blocks=None,
    usable_blocks=None,
    num_cpu_blocks=None,
    n_cells=None,
    n_ctx=None,
    k_bytes=None,
    v_bytes=None,
    devices=None,
    notes=[],
)


def test_llama_8b_tokens_concurrency_and_longest_context():
    # llama-3.1-8b: 2 x 32 layers x 8 KV heads x 128 x 2 B = 131,072 B/token.
    # 12 GiB = 12,884,901,888 B // 131,072 = 98,304 tokens (exactly, no remainder).
    # L = max_position_embeddings = 131,072: one request = 131,072 x 131,072 B = 16 GiB -> 12/16 = 0.75.
    # 2 requests of n tokens fit while 2 x n x 131,072 <= 12 GiB -> n <= 49,152.
    r = ideal.capacity(load_model("llama-3.1-8b"), 12 * GiB, BF16, BF16, concurrency=2)
    assert r.model_dump() == dict(
        EMPTY,
        engine="ideal",
        engine_version=VERSION,
        kv_memory_bytes=12_884_901_888,
        kv_cache_dtype="bf16",
        page_size_bytes=131_072,
        kv_cache_tokens=98_304,
        engine_kv_bytes=12_884_901_888,
        max_model_len=131_072,
        max_concurrency=0.75,
        concurrency=2,
        longest_context=49_152,
        log_lines=["98,304 tokens of 131,072 B each fit in 12,884,901,888 B; 0.75 requests of 131,072 tokens"],
    )


def test_gemma_3_27b_tp2_mixed_dtypes_window_aware():
    # gemma-3-27b: 62 layers (52 sliding, window 1024; 10 full), 16 KV heads x 128; tp 2 -> 8 heads/rank.
    # K bf16 (2 B), V fp8 (1 B): 8 x (128 x 2 + 128 x 1) = 3,072 B per layer per token; x 62 = 190,464 B.
    # 1 GiB // 190,464 = 5,637 tokens (5,637 x 190,464 = 1,073,645,568 B).
    # one request of 4,096: 52 x 3,072 x 1,024 + 10 x 3,072 x 4,096 = 163,577,856 + 125,829,120
    #   = 289,406,976 B -> 1,073,741,824 / 289,406,976 = 3.7101 -> "3.71".
    # 3 requests of n >= 1,024 tokens: 3 x (163,577,856 + 30,720 n) <= 1 GiB -> n <= 6,326.04 -> 6,326.
    r = ideal.capacity(load_model("gemma-3-27b"), GiB, BF16, FP8, tp=2, max_model_len=4096, concurrency=3)
    assert r.model_dump() == dict(
        EMPTY,
        engine="ideal",
        engine_version=VERSION,
        kv_memory_bytes=GiB,
        kv_cache_dtype="bf16/fp8_e4m3",
        page_size_bytes=190_464,
        kv_cache_tokens=5_637,
        engine_kv_bytes=1_073_645_568,
        max_model_len=4096,
        max_concurrency=pytest.approx(1_073_741_824 / 289_406_976),
        concurrency=3,
        longest_context=6_326,
        log_lines=["5,637 tokens of 190,464 B each fit in 1,073,741,824 B; 3.71 requests of 4,096 tokens"],
    )


def test_no_max_position_embeddings_gives_no_concurrency():
    # 2 layers x 2 KV heads x 16 x 2 B x 2 (K, V) = 256 B/token; 1,000 // 256 = 3 tokens (768 B).
    # No max_position_embeddings and no max_model_len: no request length, so no concurrency clause.
    m = ModelSpec(name="t", n_layers=2, n_heads=4, n_kv_heads=2, head_dim=16, dtype="fp16")
    r = ideal.capacity(m, 1000, FP16, FP16)
    assert r.model_dump() == dict(
        EMPTY,
        engine="ideal",
        engine_version=VERSION,
        kv_memory_bytes=1000,
        kv_cache_dtype="fp16",
        page_size_bytes=256,
        kv_cache_tokens=3,
        engine_kv_bytes=768,
        max_model_len=None,
        max_concurrency=None,
        concurrency=None,
        longest_context=None,
        log_lines=["3 tokens of 256 B each fit in 1,000 B"],
    )


def test_model_without_kv_layers_holds_zero_tokens():
    # every layer linear attention: 0 B per token, so 0 tokens (not a division by zero) and no
    # concurrency (a request costs 0 B); any length fits, so no longest context (None).
    m = ModelSpec(
        name="z",
        n_layers=2,
        n_heads=4,
        n_kv_heads=2,
        head_dim=16,
        dtype="fp16",
        layer_pattern=["linear"],
        max_position_embeddings=64,
    )
    r = ideal.capacity(m, 1000, FP16, FP16, concurrency=1)
    assert (r.kv_cache_tokens, r.engine_kv_bytes, r.page_size_bytes, r.max_concurrency, r.longest_context) == (
        0,
        0,
        0,
        None,
        None,
    )
    assert r.log_lines == ["0 tokens of 0 B each fit in 1,000 B"]


def test_tp_that_splits_no_heads_evenly_is_refused():
    # llama-3.1-8b has 32 query heads: tp 3 divides none of them (vLLM's rule, kv_cache.check_tp)
    with pytest.raises(KvcalcError, match="not divisible by 3"):
        ideal.capacity(load_model("llama-3.1-8b"), GiB, BF16, BF16, tp=3)


def test_default_kv_dtype_is_the_models_dtype():
    assert ideal.default_kv_dtype(load_model("llama-3.1-8b")) == ("bf16", "auto (bf16)")
    m = ModelSpec(name="t", n_layers=2, n_heads=4, n_kv_heads=2, head_dim=16, dtype="float32")
    assert ideal.default_kv_dtype(m) == ("fp32", "auto (fp32)")
