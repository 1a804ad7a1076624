"""`kvcalc measure --calibrate FILE`: the speed model's constants measured on this device
(torch; imported only by `kvcalc measure`). What it measures, each as the model uses it
(`calc.speed`, `docs/speed-model.md`):

- per-step floor and achieved read bandwidth: a decode-like step of `n_layers` matrix-vector
  products (one weight slab per layer, (1, K) x (K, N)), timed at four total sizes from 1/8 to
  all of the probe; the line t = floor + bytes / BW through the medians (`calc.speed.fit_line`)
  gives the floor (kernel launches and host work of a pass over the layers: kvcalc's eager PyTorch
  loop, an upper figure for an engine that replays CUDA graphs) and the bandwidth (its slope);
- achieved dense FLOP/s: a square matmul (bf16 on CUDA, fp32 on the CPU), 2 n^3 / median time;
- one all-reduce's latency when several CUDA devices are visible: `torch.distributed` over NCCL,
  one process per device, the median time of a 16 KiB all-reduce (a decode step's (B, hidden)
  activation is of that order), measured at tp = the device count (or `--allreduce-ranks N` of
  them). On the CPU only when asked (`--allreduce-ranks N`): the same timing over gloo between N
  local processes, which exercises the whole path (spawn, rendezvous, the file's
  `allreduce_latency_s` / `allreduce_tp`, estimate's tp > 1 term) on a machine without GPUs.

Measurement discipline as `kvcalc measure` (DESIGN.md rule 8): warm-up, synchronize, CUDA events,
medians."""

from __future__ import annotations

import datetime
import os
import statistics
from dataclasses import dataclass

import torch

from kvcalc.calc.speed import fit_line
from kvcalc.measure.device import Progress, time_call_s

#: the four sizes of the read line, as fractions of the probe
READ_FRACTIONS = (0.125, 0.25, 0.5, 1.0)
#: GPU probe: 2 GiB of bf16 weights at full size; CPU: 16 MiB of fp32
GPU_READ_BYTES = 2 * 2**30
CPU_READ_BYTES = 16 * 2**20
#: the matmul side: 8192 (bf16, 1.1 TFLOP per call) on CUDA, 256 on the CPU
GPU_MATMUL_N = 8192
CPU_MATMUL_N = 256
#: bytes of the all-reduce timed (a (B, hidden) bf16 activation is 8-64 KiB at small batch)
ALLREDUCE_BYTES = 16 * 2**10
#: torch.distributed backend of the all-reduce, by device
ALLREDUCE_BACKENDS = {"cuda": "nccl", "cpu": "gloo"}
#: seconds a rank waits for the others (rendezvous, each collective) before it fails
ALLREDUCE_TIMEOUT_S = 60


@dataclass(frozen=True)
class CalibrationRun:
    """What one calibration measured (seconds, bytes/s, FLOP/s), with the device in words."""

    device: str
    step_floor_s: float
    read_bytes_per_s: float
    flops_per_s: float
    allreduce_latency_s: float | None = None
    allreduce_tp: int | None = None
    allreduce_backend: str | None = None


def _median_time(device: str, fn: object, reps: int, warmup: int = 2) -> float:
    times = [time_call_s(device, fn) for _ in range(warmup + reps)]  # type: ignore[arg-type]
    return statistics.median(times[warmup:])


