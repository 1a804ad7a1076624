"""`KvEstimate` (with a `KindBreakdown` per layer kind): `kvcalc estimate`, `kv_cache.estimate`.

Frozen pydantic models, `extra="forbid"`: their JSON keys are a public contract."""

# no `from __future__ import annotations`: pydantic reads these field types as objects, without
# compiling and evaluating their text when `kvcalc estimate` declares the models
from kvcalc.schema import _Frozen  # frozen, extra="forbid": the one base of every model


class KindBreakdown(_Frozen):
    """KV bytes of one layer kind, for one replica: `n_layers` layers, what one more token adds
    to one sequence (`kv_bytes_per_token`), tokens cached per sequence, and the cache total;
    `kv_cache_bytes_per_gpu` is this kind's share of the fullest GPU (the kinds add up to
    `KvEstimate.kv_cache_bytes_per_gpu`)."""

    kind: str
    n_layers: int
    kv_bytes_per_token: int
    tokens_cached: int
    kv_cache_bytes: int
    kv_cache_bytes_per_gpu: int
    window: int | None = None


class KvEstimate(_Frozen):
    """The result of `kvcalc estimate` (its JSON keys are a public contract).

    - `kv_bytes_per_token`: what one more token adds to one sequence, over all layers, while
      the context is shorter than every window (sliding layers still growing).
    - `kv_cache_bytes`: the cache of one model replica at `seq_len` x `batch`, window-aware.
    - `kv_cache_bytes_no_window`: the same with sliding layers treated as full (what an engine
      that gives sliding layers no saving allocates).
    - `..._per_gpu`: the fullest GPU under `tp` / `pp`; `kv_cache_bytes_all_gpus` sums every
      GPU (tp x pp x dp), counting heads replicated when tp exceeds the KV heads.
    - `state_bytes`: fixed per-sequence state of mamba / linear layers x batch (None when the
      config does not size it; 0 when the model has no such layers).
    """

    model: str
    source: str | None
    attention: str
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    v_head_dim: int
    queries_per_kv_head: int
    seq_len: int
    batch: int
    kv_dtype: str
    k_dtype: str
    v_dtype: str
    tp: int
    pp: int
    dp: int
    n_gpus: int
    kv_bytes_per_token: int
    kv_cache_bytes: int
    kv_cache_bytes_no_window: int
    kv_bytes_per_token_per_gpu: int
    kv_cache_bytes_per_gpu: int
    kv_cache_bytes_all_gpus: int
    state_bytes: int | None
    formula: str
    breakdown: list[KindBreakdown]
    #: attention data-parallel ranks of one engine, expert-parallel size, decode context parallel
    #: size (`calc.parallel`); per-GPU figures are the fullest rank's: ceil(batch / dp_attention)
    #: sequences of ceil(seq_len / dcp) positions
    dp_attention: int = 1
    ep: int = 1
    dcp: int = 1
