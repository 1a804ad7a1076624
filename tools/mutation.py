#!/usr/bin/env python
"""Mutation testing of kvcalc's arithmetic with mutmut 3, and a per-module kill-rate table.

What it mutates (the `[tool.mutmut]` table in pyproject.toml): `kvcalc/calc/`, `kvcalc/engines/`,
`kvcalc/units.py` and `kvcalc/formats.py`. mutmut 3 copies `kvcalc/` (with `kvcalc/data/`),
`tests/` (with `tests/data/`), `configs/`, `benchmarks/` and `README.md` into `mutants/`, rewrites
every function of the target files so that each mutant can be switched on by name, runs the whole
test suite once to learn which tests reach which function, then runs, for each mutant, only the
tests that reach its function (forked workers, `--max-children`, default 2).

Kill rate = (killed + timeout) / (mutants - equivalent), as mutmut scores it (its `badge` command
counts a timeout as detected: the tests did not pass); the "strict" column leaves timeouts out,
killed / (mutants - equivalent). A mutant is *equivalent* when it cannot change any
result (e.g. a default argument no caller leaves out); each one is listed, with the line it
changes and why, in `docs/mutation-equivalents.md`, and this script checks every listed entry
still names the same change (mutant numbers move when a function is edited: a stale entry is
reported and not counted). "no tests" mutants (code no test reaches) count as not killed.

Usage, from anywhere (the script works in the repo root):

    python tools/mutation.py                          # fresh full run (about 6 min on 2 cores) + table
    python tools/mutation.py --only kvcalc/units.py   # one module (or folder), fresh
    python tools/mutation.py --resume                 # keep mutants/ results, test only unchecked mutants
    python tools/mutation.py --survivors              # re-test the current survivors (after adding tests)
    python tools/mutation.py --report                 # no run: the table from the last results
    python tools/mutation.py --report --list          # ... and every survivor with its diff
    python tools/mutation.py --ledger                 # every module's last recorded run, while unchanged

Each run records its fully checked modules in `docs/mutation-ledger.json` with the SHA-256 of the
source they ran on; `--ledger` adds up the rows whose source is unchanged and names the modules
that changed since (or never ran): so the modules can be run one at a time, as the code settles.

Exit status: 0 when the kill rate over the selected modules is at least `--min-rate` (default 90),
1 when below, 2 when mutmut itself failed. Needs `mutmut` 3.8 in the same environment as this
Python (`pip install mutmut==3.8.1`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MUTANTS_DIR = ROOT / "mutants"
EQUIVALENTS_FILE = ROOT / "docs" / "mutation-equivalents.md"
#: per-module results of the last run of each module, keyed by the source's SHA-256 (see `--ledger`)
LEDGER_FILE = ROOT / "docs" / "mutation-ledger.json"
#: the modules mutated, as in `only_mutate` of `[tool.mutmut]` (keep the two in step)
TARGETS = ("kvcalc/calc", "kvcalc/engines", "kvcalc/units.py", "kvcalc/formats.py")
#: a mutant name, e.g. `kvcalc.units.x_parse_size__mutmut_3` or `kvcalc.formats.xǁStorageFormatǁbytes_for__mutmut_2`
MUTANT_NAME = re.compile(r"kvcalc\.[A-Za-z0-9_.ǁ]+__mutmut_\d+")
KILLED, SURVIVED, NO_TESTS, TIMEOUT = "killed", "survived", "no tests", "timeout"


def mutmut_exe() -> str:
    """The `mutmut` script beside this Python (mutmut warns against `python -m mutmut run`)."""
    beside = Path(sys.executable).parent / "mutmut"
    if beside.exists():
        return str(beside)
    found = shutil.which("mutmut")
    if not found:
        sys.exit("mutmut is not installed in this environment: pip install mutmut==3.8.1")
    return found


def module_of(mutant: str) -> str:
    """`kvcalc.calc.kv_cache.x_estimate__mutmut_3` -> `kvcalc/calc/kv_cache.py` (a package's own
    functions, named `kvcalc.engines.x_f__mutmut_1` by mutmut, map to its `__init__.py`)."""
    dotted = mutant.partition("__mutmut_")[0]
    parts = dotted.split(".")
    i = next(i for i, p in enumerate(parts) if p.startswith(("x_", "xǁ")))
    path = "/".join(parts[:i])
    return path + ".py" if (ROOT / (path + ".py")).exists() else path + "/__init__.py"


def function_of(mutant: str) -> str:
    """`kvcalc.units.x_parse_size__mutmut_3` -> `parse_size`; methods as `Class.method`."""
    last = mutant.partition("__mutmut_")[0].rsplit(".", 1)[-1]
    return last[2:] if last.startswith("x_") else last.strip("xǁ").replace("ǁ", ".")


def selected(module: str, only: list[str]) -> bool:
    return any(module == o or module.startswith(o.rstrip("/") + "/") for o in only)


def glob_for(path: str) -> str:
    """mutmut's mutant-name glob for a file or folder: `kvcalc/units.py` -> `kvcalc.units.*`."""
    p = path.rstrip("/")
    if p.endswith("__init__.py"):
        return p[: -len("/__init__.py")].replace("/", ".") + ".x*"
    if p.endswith(".py"):
        return p[:-3].replace("/", ".") + ".*"
    return p.replace("/", ".") + ".*"


