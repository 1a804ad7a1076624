"""More exact parameter and weight-byte counts (kvcalc/calc/weights.py): MLA without q_lora_rank at
tp 1 and 2, attention biases, the mamba dt_rank default, the explicit-n_params spread (with a
block format's remainder), tied heads over pipeline stages, and the errors that name each missing
size. Written against the survivors of a mutation run (docs/mutation.md)."""

from __future__ import annotations

import pytest

from kvcalc.calc import kv_cache
from kvcalc.calc.weights import WeightBytes, layer_params, model_params, weight_bytes
from kvcalc.errors import KvcalcError
from kvcalc.schema import ModelSpec

# huggingface.co/deepseek-ai/DeepSeek-V2-Lite config.json: MLA without q_lora_rank; layer 0 dense
DSV2_LITE = dict(
    name="deepseek-v2-lite",
    n_layers=27,
    n_heads=16,
    hidden_size=2048,
    attention="mla",
    kv_lora_rank=512,
    qk_rope_head_dim=64,
    qk_nope_head_dim=128,
    v_head_dim=128,
    vocab_size=102400,
    intermediate_size=10944,
    moe_intermediate_size=1408,
    n_experts=64,
    n_experts_per_token=6,
    shared_expert_intermediate_size=2816,
    first_dense_layers=1,
)
# configs/models/qwen2.5-7b.yaml (Qwen/Qwen2.5-7B config.json): q/k/v biases
QWEN25_7B = ModelSpec(
    name="qwen2.5-7b",
    n_layers=28,
    n_heads=28,
    n_kv_heads=4,
    hidden_size=3584,
    vocab_size=152064,
    intermediate_size=18944,
    attention_bias=True,
)
# configs/models/jamba-1.5-mini.yaml, without mamba_dt_rank (its default ceil(4096 / 16) = 256)
JAMBA = dict(
    name="jamba-1.5-mini",
    n_layers=32,
    n_heads=32,
    n_kv_heads=8,
    hidden_size=4096,
    layer_pattern=["mamba"] * 4 + ["full"] + ["mamba"] * 3,
    mamba_d_state=16,
    mamba_d_conv=4,
    mamba_expand=2,
    vocab_size=65536,
    intermediate_size=14336,
    n_experts=16,
    n_experts_per_token=2,
    moe_intermediate_size=14336,
    moe_layer_period=2,
    moe_layer_offset=1,
)
# configs/models/qwen3-next-80b-a3b.yaml: Gated DeltaNet sizes
GDN = dict(
    linear_num_key_heads=16,
    linear_num_value_heads=32,
    linear_key_head_dim=128,
    linear_value_head_dim=128,
    linear_conv_kernel_dim=4,
)
# configs/models/gpt2.yaml (openai-community/gpt2): fp32, tied, plain MLP, biases
GPT2 = ModelSpec(
    name="gpt2",
    n_layers=12,
    n_heads=12,
    n_kv_heads=12,
    hidden_size=768,
    dtype="fp32",
    vocab_size=50257,
    intermediate_size=3072,
    mlp_kind="plain",
    tie_word_embeddings=True,
    attention_bias=True,
)


@pytest.mark.parametrize("v_head_dim", [128, None], ids=["v128", "v-default"])
def test_mla_without_q_lora(v_head_dim: int | None) -> None:
    m = ModelSpec(**{**DSV2_LITE, "v_head_dim": v_head_dim})  # v defaults to qk_nope_head_dim, 128
    # tp 1, 16 heads: q 2048 x 16 x 192 = 6,291,456; kv_a 2048 x 576 = 1,179,648; kv_b 512 x 16 x 256
    # = 2,097,152; o 16 x 128 x 2048 = 4,194,304 -> 13,762,560; dense MLP 3 x 2048 x 10,944 =
    # 67,239,936; other: kv_a norm 512 + 2 x 2048 norms = 4608
    lp = layer_params(m, 0)
    assert (lp.linear, lp.other) == (13_762_560 + 67_239_936, 4608)
    # tp 2, 8 heads: q 3,145,728; kv_a 1,179,648 (replicated); kv_b 1,048,576; o 2,097,152
    # -> 7,471,104; MLP 3 x 2048 x 5472 = 33,619,968
    lp = layer_params(m, 0, tp=2)
    assert (lp.linear, lp.other) == (7_471_104 + 33_619_968, 4608)


def test_mla_needs_qk_nope_head_dim() -> None:
    m = ModelSpec(**{**DSV2_LITE, "qk_nope_head_dim": None})
    with pytest.raises(KvcalcError, match="without qk_nope_head_dim;"):
        model_params(m)


