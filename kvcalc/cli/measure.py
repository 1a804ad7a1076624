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
from collections.abc import Callable
from typing import TYPE_CHECKING, Annotated, Optional, TextIO

import typer

from kvcalc.cli.options import (
    BatchOpt,
    FormatOpt,
    ModelArg,
    PlainKvDtypeOpt,
    RevisionOpt,
    SeqLenOpt,
    TrustPlainOpt,
    check_positive,
    lower_choice,
    resolve_kv_dtypes,
    with_help,
)
from kvcalc.cli.output import check_format, emit, handle_errors
from kvcalc.errors import KvcalcError, MissingExtraError

# measure's own options, declared here rather than in `kvcalc.cli.options` (which every command imports)
DeviceOpt = Annotated[
    str, typer.Option("--device", callback=lower_choice, help="auto (CUDA when present, else CPU), cuda or cpu.")
]

LayersOpt = Annotated[
    Optional[int], typer.Option("--layers", help="Measure this many KV layers and scale to the whole model.")
]

StepsOpt = Annotated[
    Optional[int], typer.Option("--steps", help="Timed decode steps (GPU: at least 30; CPU default 8).")
]

BackendOpt = Annotated[
    str,
    typer.Option(
        "--backend", callback=lower_choice, help="auto (= sdpa), sdpa, matmul, or flash (flash-attn / FlashInfer)."
    ),
]

WeightsOpt = Annotated[
    bool, typer.Option("--with-weights", help="Add random QKV, output and MLP weights: time whole decoder layers.")
]

GraphOpt = Annotated[bool, typer.Option("--cuda-graph", help="Capture one step in a CUDA graph and replay it.")]

CalibrateOpt = Annotated[
    Optional[str],
    typer.Option(
        "--calibrate",
        help="Measure the speed model's constants instead (per-step floor, read bandwidth, FLOP/s, all-reduce latency when several GPUs are visible) and write them to this calibration file for `estimate/sweep/plan --calibration` (needs --gpu; an existing file only with --force).",
    ),
]

CalGpuOpt = Annotated[
    Optional[str],
    typer.Option(
        "--gpu",
        help="With --calibrate: the GPU table key (`kvcalc gpus`) this device is, which the calibration file names.",
    ),
]

AllreduceRanksOpt = Annotated[
    Optional[int],
    typer.Option(
        "--allreduce-ranks",
        help="With --calibrate: time the all-reduce over N processes: N CUDA GPUs over NCCL (default: every visible GPU when 2 or more), or with --device cpu N local processes over gloo (default: none).",
    ),
]

ForceOpt = Annotated[bool, typer.Option("--force", help="Overwrite the --calibrate file if it exists.")]

#: when stderr is not a terminal, a progress line at most this often (seconds), the first after as long
PIPE_EVERY_S = 5.0

if TYPE_CHECKING:
    from types import FrameType, ModuleType

    from rich.progress import TaskID

    from kvcalc.measure.defaults import Announcement

if TYPE_CHECKING:  # the option's type for type checkers (with_help builds the annotation at run time)
    MeasureSeqLenOpt = SeqLenOpt
else:
    MeasureSeqLenOpt = with_help(
        SeqLenOpt,
        "Tokens per sequence (8192 or 32k). Default: a run of seconds: the largest "
        "power of two up to the model's context whose KV cache fits 32 MiB on the "
        "CPU, or 1/8 of free memory on a GPU.",
    )

#: the exit status of a run stopped by Ctrl-C (128 + SIGINT, as a shell reports it)
INTERRUPTED_EXIT = 130


def _import_measure() -> ModuleType:
    """kvcalc.measure, or MissingExtraError when torch is not installed. Sets
    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (unless the user set it) before torch
    starts CUDA, so the allocator's memory_allocated delta is exact.

    Only a missing torch package (`ModuleNotFoundError` naming `torch` itself) says "this needs
    torch"; torch present but failing to import (a missing CUDA library, a half-imported module)
    is a `KvcalcError` quoting torch's first line."""
    os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    try:
        import torch  # noqa: F401
    except ModuleNotFoundError as e:
        if e.name == "torch":
            raise MissingExtraError("torch", "measure") from None
        raise KvcalcError(f"torch is installed but failed to import: {_first_line(e)}") from None
    except ImportError as e:
        raise KvcalcError(f"torch is installed but failed to import: {_first_line(e)}") from None
    from kvcalc import measure

    return measure


