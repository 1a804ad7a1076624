"""GGUF architectures as llama.cpp reads them (`src/llama-model.cpp` load_hparams): sliding-window
patterns, MoE experts from the `_exps` tensors, DeepSeek's MLA in both cache layouts, Jamba's
Mamba layers. Real models' hyperparameters (their config.json, as llama.cpp's converter writes
them) with tiny tensors; each figure derived by hand beside it."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from gguf_files import write_gguf

from kvcalc.calc.kv_cache import estimate
from kvcalc.calc.weights import checkpoint_weight_bytes, param_counts
from kvcalc.engines.llamacpp import LlamacppOptions
from kvcalc.errors import ConfigError, KvcalcWarning
from kvcalc.load.gguf import model_from_gguf
from kvcalc.schema import Workload


def est(model, seq_len: int = 1, kv_dtype: str = "fp16"):
    return estimate(model, Workload(seq_len=seq_len, k_dtype=kv_dtype, v_dtype=kv_dtype))


def norms(n_layers: int) -> list:
    return [(f"blk.{i}.attn_norm.weight", "F32", (32,)) for i in range(n_layers)]


# ----- sliding windows ----------------------------------------------------------------------

#: google/gemma-3-27b-it text_config: 62 layers, hidden 5376, 32 heads on 16 KV heads of 128,
#: window 1024, 131072 context
GEMMA3_27B = {
    "block_count": 62,
    "embedding_length": 5376,
    "attention.head_count": 32,
    "attention.head_count_kv": 16,
    "attention.key_length": 128,
    "attention.value_length": 128,
    "attention.sliding_window": 1024,
    "context_length": 131072,
    "feed_forward_length": 21504,
    "vocab_size": 262208,
    "general.file_type": 15,
}


def test_gemma3_every_sixth_layer_is_global(tmp_path):
    m = model_from_gguf(write_gguf(tmp_path / "g.gguf", "gemma3", GEMMA3_27B, norms(62)))
    kinds = m.layer_kinds
    # set_swa_pattern(6): layer il slides when il % 6 < 5: layers 5, 11, ..., 59 are global (10 of them)
    assert [i for i, k in enumerate(kinds) if k == "full"] == list(range(5, 62, 6))
    assert m.sliding_window == 1024 and m.tie_word_embeddings
    # at 131,072 tokens, 2 B: 10 global x 131,072 x 8,192 B + 52 local x 1,024 x 8,192 B (2 x 16 x 128 x 2 B
    # = 8,192 B per layer per token) = 10,737,418,240 + 436,207,616 = 11,173,625,856 B (as the README's bf16 figure)
    assert est(m, 131072).kv_cache_bytes == 11173625856


def test_a_per_layer_pattern_array_overrides_the_period(tmp_path):
    # newer files write sliding_window_pattern as one boolean per layer (true = sliding)
    pattern = [i % 4 != 3 for i in range(62)]
    kv = {**GEMMA3_27B, "attention.sliding_window_pattern": pattern}
    m = model_from_gguf(write_gguf(tmp_path / "g.gguf", "gemma3", kv, norms(62)))
    full = [i for i, k in enumerate(m.layer_kinds) if k == "full"]
    assert full == list(range(3, 62, 4)) and len(full) == 15
    # 15 x 131,072 x 8,192 + 47 x 1,024 x 8,192 = 16,106,127,360 + 394,264,576 = 16,500,391,936 B
    assert est(m, 131072).kv_cache_bytes == 16500391936


def test_a_period_in_the_file_overrides_the_default(tmp_path):
    kv = {**GEMMA3_27B, "attention.sliding_window_pattern": 2}
    m = model_from_gguf(write_gguf(tmp_path / "g.gguf", "gemma3", kv, norms(62)))
    assert m.layer_pattern == ["sliding", "full"]  # set_swa_pattern(2): even layers slide


def test_gemma2_default_window(tmp_path):
    # google/gemma-2-9b: 42 layers, hidden 3584, 16 heads on 8 KV heads of 256; a file without
    # sliding_window gets llama.cpp's gemma 2 default 4096; even layers slide
    kv = {
        "block_count": 42,
        "embedding_length": 3584,
        "attention.head_count": 16,
        "attention.head_count_kv": 8,
        "attention.key_length": 256,
        "attention.value_length": 256,
        "context_length": 8192,
    }
    m = model_from_gguf(write_gguf(tmp_path / "g2.gguf", "gemma2", kv, norms(42)))
    assert m.layer_pattern == ["sliding", "full"] and m.sliding_window == 4096
    # 2 x 42 x 8 x 256 x 2 B = 344,064 B per token
    assert est(m).kv_bytes_per_token == 344064


#: openai/gpt-oss-20b: 24 layers, hidden 2880, 64 heads on 8 KV heads of 64, window 128, 32
#: experts of 2880, 4 per token
GPT_OSS_20B = {
    "block_count": 24,
    "embedding_length": 2880,
    "attention.head_count": 64,
    "attention.head_count_kv": 8,
    "attention.key_length": 64,
    "attention.value_length": 64,
    "attention.sliding_window": 128,
    "context_length": 131072,
    "feed_forward_length": 2880,
    "expert_count": 32,
    "expert_used_count": 4,
    "expert_feed_forward_length": 2880,
    "general.file_type": 38,
}


def test_gpt_oss_alternates_and_places_experts_from_the_tensors(tmp_path):
    tensors = []
    for i in range(24):
        # MXFP4 experts: 32 values per 17 B block; gate_up 64 x 2 (x 32 experts in real files) = 4 blocks = 68 B
        tensors += [
            (f"blk.{i}.ffn_gate_up_exps.weight", "MXFP4", (64, 2)),
            (f"blk.{i}.ffn_gate_inp.weight", "F32", (8,)),
            (f"blk.{i}.attn_q.bias", "F32", (4096,)),
        ]
    m = model_from_gguf(write_gguf(tmp_path / "gpt-oss-20b-mxfp4.gguf", "gpt-oss", GPT_OSS_20B, tensors))
    assert m.layer_pattern == ["sliding", "full"] and m.sliding_window == 128
    assert (m.n_experts, m.n_experts_per_token, m.moe_intermediate_size) == (32, 4, 2880)
    assert (m.first_dense_layers, m.moe_layer_period) == (0, 1) and m.attention_bias
    assert m.checkpoint.label == "MXFP4_MOE"
    # 2 x 24 x 8 x 64 x 2 B = 49,152 B per token; at 8,192 tokens: 12 full x 8,192 + 12 sliding x 128 tokens,
    # each 2,048 B per layer: 201,326,592 + 3,145,728 = 204,472,320 B
    assert est(m).kv_bytes_per_token == 49152
    assert est(m, 8192).kv_cache_bytes == 204472320
    ck = m.checkpoint
    # per layer: 68 B experts + 8 x 4 B router + 4,096 x 4 B bias = 68 + 32 + 16,384 = 16,484 B
    assert ck.layer_bytes == [16484] * 24 and ck.layer_expert_bytes == [68] * 24


def test_phi3_window_is_off_in_llama_cpp(tmp_path):
    # microsoft/Phi-3-mini-4k-instruct: sliding_window 2047, which llama.cpp disables ("Phi SWA is
    # currently disabled"): every layer full. 32 layers, hidden 3072, 32 heads of 96
    kv = {
        "block_count": 32,
        "embedding_length": 3072,
        "attention.head_count": 32,
        "attention.head_count_kv": 32,
        "attention.sliding_window": 2047,
        "context_length": 4096,
        "feed_forward_length": 8192,
    }
    m = model_from_gguf(write_gguf(tmp_path / "phi3.gguf", "phi3", kv, norms(32)))
    assert m.layer_kinds == ["full"] * 32 and m.sliding_window is None
    # 2 x 32 x 32 x 96 x 2 B = 393,216 B per token
    assert est(m).kv_bytes_per_token == 393216


def test_llama4_chunked_attention(tmp_path):
    # meta-llama/Llama-4-Scout-17B-16E: 48 layers, hidden 5120, 40 heads on 8 KV heads of 128, 16 experts
    # of 8192 (1 per token), one shared; llama.cpp: chunks of 8192 on 3 of every 4 layers
    kv = {
        "block_count": 48,
        "embedding_length": 5120,
        "attention.head_count": 40,
        "attention.head_count_kv": 8,
        "attention.key_length": 128,
        "attention.value_length": 128,
        "context_length": 10485760,
        "feed_forward_length": 16384,
        "expert_count": 16,
        "expert_used_count": 1,
        "expert_feed_forward_length": 8192,
        "interleave_moe_layer_step": 1,
    }
    tensors = [(f"blk.{i}.ffn_up_exps.weight", "Q4_K", (256, 1)) for i in range(48)]
    m = model_from_gguf(write_gguf(tmp_path / "scout.gguf", "llama4", kv, tensors))
    assert m.layer_pattern == ["sliding", "sliding", "sliding", "full"] and m.sliding_window == 8192
    assert m.shared_expert_intermediate_size == 8192
    # at 65,536 tokens: 12 full x 65,536 + 36 chunked x 8,192, each 2 x 8 x 128 x 2 B = 4,096 B:
    # 3,221,225,472 + 1,207,959,552 = 4,429,185,024 B
    assert est(m, 65536).kv_cache_bytes == 4429185024


# ----- MoE ------------------------------------------------------------------------------------

#: Qwen/Qwen3-30B-A3B: 48 layers, hidden 2048, 32 heads on 4 KV heads of 128, 128 experts of 768,
#: 8 per token
QWEN3_30B = {
    "block_count": 48,
    "embedding_length": 2048,
    "attention.head_count": 32,
    "attention.head_count_kv": 4,
    "attention.key_length": 128,
    "attention.value_length": 128,
    "context_length": 40960,
    "feed_forward_length": 6144,
    "expert_count": 128,
    "expert_used_count": 8,
    "expert_feed_forward_length": 768,
    "vocab_size": 151936,
    "general.file_type": 17,
}


def test_qwen3_moe_experts_from_the_exps_tensors(tmp_path):
    tensors = []
    for i in range(48):
        # gate/up/down experts Q4_K 256 x 4 = 4 blocks x 144 = 576 B each; the router F32 16 x 4 B = 64 B
        tensors += [(f"blk.{i}.ffn_{x}_exps.weight", "Q4_K", (256, 4)) for x in ("gate", "up", "down")]
        tensors += [(f"blk.{i}.ffn_gate_inp.weight", "F32", (16,)), (f"blk.{i}.attn_k.weight", "Q8_0", (32, 2))]
    tensors += [
        ("token_embd.weight", "Q4_K", (256, 1)),
        ("output.weight", "Q6_K", (256, 1)),
        ("rope_freqs.weight", "F32", (8,)),
    ]
    m = model_from_gguf(write_gguf(tmp_path / "q3.gguf", "qwen3moe", QWEN3_30B, tensors))
    assert (m.n_experts, m.n_experts_per_token, m.moe_intermediate_size) == (128, 8, 768)
    assert m.shared_expert_intermediate_size is None and m.checkpoint.label == "Q5_K_M"
    # 2 x 48 x 4 x 128 x 2 B = 98,304 B per token
    assert est(m).kv_bytes_per_token == 98304
    ck = m.checkpoint
    # per layer: 3 x 576 = 1,728 B experts + 64 B router + 2 Q8_0 blocks of 34 B = 1,860 B
    assert ck.layer_bytes == [1860] * 48 and ck.layer_expert_bytes == [1728] * 48
    assert (ck.embedding_bytes, ck.head_bytes, ck.other_bytes) == (144, 210, 32)  # rope_freqs is "other"
    wb = checkpoint_weight_bytes(m)
    # 1,728 B over 128 experts = 13.5 -> 14 B each (rounded up); 8 of them read per token
    assert wb.layer_expert_bytes == (14,) * 48 and wb.layer_n_active_experts == (8,) * 48
    # values: 48 x (3 x 1,024 + 16 router + 64 attn_k) = 48 x 3,152 = 151,296; + 256 + 256 + 8 = 151,816
    assert m.checkpoint.n_params == 151816


def test_leading_dense_layers_found_in_the_tensors(tmp_path):
    # experts on layers 3.. only (DeepSeek first_k_dense_replace 3), and on odd layers only (Jamba)
    kv = {**QWEN3_30B, "block_count": 8}
    first3 = [(f"blk.{i}.ffn_up_exps.weight", "Q8_0", (32, 1)) for i in range(3, 8)]
    m = model_from_gguf(write_gguf(tmp_path / "a.gguf", "qwen3moe", kv, first3))
    assert (m.first_dense_layers, m.moe_layer_period, m.moe_layer_offset) == (3, 1, 0)
    odd = [(f"blk.{i}.ffn_up_exps.weight", "Q8_0", (32, 1)) for i in range(1, 8, 2)]
    m = model_from_gguf(write_gguf(tmp_path / "b.gguf", "qwen3moe", kv, odd))
    assert (m.first_dense_layers, m.moe_layer_period, m.moe_layer_offset) == (1, 2, 1)
    assert checkpoint_weight_bytes(m).layer_n_experts == (0, 128, 0, 128, 0, 128, 0, 128)


def test_mixtral_experts_are_feed_forward_length_wide(tmp_path):
    # mistralai/Mixtral-8x7B converts as arch llama with 8 experts of feed_forward_length 14336
    kv = {
        "block_count": 32,
        "embedding_length": 4096,
        "attention.head_count": 32,
        "attention.head_count_kv": 8,
        "feed_forward_length": 14336,
        "expert_count": 8,
        "expert_used_count": 2,
        "context_length": 32768,
    }
    tensors = [(f"blk.{i}.ffn_down_exps.weight", "Q8_0", (32, 8)) for i in range(32)]
    m = model_from_gguf(write_gguf(tmp_path / "mixtral.gguf", "llama", kv, tensors))
    assert (m.moe_intermediate_size, m.intermediate_size, m.n_experts_per_token) == (14336, None, 2)
    # 8 Q8_0 blocks = 272 B of experts per layer, 34 B per expert, 2 read per token
    assert checkpoint_weight_bytes(m).layer_expert_bytes == (34,) * 32


# ----- MLA ------------------------------------------------------------------------------------

#: deepseek-ai/DeepSeek-V3: 61 layers, hidden 7168, 128 heads, kv_lora_rank 512, q_lora_rank 1536,
#: rope 64, nope 128, v 128, 256 experts of 2048 (8 per token), 1 shared, first 3 layers dense
DSV3 = {
    "block_count": 61,
    "embedding_length": 7168,
    "attention.head_count": 128,
    "context_length": 163840,
    "feed_forward_length": 18432,
    "attention.q_lora_rank": 1536,
    "attention.kv_lora_rank": 512,
    "rope.dimension_count": 64,
    "leading_dense_block_count": 3,
    "expert_count": 256,
    "expert_used_count": 8,
    "expert_feed_forward_length": 2048,
    "expert_shared_count": 1,
    "vocab_size": 129280,
}


def dsv3_tensors() -> list:
    return [(f"blk.{i}.ffn_down_exps.weight", "Q4_K", (256, 1)) for i in range(3, 61)] + norms(61)


def test_deepseek_v3_latent_cache(tmp_path):
    # current converter: the latent as one KV head of kv_lora_rank + rope = 576; V = the latent (512);
    # per-head sizes in key_length_mla = nope + rope = 192 and value_length_mla = 128
    kv = {
        **DSV3,
        "attention.head_count_kv": 1,
        "attention.key_length": 576,
        "attention.value_length": 512,
        "attention.key_length_mla": 192,
        "attention.value_length_mla": 128,
    }
    with warnings.catch_warnings():
        warnings.simplefilter("error", KvcalcWarning)  # no warning for the current layout
        m = model_from_gguf(write_gguf(tmp_path / "DeepSeek-V3-Q4_K_M.gguf", "deepseek2", kv, dsv3_tensors()))
    assert m.attention == "mla" and (m.kv_lora_rank, m.qk_rope_head_dim, m.qk_nope_head_dim, m.v_head_dim) == (
        512,
        64,
        128,
        128,
    )
    assert (m.q_lora_rank, m.first_dense_layers, m.shared_expert_intermediate_size) == (1536, 3, 2048)
    # 61 layers x (512 + 64) x 2 B = 70,272 B per token (no factor 2: one latent serves K and V)
    assert est(m).kv_bytes_per_token == 70272
    assert "expanded" not in m.source
    assert m.mla_cache == "latent"  # llama.cpp caches the latent for this file, whatever --llamacpp-version


def test_deepseek_v3_expanded_layout_warns(tmp_path):
    # files converted before llama.cpp PR #12801: per-head K of 192 and V of 128 on 128 KV heads, no _mla keys
    kv = {**DSV3, "attention.head_count_kv": 128, "attention.key_length": 192, "attention.value_length": 128}
    with pytest.warns(KvcalcWarning, match=r"caches full K and V for it \(128 heads x 192 \+ 128 values"):
        m = model_from_gguf(write_gguf(tmp_path / "old.gguf", "deepseek2", kv, dsv3_tensors()))
    assert (m.qk_nope_head_dim, m.v_head_dim) == (128, 128)  # 192 - 64 rope
    assert est(m).kv_bytes_per_token == 70272  # kvcalc sizes the latent; llama.cpp would cache 61 x 128 x 320 x 2
    assert "expanded MLA cache: full K and V" in m.source
    assert m.mla_cache == "expanded"
    # and llama.cpp (current) sizes the expanded cache for it: 61 layers x 128 heads x (192 + 128) x 2 B
    # = 4,997,120 B per cell; x 256 cells = 1,279,262,720 B
    from kvcalc.engines import llamacpp
    from kvcalc.formats import kv_format

    f16 = kv_format("f16")
    assert (
        llamacpp.allocate(m, 256, f16, f16, options=LlamacppOptions(tool="llama-cli")).engine_kv_bytes == 1_279_262_720
    )


def test_deepseek_v2_lite_has_no_q_lora(tmp_path):
    # deepseek-ai/DeepSeek-V2-Lite: 27 layers, hidden 2048, 16 heads, no q_lora_rank, 64 experts of 1408
    kv = {
        "block_count": 27,
        "embedding_length": 2048,
        "attention.head_count": 16,
        "attention.head_count_kv": 1,
        "attention.kv_lora_rank": 512,
        "rope.dimension_count": 64,
        "attention.key_length": 576,
        "attention.value_length": 512,
        "attention.key_length_mla": 192,
        "attention.value_length_mla": 128,
        "leading_dense_block_count": 1,
        "expert_count": 64,
        "expert_used_count": 6,
        "expert_feed_forward_length": 1408,
        "expert_shared_count": 2,
        "feed_forward_length": 10944,
    }
    tensors = [(f"blk.{i}.ffn_up_exps.weight", "Q8_0", (32, 1)) for i in range(1, 27)]
    m = model_from_gguf(write_gguf(tmp_path / "lite.gguf", "deepseek2", kv, tensors))
    assert m.q_lora_rank is None and m.shared_expert_intermediate_size == 2 * 1408
    assert est(m).kv_bytes_per_token == 27 * 576 * 2  # 31,104 B


# ----- hybrids --------------------------------------------------------------------------------

#: ai21labs/Jamba-v0.1: 32 layers, hidden 4096, 32 heads on 8 KV heads, attention every 8th layer from
#: layer 4, Mamba d_inner 8192 (expand 2), d_state 16, d_conv 4, dt_rank 256; 16 experts (2 per token)
#: on odd layers
JAMBA = {
    "block_count": 32,
    "embedding_length": 4096,
    "attention.head_count": 32,
    "attention.head_count_kv": [8 if i % 8 == 4 else 0 for i in range(32)],
    "context_length": 262144,
    "feed_forward_length": 14336,
    "expert_count": 16,
    "expert_used_count": 2,
    "ssm.conv_kernel": 4,
    "ssm.inner_size": 8192,
    "ssm.state_size": 16,
    "ssm.time_step_rank": 256,
}


def test_jamba_mamba_layers_where_kv_heads_are_zero(tmp_path):
    tensors = [(f"blk.{i}.ffn_gate_exps.weight", "Q8_0", (32, 16)) for i in range(1, 32, 2)] + norms(32)
    m = model_from_gguf(write_gguf(tmp_path / "jamba.gguf", "jamba", JAMBA, tensors))
    assert m.layer_pattern == ["mamba"] * 4 + ["full"] + ["mamba"] * 3
    assert (m.mamba_expand, m.mamba_d_state, m.mamba_d_conv, m.mamba_dt_rank) == (2, 16, 4, 256)
    assert (m.first_dense_layers, m.moe_layer_period, m.moe_layer_offset) == (1, 2, 1)
    e = est(m, 1024)
    # only 4 attention layers cache: 2 x 4 x 8 x 128 x 2 B = 16,384 B per token
    assert e.kv_bytes_per_token == 16384
    # Mamba state per layer: d_inner 8,192 x (d_conv 4 - 1) + 8,192 x d_state 16 = 24,576 + 131,072 = 155,648
    # values; 28 Mamba layers x 2 B = 8,716,288 B per sequence
    assert e.state_bytes == 28 * 155648 * 2
    # 16 experts of 16 Q8_0 blocks (544 B) on the odd layers; 2 read per token
    assert checkpoint_weight_bytes(m).layer_expert_bytes[:2] == (0, 34)


def test_mamba2_hybrids_are_refused(tmp_path):
    kv = {**JAMBA, "ssm.group_count": 8}
    # nemotron_h and granitehybrid are read (tests/load/test_gguf_mamba2_hybrids.py); other Mamba-2 files are not
    with pytest.raises(ConfigError, match=r"field 'mamba2.ssm.group_count': Mamba-2 layers"):
        model_from_gguf(write_gguf(tmp_path / "m2.gguf", "mamba2", kv, norms(32)))


def test_zero_kv_heads_outside_a_hybrid_are_refused(tmp_path):
    kv = {**JAMBA}
    with pytest.raises(ConfigError, match="is 0 for some layers, which a llama model does not have"):
        model_from_gguf(write_gguf(tmp_path / "x.gguf", "llama", kv, norms(32)))


def test_active_parameters_skip_the_unread_experts(tmp_path):
    tensors = [(f"blk.{i}.ffn_{x}_exps.weight", "Q4_K", (256, 4)) for i in range(48) for x in ("gate", "up", "down")]
    m = model_from_gguf(write_gguf(tmp_path / "q3.gguf", "qwen3moe", QWEN3_30B, tensors))
    total, active = param_counts(m)
    # stored: 48 x 3 x 1,024 = 147,456 values; the 120 experts a token skips, from the architecture:
    # 48 layers x 120 x 3 x 2,048 x 768 = 27,179,089,920 > stored, so active floors at 0
    assert (total, active) == (147456, 0)
