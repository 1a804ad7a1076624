"""`kvcalc estimate --engine E --gpu G`: the memory plan is the engine's (issue 23: one code
path; issue 20: every figure matches the engine). KV bytes per GPU, memory per GPU, max batch,
max context and the KV dtype label come from the engine's own KV arithmetic
(`EngineProfile.plan_engine_kv`, built as `kvcalc plan` / `kvcalc check` build it), so that
estimate == plan == capacity == the engine section of estimate itself.

The figures are kvcalc's output for the engines it models (vLLM 0.33, SGLang 0.5.23); each case
pins estimate against plan run on the same layout, and the max batch against the engine's own
max concurrency (vLLM's "Maximum concurrency for T tokens per request: N x", floored, x the
attention-DP ranks). Configs: Llama-3.1-8B (`meta-llama/Llama-3.1-8B` config.json),
DeepSeek-V3.2 and DeepSeek-V4-Flash as shipped in kvcalc's model table.
"""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from kvcalc.cli import app

runner = CliRunner()


def run_json(*args: str) -> dict:
    res = runner.invoke(app, [*args, "-f", "json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


# (estimate args, plan args picking the same layout, exact figures:
#  kv_dtype label, KV bytes per GPU, memory bytes per GPU, max batch per replica, max context)
CASES = {
    # 1. vLLM TurboQuant on Llama-3.1-8B, 1 x B200: the pages are vLLM's (2,893,824 B blocks of
    #    48 tokens = 60,288 B a token over 32 layers), not bf16's 131,072 B a token. Before the fix:
    #    kv_dtype bf16 and the bf16 KV, while the engine section said 39.39x.
    "llama-turboquant": (
        ["llama-3.1-8b", "--engine", "vllm", "--gpu", "b200", "-s", "64k", "--batch", "8"]
        + ["--kv-dtype", "turboquant_k8v4"],
        ["llama-3.1-8b", "--engine", "vllm", "--gpu", "b200", "-s", "64k", "--concurrency", "8"]
        + ["--kv-dtype", "turboquant_k8v4", "--max-gpus", "1", "--weight-dtype", "bf16"],
        ("turboquant_k8v4", 31_623_708_672, 48_943_833_088, 39, 131_072),
    ),
    # 2. DeepSeek-V3.2 fp8_ds_mla, tp 2 x dp-attention 4 x ep 8 on 8 x H200: vLLM's sparse MLA
    #    FLASHMLA_SPARSE pages (656 + 132 B a token a layer), not the 576 + 132 B rows.
    "dsv32-dpattn": (
        # --batch is per attention-DP rank (vLLM's --max-num-seqs): 2 x 4 ranks = plan's 8
        ["deepseek-v3.2", "--engine", "vllm", "--gpu", "h200", "-s", "32k", "--batch", "2"]
        + ["--kv-dtype", "fp8_ds_mla", "--tp", "2", "--dp-attention", "4", "--ep", "8"],
        ["deepseek-v3.2", "--engine", "vllm", "--gpu", "h200", "-s", "32k", "--concurrency", "8"]
        + ["--kv-dtype", "fp8_ds_mla"],
        ("fp8_ds_mla", 3_150_184_448, 96_146_434_992, 108, None),
    ),
    # 2b. the same at tp 8 x dp 2 on 16 x H200, 4 sequences per replica (plan's concurrency 8):
    #    the max batch is per replica (plan's 62 = 31 x 2); the context reaches the model's 163,840.
    "dsv32-dp2": (
        ["deepseek-v3.2", "--engine", "vllm", "--gpu", "h200", "-s", "32k", "--batch", "4"]
        + ["--kv-dtype", "fp8_ds_mla", "--tp", "8", "--dp", "2"],
        ["deepseek-v3.2", "--engine", "vllm", "--gpu", "h200", "-s", "32k", "--concurrency", "8"]
        + ["--kv-dtype", "fp8_ds_mla"],
        ("fp8_ds_mla", 6_300_368_896, 92_291_647_856, 31, 163_840),
    ),
    # 3. DeepSeek-V4-Flash on SGLang, 2 x B200 dp-attention 2, ep 2, the launch line plan writes.
    #    Before the fix: KV per GPU 14,997,258,240 B and max batch 380 vs SGLang's 49.84x per rank.
    "dsv4-sglang": (
        ["deepseek-v4-flash", "--engine", "sglang", "--gpu", "b200", "-s", "128k", "--batch", "64"]
        + ["--tp-size", "2", "--dp-size", "2", "--enable-dp-attention", "--ep-size", "2"]
        + ["--max-running-requests", "64", "--kv-cache-dtype", "fp8_e4m3"],
        ["deepseek-v4-flash", "--engine", "sglang", "--gpu", "b200", "-s", "128k", "--concurrency", "64"],
        ("fp8_e4m3", 72_705_114_112, 156_463_702_236, 98, None),
    ),
}


@pytest.fixture(scope="module", params=list(CASES))
def case(request: pytest.FixtureRequest) -> tuple[dict, dict, tuple]:
    est_args, plan_args, want = CASES[request.param]
    return run_json("estimate", *est_args), run_json("plan", *plan_args), want


def _plan_layout(est: dict, plan: dict) -> dict:
    """The plan layout with estimate's shape (tp, dp, dp-attention, ep)."""
    keys = ("tp", "dp", "dp_attention", "ep")
    found = [L for L in plan["layouts"] if all(L[k] == est[k] for k in keys)]
    assert found, [tuple(L[k] for k in keys) for L in plan["layouts"]]
    return found[0]


def test_estimate_figures_are_the_engines(case: tuple[dict, dict, tuple]) -> None:
    est, _, (label, kv_bytes, used_bytes, max_batch, max_seq_len) = case
    assert est["kv_dtype"] == label
    assert est["kv_cache_bytes_per_gpu"] == kv_bytes
    assert est["memory_bytes_per_gpu"] == used_bytes
    assert est["headroom_bytes"] == est["budget_bytes_per_gpu"] - used_bytes
    assert est["max_batch"] == max_batch
    if max_seq_len is not None:
        assert est["max_seq_len"] == max_seq_len


def test_estimate_equals_plan(case: tuple[dict, dict, tuple]) -> None:
    est, plan, _ = case
    lay = _plan_layout(est, plan)
    assert est["kv_dtype"] == lay["kv_dtype"]
    assert est["kv_cache_bytes_per_gpu"] == lay["kv_cache_bytes_per_gpu"]
    assert est["memory_bytes_per_gpu"] == lay["memory_bytes_per_gpu"]
    assert est["max_batch"] * est["dp"] == lay["max_concurrency"]
    assert est["tpot_s"] * 1e3 == pytest.approx(lay["tpot_ms"], rel=1e-12)  # the same reads and step


def test_without_kv_flag_the_sglang_pool_is_the_same() -> None:
    """Case 3 with the launch flags alone (no --kv-cache-dtype): SGLang's default dtype label
    (bf16), the same pool bytes and max batch as plan's fp8_e4m3 line (SGLang 0.5.23 sizes the
    DeepSeek-V4 compressed pool the same either way); before the fix 14,997,258,240 B and 380."""
    args = [a for a in CASES["dsv4-sglang"][0] if a not in ("--kv-cache-dtype", "fp8_e4m3")]
    est = run_json("estimate", *args)
    assert (est["kv_dtype"], est["kv_cache_bytes_per_gpu"], est["max_batch"]) == ("bf16", 72_705_114_112, 98)


def test_max_batch_is_the_engine_sections_floor(case: tuple[dict, dict, tuple]) -> None:
    """The engine section's max concurrency is per engine rank (vLLM's log line; SGLang's per
    attention-DP rank): floored, times the attention-DP ranks, it is the memory plan's max batch."""
    est, _, _ = case
    assert est["max_batch"] == math.floor(est["max_concurrency"]) * est["dp_attention"]


def test_estimate_equals_capacity() -> None:
    """`kvcalc capacity --gpu` sizes the same vLLM pool: same KV memory, blocks, concurrency."""
    est = run_json("estimate", *CASES["llama-turboquant"][0])
    cap = run_json(
        "capacity", "llama-3.1-8b", "--engine", "vllm", "--gpu", "b200", "--kv-cache-dtype", "turboquant_k8v4",
        "--max-model-len", "64k",
    )  # fmt: skip
    for key in ("kv_memory_bytes", "num_gpu_blocks", "page_size_bytes", "max_concurrency"):
        assert est[key] == cap[key], key
    assert cap["kv_memory_bytes"] == 155_719_137_689
    assert est["max_batch"] == math.floor(cap["max_concurrency"]) == 39


@pytest.mark.parametrize(
    ("dtype", "label", "kv_bytes", "max_batch"),
    [
        # fp8 on sparse MLA on Hopper: FLASHMLA_SPARSE, stored as fp8_ds_mla (656 B a token)
        ("fp8", "fp8_e4m3", 12_600_737_792, 31),
        ("fp8_ds_mla", "fp8_ds_mla", 12_600_737_792, 31),
        # fp8_e4m3: FLASHINFER_MLA_SPARSE_SM90, 576 B rows
        ("fp8_e4m3", "fp8_e4m3", 11_321_475_072, 35),
    ],
)
def test_dsv32_tp8_dtypes(dtype: str, label: str, kv_bytes: int, max_batch: int) -> None:
    """DeepSeek-V3.2 on 8 x H200 at tp 8: each vLLM spelling sized by the backend it picks (the
    fix: fp8 and fp8_ds_mla were sized with 576 B rows, max batch 35 > vLLM's 31.54x)."""
    est = run_json(
        "estimate", "deepseek-v3.2", "--engine", "vllm", "--gpu", "h200", "--count", "8", "-s", "32k",
        "--batch", "8", "--kv-dtype", dtype,
    )  # fmt: skip
    assert (est["kv_dtype"], est["kv_cache_bytes_per_gpu"], est["max_batch"]) == (label, kv_bytes, max_batch)
    assert est["max_batch"] == math.floor(est["max_concurrency"])
