"""What every vLLM version modelled shares: pages, groups, blocks per request, the checks.

Each version module (`v0_33`, `v0_11`, `v0_6`) builds on these; a rule that differs between
versions lives in the version's module, not here. Sources (vLLM 0.11 and 0.33 alike unless
named):

- Page (one block of one layer), `vllm/v1/kv_cache_interface.py` `AttentionSpec.page_size_bytes`
  / `FullAttentionSpec.real_page_size_bytes`: block_size x kv_heads_per_rank x (head_size +
  head_size_v) x element bytes (= 2 x block_size x heads x head_size x bytes when K and V heads
  match); `MLAAttentionSpec`: block_size x 1 x (kv_lora_rank + qk_rope_head_dim) x bytes, one latent.
  Per-token-head scales (`kv_cache_dtype` `int8_per_token_head` / `fp8_per_token_head`,
  `KVQuantMode.is_per_token_head`): + 2 x block_size x kv_heads x 4 bytes (fp32) per page.
  Plain `fp8` / `fp8_e4m3` / `fp8_e5m2` keep one per-tensor scale outside the pages: no extra bytes.
- Groups, `vllm/v1/core/kv_cache_utils.py` `get_kv_cache_groups`: all layers alike
  (`is_kv_cache_spec_uniform`): one group of every layer. Mixed kinds with the hybrid allocator
  (`_get_kv_cache_groups_uniform_page_size`): layers_per_group (vLLM's `group_size`) = the
  smaller layer count (a version may widen it: `kv_cache_groups(widen=...)`), each kind split
  into cdiv(n, layers_per_group) groups (padding layers waste memory). Without it
  (`--disable-hybrid-kv-cache-manager`, `unify_hybrid_kv_cache_specs`): sliding layers become
  full ones (blocks for every token).
- Blocks, `get_num_blocks`: available // page // layers per group. "Maximum concurrency for L
  tokens per request: X.XXx", `get_max_concurrency_for_kv_cache_config`: num_blocks / sum over
  groups of pages per request (`pages_per_request`).
- Llama-4's chunked local attention (`ChunkedLocalAttentionSpec`; model types in
  `CHUNKED_LOCAL_MODEL_TYPES`, whose sliding layers are the chunked ones, window = chunk):
  cdiv(min(chunk + in_flight, L), block_size) pages, no straddle page.
- Block sizes, `vllm/config/cache.py` (0.11): `BlockSize = Literal[1, 8, 16, 32, 64, 128, 256]`
  (0.10 lacked 256); anything else is refused.
- max_model_len, `vllm/config/model.py` `_get_and_verify_max_len`: longer than the model's
  max_position_embeddings is refused ("User-specified max_model_len ... VLLM_ALLOW_LONG_MAX_MODEL_LEN=1")
  unless `VLLM_ALLOW_LONG_MAX_MODEL_LEN=1` (`allow_long_max_model_len`), which only warns. The
  longest context kvcalc reports never exceeds the model's limit (or the max_model_len allowed past it).

Tensor parallelism: each rank holds kv_heads_per_rank heads (MLA: the whole latent), and
`available` is one rank's memory; vLLM takes the smallest block count over ranks, which for equal
ranks is any rank's.
"""

from __future__ import annotations

from dataclasses import dataclass
from dataclasses import field as dc_field

from kvcalc.calc.kv_cache import kv_heads_per_rank, layer_kv_bytes_per_token, refuse_hybrid_layers, refuse_indexer
from kvcalc.engines import SEARCH_LIMIT_TOKENS, defaults, longest_fitting
from kvcalc.engines.vllm.planning import LayerCache
from kvcalc.errors import MESSAGE, KvcalcError, flag
from kvcalc.formats import StorageFormat
from kvcalc.schema import LayerSpec, ModelSpec

