"""GGUF files of the 2026 architectures (issue 19, item 2's GGUF part): kvcalc reads their
metadata into the ModelSpec the published config.json gives, so the llama.cpp cache sized from
either is the same to the byte.

Each file is metadata only (no tensors), written with the `gguf` package as llama.cpp 0c1e570's
converter writes the config (`conversion/<family>.py` set_gguf_parameters, named per model
below); the configs are tests/data/hf-configs-2026/. The cache is llama-server's default context
(4 slots in one unified stream), `-c 32768`, f16 K and V.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gguf_files import write_gguf

from kvcalc.engines import llamacpp
from kvcalc.engines.llamacpp import LlamacppOptions
from kvcalc.errors import ConfigError
from kvcalc.formats import kv_format
from kvcalc.load.models import load_model

CONFIGS = Path(__file__).parent.parent / "data" / "hf-configs-2026"
F16 = kv_format("fp16")


def _config(name: str) -> dict:
    data = json.loads((CONFIGS / f"{name}.json").read_text())
    return data.get("text_config", data)


def _common(c: dict, n_layers: int, **extra) -> dict:
    """The keys every converter writes (`conversion/base.py` TextModel.set_gguf_parameters)."""
    return {
        "block_count": n_layers,
        "context_length": c["max_position_embeddings"],
        "embedding_length": c["hidden_size"],
        "attention.head_count": c["num_attention_heads"],
        "vocab_size": c["vocab_size"],
        **extra,
    }


def gemma4(c: dict) -> dict:
    """`conversion/gemma.py` 671-733 Gemma4Model: the SWA pattern from layer_types, K = V lengths
    global_head_dim (full) and head_dim (SWA), head_count_kv per layer (num_key_value_heads on
    SWA layers, num_global_key_value_heads on full ones)."""
    swa = [t == "sliding_attention" for t in c["layer_types"]]
    return _common(
        c,
        c["num_hidden_layers"],
        **{
            "feed_forward_length": c["intermediate_size"],
            "attention.head_count_kv": [
                c["num_key_value_heads"] if s else c["num_global_key_value_heads"] for s in swa
            ],
            "attention.key_length": c["global_head_dim"],
            "attention.value_length": c["global_head_dim"],
            "attention.key_length_swa": c["head_dim"],
            "attention.value_length_swa": c["head_dim"],
            "attention.sliding_window": c["sliding_window"],
            "attention.sliding_window_pattern": swa,
            "attention.shared_kv_layers": c["num_kv_shared_layers"],
            "embedding_length_per_layer_input": c["hidden_size_per_layer_input"],
            "expert_count": c["num_experts"],
            "expert_used_count": c["top_k_experts"],
            "expert_feed_forward_length": c["moe_intermediate_size"],
        },
    )


def mimo2(c: dict) -> dict:
    """`conversion/mimo.py` MimoV2Model: head_count_kv per layer from hybrid_layer_pattern (the MTP
    blocks appended as SWA entries: none here, converted without --mtp), the config's
    sliding_window, key_length head_dim, value_length v_head_dim."""
    pattern = c["hybrid_layer_pattern"]
    return _common(
        c,
        c["num_hidden_layers"],
        **{
            "feed_forward_length": c["intermediate_size"],
            "attention.head_count_kv": [
                c["swa_num_key_value_heads"] if p == 1 else c["num_key_value_heads"] for p in pattern
            ],
            "attention.key_length": c["head_dim"],
            "attention.value_length": c["v_head_dim"],
            "attention.sliding_window": c["sliding_window"],
            "attention.sliding_window_pattern": [bool(p) for p in pattern],
            "expert_count": c["n_routed_experts"],
            "expert_used_count": c["num_experts_per_tok"],
            "expert_feed_forward_length": c["moe_intermediate_size"],
        },
    )


def _mla(c: dict, n_layers: int) -> dict:
    """`conversion/deepseek.py` 319-386 DeepseekV2Model: one KV head, the latent as key_length,
    the per-head sizes as key_length_mla / value_length_mla."""
    lora, rope = c["kv_lora_rank"], c["qk_rope_head_dim"]
    return _common(
        c,
        n_layers,
        **{
            "feed_forward_length": c["intermediate_size"],
            "attention.head_count_kv": 1,
            "attention.kv_lora_rank": lora,
            "attention.q_lora_rank": c["q_lora_rank"],
            "attention.key_length": lora + rope,
            "attention.value_length": lora,
            "attention.key_length_mla": c["qk_nope_head_dim"] + rope,
            "attention.value_length_mla": c["v_head_dim"],
            "rope.dimension_count": rope,
            "leading_dense_block_count": c["first_k_dense_replace"],
            "expert_count": c["n_routed_experts"],
            "expert_used_count": c["num_experts_per_tok"],
            "expert_feed_forward_length": c["moe_intermediate_size"],
            "expert_shared_count": c["n_shared_experts"],
        },
    )


def deepseek32(c: dict) -> dict:
    """`conversion/deepseek.py` 512-522 DeepseekV32Model: the MTP block appended (block_count
    61 + 1, nextn_predict_layers 1), the indexer's heads, key length and top-k."""
    n = c["num_hidden_layers"] + c["num_nextn_predict_layers"]
    return {
        **_mla(c, n),
        "nextn_predict_layers": c["num_nextn_predict_layers"],
        "attention.indexer.head_count": c["index_n_heads"],
        "attention.indexer.key_length": c["index_head_dim"],
        "attention.indexer.top_k": c["index_topk"],
    }


