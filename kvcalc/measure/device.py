"""The device: resolving --device, synchronizing, free memory, process RSS and NVML readings,
the bandwidth probe, and the percentiles of timed samples."""

from __future__ import annotations

import math
import statistics
import time
from typing import Callable

import torch

from kvcalc.errors import KvcalcError

GIB = 2**30
#: the device read probe: >= 2 GiB on a GPU; on the CPU a smaller one that fits.
GPU_PROBE_BYTES = 2 * GIB
CPU_PROBE_MAX_BYTES = 256 * 2**20

Progress = Callable[[str, int, int], None]


def free_memory_bytes(device: str) -> int | None:
    """Free memory now: CUDA `mem_get_info()` free; CPU psutil `available`, else
    /proc/meminfo MemAvailable; None when neither can be read."""
    if device == "cuda":
        return torch.cuda.mem_get_info()[0]
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except ImportError:
        pass
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def resolve_device(device: str) -> str:
    """'auto' -> 'cuda' when torch sees a GPU, else 'cpu'. Raises KvcalcError for 'cuda'
    without one and for unknown names."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise KvcalcError("--device cuda: torch sees no CUDA GPU (torch.cuda.is_available() is False); use --device cpu")
    if device not in ("cuda", "cpu"):
        raise KvcalcError(f"--device: unknown device '{device}'; use auto, cuda or cpu")
    return device


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _rss() -> int | None:
    try:
        import psutil

        return int(psutil.Process().memory_info().rss)
    except ImportError:
        return None


def _nvml_used() -> int | None:
    """Device used bytes from NVML (nvidia-ml-py), or None when it is not installed."""
    try:
        import pynvml

        pynvml.nvmlInit()
        idx = torch.cuda.current_device()
        return int(pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(idx)).used)
    except Exception:
        return None


def time_call_s(device: str, fn: Callable[[], object]) -> float:
    """Seconds one call of `fn` takes: on CUDA between two events recorded around it (the end
    event synchronized); on the CPU by time.perf_counter."""
    if device == "cuda":
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        return a.elapsed_time(b) / 1e3
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def probe_bandwidth(device: str, free: int | None, progress: Progress | None = None) -> tuple[int, float]:
    """Device read bandwidth in bytes/s: median of timed `sum()` passes over one buffer
    (bytes / time). GPU: >= 2 GiB (4 GiB when a quarter of free memory allows), CUDA events
    after a warm-up; CPU: min(256 MiB, available / 8), perf_counter. Returns (probe_bytes,
    bytes_per_s); the buffer is freed before returning."""
    if device == "cuda":
        n = 4 * GIB if free and free // 4 >= 4 * GIB else GPU_PROBE_BYTES
        reps = 10
    else:
        n = min(CPU_PROBE_MAX_BYTES, (free or 8 * CPU_PROBE_MAX_BYTES) // 8) // 4 * 4
        reps = 5
    buf = torch.empty(n // 4, dtype=torch.float32, device=device)
    try:
        buf.fill_(1.0)
        times = []
        for i in range(reps + 2):
            dt = time_call_s(device, buf.sum)
            if i >= 2:
                times.append(dt)
            if progress:
                progress("bandwidth probe", i + 1, reps + 2)
        return n, n / statistics.median(times)
    finally:
        del buf
        if device == "cuda":
            torch.cuda.empty_cache()


def _pct(xs: list[float], p: float) -> float:
    """Percentile p (0..100) by linear interpolation between sorted samples."""
    s = sorted(xs)
    i = (len(s) - 1) * p / 100
    lo = math.floor(i)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (i - lo)

