"""`kvcalc measure`: the command. torch (through `kvcalc.measure`) is imported inside it only;
without torch it prints one line saying what to install and exits 2."""

from __future__ import annotations

import os
from typing import Annotated, Any, Optional

import typer

from kvcalc.cli import (
    BatchOpt,
    FormatOpt,
    KvDtypeOpt,
    ModelArg,
    SeqLenOpt,
    app,
    check_format,
    check_positive,
    emit,
    handle_errors,
    resolve_kv_dtypes,
    resolve_seq_len,
)
from kvcalc.errors import KvcalcError, MissingExtraError

DeviceOpt = Annotated[str, typer.Option("--device", help="auto (CUDA when present, else CPU), cuda or cpu.")]
LayersOpt = Annotated[Optional[int], typer.Option("--layers", help="Measure this many KV layers and scale to the whole model.")]
StepsOpt = Annotated[Optional[int], typer.Option("--steps", help="Timed decode steps (GPU: at least 30; CPU default 8).")]
BackendOpt = Annotated[str, typer.Option("--backend", help="auto (= sdpa), sdpa, matmul, or flash (flash-attn / FlashInfer).")]
WeightsOpt = Annotated[bool, typer.Option("--with-weights", help="Add random QKV, output and MLP weights: time whole decoder layers.")]
GraphOpt = Annotated[bool, typer.Option("--cuda-graph", help="Capture one step in a CUDA graph and replay it.")]


def _import_measure() -> Any:
    """kvcalc.measure, or MissingExtraError when torch is not installed. Sets
    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (unless the user set it) before torch
    starts CUDA, so the allocator's memory_allocated delta is exact."""
    os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    try:
        import torch  # noqa: F401
    except ImportError:
        raise MissingExtraError("torch", "measure") from None
    from kvcalc import measure

    return measure


@app.command()
@handle_errors
def measure(
    model: ModelArg,
    seq_len: SeqLenOpt = None,
    batch: BatchOpt = 1,
    kv_dtype: KvDtypeOpt = None,
    device: DeviceOpt = "auto",
    layers: LayersOpt = None,
    steps: StepsOpt = None,
    backend: BackendOpt = "auto",
    with_weights: WeightsOpt = False,
    cuda_graph: GraphOpt = False,
    fmt: FormatOpt = "table",
) -> None:
    """Allocate MODEL's real KV cache with PyTorch, time decode steps, and print predicted against measured."""
    from kvcalc.dtypes import kv_format
    from kvcalc.loaders import load_model

    check_positive(batch=batch, layers=layers, steps=steps)
    check_format(fmt)
    spec = load_model(model)
    if layers is not None and layers > spec.n_layers:
        raise KvcalcError(f"--layers {layers} exceeds {spec.name}'s {spec.n_layers} layers")
    T = resolve_seq_len(spec, seq_len)
    k, v = resolve_kv_dtypes(spec, kv_dtype, None, None)
    m = _import_measure()
    with _progress() as prog:
        res = m.run(spec, T, batch, kv_format(k), kv_format(v), device=device, layers=layers, steps=steps,
                    backend=backend, with_weights=with_weights, cuda_graph=cuda_graph, progress=prog)
    emit(res, fmt, lambda: measure_table(res))


class _progress:
    """A rich progress bar on stderr (transient), as a callback (task, done, total)."""

    def __enter__(self) -> Any:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        con = Console(stderr=True)
        # started on the first update (a refused run prints nothing but its error line);
        # off when stderr is not a terminal (pipes, CI, CliRunner)
        self.p = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                          TimeElapsedColumn(), console=con, transient=True, disable=not con.is_terminal)
        self.started = False
        self.tasks: dict[str, Any] = {}
        return self.update

    def update(self, name: str, done: int, total: int) -> None:
        if not self.started:
            self.p.start()
            self.started = True
        if name not in self.tasks:
            self.tasks[name] = self.p.add_task(name, total=total)
        self.p.update(self.tasks[name], completed=done)

    def __exit__(self, *exc: Any) -> None:
        if self.started:
            self.p.stop()


def measure_table(r: Any) -> Any:
    """The rich table for a `MeasureResult`: what ran, bytes predicted against each memory
    reading, step time predicted against measured, bandwidth achieved, and the notes."""
    from rich.table import Table

    from kvcalc.report import gib, seconds, size

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
    t.add_row("predicted KV bytes", size(r.predicted_kv_bytes) + " (kvcalc.engine)")
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
