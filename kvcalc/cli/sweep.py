"""`kvcalc sweep`: memory, fit, TPOT and tokens/s over a grid of contexts and batches."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, NamedTuple, Optional

import typer

from kvcalc.cli.options import (
    PLAIN_KV_DTYPE_HELP,
    FlagSet,
    FormatOpt,
    GpuPlanFlags,
    KvFormatFlags,
    LayoutFlags,
    ModelArg,
    ModelSourceFlags,
    check_limits,
    check_positive,
    flag_sets,
    only,
    resolve_count,
    warn_beyond_context,
)
from kvcalc.cli.output import check_format, echo, emit, handle_errors

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from kvcalc.calc.memory_plan import Layout
    from kvcalc.calc.plan import EngineKv, KvPick
    from kvcalc.formats import StorageFormat
    from kvcalc.schema import GpuSpec, ModelSpec


class SpeedFlags(FlagSet):
    """The speed model's inputs: --engine (whose per-step floor applies) and --calibration."""

    engine: Annotated[
        str,
        typer.Option(
            "--engine",
            "-e",
            help="The engine whose speed terms TPOT and tokens/s use (kvcalc/data/speed.yaml): ideal (no per-step floor), vllm, sglang, llamacpp. Needs --gpu.",
        ),
    ] = "ideal"
    calibration: Annotated[
        Optional[str],
        typer.Option(
            "--calibration",
            help="A calibration file from `kvcalc measure --calibrate`: its measured figures replace the speed table's (needs --gpu).",
        ),
    ] = None


#: grids past this many points get a (transient) progress bar in the table format.
PROGRESS_POINTS = 2000


def track(points: list[tuple[int, int]]) -> Iterable[tuple[int, int]]:
    """`points`, behind rich's transient progress bar when the grid is large."""
    if len(points) <= PROGRESS_POINTS:
        return points
    from rich.progress import track as rich_track

    return rich_track(points, description="sweeping", transient=True, console=None)


