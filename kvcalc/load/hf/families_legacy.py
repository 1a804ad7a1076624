"""The families from before transformers' `LlamaConfig` shape, with their own key names: Falcon (and
its RW names), GPT-2, GPT-BigCode, ChatGLM, MPT and DBRX (nested `attn_config` / `ffn_config`), as
`Family` data; their `build` hooks hold only what a table cannot say (the 4 x hidden MLP default,
the KV-head rules, the nested configs). Part of the `FAMILIES` table in `kvcalc.load.hf.families`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from kvcalc.load.fields import ModelFields
from kvcalc.load.hf.family import Family, Kinds
from kvcalc.load.hf.reader import _Cfg

_Build = Callable[[_Cfg, ModelFields], ModelFields]

#: every layer full attention: these families' code has no `layer_types` (nor a window)
_ALL_FULL = Kinds(layer_types=False)


def _width_or_4x(width_key: str) -> _Build:
    """Falcon / GPT-2: a plain GELU MLP whose width is `width_key`, by default 4 x hidden_size."""

    def build(c: _Cfg, f: ModelFields) -> ModelFields:
        hidden = f["hidden_size"]
        f["intermediate_size"] = c.count(width_key, default=4 * hidden if hidden else None)
        return f

    return build


#: Falcon's model_types before transformers adopted it (tiiuae's remote configuration_RW.py).
_FALCON_RW = ("RefinedWeb", "RefinedWebModel")


def _falcon_kv_heads(c: _Cfg, f: ModelFields) -> ModelFields:
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
    architecture)."""
    new_arch = c.flag("new_decoder_architecture", default=False)
    if c.model_type in _FALCON_RW and (c.get("num_kv_heads", "n_head_kv") is not None or f["hidden_size"] == 8192):
        new_arch = True
        f.setdefault("n_kv_heads", 1)  # RWConfig: n_head_kv None -> 1
    if new_arch or not c.flag("multi_query", default=True):
        f.setdefault("n_kv_heads", f["n_heads"])
    else:
        f["n_kv_heads"] = 1
    return _width_or_4x("ffn_hidden_size")(c, f)


#: falcon and its RW names (see `_falcon_kv_heads`): old names n_layer / n_head / n_head_kv /
#: n_embed; plain GELU MLP of ffn_hidden_size (default 4 x hidden); tied; bias from `bias`; 2048
#: context.
FALCON = Family(
    source="configuration_falcon.py",
    decoder=dict(
        max_pos=2048,
        tie=True,
        layer_keys=("num_hidden_layers", "n_layer"),
        head_keys=("num_attention_heads", "n_head"),
        hidden_keys=("hidden_size", "n_embed"),
        kv_keys=("num_kv_heads", "n_head_kv"),
    ),
    flags={"attention_bias": (("bias",), False)},
    fixed={"mlp_kind": "plain"},
    build=_falcon_kv_heads,
    kinds=_ALL_FULL,
)

#: gpt2 (`configuration_gpt2.py`): n_layer, n_head, n_embd, n_positions (1024); MHA; plain MLP of
#: n_inner (default 4 x n_embd); tied; biased; weights in fp32 (no dtype field).
GPT2 = Family(
    source="configuration_gpt2.py",
    decoder=dict(
        max_pos=None,
        tie=True,
        bias=True,
        layer_keys=("n_layer", "num_hidden_layers"),
        head_keys=("n_head", "num_attention_heads"),
        hidden_keys=("n_embd", "hidden_size"),
    ),
    counts={"max_position_embeddings": (("n_positions", "max_position_embeddings"), 1024)},
    fixed={"mlp_kind": "plain"},
    build=_width_or_4x("n_inner"),
    kinds=_ALL_FULL,
)


def _bigcode_kv_heads(c: _Cfg, f: ModelFields) -> ModelFields:
    """GPTBigCodeAttention: `kv_heads = 1 if multi_query else num_heads`."""
    f = _width_or_4x("n_inner")(c, f)
    f["n_kv_heads"] = 1 if c.flag("multi_query", default=True) else f["n_heads"]
    return f


#: gpt_bigcode, StarCoder / SantaCoder (`configuration_gpt_bigcode.py`: n_layer 12, n_head 12,
#: n_embd 768, n_positions 1024, multi_query true by default; `modeling_gpt_bigcode.py`
#: GPTBigCodeAttention: `kv_heads = 1 if multi_query else num_heads`, head_dim = n_embd // n_head;
#: vLLM `get_total_num_kv_heads`: multi_query -> 1). Plain GELU MLP of n_inner (default 4 x
#: n_embd); tied; biased; no dtype field -> fp32 (as gpt2).
GPT_BIGCODE = replace(GPT2, source="configuration_gpt_bigcode.py", build=_bigcode_kv_heads)


def _chatglm_kv_heads(c: _Cfg, f: ModelFields) -> ModelFields:
    """ChatGLM's KV heads: multi_query_group_num when multi_query_attention, else one per query
    head; a multi_query_group_num without multi_query_attention: true is refused: the model's
    code ignores it, vLLM's `get_total_num_kv_heads` does not."""
    groups = c.count("multi_query_group_num")
    if c.flag("multi_query_attention", default=False):
        f["n_kv_heads"] = groups or 1
    elif groups is not None and groups != f["n_heads"]:
        raise c.fail(
            f"multi_query_group_num is {groups} but multi_query_attention is not true: "
            "ChatGLM's code then uses one KV head per query head, vLLM uses the group "
            "number; set multi_query_attention to say which",
            "multi_query_attention",
        )
    else:
        f["n_kv_heads"] = f["n_heads"]
    return f


