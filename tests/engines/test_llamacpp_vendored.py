"""llama.cpp "current" = the commit llama-cpp-python 0.3.36 vendors (0c1e570, 2026-10-01): the
rules the llama.cpp oracle (tests/oracle) found changed since b7000, each exact, with its source
line in that commit (`vendor/llama.cpp/src/...`).

Per cell and layer f16 is 2 B per value, q8_0 34 B per 32 values; MiB = 2^20 B.
"""

from __future__ import annotations

import pytest

from kvcalc.engines import llamacpp
from kvcalc.engines.llamacpp import LlamacppOptions
from kvcalc.errors import KvcalcError
from kvcalc.formats import kv_format
from kvcalc.load.models import load_model
from kvcalc.schema import ModelSpec

F16, Q8, Q4 = kv_format("f16"), kv_format("q8_0"), kv_format("q4_0")

#: Phi-2's attention: 32 layers, 32 heads of 80 values (80 is not a multiple of q8_0's 32-value block)
PHI2 = ModelSpec(
    name="phi-2", n_layers=32, n_heads=32, n_kv_heads=32, head_dim=80, hidden_size=2560, max_position_embeddings=2048
)


def test_a_quantized_k_whose_block_does_not_divide_the_head_is_refused_with_flash_attention():
    # src/llama-context.cpp llama_init_from_model: flash_attn not DISABLED and ggml_is_quantized(type_k):
    # n_embd_head_k(il) % ggml_blck_size(type_k) != 0 -> "K cache type %s with block size %u does not
    # divide n_embd_head_k=%u", no context. 80 % 32 = 16.
    for fa in ("on", "auto", None):
        with pytest.raises(
            KvcalcError,
            match=r'"llama_init_from_model: K cache type q8_0 with block size 32 does '
            r'not divide n_embd_head_k=80"',
        ) as e:
            llamacpp.allocate(PHI2, 2048, Q8, F16, options=LlamacppOptions(flash_attn=fa, tool="llama-cli"))
        assert e.value.field == "k_dtype"
    # -fa off: no check for K (a quantized K needs no flash attention); 80 values = 2.5 blocks of q8_0
    # round up per row: ggml_row_size(q8_0, 32 heads x 80 = 2,560) = 80 blocks x 34 B = 2,720 B per cell
    # and layer; 32 layers x 2,048 cells x 2,720 B = 178,257,920 B
    r = llamacpp.allocate(PHI2, 2048, Q8, F16, options=LlamacppOptions(flash_attn="off", tool="llama-cli"))
    assert r.k_bytes == 32 * 2048 * 2720 == 178_257_920


def test_a_quantized_v_whose_block_does_not_divide_the_head_is_refused():
    # the same check for V (n_embd_head_v); -fa auto turns flash attention on for a quantized V
    # ("enabling flash_attn since it is required for quantized V cache"), so it is refused too
    with pytest.raises(
        KvcalcError,
        match=r'"llama_init_from_model: V cache type q4_0 with block size 32 does '
        r'not divide n_embd_head_v=80"',
    ) as e:
        llamacpp.allocate(PHI2, 2048, F16, Q4, options=LlamacppOptions(tool="llama-cli"))
    assert e.value.field == "v_dtype"
    # -fa off refuses it earlier, with the quantized-V message of this commit
    with pytest.raises(
        KvcalcError,
        match=r'"llama_init_from_model: quantized V cache requires flash_attn to be '
        r'enabled"',
    ):
        llamacpp.allocate(PHI2, 2048, F16, Q4, options=LlamacppOptions(flash_attn="off", tool="llama-cli"))


def test_heads_that_are_whole_blocks_pass():
    # phi-3-mini's 96 = 3 x 32, Llama's 128, gemma-3's 256: no refusal; llama-3.1-8b q8_0 K and V at
    # 4,096 cells: a row of 8 KV heads x 128 = 1,024 values = 32 blocks x 34 B = 1,088 B;
    # 2 x 32 layers x 1,088 B x 4,096 = 285,212,672 B (272.00 MiB)
    assert (
        llamacpp.allocate(
            load_model("phi-3-mini"), 4096, Q8, Q8, options=LlamacppOptions(tool="llama-cli")
        ).engine_kv_bytes
        > 0
    )
    r = llamacpp.allocate(load_model("llama-3.1-8b"), 4096, Q8, Q8, options=LlamacppOptions(tool="llama-cli"))
    assert r.engine_kv_bytes == 2 * 32 * 1088 * 4096 == 285_212_672


