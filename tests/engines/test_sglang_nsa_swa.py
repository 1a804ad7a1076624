"""SGLang's NSA pool (DeepSeek-V3.2) and SWA pool (gpt-oss), `kvcalc/engines/sglang.py`.

Sources: python/sglang/srt/mem_cache/memory_pool.py `NSATokenToKVPool` (latent rows of
`calculate_mla_kv_cache_dim()`, indexer buffer of (size + page + 1) // page pages x page x 132 B
a layer), `MLATokenToKVPool`; model_executor/model_runner_kv_cache_mixin.py
`get_cell_size_per_token` (cell = layers x ((kv_lora_rank + qk_rope_head_dim) x element bytes +
132 B indexer), `_resolve_hybrid_swa_tokens` (legacy) and 0.5.23 `model_executor/pool_configurator.py`
`HybridSWAPoolConfigurator` (current); mem_cache/swa_memory_pool.py `SWAKVPool`.
The DeepSeek-V3.2 figures are SGLang's own logs in PR sgl-project/sglang#11309 (8 x B200,
DeepSeek-V3.2-Exp, fp8 KV): before the fix "#tokens: 1462784, KV size: 54.52 GB" (65.49 GiB
really, with the indexer), after it "#tokens: 975424, KV size: 43.67 GB". GiB = 2^30 B; SGLang
labels GiB "GB".
"""

from __future__ import annotations

import json

import pytest

from kvcalc.engines import sglang
from kvcalc.engines.profile import SglangOptions, get_profile
from kvcalc.errors import KvcalcError
from kvcalc.formats import kv_format
from kvcalc.load.hf import model_from_hf_config
from kvcalc.load.models import load_model
from tests.published_configs import DEEPSEEK_V32 as V32

BF16, FP8, FP16, E5M2 = kv_format("bf16"), kv_format("fp8"), kv_format("fp16"), kv_format("fp8_e5m2")
GiB = 2**30


def v32():
    return model_from_hf_config(V32, "DeepSeek-V3.2-Exp/config.json")


def gpt_oss():
    return load_model("gpt-oss-20b")


# ----- NSA: DeepSeek-V3.2 -----------------------------------------------------------------


def test_nsa_rows_and_cells():
    m = v32()
    # fp8 row with a scaled-layout backend (calculate_mla_kv_cache_dim; Hopper's flashmla_kv):
    # 512 fp8 + 512 / 128 x 4 B scales + 64 x 2 B bf16 rope = 656 B
    assert sglang.nsa_row_bytes(m, FP8) == 656
    assert sglang.nsa_row_bytes(m, FP8, ("flashmla_kv", "flashmla_kv")) == 656
    # trtllm as either backend (Blackwell's default), AMD's triton, tilelang for both: raw 512 + 64 = 576 B
    assert sglang.nsa_row_bytes(m, FP8, ("trtllm", "trtllm")) == 576
    assert sglang.nsa_row_bytes(m, FP8, ("flashmla_sparse", "trtllm")) == 576
    assert sglang.nsa_row_bytes(m, FP8, ("triton", "triton"), "amd") == 576
    assert sglang.nsa_row_bytes(m, FP8, ("tilelang", "tilelang")) == 576
    assert sglang.nsa_row_bytes(m, FP8, ("tilelang", "flashmla_kv")) == 656
    # bf16: (512 + 64) x 2 B = 1,152 B whatever the backend
    assert sglang.nsa_row_bytes(m, BF16) == sglang.nsa_row_bytes(m, BF16, ("trtllm", "trtllm")) == 1152
    # plain DeepSeek-V3 (no indexer) is an MLATokenToKVPool: 61 x 576 x 1 B = 35,136 B with fp8
    v3 = load_model("deepseek-v3")
    assert not sglang.is_nsa(v3) and sglang.cell_size_bytes(v3, FP8, FP8) == 35_136
    # current (0.5.17+, PR #31992): 61 x (656 + 132) = 61 x 788 = 48,068 B on Hopper (flashmla_kv),
    # 61 x (576 + 132) = 61 x 708 = 43,188 B with trtllm's 576 B row
    assert sglang.cell_size_bytes(m, FP8, FP8) == 48_068
    assert sglang.cell_size_bytes(m, FP8, FP8, row=576) == 43_188
    # 0.5.16: 61 x (576 + 132) = 43,188 B whatever the row; legacy: 61 x 576 = 35,136 B
    assert sglang.cell_size_bytes(m, FP8, FP8, version="0.5.16") == 43_188
    assert sglang.cell_size_bytes(m, FP8, FP8, version="0.5.16", row=656) == 43_188
    assert sglang.cell_size_bytes(m, FP8, FP8, version="legacy") == 35_136
    # bf16: 61 x (1,152 + 132) = 78,324 B under both rules (the row is the latent)
    assert sglang.cell_size_bytes(m, BF16, BF16, tp=8) == 78_324
    assert sglang.cell_size_bytes(m, BF16, BF16, tp=8, version="0.5.16") == 78_324


