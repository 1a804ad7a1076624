"""`kvcalc.calc.plan`'s why-not lines, exactly: each fix the search offers (more GPUs, fp8 KV,
fp8 weights, both, q8_0 under llama.cpp, a shorter context, fewer sequences) with the figures
that decide it, the target misses (TPOT, tokens/s, TTFT) with their texts and scores, and the
line when nothing fixes a layout.

Shared figures (llama-3.1-8b, configs/models/llama-3.1-8b.yaml: 32 layers, 8 KV heads x 128,
hidden 4096, intermediate 14336, vocab 128,256; one h100-sxm under vLLM's defaults):
- budget: floor(0.9 x 85,520,809,984) = 76,968,728,985 B (71.7 GiB);
- weights in bf16: 8,030,261,248 parameters x 2 B = 16,060,522,496 B; in fp8: the layers'
  matrices 32 x (2 x 4096 x 4096 + 2 x 4096 x 1024 + 3 x 4096 x 14336) = 6,979,321,856 B at 1 B,
  + norms 32 x 2 x 4096 x 2 B = 524,288 B, + embedding and LM head 2 x 128,256 x 4096 x 2 B =
  2,101,346,304 B (kept in bf16), + the final norm 8,192 B = 9,081,200,640 B;
- reserves: activations 8192 x (2 x 4096 + 2 x 14336) x 2 + 256 x 128,256 x 4 = 735,313,920 B
  + the CUDA context 524,288,000 B = 1,259,601,920 B;
- free for KV with bf16 weights: 76,968,728,985 - 16,060,522,496 - 1,259,601,920 =
  59,648,604,569 B; with fp8 weights: 76,968,728,985 - 9,081,200,640 - 1,259,601,920 =
  66,627,926,425 B;
- KV per token: 32 layers x 2 x 8 x 128 = 65,536 values: 131,072 B in bf16, 65,536 B in fp8;
  per 32,768-token sequence 4,294,967,296 B (bf16) or 2,147,483,648 B (fp8).
- the default engine is vLLM, whose own blocks size the KV cache (`engines.vllm.plan`): a block
  of 16 tokens over all layers is 2,097,152 B in bf16 (1,048,576 B in fp8); the free bytes hold
  59,648,604,569 // 2,097,152 = 28,442 bf16 blocks (56,885 fp8), and a shorter context is a
  whole number of blocks per request: where the exact formula's context is not a multiple of
  16, vLLM's is the multiple of 16 below it.
"""

from __future__ import annotations

import pytest

import kvcalc

