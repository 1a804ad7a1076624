"""KV beyond the GPU, beside `kvcalc.requests`: what `kvcalc capacity` adds to the engine's own
result (the offload tier, a shared prefix, loading it back or recomputing it:
`capacity_extras`) and a deployment's offload tier in `kvcalc check` (`check_offload`: the
engine's KV memory from the deployment's GPU plan, `requests.plan_kv_memory`, its blocks,
`EngineProfile.capacity`, its tier, `engines.offload_rules.offload_for`; a tier the host cannot
hold is a problem of the row, "does not fit", with the figures). Computes; prints nothing."""

from __future__ import annotations

from typing import TYPE_CHECKING, Union

from kvcalc.errors import MESSAGE, KvcalcError

if TYPE_CHECKING:
    from kvcalc.calc.memory_plan import Layout
    from kvcalc.engines.offload_rules import OffloadSettings
    from kvcalc.json_types import JsonObject
    from kvcalc.requests import CapacityRequest, EngineOptions, EstimateRequest, EstimateResult, PlanRequest
    from kvcalc.results import CheckRow, EngineResult, PlanLayout, PlanResult, PrefixResult
    from kvcalc.results.offload import LoadRows, OffloadPart, OffloadResult, PrefixPart
    from kvcalc.schema import ModelSpec
    from kvcalc.schema_deploy import Deployment, GpuSpec, OffloadSpec

    #: one part `kvcalc capacity` (and `estimate --engine E`) prints after the engine's own
    ExtraPart = Union[OffloadPart, PrefixPart, LoadRows]


def capacity_extras(
    s: OffloadSettings,
    req: CapacityRequest,
    res: EngineResult,
    *,
    hit_rate: float,
    link: str | None,
    dp: int,
    gpu: str | GpuSpec | None,
    layout: Layout | None,
    session_tokens: int | None = None,
) -> list[tuple[ExtraPart, str]]:
    """(result, title) of each part `kvcalc capacity` prints after the engine's own: the offload
    tier (`s`, an `OffloadSettings`, asks for one; llama.cpp: also --host-memory alone), the
    shared prefix (`s.shared_prefix_tokens`) and, with `gpu`, the load-or-recompute rows over
    `link` (comma list; None: every host, storage and network link). `req`: the
    `CapacityRequest`; `res`: its `EngineResult`; `layout`: the GPU plan's `memory_plan.Layout`
    (the prefill model); `session_tokens`: a session's context (None: the engine's max_model_len,
    else its n_ctx or pool). Raises `KvcalcError`."""
    import dataclasses

    from kvcalc.engines.profile import get_profile
    from kvcalc.results.offload import OffloadPart, PrefixPart

    parts: list[tuple[ExtraPart, str]] = []
    L = session_tokens or res.max_model_len or res.n_ctx or res.kv_cache_tokens
    prof = get_profile(req.engine)
    if s.asked or s.host_memory_bytes is not None:
        if not s.asked and req.engine != "llamacpp":  # llama.cpp: the KV of the layers -ngl leaves on the CPU
            raise KvcalcError(
                "--host-memory checks an offload tier: give the engine's offload flag "
                "(--kv-offloading-size, --lmcache-cpu-size, --enable-hierarchical-cache / --hicache-ratio / "
                "--hicache-size, --no-kv-offload)",
                option="--host-memory",
                form=MESSAGE,
            )
        from kvcalc.engines.llamacpp.options import LlamacppOptions
        from kvcalc.engines.offload_rules import offload_for

        cpu_lines = None
        if req.engine == "llamacpp" and isinstance(req.options, LlamacppOptions):  # always, once built
            on_cpu = prof.capacity(
                req.model,
                req.kv_memory_bytes,
                req.k,
                req.v,
                tp=req.tp,
                max_model_len=L,
                options=dataclasses.replace(req.options, n_gpu_layers=0),
            )
            cpu_lines = [line for line in on_cpu.log_lines if "KV buffer" in line]
        off = offload_for(
            req.engine,
            req.model,
            res,
            s,
            tp=req.tp,
            dp=dp,
            session_tokens=L,
            k=req.k,
            v=req.v,
            options=req.options,
            cpu_lines=cpu_lines,
        )
        parts.append((OffloadPart(offload=off), f"KV beyond the GPU: {req.model.name} on {prof.display_name}"))
    if s.shared_prefix_tokens:
        from kvcalc.engines.prefix_rules import shared_prefix

        P = s.shared_prefix_tokens
        pre = shared_prefix(
            prof,
            req.model,
            res,
            req.k,
            req.v,
            tp=req.tp,
            options=req.options,
            prefix_tokens=P,
            prompt_tokens=L,
            hit_rate=hit_rate,
            concurrency=req.concurrency,
        )
        parts.append((PrefixPart(shared_prefix=pre), f"Shared prefix of {P:,} tokens, requests of {L:,}"))
        if gpu is not None:
            parts.append(
                (
                    load_rows(pre, res, req, gpu, layout, link),
                    f"Load the {pre.reusable_tokens:,}-token prefix or recompute it ({getattr(gpu, 'key', gpu)})",
                )
            )
    elif link is not None:
        raise KvcalcError(
            "--link times a shared prefix's load: give --shared-prefix and --gpu", option="--link", form=MESSAGE
        )
    return parts


