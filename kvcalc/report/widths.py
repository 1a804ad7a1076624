"""How every kvcalc table takes its shape at the terminal width: `grid` (column tables) and `pairs_table`
(key/value tables) fit the terminal's width (`console_width`, which honours `COLUMNS`) by
changing shape, never by cutting, wrapping or ellipsizing a figure; `WideOrRecords` is one
table when it fits, else one block per row. Long text cells are cut (`safe_text`) and
control characters escaped before any table is shaped.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Literal, NamedTuple, Union, overload

if TYPE_CHECKING:
    from rich.console import Console, ConsoleOptions, Group, RenderableType
    from rich.table import Table
    from rich.text import Text

#: a cell: plain text, a rich Text, or a tuple of parts that may go on separate lines (each whole)
Cell = Union[str, "Text", tuple[str, ...]]

#: a word of a text column longer than this may fold (a URL, a long path): it is no figure
TEXT_WORD_CAP = 24

#: the most characters a cell, a title or a caption shows; a longer one (a 5 MB `source` from a
#: user's file) is cut with an ellipsis before any table is shaped. It is text, never a figure: the
#: longest cell kvcalc builds itself, a formula with one term per layer kind, stays far below
#: (204 characters over every bundled model; tests/bad_input/test_output_bounds.py pins the margin).
TEXT_CELL_CHARS = 1000


@overload
def safe_text(text: str, limit: int = ...) -> str: ...
@overload
def safe_text(text: None, limit: int = ...) -> None: ...
def safe_text(text: str | None, limit: int = TEXT_CELL_CHARS) -> str | None:
    """`text` as a table shows it: terminal control characters written visibly (`\\x1b`; newline
    and tab kept), then cut to `limit` characters with an ellipsis (`kvcalc.text`)."""
    if text is None:
        return None
    from kvcalc.text import cut, escape_controls

    return cut(escape_controls(text[: limit * 8]), limit)


def safe_cell(cell: Cell, limit: int = TEXT_CELL_CHARS) -> Cell:
    """A cell with `safe_text` applied to its text: a str, each part of a tuple, or a rich Text
    (rebuilt in its base style only when it needs a change)."""
    if isinstance(cell, tuple):
        return tuple(safe_text(c, limit) for c in cell)
    if isinstance(cell, str):
        return safe_text(cell, limit)
    plain = getattr(cell, "plain", None)
    if isinstance(plain, str):
        safe = safe_text(plain, limit)
        if safe != plain:
            from rich.text import Text

            return Text(safe, style=cell.style)
    return cell


def console_width() -> int:
    """The width tables are laid out for: rich's `Console().width` (`COLUMNS` when set, else the
    terminal's width, else 80 in a pipe). The one place kvcalc reads it."""
    from rich.console import Console

    return Console().width


def _plain(cell: Cell) -> str:
    """A cell's text on one line."""
    if isinstance(cell, tuple):
        return " ".join(_plain(c) for c in cell)
    return cell.plain if hasattr(cell, "plain") else str(cell)


def _len(s: str) -> int:
    from rich.cells import cell_len

    return cell_len(s)


def _parts(cell: Cell) -> list[str]:
    """The pieces of a cell that must stay whole on one line: a tuple's parts, else the lines."""
    if isinstance(cell, tuple):
        return [_plain(c) for c in cell]
    return _plain(cell).split("\n") if isinstance(cell, str) else [_plain(cell)]


def _longest_word(text: str, cap: int | None = None) -> int:
    n = max((_len(w) for w in text.split()), default=0)
    return min(n, cap) if cap is not None else n


def _number_word(text: str) -> int:
    """The widest word of `text` that holds a digit and is not a path or URL (those may fold)."""
    return max((_len(w) for w in text.split() if any(ch.isdigit() for ch in w) and "/" not in w), default=0)


