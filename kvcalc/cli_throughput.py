"""Commands `gpus`, `sweep`, and the GPU part of `kvcalc estimate --gpu` (`check` and `schema`
are in `cli_deploy`).

Thin: parse -> load -> `plan.Planner` -> tables. The plot is
`kvcalc.plot`, imported (with matplotlib) only when `--plot` is given.
"""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer

from kvcalc.cli import (
    ActOpt,
    BwEffOpt,
    CountOpt,
    CudaCtxOpt,
    FlopsEffOpt,
    FormatOpt,
    GpuOpt,
    UtilOpt,
    WeightDtypeOpt,
    KvDtypeOpt,
    ModelArg,
    PpOpt,
    TpOpt,
    app,
    check_format,
    check_positive,
    echo,
    emit,
    handle_errors,
)
from kvcalc.errors import KvcalcError


def resolve_count(count: int | None, tp: int, pp: int, dp: int) -> tuple[int, int, int]:
    """(tp, pp, dp) from --count and the layout options: --count alone sets tp; with tp / pp
    given, the rest of the count becomes dp replicas. Raises `KvcalcError` when they disagree."""
    if count is None:
        return tp, pp, dp
    check_positive(count=count)
    if (tp, pp, dp) == (1, 1, 1):
        return count, 1, 1
    if count == tp * pp * dp:
        return tp, pp, dp
    if dp == 1 and count % (tp * pp) == 0:
        return tp, pp, count // (tp * pp)
    raise KvcalcError(f"--count {count} does not equal --tp {tp} x --pp {pp} x --dp {dp}; "
                      f"give a count that is a multiple of tp x pp")


#: options of `estimate` / `sweep` that mean something only with --gpu (--count does not: it
#: sets the layout, count = tp x pp x dp)
GPU_ONLY_OPTIONS = ("weight_dtype", "gpu_memory_utilization", "bw_efficiency", "flops_efficiency",
                    "cuda_context", "activation_reserve")


def check_gpu_only_options(ctx: typer.Context, gpu: str | None, allowed: tuple[str, ...] = ()) -> None:
    """Raise `KvcalcError` naming --gpu when an option that needs a GPU was typed without one.
    typer fills in defaults, so the click context's parameter source says which were typed.
    `allowed` lists those the command uses without a GPU (sweep's --weight-dtype)."""
    if gpu is not None:
        return
    from kvcalc.cli import typed_options

    typed = set(typed_options(ctx))
    given = [n for n in GPU_ONLY_OPTIONS if n not in allowed and n in typed]
    if given:
        opts = ", ".join("--" + n.replace("_", "-") for n in given)
        raise KvcalcError(f"{opts} {'needs' if len(given) == 1 else 'need'} --gpu (a GPU from `kvcalc gpus`); "
                          f"without it there is no memory plan or roofline to apply {'it' if len(given) == 1 else 'them'} to")


def check_limits(batches: list[int], seq_lens: list[int]) -> None:
    """Raise `KvcalcError` for a batch or context past the bounds a deployment file accepts
    (`units.MAX_CONCURRENCY` sequences, `units.MAX_SEQ_LEN` tokens): beyond them the sums
    lose meaning and the printed figures turn to garbage."""
    from kvcalc.units import MAX_CONCURRENCY, MAX_SEQ_LEN

    for what, values, cap in (("--batch", batches, MAX_CONCURRENCY), ("--seq-len", seq_lens, MAX_SEQ_LEN)):
        big = [v for v in values if v > cap]
        if big:
            raise KvcalcError(f"{what} {big[0]:,} is beyond what kvcalc sizes (at most {cap:,})")


def warn_beyond_context(spec: Any, seq_lens: list[int]) -> list[int]:
    """Warn (one `KvcalcWarning` line) when a context exceeds the model's
    max_position_embeddings, naming the maximum; returns the contexts beyond it."""
    cap = spec.max_position_embeddings
    beyond = sorted({t for t in seq_lens if cap and t > cap})
    if beyond:
        import warnings

        from kvcalc.errors import KvcalcWarning

        shown = ", ".join(f"{t:,}" for t in beyond[:4]) + (", ..." if len(beyond) > 4 else "")
        many = len(beyond) > 1
        warnings.warn(f"context{'s' if many else ''} of {shown} tokens {'are' if many else 'is'} beyond "
                      f"{spec.name}'s max_position_embeddings "
                      f"({cap:,}); the model was not trained for it and engines refuse it",
                      KvcalcWarning, stacklevel=2)
    return beyond


#: a reserve written without a unit and below this is almost surely a unit left off (1.5 -> 1 B)
MIN_UNITLESS_RESERVE_BYTES = 2**20


