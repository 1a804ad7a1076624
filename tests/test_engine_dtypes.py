"""The engines' KV-cache dtypes (`kvcalc/engine_dtypes.py`): vLLM 0.33's `CacheDType` rows and
their per-row bytes, TurboQuant's boundary layers, the skip-layer block alignment, SGLang
0.5.23's `--kv-cache-dtype` choices, and the ideal engine's nvfp4 figure.

Sources (the vllm==0.33.0 and sglang==0.5.23 wheels): vllm/config/cache.py `CacheDType`;
vllm/utils/torch_utils.py `nvfp4_kv_cache_full_dim` ("head_size // 2 + head_size // 16");
vllm/v1/attention/backends/flashinfer.py `FlashInferBackend.customize_spec` (num_head_slots
= 2 x num_kv_heads); triton_attn.py `TritonAttentionBackend.customize_spec` ("(hs_k + hs_v) x
dtype + 2 x scale_bytes", int4 halves the head sizes); mla_attention.py
`{"fp8_ds_mla": 656, "nvfp4_ds_mla": 352}` and `MLACommonBackend.customize_spec`;
flashmla_sparse.py's layout note (656 = 512 + 16 + 128; 352 = 256 + 64 + 32);
turboquant/config.py `TQ_PRESETS`, `slot_size_aligned`, `get_boundary_skip_layers`;
ultraquant/format.py `slot_size` (D=128 -> 136 B/slot); rocm_octave.py `OctaveFormat.slot_bytes`;
platforms/interface.py `_align_heterogeneous_kv_block_size`; sglang
srt/arg_groups/fields/model.py `kv_cache_dtype` choices.
"""

from __future__ import annotations

import json

import pytest

from kvcalc import engine_dtypes as ed
from kvcalc.errors import KvcalcError
from kvcalc.formats import kv_format, weight_format
from tests.oracle.vllm_grid_cases import CACHE_DTYPES

#: vllm/config/cache.py CacheDType, in its order (vllm 0.33.0): the grid oracle's copy
VLLM_033 = list(CACHE_DTYPES)


def test_every_vllm_033_cache_dtype_has_a_row():
    assert list(ed.VLLM_033_CACHE_DTYPES) == VLLM_033
    for name, row in ed.VLLM_033_CACHE_DTYPES.items():
        assert row.name == name and row.source and row.attention and row.gpus
    # KVQuantMode members (kv_cache_interface.py get_kv_quant_mode): nvfp4_4over6 is NVFP4 by prefix
    assert ed.VLLM_033_CACHE_DTYPES["nvfp4_4over6"].quant_mode == "NVFP4"
    assert ed.VLLM_033_CACHE_DTYPES["nvfp4_ds_mla"].quant_mode == "NVFP4_DS_MLA"
    assert ed.VLLM_033_CACHE_DTYPES["fp8_ds_mla"].quant_mode == "FP8_PER_TENSOR"
    # the presets that keep boundary layers at the model's dtype (engine/arg_utils.py: turboquant_* or ultraquant_4bit)
    assert [n for n, r in ed.VLLM_033_CACHE_DTYPES.items() if r.skips_boundary_layers] == [
        "turboquant_k8v4",
        "turboquant_4bit_nc",
        "turboquant_k3v4_nc",
        "turboquant_3bit_nc",
        "ultraquant_4bit",
    ]
    # nvfp4 runs on FlashInfer only (flashinfer.py supported_kv_cache_dtypes)
    assert ed.VLLM_033_CACHE_DTYPES["nvfp4"].backends == ("FLASHINFER",)


