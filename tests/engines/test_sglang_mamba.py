"""SGLang 0.5.23's state pool for the hybrids (issue 19 item 2): the `MambaPool` of state slots
beside the `HybridLinearKVPool` of the full-attention layers (kvcalc/engines/sglang_mamba.py).

Derived from SGLang 0.5.23's released source (the PyPI wheel, `python/sglang/srt/`); no GPU run
backs them (docs/engine-oracles.md):

- shapes: `configs/mamba_utils.py` `Mamba2StateShape.create` (conv (conv_dim / tp, kernel - 1),
  conv_dim = intermediate + 2 x n_groups x state; SSM (heads / tp, head_dim, state)),
  `KimiLinearStateShape.create` (conv (kernel - 1, 3 x heads x head_dim / tp), SSM (heads / tp,
  head_dim, head_dim)); `configs/qwen3_next.py` 288-313 (GDN), `configs/nemotron_h.py` 425-439;
- dtypes: `mamba2_state_dtype`: conv bfloat16, SSM float32 (Qwen3.5 and Nemotron-3-Super's configs
  say float32; Kimi's `KimiLinearCacheParams` reads no config);
- `mem_cache/kv_cache_configurator.py` `_handle_max_mamba_cache` (3230-3409): K = int((rest x 0.9 /
  1.9 x 2^30 - per_req) // per_req), left = int((rest - (K + 1) x per_req / 2^30) x 2^30);
  `resolve_max_num_reqs` (3116-3175) and `_calculate_mamba_ratio` (3062-3087: 3 + 2 tracking slots
  of the default extra_buffer strategy = 5);
- `model_executor/pool_configurator.py` `DefaultPoolConfigurator` (219-236: the cell counts the
  full-attention layers only; 637-647: tokens = available // cell // page x page);
- log lines: `mem_cache/memory_pool.py` 1002-1010 (Mamba), 2073-2099 (the KV pool, 0.5.23 format).

Configs: tests/data/hf-configs-2026/ (Qwen--Qwen3.5-27B.json, siblings/Qwen--Qwen3.5-397B-A17B.json,
nvidia--NVIDIA-Nemotron-3-Super-120B-A12B-FP8.json, moonshotai--Kimi-K3.json) as bundled YAMLs;
Qwen3-Next-80B-A3B's bundled YAML (Qwen/Qwen3-Next-80B-A3B-Instruct config.json).

The budget is 80 GiB = 85,899,345,920 B per rank: rest = 80.0 GiB, the state's share
80.0 x 0.9 / 1.9 x 2^30 = 40,689,163,856.84 B.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from kvcalc.engines import sglang, sglang_mamba
from kvcalc.errors import KvcalcError
from kvcalc.formats import kv_format
from kvcalc.load.models import load_model

GiB = 2**30
BUDGET = 80 * GiB
BF16, FP8 = kv_format("bf16"), kv_format("fp8_e4m3")
QWEN35_397B = str(Path(__file__).parents[1] / "data/hf-configs-2026/siblings/Qwen--Qwen3.5-397B-A17B.json")


def model(name: str):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_model(name)


@pytest.mark.parametrize(
    "name, tp, conv, ssm, n_layers, per_req",
    [
        # Qwen3.5-27B GDN: conv_dim = 48 x 128 + 2 x 16 x 128 = 10,240; (10,240, 3) x 2 B = 61,440;
        # SSM (48, 128, 128) x 4 B = 3,145,728; 48 layers x 3,207,168 = 153,944,064 B
        ("qwen3.5-27b", 1, (10_240, 3), (48, 128, 128), 48, 153_944_064),
        # tp 8: (1,280, 3) x 2 = 7,680; (6, 128, 128) x 4 = 393,216; 48 x 400,896 = 19,243,008
        ("qwen3.5-27b", 8, (1_280, 3), (6, 128, 128), 48, 19_243_008),
        # Qwen3.5-397B-A17B: 45 GDN layers, 64 value heads: conv_dim = 64 x 128 + 2 x 16 x 128 = 12,288;
        # tp 8: (1,536, 3) x 2 = 9,216; (8, 128, 128) x 4 = 524,288; 45 x 533,504 = 24,007,680
        (QWEN35_397B, 8, (1_536, 3), (8, 128, 128), 45, 24_007_680),
        # Nemotron-3-Super Mamba-2: 128 heads x 64 + 2 x 8 groups x 128 = 10,240; tp 8: (1,280, 3) x 2 =
        # 7,680; (16, 64, 128) x 4 = 524,288; 40 layers x 531,968 = 21,278,720
        ("nemotron-3-super-120b-a12b", 8, (1_280, 3), (16, 64, 128), 40, 21_278_720),
        # Kimi-K3 KDA: 96 heads x 128 = 12,288 per q / k / v; tp 1: (3, 36,864) x 2 = 221,184;
        # (96, 128, 128) x 4 = 6,291,456; 69 layers x 6,512,640 = 449,372,160
        ("kimi-k3", 1, (3, 36_864), (96, 128, 128), 69, 449_372_160),
        # tp 8: (3, 4,608) x 2 = 27,648; (12, 128, 128) x 4 = 786,432; 69 x 814,080 = 56,171,520
        ("kimi-k3", 8, (3, 4_608), (12, 128, 128), 69, 56_171_520),
        # Qwen3-Next-80B-A3B: 16 key / 32 value heads of 128: conv_dim = 4,096 + 4,096 = 8,192;
        # tp 4: (2,048, 3) x 2 = 12,288; (8, 128, 128) x 4 = 524,288; 36 x 536,576 = 19,316,736
        ("qwen3-next-80b-a3b", 4, (2_048, 3), (8, 128, 128), 36, 19_316_736),
    ],
)
def test_state_per_request(name, tp, conv, ssm, n_layers, per_req):
    s = sglang_mamba.mamba_state(model(name), tp)
    assert (s.conv_shape, s.temporal_shape, s.n_layers) == (conv, ssm, n_layers)
    assert s.per_request_bytes == per_req


def test_bf16_ssm_halves_the_ssm_state():
    """--mamba-ssm-dtype bfloat16: Qwen3.5-27B tp 1: 48 x (61,440 + 786,432 x 2) = 78,446,592 B."""
    assert sglang_mamba.mamba_state(model("qwen3.5-27b"), 1, "bfloat16").per_request_bytes == 78_446_592


def test_groups_widened_to_tp():
    """Nemotron-3-Super at tp 16: 8 groups do not divide by 16, so n_groups = 8 + (16 - 8) = 16
    (`extra_groups_for_head_shards`): conv_dim = 8,192 + 2 x 16 x 128 = 12,288, / 16 = 768."""
    assert sglang_mamba.mamba_state(model("nemotron-3-super-120b-a12b"), 16).conv_shape == (768, 3)


@pytest.mark.parametrize(
    "name, fmt, tp, slots, cell, tokens, k_bytes, v_bytes, reqs",
    [
        # Qwen3.5-27B bf16 tp 1: K = int((40,689,163,856.84 - 153,944,064) // 153,944,064) = 263;
        # state 264 x 153,944,064 = 40,641,232,896; left 45,258,113,024; cell = 16 full layers x 4 x
        # (256 + 256) x 2 = 65,536; tokens 690,584; K = 16 x 690,585 x 4 x 256 x 2 = 22,629,089,280;
        # requests: min(max(min(int(690,584 / 262,144 x 512), 4096), 2048), 345,292, 263 // 5 = 52)
        ("qwen3.5-27b", BF16, 1, 263, 65_536, 690_584, 22_629_089_280, 22_629_089_280, 52),
        # Qwen3.5-27B fp8 tp 8: K = int(40,669,920,848.84 // 19,243,008) = 2,113; left = 85,899,345,920 -
        # 2,114 x 19,243,008 = 45,219,627,008; cell = 16 x 1 x 512 = 8,192; tokens 5,519,974
        ("qwen3.5-27b", FP8, 8, 2_113, 8_192, 5_519_974, 16 * 5_519_975 * 256, 16 * 5_519_975 * 256, 422),
        # Qwen3.5-397B fp8 tp 8: K = 1,693; left = 85,899,345,920 - 1,694 x 24,007,680 =
        # 45,230,336,000; cell = 15 x 1 x 512 = 7,680; tokens 5,889,366
        (QWEN35_397B, FP8, 8, 1_693, 7_680, 5_889_366, 15 * 5_889_367 * 256, 15 * 5_889_367 * 256, 338),
        # Nemotron-3-Super bf16 tp 8: K = 1,911; left = 85,899,345,920 - 1,912 x 21,278,720 =
        # 45,214,433,280; cell = 8 attention layers x 1 x 256 x 2 = 4,096; tokens 11,038,680
        (
            "nemotron-3-super-120b-a12b",
            BF16,
            8,
            1_911,
            4_096,
            11_038_680,
            8 * 11_038_681 * 256,
            8 * 11_038_681 * 256,
            382,
        ),
        # Kimi-K3 bf16 tp 1: K = int(40,239,791,696.84 // 449,372,160) = 89; left = 85,899,345,920 -
        # 90 x 449,372,160 = 45,455,851,520; MLA cell = 24 layers x 576 x 2 = 27,648; tokens 1,644,091;
        # one latent buffer: 24 x 1,644,092 x 1,152 = 45,455,855,616
        ("kimi-k3", BF16, 1, 89, 27_648, 1_644_091, 45_455_855_616, 0, 17),
        # Kimi-K3 fp8 tp 8: K = 723; left = 85,899,345,920 - 724 x 56,171,520 = 45,231,165,440; cell =
        # 24 x 576 = 13,824 (the latent on every rank); tokens 3,271,930
        ("kimi-k3", FP8, 8, 723, 13_824, 3_271_930, 24 * 3_271_931 * 576, 0, 144),
    ],
)
def test_pools(name, fmt, tp, slots, cell, tokens, k_bytes, v_bytes, reqs):
    m = model(name)
    per_req = sglang_mamba.mamba_state(m, tp).per_request_bytes
    r = sglang.capacity(m, BUDGET, fmt, fmt, tp=tp)
    assert r.engine_state_bytes == (slots + 1) * per_req
    assert r.page_size_bytes == cell
    assert r.kv_cache_tokens == tokens == (BUDGET - (slots + 1) * per_req) // cell
    assert (r.k_bytes, r.v_bytes) == (k_bytes, v_bytes)
    assert r.log_lines[0].startswith(f"max_running_requests is capped to {reqs} by the mamba state cache")
    assert r.log_lines[1].startswith(f"Mamba Cache is allocated. max_mamba_cache_size: {slots}, ")
    assert r.max_concurrency == min(tokens / r.max_model_len, reqs)


def test_qwen3_5_log_lines():
    """Qwen3.5-27B bf16 tp 1 (above): conv 48 x 264 x 61,440 = 778,567,680 B = 0.73 GiB; SSM 48 x 264 x
    3,145,728 = 39,862,665,216 B = 37.12 GiB; K = V = 22,629,089,280 B = 21.07 GiB."""
    r = sglang.capacity(model("qwen3.5-27b"), BUDGET, BF16, BF16)
    assert r.log_lines == [
        "max_running_requests is capped to 52 by the mamba state cache (max_mamba_cache_size=263, 5 state "
        "slots per request). To raise it: increase --mamba-full-memory-ratio or --max-mamba-cache-size, or "
        "halve the state size with --mamba-ssm-dtype bfloat16.",
        "Mamba Cache is allocated. max_mamba_cache_size: 263, conv_state size: 0.73GB, ssm_state size: 37.12GB ",
        "KV Cache is allocated. dtype: torch.bfloat16, #tokens: 690584, K size: 21.07 GB, V size: 21.07 GB",
    ]


def test_kimi_k3_log_lines():
    """Kimi-K3 bf16 tp 1: conv 69 x 90 x 221,184 = 1,373,552,640 B = 1.28 GiB; SSM 69 x 90 x 6,291,456 =
    39,069,941,760 B = 36.39 GiB; the MLA pool's one buffer 45,455,855,616 B = 42.33 GiB."""
    r = sglang.capacity(model("kimi-k3"), BUDGET, BF16, BF16)
    assert r.log_lines[1:] == [
        "Mamba Cache is allocated. max_mamba_cache_size: 89, conv_state size: 1.28GB, ssm_state size: 36.39GB ",
        "KV Cache is allocated. dtype: torch.bfloat16, #tokens: 1644091, KV size: 42.33 GB",
    ]


