"""vLLM's hybrid attention + Mamba / Gated-DeltaNet models, Llama-4's chunked local attention and
the MLA block size per GPU vendor, worked by hand from vLLM 0.11.0 / 0.33.0's code.

Sources: 0.11 `vllm/model_executor/models/config.py` HybridAttentionMambaModelConfig (block = 16 x
cdiv(mamba page, 16 x token page), prefix caching off, one Mamba page per request); 0.33
`vllm/platforms/interface.py` Platform._align_hybrid_block_size (alignment max(16, block_size),
lcm 64 for a FlashInfer Gated-DeltaNet prefill in 'align' mode; Mamba pages per request 2 +
checkpoint blocks, `MambaSpec.max_memory_usage_bytes`); `vllm/v1/kv_cache_interface.py`
ChunkedLocalAttentionSpec (cdiv(min(chunk + in flight, L), block) pages).
"""

import pytest

from kvcalc.engines import vllm
from kvcalc.engines.profile import VllmOptions, get_profile
from kvcalc.errors import KvcalcError
from kvcalc.formats import kv_format
from kvcalc.load.hf import model_from_hf_config
from kvcalc.load.models import load_model
from kvcalc.schema import ModelSpec
from tests.published_configs import NEMOTRON_H_8B

BF16, FP8 = kv_format("bf16"), kv_format("fp8")
GiB = 2**30


def mamba_state(model, tp, version, *args):
    """`V1Rules.mamba_state` of vLLM `version`."""
    return vllm.rules(version).mamba_state(model, tp, *args)


def nemotron() -> ModelSpec:
    return model_from_hf_config(NEMOTRON_H_8B, "Nemotron-H-8B-Base-8K/config.json")


def granite() -> ModelSpec:
    """A Granite-4.0-H geometry (granitemoehybrid, Mamba-2 with one group): 4 attention layers
    of 40, 32 query / 8 KV heads of 128, Mamba 128 heads x 64, d_state 128, conv 4."""
    return ModelSpec(
        name="granite-h",
        model_type="granitemoehybrid",
        n_layers=40,
        n_heads=32,
        n_kv_heads=8,
        head_dim=128,
        hidden_size=4096,
        max_position_embeddings=131072,
        layer_types=(["mamba"] * 9 + ["full"]) * 4,
        mamba_n_groups=1,
        mamba_n_heads=128,
        mamba_head_dim=64,
        mamba_d_state=128,
        mamba_d_conv=4,
    )


# ----- Qwen3-Next-80B-A3B: Gated DeltaNet, 36 linear + 12 full layers ------------------------------


def test_qwen3_next_state():
    m = load_model("qwen3-next-80b-a3b")
    s = mamba_state(m, 1, "0.11")
    # conv: (4 - 1) x (2 x 16 x 128 + 32 x 128) = 3 x 8,192; recurrent 32 x 128 x 128; bf16
    assert s.kind == "gdn" and s.shapes == ((3, 8192), (32, 128, 128))
    assert s.page_size_bytes == (3 * 8192 + 32 * 128 * 128) * 2 == 1_097_728
    # tp 4: conv 8,192 / 4 = 2,048 channels, 32 / 4 = 8 value heads
    assert mamba_state(m, 4, "0.33").page_size_bytes == (3 * 2048 + 8 * 128 * 128) * 2 == 274_432
    with pytest.raises(
        KvcalcError, match="Gated DeltaNet conv channels \\(8192\\) over tp ranks and 8192 is not divisible by 3"
    ):
        mamba_state(m, 3, "0.33")


def test_qwen3_next_vllm_0_11():
    m = load_model("qwen3-next-80b-a3b")
    r = vllm.capacity(m, 40 * GiB, BF16, BF16, max_model_len=32768, options=VllmOptions(version="0.11"))
    # token page 2 x 2 KV heads x 256 x 2 B = 2,048 B; block 16 x cdiv(1,097,728, 16 x 2,048 = 32,768)
    # = 16 x 34 = 544 tokens; page 544 x 2,048 = 1,114,112 B (padding 16,384 / 1,097,728 = 1.49%)
    assert r.block_size == 544
    assert r.log_lines[:3] == [
        "Hybrid or mamba-based model detected: disabling prefix caching since it is not yet supported.",
        "Setting attention block size to 544 tokens to ensure that attention page size is >= mamba page size.",
        "Padding mamba page size by 1.49% to ensure that mamba page size and attention page size are exactly equal.",
    ]
    # groups of 12 layers: 1 full + 36 / 12 = 3 Mamba groups; 12 x 1,114,112 = 13,369,344 B per block
    assert r.page_size_bytes == 12 * 1_114_112 == 13_369_344
    # 42,949,672,960 // 13,369,344 = 3,212 blocks
    assert r.num_gpu_blocks == 40 * GiB // 13_369_344 == 3212
    # a request: cdiv(32,768, 544) = 61 attention pages + 3 Mamba groups x 1 page = 64
    assert r.max_concurrency == 3212 / 64 == 50.1875
    # "GPU KV cache size": 3,212 // 4 groups x min(544, 32,768) = 803 x 544 = 436,832 tokens
    assert r.kv_cache_tokens == 436_832
    assert r.log_lines[-2:] == [
        "GPU KV cache size: 436,832 tokens",
        "Maximum concurrency for 32,768 tokens per request: 50.19x",
    ]


