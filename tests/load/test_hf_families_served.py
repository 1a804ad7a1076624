"""config.json families users serve today (issue 9 item 6): starcoder2, llama4, deepseek_v32,
qwen3_5 / qwen3_5_moe, nemotron_h, granitemoehybrid, glm4_moe, exaone4, olmo2, cohere2, the
multimodal wrappers with a text_config (falcon_h1: tests/load/test_falcon_h1.py).

None of these configs is in /work/shared/fixtures/hf-configs. Each dict below is written from the
published config.json of the Hub id named beside it, from memory of the model page, keeping the
fields the KV cache depends on (layers, heads, KV heads, head_dim, windows, layer pattern, state
sizes); where a value is the transformers class default rather than a published figure, the
comment says so. Every byte count is derived by hand in the comment beside it.
"""

from __future__ import annotations

import pytest

from kvcalc.calc.kv_cache import kv_bytes_per_token, kv_cache_bytes, state_bytes_per_seq
from kvcalc.calc.weights import layer_params, param_counts
from kvcalc.engines.vllm import VllmOptions
from kvcalc.errors import ConfigError
from kvcalc.formats import kv_format
from kvcalc.load.hf import model_from_hf_config
from kvcalc.load.models import load_model
from tests.published_configs import DEEPSEEK_V32 as V32
from tests.published_configs import GRANITE_H_TINY, NEMOTRON_H_8B

BF16 = kv_format("bf16")


def count(kinds, kind):
    return sum(k == kind for k in kinds)


# bigcode/starcoder2-15b config.json
STARCODER2_15B = {
    "architectures": ["Starcoder2ForCausalLM"],
    "model_type": "starcoder2",
    "hidden_size": 6144,
    "intermediate_size": 24576,
    "max_position_embeddings": 16384,
    "num_attention_heads": 48,
    "num_hidden_layers": 40,
    "num_key_value_heads": 4,
    "rope_theta": 100000,
    "sliding_window": 4096,
    "torch_dtype": "bfloat16",
    "use_bias": True,
    "vocab_size": 49152,
}


def test_starcoder2_every_layer_slides():
    m = model_from_hf_config(STARCODER2_15B, "starcoder2-15b/config.json")
    assert (m.n_layers, m.resolved_n_kv_heads, m.resolved_head_dim) == (40, 4, 128)  # 6144 / 48 = 128
    assert set(m.layer_kinds) == {"sliding"} and m.sliding_window == 4096
    assert m.mlp_kind == "plain" and m.attention_bias
    # 2 x 40 layers x 4 KV heads x 128 x 2 B = 81,920 B per token
    assert kv_bytes_per_token(m, "bf16") == 81_920
    # at 16,384 tokens every layer holds its window of 4,096: 81,920 x 4,096 = 335,544,320 B
    assert kv_cache_bytes(m, 16_384, 1, "bf16") == 335_544_320


# allenai/OLMo-2-1124-7B config.json
OLMO2_7B = {
    "architectures": ["Olmo2ForCausalLM"],
    "model_type": "olmo2",
    "hidden_size": 4096,
    "intermediate_size": 11008,
    "max_position_embeddings": 4096,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 32,
    "rope_theta": 500000,
    "tie_word_embeddings": False,
    "torch_dtype": "float32",
    "vocab_size": 100352,
    "attention_bias": False,
}


def test_olmo2_is_mha():
    m = model_from_hf_config(OLMO2_7B, "OLMo-2-1124-7B/config.json")
    assert m.attention_kind == "mha" and m.dtype == "fp32"
    # 2 x 32 layers x 32 KV heads x 128 (4096 / 32) x 2 B = 524,288 B per token in bf16
    assert kv_bytes_per_token(m, "bf16") == 524_288


# CohereForAI/c4ai-command-r7b-12-2024 config.json
COMMAND_R7B = {
    "architectures": ["Cohere2ForCausalLM"],
    "model_type": "cohere2",
    "hidden_size": 4096,
    "head_dim": 128,
    "intermediate_size": 14336,
    "max_position_embeddings": 8192,
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "sliding_window": 4096,
    "sliding_window_pattern": 4,
    "use_embedding_sharing": True,
    "torch_dtype": "bfloat16",
    "vocab_size": 256000,
    "rope_scaling": None,
}


