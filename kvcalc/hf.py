"""Hugging Face `config.json` -> `ModelSpec`: one small mapping per `model_type` family.

Each family function reads the fields its transformers configuration class reads, with that
class's defaults where a published config relies on them, and returns `ModelSpec` fields. The
rules that change the KV cache, each from the transformers source named beside it:

- an explicit `head_dim` wins over hidden_size / num_attention_heads (Qwen3-4B: 128, not 80);
- `num_key_value_heads` absent or null means MHA (every `configuration_*.py`);
- `layer_types` wins; else the family's default pattern (gemma2: even layers slide; gemma3:
  every `sliding_window_pattern`-th layer is global; gpt_oss: even layers slide; qwen2/qwen3:
  layers >= `max_window_layers` slide when `use_sliding_window`; qwen3_next: every
  `full_attention_interval`-th layer is full, the rest linear attention; jamba: attention every
  `attn_layer_period` layers from `attn_layer_offset`, the rest mamba);
- `sliding_window: null` means no window; `use_sliding_window: false` means none either;
- falcon: `multi_query: true` means one KV head unless `new_decoder_architecture`
  (`modeling_falcon.py` FalconAttention); old RefinedWeb configs with `n_head_kv` (falcon-40b)
  are the new architecture (vLLM `RWConfig`); gpt_bigcode: `multi_query` (default true) means
  one KV head; chatglm: `multi_query_group_num` KV heads of `kv_channels`; mpt / dbrx: their
  nested `attn_config.kv_n_heads`;
- every number is checked before any arithmetic: a JSON integer (never a boolean, 32.0, NaN or
  "8"), in range; a bad one is one `ConfigError` naming the file and the config field;
- MLA (deepseek_v2, deepseek_v3, kimi_k2): one latent of kv_lora_rank + qk_rope_head_dim per
  token; `num_key_value_heads` is not used.

A config whose `model_type` is not in the table but has the standard fields maps as a plain
decoder with a `KvcalcWarning`; one with a feature kvcalc cannot size that way fails with a
`ConfigError`. Nothing here reads files: `kvcalc.loaders` passes the parsed dict.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from kvcalc.errors import ConfigError, KvcalcWarning
from kvcalc.schema import LAYER_KIND_ALIASES, ModelSpec

_MISSING = object()
#: the largest count a config may give (as `kvcalc.schema`'s Count).
_MAX_INT = 2**40
#: the most layers a config may give (as `kvcalc.schema`'s LayerCount).
_MAX_LAYERS = 100_000


def _shown(v: Any) -> str:
    """A config value as JSON writes it (32.0, NaN, Infinity, true, "8"), shortened."""
    import json

    try:
        text = json.dumps(v, allow_nan=True)
    except (TypeError, ValueError):
        text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


class _Cfg:
    """A config dict with the file it came from; `need` collects missing fields so one error
    names them all."""

    def __init__(self, data: dict[str, Any], path: str | None, model_type: str) -> None:
        self.data = data
        self.path = path
        self.model_type = model_type
        self.missing: list[str] = []
        self.prefix = ""  # "attn_config." for a nested mapping: errors name the full field

    def get(self, *keys: str, default: Any = None) -> Any:
        """The first of `keys` present with a non-null value, else `default`."""
        for k in keys:
            v = self.data.get(k)
            if v is not None:
                return v
        return default

    def need(self, *keys: str) -> Any:
        """The first of `keys` present (the HF name, then older aliases); records the first
        key as missing when none is."""
        v = self.get(*keys, default=_MISSING)
        if v is _MISSING:
            self.missing.append(keys[0])
            return None
        return v

    def fail(self, message: str, field: str | None = None) -> ConfigError:
        return ConfigError(message, path=self.path, field=self.prefix + field if field else None)

    def _present(self, keys: tuple[str, ...]) -> tuple[str | None, Any]:
        for k in keys:
            v = self.data.get(k)
            if v is not None:
                return k, v
        return None, None

    def check_int(self, key: str, v: Any, minimum: int = 1, maximum: int = _MAX_INT) -> int:
        """`v` (the value of config field `key`) as a checked int: a JSON integer (not a
        boolean, a float such as 32.0, NaN, Infinity or a string such as "8"), at least
        `minimum` and at most `maximum`. Raises `ConfigError` naming the file and the field."""
        if type(v) is not int:
            raise self.fail(f"must be an integer, got {_shown(v)}", key)
        if v < minimum:
            raise self.fail(f"must be at least {minimum}, got {v}", key)
        if v > maximum:
            raise self.fail(f"is too large ({v}); at most {maximum:,}", key)
        return v

    def count(self, *keys: str, default: Any = None, minimum: int = 1) -> Any:
        """The first of `keys` present with a non-null value, checked by `check_int`; else
        `default` (not checked: a family's transformers default)."""
        k, v = self._present(keys)
        return default if k is None else self.check_int(k, v, minimum)

    def int_or_null(self, key: str, default: Any, minimum: int = 1) -> Any:
        """Field `key` checked as an int when set; `default` only when the key is absent; None
        when it is null (sliding_window: absent means the family default, null means none)."""
        if key not in self.data:
            return default
        v = self.data[key]
        return None if v is None else self.check_int(key, v, minimum)

    def need_int(self, *keys: str, minimum: int = 1, maximum: int = _MAX_INT) -> Any:
        """Like `need`, with the value checked by `check_int`."""
        k, v = self._present(keys)
        if k is None:
            self.missing.append(keys[0])
            return None
        return self.check_int(k, v, minimum, maximum)

    def flag(self, *keys: str, default: bool = False) -> bool:
        """The first of `keys` present with a non-null value, which must be a JSON boolean."""
        k, v = self._present(keys)
        if k is None:
            return default
        if type(v) is not bool:
            raise self.fail(f"must be true or false, got {_shown(v)}", k)
        return v

    def mapping(self, key: str) -> dict[str, Any]:
        """Field `key` as a JSON object ({} when absent or null)."""
        v = self.data.get(key)
        if v is None:
            return {}
        if not isinstance(v, dict):
            raise self.fail(f"must be a JSON object, got {_shown(v)}", key)
        return v

    def check_missing(self) -> None:
        if self.missing:
            raise self.fail(f"model_type '{self.model_type}' needs {', '.join(self.missing)}, "
                            "missing from this config.json")


# ----- shared pieces ---------------------------------------------------------------------


def _decoder(c: _Cfg, *, head_dim: int | None = None, n_kv_heads: Any = _MISSING,
             max_pos: int | None = None, tie: bool = False, bias: bool = False,
             n_heads: int | None = None, hidden_keys: tuple[str, ...] = ("hidden_size",),
             layer_keys: tuple[str, ...] = ("num_hidden_layers",),
             head_keys: tuple[str, ...] = ("num_attention_heads",),
             kv_keys: tuple[str, ...] = ("num_key_value_heads",)) -> dict[str, Any]:
    """The fields every decoder shares (transformers `LlamaConfig` and its descendants):
    layers, heads, KV heads (absent -> heads), head_dim (explicit wins, else hidden // heads),
    context, vocabulary, MLP width, tied embeddings, QKV bias. Keyword arguments are the
    family's transformers defaults."""
    f: dict[str, Any] = {
        "n_layers": c.need_int(*layer_keys, maximum=_MAX_LAYERS),
        "n_heads": c.count(*head_keys, default=n_heads) if n_heads else c.need_int(*head_keys),
        "hidden_size": c.count(*hidden_keys),
        "max_position_embeddings": c.count("max_position_embeddings", default=max_pos),
        "vocab_size": c.count("vocab_size"),
        "intermediate_size": c.count("intermediate_size"),
        "tie_word_embeddings": c.flag("tie_word_embeddings", default=tie),
        "attention_bias": c.flag("attention_bias", default=bias),
    }
    kv = c.count(*kv_keys, default=None if n_kv_heads is _MISSING else n_kv_heads)
    if kv is not None:
        f["n_kv_heads"] = kv
    hd = c.count("head_dim", default=head_dim)
    if hd is not None:
        f["head_dim"] = hd
    elif f["hidden_size"] is None:
        c.missing.append("hidden_size or head_dim")
    return f


def _kinds_from_layer_types(c: _Cfg, n_layers: int | None) -> list[str]:
    """The config's `layer_types`, as kvcalc kinds; a kind kvcalc cannot size fails."""
    raw = c.data["layer_types"]
    if not isinstance(raw, list) or not raw:
        raise c.fail("must be a non-empty list of layer kinds", "layer_types")
    out = []
    for k in raw:
        kind = LAYER_KIND_ALIASES.get(str(k).strip().lower())
        if kind is None:
            raise c.fail(f"layer kind '{k}' is not one kvcalc can size (full_attention, "
                         "sliding_attention, linear_attention, mamba); write a kvcalc YAML "
                         "for this model instead", "layer_types")
        out.append(kind)
    if n_layers is not None and len(out) != n_layers:
        raise c.fail(f"lists {len(out)} layers but num_hidden_layers is {n_layers}", "layer_types")
    return out


def _set_kinds(c: _Cfg, f: dict[str, Any], kinds: list[str] | None, window: Any) -> dict[str, Any]:
    """Put the per-layer kinds into `f` compactly (see `compact_layers`), with the window only
    when some layer slides. A sliding layer without a window fails."""
    if kinds is None:
        kinds = ["sliding" if window else "full"] * (f.get("n_layers") or 0)
    if "sliding" in kinds:
        if not window:
            raise c.fail("layers slide but sliding_window is null or absent", "sliding_window")
        f["sliding_window"] = window
    f.update(compact_layers(kinds))
    return f


def compact_layers(kinds: list[str]) -> dict[str, list[str]]:
    """The shortest description of per-layer kinds for a `ModelSpec`: {} when every layer is
    full (or every layer slides: a `sliding_window` alone means that), `layer_pattern` when the
    kinds repeat with a period of at most half the layers, else `layer_types`."""
    n = len(kinds)
    if not n or all(k == "full" for k in kinds) or all(k == "sliding" for k in kinds):
        return {}
    for p in range(1, n // 2 + 1):
        if all(kinds[i] == kinds[i % p] for i in range(n)):
            return {"layer_pattern": kinds[:p]}
    return {"layer_types": list(kinds)}


def _moe_sparse_step(c: _Cfg, f: dict[str, Any]) -> None:
    """Qwen MoE layer placement (`modeling_qwen2_moe.py` / `modeling_qwen3_moe.py`): layer i
    is sparse when i is not in `mlp_only_layers` and (i + 1) % decoder_sparse_step == 0, i.e.
    period = step, offset = step - 1."""
    step = c.count("decoder_sparse_step", default=1)
    if step > 1:
        f["moe_layer_period"], f["moe_layer_offset"] = step, step - 1
    if c.get("mlp_only_layers"):
        raise c.fail("dense layers listed one by one cannot be expressed yet (kvcalc has "
                     "first_dense_layers and a period); write a kvcalc YAML", "mlp_only_layers")


def _qwen_window_kinds(c: _Cfg, f: dict[str, Any]) -> tuple[list[str] | None, Any]:
    """Qwen2/Qwen3 sliding window (`configuration_qwen2.py`): the window is null unless
    `use_sliding_window`; then layers i >= max_window_layers slide. `layer_types` wins."""
    window = c.count("sliding_window") if c.flag("use_sliding_window", default=False) else None
    if c.get("layer_types") is not None:
        return _kinds_from_layer_types(c, f["n_layers"]), c.count("sliding_window")
    if window is None:
        return None, None
    start = c.count("max_window_layers", default=28, minimum=0)
    return ["sliding" if i >= start else "full" for i in range(f["n_layers"] or 0)], window


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
    f = _qwen2(c)
    f["n_experts"] = c.count("num_experts", default=60)
    f["n_experts_per_token"] = c.count("num_experts_per_tok", default=4)
    f["moe_intermediate_size"] = c.count("moe_intermediate_size", default=1408)
    f["shared_expert_intermediate_size"] = c.count("shared_expert_intermediate_size", default=5632)
    _moe_sparse_step(c, f)
    return f


def _qwen3(c: _Cfg) -> dict[str, Any]:
    """qwen3 (`configuration_qwen3.py`): head_dim defaults to 128 (explicit in Qwen3-4B,
    where hidden 2560 / 32 heads = 80 would be wrong); attention_bias default false."""
    f = _decoder(c, max_pos=32768, head_dim=128)
    kinds, window = _qwen_window_kinds(c, f)
    return _set_kinds(c, f, kinds, window)


def _qwen3_moe(c: _Cfg) -> dict[str, Any]:
    """qwen3_moe (`configuration_qwen3_moe.py`): qwen3 attention; 128 experts of 768, 8 per
    token, no shared expert by default."""
    f = _qwen3(c)
    f["n_experts"] = c.count("num_experts", default=128)
    f["n_experts_per_token"] = c.count("num_experts_per_tok", default=8)
    f["moe_intermediate_size"] = c.count("moe_intermediate_size", default=768)
    _moe_sparse_step(c, f)
    return f


def _qwen3_next(c: _Cfg) -> dict[str, Any]:
    """qwen3_next (`configuration_qwen3_next.py`): layer_types, else every
    `full_attention_interval`-th layer (default 4) full attention and the rest Gated DeltaNet
    linear attention; full layers: 2 KV heads x 256 by default; linear layers: 16 key heads
    and 32 value heads of 128, conv kernel 4; 512 experts of 512, 10 per token, one shared
    expert of 512."""
    f = _decoder(c, max_pos=32768, head_dim=256, n_kv_heads=2)
    if c.get("layer_types") is not None:
        kinds = _kinds_from_layer_types(c, f["n_layers"])
    else:
        every = c.count("full_attention_interval", default=4)
        kinds = ["linear" if (i + 1) % every else "full" for i in range(f["n_layers"] or 0)]
    f.update(
        linear_num_key_heads=c.count("linear_num_key_heads", default=16),
        linear_num_value_heads=c.count("linear_num_value_heads", default=32),
        linear_key_head_dim=c.count("linear_key_head_dim", default=128),
        linear_value_head_dim=c.count("linear_value_head_dim", default=128),
        linear_conv_kernel_dim=c.count("linear_conv_kernel_dim", default=4),
        n_experts=c.count("num_experts", default=512),
        n_experts_per_token=c.count("num_experts_per_tok", default=10),
        moe_intermediate_size=c.count("moe_intermediate_size", default=512),
        shared_expert_intermediate_size=c.count("shared_expert_intermediate_size", default=512),
    )
    _moe_sparse_step(c, f)
    return _set_kinds(c, f, kinds, c.count("sliding_window"))


def _gemma(c: _Cfg) -> dict[str, Any]:
    """gemma (`configuration_gemma.py`): head_dim 256, tied embeddings, 8192 context."""
    return _set_kinds(c, _decoder(c, head_dim=256, tie=True, max_pos=8192), None, None)


def _gemma2(c: _Cfg) -> dict[str, Any]:
    """gemma2 (`configuration_gemma2.py`): layer_types, else layer i slides when i % 2 == 0
    (`"sliding_attention" if bool((i + 1) % 2)`); window 4096 by default; head_dim 256; tied."""
    f = _decoder(c, head_dim=256, tie=True, max_pos=8192)
    if c.get("layer_types") is not None:
        kinds = _kinds_from_layer_types(c, f["n_layers"])
    else:
        kinds = ["sliding" if (i + 1) % 2 else "full" for i in range(f["n_layers"] or 0)]
    return _set_kinds(c, f, kinds, c.int_or_null("sliding_window", 4096))


def _gemma3_text(c: _Cfg) -> dict[str, Any]:
    """gemma3_text (`configuration_gemma3.py` Gemma3TextConfig): layer_types, else layer i is
    global when (i + 1) % sliding_window_pattern == 0 (default 6: 5 local then 1 global);
    window 4096, 8 heads, 4 KV heads, head_dim 256, vocab 262208, 131072 context, tied, by
    default (gemma-3-4b's text_config relies on the head defaults)."""
    f = _decoder(c, head_dim=256, n_heads=8, n_kv_heads=4, tie=True, max_pos=131072)
    f["vocab_size"] = f["vocab_size"] or 262208
    if c.get("layer_types") is not None:
        kinds = _kinds_from_layer_types(c, f["n_layers"])
    else:
        every = c.count("sliding_window_pattern", "_sliding_window_pattern", default=6)
        kinds = ["sliding" if (i + 1) % every else "full" for i in range(f["n_layers"] or 0)]
    return _set_kinds(c, f, kinds, c.int_or_null("sliding_window", 4096))


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
    hidden = f["hidden_size"]
    f["intermediate_size"] = c.count("ffn_hidden_size", default=4 * hidden if hidden else None)
    f["mlp_kind"] = "plain"
    return _set_kinds(c, f, None, None)


def _gpt2(c: _Cfg) -> dict[str, Any]:
    """gpt2 (`configuration_gpt2.py`): n_layer, n_head, n_embd, n_positions (1024); MHA;
    plain MLP of n_inner (default 4 x n_embd); tied; biased; weights in fp32 (no dtype field)."""
    f = _decoder(c, max_pos=None, tie=True, bias=True, layer_keys=("n_layer", "num_hidden_layers"),
                 head_keys=("n_head", "num_attention_heads"), hidden_keys=("n_embd", "hidden_size"))
    f["max_position_embeddings"] = c.count("n_positions", "max_position_embeddings", default=1024)
    hidden = f["hidden_size"]
    f["intermediate_size"] = c.count("n_inner", default=4 * hidden if hidden else None)
    f["mlp_kind"] = "plain"
    return _set_kinds(c, f, None, None)


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


def _attn_config(c: _Cfg) -> _Cfg:
    """The nested `attn_config` of MPT / DBRX as a `_Cfg` whose errors name `attn_config.X`."""
    sub = _Cfg(c.mapping("attn_config"), c.path, c.model_type)
    sub.prefix = "attn_config."
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
    a = _attn_config(c)
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
    f["n_kv_heads"] = _attn_config(c).count("kv_n_heads", default=1)
    f["max_position_embeddings"] = c.count("max_seq_len", default=2048)
    ffn = _Cfg(c.mapping("ffn_config"), c.path, c.model_type)
    ffn.prefix = "ffn_config."
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
    if c.get("layer_types") is not None:
        kinds = _kinds_from_layer_types(c, f["n_layers"])
    else:
        kinds = ["sliding" if (i + 1) % 2 else "full" for i in range(f["n_layers"] or 0)]
    return _set_kinds(c, f, kinds, c.int_or_null("sliding_window", 128))


def _jamba(c: _Cfg) -> dict[str, Any]:
    """jamba (`configuration_jamba.py`): layer i is attention when i % attn_layer_period ==
    attn_layer_offset (8, 4), else Mamba-1 (d_state 16, d_conv 4, expand 2, dt_rank "auto" =
    ceil(hidden / 16)); MoE on layers with i % expert_layer_period == expert_layer_offset (2, 1),
    16 experts, 2 per token, each of intermediate_size (as is the dense MLP); 8 KV heads;
    attention slides only when sliding_window is set."""
    f = _decoder(c, n_kv_heads=8, max_pos=262144)
    period = c.count("attn_layer_period", default=8)
    offset = c.count("attn_layer_offset", default=4, minimum=0)
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

#: fields that change the cache in ways a plain decoder cannot express: an unknown model_type
#: carrying any of them fails rather than giving a wrong number.
#: Each changes the KV heads, the head size, which layers cache or what they cache:
#: multi_query (gpt_bigcode / falcon: one KV head), multi_query_attention and
#: multi_query_group_num (chatglm), kv_channels (chatglm's head size), n_kv_heads / kv_n_heads /
#: num_kv_groups / num_key_value_groups (other spellings of the KV heads, not read generically),
#: attn_config (MPT / DBRX nest theirs), cross_attention_layers (mllama: those layers cache the
#: image tokens, not the text), v_head_dim / qk_rope_head_dim / q_lora_rank (MLA-style heads),
#: num_kv_shared_layers (gemma3n: layers reuse another layer's cache), attention_chunk_size
#: (llama4 chunked attention), global_attn_every_n_layers / attention_types / attention_window /
#: local_attention / sliding_window_size (other window spellings), and the hybrid patterns.
_UNSIZABLE = ("kv_lora_rank", "attn_layer_period", "full_attention_interval", "sliding_window_pattern",
              "mamba_d_state", "ssm_state_size", "linear_num_key_heads", "interleaved_sliding_window",
              "attention_chunk_size", "no_rope_layers", "hybrid_override_pattern", "layers_block_type",
              "block_types", "attention_type", "attention_layers",
              "multi_query", "multi_query_attention", "multi_query_group_num", "kv_channels",
              "n_kv_heads", "kv_n_heads", "num_kv_groups", "num_key_value_groups", "attn_config",
              "cross_attention_layers", "v_head_dim", "qk_rope_head_dim", "q_lora_rank",
              "num_kv_shared_layers", "global_attn_every_n_layers", "attention_types",
              "attention_window", "local_attention", "sliding_window_size", "block_configs",
              "attn_type_list", "layer_block_types")

#: why a field in _UNSIZABLE matters, for the error line.
_WHY = {
    "multi_query": "one KV head",
    "multi_query_group_num": "the KV heads",
    "kv_channels": "the head size",
    "cross_attention_layers": "those layers cache the image tokens, not the text",
    "attention_chunk_size": "chunked attention caches only the current chunk",
    "num_kv_shared_layers": "layers that reuse another layer's cache",
}

#: weight dtype when the config names none: gpt2's and gpt_bigcode's checkpoints are fp32 (their
#: configs predate torch_dtype); the rest default bf16.
DEFAULT_DTYPE = {"gpt2": "fp32", "gpt_bigcode": "fp32"}


def _generic(c: _Cfg) -> dict[str, Any]:
    """An unknown model_type as a plain decoder (LlamaConfig fields, old GPT-2 names too);
    warns; fails on any field that needs a family mapping to size."""
    odd = [k + (f" ({_WHY[k]})" if k in _WHY else "")
           for k in _UNSIZABLE if c.data.get(k) not in (None, False, [], {})]
    window = c.count("sliding_window") if c.flag("use_sliding_window", default=True) else None
    if window and c.get("layer_types") is None:
        odd.append("sliding_window (which layers slide is family-specific)")
    if odd:
        raise c.fail(f"model_type '{c.model_type}' is not one kvcalc maps, and its "
                     f"{', '.join(odd)} cannot be sized without a mapping; write a kvcalc YAML "
                     "(see configs/models/) or ask for the family to be added")
    f = _decoder(c, layer_keys=("num_hidden_layers", "n_layer", "num_layers"),
                 head_keys=("num_attention_heads", "n_head", "num_heads"),
                 hidden_keys=("hidden_size", "n_embd", "d_model"),
                 kv_keys=("num_key_value_heads", "num_kv_heads", "n_head_kv"))
    if f["max_position_embeddings"] is None:
        f["max_position_embeddings"] = c.count("n_positions", "max_seq_len")
    c.check_missing()
    warnings.warn(f"{c.path or 'config'}: model_type '{c.model_type}' has no kvcalc mapping; read it "
                  "as a plain decoder (every layer full attention, explicit head_dim or "
                  "hidden_size / num_attention_heads); check the result", KvcalcWarning, stacklevel=3)
    kinds = _kinds_from_layer_types(c, f["n_layers"]) if c.get("layer_types") is not None else None
    return _set_kinds(c, f, kinds, window if kinds else None)


# ----- entry point -------------------------------------------------------------------------


def _dtype(data: dict[str, Any], outer: dict[str, Any], model_type: str, path: str | None) -> str:
    """`torch_dtype` or `dtype` (the text config's, else the top level's) as a kvcalc format
    name; bf16 when absent, except the families in DEFAULT_DTYPE."""
    from kvcalc.dtypes import canonical_name
    from kvcalc.errors import UnknownNameError

    for d in (data, outer):
        for key in ("torch_dtype", "dtype"):
            v = d.get(key)
            if v is not None and not isinstance(v, str):
                raise ConfigError(f"must be a dtype name such as \"bfloat16\", got {_shown(v)}",
                                  path=path, field=key if d is outer or data is outer else f"text_config.{key}")
            if isinstance(v, str) and v != "auto":
                try:
                    return canonical_name(v.removeprefix("torch."))
                except UnknownNameError as e:
                    raise ConfigError(str(e), path=path, field=key) from None
    return DEFAULT_DTYPE.get(model_type, "bf16")


def _name(data: dict[str, Any], outer: dict[str, Any], path: str | None, model_type: str) -> str:
    """`_name_or_path`'s last part, else the file's folder (for config.json) or stem; lower case."""
    for d in (outer, data):
        v = d.get("_name_or_path")
        if isinstance(v, str) and v.strip().strip("/"):
            return v.strip().rstrip("/").replace("\\", "/").split("/")[-1].lower()
    if path:
        p = Path(path)
        stem = p.parent.name if p.stem.lower() == "config" and p.parent.name else p.stem
        if stem:
            return stem.lower()
    return model_type.lower() or "model"


def _model_type(data: dict[str, Any], path: str | None, field: str) -> str:
    """`model_type` as a string ('' when absent or null); anything else is refused."""
    v = data.get("model_type")
    if v is None:
        return ""
    if not isinstance(v, str):
        raise ConfigError(f"must be a string such as \"llama\", got {_shown(v)}", path=path, field=field)
    return v


def model_fields_from_hf_config(data: dict[str, Any], path: str | None = None) -> dict[str, Any]:
    """The `ModelSpec` fields (name and source first, only those set) for a Hugging Face
    config dict. A multimodal config's `text_config` is read as the model; its dtype and name
    fall back to the top level.

    Raises `ConfigError` naming the file and the missing or unsizable fields; warns
    (`KvcalcWarning`) for an unknown model_type read as a plain decoder.
    """
    outer = data
    top_type = _model_type(data, path, "model_type")
    text = data.get("text_config")
    if text is not None and not isinstance(text, dict):
        raise ConfigError(f"must be a JSON object (the text model's config), got {_shown(text)}",
                          path=path, field="text_config")
    if text is not None:
        data = text
        model_type = _model_type(text, path, "text_config.model_type") or TEXT_MODEL_TYPES.get(top_type, top_type)
    else:
        model_type = top_type
    c = _Cfg(data, path, model_type or "(none)")
    fn = FAMILIES.get(model_type, _generic)
    fields = fn(c)
    c.check_missing()
    shown_type = model_type if model_type == top_type or not top_type else f"{top_type} > {model_type}"
    out: dict[str, Any] = {
        "name": _name(data, outer, path, model_type),
        "source": f"{path or '<dict>'} (HF config.json, model_type {shown_type or 'none'})",
        "model_type": model_type or None,
        "dtype": _dtype(data, outer, model_type, path),
    }
    out.update(fields)
    return {k: v for k, v in out.items() if v is not None}


def model_from_hf_config(data: dict[str, Any], path: str | None = None) -> ModelSpec:
    """A `ModelSpec` from a Hugging Face config.json dict (see `model_fields_from_hf_config`).

    Raises `ConfigError` (file and field named) for a missing field, an unsizable feature or a
    value the schema refuses.
    """
    from kvcalc.loaders import build

    return build(ModelSpec, model_fields_from_hf_config(data, path), path)


# ----- kvcalc YAML out ---------------------------------------------------------------------

#: header of a converted file; `{source}` is filled in.
YAML_HEADER = ("# Converted by `kvcalc import` from {source}.\n"
               "# Edit freely: this is a kvcalc model config (see configs/models/).\n")


def spec_to_yaml_dict(spec: ModelSpec) -> dict[str, Any]:
    """The fields of `spec` that differ from the schema defaults (dtype always), name and
    source first, with the layer kinds written compactly (`compact_layers`)."""
    d = spec.model_dump(exclude_defaults=True)
    d["dtype"] = spec.dtype
    raw = d.pop("layer_types", None) or None
    pattern = d.pop("layer_pattern", None)
    if raw is None and pattern is not None:
        raw = [pattern[i % len(pattern)] for i in range(spec.n_layers)]
    if raw is not None:
        comp = compact_layers(raw)
        if not comp and all(k == "full" for k in raw) and spec.sliding_window is not None:
            comp = {"layer_pattern": ["full"]}  # keep the window without making layers slide
        d.update(comp)
    head = {k: d.pop(k) for k in ("name", "source") if k in d}
    return {**head, **{k: d[k] for k in ModelSpec.model_fields if k in d}}


def spec_to_yaml(spec: ModelSpec, warnings_seen: Iterable[str] = ()) -> str:
    """`spec` as a kvcalc YAML document with a header comment saying where it came from, and
    one `# warning: ...` comment line per warning the conversion raised (so a check the user
    was asked to make travels with the file)."""
    import yaml

    class _Dumper(yaml.SafeDumper):
        """Block mappings, flow lists: `layer_pattern: [sliding, full]` on one line."""

    _Dumper.add_representer(list, lambda d, v: d.represent_sequence("tag:yaml.org,2002:seq", v,
                                                                     flow_style=True))
    body = yaml.dump(spec_to_yaml_dict(spec), Dumper=_Dumper, sort_keys=False,
                     default_flow_style=False, width=100, allow_unicode=True)
    notes = "".join(f"# warning: {ln}\n" for w in warnings_seen for ln in str(w).splitlines())
    return YAML_HEADER.format(source=spec.source or spec.name) + notes + body