def test_qwen3_next_vllm_0_33_by_gpu_and_prefix_caching():
    m = load_model("qwen3-next-80b-a3b")
    # Hopper: FlashInfer GDN prefill, 'align' mode: alignment lcm(16, 64) = 64;
    # 64 x cdiv(1,097,728, 64 x 2,048 = 131,072) = 64 x 9 = 576 tokens; page 1,179,648 B (+7.46%)
    r = vllm.capacity(
        m, 40 * GiB, BF16, BF16, max_model_len=32768, options=VllmOptions(version="0.33", compute_capability="9.0")
    )
    assert r.block_size == 576 and r.page_size_bytes == 12 * 576 * 2048 == 14_155_776
    assert r.log_lines[:2] == [
        "Setting attention block size to 576 tokens to ensure that attention page size is >= mamba page size.",
        "Padding mamba page size by 7.46% to ensure that mamba page size and attention page size are exactly equal.",
    ]
    # 42,949,672,960 // 14,155,776 = 3,034 blocks; a request: cdiv(32,768, 576) = 57 + 3 groups x
    # (2 + 1 checkpoint) = 66 pages; 3,034 / 66 = 45.97x; tokens int(3,034 x 32,768 / 66) = 1,506,335
    assert r.num_gpu_blocks == 3034 and r.max_concurrency == 3034 / 66
    assert r.kv_cache_tokens == 3034 * 32768 // 66 == 1_506_335
    # Ampere (8.0): Triton GDN prefill, no checkpoint: alignment 16 -> 544 tokens, 2 pages per group
    a = vllm.capacity(
        m, 40 * GiB, BF16, BF16, max_model_len=32768, options=VllmOptions(version="0.33", compute_capability="8.0")
    )
    assert a.block_size == 544 and a.num_gpu_blocks == 3212
    assert a.max_concurrency == 3212 / (61 + 3 * 2)  # 47.94x
    # --no-enable-prefix-caching: mode 'none', 1 page per Mamba group, as 0.11
    n = vllm.capacity(
        m, 40 * GiB, BF16, BF16, max_model_len=32768, options=VllmOptions(version="0.33", prefix_caching=False)
    )
    assert n.block_size == 544 and n.max_concurrency == 3212 / 64
    # 0.11 refuses prefix caching for hybrid models
    with pytest.raises(KvcalcError, match="vLLM 0.11 switches prefix caching off for hybrid models") as e:
        vllm.capacity(m, 40 * GiB, BF16, BF16, options=VllmOptions(version="0.11", prefix_caching=True))
    assert e.value.field == "prefix_caching"


def test_qwen3_next_fp8_page_exactly_one_state_and_tp4():
    m = load_model("qwen3-next-80b-a3b")
    # fp8 attention, bf16 state: token page 2 x 2 x 256 x 1 B = 1,024; 16 x cdiv(1,097,728, 16,384)
    # = 16 x 67 = 1,072 tokens, and 1,072 x 1,024 = 1,097,728 exactly: no padding line
    r = vllm.capacity(m, 40 * GiB, FP8, FP8, max_model_len=32768, options=VllmOptions(version="0.11"))
    assert r.block_size == 1072 and not any(line.startswith("Padding") for line in r.log_lines)
    # tp 4 (0.33, Hopper): 1 KV head per rank (2 // 4 -> max 1): token page 1,024 B; state 274,432 B;
    # 64 x cdiv(274,432, 65,536) = 64 x 5 = 320 tokens; page 327,680 B (+19.40%)
    t = vllm.capacity(m, 40 * GiB, BF16, BF16, max_model_len=32768, tp=4, options=VllmOptions(version="0.33"))
    assert t.block_size == 320 and t.page_size_bytes == 12 * 327_680
    assert "Padding mamba page size by 19.40%" in t.log_lines[1]


