"""README.md's examples are what the program prints.

The README is parsed generically: every fenced block whose first line is `$ kvcalc ...` is split
into commands (each line starting with `$ `, a trailing `\\` continuing it) and the output printed
under each. Each command runs through the CLI runner at the width its output was printed at (its
widest output line, at least 80: rich tables fill the terminal), from the repository root, and its
output is compared line by line (trailing spaces ignored). A line starting with `...` (`...`, or
`...the KV table above, then:`) elides: only the lines before it must open the output and the
lines after it must close it. A command piped into `python -c CODE` has CODE run on the JSON and
its printed line compared. The `kvcalc measure` JSON excerpt has no command line: it is run on
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

#: the first character of a rich table's lines (box drawing)
BOX_STARTS = set("┌│├└┏┃┡┣┗╭╰")


@dataclass
class Example:
    """One `$ kvcalc ...` command in a README block and the output printed under it."""

    line: int           # README line of the command
    command: str        # the command line, continuations joined, without "$ "
    expected: list[str] = field(default_factory=list)
    width: int = 80


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


def examples(text: str) -> list[Example]:
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
                out.append(Example(line=at, command=cmd))
            else:
                out[-1].expected.append(ln)
            i += 1
    for ex in out:
        while ex.expected and not ex.expected[-1].strip():
            ex.expected.pop()
        # the width a table was drawn at (its box lines); log lines printed beside it are not wrapped
        ex.width = max([80] + [len(ln.rstrip()) for ln in ex.expected if ln[:1] in BOX_STARTS])
    return out


EXAMPLES = examples(README.read_text(encoding="utf-8"))


def test_readme_has_examples():
    # the sections this test was written against: estimate (table and json), gemma, --gpu, check,
    # three capacity logs
    assert len(EXAMPLES) >= 8
    assert sum("|" in ex.command for ex in EXAMPLES) >= 1
    assert sum(any(ln.startswith("...") for ln in ex.expected) for ex in EXAMPLES) >= 4


def run_kvcalc(cli, argv: list[str], width: int):
    assert argv[0] == "kvcalc", argv
    return cli(*argv[1:], env={"COLUMNS": str(width)})


def _lines(text: str) -> list[str]:
    out = [ln.rstrip() for ln in text.splitlines()]
    while out and not out[-1]:
        out.pop()
    return out


def _llama_8b_gguf(folder: Path, name: str) -> None:
    """A GGUF file with Llama-3.1-8B-Instruct's metadata as llama.cpp's converter writes it (file
    type Q4_K_M) and tiny tensors (tests/load/gguf_files.py); needs the gguf package."""
    sys.path.insert(0, str(ROOT / "tests" / "load"))
    from gguf_files import ENDS, LLAMA_8B_KV, tiny_layers, write_gguf

    write_gguf(folder / name, "llama", LLAMA_8B_KV, tiny_layers(32) + ENDS)


#: files a README example names that the repository does not hold: made before the example runs, in
#: a temporary folder that is then its working directory
EXAMPLE_FILES = {"Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf": _llama_8b_gguf}


def speed_example(command: str) -> bool:
    """An example whose output holds speed figures: estimate with --gpu, check, plan."""
    words = command.split()
    return len(words) > 1 and (words[1] in ("check", "plan") or (words[1] == "estimate" and "--gpu" in words))


@pytest.mark.parametrize("ex", EXAMPLES, ids=lambda ex: f"L{ex.line}:{ex.command[:60]}")
def test_readme_example(ex: Example, cli, monkeypatch, tmp_path, request):
    if speed_example(ex.command):
        request.applymarker(pytest.mark.xfail(strict=False, reason=(
            "issue 21 changed the speed figures (decode reads the batch's embedding rows; estimate shows the "
            "speed model's terms); README.md is not this branch's to edit: its numbers are refreshed with its rewrite")))
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
        assert argv[:2] == ["python", "-c"], f"README line {ex.line}: unexpected pipeline {pipe!r}"
        done = subprocess.run([sys.executable, *argv[1:]], input=r.stdout, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        got = _lines(done.stdout)
    else:
        got = _lines(r.stdout)
    want = [ln.rstrip() for ln in ex.expected]
    cut = [i for i, ln in enumerate(want) if ln.startswith("...")]
    if not cut:
        assert got == want, f"README line {ex.line}: output differs"
        return
    assert len(cut) == 1, f"README line {ex.line}: one elision per example"
    head, tail = want[:cut[0]], want[cut[0] + 1:]
    assert got[:len(head)] == head, f"README line {ex.line}: output does not open as the README shows"
    assert len(got) >= len(head) + len(tail)
    assert got[len(got) - len(tail):] == tail, f"README line {ex.line}: output does not end as the README shows"


# ----- the measure JSON excerpt ------------------------------------------------------------------

def measure_excerpt() -> dict:
    """The JSON block of the `kvcalc measure` section (the one holding predicted_kv_bytes)."""
    found = [lines for _, info, lines in fenced_blocks(README.read_text(encoding="utf-8"))
             if info == "json" and any('"predicted_kv_bytes"' in ln for ln in lines)]
    assert len(found) == 1
    return json.loads("\n".join(found[0]))


def _is_timing(key: str) -> bool:
    """Keys that hold a time or a rate: measured, they differ run to run."""
    return bool(re.search(r"_s(_|$)|per_s$", key))


def test_readme_measure_excerpt(cli, monkeypatch):
    pytest.importorskip("torch", reason="kvcalc measure needs torch (the README's excerpt is a CPU run)")
    monkeypatch.chdir(ROOT)
    want = measure_excerpt()
    assert {"predicted_step_s", "measured_step_s_median", "achieved_bytes_per_s"} <= {k for k in want if _is_timing(k)}
    r = cli("measure", "tests/data/tiny-gqa.yaml", "--device", "cpu", "--steps", "3", "--format", "json")
    assert r.exit_code == 0, r.output
    got = json.loads(r.stdout)
    for key, value in want.items():
        assert key in got, key
        if not _is_timing(key):  # bytes exactly; the backend and device as printed
            assert got[key] == value, (key, got[key], value)


def python_sessions(text: str) -> list[tuple[int, str]]:
    """(README line, block) for every ```python block that holds a `>>>` session."""
    return [(line, "\n".join(lines)) for line, info, lines in fenced_blocks(text)
            if info.startswith("python") and any(x.lstrip().startswith(">>>") for x in lines)]


def test_readme_python_sessions_run_as_shown():
    """The Python API examples are doctests: each `>>>` line's printed value must match."""
    import doctest

    sessions = python_sessions(README.read_text(encoding="utf-8"))
    assert sessions, "README.md shows no Python API session"
    for line, block in sessions:
        test = doctest.DocTestParser().get_doctest(block, {}, f"README.md:{line}", str(README), line)
        runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
        runner.run(test)
        assert runner.failures == 0, f"README line {line}: the Python session prints something else"
