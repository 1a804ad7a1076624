"""One mapping per Hugging Face `model_type` family -> `ModelSpec` fields, and the `FAMILIES`
table `kvcalc.load.hf` dispatches on. A family is data where a table can say it (`Family`: config
keys -> fields with the transformers class's defaults, the layer-kind rule, the window; see
`kvcalc.load.hf.family`), and a function where its rules are code (Falcon's old names, MPT's and
DBRX's nested configs, the Qwen window, Jamba's periods, Nemotron-H's pattern, Llama-4's chunks).
The 2026 families are in `kvcalc.load.hf.families_2026`. Each reads the fields its transformers
configuration class reads, with that class's defaults; the rules are listed in `kvcalc.load.hf`'s
docstring.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kvcalc.load.hf.families_2026 import FAMILIES_2026, TEXT_MODEL_TYPES_2026
from kvcalc.load.hf.family import Family, Kinds
from kvcalc.load.hf.mla import DEEPSEEK as _deepseek
from kvcalc.load.hf.reader import (
    _Cfg,
    _decoder,
    _every_nth,
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
MISTRAL = Family(source="configuration_mistral.py", decoder=dict(max_pos=4096 * 32), kinds=Kinds(rest="sliding"),
                 window=("sliding_window", 4096))

#: phi3 (`configuration_phi3.py`): like mistral, a set sliding_window applies to every layer
#: (Phi-3-mini-4k: 2047); default null.
PHI3 = Family(source="configuration_phi3.py", decoder=dict(max_pos=4096), kinds=Kinds(rest="sliding"),
              window=("sliding_window", None))

#: gemma (`configuration_gemma.py`): head_dim 256, tied embeddings, 8192 context.
GEMMA = Family(source="configuration_gemma.py", decoder=dict(head_dim=256, tie=True, max_pos=8192))

#: gemma2 (`configuration_gemma2.py`): layer_types, else layer i slides when i % 2 == 0
#: (`"sliding_attention" if bool((i + 1) % 2)`); window 4096 by default; head_dim 256; tied.
GEMMA2 = Family(source="configuration_gemma2.py", decoder=dict(head_dim=256, tie=True, max_pos=8192),
                kinds=Kinds(nth="full", rest="sliding", every=2), window=("sliding_window", 4096))

#: gemma3_text (`configuration_gemma3.py` Gemma3TextConfig): layer_types, else layer i is global
#: when (i + 1) % sliding_window_pattern == 0 (default 6: 5 local then 1 global); window 4096, 8
#: heads, 4 KV heads, head_dim 256, vocab 262208, 131072 context, tied, by default (gemma-3-4b's
#: text_config relies on the head defaults).
GEMMA3_TEXT = Family(source="configuration_gemma3.py Gemma3TextConfig",
                     decoder=dict(head_dim=256, n_heads=8, n_kv_heads=4, tie=True, max_pos=131072),
                     counts={"vocab_size": (("vocab_size",), 262208)},
                     kinds=Kinds(nth="full", rest="sliding", every=6,
                                 every_keys=("sliding_window_pattern", "_sliding_window_pattern")),
                     window=("sliding_window", 4096))

#: olmo2 (`configuration_olmo2.py`): a llama decoder (q/k norms aside), 2048 context by default,
#: MHA unless num_key_value_heads says otherwise, no window, untied.
OLMO2 = Family(source="configuration_olmo2.py", decoder=dict(max_pos=2048))

#: starcoder2 (`configuration_starcoder2.py`: hidden 3072, 30 layers, 24 heads, 2 KV heads,
#: max_position_embeddings 4096, sliding_window 4096, use_bias true; `modeling_starcoder2.py`: a
#: plain GELU MLP c_fc / c_proj of intermediate_size, biased projections, the window on every layer
#: as Mistral; vLLM `starcoder2.py` likewise). Tied unless the config says otherwise
#: (PretrainedConfig's default).
STARCODER2 = Family(source="configuration_starcoder2.py", decoder=dict(max_pos=4096, tie=True),
                    flags={"attention_bias": (("use_bias",), True)}, fixed={"mlp_kind": "plain"},
                    kinds=Kinds(rest="sliding"), window=("sliding_window", 4096))

#: cohere2, Command R7B (`configuration_cohere2.py`): layer_types, else layer i slides when (i + 1)
#: % sliding_window_pattern != 0 (default 4: three sliding then one global); window 4096;
#: embeddings tied (use_embedding_sharing); 8192 context by default.
COHERE2 = Family(source="configuration_cohere2.py", decoder=dict(max_pos=8192, tie=True),
                 flags={"tie_word_embeddings": (("use_embedding_sharing", "tie_word_embeddings"), True)},
                 kinds=Kinds(nth="full", rest="sliding", every=4,
                             every_keys=("sliding_window_pattern", "_sliding_window_pattern")),
                 window=("sliding_window", 4096))


def _glm4_moe_experts(c: _Cfg, f: dict[str, Any]) -> dict[str, Any]:
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
#: (num_nextn_predict_layers) are not in num_hidden_layers.
GLM4_MOE = Family(source="configuration_glm4_moe.py", decoder=dict(max_pos=131072, head_dim=128, n_kv_heads=8),
                  counts={"n_experts": (("n_routed_experts",), 128), "n_experts_per_token": (("num_experts_per_tok",), 8),
                          "moe_intermediate_size": (("moe_intermediate_size",), 1408)},
                  build=_glm4_moe_experts)

#: mixtral (`configuration_mixtral.py`): sliding_window defaults to null; every layer is sparse,
#: and `intermediate_size` is the expert width (there is no dense MLP).
MIXTRAL = Family(source="configuration_mixtral.py", decoder=dict(max_pos=4096 * 32),
                 counts={"n_experts": (("num_local_experts",), 8), "n_experts_per_token": (("num_experts_per_tok",), 2)},
                 rename={"intermediate_size": "moe_intermediate_size"}, kinds=Kinds(rest="sliding"),
                 window=("sliding_window", None))

#: gpt_neox (`configuration_gpt_neox.py`): MHA, plain GELU MLP, untied, QKV bias (default true),
#: 2048 context.
GPT_NEOX = Family(source="configuration_gpt_neox.py", decoder=dict(max_pos=2048, bias=True),
                  fixed={"mlp_kind": "plain"})

#: gpt_oss (`configuration_gpt_oss.py`): layer_types, else layer i slides when i % 2 == 0; window
#: 128, 8 KV heads x 64 by default; every layer sparse: num_local_experts of intermediate_size
#: (2880), experts_per_token / num_experts_per_tok (4); QKV bias; untied.
GPT_OSS = Family(source="configuration_gpt_oss.py", decoder=dict(head_dim=64, n_kv_heads=8, max_pos=131072, bias=True),
                 counts={"moe_intermediate_size": (("intermediate_size",), 2880),
                         "n_experts": (("num_local_experts", "num_experts"), 128),
                         "n_experts_per_token": (("experts_per_token", "num_experts_per_tok"), 4)},
                 rename={"intermediate_size": "moe_intermediate_size"},
                 kinds=Kinds(nth="full", rest="sliding", every=2), window=("sliding_window", 128))

# ----- the families whose rules are code ---------------------------------------------------


def _qwen2(c: _Cfg) -> dict[str, Any]:
    """qwen2 (`configuration_qwen2.py`, `modeling_qwen2.py`): q/k/v projections always have a
    bias; untied by default; see `_qwen_window_kinds`."""
    f = _decoder(c, max_pos=32768, bias=True)
    f["attention_bias"] = True
    kinds, window = _qwen_window_kinds(c, f)
    return _set_kinds(c, f, kinds, window)


def _qwen2_moe(c: _Cfg) -> dict[str, Any]:
    """qwen2_moe (`configuration_qwen2_moe.py`): qwen2 attention; 60 experts of 1408, 4 per
    token, one shared expert of 5632 by default; `intermediate_size` is the dense MLP."""
    return _qwen_experts(c, _qwen2(c), n_experts=60, per_token=4, width=1408, shared=5632)


def _qwen3(c: _Cfg) -> dict[str, Any]:
    """qwen3 (`configuration_qwen3.py`): head_dim defaults to 128 (explicit in Qwen3-4B,
    where hidden 2560 / 32 heads = 80 would be wrong); attention_bias default false."""
    f = _decoder(c, max_pos=32768, head_dim=128)
    kinds, window = _qwen_window_kinds(c, f)
    return _set_kinds(c, f, kinds, window)


def _qwen3_moe(c: _Cfg) -> dict[str, Any]:
    """qwen3_moe (`configuration_qwen3_moe.py`): qwen3 attention; 128 experts of 768, 8 per
    token, no shared expert by default."""
    return _qwen_experts(c, _qwen3(c), n_experts=128, per_token=8, width=768)


def _gated_deltanet(c: _Cfg) -> dict[str, Any]:
    """The Gated DeltaNet (linear attention) fields of Qwen3-Next and Qwen3.5, with
    transformers' `Qwen3NextConfig` defaults: 16 key heads, 32 value heads of 128, conv kernel 4."""
    return dict(
        linear_num_key_heads=c.count("linear_num_key_heads", default=16),
        linear_num_value_heads=c.count("linear_num_value_heads", default=32),
        linear_key_head_dim=c.count("linear_key_head_dim", default=128),
        linear_value_head_dim=c.count("linear_value_head_dim", default=128),
        linear_conv_kernel_dim=c.count("linear_conv_kernel_dim", default=4),
    )


