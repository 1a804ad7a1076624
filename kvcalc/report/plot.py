"""`kvcalc sweep --plot`: memory per GPU and decode throughput against context, written with
matplotlib (Agg). matplotlib is imported inside `pyplot()` only, so importing this module costs
nothing; `plot_path` checks the file name before any work, without matplotlib."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, ParamSpec, TypeVar

from kvcalc.errors import OPTION, KvcalcError, MissingExtraError

if TYPE_CHECKING:
    from matplotlib.artist import Artist
    from matplotlib.axes import Axes
    from matplotlib.axis import Axis
    from matplotlib.figure import Figure

    from kvcalc.calc.memory_plan import Layout
    from kvcalc.calc.sweep import SweepRow
    from kvcalc.schema import GpuSpec, ModelSpec

_P = ParamSpec("_P")
_R = TypeVar("_R")
#: a matplotlib colour as the colour cycle and the colour maps give it: a name, or RGBA
Color = str | tuple[float, float, float, float]

#: at most this many batches get a legend entry each; past it the lines are coloured along a
#: colour bar of the batch size (300 entries would squeeze both panels to nothing)
MAX_LEGEND_BATCHES = 10
#: at most this many context ticks on the x axis; past it every k-th swept context, first and last kept
MAX_CONTEXT_TICKS = 12

#: file types `--plot` writes (matplotlib's Agg, SVG, PDF and PS backends; jpg / tif through Pillow)
PLOT_EXTENSIONS = ("png", "svg", "pdf", "eps", "ps", "jpg", "jpeg", "tif", "tiff")


def plot_path(path: str) -> str:
    """The file type `--plot PATH` writes: PATH's extension, lower case, one of
    `PLOT_EXTENSIONS`. kvcalc writes only the name the user typed, so a name without an
    extension is refused (matplotlib would have written `photo.png` for `photo`), as is any
    other extension and a folder name. Raises `KvcalcError` (field `plot`)."""
    from pathlib import Path

    p = Path(path)
    ext = p.suffix.lower().lstrip(".")
    if not p.name or path.endswith(("/", "\\")):
        raise KvcalcError(
            f"'{path}' is a folder; give a file name such as sweep.png", field="plot", value=path, form=OPTION
        )
    if not ext:
        raise KvcalcError(
            f"give the file type in the name ({p.name}.png, or .svg, .pdf, ...): kvcalc writes only the name you give",
            field="plot",
            value=path,
        )
    if ext not in PLOT_EXTENSIONS:
        raise KvcalcError(
            f"cannot write a .{ext} file; use one of {', '.join('.' + e for e in PLOT_EXTENSIONS)}",
            field="plot",
            value=path,
            form=OPTION,
        )
    return ext


def pyplot():
    """matplotlib.pyplot on the Agg backend, or MissingExtraError naming kvcalc[plot]."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise MissingExtraError("matplotlib", "plot") from None
    return plt


def _fmt_tokens(n: float) -> str:
    """A context length as it is named: 1024 -> 1k, 131072 -> 128k, 1048576 -> 1M, else 1,000."""
    n = int(n)
    if n >= 2**20 and n % 2**20 == 0:
        return f"{n // 2**20}M"
    if n >= 1024 and n % 1024 == 0:
        return f"{n // 1024}k"
    return f"{n:,}"


def _fmt_number(v: float, short: bool = True) -> str:
    """A log-axis label in plain figures: 20, 50, 200, 1,000, 20k, 1.5M (never 2x10^1);
    `short=False` keeps every digit (5,000, 500,000) for quantities with a unit of their own."""
    if v <= 0:
        return ""
    if not short and v >= 1:
        return f"{v:,.0f}"
    if v >= 1e6:
        return f"{v / 1e6:g}M"
    if v >= 1e4:
        return f"{v / 1e3:g}k"
    if v >= 1:
        return f"{v:,.0f}"
    return f"{v:g}"


def _styles(n: int, plt: ModuleType) -> list[tuple[Color, str]]:
    """(colour, line style) for n lines, all distinct: the default 10-colour cycle up to 10,
    tab20 up to 20, then viridis, with line styles cycling past 10 so neighbours differ twice."""
    if n <= 10:  # the style's colours, repeated if it has fewer than n (one line per batch size, always)
        colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
        return [(colors[i % len(colors)], "-") for i in range(n)]
    cmap = plt.get_cmap("tab20") if n <= 20 else plt.get_cmap("viridis")
    cols = [cmap(i) for i in range(n)] if n <= 20 else [cmap(i / (n - 1)) for i in range(n)]
    ls = ["-", "--", ":", "-."]
    return [(c, ls[i % len(ls)]) for i, c in enumerate(cols)]