#: the units a figure may carry: never put on a line of their own (`wrap_line`). A unit may be
#: followed by punctuation ("GiB)", "ms,").
UNITS = frozenset(
    {
        "B",
        "kB",
        "KB",
        "KiB",
        "MB",
        "MiB",
        "GB",
        "GiB",
        "TB",
        "TiB",
        "PB",
        "PiB",
        "B/token",
        "B/s",
        "GB/s",
        "TB/s",
        "MB/s",
        "s",
        "ms",
        "us",
        "\u00b5s",
        "ns",
        "tokens",
        "token",
        "FLOPs",
        "FLOP/s",
        "TFLOPS",
        "GFLOPS",
        "GHz",
        "W",
        "%",
    }
)


def _is_figure(word: str) -> bool:
    """A word that is a number as kvcalc prints it: `1,024`, `3.12`, `(3.12`, `0.9`, `12x`."""
    core = word.lstrip("([~<>=").rstrip("x%")
    return bool(core) and core[0].isdigit() and all(ch.isdigit() or ch in ",." for ch in core)


def _is_unit(word: str) -> bool:
    return word.rstrip("),;:.]") in UNITS


def _atoms(line: str) -> list[str]:
    """The words of `line` (split at spaces), a unit glued to the figure before it (`3.12 GB`,
    `2.91 GiB)`): pieces that must stay on one line."""
    out: list[str] = []
    for word in line.split(" "):
        if out and word and _is_unit(word) and _is_figure(out[-1].rsplit(" ", 1)[-1]):
            out[-1] += " " + word
        else:
            out.append(word)
    return out


def _url_pieces(atom: str) -> list[str]:
    """A word too long for its line cut after each `/` (a URL, a path: `huggingface.co/`,
    `google/`, `gemma-3-27b-it/`), never inside a name; a word without `/` stays whole."""
    pieces, cur = [], ""
    for ch in atom:
        cur += ch
        if ch == "/":
            pieces.append(cur)
            cur = ""
    if cur:
        pieces.append(cur)
    return pieces


def wrap_line(line: str, width: int) -> list[str]:
    """`line` in lines of at most `width` cells where it can be: broken at spaces, never between
    a figure and its unit (`UNITS`), and a word longer than the line (a URL) only after a `/`.
    A piece that is still too long is left whole (rich folds it; no figure is that long)."""
    lines: list[str] = []
    cur = ""
    for atom in _atoms(line):
        cand = atom if not cur else cur + " " + atom
        if _len(cand) <= width:
            cur = cand
            continue
        if _len(atom) > width and "/" in atom:  # a URL: fill the line, then break after a `/`
            sep = " " if cur else ""
            for piece in _url_pieces(atom):
                if cur and _len(cur + sep + piece) > width:
                    lines.append(cur)
                    cur = piece
                else:
                    cur = cur + sep + piece
                sep = ""
            continue
        if cur:
            lines.append(cur)
        cur = atom
    lines.append(cur)
    return lines


def wrap_value(cell: Cell, width: int) -> Cell:
    """A value cell pre-wrapped for a column `width` cells wide (`wrap_line`, line by line): a
    str or a rich Text (its styles kept: a break at a space becomes the newline, a break after a
    `/` inserts one). A tuple is left to `_render_cell`."""
    if isinstance(cell, tuple):
        return cell
    plain = _plain(cell)
    if all(_len(line) <= width for line in plain.split("\n")):
        return cell
    wrapped = "\n".join("\n".join(wrap_line(line, width)) for line in plain.split("\n"))
    if isinstance(cell, str):
        return wrapped
    from rich.text import Span, Text

    # map each character of the old text to its place in the new one: the new text is the old
    # one with some spaces turned into newlines and some newlines inserted after a `/`
    where, j = [], 0
    for ch in plain:
        while j < len(wrapped) and wrapped[j] == "\n" and ch not in "\n ":
            j += 1  # an inserted break
        where.append(j)
        j += 1
    where.append(len(wrapped))
    spans = [Span(where[sp.start], where[sp.end], sp.style) for sp in cell.spans]
    return Text(wrapped, style=cell.style, spans=spans, justify=cell.justify)


