"""A Hugging Face `model_type` family as data: `Family` says which config keys give which `ModelSpec`
fields, with the family's transformers defaults, how the per-layer kinds are read (`Kinds`), where
the window is, and which fields the reference code reads but that do not shape the cache; the few
rules no table can say are a `build` function beside it.

    Family(source="configuration_olmo2.py", decoder=dict(max_pos=2048))

reads an OLMo-2 config as a llama decoder with a 2,048-token default context. `Family.__call__`
takes a `_Cfg` and returns the `ModelSpec` fields, so `FAMILIES` maps a model_type to a `Family` or
(for the families whose rules are code) a function, and `kvcalc.load.hf` calls either alike.

A family's rules that no table says are small functions beside it, each in its place in the
reading: `prepare` (the config the reading starts from: Nemotron-H's pattern gives the layer
count), `build` (fields: Jamba's "auto" dt_rank, Falcon-H1's mixer width) and `layers` (the
per-layer kinds: EXAONE-4's "LLLG", Jamba's attention period and offset).

Every key a family reads is checked by `_Cfg` (a JSON integer in range, a boolean, a list of the
right length) before any arithmetic.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kvcalc.load.fields import ModelFields
from kvcalc.load.hf.reader import _Cfg, _decoder, _every_nth, _kinds_from_layer_types, _set_kinds, _shown

#: a ModelSpec field -> (config keys, the first present wins; the family's default)
CountMap = Mapping[str, tuple[tuple[str, ...], int | None]]


@dataclass(frozen=True)
class Kinds:
    """How a family's layer kinds are read, in order of precedence:

    - `layer_types`: the config's `layer_types` list (transformers names) when present (and
      `layer_types` is true: the families older than that key ignore it);
    - `codes`: a per-layer list under `codes[0]` whose values map to kinds by `codes[1]`
      (MiMo-V2-Flash `hybrid_layer_pattern`: 0 full, 1 sliding; MiniMax `attn_type_list`);
    - `every`: layer i is `nth` when (i + 1) % every == 0 and `rest` otherwise, `every` read from
      the first of `every_keys` present (gemma3: 6, so five sliding then one full);
    - else every layer is `rest` (`full`, or `sliding` when the family's window applies to all, or
      `hybrid`: attention beside a Mamba-2 mixer on every layer);
    - `last`: the kind the last layer is forced to (Gemma-4: transformers forces full_attention);
    - `first`: the kind of layers 0 .. first_n - 1 (MiMo-V2-Flash's default: layer 0 full).
    """

    nth: str = "full"
    rest: str = "full"
    every: int | None = None
    every_keys: tuple[str, ...] = ()
    codes: tuple[str, Mapping[object, str]] | None = None
    last: str | None = None
    trim_to_layers: bool = False  # lists padded with MTP entries (Step-3.7) are cut to num_hidden_layers
    layer_types: bool = True  # False: the family's code never reads `layer_types` (GPT-2, Falcon, MPT)

    def read(self, c: _Cfg, n_layers: int | None) -> list[str] | None:
        """The kinds, one per layer, or None for "every layer `rest`" with no list needed."""
        n = n_layers or 0
        kinds: list[str] | None
        if self.layer_types and c.get("layer_types") is not None:
            if self.trim_to_layers and isinstance(c.data["layer_types"], list) and len(c.data["layer_types"]) > n:
                c = _Cfg({**c.data, "layer_types": c.data["layer_types"][:n]}, c.path, c.model_type)
            kinds = _kinds_from_layer_types(c, n_layers)
        elif self.codes is not None and c.get(self.codes[0]) is not None:
            key, table = self.codes
            raw = c.data[key]
            if not isinstance(raw, list) or len(raw) != n or any(type(v) is bool or v not in table for v in raw):
                raise c.fail(
                    f"must list one of {', '.join(map(str, table))} for each of the {n} layers, got {_shown(raw)}", key
                )
            kinds = [table[v] for v in raw]
        elif self.every is not None:
            kinds = _every_nth(c, n_layers, self.nth, self.rest, every=self.every, every_keys=self.every_keys)
        else:
            kinds = None if self.last is None and self.rest in ("full", "sliding") else [self.rest] * n
        if self.last is not None and kinds:
            kinds[-1] = self.last
        return kinds


@dataclass(frozen=True)
class Family:
    """One model_type as data (see the module docstring).

    - `source`: the configuration / modelling file the mapping follows (for docs and errors);
    - `decoder`: keyword defaults for the shared decoder fields (`reader._decoder`: head_dim,
      n_kv_heads, max_pos, tie, bias, n_heads, and the key spellings);
    - `counts` / `flags`: further ModelSpec fields read as checked counts / booleans;
    - `fixed`: ModelSpec fields set outright (`attention: mla`, `mlp_kind: plain`);
    - `rename`: fields of the decoder read moved to another ModelSpec field
      (`intermediate_size` -> `moe_intermediate_size` for a family with experts on every layer);
    - `kinds` and `window`: the per-layer kinds (`Kinds`) and (config key, default) of the
      window; a window of None means no layer slides;
    - `ignored`: config keys that look as if they shape the cache but that the reference code
      does not read that way, each with the reason (kept so a reader sees they were checked);
    - `prepare`: the config the reading starts from, `prepare(c) -> _Cfg`, run first (its
      missing fields are reported with `c`'s);
    - `build`: the family's own rules, `build(c, fields) -> fields`, run after the tables;
    - `layers`: the per-layer kinds by a rule no `Kinds` says, `layers(c, fields, window) ->
      kinds` (None: every layer full, or every layer sliding when there is a window), given the
      window read from `window`; it replaces `kinds`.
    """

    source: str
    # Any: `_decoder`'s keyword arguments (counts, flags, key tuples), each its own type
    decoder: Mapping[str, Any] = field(default_factory=dict)
    counts: CountMap = field(default_factory=dict)
    flags: Mapping[str, tuple[tuple[str, ...], bool]] = field(default_factory=dict)
    fixed: Mapping[str, object] = field(default_factory=dict)
    rename: Mapping[str, str] = field(default_factory=dict)
    kinds: Kinds = Kinds()
    window: tuple[str, int | None] | None = None
    ignored: Mapping[str, str] = field(default_factory=dict)
    prepare: Callable[[_Cfg], _Cfg] | None = None
    build: Callable[[_Cfg, ModelFields], ModelFields] | None = None
    layers: Callable[[_Cfg, ModelFields, int | None], list[str] | None] | None = None
    set_kinds: bool = True  # False: `build` places the kinds itself

    def __call__(self, c: _Cfg) -> ModelFields:
        if self.prepare is None:
            return self._read(c)
        prepared = self.prepare(c)
        f = self._read(prepared)
        if prepared is not c:
            c.missing.extend(prepared.missing)
        return f

    def _read(self, c: _Cfg) -> ModelFields:
        f = _decoder(c, **self.decoder)
        for name, (keys, default) in self.counts.items():
            f[name] = c.count(*keys, default=default, minimum=0 if default == 0 else 1)
        for name, (keys, default) in self.flags.items():
            f[name] = c.flag(*keys, default=default)
        for old, new in self.rename.items():
            f[new] = f.pop(old, None) or f.get(new)
        f.update(self.fixed)
        if self.build is not None:
            f = self.build(c, f)
        if not self.set_kinds:
            return f
        window = None
        if self.window is not None:
            key, default = self.window
            window = c.int_or_null(key, default)
        if self.layers is not None:
            return _set_kinds(c, f, self.layers(c, f, window), window)
        kinds = self.kinds.read(c, f.get("n_layers"))
        if kinds is None and self.kinds.rest == "sliding":
            kinds = None  # every layer slides: `_set_kinds` writes the window alone
        elif kinds is None:
            window = None
        return _set_kinds(c, f, kinds, window)
