"""The checked-in output of SGLang 0.5.23's own token-pool sizing for the plain MHA / GQA, MLA,
sparse-MLA (DSA) and hybrid SWA pools (`sglang_pool_harness.py`, run on a CPU;
docs/engine-oracles.md), and how kvcalc's SGLang profile is held against it. Imports no SGLang."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

from kvcalc.engines import sglang
from kvcalc.errors import KvcalcError
from kvcalc.formats import kv_format
from kvcalc.load.models import load_model

FIXTURE = Path(__file__).parent / "fixtures" / "sglang_0523_pools.json"
DATA = Path(__file__).parents[1] / "data"
#: the GPU of a case -> kvcalc's `PoolTarget` compute capability (`--gpu h100` / `b200`)
ARCH_CAPABILITY = {"hopper": "9.0", "blackwell": "10.0", "sm120": "12.0"}
_SWA_LINE = re.compile(r"Use sliding window memory pool\. full_layer_tokens=(\d+), swa_layer_tokens=(\d+)")


def records() -> list[dict]:
    return json.loads(FIXTURE.read_text())


def case_id(case: dict) -> str:
    name = case["config"].split("--")[-1].split("/")[-1].removesuffix(".json")
    ratio = "" if case["swa_ratio"] is None else f"-r{case['swa_ratio']}"
    alloc = "-allocated" if case["allocate"] else ""
    return (
        f"{name}-tp{case['tp']}-dp{case['dp']}-{case['kv_dtype']}-p{case['page_size']}-"
        f"{case['arch']}-{case['budget_bytes']}{ratio}{alloc}"
    )


def pool_lines(lines: list[str]) -> list[str]:
    """The lines the allocated pools log (`memory_pool.py` `_finalize_allocation_log`,
    `swa_memory_pool.py` "SWAKVPool mem usage")."""
    return [line for line in lines if "KV Cache is allocated" in line or line.startswith("SWAKVPool mem usage")]


def kvcalc_record(case: dict) -> dict:
    """kvcalc's figures for one case, in the fixture's terms: its refusal ("error"), or the page
    size, cell, tokens (and for the SWA pool the per-token bytes of a full / sliding layer, the two
    pools' tokens and the sliding window; for DSA the backends; for an allocated case the K / V
    bytes and the pools' log lines), as `sglang.capacity` gives them on
    the attention TP rank (tp / dp: `--enable-dp-attention` gives each attention rank tp / dp of the
    heads)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = load_model(str(DATA / case["config"]))
    f = kv_format({"bfloat16": "bf16"}.get(case["kv_dtype"], case["kv_dtype"]))
    tp = case["tp"] // case["dp"]
    target = sglang.PoolTarget(compute_capability=ARCH_CAPABILITY[case["arch"]])
    try:
        r = sglang.capacity(
            m,
            case["budget_bytes"],
            f,
            f,
            tp=tp,
            page_size=case["page_size"],
            swa_full_tokens_ratio=case["swa_ratio"],
            target=target,
        )
    except KvcalcError as e:
        return {"error": str(e)}
    out: dict = {"page_size": r.block_size, "tokens": r.kv_cache_tokens}
    if sglang.uses_swa_pool(m):  # the SWA pool (HybridSWAPoolConfigurator)
        full = next(x for x in m.layers if x.kind != "sliding")
        sliding = next(x for x in m.layers if x.kind == "sliding")
        ratio = sglang.DEFAULT_SWA_FULL_TOKENS_RATIO if case["swa_ratio"] is None else case["swa_ratio"]
        split = next((_SWA_LINE.fullmatch(line) for line in r.log_lines if _SWA_LINE.fullmatch(line)), None)
        out.update(
            cell=sglang.swa_cell_0523(m, f, f, tp, ratio),
            full_per_token=sglang.swa_layer_bytes_per_token(full, f, f, tp),
            swa_per_token=sglang.swa_layer_bytes_per_token(sliding, f, f, tp),
            full=int(split[1]) if split else None,
            swa=int(split[2]) if split else None,
            sliding_window_size=sglang.sglang_window(m),
        )
    else:
        out["cell"] = r.page_size_bytes // r.block_size
    if sglang.is_nsa(m):
        out["dsa_backends"] = list(sglang.dsa_backends(m, f, target.compute_capability))
    if case["allocate"]:
        out.update(kv_bytes=[r.k_bytes, r.v_bytes], pool_lines=pool_lines(r.log_lines))
    return out


def same(sglang_out: dict, kvcalc_out: dict) -> bool:
    """True when both refuse, kvcalc's message holding SGLang's first sentence (up to the first
    ". "); or every figure SGLang gives is kvcalc's (not its configurator's name, which kvcalc
    gives by its figures: the SWA pool's keys or not; nor its log lines, which say the split and
    the DSA backends kvcalc is held to through `full` / `swa` and `dsa_backends`)."""
    if "kv_bytes" in sglang_out:  # the allocated pools: their lines are compared too
        sglang_out = {**sglang_out, "pool_lines": pool_lines(sglang_out["log_lines"])}
    sglang_out = {k: v for k, v in sglang_out.items() if k not in ("configurator", "log_lines")}
    if "error" in sglang_out or "error" in kvcalc_out:
        return (
            "error" in sglang_out
            and "error" in kvcalc_out
            and sglang_out["error"].split(". ")[0].rstrip(".") in kvcalc_out["error"]
        )
    return set(sglang_out) == set(kvcalc_out) and all(kvcalc_out[key] == sglang_out[key] for key in sglang_out)