def _log_axis(axis: Axis, short: bool = True) -> None:
    """Major ticks at 1, 2, 5 x 10^k labelled in plain figures; no minor labels."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda v, _: _fmt_number(v, short)))
    axis.set_minor_formatter(NullFormatter())


def _third_party_warnings_as_one_line(fn: Callable[_P, _R]) -> Callable[_P, _R]:
    """Run `fn` with every warning matplotlib, numpy or Pillow raises caught; afterwards at most
    one `KvcalcWarning` line in kvcalc's words (the first message, how many more), never a raw
    warning with a source path. kvcalc's own warnings pass through unchanged."""

    @functools.wraps(fn)
    def wrapper(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        import warnings

        from kvcalc.errors import KvcalcWarning

        caught: list[warnings.WarningMessage] = []
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                return fn(*args, **kwargs)
        finally:  # outside the recording block, so the caller's handler sees these
            ours = [w for w in caught if issubclass(w.category, KvcalcWarning)]
            theirs = list(
                dict.fromkeys(
                    " ".join(str(w.message).split())[:200] for w in caught if not issubclass(w.category, KvcalcWarning)
                )
            )
            for w in ours:
                warnings.warn(w.message, w.category, stacklevel=2)
            if theirs:
                more = f" (and {len(theirs) - 1} more)" if len(theirs) > 1 else ""
                warnings.warn(
                    f"the plot may be hard to read: the plotting library said: {theirs[0]}{more}",
                    KvcalcWarning,
                    stacklevel=2,
                )

    return wrapper


def _plot_batches(
    axes: list[Axes], rows: Sequence[SweepRow], batches: list[int], plt: ModuleType, fig: Figure | None = None
) -> list[Artist]:
    """One line per batch on each panel (memory; tokens/s when there is a second panel), points
    that fit filled and those that do not hollow; returns the legend handles: one per batch up
    to `MAX_LEGEND_BATCHES`; past it the lines are coloured along viridis by log batch size,
    a colour bar on `fig` names the batches, and the legend gets none of them."""
    from matplotlib.lines import Line2D

    if len(batches) > MAX_LEGEND_BATCHES:
        return _plot_many_batches(axes, rows, batches, plt, fig)
    handles: list[Artist] = []
    for (c, ls), b in zip(_styles(len(batches), plt), batches, strict=True):
        _plot_batch(axes, rows, b, color=c, ls=ls, lw=1.5, ms=5)
        handles.append(Line2D([], [], color=c, ls=ls, marker="o", ms=5, label=f"batch {b}"))
    return handles


def _plot_batch(
    axes: list[Axes], rows: Sequence[SweepRow], batch: int, *, color: Color, ls: str, lw: float, ms: float
) -> None:
    """One batch's line on each panel (memory per GPU in GiB; with a GPU, total tokens/s) against
    context, the points that fit filled and the rest hollow."""
    rs = sorted((r for r in rows if r["batch"] == batch), key=lambda r: r["seq_len"])
    x = [r["seq_len"] for r in rs]
    panels_y = [(axes[0], [r["memory_bytes_per_gpu"] / 2**30 for r in rs])]
    if len(axes) > 1:
        # no throughput where the batch does not fit (None): a gap in the line
        panels_y.append((axes[1], [float("nan") if r["tokens_per_s"] is None else r["tokens_per_s"] for r in rs]))
    fit = [i for i, r in enumerate(rs) if r.get("fits", True)]
    miss = [i for i, r in enumerate(rs) if not r.get("fits", True)]
    for ax, y in panels_y:
        ax.plot(x, y, ls=ls, color=color, lw=lw)
        ax.plot([x[i] for i in fit], [y[i] for i in fit], "o", color=color, ms=ms)
        ax.plot([x[i] for i in miss], [y[i] for i in miss], "o", mfc="white", color=color, ms=ms)


def _plot_many_batches(
    axes: list[Axes], rows: Sequence[SweepRow], batches: list[int], plt: ModuleType, fig: Figure | None
) -> list[Artist]:
    """More batches than `MAX_LEGEND_BATCHES`: one thin line per batch, coloured by its place on
    a log colour scale (viridis), the fitting points filled, the rest hollow; a colour bar
    labelled "batch (sequences)" stands in for the legend. Returns no legend handles."""
    from matplotlib.cm import ScalarMappable
    from matplotlib.colors import LogNorm, Normalize

    cmap = plt.get_cmap("viridis")
    lo, hi = batches[0], batches[-1]
    norm = LogNorm(vmin=lo, vmax=hi) if lo > 0 and hi > lo else Normalize(vmin=lo - 1, vmax=hi + 1)
    for b in batches:
        _plot_batch(axes, rows, b, color=cmap(norm(b)), ls="-", lw=0.8, ms=2)
    if fig is not None:
        bar = fig.colorbar(ScalarMappable(norm=norm, cmap=cmap), ax=axes, location="right", shrink=0.9)
        if isinstance(norm, LogNorm):
            _log_axis(bar.ax.yaxis)  # 1, 2, 5, 10, 20 ... in plain figures, not 10^1
        bar.set_label(f"batch (sequences): {len(batches)} sizes, {lo:,} to {hi:,}")
    return []


def _context_ticks(seqs: list[int]) -> list[int]:
    """The swept contexts to tick: all of them up to `MAX_CONTEXT_TICKS`, else at most that many,
    spaced evenly on the log axis (each at least (last / first)^(1 / (MAX_CONTEXT_TICKS - 1))
    times the one before; the first and the last always), so labels never overlap."""
    if len(seqs) <= MAX_CONTEXT_TICKS:
        return seqs
    ratio = (seqs[-1] / seqs[0]) ** (1 / (MAX_CONTEXT_TICKS - 1))
    ticks = [seqs[0]]
    for t in seqs[1:-1]:
        if t >= ticks[-1] * ratio and seqs[-1] >= t * ratio:
            ticks.append(t)
    return ticks + [seqs[-1]]


def _context_axes(axes: list[Axes], seqs: list[int]) -> None:
    """A log2 context axis on every panel, ticked at the swept contexts (1k, 32k, 128k), at
    most `MAX_CONTEXT_TICKS` of them (`_context_ticks`)."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    seqs = _context_ticks(seqs)
    for ax in axes:
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_locator(FixedLocator(seqs))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: _fmt_tokens(v)))
        if len(seqs) > 6:
            ax.tick_params(axis="x", labelrotation=45)
        ax.set_xlabel("context length (tokens per sequence)")
        ax.grid(True, which="major", alpha=0.3)


def _reference_marks(
    axes: list[Axes],
    rows: Sequence[SweepRow],
    seqs: list[int],
    cap: int | None,
    gpu: GpuSpec | None,
    layout: Layout,
    cap_name: str = "max_position_embeddings",
) -> list[Artist]:
    """The GPU's memory and the budget as horizontal lines, a 'does not fit' legend entry, and
    the contexts beyond the context limit `cap` (named `cap_name`) shaded; returns their legend entries."""
    from matplotlib.lines import Line2D

    ax_mem = axes[0]
    extra: list[Artist] = []
    if gpu is not None:
        extra.append(
            ax_mem.axhline(
                gpu.memory_bytes / 2**30,
                color="black",
                lw=1.2,
                label=_label(f"{gpu.key} memory {gpu.memory_bytes / 2**30:,.1f} GiB"),
            )
        )
        extra.append(
            ax_mem.axhline(
                rows[0]["budget_bytes_per_gpu"] / 2**30,
                color="black",
                ls="--",
                lw=1,
                label=f"budget ({layout.gpu_memory_utilization:g} x memory)",
            )
        )
        if any(not r["fits"] for r in rows):
            extra.append(Line2D([], [], color="grey", marker="o", mfc="white", ls="none", label="does not fit"))
    if cap and seqs[-1] > cap:
        for ax in axes:
            ax.axvspan(cap, seqs[-1] * 1.5, color="grey", alpha=0.15, lw=0)
            ax.set_xlim(seqs[0] / 1.5 if len(seqs) > 1 else cap / 2, seqs[-1] * 1.5)
        from matplotlib.patches import Patch

        extra.append(Patch(color="grey", alpha=0.3, label=f"beyond {cap_name} ({_fmt_tokens(cap)})"))
    return extra


def _value_axes(axes: list[Axes], rows: Sequence[SweepRow], gpu: GpuSpec | None, layout: Layout) -> None:
    """Labels, scales and titles of the memory panel (log when the sweep runs past 3 x the GPU)
    and the throughput panel (always log)."""
    ax_mem = axes[0]
    scope = memory_scope(gpu, layout)
    ax_mem.set_ylabel(f"memory{scope} (GiB = 2^30 B)")
    top = max(r["memory_bytes_per_gpu"] for r in rows)
    if gpu is not None and top > 3 * gpu.memory_bytes:
        ax_mem.set_yscale("log")  # keep the GPU line readable when the sweep runs far past it
        _log_axis(ax_mem.yaxis, short=False)
    else:
        ax_mem.set_ylim(bottom=0)
    ax_mem.set_title(f"Memory{scope}: weights + KV cache" + (" + reserves" if gpu is not None else ""))
    if len(axes) > 1:
        ax_tok = axes[1]
        ax_tok.set_yscale("log")
        _log_axis(ax_tok.yaxis)
        ax_tok.set_ylabel("decode throughput (output tokens/s, all sequences)")
        ax_tok.set_title(f"Roofline decode (bw eff {layout.bw_efficiency:g})")


def memory_scope(gpu: GpuSpec | None, layout: Layout) -> str:
    """What the memory panel's figures are per: " per GPU" with a GPU; without one, " per rank"
    when the layout splits the model (tp x pp > 1: each rank's share), else "" (the whole
    model, on no GPU in particular: issue 23 friction 9)."""
    if gpu is not None:
        return " per GPU"
    return " per rank" if layout.tp * layout.pp > 1 else ""


def _label(text: str, limit: int = 80) -> str:
    """Text from a user's file (a model name, a GPU key) as a plot shows it: control characters
    escaped, cut to `limit` characters, and `$` escaped (matplotlib would read mathtext)."""
    from kvcalc.text import cut, escape_controls

    return cut(escape_controls(text[: limit * 8], keep=""), limit).replace("$", r"\$")


def _title(spec: ModelSpec, gpu: GpuSpec | None, layout: Layout, kv: str) -> str:
    """`model on N x gpu (tp, pp, dp): weights W, KV cache K` (the layout only when not 1 x 1)."""
    from kvcalc.calc.weights import weight_format_label

    weights = weight_format_label(spec, layout.weight_dtype)
    if gpu is not None:
        n_gpu = layout.tp * layout.pp * layout.dp
        par = f" (tp {layout.tp}, pp {layout.pp}, dp {layout.dp})" if n_gpu > 1 else ""
        where = f" on {n_gpu} x {gpu.key}{par}"
    else:
        where = f" (tp {layout.tp}, pp {layout.pp})" if (layout.tp, layout.pp) != (1, 1) else ""
    return f"{spec.name}{where}: weights {weights}, KV cache {kv}"


@_third_party_warnings_as_one_line
def render_sweep(
    rows: Sequence[SweepRow], spec: ModelSpec, gpu: GpuSpec | None, layout: Layout, kv: str, fmt: str
) -> bytes:
    """Memory per GPU (GiB) and total tokens/s against context, one line per batch (distinct
    colour and style, markers in the legend as on the lines), with the GPU's memory and the
    engine's budget as horizontal lines; points that do not fit are hollow; contexts beyond the
    model's max_position_embeddings are shaded and named in the legend. The batch legend sits
    below the panels, so it never covers data. Returns the image as bytes in `fmt` (a
    `PLOT_EXTENSIONS` entry): the caller writes the file (atomically: `cli.output.write_atomic`).
    Raises `KvcalcError` (field `plot`) when matplotlib cannot draw that type (jpg, tif without
    Pillow)."""
    import io

    plt = pyplot()
    batches = sorted({r["batch"] for r in rows})
    seqs = sorted({r["seq_len"] for r in rows})
    panels = 2 if gpu is not None else 1
    fig, grid = plt.subplots(1, panels, figsize=(6.4 * panels, 5.2), squeeze=False, layout="constrained")
    axes = list(grid[0])
    handles = _plot_batches(axes, rows, batches, plt, fig)
    _context_axes(axes, seqs)
    extra = _reference_marks(
        axes,
        rows,
        seqs,
        spec.context_limit,
        gpu,
        layout,
        "max_position_embeddings" if spec.context_limit == spec.max_position_embeddings else "context limit",
    )
    _value_axes(axes, rows, gpu, layout)
    # one legend below the panels (batches, then the reference lines and marks): it never covers data
    if handles or extra:
        fig.legend(
            handles=handles + extra,
            loc="outside lower center",
            ncol=min(len(handles) + len(extra), 6),
            fontsize="small",
            frameon=False,
        )
    fig.suptitle(_label(_title(spec, gpu, layout, kv), 160))
    buf = io.BytesIO()
    try:
        fig.savefig(buf, format=fmt, dpi=150)
    except (OSError, ValueError, ImportError) as e:
        raise KvcalcError(
            f"cannot draw a .{fmt} file: {getattr(e, 'strerror', None) or e}", field="plot", form=OPTION
        ) from None
    finally:
        plt.close(fig)
    return buf.getvalue()
