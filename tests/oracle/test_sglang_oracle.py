"""SGLang 0.5.23's own sizing code, live (issue 19 item 2): each harness reruns every case of its
checked-in fixture and must give the same record (the fixture is SGLang's output, not edited by
hand), and kvcalc's SGLang profile must give SGLang's figures. Three harnesses, one test:
`sglang_harness.py` (the hybrids' Mamba / linear-state pool) with `sglang_fixture.py`,
`sglang_dsv4_harness.py` (`DSV4PoolConfigurator` on a CPU) with `sglang_dsv4_fixture.py`, and
`sglang_pool_harness.py` (the MHA / MLA / DSA pools and the SWA pool: `DefaultPoolConfigurator`,
`HybridSWAPoolConfigurator`) with `sglang_pool_fixture.py`.

Needs SGLang 0.5.23's Python code and its imports in a venv (docs/engine-oracles.md); from the
repository root: `/work/oracle/venv-sglang-0.5.23/bin/python -m pytest -m oracle
tests/oracle/test_sglang_oracle.py`. Skipped, with the reason, where sglang does not import or is
not 0.5.23.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

sys.path.insert(0, str(Path(__file__).parent))

pytestmark = pytest.mark.oracle

#: (harness module, fixture module) per SGLang pool the oracle covers
POOLS = (
    ("sglang_harness", "sglang_fixture"),
    ("sglang_dsv4_harness", "sglang_dsv4_fixture"),
    ("sglang_pool_harness", "sglang_pool_fixture"),
)


def _harness(name: str) -> ModuleType | str:
    """The harness module, or why the live run is skipped."""
    if importlib.util.find_spec("sglang") is None:
        return "sglang is not installed (docs/engine-oracles.md: its own venv, pip install --no-deps sglang==0.5.23)"
    try:
        harness = importlib.import_module(name)
    except Exception as e:  # any import failure of SGLang's code is a reason to skip, given whole
        return f"sglang's pool code does not import here: {type(e).__name__}: {e}"
    if harness.SGLANG_VERSION != "0.5.23":
        return f"the fixture is SGLang 0.5.23's; sglang {harness.SGLANG_VERSION} is installed"
    return harness


CASES = []
for _harness_name, _fixture_name in POOLS:
    _fx = importlib.import_module(_fixture_name)
    for _record in _fx.records():
        CASES.append(pytest.param(_harness_name, _fx, _record, id=f"{_fixture_name}-{_fx.case_id(_record['inputs'])}"))


@pytest.mark.parametrize("harness_name, fx, record", CASES)
def test_live_sglang_is_the_fixture_and_kvcalc(harness_name, fx, record):
    harness = _harness(harness_name)
    if isinstance(harness, str):
        pytest.skip(harness)
    case = record["inputs"]
    live = harness.run(case["config"], **{k: v for k, v in case.items() if k != "config"})
    assert live == record["sglang"]
    want = {k: v for k, v in live.items() if k != "sglang"}
    got = fx.kvcalc_record(case)
    assert fx.same(want, got), (want, got)
