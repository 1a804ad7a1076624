"""`kvcalc estimate`: exact KV bytes; with --gpu the memory plan and roofline; with --engine what
an engine allocates."""

from __future__ import annotations

from typing import Annotated, Any, Callable

import typer

from kvcalc.cli.options import (ActOpt, BatchOpt, BwEffOpt, CountOpt, CudaCtxOpt, DpOpt, FlopsEffOpt, FormatOpt,
                                GpuOpt, GroupOpt, KDtypeOpt, KvDtypeOpt, ModelArg, PpOpt, ScaleOpt, SeqLenOpt,
                                TpOpt, UtilOpt, VDtypeOpt, WeightDtypeOpt, check_gpu_only_options, check_limits,
                                check_positive, make_layout, refuse_typed, resolve_count, resolve_formats,
                                resolve_kv_dtypes, resolve_seq_len, warn_beyond_context)
from kvcalc.cli.output import check_format, emit_parts, handle_errors, show_result
from kvcalc.errors import KvcalcError

@handle_errors
def estimate(
    ctx: typer.Context,
    model: ModelArg,
    seq_len: SeqLenOpt = None,
    batch: BatchOpt = 1,
    kv_dtype: KvDtypeOpt = None,
    k_dtype: KDtypeOpt = None,
    v_dtype: VDtypeOpt = None,
    quant_group_size: GroupOpt = None,
    scale_dtype: ScaleOpt = None,
    tp: TpOpt = 1,
    pp: PpOpt = 1,
    dp: DpOpt = 1,
    engine_name: Annotated[str, typer.Option("--engine", "-e", help="Also show what an engine allocates and logs: ideal (none), vllm, sglang, llamacpp.")] = "ideal",
    block_size: Annotated[int, typer.Option("--block-size", help="vLLM tokens per block (--engine vllm).")] = 16,
    page_size: Annotated[int, typer.Option("--page-size", help="SGLang tokens per page (--engine sglang).")] = 1,
    gpu: GpuOpt = None,
    count: CountOpt = None,
    weight_dtype: WeightDtypeOpt = None,
    gpu_memory_utilization: UtilOpt = 0.9,
    bw_efficiency: BwEffOpt = 0.8,
    flops_efficiency: FlopsEffOpt = 0.5,
    cuda_context: CudaCtxOpt = None,
    activation_reserve: ActOpt = None,
    fmt: FormatOpt = "table",
) -> None:
    """Exact KV-cache bytes for MODEL at a context length, batch, KV dtype and TP/PP layout;
    with --gpu, also weights, the memory plan, whether it fits, and roofline TPOT / TTFT."""
    from kvcalc.calc import kv_cache
    from kvcalc.report import tables
    from kvcalc.load.models import load_model
    from kvcalc.schema import Parallelism, Workload

    check_positive(batch=batch, tp=tp, pp=pp, dp=dp)
    spec = load_model(model)
    T = resolve_seq_len(spec, seq_len)
    k, v = resolve_kv_dtypes(spec, kv_dtype, k_dtype, v_dtype, quant_group_size, scale_dtype)
    check_gpu_only_options(ctx, gpu)  # GPU-only options without --gpu are refused, never ignored
    check_limits([batch], [T])
    tp, pp, dp = resolve_count(count, tp, pp, dp)  # count = tp x pp x dp; alone it sets tp
    warn_beyond_context(spec, [T])
    wl = Workload(seq_len=T, batch=batch, k_dtype=k, v_dtype=v, parallel=Parallelism(tp=tp, pp=pp, dp=dp))
    check_format(fmt)
    est = kv_cache.estimate(spec, wl)
    # Each feature that adds to `estimate` (GPU fit and roofline, engine profiles) appends
    # (result model, table builder); their keys sit beside the KV keys in the JSON.
    parts: list[tuple[Any, Callable[[], Any]]] = [(est, lambda: tables.kv_table(est))]
    if gpu is not None:
        parts.append(serving_part(spec, est, gpu, make_layout(
            tp, pp, dp, weight_dtype, k, v, gpu_memory_utilization, bw_efficiency, flops_efficiency,
            cuda_context, activation_reserve)))
    eng = engine_name.strip().lower()
    if eng != "vllm":
        refuse_typed(ctx, ["block_size"], "--engine vllm only")
    if eng != "sglang":
        refuse_typed(ctx, ["page_size"], "--engine sglang only")
    if eng not in ("ideal", "exact", "none"):
        # the engine sizes its KV from the GPU plan's budget when --gpu is given (else: for this batch)
        plan = next((r for r, _ in parts if hasattr(r, "budget_bytes_per_gpu")), None)
        part = engine_part(spec, T, batch, k, v, tp, engine_name, block_size, page_size,
                           kv_given=bool(kv_dtype or k_dtype or v_dtype or quant_group_size or scale_dtype), plan=plan)
        if part is not None:
            parts.append(part)
    emit_parts(parts, fmt)

