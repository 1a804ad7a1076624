"""vLLM 0.6 (V0) caches DeepSeek's MLA models per head, each head padded to 256: found by the vLLM
0.6.6.post1 oracle (tests/oracle/vllm06_harness.py; docs/engine-oracles.md), where every DeepSeek
case differed while kvcalc sized the latent. Source: vllm/config.py `ModelConfig.get_head_size`
(0.6.6: `if model_type in ('deepseek_v2', 'deepseek_v3'): return 256`, "FlashAttention supports
only head_size 32, 64, 128, 256, we need to pad head_size 192 to 256"), `get_num_kv_heads`
(max(1, num_key_value_heads // tp); DeepSeek's config.json: num_key_value_heads =
num_attention_heads) and vllm/worker/cache_engine.py `CacheEngine.get_cache_block_size`."""

from __future__ import annotations

from kvcalc.engines import vllm
from kvcalc.engines.vllm import VllmOptions
from kvcalc.formats import kv_format
from kvcalc.load.models import load_model

BF16, FP8 = kv_format("bf16"), kv_format("fp8")
GIB = 2**30


def test_deepseek_v3_block_in_v0():
    # 16 tokens x 128 heads x 256 x 2 (K, V) x 2 B = 2,097,152 B per layer; x 61 layers = 127,926,272 B.
    # 40 GiB: 42,949,672,960 // 127,926,272 = 335 GPU blocks; 4 GiB swap: 4,294,967,296 // 127,926,272 = 33;
    # 335 x 16 = 5,360 tokens < 131,072: vLLM refuses to start (raise_if_cache_size_invalid), kvcalc warns.
    r = vllm.capacity(
        load_model("deepseek-v3"),
        40 * GIB,
        BF16,
        BF16,
        max_model_len=131072,
        options=VllmOptions(version="0.6", swap_space_bytes=4 * GIB),
    )
    assert (r.page_size_bytes, r.num_gpu_blocks, r.num_cpu_blocks, r.kv_cache_tokens) == (127_926_272, 335, 33, 5360)
    assert r.log_lines[1:] == [
        "# GPU blocks: 335, # CPU blocks: 33",
        "Maximum concurrency for 131072 tokens per request: 0.04x",
    ]
    assert any("(5360)" in n for n in r.notes)


def test_deepseek_v2_lite_block_in_v0_per_rank_and_fp8():
    # tp 4: 16 // 4 = 4 heads per rank; fp8 1 B: 16 x 4 x 256 x 2 x 1 B x 27 layers = 884,736 B per block.
    # 0.5 GiB: 536,870,912 // 884,736 = 606 blocks (the oracle's figure), 606 x 16 / 4,096 = 2.37x.
    r = vllm.capacity(
        load_model("deepseek-v2-lite"), GIB // 2, FP8, FP8, max_model_len=4096, tp=4, options=VllmOptions(version="0.6")
    )
    assert (r.page_size_bytes, r.num_gpu_blocks) == (884_736, 606)
    assert r.log_lines[-1] == "Maximum concurrency for 4096 tokens per request: 2.37x"
    # V1 (0.11) keeps the latent: 64 tokens (FlashMLA) x 576 x 1 B = 36,864 B per layer
    assert vllm.capacity(
        load_model("deepseek-v2-lite"),
        GIB // 2,
        FP8,
        FP8,
        max_model_len=4096,
        tp=4,
        options=VllmOptions(version="0.11"),
    ).num_gpu_blocks == GIB // 2 // (36_864 * 27)
