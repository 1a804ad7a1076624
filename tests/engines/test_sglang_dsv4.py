"""SGLang 0.5.23's DeepSeek-V4 pools (issue 19 item 2): `DSV4PoolConfigurator`'s arithmetic, by hand,
for DeepSeek-V4-Flash (deepseek-ai/DeepSeek-V4-Flash config.json, bundled as `deepseek-v4-flash`)
and DeepSeek-V4-Pro (nvidia/DeepSeek-V4-Pro-NVFP4 config.json, tests/data/hf-configs-2026/siblings/).
SGLang's own code gives the same figures on a CPU (tests/oracle/test_sglang_dsv4_fixture.py).

Sources, SGLang 0.5.23 (PyPI wheel, `python/sglang/srt/`): `model_executor/pool_configurator.py`
`DSV4PoolConfigurator` (1067-1713), `mem_cache/deepseek_v4_memory_pool.py` (53-238),
`kernels/ops/attention/dsv4/kv_layout.py` (`KVLayout.V4`), `arg_groups/model_overrides/deepseek_v4.py`
(page 256, ratio 0.1), `arg_groups/overrides.py` 892-912 (fp8_e4m3 / bfloat16 only).

Geometry: Flash has 43 target layers, compress_ratios[:43] = 0, 0, then 4, 128, ... 4: 21 c4 (CSA)
and 20 c128 (HCA) layers; Pro has 61: 128, 128, then 4, 128, ... 4: 30 c4 and 31 c128. Both: window
128, index_head_dim 128, head 512 (448 nope + 64 rope), context 1,048,576.

Per token (floats, as SGLang computes them):
- a main-cache / c4 token: page_bytes(256) / 256 = ceil(256 x 584 / 576) x 576 / 256 = 149,760 / 256
  = 585 B; page_bytes(64) / 64 = 37,440 / 64 = 585 B; a c128 token: page_bytes(2) / 2 = 1,728 / 2 = 864 B;
- per SWA token: 585 x layers + 8 / 256 x (2 x 2 x 512 x 4 + 2 x 2 x 128 x 4) x c4 layers
  = Flash 25,155 + 320 x 21 = 31,875 B; Pro 35,685 + 320 x 30 = 45,285 B;
- per full token: 0.1 x SWA + (585 / 4 + 132 / 4) x c4 + 864 / 128 x c128
  = Flash 3,187.5 + 179.25 x 21 + 6.75 x 20 = 7,086.75 B; Pro 4,528.5 + 179.25 x 30 + 6.75 x 31 = 10,115.25 B.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from kvcalc.engines import sglang, sglang_dsv4
from kvcalc.errors import KvcalcError
from kvcalc.formats import kv_format
from kvcalc.load.models import load_model

GiB = 2**30
BF16, FP8 = kv_format("bf16"), kv_format("fp8_e4m3")
PRO = str(Path(__file__).parents[1] / "data" / "hf-configs-2026" / "siblings" / "nvidia--DeepSeek-V4-Pro-NVFP4.json")


def model(name: str):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_model(name)


FLASH_M, PRO_M = model("deepseek-v4-flash"), model(PRO)


@pytest.mark.parametrize(
    "m, layers, c4, c128, per_swa, per_full",
    [(FLASH_M, 43, 21, 20, 31_875.0, 7_086.75), (PRO_M, 61, 30, 31, 45_285.0, 10_115.25)],
    ids=["flash", "pro"],
)
def test_per_token_prices(m, layers, c4, c128, per_swa, per_full):
    g = sglang_dsv4.geometry(m)
    assert (g.n_layers, g.n_c4, g.n_c128, g.window, g.index_head_dim) == (layers, c4, c128, 128, 128)
    assert sglang_dsv4.page_bytes(256) == 149_760 and sglang_dsv4.page_bytes(2) == 1_728
    assert sglang_dsv4.paged_bytes_per_token(0) == sglang_dsv4.paged_bytes_per_token(4) == 585.0
    assert sglang_dsv4.paged_bytes_per_token(128) == 864.0
    assert sglang_dsv4.indexer_bytes(128) == 132
    assert sglang_dsv4.bytes_per_swa_token(g) == per_swa
    assert sglang_dsv4.bytes_per_full_token(g, 0.1) == per_full


@pytest.mark.parametrize(
    "m, budget, reqs, states, full, swa, c4, c128, c4_state",
    [
        # Flash, 80 GiB = 85,899,345,920 B: int(85,899,345,920 / 7,086.75) = 12,121,... tokens, estimate
        # int(12.1M / 1,048,576 x 512) = 5,918 -> 4,096 requests; c128 states: ceil((4,097 x 128 + 129) / 128)
        # = 4,099 x 128 = 524,672 rows x 2 x 512 x 4 B x 20 layers = 42,981,130,240 B; 42,918,215,680 /
        # 7,086.75 = 6,056,121.03 -> 6,055,936 (23,656 pages); swa int(605,593.6) -> 605,440;
        # c4 6,055,936 // 4; c128 // 128; c4_state 605,440 / 256 x 8
        (FLASH_M, 80 * GiB, 4_096, 42_981_130_240, 6_055_936, 605_440, 1_513_984, 47_312, 18_920),
        # Flash, 57,123,456,789 B: int(57,123,456,789 / 7,086.75) = 8,060,528 -> int(3,935.8) = 3,935 requests;
        # ceil((3,936 x 128 + 129) / 128) x 128 = 504,064 rows x 4,096 x 20 = 41,292,922,880 B;
        # 15,830,533,909 / 7,086.75 = 2,233,821.4 -> 2,233,600; swa int(223,360) -> 223,232
        (FLASH_M, 57_123_456_789, 3_935, 41_292_922_880, 2_233_600, 223_232, 558_400, 17_450, 6_976),
        # Pro, 80 GiB: 4,096 requests; 524,672 rows x 4,096 B x 31 layers = 66,620,751,872 B;
        # 19,278,594,048 / 10,115.25 = 1,905,893.98 -> 1,905,664; swa int(190,566.4) -> 190,464
        (PRO_M, 80 * GiB, 4_096, 66_620_751_872, 1_905_664, 190_464, 476_416, 14_888, 5_952),
        # Pro, 130 GiB = 139,586,437,120 B: 72,965,685,248 / 10,115.25 = 7,213,433.7 -> 7,213,312
        (PRO_M, 130 * GiB, 4_096, 66_620_751_872, 7_213_312, 721_152, 1_803_328, 56_354, 22_536),
    ],
    ids=["flash-80GiB", "flash-odd", "pro-80GiB", "pro-130GiB"],
)
def test_pool_sizes(m, budget, reqs, states, full, swa, c4, c128, c4_state):
    p = sglang_dsv4.pools(m, budget)
    assert (p.max_running_requests, p.c128_state_bytes) == (reqs, states)
    assert (p.full, p.swa, p.c4, p.c128, p.c4_state) == (full, swa, c4, c128, c4_state)


def test_capacity_and_log_lines():
    """The profile's result and SGLang's three log lines (pool_configurator.py 1474-1488, 1673-1686, 1587-1594)."""
    r = sglang.capacity(FLASH_M, 80 * GiB, FP8, FP8, tp=8)
    assert (r.kv_cache_tokens, r.block_size, r.num_gpu_blocks) == (6_055_936, 256, 23_656)
    assert r.page_size_bytes == 1_814_208  # 7,086.75 x 256
    assert r.engine_state_bytes == 42_981_130_240
    assert r.log_lines == [
        "DSV4 SWA sizing: mode=ratio (default), swa_tokens=605440, swa_full_tokens_ratio=0.1",
        "DSV4 memory calculation: unified=False, unified_fp8=False, dspark_draft_bf16=False, "
        "bytes_per_full_token=7086.75, available_bytes=80.00 GB, c128_state_fixed=40.03 GB, "
        "c2_state_fixed=0.00 GB, swa_fixed=0.00 GB, swa_ring_fixed=0.00 GB, c4_state_fixed=0.00 GB, "
        "full_token=6055936",
        "DSV4 pool sizes: full=6055936, swa=605440, c4=1513984, c128=47312, c4_state=18920, c128_state=0",
    ]
    # 1M-token requests: min(6,055,936 / 1,048,576, 605,440 / 256, 4,096) = 5.775...
    assert r.max_concurrency == pytest.approx(6_055_936 / 1_048_576)


@pytest.mark.parametrize("tp", [1, 2, 4, 8])
@pytest.mark.parametrize("k", [BF16, FP8], ids=["bf16", "fp8"])
def test_tp_and_dtype_do_not_move_the_pools(tp, k):
    """One latent head, whole on every attention rank; the V4 FlashMLA layout whatever the dtype."""
    r = sglang.capacity(FLASH_M, 80 * GiB, k, k, tp=tp)
    assert r.kv_cache_tokens == 6_055_936


@pytest.mark.parametrize("name", ["fp8_e5m2", "int8", "fp16", "nvfp4"])
def test_other_kv_dtypes_refused_in_sglang_words(name):
    try:
        f = kv_format(name)
    except KvcalcError:
        pytest.skip(f"kvcalc has no {name} format")
    with pytest.raises(KvcalcError, match=f"{name} is not supported for DeepseekV4ForCausalLM"):
        sglang.capacity(FLASH_M, 80 * GiB, f, f)


def test_small_budget_refused_with_sglangs_reason():
    """20 GiB: the c128 states for 2,048 requests (262,528 rows x 4,096 x 20 = 21,506,293,760 B) exceed
    the budget: no full tokens, an empty SWA pool, `validate_swa_pool_size`'s error."""
    with pytest.raises(KvcalcError, match=r"SWA pool \(0 tokens\) cannot hold even one request"):
        sglang.capacity(FLASH_M, 20 * GiB, FP8, FP8)


