"""`ServingEstimate`: the GPU side of `kvcalc estimate --gpu` (`memory_plan.Planner.serving`); `FitHint`: the smallest count of a GPU that fits, when it does not.

Frozen pydantic models, `extra="forbid"`: their JSON keys are a public contract."""

from __future__ import annotations

from typing import Literal

from kvcalc.schema import _Frozen  # frozen, extra="forbid": the one base of every model


class ServingEstimate(_Frozen):
    """The GPU side of `kvcalc estimate --gpu` (its JSON keys sit beside the KV keys).

    Bytes are per GPU (the fullest pipeline stage of one TP rank) unless named otherwise;
    `tokens_per_s` is the whole layout's output (every DP replica), `tokens_per_s_per_seq` one
    sequence's; `max_batch` is per replica at `seq_len`; `max_seq_len` at `batch`.
    `weights_source`: where the parameter count and weight bytes come from (`architecture`,
    `n_params`, or the checkpoint's headers: `safetensors headers of 4 files`, `GGUF tensor table`).
    """

    gpu: str
    gpu_count: int
    weight_dtype: str
    n_params: int
    n_active_params: int
    weights_source: str = "architecture"
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

class FitHint(_Frozen):
    """Beside `kvcalc estimate --gpu G` when the layout does not fit: the smallest count of G
    that fits the same workload and formats (None: none within `smallest_fitting_limit`)."""

    smallest_fitting_count: int | None
    smallest_fitting_layout: str | None
    smallest_fitting_limit: int

