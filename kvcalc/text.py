"""Text from user files made safe to show: terminal control characters escaped visibly, long
values cut to an excerpt. Pure functions of the standard library; `report/`, `load/` and `cli/`
use them wherever text a user file supplied reaches a terminal, a table, a CSV or an error line.

- `escape_controls`: every C0 control (U+0000-U+001F) but the ones a caller keeps (newline and
  tab by default), DEL (U+007F), every C1 control (U+0080-U+009F), the Unicode line and paragraph
  separators (U+2028, U+2029) and the bidirectional overrides and isolates (U+202A-U+202E,
  U+2066-U+2069) are written as `\\x1b` / `\\u202e`, so a config can neither retitle nor clear
  the user's terminal, nor reorder what the user reads. JSON output escapes them already.
- `excerpt`: a value as an error message may echo it: escaped, then at most `EXCERPT_CHARS`
  characters with an ellipsis (messages only: never a figure of a table).
- `cut`: a text table cell at most `limit` characters, with an ellipsis.
- `number_list`: whole numbers as a message lists them: at most a few, never one cut in two.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

#: the most characters of a user's value an error message echoes (then "…")
EXCERPT_CHARS = 60

#: the ellipsis that marks a cut
ELLIPSIS = "…"

_BIDI = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
_CONTROLS = (
    "".join(chr(c) for c in range(0x20)) + "\x7f" + "".join(chr(c) for c in range(0x80, 0xA0)) + "\u2028\u2029" + _BIDI
)
_PATTERNS: dict[str, re.Pattern[str]] = {}


def _pattern(keep: str) -> re.Pattern[str]:
    p = _PATTERNS.get(keep)
    if p is None:
        chars = "".join(c for c in _CONTROLS if c not in keep)
        p = _PATTERNS[keep] = re.compile("[" + re.escape(chars) + "]")
    return p


def _escape_one(m: re.Match[str]) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def escape_controls(text: str, keep: str = "\n\t") -> str:
    """`text` with every control character (module docstring) but those in `keep` written as
    its escape: ESC -> `\\x1b`, BEL -> `\\x07`, U+202E -> `\\u202e`. `keep=""` escapes newlines
    and tabs too (a value that must stay on one line). Text without one is returned as is."""
    p = _pattern(keep)
    return p.sub(_escape_one, text) if p.search(text) else text


def has_controls(text: str, keep: str = "\n\t") -> bool:
    """True when `escape_controls(text, keep)` would change `text`."""
    return _pattern(keep).search(text) is not None


def cut(text: str, limit: int) -> str:
    """`text` when it has at most `limit` characters, else its first `limit - 1` and `…`."""
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + ELLIPSIS


def excerpt(value: object, limit: int = EXCERPT_CHARS, *, quote: bool = False) -> str:
    """A value as a message may echo it: `repr` for non-strings (`str` for strings, so a name
    reads as typed; `quote=True`: `repr` for strings too), newlines and other controls escaped,
    then cut to `limit` characters with an ellipsis. Only ever in a message, never a figure:
    `excerpt(12345678901234567890)` keeps every digit up to the limit, and the limit is far above
    any number kvcalc accepts."""
    if quote or not isinstance(value, str):
        r = _bounded_repr(value, limit)
    else:
        r = value[: limit * 8]  # escaping can only lengthen: never escape 5 MB to show 60 characters
    return cut(escape_controls(r, keep=""), limit)


def _bounded_repr(value: object, limit: int, depth: int = 0) -> str:
    """`repr(value)` without building the whole of a huge or deep container: lists, tuples and
    dicts show their first items and `...`, and nothing below four levels."""
    if depth > 4 and isinstance(value, (list, tuple, dict)):
        return "..."
    if isinstance(value, (list, tuple)):
        items = [_bounded_repr(v, limit, depth + 1) for v in value[:8]]
        more = ", ..." if len(value) > 8 else ""
        o, c = ("[", "]") if isinstance(value, list) else ("(", ")")
        return o + ", ".join(items)[: limit * 2] + more + c
    if isinstance(value, dict):
        items = [
            f"{_bounded_repr(k, limit, depth + 1)}: {_bounded_repr(v, limit, depth + 1)}"
            for k, v in list(value.items())[:8]
        ]
        more = ", ..." if len(value) > 8 else ""
        return "{" + ", ".join(items)[: limit * 2] + more + "}"
    if isinstance(value, str):
        return repr(value[: limit * 2])
    return repr(value)


#: the most numbers one warning or error lists (`number_list`)
LISTED_NUMBERS = 4


def number_list(values: Iterable[int], most: int = LISTED_NUMBERS) -> str:
    """Whole numbers as a message lists them, with thousands separators: all of them when there
    are at most `most`, else the first `most - 1`, `...` and the last (`132,096, 133,120,
    134,144, ..., 408,576`), so a warning about 399 contexts stays one short line and no number
    is ever cut (`MESSAGE_LINE_CHARS` would cut a long list mid-number). The caller says how
    many there are."""
    shown = [f"{v:,}" for v in values]
    if len(shown) <= most:
        return ", ".join(shown)
    return ", ".join(shown[: max(most - 1, 1)]) + ", ..., " + shown[-1]
