"""Issue 11, item 1: no number is ever cut, split or ellipsized, at any width from 60 columns up.

Every table-printing command runs at 60, 80 and 120 columns (the width pinned through `COLUMNS`,
which rich's `Console().width` reads; the CLI runner's output is a pipe, as in CI). For each run:

- no line of the text is wider than the width (the engine's own log lines, printed verbatim
  after "ENGINE would log:" so they diff against the engine's log, and the launch line `kvcalc
  plan` prints after "launch #1 (ENGINE):", which must copy as one line, are exempt);
- no cell is ellipsized (no "…");
- every figure the command's `--format json` output holds appears whole on one line of the
  text, formatted as the table formats it (`f"{v:,}"` for counts and bytes, the GiB / GB / TB/s
  / TFLOP/s figure where the table shows one). "Whole" means not preceded or followed by
  another digit or a thousands comma, so `1,024,00` never passes for `1,024,000`. A JSON field
  the table does not show is listed, with why, in the command's `skip`.
"""

from __future__ import annotations

import io
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
WIDTHS = (60, 80, 120)


def comma(v: Any) -> str:
    return f"{v:,}"


@dataclass
class Command:
    """One command line, how the table shows each JSON key (default: `f"{v:,}"`), and the keys
    the table does not show."""

    id: str
    argv: list[str]
    show: dict[str, Callable[[Any], str | list[str]]] = field(default_factory=dict)
    skip: frozenset[str] = frozenset()
    exit_code: int = 0
    needs_torch: bool = False


def gib1(v: int) -> str:
    return f"{v / 2**30:,.1f}"


def gib2(v: int) -> str:
    return f"{v / 2**30:,.2f}"


ESTIMATE_SKIP = frozenset(
    {
        "queries_per_kv_head",  # shown as "(group 8)": a small int, present anyway, listed for clarity
    }
)
SERVING_SHOW: dict[str, Callable[[Any], str | list[str]]] = {
    "gpu_memory_bytes": lambda v: f"{v / 2**30:,.2f}",  # "= 0.9 x 79.65 GiB"
}
SERVING_SKIP = frozenset(
    {
        "n_gpus_used",  # the layout line shows tp x pp x dp
        "gpu_count",  # in the title "On 2 x ..."
    }
)

PLAN_GPUS = "h100-sxm,h200,b200,mi300x,a100-80gb-sxm,l40s"  # pinned, as in tests/calc/test_plan.py
PLAN_SHOW: dict[str, Callable[[Any], str | list[str]]] = {
    "memory_bytes_per_gpu": gib1,
    "budget_bytes_per_gpu": gib1,  # "97.9/ 161.2"
    "count": lambda v: f"{v}x",  # "4x b200 tp4"
    "tp": lambda v: f"tp{v}",
    "pp": lambda v: [f"pp{v}"] if v > 1 else [],  # pp1 and dp1 are not written
    "dp": lambda v: [f"dp{v}"] if v > 1 else [],
    "nodes": lambda v: [str(v)] if v > 1 else [],  # ", 2 nodes" (may wrap before "nodes")
    "tpot_ms": lambda v: f"{v:,.1f}",
    "tokens_per_s": lambda v: f"{v:,.0f}",
    "ttft_s": lambda v: f"{v:,.2f}",
    "dollars_per_hour": lambda v: f"{v:,.2f}",
    "dollars_per_million_tokens": lambda v: f"{v:,.2f}",
    "max_tpot_ms": lambda v: f"{v:g}",  # the title: "TPOT ≤ 50 ms"
}
PLAN_SKIP = frozenset(
    {
        "weights_bytes_per_gpu",
        "kv_cache_bytes_per_gpu",
        "headroom_bytes",  # JSON detail: the table shows used/budget
        "price_per_gpu_hour",  # the table shows the layout's $/hour
        "max_gpus",  # printed only when nothing fits ("within 32 GPUs")
    }
)
PLAN = [
    "plan",
    "llama-3.1-70b",
    "-s",
    "32k",
    "--concurrency",
    "64",
    "--max-tpot-ms",
    "50",
    "--gpu",
    PLAN_GPUS,
    "--top",
    "5",
]

