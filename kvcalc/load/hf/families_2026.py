"""The 2026 families as data (`Family`): Gemma-4, MiMo-V2-Flash, DeepSeek-V4, GLM-5 (DSA), Kimi-K3
(Kimi Linear), MiniMax-M2 / M3, Step-3.7, Qwen3-VL, each with the few rules a table cannot say.

Sources (read for the exact cache shapes; each family's docstring names its lines):
transformers 5.24.0 `models/<family>/configuration_*.py` and `modeling_*.py` (the reference
modelling code), and vLLM 0.33.0 `model_executor/models/` / `models/` where the publisher's
checkpoint carries keys transformers renames. A sibling variant (DeepSeek-V4-Pro beside Flash,
Gemma-4-31B beside 26B-A4B, Qwen3.5-397B beside 27B) is the same mapping read on its own config:
nothing here names a model, only config keys.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kvcalc.load.hf.family import Family, Kinds
from kvcalc.load.hf.mla import DEEPSEEK
from kvcalc.load.hf.reader import _Cfg, _set_kinds, _shown


def _first_dense(c: _Cfg, f: dict[str, Any], key: str, dense: tuple[object, ...]) -> None:
    """Experts placed by a per-layer list (`moe_layer_freq` [0, 0, 0, 1, ...], `mlp_layer_types`
    ["dense", ..., "sparse"]): kvcalc places them as `first_dense_layers` then every layer, so the
    list must be some dense layers then only sparse ones; anything else is refused by name."""
    raw = c.get(key)
    if raw is None:
        return
    n = f.get("n_layers") or 0
    if not isinstance(raw, list) or len(raw) < n:
        raise c.fail(f"must list the MLP of each of the {n} layers, got {_shown(raw)}", key)
    raw = raw[:n]
    k = next((i for i, v in enumerate(raw) if v not in dense), n)
    if any(v in dense for v in raw[k:]):
        raise c.fail(
            "places dense layers after sparse ones; kvcalc places experts as the first dense layers then "
            "every layer: write a kvcalc YAML",
            key,
        )
    f["first_dense_layers"] = k


# ----- Gemma-4 --------------------------------------------------------------------------------


def _gemma4(c: _Cfg, f: dict[str, Any]) -> dict[str, Any]:
    """gemma4_text (transformers `configuration_gemma4.py` Gemma4TextConfig.__post_init__,
    `modeling_gemma4.py` Gemma4TextAttention):

    - full-attention layers take `global_head_dim` (default 512) as their head size, and, when
      `attention_k_eq_v`, `num_global_key_value_heads` as their KV heads (`per_layer_config`);
      with `attention_k_eq_v` their V is projected by k_proj (no v_proj), but K (k_norm with a
      scale, RoPE) and V (v_norm without scale, no RoPE) are cached as two tensors;
    - the last `num_kv_shared_layers` layers read the cache of the last earlier layer of their
      type (`kv_sharing_modes`) and cache nothing;
    - `use_bidirectional_attention: "all"` makes the window sliding_window // 2 + 1;
    - every layer has a dense MLP of intermediate_size; with `enable_moe_block` also a router
      and `num_experts` experts of moe_intermediate_size, `top_k_experts` per token, in
      parallel (counted as the dense MLP being a shared expert).
    """
    global_kv = c.count("num_global_key_value_heads")
    k_eq_v = c.flag("attention_k_eq_v", default=False)
    full: dict[str, Any] = {"head_dim": c.count("global_head_dim", default=512)}
    if k_eq_v and global_kv is not None:
        full["n_kv_heads"] = global_kv
    if k_eq_v:
        full["k_eq_v"] = True
    f["kind_geometry"] = {"full": full}
    f["n_kv_shared_layers"] = c.count("num_kv_shared_layers", default=0, minimum=0)
    if c.count("hidden_size_per_layer_input", default=0, minimum=0):
        f["weights_unknown"] = (
            "Gemma-4's per-layer input embeddings (hidden_size_per_layer_input) are not counted by kvcalc"
        )
    if c.flag("enable_moe_block", default=False):
        f.update(
            n_experts=c.count("num_experts", default=None),
            n_experts_per_token=c.count("top_k_experts"),
            moe_intermediate_size=c.count("moe_intermediate_size"),
            shared_expert_intermediate_size=f.pop("intermediate_size", None),
        )
    window = c.int_or_null("sliding_window", 512)
    if window is not None and c.get("use_bidirectional_attention") == "all":
        window = window // 2 + 1
    kinds = GEMMA4_KINDS.read(c, f["n_layers"])
    return _set_kinds(c, f, kinds, window)


GEMMA4_KINDS = Kinds(nth="full", rest="sliding", every=6, last="full")

GEMMA4 = Family(
    source="transformers configuration_gemma4.py Gemma4TextConfig / modeling_gemma4.py",
    decoder=dict(head_dim=256, n_heads=8, n_kv_heads=4, tie=True, max_pos=131072),
    counts={"vocab_size": (("vocab_size",), 262144), "intermediate_size": (("intermediate_size",), 9216)},
    build=_gemma4,
    set_kinds=False,
    ignored={
        "vocab_size_per_layer_input": "the per-layer embedding table (weights)",
        "use_double_wide_mlp": "MLP width of the shared layers (weights)",
    },
)


# ----- MiMo-V2-Flash --------------------------------------------------------------------------


def _mimo_v2(c: _Cfg, f: dict[str, Any]) -> dict[str, Any]:
    """mimo_v2_flash (transformers `configuration_mimo_v2_flash.py`, `modeling_mimo_v2_flash.py`
    MiMoV2FlashAttention; vLLM 0.33.0 `mimo_v2.py` reads the swa_* keys):

    - layer kinds: `layer_types`, else `hybrid_layer_pattern` (0 full, 1 sliding: vLLM
      `is_sliding = hybrid_layer_pattern[i] == 1`), else layer 0 and every 6th full;
    - full layers: num_key_value_heads (4) heads, K head_dim (192), V v_head_dim (128);
    - sliding layers: "SWA layers double the kv heads": 2 x num_key_value_heads, the same head
      sizes; the published config also states them as swa_num_key_value_heads / swa_head_dim /
      swa_v_head_dim (what vLLM reads): a value disagreeing with transformers' is refused;
    - the window: `sliding_window_size` + 1 when given ("attends to sliding_window_size previous
      tokens plus the query"), else sliding_window (default 129);
    - `gguf_sliding_window`: the config's sliding_window, the n_swa llama.cpp's converter writes;
    - attention sinks: one logit per query head on the SWA layers
      (`add_swa_attention_sink_bias`; `add_full_attention_sink_bias` for the full ones): weights;
    - `attention_chunk_size`: not read by transformers' nor vLLM's MiMo-V2 code (the SWA layers
      slide, they are not chunked), so it does not shape the cache.
    """
    n = f["n_layers"] or 0
    kinds = MIMO_KINDS.read(c, n) or ["full" if i == 0 or not (i + 1) % 6 else "sliding" for i in range(n)]
    kv = f.get("n_kv_heads") or f["n_heads"]
    dk, dv = f.get("head_dim"), f.get("v_head_dim")
    for key, want in (("swa_num_key_value_heads", 2 * kv), ("swa_head_dim", dk), ("swa_v_head_dim", dv)):
        got = c.count(key)
        if got is not None and want is not None and got != want:
            raise c.fail(
                f"is {got}, but transformers' MiMo-V2-Flash gives its sliding layers {want} (vLLM reads "
                f"{key}, transformers derives it): they disagree, so kvcalc will not choose",
                key,
            )
    if c.count("swa_num_attention_heads") not in (None, f["n_heads"]):
        raise c.fail(
            "differs from num_attention_heads; transformers' MiMo-V2-Flash uses num_attention_heads on every layer",
            "swa_num_attention_heads",
        )
    f["kind_geometry"] = {"sliding": {"n_kv_heads": 2 * kv}}
    f["attention_sinks"] = [
        k
        for k, key in (("sliding", "add_swa_attention_sink_bias"), ("full", "add_full_attention_sink_bias"))
        if c.flag(key, default=False)
    ] or None
    size = c.count("sliding_window_size")
    window = size + 1 if size is not None else c.int_or_null("sliding_window", 129)
    # llama.cpp's converter writes the config's sliding_window as n_swa (conversion/mimo.py 159; none without it)
    f["gguf_sliding_window"] = c.int_or_null("sliding_window", None)
    shared = c.count("n_shared_experts", minimum=0)
    if shared and f.get("moe_intermediate_size"):
        f["shared_expert_intermediate_size"] = shared * f["moe_intermediate_size"]
    _first_dense(c, f, "moe_layer_freq", (0, False))
    if c.get("mlp_layer_types") is not None:
        _first_dense(c, f, "mlp_layer_types", ("dense",))
    elif c.get("moe_layer_freq") is None:
        f["first_dense_layers"] = 1  # "First layer is a dense MLP, the rest are MoE"
    return _set_kinds(c, f, kinds, window)


MIMO_KINDS = Kinds(codes=("hybrid_layer_pattern", {0: "full", 1: "sliding"}))

MIMO_V2_FLASH = Family(
    source="transformers configuration_mimo_v2_flash.py / modeling_mimo_v2_flash.py; vLLM 0.33.0 mimo_v2.py",
    decoder=dict(head_dim=192, n_heads=64, n_kv_heads=4, max_pos=131072),
    counts={
        "v_head_dim": (("v_head_dim",), 128),
        "vocab_size": (("vocab_size",), 152576),
        "n_experts": (("n_routed_experts",), 256),
        "n_experts_per_token": (("num_experts_per_tok",), 8),
        "moe_intermediate_size": (("moe_intermediate_size",), 2048),
    },
    build=_mimo_v2,
    set_kinds=False,
    ignored={
        "attention_chunk_size": "read by neither transformers' nor vLLM's MiMo-V2 code: the SWA layers slide",
        "swa_rope_theta": "RoPE base of the SWA layers",
        "attention_value_scale": "a scalar on V, no cache",
    },
)


# ----- DeepSeek-V4 ----------------------------------------------------------------------------

#: transformers `configuration_deepseek_v4.py` `_COMPRESS_RATIO_TO_LAYER_TYPE` and its layer types
# each layer type's key in the compress rates ("": not compressed, ratio 0)
_V4_TYPES: dict[str, str] = {
    "sliding_attention": "",
    "compressed_sparse_attention": "csa",
    "heavily_compressed_attention": "hca",
}


def _deepseek_v4(c: _Cfg, f: dict[str, Any]) -> dict[str, Any]:
    """deepseek_v4, DeepSeek-V4-Flash / -Pro (transformers `configuration_deepseek_v4.py`
    DeepseekV4Config.__post_init__, `modeling_deepseek_v4.py` DeepseekV4HCACache /
    DeepseekV4CSACache / DeepseekV4Indexer; the paper's sections 2.3.1-2.3.2):

    - every layer keeps a sliding window of `sliding_window` (128) tokens of ONE tensor of
      head_dim (512) that is both K and V ("shared-KV MQA": `self.values = self.keys`);
    - layer i's `compress_ratios[i]` (the published key; transformers folds it into
      `layer_types`: 0 sliding only, 4 compressed sparse attention, 128 heavily compressed; the
      list is cut to num_hidden_layers, its last entries being the MTP layers'): beside the
      window, one compressed entry of head_dim values per ratio tokens;
    - CSA layers also run the lightning indexer, whose keys (index_head_dim, 128) are
      compressed over the same windows: one per ratio tokens, sized as DeepSeek's fp8 keys with
      a fp32 scale per 128 (vLLM 0.33.0 `deepseek_v4/attention.py`: 128 + 4 = 132 B);
    - with neither list, transformers' default: two HCA layers, then HCA and CSA alternating.

    The weights (hyper-connections, grouped output projection, compressors, hash-routed layers)
    are not counted by kvcalc: give n_params. `expert_dtype` fp4 means MXFP4 routed experts
    (vLLM 0.33.0 `models/deepseek_v4/quant_config.py`).
    """
    n = f["n_layers"] or 0
    rates = {"csa": 4, "hca": 128}
    given = c.mapping("compress_rates")
    for name, key in (("csa", "compressed_sparse_attention"), ("hca", "heavily_compressed_attention")):
        if key in given:
            rates[name] = c.check_int(f"compress_rates.{key}", given[key], minimum=2)
    raw = c.get("layer_types")
    if raw is not None:
        if not isinstance(raw, list) or len(raw) < n or any(t not in _V4_TYPES for t in raw[:n]):
            raise c.fail(f"must list {', '.join(_V4_TYPES)} for each of the {n} layers", "layer_types")
        names = [t for t in raw[:n] if isinstance(t, str)]  # every one, checked above
        ratios = [rates.get(_V4_TYPES[t], 0) for t in names]
    elif c.get("compress_ratios") is not None:
        raw = c.data["compress_ratios"]
        if (
            not isinstance(raw, list)
            or len(raw) < n
            or any(type(r) is not int or r not in (0, 4, 128) for r in raw[:n])
        ):
            raise c.fail(
                f"must list 0 (sliding window only), 4 (CSA) or 128 (HCA) for each of the {n} layers, got "
                f"{_shown(raw)}",
                "compress_ratios",
            )
        ratios = [{0: 0, 4: rates["csa"], 128: rates["hca"]}[r] for r in raw[:n]]
    else:
        ratios = [rates["hca"]] * min(n, 2) + [rates["csa"] if i % 2 else rates["hca"] for i in range(max(n - 2, 0))]
    f.update(
        v_is_k=True,
        compress_ratios=ratios,
        index_head_dim=c.count("index_head_dim", default=128),
        index_layers=[int(r == rates["csa"]) for r in ratios],
        weights_unknown="DeepSeek-V4's hyper-connections, grouped output projection, compressors and indexer "
        "are not counted by kvcalc",
    )
    expert = c.get("expert_dtype")
    if expert is not None and expert not in ("fp4", "fp8"):
        raise c.fail(
            f"must be fp4 or fp8 (vLLM 0.33.0 deepseek_v4/quant_config.py), got {_shown(expert)}", "expert_dtype"
        )
    if expert == "fp4":  # "expert_dtype='fp4' (e.g. DeepSeek-V4-Flash): MXFP4 experts"; fp8: as the rest
        f["expert_weight_dtype"] = "mxfp4"
    if f["n_kv_heads"] != 1:
        raise c.fail(
            f"is {f['n_kv_heads']}; DeepSeek-V4's attention is shared-KV MQA with one KV head "
            "(transformers' DeepseekV4Attention broadcasts one head)",
            "num_key_value_heads",
        )
    shared = c.count("n_shared_experts", minimum=0)
    if shared and f.get("moe_intermediate_size"):
        f["shared_expert_intermediate_size"] = shared * f["moe_intermediate_size"]
    return _set_kinds(c, f, ["sliding"] * n, c.int_or_null("sliding_window", 128))


DEEPSEEK_V4 = Family(
    source="transformers configuration_deepseek_v4.py / modeling_deepseek_v4.py",
    decoder=dict(head_dim=512, n_heads=64, n_kv_heads=1, max_pos=1048576),
    counts={
        "vocab_size": (("vocab_size",), 129280),
        "q_lora_rank": (("q_lora_rank",), 1024),
        "n_experts": (("n_routed_experts",), 256),
        "n_experts_per_token": (("num_experts_per_tok",), 6),
        "moe_intermediate_size": (("moe_intermediate_size",), 2048),
        "n_mtp_layers": (("num_nextn_predict_layers",), 0),
    },
    build=_deepseek_v4,
    set_kinds=False,
    ignored={
        "index_n_heads": "indexer query heads (no cache)",
        "index_topk": "entries each query attends",
        "o_groups": "grouped output projection (weights)",
        "o_lora_rank": "grouped output projection (weights)",
        "hc_mult": "hyper-connections (weights, activations)",
        "qk_rope_head_dim": "RoPE part of the 512",
        "compress_rope_theta": "RoPE base of the compressed branches",
    },
)


# ----- MLA + indexer / linear attention: GLM-5 (DSA), Kimi-K3 ------------------------------


def _glm_moe_dsa(c: _Cfg) -> dict[str, Any]:
    """glm_moe_dsa, GLM-5 (transformers `configuration_glm_moe_dsa.py`, `modeling_glm_moe_dsa.py`
    GlmMoeDsaAttention: `self.indexer = None if skip_topk else GlmMoeDsaIndexer(...)`): DeepSeek's
    MLA (kv_lora_rank 512 + qk_rope_head_dim 64 = 576 per token; qk_nope_head_dim 192, v_head_dim
    256 by default) plus the DSA lightning indexer, whose key cache (index_head_dim, 128) exists
    only on the layers whose `indexer_types` entry is "full"; "shared" layers reuse the previous
    full layer's top-k and cache no keys. Without `indexer_types`: `index_topk_pattern` (F / S),
    else layer i is full when max(i - index_skip_topk_offset + 1, 0) % index_topk_freq == 0
    (offset 2, freq 1 by default). The keys are sized as DeepSeek's fp8 + fp32 scale (132 B).
    `head_dim` / `qk_head_dim` in the config are derived sizes, not the cache. Experts as
    DeepSeek-V3, placed by `mlp_layer_types` (dense then sparse) when given."""
    f = DEEPSEEK(c)
    n = f["n_layers"] or 0
    for key, default in (("qk_nope_head_dim", 192), ("v_head_dim", 256)):
        f[key] = c.count(key, default=default)
    types = c.get("indexer_types")
    if types is None:
        pattern = c.get("index_topk_pattern")
        if pattern is not None:
            if not isinstance(pattern, str) or set(pattern) - {"F", "S"}:
                raise c.fail(
                    f"must be a string of F (full) and S (shared), got {_shown(pattern)}", "index_topk_pattern"
                )
            types = [{"F": "full", "S": "shared"}[ch] for ch in pattern]
        else:
            freq = max(c.count("index_topk_freq", default=1), 1)
            offset = c.count("index_skip_topk_offset", default=2, minimum=0)
            types = ["full" if max(i - offset + 1, 0) % freq == 0 else "shared" for i in range(n)]
    if not isinstance(types, list) or len(types) != n or set(types) - {"full", "shared"}:
        raise c.fail(f"must list full or shared for each of the {n} layers, got {_shown(types)}", "indexer_types")
    f["index_head_dim"] = c.count("index_head_dim", default=128)
    f["index_layers"] = [int(t == "full") for t in types]
    _first_dense(c, f, "mlp_layer_types", ("dense",))
    f["n_mtp_layers"] = c.count("num_nextn_predict_layers", default=0, minimum=0)
    return f


def _kimi_linear(c: _Cfg) -> dict[str, Any]:
    """kimi_linear, Kimi Linear / Kimi-K3's text model (transformers `configuration_kimi_linear.py`
    KimiLinearConfig.__post_init__, `modeling_kimi_linear.py` KimiLinearDeltaAttention): MLA layers
    (kv_lora_rank + qk_rope_head_dim cached, as DeepSeek-V3) beside KDA linear-attention layers.
    `linear_attn_config.full_attn_layers` / `kda_layers` list them, 1-indexed ("types are
    1-indexed in the checkpoint"); else layer i is MLA when i > 0 and i % 4 == 0. A KDA layer keeps
    a state, no per-token cache: a short convolution over q, k and v (3 x num_heads x head_dim
    channels x (short_conv_kernel_size - 1)) and a recurrent state num_heads x head_dim x
    head_dim, the Gated DeltaNet shape with as many key as value heads. Experts: num_experts of
    moe_intermediate_size, num_experts_per_token, num_shared_experts. `routed_expert_hidden_size`
    (Kimi-K3's latent MoE: experts work in a narrower width) is not counted: the weights are
    refused rather than miscounted."""
    lin = c.mapping("linear_attn_config")
    renamed = {
        **c.data,
        "n_routed_experts": c.get("num_experts", "n_routed_experts"),
        "num_experts_per_tok": c.get("num_experts_per_token", "num_experts_per_tok"),
        "n_shared_experts": c.get("num_shared_experts", "n_shared_experts"),
    }
    f = DEEPSEEK(_Cfg(renamed, c.path, c.model_type))
    n = f["n_layers"] or 0
    full, kda = lin.get("full_attn_layers"), lin.get("kda_layers")
    if c.get("layer_types") is not None:
        from kvcalc.load.hf.reader import _kinds_from_layer_types

        kinds = _kinds_from_layer_types(c, n)
    elif full is not None and kda is not None:
        slots: list[str | None] = [None] * n
        for key, ids, kind in (("full_attn_layers", full, "full"), ("kda_layers", kda, "linear")):
            if not isinstance(ids, list) or any(type(i) is not int or not 1 <= i <= n for i in ids):
                raise c.fail(
                    f"must list layer numbers from 1 to {n} (1-indexed), got {_shown(ids)}", f"linear_attn_config.{key}"
                )
            for i in ids:
                slots[i - 1] = kind
        if None in slots:
            raise c.fail(
                f"layer {slots.index(None) + 1} is in neither full_attn_layers nor kda_layers", "linear_attn_config"
            )
        kinds = [k for k in slots if k is not None]
    else:
        kinds = ["full" if i and i % 4 == 0 else "linear" for i in range(n)]
    heads = lin.get("num_heads", c.get("linear_num_heads", default=32))
    dim = lin.get("head_dim", c.get("linear_head_dim", default=128))
    kernel = lin.get("short_conv_kernel_size", c.get("linear_conv_kernel_dim", default=4))
    for key, v in (("num_heads", heads), ("head_dim", dim), ("short_conv_kernel_size", kernel)):
        c.check_int(f"linear_attn_config.{key}", v)
    f.update(
        linear_num_key_heads=heads,
        linear_num_value_heads=heads,
        linear_key_head_dim=dim,
        linear_value_head_dim=dim,
        linear_conv_kernel_dim=kernel,
        n_mtp_layers=c.count("num_nextn_predict_layers", default=0, minimum=0),
    )
    if c.get("routed_expert_hidden_size") is not None:
        f["weights_unknown"] = "Kimi-K3's latent MoE (routed_expert_hidden_size) is not counted by kvcalc"
    else:
        f["weights_unknown"] = "Kimi Linear's KDA gates and output norm are not counted by kvcalc"
    from kvcalc.load.hf.reader import compact_layers

    f.pop("layer_pattern", None)
    f.pop("layer_types", None)
    f.update(compact_layers(kinds))
    return f


# ----- MiniMax-M2 / M3 ------------------------------------------------------------------------


def _minimax_m2(c: _Cfg, f: dict[str, Any]) -> dict[str, Any]:
    """minimax_m2, MiniMax-M2 / M2.7 (transformers `configuration_minimax_m2.py`; vLLM 0.33.0
    `minimax_m2.py`): GQA on every layer (48 heads, 8 KV heads of 128 by default), experts on
    every layer: num_local_experts (256) of intermediate_size (1536, the expert width: there is
    no dense MLP), num_experts_per_tok (8). `attn_type_list` is MiniMax-01's per-layer switch
    (1 softmax attention, 0 lightning linear attention): a 0 is refused, kvcalc cannot size
    lightning attention's state from this config. `shared_intermediate_size` 0 means no shared
    expert. The MTP modules (`num_mtp_modules`) are not counted."""
    raw = c.get("attn_type_list")
    if raw is not None and (not isinstance(raw, list) or any(v != 1 or type(v) is bool for v in raw)):
        raise c.fail(
            "lists a layer other than 1 (softmax attention); MiniMax's lightning attention (0) keeps a state "
            "kvcalc cannot size from this config",
            "attn_type_list",
        )
    shared = c.count("shared_intermediate_size", default=0, minimum=0)
    if shared:
        f["shared_expert_intermediate_size"] = shared
    return f


MINIMAX_M2 = Family(
    source="transformers configuration_minimax_m2.py; vLLM 0.33.0 minimax_m2.py",
    decoder=dict(head_dim=128, n_heads=48, n_kv_heads=8, max_pos=196608),
    counts={
        "vocab_size": (("vocab_size",), 200064),
        "n_experts": (("num_local_experts",), 256),
        "n_experts_per_token": (("num_experts_per_tok",), 8),
    },
    rename={"intermediate_size": "moe_intermediate_size"},
    build=_minimax_m2,
    ignored={"rotary_dim": "RoPE part of the head", "qk_norm_type": "norms (weights)"},
)


def _minimax_m3(c: _Cfg, f: dict[str, Any]) -> dict[str, Any]:
    """minimax_m3, MiniMax-M3 (transformers `configuration_minimax_m3_vl.py` MiniMaxM3VLTextConfig,
    `modeling_minimax_m3_vl.py` its indexer; vLLM 0.33.0 `models/minimax_m3/common/indexer.py`
    MiniMaxM3IndexerCache, "key-only: one vector per token"): GQA on every layer, and on the layers
    whose `sparse_attention_config.sparse_attention_freq` entry is 1 a lightning indexer whose
    key (`k_proj` to sparse_index_dim, 128) is cached per token in the model's dtype; its query
    heads (`sparse_num_index_heads`) and block selection (sparse_block_size, sparse_topk_blocks,
    local / init blocks) cache nothing. A sparse layer must disable the index value
    (`sparse_disable_index_value` 1: "M3 always disables the index value/output projections"),
    else it would cache values too: refused. Experts: num_local_experts of moe_intermediate_size,
    a shared expert of shared_intermediate_size x n_shared_experts, the first
    first_k_dense_replace layers dense of dense_intermediate_size (moe_layer_freq must agree)."""
    n = f["n_layers"] or 0
    sparse = c.mapping("sparse_attention_config")
    sub = _Cfg(sparse, c.path, c.model_type)
    sub.prefix = "sparse_attention_config."
    if sparse and sparse.get("use_sparse_attention", True):
        freq = sparse.get("sparse_attention_freq")
        if not isinstance(freq, list) or len(freq) != n or any(v not in (0, 1) or type(v) is bool for v in freq):
            raise sub.fail(f"must list 0 or 1 for each of the {n} layers", "sparse_attention_freq")
        no_value = sparse.get("sparse_disable_index_value", [1] * n)
        if (
            not isinstance(no_value, list)
            or len(no_value) != n
            or any(f_ and not v for f_, v in zip(freq, no_value, strict=True))
        ):
            raise sub.fail(
                "must be 1 on every sparse layer: an index value cache is not one kvcalc sizes",
                "sparse_disable_index_value",
            )
        f.update(index_head_dim=sub.count("sparse_index_dim", default=128), index_layers=list(freq), index_format="kv")
    f["intermediate_size"] = c.count("dense_intermediate_size", default=12288)
    shared = c.count("shared_intermediate_size", default=3072, minimum=0) * c.count(
        "n_shared_experts", default=1, minimum=0
    )
    if shared:
        f["shared_expert_intermediate_size"] = shared
    f["first_dense_layers"] = c.count("first_k_dense_replace", default=0, minimum=0)
    if c.get("moe_layer_freq") is not None:
        _first_dense(c, f, "moe_layer_freq", (0, False))
    f["n_mtp_layers"] = c.count("num_nextn_predict_layers", default=0, minimum=0)
    f["weights_unknown"] = "MiniMax-M3's indexer projections and per-head norms are not counted by kvcalc"
    return f


MINIMAX_M3 = Family(
    source="transformers configuration_minimax_m3_vl.py / modeling_minimax_m3_vl.py; vLLM 0.33.0 models/minimax_m3",
    decoder=dict(head_dim=128, n_kv_heads=4, max_pos=1048576),
    counts={
        "vocab_size": (("vocab_size",), 200064),
        "n_experts": (("num_local_experts",), 128),
        "n_experts_per_token": (("num_experts_per_tok",), 4),
        "moe_intermediate_size": (("moe_intermediate_size", "intermediate_size"), 3072),
    },
    build=_minimax_m3,
    ignored={
        "rotary_dim": "RoPE part of the head",
        "partial_rotary_factor": "RoPE part of the head",
        "attention_output_gate": "a gate on the output (weights)",
        "num_mtp_modules": "MTP (weights)",
    },
)


# ----- Step-3.7 -------------------------------------------------------------------------------


def _step3p7(c: _Cfg, f: dict[str, Any]) -> dict[str, Any]:
    """step3p7, Step-3.7-Flash (transformers `configuration_step3p7.py` Step3p7TextConfig,
    `modeling_step3p7.py`): `layer_types` of full and sliding attention (padded with
    num_nextn_predict_layers MTP entries, cut to num_hidden_layers), sliding_window (null: none);
    every layer num_key_value_heads (8) heads of head_dim (128): only the query heads of the
    sliding layers may differ (num_sliding_attention_heads, or the legacy
    attention_other_setting.num_attention_heads), which changes weights, not the cache; a legacy
    attention_other_setting giving other KV heads or head size is refused (transformers keeps
    the model's). Experts: num_experts (or n_routed_experts, 288) of moe_intermediate_size (1280),
    a shared expert of share_expert_dim, the first first_k_dense_replace layers dense."""
    other = c.mapping("attention_other_setting")
    for key, want in (
        ("num_attention_groups", f.get("n_kv_heads")),
        ("num_key_value_heads", f.get("n_kv_heads")),
        ("head_dim", f.get("head_dim")),
    ):
        if other.get(key) not in (None, want):
            raise c.fail(
                f"gives {key} {_shown(other[key])} for the sliding layers, but transformers' Step-3.7 keeps "
                f"{want} on every layer; write a kvcalc YAML",
                "attention_other_setting",
            )
    sliding_heads = c.count("num_sliding_attention_heads") or (other.get("num_attention_heads") if other else None)
    if sliding_heads not in (None, f["n_heads"]):
        f["weights_unknown"] = "Step-3.7's sliding layers have their own query-head count, not counted by kvcalc"
    shared = c.count("share_expert_dim", default=1280, minimum=0) * c.count("n_shared_experts", default=1, minimum=0)
    if shared:
        f["shared_expert_intermediate_size"] = shared
    f["first_dense_layers"] = c.count("first_k_dense_replace", default=3, minimum=0)
    f["n_mtp_layers"] = c.count("num_nextn_predict_layers", default=0, minimum=0)
    return f


STEP3P7 = Family(
    source="transformers configuration_step3p7.py / modeling_step3p7.py",
    decoder=dict(head_dim=128, n_heads=64, n_kv_heads=8, max_pos=128000),
    counts={
        "vocab_size": (("vocab_size",), 128815),
        "n_experts": (("num_experts", "n_routed_experts"), 288),
        "n_experts_per_token": (("num_experts_per_tok",), 8),
        "moe_intermediate_size": (("moe_intermediate_size",), 1280),
    },
    kinds=Kinds(trim_to_layers=True),
    window=("sliding_window", None),
    build=_step3p7,
    ignored={"moe_router_scaling_factor": "routing", "use_moe_router_bias": "routing"},
)


#: model_type -> Family (or function) for the 2026 families; `families.FAMILIES` adds them.
FAMILIES_2026: dict[str, Family | Callable[[_Cfg], dict[str, Any]]] = {
    "gemma4": GEMMA4,
    "gemma4_text": GEMMA4,
    "mimo_v2_flash": MIMO_V2_FLASH,
    "deepseek_v4": DEEPSEEK_V4,
    "glm_moe_dsa": _glm_moe_dsa,
    "kimi_linear": _kimi_linear,
    "minimax_m2": MINIMAX_M2,
    "minimax_m3": MINIMAX_M3,
    "step3p7": STEP3P7,
}

#: multimodal wrappers of the 2026 families whose text_config may not name its model_type
TEXT_MODEL_TYPES_2026 = {
    "gemma4": "gemma4_text",
    "kimi_k3": "kimi_linear",
    "kimi_k25": "kimi_k2",
    "qwen3_vl": "qwen3_vl_text",
    "minimax_m3_vl": "minimax_m3",
}
