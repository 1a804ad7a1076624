"""`kvcalc.calc.plan`'s layouts, exactly: llama.cpp on one device and on equal devices, a fixed
set of GPUs with a price, the order of equal layouts, the target checks at their limits, and
the result's echo of the request. Figures derived in the comments (llama-3.1-8b's weights,
reserves and KV per token as in test_plan_why_not.py)."""

from __future__ import annotations

import dataclasses

import pytest

import kvcalc
from kvcalc.calc import plan as P
from kvcalc.calc.memory_plan import GpuFit, Layout
from kvcalc.load.gpus import get_gpu
from kvcalc.load.models import load_model
from kvcalc.requests import speed_terms
from kvcalc.schema import ModelSpec

L40S_BUDGET = 43_475_219_251  # floor(0.9 x 48,305,799,168)
H100_BUDGET = 76_968_728_985  # floor(0.9 x 85,520,809,984)
RESERVES = 1_259_601_920  # llama-3.1-8b at tp 1: 735,313,920 B activations + 524,288,000 B CUDA context


def test_llamacpp_single_device():
    """llama-3.1-8b through llama.cpp on l40s, 2 users at 8k: one device (no split), then two and
    three equal devices (split 16 + 16, 11 + 11 + 10).

    One l40s, q8_0 weights (the fastest: fewest bytes read) and q8_0 KV: weights 9,517,408,256 B;
    KV 2 x 8192 x 32 layers x 2 x 8 heads x 128 x 34 / 32 B = 2 x 8192 x 69,632 = 1,140,850,688 B;
    used 9,517,408,256 + 1,140,850,688 + 1,259,601,920 = 11,917,860,864 B; headroom 43,475,219,251
    - 11,917,860,864 = 31,557,358,387 B; sequences of 8k: (43,475,219,251 - 9,517,408,256 -
    1,259,601,920) // (8192 x 69,632) = 32,698,209,075 // 570,425,344 = 57.
    TPOT: the speed model of llama.cpp on CUDA (speed.yaml: a 2 ms floor, bandwidth efficiency
    0.735, 8-bit weights x 0.82): the weights read (below) / (864e9 B/s x 0.735 x 0.82) + the KV
    1,140,850,688 B / (864e9 x 0.735) + 2 ms. -c = 8192 x 2 = 16,384 cells, -np 2.
    """
    r = kvcalc.plan("llama-3.1-8b", seq_len="8k", concurrency=2, gpus="l40s", engine="llamacpp", top=3)
    one, two, three = r.layouts
    assert (one.rank, one.gpu, one.devices, one.count, one.tp, one.pp, one.dp, one.nodes) == (
        1,
        "l40s",
        ["l40s"],
        1,
        1,
        1,
        1,
        1,
    )
    assert (one.kv_dtype, one.weight_dtype) == ("q8_0", "q8_0")
    assert one.weights_bytes_per_gpu == 9_517_408_256
    assert one.kv_cache_bytes_per_gpu == 2 * 8192 * 69_632 == 1_140_850_688
    assert one.memory_bytes_per_gpu == 9_517_408_256 + 1_140_850_688 + RESERVES == 11_917_860_864
    assert one.budget_bytes_per_gpu == L40S_BUDGET
    assert one.headroom_bytes == L40S_BUDGET - 11_917_860_864 == 31_557_358_387
    assert one.max_concurrency == (L40S_BUDGET - 9_517_408_256 - RESERVES) // (8192 * 69_632) == 57
    # decode reads: the weights less the bf16 embedding table (128,256 x 4,096 x 2 = 1,050,673,152 B)
    # but its 2 rows (2 x 8,192 B), and the head as llama-quantize stores it for q8_0 (Q8_0:
    # 128,256 x 4,096 x 34 / 32 = 558,170,112 B + the 8,192 B norm) instead of bf16 (+ norm)
    emb = 1_050_673_152
    weights = 9_517_408_256 - emb + 2 * 8_192 - (emb + 8_192) + 558_170_112 + 8_192
    step_s = 0.002 + weights / (864e9 * 0.735 * 0.82) + 1_140_850_688 / (864e9 * 0.735)
    assert one.tpot_ms == pytest.approx(step_s * 1e3, rel=1e-9)
    assert one.tokens_per_s == pytest.approx(2 / step_s, rel=1e-9)
    assert one.speed_model.startswith("llamacpp on cuda: floor 2.00 ms/step")
    assert one.stage_layers is None and one.tensor_split is None
    # llama.cpp stays in one machine: counts 1..8 x 4 format pairs (f16 / q8_0 KV x checkpoint /
    # q8_0 weights) = 32 points, no 16-, 24- or 32-device layouts
    assert r.points_searched == 32
    assert one.launch == "llama-server -m llama-3.1-8b-Q8_0.gguf -c 16384 -np 2 -ctk q8_0 -ctv q8_0 -ngl 99 -fa on"
    assert one.dollars_per_hour is None and one.price_per_gpu_hour is None and one.dollars_per_million_tokens is None
    # two equal devices: 32 layers split 16 + 16 by equal free bytes; -ts 16,17 (the output layer
    # on the last); the same bytes read per token, and the token passes two stages: one more floor
    assert (two.count, two.devices, two.pp, two.stage_layers, two.tensor_split) == (
        2,
        ["l40s", "l40s"],
        2,
        [16, 16],
        [16, 17],
    )
    assert two.launch == (
        "llama-server -m llama-3.1-8b-Q8_0.gguf -c 16384 -np 2 -ctk q8_0 -ctv q8_0 -ngl 99 -ts 16,17 -fa on"
    )
    assert two.tpot_ms == pytest.approx(one.tpot_ms + 2.0, rel=1e-9)
    # three: 32 / 3 = 10.67 each -> 10, 10, 10 + the 2 left to devices 0 and 1 -> 11, 11, 10
    assert (three.count, three.stage_layers, three.tensor_split) == (3, [11, 11, 10], [11, 11, 11])


