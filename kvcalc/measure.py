"""`kvcalc measure`: allocate the real KV cache with PyTorch, time decode steps, and put the
engine's prediction beside what the allocator, the device and the clock say.

Imported only by the `measure` command (torch loads here, at the top of this module).

Flow (`run`): plan (pure: which layers, the engine's bytes, the workspace) -> refuse if it does
not fit -> bandwidth probe -> allocate and fill the cache (progress) -> read the allocator and
the device -> [weights] -> warm up -> timed decode steps -> free everything (try/finally) ->
a `MeasureResult`. Nothing is returned, and so nothing is printed, unless the whole run finished.

Shapes: K (B, H_kv, T, D_k) and V (B, H_kv, T, D_v) per full/sliding layer (a sliding layer at
T = min(seq_len, window), written as a ring buffer); an MLA latent (B, T, kv_lora_rank +
qk_rope_head_dim). Queries (B, H_q, D). Bytes come from `kvcalc.engine` and nowhere else.

Sources: attention softmax(q K^T / sqrt(d)) V (Vaswani et al. 2017); GQA grouping (Ainslie et
al. 2023, arXiv:2305.13245); MLA absorbed decode over the latent (DeepSeek-V2, arXiv:2405.04434,
section 2.1.2 and appendix C); CUDA caching allocator: blocks rounded up to 512 B
(c10/cuda/CUDACachingAllocator.cpp `kMinBlockSize = 512`, `round_size`); llama.cpp block layouts
(ggml/src/ggml-common.h block_q8_0, block_q4_0, block_q4_1, block_iq4_nl; ggml-quants.c
`dequantize_row_q4_0`: low nibbles are values 0..15, high nibbles 16..31).
"""

from __future__ import annotations

import math
import os
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable

import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict

from kvcalc import engine
from kvcalc.dtypes import KvFormat
from kvcalc.errors import KvcalcError
from kvcalc.schema import LayerSpec, ModelSpec

GIB = 2**30
#: CUDA caching allocator block granularity (CUDACachingAllocator.cpp kMinBlockSize).
CUDA_BLOCK_BYTES = 512
#: timed steps: at least this many on a GPU; the CPU default is smaller, for speed.
GPU_MIN_STEPS = 30
CPU_DEFAULT_STEPS = 8
#: the device read probe: >= 2 GiB on a GPU; on the CPU a smaller one that fits.
GPU_PROBE_BYTES = 2 * GIB
CPU_PROBE_MAX_BYTES = 256 * 2**20
#: llama.cpp block formats this command can dequantize (q5_0/q5_1 are refused).
GGML_DEQUANT = ("q8_0", "q4_0", "q4_1", "iq4_nl")
#: ggml-quants.c kvalues_iq4nl
IQ4NL_VALUES = (-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113)
_SCALE_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16,
                 "fp8_e4m3": torch.float8_e4m3fn}

Progress = Callable[[str, int, int], None]


# ----- the result --------------------------------------------------------------------------

