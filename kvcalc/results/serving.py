"""`ServingEstimate`: the GPU side of `kvcalc estimate --gpu` (`memory_plan.GpuFit.serving`); `FitHint`: the smallest count of a GPU that fits, when it does not.

Frozen pydantic models, `extra="forbid"`: their JSON keys are a public contract."""

from __future__ import annotations

from typing import ClassVar, Literal

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
    #: None when the batch does not fit: no speed is promised for a layout that cannot run
    tpot_s: float | None
    tokens_per_s_per_seq: float | None
    tokens_per_s: float | None
    #: None when the batch does not fit, as TPOT: one prompt's prefill on a layout that cannot run is no figure
    ttft_s: float | None
    prefill_bound: Literal["memory", "compute"] | None
    #: the speed model's terms in words (`calc.speed.SpeedTerms.describe`): every speed figure is a model
    speed_model: str = "roofline"
    decode_floor_s: float = 0.0


class FitHint(_Frozen):
    """Beside `kvcalc estimate --gpu G` when the layout does not fit: the smallest count of G
    that fits the same workload and formats (None: none within `smallest_fitting_limit`)."""

    smallest_fitting_count: int | None
    smallest_fitting_layout: str | None
    smallest_fitting_limit: int


class RequestEstimate(_Frozen):
    """Whole requests of `input_len` / `output_len` tokens (`calc.request_speed`), beside
    `ServingEstimate` (its keys sit beside the serving keys, so none repeats one: the layout's
    `gpu_count` and `speed_model` are the serving part's): one request alone (TTFT, TPOT at the
    mean context, end to end), a static batch of `static_batch` per replica, and continuous
    batching at `request_rate` requests/s (Little's law). Seconds and tokens/s; per GPU divides
    by all the layout's GPUs. Every figure is None when `static_batch` sequences of input_len +
    output_len tokens do not fit (`request_fits` False); the `rate_*` figures are None without a
    rate or when the rate has no steady state (`rate_sustainable` False)."""

    input_len: int
    output_len: int
    static_batch: int
    request_fits: bool
    request_ttft_s: float | None = None
    request_tpot_s: float | None = None
    request_e2e_s: float | None = None
    static_ttft_s: float | None = None
    static_tpot_s: float | None = None
    static_e2e_s: float | None = None
    static_tokens_per_s: float | None = None
    static_tokens_per_s_per_gpu: float | None = None
    tokens_per_s_per_user: float | None = None
    request_rate: float | None = None
    rate_sustainable: bool | None = None
    rate_concurrency: float | None = None
    rate_kv_tokens: float | None = None
    rate_e2e_s: float | None = None
    rate_tpot_s: float | None = None
    rate_tokens_per_s: float | None = None
    rate_tokens_per_s_per_gpu: float | None = None

    #: `calc.request_speed.RequestSpeed` field -> this model's key
    RENAMED: ClassVar[dict[str, str]] = {
        "ttft_s": "request_ttft_s",
        "tpot_s": "request_tpot_s",
        "e2e_s": "request_e2e_s",
        "batch": "static_batch",
    }

    @classmethod
    def build(
        cls, rs: object, *, input_len: int, output_len: int, batch: int, fits: bool, request_rate: float | None
    ) -> RequestEstimate:
        """From a `calc.request_speed.RequestSpeed` (None: the batch does not fit)."""
        kw: dict[str, object] = dict(
            input_len=input_len, output_len=output_len, static_batch=batch, request_fits=fits, request_rate=request_rate
        )
        if rs is not None:
            import dataclasses

            for f in dataclasses.fields(rs):  # type: ignore[arg-type]
                kw[cls.RENAMED.get(f.name, f.name)] = getattr(rs, f.name)
        return cls(**kw)
