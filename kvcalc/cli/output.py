"""What every command shares on the way out: one error handler (`handle_errors`: one red line per
problem, exit 2 for the user's errors, 1 for a bug, `--debug` for the traceback), warnings as
yellow lines, `echo` / `emit` for tables and machine formats, the one file writer
(`check_target` / `write_atomic`: no overwrite without --force, no folder, no link, atomic), and
click's usage errors as one line (`OneLineUsageErrors`, mixed into the app's group).
Every line printed here has its terminal control characters written visibly (`message_lines`,
`echo`: `kvcalc.text.escape_controls`).
"""

from __future__ import annotations

import functools
import os
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, NoReturn, ParamSpec, TypeVar

import typer

from kvcalc.errors import KvcalcError

if TYPE_CHECKING:
    from pydantic import BaseModel
    from rich.console import Console, RenderableType
    from typer._click.core import Command, Context  # click as typer 0.29 ships it
    from typer._click.exceptions import UsageError

    from kvcalc.json_types import JsonValue
    from kvcalc.report import Dumpable
    from kvcalc.results import EngineResult

_P = ParamSpec("_P")
_R = TypeVar("_R")

#: "debug": --debug or KVCALC_DEBUG; "collector_paused": `app.main` paused the cyclic garbage
#: collector for start-up (`resume_collector`)
_STATE = {"debug": bool(os.environ.get("KVCALC_DEBUG")), "collector_paused": False}

_CONSOLE: list[type[Console]] = []


def console(**kwargs: Any) -> Console:  # Any: rich `Console`'s keyword arguments, forwarded
    """A rich `Console(**kwargs)` whose closed pipe raises `BrokenPipeError`, which ends the run
    as every other one does (`ClosedPipeExits`: exit `CLOSED_PIPE_EXIT`); rich's own
    `Console.on_broken_pipe` would exit 1.
    The class is built on first use: importing rich costs start-up time a command may not need."""
    if not _CONSOLE:
        from rich.console import Console

        class PipeConsole(Console):
            def on_broken_pipe(self) -> None:
                self.quiet = True
                raise BrokenPipeError(32, "Broken pipe")  # to `ClosedPipeExits`, or an error line's caller

        _CONSOLE.append(PipeConsole)
    return _CONSOLE[0](**kwargs)


def _err_console():
    return console(stderr=True, highlight=False, soft_wrap=True)


def fail(message: str, code: int = 2) -> NoReturn:
    """Print each line of `message` in red on stderr and exit with `code`."""
    from rich.markup import escape

    con = _err_console()
    try:
        for line in message_lines(message):
            con.print(f"[red]error:[/red] {escape(line)}", markup=True)  # escape: "kvcalc[measure]" is not markup
    except BrokenPipeError:  # the reader of stderr has gone: the error's own exit code still stands
        silence_output()
    raise typer.Exit(code)


#: the most characters of one error or warning line, and the most lines of one message: a
#: safety net behind the excerpts each message takes of a user's values (`kvcalc.text.excerpt`)
MESSAGE_LINE_CHARS = 2000
MESSAGE_LINES = 50


def message_lines(message: object) -> list[str]:
    """A message as the lines kvcalc prints: split at newlines only (not at the other characters
    `str.splitlines` breaks on), every terminal control character written visibly (`\\x1b`:
    `kvcalc.text.escape_controls`), so a name from a user's file cannot drive the terminal; each
    line cut to `MESSAGE_LINE_CHARS` characters, and past `MESSAGE_LINES` lines one "and N more
    lines" line."""
    from kvcalc.text import cut, escape_controls

    lines = str(message).replace("\r\n", "\n").split("\n")
    out = [
        cut(escape_controls(line[: MESSAGE_LINE_CHARS * 8], keep="\t"), MESSAGE_LINE_CHARS)
        for line in lines[:MESSAGE_LINES]
    ]
    if len(lines) > MESSAGE_LINES:
        out.append(f"and {len(lines) - MESSAGE_LINES:,} more lines")
    return out


def _run_warned(fn: Callable[_P, _R], *args: _P.args, **kwargs: _P.kwargs) -> _R:
    """Call fn; print each `KvcalcWarning` it raised as one yellow `warning:` line on stderr
    (before any error line); other warnings are shown as Python would."""
    import warnings

    from kvcalc.errors import KvcalcWarning

    caught: list[warnings.WarningMessage] = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", KvcalcWarning)
            return fn(*args, **kwargs)
    finally:
        for w in caught:
            if issubclass(w.category, KvcalcWarning):
                from rich.markup import escape

                for line in message_lines(w.message):
                    _err_console().print(f"[yellow]warning:[/yellow] {escape(line)}", markup=True)
            else:
                warnings.showwarning(w.message, w.category, w.filename, w.lineno)


