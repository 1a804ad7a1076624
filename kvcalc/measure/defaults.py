"""What `kvcalc measure` does when not told, and what it says before it starts (torch-free).

- The default context (no `--seq-len`): the largest power of two up to the model's
  max_position_embeddings whose KV cache (`kvcalc.calc.kv_cache`, the layers measured, at
  `--batch`) fits a small budget for the device: `CPU_BUDGET_BYTES` (32 MiB) on the CPU, free
  memory / `GPU_BUDGET_DIVISOR` (1/8) on a GPU. On the CPU attention in bf16 reads about 0.1-0.2
  GB/s (a 256 MiB llama-3.1-8b cache took 20 s on a 2-core build machine), so 32 MiB runs in
  seconds; on a GPU 1/8 of free memory reads in well under a second per step.
- Before any tensor, one line (`Announcement`) gives the bytes the run will allocate and a rough
  time (`estimate_run_s`), so a run is never a silent surprise.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kvcalc.calc import kv_cache
from kvcalc.formats import StorageFormat
from kvcalc.schema import LayerSpec

#: the default run's KV cache on the CPU, bytes (32 MiB)
CPU_BUDGET_BYTES = 32 * 2**20
#: the default run's KV cache on a GPU: free memory // this
GPU_BUDGET_DIVISOR = 8
#: the longest default context when a model states no max_position_embeddings (tokens)
NO_LIMIT_MAX_SEQ_LEN = 2**17

#: rough rates for the time estimate (bytes/s): filling the cache with random values, and a decode
#: step reading it. CPU rates are a 2-core build machine's (bf16 / fp16 attention is emulated on
#: most CPUs: ~0.2 GB/s; fp32 ~1 GB/s); GPU rates are a floor well under any datacenter GPU's.
CPU_FILL_BYTES_PER_S = 0.5e9
CPU_READ_BYTES_PER_S = {"float32": 1e9}
CPU_READ_HALF_BYTES_PER_S = 0.2e9
GPU_FILL_BYTES_PER_S = 50e9
GPU_READ_BYTES_PER_S = 0.5e12
#: a run longer than this (seconds) shows progress (a bar on a terminal, a line when piped)
FEW_SECONDS_S = 3.0


def budget_bytes(device: str, free_bytes: int | None) -> int:
    """The default run's KV budget on `device` ('cpu' or 'cuda'): `CPU_BUDGET_BYTES` on the CPU;
    free_bytes // `GPU_BUDGET_DIVISOR` on a GPU (`CPU_BUDGET_BYTES` when free memory is unknown)."""
    if device == "cuda" and free_bytes:
        return free_bytes // GPU_BUDGET_DIVISOR
    return CPU_BUDGET_BYTES


def default_seq_len(
    layers: Sequence[LayerSpec], limit: int | None, batch: int, k_fmt: StorageFormat, v_fmt: StorageFormat, budget: int
) -> int:
    """The largest power of two T <= `limit` (tokens; None: `NO_LIMIT_MAX_SEQ_LEN`) whose KV cache
    for `layers` at `batch` sequences (`kv_cache.layers_cache_bytes`, bytes) is at most `budget`
    bytes; 1 when even one token does not fit (the fit check then refuses the run by name).

    llama-3.1-8b (32 layers x 8 KV heads x 128 x 2 B x 2 = 131,072 B/token), batch 1, bf16, 32 MiB:
    256 tokens (33,554,432 B); 512 would be 67,108,864 B."""
    cap = limit or NO_LIMIT_MAX_SEQ_LEN
    T = 1 << (cap.bit_length() - 1)  # the largest power of two <= cap
    while T > 1 and kv_cache.layers_cache_bytes(list(layers), T, batch, k_fmt, v_fmt) > budget:
        T //= 2
    return T


def default_rule(device: str, free_bytes: int | None) -> str:
    """The rule in words, for the run's note and the option's help."""
    where = (
        f"1/{GPU_BUDGET_DIVISOR} of the GPU's free memory"
        if device == "cuda" and free_bytes
        else f"{CPU_BUDGET_BYTES // 2**20} MiB"
    )
    return f"the largest power of two up to the model's context whose KV cache fits {where}"


def estimate_run_s(
    kv_bytes: int, other_bytes: int, steps: int, device: str, compute_dtype: str, read_bytes_per_s: float | None = None
) -> float:
    """A rough wall time of the run, seconds: fill the cache and the other buffers (`kv_bytes` +
    `other_bytes`, bytes) at the fill rate, then `steps` decode steps (warm-up included) each
    reading `kv_bytes` at `read_bytes_per_s` (default: the device's rough rate above; on the CPU
    by `compute_dtype`, a torch dtype name like 'float32'). Only for the announcement."""
    if device == "cuda":
        fill, read = GPU_FILL_BYTES_PER_S, read_bytes_per_s or GPU_READ_BYTES_PER_S
    else:
        fill = CPU_FILL_BYTES_PER_S
        read = read_bytes_per_s or CPU_READ_BYTES_PER_S.get(compute_dtype, CPU_READ_HALF_BYTES_PER_S)
    return (kv_bytes + other_bytes) / fill + steps * kv_bytes / read


@dataclass(frozen=True)
class Announcement:
    """What a run is about to do, before any tensor: `kv_bytes` of KV cache (the layers
    measured) and `other_bytes` beside it (workspace, weights, the L2 flush buffer), at `seq_len`
    tokens x `batch` on `device`, `estimated_s` seconds (rough); `seq_len_rule` when the context
    was the default (the rule, in words)."""

    model: str
    seq_len: int
    batch: int
    device: str
    kv_bytes: int
    other_bytes: int
    estimated_s: float
    seq_len_rule: str | None = None
