"""The typer app: parse -> load -> compute -> report. Thin by design.

Each command lives in its own module under `kvcalc/cli/` and is named here, in `COMMANDS`, with
its one-line help: a command's module is imported only when that command runs or its help is
asked for (`kvcalc.cli.lazy`), so `kvcalc estimate` loads nothing of `measure`, `check` or the
engines. Command modules import `options` and `output`, never this module, so there is no
import cycle. Every user error
is a `KvcalcError`; `output.handle_errors` catches it once per command, prints one red line per
problem and exits 2 (`--debug` shows the traceback instead). torch is never imported here.

No `from __future__ import annotations`: typer reads `_root`'s and `_version`'s annotations as
objects, without compiling and evaluating their text at every start-up.
"""

import os
import sys
from typing import Annotated

import typer

from kvcalc.cli.lazy import LazyCommand, LazyGroup
from kvcalc.cli.output import _STATE, ClosedPipeExits, OneLineUsageErrors

#: every command, in the order of `kvcalc --help`: name, "module:function", the first paragraph
#: of the function's docstring (a test checks it against the docstring).
COMMANDS = (
    LazyCommand(
        "estimate",
        "kvcalc.cli.estimate:estimate",
        "Exact KV-cache bytes for MODEL at a context length, batch, KV dtype and TP/PP layout; with "
        "--gpu, also weights, the memory plan, whether it fits, and roofline TPOT / TTFT.",
    ),
    LazyCommand("models", "kvcalc.cli.models:models", "List the bundled model configs."),
    LazyCommand(
        "compare",
        "kvcalc.cli.compare:compare",
        "MODEL as MHA, as its own GQA, and as MQA, side by side, with each one's saving against MHA.",
    ),
    LazyCommand(
        "import",
        "kvcalc.cli.import_:import_",
        "Convert a Hugging Face config.json into a kvcalc model YAML (stdout, or -o FILE).",
    ),
    LazyCommand(
        "measure",
        "kvcalc.cli.measure:measure",
        "Allocate MODEL's real KV cache with PyTorch, time decode steps, and print predicted against measured.",
    ),
    LazyCommand(
        "gpus",
        "kvcalc.cli.gpus:gpus",
        "List the bundled GPUs: memory as the device reports it, HBM bandwidth, dense FLOP/s.",
    ),
    LazyCommand(
        "sweep",
        "kvcalc.cli.sweep:sweep",
        "Memory, fit, TPOT and tokens/s over a grid of context lengths and batch sizes.",
    ),
    LazyCommand(
        "check",
        "kvcalc.cli.check:check",
        "Check deployment files: exit 0 when all fit and meet their targets, 1 when any does not, "
        "2 when a file is invalid.",
    ),
    LazyCommand(
        "schema",
        "kvcalc.cli.check:schema",
        "Print the JSON Schema of the model, deployment and GPU configs (for editor validation).",
    ),
    LazyCommand(
        "capacity",
        "kvcalc.cli.capacity:capacity",
        "What ENGINE makes of a KV memory budget: tokens, blocks, concurrency, and its own log lines.",
    ),
    LazyCommand(
        "plan",
        "kvcalc.cli.plan:plan",
        "The GPUs, layout and engine command that serve CONCURRENCY sequences of SEQ_LEN tokens within "
        "the targets: fewest GPUs first, then the lowest cost (--prices), then the most tokens/s.",
    ),
    LazyCommand(
        "transfer",
        "kvcalc.cli.transfer:transfer",
        "The KV bytes one request moves from prefill to decode ranks, per rank pair, over a link; the "
        "prefill:decode GPU ratio.",
    ),
)


class KvcalcGroup(ClosedPipeExits, OneLineUsageErrors, LazyGroup):
    """The app's click group: commands load when they run (`COMMANDS`), usage errors print
    as one line plus the hint, and a reader that closes the pipe ends the run quietly
    (`output.ClosedPipeExits`)."""

    table = COMMANDS


def _version(value: bool) -> None:
    """--version: print `kvcalc <version>` (`kvcalc.__version__`) and exit 0."""
    if value:
        from kvcalc import __version__

        typer.echo(f"kvcalc {__version__}")
        raise typer.Exit()


app = typer.Typer(
    name="kvcalc",
    help="Exact KV-cache memory and roofline decode throughput for real LLM architectures.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # help text prints as written: "kvcalc[plot]" is not markup
    cls=KvcalcGroup,  # commands load when they run (COMMANDS); one-line usage errors
)


def _root(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks.")] = False,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """Exact KV-cache memory and roofline decode throughput for real LLM architectures."""
    _STATE["debug"] = debug or bool(os.environ.get("KVCALC_DEBUG"))


app.callback()(_root)


#: the exit status of a command stopped by Ctrl-C (128 + SIGINT, as a shell reports it)
INTERRUPTED_EXIT = 130


def _interrupted(signum: int, frame: object) -> None:
    """SIGINT (Ctrl-C) in any command: one line on stderr, then exit 130 through `SystemExit`,
    which `finally` blocks see (a half-written file's temporary copy is removed) but no
    `except Exception` swallows, and which click does not turn into "Aborted!" and exit 1.
    (`kvcalc measure` installs its own handler while torch runs: it exits at once.)"""
    sys.stderr.write("\nerror: interrupted (Ctrl-C)\n")
    raise SystemExit(INTERRUPTED_EXIT)


def main(collector_paused: bool = False) -> None:
    """Console entry point; `--debug` anywhere on the line turns on tracebacks; Ctrl-C exits 130;
    a reader that closes the pipe early (`kvcalc plan ... | head -1`) ends the run with no
    message and exit 141 (`output.CLOSED_PIPE_EXIT`), whichever command or `--help` was writing,
    and also when only the last flush of the output finds the pipe closed.

    Start-up: Python's cyclic garbage collector is paused while the command line is parsed and
    the command built (`python -m kvcalc` pauses it before the imports, and says so with
    `collector_paused`), and resumes when the command runs (`output.resume_collector`), with
    what start-up made frozen: those objects live until exit, and each collection on the way
    (dozens, at every start-up) walked them all. A collector the caller turned off stays off."""
    import gc
    import signal

    from kvcalc.cli.output import _STATE, flush_or_leave, resume_collector

    if not collector_paused and gc.isenabled():
        gc.disable()
        collector_paused = True
    _STATE["collector_paused"] = collector_paused
    signal.signal(signal.SIGINT, _interrupted)
    if "--debug" in sys.argv[1:]:
        sys.argv.remove("--debug")
        os.environ["KVCALC_DEBUG"] = "1"
    try:
        app()
    finally:  # app() ends in SystemExit; output still buffered is written here, not at interpreter exit
        resume_collector()  # --help, a usage error: no command ran
        flush_or_leave()
