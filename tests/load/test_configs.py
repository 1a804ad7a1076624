"""The bundled model configs against numbers derived by hand from each model's published
config.json (the `source:` line of each YAML names it).

Every byte count here is worked out in the comment beside it, not read back from the engine.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from kvcalc.calc import kv_cache
from kvcalc.errors import KvcalcError
from kvcalc.load.files import bundled
from kvcalc.load.models import load_model
from kvcalc.schema import Parallelism, Workload

# name -> (attention kind, KV bytes one token adds to one sequence in the model's own dtype,
#          while the context is inside every window). 2 = K and V; MLA caches one latent.
GOLDEN: dict[str, tuple[str, int]] = {
    # 2 x 32 layers x 32 kv x 128 x 2 B (fp16) = 524,288
    "llama-2-7b": ("mha", 524_288),
    # 2 x 80 layers x 8 kv x 128 x 2 B (fp16) = 327,680
    "llama-2-70b": ("gqa", 327_680),
    # 2 x 32 layers x 8 kv x 128 x 2 B = 131,072
    "llama-3.1-8b": ("gqa", 131_072),
    # 2 x 80 layers x 8 kv x 128 x 2 B = 327,680
    "llama-3.1-70b": ("gqa", 327_680),
    # 2 x 126 layers x 8 kv x 128 x 2 B = 516,096
    "llama-3.1-405b": ("gqa", 516_096),
    # 2 x 32 layers x 8 kv x 128 x 2 B = 131,072 (all 32 layers slide over 4,096)
    "mistral-7b-v0.1": ("gqa", 131_072),
    # 2 x 32 layers x 8 kv x 128 x 2 B = 131,072 (no window)
    "mixtral-8x7b": ("gqa", 131_072),
    # 2 x 28 layers x 4 kv x 128 x 2 B = 57,344
    "qwen2.5-7b": ("gqa", 57_344),
    # 2 x 36 layers x 8 kv x 128 (explicit head_dim, not 2560/32 = 80) x 2 B = 147,456
    "qwen3-4b": ("gqa", 147_456),
    # 2 x 64 layers x 8 kv x 128 (explicit, not 5120/64 = 80) x 2 B = 262,144
    "qwen3-32b": ("gqa", 262_144),
    # 2 x 32 layers x 1 kv (multi_query) x 64 (4544/71) x 2 B = 8,192
    "falcon-7b": ("mqa", 8_192),
    # 2 x 32 layers x 32 kv x 96 (3072/32) x 2 B = 393,216
    "phi-3-mini": ("mha", 393_216),
    # 2 x 12 layers x 12 kv x 64 (768/12) x 4 B (fp32) = 73,728
    "gpt2": ("mha", 73_728),
    # 2 x 42 layers x 8 kv x 256 x 2 B = 344,064 (21 sliding + 21 full, same per token)
    "gemma-2-9b": ("gqa", 344_064),
    # 2 x 62 layers x 16 kv x 128 x 2 B = 507,904
    "gemma-3-27b": ("gqa", 507_904),
    # gemma-3-1b: 26 layers x 2 x 1 KV head x 256 x 2 B = 26,624 (4 query heads on 1 KV head: MQA)
    "gemma-3-1b": ("mqa", 26_624),
    # 27 layers x (512 + 64) latent x 2 B = 31,104 (no factor 2: the latent is K and V)
    "deepseek-v2-lite": ("mla", 31_104),
    # 61 layers x (512 + 64) x 2 B = 70,272
    "deepseek-v3": ("mla", 70_272),
    # 61 layers x (512 + 64) x 2 B = 70,272
    "kimi-k2": ("mla", 70_272),
    # 2 x 24 layers x 8 kv x 64 x 2 B = 49,152
    "gpt-oss-20b": ("gqa", 49_152),
    # 2 x 36 layers x 8 kv x 64 x 2 B = 73,728
    "gpt-oss-120b": ("gqa", 73_728),
    # 2 x 4 attention layers (32 / period 8) x 8 kv x 128 x 2 B = 16,384; mamba layers cache none
    "jamba-1.5-mini": ("gqa", 16_384),
    # 2 x 48 layers x 4 kv x 128 x 2 B = 98,304
    "qwen3-30b-a3b": ("gqa", 98_304),
    # 2 x 12 full layers (48 / 4) x 2 kv x 256 x 2 B = 24,576; linear layers cache none
    "qwen3-next-80b-a3b": ("gqa", 24_576),
    # 2 x 40 layers x 8 kv x 128 (explicit, not 5120/32 = 160) x 2 B = 163,840
    "mistral-nemo": ("gqa", 163_840),
    # issue 9 item 7 (tests/load/test_bundled_requested_models.py pins their contexts and sources too):
    # 2 x 36 layers x 8 kv x 128 x 2 B = 147,456
    "qwen3-8b": ("gqa", 147_456),
    # 2 x 40 layers x 8 kv x 128 x 2 B = 163,840
    "qwen3-14b": ("gqa", 163_840),
    # 2 x 94 layers x 4 kv x 128 x 2 B = 192,512
    "qwen3-235b-a22b": ("gqa", 192_512),
    # 2 x 80 layers x 8 kv x 128 (8192/64) x 2 B = 327,680
    "qwen2.5-72b": ("gqa", 327_680),
    # 2 x 16 layers x 8 kv x 64 x 2 B = 32,768
    "llama-3.2-1b": ("gqa", 32_768),
    # 2 x 28 layers x 8 kv x 128 x 2 B = 114,688
    "llama-3.2-3b": ("gqa", 114_688),
    # 2 x 80 layers x 8 kv x 128 x 2 B = 327,680
    "llama-3.3-70b": ("gqa", 327_680),
    # 61 layers x (512 + 64) x 2 B = 70,272
    "deepseek-r1": ("mla", 70_272),
    # 2 x 40 layers x 8 kv x 128 (explicit, not 5120/32 = 160) x 2 B = 163,840
    "mistral-small-24b": ("gqa", 163_840),
    # 2 x 34 layers x 4 kv x 256 x 2 B = 139,264 (29 sliding + 5 full, same per token)
    "gemma-3-4b": ("gqa", 139_264),
    # 2 x 48 layers x 8 kv x 256 x 2 B = 393,216
    "gemma-3-12b": ("gqa", 393_216),
    # 2 x 40 layers x 10 kv x 128 (5120/40) x 2 B = 204,800
    "phi-4": ("gqa", 204_800),
    # 2 x 48 layers x 8 kv x 128 x 2 B = 196,608 (36 chunked + 12 full, same per token)
    "llama-4-scout": ("gqa", 196_608),
    # 2 x 44 layers (each attention beside a Mamba-2 mixer) x 2 kv x 128 x 2 B = 45,056
    "falcon-h1-7b": ("gqa", 45_056),
    # issue 19, the 2026 families (tests/load/test_hf_2026.py has each one's arithmetic and source):
    # 25 x 2 x 8 x 256 x 2 + 5 x 2 x 2 x 512 x 2 = 225,280 (global layers: 2 KV heads of 512)
    "gemma-4-26b-a4b": ("gqa", 225_280),
    # 9 x 4 x (192 + 128) x 2 + 39 x 8 x (192 + 128) x 2 = 222,720
    "mimo-v2-flash": ("gqa", 222_720),
    # 43 x 512 x 2 (K = V, once) + 21 x (1,024 + 132) / 4 + 20 x 1,024 / 128 = 50,261
    "deepseek-v4-flash": ("mqa", 50_261),
    # 61 x (512 + 64) x 2 + 61 x 132 (indexer key) = 78,324
    "deepseek-v3.2": ("mla", 78_324),
    # 78 x 576 x 2 + 21 x 132 = 92,628
    "glm-5.2": ("mla", 92_628),
    # 24 MLA layers x 576 x 2 = 27,648 (69 KDA layers keep a state)
    "kimi-k3": ("mla", 27_648),
    # 61 x 576 x 2 = 70,272
    "kimi-k2.5": ("mla", 70_272),
    # 60 x 2 x 4 x 128 x 2 + 57 x 128 x 2 (indexer key in bf16) = 137,472
    "minimax-m3": ("gqa", 137_472),
    # 62 x 2 x 8 x 128 x 2 = 253,952
    "minimax-m2.7": ("gqa", 253_952),
    # 45 x 2 x 8 x 128 x 2 = 184,320
    "step-3.7-flash": ("gqa", 184_320),
    # 16 full layers x 2 x 4 x 256 x 2 = 65,536
    "qwen3.5-27b": ("gqa", 65_536),
    # 36 x 2 x 8 x 128 x 2 = 147,456
    "qwen3-vl-8b": ("gqa", 147_456),
    # 8 attention layers x 2 x 2 x 128 x 2 = 8,192
    "nemotron-3-super-120b-a12b": ("gqa", 8_192),
}

NAMES = sorted(GOLDEN)


def test_every_bundled_config_has_a_golden_number():
    assert sorted(bundled("models")) == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_kv_bytes_per_token_in_model_dtype(name):
    model = load_model(name)
    assert kv_cache.kv_bytes_per_token(model, model.dtype) == GOLDEN[name][1]


@pytest.mark.parametrize("name", NAMES)
def test_attention_kind(name):
    assert load_model(name).attention_kind == GOLDEN[name][0]


@pytest.mark.parametrize("name", NAMES)
def test_file_stem_is_lowercase_name_and_has_source(name):
    path = bundled("models")[name]
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert path.stem == data["name"].lower()
    assert "config.json" in data["source"]


#: per-token bytes that do not follow the KV format: DeepSeek's fp8 indexer keys (128 + 4 B scale)
FIXED_INDEXER = {
    "deepseek-v3.2": 61 * 132,  # 8,052
    "glm-5.2": 21 * 132,  # 2,772: the "full" indexer_types layers
    "deepseek-v4-flash": 21 * 132 // 4,
}  # 693: one key per 4 tokens on the CSA layers


@pytest.mark.parametrize("name", NAMES)
def test_fp8_is_half_of_bf16(name):
    # what follows the KV format halves; DeepSeek's indexer keys are fp8 whatever it is
    # (deepseek-v4-flash: (50,261 - 693) / 2 + 693 = 25,477)
    model = load_model(name)
    fixed = FIXED_INDEXER.get(name, 0)
    bf16 = kv_cache.kv_bytes_per_token(model, "bf16") - fixed
    assert bf16 % 2 == 0
    assert kv_cache.kv_bytes_per_token(model, "fp8") - fixed == bf16 // 2


# ----- layer mixes -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "name,counts",
    [
        ("gemma-3-27b", {"sliding": 52, "full": 10}),  # 62 layers, every 6th (5, 11, .., 59) global
        ("gemma-2-9b", {"sliding": 21, "full": 21}),  # even layers slide
        ("gpt-oss-20b", {"sliding": 12, "full": 12}),
        ("gpt-oss-120b", {"sliding": 18, "full": 18}),
        ("mistral-7b-v0.1", {"sliding": 32}),  # sliding_window 4096 on every layer
        ("phi-3-mini", {"sliding": 32}),  # sliding_window 2047 on every layer
        ("mixtral-8x7b", {"full": 32}),  # sliding_window null
        ("qwen2.5-7b", {"full": 28}),  # use_sliding_window false
        ("jamba-1.5-mini", {"mamba": 28, "full": 4}),  # attention at 4, 12, 20, 28
        ("qwen3-next-80b-a3b", {"linear": 36, "full": 12}),
        ("deepseek-v3", {"mla": 61}),
    ],
)
def test_layer_kinds(name, counts):
    kinds = load_model(name).layer_kinds
    assert {k: kinds.count(k) for k in set(kinds)} == counts


def test_gemma3_global_layers_are_every_sixth():
    kinds = load_model("gemma-3-27b").layer_kinds
    assert [i for i, k in enumerate(kinds) if k == "full"] == [5, 11, 17, 23, 29, 35, 41, 47, 53, 59]


def test_jamba_attention_layers_are_offset_4_period_8():
    kinds = load_model("jamba-1.5-mini").layer_kinds
    assert [i for i, k in enumerate(kinds) if k == "full"] == [4, 12, 20, 28]


# ----- window-aware totals at long context --------------------------------------------------


@pytest.mark.parametrize(
    "name,seq_len,window_bytes,no_window_bytes",
    [
        # per layer per token 2 x 16 kv x 128 x 2 B = 8,192 B
        # 10 global x 131,072 x 8,192 + 52 local x 1,024 x 8,192
        #   = 10,737,418,240 + 436,207,616 = 11,173,625,856
        # no window: 62 x 131,072 x 8,192 = 66,571,993,088
        ("gemma-3-27b", 131_072, 11_173_625_856, 66_571_993_088),
        # per layer per token 2 x 8 kv x 256 x 2 B = 8,192 B
        # 21 full x 32,768 x 8,192 + 21 sliding x 4,096 x 8,192 = 5,637,144,576 + 704,643,072
        #   = 6,341,787,648; no window: 42 x 32,768 x 8,192 = 11,274,289,152
        ("gemma-2-9b", 32_768, 6_341_787_648, 11_274_289_152),
        # per layer per token 2 x 8 kv x 64 x 2 B = 2,048 B
        # 12 full x 32,768 x 2,048 + 12 sliding x 128 x 2,048 = 805,306,368 + 3,145,728 = 808,452,096
        # no window: 24 x 32,768 x 2,048 = 1,610,612,736
        ("gpt-oss-20b", 32_768, 808_452_096, 1_610_612_736),
        # 18 x 32,768 x 2,048 + 18 x 128 x 2,048 = 1,207,959,552 + 4,718,592 = 1,212,678,144
        # no window: 36 x 32,768 x 2,048 = 2,415,919,104
        ("gpt-oss-120b", 32_768, 1_212_678_144, 2_415_919_104),
        # per layer per token 2 x 8 kv x 128 x 2 B = 4,096 B; every layer keeps 4,096 tokens
        # 32 x 4,096 x 4,096 = 536,870,912; no window: 32 x 32,768 x 4,096 = 4,294,967,296
        ("mistral-7b-v0.1", 32_768, 536_870_912, 4_294_967_296),
        # per layer per token 2 x 32 kv x 96 x 2 B = 12,288 B; 32 x 2,047 x 12,288 = 804,913,152
        # no window: 32 x 4,096 x 12,288 = 1,610,612,736
        ("phi-3-mini", 4_096, 804_913_152, 1_610_612_736),
    ],
)
def test_window_aware_cache_bytes(name, seq_len, window_bytes, no_window_bytes):
    model = load_model(name)
    est = kv_cache.estimate(model, Workload(seq_len=seq_len, k_dtype="bf16", v_dtype="bf16"))
    assert est.kv_cache_bytes == window_bytes
    assert est.kv_cache_bytes_no_window == no_window_bytes
    assert kv_cache.kv_cache_bytes(model, seq_len, 1, "bf16") == window_bytes
    assert kv_cache.kv_cache_bytes(model, seq_len, 1, "bf16", window_aware=False) == no_window_bytes


def test_window_saves_nothing_inside_the_window():
    # gemma-3-27b at 1,024 tokens: every layer holds all of them: 62 x 1,024 x 8,192 = 520,093,696
    est = kv_cache.estimate(load_model("gemma-3-27b"), Workload(seq_len=1024, k_dtype="bf16", v_dtype="bf16"))
    assert est.kv_cache_bytes == est.kv_cache_bytes_no_window == 520_093_696


# ----- fixed state of mamba / linear layers ------------------------------------------------


@pytest.mark.parametrize(
    "name,state_bytes",
    [
        # Mamba-1: d_inner = 2 x 4096 = 8,192; conv 8,192 x (4 - 1) + SSM 8,192 x 16 = 155,648 values
        # x 28 mamba layers x 2 B = 8,716,288
        ("jamba-1.5-mini", 8_716_288),
        # Gated DeltaNet: conv (2 x 16 x 128 + 32 x 128) x (4 - 1) = 24,576 + recurrent 32 x 128 x 128
        # = 524,288 -> 548,864 values x 36 linear layers x 2 B = 39,518,208
        ("qwen3-next-80b-a3b", 39_518_208),
        ("llama-3.1-8b", 0),
    ],
)
def test_state_bytes_per_sequence(name, state_bytes):
    est = kv_cache.estimate(load_model(name), Workload(seq_len=4096, k_dtype="bf16", v_dtype="bf16"))
    assert est.state_bytes == state_bytes


# ----- tensor and pipeline parallel -------------------------------------------------------


def _est(name, seq_len=1, tp=1, pp=1, dtype="bf16"):
    return kv_cache.estimate(
        load_model(name), Workload(seq_len=seq_len, k_dtype=dtype, v_dtype=dtype, parallel=Parallelism(tp=tp, pp=pp))
    )


@pytest.mark.parametrize(
    "name,tp,pp,per_gpu,all_gpus",
    [
        # TP 4: 8 KV heads / 4 = 2 per rank: 80 x 2 x 2 x 128 x 2 B = 81,920 per GPU; x 4 = 327,680
        ("llama-3.1-70b", 4, 1, 81_920, 327_680),
        # TP 8: 1 head per rank: 80 x 2 x 1 x 128 x 2 = 40,960; x 8 = 327,680
        ("llama-3.1-70b", 8, 1, 40_960, 327_680),
        # TP 16 > 8 KV heads: each head replicated on 2 ranks, still 1 per rank: 40,960 per GPU;
        # all GPUs hold 16 x 40,960 = 655,360 (twice the model's own 327,680)
        ("llama-3.1-70b", 16, 1, 40_960, 655_360),
        # MLA latent replicated on every rank: 61 x 576 x 2 = 70,272 per GPU; x 8 = 562,176
        ("deepseek-v3", 8, 1, 70_272, 562_176),
        # PP 4 over 61 layers as vLLM splits them: [15, 15, 16, 15]; fullest stage 16 x 576 x 2 = 18,432
        ("deepseek-v3", 1, 4, 18_432, 70_272),
        # PP 3 over 80 layers: [27, 27, 26]; fullest 27 x (2 x 8 x 128 x 2) = 27 x 4,096 = 110,592
        ("llama-3.1-70b", 1, 3, 110_592, 327_680),
        # TP 2 x PP 3: fullest stage 27 layers x 2 x 4 heads (8 / 2) x 128 x 2 B = 55,296 per GPU;
        # heads split, not replicated: all GPUs 80 x 2 x 4 x 128 x 2 = 163,840 x 2 ranks = 327,680
        ("llama-3.1-70b", 2, 3, 55_296, 327_680),
    ],
)
def test_parallel_bytes_per_token(name, tp, pp, per_gpu, all_gpus):
    est = _est(name, tp=tp, pp=pp)
    assert est.kv_bytes_per_token_per_gpu == per_gpu
    assert est.kv_cache_bytes_per_gpu == per_gpu  # seq_len 1, batch 1
    assert est.kv_cache_bytes_all_gpus == all_gpus


def test_tp_cache_at_long_context():
    # llama-3.1-70b, TP 4, 32,768 tokens x 8 sequences: 81,920 x 32,768 x 8 = 21,474,836,480 per GPU
    est = _est("llama-3.1-70b", seq_len=32_768, tp=4)
    est8 = kv_cache.estimate(
        load_model("llama-3.1-70b"),
        Workload(seq_len=32_768, batch=8, k_dtype="bf16", v_dtype="bf16", parallel=Parallelism(tp=4)),
    )
    assert est.kv_cache_bytes_per_gpu == 81_920 * 32_768
    assert est8.kv_cache_bytes_per_gpu == 21_474_836_480


@pytest.mark.parametrize(
    "name,tp",
    [
        ("llama-3.1-8b", 3),  # 32 query heads not divisible by 3
        ("falcon-7b", 2),  # 71 query heads
        ("qwen2.5-7b", 8),  # 28 query heads
        ("deepseek-v3", 3),  # MLA: only the 128 query heads count, and 3 does not divide them
    ],
)
def test_tp_refused(name, tp):
    # checked once, where the request is built (`kv_cache.estimate` trusts its workload)
    from kvcalc.requests import EstimateRequest

    with pytest.raises(KvcalcError, match=f"--tp {tp}"):
        EstimateRequest.build(load_model(name), seq_len=1, tp=tp)


def test_pp_beyond_layers_refused():
    with pytest.raises(KvcalcError, match="--pp 13"):
        _est("gpt2", pp=13)  # 12 layers


# ----- quantized KV formats ------------------------------------------------------------------


@pytest.mark.parametrize(
    "k,v,expected",
    [
        # q8_0: 34 B per 32 values: 2 x 32 x 8 x 128 x 34/32 = 69,632
        ("q8_0", "q8_0", 69_632),
        # q4_0: 18 B per 32: 2 x 32 x 8 x 128 x 18/32 = 36,864
        ("q4_0", "q4_0", 36_864),
        # int4 with groups of 32 and an fp16 scale: (16 + 2) B per 32 = 36,864
        ("int4:g32:fp16", "int4:g32:fp16", 36_864),
        # fp8: 1 B: 2 x 32 x 8 x 128 = 65,536 = half of bf16's 131,072
        ("fp8", "fp8", 65_536),
        # K q8_0 + V q4_0: 32 x 8 x (128 x 34/32 + 128 x 18/32) = 256 x (136 + 72) = 53,248
        ("q8_0", "q4_0", 53_248),
        # K bf16 + V fp8: 32 x 8 x (256 + 128) = 98,304
        ("bf16", "fp8", 98_304),
    ],
)
def test_llama_3_1_8b_quantized(k, v, expected):
    model = load_model("llama-3.1-8b")
    assert kv_cache.kv_bytes_per_token(model, k, v) == expected
    est = kv_cache.estimate(model, Workload(seq_len=4096, k_dtype=k, v_dtype=v))
    assert est.kv_cache_bytes == expected * 4096


def test_deepseek_v3_latent_in_q8_0():
    # 576-value latent = 18 blocks of 32 x 34 B = 612 B per layer; x 61 = 37,332
    assert kv_cache.kv_bytes_per_token(load_model("deepseek-v3"), "q8_0") == 37_332


def test_head_not_whole_blocks_refused():
    # gpt2 heads of 64 values are not a whole number of int4 groups of 128
    with pytest.raises(KvcalcError, match="not a whole number of blocks"):
        kv_cache.kv_bytes_per_token(load_model("gpt2"), "int4:g128")


# ----- the YAMLs against the published config.json copies in tests/data/hf -------------------

HF_DIR = Path(__file__).parents[1] / "data" / "hf"

#: Hugging Face key -> our field, for the keys both sides carry.
HF_KEYS = {
    "num_hidden_layers": "n_layers",
    "n_layer": "n_layers",
    "num_attention_heads": "n_heads",
    "n_head": "n_heads",
    "num_key_value_heads": "n_kv_heads",
    "hidden_size": "hidden_size",
    "n_embd": "hidden_size",
    "head_dim": "head_dim",
    "vocab_size": "vocab_size",
    "intermediate_size": "intermediate_size",
    "max_position_embeddings": "max_position_embeddings",
    "n_positions": "max_position_embeddings",
    "sliding_window": "sliding_window",
    "tie_word_embeddings": "tie_word_embeddings",
    "kv_lora_rank": "kv_lora_rank",
    "qk_rope_head_dim": "qk_rope_head_dim",
    "qk_nope_head_dim": "qk_nope_head_dim",
    "v_head_dim": "v_head_dim",
    "q_lora_rank": "q_lora_rank",
    "num_local_experts": "n_experts",
    "num_experts": "n_experts",
    "num_experts_per_tok": "n_experts_per_token",
    "mamba_d_state": "mamba_d_state",
    "mamba_d_conv": "mamba_d_conv",
    "mamba_expand": "mamba_expand",
    "mamba_dt_rank": "mamba_dt_rank",
}


@pytest.mark.parametrize(
    "fixture,name,skip",
    [
        ("Llama-2-7b-hf.json", "llama-2-7b", {"max_position_embeddings"}),  # MLC's copy predates 4096
        ("Llama-3.1-8B.json", "llama-3.1-8b", set()),
        ("Mistral-7B-v0.1.json", "mistral-7b-v0.1", set()),
        ("Mixtral-8x7B-v0.1.json", "mixtral-8x7b", set()),
        ("Qwen3-4B.json", "qwen3-4b", set()),
        ("gemma-2-9b-it.json", "gemma-2-9b", set()),
        ("gpt-oss-20b.json", "gpt-oss-20b", set()),
        ("gpt2.json", "gpt2", set()),
        ("falcon-7b.json", "falcon-7b", set()),
        ("DeepSeek-V2-Lite-Chat.json", "deepseek-v2-lite", {"num_key_value_heads"}),  # MLA: unused
        ("AI21-Jamba-1.5-Mini.json", "jamba-1.5-mini", set()),
    ],
)
def test_yaml_agrees_with_published_config(fixture, name, skip):
    hf = json.loads((HF_DIR / fixture).read_text(encoding="utf-8"))
    model = load_model(name)
    compared = 0
    for key, ours in HF_KEYS.items():
        if key in hf and key not in skip:
            assert getattr(model, ours) == hf[key], f"{name}: {ours} != config.json {key}"
            compared += 1
    assert compared >= 4
    if hf.get("multi_query"):  # Falcon: one KV head whatever num_attention_heads says
        assert model.resolved_n_kv_heads == 1
    if "attn_layer_period" in hf:  # Jamba
        kinds = model.layer_kinds
        assert [i for i, k in enumerate(kinds) if k == "full"] == list(
            range(hf["attn_layer_offset"], hf["num_hidden_layers"], hf["attn_layer_period"])
        )
    if "layer_types" in hf:  # gpt-oss
        assert model.layer_kinds == [t.removesuffix("_attention") for t in hf["layer_types"]]
