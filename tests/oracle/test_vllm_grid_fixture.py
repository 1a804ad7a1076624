"""vLLM 0.33's sizing over DP / EP / DCP layouts and every `--kv-cache-dtype` (issue 20, item 5),
from the checked-in fixture `fixtures/vllm-0.33-grid.json` (`vllm_grid.py --write`,
docs/engine-oracles.md), without vLLM: runs in the plain test run.

- a few fixture rows re-derived by hand from vLLM 0.33's rules, so a fixture regenerated wrong
  does not pass silently (the issue's anchor among them: Llama-3.1-8B nvfp4, 36,864 B a token);
- kvcalc's vLLM profile against every case (`vllm_grid_fixture.compare`).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import vllm_grid_fixture as fx  # noqa: E402
from vllm_grid_cases import CACHE_DTYPES, PARTS, case_id  # noqa: E402

pytestmark = pytest.mark.skipif(not fx.FIXTURE.exists(), reason=f"{fx.FIXTURE} is absent")

GIB = 2**30


def _by_id() -> dict[str, dict]:
    return {case_id(r): r for r in fx.records()} if fx.FIXTURE.exists() else {}


def _row(case: str) -> dict:
    return _by_id()[case]["vllm"]


def test_fixture_covers_the_grid():
    recs = fx.records()
    # 270 layout cases; 176 dtype cases (22 dtypes x 4 models x SM90 / SM100); 132 for the 2026
    # configs (22 dtypes x DeepSeek-V3.2, GLM-5.2, Qwen3.5-27B x SM90 / SM100); 264 dtypes under DCP
    # (22 x 6 layouts x SM90 / SM100: the sixth, Qwen3.5-27B tp 8 dcp 2, a Gated DeltaNet hybrid)
    assert len(recs) == 842
    assert [sum(r["part"] == p for r in recs) for p in PARTS] == [270, 176, 132, 264]
    assert {r["inputs"]["kv_cache_dtype"] for r in recs if r["part"] == "dtypes"} == set(CACHE_DTYPES)
    for part in ("models2026", "dcp"):
        assert {r["inputs"]["kv_cache_dtype"] for r in recs if r["part"] == part} == set(CACHE_DTYPES)
    assert len(CACHE_DTYPES) == 22  # vllm/config/cache.py CacheDType (0.33.0)
    layouts = {
        (r["inputs"]["dp"] > 1, r["inputs"]["ep"], r["inputs"]["dcp"] > 1) for r in recs if r["part"] == "layouts"
    }
    assert {(True, True, False), (False, False, True), (True, True, True)} <= layouts


# Rows by hand (vLLM 0.33: page = block x heads x bytes a head-token; blocks = budget // (page x
# layers); a request takes cdiv(cdiv(L, dcp), block) blocks; tokens = int(blocks / per request x L)).
HAND = [
    # issue 20's anchor: Llama-3.1-8B nvfp4 (FlashInfer customize_spec: 2 slots of 128 / 2 + 128 / 16
    # bytes) = 2 x 32 x 8 x (64 + 8) = 36,864 B a token; page 16 x 8 x 144 = 18,432;
    # 16 GiB // (32 x 18,432) = 29,127 blocks; 29,127 x 16 = 466,032 tokens
    ("llama-3.1-8b-sm9.0-nvfp4", [18_432], 29_127, 466_032),
    # TurboQuant k3v4_nc: slot 50 + 68 = 118 B; vLLM's alignment bumps the block to 80 so the quantized
    # page 80 x 8 x 118 = 75,520 covers a bf16 boundary layer's 256 x 2 x 8 x 16 = 65,536; the four
    # boundary layers (0, 1, 30, 31) keep 80 x 8 x 512 = 327,680
    ("llama-3.1-8b-sm9.0-turboquant_k3v4_nc", [75_520, 327_680], 5_015, 400_808),
    # int4_per_token_head: 64 + 64 + 2 x 4 B scales = 136 B a head-token; 16 x 8 x 136 = 17,408
    ("llama-3.1-8b-sm9.0-int4_per_token_head", [17_408], 30_840, 493_440),
    # DeepSeek-V3 on SM100, bf16: FLASHINFER_MLA block 32, 32 x 576 x 2 = 36,864; 61 layers:
    # 16 GiB // 2,248,704 = 7,639 blocks; 7,639 / 1,024 x 32,768 = 244,448
    ("deepseek-v3-sm10.0-auto", [36_864], 7_639, 244_448),
    # DCP 8 over tp 8, MLA (FlashMLA block 64, 64 x 576 x 2 = 73,728 x 61 = 4,497,408 B a block):
    # 16 GiB // that = 3,819 blocks; a request cdiv(cdiv(32,768, 8), 64) = 64 blocks: 59.67x,
    # int(3,819 / 64 x 32,768) = 1,955,328 tokens (8 x the dcp 1 figure, 244,416)
    ("deepseek-v3-tp8-dp1-dcp8-L32768-auto-16GiB", None, 3_819, 1_955_328),
    ("deepseek-v3-tp8-dp1-dcp1-L32768-auto-16GiB", None, None, None),
    # attention DP 8 + EP: each rank its own requests, the figures of tp 1 alone
    ("deepseek-v3-tp1-dp8-ep-dcp1-L32768-auto-16GiB", None, 3_819, 244_416),
    # DeepSeek-V3.2 on Hopper, fp8_e4m3: FLASHINFER_MLA_SPARSE_SM90 (FLASHMLA_SPARSE lists fp8, not
    # fp8_e4m3): plain fp8 latents 64 x 576 = 36,864 beside the index keys 64 x 132 = 8,448;
    # 61 x (36,864 + 8,448) = 2,764,032 B a block: 6,215 blocks, / cdiv(32,768, 64) x 32,768 = 397,760
    ("deepseek-v3.2-sm9.0-fp8_e4m3", [8_448, 36_864], 6_215, 397_760),
    # ... fp8 is stored as fp8_ds_mla on FLASHMLA_SPARSE: 64 x 656 = 41,984
    ("deepseek-v3.2-sm9.0-fp8", [8_448, 41_984], 5_584, 357_376),
    # ... on SM100, fp8: FLASHINFER_MLA_SPARSE, plain fp8 rows; its kernel block is a multiple of 32,
    # the indexer backend's 64: block lcm(32, 64) = 64, the same 2,764,032 B a block as Hopper's
    # fp8_e4m3: 6,215 blocks, 6,215 x 64 = 397,760 tokens
    ("deepseek-v3.2-sm10.0-fp8", [8_448, 36_864], 6_215, 397_760),
    # ... nvfp4_ds_mla (SM100 only): FLASHMLA_SPARSE keeps it, 352 B rows: 64 x 352 = 22,528;
    # 61 x (22,528 + 8,448) = 1,889,536 B a block: 16 GiB // that = 9,092 blocks, x 64 = 581,888 tokens
    ("deepseek-v3.2-sm10.0-nvfp4_ds_mla", [8_448, 22_528], 9_092, 581_888),
    # GLM-5.2 auto on SM100: GlmMoeDsaForCausalLM makes it fp8_e4m3 (FLASHINFER_MLA_SPARSE, qk_nope 192):
    # 78 MLA layers x 36,864 + 21 indexer layers x 8,448 = 3,052,800 B a block; 16 GiB // that =
    # 5,627 blocks, x 64 = 360,128 tokens (Hopper auto: bf16, 78 x 73,728 + 177,408 = 5,928,192: 2,897)
    ("glm-5.2-sm10.0-auto", [8_448, 36_864], 5_627, 360_128),
    ("glm-5.2-sm9.0-auto", [8_448, 73_728], 2_897, 185_408),
    # Qwen3.5-27B (Gated DeltaNet hybrid), int4_per_token_head: 4 KV heads x (128 + 128 + 8) = 1,056 B
    # a token; the block aligned to cover the 3,207,168 B state page in 64-token steps:
    # 64 x cdiv(3,207,168, 64 x 1,056) = 3,072; page 3,072 x 1,056 = 3,244,032
    ("qwen3.5-27b-sm9.0-int4_per_token_head", [3_244_032], 330, 540_672),
    # turboquant_k8v4 on the hybrid, no boundary layers: 4 x (256 + 128 + 4) = 1,552 B; 64 x 33 = 2,112
    ("qwen3.5-27b-sm9.0-turboquant_k8v4", [3_277_824], 327, 428_605),
    # DCP x nvfp4: Llama-3.1-8B tp 16 (1 KV head a rank), dcp 2: 16 x 1 x 144 = 2,304 B x 32 =
    # 73,728 B a block; 16 GiB // that = 233,016 blocks; a request cdiv(16,384, 16) = 1,024 blocks:
    # int(233,016 / 1,024 x 32,768) = 7,456,512 tokens
    ("llama-3.1-8b-tp16-dcp2-sm10.0-nvfp4", [2_304], 233_016, 7_456_512),
    # DeepSeek-V3.2 under DCP 8 on Hopper, auto: FLASHMLA_SPARSE (FLASH_ATTN_MLA_SPARSE lacks DCP),
    # the same bf16 pages 64 x 1,152 = 73,728 beside 8,448: 3,427 blocks; a request cdiv(4,096, 64) = 64
    # blocks: int(3,427 / 64 x 32,768) = 1,754,624
    ("deepseek-v3.2-tp8-dcp8-sm9.0-auto", [8_448, 73_728], 3_427, 1_754_624),
    # GQA DCP: Llama-3.1-8B tp 16 (8 KV heads: 1 a rank), dcp 2: 16 x 1 x 512 = 8,192 B x 32 = 262,144
    # a block; 65,536 blocks; a request cdiv(16,384, 16) = 1,024: 64x, 2,097,152 tokens
    ("llama-3.1-8b-tp16-dp1-dcp2-L32768-auto-16GiB", None, 65_536, 2_097_152),
]


@pytest.mark.parametrize("case, pages, blocks, tokens", [h for h in HAND if h[2] is not None])
def test_fixture_rows_by_hand(case, pages, blocks, tokens):
    v = _row(case)
    assert v["refused"] is None
    if pages is not None:
        assert v["pages"] == pages
    assert (v["num_blocks"], v["tokens"]) == (blocks, tokens)


def test_nvfp4_anchor_bytes_per_token():
    # 2 x 32 layers x 8 KV heads x (64 + 8) = 36,864 B a token (bf16: 131,072)
    v = _row("llama-3.1-8b-sm9.0-nvfp4")
    assert v["pages"][0] // 16 * 32 == 2 * 32 * 8 * (64 + 8) == 36_864


@pytest.mark.parametrize(
    "case, text",
    [
        ("deepseek-v3-tp8-dp1-dcp3-L32768-auto-16GiB", "tp_size=8 must be divisible by dcp_size=3."),
        ("llama-3.1-8b-tp8-dp1-dcp2-L32768-auto-16GiB", "requires `--tensor-parallel-size` (8) to be greater"),
        ("llama-3.1-8b-tp16-dp1-dcp4-L32768-auto-16GiB", "exceeds the maximum supported value (2)"),
        ("llama-3.1-8b-tp1-dp4-ep-dcp1-L32768-auto-16GiB", "Number of experts in the model must be greater than 0"),
        ("llama-3.1-8b-sm9.0-nvfp4_4over6", "No valid attention backend found"),
        ("llama-3.1-8b-sm10.0-octave_k3v4", "No valid attention backend found"),
        # `VllmConfig.validate_nvfp4_kv_cache_with_mla` (config/vllm.py 3421-3437), before any backend
        ("deepseek-v3-sm9.0-nvfp4", "nvfp4 KV cache is not supported with MLA (Multi-head Latent Attention)"),
        ("glm-5.2-sm10.0-nvfp4_4over6", "nvfp4 KV cache is not supported with MLA (Multi-head Latent Attention)"),
        # under DCP: TRITON_ATTN / TURBOQUANT and Hopper's FLASH_ATTN_MLA_SPARSE lack `supports_dcp`
        ("llama-3.1-8b-tp16-dcp2-sm9.0-int4_per_token_head", "TRITON_ATTN: [DCP not supported]"),
        ("llama-3.1-8b-tp16-dcp2-sm9.0-turboquant_k8v4", "TURBOQUANT: [DCP not supported]"),
        ("deepseek-v3.2-tp8-dcp8-sm9.0-float16", "FlashAttention MLA Sparse does not support DCP"),
    ],
)
def test_fixture_refusals(case, text):
    assert text in _row(case)["refused"]


def _params():
    out = []
    for r in fx.records() if fx.FIXTURE.exists() else []:
        why = fx.KVCALC_PENDING.get(fx.key(r)) if r["part"] != "layouts" else None
        out.append(pytest.param(r, id=case_id(r), marks=[pytest.mark.xfail(strict=False, reason=why)] if why else []))
    return out


@pytest.mark.parametrize("record", _params())
def test_kvcalc_matches_vllm(record):
    status, differs = fx.compare(record)
    assert status in ("match", "kvcalc refuses"), differs


def test_kvcalc_refuses_only_the_listed_cases():
    refused = [r for r in fx.records() if fx.compare(r)[0] == "kvcalc refuses"]
    assert {fx.key(r) for r in refused} == fx.KVCALC_REFUSES
