"""`kvcalc sweep --plot`: memory per GPU and decode throughput against context, written with
matplotlib (Agg). matplotlib is imported inside `pyplot()` only, so importing this module costs
nothing; `plot_path` checks the file name before any work, without matplotlib."""

from __future__ import annotations

from typing import Any

from kvcalc.errors import KvcalcError, MissingExtraError

#: file types `--plot` writes (matplotlib's Agg, SVG, PDF and PS backends; jpg / tif through Pillow)
PLOT_EXTENSIONS = ("png", "svg", "pdf", "eps", "ps", "jpg", "jpeg", "tif", "tiff")


def plot_path(path: str) -> str:
    """The file `--plot` will write: `path` itself when its extension is one of
    `PLOT_EXTENSIONS`, `path` + `.png` when it has none (matplotlib would add .png anyway, and
    we print the real name). Raises `KvcalcError` for any other extension."""
    from pathlib import Path

    p = Path(path)
    ext = p.suffix.lower().lstrip(".")
    if not p.name or path.endswith(("/", "\\")):
        raise KvcalcError(f"--plot: '{path}' is a folder; give a file name such as sweep.png")
    if not ext:
        return path + ".png"
    if ext not in PLOT_EXTENSIONS:
        raise KvcalcError(f"--plot: cannot write a .{ext} file; use one of "
                          f"{', '.join('.' + e for e in PLOT_EXTENSIONS)}")
    return path



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


def _styles(n: int, plt: Any) -> list[tuple[Any, str]]:
    """(colour, line style) for n lines, all distinct: the default 10-colour cycle up to 10,
    tab20 up to 20, then viridis, with line styles cycling past 10 so neighbours differ twice."""
    if n <= 10:
        return [(c, "-") for c in plt.rcParams["axes.prop_cycle"].by_key()["color"][:n]]
    cmap = plt.get_cmap("tab20") if n <= 20 else plt.get_cmap("viridis")
    cols = [cmap(i) for i in range(n)] if n <= 20 else [cmap(i / (n - 1)) for i in range(n)]
    ls = ["-", "--", ":", "-."]
    return [(c, ls[i % len(ls)]) for i, c in enumerate(cols)]


