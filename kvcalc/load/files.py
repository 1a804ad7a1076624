"""Reading configs: YAML and JSON files, bundled names, and turning every parse or validation
problem into a `ConfigError` that names the file, the line and the field.

Bundled configs live in the repo's top-level `configs/` and ship in the wheel as the package
`kvcalc.configs`, so a name like `llama-3.1-70b` resolves after a plain install too.
"""

from __future__ import annotations

import difflib
import json
from functools import cache
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from kvcalc.errors import ConfigError

M = TypeVar("M", bound=BaseModel)

#: Hugging Face / other calculators' spellings of our fields, for "did you mean" hints.
FIELD_HINTS: dict[str, str] = {
    "num_hidden_layers": "n_layers", "num_layers": "n_layers", "n_layer": "n_layers", "layers": "n_layers",
    "num_attention_heads": "n_heads", "n_head": "n_heads", "heads": "n_heads", "num_heads": "n_heads",
    "num_key_value_heads": "n_kv_heads", "kv_heads": "n_kv_heads", "n_kv_head": "n_kv_heads",
    "num_kv_heads": "n_kv_heads", "n_embd": "hidden_size", "d_model": "hidden_size",
    "torch_dtype": "dtype", "n_positions": "max_position_embeddings", "max_seq_len": "max_position_embeddings",
    "context_length": "max_position_embeddings", "window": "sliding_window",
    # GPU rows (`--gpu FILE`, a GPU file in a `kvcalc check` folder)
    "memory": "memory_bytes", "mem": "memory_bytes", "vram": "memory_bytes", "memory_gb": "memory_bytes",
    "memory_gib": "memory_bytes", "memory_size": "memory_bytes", "bandwidth": "hbm_bytes_per_s",
    "memory_bandwidth": "hbm_bytes_per_s", "mem_bandwidth": "hbm_bytes_per_s", "hbm_bandwidth": "hbm_bytes_per_s",
    "bf16_tflops": "bf16_flops_per_s", "tflops": "bf16_flops_per_s", "flops": "bf16_flops_per_s",
    "fp16_flops_per_s": "bf16_flops_per_s", "fp8_tflops": "fp8_flops_per_s", "nvlink": "interconnect_bytes_per_s",
    "nvlink_bytes_per_s": "interconnect_bytes_per_s", "l2_cache": "l2_bytes", "l2_cache_bytes": "l2_bytes",
}

#: endings of fields named for their unit: `memory` -> `memory_bytes`, `hbm` -> `hbm_bytes_per_s`.
UNIT_SUFFIXES = ("_bytes", "_bytes_per_s", "_flops_per_s", "_per_s", "_ms", "_s")


def field_hint(name: str, known: list[str], top_level: bool = True) -> str | None:
    """The field an unknown `name` most likely meant, among `known`: a spelling from
    `FIELD_HINTS` (top-level keys; only when that field exists here), else the one known field
    that is `name` plus a unit suffix (`memory` -> `memory_bytes`, not `memory_note`), else
    difflib's closest (cutoff 0.6), else None."""
    hint = FIELD_HINTS.get(name.lower()) if top_level else None
    if hint in known:
        return hint
    unit = [f for f in known if f.startswith(name + "_") and f.endswith(UNIT_SUFFIXES)]
    if len(unit) == 1:
        return unit[0]
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    return close[0] if close else None


def configs_dir() -> Path:
    """The bundled `configs/` folder: the installed `kvcalc.configs` package, else the repo's."""
    try:
        from importlib.resources import files

        p = Path(str(files("kvcalc.configs")))
        if (p / "models").is_dir():
            return p
    except (ModuleNotFoundError, TypeError):
        pass
    return Path(__file__).resolve().parent.parent.parent / "configs"


@cache
def bundled(kind: str = "models") -> dict[str, Path]:
    """Bundled configs of `kind` ('models' or 'deployments'): lower-case name -> path.

    A bundled model's file is named for its `name:` field in lower case (a test checks it)."""
    d = configs_dir() / kind
    if not d.is_dir():
        return {}
    return {p.stem.lower(): p for p in sorted(d.glob("*.yaml"))}


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping (PyYAML keeps the last)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key: let PyYAML report it
                break
            if first is not None:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key '{key}' is given twice (first on line {first})", key_node.start_mark)
            seen[key] = key_node.start_mark.line + 1
        return super().construct_mapping(node, deep=deep)


def _no_duplicate_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"key '{k}' is given twice")
        out[k] = v
    return out


def _key_lines(text: str) -> dict[str, int]:
    """Top-level mapping keys -> 1-based line numbers, from the YAML node tree."""
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return {}
    if not isinstance(node, yaml.MappingNode):
        return {}
    return {k.value: k.start_mark.line + 1 for k, _ in node.value if isinstance(k, yaml.ScalarNode)}