def parse_reserve(text: str, what: str) -> int:
    """Bytes of a per-GPU reserve (--cuda-context, --activation-reserve): `0`, a size with a
    unit (`2GiB`, `512MiB`), or a whole byte count of at least 1 MiB. Raises `KvcalcError` for a
    unitless fraction (`1.5` would floor to 1 byte) or a unitless count under 1 MiB."""
    import re

    from kvcalc.units import parse_size

    s = str(text).strip().replace("_", "").replace(",", "")
    if re.fullmatch(r"0*\.?0*", s) and s not in ("", "."):
        return 0
    if re.fullmatch(r"[0-9]*\.?[0-9]+", s):  # no unit: a byte count
        if not s.isdigit():
            raise KvcalcError(f"{what}: '{text}' has no unit and is not a whole number of bytes; "
                              f"write the unit, e.g. {s}GiB or {s}MiB")
        if int(s) < MIN_UNITLESS_RESERVE_BYTES:
            raise KvcalcError(f"{what}: '{text}' has no unit, so it would be {int(s):,} bytes; "
                              f"write the unit, e.g. {s}GiB, {s}MiB or {s}B")
    return parse_size(text, what)


def make_layout(tp: int, pp: int, dp: int, weight_dtype: str | None, k_dtype: str | None, v_dtype: str | None,
                gpu_memory_utilization: float, bw_efficiency: float, flops_efficiency: float,
                cuda_context: str | None, activation_reserve: str | None):
    """A `plan.Layout` from CLI options (sizes parsed with `units.parse_size`)."""
    from kvcalc.plan import DEFAULT_CUDA_CONTEXT_BYTES, Layout

    ctx = DEFAULT_CUDA_CONTEXT_BYTES if cuda_context is None else parse_reserve(cuda_context, "--cuda-context")
    act = None if activation_reserve is None else parse_reserve(activation_reserve, "--activation-reserve")
    return Layout(tp=tp, pp=pp, dp=dp, weight_dtype=weight_dtype, k_dtype=k_dtype, v_dtype=v_dtype,
                  gpu_memory_utilization=gpu_memory_utilization, cuda_context_bytes=ctx,
                  activation_reserve_bytes=act, bw_efficiency=bw_efficiency, flops_efficiency=flops_efficiency)


def serving_part(spec: Any, est: Any, gpu: str, layout: Any) -> tuple[Any, Any]:
    """(ServingEstimate, table builder) for `kvcalc estimate --gpu`, at the estimate's (T, B)."""
    from kvcalc.gpus import get_gpu
    from kvcalc.plan import Planner

    g = get_gpu(gpu)
    planner = Planner(spec, g, layout)
    res = planner.serving(est.seq_len, est.batch, est.kv_cache_bytes_per_gpu)
    return res, lambda: serving_table(res, g, est)


def serving_table(r: Any, gpu: Any, est: Any):
    """The rich table of a `ServingEstimate`."""
    from rich.table import Table

    from kvcalc.report import gib, seconds, size

    t = Table(title=f"On {r.gpu_count} x {gpu.name} ({r.gpu})", show_header=False, title_justify="left")
    t.add_column("what", style="bold")
    t.add_column("value")
    act = f" ({r.n_active_params:,} active per token)" if r.n_active_params != r.n_params else ""
    t.add_row("parameters", f"{r.n_params:,}{act}")
    t.add_row("weights per GPU", f"{size(r.weights_bytes_per_gpu)} in {r.weight_dtype}")
    t.add_row("KV cache per GPU", size(r.kv_cache_bytes_per_gpu))
    if r.state_bytes_per_gpu:
        t.add_row("SSM / linear state per GPU", size(r.state_bytes_per_gpu))
    t.add_row("activation reserve", size(r.activation_reserve_bytes))
    t.add_row("CUDA context", size(r.cuda_context_bytes))
    t.add_row("memory per GPU", size(r.memory_bytes_per_gpu))
    t.add_row("budget per GPU", f"{size(r.budget_bytes_per_gpu)} = {r.gpu_memory_utilization:g} x "
              f"{gib(r.gpu_memory_bytes)}")
    from rich.text import Text

    verdict = Text("fits", style="green") if r.fits else Text("does not fit", style="red")
    t.add_row("fits", verdict + f": headroom {r.headroom_bytes:,} B ({gib(r.headroom_bytes)})")
    t.add_row("max batch", f"{r.max_batch:,} sequences of {est.seq_len:,} tokens per replica")
    cap = " (the model's limit)" if r.max_seq_len_capped else ""
    t.add_row("max context", f"{r.max_seq_len:,} tokens at batch {est.batch}{cap}")
    t.add_row("decode step", f"reads {size(r.decode_bytes_read_per_step)}, {r.decode_flops_per_step:,} FLOPs: "
              f"{r.decode_bound}-bound (bw eff {r.bw_efficiency:g}, FLOPs eff {r.flops_efficiency:g})"
              + (f", all-reduce {seconds(r.decode_allreduce_s)}" if r.decode_allreduce_s else ""))
    t.add_row("TPOT", seconds(r.tpot_s))
    t.add_row("tokens/s", f"{r.tokens_per_s_per_seq:,.1f} per sequence, {r.tokens_per_s:,.1f} in total")
    t.add_row("TTFT", f"{seconds(r.ttft_s)} for a {est.seq_len:,}-token prompt ({r.prefill_bound}-bound)")
    return t


