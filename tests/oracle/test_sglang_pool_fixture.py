"""kvcalc's SGLang profile against SGLang 0.5.23's own token-pool sizing for the plain MHA / GQA,
MLA, sparse-MLA (DSA, with the index keys) and hybrid sliding / full (SWA) pools
(tests/oracle/fixtures/sglang_0523_pools.json, written by `sglang_pool_harness.py` from SGLang's
released code run on a CPU; docs/engine-oracles.md). Runs in the default suite: no SGLang needed.

The grid (`sglang_pool_harness.grid`): Llama-3.1-8B, Qwen3-VL-8B, MiniMax-M2.7 and Gemma-3-1B
(MHA / GQA; Gemma-3's sliding layers sized like full ones; with SGLang's fp4 types, nvfp4 on SM100
and SM120), DeepSeek-V2-Lite and Kimi-K2.5 (MLA, with the fp4 types), DeepSeek-V3.2 and GLM-5.2
(DSA, on Hopper and Blackwell: the backends and the latent row differ), Gemma-4-26B-A4B,
MiMo-V2-Flash and gpt-oss-20b (the SWA pool, with the fp4 types: 1 B a value; also at
--swa-full-tokens-ratio 0.1), at several tp / attention-dp layouts, page sizes and budgets; plus
Step-3.7-Flash and MiniMax-M3, whose architectures SGLang 0.5.23 registers no model class for.
Where SGLang refuses, kvcalc must refuse with SGLang's first sentence.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import sglang_pool_fixture as fx  # noqa: E402

RECORDS = fx.records()


def test_the_grid_is_whole():
    assert len(RECORDS) == 1996
    assert {r["sglang"]["sglang"] for r in RECORDS} == {"0.5.23"}
    kinds = {r["sglang"].get("configurator") for r in RECORDS}
    assert kinds == {None, "DefaultPoolConfigurator", "HybridSWAPoolConfigurator"}


@pytest.mark.parametrize("record", RECORDS, ids=[fx.case_id(r["inputs"]) for r in RECORDS])
def test_kvcalc_is_sglang(record):
    want = {k: v for k, v in record["sglang"].items() if k != "sglang"}
    got = fx.kvcalc_record(record["inputs"])
    assert fx.same(want, got), (want, got)