def _qwen3_next(c: _Cfg) -> dict[str, Any]:
    """qwen3_next (`configuration_qwen3_next.py`): layer_types, else every
    `full_attention_interval`-th layer (default 4) full attention and the rest Gated DeltaNet
    linear attention; full layers: 2 KV heads x 256 by default; linear layers: 16 key heads
    and 32 value heads of 128, conv kernel 4; 512 experts of 512, 10 per token, one shared
    expert of 512."""
    f = _decoder(c, max_pos=32768, head_dim=256, n_kv_heads=2)
    kinds = _every_nth(c, f["n_layers"], "full", "linear", every=4, every_keys=("full_attention_interval",))
    f.update(_gated_deltanet(c))
    _qwen_experts(c, f, n_experts=512, per_token=10, width=512, shared=512)
    return _set_kinds(c, f, kinds, c.count("sliding_window"))


def _plain_mlp(c: _Cfg, f: dict[str, Any], width_key: str) -> dict[str, Any]:
    """Falcon / GPT-2: every layer full attention, a plain GELU MLP whose width is `width_key`,
    by default 4 x hidden_size."""
    hidden = f["hidden_size"]
    f["intermediate_size"] = c.count(width_key, default=4 * hidden if hidden else None)
    f["mlp_kind"] = "plain"
    return _set_kinds(c, f, None, None)


