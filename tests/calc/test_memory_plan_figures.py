"""Exact figures of the memory plan, the capacity solves and the roofline precompute
(kvcalc/calc/memory_plan.py), each derived by hand: the activation reserve's fallbacks, TP > 1 and
PP > 1 on GQA, MLA, sliding-window and hybrid models, budgets that land on a byte exactly, and the
decode / prefill FLOPs, bytes and times on a round-number GPU. Written against the survivors of a
mutation run (docs/mutation.md)."""

from __future__ import annotations

import pytest
from specs import DSV2_LITE, GEMMA3_27B, LLAMA_8B  # noqa: E402  (tests/calc/specs.py)

from kvcalc.calc import roofline
from kvcalc.calc.memory_plan import GpuFit, Layout, activation_reserve_bytes
from kvcalc.errors import KvcalcError
from kvcalc.load.gpus import get_gpu
from kvcalc.schema import GpuSpec, ModelSpec

# configs/models/jamba-1.5-mini.yaml (ai21labs/AI21-Jamba-1.5-Mini config.json): attention at
# layers 4, 12, 20, 28; mamba d_state 16, d_conv 4, expand 2; MoE every other layer
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
    vocab_size=65536,
    intermediate_size=14336,
    n_experts=16,
    n_experts_per_token=2,
    moe_intermediate_size=14336,
    moe_layer_period=2,
    moe_layer_offset=1,
    max_position_embeddings=262144,
)
# configs/models/gpt2.yaml (openai-community/gpt2): vocab 50257 is odd, so tp 2 rounds it up
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
    max_position_embeddings=1024,
)

#: no reserve, no CUDA context, the whole memory as budget: used == weights + KV + state exactly
BARE = dict(activation_reserve_bytes=0, cuda_context_bytes=0, gpu_memory_utilization=1.0)


def toy_gpu(memory_bytes: int) -> GpuSpec:
    """A GPU of round numbers: 1e12 B/s, 1e15 bf16 FLOP/s (2e15 fp8), 1e11 B/s interconnect."""
    return GpuSpec(
        key="toy",
        name="toy",
        memory_bytes=f"{memory_bytes}B",
        hbm_bytes_per_s=10**12,
        bf16_flops_per_s=10**15,
        fp8_flops_per_s=2 * 10**15,
        interconnect_bytes_per_s=10**11,
        source="test",
    )


# ----- the activation reserve's fallbacks ------------------------------------------------------


def test_activation_reserve_without_hidden_size_or_vocab() -> None:
    # hidden = 32 heads x 128 = 4096; vocab defaults to 32,000:
    # 8192 x (2 x 4096 + 2 x 11008) x 2 B = 494,927,872; + 256 x 32,000 x 4 B = 32,768,000
    m = ModelSpec(name="no-hidden", n_layers=4, n_heads=32, head_dim=128, intermediate_size=11008, n_params=10**9)
    assert activation_reserve_bytes(m) == 527_695_872


def test_activation_reserve_without_intermediate_size() -> None:
    # intermediate defaults to 4 x hidden = 16,384: 8192 x (8192 + 32,768) x 2 B = 671,088,640
    # + 256 x 32,000 x 4 B = 32,768,000
    m = ModelSpec(name="no-inter", n_layers=4, n_heads=32, hidden_size=4096, n_params=10**9)
    assert activation_reserve_bytes(m) == 703_856_640


def test_activation_reserve_moe_fallbacks() -> None:
    # no intermediate sizes at all: dense 2 x 4 x 256 = 2048; MoE 2 x (4 experts x 4 x 256 + no
    # shared expert) = 8192, the wider; 8192 x (2 x 256 + 8192) x 2 B = 142,606,336
    # + 256 x 1000 x 4 B = 1,024,000
    m = ModelSpec(
        name="moe-a",
        n_layers=4,
        n_heads=4,
        hidden_size=256,
        vocab_size=1000,
        n_experts=8,
        n_experts_per_token=4,
        n_params=10**9,
    )
    assert activation_reserve_bytes(m) == 143_630_336
    # no n_experts_per_token (1): dense 2 x 1000 = 2000; MoE 2 x (1 x 3000 + 500 shared) = 7000;
    # tp 2: ceil(7000 / 2) = 3500, vocab 500: 8192 x (512 + 3500) x 2 B = 65,732,608 + 256 x 500 x 4
    m = ModelSpec(
        name="moe-b",
        n_layers=4,
        n_heads=4,
        hidden_size=256,
        vocab_size=1000,
        n_experts=8,
        intermediate_size=1000,
        moe_intermediate_size=3000,
        shared_expert_intermediate_size=500,
        n_params=10**9,
    )
    assert activation_reserve_bytes(m, tp=2) == 66_244_608


