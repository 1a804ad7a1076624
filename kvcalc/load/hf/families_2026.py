"""The 2026 families as data (`Family`): Gemma-4, MiMo-V2-Flash, DeepSeek-V4, GLM-5 (DSA), Kimi-K3
(Kimi Linear), MiniMax-M2 / M3, Step-3.7, Qwen3-VL, each with the few rules a table cannot say.

Sources (read for the exact cache shapes; each family's docstring names its lines):
transformers 5.24.0 `models/<family>/configuration_*.py` and `modeling_*.py` (the reference
modelling code), and vLLM 0.33.0 `model_executor/models/` / `models/` where the publisher's
checkpoint carries keys transformers renames. A sibling variant (DeepSeek-V4-Pro beside Flash,
Gemma-4-31B beside 26B-A4B, Qwen3.5-397B beside 27B) is the same mapping read on its own config:
nothing here names a model, only config keys. DeepSeek-V4, GLM-5 and Kimi-K3 (MLA with an indexer,
compression or linear attention) are in `kvcalc.load.hf.families_2026_mla`.
"""

from __future__ import annotations

from collections.abc import Callable

from kvcalc.load.fields import ModelFields
from kvcalc.load.hf.families_2026_mla import DEEPSEEK_V4, _first_dense, _glm_moe_dsa, _kimi_linear
from kvcalc.load.hf.family import Family, Kinds
from kvcalc.load.hf.reader import _Cfg, _set_kinds, _shown


def _gemma4(c: _Cfg, f: ModelFields) -> ModelFields:
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
    full: ModelFields = {"head_dim": c.count("global_head_dim", default=512)}
    if k_eq_v and global_kv is not None:
        full["n_kv_heads"] = global_kv
        c.names["kind_geometry.full.n_kv_heads"] = c.prefix + "num_global_key_value_heads"
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


def _mimo_v2(c: _Cfg, f: ModelFields) -> ModelFields:
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


# ----- MiniMax-M2 / M3 ------------------------------------------------------------------------


def _minimax_m2(c: _Cfg, f: ModelFields) -> ModelFields:
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


def _minimax_m3(c: _Cfg, f: ModelFields) -> ModelFields:
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
            or any(f_ and not v for f_, v in zip(freq, no_value, strict=False))
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
    # the weights (vLLM 0.33.0 models/minimax_m3/nvidia/model.py MiniMaxM3SparseAttention / MiniMaxM3MoE):
    # index_q (sparse_num_index_heads heads, as many as the KV heads) and index_k (one head) with their
    # norms, per-head q / k norms, the routing bias
    f.update(
        index_n_heads=sub.count("sparse_num_index_heads") if sparse else None,
        router_bias=c.flag("use_routing_bias"),
        qk_norm=c.flag("use_qk_norm") and c.get("qk_norm_type") == "per_head",
    )
    if c.flag("use_qk_norm") and c.get("qk_norm_type") != "per_head":
        f["weights_unknown"] = f"MiniMax-M3's qk_norm_type {_shown(c.get('qk_norm_type'))} is not counted by kvcalc"
    if c.flag("attention_output_gate"):
        f["weights_unknown"] = "MiniMax-M3's attention output gate is not counted by kvcalc"
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
        "num_mtp_modules": "MTP (weights)",
    },
)


# ----- Step-3.7 -------------------------------------------------------------------------------


def _step3p7(c: _Cfg, f: ModelFields) -> ModelFields:
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
FAMILIES_2026: dict[str, Family | Callable[[_Cfg], ModelFields]] = {
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
