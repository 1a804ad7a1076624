"""A `ModelSpec` written out as a compact kvcalc model YAML (`kvcalc import`): only the fields
that are set, `name` and `source` first; loading it back gives the same spec."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kvcalc.load.hf.reader import compact_layers
from kvcalc.schema import ModelSpec


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