#: Falcon's model_types before transformers adopted it (tiiuae's remote configuration_RW.py).
_FALCON_RW = ("RefinedWeb", "RefinedWebModel")


def _falcon(c: _Cfg) -> dict[str, Any]:
    """falcon (`configuration_falcon.py`, `modeling_falcon.py` FalconAttention:
    `num_kv_heads = config.num_kv_heads if (new_decoder_architecture or not multi_query) else 1`,
    config.num_kv_heads defaulting to the query heads; multi_query defaults to true).

    The old model_types RefinedWeb / RefinedWebModel are read as vLLM's `RWConfig` does
    (`vllm/transformers_utils/configs/falcon.py`: n_head_kv defaults to 1, and "Hack for
    falcon-40b": hidden_size 8192 turns on new_decoder_architecture) and as falcon-40b's own
    modelling_RW.py does (it sizes K and V by n_head_kv, ignoring multi_query): an explicit
    n_head_kv, or hidden_size 8192, means the new architecture with n_head_kv KV heads. So
    tiiuae/falcon-40b (RefinedWeb, n_head_kv 8, no multi_query key) has 8 KV heads, and
    tiiuae/falcon-7b (RefinedWebModel, multi_query true, no n_head_kv) has 1; vLLM's
    `ModelConfig.get_total_num_kv_heads` gives the same (multi_query ignored for the new
    architecture).

    Old names n_layer / n_head / n_head_kv / n_embed; plain GELU MLP of ffn_hidden_size
    (default 4 x hidden); tied; bias from `bias`; 2048 context."""
    f = _decoder(c, max_pos=2048, tie=True, layer_keys=("num_hidden_layers", "n_layer"),
                 head_keys=("num_attention_heads", "n_head"), hidden_keys=("hidden_size", "n_embed"),
                 kv_keys=("num_kv_heads", "n_head_kv"))
    f["attention_bias"] = c.flag("bias", default=False)
    new_arch = c.flag("new_decoder_architecture", default=False)
    if c.model_type in _FALCON_RW and (c.get("num_kv_heads", "n_head_kv") is not None or f["hidden_size"] == 8192):
        new_arch = True
        f.setdefault("n_kv_heads", 1)  # RWConfig: n_head_kv None -> 1
    if new_arch or not c.flag("multi_query", default=True):
        f.setdefault("n_kv_heads", f["n_heads"])
    else:
        f["n_kv_heads"] = 1
    return _plain_mlp(c, f, "ffn_hidden_size")


def _gpt2(c: _Cfg) -> dict[str, Any]:
    """gpt2 (`configuration_gpt2.py`): n_layer, n_head, n_embd, n_positions (1024); MHA;
    plain MLP of n_inner (default 4 x n_embd); tied; biased; weights in fp32 (no dtype field)."""
    f = _decoder(c, max_pos=None, tie=True, bias=True, layer_keys=("n_layer", "num_hidden_layers"),
                 head_keys=("n_head", "num_attention_heads"), hidden_keys=("n_embd", "hidden_size"))
    f["max_position_embeddings"] = c.count("n_positions", "max_position_embeddings", default=1024)
    return _plain_mlp(c, f, "n_inner")


