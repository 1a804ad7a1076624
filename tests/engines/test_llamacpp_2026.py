"""llama.cpp 0c1e570 on the 2026 configs (issue 19 item 2): the architectures it has and kvcalc
sizes, and the one it lacks refused in its own words. Rules: docs/engine-rules-2026.md (llama.cpp
section: `src/llama-arch.cpp` 39-156, `llama_model::create_memory` `src/llama-model.cpp` 2352-2760).
"""

from __future__ import annotations

import pytest

from kvcalc.engines import llamacpp
from kvcalc.engines.llamacpp import LlamacppOptions
from kvcalc.errors import KvcalcError
from kvcalc.formats import kv_format
from kvcalc.load.models import load_model

F16 = kv_format("fp16")


def test_gemma4_iswa_per_layer_rows():
    """Gemma-4-26B-A4B, llama-server defaults (4 slots, one unified stream), --ctx-size 32768, f16:
    non-SWA cache 32,768 cells x 5 global layers x 2 KV heads x 512 x 2 B = 335,544,320 B of K
    (320.00 MiB; V the same: K = V layers allocate both rows); SWA cache 4 x 1,024 + 512 = 4,608
    cells (a multiple of 256) x 25 layers x 8 x 256 x 2 B = 471,859,200 B of K (450.00 MiB)."""
    r = llamacpp.allocate(load_model("gemma-4-26b-a4b"), 32_768, F16, F16, options=LlamacppOptions())
    assert r.engine_kv_bytes == 2 * (335_544_320 + 471_859_200)  # 1,614,807,040 B
    assert "llama_kv_cache_iswa: creating     SWA KV cache, size = 4608 cells" in r.log_lines


def test_step_3_7_has_no_llamacpp_architecture():
    with pytest.raises(KvcalcError) as e:
        llamacpp.allocate(load_model("step-3.7-flash"), 4096, F16, F16, options=LlamacppOptions())
    assert "llama.cpp 0c1e570 has no architecture for it" in str(e.value)
    assert "Model Step3p7FlashForCausalLM is not supported" in str(e.value)


# llama-server defaults (4 slots, one unified stream), --ctx-size 32768, f16 (configs: tests' bundled YAMLs of
# shared/fixtures/hf-configs-2026). Classes: llama.cpp 0c1e570 src/llama-kv-cache-dsa.cpp 14-53, -msa.cpp 13-50.
INDEXER_CASES = [
    # DeepSeek-V3.2 (deepseek32): 61 layers x 576-value latent x 2 B = 70,272 B a cell, no V (MLA);
    # indexer: 61 x 1 head x 128 x 2 B = 15,616 B, no V; (70,272 + 15,616) x 32,768 = 2,814,377,984 B
    ("deepseek-v3.2", "llama_kv_cache_dsa", 61, 61, 70_272 * 32_768, 0, 15_616 * 32_768, 0),
    # GLM-5.2 (glm-dsa): 78 x 1,152 = 89,856 B latent; indexer only on its 21 indexer_types "full"
    # layers: 21 x 256 = 5,376 B; (89,856 + 5,376) x 32,768 = 3,120,562,176 B
    ("glm-5.2", "llama_kv_cache_dsa", 78, 21, 89_856 * 32_768, 0, 5_376 * 32_768, 0),
    # MiniMax-M3 (minimax-m3): 60 layers x 4 KV heads x 128 x 2 B = 61,440 B K (V the same); indexer on
    # layers >= n_layer_dense_lead (3): 57 x 128 x 2 B = 14,592 B K and, the hparams copy not being MLA,
    # 57 x 1 head x value_length 128 x 2 B = 14,592 B V; 152,064 B a cell, 4,982,833,152 B
    ("minimax-m3", "llama_kv_cache_msa", 60, 57, 61_440 * 32_768, 61_440 * 32_768, 14_592 * 32_768, 14_592 * 32_768),
]


