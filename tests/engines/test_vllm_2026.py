"""vLLM 0.33 on the 2026 models (issue 19 item 2) and its 2026 cache dtypes (issue 20 item 4):
each rule with its arithmetic. The configs are the bundled YAMLs of the published config.json
files (tests/data/hf-configs-2026/); every figure below is also in vLLM 0.33's own run
(tests/oracle/fixtures/vllm-0.33-2026.json, held case by case in tests/oracle/test_vllm_2026_fixture.py).
Sources: vLLM 0.33.0 `vllm/v1/core/kv_cache_planning.py`, `vllm/v1/kv_cache_interface.py`, the model
files named in kvcalc/engines/vllm/v0_33_specs.py; docs/engine-rules-2026.md.
"""

from __future__ import annotations

import warnings

import pytest

from kvcalc.engines import vllm
from kvcalc.engines.vllm import VllmOptions, planning, v0_33_specs
from kvcalc.errors import KvcalcError
from kvcalc.formats import kv_format
from kvcalc.load.models import load_model

GiB = 2**30
BF16, FP8, NVFP4 = kv_format("bf16"), kv_format("fp8_e4m3"), kv_format("nvfp4")
HOPPER = VllmOptions(compute_capability="9.0")


def capacity(name: str, mem: int, fmt=BF16, L: int = 32_768, label: str | None = None, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return vllm.capacity(
            load_model(name),
            mem,
            fmt,
            fmt,
            max_model_len=L,
            kv_cache_dtype=label,
            options=VllmOptions(compute_capability="9.0", **kw),
        )


def groups(name: str, fmt=BF16, cache_dtype: str = "auto", tp: int = 1):
    r = vllm.rules().resolve(
        load_model(name), fmt, fmt, tp=tp, options=HOPPER, label=None if cache_dtype == "auto" else cache_dtype
    )
    return r, planning.kv_cache_groups(r.specs, block_outermost=r.block_outermost)


# ----- nvfp4 (issue 20) ---------------------------------------------------------------------------


def test_nvfp4_llama_3_1_8b_row_bytes():
    """nvfp4 K or V head row = head/2 B fp4 + head/16 B fp8 scales (`nvfp4_kv_cache_full_dim`):
    Llama-3.1-8B (32 layers, 8 KV heads of 128): 2 x 32 x 8 x (64 + 8) = 36,864 B a token, against
    131,072 in bf16. Page 16 x 36,864 = 589,824 B; 10 GiB: 10,737,418,240 // 589,824 = 18,204 blocks."""
    r = capacity("llama-3.1-8b", 10 * GiB, NVFP4, L=8192)
    assert (r.page_size_bytes, r.num_gpu_blocks) == (589_824, 18_204)
    assert r.page_size_bytes // r.block_size == 36_864


def test_nvfp4_refused_for_mla_and_before_033():
    with pytest.raises(KvcalcError, match="^vLLM 0.33's nvfp4 KV cache is for full / sliding attention layers"):
        capacity("deepseek-v3", GiB, NVFP4)
    with pytest.raises(KvcalcError, match="^vLLM 0.11 has no 'nvfp4' KV cache dtype; use auto, bfloat16"):
        vllm.capacity(load_model("llama-3.1-8b"), GiB, NVFP4, NVFP4, options=VllmOptions(version="0.11"))


# ----- DeepSeek-V4-Flash ------------------------------------------------------------------------------


def test_deepseek_v4_pages_groups_and_blocks():
    """fp8_ds_mla: 584 B an entry, pages rounded up to 576 B (`_apply_alignment_padding`):
    SWA 64 x 584 = 37,376 -> 37,440 (65 x 576); CSA latent 256 / 4 = 64 entries -> 37,440;
    HCA 256 / 128 x 584 = 1,168 -> 1,728; indexer 64 x 132 = 8,448 -> 8,640; CSA state
    4 x 2,048 x 4 B = 32,768 -> 32,832; its indexer's 4 x 512 x 4 = 8,192 -> 8,640; HCA state
    8 x 1,024 x 4 = 32,768 -> 32,832. Packed groups (BLHNC): 22 + 21 SWA layers, 62 latents and
    indexers (21 x 37,440 + 21 x 8,640 + 20 x 1,728 = 1,002,240 B, the widest: the block stride),
    42 CSA states, 20 HCA states. 16 GiB: 17,179,869,184 // 1,002,240 = 17,141 blocks. A request of
    32,768 (in flight 2 x 8,192): SWA 2 x (cdiv(127 + 16,384, 64) + 1) = 2 x 259, latents
    cdiv(32,768, 256) = 128, CSA states cdiv(7 + 16,384, 4) + 1 = 4,099, HCA states
    cdiv(127 + 16,384, 8) + 1 = 2,065: 6,810 blocks; 17,141 / 6,810 = 2.517x."""
    r, g = groups("deepseek-v4-flash")
    pages = sorted({(s.cache, s.spec, s.block_size, s.page_size_bytes) for s in r.specs})
    assert pages == [
        ("attn", "MLAAttentionSpec", 256, 1_728),
        ("attn", "MLAAttentionSpec", 256, 37_440),
        ("k_cache", "MLAAttentionSpec", 256, 8_640),
        ("state_cache", "SlidingWindowMLASpec", 4, 8_640),
        ("state_cache", "SlidingWindowMLASpec", 4, 32_832),
        ("state_cache", "SlidingWindowMLASpec", 8, 32_832),
        ("swa_cache", "SlidingWindowMLASpec", 64, 37_440),
    ]
    assert [len(x.specs) for x in g] == [22, 21, 62, 42, 20]
    assert planning.bytes_per_block(g) == 1_002_240
    assert planning.blocks_per_request(g, 32_768, 16_384) == 6_810
    res = capacity("deepseek-v4-flash", 16 * GiB)
    assert (res.num_gpu_blocks, res.kv_cache_tokens) == (17_141, 82_478)  # int(17,141 / 6,810 x 32,768)
    assert res.log_lines[0] == "Using DeepSeek's fp8_ds_mla KV cache format."


def test_deepseek_v4_bf16_refused_with_vllms_text():
    with pytest.raises(
        KvcalcError,
        match="DeepseekV4 fp8_ds_mla layout only supports fp8 kv-cache, got bfloat16. "
        "Please set `--kv-cache-dtype fp8`",
    ):
        capacity("deepseek-v4-flash", 16 * GiB, label="bf16")


# ----- DeepSeek-V3.2 / GLM-5.2 -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, fmt, label, per_token",
    [
        # GLM-5.2 fp8 -> fp8_ds_mla: 78 latents x 656 + 21 indexers x 132 = 53,940 B a token
        ("glm-5.2", FP8, "fp8", 53_940),
        # bf16: 78 x 1,152 + 21 x 132 = 92,628
        ("glm-5.2", BF16, None, 92_628),
        # DeepSeek-V3.2: 61 x (656 + 132) = 48,068 in fp8; 61 x (1,152 + 132) = 78,324 in bf16
        ("deepseek-v3.2", FP8, "fp8", 48_068),
        ("deepseek-v3.2", BF16, None, 78_324),
        # fp8_e4m3 is not fp8 here: FLASHMLA_SPARSE does not list it, FLASHINFER_MLA_SPARSE_SM90 takes
        # it with plain fp8 latents (vLLM 0.33's selection, tests/oracle/vllm_grid.py):
        # DeepSeek-V3.2 61 x (576 + 132) = 43,188; GLM-5.2 78 x 576 + 21 x 132 = 47,700
        ("deepseek-v3.2", FP8, "fp8_e4m3", 43_188),
        ("glm-5.2", FP8, "fp8_e4m3", 47_700),
    ],
)
def test_sparse_mla_one_group_of_latents_and_indexer_keys(name, fmt, label, per_token):
    """One `UniformTypeKVCacheSpecs` group, block 64 (FLASH_ATTN_MLA_SPARSE / FLASHMLA_SPARSE):
    bytes a block = 64 x the per-token sum (GLM-5.2 fp8: 3,452,160 B)."""
    r, g = groups(name, fmt, label or "auto")
    assert len(g) == 1 and g[0].uniform_type
    assert planning.bytes_per_block(g) == 64 * per_token


