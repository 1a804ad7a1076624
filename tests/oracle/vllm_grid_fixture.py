"""kvcalc against `fixtures/vllm-0.33-grid.json` (vLLM 0.33.0's own sizing over DP / EP / DCP layouts
and every `--kv-cache-dtype`, written by `vllm_grid.py`), without vLLM.

`kvcalc_figures(record)` runs kvcalc's vLLM 0.33 profile on the record's inputs:
`kvcalc.capacity(engine='vllm')` with `VllmOptions(dcp=..., compute_capability=...)` (the layout
cases also through `kvcalc.calc.parallel.check_layout` with vLLM's ep = tp x dp under
`--enable-expert-parallel`); `compare(record)` says how it stands against vLLM:

- 'match': both start with the same blocks, tokens and concurrency, or both refuse (a config
  refusal: kvcalc's message carries vLLM's text (`KVCALC_WORDS`: or kvcalc's own words for it),
  or for a dtype names vLLM 0.33 and what it takes; a start-up
  memory refusal: the same estimated maximum model length);
- 'kvcalc refuses': vLLM starts, kvcalc refuses on purpose (listed in `KVCALC_REFUSES`);
- 'mismatch': anything else, with the fields that differ (the tests xfail the cases listed in
  `KVCALC_PENDING`, strict=False).
"""

from __future__ import annotations

import json
import re
import warnings
from functools import cache
from pathlib import Path

FIXTURE = Path(__file__).parent / "fixtures" / "vllm-0.33-grid.json"
_ESTIMATED = re.compile(r"estimated maximum model length is (\d+)")
_SPARSE_BACKEND = re.compile(r"sparse MLA attention backend (\w+)")

#: (model, dtype, compute capability) vLLM 0.33 starts with and kvcalc refuses, each with why:
#: nvfp4_ds_mla on a non-MLA model on SM100 (vLLM's FlashInfer takes every "nvfp4*" name there and
#: stores it as plain uint8; kvcalc models nvfp4_ds_mla only as DeepSeek-V3.2's sparse-MLA row)
KVCALC_REFUSES = {
    ("llama-3.1-8b", "nvfp4_ds_mla", "10.0"),
    ("qwen3-8b", "nvfp4_ds_mla", "10.0"),
    ("qwen3.5-27b", "nvfp4_ds_mla", "10.0"),
}

#: cases kvcalc does not match yet, with why: their tests are xfail(strict=False); delete an entry
#: when kvcalc matches
KVCALC_PENDING: dict[tuple, str] = {}


def key(record: dict) -> tuple:
    """(model, kv_cache_dtype, compute capability) of a dtype / models2026 record."""
    i = record["inputs"]
    return (i["model"], i["kv_cache_dtype"], i.get("compute_capability"))


#: vLLM's config refusal -> the words kvcalc's refusal says it in, where kvcalc's check is its own
#: (`kvcalc.calc.parallel.check_layout`) rather than vLLM's text
KVCALC_WORDS = {
    "Number of experts in the model must be greater than 0 when expert parallelism is enabled.": "no routed experts",
}


@cache
def records() -> list[dict]:
    """Every record of the fixture (`part`, `inputs`, `vllm`)."""
    return json.loads(FIXTURE.read_text())["cases"]


@cache
def _model(name: str):
    from kvcalc.load.models import load_model

    return load_model(name)


def kvcalc_figures(record: dict) -> dict:
    """kvcalc's figures for `record`'s inputs: refused (message) or blocks / tokens / concurrency."""
    import kvcalc
    from kvcalc.engines.profile import VllmOptions
    from kvcalc.errors import KvcalcError

    i = record["inputs"]
    model = _model(i["model"])
    layout = record["part"] == "layouts"
    try:
        if record["part"] == "dcp":
            opts = VllmOptions(compute_capability=i["compute_capability"], dcp=i["dcp"])
        elif layout:
            from kvcalc.calc.parallel import check_layout

            ep = i["tp"] * i["dp"] if i["ep"] else 1
            check_layout(model, i["tp"], dp_attention=i["dp"] if i["ep"] else 1, ep=ep)
            mla = any(layer.kind == "mla" for layer in model.layers)
            opts = VllmOptions(
                dcp=i["dcp"],
                block_size=i["block_size"],
                attention_backend="FLASHMLA" if mla else None,
                compute_capability="9.0",
            )
        else:
            opts = VllmOptions(compute_capability=i["compute_capability"])
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            r = kvcalc.capacity(
                model,
                engine="vllm",
                kv_memory_bytes=i["kv_memory_bytes"],
                max_model_len=i["max_model_len"],
                kv_dtype=i["kv_cache_dtype"],
                tp=i.get("tp", 1),
                options=opts,
            )
    except KvcalcError as e:
        m = _ESTIMATED.search(str(e))
        return {"refused": str(e), "estimated_max_len": int(m.group(1)) if m else None}
    refusal = next((str(w.message) for w in caught if "refuse" in str(w.message)), None)
    if refusal is not None:
        m = _ESTIMATED.search(refusal)
        return {"refused": refusal, "estimated_max_len": int(m.group(1)) if m else None}
    return {
        "refused": None,
        "num_blocks": r.num_gpu_blocks,
        "tokens": r.kv_cache_tokens,
        "concurrency": r.max_concurrency,
        "block_size": r.block_size,
        # the sparse MLA backend kvcalc names (`v0_33_specs.sparse_mla_specs`' note)
        "backend": next((m.group(1) for n in r.notes if (m := _SPARSE_BACKEND.search(n))), None),
    }


def compare(record: dict) -> tuple[str, tuple[str, ...]]:
    """('match' | 'kvcalc refuses' | 'mismatch', the fields that differ)."""
    v, k = record["vllm"], kvcalc_figures(record)
    if v["refused"] is None and k["refused"] is not None:
        return ("kvcalc refuses", ()) if key(record) in KVCALC_REFUSES else ("mismatch", ("refusal", k["refused"]))
    if (v["refused"] is None) != (k["refused"] is None):
        return "mismatch", ("refusal",)
    if v["refused"] is not None:
        if v["stage"] == "start-up":
            same = v.get("estimated_max_len") == k.get("estimated_max_len")
            return ("match", ()) if same else ("mismatch", ("estimated_max_len",))
        if v["stage"] == "config" and KVCALC_WORDS.get(v["refused"], v["refused"]) not in k["refused"]:
            return "mismatch", ("message",)
        if v["stage"] != "config" and not ("vLLM 0.33" in k["refused"] and re.search(r"takes|use fp8", k["refused"])):
            return "mismatch", ("message",)  # a dtype refusal names the version and what it takes
        return "match", ()
    differs = tuple(n for n in ("num_blocks", "tokens") if v[n] != k[n])
    if abs(v["concurrency"] - k["concurrency"]) > 1e-12 * max(1.0, v["concurrency"]):
        differs += ("concurrency",)
    if "block_size" in v and v["block_size"] != k["block_size"]:
        differs += ("block_size",)
    if k["backend"] is not None and v.get("backend") != k["backend"]:  # sparse MLA: the same backend
        differs += ("backend",)
    return ("mismatch" if differs else "match"), differs