COMMANDS = [
    Command("estimate", ["estimate", "llama-3.1-70b", "--seq-len", "8192", "--kv-dtype", "fp16"], skip=ESTIMATE_SKIP),
    Command("estimate-window", ["estimate", "gemma-3-27b", "--seq-len", "128k"], skip=ESTIMATE_SKIP),
    Command("estimate-tp", ["estimate", "deepseek-v3", "--seq-len", "32k", "--tp", "8"], skip=ESTIMATE_SKIP),
    Command(
        "estimate-gpu",
        [
            "estimate",
            "llama-3.1-70b",
            "-s",
            "32k",
            "--batch",
            "12",
            "--kv-dtype",
            "fp8",
            "--gpu",
            "h100-sxm",
            "--count",
            "2",
            "--weight-dtype",
            "fp8",
        ],
        show=SERVING_SHOW,
        skip=ESTIMATE_SKIP | SERVING_SKIP,
    ),
    Command(
        "estimate-gpu-engine",
        [
            "estimate",
            "llama-3.1-70b",
            "-s",
            "32k",
            "--batch",
            "12",
            "--kv-dtype",
            "fp8",
            "--gpu",
            "h100-sxm",
            "--count",
            "2",
            "--weight-dtype",
            "fp8",
            "--engine",
            "vllm",
        ],
        show=SERVING_SHOW,
        skip=ESTIMATE_SKIP | SERVING_SKIP,
    ),
    Command(
        "estimate-engine",
        ["estimate", "llama-3.1-8b", "-s", "32k", "--batch", "4", "--engine", "llamacpp"],
        skip=ESTIMATE_SKIP,
    ),
    Command(
        "compare",
        ["compare", "llama-3.1-70b"],
        show={"kv_cache_bytes": lambda v: [f"{v:,} B", f"({v / 2**30:,.2f} GiB)"]},
    ),
    Command(
        "models", ["models"], show={"n_heads": str, "n_kv_heads": str}, skip=frozenset({"n_layers"})
    ),  # shown per kind in the layers column: "21 sliding + 21 full"
    Command(
        "gpus",
        ["gpus"],
        show={
            "memory_bytes": lambda v: [gib1(v), f"{v / 1e9:,.1f}"],
            "hbm_bytes_per_s": lambda v: f"{v / 1e12:,.2f}",
            "bf16_flops_per_s": lambda v: f"{v / 1e12:,.0f}",
            "fp8_flops_per_s": lambda v: f"{v / 1e12:,.0f}",
            "fp4_flops_per_s": lambda v: f"{v / 1e12:,.0f}",
            "interconnect_bytes_per_s": lambda v: f"{v / 1e9:,.0f}",
        },
        skip=frozenset({"l2_bytes"}),
    ),  # the L2 size is a field of the row, not a column
    Command(
        "sweep",
        ["sweep", "llama-3.1-70b", "--seq-len", "1k,8k,32k,128k", "--batch", "1,8,32"],
        show={k: gib2 for k in ("weights_bytes_per_gpu", "kv_cache_bytes_per_gpu", "memory_bytes_per_gpu")},
        skip=frozenset(
            {
                "state_bytes_per_gpu",  # 0 for a model without SSM layers
                "max_batch",
            }
        ),
    ),  # a --gpu column; without --gpu it is null anyway
    Command(
        "sweep-gpu",
        ["sweep", "llama-3.1-70b", "--gpu", "h200", "--count", "2", "--seq-len", "1k,8k,32k,128k", "--batch", "1,8,32"],
        show={
            **{
                k: gib2
                for k in (
                    "weights_bytes_per_gpu",
                    "kv_cache_bytes_per_gpu",
                    "memory_bytes_per_gpu",
                    "budget_bytes_per_gpu",
                )
            },
            "tpot_s": lambda v: f"{v * 1e3:,.2f}",
            "tokens_per_s": lambda v: f"{v:,.0f}",
        },
        skip=frozenset({"state_bytes_per_gpu", "max_batch"}),
    ),  # not columns of the grid
    Command(
        "check",
        ["check", "configs/deployments/"],
        show={
            "memory_bytes_per_gpu": gib1,
            "budget_bytes_per_gpu": gib1,
            "tpot_ms": lambda v: f"{v:,.1f}",
            "tokens_per_s": lambda v: f"{v:,.0f}",
            "max_tpot_ms": lambda v: f"(≤{v:g})",
            "min_tokens_per_s": lambda v: f"(≥{v:g})",
        },
        skip=frozenset(
            {
                "weights_bytes_per_gpu",
                "kv_cache_bytes_per_gpu",  # JSON detail; the table
                "exit_code",
                "pp",
                "dp",  # shows used / budget
                "n_params",
                "headroom_bytes",
            }
        ),
    ),
    Command(
        "check-failing",
        ["check", "tests/data/deployments/misses-target.yaml", "tests/data/deployments/does-not-fit.yaml"],
        show={
            "memory_bytes_per_gpu": gib1,
            "budget_bytes_per_gpu": gib1,
            "tpot_ms": lambda v: f"{v:,.1f}",
            "tokens_per_s": lambda v: f"{v:,.0f}",
            "max_tpot_ms": lambda v: f"(≤{v:g})",
            "min_tokens_per_s": lambda v: f"(≥{v:g})",
        },
        skip=frozenset(
            {"weights_bytes_per_gpu", "kv_cache_bytes_per_gpu", "exit_code", "pp", "dp", "n_params", "headroom_bytes"}
        ),
        exit_code=1,
    ),
    Command(
        "capacity-vllm",
        [
            "capacity",
            "tests/data/engine-configs/qwen3-14b.yaml",
            "--engine",
            "vllm",
            "--kv-memory",
            "6.51GiB",
            "--max-model-len",
            "32768",
        ],
    ),
    Command("capacity-sglang", ["capacity", "qwen3-4b", "--engine", "sglang", "--kv-memory", "10GiB"]),
    Command(
        "capacity-llamacpp",
        [
            "capacity",
            "tests/data/engine-configs/qwen2.5-coder-32b.yaml",
            "--engine",
            "llamacpp",
            "--ctx-size",
            "32768",
            "--kv-dtype",
            "q8_0",
            "--tensor-split",
            "10,6",
        ],
    ),
    Command("plan", PLAN, show=PLAN_SHOW, skip=PLAN_SKIP),
    Command("plan-prices", [*PLAN, "--prices", "docs/example-prices.yaml"], show=PLAN_SHOW, skip=PLAN_SKIP),
    Command(
        "plan-nodes",
        [
            "plan",
            "deepseek-v3",
            "-s",
            "32k",
            "--concurrency",
            "16",
            "--max-tpot-ms",
            "100",
            "--gpu",
            "h100-sxm",
            "--engine",
            "sglang",
            "--top",
            "3",
        ],
        show=PLAN_SHOW,
        skip=PLAN_SKIP,
    ),
    Command(
        "measure",
        ["measure", "tests/data/tiny-gqa.yaml", "--device", "cpu", "--seq-len", "64", "--steps", "3"],
        show={"probe_bytes": gib2},  # "(sum over 0.25 GiB)"
        skip=frozenset(
            {
                "rss_delta_bytes",  # measured: differs between the text and the JSON run
                "layer_indices",
            }
        ),  # which layers ran: the table says "2 of 2 measured"
        needs_torch=True,
    ),
]