def test_explicit_swa_ratio():
    """--swa-full-tokens-ratio 0.2: per full token 0.2 x 31,875 + 3,899.25 = 10,274.25 B."""
    r = sglang.capacity(FLASH_M, 80 * GiB, FP8, FP8, swa_full_tokens_ratio=0.2)
    p = sglang_dsv4.pools(FLASH_M, 80 * GiB, 0.2)
    assert p.per_full_token == 10_274.25
    assert r.kv_cache_tokens == p.full
    assert r.log_lines[0].startswith("DSV4 SWA sizing: mode=ratio (explicit)")


def _full_or_zero(budget: int) -> int:
    try:
        return sglang_dsv4.pools(FLASH_M, budget).full
    except KvcalcError:
        return 0


@pytest.mark.parametrize("seq_len, batch", [(1_048_576, 4), (32_768, 1)])
def test_memory_for_is_the_least_budget(seq_len, batch):
    """The least budget whose pools hold batch x pages(seq_len) full tokens (and the SWA tokens). One
    32k request still needs the c128 states of SGLang's floor of 2,048 requests:
    ceil((2,049 x 128 + 129) / 128) x 128 = 262,528 rows x 4,096 B x 20 = 21,506,293,760 B."""
    need = batch * seq_len
    budget = sglang.memory_for(FLASH_M, seq_len, batch, FP8, FP8)
    assert _full_or_zero(budget) >= need > _full_or_zero(budget - 1)
    if batch == 1:
        assert sglang_dsv4.pools(FLASH_M, budget).c128_state_bytes == 21_506_293_760


