"""Exact strings and figures of kvcalc/calc/kv_cache.py: the formula line per layer kind (sliding,
full, MLA, hybrid, mixed K/V formats, block formats, windows off), the estimate's breakdown and
labels under tp 2, compare's rows, and the errors that name what does not fit. Written against the
survivors of a mutation run (docs/mutation.md)."""

from __future__ import annotations

import pytest
from specs import DSV2_LITE, GEMMA3_27B, LLAMA_8B  # tests/calc/specs.py: the published configs

from kvcalc.calc import kv_cache
from kvcalc.errors import KvcalcError
from kvcalc.formats import kv_format
from kvcalc.schema import LayerSpec, ModelSpec, Parallelism, Workload

BF16, FP8, Q8 = kv_format("bf16"), kv_format("fp8"), kv_format("q8_0")

# configs/models/jamba-1.5-mini.yaml: mamba first, attention at layers 4, 12, 20, 28
JAMBA = ModelSpec(
    name="jamba-1.5-mini",
    n_layers=32,
    n_heads=32,
    n_kv_heads=8,
    hidden_size=4096,
    layer_pattern=["mamba"] * 4 + ["full"] + ["mamba"] * 3,
    mamba_d_state=16,
    mamba_d_conv=4,
    mamba_expand=2,
    mamba_dt_rank=256,
)
# a synthetic pair, one layer of each kind, so that a kind's second layer does not exist
PAIR = ModelSpec(
    name="pair",
    source="synthetic: one sliding and one full layer",
    n_layers=2,
    n_heads=8,
    n_kv_heads=4,
    head_dim=64,
    sliding_window=512,
    layer_pattern=["sliding", "full"],
)
# mamba layers without their sizes: no KV, a state that cannot be counted
UNSIZED = ModelSpec(
    name="hybrid-unsized", n_layers=4, n_heads=8, n_kv_heads=8, head_dim=64, layer_pattern=["mamba", "full"]
)


# ----- formula ---------------------------------------------------------------------------------


def test_formula_sliding_past_the_window() -> None:
    # per layer per token 2 x 16 x 128 x 2 B = 8192 B; 52 x 8192 x 1024 + 10 x 8192 x 2000
    # = 436,207,616 + 163,840,000 = 600,047,616 B
    assert kv_cache.formula(GEMMA3_27B, 2000, 1, BF16, BF16) == (
        "2 x 52 layers x 16 KV heads x 128 head_dim x min(2,000; 1,024) tokens x 1 batch x 2 B + "
        "2 x 10 layers x 16 KV heads x 128 head_dim x 2,000 tokens x 1 batch x 2 B = 600,047,616 B"
    )


def test_formula_windows_off_and_inside_the_window() -> None:
    # windows ignored: 62 x 8192 x 2000 = 1,015,808,000 B
    assert kv_cache.formula(GEMMA3_27B, 2000, 1, BF16, BF16, window_aware=False) == (
        "2 x 52 layers x 16 KV heads x 128 head_dim x 2,000 tokens x 1 batch x 2 B + "
        "2 x 10 layers x 16 KV heads x 128 head_dim x 2,000 tokens x 1 batch x 2 B = 1,015,808,000 B"
    )
    # 500 tokens, inside the window: 62 x 8192 x 500 = 253,952,000 B
    assert kv_cache.formula(GEMMA3_27B, 500, 1, BF16, BF16) == (
        "2 x 52 layers x 16 KV heads x 128 head_dim x 500 tokens x 1 batch x 2 B + "
        "2 x 10 layers x 16 KV heads x 128 head_dim x 500 tokens x 1 batch x 2 B = 253,952,000 B"
    )


def test_formula_one_layer_per_kind() -> None:
    # 4 x (64 + 64) x 2 B = 1024 B per layer per token: 1024 x 512 + 1024 x 1000 = 1,548,288 B;
    # windows off: 2 x 1024 x 1000 = 2,048,000 B
    assert kv_cache.formula(PAIR, 1000, 1, BF16, BF16) == (
        "2 x 1 layers x 4 KV heads x 64 head_dim x min(1,000; 512) tokens x 1 batch x 2 B + "
        "2 x 1 layers x 4 KV heads x 64 head_dim x 1,000 tokens x 1 batch x 2 B = 1,548,288 B"
    )
    assert kv_cache.formula(PAIR, 1000, 1, BF16, BF16, window_aware=False).endswith(" = 2,048,000 B")