class MeasureResult(BaseModel):
    """The result of `kvcalc measure` (its JSON keys are a public contract).

    Bytes are of the layers measured (`layers_measured` of `n_layers`); `model_kv_bytes` is the
    engine's figure for the whole model, and `model_step_s_median` the measured median scaled
    to the whole model by KV bytes read (equal to the median when every layer was measured).
    `predicted_step_s` = bytes read per step / the bandwidth probed in this run (calibrated);
    `predicted_step_s_table` uses the GPU table's bandwidth (None on a CPU or an unknown GPU).
    `error_percent` = 100 x (predicted - measured) / measured. Memory fields that do not apply
    on this device are None.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: str
    device: str
    device_name: str
    backend: str
    kv_dtype: str
    compute_dtype: str
    seq_len: int
    batch: int
    n_layers: int
    layers_measured: int
    layer_indices: list[int]
    steps: int
    warmup_steps: int
    cuda_graph: bool
    with_weights: bool
    predicted_kv_bytes: int
    measured_kv_bytes: int
    kv_bytes_equal: bool
    model_kv_bytes: int
    allocator_requested_delta_bytes: int | None
    allocator_allocated_delta_bytes: int | None
    allocator_allocated_expected_bytes: int | None
    device_used_delta_bytes: int | None
    nvml_used_delta_bytes: int | None
    cuda_context_bytes: int | None
    rss_delta_bytes: int | None
    weight_bytes: int
    bytes_read_per_step: int
    predicted_step_s: float
    predicted_step_s_table: float | None
    measured_step_s_median: float
    measured_step_s_p10: float
    measured_step_s_p90: float
    model_step_s_median: float
    achieved_bytes_per_s: float
    probe_bytes: int
    probe_bytes_per_s: float
    table_gpu: str | None
    table_bytes_per_s: float | None
    fraction_of_probe: float
    fraction_of_table: float | None
    error_percent: float
    error_percent_table: float | None
    notes: list[str]


# ----- formats as torch storage -----------------------------------------------------------

def is_ggml(fmt: KvFormat) -> bool:
    """True for llama.cpp block formats (no torch dtype: stored as raw uint8 blocks)."""
    return fmt.torch_dtype is None


def scale_dtype(fmt: KvFormat) -> torch.dtype | None:
    """The torch dtype of a group-quantized format's scales (from its name `int4:g64:fp32`,
    default fp16), or None for formats without group scales. Checked against `scale_bytes`."""
    if not fmt.group_size or is_ggml(fmt):
        return None
    parts = fmt.name.split(":")
    dt = _SCALE_DTYPES[parts[2] if len(parts) >= 3 else "fp16"]
    if dt.itemsize != fmt.scale_bytes:
        raise KvcalcError(f"{fmt.name}: scale of {fmt.scale_bytes} B has no matching torch dtype")
    return dt


def row_shapes(fmt: KvFormat, d: int) -> list[tuple[int, torch.dtype]]:
    """(last-dim size, dtype) of the tensors that hold one row of `d` values in `fmt`:
    plain: [(d, dtype)]; int8 with groups: [(d, int8), (d/G, scale)]; int4: [(d/2, uint8),
    (d/G, scale)]; llama.cpp blocks: [(d/32 x block_bytes, uint8)]. Their bytes sum to
    `fmt.bytes_for(d)` (a test checks it for every format)."""
    fmt.bytes_for(d)  # raises KvcalcError when d is not a whole number of blocks
    if is_ggml(fmt):
        return [(d // fmt.block_values * fmt.block_bytes, torch.uint8)]
    sd = scale_dtype(fmt)
    base = fmt.name.split(":")[0]
    if base == "int4":
        return [(d // 2, torch.uint8), (d // fmt.group_size, sd)]
    if sd is not None:
        return [(d, torch.int8), (d // fmt.group_size, sd)]
    return [(d, getattr(torch, fmt.torch_dtype))]


def _fill(t: torch.Tensor) -> None:
    """Random values in place, never zeros, never NaN/inf, no temporaries (commits the pages)."""
    if t.dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64):
        t.normal_()
    elif t.dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        # random bytes with bit 6 cleared: exponent field <= 7 (e4m3) / <= 15 (e5m2), so every
        # value is finite with |x| < 2 (NaN/inf need that bit)
        t.view(torch.uint8).random_(0, 256).bitwise_and_(0xBF)
    elif t.dtype == torch.int8:
        t.random_(-128, 128)
    else:
        t.random_(0, 256)


def _fill_scale(t: torch.Tensor) -> None:
    """Small positive scales: uniform [0.01, 0.02) (fp8 scales: bytes 0x20..0x27 = 0.125..0.23)."""
    if t.dtype == torch.float8_e4m3fn:
        t.view(torch.uint8).random_(0x20, 0x28)
    else:
        t.uniform_(0.01, 0.02)


@dataclass
class Store:
    """One cached quantity (K, V or an MLA latent) of `d` values per row in `fmt`.

    `parts[0]` holds the values, `parts[1]` (when present) the group scales; both shaped
    (*prefix, T, last). `tensor_scale` is the per-tensor scale of plain int8 (outside the
    cache, as in vLLM; not counted, as the engine does not count it).
    """

    fmt: KvFormat
    d: int
    parts: list[torch.Tensor]
    tensor_scale: float = 0.01

    @classmethod
    def empty(cls, fmt: KvFormat, prefix: tuple[int, ...], t: int, d: int, device: str) -> Store:
        parts = [torch.empty(*prefix, t, last, dtype=dt, device=device) for last, dt in row_shapes(fmt, d)]
        return cls(fmt, d, parts)

    @property
    def nbytes(self) -> int:
        """Storage bytes of every tensor (untyped_storage().nbytes())."""
        return sum(p.untyped_storage().nbytes() for p in self.parts)

    def fill(self) -> None:
        _fill(self.parts[0])
        for p in self.parts[1:]:
            _fill_scale(p)
        if is_ggml(self.fmt):
            _fill_ggml_scales(self.parts[0], self.fmt)

    def write(self, slot: int, row: Store) -> None:
        """Write one token (a Store with T = 1) at position `slot` along the T axis."""
        for p, r in zip(self.parts, row.parts):
            p[..., slot:slot + 1, :].copy_(r)

    def dequant(self, n: int, dtype: torch.dtype) -> torch.Tensor:
        """The first `n` tokens as `dtype`, shape (*prefix, n, d). Native float formats of the
        compute dtype are a view (no copy); others are dequantized into a new tensor."""
        x = self.parts[0][..., :n, :]
        if is_ggml(self.fmt):
            return _dequant_ggml(x, self.fmt, self.d, dtype)
        base = self.fmt.name.split(":")[0]
        if base == "int4":
            lo, hi = (x & 0x0F), (x >> 4)
            x = torch.stack((lo, hi), dim=-1).flatten(-2).to(dtype) - 8  # value 2i low, 2i+1 high
        if len(self.parts) > 1:
            g = self.fmt.group_size
            s = self.parts[1][..., :n, :].to(dtype)
            return (x.to(dtype).unflatten(-1, (self.d // g, g)) * s.unsqueeze(-1)).flatten(-2)
        if base == "int8":
            return x.to(dtype) * self.tensor_scale
        return x if x.dtype == dtype else x.to(dtype)


def _fill_ggml_scales(data: torch.Tensor, fmt: KvFormat) -> None:
    """Overwrite each block's fp16 scale (and q4_1's fp16 min) with small finite values,
    one batch row at a time to bound the temporary."""
    nb, bb = data.shape[-1] // fmt.block_bytes, fmt.block_bytes
    n_half = 2 if fmt.name == "q4_1" else 1
    for row in data.reshape(data.shape[0], -1, nb, bb) if data.dim() > 1 else [data]:
        s = torch.empty(*row.shape[:-1], n_half, dtype=torch.float16, device=data.device).uniform_(0.01, 0.02)
        row[..., :2 * n_half].copy_(s.view(torch.uint8))


_TABLES: dict[tuple[torch.dtype, str], torch.Tensor] = {}


def _iq4nl_table(dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """The iq4_nl value table on `device`, made once (no host copy inside a CUDA graph)."""
    key = (dtype, str(device))
    if key not in _TABLES:
        _TABLES[key] = torch.tensor(IQ4NL_VALUES, dtype=dtype, device=device)
    return _TABLES[key]


def _dequant_ggml(x: torch.Tensor, fmt: KvFormat, d: int, dtype: torch.dtype) -> torch.Tensor:
    """llama.cpp blocks (…, n, d/32 x block_bytes) uint8 -> (…, n, d) `dtype`."""
    if fmt.name not in GGML_DEQUANT:
        raise KvcalcError(f"--kv-dtype {fmt.name}: measure can time {', '.join(GGML_DEQUANT)} "
                          f"of the llama.cpp formats; use kvcalc estimate for {fmt.name}'s bytes")
    nb = d // 32
    blk = x.unflatten(-1, (nb, fmt.block_bytes))
    scale = blk[..., 0:2].contiguous().view(torch.float16).to(dtype)  # (…, n, nb, 1)
    if fmt.name == "q8_0":
        return (blk[..., 2:].view(torch.int8).to(dtype) * scale).flatten(-2)
    qs = blk[..., 4:20] if fmt.name == "q4_1" else blk[..., 2:18]
    q = torch.cat((qs & 0x0F, qs >> 4), dim=-1)  # (…, 32): low nibbles first
    if fmt.name == "iq4_nl":
        table = _iq4nl_table(dtype, x.device)
        return (table[q.long()] * scale).flatten(-2)
    if fmt.name == "q4_1":
        m = blk[..., 2:4].contiguous().view(torch.float16).to(dtype)
        return (q.to(dtype) * scale + m).flatten(-2)
    return ((q.to(dtype) - 8) * scale).flatten(-2)


# ----- attention ---------------------------------------------------------------------------

def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, backend: str) -> torch.Tensor:
    """Decode attention of one token: q (B, H_q, D_k) over k (B, H_kv, n, D_k), v (B, H_kv, n,
    D_v) -> (B, H_q, D_v) = softmax(q K^T x scale) V, query head h reading KV head h // G
    (G = H_q / H_kv; the cache is never expanded).

    backends: 'matmul' groups q as (B, H_kv, G, D_k) and does two batched matmuls with the
    softmax in fp32; 'sdpa' is torch's scaled_dot_product_attention(enable_gqa=True);
    'flash' is flash-attn's flash_attn_func, else FlashInfer's single_decode_with_kv_cache
    (CUDA, fp16/bf16 only; not exercised on the CPU).
    """
    b, hq, dk = q.shape
    hkv = k.shape[1]
    if backend == "matmul":
        qg = q.view(b, hkv, hq // hkv, dk)
        s = torch.matmul(qg, k.transpose(-1, -2)).float() * scale        # (B, H_kv, G, n)
        p = torch.softmax(s, dim=-1).to(v.dtype)
        return torch.matmul(p, v).reshape(b, hq, v.shape[-1])             # (B, H_q, D_v)
    if backend == "sdpa":
        out = F.scaled_dot_product_attention(q.unsqueeze(2), k, v, scale=scale, enable_gqa=hq != hkv)
        return out.squeeze(2)
    if backend == "flash-attn":  # GPU path, untested on CPU
        from flash_attn import flash_attn_func

        out = flash_attn_func(q.unsqueeze(1), k.transpose(1, 2), v.transpose(1, 2), softmax_scale=scale)
        return out.squeeze(1)
    if backend == "flashinfer":  # GPU path, untested on CPU
        import flashinfer

        return torch.stack([flashinfer.single_decode_with_kv_cache(q[i], k[i], v[i], kv_layout="HND",
                                                                   sm_scale=scale) for i in range(b)])
    raise KvcalcError(f"--backend: unknown backend '{backend}'; use auto, sdpa, matmul or flash")


def resolve_backend(backend: str, device: str) -> str:
    """'auto' -> 'sdpa'; 'flash' -> 'flash-attn' or 'flashinfer' when importable (CUDA only).
    Raises KvcalcError when the asked-for backend cannot run here."""
    if backend in ("auto", "sdpa"):
        return "sdpa"
    if backend == "matmul":
        return "matmul"
    if backend == "flash":
        if device != "cuda":
            raise KvcalcError("--backend flash needs CUDA; use --backend sdpa or matmul on the CPU")
        for mod, name in (("flash_attn", "flash-attn"), ("flashinfer", "flashinfer")):
            try:
                __import__(mod)
                return name
            except ImportError:
                continue
        raise KvcalcError("--backend flash: neither flash-attn nor flashinfer is installed; use sdpa")
    raise KvcalcError(f"--backend: unknown backend '{backend}'; use auto, sdpa, matmul or flash")


# ----- the plan (pure: engine numbers, no tensors) ------------------------------------------

@dataclass(frozen=True)
class Plan:
    """What will be allocated: `layer_indices` (caching layers measured), the engine's bytes
    for them (`predicted_kv_bytes`) and for the whole model (`model_kv_bytes`), and the
    workspace the steps need beside the cache (`workspace_bytes`, `weight_bytes`)."""

    model: ModelSpec
    seq_len: int
    batch: int
    k_fmt: KvFormat
    v_fmt: KvFormat
    layer_indices: tuple[int, ...]
    predicted_kv_bytes: int
    model_kv_bytes: int
    workspace_bytes: int
    weight_bytes: int
    compute_dtype: torch.dtype

    @property
    def layers(self) -> list[LayerSpec]:
        return [self.model.layers[i] for i in self.layer_indices]

    @property
    def needed_bytes(self) -> int:
        return self.predicted_kv_bytes + self.workspace_bytes + self.weight_bytes


def pick_layers(model: ModelSpec, k: int | None) -> tuple[int, ...]:
    """Indices of the caching layers to measure: all of them, or `k` spread over the layer
    kinds in proportion (at least one of each kind while k allows), first of each kind first."""
    by_kind: dict[str, list[int]] = {}
    for i, layer in enumerate(model.layers):
        if layer.caches_kv:
            by_kind.setdefault(layer.kind, []).append(i)
    total = sum(len(v) for v in by_kind.values())
    if total == 0:
        raise KvcalcError(f"{model.name} has no layer with a KV cache (mamba/linear only): nothing to measure")
    if k is None or k >= total:
        return tuple(sorted(i for v in by_kind.values() for i in v))
    take = {kind: 0 for kind in by_kind}
    for kind in list(by_kind)[:k]:
        take[kind] = 1
    while sum(take.values()) < k:  # next layer to the kind furthest below its share
        kind = max(by_kind, key=lambda x: len(by_kind[x]) / total - take[x] / k
                   if take[x] < len(by_kind[x]) else -1)
        take[kind] += 1
    return tuple(sorted(i for kind, n in take.items() for i in by_kind[kind][:n]))


def compute_dtype_for(k_fmt: KvFormat, device: str) -> torch.dtype:
    """Attention runs in the cache's own dtype for fp16/bf16/fp32; quantized formats (fp8, int8,
    int4, llama.cpp blocks) are dequantized per layer to bf16 on CUDA, fp32 on the CPU."""
    if k_fmt.torch_dtype in ("float16", "bfloat16", "float32") and not k_fmt.group_size:
        return getattr(torch, k_fmt.torch_dtype)
    return torch.bfloat16 if device == "cuda" else torch.float32


def weight_shapes(model: ModelSpec) -> list[tuple[int, int]]:
    """Per-layer projection matrices (in, out) for --with-weights: QKV (hidden -> (H_q + 2 H_kv)
    D), output (H_q D_v -> hidden), MLP gate+up (hidden -> 2 I) and down (I -> hidden) for a
    gated MLP (plain: up and down). MoE: the experts one token reads (n_experts_per_token x
    moe_intermediate_size, + shared). MLA: absorbed q (hidden -> H_q x latent), latent down
    (hidden -> latent), absorbed output (H_q x kv_lora_rank -> hidden).
    Raises KvcalcError without hidden_size or intermediate_size."""
    h = model.hidden_size
    inter = model.intermediate_size
    if model.n_experts and model.moe_intermediate_size:
        inter = (model.n_experts_per_token or 1) * model.moe_intermediate_size + (model.shared_expert_intermediate_size or 0)
    if h is None or inter is None:
        raise KvcalcError(f"--with-weights: {model.name} needs hidden_size and intermediate_size in its config")
    hq, d = model.n_heads, model.resolved_head_dim
    if model.attention == "mla":
        attn = [(h, hq * d), (h, d), (hq * model.kv_lora_rank, h)]
    else:
        hkv, dv = model.resolved_n_kv_heads, model.resolved_v_head_dim
        attn = [(h, hq * d + hkv * (d + dv)), (hq * dv, h)]
    mlp = [(h, 2 * inter), (inter, h)] if model.mlp_kind == "gated" else [(h, inter), (inter, h)]
    return attn + mlp


def make_plan(model: ModelSpec, seq_len: int, batch: int, k_fmt: KvFormat, v_fmt: KvFormat,
              device: str, layers: int | None = None, with_weights: bool = False) -> Plan:
    """The engine's bytes for the layers measured and the whole model, and the workspace:
    per step the scores and probabilities (B, H_q, T) fp32, plus, for formats that are
    dequantized, one layer's K and V in the compute dtype. Raises KvcalcError."""
    idx = pick_layers(model, layers)
    chosen = [model.layers[i] for i in idx]
    predicted = engine.layers_cache_bytes(chosen, seq_len, batch, k_fmt, v_fmt)
    whole = engine.kv_cache_bytes(model, seq_len, batch, k_fmt, v_fmt)
    cd = compute_dtype_for(k_fmt, device)
    t_max = max(engine.tokens_cached(x, seq_len) for x in chosen)
    work = 2 * batch * model.n_heads * t_max * 4
    native = k_fmt == v_fmt and k_fmt.torch_dtype is not None and getattr(torch, k_fmt.torch_dtype) == cd \
        and not k_fmt.group_size
    if not native:
        work += max(batch * x.n_kv_heads * engine.tokens_cached(x, seq_len) * (x.head_dim_k + x.head_dim_v)
                    for x in chosen) * cd.itemsize
    wbytes = 0
    if with_weights:
        wbytes = len(idx) * sum(a * b for a, b in weight_shapes(model)) * cd.itemsize
    return Plan(model, seq_len, batch, k_fmt, v_fmt, idx, predicted, whole, work, wbytes, cd)


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


