"""The package layout as DESIGN.md draws it: one direction of flow, no import cycle, each module
importable on its own, and the layering rules.

The import graph is read from the source with `ast`: every `import` / `from ... import` statement
in a `kvcalc` module (module level and inside functions) is an edge. `import a.b.c` is an edge to
`a.b.c`; `from kvcalc.x import name` is an edge to `kvcalc.x.name` when that is a module, else to
`kvcalc.x`; relative imports are resolved against the importing package. A package's `__init__`
is the package's own node (`kvcalc.cli` importing `kvcalc.cli.app` is an edge between them).
Parent packages a submodule import runs implicitly are not edges.

That `kvcalc estimate` imports neither torch nor matplotlib is checked where it always was:
`tests/cli/test_cli.py::test_estimate_never_imports_torch` and
`tests/calc/test_roofline.py::test_estimate_does_not_import_matplotlib`.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "kvcalc"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def modules() -> dict[str, Path]:
    """Every module of the package: dotted name -> file."""
    return {module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def _type_checking_only(tree: ast.AST) -> set[int]:
    """ids of the nodes under `if TYPE_CHECKING:`: imports for type checkers, never run."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and (
            (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING")
            or (isinstance(node.test, ast.Attribute) and node.test.attr == "TYPE_CHECKING")
        ):
            out.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return out


