"""Every rich table kvcalc prints. Formats results and computes nothing; sizes are labelled
(GB = 10^9 B, GiB = 2^30 B, MiB = 2^20 B) through `kvcalc.report`'s helpers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel

from kvcalc.report import gib, mib, seconds, size

def kv_table(est: Any, title: str | None = None):
    """The rich table for a `KvEstimate`: inputs, the formula with numbers, bytes per token,
    the totals in B, GB and GiB, per GPU under TP/PP, and the breakdown by layer kind."""
    from rich.table import Table

    t = Table(title=title or f"KV cache: {est.model}", show_header=False, title_justify="left")
    t.add_column("what", style="bold")
    t.add_column("value", overflow="fold")
    heads = (f"{est.n_heads} query heads, {est.n_kv_heads} KV heads (group {est.queries_per_kv_head})"
             if est.attention != "mla" else f"{est.n_heads} query heads, one latent of {est.head_dim}")
    t.add_row("model", est.model)
    if est.source:
        t.add_row("source", est.source, style="dim")
    t.add_row("attention", f"{est.attention}: {heads}")
    dims = f"head_dim {est.head_dim}" + (f", v_head_dim {est.v_head_dim}" if est.v_head_dim not in (0, est.head_dim) else "")
    t.add_row("layers", f"{est.n_layers}, {dims}")
    t.add_row("workload", f"seq_len {est.seq_len:,} tokens x batch {est.batch}, KV dtype {est.kv_dtype}")
    if est.n_gpus > 1:
        t.add_row("parallel", f"tp {est.tp} x pp {est.pp} x dp {est.dp} = {est.n_gpus} GPUs")
    t.add_row("formula", est.formula)
    t.add_row("bytes per token", f"{est.kv_bytes_per_token:,} B (one more token, one sequence, all layers)")
    t.add_row("KV cache", size(est.kv_cache_bytes))
    if est.kv_cache_bytes_no_window != est.kv_cache_bytes:
        t.add_row("without window saving", size(est.kv_cache_bytes_no_window))
    if est.n_gpus > 1:
        t.add_row("bytes per token per GPU", f"{est.kv_bytes_per_token_per_gpu:,} B (fullest GPU)")
        t.add_row("KV cache per GPU", size(est.kv_cache_bytes_per_gpu) + " (fullest GPU)")
        t.add_row("KV cache, all GPUs", size(est.kv_cache_bytes_all_gpus))
    if est.state_bytes:
        t.add_row("fixed state (SSM/linear)", size(est.state_bytes) + " for the batch")
    if len(est.breakdown) > 1:
        for b in est.breakdown:
            win = f", window {b.window:,}" if b.window else ""
            t.add_row(f"  {b.kind} layers",
                      f"{b.n_layers} layers{win}: {b.kv_bytes_per_token:,} B/token, "
                      f"{b.tokens_cached:,} tokens cached, {size(b.kv_cache_bytes)}")
    return t

def rows_table(rows: Sequence[BaseModel], columns: Sequence[tuple[str, str]], title: str | None = None):
    """A rich table of result rows; `columns` are (field, header) pairs. Ints that end in
    `_bytes` are shown exactly and in GiB."""
    from rich.table import Table

    t = Table(title=title, title_justify="left")
    for _, header in columns:
        t.add_column(header, justify="right")
    for r in rows:
        d = r.model_dump()
        cells = []
        for field, _ in columns:
            v = d.get(field)
            if isinstance(v, int) and field.endswith("_bytes"):
                cells.append(f"{v:,} B ({gib(v)})")
            elif isinstance(v, float):
                cells.append(f"{v:g}")
            elif isinstance(v, int) and not isinstance(v, bool):
                cells.append(f"{v:,}")
            else:
                cells.append(str(v))
        t.add_row(*cells)
    return t

def result_table(res: Any, title: str) -> Any:
    """The rich table of an `EngineResult` (the log lines are printed by `show_result`)."""
    from rich.table import Table

    from kvcalc.report import gib, size

    t = Table(title=title, show_header=False, title_justify="left")
    t.add_column("what", style="bold")
    t.add_column("value")
    t.add_row("engine", res.engine_version)
    if res.kv_memory_bytes is not None:
        t.add_row("KV memory", size(res.kv_memory_bytes))
    if res.kv_memory_basis:
        t.add_row("KV memory basis", res.kv_memory_basis)
    t.add_row("KV cache dtype", res.kv_cache_dtype)
    if res.n_ctx is not None:
        t.add_row("n_ctx (padded)", f"{res.n_ctx:,}")
        t.add_row("cells", f"{res.n_cells:,}")
    if res.num_gpu_blocks is not None:
        unit = "pages" if res.engine == "sglang" else "blocks"
        extra = f", {res.usable_blocks:,} usable (one null block)" if res.usable_blocks is not None else ""
        t.add_row(unit, f"{res.num_gpu_blocks:,} of {res.block_size} tokens, {res.page_size_bytes:,} B each{extra}")
    if res.num_cpu_blocks is not None:
        t.add_row("CPU (swap) blocks", f"{res.num_cpu_blocks:,}")
    t.add_row("KV cache tokens", f"{res.kv_cache_tokens:,}")
    t.add_row("allocated", size(res.engine_kv_bytes))
    if res.k_bytes is not None:
        t.add_row("K / V", f"{res.k_bytes:,} B ({mib(res.k_bytes)}) / {res.v_bytes:,} B ({mib(res.v_bytes)})")
    for d in res.devices or []:
        t.add_row(f"  {d.device}", f"{d.n_layers} layers, {d.kv_bytes:,} B ({mib(d.kv_bytes)}, {gib(d.kv_bytes)})")
    if res.max_concurrency is not None:
        t.add_row("max concurrency", f"{res.max_concurrency:.2f}x requests of {res.max_model_len:,} tokens")
    if res.concurrency:
        longest = ("no limit (sliding windows cap each request)" if res.longest_context is None
                   else f"{res.longest_context:,} tokens")
        t.add_row(f"longest context at {res.concurrency}x", longest)
    for n in res.notes:
        t.add_row("note", n)
    return t

def serving_table(r: Any, gpu: Any, est: Any):
    """The rich table of a `ServingEstimate`."""
    from rich.table import Table

    from kvcalc.report import gib, size

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

def sweep_table(rows: list[dict[str, Any]], title: str, with_gpu: bool):
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

def check_table(rows: list[Any]):
    """The rich table of `kvcalc check`, with each failing deployment's reasons after it."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    t = Table(title="kvcalc check: memory per GPU vs gpu_memory_utilization x memory; decode with "
                    "every sequence at max_seq_len", title_justify="left")
    for c in ("deployment", "GPUs", "tokens x seqs", "GiB/GPU\nused / budget", "max\nseqs",
              "TPOT ms\n(target)", "tokens/s\n(target)", "status"):
        t.add_column(c, justify="left" if c in ("deployment", "GPUs", "status") else "right", overflow="fold",
                     no_wrap=c == "deployment")
    style = {"ok": "green", "does not fit": "red", "misses target": "yellow"}
    notes = []
    for r in rows:
        tgt_tpot = f" (≤{r.max_tpot_ms:g})" if r.max_tpot_ms is not None else ""
        tgt_tok = f" (≥{r.min_tokens_per_s:g})" if r.min_tokens_per_s is not None else ""
        par = f"tp{r.tp}" + (f" pp{r.pp}" if r.pp > 1 else "") + (f" dp{r.dp}" if r.dp > 1 else "")
        t.add_row(r.name, f"{r.count}x {r.gpu} {par}", f"{r.max_seq_len:,} x {r.concurrency}",
                  f"{r.memory_bytes_per_gpu / 2**30:,.1f} / {r.budget_bytes_per_gpu / 2**30:,.1f}",
                  f"{r.max_concurrency:,}", f"{r.tpot_ms:,.1f}{tgt_tpot}", f"{r.tokens_per_s:,.0f}{tgt_tok}",
                  Text(r.status, style=style[r.status]))
        notes += [Text(f"{r.name}: {p}  ({r.file})", style=style[r.status]) for p in r.problems]
    return Group(t, *notes) if notes else t

