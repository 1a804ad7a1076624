"""Commands imported only when they run: a typer group whose commands are named in a table
(`LazyCommand`: name, "module:function", one-line help) and built on first use.

`kvcalc estimate ...` imports `kvcalc.cli.estimate` and no other command module; `kvcalc --help`
lists every command with its one-line help from the table, importing none of them; `kvcalc X
--help` imports X only. Commands registered on the typer app the usual way
(`app.command()(fn)`) still work: they are built eagerly, as typer does, and listed after the
table's. A test (`tests/cli/test_lazy_commands.py`) checks that each table entry's help is the
one its function's docstring gives, so the listing never drifts from the commands.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, MutableMapping
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from typer.core import TyperCommand, TyperGroup

if TYPE_CHECKING:  # click as typer ships it (typer 0.29: `typer._click`, as `format_commands` uses)
    from typer._click.core import Command, Context
    from typer._click.formatting import HelpFormatter
    from typer.core import MarkupMode


class LazyCommand(NamedTuple):
    """One command of the table: its `name` on the command line, its `target`
    ("package.module:function", imported on first use) and `help`, the first paragraph of the
    function's docstring (what `kvcalc --help` shows, shortened to fit as click shortens it).
    A NamedTuple, not a frozen dataclass: the table is read on every start-up, and a dataclass
    compiles its methods when declared."""

    name: str
    target: str
    help: str

    def load(self, rich_markup_mode: MarkupMode) -> Command:
        """The click command of `target`, built as typer builds a registered command."""
        from typer.main import get_command_from_info
        from typer.models import CommandInfo

        module, _, attr = self.target.partition(":")
        fn = getattr(importlib.import_module(module), attr)
        return get_command_from_info(
            CommandInfo(name=self.name, callback=fn, cls=LazyGroupCommand),
            pretty_exceptions_short=True,
            rich_markup_mode=rich_markup_mode,
        )


class LazyGroupCommand(TyperCommand):
    """The click command class of a `LazyCommand`: typer's, with an option set twice in ways
    that disagree (`-kvu -no-kvu`) refused as a usage error (`output.contradicting_options`)
    where click would keep the last one, and `--help` in sections (`format_options`)."""

    def parse_args(self, ctx: Context, args: list[str]) -> list[str]:
        from kvcalc.cli.output import _UsageError, contradicting_options

        ctx.meta["kvcalc.args"] = tuple(args)  # for a usage error's hint (`output.usage_error_lines`)
        problem = contradicting_options(self, args)
        if problem:
            raise _UsageError(problem, ctx=ctx)
        return super().parse_args(ctx, args)

    def format_options(self, ctx: Context, formatter: HelpFormatter) -> None:
        """The options of `--help` in sections: the arguments, the options of no panel under
        "Options", then one section per `rich_help_panel` (a flag set's `panel`, in the
        order the options come), as typer's rich help groups them; kvcalc's help is plain text
        (`rich_markup_mode=None`), where typer would list all of them under "Options"."""
        from gettext import gettext

        args: list[tuple[str, str]] = []
        panels: dict[str, list[tuple[str, str]]] = {gettext("Options"): []}
        for param in self.get_params(ctx):
            record = param.get_help_record(ctx)
            if record is None:
                continue
            if param.param_type_name == "argument":
                args.append(record)
            else:
                panels.setdefault(getattr(param, "rich_help_panel", None) or gettext("Options"), []).append(record)
        if args:
            with formatter.section(gettext("Arguments")):
                formatter.write_dl(args)
        for title, rows in panels.items():
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)


class _Commands(MutableMapping[str, "Command"]):
    """The group's `commands` mapping: the table's names first (each built on first lookup),
    then the commands added as built objects. Iterating or testing membership builds nothing."""

    def __init__(
        self, table: tuple[LazyCommand, ...], built: MutableMapping[str, Command], rich_markup_mode: MarkupMode
    ) -> None:
        self.table = {c.name: c for c in table}
        self.built = dict(built)
        self.rich_markup_mode = rich_markup_mode

    def __getitem__(self, name: str) -> Command:
        if name not in self.built:
            if name not in self.table:
                raise KeyError(name)
            self.built[name] = self.table[name].load(self.rich_markup_mode)
        return self.built[name]

    def __setitem__(self, name: str, cmd: Command) -> None:
        self.built[name] = cmd

    def __delitem__(self, name: str) -> None:
        self.table.pop(name, None)
        del self.built[name]

    def __iter__(self) -> Iterator[str]:
        yield from self.table
        yield from (n for n in self.built if n not in self.table)

    def __len__(self) -> int:
        return len(self.table) + sum(n not in self.table for n in self.built)

    def __contains__(self, name: object) -> bool:
        return name in self.table or name in self.built

    def is_loaded(self, name: str) -> bool:
        """Whether `name`'s command object exists (its module imported)."""
        return name in self.built


class LazyGroup(TyperGroup):
    """A `TyperGroup` whose commands come from `table` (set by `lazy_group`), loaded on use."""

    table: tuple[LazyCommand, ...] = ()

    def __init__(self, **kwargs: Any) -> None:  # Any: TyperGroup's keyword arguments, forwarded
        super().__init__(**kwargs)
        self.commands = _Commands(self.table, self.commands, self.rich_markup_mode)

    def list_commands(self, ctx: Context) -> list[str]:
        """Every command name, the table's in its order, without importing any command."""
        return list(self.commands)

    def format_commands(self, ctx: Context, formatter: HelpFormatter) -> None:
        """The 'Commands:' section of `kvcalc --help`: each name with its one-line help, read
        from the table for a command not yet loaded (so listing them imports none), shortened
        to the width as click shortens a command's own help."""
        from gettext import gettext

        from typer._click.utils import make_default_short_help

        names = self.list_commands(ctx)
        if not names:
            return
        limit = formatter.width - 6 - max(len(n) for n in names)
        rows = []
        commands = cast(_Commands, self.commands)  # set in __init__
        for name in names:
            if commands.is_loaded(name) or name not in commands.table:
                cmd = commands[name]
                if cmd.hidden:
                    continue
                rows.append((name, cmd.get_short_help_str(limit)))
            else:
                rows.append((name, make_default_short_help(commands.table[name].help, limit)))
        with formatter.section(gettext("Commands")):
            formatter.write_dl(rows)