@pytest.mark.parametrize(("name", "cls", "n_main", "n_idx", "k_main", "v_main", "k_idx", "v_idx"), INDEXER_CASES)
def test_indexer_caches(name, cls, n_main, n_idx, k_main, v_main, k_idx, v_idx):
    r = llamacpp.allocate(load_model(name), 32_768, F16, F16, options=LlamacppOptions())
    assert (r.k_bytes, r.v_bytes) == (k_main + k_idx, v_main + v_idx)
    mib = [x / 2**20 for x in (k_main, v_main, k_idx, v_idx)]
    assert r.log_lines == [
        f"{cls}: creating main KV cache, size = 32768 cells",
        f"llama_kv_cache:      CUDA0 KV buffer size = {mib[0] + mib[1]:8.2f} MiB",
        f"llama_kv_cache: size = {mib[0] + mib[1]:7.2f} MiB ( 32768 cells, {n_main:3d} layers,  4/1 seqs), "
        f"K (f16): {mib[0]:7.2f} MiB, V (f16): {mib[1]:7.2f} MiB",
        f"{cls}: creating indexer KV cache, size = 32768 cells",
        f"llama_kv_cache:      CUDA0 KV buffer size = {mib[2] + mib[3]:8.2f} MiB",
        f"llama_kv_cache: size = {mib[2] + mib[3]:7.2f} MiB ( 32768 cells, {n_idx:3d} layers,  4/1 seqs), "
        f"K (f16): {mib[2]:7.2f} MiB, V (f16): {mib[3]:7.2f} MiB",
    ]
    assert r.devices[0].n_layers == n_main


def test_dsa_indexer_row_is_ctk_type_and_streams_split():
    """DeepSeek-V3.2, -np 2 (two streams of GGML_PAD(32,768 / 2, 256) = 16,384 cells), -ctk -ctv q8_0:
    latent 576 values = 18 blocks of 34 B = 612 B, indexer 128 values = 4 x 34 = 136 B;
    61 x (612 + 136) x 16,384 x 2 = 1,495,138,304 B."""
    q8 = kv_format("q8_0")
    r = llamacpp.allocate(load_model("deepseek-v3.2"), 32_768, q8, q8, options=LlamacppOptions(parallel=2))
    assert r.engine_kv_bytes == 61 * (612 + 136) * 16_384 * 2 == 1_495_138_304
    assert "llama_kv_cache_dsa: creating indexer KV cache, size = 16384 cells" in r.log_lines


def test_dsa_refuses_different_k_and_v_types():
    with pytest.raises(KvcalcError, match=r"model does not support different K \(q8_0\) and V \(f16\)"):
        llamacpp.allocate(load_model("glm-5.2"), 4096, kv_format("q8_0"), F16, options=LlamacppOptions())


# XiaomiMiMo/MiMo-V2-Flash (configs/models/mimo-v2-flash.yaml; llama.cpp `mimo2`, conversion/mimo.py 143-175):
# 9 full layers x 4 KV heads, 39 sliding x 8 (swa_num_key_value_heads), K 192 / V 128; n_swa = the config's
# sliding_window 128 (not the 129 tokens the layers attend); MTP layers filtered out of the main context.
# Per cell: full K 9 x 4 x 192 x 2 = 13,824 B, V 9 x 4 x 128 x 2 = 9,216 B; SWA K 39 x 8 x 192 x 2 = 119,808 B,
# V 39 x 8 x 128 x 2 = 79,872 B. -fa off pads every V row to the widest, 8 x 128 = 1,024 values (2,048 B):
# full V 9 x 2,048 = 18,432 B.
MIMO_CASES = [
    # llama-server: 4 slots, unified; SWA cells GGML_PAD(min(32,768, 128 x 4 + 512), 256) = 1,024
    # 32,768 x (13,824 + 9,216) + 1,024 x (119,808 + 79,872) = 754,974,720 + 204,472,320 = 959,447,040
    ({}, 1_024, 32_768 * 13_824 + 1_024 * 119_808, 32_768 * 9_216 + 1_024 * 79_872, None),
    # llama-cli, -fa off: SWA cells GGML_PAD(128 + 512, 256) = 768; V padded
    # K 32,768 x 13,824 + 768 x 119,808 = 544,997,376; V 32,768 x 18,432 + 768 x 79,872 = 665,321,472
    (
        {"tool": "llama-cli", "flash_attn": "off"},
        768,
        32_768 * 13_824 + 768 * 119_808,
        32_768 * 18_432 + 768 * 79_872,
        1_024,
    ),
]


@pytest.mark.parametrize(("opts", "swa_cells", "k_bytes", "v_bytes", "pad_to"), MIMO_CASES)
def test_mimo_v2_iswa(opts, swa_cells, k_bytes, v_bytes, pad_to):
    r = llamacpp.allocate(load_model("mimo-v2-flash"), 32_768, F16, F16, options=LlamacppOptions(**opts))
    assert (r.k_bytes, r.v_bytes) == (k_bytes, v_bytes)
    assert f"llama_kv_cache_iswa: creating     SWA KV cache, size = {swa_cells} cells" in r.log_lines
    pad = (
        "llama_kv_cache: the V embeddings have different sizes across layers and FA is not enabled - padding V "
        f"cache to {pad_to}"
    )
    assert r.log_lines.count(pad) == (2 if pad_to else 0)