def resume_collector() -> None:
    """Turn the cyclic garbage collector back on when `app.main` paused it for start-up (and
    only then), after `gc.freeze()`: what start-up made (modules, classes, the parsed command)
    lives until exit, so no collection needs to walk it again. Called when a command starts
    (`handle_errors`) and when `main` ends; the second call does nothing."""
    if _STATE["collector_paused"]:
        import gc

        _STATE["collector_paused"] = False
        gc.freeze()
        gc.enable()


def handle_errors(fn: Callable[_P, _R | None]) -> Callable[_P, _R | None]:
    """Run a command; turn `KvcalcError` into one red line per problem and exit 2, and any
    other exception into one line and exit 1, unless --debug is set."""

    @functools.wraps(fn)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R | None:
        resume_collector()  # paused for start-up only (`app.main`)
        try:
            return _run_warned(fn, *args, **kwargs)
        except (typer.Exit, typer.Abort, KeyboardInterrupt, BrokenPipeError):
            raise  # a closed pipe is no error of the command: `ClosedPipeExits` ends the run
        except KvcalcError as e:
            if _STATE["debug"]:
                raise
            fail(str(e), 2)
        except Exception as e:  # a bug, not the user's fault: still one line
            if _STATE["debug"]:
                raise
            fail(f"internal error: {e.__class__.__name__}: {e} (rerun with --debug for the traceback)", 1)

    return wrapper


def echo(obj: RenderableType) -> None:
    """Print a rich renderable, or plain text as is (machine formats must not be wrapped)."""
    if isinstance(obj, str):
        from kvcalc.text import escape_controls

        typer.echo(escape_controls(obj))  # machine formats hold none (JSON and YAML escape them); text may
    else:
        # markup off: names and sources come from user files ("[red]x" must print as typed);
        # tables style their cells with rich Text, never markup.
        console(highlight=False, markup=False).print(obj)


def check_format(fmt: str) -> None:
    """Raise KvcalcError for an unknown --format."""
    from kvcalc import report

    if fmt not in report.OUTPUT_FORMATS:
        raise KvcalcError(f"--format: unknown format '{fmt}'; use one of {', '.join(report.OUTPUT_FORMATS)}")


def emit(result: Dumpable, fmt: str, table: Callable[[], RenderableType | None]) -> None:
    """Print `result` as `fmt`; `table` builds the rich table lazily."""
    from kvcalc import report

    check_format(fmt)
    shown = table() if fmt == "table" else report.machine(result, fmt)
    if shown is not None:
        echo(shown)


def emit_parts(parts: list[tuple[BaseModel, Callable[[], RenderableType | None]]], fmt: str) -> None:
    """Print several results as one: machine formats merge their keys into one object (the
    first part's keys first); the table format prints each part's table in turn."""
    from kvcalc import report

    check_format(fmt)
    if fmt == "table":
        for _, table in parts:
            shown = table()
            if shown is not None:
                echo(shown)
        return
    merged: dict[str, JsonValue] = {}
    for result, _ in parts:
        merged.update(result.model_dump(mode="json"))
    echo(report.machine(merged, fmt))


def show_result(res: EngineResult, title: str) -> str:
    """Print the table, then the engine's log lines as plain text (never wrapped or cropped, so
    they diff against the engine's log); returns '' for callers that echo a result."""
    from kvcalc.report.tables import result_table

    echo(result_table(res, title))
    if res.log_lines and res.engine != "ideal":  # the exact formula is no engine: nothing to diff
        echo(f"{res.engine} would log:")
        for line in res.log_lines:
            echo(line)  # control characters escaped (a model name from a file)
    return ""


_KINDS = {
    stat.S_IFIFO: "a FIFO (named pipe)",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
}


