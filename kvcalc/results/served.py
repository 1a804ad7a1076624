"""`ServedEstimate`: the Python API's `kvcalc.estimate(..., gpu=..., engine=...)`, the KV estimate with
the GPU plan and the engine's allocation beside it (the CLI prints the same parts, `kvcalc estimate
--gpu G --engine E -f json`, merged into one object). Its own module: the CLI never builds it.

Frozen pydantic models, `extra="forbid"`: their JSON keys are a public contract."""

from __future__ import annotations

from kvcalc.results.engine import EngineResult
from kvcalc.results.kv import KvEstimate
from kvcalc.results.offload import LoadRow, OffloadResult, PrefixResult
from kvcalc.results.serving import FitHint, RequestEstimate, ServingEstimate


class ServedEstimate(KvEstimate):
    """`kvcalc.estimate(..., gpu=...)` (or `engine=...`): the `KvEstimate` (every key of it, so
    `.kv_cache_bytes` reads as before) with what `kvcalc estimate --gpu G --engine E` adds: the
    memory plan, the fit and the roofline speed on the GPU (`serving`: `fits`, `max_batch`,
    `tpot_s`, `tokens_per_s`, `ttft_s` ...; None without a GPU), what the engine allocates for
    the batch (`engine`; None without one, or when it would not start) and, when the batch does
    not fit, the fewest GPUs that would (`fit_hint`), and with input and output lengths the
    whole-request figures (`request`). With `offload=OffloadSettings(...)`: the tier below the GPU
    (`offload`), the shared prefix (`shared_prefix`) and the load-or-recompute rows
    (`load_or_recompute`, with a GPU). The same objects as the CLI's JSON holds."""

    serving: ServingEstimate | None = None
    engine: EngineResult | None = None
    fit_hint: FitHint | None = None
    request: RequestEstimate | None = None
    offload: OffloadResult | None = None
    shared_prefix: PrefixResult | None = None
    load_or_recompute: list[LoadRow] | None = None
