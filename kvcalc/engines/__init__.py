"""Engine profiles: what vLLM, SGLang and llama.cpp allocate, rule by rule, one module each.

`ENGINES` maps an engine name to its profile module; `ideal` is the exact formula of
`kvcalc.calc.kv_cache` with no block, page or padding rule (tokens = memory // bytes per token).
Each profile is pure arithmetic on `kvcalc.calc.kv_cache`'s per-layer functions
(`layer_kv_bytes_per_token`, `tokens_cached`, `kv_heads_per_rank`, `check_tp`), states the
engine version it models, and returns an `EngineResult` carrying the lines the engine logs.

Every engine also sits behind one interface, `kvcalc.engines.profile.EngineProfile`, with a typed
options object (`VllmOptions`, `SglangOptions`, `LlamacppOptions`, `IdealOptions`);
`kvcalc.engines.profile.get_profile(name)` returns it. Nothing is imported at package import time.
"""

from __future__ import annotations

from kvcalc.errors import UnknownNameError

#: engine name -> profile module (`ideal` is `kvcalc.engines.ideal`: the exact formula).
ENGINES: dict[str, str] = {
    "ideal": "kvcalc.engines.ideal",
    "vllm": "kvcalc.engines.vllm",
    "sglang": "kvcalc.engines.sglang",
    "llamacpp": "kvcalc.engines.llamacpp",
}

#: other spellings users type.
ALIASES: dict[str, str] = {
    "llama.cpp": "llamacpp",
    "llama-cpp": "llamacpp",
    "llama_cpp": "llamacpp",
    "exact": "ideal",
    "none": "ideal",
}


def canonical(name: str) -> str:
    """The registry key for `name` (case-insensitive, aliases resolved); raises `UnknownNameError`."""
    key = name.strip().lower()
    key = ALIASES.get(key, key)
    if key not in ENGINES:
        raise UnknownNameError("engine", name, list(ENGINES), field="engine")
    return key


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