#: (model, plan arguments, the layout's bytes per GPU, its budget, the why-not line)
MISSES = [
    # 20 x 32k in bf16: 16,060,522,496 + 20 x 4,294,967,296 + 1,259,601,920 = 103,219,470,336 B
    # = 96.13 GiB > 71.7 GiB. fp8 KV: 20 x 2,147,483,648 = 42,949,672,960 <= 59,648,604,569 fits.
    # context: 28,442 blocks // 20 = 1,422 blocks = 22,752 tokens (the exact formula's
    # 59,648,604,569 // (20 x 131,072) = 22,754 is 1,423 blocks each); sequences: // 2,048 = 13.
    pytest.param(
        "llama-3.1-8b",
        dict(max_gpus=1, concurrency=20, gpus="h100-sxm", kv_dtypes="bf16", weight_dtypes="bf16"),
        103_219_470_336,
        76_968_728_985,
        "1 x h100-sxm (tp 1, pp 1, dp 1; KV bf16, weights bf16): needs 96.1 GiB per GPU, budget "
        "71.7 GiB; fix: more GPUs: 2 x h100-sxm (tp 2, pp 1, dp 1), or fp8 KV on the same 1 GPU, "
        "or a context of at most 22,752 tokens, or at most 13 concurrent sequences",
        id="fp8-kv",
    ),
    # 30 x 32k, fp8 KV, bf16 weights: 16,060,522,496 + 30 x 2,147,483,648 + 1,259,601,920 =
    # 81,744,633,856 B = 76.13 GiB > 71.7 GiB. "fp8 KV" is what it has (skipped, not the end of
    # the list); fp8 weights: 9,081,200,640 + 64,424,509,440 + 1,259,601,920 = 74,765,312,000 B fits.
    # context: 56,885 fp8 blocks // 30 = 1,896 blocks = 30,336 tokens (formula: 30,338);
    # sequences: 56,885 // 2,048 = 27.
    pytest.param(
        "llama-3.1-8b",
        dict(max_gpus=1, concurrency=30, gpus="h100-sxm", kv_dtypes="fp8", weight_dtypes="bf16"),
        81_744_633_856,
        76_968_728_985,
        "1 x h100-sxm (tp 1, pp 1, dp 1; KV fp8_e4m3, weights bf16): needs 76.1 GiB per GPU, "
        "budget 71.7 GiB; fix: more GPUs: 2 x h100-sxm (tp 2, pp 1, dp 1), or fp8 weights on the "
        "same 1 GPU, or a context of at most 30,336 tokens, or at most 27 concurrent sequences",
        id="fp8-weights-when-the-kv-is-fp8",
    ),
    # 29 x 32k in bf16: 16,060,522,496 + 29 x 4,294,967,296 + 1,259,601,920 = 141,874,176,000 B
    # = 132.13 GiB. fp8 KV alone: 29 x 2,147,483,648 = 62,277,025,792 > 59,648,604,569; fp8
    # weights alone: 124,554,051,584 > 66,627,926,425; both: 62,277,025,792 <= 66,627,926,425.
    # context: 28,442 blocks // 29 = 980 blocks = 15,680 tokens (formula: 15,692); sequences 13.
    pytest.param(
        "llama-3.1-8b",
        dict(max_gpus=1, concurrency=29, gpus="h100-sxm", kv_dtypes="bf16", weight_dtypes="bf16"),
        141_874_176_000,
        76_968_728_985,
        "1 x h100-sxm (tp 1, pp 1, dp 1; KV bf16, weights bf16): needs 132.1 GiB per GPU, budget "
        "71.7 GiB; fix: more GPUs: 2 x h100-sxm (tp 2, pp 1, dp 1), or fp8 KV and weights on the "
        "same 1 GPU, or a context of at most 15,680 tokens, or at most 13 concurrent sequences",
        id="fp8-kv-and-weights-together",
    ),
    # the a100-80gb-sxm has no fp8 tensor cores: the same miss as fp8-kv offers no fp8 format.
    # Budget floor(0.9 x 85,899,345,920) = 77,309,411,328 B (72.0 GiB); free 77,309,411,328 -
    # 16,060,522,496 - 1,259,601,920 = 59,989,286,912 B = 28,605 blocks of 2,097,152 B: context
    # 28,605 // 20 = 1,430 blocks = 22,880 tokens (formula: 22,884); sequences 28,605 // 2,048 = 13
    pytest.param(
        "llama-3.1-8b",
        dict(max_gpus=1, concurrency=20, gpus="a100-80gb-sxm", kv_dtypes="bf16", weight_dtypes="bf16"),
        103_219_470_336,
        77_309_411_328,
        "1 x a100-80gb-sxm (tp 1, pp 1, dp 1; KV bf16, weights bf16): needs 96.1 GiB per GPU, "
        "budget 72.0 GiB; fix: more GPUs: 2 x a100-80gb-sxm (tp 2, pp 1, dp 1), or a context of at "
        "most 22,880 tokens, or at most 13 concurrent sequences",
        id="no-fp8-on-a-gpu-without-fp8",
    ),
    # llama.cpp (a layer split) offers q8_0, not fp8, even on the l40s (which has fp8). Its budget
    # floor(0.9 x 48,305,799,168) = 43,475,219,251 B (40.5 GiB), the same reserves as above.
    # 8 x 32k in f16: 16,060,522,496 + 8 x 4,294,967,296 + 1,259,601,920 = 51,679,862,784 B =
    # 48.13 GiB. Free 43,475,219,251 - 16,060,522,496 - 1,259,601,920 = 26,155,094,835 B; q8_0 KV
    # (34 B per 32 values): 8 x 32,768 x 32 x 2 x 1024 x 34 / 32 = 18,253,611,008 B fits.
    # context: 26,155,094,835 // (8 x 131,072) = 24,943; sequences: // 4,294,967,296 = 6
    pytest.param(
        "llama-3.1-8b",
        dict(max_gpus=1, concurrency=8, gpus="l40s", kv_dtypes="f16", weight_dtypes="f16", engine="llamacpp"),
        51_679_862_784,
        43_475_219_251,
        "1 x l40s (tp 1, pp 1, dp 1; KV fp16, weights fp16): needs 48.1 GiB per GPU, budget 40.5 GiB; "
        "fix: more GPUs: 2 x l40s (tp 1, pp 2, dp 1), or q8_0 KV on the same 1 GPU, or a context of "
        "at most 24,943 tokens, or at most 6 concurrent sequences",
        id="llamacpp-q8_0-kv",
    ),
    # 13 x 32k, q8_0 KV (2,281,701,376 B a sequence), f16 weights: 16,060,522,496 + 29,662,117,888
    # + 1,259,601,920 = 46,982,242,304 B = 43.76 GiB > 40.5 GiB. q8_0 KV is what it has (skipped);
    # q8_0 weights (9,517,408,256 B: the q8_0 layout's weights, see test_llamacpp_single_device in
    # test_plan_layouts.py) + 29,662,117,888 + 1,259,601,920 = 40,439,128,064 B fits.
    # context: 26,155,094,835 // (13 x 69,632 B a token) = 28,893; sequences // 2,281,701,376 = 11
    pytest.param(
        "llama-3.1-8b",
        dict(max_gpus=1, concurrency=13, gpus="l40s", kv_dtypes="q8_0", weight_dtypes="f16", engine="llamacpp"),
        46_982_242_304,
        43_475_219_251,
        "1 x l40s (tp 1, pp 1, dp 1; KV q8_0, weights fp16): needs 43.8 GiB per GPU, budget 40.5 GiB; "
        "fix: more GPUs: 2 x l40s (tp 1, pp 2, dp 1), or q8_0 weights on the same 1 GPU, or a context "
        "of at most 28,893 tokens, or at most 11 concurrent sequences",
        id="llamacpp-q8_0-weights-when-the-kv-is-q8_0",
    ),
    # llama.cpp splits layers over the devices of one machine: "more GPUs" looks at 2..8 only.
    # 100 x 32k in f16: 16,060,522,496 + 100 x 4,294,967,296 + 1,259,601,920 = 446,816,854,016 B =
    # 416.13 GiB. Eight l40s hold 8 x 43,475,219,251 = 347.8 GB < the 429.5 GB of KV alone, so no
    # count fixes it (16 would, but that is two machines); q8_0 KV (228.2 GB) or weights do not
    # fit one either. context: 26,155,094,835 // (100 x 131,072) = 1,995; sequences: 6
    pytest.param(
        "llama-3.1-8b",
        dict(max_gpus=1, concurrency=100, gpus="l40s", kv_dtypes="f16", weight_dtypes="f16", engine="llamacpp"),
        446_816_854_016,
        43_475_219_251,
        "1 x l40s (tp 1, pp 1, dp 1; KV fp16, weights fp16): needs 416.1 GiB per GPU, budget 40.5 GiB; "
        "fix: a context of at most 1,995 tokens, or at most 6 concurrent sequences",
        id="llamacpp-more-gpus-stay-in-one-machine",
    ),
    # 4 x 113,771 tokens in bf16: vLLM's KV 4 x cdiv(113,771, 16) = 4 x 7,111 blocks x 2,097,152 B
    # = 59,651,391,488 B, more than the 59,648,604,569 B free (both sides print as 71.7 GiB): needs
    # 16,060,522,496 + 59,651,391,488 + 1,259,601,920 = 76,971,515,904 B. The exact formula would
    # fit 113,770 tokens (4 x 113,770 x 131,072 = 59,648,245,760 B); in vLLM's blocks the longest
    # is 28,442 // 4 = 7,110 blocks = 113,760 tokens; sequences: 28,442 // 7,111 = 3
    pytest.param(
        "llama-3.1-8b",
        dict(max_gpus=1, seq_len=113_771, concurrency=4, gpus="h100-sxm", kv_dtypes="bf16", weight_dtypes="bf16"),
        76_971_515_904,
        76_968_728_985,
        "1 x h100-sxm (tp 1, pp 1, dp 1; KV bf16, weights bf16): needs 71.7 GiB per GPU, budget "
        "71.7 GiB; fix: more GPUs: 2 x h100-sxm (tp 2, pp 1, dp 1), or fp8 KV on the same 1 GPU, "
        "or a context of at most 113,760 tokens, or at most 3 concurrent sequences",
        id="a-context-one-block-shorter-and-one-sequence-fewer",
    ),
    # 2 x 128k on an l40s: 16,060,522,496 + 2 x 17,179,869,184 + 1,259,601,920 = 51,679,862,784 B =
    # 48.13 GiB; free 26,155,094,835 B holds one 128k sequence (17,179,869,184 B), not two;
    # context: 26,155,094,835 // 2,097,152 = 12,471 blocks // 2 = 6,235 blocks = 99,760 tokens
    # (formula: 99,773); fp8 KV: 2 x 8,589,934,592 B fits
    pytest.param(
        "llama-3.1-8b",
        dict(max_gpus=1, seq_len="128k", concurrency=2, gpus="l40s", kv_dtypes="bf16", weight_dtypes="bf16"),
        51_679_862_784,
        43_475_219_251,
        "1 x l40s (tp 1, pp 1, dp 1; KV bf16, weights bf16): needs 48.1 GiB per GPU, budget 40.5 GiB; "
        "fix: more GPUs: 2 x l40s (tp 2, pp 1, dp 1), or fp8 KV on the same 1 GPU, or a context of "
        "at most 99,760 tokens, or at most 1 concurrent sequence",
        id="one-sequence",
    ),
    # Qwen3-32B, q8_0 weights, f16 KV, on l40s + rtx-4090 (layers 42 + 22, see test_plan.py), 12 x
    # 8k. The 4090: weights 12,953,651,200 B + KV 12 x 8192 x 22 layers x 2 x 8 x 128 x 2 B =
    # 8,858,370,048 B + reserves 1,686,503,424 B = 23,498,524,672 B (21.9 GiB) > 23,181,498,777 B
    # (21.6 GiB). q8_0 KV (34 B per 32 values) on the same split: 4,705,964,032 B of KV fits.
    # (Split evenly, 32 + 32, the 4090 would hold 10 more layers and not fit.) A fixed set gets no
    # "more GPUs". Free on the 4090: 23,181,498,777 - 12,953,651,200 - 1,686,503,424 =
    # 8,541,344,153 B: context // (12 x 90,112 B) = 7,898; sequences // (8192 x 90,112 B) = 11
    pytest.param(
        "qwen3-32b",
        dict(
            seq_len="8k", concurrency=12, gpus="l40s+rtx-4090", engine="llamacpp", kv_dtypes="f16", weight_dtypes="q8_0"
        ),
        23_498_524_672,
        23_181_498_777,
        "2 x l40s+rtx-4090 (tp 1, pp 2, dp 1; KV fp16, weights q8_0): needs 21.9 GiB per GPU, budget "
        "21.6 GiB; fix: q8_0 KV on the same 2 GPUs, or a context of at most 7,898 tokens, or at most "
        "11 concurrent sequences",
        id="llamacpp-q8_0-kv-keeps-the-layer-split",
    ),
]


