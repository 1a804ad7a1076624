"""Commands imported only when they run: a typer group whose commands are named in a table
(`LazyCommand`: name, "module:function", one-line help) and built on first use.

`kvcalc estimate ...` imports `kvcalc.cli.estimate` and no other command module; `kvcalc --help`
lists every command with its one-line help from the table, importing none of them; `kvcalc X
--help` imports X only. A loaded command's options coerce their values lazily
(`typed_values_as_given`): typer's per-option converter is built only for a value typed on the
command line, not for the two dozen defaults of a call like `kvcalc estimate MODEL`. Commands registered on the typer app the usual way
(`app.command()(fn)`) still work: they are built eagerly, as typer does, and listed after the
table's. A test (`tests/cli/test_lazy_commands.py`) checks that each table entry's help is the
one its function's docstring gives, so the listing never drifts from the commands.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, MutableMapping
from typing import Any, NamedTuple, cast

from typer.core import TyperCommand, TyperGroup


class LazyCommand(NamedTuple):
    """One command of the table: its `name` on the command line, its `target`
    ("package.module:function", imported on first use) and `help`, the first paragraph of the
    function's docstring (what `kvcalc --help` shows, shortened to fit as click shortens it).
    A NamedTuple, not a frozen dataclass: the table is read on every start-up, and a dataclass
    compiles its methods when declared."""

    name: str
    target: str
    help: str

    def load(self, rich_markup_mode: Any) -> Any:
        """The click command of `target`, built as typer builds a registered command."""
        from typer.main import get_command_from_info
        from typer.models import CommandInfo

        module, _, attr = self.target.partition(":")
        fn = getattr(importlib.import_module(module), attr)
        cmd = get_command_from_info(CommandInfo(name=self.name, callback=fn, cls=LazyGroupCommand),
                                    pretty_exceptions_short=True, rich_markup_mode=rich_markup_mode)
        typed_values_as_given(cmd)
        return cmd


#: the option types whose values `AsGiven` passes through: typer's converter returns a value that
#: already has this exact type unchanged (str: `str(value)`; int, float, bool: pydantic's lax
#: validation of an int, a float, a bool)
PLAIN_TYPES = (str, int, float, bool)


class AsGiven:
    """An option's value conversion, for typer's runtime coercion (typer 0.2x `_TyperParameter`:
    `get_runtime_param().coerce(value, param=..., ctx=...)`): None, and a value that already has
    the option's plain type (`PLAIN_TYPES`: the defaults typer passes for options not typed),
    come back as they are, which is what typer's converter returns for them; any other value (the
    text typed on the command line) goes through typer's own converter
    (`typer._coercion.build_runtime_param`, a pydantic `TypeAdapter`), built on first use and
    kept. typer builds that converter for every option of a call, typed or not: about 0.3 ms
    each, two dozen for `kvcalc estimate MODEL` (typer itself skips it for a flag already a bool,
    but not for the None a flag of the group may hold)."""

    def __init__(self, kind: type) -> None:
        self.kind = kind

    def coerce(self, value: Any, param: Any, ctx: Any) -> Any:
        if value is None or type(value) is self.kind:
            return value
        from typer._coercion import build_runtime_param

        param._runtime_param = build_runtime_param(param.type_descriptor)
        return param._runtime_param.coerce(value, param=param, ctx=ctx)


def value_as_given(param: Any) -> None:
    """Give click parameter `param` an `AsGiven` conversion in place of the one typer would build,
    when `AsGiven` passes its values through unchanged: one value of a plain type
    (`PLAIN_TYPES`), no parser, no bounds, no file. Any other parameter, and any typer without
    runtime coercion (before 0.2x click's own types convert), is left as typer made it."""
    desc = getattr(param, "type_descriptor", None)
    if desc is None or getattr(param, "_runtime_param", False) is not None:
        return
    info = desc.parameter_info
    if (desc.annotation in PLAIN_TYPES and desc.file_annotation is None and info.parser is None
            and info.min is None and info.max is None and not param.multiple and param.nargs == 1):
        param._runtime_param = AsGiven(desc.annotation)


def typed_values_as_given(cmd: Any) -> None:
    """`value_as_given` for each parameter of click command `cmd`."""
    for p in getattr(cmd, "params", ()):
        value_as_given(p)


class HelpAsGiven:
    """Mixin for a typer command or group (before the typer class in the bases): the `--help`
    option, which click builds on first use, gets `value_as_given` too."""

    def get_help_option(self, ctx: Any) -> Any:
        opt = super().get_help_option(ctx)  # type: ignore[misc]
        if opt is not None:
            value_as_given(opt)
        return opt


class LazyGroupCommand(HelpAsGiven, TyperCommand):
    """The click command class of a `LazyCommand`: typer's, with `--help` as `HelpAsGiven` makes
    it, and an option set twice in ways that disagree (`-kvu -no-kvu`) refused as a usage error
    (`output.contradicting_options`) where click would keep the last one."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        from kvcalc.cli.output import _UsageError, contradicting_options

        ctx.meta["kvcalc.args"] = tuple(args)  # for a usage error's hint (`output.usage_error_lines`)
        problem = contradicting_options(self, args)
        if problem:
            raise _UsageError(problem, ctx=ctx)
        return super().parse_args(ctx, args)


class _Commands(MutableMapping):
    """The group's `commands` mapping: the table's names first (each built on first lookup),
    then the commands added as built objects. Iterating or testing membership builds nothing."""

    def __init__(self, table: tuple[LazyCommand, ...], built: MutableMapping[str, Any], rich_markup_mode: Any) -> None:
        self.table = {c.name: c for c in table}
        self.built = dict(built)
        self.rich_markup_mode = rich_markup_mode

    def __getitem__(self, name: str) -> Any:
        if name not in self.built:
            if name not in self.table:
                raise KeyError(name)
            self.built[name] = self.table[name].load(self.rich_markup_mode)
        return self.built[name]

    def __setitem__(self, name: str, cmd: Any) -> None:
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


class LazyGroup(HelpAsGiven, TyperGroup):
    """A `TyperGroup` whose commands come from `table` (a subclass sets it: `cli.app.KvcalcGroup`),
    loaded on use."""

    table: tuple[LazyCommand, ...] = ()

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.commands = _Commands(self.table, self.commands, self.rich_markup_mode)
        typed_values_as_given(self)  # the group's own options (--debug, --version)

    def list_commands(self, ctx: Any) -> list[str]:
        """Every command name, the table's in its order, without importing any command."""
        return list(self.commands)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
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