def test_a_fixed_set_of_two_h100s_with_a_price():
    """llama-3.1-8b on the fixed set h100-sxm+h100-sxm (vLLM), 4 users at 8k, $2.50 per GPU-hour.

    tp 2 (the fastest of tp 2 / pp 2 / dp 2): weights per GPU (16,060,522,496 - 532,480 B of norms)
    / 2 + 532,480 = 8,030,527,488 B (norms 32 x 2 x 4096 x 2 + 8192 B are replicated); KV 4 x 8192
    x 32 x 2 x 4 heads x 128 x 2 B = 2,147,483,648 B; reserves at tp 2: 8192 x (2 x 4096 + 2 x
    14336 / 2) x 2 + 256 x 128,256 / 2 x 4 = 434,765,824 B + 524,288,000 B. TPOT: (8,030,527,488 +
    2,147,483,648) B / (3.35e12 x 0.8) = 3.79777 ms + all-reduce 2 x 32 x 4 x 4096 x 2 B =
    2,097,152 B x 2 x 1/2 / 450e9 B/s (one direction of 900 GB/s) = 0.00466 ms, on the bare roofline;
    vLLM's speed model (speed.yaml) reads at 0.735 instead, adds its 0.44 ms floor and 2 x 32
    all-reduces of 4.2 + 6.6 x log2(2) = 10.8 us each (GEMMs and attention both read-bound at
    batch 4: their times add to the bytes' sum). Price: 2 x $2.50 =
    $5.00/hour, $5.00 / (tokens/s x 3600) x 1e6 per million tokens. One machine: nodes 1.
    """
    r = kvcalc.plan(
        "llama-3.1-8b",
        seq_len="8k",
        concurrency=4,
        gpus="h100-sxm+h100-sxm",
        prices={"h100-sxm": 2.5},
        kv_dtypes="bf16",
        weight_dtypes="bf16",
    )
    top = r.layouts[0]
    assert (top.gpu, top.devices, top.count, top.tp, top.pp, top.dp, top.nodes) == (
        "h100-sxm+h100-sxm",
        ["h100-sxm"],
        2,
        2,
        1,
        1,
        1,
    )
    assert top.weights_bytes_per_gpu == 8_030_527_488
    assert top.kv_cache_bytes_per_gpu == 2_147_483_648
    assert top.memory_bytes_per_gpu == 8_030_527_488 + 2_147_483_648 + 434_765_824 + 524_288_000
    assert top.headroom_bytes == H100_BUDGET - top.memory_bytes_per_gpu
    # this rank's embedding (64,128 x 8,192 B = 525,336,576 B) is read as 4 rows of 8,192 B
    step_s = (
        0.00044
        + (8_030_527_488 - 525_336_576 + 4 * 8_192 + 2_147_483_648) / (3.35e12 * 0.735)
        + 2_097_152 * 2 * 0.5 / 450e9
        + 64 * 10.8e-6
    )
    assert top.tpot_ms == pytest.approx(step_s * 1e3, rel=1e-6)
    assert (top.price_per_gpu_hour, top.dollars_per_hour) == (2.5, 5.0)
    assert top.dollars_per_million_tokens == pytest.approx(5.0 / (4 / step_s * 3600) * 1e6, rel=1e-6)
    assert top.launch == (
        "vllm serve meta-llama/Llama-3.1-8B --tensor-parallel-size 2 --pipeline-parallel-size 1 "
        "--max-model-len 8192 --kv-cache-dtype auto --gpu-memory-utilization 0.9 --max-num-seqs 4"
    )
    # the fixed set is searched at its own count only: tp 2, pp 2, dp 2 (llama-3.1-8b, 8 KV heads)
    assert r.points_searched == 3
    assert [(x.tp, x.pp, x.dp) for x in r.layouts] == [(2, 1, 1)]  # one row per (GPU, count)
    assert r.n_qualifying == 3


