"""`kvcalc measure`: allocate the real KV cache with PyTorch, time decode steps, and put the
engine's prediction beside what the allocator, the device and the clock say.

Imported only by the `measure` command (torch loads when this package is imported). The parts:
`plan` (pure: which layers, the engine's bytes, the workspace, the fit check), `cache` (each KV
format as torch storage, one layer's cache), `attention` (the backends and one decode step),
`device` (device, memory readings, bandwidth probe, percentiles), `runner` (`run`) and `result`
(`MeasureResult`).

Flow (`run`): plan (pure: which layers, the engine's bytes, the workspace) -> refuse if it does
not fit -> bandwidth probe -> allocate and fill the cache (progress) -> read the allocator and
the device -> [weights] -> warm up -> timed decode steps -> free everything (try/finally) ->
a `MeasureResult`. Nothing is returned, and so nothing is printed, unless the whole run finished.

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
from kvcalc.measure.device import (
    CPU_PROBE_MAX_BYTES,
    GIB,
    GPU_PROBE_BYTES,
    Progress,
    free_memory_bytes,
    probe_bandwidth,
    resolve_device,
)
from kvcalc.measure.sizing import Plan, check_fits, compute_dtype_for, make_plan, pick_layers, weight_shapes
from kvcalc.measure.result import MeasureResult
from kvcalc.measure.runner import CPU_DEFAULT_STEPS, CUDA_BLOCK_BYTES, GPU_MIN_STEPS, run

__all__ = [
    "CPU_DEFAULT_STEPS", "CPU_PROBE_MAX_BYTES", "CUDA_BLOCK_BYTES", "GGML_DEQUANT", "GIB", "GPU_MIN_STEPS",
    "GPU_PROBE_BYTES", "IQ4NL_VALUES", "LayerState", "MeasureResult", "Plan", "Progress", "Store",
    "allocate_layer", "attend", "attention_scale", "check_fits", "compute_dtype_for", "free_memory_bytes",
    "is_ggml", "layer_step", "make_plan", "pick_layers", "probe_bandwidth", "resolve_backend",
    "resolve_device", "row_shapes", "run", "scale_dtype", "slot_and_len", "weight_shapes",
]