def check_fits(plan: Plan, free: int | None, device: str, make: Callable[..., Plan]) -> None:
    """Refuse (KvcalcError) when the plan needs more than `free` bytes, naming the largest
    --batch that fits, else the largest --layers at --batch 1. `make(batch=, layers=)` rebuilds
    the plan for another batch or layer count."""
    if free is None or plan.needed_bytes <= free:
        return
    what = (f"needs {plan.needed_bytes / GIB:.2f} GiB ({plan.predicted_kv_bytes:,} B of KV cache + "
            f"workspace) but {device} has {free / GIB:.2f} GiB free")
    best_b = 0
    lo, hi = 1, plan.batch - 1
    while lo <= hi:  # largest batch that fits (needed bytes grow with the batch)
        mid = (lo + hi) // 2
        if make(batch=mid, layers=len(plan.layer_indices)).needed_bytes <= free:
            best_b, lo = mid, mid + 1
        else:
            hi = mid - 1
    if best_b:
        raise KvcalcError(f"{what}; the largest --batch that fits is {best_b}")
    best_l = 0
    for k in range(len(plan.layer_indices) - 1, 0, -1):
        if make(batch=1, layers=k).needed_bytes <= free:
            best_l = k
            break
    if best_l:
        raise KvcalcError(f"{what}; even --batch 1 does not fit; the largest --layers that fits at --batch 1 is {best_l}")
    raise KvcalcError(f"{what}; even one layer at --batch 1 does not fit; use a shorter --seq-len")