def test_a_fixed_set_names_the_set_in_its_miss_and_offers_no_more_gpus():
    # TTFT of one 8k prompt cannot reach 1 microsecond: the miss names the set, and nothing fixes
    # it (no count past a fixed set, fp8 does not get there, neither does a 1-token context or 1
    # sequence), so the line says so. TTFT = the tp-2 planner's prefill of 8,192 tokens, with
    # vLLM's speed terms (what `kvcalc estimate --engine vllm --tp 2` uses).
    r = kvcalc.plan(
        "llama-3.1-8b",
        seq_len="8k",
        concurrency=8,
        max_ttft_s=1e-6,
        gpus="h100-sxm+h100-sxm",
        kv_dtypes="bf16",
        weight_dtypes="bf16",
    )
    assert r.max_ttft_s == 1e-6 and r.max_tpot_ms is None and r.min_tokens_per_s is None
    m = r.misses[0]
    ttft = (
        GpuFit(
            load_model("llama-3.1-8b"),
            get_gpu("h100-sxm"),
            Layout(
                tp=2,
                k_dtype="bf16",
                v_dtype="bf16",
                weight_dtype="bf16",
                speed=speed_terms(get_gpu("h100-sxm"), "vllm", 2),
            ),
        )
        .prefill(8192)
        .step_time_s
    )
    assert m.problems == [f"TTFT {ttft:,.2f} s > 1e-06 s"] == ["TTFT 0.12 s > 1e-06 s"]
    assert m.score == pytest.approx(ttft / 1e-6, rel=1e-12)
    assert m.fixes == []
    assert m.line == (
        "2 x h100-sxm+h100-sxm (tp 2, pp 1, dp 1; KV bf16, weights bf16): TTFT 0.12 s > 1e-06 s; "
        "no fix within 256 GPUs, a shorter context or fewer sequences"
    )


