"""`kvcalc measure`: the command. torch (through `kvcalc.measure`) is imported inside it only;
without torch it prints one line saying what to install and exits 2.

Never a surprise: without --seq-len the run is sized to take seconds on the device
(`kvcalc.measure.defaults`); before any tensor one stderr line gives its bytes and rough time;
while it runs, a progress bar on a terminal, or when stderr is not a terminal (a pipe, CI) one
plain line every `PIPE_EVERY_S` seconds once it has run that long."""

from __future__ import annotations

import os
import sys
import time
from typing import Any, Callable, TextIO

from kvcalc.cli.options import (BackendOpt, BatchOpt, DeviceOpt, FormatOpt, GraphOpt, KvDtypeOpt, LayersOpt, ModelArg,
                                SeqLenOpt, StepsOpt, WeightsOpt, check_positive, resolve_kv_dtypes, with_help)
from kvcalc.cli.output import check_format, emit, handle_errors
from kvcalc.errors import KvcalcError, MissingExtraError

#: when stderr is not a terminal, a progress line at most this often (seconds), the first after as long
PIPE_EVERY_S = 5.0

MeasureSeqLenOpt = with_help(SeqLenOpt, "Tokens per sequence (8192 or 32k). Default: a run of seconds: the largest "
                                        "power of two up to the model's context whose KV cache fits 32 MiB on the "
                                        "CPU, or 1/8 of free memory on a GPU.")

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
    seq_len: MeasureSeqLenOpt = None,
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
    from kvcalc.units import parse_count

    T = parse_count(seq_len, "--seq-len") if seq_len is not None else None  # None: sized for the device
    k, v = resolve_kv_dtypes(spec, kv_dtype, None, None)
    from kvcalc.measure.request import MeasureRequest  # torch-free

    request = MeasureRequest(model=spec, seq_len=T, batch=batch, k_format=kv_format(k), v_format=kv_format(v),
                             device=device, layers=layers, steps=steps, backend=backend,
                             with_weights=with_weights, cuda_graph=cuda_graph)
    m = _import_measure()
    with _progress() as prog:
        res = m.run(request, progress=prog, announce=announce)
    from kvcalc.report.tables import measure_table

    emit(res, fmt, lambda: measure_table(res))

def announce_line(a: Any) -> str:
    """The line printed before a run starts: what it allocates (bytes, GB and GiB) and a rough
    time. `a`: a `kvcalc.measure.defaults.Announcement`."""
    from kvcalc.report import size

    how = " (default size: --seq-len to choose)" if a.seq_len_rule else ""
    other = f" + {size(a.other_bytes)} beside it" if a.other_bytes else ""
    took = f"about {a.estimated_s:.0f} s" if a.estimated_s >= 1 else "under a second"
    return (f"measure: {a.model}, {a.seq_len:,} tokens{how} x batch {a.batch} on {a.device}: "
            f"{size(a.kv_bytes)} of KV cache{other}; {took}")


def announce(a: Any) -> None:
    """Print `announce_line(a)` on stderr (one line, never wrapped)."""
    print(announce_line(a), file=sys.stderr, flush=True)


class PipeProgress:
    """Progress as plain stderr lines for a pipe or a CI log: a line ('measure: decode steps
    12/38, 10 s') at most every `every_s` seconds, the first once the run has lasted that long,
    so a short run prints none. `clock` and `out` are injectable for tests."""

    def __init__(self, every_s: float = PIPE_EVERY_S, clock: Callable[[], float] = time.monotonic,
                 out: TextIO | None = None) -> None:
        self.every_s, self.clock, self.out = every_s, clock, out
        self.start = self.last = clock()

    def __call__(self, name: str, done: int, total: int) -> None:
        now = self.clock()
        if now - self.last >= self.every_s:
            self.last = now
            print(f"measure: {name} {done}/{total}, {now - self.start:.0f} s", file=self.out or sys.stderr,
                  flush=True)


class _progress:
    """A rich progress bar on stderr (transient) when stderr is a terminal, else `PipeProgress`
    lines; as a callback (task, done, total)."""

    def __enter__(self) -> Any:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        con = Console(stderr=True)
        self.started = False
        if not con.is_terminal:  # pipes, CI, CliRunner: plain lines every few seconds
            self.pipe = PipeProgress()
            return self.pipe
        # started on the first update (a refused run prints nothing but its error line)
        self.p = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                          TimeElapsedColumn(), console=con, transient=True)
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
