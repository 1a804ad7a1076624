"""kvcalc's legacy llama.cpp profile: the rules the legacy oracle run found (llama-cpp-python 0.3.8,
llama.cpp 7841fc7 of March 2025; docs/engine-oracles.md), each from its source line, each figure
llama.cpp 7841fc7 printed for the same setting in the oracle run."""

from __future__ import annotations

import pytest

from kvcalc.engines import llamacpp
from kvcalc.engines.llamacpp import LlamacppOptions
from kvcalc.errors import KvcalcError
from kvcalc.formats import kv_format
from kvcalc.load.models import load_model
from kvcalc.schema import ModelSpec

F16, Q8 = kv_format("f16"), kv_format("q8_0")
MiB = 2**20

#: state-spaces/mamba-130m-hf: 24 Mamba-1 layers, hidden 768, d_inner 2 x 768 = 1,536, d_state 16, d_conv 4
MAMBA_130M = ModelSpec(
    name="mamba-130m",
    n_layers=24,
    n_heads=1,
    n_kv_heads=1,
    head_dim=768,
    hidden_size=768,
    layer_pattern=["mamba"],
    mamba_d_state=16,
    mamba_d_conv=4,
    mamba_expand=2,
    max_position_embeddings=2048,
)


def test_the_size_line_is_llama_init_from_model_and_deepseek_cannot_shift():
    # src/llama.cpp 7841fc7: LLAMA_LOG_INFO("%s: KV self size  = ...", __func__) inside llama_init_from_model;
    # src/llama-kv-cache.cpp: cache.can_shift = !cache.recurrent && model.arch != LLM_ARCH_DEEPSEEK2.
    # DeepSeek-V2-Lite expanded at -c 4096, f16: K 16 heads x 192 x 2 B = 6,144 B, V 16 x 128 x 2 B = 4,096 B
    # per cell per layer; K = 27 x 6,144 x 4,096 = 679,477,248 B (648 MiB), V = 27 x 4,096 x 4,096 =
    # 452,984,832 B (432 MiB); 1,080 MiB in all.
    r = llamacpp.allocate(
        load_model("deepseek-v2-lite"), 4096, F16, F16, options=LlamacppOptions(version="legacy", n_gpu_layers=0)
    )
    assert r.log_lines == [
        "llama_kv_cache_init: kv_size = 4096, offload = 1, type_k = 'f16', type_v = 'f16', n_layer = 27, can_shift = 0",
        "llama_kv_cache_init:        CPU KV buffer size =  1080.00 MiB",
        "llama_init_from_model: KV self size  = 1080.00 MiB, K (f16):  648.00 MiB, V (f16):  432.00 MiB",
    ]
    assert (r.k_bytes, r.v_bytes) == (679_477_248, 452_984_832)
    # a llama keeps can_shift = 1
    r = llamacpp.allocate(load_model("llama-3.2-1b"), 4096, F16, F16, options=LlamacppOptions(version="legacy"))
    assert r.log_lines[0].endswith("n_layer = 16, can_shift = 1")


def test_flash_attention_is_forced_off_for_the_expanded_deepseek_cache():
    # src/llama.cpp 7841fc7 llama_init_from_model: `if (params.flash_attn && model->hparams.n_embd_head_k !=
    # model->hparams.n_embd_head_v) { LLAMA_LOG_WARN("%s: flash_attn requires n_embd_head_k == n_embd_head_v -
    # forcing off\n"); params.flash_attn = false; }` (K 128 + 64 = 192, V 128). Off, the context pads to 32
    # (llama_kv_cache_get_padding): -c 3000 -fa on is 3,008 cells (pad 32), not 3,072 (pad 256):
    # 27 layers x (6,144 + 4,096) B x 3,008 = 831,651,840 B.
    m = load_model("deepseek-v2-lite")
    r = llamacpp.allocate(m, 3000, F16, F16, options=LlamacppOptions(version="legacy", flash_attn=True))
    assert (r.n_cells, r.engine_kv_bytes) == (3008, 831_651_840)
    assert "flash_attn requires n_embd_head_k == n_embd_head_v - forcing off" in r.notes
    # a llama with -fa on keeps it: pad 256, 3,072 cells
    assert (
        llamacpp.allocate(
            load_model("llama-3.2-1b"), 3000, F16, F16, options=LlamacppOptions(version="legacy", flash_attn=True)
        ).n_cells
        == 3072
    )
    # and then "V cache quantization requires flash_attn" refuses a q8_0 V cache, -fa on or not
    with pytest.raises(KvcalcError, match="forcing off.*V cache quantization requires flash_attn") as e:
        llamacpp.allocate(m, 4096, Q8, Q8, options=LlamacppOptions(version="legacy", flash_attn=True))
    assert e.value.field == "v_dtype"


