"""kvcalc: exact KV-cache bytes and roofline decode throughput for real LLM architectures.

The Python API (the same request objects and code path as the CLI, `kvcalc.requests`):

    >>> import kvcalc
    >>> kvcalc.estimate("llama-3.1-70b", seq_len=8192, kv_dtype="fp16").kv_cache_bytes
    2684354560

- `load_model(ref)`: a `ModelSpec` from a bundled name, a YAML file, a config.json, a folder.
- `estimate(model, seq_len=..., ...)`: a `KvEstimate` (exact bytes); with `gpu=...` and / or
  `engine=...`, a `ServedEstimate`: the same keys plus the GPU fit, the roofline speed and the
  engine's allocation (`kvcalc estimate --gpu G --engine E`).
- `capacity(model, engine=..., kv_memory_bytes=..., ...)`: an `EngineResult` (what vLLM, SGLang,
  llama.cpp or the exact formula make of a KV memory budget, with the lines the engine logs).
- `plan(model, seq_len=..., concurrency=..., max_tpot_ms=..., ...)`: a `PlanResult` (the GPUs,
  layouts and launch lines that serve a workload within its targets, `kvcalc plan`).

Every user error raises `kvcalc.errors.KvcalcError`. Importing this package does no work and
imports nothing beyond the standard library (no pydantic, torch or rich): each function imports
what it needs when called.
"""

# Annotations are never evaluated (`from __future__ import annotations`): `ModelSpec`,
# `KvEstimate` and `EngineResult` (kvcalc.results) are imported for type checkers only, and
# `typing` not at all (14 ms), so that `import kvcalc` stays free.
from __future__ import annotations

__version__ = "0.2.0"

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing
if TYPE_CHECKING:
    from typing import TypeVar

    from kvcalc.engines.offload_rules import OffloadSettings
    from kvcalc.requests import EngineOptions
    from kvcalc.results import EngineResult, KvEstimate, PlanResult
    from kvcalc.schema import GpuSpec, ModelSpec

    _T = TypeVar("_T")

__all__ = ["__version__", "capacity", "estimate", "load_model", "plan"]


def load_model(ref: str | ModelSpec) -> ModelSpec:
    """The `ModelSpec` for `ref`: a bundled name (`kvcalc models`), a model YAML file, a Hugging
    Face config.json (or a folder holding one); a `ModelSpec` is returned as is.

    Raises `KvcalcError` (an `UnknownNameError` listing close names) when `ref` names nothing
    kvcalc reads, or the config is invalid.
    """
    from kvcalc.arguments import check_argument
    from kvcalc.schema import ModelSpec

    checked = check_argument("model", ref)
    if isinstance(checked, ModelSpec):
        return checked
    from kvcalc.load.models import load_model as _load

    return _load(checked)


