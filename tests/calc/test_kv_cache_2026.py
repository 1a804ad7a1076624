"""The 2026 layer features as data (`LayerSpec`): each one's bytes from a small hand-written spec,
the features a model has (`layer_features`), the refusal of an engine that does not model one
(`refuse_unmodelled_layers`, and today's hooks `refuse_indexer` / `refuse_hybrid_layers`), the ideal
engine's capacity on them, and the schema's refusals of inconsistent fields."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from kvcalc.calc import kv_cache
from kvcalc.engines import ideal
from kvcalc.errors import KvcalcError
from kvcalc.formats import kv_format
from kvcalc.load.models import load_model
from kvcalc.schema import ModelSpec

BF16 = kv_format("bf16")


def spec(**kw) -> ModelSpec:
    base = dict(name="t", n_layers=4, n_heads=8, n_kv_heads=2, head_dim=64)
    return ModelSpec.model_validate({**base, **kw})


def test_kind_geometry_gives_global_layers_their_own_heads():
    # 3 sliding layers of 2 KV heads x 64 (window 16) and 1 full layer of 1 KV head x 128:
    # per token 3 x 2 x 2 x 64 x 2 + 1 x 2 x 1 x 128 x 2 = 1,536 + 512 = 2,048
    # 100 tokens: 3 x 16 x 512 + 100 x 512 = 24,576 + 51,200 = 75,776
    m = spec(
        sliding_window=16,
        layer_pattern=["sliding", "sliding", "sliding", "full"],
        kind_geometry={"full": {"n_kv_heads": 1, "head_dim": 128}},
    )
    assert kv_cache.kv_bytes_per_token(m, "bf16") == 2_048
    assert kv_cache.kv_cache_bytes(m, 100, 1, "bf16") == 75_776
    assert kv_cache.layer_features(m) == {"kind_geometry"}


def test_v_is_k_is_stored_once():
    # 4 layers x 1 KV head x 64, one tensor K = V: 4 x 64 x 2 = 512 a token (not 1,024)
    m = spec(n_kv_heads=1, v_is_k=True)
    assert kv_cache.kv_bytes_per_token(m, "bf16") == 512
    assert [x.head_dim_v for x in m.layers] == [0] * 4


def test_k_eq_v_still_caches_k_and_v():
    # Gemma-4's attention_k_eq_v: one projection, two cached tensors: 4 x 2 x 2 x 64 x 2 = 2,048
    m = spec(kind_geometry={"full": {"k_eq_v": True}})
    assert kv_cache.kv_bytes_per_token(m, "bf16") == 2_048
    assert kv_cache.layer_features(m) == {"k_eq_v"}


def test_shared_layers_have_no_cache():
    # the last 2 of 4 full layers reuse layer 1's cache: 2 x 2 x 2 x 64 x 2 = 1,024 a token
    m = spec(n_kv_shared_layers=2)
    assert [x.kv_source for x in m.layers] == [None, None, 1, 1]
    assert kv_cache.kv_bytes_per_token(m, "bf16") == 1_024
    assert kv_cache.layer_features(m) == {"kv_shared"}


def test_compressed_entries_and_their_indexer():
    # 2 layers, window 8 of one 64-value K = V tensor (128 B a token); layer 0 also one 64-value entry per
    # 4 tokens with a 128-value indexer key (132 B): entry 128 + 132 = 260 B; layer 1 one per 16 tokens
    # (128 B). 100 tokens: 2 x 8 x 128 + 25 x 260 + 6 x 128 = 2,048 + 6,500 + 768 = 9,316; plus the
    # compressors' fp32 open windows (kv_cache.compressor_state_bytes, 2 x coff r x coff D x 4 B): layer 0
    # (coff 2, its entry 64 and indexer 128) 2 x 8 x 2 x 192 x 4 = 24,576, layer 1 2 x 16 x 64 x 4 = 8,192
    # -> 9,316 + 32,768 = 42,084
    m = spec(
        n_layers=2,
        n_kv_heads=1,
        v_is_k=True,
        sliding_window=8,
        compress_ratios=[4, 16],
        index_head_dim=128,
        index_layers=[1, 0],
    )
    assert kv_cache.kv_cache_bytes(m, 100, 1, "bf16") == 9_316 + 24_576 + 8_192 == 42_084
    # per token: 2 x 128 + 260 / 4 + 128 / 16 = 256 + 65 + 8 = 329
    assert kv_cache.kv_bytes_per_token(m, "bf16") == 329
    assert kv_cache.layer_features(m) == {"v_is_k", "compressed", "indexer", "partial_indexer"}


def test_amortized_bytes_round_up_a_fraction():
    # one 64-value entry (128 B) per 3 tokens: 128 / 3 = 42.67 -> 43 B a token beside the window's 128
    m = spec(n_layers=1, n_kv_heads=1, v_is_k=True, sliding_window=8, compress_ratios=[3])
    assert kv_cache.kv_bytes_per_token(m, "bf16") == 128 + 43


def test_indexer_in_the_kv_format():
    # MiniMax-M3's index_format kv: 128 values in fp8 = 128 B beside K and V (2 x 2 x 64 x 1 = 256 B)
    m = spec(n_layers=1, index_head_dim=128, index_format="kv")
    assert kv_cache.kv_bytes_per_token(m, "fp8") == 256 + 128
    assert kv_cache.kv_bytes_per_token(m, "bf16") == 512 + 256
    assert kv_cache.layer_features(m) == {"indexer_kv"}


def test_sinks_are_parameters_not_cache():
    m = spec(sliding_window=8, layer_pattern=["sliding", "full"], attention_sinks=["sliding"])
    assert [x.sink_heads for x in m.layers] == [8, 0, 8, 0]
    assert kv_cache.kv_bytes_per_token(m, "bf16") == kv_cache.kv_bytes_per_token(
        spec(sliding_window=8, layer_pattern=["sliding", "full"]), "bf16"
    )


def test_linear_beside_mla_is_a_feature():
    assert kv_cache.layer_features(load_model("kimi-k3")) == {"linear_beside_mla"}


@pytest.mark.parametrize(
    "name,features",
    [
        ("gemma-4-26b-a4b", {"k_eq_v", "kind_geometry"}),
        ("mimo-v2-flash", {"kind_geometry", "sinks"}),
        ("deepseek-v4-flash", {"v_is_k", "compressed", "indexer", "partial_indexer"}),
        ("glm-5.2", {"indexer", "partial_indexer"}),
        ("minimax-m3", {"indexer_kv", "partial_indexer"}),
        ("deepseek-v3.2", {"indexer"}),
        ("step-3.7-flash", set()),
        ("llama-3.1-8b", set()),
    ],
)
def test_layer_features_of_the_bundled_models(name, features):
    assert kv_cache.layer_features(load_model(name)) == features


# ----- engines that do not model a feature refuse it -------------------------------------------


def test_refuse_unmodelled_layers_names_the_feature_and_the_engine():
    with pytest.raises(
        KvcalcError,
        match="deepseek-v4-flash has a compressed cache of one entry per N tokens beside "
        "the window .*; the vLLM profile does not model these yet; use --engine "
        "ideal",
    ) as e:
        kv_cache.refuse_unmodelled_layers(load_model("deepseek-v4-flash"), "vLLM", frozenset({"indexer"}))
    assert e.value.field == "model"
    kv_cache.refuse_unmodelled_layers(
        load_model("deepseek-v4-flash"), "x", frozenset({"v_is_k", "compressed", "indexer", "partial_indexer"})
    )


@pytest.mark.parametrize(
    "name,hook,needle",
    [
        ("gemma-4-26b-a4b", "refuse_hybrid_layers", "KV heads or head sizes that differ between the full and sliding"),
        ("mimo-v2-flash", "refuse_indexer", "KV heads or head sizes that differ"),
        ("glm-5.2", "refuse_hybrid_layers", "an indexer on some attention layers only"),
        ("minimax-m3", "refuse_indexer", "indexer"),
        ("kimi-k3", "refuse_hybrid_layers", "linear-attention state layers beside MLA layers"),
        ("deepseek-v4-flash", "refuse_hybrid_layers", "a compressed cache of one entry per N tokens"),
    ],
)
def test_todays_engine_hooks_refuse_the_new_features(name, hook, needle):
    with pytest.raises(KvcalcError, match=needle):
        getattr(kv_cache, hook)(load_model(name), "vLLM")


def test_todays_hooks_still_pass_the_models_they_size():
    kv_cache.refuse_hybrid_layers(load_model("deepseek-v3.2"), "SGLang")  # SGLang sizes V3.2's NSA pool
    kv_cache.refuse_indexer(load_model("step-3.7-flash"), "vLLM")
    kv_cache.refuse_hybrid_layers(load_model("gpt-oss-20b"), "vLLM")


def test_cli_capacity_refuses_gemma4_under_vllm_011():
    """vLLM 0.33 sizes Gemma-4 (tests/engines/test_vllm_2026.py); 0.11 has no Gemma-4 geometry."""
    from typer.testing import CliRunner

    from kvcalc.cli.app import app

    r = CliRunner().invoke(
        app, ["capacity", "gemma-4-26b-a4b", "--engine", "vllm", "--vllm-version", "0.11", "--kv-memory", "40GiB"]
    )
    assert r.exit_code == 2
    assert r.stderr.strip() == (
        "error: gemma-4-26b-a4b: vLLM 0.11 does not have KV heads or head sizes that differ "
        "between the full and sliding layers (vLLM 0.33 sizes the 2026 attention: "
        "--vllm-version 0.33)"
    )


# ----- the ideal engine ------------------------------------------------------------------------


def test_ideal_capacity_of_gemma4():
    # 225,280 B a token (tests/load/test_hf_2026.py): 2^30 // 225,280 = 4,766 tokens;
    # one request of 32,768 tokens is 880,803,840 B: 1,073,741,824 / 880,803,840 = 1.2190 requests
    r = ideal.capacity(load_model("gemma-4-26b-a4b"), 2**30, BF16, BF16, max_model_len=32_768)
    assert (r.kv_cache_tokens, r.page_size_bytes) == (4_766, 225_280)
    assert r.max_concurrency == pytest.approx(1_073_741_824 / 880_803_840)


def test_ideal_capacity_of_deepseek_v4_counts_entries_per_ratio():
    # 50,261 B a token (43 x 1,024 + 21 x 1,156 / 4 + 20 x 1,024 / 128): 2^30 // 50,261 = 21,363 tokens;
    # a 32,768-token request is 209,747,968 B + 12,206,080 B of compressor state (21 CSA x 81,920 + 20
    # HCA x 524,288) = 221,954,048 B: 2^30 / 221,954,048 = 4.838 requests
    r = ideal.capacity(load_model("deepseek-v4-flash"), 2**30, BF16, BF16, max_model_len=32_768)
    assert (r.kv_cache_tokens, r.page_size_bytes) == (21_363, 50_261)
    assert r.max_concurrency == pytest.approx(1_073_741_824 / 221_954_048)
    # the longest context 4 requests fit in: 4 x bytes(L) <= 2^30
    r4 = ideal.capacity(load_model("deepseek-v4-flash"), 2**30, BF16, BF16, concurrency=4)
    one = kv_cache.kv_cache_bytes(load_model("deepseek-v4-flash"), r4.longest_context, 1, "bf16")
    more = kv_cache.kv_cache_bytes(load_model("deepseek-v4-flash"), r4.longest_context + 1, 1, "bf16")
    assert 4 * one <= 2**30 < 4 * more


def test_ideal_capacity_of_glm5_counts_the_full_indexer_layers_only():
    # 92,628 B a token: 2^30 // 92,628 = 11,591 tokens
    r = ideal.capacity(load_model("glm-5.2"), 2**30, BF16, BF16)
    assert r.kv_cache_tokens == 11_591


def test_ideal_tp_keeps_the_one_kv_head_whole():
    # DeepSeek-V4's one K = V head is replicated on every rank: the same 50,261 B a token at tp 8
    r = ideal.capacity(load_model("deepseek-v4-flash"), 2**30, BF16, BF16, tp=8)
    assert r.page_size_bytes == 50_261


def test_tp_checks_every_layer_kinds_kv_heads():
    # Gemma-4's global layers have 2 KV heads: tp 3 divides neither 8 nor 2
    with pytest.raises(KvcalcError, match="cannot be split over 3 ranks"):
        kv_cache.check_tp(
            spec(
                n_heads=24,
                n_kv_heads=6,
                sliding_window=8,
                layer_pattern=["sliding", "full"],
                kind_geometry={"full": {"n_kv_heads": 2}},
            ),
            3,
        )


# ----- the schema refuses what does not fit together ---------------------------------------------


@pytest.mark.parametrize(
    "kw,field",
    [
        (dict(compress_ratios=[4, 4]), "compress_ratios"),
        (dict(compress_ratios=[1, 0, 0, 0]), "compress_ratios"),
        (dict(index_layers=[1, 0, 0, 0]), "index_layers"),
        (dict(index_head_dim=128, index_format="kv", index_layers=[2, 0, 0, 0]), "index_layers"),
        (dict(n_kv_shared_layers=4), "n_kv_shared_layers"),
        (dict(v_is_k=True, v_head_dim=32), "v_is_k"),
        (dict(attention_sinks=["mamba"]), "attention_sinks"),
        (dict(kind_geometry={"full": {"n_kv_heads": 3}}), "kind_geometry"),
    ],
)
def test_schema_refuses_inconsistent_2026_fields(kw, field):
    with pytest.raises(ValidationError) as e:
        spec(**kw)
    assert e.value.errors()[0]["loc"] == (field,)


def test_mimo_v2_window_is_the_models_129():
    # transformers 5.20.2 configuration_mimo_v2_flash.py: sliding_window = sliding_window_size (128) + 1,
    # "attends to sliding_window_size previous tokens plus the query"; its mask keeps kv_idx > q_idx - 129:
    # 129 positions. The ideal cache holds them: 39 SWA layers x 129 x 8 KV heads x (192 + 128) x 2 B
    spec = load_model("mimo-v2-flash")
    sliding = [x for x in spec.layers if x.kind == "sliding"]
    assert {kv_cache.tokens_cached(x, 32_768) for x in sliding} == {129}
    assert kv_cache.layers_cache_bytes(sliding, 32_768, 1, BF16, BF16) == 39 * 129 * 8 * 320 * 2 == 25_758_720


def test_deepseek_v4_compressor_state():
    # reference inference/model.py Compressor: kv_state + score_state (coff r, coff D) fp32 per sequence;
    # CSA (r 4, coff 2): 2 x 8 x 1,024 x 4 = 65,536 + the indexer's compressor 2 x 8 x 256 x 4 = 16,384;
    # HCA (r 128, coff 1): 2 x 128 x 512 x 4 = 524,288; a window-only layer none
    layers = load_model("deepseek-v4-flash").layers
    assert [kv_cache.compressor_state_bytes(layers[i]) for i in (0, 2, 3)] == [0, 81_920, 524_288]
    # fixed: a 1-token and a 32k sequence hold the same state; an empty one none
    one = kv_cache.layers_cache_bytes([layers[3]], 1, 1, BF16, BF16)
    assert one == 1_024 + 524_288
    assert kv_cache.layers_cache_bytes([layers[3]], 0, 1, BF16, BF16) == 0