# ----- the device --------------------------------------------------------------------------

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
            if device == "cuda":
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                buf.sum()
                b.record()
                b.synchronize()
                dt = a.elapsed_time(b) / 1e3
            else:
                t0 = time.perf_counter()
                buf.sum()
                dt = time.perf_counter() - t0
            if i >= 2:
                times.append(dt)
            if progress:
                progress("bandwidth probe", i + 1, reps + 2)
        return n, n / statistics.median(times)
    finally:
        del buf
        if device == "cuda":
            torch.cuda.empty_cache()


# ----- the cache and one decode step -------------------------------------------------------

@dataclass
class LayerState:
    """One measured layer: its spec, cache length, stores, this step's new row(s), weights."""

    spec: LayerSpec
    cache_len: int
    k: Store
    v: Store | None  # None for MLA (the latent serves as K and V)
    k_row: Store
    v_row: Store | None
    weights: list[torch.Tensor] = field(default_factory=list)

    @property
    def nbytes(self) -> int:
        return self.k.nbytes + (self.v.nbytes if self.v is not None else 0)

    def tensors(self) -> list[torch.Tensor]:
        out = list(self.k.parts) + (list(self.v.parts) if self.v is not None else [])
        return out


def allocate_layer(spec: LayerSpec, plan: Plan, device: str) -> LayerState:
    """K (B, H_kv, T', D_k) and V (B, H_kv, T', D_v) with T' = tokens_cached (window length for
    a sliding layer), or an MLA latent (B, T', D_latent); empty, then filled with random values."""
    b, t = plan.batch, engine.tokens_cached(spec, plan.seq_len)
    if spec.kind == "mla":
        k = Store.empty(plan.k_fmt, (b,), t, spec.head_dim_k, device)
        k_row = Store.empty(plan.k_fmt, (b,), 1, spec.head_dim_k, device)
        v = v_row = None
    else:
        pre = (b, spec.n_kv_heads)
        k = Store.empty(plan.k_fmt, pre, t, spec.head_dim_k, device)
        v = Store.empty(plan.v_fmt, pre, t, spec.head_dim_v, device)
        k_row = Store.empty(plan.k_fmt, pre, 1, spec.head_dim_k, device)
        v_row = Store.empty(plan.v_fmt, pre, 1, spec.head_dim_v, device)
    for s in (k, v, k_row, v_row):
        if s is not None:
            s.fill()
    return LayerState(spec, t, k, v, k_row, v_row)