def test_qwen3_next_memory_for():
    m = load_model("qwen3-next-80b-a3b")
    # 0.11: 8 requests x 64 pages x 13,369,344 B = 6,845,104,128 B
    assert vllm.memory_for(m, 32768, 8, BF16, BF16, options=VllmOptions(version="0.11")) == 8 * 64 * 13_369_344
    # 0.33 (Hopper): 8 x 66 pages x 14,155,776 B (8 x 66 > 66 + 1 null block)
    assert vllm.memory_for(m, 32768, 8, BF16, BF16, options=VllmOptions(version="0.33")) == 8 * 66 * 14_155_776


# ----- Nemotron-H-8B (Mamba-2, 4 attention + 24 Mamba + 24 MLP layers) -----------------------------


def test_nemotron_h_vllm_0_11_and_0_33():
    m = nemotron()
    # state: conv 3 x (128 x 64 + 2 x 8 x 128) = 3 x 10,240 values, SSM 128 x 64 x 128 = 1,048,576
    s11, s33 = mamba_state(m, 1, "0.11"), mamba_state(m, 1, "0.33")
    assert s11.page_size_bytes == (3 * 10240 + 1_048_576) * 2 == 2_158_592
    # 0.33: NemotronHForCausalLMConfig keeps the SSM state in float32
    assert (s33.ssm_dtype, s33.page_size_bytes) == ("fp32", 3 * 10240 * 2 + 1_048_576 * 4) == ("fp32", 4_255_744)
    # token page 2 x 8 x 128 x 2 = 4,096 B. 0.11: 16 x cdiv(2,158,592, 65,536) = 16 x 33 = 528 tokens
    r = vllm.capacity(m, 20 * GiB, BF16, BF16, max_model_len=8192, options=VllmOptions(version="0.11"))
    assert r.block_size == 528
    # groups of 4: 1 full + 6 Mamba; 4 x 528 x 4,096 = 8,650,752 B per block; 21,474,836,480 // that = 2,482
    assert r.num_gpu_blocks == 2482
    # cdiv(8,192, 528) = 16 + 6 = 22 pages; tokens 2,482 // 7 x 528 = 354 x 528 = 186,912
    assert r.max_concurrency == 2482 / 22 and r.kv_cache_tokens == 186_912
    # 0.33: 16 x cdiv(4,255,744, 65,536) = 16 x 65 = 1,040 tokens; 4 x 1,040 x 4,096 = 17,039,360 B
    # per block -> 1,260 blocks; pages cdiv(8,192, 1,040) = 8 + 6 x (2 + 1 checkpoint) = 26
    t = vllm.capacity(m, 20 * GiB, BF16, BF16, max_model_len=8192, options=VllmOptions(version="0.33"))
    assert (t.block_size, t.num_gpu_blocks) == (1040, 1260)
    assert t.max_concurrency == 1260 / 26 and t.kv_cache_tokens == 1260 * 8192 // 26 == 396_996


def test_granite_h_one_group_replicated_over_tp():
    m = granite()
    # 0.33, bf16 SSM (no Granite hook): conv 3 x (8,192 + 2 x 1 x 128) = 25,344, SSM 1,048,576 values
    assert mamba_state(m, 1, "0.33").page_size_bytes == (25_344 + 1_048_576) * 2 == 2_147_840
    # tp 2: n_groups 1 -> 2 (extra_groups_for_head_shards), conv (8,192 + 2 x 2 x 128) / 2 = 4,352,
    # SSM 64 x 64 x 128: (3 x 4,352 + 524,288) x 2 = 1,074,688 B
    assert mamba_state(m, 2, "0.33").page_size_bytes == (3 * 4352 + 524_288) * 2 == 1_074_688
    # tp 2 token page 2 x 4 x 128 x 2 = 2,048: 16 x cdiv(1,074,688, 32,768) = 16 x 33 = 528
    r = vllm.capacity(m, 10 * GiB, BF16, BF16, tp=2, max_model_len=32768, options=VllmOptions(version="0.33"))
    assert r.block_size == 528
    # groups of 4: 1 full + 36 / 4 = 9 Mamba groups, Mamba-2: 3 pages each
    # blocks 10,737,418,240 // (4 x 528 x 2,048 = 4,325,376) = 2,482; pages cdiv(32,768, 528) = 63 + 27 = 90
    assert r.num_gpu_blocks == 2482 and r.max_concurrency == 2482 / 90