@pytest.mark.parametrize("model, kw, needs_bytes, budget_bytes, line", MISSES)
def test_why_not_line(model, kw, needs_bytes, budget_bytes, line):
    # one GPU type at most one GPU (or a fixed set): the one layout misses, and its line lists the fixes
    r = kvcalc.plan(model, **{"seq_len": "32k", **kw})
    assert r.layouts == [] and r.n_qualifying == 0
    (m,) = r.misses
    assert m.line == line and m.line.endswith("; fix: " + ", or ".join(m.fixes))
    assert m.score == pytest.approx(needs_bytes / budget_bytes, rel=1e-12)


def test_more_gpus_starts_just_past_max_gpus():
    # with --max-gpus 2, "more GPUs" looks from 3 up: 20 x 32k bf16 fits 3 GPUs (tp 1 x pp 3:
    # 96.1 GiB over three stages) before 4; with --max-gpus 1 it found 2 (test_fp8_kv_is_the_fix)
    r = kvcalc.plan(
        "llama-3.1-8b",
        seq_len="32k",
        concurrency=60,
        max_gpus=2,
        gpus="h100-sxm",
        kv_dtypes="bf16",
        weight_dtypes="bf16",
    )
    m = r.misses[0]
    assert m.count == 2
    more = [f for f in m.fixes if f.startswith("more GPUs")]
    assert more == ["more GPUs: 4 x h100-sxm (tp 4, pp 1, dp 1)"]
    # 60 x 4,294,967,296 = 257,698,037,760 B of KV: over 3 GPUs (tp 1, pp 3) each holds 1/3 of
    # it, 85.9 GB + weights > 77 GB; 4 at tp 4 holds 64.4 GB + 4.0 GB weights + reserves: fits
