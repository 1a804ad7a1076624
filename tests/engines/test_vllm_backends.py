"""vLLM 0.33's attention-backend choice and the block size it gives (`vllm.attention_block_size`,
`_select_033`), against 0.11's forced MLA block sizes.

Sources (vLLM 0.33.0): `vllm/platforms/cuda.py` `_get_backend_priorities` (MLA on compute
capability 9.x: FLASH_ATTN_MLA, FLASHMLA, FLASHINFER_MLA, TRITON_MLA; 10.x: FLASHINFER_MLA,
TOKENSPEED_MLA, CUTLASS_MLA, FLASH_ATTN_MLA, FLASHMLA, TRITON_MLA; 12.x: TRITON_MLA),
`CudaPlatform.get_valid_backends` / `get_attn_backend_cls` (first valid one; the "--block-size
... precluded" warning); `vllm/v1/attention/backend.py` `validate_configuration`,
`get_preferred_block_size` (16 if supported, else the smallest kernel block); the backends in
`vllm/v1/attention/backends/mla/`: flashattn_mla.py (auto/float16/bfloat16, MultipleOf(16), sm90),
flashmla.py (+ fp8, [64], dense on Hopper only), flashinfer_mla.py (+ fp8, [32, 64], 10.x,
qk_nope_head_dim in [64, 128, 192]), cutlass_mla.py ([128], 10.x), triton_mla.py (MultipleOf(16));
`vllm/platforms/interface.py` `update_block_size_for_backend`; `vllm/platforms/rocm.py`
`_get_backend_priorities` (TRITON_MLA without VLLM_ROCM_USE_AITER).

Per layer per token: DeepSeek-V2-Lite / V3 / Kimi-K2 latent 512 + rope 64 = 576 values (bf16 1,152 B,
fp8 576 B); DeepSeek-V2-Lite 27 layers, V3 61; Llama-3.1-8B 2 x 8 x 128 x 2 B = 4,096 B, 32 layers.
GiB = 2^30 = 1,073,741,824 B. max_model_len 4,096 everywhere (one full group: the token figure is
blocks x block size, as 4,096 is a multiple of every block size here).
"""

from __future__ import annotations

import warnings

import pytest

from kvcalc.engines import vllm
from kvcalc.engines.vllm import VllmOptions, v0_33_mla
from kvcalc.errors import KvcalcError
from kvcalc.formats import kv_format
from kvcalc.load.models import load_model

BF16, FP8 = kv_format("bf16"), kv_format("fp8")
GiB = 2**30
LITE, V3, KIMI, LLAMA = (load_model(n) for n in ("deepseek-v2-lite", "deepseek-v3", "kimi-k2", "llama-3.1-8b"))
H100, B200, RTX5090 = "9.0", "10.0", "12.0"