@pytest.mark.parametrize(
    "name, per_token",
    [
        # as above: GLM-5.2 78 x 656 + 21 x 132 = 53,940; DeepSeek-V3.2 61 x (656 + 132) = 48,068
        ("glm-5.2", 53_940),
        ("deepseek-v3.2", 48_068),
    ],
)
def test_sparse_mla_fp8_without_a_label_is_fp8_ds_mla(name, per_token):
    """`kvcalc estimate --engine vllm --kv-dtype fp8` passes the format and no label: an fp8
    cache is still FLASHMLA_SPARSE's fp8_ds_mla rows (656 B), not 576 B latents on the 16-bit
    backend (the bug: label None was read as auto)."""
    r, g = groups(name, FP8, "auto")
    assert planning.bytes_per_block(g) == 64 * per_token
    assert any("FLASHMLA_SPARSE" in n for n in r.notes)


def test_glm_indexer_on_21_of_78_layers():
    # index_topk_freq 4, offset 3: layers 0, 1, 2, 6, 10, ..., 74
    r, _ = groups("glm-5.2")
    assert sum(s.cache == "k_cache" for s in r.specs) == 21 and sum(s.cache == "attn" for s in r.specs) == 78


def test_sparse_mla_refuses_a_dtype_neither_backend_takes():
    with pytest.raises(KvcalcError, match="vLLM 0.33's sparse MLA backends on Hopper take auto, bfloat16, float16"):
        capacity("deepseek-v3.2", 16 * GiB, kv_format("fp8_e5m2"), label="fp8_e5m2")


