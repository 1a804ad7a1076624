"""The examples of README.md and of every page of docs/ are what the program prints.

Each page is parsed generically (docs/cli.md, generated from --help, is tests/test_cli_reference.py's): every fenced block whose first line is `$ kvcalc ...` is split
into commands (each line starting with `$ `, a trailing `\\` continuing it) and the output printed
under each. Each command runs through the CLI runner at the width its output was printed at (its
widest output line, at least 80: rich tables fill the terminal), from the repository root, and its
output is compared line by line (trailing spaces ignored). A line starting with `...` (`...`, or
`...the KV table above, then:`) elides: only the lines before it must open the output and the
lines after it must close it. A command piped into `python -c CODE` has CODE run on the JSON and
its printed line compared. A command elided with ` ... ` (`kvcalc capacity ... --flag`) or with
no output under it is shown, not run. The `kvcalc measure` JSON excerpt has no command line: it is run on
tests/data/tiny-gqa.yaml on the CPU, its byte keys compared exactly and its timing keys checked
only for presence.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
sys.path.insert(0, str(ROOT / "tools"))
import example_gguf  # noqa: E402  (tools/example_gguf.py: the GGUF file the docs' examples read)

#: the pages whose examples run: the README and every docs page but the generated CLI reference
PAGES = [README] + sorted(p for p in (ROOT / "docs").rglob("*.md") if p.name != "cli.md")

#: the first character of a rich table's lines (box drawing)
BOX_STARTS = set("┌│├└┏┃┡┣┗╭╰")


@dataclass
class Example:
    """One `$ kvcalc ...` command in a page's block and the output printed under it."""

    line: int  # line of the command in its page
    command: str  # the command line, continuations joined, without "$ "
    expected: list[str] = field(default_factory=list)
    width: int = 80
    page: str = "README.md"  # the page, relative to the repository root


def fenced_blocks(text: str) -> list[tuple[int, str, list[str]]]:
    """(line of the first content line, info string, content lines) of each fenced block."""
    blocks, cur, info, start = [], None, "", 0
    for i, ln in enumerate(text.splitlines(), 1):
        if ln.startswith("```"):
            if cur is None:
                cur, info, start = [], ln[3:].strip(), i + 1
            else:
                blocks.append((start, info, cur))
                cur = None
        elif cur is not None:
            cur.append(ln)
    return blocks


def examples(text: str, page: str = "README.md") -> list[Example]:
    """Every `$ kvcalc` command of every block that opens with one."""
    out: list[Example] = []
    for start, _info, lines in fenced_blocks(text):
        if not lines or not lines[0].startswith("$ kvcalc"):
            continue
        i = 0
        while i < len(lines):
            ln = lines[i]
            if ln.startswith("$ "):
                cmd, at = ln[2:], start + i
                while cmd.endswith("\\"):
                    i += 1
                    cmd = cmd[:-1].rstrip() + " " + lines[i].strip()
                out.append(Example(line=at, command=cmd, page=page))
            else:
                out[-1].expected.append(ln)
            i += 1
    for ex in out:
        while ex.expected and not ex.expected[-1].strip():
            ex.expected.pop()
    # shown, not run: a command elided with ` ... ` (not runnable as written), or one with no output under it
    out = [ex for ex in out if " ... " not in f" {ex.command} " and ex.expected]
    for ex in out:
        # the width a table was drawn at (its box lines); log lines printed beside it are not wrapped
        ex.width = max([80] + [len(ln.rstrip()) for ln in ex.expected if ln[:1] in BOX_STARTS])
    return out


def _rel(page: Path) -> str:
    return page.relative_to(ROOT).as_posix()


EXAMPLES = [ex for page in PAGES for ex in examples(page.read_text(encoding="utf-8"), _rel(page))]


def test_readme_has_examples():
    # the README: one example each of estimate, capacity and plan (measure is its JSON excerpt)
    readme = {ex.command.split()[1] for ex in EXAMPLES if ex.page == "README.md"}
    assert {"estimate", "capacity", "plan"} <= readme, readme
    # the docs pages as this test was written against them: estimate (table and json), gemma,
    # --gpu, check, the capacity logs of every engine, plan
    assert len(EXAMPLES) >= 25
    assert sum("|" in ex.command for ex in EXAMPLES) >= 1
    assert sum(any(ln.startswith("...") for ln in ex.expected) for ex in EXAMPLES) >= 4
    assert {
        "docs/guide/estimate.md",
        "docs/guide/gpu-fit.md",
        "docs/guide/plan.md",
        "docs/ci.md",
        "docs/engines/vllm.md",
        "docs/engines/sglang.md",
        "docs/engines/llamacpp.md",
    } <= {ex.page for ex in EXAMPLES}


def run_kvcalc(cli, argv: list[str], width: int):
    assert argv[0] == "kvcalc", argv
    return cli(*argv[1:], env={"COLUMNS": str(width)})


def _lines(text: str) -> list[str]:
    out = [ln.rstrip() for ln in text.splitlines()]
    while out and not out[-1]:
        out.pop()
    return out