def test_gemma4_fa_off_pads_the_global_v_rows():
    """Gemma-4-26B-A4B, llama-cli -fa off: the 5 global layers' V (2 x 512 = 1,024 values) is stored as the
    sliding layers' 8 x 256 = 2,048 (n_embd_v_gqa_max): 32,768 x 5 x 2,048 x 2 B = 671,088,640 B of V there,
    K 32,768 x 5 x 1,024 x 2 = 335,544,320; SWA cells GGML_PAD(1,024 + 512, 256) = 1,536, K = V =
    1,536 x 25 x 2,048 x 2 B = 157,286,400."""
    r = llamacpp.allocate(
        load_model("gemma-4-26b-a4b"), 32_768, F16, F16, options=LlamacppOptions(tool="llama-cli", flash_attn="off")
    )
    assert (r.k_bytes, r.v_bytes) == (335_544_320 + 157_286_400, 671_088_640 + 157_286_400)


def test_mimo_v2_without_sliding_window_is_refused(tmp_path):
    import json
    from pathlib import Path

    cfg = json.loads(
        (Path(__file__).parents[1] / "data" / "hf-configs-2026" / "XiaomiMiMo--MiMo-V2-Flash.json").read_text()
    )
    del cfg["sliding_window"]
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(KvcalcError, match="writes the config's sliding_window as the GGUF's n_swa"):
        llamacpp.allocate(load_model(str(tmp_path / "config.json")), 4096, F16, F16, options=LlamacppOptions())


def test_kimi_k3_mla_latent_and_kda_state():
    """moonshotai/Kimi-K3 (configs/models/kimi-k3.yaml; llama.cpp `kimi-k3`, llama_memory_hybrid), llama-cli,
    32,768 cells, f16: the 24 full-attention layers cache the 576-value latent as K, no V:
    24 x 576 x 2 B x 32,768 = 905,969,664 B (864.00 MiB). The 69 KDA layers keep 1 cell of f32 state
    (src/llama-hparams.cpp 219-247, n_head() = 96, kda head_dim 128, conv kernel 4):
    R = 3 x 3 x 96 x 128 = 110,592 values, S = 128 x 128 x 96 = 1,572,864 values;
    69 x (110,592 + 1,572,864) x 4 B = 464,633,856 B (R 30,523,392 = 29.11 MiB, S 434,110,464 = 414.00 MiB)."""
    r = llamacpp.allocate(load_model("kimi-k3"), 32_768, F16, F16, options=LlamacppOptions(tool="llama-cli"))
    assert (r.k_bytes, r.v_bytes, r.engine_state_bytes) == (905_969_664, 0, 464_633_856)
    assert r.log_lines == [
        "llama_kv_cache:      CUDA0 KV buffer size =   864.00 MiB",
        "llama_kv_cache: size =  864.00 MiB ( 32768 cells,  24 layers,  1/1 seqs), K (f16):  864.00 MiB, "
        "V (f16):    0.00 MiB",
        "llama_memory_recurrent:      CUDA0 RS buffer size =   443.11 MiB",
        "llama_memory_recurrent: size =  443.11 MiB (     1 cells,  93 layers,  1 seqs  0 rs_seq), R (f32):   29.11 "
        "MiB, S (f32):  414.00 MiB, P (f32):    0.00 MiB",
    ]


def test_kimi_k3_fa_off_warns_of_v_padding_but_keeps_no_v():
    """Kimi-K3, llama-cli -fa off: the GGUF's head_count_kv is 0 on the 69 KDA layers and 1 on the MLA
    ones (V width 1 x kv_lora_rank = 512), so llama.cpp 0c1e570 warns before the KV buffers
    (src/llama-kv-cache.cpp 158-161, seen in the tests/oracle grid: kimi-k3 -fa off); the latent cache
    keeps no V, so the bytes are those of -fa on."""
    opts = LlamacppOptions(tool="llama-cli", flash_attn="off")
    r = llamacpp.allocate(load_model("kimi-k3"), 32_768, F16, F16, options=opts)
    assert (r.k_bytes, r.v_bytes, r.engine_state_bytes) == (905_969_664, 0, 464_633_856)
    assert r.log_lines[0] == (
        "llama_kv_cache: the V embeddings have different sizes across layers and FA is not enabled - "
        "padding V cache to 512"
    )


