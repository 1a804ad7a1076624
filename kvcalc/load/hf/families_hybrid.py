"""The families with state-space or linear-attention layers beside attention: Qwen3-Next and
Qwen3.5 (Gated DeltaNet), Jamba (Mamba-1), Nemotron-H, Granite 4.0-H and Falcon-H1 (Mamba-2), as
`Family` data plus the rules no table says (Jamba's attention period, Nemotron-H's block pattern,
the "auto" Mamba head sizes). Part of the `FAMILIES` table in `kvcalc.load.hf.families`.
"""

from __future__ import annotations

from kvcalc.load.fields import ModelFields
from kvcalc.load.hf.family import Family, Kinds
from kvcalc.load.hf.reader import _auto, _Cfg, _qwen_experts, _shown


def _gated_deltanet(c: _Cfg) -> ModelFields:
    """The Gated DeltaNet (linear attention) fields of Qwen3-Next and Qwen3.5, with
    transformers' `Qwen3NextConfig` defaults: 16 key heads, 32 value heads of 128, conv kernel 4."""
    return dict(
        linear_num_key_heads=c.count("linear_num_key_heads", default=16),
        linear_num_value_heads=c.count("linear_num_value_heads", default=32),
        linear_key_head_dim=c.count("linear_key_head_dim", default=128),
        linear_value_head_dim=c.count("linear_value_head_dim", default=128),
        linear_conv_kernel_dim=c.count("linear_conv_kernel_dim", default=4),
    )


def _linear_layers(c: _Cfg, f: ModelFields) -> ModelFields:
    """`Family.build` of Qwen3.5: the Gated DeltaNet fields (`_gated_deltanet`)."""
    f.update(_gated_deltanet(c))
    return f


def _qwen3_next_build(c: _Cfg, f: ModelFields) -> ModelFields:
    """`Family.build` of Qwen3-Next: the Gated DeltaNet fields and the Qwen experts (512 of 512,
    10 per token, a shared expert of 512, placed by decoder_sparse_step)."""
    f.update(_gated_deltanet(c))
    return _qwen_experts(c, f, n_experts=512, per_token=10, width=512, shared=512)


#: layer_types, else every `full_attention_interval`-th layer (default 4) full attention and the
#: rest Gated DeltaNet linear attention (Qwen3-Next and Qwen3.5)
_QWEN_LINEAR_KINDS = Kinds(nth="full", rest="linear", every=4, every_keys=("full_attention_interval",))

#: qwen3_next (`configuration_qwen3_next.py`): layer_types, else every `full_attention_interval`-th
#: layer (default 4) full attention and the rest Gated DeltaNet linear attention; full layers: 2
#: KV heads x 256 by default; linear layers: 16 key heads and 32 value heads of 128, conv kernel 4;
#: 512 experts of 512, 10 per token, one shared expert of 512. MTP layers: num_nextn_predict_layers
#: (vLLM 0.33.0 `vllm/config/speculative.py` qwen3_next_mtp and `qwen3_next_mtp.py` read it), else
#: the checkpoint's mtp_num_hidden_layers, else 0.
QWEN3_NEXT = Family(
    source="configuration_qwen3_next.py",
    decoder=dict(max_pos=32768, head_dim=256, n_kv_heads=2),
    counts={"n_mtp_layers": (("num_nextn_predict_layers", "mtp_num_hidden_layers"), 0)},
    kinds=_QWEN_LINEAR_KINDS,
    window=("sliding_window", None),
    build=_qwen3_next_build,
)


def _offset_below_period(c: _Cfg, key: str, period: int, offset: int, what: str) -> None:
    """Raise `ConfigError` (field `<key>_offset`) unless offset < period: transformers' Jamba makes
    layer i a(n) `what` layer when i % period == offset (`configuration_jamba.py`
    `layers_block_type`, `layers_num_experts`), so an offset at or past the period makes none."""
    if offset >= period:
        raise c.fail(
            f"{offset} is not below {key}_period ({period}): layer i is {what} when i % {period} == "
            f"{offset}, so no layer would be; give an offset from 0 to {period - 1}",
            field=f"{key}_offset",
        )


def _jamba_layers(c: _Cfg, f: ModelFields, window: int | None) -> list[str]:
    """`Family.layers` of Jamba: layer i is attention when i % attn_layer_period ==
    attn_layer_offset (8, 4), else Mamba-1; attention slides only when sliding_window is set."""
    period = c.count("attn_layer_period", default=8)
    offset = c.count("attn_layer_offset", default=4, minimum=0)
    _offset_below_period(c, "attn_layer", period, offset, "attention")
    attn = "sliding" if window else "full"
    return [attn if i % period == offset else "mamba" for i in range(f["n_layers"] or 0)]