def test_formula_hybrid_skips_the_mamba_kind_and_goes_on() -> None:
    # Jamba: 4 attention layers x 2 x 8 x 128 x 2 B = 16,384 B per token x 100 x 2 = 3,276,800 B
    assert kv_cache.formula(JAMBA, 100, 2, BF16, BF16) == (
        "2 x 4 layers x 8 KV heads x 128 head_dim x 100 tokens x 2 batch x 2 B = 3,276,800 B"
    )
    ssm = ModelSpec(name="ssm", n_layers=2, n_heads=8, head_dim=64, layer_pattern=["mamba"])
    assert kv_cache.formula(ssm, 100, 1, BF16, BF16) == "0 (no layer caches K or V)"


def test_formula_mla() -> None:
    # 27 layers x 576 latent x 2 B x 100 tokens = 3,110,400 B (no factor 2: the latent is K and V)
    assert kv_cache.formula(DSV2_LITE, 100, 1, BF16, BF16) == (
        "27 layers x 576 latent x 100 tokens x 1 batch x 2 B = 3,110,400 B"
    )


def test_formula_mixed_and_block_formats() -> None:
    # fp8 K, bf16 V with equal head dims: 32 x 8 x (128 + 256) B x 10 tokens = 983,040 B
    assert kv_cache.formula(LLAMA_8B, 10, 1, FP8, BF16) == (
        "32 layers x 8 KV heads x (128 x 1 B + 128 x 2 B) x 10 tokens x 1 batch = 983,040 B"
    )
    # q8_0: 34 B per 32 values; a 128 head = 4 blocks = 136 B; 32 x 8 x 2 x 136 x 10 = 696,320 B
    assert kv_cache.formula(LLAMA_8B, 10, 1, Q8, Q8) == (
        "2 x 32 layers x 8 KV heads x 128 head_dim x 10 tokens x 1 batch x 34/32 B = 696,320 B"
    )


# ----- estimate --------------------------------------------------------------------------------


def test_estimate_breakdown_labels_tp2() -> None:
    # PAIR, fp8 K + bf16 V: per layer 4 x (64 x 1 + 64 x 2) = 768 B per token (tp 1); at tp 2 each
    # rank holds 2 heads: 384 B. 1000 tokens x 2 sequences: sliding 768 x 512 x 2 = 786,432 B
    # (393,216 per GPU), full 768 x 1000 x 2 = 1,536,000 B (768,000 per GPU)
    est = kv_cache.estimate(
        PAIR, Workload(seq_len=1000, batch=2, k_dtype="fp8", v_dtype="bf16", parallel=Parallelism(tp=2))
    )
    assert (est.kv_dtype, est.source) == ("fp8_e4m3/bf16", "synthetic: one sliding and one full layer")
    rows = [
        (
            b.kind,
            b.n_layers,
            b.kv_bytes_per_token,
            b.tokens_cached,
            b.kv_cache_bytes,
            b.kv_cache_bytes_per_gpu,
            b.window,
        )
        for b in est.breakdown
    ]
    assert rows == [("sliding", 1, 768, 512, 786_432, 393_216, 512), ("full", 1, 768, 1000, 1_536_000, 768_000, None)]
    # windows off: 2 x 768 x 1000 x 2 = 3,072,000 B
    assert (est.kv_cache_bytes, est.kv_cache_bytes_no_window) == (2_322_432, 3_072_000)
    assert est.kv_cache_bytes_per_gpu == 1_161_216