def test_activation_reserve_rounds_up_per_rank() -> None:
    # GPT-2 at tp 2: MLP 2 x 3072 / 2 = 3072; vocab ceil(50257 / 2) = 25,129 (an int, not 25,128.5):
    # 8192 x (2 x 768 + 3072) x 2 B = 75,497,472 + 256 x 25,129 x 4 B = 25,732,096
    r = activation_reserve_bytes(GPT2, tp=2)
    assert r == 101_229_568 and type(r) is int
    # the planner takes the reserve at its own tp
    assert GpuFit(GPT2, toy_gpu(10**10), Layout(tp=2)).act_bytes == 101_229_568


# ----- formats, labels, the layer split --------------------------------------------------------


def test_planner_kv_formats_label_and_bytes() -> None:
    # fp8 K, bf16 V at tp 2: 32 layers x 4 KV heads x (128 x 1 B + 128 x 2 B) = 49,152 B per token
    p = GpuFit(LLAMA_8B, toy_gpu(10**11), Layout(tp=2, k_dtype="fp8", v_dtype="bf16"))
    assert p.kv_dtype == "fp8_e4m3/bf16"  # fp8 is e4m3 (kvcalc/formats.py)
    assert p.kv.per_gpu_bytes(1000, 1) == 49_152_000
    assert GpuFit(LLAMA_8B, toy_gpu(10**11)).kv_dtype == "bf16"


def test_planner_weight_format_sets_the_peak() -> None:
    # fp8 weights on an H100 run at its fp8 peak, 1,978.9 TFLOP/s (kvcalc/data/gpus.yaml)
    p = GpuFit(LLAMA_8B, get_gpu("h100-sxm"), Layout(weight_dtype="fp8"))
    assert p.peak == 1_978_900_000_000_000
    assert GpuFit(LLAMA_8B, get_gpu("h100-sxm")).peak == 989_400_000_000_000


def test_stage_layers_and_the_fullest_stage_limits_max_batch() -> None:
    # Llama-3.1-8B split 20 + 12 layers; per layer 218,112,000 params x 2 B = 436,224,000 B;
    # embedding = head = 128,256 x 4096 x 2 B = 1,050,673,152 B; final norm 8,192 B
    # stage 0: 20 x 436,224,000 + 1,050,673,152 = 9,775,153,152 B
    # stage 1: 12 x 436,224,000 + 1,050,673,152 + 8,192 = 6,285,369,344 B
    p = GpuFit(LLAMA_8B, toy_gpu(20_000_000_000), Layout(pp=2, stage_layers=(20, 12), **BARE))
    assert p.stage_weight_bytes == [9_775_153_152, 6_285_369_344]
    # KV per layer 2 x 8 x 128 x 2 B = 4096 B per token: 1000 tokens -> 81,920,000 / 49,152,000
    assert p.kv.stage_bytes(1000, 1) == [81_920_000, 49_152_000]
    # stage 0: (20e9 - 9,775,153,152) // 81,920,000 = 10,224,846,848 // 81,920,000 = 124;
    # stage 1: 13,714,630,656 // 49,152,000 = 279; the plan takes the smaller
    assert p.max_batch(1000) == 124
    assert p.max_batch(1000, stage=1) == 279


# ----- hybrid state under tp x pp --------------------------------------------------------------


