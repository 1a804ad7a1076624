"""Commands `check` (deployment files against their GPUs and targets) and `schema` (the JSON
Schema of the config files). The arithmetic is in `kvcalc.calc`; the tables in `kvcalc.report`.
"""

from __future__ import annotations

from typing import Annotated

import typer

from kvcalc.cli.options import lower_choice
from kvcalc.cli.output import _err_console, echo, handle_errors, message_lines
from kvcalc.errors import KvcalcError


@handle_errors
def check(
    paths: Annotated[list[str], typer.Argument(help="Deployment YAML files or folders of them.")],
    fmt: Annotated[
        str, typer.Option("--format", "-f", callback=lower_choice, help="table, markdown (for a PR comment) or json.")
    ] = "table",
) -> None:
    """Check deployment files: exit 0 when all fit and meet their targets, 1 when any does not,
    2 when a file is invalid."""
    from kvcalc.load.deployments import check_paths, exit_code

    if fmt not in ("table", "markdown", "json"):
        raise KvcalcError(f"--format: unknown format '{fmt}'; use table, markdown or json")
    rows, errors = check_paths(paths)
    code = exit_code(rows, errors)
    if fmt == "json":
        import json

        echo(
            json.dumps(
                {
                    "ok": code == 0,
                    "exit_code": code,
                    "deployments": [r.model_dump(mode="json") for r in rows],
                    "errors": errors,
                },
                indent=2,
            )
        )
    elif fmt == "markdown":
        from kvcalc.report.tables import check_markdown

        echo(check_markdown(rows, errors))
    else:
        if rows:
            from kvcalc.report.tables import check_table

            echo(check_table(rows))
    if errors:  # on stderr in every format (json too: a pipeline's log shows why it failed)
        con = _err_console()
        for e in errors:
            from rich.markup import escape

            for line in message_lines(e):  # control characters from the files written visibly (issue 12 item 9)
                con.print(f"[red]error:[/red] {escape(line)}", markup=True)
    raise typer.Exit(code)


@handle_errors
def schema(
    which: Annotated[str, typer.Argument(callback=lower_choice, help="all, model, deployment or gpu.")] = "all",
) -> None:
    """Print the JSON Schema of the model, deployment and GPU configs (for editor validation)."""
    import json

    from pydantic import BaseModel

    from kvcalc.load.deployments import Deployment
    from kvcalc.schema import GpuSpec, ModelSpec

    schemas: dict[str, type[BaseModel]] = {"model": ModelSpec, "deployment": Deployment, "gpu": GpuSpec}
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