def test_cohere2_three_sliding_then_one_global():
    m = model_from_hf_config(COMMAND_R7B, "c4ai-command-r7b-12-2024/config.json")
    kinds = m.layer_kinds
    assert kinds[:4] == ["sliding", "sliding", "sliding", "full"]
    assert (count(kinds, "sliding"), count(kinds, "full")) == (24, 8)
    assert m.tie_word_embeddings
    # 2 x 32 layers x 8 KV heads x 128 x 2 B = 131,072 B per token while inside the window
    assert kv_bytes_per_token(m, "bf16") == 131_072
    # at 8,192 tokens: one layer is 2 x 8 x 128 x 2 B = 4,096 B per token
    # 24 x 4,096 x 4,096 + 8 x 4,096 x 8,192 = 402,653,184 + 268,435,456 = 671,088,640 B
    assert kv_cache_bytes(m, 8192, 1, "bf16") == 671_088_640


# LGAI-EXAONE/EXAONE-4.0-32B config.json: the pattern written as a string
EXAONE4_32B = {
    "architectures": ["Exaone4ForCausalLM"],
    "model_type": "exaone4",
    "hidden_size": 5120,
    "head_dim": 128,
    "intermediate_size": 27392,
    "max_position_embeddings": 131072,
    "num_attention_heads": 40,
    "num_hidden_layers": 64,
    "num_key_value_heads": 8,
    "sliding_window": 4096,
    "sliding_window_pattern": "LLLG",
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "vocab_size": 102400,
}


def test_exaone4_lllg():
    m = model_from_hf_config(EXAONE4_32B, "EXAONE-4.0-32B/config.json")
    assert m.layer_kinds[:8] == ["sliding"] * 3 + ["full"] + ["sliding"] * 3 + ["full"]
    assert (count(m.layer_kinds, "sliding"), count(m.layer_kinds, "full")) == (48, 16)
    # 2 x 64 layers x 8 KV heads x 128 x 2 B = 262,144 B per token
    assert kv_bytes_per_token(m, "bf16") == 262_144
    # EXAONE-4.0-1.2B has sliding_window null: every layer global, whatever the pattern
    small = dict(EXAONE4_32B, sliding_window=None)
    assert set(model_from_hf_config(small, "e/config.json").layer_kinds) == {"full"}


def test_exaone4_bad_pattern_names_the_field():
    with pytest.raises(ConfigError) as e:
        model_from_hf_config(dict(EXAONE4_32B, sliding_window_pattern="LLXG"), "e/config.json")
    assert e.value.field == "sliding_window_pattern"


# zai-org/GLM-4.5-Air config.json
GLM45_AIR = {
    "architectures": ["Glm4MoeForCausalLM"],
    "model_type": "glm4_moe",
    "hidden_size": 4096,
    "head_dim": 128,
    "intermediate_size": 10944,
    "max_position_embeddings": 131072,
    "num_attention_heads": 96,
    "num_hidden_layers": 46,
    "num_key_value_heads": 8,
    "first_k_dense_replace": 1,
    "n_routed_experts": 128,
    "n_shared_experts": 1,
    "moe_intermediate_size": 1408,
    "num_experts_per_tok": 8,
    "attention_bias": True,
    "partial_rotary_factor": 0.5,
    "num_nextn_predict_layers": 1,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "vocab_size": 151552,
}


def test_glm4_moe():
    m = model_from_hf_config(GLM45_AIR, "GLM-4.5-Air/config.json")
    assert (m.n_experts, m.n_experts_per_token, m.moe_intermediate_size) == (128, 8, 1408)
    assert (m.shared_expert_intermediate_size, m.first_dense_layers) == (1408, 1)
    # 2 x 46 layers x 8 KV heads x 128 x 2 B = 188,416 B per token
    assert kv_bytes_per_token(m, "bf16") == 188_416


# meta-llama/Llama-4-Scout-17B-16E-Instruct config.json (text_config; vision_config left out)
SCOUT = {
    "architectures": ["Llama4ForConditionalGeneration"],
    "model_type": "llama4",
    "torch_dtype": "bfloat16",
    "text_config": {
        "model_type": "llama4_text",
        "attention_chunk_size": 8192,
        "head_dim": 128,
        "hidden_size": 5120,
        "interleave_moe_layer_step": 1,
        "intermediate_size": 8192,
        "intermediate_size_mlp": 16384,
        "max_position_embeddings": 10485760,
        "num_attention_heads": 40,
        "num_experts_per_tok": 1,
        "num_hidden_layers": 48,
        "num_key_value_heads": 8,
        "num_local_experts": 16,
        "no_rope_layers": [],
        "rope_scaling": {
            "factor": 16.0,
            "high_freq_factor": 1.0,
            "low_freq_factor": 1.0,
            "original_max_position_embeddings": 8192,
            "rope_type": "llama3",
        },
        "rope_theta": 500000.0,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "vocab_size": 202048,
    },
}