class Col(NamedTuple):
    """One column of a `grid` table.

    `kind`: "num" never wraps (right-justified figures), "id" never wraps (a key, a name),
    "text" wraps between words. `short`: the header used (and explained in a legend) when the
    full one does not fit. `legend`: a text column that may move below the table as
    "KEY: value" lines. `style`: a rich style for the whole column. A NamedTuple, not a frozen
    dataclass: it is declared on every start-up, and a dataclass compiles its methods when declared.
    """

    header: str
    kind: str = "num"
    short: str = ""
    justify: Literal["default", "left", "center", "right", "full"] = "right"
    legend: bool = False
    style: str | None = None


def _table_width(widths: Sequence[int]) -> int:
    """A rich box table's width for these content widths: padding 1 each side, a rule between
    columns and one at each edge."""
    return sum(widths) + 3 * len(widths) + 1


def _header_need(header: str) -> int:
    return max((_longest_word(line) for line in header.split("\n")), default=0)


def _header_want(header: str) -> int:
    return max((_len(line) for line in header.split("\n")), default=0)


def _need(col: Col, header: str, cells: list[Cell]) -> int:
    """The narrowest the column may be: its longest header word, its widest whole part (a text
    column: its longest word, up to TEXT_WORD_CAP)."""
    if col.kind == "text":
        body = max((_longest_word(_plain(c), TEXT_WORD_CAP) for c in cells), default=0)
    else:
        body = max((_len(p) for c in cells for p in _parts(c)), default=0)
    return max(body, _header_need(header), 1)


def _want(col: Col, header: str, cells: list[Cell]) -> int:
    """The column's natural width: every cell on one line, the header as written."""
    body = max((max(_len(line) for line in _plain(c).split("\n")) for c in cells), default=0)
    return max(body, _header_want(header), 1)


def _render_cell(cell: Cell, width: int | None) -> str | Text:
    if isinstance(cell, tuple):
        joined = _plain(cell)
        return joined if width is None or _len(joined) <= width else "\n".join(_plain(c) for c in cell)
    return cell


def _widths(need: list[int], want: list[int], cols: Sequence[Col], width: int) -> list[int]:
    """`need` plus the slack, handed to text columns first, then to the others, each up to its
    natural width."""
    out = list(need)
    slack = width - _table_width(out)
    for pass_text in (True, False):
        for i, c in enumerate(cols):
            if (c.kind == "text") == pass_text and slack > 0:
                add = min(slack, want[i] - out[i])
                if add > 0:
                    out[i] += add
                    slack -= add
    return out


def _one_table(
    cols: Sequence[Col],
    headers: Sequence[str],
    rows: Sequence[Sequence[Cell]],
    widths: list[int] | None,
    title: str | None,
    caption: str | None,
) -> Table:
    from rich.table import Table
    from rich.text import Text

    t = Table(title=title, title_justify="left", caption=caption, caption_justify="left")
    for i, c in enumerate(cols):
        # a header wraps between words even over a column of figures that never wrap
        t.add_column(
            Text(headers[i], no_wrap=False, overflow="fold"),
            justify=c.justify,
            no_wrap=c.kind != "text",
            overflow="fold",
            width=None if widths is None else widths[i],
            style=c.style,
        )
    for r in rows:
        t.add_row(*[_render_cell(cell, None if widths is None else widths[i]) for i, cell in enumerate(r)])
    return t


def _fit(
    cols: Sequence[Col],
    headers: Sequence[str],
    rows: Sequence[Sequence[Cell]],
    width: int,
    title: str | None,
    caption: str | None,
) -> Table | None:
    """One table of these columns within `width` (natural widths when they fit, else `need`
    plus the slack), or None when even the narrowest shape is too wide."""
    cells = [[r[i] for r in rows] for i in range(len(cols))]
    want = [_want(c, headers[i], cells[i]) for i, c in enumerate(cols)]
    if _table_width(want) <= width:
        return _one_table(cols, headers, rows, None, title, caption)
    need = [_need(c, headers[i], cells[i]) for i, c in enumerate(cols)]
    if _table_width(need) > width:
        return None
    return _one_table(cols, headers, rows, _widths(need, want, cols, width), title, caption)


