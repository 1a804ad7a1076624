"""Rewrite the printed output of the docs' and README's `$ kvcalc ...` examples from what kvcalc
prints now (tests/test_readme.py holds every page to its examples).

    python tools/refresh_examples.py [PAGE ...]     (default: every page tests/test_readme.py reads)

An example that names a file the repository does not hold (`test_readme.EXAMPLE_FILES`: the GGUF
file of `tools/example_gguf.py`) runs in a temporary folder where that file is made first.
Only whole outputs are rewritten: an example with an elision (`...`), a pipe into `python -c`, or
no output under it is left as it is, and so is one whose command fails. Review the diff: a changed
figure is a changed answer.
"""

from __future__ import annotations

import os
import shlex
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

import test_readme  # noqa: E402  (the examples' own parser)
from typer.testing import CliRunner  # noqa: E402

from kvcalc.cli import app  # noqa: E402


def refresh(page: Path) -> int:
    """Rewrite `page`'s refreshable examples in place; returns how many changed."""
    lines = page.read_text().splitlines(keepends=True)
    rel = page.relative_to(ROOT).as_posix()
    changed = 0
    # bottom to top, so earlier line numbers stay valid
    for ex in reversed(test_readme.examples(page.read_text(), rel)):
        if " | " in ex.command or not ex.expected or any(ln.startswith("...") for ln in ex.expected):
            continue
        argv = shlex.split(ex.command)
        with tempfile.TemporaryDirectory() as tmp:  # the files an example names that the repository does not hold
            made = [name for name in test_readme.EXAMPLE_FILES if name in ex.command]
            for name in made:
                test_readme.EXAMPLE_FILES[name](Path(tmp), name)
            os.chdir(tmp if made else ROOT)
            r = CliRunner().invoke(app, argv[1:], env={**os.environ, "COLUMNS": str(ex.width)})
            os.chdir(ROOT)
        if r.exit_code != 0:
            print(f"{rel}:{ex.line}: exit {r.exit_code}, left as it is", file=sys.stderr)
            continue
        got = test_readme._lines(r.stdout)
        if got == [ln.rstrip() for ln in ex.expected]:
            continue
        start = ex.line  # index of the first line after the command's first line
        while lines[start - 1].rstrip("\n").endswith("\\"):
            start += 1
        lines[start : start + len(ex.expected)] = [ln + "\n" for ln in got]
        changed += 1
    page.write_text("".join(lines))
    return changed


def main() -> None:
    pages = [Path(p).resolve() for p in sys.argv[1:]] or test_readme.PAGES
    os.chdir(ROOT)
    for page in pages:
        n = refresh(page)
        if n:
            print(f"{page.relative_to(ROOT)}: {n} example(s) rewritten")


if __name__ == "__main__":
    main()