def test_estimate_state_bytes() -> None:
    # Jamba: 28 mamba layers x (8192 x 3 + 8192 x 16) values x 2 B = 8,716,288 B per sequence; x 3
    est = kv_cache.estimate(JAMBA, Workload(seq_len=100, batch=3, k_dtype="bf16", v_dtype="bf16"))
    assert est.state_bytes == 26_148_864
    assert kv_cache.state_bytes_per_seq(UNSIZED) is None
    est = kv_cache.estimate(UNSIZED, Workload(seq_len=100, batch=3, k_dtype="bf16", v_dtype="bf16"))
    assert est.state_bytes is None


# ----- per-token bytes, heads per rank, errors -------------------------------------------------


def test_kv_bytes_per_token_and_heads_per_rank() -> None:
    # tp 2: 32 layers x 4 heads x (128 + 128) x 2 B = 65,536 B per token per rank
    assert kv_cache.kv_bytes_per_token(LLAMA_8B, "bf16", tp=2) == 65_536
    full = LLAMA_8B.layers[0]
    assert kv_cache.kv_heads_per_rank(full) == 8
    h = kv_cache.kv_heads_per_rank(full, 3)
    assert h == 2 and type(h) is int  # 8 // 3, whole heads
    assert kv_cache.kv_heads_per_rank(DSV2_LITE.layers[0], 1) == 1
    assert kv_cache.kv_heads_per_rank(full, 16) == 1  # 8 heads over 16 ranks: each holds one copy


def test_heads_that_are_not_whole_blocks_name_themselves() -> None:
    layer = LayerSpec(kind="full", n_kv_heads=1, head_dim_k=48, head_dim_v=48)
    with pytest.raises(KvcalcError, match="a K head of 48 values") as e:
        kv_cache.layer_kv_bytes_per_token(layer, Q8, BF16)
    assert e.value.field == "k_dtype"
    with pytest.raises(KvcalcError, match="a V head of 48 values") as e:
        kv_cache.layer_kv_bytes_per_token(layer, BF16, Q8)
    assert e.value.field == "v_dtype"
    latent = LayerSpec(kind="mla", n_kv_heads=1, head_dim_k=564, head_dim_v=0)  # 500 + 64
    with pytest.raises(KvcalcError, match="a latent of 564 values") as e:
        kv_cache.layer_kv_bytes_per_token(latent, Q8, Q8)
    assert e.value.field == "k_dtype"


def test_state_that_is_not_whole_blocks_names_itself() -> None:
    # a GGUF-style model whose dtype is q8_0 (32 values per block): a mamba layer of hidden 36 keeps
    # d_inner 72 x (4 - 1) conv + 72 x 16 SSM = 1368 values, 42.75 blocks
    m = ModelSpec(
        name="q8-ssm",
        n_layers=2,
        n_heads=4,
        head_dim=9,
        hidden_size=36,
        dtype="q8_0",
        layer_pattern=["mamba", "full"],
        mamba_d_state=16,
        mamba_d_conv=4,
        mamba_expand=2,
    )
    with pytest.raises(KvcalcError, match="a state of 1368 values"):
        kv_cache.state_bytes_per_seq(m)


# ----- compare ---------------------------------------------------------------------------------


def _labels(model: ModelSpec) -> list[tuple[str, int]]:
    return [(r.variant, r.n_kv_heads) for r in kv_cache.compare_attention(model, 1000, 1, "bf16")]


def test_compare_labels() -> None:
    assert _labels(LLAMA_8B) == [("MHA", 32), ("GQA (4 queries per KV head, own)", 8), ("MQA", 1)]
    two = ModelSpec.model_validate({**LLAMA_8B.model_dump(), "n_kv_heads": 2})
    assert _labels(two) == [("MHA", 32), ("GQA (16 queries per KV head, own)", 2), ("MQA", 1)]
    one = ModelSpec.model_validate({**LLAMA_8B.model_dump(), "n_kv_heads": 1})
    assert _labels(one) == [("MHA", 32), ("MQA (own)", 1)]
    mha = ModelSpec.model_validate({**LLAMA_8B.model_dump(), "n_kv_heads": 32})
    assert _labels(mha) == [("MHA (own)", 32), ("MQA", 1)]
    with pytest.raises(KvcalcError, match="compare applies to MHA/GQA/MQA models"):
        kv_cache.compare_attention(DSV2_LITE, 1000, 1, "bf16")
