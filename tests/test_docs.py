"""The docs say where every rule lives: each file they name exists, and each function, class or
constant named beside a file in the architecture and engine-rule tables is defined in it.

When code moves (a module split, a function renamed), this fails and names the page and the name
to update, so the docs' "one step to the rule" stays true."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
#: the pages that map rules to code (their tables are checked name by name)
MAP_PAGES = [DOCS / "architecture.md", *sorted((DOCS / "engines").glob("*.md"))]
#: every page whose repository paths are checked
PATH_PAGES = sorted(p for p in DOCS.rglob("*.md") if p.name != "cli.md")
#: the table columns that name kvcalc's own code (others name the engines' files)
CODE_COLUMNS = ("kvcalc", "where it lives", "where")

_TICKED = re.compile(r"`([^`]+)`")
#: kvcalc's own paths (the engines' files, `tools/server/server.cpp` or SGLang's `configs/...`, are
#: not in this repository)
_REPO_PATH = re.compile(
    r"^((kvcalc|tests|benchmarks)/[\w./-]*|configs/(models|deployments)/[\w./-]*|tools/[\w.-]+\.(py|sh))$"
)
_IDENT = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)?$")


def _defined(source: str, name: str) -> bool:
    """`name` is a function, class, constant or attribute defined in `source` (`Class.attr`: both)."""
    for part in name.split("."):
        if not re.search(
            rf"^\s*(async\s+def|def|class)\s+{part}\b|^\s*{part}\s*(:[^=\n]*)?=|^\s*{part}\s*:", source, re.M
        ):
            return False
    return True


def _rows(page: Path) -> list[tuple[int, list[str], list[str]]]:
    """(line, header cells, row cells) of every markdown table row of `page`."""
    out, header = [], None
    for i, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = [c.lower() for c in cells]
        elif not set(line) <= set("|-: "):
            out.append((i, header, cells))
    return out


def _code_names(page: Path) -> list[tuple[str, Path, str]]:
    """(where, file, name): each identifier a code column names after a file, on a map page."""
    found = []
    for line, header, cells in _rows(page):
        for col, cell in zip(header, cells, strict=True):
            if col not in CODE_COLUMNS:
                continue
            current = None
            for tok in _TICKED.findall(cell):
                if tok.endswith(".py"):
                    current = ROOT / tok if tok.startswith("kvcalc/") else ROOT / "kvcalc" / "engines" / tok
                elif current is not None and _IDENT.match(tok):
                    found.append((f"{page.relative_to(ROOT)}:{line}", current, tok))
    return found


NAMES = [x for page in MAP_PAGES for x in _code_names(page)]


def test_the_map_pages_name_code():
    assert len(NAMES) >= 100  # architecture.md's "Find a rule" table and the three engine pages


@pytest.mark.parametrize("where,path,name", NAMES, ids=[f"{w}:{n}" for w, _, n in NAMES])
def test_each_named_definition_exists(where: str, path: Path, name: str):
    assert path.is_file(), f"{where}: {path.relative_to(ROOT)} does not exist (moved? update the page)"
    assert _defined(path.read_text(encoding="utf-8"), name), (
        f"{where}: {path.relative_to(ROOT)} defines no {name} (renamed or moved? update the page)"
    )


def test_every_repository_path_the_docs_name_exists():
    missing = []
    for page in PATH_PAGES:
        for tok in _TICKED.findall(page.read_text(encoding="utf-8")):
            path = (tok.split() or [""])[0].rstrip(",;:")
            if _REPO_PATH.match(path) and "*" not in path and not (ROOT / path).exists():
                missing.append(f"{page.relative_to(ROOT)}: {path}")
    assert not missing, "paths the docs name that do not exist:\n" + "\n".join(missing)
