"""`kvcalc sweep`: memory, fit, TPOT and tokens/s over a grid of contexts and batches."""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer

from kvcalc.cli.options import (ActOpt, BwEffOpt, CountOpt, CudaCtxOpt, FlopsEffOpt, FormatOpt, GpuOpt, KvDtypeOpt,
                                ModelArg, PpOpt, TpOpt, UtilOpt, WeightDtypeOpt, check_gpu_only_options, check_limits,
                                check_positive, make_layout, resolve_count, warn_beyond_context)
from kvcalc.cli.output import check_format, echo, emit, handle_errors

def sweep_rows(spec: Any, seq_lens: list[int], batches: list[int], layout: Any, gpu: Any | None,
               progress: bool = False) -> list[dict[str, Any]]:
    """One row per (seq_len, batch): KV and weights per GPU, and with a GPU the memory per GPU,
    fit, TPOT and tokens/s (`plan.Planner`). Without a GPU, memory is weights + KV only."""
    from kvcalc.calc import kv_cache
    from kvcalc.calc.memory_plan import KvProfile, Planner
    from kvcalc.calc.weights import can_derive, weight_bytes

    points = [(T, B) for B in batches for T in seq_lens]
    it: Any = points
    if progress and len(points) > 2000:
        from rich.progress import track

        it = track(points, description="sweeping", transient=True, console=None)
    rows = []
    if gpu is not None:
        p = Planner(spec, gpu, layout)
        for T, B in it:
            used, fits, tpot, tok = p.point(T, B)
            rows.append({"seq_len": T, "batch": B, "weights_bytes_per_gpu": max(p.stage_weight_bytes),
                         "kv_cache_bytes_per_gpu": p.kv.per_gpu_bytes(T, B), "memory_bytes_per_gpu": used,
                         "budget_bytes_per_gpu": p.budget, "fits": fits, "tpot_s": tpot, "tokens_per_s": tok})
        return rows
    kv_cache.check_tp(spec, layout.tp)
    k, v = kv_cache.formats(layout.k_dtype or spec.dtype, layout.v_dtype)
    prof = KvProfile.build(spec, k, v, layout.tp, layout.pp)
    w = 0
    if spec.n_params is not None or can_derive(spec):
        w = max(weight_bytes(spec, layout.weight_dtype, layout.tp).stage_bytes(kv_cache.pp_stages(spec.n_layers, layout.pp)))
    for T, B in it:
        kv = prof.per_gpu_bytes(T, B)
        rows.append({"seq_len": T, "batch": B, "weights_bytes_per_gpu": w, "kv_cache_bytes_per_gpu": kv,
                     "memory_bytes_per_gpu": w + kv})
    return rows

@handle_errors
def sweep(
    ctx: typer.Context,
    model: ModelArg,
    seq_len: Annotated[str, typer.Option("--seq-len", "-s", help="Context lengths: 1k,8k,32k,128k.")] = "1k,8k,32k,128k",
    batch: Annotated[str, typer.Option("--batch", "-b", help="Batch sizes (sequences per DP replica): 1,8,32.")] = "1,8,32",
    gpu: GpuOpt = None,
    count: CountOpt = None,
    tp: TpOpt = 1,
    pp: PpOpt = 1,
    kv_dtype: KvDtypeOpt = None,
    weight_dtype: WeightDtypeOpt = None,
    gpu_memory_utilization: UtilOpt = 0.9,
    bw_efficiency: BwEffOpt = 0.8,
    flops_efficiency: FlopsEffOpt = 0.5,
    cuda_context: CudaCtxOpt = None,
    activation_reserve: ActOpt = None,
    plot: Annotated[Optional[str], typer.Option("--plot", help="Write a plot of memory (and, with --gpu, throughput) against context: .png, .svg, .pdf, .eps, .jpg or .tif (no extension: .png). Needs matplotlib: pip install 'kvcalc[plot]'.")] = None,
    fmt: FormatOpt = "table",
) -> None:
    """Memory, fit, TPOT and tokens/s over a grid of context lengths and batch sizes."""
    from kvcalc.report.tables import sweep_table
    from kvcalc.formats import kv_format
    from kvcalc.load.models import load_model
    from kvcalc.units import parse_counts
    from kvcalc.calc.weights import weight_format_label

    check_format(fmt)
    if plot is not None:
        from kvcalc.report.plot import plot_path, plot_sweep, pyplot

        plot = plot_path(plot)  # a bad name fails before any work
    check_gpu_only_options(ctx, gpu, allowed=("weight_dtype",))
    T = parse_counts(seq_len, "--seq-len")
    B = parse_counts(batch, "--batch")
    check_positive(tp=tp, pp=pp)
    check_limits(B, T)
    tp, pp, dp = resolve_count(count, tp, pp, 1)
    spec = load_model(model)
    kv = kv_format(kv_dtype or spec.dtype).name
    layout = make_layout(tp, pp, dp, weight_dtype, kv, None, gpu_memory_utilization, bw_efficiency,
                         flops_efficiency, cuda_context, activation_reserve)
    g = None
    if gpu is not None:
        from kvcalc.load.gpus import get_gpu

        g = get_gpu(gpu)
    if plot is not None:  # fail on a missing extra before the work, not after
        pyplot()
    warn_beyond_context(spec, T)
    rows = sweep_rows(spec, T, B, layout, g, progress=fmt == "table")
    if plot is not None:
        plot_sweep(rows, spec, g, layout, kv, plot)
    par = (f", {tp * pp * dp} x {g.key} (tp {tp}, pp {pp}, dp {dp})" if g
           else (f", tp {tp}, pp {pp}" if (tp, pp) != (1, 1) else ""))
    title = f"{spec.name}, KV {kv}, weights {weight_format_label(spec, layout.weight_dtype)}{par}"
    emit(rows, fmt, lambda: sweep_table(rows, title, g is not None))
    if plot is not None and fmt == "table":
        echo(f"plot written to {plot}")
