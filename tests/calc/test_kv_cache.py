"""The pure KV arithmetic in `kvcalc.calc.kv_cache` (and the block formats it uses), on hand-derived
numbers. Model shapes are built inline so each test states exactly what it computes."""

from __future__ import annotations

import pytest

from kvcalc import report
from kvcalc.calc import kv_cache
from kvcalc.errors import KvcalcError
from kvcalc.formats import kv_format
from kvcalc.load.models import load_model
from kvcalc.schema import LayerSpec, ModelSpec, Parallelism, Workload


def spec(n_layers=80, n_heads=64, n_kv_heads=8, head_dim=128, **kw) -> ModelSpec:
    return ModelSpec(name="test", n_layers=n_layers, n_heads=n_heads, n_kv_heads=n_kv_heads, head_dim=head_dim, **kw)


# ----- the worked example ----------------------------------------------------------------


def test_worked_example_80_layers_8_kv_heads_8k_tokens_fp16():
    # 2 x 80 layers x 8 KV heads x 128 head_dim x 8,192 tokens x 1 batch x 2 B = 2,684,354,560 B
    total = kv_cache.kv_cache_bytes(spec(), seq_len=8192, batch=1, kv_dtype="fp16")
    assert total == 2_684_354_560
    assert report.size(total) == "2,684,354,560 B (2.68 GB, 2.50 GiB)"  # / 10^9 and / 2^30
    assert report.gib(total) == "2.50 GiB"  # / 2^30: exactly 2.5
    assert total == 5 * 2**29


def test_worked_example_bytes_per_token():
    # 2 x 80 x 8 x 128 x 2 B = 327,680 B per token
    assert kv_cache.kv_bytes_per_token(spec(), "fp16") == 327_680


@pytest.mark.parametrize(
    "seq_len,expected",
    [
        # sixteen users at 32,768 tokens: 327,680 x 32,768 x 16 = 171,798,691,840 B (> 170 GB)
        (32_768, 171_798_691_840),
        # at 32,000 tokens: 327,680 x 32,000 x 16 = 167,772,160,000 B (< 170 GB)
        (32_000, 167_772_160_000),
    ],
)
def test_sixteen_users(seq_len, expected):
    total = kv_cache.kv_cache_bytes(spec(), seq_len=seq_len, batch=16, kv_dtype="fp16")
    assert total == expected


def test_over_170_gb_holds_only_for_32768():
    assert kv_cache.kv_cache_bytes(spec(), 32_768, 16, "fp16") > 170e9
    assert kv_cache.kv_cache_bytes(spec(), 32_000, 16, "fp16") < 170e9


# ----- compare_attention ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "n_heads,n_kv_heads,own_pct,mqa_pct",
    [
        # 32 query heads sharing 8 KV heads: 1 - 8/32 = 75%; sharing 1: 1 - 1/32 = 96.875%
        (32, 8, 75.0, 96.875),
        # 64 sharing 8 (llama-3.1-70b's layout): 1 - 8/64 = 87.5%; MQA 1 - 1/64 = 98.4375%
        (64, 8, 87.5, 98.4375),
    ],
)
def test_compare_attention_reductions(n_heads, n_kv_heads, own_pct, mqa_pct):
    rows = kv_cache.compare_attention(spec(32, n_heads, n_kv_heads), 4096, 1, "bf16")
    assert [r.n_kv_heads for r in rows] == [n_heads, n_kv_heads, 1]
    assert [r.reduction_vs_mha_percent for r in rows] == [0.0, own_pct, mqa_pct]
    # MHA row: 2 x 32 layers x n_heads x 128 x 2 B per token
    assert rows[0].kv_bytes_per_token == 2 * 32 * n_heads * 128 * 2
    assert rows[1].kv_cache_bytes * n_heads == rows[0].kv_cache_bytes * n_kv_heads


def test_compare_attention_bundled_llama_3_1_70b():
    rows = kv_cache.compare_attention(load_model("llama-3.1-70b"), 8192, 1, "bf16")
    own = [r for r in rows if "own" in r.variant]
    assert len(own) == 1 and own[0].n_kv_heads == 8 and own[0].reduction_vs_mha_percent == 87.5
    # own: 2 x 80 x 8 x 128 x 8,192 x 2 B = 2,684,354,560
    assert own[0].kv_cache_bytes == 2_684_354_560


