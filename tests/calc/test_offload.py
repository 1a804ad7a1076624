"""The offload, prefix and transfer arithmetic of `kvcalc.calc.offload` / `calc.transfer`,
each rule against its engine source and hand-derived bytes."""

from __future__ import annotations

import pytest

from kvcalc.calc import offload as C
from kvcalc.calc import transfer as T

GiB = 1 << 30


# ----- vLLM 0.33 native CPU offload: vllm/config/vllm.py, vllm/v1/kv_offload/cpu/spec.py ----------


@pytest.mark.parametrize(
    "size, expected",
    [
        (100, 107_374_182_400),  # 100 x 2^30: GiB, not 100 x 10^9
        (1.1, 1_181_116_006),  # int(1.1 * (1 << 30)) = int(1181116006.4): vLLM's float product, floored
        (0.5, 536_870_912),
    ],
)
def test_vllm_kv_offloading_size_is_gib(size, expected):
    # vllm/config/vllm.py _post_init_kv_transfer_config: cpu_bytes_to_use = kv_offloading_size * (1 << 30)
    assert C.vllm_cpu_bytes_to_use(size) == expected


@pytest.mark.parametrize(
    "cpu_bytes, block_bytes, world, bpc, replicated, n, chunk, rank_chunk",
    [
        # Llama-3.1-8B tp 1: 2 x 32 layers x 8 heads x 128 x 2 B = 131,072 B/token; 16-token block 2,097,152 B
        # (4 KiB-aligned already): 100 GiB / 2 MiB = 51,200 chunks
        (100 * GiB, 2_097_152, 1, 1, False, 51_200, 2_097_152, 2_097_152),
        # 1.1 GiB: 1,181,116,006 // 2,097,152 = 563 (563 x 2,097,152 = 1,180,696,576)
        (1_181_116_006, 2_097_152, 1, 1, False, 563, 2_097_152, 2_097_152),
        # Llama-3.1-70B tp 8: 16 x 80 x 2 x 1 head x 128 x 2 B = 655,360 B per rank per block; a chunk holds all
        # 8 ranks' blocks: 5,242,880 B; 1,000 GiB / 5,242,880 = 204,800 chunks
        (1000 * GiB, 655_360, 8, 1, False, 204_800, 5_242_880, 655_360),
        # the same with 4 blocks per chunk: 20,971,520 B chunks, 51,200 of them
        (1000 * GiB, 655_360, 8, 4, False, 51_200, 20_971_520, 2_621_440),
        # DeepSeek-V3 MLA, 16-token block: 61 x 576 x 2 B x 16 = 1,124,352 B = 274.5 pages of 4,096 -> padded to
        # 1,126,400; 10 GiB // 1,126,400 = 9,532 chunks
        (10 * GiB, 1_124_352, 1, 1, False, 9_532, 1_126_400, 1_124_352),
        # tp 8, one copy per rank: 8,994,816 B (2,196 pages, no pad): 10 GiB // 8,994,816 = 1,193
        (10 * GiB, 1_124_352, 8, 1, False, 1_193, 8_994_816, 1_124_352),
        # tp 8 replicated layout (pure MLA, one node): one copy for every rank, as tp 1
        (10 * GiB, 1_124_352, 8, 1, True, 9_532, 1_126_400, 1_124_352),
    ],
)
def test_vllm_chunks(cpu_bytes, block_bytes, world, bpc, replicated, n, chunk, rank_chunk):
    # cpu/spec.py: kv_bytes_per_chunk = worker bytes per block x copies x blocks_per_chunk;
    # num_chunks = cpu_bytes_to_use // round_up(kv_bytes_per_chunk, mmap.PAGESIZE)
    ch = C.vllm_chunks(cpu_bytes, block_bytes, world, bpc, replicated)
    assert (ch.num_chunks, ch.bytes_per_chunk, ch.rank_bytes_per_chunk) == (n, chunk, rank_chunk)
    assert ch.total_bytes == n * chunk <= cpu_bytes


def test_vllm_chunks_refuses_empty_block():
    with pytest.raises(ValueError):
        C.vllm_chunks(GiB, 0, 1)