def results() -> dict[str, str]:
    """Mutant name -> status, from `mutmut results --all true` (mutmut's own reading of mutants/)."""
    out = subprocess.run([mutmut_exe(), "results", "--all", "true"], cwd=ROOT, capture_output=True, text=True)
    if out.returncode != 0:
        sys.stderr.write(out.stdout + out.stderr)
        sys.exit(2)
    status: dict[str, str] = {}
    for line in out.stdout.splitlines():
        name, sep, st = line.strip().rpartition(": ")
        if sep and MUTANT_NAME.fullmatch(name):
            status[name] = st
    return status


def diff_of(mutant: str) -> str:
    out = subprocess.run([mutmut_exe(), "show", mutant], cwd=ROOT, capture_output=True, text=True)
    return out.stdout


def changed_lines(diff: str) -> list[str]:
    """The `+` lines of a mutant's diff, stripped (what the mutant wrote)."""
    return [ln[1:].strip() for ln in diff.splitlines() if ln.startswith("+") and not ln.startswith("+++")]


@dataclass
class Equivalent:
    name: str
    line: str  # the mutated line as the entry quotes it
    why: str


def read_equivalents(path: Path) -> list[Equivalent]:
    """Rows `| kvcalc.x.y__mutmut_N | `mutated line` | why |` of the equivalents file."""
    if not path.exists():
        return []
    eqs = []
    for row in path.read_text().splitlines():
        cells = [c.strip() for c in row.strip().strip("|").split("|")] if row.lstrip().startswith("|") else []
        if len(cells) >= 3 and MUTANT_NAME.fullmatch(cells[0].strip("`")):
            eqs.append(Equivalent(cells[0].strip("`"), cells[1].strip("`").replace("\\|", "|"), cells[2]))
    return eqs


@dataclass
class Row:
    module: str
    counts: dict[str, int] = field(default_factory=dict)
    equivalent: int = 0

    @property
    def total(self) -> int:
        """Every mutant: the equivalent ones are counted in `equivalent`, not under their status."""
        return sum(self.counts.values()) + self.equivalent

    def n(self, status: str) -> int:
        return self.counts.get(status, 0)

    @property
    def rate(self) -> float | None:
        """(killed + timeout) / (mutants - equivalent), in percent."""
        denom = self.total - self.equivalent
        return 100.0 * (self.n(KILLED) + self.n(TIMEOUT)) / denom if denom else None

    @property
    def strict_rate(self) -> float | None:
        """killed / (mutants - equivalent), in percent (timeouts count as not killed)."""
        denom = self.total - self.equivalent
        return 100.0 * self.n(KILLED) / denom if denom else None


