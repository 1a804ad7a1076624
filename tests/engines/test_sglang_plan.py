"""`kvcalc plan --engine sglang` and `kvcalc check` size each layout by SGLang 0.5.23's own pools
(`kvcalc.engines.sglang_plan`), so plan's max seqs is what `capacity --engine sglang` gives on
the rank's KV memory (budget - weights - activation reserve - CUDA context) x attention-DP ranks
x replicas, and its KV bytes per GPU are `sglang.memory_for`'s least budget for the fullest
rank's requests.

- DeepSeek-V4-Flash (configs/models/deepseek-v4-flash.yaml): `DSV4PoolConfigurator`
  (pool_configurator.py 1067-1713, `sglang_dsv4.pools`): c128 compressor states reserved first,
  then full / SWA / compressed pools on pages of 256. Before, plan used the exact formula and
  showed ~808 seqs where capacity gave ~180 a rank.
- Qwen3.5-27B (configs/models/qwen3.5-27b.yaml, 48 Gated DeltaNet + 16 full-attention layers):
  the `MambaPool`'s state slots first (--mamba-full-memory-ratio 0.9), max_running_requests
  capped by slots // 5 (`resolve_max_num_reqs`, `sglang_mamba.max_running_requests`).
"""

from __future__ import annotations

import json
import math

import pytest
import yaml

import kvcalc
from kvcalc.engines import sglang, sglang_plan
from kvcalc.engines.profile import SglangOptions
from kvcalc.engines.sglang_mamba import MambaOptions
from kvcalc.errors import KvcalcError
from kvcalc.formats import kv_format
from kvcalc.load.gpus import get_gpu
from kvcalc.load.models import load_model

FP8 = ("fp8_e4m3", "fp8_e4m3")


def _free(layout) -> int:
    """The rank's KV memory: budget - (weights + activation reserve + CUDA context)."""
    return layout.budget_bytes_per_gpu - (layout.memory_bytes_per_gpu - layout.kv_cache_bytes_per_gpu)


