"""Shared prefixes: whole blocks of the engine's own block size (a hybrid model's aligned block),
never the prompt's last token (vLLM 0.33 `kv_cache_manager.get_computed_blocks`, SGLang 0.5.23
`schedule_batch._compute_max_prefix_len`), the footprint of shared blocks held once, the
concurrency and occupancy that follow, the load-or-recompute rows."""

from __future__ import annotations

import json

import pytest

from kvcalc.engines.prefix_rules import load_or_recompute, shared_prefix
from kvcalc.engines.profile import get_profile
from kvcalc.errors import KvcalcError, KvcalcWarning
from kvcalc.load.models import load_model

GiB = 1 << 30


def vllm_prefix(model: str, prefix: int, *, mem: int = 40 * GiB, L: int = 32768, concurrency: int | None = None):
    prof = get_profile("vllm")
    m = load_model(model)
    ch = prof.kv_formats(m)
    gpu = prof.capacity(m, mem, ch.k, ch.v, max_model_len=L, options=ch.options)
    return gpu, shared_prefix(
        prof,
        m,
        gpu,
        ch.k,
        ch.v,
        tp=1,
        options=ch.options,
        prefix_tokens=prefix,
        prompt_tokens=L,
        concurrency=concurrency,
    )


@pytest.mark.filterwarnings("ignore::kvcalc.errors.KvcalcWarning")
def test_hybrid_block_larger_than_the_prefix_gets_no_hit():
    """Qwen3-Next-80B-A3B (configs/models/qwen3-next-80b-a3b.yaml) on vLLM 0.33, Hopper: the attention block
    is aligned to the Gated DeltaNet state page: 64 x cdiv(1,097,728, 131,072) = 576 tokens
    (tests/engines/test_vllm_hybrid.py). A 500-token system prompt is less than one block: no hit at all
    (vllm-project/vllm#53749), and kvcalc says so, naming the block."""
    with pytest.warns(KvcalcWarning, match="shorter than one block: vLLM's block of 576 tokens"):
        gpu, p = vllm_prefix("qwen3-next-80b-a3b", 500)
    assert gpu.block_size == 576 == p.reuse_unit_tokens
    assert p.reusable_tokens == 0 and p.shared_blocks == 0 and p.prefill_saved_tokens == 0
    assert p.max_concurrency_shared == p.max_concurrency_unshared == 3033 // 66  # 45: nothing shared
    assert p.warnings == [
        "the shared prefix of 500 tokens is shorter than one block: vLLM's block of 576 tokens "
        "(this hybrid model's aligned block); no request gets a prefix-cache hit"
    ]


def test_hybrid_prefix_floor_and_footprint():
    """The same model with a 12,000-token prefix: floor(12,000 / 576) = 20 blocks = 11,520 tokens reused; 480
    recomputed. A request of 32,768 holds 66 blocks (57 attention + 3 Mamba groups x 3 pages); of the
    attention blocks, 57 - cdiv(32,768 - 11,520, 576) = 57 - 37 = 20 are the shared prefix.
    40 GiB: 3,034 blocks, 3,033 usable: (3,033 - 20) // 46 = 65 requests vs 3,033 // 66 = 45."""
    _, p = vllm_prefix("qwen3-next-80b-a3b", 12_000, concurrency=10)
    assert (p.reusable_tokens, p.shared_blocks, p.own_blocks_per_request, p.blocks_per_request) == (11_520, 20, 46, 66)
    assert (p.max_concurrency_shared, p.max_concurrency_unshared) == (65, 45)
    assert p.kv_occupancy == (20 + 10 * 46) / 3033
    assert p.prefill_saved_tokens == 11_520 and p.prefill_saved_fraction == 11_520 / 32_768
    assert p.warnings == [
        "480 tokens of the prefix past its last whole block (vLLM's block of 576 tokens (this "
        "hybrid model's aligned block)) are recomputed by every request"
    ]


def test_dense_prefix_footprint():
    """Llama-3.1-8B, 20 GiB: 10,240 blocks of 16 (10,239 usable); a 32,768-token request is 2,048 blocks; a
    12,000-token prefix is 750 whole blocks shared: own 1,298; (10,239 - 750) // 1,298 = 7 requests vs 4."""
    _, p = vllm_prefix("llama-3.1-8b", 12_000, mem=20 * GiB, concurrency=4)
    assert (p.shared_blocks, p.own_blocks_per_request, p.usable_blocks) == (750, 1_298, 10_239)
    assert (p.max_concurrency_shared, p.max_concurrency_unshared) == (7, 4)
    assert p.kv_occupancy == (750 + 4 * 1_298) / 10_239 and p.warnings == []


def test_sglang_pages_and_hit_rate():
    prof = get_profile("sglang")
    m = load_model("llama-3.1-8b")
    ch = prof.kv_formats(m)
    gpu = prof.capacity(m, 20 * GiB, ch.k, ch.v, max_model_len=32768, options=ch.options)
    # page 1: 12,000 tokens shared once in a 163,840-token pool; own 20,768: (163,840 - 12,000) // 20,768 = 7
    p = shared_prefix(
        prof, m, gpu, ch.k, ch.v, tp=1, options=ch.options, prefix_tokens=12_000, prompt_tokens=32_768, hit_rate=0.5
    )
    assert (p.reuse_unit_tokens, p.reusable_tokens, p.own_blocks_per_request) == (1, 12_000, 20_768)
    assert (p.max_concurrency_shared, p.max_concurrency_unshared) == (7, 5)
    assert p.prefill_saved_tokens == 6_000  # half the requests find it


