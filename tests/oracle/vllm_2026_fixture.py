"""vLLM 0.33's own figures for the 2026 configs, checked in, and kvcalc held against them
(no vLLM needed).

`tests/oracle/fixtures/vllm-0.33-2026.json` is written by `tests/oracle/vllm_2026.py --write`
(vLLM 0.33.0's sizing code on a CPU, docs/engine-oracles.md "vLLM 0.33, the 2026 configs"). Each
case holds its inputs (family, kv_cache_dtype, max_model_len, tp, kv_memory_bytes per rank) and
vLLM's outputs: the per-layer specs (`layer_specs`: spec class, block size, page_size_bytes,
heads, head sizes, window, tokens_per_state, layer count), the KV cache layout, the groups
(spec, layers, block size, bytes a block takes over the group's layers), num_blocks, the
"GPU KV cache size" tokens, the maximum concurrency, the log lines, or vLLM's refusal.

Helpers for tests anywhere (`tests/engines`, `tests/load` ...):

    from tests.oracle.vllm_2026_fixture import cases, compare
    for case in cases("gemma-4-26b-a4b"):
        assert compare(case) == []

`compare(case)` runs `kvcalc.capacity(<the config.json>, engine='vllm')` for the case (vLLM
0.33, Hopper: `compute_capability='9.0'`, vLLM's default block size and backend) and returns the
names of the figures that differ from vLLM's (empty when kvcalc prints what vLLM prints).
"""

from __future__ import annotations

import json
import math
import re
from functools import cache
from pathlib import Path

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "vllm-0.33-2026.json"
CONFIG_DIR = Path(__file__).resolve().parent.parent / "data" / "hf-configs-2026"

#: family -> the published config.json it is read from (tests/data/hf-configs-2026/)
CONFIG_FILES = {
    "deepseek-v4-flash": "deepseek-ai--DeepSeek-V4-Flash.json",
    "deepseek-v4-flash-nvfp4": "nvidia--DeepSeek-V4-Flash-NVFP4.json",
    "deepseek-v3.2": "deepseek-ai--DeepSeek-V3.2.json",
    "glm-5.2": "zai-org--GLM-5.2.json",
    "kimi-k2.5": "moonshotai--Kimi-K2.5.json",
    "kimi-k3": "moonshotai--Kimi-K3.json",
    "minimax-m3": "MiniMaxAI--MiniMax-M3.json",
    "minimax-m2.7": "MiniMaxAI--MiniMax-M2.7.json",
    "mimo-v2-flash": "XiaomiMiMo--MiMo-V2-Flash.json",
    "gemma-4-26b-a4b": "google--gemma-4-26B-A4B.json",
    "qwen3.5-27b": "Qwen--Qwen3.5-27B.json",
    "step-3.7-flash": "stepfun-ai--Step-3.7-Flash.json",
    "nemotron-3-super": "nvidia--NVIDIA-Nemotron-3-Super-120B-A12B-FP8.json",
    "qwen3-vl-8b": "Qwen--Qwen3-VL-8B-Instruct.json",
}

#: vLLM's --kv-cache-dtype -> kvcalc's kv_dtype (None: the engine's default)
KV_DTYPES = {"auto": None, "fp8": "fp8", "bfloat16": "bf16", "nvfp4_ds_mla": "nvfp4_ds_mla"}

#: families kvcalc's vLLM 0.33 profile does not size as vLLM does yet (issue 19): the fixture
#: tests mark them xfail(strict=False) with this reason. Delete a family's entry when it matches.
KVCALC_PENDING = {f: f"kvcalc's vLLM 0.33 profile does not model {f} as vLLM 0.33 does yet (issue 19)" for f in ()}

#: the figures `compare` checks
FIELDS = ("refused", "num_blocks", "gpu_kv_cache_tokens", "max_concurrency", "lines")


@cache
def _fixture() -> dict:
    return json.loads(FIXTURE.read_text())


def cases(family: str | None = None) -> list[dict]:
    """The fixture's cases (of one family)."""
    return [c for c in _fixture()["cases"] if family is None or c["inputs"]["family"] == family]


def families() -> list[str]:
    return sorted({c["inputs"]["family"] for c in cases()})


def case_id(case: dict) -> str:
    i = case["inputs"]
    return f"{i['family']}-{i['kv_cache_dtype']}-L{i['max_model_len']}-tp{i['tp']}-{i['kv_memory_bytes'] / 2**30:g}GiB"


