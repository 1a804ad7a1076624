"""SGLang's token pool: `max_total_num_tokens` from a memory budget, and the pool it logs.

Models SGLang 0.4.x-0.5.x (`python/sglang/srt/`). Rules, each from its source:

- Cell size, `model_executor/model_runner.py` `profile_max_num_token`: bytes one token takes over
  all layers on one TP rank: get_num_kv_heads(tp) x head_dim x layers x 2 x element bytes
  (= sum of `layer_kv_bytes_per_token`); MLA (`use_mla_backend`): (kv_lora_rank +
  qk_rope_head_dim) x layers x element bytes, one buffer.
- Tokens: max_num_token = int(rest_memory x 2^30 // cell_size) where rest_memory is the static
  budget in GiB (`available - total x (1 - mem_fraction_static)`); here the budget is given in
  bytes, so tokens = budget // cell_size; then `init_memory_pool` rounds down to the page size:
  max_total_num_tokens // page_size x page_size (`--page-size`, default 1).
- The pool, `mem_cache/memory_pool.py` `MHATokenToKVPool._create_buffers`: one K and one V buffer
  per layer of shape (size + page_size, head_num, head_dim) (slot 0 is a padded dummy), so
  K bytes = layers x (size + page_size) x heads x head_dim x element bytes; `MLATokenToKVPool`:
  one buffer per layer of (size + page_size, 1, kv_lora_rank + qk_rope_head_dim).
- Its log line: "KV Cache is allocated. #tokens: N, K size: X GB, V size: Y GB" (MLA:
  "KV size: X GB") with `GB = 1024 * 1024 * 1024` in `memory_pool.py`: SGLang labels GiB
  values "GB". kvcalc prints the line exactly as SGLang does; the value is bytes / 2^30.

- Start-up check, `model_executor/model_runner.py` `init_memory_pool`: max_total_num_tokens <= 0
  raises "Not enough memory. Please try to increase --mem-fraction-static."
- KV dtype `auto` (`init_memory_pool`: kv_cache_dtype = self.dtype): the model's dtype as
  `configs/model_config.py` `_get_and_verify_dtype` resolves `--dtype auto` (adapted from vLLM
  0.6.4): an fp32 checkpoint is served in fp16 ("Following the common practice, we use float16
  for float32 models"), gemma-family fp32 checkpoints in bf16.

Sliding-window layers are sized like full ones (SGLang's SWA pool for hybrid models is not
modelled); mamba / linear-attention layers are refused.
"""

from __future__ import annotations

from kvcalc.formats import StorageFormat
from kvcalc.calc.kv_cache import check_tp, layer_kv_bytes_per_token, refuse_indexer
from kvcalc.engines import SEARCH_LIMIT_TOKENS, defaults, longest_fitting
from kvcalc.results import EngineResult
from kvcalc.errors import MESSAGE, OPTION_SAYS, KvcalcError
from kvcalc.schema import ModelSpec

VERSION = "SGLang 0.4.x-0.5.x (model_runner.profile_max_num_token, memory_pool.MHATokenToKVPool)"
DEFAULT_PAGE_SIZE = defaults.SGLANG_PAGE_SIZE
SGLANG_GB = 1 << 30  # memory_pool.py: GB = 1024 * 1024 * 1024 (a GiB, labelled "GB")


NO_MEMORY = "Not enough memory. Please try to increase --mem-fraction-static."


def default_kv_dtype(model: ModelSpec) -> tuple[str, str]:
    """(format name, label) of `--kv-cache-dtype auto`: the model's serving dtype; fp32
    checkpoints in fp16 (gemma*: bf16), `configs/model_config.py` `_get_and_verify_dtype`."""
    from kvcalc.formats import kv_format

    name = kv_format(model.dtype).name
    if name == "fp32":
        name = "bf16" if (model.model_type or "").startswith("gemma") else "fp16"
        return name, f"auto ({name}: fp32 checkpoint served in {name})"
    return name, f"auto ({name})"


def check_dtypes(k: StorageFormat, v: StorageFormat) -> None:
    """Raise `KvcalcError` (field `k_dtype` / `v_dtype`) for a format SGLang has no KV pool dtype
    for: it stores plain 16- or 8-bit values (`--kv-cache-dtype auto|bf16|fp8_e4m3|fp8_e5m2`)."""
    for field, f in (("k_dtype", k), ("v_dtype", v)):
        if f.block_values != 1:
            raise KvcalcError(f"SGLang has no '{f.name}' KV cache dtype; use auto, bf16, fp16, fp8_e4m3 or fp8_e5m2",
                              field=field, value=f.name, form=MESSAGE)


def _check(model: ModelSpec, k: StorageFormat, v: StorageFormat, tp: int, page_size: int) -> None:
    """The checks `capacity` and `memory_for` share: the TP degree (field `tp`), no mamba layers
    (`model`), plain formats (`k_dtype` / `v_dtype`), a positive page size (`page_size`)."""
    check_tp(model, tp)
    refuse_indexer(model, "SGLang")
    if any(not layer.caches_kv for layer in model.layers):
        raise KvcalcError(f"{model.name} has mamba / linear-attention layers; the SGLang profile models "
                          "attention layers only (use --engine ideal)", field="model", value=model.name, form=MESSAGE)
    check_dtypes(k, v)
    if page_size <= 0:
        raise KvcalcError(f"must be a positive integer, got {page_size}", field="page_size", value=page_size,
                          form=OPTION_SAYS)