def _first_line(e: BaseException) -> str:
    """The first line of an exception's text, cut to 200 characters (one error line)."""
    text = (str(e).strip().splitlines() or [e.__class__.__name__])[0]
    return text if len(text) <= 200 else text[:199] + "…"


def _exit_interrupted(signum: int = 0, frame: FrameType | None = None) -> None:
    """SIGINT during `measure`: one line on stderr, then exit 130 at once (`os._exit`). No
    exception is raised into the running code, so nothing can swallow the interrupt (an
    `except ImportError` around a half-imported torch, a C++ frame that aborts on a Python
    exception) or delay it past the current bytecode; the OS frees every allocation, the
    driver the GPU's memory. On a terminal the cursor the progress bar hid is shown again."""
    try:
        if sys.stderr.isatty():
            sys.stderr.write("\x1b[?25h\n")
        sys.stderr.write("error: interrupted (Ctrl-C); nothing measured\n")
        sys.stderr.flush()
    finally:
        os._exit(INTERRUPTED_EXIT)


class _interrupts_exit:
    """Context manager: while it is open, SIGINT (Ctrl-C) ends the process with exit 130
    (`_exit_interrupted`); the previous handler is put back on leaving. Installed only from
    the main thread (where Python runs signal handlers); elsewhere it does nothing."""

    def __enter__(self) -> None:
        import signal
        import threading

        self.previous = None
        if threading.current_thread() is threading.main_thread():
            self.previous = signal.signal(signal.SIGINT, _exit_interrupted)

    def __exit__(self, *exc: object) -> None:
        import signal

        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)


@handle_errors
def measure(
    model: ModelArg,
    seq_len: MeasureSeqLenOpt = None,
    batch: BatchOpt = 1,
    kv_dtype: PlainKvDtypeOpt = None,
    device: DeviceOpt = "auto",
    layers: LayersOpt = None,
    steps: StepsOpt = None,
    backend: BackendOpt = "auto",
    with_weights: WeightsOpt = False,
    cuda_graph: GraphOpt = False,
    calibrate: CalibrateOpt = None,
    gpu: CalGpuOpt = None,
    force: ForceOpt = False,
    allreduce_ranks: AllreduceRanksOpt = None,
    revision: RevisionOpt = None,
    trust_plain_decoder: TrustPlainOpt = False,
    fmt: FormatOpt = "table",
) -> None:
    """Allocate MODEL's real KV cache with PyTorch, time decode steps, and print predicted against measured."""
    try:
        with _interrupts_exit():
            if calibrate is not None or gpu is not None or allreduce_ranks is not None:
                return _calibrate(model, calibrate, gpu, device, layers, force, fmt, revision, allreduce_ranks)
            _measure(
                model,
                seq_len,
                batch,
                kv_dtype,
                device,
                layers,
                steps,
                backend,
                with_weights,
                cuda_graph,
                fmt,
                revision,
                trust_plain_decoder,
            )
    except KeyboardInterrupt:  # raised before the handler was in place: the same exit
        _exit_interrupted()


def _measure(
    model: str,
    seq_len: str | None,
    batch: int,
    kv_dtype: str | None,
    device: str,
    layers: int | None,
    steps: int | None,
    backend: str,
    with_weights: bool,
    cuda_graph: bool,
    fmt: str,
    revision: str | None = None,
    trust_plain_decoder: bool = False,
) -> None:
    """The command's body (`measure`), run while Ctrl-C exits 130."""
    from kvcalc.formats import kv_format
    from kvcalc.load.models import load_model

    check_positive(batch=batch, layers=layers, steps=steps)
    check_format(fmt)
    spec = load_model(model, revision, trust_plain_decoder=trust_plain_decoder)
    if layers is not None and layers > spec.n_layers:
        raise KvcalcError(f"--layers {layers} exceeds {spec.name}'s {spec.n_layers} layers")
    from kvcalc.units import parse_count

    T = parse_count(seq_len, "--seq-len") if seq_len is not None else None  # None: sized for the device
    k, v = resolve_kv_dtypes(spec, kv_dtype, None, None)
    from kvcalc.measure.request import MeasureRequest  # torch-free

    request = MeasureRequest(
        model=spec,
        seq_len=T,
        batch=batch,
        k_format=kv_format(k),
        v_format=kv_format(v),
        device=device,
        layers=layers,
        steps=steps,
        backend=backend,
        with_weights=with_weights,
        cuda_graph=cuda_graph,
    )
    m = _import_measure()
    with _progress() as prog:
        res = m.run(request, progress=prog, announce=announce)
    from kvcalc.report.tables import measure_table

    emit(res, fmt, lambda: measure_table(res))


