"""`EngineResult` (with a `DeviceBuffer` per device of a layer split): what an engine allocates and logs (`kvcalc capacity`, `estimate --engine`).

Frozen pydantic models, `extra="forbid"`: their JSON keys are a public contract."""

from __future__ import annotations

from kvcalc.schema import _Frozen  # frozen, extra="forbid": the one base of every model


class DeviceBuffer(_Frozen):
    """One device's share of a layer-split cache (llama.cpp `--n-gpu-layers` / `--tensor-split`)."""

    device: str
    n_layers: int
    kv_bytes: int


class EngineResult(_Frozen):
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
    - `engine_state_bytes`: bytes of recurrent state beside the KV cache (llama.cpp's R and S
      buffers of mamba / linear-attention layers, f32); None where the engine keeps none.
    - `max_concurrency`: requests of `max_model_len` tokens that fit, by the engine's own formula.
    - `longest_context`: the longest context that still fits `concurrency` requests (None when
      sliding windows make it unbounded).
    - `kv_memory_basis`: where `kv_memory_bytes` came from in `estimate --engine` (a GPU plan's
      KV budget, or sized for the batch); None in `capacity` (the user's --kv-memory).
    - `log_lines`: the engine's own log lines, formatted as it formats them.
    """

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
    engine_state_bytes: int | None = None
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
