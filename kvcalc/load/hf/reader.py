"""The typed reader under `kvcalc.load.hf`: a Hugging Face config dict as a `_Cfg` whose every
number is checked (a JSON integer, never a boolean, 32.0, NaN or "8"; in range) before any
arithmetic, and the pieces the family mappings (`kvcalc.load.hf.families`) share: the decoder
fields (`_decoder`), the per-layer kinds (`_kinds_from_layer_types`, `_every_nth`,
`_set_kinds`) and their compact form (`compact_layers`), Qwen's experts and window. The rules
themselves are listed in `kvcalc.load.hf`'s docstring.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, TypeVar, overload

from kvcalc.errors import ConfigError
from kvcalc.load.fields import ModelFields
from kvcalc.schema import LAYER_KIND_ALIASES

if TYPE_CHECKING:
    from kvcalc.json_types import JsonObject, JsonValue

_MISSING = object()
#: a family's default for an absent field (any type the family's transformers default has)
_D = TypeVar("_D")
#: the largest count a config may give (as `kvcalc.schema`'s Count).
_MAX_INT = 2**40
#: the most layers a config may give (as `kvcalc.schema`'s LayerCount).
_MAX_LAYERS = 100_000


#: transformers' usual config keys of the geometry fields (kvcalc field -> keys, in order).
_USUAL_KEYS: dict[str, tuple[str, ...]] = {
    "n_layers": ("num_hidden_layers", "n_layer", "num_layers", "n_layers"),
    "n_heads": ("num_attention_heads", "n_head", "num_heads", "n_heads"),
    "n_kv_heads": ("num_key_value_heads", "num_kv_heads", "n_head_kv", "multi_query_group_num"),
    "hidden_size": ("hidden_size", "n_embd", "n_embed", "d_model"),
    "head_dim": ("head_dim", "kv_channels"),
}


def _shown(v: object) -> str:
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

    def __init__(self, data: JsonObject, path: str | None, model_type: str) -> None:
        self.data = data
        self.path = path
        self.model_type = model_type
        self.missing: list[str] = []
        self.prefix = ""  # "attn_config." for a nested mapping: errors name the full field
        #: kvcalc field -> the key this config gave it under (`num_key_value_heads`), so the
        #: schema's errors name the file's field (`file_names`)
        self.names: dict[str, str] = {}

    @overload
    def get(self, *keys: str) -> JsonValue: ...
    @overload
    def get(self, *keys: str, default: _D) -> JsonValue | _D: ...
    def get(self, *keys: str, default: object = None) -> object:
        """The first of `keys` present with a non-null value, else `default`."""
        for k in keys:
            v = self.data.get(k)
            if v is not None:
                return v
        return default

    def need(self, *keys: str) -> JsonValue:
        """The first of `keys` present (the HF name, then older aliases); records the first
        key as missing when none is."""
        k, v = self._present(keys)
        if k is None:
            self.missing.append(keys[0])
            return None
        return v

    def fail(self, message: str, field: str | None = None) -> ConfigError:
        return ConfigError(message, path=self.path, field=self.prefix + field if field else None)

    def _present(self, keys: tuple[str, ...]) -> tuple[str | None, JsonValue]:
        for k in keys:
            v = self.data.get(k)
            if v is not None:
                return k, v
        return None, None

    def check_int(self, key: str, v: object, minimum: int = 1, maximum: int = _MAX_INT) -> int:
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

    @overload
    def count(self, *keys: str, minimum: int = 1) -> int | None: ...
    @overload
    def count(self, *keys: str, default: _D, minimum: int = 1) -> int | _D: ...
    def count(self, *keys: str, default: object = None, minimum: int = 1) -> object:
        """The first of `keys` present with a non-null value, checked by `check_int`; else
        `default` (not checked: a family's transformers default)."""
        k, v = self._present(keys)
        return default if k is None else self.check_int(k, v, minimum)

    def int_or_null(self, key: str, default: _D, minimum: int = 1) -> int | _D | None:
        """Field `key` checked as an int when set; `default` only when the key is absent; None
        when it is null (sliding_window: absent means the family default, null means none)."""
        if key not in self.data:
            return default
        v = self.data[key]
        return None if v is None else self.check_int(key, v, minimum)

    def need_int(self, *keys: str, minimum: int = 1, maximum: int = _MAX_INT) -> int | None:
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

    def mapping(self, key: str) -> JsonObject:
        """Field `key` as a JSON object ({} when absent or null)."""
        v = self.data.get(key)
        if v is None:
            return {}
        if not isinstance(v, dict):
            raise self.fail(f"must be a JSON object, got {_shown(v)}", key)
        return v

    def file_names(self, prefix: str = "") -> dict[str, str]:
        """kvcalc field -> this config's key for it (`names`, each under `prefix`, e.g.
        `text_config.`); for the geometry fields a family read without `_decoder`, the first of
        transformers' usual keys present in the config."""
        out = {f: prefix + k for f, k in self.names.items()}
        for field, keys in _USUAL_KEYS.items():
            if field not in out:
                given = self._present(keys)[0]
                if given is not None:
                    out[field] = prefix + given
        return out

    def check_missing(self) -> None:
        if self.missing:
            raise self.fail(
                f"model_type '{self.model_type}' needs {', '.join(self.missing)}, missing from this config.json"
            )


# ----- shared pieces ---------------------------------------------------------------------


def _decoder(
    c: _Cfg,
    *,
    head_dim: int | None = None,
    n_kv_heads: int | None | object = _MISSING,
    max_pos: int | None = None,
    tie: bool = False,
    bias: bool = False,
    n_heads: int | None = None,
    hidden_keys: tuple[str, ...] = ("hidden_size",),
    layer_keys: tuple[str, ...] = ("num_hidden_layers",),
    head_keys: tuple[str, ...] = ("num_attention_heads",),
    kv_keys: tuple[str, ...] = ("num_key_value_heads",),
) -> ModelFields:
    """The fields every decoder shares (transformers `LlamaConfig` and its descendants):
    layers, heads, KV heads (absent -> heads), head_dim (explicit wins, else hidden // heads),
    context, vocabulary, MLP width, tied embeddings, QKV bias. Keyword arguments are the
    family's transformers defaults."""
    f: ModelFields = {
        "n_layers": c.need_int(*layer_keys, maximum=_MAX_LAYERS),
        "n_heads": c.count(*head_keys, default=n_heads) if n_heads else c.need_int(*head_keys),
        "hidden_size": c.count(*hidden_keys),
        "max_position_embeddings": c.count("max_position_embeddings", default=max_pos),
        "vocab_size": c.count("vocab_size"),
        "intermediate_size": c.count("intermediate_size"),
        "tie_word_embeddings": c.flag("tie_word_embeddings", default=tie),
        "attention_bias": c.flag("attention_bias", default=bias),
    }
    for field, keys in (
        ("n_layers", layer_keys),
        ("n_heads", head_keys),
        ("hidden_size", hidden_keys),
        ("n_kv_heads", kv_keys),
        ("head_dim", ("head_dim",)),
    ):
        given = c._present(keys)[0]
        if given is not None:
            c.names[field] = c.prefix + given
    kv = c.count(*kv_keys, default=None if n_kv_heads is _MISSING else n_kv_heads)
    if kv is not None:
        f["n_kv_heads"] = kv
    hd = c.count("head_dim", default=head_dim)
    if hd is not None:
        f["head_dim"] = hd
    elif f["hidden_size"] is None:
        c.missing.append("hidden_size or head_dim")
    return f


def _kinds_from_layer_types(c: _Cfg, n_layers: int | None, aliases: Mapping[str, str] | None = None) -> list[str]:
    """The config's `layer_types`, as kvcalc kinds; a kind kvcalc cannot size fails. `aliases`:
    the family's own names, matched exactly (Llama 4's chunked_attention: sliding)."""
    raw = c.data["layer_types"]
    if not isinstance(raw, list) or not raw:
        raise c.fail("must be a non-empty list of layer kinds", "layer_types")
    out = []
    for k in raw:
        kind = (aliases or {}).get(k) if isinstance(k, str) else None
        kind = kind or LAYER_KIND_ALIASES.get(str(k).strip().lower())
        if kind is None:
            raise c.fail(
                f"layer kind '{k}' is not one kvcalc can size (full_attention, "
                "sliding_attention, linear_attention, mamba); write a kvcalc YAML "
                "for this model instead",
                "layer_types",
            )
        out.append(kind)
    if n_layers is not None and len(out) != n_layers:
        raise c.fail(f"lists {len(out)} layers but num_hidden_layers is {n_layers}", "layer_types")
    return out


def _auto(c: _Cfg, key: str, derived: int | None) -> int | None:
    """Config field `key`, a checked count, or `derived` when it is "auto" (the default):
    Jamba's mamba_dt_rank, Granite-4.0-H's and Falcon-H1's mamba_d_head."""
    v = c.get(key, default="auto")
    return derived if v == "auto" else c.check_int(key, v)


def _set_kinds(c: _Cfg, f: ModelFields, kinds: list[str] | None, window: int | None) -> ModelFields:
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


def _moe_sparse_step(c: _Cfg, f: ModelFields) -> None:
    """Qwen MoE layer placement (`modeling_qwen2_moe.py` / `modeling_qwen3_moe.py`): layer i
    is sparse when i is not in `mlp_only_layers` and (i + 1) % decoder_sparse_step == 0, i.e.
    period = step, offset = step - 1."""
    step = c.count("decoder_sparse_step", default=1)
    if step > 1:
        f["moe_layer_period"], f["moe_layer_offset"] = step, step - 1
    if c.get("mlp_only_layers"):
        raise c.fail(
            "dense layers listed one by one cannot be expressed yet (kvcalc has "
            "first_dense_layers and a period); write a kvcalc YAML",
            "mlp_only_layers",
        )


def _qwen_experts(
    c: _Cfg, f: ModelFields, *, n_experts: int, per_token: int, width: int, shared: int | None = None
) -> ModelFields:
    """Qwen MoE experts (`configuration_qwen2_moe.py`, `configuration_qwen3_moe.py`,
    `configuration_qwen3_next.py`): num_experts of moe_intermediate_size, num_experts_per_tok
    per token, a shared expert of shared_expert_intermediate_size (read only for the families
    that have one: `shared` is its default), placed by `_moe_sparse_step`. Keyword arguments
    are the family's transformers defaults."""
    f["n_experts"] = c.count("num_experts", default=n_experts)
    f["n_experts_per_token"] = c.count("num_experts_per_tok", default=per_token)
    f["moe_intermediate_size"] = c.count("moe_intermediate_size", default=width)
    if shared is not None:
        f["shared_expert_intermediate_size"] = c.count("shared_expert_intermediate_size", default=shared)
    _moe_sparse_step(c, f)
    return f


def _qwen_window_kinds(c: _Cfg, f: ModelFields) -> tuple[list[str] | None, int | None]:
    """Qwen2/Qwen3 sliding window (`configuration_qwen2.py`): the window is null unless
    `use_sliding_window`; then layers i >= max_window_layers slide. `layer_types` wins."""
    window = c.count("sliding_window") if c.flag("use_sliding_window", default=False) else None
    if c.get("layer_types") is not None:
        return _kinds_from_layer_types(c, f["n_layers"]), c.count("sliding_window")
    if window is None:
        return None, None
    start = c.count("max_window_layers", default=28, minimum=0)
    return ["sliding" if i >= start else "full" for i in range(f["n_layers"] or 0)], window


def _every_nth(
    c: _Cfg, n_layers: int | None, nth: str, rest: str, *, every: int = 2, every_keys: tuple[str, ...] = ()
) -> list[str]:
    """The config's `layer_types` when given (`_kinds_from_layer_types`); else layer i is `nth`
    when (i + 1) % every == 0 and `rest` otherwise, `every` read from the first of
    `every_keys` present (read only when there are no `layer_types`), else the default given."""
    if c.get("layer_types") is not None:
        return _kinds_from_layer_types(c, n_layers)
    every = c.count(*every_keys, default=every)
    return [rest if (i + 1) % every else nth for i in range(n_layers or 0)]
