"""The command line: `app.py` (the typer app and `main`), `options.py` (shared flag sets),
`output.py` (one error handler, exit codes, printing), and one module per command."""

from kvcalc.cli.app import app, main

__all__ = ["app", "main"]