# ----- Gemma-4 / MiMo-V2-Flash: per-layer geometry --------------------------------------------------


def test_gemma4_pages_unified_by_block_size():
    """25 sliding layers 16 x 8 x (256 + 256) x 2 = 131,072 B; 5 global (K = V stored in both
    slots) 16 x 2 x (512 + 512) x 2 = 65,536 -> block 32 (`unify_kv_cache_spec_page_size`).
    Groups of 5: 5 sliding + 1 full, 5 x 131,072 = 655,360 B a block. 40 GiB: 65,536 blocks; a
    request of 32,768: 5 x (cdiv(1,023 + 16,384, 16) + 1) + cdiv(32,768, 32) = 5 x 1,089 + 1,024
    = 6,469; 65,536 / 6,469 x 32,768 = 331,965 tokens."""
    r = capacity("gemma-4-26b-a4b", 40 * GiB)
    assert (r.page_size_bytes, r.num_gpu_blocks, r.kv_cache_tokens) == (655_360, 65_536, 331_965)
    assert r.max_concurrency == 65_536 / 6_469


def test_mimo_window_is_sliding_window_size():
    """vLLM's spec window is `sliding_window_size` (128), one less than kvcalc's layer window
    (transformers attends 129); global 16 x 4 x (192 + 128) x 2 = 40,960 B -> block 32, sliding
    81,920: groups of 9 (39 < 1.5 x 9 fails): 1 full + 8, 8, 8, 8, 7 sliding."""
    r, g = groups("mimo-v2-flash")
    assert {s.window for s in r.specs if s.window} == {128}
    assert sorted((x.block_size, len(x.specs)) for x in g) == [(16, 7), (16, 8), (16, 8), (16, 8), (16, 8), (32, 9)]
    assert planning.bytes_per_block(g) == 9 * 81_920


# ----- Kimi-K3: KDA beside MLA ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fmt, tp, block, page",
    [
        # bf16 tp1: state 3 x 36,864 x 2 + 96 x 128 x 128 x 4 = 6,512,640 B; 128 x cdiv(6,512,640, 128 x 1,152) = 5,760
        (BF16, 1, 5_760, 5_760 * 1_152),
        # fp8 (576 B a token): 128 x cdiv(6,512,640, 73,728) = 128 x 89 = 11,392
        (FP8, 1, 11_392, 11_392 * 576),
        # tp8: 12 heads, state 3 x 4,608 x 2 + 12 x 128 x 128 x 4 = 814,080 B: 128 x cdiv(814,080, 147,456) = 768
        (BF16, 8, 768, 768 * 1_152),
    ],
)
def test_kimi_k3_mla_hybrid_alignment(fmt, tp, block, page):
    r, g = groups("kimi-k3", fmt, "auto" if fmt is BF16 else "fp8_e4m3", tp)
    assert r.block_size == block
    assert {s.page_size_bytes for s in r.specs} == {page}
    assert [len(x.specs) for x in g] == [23, 23, 23, 24]