@pytest.mark.parametrize(
    "groups, L, tpc, per_request",
    [
        ([("full", None)], 32_768, 16, 2_048),  # cdiv(32,768, 16)
        ([("full", None)], 1000, 64, 16),  # cdiv(1,000, 64)
        ([("full", None), ("full", None)], 1000, 16, 126),  # 2 x 63
        # gpt-oss: a full and a sliding (window 128) group: 2,048 + cdiv(128, 16) = 2,056
        ([("full", None), ("sliding", 128)], 32_768, 16, 2_056),
        ([("sliding", 4096)], 1000, 16, 63),  # a window longer than the request: the request
        ([("chunked", 8192), ("full", None)], 32_768, 64, 128 + 512),  # Llama-4 chunk 8,192: 128 chunks of 64
        ([("mamba", None), ("full", None)], 32_768, 576, 1 + 57),  # Mamba state: one chunk
    ],
)
def test_vllm_chunks_per_request(groups, L, tpc, per_request):
    # cpu/common.py _kv_cache_size_tokens; offloading/config.py get_sliding_window_size_in_chunks
    assert C.vllm_chunks_per_request(groups, L, tpc) == per_request


def test_vllm_chunks_per_request_refuses_other_kinds():
    with pytest.raises(ValueError):
        C.vllm_chunks_per_request([("indexer", None)], 100, 16)


@pytest.mark.parametrize(
    "num_chunks, L, per_request, tokens",
    [
        (51_200, 32_768, 2_048, 819_200),  # 51,200 x 32,768 // 2,048
        (563, 32_768, 2_048, 9_008),
        (100, 1000, 126, 793),  # 100 x 1,000 // 126
        (10_000, 32_768, 2_056, 159_377),  # gpt-oss: 10,000 x 32,768 // 2,056 = 159,377.4
    ],
)
def test_vllm_cpu_tokens_at_len(num_chunks, L, per_request, tokens):
    assert C.vllm_cpu_tokens_at_len(num_chunks, L, per_request) == tokens


# ----- SGLang 0.5.23 HiCache: python/sglang/srt/mem_cache/pool_host/base.py ------------------------


@pytest.mark.parametrize(
    "kw, tokens",
    [
        # --hicache-size 100 is GB, decimal, per rank: int(100e9 // 131,072) = 762,939; + one padding page = 762,940
        (dict(device_tokens=0, size_per_token=131_072, page_size=1, hicache_size_gb=100), 762_940),
        # ratio 2.0 of a 163,840-token device pool: 327,680; page 64: 327,680 // 64 + 1 = 5,121 pages = 327,744
        (dict(device_tokens=163_840, size_per_token=131_072, page_size=64, hicache_ratio=2.0), 327_744),
        # no ratio given: SGLang's default 2.0 (arg_groups/hicache_hook.py)
        (dict(device_tokens=1000, size_per_token=1, page_size=1), 2_001),
        # --hicache-size overrides --hicache-ratio
        (dict(device_tokens=1000, size_per_token=1_000_000, page_size=1, hicache_ratio=9.0, hicache_size_gb=1), 1_001),
    ],
)
def test_sglang_host_tokens(kw, tokens):
    assert C.sglang_host_tokens(**kw) == tokens


def test_sglang_budget_and_auto_ratio():
    # host_memory_budget_bytes: (available - 10 GiB) // ranks: (2e12 - 10,737,418,240) // 8 = 248,657,822,720
    assert C.sglang_host_budget_bytes(2 * 10**12, 8) == 248_657_822_720
    # auto: budget int(248,657,822,720 x 0.8) = 198,926,258,176; x 0.95 / 100 GB device = 1.8898 < 2.0
    r = C.sglang_auto_ratio(host_available_bytes=2 * 10**12, ranks_per_host=8, device_bytes=100 * 10**9)
    assert r == int(248_657_822_720 * 0.8) * 0.95 / 100e9
    # a small device pool keeps the requested 2.0
    assert C.sglang_auto_ratio(host_available_bytes=2 * 10**12, ranks_per_host=8, device_bytes=10**9) == 2.0
    with pytest.raises(ValueError, match="No host memory is left for HiCache after the 10 GiB reserve"):
        C.sglang_auto_ratio(host_available_bytes=10 * GiB, ranks_per_host=1, device_bytes=10**9)


