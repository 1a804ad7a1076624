"""SGLang 0.5.23's DeepSeek-V4 pools: `DSV4PoolConfigurator` turns the static budget of one rank
into the token counts of the SWA pool, the c4 (CSA) and c128 (HCA) compressed pools and the c4
compressor-state pool, after the c128 compressor states it reserves per request.

Sources, SGLang 0.5.23 (the PyPI wheel, `python/sglang/srt/`), a default CUDA launch:

- Launch defaults, `arg_groups/model_overrides/deepseek_v4.py`: attention backend dsv4, page_size
  256, --swa-full-tokens-ratio 0.1 when not given. `arg_groups/overrides.py`
  `_deepseek_v4_kv_cache_dtype` (892-912): "auto" becomes fp8_e4m3; only fp8_e4m3 and bfloat16
  pass its assertion ("{dtype} is not supported for DeepseekV4ForCausalLM"): no fp4 KV for V4.
- The latent row, `kernels/ops/attention/dsv4/kv_layout.py` `KVLayout.V4` (the layout
  `SGLANG_DSV4_KV_LAYOUT`'s default "v4" picks, `mem_cache/deepseek_v4_memory_pool.py`
  `select_dsv4_kv_layout` 198-238): 448 fp8 nope + 64 bf16 rope = 576 B, 8 B of ue8m0 scales,
  584 B a token; a page of p tokens takes ceil(584 p / 576) x 576 B (`page_bytes`). The configurator
  prices a main-cache token at page_bytes(256) / 256 = 585 B, a c4 token at page_bytes(64) / 64 =
  585 B, a c128 token at page_bytes(2) / 2 = 864 B (`_get_paged_kv_bytes_per_token`, 1353-1371).
  The same bytes whatever --kv-cache-dtype says: the V4 FlashMLA pool is this fp8 layout.
- The indexer key of a c4 token, `get_dsv4_indexer_bytes_per_token` (53-57): index_head_dim +
  index_head_dim / 128 x 4 = 132 B (fp8 with fp32 scales).
- Compressor states (`_get_dsv4_compress_state_dtype_sizes`, pool_configurator.py 136-145:
  float32 by default), rings of 8 rows (c4) and 128 rows (c128) without speculative decoding
  (`get_compress_state_ring_size` 60-79).
- Per SWA token (`_get_bytes_per_swa_token`, 1373-1389): 585 x layers + ring(8) / 256 x
  (2 x 2 x 512 x 4 + 2 x 2 x 128 x 4) x c4 layers.
- Per full token (`_compressed_bytes_per_full_token` 1391-1405, `_get_bytes_per_full_token`
  1434-1443): 0.1 x bytes per SWA token + (585 / 4 + 132 / 4) x c4 layers + 864 / 128 x c128 layers.
  The layers are the target model's (`compress_ratios[:num_hidden_layers]`: the MTP layer's entry
  is the draft's).
- `calculate_pool_sizes` (1623-1693): requests = `_resolve_max_running_requests_per_worker`
  (1557-1567: min(max(min(int(int(budget / per full token) / context_len x 512), 4096), 2048),
  full // 2)); the c128 states, `_get_c128_state_fixed_bytes` (1491-1510): ceil((requests + 1) x
  128 + 129, 128) x 128 rows of 2 x 512 fp32 on each c128 layer; full = int((budget - states) /
  per full token) // 256 x 256; swa = int(full x 0.1) // 256 x 256 (`_get_swa_tokens`), which
  `validate_swa_pool_size` (198-216) refuses at or below window + page = 384; c4 = full // 4,
  c128 = full // 128, c4_state = swa // 256 x 8 (`_compute_dsv4_sizes` 1462-1489).
- Parallelism: the latent has one head, so every attention rank holds it whole: the figures are
  per rank for any tp, and for DP attention (`attn_dp_size` enters only the cap mode that
  --max-running-requests turns on, which kvcalc does not model).
- Log lines: `_compute_dsv4_sizes` "DSV4 SWA sizing: ...", `calculate_pool_sizes` "DSV4 memory
  calculation: ...", `_to_config` "DSV4 pool sizes: ..." (GB = 2^30).

SGLang's float arithmetic is kept as SGLang writes it (the per-token figures are floats).
"""

