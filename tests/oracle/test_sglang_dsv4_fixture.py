"""kvcalc's SGLang profile against SGLang 0.5.23's own DeepSeek-V4 pool sizing
(tests/oracle/fixtures/sglang_0523_dsv4.json, written by `sglang_dsv4_harness.py` from SGLang's
released `DSV4PoolConfigurator` run on a CPU; docs/engine-oracles.md). Runs in the default suite:
no SGLang needed.

240 cases: DeepSeek-V4-Flash, its NVFP4 checkpoint and DeepSeek-V4-Pro (NVFP4) x (tp, attention
dp) (1, 1), (4, 1), (8, 1), (8, 8) x fp8_e4m3 / bfloat16 x ten budgets per rank (two either side of
Flash's SWA floor: 256 SWA tokens refused, 512 served); 152 of them too small (the c128 compressor
states SGLang reserves for 2,048 to 4,096 requests take 20 to 62 GiB): SGLang refuses, and so does
kvcalc, with SGLang's first sentence.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import sglang_dsv4_fixture as fx  # noqa: E402

RECORDS = fx.records()


def test_the_grid_is_whole():
    assert len(RECORDS) == 240
    assert sum("error" in r["sglang"] for r in RECORDS) == 152
    assert {r["sglang"]["sglang"] for r in RECORDS} == {"0.5.23"}


def test_layout_and_dtype_do_not_move_sglang():
    """SGLang's own figures are the same for every tp / dp layout and both dtypes of a model and budget."""
    by_case: dict[tuple[str, int], list[dict]] = {}
    for r in RECORDS:
        by_case.setdefault((r["inputs"]["config"], r["inputs"]["budget_bytes"]), []).append(r["sglang"])
    assert all(all(out == outs[0] for out in outs) for outs in by_case.values())


@pytest.mark.parametrize("record", RECORDS, ids=[fx.case_id(r["inputs"]) for r in RECORDS])
def test_kvcalc_is_sglang(record):
    want = {k: v for k, v in record["sglang"].items() if k != "sglang"}
    got = fx.kvcalc_record(record["inputs"])
    assert fx.same(want, got), (want, got)