def glm_dsa(c: dict) -> dict:
    """`conversion/glm.py` GlmMoeDsaModel: as DeepSeek-V3.2, and `attention.indexer.types` from
    the config's indexer_types (1 "full")."""
    return {**deepseek32(c), "attention.indexer.types": [int(t == "full") for t in c["indexer_types"]]}


def deepseek4(c: dict) -> dict:
    """`conversion/deepseek.py` 659-689 DeepseekV4Model (main model: no MTP block): one KV head of
    head_dim, the sliding window, the compress ratios, the indexer."""
    return _common(
        c,
        c["num_hidden_layers"],
        **{
            "attention.head_count_kv": 1,
            "attention.key_length": c["head_dim"],
            "attention.value_length": c["head_dim"],
            "attention.q_lora_rank": c["q_lora_rank"],
            "rope.dimension_count": c["qk_rope_head_dim"],
            "attention.sliding_window": c["sliding_window"],
            "attention.compress_ratios": c["compress_ratios"],
            "attention.indexer.head_count": c["index_n_heads"],
            "attention.indexer.key_length": c["index_head_dim"],
            "attention.indexer.top_k": c["index_topk"],
            "expert_count": c["n_routed_experts"],
            "expert_used_count": c["num_experts_per_tok"],
            "expert_feed_forward_length": c["moe_intermediate_size"],
            "expert_shared_count": c["n_shared_experts"],
        },
    )


def kimi_k3(c: dict) -> dict:
    """`conversion/kimi_k3.py` 165-206 KimiK3Model: head_count_kv 1 on the full-attention (MLA)
    layers, 0 on the KDA ones (linear_attn_config's 1-based full_attn_layers), the KDA head size
    and short-conv kernel."""
    lin = c["linear_attn_config"]
    full = {i - 1 for i in lin["full_attn_layers"]}
    n = c["num_hidden_layers"]
    out = _mla(
        {
            **c,
            "n_routed_experts": c["num_experts"],
            "num_experts_per_tok": c["num_experts_per_token"],
            "n_shared_experts": c["num_shared_experts"],
        },
        n,
    )
    return {
        **out,
        "attention.head_count_kv": [1 if i in full else 0 for i in range(n)],
        "kda.head_dim": lin["head_dim"],
        "ssm.conv_kernel": lin["short_conv_kernel_size"],
    }


def minimax_m3(c: dict) -> dict:
    """`conversion/minimax.py` 169-208 MiniMaxM3Model: GQA heads, leading dense blocks, the
    indexer (sparse_attention_config: index dim, heads, top-k blocks, block size, local blocks);
    the MTP block appended."""
    s = c["sparse_attention_config"]
    n = c["num_hidden_layers"] + c["num_nextn_predict_layers"]
    return _common(
        c,
        n,
        **{
            "nextn_predict_layers": c["num_nextn_predict_layers"],
            "feed_forward_length": c["dense_intermediate_size"],
            "attention.head_count_kv": c["num_key_value_heads"],
            "attention.key_length": c["head_dim"],
            "attention.value_length": c["head_dim"],
            "leading_dense_block_count": c["first_k_dense_replace"],
            "attention.indexer.key_length": s["sparse_index_dim"],
            "attention.indexer.head_count": s["sparse_num_index_heads"],
            "attention.indexer.top_k": s["sparse_topk_blocks"],
            "attention.indexer.block_size": s["sparse_block_size"],
            "attention.indexer.local_blocks": s["sparse_local_block"],
            "expert_count": c["num_local_experts"],
            "expert_used_count": c["num_experts_per_tok"],
            "expert_feed_forward_length": c["moe_intermediate_size"],
            "expert_shared_count": c["n_shared_experts"],
        },
    )


