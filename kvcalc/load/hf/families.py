"""One mapping per Hugging Face `model_type` family -> `ModelSpec` fields, and the `FAMILIES`
table `kvcalc.load.hf` dispatches on. A family is data (`Family`: config keys -> fields with the
transformers class's defaults, the layer-kind rule, the window; see `kvcalc.load.hf.family`) plus
the few functions no table says, each in its slot of the reading: a `build` hook for fields (the
Qwen window, Llama-4's MoE period) and a `layers` rule for the per-layer kinds (EXAONE-4's pattern
string, Llama-4's chunks). The hybrids with state-space or linear-attention layers (Qwen3-Next,
Qwen3.5, Jamba, Nemotron-H, Granite-4.0-H, Falcon-H1) are in `kvcalc.load.hf.families_hybrid`,
the pre-Llama families (Falcon, GPT-2, ChatGLM, MPT, DBRX) in `kvcalc.load.hf.families_legacy`,
the 2026 families in `kvcalc.load.hf.families_2026` (GLM-5 and Kimi-K3 are still functions there).
Each reads the fields its transformers configuration class reads, with that class's defaults; the
rules are listed in `kvcalc.load.hf`'s docstring.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from kvcalc.load.fields import ModelFields
from kvcalc.load.hf.families_2026 import FAMILIES_2026, TEXT_MODEL_TYPES_2026
from kvcalc.load.hf.families_hybrid import (
    FALCON_H1,
    GRANITEMOEHYBRID,
    JAMBA,
    NEMOTRON_H,
    QWEN3_5_MOE_TEXT,
    QWEN3_5_TEXT,
    QWEN3_NEXT,
)
from kvcalc.load.hf.families_legacy import CHATGLM, DBRX, FALCON, GPT2, GPT_BIGCODE, MPT
from kvcalc.load.hf.family import Family, Kinds
from kvcalc.load.hf.mla import DEEPSEEK as _deepseek
from kvcalc.load.hf.reader import (
    _Cfg,
    _kinds_from_layer_types,
    _qwen_experts,
    _qwen_window_kinds,
    _set_kinds,
    _shown,
)

# ----- the families that are data ----------------------------------------------------------

#: llama (`configuration_llama.py`): max_position_embeddings 2048, untied, no bias; `layer_types`
#: when the config lists them, with its sliding_window.
LLAMA = Family(source="configuration_llama.py", decoder=dict(max_pos=2048), window=("sliding_window", None))

#: mistral (`configuration_mistral.py`): sliding_window defaults to 4096 and, when set, applies to
#: every layer (Mistral-7B-v0.1); null means none (v0.2+).
MISTRAL = Family(
    source="configuration_mistral.py",
    decoder=dict(max_pos=4096 * 32),
    kinds=Kinds(rest="sliding"),
    window=("sliding_window", 4096),
)

#: phi3 (`configuration_phi3.py`): like mistral, a set sliding_window applies to every layer
#: (Phi-3-mini-4k: 2047); default null.
PHI3 = Family(
    source="configuration_phi3.py",
    decoder=dict(max_pos=4096),
    kinds=Kinds(rest="sliding"),
    window=("sliding_window", None),
)

#: gemma (`configuration_gemma.py`): head_dim 256, tied embeddings, 8192 context.
GEMMA = Family(source="configuration_gemma.py", decoder=dict(head_dim=256, tie=True, max_pos=8192))

#: gemma2 (`configuration_gemma2.py`): layer_types, else layer i slides when i % 2 == 0
#: (`"sliding_attention" if bool((i + 1) % 2)`); window 4096 by default; head_dim 256; tied.
GEMMA2 = Family(
    source="configuration_gemma2.py",
    decoder=dict(head_dim=256, tie=True, max_pos=8192),
    kinds=Kinds(nth="full", rest="sliding", every=2),
    window=("sliding_window", 4096),
)

#: gemma3_text (`configuration_gemma3.py` Gemma3TextConfig): layer_types, else layer i is global
#: when (i + 1) % sliding_window_pattern == 0 (default 6: 5 local then 1 global); window 4096, 8
#: heads, 4 KV heads, head_dim 256, vocab 262208, 131072 context, tied, by default (gemma-3-4b's
#: text_config relies on the head defaults).
GEMMA3_TEXT = Family(
    source="configuration_gemma3.py Gemma3TextConfig",
    decoder=dict(head_dim=256, n_heads=8, n_kv_heads=4, tie=True, max_pos=131072),
    counts={"vocab_size": (("vocab_size",), 262208)},
    kinds=Kinds(nth="full", rest="sliding", every=6, every_keys=("sliding_window_pattern", "_sliding_window_pattern")),
    window=("sliding_window", 4096),
)

#: olmo2 (`configuration_olmo2.py`): a llama decoder (q/k norms aside), 2048 context by default,
#: MHA unless num_key_value_heads says otherwise, no window, untied.
OLMO2 = Family(source="configuration_olmo2.py", decoder=dict(max_pos=2048))

#: starcoder2 (`configuration_starcoder2.py`: hidden 3072, 30 layers, 24 heads, 2 KV heads,
#: max_position_embeddings 4096, sliding_window 4096, use_bias true; `modeling_starcoder2.py`: a
#: plain GELU MLP c_fc / c_proj of intermediate_size, biased projections, the window on every layer
#: as Mistral; vLLM `starcoder2.py` likewise). Tied unless the config says otherwise
#: (PretrainedConfig's default).
STARCODER2 = Family(
    source="configuration_starcoder2.py",
    decoder=dict(max_pos=4096, tie=True),
    flags={"attention_bias": (("use_bias",), True)},
    fixed={"mlp_kind": "plain"},
    kinds=Kinds(rest="sliding"),
    window=("sliding_window", 4096),
)

#: cohere2, Command R7B (`configuration_cohere2.py`): layer_types, else layer i slides when (i + 1)
#: % sliding_window_pattern != 0 (default 4: three sliding then one global); window 4096;
#: embeddings tied (use_embedding_sharing); 8192 context by default.
COHERE2 = Family(
    source="configuration_cohere2.py",
    decoder=dict(max_pos=8192, tie=True),
    flags={"tie_word_embeddings": (("use_embedding_sharing", "tie_word_embeddings"), True)},
    kinds=Kinds(nth="full", rest="sliding", every=4, every_keys=("sliding_window_pattern", "_sliding_window_pattern")),
    window=("sliding_window", 4096),
)


def _glm4_moe_experts(c: _Cfg, f: ModelFields) -> ModelFields:
    """GLM-4.5's experts: n_shared_experts (1) shared experts of the routed width; the first
    first_k_dense_replace (1) layers dense."""
    f["first_dense_layers"] = c.count("first_k_dense_replace", default=1, minimum=0)
    shared = c.count("n_shared_experts", default=1, minimum=0)
    if shared:
        f["shared_expert_intermediate_size"] = shared * f["moe_intermediate_size"]
    return f


#: glm4_moe, GLM-4.5 / GLM-4.5-Air / GLM-4.6 (`configuration_glm4_moe.py`: hidden 4096, 46 layers,
#: 96 heads, 8 KV heads, head_dim 128, 131,072 context, vocab 151552; n_routed_experts 128 of
#: moe_intermediate_size 1408, 8 per token, n_shared_experts 1, the first first_k_dense_replace (1)
#: layers dense of intermediate_size 10944; attention_bias false by default). The MTP layers
#: (num_nextn_predict_layers, 0 when absent: vLLM 0.33.0 `vllm/config/speculative.py` gives
#: glm4_moe_mtp n_predict = num_nextn_predict_layers) are not in num_hidden_layers.
GLM4_MOE = Family(
    source="configuration_glm4_moe.py",
    decoder=dict(max_pos=131072, head_dim=128, n_kv_heads=8),
    counts={
        "n_experts": (("n_routed_experts",), 128),
        "n_experts_per_token": (("num_experts_per_tok",), 8),
        "moe_intermediate_size": (("moe_intermediate_size",), 1408),
        "n_mtp_layers": (("num_nextn_predict_layers",), 0),
    },
    build=_glm4_moe_experts,
)

#: mixtral (`configuration_mixtral.py`): sliding_window defaults to null; every layer is sparse,
#: and `intermediate_size` is the expert width (there is no dense MLP).
MIXTRAL = Family(
    source="configuration_mixtral.py",
    decoder=dict(max_pos=4096 * 32),
    counts={"n_experts": (("num_local_experts",), 8), "n_experts_per_token": (("num_experts_per_tok",), 2)},
    rename={"intermediate_size": "moe_intermediate_size"},
    kinds=Kinds(rest="sliding"),
    window=("sliding_window", None),
)

#: gpt_neox (`configuration_gpt_neox.py`): MHA, plain GELU MLP, untied, QKV bias (default true),
#: 2048 context.
GPT_NEOX = Family(
    source="configuration_gpt_neox.py", decoder=dict(max_pos=2048, bias=True), fixed={"mlp_kind": "plain"}
)

#: gpt_oss (`configuration_gpt_oss.py`): layer_types, else layer i slides when i % 2 == 0; window
#: 128, 8 KV heads x 64 by default; every layer sparse: num_local_experts of intermediate_size
#: (2880), experts_per_token / num_experts_per_tok (4); QKV bias; untied.
GPT_OSS = Family(
    source="configuration_gpt_oss.py",
    decoder=dict(head_dim=64, n_kv_heads=8, max_pos=131072, bias=True),
    counts={
        "moe_intermediate_size": (("intermediate_size",), 2880),
        "n_experts": (("num_local_experts", "num_experts"), 128),
        "n_experts_per_token": (("experts_per_token", "num_experts_per_tok"), 4),
    },
    rename={"intermediate_size": "moe_intermediate_size"},
    kinds=Kinds(nth="full", rest="sliding", every=2),
    window=("sliding_window", 128),
)

# ----- the families whose rules are code ---------------------------------------------------


def _qwen_window(c: _Cfg, f: ModelFields) -> ModelFields:
    """`Family.build` of Qwen2 / Qwen3: the kinds and window of `_qwen_window_kinds`."""
    kinds, window = _qwen_window_kinds(c, f)
    return _set_kinds(c, f, kinds, window)


def _qwen_moe(
    n_experts: int, per_token: int, width: int, shared: int | None = None
) -> Callable[[_Cfg, ModelFields], ModelFields]:
    """`Family.build` of a Qwen MoE: `_qwen_window`, then `_qwen_experts` with these defaults."""

    def build(c: _Cfg, f: ModelFields) -> ModelFields:
        return _qwen_experts(
            c, _qwen_window(c, f), n_experts=n_experts, per_token=per_token, width=width, shared=shared
        )

    return build


#: qwen2 (`configuration_qwen2.py`, `modeling_qwen2.py`): q/k/v projections always have a bias;
#: untied by default; see `_qwen_window_kinds`.
QWEN2 = Family(
    source="configuration_qwen2.py",
    decoder=dict(max_pos=32768, bias=True),
    fixed={"attention_bias": True},
    build=_qwen_window,
    set_kinds=False,
)

#: qwen2_moe (`configuration_qwen2_moe.py`): qwen2 attention; 60 experts of 1408, 4 per token, one
#: shared expert of 5632 by default; `intermediate_size` is the dense MLP.
QWEN2_MOE = replace(QWEN2, source="configuration_qwen2_moe.py", build=_qwen_moe(60, 4, 1408, shared=5632))

#: qwen3 (`configuration_qwen3.py`): head_dim defaults to 128 (explicit in Qwen3-4B, where hidden
#: 2560 / 32 heads = 80 would be wrong); attention_bias default false.
QWEN3 = Family(
    source="configuration_qwen3.py", decoder=dict(max_pos=32768, head_dim=128), build=_qwen_window, set_kinds=False
)

#: qwen3_moe (`configuration_qwen3_moe.py`): qwen3 attention; 128 experts of 768, 8 per token, no
#: shared expert by default.
QWEN3_MOE = replace(QWEN3, source="configuration_qwen3_moe.py", build=_qwen_moe(128, 8, 768))


# ----- issue 9 item 6: families users serve today ------------------------------------------


#: EXAONE-4's default kinds: layer_types, else layer i global when (i + 1) %
#: sliding_window_pattern == 0 (default 4: three local then one global)
_EXAONE4_KINDS = Kinds(nth="full", rest="sliding", every=4, every_keys=("sliding_window_pattern",))


def _exaone4_layers(c: _Cfg, f: ModelFields, window: int | None) -> list[str] | None:
    """`Family.layers` of EXAONE-4: `_EXAONE4_KINDS`, except that without a window (and without
    layer_types) every layer is global, and that a sliding_window_pattern written as a string of
    L (local) and G (global), as the published EXAONE-4.0-32B writes "LLLG", repeats over the
    layers."""
    pattern = c.get("sliding_window_pattern")
    if c.get("layer_types") is None and window is None:
        return None
    if c.get("layer_types") is None and isinstance(pattern, str):
        if not pattern or set(pattern) - {"L", "G"}:
            raise c.fail(
                f"must be a count or a string of L (local) and G (global), got {_shown(pattern)}",
                "sliding_window_pattern",
            )
        return ["sliding" if pattern[i % len(pattern)] == "L" else "full" for i in range(f["n_layers"] or 0)]
    return _EXAONE4_KINDS.read(c, f["n_layers"])


#: exaone4 (`configuration_exaone4.py`): layer_types, else with a sliding_window (default 4096)
#: layer i slides when (i + 1) % sliding_window_pattern != 0 (default 4), and with none every
#: layer is global; the pattern may be a string of L and G (`_exaone4_layers`). Untied, no bias,
#: 131,072 context by default.
EXAONE4 = Family(
    source="configuration_exaone4.py",
    decoder=dict(max_pos=131072),
    window=("sliding_window", 4096),
    layers=_exaone4_layers,
)


def _llama4_layers(c: _Cfg, f: ModelFields, chunk: int | None) -> list[str]:
    """`Family.layers` of Llama 4: `layer_types` (chunked_attention / full_attention) wins; else
    `no_rope_layers[i]` is 1 for a RoPE (chunked) layer and 0 for a NoPE global layer; when absent
    or empty, layer i is global when (i + 1) % no_rope_layer_interval == 0 (4). A chunked layer
    is written as sliding (its window is the chunk); with attention_chunk_size null it is full."""
    n = f["n_layers"] or 0
    if c.get("layer_types") is not None:
        kinds = _kinds_from_layer_types(c, n, aliases={"chunked_attention": "sliding"})
    else:
        rope = c.get("no_rope_layers")
        if rope:
            if not isinstance(rope, list) or len(rope) != n or any(v not in (0, 1) or type(v) is bool for v in rope):
                raise c.fail(
                    f"must list 0 (NoPE, global) or 1 (RoPE, chunked) for each of the {n} layers", "no_rope_layers"
                )
        else:
            every = c.count("no_rope_layer_interval", default=4)
            rope = [int((i + 1) % every != 0) for i in range(n)]
        kinds = ["sliding" if r else "full" for r in rope]
    if chunk is None:
        kinds = ["full" if k == "sliding" else k for k in kinds]
    return kinds


def _llama4_moe_layers(c: _Cfg, f: ModelFields) -> ModelFields:
    """`Family.build` of Llama 4: experts on the layers i with (i + 1) % interleave_moe_layer_step
    == 0 (1: every layer); a `moe_layers` list other than those is refused."""
    step = c.count("interleave_moe_layer_step", default=1)
    if step > 1:
        f["moe_layer_period"], f["moe_layer_offset"] = step, step - 1
    moe_layers = c.get("moe_layers")
    if moe_layers is not None and not isinstance(moe_layers, list):
        raise c.fail(f"must be a list of layer indices, got {_shown(moe_layers)}", "moe_layers")
    if moe_layers is not None and moe_layers != list(range(step - 1, f["n_layers"] or 0, step)):
        raise c.fail(
            f"lists MoE layers other than every {step}-th (interleave_moe_layer_step); kvcalc places "
            "experts by a period: write a kvcalc YAML",
            "moe_layers",
        )
    return f


#: llama4_text, the text model of Llama 4 Scout / Maverick (`configuration_llama4.py`
#: Llama4TextConfig; `modeling_llama4.py`; vLLM `llama4.py`: `use_chunked_local_attn = not nope
#: and attention_chunk_size`). Layers that use RoPE attend within chunks of attention_chunk_size
#: (8192), so they cache at most one chunk: written as a window of that size (`_llama4_layers`).
#: MoE (`_llama4_moe_layers`): num_local_experts (16) of intermediate_size (8192),
#: num_experts_per_tok (1), plus a shared expert of the same width; the dense layers' MLP is
#: intermediate_size_mlp (16384). Defaults: 48 layers, 40 heads, 8 KV heads, head_dim 128, hidden
#: 5120, vocab 202048, untied.
LLAMA4_TEXT = Family(
    source="configuration_llama4.py Llama4TextConfig",
    decoder=dict(max_pos=4096 * 32, head_dim=128, n_kv_heads=8),
    counts={
        "intermediate_size": (("intermediate_size_mlp",), 16384),
        "n_experts": (("num_local_experts",), 16),
        "n_experts_per_token": (("num_experts_per_tok",), 1),
        "moe_intermediate_size": (("intermediate_size",), 8192),
        "shared_expert_intermediate_size": (("intermediate_size",), 8192),
        "vocab_size": (("vocab_size",), 202048),
    },
    build=_llama4_moe_layers,
    window=("attention_chunk_size", 8192),
    layers=_llama4_layers,
)


#: deepseek_v32, DeepSeek-V3.2(-Exp) (DeepSeek's `configuration_deepseek_v32.py` / vLLM
#: `deepseek_v2.py` with `is_v32`): DeepSeek-V3's MLA and experts (`mla.DEEPSEEK`) plus the
#: lightning indexer, which caches one key of index_head_dim (128) per token per layer beside the
#: latent (index_n_heads query heads, index_topk tokens attended: neither changes the cache). The
#: indexer key is sized as fp8 + one fp32 scale per 128 values (`kv_cache.indexer_bytes_per_token`).
DEEPSEEK_V32 = replace(
    _deepseek,
    source="configuration_deepseek_v32.py",
    counts={**_deepseek.counts, "index_head_dim": (("index_head_dim",), 128)},
)


#: model_type -> mapping function. Aliases: Falcon's old RW names; Kimi-K2 is DeepSeek-V3.
FAMILIES: dict[str, Family | Callable[[_Cfg], ModelFields]] = {
    "llama": LLAMA,
    "mistral": MISTRAL,
    "mixtral": MIXTRAL,
    "phi3": PHI3,
    "qwen2": QWEN2,
    "qwen2_moe": QWEN2_MOE,
    "qwen3": QWEN3,
    "qwen3_moe": QWEN3_MOE,
    "qwen3_next": QWEN3_NEXT,
    "gemma": GEMMA,
    "gemma2": GEMMA2,
    "gemma3": GEMMA3_TEXT,
    "gemma3_text": GEMMA3_TEXT,
    "falcon": FALCON,
    "RefinedWeb": FALCON,
    "RefinedWebModel": FALCON,
    "gpt2": GPT2,
    "gpt_neox": GPT_NEOX,
    "gpt_bigcode": GPT_BIGCODE,
    "chatglm": CHATGLM,
    "mpt": MPT,
    "dbrx": DBRX,
    "deepseek_v2": _deepseek,
    "deepseek_v3": _deepseek,
    "kimi_k2": _deepseek,
    "gpt_oss": GPT_OSS,
    "jamba": JAMBA,
    "starcoder2": STARCODER2,
    "olmo2": OLMO2,
    "cohere2": COHERE2,
    "exaone4": EXAONE4,
    "glm4_moe": GLM4_MOE,
    "llama4": LLAMA4_TEXT,
    "llama4_text": LLAMA4_TEXT,
    "deepseek_v32": DEEPSEEK_V32,
    "qwen3_5": QWEN3_5_TEXT,
    "qwen3_5_text": QWEN3_5_TEXT,
    "qwen3_5_moe": QWEN3_5_MOE_TEXT,
    "qwen3_5_moe_text": QWEN3_5_MOE_TEXT,
    "nemotron_h": NEMOTRON_H,
    "granitemoehybrid": GRANITEMOEHYBRID,
    "falcon_h1": FALCON_H1,
    "qwen3_vl": QWEN3,
    "qwen3_vl_text": QWEN3,
    **FAMILIES_2026,
}

#: a multimodal config's text model_type when its text_config does not say.
#: The multimodal wrappers here keep their text model under text_config (transformers'
#: `Llama4Config`, `Qwen3_5Config`, `Mistral3Config` (Mistral Small 3.1), `AyaVisionConfig`,
#: `Cohere2VisionConfig`, `LlavaConfig`); a text_config that names its own model_type wins.
TEXT_MODEL_TYPES = {
    "gemma3": "gemma3_text",
    "llama4": "llama4_text",
    "qwen3_5": "qwen3_5_text",
    "qwen3_5_moe": "qwen3_5_moe_text",
    "mistral3": "mistral",
    "aya_vision": "cohere2",
    "cohere2_vision": "cohere2",
    "llava": "llama",
    **TEXT_MODEL_TYPES_2026,
}
