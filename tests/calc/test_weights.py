"""Parameter counts and weight bytes (kvcalc/weights.py) against published counts and hand-derived
arithmetic. Each model is built here from the numbers of its published Hugging Face config.json
(URL in the comment), so the test does not depend on the bundled YAML."""

from __future__ import annotations

import pytest

from kvcalc.calc.weights import is_moe_layer, model_params, param_counts, weight_bytes
from kvcalc.errors import KvcalcError
from kvcalc.schema import ModelSpec

# huggingface.co/meta-llama/Llama-3.1-8B/blob/main/config.json
LLAMA_8B = dict(
    name="llama-3.1-8b",
    n_layers=32,
    n_heads=32,
    n_kv_heads=8,
    hidden_size=4096,
    vocab_size=128256,
    intermediate_size=14336,
    max_position_embeddings=131072,
)
# huggingface.co/meta-llama/Llama-3.1-70B/blob/main/config.json
LLAMA_70B = dict(
    name="llama-3.1-70b",
    n_layers=80,
    n_heads=64,
    n_kv_heads=8,
    hidden_size=8192,
    vocab_size=128256,
    intermediate_size=28672,
    max_position_embeddings=131072,
)
# huggingface.co/mistralai/Mixtral-8x7B-v0.1/blob/main/config.json
MIXTRAL = dict(
    name="mixtral-8x7b",
    n_layers=32,
    n_heads=32,
    n_kv_heads=8,
    hidden_size=4096,
    vocab_size=32000,
    intermediate_size=14336,
    n_experts=8,
    n_experts_per_token=2,
)
# huggingface.co/deepseek-ai/DeepSeek-V3/blob/main/config.json (n_shared_experts 1 x 2048)
DEEPSEEK_V3 = dict(
    name="deepseek-v3",
    n_layers=61,
    n_heads=128,
    hidden_size=7168,
    vocab_size=129280,
    intermediate_size=18432,
    moe_intermediate_size=2048,
    n_experts=256,
    n_experts_per_token=8,
    shared_expert_intermediate_size=2048,
    first_dense_layers=3,
    attention="mla",
    q_lora_rank=1536,
    kv_lora_rank=512,
    qk_nope_head_dim=128,
    qk_rope_head_dim=64,
    v_head_dim=128,
)
# huggingface.co/Qwen/Qwen3-30B-A3B/blob/main/config.json
QWEN3_30B = dict(
    name="qwen3-30b-a3b",
    n_layers=48,
    n_heads=32,
    n_kv_heads=4,
    head_dim=128,
    hidden_size=2048,
    vocab_size=151936,
    intermediate_size=6144,
    moe_intermediate_size=768,
    n_experts=128,
    n_experts_per_token=8,
)


def test_llama_3_1_8b_exact() -> None:
    # embed + head: 2 x 128256 x 4096 = 1,050,673,152
    # per layer: q 4096^2 + k, v 2 x 4096 x 1024 + o 4096^2 = 41,943,040; MLP 3 x 4096 x 14336 =
    # 176,160,768; 2 norms 8,192 -> 218,112,000 x 32 = 6,979,584,000; final norm 4,096
    # = 8,030,261,248, the figure Meta's model card and `model.num_parameters()` give.
    assert param_counts(ModelSpec(**LLAMA_8B)) == (8_030_261_248, 8_030_261_248)


def test_llama_3_1_70b_exact() -> None:
    # 2 x 128256 x 8192 = 2,101,346,304; per layer 2 x 8192^2 + 2 x 8192 x 1024 + 3 x 8192 x 28672
    # + 16,384 = 855,654,400 x 80 = 68,452,352,000; + 8,192 = 70,553,706,496
    assert param_counts(ModelSpec(**LLAMA_70B))[0] == 70_553_706_496