def _legend_text(cols: Sequence[Col]) -> str:
    """'q/kv: heads (q/kv); ctx: max context' for the abbreviated headers."""
    return "; ".join(f"{c.short}: {' '.join(c.header.split())}" for c in cols if c.short)


def _join_caption(*parts: str | None) -> str | None:
    text = "\n".join(p for p in parts if p)
    return text or None


def grid(
    cols: Sequence[Col],
    rows: Sequence[Sequence[Cell]],
    *,
    width: int | None = None,
    title: str | None = None,
    caption: str | None = None,
    keys: int = 1,
) -> Table | Group:
    """A table of `rows` (one cell per column of `cols`) laid out to fit `width` columns
    (`console_width()` when None) without ever wrapping, cutting or ellipsizing a figure.

    Shapes tried in turn (module docstring): the natural table; text columns narrowed; short
    headers with a legend in the caption; `legend` columns moved below as "KEY: value" lines
    (KEY from the first column); the columns split over several tables, each repeating the first
    `keys` columns; one key/value block per row. Returns a rich renderable.
    """
    from rich.console import Group
    from rich.text import Text

    width = width or console_width()
    rows = [[safe_cell(c) for c in r] for r in rows]
    title, caption = safe_text(title), safe_text(caption)
    full = [c.header for c in cols]
    t = _fit(cols, full, rows, width, title, caption)
    if t is not None:
        return t
    short = [c.short or c.header for c in cols]
    abbrev = _legend_text(cols)
    if abbrev:
        t = _fit(cols, short, rows, width, title, _join_caption(caption, abbrev))
        if t is not None:
            return t
    moved = [i for i, c in enumerate(cols) if c.legend]
    kept = [i for i in range(len(cols)) if i not in moved]
    legend_lines = [Text(f"{_plain(r[0])}: {' '.join(_plain(r[i]) for i in moved)}") for r in rows] if moved else []
    kcols = [cols[i] for i in kept]
    krows = [[r[i] for i in kept] for r in rows]
    kabbrev = _legend_text(kcols)
    if moved:
        t = _fit(kcols, [short[i] for i in kept], krows, width, title, _join_caption(caption, kabbrev))
        if t is not None:
            return Group(t, *legend_lines)
    # split: the key columns, then as many other columns as fit, table after table
    kheaders = [short[i] for i in kept]
    cells = [[r[j] for r in krows] for j in range(len(kcols))]
    need = [_need(c, kheaders[j], cells[j]) for j, c in enumerate(kcols)]
    groups: list[list[int]] = []
    base = list(range(min(keys, len(kcols))))
    cur: list[int] = []
    split_ok = True
    for j in range(len(base), len(kcols)):
        if _table_width([need[b] for b in base + cur + [j]]) <= width:
            cur.append(j)
        elif cur and _table_width([need[b] for b in base + [j]]) <= width:
            groups.append(cur)
            cur = [j]
        else:
            split_ok = False  # the key columns and this one column alone are too wide
            break
    if cur:
        groups.append(cur)
    if split_ok and len(groups) > 1:
        tables: list[Table] = []
        abbreviated: list[Col] = []
        for g in groups:
            idx = base + g
            gcols, grows = [kcols[j] for j in idx], [[r[j] for j in idx] for r in krows]
            gt = _fit(gcols, [c.header for c in gcols], grows, width, None, None)
            if gt is None:  # fits with the short headers (the groups were sized with them)
                gt = _fit(gcols, [kheaders[j] for j in idx], grows, width, None, None)
                abbreviated += [c for c in gcols if c.short and c not in abbreviated]
            if gt is not None:  # always: each group was sized to fit with the short headers
                tables.append(gt)
        head = [Text(title)] if title else []
        tail = [Text(x) for x in (caption, _legend_text(abbreviated)) if x]
        return Group(*head, *tables, *tail, *legend_lines)
    # last: one key/value block per row
    blocks = []
    for r in rows:
        name = " ".join(_plain(r[i]) for i in range(min(keys, len(cols))))
        pairs = [(" ".join(full[i].split()), r[i], None) for i in range(len(cols)) if i >= keys]
        blocks.append(pairs_table(name, pairs, width=width))
    head = [Text(title)] if title else []
    return Group(*head, *blocks, *([Text(caption)] if caption else []))