DEFAULT_BLOCK_SIZE = defaults.VLLM_BLOCK_SIZE
#: vLLM V1 default `max_num_batched_tokens` for `vllm serve` on a GPU under 70 GiB is 2048, on
#: larger ones 8192 (`vllm/engine/arg_utils.py` `_set_default_args`); it only matters for
#: sliding-window pages in the concurrency figure.
DEFAULT_MAX_NUM_BATCHED_TOKENS = defaults.VLLM_MAX_NUM_BATCHED_TOKENS
#: block sizes vLLM 0.11 accepts (`vllm/config/cache.py` `BlockSize`).
BLOCK_SIZES = (1, 8, 16, 32, 64, 128, 256)
#: vLLM's start-up error when the profiled KV memory is <= 0 (0.11 `vllm/v1/core/kv_cache_utils.py`
#: `check_enough_kv_cache_memory`; V0 `raise_if_cache_size_invalid`).
NO_MEMORY = (
    "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine."
)
#: the MLA backends of AMD GPUs (`vllm/platforms/rocm.py`); TRITON_MLA runs on both vendors.
ROCM_MLA_BACKENDS = frozenset({"ROCM_AITER_MLA"})
#: attention backends of non-MLA models: none changes the block size kvcalc models.
OTHER_BACKENDS = ("FLASH_ATTN", "FLASHINFER", "TRITON_ATTN", "FLEX_ATTENTION", "TREE_ATTN")
#: the GPU kvcalc assumes for the MLA block size when neither --gpu nor --attention-backend is given.
ASSUMED_COMPUTE_CAPABILITY = "9.0"
#: vLLM's env var (and kvcalc's option) that lets max_model_len exceed the model's own limit.
ALLOW_LONG_ENV = "VLLM_ALLOW_LONG_MAX_MODEL_LEN"
#: `kv_cache_dtype` suffix whose pages carry fp32 scales per token and head.
PER_TOKEN_HEAD = "_per_token_head"
SCALE_BYTES = 4  # torch.float32
#: model types whose sliding layers are Llama-4's chunked local attention (`attention_chunk_size`,
#: which kvcalc's loaders write as the layers' window): vLLM `ChunkedLocalAttention`, whose spec is
#: `ChunkedLocalAttentionSpec` (`vllm/model_executor/models/llama4.py`: RoPE layers when
#: attention_chunk_size is set).
CHUNKED_LOCAL_MODEL_TYPES = frozenset({"llama4", "llama4_text"})
#: vLLM's env var that keeps the hybrid allocator on for chunked local attention (0.11: off by
#: default, `VllmConfig.__post_init__`; 0.33: on, `vllm/envs.py`).
CHUNKED_HYBRID_ENV = "VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE"


def default_kv_dtype(model: ModelSpec, fp32_served_as: str = "bf16") -> tuple[str, str]:
    """(format name, label) of `--kv-cache-dtype auto`: the dtype vLLM serves the model in.

    The model's dtype, except fp32 checkpoints, served in `fp32_served_as` (each version's
    `VllmRules.fp32_served_as`: bf16 in vLLM 0.10.1+ on compute capability >= 8.0,
    `vllm/config/model.py` `_resolve_auto_dtype` picks `current_platform.supported_dtypes[0]`).
    gpt2 (fp32): 12 layers x 2 x 12 heads x 64 x 2 B = 36,864 B/token, not 73,728.
    """
    from kvcalc.formats import kv_format

    name = kv_format(model.dtype_format).name  # the model's format, looked up once per model
    if name == "fp32":
        name = fp32_served_as
        return name, f"auto ({name}: fp32 checkpoint served in {name})"
    return name, f"auto ({name})"


