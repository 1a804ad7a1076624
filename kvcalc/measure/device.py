"""The device: resolving --device, synchronizing, free memory, process RSS and NVML readings,
the bandwidth probe, and the percentiles of timed samples."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable

import torch

from kvcalc.errors import KvcalcError

GIB = 2**30
#: the device read probe: >= 2 GiB on a GPU; on the CPU a smaller one that fits.
GPU_PROBE_BYTES = 2 * GIB
CPU_PROBE_MAX_BYTES = 256 * 2**20

Progress = Callable[[str, int, int], None]


def free_memory_bytes(device: str) -> int | None:
    """Free memory now: CUDA `mem_get_info()` free; CPU the least of what the machine has
    available (psutil `available`, else /proc/meminfo MemAvailable) and what this process may
    still take under its limits (`process_limit_bytes`: a cgroup v2 / v1 memory limit, as a
    container sets, and `RLIMIT_AS`); None when none can be read."""
    if device == "cuda":
        return torch.cuda.mem_get_info()[0]
    machine = _machine_available_bytes()
    limit = process_limit_bytes()
    known = [x for x in (machine, limit) if x is not None]
    return min(known) if known else None


def _machine_available_bytes() -> int | None:
    """psutil `virtual_memory().available`, else /proc/meminfo MemAvailable, else None."""
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


#: cgroup files: (limit, usage) for cgroup v2 (the unified hierarchy) and v1 (the memory
#: controller); the kernel's docs, admin-guide/cgroup-v2.rst `memory.max` / `memory.current`
#: and cgroup-v1/memory.rst `memory.limit_in_bytes` / `memory.usage_in_bytes`
CGROUP_FILES = (("memory.max", "memory.current"), ("memory.limit_in_bytes", "memory.usage_in_bytes"))


def _read_int(path: str) -> int | None:
    """The integer in a one-line file; None for 'max', a missing file or anything else."""
    try:
        with open(path) as f:
            text = f.read(64).strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _cgroup_dirs() -> list[str]:
    """This process's cgroup folders (from /proc/self/cgroup: `0::/path` for v2, `N:memory:/path`
    for v1) under /sys/fs/cgroup, then the mount roots themselves (inside a container the
    process's cgroup is the namespace root)."""
    out: list[str] = []
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                parts = line.strip().split(":", 2)
                if len(parts) != 3:
                    continue
                _, controllers, rel = parts
                if controllers == "":
                    out.append("/sys/fs/cgroup" + rel.rstrip("/"))
                elif "memory" in controllers.split(","):
                    out.append("/sys/fs/cgroup/memory" + rel.rstrip("/"))
    except OSError:
        pass
    return out + ["/sys/fs/cgroup", "/sys/fs/cgroup/memory"]


def cgroup_free_bytes() -> int | None:
    """What the memory cgroup still lets this process take: limit - usage of the first cgroup
    folder with a limit (v2 `memory.max` - `memory.current`, v1 `memory.limit_in_bytes` -
    `memory.usage_in_bytes`; v1's "no limit" is a huge number, taken as none); None with no limit."""
    for folder in _cgroup_dirs():
        for limit_name, usage_name in CGROUP_FILES:
            limit = _read_int(f"{folder}/{limit_name}")
            if limit is None or limit >= 2**60:  # 'max', absent, or v1's page-rounded LONG_MAX
                continue
            usage = _read_int(f"{folder}/{usage_name}") or 0
            return max(limit - usage, 0)
    return None


def address_space_free_bytes() -> int | None:
    """What `RLIMIT_AS` (ulimit -v) still lets this process map: the soft limit less the
    current virtual size (/proc/self/status VmSize); None when unlimited or unreadable."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    except (ImportError, OSError, ValueError):
        return None
    if soft == resource.RLIM_INFINITY or soft < 0:
        return None
    used = 0
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    used = int(line.split()[1]) * 1024
                    break
    except OSError:
        pass
    return max(soft - used, 0)


def process_limit_bytes() -> int | None:
    """The least of `cgroup_free_bytes` and `address_space_free_bytes`: memory this process may
    still allocate whatever the machine has free (a container's limit, `ulimit -v`); None when
    neither limits it."""
    known = [x for x in (cgroup_free_bytes(), address_space_free_bytes()) if x is not None]
    return min(known) if known else None


def resolve_device(device: str) -> str:
    """'auto' -> 'cuda' when torch sees a GPU, else 'cpu'. Raises KvcalcError for 'cuda'
    without one and for unknown names."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise KvcalcError(
            "--device cuda: torch sees no CUDA GPU (torch.cuda.is_available() is False); use --device cpu"
        )
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