@pytest.mark.parametrize(
    "cc, vendor, backends",
    [
        # arg_groups/overrides.py _dsa_split_backend_resolution (SGLang 0.5.23)
        ("9.0", None, ("flashmla_kv", "flashmla_kv")),  # Hopper fp8
        ("10.0", None, ("trtllm", "trtllm")),  # Blackwell fp8: "default = trtllm if major >= 10"
        ("10.3", None, ("trtllm", "trtllm")),
        (None, None, ("flashmla_kv", "flashmla_kv")),  # no --gpu: Hopper assumed
        (None, "amd", ("triton", "triton")),
    ],
)
def test_dsa_backends_by_gpu(cc, vendor, backends):
    assert sglang.dsa_backends(v32(), FP8, cc, vendor) == backends


def test_dsa_backends_bf16_and_given():
    # bf16: prefill flashmla_sparse, decode trtllm on >= 10 else fa3
    assert sglang.dsa_backends(v32(), BF16, "9.0") == ("flashmla_sparse", "fa3")
    assert sglang.dsa_backends(v32(), BF16, "10.0") == ("flashmla_sparse", "trtllm")
    # a given --dsa-*-backend stands
    assert sglang.dsa_backends(v32(), FP8, "10.0", prefill="flashmla_kv", decode="flashmla_kv") == (
        "flashmla_kv",
        "flashmla_kv",
    )


H200 = sglang.PoolTarget(compute_capability="9.0")
B200 = sglang.PoolTarget(compute_capability="10.0")
#: issue 19's budget: 975,424 tokens x 61 layers x 788 B = 46,886,680,832 B (one TP8 rank, fp8)
BUDGET_788 = 975_424 * 61 * 788


def test_sparse_mla_budget_divided_by_the_allocated_row_on_hopper():
    # SGLang 0.5.23 on H200 (flashmla_kv): cell 61 x 788 = 48,068 B; 46,886,680,832 // 48,068 = 975,424
    # = 15,241 pages of 64 -- the count SGLang logs.
    assert BUDGET_788 == 46_886_680_832
    r = sglang.capacity(v32(), BUDGET_788, FP8, FP8, tp=8, target=H200)
    assert (r.kv_cache_tokens, r.num_gpu_blocks, r.page_size_bytes) == (975_424, 15_241, 48_068 * 64)
    assert r.engine_version == "SGLang 0.5.23"
    # pool: latent 61 x (975,424 + 64) x 656 = 39,035,127,808 + indexer 15,242 pages x 64 x 132 x 61
    # = 7,854,629,376 -> 46,889,757,184 B = 43.67 GiB
    assert r.engine_kv_bytes == 46_889_757_184
    assert r.log_lines[-1] == "KV Cache is allocated. dtype: torch.float8_e4m3fn, #tokens: 975424, KV size: 43.67 GB"
    assert not any("over the budget" in n for n in r.notes)
    assert (
        "DSA backends prefill=flashmla_kv, decode=flashmla_kv (compute capability 9.0): latent rows of 656 B a layer"
    ) in r.notes
    # the same budget under 0.5.16's cell of 61 x 708 = 43,188 B: 46,886,680,832 // 43,188 = 1,085,641
    # -> 1,085,632 (16,963 pages): the count kvcalc gave before, 110,208 tokens more than SGLang holds
    old = sglang.capacity(v32(), BUDGET_788, FP8, FP8, tp=8, version="0.5.16", target=H200)
    assert (old.kv_cache_tokens, old.num_gpu_blocks) == (1_085_632, 16_963)
    assert any("allocates 656 B rows" in n for n in old.notes)