def slot_and_len(pos: int, cache_len: int) -> tuple[int, int]:
    """Where token `pos` (0-based) is written and how many cached tokens the step reads: a full
    layer (cache_len = seq_len) writes at pos and reads pos + 1; a sliding layer's ring buffer
    of cache_len = min(seq_len, window) writes at pos mod cache_len and reads min(pos + 1,
    cache_len)."""
    return pos % cache_len, min(pos + 1, cache_len)


def layer_step(st: LayerState, q: torch.Tensor, pos: int, scale: float, backend: str,
               cd: torch.dtype, kv_lora_rank: int = 0,
               k_new: torch.Tensor | None = None, v_new: torch.Tensor | None = None) -> torch.Tensor:
    """One decode step of one layer: write the new token's K and V (or latent) at its slot,
    then attend q (B, H_q, D_k) over the tokens up to and including it -> (B, H_q, D_v).
    `k_new` / `v_new` (B, H_kv, D) override the prepared random rows for plain float formats.
    MLA (absorbed): q of width kv_lora_rank + rope against the latent (B, n, D_latent) as one
    shared KV head; the output is over the latent's first kv_lora_rank values."""
    slot, n = slot_and_len(pos, st.cache_len)
    if k_new is not None and len(st.k.parts) == 1 and not is_ggml(st.k.fmt):
        st.k.parts[0][..., slot, :].copy_(k_new)
        if st.v is not None and v_new is not None:
            st.v.parts[0][..., slot, :].copy_(v_new)
    else:
        st.k.write(slot, st.k_row)
        if st.v is not None:
            st.v.write(slot, st.v_row)
    k = st.k.dequant(n, cd)
    if st.v is None:  # MLA latent (B, n, D_latent)
        return attend(q, k.unsqueeze(1), k[..., :kv_lora_rank].unsqueeze(1), scale, backend)
    return attend(q, k, st.v.dequant(n, cd), scale, backend)