@app.command()
@handle_errors
def gpus(fmt: FormatOpt = "table") -> None:
    """List the bundled GPUs: memory as the device reports it, HBM bandwidth, dense FLOP/s."""
    from kvcalc.gpus import gpu_table

    rows = list(gpu_table().values())
    if fmt != "table":
        emit(rows, fmt, lambda: None)
        return
    from rich.table import Table

    t = Table(title="GPUs (kvcalc ... --gpu KEY); memory as nvidia-smi / rocm-smi report it; dense FLOP/s",
              title_justify="left")
    for col in ("key", "memory\nGiB", "memory\nGB", "HBM\nTB/s", "bf16\nTFLOP/s", "fp8\nTFLOP/s",
                "link GB/s\n(bidir)", "name"):
        t.add_column(col, justify="left" if col in ("key", "name") else "right",
                     no_wrap=col != "name", overflow="fold")
    for g in rows:
        t.add_row(g.key, f"{g.memory_bytes / 2**30:,.1f}", f"{g.memory_bytes / 1e9:,.1f}",
                  f"{g.hbm_bytes_per_s / 1e12:,.2f}", f"{g.bf16_flops_per_s / 1e12:,.0f}",
                  f"{g.fp8_flops_per_s / 1e12:,.0f}" if g.fp8_flops_per_s else "-",
                  f"{g.interconnect_bytes_per_s / 1e9:,.0f}" if g.interconnect_bytes_per_s else "-", g.name)
    echo(t)


def sweep_rows(spec: Any, seq_lens: list[int], batches: list[int], layout: Any, gpu: Any | None,
               progress: bool = False) -> list[dict[str, Any]]:
    """One row per (seq_len, batch): KV and weights per GPU, and with a GPU the memory per GPU,
    fit, TPOT and tokens/s (`plan.Planner`). Without a GPU, memory is weights + KV only."""
    from kvcalc import engine
    from kvcalc.plan import KvProfile, Planner
    from kvcalc.weights import can_derive, weight_bytes

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
    engine.check_tp(spec, layout.tp)
    k, v = engine.formats(layout.k_dtype or spec.dtype, layout.v_dtype)
    prof = KvProfile.build(spec, k, v, layout.tp, layout.pp)
    w = 0
    if spec.n_params is not None or can_derive(spec):
        w = max(weight_bytes(spec, layout.weight_dtype, layout.tp).stage_bytes(engine.pp_stages(spec.n_layers, layout.pp)))
    for T, B in it:
        kv = prof.per_gpu_bytes(T, B)
        rows.append({"seq_len": T, "batch": B, "weights_bytes_per_gpu": w, "kv_cache_bytes_per_gpu": kv,
                     "memory_bytes_per_gpu": w + kv})
    return rows


@app.command()
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
    from kvcalc.dtypes import kv_format
    from kvcalc.loaders import load_model
    from kvcalc.units import parse_counts
    from kvcalc.weights import weight_format_label

    check_format(fmt)
    if plot is not None:
        from kvcalc.plot import plot_path, plot_sweep, pyplot

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
        from kvcalc.gpus import get_gpu

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
    emit(rows, fmt, lambda: _sweep_table(rows, title, g is not None))
    if plot is not None and fmt == "table":
        echo(f"plot written to {plot}")


def _sweep_table(rows: list[dict[str, Any]], title: str, with_gpu: bool):
    from rich.table import Table
    from rich.text import Text

    t = Table(title=title, title_justify="left", caption="memory columns: GiB (2^30 B) per GPU",
              caption_justify="left")
    cols = ["seq_len", "batch", "weights", "KV", "memory"]
    if with_gpu:
        cols += ["budget", "fits", "TPOT ms", "tok/s"]
    for c in cols:
        t.add_column(c, justify="right", no_wrap=True)
    for r in rows:
        cells = [f"{r['seq_len']:,}", str(r["batch"]), f"{r['weights_bytes_per_gpu'] / 2**30:,.2f}",
                 f"{r['kv_cache_bytes_per_gpu'] / 2**30:,.2f}", f"{r['memory_bytes_per_gpu'] / 2**30:,.2f}"]
        if with_gpu:
            cells += [f"{r['budget_bytes_per_gpu'] / 2**30:,.2f}",
                      Text("yes", style="green") if r["fits"] else Text("no", style="red"),
                      f"{r['tpot_s'] * 1e3:,.2f}", f"{r['tokens_per_s']:,.0f}"]
        t.add_row(*cells)
    return t
