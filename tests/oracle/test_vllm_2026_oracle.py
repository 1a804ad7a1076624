"""The 2026 configs under the live vLLM 0.33 (issue 19, item 4): vLLM's own sizing code, run on
a CPU by `vllm_2026.py`, against the checked-in fixture and against kvcalc's vLLM profile.

Needs vLLM 0.33's Python code (`tools/install_vllm_oracle.sh 0.33.0`, then, from the repository
root, `/work/oracle/venv-vllm-0.33.0/bin/python -m pytest -m oracle tests/oracle/test_vllm_2026_oracle.py`).
Skipped, with the reason, where vllm does not import or is not 0.33.

- `test_fixture_is_vllms_output`: every fixture case rerun on vLLM gives the same record (the
  fixture is vLLM's output, not edited by hand);
- `test_kvcalc_matches_live_vllm`: kvcalc's figures equal the live engine's, xfail(strict=False)
  for the families in `vllm_2026_fixture.KVCALC_PENDING`.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import vllm_2026_fixture as fx  # noqa: E402

pytestmark = pytest.mark.oracle


def _vllm_missing() -> str | None:
    if importlib.util.find_spec("vllm") is None:
        return "vllm is not installed (tools/install_vllm_oracle.sh 0.33.0 installs it into its own venv)"
    try:
        import vllm_2026
    except Exception as e:  # any import failure of vLLM's code is a reason to skip, given whole
        return f"vllm does not import on this machine: {type(e).__name__}: {e}"
    if not vllm_2026.h.VLLM_VERSION.startswith("0.33."):
        return f"the fixture is vLLM 0.33's; vllm {vllm_2026.h.VLLM_VERSION} is installed"
    return None


_MISSING = _vllm_missing()


def _params(kvcalc: bool):
    out = []
    for case in fx.cases() if fx.FIXTURE.exists() else []:
        family = case["inputs"]["family"]
        marks = (
            [pytest.mark.xfail(strict=False, reason=fx.KVCALC_PENDING[family])]
            if kvcalc and family in fx.KVCALC_PENDING
            else []
        )
        out.append(pytest.param(case, id=fx.case_id(case), marks=marks))
    return out


def _live(case: dict) -> dict:
    import json

    import vllm_2026

    record = vllm_2026.run_case(vllm_2026.Case(**case["inputs"]))
    return json.loads(json.dumps(record))  # as the fixture stores it (tuples as lists)


@pytest.mark.skipif(_MISSING is not None, reason=_MISSING or "")
@pytest.mark.parametrize("case", _params(kvcalc=False))
def test_fixture_is_vllms_output(case):
    assert _live(case) == case


@pytest.mark.skipif(_MISSING is not None, reason=_MISSING or "")
@pytest.mark.parametrize("case", _params(kvcalc=True))
def test_kvcalc_matches_live_vllm(case):
    assert fx.compare(_live(case)) == []