def cap(model, kv=BF16, cc=H100, vendor="nvidia", **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return vllm.capacity(
            model, GiB, kv, kv, max_model_len=4096, options=VllmOptions(compute_capability=cc, vendor=vendor, **kw)
        )


def figures(r):
    return r.block_size, r.num_gpu_blocks, r.kv_cache_tokens


# ----- DeepSeek-V2-Lite and DeepSeek-V3 per GPU and KV dtype ---------------------------------


def test_hopper_bf16_takes_flash_attn_mla_and_keeps_16():
    # FLASH_ATTN_MLA first on 9.x, takes auto, MultipleOf(16) -> get_preferred_block_size(16) = 16.
    # V2-Lite: 16 x 1,152 x 27 = 497,664 B per block; 1 GiB // 497,664 = 2,157 blocks, 34,512 tokens
    r = cap(LITE)
    assert figures(r) == (16, 2157, 34_512) and r.page_size_bytes == 497_664
    assert (
        r.notes[0]
        == (
            "MLA attention backend FLASH_ATTN_MLA (vLLM 0.33's first valid MLA backend on compute "
            "capability 9.0) stores auto (bf16) latent rows (576 values, 1,152 B a token), sets block size 16"  # issue 20: the format the backend stores
        )
    )
    # V3: 16 x 1,152 x 61 = 1,124,352 B; 1 GiB // 1,124,352 = 954 (954 x 1,124,352 = 1,072,631,808), 15,264 tokens
    assert figures(cap(V3)) == (16, 954, 15_264)


def test_hopper_fp8_takes_flashmla_and_64():
    # FLASH_ATTN_MLA lists no fp8: passed over; FLASHMLA takes fp8, kernel block [64] -> 64.
    # V2-Lite: 64 x 576 x 27 = 995,328 B; 1 GiB // 995,328 = 1,078 blocks (1,078 x 995,328 =
    # 1,072,963,584), 1,078 x 64 = 68,992 tokens
    r = cap(LITE, FP8)
    assert figures(r) == (64, 1078, 68_992) and r.page_size_bytes == 995_328
    assert r.notes[0] == (
        "MLA attention backend FLASHMLA (vLLM 0.33's first valid MLA backend on compute capability "
        "9.0; passed over: FLASH_ATTN_MLA (kv_cache_dtype not supported)) "
        "stores fp8 latent rows (576 values, 576 B a token), sets block size 64"
    )
    # V3: 64 x 576 x 61 = 2,248,704 B; 1 GiB // 2,248,704 = 477 blocks, 30,528 tokens
    assert figures(cap(V3, FP8)) == (64, 477, 30_528)


def test_blackwell_takes_flashinfer_mla_and_32_for_bf16_and_fp8():
    # FLASHINFER_MLA first on 10.x (qk_nope_head_dim 128 is in [64, 128, 192]); kernel blocks [32, 64]:
    # 16 is not a multiple of either -> the smallest, 32 (not 0.11's CUTLASS_MLA 128).
    # V2-Lite bf16: 32 x 1,152 x 27 = 995,328 B -> 1,078 blocks, 34,496 tokens;
    # fp8: 32 x 576 x 27 = 497,664 B -> 2,157 blocks, 69,024 tokens
    r = cap(LITE, cc=B200)
    assert figures(r) == (32, 1078, 34_496)
    assert r.notes[0] == (
        "MLA attention backend FLASHINFER_MLA (vLLM 0.33's first valid MLA backend on compute "
        "capability 10.0) stores auto (bf16) latent rows (576 values, 1,152 B a token), sets block size 32"
    )
    assert figures(cap(LITE, FP8, cc=B200)) == (32, 2157, 69_024)
    # V3 bf16: 32 x 1,152 x 61 = 2,248,704 B -> 477 blocks, 15,264 tokens; fp8: 1,124,352 B -> 954, 30,528
    assert figures(cap(V3, cc=B200)) == (32, 477, 15_264)
    assert figures(cap(V3, FP8, cc=B200)) == (32, 954, 30_528)
    # Kimi-K2 (64 heads, the same 576-value latent and qk_nope 128): the same choice as V3
    assert figures(cap(KIMI, cc=B200)) == (32, 477, 15_264)


def test_mi300x_and_sm120_take_triton_mla_and_16():
    # ROCm without VLLM_ROCM_USE_AITER: TRITON_MLA only; 12.x: TRITON_MLA first. MultipleOf(16) -> 16.
    # V2-Lite bf16 2,157 blocks as on Hopper; fp8: 16 x 576 x 27 = 248,832 B -> 1 GiB // 248,832 = 4,315
    r = cap(LITE, vendor="amd", cc=None)
    assert figures(r) == (16, 2157, 34_512)
    assert "TRITON_MLA (vLLM 0.33's first valid MLA backend on ROCm (VLLM_ROCM_USE_AITER unset))" in r.notes[0]
    assert figures(cap(LITE, FP8, vendor="amd", cc=None)) == (16, 4315, 69_040)
    assert figures(cap(V3, vendor="amd", cc=None)) == (16, 954, 15_264)
    assert figures(cap(LITE, cc=RTX5090)) == (16, 2157, 34_512)


def test_no_gpu_assumes_hopper_and_says_so():
    r = cap(LITE, cc=None, vendor=None)
    assert r.block_size == 16
    assert r.notes[0] == (
        "MLA attention backend FLASH_ATTN_MLA (vLLM 0.33's first valid MLA backend on compute "
        "capability 9.0 (Hopper), assumed: no NVIDIA GPU (compute capability) or attention backend "
        "given) stores auto (bf16) latent rows (576 values, 1,152 B a token), sets block size 16"
    )


def test_011_keeps_its_forced_blocks():
    # the issue's figure stays 0.11's: FlashMLA forces 64 on Hopper: 64 x 1,152 x 27 = 1,990,656 B;
    # 1 GiB // 1,990,656 = 539 blocks = 34,496 tokens; CUTLASS MLA 128 on Blackwell: // 3,981,312 = 269
    assert figures(cap(LITE, version="0.11")) == (64, 539, 34_496)
    assert figures(cap(LITE, cc=B200, version="0.11")) == (128, 269, 34_432)


# ----- Llama: non-MLA backends all prefer 16 --------------------------------------------------


def test_llama_keeps_16_on_hopper_and_blackwell():
    # FLASH_ATTN (9.x, MultipleOf(16)) and FLASHINFER (10.x, [16, 32, 64]) both support 16, so
    # get_preferred_block_size(16) = 16: 16 x 4,096 x 32 = 2,097,152 B per block; 1 GiB // that = 512
    # blocks = 8,192 tokens; no backend note (nothing changes the size)
    for cc in (H100, B200):
        r = cap(LLAMA, cc=cc)
        assert figures(r) == (16, 512, 8192) and r.notes == []
    # a --block-size given stands when a backend takes it: 32 -> 1 GiB // 4,194,304 = 256 blocks
    assert figures(cap(LLAMA, cc=B200, block_size=32)) == (32, 256, 8192)


def test_a_block_size_no_cuda_backend_takes_is_refused():
    # FLASH_ATTN / TRITON_ATTN / FLEX_ATTENTION take multiples of 16, FLASHINFER 16, 32, 64 (...):
    # --block-size 8 finds no valid backend in 0.33 (get_attn_backend_cls: "No valid attention backend found")
    with pytest.raises(KvcalcError, match="vLLM 0.33 finds no valid attention backend for block size 8 on CUDA") as e:
        cap(LLAMA, block_size=8)
    assert e.value.field == "block_size"
    # 0.11 and ROCm take it: 8 x 4,096 x 32 = 1,048,576 B -> 1,024 blocks
    assert cap(LLAMA, block_size=8, version="0.11").num_gpu_blocks == 1024
    assert cap(LLAMA, block_size=8, vendor="amd", cc=None).num_gpu_blocks == 1024


# ----- a --block-size given, a backend given ------------------------------------------------------


def test_a_block_size_given_is_honoured_and_warns_what_it_precluded():
    # B200, --block-size 16: FLASHINFER_MLA ([32, 64]) and CUTLASS_MLA ([128]) fail on the block size
    # alone, TOKENSPEED_MLA on the dtype too (fp8 only), FLASH_ATTN_MLA and FLASHMLA on the GPU:
    # TRITON_MLA takes 16, and vLLM warns about the two the block size alone precluded
    r = cap(LITE, cc=B200, block_size=16)
    assert figures(r) == (16, 2157, 34_512)
    assert r.notes[0].startswith(
        "MLA attention backend TRITON_MLA (vLLM 0.33's first valid MLA backend on compute "
        "capability 10.0; passed over: FLASHINFER_MLA (block_size not supported); "
    )
    assert r.notes[0].endswith(
        "keeps the --block-size 16 given. vLLM warns: --block-size 16 precluded higher-priority "
        "backend(s) FLASHINFER_MLA, CUTLASS_MLA. Using TRITON_MLA instead, which may result in "
        "reduced performance. Consider removing --block-size to auto-select the optimal block "
        "size."
    )
    # H100 bf16, --block-size 64: FLASH_ATTN_MLA takes it (a multiple of 16): 64 x 1,152 x 27 -> 539 blocks
    r = cap(LITE, block_size=64)
    assert figures(r) == (64, 539, 34_496) and "FLASH_ATTN_MLA" in r.notes[0] and "warns" not in r.notes[0]
    # H100 fp8, --block-size 128: FLASHMLA ([64]: 128 is a multiple) -> 128 x 576 x 27 = 1,990,656 B -> 539
    assert figures(cap(LITE, FP8, block_size=128)) == (128, 539, 68_992)
    # H100 fp8, --block-size 16: FLASHMLA precluded by the block size alone -> TRITON_MLA with 16
    r = cap(LITE, FP8, block_size=16)
    assert r.block_size == 16 and "precluded higher-priority backend(s) FLASHMLA. Using TRITON_MLA" in r.notes[0]


def test_no_valid_mla_backend_is_refused():
    # --block-size 8: no MLA backend on Hopper takes it (MultipleOf(16), [64], 10.x only, MultipleOf(16))
    with pytest.raises(
        KvcalcError,
        match="vLLM 0.33 finds no valid MLA attention backend on compute capability 9.0 "
        "for kv_cache_dtype auto, block_size 8: FLASH_ATTN_MLA: block_size not "
        "supported; FLASHMLA: block_size not supported;",
    ):
        cap(LITE, block_size=8)
    # fp8_e5m2: FLASHMLA and TRITON_MLA list fp8 / fp8_e4m3 only
    with pytest.raises(KvcalcError, match="for kv_cache_dtype fp8_e5m2, block_size None"):
        cap(LITE, kv_format("fp8_e5m2"))
    # int8_per_token_head: no MLA backend lists it
    with pytest.raises(KvcalcError, match="for kv_cache_dtype int8_per_token_head"):
        cap(LITE, kv_format("int8"), per_token_head_scales=True)


def test_a_backend_given_is_checked_alone():
    # get_attn_backend_cls: the selected backend is validated alone and refused when invalid
    with pytest.raises(
        KvcalcError,
        match=r"vLLM 0.33: Selected backend CUTLASS_MLA is not valid for this "
        r"configuration. Reason: \['compute capability not supported'\]",
    ):
        cap(LITE, attention_backend="cutlass_mla")
    with pytest.raises(KvcalcError, match="FlashMLA Dense is only supported on Hopper devices."):
        cap(LITE, cc=B200, attention_backend="FLASHMLA")
    # CUTLASS_MLA on Blackwell: its preferred block, 128: 128 x 1,152 x 27 = 3,981,312 B -> 269 blocks
    r = cap(LITE, cc=B200, attention_backend="CUTLASS_MLA")
    assert figures(r) == (128, 269, 34_432)
    assert r.notes[0] == (
        "MLA attention backend CUTLASS_MLA (the attention backend given) stores auto (bf16) latent rows (576 values, 1,152 B a token), sets block size 128"
    )
    # TRITON_MLA on Hopper with --block-size 128: kept
    assert cap(LITE, attention_backend="TRITON_MLA", block_size=128).block_size == 128


def test_flashinfer_mla_needs_qk_nope_64_128_or_192():
    # a DeepSeek-like model with qk_nope_head_dim 96 on a B200: FLASHINFER_MLA refuses it, TOKENSPEED_MLA
    # takes fp8 only, so CUTLASS_MLA ([128]) is chosen: 128 x 1,152 x 27 = 3,981,312 B -> 269 blocks
    odd = LITE.model_copy(update={"qk_nope_head_dim": 96})
    r = cap(odd, cc=B200)
    assert figures(r) == (128, 269, 34_432)
    assert (
        "FLASHINFER_MLA (FlashInfer MLA kernel requires qk_nope_head_dim in [64, 128, 192], but got 96)" in r.notes[0]
    )
    # fp8: TOKENSPEED_MLA needs DeepSeek-R1's dims (128, 64, 128) too: CUTLASS_MLA again
    assert cap(odd, FP8, cc=B200).block_size == 128


def test_mla_backend_reasons_are_vllms_words():
    assert v0_33_mla.mla_backend_priorities("9.0") == ("FLASH_ATTN_MLA", "FLASHMLA", "FLASHINFER_MLA", "TRITON_MLA")
    assert v0_33_mla.mla_backend_priorities("10.3")[:3] == ("FLASHINFER_MLA", "TOKENSPEED_MLA", "CUTLASS_MLA")
    assert v0_33_mla.mla_backend_priorities("8.9") == v0_33_mla.mla_backend_priorities("9.0")
    assert v0_33_mla.mla_backend_reasons("FLASH_ATTN_MLA", LITE, "fp8", 8, "10.0") == [
        "kv_cache_dtype not supported",
        "block_size not supported",
        "compute capability not supported",
        "FlashAttention MLA not supported on this device",
    ]
    assert v0_33_mla.MLA_BACKENDS["FLASHMLA"].preferred_block_size() == 64
    assert v0_33_mla.MLA_BACKENDS["TRITON_MLA"].preferred_block_size() == 16
