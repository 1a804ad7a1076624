"""Commands `check` (deployment files against their GPUs and targets) and `schema` (the JSON
Schema of the config files).

Thin: parse -> `deploy.check_paths` -> tables; the arithmetic is in `kvcalc.deploy` and
`kvcalc.plan`.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from kvcalc.cli import app, echo, handle_errors
from kvcalc.errors import KvcalcError


@app.command()
@handle_errors
def check(
    paths: Annotated[list[str], typer.Argument(help="Deployment YAML files or folders of them.")],
    fmt: Annotated[str, typer.Option("--format", "-f", help="table, markdown (for a PR comment) or json.")] = "table",
) -> None:
    """Check deployment files: exit 0 when all fit and meet their targets, 1 when any does not,
    2 when a file is invalid."""
    from kvcalc.deploy import check_paths, exit_code
    from kvcalc.report import markdown_table

    if fmt not in ("table", "markdown", "json"):
        raise KvcalcError(f"--format: unknown format '{fmt}'; use table, markdown or json")
    rows, errors = check_paths(paths)
    code = exit_code(rows, errors)
    if fmt == "json":
        import json

        echo(json.dumps({"ok": code == 0, "exit_code": code,
                         "deployments": [r.model_dump(mode="json") for r in rows], "errors": errors}, indent=2))
    elif fmt == "markdown":
        icon = {"ok": "✅ ok", "does not fit": "❌ does not fit", "misses target": "⚠️ misses target"}
        lines = [markdown_table(
            ["deployment", "model", "GPUs", "KV", "context x concurrency", "memory/GPU GiB", "budget GiB",
             "TPOT ms", "tokens/s", "status", "why"],
            [[r.name, r.model, f"{r.count} x {r.gpu} (tp {r.tp}, pp {r.pp}, dp {r.dp})", r.kv_dtype,
              f"{r.max_seq_len:,} x {r.concurrency}", f"{r.memory_bytes_per_gpu / 2**30:,.2f}",
              f"{r.budget_bytes_per_gpu / 2**30:,.2f}", f"{r.tpot_ms:,.2f}", f"{r.tokens_per_s:,.0f}",
              icon[r.status], "; ".join(r.problems)] for r in rows])]
        lines += [f"\n**invalid:** `{e}`" for e in errors]
        echo("\n".join(lines))
    else:
        if rows:
            echo(_check_table(rows))
    if errors and fmt != "json":
        from kvcalc.cli import _err_console

        con = _err_console()
        for e in errors:
            from rich.markup import escape

            con.print(f"[red]error:[/red] {escape(str(e))}", markup=True)
    raise typer.Exit(code)


def _check_table(rows: list[Any]):
    """The rich table of `kvcalc check`, with each failing deployment's reasons after it."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    t = Table(title="kvcalc check: memory per GPU vs gpu_memory_utilization x memory; decode with "
                    "every sequence at max_seq_len", title_justify="left")
    for c in ("deployment", "GPUs", "tokens x seqs", "GiB/GPU\nused / budget", "max\nseqs",
              "TPOT ms\n(target)", "tokens/s\n(target)", "status"):
        t.add_column(c, justify="left" if c in ("deployment", "GPUs", "status") else "right", overflow="fold",
                     no_wrap=c == "deployment")
    style = {"ok": "green", "does not fit": "red", "misses target": "yellow"}
    notes = []
    for r in rows:
        tgt_tpot = f" (≤{r.max_tpot_ms:g})" if r.max_tpot_ms is not None else ""
        tgt_tok = f" (≥{r.min_tokens_per_s:g})" if r.min_tokens_per_s is not None else ""
        par = f"tp{r.tp}" + (f" pp{r.pp}" if r.pp > 1 else "") + (f" dp{r.dp}" if r.dp > 1 else "")
        t.add_row(r.name, f"{r.count}x {r.gpu} {par}", f"{r.max_seq_len:,} x {r.concurrency}",
                  f"{r.memory_bytes_per_gpu / 2**30:,.1f} / {r.budget_bytes_per_gpu / 2**30:,.1f}",
                  f"{r.max_concurrency:,}", f"{r.tpot_ms:,.1f}{tgt_tpot}", f"{r.tokens_per_s:,.0f}{tgt_tok}",
                  Text(r.status, style=style[r.status]))
        notes += [Text(f"{r.name}: {p}  ({r.file})", style=style[r.status]) for p in r.problems]
    return Group(t, *notes) if notes else t


@app.command()
@handle_errors
def schema(
    which: Annotated[str, typer.Argument(help="all, model, deployment or gpu.")] = "all",
) -> None:
    """Print the JSON Schema of the model, deployment and GPU configs (for editor validation)."""
    import json

    from kvcalc.deploy import Deployment
    from kvcalc.schema import GpuSpec, ModelSpec

    schemas = {"model": ModelSpec, "deployment": Deployment, "gpu": GpuSpec}
    if which == "all":
        from pydantic.json_schema import models_json_schema

        _, out = models_json_schema([(m, "validation") for m in schemas.values()], title="kvcalc configs")
        out["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    elif which in schemas:
        out = schemas[which].model_json_schema()
        out["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    else:
        from kvcalc.errors import UnknownNameError

        raise UnknownNameError("schema", which, ["all", *schemas])
    echo(json.dumps(out, indent=2))