def table(rows: list[Row], markdown: bool) -> str:
    # the status columns count non-equivalent mutants only: mutants = those + equivalent
    head = [
        "module",
        "mutants",
        "killed",
        "survived",
        "no tests",
        "timeout",
        "other",
        "equivalent",
        "kill rate",
        "strict",
    ]
    body = []
    for r in rows:
        other = r.total - r.equivalent - sum(r.n(s) for s in (KILLED, SURVIVED, NO_TESTS, TIMEOUT))
        rate = "-" if r.rate is None else f"{r.rate:.1f}%"
        strict = "-" if r.strict_rate is None else f"{r.strict_rate:.1f}%"
        body.append(
            [
                r.module,
                r.total,
                r.n(KILLED),
                r.n(SURVIVED),
                r.n(NO_TESTS),
                r.n(TIMEOUT),
                other,
                r.equivalent,
                rate,
                strict,
            ]
        )
    cells = [head] + [[str(c) for c in b] for b in body]
    if markdown:
        lines = ["| " + " | ".join(c) + " |" for c in cells]
        lines.insert(1, "| " + " | ".join(["---"] + ["---:"] * (len(head) - 1)) + " |")
        return "\n".join(lines)
    w = [max(len(c[i]) for c in cells) for i in range(len(head))]
    fmt = lambda c: "  ".join(c[0].ljust(w[0]) if i == 0 else c[i].rjust(w[i]) for i in range(len(c)))  # noqa: E731
    lines = [fmt(cells[0]), "  ".join("-" * x for x in w)] + [fmt(c) for c in cells[1:]]
    lines.insert(len(lines) - 1, lines[1])  # a rule above the total
    return "\n".join(lines)


def source_sha(module: str) -> str | None:
    """SHA-256 of a module's source as it is now (None when the file is gone)."""
    path = ROOT / module
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None


def target_modules() -> list[str]:
    """Every mutated module file (the .py files under `TARGETS`), as repo-relative paths."""
    out: list[str] = []
    for t in TARGETS:
        p = ROOT / t
        out += [str(f.relative_to(ROOT)) for f in sorted(p.rglob("*.py"))] if p.is_dir() else [t]
    return out


def read_ledger(path: Path = LEDGER_FILE) -> dict[str, dict]:
    return json.loads(path.read_text()) if path.exists() else {}


def record(rows: list[Row], path: Path = LEDGER_FILE) -> None:
    """Store each fully checked module's row in the ledger, with the SHA-256 of the source it ran
    on: a later `--ledger` counts a row only while the module's source is byte for byte the same
    (tests may only have grown since, which can only kill more mutants)."""
    ledger = read_ledger(path)
    head = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True
    ).stdout.strip()
    for r in rows:
        if r.n("not checked"):
            continue  # an interrupted module is not a result
        ledger[r.module] = {
            "sha256": source_sha(r.module),
            "date": date.today().isoformat(),
            "mutmut": mutmut_version(),
            "commit": head or "?",
            "counts": dict(sorted(r.counts.items())),
            "equivalent": r.equivalent,
        }
    path.write_text(json.dumps(dict(sorted(ledger.items())), indent=1) + "\n")


def ledger_rows(path: Path = LEDGER_FILE) -> tuple[list[Row], list[str]]:
    """(rows of the ledger whose source is unchanged, problems: modules never run or changed since)."""
    ledger = read_ledger(path)
    rows, problems = [], []
    for m in target_modules():
        e = ledger.get(m)
        if e is None:
            problems.append(f"{m}: no recorded run")
        elif e["sha256"] != source_sha(m):
            problems.append(f"{m}: changed since its run on {e['date']} (commit {e['commit']}); run --only {m}")
        else:
            if e["counts"] or e["equivalent"]:
                rows.append(Row(m, dict(e["counts"]), e["equivalent"]))
    return rows, problems


