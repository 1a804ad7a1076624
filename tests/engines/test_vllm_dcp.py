"""vLLM 0.33's decode context parallel in kvcalc's vLLM profile (`kvcalc/engines/vllm/dcp.py`):
figures by hand from vLLM 0.33's rules, the same the grid oracle holds against vLLM itself
(`tests/oracle/vllm_grid.py`, docs/engine-oracles.md)."""

from __future__ import annotations

import warnings

import pytest

from kvcalc import capacity
from kvcalc.engines.vllm import VllmOptions
from kvcalc.errors import KvcalcError

GiB = 2**30


def _cap(model: str, tp: int, dcp: int, kv: str | None = None, cc: str = "9.0", **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return capacity(
            model,
            engine="vllm",
            kv_memory_bytes=16 * GiB,
            max_model_len=32_768,
            kv_dtype=kv,
            tp=tp,
            options=VllmOptions(compute_capability=cc, dcp=dcp, **kw),
        )


@pytest.mark.parametrize(
    "model, tp, dcp, kw, blocks, tokens",
    [
        # DeepSeek-V3 (configs/models/deepseek-v3.yaml), FlashMLA block 64: 64 x 576 x 2 B = 73,728 B
        # x 61 layers = 4,497,408 B a block; 16 GiB // that = 3,819 blocks. A request: cdiv(cdiv(32,768,
        # dcp), 64) blocks (FullAttentionSpec.max_memory_usage_bytes): dcp 1 512 -> 244,416 tokens
        # (int(3,819 / 512 x 32,768)); dcp 8 64 -> 1,955,328
        ("deepseek-v3", 8, 1, {"block_size": 64, "attention_backend": "FLASHMLA"}, 3_819, 244_416),
        ("deepseek-v3", 8, 8, {"block_size": 64, "attention_backend": "FLASHMLA"}, 3_819, 1_955_328),
        # Llama-3.1-8B tp 16: 1 KV head a rank, 16 x 1 x 256 x 2 = 8,192 B x 32 layers = 262,144 B a
        # block: 65,536 blocks; dcp 2: cdiv(16,384, 16) = 1,024 a request -> 64x, 2,097,152 tokens
        ("llama-3.1-8b", 16, 2, {}, 65_536, 2_097_152),
        # DeepSeek-V3.2 (sparse MLA, block 64): 61 x (73,728 + 8,448) = 5,012,736 B a block: 3,427;
        # dcp 8: 64 blocks a request (the indexer keys are sharded too) -> 1,754,624
        ("deepseek-v3.2", 8, 8, {}, 3_427, 1_754_624),
    ],
)
def test_dcp_divides_a_requests_blocks(model, tp, dcp, kw, blocks, tokens):
    r = _cap(model, tp, dcp, **kw)
    assert (r.num_gpu_blocks, r.kv_cache_tokens) == (blocks, tokens)


def test_dcp_note_states_the_per_request_limit():
    r = _cap("deepseek-v3", 8, 8, block_size=64, attention_backend="FLASHMLA")
    assert (
        "decode context parallel 8 (-dcp): a request of 32,768 tokens holds 4,096 on each rank, "
        "64 blocks of 64 (512 tokens a block across the 8 ranks)"
    ) in r.notes


@pytest.mark.parametrize(
    "model, tp, dcp, kv, text",
    [
        # vllm/config/parallel.py ParallelConfig
        ("deepseek-v3", 8, 3, None, "tp_size=8 must be divisible by dcp_size=3."),
        # vllm/config/model.py verify_with_parallel_config: GQA needs tp > KV heads (8), dcp <= tp // 8
        ("llama-3.1-8b", 8, 2, None, "requires `--tensor-parallel-size` (8) to be greater than the model's"),
        ("llama-3.1-8b", 16, 4, None, "exceeds the maximum supported value (2) for `--tensor-parallel-size` (16)"),
        # SlidingWindowManager asserts under DCP
        ("gemma-3-1b", 4, 2, None, 'DCP not support sliding window attn now."'),
        # backends without supports_dcp: TRITON_ATTN (per-token-head scales), TURBOQUANT
        ("llama-3.1-8b", 16, 2, "int4_per_token_head", "does not support DCP"),
        ("llama-3.1-8b", 16, 2, "turboquant_k8v4", "does not support DCP"),
        # Hopper's sparse MLA: FLASH_ATTN_MLA_SPARSE / FLASHINFER_MLA_SPARSE_SM90 lack DCP
        ("deepseek-v3.2", 8, 8, "fp8_e4m3", "FLASHINFER_MLA_SPARSE_SM90 do not support DCP"),
    ],
)
def test_dcp_refusals_name_vllms_reason(model, tp, dcp, kv, text):
    with pytest.raises(KvcalcError) as e:
        _cap(model, tp, dcp, kv)
    assert text in str(e.value) and "vLLM 0.33" in str(e.value)


def test_dcp_only_for_033():
    with pytest.raises(KvcalcError, match="for vLLM 0.33 only"):
        capacity(
            "deepseek-v3",
            engine="vllm",
            kv_memory_bytes=16 * GiB,
            max_model_len=32_768,
            tp=8,
            options=VllmOptions(version="0.11", dcp=2),
        )