def imports_of(name: str) -> set[str]:
    """Every module `name` imports when it runs (any package, any depth in the file, but not
    the imports under `if TYPE_CHECKING:`), resolved as above."""
    path = modules()[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    skip = _type_checking_only(tree)
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            for a in node.names:
                sub = f"{target}.{a.name}"
                out.add(sub if sub in modules() else target)
    return out


@cache
def graph() -> dict[str, set[str]]:
    """kvcalc module -> the kvcalc modules it imports."""
    return {m: {t for t in imports_of(m) if t in modules()} for m in modules()}


def find_cycle(g: dict[str, set[str]]) -> list[str] | None:
    """One cycle of `g` as [a, b, ..., a], or None (iterative DFS, white/grey/black)."""
    colour = dict.fromkeys(g, 0)
    for start in sorted(g):
        if colour[start]:
            continue
        stack: list[tuple[str, list[str]]] = [(start, sorted(g[start]))]
        path = [start]
        colour[start] = 1
        while stack:
            node, todo = stack[-1]
            if not todo:
                colour[node] = 2
                stack.pop()
                path.pop()
                continue
            nxt = todo.pop(0)
            if colour.get(nxt, 2) == 1:
                return path[path.index(nxt) :] + [nxt]
            if colour.get(nxt, 2) == 0:
                colour[nxt] = 1
                path.append(nxt)
                stack.append((nxt, sorted(g[nxt])))
    return None


# ----- the graph reader itself -------------------------------------------------------------------


def test_graph_reader_sees_every_kind_of_import():
    g = graph()
    assert "kvcalc.cli.app" in g["kvcalc.cli"]  # a package __init__ importing its submodule
    assert "kvcalc.calc.kv_cache" in g["kvcalc.engines.ideal"]  # from kvcalc.calc.kv_cache import ...
    assert "kvcalc.engines" in g["kvcalc.engines.ideal"]  # from kvcalc.engines import EngineResult
    assert "kvcalc.formats" in g["kvcalc.schema"]  # inside a validator (function level)
    assert "kvcalc.units" in g["kvcalc.cli.options"]  # inside a function
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycle():
    cycle = find_cycle(graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


# ----- every module imports on its own -------------------------------------------------------------

IMPORT_EACH = """
import importlib, json, sys, traceback
failed = {}
for name in json.loads(sys.argv[1]):
    for m in [m for m in sys.modules if m == "kvcalc" or m.startswith("kvcalc.")]:
        del sys.modules[m]
    importlib.invalidate_caches()
    try:
        importlib.import_module(name)
    except Exception:
        failed[name] = traceback.format_exc(limit=3)
print(json.dumps(failed))
"""


def test_each_module_imports_on_its_own():
    # one fresh interpreter; before each module every kvcalc module is dropped from sys.modules,
    # so each is imported as if first (third-party packages stay loaded: torch costs its import once)
    names = sorted(modules())
    out = subprocess.run(
        [sys.executable, "-c", IMPORT_EACH, json.dumps(names)], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert out.returncode == 0, out.stderr
    failed = json.loads(out.stdout.strip().splitlines()[-1])
    assert failed == {}, "\n".join(f"{k}:\n{v}" for k, v in failed.items())


# ----- layering rules (DESIGN.md "The flow") ---------------------------------------------------------

#: what kvcalc/calc/ may import besides the standard library and kvcalc.calc.* itself
CALC_MAY_IMPORT = {"kvcalc.schema", "kvcalc.results", "kvcalc.formats", "kvcalc.units", "kvcalc.errors"}

#: where the code breaks a rule today: (module, rule) -> why. Each is an expected failure (strict,
#: so fixing the code turns it into an error until the entry goes) for the lead to decide on.
KNOWN_BREAKS: dict[tuple[str, str], str] = {}

#: modules allowed to import kvcalc.cli from outside kvcalc/cli/, and why
CLI_IMPORTERS_OUTSIDE = {"kvcalc.__main__": "`python -m kvcalc` is the CLI's entry point"}


def _third_party_or_kvcalc(imported: set[str]) -> set[str]:
    stdlib = sys.stdlib_module_names
    return {m for m in imported if m.split(".")[0] not in stdlib and m != "__future__"}


def _calc_violations(name: str) -> set[str]:
    """What `name` imports beyond the calc layer's allowance (third-party packages by top name)."""
    return {
        m if m.startswith("kvcalc") else m.split(".")[0]
        for m in _third_party_or_kvcalc(imports_of(name))
        if not (m in CALC_MAY_IMPORT or m == "kvcalc.calc" or m.startswith("kvcalc.calc."))
    }


def _cases(prefix: str, rule: str) -> list:
    out = []
    for name in sorted(modules()):
        if name == prefix or name.startswith(prefix + "."):
            why = KNOWN_BREAKS.get((name, rule))
            out.append(pytest.param(name, marks=pytest.mark.xfail(reason=why, strict=True)) if why else name)
    return out


@pytest.mark.parametrize("name", _cases("kvcalc.calc", "calc"))
def test_calc_imports_only_the_schema_formats_units_errors_and_stdlib(name):
    # no rich, typer, yaml, torch, pydantic; no kvcalc.load, kvcalc.cli, kvcalc.report
    assert _calc_violations(name) == set()


def test_calc_rule_catches_a_break():
    # the rule's own check: a heavy or upward import is caught, an allowed one is not
    assert _calc_violations("kvcalc.cli.output") >= {"rich", "typer", "kvcalc.report"}
    assert _calc_violations("kvcalc.calc.kv_cache") == set()


@pytest.mark.parametrize(
    "name", [m for m in sorted(modules()) if not (m == "kvcalc.cli" or m.startswith("kvcalc.cli."))]
)
def test_nothing_outside_cli_imports_cli(name):
    uses = {m for m in graph()[name] if m == "kvcalc.cli" or m.startswith("kvcalc.cli.")}
    if name in CLI_IMPORTERS_OUTSIDE:
        return
    assert uses == set(), f"{name} imports {sorted(uses)}"


@pytest.mark.parametrize("name", _cases("kvcalc.report", "report"))
def test_report_does_not_import_cli(name):
    assert not {m for m in graph()[name] if m == "kvcalc.cli" or m.startswith("kvcalc.cli.")}


def test_cli_entry_point_exemption_is_still_needed():
    # kvcalc/__main__.py imports kvcalc.cli (it runs main); if it stops, drop the exemption
    for name in CLI_IMPORTERS_OUTSIDE:
        assert "kvcalc.cli" in graph()[name]


def test_results_lists_every_result_once():
    """`kvcalc.results` loads each result from its submodule on demand: the name table, `__all__`
    and the submodules agree, so no result is missing or defined twice."""
    import importlib

    import kvcalc.results as results

    assert sorted(results.WHERE) == results.__all__
    for name, mod in results.WHERE.items():
        assert getattr(importlib.import_module(f"kvcalc.results.{mod}"), name) is getattr(results, name)


def test_estimate_builds_only_its_own_results():
    """`kvcalc estimate` (no --gpu, no --engine) imports the KV results and no other result module."""
    code = (
        "import sys; sys.argv = ['kvcalc', 'estimate', 'llama-3.1-8b', '-s', '8k']\n"
        "from kvcalc.cli import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('kvcalc.results.')), file=sys.stderr)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.stderr.strip().splitlines()[-1] == "['kvcalc.results.kv']"


#: each engine's registry of versions: (module holding the registry, its dict, the current version's name)
VERSION_REGISTRIES = (
    ("kvcalc.engines.vllm.versions", "VERSION_MODULES", "CURRENT_VERSION"),
    ("kvcalc.engines.llamacpp.versions", "VERSION_MODULES", "CURRENT_VERSION"),
)


@pytest.mark.parametrize("registry", VERSION_REGISTRIES, ids=lambda r: r[0])
def test_an_old_engine_version_is_one_module(registry):
    """No module but the registry imports an old engine version's module (the current one's
    modules read alone), so an old version goes by deleting its module and its registry line."""
    import importlib

    where, table, current = registry
    mod = importlib.import_module(where)
    versions = getattr(mod, table)
    old = {m for v, m in versions.items() if v != getattr(mod, current)}
    assert old and all(m in modules() for m in old)
    for name in modules():
        if name not in old:
            assert not imports_of(name) & old, f"{name} imports an old version's module"
