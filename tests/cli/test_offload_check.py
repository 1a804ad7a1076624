"""`kvcalc check` on a deployment whose `offload:` tier fits: its note says how many sessions stay
warm, the host it pins per node and what to pass (`offload_request.offload_note`).

Llama-3.1-70B on 8 x H100 SXM (tp 8), vLLM 0.33, --kv-offloading-size 1600 (GiB, all 8 ranks), 2 TB of
host memory, a 12,288-token shared prompt: the figures of tests/cli/test_offload_done_when.py
(327,680 chunks; (327,680 - 768) // 1,280 = 255 sessions; 1,600 x 2^30 = 1,717,986,918,400 B a node)."""

from __future__ import annotations

import json

import pytest

DEPLOYMENT = """name: agents-70b
model: llama-3.1-70b
gpu: h100-sxm
count: {count}
tp: 8
max_seq_len: 32768
concurrency: 40
offload:
  engine: vllm
  kv_offloading_size: 1600
  host_memory: 2TB
  shared_prefix: 12k
"""


@pytest.mark.parametrize(
    ("count", "warm"),
    [
        (8, "255 sessions of 32,768 tokens kept warm"),
        (16, "255 sessions of 32,768 tokens kept warm x 2 replicas = 510"),
    ],
)
def test_the_note_of_a_tier_that_fits(cli, tmp_path, count, warm):
    p = tmp_path / "d.yaml"
    p.write_text(DEPLOYMENT.format(count=count))
    r = cli("check", str(p), "-f", "json")
    assert r.exit_code == 0, r.output
    row = json.loads(r.stdout)["deployments"][0]
    assert row["notes"][-1] == (
        f"offload (vllm-native): {warm}; host 1,717.99 GB per node of 2,000.00 GB; "
        "pass --kv-offloading-size 1600 --kv-offloading-backend native"
    )
