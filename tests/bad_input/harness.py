"""The bad-input harness (issue 12), imported by each module here: every case runs the real CLI
in a fresh process with a time bound (`subprocess.run(..., timeout=)`: a hang fails the case
instead of the suite), and a refusal is checked the same way everywhere (`refused`): exit 2 (or
the code given), exactly one line on stderr, starting `error:` and naming the file / option /
field, stdout empty (or valid JSON under `--format json`), and no raw terminal control character
in either stream.

One module per kind of bad input: `test_writers.py` (item 1), `test_readers.py` (2),
`test_yaml_bounds.py` (3), `test_output_bounds.py` (4), `test_control_chars.py` (9),
`test_import_round_trip.py` (10). Each bug report becomes a case.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: seconds a case may take: a refusal costs a start-up (~0.3 s here, more on a loaded machine)
TIME_BOUND_S = 30

#: a raw control character a terminal would act on (C0 but newline and tab, DEL, C1)
RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str

    @property
    def err_lines(self) -> list[str]:
        return self.stderr.splitlines()


def run_kvcalc(
    *args: str, cwd: Path | None = None, timeout: float = TIME_BOUND_S, env: dict[str, str] | None = None
) -> Run:
    """`python -m kvcalc ARGS` from the repository root (so this tree's package runs), bounded
    by `timeout` seconds; the streams decoded as UTF-8 with errors replaced."""
    e = {**os.environ, "COLUMNS": "80", "PYTHONPATH": str(ROOT), **(env or {})}
    e.pop("KVCALC_DEBUG", None)
    p = subprocess.run(
        [sys.executable, "-m", "kvcalc", *map(str, args)],
        capture_output=True,
        timeout=timeout,
        cwd=cwd or ROOT,
        env=e,
        stdin=subprocess.DEVNULL,
    )
    return Run(p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace"))


def no_raw_controls(r: Run) -> None:
    """Neither stream holds a raw terminal control character."""
    for name, text in (("stdout", r.stdout), ("stderr", r.stderr)):
        m = RAW_CONTROL.search(text)
        assert m is None, f"raw {m.group()!r} in {name}: {text[max(m.start() - 40, 0) : m.end() + 40]!r}"


def refused(r: Run, *names: str, code: int = 2, json_out: bool = False) -> str:
    """Assert the refusal contract and return the one stderr line (without `error: `)."""
    assert r.code == code, (r.code, r.stdout[-500:], r.stderr[-2000:])
    lines = r.err_lines
    assert len(lines) == 1, lines[:20]
    assert lines[0].startswith("error: "), lines
    for n in names:
        assert n in lines[0], (n, lines[0])
    if json_out and r.stdout.strip():
        json.loads(r.stdout)
    else:
        assert r.stdout == "", r.stdout[:500]
    no_raw_controls(r)
    return lines[0].removeprefix("error: ")


def snapshot(folder: Path) -> dict[str, bytes | str]:
    """Every entry of `folder` (not recursive): a file's bytes, a link's target, else its kind,
    so that a test can assert that nothing changed, and no temporary file was left."""
    out: dict[str, bytes | str] = {}
    for p in sorted(folder.iterdir()):
        if p.is_symlink():
            out[p.name] = "-> " + os.readlink(p)
        elif p.is_file():
            out[p.name] = p.read_bytes()
        else:
            out[p.name] = "dir" if p.is_dir() else "other"
    return out
