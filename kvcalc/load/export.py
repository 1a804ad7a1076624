"""A `ModelSpec` written out as a compact kvcalc model YAML (`kvcalc import`): only the fields
that are set, `name` and `source` first; loading it back gives the same spec.

Every value is written by the YAML library (`yaml.dump` with a safe dumper), never by string
formatting: a `source` holding a newline, `#`, quotes, colons or control characters comes back as
it went in. The header comments (where the config came from, the warnings of the conversion)
are the only text put together here, and each is one line with every line break and control
character escaped (`comment_line`). `check_round_trip` parses the text back and compares.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from kvcalc.errors import KvcalcError
from kvcalc.load.hf.reader import compact_layers
from kvcalc.schema import ModelSpec

if TYPE_CHECKING:
    import yaml

YAML_HEADER = (
    "# Converted by `kvcalc import` from {source}.\n"
    "# Edit freely: this is a kvcalc model config (see configs/models/).\n"
)

#: the most characters of a header comment line (a source or a warning), then "…"
COMMENT_CHARS = 200

#: what YAML reads as a line break (YAML 1.1, as PyYAML): a comment must hold none of them
_YAML_BREAKS = "\r\n\x85\u2028\u2029"


def comment_line(text: str, limit: int = COMMENT_CHARS) -> str:
    """`text` as the body of one YAML comment line: every control character, line break
    (`\\n`, `\\r`, NEL, U+2028, U+2029) and BOM written visibly (`\\x0a`), cut to
    `limit` characters; so what follows `# ` can never start a line of its own."""
    from kvcalc.text import cut, escape_controls

    s = escape_controls(text[: limit * 8], keep="")
    s = "".join(f"\\u{ord(c):04x}" if c in _YAML_BREAKS or c == "\ufeff" else c for c in s)
    return cut(s, limit)


#: characters PyYAML writes raw even in a double-quoted scalar (it counts them printable) that
#: `kvcalc.text.escape_controls` escapes on a terminal: the bidirectional overrides and isolates
_RAW_IN_QUOTES = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    """A string as PyYAML writes it, but double-quoted (where every character can be escaped)
    when it holds a control character, a line break YAML reads (NEL, U+2028, U+2029), a BOM or
    a bidirectional control: a plain or single-quoted scalar would carry those raw, and a raw
    NEL loads back as a line break."""
    from kvcalc.text import has_controls

    style = '"' if has_controls(value, keep="") or "\ufeff" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


def spec_to_yaml_dict(spec: ModelSpec) -> dict[str, object]:
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
    head: dict[str, object] = {k: d.pop(k) for k in ("name", "source", "model_path") if k in d}
    return {**head, **{k: d[k] for k in ModelSpec.model_fields if k in d}}


def spec_to_yaml(spec: ModelSpec, warnings_seen: Iterable[str] = ()) -> str:
    """`spec` as a kvcalc YAML document with a header comment saying where it came from, and
    one `# warning: ...` comment line per line of each warning the conversion raised (so a check
    the user was asked to make travels with the file); comments through `comment_line`."""
    import yaml

    class _Dumper(yaml.SafeDumper):
        """Block mappings, flow lists: `layer_pattern: [sliding, full]` on one line."""

    _Dumper.add_representer(list, lambda d, v: d.represent_sequence("tag:yaml.org,2002:seq", v, flow_style=True))
    _Dumper.add_representer(str, _represent_str)
    body = yaml.dump(
        spec_to_yaml_dict(spec),
        Dumper=_Dumper,
        sort_keys=False,
        default_flow_style=False,
        width=100,
        allow_unicode=True,
    )
    for c in _RAW_IN_QUOTES:  # only ever inside a double-quoted scalar (`_represent_str`): same text
        body = body.replace(c, f"\\u{ord(c):04x}")
    notes = "".join(f"# warning: {comment_line(ln)}\n" for w in warnings_seen for ln in str(w).split("\n"))
    return YAML_HEADER.format(source=comment_line(spec.source or spec.name)) + notes + body


def check_round_trip(spec: ModelSpec, text: str) -> None:
    """Parse `text` (from `spec_to_yaml`) as `kvcalc import`'s reader would and compare it with
    `spec`: the same fields, so the same layers and bytes. Raises `KvcalcError` naming the first
    field that differs, or the parse error, when the YAML would not load back to `spec`: the
    import is refused rather than written wrong."""
    from kvcalc.load.files import build, parse_mapping

    try:
        data, lines = parse_mapping(text, "<kvcalc import output>")
        back = build(ModelSpec, data, "<kvcalc import output>", lines)
    except KvcalcError as e:
        raise KvcalcError(f"kvcalc import cannot write {spec.name!r} as YAML that loads back: {e}") from None
    want, got = spec.model_dump(), back.model_dump()
    if want != got:
        field = next(k for k in want if want[k] != got.get(k))
        raise KvcalcError(
            f"kvcalc import cannot write this model as YAML that loads back the same: field '{field}' would change",
            field=field,
        )