def _calibrate(
    model: str,
    path: str | None,
    gpu: str | None,
    device: str,
    layers: int | None,
    force: bool,
    fmt: str,
    revision: str | None,
    allreduce_ranks: int | None = None,
) -> None:
    """`measure --calibrate FILE --gpu KEY [--allreduce-ranks N]`: `kvcalc.measure.calibrate` on the device for MODEL's
    layer count (or --layers), written to FILE; prints the figures beside the GPU table's."""
    from kvcalc.cli.output import check_target, write_atomic
    from kvcalc.load.gpus import get_gpu
    from kvcalc.load.models import load_model

    if path is None or gpu is None:
        raise KvcalcError(
            "--calibrate FILE and --gpu KEY go together (the file names the GPU it calibrates)",
            option="--calibrate" if path is None else "--gpu",
        )
    check_positive(layers=layers)
    check_format(fmt)
    check_target(path, "--calibrate", force=force)
    g = get_gpu(gpu)
    spec = load_model(model, revision)
    n_layers = layers or spec.n_layers
    m = _import_measure()
    from kvcalc.measure import calibrate as cal
    from kvcalc.measure.device import resolve_device

    dev = resolve_device(device)
    ranks = cal.allreduce_ranks(dev, allreduce_ranks)
    with _progress() as prog:
        run = cal.calibrate(dev, n_layers, progress=prog, allreduce_ranks=ranks)
    del m
    write_atomic(path, cal.calibration_yaml(run, g.key, spec.name, n_layers), option="--calibrate", force=force)
    from kvcalc.load.speed import load_calibration
    from kvcalc.report.tables import calibration_table

    c = load_calibration(path)  # read back: the file says what estimate will use
    import dataclasses

    emit(
        dataclasses.asdict(c) | {"device": run.device, "file": path},
        fmt,
        lambda: calibration_table(c, g, run.device, path),
    )


def announce_line(a: Announcement) -> str:
    """The line printed before a run starts: what it allocates (bytes, GB and GiB) and a rough
    time. `a`: a `kvcalc.measure.defaults.Announcement`."""
    from kvcalc.report import size

    how = " (default size: --seq-len to choose)" if a.seq_len_rule else ""
    other = f" + {size(a.other_bytes)} beside it" if a.other_bytes else ""
    took = f"about {a.estimated_s:.0f} s" if a.estimated_s >= 1 else "under a second"
    return (
        f"measure: {a.model}, {a.seq_len:,} tokens{how} x batch {a.batch} on {a.device}: "
        f"{size(a.kv_bytes)} of KV cache{other}; {took}"
    )


def announce(a: Announcement) -> None:
    """Print `announce_line(a)` on stderr (one line, never wrapped)."""
    print(announce_line(a), file=sys.stderr, flush=True)


class PipeProgress:
    """Progress as plain stderr lines for a pipe or a CI log: a line ('measure: decode steps
    12/38, 10 s') at most every `every_s` seconds, the first once the run has lasted that long,
    so a short run prints none. `clock` and `out` are injectable for tests."""

    def __init__(
        self, every_s: float = PIPE_EVERY_S, clock: Callable[[], float] = time.monotonic, out: TextIO | None = None
    ) -> None:
        self.every_s, self.clock, self.out = every_s, clock, out
        self.start = self.last = clock()

    def __call__(self, name: str, done: int, total: int) -> None:
        now = self.clock()
        if now - self.last >= self.every_s:
            self.last = now
            print(f"measure: {name} {done}/{total}, {now - self.start:.0f} s", file=self.out or sys.stderr, flush=True)


class _progress:
    """A rich progress bar on stderr (transient) when stderr is a terminal, else `PipeProgress`
    lines; as a callback (task, done, total)."""

    def __enter__(self) -> Callable[[str, int, int], None]:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        con = Console(stderr=True)
        self.started = False
        if not con.is_terminal:  # pipes, CI, CliRunner: plain lines every few seconds
            self.pipe = PipeProgress()
            return self.pipe
        # started on the first update (a refused run prints nothing but its error line)
        self.p = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=con,
            transient=True,
        )
        self.tasks: dict[str, TaskID] = {}
        return self.update

    def update(self, name: str, done: int, total: int) -> None:
        if not self.started:
            self.p.start()
            self.started = True
        if name not in self.tasks:
            self.tasks[name] = self.p.add_task(name, total=total)
        self.p.update(self.tasks[name], completed=done)

    def __exit__(self, *exc: object) -> None:
        if self.started:
            self.p.stop()