def figures(obj: Any, cmd: Command, key: str = "") -> list[tuple[str, list[str]]]:
    """(key, the forms the table may show it in) for every number of a JSON document; ints as
    `f"{v:,}"` (or the plain digits, as the formula prints them) unless `cmd.show` says how."""
    out: list[tuple[str, list[str]]] = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += figures(v, cmd, k)
    elif isinstance(obj, list):
        for v in obj:
            out += figures(v, cmd, key)
    elif isinstance(obj, bool) or obj is None or key in cmd.skip or obj == 0:
        pass  # the tables leave out a row whose figure is zero (no SSM state, no weights read)
    elif key in cmd.show:
        shown = cmd.show[key](obj)
        for s in [shown] if isinstance(shown, str) else shown:
            out.append((key, [s]))
    elif isinstance(obj, int):
        out.append((key, [comma(obj), str(obj)]))
    return out


def whole_on_a_line(text: str, figure: str) -> bool:
    """`figure` on one line, with no digit or thousands comma glued to either end."""
    pat = re.compile(r"(?<![\d,])" + re.escape(figure) + r"(?![\d]|,\d)")
    return any(pat.search(line) for line in text.splitlines())


def table_lines(stdout: str) -> list[str]:
    """The lines a table printed: all but the engine log lines after "... would log:" and the
    launch line after `kvcalc plan`'s "launch #1 (ENGINE):"."""
    out, in_log, launch = [], False, False
    for line in stdout.splitlines():
        if launch:
            launch = False
            continue
        if line.endswith(" would log:"):
            in_log = True
            continue
        if re.fullmatch(r"launch #\d+ \(\w+\):", line):
            launch = True
            continue
        if in_log and line.startswith(("Available KV", "GPU KV", "Maximum concurrency", "KV Cache is", "llama_kv")):
            continue
        in_log = False
        out.append(line)
    return out


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("cmd", COMMANDS, ids=lambda c: c.id)
def test_no_number_cut(cmd: Command, width: int, cli, monkeypatch) -> None:
    from rich.cells import cell_len

    if cmd.needs_torch:
        pytest.importorskip("torch", reason="kvcalc measure needs torch")
    monkeypatch.chdir(ROOT)
    j = cli(*cmd.argv, "--format", "json")
    assert j.exit_code == cmd.exit_code, j.output
    doc = json.loads(j.stdout)
    t = cli(*cmd.argv, env={"COLUMNS": str(width)})
    assert t.exit_code == cmd.exit_code, t.output
    lines = table_lines(t.stdout)
    too_wide = [ln for ln in lines if cell_len(ln.rstrip()) > width]
    assert not too_wide, f"{len(too_wide)} lines wider than {width}: {too_wide[:2]}"
    assert "…" not in t.stdout
    text = "\n".join(lines)
    figs = figures(doc, cmd)
    assert figs, "the JSON holds figures"
    missing = [(k, forms) for k, forms in figs if not any(whole_on_a_line(text, f) for f in forms)]
    assert not missing, f"at {width} columns, not whole on one line: {missing[:5]}\n{t.stdout}"


