"""Pure KV-cache arithmetic on the schema: bytes per token, cache bytes, TP/PP per-GPU bytes.

No I/O, no logging, no torch, no rich, no yaml. Every byte count is an exact integer.

The core formula (Vaswani et al. 2017 attention; GQA, Ainslie et al. 2023, arXiv:2305.13245):

    kv_cache_bytes = 2 x n_layers x n_kv_heads x head_dim x seq_len x batch x bytes_per_element

generalised per layer: a full layer caches K (B, H_kv, T, D_k) and V (B, H_kv, T, D_v); a sliding
layer the same with T = min(seq_len, window); an MLA layer one latent (B, T, kv_lora_rank +
qk_rope_head_dim) serving as K and V (DeepSeek-V2, arXiv:2405.04434); mamba and linear layers
no per-token cache.
"""

from __future__ import annotations

from fractions import Fraction

from kvcalc.errors import MESSAGE, OPTION_SAYS, KvcalcError
from kvcalc.formats import StorageFormat, kv_format
from kvcalc.results import KindBreakdown, KvEstimate
from kvcalc.schema import LayerSpec, ModelSpec, Parallelism, Workload

TYPE_CHECKING = False  # typing.TYPE_CHECKING: for type checkers only
if TYPE_CHECKING:
    from kvcalc.results import CompareRow

FormatLike = str | StorageFormat


def formats(k_dtype: FormatLike, v_dtype: FormatLike | None = None) -> tuple[StorageFormat, StorageFormat]:
    """(K format, V format); V defaults to K. Raises `UnknownNameError` for unknown names and
    `KvcalcError` for weight-only formats (field `k_dtype` / `v_dtype`)."""
    k = kv_format(k_dtype, field="k_dtype")
    return k, (kv_format(v_dtype, field="v_dtype") if v_dtype is not None else k)


def check_tp(model: ModelSpec, tp: int) -> None:
    """Refuse a TP degree the engines refuse (vLLM `ModelConfig.verify_with_parallel_config`
    and `QKVParallelLinear`): query heads must divide by tp, and KV heads must divide by tp or
    tp by KV heads. MLA latents are replicated, so only the query heads count there.

    Raises `KvcalcError` with field `tp` and value `tp` (the CLI shows `--tp 3: ...`).
    """
    if model.n_heads % tp:
        raise KvcalcError(
            f"{model.name} has {model.n_heads} attention heads, "
            f"not divisible by {tp}; use a tp that divides {model.n_heads}",
            field="tp",
            value=tp,
        )
    if model.attention == "mla":
        return
    for kv in sorted(
        {model.resolved_n_kv_heads} | {x.n_kv_heads for x in model.layers if x.caches_kv and x.n_kv_heads}
    ):
        if kv % tp and tp % kv:
            raise KvcalcError(
                f"{kv} KV heads cannot be split over {tp} ranks (neither divides the other); "
                f"use a tp that divides {kv} or a multiple of it",
                field="tp",
                value=tp,
            )


