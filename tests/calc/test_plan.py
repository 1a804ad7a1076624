"""`kvcalc.calc.plan`: the search space, the answer for real workloads, the ranking, the why-not
lines, and the reuse of `GpuFit` it rests on. Every expectation is derived by hand below from
the bundled configs (configs/models/*.yaml) and the GPU table (kvcalc/data/gpus.yaml).

Shared figures (vLLM's plan, `memory_plan`):
- budget = floor(0.9 x memory): h100-sxm 0.9 x 85,520,809,984 = 76,968,728,985 B (71.68 GiB);
  b200 0.9 x 192,265,846,784 = 173,039,262,105 B (161.16 GiB).
- CUDA context 500 MiB = 524,288,000 B; activation reserve = 8192 x (2 hidden + 2 x
  intermediate / tp) x 2 + 256 x vocab / tp x 4.
"""

from __future__ import annotations

import dataclasses

import pytest

import kvcalc
from kvcalc.calc import plan as P
from kvcalc.calc.memory_plan import GpuFit, Layout
from kvcalc.errors import KvcalcError
from kvcalc.load.gpus import get_gpu
from kvcalc.load.models import load_model

#: the GPUs a test about one answer searches: pinned, so that a new row in kvcalc/data/gpus.yaml never
#: changes its answer (the six of docs/example-prices.yaml; all have fp8 but the a100-80gb-sxm)
GPUS = "h100-sxm,h200,b200,mi300x,a100-80gb-sxm,l40s"

# ----- the space -------------------------------------------------------------------------------


def test_counts_are_one_node_then_whole_nodes():
    # 1..8 in a node, then 16, 24, 32 (two, three, four nodes of 8)
    assert P.counts(32) == [1, 2, 3, 4, 5, 6, 7, 8, 16, 24, 32]
    assert P.counts(2) == [1, 2]
    assert P.counts(32, layer_split=True) == [1, 2, 3, 4, 5, 6, 7, 8]  # llama.cpp: one machine
    assert P.counts(64, min_count=33) == [40, 48, 56, 64]


def test_parallel_layouts_llama_70b():
    # 64 query heads, 8 KV heads: tp in {1, 2, 4, 8} (3, 5, 6, 7 divide neither); 6 GPUs are
    # tp 1 x (pp, dp) in {(1,6), (2,3), (3,2), (6,1)} or tp 2 x {(1,3), (3,1)}
    m = load_model("llama-3.1-70b")
    assert sorted(P.parallel_layouts(m, 6)) == [(1, 1, 6), (1, 2, 3), (1, 3, 2), (1, 6, 1), (2, 1, 3), (2, 3, 1)]
    # 16 GPUs span two nodes: tp 8 with 2 pipeline stages is there, tp 16 is not (TP inside a node)
    sixteen = P.parallel_layouts(m, 16)
    assert (8, 2, 1) in sixteen and (8, 1, 2) in sixteen
    assert all(tp <= 8 for tp, _, _ in sixteen)


def test_layer_split_in_proportion_to_free_memory():
    # 64 layers over 41,788,715,827 and 21,494,995,353 free bytes (see the llama.cpp test):
    # 64 x 0.6603 = 42.26 -> 42, 64 x 0.3397 = 21.74 -> 21, the last layer to the larger
    # remainder (0.74): [42, 22]
    m = load_model("qwen3-32b")
    assert P.layer_split(m, [41_788_715_827, 21_494_995_353]) == (42, 22)
    assert P.layer_split(m, [1, 1, 1]) == (22, 21, 21)  # equal devices: 64 = 22 + 21 + 21
    with pytest.raises(KvcalcError):
        P.layer_split(m, [1] * 65)


def test_tensor_split_reproduces_the_layer_counts_in_llamacpp():
    # llama.cpp puts layer il on device upper_bound(cumsum(ts)/sum(ts), il / (n_layer + 1)):
    # -ts 42,23 over 64 layers + the output layer -> 42 layers on device 0, 22 on device 1
    from kvcalc.engines.llamacpp import device_of_layers

    ts = P.tensor_split((42, 22))
    assert ts == [42, 23]
    dev = device_of_layers(64, 99, [float(x) for x in ts], 2)
    assert [list(dev).count(0), list(dev).count(1)] == [42, 22]