def test_two_target_misses_are_joined_and_the_worst_ratio_scores():
    # llama-3.1-8b bf16 on one l40s at 8k x 8 (see test_plan.py): TPOT, vLLM's speed model (a
    # 0.44 ms floor, reads at 0.735 of 864e9 B/s), 37.603 ms > 20 ms; 8 / 37.603 ms = 212.8
    # tokens/s < 1000. score = max(37.603 / 20 = 1.88, 1000 / 212.8 = 4.70)
    r = kvcalc.plan(
        "llama-3.1-8b",
        seq_len="8k",
        concurrency=8,
        max_tpot_ms=20,
        min_tokens_per_s=1000,
        max_gpus=1,
        gpus="l40s",
        kv_dtypes="bf16",
        weight_dtypes="bf16",
    )
    assert r.min_tokens_per_s == 1000 and r.max_tpot_ms == 20
    (m,) = r.misses
    # (decode reads 8 rows of the 1,050,673,152 B embedding table, not all of it)
    step_s = 0.00044 + (16_060_522_496 - 1_050_673_152 + 8 * 8_192 + 8 * 8192 * 131_072) / (864e9 * 0.735)
    assert m.problems == ["TPOT 37.6 ms > 20 ms", "213 tokens/s < 1000 tokens/s"]
    assert m.score == pytest.approx(1000 / (8 / step_s), rel=1e-9)
    assert m.line.startswith(
        "1 x l40s (tp 1, pp 1, dp 1; KV bf16, weights bf16): TPOT 37.6 ms > 20 ms; "
        "213 tokens/s < 1000 tokens/s; fix: more GPUs: "
    )


def test_the_result_echoes_the_request():
    r = kvcalc.plan(
        "llama-3.1-8b",
        seq_len="8k",
        concurrency=3,
        max_gpus=1,
        gpus="h100-sxm",
        kv_dtypes="bf16",
        weight_dtypes="bf16",
        min_tokens_per_s=1,
        max_ttft_s=100,
    )
    assert (r.model, r.engine, r.seq_len, r.concurrency, r.max_gpus) == ("llama-3.1-8b", "vllm", 8192, 3, 1)
    assert r.source == load_model("llama-3.1-8b").source and r.source.startswith("meta-llama/Llama-3.1-8B")
    assert (r.max_tpot_ms, r.min_tokens_per_s, r.max_ttft_s) == (None, 1, 100)
    assert r.notes == [] and r.misses == [] and r.n_qualifying == 1 and r.points_searched == 1
    # a TTFT target makes the search compute TTFT: the layout's is the planner's prefill (vLLM's terms)
    vllm = speed_terms(get_gpu("h100-sxm"), "vllm", 1)
    ttft = (
        GpuFit(
            load_model("llama-3.1-8b"),
            get_gpu("h100-sxm"),
            Layout(k_dtype="bf16", v_dtype="bf16", weight_dtype="bf16", speed=vllm),
        )
        .prefill(8192)
        .step_time_s
    )
    assert r.layouts[0].ttft_s == ttft


def test_skipped_formats_are_noted():
    # a head of 80 values is not a whole number of q8_0's 32-value blocks: every q8_0 KV planner
    # is skipped, once per (KV, weights) pair, with the format's own message; fp16 KV is searched
    m = load_model("llama-3.1-8b").model_copy(update={"head_dim": 80, "name": "llama-80"})
    r = kvcalc.plan(m, seq_len="8k", concurrency=1, gpus="l40s", engine="llamacpp", kv_dtypes="q8_0,f16", max_gpus=1)
    why = "q8_0 packs 32 values per block; a K head of 80 values is not a whole number of blocks; use another KV dtype"
    assert r.notes == [f"skipped KV q8_0, weights checkpoint: {why}", f"skipped KV q8_0, weights q8_0: {why}"]
    assert [(x.kv_dtype, x.weight_dtype) for x in r.layouts] == [("fp16", "q8_0")]
    assert r.points_searched == 2


# ----- equal layouts, the limits, the space on its own ---------------------------------------------


def _twin_search(**kw) -> P.PlanSearch:
    """llama-3.1-8b at 8k x 4 in bf16 on the h100-sxm and a copy of it under another key."""
    h100 = get_gpu("h100-sxm")
    twin = h100.model_copy(update={"key": "h100-twin"})
    base = {
        "model": load_model("llama-3.1-8b"),
        "seq_len": 8192,
        "concurrency": 4,
        "gpus": (P.GpuChoice((h100,)), P.GpuChoice((twin,))),
        "kv_dtypes": (("bf16", "bf16"),),
        "weight_dtypes": ("bf16",),
        "max_gpus": 2,
    }
    base.update(kw)
    return P.PlanSearch(**base)