@pytest.mark.parametrize(
    "engine, args, words",
    [
        ("llamacpp", {}, "keeps each sequence's own cells"),
        ("vllm", {"prefix_tokens": 40_000}, "longer than the request"),
        ("vllm", {"hit_rate": 1.5}, "--prefix-hit-rate is a fraction"),
    ],
)
def test_prefix_refusals(engine, args, words):
    prof = get_profile(engine)
    m = load_model("llama-3.1-8b")
    ch = prof.kv_formats(m)
    kw = dict(prefix_tokens=1000, prompt_tokens=32_768, hit_rate=1.0) | args
    with pytest.raises(KvcalcError, match=words):
        shared_prefix(prof, m, None, ch.k, ch.v, tp=1, options=ch.options, **kw)


def test_load_or_recompute_break_even():
    """A link of 1 GB/s against a recompute of 1 µs per token: 16-token blocks of 1,000 B per token load in
    16 µs and recompute in 16 µs, so not faster; the break-even is the shortest whole-block prefix that
    loads faster: never here. With a recompute of 2 µs per token, the first block already wins."""
    from kvcalc.load.links import LinkSpec
    from kvcalc.results.offload import PrefixResult

    pre = PrefixResult(
        engine="vllm",
        prefix_tokens=1600,
        prompt_tokens=3201,
        reuse_unit_tokens=16,
        reusable_tokens=1600,
        hit_rate=1.0,
        shared_blocks=100,
        own_blocks_per_request=101,
        blocks_per_request=201,
        usable_blocks=10_000,
        unit="blocks",
        max_concurrency_shared=1,
        max_concurrency_unshared=1,
        prefill_saved_tokens=1600,
        prefill_saved_fraction=0.5,
    )
    link = LinkSpec(key="x", name="x", kind="host", bytes_per_s=10**9, source="test")
    even = load_or_recompute(pre, 1000, [link], lambda p: p * 1e-6)[0]
    assert even.load_s == 1600 * 1000 / 1e9 and even.faster == "recompute" and even.break_even_tokens is None
    fast = load_or_recompute(pre, 1000, [link], lambda p: p * 2e-6)[0]
    assert fast.faster == "load" and fast.break_even_tokens == 16
    # recompute free up to 1,000 tokens, then 2 ms: 63 blocks (1,008 tokens) load in 1.008 ms < 2 ms
    step = load_or_recompute(pre, 1000, [link], lambda p: 2e-3 if p > 1000 else 0.0)[0]
    assert step.break_even_tokens == 1008


def test_capacity_shared_prefix_cli(cli):
    r = cli(
        "capacity",
        "qwen3-next-80b-a3b",
        "--engine",
        "vllm",
        "--kv-memory",
        "40GiB",
        "-L",
        "32768",
        "--shared-prefix",
        "500",
        "-f",
        "json",
    )
    assert r.exit_code == 0, r.output
    p = json.loads(r.stdout)["shared_prefix"]
    assert p["reuse_unit_tokens"] == 576 and p["reusable_tokens"] == 0
    t = cli(
        "capacity",
        "qwen3-next-80b-a3b",
        "--engine",
        "vllm",
        "--kv-memory",
        "40GiB",
        "-L",
        "32768",
        "--shared-prefix",
        "500",
    )
    assert t.stderr.startswith(
        "warning: the shared prefix of 500 tokens is shorter than one block: vLLM's block of 576 tokens"
    )


def test_capacity_load_or_recompute_cli(cli):
    r = cli(
        "capacity",
        "llama-3.1-8b",
        "--engine",
        "vllm",
        "--kv-memory",
        "20GiB",
        "-L",
        "32768",
        "--shared-prefix",
        "12000",
        "--gpu",
        "h100-sxm",
        "--link",
        "pcie5-x16,nvme-gen4",
        "-f",
        "json",
    )
    assert r.exit_code == 0, r.output
    rows = json.loads(r.stdout)["load_or_recompute"]
    # 12,000 tokens x 131,072 B = 1,572,864,000 B; over PCIe 5.0 x16 (63,015,384,615 B/s one way)
    assert [x["link"] for x in rows] == ["pcie5-x16", "nvme-gen4"]
    assert rows[0]["prefix_bytes"] == 1_572_864_000
    assert rows[0]["load_s"] == 1_572_864_000 / 63_015_384_615
    assert rows[0]["recompute_s"] > 0 and rows[0]["faster"] in ("load", "recompute")
    bad = cli("capacity", "llama-3.1-8b", "--engine", "vllm", "--kv-memory", "20GiB", "--link", "pcie5-x16")
    assert bad.exit_code == 2 and "--link times a shared prefix's load" in bad.stderr
