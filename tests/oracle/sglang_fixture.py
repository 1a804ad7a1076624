"""The checked-in output of SGLang 0.5.23's own sizing code (`sglang_harness.py`, run on a CPU;
docs/engine-oracles.md) and how kvcalc's SGLang profile is held against it. Imports no SGLang."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

from kvcalc.engines import sglang, sglang_mamba
from kvcalc.errors import KvcalcError
from kvcalc.formats import kv_format
from kvcalc.load.models import load_model

FIXTURE = Path(__file__).parent / "fixtures" / "sglang_0523_mamba.json"
DATA = Path(__file__).parents[1] / "data" / "hf-configs-2026"
#: kvcalc's name for each config file (a bundled YAML built from it, or the file itself)
MODELS = {
    "Qwen--Qwen3.5-27B.json": "qwen3.5-27b",
    "siblings/Qwen--Qwen3.5-397B-A17B.json": str(DATA / "siblings" / "Qwen--Qwen3.5-397B-A17B.json"),
    "nvidia--NVIDIA-Nemotron-3-Super-120B-A12B-FP8.json": "nemotron-3-super-120b-a12b",
    "moonshotai--Kimi-K3.json": "kimi-k3",
}


def records() -> list[dict]:
    return json.loads(FIXTURE.read_text())


def case_id(case: dict) -> str:
    name = case["config"].split("--")[-1].removesuffix(".json")
    alloc = "-allocated" if case["allocate"] else ""
    return f"{name}-tp{case['tp']}-{case['kv_dtype']}-{case['budget_bytes']}{alloc}"


def kvcalc_record(case: dict) -> dict:
    """kvcalc's figures for one case, in the fixture's terms: SGLang's refusal's first sentence
    ("error"), or per_req, max_mamba_cache_size, available_bytes, cell, tokens,
    max_running_requests, warnings (and the allocated pools' log lines and bytes)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = load_model(MODELS[case["config"]])
    f = kv_format(case["kv_dtype"])
    try:
        r = sglang.capacity(m, case["budget_bytes"], f, f, tp=case["tp"])
    except KvcalcError as e:
        return {"error": str(e)}
    per_req = sglang_mamba.mamba_state(m, case["tp"]).per_request_bytes
    assert r.engine_state_bytes is not None and r.max_model_len is not None
    slots = r.engine_state_bytes // per_req - 1
    out = {
        "per_req": per_req,
        "max_mamba_cache_size": slots,
        "available_bytes": case["budget_bytes"] - r.engine_state_bytes,
        "cell": r.page_size_bytes,
        "tokens": r.kv_cache_tokens,
        "max_running_requests": sglang_mamba.max_running_requests(r.kv_cache_tokens, r.max_model_len, slots)[0],
        "warnings": [line for line in r.log_lines if line.startswith("max_running_requests")],
    }
    if case["allocate"]:
        out.update(log_lines=r.log_lines[-2:], kv_bytes=[r.k_bytes, r.v_bytes], state_bytes=r.engine_state_bytes)
    return out


def same(sglang_out: dict, kvcalc_out: dict) -> bool:
    """True when kvcalc's record says what SGLang's does: both refuse, kvcalc's message holding
    SGLang's first sentence; or every figure SGLang gives is kvcalc's."""
    if "error" in sglang_out or "error" in kvcalc_out:
        return (
            "error" in sglang_out and "error" in kvcalc_out and sglang_out["error"].split(".")[0] in kvcalc_out["error"]
        )
    return all(kvcalc_out[key] == sglang_out[key] for key in kvcalc_out)