def test_cli_capacity_and_refusal():
    from typer.testing import CliRunner

    from kvcalc.cli import app

    runner = CliRunner()
    ok = runner.invoke(app, ["capacity", "deepseek-v4-flash", "--engine", "sglang", "--kv-memory", "80GiB"])
    assert ok.exit_code == 0 and "6,055,936" in ok.output
    bad = runner.invoke(
        app, ["capacity", "deepseek-v4-flash", "--engine", "sglang", "--kv-memory", "80GiB", "--kv-dtype", "nvfp4"]
    )
    assert bad.exit_code == 2
    assert "nvfp4 is not supported for DeepseekV4ForCausalLM" in bad.output


@pytest.mark.parametrize(
    "flag,source,ratio,per_full_token",
    [
        # not given: the V4 override's 0.1 (arg_groups/model_overrides/deepseek_v4.py sets it only while
        # the field is None); 0.1 x 31,875 + 3,899.25 = 7,086.75 B a full token
        ((), "default", "0.1", "7086.75"),
        # an explicit 0.8, SGLang's fallback for other models, is honoured (it was taken as unset):
        # 0.8 x 31,875 + 3,899.25 = 29,399.25 B a full token
        (("--swa-full-tokens-ratio", "0.8"), "explicit", "0.8", "29399.25"),
        (("--swa-full-tokens-ratio", "0.1"), "explicit", "0.1", "7086.75"),
    ],
)
def test_swa_ratio_given_or_not_cli(cli, flag, source, ratio, per_full_token):
    import json

    r = cli("capacity", "deepseek-v4-flash", "--engine", "sglang", "--kv-memory", "80GiB", *flag, "-f", "json")
    assert r.exit_code == 0, r.output
    lines = json.loads(r.stdout)["log_lines"]
    assert lines[0].startswith(f"DSV4 SWA sizing: mode=ratio ({source}),")
    assert lines[0].endswith(f"swa_full_tokens_ratio={ratio}")
    assert f"bytes_per_full_token={per_full_token}," in lines[1]


def test_swa_ratio_unset_is_08_for_other_models(cli):
    """gpt-oss-20b (SWAKVPool): no --swa-full-tokens-ratio is SGLang's fallback 0.8
    (arg_groups/fields/schedule.py `Arg(fallback=0.8)`), the same pools as an explicit 0.8."""
    import json

    def pools(*flag: str) -> list[str]:
        r = cli("capacity", "gpt-oss-20b", "--engine", "sglang", "--kv-memory", "10GiB", *flag, "-f", "json")
        assert r.exit_code == 0, r.output
        return json.loads(r.stdout)["log_lines"]

    assert pools() == pools("--swa-full-tokens-ratio", "0.8") != pools("--swa-full-tokens-ratio", "0.5")