def _jamba_build(c: _Cfg, f: ModelFields) -> ModelFields:
    """`Family.build` of Jamba: MoE on the layers with i % expert_layer_period ==
    expert_layer_offset (2, 1), none when num_experts is 1 (Jamba's MoE only when num_experts > 1:
    one expert is a dense MLP); mamba_dt_rank "auto" is ceil(hidden / 16)."""
    period = c.count("expert_layer_period", default=2)
    offset = c.count("expert_layer_offset", default=1, minimum=0)
    _offset_below_period(c, "expert_layer", period, offset, "MoE")
    hidden = f["hidden_size"]
    f["mamba_dt_rank"] = _auto(c, "mamba_dt_rank", -(-hidden // 16) if hidden else None)  # ceil, in integers
    f["moe_layer_period"], f["moe_layer_offset"] = period, offset
    if f["n_experts"] == 1:
        f.update(
            n_experts=None, n_experts_per_token=None, moe_intermediate_size=None, moe_layer_period=1, moe_layer_offset=0
        )
    return f


#: jamba (`configuration_jamba.py`): attention on one layer in attn_layer_period (`_jamba_layers`),
#: else Mamba-1 (d_state 16, d_conv 4, expand 2, dt_rank "auto" = ceil(hidden / 16)); MoE on one
#: layer in expert_layer_period (`_jamba_build`), 16 experts, 2 per token, each of
#: intermediate_size (14336, as is the dense MLP); 8 KV heads; 262,144 context.
JAMBA = Family(
    source="configuration_jamba.py",
    decoder=dict(n_kv_heads=8, max_pos=262144),
    counts={
        "intermediate_size": (("intermediate_size",), 14336),
        "mamba_d_state": (("mamba_d_state",), 16),
        "mamba_d_conv": (("mamba_d_conv",), 4),
        "mamba_expand": (("mamba_expand",), 2),
        "n_experts": (("num_experts",), 16),
        "n_experts_per_token": (("num_experts_per_tok",), 2),
        "moe_intermediate_size": (("intermediate_size",), 14336),
    },
    window=("sliding_window", None),
    build=_jamba_build,
    layers=_jamba_layers,
)


#: qwen3_5_text, the text model of Qwen3.5 (`configuration_qwen3_5.py` Qwen3_5TextConfig: hidden
#: 4096, 32 layers, 16 heads, 4 KV heads, head_dim 256, dense MLP 12288, vocab 248320, 32,768
#: context; layer_types, else every full_attention_interval-th (4) layer full attention and the
#: rest Gated DeltaNet: 16 key heads and 32 value heads of 128, conv kernel 4), as qwen3_next
#: without experts. MTP layers: mtp_num_hidden_layers (0 when absent; vLLM 0.33.0
#: `vllm/config/speculative.py` qwen3_5_mtp and `qwen3_5_mtp.py` read it).
QWEN3_5_TEXT = Family(
    source="configuration_qwen3_5.py Qwen3_5TextConfig",
    decoder=dict(max_pos=32768, head_dim=256, n_kv_heads=4),
    counts={
        "vocab_size": (("vocab_size",), 248320),
        "intermediate_size": (("intermediate_size",), 12288),
        "n_mtp_layers": (("mtp_num_hidden_layers",), 0),
    },
    kinds=_QWEN_LINEAR_KINDS,
    build=_linear_layers,
)


def _qwen3_5_moe_build(c: _Cfg, f: ModelFields) -> ModelFields:
    """`Family.build` of Qwen3.5 MoE: the Gated DeltaNet fields; no dense MLP (every layer's MLP is
    the experts)."""
    f.pop("intermediate_size", None)
    return _linear_layers(c, f)


#: qwen3_5_moe_text, Qwen3.5 MoE (`configuration_qwen3_5_moe.py` Qwen3_5MoeTextConfig: hidden 2048,
#: 40 layers, 16 heads, 2 KV heads, head_dim 256; 256 experts of 512, 8 per token, a shared expert
#: of 512 on every layer; the linear layers as `QWEN3_5_TEXT`).
QWEN3_5_MOE_TEXT = Family(
    source="configuration_qwen3_5_moe.py Qwen3_5MoeTextConfig",
    decoder=dict(max_pos=32768, head_dim=256, n_kv_heads=2),
    counts={
        "vocab_size": (("vocab_size",), 248320),
        "n_experts": (("num_experts",), 256),
        "n_experts_per_token": (("num_experts_per_tok",), 8),
        "moe_intermediate_size": (("moe_intermediate_size",), 512),
        "shared_expert_intermediate_size": (("shared_expert_intermediate_size",), 512),
        "n_mtp_layers": (("mtp_num_hidden_layers",), 0),
    },
    kinds=_QWEN_LINEAR_KINDS,
    build=_qwen3_5_moe_build,
)


#: Nemotron-H's blocks: `hybrid_override_pattern` characters (`configuration_nemotron_h.py`
#: `_pattern_to_list`: M Mamba-2, * attention, - MLP, E MoE) and `layers_block_type` names
_NEMOTRON_H_CHARS = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}
_NEMOTRON_H_TYPES = {
    "mamba": "mamba",
    "linear_attention": "mamba",
    "attention": "attention",
    "full_attention": "attention",
    "mlp": "mlp",
    "moe": "moe",
}
#: a block's layer kind: the MLP and MoE blocks mix no tokens
_NEMOTRON_H_KINDS = {"mamba": "mamba", "attention": "full", "mlp": "mlp", "moe": "mlp"}


def _nemotron_h_blocks(c: _Cfg) -> tuple[str, list[str]]:
    """Nemotron-H's blocks, one per layer, and the key that gave them: `hybrid_override_pattern`
    (M, *, -, E), else `layers_block_type` (or layer_types). Raises `ConfigError` for anything
    else."""
    pattern = c.get("hybrid_override_pattern")
    if pattern is not None:
        if not isinstance(pattern, str) or not pattern or set(pattern) - set(_NEMOTRON_H_CHARS):
            raise c.fail(f"must be a string of M, *, - and E, got {_shown(pattern)}", "hybrid_override_pattern")
        return "hybrid_override_pattern", [_NEMOTRON_H_CHARS[ch] for ch in pattern]
    raw = c.get("layers_block_type", "layer_types")
    known = [k for k in raw if isinstance(k, str) and k in _NEMOTRON_H_TYPES] if isinstance(raw, list) else []
    if not isinstance(raw, list) or not raw or len(known) != len(raw):
        raise c.fail(
            "needs hybrid_override_pattern (M, *, -, E) or layers_block_type listing mamba, "
            "attention, mlp or moe per layer",
            "hybrid_override_pattern",
        )
    return "layers_block_type", [_NEMOTRON_H_TYPES[k] for k in known]


def _nemotron_h_counted(c: _Cfg) -> _Cfg:
    """`Family.prepare` of Nemotron-H: the blocks' count is the layer count; num_hidden_layers,
    when given, must agree."""
    key, blocks = _nemotron_h_blocks(c)
    layers = c.count("num_hidden_layers")
    if layers is not None and layers != len(blocks):
        raise c.fail(f"has {len(blocks)} layers but num_hidden_layers is {layers}", key)
    return _Cfg({**c.data, "num_hidden_layers": len(blocks)}, c.path, c.model_type)


def _nemotron_h_layers(c: _Cfg, f: ModelFields, window: int | None) -> list[str]:
    """`Family.layers` of Nemotron-H: one kind per block (`_NEMOTRON_H_KINDS`)."""
    return [_NEMOTRON_H_KINDS[b] for b in _nemotron_h_blocks(c)[1]]


def _nemotron_h_moe(c: _Cfg, f: ModelFields) -> ModelFields:
    """`Family.build` of Nemotron-H: MoE blocks (Nemotron 3) have routed experts of
    moe_intermediate_size, not dense MLPs of intermediate_size. When every MLP block is MoE (no
    dense one) the count is exact (vLLM 0.33.0 `nemotron_h.py` NemotronHMoE,
    `weights._separate_moe_params`); a mix of dense and MoE MLP blocks leaves the width unset, so
    the parameter count refuses rather than miscount them."""
    blocks = _nemotron_h_blocks(c)[1]
    if "moe" not in blocks:
        return f
    f.pop("intermediate_size", None)
    if "mlp" not in blocks:
        shared = c.count("moe_shared_expert_intermediate_size", minimum=0) or 0
        f.update(
            n_experts=c.count("n_routed_experts"),
            n_experts_per_token=c.count("num_experts_per_tok"),
            moe_intermediate_size=c.count("moe_intermediate_size"),
            shared_expert_intermediate_size=shared * c.count("n_shared_experts", default=1, minimum=0) or None,
            moe_latent_size=c.count("moe_latent_size"),
            router_bias=True,  # NemotronHMoE: e_score_correction_bias
        )
    return f


#: nemotron_h, Nemotron-H and Nemotron Nano 2 / 3 (`configuration_nemotron_h.py`): one block per
#: layer, from `hybrid_override_pattern` (M Mamba-2, * attention, - MLP, E MoE) or
#: `layers_block_type`; the pattern's length is the layer count (`_nemotron_h_counted`).
#: Attention: 32 heads, 8 KV heads, head_dim 128 by default. Mamba-2 (vLLM `nemotron_h.py`,
#: `mamba2_state_shape`): mamba_num_heads (128) heads of mamba_head_dim (64), so d_inner = heads x
#: head_dim; ssm_state_size (128), n_groups (8), conv_kernel (4). The MLP blocks are relu2 up /
#: down. The separate MLP / MoE layers cache nothing (kind `mlp`); the parameter count counts each
#: layer as one block (`weights._separate_block_params`): MoE (`E`) layers when every MLP block is
#: one (Nemotron-3: n_routed_experts of moe_intermediate_size in a moe_latent_size latent, a shared
#: expert of moe_shared_expert_intermediate_size), and refuses a mix of dense and MoE MLP blocks,
#: whose width is left unset (give n_params). The state is sized in the model's dtype (the config's
#: mamba_ssm_cache_dtype float32 doubles the SSM part where an engine honours it). MTP layers:
#: num_nextn_predict_layers (0 when absent; vLLM 0.33.0 `vllm/config/speculative.py` makes
#: nemotron_h nemotron_h_mtp when it is > 0; `nemotron_h_mtp.py` builds each as the blocks of
#: mtp_hybrid_override_pattern).
NEMOTRON_H = Family(
    source="configuration_nemotron_h.py",
    decoder=dict(max_pos=4096, head_dim=128, n_kv_heads=8),
    counts={
        "n_mtp_layers": (("num_nextn_predict_layers",), 0),
        "mamba_n_groups": (("n_groups", "mamba_n_groups"), 8),
        "mamba_n_heads": (("mamba_num_heads",), 128),
        "mamba_head_dim": (("mamba_head_dim",), 64),
        "mamba_d_state": (("ssm_state_size",), 128),
        "mamba_d_conv": (("conv_kernel", "mamba_d_conv"), 4),
        "mamba_expand": (("expand", "mamba_expand"), 2),
    },
    fixed={"mlp_kind": "plain"},
    window=("sliding_window", None),
    prepare=_nemotron_h_counted,
    build=_nemotron_h_moe,
    layers=_nemotron_h_layers,
)

#: the Mamba-2 mixer keys of Granite-4.0-H and Falcon-H1 (`configuration_granitemoehybrid.py`,
#: `configuration_falcon_h1.py`, with their defaults): mamba_n_heads (128) heads, mamba_n_groups
#: (1) groups of mamba_d_state (256), conv kernel mamba_d_conv (4), mamba_expand (2); the head
#: size mamba_d_head is each family's "auto" rule
_MAMBA2_COUNTS = {
    "mamba_n_groups": (("mamba_n_groups",), 1),
    "mamba_n_heads": (("mamba_n_heads",), 128),
    "mamba_d_state": (("mamba_d_state",), 256),
    "mamba_d_conv": (("mamba_d_conv",), 4),
    "mamba_expand": (("mamba_expand",), 2),
}


def _granite_layers(c: _Cfg, f: ModelFields, window: int | None) -> list[str]:
    """`Family.layers` of Granite-4.0-H: `layer_types` (or layers_block_type) lists mamba or
    attention for each layer."""
    raw = c.get("layer_types", "layers_block_type")
    if not isinstance(raw, list) or not raw or any(k not in ("mamba", "attention") for k in raw):
        raise c.fail("must list mamba or attention for each layer", "layer_types")
    if f["n_layers"] is not None and len(raw) != f["n_layers"]:
        raise c.fail(f"lists {len(raw)} layers but num_hidden_layers is {f['n_layers']}", "layer_types")
    return ["mamba" if k == "mamba" else "full" for k in raw]


def _granite_build(c: _Cfg, f: ModelFields) -> ModelFields:
    """`Family.build` of Granite-4.0-H: mamba_d_head "auto" = mamba_expand x hidden / heads; every
    layer has an MLP: num_local_experts of intermediate_size (1024) with a shared MLP of
    shared_intermediate_size (1024), or, when num_local_experts is 0, a dense MLP of
    shared_intermediate_size."""
    hidden = f["hidden_size"]
    f["mamba_head_dim"] = _auto(c, "mamba_d_head", f["mamba_expand"] * hidden // f["mamba_n_heads"] if hidden else None)
    experts = c.count("num_local_experts", default=0, minimum=0)
    shared = c.count("shared_intermediate_size", default=1024)
    if experts:
        f.update(
            n_experts=experts,
            n_experts_per_token=c.count("num_experts_per_tok", default=2),
            moe_intermediate_size=c.count("intermediate_size", default=1024),
            shared_expert_intermediate_size=shared,
        )
        f.pop("intermediate_size", None)
    else:
        f["intermediate_size"] = shared
    return f


#: granitemoehybrid, Granite 4.0-H (`configuration_granitemoehybrid.py`): mamba or attention per
#: layer (`_granite_layers`); attention layers GQA (NoPE); Mamba-2 layers (`_MAMBA2_COUNTS`,
#: mamba_d_head "auto"; vLLM `granitemoehybrid.py`); the MLPs as `_granite_build` says.
#: Embeddings tied by default.
GRANITEMOEHYBRID = Family(
    source="configuration_granitemoehybrid.py",
    decoder=dict(max_pos=4096, tie=True),
    counts=_MAMBA2_COUNTS,
    build=_granite_build,
    layers=_granite_layers,
)


def _falcon_h1_mixer(c: _Cfg, f: ModelFields) -> ModelFields:
    """`Family.build` of Falcon-H1: num_key_value_heads null means the query heads
    (FalconH1Config.__post_init__); `attn_layer_indices` (tiiuae's early remote code: attention on
    some layers only) is refused; the mixer's width d_inner = mamba_d_ssm (default 1024; null ->
    mamba_expand x hidden), and mamba_d_head "auto" = d_inner // heads, where transformers'
    `validate_architecture` requires heads x head_dim = d_inner."""
    if "num_key_value_heads" in c.data and c.data["num_key_value_heads"] is None:
        f["n_kv_heads"] = f["n_heads"]
    if c.get("attn_layer_indices") is not None:
        raise c.fail(
            "lists the layers with attention; transformers' and vLLM's Falcon-H1 put attention in every "
            "layer, and kvcalc sizes it so: remove it (null) or write a kvcalc YAML",
            "attn_layer_indices",
        )
    hidden = f["hidden_size"]
    d_ssm = c.int_or_null("mamba_d_ssm", 1024)
    if d_ssm is None:
        d_ssm = f["mamba_expand"] * hidden if hidden else None
    heads = f["mamba_n_heads"]
    head_dim = f["mamba_head_dim"] = _auto(c, "mamba_d_head", d_ssm // heads if d_ssm else None)
    if d_ssm is not None and head_dim is not None and heads * head_dim != d_ssm:
        raise c.fail(
            f"mamba_n_heads x mamba_d_head = {heads} x {head_dim} = {heads * head_dim:,} but the mixer's width "
            f"(mamba_d_ssm, else mamba_expand x hidden_size) is {d_ssm:,}; transformers refuses such a config "
            "(FalconH1Config.validate_architecture)",
            "mamba_d_head",
        )
    return f


#: falcon_h1, Falcon-H1 (`configuration_falcon_h1.py` FalconH1Config, `modeling_falcon_h1.py`
#: FalconH1DecoderLayer; vLLM `falcon_h1.py` FalconH1ParallelHybrid; llama.cpp `LLM_ARCH_FALCON_H1`):
#: every layer runs attention and a Mamba-2 mixer side by side (kind `hybrid`: a KV cache AND a
#: state per layer; `layers_block_type` is "hybrid" for every layer), then a gated MLP.
#:
#: Attention: num_attention_heads (32), num_key_value_heads (8; null -> the heads), head_dim
#: (else hidden // heads), max_position_embeddings 8192, untied, by default. Mamba-2 (vLLM
#: `get_mamba_state_shape_from_config` -> `mamba2_state_shape`): `_MAMBA2_COUNTS` with the
#: mixer's width and head size of `_falcon_h1_mixer`: conv state (d_conv - 1) x (d_inner + 2 x
#: groups x d_state), SSM state heads x head_dim x d_state. mamba_rms_norm (false) says whether
#: the mixer has its gated norm. The bias flags (mamba_proj_bias, projectors_bias, mlp_bias) are
#: false in the published configs and their vectors are not counted.
FALCON_H1 = Family(
    source="configuration_falcon_h1.py",
    decoder=dict(max_pos=8192, n_kv_heads=8),
    counts=_MAMBA2_COUNTS,
    flags={"mamba_norm": (("mamba_rms_norm",), False)},
    build=_falcon_h1_mixer,
    kinds=Kinds(rest="hybrid", layer_types=False),
)