def test_sparse_mla_budget_on_blackwell_trtllm():
    # SGLang 0.5.23 on B200 (trtllm default): row 576, cell 61 x (576 + 132) = 43,188 B;
    # 46,886,680,832 // 43,188 = 1,085,641 -> 1,085,632 tokens (16,963 pages); the pool
    # 61 x (1,085,632 + 64) x 576 + (1,085,632 + 65) // 64 = 16,964 pages x 64 x 132 x 61
    # = 38,147,014,656 + 8,742,024,192 = 46,889,038,848 B
    r = sglang.capacity(v32(), BUDGET_788, FP8, FP8, tp=8, target=B200)
    assert (r.kv_cache_tokens, r.num_gpu_blocks, r.page_size_bytes) == (1_085_632, 16_963, 43_188 * 64)
    assert r.engine_kv_bytes == 46_889_038_848
    assert (
        "DSA backends prefill=trtllm, decode=trtllm (compute capability 10.0): latent rows of 576 B a layer" in r.notes
    )
    # --dsa-*-backend flashmla_kv on the B200 allocates 656 B rows: the Hopper figure again
    forced = sglang.PoolTarget("10.0", None, "flashmla_kv", "flashmla_kv")
    assert sglang.capacity(v32(), BUDGET_788, FP8, FP8, tp=8, target=forced).kv_cache_tokens == 975_424
    # memory_for: 2 requests of 32,768 tokens = 65,536 tokens x cell
    assert sglang.memory_for(v32(), 32_768, 2, FP8, FP8, target=H200) == 65_536 * 48_068
    assert sglang.memory_for(v32(), 32_768, 2, FP8, FP8, target=B200) == 65_536 * 43_188


def test_sparse_mla_through_the_cli_gpu(cli, tmp_path):
    # --gpu picks the row: h200 (9.0) 975,424 tokens, b200 (10.0) 1,085,632, as above
    p = tmp_path / "v32" / "config.json"
    p.parent.mkdir()
    p.write_text(json.dumps(V32))
    for gpu, tokens in (("h200", 975_424), ("b200", 1_085_632)):
        r = cli(
            "capacity",
            str(p),
            "--kv-memory",
            str(BUDGET_788),
            "--tp",
            "8",
            "--engine",
            "sglang",
            "--kv-dtype",
            "fp8",
            "--gpu",
            gpu,
            "-f",
            "json",
        )
        assert r.exit_code == 0, r.output
        assert json.loads(r.output)["kv_cache_tokens"] == tokens


def test_nsa_before_pr_11309_reproduces_its_log():
    # Legacy rule: cell 35,136 B. The budget of exactly 1,462,784 cells: 1,462,784 x 35,136 =
    # 51,396,378,624 B -> 1,462,784 tokens (= 22,856 pages of 64).
    # Logged KV size: latent only, 61 x (1,462,784 + 64) x 656 = 58,537,325,568 B = 54.517 GiB ("54.52 GB").
    # Indexer: (1,462,784 + 64 + 1) // 64 = 22,857 pages x 64 x 132 B x 61 = 11,778,852,096 B;
    # the pool really takes 70,316,177,664 B = 65.487 GiB (the PR: "actually 65.49 GB").
    budget = 1_462_784 * 35_136
    r = sglang.capacity(v32(), budget, FP8, FP8, tp=8, version="legacy")
    assert (r.kv_cache_tokens, r.num_gpu_blocks, r.block_size) == (1_462_784, 22_856, 64)
    assert r.engine_version == "SGLang 0.5.x before PR #11309"
    assert r.engine_kv_bytes == r.k_bytes == 70_316_177_664 and r.v_bytes == 0
    assert r.log_lines == [
        "Setting page size to 64 for DeepSeek NSA.",
        "KV Cache is allocated. #tokens: 1462784, KV size: 54.52 GB",
    ]
    assert (
        "SGLang before PR #11309 sized tokens and logged the KV size without the indexer key cache: "
        "the pool really takes 70,316,177,664 B (65.49 GiB)"
    ) in r.notes
    # pool over budget: 70,316,177,664 - 51,396,378,624 = 18,919,799,040 B
    assert any("656 B rows" in n and "18,919,799,040 B over the budget" in n for n in r.notes)