# ----- LMCache 0.5.6: lmcache/v1/cache_engine.py ------------------------------------------------


@pytest.mark.parametrize("size, expected", [(5.0, 5 * GiB), (100, 107_374_182_400), (0.5, 536_870_912)])
def test_lmcache_max_local_cpu_size_is_gib(size, expected):
    # MixedMemoryAllocator(int(max_local_cpu_size * 1024**3)), per TP worker; logged "5.0 GB"
    assert C.lmcache_cpu_bytes(size) == expected


# ----- prefix reuse ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "P, N, B, reusable",
    [
        (12_000, 32_768, 16, 12_000),  # whole blocks: 750 x 16
        (12_000, 32_768, 576, 11_520),  # 20 x 576: 480 tokens past the last whole block recomputed
        (500, 32_768, 576, 0),  # shorter than one block: no hit at all
        (4_096, 4_096, 16, 4_080),  # the whole prompt: the last token is computed, so its block is too
        (4_097, 4_097, 16, 4_096),  # N - 1 = 4,096 is whole blocks: all of them reused
        (1, 1, 1, 0),  # a one-token prompt reuses nothing
        (0, 100, 16, 0),
    ],
)
def test_reusable_prefix_tokens(P, N, B, reusable):
    # vllm/v1/core/kv_cache_manager.py get_computed_blocks: max_cache_hit_length = num_tokens - 1, whole blocks
    assert C.reusable_prefix_tokens(P, N, B) == reusable


@pytest.mark.parametrize("usable, shared, own, n", [(10_239, 750, 1_298, 7), (100, 100, 1, 0), (100, 200, 1, 0)])
def test_shared_concurrency(usable, shared, own, n):
    # (10,239 - 750) // 1,298 = 7
    assert C.shared_concurrency(usable, shared, own) == n


def test_load_time():
    assert C.load_time_s(50 * 10**9, 50 * 10**9) == 1.0
    assert C.load_time_s(0, 1, latency_s=0.5) == 0.5


# ----- prefill-to-decode transfer ----------------------------------------------------------------


@pytest.mark.parametrize(
    "H, tp, rank, heads",
    [
        (8, 2, 1, range(4, 8)),
        (8, 8, 3, range(3, 4)),
        (2, 8, 5, range(1, 2)),
        (2, 8, 3, range(0, 1)),
        (1, 4, 2, range(0, 1)),
    ],
)
def test_heads_of_rank(H, tp, rank, heads):
    # vLLM QKVParallelLinear: H >= tp: H / tp contiguous heads; H < tp: head r x H // tp, replicated
    assert T.heads_of_rank(H, tp, rank) == heads