def test_variant_equals_a_fresh_planner():
    # the search re-targets one planner per (tp, pp, formats) to every GPU and dp: it must give
    # exactly what a planner built for that GPU and dp gives
    m = load_model("llama-3.1-70b")
    h100, b200 = get_gpu("h100-sxm"), get_gpu("b200")
    lay = Layout(tp=2, k_dtype="fp8_e4m3", weight_dtype="fp8_e4m3")
    base = GpuFit(m, h100, lay)
    fresh = GpuFit(m, b200, dataclasses.replace(lay, dp=3))
    v = base.variant(gpu=b200, dp=3)
    assert v.budget == fresh.budget == 173_039_262_105
    assert v.split_decode(32768, 64) == fresh.split_decode(32768, 64)
    assert v.prefill(32768) == fresh.prefill(32768)
    assert v.max_batch(32768) == fresh.max_batch(32768)
    assert base.budget == 76_968_728_985  # the original is untouched


# ----- the answer ------------------------------------------------------------------------------


def test_llama_70b_32k_x64_at_50ms():
    """Llama-3.1-70B, 64 users at 32,768 tokens, TPOT <= 50 ms, up to 32 of the GPUs in `GPUS`.

    The answer: 4 x b200, tp 4, fp8 KV and fp8 weights. By hand, per GPU (tp 4):
    - weights: a layer's matrices on one rank: q 8192 x 8192 / 4 + k, v 8192 x 1024 / 4 each +
      o 8192 x 8192 / 4 + MLP 3 x 8192 x 28672 / 4 = 213,909,504 values, 1 B each in fp8, + 2
      norms x 8192 x 2 B = 32,768 B -> 213,942,272 B x 80 = 17,115,381,760 B; embedding and LM
      head 128,256 x 8,192 / 4 x 2 B = 525,336,576 B each (bf16) + final norm 16,384 B
      -> 18,166,071,296 B.
    - KV: 64 x 32,768 tokens x 80 layers x 2 (K, V) x 8 / 4 heads x 128 x 1 B = 85,899,345,920 B.
    - reserves: 8192 x (16,384 + 57,344 / 4) x 2 + 256 x 128,256 / 4 x 4 = 536,150,016 B
      activations + 524,288,000 B CUDA context.
    - used 105,125,855,232 B (97.9 GiB) <= budget 173,039,262,105 B (161.2 GiB).
    - TPOT, the speed model of `kvcalc estimate --engine vllm` (kvcalc/data/speed.yaml: vLLM's
      CUDA floor 0.44 ms, bandwidth efficiency 0.735, 8-bit weights x 0.82, NVLink all-reduce
      4.2 + 6.6 x log2(4) = 17.4 us a call): the GEMMs read the weights less all of the
      embedding but its 64 rows (18,166,071,296 - 525,336,576 + 64 x 16,384 = 17,641,783,296 B) /
      (8e12 x 0.735 x 0.82) = 3.65891 ms (their 64 tokens' FLOPs take less); the attention reads
      the KV 85,899,345,920 B / (8e12 x 0.735) = 14.60873 ms (its FLOPs take less); all-reduce
      bytes 2 x 80 x 64 x 8192 x 2 B = 167,772,160 B x 2 x 3/4 / 0.9e12 B/s = 0.27962 ms + 2 x 80
      calls x 17.4 us = 2.784 ms; the floor 0.44 ms: 21.77126 ms; 64 / 21.77126 ms = 2,940
      tokens/s.
    Why not 3 GPUs: tp must divide 8 KV heads, so 3 is tp 1 x (pp 3 or dp 3). dp 3: 22 sequences
    x 32,768 x 163,840 B = 118.1 GB + 70.6 GB of weights on one GPU > 185.5 GB (the largest
    budget, mi300x). pp 3: the token passes all 3 stages: (70.6 + 343.6) GB read per step /
    (8 TB/s x 0.735) = 70.4 ms > 50 ms even on a b200. So 4 GPUs; of the 4-GPU layouts the b200
    (8 TB/s) decodes fastest, then mi300x (5.3 TB/s), then h200 (4.8 TB/s).
    Searched: 84 (tp, pp, dp) layouts over counts 1..8, 16, 24, 32 (see
    test_default_search_size_and_speed) x (2 KV x 2 weight formats on the five GPUs with fp8,
    bf16/bf16 alone on the a100-80gb-sxm) = 84 x (5 x 4 + 1) = 1,764 points.
    """
    r = kvcalc.plan("llama-3.1-70b", seq_len="32k", concurrency=64, max_tpot_ms=50, gpus=GPUS)
    assert r.gpus_searched == GPUS.split(",") and r.points_searched == 1764
    top = r.layouts[0]
    assert (top.count, top.gpu, top.tp, top.pp, top.dp) == (4, "b200", 4, 1, 1)
    assert (top.kv_dtype, top.weight_dtype) == ("fp8_e4m3", "fp8_e4m3")
    assert top.weights_bytes_per_gpu == 18_166_071_296
    assert top.kv_cache_bytes_per_gpu == 85_899_345_920
    assert top.memory_bytes_per_gpu == 105_125_855_232
    assert top.budget_bytes_per_gpu == 173_039_262_105
    # the docstring's sum: GEMMs 3.65891 + attention 14.60873 ms, all-reduce 0.27962 + 2.784 ms,
    # floor 0.44 ms
    assert top.tpot_ms == pytest.approx(3.65891 + 14.60873 + 0.27962 + 2.784 + 0.44, abs=1e-4)
    assert top.tokens_per_s == pytest.approx(64 / 0.02177126, rel=1e-5)
    assert top.speed_model.startswith("vllm on cuda: floor 0.44 ms/step")
    # max sequences: (173,039,262,105 - 18,166,071,296 - 1,060,438,016) // (32,768 x 40,960) = 114
    assert top.max_concurrency == 114
    assert top.launch == (
        "vllm serve meta-llama/Llama-3.1-70B --tensor-parallel-size 4 --pipeline-parallel-size 1 "
        "--max-model-len 32768 --kv-cache-dtype fp8 --gpu-memory-utilization 0.9 "
        "--max-num-seqs 64 --quantization fp8"
    )
    assert [(x.count, x.gpu) for x in r.layouts[:3]] == [(4, "b200"), (4, "mi300x"), (4, "h200")]
    assert min(x.count for x in r.layouts) == 4
    assert r.misses == []