def vllm_cache_dtype(model: ModelSpec, k: StorageFormat, per_token_head_scales: bool = False) -> str | None:
    """vLLM's `--kv-cache-dtype` name for a cache of format `k`, as its backends list them:
    'auto' for the dtype the model is served in, 'bfloat16' / 'float16', 'fp8' (e4m3),
    'fp8_e5m2', 'int8_per_token_head' / 'fp8_per_token_head'; None for a format vLLM has no name
    for (not checked against the backends)."""
    if per_token_head_scales:
        return f"{k.name.split('_')[0]}{PER_TOKEN_HEAD}"
    if k.name == default_kv_dtype(model)[0]:
        return "auto"
    return {"bf16": "bfloat16", "fp16": "float16", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8_e5m2"}.get(k.name)


def split_kv_dtype(kv_cache_dtype: str) -> tuple[str, bool]:
    """('int8', True) for 'int8_per_token_head'; (name, False) otherwise."""
    name = kv_cache_dtype.strip().lower()
    if name.endswith(PER_TOKEN_HEAD):
        return name[: -len(PER_TOKEN_HEAD)], True
    return name, False


def page_size_bytes(
    layer: LayerSpec,
    k: StorageFormat,
    v: StorageFormat,
    block_size: int,
    tp: int = 1,
    per_token_head_scales: bool = False,
) -> int:
    """One block of one layer on one TP rank, bytes: block_size x layer_kv_bytes_per_token,
    plus 2 x block_size x kv_heads_per_rank x 4 for per-token-head scales (not for MLA).

    Source: `vllm/v1/kv_cache_interface.py` `AttentionSpec.page_size_bytes`,
    `FullAttentionSpec.real_page_size_bytes`, `MLAAttentionSpec.real_page_size_bytes`.
    """
    page = block_size * layer_kv_bytes_per_token(layer, k, v, tp)
    if per_token_head_scales and layer.kind != "mla":
        page += 2 * block_size * kv_heads_per_rank(layer, tp) * SCALE_BYTES
    return page


def uniform_page(model: ModelSpec, k: StorageFormat, v: StorageFormat, block_size: int, tp: int, scales: bool) -> int:
    """The one page size of every KV layer; raises `KvcalcError` (field `model`) when layers differ."""
    pages = {page_size_bytes(layer, k, v, block_size, tp, scales) for layer in model.layers if layer.caches_kv}
    if len(pages) != 1:  # vLLM `unify_kv_cache_spec_page_size` grows block sizes: not modelled
        raise KvcalcError(
            f"{model.name}: layers have different page sizes; not modelled by the vLLM profile",
            field="model",
            value=model.name,
            form=MESSAGE,
        )
    return pages.pop()


@dataclass(frozen=True)
class Group:
    """One vLLM KV cache group: its kind ('full' / 'sliding' / 'mla' / 'chunked' / 'mamba'), its
    window (a sliding window, or a chunked group's attention_chunk_size), how many real layers it
    holds (the rest up to the group size are padding), and, for a Mamba group, the pages one
    request holds whatever its length (`mamba_pages`). `dcp`: vLLM 0.33's decode context
    parallel size (`-dcp`); a full / MLA group's request spans cdiv(L, dcp) tokens per rank
    (`FullAttentionSpec.max_memory_usage_bytes`, `dcp_sharded`)."""

    kind: str
    window: int | None
    n_layers: int
    mamba_pages: int = 0
    dcp: int = 1


def chunked_local(model: ModelSpec) -> bool:
    """True when `model`'s sliding layers are Llama-4 chunked local attention (`CHUNKED_LOCAL_MODEL_TYPES`)."""
    return model.model_type in CHUNKED_LOCAL_MODEL_TYPES and any(layer.kind == "sliding" for layer in model.layers)


def kv_cache_groups(
    model: ModelSpec, hybrid_allocator: bool = True, mamba_pages: int = 1, *, widen: bool = False
) -> tuple[list[Group], int]:
    """(groups, layers per group) as vLLM V1 builds them (`get_kv_cache_groups`).

    Uniform models: one group of every layer. Mixed kinds with the hybrid allocator
    (`_get_kv_cache_groups_uniform_page_size`): layers_per_group = the smallest kind's layer
    count (`widen`, vLLM 0.33's rule: the largest when it is under 1.5 x the smallest), each
    kind in cdiv(n, layers_per_group) groups, layers i::n_groups. Kinds: full, sliding (per
    window), mla, chunked (Llama-4's chunked local attention, `ChunkedLocalAttentionSpec`),
    mamba (Mamba and Gated-DeltaNet layers, `MambaSpec`, holding `mamba_pages` pages per
    request); mlp layers have no cache. Without the hybrid allocator
    (`unify_hybrid_kv_cache_specs`) sliding and chunked layers become full ones; Mamba layers
    cannot: raises `KvcalcError` (field `hybrid_allocator`) with vLLM's message.
    """
    chunked = chunked_local(model)
    kinds: dict[tuple[str, int | None], int] = {}
    for layer in model.layers:
        if layer.kind == "mlp":
            continue
        kind: str = "mamba" if layer.kind in ("mamba", "linear") else layer.kind  # a group kind (+ 'chunked')
        window = layer.window if kind == "sliding" else None
        if kind == "sliding" and chunked:
            kind = "chunked"
        if kind in ("sliding", "chunked") and not hybrid_allocator:
            kind, window = "full", None
        kinds[(kind, window)] = kinds.get((kind, window), 0) + 1
    if ("mamba", None) in kinds and not hybrid_allocator:
        raise KvcalcError(
            f"{model.name} has Mamba / linear-attention layers: vLLM refuses it without the hybrid KV "
            "cache manager (Hybrid KV cache manager is disabled but failed to convert the KV cache "
            "specs to one unified type.)",
            field="hybrid_allocator",
            value=False,
            form=MESSAGE,
        )
    pages = {"mamba": mamba_pages}
    if len(kinds) == 1:
        (kind, window), n = next(iter(kinds.items()))
        return [Group(kind, window, n, pages.get(kind, 0))], n
    counts = list(kinds.values())
    layers_per_group = min(counts)
    if widen and max(counts) < min(counts) * 1.5:
        layers_per_group = max(counts)
    groups = []
    for (kind, window), n in kinds.items():
        n_groups = -(-n // layers_per_group)
        for i in range(n_groups):
            groups.append(Group(kind, window, len(range(i, n, n_groups)), pages.get(kind, 0)))
    return groups, layers_per_group


def pages_per_request(
    group: Group, max_model_len: int, block_size: int, max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS
) -> int:
    """Pages one request of `max_model_len` tokens needs in one group (`max_num_batched_tokens`:
    the tokens in flight, `VllmRules.in_flight_tokens`).

    full / mla: cdiv(L, block_size) (`FullAttentionSpec.max_memory_usage_bytes`);
    sliding: cdiv(min(window - 1 + in_flight, L), block_size) + 1
    (`SlidingWindowSpec.max_memory_usage_bytes`: the window may straddle a block boundary);
    chunked: cdiv(min(chunk + in_flight, L), block_size) (`ChunkedLocalAttentionSpec.max_memory_usage_bytes`:
    one chunk plus the tokens in flight, no straddle page); mamba: its fixed `mamba_pages`
    (`MambaSpec.max_memory_usage_bytes`). Under decode context parallel (`group.dcp` > 1) a
    full / MLA group counts cdiv(cdiv(L, dcp), block_size): vLLM 0.33 `v1/kv_cache_interface.py`
    `FullAttentionSpec.max_memory_usage_bytes` ("max_model_len = cdiv(max_model_len,
    dcp_world_size)" for a `dcp_sharded` spec; `MLAAttentionSpec` inherits it).
    """
    if group.kind == "mamba":
        return group.mamba_pages
    if group.kind == "chunked" and group.window is not None:
        return -(-min(group.window + max_num_batched_tokens, max_model_len) // block_size)
    if group.kind == "sliding" and group.window is not None:
        tokens = min(group.window - 1 + max_num_batched_tokens, max_model_len)
        return -(-tokens // block_size) + 1
    if group.dcp > 1 and group.kind in ("full", "mla"):
        tokens = -(-max_model_len // group.dcp)
        return -(-tokens // block_size)
    return -(-max_model_len // block_size)


def blocks_per_request(
    groups: list[Group],
    max_model_len: int,
    block_size: int,
    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
) -> int:
    """cdiv(sum of max_memory_usage_bytes over groups, page) = sum of pages over groups
    (`get_max_concurrency_for_kv_cache_config`; every group has the same page size)."""
    return sum(pages_per_request(g, max_model_len, block_size, max_num_batched_tokens) for g in groups)


def needed_bytes(
    model: ModelSpec,
    groups: list[Group],
    max_model_len: int,
    block_size: int,
    page: int,
    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
) -> int:
    """KV bytes one request of `max_model_len` needs, as `check_enough_kv_cache_memory` sums them:
    per real layer (no padding layers) its group's pages x page."""
    return sum(
        g.n_layers * pages_per_request(g, max_model_len, block_size, max_num_batched_tokens) * page for g in groups
    )


def check_formats(model: ModelSpec, k: StorageFormat, v: StorageFormat, *, version: str = "0.11") -> None:
    """Raise `KvcalcError` (field `k_dtype` / `v_dtype`) for a block-quantized format: vLLM
    `version` (0.6, 0.11) has no such cache dtype; the message names the version and the dtypes
    it takes."""
    for field, f in (("k_dtype", k), ("v_dtype", v)):
        if f.block_values != 1:
            raise KvcalcError(
                f"vLLM {version} has no '{f.name}' KV cache dtype; use auto, bfloat16, float16, fp8, "
                "fp8_e5m2, int8_per_token_head or fp8_per_token_head",
                field=field,
                value=f.name,
                form=MESSAGE,
            )


def check_model(model: ModelSpec) -> None:
    """Raise `KvcalcError` (field `model`) for a model the profile cannot size at all: hybrid
    attention + Mamba-2 layers (`refuse_hybrid_layers`), DeepSeek-V3.2's indexer (`refuse_indexer`)."""
    refuse_hybrid_layers(model, "vLLM")
    refuse_indexer(model, "vLLM")


def long_max_model_len(model: ModelSpec, max_model_len: int, allow_long: bool, tail: str) -> str | None:
    """vLLM's verdict on a max_model_len past the model's max_position_embeddings
    (`vllm/config/model.py` `_get_and_verify_max_len`; V0 0.6.x `vllm/config.py`): raises
    `KvcalcError` (field `max_model_len`) with vLLM's message ending in the version's `tail`, or,
    with `allow_long` (`VLLM_ALLOW_LONG_MAX_MODEL_LEN=1`), returns the warning vLLM logs. None
    when within the limit."""
    limit = model.context_limit  # derived as vLLM derives it: rope scaling included
    if limit is None or max_model_len <= limit:
        return None
    msg = (
        f"User-specified max_model_len ({max_model_len}) is greater than the derived max_model_len "
        f"(max_position_embeddings={model.max_position_embeddings} or model_max_length=None in model's "
        f"config.json)."
    )
    if allow_long:
        return f"{msg} Make sure the value is correct and within the model context size."
    raise KvcalcError(
        f"vLLM refuses it: {msg}{tail} (kvcalc reads the env var, or {flag('allow_long_max_model_len')})",
        field="max_model_len",
        value=max_model_len,
        form=MESSAGE,
    )


def no_memory_error(kv_memory_bytes: int, message: str) -> KvcalcError:
    """vLLM's start-up failure for `kv_memory_bytes` of KV memory (field `kv_memory_bytes`)."""
    return KvcalcError(
        f"vLLM would fail at start-up: {message}", field="kv_memory_bytes", value=kv_memory_bytes, form=MESSAGE
    )


def longest_context(fits, model: ModelSpec, max_model_len: int) -> int | None:
    """The longest context with `fits`, searched up to the model's limit (`context_limit`: its
    max_position_embeddings with rope scaling, or a max_model_len allowed past it): the limit itself
    when it fits. None when the model names no limit and nothing up to `SEARCH_LIMIT_TOKENS` fails
    (sliding windows)."""
    limit = model.context_limit
    if limit is None:
        return longest_fitting(fits, SEARCH_LIMIT_TOKENS)
    cap = max(limit, max_model_len)
    return longest_fitting(fits, cap) or (cap if fits(cap) else 0)


@dataclass
class Resolved:
    """What a version's `resolve` settles for `capacity` and `memory_for`: the formats the layers
    cache in, the block size and page vLLM uses, the hybrid allocator as vLLM leaves it, the Mamba
    pages a request holds, the lines vLLM logs before the KV figures, and kvcalc's notes. A model
    whose layers do not share one page carries its per-layer specs (`specs`, vLLM's
    `KVCacheSpec`s, `planning.LayerCache`) and whether the layout is block-outermost; then `page`
    is the pool's bytes per block and the groups are `planning.kv_cache_groups`'s."""

    k: StorageFormat
    v: StorageFormat
    block_size: int
    page: int
    hybrid_allocator: bool
    mamba_pages: int = 1
    log_lines: list[str] = dc_field(default_factory=list)
    notes: list[str] = dc_field(default_factory=list)
    specs: list[LayerCache] | None = None
    block_outermost: bool = False
