"""One mapping per Hugging Face `model_type` family -> `ModelSpec` fields, and the `FAMILIES`
table `kvcalc.load.hf` dispatches on. Each function reads the fields its transformers configuration
class reads, with that class's defaults; the rules are listed in `kvcalc.load.hf`'s docstring.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kvcalc.load.hf.reader import (_Cfg, _decoder, _every_nth, _kinds_from_layer_types, _qwen_experts,
                              _qwen_window_kinds, _set_kinds)

# ----- one function per family -------------------------------------------------------------


def _llama(c: _Cfg) -> dict[str, Any]:
    """llama (`configuration_llama.py`): max_position_embeddings 2048, untied, no bias."""
    f = _decoder(c, max_pos=2048)
    kinds = _kinds_from_layer_types(c, f["n_layers"]) if c.get("layer_types") else None
    return _set_kinds(c, f, kinds, c.count("sliding_window") if kinds else None)


def _mistral(c: _Cfg) -> dict[str, Any]:
    """mistral (`configuration_mistral.py`): sliding_window defaults to 4096 and, when set,
    applies to every layer (Mistral-7B-v0.1); null means none (v0.2+)."""
    f = _decoder(c, max_pos=4096 * 32)
    window = c.int_or_null("sliding_window", 4096)
    kinds = _kinds_from_layer_types(c, f["n_layers"]) if c.get("layer_types") else None
    return _set_kinds(c, f, kinds, window)


def _mixtral(c: _Cfg) -> dict[str, Any]:
    """mixtral (`configuration_mixtral.py`): sliding_window defaults to null; every layer is
    sparse, and `intermediate_size` is the expert width (there is no dense MLP)."""
    f = _decoder(c, max_pos=4096 * 32)
    f["moe_intermediate_size"] = f.pop("intermediate_size")
    f["n_experts"] = c.count("num_local_experts", default=8)
    f["n_experts_per_token"] = c.count("num_experts_per_tok", default=2)
    return _set_kinds(c, f, None, c.count("sliding_window"))


def _phi3(c: _Cfg) -> dict[str, Any]:
    """phi3 (`configuration_phi3.py`): like mistral, a set sliding_window applies to every
    layer (Phi-3-mini-4k: 2047); default null."""
    f = _decoder(c, max_pos=4096)
    return _set_kinds(c, f, None, c.count("sliding_window"))


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


def _qwen3_next(c: _Cfg) -> dict[str, Any]:
    """qwen3_next (`configuration_qwen3_next.py`): layer_types, else every
    `full_attention_interval`-th layer (default 4) full attention and the rest Gated DeltaNet
    linear attention; full layers: 2 KV heads x 256 by default; linear layers: 16 key heads
    and 32 value heads of 128, conv kernel 4; 512 experts of 512, 10 per token, one shared
    expert of 512."""
    f = _decoder(c, max_pos=32768, head_dim=256, n_kv_heads=2)
    kinds = _every_nth(c, f["n_layers"], "full", "linear", every=4, every_keys=("full_attention_interval",))
    f.update(
        linear_num_key_heads=c.count("linear_num_key_heads", default=16),
        linear_num_value_heads=c.count("linear_num_value_heads", default=32),
        linear_key_head_dim=c.count("linear_key_head_dim", default=128),
        linear_value_head_dim=c.count("linear_value_head_dim", default=128),
        linear_conv_kernel_dim=c.count("linear_conv_kernel_dim", default=4),
    )
    _qwen_experts(c, f, n_experts=512, per_token=10, width=512, shared=512)
    return _set_kinds(c, f, kinds, c.count("sliding_window"))


def _gemma(c: _Cfg) -> dict[str, Any]:
    """gemma (`configuration_gemma.py`): head_dim 256, tied embeddings, 8192 context."""
    return _set_kinds(c, _decoder(c, head_dim=256, tie=True, max_pos=8192), None, None)


def _gemma2(c: _Cfg) -> dict[str, Any]:
    """gemma2 (`configuration_gemma2.py`): layer_types, else layer i slides when i % 2 == 0
    (`"sliding_attention" if bool((i + 1) % 2)`); window 4096 by default; head_dim 256; tied."""
    f = _decoder(c, head_dim=256, tie=True, max_pos=8192)
    kinds = _every_nth(c, f["n_layers"], "full", "sliding")
    return _set_kinds(c, f, kinds, c.int_or_null("sliding_window", 4096))


def _gemma3_text(c: _Cfg) -> dict[str, Any]:
    """gemma3_text (`configuration_gemma3.py` Gemma3TextConfig): layer_types, else layer i is
    global when (i + 1) % sliding_window_pattern == 0 (default 6: 5 local then 1 global);
    window 4096, 8 heads, 4 KV heads, head_dim 256, vocab 262208, 131072 context, tied, by
    default (gemma-3-4b's text_config relies on the head defaults)."""
    f = _decoder(c, head_dim=256, n_heads=8, n_kv_heads=4, tie=True, max_pos=131072)
    f["vocab_size"] = f["vocab_size"] or 262208
    kinds = _every_nth(c, f["n_layers"], "full", "sliding", every=6,
                       every_keys=("sliding_window_pattern", "_sliding_window_pattern"))
    return _set_kinds(c, f, kinds, c.int_or_null("sliding_window", 4096))


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
    if c.model_type in _FALCON_RW:
        if c.get("num_kv_heads", "n_head_kv") is not None or f["hidden_size"] == 8192:
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


def _gpt_neox(c: _Cfg) -> dict[str, Any]:
    """gpt_neox (`configuration_gpt_neox.py`): MHA, plain GELU MLP, untied, QKV bias (default
    true), 2048 context."""
    f = _decoder(c, max_pos=2048, bias=True)
    f["mlp_kind"] = "plain"
    return _set_kinds(c, f, None, None)


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


def _deepseek(c: _Cfg) -> dict[str, Any]:
    """deepseek_v2 / deepseek_v3 / kimi_k2 (`configuration_deepseek_v3.py`; Kimi-K2 is the
    DeepSeek-V3 architecture under its own model_type): MLA with kv_lora_rank 512,
    qk_rope_head_dim 64, qk_nope_head_dim 128, v_head_dim 128 by default (q_lora_rank null =
    no query compression); `num_key_value_heads` is not used. Experts: n_routed_experts of
    moe_intermediate_size, n_shared_experts x moe_intermediate_size shared, the first
    first_k_dense_replace layers dense, then every moe_layer_freq-th."""
    f = _decoder(c, max_pos=2048, kv_keys=())
    f.pop("head_dim", None)  # a head_dim in the file is qk_rope_head_dim's alias, not the latent
    if "hidden_size or head_dim" in c.missing:  # MLA sizes its latent, not heads
        c.missing.remove("hidden_size or head_dim")
    f.update(
        attention="mla",
        kv_lora_rank=c.count("kv_lora_rank", default=512),
        qk_rope_head_dim=c.count("qk_rope_head_dim", default=64),
        qk_nope_head_dim=c.count("qk_nope_head_dim", default=128),
        v_head_dim=c.count("v_head_dim", default=128),
        q_lora_rank=c.count("q_lora_rank"),
        n_experts=c.count("n_routed_experts"),
        n_experts_per_token=c.count("num_experts_per_tok"),
        moe_intermediate_size=c.count("moe_intermediate_size"),
        first_dense_layers=c.count("first_k_dense_replace", default=0, minimum=0),
    )
    shared, width = c.count("n_shared_experts", minimum=0), c.count("moe_intermediate_size")
    if shared and width:
        f["shared_expert_intermediate_size"] = shared * width
    freq = c.count("moe_layer_freq", default=1)
    if freq > 1:
        f["moe_layer_period"] = freq
    return _set_kinds(c, f, None, None)


def _gpt_oss(c: _Cfg) -> dict[str, Any]:
    """gpt_oss (`configuration_gpt_oss.py`): layer_types, else layer i slides when i % 2 == 0;
    window 128, 8 KV heads x 64 by default; every layer sparse: num_local_experts of
    intermediate_size (2880), experts_per_token / num_experts_per_tok (4); QKV bias; untied."""
    f = _decoder(c, head_dim=64, n_kv_heads=8, max_pos=131072, bias=True)
    f["moe_intermediate_size"] = f.pop("intermediate_size") or 2880
    f["n_experts"] = c.count("num_local_experts", "num_experts", default=128)
    f["n_experts_per_token"] = c.count("experts_per_token", "num_experts_per_tok", default=4)
    kinds = _every_nth(c, f["n_layers"], "full", "sliding")
    return _set_kinds(c, f, kinds, c.int_or_null("sliding_window", 128))


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


#: model_type -> mapping function. Aliases: Falcon's old RW names; Kimi-K2 is DeepSeek-V3.
FAMILIES: dict[str, Callable[[_Cfg], dict[str, Any]]] = {
    "llama": _llama,
    "mistral": _mistral,
    "mixtral": _mixtral,
    "phi3": _phi3,
    "qwen2": _qwen2,
    "qwen2_moe": _qwen2_moe,
    "qwen3": _qwen3,
    "qwen3_moe": _qwen3_moe,
    "qwen3_next": _qwen3_next,
    "gemma": _gemma,
    "gemma2": _gemma2,
    "gemma3": _gemma3_text,
    "gemma3_text": _gemma3_text,
    "falcon": _falcon,
    "RefinedWeb": _falcon,
    "RefinedWebModel": _falcon,
    "gpt2": _gpt2,
    "gpt_neox": _gpt_neox,
    "gpt_bigcode": _gpt_bigcode,
    "chatglm": _chatglm,
    "mpt": _mpt,
    "dbrx": _dbrx,
    "deepseek_v2": _deepseek,
    "deepseek_v3": _deepseek,
    "kimi_k2": _deepseek,
    "gpt_oss": _gpt_oss,
    "jamba": _jamba,
}

#: a multimodal config's text model_type when its text_config does not say.
TEXT_MODEL_TYPES = {"gemma3": "gemma3_text"}
