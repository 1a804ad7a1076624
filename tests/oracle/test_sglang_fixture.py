"""kvcalc's SGLang profile against SGLang 0.5.23's own output for the hybrids' state pool
(tests/oracle/fixtures/sglang_0523_mamba.json, written by `sglang_harness.py` from SGLang's
released code run on a CPU; docs/engine-oracles.md). Runs in the default suite: no SGLang needed.

232 cases: Qwen3.5-27B, Qwen3.5-397B-A17B, Nemotron-3-Super-120B-A12B and Kimi-K3 at tp 1, 2, 4, 8
and 16 (not Qwen3.5-27B, whose 24 heads SGLang cannot split 16 ways; Nemotron's 8 groups widened to
16), bf16 / fp8_e4m3, six budgets per rank (26 of them too small: SGLang refuses, and so does
kvcalc, with SGLang's first sentence), plus the pools allocated on the CPU (log lines and bytes).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import sglang_fixture as fx  # noqa: E402

RECORDS = fx.records()


def test_the_grid_is_whole():
    assert len(RECORDS) == 232
    assert sum("error" in r["sglang"] for r in RECORDS) == 26
    assert {r["sglang"]["sglang"] for r in RECORDS} == {"0.5.23"}


@pytest.mark.parametrize("record", RECORDS, ids=[fx.case_id(r["inputs"]) for r in RECORDS])
def test_kvcalc_is_sglang(record):
    want = {k: v for k, v in record["sglang"].items() if k != "sglang"}
    got = fx.kvcalc_record(record["inputs"])
    assert fx.same(want, got), (want, got)