def test_attention_bias_tp1_tp2() -> None:
    # tp 1: biases 28 x 128 + 4 x (128 + 128) = 4608, + norms 2 x 3584 = 11,776; matrices q, o
    # 3584 x 3584 each = 12,845,056, k + v 3584 x 4 x 256 = 3,670,016 -> 29,360,128; MLP 3 x 3584 x
    # 18,944 = 203,685,888
    lp = layer_params(QWEN25_7B, 0)
    assert (lp.linear, lp.other) == (29_360_128 + 203_685_888, 11_776)
    # tp 2: 14 heads, 2 KV heads: biases 14 x 128 + 2 x 256 = 2304, + 7168 = 9472; matrices
    # 3584 x 1792 x 2 + 3584 x 2 x 256 = 14,680,064; MLP 3 x 3584 x 9472 = 101,842,944
    lp = layer_params(QWEN25_7B, 0, tp=2)
    assert (lp.linear, lp.other) == (14_680_064 + 101_842_944, 9472)
    assert type(lp.linear) is int and type(lp.other) is int


def test_mamba_dt_rank_default() -> None:
    # Jamba layer 0 (mamba, dense MLP): d_inner 8192, dt_rank ceil(4096 / 16) = 256, d_state 16:
    # in_proj 4096 x 16,384 = 67,108,864; x_proj 8192 x (256 + 32) = 2,359,296; dt_proj 256 x 8192
    # = 2,097,152; out_proj 8192 x 4096 = 33,554,432 -> 105,119,744; MLP 3 x 4096 x 14,336 =
    # 176,160,768. other: conv 8192 x 4 + conv bias, dt bias, D 8192 each + A_log 8192 x 16
    # = 8192 x 23 = 188,416, + norms 8192
    lp = layer_params(ModelSpec(**JAMBA), 0)
    assert (lp.linear, lp.other) == (105_119_744 + 176_160_768, 196_608)


@pytest.mark.parametrize("missing", ["mamba_d_state", "mamba_d_conv", "mamba_expand"])
def test_mamba_names_the_missing_size(missing: str) -> None:
    m = ModelSpec(**{**JAMBA, missing: None})
    with pytest.raises(KvcalcError, match=f"without {missing};"):
        layer_params(m, 0)


def test_missing_sizes_are_listed_together() -> None:
    m = ModelSpec(**{**JAMBA, "mamba_d_state": None, "mamba_d_conv": None})
    with pytest.raises(KvcalcError, match="without mamba_d_state, mamba_d_conv;"):
        layer_params(m, 0)
    m = ModelSpec(name="bare", n_layers=2, n_heads=8, head_dim=64)
    with pytest.raises(KvcalcError, match="without hidden_size, vocab_size;"):
        model_params(m)


@pytest.mark.parametrize("missing", sorted(GDN))
def test_linear_attention_names_the_missing_size(missing: str) -> None:
    m = ModelSpec(
        name="gdn",
        n_layers=2,
        n_heads=16,
        n_kv_heads=2,
        head_dim=256,
        hidden_size=2048,
        vocab_size=151936,
        intermediate_size=5120,
        layer_pattern=["linear", "full"],
        **{**GDN, missing: None},
    )
    with pytest.raises(KvcalcError, match=f"without {missing};"):
        layer_params(m, 0)


def test_layer_params_names_missing_widths() -> None:
    with pytest.raises(KvcalcError, match="without hidden_size;"):
        layer_params(ModelSpec(name="h", n_layers=2, n_heads=8, head_dim=64, intermediate_size=100), 0)
    with pytest.raises(KvcalcError, match="without intermediate_size;"):
        layer_params(ModelSpec(name="i", n_layers=2, n_heads=8, hidden_size=512), 0)
    with pytest.raises(KvcalcError, match="without moe_intermediate_size;"):
        layer_params(ModelSpec(name="e", n_layers=2, n_heads=8, hidden_size=512, n_experts=8), 0)


# ----- explicit n_params -----------------------------------------------------------------------


def test_explicit_params_spread_tp2() -> None:
    # not derivable (no hidden_size): 1,000,003 params, 500,001 active, 4 layers, tp 2 -> total
    # ceil(1,000,003 / 2) = 500,002, active 250,001; per layer 250,001 // 4 = 62,500 active and
    # 250,001 // 4 = 62,500 rest; the embedding keeps 500,002 - 250,000 - 250,000 = 2 values; bf16
    m = ModelSpec(name="explicit", n_layers=4, n_heads=8, head_dim=64, n_params=1_000_003, n_active_params=500_001)
    wb = weight_bytes(m, tp=2)
    assert wb == WeightBytes(
        layer_dense_bytes=(125_000,) * 4,
        layer_expert_bytes=(125_000,) * 4,
        layer_n_experts=(1,) * 4,
        layer_n_active_experts=(0,) * 4,
        embedding_bytes=4,
        head_bytes=0,
        tied=False,
    )
    # two stages of 2 layers: 2 x (125,000 + 125,000) + the embedding's 4 B on the first; no tied copy
    assert wb.stage_bytes(kv_cache.pp_stages(4, 2)) == [500_004, 500_000]


