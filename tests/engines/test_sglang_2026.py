"""SGLang 0.5.23 on the 2026 models (issue 19 item 2): each pool kvcalc sizes, with its arithmetic,
and one test per refusal. The configs are the bundled YAMLs of the published config.json files
(tests/data/hf-configs-2026/). No SGLang oracle run backs these figures (docs/engine-oracles.md):
they are derived from SGLang 0.5.23's released source (the PyPI wheel):

- `model_executor/pool_configurator.py` `DefaultPoolConfigurator` (219-653: cell size, tokens =
  available // cell // page x page) and `HybridSWAPoolConfigurator` (656-921: cell = F x n_full +
  r x S x n_swa, a float; full = int(available // cell) // page x page; swa = int(full x r) // page
  x page; `validate_swa_pool_size` 198-216);
- `configs/model_config.py` `is_hybrid_swa_model` (2651-2679: Gemma-4 and MiMo-V2 get the
  SWAKVPool; Step-3.7-Flash's Step3p7FlashForCausalLM and MiniMax-M3's MiniMaxM3ForCausalLM have no
  model class in `srt/models/`), `get_num_kv_heads` / `get_swa_num_kv_heads` (1700-1725: max(1, heads // tp));
  `utils/hf_transformers/config.py` `_apply_gemma4_attention_overrides` (115-148: full layers
  head_dim 512 x 2 KV heads, sliding 256 x 8);
- `mem_cache/memory_pool.py` `_finalize_allocation_log` (2073-2099: "<label> KV Cache is allocated.
  dtype: ..., #tokens: ..., K size: X GB, V size: Y GB", GB = 2^30), buffers of size + page_size
  rows; `mem_cache/swa_memory_pool.py` (95-133: the "Full" pool, then the "SWA" pool, then
  "SWAKVPool mem usage: ...").

The budget below is 80 GiB = 85,899,345,920 B per rank; fp8 at TP8 is an H200 (compute
capability 9.0, kvcalc's default GPU).
"""

from __future__ import annotations

import warnings

import pytest

from kvcalc.engines import sglang
from kvcalc.errors import KvcalcError
from kvcalc.formats import kv_format
from kvcalc.load.models import load_model

GiB = 2**30
BUDGET = 80 * GiB  # 85,899,345,920 B
BF16, FP8 = kv_format("bf16"), kv_format("fp8_e4m3")


def model(name: str):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_model(name)


def capacity(name: str, mem: int = BUDGET, fmt=FP8, tp: int = 8, **kw):
    return sglang.capacity(model(name), mem, fmt, fmt, tp=tp, **kw)


# ----- the SWAKVPool families ------------------------------------------------------------------


def test_gemma_4_bf16_tp1_swa_pool_and_log():
    """Gemma-4-26B-A4B, 5 full layers (2 KV heads of 512, K and V both allocated: attention_k_eq_v
    only ties the weights) and 25 sliding ones (8 KV heads of 256), bf16, TP1:
    F = 2 x (512 + 512) x 2 = 4,096 B, S = 8 x (256 + 256) x 2 = 8,192 B;
    cell = 5 x 4,096 + 0.8 x 25 x 8,192 = 20,480 + 163,840 = 184,320.0 B;
    full = int(85,899,345,920 // 184,320.0) = 466,033 (466,033.78); swa = int(466,033 x 0.8) = 372,826.
    Full K = 5 x (466,033 + 1) x 2 x 512 x 2 = 4,772,188,160 B = 4.44 GiB;
    SWA K = 25 x (372,826 + 1) x 8 x 256 x 2 = 38,177,484,800 B = 35.56 GiB; V the same."""
    r = capacity("gemma-4-26b-a4b", fmt=BF16, tp=1)
    assert sglang.swa_cell_0523(model("gemma-4-26b-a4b"), BF16, BF16, 1) == 184_320.0
    assert r.kv_cache_tokens == 466_033
    assert (r.k_bytes, r.v_bytes) == (4_772_188_160 + 38_177_484_800, 4_772_188_160 + 38_177_484_800)
    assert r.log_lines == [
        "Use sliding window memory pool. full_layer_tokens=466033, swa_layer_tokens=372826",
        "Full KV Cache is allocated. dtype: torch.bfloat16, #tokens: 466033, K size: 4.44 GB, V size: 4.44 GB",
        "SWA KV Cache is allocated. dtype: torch.bfloat16, #tokens: 372826, K size: 35.56 GB, V size: 35.56 GB",
        "SWAKVPool mem usage: 80.00 GB, swa size: 372826, full size: 466033",
    ]