def estimate(
    model: str | ModelSpec,
    *,
    seq_len: int | str | None = None,
    batch: int = 1,
    kv_dtype: str | None = None,
    k_dtype: str | None = None,
    v_dtype: str | None = None,
    quant_group_size: int | None = None,
    scale_dtype: str | None = None,
    tp: int = 1,
    pp: int = 1,
    dp: int = 1,
    dp_attention: int = 1,
    ep: int = 1,
    dcp: int = 1,
    gpu: str | GpuSpec | None = None,
    weight_dtype: str | None = None,
    gpu_memory_utilization: float | None = None,
    bw_efficiency: float | None = None,
    flops_efficiency: float | None = None,
    cuda_context_bytes: int | str | None = None,
    activation_reserve_bytes: int | str | None = None,
    engine: str = "ideal",
    options: EngineOptions | None = None,
    input_len: int | str | None = None,
    output_len: int | str | None = None,
    request_rate: float | None = None,
    offload: OffloadSettings | None = None,
    prefix_hit_rate: float | None = None,
    link: str | None = None,
) -> KvEstimate:
    """Exact KV-cache bytes of `model` (a name, path or `ModelSpec`) for `batch` sequences of
    `seq_len` tokens (None: the model's max_position_embeddings; '32k' is read as 32,768) per
    data-parallel replica, K and V stored as `kv_dtype` (None: the model's dtype; `k_dtype` /
    `v_dtype` override one side; `quant_group_size` values per scale of `scale_dtype` for
    int8 / int4), split over `tp` tensor ranks x `pp` pipeline stages x `dp` replicas; inside a
    replica (`kvcalc.calc.parallel`) `dp_attention` attention data-parallel ranks each hold their own
    sequences (vLLM --data-parallel-size with --enable-expert-parallel), `ep` GPUs divide the routed
    experts, `dcp` of the tp ranks each hold 1/dcp of every sequence's positions (vLLM -dcp).

    Returns a `KvEstimate`: `kv_cache_bytes` (one replica, all layers, bytes), `kv_bytes_per_token`,
    `kv_cache_bytes_per_gpu` (the fullest GPU), ... (`kvcalc estimate -f json` prints the same keys).
    Formula: sum over layers of 2 x n_kv_heads x head_dim x cached tokens x batch x bytes per
    value (sliding-window layers cache min(seq_len, window) tokens; MLA one latent per token).

    With `gpu` (a name from `kvcalc gpus`, a GPU YAML path or a `GpuSpec`) or an `engine`
    ('vllm', 'sglang', 'llamacpp'), as `kvcalc estimate --gpu G --engine E`: a `ServedEstimate`,
    the same `KvEstimate` keys plus `serving` (the memory plan, whether the batch fits,
    `max_batch`, the roofline `tpot_s`, `tokens_per_s`, `ttft_s`), `engine` (what the engine
    allocates for the batch, with its log lines) and `fit_hint` (the fewest GPUs that fit, when
    it does not). The plan's knobs are the CLI's: `weight_dtype` (None: the checkpoint's),
    `gpu_memory_utilization` (0.9), `bw_efficiency`, `flops_efficiency`, `cuda_context_bytes`,
    `activation_reserve_bytes` (an int or a size, '2GiB'); they need `gpu`, as on the command
    line. With `input_len` and `output_len` (and optionally `request_rate`, requests/s) on a
    GPU, `request` holds the whole-request figures of `kvcalc estimate --input-len --output-len`
    (TTFT, TPOT, end to end, static-batch and continuous-batching throughput); without `seq_len`
    the memory plan holds input_len + output_len tokens, as on the command line. `options`: the engine's options object (`kvcalc.engines.profile.VllmOptions`
    ...; vLLM's compute capability and vendor come from `gpu` when the options leave them None).
    `offload` (`kvcalc.engines.offload_rules.OffloadSettings`, with an `engine`): the tier below
    the GPU as `kvcalc estimate --kv-offloading-size / --hicache-* / --lmcache-* --host-memory
    --shared-prefix` sizes it, at `seq_len` tokens a session: `offload` (tokens and bytes per
    tier per rank, host bytes per node, sessions kept warm, the engine's flags and log lines),
    `shared_prefix` (`prefix_hit_rate`: the share of requests that find it cached, None: 1.0) and, with
    `gpu`, `load_or_recompute` over `link` (a comma list of `kvcalc/data/links.yaml` keys;
    None: every host, storage and network link). A tier the host cannot hold raises
    `KvcalcError` (option --host-memory) with the figures.

    Raises `KvcalcError` naming the argument for a value of the wrong type (a bool, a float or a
    str where a count goes) or past the CLI's bounds (`kvcalc.arguments`), for a plan knob
    without `gpu`, and for an unknown format, GPU or engine or a TP / PP layout the engines
    refuse; warns (`KvcalcWarning`) for a context beyond the model's.
    """
    from kvcalc.arguments import check_arguments
    from kvcalc.requests import EstimateRequest, run_estimate

    args = check_arguments(
        seq_len=seq_len,
        batch=batch,
        kv_dtype=kv_dtype,
        k_dtype=k_dtype,
        v_dtype=v_dtype,
        quant_group_size=quant_group_size,
        scale_dtype=scale_dtype,
        tp=tp,
        pp=pp,
        dp=dp,
        dp_attention=dp_attention,
        ep=ep,
        dcp=dcp,
    )
    knobs = check_arguments(
        weight_dtype=weight_dtype,
        gpu_memory_utilization=gpu_memory_utilization,
        bw_efficiency=bw_efficiency,
        flops_efficiency=flops_efficiency,
        cuda_context_bytes=cuda_context_bytes,
        activation_reserve_bytes=activation_reserve_bytes,
    )
    served = check_arguments(gpu=gpu, engine=engine)
    whole = check_arguments(input_len=input_len, output_len=output_len, request_rate=request_rate)
    beyond = check_arguments(offload=offload, prefix_hit_rate=prefix_hit_rate, link=link)
    link = ",".join(beyond["link"]) if isinstance(beyond["link"], (list, tuple)) else beyond["link"]
    if offload is None:
        _refuse_without_offload(prefix_hit_rate=beyond["prefix_hit_rate"], link=link)
    knobs = {k: v for k, v in knobs.items() if v is not None}
    spec = load_model(model)
    if args["seq_len"] is None and whole["input_len"] is not None and whole["output_len"] is not None:
        args["seq_len"] = whole["input_len"] + whole["output_len"]  # the memory plan holds the whole request
    if served["gpu"] is None:
        given = {k: v for k, v in whole.items() if v is not None}
        if given:
            knobs = {**given, **knobs}
        if knobs:
            from kvcalc.errors import OPTION_SAYS, KvcalcError

            name = next(iter(knobs))
            raise KvcalcError(
                "needs gpu: it sets the GPU's memory plan and roofline",
                option=name,
                field=name,
                value=knobs[name],
                form=OPTION_SAYS,
            )
        req = EstimateRequest.build(spec, **args, engine=served["engine"], engine_options=options)
    else:
        from kvcalc.calc.memory_plan import Layout
        from kvcalc.load.gpus import get_gpu

        gpu_spec = get_gpu(served["gpu"]) if isinstance(served["gpu"], str) else served["gpu"]
        layout = Layout(**knobs)  # its knobs checked where the request is built (`EstimateRequest.build`)
        req = EstimateRequest.build(
            spec,
            **args,
            gpu=gpu_spec,
            layout=layout,
            engine=served["engine"],
            engine_options=_with_gpu(served["engine"], options, gpu_spec),
            **whole,
        )
    res = run_estimate(req)
    if served["gpu"] is None and res.engine is None and req.engine == "ideal" and offload is None:
        return res.kv
    from kvcalc.results.served import ServedEstimate

    extra: dict[str, object] = {}
    if offload is not None:
        from kvcalc.offload_request import estimate_extras

        for part, _ in estimate_extras(offload, req, res, hit_rate=_or(beyond["prefix_hit_rate"], 1.0), link=link):
            extra |= dict(part)
    return ServedEstimate(
        **dict(res.kv), serving=res.serving, engine=res.engine, fit_hint=res.fit_hint, request=res.request, **extra
    )


