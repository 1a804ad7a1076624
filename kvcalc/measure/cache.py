"""The KV cache as torch tensors: each KV format's storage (plain dtypes, int8/int4 with group
scales, llama.cpp blocks as raw uint8), random fills, dequantization, and one layer's cache.

Shapes: K (B, H_kv, T, D_k) and V (B, H_kv, T, D_v) per full/sliding layer (a sliding layer at
T = min(seq_len, window), written as a ring buffer); an MLA latent (B, T, kv_lora_rank +
qk_rope_head_dim). Bytes come from `kvcalc.calc.kv_cache` and nowhere else.

Sources: llama.cpp block layouts (ggml/src/ggml-common.h block_q8_0, block_q4_0, block_q4_1,
block_iq4_nl; ggml-quants.c `dequantize_row_q4_0`: low nibbles are values 0..15, high nibbles
16..31).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import cast

import torch

from kvcalc.calc import kv_cache
from kvcalc.errors import KvcalcError
from kvcalc.formats import StorageFormat
from kvcalc.measure.sizing import Sizing
from kvcalc.schema import LayerSpec

#: llama.cpp block formats this command can dequantize (q5_0/q5_1 are refused).
GGML_DEQUANT = ("q8_0", "q4_0", "q4_1", "iq4_nl")
#: ggml-quants.c kvalues_iq4nl
IQ4NL_VALUES = (-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113)
_SCALE_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16, "fp8_e4m3": torch.float8_e4m3fn}


def is_ggml(fmt: StorageFormat) -> bool:
    """True for llama.cpp block formats (no torch dtype: stored as raw uint8 blocks)."""
    return fmt.torch_dtype is None


def scale_dtype(fmt: StorageFormat) -> torch.dtype | None:
    """The torch dtype of a group-quantized format's scales (from its name `int4:g64:fp32`,
    default fp16), or None for formats without group scales. Checked against `scale_bytes`."""
    if not fmt.quant_group_size or is_ggml(fmt):
        return None
    parts = fmt.name.split(":")
    dt = _SCALE_DTYPES[parts[2] if len(parts) >= 3 else "fp16"]
    if dt.itemsize != fmt.scale_bytes:
        raise KvcalcError(f"{fmt.name}: scale of {fmt.scale_bytes} B has no matching torch dtype")
    return dt


def row_shapes(fmt: StorageFormat, d: int) -> list[tuple[int, torch.dtype]]:
    """(last-dim size, dtype) of the tensors that hold one row of `d` values in `fmt`:
    plain: [(d, dtype)]; int8 with groups: [(d, int8), (d/G, scale)]; int4: [(d/2, uint8),
    (d/G, scale)]; llama.cpp blocks: [(d/32 x block_bytes, uint8)]. Their bytes sum to
    `fmt.bytes_for(d)` (a test checks it for every format)."""
    fmt.bytes_for(d)  # raises KvcalcError when d is not a whole number of blocks
    if is_ggml(fmt):
        return [(d // fmt.block_values * fmt.block_bytes, torch.uint8)]
    sd = scale_dtype(fmt)
    base = fmt.name.split(":")[0]
    group = cast(int, fmt.quant_group_size)  # set on every format with scales (int4, int8 with groups)
    if base == "int4":
        return [(d // 2, torch.uint8), (d // group, sd)]
    if sd is not None:
        return [(d, torch.int8), (d // group, sd)]
    return [(d, getattr(torch, cast(str, fmt.torch_dtype)))]  # a plain format names its torch dtype


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

    fmt: StorageFormat
    d: int
    parts: list[torch.Tensor]
    tensor_scale: float = 0.01

    @classmethod
    def empty(cls, fmt: StorageFormat, prefix: tuple[int, ...], t: int, d: int, device: str) -> Store:
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
        for p, r in zip(self.parts, row.parts, strict=True):
            p[..., slot : slot + 1, :].copy_(r)

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
            g = cast(int, self.fmt.quant_group_size)  # a second part is the group scales
            s = self.parts[1][..., :n, :].to(dtype)
            return (x.to(dtype).unflatten(-1, (self.d // g, g)) * s.unsqueeze(-1)).flatten(-2)
        if base == "int8":
            return x.to(dtype) * self.tensor_scale
        return x if x.dtype == dtype else x.to(dtype)


def _fill_ggml_scales(data: torch.Tensor, fmt: StorageFormat) -> None:
    """Overwrite each block's fp16 scale (and q4_1's fp16 min) with small finite values,
    one batch row at a time to bound the temporary."""
    nb, bb = data.shape[-1] // fmt.block_bytes, fmt.block_bytes
    n_half = 2 if fmt.name == "q4_1" else 1
    for row in data.reshape(data.shape[0], -1, nb, bb) if data.dim() > 1 else [data]:
        s = torch.empty(*row.shape[:-1], n_half, dtype=torch.float16, device=data.device).uniform_(0.01, 0.02)
        row[..., : 2 * n_half].copy_(s.view(torch.uint8))


_TABLES: dict[tuple[torch.dtype, str], torch.Tensor] = {}


def _iq4nl_table(dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """The iq4_nl value table on `device`, made once (no host copy inside a CUDA graph)."""
    key = (dtype, str(device))
    if key not in _TABLES:
        _TABLES[key] = torch.tensor(IQ4NL_VALUES, dtype=dtype, device=device)
    return _TABLES[key]


def _dequant_ggml(x: torch.Tensor, fmt: StorageFormat, d: int, dtype: torch.dtype) -> torch.Tensor:
    """llama.cpp blocks (…, n, d/32 x block_bytes) uint8 -> (…, n, d) `dtype`."""
    if fmt.name not in GGML_DEQUANT:
        raise KvcalcError(
            f"--kv-dtype {fmt.name}: measure can time {', '.join(GGML_DEQUANT)} "
            f"of the llama.cpp formats; use kvcalc estimate for {fmt.name}'s bytes"
        )
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


def allocate_layer(spec: LayerSpec, plan: Sizing, device: str) -> LayerState:
    """K (B, H_kv, T', D_k) and V (B, H_kv, T', D_v) with T' = tokens_cached (window length for
    a sliding layer), or an MLA latent (B, T', D_latent); empty, then filled with random values."""
    b, t = plan.batch, kv_cache.tokens_cached(spec, plan.seq_len)
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