def _log_axis(axis: Any, short: bool = True) -> None:
    """Major ticks at 1, 2, 5 x 10^k labelled in plain figures; no minor labels."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda v, _: _fmt_number(v, short)))
    axis.set_minor_formatter(NullFormatter())


def plot_sweep(rows: list[dict[str, Any]], spec: Any, gpu: Any | None, layout: Any, kv: str, path: str) -> None:
    """Memory per GPU (GiB) and total tokens/s against context, one line per batch (distinct
    colour and style, markers in the legend as on the lines), with the GPU's memory and the
    engine's budget as horizontal lines; points that do not fit are hollow; contexts beyond the
    model's max_position_embeddings are shaded and named in the legend. The batch legend sits
    below the panels, so it never covers data."""
    plt = pyplot()
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    from kvcalc.calc.weights import weight_format_label

    batches = sorted({r["batch"] for r in rows})
    seqs = sorted({r["seq_len"] for r in rows})
    cap = spec.max_position_embeddings
    panels = 2 if gpu is not None else 1
    fig, axes = plt.subplots(1, panels, figsize=(6.4 * panels, 5.2), squeeze=False, layout="constrained")
    ax_mem = axes[0][0]
    ax_tok = axes[0][1] if gpu is not None else None
    styles = _styles(len(batches), plt)
    handles = []
    for (c, ls), b in zip(styles, batches):
        rs = sorted((r for r in rows if r["batch"] == b), key=lambda r: r["seq_len"])
        x = [r["seq_len"] for r in rs]
        panels_y = [(ax_mem, [r["memory_bytes_per_gpu"] / 2**30 for r in rs])]
        if ax_tok is not None:
            panels_y.append((ax_tok, [r["tokens_per_s"] for r in rs]))
        for ax, y in panels_y:
            ax.plot(x, y, ls=ls, color=c, lw=1.5)
            fit = [i for i, r in enumerate(rs) if r.get("fits", True)]
            miss = [i for i, r in enumerate(rs) if not r.get("fits", True)]
            ax.plot([x[i] for i in fit], [y[i] for i in fit], "o", color=c, ms=5)
            ax.plot([x[i] for i in miss], [y[i] for i in miss], "o", mfc="white", color=c, ms=5)
        handles.append(Line2D([], [], color=c, ls=ls, marker="o", ms=5, label=f"batch {b}"))
    for ax in axes[0]:
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_locator(FixedLocator(seqs))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: _fmt_tokens(v)))
        if len(seqs) > 6:
            ax.tick_params(axis="x", labelrotation=45)
        ax.set_xlabel("context length (tokens per sequence)")
        ax.grid(True, which="major", alpha=0.3)
    extra: list[Any] = []  # legend entries for the reference lines and marks
    if gpu is not None:
        extra.append(ax_mem.axhline(gpu.memory_bytes / 2**30, color="black", lw=1.2,
                                    label=f"{gpu.key} memory {gpu.memory_bytes / 2**30:,.1f} GiB"))
        extra.append(ax_mem.axhline(rows[0]["budget_bytes_per_gpu"] / 2**30, color="black", ls="--", lw=1,
                                    label=f"budget ({layout.gpu_memory_utilization:g} x memory)"))
        if any(not r["fits"] for r in rows):
            extra.append(Line2D([], [], color="grey", marker="o", mfc="white", ls="none", label="does not fit"))
    if cap and seqs[-1] > cap:
        for ax in axes[0]:
            ax.axvspan(cap, seqs[-1] * 1.5, color="grey", alpha=0.15, lw=0)
            ax.set_xlim(seqs[0] / 1.5 if len(seqs) > 1 else cap / 2, seqs[-1] * 1.5)
        from matplotlib.patches import Patch

        extra.append(Patch(color="grey", alpha=0.3, label=f"beyond max_position_embeddings ({_fmt_tokens(cap)})"))
    ax_mem.set_ylabel("memory per GPU (GiB = 2^30 B)")
    top = max(r["memory_bytes_per_gpu"] for r in rows)
    if gpu is not None and top > 3 * gpu.memory_bytes:
        ax_mem.set_yscale("log")  # keep the GPU line readable when the sweep runs far past it
        _log_axis(ax_mem.yaxis, short=False)
    else:
        ax_mem.set_ylim(bottom=0)
    ax_mem.set_title("Memory per GPU: weights + KV cache" + (" + reserves" if gpu is not None else ""))
    if ax_tok is not None:
        ax_tok.set_yscale("log")
        _log_axis(ax_tok.yaxis)
        ax_tok.set_ylabel("decode throughput (output tokens/s, all sequences)")
        ax_tok.set_title(f"Roofline decode (bw eff {layout.bw_efficiency:g})")
    # one legend below the panels (batches, then the reference lines and marks): it never covers data
    fig.legend(handles=handles + extra, loc="outside lower center", ncol=min(len(handles) + len(extra), 6),
               fontsize="small", frameon=False)
    weights = weight_format_label(spec, layout.weight_dtype)
    if gpu is not None:
        n_gpu = layout.tp * layout.pp * layout.dp
        par = f" (tp {layout.tp}, pp {layout.pp}, dp {layout.dp})" if n_gpu > 1 else ""
        where = f" on {n_gpu} x {gpu.key}{par}"
    else:
        where = f" (tp {layout.tp}, pp {layout.pp})" if (layout.tp, layout.pp) != (1, 1) else ""
    fig.suptitle(f"{spec.name}{where}: weights {weights}, KV cache {kv}")
    try:
        fig.savefig(path, dpi=150)
    except (OSError, ValueError) as e:
        raise KvcalcError(f"--plot: cannot write {path}: {getattr(e, 'strerror', None) or e}") from None
    finally:
        plt.close(fig)