#: chatglm, ChatGLM2/3 and GLM-4-9B (THUDM `configuration_chatglm.py`: num_layers 28, hidden_size
#: 4096, num_attention_heads 32, kv_channels 128, seq_length 2048, multi_query_attention false,
#: multi_query_group_num 1, padded_vocab_size 65024, ffn_hidden_size 13696, add_qkv_bias false;
#: `modeling_chatglm.py` SelfAttention and vLLM `model_executor/models/chatglm.py`: KV heads =
#: multi_query_group_num if multi_query_attention else num_attention_heads; each head is
#: kv_channels wide, whatever head_dim says).
CHATGLM = Family(
    source="configuration_chatglm.py",
    decoder=dict(max_pos=2048, layer_keys=("num_layers",)),
    counts={
        "head_dim": (("kv_channels",), 128),
        "max_position_embeddings": (("seq_length",), 2048),
        "vocab_size": (("padded_vocab_size", "vocab_size"), 65024),
        "intermediate_size": (("ffn_hidden_size",), 13696),
    },
    flags={"attention_bias": (("add_qkv_bias",), False)},
    build=_chatglm_kv_heads,
    kinds=_ALL_FULL,
)


def _nested(c: _Cfg, key: str) -> _Cfg:
    """A nested mapping of MPT / DBRX (`attn_config`, DBRX's `ffn_config`) as a `_Cfg` whose
    errors name `key.X`."""
    sub = _Cfg(c.mapping(key), c.path, c.model_type)
    sub.prefix = key + "."
    return sub


#: MPT's and DBRX's shared key names (d_model, n_heads, n_layers, max_seq_len; no KV-head key at
#: the top level: it is in attn_config).
_MPT_DECODER: ModelFields = dict(
    max_pos=2048, layer_keys=("n_layers",), head_keys=("n_heads",), hidden_keys=("d_model",), kv_keys=()
)


def _mpt_attention(c: _Cfg, f: ModelFields) -> ModelFields:
    """MPT's attn_config (llm-foundry / `configuration_mpt.py`) and its MLP of expansion_ratio x
    d_model; attn_type multiquery_attention and a set sliding_window_size are refused."""
    a = _nested(c, "attn_config")
    attn_type = a.data.get("attn_type", "multihead_attention")
    if attn_type not in ("multihead_attention", "grouped_query_attention"):
        raise a.fail(
            f"'{attn_type}' is not sized the same by every engine (transformers and "
            "vLLM read it as multi-head); write a kvcalc YAML",
            "attn_type",
        )
    if a.data.get("sliding_window_size") not in (None, -1):
        raise a.fail("a sliding window in an MPT config cannot be read yet; write a kvcalc YAML", "sliding_window_size")
    kv = a.count("kv_n_heads")
    if kv is not None and attn_type == "multihead_attention" and kv != f["n_heads"]:
        raise a.fail(
            f"is {kv} but attn_type is multihead_attention (llm-foundry then uses "
            f"{f['n_heads']} KV heads, vLLM {kv}); fix one of them",
            "kv_n_heads",
        )
    if kv is not None:
        f["n_kv_heads"] = kv
    f["max_position_embeddings"] = c.count("max_seq_len", default=2048)
    hidden = f["hidden_size"]
    ratio = c.count("expansion_ratio", default=4)
    f["intermediate_size"] = ratio * hidden if hidden else None
    f["attention_bias"] = not c.flag("no_bias", default=True)
    f["vocab_size"] = f["vocab_size"] or 50368
    return f


#: mpt (`configuration_mpt.py`: d_model 2048, n_heads 16, n_layers 24, max_seq_len 2048, vocab
#: 50368, expansion_ratio 4, no_bias true, tied; MptAttention is multi-head, head_dim d_model //
#: n_heads; vLLM `get_total_num_kv_heads`: attn_config.kv_n_heads when given, else n_heads).
#: attn_type multiquery_attention (llm-foundry: 1 KV head; transformers and vLLM: all heads) and a
#: set attn_config.sliding_window_size are refused: the engines disagree or kvcalc cannot place
#: the window.
MPT = Family(
    source="configuration_mpt.py",
    decoder={**_MPT_DECODER, "tie": True},
    fixed={"mlp_kind": "plain"},
    build=_mpt_attention,
    kinds=_ALL_FULL,
)


def _dbrx_nested(c: _Cfg, f: ModelFields) -> ModelFields:
    """DBRX's attn_config.kv_n_heads (default 1) and ffn_config experts."""
    f["n_kv_heads"] = _nested(c, "attn_config").count("kv_n_heads", default=1)
    f["max_position_embeddings"] = c.count("max_seq_len", default=2048)
    ffn = _nested(c, "ffn_config")
    f.pop("intermediate_size", None)
    f.update(
        n_experts=ffn.count("moe_num_experts", default=4),
        n_experts_per_token=ffn.count("moe_top_k", default=1),
        moe_intermediate_size=ffn.count("ffn_hidden_size", default=3584),
    )
    f["vocab_size"] = f["vocab_size"] or 32000
    return f


#: dbrx (`configuration_dbrx.py`: d_model 2048, n_heads 16, n_layers 24, max_seq_len 2048, vocab
#: 32000; DbrxAttentionConfig kv_n_heads defaults to 1 and becomes num_key_value_heads; head_dim
#: d_model // n_heads; DbrxFFNConfig: moe_num_experts 4 of ffn_hidden_size 3584, moe_top_k 1;
#: untied; vLLM `get_total_num_kv_heads`: attn_config.kv_n_heads).
DBRX = Family(source="configuration_dbrx.py", decoder=_MPT_DECODER, kinds=_ALL_FULL, build=_dbrx_nested)
