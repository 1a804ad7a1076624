"""SGLang 0.5.23's own DeepSeek-V4 pool sizing, live (issue 19 item 2): `sglang_dsv4_harness.py`
(`DSV4PoolConfigurator` on a CPU) reruns every case
of the checked-in fixture and must give the same record (the fixture is SGLang's output, not
edited by hand), and kvcalc's SGLang profile must give SGLang's figures.

Needs SGLang 0.5.23's Python code and its imports in a venv (docs/engine-oracles.md); from the
repository root: `/work/oracle/venv-sglang-0.5.23/bin/python -m pytest -m oracle
tests/oracle/test_sglang_dsv4_oracle.py`. Skipped, with the reason, where sglang does not import or is
not 0.5.23.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import sglang_dsv4_fixture as fx  # noqa: E402

pytestmark = pytest.mark.oracle


def _sglang_missing() -> str | None:
    if importlib.util.find_spec("sglang") is None:
        return "sglang is not installed (docs/engine-oracles.md: its own venv, pip install --no-deps sglang==0.5.23)"
    try:
        import sglang_dsv4_harness as sglang_harness
    except Exception as e:  # any import failure of SGLang's code is a reason to skip, given whole
        return f"sglang's pool code does not import here: {type(e).__name__}: {e}"
    if sglang_harness.SGLANG_VERSION != "0.5.23":
        return f"the fixture is SGLang 0.5.23's; sglang {sglang_harness.SGLANG_VERSION} is installed"
    return None


_MISSING = _sglang_missing()
RECORDS = fx.records()


@pytest.mark.skipif(_MISSING is not None, reason=_MISSING or "")
@pytest.mark.parametrize("record", RECORDS, ids=[fx.case_id(r["inputs"]) for r in RECORDS])
def test_live_sglang_is_the_fixture_and_kvcalc(record):
    import sglang_dsv4_harness as sglang_harness

    case = record["inputs"]
    live = sglang_harness.run(case["config"], **{k: v for k, v in case.items() if k != "config"})
    assert live == record["sglang"]
    want = {k: v for k, v in live.items() if k != "sglang"}
    got = fx.kvcalc_record(case)
    assert fx.same(want, got), (want, got)