def _gpt_bigcode(c: _Cfg) -> dict[str, Any]:
    """gpt_bigcode, StarCoder / SantaCoder (`configuration_gpt_bigcode.py`: n_layer 12, n_head
    12, n_embd 768, n_positions 1024, multi_query true by default; `modeling_gpt_bigcode.py`
    GPTBigCodeAttention: `kv_heads = 1 if multi_query else num_heads`, head_dim = n_embd //
    n_head; vLLM `get_total_num_kv_heads`: multi_query -> 1). Plain GELU MLP of n_inner
    (default 4 x n_embd); tied; biased; no dtype field -> fp32 (as gpt2)."""
    f = _gpt2(c)
    f["n_kv_heads"] = 1 if c.flag("multi_query", default=True) else f["n_heads"]
    return f


def _chatglm(c: _Cfg) -> dict[str, Any]:
    """chatglm, ChatGLM2/3 and GLM-4-9B (THUDM `configuration_chatglm.py`: num_layers 28,
    hidden_size 4096, num_attention_heads 32, kv_channels 128, seq_length 2048,
    multi_query_attention false, multi_query_group_num 1, padded_vocab_size 65024,
    ffn_hidden_size 13696, add_qkv_bias false; `modeling_chatglm.py` SelfAttention and vLLM
    `model_executor/models/chatglm.py`: KV heads = multi_query_group_num if
    multi_query_attention else num_attention_heads; each head is kv_channels wide).

    A multi_query_group_num without multi_query_attention: true is refused: the model's code
    ignores it, vLLM's `get_total_num_kv_heads` does not."""
    f = _decoder(c, max_pos=2048, layer_keys=("num_layers",))
    f.pop("head_dim", None)
    f["head_dim"] = c.count("kv_channels", default=128)
    f["max_position_embeddings"] = c.count("seq_length", default=2048)
    f["vocab_size"] = c.count("padded_vocab_size", "vocab_size", default=65024)
    f["intermediate_size"] = c.count("ffn_hidden_size", default=13696)
    f["attention_bias"] = c.flag("add_qkv_bias", default=False)
    groups = c.count("multi_query_group_num")
    if c.flag("multi_query_attention", default=False):
        f["n_kv_heads"] = groups or 1
    elif groups is not None and groups != f["n_heads"]:
        raise c.fail(f"multi_query_group_num is {groups} but multi_query_attention is not true: "
                     "ChatGLM's code then uses one KV head per query head, vLLM uses the group "
                     "number; set multi_query_attention to say which", "multi_query_attention")
    else:
        f["n_kv_heads"] = f["n_heads"]
    return _set_kinds(c, f, None, None)


def _nested(c: _Cfg, key: str) -> _Cfg:
    """A nested mapping of MPT / DBRX (`attn_config`, DBRX's `ffn_config`) as a `_Cfg` whose
    errors name `key.X`."""
    sub = _Cfg(c.mapping(key), c.path, c.model_type)
    sub.prefix = key + "."
    return sub


def _mpt(c: _Cfg) -> dict[str, Any]:
    """mpt (`configuration_mpt.py`: d_model 2048, n_heads 16, n_layers 24, max_seq_len 2048,
    vocab 50368, expansion_ratio 4, no_bias true, tied; MptAttention is multi-head, head_dim
    d_model // n_heads; vLLM `get_total_num_kv_heads`: attn_config.kv_n_heads when given, else
    n_heads). attn_type multiquery_attention (llm-foundry: 1 KV head; transformers and vLLM: all
    heads) and a set attn_config.sliding_window_size are refused: the engines disagree or
    kvcalc cannot place the window."""
    f = _decoder(c, max_pos=2048, tie=True, layer_keys=("n_layers",), head_keys=("n_heads",),
                 hidden_keys=("d_model",), kv_keys=())
    a = _nested(c, "attn_config")
    attn_type = a.data.get("attn_type", "multihead_attention")
    if attn_type not in ("multihead_attention", "grouped_query_attention"):
        raise a.fail(f"'{attn_type}' is not sized the same by every engine (transformers and "
                     "vLLM read it as multi-head); write a kvcalc YAML", "attn_type")
    if a.data.get("sliding_window_size") not in (None, -1):
        raise a.fail("a sliding window in an MPT config cannot be read yet; write a kvcalc YAML",
                     "sliding_window_size")
    kv = a.count("kv_n_heads")
    if kv is not None and attn_type == "multihead_attention" and kv != f["n_heads"]:
        raise a.fail(f"is {kv} but attn_type is multihead_attention (llm-foundry then uses "
                     f"{f['n_heads']} KV heads, vLLM {kv}); fix one of them", "kv_n_heads")
    if kv is not None:
        f["n_kv_heads"] = kv
    f["max_position_embeddings"] = c.count("max_seq_len", default=2048)
    hidden = f["hidden_size"]
    ratio = c.count("expansion_ratio", default=4)
    f["intermediate_size"] = ratio * hidden if hidden else None
    f["attention_bias"] = not c.flag("no_bias", default=True)
    f["vocab_size"] = f["vocab_size"] or 50368
    f["mlp_kind"] = "plain"
    return _set_kinds(c, f, None, None)


