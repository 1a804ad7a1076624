"""`kvcalc plan --engine vllm` takes the vLLM options `capacity` takes that change the plan
(--vllm-version, --block-size, --attention-backend, ...), and each layout's max concurrency is
the floor of the "Maximum concurrency" `capacity --engine vllm --gpu` prints for the KV memory the
plan leaves (budget - weights - activation reserve - CUDA context).

DeepSeek-V2-Lite (27 MLA layers, kv_lora_rank 512 + rope 64 = 576 values, bf16): one token's page
on one layer is 576 x 2 = 1,152 B. On an H100 (compute capability 9.0) vLLM 0.11 runs FlashMLA,
which forces 64-token blocks; 0.33 picks FLASH_ATTN_MLA and keeps 16 (`vllm.attention_block_size`).
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from kvcalc.cli.app import app

PLAN = [
    "plan",
    "deepseek-v2-lite",
    "--gpu",
    "h100-sxm",
    "--seq-len",
    "1000",
    "--concurrency",
    "8",
    "--max-gpus",
    "1",
    "--kv-dtype",
    "bf16",
    "--weight-dtype",
    "bf16",
    "--format",
    "json",
]


def run(*args: str) -> dict:
    out = CliRunner().invoke(app, list(args))
    assert out.exit_code == 0, out.output
    return json.loads(out.output)


def plan_and_capacity(*flags: str) -> tuple[dict, int, dict]:
    """The plan's one layout, the KV memory it leaves, and capacity's result for that memory."""
    (lay,) = run(*PLAN, *flags)["layouts"]
    kv_memory = lay["budget_bytes_per_gpu"] - (lay["memory_bytes_per_gpu"] - lay["kv_cache_bytes_per_gpu"])
    cap = run(
        "capacity",
        "deepseek-v2-lite",
        "--engine",
        "vllm",
        "--gpu",
        "h100-sxm",
        "--kv-memory",
        str(kv_memory),
        "-L",
        "1000",
        "--kv-dtype",
        "bf16",
        "--format",
        "json",
        *flags,
    )
    return lay, kv_memory, cap


def test_vllm_0_11_flashmla_64_vs_0_33_flash_attn_mla_16():
    lay11, mem11, cap11 = plan_and_capacity("--vllm-version", "0.11")
    lay33, mem33, cap33 = plan_and_capacity()  # default 0.33
    assert mem11 == mem33  # the same budget, weights and reserve: only the blocks differ
    mem = mem33
    # 0.11: block 64 x 1,152 B x 27 layers = 1,990,656 B; a 1,000-token request cdiv(1000, 64) = 16 blocks
    assert cap11["block_size"] == 64 and cap11["page_size_bytes"] == 64 * 1152 * 27 == 1_990_656
    assert lay11["max_concurrency"] == int(cap11["max_concurrency"]) == (mem // 1_990_656) // 16
    # 0.33: block 16 x 1,152 x 27 = 497,664 B; cdiv(1000, 16) = 63 blocks; one null block less
    assert cap33["block_size"] == 16 and cap33["page_size_bytes"] == 16 * 1152 * 27 == 497_664
    assert lay33["max_concurrency"] == int(cap33["max_concurrency"]) == (mem // 497_664 - 1) // 63
    # for this budget (44,490,407,321 B): 22,349 // 16 = 1,396 and 89,397 // 63 = 1,419
    assert (lay11["max_concurrency"], lay33["max_concurrency"]) == (1396, 1419)
    assert lay11["launch"].endswith("--max-num-seqs 8 --block-size 64")  # vLLM 0.11 picks 64 itself: stated
    assert "--block-size" not in lay33["launch"]


def test_block_size_64_on_0_33():
    lay, mem, cap = plan_and_capacity("--block-size", "64")
    # FLASH_ATTN_MLA keeps the 64 given: blocks of 1,990,656 B; (blocks - null block) // 16 per request
    assert cap["block_size"] == 64
    assert lay["max_concurrency"] == int(cap["max_concurrency"]) == (mem // 1_990_656 - 1) // 16 == 1396
    assert "--block-size 64" in lay["launch"]


def test_gpu_overrides_the_options_gpu_mi300x_triton_mla():
    # no --gpu in the options: each planned GPU's vendor picks the backend (ROCm: TRITON_MLA, 16 in 0.11)
    res = run(
        "plan",
        "deepseek-v2-lite",
        "--gpu",
        "mi300x",
        "--seq-len",
        "1000",
        "--max-gpus",
        "1",
        "--kv-dtype",
        "bf16",
        "--weight-dtype",
        "bf16",
        "--vllm-version",
        "0.11",
        "--format",
        "json",
    )
    assert any("TRITON_MLA" in n and "ROCm" in n for n in res["notes"])
    assert "--block-size" not in res["layouts"][0]["launch"]


def test_plan_states_the_cache_options_it_was_made_with():
    (lay,) = run(
        *PLAN,
        "--no-enable-prefix-caching",
        "--disable-hybrid-kv-cache-manager",
        "--max-num-batched-tokens",
        "4096",
        "--no-async-scheduling",
    )["layouts"]
    assert lay["launch"].endswith(
        "--max-num-seqs 8 --disable-hybrid-kv-cache-manager --max-num-batched-tokens 4096 "
        "--no-async-scheduling --no-enable-prefix-caching"
    )


@pytest.mark.parametrize(
    "args,message",
    [
        (["--engine", "sglang", "--block-size", "64"], "--block-size applies to --engine vllm only"),
        (["--engine", "ideal", "--vllm-version", "0.11"], "--vllm-version applies to --engine vllm only"),
        (["--vllm-version", "0.9"], "0.9"),
        (["--vllm-version", "0.11", "--no-async-scheduling"], "applies to --vllm-version 0.33 only"),
    ],
)
def test_refused_in_one_line(args, message):
    out = CliRunner().invoke(app, ["plan", "llama-3.1-8b", "--gpu", "h100-sxm", "--max-gpus", "1", *args])
    assert out.exit_code == 2, out.output
    assert message in out.output and "Traceback" not in out.output