@pytest.mark.parametrize(
    "name, head_size, expected",
    [
        # plain: (head_size + head_size_v) x element bytes; auto = the model's bf16: 256 x 2
        ("auto", 128, 512),
        ("bfloat16", 128, 512),
        ("float16", 64, 256),
        ("fp8", 128, 256),
        ("fp8_e5m2", 128, 256),
        ("fp8_inc", 128, 256),
        # per_token_head (TRITON_ATTN): values + 2 x 4 B fp32 scales; int4 halves: 64 + 64 + 8
        ("int8_per_token_head", 128, 264),
        ("fp8_per_token_head", 128, 264),
        ("int4_per_token_head", 128, 136),
        # nvfp4 (FlashInfer): 2 slots x (128 / 2 + 128 / 16) = 2 x 72; head 64: 2 x (32 + 4) = 72
        ("nvfp4", 128, 144),
        ("nvfp4_4over6", 128, 144),
        ("nvfp4", 64, 72),
        # TurboQuant slot_size_aligned, head 128: key fp8 128 | 128 x 4 / 8 + 2 = 66 | 128 x 3 / 8 + 2 = 50;
        # value 128 x 4 / 8 + 4 = 68 | 128 x 3 / 8 + 4 = 52
        ("turboquant_k8v4", 128, 196),
        ("turboquant_4bit_nc", 128, 134),
        ("turboquant_k3v4_nc", 128, 118),
        ("turboquant_3bit_nc", 128, 102),
        # head 96: k8v4 96 + (48 + 4) = 148; 3bit_nc (36 + 2) + (36 + 4) = 78
        ("turboquant_k8v4", 96, 148),
        ("turboquant_3bit_nc", 96, 78),
        # UltraQuant slot_size: per side D / 2 codes + D / 32 e8m0 scales: 2 x (64 + 4) = 136 (format.py: "D=128 -> 136")
        ("ultraquant_4bit", 128, 136),
        ("ultraquant_4bit", 256, 272),
        # Octave (rope_dim = head_size): k3v4 128 x 4 / 8 + 0 + 128 x 4 / 8 + 2 x (2 + 1) = 134 -> 136 (8 B);
        # k3v3 64 + 48 + 6 = 118 -> 120; k3v3_compact 128 x 3 / 8 + 48 + 2 x 2 = 100 (4 B)
        ("octave_k3v4", 128, 136),
        ("octave_k3v3", 128, 120),
        ("octave_k3v3_compact", 128, 100),
    ],
)
def test_vllm_033_head_bytes(name, head_size, expected):
    assert ed.vllm_033_head_bytes(name, head_size) == expected


def test_llama_8b_nvfp4_per_token():
    # Llama-3.1-8B (meta-llama/Llama-3.1-8B config.json: 32 layers, 8 KV heads, head_dim 128):
    # nvfp4 2 x 32 x 8 x (64 + 8) = 36,864 B a token; bf16 32 x 8 x 512 = 131,072 B
    assert 32 * 8 * ed.vllm_033_head_bytes("nvfp4", 128) == 36_864
    assert 32 * 8 * ed.vllm_033_head_bytes("auto", 128) == 131_072
    # the storage format gives the same per head row: 128 / 16 x 9 B = 72 = 64 + 8
    assert kv_format("nvfp4").bytes_for(128) == 72
    # Octave with partial rope: head 128, rope 64: 32 + 64 x 3 / 8 = 56, + 64 + 6 = 126 -> 128
    assert ed.vllm_033_head_bytes("octave_k3v4", 128, rope_dim=64) == 128
    # a differing V head size: plain counts each side; auto at fp32 model dtype bytes 4: (128 + 64) x 4
    assert ed.vllm_033_head_bytes("auto", 128, 64, model_dtype_bytes=4) == 768
    assert ed.vllm_033_head_bytes("int4_per_token_head", 128, 64) == 64 + 32 + 8


@pytest.mark.parametrize(
    "name, expected",
    [
        # DeepSeek-V3.2 geometry, kv_lora_rank 512 + qk_rope_head_dim 64 = 576
        ("auto", 1_152),
        ("bfloat16", 1_152),
        ("fp8", 576),
        ("fp8_per_token_head", 584),
        ("int8_per_token_head", 584),
        ("int4_per_token_head", 296),  # 288 + 8
        ("fp8_ds_mla", 656),  # 512 fp8 + 512 / 128 x 4 B + 64 x 2 B = 512 + 16 + 128
        ("nvfp4_ds_mla", 352),  # 512 / 2 e2m1 + 64 x 1 B fp8 rope + 512 / 16 x 1 B scales = 256 + 64 + 32
    ],
)
def test_vllm_033_mla_bytes(name, expected):
    assert ed.vllm_033_mla_bytes(name, 512, 64) == expected
    assert ed.DS_MLA_ROW_BYTES.get(name, expected) == expected  # mla_attention.py's own figures


