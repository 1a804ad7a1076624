"""The `ideal` profile: the exact formula of `kvcalc.calc.kv_cache`, with no block, page or padding rule.

tokens = memory // bytes per token (one TP rank, while no window is full; a compressed layer counts
its entry bytes / compress_ratio); concurrency at L = memory / window-aware bytes of one request of
L tokens. It sizes every layer feature of `kvcalc.schema.LayerSpec` as the models' reference code
keeps it: per-layer KV heads and head sizes, V stored once where it is K (`v_is_k`), both K and V
where only the projection is shared (`k_eq_v`), nothing for a layer that reads another's cache
(`kv_source`), one compressed entry per compress_ratio tokens, the indexer keys. It logs nothing:
the lines say what it is.
"""

from __future__ import annotations

from kvcalc.calc.kv_cache import amortized_bytes_per_token, check_tp, layers_cache_bytes
from kvcalc.engines import SEARCH_LIMIT_TOKENS, longest_fitting
from kvcalc.formats import StorageFormat
from kvcalc.results import EngineResult
from kvcalc.schema import ModelSpec

VERSION = "kvcalc exact formula (no engine rounding)"


def default_kv_dtype(model: ModelSpec) -> tuple[str, str]:
    """(format name, label) with no --kv-dtype: the model's own dtype."""
    from kvcalc.formats import kv_format

    name = kv_format(model.dtype).name
    return name, f"auto ({name})"


def capacity(
    model: ModelSpec,
    kv_memory_bytes: int,
    k: StorageFormat,
    v: StorageFormat,
    *,
    tp: int = 1,
    max_model_len: int | None = None,
    concurrency: int | None = None,
) -> EngineResult:
    """Tokens, concurrency at `max_model_len` and the longest context at `concurrency` for
    `kv_memory_bytes` per rank, by the exact window-aware formula."""
    check_tp(model, tp)
    per_token = amortized_bytes_per_token(model.layers, k, v, tp)
    tokens = kv_memory_bytes // per_token if per_token else 0
    L = max_model_len or model.default_context

    def req(n: int) -> int:
        return layers_cache_bytes(model.layers, n, 1, k, v, tp)

    conc = kv_memory_bytes / req(L) if L and req(L) else None
    longest = (
        longest_fitting(lambda n: concurrency * req(n) <= kv_memory_bytes, SEARCH_LIMIT_TOKENS) if concurrency else None
    )
    return EngineResult(
        engine="ideal",
        engine_version=VERSION,
        kv_memory_bytes=kv_memory_bytes,
        kv_cache_dtype=k.name if k == v else f"{k.name}/{v.name}",
        page_size_bytes=per_token,
        kv_cache_tokens=tokens,
        engine_kv_bytes=tokens * per_token,
        max_model_len=L,
        max_concurrency=conc,
        concurrency=concurrency,
        longest_context=longest,
        log_lines=[
            f"{tokens:,} tokens of {per_token:,} B each fit in {kv_memory_bytes:,} B"
            + (f"; {conc:.2f} requests of {L:,} tokens" if conc is not None else "")
        ],
    )