def test_nothing_within_max_gpus_says_why_and_what_fixes_it():
    """The same workload on at most 2 x h100-sxm or l40s: nothing fits.

    2 x h100-sxm, tp 2, fp8/fp8 (the nearest of its GPU: smallest used / budget): weights
    36,329,504,768 B (as the README's worked example), KV 64 x 32,768 x 80 x 2 x 4 x 128 x 1 B =
    171,798,691,840 B, reserves 803,864,576 + 524,288,000 B -> 209,456,349,184 B = 195.07 GiB
    against 71.68 GiB. Fixes, each checked:
    - more GPUs: 8 x h100-sxm tp 8 (4 at tp 4 needs 105 GB > 77 GB; 6 at tp 2 x pp 3 fits but
      reads 208 GB a step: 78 ms > 50 ms);
    - context, in vLLM's blocks (the default engine sizes by its own arithmetic,
      `engines.vllm.plan`): free (76,968,728,985 - 36,329,504,768 - 1,328,152,576) =
      39,311,071,641 B // (16 tokens x 81,920 B per token) = 29,991 blocks; 64 requests take at
      most 29,991 // 64 = 468 blocks each = 7,488 tokens (the exact formula's 7,497.99 -> 7,497
      would need a 469th block);
    - concurrency: the same free bytes / (32,768 x 81,920 B) = 14.6 -> 14 sequences.
    """
    r = kvcalc.plan("llama-3.1-70b", seq_len="32k", concurrency=64, max_tpot_ms=50, max_gpus=2, gpus="h100-sxm,l40s")
    assert r.layouts == [] and r.n_qualifying == 0
    h100 = r.misses[0]
    assert h100.line == (
        "2 x h100-sxm (tp 2, pp 1, dp 1; KV fp8_e4m3, weights fp8_e4m3): needs 195.1 GiB per "
        "GPU, budget 71.7 GiB; fix: more GPUs: 8 x h100-sxm (tp 8, pp 1, dp 1), or a context of "
        "at most 7,488 tokens, or at most 14 concurrent sequences"
    )
    assert h100.score == pytest.approx(209_456_349_184 / 76_968_728_985)
    # l40s (40.5 GiB budget) is further off, so it comes second
    assert r.misses[1].gpu == "l40s" and r.misses[1].problems == ["needs 195.1 GiB per GPU, budget 40.5 GiB"]


