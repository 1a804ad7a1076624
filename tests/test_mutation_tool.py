"""tools/mutation.py's ledger: a module's recorded row counts only while its source is unchanged."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tool():
    spec = importlib.util.spec_from_file_location("mutation_tool", ROOT / "tools" / "mutation.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["mutation_tool"] = mod  # dataclasses look their module up while building
    try:
        spec.loader.exec_module(mod)
        yield mod
    finally:
        sys.modules.pop("mutation_tool", None)


def test_ledger_counts_unchanged_modules_only(tool, tmp_path):
    ledger = tmp_path / "ledger.json"
    tool.record(
        [
            tool.Row("kvcalc/units.py", {"killed": 9, "survived": 1}, 2),
            tool.Row("kvcalc/formats.py", {"killed": 5, "not checked": 3}),
        ],
        ledger,
    )
    data = json.loads(ledger.read_text())
    assert set(data) == {"kvcalc/units.py"}  # an interrupted module is not recorded
    assert data["kvcalc/units.py"]["sha256"] == tool.source_sha("kvcalc/units.py")
    rows, problems = tool.ledger_rows(ledger)
    assert [(r.module, r.total, r.rate) for r in rows] == [("kvcalc/units.py", 12, 90.0)]  # 9 / (12 - 2)
    assert "kvcalc/formats.py: no recorded run" in problems
    assert len(problems) == len(tool.target_modules()) - 1

    data["kvcalc/units.py"]["sha256"] = "0" * 64  # the source changed since the run
    ledger.write_text(json.dumps(data))
    rows, problems = tool.ledger_rows(ledger)
    assert rows == []
    assert any(p.startswith("kvcalc/units.py: changed since its run") for p in problems)


def test_target_modules_are_the_mutated_files(tool):
    mods = tool.target_modules()
    assert "kvcalc/calc/plan.py" in mods and "kvcalc/engines/vllm/v0_33.py" in mods
    assert "kvcalc/units.py" in mods and "kvcalc/formats.py" in mods
    assert not any(m.startswith(("kvcalc/cli", "kvcalc/load")) for m in mods)