def check_markdown(rows: list[Any], errors: list[str]) -> str:
    """`kvcalc check --format markdown` (for a PR comment): one row per deployment (memory and
    budget in GiB = 2^30 B, TPOT in ms), then one line per invalid file."""
    from kvcalc.report import markdown_table

    icon = {"ok": "✅ ok", "does not fit": "❌ does not fit", "misses target": "⚠️ misses target"}
    lines = [markdown_table(
        ["deployment", "model", "GPUs", "KV", "context x concurrency", "memory/GPU GiB", "budget GiB",
         "TPOT ms", "tokens/s", "status", "why"],
        [[r.name, r.model, f"{r.count} x {r.gpu} (tp {r.tp}, pp {r.pp}, dp {r.dp})", r.kv_dtype,
          f"{r.max_seq_len:,} x {r.concurrency}", f"{r.memory_bytes_per_gpu / 2**30:,.2f}",
          f"{r.budget_bytes_per_gpu / 2**30:,.2f}", f"{r.tpot_ms:,.2f}", f"{r.tokens_per_s:,.0f}",
          icon[r.status], "; ".join(r.problems)] for r in rows])]
    lines += [f"\n**invalid:** `{e}`" for e in errors]
    return "\n".join(lines)

def measure_table(r: Any) -> Any:
    """The rich table for a `MeasureResult`: what ran, bytes predicted against each memory
    reading, step time predicted against measured, bandwidth achieved, and the notes."""
    from rich.table import Table

    from kvcalc.report import gib, size

    def gbs(x: float | None) -> str:
        return "n/a" if x is None else f"{x / 1e9:,.1f} GB/s"

    def pct(x: float | None) -> str:
        return "n/a" if x is None else f"{100 * x:.1f}%"

    def diff(x: int | None, label: str) -> str:
        if x is None:
            return "n/a"
        d = x - r.predicted_kv_bytes
        return f"{size(x)}: " + ("equal" if d == 0 else f"{d:+,} B vs predicted") + label

    t = Table(title=f"kvcalc measure: {r.model} on {r.device} ({r.device_name})", show_header=False,
              title_justify="left")
    t.add_column("what", style="bold")
    t.add_column("value")
    t.add_row("workload", f"seq_len {r.seq_len:,} x batch {r.batch}, KV {r.kv_dtype} (attend in {r.compute_dtype})")
    t.add_row("layers", f"{r.layers_measured} of {r.n_layers} measured" +
              (" (scaled to the model)" if r.layers_measured < r.n_layers else ""))
    t.add_row("backend", r.backend + (", CUDA graph" if r.cuda_graph else "") + (", with weights" if r.with_weights else ""))
    t.add_row("predicted KV bytes", size(r.predicted_kv_bytes) + " (kvcalc.calc.kv_cache)")
    t.add_row("tensor storage bytes", diff(r.measured_kv_bytes, ""))
    if r.device == "cuda":
        t.add_row("allocator requested", diff(r.allocator_requested_delta_bytes, ""))
        exp = r.allocator_allocated_expected_bytes
        a = r.allocator_allocated_delta_bytes
        t.add_row("memory_allocated", "n/a" if a is None else
                  f"{a:,} B: {'equal' if a == exp else f'{a - (exp or 0):+,} B'} vs {exp:,} B (each tensor rounded up to 512 B)")
        t.add_row("device used (mem_get_info)", diff(r.device_used_delta_bytes, " (allocator segments)"))
        t.add_row("device used (NVML)", "n/a (pip install nvidia-ml-py)" if r.nvml_used_delta_bytes is None
                  else diff(r.nvml_used_delta_bytes, ""))
        t.add_row("CUDA context", size(r.cuda_context_bytes) + " (used before any tensor; includes other processes)")
    else:
        t.add_row("process RSS delta", "n/a, pip install psutil" if r.rss_delta_bytes is None
                  else diff(r.rss_delta_bytes, " (pages committed by the random fill)"))
    if r.with_weights:
        t.add_row("weights", size(r.weight_bytes))
    t.add_row("model KV bytes", size(r.model_kv_bytes) + f" (all {r.n_layers} layers)")
    t.add_row("bytes read per step", size(r.bytes_read_per_step))
    t.add_row("measured step", f"median {seconds(r.measured_step_s_median)}, p10 {seconds(r.measured_step_s_p10)}, "
              f"p90 {seconds(r.measured_step_s_p90)} ({r.steps} steps after {r.warmup_steps} warm-up)")
    if r.layers_measured < r.n_layers:
        t.add_row("step, whole model", seconds(r.model_step_s_median) + " (median scaled to every layer)")
    t.add_row("bandwidth probe", f"{gbs(r.probe_bytes_per_s)} (sum over {gib(r.probe_bytes)})")
    t.add_row("GPU table", "n/a (no table row)" if r.table_gpu is None else f"{r.table_gpu}: {gbs(r.table_bytes_per_s)}")
    t.add_row("achieved", f"{gbs(r.achieved_bytes_per_s)} = {pct(r.fraction_of_probe)} of probe, "
              f"{pct(r.fraction_of_table)} of table")
    t.add_row("predicted step (probe)", f"{seconds(r.predicted_step_s)}: error {r.error_percent:+.1f}%")
    t.add_row("predicted step (table)", "n/a" if r.predicted_step_s_table is None else
              f"{seconds(r.predicted_step_s_table)}: error {r.error_percent_table:+.1f}%")
    for n in r.notes:
        t.add_row("note", n)
    return t


