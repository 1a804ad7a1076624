"""`PlanLayout`, `PlanMiss`, `PlanResult`: `kvcalc plan` (`calc.plan.search`).

Frozen pydantic models, `extra="forbid"`: their JSON keys are a public contract."""

from __future__ import annotations

from pydantic import Field

from kvcalc.results.offload import OffloadResult
from kvcalc.schema import _Frozen  # frozen, extra="forbid": the one base of every model


class PlanLayout(_Frozen):
    """One layout `kvcalc plan` found that fits and meets every target.

    - `gpu`: the GPU key (`a+b` for a fixed set of devices that differ, llama.cpp only);
      `devices`: the key of each device in stage order (one entry per GPU of one replica's
      pipeline when they differ, else the one key).
    - `count` = tp x pp x dp GPUs over `nodes` nodes; `stage_layers`: layers on each pipeline
      stage (llama.cpp's split; None: vLLM's), `tensor_split`: llama.cpp's `-ts` values.
    - Memory is per GPU (the device with the least headroom); `max_concurrency`: sequences of
      `seq_len` tokens that fit over all replicas. Under vLLM, `kv_cache_bytes_per_gpu` is the
      KV memory vLLM's blocks need for the batch on that GPU and `max_concurrency` what its
      blocks admit (`engines.vllm.plan`); `headroom_bytes + kv_cache_bytes_per_gpu` is the KV
      memory the layout leaves the engine. `tpot_ms` the fullest replica's decode step,
      `tokens_per_s` total output (`tokens_per_s_per_gpu` over `count`), `ttft_s` one
      `seq_len`-token prompt. With whole requests (`PlanResult.input_len` / `output_len`,
      `calc.plan.WholeRequests`): TPOT at the mean context I + O / 2, tokens/s with the prefill
      included (at a request rate: rate x O), `ttft_s` one I-token prompt, `e2e_s` one request's
      end to end (None without whole requests).
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
    #: the KV pick the layout was sized with, (K, V, the engine's own `--kv-cache-dtype` or None:
    #: `calc.plan.KvPick`), which `kv_dtype` shows but cannot always tell apart (vLLM 0.33's `fp8`
    #: and `fp8_e4m3` both show fp8_e4m3): what `kvcalc plan --write-deployment` records
    #: (`EngineProfile.recorded_kv_dtype`). Not in the JSON output.
    kv_pick: tuple[str, str, str | None] | None = Field(default=None, exclude=True, repr=False)
    #: the speed terms TPOT / TTFT / tokens/s were modelled with (`calc.speed.SpeedTerms.describe`;
    #: "roofline": the bare roofline of the efficiency knobs)
    speed_model: str = "roofline"
    #: attention data-parallel ranks inside one engine and the expert-parallel size
    #: (`calc.parallel`; count = tp x pp x dp_attention x dp), and why the layout ranks where it
    #: does (`calc.plan.why`)
    dp_attention: int = 1
    ep: int = 1
    why: str | None = None
    #: decode context parallel (vLLM `-dcp`): dcp of the tp ranks each hold 1/dcp of every
    #: sequence's positions (`calc.parallel.dcp_tokens`)
    dcp: int = 1
    tokens_per_s_per_gpu: float | None = None
    e2e_s: float | None = None
    #: the tier below the GPU (`kvcalc plan --kv-offloading-size / --hicache-* / --lmcache-*`,
    #: `offload_request.layout_offload`), and the sessions of `seq_len` tokens it keeps warm over
    #: all replicas (each replica keeps its own); None when no tier is asked
    offload: OffloadResult | None = None
    sessions_warm: int | None = None


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
    #: whole requests the layouts were timed on (`calc.plan.WholeRequests`; None: every
    #: sequence at `seq_len`)
    input_len: int | None = None
    output_len: int | None = None
    request_rate: float | None = None