def kvcalc_figures(case: dict) -> dict:
    """kvcalc's vLLM 0.33 profile for the case (as `kvcalc capacity --engine vllm` runs it): the
    figures `FIELDS` names, or `refused` with kvcalc's message."""
    import warnings

    import kvcalc
    from kvcalc.engines.profile import VllmOptions
    from kvcalc.errors import KvcalcError

    i = case["inputs"]
    opts = VllmOptions(version="0.33", compute_capability="9.0")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            r = kvcalc.capacity(
                str(CONFIG_DIR / CONFIG_FILES[i["family"]]),
                engine="vllm",
                kv_memory_bytes=i["kv_memory_bytes"],
                max_model_len=i["max_model_len"],
                kv_dtype=KV_DTYPES[i["kv_cache_dtype"]],
                tp=i["tp"],
                options=opts,
            )
        except KvcalcError as e:
            return {"refused": str(e)}
    refusal = next((str(w.message) for w in caught if "refuse" in str(w.message)), None)
    lines = [
        line
        for line in r.log_lines
        if line.startswith(("Available KV cache memory", "GPU KV cache size", "Maximum concurrency"))
    ]
    return {
        "refused": refusal,
        "num_blocks": r.num_gpu_blocks,
        "gpu_kv_cache_tokens": r.kv_cache_tokens,
        "max_concurrency": r.max_concurrency,
        "lines": lines,
    }


def _refusal_matches(case: dict, message: str) -> bool:
    """kvcalc's refusal gives vLLM's reason: where vLLM refuses for memory, its first clause
    ("To serve at least one request with the model's max seq len (L), (X GiB KV cache is
    needed") and, when vLLM gives one, the same estimated maximum model length; the
    architecture or model_type where vLLM 0.33 refuses the published config.json itself
    (`exact_config`); else vLLM's text verbatim (DeepSeek-V4's fp8-only rule for bf16 and nvfp4_ds_mla: `_resolve_dsv4_kv_cache_dtype`)."""
    want = (case.get("refused") or "").removeprefix("ValueError: ")
    if case.get("exact_config"):  # vLLM refuses the published config.json at load, before any sizing
        config = json.loads((CONFIG_DIR / CONFIG_FILES[case["inputs"]["family"]]).read_text())
        if any(name in message for name in (*config.get("architectures", []), config.get("model_type", "?"))):
            return True
    if not want:
        return False
    if want.startswith("To serve at least one request"):
        m = re.search(r"estimated maximum model length is (\d+)", want)
        return want.split(", which is larger")[0] in message and (
            m is None or f"estimated maximum model length is {m.group(1)}" in message
        )
    return want in message


def compare(case: dict, figures: dict | None = None) -> list[str]:
    """The names of the figures in which kvcalc (`figures`, default `kvcalc_figures(case)`)
    differs from vLLM's (`case`): 'refused' when one refuses and the other does not, or kvcalc's
    refusal does not give vLLM's reason (`_refusal_matches`); else num_blocks,
    gpu_kv_cache_tokens, max_concurrency (to 1e-12) and the three log lines. Where vLLM 0.33
    refuses the published config.json itself (`exact_config`: MiniMax-M3, Step-3.7-Flash), a
    kvcalc refusal naming the architecture or model_type matches too."""
    got = kvcalc_figures(case) if figures is None else figures
    message = got.get("refused")
    if case.get("refused") is not None or (message is not None and got.get("num_blocks") is None):
        return [] if message is not None and _refusal_matches(case, message) else ["refused"]
    if message is not None:
        return ["refused"]
    differs = [name for name in ("num_blocks", "gpu_kv_cache_tokens") if got.get(name) != case.get(name)]
    a, b = got.get("max_concurrency"), case.get("max_concurrency")
    if a is None or b is None or not math.isclose(a, b, rel_tol=1e-12):
        differs.append("max_concurrency")
    if got.get("lines") != case.get("lines"):
        differs.append("lines")
    return differs


def bytes_per_token(row: dict) -> float:
    """One `layer_specs` row's bytes per token of context for one layer: its page over the tokens
    a block covers (block_size; compressed caches hold one entry per tokens_per_state tokens,
    already counted in the page)."""
    return row["real_page_size_bytes"] / row["block_size"]