def read_mapping(path: Path) -> tuple[dict[str, Any], dict[str, int]]:
    """Parse a YAML or JSON file that must hold one mapping; returns (data, key -> line).

    Raises `ConfigError` for a missing, unreadable or unparsable file, or one that is not a mapping.
    """
    p = str(path)
    if not path.exists():
        raise ConfigError("file not found", path=p)
    if path.is_dir():
        raise ConfigError("is a folder with no config.json in it (give a .yaml or a config.json)", path=p)
    try:
        text = path.read_text(encoding="utf-8-sig")  # -sig: a UTF-8 byte-order mark is fine
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read: {e.__class__.__name__}: {e}", path=p) from None
    if path.suffix.lower() == ".json":
        try:
            data = json.loads(text, object_pairs_hook=_no_duplicate_pairs)
        except json.JSONDecodeError as e:
            raise ConfigError(f"invalid JSON: {e.msg} (column {e.colno})", path=p, line=e.lineno) from None
        except ValueError as e:
            raise ConfigError(f"invalid JSON: {e}", path=p) from None
        except RecursionError:
            raise ConfigError("invalid JSON: nested too deeply", path=p) from None
        lines = {}
        for i, ln in enumerate(text.splitlines(), 1):
            s = ln.strip()
            if s.startswith('"') and '":' in s:
                lines.setdefault(s[1:s.index('"', 1)], i)
    else:
        try:
            docs = [d for d in yaml.load_all(text, Loader=_UniqueKeyLoader) if d is not None]
        except yaml.YAMLError as e:
            mark = getattr(e, "problem_mark", None)
            problem = getattr(e, "problem", None) or str(e).splitlines()[0]
            raise ConfigError(f"invalid YAML: {problem}", path=p,
                              line=(mark.line + 1) if mark else None) from None
        if len(docs) > 1:
            raise ConfigError("holds several YAML documents; put one config in each file", path=p)
        data = docs[0] if docs else None
        lines = _key_lines(text)
    if data is None:
        raise ConfigError("is empty; it must hold a mapping of fields (name: ..., n_layers: ...)", path=p)
    if not isinstance(data, dict):
        raise ConfigError(f"must hold a mapping of fields, not a {type(data).__name__}", path=p)
    return data, lines


def _nested_fields(model_cls: type[BaseModel], loc: tuple) -> list[str]:
    """Field names of the model that `loc` (a pydantic error location, less its last part)
    leads to from `model_cls` (`('targets',)` -> Targets' fields), for the unknown-field hint."""
    import typing

    cls = model_cls
    for part in loc:
        f = cls.model_fields.get(str(part)) if isinstance(part, str) else None
        if f is None:
            continue  # a list index or a union tag: stay on the model found so far
        subs = [a for a in (f.annotation, *typing.get_args(f.annotation))
                if isinstance(a, type) and issubclass(a, BaseModel)]
        if not subs:
            break
        cls = subs[0]
    return list(cls.model_fields)


def validation_error(err: ValidationError, model_cls: type[BaseModel], path: str | None,
                     lines: dict[str, int] | None = None) -> ConfigError:
    """One `ConfigError` line per pydantic error, each naming file, line and field, with a
    "did you mean" hint for an unknown field."""
    lines = lines or {}
    out = []
    for e in err.errors():
        loc = ".".join(str(x) for x in e["loc"])
        top = str(e["loc"][0]) if e["loc"] else None
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = "unknown field"
            name, known = str(e["loc"][-1]) if e["loc"] else "", _nested_fields(model_cls, e["loc"][:-1])
            hint = field_hint(name, known, top_level=len(e["loc"]) == 1)
            msg += f"; did you mean '{hint}'?" if hint else f"; known fields: {', '.join(known)}"
        elif e["type"] == "missing":
            msg = "required field is missing"
        elif "input" in e and e["type"] not in ("value_error",):
            msg += f" (got {e['input']!r})"
        field = loc or None
        if field is None:  # a model-level check: name the fields it mentions
            named = [f for f in model_cls.model_fields if f in msg]
            field = named[0] if named else None
        out.append(str(ConfigError(msg, path=path, field=field, line=lines.get(top or field or ""))))
    ce = ConfigError("\n".join(out))
    ce.path = path
    return ce


def build(model_cls: type[M], data: dict[str, Any], path: str | None = None,
          lines: dict[str, int] | None = None) -> M:
    """Validate `data` as `model_cls`; raises `ConfigError` naming the file, line and field."""
    try:
        return model_cls.model_validate(data)
    except ValidationError as e:
        raise validation_error(e, model_cls, path, lines) from None