def test_mamba_keeps_its_state_in_the_kv_cache():
    # src/llama.cpp 7841fc7 llama_init_from_model: `if (llama_model_is_recurrent(model)) { kv_size =
    # std::max((uint32_t) 1, params.n_seq_max); type_k = GGML_TYPE_F32; type_v = GGML_TYPE_F32; }`;
    # src/llama-kv-cache.cpp: K row n_embd_k_gqa(i) + n_embd_k_s() = 0 + (d_conv - 1) x d_inner = 3 x 1,536,
    # V row n_embd_v_s() = d_state x d_inner = 16 x 1,536 (src/llama-hparams.cpp).
    # -np 4: K = 24 layers x 4 cells x 4,608 x 4 B = 1,769,472 B (1.69 MiB); V = 24 x 4 x 24,576 x 4 B =
    # 9,437,184 B (9.00 MiB); -ctk q8_0 is ignored (f32).
    r = llamacpp.allocate(
        MAMBA_130M, 1024, Q8, Q8, options=LlamacppOptions(version="legacy", parallel=4, flash_attn=True, n_gpu_layers=0)
    )
    assert r.log_lines == [
        "llama_kv_cache_init: kv_size = 4, offload = 1, type_k = 'f32', type_v = 'f32', n_layer = 24, can_shift = 0",
        "llama_kv_cache_init:        CPU KV buffer size =    10.69 MiB",
        "llama_init_from_model: KV self size  =   10.69 MiB, K (f32):    1.69 MiB, V (f32):    9.00 MiB",
    ]
    assert (r.k_bytes, r.v_bytes, r.n_cells) == (1_769_472, 9_437_184, 4)
    # one sequence: 442,368 B (0.42 MiB) + 2,359,296 B (2.25 MiB)
    r = llamacpp.allocate(MAMBA_130M, 0, F16, F16, options=LlamacppOptions(version="legacy"))
    assert (r.k_bytes, r.v_bytes, r.n_cells) == (442_368, 2_359_296, 1)


def test_a_quantized_type_that_does_not_divide_the_head_aborts_legacy():
    # src/llama.cpp 7841fc7 llama_init_from_model, -fa on or off:
    # GGML_ASSERT(hparams.n_embd_head_k % ggml_blck_size(type_k) == 0): Phi-2's heads of 80 are 2.5 q8_0
    # blocks of 32, so llama.cpp aborts (current allocates it with -fa off: rows over all heads, 2,560 values)
    phi2 = ModelSpec(name="phi-2", n_layers=32, n_heads=32, head_dim=80, hidden_size=2560)
    with pytest.raises(KvcalcError, match=r"GGML_ASSERT\(hparams.n_embd_head_k % ggml_blck_size\(type_k\) == 0\)") as e:
        llamacpp.allocate(phi2, 2048, Q8, F16, options=LlamacppOptions(version="legacy"))
    assert e.value.field == "k_dtype"
    # f16 K, q8_0 V with -fa on: the V assert
    with pytest.raises(KvcalcError, match=r"n_embd_head_v % ggml_blck_size\(type_v\)") as e:
        llamacpp.allocate(phi2, 2048, F16, Q8, options=LlamacppOptions(version="legacy", flash_attn=True))
    # 32 layers x 2,048 cells x 2,560 x 2 B = 335,544,320 B of K (and V) in f16
    assert llamacpp.allocate(phi2, 2048, F16, F16, options=LlamacppOptions(version="legacy")).k_bytes == 335_544_320
    assert (
        llamacpp.allocate(phi2, 2048, Q8, F16, options=LlamacppOptions(tool="llama-cli", flash_attn="off")).k_bytes
        == 32 * 2048 * 2720
    )
