"""The one user-error type and its few subclasses.

Every problem a user can fix (a bad file, a bad field, a bad option) is a `KvcalcError`;
the CLI catches it once, prints its message as one line and exits 2.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class KvcalcError(Exception):
    """A problem the user can fix. `str(err)` is one line: where, what, and the fix."""


class ConfigError(KvcalcError):
    """A model, deployment or GPU config that cannot be read or is invalid.

    Attributes: `path` (file or None), `field` (dotted field name or None), `line` (1-based
    line in the file or None).
    """

    def __init__(self, message: str, *, path: str | None = None, field: str | None = None,
                 line: int | None = None) -> None:
        self.path = path
        self.field = field
        self.line = line
        where = ""
        if path:
            where = f"{path}"
            if line:
                where += f":{line}"
            where += ": "
        if field:
            where += f"field '{field}': "
        super().__init__(where + message)


class UnknownNameError(KvcalcError):
    """A name (model, GPU, dtype, engine) that is not in its table; the message lists close matches."""

    def __init__(self, what: str, name: str, choices: Iterable[str], hint: str = "") -> None:
        choices = list(choices)
        close = difflib.get_close_matches(name.lower(), [c.lower() for c in choices], n=3, cutoff=0.5)
        msg = f"unknown {what} '{name}'"
        if close:
            msg += "; did you mean " + " or ".join(f"'{c}'" for c in close) + "?"
        elif hint:
            msg += f"; {hint}"
        else:
            msg += f"; choose one of: {', '.join(sorted(choices))}"
        super().__init__(msg)
        self.name = name
        self.close = close


class MissingExtraError(KvcalcError):
    """An optional package is needed: the message says what to install."""

    def __init__(self, package: str, extra: str) -> None:
        super().__init__(f"this needs {package}: pip install 'kvcalc[{extra}]'")


class KvcalcWarning(UserWarning):
    """Something the user should check but that does not stop the command (an unknown
    model_type read as a plain decoder). The CLI prints each as one yellow `warning:` line."""