def check_target(path: str | Path, option: str, *, force: bool = False) -> Path:
    """The file a writer (`-o`, `--plot`, `--write-deployment`) will write, checked before any
    work, by the rules of README's "Guarantees": a name that ends in `/` or names a folder is
    refused; a symbolic link is refused, with or without `--force` (kvcalc neither writes through
    a link nor replaces one: give the path of the file itself); anything but a regular file (a
    FIFO, a device) is refused; an existing file is refused unless `force`; the folder must exist.

    `path` is what the user typed (a str keeps a trailing `/`, which `Path` drops). Raises
    `KvcalcError` naming `option` and the path; returns the path as a `Path`.
    """
    raw = str(path)

    def refuse(message: str) -> KvcalcError:
        return KvcalcError(message, option=option, value=raw)

    if not raw:
        raise refuse("give a file name")
    if raw.endswith(("/", os.sep)) or (os.altsep and raw.endswith(os.altsep)):
        raise refuse("names a folder (it ends in /); give a file name")
    from kvcalc.load.models import user_path

    p = user_path(raw)  # `~/x.yaml` as a shell would expand it (when that home exists)
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise refuse(f"cannot write: {e.strerror}") from None
    if st is not None:
        if stat.S_ISLNK(st.st_mode):
            raise refuse(
                "is a symbolic link; kvcalc neither writes through a link nor replaces one "
                "(give the path of the file itself)"
            )
        if stat.S_ISDIR(st.st_mode):
            raise refuse("is a folder; give a file name")
        if not stat.S_ISREG(st.st_mode):
            raise refuse(
                f"is {_KINDS.get(stat.S_IFMT(st.st_mode), 'not a regular file')}; kvcalc writes only regular files"
            )
        if not force:
            raise refuse("the file exists; add --force to overwrite it")
    folder = p.parent
    if not folder.is_dir():
        raise refuse(f"folder {folder} does not exist")
    return p


def write_atomic(path: str | Path, data: str | bytes, *, option: str = "-o", force: bool = False) -> Path:
    """Write `data` (text as UTF-8, or bytes) to `path`, after `check_target`'s checks (again:
    the file may have appeared since), through a temporary file in the same folder: written,
    flushed and fsync'd, then moved into place in one step, so an interrupted run leaves either
    the old file whole or no file, and never a temporary file. Without `force` the move is a hard
    link, which fails if a file appeared meanwhile (no overwrite even then; `os.replace` where
    the file system has no hard links); with `force`, `os.replace` (atomic on POSIX and Windows).
    A new file gets the usual permissions (0o666 less the umask), a replaced one keeps its own.

    Raises `KvcalcError` naming `option` when the target is refused, the folder is missing or
    not writable, or the write fails (a full disk). Returns the path written.
    """
    import tempfile  # here, not at import: only a writer needs it

    p = check_target(path, option, force=force)
    raw = str(path)
    blob = data.encode("utf-8") if isinstance(data, str) else data
    try:
        old_mode = stat.S_IMODE(os.stat(p).st_mode) if force and p.exists() else None
    except OSError:
        old_mode = None
    if old_mode is None:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    else:
        mode = old_mode
    folder = p.parent
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=folder)
    except OSError as e:
        raise KvcalcError(f"cannot write in {folder}: {e.strerror}", option=option, value=raw) from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(blob)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        if force:
            os.replace(tmp, p)
        else:
            try:
                os.link(tmp, p)  # fails when the name exists: never an overwrite
            except FileExistsError:
                raise KvcalcError("the file exists; add --force to overwrite it", option=option, value=raw) from None
            except OSError:  # no hard links on this file system (FAT, some network mounts)
                check_target(path, option, force=False)
                os.replace(tmp, p)
            else:
                os.unlink(tmp)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise KvcalcError(f"cannot write: {e.strerror}", option=option, value=raw) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return p


# ----- a reader that leaves early (`kvcalc plan ... | head -1`) ------------------------------

#: the exit status when the reader of kvcalc's output closes the pipe before kvcalc is done
#: (`kvcalc plan ... | head -1`): 141 = 128 + SIGPIPE, the status a shell reports for `cat`,
#: `grep` or `yes` stopped the same way, so `set -o pipefail` scripts see kvcalc as they see them
#: (and a `kvcalc check` whose table was cut off never reads as a pass). kvcalc writes no line
#: about it: the reader left on purpose.
CLOSED_PIPE_EXIT = 128 + 13


def reader_gone() -> NoReturn:
    """End the run quietly because the reader of stdout (or stderr) closed the pipe:
    `silence_output`, then `SystemExit(CLOSED_PIPE_EXIT)`. kvcalc writes to no other pipe (the
    Hub client reports a broken connection as its own error), so a `BrokenPipeError` is always
    its output's reader gone. An error line that meets a closed pipe keeps its own exit code
    (`fail`, the usage errors' `show`)."""
    silence_output()
    raise SystemExit(CLOSED_PIPE_EXIT)


