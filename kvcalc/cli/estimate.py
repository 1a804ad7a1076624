"""`kvcalc estimate`: exact KV bytes; with --gpu the memory plan and roofline; with --engine what
an engine allocates."""

from __future__ import annotations

from typing import Annotated, Any, Callable

import typer

from kvcalc.cli.options import (BatchOpt, FormatOpt, GpuPlanOptions, KvFormatOptions, LayoutOptions, ModelArg,
                                SeqLenOpt, SglangFlags, VllmFlags, check_positive, engine_options, only,
                                option_groups, refuse_other_engines)
from kvcalc.cli.output import check_format, emit_parts, handle_errors, show_result

@handle_errors
@option_groups(order=("gpu", "count"))
def estimate(
    ctx: typer.Context,
    model: ModelArg,
    seq_len: SeqLenOpt = None,
    batch: BatchOpt = 1,
    kv: KvFormatOptions = KvFormatOptions(),
    layout: LayoutOptions = LayoutOptions(),
    engine_name: Annotated[str, typer.Option("--engine", "-e", help="Also show what an engine allocates and logs: ideal (none), vllm, sglang, llamacpp.")] = "ideal",
    vllm: Annotated[VllmFlags, only("block_size", block_size="vLLM tokens per block (--engine vllm).")] = VllmFlags(),
    sglang: Annotated[SglangFlags, only("page_size", page_size="SGLang tokens per page (--engine sglang).")] = SglangFlags(),
    gpu: GpuPlanOptions = GpuPlanOptions(),
    fmt: FormatOpt = "table",
) -> None:
    """Exact KV-cache bytes for MODEL at a context length, batch, KV dtype and TP/PP layout;
    with --gpu, also weights, the memory plan, whether it fits, and roofline TPOT / TTFT."""
    import dataclasses

    from kvcalc.load.models import load_model
    from kvcalc.requests import EstimateRequest, run_estimate

    check_positive(batch=batch, tp=layout.tp, pp=layout.pp, dp=layout.dp)
    spec = load_model(model)
    gpu.refuse_without_gpu(ctx)  # GPU-only options without --gpu are refused, never ignored
    tp, pp, dp = layout.resolve()  # count = tp x pp x dp; alone it sets tp
    req = EstimateRequest.build(spec, seq_len=seq_len, batch=batch, **dataclasses.asdict(kv), tp=tp, pp=pp, dp=dp,
                                gpu=gpu.gpu, layout=gpu.layout() if gpu.gpu is not None else None,
                                engine=engine_name, engine_options=engine_options(engine_name, (vllm, sglang)))
    check_format(fmt)
    refuse_other_engines(ctx, engine_name)
    emit_parts(estimate_parts(run_estimate(req)), fmt)

def estimate_parts(res: Any) -> list[tuple[Any, Callable[[], Any]]]:
    """(result model, table builder) for each part of an `EstimateResult`: the KV estimate, the
    GPU plan (with --gpu), the engine's allocation (with --engine); their keys sit side by side
    in the machine formats."""
    from kvcalc.report import tables

    parts: list[tuple[Any, Callable[[], Any]]] = [(res.kv, lambda: tables.kv_table(res.kv))]
    if res.serving is not None:
        parts.append((res.serving, lambda: tables.serving_table(res.serving, res.gpu, res.kv)))
    if res.fit_hint is not None:
        parts.append((res.fit_hint, lambda: tables.fit_hint_line(res.fit_hint, res.kv)))
    if res.engine is not None:
        parts.append((res.engine, lambda: show_result(res.engine, engine_title(res))))
    return parts

def engine_title(res: Any) -> str:
    """The engine table's title: where its KV memory came from."""
    from kvcalc.engines.profile import get_profile

    name, T, B = res.engine.engine, res.kv.seq_len, res.kv.batch
    if get_profile(name).allocates_cells:
        return f"{name}: what it allocates for {B} x {T:,} tokens"
    if res.serving is not None:
        return f"{name}: what it allocates on {res.serving.gpu} (KV memory from the GPU plan)"
    return f"{name}: sized for this batch ({B} x {T:,} tokens)"