from __future__ import annotations

from dataclasses import dataclass

from kvcalc.errors import MESSAGE, KvcalcError
from kvcalc.formats import StorageFormat
from kvcalc.schema import ModelSpec

GIB = 1 << 30
PAGE_SIZE = 256  # arg_groups/model_overrides/deepseek_v4.py (CUDA)
#: pool_configurator.py DSV4_DEFAULT_SWA_FULL_TOKENS_RATIO, and the override's value
DEFAULT_SWA_RATIO = 0.1
#: kvcalc format name -> SGLang's --kv-cache-dtype; the ones `_deepseek_v4_kv_cache_dtype` accepts
KV_DTYPES = {"fp8_e4m3": "fp8_e4m3", "bf16": "bfloat16"}
#: KVLayout.V4: data bytes (448 fp8 + 64 bf16), scale bytes, the page alignment (kv_layout.py 50-98)
V4_DATA_BYTES, V4_SCALE_BYTES, V4_PAGE_ALIGN = 576, 8, 576
V4_HEAD_DIM = 512  # 448 nope + 64 rope: the only latent the V4 layout holds
#: compressor-state rows per request without speculative decoding (get_compress_state_ring_size)
RING_C4, RING_C128 = 8, 128
STATE_BYTES = 4  # SGLANG_DSV4_COMPRESS_STATE_DTYPE float32
MAX_REQS_LOW, MAX_REQS_HIGH, MAX_REQS_SCALE = 2048, 4096, 512
ARCH = "DeepseekV4ForCausalLM"


def is_dsv4(model: ModelSpec) -> bool:
    """True for a model with compressed (CSA / HCA) layers: SGLang's `is_deepseek_v4`."""
    return any(layer.compress_ratio for layer in model.layers)


def check_dtype(k: StorageFormat, v: StorageFormat) -> None:
    """Raise `KvcalcError` (field `k_dtype`) for a KV dtype `_deepseek_v4_kv_cache_dtype` refuses,
    in SGLang's words (overrides.py 907-910)."""
    for f in (k, v):
        if f.name not in KV_DTYPES:
            raise KvcalcError(
                f"SGLang 0.5.23: {f.name} is not supported for {ARCH} (arg_groups/overrides.py "
                "_deepseek_v4_kv_cache_dtype accepts fp8_e4m3 and bfloat16)",
                field="k_dtype",
                value=f.name,
                form=MESSAGE,
            )


