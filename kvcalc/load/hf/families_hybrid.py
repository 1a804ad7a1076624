"""The families with state-space or linear-attention layers beside attention: Qwen3-Next and
Qwen3.5 (Gated DeltaNet), Jamba (Mamba-1), Nemotron-H, Granite 4.0-H and Falcon-H1 (Mamba-2). Part
of the `FAMILIES` table in `kvcalc.load.hf.families`.
"""

from __future__ import annotations

from kvcalc.load.fields import ModelFields
from kvcalc.load.hf.family import Family, Kinds
from kvcalc.load.hf.reader import _Cfg, _decoder, _qwen_experts, _set_kinds, _shown


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
#: 512 experts of 512, 10 per token, one shared expert of 512.
QWEN3_NEXT = Family(
    source="configuration_qwen3_next.py",
    decoder=dict(max_pos=32768, head_dim=256, n_kv_heads=2),
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


def _jamba(c: _Cfg) -> ModelFields:
    """jamba (`configuration_jamba.py`): layer i is attention when i % attn_layer_period ==
    attn_layer_offset (8, 4), else Mamba-1 (d_state 16, d_conv 4, expand 2, dt_rank "auto" =
    ceil(hidden / 16)); MoE on layers with i % expert_layer_period == expert_layer_offset (2, 1),
    16 experts, 2 per token, each of intermediate_size (as is the dense MLP); 8 KV heads;
    attention slides only when sliding_window is set."""
    f = _decoder(c, n_kv_heads=8, max_pos=262144)
    period = c.count("attn_layer_period", default=8)
    offset = c.count("attn_layer_offset", default=4, minimum=0)
    _offset_below_period(c, "attn_layer", period, offset, "attention")
    _offset_below_period(
        c,
        "expert_layer",
        c.count("expert_layer_period", default=2),
        c.count("expert_layer_offset", default=1, minimum=0),
        "MoE",
    )
    window = c.count("sliding_window")
    attn = "sliding" if window else "full"
    kinds = [attn if i % period == offset else "mamba" for i in range(f["n_layers"] or 0)]
    hidden = f["hidden_size"]
    dt_rank = c.get("mamba_dt_rank", default="auto")
    if dt_rank == "auto":
        dt_rank = -(-hidden // 16) if hidden else None  # ceil(hidden / 16), in integers
    else:
        dt_rank = c.check_int("mamba_dt_rank", dt_rank)
    width = f["intermediate_size"] = c.count("intermediate_size", default=14336)
    f.update(
        mamba_d_state=c.count("mamba_d_state", default=16),
        mamba_d_conv=c.count("mamba_d_conv", default=4),
        mamba_expand=c.count("mamba_expand", default=2),
        mamba_dt_rank=dt_rank,
        n_experts=c.count("num_experts", default=16),
        n_experts_per_token=c.count("num_experts_per_tok", default=2),
        moe_intermediate_size=width,
        moe_layer_period=c.count("expert_layer_period", default=2),
        moe_layer_offset=c.count("expert_layer_offset", default=1, minimum=0),
    )
    if f["n_experts"] == 1:  # one expert is a dense MLP (Jamba's MoE only when num_experts > 1)
        f.update(
            n_experts=None, n_experts_per_token=None, moe_intermediate_size=None, moe_layer_period=1, moe_layer_offset=0
        )
    return _set_kinds(c, f, kinds, window)


#: qwen3_5_text, the text model of Qwen3.5 (`configuration_qwen3_5.py` Qwen3_5TextConfig: hidden
#: 4096, 32 layers, 16 heads, 4 KV heads, head_dim 256, dense MLP 12288, vocab 248320, 32,768
#: context; layer_types, else every full_attention_interval-th (4) layer full attention and the
#: rest Gated DeltaNet: 16 key heads and 32 value heads of 128, conv kernel 4), as qwen3_next
#: without experts.
QWEN3_5_TEXT = Family(
    source="configuration_qwen3_5.py Qwen3_5TextConfig",
    decoder=dict(max_pos=32768, head_dim=256, n_kv_heads=4),
    counts={"vocab_size": (("vocab_size",), 248320), "intermediate_size": (("intermediate_size",), 12288)},
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
    },
    kinds=_QWEN_LINEAR_KINDS,
    build=_qwen3_5_moe_build,
)


#: Nemotron-H's `hybrid_override_pattern` characters (`configuration_nemotron_h.py`
#: `_pattern_to_list`): M Mamba-2, * attention, - MLP, E MoE; the last two mix no tokens.
_NEMOTRON_H_KINDS = {"M": "mamba", "*": "full", "-": "mlp", "E": "mlp"}
_NEMOTRON_H_TYPES = {
    "mamba": "mamba",
    "linear_attention": "mamba",
    "attention": "full",
    "full_attention": "full",
    "mlp": "mlp",
    "moe": "mlp",
}


def _nemotron_h(c: _Cfg) -> ModelFields:
    """nemotron_h, Nemotron-H and Nemotron Nano 2 / 3 (`configuration_nemotron_h.py`): one block per
    layer, from `hybrid_override_pattern` (M Mamba-2, * attention, - MLP, E MoE) or
    `layers_block_type`; the pattern's length is the layer count. Attention: 32 heads, 8 KV heads,
    head_dim 128 by default. Mamba-2 (vLLM `nemotron_h.py`, `mamba2_state_shape`): mamba_num_heads
    (128) heads of mamba_head_dim (64), so d_inner = heads x head_dim; ssm_state_size (128),
    n_groups (8), conv_kernel (4). The separate MLP / MoE layers cache nothing (kind `mlp`); the
    parameter count counts each layer as one block (`weights._separate_block_params`): MoE (`E`)
    layers when every MLP block is one (Nemotron-3: n_routed_experts of moe_intermediate_size in a
    moe_latent_size latent, a shared expert of moe_shared_expert_intermediate_size), and refuses a
    mix of dense and MoE MLP blocks, whose width is left unset (give n_params). The state is sized in the model's dtype (the
    config's mamba_ssm_cache_dtype float32 doubles the SSM part where an engine honours it)."""
    pattern = c.get("hybrid_override_pattern")
    if pattern is not None:
        if not isinstance(pattern, str) or not pattern or set(pattern) - set(_NEMOTRON_H_KINDS):
            raise c.fail(f"must be a string of M, *, - and E, got {_shown(pattern)}", "hybrid_override_pattern")
        kinds = [_NEMOTRON_H_KINDS[ch] for ch in pattern]
        key, moe, dense_mlp = "hybrid_override_pattern", "E" in pattern, "-" in pattern
    else:
        raw = c.get("layers_block_type", "layer_types")
        if not isinstance(raw, list) or not raw or any(k not in _NEMOTRON_H_TYPES for k in raw):
            raise c.fail(
                "needs hybrid_override_pattern (M, *, -, E) or layers_block_type listing mamba, "
                "attention, mlp or moe per layer",
                "hybrid_override_pattern",
            )
        kinds = [_NEMOTRON_H_TYPES[str(k)] for k in raw]  # each checked above
        key, moe, dense_mlp = "layers_block_type", "moe" in raw, "mlp" in raw
    layers = c.count("num_hidden_layers")
    if layers is not None and layers != len(kinds):
        raise c.fail(f"has {len(kinds)} layers but num_hidden_layers is {layers}", key)
    counted = _Cfg({**c.data, "num_hidden_layers": len(kinds)}, c.path, c.model_type)
    f = _decoder(counted, max_pos=4096, head_dim=128, n_kv_heads=8)
    c.missing.extend(counted.missing)
    f["mlp_kind"] = "plain"  # relu2 up / down
    if moe:
        # MoE blocks (Nemotron 3): routed experts of moe_intermediate_size, not dense MLPs of
        # intermediate_size. When every MLP block is MoE (no `-`) the count is exact (vLLM 0.33.0
        # `nemotron_h.py` NemotronHMoE, `weights._separate_moe_params`); a mix of dense and MoE MLP
        # blocks leaves the width unset, so the parameter count refuses rather than miscount them
        f.pop("intermediate_size", None)
        if not dense_mlp:
            shared = c.count("moe_shared_expert_intermediate_size", minimum=0) or 0
            f.update(
                n_experts=c.count("n_routed_experts"),
                n_experts_per_token=c.count("num_experts_per_tok"),
                moe_intermediate_size=c.count("moe_intermediate_size"),
                shared_expert_intermediate_size=shared * c.count("n_shared_experts", default=1, minimum=0) or None,
                moe_latent_size=c.count("moe_latent_size"),
                router_bias=True,  # NemotronHMoE: e_score_correction_bias
            )
    f.update(
        mamba_n_groups=c.count("n_groups", "mamba_n_groups", default=8),
        mamba_n_heads=c.count("mamba_num_heads", default=128),
        mamba_head_dim=c.count("mamba_head_dim", default=64),
        mamba_d_state=c.count("ssm_state_size", default=128),
        mamba_d_conv=c.count("conv_kernel", "mamba_d_conv", default=4),
        mamba_expand=c.count("expand", "mamba_expand", default=2),
    )
    return _set_kinds(c, f, kinds, c.count("sliding_window"))


def _granitemoehybrid(c: _Cfg) -> ModelFields:
    """granitemoehybrid, Granite 4.0-H (`configuration_granitemoehybrid.py`): `layer_types`
    (layers_block_type) lists mamba or attention per layer; attention layers GQA (NoPE); Mamba-2
    layers of mamba_n_heads (128) heads, mamba_d_head ("auto" = mamba_expand (2) x hidden /
    heads), mamba_d_state (256), mamba_n_groups (1), mamba_d_conv (4) (vLLM
    `granitemoehybrid.py`). Every layer has an MLP: num_local_experts of intermediate_size with a
    shared MLP of shared_intermediate_size, or a dense MLP of shared_intermediate_size when
    num_local_experts is 0. Embeddings tied by default."""
    f = _decoder(c, max_pos=4096, tie=True)
    raw = c.get("layer_types", "layers_block_type")
    if not isinstance(raw, list) or not raw or any(k not in ("mamba", "attention") for k in raw):
        raise c.fail("must list mamba or attention for each layer", "layer_types")
    if f["n_layers"] is not None and len(raw) != f["n_layers"]:
        raise c.fail(f"lists {len(raw)} layers but num_hidden_layers is {f['n_layers']}", "layer_types")
    kinds = ["mamba" if k == "mamba" else "full" for k in raw]
    heads = c.count("mamba_n_heads", default=128)
    expand = c.count("mamba_expand", default=2)
    head_dim = c.get("mamba_d_head", default="auto")
    if head_dim == "auto":
        hidden = f["hidden_size"]
        head_dim = expand * hidden // heads if hidden else None
    else:
        head_dim = c.check_int("mamba_d_head", head_dim)
    f.update(
        mamba_n_groups=c.count("mamba_n_groups", default=1),
        mamba_n_heads=heads,
        mamba_head_dim=head_dim,
        mamba_d_state=c.count("mamba_d_state", default=256),
        mamba_d_conv=c.count("mamba_d_conv", default=4),
        mamba_expand=expand,
    )
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
    return _set_kinds(c, f, kinds, None)


def _falcon_h1(c: _Cfg) -> ModelFields:
    """falcon_h1, Falcon-H1 (`configuration_falcon_h1.py` FalconH1Config, `modeling_falcon_h1.py`
    FalconH1DecoderLayer; vLLM `falcon_h1.py` FalconH1ParallelHybrid; llama.cpp `LLM_ARCH_FALCON_H1`):
    every layer runs attention and a Mamba-2 mixer side by side (kind `hybrid`: a KV cache AND a
    state per layer; `layers_block_type` is "hybrid" for every layer), then a gated MLP.

    Attention: num_attention_heads (32), num_key_value_heads (8; null -> the heads), head_dim
    (else hidden // heads), max_position_embeddings 8192, untied, by default. Mamba-2 (vLLM
    `get_mamba_state_shape_from_config` -> `mamba2_state_shape`): d_inner = mamba_d_ssm (default
    1024; null -> mamba_expand x hidden) with mamba_n_heads (128) heads of mamba_d_head ("auto" =
    d_inner // heads; transformers' `validate_architecture` requires heads x head_dim = d_inner),
    mamba_n_groups (1) groups of mamba_d_state (256), conv kernel mamba_d_conv (4): conv state
    (d_conv - 1) x (d_inner + 2 x groups x d_state), SSM state heads x head_dim x d_state.
    mamba_rms_norm (false) says whether the mixer has its gated norm. `attn_layer_indices` (tiiuae's
    early remote code: attention on some layers only) is refused; the bias flags (mamba_proj_bias,
    projectors_bias, mlp_bias) are false in the published configs and their vectors are not counted."""
    f = _decoder(c, max_pos=8192, n_kv_heads=8)
    if "num_key_value_heads" in c.data and c.data["num_key_value_heads"] is None:
        f["n_kv_heads"] = f["n_heads"]  # FalconH1Config.__post_init__: None -> num_attention_heads
    if c.get("attn_layer_indices") is not None:
        raise c.fail(
            "lists the layers with attention; transformers' and vLLM's Falcon-H1 put attention in every "
            "layer, and kvcalc sizes it so: remove it (null) or write a kvcalc YAML",
            "attn_layer_indices",
        )
    hidden = f["hidden_size"]
    expand = c.count("mamba_expand", default=2)
    d_ssm = c.int_or_null("mamba_d_ssm", 1024)
    if d_ssm is None:
        d_ssm = expand * hidden if hidden else None
    heads = c.count("mamba_n_heads", default=128)
    head_dim = c.get("mamba_d_head", default="auto")
    if head_dim == "auto":
        head_dim = d_ssm // heads if d_ssm else None
    else:
        head_dim = c.check_int("mamba_d_head", head_dim)
    if d_ssm is not None and head_dim is not None and heads * head_dim != d_ssm:
        raise c.fail(
            f"mamba_n_heads x mamba_d_head = {heads} x {head_dim} = {heads * head_dim:,} but the mixer's width "
            f"(mamba_d_ssm, else mamba_expand x hidden_size) is {d_ssm:,}; transformers refuses such a config "
            "(FalconH1Config.validate_architecture)",
            "mamba_d_head",
        )
    f.update(
        mamba_n_groups=c.count("mamba_n_groups", default=1),
        mamba_n_heads=heads,
        mamba_head_dim=head_dim,
        mamba_d_state=c.count("mamba_d_state", default=256),
        mamba_d_conv=c.count("mamba_d_conv", default=4),
        mamba_expand=expand,
        mamba_norm=c.flag("mamba_rms_norm", default=False),
    )
    n = f["n_layers"] or 0
    return _set_kinds(c, f, ["hybrid"] * n if n else None, None)
