"""Decode attention and one decode step of one layer: the backends (matmul, sdpa, flash-attn,
FlashInfer), the ring-buffer slot of a sliding layer, and the softmax scale.

Sources: attention softmax(q K^T / sqrt(d)) V (Vaswani et al. 2017); GQA grouping (Ainslie et
al. 2023, arXiv:2305.13245); MLA absorbed decode over the latent (DeepSeek-V2, arXiv:2405.04434,
section 2.1.2 and appendix C).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from kvcalc.errors import KvcalcError
from kvcalc.measure.cache import LayerState, is_ggml
from kvcalc.schema import ModelSpec


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, backend: str) -> torch.Tensor:
    """Decode attention of one token: q (B, H_q, D_k) over k (B, H_kv, n, D_k), v (B, H_kv, n,
    D_v) -> (B, H_q, D_v) = softmax(q K^T x scale) V, query head h reading KV head h // G
    (G = H_q / H_kv; the cache is never expanded).

    backends: 'matmul' groups q as (B, H_kv, G, D_k) and does two batched matmuls with the
    softmax in fp32; 'sdpa' is torch's scaled_dot_product_attention(enable_gqa=True) where its
    kernel takes GQA without copying (`sdpa_gqa_native`), else SDPA over q grouped the same way;
    'flash' is flash-attn's flash_attn_func, else FlashInfer's single_decode_with_kv_cache
    (CUDA, fp16/bf16 only; not exercised on the CPU).
    """
    b, hq, dk = q.shape
    hkv = k.shape[1]
    if backend == "matmul":
        qg = q.view(b, hkv, hq // hkv, dk)
        s = torch.matmul(qg, k.transpose(-1, -2)).float() * scale  # (B, H_kv, G, n)
        p = torch.softmax(s, dim=-1).to(v.dtype)
        return torch.matmul(p, v).reshape(b, hq, v.shape[-1])  # (B, H_q, D_v)
    if backend == "sdpa":
        if hq == hkv or sdpa_gqa_native(q, k, v):
            out = F.scaled_dot_product_attention(q.unsqueeze(2), k, v, scale=scale, enable_gqa=hq != hkv)
            return out.squeeze(2)
        # the G query heads of a KV head as G query rows: the same softmax(q K^T) V, and no
        # backend expands the cache (the math backend's enable_gqa would repeat_interleave K, V)
        out = F.scaled_dot_product_attention(q.reshape(b, hkv, hq // hkv, dk), k, v, scale=scale)
        return out.reshape(b, hq, v.shape[-1])
    if backend == "flash-attn":  # GPU path, untested on CPU
        from flash_attn import flash_attn_func

        out = flash_attn_func(q.unsqueeze(1), flash_view(k), flash_view(v), softmax_scale=scale)
        return out.squeeze(1)
    if backend == "flashinfer":  # GPU path, untested on CPU
        import flashinfer

        return torch.stack(
            [
                flashinfer.single_decode_with_kv_cache(q[i], k[i], v[i], kv_layout="HND", sm_scale=scale)
                for i in range(b)
            ]
        )
    raise KvcalcError(f"--backend: unknown backend '{backend}'; use auto, sdpa, matmul or flash")


def sdpa_gqa_native(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> bool:
    """True when torch's SDPA can take enable_gqa=True without expanding the cache: on the CPU,
    and on CUDA when its flash kernel applies (fp16/bf16, D_k == D_v <= 256). Otherwise only
    the math backend accepts enable_gqa and it repeat_interleaves K and V (G x the cache: an
    OOM at long context, and the wrong bytes timed). Source: torch.nn.functional
    .scaled_dot_product_attention docstring ("GQA ... works only for Flash_attention and math
    kernel on CUDA"); flash head-dim limit 256 (aten/src/ATen/native/transformers/sdp_utils)."""
    if not q.is_cuda:
        return True
    return q.dtype in (torch.float16, torch.bfloat16) and k.shape[-1] == v.shape[-1] <= 256


def flash_view(x: torch.Tensor) -> torch.Tensor:
    """A cache slice (B, H_kv, n, D) as the (B, n, H_kv, D) that flash-attn's flash_attn_func
    reads: a transposed view, no copy (stride(-1) stays 1, which is all flash_attn_func needs:
    flash_attn_interface.maybe_contiguous copies only when stride(-1) != 1, and mha_fwd reads
    the batch, row and head strides; csrc/flash_attn/flash_api.cpp). The write of the new
    token stays in `layer_step` (flash_attn_with_kvcache, which would do it, is not used)."""
    return x.transpose(1, 2)


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


def slot_and_len(pos: int, cache_len: int) -> tuple[int, int]:
    """Where token `pos` (0-based) is written and how many cached tokens the step reads: a full
    layer (cache_len = seq_len) writes at pos and reads pos + 1; a sliding layer's ring buffer
    of cache_len = min(seq_len, window) writes at pos mod cache_len and reads min(pos + 1,
    cache_len)."""
    return pos % cache_len, min(pos + 1, cache_len)


def layer_step(
    st: LayerState,
    q: torch.Tensor,
    pos: int,
    scale: float,
    backend: str,
    cd: torch.dtype,
    kv_lora_rank: int = 0,
    k_new: torch.Tensor | None = None,
    v_new: torch.Tensor | None = None,
) -> torch.Tensor:
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
        if st.v is not None and st.v_row is not None:  # both, or neither (MLA)
            st.v.write(slot, st.v_row)
    k = st.k.dequant(n, cd)
    if st.v is None:  # MLA latent (B, n, D_latent)
        return attend(q, k.unsqueeze(1), k[..., :kv_lora_rank].unsqueeze(1), scale, backend)
    return attend(q, k, st.v.dequant(n, cd), scale, backend)


def attention_scale(model: ModelSpec) -> float:
    """1 / sqrt(d): d = head_dim; MLA: qk_nope_head_dim + qk_rope_head_dim (DeepSeek-V2), else the latent width."""
    if model.attention == "mla":
        nope, rope = model.qk_nope_head_dim, model.qk_rope_head_dim
        d = nope + rope if nope and rope is not None else model.resolved_head_dim  # MLA always has rope
        return 1 / math.sqrt(d)
    return 1 / math.sqrt(model.resolved_head_dim)