def test_compare_attention_mha_model_has_two_rows():
    rows = kv_cache.compare_attention(spec(32, 32, 32), 1024, 1, "fp16")
    assert [(r.n_kv_heads, r.reduction_vs_mha_percent) for r in rows] == [(32, 0.0), (1, 96.875)]
    assert "own" in rows[0].variant


def test_compare_attention_refuses_mla():
    with pytest.raises(KvcalcError, match="MLA"):
        kv_cache.compare_attention(load_model("deepseek-v3"), 1024, 1, "bf16")


# ----- pipeline stages (vLLM vllm/distributed/utils.py get_pp_indices) ----------------------


@pytest.mark.parametrize(
    "n_layers,pp,sizes",
    [
        (32, 4, [8, 8, 8, 8]),  # even
        (61, 4, [15, 15, 16, 15]),  # 61 // 4 = 15, remainder 1 -> second-to-last stage
        (80, 3, [27, 27, 26]),  # remainder 2 -> stages -2 and -3
        (10, 4, [2, 3, 3, 2]),  # remainder 2 -> the middle stages
        (7, 4, [2, 2, 2, 1]),  # remainder 3 -> all but the last
        (5, 1, [5]),
        (4, 4, [1, 1, 1, 1]),
    ],
)
def test_pp_stages(n_layers, pp, sizes):
    stages = kv_cache.pp_stages(n_layers, pp)
    assert [len(s) for s in stages] == sizes
    # contiguous cover of 0..n_layers-1
    assert [i for s in stages for i in s] == list(range(n_layers))


def test_pp_stages_refuses_more_stages_than_layers():
    with pytest.raises(KvcalcError, match="--pp 5 exceeds"):
        kv_cache.pp_stages(4, 5)


# ----- check_tp ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "n_heads,n_kv,tp",
    [
        (32, 8, 3),  # query heads not divisible
        (24, 6, 4),  # 24 % 4 == 0 but 6 KV heads and 4 ranks: neither divides the other
        (40, 10, 4),  # same: 10 % 4 and 4 % 10
        (71, 1, 2),  # falcon-7b's 71 query heads
    ],
)
def test_check_tp_refuses(n_heads, n_kv, tp):
    with pytest.raises(KvcalcError, match=f"--tp {tp}"):
        kv_cache.check_tp(spec(4, n_heads, n_kv), tp)


@pytest.mark.parametrize(
    "n_heads,n_kv,tp",
    [
        (64, 8, 8),
        (64, 8, 16),
        (64, 8, 2),
        (32, 32, 4),
        (71, 1, 1),
        (32, 1, 8),
    ],
)
def test_check_tp_accepts(n_heads, n_kv, tp):
    kv_cache.check_tp(spec(4, n_heads, n_kv), tp)  # no exception


@pytest.mark.parametrize("n_kv,tp,per_rank", [(8, 1, 8), (8, 4, 2), (8, 8, 1), (8, 16, 1), (1, 8, 1)])
def test_kv_heads_per_rank(n_kv, tp, per_rank):
    layer = LayerSpec(kind="full", n_kv_heads=n_kv, head_dim_k=128, head_dim_v=128)
    assert kv_cache.kv_heads_per_rank(layer, tp) == per_rank


def test_estimate_tp_replicates_beyond_kv_heads():
    # 4 layers, 2 KV heads, tp 4: 1 head per rank (replicated twice): 4 x 2 x 1 x 128 x 2 = 2,048 B
    # per token per GPU; all 4 GPUs: 8,192 B, double the unsplit 4 x 2 x 2 x 128 x 2 = 4,096
    est = kv_cache.estimate(
        spec(4, 8, 2), Workload(seq_len=1, k_dtype="bf16", v_dtype="bf16", parallel=Parallelism(tp=4))
    )
    assert (est.kv_bytes_per_token, est.kv_bytes_per_token_per_gpu, est.kv_cache_bytes_all_gpus) == (
        4_096,
        2_048,
        8_192,
    )


def test_estimate_dp_multiplies_all_gpus_only():
    # dp 3 replicas of 4,096 B per token each; per-GPU unchanged
    est = kv_cache.estimate(
        spec(4, 8, 2), Workload(seq_len=1, k_dtype="bf16", v_dtype="bf16", parallel=Parallelism(dp=3))
    )
    assert (est.kv_cache_bytes_per_gpu, est.kv_cache_bytes_all_gpus, est.n_gpus) == (4_096, 12_288, 3)