def test_nsa_after_pr_11309_reproduces_its_log():
    # 0.5.16 rule: cell 43,188 B. Budget 975,424 x 43,188 = 42,126,611,712 B -> 975,424 tokens (15,241 pages).
    # KV size = latent 61 x (975,424 + 64) x 656 = 39,035,127,808 B
    #   + indexer (975,424 + 64 + 1) // 64 = 15,242 pages x 64 x 132 x 61 = 7,854,629,376 B
    #   = 46,889,757,184 B = 43.6695 GiB ("43.67 GB").
    budget = 975_424 * 43_188
    r = sglang.capacity(v32(), budget, FP8, FP8, tp=8, version="0.5.16")
    assert (r.kv_cache_tokens, r.num_gpu_blocks, r.page_size_bytes) == (975_424, 15_241, 43_188 * 64)
    assert r.engine_kv_bytes == 46_889_757_184
    assert r.log_lines == [
        "Setting page size to 64 for DeepSeek NSA.",
        "KV Cache is allocated. #tokens: 975424, KV size: 43.67 GB",
    ]
    # the fp8 row is 656 B, the cell counts 576: 46,889,757,184 - 42,126,611,712 = 4,763,145,472 B over
    assert any(
        "sizes the fp8 latent as 576 B a layer but allocates 656 B rows" in n and "4,763,145,472 B over the budget" in n
        for n in r.notes
    )
    # rounding down to the page: one byte short of 975,488 cells is 975,487 tokens -> 975,424
    assert sglang.capacity(v32(), (975_424 + 64) * 43_188 - 1, FP8, FP8, version="0.5.16").kv_cache_tokens == 975_424
    # the same budgets under the other rule: 42,126,611,712 // 35,136 = 1,198,958 -> 1,198,912 (legacy);
    # 51,396,378,624 // 43,188 = 1,190,054 -> 1,190,016 (0.5.16): the indexer costs 18.6% of the tokens
    assert sglang.capacity(v32(), budget, FP8, FP8, version="legacy").kv_cache_tokens == 1_198_912
    assert sglang.capacity(v32(), 1_462_784 * 35_136, FP8, FP8, version="0.5.16").kv_cache_tokens == 1_190_016


def test_nsa_page_64_whatever_page_size_and_bf16_has_no_row_gap():
    # bf16: cell 78,324 B; 1 GiB // 78,324 = 13,708 -> 13,696 (214 pages of 64), --page-size 16 ignored.
    # pool = 61 x (13,696 + 64) x 1,152 + (13,696 + 65) // 64 = 215 pages x 64 x 132 x 61
    #      = 966,942,720 + 110,795,520 = 1,077,738,240 B ("1.00 GB")
    r = sglang.capacity(v32(), GiB, BF16, BF16, page_size=16, max_model_len=1000, concurrency=3)
    assert (r.kv_cache_tokens, r.block_size, r.engine_kv_bytes) == (13_696, 64, 1_077_738_240)
    assert r.log_lines[-1] == "KV Cache is allocated. dtype: torch.bfloat16, #tokens: 13696, KV size: 1.00 GB"
    assert not any("over the budget" in n for n in r.notes)  # the bf16 row is what SGLang sized
    # a request of 1,000 tokens takes cdiv(1000, 64) x 64 = 1,024: 13,696 / 1,024 = 13.375
    assert r.max_concurrency == pytest.approx(13.375)
    # 3 requests: 3 x pages(t) <= 13,696 -> pages(t) <= 4,565.3 -> 4,544 tokens (71 pages)
    assert r.longest_context == 4_544
    # memory_for: 3 x 1,024 x 78,324 = 240,611,328 B (page 64, not 16)
    assert sglang.memory_for(v32(), 1000, 3, BF16, BF16, page_size=16) == 240_611_328
    assert sglang.memory_for(v32(), 1000, 3, FP8, FP8, version="legacy") == 3 * 1024 * 35_136


@pytest.mark.parametrize("fmt", [FP16, E5M2])
def test_nsa_refuses_other_kv_dtypes(fmt):
    # server_args.py: assert kv_cache_dtype in ["bfloat16", "fp8_e4m3"]
    with pytest.raises(
        KvcalcError, match=f"DeepSeek DSA only supports bf16/bfloat16 or fp8_e4m3 kv_cache_dtype, not {fmt.name}"
    ):
        sglang.capacity(v32(), GiB, fmt, fmt)