def silence_output() -> None:
    """Point stdout and stderr at the null device, so that Python's last flush at exit writes
    nowhere instead of printing "Exception ignored ... BrokenPipeError" (the recipe of Python's
    `signal` documentation, "Note on SIGPIPE"). Streams without a file descriptor (a test
    runner's) are left as they are."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
    except OSError:
        devnull = None
    for stream in (sys.stdout, sys.stderr):
        try:
            fd = stream.fileno()
        except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation is an OSError
            continue
        if devnull is not None:
            os.dup2(devnull, fd)


def flush_or_leave() -> None:
    """Flush stdout and stderr; when the reader has gone, `reader_gone`."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BrokenPipeError:
            reader_gone()
        except (AttributeError, OSError, ValueError):  # closed or not a stream: nothing to flush
            pass


class ClosedPipeExits:
    """Mixin for the app's click group (before `typer.core.TyperGroup` in the bases): a
    `BrokenPipeError` anywhere in a run (a command's table, `--help`, a warning on a closed
    stderr) ends it through `reader_gone` (exit `CLOSED_PIPE_EXIT`, no message) before click's
    own handler would exit 1. The group's `make_context` (parsing, `--help`, `--version`) and
    `invoke` (the command) are the two calls of a run; `app.main` flushes at the end."""

    def make_context(self, *args: Any, **kwargs: Any) -> Context:  # Any: click's arguments, forwarded
        try:
            return super().make_context(*args, **kwargs)  # type: ignore[misc]
        except BrokenPipeError:
            reader_gone()

    def invoke(self, ctx: Context) -> object:
        try:
            return super().invoke(ctx)  # type: ignore[misc]
        except BrokenPipeError:
            reader_gone()


# ----- click's usage errors as one line -----------------------------------------------------


def usage_error_lines(err: UsageError, command_path: str | None = None) -> list[str]:
    """A click `UsageError` as kvcalc prints it: one line, the problem (first letter lower
    case and no closing full stop, as kvcalc's own errors; a bad value names the option by its
    first name, not every alias), as every other kvcalc error is one line (issue 23 item 7);
    click's own `show` prints the usage line, click's "Try '... --help'" hint and the problem.
    `command_path` is kept for callers; the line names no command. `command_path` stands
    in for the error's context when click raised it without one."""
    param = getattr(err, "param", None)
    if param is not None and getattr(param, "opts", None) and getattr(err, "param_hint", None) is None:
        setattr(err, "param_hint", f"'{param.opts[0]}'")  # noqa: B010 (a BadParameter's)
    message = " ".join(err.format_message().split())
    opt = getattr(err, "option_name", None)  # click's NoSuchOption
    ctx: Context | None = getattr(err, "ctx", None)  # click's Context (typer's own copy of click), or None
    if type(err).__name__ == "NoSuchOption" and opt is not None:
        typed = _typed_cluster(opt, ctx)
        hint = None if typed else count_option_hint(opt, ctx)
        if typed and ctx is not None:  # `sweep -ctk`: click names the -c it read first, the user typed -ctk
            message = f"no such option: {typed}"
            kv = _option_of(getattr(ctx, "command", None), ("kv_dtype", "kv_dtypes"))
            if typed in ("-ctk", "-ctv") and kv:
                message += (
                    f"; `kvcalc {ctx.info_name}` sets K and V together with {kv} "
                    "(-ctk / -ctv are on estimate and capacity)"
                )
        elif hint:  # in place of click's "(Possible options: --batch-size, ...)"
            message = f"no such option: {opt}; {hint}"
    grouped = _grouped_int(param, ctx) if "integer" in message.lower() else None
    if grouped is not None:
        return [grouped]
    return [(message[:1].lower() + message[1:]).rstrip(".")]


def _grouped_int(param: object, ctx: Context | None) -> str | None:
    """(Called for an error about a whole number.) The line for a whole-number option typed with digit grouping (`--concurrency 8,192`),
    worded as `--seq-len 8,192` is (`units.parse_counts`): the value with the commas left out.
    None when the error is about anything else. The value is read back from the command's
    arguments (`ctx.meta`, kept by `LazyGroupCommand.parse_args`)."""
    import re

    opts = getattr(param, "opts", None)
    if not opts or ctx is None:
        return None
    args = list(getattr(ctx, "meta", {}).get("kvcalc.args", ()))
    for i, token in enumerate(args):
        value = None
        if token in opts and i + 1 < len(args):
            value = args[i + 1]
        elif "=" in token and token.split("=", 1)[0] in opts:
            value = token.split("=", 1)[1]
        if value is not None and re.fullmatch(r"[0-9]{1,3}(,[0-9]{3})+", value.strip()):
            return f"{opts[0]}: '{value}' has digit grouping; write the whole number without commas ({value.replace(',', '')})"
    return None