#: files an example names that the repository does not hold: made before the example runs, in
#: a temporary folder that is then its working directory, by the tool the page names
EXAMPLE_FILES = {example_gguf.NAME: example_gguf.write_llama_8b}


@pytest.mark.parametrize("ex", EXAMPLES, ids=lambda ex: f"{ex.page}:L{ex.line}:{ex.command[:60]}")
def test_readme_example(ex: Example, cli, monkeypatch, tmp_path):
    made = [name for name in EXAMPLE_FILES if name in ex.command]
    if made:
        pytest.importorskip("gguf", reason="the gguf package is not installed (pip install 'kvcalc[gguf]')")
        for name in made:
            EXAMPLE_FILES[name](tmp_path, name)
    monkeypatch.chdir(tmp_path if made else ROOT)  # commands name files relative to the repository root
    kv_part, _, pipe = ex.command.partition(" | ")
    r = run_kvcalc(cli, shlex.split(kv_part), ex.width)
    assert r.exit_code == 0, r.output
    if pipe:
        argv = shlex.split(pipe)
        assert argv[:2] == ["python", "-c"], f"{ex.page} line {ex.line}: unexpected pipeline {pipe!r}"
        done = subprocess.run([sys.executable, *argv[1:]], input=r.stdout, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        got = _lines(done.stdout)
    else:
        got = _lines(r.stdout)
    want = [ln.rstrip() for ln in ex.expected]
    cut = [i for i, ln in enumerate(want) if ln.startswith("...")]
    if not cut:
        assert got == want, f"{ex.page} line {ex.line}: output differs"
        return
    assert len(cut) == 1, f"{ex.page} line {ex.line}: one elision per example"
    head, tail = want[: cut[0]], want[cut[0] + 1 :]
    assert got[: len(head)] == head, f"{ex.page} line {ex.line}: output does not open as the page shows"
    assert len(got) >= len(head) + len(tail)
    assert got[len(got) - len(tail) :] == tail, f"{ex.page} line {ex.line}: output does not end as the page shows"


def test_example_gguf_tool_prints_what_the_page_shows(tmp_path):
    # docs/guide/models.md shows `python tools/example_gguf.py` and its output before the GGUF examples
    pytest.importorskip("gguf", reason="the gguf package is not installed (pip install 'kvcalc[gguf]')")
    page = ROOT / "docs" / "guide" / "models.md"
    (shown,) = [
        b for _, _, b in fenced_blocks(page.read_text(encoding="utf-8")) if b[:1] == ["$ python tools/example_gguf.py"]
    ]
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "example_gguf.py"), str(tmp_path)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert _lines(done.stdout) == shown[1:]
    assert (tmp_path / example_gguf.NAME).is_file()


# ----- the measure JSON excerpt ------------------------------------------------------------------


def measure_excerpts() -> list[dict]:
    """The JSON blocks of `kvcalc measure` (those holding predicted_kv_bytes): the README's and the
    measure page's."""
    found = [
        lines
        for page in PAGES
        for _, info, lines in fenced_blocks(page.read_text(encoding="utf-8"))
        if info == "json" and any('"predicted_kv_bytes"' in ln for ln in lines)
    ]
    assert found
    return [json.loads("\n".join(lines)) for lines in found]


def _is_timing(key: str) -> bool:
    """Keys that hold a time or a rate: measured, they differ run to run."""
    return bool(re.search(r"_s(_|$)|per_s$", key))


@pytest.mark.parametrize("want", measure_excerpts())
def test_readme_measure_excerpt(want, cli, monkeypatch):
    pytest.importorskip("torch", reason="kvcalc measure needs torch (the README's excerpt is a CPU run)")
    monkeypatch.chdir(ROOT)
    assert {"predicted_step_s", "measured_step_s_median", "achieved_bytes_per_s"} <= {k for k in want if _is_timing(k)}
    r = cli("measure", "tests/data/tiny-gqa.yaml", "--device", "cpu", "--steps", "3", "--format", "json")
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    for key, value in want.items():
        assert key in got, key
        if not _is_timing(key):  # bytes exactly; the backend and device as printed
            assert got[key] == value, (key, got[key], value)


def python_sessions(text: str) -> list[tuple[int, str]]:
    """(line, block) for every ```python block that holds a `>>>` session."""
    return [
        (line, "\n".join(lines))
        for line, info, lines in fenced_blocks(text)
        if info.startswith("python") and any(x.lstrip().startswith(">>>") for x in lines)
    ]


def test_readme_python_sessions_run_as_shown():
    """The Python API examples are doctests: each `>>>` line's printed value must match."""
    import doctest

    sessions = [
        (page, line, block) for page in PAGES for line, block in python_sessions(page.read_text(encoding="utf-8"))
    ]
    assert sessions, "no page shows a Python API session"
    for page, line, block in sessions:
        test = doctest.DocTestParser().get_doctest(block, {}, f"{_rel(page)}:{line}", str(page), line)
        runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
        runner.run(test)
        assert runner.failures == 0, f"{_rel(page)} line {line}: the Python session prints something else"