def test_nsa_no_page_fits():
    # one page of 64 x 48,068 B = 3,076,352 B (Hopper's 656 B rows); one byte less holds 63 tokens -> 0 pages
    with pytest.raises(KvcalcError, match=r"\(3,076,351 B holds no page of 3,076,352 B\): Not enough memory"):
        sglang.capacity(v32(), 3_076_351, FP8, FP8)


# ----- SWA pool: gpt-oss ------------------------------------------------------------------


def test_gpt_oss_swa_pool_10_gib():
    # gpt-oss-20b: 12 full + 12 sliding (window 128) layers, 8 KV heads x (64 + 64) x 2 B = 2,048 B a layer.
    # SGLang 0.5.23 HybridSWAPoolConfigurator (pool_configurator.py 786-916): cell = 2,048 x 12 + 0.8 x
    # (2,048 x 12) = 44,236.8; full = int(10,737,418,240 // 44,236.8) = int(242,725.93) = 242,725;
    # swa = int(242,725 x 0.8) = 194,180. (page_size_bytes stays the all-layer cell, 24 x 2,048 = 49,152.)
    # SWA pool: 12 x (194,180 + 1) rows x 1,024 B = 2,386,096,128 B for K, the same for V ("2.22 GB");
    # full pool: 12 x (242,725 + 1) x 1,024 = 2,982,617,088 B each ("2.78 GB"); total 10,737,426,432 B (10.00 GiB).
    r = sglang.capacity(gpt_oss(), 10 * GiB, BF16, BF16, max_model_len=131_072, concurrency=2)
    assert (r.kv_cache_tokens, r.num_gpu_blocks, r.page_size_bytes) == (242_725, 242_725, 49_152)
    assert r.k_bytes == r.v_bytes == 2_386_096_128 + 2_982_617_088
    assert r.engine_kv_bytes == 10_737_426_432
    assert r.log_lines == [
        "Use sliding window memory pool. full_layer_tokens=242725, swa_layer_tokens=194180",
        # 0.5.23 memory_pool.py _finalize_allocation_log 2073-2099: the "Full" pool first, then the "SWA" one
        "Full KV Cache is allocated. dtype: torch.bfloat16, #tokens: 242725, K size: 2.78 GB, V size: 2.78 GB",
        "SWA KV Cache is allocated. dtype: torch.bfloat16, #tokens: 194180, K size: 2.22 GB, V size: 2.22 GB",
        "SWAKVPool mem usage: 10.00 GB, swa size: 194180, full size: 242725",
    ]
    # 131,072-token requests: full pool 242,725 / 131,072 = 1.8518; SWA pool 194,180 / 128 is larger
    assert r.max_concurrency == pytest.approx(242_725 / 131_072)
    # 2 requests: 2t <= 242,725 -> t = 121,362
    assert r.longest_context == 121_362
    assert any("194,180 tokens (--swa-full-tokens-ratio 0.8) beside 242,725" in n for n in r.notes)


def test_gpt_oss_swa_pool_tp2_pages_of_16():
    # tp 2: 4 KV heads x 128 x 2 B = 1,024 B a layer; cell = 12,288 + 0.8 x 12,288 = 22,118.4;
    # int(4,294,967,296 // 22,118.4) = int(194,180.74) = 194,180 -> 194,176 (page 16);
    # swa = int(194,176 x 0.8) = int(155,340.8) = 155,340 -> 155,328 (page 16).
    # SWA pool K: 12 x (155,328 + 16) x 512 = 954,433,536 B ("0.89 GB"); full K: 12 x (194,176 + 16) x 512
    # = 1,193,115,648 B ("1.11 GB"); total 2 x (954,433,536 + 1,193,115,648) = 4,295,098,368 B ("4.00 GB")
    r = sglang.capacity(gpt_oss(), 4 * GiB, BF16, BF16, tp=2, page_size=16)
    assert (r.kv_cache_tokens, r.num_gpu_blocks, r.engine_kv_bytes) == (194_176, 12_136, 4_295_098_368)
    assert r.log_lines == [
        "Use sliding window memory pool. full_layer_tokens=194176, swa_layer_tokens=155328",
        "Full KV Cache is allocated. dtype: torch.bfloat16, #tokens: 194176, K size: 1.11 GB, V size: 1.11 GB",
        "SWA KV Cache is allocated. dtype: torch.bfloat16, #tokens: 155328, K size: 0.89 GB, V size: 0.89 GB",
        "SWAKVPool mem usage: 4.00 GB, swa size: 155328, full size: 194176",
    ]


