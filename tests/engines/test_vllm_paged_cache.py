"""vLLM's paged cache (`kvcalc/engines/vllm.py`): whole `capacity` results pinned for V1 and V0,
the start-up checks at their exact boundaries, the hybrid group sizes, `memory_for`,
`page_size_bytes` and `default_kv_dtype`.

Written for mutation testing (tools/mutation.py). Models: configs/models/llama-3.1-8b.yaml
(32 layers, 8 KV heads x 128, bf16: 4,096 B per layer per token), gemma-3-27b.yaml (52 sliding
layers, window 1024, + 10 full; 16 KV heads x 128: 8,192 B per layer per token in bf16),
mistral-7b-v0.1.yaml (32 layers, all sliding, window 4096, 8 KV heads x 128), and
tests/data/engine-configs/deepseek-v2-lite.yaml (MLA). GiB = 2^30 B. Each vLLM rule is cited
in the module docstring of kvcalc/engines/vllm.py.
"""

from __future__ import annotations

import warnings
from contextlib import contextmanager
from pathlib import Path

import pytest

from kvcalc.engines import vllm
from kvcalc.engines.vllm import VllmOptions
from kvcalc.errors import KvcalcError, KvcalcWarning
from kvcalc.formats import kv_format
from kvcalc.load.models import load_model
from kvcalc.schema import ModelSpec

CFG = Path(__file__).parents[1] / "data" / "engine-configs"
BF16, FP8, INT8, Q8 = kv_format("bf16"), kv_format("fp8"), kv_format("int8"), kv_format("q8_0")
GiB, MiB = 2**30, 2**20
V1 = "vLLM 0.11 (V1 engine)"
V0 = "vLLM 0.6.x (V0 engine)"
EMPTY = dict(
    engine_state_bytes=None, kv_memory_basis=None, n_cells=None, n_ctx=None, k_bytes=None, v_bytes=None, devices=None
)
TRY = "Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine."


def llama():
    return load_model("llama-3.1-8b")


def gemma():
    return load_model("gemma-3-27b")