def test_a_target_miss_reports_the_figure_and_the_limit():
    # llama-3.1-8b bf16 on one l40s at 8k x 8: fits, but the L40S reads 16.06 GB of weights + 8 x
    # 8192 x 131,072 B = 8.59 GB of KV per step, less the embedding table (1,050,673,152 B) but its
    # 8 rows (8 x 8,192 B): 23.60 GB / (864 GB/s x 0.8) = 34.1433 ms on the bare roofline; the speed
    # model (vLLM on CUDA, speed.yaml) reads at 0.735, not 0.8 (GEMMs and attention both
    # read-bound at batch 8: their times add to the same sum), and adds its 0.44 ms floor:
    # 34.1433 x 0.8 / 0.735 + 0.44 = 37.6028 ms > 20 ms
    r = kvcalc.plan(
        "llama-3.1-8b",
        seq_len="8k",
        concurrency=8,
        max_tpot_ms=20,
        max_gpus=1,
        gpus="l40s",
        kv_dtypes="bf16",
        weight_dtypes="bf16",
    )
    (m,) = r.misses
    assert m.problems == ["TPOT 37.6 ms > 20 ms"]
    assert m.score == pytest.approx(37.6028 / 20, rel=1e-4)


def test_deepseek_v3_needs_pipeline_stages_across_nodes():
    """DeepSeek-V3 (its fp8 checkpoint) on H100 SXM, 16 users at 32k, TPOT <= 100 ms.

    671e9 weights x 1 B > 8 x 71.68 GiB = 615.7e9 B: one node of 8 cannot hold it, so the
    fewest is two nodes, 16 GPUs, TP 8 inside each node and 2 pipeline stages across them (vLLM
    splits 61 layers 31 + 30). The fullest GPU is the last stage's (30 layers + the LM head); its
    MLA latent cache, replicated on each TP rank: 16 x 32,768 x 30 layers x 576 x 1 B (fp8) =
    9,059,696,640 B. vLLM's FlashMLA backend, the default for MLA on Hopper, forces 64-token
    blocks (32,768 is 512 of them, so the bytes are the formula's): the launch line states
    `--block-size 64`.
    """
    r = kvcalc.plan("deepseek-v3", seq_len="32k", concurrency=16, max_tpot_ms=100, gpus="h100-sxm")
    top = r.layouts[0]
    assert (top.count, top.tp, top.pp, top.dp, top.nodes) == (16, 8, 2, 1, 2)
    assert top.kv_dtype == "fp8_e4m3" and top.weight_dtype == "fp8_e4m3"
    assert top.kv_cache_bytes_per_gpu == 16 * 32768 * 30 * 576
    assert top.memory_bytes_per_gpu <= top.budget_bytes_per_gpu == 76_968_728_985
    # two nodes, one engine (vLLM 0.33.0's mp backend, `vllm/engine/arg_utils.py` --nnodes / --node-rank /
    # --master-addr; node r runs the same line with --node-rank r)
    assert top.launch == (
        "vllm serve deepseek-ai/DeepSeek-V3 --tensor-parallel-size 8 --pipeline-parallel-size 2 "
        "--nnodes 2 --node-rank 0 --master-addr HEAD_NODE_IP --max-model-len 32768 --kv-cache-dtype fp8 --gpu-memory-utilization 0.9 --max-num-seqs 16 "
        "--block-size 64"
    )
    sg = kvcalc.plan(
        "deepseek-v3", seq_len="32k", concurrency=16, max_tpot_ms=100, gpus="h100-sxm", engine="sglang", top=1
    )
    assert sg.layouts[0].launch == (
        "python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --tp-size 8 --pp-size 2 --nnodes 2 "
        "--node-rank 0 --dist-init-addr HEAD_NODE_IP:5000 --context-length 32768 --kv-cache-dtype fp8_e4m3 "
        "--mem-fraction-static 0.9 --max-running-requests 16"
    )