# deepseek-ai/DeepSeek-V4-Flash (configs/models/deepseek-v4-flash.yaml; llama.cpp `deepseek4`, llama_kv_cache_dsv4,
# src/llama-kv-cache-dsv4.cpp 1210-1335): 43 sliding layers of one 512-value K = V row (1,024 B in f16), 21 with
# compress ratio 4 (CSA + indexer), 20 with 128 (HCA); one stream per sequence (never unified).
# llama-cli (1 sequence), 32,768 cells, n_ubatch 512:
#   raw SWA: GGML_PAD(min(32,768, 128 + 512), 256) = 768 cells x 43 x 1,024 B = 33,816,576 B (32.25 MiB)
#   CSA: cdiv(32,768, 4) = 8,192 cells x 21 x 1,024 = 176,160,768 (168.00 MiB)
#   HCA: cdiv(32,768, 128) = 256 cells x 20 x 1,024 = 5,242,880 (5.00 MiB)
#   indexer: 8,192 cells x 21 x 128 x 2 B = 44,040,192 (42.00 MiB); K total 259,260,416 B, V 0
#   compressor states, f32, kv + score: CSA 21 x 2 x 1,024 x 8 x 4 = 1,376,256; HCA 20 x 2 x 512 x 128 x 4 =
#   10,485,760; indexer 21 x 2 x 256 x 8 x 4 = 344,064; 12,206,080 B a sequence
# llama-server (4 slots, kv_unified): each of the 4 streams holds n_ctx_seq = 32,768 cells: K x 4 = 1,037,041,664
# (the raw SWA cache stays 768 cells a stream: not unified, n_swa x 1), states x 4 = 48,824,320.
DSV4_CASES = [({"tool": "llama-cli"}, 1, 259_260_416, 12_206_080), ({}, 4, 1_037_041_664, 48_824_320)]


@pytest.mark.parametrize(("opts", "streams", "k_bytes", "state_bytes"), DSV4_CASES)
def test_deepseek_v4_dsv4_cache(opts, streams, k_bytes, state_bytes):
    r = llamacpp.allocate(load_model("deepseek-v4-flash"), 32_768, F16, F16, options=LlamacppOptions(**opts))
    assert (r.k_bytes, r.v_bytes, r.engine_state_bytes) == (k_bytes, 0, state_bytes)
    assert r.k_bytes == streams * (33_816_576 + 176_160_768 + 5_242_880 + 44_040_192)
    s = f"{streams}/{streams} seqs"
    assert r.log_lines[:4] == [
        "llama_kv_cache_dsv4: creating DSV4 raw KV cache",
        "llama_kv_cache_iswa: creating non-SWA KV cache, size = 32768 cells",
        f"llama_kv_cache: size =    0.00 MiB ( 32768 cells,   0 layers,  {s}), K (f16):    0.00 MiB, V (f16):    0.00 "
        "MiB",
        "llama_kv_cache_iswa: creating     SWA KV cache, size = 768 cells",
    ]
    assert "llama_kv_cache_dsv4: creating DSV4 CSA compressed KV cache, size = 8192 cells" in r.log_lines
    assert not any("no SWA cache" in n for n in r.notes)  # the raw iswa cache is window-sized
    assert (
        f"llama_dsv4_comp_state: hca ratio = 128, state = 128 x 512, streams = {streams}, rs_seq = 0, layers = 20, "
        f"size = {10 * streams:7.2f} MiB"
    ) in r.log_lines


def test_deepseek_v4_refuses_different_k_and_v_types():
    """src/llama-context.cpp 3835: `model->hparams.is_mla() || model->arch == LLM_ARCH_DEEPSEEK4`."""
    with pytest.raises(KvcalcError, match=r"different K \(q8_0\) and V \(f16\) cache types.*K = V rows as K only"):
        llamacpp.allocate(load_model("deepseek-v4-flash"), 4096, kv_format("q8_0"), F16, options=LlamacppOptions())


def test_deepseek_v4_nvfp4_checkpoint_has_the_same_cache():
    """nvidia/DeepSeek-V4-Flash-NVFP4: only the expert weights differ; llama-cli, 32,768: 259,260,416 B."""
    from pathlib import Path

    p = Path(__file__).parents[1] / "data" / "hf-configs-2026" / "nvidia--DeepSeek-V4-Flash-NVFP4.json"
    r = llamacpp.allocate(load_model(str(p)), 32_768, F16, F16, options=LlamacppOptions(tool="llama-cli"))
    assert (r.k_bytes, r.engine_state_bytes) == (259_260_416, 12_206_080)