def test_a_cut_number_is_caught() -> None:
    # the check itself: a figure split over two lines, or only a prefix of it, does not pass
    assert whole_on_a_line("│ 1,024,000 │", "1,024,000")
    assert not whole_on_a_line("│ 1,024,00 │\n│ 0        │", "1,024,000")
    assert not whole_on_a_line("│ 1,024,000 │", "1,024")  # a prefix of a longer figure
    assert not whole_on_a_line("│ 32,76 │\n│ 8 x │", "32,768")


# ----- the layouts, pinned at a given width --------------------------------------------------


def render(renderable: Any, width: int) -> list[str]:
    from rich.console import Console

    con = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    con.print(renderable)
    return [ln.rstrip() for ln in con.export_text().splitlines()]


def test_grid_keeps_its_natural_look_when_it_fits() -> None:
    from kvcalc.report.widths import Col, grid

    lines = render(grid([Col("name", kind="id", justify="left"), Col("tokens")], [["a", "1,024,000"]], width=60), 60)
    assert lines == [
        "┏━━━━━━┳━━━━━━━━━━━┓",
        "┃ name ┃    tokens ┃",
        "┡━━━━━━╇━━━━━━━━━━━┩",
        "│ a    │ 1,024,000 │",
        "└──────┴───────────┘",
    ]


def test_grid_narrows_abbreviates_then_splits() -> None:
    from kvcalc.report.widths import Col, grid

    cols = [Col("key", kind="id", justify="left"), Col("first figure", short="f1"), Col("second figure", short="f2")]
    rows = [["k", "123,456,789", "987,654,321"]]
    # natural: 3 + 12 + 13 content + 3 x 3 + 1 rules and padding = 38 columns
    assert render(grid(cols, rows, width=38), 38)[1] == "┃ key ┃ first figure ┃ second figure ┃"
    # at 36 the narrowest layout (3 + 11 + 11 + 10 = 35) gets the one spare column: the second
    # header wraps between its words; the figures stay whole
    assert render(grid(cols, rows, width=36), 36) == [
        "┏━━━━━┳━━━━━━━━━━━━━━┳━━━━━━━━━━━━━┓",
        "┃     ┃              ┃      second ┃",
        "┃ key ┃ first figure ┃      figure ┃",
        "┡━━━━━╇━━━━━━━━━━━━━━╇━━━━━━━━━━━━━┩",
        "│ k   │  123,456,789 │ 987,654,321 │",
        "└─────┴──────────────┴─────────────┘",
    ]
    # at 30 even the abbreviated headers need 35: two tables, each led by the key column
    assert render(grid(cols, rows, width=30), 30) == [
        "┏━━━━━┳━━━━━━━━━━━━━━┓",
        "┃ key ┃ first figure ┃",
        "┡━━━━━╇━━━━━━━━━━━━━━┩",
        "│ k   │  123,456,789 │",
        "└─────┴──────────────┘",
        "┏━━━━━┳━━━━━━━━━━━━━━━┓",
        "┃ key ┃ second figure ┃",
        "┡━━━━━╇━━━━━━━━━━━━━━━┩",
        "│ k   │   987,654,321 │",
        "└─────┴───────────────┘",
    ]


