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
    ("minimax-m3", "llama_kv_cache_msa", 60, 57, 61_440 * 32_768, 61_440 * 32_768, 14_592 * 32_768,
     14_592 * 32_768),
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


@pytest.mark.parametrize("name", ["deepseek-v4-flash", "mimo-v2-flash", "kimi-k3"])
def test_caches_not_modelled_yet_are_refused(name):
    with pytest.raises(KvcalcError, match="llama.cpp profile does not model"):
        llamacpp.allocate(load_model(name), 4096, F16, F16, options=LlamacppOptions())
