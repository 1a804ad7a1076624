"""KV beyond the GPU: offload tiers, shared prefixes, load-or-recompute (pure arithmetic).

Each function is one engine rule or one identity, in the engine's own units. Sizes the
engines read from a flag are read as the engine reads them: some in GiB (2^30 bytes) and
some in GB (10^9 bytes), some per GPU rank and some for all ranks together; the engine's
float arithmetic is reproduced where it has one (`int(S * (1 << 30))`), so the bytes match
what the engine allocates to the byte.

Shapes: one block (vLLM) or page (SGLang) is `block_size` tokens of K and V of every layer of
one rank, `(L, 2, block_size, H_kv / tp, D)`; a vLLM offload chunk is `blocks_per_chunk`
blocks of every rank, `(world_size, L, 2, blocks_per_chunk x block_size, H_kv / tp, D)`.

Engines and files cited (versions current in Dec 2026):
- vLLM 0.33.0: `vllm/config/vllm.py` `_post_init_kv_transfer_config`,
  `vllm/v1/kv_offload/cpu/spec.py` `CPUOffloadingSpec.__init__`,
  `vllm/v1/kv_offload/cpu/common.py` `_kv_cache_size_tokens`,
  `vllm/distributed/kv_transfer/kv_connector/v1/offloading/config.py` `build_offloading_config`,
  `vllm/v1/core/kv_cache_manager.py` `get_computed_blocks` (the last-token rule).
- SGLang 0.5.23: `python/sglang/srt/mem_cache/pool_host/base.py` `HostKVCache.__init__`,
  `_allocate_host_buffer`, `host_memory_budget_bytes`; `mem_cache/hicache_auto_size.py`
  `auto_size_hicache`; `managers/schedule_batch.py` `_compute_max_prefix_len`.
- LMCache 0.5.6: `lmcache/v1/cache_engine.py` (`MixedMemoryAllocator(int(max_local_cpu_size
  * 1024**3))`, one per TP worker; LMCache/LMCache#2901), `lmcache/v1/config.py` (default 5.0,
  logged as "GB"), `lmcache/v1/distributed/config.py` (`--l1-size-gb` x 2^30, one server per node).
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 1 << 30
GB = 10**9

#: vLLM 0.33 `SharedOffloadRegion.BLOCK_SIZE_ALIGNMENT = mmap.PAGESIZE`: 4,096 bytes on x86-64
#: and aarch64 Linux with 4 KiB pages (`vllm/v1/kv_offload/cpu/shared_offload_region.py`)
VLLM_CHUNK_ALIGNMENT_BYTES = 4096

#: SGLang 0.5.23 `pool_host/base.py` `HICACHE_HOST_MEMORY_RESERVE_BYTES = 10 * (1024**3)`
SGLANG_HOST_RESERVE_BYTES = 10 * GIB
#: SGLang 0.5.23 `hicache_auto_size.py` `_ALLOCATION_SLACK_FRACTION = 0.05`
SGLANG_AUTO_SLACK = 0.05
#: SGLang 0.5.23 `arg_groups/hicache_hook.py`: --hicache-ratio default 2.0 (cache mode)
SGLANG_DEFAULT_HICACHE_RATIO = 2.0
#: SGLang 0.5.23 `arg_groups/fields/memory.py`: --hicache-host-memory-fraction default 0.8
SGLANG_DEFAULT_HOST_FRACTION = 0.8

#: LMCache 0.5.6 `lmcache/v1/config.py`: max_local_cpu_size default 5.0 (GiB, logged "GB"),
#: chunk_size default 256 tokens
LMCACHE_DEFAULT_CPU_SIZE = 5.0
LMCACHE_CHUNK_TOKENS = 256


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) for positive b."""
    return -(-a // b)


def round_up(n: int, to: int) -> int:
    """n rounded up to a multiple of `to` (`vllm.utils.math_utils.round_up`)."""
    return cdiv(n, to) * to


# ----- vLLM native CPU offload (OffloadingConnector, CPUOffloadingSpec) ---------------------


def vllm_cpu_bytes_to_use(kv_offloading_size: float) -> int:
    """Bytes vLLM 0.33 gives its CPU tier for `--kv-offloading-size S`: S x 2^30, in float as
    vLLM computes it (`vllm/config/vllm.py`: `{"cpu_bytes_to_use": kv_offloading_size *
    (1 << 30)}`; `cpu/spec.py`: `int(cpu_bytes_to_use)`). S is GiB for all ranks of one engine
    together (`vllm/config/cache.py`: "When TP > 1, this is the total buffer size summed
    across all TP ranks")."""
    return int(float(kv_offloading_size) * (1 << 30))


@dataclass(frozen=True)
class VllmChunks:
    """vLLM's CPU tier (`CPUOffloadingSpec.__init__`): `num_chunks` chunks of
    `bytes_per_chunk` (every rank's blocks, padded to `VLLM_CHUNK_ALIGNMENT_BYTES`), each rank
    holding `rank_bytes_per_chunk` of each; `total_bytes` = num_chunks x bytes_per_chunk
    (`CPUOffloadingInfo.cpu_kv_cache_size_bytes`); `copies`: rank copies per chunk (1 for a
    replicated MLA layout, else world_size)."""

    num_chunks: int
    bytes_per_chunk: int
    rank_bytes_per_chunk: int
    copies: int
    total_bytes: int


def vllm_chunks(
    cpu_bytes: int,
    worker_bytes_per_block: int,
    world_size: int,
    blocks_per_chunk: int = 1,
    replicated: bool = False,
    alignment: int = VLLM_CHUNK_ALIGNMENT_BYTES,
) -> VllmChunks:
    """vLLM 0.33 `cpu/spec.py`: copies = 1 if replicated else world_size; chunk = worker bytes
    per block x copies x blocks_per_chunk; rank share = chunk // copies; chunks =
    cpu_bytes // round_up(chunk, alignment). `worker_bytes_per_block` is one rank's block over
    all its layers and groups (`offloading/config.py`: `kv_cache_tensors[0].size //
    num_blocks`, the GPU block of `kv_cache_planning`). Raises ValueError for a non-positive
    block or world size (the engine would build no tier)."""
    if worker_bytes_per_block <= 0 or world_size <= 0 or blocks_per_chunk <= 0:
        raise ValueError("worker_bytes_per_block, world_size and blocks_per_chunk must be positive")
    copies = 1 if replicated else world_size
    chunk = worker_bytes_per_block * copies * blocks_per_chunk
    aligned = round_up(chunk, alignment)
    n = cpu_bytes // aligned
    return VllmChunks(
        num_chunks=n,
        bytes_per_chunk=aligned,
        rank_bytes_per_chunk=chunk // copies,
        copies=copies,
        total_bytes=n * aligned,
    )


def vllm_chunks_per_request(groups: list[tuple[str, int | None]], max_model_len: int, tokens_per_chunk: int) -> int:
    """Chunks one request of `max_model_len` takes in vLLM 0.33's CPU tier, over its KV cache
    groups (`cpu/common.py` `_kv_cache_size_tokens`; `offloading/config.py`
    `get_sliding_window_size_in_chunks`): a full or MLA group cdiv(L, tokens per chunk); a
    sliding group at most cdiv(window, tokens per chunk) (no speculative lookahead:
    extra_retained_tokens 0); a chunked-local group at most cdiv(chunk, tokens per chunk); a
    Mamba group 1. `groups`: (kind, window) per group. Raises ValueError for another kind."""
    total = 0
    for kind, window in groups:
        full = cdiv(max_model_len, tokens_per_chunk)
        if kind in ("full", "mla"):
            total += full
        elif kind in ("sliding", "chunked") and window:
            total += min(full, cdiv(window, tokens_per_chunk))
        elif kind == "mamba":
            total += 1
        else:
            raise ValueError(f"no offload chunk rule for a {kind} group")
    return total


def vllm_cpu_tokens_at_len(num_chunks: int, max_model_len: int, chunks_per_request: int) -> int:
    """KV tokens vLLM's CPU tier reports at `max_model_len` (`cpu/common.py`
    `_kv_cache_size_tokens`): num_chunks x L // chunks per request (`vllm_chunks_per_request`)."""
    return num_chunks * max_model_len // chunks_per_request


# ----- SGLang HiCache host pool -------------------------------------------------------------


def sglang_host_tokens(
    *,
    device_tokens: int,
    size_per_token: int,
    page_size: int,
    hicache_ratio: float | None = None,
    hicache_size_gb: int = 0,
) -> int:
    """Tokens of SGLang 0.5.23's host pool per rank (`pool_host/base.py` `HostKVCache.__init__`):
    with --hicache-size G > 0 (GB, decimal, per rank): size = int(G x 1e9 // size_per_token);
    else size = int(device_tokens x ratio); then page_num = size // page_size + 1 (a padding
    page) and size = page_num x page_size. `size_per_token`: bytes of one token over the rank's
    layers, `(head_dim + v_head_dim) x H_kv/tp x L x itemsize` (`pool_host/mha.py`)."""
    if hicache_size_gb > 0:
        size = int(hicache_size_gb * 1e9 // size_per_token)
    else:
        size = int(device_tokens * float(hicache_ratio if hicache_ratio is not None else SGLANG_DEFAULT_HICACHE_RATIO))
    return (size // page_size + 1) * page_size


def sglang_host_budget_bytes(host_available_bytes: int, ranks_per_host: int) -> int:
    """Host bytes one SGLang rank may claim (`pool_host/base.py` `host_memory_budget_bytes`):
    (available - 10 GiB reserve) // ranks on this host."""
    return (host_available_bytes - SGLANG_HOST_RESERVE_BYTES) // ranks_per_host


def sglang_auto_ratio(
    *,
    host_available_bytes: int,
    ranks_per_host: int,
    device_bytes: int,
    fraction: float = SGLANG_DEFAULT_HOST_FRACTION,
    requested: float = SGLANG_DEFAULT_HICACHE_RATIO,
) -> float:
    """The ratio SGLang 0.5.23 settles on when neither --hicache-ratio nor --hicache-size is
    given (`hicache_auto_size.py` `auto_size_hicache`): budget = int(per-rank budget x
    fraction); ratio = min(requested, budget x (1 - 0.05) / device_bytes). `device_bytes`: the
    device pool's K and V bytes (`get_kv_size_bytes`). Raises ValueError with SGLang's words
    when nothing is left after the reserve."""
    budget = int(sglang_host_budget_bytes(host_available_bytes, ranks_per_host) * fraction)
    ratio = min(requested, budget * (1 - SGLANG_AUTO_SLACK) / device_bytes)
    if ratio <= 0:
        raise ValueError(
            "No host memory is left for HiCache after the 10 GiB reserve; "
            "set --hicache-ratio or --hicache-size explicitly."
        )
    return ratio


# ----- LMCache ------------------------------------------------------------------------------


def lmcache_cpu_bytes(max_local_cpu_size: float) -> int:
    """Pinned bytes of one LMCache worker (one per TP rank): `int(max_local_cpu_size *
    1024**3)` (LMCache 0.5.6 `lmcache/v1/cache_engine.py`), though LMCache logs the value as
    "GB"; the same rule sizes the multi-process server's `--l1-size-gb` (one per node)."""
    return int(float(max_local_cpu_size) * 1024**3)


# ----- shared prefixes ----------------------------------------------------------------------


def reusable_prefix_tokens(prefix_tokens: int, prompt_tokens: int, block_size: int) -> int:
    """Tokens of a shared prefix a later request takes from the prefix cache: whole blocks
    only, and never the prompt's last token (its logits must be computed):
    floor(min(P, N - 1) / B) x B. vLLM 0.33 `vllm/v1/core/kv_cache_manager.py`
    `get_computed_blocks` (max_cache_hit_length = num_tokens - 1; hits are full blocks of the
    cache-hit alignment, a hybrid model's aligned block); SGLang 0.5.23
    `schedule_batch.py` `_compute_max_prefix_len` (input_len - 1) and `radix_cache.py`
    `RadixKey.match` (rounded down to page_size)."""
    if prefix_tokens <= 0 or prompt_tokens <= 1:
        return 0
    return min(prefix_tokens, prompt_tokens - 1) // block_size * block_size


def sessions_held(
    capacity_units: int,
    session_tokens: int,
    unit_tokens: int,
    prefix_tokens: int = 0,
    *,
    per_session: int | None = None,
    sharing_groups: int = 1,
) -> int:
    """Sessions of `session_tokens` a tier of `capacity_units` units (blocks, chunks, pages) of
    `unit_tokens` holds: each session takes `per_session` units (default cdiv(T, u), one group);
    a prefix all sessions share (`prefix_tokens`) is held once for its whole units
    (`reusable_prefix_tokens`) in each of `sharing_groups` full-attention groups:
    (capacity - shared) // (per session - shared); 0 when not even one fits."""
    per = cdiv(session_tokens, unit_tokens) if per_session is None else per_session
    shared = sharing_groups * (reusable_prefix_tokens(prefix_tokens, session_tokens, unit_tokens) // unit_tokens)
    return max(capacity_units - shared, 0) // (per - shared)


def shared_concurrency(usable_units: int, shared_units: int, own_units: int) -> int:
    """Requests that fit when `shared_units` (blocks or tokens) are held once and each request
    holds `own_units` more: floor((usable - shared) / own); 0 when the shared part alone does
    not fit."""
    if own_units <= 0:
        raise ValueError("own_units must be positive")
    return max(usable_units - shared_units, 0) // own_units


# ----- load or recompute --------------------------------------------------------------------


def load_time_s(n_bytes: int, link_bytes_per_s: int | float, latency_s: float = 0.0) -> float:
    """Seconds to move `n_bytes` over a link of `link_bytes_per_s`: latency + bytes / rate."""
    return latency_s + n_bytes / link_bytes_per_s