# ----- Jamba-1.5-Mini (Mamba-1) ----------------------------------------------------------------------


def test_jamba_mamba1():
    m = load_model("jamba-1.5-mini")
    # d_inner 2 x 4,096 = 8,192: conv 3 x 8,192 + SSM 8,192 x 16 = 155,648 values x 2 B = 311,296 B
    assert mamba_state(m, 1, "0.11").page_size_bytes == 311_296
    # token page 2 x 8 x 128 x 2 = 4,096: 16 x cdiv(311,296, 65,536) = 16 x 5 = 80 tokens (+5.26%)
    for version, mamba_pages in (("0.11", 1), ("0.33", 2)):  # 0.33 'align', Mamba-1: no checkpoint block
        r = vllm.capacity(m, 20 * GiB, BF16, BF16, max_model_len=65536, options=VllmOptions(version=version))
        # groups of 4: 1 full + 7 Mamba; 4 x 80 x 4,096 = 1,310,720 B per block: 16,384 blocks
        assert (r.block_size, r.num_gpu_blocks) == (80, 16384)
        # cdiv(65,536, 80) = 820 + 7 x pages
        assert r.max_concurrency == 16384 / (820 + 7 * mamba_pages)
    # 0.11 tokens: 16,384 // 8 groups x 80 = 163,840
    assert (
        vllm.capacity(m, 20 * GiB, BF16, BF16, max_model_len=65536, options=VllmOptions(version="0.11")).kv_cache_tokens
        == 163_840
    )


def test_hybrids_refused_with_the_reason():
    with pytest.raises(KvcalcError, match="keeps Mamba state outside the KV blocks"):  # 0.6.6 has Jamba, not Qwen3-Next
        vllm.capacity(load_model("jamba-1.5-mini"), GiB, BF16, BF16, options=VllmOptions(version="0.6"))
    qwen35 = ModelSpec(
        name="q35",
        model_type="qwen3_5_text",
        n_layers=4,
        n_heads=16,
        n_kv_heads=2,
        head_dim=256,
        layer_types=["linear", "linear", "linear", "full"],
        max_position_embeddings=4096,
        linear_num_key_heads=16,
        linear_num_value_heads=32,
        linear_key_head_dim=128,
        linear_value_head_dim=128,
        linear_conv_kernel_dim=4,
    )
    with pytest.raises(KvcalcError, match="vLLM 0.11 has no Qwen3.5 model"):
        vllm.capacity(qwen35, GiB, BF16, BF16, options=VllmOptions(version="0.11"))
    # 0.33: Qwen3.5's mamba_ssm_dtype float32: 3 x 8,192 x 2 + 32 x 128 x 128 x 4 = 2,146,304 B
    assert mamba_state(qwen35, 1, "0.33").page_size_bytes == 3 * 8192 * 2 + 32 * 128 * 128 * 4 == 2_146_304
    other = qwen35.model_copy(update={"model_type": "minimax"})
    with pytest.raises(KvcalcError, match="not model type minimax's linear attention"):
        vllm.capacity(other, GiB, BF16, BF16)


# ----- Llama-4 Scout: chunked local attention (36 chunked + 12 full layers) -------------------------


def test_llama4_chunked_local_attention():
    m = load_model("llama-4-scout")
    page = 16 * 2 * 8 * 128 * 2  # 65,536 B per layer per block
    # 0.33: the hybrid allocator stays on (VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE defaults to 1):
    # groups of 12: 3 chunked + 1 full; 12 x 65,536 = 786,432 B per block -> 54,613 blocks in 40 GiB
    groups, size = vllm.rules("0.33").kv_cache_groups(m)
    assert size == 12 and [g.kind for g in groups] == ["chunked"] * 3 + ["full"]
    r = vllm.capacity(m, 40 * GiB, BF16, BF16, max_model_len=131072, options=VllmOptions(version="0.33"))
    assert r.num_gpu_blocks == 40 * GiB // (12 * page) == 54_613
    # a chunked group: cdiv(min(8,192 + 2 x 8,192 in flight, 131,072), 16) = 1,536 pages (no +1);
    # full: 8,192 -> 8,192 + 3 x 1,536 = 12,800 pages per request
    assert r.max_concurrency == 54_613 / 12_800
    # 0.11: vLLM turns the hybrid allocator off for chunked local attention: one group of 48 full layers
    o = vllm.capacity(m, 40 * GiB, BF16, BF16, max_model_len=131072, options=VllmOptions(version="0.11"))
    assert o.num_gpu_blocks == 40 * GiB // (48 * page) == 13_653 and o.max_concurrency == 13_653 / 8192
    assert any("unless VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE=1" in n for n in o.notes)
    # 0.11 with the env var: chunk pages cdiv(min(8,192 + 8,192, 131,072), 16) = 1,024
    e = vllm.capacity(
        m, 40 * GiB, BF16, BF16, max_model_len=131072, options=VllmOptions(version="0.11", chunked_local_hybrid=True)
    )
    assert e.max_concurrency == 54_613 / (8192 + 3 * 1024)
    # tokens (0.11): 54,613 // 4 groups x 16 = 218,448
    assert e.kv_cache_tokens == 218_448


