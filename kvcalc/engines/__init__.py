"""Engine profiles: what vLLM, SGLang and llama.cpp allocate, rule by rule, one module each.

`ENGINES` maps an engine name to its profile module; `ideal` is the exact formula of
`kvcalc.calc.kv_cache` with no block, page or padding rule (tokens = memory // bytes per token).
Each profile is pure arithmetic on `kvcalc.calc.kv_cache`'s per-layer functions
(`layer_kv_bytes_per_token`, `tokens_cached`, `kv_heads_per_rank`, `check_tp`), states the
engine version it models, and returns an `EngineResult` carrying the lines the engine logs.

Every engine also sits behind one interface, `kvcalc.engines.profile.EngineProfile`, with a typed
options object (`VllmOptions`, `SglangOptions`, `LlamacppOptions`, `IdealOptions`);
`get_profile(name)` returns it. Nothing is imported at package import time; `profile(name)`
imports the module on demand.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from pydantic import BaseModel, ConfigDict

from kvcalc.errors import UnknownNameError

#: engine name -> profile module (`ideal` is `kvcalc.engines.ideal`: the exact formula).
ENGINES: dict[str, str] = {
    "ideal": "kvcalc.engines.ideal",
    "vllm": "kvcalc.engines.vllm",
    "sglang": "kvcalc.engines.sglang",
    "llamacpp": "kvcalc.engines.llamacpp",
}

#: other spellings users type.
ALIASES: dict[str, str] = {"llama.cpp": "llamacpp", "llama-cpp": "llamacpp", "llama_cpp": "llamacpp",
                           "exact": "ideal", "none": "ideal"}


def canonical(name: str) -> str:
    """The registry key for `name` (case-insensitive, aliases resolved); raises `UnknownNameError`."""
    key = name.strip().lower()
    key = ALIASES.get(key, key)
    if key not in ENGINES:
        raise UnknownNameError("engine", name, list(ENGINES))
    return key


def profile(name: str) -> ModuleType:
    """The profile module for engine `name` (imported lazily)."""
    return importlib.import_module(ENGINES[canonical(name)])


def get_profile(name: str):
    """The `EngineProfile` object for engine `name` (see `kvcalc.engines.profile`); raises
    `UnknownNameError` for an unknown name."""
    from kvcalc.engines.profile import get_profile as _get

    return _get(name)


class DeviceBuffer(BaseModel):
    """One device's share of a layer-split cache (llama.cpp `--n-gpu-layers` / `--tensor-split`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    device: str
    n_layers: int
    kv_bytes: int


class EngineResult(BaseModel):
    """What an engine allocates for the KV cache, and the lines it logs about it.

    JSON keys are a public contract; they sit beside `KvEstimate`'s keys in `estimate --engine`,
    so none repeats a `KvEstimate` key. Counts are per tensor-parallel rank where the engine
    sizes per rank (vLLM, SGLang); bytes are exact integers.

    - `kv_cache_tokens`: tokens the cache holds (vLLM "GPU KV cache size"; SGLang
      `max_total_num_tokens`; llama.cpp: cells over all sequences of the non-SWA cache).
    - `num_gpu_blocks`: vLLM blocks (SGLang pages); `page_size_bytes`: one block over all
      layers of one rank (vLLM: per-layer page x layers per group).
    - `usable_blocks`: blocks requests can use (vLLM V1 keeps block 0 as its null block,
      `vllm/v1/core/block_pool.py` `BlockPool.null_block`).
    - `engine_kv_bytes`: bytes the engine allocates (per rank), including its padding.
    - `max_concurrency`: requests of `max_model_len` tokens that fit, by the engine's own formula.
    - `longest_context`: the longest context that still fits `concurrency` requests (None when
      sliding windows make it unbounded).
    - `kv_memory_basis`: where `kv_memory_bytes` came from in `estimate --engine` (a GPU plan's
      KV budget, or sized for the batch); None in `capacity` (the user's --kv-memory).
    - `log_lines`: the engine's own log lines, formatted as it formats them.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    engine: str
    engine_version: str
    kv_memory_bytes: int | None = None
    kv_memory_basis: str | None = None
    kv_cache_dtype: str
    block_size: int | None = None
    page_size_bytes: int | None = None
    num_gpu_blocks: int | None = None
    usable_blocks: int | None = None
    num_cpu_blocks: int | None = None
    kv_cache_tokens: int
    engine_kv_bytes: int
    max_model_len: int | None = None
    max_concurrency: float | None = None
    concurrency: int | None = None
    longest_context: int | None = None
    n_cells: int | None = None
    n_ctx: int | None = None
    k_bytes: int | None = None
    v_bytes: int | None = None
    devices: list[DeviceBuffer] | None = None
    log_lines: list[str]
    notes: list[str] = []


def longest_fitting(fits, hi: int) -> int | None:
    """The largest L in [1, hi] with fits(L) true, by bisection (`fits` must be monotone:
    true up to some L, false after). 0 when even L = 1 does not fit; None when `hi` fits
    (no limit found below `hi`: sliding windows cap the per-request cost)."""
    if fits(hi):
        return None
    if not fits(1):
        return 0
    lo, top = 1, hi
    while top - lo > 1:
        mid = (lo + top) // 2
        if fits(mid):
            lo = mid
        else:
            top = mid
    return lo


#: the upper end of the context-length search: 2^27 tokens (134M), far past any model.
SEARCH_LIMIT_TOKENS = 1 << 27