def test_llamacpp_on_two_unequal_gpus():
    """Qwen3-32B through llama.cpp on one L40S and one RTX 4090, 4 users at 8k.

    Free bytes = budget - reserves (activations 8192 x (2 x 5120 + 2 x 25600) x 2 + 256 x 151,936
    x 4 = 1,162,215,424 B, + 524,288,000 B): l40s 43,475,219,251 - 1,686,503,424 = 41,788,715,827;
    rtx-4090 23,181,498,777 - 1,686,503,424 = 21,494,995,353 -> layers [42, 22] (see
    test_layer_split_in_proportion_to_free_memory), -ts 42,23 (the output layer on the last).
    q8_0 (34 B / 32 values) beats f16, so both formats are q8_0; -c = 8192 x 4 = 32,768 cells, -np 4.
    KV on the 4090 (22 layers): 4 x 8192 x 22 x 2 x 8 heads x 128 x 34/32 B = 1,568,669,696 B.
    """
    r = kvcalc.plan("qwen3-32b", seq_len="8k", concurrency=4, gpus="l40s+rtx-4090", engine="llamacpp")
    top = r.layouts[0]
    assert (top.gpu, top.devices, top.count, top.tp, top.pp) == ("l40s+rtx-4090", ["l40s", "rtx-4090"], 2, 1, 2)
    assert top.stage_layers == [42, 22] and top.tensor_split == [42, 23]
    assert top.kv_cache_bytes_per_gpu == 4 * 8192 * 22 * 2 * 8 * 128 * 34 // 32
    assert top.budget_bytes_per_gpu == 23_181_498_777  # the 4090 has the least headroom
    assert (
        top.launch == "llama-server -m qwen3-32b-Q8_0.gguf -c 32768 -np 4 -ctk q8_0 -ctv q8_0 -ngl 99 -ts 42,23 -fa on"
    )


def test_llamacpp_refuses_what_it_cannot_run():
    with pytest.raises(KvcalcError, match="^--kv-dtype: llama.cpp 0c1e570 has no 'fp8' KV cache type"):  # as typed
        kvcalc.plan("qwen3-32b", seq_len="8k", gpus="l40s", engine="llamacpp", kv_dtypes="fp8")
    with pytest.raises(KvcalcError, match="needs identical GPUs"):
        kvcalc.plan("qwen3-32b", seq_len="8k", gpus="l40s+rtx-4090", engine="vllm")


# ----- ranking ---------------------------------------------------------------------------------

RANK = dict(
    seq_len="8k", concurrency=8, gpus="h100-sxm,l40s,a100-80gb-sxm", kv_dtypes="bf16", weight_dtypes="bf16", top=4
)


def test_ranking_without_prices_is_count_then_tokens_per_s():
    # llama-3.1-8b bf16 fits one GPU of each; one step reads 16.06 GB weights + 8.59 GB KV, so
    # tokens/s follow HBM bandwidth: h100 3.35 > a100 2.04 > l40s 0.864 TB/s; then 2 GPUs
    r = kvcalc.plan("llama-3.1-8b", **RANK)
    assert [(x.count, x.gpu) for x in r.layouts] == [
        (1, "h100-sxm"),
        (1, "a100-80gb-sxm"),
        (1, "l40s"),
        (2, "h100-sxm"),
    ]
    tps = [x.tokens_per_s for x in r.layouts[:3]]
    assert tps == sorted(tps, reverse=True)