def _or(value: float | None, default: float) -> float:
    """`value`, or `default` where it is None."""
    return default if value is None else value


def _refuse_without_offload(**given: object) -> None:
    """Refuse (KvcalcError naming the argument) a prefix or link argument given without
    `offload`: it would be ignored, as `kvcalc estimate` refuses --prefix-hit-rate / --link
    without a tier."""
    from kvcalc.errors import OPTION_SAYS, KvcalcError

    for name, value in given.items():
        if value is not None:
            raise KvcalcError(
                "needs offload: it qualifies the tier below the GPU (an OffloadSettings with --shared-prefix or a tier)",
                option=name,
                field=name,
                value=value,
                form=OPTION_SAYS,
            )


def _replace(obj: _T, **changes: object) -> _T:
    """`dataclasses.replace`, imported when called (`import kvcalc` stays free)."""
    import dataclasses

    return dataclasses.replace(obj, **changes)  # type: ignore[type-var]


def _with_gpu(engine: str, options: EngineOptions | None, gpu: GpuSpec) -> EngineOptions | None:
    """vLLM's options with the GPU's compute capability and vendor where they leave them None
    (as the CLI's `--gpu` gives them, `cli.options.engine_options`); other engines' as given."""
    import dataclasses

    from kvcalc.engines import canonical

    if canonical(engine) != "vllm":
        return options
    from kvcalc.engines.profile import VllmOptions

    o = options if options is not None else VllmOptions()
    if not isinstance(o, VllmOptions):
        return options  # another engine's options: refused, naming them, by the request
    vendor = None if gpu.vendor == "other" else gpu.vendor
    return dataclasses.replace(
        o, compute_capability=o.compute_capability or gpu.compute_capability, vendor=o.vendor or vendor
    )


def capacity(
    model: str | ModelSpec,
    *,
    engine: str = "ideal",
    kv_memory_bytes: int | str | None,
    max_model_len: int | str | None = None,
    concurrency: int | None = None,
    kv_dtype: str | None = None,
    k_dtype: str | None = None,
    v_dtype: str | None = None,
    tp: int = 1,
    options: EngineOptions | None = None,
) -> EngineResult:
    """What `engine` ('ideal', 'vllm', 'sglang', 'llamacpp') makes of `kv_memory_bytes` bytes of
    KV memory on each of `tp` GPU ranks (vLLM's "Available KV cache memory"; SGLang's static pool
    budget; an int, or a size as the CLI takes it: '6.51GiB', '80GB'): tokens, blocks, requests of `max_model_len` tokens (None: the model's) that fit at
    once, and, given `concurrency`, the longest context that fits that many requests.

    `kv_dtype` None (or 'auto') is the engine's own default (the model's dtype served as 16-bit;
    llama.cpp f16). `options` is the engine's options object (`kvcalc.engines.profile.VllmOptions`,
    `SglangOptions`, `LlamacppOptions`; None: the engine's defaults); llama.cpp with
    `LlamacppOptions(n_ctx=...)` sizes that context and `kv_memory_bytes` may be None.

    Returns an `EngineResult` (`kv_cache_tokens`, `num_gpu_blocks`, `max_concurrency`,
    `log_lines` as the engine prints them, ...). Raises `KvcalcError` naming the argument for a
    value of the wrong type or past the CLI's bounds (`kvcalc.arguments`: a budget of 0 B is
    refused as `--kv-memory 0` is), and for an unknown engine or format, another engine's
    options, or a budget the engine would refuse to start with.
    """
    from kvcalc.arguments import check_arguments
    from kvcalc.requests import CapacityRequest, run_capacity

    args = check_arguments(
        engine=engine,
        kv_memory_bytes=kv_memory_bytes,
        max_model_len=max_model_len,
        concurrency=concurrency,
        kv_dtype=kv_dtype,
        k_dtype=k_dtype,
        v_dtype=v_dtype,
        tp=tp,
    )
    req = CapacityRequest.build(load_model(model), **args, options=options)
    return run_capacity(req)