def pairs_table(
    title: str | None,
    rows: Sequence[tuple[str, Cell, str | None]],
    *,
    width: int | None = None,
    label_style: str = "bold",
) -> Table:
    """A two-column key/value table (no header) of (label, value, row style) rows, laid out for
    `width` (`console_width()` when None): values wrap between words, a unit with its figure and
    a URL after a `/` only (`wrap_value`); the label column keeps its
    natural width while the value column still holds the longest figure of any value (a word
    with a digit that is not a path), else it narrows (labels wrap between words) so that the
    value column does."""
    from rich.table import Table

    width = width or console_width()
    rows = [(safe_text(lab), safe_cell(v), style) for lab, v, style in rows]
    title = safe_text(title)
    labels = [lab for lab, _, _ in rows]
    values = [_plain(v) for _, v, _ in rows]
    lab_want = max((_len(x) for x in labels), default=1)
    val_want = max((max(_len(line) for line in v.split("\n")) for v in values), default=1)
    widths: list[int] | None = None
    if _table_width([lab_want, val_want]) > width:
        lab_need = max((_longest_word(x) for x in labels), default=1)
        val_need = max((_number_word(v) for v in values), default=1)
        room = width - _table_width([0, 0])
        lab_w = max(min(lab_want, room - val_need), min(lab_need, room // 2))
        widths = [lab_w, room - lab_w]
    t = Table(title=title, show_header=False, title_justify="left")
    t.add_column("what", style=label_style, overflow="fold", width=None if widths is None else widths[0])
    t.add_column("value", overflow="fold", width=None if widths is None else widths[1])
    for lab, v, style in rows:  # values break at spaces or after a `/`; a tuple of parts goes on one line when it fits
        w = None if widths is None else widths[1]
        t.add_row(lab, _render_cell(v if w is None else wrap_value(v, w), w), style=style)
    return t


class WideOrRecords:
    """`headers` x `rows` (cells as text) as one table when it fits the console's width, else
    one two-column block per row (header: value): no cell is ever cut, wrapped or ellipsized,
    at any width (decided when printed, from the console's width). `right`: the headers whose
    cells are right-aligned (numbers)."""

    def __init__(
        self,
        title: str,
        headers: Sequence[str],
        rows: Sequence[Sequence[str]],
        right: Sequence[str] = (),
        caption: str | None = None,
    ) -> None:
        self.title, self.headers = safe_text(title), list(headers)
        self.rows = [[safe_text(c) for c in r] for r in rows]
        self.right, self.caption = set(right), safe_text(caption)

    def wide(self) -> Table:
        """The one-table shape."""
        from rich.table import Table

        t = Table(title=self.title, title_justify="left", caption=self.caption, caption_justify="left")
        for h in self.headers:
            t.add_column(h, justify="right" if h in self.right else "left", no_wrap=True)
        for r in self.rows:
            t.add_row(*r)
        return t

    def records(self) -> list[Table | Text]:
        """The narrow shape: the title, then per row a block of (header, value) lines."""
        from rich.table import Table
        from rich.text import Text

        out: list[Table | Text] = [Text(self.title)]
        for r in self.rows:
            t = Table(show_header=False)
            t.add_column("what", no_wrap=True)
            t.add_column("value", no_wrap=True)
            for h, v in zip(self.headers, r, strict=True):
                t.add_row(h, v)
            out.append(t)
        if self.caption:
            out.append(Text(self.caption))
        return out

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[RenderableType]:
        from rich.measure import Measurement

        wide = self.wide()
        natural = Measurement.get(console, options.update(max_width=10**6), wide).maximum  # unclamped
        if natural <= options.max_width:
            yield wide
        else:
            from rich.console import Group

            yield Group(*self.records())