def models_table(rows: list[dict[str, Any]]):
    """The rich table of `kvcalc models` (rows as its JSON output holds them)."""
    from rich.table import Table

    t = Table(title="Bundled models (kvcalc estimate NAME)", title_justify="left")
    for col in ("name", "attention", "layers", "heads (q/kv)", "head_dim", "max context"):
        t.add_column(col, no_wrap=col == "name", overflow="fold")
    for r in rows:
        t.add_row(r["name"], r["attention"], r["layers"], f"{r['n_heads']}/{r['n_kv_heads']}",
                  str(r["head_dim"]), f"{r['max_position_embeddings'] or 0:,}")
    return t


def gpus_table(rows: list[Any]):
    """The rich table of `kvcalc gpus` (`GpuSpec` rows)."""
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
    return t

# ----- compact tables of several estimates (`estimate -s 8k,32k`, `compare A B C`) ----------------

class WideOrRecords:
    """`headers` x `rows` (cells as text) as one table when it fits the console's width, else
    one two-column block per row (header: value): no cell is ever cut, wrapped or ellipsized,
    at any width (decided when printed, from the console's width). `right`: the headers whose
    cells are right-aligned (numbers)."""

    def __init__(self, title: str, headers: Sequence[str], rows: Sequence[Sequence[str]],
                 right: Sequence[str] = (), caption: str | None = None) -> None:
        self.title, self.headers, self.rows = title, list(headers), [list(r) for r in rows]
        self.right, self.caption = set(right), caption

    def wide(self) -> Any:
        """The one-table shape."""
        from rich.table import Table

        t = Table(title=self.title, title_justify="left", caption=self.caption, caption_justify="left")
        for h in self.headers:
            t.add_column(h, justify="right" if h in self.right else "left", no_wrap=True)
        for r in self.rows:
            t.add_row(*r)
        return t

    def records(self) -> list[Any]:
        """The narrow shape: the title, then per row a block of (header, value) lines."""
        from rich.table import Table
        from rich.text import Text

        out: list[Any] = [Text(self.title)]
        for r in self.rows:
            t = Table(show_header=False)
            t.add_column("what", no_wrap=True)
            t.add_column("value", no_wrap=True)
            for h, v in zip(self.headers, r):
                t.add_row(h, v)
            out.append(t)
        if self.caption:
            out.append(Text(self.caption))
        return out

    def __rich_console__(self, console: Any, options: Any) -> Any:
        from rich.measure import Measurement

        wide = self.wide()
        natural = Measurement.get(console, options.update(max_width=10**6), wide).maximum  # unclamped
        if natural <= options.max_width:
            yield wide
        else:
            from rich.console import Group

            yield Group(*self.records())