def test_transfer_tp_mismatch_gqa(gqa_spec):
    """gqa_spec: 4 layers, 2 KV heads of 64, bf16: one head is 2 x 64 x 2 B = 256 B per token per layer.
    1,000 tokens in blocks of 16: 63 blocks = 1,008 token slots (whole blocks move)."""
    from kvcalc.formats import kv_format

    bf16 = kv_format("bf16")
    # prefill tp 1 -> decode tp 2: decode rank j pulls head j from prefill rank 0
    # bytes = 4 layers x 1,008 x 256 = 1,032,192; regions = 4 layers x (K, V) x 63 blocks = 504
    up = T.pair_bytes(gqa_spec, 1000, bf16, bf16, prefill_tp=1, decode_tp=2, block_size=16)
    assert up == {(0, 0): (1_032_192, 504, 1), (0, 1): (1_032_192, 504, 1)}
    # prefill tp 2 -> decode tp 1: the decode rank pulls one head from each prefill rank
    down = T.pair_bytes(gqa_spec, 1000, bf16, bf16, prefill_tp=2, decode_tp=1, block_size=16)
    assert down == {(0, 0): (1_032_192, 504, 1), (1, 0): (1_032_192, 504, 1)}
    # prefill tp 2 -> decode tp 8: 2 heads over 8 ranks, replicated 4x: decode rank j holds head j x 2 // 8
    # and pulls it from the prefill rank holding it (0 for j < 4, 1 after)
    rep = T.pair_bytes(gqa_spec, 1000, bf16, bf16, prefill_tp=2, decode_tp=8, block_size=16)
    assert rep == {(j // 4, j): (1_032_192, 504, 1) for j in range(8)}
    # the same request, same layout: each pair moves the rank's whole share
    same = T.pair_bytes(gqa_spec, 1000, bf16, bf16, prefill_tp=2, decode_tp=2, block_size=16)
    assert same == {(0, 0): (1_032_192, 504, 1), (1, 1): (1_032_192, 504, 1)}
    # tp 8 -> tp 8 with 2 heads replicated 4x on both sides: each decode rank reads its own prefill rank
    rep8 = T.pair_bytes(gqa_spec, 1000, bf16, bf16, prefill_tp=8, decode_tp=8, block_size=16)
    assert rep8 == {(j, j): (1_032_192, 504, 1) for j in range(8)}


def test_transfer_skips_what_decode_holds(gqa_spec, sliding_spec):
    from kvcalc.formats import kv_format

    bf16 = kv_format("bf16")
    # 1,000 tokens = 63 blocks of 16; the decode side holds 500: floor(500 / 16) = 31 whole blocks stay;
    # 32 blocks move: 4 layers x 32 x 16 tokens x 2 heads x 256 B = 1,048,576 B; 4 x 2 x 32 = 256 regions
    got = T.pair_bytes(gqa_spec, 1000, bf16, bf16, prefill_tp=1, decode_tp=1, block_size=16, cached_tokens=500)
    assert got == {(0, 0): (1_048_576, 256, 2)}
    # sliding layers move their window's last 16 blocks either way (the cached 31 lie before them); full
    # layers 32: (4 x 16 + 2 x 32) x 16 tokens x 2 heads x 128 B = 524,288; regions 2 x (64 + 64) = 256
    s = T.pair_bytes(sliding_spec, 1000, bf16, bf16, prefill_tp=1, decode_tp=1, block_size=16, cached_tokens=500)
    assert s == {(0, 0): (524_288, 256, 2)}


def test_transfer_mla_and_sliding(mla_spec, sliding_spec):
    from kvcalc.formats import kv_format

    bf16 = kv_format("bf16")
    # mla_spec: 3 layers, latent 80 x 2 B = 160 B per token; replicated: each decode rank pulls all of it
    # 1,000 tokens in blocks of 64: 16 blocks = 1,024 slots: 3 x 1,024 x 160 = 491,520 B; 3 x 16 = 48 regions
    m = T.pair_bytes(mla_spec, 1000, bf16, bf16, prefill_tp=2, decode_tp=4, block_size=64)
    assert m == {(0, 0): (491_520, 48, 1), (0, 1): (491_520, 48, 1), (1, 2): (491_520, 48, 1), (1, 3): (491_520, 48, 1)}
    # sliding_spec: 6 layers (sliding, sliding, full) x 2, window 256, 2 KV heads of 32 (128 B per head-token)
    # 1,000 tokens, block 16, tp 1 -> 1: 4 sliding layers x 16 blocks (256 tokens) + 2 full x 63 blocks
    # bytes = (4 x 256 + 2 x 1,008) x 2 heads x 128 = 778,240; regions 2 x (4 x 16 + 2 x 63) = 380
    s = T.pair_bytes(sliding_spec, 1000, bf16, bf16, prefill_tp=1, decode_tp=1, block_size=16)
    assert s == {(0, 0): (778_240, 380, 2)}


def test_transfer_refuses_state_layers(hybrid_spec):
    from kvcalc.errors import KvcalcError
    from kvcalc.formats import kv_format

    bf16 = kv_format("bf16")
    with pytest.raises(KvcalcError, match="the transfer of mamba layers is not modelled"):
        T.pair_bytes(hybrid_spec, 100, bf16, bf16, prefill_tp=1, decode_tp=1, block_size=16)


def test_prefill_decode_ratio():
    # prefill: 1 GPU x 2 s per request; decode: 2 GPUs x 1,000 tokens x 0.02 s / 10 requests = 4 GPU-s
    assert T.prefill_decode_ratio(2.0, 1, 0.02, 2, 1000, 10) == 2.0 / 4.0