def _dbrx(c: _Cfg) -> dict[str, Any]:
    """dbrx (`configuration_dbrx.py`: d_model 2048, n_heads 16, n_layers 24, max_seq_len 2048,
    vocab 32000; DbrxAttentionConfig kv_n_heads defaults to 1 and becomes num_key_value_heads;
    head_dim d_model // n_heads; DbrxFFNConfig: moe_num_experts 4 of ffn_hidden_size 3584,
    moe_top_k 1; untied; vLLM `get_total_num_kv_heads`: attn_config.kv_n_heads)."""
    f = _decoder(c, max_pos=2048, layer_keys=("n_layers",), head_keys=("n_heads",),
                 hidden_keys=("d_model",), kv_keys=())
    f["n_kv_heads"] = _nested(c, "attn_config").count("kv_n_heads", default=1)
    f["max_position_embeddings"] = c.count("max_seq_len", default=2048)
    ffn = _nested(c, "ffn_config")
    f.pop("intermediate_size", None)
    f.update(n_experts=ffn.count("moe_num_experts", default=4),
             n_experts_per_token=ffn.count("moe_top_k", default=1),
             moe_intermediate_size=ffn.count("ffn_hidden_size", default=3584))
    f["vocab_size"] = f["vocab_size"] or 32000
    return _set_kinds(c, f, None, None)


def _offset_below_period(c: _Cfg, key: str, period: int, offset: int, what: str) -> None:
    """Raise `ConfigError` (field `<key>_offset`) unless offset < period: transformers' Jamba makes
    layer i a(n) `what` layer when i % period == offset (`configuration_jamba.py`
    `layers_block_type`, `layers_num_experts`), so an offset at or past the period makes none."""
    if offset >= period:
        raise c.fail(f"{offset} is not below {key}_period ({period}): layer i is {what} when i % {period} == "
                     f"{offset}, so no layer would be; give an offset from 0 to {period - 1}", field=f"{key}_offset")


def _jamba(c: _Cfg) -> dict[str, Any]:
    """jamba (`configuration_jamba.py`): layer i is attention when i % attn_layer_period ==
    attn_layer_offset (8, 4), else Mamba-1 (d_state 16, d_conv 4, expand 2, dt_rank "auto" =
    ceil(hidden / 16)); MoE on layers with i % expert_layer_period == expert_layer_offset (2, 1),
    16 experts, 2 per token, each of intermediate_size (as is the dense MLP); 8 KV heads;
    attention slides only when sliding_window is set."""
    f = _decoder(c, n_kv_heads=8, max_pos=262144)
    period = c.count("attn_layer_period", default=8)
    offset = c.count("attn_layer_offset", default=4, minimum=0)
    _offset_below_period(c, "attn_layer", period, offset, "attention")
    _offset_below_period(c, "expert_layer", c.count("expert_layer_period", default=2),
                         c.count("expert_layer_offset", default=1, minimum=0), "MoE")
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
        f.update(n_experts=None, n_experts_per_token=None, moe_intermediate_size=None,
                 moe_layer_period=1, moe_layer_offset=0)
    return _set_kinds(c, f, kinds, window)


# ----- issue 9 item 6: families users serve today ------------------------------------------


def _exaone4(c: _Cfg) -> dict[str, Any]:
    """exaone4 (`configuration_exaone4.py`): layer_types, else with a sliding_window layer i slides
    when (i + 1) % sliding_window_pattern != 0 (default 4), and with none every layer is global;
    the published EXAONE-4.0-32B writes the pattern as "LLLG" (L local, G global), read here
    repeating over the layers. Untied, no bias, 131,072 context by default."""
    f = _decoder(c, max_pos=131072)
    window = c.int_or_null("sliding_window", 4096)
    pattern = c.get("sliding_window_pattern", default=4)
    if c.get("layer_types") is not None:
        kinds = _kinds_from_layer_types(c, f["n_layers"])
    elif window is None:
        kinds = None
    elif isinstance(pattern, str):
        if not pattern or set(pattern) - {"L", "G"}:
            raise c.fail(f"must be a count or a string of L (local) and G (global), got {_shown(pattern)}",
                         "sliding_window_pattern")
        kinds = ["sliding" if pattern[i % len(pattern)] == "L" else "full" for i in range(f["n_layers"] or 0)]
    else:
        kinds = _every_nth(c, f["n_layers"], "full", "sliding", every=4, every_keys=("sliding_window_pattern",))
    return _set_kinds(c, f, kinds, window)