@pytest.mark.parametrize(
    "name, cell, full, swa, k_bytes, v_bytes",
    [
        # Gemma-4 fp8 TP8: F = max(1, 2 // 8) = 1 x (512 + 512) x 1 = 1,024; S = 1 x (256 + 256) = 512;
        # cell = 5 x 1,024 + 0.8 x 25 x 512 = 5,120 + 10,240 = 15,360.0; 85,899,345,920 / 15,360 =
        # 5,592,405.33; swa = int(4,473,924.0) = 4,473,924
        (
            "gemma-4-26b-a4b",
            15_360.0,
            5_592_405,
            4_473_924,
            5 * 5_592_406 * 512 + 25 * 4_473_925 * 256,
            5 * 5_592_406 * 512 + 25 * 4_473_925 * 256,
        ),
        # MiMo-V2-Flash fp8 TP8: 9 full layers of max(1, 4 // 8) = 1 head, 39 sliding of 8 // 8 = 1, both
        # K 192 + V 128: F = S = 320 B; cell = 9 x 320 + 0.8 x 39 x 320 = 2,880 + 9,984 = 12,864.0;
        # 85,899,345,920 / 12,864 = 6,677,498.9; swa = int(5,341,998.4) = 5,341,998
        (
            "mimo-v2-flash",
            12_864.0,
            6_677_498,
            5_341_998,
            9 * 6_677_499 * 192 + 39 * 5_341_999 * 192,
            9 * 6_677_499 * 128 + 39 * 5_341_999 * 128,
        ),
    ],
)
def test_swa_pool_fp8_tp8(name, cell, full, swa, k_bytes, v_bytes):
    assert sglang.swa_cell_0523(model(name), FP8, FP8, 8) == pytest.approx(cell, rel=1e-15)
    r = capacity(name)
    assert r.kv_cache_tokens == full
    assert r.log_lines[0] == f"Use sliding window memory pool. full_layer_tokens={full}, swa_layer_tokens={swa}"
    assert r.log_lines[-1].endswith(f"swa size: {swa}, full size: {full}")
    assert (r.k_bytes, r.v_bytes) == (k_bytes, v_bytes)


def test_swa_ratio_and_page():
    """MiMo-V2-Flash bf16 TP1 (F = 4 x (192 + 128) x 2 = 2,560, S = 8 x 320 x 2 = 5,120),
    --swa-full-tokens-ratio 0.5, --page-size 64, 10 GiB:
    cell = 9 x 2,560 + 0.5 x 39 x 5,120 = 23,040 + 99,840 = 122,880.0;
    10,737,418,240 // 122,880 = 87,381 -> 87,360 (1,365 pages of 64); swa = int(43,680.0) = 43,680
    -> 43,648 (682 pages)."""
    r = capacity("mimo-v2-flash", 10 * GiB, BF16, tp=1, swa_full_tokens_ratio=0.5, page_size=64)
    assert r.kv_cache_tokens == 87_360
    assert r.log_lines[0] == "Use sliding window memory pool. full_layer_tokens=87360, swa_layer_tokens=43648"


def test_swa_memory_for_is_the_least_budget():
    """Gemma-4 bf16 TP1, one request of 32,768 tokens: the full pool binds (the SWA pool needs
    min(32,768, 1,024) = 1,024): 32,768 x 184,320 = 6,039,797,760 B; one byte less holds 32,767."""
    m = model("gemma-4-26b-a4b")
    assert sglang.memory_for(m, 32_768, 1, BF16, BF16, tp=1) == 6_039_797_760


def test_swa_pool_too_small_for_one_request():
    """validate_swa_pool_size: Gemma-4 bf16 TP1 with 184,320,000 B: 1,000 full tokens, swa = 800
    <= sliding_window_size 1,023 + page 1 (SGLang's exclusive window: `models/gemma4_mm.py`
    `get_attention_sliding_window_size` = sliding_window - 1): SGLang raises at start-up."""
    with pytest.raises(
        KvcalcError,
        match=r"SWA pool \(800 tokens\) cannot hold even one request: the prefill "
        r"admission floor is sliding_window_size \(1023\) \+ page_size \(1\)",
    ):
        capacity("gemma-4-26b-a4b", 184_320_000, BF16, tp=1)


def test_swa_pool_admission_floor_boundary():
    """The floor is sliding_window_size + page = 1,023 + 1 = 1,024 (SGLang 0.5.23's own code on
    a CPU gives the same, tests/oracle/sglang_pool_harness.py): 1,281 x 184,320 = 236,113,920 B
    gives 1,281 full tokens and int(1,024.8) = 1,024 SWA tokens (refused: 1,024 >= 1,024);
    1,282 x 184,320 = 236,298,240 B gives int(1,025.6) = 1,025 (served)."""
    with pytest.raises(KvcalcError, match=r"SWA pool \(1024 tokens\) cannot hold even one request"):
        capacity("gemma-4-26b-a4b", 236_113_920, BF16, tp=1)
    assert capacity("gemma-4-26b-a4b", 236_298_240, BF16, tp=1).kv_cache_tokens == 1_282