def test_the_head_sizes_llama_cpp_checks():
    # MLA with its latent cache: K = kv_lora_rank + rope = 512 + 64 = 576 (the GGUF's key_length),
    # V = kv_lora_rank = 512 (value_length); expanded: K = nope + rope = 128 + 64 = 192, V = v_head_dim 128
    ds = load_model("deepseek-v2-lite")
    assert set(llamacpp.rules().head_sizes(ds)) == {(576, 512)}
    assert set(llamacpp.rules("legacy").head_sizes(ds)) == {(192, 128)}
    assert set(llamacpp.rules().head_sizes(PHI2)) == {(80, 80)}
    # legacy (7841fc7) aborts instead, -fa on or off: GGML_ASSERT(hparams.n_embd_head_k % ggml_blck_size(type_k) == 0)
    # in llama_init_from_model (src/llama.cpp); see tests/engines/test_llamacpp_legacy.py
    with pytest.raises(KvcalcError, match="GGML_ASSERT"):
        llamacpp.allocate(PHI2, 2048, Q8, F16, options=LlamacppOptions(flash_attn="on", version="legacy"))


def test_the_recurrent_size_line_of_this_commit():
    # src/llama-memory-recurrent.cpp: "size = %7.2f MiB (%6u cells, %3d layers, %2u seqs %2u rs_seq), R (%s):
    # %7.2f MiB, S (%s): %7.2f MiB, P (%s): %7.2f MiB" (n_rs_seq 0: llama_context_default_params; P, the PLE
    # conv state, 0 B for these models). Mamba-1 of 4 layers, hidden 256: R = 3 x 512 = 1,536 and
    # S = 16 x 512 = 8,192 values per layer; one sequence: (1,536 + 8,192) x 4 layers x 4 B = 155,648 B
    m = ModelSpec(
        name="mamba-4",
        n_layers=4,
        n_heads=4,
        hidden_size=256,
        layer_pattern=["mamba"],
        mamba_d_state=16,
        mamba_d_conv=4,
        mamba_expand=2,
        max_position_embeddings=2048,
    )
    r = llamacpp.allocate(m, 2048, F16, F16, options=LlamacppOptions(tool="llama-cli"))
    assert r.engine_state_bytes == (1536 + 8192) * 4 * 4 == 155_648
    assert r.log_lines[-1] == (
        "llama_memory_recurrent: size =    0.15 MiB (     1 cells,   4 layers,  1 seqs  0 rs_seq), "
        "R (f32):    0.02 MiB, S (f32):    0.12 MiB, P (f32):    0.00 MiB"
    )


def test_a_mamba_hybrid_without_flash_attention_pads_v_and_says_so():
    # src/llama-kv-cache.cpp [TAG_V_CACHE_VARIABLE]: v_trans (flash attention off) and
    # hparams.is_n_embd_v_gqa_variable() -> "the V embeddings have different sizes across layers and FA is
    # not enabled - padding V cache to %d" (n_embd_v_gqa_max). Jamba's GGUF gives head_count_kv per layer,
    # 0 on its 28 Mamba layers, 8 on its 4 attention layers: V widths 0 and 8 x 128 = 1,024 -> padded to
    # 1,024, which every attention layer has anyway: V stays 4 layers x 4,096 cells x 1,024 x 2 B = 32 MiB.
    jamba = load_model("jamba-1.5-mini")
    r = llamacpp.allocate(jamba, 4096, F16, F16, options=LlamacppOptions(flash_attn="off", tool="llama-cli"))
    assert r.log_lines[0] == (
        "llama_kv_cache: the V embeddings have different sizes across layers and FA is not "
        "enabled - padding V cache to 1024"
    )
    assert r.v_bytes == 4 * 4096 * 1024 * 2 == 32 * 2**20
    # flash attention on: V is not transposed, no padding, no line, the same bytes
    on = llamacpp.allocate(jamba, 4096, F16, F16, options=LlamacppOptions(flash_attn="on", tool="llama-cli"))
    assert "V embeddings" not in " ".join(on.log_lines) and on.v_bytes == r.v_bytes
    # a model without Mamba layers keeps one V width: no line with -fa off
    off = llamacpp.allocate(
        load_model("llama-3.1-8b"), 4096, F16, F16, options=LlamacppOptions(flash_attn="off", tool="llama-cli")
    )
    assert "V embeddings" not in " ".join(off.log_lines)