def test_equal_layouts_rank_by_name():
    # the twin is the same GPU: every figure ties, so the names decide: "h100-sxm" < "h100-twin"
    # at each count (both listed first as they were searched first and second)
    r = P.search(_twin_search())
    assert [(x.count, x.gpu) for x in r.layouts] == [
        (1, "h100-sxm"),
        (1, "h100-twin"),
        (2, "h100-sxm"),
        (2, "h100-twin"),
    ]
    assert r.layouts[0].tokens_per_s == r.layouts[1].tokens_per_s
    # searched the other way round, the same order
    s = _twin_search()
    r2 = P.search(_twin_search(gpus=tuple(reversed(s.gpus))))
    assert [(x.count, x.gpu) for x in r2.layouts] == [
        (1, "h100-sxm"),
        (1, "h100-twin"),
        (2, "h100-sxm"),
        (2, "h100-twin"),
    ]


def test_equal_misses_rank_by_name():
    # 20 x 32k cannot fit one h100 (test_fp8_kv_is_the_fix): the two misses tie on score and count
    r = P.search(_twin_search(seq_len=32768, concurrency=20, max_gpus=1, why_not=2))
    assert [m.gpu for m in r.misses] == ["h100-sxm", "h100-twin"]
    assert r.misses[0].score == r.misses[1].score


def test_smallest_fitting_prefers_the_faster_layout_of_the_fewest_gpus():
    # 20 x 32k bf16 on h100-sxm: 1 GPU is too small (test_fp8_kv_is_the_fix); of the 2-GPU
    # layouts tp 2 reads half the bytes per GPU per step (pp 2 reads them in turn, dp 2 reads the
    # weights twice): (2, tp 2, pp 1, dp 1)
    m, h100 = load_model("llama-3.1-8b"), get_gpu("h100-sxm")
    assert P.smallest_fitting(m, h100, Layout(), 32768, 20, ("bf16", "bf16"), "bf16") == (2, 2, 1, 1)
    # in fp8 KV it fits one GPU (42.9 GB of KV <= 59.6 GB free)
    assert P.smallest_fitting(m, h100, Layout(), 32768, 20, ("fp8_e4m3", "fp8_e4m3"), "bf16") == (1, 1, 1, 1)
    # fp8 weights and KV: 29 sequences fit one GPU (test_fp8_kv_and_weights_together...), bf16 not
    assert P.smallest_fitting(m, h100, Layout(), 32768, 29, ("fp8_e4m3", "fp8_e4m3"), "fp8_e4m3") == (1, 1, 1, 1)
    assert P.smallest_fitting(m, h100, Layout(), 32768, 29, ("fp8_e4m3", "fp8_e4m3"), "bf16") == (2, 2, 1, 1)
    # the utilization of the knobs counts: at 0.5 the budget is 42.8 GB, under the 16 GB of weights
    # + 42.9 GB of fp8 KV: 2 GPUs
    assert P.smallest_fitting(
        m, h100, Layout(gpu_memory_utilization=0.5), 32768, 20, ("fp8_e4m3", "fp8_e4m3"), "bf16"
    ) == (2, 2, 1, 1)
    # nothing within 1 GPU
    assert P.smallest_fitting(m, h100, Layout(), 32768, 20, ("bf16", "bf16"), "bf16", limit=1) is None


def _placed(tp=1, kv=("bf16", "bf16"), weight="bf16", gpu="h100-sxm"):
    req = P.PlanSearch(
        model=load_model("llama-3.1-8b"),
        seq_len=8192,
        concurrency=8,
        gpus=(P.GpuChoice((get_gpu(gpu),)),),
        kv_dtypes=(kv,),
        weight_dtypes=(weight,),
        max_gpus=tp,
    )
    space = P._Space(req)
    return next(p for p in space.placements(req.gpus[0], kv, weight) if p.tp == tp and p.count == tp)


