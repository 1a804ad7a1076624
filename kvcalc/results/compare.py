"""`CompareRow`: `kvcalc compare` (`kv_cache.compare_attention`). Its own module, so that
`kvcalc estimate` does not declare it.

Frozen pydantic models, `extra="forbid"`: their JSON keys are a public contract."""

# no `from __future__ import annotations`: pydantic reads these field types as objects
from kvcalc.schema import _Frozen  # frozen, extra="forbid": the one base of every model


class CompareRow(_Frozen):
    """One attention variant in `kvcalc compare`: its KV heads and bytes, and the reduction
    against MHA as a percentage (exact: 100 x (1 - bytes / mha_bytes))."""

    variant: str
    n_kv_heads: int
    kv_bytes_per_token: int
    kv_cache_bytes: int
    reduction_vs_mha_percent: float