def _gib_cell(n: int) -> str:
    return f"{n / 2**30:,.2f}"


def kv_lengths_table(rows: Sequence[Any]) -> WideOrRecords:
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
    return WideOrRecords(title, headers, cells, right=headers,
                         caption="B/token: one more token, one sequence, all layers; GiB = 2^30 B")


def attention_summary(e: Any) -> str:
    """'gqa 64q/8kv', 'mla latent 576', with ', sliding' when some layers keep a window."""
    if e.attention == "mla":
        text = f"mla latent {e.head_dim}"
    else:
        text = f"{e.attention} {e.n_heads}q/{e.n_kv_heads}kv"
    if any(b.window for b in e.breakdown):
        text += ", sliding"
    return text


def compare_models_table(rows: Sequence[Any], title: str) -> WideOrRecords:
    """`kvcalc compare A B ...`: one row per `KvEstimate` (same context, batch and format): the
    model, its own attention, bytes per token and the KV cache in B and GiB."""
    headers = ["model", "attention", "B/token", "KV cache (B)", "GiB"]
    cells = [[r.model, attention_summary(r), f"{r.kv_bytes_per_token:,}", f"{r.kv_cache_bytes:,}",
              _gib_cell(r.kv_cache_bytes)] for r in rows]
    return WideOrRecords(title, headers, cells, right=headers[2:],
                         caption="B/token: one more token, one sequence, all layers; GiB = 2^30 B")
