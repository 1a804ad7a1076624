"""`kvcalc measure`: the command. torch (through `kvcalc.measure`) is imported inside it only;
without torch it prints one line saying what to install and exits 2."""

from __future__ import annotations

import os
from typing import Any

from kvcalc.cli.options import (BackendOpt, BatchOpt, DeviceOpt, FormatOpt, GraphOpt, KvDtypeOpt, LayersOpt, ModelArg,
                                SeqLenOpt, StepsOpt, WeightsOpt, check_positive, resolve_kv_dtypes, resolve_seq_len)
from kvcalc.cli.output import check_format, emit, handle_errors
from kvcalc.errors import KvcalcError, MissingExtraError

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
    from kvcalc.formats import kv_format
    from kvcalc.load.models import load_model

    check_positive(batch=batch, layers=layers, steps=steps)
    check_format(fmt)
    spec = load_model(model)
    if layers is not None and layers > spec.n_layers:
        raise KvcalcError(f"--layers {layers} exceeds {spec.name}'s {spec.n_layers} layers")
    T = resolve_seq_len(spec, seq_len)
    k, v = resolve_kv_dtypes(spec, kv_dtype, None, None)
    from kvcalc.measure.request import MeasureRequest  # torch-free

    request = MeasureRequest(model=spec, seq_len=T, batch=batch, k_format=kv_format(k), v_format=kv_format(v),
                             device=device, layers=layers, steps=steps, backend=backend,
                             with_weights=with_weights, cuda_graph=cuda_graph)
    m = _import_measure()
    with _progress() as prog:
        res = m.run(request, progress=prog)
    from kvcalc.report.tables import measure_table

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