# ----- MLA block size by GPU vendor ------------------------------------------------------------------


def test_mla_block_size_follows_the_gpu():
    m = load_model("deepseek-v2-lite")
    # page per block of 16: 27 layers x 16 x 576 x 2 B = 497,664 B
    h, b, a = (
        vllm.capacity(
            m,
            GiB,
            BF16,
            BF16,
            max_model_len=32768,
            options=VllmOptions(compute_capability=cc, vendor=vendor, version="0.11"),
        )
        for cc, vendor in (("9.0", "nvidia"), ("10.0", "nvidia"), (None, "amd"))
    )
    # 0.11: FlashMLA 64: 1 GiB // (27 x 64 x 1,152 B) = 539; CUTLASS MLA 128: // 3,981,312 = 269;
    # ROCm TRITON_MLA keeps 16: // 497,664 = 2,157
    assert (h.block_size, h.num_gpu_blocks) == (64, 539)
    assert (b.block_size, b.num_gpu_blocks) == (128, 269)
    assert (a.block_size, a.num_gpu_blocks) == (16, 2157)
    with pytest.raises(KvcalcError, match="ROCM_AITER_MLA is a ROCm backend and the GPU is NVIDIA"):
        vllm.capacity(m, GiB, BF16, BF16, options=VllmOptions(attention_backend="ROCM_AITER_MLA", vendor="nvidia"))
    # vLLM 0.11's AITER MLA needs block size 1; 0.33's takes any
    with pytest.raises(KvcalcError, match="does not support block size 16") as e:
        vllm.capacity(
            m, GiB, BF16, BF16, options=VllmOptions(attention_backend="ROCM_AITER_MLA", vendor="amd", version="0.11")
        )
    assert e.value.field == "block_size"
    assert (
        vllm.capacity(
            m,
            GiB,
            BF16,
            BF16,
            max_model_len=32768,
            options=VllmOptions(attention_backend="ROCM_AITER_MLA", vendor="amd"),
        ).block_size
        == 16
    )


def test_one_default_version_everywhere():
    # the module's functions and VllmOptions both model the current release
    assert VllmOptions().version == vllm.CURRENT_VERSION == "0.33"
    m = load_model("llama-3.1-8b")
    assert vllm.capacity(m, GiB, BF16, BF16, max_model_len=4096).engine_version == "vLLM 0.33 (V1 engine)"
    prof = get_profile("vllm")
    assert prof.capacity(m, GiB, BF16, BF16, max_model_len=4096).engine_version == "vLLM 0.33 (V1 engine)"


def test_group_size_rule_per_version():
    # 12 sliding + 10 full: 0.33 (kv_cache_planning._get_kv_cache_groups_uniform_page_size) takes the
    # larger count when it is under 1.5 x the smaller (12 < 15): one group of each, 12 layers each;
    # 0.11 (kv_cache_utils, same function) always takes the smaller, 10: sliding in 2 groups (6 + 6)
    m = ModelSpec(
        name="mix",
        n_layers=22,
        n_heads=4,
        n_kv_heads=2,
        head_dim=16,
        dtype="fp16",
        sliding_window=128,
        layer_types=["sliding"] * 12 + ["full"] * 10,
        max_position_embeddings=4096,
    )
    G = vllm.Group
    assert vllm.rules("0.33").kv_cache_groups(m) == ([G("sliding", 128, 12), G("full", None, 10)], 12)
    assert vllm.rules("0.11").kv_cache_groups(m) == (
        [G("sliding", 128, 6), G("sliding", 128, 6), G("full", None, 10)],
        10,
    )