def test_targets_met_exactly_qualify():
    # a figure equal to its limit is not a miss (the limits are "at most" / "at least")
    p = _placed()
    free = P.evaluate(p, 8192, 8, P.PlanTargets())
    assert free.ok and free.score == 1.0
    assert free.ttft_s is None  # no TTFT target: not computed
    assert P.evaluate(p, 8192, 8, P.PlanTargets(), with_ttft=True).ttft_s == p.prefill(8192)
    at = P.PlanTargets(max_tpot_ms=free.tpot_s * 1e3, min_tokens_per_s=free.tokens_per_s, max_ttft_s=p.prefill(8192))
    out = P.evaluate(p, 8192, 8, at)
    assert out.ok and out.problems == [] and out.score == 1.0
    assert out.ttft_s == p.prefill(8192)


def test_target_ratios():
    # each miss scores figure / limit (TPOT, TTFT) or limit / figure (tokens/s); the worst counts
    p = _placed()
    free = P.evaluate(p, 8192, 8, P.PlanTargets())
    ttft = p.prefill(8192)
    half = P.PlanTargets(max_ttft_s=ttft / 2)
    out = P.evaluate(p, 8192, 8, half)
    assert out.problems == [f"TTFT {ttft:,.2f} s > {ttft / 2:g} s"] and out.score == pytest.approx(2.0)
    out = P.evaluate(p, 8192, 8, P.PlanTargets(min_tokens_per_s=free.tokens_per_s * 4))
    assert out.score == pytest.approx(4.0)
    assert out.problems == [f"{free.tokens_per_s:,.0f} tokens/s < {free.tokens_per_s * 4:g} tokens/s"]
    out = P.evaluate(p, 8192, 8, P.PlanTargets(max_tpot_ms=free.tpot_s * 1e3 / 3, max_ttft_s=ttft / 2))
    assert out.score == pytest.approx(3.0) and len(out.problems) == 2


def test_a_layout_that_does_not_fit_scores_used_over_budget():
    # 8 x 8k on one h100 in bf16 fits; 20 x 32k does not: 103,219,470,336 / 76,968,728,985
    p = _placed()
    out = P.evaluate(p, 32768, 20, P.PlanTargets(max_tpot_ms=1.0))
    assert not out.fits and out.tpot_s is None
    assert out.problems == ["needs 96.1 GiB per GPU, budget 71.7 GiB"]
    assert out.score == 103_219_470_336 / H100_BUDGET


def test_a_split_over_different_devices_times_each_stage_on_its_own_device():
    """Qwen3-32B through llama.cpp on l40s + rtx-4090 (test_plan.py's layers 42 + 22), 4 x 8k,
    q8_0 weights and KV.

    Stage bytes (weights + KV): l40s 23,315,292,160 + 2,994,733,056 = 26,310,025,216 B;
    rtx-4090 12,953,651,200 + 1,568,669,696 = 14,522,320,896 B. Decode is memory-bound, so the
    step is each stage's share of the bytes times its own device's whole-model step, which under
    llama.cpp's speed model on CUDA (speed.yaml) is 2 stages x the 2 ms floor + the weights read
    / (BW x 0.735 x 0.82, 8-bit weights) + the KV / (BW x 0.735). TTFT: each device's
    prefill weighted by its share of the layers, 42/64 and 22/64. Prices: $1.00 + $0.50 an hour
    (each device its own), $0.75 a GPU on average.
    """
    r = kvcalc.plan(
        "qwen3-32b",
        seq_len="8k",
        concurrency=4,
        gpus="l40s+rtx-4090",
        engine="llamacpp",
        prices={"l40s": 1.0, "rtx-4090": 0.5},
    )
    top = r.layouts[0]
    assert top.stage_layers == [42, 22]
    # each stage's share of the stored bytes times its device's step over the bytes decode reads:
    # the stored 40,832,346,112 B less the bf16 embedding (151,936 x 5,120 x 2 = 1,555,824,640 B) but
    # 4 rows of 10,240 B, and the head in Q8_0 (151,936 x 5,120 x 34 / 32 = 826,531,840 B + 10,240 B
    # norm) instead of bf16: 38,547,269,632 B
    total, read = 26_310_025_216 + 14_522_320_896, 38_547_269_632
    kv = 2_994_733_056 + 1_568_669_696  # of which the KV; the rest, 33,983,866,880 B, weights

    def device_step(bw: float) -> float:
        return 2 * 0.002 + (read - kv) / (bw * 0.735 * 0.82) + kv / (bw * 0.735)

    step_s = 26_310_025_216 / total * device_step(864e9) + 14_522_320_896 / total * device_step(1008e9)
    assert top.tpot_ms == pytest.approx(step_s * 1e3, rel=1e-9)
    assert top.tokens_per_s == pytest.approx(4 / step_s, rel=1e-9)
    m = load_model("qwen3-32b")
    lay = Layout(pp=2, stage_layers=(42, 22), k_dtype="q8_0", weight_dtype="q8_0")
    pre = [
        GpuFit(m, get_gpu(g), dataclasses.replace(lay, speed=speed_terms(get_gpu(g), "llamacpp", 1)))
        .prefill(8192)
        .step_time_s
        for g in ("l40s", "rtx-4090")
    ]
    assert top.ttft_s == pytest.approx(42 / 64 * pre[0] + 22 / 64 * pre[1], rel=1e-12)
    assert (top.dollars_per_hour, top.price_per_gpu_hour) == (1.5, 0.75)