# (config, published total, published active, tolerance). Published: Meta Llama-3.1 model card
# (70.6B); Mistral "Mixtral of experts" (arXiv:2401.04088: 46.7B total, 12.9B active); DeepSeek-V3
# technical report (arXiv:2412.19437: 671B total, 37B activated); Qwen3-30B-A3B model card
# (30.5B total, 3.3B activated).
# The two "activated" figures of DeepSeek-V3 and Qwen3 are given to 2 significant digits and
# are truncations of the architecture's count: DeepSeek-V3 37.55B (37.55 -> "37B"; 1.5% off) and
# Qwen3 3.353B ("3.3B"; 1.6% off). No counting convention brings both within 1% (without the
# input embedding they are 36.63B and 3.04B), so those two are held to 2%, the precision printed.
PUBLISHED = [
    (LLAMA_70B, 70.6e9, None, 0.01),
    (MIXTRAL, 46.7e9, 12.9e9, 0.01),
    (DEEPSEEK_V3, 671e9, None, 0.01),
    (DEEPSEEK_V3, None, 37e9, 0.02),
    (QWEN3_30B, 30.5e9, None, 0.01),
    (QWEN3_30B, None, 3.3e9, 0.02),
]


@pytest.mark.parametrize("cfg,total,active,tol", PUBLISHED, ids=lambda x: x["name"] if isinstance(x, dict) else None)
def test_published_counts(cfg: dict, total: float | None, active: float | None, tol: float) -> None:
    n, a = param_counts(ModelSpec(**cfg))
    if total is not None:
        assert abs(n - total) / total < tol
    if active is not None:
        assert abs(a - active) / active < tol


@pytest.mark.parametrize(
    "cfg,total,active",
    [
        # Mixtral: embed+head 2 x 32000 x 4096 = 262,144,000; per layer attention 41,943,040 + norms
        # 8,192 + router 4096 x 8 = 32,768 + 8 experts x 176,160,768; active: 2 experts.
        (MIXTRAL, 46_702_792_704, 12_879_925_248),
        # DeepSeek-V3: MLA per layer q_a 7168 x 1536 + q_b 1536 x 128 x 192 + kv_a 7168 x 576
        # + kv_b 512 x 128 x 256 + o 128 x 128 x 7168 = 187,105,280 (+ norms 1536 + 512 + 2 x 7168);
        # 3 dense layers of 3 x 7168 x 18432; 58 MoE layers of 256 experts x 3 x 7168 x 2048, 1 shared,
        # router 7168 x 256; embed + head 2 x 129280 x 7168.
        (DEEPSEEK_V3, 671_026_404_352, 37_552_282_624),
        (QWEN3_30B, 30_532_110_336, 3_353_020_416),
    ],
)
def test_moe_counts_exact(cfg: dict, total: int, active: int) -> None:
    assert param_counts(ModelSpec(**cfg)) == (total, active)


def test_tied_embeddings_and_plain_mlp() -> None:
    # gpt2-like: vocab 50257 x 768 once (tied); per layer 4 x 768^2 attention + 2 x 768 x 3072
    # plain MLP + 2 norms: 2,359,296 + 4,718,592 + 1,536 = 7,079,424 x 12 = 84,953,088;
    # + 38,597,376 + 768 = 123,551,232 (biases and position embeddings are not counted)
    m = ModelSpec(
        name="g",
        n_layers=12,
        n_heads=12,
        hidden_size=768,
        vocab_size=50257,
        intermediate_size=3072,
        mlp_kind="plain",
        tie_word_embeddings=True,
    )
    assert param_counts(m)[0] == 123_551_232


def test_explicit_counts_win() -> None:
    m = ModelSpec(**{**MIXTRAL, "n_params": 46_700_000_000, "n_active_params": 12_900_000_000})
    assert param_counts(m) == (46_700_000_000, 12_900_000_000)
    only = ModelSpec(name="x", n_layers=2, n_heads=4, head_dim=64, n_params=1_000_000)
    assert param_counts(only) == (1_000_000, 1_000_000)
    # no architecture: the count is spread over the layers, all in the weight format
    assert weight_bytes(only, "bf16").total_bytes == 2_000_000
    assert weight_bytes(only, "fp8").total_bytes == 1_000_000


def test_missing_sizes_are_a_user_error() -> None:
    m = ModelSpec(name="x", n_layers=2, n_heads=4, head_dim=64, hidden_size=256)
    with pytest.raises(KvcalcError, match="vocab_size"):
        param_counts(m)