def test_swa_split_float_truncation_then_page_alignment():
    # legacy (_resolve_hybrid_swa_tokens): tp 2, page 16, 5 GiB: capacity 5,368,709,120 // 24,576 = 218,453
    # -> 218,448; total_memory = 218,448 x 24,576 = 5,368,578,048; / 22,118.4 is 242,720 exactly, but
    # SGLang's float gives 242,719.99999999997 -> int 242,719 -> page 16: 242,704; swa = int(242,704 x 0.8)
    # = int(194,163.2) = 194,163 -> page 16: 194,160
    assert sglang.swa_split(gpt_oss(), 218_448, BF16, BF16, tp=2, page_size=16) == (242_704, 194_160)
    r = sglang.capacity(gpt_oss(), 5 * GiB, BF16, BF16, tp=2, page_size=16, version="legacy")
    assert r.log_lines[0] == "Use sliding window memory pool. full_layer_tokens=242704, swa_layer_tokens=194160"
    assert (r.kv_cache_tokens, r.num_gpu_blocks) == (242_704, 15_169)
    # 0.5.23: int(5,368,709,120 // 22,118.4) = int(242,725.93) = 242,725 -> 242,720; swa = int(194,176.0)
    # = 194,176 (a multiple of 16)
    r = sglang.capacity(gpt_oss(), 5 * GiB, BF16, BF16, tp=2, page_size=16)
    assert r.log_lines[0] == "Use sliding window memory pool. full_layer_tokens=242720, swa_layer_tokens=194176"
    assert (r.kv_cache_tokens, r.num_gpu_blocks) == (242_720, 15_170)


def test_a_small_swa_pool_limits_the_requests():
    # ratio 0.001: cell 24,576 + 0.001 x 24,576 = 24,600.576; full = int(10,737,418,240 // 24,600.576)
    # = int(436,470.2) = 436,470; swa = int(436.47) = 436 tokens for the sliding layers.
    # Requests of 1,000 tokens: full pool 436,470 / 1,000 = 436.5, SWA pool 436 / min(1,000, 128) = 3.40625.
    # 4 requests: the SWA pool needs 4 x min(t, 128) <= 436 -> t <= 109 (the full pool alone would allow 109,117)
    r = sglang.capacity(gpt_oss(), 10 * GiB, BF16, BF16, swa_full_tokens_ratio=0.001, max_model_len=1000, concurrency=4)
    assert r.log_lines[0] == "Use sliding window memory pool. full_layer_tokens=436470, swa_layer_tokens=436"
    assert r.max_concurrency == pytest.approx(436 / 128)
    assert r.longest_context == 109


def test_swa_ratio_and_disable_flag():
    # ratio 0.5: cell 24,576 + 0.5 x 24,576 = 36,864.0; full = int(10,737,418,240 // 36,864.0)
    # = int(291,271.1) = 291,271; swa = int(291,271 x 0.5) = int(145,635.5) = 145,635
    r = sglang.capacity(gpt_oss(), 10 * GiB, BF16, BF16, swa_full_tokens_ratio=0.5)
    assert r.log_lines[0] == "Use sliding window memory pool. full_layer_tokens=291271, swa_layer_tokens=145635"
    # --disable-hybrid-swa-memory: one MHATokenToKVPool of 218,453 tokens for all 24 layers
    off = sglang.capacity(gpt_oss(), 10 * GiB, BF16, BF16, hybrid_swa_memory=False)
    assert off.kv_cache_tokens == 218_453 and len(off.log_lines) == 1
    assert "sliding-window layers sized like full ones (--disable-hybrid-swa-memory)" in off.notes
    with pytest.raises(
        KvcalcError, match=r"--swa-full-tokens-ratio must be in \(0, 1\]: above 0 and at most 1 .*, got 0$"
    ):
        sglang.capacity(gpt_oss(), GiB, BF16, BF16, swa_full_tokens_ratio=0)
    with pytest.raises(KvcalcError, match="--sglang-version must be one of current, 0.5.16, legacy, got 'old'"):
        sglang.capacity(gpt_oss(), GiB, BF16, BF16, version="old")


