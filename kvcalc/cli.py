"""The typer app: parse -> load -> compute -> report. Thin by design.

Every user error is a `KvcalcError`; `handle_errors` catches it once per command, prints one
red line per problem and exits 2 (`--debug` shows the traceback instead). torch is never
imported here; `kvcalc measure` imports it inside its own module.
"""

from __future__ import annotations

import functools
import os
import sys
from typing import Annotated, Any, Callable, Iterable, Optional

import typer

from kvcalc.errors import KvcalcError

app = typer.Typer(
    name="kvcalc",
    help="Exact KV-cache memory and roofline decode throughput for real LLM architectures.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # help text prints as written: "kvcalc[plot]" is not markup
)

_STATE = {"debug": bool(os.environ.get("KVCALC_DEBUG"))}


def _err_console():
    from rich.console import Console

    return Console(stderr=True, highlight=False, soft_wrap=True)


def fail(message: str, code: int = 2) -> None:
    """Print each line of `message` in red on stderr and exit with `code`."""
    from rich.markup import escape

    con = _err_console()
    for line in str(message).splitlines() or [""]:
        con.print(f"[red]error:[/red] {escape(line)}", markup=True)  # escape: "kvcalc[measure]" is not markup
    raise typer.Exit(code)


def _run_warned(fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
    """Call fn; print each `KvcalcWarning` it raised as one yellow `warning:` line on stderr
    (before any error line); other warnings are shown as Python would."""
    import warnings

    from kvcalc.errors import KvcalcWarning

    caught: list[warnings.WarningMessage] = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", KvcalcWarning)
            return fn(*args, **kwargs)
    finally:
        for w in caught:
            if issubclass(w.category, KvcalcWarning):
                from rich.markup import escape

                _err_console().print(f"[yellow]warning:[/yellow] {escape(str(w.message))}", markup=True)
            else:
                warnings.showwarning(w.message, w.category, w.filename, w.lineno)


def handle_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Run a command; turn `KvcalcError` into one red line per problem and exit 2, and any
    other exception into one line and exit 1, unless --debug is set."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return _run_warned(fn, args, kwargs)
        except (typer.Exit, typer.Abort, KeyboardInterrupt):
            raise
        except KvcalcError as e:
            if _STATE["debug"]:
                raise
            fail(str(e), 2)
        except Exception as e:  # a bug, not the user's fault: still one line
            if _STATE["debug"]:
                raise
            fail(f"internal error: {e.__class__.__name__}: {e} (rerun with --debug for the traceback)", 1)

    return wrapper


@app.callback()
def _root(debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks.")] = False) -> None:
    """Exact KV-cache memory and roofline decode throughput for real LLM architectures."""
    _STATE["debug"] = debug or bool(os.environ.get("KVCALC_DEBUG"))


def echo(obj: Any) -> None:
    """Print a rich renderable, or plain text as is (machine formats must not be wrapped)."""
    if isinstance(obj, str):
        typer.echo(obj)
    else:
        from rich.console import Console

        # markup off: names and sources come from user files ("[red]x" must print as typed);
        # tables style their cells with rich Text, never markup.
        Console(highlight=False, markup=False).print(obj)


def check_format(fmt: str) -> None:
    """Raise KvcalcError for an unknown --format."""
    from kvcalc import report

    if fmt not in report.FORMATS:
        raise KvcalcError(f"--format: unknown format '{fmt}'; use one of {', '.join(report.FORMATS)}")


def emit(result: Any, fmt: str, table: Callable[[], Any]) -> None:
    """Print `result` as `fmt`; `table` builds the rich table lazily."""
    from kvcalc import report

    check_format(fmt)
    echo(table() if fmt == "table" else report.machine(result, fmt))


def emit_parts(parts: list[tuple[Any, Callable[[], Any]]], fmt: str) -> None:
    """Print several results as one: machine formats merge their keys into one object (the
    first part's keys first); the table format prints each part's table in turn."""
    from kvcalc import report

    check_format(fmt)
    if fmt == "table":
        for _, table in parts:
            echo(table())
        return
    merged: dict[str, Any] = {}
    for result, _ in parts:
        merged.update(result.model_dump(mode="json"))
    echo(report.machine(merged, fmt))


# ----- shared options ---------------------------------------------------------------------

ModelArg = Annotated[str, typer.Argument(help="A bundled name (see `kvcalc models`), a .yaml file, or a config.json.")]
SeqLenOpt = Annotated[Optional[str], typer.Option("--seq-len", "-s", help="Tokens per sequence (8192 or 32k). Default: the model's max_position_embeddings.")]
BatchOpt = Annotated[int, typer.Option("--batch", "-b", help="Sequences in the batch (per DP replica).")]
KvDtypeOpt = Annotated[Optional[str], typer.Option("--kv-dtype", help="KV format for K and V: fp16, bf16, fp8, fp8_e5m2, int8, int4, q8_0, q4_0 ... Default: the model's dtype.")]
KDtypeOpt = Annotated[Optional[str], typer.Option("--k-dtype", help="K format, when it differs from V.")]
VDtypeOpt = Annotated[Optional[str], typer.Option("--v-dtype", help="V format, when it differs from K.")]
GroupOpt = Annotated[Optional[int], typer.Option("--group-size", help="Group size of int8/int4 scales.")]
ScaleOpt = Annotated[Optional[str], typer.Option("--scale-dtype", help="Scale dtype of int8/int4 groups (fp16, bf16, fp32).")]
TpOpt = Annotated[int, typer.Option("--tp", help="Tensor-parallel ranks.")]
PpOpt = Annotated[int, typer.Option("--pp", help="Pipeline stages.")]
DpOpt = Annotated[int, typer.Option("--dp", help="Data-parallel replicas.")]
FormatOpt = Annotated[str, typer.Option("--format", "-f", help="table, json, yaml, csv or markdown.")]
# GPU fit and roofline options (estimate --gpu, sweep; see cli_throughput.py)
GpuOpt = Annotated[Optional[str], typer.Option("--gpu", help="A GPU from `kvcalc gpus` (h100-sxm, h200 ...) or a GPU YAML file.")]
CountOpt = Annotated[Optional[int], typer.Option("--count", help="GPUs in all (= tp x pp x dp); alone, it sets --tp.")]
WeightDtypeOpt = Annotated[Optional[str], typer.Option("--weight-dtype", help="Weight format: bf16, fp16, fp8, int8, int4 (group scales: int4:g128). Default: the model's dtype.")]
UtilOpt = Annotated[float, typer.Option("--gpu-memory-utilization", help="Fraction of GPU memory the engine may use (vLLM default 0.9).")]
BwEffOpt = Annotated[float, typer.Option("--bw-efficiency", help="Fraction of HBM bandwidth decode reaches (default 0.8: FlashInfer / FlashDecoding reach 80-95%).")]
FlopsEffOpt = Annotated[float, typer.Option("--flops-efficiency", help="Fraction of dense peak FLOP/s reached (default 0.5: PaLM 46% MFU).")]
CudaCtxOpt = Annotated[Optional[str], typer.Option("--cuda-context", help="Memory outside the allocator per GPU (default 500MiB).")]
ActOpt = Annotated[Optional[str], typer.Option("--activation-reserve", help="Activation reserve per GPU, e.g. 2GiB (default: estimated from an 8192-token prefill chunk).")]


def resolve_seq_len(model: Any, seq_len: str | None) -> int:
    """--seq-len parsed, or the model's max_position_embeddings; raises KvcalcError if neither."""
    from kvcalc.units import parse_count

    if seq_len is not None:
        return parse_count(seq_len, "--seq-len")
    if model.max_position_embeddings is None:
        raise KvcalcError(f"{model.name} has no max_position_embeddings; give --seq-len")
    return model.max_position_embeddings


def resolve_kv_dtypes(model: Any, kv_dtype: str | None, k_dtype: str | None, v_dtype: str | None,
                      group_size: int | None = None, scale_dtype: str | None = None) -> tuple[str, str]:
    """(K format name, V format name) from the options; default the model's dtype. Group
    options are folded into the name (`int4:g64:fp32`) so results say what was used."""
    from kvcalc.dtypes import kv_format

    base = kv_dtype if kv_dtype is not None else model.dtype
    k = kv_format(k_dtype if k_dtype is not None else base, group_size, scale_dtype)
    v = kv_format(v_dtype if v_dtype is not None else base, group_size, scale_dtype)
    return k.name, v.name


def typed_options(ctx: typer.Context) -> list[str]:
    """Parameters of the running command that the user typed (not left at their defaults)."""
    return [n for n in ctx.params if getattr(ctx.get_parameter_source(n), "name", "DEFAULT") != "DEFAULT"]


def flag_name(ctx: typer.Context, param: str) -> str:
    """The option as the user writes it (`--vllm-v0` for the parameter `v0`)."""
    for p in ctx.command.params:
        if p.name == param and getattr(p, "opts", None):
            return max(p.opts, key=len)
    return "--" + param.replace("_", "-")


def refuse_typed(ctx: typer.Context, params: Iterable[str], applies_to: str) -> None:
    """Raise `KvcalcError` when any of `params` was typed: an option that would be ignored is
    refused, never silently dropped ('--x applies to `applies_to`')."""
    typed = set(typed_options(ctx))
    given = [n for n in params if n in typed]
    if given:
        verb = "applies" if len(given) == 1 else "apply"
        raise KvcalcError(f"{', '.join(flag_name(ctx, n) for n in given)} {verb} to {applies_to}")


def check_positive(**values: int) -> None:
    """Raise KvcalcError naming the first option that is not a positive integer."""
    for name, v in values.items():
        if v is not None and v <= 0:
            raise KvcalcError(f"--{name.replace('_', '-')} must be a positive integer, got {v}")


# ----- commands ---------------------------------------------------------------------------

@app.command()
@handle_errors
def estimate(
    ctx: typer.Context,
    model: ModelArg,
    seq_len: SeqLenOpt = None,
    batch: BatchOpt = 1,
    kv_dtype: KvDtypeOpt = None,
    k_dtype: KDtypeOpt = None,
    v_dtype: VDtypeOpt = None,
    group_size: GroupOpt = None,
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
    from kvcalc import engine, report
    from kvcalc.loaders import load_model
    from kvcalc.schema import Parallelism, Workload

    check_positive(batch=batch, tp=tp, pp=pp, dp=dp)
    spec = load_model(model)
    T = resolve_seq_len(spec, seq_len)
    k, v = resolve_kv_dtypes(spec, kv_dtype, k_dtype, v_dtype, group_size, scale_dtype)
    from kvcalc.cli_throughput import check_gpu_only_options, check_limits, resolve_count, warn_beyond_context

    check_gpu_only_options(ctx, gpu)  # GPU-only options without --gpu are refused, never ignored
    check_limits([batch], [T])
    tp, pp, dp = resolve_count(count, tp, pp, dp)  # count = tp x pp x dp; alone it sets tp
    warn_beyond_context(spec, [T])
    wl = Workload(seq_len=T, batch=batch, k_dtype=k, v_dtype=v, parallel=Parallelism(tp=tp, pp=pp, dp=dp))
    check_format(fmt)
    est = engine.estimate(spec, wl)
    # Each feature that adds to `estimate` (GPU fit and roofline, engine profiles) appends
    # (result model, table builder); their keys sit beside the KV keys in the JSON.
    parts: list[tuple[Any, Callable[[], Any]]] = [(est, lambda: report.kv_table(est))]
    if gpu is not None:
        from kvcalc.cli_throughput import make_layout, serving_part

        parts.append(serving_part(spec, est, gpu, make_layout(
            tp, pp, dp, weight_dtype, k, v, gpu_memory_utilization, bw_efficiency, flops_efficiency,
            cuda_context, activation_reserve)))
    eng = engine_name.strip().lower()
    if eng != "vllm":
        refuse_typed(ctx, ["block_size"], "--engine vllm only")
    if eng != "sglang":
        refuse_typed(ctx, ["page_size"], "--engine sglang only")
    if eng not in ("ideal", "exact", "none"):
        from kvcalc.cli_capacity import engine_part

        # the engine sizes its KV from the GPU plan's budget when --gpu is given (else: for this batch)
        plan = next((r for r, _ in parts if hasattr(r, "budget_bytes_per_gpu")), None)
        part = engine_part(spec, T, batch, k, v, tp, engine_name, block_size, page_size,
                           kv_given=bool(kv_dtype or k_dtype or v_dtype or group_size or scale_dtype), plan=plan)
        if part is not None:
            parts.append(part)
    emit_parts(parts, fmt)


@app.command()
@handle_errors
def models(fmt: FormatOpt = "table") -> None:
    """List the bundled model configs."""
    from kvcalc import report
    from kvcalc.loaders import bundled, load_model_file

    rows = []
    for name, path in bundled("models").items():
        m = load_model_file(path)
        rows.append({"name": name, "attention": m.attention_kind, "n_layers": m.n_layers,
                     "n_heads": m.n_heads, "n_kv_heads": m.resolved_n_kv_heads, "head_dim": m.resolved_head_dim,
                     "layers": _kinds_summary(m.layer_kinds), "max_position_embeddings": m.max_position_embeddings,
                     "source": m.source})
    if fmt != "table":
        emit(rows, fmt, lambda: None)
        return
    from rich.table import Table

    t = Table(title="Bundled models (kvcalc estimate NAME)", title_justify="left")
    for col in ("name", "attention", "layers", "heads (q/kv)", "head_dim", "max context"):
        t.add_column(col, no_wrap=col == "name", overflow="fold")
    for r in rows:
        t.add_row(r["name"], r["attention"], r["layers"], f"{r['n_heads']}/{r['n_kv_heads']}",
                  str(r["head_dim"]), f"{r['max_position_embeddings'] or 0:,}")
    echo(t)


def _kinds_summary(kinds: list[str]) -> str:
    counts: dict[str, int] = {}
    for k in kinds:
        counts[k] = counts.get(k, 0) + 1
    return " + ".join(f"{n} {k}" for k, n in counts.items())


@app.command()
@handle_errors
def compare(
    model: ModelArg,
    seq_len: SeqLenOpt = None,
    batch: BatchOpt = 1,
    kv_dtype: KvDtypeOpt = None,
    fmt: FormatOpt = "table",
) -> None:
    """MODEL as MHA, as its own GQA, and as MQA, side by side, with each one's saving against MHA."""
    from kvcalc import engine, report
    from kvcalc.dtypes import kv_format
    from kvcalc.loaders import load_model

    check_positive(batch=batch)
    spec = load_model(model)
    T = resolve_seq_len(spec, seq_len)
    dtype = kv_format(kv_dtype or spec.dtype).name
    rows = engine.compare_attention(spec, T, batch, dtype)
    title = f"{spec.name}: {spec.n_heads} query heads, {T:,} tokens x batch {batch}, {dtype}"
    emit(rows, fmt, lambda: report.rows_table(rows, [
        ("variant", "variant"), ("n_kv_heads", "KV heads"), ("kv_bytes_per_token", "B/token"),
        ("kv_cache_bytes", "KV cache"), ("reduction_vs_mha_percent", "saving vs MHA %")], title))


# ----- commands in their own modules: each imports `app` (and helpers) from here and is
# registered by importing it below. Keep these imports light: no torch, no matplotlib.
# (one line per module, e.g. `from kvcalc import cli_measure  # noqa: E402,F401`)
from kvcalc import cli_hf  # noqa: E402,F401
from kvcalc import cli_measure  # noqa: E402,F401
from kvcalc import cli_throughput  # noqa: E402,F401
from kvcalc import cli_deploy  # noqa: E402,F401
from kvcalc import cli_capacity  # noqa: E402,F401


def main() -> None:
    """Console entry point; `--debug` anywhere on the line turns on tracebacks."""
    if "--debug" in sys.argv[1:]:
        sys.argv.remove("--debug")
        os.environ["KVCALC_DEBUG"] = "1"
    app()