def run_mutmut(globs: list[str], max_children: int, log: Path) -> None:
    cmd = [mutmut_exe(), "run", "--max-children", str(max_children), *globs]
    shown = cmd[1:] if len(globs) <= 8 else cmd[1:4] + [f"<{len(globs)} mutant names>"]
    print("$ mutmut " + " ".join(shown), flush=True)
    t0 = time.monotonic()
    # one OpenMP thread: mutmut forks a worker per mutant from a process whose stats run used torch
    # (tests/measure); a forked child that runs a torch op then waits forever at libgomp's team
    # barrier for threads that did not survive the fork (a sleeping process: mutmut's CPU-time
    # limit never fires), so every mutant the measure tests reach (units.parse_size,
    # formats.storage_format, ...) would hang the run
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    with open(log, "w") as f:
        rc = subprocess.run(cmd, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT, env=env).returncode
    text = log.read_text(errors="replace")
    for line in text.splitlines():
        if "done in" in line or "mutations/second" in line:
            print("  " + line.strip().split("\r")[-1])
    print(f"  mutmut run took {time.monotonic() - t0:.0f} s (log: {log.relative_to(ROOT)})")
    if rc != 0:
        print(text[-3000:])
        print(f"mutmut run failed (exit {rc}); see {log}", file=sys.stderr)
        sys.exit(2)


