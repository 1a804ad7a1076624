"""What `kvcalc measure` will allocate, before any tensor (pure: the engine's numbers): which
layers, the engine's bytes, the workspace and weights beside the cache, and the refusal of a
run that does not fit."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from kvcalc.calc import kv_cache
from kvcalc.errors import KvcalcError
from kvcalc.formats import StorageFormat
from kvcalc.measure.device import GIB
from kvcalc.schema import LayerSpec, ModelSpec


@dataclass(frozen=True)
class Sizing:
    """What will be allocated: `layer_indices` (caching layers measured), the engine's bytes
    for them (`predicted_kv_bytes`) and for the whole model (`model_kv_bytes`), and the
    workspace the steps need beside the cache (`workspace_bytes`, `weight_bytes`)."""

    model: ModelSpec
    seq_len: int
    batch: int
    k_fmt: StorageFormat
    v_fmt: StorageFormat
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
        kind = max(by_kind, key=lambda x: len(by_kind[x]) / total - take[x] / k if take[x] < len(by_kind[x]) else -1)
        take[kind] += 1
    return tuple(sorted(i for kind, n in take.items() for i in by_kind[kind][:n]))


def compute_dtype_for(k_fmt: StorageFormat, device: str) -> torch.dtype:
    """Attention runs in the cache's own dtype for fp16/bf16/fp32; quantized formats (fp8, int8,
    int4, llama.cpp blocks) are dequantized per layer to bf16 on CUDA, fp32 on the CPU."""
    if k_fmt.torch_dtype in ("float16", "bfloat16", "float32") and not k_fmt.quant_group_size:
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
        inter = (model.n_experts_per_token or 1) * model.moe_intermediate_size + (
            model.shared_expert_intermediate_size or 0
        )
    if h is None or inter is None:
        raise KvcalcError(f"--with-weights: {model.name} needs hidden_size and intermediate_size in its config")
    hq, d = model.n_heads, model.resolved_head_dim
    if model.attention == "mla":
        lora = model.kv_lora_rank
        if lora is None:  # ModelSpec refuses attention: mla without it
            raise KvcalcError(f"--with-weights: {model.name} needs kv_lora_rank in its config")
        attn = [(h, hq * d), (h, d), (hq * lora, h)]
    else:
        hkv, dv = model.resolved_n_kv_heads, model.resolved_v_head_dim
        attn = [(h, hq * d + hkv * (d + dv)), (hq * dv, h)]
    mlp = [(h, 2 * inter), (inter, h)] if model.mlp_kind == "gated" else [(h, inter), (inter, h)]
    return attn + mlp


def make_plan(
    model: ModelSpec,
    seq_len: int,
    batch: int,
    k_fmt: StorageFormat,
    v_fmt: StorageFormat,
    device: str,
    layers: int | None = None,
    with_weights: bool = False,
) -> Sizing:
    """The engine's bytes for the layers measured and the whole model, and the workspace:
    per step the scores and probabilities (B, H_q, T) fp32, plus, for formats that are
    dequantized, one layer's K and V in the compute dtype. Raises KvcalcError."""
    idx = pick_layers(model, layers)
    chosen = [model.layers[i] for i in idx]
    predicted = kv_cache.layers_cache_bytes(chosen, seq_len, batch, k_fmt, v_fmt)
    whole = kv_cache.kv_cache_bytes(model, seq_len, batch, k_fmt, v_fmt)
    cd = compute_dtype_for(k_fmt, device)
    t_max = max(kv_cache.tokens_cached(x, seq_len) for x in chosen)
    work = 2 * batch * model.n_heads * t_max * 4
    native = (
        k_fmt == v_fmt
        and k_fmt.torch_dtype is not None
        and getattr(torch, k_fmt.torch_dtype) == cd
        and not k_fmt.quant_group_size
    )
    if not native:
        work += (
            max(
                batch * x.n_kv_heads * kv_cache.tokens_cached(x, seq_len) * (x.head_dim_k + x.head_dim_v)
                for x in chosen
            )
            * cd.itemsize
        )
    wbytes = 0
    if with_weights:
        wbytes = len(idx) * sum(a * b for a, b in weight_shapes(model)) * cd.itemsize
    return Sizing(model, seq_len, batch, k_fmt, v_fmt, idx, predicted, whole, work, wbytes, cd)


def check_fits(plan: Sizing, free: int | None, device: str, make: Callable[..., Sizing], margin_bytes: int = 0) -> None:
    """Refuse (KvcalcError) when the plan needs more than `free - margin_bytes` bytes, naming
    the largest --batch that fits, else the largest --layers at --batch 1. `make(batch=,
    layers=)` rebuilds the plan for another batch or layer count."""
    if free is None:
        return
    usable = free - margin_bytes
    if plan.needed_bytes <= usable:
        return
    what = (
        f"needs {plan.needed_bytes / GIB:.2f} GiB ({plan.predicted_kv_bytes:,} B of KV cache + "
        f"workspace) but {device} has {free / GIB:.2f} GiB free"
        + (f", {usable / GIB:.2f} GiB after a {margin_bytes / GIB:.2f} GiB margin" if margin_bytes else "")
    )
    free = usable
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
        raise KvcalcError(
            f"{what}; even --batch 1 does not fit; the largest --layers that fits at --batch 1 is {best_l}"
        )
    raise KvcalcError(f"{what}; even one layer at --batch 1 does not fit; use a shorter --seq-len")