def read_line(
    device: str, n_layers: int, total_bytes: int, progress: Progress | None = None, reps: int = 7
) -> tuple[float, float, list[tuple[int, float]]]:
    """(floor s, bytes/s, the (bytes, s) points): a pass of `n_layers` GEMVs over weight slabs
    totalling each of READ_FRACTIONS x `total_bytes`, median of `reps` timed passes each."""
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    esize = torch.finfo(dtype).bits // 8
    k = 1024
    points = []
    for i, frac in enumerate(READ_FRACTIONS):
        per_layer = max(k * esize, int(total_bytes * frac) // n_layers)
        n = max(1, per_layer // (k * esize))
        slabs = [torch.ones(k, n, dtype=dtype, device=device) for _ in range(n_layers)]
        x = torch.ones(1, k, dtype=dtype, device=device)

        def step(slabs: list[torch.Tensor] = slabs, x: torch.Tensor = x) -> None:
            for w in slabs:
                torch.matmul(x, w)

        points.append((n_layers * k * n * esize, _median_time(device, step, reps)))
        del slabs
        if progress:
            progress("calibration: read line", i + 1, len(READ_FRACTIONS))
    if device == "cuda":
        torch.cuda.empty_cache()
    floor, s_per_byte = fit_line([(float(b), t) for b, t in points])
    return max(floor, 0.0), (1 / s_per_byte if s_per_byte > 0 else points[-1][0] / points[-1][1]), points


def matmul_flops_per_s(device: str, n: int | None = None, reps: int = 5) -> float:
    """Achieved dense FLOP/s: 2 n^3 / median time of an (n, n) x (n, n) matmul."""
    n = n or (GPU_MATMUL_N if device == "cuda" else CPU_MATMUL_N)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    a = torch.ones(n, n, dtype=dtype, device=device)
    b = torch.ones(n, n, dtype=dtype, device=device)
    t = _median_time(device, lambda: torch.matmul(a, b), reps)
    return 2 * n**3 / t


def _allreduce_worker(rank: int, world: int, port: int, reps: int, device: str, out: object) -> None:
    """One rank of the all-reduce timing: NCCL on CUDA device `rank`, or gloo on the CPU; rank 0
    puts the median seconds per call on `out` (a multiprocessing queue). The tensor is
    ALLREDUCE_BYTES long: bf16 on CUDA, fp32 on the CPU (gloo's reductions are fp32-native)."""
    import datetime as dt

    import torch.distributed as dist

    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    if device == "cuda":
        torch.cuda.set_device(rank)
    backend = ALLREDUCE_BACKENDS[device]
    dist.init_process_group(backend, rank=rank, world_size=world, timeout=dt.timedelta(seconds=ALLREDUCE_TIMEOUT_S))
    try:
        dtype = torch.bfloat16 if device == "cuda" else torch.float32
        x = torch.ones(ALLREDUCE_BYTES // (torch.finfo(dtype).bits // 8), dtype=dtype, device=device)
        t = _median_time(device, lambda: dist.all_reduce(x), reps, warmup=5)
        if rank == 0:
            out.put(t)  # type: ignore[attr-defined]
    finally:
        dist.destroy_process_group()


def allreduce_ranks(device: str, asked: int | None) -> int | None:
    """How many processes the all-reduce is timed over: `asked` (>= 2; on CUDA at most the
    visible devices), else on CUDA every visible device when there are two or more, else None
    (not measured: one GPU, or the CPU without --allreduce-ranks). Raises `KvcalcError` for an
    `asked` the device cannot give."""
    from kvcalc.errors import KvcalcError

    visible = torch.cuda.device_count() if device == "cuda" else None
    if asked is None:
        return visible if visible is not None and visible >= 2 else None
    if asked < 2:
        raise KvcalcError("an all-reduce needs 2 or more ranks", option="--allreduce-ranks", value=asked)
    if visible is not None and asked > visible:
        raise KvcalcError(
            f"torch sees {visible} CUDA device(s), one rank each", option="--allreduce-ranks", value=asked
        )
    return asked


def allreduce_latency_s(device: str, ranks: int | None, reps: int = 50) -> float | None:
    """Median seconds of one ALLREDUCE_BYTES all-reduce over `ranks` processes (NCCL, one per
    CUDA device; gloo on the CPU), or None when `ranks` is None. Each rank is a spawned process
    (`torch.multiprocessing`); a rank that fails makes this raise (`ProcessRaisedException`)."""
    if ranks is None:
        return None
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    q = ctx.SimpleQueue()
    mp.start_processes(
        _allreduce_worker, args=(ranks, port, reps, device, q), nprocs=ranks, join=True, start_method="spawn"
    )
    return float(q.get())


def calibrate(
    device: str, n_layers: int, progress: Progress | None = None, allreduce_ranks: int | None = None
) -> CalibrationRun:
    """Every figure on `device` ('cuda' or 'cpu') for a model of `n_layers` layers; the
    all-reduce over `allreduce_ranks` processes (`allreduce_ranks()` resolves the option)."""
    total = GPU_READ_BYTES if device == "cuda" else CPU_READ_BYTES
    floor, bw, _ = read_line(device, n_layers, total, progress)
    fl = matmul_flops_per_s(device)
    ar = allreduce_latency_s(device, allreduce_ranks)
    if progress and ar is not None:
        progress("calibration: all-reduce", 1, 1)
    name = torch.cuda.get_device_name() if device == "cuda" else "CPU"
    return CalibrationRun(
        device=f"{name} ({device}, torch {torch.__version__})",
        step_floor_s=floor,
        read_bytes_per_s=bw,
        flops_per_s=fl,
        allreduce_latency_s=ar,
        allreduce_tp=allreduce_ranks if ar is not None else None,
        allreduce_backend=ALLREDUCE_BACKENDS[device] if ar is not None else None,
    )


def calibration_yaml(run: CalibrationRun, gpu: str, model: str, n_layers: int) -> str:
    """The calibration file's text (`load.speed.load_calibration` reads it back): one flat
    mapping, each figure with its unit in its name."""
    import yaml

    from kvcalc import __version__

    data: dict[str, object] = {
        "kind": "kvcalc-calibration",
        "gpu": gpu,
        "device": run.device,
        "measured": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "source": f"kvcalc {__version__} measure --calibrate: {n_layers}-layer GEMV read line ({model}), "
        f"square matmul, {_allreduce_words(run)}",
        "step_floor_s": run.step_floor_s,
        "read_bytes_per_s": run.read_bytes_per_s,
        "flops_per_s": run.flops_per_s,
    }
    if run.allreduce_latency_s is not None:
        data["allreduce_latency_s"] = run.allreduce_latency_s
        data["allreduce_tp"] = run.allreduce_tp
    return yaml.safe_dump(data, sort_keys=False)


def _allreduce_words(run: CalibrationRun) -> str:
    """The all-reduce part of the file's `source`: what was timed, or that it was not."""
    if run.allreduce_latency_s is None:
        return "no all-reduce timed (one GPU visible, or the CPU without --allreduce-ranks)"
    what = "GPUs" if run.allreduce_backend == "nccl" else "CPU processes"
    return f"{ALLREDUCE_BYTES // 2**10} KiB {run.allreduce_backend} all-reduce over {run.allreduce_tp} {what}"