def serving_part(spec: Any, est: Any, gpu: str, layout: Any) -> tuple[Any, Any]:
    """(ServingEstimate, table builder) for `kvcalc estimate --gpu`, at the estimate's (T, B)."""
    from kvcalc.load.gpus import get_gpu
    from kvcalc.calc.memory_plan import Planner

    g = get_gpu(gpu)
    planner = Planner(spec, g, layout)
    res = planner.serving(est.seq_len, est.batch, est.kv_cache_bytes_per_gpu)
    from kvcalc.report.tables import serving_table

    return res, lambda: serving_table(res, g, est)

def engine_part(spec: Any, seq_len: int, batch: int, k: str, v: str, tp: int, engine: str,
                block_size: int = 16, page_size: int = 1, parallel: int | None = None, *,
                kv_given: bool = True, plan: Any = None) -> tuple[Any, Callable[[], Any]] | None:
    """(EngineResult, table builder) for `estimate --engine`, or None when the engine would not start.

    `kv_given`: the user gave a KV dtype (`k`, `v` are used as they are); otherwise the engine's
    own default (llama.cpp: f16; vLLM / SGLang: the model's dtype, fp32 downcast).
    KV memory: with `plan` (the `ServingEstimate` of `estimate --gpu`), what the plan leaves for
    the KV cache on one GPU, as vLLM sizes it: budget - weights - state - activation reserve -
    CUDA context, i.e. the plan's `headroom_bytes + kv_cache_bytes_per_gpu` (the KV the engine
    then takes is all of it). Without a plan, the memory this batch needs ("sized for this batch").
    llama.cpp allocates n_ctx = T x B cells (--parallel B) either way.
    """
    import warnings

    from kvcalc.formats import kv_format
    from kvcalc.engines import canonical, profile
    from kvcalc.errors import KvcalcWarning

    name = canonical(engine)
    check_positive(block_size=block_size, page_size=page_size)
    if kv_given:
        kf, vf = kv_format(k), kv_format(v)
        shown = None
    else:
        kf, vf, shown, _ = resolve_formats(spec, name, None, None, None)
    mod = profile(name)
    if name in ("vllm", "sglang"):
        size_opt = dict(block_size=block_size) if name == "vllm" else dict(page_size=page_size)
        if name == "vllm":
            mod.check_block_size(block_size)
        if plan is not None:
            mem = plan.headroom_bytes + plan.kv_cache_bytes_per_gpu
            basis = (f"what the {plan.gpu} plan leaves for KV per GPU: {plan.gpu_memory_utilization:g} x GPU memory "
                     "- weights - activations - CUDA context"
                     + (" (vLLM's rule; SGLang's own budget comes from --mem-fraction-static)" if name == "sglang" else ""))
            if mem <= 0:
                warnings.warn(f"{name} would fail at start-up on {plan.gpu}: the plan leaves {mem:,} B for the KV "
                              f"cache: {mod.NO_MEMORY}", KvcalcWarning, stacklevel=2)
                return None
            title = f"{name}: what it allocates on {plan.gpu} (KV memory from the GPU plan)"
        else:
            mem = mod.memory_for(spec, seq_len, batch, kf, vf, tp=tp, **size_opt)
            basis = f"sized for this batch ({batch} x {seq_len:,} tokens), not a GPU's budget: give --gpu for that"
            title = f"{name}: sized for this batch ({batch} x {seq_len:,} tokens)"
        res = mod.capacity(spec, mem, kf, vf, tp=tp, max_model_len=seq_len, concurrency=batch,
                           kv_cache_dtype=shown, **size_opt)
    elif name == "llamacpp":
        if tp != 1:
            raise KvcalcError("llama.cpp splits layers, not heads: use --engine llamacpp with --tp 1")
        res = mod.allocate(spec, seq_len * batch, kf, vf, parallel=parallel or batch, max_model_len=seq_len,
                           concurrency=batch)
        basis = f"n_ctx = {batch} x {seq_len:,} tokens, --parallel {parallel or batch}"
        title = f"{name}: what it allocates for {batch} x {seq_len:,} tokens"
    else:
        raise KvcalcError("--engine ideal is estimate's own result")
    res = res.model_copy(update={"kv_memory_basis": basis})
    return res, lambda: show_result(res, title)
