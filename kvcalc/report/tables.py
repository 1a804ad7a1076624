"""Every rich table kvcalc prints. Formats results and computes nothing; sizes are labelled
(GB = 10^9 B, GiB = 2^30 B, MiB = 2^20 B) through `kvcalc.report`'s helpers.

Widths (issue 11): no number is ever cut, split or ellipsized, at any width from 60 columns up.
Every table is laid out for a width (`console_width()` unless the caller passes one):

- key/value tables (`pairs_table`): the label column keeps its natural width while the value
  column still holds its longest figure; values wrap between words, never inside a figure.
- grid tables (`grid`): a numeric cell never wraps (a cell given as a tuple of parts may put each
  part on its own line, each part whole). When the table does not fit it changes shape, in this
  order: narrower text columns (wrapped between words), abbreviated headers with a legend,
  `legend` columns moved below the table as "KEY: value" lines, the columns split over several
  tables (each repeating the key columns), and last one key/value block per row.

Text from a user's file is shown safe (issue 12): every cell, title and caption passes through
`safe_text` on its way into `grid`, `pairs_table` and `WideOrRecords` (terminal control
characters written visibly, `\\x1b`; text past `TEXT_CELL_CHARS` cut with an ellipsis).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, TypedDict

from pydantic import BaseModel

from kvcalc.report import figure, gib, mib, seconds, size
from kvcalc.report.widths import Cell, Col, WideOrRecords, grid, pairs_table, safe_text

if TYPE_CHECKING:
    from rich.console import Group, RenderableType
    from rich.table import Table

    from kvcalc.calc.speed import Calibration
    from kvcalc.calc.sweep import SweepRow
    from kvcalc.measure.result import MeasureResult
    from kvcalc.results import (
        CheckRow,
        EngineResult,
        FitHint,
        KvEstimate,
        PlanLayout,
        PlanResult,
        RequestEstimate,
        ServingEstimate,
    )
    from kvcalc.schema_deploy import GpuSpec


class ModelRow(TypedDict):
    """One row of `kvcalc models` (its JSON output holds the same keys)."""

    name: str
    attention: str
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    layers: str
    max_position_embeddings: int | None
    source: str | None


def _per_rank(batch: int, dp_attention: int) -> str:
    """` (B / d per attention-DP rank x d)` where `d` ranks share a replica's `batch` evenly
    (vLLM's --max-num-seqs is per rank: `requests.replica_batch`), ` (over d attention-DP
    ranks)` where they do not; empty without attention DP."""
    if dp_attention == 1:
        return ""
    if batch % dp_attention:
        return f" (over {dp_attention} attention-DP ranks)"
    return f" ({batch // dp_attention:,} per attention-DP rank x {dp_attention})"


def kv_table(est: KvEstimate, title: str | None = None, *, width: int | None = None) -> Table:
    """The rich table for a `KvEstimate`: inputs, the formula with numbers, bytes per token,
    the totals in B, GB and GiB, per GPU under TP/PP, and the breakdown by layer kind."""
    heads = (
        f"{est.n_heads} query heads, {est.n_kv_heads} KV heads (group {est.queries_per_kv_head})"
        if est.attention != "mla"
        else f"{est.n_heads} query heads, one latent of {est.head_dim}"
    )
    rows: list[tuple[str, Cell, str | None]] = [("model", est.model, None)]
    if est.source:
        rows.append(("source", est.source, "dim"))
    rows.append(("attention", f"{est.attention}: {heads}", None))
    dims = f"head_dim {est.head_dim}" + (
        f", v_head_dim {est.v_head_dim}" if est.v_head_dim not in (0, est.head_dim) else ""
    )
    rows.append(("layers", f"{est.n_layers}, {dims}", None))
    rows.append(
        (
            "workload",
            f"seq_len {est.seq_len:,} tokens x batch {est.batch}{_per_rank(est.batch, est.dp_attention)}, KV dtype {est.kv_dtype}",
            None,
        )
    )
    if est.n_gpus > 1:
        moe = f" x dp-attention {est.dp_attention}" if est.dp_attention > 1 else ""
        extra = (f" (ep {est.ep})" if est.ep > 1 else "") + (f" (dcp {est.dcp})" if est.dcp > 1 else "")
        rows.append(("parallel", f"tp {est.tp} x pp {est.pp}{moe} x dp {est.dp} = {est.n_gpus} GPUs{extra}", None))
    rows.append(("formula", est.formula, None))
    rows.append(("bytes per token", f"{est.kv_bytes_per_token:,} B (one more token, one sequence, all layers)", None))
    rows.append(("KV cache", size(est.kv_cache_bytes), None))
    if est.kv_cache_bytes_no_window != est.kv_cache_bytes:
        rows.append(("without window saving", size(est.kv_cache_bytes_no_window), None))
    if est.n_gpus > 1:
        rows.append(("bytes per token per GPU", f"{est.kv_bytes_per_token_per_gpu:,} B (fullest GPU)", None))
        rows.append(("KV cache per GPU", size(est.kv_cache_bytes_per_gpu) + " (fullest GPU)", None))
        rows.append(("KV cache, all GPUs", size(est.kv_cache_bytes_all_gpus), None))
    if est.state_bytes:
        rows.append(("fixed state (SSM/linear)", size(est.state_bytes) + " for the batch", None))
    if len(est.breakdown) > 1:
        for b in est.breakdown:
            win = f", window {b.window:,}" if b.window else ""
            rows.append(
                (
                    f"  {b.kind} layers",
                    f"{b.n_layers} layers{win}: {b.kv_bytes_per_token:,} B/token, "
                    f"{b.tokens_cached:,} tokens cached, {size(b.kv_cache_bytes)}",
                    None,
                )
            )
    return pairs_table(title or f"KV cache: {est.model}", rows, width=width)


def rows_table(
    rows: Sequence[BaseModel],
    columns: Sequence[tuple[str, str]],
    title: str | None = None,
    *,
    width: int | None = None,
    short: dict[str, str] | None = None,
) -> Table | Group:
    """A rich table of result rows; `columns` are (field, header) pairs, `short` maps a field to
    its abbreviated header. Ints that end in `_bytes` are shown exactly and in GiB (two parts
    that may go on two lines); other numbers never wrap; strings wrap between words."""
    short = short or {}
    data = [r.model_dump() for r in rows]
    cols = []
    for field, header in columns:
        vals = [d.get(field) for d in data]
        text = any(isinstance(v, str) for v in vals)
        cols.append(Col(header, kind="text" if text else "num", short=short.get(field, "")))
    cells: list[list[Cell]] = []
    for d in data:
        row: list[Cell] = []
        for field, _ in columns:
            v = d.get(field)
            if isinstance(v, int) and not isinstance(v, bool) and field.endswith("_bytes"):
                row.append((f"{v:,} B", f"({gib(v)})"))
            elif isinstance(v, float):
                row.append(f"{v:g}")
            elif isinstance(v, int) and not isinstance(v, bool):
                row.append(f"{v:,}")
            else:
                row.append(str(v))
        cells.append(row)
    return grid(cols, cells, width=width, title=title)


def result_table(res: EngineResult, title: str, *, width: int | None = None) -> Table:
    """The rich table of an `EngineResult` (the log lines are printed by `show_result`)."""
    rows: list[tuple[str, Cell, str | None]] = [("engine", res.engine_version, None)]
    if res.kv_memory_bytes is not None:
        rows.append(("KV memory", size(res.kv_memory_bytes), None))
    if res.kv_memory_basis:
        rows.append(("KV memory basis", res.kv_memory_basis, None))
    rows.append(("KV cache dtype", res.kv_cache_dtype, None))
    if res.n_ctx is not None:
        rows.append(("n_ctx (padded)", f"{res.n_ctx:,}", None))
        rows.append(("cells", f"{res.n_cells:,}", None))
    if res.num_gpu_blocks is not None:
        unit = "pages" if res.engine == "sglang" else "blocks"
        extra = f", {res.usable_blocks:,} usable (one null block)" if res.usable_blocks is not None else ""
        rows.append(
            (unit, f"{res.num_gpu_blocks:,} of {res.block_size:,} tokens, {res.page_size_bytes:,} B each{extra}", None)
        )
    if res.num_cpu_blocks is not None:
        rows.append(("CPU (swap) blocks", f"{res.num_cpu_blocks:,}", None))
    rows.append(("KV cache tokens", f"{res.kv_cache_tokens:,}", None))
    rows.append(("allocated", size(res.engine_kv_bytes), None))
    if res.engine_state_bytes is not None:
        rows.append(("recurrent state", size(res.engine_state_bytes), None))
    if res.k_bytes is not None:
        v_bytes = res.v_bytes or 0  # set with k_bytes (llama.cpp's K and V buffers)
        rows.append(("K / V", f"{res.k_bytes:,} B ({mib(res.k_bytes)}) / {v_bytes:,} B ({mib(v_bytes)})", None))
    for d in res.devices or []:
        rows.append(
            (f"  {d.device}", f"{d.n_layers} layers, {d.kv_bytes:,} B ({mib(d.kv_bytes)}, {gib(d.kv_bytes)})", None)
        )
    if res.max_concurrency is not None:
        rows.append(("max concurrency", f"{res.max_concurrency:.2f}x requests of {res.max_model_len:,} tokens", None))
    if res.concurrency:
        longest = (
            "no limit (sliding windows cap each request)"
            if res.longest_context is None
            else f"{res.longest_context:,} tokens"
        )
        rows.append((f"longest context at {res.concurrency}x", longest, None))
    for n in res.notes:
        rows.append(("note", n, None))
    return pairs_table(title, rows, width=width)


def serving_table(r: ServingEstimate, gpu: GpuSpec, est: KvEstimate, *, width: int | None = None) -> Table:
    """The rich table of a `ServingEstimate`."""
    from rich.text import Text

    act = f" ({r.n_active_params:,} active per token)" if r.n_active_params != r.n_params else ""
    rows: list[tuple[str, Cell, str | None]] = [
        (
            "parameters",
            f"{r.n_params:,}{act}" + ("" if r.weights_source == "architecture" else f" (from {r.weights_source})"),
            None,
        ),
        ("weights per GPU", f"{size(r.weights_bytes_per_gpu)} in {r.weight_dtype}", None),
        ("KV cache per GPU", size(r.kv_cache_bytes_per_gpu), None),
    ]
    if r.state_bytes_per_gpu:
        rows.append(("SSM / linear state per GPU", size(r.state_bytes_per_gpu), None))
    rows += [
        ("activation reserve", size(r.activation_reserve_bytes), None),
        ("CUDA context", size(r.cuda_context_bytes), None),
        ("memory per GPU", size(r.memory_bytes_per_gpu), None),
        (
            "budget per GPU",
            f"{size(r.budget_bytes_per_gpu)} = {r.gpu_memory_utilization:g} x {gib(r.gpu_memory_bytes)}",
            None,
        ),
    ]
    verdict = Text("fits", style="green") if r.fits else Text("does not fit", style="red")
    rows.append(("fits", verdict + f": headroom {r.headroom_bytes:,} B ({gib(r.headroom_bytes)})", None))
    rows.append(
        (
            "max batch",
            f"{r.max_batch:,} sequences of {est.seq_len:,} tokens per replica{_per_rank(r.max_batch, est.dp_attention)}",
            None,
        )
    )
    cap = " (the model's limit)" if r.max_seq_len_capped else ""
    rows.append(("max context", f"{r.max_seq_len:,} tokens at batch {est.batch}{cap}", None))
    rows.append(
        (
            "decode step",
            f"reads {size(r.decode_bytes_read_per_step)}, {r.decode_flops_per_step:,} FLOPs: "
            f"{r.decode_bound}-bound (bw eff {r.bw_efficiency:g}, FLOPs eff {r.flops_efficiency:g})"
            + (f", floor {seconds(r.decode_floor_s)}" if r.decode_floor_s else "")
            + (f", all-reduce {seconds(r.decode_allreduce_s)}" if r.decode_allreduce_s else ""),
            None,
        )
    )
    rows.append(("speed model", r.speed_model, None))
    if r.tpot_s is None or r.tokens_per_s is None or r.ttft_s is None:
        rows.append(("TPOT", "none: the batch does not fit (no TTFT or tokens/s either)", None))
    else:
        rows.append(("TPOT", f"{seconds(r.tpot_s)} (modelled)", None))
        rows.append(("tokens/s", f"{r.tokens_per_s_per_seq:,.1f} per sequence, {r.tokens_per_s:,.1f} in total", None))
        rows.append(("TTFT", f"{seconds(r.ttft_s)} for a {est.seq_len:,}-token prompt ({r.prefill_bound}-bound)", None))
    return pairs_table(f"On {r.gpu_count} x {gpu.name} ({r.gpu})", rows, width=width)


def sweep_table(
    rows: Sequence[SweepRow], title: str, with_gpu: bool, *, width: int | None = None, speed_note: str | None = None
) -> Table | Group:
    """The rich table of `kvcalc sweep`: one row per (seq_len, batch); memory columns in GiB
    (2^30 B) per GPU. Split over two tables (each led by seq_len and batch) when too wide."""
    from rich.text import Text

    cols = [
        Col("seq_len", short="T"),
        Col("batch", short="B"),
        Col("weights", short="wts"),
        Col("KV"),
        Col("memory", short="mem"),
    ]
    if with_gpu:
        cols += [Col("budget", short="bdgt"), Col("fits"), Col("TPOT ms", short="TPOT"), Col("tok/s")]
    cells: list[list[Cell]] = []
    for r in rows:
        row: list[Cell] = [
            f"{r['seq_len']:,}",
            f"{r['batch']:,}",
            f"{r['weights_bytes_per_gpu'] / 2**30:,.2f}",
            f"{r['kv_cache_bytes_per_gpu'] / 2**30:,.2f}",
            f"{r['memory_bytes_per_gpu'] / 2**30:,.2f}",
        ]
        if with_gpu:
            row += [
                f"{r['budget_bytes_per_gpu'] / 2**30:,.2f}",
                Text("yes", style="green") if r["fits"] else Text("no", style="red"),
                "-" if r["tpot_s"] is None else figure(r["tpot_s"] * 1e3, 2),
                "-" if r["tokens_per_s"] is None else f"{r['tokens_per_s']:,.0f}",
            ]
        cells.append(row)
    caption = "memory columns: GiB (2^30 B) per GPU" + (f"; {speed_note}" if speed_note else "")
    return grid(cols, cells, width=width, title=title, caption=caption, keys=2)


def check_table(rows: Sequence[CheckRow], *, width: int | None = None) -> RenderableType:
    """The rich table of `kvcalc check`, with each failing deployment's reasons after it. The
    two-figure cells ("32,768 x 12", "65.1 / 71.7", "25.6 (≤50)") go on two lines, each figure
    whole, when the column is narrower than the pair."""
    from rich.console import Group
    from rich.text import Text

    cols = [
        Col("deployment", kind="id", justify="left"),
        Col("GPUs", kind="text", justify="left"),
        Col("tokens x seqs", short="T x seqs"),
        Col("GiB/GPU\nused / budget", short="GiB used / budget"),
        Col("max\nseqs"),
        Col("TPOT ms\n(target)"),
        Col("tokens/s\n(target)", short="tok/s (target)"),
        Col("status", kind="text", justify="left"),
    ]
    style = {"ok": "green", "does not fit": "red", "misses target": "yellow"}
    cells: list[list[Cell]] = []
    notes = []
    for r in rows:
        tgt_tpot = (f"(≤{r.max_tpot_ms:g})",) if r.max_tpot_ms is not None else ()
        tgt_tok = (f"(≥{r.min_tokens_per_s:g})",) if r.min_tokens_per_s is not None else ()
        cells.append(
            [
                r.name,
                gpus_label(r.count, r.gpu, r.tp, r.pp, r.dp, r.dp_attention, r.ep),
                (f"{r.max_seq_len:,} x", f"{r.concurrency}"),
                (f"{r.memory_bytes_per_gpu / 2**30:,.1f} /", f"{r.budget_bytes_per_gpu / 2**30:,.1f}"),
                f"{r.max_concurrency:,}",
                ("-" if r.tpot_ms is None else figure(r.tpot_ms, 1), *tgt_tpot),
                ("-" if r.tokens_per_s is None else f"{r.tokens_per_s:,.0f}", *tgt_tok),
                Text(r.status, style=style[r.status]),
            ]
        )
        notes += [Text(safe_text(f"{r.name}: {p}  ({r.file})"), style=style[r.status]) for p in r.problems]
    t = grid(
        cols,
        cells,
        width=width,
        title="kvcalc check: memory per GPU vs gpu_memory_utilization x memory; "
        "decode with every sequence at max_seq_len (the speed model; none where it does not fit)",
    )
    return Group(t, *notes) if notes else t


def check_markdown(rows: Sequence[CheckRow], errors: list[str]) -> str:
    """`kvcalc check --format markdown` (for a PR comment): one row per deployment (memory and
    budget in GiB = 2^30 B, TPOT in ms), then one line per invalid file."""
    from kvcalc.report import markdown_table

    icon = {"ok": "✅ ok", "does not fit": "❌ does not fit", "misses target": "⚠️ misses target"}
    lines = [
        markdown_table(
            [
                "deployment",
                "model",
                "GPUs",
                "KV",
                "context x concurrency",
                "memory/GPU GiB",
                "budget GiB",
                "TPOT ms",
                "tokens/s",
                "status",
                "why",
            ],
            [
                [
                    r.name,
                    r.model,
                    f"{r.count} x {r.gpu} (tp {r.tp}, pp {r.pp}, dp {r.dp})",
                    r.kv_dtype,
                    f"{r.max_seq_len:,} x {r.concurrency}",
                    f"{r.memory_bytes_per_gpu / 2**30:,.2f}",
                    f"{r.budget_bytes_per_gpu / 2**30:,.2f}",
                    "-" if r.tpot_ms is None else figure(r.tpot_ms, 2),
                    "-" if r.tokens_per_s is None else f"{r.tokens_per_s:,.0f}",
                    icon[r.status],
                    "; ".join(r.problems),
                ]
                for r in rows
            ],
        )
    ]
    lines += [f"\n**invalid:** `{safe_text(e)}`" for e in errors]
    return "\n".join(lines)


def measure_table(r: MeasureResult, *, width: int | None = None) -> Table:
    """The rich table for a `MeasureResult`: what ran, bytes predicted against each memory
    reading, step time predicted against measured, bandwidth achieved, and the notes."""

    def gbs(x: float | None) -> str:
        return "n/a" if x is None else f"{x / 1e9:,.1f} GB/s"

    def pct(x: float | None) -> str:
        return "n/a" if x is None else f"{100 * x:.1f}%"

    def diff(x: int | None, label: str) -> str:
        if x is None:
            return "n/a"
        d = x - r.predicted_kv_bytes
        return f"{size(x)}: " + ("equal" if d == 0 else f"{d:+,} B vs predicted") + label

    rows: list[tuple[str, Cell, str | None]] = []

    def add(label: str, value: Cell) -> None:
        rows.append((label, value, None))

    add("workload", f"seq_len {r.seq_len:,} x batch {r.batch}, KV {r.kv_dtype} (attend in {r.compute_dtype})")
    add(
        "layers",
        f"{r.layers_measured} of {r.n_layers} measured"
        + (" (scaled to the model)" if r.layers_measured < r.n_layers else ""),
    )
    add("backend", r.backend + (", CUDA graph" if r.cuda_graph else "") + (", with weights" if r.with_weights else ""))
    add("predicted KV bytes", size(r.predicted_kv_bytes) + " (kvcalc.calc.kv_cache)")
    add("tensor storage bytes", diff(r.measured_kv_bytes, ""))
    if r.device == "cuda":
        add("allocator requested", diff(r.allocator_requested_delta_bytes, ""))
        exp = r.allocator_allocated_expected_bytes
        a = r.allocator_allocated_delta_bytes
        add(
            "memory_allocated",
            "n/a"
            if a is None
            else f"{a:,} B: {'equal' if a == exp else f'{a - (exp or 0):+,} B'} vs {exp:,} B (each tensor rounded up to 512 B)",
        )
        add("device used (mem_get_info)", diff(r.device_used_delta_bytes, " (allocator segments)"))
        add(
            "device used (NVML)",
            "n/a (pip install nvidia-ml-py)" if r.nvml_used_delta_bytes is None else diff(r.nvml_used_delta_bytes, ""),
        )
        add("CUDA context", size(r.cuda_context_bytes) + " (used before any tensor; includes other processes)")
    else:
        add(
            "process RSS delta",
            "n/a, pip install psutil"
            if r.rss_delta_bytes is None
            else diff(r.rss_delta_bytes, " (pages committed by the random fill)"),
        )
    if r.with_weights:
        add("weights", size(r.weight_bytes))
    add("model KV bytes", size(r.model_kv_bytes) + f" (all {r.n_layers} layers)")
    add("bytes read per step", size(r.bytes_read_per_step))
    add(
        "measured step",
        f"median {seconds(r.measured_step_s_median)}, p10 {seconds(r.measured_step_s_p10)}, "
        f"p90 {seconds(r.measured_step_s_p90)} ({r.steps} steps after {r.warmup_steps} warm-up)",
    )
    if r.layers_measured < r.n_layers:
        add("step, whole model", seconds(r.model_step_s_median) + " (median scaled to every layer)")
    add("bandwidth probe", f"{gbs(r.probe_bytes_per_s)} (sum over {gib(r.probe_bytes)})")
    add("GPU table", "n/a (no table row)" if r.table_gpu is None else f"{r.table_gpu}: {gbs(r.table_bytes_per_s)}")
    add(
        "achieved",
        f"{gbs(r.achieved_bytes_per_s)} = {pct(r.fraction_of_probe)} of probe, {pct(r.fraction_of_table)} of table",
    )
    add("predicted step (probe)", f"{seconds(r.predicted_step_s)}: error {r.error_percent:+.1f}%")
    add(
        "predicted step (table)",
        "n/a"
        if r.predicted_step_s_table is None
        else f"{seconds(r.predicted_step_s_table)}: error {r.error_percent_table:+.1f}%",
    )
    for n in r.notes:
        add("note", n)
    return pairs_table(f"kvcalc measure: {r.model} on {r.device} ({r.device_name})", rows, width=width)


def models_table(rows: Sequence[ModelRow], *, width: int | None = None) -> Table | Group:
    """The rich table of `kvcalc models` (rows as its JSON output holds them)."""
    cols = [
        Col("name", kind="id", justify="left"),
        Col("attention", kind="id", short="attn", justify="left"),
        Col("layers", kind="text", justify="left"),
        Col("heads (q/kv)", short="q/kv", justify="left"),
        Col("head_dim", short="hd", justify="left"),
        Col("max context", short="ctx", justify="left"),
    ]
    cells: list[list[Cell]] = [
        [
            r["name"],
            r["attention"],
            r["layers"],
            f"{r['n_heads']}/{r['n_kv_heads']}",
            f"{r['head_dim']:,}",
            f"{r['max_position_embeddings'] or 0:,}",
        ]
        for r in rows
    ]
    return grid(cols, cells, width=width, title="Bundled models (kvcalc estimate NAME)")


def gpus_table(rows: Sequence[GpuSpec], *, width: int | None = None) -> Table | Group:
    """The rich table of `kvcalc gpus` (`GpuSpec` rows); at narrow widths the names move below
    the table as "key: name" lines."""
    cols = [
        Col("key", kind="id", justify="left"),
        Col("memory\nGiB", short="GiB"),
        Col("memory\nGB", short="GB"),
        Col("HBM\nTB/s", short="TB/s"),
        Col("bf16\nTFLOP/s", short="bf16"),
        Col("fp8\nTFLOP/s", short="fp8"),
        Col("fp4\nTFLOP/s", short="fp4"),
        Col("link GB/s\n(bidir)", short="link"),
        Col("name", kind="text", justify="left", legend=True),
    ]
    cells: list[list[Cell]] = [
        [
            g.key,
            f"{g.memory_bytes / 2**30:,.1f}",
            f"{g.memory_bytes / 1e9:,.1f}",
            f"{g.hbm_bytes_per_s / 1e12:,.2f}",
            f"{g.bf16_flops_per_s / 1e12:,.0f}",
            f"{g.fp8_flops_per_s / 1e12:,.0f}" if g.fp8_flops_per_s else "-",
            f"{g.fp4_flops_per_s / 1e12:,.0f}" if g.fp4_flops_per_s else "-",
            f"{g.interconnect_bytes_per_s / 1e9:,.0f}" if g.interconnect_bytes_per_s else "-",
            g.name,
        ]
        for g in rows
    ]
    return grid(
        cols,
        cells,
        width=width,
        title="GPUs (kvcalc ... --gpu KEY); memory as nvidia-smi / rocm-smi report it; dense FLOP/s",
    )


def gpus_label(
    count: int, gpu: str, tp: int, pp: int, dp: int, dp_attention: int = 1, ep: int = 1, nodes: int = 1
) -> str:
    """A layout's GPUs cell, as `kvcalc plan` and `kvcalc check` show it: '8x h200 tp2 dp-attn4 ep8'
    (pp, dp, dp-attn, ep where above 1; ', N nodes' where more than one)."""
    par = f"tp{tp}" + (f" pp{pp}" if pp > 1 else "") + (f" dp{dp}" if dp > 1 else "")
    par += (f" dp-attn{dp_attention}" if dp_attention > 1 else "") + (f" ep{ep}" if ep > 1 else "")
    where = f", {nodes} nodes" if nodes > 1 else ""
    return f"{count}x {gpu} {par}{where}"


def _plan_gpus(r: PlanLayout) -> str:
    return gpus_label(r.count, r.gpu, r.tp, r.pp, r.dp, r.dp_attention, r.ep, r.nodes)


def _plan_formats(r: PlanLayout) -> str:
    short = {"fp8_e4m3": "fp8"}
    return f"{short.get(r.kv_dtype, r.kv_dtype)}/{short.get(r.weight_dtype, r.weight_dtype)}"


def plan_title(res: PlanResult) -> str:
    """What was asked: the model, the workload and the targets."""
    tg = [
        f"TPOT ≤ {res.max_tpot_ms:g} ms" if res.max_tpot_ms is not None else "",
        f"≥ {res.min_tokens_per_s:g} tokens/s" if res.min_tokens_per_s is not None else "",
        f"TTFT ≤ {res.max_ttft_s:g} s" if res.max_ttft_s is not None else "",
    ]
    tg = [t for t in tg if t]
    work = f"{res.concurrency:,} x {res.seq_len:,} tokens"
    if res.input_len is not None and res.request_rate is not None:
        work = f"{res.request_rate:g} requests/s of {res.input_len:,} in / {res.output_len:,} out"
    elif res.input_len is not None:
        work = f"{res.concurrency:,} requests of {res.input_len:,} in / {res.output_len:,} out"
    return (
        f"kvcalc plan: {res.model}, {work}"
        + (f", {', '.join(tg)}" if tg else "")
        + f" ({res.engine}; {res.n_qualifying:,} of "
        f"{res.points_searched:,} layouts qualify)"
    )


def plan_table(res: PlanResult, *, width: int | None = None) -> Table | Group:
    """The rich table of a `PlanResult`: one row per layout (GPUs and layout; KV / weight
    formats; memory per GPU used / budget in GiB = 2^30 B; sequences of seq_len that fit; TPOT;
    total tokens/s; TTFT; with prices $/hour and $ per million output tokens), laid out by
    `grid` so that no figure is cut at any width."""
    priced = any(r.dollars_per_hour is not None for r in res.layouts)
    cols = [
        Col("#", kind="id"),
        Col("GPUs", kind="text", justify="left"),
        Col("KV/\nweights", kind="id", short="KV/w", justify="left"),
        Col("GiB/GPU\nused/budget", short="GiB"),
        Col("max\nseqs", short="seqs"),
        Col("TPOT\nms", short="TPOT"),
        Col("tokens\n/s", short="tok/s"),
    ]
    whole = res.input_len is not None  # whole requests: TTFT over end to end in one column
    cols.append(Col("TTFT/\nE2E s", short="TTFT/E2E") if whole else Col("TTFT\ns", short="TTFT"))
    if priced:
        cols += [Col("$/hour", short="$/h"), Col("$/M\ntokens", short="$/M")]
    cells: list[list[Cell]] = []
    for r in res.layouts:
        row: list[Cell] = [
            str(r.rank),
            _plan_gpus(r) + (f" ({r.why})" if r.why else ""),
            _plan_formats(r),
            (f"{r.memory_bytes_per_gpu / 2**30:,.1f}/", f"{r.budget_bytes_per_gpu / 2**30:,.1f}"),
            f"{r.max_concurrency:,}",
            figure(r.tpot_ms, 1),
            f"{r.tokens_per_s:,.0f}",
            (f"{figure(r.ttft_s, 2)}/", figure(r.e2e_s, 2)) if whole and r.e2e_s is not None else figure(r.ttft_s, 2),
        ]
        if priced:
            row += [
                "-" if r.dollars_per_hour is None else f"{r.dollars_per_hour:,.2f}",
                "-" if r.dollars_per_million_tokens is None else f"{r.dollars_per_million_tokens:,.2f}",
            ]
        cells.append(row)
    return grid(
        cols,
        cells,
        width=width,
        title=plan_title(res),
        caption=f"GiB = 2^30 B per GPU; {_plan_speed_basis(res)}" + _plan_speed_note(res),
    )


def plan_markdown(res: PlanResult) -> str:
    """`kvcalc plan --format markdown`: the layouts as a table (GiB = 2^30 B; with an offload tier
    a column of the sessions each keeps warm, all replicas), the top layout's launch line, and
    the nearest misses when nothing qualifies."""
    from kvcalc.report import markdown_table

    lines = [f"**{plan_title(res)}**", ""]
    warm = any(r.offload is not None for r in res.layouts)  # an offload tier asked: its sessions kept warm
    if res.layouts:
        lines.append(
            markdown_table(
                [
                    "#",
                    "GPUs",
                    "KV / weights",
                    "memory/GPU GiB",
                    "budget GiB",
                    "max seqs",
                    "TPOT ms",
                    "tokens/s",
                    "TTFT s",
                    "$/hour",
                    "$/M tokens",
                    *(["sessions warm"] if warm else []),
                ],
                [
                    [
                        r.rank,
                        _plan_gpus(r),
                        _plan_formats(r),
                        f"{r.memory_bytes_per_gpu / 2**30:,.2f}",
                        f"{r.budget_bytes_per_gpu / 2**30:,.2f}",
                        f"{r.max_concurrency:,}",
                        figure(r.tpot_ms, 2),
                        f"{r.tokens_per_s:,.0f}",
                        figure(r.ttft_s, 2),
                        "" if r.dollars_per_hour is None else f"{r.dollars_per_hour:,.2f}",
                        "" if r.dollars_per_million_tokens is None else f"{r.dollars_per_million_tokens:,.2f}",
                        *([f"{r.sessions_warm:,}" if r.sessions_warm is not None else ""] if warm else []),
                    ]
                    for r in res.layouts
                ],
            )
        )
        if res.layouts[0].launch:
            lines += ["", "```bash", res.layouts[0].launch, "```"]
    else:
        lines.append(f"Nothing fits and meets the targets within {res.max_gpus} GPUs. Nearest misses:")
        lines += [f"- {m.line}" for m in res.misses]
    return "\n".join(lines)


def fit_hint_line(hint: FitHint, est: KvEstimate) -> str:
    """The line under `kvcalc estimate --gpu` when the layout does not fit: the fewest GPUs
    of that type that fit it."""
    what = f"{est.batch * est.dp} x {est.seq_len:,} tokens in {est.kv_dtype}"
    if hint.smallest_fitting_layout is None:
        return f"does not fit: no count of this GPU up to {hint.smallest_fitting_limit} fits {what}"
    return (
        f"does not fit: the smallest count that fits {what} is {hint.smallest_fitting_layout} "
        f"(kvcalc plan searches every GPU and target)"
    )


# ----- compact tables of several estimates (`estimate -s 8k,32k`, `compare A B C`) ----------------


def _gib_cell(n: int) -> str:
    return f"{n / 2**30:,.2f}"


def kv_lengths_table(rows: Sequence[KvEstimate]) -> WideOrRecords:
    """`kvcalc estimate -s 8k,32k,...`: one row per `KvEstimate` (same model, batch, format and
    layout): seq_len, bytes per token, the KV cache in B and GiB, and per GPU (fullest GPU) when
    the layout spans more than one GPU per replica."""
    e = rows[0]
    per_gpu = e.tp * e.pp > 1
    headers = ["seq_len", "B/token", "KV cache (B)", "GiB"] + (["per GPU (B)", "GiB/GPU"] if per_gpu else [])
    cells = []
    for r in rows:
        c = [f"{r.seq_len:,}", f"{r.kv_bytes_per_token:,}", f"{r.kv_cache_bytes:,}", _gib_cell(r.kv_cache_bytes)]
        if per_gpu:
            c += [f"{r.kv_cache_bytes_per_gpu:,}", _gib_cell(r.kv_cache_bytes_per_gpu)]
        cells.append(c)
    layout = f", tp {e.tp} x pp {e.pp}" + (f" x dp {e.dp}" if e.dp > 1 else "") if e.n_gpus > 1 else ""
    title = f"KV cache: {e.model}, batch {e.batch}, KV dtype {e.kv_dtype}{layout}"
    return WideOrRecords(
        title, headers, cells, right=headers, caption="B/token: one more token, one sequence, all layers; GiB = 2^30 B"
    )


def attention_summary(e: KvEstimate) -> str:
    """'gqa 64q/8kv', 'mla latent 576', with ', sliding' when some layers keep a window; 'no KV
    cache (mamba state)' for a model whose layers keep only a fixed state (its 0 B are no MHA's)."""
    if not any(b.kind not in ("mamba", "linear") for b in e.breakdown):
        kinds = sorted({b.kind for b in e.breakdown})
        return f"no KV cache ({' / '.join(kinds)} state)"
    if e.attention == "mla":
        text = f"mla latent {e.head_dim}"
    else:
        text = f"{e.attention} {e.n_heads}q/{e.n_kv_heads}kv"
    if any(b.window for b in e.breakdown):
        text += ", sliding"
    kinds = [STATE_TAGS[k] for k in STATE_TAGS if any(b.kind == k for b in e.breakdown)]
    if kinds:
        text += f", +{' / '.join(kinds)} state"
    return text


#: the layer kinds that keep a fixed state per sequence beside (or instead of) a KV cache, as the
#: attention column tags them: Jamba's Mamba layers, Qwen3-Next's gated DeltaNet (linear
#: attention), Falcon-H1's attention with a Mamba-2 mixer in the same layer
STATE_TAGS = {"mamba": "mamba", "linear": "linear-attn", "hybrid": "mamba2"}
#: the state cell of a model whose config does not size its state (`KvEstimate.state_bytes` None)
STATE_UNKNOWN = "not sized"


def compare_models_table(rows: Sequence[KvEstimate], title: str) -> WideOrRecords:
    """`kvcalc compare A B ...`: one row per `KvEstimate` (same context, batch and format): the
    model, its own attention (tagged with the state its mamba / linear layers keep), bytes per
    token and the KV cache in B; where a model keeps a fixed state (`state_bytes`: per sequence x
    batch, `kv_cache.state_bytes_per_seq`), a state column, and GiB of KV cache + state, the
    memory compared."""
    stateful = any(r.state_bytes != 0 for r in rows)  # None: a state the config does not size
    headers = ["model", "attention", "B/token", "KV cache (B)"] + (["state (B)"] if stateful else []) + ["GiB"]
    cells = [
        [r.model, attention_summary(r), f"{r.kv_bytes_per_token:,}", f"{r.kv_cache_bytes:,}"]
        + ([STATE_UNKNOWN if r.state_bytes is None else f"{r.state_bytes:,}"] if stateful else [])
        + [_gib_cell(r.kv_cache_bytes + (r.state_bytes or 0))]
        for r in rows
    ]
    caption = "B/token: one more token, one sequence, all layers; GiB = 2^30 B"
    if stateful:
        caption = (
            "B/token: one more token, one sequence, all layers; state: the fixed state of mamba / linear "
            "layers, per sequence x batch; GiB: KV cache + state, 2^30 B"
            + (
                f" ({STATE_UNKNOWN}: the config gives no state shape; KV cache only)"
                if any(r.state_bytes is None for r in rows)
                else ""
            )
        )
    return WideOrRecords(title, headers, cells, right=headers[2:], caption=caption)


def request_table(r: RequestEstimate, serving: ServingEstimate, *, width: int | None = None) -> Table:
    """The rich table of a `RequestEstimate` (whole requests) on the layout of `serving` (a
    `ServingEstimate`: its GPU count and speed model): every figure a model."""
    title = (
        f"Requests of {r.input_len:,} in + {r.output_len:,} out tokens on {serving.gpu_count} GPU"
        f"{'s' if serving.gpu_count > 1 else ''} (modelled)"
    )
    rows: list[tuple[str, Cell, str | None]] = [("speed model", serving.speed_model, None)]
    if not r.request_fits:
        rows.append(("figures", f"none: {r.static_batch:,} x {r.input_len + r.output_len:,} tokens do not fit", None))
        return pairs_table(title, rows, width=width)
    rows += [
        ("TTFT", f"{seconds(r.request_ttft_s)} (one request)", None),
        ("TPOT", f"{seconds(r.request_tpot_s)} at {r.input_len + r.output_len // 2:,} tokens cached", None),
        ("end to end", seconds(r.request_e2e_s), None),
        ("per user", f"{r.tokens_per_s_per_user:,.1f} tokens/s", None),
        (
            f"static batch {r.static_batch:,}",
            f"{r.static_tokens_per_s:,.1f} tokens/s, {r.static_tokens_per_s_per_gpu:,.1f} per GPU",
            None,
        ),
        (
            f"static batch {r.static_batch:,} TPOT",
            f"{seconds(r.static_tpot_s)} at {r.input_len + r.output_len // 2:,} tokens cached",
            None,
        ),
        (f"static batch {r.static_batch:,} E2E", f"{seconds(r.static_e2e_s)} (TTFT {seconds(r.static_ttft_s)})", None),
    ]
    if r.request_rate is not None:
        label = f"at {r.request_rate:g} req/s"
        if not r.rate_sustainable:
            rows.append((label, "no steady state: the queue grows (or the concurrency does not fit)", None))
        else:
            rows += [
                (
                    label,
                    f"{r.rate_concurrency:,.1f} requests in flight (Little's law), "
                    f"{r.rate_kv_tokens:,.0f} KV tokens on average",
                    None,
                ),
                (f"{label} TPOT", f"{seconds(r.rate_tpot_s)}, E2E {seconds(r.rate_e2e_s)}", None),
                (f"{label} tokens/s", f"{r.rate_tokens_per_s:,.1f}, {r.rate_tokens_per_s_per_gpu:,.1f} per GPU", None),
            ]
    return pairs_table(title, rows, width=width)


def calibration_table(c: Calibration, gpu: GpuSpec, device: str, path: str, *, width: int | None = None) -> Table:
    """The rich table of `kvcalc measure --calibrate`: each measured figure beside the GPU
    table's peak (bandwidth, bf16 FLOP/s)."""
    rows: list[tuple[str, Cell, str | None]] = [
        ("device", device, None),
        ("per-step floor", seconds(c.step_floor_s) if c.step_floor_s is not None else "not measured", None),
        (
            "read bandwidth",
            "not measured"
            if c.read_bytes_per_s is None
            else f"{c.read_bytes_per_s / 1e9:,.1f} GB/s = {c.read_bytes_per_s / gpu.hbm_bytes_per_s:.2f} "
            f"x the table's {gpu.hbm_bytes_per_s / 1e9:,.0f} GB/s",
            None,
        ),
        (
            "dense FLOP/s",
            "not measured"
            if c.flops_per_s is None
            else f"{c.flops_per_s / 1e12:,.2f} TFLOP/s = {c.flops_per_s / gpu.bf16_flops_per_s:.2f} x "
            f"the table's bf16 {gpu.bf16_flops_per_s / 1e12:,.1f}",
            None,
        ),
        (
            "all-reduce",
            (
                f"{seconds(c.allreduce_latency_s)} per call at tp {c.allreduce_tp}"
                if c.allreduce_latency_s is not None
                else "not measured (under 2 GPUs visible, no --allreduce-ranks)"
            ),
            None,
        ),
        ("written to", f"{path} (use: --calibration {path})", None),
    ]
    return pairs_table(f"Calibration of {gpu.key} (GB = 1e9 B)", rows, width=width)


def _plan_speed_basis(res: PlanResult) -> str:
    """What plan's TPOT and tokens/s are of: every sequence at seq_len, or whole requests."""
    if res.input_len is None:
        return f"TPOT and tokens/s with every sequence at {res.seq_len:,} tokens"
    ctx = res.input_len + (res.output_len or 0) // 2  # output_len is given with input_len
    if res.request_rate is not None:
        return (
            f"whole requests at {res.request_rate:g}/s (Little's law): TPOT at the average "
            f"concurrency and {ctx:,} tokens, tokens/s = rate x output, TTFT of one prompt, E2E"
        )
    return (
        f"whole requests as static batches: TPOT at {ctx:,} tokens (the mean context), "
        "output tokens/s with the prefill, TTFT of one prompt, E2E of the fullest batch"
    )


def _plan_speed_note(res: PlanResult) -> str:
    """'; modelled: <terms>' for the top layout when the plan used the speed model."""
    models = [r.speed_model for r in res.layouts if r.speed_model != "roofline"]
    return f"; modelled (top layout): {models[0]}" if models else ""
