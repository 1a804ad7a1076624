"""The DP / EP / DCP and KV-dtype grid under the live vLLM 0.33 (issue 20, item 5): vLLM's own
sizing code, run on a CPU by `vllm_grid.py` (two processes: its dtype part replaces vLLM's current
platform), against the checked-in fixture and against kvcalc.

Run from the repository root: `PYTHONPATH=$PWD:$PWD/tests/oracle /work/oracle/venv-vllm-0.33.0/bin/python
-m pytest -m oracle tests/oracle/test_vllm_grid_oracle.py` (about 1 min). Skipped, with the reason,
where vllm does not import or is not 0.33.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
import vllm_grid_fixture as fx  # noqa: E402
from vllm_grid_cases import PARTS  # noqa: E402

pytestmark = pytest.mark.oracle


def _vllm_missing() -> str | None:
    if importlib.util.find_spec("vllm") is None:
        return "vllm is not installed (tools/install_vllm_oracle.sh 0.33.0 installs it into its own venv)"
    try:
        import vllm
    except Exception as e:  # any import failure of vLLM's code is a reason to skip, given whole
        return f"vllm does not import on this machine: {type(e).__name__}: {e}"
    if not vllm.__version__.startswith("0.33."):
        return f"the fixture is vLLM 0.33's; vllm {vllm.__version__} is installed"
    return None


_MISSING = _vllm_missing()


@pytest.fixture(scope="module")
def live() -> list[dict]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE.parent.parent), str(HERE)]))
    records = []
    for part in PARTS:
        out = subprocess.run(
            [sys.executable, str(HERE / "vllm_grid.py"), "--part", part],
            check=True,
            capture_output=True,
            text=True,
            env=env,
        ).stdout
        records += [json.loads(x[7:]) for x in out.splitlines() if x.startswith("RECORD ")]
    return records


@pytest.mark.skipif(_MISSING is not None, reason=_MISSING or "")
def test_fixture_is_vllms_output(live):
    assert live == fx.records()


@pytest.mark.skipif(_MISSING is not None, reason=_MISSING or "")
def test_kvcalc_matches_live_vllm(live):
    bad = [
        (r["inputs"], fx.compare(r))
        for r in live
        if fx.compare(r)[0] not in ("match", "kvcalc refuses")
        and (r["part"] == "layouts" or fx.key(r) not in fx.KVCALC_PENDING)
    ]
    assert bad == []
