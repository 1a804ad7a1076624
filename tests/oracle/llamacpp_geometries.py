"""The model geometries the llama.cpp oracle writes as GGUF files: each the KV geometry of a
published model (its config.json, as the GGUF converter `convert_hf_to_gguf.py` writes it), with
the widths that do not size the cache shrunk (`llamacpp_gguf.SMALL_*`).

- llama-3.2-1b (meta-llama/Llama-3.2-1B): 16 layers, 32 heads on 8 KV heads of 64; GQA.
- gemma-3-1b (google/gemma-3-1b-it): 26 layers, 4 heads on 1 KV head of 256, window 512, every
  6th layer full (llama.cpp's gemma3 pattern); gemma-3-270m (google/gemma-3-270m): 18 layers of
  the same heads (issue 10's `-c 1024 -np 3` figure).
- gpt-oss-20b (openai/gpt-oss-20b): 24 layers, 64 heads on 8 KV heads of 64, window 128 on every
  other layer, attention sinks (tensors only: the cache does not hold them).
- deepseek-v2-lite (deepseek-ai/DeepSeek-V2-Lite): 27 layers, 16 heads, kv_lora_rank 512, rope 64,
  nope 128, v 128, first layer dense; as converted since llama.cpp PR #12801 (the latent cache,
  `key_length_mla` 192) and as converted before it (`deepseek-v2-lite-expanded`: K and V per head).
- qwen3.5-9b (Qwen/Qwen3.5-9B): 32 layers, every 4th full attention (16 heads on 4 KV heads of
  256), the rest Gated DeltaNet (16 key heads, 32 value heads of 128, conv kernel 4).
- jamba-1.5-mini (ai21labs/AI21-Jamba-1.5-Mini): 32 layers, attention on layer i % 8 == 4 (32 heads
  on 8 KV heads of 128), Mamba-1 elsewhere (d_state 16, d_conv 4, d_inner 8192, dt_rank 256);
  experts left out (they do not touch the cache).
- falcon-h1-7b (tiiuae/Falcon-H1-7B-Instruct, as tests/load/test_falcon_h1.py has it): 44 layers,
  each attention (12 heads on 2 KV heads of 128) AND a Mamba-2 mixer (d_inner 3072 = 24 heads x
  128, 1 group, d_state 256, conv 4): every layer in the KV cache and in the recurrent memory.
- nemotron-h-8b (nvidia/Nemotron-H-8B-Base-8K, as tests/load/test_hf_families_served.py has it):
  52 layers of hybrid_override_pattern "M-M-M-M*-M-...": 24 Mamba-2 (d_inner 8192 = 128 heads x
  64, 8 groups, d_state 128, conv 4), 4 attention (32 heads on 8 KV heads of 128), 24 MLP layers
  in neither cache; head_count_kv and feed_forward_length per layer as the converter writes them.
- granite-4.0-h-tiny (ibm-granite/granite-4.0-h-tiny, as tests/load/test_hf_families_served.py has
  it): 40 layers, attention (12 heads on 4 KV heads of 128) on layers 5, 15, 25, 35, Mamba-2
  elsewhere (d_inner 3072 = 48 heads x 64, 1 group, d_state 128, conv 4); experts shrunk.
  Both converters (`conversion/granite.py` GraniteHybridModel, Nemotron-H its subclass) write
  context_length 2^20 for these NoPE models, so `-c 0` is 1,048,576 cells.
- mamba-130m (state-spaces/mamba-130m-hf): 24 Mamba-1 layers, hidden 768, d_inner 1536, d_state 16,
  d_conv 4, dt_rank 48; no attention, no KV cache.
"""

from __future__ import annotations

from llamacpp_gguf import SMALL_EXPERTS, SMALL_FF, Geometry

#: Qwen3.5-9B's config.json (Qwen3_5TextConfig defaults for the Gated DeltaNet: 16 key heads,
#: 32 value heads, head dims 128, conv kernel 4), as tests/engines/test_llamacpp_rules.py has it
QWEN35_9B_CONFIG = {
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
    },
}