def test_kimi_k3_blocks():
    # 16 GiB // (24 x 6,635,520 = 159,252,480) = 107 blocks; a request: cdiv(32,768, 5,760) = 6 + 3 KDA groups x 3
    r = capacity("kimi-k3", 16 * GiB)
    assert (r.num_gpu_blocks, r.max_concurrency) == (107, 107 / 15)


# ----- refusals --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, arch", [("minimax-m3", "MiniMaxM3ForCausalLM"), ("step-3.7-flash", "Step3p7FlashForCausalLM")]
)
def test_published_configs_vllm_033_cannot_load(name, arch):
    with pytest.raises(KvcalcError) as e:
        capacity(name, 16 * GiB)
    assert str(e.value).startswith(f"{name}: vLLM 0.33 refuses this config.json at load: architecture {arch}")


@pytest.mark.parametrize("name", ["gemma-4-26b-a4b", "deepseek-v4-flash", "glm-5.2", "kimi-k3"])
def test_older_releases_name_what_they_lack(name):
    with pytest.raises(KvcalcError, match=f"^{name}: vLLM 0.11 does not have "):
        vllm.capacity(load_model(name), 16 * GiB, BF16, BF16, options=VllmOptions(version="0.11"))


def test_needs_specs_only_for_the_new_layers():
    assert not v0_33_specs.needs_specs(load_model("llama-3.1-8b"))
    assert not v0_33_specs.needs_specs(load_model("gemma-3-27b"))
    assert v0_33_specs.needs_specs(load_model("gemma-4-26b-a4b"))


# ----- vLLM 0.33's packed dtypes (issue 20): TurboQuant presets, int4_per_token_head -------------------


@pytest.mark.parametrize(
    "dtype, block, blocks, tokens",
    [
        # k8v4: slot 128 + (64 + 4) = 196 B a head, 8 x 196 = 1,568 B a token; layers 0, 1, 30, 31 in bf16 (4,096 B):
        # block 16 x cdiv(4,096 x 16, 16 x 1,568) = 48; one UniformType group: 28 x 48 x 1,568 + 4 x 48 x 4,096
        # = 2,893,824 B a block; 16 GiB // that = 5,936; per request cdiv(32,768, 48) = 683: 5,936 / 683 x 32,768
        ("turboquant_k8v4", 48, 5_936, 284_788),
        # 4bit_nc: slot (64 + 2) + (64 + 4) = 134 B, 1,072 B a token; block 16 x cdiv(65,536, 17,152) = 64;
        # 28 x 64 x 1,072 + 4 x 64 x 4,096 = 2,969,600 B; 5,785 blocks; cdiv(32,768, 64) = 512
        ("turboquant_4bit_nc", 64, 5_785, 370_240),
        # int4_per_token_head: 8 x (64 + 64 + 2 x 4) = 1,088 B a token, block 16: 32 x 17,408 = 557,056 B; 30,840 blocks
        ("int4_per_token_head", 16, 30_840, 493_440),
        # nvfp4: 2 x 8 slots x (64 + 8) = 1,152 B a token a layer, 32 x 16 x 1,152 = 589,824 B a block: 29,127 blocks
        ("nvfp4", 16, 29_127, 466_032),
    ],
)
def test_packed_dtypes_llama_3_1_8b(dtype, block, blocks, tokens):
    """Figures vLLM 0.33's own `get_kv_cache_configs` / `get_kv_cache_capacity` gave for the specs its
    layers build (TurboQuantAttentionBackend / TritonAttentionBackend `customize_spec`; docs/engine-oracles.md)."""
    from kvcalc import capacity as api_capacity

    r = api_capacity("llama-3.1-8b", engine="vllm", kv_memory_bytes=16 * GiB, max_model_len=32_768, kv_dtype=dtype)
    assert (r.kv_cache_dtype, r.block_size, r.num_gpu_blocks, r.kv_cache_tokens) == (dtype, block, blocks, tokens)