@pytest.mark.parametrize(
    "options, slots, tokens",
    [
        # --mamba-full-memory-ratio 0.5: 80 x 0.5 / 1.5 x 2^30 = 28,633,115,306.67; K = int(28,479,171,242.67
        # // 153,944,064) = 184 (184.997); left = 85,899,345,920 - 185 x 153,944,064 = 57,419,694,080;
        # // 65,536 = 876,155
        (sglang_mamba.MambaOptions(full_memory_ratio=0.5), 184, 876_155),
        # --max-mamba-cache-size 100: left = 85,899,345,920 - 101 x 153,944,064 = 70,350,995,456; // 65,536 =
        # 1,073,471
        (sglang_mamba.MambaOptions(max_mamba_cache_size=100), 100, 1_073_471),
    ],
)
def test_options(options, slots, tokens):
    r = sglang.capacity(model("qwen3.5-27b"), BUDGET, BF16, BF16, mamba=options)
    assert r.engine_state_bytes == (slots + 1) * 153_944_064
    assert r.kv_cache_tokens == tokens


def test_radix_cache_off_one_slot_a_request():
    """--disable-radix-cache: 1 slot a request; Qwen3.5-27B tp 1: min(2,048, 345,292, 263 // 1) = 263, no
    warning (263 < 2,048 still caps it, so SGLang warns: the cap binds)."""
    r = sglang.capacity(
        model("qwen3.5-27b"), BUDGET, BF16, BF16, mamba=sglang_mamba.MambaOptions(disable_radix_cache=True)
    )
    assert r.log_lines[0].startswith("max_running_requests is capped to 263 by the mamba state cache")
    assert "1 state slots per request" in r.log_lines[0]