def attention_scale(model: ModelSpec) -> float:
    """1 / sqrt(d): d = head_dim; MLA: qk_nope_head_dim + qk_rope_head_dim (DeepSeek-V2), else the latent width."""
    if model.attention == "mla":
        d = (model.qk_nope_head_dim or 0) + model.qk_rope_head_dim if model.qk_nope_head_dim else model.resolved_head_dim
        return 1 / math.sqrt(d)
    return 1 / math.sqrt(model.resolved_head_dim)


# ----- run ---------------------------------------------------------------------------------

def _pct(xs: list[float], p: float) -> float:
    """Percentile p (0..100) by linear interpolation between sorted samples."""
    s = sorted(xs)
    i = (len(s) - 1) * p / 100
    lo = math.floor(i)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (i - lo)


def run(model: ModelSpec, seq_len: int, batch: int, k_fmt: KvFormat, v_fmt: KvFormat, *,
        device: str = "auto", layers: int | None = None, steps: int | None = None,
        backend: str = "auto", with_weights: bool = False, cuda_graph: bool = False,
        progress: Progress | None = None) -> MeasureResult:
    """Allocate the cache of `model` at `seq_len` x `batch` as the engine predicts it, time
    decode steps, and compare (see the module docstring). Raises KvcalcError (before
    allocating) for a run that does not fit, an unsupported format or backend; frees every
    tensor on any error or Ctrl-C."""
    notes: list[str] = []
    requested = device
    device = resolve_device(device)
    notes.append(f"device {device}" + (" (auto: CUDA present)" if requested == "auto" and device == "cuda"
                                       else " (auto: no CUDA)" if requested == "auto" else ""))
    be = resolve_backend(backend, device)
    for f in {k_fmt.name: k_fmt, v_fmt.name: v_fmt}.values():
        if is_ggml(f) and f.name not in GGML_DEQUANT:
            raise KvcalcError(f"--kv-dtype {f.name}: measure allocates and times {', '.join(GGML_DEQUANT)} of the "
                              f"llama.cpp block formats; use kvcalc estimate for {f.name}'s bytes")
    if cuda_graph and device != "cuda":
        raise KvcalcError("--cuda-graph needs CUDA; drop it on the CPU")
    if be.startswith("flash") and (k_fmt.name != v_fmt.name or model.attention == "mla"):
        raise KvcalcError("--backend flash supports standard attention only; use sdpa for MLA")
    if steps is None:
        steps = GPU_MIN_STEPS if device == "cuda" else CPU_DEFAULT_STEPS
    if device == "cuda" and steps < GPU_MIN_STEPS:
        notes.append(f"--steps {steps} raised to {GPU_MIN_STEPS} (the GPU minimum)")
        steps = GPU_MIN_STEPS
    if device == "cpu":
        notes.append(f"CPU: {steps} timed steps (perf_counter); a GPU run uses at least {GPU_MIN_STEPS} with CUDA events")
    warmup = 5 if device == "cuda" else 2
    ctx_bytes = None
    gpu_row = None
    l2 = 0
    if device == "cuda":
        from kvcalc.gpus import gpu_for_device_name

        torch.cuda.init()
        torch.empty(1, device="cuda")
        free0, total = torch.cuda.mem_get_info()
        # device memory in use before any tensor of ours: the CUDA context (+ other processes)
        ctx_bytes = total - free0 - torch.cuda.memory_reserved()
        dev_name = torch.cuda.get_device_name()
        gpu_row = gpu_for_device_name(dev_name)
        l2 = gpu_row.l2_bytes if gpu_row and gpu_row.l2_bytes else 128 * 2**20
    else:
        import platform

        dev_name = platform.processor() or platform.machine() or "cpu"
        notes.append("CPU: no GPU table row; the prediction uses the bandwidth probed in this run only")

    def make(batch: int = batch, layers: int | None = layers) -> Plan:
        p = make_plan(model, seq_len, batch, k_fmt, v_fmt, device, layers, with_weights)
        if l2:  # the L2 flush buffer (2 x L2) may be needed beside the cache
            p = Plan(**{**p.__dict__, "workspace_bytes": p.workspace_bytes + 2 * l2})
        return p

    plan = make()
    free = free_memory_bytes(device)
    if free is None:
        notes.append("free memory unknown (no psutil, no /proc/meminfo): not checked before allocating")
    check_fits(plan, free, device, make)

    if layers is not None and len(plan.layer_indices) < sum(x.caches_kv for x in model.layers):
        n_kv = sum(x.caches_kv for x in model.layers)
        notes.append(f"--layers {layers}: measured {len(plan.layer_indices)} of {n_kv} KV layers "
                     f"(indices {list(plan.layer_indices)}); model_step_s_median scales the median by "
                     f"model KV bytes / measured KV bytes = {plan.model_kv_bytes / plan.predicted_kv_bytes:.4g}")
    if any(not x.caches_kv for x in model.layers):
        notes.append("mamba/linear layers have no KV cache: not allocated, not timed")
    for f in {k_fmt.name: k_fmt, v_fmt.name: v_fmt}.values():
        if is_ggml(f):
            notes.append(f"{f.name}: allocated as raw uint8 llama.cpp blocks of the exact byte size "
                         f"({f.block_bytes} B / {f.block_values} values)")
    if plan.compute_dtype != (getattr(torch, k_fmt.torch_dtype) if k_fmt.torch_dtype and not k_fmt.group_size else None):
        notes.append(f"{k_fmt.name}: dequantized per layer to {str(plan.compute_dtype).removeprefix('torch.')} "
                     f"then attended (the copy adds traffic not in bytes_read_per_step)")
    if model.attention == "mla":
        notes.append("MLA: absorbed decode, q of width kv_lora_rank + rope against the latent as one shared "
                     "KV head; output over the first kv_lora_rank values")

    states: list[LayerState] = []
    extra: list[torch.Tensor] = []
    try:
        probe_n, probe_bps = probe_bandwidth(device, free, progress)
        if device == "cpu":
            notes.append(f"CPU probe: sum() over {probe_n / 2**20:.0f} MiB (a GPU probe reads >= 2 GiB)")
        # --- allocate, then read the allocator and the device
        _sync(device)
        if device == "cuda":
            torch.cuda.empty_cache()
            req0 = torch.cuda.memory_stats()["requested_bytes.all.current"]
            alloc0 = torch.cuda.memory_allocated()
            dev0 = torch.cuda.mem_get_info()[0]
            nvml0 = _nvml_used()
        rss0 = _rss() if device == "cpu" else None
        for i, li in enumerate(plan.layer_indices):
            states.append(allocate_layer(model.layers[li], plan, device))
            if progress:
                progress("allocate + fill KV", i + 1, len(plan.layer_indices))
        _sync(device)
        measured = sum(s.nbytes for s in states)
        req_d = alloc_d = alloc_exp = dev_d = nvml_d = rss_d = None
        # the row buffers (one token per layer) are allocated with the cache: count them apart
        row_tensors = [p for s in states for r in (s.k_row, s.v_row) if r is not None for p in r.parts]
        row_bytes = sum(p.untyped_storage().nbytes() for p in row_tensors)
        if device == "cuda":
            torch.cuda.empty_cache()
            req_d = torch.cuda.memory_stats()["requested_bytes.all.current"] - req0 - row_bytes
            alloc_d = torch.cuda.memory_allocated() - alloc0 - sum(
                -(-p.untyped_storage().nbytes() // CUDA_BLOCK_BYTES) * CUDA_BLOCK_BYTES for p in row_tensors)
            alloc_exp = sum(-(-p.untyped_storage().nbytes() // CUDA_BLOCK_BYTES) * CUDA_BLOCK_BYTES
                            for s in states for p in s.tensors())
            dev_d = dev0 - torch.cuda.mem_get_info()[0]
            n1 = _nvml_used()
            nvml_d = None if nvml0 is None or n1 is None else n1 - nvml0
            if "expandable_segments:True" not in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""):
                notes.append("memory_allocated rounds each block to 512 B; set "
                             "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True before CUDA starts for exact segments")
        elif rss0 is not None:
            r1 = _rss()
            rss_d = r1 - rss0 if r1 is not None else None
        else:
            notes.append("RSS delta: n/a, pip install psutil")

        # --- weights and step inputs
        cd = plan.compute_dtype
        gen_q = torch.randn(batch, model.n_heads, model.resolved_head_dim, device=device).to(cd)
        x = torch.randn(batch, model.hidden_size or 1, device=device).to(cd)
        extra += [gen_q, x]
        wbytes = 0
        if with_weights:
            for s in states:
                s.weights = [torch.empty(a, b, dtype=cd, device=device).normal_(std=a ** -0.5)
                             for a, b in weight_shapes(model)]
                wbytes += sum(w.untyped_storage().nbytes() for w in s.weights)
            notes.append("--with-weights: random QKV, output and MLP weights per layer; a whole decoder layer "
                         "is timed (no norms, no RoPE)")
        scale = attention_scale(model)
        r = model.kv_lora_rank or 0
        hq, dk = model.n_heads, model.resolved_head_dim
        hkv, dv = model.resolved_n_kv_heads, model.resolved_v_head_dim

        def layer_with_weights(st: LayerState, h: torch.Tensor, pos: int) -> torch.Tensor:
            if model.attention == "mla":
                wq, wdown, wo, *mlp = st.weights
                o = layer_step(st, (h @ wq).view(batch, hq, dk), pos, scale, be, cd, r, h @ wdown)
            else:
                wqkv, wo, *mlp = st.weights
                q, kn, vn = (h @ wqkv).split([hq * dk, hkv * dk, hkv * dv], dim=-1)
                o = layer_step(st, q.view(batch, hq, dk), pos, scale, be, cd, r,
                               kn.view(batch, hkv, dk), vn.view(batch, hkv, dv))
            h = h + o.reshape(batch, -1) @ wo
            if len(mlp) == 2 and model.mlp_kind == "gated":
                g, u = (h @ mlp[0]).chunk(2, dim=-1)
                return h + (F.silu(g) * u) @ mlp[1]
            return h + F.gelu(h @ mlp[0]) @ mlp[1]

        def step(pos: int) -> None:
            h = x
            for st in states:
                if with_weights:
                    h = layer_with_weights(st, h, pos)
                else:
                    layer_step(st, gen_q, pos, scale, be, cd, r)

        total_steps = warmup + steps
        positions = [(seq_len - total_steps + i) if seq_len >= total_steps else i % seq_len
                     for i in range(total_steps)]
        flush = None
        if device == "cuda" and plan.predicted_kv_bytes + wbytes < 4 * l2:
            flush = torch.empty(2 * l2, dtype=torch.uint8, device=device)
            extra.append(flush)
            notes.append(f"working set under 4 x L2: L2 flushed ({2 * l2 / 2**20:.0f} MiB write) before each timed step")
        graph = None
        if cuda_graph:
            positions = [seq_len - 1] * total_steps
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(3):
                    step(seq_len - 1)
            torch.cuda.current_stream().wait_stream(s)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                step(seq_len - 1)
            notes.append("CUDA graph: one step at position seq_len - 1 (reading every cached token) captured, replayed")
        times: list[float] = []
        for i, pos in enumerate(positions):
            if flush is not None:
                flush.zero_()
            if device == "cuda":
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                graph.replay() if graph is not None else step(pos)
                b.record()
                b.synchronize()
                dt = a.elapsed_time(b) / 1e3
            else:
                t0 = time.perf_counter()
                step(pos)
                dt = time.perf_counter() - t0
            if i >= warmup:
                times.append(dt)
            if progress:
                progress("decode steps", i + 1, total_steps)
        _sync(device)
    finally:
        del states[:], extra[:]
        if device == "cuda":
            torch.cuda.empty_cache()

    # --- prediction against measurement (bytes read: the engine's bytes at each step's length)
    chosen = plan.layers
    timed = positions[warmup:]
    kv_read = round(statistics.fmean(engine.layers_cache_bytes(chosen, min(p + 1, seq_len), batch, k_fmt, v_fmt)
                                     for p in timed))
    read = kv_read + wbytes
    med = statistics.median(times)
    from kvcalc.throughput import memory_time_s  # the roofline's memory term, at full bandwidth

    pred = memory_time_s(read, probe_bps)
    table_bps = float(gpu_row.hbm_bytes_per_s) if gpu_row else None
    if device == "cuda" and gpu_row is None:
        notes.append(f"'{dev_name}' has no row in the GPU table: no table prediction")
    pred_t = memory_time_s(read, table_bps) if table_bps else None
    achieved = read / med
    scale_model = plan.model_kv_bytes / plan.predicted_kv_bytes
    return MeasureResult(
        model=model.name, device=device, device_name=dev_name, backend=be, kv_dtype=k_fmt.name if k_fmt == v_fmt
        else f"{k_fmt.name}/{v_fmt.name}", compute_dtype=str(plan.compute_dtype).removeprefix("torch."),
        seq_len=seq_len, batch=batch, n_layers=model.n_layers, layers_measured=len(plan.layer_indices),
        layer_indices=list(plan.layer_indices), steps=steps, warmup_steps=warmup, cuda_graph=cuda_graph,
        with_weights=with_weights, predicted_kv_bytes=plan.predicted_kv_bytes, measured_kv_bytes=measured,
        kv_bytes_equal=measured == plan.predicted_kv_bytes, model_kv_bytes=plan.model_kv_bytes,
        allocator_requested_delta_bytes=req_d, allocator_allocated_delta_bytes=alloc_d,
        allocator_allocated_expected_bytes=alloc_exp, device_used_delta_bytes=dev_d, nvml_used_delta_bytes=nvml_d,
        cuda_context_bytes=ctx_bytes, rss_delta_bytes=rss_d, weight_bytes=wbytes, bytes_read_per_step=read,
        predicted_step_s=pred, predicted_step_s_table=pred_t, measured_step_s_median=med,
        measured_step_s_p10=_pct(times, 10), measured_step_s_p90=_pct(times, 90),
        model_step_s_median=med * scale_model if not with_weights else med * len(
            [x for x in model.layers if x.caches_kv]) / len(plan.layer_indices),
        achieved_bytes_per_s=achieved, probe_bytes=probe_n, probe_bytes_per_s=probe_bps,
        table_gpu=gpu_row.key if gpu_row else None, table_bytes_per_s=table_bps,
        fraction_of_probe=achieved / probe_bps, fraction_of_table=achieved / table_bps if table_bps else None,
        error_percent=100 * (pred - med) / med, error_percent_table=100 * (pred_t - med) / med if pred_t else None,
        notes=notes,
    )