def test_llamacpp_uses_at_most_one_device_per_layer():
    # a 4-layer model: llama.cpp can use 1..4 devices (4: one layer each); 5..8 are not searched
    tiny = ModelSpec(
        name="tiny", n_layers=4, n_heads=8, n_kv_heads=8, hidden_size=512, vocab_size=1000, intermediate_size=1024
    )
    r = kvcalc.plan(tiny, seq_len=1024, concurrency=1, gpus="l40s", engine="llamacpp", top=10)
    assert [(x.count, x.stage_layers) for x in r.layouts] == [(1, None), (2, [2, 2]), (3, [2, 1, 1]), (4, [1, 1, 1, 1])]


def test_the_launch_line_gets_each_layouts_figures():
    # the engine's launch builder is handed every figure by keyword; a recorder shows them
    calls = []

    def launch(**kw):
        calls.append(kw)
        return f"serve {len(calls)}"

    h100 = get_gpu("h100-sxm")
    req = P.PlanSearch(
        model=load_model("llama-3.1-8b"),
        seq_len=8192,
        concurrency=5,
        gpus=(P.GpuChoice((h100,)),),
        kv_dtypes=(("fp8_e4m3", "bf16"),),
        weight_dtypes=("bf16",),
        max_gpus=2,
        launch=launch,
        knobs=Layout(gpu_memory_utilization=0.85),
    )
    r = P.search(req)
    # 1 GPU first, then the best 2-GPU layout: tp 2 (5 sequences in one replica)
    assert [x.launch for x in r.layouts] == ["serve 1", "serve 2"]
    assert calls[0] == {
        "tp": 1,
        "pp": 1,
        "dp": 1,
        "nodes": 1,
        "max_model_len": 8192,
        "max_num_seqs": 5,
        "k_dtype": "fp8_e4m3",
        "v_dtype": "bf16",
        "weight_dtype": "bf16",
        "gpu_memory_utilization": 0.85,
        "tensor_split": None,
        "gpu": h100,
    }
    assert calls[1]["tp"] == 2 and calls[1]["max_num_seqs"] == 5
    assert r.layouts[0].kv_dtype == "fp8_e4m3/bf16"
    # K in fp8 (1 B), V in bf16 (2 B): 5 x 8192 tokens x 32 layers x 8 heads x 128 x 3 B
    assert r.layouts[0].kv_cache_bytes_per_gpu == 5 * 8192 * 32 * 8 * 128 * 3
    # without a builder there is no launch line at all (None, not "")
    assert P.search(dataclasses.replace(req, launch=None)).layouts[0].launch is None


