"""vLLM's paged KV cache: blocks, pages, hybrid groups, and the lines vLLM logs.

Models vLLM V1 (0.10-0.11 line, `vllm/v1/`) and, with `v0=True`, the V0 engine of vLLM 0.6.x
(`vllm/worker/cache_engine.py`, `vllm/executor/gpu_executor.py`). Rules, each from its source:

- Page (one block of one layer), `vllm/v1/kv_cache_interface.py` `AttentionSpec.page_size_bytes`
  / `FullAttentionSpec.real_page_size_bytes`: block_size x kv_heads_per_rank x (head_size +
  head_size_v) x element bytes (= 2 x block_size x heads x head_size x bytes when K and V heads
  match); `MLAAttentionSpec`: block_size x 1 x (kv_lora_rank + qk_rope_head_dim) x bytes, one latent.
  Per-token-head scales (`kv_cache_dtype` `int8_per_token_head` / `fp8_per_token_head`,
  `KVQuantMode.is_per_token_head`): + 2 x block_size x kv_heads x 4 bytes (fp32) per page.
  Plain `fp8` / `fp8_e4m3` / `fp8_e5m2` keep one per-tensor scale outside the pages: no extra bytes.
- Blocks, `vllm/v1/core/kv_cache_utils.py` `get_num_blocks`: available // page // layers per group.
  All layers alike (`is_kv_cache_spec_uniform`): one group of every layer. Sliding + full with the
  hybrid allocator (`_get_kv_cache_groups_uniform_page_size`): layers_per_group (vLLM's `group_size`) = the smaller layer count
  (the larger one if it is under 1.5x the smaller), each kind split into cdiv(n, layers_per_group)
  groups (padding layers waste memory). Without it (`--disable-hybrid-kv-cache-manager`,
  `unify_hybrid_kv_cache_specs`): sliding layers become full ones (blocks for every token).
- "GPU KV cache size: N tokens", `_report_kv_cache_config`: num_blocks // n_groups x block_size,
  printed with thousands separators.
- "Maximum concurrency for L tokens per request: X.XXx", `get_max_concurrency_for_kv_cache_config`:
  num_blocks / cdiv(sum over groups of max_memory_usage_bytes, page); a full group needs
  cdiv(L, block_size) pages (`FullAttentionSpec.max_memory_usage_bytes`), a sliding one
  cdiv(min(window - 1 + max_num_batched_tokens, L), block_size) + 1 (`SlidingWindowSpec`).
- V0: `CacheEngine.get_cache_block_size` = block_size x sum over layers of (K + V) bytes per token
  (sliding layers full); GPU blocks = available // that, CPU blocks = swap_space // that;
  logs "# GPU blocks: N, # CPU blocks: M" (0.6.4+ prints "# CUDA blocks") and
  "Maximum concurrency for L tokens per request: X.XXx" = blocks x block_size / L.

- Block sizes, `vllm/config/cache.py` (0.11): `BlockSize = Literal[1, 8, 16, 32, 64, 128, 256]`
  (0.10 lacked 256); anything else is refused.
- Start-up checks, `vllm/v1/core/kv_cache_utils.py` `check_enough_kv_cache_memory`: available <= 0
  raises "No available memory for the cache blocks. ..."; less than one request of max_model_len
  needs (sum over layers of `max_memory_usage_bytes`) raises "To serve at least one request with
  the models's max seq len (L), (X GiB KV cache is needed, ...". kvcalc raises the first, and the
  second when not one block fits; otherwise it warns (`KvcalcWarning`) and notes it, so the
  block figures stay readable. V0 (`vllm/worker/worker.py` `raise_if_cache_size_invalid`): 0 GPU
  blocks raise the same "No available memory" text; L > blocks x block_size warns.
- KV dtype `auto`, `vllm/config/model.py` `_resolve_auto_dtype` (0.10.1+): the model's dtype, but
  an fp32 checkpoint is served in the platform's first supported dtype (bf16 on compute
  capability >= 8.0, `vllm/platforms/cuda.py` `supported_dtypes`); V0 0.6.x
  `_get_and_verify_dtype`: fp32 -> fp16. Either way 2 bytes per value (`default_kv_dtype`).

Tensor parallelism: each rank holds kv_heads_per_rank heads (MLA: the whole latent), and
`available` is one rank's memory; vLLM takes the smallest block count over ranks, which for equal
ranks is any rank's. Mamba / linear-attention layers (vLLM `MambaSpec`) are not modelled.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

from kvcalc.formats import StorageFormat
from kvcalc.calc.kv_cache import check_tp, kv_heads_per_rank, layer_kv_bytes_per_token, refuse_indexer
from kvcalc.engines import SEARCH_LIMIT_TOKENS, defaults, longest_fitting
from kvcalc.results import EngineResult
from kvcalc.errors import MESSAGE, OPTION_SAYS, KvcalcError, KvcalcWarning, flag
from kvcalc.schema import LayerSpec, ModelSpec

VERSION = "vLLM 0.11 (V1 engine); V0 as in vLLM 0.6.x"
DEFAULT_BLOCK_SIZE = defaults.VLLM_BLOCK_SIZE
#: vLLM V1 default `max_num_batched_tokens` for `vllm serve` on a GPU under 70 GiB is 2048, on
#: larger ones 8192 (`vllm/engine/arg_utils.py` `_set_default_args`); it only matters for
#: sliding-window pages in the concurrency figure.
DEFAULT_MAX_NUM_BATCHED_TOKENS = defaults.VLLM_MAX_NUM_BATCHED_TOKENS
#: block sizes vLLM 0.11 accepts (`vllm/config/cache.py` `BlockSize`).
BLOCK_SIZES = (1, 8, 16, 32, 64, 128, 256)
#: vLLM's start-up error when the profiled KV memory is <= 0 (`check_enough_kv_cache_memory`).
NO_MEMORY = ("No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
             "when initializing the engine.")
#: `kv_cache_dtype` suffix whose pages carry fp32 scales per token and head.
PER_TOKEN_HEAD = "_per_token_head"
SCALE_BYTES = 4  # torch.float32


def default_kv_dtype(model: ModelSpec, v0: bool = False) -> tuple[str, str]:
    """(format name, label) of `--kv-cache-dtype auto`: the dtype vLLM serves the model in.

    The model's dtype, except fp32 checkpoints: bf16 in vLLM 0.10.1+ on compute capability >= 8.0
    (`vllm/config/model.py` `_resolve_auto_dtype` picks `current_platform.supported_dtypes[0]`),
    fp16 in V0 (0.6.x `vllm/config.py` `_get_and_verify_dtype`: "we use float16 for float32
    models"). gpt2 (fp32): 12 layers x 2 x 12 heads x 64 x 2 B = 36,864 B/token, not 73,728.
    """
    from kvcalc.formats import kv_format

    name = kv_format(model.dtype).name
    if name == "fp32":
        name = "fp16" if v0 else "bf16"
        return name, f"auto ({name}: fp32 checkpoint served in {name})"
    return name, f"auto ({name})"


def check_block_size(block_size: int) -> None:
    """Raise `KvcalcError` (field `block_size`) unless `block_size` is one vLLM accepts (`BLOCK_SIZES`)."""
    if block_size <= 0:
        raise KvcalcError(f"must be a positive integer, got {block_size}", field="block_size", value=block_size,
                          form=OPTION_SAYS)
    if block_size not in BLOCK_SIZES:
        raise KvcalcError(f"vLLM accepts {', '.join(map(str, BLOCK_SIZES))} (vllm/config/cache.py BlockSize)",
                          field="block_size", value=block_size)


def needed_bytes(model: ModelSpec, groups: list[Group], max_model_len: int, block_size: int, page: int,
                 max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS) -> int:
    """KV bytes one request of `max_model_len` needs, as `check_enough_kv_cache_memory` sums them:
    per real layer (no padding layers) its group's pages x page."""
    return sum(g.n_layers * pages_per_request(g, max_model_len, block_size, max_num_batched_tokens) * page
               for g in groups)


def _too_small(L: int, needed: int, available: int, estimated: int) -> str:
    """vLLM's message when one request of L does not fit (`check_enough_kv_cache_memory`)."""
    est = (f"Based on the available memory, the estimated maximum model length is {estimated}. "
           if estimated > 0 else "")
    return (f"To serve at least one request with the models's max seq len ({L}), ({needed / 2**30:.2f} GiB KV "
            f"cache is needed, which is larger than the available KV cache memory ({available / 2**30:.2f} GiB). "
            f"{est}Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.")


def split_kv_dtype(kv_cache_dtype: str) -> tuple[str, bool]:
    """('int8', True) for 'int8_per_token_head'; (name, False) otherwise."""
    name = kv_cache_dtype.strip().lower()
    if name.endswith(PER_TOKEN_HEAD):
        return name[: -len(PER_TOKEN_HEAD)], True
    return name, False


def page_size_bytes(layer: LayerSpec, k: StorageFormat, v: StorageFormat, block_size: int, tp: int = 1,
                    per_token_head_scales: bool = False) -> int:
    """One block of one layer on one TP rank, bytes: block_size x layer_kv_bytes_per_token,
    plus 2 x block_size x kv_heads_per_rank x 4 for per-token-head scales (not for MLA).

    Source: `vllm/v1/kv_cache_interface.py` `AttentionSpec.page_size_bytes`,
    `FullAttentionSpec.real_page_size_bytes`, `MLAAttentionSpec.real_page_size_bytes`.
    """
    page = block_size * layer_kv_bytes_per_token(layer, k, v, tp)
    if per_token_head_scales and layer.kind != "mla":
        page += 2 * block_size * kv_heads_per_rank(layer, tp) * SCALE_BYTES
    return page


@dataclass(frozen=True)
class Group:
    """One vLLM KV cache group: its kind ('full' / 'sliding' / 'mla'), its window, and how many
    real layers it holds (the rest up to the group size are padding)."""

    kind: str
    window: int | None
    n_layers: int


def kv_cache_groups(model: ModelSpec, hybrid_allocator: bool = True) -> tuple[list[Group], int]:
    """(groups, layers per group) as vLLM V1 builds them (`get_kv_cache_groups`).

    Uniform models: one group of every layer. Sliding + full with the hybrid allocator:
    layers_per_group = min layer count (max if max < 1.5 x min), each kind in cdiv(n, layers_per_group)
    groups. Raises `KvcalcError` (field `model`) for models with mamba or linear-attention layers.
    """
    if any(not layer.caches_kv for layer in model.layers):
        raise KvcalcError(f"{model.name} has mamba / linear-attention layers; the vLLM profile models "
                          "attention layers only (use --engine ideal)", field="model", value=model.name, form=MESSAGE)
    kinds: dict[tuple[str, int | None], int] = {}
    for layer in model.layers:
        kind = layer.kind
        window = layer.window if kind == "sliding" else None
        if kind == "sliding" and not hybrid_allocator:
            kind, window = "full", None
        kinds[(kind, window)] = kinds.get((kind, window), 0) + 1
    if len(kinds) == 1:
        (kind, window), n = next(iter(kinds.items()))
        return [Group(kind, window, n)], n
    counts = list(kinds.values())
    layers_per_group = min(counts)
    if max(counts) < min(counts) * 1.5:
        layers_per_group = max(counts)
    groups = []
    for (kind, window), n in kinds.items():
        n_groups = -(-n // layers_per_group)
        for i in range(n_groups):
            groups.append(Group(kind, window, len(range(i, n, n_groups))))
    return groups, layers_per_group


def pages_per_request(group: Group, max_model_len: int, block_size: int,
                      max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS) -> int:
    """Pages one request of `max_model_len` tokens needs in one group.

    full / mla: cdiv(L, block_size) (`FullAttentionSpec.max_memory_usage_bytes`);
    sliding: cdiv(min(window - 1 + max_num_batched_tokens, L), block_size) + 1
    (`SlidingWindowSpec.max_memory_usage_bytes`: the window may straddle a block boundary).
    """
    if group.kind == "sliding" and group.window is not None:
        tokens = min(group.window - 1 + max_num_batched_tokens, max_model_len)
        return -(-tokens // block_size) + 1
    return -(-max_model_len // block_size)


def blocks_per_request(groups: list[Group], max_model_len: int, block_size: int,
                       max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS) -> int:
    """cdiv(sum of max_memory_usage_bytes over groups, page) = sum of pages over groups
    (`get_max_concurrency_for_kv_cache_config`; every group has the same page size)."""
    return sum(pages_per_request(g, max_model_len, block_size, max_num_batched_tokens) for g in groups)


def _formats(model: ModelSpec, k: StorageFormat, v: StorageFormat) -> None:
    for field, f in (("k_dtype", k), ("v_dtype", v)):
        if f.block_values != 1:
            raise KvcalcError(f"vLLM has no '{f.name}' KV cache dtype; use auto, bfloat16, float16, fp8, "
                              "fp8_e5m2, int8_per_token_head or fp8_per_token_head",
                              field=field, value=f.name, form=MESSAGE)


def _check(model: ModelSpec, k: StorageFormat, v: StorageFormat, tp: int, block_size: int) -> None:
    """The checks `capacity` and `memory_for` share: the TP degree, the formats, the block size."""
    check_tp(model, tp)
    refuse_indexer(model, "vLLM")
    _formats(model, k, v)
    check_block_size(block_size)


def _page(model: ModelSpec, k: StorageFormat, v: StorageFormat, block_size: int, tp: int, scales: bool) -> int:
    pages = {page_size_bytes(layer, k, v, block_size, tp, scales) for layer in model.layers}
    if len(pages) != 1:  # vLLM `unify_kv_cache_spec_page_size` grows block sizes: not modelled
        raise KvcalcError(f"{model.name}: layers have different page sizes; not modelled by the vLLM profile",
                          field="model", value=model.name, form=MESSAGE)
    return pages.pop()


def _no_memory(kv_memory_bytes: int, message: str) -> KvcalcError:
    """vLLM's start-up failure for `kv_memory_bytes` of KV memory (field `kv_memory_bytes`)."""
    return KvcalcError(f"vLLM would fail at start-up: {message}", field="kv_memory_bytes", value=kv_memory_bytes,
                       form=MESSAGE)


def _capacity_v0(model: ModelSpec, kv_memory_bytes: int, page: int, *, block_size: int, max_model_len: int,
                 concurrency: int | None, swap_space_bytes: int, dtype_name: str) -> EngineResult:
    """V0 (0.6.x): block bytes = page x n_layers (`CacheEngine.get_cache_block_size`, sliding
    layers full); GPU blocks = available // block bytes, CPU blocks = swap // block bytes;
    concurrency = blocks x block_size / L. Raises when not one block fits
    (`raise_if_cache_size_invalid`); warns when L > blocks x block_size."""
    L = max_model_len
    # vllm/worker/worker.py determine_num_available_blocks (0.6.x) memory report, last clause
    lines = [f"the rest of the memory reserved for KV Cache is {kv_memory_bytes / 2**30:.2f}GiB."]
    notes: list[str] = []
    if any(layer.kind == "sliding" for layer in model.layers):
        notes.append("V0 allocates sliding-window layers for the full length")
    block_bytes = page * model.n_layers  # CacheEngine.get_cache_block_size
    gpu_blocks = kv_memory_bytes // block_bytes
    cpu_blocks = swap_space_bytes // block_bytes
    if gpu_blocks <= 0:  # vllm/worker/worker.py raise_if_cache_size_invalid
        raise _no_memory(kv_memory_bytes, f"{kv_memory_bytes:,} B holds no block of {block_bytes:,} B: {NO_MEMORY}")
    if L > gpu_blocks * block_size:
        msg = (f"vLLM V0 would refuse to start: The model's max seq len ({L}) is larger than the maximum "
               f"number of tokens that can be stored in KV cache ({gpu_blocks * block_size}). Try increasing "
               "`gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine.")
        notes.append(msg)
        warnings.warn(msg, KvcalcWarning, stacklevel=3)  # at capacity's caller
    conc = gpu_blocks * block_size / L
    lines += [f"# GPU blocks: {gpu_blocks}, # CPU blocks: {cpu_blocks}",
              f"Maximum concurrency for {L} tokens per request: {conc:.2f}x"]
    longest = None
    if concurrency:
        longest = longest_fitting(lambda n: gpu_blocks * block_size / n >= concurrency, SEARCH_LIMIT_TOKENS)
    return EngineResult(
        engine="vllm", engine_version="vLLM 0.6.x (V0 engine)", kv_memory_bytes=kv_memory_bytes,
        kv_cache_dtype=dtype_name, block_size=block_size, page_size_bytes=block_bytes,
        num_gpu_blocks=gpu_blocks, num_cpu_blocks=cpu_blocks, kv_cache_tokens=gpu_blocks * block_size,
        engine_kv_bytes=gpu_blocks * block_bytes, max_model_len=L, max_concurrency=conc,
        concurrency=concurrency, longest_context=longest, log_lines=lines, notes=notes)


def _too_small_check(model: ModelSpec, groups: list[Group], num_blocks: int, kv_memory_bytes: int, page: int, *,
                     block_size: int, max_model_len: int, max_num_batched_tokens: int) -> list[str]:
    """`check_enough_kv_cache_memory`: raise when one request of L needs more than the memory
    and not one block fits; when blocks fit, warn and return the note (else no note)."""
    L = max_model_len
    need = needed_bytes(model, groups, L, block_size, page, max_num_batched_tokens)
    if need <= kv_memory_bytes:
        return []
    est = longest_fitting(
        lambda n: needed_bytes(model, groups, n, block_size, page, max_num_batched_tokens) <= kv_memory_bytes, L)
    msg = _too_small(L, need, kv_memory_bytes, est or 0)
    if num_blocks == 0:
        raise _no_memory(kv_memory_bytes, msg)
    warnings.warn(f"vLLM would refuse to start: {msg}", KvcalcWarning, stacklevel=4)  # at capacity's caller
    return [f"vLLM refuses to start at this max_model_len: {msg}"]


def _capacity_v1(model: ModelSpec, kv_memory_bytes: int, page: int, *, block_size: int, max_model_len: int,
                 concurrency: int | None, hybrid_allocator: bool, max_num_batched_tokens: int,
                 dtype_name: str) -> EngineResult:
    """V1: blocks = available // page // layers_per_group (`get_num_blocks`); tokens = blocks //
    n_groups x block_size (`_report_kv_cache_config`); concurrency = blocks / `blocks_per_request`."""
    L = max_model_len
    # vllm/v1/worker/gpu_worker.py determine_available_memory
    lines = [f"Available KV cache memory: {kv_memory_bytes / 2**30:.2f} GiB"]
    groups, layers_per_group = kv_cache_groups(model, hybrid_allocator)
    num_blocks = kv_memory_bytes // page // layers_per_group  # get_num_blocks
    notes = _too_small_check(model, groups, num_blocks, kv_memory_bytes, page, block_size=block_size,
                             max_model_len=L, max_num_batched_tokens=max_num_batched_tokens)
    tokens = num_blocks // len(groups) * block_size  # _report_kv_cache_config
    per_req = blocks_per_request(groups, L, block_size, max_num_batched_tokens)
    conc = num_blocks / per_req
    lines += [f"GPU KV cache size: {tokens:,} tokens",
              f"Maximum concurrency for {L:,} tokens per request: {conc:.2f}x"]
    padding = len(groups) * layers_per_group - model.n_layers
    if padding:
        notes.append(f"{len(groups)} KV cache groups of {layers_per_group} layers: {padding} padding layers")
    longest = None
    if concurrency:
        longest = longest_fitting(
            lambda n: num_blocks >= concurrency * blocks_per_request(groups, n, block_size, max_num_batched_tokens),
            SEARCH_LIMIT_TOKENS)
    return EngineResult(
        engine="vllm", engine_version=VERSION.split(";")[0], kv_memory_bytes=kv_memory_bytes,
        kv_cache_dtype=dtype_name, block_size=block_size, page_size_bytes=page * layers_per_group,
        num_gpu_blocks=num_blocks, usable_blocks=max(num_blocks - 1, 0), kv_cache_tokens=tokens,
        engine_kv_bytes=num_blocks * page * layers_per_group, max_model_len=L, max_concurrency=conc,
        concurrency=concurrency, longest_context=longest, log_lines=lines, notes=notes)


def capacity(model: ModelSpec, kv_memory_bytes: int, k: StorageFormat, v: StorageFormat, *, tp: int = 1,
             block_size: int = DEFAULT_BLOCK_SIZE, max_model_len: int | None = None,
             concurrency: int | None = None, hybrid_allocator: bool = True,
             per_token_head_scales: bool = False, kv_cache_dtype: str | None = None,
             max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
             v0: bool = False, swap_space_bytes: int = 0) -> EngineResult:
    """vLLM's blocks, tokens and concurrency for `kv_memory_bytes` of KV memory on each rank.

    V1: page = `page_size_bytes`; blocks = available // page // layers_per_group; tokens =
    blocks // n_groups x block_size; concurrency = blocks / `blocks_per_request`.
    V0: block bytes = page x n_layers; blocks = available // block bytes; concurrency =
    blocks x block_size / L. Raises `KvcalcError` for TP layouts vLLM refuses, block formats,
    mamba layers.
    """
    _check(model, k, v, tp, block_size)
    if max_num_batched_tokens <= 0:
        raise KvcalcError(f"must be a positive integer, got {max_num_batched_tokens}",
                          field="max_num_batched_tokens", value=max_num_batched_tokens, form=OPTION_SAYS)
    if kv_memory_bytes <= 0:
        raise _no_memory(kv_memory_bytes, NO_MEMORY)
    L = max_model_len or model.default_context
    if L is None:
        raise KvcalcError(f"{model.name} has no max_position_embeddings; give {flag('max_model_len')}",
                          field="max_model_len", form=MESSAGE)
    page = _page(model, k, v, block_size, tp, per_token_head_scales)
    dtype_name = kv_cache_dtype or (k.name if k == v else f"{k.name}/{v.name}")
    if v0:
        return _capacity_v0(model, kv_memory_bytes, page, block_size=block_size, max_model_len=L,
                            concurrency=concurrency, swap_space_bytes=swap_space_bytes, dtype_name=dtype_name)
    return _capacity_v1(model, kv_memory_bytes, page, block_size=block_size, max_model_len=L,
                        concurrency=concurrency, hybrid_allocator=hybrid_allocator,
                        max_num_batched_tokens=max_num_batched_tokens, dtype_name=dtype_name)


def memory_for(model: ModelSpec, seq_len: int, batch: int, k: StorageFormat, v: StorageFormat, *, tp: int = 1,
               block_size: int = DEFAULT_BLOCK_SIZE, hybrid_allocator: bool = True,
               per_token_head_scales: bool = False,
               max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS, v0: bool = False) -> int:
    """KV memory one rank needs so that vLLM fits `batch` requests of `seq_len` tokens
    (max concurrency >= batch): batch x blocks per request x page x group size (V0:
    batch x cdiv(seq_len, block_size) x block bytes)."""
    _check(model, k, v, tp, block_size)
    page = _page(model, k, v, block_size, tp, per_token_head_scales)
    if v0:
        return batch * -(-seq_len // block_size) * page * model.n_layers
    groups, layers_per_group = kv_cache_groups(model, hybrid_allocator)
    return batch * blocks_per_request(groups, seq_len, block_size, max_num_batched_tokens) * page * layers_per_group