def test_llama4_scout_chunked_layers_capped_like_a_window():
    m = model_from_hf_config(SCOUT, "Llama-4-Scout-17B-16E-Instruct/config.json")
    assert m.model_type == "llama4_text"
    kinds = m.layer_kinds
    # no_rope_layers empty -> the default: layer i is NoPE (global) when (i + 1) % 4 == 0
    assert kinds[:4] == ["sliding", "sliding", "sliding", "full"] and m.sliding_window == 8192
    assert (count(kinds, "sliding"), count(kinds, "full")) == (36, 12)
    assert m.context_limit == 10_485_760  # llama3 rope: not scaled again
    # 2 x 48 layers x 8 KV heads x 128 x 2 B = 196,608 B per token
    assert kv_bytes_per_token(m, "bf16") == 196_608
    # at 131,072 tokens: 36 x 4,096 x 8,192 + 12 x 4,096 x 131,072 = 7,650,410,496 B
    assert kv_cache_bytes(m, 131_072, 1, "bf16") == 7_650_410_496
    # the bundled llama-4-scout is this config
    assert load_model("llama-4-scout").layer_kinds == kinds


def test_llama4_without_chunks_every_layer_is_global():
    # vLLM llama4.py `use_chunked_local_attn = not nope and attention_chunk_size`: with
    # attention_chunk_size null no layer is chunked. Scout at 131,072 tokens: 48 layers x 4,096 B
    # (2 x 8 KV heads x 128 x 2 B) x 131,072 = 25,769,803,776 B
    d = {**SCOUT["text_config"], "attention_chunk_size": None}
    m = model_from_hf_config({"model_type": "llama4", "text_config": d}, "scout/config.json")
    assert set(m.layer_kinds) == {"full"} and m.sliding_window is None
    assert kv_cache_bytes(m, 131_072, 1, "bf16") == 25_769_803_776


def test_llama4_maverick_moe_every_other_layer():
    # meta-llama/Llama-4-Maverick-17B-128E-Instruct: interleave_moe_layer_step 2, 128 experts
    d = {**SCOUT["text_config"], "interleave_moe_layer_step": 2, "num_local_experts": 128}
    m = model_from_hf_config({"model_type": "llama4", "text_config": d}, "maverick/config.json")
    assert (m.moe_layer_period, m.moe_layer_offset, m.n_experts) == (2, 1, 128)


def test_llama4_bad_no_rope_layers():
    d = {**SCOUT["text_config"], "no_rope_layers": [1, 0]}
    with pytest.raises(ConfigError) as e:
        model_from_hf_config({"model_type": "llama4", "text_config": d}, "scout/config.json")
    assert e.value.field == "no_rope_layers" and "48 layers" in str(e.value)


@pytest.mark.parametrize("moe_layers", [True, 4, {"0": 1}])
def test_llama4_moe_layers_not_a_list_is_refused(moe_layers):
    # true and 4 were a TypeError (list(True)) out of the reader: a crash, not a one-line refusal
    d = {**SCOUT["text_config"], "moe_layers": moe_layers}
    with pytest.raises(ConfigError) as e:
        model_from_hf_config({"model_type": "llama4", "text_config": d}, "scout/config.json")
    assert e.value.field == "moe_layers" and "must be a list of layer indices" in str(e.value)


def test_deepseek_v32_counts_the_indexer_key():
    m = model_from_hf_config(V32, "DeepSeek-V3.2-Exp/config.json")
    assert m.attention == "mla" and m.index_head_dim == 128
    assert m.context_limit == 163_840  # 4,096 x 40
    # per layer: latent (512 + 64) x 2 B = 1,152 B, indexer key 128 x 1 B (fp8) + 1 x 4 B scale = 132 B
    # 61 x (1,152 + 132) = 61 x 1,284 = 78,324 B per token
    assert kv_bytes_per_token(m, "bf16") == 78_324
    # fp8 latent: 61 x (576 + 132) = 61 x 708 = 43,188 B (the indexer keeps its own fp8 + scale)
    assert kv_bytes_per_token(m, "fp8") == 43_188


