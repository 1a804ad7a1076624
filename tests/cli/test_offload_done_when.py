"""Issue 22's "Done when": "with 2 TB of host memory per node and a 12k-token system prompt, how many
agent sessions stay warm, and what do I pass to the engine?" -- the engine's own flags, figures its
code agrees with, and a clear refusal when the host cannot hold it.

Llama-3.1-70B (meta-llama/Llama-3.1-70B config.json: 80 layers, 8 KV heads of 128, bf16) on 8 x H100
SXM (tp 8), vLLM 0.33, sessions of 32,768 tokens, --kv-offloading-size 1600 (GiB, all 8 ranks)."""

from __future__ import annotations

import json

ARGS = (
    "capacity",
    "llama-3.1-70b",
    "--engine",
    "vllm",
    "--tp",
    "8",
    "--gpu",
    "h100-sxm",
    "-L",
    "32k",
    "--host-memory",
    "2TB",
    "--shared-prefix",
    "12k",
)


def test_sessions_warm_with_a_shared_system_prompt(cli):
    r = cli(*ARGS, "--kv-offloading-size", "1600", "-f", "json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    o = d["offload"]
    assert o["flags"] == ["--kv-offloading-size 1600", "--kv-offloading-backend native"]
    # 1,600 x 2^30 = 1,717,986,918,400 B over 8 ranks: chunks of 8 x 655,360 = 5,242,880 B: 327,680 chunks
    assert o["num_chunks"] == 327_680 and o["host_bytes_per_node"] == 1_717_986_918_400 <= 2 * 10**12
    # a session: cdiv(32,768, 16) = 2,048 blocks; the 12,288-token prompt is 768 whole blocks held once:
    # CPU (327,680 - 768) // 1,280 = 255 sessions; GPU (89,112 usable - 768) // 1,280 = 69
    assert [t["sessions"] for t in o["tiers"]] == [69, 255] and o["sessions_warm"] == 255
    assert d["shared_prefix"]["max_concurrency_shared"] == 69
    assert o["log_lines"] == ["Creating offloading spec with name: CPUOffloadingSpec"]


def test_refused_with_the_figures_when_the_host_cannot_hold_it(cli):
    r = cli(*ARGS, "--kv-offloading-size", "2000")
    assert r.exit_code == 2
    err = " ".join(r.stderr.split())
    assert (
        "pins 2,000.00 GiB (2,147.48 GB) of host memory per node (8 ranks x 250.00 GiB (268.44 GB)), more than "
        "--host-memory 1,862.65 GiB (2,000.00 GB): lower --kv-offloading-size to at most 1862.64"
    ) in err
    # decimal GB typed where vLLM reads GiB
    r = cli(*ARGS, "--kv-offloading-size", "1600GB")
    assert "for 1600 GB pass --kv-offloading-size 1490.12" in " ".join(r.stderr.split())


def test_tables_fit_80_columns_and_log_lines_stay_whole(cli):
    r = cli(*ARGS, "--kv-offloading-size", "1600")
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert all(len(x) <= 80 for x in lines if x[:1] in "│┃┏┡└┌├┗╇━"), [x for x in lines if len(x) > 80]
    assert "Creating offloading spec with name: CPUOffloadingSpec" in lines
    s = cli(
        "capacity",
        "llama-3.1-8b",
        "--engine",
        "sglang",
        "--kv-memory",
        "20GiB",
        "-L",
        "32k",
        "--dp",
        "8",
        "--host-memory",
        "400GB",
        "--enable-hierarchical-cache",
    )
    assert (
        "HiCache auto-sizing: ratio 2.000 -> 1.722; 36.3 GiB host memory per rank (fraction 0.80, 8 ranks on "
        "this host), host pools 34.4 GiB."
    ) in s.stdout.splitlines()
