"""The checked-in output of SGLang 0.5.23's own DeepSeek-V4 pool sizing (`sglang_dsv4_harness.py`,
run on a CPU; docs/engine-oracles.md) and how kvcalc's SGLang profile is held against it.
Imports no SGLang."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

from kvcalc.engines import sglang, sglang_dsv4
from kvcalc.errors import KvcalcError
from kvcalc.formats import kv_format
from kvcalc.load.models import load_model

FIXTURE = Path(__file__).parent / "fixtures" / "sglang_0523_dsv4.json"
DATA = Path(__file__).parents[1] / "data" / "hf-configs-2026"
#: SGLang's --kv-cache-dtype -> kvcalc's format name
FORMATS = {"fp8_e4m3": "fp8_e4m3", "bfloat16": "bf16"}


def records() -> list[dict]:
    return json.loads(FIXTURE.read_text())


def case_id(case: dict) -> str:
    name = case["config"].split("--")[-1].removesuffix(".json")
    return f"{name}-tp{case['tp']}-dp{case['dp']}-{case['kv_dtype']}-{case['budget_bytes']}"


def kvcalc_record(case: dict) -> dict:
    """kvcalc's figures for one case, in the fixture's terms: its refusal ("error"), or the pool
    sizes, per-token prices, request estimate and log lines. The tokens and log lines come from
    `sglang.capacity` (the profile's path; `dp` is not an input: SGLang's figures do not move with
    it), the prices from `sglang_dsv4.pools`."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = load_model(str(DATA / case["config"]))
    f = kv_format(FORMATS[case["kv_dtype"]])
    try:
        r = sglang.capacity(m, case["budget_bytes"], f, f, tp=case["tp"])
    except KvcalcError as e:
        return {"error": str(e)}
    p = sglang_dsv4.pools(m, case["budget_bytes"])
    return {
        "bytes_per_full_token": p.per_full_token,
        "bytes_per_swa_token": p.per_swa_token,
        "max_running_requests_estimate": p.max_running_requests,
        "full": r.kv_cache_tokens,
        "swa": p.swa,
        "c4": p.c4,
        "c128": p.c128,
        "c4_state": p.c4_state,
        "c128_state": 0,
        "log_lines": r.log_lines,
    }


def same(sglang_out: dict, kvcalc_out: dict) -> bool:
    """True when both refuse (kvcalc's message holding SGLang's first sentence), or every figure
    and log line SGLang gives is kvcalc's."""
    if "error" in sglang_out or "error" in kvcalc_out:
        return (
            "error" in sglang_out and "error" in kvcalc_out and sglang_out["error"].split(".")[0] in kvcalc_out["error"]
        )
    return set(sglang_out) == set(kvcalc_out) and all(kvcalc_out[key] == sglang_out[key] for key in sglang_out)