def _typed_cluster(opt: str, ctx: Context | None) -> str | None:
    """The word the user typed when click reports only its first letter as the unknown short
    option (`-ctk` on a command without it: click reads `-c`, then `t`, `k`), from the command's
    arguments (`LazyGroupCommand.parse_args` keeps them in `ctx.meta`); None otherwise."""
    args = getattr(ctx, "meta", {}).get("kvcalc.args", ()) if ctx is not None else ()
    if len(opt) != 2 or opt.startswith("--"):
        return None
    for token in args:
        if token == "--":
            break
        if token.startswith(opt) and len(token) > 2 and token[2:].isalpha() and "=" not in token:
            return token
    return None


#: the parameters that hold the number of sequences and the tokens per sequence, on the
#: commands that have them (`--batch` on estimate, compare, measure, sweep; `--concurrency` on
#: plan and capacity; `--seq-len` everywhere but capacity, where it is `max_model_len`)
SEQUENCES_PARAMS = ("batch", "concurrency")
CONTEXT_PARAMS = ("seq_len", "max_model_len")
#: where a command without these options takes them from: (the context, the sequences)
NO_COUNT_OPTIONS = {"check": ("a deployment file's max_seq_len: field", "a deployment file's concurrency: field")}
#: llama.cpp's long names that other commands answer as they answer its -b and -c, and the
#: llama.cpp field each sets
LLAMACPP_LONG_OPTIONS = {"--batch-size": ("-b", "n_batch"), "--ctx-size": ("-c", "n_ctx")}


def _option_of(command: Command | None, names: tuple[str, ...]) -> str | None:
    """How `command` (a click command) spells the first of the parameters `names` it has: its
    first long name, with its short one in brackets (`--seq-len (-s)`); None when it has none."""
    for p in getattr(command, "params", ()):
        if p.name in names:
            opts = list(getattr(p, "opts", ()))
            long = next((o for o in opts if o.startswith("--")), opts[0])
            short = next((o for o in opts if len(o) == 2 and o != long), None)
            return f"{long} ({short})" if short else long
    return None


def count_option_hint(opt: str, ctx: Context | None) -> str | None:
    """The hint for an option the running command lacks where the user surely meant the number
    of sequences or a context length: llama.cpp's `-b` / `-c` (`options.LLAMACPP_SHORT_OPTIONS`)
    and their long names anywhere but `capacity`, `--batch` where the count is `--concurrency`
    (plan, capacity) and `--concurrency` where it is `--batch`. The hint names the option THIS
    command has (read from `ctx.command`'s parameters), or says it has none and where the value
    comes from (`NO_COUNT_OPTIONS`). None for any other option: click's own message stays."""
    from kvcalc.cli.options import LLAMACPP_SHORT_OPTIONS

    command: Command | None = getattr(ctx, "command", None)
    group = command is None or hasattr(command, "commands")  # the app itself: no command yet
    name = "kvcalc" if command is None or ctx is None or group else str(ctx.info_name or command.name)
    seqs = None if group else _option_of(command, SEQUENCES_PARAMS)
    context = None if group else _option_of(command, CONTEXT_PARAMS)
    context_from, seqs_from = NO_COUNT_OPTIONS.get(name, (None, None))
    seqs_words = (
        f"the number of sequences is {seqs}"
        if seqs
        else f"`kvcalc {name}` takes no number of sequences" + (f" ({seqs_from})" if seqs_from else "")
    )
    if opt in LLAMACPP_SHORT_OPTIONS or opt in LLAMACPP_LONG_OPTIONS:
        if opt in LLAMACPP_SHORT_OPTIONS:
            short, said = opt, f"{opt} is {LLAMACPP_SHORT_OPTIONS[opt]}"
        else:
            short, field = LLAMACPP_LONG_OPTIONS[opt]
            said = f"{opt} is llama.cpp's {field} (`kvcalc capacity --engine llamacpp {opt}`)"
        if group:
            return f"{said}; options follow the command (`kvcalc estimate MODEL --seq-len 32k --batch 8`)"
        if short == "-c":  # n_ctx: meant as a context length, or taken for a count (`plan -c 64`)
            if context:
                return f"{said}; a context length is {context}, " + seqs_words.replace(" is ", " ", 1)
            return f"{said}; `kvcalc {name}` takes no context length" + (f" ({context_from})" if context_from else "")
        return f"{said}; {seqs_words}"
    if opt in ("--batch", "--concurrency") and not group:
        if not seqs:
            return seqs_words
        n_batch = _option_of(command, ("batch_size",))  # capacity: llama.cpp's -b is no count of sequences
        return f"{seqs_words} on `kvcalc {name}`" + (f"; its {n_batch} is llama.cpp's n_batch" if n_batch else "")
    return None