def page_bytes(page: int) -> int:
    """`KVLayout.V4.page_bytes(page)`: ceil(page x 584 / 576) x 576 B."""
    raw = page * (V4_DATA_BYTES + V4_SCALE_BYTES)
    return -(-raw // V4_PAGE_ALIGN) * V4_PAGE_ALIGN


def paged_bytes_per_token(ratio: int = 0) -> float:
    """`_get_paged_kv_bytes_per_token(ratio)`: page_bytes(256 / ratio) / (256 / ratio), B (float)."""
    page = PAGE_SIZE // ratio if ratio else PAGE_SIZE
    return page_bytes(page) / page


def indexer_bytes(index_head_dim: int) -> int:
    """`get_dsv4_indexer_bytes_per_token(d, False)`: d + d / 128 x 4 B."""
    return index_head_dim + index_head_dim // 128 * 4


@dataclass(frozen=True)
class Geometry:
    """What the configurator reads: target layers, c4 / c128 layers, head dims, window, context."""

    n_layers: int
    n_c4: int
    n_c128: int
    attn_head_dim: int
    index_head_dim: int
    window: int
    context_len: int


def geometry(model: ModelSpec) -> Geometry:
    """The configurator's inputs from `model`; raises `KvcalcError` (field `model`) for a layer
    the V4 pool cannot hold (a head other than 512, a ratio other than 0 / 4 / 128)."""
    ratios = [layer.compress_ratio for layer in model.layers]
    bad = sorted({r for r in ratios if r not in (0, 4, 128)})
    heads = {layer.head_dim_k for layer in model.layers}
    if bad or heads != {V4_HEAD_DIM}:
        raise KvcalcError(
            f"{model.name}: kvcalc models SGLang 0.5.23's DeepSeek-V4 pool for compress ratios 0 / 4 / "
            f"128 and a 512-wide latent (KVLayout.V4), not ratios {bad or ratios[:0]} / heads {sorted(heads)}",
            field="model",
            value=model.name,
            form=MESSAGE,
        )
    windows = {layer.window for layer in model.layers}
    if len(windows) != 1 or None in windows or not model.default_context:
        raise KvcalcError(
            f"{model.name}: SGLang's DeepSeek-V4 pool needs one sliding window and a context length",
            field="model",
            value=model.name,
            form=MESSAGE,
        )
    return Geometry(
        n_layers=len(ratios),
        n_c4=ratios.count(4),
        n_c128=ratios.count(128),
        attn_head_dim=V4_HEAD_DIM,
        index_head_dim=model.index_head_dim or 0,
        window=int(windows.pop() or 0),
        context_len=model.default_context,
    )


def bytes_per_swa_token(g: Geometry) -> float:
    """`_get_bytes_per_swa_token`: 585 x layers + 8 / 256 x (c4 state + c4 indexer state) x c4 layers."""
    c4_state = 2 * 2 * g.attn_head_dim * STATE_BYTES
    c4_indexer_state = 2 * 2 * g.index_head_dim * STATE_BYTES
    return paged_bytes_per_token() * g.n_layers + (RING_C4 / PAGE_SIZE * (c4_state + c4_indexer_state) * g.n_c4)


def bytes_per_full_token(g: Geometry, swa_ratio: float) -> float:
    """`_get_bytes_per_full_token`: ratio x per SWA token + c4 and c128 bytes of one full token."""
    c4 = 1 / 4 * paged_bytes_per_token(4) + 1 / 4 * indexer_bytes(g.index_head_dim)
    c128 = 1 / 128 * paged_bytes_per_token(128)
    total: float = 0
    for per_layer, n in ((c4, g.n_c4), (c128, g.n_c128)):  # stage_owner_layers order: 4, 128
        if n:
            total += per_layer * n
    return swa_ratio * bytes_per_swa_token(g) + total


def max_running_requests(g: Geometry, budget_bytes: int, per_full_token: float) -> int:
    """`_resolve_max_running_requests_per_worker`, SGLang's estimate before the pools exist."""
    full = int(budget_bytes / per_full_token)
    estimated = int(full / g.context_len * MAX_REQS_SCALE)
    estimated = max(min(estimated, MAX_REQS_HIGH), MAX_REQS_LOW)
    return min(estimated, full // 2)


def c128_state_bytes(g: Geometry, requests: int) -> int:
    """`_get_c128_state_fixed_bytes`: ceil(((requests + 1) x 128 + 129) / 128) x 128 rows of
    2 x 512 fp32 values on each c128 layer."""
    if not g.n_c128:
        return 0
    rows = (requests + 1) * RING_C128 + RING_C128 + 1
    rows = -(-rows // 128) * 128
    return rows * 2 * g.attn_head_dim * STATE_BYTES * g.n_c128


@dataclass(frozen=True)
class Pools:
    """One rank's pools: token counts, the configurator's prices and its log lines."""

    full: int
    swa: int
    c4: int
    c128: int
    c4_state: int
    max_running_requests: int
    per_full_token: float
    per_swa_token: float
    c128_state_bytes: int
    log_lines: tuple[str, ...]

    @property
    def priced_bytes(self) -> int:
        """What the configurator counts as spent: the c128 states + full x per full token, B."""
        return self.c128_state_bytes + int(self.full * self.per_full_token)


def pools(model: ModelSpec, budget_bytes: int, swa_ratio: float | None = None) -> Pools:
    """`DSV4PoolConfigurator.calculate_pool_sizes(budget_bytes, 256)`; `swa_ratio`: the operator's
    --swa-full-tokens-ratio (None: not given, 0.1). Raises `KvcalcError` (field
    `kv_memory_bytes`) with SGLang's `validate_swa_pool_size` message when the SWA pool cannot
    hold one request."""
    g = geometry(model)
    ratio = DEFAULT_SWA_RATIO if swa_ratio is None else swa_ratio
    per_full = bytes_per_full_token(g, ratio)
    reqs = max_running_requests(g, budget_bytes, per_full)
    fixed = c128_state_bytes(g, reqs)
    for_tokens = max(budget_bytes - fixed, 0)
    full = int(for_tokens / per_full) // PAGE_SIZE * PAGE_SIZE
    while full > 0 and full * per_full > for_tokens:  # no ratio-1 / 2 layers: no padding pages
        full -= PAGE_SIZE
    swa = int(full * ratio) // PAGE_SIZE * PAGE_SIZE
    if g.window + PAGE_SIZE >= swa:
        raise KvcalcError(
            f"SGLang would fail at start-up: SWA pool ({swa} tokens) cannot hold even one request: "
            f"the prefill admission floor is sliding_window_size ({g.window}) + page_size ({PAGE_SIZE}). "
            "Increase --swa-full-tokens-ratio or the total KV budget. (DSV4PoolConfigurator reserved "
            f"{fixed:,} B of c128 compressor states for {reqs:,} requests out of {budget_bytes:,} B)",
            field="kv_memory_bytes",
            value=budget_bytes,
            form=MESSAGE,
        )
    c4, c128, c4_state = full // 4, full // 128, swa // PAGE_SIZE * RING_C4
    source = "default" if swa_ratio is None else "explicit"
    lines = (
        f"DSV4 SWA sizing: mode=ratio ({source}), swa_tokens={swa}, swa_full_tokens_ratio={ratio}",
        "DSV4 memory calculation: unified=False, unified_fp8=False, dspark_draft_bf16=False, "
        f"bytes_per_full_token={per_full:.2f}, available_bytes={budget_bytes / GIB:.2f} GB, "
        f"c128_state_fixed={fixed / GIB:.2f} GB, c2_state_fixed=0.00 GB, swa_fixed=0.00 GB, "
        f"swa_ring_fixed=0.00 GB, c4_state_fixed=0.00 GB, full_token={full}",
        f"DSV4 pool sizes: full={full}, swa={swa}, c4={c4}, c128={c128}, c4_state={c4_state}, c128_state=0",
    )
    return Pools(
        full=full,
        swa=swa,
        c4=c4,
        c128=c128,
        c4_state=c4_state,
        max_running_requests=reqs,
        per_full_token=per_full,
        per_swa_token=bytes_per_swa_token(g),
        c128_state_bytes=fixed,
        log_lines=lines,
    )


def least_budget(
    model: ModelSpec, need_full: int, need_swa: int, swa_ratio: float | None = None, need_requests: int = 0
) -> int:
    """The least budget per rank whose pools hold `need_full` full and `need_swa` SWA tokens
    and whose request estimate (`Pools.max_running_requests`) admits `need_requests` (bisection
    over `pools`, which is monotone in the budget)."""

    def enough(budget: int) -> bool:
        try:
            p = pools(model, budget, swa_ratio)
        except KvcalcError:
            return False
        return p.full >= need_full and p.swa >= need_swa and p.max_running_requests >= need_requests

    hi = GIB
    while not enough(hi):
        hi *= 2
    lo = 0
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if enough(mid) else (mid, hi)
    return hi