def estimate_extras(
    s: OffloadSettings, req: EstimateRequest, res: EstimateResult, *, hit_rate: float, link: str | None
) -> list[tuple[ExtraPart, str]]:
    """`capacity_extras` for `kvcalc estimate --engine E` (and `kvcalc.estimate(..., offload=...)`):
    the same offload tier, shared prefix and load-or-recompute rows, from the estimate's own
    engine result (`res.engine`: what the engine allocates on the GPU plan, or for the batch
    without --gpu) at its context (`req.workload.seq_len`, the session) and batch (the
    concurrency the shared prefix's occupancy is for). `s`: an `OffloadSettings`; `req`: the
    `EstimateRequest`; `res`: its `EstimateResult`. Raises `KvcalcError` for --engine ideal, an
    engine that would not start on the plan, and what `capacity_extras` refuses."""
    import dataclasses

    from kvcalc.engines import canonical
    from kvcalc.requests import CapacityRequest

    asked = "the offload tier" if s.asked or s.host_memory_bytes is not None else "--shared-prefix"
    option = "--host-memory" if asked == "the offload tier" else "--shared-prefix"
    if canonical(req.engine) == "ideal":
        raise KvcalcError(
            f"{asked} is an engine's: give --engine vllm, sglang or llamacpp", option=option, form=MESSAGE
        )
    if res.engine is None:
        raise KvcalcError(
            f"{asked}: {req.engine} would not start on this plan (see the warning), so nothing is sized",
            option=option,
            form=MESSAGE,
        )
    wl, par = req.workload, req.workload.parallel
    if par.pp > 1:
        raise KvcalcError(
            f"{asked} is modelled for pp 1 (one rank holds every layer)", option="--pp", value=par.pp, form=MESSAGE
        )
    B = -(-wl.batch // par.dp_attention)  # each attention-DP rank is an engine core (`engine_for_batch`)
    opts = req.engine_options
    if res.engine.engine == "llamacpp":  # the cells the estimate sized: n_ctx = T x B, --parallel B
        from kvcalc.engines.profile import get_profile

        opts = dataclasses.replace(get_profile("llamacpp").options(opts), n_ctx=wl.seq_len * B, parallel=B)
    cap = CapacityRequest.build(
        req.model,
        engine=req.engine,
        kv_memory_bytes=res.engine.kv_memory_bytes,
        tp=par.tp,
        max_model_len=wl.seq_len,
        concurrency=B,
        options=opts,
        k_dtype=wl.k_dtype if req.kv_given else None,  # the formats the request builder resolved
        v_dtype=wl.v_dtype if req.kv_given else None,
    )
    layout = None
    if res.gpu is not None:
        from kvcalc.calc.memory_plan import Layout

        layout = dataclasses.replace(
            req.layout if req.layout is not None else Layout(),
            tp=par.tp,
            pp=par.pp,
            dp=par.dp,
            k_dtype=wl.k_dtype,
            v_dtype=wl.v_dtype,
        )
    return capacity_extras(
        s,
        cap,
        res.engine,
        hit_rate=hit_rate,
        link=link,
        dp=par.dp * par.dp_attention,
        gpu=res.gpu,
        layout=layout,
        session_tokens=wl.seq_len,
    )


def load_rows(
    pre: PrefixResult,
    res: EngineResult,
    req: CapacityRequest,
    gpu: str | GpuSpec,
    layout: Layout | None,
    link: str | None,
) -> LoadRows:
    """(`LoadRows`) each link's time for the reusable prefix against the prefill model's marginal
    time on `gpu` (a name or `GpuSpec`; `memory_plan.GpuFit.prefill` of the prompt less that of
    its rest)."""
    from kvcalc.calc.memory_plan import GpuFit
    from kvcalc.engines.prefix_rules import bytes_per_token_per_rank, load_or_recompute
    from kvcalc.load.gpus import get_gpu
    from kvcalc.load.links import get_link, link_table
    from kvcalc.results.offload import LoadRows

    spec = get_gpu(gpu) if isinstance(gpu, str) else gpu

    from kvcalc.requests import _names

    names = _names(link, "--link")  # `nvme-gen5,,` refused as --gpu's stray comma is, not dropped
    if names:
        links = [get_link(n) for n in names]
    else:
        links = [x for x in link_table().values() if x.kind in ("host", "storage", "network")]
    planner = GpuFit(req.model, spec) if layout is None else GpuFit(req.model, spec, layout)
    N = pre.prompt_tokens
    whole_s = planner.prefill(N).step_time_s

    def recompute(p: int) -> float:
        return whole_s - planner.prefill(N - p).step_time_s

    return LoadRows(load_or_recompute=load_or_recompute(pre, bytes_per_token_per_rank(res), links, recompute))


def settings_of(spec: OffloadSpec) -> OffloadSettings:
    """The `OffloadSettings` of a deployment's `OffloadSpec` (sizes kept as the file gives them)."""
    from kvcalc.engines.offload_rules import OffloadSettings

    def text(v: object) -> str | None:
        return None if v is None else str(v)

    return OffloadSettings(
        kv_offloading_size=text(spec.kv_offloading_size),
        kv_offloading_backend=spec.kv_offloading_backend,
        blocks_per_chunk=spec.blocks_per_chunk,
        lmcache_cpu_size=text(spec.lmcache_cpu_size),
        lmcache_l1_size=text(spec.lmcache_l1_size),
        hicache_ratio=spec.hicache_ratio,
        hicache_size=text(spec.hicache_size),
        hicache_host_memory_fraction=spec.hicache_host_memory_fraction,
        host_memory_bytes=spec.host_memory,
        gpus_per_node=spec.gpus_per_node,
        shared_prefix_tokens=spec.shared_prefix or 0,
    )


def spec_data(s: OffloadSettings, engine: str) -> JsonObject:
    """The deployment YAML's `offload:` mapping (`schema_deploy.OffloadSpec`) of the settings `s`
    (an `OffloadSettings`), the inverse of `settings_of`: each size as the engine's flag takes it,
    `host_memory` in bytes; values at their defaults left out."""
    from kvcalc.engines.offload_rules import OffloadSettings

    plain = OffloadSettings()
    data: JsonObject = {"engine": engine}
    for key in (
        "kv_offloading_size",
        "kv_offloading_backend",
        "blocks_per_chunk",
        "lmcache_cpu_size",
        "lmcache_l1_size",
        "hicache_ratio",
        "hicache_size",
        "hicache_host_memory_fraction",
        "gpus_per_node",
    ):
        value = getattr(s, key)
        if value != getattr(plain, key):
            data[key] = value
    if s.host_memory_bytes is not None:
        data["host_memory"] = s.host_memory_bytes
    if s.shared_prefix_tokens:
        data["shared_prefix"] = s.shared_prefix_tokens
    return data


def deployment_offload(dep: Deployment, model: ModelSpec, gpu: GpuSpec) -> OffloadResult:
    """The `OffloadResult` of `dep.offload` on `gpu` (a `GpuSpec`). Raises `KvcalcError`: the
    host refusal (option --host-memory) or the engine's refusal of the flags."""
    from kvcalc.calc.check import layout
    from kvcalc.engines.offload_rules import offload_for
    from kvcalc.engines.profile import get_profile
    from kvcalc.requests import CapacityRequest, plan_kv_memory, run_capacity

    spec = dep.offload
    if spec is None:  # the caller (`load.deployments`) comes here only with an offload: section
        raise KvcalcError("the deployment has no offload: section", field="offload")
    if dep.pp > 1:
        raise KvcalcError(
            "offload: the tier is modelled for pp 1 (one rank holds every layer)", field="offload", value=dep.pp
        )
    prof = get_profile(spec.engine)
    mem, _ = plan_kv_memory(model, gpu, layout(dep, model), dep.max_seq_len, dep.batch_per_replica, spec.engine)
    options = None
    if spec.engine == "vllm":
        options = prof.options(None)
        import dataclasses

        options = dataclasses.replace(
            options, compute_capability=gpu.compute_capability, vendor=None if gpu.vendor == "other" else gpu.vendor
        )
    req = CapacityRequest.build(
        model,
        engine=spec.engine,
        kv_memory_bytes=mem,
        kv_dtype=dep.kv_dtype,
        tp=dep.resolved_tp,
        max_model_len=dep.max_seq_len,
        options=options,
    )
    res = run_capacity(req)
    return offload_for(
        req.engine,
        model,
        res,
        settings_of(spec),
        tp=dep.resolved_tp,
        dp=dep.dp,
        session_tokens=dep.max_seq_len,
        k=req.k,
        v=req.v,
        options=req.options,
    )


def check_offload(dep: Deployment, model: ModelSpec, gpu: GpuSpec, row: CheckRow) -> CheckRow:
    """`row` (a `CheckRow`) with the offload tier's host check: a tier the host memory cannot
    hold adds its refusal to `problems` and makes the status "does not fit"; one that fits adds
    a note (`offload_note`: sessions kept warm, host per node, the flags). Other refusals
    (flags of another engine, sizes in the wrong unit) raise `KvcalcError` (field `offload`)."""
    try:
        off = deployment_offload(dep, model, gpu)
    except KvcalcError as e:
        if e.option != "--host-memory":
            raise KvcalcError(e.message, field="offload", value=e.value) from None
        return row.model_copy(update={"problems": [*row.problems, f"offload: {e.message}"], "status": "does not fit"})
    return row.model_copy(update={"notes": [*row.notes, offload_note(off, dep.dp)]})


def offload_note(off: OffloadResult, dp: int) -> str:
    """One line for a deployment's tier (`OffloadResult` `off`, `dp` replicas): the sessions it
    keeps warm, the host it pins per node against --host-memory, and the flags to pass."""
    warm = off.sessions_warm or 0
    replicas = f" x {dp} replicas = {warm * dp:,}" if dp > 1 else ""
    host = f"{off.host_bytes_per_node / 1e9:,.2f} GB per node"
    if off.host_memory_bytes is not None:
        host += f" of {off.host_memory_bytes / 1e9:,.2f} GB"
    return (
        f"offload ({off.backend}): {warm:,} sessions of {off.session_tokens:,} tokens kept warm{replicas}; "
        f"host {host}; pass {' '.join(off.flags)}"
    )


def _gpu_options(engine: str, options: EngineOptions | None, gpu: GpuSpec) -> EngineOptions:
    """The engine's options object on `gpu` (a `GpuSpec`): vLLM's with the GPU's compute
    capability and vendor where they are unset (they pick the attention backend, so the block)."""
    import dataclasses

    from kvcalc.engines.profile import get_profile

    opts = get_profile(engine).options(options)
    if engine != "vllm":
        return opts
    vendor = None if gpu.vendor == "other" else gpu.vendor
    return dataclasses.replace(
        opts,
        compute_capability=getattr(opts, "compute_capability", None) or gpu.compute_capability,
        vendor=getattr(opts, "vendor", None) or vendor,
    )


def layout_offload(req: PlanRequest, layout: PlanLayout, s: OffloadSettings) -> OffloadResult:
    """The `OffloadResult` of one `kvcalc plan` layout (`PlanLayout`) for the settings `s`: the
    engine's GPU result on the KV memory the layout leaves it (`headroom_bytes +
    kv_cache_bytes_per_gpu`, what vLLM logs as "Available KV cache memory"), its requests of
    the plan's context, then the engine's tier (`engines.offload_rules.offload_for`) for the
    layout's tp and replicas. Raises `KvcalcError` (option --host-memory: the host cannot hold
    it; others: the engine refuses the flags, or the layout is one the tier is not modelled for)."""
    from kvcalc.engines.offload_rules import offload_for
    from kvcalc.load.gpus import get_gpu
    from kvcalc.requests import CapacityRequest, run_capacity

    if layout.pp > 1 or layout.dp_attention > 1 or len(set(layout.devices)) > 1:
        raise KvcalcError(
            "the offload tier is modelled for pp 1 and one engine core per replica (no attention DP)",
            field="offload",
            value=layout.gpu,
            form=MESSAGE,
        )
    gpu = get_gpu(layout.devices[0])
    k, _, v = layout.kv_dtype.partition("/")
    cap = CapacityRequest.build(
        req.search.model,
        engine=req.engine,
        kv_memory_bytes=layout.headroom_bytes + layout.kv_cache_bytes_per_gpu,
        k_dtype=k,
        v_dtype=v or k,
        tp=layout.tp,
        max_model_len=layout.seq_len,
        concurrency=-(-layout.concurrency // layout.dp),
        options=_gpu_options(req.engine, req.options, gpu),
    )
    res = run_capacity(cap)
    return offload_for(
        cap.engine,
        cap.model,
        res,
        s,
        tp=layout.tp,
        dp=layout.dp,
        session_tokens=layout.seq_len,
        k=cap.k,
        v=cap.v,
        options=cap.options,
    )


def launch_with_offload(launch: str | None, off: OffloadResult) -> str | None:
    """`launch` (an engine's command line) with the offload tier's flags: vLLM native and SGLang
    HiCache flags appended; LMCache's environment before the command and its connector after;
    the LMCache server (`--lmcache-l1-size`) is its own process, started before vLLM (the
    server's line stays in `offload.flags`)."""
    if launch is None:
        return None
    if off.backend == "lmcache":
        env = [f for f in off.flags if "=" in f and not f.startswith("vllm ")]
        tail = [f.split("...", 1)[1].strip() for f in off.flags if f.startswith("vllm serve ...")]
        return " ".join([*env, launch, *tail])
    if off.backend == "lmcache-mp":
        tail = [f.split("...", 1)[1].split("(", 1)[0].strip() for f in off.flags if f.startswith("vllm serve ...")]
        return " ".join([launch, *tail])
    return " ".join([launch, *off.flags])


def plan_with_offload(req: PlanRequest, s: OffloadSettings, sessions: int | None) -> PlanResult:
    """`kvcalc plan` with the tier below the GPU (`s`, an `OffloadSettings`) counted: every
    qualifying layout (the best variant of each GPU and count, in the plan's order) gets its
    tier (`layout_offload`); a layout whose tier the host cannot hold (--host-memory), or whose
    sessions kept warm over its replicas fall short of `sessions`, is dropped, with a note; the
    first `top` that stay are ranked 1, 2, ... with the engine's offload flags on their launch
    line and `offload` / `sessions_warm` (sessions of the plan's context kept warm over all
    replicas: each replica keeps its own). Raises `KvcalcError` for an engine without a tier here."""
    import dataclasses

    from kvcalc.calc.plan import search

    if req.engine not in ("vllm", "sglang"):
        raise KvcalcError(
            f"the offload tier in plan is modelled for --engine vllm and sglang, not {req.engine} "
            "(llama.cpp's host KV: `kvcalc capacity --engine llamacpp --no-kv-offload`)",
            option="--engine",
            value=req.engine,
            form=MESSAGE,
        )
    top = req.search.top
    res = search(dataclasses.replace(req.search, top=10**6))
    kept: list[PlanLayout] = []
    dropped: dict[str, list[str]] = {}
    for lay in res.layouts:
        if len(kept) == top:
            break
        try:
            off = layout_offload(req, lay, s)
        except KvcalcError as e:
            if e.option in ("--host-memory", "--tp") or e.field == "offload":
                dropped.setdefault(e.message, []).append(f"{lay.count} x {lay.gpu}")
                continue
            raise
        warm = None if off.sessions_warm is None else off.sessions_warm * lay.dp
        if sessions is not None and (warm or 0) < sessions:
            why = f"keeps fewer than --sessions {sessions:,} warm"
            dropped.setdefault(why, []).append(f"{lay.count} x {lay.gpu} ({warm or 0:,})")
            continue
        kept.append(
            lay.model_copy(
                update={
                    "rank": len(kept) + 1,
                    "offload": off,
                    "sessions_warm": warm,
                    "launch": launch_with_offload(lay.launch, off),
                }
            )
        )
    notes = [*res.notes]
    for why, which in dropped.items():
        shown = ", ".join(which[:4]) + (f" and {len(which) - 4} more" if len(which) > 4 else "")
        notes.append(f"dropped {shown}: {why}")
    return res.model_copy(update={"layouts": kept, "notes": notes})