def test_packed_dtypes_refused_where_not_modelled_and_before_033():
    from kvcalc import capacity as api_capacity

    with pytest.raises(KvcalcError, match="sizes turboquant_k8v4 for models whose every layer is full attention"):
        api_capacity("gemma-3-27b", engine="vllm", kv_memory_bytes=16 * GiB, kv_dtype="turboquant_k8v4")
    with pytest.raises(KvcalcError) as e:
        api_capacity(
            "llama-3.1-8b",
            engine="vllm",
            kv_memory_bytes=16 * GiB,
            kv_dtype="turboquant_k8v4",
            options=VllmOptions(version="0.11"),
        )
    assert str(e.value) == (
        "--kv-dtype turboquant_k8v4: vLLM 0.11 has no 'turboquant_k8v4' KV cache dtype; use auto, "
        "bfloat16, float16, fp8, fp8_e5m2, int8_per_token_head or fp8_per_token_head"
    )


def test_int4_per_token_head_on_a_hybrid():
    """Qwen3.5-27B (16 full-attention layers of 4 KV heads x 256, 48 Gated DeltaNet layers of
    3,207,168 B state), int4_per_token_head, tp 1, Hopper: TRITON_ATTN packs 4 x (128 + 128 + 2 x 4)
    = 1,056 B a token (`customize_spec`), which `_align_hybrid_block_size` aligns to the 64-token
    GDN checkpoints: block 64 x cdiv(3,207,168, 67,584) = 3,072, page 3,072 x 1,056 = 3,244,032 B,
    groups of 16: 16 x 3,244,032 = 51,904,512 B a block; 16 GiB // that = 330 blocks; a request of
    32,768: cdiv(32,768, 3,072) = 11 + 3 GDN groups x 3 pages = 20 -> 16.5x."""
    from kvcalc import capacity as api_capacity

    r = api_capacity(
        "qwen3.5-27b", engine="vllm", kv_memory_bytes=16 * GiB, max_model_len=32_768, kv_dtype="int4_per_token_head"
    )
    assert (r.block_size, r.page_size_bytes, r.num_gpu_blocks, r.max_concurrency) == (3_072, 51_904_512, 330, 16.5)


# ----- the vLLM 0.33 dtypes that name a layout, not a format (fp8_ds_mla, nvfp4_4over6 ...) ----------


def vllm_formats(name: str, dtype: str):
    from kvcalc.engines.profile import get_profile

    return get_profile("vllm").kv_formats(load_model(name), dtype, options=HOPPER)


@pytest.mark.parametrize(
    "name, dtype, per_token",
    [
        # fp8_ds_mla is what fp8 becomes on sparse MLA: DeepSeek-V3.2 61 x (656 + 132) = 48,068 B a token
        ("deepseek-v3.2", "fp8_ds_mla", 48_068),
        # GLM-5.2: 78 x 656 + 21 x 132 = 53,940
        ("glm-5.2", "fp8_ds_mla", 53_940),
    ],
)
def test_fp8_ds_mla_sizes_as_fp8_on_sparse_mla(name, dtype, per_token):
    c = vllm_formats(name, dtype)
    r, g = groups(name, c.k, c.label)
    assert planning.bytes_per_block(g) == 64 * per_token


def test_nvfp4_4over6_is_nvfp4_bytes():
    # Llama-3.1-8B: 2 x 32 layers x 8 heads x (64 + 8) = 36,864 B a token, as nvfp4; on the SM100
    # family only (vLLM 0.33 flashinfer.py supports_kv_cache_dtype; refused on Hopper, below)
    from kvcalc.engines.profile import get_profile

    c = get_profile("vllm").kv_formats(
        load_model("llama-3.1-8b"), "nvfp4_4over6", options=VllmOptions(compute_capability="10.0")
    )
    assert c.k == NVFP4 and c.v == NVFP4


@pytest.mark.parametrize(
    "name, dtype, why",
    [
        ("llama-3.1-8b", "fp8_ds_mla", "sparse MLA"),
        ("deepseek-v3.2", "nvfp4_ds_mla", "SM100"),
        ("llama-3.1-8b", "fp8_inc", "Intel Gaudi"),
        ("llama-3.1-8b", "nvfp4_4over6", "SM100 family"),
        ("llama-3.1-8b", "octave_k3v4", "ROCm only"),
        ("llama-3.1-8b", "ultraquant_4bit", "ROCm"),
    ],
)
def test_layout_dtypes_refused_with_the_reason(name, dtype, why):
    with pytest.raises(KvcalcError, match=why):
        vllm_formats(name, dtype)
