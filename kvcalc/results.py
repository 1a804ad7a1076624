"""The results every command returns: pydantic v2 models, frozen, `extra="forbid"` (their JSON
keys are a public contract). Inputs live in `kvcalc.schema`; `calc/` fills these in and
`report/` formats them.

- `KvEstimate` (with a `KindBreakdown` per layer kind): `kvcalc estimate`, `kv_cache.estimate`.
- `CompareRow`: `kvcalc compare`, `kv_cache.compare_attention`.
- `ServingEstimate`: the GPU side of `kvcalc estimate --gpu`, `memory_plan.Planner.serving`.
- `CheckRow`: one deployment of `kvcalc check`, `calc.check.check`.
- `PlanLayout`, `PlanMiss`, `PlanResult`: `kvcalc plan`, `calc.plan.search`; `FitHint`: the
  smallest count of a GPU that fits, beside `kvcalc estimate --gpu` when it does not.

`EngineResult` / `DeviceBuffer` (what an engine allocates) stay in `kvcalc.engines`, beside the
profile interface.
"""

from __future__ import annotations

from typing import Literal

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


class CompareRow(_Frozen):
    """One attention variant in `kvcalc compare`: its KV heads and bytes, and the reduction
    against MHA as a percentage (exact: 100 x (1 - bytes / mha_bytes))."""

    variant: str
    n_kv_heads: int
    kv_bytes_per_token: int
    kv_cache_bytes: int
    reduction_vs_mha_percent: float


class ServingEstimate(_Frozen):
    """The GPU side of `kvcalc estimate --gpu` (its JSON keys sit beside the KV keys).

    Bytes are per GPU (the fullest pipeline stage of one TP rank) unless named otherwise;
    `tokens_per_s` is the whole layout's output (every DP replica), `tokens_per_s_per_seq` one
    sequence's; `max_batch` is per replica at `seq_len`; `max_seq_len` at `batch`.
    """

    gpu: str
    gpu_count: int
    weight_dtype: str
    n_params: int
    n_active_params: int
    weights_bytes_per_gpu: int
    kv_cache_bytes_per_gpu: int
    state_bytes_per_gpu: int
    activation_reserve_bytes: int
    cuda_context_bytes: int
    memory_bytes_per_gpu: int
    gpu_memory_bytes: int
    gpu_memory_utilization: float
    budget_bytes_per_gpu: int
    headroom_bytes: int
    fits: bool
    max_batch: int
    max_seq_len: int
    max_seq_len_capped: bool
    bw_efficiency: float
    flops_efficiency: float
    decode_bytes_read_per_step: int
    decode_flops_per_step: int
    decode_bound: Literal["memory", "compute"]
    decode_allreduce_s: float
    tpot_s: float
    tokens_per_s_per_seq: float
    tokens_per_s: float
    ttft_s: float
    prefill_bound: Literal["memory", "compute"]


class CheckRow(_Frozen):
    """One checked deployment: its memory per GPU against the budget, the roofline decode at
    its worst case (every sequence at max_seq_len), and what, if anything, fails."""

    file: str
    name: str
    model: str
    gpu: str
    count: int
    tp: int
    pp: int
    dp: int
    kv_dtype: str
    weight_dtype: str
    max_seq_len: int
    concurrency: int
    memory_bytes_per_gpu: int
    budget_bytes_per_gpu: int
    headroom_bytes: int
    fits: bool
    max_concurrency: int
    tpot_ms: float
    tokens_per_s: float
    max_tpot_ms: float | None
    min_tokens_per_s: float | None
    meets_targets: bool
    status: Literal["ok", "does not fit", "misses target"]
    problems: list[str]


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


class PlanLayout(_Frozen):
    """One layout `kvcalc plan` found that fits and meets every target.

    - `gpu`: the GPU key (`a+b` for a fixed set of devices that differ, llama.cpp only);
      `devices`: the key of each device in stage order (one entry per GPU of one replica's
      pipeline when they differ, else the one key).
    - `count` = tp x pp x dp GPUs over `nodes` nodes; `stage_layers`: layers on each pipeline
      stage (llama.cpp's split; None: vLLM's), `tensor_split`: llama.cpp's `-ts` values.
    - Memory is per GPU (the device with the least headroom); `max_concurrency`: sequences of
      `seq_len` tokens that fit over all replicas; `tpot_ms` the fullest replica's decode step,
      `tokens_per_s` total output, `ttft_s` one `seq_len`-token prompt.
    - Prices (None without `--prices`): `price_per_gpu_hour` (the user's figure, $),
      `dollars_per_hour` = count x price, `dollars_per_million_tokens` = dollars_per_hour /
      (tokens_per_s x 3600) x 1e6.
    - `launch`: the engine's command line (None for the ideal engine).
    """

    rank: int
    gpu: str
    devices: list[str]
    count: int
    tp: int
    pp: int
    dp: int
    nodes: int
    kv_dtype: str
    weight_dtype: str
    seq_len: int
    concurrency: int
    weights_bytes_per_gpu: int
    kv_cache_bytes_per_gpu: int
    memory_bytes_per_gpu: int
    budget_bytes_per_gpu: int
    headroom_bytes: int
    max_concurrency: int
    tpot_ms: float
    tokens_per_s: float
    ttft_s: float
    stage_layers: list[int] | None = None
    tensor_split: list[int] | None = None
    price_per_gpu_hour: float | None = None
    dollars_per_hour: float | None = None
    dollars_per_million_tokens: float | None = None
    launch: str | None = None


class PlanMiss(_Frozen):
    """A layout that came nearest without qualifying: what failed and by how much
    (`problems`), what would fix it (`fixes`), and `score`, the worst ratio of a figure to its
    limit (used / budget, TPOT / target, ...; above 1)."""

    gpu: str
    count: int
    tp: int
    pp: int
    dp: int
    kv_dtype: str
    weight_dtype: str
    score: float
    problems: list[str]
    fixes: list[str]
    line: str


class PlanResult(_Frozen):
    """What `kvcalc plan` answers: the best `layouts` (ranked: fewest GPUs, then the lowest
    $/hour when prices are known, then the most tokens/s), how many qualified of how many
    points were searched, and, when none qualified, the nearest `misses`."""

    model: str
    source: str | None
    engine: str
    seq_len: int
    concurrency: int
    max_tpot_ms: float | None
    min_tokens_per_s: float | None
    max_ttft_s: float | None
    max_gpus: int
    gpus_searched: list[str]
    points_searched: int
    n_qualifying: int
    layouts: list[PlanLayout]
    misses: list[PlanMiss]
    notes: list[str] = []


class FitHint(_Frozen):
    """Beside `kvcalc estimate --gpu G` when the layout does not fit: the smallest count of G
    that fits the same workload and formats (None: none within `smallest_fitting_limit`)."""

    smallest_fitting_count: int | None
    smallest_fitting_layout: str | None
    smallest_fitting_limit: int