def test_grid_short_headers_and_legend_columns() -> None:
    from kvcalc.report.widths import Col, grid

    cols = [
        Col("key", kind="id", justify="left"),
        Col("memory GiB", short="GiB"),
        Col("name", kind="text", justify="left", legend=True),
    ]
    rows = [["h200", "140.4", "NVIDIA H200 SXM 141GB"]]
    # full headers: 4 + 6 ("memory") + 6 ("NVIDIA") + 10 = 26 > 24; short: 4 + 5 + 6 + 10 = 25 > 24;
    # the name column moved below the table: 4 + 5 + 7 = 16 <= 24, its lines wrapped at 24
    assert render(grid(cols, rows, width=24), 24) == [
        "┏━━━━━━┳━━━━━━━┓",
        "┃ key  ┃   GiB ┃",
        "┡━━━━━━╇━━━━━━━┩",
        "│ h200 │ 140.4 │",
        "└──────┴───────┘",
        "GiB: memory GiB",
        "h200: NVIDIA H200 SXM",
        "141GB",
    ]


def test_two_part_cells_join_when_the_column_allows() -> None:
    from kvcalc.report.widths import Col, grid

    cols = [Col("k", kind="id"), Col("tokens x seqs")]
    rows = [["a", ("32,768 x", "16")]]
    assert render(grid(cols, rows, width=60), 60)[3] == "│ a │   32,768 x 16 │"
    # 1 + 8 ("32,768 x") + 7 = 16: the parts go on two lines, each whole
    assert render(grid(cols, rows, width=16), 16)[4:6] == ["│ a │ 32,768 x │", "│   │       16 │"]


def test_pairs_table_keeps_each_figure_whole() -> None:
    from kvcalc.report.widths import pairs_table

    rows = [("a rather long label here", "2,684,354,560 B (2.68 GB, 2.50 GiB) and 171,798,691,840 B", None)]
    for width in (30, 40, 60):
        text = "\n".join(render(pairs_table("t", rows, width=width), width))
        assert whole_on_a_line(text, "2,684,354,560") and whole_on_a_line(text, "171,798,691,840")
        assert max(len(ln) for ln in text.splitlines()) <= width


def test_check_at_80_columns_splits_into_two_tables(cli, monkeypatch) -> None:
    # configs/deployments/ at 80 columns: deployment 24 + GPUs 8 + "32,768 x" 8 + "114.4 /" 7 +
    # "seqs" 4 + "(target)" 8 + "(target)" 8 + "status" 6 = 73, + 3 x 8 + 1 = 98 > 80: two tables,
    # each led by the deployment name
    monkeypatch.chdir(ROOT)
    r = cli("check", "configs/deployments/", env={"COLUMNS": "80"})
    assert r.exit_code == 0
    heads = [ln for ln in r.stdout.splitlines() if ln.startswith("┃") and "deployment" in ln]
    assert len(heads) == 2
    assert "│ llama-3.1-70b-fp8-2xh100 │" in r.stdout


def test_check_gpus_cell_is_plans_label(cli, tmp_path) -> None:
    # a dp-attention layout: count 8 = tp 2 x dp_attention 4; was "8x h200 tp2" (plan shows the
    # same layout as "8x h200 tp2 dp-attn4 ep8", `report.tables.gpus_label`)
    from kvcalc.report.tables import gpus_label

    f = tmp_path / "ds3.yaml"
    f.write_text(
        "name: ds3\nmodel: deepseek-v3\ngpu: h200\ncount: 8\ntp: 2\ndp_attention: 4\nep: 8\n"
        "max_seq_len: 8192\nconcurrency: 8\n"
    )
    r = cli("check", str(f), env={"COLUMNS": "160"})
    assert r.exit_code == 0, r.output
    assert "│ 8x h200 tp2 dp-attn4 ep8 │" in r.stdout
    assert gpus_label(8, "h200", 2, 1, 1, 4, 8) == "8x h200 tp2 dp-attn4 ep8"
    assert gpus_label(16, "h200", 8, 2, 1, nodes=2) == "16x h200 tp8 pp2, 2 nodes"