def test_deepseek_v32_engine_profiles_size_the_indexer(cli, tmp_path):
    import json

    (tmp_path / "v32").mkdir()
    p = tmp_path / "v32" / "config.json"
    p.write_text(json.dumps(V32))
    # SGLang models the NSA pool (tests/engines/test_sglang_nsa_swa.py); vLLM 0.33 its sparse MLA group
    # (tests/engines/test_vllm_2026.py): 42,949,672,960 // (64 x 78,324 = 5,012,736) = 8,568 blocks; a request of
    # 163,840 holds 2,560: int(8,568 / 2,560 x 163,840) = 548,352 tokens
    r = cli("capacity", str(p), "-m", "40GiB", "--tp", "8", "--engine", "vllm", "-f", "json")
    assert r.exit_code == 0, r.output
    assert (json.loads(r.stdout)["num_gpu_blocks"], json.loads(r.stdout)["kv_cache_tokens"]) == (8_568, 548_352)
    # llama.cpp 0c1e570's llama_kv_cache_dsa (tests/engines/test_llamacpp_2026.py), f16: 61 x (576 + 128) x 2 B =
    # 85,888 B a cell; 42,949,672,960 // 85,888 = 500,065, down to a multiple of 256: 499,968 cells
    r = cli("capacity", str(p), "-m", "40GiB", "--engine", "llamacpp", "-f", "json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["kv_cache_tokens"] == 499_968
    r = cli("capacity", str(p), "-m", "40GiB", "--tp", "8", "--engine", "ideal", "-f", "json")
    assert r.exit_code == 0, r.output
    # 40 GiB = 42,949,672,960 B // 78,324 B per token (the latent and indexer key are on every rank)
    # = 548,359 tokens
    assert json.loads(r.stdout)["kv_cache_tokens"] == 548_359


# Qwen/Qwen3.5: the values below are Qwen3_5TextConfig's defaults ("Qwen3.5-9B style"), not a
# published config.json, which was not at hand
QWEN35 = {
    "architectures": ["Qwen3_5ForConditionalGeneration"],
    "model_type": "qwen3_5",
    "torch_dtype": "bfloat16",
    "text_config": {
        "model_type": "qwen3_5_text",
        "num_hidden_layers": 32,
        "hidden_size": 4096,
        "num_attention_heads": 16,
        "num_key_value_heads": 4,
        "head_dim": 256,
        "full_attention_interval": 4,
        "max_position_embeddings": 262144,
        "rope_parameters": {"rope_type": "default", "mrope_section": [11, 11, 10], "rope_theta": 10000000},
    },
}


def test_qwen3_5_hybrid_gated_deltanet():
    m = model_from_hf_config(QWEN35, "Qwen3.5/config.json")
    assert (count(m.layer_kinds, "linear"), count(m.layer_kinds, "full")) == (24, 8)
    assert m.rope_scaling is None and m.context_limit == 262_144  # mrope is a default rope
    # 2 x 8 full layers x 4 KV heads x 256 x 2 B = 32,768 B per token
    assert kv_bytes_per_token(m, "bf16") == 32_768
    # linear layer state: conv (2 x 16 x 128 + 32 x 128) x (4 - 1) = 8,192 x 3 = 24,576
    # + recurrent 32 x 128 x 128 = 524,288 -> 548,864 values; x 24 layers x 2 B = 26,345,472 B
    assert state_bytes_per_seq(m) == 26_345_472


def test_qwen3_5_moe_defaults():
    # Qwen3_5MoeTextConfig defaults ("Qwen3.5-35B-A3B style"): 40 layers, 2 KV heads of 256
    d = {
        "model_type": "qwen3_5_moe",
        "text_config": {
            "model_type": "qwen3_5_moe_text",
            "num_hidden_layers": 40,
            "num_attention_heads": 16,
            "hidden_size": 2048,
        },
    }
    m = model_from_hf_config(d, "Qwen3.5-35B-A3B/config.json")
    assert (m.n_layers, m.n_experts, m.n_experts_per_token, m.moe_intermediate_size) == (40, 256, 8, 512)
    # 2 x 10 full layers x 2 KV heads x 256 x 2 B = 20,480 B per token
    assert kv_bytes_per_token(m, "bf16") == 20_480


def test_nemotron_h_mamba2_state_and_four_attention_layers():
    m = model_from_hf_config(NEMOTRON_H_8B, "Nemotron-H-8B-Base-8K/config.json")
    kinds = m.layer_kinds
    assert (count(kinds, "mamba"), count(kinds, "full"), count(kinds, "mlp")) == (24, 4, 24)
    # 2 x 4 attention layers x 8 KV heads x 128 x 2 B = 16,384 B per token
    assert kv_bytes_per_token(m, "bf16") == 16_384
    # Mamba-2 layer: d_inner = 128 heads x 64 = 8,192; conv (8,192 + 2 x 8 x 128) x (4 - 1) = 30,720;
    # SSM 128 x 64 x 128 = 1,048,576 -> 1,079,296 values; x 24 layers x 2 B = 51,806,208 B per sequence
    assert state_bytes_per_seq(m) == 51_806_208


def test_nemotron_h_weights_and_engines_refuse_clearly():
    m = model_from_hf_config(NEMOTRON_H_8B, "Nemotron-H-8B-Base-8K/config.json")
    # counted from the architecture now (tests/calc/test_nemotron_h_params.py has the arithmetic)
    assert param_counts(m) == (8_100_852_736, 8_100_852_736)
    from kvcalc.engines import vllm

    # vLLM unifies the pages (tests/engines/test_vllm_hybrid.py has the arithmetic): 0.11 raises the
    # attention block to 16 x cdiv(2,158,592 B of state, 16 x 4,096 B per token) = 528 tokens
    assert vllm.capacity(m, 2**30, BF16, BF16, options=VllmOptions(version="0.11")).block_size == 528


def test_nemotron_h_pattern_must_match_the_layers():
    with pytest.raises(ConfigError) as e:
        model_from_hf_config(dict(NEMOTRON_H_8B, num_hidden_layers=50), "n/config.json")
    assert e.value.field == "hybrid_override_pattern" and "52 layers" in str(e.value)
    with pytest.raises(ConfigError) as e:
        model_from_hf_config(dict(NEMOTRON_H_8B, hybrid_override_pattern="M-X*"), "n/config.json")
    assert e.value.field == "hybrid_override_pattern"


def test_granitemoehybrid_kv_state_and_mamba2_weights():
    m = model_from_hf_config(GRANITE_H_TINY, "granite-4.0-h-tiny/config.json")
    assert (count(m.layer_kinds, "mamba"), count(m.layer_kinds, "full")) == (36, 4)
    # 2 x 4 attention layers x 4 KV heads x 128 (1536 / 12) x 2 B = 8,192 B per token
    assert kv_bytes_per_token(m, "bf16") == 8_192
    # Mamba-2: d_inner 48 x 64 = 3,072; conv (3,072 + 2 x 1 x 128) x 3 = 9,984; SSM 48 x 64 x 128 =
    # 393,216 -> 403,200 values; x 36 layers x 2 B = 29,030,400 B per sequence
    assert state_bytes_per_seq(m) == 29_030_400
    p = layer_params(m, 0)
    # mixer: in_proj 1536 x (2 x 3,072 + 2 x 128 + 48) = 9,904,128, out_proj 3,072 x 1536 = 4,718,592;
    # shared MLP 3 x 1536 x 1024 = 4,718,592 -> 19,341,312
    assert p.linear == 19_341_312
    # conv (w + b) 3,328 x 5 = 16,640, dt_bias / A_log / D 3 x 48 = 144, gated norm 3,072, two norms
    # 2 x 1536 = 3,072, router 1536 x 64 = 98,304 -> 121,232
    assert p.other == 121_232
    assert p.expert_linear == 3 * 1536 * 512  # 2,359,296


def test_mistral3_wrapper_reads_its_text_config():
    # mistralai/Mistral-Small-3.1-24B-Instruct-2503: model_type mistral3, the text model under
    # text_config (model_type mistral): 40 layers, 8 KV heads of 128
    d = {
        "model_type": "mistral3",
        "torch_dtype": "bfloat16",
        "text_config": {
            "hidden_size": 5120,
            "head_dim": 128,
            "num_attention_heads": 32,
            "num_hidden_layers": 40,
            "num_key_value_heads": 8,
            "max_position_embeddings": 131072,
            "sliding_window": None,
            "intermediate_size": 32768,
            "vocab_size": 131072,
        },
    }
    m = model_from_hf_config(d, "Mistral-Small-3.1-24B-Instruct-2503/config.json")
    assert m.model_type == "mistral" and m.sliding_window is None
    # 2 x 40 x 8 x 128 x 2 B = 163,840 B per token
    assert kv_bytes_per_token(m, "bf16") == 163_840
