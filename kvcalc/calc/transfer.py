"""Prefill-to-decode KV transfer (pure arithmetic): which KV heads a tensor-parallel rank holds,
the bytes one prefill rank sends one decode rank for one request, the regions a transfer
touches, and the prefill-to-decode GPU ratio.

Model (vLLM 0.33 `vllm/distributed/kv_transfer/kv_connector/v1/nixl/base_worker.py`, the
heterogeneous-TP docstring of `add_remote_agent`): a decode worker pulls, block by block, the KV
heads it holds from the prefill worker(s) that hold them: with tp_ratio = D_tp / P_tp >= 1,
decode rank j reads heads `H_kv / D_tp` wide from prefill rank j // tp_ratio; with P_tp > D_tp
it reads from P_tp / D_tp prefill ranks. An MLA latent is replicated on every rank, so each
decode rank reads the whole latent from one prefill rank. Whole blocks move: one descriptor per
region (a layer's K, a layer's V; an MLA layer's latent) per block (`num_descs =
sum(region_num_blocks)`). A sliding-window layer moves only the blocks of its window.

Head placement (vLLM `QKVParallelLinear`): with H_kv >= tp, rank r holds heads
[r H_kv / tp, (r + 1) H_kv / tp); with H_kv < tp each rank holds one head, r H_kv // tp
(replicated tp / H_kv times). Shapes: one layer's cache on a rank `(2, blocks, H_kv/tp,
block_size, D)`.
"""

from __future__ import annotations

from kvcalc.calc.kv_cache import tokens_cached
from kvcalc.errors import MESSAGE, KvcalcError
from kvcalc.formats import StorageFormat
from kvcalc.schema import LayerSpec, ModelSpec


def heads_of_rank(n_kv_heads: int, tp: int, rank: int) -> range:
    """KV heads tensor-parallel rank `rank` of `tp` holds (see the module docstring)."""
    if n_kv_heads >= tp:
        per = n_kv_heads // tp
        return range(rank * per, (rank + 1) * per)
    h = rank * n_kv_heads // tp
    return range(h, h + 1)


def source_rank(n_kv_heads: int, prefill_tp: int, decode_tp: int, decode_rank: int, head: int) -> int:
    """The prefill rank decode rank `decode_rank` reads `head` from: itself scaled
    (decode_rank x P / D) when that rank holds the head, else the first prefill rank holding it."""
    own = decode_rank * prefill_tp // decode_tp
    if head in heads_of_rank(n_kv_heads, prefill_tp, own):
        return own
    return next(r for r in range(prefill_tp) if head in heads_of_rank(n_kv_heads, prefill_tp, r))


def layer_head_bytes_per_token(layer: LayerSpec, k: StorageFormat, v: StorageFormat) -> int:
    """Bytes of one KV head (K and V) of one token in one layer: bytes(D_k) + bytes(D_v)."""
    return k.bytes_for(layer.head_dim_k, what="K head", field="k_dtype") + v.bytes_for(
        layer.head_dim_v, what="V head", field="v_dtype"
    )


def pair_bytes(
    model: ModelSpec,
    tokens: int,
    k: StorageFormat,
    v: StorageFormat,
    *,
    prefill_tp: int,
    decode_tp: int,
    block_size: int,
    cached_tokens: int = 0,
) -> dict[tuple[int, int], tuple[int, int, int]]:
    """{(prefill rank, decode rank): (bytes, regions, KV heads per layer)} for one request of
    `tokens`, whole blocks of `block_size` per layer (a sliding layer: its window's blocks), less
    the whole blocks of a prefix of `cached_tokens` the decode side already holds (its own
    prefix-cache hit: `calc.offload.reusable_prefix_tokens`, not moved).
    `regions`: descriptors, one per layer region (K, V; MLA latent) per block.
    Raises `KvcalcError` for layers whose transfer is not modelled (Mamba / linear state,
    2026 kinds other than full, sliding and MLA)."""
    from kvcalc.calc.offload import reusable_prefix_tokens

    out: dict[tuple[int, int], list[int]] = {}
    total = -(-tokens // block_size)
    cached = reusable_prefix_tokens(cached_tokens, tokens, block_size) // block_size
    for layer in model.layers:
        if layer.kind in ("mlp",):
            continue
        if layer.kind not in ("full", "sliding", "mla"):
            raise KvcalcError(
                f"{model.name}: the transfer of {layer.kind} layers is not modelled (full, sliding and MLA layers "
                "are): vLLM 0.33's NIXL connector moves a Mamba layer's state-bearing slot as conv sub-projection "
                "regions plus one SSM region, re-split over a TP mismatch (nixl/base_worker.py, "
                "ssm_conv_transfer_utils.py derive_mamba_conv_split), whose per-rank bytes kvcalc does not derive",
                field="model",
                value=model.name,
                form=MESSAGE,
            )
        blocks = total - max(total - -(-tokens_cached(layer, tokens) // block_size), cached)
        if layer.kind == "mla":
            row = k.bytes_for(layer.head_dim_k, what="latent", field="k_dtype")
            if layer.index_dim:
                raise KvcalcError(
                    f"{model.name}: the transfer of an indexer's keys (DSA / NSA) is not modelled: vLLM 0.33 gives "
                    "them cache layers of their own beside the latent's (models/deepseek_v2.py: an MLAAttentionSpec "
                    "with cache_role INDEXER), whose NIXL regions kvcalc does not derive",
                    field="model",
                    value=model.name,
                    form=MESSAGE,
                )
            for j in range(decode_tp):
                cell = out.setdefault((j * prefill_tp // decode_tp, j), [0, 0, 1])
                cell[0] += blocks * block_size * row
                cell[1] += blocks
            continue
        per_head = layer_head_bytes_per_token(layer, k, v)
        for j in range(decode_tp):
            for h in heads_of_rank(layer.n_kv_heads, decode_tp, j):
                i = source_rank(layer.n_kv_heads, prefill_tp, decode_tp, j, h)
                cell = out.setdefault((i, j), [0, 0, 0])
                cell[0] += blocks * block_size * per_head
        for j in range(decode_tp):
            sources = {
                source_rank(layer.n_kv_heads, prefill_tp, decode_tp, j, h)
                for h in heads_of_rank(layer.n_kv_heads, decode_tp, j)
            }
            for i in sources:
                out[(i, j)][1] += 2 * blocks  # K and V regions of this layer, each block
                n = sum(
                    1
                    for h in heads_of_rank(layer.n_kv_heads, decode_tp, j)
                    if source_rank(layer.n_kv_heads, prefill_tp, decode_tp, j, h) == i
                )
                out[(i, j)][2] = max(out[(i, j)][2], n)
    return {key: (b, r, h) for key, (b, r, h) in sorted(out.items())}


def prefill_decode_ratio(
    prefill_s: float, prefill_tp: int, decode_step_s: float, decode_tp: int, output_tokens: int, decode_batch: int
) -> float:
    """Prefill GPUs per decode GPU that keep both sides busy: GPU-seconds per request on each
    side, prefill P_tp x t_prefill against decode D_tp x output x t_step / batch."""
    return (prefill_tp * prefill_s) / (decode_tp * output_tokens * decode_step_s / decode_batch)
