"""Issue 12, item 12: a readable plot for any grid, and no third-party warning reaching the user
raw. 300 batch sizes used to give a legend of 300 entries that squeezed both panels to nothing,
and matplotlib's "constrained_layout not applied" warning with its source path."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

from kvcalc.errors import KvcalcWarning  # noqa: E402
from kvcalc.report import plot  # noqa: E402

REPO = Path(__file__).resolve().parents[2]


def test_a_300_batch_sweep_plots_with_a_colour_bar_and_no_raw_warning(tmp_path: Path) -> None:
    batches = ",".join(str(b) for b in range(1, 301))
    seqs = ",".join(str(t) for t in range(1000, 40001, 1000))  # 40 contexts
    env = {**os.environ, "PYTHONPATH": str(REPO), "COLUMNS": "80"}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "kvcalc",
            "sweep",
            "llama-3.1-8b",
            "--gpu",
            "h100-sxm",
            "--batch",
            batches,
            "-s",
            seqs,
            "--plot",
            str(tmp_path / "grid.png"),
            "-f",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "grid.png").stat().st_size > 0
    # every stderr line is kvcalc's own: no "UserWarning", no source path, no indented source line
    for line in proc.stderr.splitlines():
        assert line.startswith(("warning: ", "wrote ", "plot: ")) or not line.strip(), line
    assert "UserWarning" not in proc.stderr and ".py:" not in proc.stderr


def test_past_ten_batches_the_legend_gets_none_and_a_colour_bar_names_them() -> None:
    plt = plot.pyplot()
    fig, grid = plt.subplots(1, 2, squeeze=False, layout="constrained")
    axes = list(grid[0])
    rows = [
        {"batch": b, "seq_len": t, "memory_bytes_per_gpu": b * t * 2**17, "tokens_per_s": 1e4 / b, "fits": b < 50}
        for b in range(1, 301)
        for t in (1024, 8192)
    ]
    try:
        handles = plot._plot_batches(axes, rows, list(range(1, 301)), plt, fig)
        assert handles == []
        assert len(fig.axes) == 3  # the two panels and the colour bar
        assert fig.axes[2].get_ylabel() == "batch (sequences): 300 sizes, 1 to 300"
        # ten batches still get one legend entry each
        fig2, grid2 = plt.subplots(1, 1, squeeze=False)
        ten = plot._plot_batches(list(grid2[0]), [r for r in rows if r["batch"] <= 10], list(range(1, 11)), plt, fig2)
        assert [h.get_label() for h in ten] == [f"batch {b}" for b in range(1, 11)]
        plt.close(fig2)
    finally:
        plt.close(fig)


def test_context_ticks_stay_few_and_spread_on_the_log_axis() -> None:
    seqs = list(range(1000, 40001, 1000))
    ticks = plot._context_ticks(seqs)
    assert ticks[0] == 1000 and ticks[-1] == 40000 and len(ticks) <= plot.MAX_CONTEXT_TICKS
    # each tick at least (40,000 / 1,000)^(1/11) = 1.398 x the one before, the last included
    ratio = 40 ** (1 / 11)
    assert all(b >= a * ratio for a, b in zip(ticks[:-2], ticks[1:-1], strict=True))
    assert plot._context_ticks([1024, 8192]) == [1024, 8192]


def test_a_third_party_warning_becomes_one_kvcalc_line() -> None:
    @plot._third_party_warnings_as_one_line
    def noisy() -> int:
        warnings.warn("constrained_layout not applied because axes sizes collapsed to zero.", UserWarning, stacklevel=2)
        warnings.warn("constrained_layout not applied because axes sizes collapsed to zero.", UserWarning, stacklevel=2)
        warnings.warn("Glyph 8722 missing from font(s)", RuntimeWarning, stacklevel=2)
        warnings.warn("ours", KvcalcWarning, stacklevel=2)
        return 7

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert noisy() == 7
    assert [(w.category, str(w.message)) for w in caught] == [
        (KvcalcWarning, "ours"),
        (
            KvcalcWarning,
            "the plot may be hard to read: the plotting library said: constrained_layout not applied "
            "because axes sizes collapsed to zero. (and 1 more)",
        ),
    ]


@pytest.mark.parametrize(
    "with_gpu,tp,title,ylabel",
    [
        (False, 1, "Memory: weights + KV cache", "memory (GiB = 2^30 B)"),
        (False, 2, "Memory per rank: weights + KV cache", "memory per rank (GiB = 2^30 B)"),
        (True, 1, "Memory per GPU: weights + KV cache + reserves", "memory per GPU (GiB = 2^30 B)"),
    ],
)
def test_the_memory_panel_says_per_gpu_only_with_a_gpu(with_gpu: bool, tp: int, title: str, ylabel: str) -> None:
    # issue 23 friction 9: `sweep --plot` without --gpu titled its panel "Memory per GPU"
    from kvcalc.calc.memory_plan import Layout
    from kvcalc.load.gpus import get_gpu

    plt = plot.pyplot()
    fig, grid = plt.subplots(1, 2 if with_gpu else 1, squeeze=False)
    rows = [{"batch": 1, "seq_len": 1024, "memory_bytes_per_gpu": 2**30, "tokens_per_s": 1e3, "fits": True}]
    try:
        plot._value_axes(list(grid[0]), rows, get_gpu("h100-sxm") if with_gpu else None, Layout(tp=tp))
        assert (grid[0][0].get_title(), grid[0][0].get_ylabel()) == (title, ylabel)
    finally:
        plt.close(fig)