def test_gemma3_has_no_swa_pool_in_sglang():
    # Gemma3 is not in model_config.is_hybrid_swa_model (and server_args disables hybrid SWA memory
    # for Gemma 2/3): 62 layers x 16 x (128 + 128) x 2 B = 507,904 B a token; 10 GiB // 507,904 = 21,140
    r = sglang.capacity(load_model("gemma-3-27b"), 10 * GiB, BF16, BF16)
    assert r.kv_cache_tokens == 21_140 and len(r.log_lines) == 1
    assert not sglang.uses_swa_pool(load_model("gemma-3-27b"))
    assert sglang.uses_swa_pool(load_model("llama-4-scout"))  # Llama4ForConditionalGeneration


def test_swa_memory_for_is_the_least_budget():
    # 2 requests of 1,000 tokens: full pool needs 2,000 tokens, SWA pool 2 x min(1,000, 128) = 256.
    # 0.5.23: int(budget // 44,236.8) >= 2,000. 2,000 x 44,236.8 = 88,473,600 in exact arithmetic, but
    # SGLang's float cell (0.8 x 24,576 = 19,660.800000000003) makes 88,473,600 // it 1,999.0; one byte
    # more gives 2,000 (swa 1,600 >= 256). Budget = 88,473,601 B
    m = gpt_oss()
    b = sglang.memory_for(m, 1000, 2, BF16, BF16)
    assert b == 88_473_601
    assert sglang.capacity(m, b, BF16, BF16).kv_cache_tokens == 2000
    assert sglang.capacity(m, b - 1, BF16, BF16).kv_cache_tokens == 1999
    # without the pool: 2 x 1,000 x 49,152 = 98,304,000 B
    assert sglang.memory_for(m, 1000, 2, BF16, BF16, hybrid_swa_memory=False) == 98_304_000


def test_profile_passes_the_options():
    p = get_profile("sglang")
    o = SglangOptions(version="legacy")
    r = p.capacity(v32(), 1_462_784 * 35_136, FP8, FP8, tp=8, options=o)
    assert r.kv_cache_tokens == 1_462_784
    assert p.memory_for(gpt_oss(), 1000, 2, BF16, BF16, options=SglangOptions(hybrid_swa_memory=False)) == 98_304_000
    with pytest.raises(KvcalcError, match="must be one of current, 0.5.16, legacy, got 'x'") as e:
        p.check_options(SglangOptions(version="x"))
    assert e.value.field == "sglang_version"


def test_cli_flags(cli, tmp_path):
    (tmp_path / "v32").mkdir()
    p = tmp_path / "v32" / "config.json"
    p.write_text(json.dumps(V32))
    budget = str(1_462_784 * 35_136)
    r = cli(
        "capacity",
        str(p),
        "-m",
        budget,
        "--tp",
        "8",
        "--engine",
        "sglang",
        "--kv-dtype",
        "fp8",
        "--sglang-version",
        "legacy",
        "-f",
        "json",
    )
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["kv_cache_tokens"] == 1_462_784 and d["log_lines"][-1].endswith("KV size: 54.52 GB")
    r = cli(
        "capacity", "gpt-oss-20b", "-m", "10GiB", "--engine", "sglang", "--swa-full-tokens-ratio", "0.5", "-f", "json"
    )
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["kv_cache_tokens"] == 291_271
    r = cli("capacity", "gpt-oss-20b", "-m", "10GiB", "--engine", "sglang", "--disable-hybrid-swa-memory", "-f", "json")
    assert json.loads(r.stdout)["kv_cache_tokens"] == 218_453
    r = cli("capacity", "gpt-oss-20b", "-m", "10GiB", "--engine", "sglang", "--sglang-version", "nope")
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1
    assert "--sglang-version" in r.output and "current, 0.5.16, legacy" in r.output
    r = cli("capacity", str(p), "-m", "1GiB", "--engine", "sglang", "--kv-dtype", "fp16")
    assert r.exit_code == 2 and "DeepSeek DSA only supports" in r.output  # 0.5.23 arg_groups/overrides.py 541-544