def test_explicit_params_all_active_and_a_block_remainder() -> None:
    # 1000 params, all active, 4 layers: 250 per layer, no rest, no embedding remainder
    m = ModelSpec(name="explicit", n_layers=4, n_heads=8, head_dim=64, n_params=1000)
    assert weight_bytes(m) == WeightBytes(
        layer_dense_bytes=(500,) * 4,
        layer_expert_bytes=(0,) * 4,
        layer_n_experts=(0,) * 4,
        layer_n_active_experts=(0,) * 4,
        embedding_bytes=0,
        head_bytes=0,
        tied=False,
    )
    # int4 (18 B per 32 values): 250 = 7 blocks (224 values, 126 B) + 26 values left in bf16 (52 B)
    assert weight_bytes(m, "int4").layer_dense_bytes == (178,) * 4


def test_explicit_params_do_not_override_a_derivable_architecture() -> None:
    # Llama-3.1-8B derives 8,030,261,248 params (x 2 B); a rounder n_params does not replace them
    llama = ModelSpec(
        name="llama-3.1-8b",
        n_layers=32,
        n_heads=32,
        n_kv_heads=8,
        hidden_size=4096,
        vocab_size=128256,
        intermediate_size=14336,
        n_params=8_000_000_000,
    )
    assert weight_bytes(llama).total_bytes == 16_060_522_496


# ----- a tied head over pipeline stages --------------------------------------------------------


def test_tied_head_copy_on_the_last_stage() -> None:
    # GPT-2 per layer: q, o 768 x 768 = 589,824 each; k + v 768 x 12 x 128 = 1,179,648; MLP (plain)
    # 2 x 768 x 3072 = 4,718,592 -> 7,077,888; biases 768 + 12 x 128 = 2304 + norms 1536 = 3840
    # -> 7,081,728 params x 4 B = 28,326,912 B; embedding 50,257 x 768 x 4 B = 154,389,504 B;
    # final norm 768 x 4 B = 3072 B
    wb = weight_bytes(GPT2)
    assert wb.stage_bytes(kv_cache.pp_stages(12, 1)) == [12 * 28_326_912 + 154_389_504 + 3072]
    # pp 2 (6 + 6): the last stage builds its own head, a second copy of the tied embedding
    assert wb.stage_bytes(kv_cache.pp_stages(12, 2)) == [
        6 * 28_326_912 + 154_389_504,
        6 * 28_326_912 + 3072 + 154_389_504,
    ]
    # pp 3 (4 + 4 + 4): the middle stage holds layers only
    assert wb.stage_bytes(kv_cache.pp_stages(12, 3)) == [
        4 * 28_326_912 + 154_389_504,
        4 * 28_326_912,
        4 * 28_326_912 + 3072 + 154_389_504,
    ]


def test_matrices_that_are_not_whole_blocks_name_themselves() -> None:
    # hidden 36, one head of 36: attention q, o 36 x 36 = 1296 each, k + v 36 x 72 = 2592 -> 5184
    # = 162 int4 blocks of 32; a dense MLP 3 x 36 x 36 = 3888 more -> 9072, 283.5 blocks
    dense = ModelSpec(
        name="odd", n_layers=1, n_heads=1, head_dim=36, hidden_size=36, vocab_size=64, intermediate_size=36
    )
    with pytest.raises(KvcalcError, match="a layer's weight matrices of 9072 values") as e:
        weight_bytes(dense, "int4")
    assert e.value.field == "weight_dtype"
    # routed experts of 36: the attention's 5184 values fit, one expert's 3888 (121.5 blocks) do not
    moe = ModelSpec(
        name="odd-moe",
        n_layers=1,
        n_heads=1,
        head_dim=36,
        hidden_size=36,
        vocab_size=64,
        n_experts=2,
        n_experts_per_token=1,
        moe_intermediate_size=36,
    )
    with pytest.raises(KvcalcError, match="expert's weight matrices of 3888 values") as e:
        weight_bytes(moe, "int4")
    assert e.value.field == "weight_dtype"