def test_page_size_rounds_the_tokens():
    """--page-size 64 (trtllm_mha on SM100): 690,584 // 64 x 64 = 690,560."""
    r = sglang.capacity(model("qwen3.5-27b"), BUDGET, BF16, BF16, page_size=64)
    assert r.kv_cache_tokens == 690_560


def test_no_state_slot_is_sglangs_error():
    """A budget whose 0.9 / 1.9 share holds under two states of 153,944,064 B: 0.5 GiB x 0.9 / 1.9 =
    254,313,523.6 B; int((254,313,523.6 - 153,944,064) // 153,944,064) = 0."""
    with pytest.raises(KvcalcError, match=r"Not enough GPU memory for hybrid \(mamba/linear-attention\) state cache"):
        sglang.capacity(model("qwen3.5-27b"), GiB // 2, BF16, BF16)


@pytest.mark.parametrize(
    "name, tp, what",
    [
        # tp 32: groups 16 -> 32, conv_dim = 6,144 + 2 x 32 x 128 = 14,336, / 32 = 448; but the 48 value
        # heads do not divide by 32 (distributed/utils.divide asserts)
        ("qwen3.5-27b", 32, "Gated DeltaNet heads"),
        # tp 64: 12,288 / 64 = 192, but 96 heads / 64 does not divide
        ("kimi-k3", 64, "KDA heads"),
    ],
)
def test_tp_sglang_cannot_divide(name, tp, what):
    with pytest.raises(KvcalcError, match=what) as info:
        sglang_mamba.mamba_state(model(name), tp)
    assert info.value.field == "tp"


@pytest.mark.parametrize(
    "name, reason",
    [
        # SGLang 0.5.23 has no Jamba model class at all
        ("jamba-1.5-mini", "SGLang 0.5.23 registers no JambaForCausalLM"),
        # Falcon-H1 (attention and Mamba-2 in every layer): SGLang serves it (models/falcon_h1.py); kvcalc
        # has not checked its state against SGLang's config class
        ("falcon-h1-7b", "runs attention and a Mamba-2 mixer side by side in every layer"),
    ],
)
def test_unknown_state_refused(name, reason):
    with pytest.raises(KvcalcError) as info:
        sglang.capacity(model(name), BUDGET, BF16, BF16)
    assert reason in str(info.value)


def test_older_rows_still_refuse():
    with pytest.raises(KvcalcError, match="mamba / linear-attention layers"):
        sglang.capacity(model("qwen3.5-27b"), BUDGET, BF16, BF16, version="0.5.16")


def test_bad_ssm_dtype_and_ratio():
    with pytest.raises(KvcalcError) as info:
        sglang_mamba.mamba_state(model("qwen3.5-27b"), 1, "fp8")
    assert info.value.field == "mamba_ssm_dtype"
    with pytest.raises(KvcalcError) as info:
        sglang_mamba.split_budget(BUDGET, 1, ratio=0.0)
    assert info.value.field == "mamba_full_memory_ratio"


def _fits(m, budget: int, seq_len: int, batch: int, fmt, tp: int) -> bool:
    try:
        r = sglang.capacity(m, budget, fmt, fmt, tp=tp)
    except KvcalcError:
        return False
    slots = r.engine_state_bytes // sglang_mamba.mamba_state(m, tp).per_request_bytes - 1
    reqs = sglang_mamba.max_running_requests(r.kv_cache_tokens, m.default_context, slots)[0]
    return r.kv_cache_tokens >= batch * seq_len and reqs >= batch


@pytest.mark.parametrize(
    "name, seq_len, batch, fmt, tp",
    [
        ("qwen3.5-27b", 32_768, 1, BF16, 1),
        ("qwen3.5-27b", 32_768, 64, FP8, 8),
        ("kimi-k3", 131_072, 4, BF16, 8),
        ("nemotron-3-super-120b-a12b", 65_536, 16, BF16, 8),
    ],
)
def test_memory_for_is_the_least_budget(name, seq_len, batch, fmt, tp):
    """The tokens left are not monotone in the budget (each new slot takes a whole state), so
    the least budget is checked against the best budget of every smaller slot count: the one just
    below the next slot (the most bytes left for that count), none of which fits."""
    m = model(name)
    budget = sglang.memory_for(m, seq_len, batch, fmt, fmt, tp=tp)
    assert _fits(m, budget, seq_len, batch, fmt, tp) and not _fits(m, budget - 1, seq_len, batch, fmt, tp)
    per_req = sglang_mamba.mamba_state(m, tp).per_request_bytes
    slots = sglang_mamba.split_budget(budget, per_req)[0]
    # the five slot counts below (a count spans about 2.1 states of budget at ratio 0.9), a step of 1/4 state
    for b in range(max(per_req, budget - 12 * per_req), budget, per_req // 4):
        k = sglang_mamba.split_budget(b, per_req)[0] if b * 0.9 / 1.9 > 2 * per_req else 0
        if 0 < k < slots:
            assert not _fits(m, b, seq_len, batch, fmt, tp)


def test_memory_for_qwen3_5_one_request():
    """Qwen3.5-27B bf16 tp 1, one request of 32,768 tokens: one request needs K // 5 >= 1 (K >= 5), but
    the tokens need more: K = 10 is the first slot count whose bytes left hold 32,768 x 65,536 =
    2,147,483,648 B (the state's share is 0.9 / 1.9 of the budget, so the KV share about 11 states' worth)."""
    b = sglang.memory_for(model("qwen3.5-27b"), 32_768, 1, BF16, BF16)
    r = sglang.capacity(model("qwen3.5-27b"), b, BF16, BF16)
    assert r.engine_state_bytes == 11 * 153_944_064  # K = 10: the first count whose share leaves 32,768 tokens
    assert r.kv_cache_tokens == 32_768