@handle_errors
@flag_sets(order=("gpu", "count", "tp", "pp", "kv_dtype", "weight_dtype"))
def sweep(
    ctx: typer.Context,
    model: ModelArg,
    seq_len: Annotated[
        str, typer.Option("--seq-len", "-s", help="Context lengths: 1k,8k,32k,128k.")
    ] = "1k,8k,32k,128k",
    batch: Annotated[
        str,
        typer.Option(
            "--batch", help="Batch sizes (sequences per DP replica): 1,8,32 (not -b: llama.cpp's --batch-size)."
        ),
    ] = "1,8,32",
    gpu: GpuPlanFlags = GpuPlanFlags(),
    layout: Annotated[LayoutFlags, only("tp", "pp", "count")] = LayoutFlags(),
    kv: Annotated[KvFormatFlags, only("kv_dtype", kv_dtype=PLAIN_KV_DTYPE_HELP)] = KvFormatFlags(),
    plot: Annotated[
        Optional[str],
        typer.Option(
            "--plot",
            help="Write a plot of memory (and, with --gpu, throughput) against context to this file, named with its type: .png, .svg, .pdf, .eps, .jpg or .tif (an existing file only with --force). Needs matplotlib: pip install 'kvcalc[plot]'.",
        ),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite the --plot file if it exists.")] = False,
    beyond_context: Annotated[
        bool,
        typer.Option(
            "--beyond-context",
            help="Keep contexts past the model's max_position_embeddings (by default they are dropped, with one warning naming them).",
        ),
    ] = False,
    speed: SpeedFlags = SpeedFlags(),
    source: ModelSourceFlags = ModelSourceFlags(),
    fmt: FormatOpt = "table",
) -> None:
    """Memory, fit, TPOT and tokens/s over a grid of context lengths and batch sizes."""
    from kvcalc.calc.sweep import SweepRequest, sweep_rows
    from kvcalc.calc.weights import weight_format_label
    from kvcalc.load.models import naming_model_file
    from kvcalc.report.tables import sweep_table
    from kvcalc.units import parse_counts

    check_format(fmt)
    if plot is not None:
        from kvcalc.cli.output import check_target, write_atomic
        from kvcalc.report.plot import plot_path, pyplot, render_sweep

        plot_path(plot)  # a bad name fails before any work
        check_target(plot, "--plot", force=force)
    gpu.refuse_without_gpu(ctx, allowed=("weight_dtype",))
    T = parse_counts(seq_len, "--seq-len")
    B = parse_counts(batch, "--batch")
    check_positive(tp=layout.tp, pp=layout.pp)
    check_limits(B, T)
    tp, pp, dp = resolve_count(layout.count, layout.tp, layout.pp, 1)
    spec = source.load(model)
    T = T if beyond_context else drop_beyond_context(spec, T)
    g = _gpu(gpu.gpu)
    skv = sweep_kv_formats(spec, kv.kv_dtype, speed.engine, g)
    lay, kv_name = with_speed(gpu.layout(tp, pp, dp, skv.fmt, None), g, speed), skv.label
    req = SweepRequest(spec, tuple(T), tuple(B), lay, g, engine_sweep_kv(spec, lay, g, skv))
    if plot is not None:  # fail on a missing extra before the work, not after
        pyplot()
    warn_beyond_context(spec, T)
    with naming_model_file(model):  # a YAML or config.json that cannot size the weights is named
        rows = sweep_rows(req, progress=track if fmt == "table" else None)
    if plot is not None:
        image = render_sweep(rows, spec, req.gpu, req.layout, kv_name, plot_path(plot))
        write_atomic(plot, image, option="--plot", force=force)
    g = req.gpu
    par = (
        f", {tp * pp * dp} x {g.key} (tp {tp}, pp {pp}, dp {dp})"
        if g
        else (f", tp {tp}, pp {pp}" if (tp, pp) != (1, 1) else "")
    )
    title = f"{spec.name}, KV {kv_name}, weights {weight_format_label(spec, req.layout.weight_dtype)}{par}"
    note = (
        f"TPOT, tok/s: modelled, {req.layout.speed.describe(weight_bits(spec, req.layout))}"
        if g is not None and req.layout.speed is not None
        else None
    )
    emit(rows, fmt, lambda: sweep_table(rows, title, g is not None, speed_note=note))
    if plot is not None and fmt == "table":
        echo(f"plot written to {plot}")


class SweepKv(NamedTuple):
    """The sweep's KV dtype: `fmt` (the kvcalc format of the layout), `label` (as the title names
    it), and for an engine's own dtype its `pick` (`calc.plan.KvPick`) and the engine's KV
    arithmetic built with the options it was parsed into (`engine_kv`, `EngineProfile.plan_engine_kv`)."""

    fmt: StorageFormat
    label: str
    pick: KvPick | None = None
    engine_kv: Callable[..., EngineKv] | None = None


def sweep_kv_formats(spec: ModelSpec, kv_dtype: str | None, engine: str, gpu: GpuSpec | None) -> SweepKv:
    """--kv-dtype: a kvcalc format (default the model's dtype), which the exact formula sizes, or,
    with --engine and --gpu, an engine's own dtype and no kvcalc format (vLLM 0.33's
    `turboquant_k8v4`, `fp8_per_token_head`, `fp8_ds_mla` ...) parsed once by the engine on the GPU
    (`requests.plan_kv_picks`, plan's parse). Raises `KvcalcError` naming the engine version and
    what it accepts; without --gpu or an engine such a dtype is refused by kvcalc's formats."""
    from kvcalc.errors import KvcalcError
    from kvcalc.formats import kv_format

    try:
        fmt = kv_format(kv_dtype or spec.dtype_format)  # parsed once: the layout holds the format
        return SweepKv(fmt, fmt.name)
    except KvcalcError:
        from kvcalc.engines import canonical

        if kv_dtype is None or gpu is None or canonical(engine) == "ideal":
            raise
    from kvcalc.calc.plan import GpuChoice
    from kvcalc.engines.profile import get_profile
    from kvcalc.requests import plan_kv_picks

    prof = get_profile(engine)
    opts = prof.options()
    (pick,), kv_options, _ = plan_kv_picks(prof, spec, opts, [kv_dtype], [GpuChoice((gpu,))])
    return SweepKv(pick.k, pick.engine_dtype or pick.k.name, pick, prof.plan_engine_kv(spec, opts, kv_options))


def engine_sweep_kv(spec: ModelSpec, layout: Layout, gpu: GpuSpec | None, kv: SweepKv) -> EngineKv | None:
    """The engine's KV arithmetic for the sweep's layout on `gpu` in `kv`'s engine dtype (as
    `kvcalc plan` sizes a layout), or None for a kvcalc format."""
    if kv.pick is None or kv.engine_kv is None or gpu is None or not kv.pick.engine_dtype:
        return None
    from kvcalc.calc import kv_cache

    stages = tuple(kv_cache.pp_stages(spec.n_layers, layout.pp))
    return kv.engine_kv(gpu, layout.tp, stages, kv.pick)


def with_speed(layout: Layout, gpu: GpuSpec | None, speed: SpeedFlags) -> Layout:
    """`layout`, its memory-plan knobs checked (`Layout.check`, once: `sweep_rows`' `GpuFit`
    trusts them), with the speed model's terms for --engine on `gpu` (`requests.speed_terms`,
    with --calibration); unchanged without a GPU, where --engine / --calibration are refused."""
    from kvcalc.engines import canonical
    from kvcalc.errors import KvcalcError

    layout.check()
    if gpu is None:
        if speed.calibration is not None or speed.engine != "ideal":
            raise KvcalcError(
                "needs --gpu (a GPU from `kvcalc gpus`): speed is modelled on a GPU",
                option="--calibration" if speed.calibration is not None else "--engine",
            )
        return layout
    import dataclasses

    from kvcalc.requests import speed_terms

    cal = None
    if speed.calibration is not None:
        from kvcalc.load.speed import load_calibration

        cal = load_calibration(speed.calibration)
    return dataclasses.replace(layout, speed=speed_terms(gpu, canonical(speed.engine), layout.tp, layout, cal))


def weight_bits(spec: ModelSpec, layout: Layout) -> int:
    """Bits per value of the decoder weights (the speed label names their format factor)."""
    from kvcalc.calc.weights import weight_formats

    return weight_formats(spec, layout.weight_dtype)[0].bits


def drop_beyond_context(spec: ModelSpec, seq_lens: list[int]) -> list[int]:
    """The contexts within `spec`'s context limit (`ModelSpec.context_limit`, `calc.sweep.within_context`); the
    dropped ones are named in one warning. Raises `KvcalcError` when none is left."""
    import warnings

    from kvcalc.calc.sweep import within_context
    from kvcalc.errors import KvcalcError, KvcalcWarning

    kept, dropped = within_context(seq_lens, spec.context_limit)
    if not dropped:
        return kept
    label = spec.context_limit_label
    if not kept:
        raise KvcalcError(
            f"every --seq-len is beyond {spec.name}'s {label}: give shorter "
            f"contexts, or --beyond-context to sweep them anyway"
        )
    from kvcalc.text import LISTED_NUMBERS, number_list

    many = len(dropped) > 1
    count = f"{len(dropped):,} " if len(dropped) > LISTED_NUMBERS else ""  # the list says "..."
    warnings.warn(
        f"dropped the {count}context{'s' if many else ''} of {number_list(dropped)} tokens: "
        f"beyond {spec.name}'s {label}; --beyond-context keeps "
        f"{'them' if many else 'it'}",
        KvcalcWarning,
        stacklevel=2,
    )
    return kept


def _gpu(name: str | None) -> GpuSpec | None:
    """The `GpuSpec` for --gpu, or None."""
    if name is None:
        return None
    from kvcalc.load.gpus import get_gpu

    return get_gpu(name)