def qwen35(c: dict) -> dict:
    """`conversion/qwen.py` Qwen3_5TextModel (Qwen3-Next's keys): ssm.group_count the key heads,
    ssm.time_step_rank the value heads, ssm.state_size the key head size, ssm.inner_size value
    heads x value head size, full_attention_interval."""
    return _common(
        c,
        c["num_hidden_layers"],
        **{
            "feed_forward_length": c["intermediate_size"],
            "attention.head_count_kv": c["num_key_value_heads"],
            "attention.key_length": c["head_dim"],
            "attention.value_length": c["head_dim"],
            "ssm.conv_kernel": c["linear_conv_kernel_dim"],
            "ssm.state_size": c["linear_key_head_dim"],
            "ssm.group_count": c["linear_num_key_heads"],
            "ssm.time_step_rank": c["linear_num_value_heads"],
            "ssm.inner_size": c["linear_num_value_heads"] * c["linear_value_head_dim"],
            "full_attention_interval": c["full_attention_interval"],
        },
    )


def nemotron_h_moe(c: dict) -> dict:
    """`conversion/nemotron.py` 200-330 NemotronHModel (MoE: arch nemotron_h_moe, the MTP block
    appended as an attention + MLP layer): head_count_kv per layer (0 off the `*` layers),
    feed_forward_length per layer (the `E` layers and the MTP block get the expert width), the
    Mamba-2 keys."""
    pattern = c["hybrid_override_pattern"] + "*"
    ff = c["moe_intermediate_size"]
    return _common(
        c,
        len(pattern),
        **{
            "context_length": 2**20,  # conversion/granite.py GraniteHybridModel: no RoPE, 2^20 whatever the config says
            "nextn_predict_layers": 1,
            "attention.head_count_kv": [c["num_key_value_heads"] if ch == "*" else 0 for ch in pattern],
            "feed_forward_length": [ff if ch == "E" or i == len(pattern) - 1 else 0 for i, ch in enumerate(pattern)],
            "attention.key_length": c["head_dim"],
            "attention.value_length": c["head_dim"],
            "ssm.conv_kernel": c["conv_kernel"],
            "ssm.state_size": c["ssm_state_size"],
            "ssm.group_count": c["n_groups"],
            "ssm.time_step_rank": c["mamba_num_heads"],
            "ssm.inner_size": c["mamba_num_heads"] * c["mamba_head_dim"],
            "expert_count": c["n_routed_experts"],
            "expert_used_count": c["num_experts_per_tok"],
            "expert_feed_forward_length": ff,
        },
    )


