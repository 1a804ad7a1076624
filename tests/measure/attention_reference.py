"""The float64 attention reference the measure tests compare every backend against."""

from __future__ import annotations


def float64_attention(q, k, v, scale):
    """softmax(q K^T x scale) V in float64 for one decode token.

    q: (B, H_q, D); k: (B, H_kv, T, D_k); v: (B, H_kv, T, D_v); query head h reads KV head
    h // G with G = H_q // H_kv (K and V are expanded only here, never in kvcalc). Returns
    (B, H_q, D_v) float64.
    """
    import torch

    g = q.shape[1] // k.shape[1]
    k = k.double().repeat_interleave(g, dim=1)
    v = v.double().repeat_interleave(g, dim=1)
    s = torch.einsum("bhd,bhnd->bhn", q.double(), k) * scale
    return torch.einsum("bhn,bhnd->bhd", torch.softmax(s, -1), v)
