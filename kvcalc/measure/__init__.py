"""`kvcalc measure`: allocate the real KV cache with PyTorch, time decode steps, and put the
engine's prediction beside what the allocator, the device and the clock say.

Importing this package costs nothing: its names load on first use (PEP 562 `__getattr__`), so
the CLI builds a `MeasureRequest` (`request`, torch-free) before torch is imported, and torch
loads with the first torch-backed name. The parts: `request` (`MeasureRequest`), `sizing`
(which layers, the engine's bytes, the workspace, the fit check), `cache` (each KV format as
torch storage, one layer's cache), `attention` (the backends and one decode step), `device`
(device, memory readings, bandwidth probe, percentiles), `runner` (`run` and its stages) and
`result` (`MeasureResult`).

Flow (`run(request, progress=...)`), one function per stage in `runner`:
  plan     -> options checked, device read, which layers and the engine's bytes, refused if
              it does not fit (nothing allocated yet)
  allocate -> [bandwidth probe first, while the memory is free] the cache filled at random
              (progress), the allocator and the device read, step inputs, [weights]
  time     -> [L2 flush buffer] [CUDA graph capture], warm-up, timed decode steps
  compare  -> predicted against measured: a `MeasureResult`
Every tensor lives in one `Resources` context manager, released (and the CUDA allocator
emptied) when the stages end, normally or not. Nothing is returned, and so nothing is printed,
unless the whole run finished.

Shapes: K (B, H_kv, T, D_k) and V (B, H_kv, T, D_v) per full/sliding layer (a sliding layer at
T = min(seq_len, window), written as a ring buffer); an MLA latent (B, T, kv_lora_rank +
qk_rope_head_dim). Queries (B, H_q, D). Bytes come from `kvcalc.calc.kv_cache` and nowhere else.

Sources: attention softmax(q K^T / sqrt(d)) V (Vaswani et al. 2017); GQA grouping (Ainslie et
al. 2023, arXiv:2305.13245); MLA absorbed decode over the latent (DeepSeek-V2, arXiv:2405.04434,
section 2.1.2 and appendix C); CUDA caching allocator: blocks rounded up to 512 B
(c10/cuda/CUDACachingAllocator.cpp `kMinBlockSize = 512`, `round_size`); llama.cpp block layouts
(ggml/src/ggml-common.h block_q8_0, block_q4_0, block_q4_1, block_iq4_nl; ggml-quants.c
`dequantize_row_q4_0`: low nibbles are values 0..15, high nibbles 16..31).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

#: public name -> the submodule that defines it (loaded on first access)
_SOURCES = {
    "attend": "attention",
    "attention_scale": "attention",
    "layer_step": "attention",
    "resolve_backend": "attention",
    "slot_and_len": "attention",
    "GGML_DEQUANT": "cache",
    "IQ4NL_VALUES": "cache",
    "LayerState": "cache",
    "Store": "cache",
    "allocate_layer": "cache",
    "is_ggml": "cache",
    "row_shapes": "cache",
    "scale_dtype": "cache",
    "CPU_PROBE_MAX_BYTES": "device",
    "GIB": "device",
    "GPU_PROBE_BYTES": "device",
    "Progress": "device",
    "free_memory_bytes": "device",
    "probe_bandwidth": "device",
    "resolve_device": "device",
    "Sizing": "sizing",
    "check_fits": "sizing",
    "compute_dtype_for": "sizing",
    "make_plan": "sizing",
    "pick_layers": "sizing",
    "weight_shapes": "sizing",
    "MeasureRequest": "request",
    "Announcement": "defaults",
    "CPU_BUDGET_BYTES": "defaults",
    "GPU_BUDGET_DIVISOR": "defaults",
    "budget_bytes": "defaults",
    "default_seq_len": "defaults",
    "estimate_run_s": "defaults",
    "MeasureResult": "result",
    "CPU_DEFAULT_STEPS": "runner",
    "CUDA_BLOCK_BYTES": "runner",
    "GPU_MIN_STEPS": "runner",
    "run": "runner",
}

__all__ = [  # == sorted(_SOURCES) (a test checks it); a literal, so linters see the names
    "Announcement",
    "CPU_BUDGET_BYTES",
    "CPU_DEFAULT_STEPS",
    "CPU_PROBE_MAX_BYTES",
    "CUDA_BLOCK_BYTES",
    "GGML_DEQUANT",
    "GIB",
    "GPU_BUDGET_DIVISOR",
    "GPU_MIN_STEPS",
    "GPU_PROBE_BYTES",
    "IQ4NL_VALUES",
    "LayerState",
    "MeasureRequest",
    "MeasureResult",
    "Sizing",
    "Progress",
    "Store",
    "allocate_layer",
    "attend",
    "attention_scale",
    "budget_bytes",
    "check_fits",
    "compute_dtype_for",
    "default_seq_len",
    "estimate_run_s",
    "free_memory_bytes",
    "is_ggml",
    "layer_step",
    "make_plan",
    "pick_layers",
    "probe_bandwidth",
    "resolve_backend",
    "resolve_device",
    "row_shapes",
    "run",
    "scale_dtype",
    "slot_and_len",
    "weight_shapes",
]


def __getattr__(name: str) -> Any:  # Any: a module __getattr__ hands out names of several types
    if name in _SOURCES:
        return getattr(importlib.import_module(f"{__name__}.{_SOURCES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_SOURCES))


if TYPE_CHECKING:  # the names as static analysis sees them
    from kvcalc.measure.attention import attend, attention_scale, layer_step, resolve_backend, slot_and_len
    from kvcalc.measure.cache import (
        GGML_DEQUANT,
        IQ4NL_VALUES,
        LayerState,
        Store,
        allocate_layer,
        is_ggml,
        row_shapes,
        scale_dtype,
    )
    from kvcalc.measure.defaults import (
        CPU_BUDGET_BYTES,
        GPU_BUDGET_DIVISOR,
        Announcement,
        budget_bytes,
        default_seq_len,
        estimate_run_s,
    )
    from kvcalc.measure.device import (
        CPU_PROBE_MAX_BYTES,
        GIB,
        GPU_PROBE_BYTES,
        Progress,
        free_memory_bytes,
        probe_bandwidth,
        resolve_device,
    )
    from kvcalc.measure.request import MeasureRequest
    from kvcalc.measure.result import MeasureResult
    from kvcalc.measure.runner import CPU_DEFAULT_STEPS, CUDA_BLOCK_BYTES, GPU_MIN_STEPS, run
    from kvcalc.measure.sizing import Sizing, check_fits, compute_dtype_for, make_plan, pick_layers, weight_shapes