def _llama4_text(c: _Cfg) -> dict[str, Any]:
    """llama4_text, the text model of Llama 4 Scout / Maverick (`configuration_llama4.py`
    Llama4TextConfig; `modeling_llama4.py`; vLLM `llama4.py`: `use_chunked_local_attn = not nope
    and attention_chunk_size`). Layers that use RoPE attend within chunks of
    attention_chunk_size (8192), so they cache at most one chunk: written as a window of that
    size. `no_rope_layers[i]` is 1 for a RoPE (chunked) layer and 0 for a NoPE global layer;
    when absent or empty, layer i is global when (i + 1) % no_rope_layer_interval == 0 (4).
    `layer_types` (chunked_attention / full_attention) wins. MoE on the layers i with
    (i + 1) % interleave_moe_layer_step == 0 (1: every layer): num_local_experts (16) of
    intermediate_size (8192), num_experts_per_tok (1), plus a shared expert of the same width;
    the dense layers' MLP is intermediate_size_mlp (16384). Defaults: 48 layers, 40 heads, 8 KV
    heads, head_dim 128, hidden 5120, vocab 202048, untied."""
    f = _decoder(c, max_pos=4096 * 32, head_dim=128, n_kv_heads=8)
    n = f["n_layers"] or 0
    chunk = c.int_or_null("attention_chunk_size", 8192)
    if c.get("layer_types") is not None:
        raw = c.data["layer_types"]
        if not isinstance(raw, list):
            raise c.fail("must be a non-empty list of layer kinds", "layer_types")
        swapped = _Cfg({**c.data, "layer_types": ["sliding_attention" if k == "chunked_attention" else k
                                                  for k in raw]}, c.path, c.model_type)
        kinds = _kinds_from_layer_types(swapped, n)
    else:
        rope = c.get("no_rope_layers")
        if rope:
            if not isinstance(rope, list) or len(rope) != n or any(v not in (0, 1) or type(v) is bool for v in rope):
                raise c.fail(f"must list 0 (NoPE, global) or 1 (RoPE, chunked) for each of the {n} layers",
                             "no_rope_layers")
        else:
            every = c.count("no_rope_layer_interval", default=4)
            rope = [int((i + 1) % every != 0) for i in range(n)]
        kinds = ["sliding" if r else "full" for r in rope]
    if chunk is None:
        kinds = ["full" if k == "sliding" else k for k in kinds]
    width = c.count("intermediate_size", default=8192)
    step = c.count("interleave_moe_layer_step", default=1)
    f.update(intermediate_size=c.count("intermediate_size_mlp", default=16384),
             n_experts=c.count("num_local_experts", default=16),
             n_experts_per_token=c.count("num_experts_per_tok", default=1),
             moe_intermediate_size=width, shared_expert_intermediate_size=width,
             vocab_size=f["vocab_size"] or 202048)
    if step > 1:
        f["moe_layer_period"], f["moe_layer_offset"] = step, step - 1
    moe_layers = c.get("moe_layers")
    if moe_layers is not None and list(moe_layers) != list(range(step - 1, n, step)):
        raise c.fail(f"lists MoE layers other than every {step}-th (interleave_moe_layer_step); kvcalc places "
                     "experts by a period: write a kvcalc YAML", "moe_layers")
    return _set_kinds(c, f, kinds, chunk)


def _deepseek_v32(c: _Cfg) -> dict[str, Any]:
    """deepseek_v32, DeepSeek-V3.2(-Exp) (DeepSeek's `configuration_deepseek_v32.py` / vLLM
    `deepseek_v2.py` with `is_v32`): DeepSeek-V3's MLA and experts plus the lightning indexer,
    which caches one key of index_head_dim (128) per token per layer beside the latent
    (index_n_heads query heads, index_topk tokens attended: neither changes the cache). The
    indexer key is sized as fp8 + one fp32 scale per 128 values (`kv_cache.indexer_bytes_per_token`)."""
    f = _deepseek(c)
    f["index_head_dim"] = c.count("index_head_dim", default=128)
    return f


def _qwen3_5_text(c: _Cfg) -> dict[str, Any]:
    """qwen3_5_text, the text model of Qwen3.5 (`configuration_qwen3_5.py` Qwen3_5TextConfig:
    hidden 4096, 32 layers, 16 heads, 4 KV heads, head_dim 256, dense MLP 12288, vocab 248320,
    32,768 context; layer_types, else every full_attention_interval-th (4) layer full attention
    and the rest Gated DeltaNet: 16 key heads and 32 value heads of 128, conv kernel 4), as
    qwen3_next without experts."""
    f = _decoder(c, max_pos=32768, head_dim=256, n_kv_heads=4)
    f["vocab_size"] = f["vocab_size"] or 248320
    f["intermediate_size"] = f["intermediate_size"] or 12288
    kinds = _every_nth(c, f["n_layers"], "full", "linear", every=4, every_keys=("full_attention_interval",))
    f.update(_gated_deltanet(c))
    return _set_kinds(c, f, kinds, None)