@pytest.mark.parametrize(
    "fmt,expected",
    [
        # linear matrices 32 x 218,103,808 = 6,979,321,856 values in the weight format; embeddings,
        # head and norms 1,050,673,152 + 32 x 8,192 + 4,096 = 1,050,939,392 values stay bf16
        # (2,101,878,784 B).
        ("bf16", 16_060_522_496),
        ("fp16", 16_060_522_496),
        ("fp8", 6_979_321_856 + 2_101_878_784),  # 1 B per value
        ("int8", 6_979_321_856 + 2_101_878_784),
        ("int4", 6_979_321_856 // 32 * 18 + 2_101_878_784),  # 16 B + fp16 scale per 32
        ("int4:g128", 6_979_321_856 // 128 * 66 + 2_101_878_784),  # 64 B + fp16 scale per 128
    ],
)
def test_weight_bytes_formats(fmt: str, expected: int) -> None:
    assert weight_bytes(ModelSpec(**LLAMA_8B), fmt).total_bytes == expected


def test_tensor_parallel_share() -> None:
    # Llama-3.1-70B on one of 2 ranks: q 8192 x 4096 + k, v 2 x 8192 x 512 + o 4096 x 8192
    # = 75,497,472; MLP 3 x 8192 x 14336 = 352,321,536; norms 16,384 (replicated)
    # -> 427,835,392 x 80 = 34,226,831,360; embed + head 2 x 64128 x 8192 = 1,050,673,152;
    # final norm 8,192: 35,277,512,704
    assert model_params(ModelSpec(**LLAMA_70B), tp=2).total == 35_277_512_704
    # tp 16 > 8 KV heads: each rank keeps one whole KV head (replicated), so k, v do not shrink
    p16 = model_params(ModelSpec(**LLAMA_70B), tp=16).layers[0]
    p8 = model_params(ModelSpec(**LLAMA_70B), tp=8).layers[0]
    # tp 8: q, o 2 x 8192 x 1024 + k, v 2 x 8192 x 128 + MLP 3 x 8192 x 3584 = 106,954,752
    # tp 16: q, o 2 x 8192 x 512 + k, v still 2 x 8192 x 128 + MLP 3 x 8192 x 1792 = 54,525,952
    assert (p8.linear, p16.linear) == (106_954_752, 54_525_952)


def test_pipeline_stages_hold_embedding_and_head() -> None:
    from kvcalc.calc.kv_cache import pp_stages

    wb = weight_bytes(ModelSpec(**LLAMA_8B), "bf16")
    s = wb.stage_bytes(pp_stages(32, 2))
    # 16 layers x 218,112,000 x 2 B = 6,979,584,000 each; embedding 1,050,673,152 B on the first,
    # head 1,050,673,152 B + final norm 8,192 B on the last
    assert s == [6_979_584_000 + 1_050_673_152, 6_979_584_000 + 1_050_673_152 + 8_192]
    assert sum(s) == wb.total_bytes


def test_moe_layer_selection() -> None:
    # Jamba: expert_layer_period 2, expert_layer_offset 1 -> odd layers; DeepSeek: past the first 3
    jamba = ModelSpec(
        name="j",
        n_layers=8,
        n_heads=4,
        head_dim=64,
        hidden_size=256,
        n_experts=16,
        n_experts_per_token=2,
        moe_layer_period=2,
        moe_layer_offset=1,
    )
    assert [is_moe_layer(jamba, i) for i in range(8)] == [False, True] * 4
    ds = ModelSpec(**DEEPSEEK_V3)
    assert [is_moe_layer(ds, i) for i in range(5)] == [False, False, False, True, True]


def test_hybrid_layers_counted() -> None:
    # one mamba layer (Mamba-1): hidden 64, expand 2 -> d_inner 128, d_state 16, d_conv 4,
    # dt_rank ceil(64 / 16) = 4. linear: in 64 x 256 + x_proj 128 x 36 + dt_proj 4 x 128 + out
    # 128 x 64 = 16,384 + 4,608 + 512 + 8,192 = 29,696; other: conv 128 x 4 + 128 + dt bias 128
    # + A_log 128 x 16 + D 128 = 2,944; + norms 128; MLP 3 x 64 x 128 = 24,576
    m = ModelSpec(
        name="m",
        n_layers=1,
        n_heads=4,
        head_dim=16,
        hidden_size=64,
        vocab_size=10,
        intermediate_size=128,
        layer_types=["mamba"],
        mamba_d_state=16,
        mamba_d_conv=4,
        mamba_expand=2,
    )
    lp = model_params(m).layers[0]
    assert (lp.linear, lp.other) == (29_696 + 24_576, 2_944 + 128)


# huggingface.co/openai/gpt-oss-120b/blob/main/config.json: 36 layers, 128 experts of 2880 (4 per
# token), hidden 2880; quantization_config quant_method mxfp4 for the experts only
# (modules_to_not_convert: self_attn, router, embed_tokens, lm_head)
GPT_OSS_120B = dict(
    name="gpt-oss-120b",
    n_layers=36,
    n_heads=64,
    n_kv_heads=8,
    head_dim=64,
    hidden_size=2880,
    vocab_size=201088,
    intermediate_size=2880,
    moe_intermediate_size=2880,
    n_experts=128,
    n_experts_per_token=4,
    attention_bias=True,
    sliding_window=128,
    layer_pattern=["sliding", "full"],
)


def test_mxfp4_format() -> None:
    from kvcalc.formats import kv_format, weight_format

    # OCP MX v1.0: 32 e2m1 values x 4 bit = 16 B + one e8m0 scale = 17 B per 32 values
    f = weight_format("mxfp4")
    assert (f.block_values, f.block_bytes, f.bits, f.kind) == (32, 17, 4, "weight")
    with pytest.raises(KvcalcError, match="mxfp4 is a weight format, not a KV-cache format"):
        kv_format("mxfp4")  # no engine caches K/V in MXFP4
    assert f.bytes_for(3 * 2880 * 2880) == 13_219_200  # 24,883,200 / 32 x 17
    with pytest.raises(KvcalcError, match="mxfp4 packs 32 values per block; a row of 2896 values is not a whole"):
        f.bytes_for(2880 + 16)  # not a whole number of 32-value blocks


def test_checkpoint_weight_formats() -> None:
    bf16 = weight_bytes(ModelSpec(**GPT_OSS_120B)).total_bytes
    shipped = weight_bytes(ModelSpec(**GPT_OSS_120B, expert_weight_dtype="mxfp4")).total_bytes
    # each expert: 3 x 2880 x 2880 = 24,883,200 values: 49,766,400 B in bf16, 13,219,200 in mxfp4;
    # 36 layers x 128 experts = 4,608 experts x 36,547,200 B saved = 168,409,497,600 B
    assert bf16 - shipped == 168_409_497_600
    # attention, router, embeddings stay bf16; --weight-dtype overrides both
    assert weight_bytes(ModelSpec(**GPT_OSS_120B, expert_weight_dtype="mxfp4"), "bf16").total_bytes == bf16
    # DeepSeek-V3 ships fp8 decoder matrices: the config default equals --weight-dtype fp8
    ds = ModelSpec(**DEEPSEEK_V3, weight_dtype="fp8")
    assert weight_bytes(ds).total_bytes == weight_bytes(ModelSpec(**DEEPSEEK_V3), "fp8").total_bytes
    assert weight_bytes(ds).total_bytes < weight_bytes(ModelSpec(**DEEPSEEK_V3)).total_bytes


@pytest.mark.parametrize(
    "model,weight_dtype,fits",
    [
        ("gpt-oss-120b", None, True),  # 65.2 GB (MXFP4 experts) < 0.9 x 79.6 GiB
        ("gpt-oss-120b", "bf16", False),  # 233 GB in bf16
    ],
)
def test_bundled_gpt_oss_fits_h100(model: str, weight_dtype: str | None, fits: bool) -> None:
    import json

    from typer.testing import CliRunner

    from kvcalc.cli import app

    args = ["estimate", model, "-s", "8k", "--gpu", "h100-sxm", "--format", "json"]
    r = CliRunner().invoke(app, args + (["--weight-dtype", weight_dtype] if weight_dtype else []))
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["fits"] is fits
    assert d["weight_dtype"] == ("bf16 + mxfp4 experts" if weight_dtype is None else "bf16")