def contradicting_options(command: Command, args: list[str]) -> str | None:
    """What is wrong when the command line `args` (a command's own arguments) gives a flag and
    its negation (`-kvu -no-kvu`, `--async-scheduling --no-async-scheduling`), else None. click
    keeps the last one silently; kvcalc refuses, as it refuses `-fa off --flash-attn`, since
    either may be the one meant. The scan follows click's parser: the token after an option that
    takes a value is that value (`--model-name -no-kvu` sets a name), `--opt=value` and `-s8k`
    carry their own, and nothing after `--` is an option. (An option given two values keeps
    click's rule, the last one wins: a pasted launch line may be followed by an override.)"""
    pairs: dict[str, tuple[str, bool]] = {}  # token -> (parameter, on / off), for flag pairs
    takes_value: set[str] = set()  # the names of options that take a value
    for p in getattr(command, "params", ()):
        if getattr(p, "param_type_name", "") != "option":
            continue
        if getattr(p, "is_flag", False) or getattr(p, "count", False):
            if getattr(p, "secondary_opts", None):
                pairs |= {o: (p.name, True) for o in p.opts} | {o: (p.name, False) for o in p.secondary_opts}
            continue
        takes_value |= set(p.opts)
    seen: dict[str, str] = {}  # parameter -> the first token that set it, for each state
    i = 0
    while i < len(args):
        token = args[i]
        i += 1
        if token == "--":
            break
        if token in pairs:
            param, state = pairs[token]
            other = seen.get(f"{param}:{not state}")
            if other is not None:
                return f"{other} and {token} disagree; give one of them"
            seen.setdefault(f"{param}:{state}", token)
        elif token in takes_value:
            i += 1  # its value, whatever it looks like (`--opt=value`, `-s8k`: one token, no match above)
    return None


def _one_line(err: UsageError, command_path: str | None = None) -> UsageError:
    """`err` (a click `UsageError`) with a `show` that prints `usage_error_lines`: the problem in
    red after `error:` on stderr, then the hint. click's `NoArgsIsHelpError` (`kvcalc` with no
    command prints the help) is left as it is."""
    if type(err).__name__ == "NoArgsIsHelpError" or getattr(err, "_kvcalc_one_line", False):
        return err

    def show(file: IO[str] | None = None) -> None:
        from rich.markup import escape

        con = _err_console()
        try:
            for line in usage_error_lines(err, command_path):
                con.print(f"[red]error:[/red] {escape(line)}", markup=True)
        except BrokenPipeError:  # the reader of stderr has gone: click still exits 2
            silence_output()

    setattr(err, "show", show)  # noqa: B010 (mypy: no assigning to a method)
    setattr(err, "_kvcalc_one_line", True)  # noqa: B010
    return err


class OneLineUsageErrors:
    """Mixin for the app's click group (before `typer.core.TyperGroup` in the bases): a usage
    error (unknown option, missing argument, a bad int) prints as one `error:` line naming the
    help to read, with click's exit code 2, wherever click raises it: the group's own options or a
    command's (`make_context` and `invoke` both re-raise it with `_one_line`'s `show`)."""

    def make_context(self, *args: Any, **kwargs: Any) -> Context:  # Any: click's arguments, forwarded
        try:
            return super().make_context(*args, **kwargs)  # type: ignore[misc]
        except _UsageError as e:
            raise _one_line(e, getattr(self, "name", None)) from None

    def invoke(self, ctx: Context) -> object:
        try:
            return super().invoke(ctx)  # type: ignore[misc]
        except _UsageError as e:
            sub = ctx.invoked_subcommand  # set by click before it parses the command's options
            raise _one_line(e, f"{ctx.command_path} {sub}" if sub else ctx.command_path) from None


#: click's UsageError as typer uses it (typer 0.29 ships its own copy of click: `import click`
#: would name another class); found from typer's public `BadParameter`, one of its subclasses.
_UsageError: type[UsageError] = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError")