@pytest.mark.parametrize("name, gpu", [("fp4_mx_block16", "10.0"), ("nvfp4", "10.0"), ("nvfp4", "12.0")])
def test_swa_pool_fp4_is_priced_at_one_byte_a_value(name, gpu):
    """SGLang 0.5.23 `pool_configurator.py` `HybridSWAPoolConfigurator.__init__` 663-725: kv_size =
    torch._utils._element_size(float4_e2m1fn_x2) = 1 B times the values a token holds, no scale
    term (mxfp8 only); `_build_hybrid_swa_kv_pool` passes no fp4 quant method, so the pools are
    plain 1 B elements too (no SM120 dequant workspace). Gemma-4-26B-A4B (tests/data/
    hf-configs-2026/google--gemma-4-26B-A4B.json) TP1: full layer 2 x (512 + 512) x 1 = 2,048 B,
    sliding 8 x (256 + 256) x 1 = 4,096 B; 5 full, 25 sliding; cell = 5 x 2,048 + 0.8 x (25 x
    4,096) = 92,160.0; 20 GiB = 21,474,836,480 // 92,160.0 = 233,016 full tokens, int(233,016 x
    0.8) = 186,412 SWA tokens (SGLang's own code on a CPU gives these,
    tests/oracle/fixtures/sglang_0523_pools.json). Pools: 5 x 2,048 x 233,017 + 25 x 4,096 x
    186,413 = 2,386,094,080 + 19,088,691,200 = 21,474,785,280 B."""
    r = capacity(
        "gemma-4-26b-a4b", 21_474_836_480, kv_format(name), tp=1, target=sglang.PoolTarget(compute_capability=gpu)
    )
    assert (r.kv_cache_tokens, r.k_bytes + r.v_bytes) == (233_016, 21_474_785_280)
    assert "Use sliding window memory pool. full_layer_tokens=233016, swa_layer_tokens=186412" in r.log_lines
    assert any("1 B a value with no scales" in note for note in r.notes)


def test_disable_hybrid_swa_memory_refuses_the_two_geometries():
    """Without the SWA pool SGLang sizes every layer with one geometry (`get_num_kv_heads` x
    head_dim): Gemma-4's two are not that, so kvcalc refuses rather than guess."""
    with pytest.raises(KvcalcError, match="differ between the full and sliding layers"):
        capacity("gemma-4-26b-a4b", hybrid_swa_memory=False)


# ----- the families sized by the plain pools ------------------------------------------------------


@pytest.mark.parametrize(
    "name, cell, tokens",
    [
        # DeepSeek-V3.2, fp8 on Hopper (flashmla_kv): 61 x (656 + 132) = 48,068; page 64:
        # 85,899,345,920 // 48,068 = 1,787,038 -> 1,787,008
        ("deepseek-v3.2", 48_068, 1_787_008),
        # Kimi-K2.5 (MLA): 61 x (512 + 64) x 1 = 35,136; 85,899,345,920 // 35,136 = 2,444,767
        ("kimi-k2.5", 35_136, 2_444_767),
        # MiniMax-M2.7: 62 layers x max(1, 8 // 8) x (128 + 128) x 1 = 15,872 -> 5,412,005
        ("minimax-m2.7", 15_872, 5_412_005),
        # Qwen3-VL-8B: 36 layers x 1 x (128 + 128) x 1 = 9,216 -> 9,320,675
        ("qwen3-vl-8b", 9_216, 9_320_675),
    ],
)
def test_plain_pools_fp8_tp8(name, cell, tokens):
    r = capacity(name)
    assert r.page_size_bytes // r.block_size == cell
    assert r.kv_cache_tokens == tokens