@pytest.mark.parametrize(
    "call, message",
    [
        (
            lambda: ed.vllm_033_cache_dtype("fp4"),
            "vLLM 0.33 has no 'fp4' KV cache dtype; its --kv-cache-dtype accepts " + ", ".join(VLLM_033),
        ),
        (
            lambda: ed.vllm_033_head_bytes("nvfp4", 72),
            "vLLM 0.33 --kv-cache-dtype nvfp4: stores one fp8 scale per 16 values; head size 72 is not a multiple of 16",
        ),
        (
            lambda: ed.vllm_033_head_bytes("nvfp4", 128, 64),
            "vLLM 0.33 --kv-cache-dtype nvfp4: takes one head size for K and V (K 128, V 64)",
        ),
        (
            lambda: ed.vllm_033_head_bytes("fp8_ds_mla", 128),
            "vLLM 0.33 --kv-cache-dtype fp8_ds_mla: a sparse-MLA latent row (DeepSeek-V3.2), not a K/V head; "
            "use vllm_033_mla_bytes",
        ),
        (
            lambda: ed.vllm_033_mla_bytes("nvfp4", 512, 64),
            "vLLM 0.33 --kv-cache-dtype nvfp4: has no MLA backend (its backends: FLASHINFER)",
        ),
        (
            lambda: ed.vllm_033_mla_bytes("fp8_ds_mla", 256, 64),
            "vLLM 0.33 --kv-cache-dtype fp8_ds_mla: is a fixed 656 B row for kv_lora_rank 512 + rope 64, not 256 + 64",
        ),
        (
            lambda: ed.vllm_033_head_bytes("octave_k3v3_compact", 192),
            "vLLM 0.33 --kv-cache-dtype octave_k3v3_compact: needs head size and rope dims in multiples of 64 "
            "(compact: a power of two), got 192 and 192",
        ),
        (
            lambda: ed.vllm_033_head_bytes("ultraquant_4bit", 80),
            "vLLM 0.33 --kv-cache-dtype ultraquant_4bit: scales groups of 32 values; head size 80 is not a multiple of 32",
        ),
    ],
)
def test_vllm_033_refusals_name_the_version_and_what_it_accepts(call, message):
    with pytest.raises(KvcalcError) as e:
        call()
    assert str(e.value) == message
    assert e.value.field == "kv_dtype"


@pytest.mark.parametrize(
    "n_layers, hybrid, expected",
    [
        (32, False, (0, 1, 30, 31)),  # first 2 and last 2 of num_hidden_layers
        (3, False, (0, 2)),  # n = min(2, 3 // 2) = 1
        (1, False, ()),  # n = min(2, 0) = 0: range(0) | range(1, 1)
        (48, True, ()),  # hybrids: boundary protection off
    ],
)
def test_turboquant_skip_layers(n_layers, hybrid, expected):
    assert ed.turboquant_skip_layers(n_layers, hybrid=hybrid) == expected


def test_skip_layer_block_alignment():
    # Llama-3.1-8B with turboquant_k8v4: P = 8 heads x 196 = 1,568 B a token, skipped bf16 S = 8 x 512 =
    # 4,096 B; kernel block 16, block 16: required 4,096 x 16 = 65,536; block = 16 x cdiv(65,536, 16 x
    # 1,568 = 25,088) = 16 x 3 = 48; shared page 48 x 1,568 = 75,264 B
    assert ed.skip_layer_block_alignment(1_568, 4_096, 16, 16) == (48, 75_264)
    # a larger --block-size already covers it: 64 x 1,568 = 100,352 >= 65,536 -> block 64 stays
    assert ed.skip_layer_block_alignment(1_568, 4_096, 64, 16) == (64, 100_352)
    # equal pages: nothing moves
    assert ed.skip_layer_block_alignment(512, 512, 16, 16) == (16, 8_192)
    with pytest.raises(KvcalcError, match="below the quantized layer's"):
        ed.skip_layer_block_alignment(512, 256, 16, 16)


def test_sglang_0523_choices():
    # srt/arg_groups/fields/model.py kv_cache_dtype choices (sglang 0.5.23), in its order
    assert list(ed.SGLANG_0523_KV_CACHE_DTYPES) == [
        "auto",
        "fp8_e5m2",
        "fp8_e4m3",
        "mxfp8",
        "bf16",
        "bfloat16",
        "nvfp4",
        "fp4_mx_block16",
    ]
    for row in ed.SGLANG_0523_KV_CACHE_DTYPES.values():
        assert row.storage_format is None or kv_format(row.storage_format).name == row.storage_format


def test_nvfp4_is_both_a_kv_and_a_weight_format(cli):
    assert kv_format("nvfp4").kind == weight_format("nvfp4").kind == "both"
    with pytest.raises(KvcalcError, match="fp4_mx_block16 is a KV-cache format, not a weight format"):
        weight_format("fp4_mx_block16")
    # the ideal engine: Llama-3.1-8B at 8,192 tokens, 36,864 B a token x 8,192 = 301,989,888 B
    r = cli("estimate", "llama-3.1-8b", "--kv-dtype", "nvfp4", "-s", "8k", "-f", "json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert (d["kv_bytes_per_token"], d["kv_cache_bytes"]) == (36_864, 301_989_888)