def plan(
    model: str | ModelSpec,
    *,
    seq_len: int | str | None = None,
    concurrency: int = 1,
    gpus: str | list[str] | None = None,
    max_gpus: int | None = None,
    engine: str = "vllm",
    kv_dtypes: str | list[str] | None = None,
    weight_dtypes: str | list[str] | None = None,
    max_tpot_ms: float | None = None,
    min_tokens_per_s: float | None = None,
    max_ttft_s: float | None = None,
    prices: dict[str, float] | str | None = None,
    top: int | None = None,
    why_not: int | None = None,
    gpus_per_node: int | None = None,
    options: EngineOptions | None = None,
    offload: OffloadSettings | None = None,
    sessions: int | None = None,
    dcp: int | None = None,
) -> PlanResult:
    """The layouts that serve `concurrency` sequences of `seq_len` tokens (None: the model's
    max_position_embeddings) of `model` within the targets (`max_tpot_ms` ms per output token,
    `min_tokens_per_s` total output tokens/s, `max_ttft_s` s to the first token of one prompt):
    every GPU of `gpus` (names or a comma list; `a+b` a fixed set of devices; None: the whole
    table) x counts up to `max_gpus` (default 32; whole nodes of `gpus_per_node`, default 8,
    past one) x tp / pp / dp x the KV and weight formats listed (None: the model's, then fp8
    where the GPU has it), ranked by fewest GPUs, then the lowest cost where `prices` (GPU key
    -> dollars per GPU-hour, or a YAML file of them) give one, then the most tokens/s.
    `options`: the engine's options object (`kvcalc.engines.profile.VllmOptions(version="0.11")`);
    with vLLM each layout's KV cache on each GPU is vLLM's own blocks (`engines.vllm.plan`).
    `offload` (an `OffloadSettings`, vLLM or SGLang): each layout's tier below the GPU, as
    `kvcalc plan --kv-offloading-size / --hicache-* --host-memory --shared-prefix` counts it
    (`layout.offload`, `layout.sessions_warm` over all replicas, the flags on the launch line);
    layouts the host cannot hold, or that keep fewer than `sessions` sessions warm, are dropped
    with a note (`offload_request.plan_with_offload`). `dcp`: vLLM's decode context parallel
    pinned for every layout (`kvcalc plan --dcp N`; None: searched only where nothing else fits).

    Returns a `PlanResult` (`layouts`, each with its figures and `engine`'s launch line; when
    none qualifies, `misses` with what failed and what would fix it), as `kvcalc plan -f json`.
    Raises `KvcalcError` naming the argument for a value of the wrong type or past the CLI's
    bounds (`kvcalc.arguments`: a target <= 0, a count < 1), and for an unknown GPU, engine or
    format, a price file naming an unknown GPU or a negative price, or a model file that cannot
    size the weights (naming the file).
    """
    from kvcalc.arguments import check_arguments
    from kvcalc.load.models import naming_model_file
    from kvcalc.requests import PlanRequest, run_plan

    args = check_arguments(
        seq_len=seq_len,
        concurrency=concurrency,
        gpus=gpus,
        max_gpus=max_gpus,
        engine=engine,
        kv_dtypes=kv_dtypes,
        weight_dtypes=weight_dtypes,
        max_tpot_ms=max_tpot_ms,
        min_tokens_per_s=min_tokens_per_s,
        max_ttft_s=max_ttft_s,
        prices=prices,
        top=top,
        why_not=why_not,
        gpus_per_node=gpus_per_node,
    )
    check_arguments(offload=offload, sessions=sessions, dcp=dcp)
    spec = load_model(model)
    from kvcalc.schema import ModelSpec

    if sessions is not None and offload is None:
        from kvcalc.errors import KvcalcError

        raise KvcalcError("sessions counts an offload tier: give offload=OffloadSettings(...)", field="sessions")
    with naming_model_file(None if isinstance(model, ModelSpec) else model, spec.name):
        req = PlanRequest.build(spec, **args, engine_options=options, dcp=dcp)
        if offload is None:
            return run_plan(req)
        from kvcalc.offload_request import plan_with_offload

        gpn = req.search.gpus_per_node
        return plan_with_offload(req, _replace(offload, gpus_per_node=gpn), sessions)