def _qwen3_5_moe_text(c: _Cfg) -> dict[str, Any]:
    """qwen3_5_moe_text, Qwen3.5 MoE (`configuration_qwen3_5_moe.py` Qwen3_5MoeTextConfig: hidden
    2048, 40 layers, 16 heads, 2 KV heads, head_dim 256; 256 experts of 512, 8 per token, a shared
    expert of 512 on every layer; the linear layers as `_qwen3_5_text`)."""
    f = _qwen3_5_text(c)
    f.pop("intermediate_size", None)
    f["n_kv_heads"] = c.count("num_key_value_heads", default=2)
    f["n_experts"] = c.count("num_experts", default=256)
    f["n_experts_per_token"] = c.count("num_experts_per_tok", default=8)
    f["moe_intermediate_size"] = c.count("moe_intermediate_size", default=512)
    f["shared_expert_intermediate_size"] = c.count("shared_expert_intermediate_size", default=512)
    return f


#: Nemotron-H's `hybrid_override_pattern` characters (`configuration_nemotron_h.py`
#: `_pattern_to_list`): M Mamba-2, * attention, - MLP, E MoE; the last two mix no tokens.
_NEMOTRON_H_KINDS = {"M": "mamba", "*": "full", "-": "mlp", "E": "mlp"}
_NEMOTRON_H_TYPES = {"mamba": "mamba", "linear_attention": "mamba", "attention": "full", "full_attention": "full",
                     "mlp": "mlp", "moe": "mlp"}


def _nemotron_h(c: _Cfg) -> dict[str, Any]:
    """nemotron_h, Nemotron-H and Nemotron Nano 2 / 3 (`configuration_nemotron_h.py`): one block per
    layer, from `hybrid_override_pattern` (M Mamba-2, * attention, - MLP, E MoE) or
    `layers_block_type`; the pattern's length is the layer count. Attention: 32 heads, 8 KV heads,
    head_dim 128 by default. Mamba-2 (vLLM `nemotron_h.py`, `mamba2_state_shape`): mamba_num_heads
    (128) heads of mamba_head_dim (64), so d_inner = heads x head_dim; ssm_state_size (128),
    n_groups (8), conv_kernel (4). The separate MLP / MoE layers cache nothing (kind `mlp`); the
    parameter count counts each layer as one block (`weights._separate_block_params`) and refuses
    MoE (`E`) layers, whose intermediate_size is left unset (give n_params). The state is sized in the model's dtype (the
    config's mamba_ssm_cache_dtype float32 doubles the SSM part where an engine honours it)."""
    pattern = c.get("hybrid_override_pattern")
    if pattern is not None:
        if not isinstance(pattern, str) or not pattern or set(pattern) - set(_NEMOTRON_H_KINDS):
            raise c.fail(f"must be a string of M, *, - and E, got {_shown(pattern)}", "hybrid_override_pattern")
        kinds = [_NEMOTRON_H_KINDS[ch] for ch in pattern]
        key, moe = "hybrid_override_pattern", "E" in pattern
    else:
        raw = c.get("layers_block_type", "layer_types")
        if not isinstance(raw, list) or not raw or any(k not in _NEMOTRON_H_TYPES for k in raw):
            raise c.fail("needs hybrid_override_pattern (M, *, -, E) or layers_block_type listing mamba, "
                         "attention, mlp or moe per layer", "hybrid_override_pattern")
        kinds = [_NEMOTRON_H_TYPES[k] for k in raw]
        key, moe = "layers_block_type", "moe" in raw
    layers = c.count("num_hidden_layers")
    if layers is not None and layers != len(kinds):
        raise c.fail(f"has {len(kinds)} layers but num_hidden_layers is {layers}", key)
    counted = _Cfg({**c.data, "num_hidden_layers": len(kinds)}, c.path, c.model_type)
    f = _decoder(counted, max_pos=4096, head_dim=128, n_kv_heads=8)
    c.missing.extend(counted.missing)
    f["mlp_kind"] = "plain"  # relu2 up / down
    if moe:
        # MoE blocks (Nemotron 3): routed experts of moe_intermediate_size, not dense MLPs of
        # intermediate_size; left unset, so the parameter count refuses rather than miscount them
        f.pop("intermediate_size", None)
    f.update(mamba_n_groups=c.count("n_groups", "mamba_n_groups", default=8),
             mamba_n_heads=c.count("mamba_num_heads", default=128),
             mamba_head_dim=c.count("mamba_head_dim", default=64),
             mamba_d_state=c.count("ssm_state_size", default=128),
             mamba_d_conv=c.count("conv_kernel", "mamba_d_conv", default=4),
             mamba_expand=c.count("expand", "mamba_expand", default=2))
    return _set_kinds(c, f, kinds, c.count("sliding_window"))


