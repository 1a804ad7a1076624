"""Commands `gpus`, `sweep`, `check`, `schema`, and the GPU part of `kvcalc estimate --gpu`.

Thin: parse -> load -> `plan.Planner` / `deploy.check_paths` -> tables. matplotlib is imported
only inside `--plot`.
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
from kvcalc.errors import KvcalcError, MissingExtraError


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


def make_layout(tp: int, pp: int, dp: int, weight_dtype: str | None, k_dtype: str | None, v_dtype: str | None,
                gpu_memory_utilization: float, bw_efficiency: float, flops_efficiency: float,
                cuda_context: str | None, activation_reserve: str | None):
    """A `plan.Layout` from CLI options (sizes parsed with `units.parse_size`)."""
    from kvcalc.plan import DEFAULT_CUDA_CONTEXT_BYTES, Layout
    from kvcalc.units import parse_size

    ctx = DEFAULT_CUDA_CONTEXT_BYTES if cuda_context is None else (
        0 if cuda_context.strip() == "0" else parse_size(cuda_context, "--cuda-context"))
    act = None if activation_reserve is None else (
        0 if activation_reserve.strip() == "0" else parse_size(activation_reserve, "--activation-reserve"))
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
    verdict = "[green]fits[/green]" if r.fits else "[red]does not fit[/red]"
    t.add_row("fits", f"{verdict}: headroom {r.headroom_bytes:,} B ({gib(r.headroom_bytes)})")
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
    model: ModelArg,
    seq_len: Annotated[str, typer.Option("--seq-len", "-s", help="Context lengths: 1k,8k,32k,128k.")] = "1k,8k,32k,128k",
    batch: Annotated[str, typer.Option("--batch", "-b", help="Batch sizes: 1,8,32.")] = "1,8,32",
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
    plot: Annotated[Optional[str], typer.Option("--plot", help="Write a PNG (or .svg/.pdf) of memory and throughput against context (needs kvcalc[plot]).")] = None,
    fmt: FormatOpt = "table",
) -> None:
    """Memory, fit, TPOT and tokens/s over a grid of context lengths and batch sizes."""
    from kvcalc.dtypes import kv_format
    from kvcalc.loaders import load_model
    from kvcalc.units import parse_counts

    check_format(fmt)
    T = parse_counts(seq_len, "--seq-len")
    B = parse_counts(batch, "--batch")
    check_positive(tp=tp, pp=pp)
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
        _matplotlib()
    rows = sweep_rows(spec, T, B, layout, g, progress=fmt == "table")
    if plot is not None:
        plot_sweep(rows, spec, g, layout, kv, plot)
    title = (f"{spec.name}, KV {kv}, weights {layout.weight_dtype or spec.dtype}"
             + (f", {tp * pp * dp} x {g.key} (tp {tp}, pp {pp}, dp {dp})" if g else f", tp {tp}, pp {pp}"))
    emit(rows, fmt, lambda: _sweep_table(rows, title, g is not None))
    if plot is not None and fmt == "table":
        echo(f"plot written to {plot}")


def _sweep_table(rows: list[dict[str, Any]], title: str, with_gpu: bool):
    from rich.table import Table

    t = Table(title=title, title_justify="left")
    cols = ["seq_len", "batch", "weights\nGiB/GPU", "KV\nGiB/GPU", "memory\nGiB/GPU"]
    if with_gpu:
        cols += ["budget\nGiB/GPU", "fits", "TPOT\nms", "tokens/s\n(all)"]
    for c in cols:
        t.add_column(c, justify="right", no_wrap=True)
    for r in rows:
        cells = [f"{r['seq_len']:,}", str(r["batch"]), f"{r['weights_bytes_per_gpu'] / 2**30:,.2f}",
                 f"{r['kv_cache_bytes_per_gpu'] / 2**30:,.2f}", f"{r['memory_bytes_per_gpu'] / 2**30:,.2f}"]
        if with_gpu:
            cells += [f"{r['budget_bytes_per_gpu'] / 2**30:,.2f}",
                      "[green]yes[/green]" if r["fits"] else "[red]no[/red]",
                      f"{r['tpot_s'] * 1e3:,.2f}", f"{r['tokens_per_s']:,.0f}"]
        t.add_row(*cells)
    return t


def _matplotlib():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise MissingExtraError("matplotlib", "plot") from None
    return plt


def _fmt_tokens(n: float) -> str:
    n = int(n)
    if n >= 1024 and n % 1024 == 0:
        return f"{n // 1024}k"
    return f"{n:,}"


def plot_sweep(rows: list[dict[str, Any]], spec: Any, gpu: Any | None, layout: Any, kv: str, path: str) -> None:
    """Memory per GPU (GiB) and total tokens/s against context, one line per batch, with the
    GPU's memory and the engine's budget as horizontal lines; points that do not fit are hollow."""
    plt = _matplotlib()
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    batches = sorted({r["batch"] for r in rows})
    seqs = sorted({r["seq_len"] for r in rows})
    panels = 2 if gpu is not None else 1
    fig, axes = plt.subplots(1, panels, figsize=(6.4 * panels, 4.8), squeeze=False)
    ax_mem = axes[0][0]
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for j, b in enumerate(batches):
        rs = sorted((r for r in rows if r["batch"] == b), key=lambda r: r["seq_len"])
        c = colors[j % len(colors)]
        x = [r["seq_len"] for r in rs]
        ax_mem.plot(x, [r["memory_bytes_per_gpu"] / 2**30 for r in rs], "-o", color=c, label=f"batch {b}")
        if gpu is not None:
            ax = axes[0][1]
            ax.plot(x, [r["tokens_per_s"] for r in rs], "-", color=c, label=f"batch {b}")
            fit = [r for r in rs if r["fits"]]
            miss = [r for r in rs if not r["fits"]]
            ax.plot([r["seq_len"] for r in fit], [r["tokens_per_s"] for r in fit], "o", color=c)
            ax.plot([r["seq_len"] for r in miss], [r["tokens_per_s"] for r in miss], "o", mfc="white", color=c)
            ax_mem.plot([r["seq_len"] for r in miss], [r["memory_bytes_per_gpu"] / 2**30 for r in miss],
                        "o", mfc="white", color=c)
    if gpu is not None:
        ax_mem.axhline(gpu.memory_bytes / 2**30, color="black", lw=1.2,
                       label=f"{gpu.key} memory {gpu.memory_bytes / 2**30:,.1f} GiB")
        ax_mem.axhline(rows[0]["budget_bytes_per_gpu"] / 2**30, color="black", ls="--", lw=1,
                       label=f"budget ({layout.gpu_memory_utilization:g} x memory)")
    n_gpu = layout.tp * layout.pp * layout.dp
    where = f"{n_gpu} x {gpu.key}" if gpu is not None else f"tp {layout.tp}, pp {layout.pp}"
    for ax in axes[0]:
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_locator(FixedLocator(seqs))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: _fmt_tokens(v)))
        ax.set_xlabel("context length (tokens per sequence)")
        ax.grid(True, which="major", alpha=0.3)
    ax_mem.set_ylabel("memory per GPU (GiB = 2^30 B)")
    top = max(r["memory_bytes_per_gpu"] for r in rows)
    if gpu is not None and top > 3 * gpu.memory_bytes:
        ax_mem.set_yscale("log")  # keep the GPU line readable when the sweep runs far past it
    else:
        ax_mem.set_ylim(bottom=0)
    ax_mem.set_title("Memory per GPU: weights + KV cache" + (" + reserves" if gpu is not None else ""))
    ax_mem.legend(fontsize="small")
    if gpu is not None:
        ax = axes[0][1]
        ax.set_yscale("log")
        ax.set_ylabel("decode throughput (output tokens/s, all sequences)")
        ax.set_title(f"Roofline decode (bw eff {layout.bw_efficiency:g}); hollow = does not fit")
        ax.legend(fontsize="small")
    fig.suptitle(f"{spec.name} on {where}: weights {layout.weight_dtype or spec.dtype}, KV cache {kv}")
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=150)
    except OSError as e:
        raise KvcalcError(f"--plot: cannot write {path}: {e.strerror or e}") from None
    finally:
        plt.close(fig)


@app.command()
@handle_errors
def check(
    paths: Annotated[list[str], typer.Argument(help="Deployment YAML files or folders of them.")],
    fmt: Annotated[str, typer.Option("--format", "-f", help="table, markdown (for a PR comment) or json.")] = "table",
) -> None:
    """Check deployment files: exit 0 when all fit and meet their targets, 1 when any does not,
    2 when a file is invalid."""
    from kvcalc.deploy import check_paths, exit_code
    from kvcalc.report import markdown_table

    if fmt not in ("table", "markdown", "json"):
        raise KvcalcError(f"--format: unknown format '{fmt}'; use table, markdown or json")
    rows, errors = check_paths(paths)
    code = exit_code(rows, errors)
    if fmt == "json":
        import json

        echo(json.dumps({"ok": code == 0, "exit_code": code,
                         "deployments": [r.model_dump(mode="json") for r in rows], "errors": errors}, indent=2))
    elif fmt == "markdown":
        icon = {"ok": "✅ ok", "does not fit": "❌ does not fit", "misses target": "⚠️ misses target"}
        lines = [markdown_table(
            ["deployment", "model", "GPUs", "KV", "context x concurrency", "memory/GPU GiB", "budget GiB",
             "TPOT ms", "tokens/s", "status", "why"],
            [[r.name, r.model, f"{r.count} x {r.gpu} (tp {r.tp}, pp {r.pp}, dp {r.dp})", r.kv_dtype,
              f"{r.max_seq_len:,} x {r.concurrency}", f"{r.memory_bytes_per_gpu / 2**30:,.2f}",
              f"{r.budget_bytes_per_gpu / 2**30:,.2f}", f"{r.tpot_ms:,.2f}", f"{r.tokens_per_s:,.0f}",
              icon[r.status], "; ".join(r.problems)] for r in rows])]
        lines += [f"\n**invalid:** `{e}`" for e in errors]
        echo("\n".join(lines))
    else:
        if rows:
            echo(_check_table(rows))
    if errors and fmt != "json":
        from kvcalc.cli import _err_console

        con = _err_console()
        for e in errors:
            con.print(f"[red]error:[/red] {e}", markup=True)
    raise typer.Exit(code)


def _check_table(rows: list[Any]):
    """The rich table of `kvcalc check`, with each failing deployment's reasons after it."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    t = Table(title="kvcalc check: memory per GPU vs gpu_memory_utilization x memory; decode with "
                    "every sequence at max_seq_len", title_justify="left")
    for c in ("deployment", "GPUs", "tokens x seqs", "GiB/GPU\nused / budget", "max\nseqs",
              "TPOT ms\n(target)", "tokens/s\n(target)", "status"):
        t.add_column(c, justify="left" if c in ("deployment", "GPUs", "status") else "right", overflow="fold")
    style = {"ok": "green", "does not fit": "red", "misses target": "yellow"}
    notes = []
    for r in rows:
        tgt_tpot = f" (≤{r.max_tpot_ms:g})" if r.max_tpot_ms is not None else ""
        tgt_tok = f" (≥{r.min_tokens_per_s:g})" if r.min_tokens_per_s is not None else ""
        par = f"tp{r.tp}" + (f" pp{r.pp}" if r.pp > 1 else "") + (f" dp{r.dp}" if r.dp > 1 else "")
        t.add_row(r.name, f"{r.count}x {r.gpu} {par}", f"{r.max_seq_len:,} x {r.concurrency}",
                  f"{r.memory_bytes_per_gpu / 2**30:,.1f} / {r.budget_bytes_per_gpu / 2**30:,.1f}",
                  f"{r.max_concurrency:,}", f"{r.tpot_ms:,.1f}{tgt_tpot}", f"{r.tokens_per_s:,.0f}{tgt_tok}",
                  f"[{style[r.status]}]{r.status}[/{style[r.status]}]")
        notes += [Text(f"{r.name}: {p}  ({r.file})", style=style[r.status]) for p in r.problems]
    return Group(t, *notes) if notes else t


@app.command()
@handle_errors
def schema(
    which: Annotated[str, typer.Argument(help="all, model, deployment or gpu.")] = "all",
) -> None:
    """Print the JSON Schema of the model, deployment and GPU configs (for editor validation)."""
    import json

    from kvcalc.deploy import Deployment
    from kvcalc.schema import GpuSpec, ModelSpec

    schemas = {"model": ModelSpec, "deployment": Deployment, "gpu": GpuSpec}
    if which == "all":
        from pydantic.json_schema import models_json_schema

        _, out = models_json_schema([(m, "validation") for m in schemas.values()], title="kvcalc configs")
        out["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    elif which in schemas:
        out = schemas[which].model_json_schema()
        out["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    else:
        from kvcalc.errors import UnknownNameError

        raise UnknownNameError("schema", which, ["all", *schemas])
    echo(json.dumps(out, indent=2))