# ----- block formats ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name,bytes_per_128",
    [
        ("fp32", 512),
        ("fp16", 256),
        ("bf16", 256),
        ("fp8", 128),
        ("fp8_e5m2", 128),
        ("int8", 128),
        ("q8_0", 136),  # 4 blocks x (2 B scale + 32 x 1 B) = 4 x 34; 34/32 B per value
        ("q4_0", 72),  # 4 x (2 + 16) = 4 x 18; 18/32
        ("q4_1", 80),  # 4 x (2 + 2 + 16) = 4 x 20; 20/32
        ("q5_0", 88),  # 4 x (2 + 4 + 16) = 4 x 22; 22/32
        ("q5_1", 96),  # 4 x (2 + 2 + 4 + 16) = 4 x 24; 24/32
        ("iq4_nl", 72),  # 4 x (2 + 16) = 4 x 18; 18/32
        ("int4", 72),  # default groups of 32 + fp16 scale: 4 x 18
        ("int8:g64:fp16", 132),  # 2 groups x (64 + 2) = 132; 66/64
        ("int4:g128:fp32", 68),  # 1 group x (64 + 4) = 68; 68/128
        ("int4:g64:bf16", 68),  # 2 groups x (32 + 2) = 68
        ("int8:g32:fp8", 132),  # 4 groups x (32 + 1) = 132
    ],
)
def test_kv_format_bytes_for_a_128_head(name, bytes_per_128):
    assert kv_format(name).bytes_for(128) == bytes_per_128


@pytest.mark.parametrize(
    "name,block_values,block_bytes",
    [
        ("q8_0", 32, 34),
        ("q4_0", 32, 18),
        ("q4_1", 32, 20),
        ("q5_0", 32, 22),
        ("q5_1", 32, 24),
        ("iq4_nl", 32, 18),
        ("int8:g64:fp16", 64, 66),
        ("int4:g128:fp32", 128, 68),
    ],
)
def test_kv_format_blocks(name, block_values, block_bytes):
    f = kv_format(name)
    assert (f.block_values, f.block_bytes) == (block_values, block_bytes)


def test_kv_format_group_keywords_match_the_spelled_form():
    assert kv_format("int8", quant_group_size=64, scale_dtype="fp16") == kv_format("int8:g64:fp16")
    assert kv_format("int4", quant_group_size=128, scale_dtype="fp32").bytes_for(256) == 136


@pytest.mark.parametrize(
    "name,n_values",
    [
        ("q8_0", 80),  # 80 = 2.5 blocks of 32
        ("q4_0", 100),
        ("int4:g128", 64),  # gpt2-sized head, group of 128
        ("int8:g64:fp16", 96),  # phi-3's head_dim 96 = 1.5 groups of 64
    ],
)
def test_kv_format_refuses_partial_blocks(name, n_values):
    with pytest.raises(KvcalcError, match="not a whole number of blocks"):
        kv_format(name).bytes_for(n_values)


def test_engine_refuses_head_dim_not_whole_blocks():
    # head_dim 80 (hidden 2560 / 32) in q4_0: 80 % 32 = 16
    with pytest.raises(KvcalcError, match="K head of 80 values"):
        kv_cache.kv_bytes_per_token(spec(2, 32, 8, head_dim=80), "q4_0")


@pytest.mark.parametrize(
    "bad,needle",
    [
        ("q8_0:g64", "'q8_0:g64': group options apply to int8 and int4 only, not q8_0"),
        ("fp16:g32", "'fp16:g32': group options apply to int8 and int4 only, not fp16"),
        ("int4:g3", "the group size must be a positive even integer for int4, got 3"),
        ("int4:g0", "the group size must be a positive even integer, got 0"),
    ],
)
def test_kv_format_refuses_bad_group_options(bad, needle):
    with pytest.raises(KvcalcError, match=needle):
        kv_format(bad)


def test_different_k_and_v_formats():
    # 2 layers x 8 heads x (128 x 34/32 + 128 x 1 B) = 16 x (136 + 128) = 4,224
    assert kv_cache.kv_bytes_per_token(spec(2, 32, 8), "q8_0", "fp8") == 4_224
    # V defaults to K: 2 x 2 x 8 x 136 = 4,352
    assert kv_cache.kv_bytes_per_token(spec(2, 32, 8), "q8_0") == 4_352