def main() -> int:
    p = argparse.ArgumentParser(
        description="Run mutmut over kvcalc's arithmetic (calc/, engines/, units.py, formats.py) and print "
        "a per-module table: mutants, killed, survived, timeout, equivalent (from "
        "docs/mutation-equivalents.md), kill rate = (killed + timeout) / (mutants - equivalent) "
        "and the strict rate killed / (mutants - equivalent).",
        epilog="By default the run is fresh (mutants/ is deleted first), since mutmut keeps a survivor's "
        "verdict even after new tests are added. Modules: " + ", ".join(TARGETS),
    )
    p.add_argument(
        "--only",
        action="append",
        metavar="PATH",
        help="a target file or folder, e.g. kvcalc/units.py or kvcalc/engines (repeatable)",
    )
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--resume", action="store_true", help="keep mutants/ and its verdicts; test only mutants not yet checked"
    )
    mode.add_argument(
        "--survivors",
        action="store_true",
        help="re-test the current survivors, no-test and timed-out mutants (after adding tests)",
    )
    mode.add_argument("--report", action="store_true", help="run nothing; print the table from mutants/")
    mode.add_argument(
        "--ledger",
        action="store_true",
        help="run nothing; the table over every module from docs/mutation-ledger.json (each module's "
        "last recorded run, counted only while its source is unchanged)",
    )
    p.add_argument("--max-children", type=int, default=2, help="mutmut workers (default 2: a shared 2-core box)")
    p.add_argument("--list", action="store_true", help="print each survivor not listed as equivalent, with its diff")
    p.add_argument("--markdown", action="store_true", help="print the table as Markdown (for docs/mutation.md)")
    p.add_argument("--min-rate", type=float, default=90.0, help="exit 1 below this kill rate, in percent (default 90)")
    p.add_argument("--equivalents", type=Path, default=EQUIVALENTS_FILE, help="the equivalents file")
    a = p.parse_args()

    if a.ledger:
        rows_l, problems = ledger_rows()
        total_l = Row("total")
        for r in rows_l:
            for k, v in r.counts.items():
                total_l.counts[k] = total_l.counts.get(k, 0) + v
            total_l.equivalent += r.equivalent
        print(f"mutation testing ledger ({LEDGER_FILE.relative_to(ROOT)}), read {date.today().isoformat()}")
        print(table(rows_l + [total_l], a.markdown))
        for pr in problems:
            print(f"not counted: {pr}")
        rate = total_l.rate or 0.0
        print(
            f"\nkill rate {rate:.1f}% over the modules counted; strict {total_l.strict_rate or 0.0:.1f}%; "
            f"threshold {a.min_rate:g}%" + (f"; {len(problems)} module(s) not counted" if problems else "")
        )
        return 0 if rate >= a.min_rate and not problems else 1

    only = [o.rstrip("/") for o in (a.only or list(TARGETS))]
    for o in only:
        if not (ROOT / o).exists() or not any(selected(o, [t]) for t in TARGETS):
            p.error(f"--only {o}: not one of the mutated modules ({', '.join(TARGETS)}) or a file in them")

    t0 = time.monotonic()
    if not a.report:
        globs = [glob_for(o) for o in only] if a.only else []
        if a.survivors:
            if not MUTANTS_DIR.exists():
                p.error("--survivors needs an earlier run's mutants/")
            globs = sorted(
                n for n, s in results().items() if s in (SURVIVED, NO_TESTS, TIMEOUT) and selected(module_of(n), only)
            )
            if not globs:
                print("no survivors to re-test")
        elif not a.resume and MUTANTS_DIR.exists():
            shutil.rmtree(MUTANTS_DIR)
        if globs or not a.survivors:
            MUTANTS_DIR.mkdir(exist_ok=True)
            run_mutmut(globs, a.max_children, MUTANTS_DIR / "tools-mutation-run.log")
    elif not MUTANTS_DIR.exists():
        p.error("--report needs an earlier run's mutants/")

    status = {n: s for n, s in results().items() if selected(module_of(n), only)}
    eqs = read_equivalents(a.equivalents)
    equivalent: set[str] = set()
    for e in eqs:
        st = status.get(e.name)
        if st is None:
            if selected(module_of(e.name), only):
                print(f"warning: equivalents entry {e.name} names no mutant (stale: renumber it)")
            continue
        if e.line and e.line not in changed_lines(diff_of(e.name)):
            print(f"warning: equivalents entry {e.name} no longer changes `{e.line}` (stale: renumber it); not counted")
            continue
        if st == KILLED:
            print(f"note: {e.name} is listed as equivalent but a test kills it; remove the row")
            continue
        equivalent.add(e.name)

    rows: dict[str, Row] = {}
    for name, st in status.items():
        r = rows.setdefault(module_of(name), Row(module_of(name)))
        if name in equivalent:
            r.equivalent += 1
        else:
            r.counts[st] = r.counts.get(st, 0) + 1
    ordered = [rows[m] for m in sorted(rows)]
    total = Row("total")
    for r in ordered:
        for k, v in r.counts.items():
            total.counts[k] = total.counts.get(k, 0) + v
        total.equivalent += r.equivalent
    not_checked = total.n("not checked")
    if not a.report:  # modules with no function to mutate are recorded too, as 0 mutants
        record(ordered + [Row(m) for m in target_modules() if selected(m, only) and m not in rows])

    print()
    print(
        f"mutation testing, {date.today().isoformat()}, mutmut {mutmut_version()}"
        + ("" if a.report else f", {time.monotonic() - t0:.0f} s")
    )
    print(table(ordered + [total], a.markdown))
    if not_checked:
        print(f"\n{not_checked} mutants not checked yet (an interrupted run, or --only elsewhere before)")
    survivors = sorted(n for n, s in status.items() if s not in (KILLED, TIMEOUT) and n not in equivalent)
    print(
        f"\n{len(survivors)} mutants not killed and not listed as equivalent"
        + (":" if a.list else " (--list shows them; `mutmut show NAME` shows one)")
    )
    if a.list:
        for n in survivors:
            print(f"\n## {n}  [{status[n]}]  {function_of(n)}")
            print(
                "\n".join(
                    ln
                    for ln in diff_of(n).splitlines()[1:]
                    if ln.startswith(("+", "-")) and not ln.startswith(("+++", "---"))
                )
            )
    rate = total.rate or 0.0
    print(
        f"\nkill rate {rate:.1f}% ((killed + timeout) / (mutants - equivalent); strict, killed only: "
        f"{total.strict_rate or 0.0:.1f}%; threshold {a.min_rate:g}%)"
    )
    return 0 if rate >= a.min_rate else 1


def mutmut_version() -> str:
    try:
        from importlib.metadata import version

        return version("mutmut")
    except Exception:  # noqa: BLE001 - a missing version is not worth failing a report
        return "?"


if __name__ == "__main__":
    sys.exit(main())