def test_hybrid_state_kv_and_max_batch_tp2_pp2() -> None:
    # Jamba state per mamba layer: d_inner 2 x 4096 = 8192; conv 8192 x 3 + SSM 8192 x 16 = 155,648
    # values; 28 mamba layers x 155,648 x 2 B = 8,716,288 B per sequence, / (tp 2 x pp 2) = 2,179,072
    p = GpuFit(JAMBA, toy_gpu(40_000_000_000), Layout(tp=2, pp=2, **BARE))
    assert p.state_per_seq_per_gpu == 2_179_072
    # KV: each stage (layers 0-15, 16-31) has 2 attention layers, each 8 / 2 = 4 heads x (128 + 128)
    # x 2 B = 2048 B per token: 1000 tokens -> 4,096,000 B per stage (layer 0 is mamba: skipped)
    assert p.kv.stage_bytes(1000, 1) == [4_096_000, 4_096_000]
    # one sequence of 1000 tokens: 4,096,000 + 2,179,072 = 6,275,072 B per GPU
    assert p.max_batch(1000) == min((p.budget - w) // 6_275_072 for w in p.stage_weight_bytes)
    # decode attention: 4 attention layers x 2 x 16 heads x (128 + 128) = 32,768 FLOPs per cached token
    assert p.decode(1001, 1).flops - p.decode(1, 1).flops == 32_768 * 1000
    # tp 2 x pp 2 x dp 1
    assert p.serving(1000, 1).gpu_count == 4
    assert GpuFit(JAMBA, toy_gpu(40_000_000_000), Layout(tp=2, pp=2, dp=2, **BARE)).serving(1000, 1).gpu_count == 8


def test_unsized_state_and_explicit_params() -> None:
    # mamba layers without their sizes: the state cannot be counted (None), the plan counts 0;
    # n_params 1,000,001 at tp 2: ceil(1,000,001 / 2) = 500,001 -> 2 x 500,001 FLOPs per token
    m = ModelSpec(
        name="hybrid-unsized",
        n_layers=4,
        n_heads=8,
        n_kv_heads=8,
        head_dim=64,
        layer_pattern=["mamba", "full"],
        n_params=1_000_001,
    )
    p = GpuFit(m, toy_gpu(10**10), Layout(tp=2, **BARE))
    assert p.state_per_seq_per_gpu == 0
    assert p.matmul_flops_per_token == 1_000_002
    # no hidden_size: hidden = 8 x 64 = 512; the all-reduce of 2 x 4 layers x 1 x 512 x 2 B
    # = 8192 B over 2 ranks: 2 (2 - 1) / 2 x 8192 / (1e11 / 2) = 1.6384e-7 s
    assert p.hidden == 512
    assert p.decode(10, 1).comm_time_s == pytest.approx(1.6384e-7, rel=1e-12)


def test_no_per_sequence_bytes_batch_is_unbounded() -> None:
    # two mamba layers without sizes: no KV, no countable state. n_params 1000 in bf16 -> 2000 B of
    # weights; a budget of exactly 2000 B leaves 0 free: every batch fits (2^62), 1999 B: none
    m = ModelSpec(name="ssm-only", n_layers=2, n_heads=8, head_dim=64, layer_pattern=["mamba"], n_params=1000)
    p = GpuFit(m, toy_gpu(2000), Layout(**BARE))
    assert p.stage_weight_bytes == [2000]
    assert p.max_batch(100) == 2**62
    assert GpuFit(m, toy_gpu(1999), Layout(**BARE)).max_batch(100) == 0


# ----- budgets that land on a byte -------------------------------------------------------------

# 2 layers x 1 KV head x (4 + 4) x 2 B = 32 B per token; n_params 1000 -> 2000 B of weights
TINY = ModelSpec(name="tiny", n_layers=2, n_heads=2, n_kv_heads=1, head_dim=4, n_params=1000)


def test_max_seq_len_default_cap_is_2_to_the_30() -> None:
    # no max_position_embeddings: cap 2^30; memory 2000 + 32 x 2^30 fits it exactly
    p = GpuFit(TINY, toy_gpu(2000 + 32 * 2**30), Layout(**BARE))
    assert p.max_seq_len(1) == (2**30, True)


def test_max_seq_len_exact_at_one_token() -> None:
    # 2000 + 32 B: one token fits with 0 B to spare, two do not
    p = GpuFit(TINY, toy_gpu(2032), Layout(**BARE))
    assert p.max_seq_len(1, cap=100) == (1, False)


def test_exact_fit_in_the_search_point_and_serving() -> None:
    # 2000 + 32 x 777 = 26,864 B: 777 tokens fit with 0 B to spare
    p = GpuFit(TINY, toy_gpu(26_864), Layout(**BARE))
    assert p.max_seq_len(1, cap=1000) == (777, False)
    used, fits, _, _ = p.point(777, 1)
    assert (used, fits) == (26_864, True)
    s = p.serving(777, 1)
    assert (s.memory_bytes_per_gpu, s.headroom_bytes, s.fits) == (26_864, 0, True)
    assert p.point(778, 1)[1] is False


# ----- layout checks ---------------------------------------------------------------------------


def test_layout_bounds() -> None:
    with pytest.raises(KvcalcError, match=r"must be in \(0, 1\], got 0"):
        Layout(gpu_memory_utilization=0).check()
    Layout(cuda_context_bytes=0).check()  # no context at all is allowed
    with pytest.raises(KvcalcError, match="must not be negative, got -1"):
        Layout(cuda_context_bytes=-1).check()


# ----- the roofline on a sliding-window model at tp 2, dp 2 ------------------------------------


def test_gemma_decode_prefill_tp2_dp2_exact() -> None:
    # Gemma-3-27B per layer at tp 2: q 5376 x 16 x 128 = 11,010,048; k + v 5376 x 8 x 256
    # = 11,010,048; o 11,010,048; MLP 3 x 5376 x 10,752 = 173,408,256; norms 2 x 5376 = 10,752
    # -> 206,449,152 x 62 = 12,799,847,424; embedding ceil(262,208 / 2) x 5376 = 704,815,104 (tied,
    # no head); final norm 5376. Matmul FLOPs per token 2 x (12,799,847,424 + 5,376) = 25,599,705,600
    lay = Layout(tp=2, dp=2, bw_efficiency=0.5, flops_efficiency=0.25)
    p = GpuFit(GEMMA3_27B, toy_gpu(10**11), lay)
    assert p.matmul_flops_per_token == 25_599_705_600
    # attention per cached token per layer 2 x 16 x (128 + 128) = 8192; at T = 2000 the 52 sliding
    # layers see 1024 tokens: 52 x 8192 x 1024 + 10 x 8192 x 2000 = 436,207,616 + 163,840,000
    d = p.decode(2000, 1)
    assert d.flops == 25_599_705_600 + 600_047_616
    # bytes: weights 2 x (12,799,847,424 + 704,815,104 + 5,376) = 27,009,335,808; KV per layer
    # 8 x 256 x 2 B = 4096 B/token: 52 x 4096 x 1024 + 10 x 4096 x 2000 = 300,023,808
    assert d.bytes_read == 27_009_335_808 + 300_023_808
    assert d.memory_time_s == pytest.approx(27_309_359_616 / (10**12 * 0.5), rel=1e-12)
    assert d.compute_time_s == pytest.approx(26_199_753_216 / (10**15 * 0.25), rel=1e-12)
    # all-reduce 2 x 62 x 1 x 5376 x 2 B = 1,333,248 B; 2 (2 - 1) / 2 x 1,333,248 / 5e10
    assert d.comm_time_s == pytest.approx(1_333_248 / 5e10, rel=1e-12)
    # prefill of 2000: pairs full 2000 x 2001 / 2 = 2,001,000; sliding 1024 x 1025 / 2 + 976 x 1024
    # = 1,524,224; 10 x 8192 x 2,001,000 + 52 x 8192 x 1,524,224 = 163,921,920,000
    # + 649,295,036,416 = 813,216,956,416
    pre = p.prefill(2000)
    assert pre.flops == 2000 * 25_599_705_600 + 813_216_956_416
    assert pre.bytes_read == 27_009_335_808 + 300_023_808  # weights + one prompt's KV written
    assert pre.memory_time_s == pytest.approx(27_309_359_616 / (10**12 * 0.5), rel=1e-12)
    assert pre.compute_time_s == pytest.approx(52_012_628_156_416 / (10**15 * 0.25), rel=1e-12)
    # all-reduce of (2000, 5376): 2 x 62 x 2000 x 5376 x 2 B = 2,666,496,000 B
    assert pre.comm_time_s == pytest.approx(2_666_496_000 / 5e10, rel=1e-12)
    # two replicas of batch 3: total tokens/s = 3 x 2 / TPOT
    t = p.decode(2000, 3).step_time_s
    assert p.point(2000, 3)[2:] == pytest.approx((t, 6 / t), rel=1e-12)
    s = p.serving(2000, 3)
    assert (s.gpu_count, s.tpot_s) == (4, pytest.approx(t, rel=1e-12))
    assert s.tokens_per_s_per_seq == pytest.approx(1 / t, rel=1e-12)
    assert s.tokens_per_s == pytest.approx(6 / t, rel=1e-12)


def test_split_decode_uneven() -> None:
    # 5 sequences on 2 replicas: one holds 3, the other 2; tokens/s = 3 / t(3) + 2 / t(2)
    p = GpuFit(GEMMA3_27B, toy_gpu(10**11), Layout(tp=2, dp=2))
    full, tok_s = p.split_decode(2000, 5)
    t3, t2 = p.decode(2000, 3).step_time_s, p.decode(2000, 2).step_time_s
    assert full.step_time_s == t3
    assert tok_s == pytest.approx(3 / t3 + 2 / t2, rel=1e-12)


# ----- MLA attention FLOPs and routed experts --------------------------------------------------


@pytest.mark.parametrize("v_head_dim", [128, None], ids=["v128", "v-default"])
def test_mla_attention_flops_tp2(v_head_dim: int | None) -> None:
    # DeepSeek-V2-Lite at tp 2: 8 heads. Decode (absorbed): 2 x 8 x (2 x 512 + 64) = 17,408 FLOPs
    # per cached token per layer; prefill: 2 x 8 x (128 nope + 64 rope + 128 v) = 5,120 per pair.
    # v_head_dim omitted defaults to qk_nope_head_dim (128): the same figures.
    m = ModelSpec.model_validate({**DSV2_LITE.model_dump(), "v_head_dim": v_head_dim})
    p = GpuFit(m, toy_gpu(10**11), Layout(tp=2))
    assert p.decode(1001, 1).flops - p.decode(1, 1).flops == 27 * 17_408 * 1000
    # prefill(P) = P x matmul + 27 x 5,120 x P (P + 1) / 2: prefill(2) - 2 x prefill(1) = 27 x 5,120
    assert p.prefill(2).flops - 2 * p.prefill(1).flops == 27 * 5_120


def test_moe_experts_read_grow_with_the_batch() -> None:
    # DeepSeek-V2-Lite at tp 2: one routed expert 3 x 2048 x ceil(1408 / 2) = 4,325,376 params x 2 B
    # = 8,650,752 B, 26 MoE layers. One token reads 6 experts; two read 64 (1 - (58/64)^2) = 11.4375
    # on average: 26 x 8,650,752 x 5.4375 = 1,223,000,064 B more, plus one more sequence's KV at T = 1
    # (27 layers x 576 x 2 B = 31,104 B)
    p = GpuFit(DSV2_LITE, toy_gpu(10**11), Layout(tp=2))
    # + one more embedding row (hidden 2,048 x 2 B = 4,096 B): only the batch's rows are read
    assert p.decode(1, 2).bytes_read - p.decode(1, 1).bytes_read == 1_223_000_064 + 31_104 + 4_096


# ----- roofline helpers ------------------------------------------------------------------------


def test_roofline_helpers_exact() -> None:
    # no interconnect listed: PCIe 64 GB/s, 32 GB/s one way: 2 (2 - 1) / 2 x 64e9 / 32e9 = 2 s
    assert roofline.allreduce_time_s(64_000_000_000, 2, None) == 2.0
    assert roofline.compute_time_s(10**15, 10**15) == 1.0  # efficiency defaults to 1
    # past 2^53 a float would round: (10^9 + 1)(10^9 + 2) / 2 = 500,000,001,500,000,001
    assert roofline.attended_pairs(10**9 + 1) == 500_000_001_500_000_001
    # window 10^9 + 1, prompt 10^9 + 3: 500,000,001,500,000,001 + 2 x (10^9 + 1)
    assert roofline.attended_pairs(10**9 + 3, 10**9 + 1) == 500_000_001_500_000_001 + 2_000_000_002
    assert roofline.expected_experts_touched(1, 1, 5) == 1.0
    assert roofline.expected_experts_touched(0, 0, 5) == 0.0
    assert roofline.expected_experts_touched(8, 8, 3) == 8.0


def test_max_batch_is_a_floor_division_past_2_to_the_53() -> None:
    # one token of TINY is 32 B; a budget of 2^60 B (a float-exact 2^60 x 1.0) less 2000 B of weights:
    # (2^60 - 2000) // 32 = 2^55 - 63 sequences (2000 / 32 = 62.5); a float quotient would round
    # 2^55 - 62.5 to 2^55 - 64
    p = GpuFit(TINY, toy_gpu(2**60), Layout(**BARE))
    assert p.budget == 2**60
    assert p.max_batch(1) == 2**55 - 63
