"""The typer app: parse -> load -> compute -> report. Thin by design.

Each command lives in its own module under `kvcalc/cli/` and is registered here; command modules
import `options` and `output`, never this module, so there is no import cycle. Every user error
is a `KvcalcError`; `output.handle_errors` catches it once per command, prints one red line per
problem and exits 2 (`--debug` shows the traceback instead). torch is never imported here.
"""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer
from typer.core import TyperGroup

from kvcalc.cli import capacity, check, compare, estimate, gpus, import_, measure, models, plan, sweep
from kvcalc.cli.output import _STATE, OneLineUsageErrors


class KvcalcGroup(OneLineUsageErrors, TyperGroup):
    """The app's click group: typer's, with usage errors printed as one line plus the hint."""


def _version(value: bool) -> None:
    """--version: print `kvcalc <version>` (`kvcalc.__version__`) and exit 0."""
    if value:
        from kvcalc import __version__

        typer.echo(f"kvcalc {__version__}")
        raise typer.Exit()


app = typer.Typer(
    cls=KvcalcGroup,
    name="kvcalc",
    help="Exact KV-cache memory and roofline decode throughput for real LLM architectures.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # help text prints as written: "kvcalc[plot]" is not markup
)

def _root(debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks.")] = False,
          version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                help="Print the version and exit.")] = False) -> None:
    """Exact KV-cache memory and roofline decode throughput for real LLM architectures."""
    _STATE["debug"] = debug or bool(os.environ.get("KVCALC_DEBUG"))


app.callback()(_root)
# registration order is the order of `kvcalc --help`
app.command()(estimate.estimate)
app.command()(models.models)
app.command()(compare.compare)
app.command("import")(import_.import_)
app.command()(measure.measure)
app.command()(gpus.gpus)
app.command()(sweep.sweep)
app.command()(check.check)
app.command()(check.schema)
app.command()(capacity.capacity)
app.command()(plan.plan)


def main() -> None:
    """Console entry point; `--debug` anywhere on the line turns on tracebacks."""
    if "--debug" in sys.argv[1:]:
        sys.argv.remove("--debug")
        os.environ["KVCALC_DEBUG"] = "1"
    app()