# (GGUF arch, config, converter, K bytes, V bytes, recurrent state bytes) at -c 32768, 4 slots unified, f16
CASES = [
    # Gemma-4-26B-A4B: non-SWA 32,768 cells x 5 full layers x 2 KV heads x 512 x 2 B = 335,544,320 B of
    # K (V the same); SWA 4 x 1,024 + 512 = 4,608 cells x 25 x 8 x 256 x 2 B = 471,859,200 B
    ("gemma4", "google--gemma-4-26B-A4B", gemma4, 335_544_320 + 471_859_200, 335_544_320 + 471_859_200, 0),
    # MiMo-V2-Flash: full 32,768 x 9 layers x 4 heads (K 192 + V 128) x 2 B: K 452,984,832 B,
    # V 301,989,888 B; SWA GGML_PAD(4 x 128 + 512, 256) = 1,024 cells x 39 x 8 heads: K 122,683,392 B,
    # V 81,788,928 B
    ("mimo2", "XiaomiMiMo--MiMo-V2-Flash", mimo2, 452_984_832 + 122_683_392, 301_989_888 + 81_788_928, 0),
    # DeepSeek-V3.2: 61 layers x (576 latent + 128 indexer) x 2 B x 32,768 = 2,814,377,984 B of K, no V
    ("deepseek32", "deepseek-ai--DeepSeek-V3.2", deepseek32, 2_814_377_984, 0, 0),
    # GLM-5.2: (78 x 1,152 + 21 x 256) B x 32,768 = 3,120,562,176 B of K
    ("glm-dsa", "zai-org--GLM-5.2", glm_dsa, 3_120_562_176, 0, 0),
    # MiniMax-M3: K = V = (60 x 4 x 128 + 57 x 128) x 2 B x 32,768 = 2,491,416,576 B
    ("minimax-m3", "MiniMaxAI--MiniMax-M3", minimax_m3, 2_491_416_576, 2_491_416_576, 0),
    # Qwen3.5-27B: 16 full layers x 4 x 256 x 2 B x 32,768 = 1,073,741,824 B of K (V the same); 48
    # DeltaNet layers x 4 seqs x (R 3 x (6,144 + 2 x 16 x 128) + S 128 x 6,144 = 817,152 values) x 4 B
    # = 627,572,736 B
    ("qwen35", "Qwen--Qwen3.5-27B", qwen35, 1_073_741_824, 1_073_741_824, 627_572_736),
    # DeepSeek-V4-Flash (llama_kv_cache_dsv4, 4 K-only streams of 32,768 cells: unified_raw false), K rows
    # 512 x 2 B = 1,024 B: raw SWA GGML_PAD(min(32,768, 128 + 512), 256) = 768 cells x 4 x 43 layers x 1,024 =
    # 135,266,304; CSA cdiv(32,768, 4) = 8,192 cells x 4 x 21 x 1,024 = 704,643,072; HCA cdiv(32,768, 128) =
    # 256 x 4 x 20 x 1,024 = 20,971,520; indexer 8,192 x 4 x 21 x 128 x 2 = 176,160,768; K 1,037,041,664 B.
    # Compressor states (f32, 4 streams): CSA 2 x 1,024 x 8 x 4 x 4 B x 21 = 5,505,024; HCA 2 x 512 x 128 x
    # 4 x 4 x 20 = 41,943,040; indexer 2 x 256 x 8 x 4 x 4 x 21 = 1,376,256: 48,824,320 B
    ("deepseek4", "deepseek-ai--DeepSeek-V4-Flash", deepseek4, 1_037_041_664, 0, 48_824_320),
    # Kimi-K3: 24 MLA layers x 576 x 2 B x 32,768 = 905,969,664 B of K; 69 KDA layers x 4 seqs x (R 3 x 3 x
    # 96 x 128 + S 128 x 128 x 96 = 1,683,456 values) x 4 B = 1,858,535,424 B
    ("kimi-k3", "moonshotai--Kimi-K3", kimi_k3, 905_969_664, 0, 1_858_535_424),
    # Nemotron-3-Super (MTP block not in the caches): 8 attention layers x 2 x 128 x 2 B x 32,768 =
    # 134,217,728 B of K (V the same); 40 Mamba-2 layers x 4 seqs x (R 3 x (8,192 + 2 x 8 x 128) + S 128 x
    # 8,192 = 1,079,296 values) x 4 B = 690,749,440 B
    (
        "nemotron_h_moe",
        "nvidia--NVIDIA-Nemotron-3-Super-120B-A12B-FP8",
        nemotron_h_moe,
        134_217_728,
        134_217_728,
        690_749_440,
    ),
]


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    out = {}
    d = tmp_path_factory.mktemp("gguf2026")
    for arch, name, convert, *_ in CASES:
        out[name] = write_gguf(d / f"{name}.gguf", arch, convert(_config(name)), [])
    return out


#: the per-layer fields that size a cache
KV_FIELDS = (
    "kind",
    "n_kv_heads",
    "head_dim_k",
    "head_dim_v",
    "index_dim",
    "index_format",
    "v_is_k",
    "kv_source",
    "compress_ratio",
    "compressed_dim",
    "state_values",
)


def _kv_layers(model) -> list[tuple]:
    return [tuple(getattr(x, f) for f in KV_FIELDS) for x in model.layers]


@pytest.mark.parametrize(
    ("arch", "name", "k_bytes", "v_bytes", "state_bytes"),
    [pytest.param(a, n, k, v, s, id=n) for a, n, _, k, v, s in CASES],
)
def test_gguf_gives_the_configs_llamacpp_cache(written, arch, name, k_bytes, v_bytes, state_bytes):
    gguf = load_model(str(written[name]))
    hf = load_model(str(CONFIGS / f"{name}.json"))
    assert gguf.model_type == hf.model_type
    assert (gguf.n_layers, gguf.n_heads) == (hf.n_layers, hf.n_heads)
    assert _kv_layers(gguf) == _kv_layers(hf)
    results = [llamacpp.allocate(m, 32_768, F16, F16, options=LlamacppOptions()) for m in (gguf, hf)]
    for r in results:
        assert (r.k_bytes, r.v_bytes, r.engine_state_bytes or 0) == (k_bytes, v_bytes, state_bytes)
    assert results[0].log_lines == results[1].log_lines