@pytest.mark.parametrize(
    "model,seq_len,concurrency,gpus,max_gpus,want",
    [
        # 2 x H200, 64 x 32k: attention DP 2 + EP 2 (tp 1 a rank)
        ("deepseek-v4-flash", 32_768, 64, "h200", 2, {(1, 2)}),
        # 2 x H200, 1 x 32k: tp 2
        ("deepseek-v4-flash", 32_768, 1, "h200", 2, {(2, 1)}),
        # Qwen3.5-27B at 1k: the //5 request cap binds; tp 1 and tp 2
        ("qwen3.5-27b", 1_024, 8, "h100-sxm", 2, {(1, 1), (2, 1)}),
        ("qwen3.5-27b", 32_768, 8, "h100-sxm", 2, {(1, 1), (2, 1)}),
    ],
)
def test_plan_max_seqs_is_capacity(model, seq_len, concurrency, gpus, max_gpus, want):
    spec = load_model(model)
    r = kvcalc.plan(model, seq_len=seq_len, concurrency=concurrency, gpus=gpus, engine="sglang", max_gpus=max_gpus)
    assert {(lay.tp, lay.dp_attention) for lay in r.layouts} >= want
    for lay in r.layouts:
        k = kv_format(lay.kv_dtype)
        free = _free(lay)
        cap = sglang.capacity(spec, free, k, k, tp=lay.tp, max_model_len=seq_len)
        per_rank = math.floor(cap.max_concurrency)
        assert lay.max_concurrency == per_rank * lay.dp_attention * lay.dp
        replica = -(-concurrency // lay.dp)
        batch = -(-replica // lay.dp_attention)  # the fullest attention rank's
        assert lay.kv_cache_bytes_per_gpu == sglang.memory_for(
            spec, seq_len, batch, k, k, tp=lay.tp, context_len=seq_len
        )
        assert lay.kv_cache_bytes_per_gpu <= free
        assert (
            sglang.capacity(spec, lay.kv_cache_bytes_per_gpu, k, k, tp=lay.tp, max_model_len=seq_len).max_concurrency
            >= batch
        )


def _ekv(model: str, tp: int = 1):
    spec = load_model(model)
    return sglang_plan.plan_kv(spec, SglangOptions())(get_gpu("h200"), tp, (range(spec.n_layers),), FP8)


@pytest.mark.parametrize("tp", [1, 2])
def test_dsv4_by_hand(tp):
    """52,004,271,032 B a rank, 32k requests (SGLang 0.5.23 DSV4PoolConfigurator, as `kvcalc
    capacity deepseek-v4-flash --engine sglang --kv-memory 52004271032B -L 32k` logs it):
    7,086.75 B a full token; c128 states for SGLang's estimate of 3,583 requests take
    37,601,935,360 B; full = int((52,004,271,032 - 37,601,935,360) / 7,086.75) = 2,032,290 ->
    // 256 x 256 = 2,032,128 tokens; SWA = int(2,032,128 x 0.1) // 256 x 256 = 203,008.
    A 32,768-token request holds 32,768 full tokens and one 256-token SWA page: min(2,032,128 //
    32,768 = 62, 203,008 // 256 = 793, 3,583) = 62 a rank, whatever tp (every attention rank holds
    the latent whole)."""
    assert _ekv("deepseek-v4-flash", tp).max_batch(32_768, [52_004_271_032]) == 62


def test_qwen35_request_cap_by_hand():
    """46,513,855,897 B a rank, 1k requests, tp 1: the state pool's share 46,513,855,897 x 0.9 / 1.9
    = 22,032,879,109.4 B, less one request's state (153,944,064 B: 22,014,001,152 B / 143 slots),
    // 153,944,064 = 142 slots (+1 padding); the 16 full-attention layers' pool holds 747,676
    tokens (730 requests of 1,024), but max_running_requests = 142 // 5 = 28 (3 + 2 tracking slots
    a request with the radix cache on)."""
    ekv = _ekv("qwen3.5-27b")
    assert ekv.max_batch(1_024, [46_513_855_897]) == 28
    # the least KV memory for 28 requests admits 28, and one byte less admits 27
    need = ekv.stage_bytes(1_024, 28)[0]
    assert ekv.max_batch(1_024, [need]) == 28
    assert ekv.max_batch(1_024, [need - 1]) < 28


def test_pipeline_split_is_refused():
    spec = load_model("qwen3.5-27b")
    build = sglang_plan.plan_kv(spec, SglangOptions())
    with pytest.raises(KvcalcError, match="pipeline stage"):
        build(get_gpu("h200"), 1, (range(32), range(32, 64)), FP8)


@pytest.mark.parametrize(
    "args",
    [
        ["deepseek-v4-flash", "-s", "32k", "--concurrency", "64", "--gpu", "h200", "--max-gpus", "2"],
        ["qwen3.5-27b", "-s", "1k", "--concurrency", "8", "--gpu", "h100-sxm", "--max-gpus", "1"],
    ],
)
def test_check_agrees_with_plan(cli, tmp_path, args):
    out = tmp_path / "d.yaml"
    r = cli("plan", *args, "--engine", "sglang", "--top", "1", "-f", "json", "--write-deployment", str(out))
    assert r.exit_code == 0, r.output
    top = json.loads(r.stdout)["layouts"][0]
    assert yaml.safe_load(out.read_text())["engine"] == "sglang"
    c = cli("check", str(out), "-f", "json")
    assert c.exit_code == 0, c.output
    row = json.loads(c.stdout)["deployments"][0]
    assert row["status"] == "ok"
    assert row["max_concurrency"] == top["max_concurrency"]
    assert row["memory_bytes_per_gpu"] == top["memory_bytes_per_gpu"]


def test_dsv4_least_budget_admits_the_requests():
    """3,000 short requests with --swa-full-tokens-ratio 1 (each request holds at least one
    256-token SWA page, so at SGLang's 0.1 the SWA pool binds first): 31,875 + 3,899.25 =
    35,774.25 B a full token; SGLang's estimate (`_resolve_max_running_requests_per_worker`)
    int(int(budget / 35,774.25) / 1,048,576 x 512) reaches 3,000 at 3,000 x 1,048,576 / 512 =
    6,144,000 full tokens' worth, 6,144,000 x 35,774.25 = 219,796,992,000 B; one byte less
    admits 2,999, though the pools hold the tokens."""
    spec = load_model("deepseek-v4-flash")
    ekv = sglang_plan.plan_kv(spec, SglangOptions(swa_full_tokens_ratio=1.0))(
        get_gpu("h200"), 1, (range(spec.n_layers),), FP8
    )
    assert ekv.stage_bytes(256, 3_000) == [219_796_992_000]
    assert ekv.max_batch(256, [219_796_992_000]) == 3_000
    assert ekv.max_batch(256, [219_796_992_000 - 1]) == 2_999


def test_hybrid_estimate_at_the_launch_context_length():
    """Qwen3.5-27B with --max-mamba-cache-size 3000 --disable-radix-cache (1 state slot a request),
    3,000 requests of 64 tokens: SGLang estimates requests at the launch line's --context-length
    (64: int(tokens / 64 x 512) is past the 4,096 ceiling; at the model's 262,144 the 192,000
    tokens would give the 2,048 floor), so the least KV memory for 3,000 is where capacity
    admits 3,000 and one byte less 2,999."""
    spec = load_model("qwen3.5-27b")
    o = SglangOptions(mamba=MambaOptions(0.9, 3_000, "float32", True))
    ekv = sglang_plan.plan_kv(spec, o)(get_gpu("h200"), 1, (range(spec.n_layers),), FP8)
    (need,) = ekv.stage_bytes(64, 3_000)
    assert (ekv.max_batch(64, [need]), ekv.max_batch(64, [need - 1])) == (3_000, 2_999)
