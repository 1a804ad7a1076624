"""DeepSeek's MLA family as data: the base of deepseek_v2 / deepseek_v3 / kimi_k2, DeepSeek-V3.2,
GLM-5 (`glm_moe_dsa`) and Kimi Linear (`kimi_linear`), which `families` and `families_2026` both
read (a module of its own, so neither imports the other)."""

from __future__ import annotations

from kvcalc.load.fields import ModelFields
from kvcalc.load.hf.family import Family
from kvcalc.load.hf.reader import _Cfg


def _deepseek_mla(c: _Cfg, f: ModelFields) -> ModelFields:
    """DeepSeek's rules beyond the table: a head_dim in the file is qk_rope_head_dim's alias, not the
    latent (dropped; MLA sizes its latent, not heads); n_shared_experts x moe_intermediate_size
    shared; MoE every moe_layer_freq-th layer."""
    f.pop("head_dim", None)
    if "hidden_size or head_dim" in c.missing:
        c.missing.remove("hidden_size or head_dim")
    shared, width = c.count("n_shared_experts", minimum=0), c.count("moe_intermediate_size")
    if shared and width:
        f["shared_expert_intermediate_size"] = shared * width
    freq = c.count("moe_layer_freq", default=1)
    if freq > 1:
        f["moe_layer_period"] = freq
    return f


#: deepseek_v2 / deepseek_v3 / kimi_k2 (`configuration_deepseek_v3.py`; Kimi-K2 is the DeepSeek-V3
#: architecture under its own model_type): MLA with kv_lora_rank 512, qk_rope_head_dim 64,
#: qk_nope_head_dim 128, v_head_dim 128 by default (q_lora_rank null = no query compression);
#: `num_key_value_heads` is not used. Experts: n_routed_experts of moe_intermediate_size,
#: n_shared_experts x moe_intermediate_size shared, the first first_k_dense_replace layers dense,
#: then every moe_layer_freq-th. MTP layers: num_nextn_predict_layers (0 when absent), the field
#: vLLM 0.33.0 reads for deepseek_v3 / deepseek_v32 / glm_moe_dsa (`vllm/config/speculative.py`
#: `hf_config_override`: model_type -> deepseek_mtp, n_predict = num_nextn_predict_layers).
DEEPSEEK = Family(
    source="configuration_deepseek_v3.py",
    decoder=dict(max_pos=2048, kv_keys=()),
    counts={
        "kv_lora_rank": (("kv_lora_rank",), 512),
        "qk_rope_head_dim": (("qk_rope_head_dim",), 64),
        "qk_nope_head_dim": (("qk_nope_head_dim",), 128),
        "v_head_dim": (("v_head_dim",), 128),
        "q_lora_rank": (("q_lora_rank",), None),
        "n_experts": (("n_routed_experts",), None),
        "n_experts_per_token": (("num_experts_per_tok",), None),
        "moe_intermediate_size": (("moe_intermediate_size",), None),
        "first_dense_layers": (("first_k_dense_replace",), 0),
        "n_mtp_layers": (("num_nextn_predict_layers",), 0),
    },
    fixed={"attention": "mla"},
    build=_deepseek_mla,
)
