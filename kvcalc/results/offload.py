"""Results of the KV-beyond-the-GPU figures: `OffloadTier`, `OffloadResult` (offload tiers,
`kvcalc capacity --kv-offloading-size / --hicache-* / --lmcache-* / --no-kv-offload`),
`PrefixResult` (`--shared-prefix`), `LoadRow` (load or recompute), `TransferResult`
(`kvcalc transfer`).

Frozen pydantic models, `extra="forbid"`: their JSON keys are a public contract. Bytes are
exact integers; times are seconds."""

from __future__ import annotations

from kvcalc.schema import _Frozen


class OffloadTier(_Frozen):
    """One tier of the KV cache: `tier` ('GPU', 'CPU', 'host'), what it holds per rank
    (`tokens_per_rank`, `bytes_per_rank`), `sessions`: sessions of the asked context it holds
    (None without one)."""

    tier: str
    tokens_per_rank: int
    bytes_per_rank: int
    sessions: int | None = None


class OffloadResult(_Frozen):
    """An engine's offload tier and the host memory it pins.

    - `backend`: 'vllm-native', 'lmcache', 'lmcache-mp', 'sglang-hicache', 'llamacpp-host'.
    - `flags`: what to pass to the engine (its own flags and units).
    - `size_rule`: how the engine reads the size (GiB or GB, per rank or all ranks).
    - `host_bytes_per_rank`, `host_bytes_per_node` (ranks per node x per rank, or one server
      per node), `ranks_per_node`, `host_memory_bytes` (--host-memory, per node; None: not
      checked), `fits_host`.
    - `session_tokens`, `sessions_warm`: sessions of that context that stay warm: the tiers are
      inclusive (the engine writes GPU blocks through to the host tier), so the larger tier.
    - `log_lines`: the engine's own lines.
    """

    engine: str
    backend: str
    flags: list[str]
    size_rule: str
    tiers: list[OffloadTier]
    host_bytes_per_rank: int
    host_bytes_per_node: int
    ranks_per_node: int
    host_memory_bytes: int | None = None
    fits_host: bool | None = None
    session_tokens: int | None = None
    sessions_warm: int | None = None
    chunk_tokens: int | None = None
    num_chunks: int | None = None
    bytes_per_chunk: int | None = None
    log_lines: list[str] = []
    notes: list[str] = []


class PrefixResult(_Frozen):
    """A prefix every request shares (`--shared-prefix`).

    - `reuse_unit_tokens`: the engine's cache-hit unit (vLLM block, a hybrid's aligned block;
      SGLang page); `reusable_tokens`: whole units of the prefix a request takes from the
      cache (never the prompt's last token); `shared_blocks`: the units the prefix holds once.
    - `own_blocks_per_request`: what each request holds besides; `blocks_per_request`: without
      sharing; `usable_blocks`: the pool.
    - `max_concurrency_shared` vs `max_concurrency_unshared` (whole requests);
      `kv_occupancy` at `concurrency` requests (None without one).
    - `prefill_saved_tokens` per request (x `hit_rate`), `prefill_saved_fraction`.
    """

    engine: str
    prefix_tokens: int
    prompt_tokens: int
    reuse_unit_tokens: int
    reusable_tokens: int
    hit_rate: float
    shared_blocks: int
    own_blocks_per_request: int
    blocks_per_request: int
    usable_blocks: int
    unit: str
    max_concurrency_shared: int
    max_concurrency_unshared: int
    concurrency: int | None = None
    kv_occupancy: float | None = None
    prefill_saved_tokens: float
    prefill_saved_fraction: float
    warnings: list[str] = []


class LoadRow(_Frozen):
    """Bringing a prefix back over one link vs recomputing it (`kvcalc capacity --shared-prefix
    --gpu`): `load_s` (latency + bytes / rate), `recompute_s` (the prefill model's marginal
    time), `break_even_tokens` (the shortest prefix, in whole reuse units, that loads faster
    than it recomputes; None when none up to the prompt does)."""

    link: str
    link_bytes_per_s: int
    source: str
    prefix_bytes: int
    load_s: float
    recompute_s: float
    faster: str
    break_even_tokens: int | None = None


class TransferPair(_Frozen):
    """Bytes one prefill rank sends one decode rank for one request (`kvcalc transfer`)."""

    prefill_rank: int
    decode_rank: int
    kv_heads: str
    bytes: int
    regions: int


class TransferResult(_Frozen):
    """Prefill-to-decode KV transfer of one request.

    - `request_bytes`: KV bytes of `tokens` over all layers (every rank's share, sent once;
      MLA's replicated latent counted once per decode rank that needs it).
    - `pairs`: bytes per (prefill rank, decode rank); `regions_per_transfer`: contiguous
      regions (one per layer, K and V, block) a transfer descriptor list holds.
    - `blocks_per_request`: decode-side blocks of `decode_block_size` the request takes.
    - `time_s` over `link` (each decode rank receives its share at the link rate).
    - `prefill_decode_ratio`: prefill GPUs per decode GPU a workload needs (None without --gpu).
    """

    model: str
    tokens: int
    prefill_tp: int
    decode_tp: int
    kv_dtype: str
    request_bytes: int
    bytes_per_decode_rank: int
    pairs: list[TransferPair]
    prefill_block_size: int
    decode_block_size: int
    blocks_per_request: int
    regions_per_transfer: int
    link: str
    link_bytes_per_s: int
    link_source: str
    time_s: float
    prefill_s: float | None = None
    decode_s: float | None = None
    output_tokens: int | None = None
    prefill_decode_ratio: float | None = None
    notes: list[str] = []


class OffloadPart(_Frozen):
    """`offload`: the key an `OffloadResult` takes in `kvcalc capacity`'s machine formats."""

    offload: OffloadResult


class PrefixPart(_Frozen):
    """`shared_prefix`: the key a `PrefixResult` takes in `kvcalc capacity`'s machine formats."""

    shared_prefix: PrefixResult


class LoadRows(_Frozen):
    """`load_or_recompute`: one `LoadRow` per link."""

    load_or_recompute: list[LoadRow]


class NoKeys(_Frozen):
    """A part of a command's output that only the table shows (the engine's log lines, which the
    machine formats already hold in `log_lines`)."""