def test_dp_replicas_share_the_sequences_in_the_launch_line():
    # 5 sequences over dp 2: the fullest replica runs ceil(5 / 2) = 3 (--max-num-seqs 3), on
    # nodes = ceil(16 / 8) = 2 for 16 GPUs
    calls = []
    h100 = get_gpu("h100-sxm")
    req = P.PlanSearch(
        model=load_model("llama-3.1-8b"),
        seq_len=8192,
        concurrency=5,
        gpus=(P.GpuChoice((h100,)),),
        kv_dtypes=(("bf16", "bf16"),),
        weight_dtypes=("bf16",),
        max_gpus=16,
        launch=lambda **kw: calls.append(kw) or "x",
    )
    space = P._Space(req)
    placed = next(p for p in space.placements(req.gpus[0], ("bf16", "bf16"), "bf16") if (p.tp, p.pp, p.dp) == (8, 1, 2))
    out = P.evaluate(placed, 8192, 5, P.PlanTargets(), used=space.used(placed))
    lay = P._layout(req, 1, placed, out)
    assert (calls[0]["dp"], calls[0]["max_num_seqs"], calls[0]["nodes"], lay.nodes) == (2, 3, 2, 2)
    # KV per GPU for the fullest replica: 3 x 8192 x 32 x 2 x 1 head (8 / tp 8) x 128 x 2 B
    assert lay.kv_cache_bytes_per_gpu == 3 * 8192 * 32 * 2 * 1 * 128 * 2


def test_the_layer_split_subtracts_the_tp_1_reserves():
    """llama-3.1-8b through llama.cpp on h200 + rtx-4090: free bytes are each budget less the
    reserves of one unsplit rank (tp 1: 1,259,601,920 B; at tp 2 they would be 959,053,824 B).

    h200: floor(0.9 x 150,754,820,096) = 135,679,338,086 - 1,259,601,920 = 134,419,736,166 B;
    rtx-4090: 23,181,498,777 - 1,259,601,920 = 21,921,896,857 B; sum 156,341,633,023 B.
    32 layers x 0.85978 = 27.513 -> 27, x 0.14022 = 4.487 -> 4; the one left goes to the larger
    remainder (0.513, the h200): (28, 4), -ts 28,5. (With tp 2's reserves: 27.469 / 4.531 -> (27, 5).)
    """
    r = kvcalc.plan(
        "llama-3.1-8b",
        seq_len="8k",
        concurrency=1,
        gpus="h200+rtx-4090",
        engine="llamacpp",
        kv_dtypes="f16",
        weight_dtypes="f16",
    )
    assert [(x.stage_layers, x.tensor_split) for x in r.layouts] == [([28, 4], [28, 5])]


def test_smallest_fitting_follows_the_node_size():
    # llama-3.1-70b bf16, 64 x 8k: weights 141.1 GB + KV 64 x 8192 x 327,680 B = 171.8 GB > 4 x
    # 76.97 GB, so 4 h100s cannot hold it; 5 can, as tp 1 x pp 5 (5 is prime and tp must divide
    # the 8 KV heads; dp 5 would put all weights on one GPU). In nodes of 4 there is no 5: the next
    # count is 8 (two nodes), whose fastest layout is tp 4 x dp 2
    m, h100 = load_model("llama-3.1-70b"), get_gpu("h100-sxm")
    kv = ("bf16", "bf16")
    assert P.smallest_fitting(m, h100, Layout(), 8192, 64, kv, "bf16") == (5, 1, 5, 1)
    assert P.smallest_fitting(m, h100, Layout(), 8192, 64, kv, "bf16", gpus_per_node=4) == (8, 4, 1, 2)


def test_a_fixed_set_in_fp8_weights():
    # the fixed set h100-sxm+h100-sxm with fp8 weights: tp 2 holds half the fp8 matrices
    # 6,979,321,856 / 2 = 3,489,660,928 B + norms 524,288 B (replicated) + half the bf16 embedding
    # and LM head 2,101,346,304 / 2 = 1,050,673,152 B + final norm 8,192 B = 4,540,866,560 B; the
    # launch line asks vLLM for fp8 weights
    r = kvcalc.plan(
        "llama-3.1-8b", seq_len="8k", concurrency=4, gpus="h100-sxm+h100-sxm", kv_dtypes="bf16", weight_dtypes="fp8"
    )
    top = r.layouts[0]
    assert (top.tp, top.weight_dtype, top.weights_bytes_per_gpu) == (2, "fp8_e4m3", 4_540_866_560)
    assert top.launch.endswith("--max-num-seqs 4 --quantization fp8")