def _granitemoehybrid(c: _Cfg) -> dict[str, Any]:
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
    f.update(mamba_n_groups=c.count("mamba_n_groups", default=1), mamba_n_heads=heads, mamba_head_dim=head_dim,
             mamba_d_state=c.count("mamba_d_state", default=256), mamba_d_conv=c.count("mamba_d_conv", default=4),
             mamba_expand=expand)
    experts = c.count("num_local_experts", default=0, minimum=0)
    shared = c.count("shared_intermediate_size", default=1024)
    if experts:
        f.update(n_experts=experts, n_experts_per_token=c.count("num_experts_per_tok", default=2),
                 moe_intermediate_size=c.count("intermediate_size", default=1024),
                 shared_expert_intermediate_size=shared)
        f.pop("intermediate_size", None)
    else:
        f["intermediate_size"] = shared
    return _set_kinds(c, f, kinds, None)


def _falcon_h1(c: _Cfg) -> dict[str, Any]:
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
        raise c.fail("lists the layers with attention; transformers' and vLLM's Falcon-H1 put attention in every "
                     "layer, and kvcalc sizes it so: remove it (null) or write a kvcalc YAML", "attn_layer_indices")
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
        raise c.fail(f"mamba_n_heads x mamba_d_head = {heads} x {head_dim} = {heads * head_dim:,} but the mixer's width "
                     f"(mamba_d_ssm, else mamba_expand x hidden_size) is {d_ssm:,}; transformers refuses such a config "
                     "(FalconH1Config.validate_architecture)", "mamba_d_head")
    f.update(mamba_n_groups=c.count("mamba_n_groups", default=1), mamba_n_heads=heads, mamba_head_dim=head_dim,
             mamba_d_state=c.count("mamba_d_state", default=256), mamba_d_conv=c.count("mamba_d_conv", default=4),
             mamba_expand=expand, mamba_norm=c.flag("mamba_rms_norm", default=False))
    n = f["n_layers"] or 0
    return _set_kinds(c, f, ["hybrid"] * n if n else None, None)


#: model_type -> mapping function. Aliases: Falcon's old RW names; Kimi-K2 is DeepSeek-V3.
FAMILIES: dict[str, Family | Callable[[_Cfg], dict[str, Any]]] = {
    "llama": LLAMA,
    "mistral": MISTRAL,
    "mixtral": MIXTRAL,
    "phi3": PHI3,
    "qwen2": _qwen2,
    "qwen2_moe": _qwen2_moe,
    "qwen3": _qwen3,
    "qwen3_moe": _qwen3_moe,
    "qwen3_next": _qwen3_next,
    "gemma": GEMMA,
    "gemma2": GEMMA2,
    "gemma3": GEMMA3_TEXT,
    "gemma3_text": GEMMA3_TEXT,
    "falcon": _falcon,
    "RefinedWeb": _falcon,
    "RefinedWebModel": _falcon,
    "gpt2": _gpt2,
    "gpt_neox": GPT_NEOX,
    "gpt_bigcode": _gpt_bigcode,
    "chatglm": _chatglm,
    "mpt": _mpt,
    "dbrx": _dbrx,
    "deepseek_v2": _deepseek,
    "deepseek_v3": _deepseek,
    "kimi_k2": _deepseek,
    "gpt_oss": GPT_OSS,
    "jamba": _jamba,
    "starcoder2": STARCODER2,
    "olmo2": OLMO2,
    "cohere2": COHERE2,
    "exaone4": _exaone4,
    "glm4_moe": GLM4_MOE,
    "llama4": _llama4_text,
    "llama4_text": _llama4_text,
    "deepseek_v32": _deepseek_v32,
    "qwen3_5": _qwen3_5_text,
    "qwen3_5_text": _qwen3_5_text,
    "qwen3_5_moe": _qwen3_5_moe_text,
    "qwen3_5_moe_text": _qwen3_5_moe_text,
    "nemotron_h": _nemotron_h,
    "granitemoehybrid": _granitemoehybrid,
    "falcon_h1": _falcon_h1,
    "qwen3_vl": _qwen3,
    "qwen3_vl_text": _qwen3,
    **FAMILIES_2026,
}

#: a multimodal config's text model_type when its text_config does not say.
#: The multimodal wrappers here keep their text model under text_config (transformers'
#: `Llama4Config`, `Qwen3_5Config`, `Mistral3Config` (Mistral Small 3.1), `AyaVisionConfig`,
#: `Cohere2VisionConfig`, `LlavaConfig`); a text_config that names its own model_type wins.
TEXT_MODEL_TYPES = {"gemma3": "gemma3_text", "llama4": "llama4_text", "qwen3_5": "qwen3_5_text",
                    "qwen3_5_moe": "qwen3_5_moe_text", "mistral3": "mistral", "aya_vision": "cohere2",
                    "cohere2_vision": "cohere2", "llava": "llama", **TEXT_MODEL_TYPES_2026}
