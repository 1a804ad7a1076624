"""Results -> text: rich tables and the machine formats (json, yaml, csv, markdown).

Formats results and computes nothing. Units are converted only here: GB = 10^9 bytes,
GiB = 2^30 bytes, MiB = 2^20 bytes, and every printed size says which.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Union

from pydantic import BaseModel

if TYPE_CHECKING:
    from kvcalc.json_types import JsonScalar, JsonValue

#: what the machine formats render: a result model, a row dict (`SweepRow`), a list of either,
#: or the JSON values inside them (`_dump` refuses anything else)
Dumpable = Union[BaseModel, Mapping[str, object], Sequence[object], "JsonScalar"]

OUTPUT_FORMATS = ("table", "json", "yaml", "csv", "markdown")


def gib(n: int | float) -> str:
    """'2.50 GiB' (binary, 2^30)."""
    return f"{n / 2**30:,.2f} GiB"


def mib(n: int | float) -> str:
    """'2176.00 MiB' (binary, 2^20), llama.cpp's and vLLM's style."""
    return f"{n / 2**20:.2f} MiB"


def _scaled(n: int | float, base: int, names: tuple[str, ...]) -> str:
    """n in the largest unit of `base` (1000 or 1024) that keeps it >= 1, up to the last name."""
    i = 0
    while i < len(names) - 1 and abs(n) >= base ** (i + 1):
        i += 1
    return f"{n / base**i:,.2f} {names[i]}" if i else f"{n:,} B"


def size(n: int | None) -> str:
    """'2,684,354,560 B (2.68 GB, 2.50 GiB)': exact bytes with a decimal and a binary unit, each
    the largest that keeps the figure >= 1 ('20,480 B (20.48 KB, 20.00 KiB)')."""
    if n is None:
        return "n/a"
    if abs(n) < 1000:
        return f"{n:,} B"
    return (
        f"{n:,} B ({_scaled(n, 1000, ('B', 'KB', 'MB', 'GB', 'TB'))}, "
        f"{_scaled(n, 1024, ('B', 'KiB', 'MiB', 'GiB', 'TiB'))})"
    )


def seconds(s: float | None) -> str:
    """A time in s (from 1 s), ms (from 0.1 ms, three decimals) or µs (below: three significant
    figures, so a tiny model's step reads 23.4 µs, never 0.000 ms), labelled."""
    if s is None:
        return "n/a"
    if s >= 1:
        return f"{s:,.3f} s"
    if s >= 1e-4 or s <= 0:
        return f"{s * 1e3:,.3f} ms"
    return f"{significant(s * 1e6)} µs"


def significant(x: float, digits: int = 3) -> str:
    """`x` with `digits` significant figures, in fixed notation (0.00123, 23.4, 1,230)."""
    import math

    if x == 0 or not math.isfinite(x):
        return f"{x:g}"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(x))))
    return f"{x:,.{decimals}f}"


def figure(x: float, decimals: int) -> str:
    """`x` with `decimals` decimals, as a table column prints it, unless that would show fewer
    than two significant figures of a nonzero value (0.00 for 0.0043 ms): then three
    significant figures (0.00430)."""
    if x == 0 or abs(x) >= 10 ** (1 - decimals):
        return f"{x:,.{decimals}f}"
    return significant(x)


def flatten(obj: JsonValue, prefix: str = "") -> dict[str, JsonScalar]:
    """Nested dicts and lists -> one level with dotted keys (lists of dicts keyed by their
    'kind' / 'name' / 'variant' field when they have one, else by index), for csv."""
    out: dict[str, JsonScalar] = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.update(flatten(v, f"{prefix}{k}."))
    elif isinstance(obj, list) and obj and all(isinstance(x, dict) for x in obj):
        for i, x in enumerate(obj):
            if isinstance(x, dict):
                tag = x.get("kind") or x.get("name") or x.get("variant") or str(i)
                out.update(flatten(x, f"{prefix}{tag}."))
    else:
        import json  # here: a table never needs it

        out[prefix.rstrip(".")] = obj if not isinstance(obj, list) else json.dumps(obj)
    return out


def _dump(obj: object) -> JsonValue:
    if isinstance(obj, BaseModel):
        dumped: JsonValue = obj.model_dump(mode="json")
        return dumped
    if isinstance(obj, Mapping):
        return {str(k): _dump(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_dump(x) for x in obj]
    if obj is None or isinstance(obj, (str, int, float, bool)):  # a scalar (a list of str holds them)
        return obj
    raise TypeError(f"no machine format for {type(obj).__name__}")


def machine(obj: Dumpable, fmt: str) -> str:
    """Render a result (or a list of rows) as json, yaml, csv or markdown text."""
    data = _dump(obj)
    if fmt == "json":
        import json  # here, not at import: the table format never needs it

        return json.dumps(data, indent=2)
    if fmt == "yaml":
        import yaml

        return yaml.safe_dump(data, sort_keys=False, width=1000).rstrip()
    rows = data if isinstance(data, list) else [data]
    flat = [flatten(r) for r in rows]
    keys: list[str] = []
    for r in flat:
        keys += [k for k in r if k not in keys]
    flat = [{k: _safe_scalar(v) for k, v in r.items()} for r in flat]
    if fmt == "csv":
        import csv  # here, not at import: the table format never needs it
        import io

        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=keys, lineterminator="\n")
        w.writeheader()
        w.writerows(flat)
        return buf.getvalue().rstrip()
    if fmt == "markdown":
        if len(flat) == 1:
            return markdown_table(["field", "value"], [[k, flat[0][k]] for k in keys])
        return markdown_table(keys, [[r.get(k, "") for k in keys] for r in flat])
    raise ValueError(f"unknown format {fmt}")


def _safe_scalar(v: JsonScalar) -> JsonScalar:
    """A csv / markdown value with its terminal control characters written visibly (`\\x1b`;
    newline and tab kept: the csv module quotes them), as the json output escapes them."""
    if isinstance(v, str):
        from kvcalc.text import escape_controls

        return escape_controls(v)
    return v


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A GitHub-flavoured markdown table; a cell's `|` is escaped, and every control character
    (a newline too: it would end the row) written visibly (`\\x0a`)."""
    from kvcalc.text import escape_controls

    def cell(x: object) -> str:
        return "" if x is None else escape_controls(str(x), keep="").replace("|", "\\|")

    lines = ["| " + " | ".join(cell(h) for h in header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(cell(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def kinds_summary(kinds: list[str]) -> str:
    """'52 sliding + 10 full': layer kinds with their counts, in first-seen order."""
    counts: dict[str, int] = {}
    for k in kinds:
        counts[k] = counts.get(k, 0) + 1
    return " + ".join(f"{n} {k}" for k, n in counts.items())
