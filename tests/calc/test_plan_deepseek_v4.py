"""`kvcalc plan deepseek-v4-flash` (vLLM 0.33): the first answer on H200 and on B200 is attention
data-parallel + expert parallel inside one node, as the DeepSeek-V4 recipes launch it.

- Dynamo's DeepSeek-V4-Flash recipes (ai-dynamo/dynamo `recipes/deepseek-v4/deepseek-v4-flash`):
  "vllm-agg-b200 | vLLM | 4x B200 | DP=4 + Expert Parallel, TP=1".
- SGLang's cookbook (docs.sglang.io/cookbook/autoregressive/DeepSeek/DeepSeek-V4): Flash is
  "single-node serving".

The KV memory is vLLM 0.33's own arithmetic for DeepSeek-V4's per-layer specs (`v0_33_specs`,
`planning`): one pool of 1,002,240-B blocks (`_get_kv_cache_bytes_per_block`), and a request of
32,768 tokens takes 259 + 259 + 128 + 4,099 + 2,065 = 6,810 of them over the five groups
(`get_max_concurrency_for_kv_cache_config`), whatever the GPU or TP. The DeepSeek-V4 pin sits
beside DeepSeek-V3's (tests/calc/test_parallel.py `test_plan_first_layout_deepseek_v3_h200_64x32k`).
"""

from __future__ import annotations

import pytest

import kvcalc
from kvcalc.calc.weights import weight_bytes
from kvcalc.errors import KvcalcError
from kvcalc.load.models import load_model

BLOCK_BYTES = 1_002_240
PER_REQUEST_BLOCKS = 259 + 259 + 128 + 4_099 + 2_065  # = 6,810


def _weights_counted() -> bool:
    try:
        weight_bytes(load_model("deepseek-v4-flash"), None, 1)
    except KvcalcError:  # main before h-m26: "not counted by kvcalc"
        return False
    return True


@pytest.mark.skipif(
    not _weights_counted(),
    reason="DeepSeek-V4's weights are not counted on this branch (calc/weights.py, branch h-m26)",
)
@pytest.mark.parametrize(
    "gpu,layout,launch",
    [
        # 8 H200: 8 attention-DP ranks, EP 8; 64 / 8 = 8 sequences a rank
        (
            "h200",
            (8, 1, 1, 1, 8, 8),
            "vllm serve deepseek-ai/DeepSeek-V4-Flash --tensor-parallel-size 1 --pipeline-parallel-size 1 "
            "--data-parallel-size 8 --enable-expert-parallel --max-model-len 32768 --kv-cache-dtype fp8 "
            "--gpu-memory-utilization 0.9 --max-num-seqs 8",
        ),
        # 4 B200: the Dynamo recipe's DP=4 + EP, TP=1
        (
            "b200",
            (4, 1, 1, 1, 4, 4),
            "vllm serve deepseek-ai/DeepSeek-V4-Flash --tensor-parallel-size 1 --pipeline-parallel-size 1 "
            "--data-parallel-size 4 --enable-expert-parallel --max-model-len 32768 --kv-cache-dtype fp8 "
            "--gpu-memory-utilization 0.9 --max-num-seqs 16",
        ),
    ],
)
def test_first_layout_is_dp_attention_plus_ep(gpu, layout, launch):
    r = kvcalc.plan("deepseek-v4-flash", seq_len="32k", concurrency=64, gpus=gpu, top=1)
    top = r.layouts[0]
    assert (top.count, top.tp, top.pp, top.dp, top.dp_attention, top.ep) == layout
    assert top.nodes == 1 and top.why == f"own KV, EP{layout[5]}"
    # 64 / dp_attention sequences on the fullest attention-DP rank, each 6,810 blocks of 1,002,240 B
    per_rank = 64 // layout[4]
    assert top.kv_cache_bytes_per_gpu == per_rank * PER_REQUEST_BLOCKS * BLOCK_BYTES
    assert top.launch == launch


def test_deepseek_v32_plan_kv_is_vllms_spec_pool():
    """DeepSeek-V3.2 (configs/models/deepseek-v3.2.yaml) on 8 H200, 64 x 32k: attention DP + EP 8,
    and each rank's KV is vLLM 0.33's per-layer spec pool (as `capacity --engine vllm` sizes it),
    not one page per layer: FLASHMLA_SPARSE's fp8_ds_mla latent, 656 B a token, beside the
    indexer's 128 fp8 + 4 B scale = 132 B, 64-token blocks of 61 layers each: 61 x 64 x (656 +
    132) = 3,076,352 B a block; 64 / dp_attention sequences x cdiv(32,768, 64) = 512 blocks each
    (the latent is whole on each of the attention TP ranks)."""
    r = kvcalc.plan("deepseek-v3.2", seq_len="32k", concurrency=64, gpus="h200", top=1)
    top = r.layouts[0]
    assert (top.count, top.ep, top.kv_dtype) == (8, 8, "fp8_e4m3") and top.dp_attention > 1
    per_rank = 64 // top.dp_attention
    assert top.kv_cache_bytes_per_gpu == per_rank * 512 * 61 * 64 * (656 + 132) == per_rank * 512 * 3_076_352
