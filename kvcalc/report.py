"""Results -> text: rich tables and the machine formats (json, yaml, csv, markdown).

Formats results and computes nothing. Units are converted only here: GB = 10^9 bytes,
GiB = 2^30 bytes, MiB = 2^20 bytes, and every printed size says which.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

FORMATS = ("table", "json", "yaml", "csv", "markdown")


def gb(n: int | float) -> str:
    """'2.68 GB' (decimal, 10^9)."""
    return f"{n / 1e9:,.2f} GB"


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
    return f"{n / base ** i:,.2f} {names[i]}" if i else f"{n:,} B"


def size(n: int | None) -> str:
    """'2,684,354,560 B (2.68 GB, 2.50 GiB)': exact bytes with a decimal and a binary unit, each
    the largest that keeps the figure >= 1 ('20,480 B (20.48 KB, 20.00 KiB)')."""
    if n is None:
        return "n/a"
    if abs(n) < 1000:
        return f"{n:,} B"
    return (f"{n:,} B ({_scaled(n, 1000, ('B', 'KB', 'MB', 'GB', 'TB'))}, "
            f"{_scaled(n, 1024, ('B', 'KiB', 'MiB', 'GiB', 'TiB'))})")


def seconds(s: float | None) -> str:
    """A time in ms or s, labelled."""
    if s is None:
        return "n/a"
    return f"{s * 1e3:,.3f} ms" if s < 1 else f"{s:,.3f} s"


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts and lists -> one level with dotted keys (lists of dicts keyed by their
    'kind' / 'name' / 'variant' field when they have one, else by index), for csv."""
    out: dict[str, Any] = {}
    if isinstance(obj, BaseModel):
        obj = obj.model_dump(mode="json")
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.update(flatten(v, f"{prefix}{k}."))
    elif isinstance(obj, list) and obj and all(isinstance(x, dict) for x in obj):
        for i, x in enumerate(obj):
            tag = x.get("kind") or x.get("name") or x.get("variant") or str(i)
            out.update(flatten({k: v for k, v in x.items()}, f"{prefix}{tag}."))
    else:
        out[prefix.rstrip(".")] = obj if not isinstance(obj, list) else json.dumps(obj)
    return out


def _dump(obj: BaseModel | Sequence[BaseModel] | dict) -> Any:
    if isinstance(obj, BaseModel):
        return obj.model_dump(mode="json")
    if isinstance(obj, dict):
        return {k: _dump(v) if isinstance(v, (BaseModel, list, dict)) else v for k, v in obj.items()}
    if not isinstance(obj, (list, tuple)):  # a scalar inside a list (e.g. a list of str)
        return obj
    return [_dump(x) for x in obj]


def machine(obj: BaseModel | Sequence[BaseModel] | dict, fmt: str) -> str:
    """Render a result (or a list of rows) as json, yaml, csv or markdown text."""
    data = _dump(obj)
    if fmt == "json":
        return json.dumps(data, indent=2)
    if fmt == "yaml":
        import yaml

        return yaml.safe_dump(data, sort_keys=False, width=1000).rstrip()
    rows = data if isinstance(data, list) else [data]
    flat = [flatten(r) for r in rows]
    keys: list[str] = []
    for r in flat:
        keys += [k for k in r if k not in keys]
    if fmt == "csv":
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


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub-flavoured markdown table."""
    def cell(x: Any) -> str:
        return "" if x is None else str(x).replace("|", "\\|")
    lines = ["| " + " | ".join(cell(h) for h in header) + " |",
             "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(cell(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def kv_table(est: Any, title: str | None = None):
    """The rich table for a `KvEstimate`: inputs, the formula with numbers, bytes per token,
    the totals in B, GB and GiB, per GPU under TP/PP, and the breakdown by layer kind."""
    from rich.table import Table

    t = Table(title=title or f"KV cache: {est.model}", show_header=False, title_justify="left")
    t.add_column("what", style="bold")
    t.add_column("value", overflow="fold")
    heads = (f"{est.n_heads} query heads, {est.n_kv_heads} KV heads (group {est.group_size})"
             if est.attention != "mla" else f"{est.n_heads} query heads, one latent of {est.head_dim}")
    t.add_row("model", est.model)
    if est.source:
        t.add_row("source", est.source, style="dim")
    t.add_row("attention", f"{est.attention}: {heads}")
    dims = f"head_dim {est.head_dim}" + (f", v_head_dim {est.v_head_dim}" if est.v_head_dim not in (0, est.head_dim) else "")
    t.add_row("layers", f"{est.n_layers}, {dims}")
    t.add_row("workload", f"seq_len {est.seq_len:,} tokens x batch {est.batch}, KV dtype {est.kv_dtype}")
    if est.n_gpus > 1:
        t.add_row("parallel", f"tp {est.tp} x pp {est.pp} x dp {est.dp} = {est.n_gpus} GPUs")
    t.add_row("formula", est.formula)
    t.add_row("bytes per token", f"{est.kv_bytes_per_token:,} B (one more token, one sequence, all layers)")
    t.add_row("KV cache", size(est.kv_cache_bytes))
    if est.kv_cache_bytes_no_window != est.kv_cache_bytes:
        t.add_row("without window saving", size(est.kv_cache_bytes_no_window))
    if est.n_gpus > 1:
        t.add_row("bytes per token per GPU", f"{est.kv_bytes_per_token_per_gpu:,} B (fullest GPU)")
        t.add_row("KV cache per GPU", size(est.kv_cache_bytes_per_gpu) + " (fullest GPU)")
        t.add_row("KV cache, all GPUs", size(est.kv_cache_bytes_all_gpus))
    if est.state_bytes:
        t.add_row("fixed state (SSM/linear)", size(est.state_bytes) + " for the batch")
    if len(est.breakdown) > 1:
        for b in est.breakdown:
            win = f", window {b.window:,}" if b.window else ""
            t.add_row(f"  {b.kind} layers",
                      f"{b.n_layers} layers{win}: {b.kv_bytes_per_token:,} B/token, "
                      f"{b.tokens_cached:,} tokens cached, {size(b.kv_cache_bytes)}")
    return t


def rows_table(rows: Sequence[BaseModel], columns: Sequence[tuple[str, str]], title: str | None = None):
    """A rich table of result rows; `columns` are (field, header) pairs. Ints that end in
    `_bytes` are shown exactly and in GiB."""
    from rich.table import Table

    t = Table(title=title, title_justify="left")
    for _, header in columns:
        t.add_column(header, justify="right")
    for r in rows:
        d = r.model_dump()
        cells = []
        for field, _ in columns:
            v = d.get(field)
            if isinstance(v, int) and field.endswith("_bytes"):
                cells.append(f"{v:,} B ({gib(v)})")
            elif isinstance(v, float):
                cells.append(f"{v:g}")
            elif isinstance(v, int) and not isinstance(v, bool):
                cells.append(f"{v:,}")
            else:
                cells.append(str(v))
        t.add_row(*cells)
    return t