@pytest.mark.parametrize(
    "cc, row, tokens",
    [
        # Hopper (no --gpu), fp8: flashmla_kv's 656 B rows: cell = 78 x 656 + 21 x 132 = 51,168 + 2,772 =
        # 53,940; 85,899,345,920 // 53,940 = 1,592,498 -> 1,592,448 (page 64)
        (None, 656, 1_592_448),
        # Blackwell (10.0), fp8: trtllm's raw 576 B rows: 78 x 576 + 2,772 = 47,700; 1,800,824 -> 1,800,768
        ("10.0", 576, 1_800_768),
    ],
)
def test_glm_5_dsa_pool_with_shared_topk_layers(cc, row, tokens):
    """GLM-5.2 (GlmMoeDsaForCausalLM, 78 MLA layers): the DSA pool, page 64, a latent row on every
    layer and the 132 B index key (128 fp8 + 128 / 128 x 4 B scale) only on the 21 layers whose
    `indexer_types` is "full" (0, 1, 2, 6, 10, ..., 74); the 57 "shared" layers reuse the top-k and
    get 0-page index buffers (`dsa_layer_skips_topk`, `_compute_dsa_indexer_cell_size`
    pool_configurator.py 560-634, `index_key_cache.py` `_layer_num_pages`). Allocated: 78 x (N +
    64) x row + 21 x ((N + 64 + 1) // 64) x 64 x 132."""
    r = capacity("glm-5.2", target=sglang.PoolTarget(compute_capability=cc))
    assert r.block_size == 64
    assert r.page_size_bytes // 64 == 78 * row + 21 * 132
    assert r.kv_cache_tokens == tokens
    pages = (tokens + 64 + 1) // 64
    assert r.k_bytes == 78 * (tokens + 64) * row + 21 * pages * 64 * 132


def test_glm_5_before_0_5_17_refused():
    """The older rows keep kvcalc's refusal of an indexer on some layers only."""
    with pytest.raises(KvcalcError, match="an indexer on some attention layers only"):
        capacity("glm-5.2", version="0.5.16")


# ----- refusals --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, reason",
    [
        (
            "minimax-m3",
            "SGLang 0.5.23 registers no MiniMaxM3ForCausalLM (models/minimax_m3.py serves MiniMaxM3SparseForCausalLM",
        ),
        (
            "step-3.7-flash",
            "SGLang 0.5.23 registers no Step3p7FlashForCausalLM (models/step3p7.py serves "
            "Step3p7ForConditionalGeneration",
        ),
    ],
)
def test_refused_pools(name, reason):
    with pytest.raises(KvcalcError) as info:
        capacity(name)
    assert reason in str(info.value)
    assert str(info.value).startswith(name)
    assert (info.value.field, info.value.value) == ("model", name)


def test_older_release_rows_do_not_split_gemma_4():
    """0.5.16 and before: kvcalc keeps the older SWA-pool list (gpt-oss, Llama-4), so Gemma-4's two
    geometries are refused under those rows."""
    with pytest.raises(KvcalcError, match="the SGLang profile does not model this yet"):
        capacity("gemma-4-26b-a4b", version="0.5.16")


def test_gpt_oss_swa_pool_0_5_16_lines():
    """0.5.16 splits as 0.5.23 (its `pool_configurator.py` 301-420: cell = 2,048 x 12 + 0.8 x 2,048 x 12
    = 44,236.8; int(10,737,418,240 // 44,236.8) = 242,725; swa = int(194,180.0) = 194,180) but logs
    unlabelled lines (`memory_pool.py` 1606-1624) and builds the SWA pool first (`swa_memory_pool.py`
    60-86)."""
    r = sglang.capacity(model("gpt-oss-20b"), 10 * GiB, BF16, BF16, version="0.5.16")
    assert r.log_lines == [
        "Use sliding window memory pool. full_layer_tokens=242725, swa_layer_tokens=194180",
        "KV Cache is allocated. dtype: torch.bfloat16, #tokens: 194180, K size: 2.22 GB, V size: 2.22 GB",
        "KV Cache is allocated. dtype: torch.bfloat16, #tokens: 242725, K size: 2.78 GB, V size: 2.78 GB",
        "SWAKVPool mem usage: 10.00 GB, swa size: 194180, full size: 242725",
    ]


def test_dsa_pool_0_5_23_log_lines():
    """DeepSeek-V3.2 fp8 TP8, 80 GiB, Hopper: 1,787,008 tokens (above). 0.5.23 logs "Setting page size to
    64 for DeepSeek DSA." (`arg_groups/model_overrides/deepseek_v2.py` 170-173) and the DSA pool's
    `_finalize_allocation_log` (`memory_pool.py` 2073-2099) with the dtype and one "KV size": the latent
    61 x (1,787,008 + 64) x 656 = 71,511,473,152 B plus the index keys 61 x 27,923 pages x 64 x 132 =
    14,389,503,744 B (27,923 = (1,787,008 + 64 + 1) // 64) = 85,900,976,896 B = 80.00 GiB."""
    r = capacity("deepseek-v3.2")
    assert r.k_bytes == 71_511_473_152 + 14_389_503_744
    assert r.log_lines == [
        "Setting page size to 64 for DeepSeek DSA.",
        "KV Cache is allocated. dtype: torch.float8_e4m3fn, #tokens: 1787008, KV size: 80.00 GB",
    ]