def test_glm_dsa_without_indexer_types_takes_llama_cpps_defaults(tmp_path):
    """`src/models/glm-dsa.cpp` 58-65: no `attention.indexer.types` -> GLM-5.2's default list when
    context_length is 1,048,576 (the same 21 layers the config's indexer_types names), every layer
    when it is shorter (GLM-5 / 5.1)."""
    kv = glm_dsa(_config("zai-org--GLM-5.2"))
    del kv["attention.indexer.types"]
    m = load_model(str(write_gguf(tmp_path / "g52.gguf", "glm-dsa", kv, [])))
    hf = load_model(str(CONFIGS / "zai-org--GLM-5.2.json"))
    assert m.index_layers == hf.index_layers and sum(m.index_layers) == 21
    old = load_model(str(write_gguf(tmp_path / "g5.gguf", "glm-dsa", {**kv, "context_length": 202752}, [])))
    assert old.index_layers is None and all(x.index_dim == 128 for x in old.layers)


def test_deepseek4_nextn_counts_only_with_its_tensor(tmp_path):
    """`src/models/deepseek4.cpp`: nextn_predict_layers is dropped when blk.{n_layer}.nextn.eh_proj is
    not in the file (44 blocks, 1 NextN: 43 layers with the tensor, 44 without)."""
    c = _config("deepseek-ai--DeepSeek-V4-Flash")
    kv = {
        **deepseek4(c),
        "block_count": 44,
        "nextn_predict_layers": 1,
        "attention.compress_ratios": c["compress_ratios"] + [0],
    }
    without = load_model(str(write_gguf(tmp_path / "a.gguf", "deepseek4", kv, [])))
    with_mtp = load_model(
        str(write_gguf(tmp_path / "b.gguf", "deepseek4", kv, [("blk.43.nextn.eh_proj.weight", "F32", (8,))]))
    )
    assert (without.n_layers, without.n_mtp_layers) == (44, 0)
    assert (with_mtp.n_layers, with_mtp.n_mtp_layers) == (43, 1)


REFUSALS = [
    # (arch, config, converter, change, field, words)
    (
        "gemma4",
        "google--gemma-4-26B-A4B",
        gemma4,
        {"attention.value_length": 256},
        "gemma4.attention.value_length",
        "Gemma 4 requires n_embd_head_k == n_embd_head_v",
    ),
    (
        "gemma4",
        "google--gemma-4-26B-A4B",
        gemma4,
        {"attention.sliding_window_pattern": [True] * 29},
        "gemma4.attention.sliding_window_pattern",
        "lists 29 layers but the model has 30",
    ),
    (
        "deepseek32",
        "deepseek-ai--DeepSeek-V3.2",
        deepseek32,
        {"attention.key_length_mla": None},
        "deepseek32.attention.key_length_mla",
        "predates llama.cpp's MLA latent cache",
    ),
    (
        "deepseek4",
        "deepseek-ai--DeepSeek-V4-Flash",
        deepseek4,
        {"attention.compress_ratios": [16] * 43},
        "deepseek4.attention.compress_ratios",
        "holds 16",
    ),
    (
        "deepseek4",
        "deepseek-ai--DeepSeek-V4-Flash",
        deepseek4,
        {"attention.compress_ratios": [4] * 42},
        "deepseek4.attention.compress_ratios",
        "shorter than block_count",
    ),
    (
        "mimo2",
        "XiaomiMiMo--MiMo-V2-Flash",
        mimo2,
        {"attention.head_count_kv": [4, 8] * 24},
        "mimo2.attention.head_count_kv",
        "kvcalc models one count per kind of layer",
    ),
    ("qwen35", "Qwen--Qwen3.5-27B", qwen35, {"ssm.inner_size": 6001}, "qwen35.ssm.time_step_rank", "does not divide"),
]


@pytest.mark.parametrize(
    ("arch", "name", "convert", "change", "field", "words"), REFUSALS, ids=[r[4] + "-" + r[5][:12] for r in REFUSALS]
)
def test_gguf_2026_refusals_name_the_key(tmp_path, arch, name, convert, change, field, words):
    kv = {k: v for k, v in {**convert(_config(name)), **change}.items() if v is not None}
    with pytest.raises(ConfigError) as e:
        load_model(str(write_gguf(tmp_path / "x.gguf", arch, kv, [])))
    assert e.value.field == field
    assert words in str(e.value)