def test_ranking_with_prices_is_count_then_cost():
    # same count (1): l40s $0.90 < a100 $1.50 < h100 $2.50 per hour; 2 x l40s ($1.80) is next.
    # $ per million tokens = $/hour / (tokens/s x 3600) x 1e6
    prices = {"h100-sxm": 2.5, "l40s": 0.9, "a100-80gb-sxm": 1.5}
    r = kvcalc.plan("llama-3.1-8b", prices=prices, **RANK)
    assert [(x.count, x.gpu) for x in r.layouts] == [(1, "l40s"), (1, "a100-80gb-sxm"), (1, "h100-sxm"), (2, "l40s")]
    first = r.layouts[0]
    assert first.dollars_per_hour == 0.9 and r.layouts[3].dollars_per_hour == pytest.approx(1.8)
    assert first.dollars_per_million_tokens == pytest.approx(0.9 / (first.tokens_per_s * 3600) * 1e6)
    # a GPU without a price ranks after the priced ones of its count, then by tokens/s
    part = kvcalc.plan("llama-3.1-8b", prices={"l40s": 0.9}, **RANK)
    assert [x.gpu for x in part.layouts[:3]] == ["l40s", "h100-sxm", "a100-80gb-sxm"]
    assert part.layouts[1].dollars_per_hour is None


def test_rank_key_orders_count_then_price_then_speed():
    k = P.rank_key
    assert k(1, 9.0, 1.0, ()) < k(2, 0.1, 1e6, ())  # fewer GPUs first, whatever they cost
    assert k(1, 1.0, 1.0, ()) < k(1, 2.0, 1e6, ())  # then cheaper
    assert k(1, 1.0, 1.0, ()) < k(1, None, 1e6, ())  # priced before unpriced
    assert k(1, None, 2.0, ()) < k(1, None, 1.0, ())  # then faster


# ----- the default search is fast ----------------------------------------------------------------


def test_default_search_size():
    """The default search covers every row of the GPU table, so its size follows the table:
    points = (tp, pp, dp) layouts over the counts x the (KV, weight) formats each GPU gets.

    Llama-3.1-70B (64 query, 8 KV heads): tp in {1, 2, 4, 8}, pp x dp the rest (pp <= 80 layers
    always holds), so a count n has sum over tp | gcd(n, 8) of d(n / tp) layouts, d = number of
    divisors: n = 1..8 -> 1, 3, 2, 6, 2, 6, 2, 10 (= 32); 16 -> 5 + 4 + 3 + 2 = 14; 24 -> 8 + 6 + 4
    + 2 = 20; 32 -> 6 + 5 + 4 + 3 = 18: 84 layouts. Formats: bf16 or fp8 KV x the bf16 checkpoint
    or fp8 weights = 4 on a GPU with fp8 tensor cores (`fp8_flops_per_s`), bf16/bf16 alone
    otherwise. A row with no link between devices (`interconnect_bytes_per_s` unset: Apple's
    unified memory, one device per machine) is searched at one device only: 1 layout. A row with a
    72-GPU NVLink domain (`nvlink_domain_gpus`: GB200 / GB300 NVL72) also takes tp 16 and 32:
    16 -> 14 + d(1) = 15; 32 -> 18 + d(2) + d(1) = 21: 88 layouts. So points = 84 x (4 x linked
    GPUs with fp8 + linked GPUs without) + 88 x 4 x NVL72 rows + (formats of each unlinked row):
    the 30 rows of 2026-12-02 (18 with fp8, 2 of them NVL72; 5 Apple rows without fp8 or a link)
    give 84 x (4 x 16 + 7) + 88 x 4 x 2 + 5 x 1 = 5,964 + 704 + 5 = 6,673.
    """
    from kvcalc.load.gpus import gpu_table

    m = load_model("llama-3.1-70b")
    assert sum(len(P.parallel_layouts(m, n)) for n in P.counts(32)) == 84
    assert sum(len(P.parallel_layouts(m, n, 8, 72)) for n in P.counts(32)) == 88
    table = gpu_table().values()
    formats = {g.key: 4 if g.fp8_flops_per_s else 1 for g in table}
    layouts = {g.key: (88 if g.nvlink_domain_gpus == 72 else 84) if g.interconnect_bytes_per_s else 1 for g in table}
    want = sum(layouts[g.key] * formats[g.key] for g in table)
    assert (len(formats), sum(f == 4 for f in formats.values()), want) == (30, 18, 6_673)
    # (its speed, < 1 s on one idle core, is measured by benchmarks/bench_plan.py, not timed here)
    r = kvcalc.plan("llama-3.1-70b", seq_len="32k", concurrency=64, max_tpot_ms=50)
    assert r.gpus_searched == [g.key for g in table]
    assert r.points_searched == want