@contextmanager
def no_warnings():
    """Turn warnings into errors (pytest's config ignores KvcalcWarning otherwise)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


# ----- V1 ---------------------------------------------------------------------------------------


def test_v1_llama_tp2_block32():
    # tp 2 -> 4 KV heads/rank: 4 x 256 x 2 B = 2,048 B per layer per token; page = 32 x 2,048 = 65,536 B;
    # one group of 32 layers -> page_size_bytes 32 x 65,536 = 2 MiB; 4 GiB // 65,536 // 32 = 2,048 blocks;
    # tokens 2,048 x 32 = 65,536; a request of 8,192 needs cdiv(8192, 32) = 256 blocks -> 8.00x;
    # 4 requests of n: 4 x cdiv(n, 32) <= 2,048 -> n <= 16,384. Block 0 is the null block: 2,047 usable.
    r = vllm.capacity(
        llama(),
        4 * GiB,
        BF16,
        BF16,
        tp=2,
        max_model_len=8192,
        concurrency=4,
        options=VllmOptions(block_size=32, version="0.11"),
    )
    assert r.model_dump() == dict(
        EMPTY,
        engine="vllm",
        engine_version=V1,
        kv_memory_bytes=4 * GiB,
        kv_cache_dtype="bf16",
        block_size=32,
        page_size_bytes=2 * MiB,
        num_gpu_blocks=2048,
        usable_blocks=2047,
        num_cpu_blocks=None,
        kv_cache_tokens=65_536,
        engine_kv_bytes=4 * GiB,
        max_model_len=8192,
        max_concurrency=8.0,
        concurrency=4,
        longest_context=16_384,
        log_lines=[
            "Available KV cache memory: 4.00 GiB",
            "GPU KV cache size: 65,536 tokens",
            "Maximum concurrency for 8,192 tokens per request: 8.00x",
        ],
        notes=[],
    )


def test_v1_gemma_hybrid_groups_padding_and_batched_tokens():
    # 52 sliding + 10 full: layers_per_group = 10 (52 >= 1.5 x 10); sliding in cdiv(52, 10) = 6 groups,
    # full in 1: 7 groups x 10 = 70 slots for 62 layers -> 8 padding layers.
    # page = 16 x 8,192 = 131,072 B (x 10 = 1,310,720 B); 8 GiB // 131,072 // 10 = 6,553 blocks;
    # tokens = 6,553 // 7 x 16 = 936 x 16 = 14,976.
    # max_num_batched_tokens 2,048: a sliding group needs cdiv(min(1023 + 2048, L), 16) + 1 = 192 + 1 = 193
    # pages, the full group cdiv(32768, 16) = 2,048: 6 x 193 + 2,048 = 3,206 -> 6,553 / 3,206 = 2.04x.
    # 3 requests of n >= 3,071: 3 x (1,158 + cdiv(n, 16)) <= 6,553 -> cdiv(n, 16) <= 1,026 -> n <= 16,416.
    # need = (52 x 193 + 10 x 2,048) x 131,072 = 3,999,793,152 B < 8 GiB: no warning.
    with no_warnings():
        r = vllm.capacity(
            gemma(),
            8 * GiB,
            BF16,
            BF16,
            max_model_len=32768,
            concurrency=3,
            kv_cache_dtype="auto",
            options=VllmOptions(max_num_batched_tokens=2048, version="0.11"),
        )
    assert r.model_dump() == dict(
        EMPTY,
        engine="vllm",
        engine_version=V1,
        kv_memory_bytes=8 * GiB,
        kv_cache_dtype="auto",
        block_size=16,
        page_size_bytes=1_310_720,
        num_gpu_blocks=6553,
        usable_blocks=6552,
        num_cpu_blocks=None,
        kv_cache_tokens=14_976,
        engine_kv_bytes=6553 * 1_310_720,
        max_model_len=32768,
        max_concurrency=pytest.approx(6553 / 3206),
        concurrency=3,
        longest_context=16_416,
        log_lines=[
            "Available KV cache memory: 8.00 GiB",
            "GPU KV cache size: 14,976 tokens",
            "Maximum concurrency for 32,768 tokens per request: 2.04x",
        ],
        notes=["7 KV cache groups of 10 layers: 8 padding layers"],
    )
    # with vLLM's default 8,192 batched tokens a sliding group needs cdiv(9215, 16) + 1 = 577 pages
    r = vllm.capacity(gemma(), 8 * GiB, BF16, BF16, max_model_len=32768, options=VllmOptions(version="0.11"))
    assert r.max_concurrency == pytest.approx(6553 / (6 * 577 + 2048))


def test_v1_too_small_for_max_model_len_warns_with_the_estimate():
    # gemma-3-27b, 2 GiB, 2,048 batched tokens, L = 131,072: need = (52 x 193 + 10 x 8,192) x 131,072
    # = 12,052,856,832 B = 11.23 GiB > 2.00 GiB, but 2 GiB // 131,072 // 10 = 1,638 blocks exist: a warning.
    # the estimate: (10,036 + 10 x cdiv(n, 16)) x 131,072 <= 2 GiB -> cdiv(n, 16) <= 634 -> n = 10,144.
    msg = (
        "To serve at least one request with the models's max seq len (131072), (11.23 GiB KV cache is needed, "
        "which is larger than the available KV cache memory (2.00 GiB). Based on the available memory, the "
        f"estimated maximum model length is 10144. {TRY}"
    )
    with pytest.warns(KvcalcWarning) as w:
        r = vllm.capacity(
            gemma(), 2 * GiB, BF16, BF16, options=VllmOptions(max_num_batched_tokens=2048, version="0.11")
        )
    assert [str(x.message) for x in w] == [f"vLLM would refuse to start: {msg}"]
    assert r.notes == [
        f"vLLM refuses to start at this max_model_len: {msg}",
        "7 KV cache groups of 10 layers: 8 padding layers",
    ]
    # 1,638 // 7 x 16 = 3,744 tokens; 1,638 / (6 x 193 + 8,192) = 0.175 -> "0.18x"
    assert (r.num_gpu_blocks, r.kv_cache_tokens) == (1638, 3744)
    assert r.log_lines[1:] == [
        "GPU KV cache size: 3,744 tokens",
        "Maximum concurrency for 131,072 tokens per request: 0.18x",
    ]


def test_v1_estimate_of_one_token_is_printed():
    # block 1: page = 4,096 B per layer; 196,608 B // 4,096 // 32 = 1 block. One token needs
    # 32 x 4,096 = 131,072 B, two need 262,144 B > 196,608: the estimate is 1 (printed, since > 0).
    with pytest.warns(KvcalcWarning, match="the estimated maximum model length is 1. Try"):
        r = vllm.capacity(llama(), 196_608, BF16, BF16, options=VllmOptions(block_size=1, version="0.11"))
    assert "(16.00 GiB KV cache is needed" in r.notes[0]  # 131,072 tokens x 131,072 B = 16 GiB
    assert "available KV cache memory (0.00 GiB)" in r.notes[0]


def test_v1_exactly_enough_memory_starts_without_a_warning():
    # L = 1,024, block 16: need = 32 layers x 64 pages x 65,536 B = 134,217,728 B = 128 MiB exactly
    with no_warnings():
        r = vllm.capacity(llama(), 128 * MiB, BF16, BF16, max_model_len=1024, options=VllmOptions(version="0.11"))
    # 128 MiB // 65,536 // 32 = 64 blocks = 1,024 tokens; 64 / 64 = 1.00x
    assert (r.num_gpu_blocks, r.usable_blocks, r.kv_cache_tokens, r.max_concurrency) == (64, 63, 1024, 1.0)
    # one block only (2 MiB, L = 16): 1 block, 0 usable (block 0 is vLLM's null block)
    with no_warnings():
        r = vllm.capacity(llama(), 2 * MiB, BF16, BF16, max_model_len=16, options=VllmOptions(version="0.11"))
    assert (r.num_gpu_blocks, r.usable_blocks, r.kv_cache_tokens) == (1, 0, 16)


def test_v1_all_sliding_model_is_one_sliding_group():
    # mistral-7b-v0.1: 32 sliding layers (window 4,096), one group; page = 16 x 4,096 = 65,536 B;
    # 1 GiB // 65,536 // 32 = 512 blocks = 8,192 tokens. A request of 32,768 needs
    # cdiv(min(4095 + 8192, 32768), 16) + 1 = 768 + 1 = 769 pages -> 512 / 769 = 0.67x
    # (as a full group it would need 2,048). need = 32 x 769 x 65,536 B = 1.50 GiB > 1 GiB: warns;
    # estimate: cdiv(n, 16) + 1 <= 512 -> n <= 8,176.
    with pytest.warns(KvcalcWarning, match=r"\(1\.50 GiB KV cache .* \(1\.00 GiB\).* length is 8176\. "):
        r = vllm.capacity(
            load_model("mistral-7b-v0.1"), GiB, BF16, BF16, max_model_len=32768, options=VllmOptions(version="0.11")
        )
    assert (r.num_gpu_blocks, r.kv_cache_tokens, r.page_size_bytes) == (512, 8192, 2 * MiB)
    assert r.max_concurrency == pytest.approx(512 / 769)


def test_v1_k_and_v_dtype_label():
    r = vllm.capacity(llama(), GiB, BF16, FP8, max_model_len=1024)
    assert r.kv_cache_dtype == "bf16/fp8_e4m3"


# ----- V0 ---------------------------------------------------------------------------------------


def test_v0_gemma_sliding_layers_full_length():
    # Gemma-2-9B (vLLM 0.6.6 cannot load Gemma-3): V0 block = 16 tokens x 42 layers x 8 heads x (256 x 2 B +
    # 256 x 1 B) = 16 x 42 x 6,144 = 4,128,768 B. 1 GiB // 4,128,768 = 260 GPU blocks (1,073,479,680 B);
    # 1 GiB of swap: 260 CPU blocks. 260 x 16 = 4,160 tokens < 8,000: V0 would refuse (warning).
    # concurrency 4,160 / 8,000 = 0.52 -> "0.52x"; 2 requests of n: 4,160 / n >= 2 -> n <= 2,080.
    refuse = (
        "vLLM V0 would refuse to start: The model's max seq len (8000) is larger than the maximum number "
        f"of tokens that can be stored in KV cache (4160). {TRY}"
    )
    with pytest.warns(KvcalcWarning) as w:
        r = vllm.capacity(
            load_model("gemma-2-9b"),
            GiB,
            BF16,
            FP8,
            max_model_len=8000,
            concurrency=2,
            options=VllmOptions(version="0.6", swap_space_bytes=GiB),
        )
    assert [str(x.message) for x in w] == [refuse]
    assert r.model_dump() == dict(
        EMPTY,
        engine="vllm",
        engine_version=V0,
        kv_memory_bytes=GiB,
        kv_cache_dtype="bf16/fp8_e4m3",
        block_size=16,
        page_size_bytes=4_128_768,
        num_gpu_blocks=260,
        usable_blocks=None,
        num_cpu_blocks=260,
        kv_cache_tokens=4160,
        engine_kv_bytes=1_073_479_680,
        max_model_len=8000,
        max_concurrency=0.52,
        concurrency=2,
        longest_context=2080,
        log_lines=[
            "the rest of the memory reserved for KV Cache is 1.00GiB.",
            "# GPU blocks: 260, # CPU blocks: 260",
            "Maximum concurrency for 8000 tokens per request: 0.52x",
        ],
        notes=["V0 allocates sliding-window layers for the full length", refuse],
    )


def test_v0_one_block_of_exactly_max_model_len_starts_quietly():
    # llama-3.1-8b V0 block = 16 x 131,072 B = 2 MiB; 2 MiB holds 1 block = 16 tokens = L: no warning,
    # no sliding note; vLLM 0.6's default 4 GiB of swap: 4 GiB // 2 MiB = 2,048 CPU blocks (none without swap).
    with no_warnings():
        r = vllm.capacity(llama(), 2 * MiB, BF16, BF16, max_model_len=16, options=VllmOptions(version="0.6"))
    assert (r.num_gpu_blocks, r.num_cpu_blocks, r.kv_cache_tokens, r.max_concurrency, r.notes) == (1, 2048, 16, 1.0, [])
    assert (
        vllm.capacity(
            llama(), 2 * MiB, BF16, BF16, max_model_len=16, options=VllmOptions(version="0.6", swap_space_bytes=0)
        ).num_cpu_blocks
        == 0
    )
    assert r.log_lines[0] == "the rest of the memory reserved for KV Cache is 0.00GiB."


# ----- refusals ---------------------------------------------------------------------------------


def test_max_num_batched_tokens_bounds():
    with pytest.raises(KvcalcError, match="--max-num-batched-tokens must be a positive integer, got 0"):
        vllm.capacity(llama(), GiB, BF16, BF16, options=VllmOptions(max_num_batched_tokens=0))
    r = vllm.capacity(
        llama(), GiB, BF16, BF16, max_model_len=1024, options=VllmOptions(max_num_batched_tokens=1)
    )  # 1 is allowed
    assert r.num_gpu_blocks == 512  # 1 GiB // 65,536 // 32 = 16,384 // 32


def test_block_size_bounds():
    with pytest.raises(KvcalcError, match="--block-size must be a positive integer, got 0"):
        vllm.capacity(llama(), GiB, BF16, BF16, options=VllmOptions(block_size=0))
    # 1 is in BLOCK_SIZES; 0.11 takes it, 0.33 finds no CUDA backend for it (tests/engines/test_vllm_backends.py)
    r = vllm.capacity(llama(), GiB, BF16, BF16, max_model_len=1024, options=VllmOptions(block_size=1, version="0.11"))
    assert r.num_gpu_blocks == GiB // 4096 // 32


def test_no_max_position_embeddings_asks_for_max_model_len():
    m = ModelSpec(name="t", n_layers=2, n_heads=4, n_kv_heads=2, head_dim=16, dtype="fp16")
    with pytest.raises(KvcalcError, match="t has no max_position_embeddings; give --max-model-len"):
        vllm.capacity(m, GiB, kv_format("fp16"), kv_format("fp16"))


def test_block_format_and_recurrent_layers_refused():
    with pytest.raises(
        KvcalcError,
        match="^vLLM 0.33 has no 'q8_0' KV cache dtype; vLLM 0.33's --kv-cache-dtype "
        "takes auto, float16, .*, nvfp4, nvfp4_4over6 ",
    ):
        vllm.capacity(llama(), GiB, Q8, Q8)
    with pytest.raises(
        KvcalcError,
        match="^vLLM 0.11 has no 'q8_0' KV cache dtype; use auto, bfloat16, float16, fp8, "
        "fp8_e5m2, int8_per_token_head or fp8_per_token_head$",
    ):
        vllm.capacity(llama(), GiB, Q8, Q8, options=VllmOptions(version="0.11"))
    # Jamba in V0 (0.6.6's registry has it): the Mamba state lives outside the blocks (modelled for V1 only)
    with pytest.raises(KvcalcError, match="jamba-1.5-mini: vLLM 0.6 \\(V0\\) keeps Mamba state outside"):
        vllm.capacity(load_model("jamba-1.5-mini"), GiB, BF16, BF16, options=VllmOptions(version="0.6"))
    hybrid = load_model("qwen3-next-80b-a3b")
    with pytest.raises(KvcalcError, match="failed to convert the KV cache specs to one unified type.\\)$"):
        vllm.rules().kv_cache_groups(hybrid, hybrid_allocator=False)


# ----- groups, pages, memory_for ----------------------------------------------------------------


def _mix(n_sliding: int, n_full: int) -> ModelSpec:
    return ModelSpec(
        name="mix",
        n_layers=n_sliding + n_full,
        n_heads=4,
        n_kv_heads=2,
        head_dim=16,
        dtype="fp16",
        sliding_window=128,
        layer_types=["sliding"] * n_sliding + ["full"] * n_full,
        max_position_embeddings=4096,
    )


def test_hybrid_layers_per_group_threshold():
    S, F = vllm.Group, vllm.Group
    # 15 sliding, 10 full: 15 < 1.5 x 10 is false -> groups of 10; sliding split in 2 (8 + 7 layers)
    assert vllm.rules().kv_cache_groups(_mix(15, 10)) == (
        [S("sliding", 128, 8), S("sliding", 128, 7), F("full", None, 10)],
        10,
    )
    # 12 sliding, 10 full: 12 < 15 -> groups of the larger count, 12
    assert vllm.rules().kv_cache_groups(_mix(12, 10)) == ([S("sliding", 128, 12), F("full", None, 10)], 12)
    # 20 sliding, 10 full: groups of 10
    assert vllm.rules().kv_cache_groups(_mix(20, 10)) == (
        [S("sliding", 128, 10), S("sliding", 128, 10), F("full", None, 10)],
        10,
    )
    # without the hybrid allocator the sliding layers become full ones: one group
    assert vllm.rules().kv_cache_groups(_mix(15, 10), hybrid_allocator=False) == ([F("full", None, 25)], 25)
    # an all-sliding model is one sliding group with its window
    assert vllm.rules().kv_cache_groups(load_model("mistral-7b-v0.1")) == ([S("sliding", 4096, 32)], 32)


def test_sliding_pages_window_straddles_a_block():
    # window 1,024, 2,050 batched tokens: cdiv(1023 + 2050, 16) + 1 = cdiv(3073, 16) + 1 = 193 + 1 = 194
    g = vllm.Group("sliding", 1024, 52)
    assert vllm.pages_per_request(g, 32768, 16, 2050) == 194
    # L below the window: cdiv(100, 16) + 1 = 8
    assert vllm.pages_per_request(g, 100, 16, 2050) == 8
    assert vllm.pages_per_request(vllm.Group("full", None, 10), 100, 16, 2050) == 7


def test_page_size_bytes_defaults_and_per_token_head_scales():
    full = llama().layers[0]
    # 16 x 4,096 B = 65,536 B (tp 1, no scales by default)
    assert vllm.page_size_bytes(full, BF16, BF16, 16) == 65_536
    # int8 per-token-head at tp 2: 16 x 4 x 256 x 1 B = 16,384 + 2 x 16 x 4 heads x 4 B = 512 -> 16,896
    assert vllm.page_size_bytes(full, INT8, INT8, 16, 2, per_token_head_scales=True) == 16_896
    # MLA has no per-head scales: 16 x (512 + 64) x 1 B = 9,216 B either way
    mla = load_model(CFG / "deepseek-v2-lite.yaml").layers[0]
    assert vllm.page_size_bytes(mla, INT8, INT8, 16, per_token_head_scales=True) == 9_216


def test_memory_for_v1_v0_and_defaults():
    # llama, 1,000 tokens x 3, block 16: 3 x 63 blocks x 65,536 B x 32 layers = 396,361,728 B
    assert vllm.memory_for(llama(), 1000, 3, BF16, BF16, options=VllmOptions(version="0.11")) == 396_361_728
    # V0: 3 x cdiv(1000, 16) x 65,536 x 32 = the same 396,361,728 B for a uniform model
    assert vllm.memory_for(llama(), 1000, 3, BF16, BF16, options=VllmOptions(version="0.6")) == 396_361_728
    # gemma-2-9b (0.6.6 has no Gemma-3), 4,096 tokens, V0: 256 blocks x 16 x 8,192 B x 42 layers =
    # 1,409,286,144 B (sliding layers full)
    assert (
        vllm.memory_for(load_model("gemma-2-9b"), 4096, 1, BF16, BF16, options=VllmOptions(version="0.6"))
        == 1_409_286_144
    )
    # gemma V1 hybrid (default): a sliding group needs cdiv(min(1023 + 8192, 4096), 16) + 1 = 257 pages, the
    # full one cdiv(4096, 16) = 256: (6 x 257 + 256) x 131,072 B x 10 layers per group
    assert (
        vllm.memory_for(gemma(), 4096, 1, BF16, BF16, options=VllmOptions(version="0.11"))
        == (6 * 257 + 256) * 1_310_720
    )
    # 2,048 batched tokens: sliding min(3071, 4096) -> 192 + 1 = 193 pages
    assert (
        vllm.memory_for(gemma(), 4096, 1, BF16, BF16, options=VllmOptions(max_num_batched_tokens=2048, version="0.11"))
        == (6 * 193 + 256) * 1_310_720
    )
    # no hybrid allocator: one group of 62 full layers: 256 x 131,072 x 62 = 2,080,374,784 B
    assert (
        vllm.memory_for(gemma(), 4096, 1, BF16, BF16, options=VllmOptions(hybrid_allocator=False, version="0.11"))
        == 2_080_374_784
    )
    # tp 2 halves the page; per-token-head int8 scales add 512 B per 16,384 B page (see above)
    assert vllm.memory_for(llama(), 16, 1, BF16, BF16, tp=2, options=VllmOptions(version="0.11")) == 32_768 * 32
    assert (
        vllm.memory_for(
            llama(), 16, 1, INT8, INT8, tp=2, options=VllmOptions(per_token_head_scales=True, version="0.11")
        )
        == 16_896 * 32
    )


def test_default_kv_dtype_fp32_checkpoint():
    fp32 = ModelSpec(name="t", n_layers=2, n_heads=4, n_kv_heads=2, head_dim=16, dtype="fp32")
    assert vllm.default_kv_dtype(fp32) == ("bf16", "auto (bf16: fp32 checkpoint served in bf16)")
    assert vllm.rules("0.6").default_kv_dtype(fp32) == ("fp16", "auto (fp16: fp32 checkpoint served in fp16)")
    assert vllm.default_kv_dtype(llama()) == ("bf16", "auto (bf16)")
