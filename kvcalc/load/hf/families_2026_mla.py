"""The 2026 families built on DeepSeek's MLA (`kvcalc.load.hf.mla`): DeepSeek-V4 (compressed
sparse attention), GLM-5 (DSA indexer) and Kimi-K3 (Kimi Linear), with the sources named in
`kvcalc.load.hf.families_2026` (transformers 5.24.0, vLLM 0.33.0). Part of its `FAMILIES_2026`.
"""

from __future__ import annotations

from typing import cast

from kvcalc.load.fields import ModelFields
from kvcalc.load.hf.family import Family
from kvcalc.load.hf.mla import DEEPSEEK
from kvcalc.load.hf.reader import _Cfg, _set_kinds, _shown, compact_layers


def _first_dense(c: _Cfg, f: ModelFields, key: str, dense: tuple[object, ...]) -> None:
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


# ----- DeepSeek-V4 ----------------------------------------------------------------------------

#: transformers `configuration_deepseek_v4.py` `_COMPRESS_RATIO_TO_LAYER_TYPE` and its layer types
#: each layer type's key in the compress rates ("": not compressed, ratio 0)
_V4_TYPES: dict[str, str] = {
    "sliding_attention": "",
    "compressed_sparse_attention": "csa",
    "heavily_compressed_attention": "hca",
}


def _deepseek_v4(c: _Cfg, f: ModelFields) -> ModelFields:
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

    The weights are counted from `o_groups` / `o_lora_rank` (grouped output projection),
    `hc_mult` (hyper-connections), `index_n_heads` and `num_hash_layers` (`calc/weights.py`
    `_compressed_mqa_params`); a config without one of the first four has its weights refused by
    name. `expert_dtype` fp4 means MXFP4 routed experts (vLLM 0.33.0
    `models/deepseek_v4/quant_config.py`).
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
        ratios = [{0: 0, 4: rates["csa"], 128: rates["hca"]}[cast(int, r)] for r in raw[:n]]
    else:
        ratios = [rates["hca"]] * min(n, 2) + [rates["csa"] if i % 2 else rates["hca"] for i in range(max(n - 2, 0))]
    f.update(
        v_is_k=True,
        compress_ratios=ratios,
        index_head_dim=c.count("index_head_dim", default=128),
        index_layers=[int(r == rates["csa"]) for r in ratios],
        # the weights-only parts `calc/weights.py` counts (reference inference/model.py ModelArgs names)
        o_groups=c.count("o_groups"),
        o_lora_rank=c.count("o_lora_rank"),
        hc_mult=c.count("hc_mult"),
        index_n_heads=c.count("index_n_heads"),
        n_hash_layers=c.count("num_hash_layers", "n_hash_layers", default=0, minimum=0),
        router_bias=True,  # non-hash gates carry a bias (reference Gate: `self.bias` unless hash)
    )
    missing = [k for k in ("o_groups", "o_lora_rank", "hc_mult", "index_n_heads") if f.get(k) is None]
    if missing:
        f["weights_unknown"] = f"the config gives no {', '.join(missing)} (DeepSeek-V4's weight shapes)"
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
        "index_topk": "entries each query attends",
        "qk_rope_head_dim": "RoPE part of the 512",
        "compress_rope_theta": "RoPE base of the compressed branches",
    },
)


# ----- MLA + indexer / linear attention: GLM-5 (DSA), Kimi-K3 ------------------------------


def _glm_moe_dsa(c: _Cfg) -> ModelFields:
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


def _kimi_linear(c: _Cfg) -> ModelFields:
    """kimi_linear, Kimi Linear / Kimi-K3's text model (transformers `configuration_kimi_linear.py`
    KimiLinearConfig.__post_init__, `modeling_kimi_linear.py` KimiLinearDeltaAttention): MLA layers
    (kv_lora_rank + qk_rope_head_dim cached, as DeepSeek-V3) beside KDA linear-attention layers.
    `linear_attn_config.full_attn_layers` / `kda_layers` list them, 1-indexed ("types are
    1-indexed in the checkpoint"); else layer i is MLA when i > 0 and i % 4 == 0. A KDA layer keeps
    a state, no per-token cache: a short convolution over q, k and v (3 x num_heads x head_dim
    channels x (short_conv_kernel_size - 1)) and a recurrent state num_heads x head_dim x
    head_dim, the Gated DeltaNet shape with as many key as value heads. Experts: num_experts of
    moe_intermediate_size, num_experts_per_token, num_shared_experts. The weights count, as vLLM
    0.33.0's `models/kimi_k3/nvidia/model.py` builds them, the KDA projections with Kimi-K3's
    full-rank output gate (`use_full_rank_gate`) or Kimi Linear's low-rank one (g_a / g_b), the
    latent MoE (`routed_expert_hidden_size`, its norm per `latent_moe_use_norm`), the MLA output
    gate (`mla_use_output_gate`) and the attention residuals (`attn_res_block_size`)."""
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
            for i in cast("list[int]", ids):  # checked above
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
    # the KDA's output gate: Kimi-K3's full rank (vLLM 0.33.0 kimi_k3/nvidia/kda.py KimiK3DeltaAttention),
    # else Kimi Linear's low rank g_a / g_b (vLLM 0.33.0 mamba/gdn/kimi_gdn_linear_attn.py
    # KimiGatedDeltaNetAttention, which kimi_k3/nvidia/model.py KimiDecoderLayer builds without it)
    f.update(
        linear_attention="kda" if lin.get("use_full_rank_gate") else "kda_lowrank",
        moe_latent_size=c.count("routed_expert_hidden_size"),
        # KimiMoE: `RMSNorm(moe_hidden_size) if latent_moe_use_norm else None`
        moe_latent_norm=c.flag("latent_moe_use_norm", default=True),
        mla_output_gate=c.flag("mla_use_output_gate"),
        attention_residuals=c.get("attn_res_block_size") is not None,
        router_bias=True,  # KimiMoE: e_score_correction_bias on every MoE layer
    )

    f.pop("layer_pattern", None)
    f.pop("layer_types", None)
    f.update(compact_layers(kinds))
    return f