def kv_heads_per_rank(layer: LayerSpec, tp: int = 1) -> int:
    """KV heads one tensor-parallel rank holds: max(1, n_kv_heads // tp); heads are replicated
    when tp exceeds them (vLLM `QKVParallelLinear`: num_kv_head_replicas = tp // n_kv_heads).
    An MLA latent is one vector replicated on every rank, so 1."""
    if layer.kind == "mla":
        return 1
    return max(1, layer.n_kv_heads // tp)


#: DeepSeek-V3.2's indexer keys are stored as fp8 e4m3 with one fp32 scale per block of 128
#: values, whatever the KV format (DeepSeek's reference `inference/model.py` Indexer `k_cache`
#: float8_e4m3fn + `k_scale_cache` float32 per `block_size` 128; vLLM's `DeepseekV32IndexerCache`
#: the same, 128 + 4 = 132 B per token per layer).
INDEXER_BLOCK_VALUES = 128
INDEXER_SCALE_BYTES = 4


def indexer_bytes_per_token(index_dim: int) -> int:
    """Bytes of one token's indexer key in one layer: index_dim x 1 B (fp8) + 4 B per 128 values
    (DeepSeek-V3.2, index_head_dim 128: 128 + 4 = 132 B). 0 when there is no indexer."""
    return index_dim + INDEXER_SCALE_BYTES * -(-index_dim // INDEXER_BLOCK_VALUES)


def layer_index_bytes_per_entry(layer: LayerSpec, k_fmt: StorageFormat) -> int:
    """Bytes of one indexer key entry of `layer`: `indexer_bytes_per_token` for DeepSeek's fp8
    keys with fp32 scales (DeepSeek-V3.2 / V4, GLM-5 DSA: 132 B for 128 values), or index_dim
    values in the K format for `index_format` "kv" (MiniMax-M3: transformers
    `modeling_minimax_m3_vl.py` indexer `k_proj` of index_head_dim, cached in the model dtype:
    128 x 2 B = 256 B in bf16). 0 without an indexer."""
    if not layer.index_dim:
        return 0
    if layer.index_format == "kv":
        return k_fmt.bytes_for(layer.index_dim, what="indexer key", field="k_dtype")
    return indexer_bytes_per_token(layer.index_dim)


#: what each layer feature (`LayerSpec.features`) means, for refusals and `layer_features`
LAYER_FEATURES: dict[str, str] = {
    "v_is_k": "one cached tensor that is both K and V (DeepSeek-V4)",
    "k_eq_v": "V projected by K's weights (Gemma-4 attention_k_eq_v)",
    "kv_shared": "layers that reuse another layer's cache (num_kv_shared_layers)",
    "compressed": "a compressed cache of one entry per N tokens beside the window (DeepSeek-V4 CSA / HCA)",
    "indexer": "a sparse-attention indexer key cache (DeepSeek-V3.2 / V4, GLM-5 DSA)",
    "indexer_kv": "a sparse-attention indexer key cache in the KV format (MiniMax-M3)",
    "sinks": "per-head attention sinks (parameters, no cache)",
    "kind_geometry": "KV heads or head sizes that differ between the full and sliding layers",
    "partial_indexer": "an indexer on some attention layers only (GLM-5 shared layers, MiniMax-M3)",
    "linear_beside_mla": "linear-attention state layers beside MLA layers (Kimi-K3 KDA)",
}


def layer_features(model: ModelSpec) -> frozenset[str]:
    """The names of the 2026 layer features `model` has (keys of `LAYER_FEATURES`): those of
    its layers (`LayerSpec.features`) and those of the model as a whole (geometry differing
    between kinds, an indexer on some layers only, linear attention beside MLA)."""
    out: set[str] = set()
    for layer in model.layers:
        out |= layer.features
    attn = [x for x in model.layers if x.kind in ("full", "sliding", "hybrid") and x.kv_source is None]
    if len({(x.n_kv_heads, x.head_dim_k, x.head_dim_v) for x in attn}) > 1:
        out.add("kind_geometry")
    cached = [x for x in model.layers if x.kind in ("full", "sliding", "mla", "hybrid")]
    if any(x.index_dim for x in cached) and not all(x.index_dim for x in cached):
        out.add("partial_indexer")
    kinds = {x.kind for x in model.layers}
    if "mla" in kinds and kinds & {"linear", "mamba"}:
        out.add("linear_beside_mla")
    return frozenset(out)


def refuse_unmodelled_layers(model: ModelSpec, engine: str, modelled: frozenset[str]) -> None:
    """Raise `KvcalcError` (field `model`) when `model` has a layer feature (`layer_features`)
    outside `modelled`, the features the `engine` profile sizes; the message names the first
    such feature in words (`LAYER_FEATURES`) and the engine. An engine that has not been taught
    a feature refuses the model rather than print a wrong figure; `--engine ideal` sizes them
    all."""
    missing = sorted(layer_features(model) - modelled)
    if missing:
        what = "; ".join(LAYER_FEATURES[m] for m in missing)
        it = "this" if len(missing) == 1 else "these"
        raise KvcalcError(
            f"{model.name} has {what}; the {engine} profile does not model {it} yet",
            fix="use --engine ideal",
            field="model",
            value=model.name,
            form=MESSAGE,
        )


#: the features today's engine profiles size: none of the 2026 ones that change the cache. `sinks`
#: and `k_eq_v` change the weights only (K and V are still cached apart), so no engine is refused
#: for them. The engine engineers widen this per engine as they model each feature.
ENGINES_MODEL_TODAY: frozenset[str] = frozenset({"sinks", "k_eq_v"})


def refuse_hybrid_layers(model: ModelSpec, engine: str) -> None:
    """Raise `KvcalcError` (field `model`) when `model` has hybrid layers (Falcon-H1: attention
    and a Mamba-2 mixer in every layer): the engine profiles (`engine` names it) size the KV cache
    of attention layers and, where they model it, the state of separate mamba layers; a layer that
    keeps both would lose its state. vLLM (`model_executor/models/falcon_h1.py`, IsHybrid: a Mamba
    cache group beside the attention groups) and llama.cpp (`LLM_ARCH_FALCON_H1`:
    `llama_memory_hybrid`, every layer in both the KV cache and the recurrent memory) serve it;
    kvcalc's `--engine ideal` and the llama.cpp profile size both parts exactly; vLLM and SGLang
    call this (`engines/vllm.py` `capacity`, `engines/sglang.py`)."""
    if any(layer.kind == "hybrid" for layer in model.layers):
        raise KvcalcError(
            f"{model.name} runs attention and a Mamba-2 mixer side by side in every layer; the {engine} "
            "profile does not yet size the state those layers keep beside their KV cache",
            fix="use --engine ideal",
            field="model",
            value=model.name,
            form=MESSAGE,
        )
    # the 2026 layer features: no engine profile sizes them yet (SGLang calls this hook, not
    # refuse_indexer, and sizes DeepSeek-V3.2's indexer on every MLA layer: that one passes)
    refuse_unmodelled_layers(model, engine, ENGINES_MODEL_TODAY | {"indexer"})


def refuse_indexer(model: ModelSpec, engine: str) -> None:
    """Raise `KvcalcError` (field `model`) when `model` has DeepSeek-V3.2's indexer: the engine
    profiles (`engine` names it) do not model the pages it adds (vLLM keeps the indexer keys in a
    cache group of their own, SGLang in its NSA pool), so they would print a wrong figure.
    Hybrid layers are `refuse_hybrid_layers`'s, which the profiles that cannot size them call."""
    # a 2026 feature first, so the message names it (GLM-5's indexer on some layers, MiniMax-M3's
    # bf16 keys, DeepSeek-V4's compressed entries), then DeepSeek-V3.2's indexer on every layer
    refuse_unmodelled_layers(model, engine, ENGINES_MODEL_TODAY | {"indexer"})
    if model.index_head_dim is not None:
        raise KvcalcError(
            f"{model.name} has DeepSeek-V3.2's sparse-attention indexer, whose key cache the "
            f"{engine} profile does not model",
            fix="use --engine ideal",
            field="model",
            value=model.name,
            form=MESSAGE,
        )


def layer_kv_bytes_per_token(layer: LayerSpec, k_fmt: StorageFormat, v_fmt: StorageFormat, tp: int = 1) -> int:
    """Bytes one token adds to one layer's per-token cache on one TP rank (its window or full
    part; a compressed layer's entries are `layer_entry_bytes`'s).

    full / sliding: h x (bytes(D_k in k_fmt) + bytes(D_v in v_fmt)), h = kv_heads_per_rank, the
    V term 0 when the layer's V is its K (`v_is_k`, DeepSeek-V4: one tensor per token);
    mla: bytes(kv_lora_rank + qk_rope_head_dim in k_fmt), no factor 2; plus, on an uncompressed
    layer, the indexer key (`layer_index_bytes_per_entry`); 0 for layers with no cache of their
    own (`kv_source`: the cache is the source layer's) and for mamba / linear / mlp.
    Raises `KvcalcError` (field `k_dtype` or `v_dtype`) when a head is not a whole number of
    quantization blocks.
    """
    if not layer.caches_kv:
        return 0
    index = layer_index_bytes_per_entry(layer, k_fmt) if layer.compress_ratio <= 1 else 0
    if layer.kind == "mla":
        return k_fmt.bytes_for(layer.head_dim_k, what="latent", field="k_dtype") + index
    h = kv_heads_per_rank(layer, tp)
    k = k_fmt.bytes_for(layer.head_dim_k, what="K head", field="k_dtype")
    v = v_fmt.bytes_for(layer.head_dim_v, what="V head", field="v_dtype") if layer.head_dim_v else 0
    return h * (k + v) + index


def layer_entry_bytes(layer: LayerSpec, k_fmt: StorageFormat) -> int:
    """Bytes of one compressed entry of a compressed layer (`compress_ratio` > 1): the entry,
    compressed_dim values in k_fmt (K = V: DeepSeek-V4's compressed KV is one tensor), plus the
    indexer key compressed over the same windows (`layer_index_bytes_per_entry`; DeepSeek-V4's
    CSA indexer, transformers `modeling_deepseek_v4.py` `DeepseekV4Indexer`). 0 otherwise."""
    if layer.compress_ratio <= 1 or not layer.caches_kv:
        return 0
    return k_fmt.bytes_for(
        layer.compressed_dim, what="compressed entry", field="k_dtype"
    ) + layer_index_bytes_per_entry(layer, k_fmt)


def compressed_entries(layer: LayerSpec, seq_len: int) -> int:
    """Compressed entries one sequence of `seq_len` tokens keeps in `layer`: floor(seq_len /
    compress_ratio), one per closed window (transformers `modeling_deepseek_v4.py`
    `DeepseekV4HCACache.store_compression_weights`: `usable = (len // compress_rate) *
    compress_rate`; the open window's fewer than compress_ratio tokens wait in the compressor's
    state, `compressor_state_bytes`). 0 for an uncompressed layer."""
    if layer.compress_ratio <= 1 or not layer.caches_kv:
        return 0
    return seq_len // layer.compress_ratio


#: bytes of one fp32 value of a DeepSeek-V4 compressor's state (reference `inference/model.py`
#: Compressor: `kv_state` / `score_state` are `dtype=torch.float32`, whatever the cache's format)
COMPRESSOR_STATE_VALUE_BYTES = 4


def compressor_state_bytes(layer: LayerSpec) -> int:
    """Bytes of the open (not yet compressed) windows one sequence keeps in a compressed layer:
    DeepSeek-V4's compressor holds, per sequence, `kv_state` and `score_state` of shape
    (coff x ratio, coff x D) in fp32, coff = 2 when the ratio is 4 (CSA's overlapping windows:
    the previous window's first half beside the current window) else 1 (reference
    `inference/model.py` Compressor.__init__, `torch.zeros(max_batch_size, coff * compress_ratio,
    coff * self.head_dim, dtype=torch.float32)`; vLLM 0.33.0 `deepseek_v4/compressor.py`
    CompressorStateCache: `state_dim = 2 * coff * head_dim` fp32 over a window of coff x ratio
    tokens, the same bytes). A CSA layer's indexer has its own compressor over index_dim (its
    `Indexer.compressor`, ratio 4). So, D = compressed_dim:

        2 x coff r x coff D x 4 B  (+ 2 x coff r x coff index_dim x 4 B with an indexer)

    DeepSeek-V4-Flash: CSA 2 x 8 x 1,024 x 4 + 2 x 8 x 256 x 4 = 65,536 + 16,384 = 81,920 B;
    HCA 2 x 128 x 512 x 4 = 524,288 B. Fixed per sequence (it does not grow with the context);
    0 for a layer without a compressed cache."""
    r = layer.compress_ratio
    if r <= 1 or not layer.caches_kv:
        return 0
    coff = 2 if r == 4 else 1
    dims = layer.compressed_dim + (layer.index_dim if layer.index_dim else 0)
    return 2 * coff * r * coff * dims * COMPRESSOR_STATE_VALUE_BYTES


def layer_cache_bytes(
    layer: LayerSpec, seq_len: int, k: StorageFormat, v: StorageFormat, tp: int = 1, window_aware: bool = True
) -> int:
    """Bytes one sequence of `seq_len` tokens keeps in one layer on one TP rank: per-token
    bytes x tokens cached (`tokens_cached`) + compressed entries x entry bytes + the compressor's
    open windows (`compressor_state_bytes`, once a sequence has a token)."""
    return (
        layer_kv_bytes_per_token(layer, k, v, tp) * tokens_cached(layer, seq_len, window_aware)
        + layer_entry_bytes(layer, k) * compressed_entries(layer, seq_len)
        + (compressor_state_bytes(layer) if seq_len > 0 else 0)
    )


def tokens_cached(layer: LayerSpec, seq_len: int, window_aware: bool = True) -> int:
    """Tokens one sequence keeps in this layer: min(seq_len, window) for a sliding layer when
    `window_aware`, else seq_len; 0 for layers without a per-token cache of their own.

    `window` counts the positions one query attends, its own included (transformers
    `masking_utils.sliding_window_overlay`: `kv_idx > q_idx - sliding_window`), so the newest
    token's query needs `window` tokens held. MiMo-V2-Flash's window is 129: transformers 5.20.2
    `configuration_mimo_v2_flash.py` sets `sliding_window = sliding_window_size + 1` ("The
    reference SGLang implementation attends to `sliding_window_size` previous tokens plus the
    query"), 128 previous tokens + the query. vLLM 0.33.0 (`mimo_v2.py`: `per_layer_sliding_window
    = sliding_window_size`, 128 positions with the query) and llama.cpp (n_swa 128, the same
    mask) attend one token fewer than the model; their figures are their own rules, the ideal
    engine's is the model's."""
    if not layer.caches_kv:
        return 0
    if window_aware and layer.kind == "sliding" and layer.window is not None:
        return min(seq_len, layer.window)
    return seq_len


def kv_bytes_per_token(model: ModelSpec, kv_dtype: FormatLike, v_dtype: FormatLike | None = None, tp: int = 1) -> int:
    """What one more token adds to one sequence's cache, summed over all layers (on one TP
    rank when tp > 1), while the context is shorter than every window.

    For a uniform model: 2 x n_layers x n_kv_heads x head_dim x bytes_per_element. A compressed
    layer adds its entry bytes / compress_ratio (`amortized_bytes_per_token`).
    """
    k, v = formats(kv_dtype, v_dtype)
    return amortized_bytes_per_token(model.layers, k, v, tp)


def amortized_bytes_per_token(
    layers: tuple[LayerSpec, ...] | list[LayerSpec], k: StorageFormat, v: StorageFormat, tp: int = 1
) -> int:
    """Sum over `layers` of the per-token bytes plus each compressed layer's entry bytes /
    compress_ratio (DeepSeek-V4-Flash CSA: 1,024 B of window + (1,024 + 132) / 4 = 289 B of
    compressed entry and indexer key), rounded up to a whole byte when the ratios leave a
    fraction."""
    exact = sum(
        (
            Fraction(layer_kv_bytes_per_token(x, k, v, tp))
            + (Fraction(layer_entry_bytes(x, k), x.compress_ratio) if x.compress_ratio > 1 else 0)
            for x in layers
        ),
        Fraction(0),
    )
    return -(-exact.numerator // exact.denominator)


def layers_cache_bytes(
    layers: tuple[LayerSpec, ...] | list[LayerSpec],
    seq_len: int,
    batch: int,
    k: StorageFormat,
    v: StorageFormat,
    tp: int = 1,
    window_aware: bool = True,
) -> int:
    """Sum over `layers` of `layer_cache_bytes` x batch (one TP rank)."""
    return sum(layer_cache_bytes(layer, seq_len, k, v, tp, window_aware) for layer in layers) * batch


def kv_cache_bytes(
    model: ModelSpec,
    seq_len: int,
    batch: int,
    kv_dtype: FormatLike,
    v_dtype: FormatLike | None = None,
    tp: int = 1,
    window_aware: bool = True,
) -> int:
    """Bytes of the whole cache for `batch` sequences of `seq_len` tokens (one TP rank when
    tp > 1; one pipeline replica of all layers).

    Uniform model: 2 x n_layers x n_kv_heads x head_dim x seq_len x batch x bytes_per_element.
    Sliding layers hold min(seq_len, window) tokens unless `window_aware` is False.
    """
    k, v = formats(kv_dtype, v_dtype)
    return layers_cache_bytes(model.layers, seq_len, batch, k, v, tp, window_aware)


def pp_stages(n_layers: int, pp: int) -> list[range]:
    """Layer indices of each pipeline stage, as vLLM splits them (`vllm/distributed/utils.py`
    `get_pp_indices`): n_layers // pp each, and the remainder one extra layer per stage from the
    second-to-last stage backwards (the last stage also holds the LM head).

    Raises `KvcalcError` (field `pp`) when pp exceeds the layers.
    """
    if pp > n_layers:
        raise KvcalcError(f"{pp} exceeds the model's {n_layers} layers", field="pp", value=pp, form=OPTION_SAYS)
    sizes = [n_layers // pp] * pp
    for i in range(2, n_layers % pp + 2):
        sizes[-i] += 1
    out, start = [], 0
    for s in sizes:
        out.append(range(start, start + s))
        start += s
    return out


def state_bytes_per_seq(model: ModelSpec) -> int | None:
    """Fixed state of the mamba / linear layers, and of the Mamba-2 half of hybrid layers
    (Falcon-H1), for one sequence, in the model's dtype; 0 when there are none; None when some
    such layer cannot be sized from the config."""
    fixed = [layer for layer in model.layers if layer.keeps_state]
    if not fixed:
        return 0
    if any(layer.state_values == 0 for layer in fixed):
        return None
    k = model.dtype_format  # the model's own dtype: no option sets it
    return sum(k.bytes_for(layer.state_values, what="state") for layer in fixed)


def _fmt_bytes_per_element(f: StorageFormat) -> str:
    if f.block_values == 1:
        return f"{f.block_bytes} B"
    return f"{f.block_bytes}/{f.block_values} B"


def formula(
    model: ModelSpec, seq_len: int, batch: int, k: StorageFormat, v: StorageFormat, window_aware: bool = True
) -> str:
    """The cache formula with the numbers put in, one term per group of layers that cache alike
    (the same kind, heads, head sizes, window and indexer; a compressed cache is a term of its
    own, one per ratio), and its total (integers with thousands separators, as every table
    prints them)."""
    per_token: dict[tuple[object, ...], list[LayerSpec]] = {}
    entries: dict[tuple[int, int], list[LayerSpec]] = {}
    for layer in model.layers:
        if not layer.caches_kv:
            continue
        index = layer_index_bytes_per_entry(layer, k) if layer.compress_ratio <= 1 else 0
        per_token.setdefault(
            (layer.kind, layer.n_kv_heads, layer.head_dim_k, layer.head_dim_v, layer.window, index, layer.index_format),
            [],
        ).append(layer)
        if layer.compress_ratio > 1:
            entries.setdefault((layer.compress_ratio, layer_entry_bytes(layer, k)), []).append(layer)
    terms = []
    for layers in per_token.values():
        layer, n = layers[0], len(layers)
        t = tokens_cached(layer, seq_len, window_aware)
        tok = f"{t:,} tokens" if t == seq_len else f"min({seq_len:,}; {layer.window:,}) tokens"
        index = layer_index_bytes_per_entry(layer, k) if layer.compress_ratio <= 1 else 0
        if layer.kind == "mla":
            terms.append(
                f"{n} layers x {layer.head_dim_k:,} latent x {tok} x {batch:,} batch x {_fmt_bytes_per_element(k)}"
            )
        elif not layer.head_dim_v:
            terms.append(
                f"{n} layers x {layer.n_kv_heads} KV heads x {layer.head_dim_k} head_dim (K = V, once) x "
                f"{tok} x {batch:,} batch x {_fmt_bytes_per_element(k)}"
            )
        elif k == v and layer.head_dim_k == layer.head_dim_v:
            terms.append(
                f"2 x {n} layers x {layer.n_kv_heads} KV heads x {layer.head_dim_k} head_dim x "
                f"{tok} x {batch:,} batch x {_fmt_bytes_per_element(k)}"
            )
        else:
            terms.append(
                f"{n} layers x {layer.n_kv_heads} KV heads x ({layer.head_dim_k} x "
                f"{_fmt_bytes_per_element(k)} + {layer.head_dim_v} x {_fmt_bytes_per_element(v)})"
                f" x {tok} x {batch:,} batch"
            )
        if index:
            how = "fp8 + fp32 scales" if layer.index_format == "fp8_scaled" else k.name
            terms.append(f"{n} layers x {index:,} B indexer key ({how}) x {tok} x {batch:,} batch")
    for (ratio, nbytes), layers in entries.items():
        terms.append(
            f"{len(layers)} layers x {nbytes:,} B compressed entry x {seq_len // ratio:,} entries "
            f"({seq_len:,} // {ratio}) x {batch:,} batch"
        )
    states: dict[int, int] = {}
    for layer in model.layers:
        if compressor_state_bytes(layer) and seq_len > 0:
            states[compressor_state_bytes(layer)] = states.get(compressor_state_bytes(layer), 0) + 1
    for nbytes, n in states.items():
        terms.append(f"{n} layers x {nbytes:,} B compressor state (fp32 open windows) x {batch:,} batch")
    if not terms:
        return "0 (no layer caches K or V)"
    total = layers_cache_bytes(model.layers, seq_len, batch, k, v, 1, window_aware)
    return " + ".join(terms) + f" = {total:,} B"


def _group_key(layer: LayerSpec) -> str:
    """A layer group's name: its kind, with what sets it apart from other layers of that kind
    ("full+indexer", "sliding+c4+indexer", "sliding+c128", "full(shared)")."""
    label: str = layer.kind
    if layer.compress_ratio > 1:
        label += f"+c{layer.compress_ratio}"
    if layer.index_dim:
        label += "+indexer"
    if layer.kv_source is not None:
        label += "(shared)"
    return label


def _by_kind(model: ModelSpec) -> dict[str, list[LayerSpec]]:
    """The layers grouped by kind; a kind whose layers differ (a compressed cache, an indexer,
    a shared cache) is split into groups named by `_group_key` (a kind with one group keeps its
    plain name: "mla" for DeepSeek-V3.2's layers, every one with an indexer)."""
    groups: dict[str, list[LayerSpec]] = {}
    for layer in model.layers:
        groups.setdefault(_group_key(layer), []).append(layer)
    per_kind: dict[str, int] = {}
    for layers in groups.values():
        per_kind[layers[0].kind] = per_kind.get(layers[0].kind, 0) + 1
    return {(layers[0].kind if per_kind[layers[0].kind] == 1 else key): layers for key, layers in groups.items()}


def estimate(model: ModelSpec, workload: Workload) -> KvEstimate:
    """The full KV estimate for one model and workload: bytes per token, cache bytes (window-
    aware and not), the fullest GPU under TP/PP, the total over every GPU, and a breakdown by
    layer kind.

    The TP degree and the attention-DP / EP / DCP layout are taken as checked (`check_tp`,
    `parallel.check_layout`, called where the request is built: `requests.EstimateRequest.build`).
    Raises `KvcalcError` for a PP layout the engines refuse and for formats that do not fit the
    head size.
    """
    k, v = formats(workload.k_dtype, workload.v_dtype)
    par: Parallelism = workload.parallel
    stages = pp_stages(model.n_layers, par.pp)
    T, B, tp = workload.seq_len, workload.batch, par.tp
    layers = model.layers
    # per GPU: the fullest attention-DP rank's ceil(B / dp_attention) sequences, each of its
    # ceil(T / dcp) positions (`calc.parallel`; the layout was checked where the request was
    # built, `requests.EstimateRequest.build` -> `parallel.check_layout`)
    Tg, Bg = T, B
    if (par.dp_attention, par.ep, par.dcp) != (1, 1, 1):  # imported only then: estimate starts fast
        from kvcalc.calc import parallel

        Tg, Bg = parallel.dcp_tokens(T, par.dcp), parallel.rank_batch(B, par.dp_attention)

    stage_bytes = [layers_cache_bytes([layers[i] for i in st], Tg, Bg, k, v, tp) for st in stages]
    stage_tok = [amortized_bytes_per_token([layers[i] for i in st], k, v, tp) for st in stages]
    fullest = stages[stage_bytes.index(max(stage_bytes))]
    breakdown = []
    for kind, kl in _by_kind(model).items():
        # this group's share of the fullest GPU, so the groups add up to kv_cache_bytes_per_gpu
        ids = {id(x) for x in kl}
        per_gpu = layers_cache_bytes([layers[i] for i in fullest if id(layers[i]) in ids], Tg, Bg, k, v, tp)
        breakdown.append(
            KindBreakdown(
                kind=kind,
                n_layers=len(kl),
                kv_bytes_per_token=amortized_bytes_per_token(kl, k, v),
                tokens_cached=tokens_cached(kl[0], T),
                kv_cache_bytes=layers_cache_bytes(kl, T, B, k, v),
                kv_cache_bytes_per_gpu=per_gpu,
                window=kl[0].window,
            )
        )
    state = state_bytes_per_seq(model)
    kv_name = k.name if k == v else f"{k.name}/{v.name}"
    return KvEstimate(
        model=model.name,
        source=model.source,
        attention=model.attention_kind,
        n_layers=model.n_layers,
        n_heads=model.n_heads,
        n_kv_heads=model.resolved_n_kv_heads,
        head_dim=model.resolved_head_dim,
        v_head_dim=model.resolved_v_head_dim,
        queries_per_kv_head=model.queries_per_kv_head,
        seq_len=T,
        batch=B,
        kv_dtype=kv_name,
        k_dtype=k.name,
        v_dtype=v.name,
        tp=par.tp,
        pp=par.pp,
        dp=par.dp,
        n_gpus=par.n_gpus,
        dp_attention=par.dp_attention,
        ep=par.ep,
        dcp=par.dcp,
        kv_bytes_per_token=amortized_bytes_per_token(layers, k, v),
        kv_cache_bytes=layers_cache_bytes(layers, T, B, k, v),
        kv_cache_bytes_no_window=layers_cache_bytes(layers, T, B, k, v, window_aware=False),
        kv_bytes_per_token_per_gpu=max(stage_tok),
        kv_cache_bytes_per_gpu=max(stage_bytes),
        kv_cache_bytes_all_gpus=sum(stage_bytes) * tp * par.dp * par.dp_attention,
        state_bytes=None if state is None else state * B,
        formula=formula(model, T, B, k, v),
        breakdown=breakdown,
    )


def compare_attention(model: ModelSpec, seq_len: int, batch: int, kv_dtype: FormatLike) -> list[CompareRow]:
    """The same model as MHA (KV heads = query heads), as its own layout, and as MQA (1 KV
    head), with each one's reduction against MHA: 100 x (1 - n_kv_heads / n_heads) for a
    uniform model (32 heads sharing 8: 75%; sharing 1: 96.875%; 64 sharing 8: 87.5%).

    Raises `KvcalcError` (field `model`) for MLA models, which have no per-head cache to share.
    """
    from kvcalc.results import CompareRow  # here: `kvcalc estimate` never declares it

    if model.attention == "mla":
        raise KvcalcError(
            f"{model.name} uses MLA (one latent per token), not per-head K and V; "
            "compare applies to MHA/GQA/MQA models",
            field="model",
            value=model.name,
            form=MESSAGE,
        )
    own = model.resolved_n_kv_heads
    variants = [("MHA", model.n_heads)]
    if own not in (model.n_heads, 1):
        variants.append((f"GQA ({model.queries_per_kv_head} queries per KV head, own)", own))
    variants.append(("MQA", 1))
    rows = []
    mha_bytes = None
    for label, kv in variants:
        if kv == own:
            label = label if "own" in label else f"{label} (own)"
        m = ModelSpec.model_validate({**model.model_dump(), "n_kv_heads": kv})
        total = kv_cache_bytes(m, seq_len, batch, kv_dtype)
        mha_bytes = mha_bytes or total
        rows.append(
            CompareRow(
                variant=label,
                n_kv_heads=kv,
                kv_bytes_per_token=kv_bytes_per_token(m, kv_dtype),
                kv_cache_bytes=total,
                reduction_vs_mha_percent=float((1 - Fraction(total, mha_bytes)) * 100),
            )
        )
    return rows
