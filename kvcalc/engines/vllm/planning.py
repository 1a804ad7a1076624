"""vLLM V1's KV cache planning over per-layer specs: groups, bytes per block, blocks per
request, the start-up check, for models whose layers do not share one page (the 2026 models).

A port of vLLM 0.33.0's `vllm/v1/core/kv_cache_planning.py` (`get_kv_cache_groups`,
`_get_kv_cache_bytes_per_block`, `_max_memory_usage_bytes_from_groups`,
`_estimate_max_model_len_from_groups`) and `vllm/v1/core/kv_cache_utils.py`
(`get_max_concurrency_for_kv_cache_config`) over `LayerCache` rows, which stand for vLLM's
`KVCacheSpec` objects (`vllm/v1/kv_cache_interface.py`). Pure arithmetic: the specs are built
by the release's module (`v0_33_specs`).

Grouping (`get_kv_cache_groups`), in vLLM's order:

1. every spec equal: one group of every layer (`_get_kv_cache_groups_uniform_spec`);
2. one spec type with one block size (`UniformTypeKVCacheSpecs.is_uniform_type`: MLA latent +
   indexer keys of DeepSeek-V3.2 / GLM-5): one group whose block is the sum of the layers' pages;
3. a block-outermost layout (DeepSeek-V4's BLHNC) with mixed pages: packed groups
   (`_get_packed_kv_cache_groups`: buckets of one type, balanced buckets split into groups of
   `_approximate_gcd` pattern repeats; the block stride is the widest group's bytes);
4. else pages unified by raising block sizes (`unify_kv_cache_spec_page_size`), then groups of
   equal layer counts (`_get_kv_cache_groups_uniform_page_size`: the smallest kind's count, or
   the largest when it is under 1.5x the smallest; layers i::n_groups).

Per request, a group holds cdiv(max_memory_usage_bytes, page) pages (a `UniformTypeKVCacheSpecs`
group the most of its layers', `max_memory_usage_pages`); every page is one block of the pool.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) for positive b (`vllm/utils/math_utils.py` `cdiv`)."""
    return -(-a // b)


def round_up(x: int, m: int) -> int:
    """x rounded up to a multiple of m (`vllm/utils/math_utils.py` `round_up`)."""
    return cdiv(x, m) * m


@dataclass(frozen=True)
class LayerCache:
    """One vLLM `KVCacheSpec` of one layer on one TP rank.

    - `spec`: the class name ('FullAttentionSpec', 'SlidingWindowSpec', 'MLAAttentionSpec',
      'SlidingWindowMLASpec', 'MambaSpec'); `cache`: what it holds, in words ('attn',
      'k_cache' for the indexer keys, 'swa_cache', 'state_cache').
    - `block_size`: tokens per block; `entry_bytes`: bytes of one stored state for all heads
      (heads x cell, `AttentionSpec.state_content_size_bytes` x `num_heads`), or for a Mamba spec
      its whole state; `tokens_per_state`: tokens one stored state covers (DeepSeek-V4's
      compressed caches: 4, 128).
    - `window`: a sliding window (tokens); `alignment`: the page is rounded up to a multiple of
      it (`_apply_alignment_padding`, DeepSeek-V4's 576 B); `page_padded`: a page padded to this
      (`page_size_padded`: unified Mamba pages, hybrid alignment).
    - `mamba_pages`: a Mamba spec's pages per request; `tag`: a name that keeps otherwise equal
      specs apart where vLLM's specs differ in a field that does not change bytes (MLA
      `cache_dtype_str`, `model_version`) - '' for most.
    """

    spec: str
    block_size: int
    entry_bytes: int
    cache: str = "attn"
    tokens_per_state: int = 1
    window: int | None = None
    alignment: int | None = None
    page_padded: int | None = None
    mamba_pages: int = 0
    tag: str = ""
    dcp: int = 1

    @property
    def real_page_size_bytes(self) -> int:
        """entries per block x bytes per entry (`AttentionSpec.unpadded_page_size_bytes`,
        `num_states` = block_size // tokens_per_state); a Mamba spec's state."""
        if self.spec == "MambaSpec":
            return self.entry_bytes
        return self.block_size // self.tokens_per_state * self.entry_bytes

    @property
    def page_size_bytes(self) -> int:
        """The padded page (`page_size_padded`), else the real one rounded up to `alignment`."""
        if self.page_padded is not None:
            return self.page_padded
        page = self.real_page_size_bytes
        return round_up(page, self.alignment) if self.alignment else page

    @property
    def sliding(self) -> bool:
        return self.spec in ("SlidingWindowSpec", "SlidingWindowMLASpec")

    def max_memory_usage_pages(self, max_model_len: int, in_flight: int) -> int:
        """Pages one request of `max_model_len` holds: full / MLA cdiv(L, block_size);
        sliding cdiv(min(window - 1 + in_flight, L), block_size) + 1
        (`SlidingWindowSpec.max_admission_blocks_per_request`); Mamba `mamba_pages`. `dcp` > 1
        (vLLM 0.33 decode context parallel): full / MLA specs are `dcp_sharded`, cdiv(cdiv(L,
        dcp), block_size) (`FullAttentionSpec.max_memory_usage_bytes`)."""
        if self.spec == "MambaSpec":
            return self.mamba_pages
        if self.sliding:
            return cdiv(min(self.window - 1 + in_flight, max_model_len), self.block_size) + 1  # type: ignore[operator]
        if self.dcp > 1 and self.spec in ("FullAttentionSpec", "MLAAttentionSpec"):
            return cdiv(cdiv(max_model_len, self.dcp), self.block_size)
        return cdiv(max_model_len, self.block_size)

    def uniform_type_key(self) -> tuple:
        """What `is_uniform_with_collection` compares: the registry's base type (MLA with full
        attention: `MLAAttentionSpec` subclasses `FullAttentionSpec`), a sliding window (and the
        MLA variant), Mamba."""
        if self.spec == "SlidingWindowMLASpec":
            return ("SlidingWindowMLASpec", self.window)
        if self.spec == "SlidingWindowSpec":
            return ("SlidingWindowSpec", self.window)
        if self.spec in ("FullAttentionSpec", "MLAAttentionSpec"):
            return (self.spec,)
        return (self.spec,)


@dataclass(frozen=True)
class CacheGroup:
    """One KV cache group: its layers' specs (one per layer of the group; a
    `UniformTypeKVCacheSpecs` group when `uniform_type`)."""

    specs: tuple[LayerCache, ...]
    uniform_type: bool = False

    @property
    def block_size(self) -> int:
        return self.specs[0].block_size

    @property
    def bytes_per_block(self) -> int:
        """Page bytes of all the group's layers (one block of each)."""
        return sum(s.page_size_bytes for s in self.specs)

    def pages_per_request(self, max_model_len: int, in_flight: int) -> int:
        """cdiv(max_memory_usage_bytes, page_size_bytes) of the group's spec; a
        `UniformTypeKVCacheSpecs` group: the most of its layers' (`max_memory_usage_pages`)."""
        return max(s.max_memory_usage_pages(max_model_len, in_flight) for s in set(self.specs))


def _uniform(specs: list[LayerCache]) -> bool:
    """`is_kv_cache_spec_uniform`: every layer's spec merges with the first's (equal specs)."""
    return len(set(specs)) == 1


def _uniform_type(specs: list[LayerCache]) -> bool:
    """`UniformTypeKVCacheSpecs.is_uniform_type`: one block size and one type."""
    return len({s.block_size for s in specs}) == 1 and len({s.uniform_type_key() for s in specs}) == 1


def unify_page_size(specs: list[LayerCache]) -> list[LayerCache]:
    """`unify_kv_cache_spec_page_size`: layers with a smaller page get a block size raised by
    max page / page when it divides; a Mamba page or a non-MLA attention page that does not
    divide is padded. Raises `ValueError` where vLLM raises NotImplementedError (an MLA page
    that does not divide the largest)."""
    pages = {s.page_size_bytes for s in specs}
    if len(pages) <= 1:
        return specs
    top = max(pages)
    out = []
    for s in specs:
        p = s.page_size_bytes
        if p == top:
            out.append(s)
        elif s.spec == "MambaSpec":
            out.append(replace(s, page_padded=top))
        elif top % p == 0:
            out.append(replace(s, block_size=s.block_size * (top // p)))
        elif s.spec in ("FullAttentionSpec", "SlidingWindowSpec"):
            out.append(replace(s, page_padded=top))
        else:
            raise ValueError(f"page size {p} is not divisible by the maximum page size {top} and cannot be padded")
    return out


def _approximate_gcd(values: list[int], lower_bound: int) -> int:
    """`_approximate_gcd`: the d in [lower_bound, max(values)] with the least total round-up
    padding sum((d - x % d) % d), ties to the larger d."""
    lo = max(1, lower_bound)
    hi = max(values)
    if lo > hi:
        return lo
    best_d, best_pad = lo, None
    for d in range(lo, hi + 1):
        pad = sum((d - x % d) % d for x in values)
        if best_pad is None or pad < best_pad or (pad == best_pad and d > best_d):
            best_d, best_pad = d, pad
    return best_d


def _packed_groups(specs: list[LayerCache]) -> list[CacheGroup]:
    """`_get_packed_kv_cache_groups` (block-outermost layout, mixed pages): buckets of one type
    (greedy, in layer order), balanced buckets (as many layers of each page size) split into
    groups of `repeats_per_group` pattern repeats, state buckets capped at the states the
    widest block already fits."""
    buckets: list[list[LayerCache]] = []
    for s in specs:
        for b in buckets:
            if _uniform_type([*b, s]):
                b.append(s)
                break
        else:
            buckets.append([s])
    info = []
    for b in buckets:
        by_page: dict[int, list[LayerCache]] = {}
        for s in b:
            by_page.setdefault(s.page_size_bytes, []).append(s)
        balanced = len({len(v) for v in by_page.values()}) == 1
        most = Counter(s.page_size_bytes for s in b).most_common(1)[0][1]
        info.append((b, by_page, balanced, most))
    floor = max((most for _, by_page, balanced, most in info if balanced and len(by_page) > 1), default=0)
    repeats = _approximate_gcd([most for *_, balanced, most in info if balanced], floor) if floor else None

    def n_groups_for(balanced: bool, most: int) -> int:
        return cdiv(most, repeats) if balanced and repeats is not None else 1

    def widest(by_page: dict[int, list[LayerCache]], n: int) -> int:
        return sum(cdiv(len(v), n) * page for page, v in by_page.items())

    def is_state(b: list[LayerCache]) -> bool:
        return b[0].spec == "MambaSpec" or (repeats is None and b[0].sliding)

    anchor = max(
        (
            widest(by_page, len(b) if is_state(b) else n_groups_for(balanced, most))
            for b, by_page, balanced, most in info
        ),
        default=0,
    )
    groups = []
    for b, by_page, balanced, most in info:
        n = n_groups_for(balanced, most)
        if anchor and is_state(b):
            n = max(n, cdiv(len(b), max(anchor // b[0].page_size_bytes, 1)))
        if n == 1:
            groups.append(CacheGroup(tuple(b), uniform_type=True))
            continue
        pattern = list(zip(*by_page.values()))
        for i in range(n):
            groups.append(CacheGroup(tuple(s for rep in pattern[i::n] for s in rep), uniform_type=True))
    return groups


def kv_cache_groups(specs: list[LayerCache], *, block_outermost: bool = False) -> list[CacheGroup]:
    """`get_kv_cache_groups` (module docstring) for one spec per cached layer, in layer order."""
    if not specs:
        return []
    if _uniform(specs):
        return [CacheGroup(tuple(specs))]
    if _uniform_type(specs):
        return [CacheGroup(tuple(specs), uniform_type=True)]
    if block_outermost and len({s.page_size_bytes for s in specs}) > 1:
        return _packed_groups(specs)
    unified = unify_page_size(specs)
    kinds: dict[LayerCache, list[LayerCache]] = {}
    for s in unified:
        kinds.setdefault(s, []).append(s)
    counts = [len(v) for v in kinds.values()]
    size = min(counts)
    if max(counts) < min(counts) * 1.5:
        size = max(counts)
    groups = []
    for layers in kinds.values():
        n = cdiv(len(layers), size)
        for i in range(n):
            groups.append(CacheGroup(tuple(layers[i::n])))
    return groups


def bytes_per_block(groups: list[CacheGroup]) -> int:
    """`_get_kv_cache_bytes_per_block`: the largest group's bytes per block, the pages of its
    layers summed (every group holds one block of each of its layers; vLLM's DeepSeek-V4 pages
    are already multiples of their 576-B alignment, so the block-outermost round-up adds none)."""
    return max(g.bytes_per_block for g in groups)


def blocks_per_request(groups: list[CacheGroup], max_model_len: int, in_flight: int) -> int:
    """Blocks one request of `max_model_len` takes from the pool: the sum over groups of
    `CacheGroup.pages_per_request` (`get_max_concurrency_for_kv_cache_config`)."""
    return sum(g.pages_per_request(max_model_len, in_flight) for g in groups)


def estimate_max_model_len(
    groups: list[CacheGroup], block_bytes: int, available_bytes: int, max_model_len: int, in_flight: int
) -> int:
    """`_estimate_max_model_len_from_groups`: vLLM's binary search over 1..max_model_len for the
    longest length whose bytes per block x blocks per request fit `available_bytes`; 0 when 1
    token does not."""

    def fits(n: int) -> bool:
        return block_bytes * blocks_per_request(groups, n, in_flight) <= available_bytes

    lo, hi = 1, max_model_len
    if not fits(lo):
        return 0
    result = 1
    while lo <= hi:
        mid = (lo + hi) // 2
        if fits(mid):
            result, lo = mid, mid + 1
        else:
            hi = mid - 1
    return result


def groups_text(groups: list[CacheGroup], block_bytes: int) -> str:
    """The groups in words for a result's notes: "vLLM 0.33 KV cache groups: 5 x 5 layers
    SlidingWindowSpec (block 16), 1 x 5 layers FullAttentionSpec (block 32); 655,360 B a block"."""
    parts: dict[tuple[str, int, int], int] = {}
    for g in groups:
        names = "+".join(sorted({s.spec for s in g.specs}))
        key = (names, len(g.specs), g.block_size)
        parts[key] = parts.get(key, 0) + 1
    text = ", ".join(f"{n} x {layers} layers {names} (block {block})" for (names, layers, block), n in parts.items())
    return f"KV cache groups: {text}; {block_bytes:,} B a block of the pool"