def cell_size_bytes(model: ModelSpec, k: StorageFormat, v: StorageFormat, tp: int = 1) -> int:
    """Bytes one token takes in the pool over all layers on one TP rank
    (`profile_max_num_token`'s cell_size): sum of `layer_kv_bytes_per_token`, window ignored."""
    return sum(layer_kv_bytes_per_token(layer, k, v, tp) for layer in model.layers)


def pool_bytes(model: ModelSpec, size: int, page_size: int, k: StorageFormat, v: StorageFormat,
               tp: int = 1) -> tuple[int, int]:
    """(K bytes, V bytes) of the pool as `get_kv_size_bytes` sums them: every layer's buffer has
    size + page_size rows. For MLA the one latent buffer is returned as K and V is 0."""
    rows = size + page_size
    k_only = [layer.model_copy(update={"head_dim_v": 0}) for layer in model.layers]
    k_bytes = sum(layer_kv_bytes_per_token(layer, k, v, tp) for layer in k_only) * rows
    return k_bytes, cell_size_bytes(model, k, v, tp) * rows - k_bytes


def max_total_num_tokens(model: ModelSpec, kv_memory_bytes: int, k: StorageFormat, v: StorageFormat, tp: int = 1,
                         page_size: int = DEFAULT_PAGE_SIZE) -> int:
    """budget // cell_size, rounded down to a multiple of `page_size` (`init_memory_pool`)."""
    n = kv_memory_bytes // cell_size_bytes(model, k, v, tp)
    return n // page_size * page_size


def capacity(model: ModelSpec, kv_memory_bytes: int, k: StorageFormat, v: StorageFormat, *, tp: int = 1,
             page_size: int = DEFAULT_PAGE_SIZE, max_model_len: int | None = None,
             concurrency: int | None = None, kv_cache_dtype: str | None = None) -> EngineResult:
    """SGLang's pool for a static budget of `kv_memory_bytes` per rank: `max_total_num_tokens`,
    pages, K and V bytes and the log line. SGLang prints no concurrency; kvcalc reports
    tokens / (cdiv(L, page_size) x page_size), requests of L tokens the pool holds at once.

    Raises `KvcalcError` for TP layouts SGLang refuses, block formats and mamba layers.
    """
    _check(model, k, v, tp, page_size)
    L = max_model_len or model.default_context
    n = max_total_num_tokens(model, kv_memory_bytes, k, v, tp, page_size) if kv_memory_bytes > 0 else 0
    if n <= 0:
        raise KvcalcError(f"SGLang would fail at start-up ({max(kv_memory_bytes, 0):,} B holds no page of "
                          f"{cell_size_bytes(model, k, v, tp) * page_size:,} B): {NO_MEMORY}",
                          field="kv_memory_bytes", value=kv_memory_bytes, form=MESSAGE)
    k_bytes, v_bytes = pool_bytes(model, n, page_size, k, v, tp)
    if model.attention == "mla":
        line = f"KV Cache is allocated. #tokens: {n}, KV size: {(k_bytes + v_bytes) / SGLANG_GB:.2f} GB"
    else:
        line = (f"KV Cache is allocated. #tokens: {n}, K size: {k_bytes / SGLANG_GB:.2f} GB, "
                f"V size: {v_bytes / SGLANG_GB:.2f} GB")
    per_req = (lambda t: -(-t // page_size) * page_size)
    conc = n / per_req(L) if L else None
    longest = None
    if concurrency:
        longest = longest_fitting(lambda t: n >= concurrency * per_req(t), SEARCH_LIMIT_TOKENS)
    notes = ['SGLang prints GiB values (bytes / 2^30) labelled "GB" (memory_pool.py: GB = 1024 * 1024 * 1024)']
    if any(layer.kind == "sliding" for layer in model.layers):
        notes.append("sliding-window layers sized like full ones (SGLang's SWA pool is not modelled)")
    return EngineResult(
        engine="sglang", engine_version=VERSION.split(" (")[0], kv_memory_bytes=kv_memory_bytes,
        kv_cache_dtype=kv_cache_dtype or (k.name if k == v else f"{k.name}/{v.name}"),
        block_size=page_size, page_size_bytes=cell_size_bytes(model, k, v, tp) * page_size,
        num_gpu_blocks=n // page_size, kv_cache_tokens=n, engine_kv_bytes=k_bytes + v_bytes,
        max_model_len=L, max_concurrency=conc, concurrency=concurrency, longest_context=longest,
        k_bytes=k_bytes, v_bytes=v_bytes, log_lines=[line], notes=notes)


def memory_for(model: ModelSpec, seq_len: int, batch: int, k: StorageFormat, v: StorageFormat, *, tp: int = 1,
               page_size: int = DEFAULT_PAGE_SIZE) -> int:
    """The static budget per rank for `batch` requests of `seq_len` tokens:
    batch x cdiv(seq_len, page) x page x cell_size."""
    _check(model, k, v, tp, page_size)
    return batch * -(-seq_len // page_size) * page_size * cell_size_bytes(model, k, v, tp)