#: nvidia/Nemotron-H-8B-Base-8K's hybrid_override_pattern: M Mamba-2, * attention, - MLP
NEMOTRON_H_8B_PATTERN = "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-"
#: ibm-granite/granite-4.0-h-tiny's attention layers (its layer_types; the rest Mamba-2)
GRANITE_H_TINY_ATTENTION = (5, 15, 25, 35)


def _qwen35_spec():
    from kvcalc.load.hf import model_from_hf_config

    return model_from_hf_config(QWEN35_9B_CONFIG, "Qwen3.5-9B/config.json")


def _mamba_130m_spec():
    from kvcalc.schema import ModelSpec

    return ModelSpec(
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


def _attn(n_embd: int, n_head: int, n_head_kv, head_dim: int, ctx: int, eps: float = 1e-6) -> dict:
    return {
        "context_length": ctx,
        "embedding_length": n_embd,
        "feed_forward_length": SMALL_FF,
        "attention.head_count": n_head,
        "attention.head_count_kv": n_head_kv,
        "attention.key_length": head_dim,
        "attention.value_length": head_dim,
        "rope.dimension_count": head_dim,
        "attention.layer_norm_rms_epsilon": eps,
    }


_DSV2_LITE = {
    "context_length": 163840,
    "embedding_length": 2048,
    "feed_forward_length": SMALL_FF,
    "attention.head_count": 16,
    "attention.kv_lora_rank": 512,
    "rope.dimension_count": 64,
    "leading_dense_block_count": 1,
    "expert_count": SMALL_EXPERTS,
    "expert_used_count": 2,
    "expert_shared_count": 2,
    "expert_feed_forward_length": SMALL_FF,
    "expert_weights_scale": 1.0,
    "attention.layer_norm_rms_epsilon": 1e-6,
    # the YaRN log multiplier (0.1 x mscale_all_dim 0.707) convert_hf_to_gguf.py writes: llama.cpp
    # 7841fc7 (legacy) requires the key, current reads it as optional
    "rope.scaling.yarn_log_multiplier": 0.0707,
}

GEOMETRIES: dict[str, Geometry] = {
    g.name: g
    for g in [
        Geometry(
            "llama-3.2-1b",
            "llama",
            16,
            _attn(2048, 32, 8, 64, 131072, 1e-5),
            "meta-llama/Llama-3.2-1B",
            kv_widths=(8 * 64, 8 * 64),
        ),
        Geometry(
            "gemma-3-1b",
            "gemma3",
            26,
            {**_attn(1152, 4, 1, 256, 32768), "attention.sliding_window": 512},
            "google/gemma-3-1b-it",
            kv_widths=(256, 256),
        ),
        Geometry(
            "gemma-3-270m",
            "gemma3",
            18,
            {**_attn(640, 4, 1, 256, 32768), "attention.sliding_window": 512},
            "google/gemma-3-270m",
            kv_widths=(256, 256),
        ),
        Geometry(
            "gpt-oss-20b",
            "gpt-oss",
            24,
            {
                **_attn(2880, 64, 8, 64, 131072, 1e-5),
                "attention.sliding_window": 128,
                "expert_count": SMALL_EXPERTS,
                "expert_used_count": 2,
                "expert_feed_forward_length": SMALL_FF,
            },
            "openai/gpt-oss-20b",
            kv_widths=(8 * 64, 8 * 64),
        ),
        Geometry(
            "deepseek-v2-lite",
            "deepseek2",
            27,
            {
                **_DSV2_LITE,
                "attention.head_count_kv": 1,
                "attention.key_length": 576,
                "attention.value_length": 512,
                "attention.key_length_mla": 192,
                "attention.value_length_mla": 128,
            },
            "deepseek-ai/DeepSeek-V2-Lite (GGUF converted since llama.cpp PR #12801: the latent cache)",
            layer_class=lambda il: "dense" if il < 1 else "moe",
            kv_widths=(512 + 64, 0),
        ),
        Geometry(
            "deepseek-v2-lite-expanded",
            "deepseek2",
            27,
            {**_DSV2_LITE, "attention.head_count_kv": 16, "attention.key_length": 192, "attention.value_length": 128},
            "deepseek-ai/DeepSeek-V2-Lite (GGUF converted before llama.cpp PR #12801: K and V per head)",
            layer_class=lambda il: "dense" if il < 1 else "moe",
            kv_widths=(16 * 192, 16 * 128),
        ),
        Geometry(
            "qwen3.5-9b",
            "qwen35",
            32,
            {
                **_attn(4096, 16, 4, 256, 262144),
                "rope.dimension_count": 64,
                "rope.dimension_sections": [11, 11, 10, 0],
                "ssm.conv_kernel": 4,
                "ssm.inner_size": 4096,
                "ssm.state_size": 128,
                "ssm.time_step_rank": 32,
                "ssm.group_count": 16,
                "full_attention_interval": 4,
            },
            "Qwen/Qwen3.5-9B",
            layer_class=lambda il: "attn" if (il + 1) % 4 == 0 else "recr",
            kvcalc=_qwen35_spec,
            # src/models/qwen35.cpp: the fused QKV (key_dim 16 x 128 twice + value_dim 32 x 128) and the gate
            # of the Gated-DeltaNet layers load as optional and the graph needs them
            optional_tensors=lambda il: (
                {}
                if (il + 1) % 4 == 0
                else {"attn_qkv.weight": (4096, 2 * 2048 + 4096), "attn_gate.weight": (4096, 4096)}
            ),
            kv_widths=(4 * 256, 4 * 256),
            state_widths=(3 * (4096 + 2 * 16 * 128), 128 * 4096, 24),
        ),
        Geometry(
            "jamba-1.5-mini",
            "jamba",
            32,
            {
                **_attn(4096, 32, [8 if il % 8 == 4 else 0 for il in range(32)], 128, 262144),
                "ssm.conv_kernel": 4,
                "ssm.inner_size": 8192,
                "ssm.state_size": 16,
                "ssm.time_step_rank": 256,
            },
            "ai21labs/AI21-Jamba-1.5-Mini (experts left out)",
            layer_class=lambda il: "attn" if il % 8 == 4 else "mamba",
            kv_widths=(8 * 128, 8 * 128),
            state_widths=(3 * 8192, 16 * 8192, 28),
        ),
        Geometry(
            "falcon-h1-7b",
            "falcon-h1",
            44,
            {
                **_attn(3072, 12, 2, 128, 262144),
                "ssm.conv_kernel": 4,
                "ssm.inner_size": 3072,
                "ssm.state_size": 256,
                "ssm.time_step_rank": 24,
                "ssm.group_count": 1,
            },
            "tiiuae/Falcon-H1-7B-Instruct",
            # src/models/falcon-h1.cpp loads the conv bias as optional; mamba-base.cpp's Mamba-2 layer adds it
            # (the published model has it: mamba_conv_bias true), d_inner 3072 + 2 x 1 x 256 = 3584 wide
            optional_tensors=lambda il: {"ssm_conv1d.bias": (3072 + 2 * 256,)},
            kv_widths=(2 * 128, 2 * 128),
            state_widths=(3 * (3072 + 2 * 256), 256 * 3072, 44),
        ),
        Geometry(
            "nemotron-h-8b",
            "nemotron_h",
            52,
            {
                **_attn(4096, 32, [8 if ch == "*" else 0 for ch in NEMOTRON_H_8B_PATTERN], 128, 2**20, 1e-5),
                "feed_forward_length": [SMALL_FF if ch == "-" else 0 for ch in NEMOTRON_H_8B_PATTERN],
                "attention.layer_norm_epsilon": 1e-5,
                "ssm.conv_kernel": 4,
                "ssm.inner_size": 8192,
                "ssm.state_size": 128,
                "ssm.time_step_rank": 128,
                "ssm.group_count": 8,
            },
            "nvidia/Nemotron-H-8B-Base-8K",
            layer_class=lambda il: NEMOTRON_H_8B_PATTERN[il],
            # the Mamba-2 conv bias (optional in src/models/nemotron-h.cpp, added by mamba-base.cpp): 8192 + 2 x 8 x 128
            optional_tensors=lambda il: (
                {"ssm_conv1d.bias": (8192 + 2 * 8 * 128,)} if NEMOTRON_H_8B_PATTERN[il] == "M" else {}
            ),
            kv_widths=(8 * 128, 8 * 128),
            state_widths=(3 * (8192 + 2 * 8 * 128), 128 * 8192, 24),
        ),
        Geometry(
            "granite-4.0-h-tiny",
            "granitehybrid",
            40,
            {
                **_attn(1536, 12, [4 if il in GRANITE_H_TINY_ATTENTION else 0 for il in range(40)], 128, 2**20, 1e-5),
                "expert_count": SMALL_EXPERTS,
                "expert_used_count": 2,
                "expert_feed_forward_length": SMALL_FF,
                "expert_shared_feed_forward_length": SMALL_FF,
                "ssm.conv_kernel": 4,
                "ssm.inner_size": 3072,
                "ssm.state_size": 128,
                "ssm.time_step_rank": 48,
                "ssm.group_count": 1,
            },
            "ibm-granite/granite-4.0-h-tiny (experts shrunk)",
            layer_class=lambda il: "attn" if il in GRANITE_H_TINY_ATTENTION else "mamba",
            # the Mamba-2 conv bias (optional in src/models/granite-hybrid.cpp, added by mamba-base.cpp): 3072 + 2 x 128
            optional_tensors=lambda il: (
                {} if il in GRANITE_H_TINY_ATTENTION else {"ssm_conv1d.bias": (3072 + 2 * 128,)}
            ),
            kv_widths=(4 * 128, 4 * 128),
            state_widths=(3 * (3072 + 2 * 128), 128 * 3072, 36),
        ),
        Geometry(
            "mamba-130m",
            "mamba",
            24,
            {
                "context_length": 2048,
                "embedding_length": 768,
                "feed_forward_length": 0,
                "attention.head_count": 0,
                "attention.layer_norm_rms_epsilon": 1e-5,
                "ssm.conv_kernel": 4,
                "ssm.inner_size": 1536,
                "ssm.state_size": 16,
                "ssm.time_step_rank": 48,
            },
            "state-spaces/mamba-130m-hf",
            kvcalc=_mamba_130m_spec,
            state_widths=(3 * 1536, 16 * 1536, 24),
        ),
    ]
}


# ----- the 2026 architectures of llama.cpp 0c1e570 (issue 19 item 4) --------------------------------
# Each is the KV geometry of the config in tests/data/hf-configs-2026/ as llama.cpp's converter writes
# it (conversion/<family>.py set_gguf_parameters; tests/load/test_gguf_2026.py has the same mappings),
# experts shrunk or left out (they size no cache), kvcalc reading the very GGUF (its gguf_2026 reader).
# `cache_widths(case)`: (K, V) values per cell of each `llama_kv_cache: size` line, in llama.cpp's order
# (with -fa off a V cache is transposed and every layer's V row is n_embd_v_gqa_max wide).

#: google/gemma-4-26B-A4B text_config layer_types: every 6th layer full
GEMMA4_26B_SWA = [(il + 1) % 6 != 0 for il in range(30)]
#: XiaomiMiMo/MiMo-V2-Flash hybrid_layer_pattern (1 sliding)
MIMO_V2_PATTERN = [0, 1, 1, 1, 1] + [0, 1, 1, 1, 1, 1] * 7 + [0]
#: deepseek-ai/DeepSeek-V4-Flash compress_ratios (43 layers and the MTP block's 0)
DSV4_FLASH_RATIOS = [0, 0] + [4, 128] * 20 + [4, 0]
#: moonshotai/Kimi-K3 linear_attn_config full_attn_layers (1-based): MLA there, KDA elsewhere
KIMI_K3_FULL = {i - 1 for i in [*range(4, 93, 4), 93]}
#: nvidia/NVIDIA-Nemotron-3-Super-120B-A12B hybrid_override_pattern: M Mamba-2, * attention, E MoE
NEMOTRON_3_SUPER_PATTERN = "MEMEMEM*EMEMEMEM*EMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEM*EMEMEMEME"

_MOE = {  # experts shrunk: 4 of 64, 2 per token
    "expert_count": SMALL_EXPERTS,
    "expert_used_count": 2,
    "expert_feed_forward_length": SMALL_FF,
}


def _mla_keys(n_embd: int, n_head: int, lora: int, q_lora: int, nope: int, rope: int, v: int, ctx: int) -> dict:
    """deepseek2-style MLA as the converter writes it since PR #12801: one KV head, the latent."""
    return {
        "context_length": ctx,
        "embedding_length": n_embd,
        "feed_forward_length": SMALL_FF,
        "attention.head_count": n_head,
        "attention.head_count_kv": 1,
        "attention.key_length": lora + rope,
        "attention.value_length": lora,
        "attention.key_length_mla": nope + rope,
        "attention.value_length_mla": v,
        "attention.kv_lora_rank": lora,
        "attention.q_lora_rank": q_lora,
        "rope.dimension_count": rope,
        "attention.layer_norm_rms_epsilon": 1e-6,
    }


def _fa_off_v(widths: list[tuple[int, int]], case: dict) -> list[tuple[int, int]]:
    """-fa off: V rows of n_embd_v_gqa_max (the model's widest V) in every cache of one hparams
    (the iswa's two caches share the model's)."""
    if case.get("flash_attn") != "off":
        return widths
    vmax = max(v for _, v in widths)
    return [(k, vmax if v else 0) for k, v in widths]


GEOMETRIES_2026: list[Geometry] = [
    Geometry(
        "gemma-4-26b-a4b",
        "gemma4",
        30,
        {
            **_attn(2816, 16, [8 if s else 2 for s in GEMMA4_26B_SWA], 512, 262144),
            "attention.key_length_swa": 256,
            "attention.value_length_swa": 256,
            "rope.dimension_count_swa": 256,
            "attention.sliding_window": 1024,
            "attention.sliding_window_pattern": GEMMA4_26B_SWA,
            "attention.shared_kv_layers": 0,
            "embedding_length_per_layer_input": 0,
        },
        "google/gemma-4-26B-A4B (experts left out: the dense MLP only)",
        layer_class=lambda il: "swa" if GEMMA4_26B_SWA[il] else "full",
        kv_widths=(2 * 512, 2 * 512),
        cache_widths=lambda c: _fa_off_v([(2 * 512, 2 * 512), (8 * 256, 8 * 256)], c),
    ),
    Geometry(
        "mimo-v2-flash",
        "mimo2",
        48,
        {
            **_attn(4096, 64, [8 if p else 4 for p in MIMO_V2_PATTERN], 192, 262144, 1e-5),
            "attention.value_length": 128,
            "rope.dimension_count": 64,  # int(192 x partial_rotary_factor 0.334)
            "attention.sliding_window": 128,
            "attention.sliding_window_pattern": [bool(p) for p in MIMO_V2_PATTERN],
            "expert_feed_forward_length": SMALL_FF,
        },
        "XiaomiMiMo/MiMo-V2-Flash (experts left out)",
        layer_class=lambda il: "swa" if MIMO_V2_PATTERN[il] else "full",
        kv_widths=(4 * 192, 4 * 128),
        cache_widths=lambda c: _fa_off_v([(4 * 192, 4 * 128), (8 * 192, 8 * 128)], c),
    ),
    Geometry(
        "deepseek-v3.2",
        "deepseek32",
        61,
        {
            **_mla_keys(7168, 128, 512, 1536, 128, 64, 128, 163840),
            **_MOE,
            "leading_dense_block_count": 3,
            "expert_shared_count": 1,
            "expert_weights_scale": 2.5,
            "expert_gating_func": 2,  # sigmoid
            "attention.indexer.head_count": 64,
            "attention.indexer.key_length": 128,
            "attention.indexer.top_k": 2048,
            "rope.scaling.yarn_log_multiplier": 0.1,
        },
        "deepseek-ai/DeepSeek-V3.2 (experts shrunk)",
        layer_class=lambda il: "dense" if il < 3 else "moe",
        kv_widths=(512 + 64, 0),
        cache_widths=lambda c: [(512 + 64, 0), (128, 0)],
    ),
    Geometry(
        "glm-5.2",
        "glm-dsa",
        78,
        {
            **_mla_keys(6144, 64, 512, 2048, 192, 64, 256, 1048576),
            **_MOE,
            "leading_dense_block_count": 3,
            "expert_shared_count": 1,
            "expert_weights_scale": 2.5,
            "attention.indexer.head_count": 32,
            "attention.indexer.key_length": 128,
            "attention.indexer.top_k": 2048,
            # no attention.indexer.types: context 1,048,576 -> GLM_5_2_DEFAULT_INDEXER_TYPES (src/models/glm-dsa.cpp)
        },
        "zai-org/GLM-5.2 (experts shrunk; llama.cpp's default indexer layers)",
        layer_class=lambda il: "dense" if il < 3 else "moe",
        # src/models/glm-dsa.cpp 144-148: the indexer's weights load as optional; the graph of an indexer layer needs them
        optional_tensors=lambda il: {
            "indexer.k_norm.weight": (128,),
            "indexer.k_norm.bias": (128,),
            "indexer.proj.weight": (6144, 32),
            "indexer.attn_k.weight": (6144, 128),
            "indexer.attn_q_b.weight": (2048, 32 * 128),
        },
        kv_widths=(512 + 64, 0),
        cache_widths=lambda c: [(512 + 64, 0), (128, 0)],
    ),
    Geometry(
        "minimax-m3",
        "minimax-m3",
        60,
        {
            **_attn(6144, 64, 4, 128, 1048576),
            **_MOE,
            "leading_dense_block_count": 3,
            "expert_shared_count": 1,
            "expert_gating_func": 2,
            "attention.indexer.head_count": 4,
            "attention.indexer.key_length": 128,
            "attention.indexer.top_k": 16,
            "attention.indexer.block_size": 128,
            "attention.indexer.local_blocks": 1,
        },
        "MiniMaxAI/MiniMax-M3 (experts shrunk)",
        layer_class=lambda il: "dense" if il < 3 else "moe",
        kv_widths=(4 * 128, 4 * 128),
        # the indexer cache is built from its own hparams copy (one head of 128 on every layer), so -fa off pads
        # no V row: n_embd_v_gqa_max is per cache (src/llama-kv-cache-msa.cpp 13-50)
        cache_widths=lambda c: [(4 * 128, 4 * 128), (128, 128)],
    ),
    Geometry(
        "deepseek-v4-flash",
        "deepseek4",
        43,
        {
            **_attn(4096, 64, 1, 512, 1048576),
            **_MOE,
            "rope.dimension_count": 64,
            "attention.q_lora_rank": 1024,
            "attention.sliding_window": 128,
            "expert_shared_count": 1,
            "expert_weights_scale": 1.5,
            "expert_weights_norm": True,
            "expert_gating_func": 4,  # sqrt(softplus): the loader refuses anything else
            "swiglu_clamp_exp": [10.0] * 43,
            "swiglu_clamp_shexp": [10.0] * 43,
            "attention.indexer.head_count": 64,
            "attention.indexer.key_length": 128,
            "attention.indexer.top_k": 512,
            "attention.output_group_count": 8,
            "attention.output_lora_rank": 1024,
            "attention.compress_rope_freq_base": 160000.0,
            "attention.compress_ratios": DSV4_FLASH_RATIOS,
            "hyper_connection.count": 4,
            "hyper_connection.sinkhorn_iterations": 20,
            "hyper_connection.epsilon": 1e-6,
            "hash_layer_count": 3,
        },
        "deepseek-ai/DeepSeek-V4-Flash (experts shrunk; main model, no MTP block)",
        layer_class=lambda il: f"r{DSV4_FLASH_RATIOS[il]}-{'hash' if il < 3 else 'moe'}",
        kv_widths=(512, 0),
        cache_widths=lambda c: [(512, 0)] * 4 + [(128, 0)],
        tensor_types={"ffn_gate_tid2eid.weight": "I32"},
    ),
    Geometry(
        "kimi-k3",
        "kimi-k3",
        93,
        {
            **_mla_keys(7168, 96, 512, 1536, 128, 64, 128, 1048576),
            **_MOE,
            "attention.head_count_kv": [1 if il in KIMI_K3_FULL else 0 for il in range(93)],
            "leading_dense_block_count": 1,
            "expert_shared_count": 2,
            "expert_gating_func": 2,
            "ssm.conv_kernel": 4,
            "kda.head_dim": 128,
            "attn_res.block_size": 12,
            "activation.situ_beta": 4.0,
            "activation.situ_linear_beta": 25.0,
        },
        "moonshotai/Kimi-K3 (experts shrunk)",
        layer_class=lambda il: ("mla" if il in KIMI_K3_FULL else "kda") + ("-dense" if il < 1 else ""),
        kv_widths=(512 + 64, 0),
        state_widths=(3 * 3 * 96 * 128, 128 * 128 * 96, 69),
    ),
    Geometry(
        "qwen3.5-27b",
        "qwen35",
        64,
        {
            **_attn(5120, 24, 4, 256, 262144),
            "rope.dimension_count": 64,
            "rope.dimension_sections": [11, 11, 10, 0],
            "ssm.conv_kernel": 4,
            "ssm.inner_size": 48 * 128,
            "ssm.state_size": 128,
            "ssm.time_step_rank": 48,
            "ssm.group_count": 16,
            "full_attention_interval": 4,
        },
        "Qwen/Qwen3.5-27B",
        layer_class=lambda il: "attn" if (il + 1) % 4 == 0 else "recr",
        optional_tensors=lambda il: (
            {}
            if (il + 1) % 4 == 0
            else {"attn_qkv.weight": (5120, 2 * 16 * 128 + 6144), "attn_gate.weight": (5120, 6144)}
        ),
        kv_widths=(4 * 256, 4 * 256),
        state_widths=(3 * (6144 + 2 * 16 * 128), 128 * 6144, 48),
    ),
    Geometry(
        "nemotron-3-super",
        "nemotron_h_moe",
        88,
        {
            **_attn(4096, 32, [2 if ch == "*" else 0 for ch in NEMOTRON_3_SUPER_PATTERN], 128, 2**20, 1e-5),
            **_MOE,
            "feed_forward_length": [SMALL_FF if ch == "E" else 0 for ch in NEMOTRON_3_SUPER_PATTERN],
            "expert_shared_feed_forward_length": SMALL_FF,
            "attention.layer_norm_epsilon": 1e-5,
            "ssm.conv_kernel": 4,
            "ssm.inner_size": 128 * 64,
            "ssm.state_size": 128,
            "ssm.time_step_rank": 128,
            "ssm.group_count": 8,
        },
        "nvidia/NVIDIA-Nemotron-3-Super-120B-A12B (experts shrunk; no MTP block)",
        layer_class=lambda il: NEMOTRON_3_SUPER_PATTERN[il],
        optional_tensors=lambda il: (
            {"ssm_conv1d.bias": (8192 + 2 * 8 * 128,)} if NEMOTRON_3_SUPER_PATTERN[il] == "M" else {}
        ),
        kv_widths=(2 * 128, 2 * 128),
        state_widths=(3 * (8192 + 2 * 8 * 128), 128 * 8192, 40),
    ),
]
GEOMETRIES.update({g.name: g for g in GEOMETRIES_2026})
