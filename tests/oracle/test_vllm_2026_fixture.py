"""The 2026 configs under vLLM 0.33, from vLLM's own sizing code (issue 19, item 4), without vLLM.

`tests/oracle/fixtures/vllm-0.33-2026.json` holds what vLLM 0.33.0 computed for each case
(`tests/oracle/vllm_2026.py --write`, docs/engine-oracles.md). Two kinds of test:

- the fixture is what vLLM's rules give, checked by hand on a few rows (page sizes, block counts,
  the Gemma-4 figure of issue 19), so a fixture regenerated wrong does not pass silently;
- kvcalc's vLLM profile against every case (`vllm_2026_fixture.compare`), xfail(strict=False)
  for the families in `KVCALC_PENDING` until kvcalc models them.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import vllm_2026_fixture as fx  # noqa: E402

pytestmark = pytest.mark.skipif(not fx.FIXTURE.exists(), reason=f"{fx.FIXTURE} is absent")

GIB = 2**30


def _case(family: str, kv: str, length: int, tp: int, mem: int) -> dict:
    key = (kv, length, tp, mem)
    (case,) = [
        c
        for c in fx.cases(family)
        if (
            c["inputs"]["kv_cache_dtype"],
            c["inputs"]["max_model_len"],
            c["inputs"]["tp"],
            c["inputs"]["kv_memory_bytes"],
        )
        == key
    ]
    return case


def _rows(family: str, kv: str = "auto") -> list[tuple]:
    case = _case(family, kv, 32768, 1, 16 * GIB)
    return sorted(
        (r["cache"], r["spec"], r["layers"], r["block_size"], r["page_size_bytes"]) for r in case["layer_specs"]
    )


# Per-layer pages (tp1), by hand from the configs (tests/data/hf-configs-2026/) and vLLM 0.33's
# rules (docs/engine-rules-2026.md): page = block x heads x (K + V) x bytes, MLA one latent,
# aligned pages rounded up.
FULL, SWA, MLA, SWA_MLA = "FullAttentionSpec", "SlidingWindowSpec", "MLAAttentionSpec", "SlidingWindowMLASpec"
PAGES = [
    # Gemma-4-26B-A4B: 25 sliding 16 x 8 x (256 + 256) x 2 = 131,072;
    # 5 global (K = V stored twice) 16 x 2 x (512 + 512) x 2 = 65,536
    ("gemma-4-26b-a4b", "auto", [("attn", FULL, 5, 16, 65_536), ("attn", SWA, 25, 16, 131_072)]),
    # MiMo-V2-Flash: 9 global 16 x 4 x (192 + 128) x 2 = 40,960; 39 sliding 16 x 8 x 320 x 2 = 81,920
    ("mimo-v2-flash", "auto", [("attn", FULL, 9, 16, 40_960), ("attn", SWA, 39, 16, 81_920)]),
    ("mimo-v2-flash", "fp8", [("attn", FULL, 9, 16, 20_480), ("attn", SWA, 39, 16, 40_960)]),
    # DeepSeek-V3.2: 61 latents 64 x 576 x 2 = 73,728 (bf16) / 64 x 656 (fp8 -> fp8_ds_mla) = 41,984;
    # 61 index keys 64 x 132 = 8,448
    ("deepseek-v3.2", "auto", [("attn", MLA, 61, 64, 73_728), ("k_cache", MLA, 61, 64, 8_448)]),
    ("deepseek-v3.2", "fp8", [("attn", MLA, 61, 64, 41_984), ("k_cache", MLA, 61, 64, 8_448)]),
    # GLM-5.2: 78 latents, 21 indexers (layers 0, 1, 2, 6, 10, ..., 74: index_topk_freq 4, offset 3)
    ("glm-5.2", "fp8", [("attn", MLA, 78, 64, 41_984), ("k_cache", MLA, 21, 64, 8_448)]),
    # Kimi-K2.5: dense MLA, bf16 on FLASH_ATTN_MLA 16 x 1,152 = 18,432; fp8 on FlashMLA 64 x 576 = 36,864
    ("kimi-k2.5", "auto", [("attn", MLA, 61, 16, 18_432)]),
    ("kimi-k2.5", "fp8", [("attn", MLA, 61, 64, 36_864)]),
    # MiniMax-M3: 60 x 128 x 4 x 256 x 1 (fp8) = 131,072; 57 index keys 128 x 128 x 2 (bf16 whatever
    # the KV dtype) = 32,768
    ("minimax-m3", "fp8", [("attn", FULL, 60, 128, 131_072), ("index_cache", MLA, 57, 128, 32_768)]),
    # DeepSeek-V4-Flash, fp8_ds_mla (584 B an entry, pages rounded up to 576 B): SWA 64 x 584 =
    # 37,376 -> 37,440; CSA latent 256 / 4 = 64 entries -> 37,440; HCA 256 / 128 = 2 entries =
    # 1,168 -> 1,728; index keys 64 x 132 = 8,448 -> 8,640; compressor states 4 x 2,048 x 4 B and
    # 8 x 1,024 x 4 B = 32,768 -> 32,832; 4 x 512 x 4 = 8,192 -> 8,640
    (
        "deepseek-v4-flash",
        "auto",
        [
            ("attn", MLA, 20, 256, 1_728),
            ("attn", MLA, 21, 256, 37_440),
            ("k_cache", MLA, 21, 256, 8_640),
            ("state_cache", SWA_MLA, 20, 8, 32_832),
            ("state_cache", SWA_MLA, 21, 4, 8_640),
            ("state_cache", SWA_MLA, 21, 4, 32_832),
            ("swa_cache", SWA_MLA, 43, 64, 37_440),
        ],
    ),
]


@pytest.mark.parametrize(("family", "kv", "rows"), PAGES, ids=[f"{f}-{kv}" for f, kv, _ in PAGES])
def test_fixture_pages_are_vllms_rules(family, kv, rows):
    assert _rows(family, kv) == sorted(rows)


def test_fixture_gemma4_ideal_figure():
    """Issue 19's Gemma-4-26B-A4B figure from the fixture's vLLM specs: bf16, 32,768 tokens,
    25 sliding layers keeping 1,024 tokens of 8,192 B and 5 global layers of 4,096 B:
    25 x 1,024 x 8,192 + 5 x 32,768 x 4,096 = 880,803,840 B."""
    rows = _case("gemma-4-26b-a4b", "auto", 32768, 1, 16 * GIB)["layer_specs"]
    total = sum(r["layers"] * min(r["sliding_window"] or 32768, 32768) * fx.bytes_per_token(r) for r in rows)
    assert total == 880_803_840


# Block counts by hand (vLLM 0.33 `get_kv_cache_configs`: budget // bytes a block takes over all layers;
# GPU KV cache size = blocks x block size for one full-attention group; concurrency = blocks / cdiv(len, block)).
BLOCKS = [
    # DeepSeek-V3.2 bf16, 16 GiB: 17,179,869,184 // (61 x 73,728 + 61 x 8,448 = 5,012,736) = 3,427 blocks x 64 =
    # 219,328 tokens; 3,427 / cdiv(32,768, 64) = 3,427 / 512
    ("deepseek-v3.2", "auto", 16 * GIB, 3_427, 219_328, 3_427 / 512),
    # Qwen3-VL-8B bf16, 16 GiB: 17,179,869,184 // (36 x 65,536 = 2,359,296) = 7,281 blocks x 16 = 116,496; 7,281 / 2,048
    ("qwen3-vl-8b", "auto", 16 * GIB, 7_281, 116_496, 7_281 / 2_048),
    # MiniMax-M2.7 fp8, 16 GiB: 17,179,869,184 // (62 x 32,768 = 2,031,616) = 8,456 blocks x 16 = 135,296; 8,456 / 2,048
    ("minimax-m2.7", "fp8", 16 * GIB, 8_456, 135_296, 8_456 / 2_048),
]


@pytest.mark.parametrize(("family", "kv", "mem", "blocks", "tokens", "conc"), BLOCKS, ids=[b[0] for b in BLOCKS])
def test_fixture_blocks_are_vllms_rules(family, kv, mem, blocks, tokens, conc):
    case = _case(family, kv, 32768, 1, mem)
    assert (case["num_blocks"], case["gpu_kv_cache_tokens"], case["max_concurrency"]) == (blocks, tokens, conc)


@pytest.mark.parametrize("family", ["deepseek-v4-flash", "deepseek-v4-flash-nvfp4"])
@pytest.mark.parametrize("kv", ["bfloat16", "nvfp4_ds_mla"])
def test_fixture_deepseek_v4_refusals(family, kv):
    """vLLM 0.33's FlashMLA path for DeepSeek-V4 takes only fp8 (`models/deepseek_v4/attention.py`
    `_resolve_dsv4_kv_cache_dtype`), nvfp4_ds_mla (DeepSeek-V4.1's records) included; kvcalc
    quotes the text whole."""
    (case,) = [c for c in fx.cases(family) if c["inputs"]["kv_cache_dtype"] == kv]
    want = (
        f"DeepseekV4 fp8_ds_mla layout only supports fp8 kv-cache, got {kv}. Please set "
        "`--kv-cache-dtype fp8` or select a backend that supports bfloat16 KV cache."
    )
    assert case["refused"] == f"ValueError: {want}"
    assert want in fx.kvcalc_figures(case)["refused"]


def _params():
    out = []
    for case in fx.cases() if fx.FIXTURE.exists() else []:
        family = case["inputs"]["family"]
        pending = fx.KVCALC_PENDING.get(family)
        marks = [pytest.mark.xfail(strict=False, reason=pending)] if pending else []
        out.append(pytest.param(case, id=fx.case_id(case), marks=marks))
    return out


@pytest.mark.parametrize("case", _params())
def test_kvcalc_matches_vllm_033_fixture(case):
    """kvcalc's vLLM 0.33 profile prints vLLM's blocks, tokens, concurrency and lines (or refuses
    where vLLM refuses) for the published 2026 config."""
    assert fx.compare(case) == []