# ----- per-layer rules ----------------------------------------------------------------------------

BF16 = kv_format("bf16")


def test_mla_has_no_factor_two():
    # one latent of 512 + 64 = 576 values x 2 B = 1,152 B per token per layer; V format unused
    layer = LayerSpec(kind="mla", n_kv_heads=1, head_dim_k=576, head_dim_v=0)
    assert kv_cache.layer_kv_bytes_per_token(layer, BF16, BF16) == 1_152
    assert kv_cache.layer_kv_bytes_per_token(layer, BF16, kv_format("fp8")) == 1_152
    # the same on every TP rank (replicated)
    assert kv_cache.layer_kv_bytes_per_token(layer, BF16, BF16, tp=8) == 1_152


def test_mla_model_bytes_per_token():
    m = ModelSpec(name="mla", n_layers=61, n_heads=128, attention="mla", kv_lora_rank=512, qk_rope_head_dim=64)
    # 61 x 576 x 2 B = 70,272 (not 2 x 61 x 128 heads x ... )
    assert kv_cache.kv_bytes_per_token(m, "bf16") == 70_272
    assert m.attention_kind == "mla" and m.resolved_head_dim == 576


def test_full_layer_with_v_head_dim_different_from_k():
    # 4 heads x (192 x 2 + 128 x 2) = 4 x 640 = 2,560
    layer = LayerSpec(kind="full", n_kv_heads=4, head_dim_k=192, head_dim_v=128)
    assert kv_cache.layer_kv_bytes_per_token(layer, BF16, BF16) == 2_560


@pytest.mark.parametrize(
    "kind,window,seq_len,aware,cached",
    [
        ("sliding", 4096, 32_768, True, 4096),  # min(seq_len, window)
        ("sliding", 4096, 1_000, True, 1_000),
        ("sliding", 4096, 4096, True, 4096),
        ("sliding", 4096, 32_768, False, 32_768),  # no-window figure
        ("full", None, 32_768, True, 32_768),
        ("mamba", None, 32_768, True, 0),
        ("linear", None, 32_768, True, 0),
    ],
)
def test_tokens_cached(kind, window, seq_len, aware, cached):
    layer = (
        LayerSpec(kind=kind, n_kv_heads=8, head_dim_k=128, head_dim_v=128, window=window)
        if kind in ("full", "sliding")
        else LayerSpec(kind=kind)
    )
    assert kv_cache.tokens_cached(layer, seq_len, window_aware=aware) == cached


def test_state_layers_cache_no_kv():
    assert kv_cache.layer_kv_bytes_per_token(LayerSpec(kind="mamba", state_values=10), BF16, BF16) == 0


def test_sliding_model_cache_bytes():
    # 3 full + 3 sliding (window 512) layers, 2 KV heads x 64, bf16: 512 B per layer per token
    # at 2,048 tokens x batch 2: (3 x 2,048 + 3 x 512) x 512 x 2 = 7,864,320
    m = spec(6, 4, 2, head_dim=64, sliding_window=512, layer_pattern=["full", "sliding"])
    assert kv_cache.kv_cache_bytes(m, 2048, 2, "bf16") == 7_864_320
    # no window: 6 x 2,048 x 512 x 2 = 12,582,912
    assert kv_cache.kv_cache_bytes(m, 2048, 2, "bf16", window_aware=False) == 12_582_912
    est = kv_cache.estimate(m, Workload(seq_len=2048, batch=2, k_dtype="bf16", v_dtype="bf16"))
    by_kind = {b.kind: b for b in est.breakdown}
    assert by_kind["sliding"].tokens_cached == 512 and by_kind["full"].tokens_cached == 2048
    assert by_kind["sliding"].kv_cache_bytes == 3 * 512 * 512 * 2
    assert est.formula.endswith("= 7,864,320 B")


def test_estimate_reports_its_inputs():
    est = kv_cache.estimate(spec(), Workload(seq_len=8192, k_dtype="fp16", v_dtype="fp16"))
    assert (est.attention, est.queries_per_kv_head, est.head_dim, est.kv_dtype) == ("gqa", 8, 128, "fp16")
    assert est.kv_cache_bytes == est.kv_cache_bytes_per_gpu == est.kv_cache_bytes_all_gpus == 2_684_354_560
