"""kvcalc's vLLM 0.33 attention-backend choice held against vLLM's own selection code (issue 10,
items 2 and 4; `tests/oracle/vllm_backends.py`).

Needs vLLM 0.33's Python code (`tools/install_vllm_oracle.sh 0.33.0`; run with
`PYTHONPATH=$PWD /work/oracle/venv-vllm-0.33.0/bin/python -m pytest -m oracle
tests/oracle/test_vllm_backend_oracle.py -q`). Skipped with the reason where vllm is not importable or
is not 0.33. The harness replaces vLLM's current platform with a CUDA one on a faked device, so it
runs in a process of its own (`python tests/oracle/vllm_backends.py --json`, one line per case).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.oracle

HERE = Path(__file__).parent


def _why_not() -> str | None:
    if importlib.util.find_spec("vllm") is None:
        return "vllm is not installed (tools/install_vllm_oracle.sh 0.33.0 installs it into its own venv)"
    from importlib.metadata import version

    if not version("vllm").startswith("0.33."):
        return f"the backend-choice oracle models vLLM 0.33; vllm {version('vllm')} is installed"
    return None


_WHY = _why_not()


def _run() -> dict[str, dict]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent.parent), str(HERE)])}
    out = subprocess.run(
        [sys.executable, str(HERE / "vllm_backends.py"), "--json"], capture_output=True, text=True, env=env, timeout=600
    )
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    return {r["id"]: r for r in rows}


@pytest.fixture(scope="module")
def outcomes():
    return _run()


@pytest.mark.skipif(_WHY is not None, reason=_WHY or "")
def test_vllm_chooses_as_worked_by_hand(outcomes):
    """vLLM's own choice on cases worked from its code: Hopper bf16 FLASH_ATTN_MLA (MultipleOf(16))
    keeps 16; fp8 passes it over (auto / float16 / bfloat16 only) for FLASHMLA ([64]); Blackwell
    FLASHINFER_MLA ([32, 64]) prefers 32; --block-size 16 on Blackwell: TRITON_MLA and the warning;
    --block-size 8 on Hopper: no valid backend; Llama: FLASH_ATTN / FLASHINFER keep 16."""
    v = {i: tuple(r["vllm"][:2]) for i, r in outcomes.items()}
    assert v["deepseek-v2-lite-sm9.0-auto-bsNone"] == ("FLASH_ATTN_MLA", 16)
    assert v["deepseek-v3-sm9.0-fp8-bsNone"] == ("FLASHMLA", 64)
    assert v["kimi-k2-sm10.0-auto-bsNone"] == ("FLASHINFER_MLA", 32)
    assert v["deepseek-v3-sm10.0-fp8-bsNone"] == ("FLASHINFER_MLA", 32)
    assert v["deepseek-v2-lite-sm10.0-auto-bs16"] == ("TRITON_MLA", 16)
    assert (
        "precluded higher-priority backend(s) FLASHINFER_MLA, CUTLASS_MLA"
        in outcomes["deepseek-v2-lite-sm10.0-auto-bs16"]["vllm"][2]
    )
    assert v["deepseek-v2-lite-sm12.0-auto-bsNone"] == ("TRITON_MLA", 16)
    assert v["deepseek-v2-lite-sm9.0-auto-bs8"] == (None, None)
    assert v["llama-3.1-8b-sm9.0-auto-bsNone"] == ("FLASH_ATTN", 16)
    assert v["llama-3.1-8b-sm10.0-auto-bsNone"] == ("FLASHINFER", 16)


@pytest.mark.skipif(_WHY is not None, reason=_WHY or "")
def test_kvcalc_chooses_as_vllm_on_every_case(outcomes):
    assert len(outcomes) == 216
    differ = [f"{i}: vLLM {r['vllm']} kvcalc {r['kvcalc']}" for i, r in outcomes.items() if r["status"] != "match"]
    assert not differ, "\n".join(differ)
