"""`kvcalc plan` searches vLLM's decode context parallel (`-dcp`) for MLA models whose context
no other layout of a count holds (`calc.plan.dcp_sizes`, `_Space._layouts`).

DeepSeek-V3 (configs/models/deepseek-v3.yaml): 61 MLA layers, one latent of 512 + 64 = 576
values a token, fp8 (1 B). Under TP the latent is copied on every rank; under dcp = tp each rank
holds cdiv(T, dcp) positions of every sequence (vLLM 0.33.0 `v1/kv_cache_interface.py`
`FullAttentionSpec.max_memory_usage_bytes`).
"""

from __future__ import annotations

import pytest

import kvcalc
from kvcalc.calc.plan import dcp_sizes
from kvcalc.load.models import load_model


def test_deepseek_v3_h200_64x160k_is_tp8_dcp8():
    """64 x 163,840 tokens on 8 H200 (budget 0.9 x 141 GB = 126.4 GiB): no layout of 8 without DCP
    holds it (TP8 copies 64 x 163,840 x 61 x 576 = 368 GB of latent on each rank; DP8 + EP8
    holds 8 x 163,840 x 61 x 576 = 46.1 GB on each beside 100.8 GB of weights), TP8 + DCP8 does:
    64 x cdiv(163,840, 8) x 61 x 576 = 64 x 20,480 x 61 x 576 = 46,053,457,920 B of KV beside
    the TP8 weights. vLLM's flag: `--decode-context-parallel-size 8` (vllm/engine/arg_utils.py)."""
    r = kvcalc.plan("deepseek-v3", seq_len="160k", concurrency=64, gpus="h200", top=1)
    top = r.layouts[0]
    assert (top.count, top.tp, top.pp, top.dp, top.dp_attention, top.ep, top.dcp) == (8, 8, 1, 1, 1, 1, 8)
    assert top.kv_dtype == "fp8_e4m3"
    assert top.kv_cache_bytes_per_gpu == 64 * 20_480 * 61 * 576 == 46_053_457_920
    assert top.why == "KV/8 by pos"
    assert top.launch == (
        "vllm serve deepseek-ai/DeepSeek-V3 --tensor-parallel-size 8 --pipeline-parallel-size 1 "
        "--decode-context-parallel-size 8 --max-model-len 163840 --kv-cache-dtype fp8 "
        "--gpu-memory-utilization 0.9 --max-num-seqs 64 --block-size 64"
    )


def test_no_dcp_where_attention_dp_holds_it():
    """64 x 32,768 on H200: DP8 + EP8 holds it (the pinned first answer,
    tests/calc/test_parallel.py), so no DCP layout is searched at all."""
    r = kvcalc.plan("deepseek-v3", seq_len="32k", concurrency=64, gpus="h200", top=20)
    assert all(lay.dcp == 1 for lay in r.layouts)


def test_sglang_plans_no_dcp():
    """DCP is vLLM's: SGLang's plan of the same long workload has none."""
    r = kvcalc.plan("deepseek-v3", seq_len="160k", concurrency=64, gpus="h200", engine="sglang", top=5)
    assert all(lay.dcp == 1 for lay in r.layouts)


@pytest.mark.parametrize(
    "name,tp,dpa,sizes",
    [
        ("deepseek-v3", 8, 1, [8]),  # MLA: the latent split over all 8 TP ranks
        ("deepseek-v3", 1, 1, []),  # no TP ranks to split over
        ("deepseek-v3", 1, 8, []),  # attention DP already gives each rank its own sequences
        ("llama-3.1-70b", 8, 1, []),  # GQA: vLLM needs tp > 8 KV heads (vllm/config/model.py)
        ("deepseek-v4-flash", 8, 1, []),  # sliding window + compressed caches: not sharded
    ],
)
def test_dcp_sizes(name, tp, dpa, sizes):
    assert dcp_sizes(load_model(name), tp, dpa) == sizes
