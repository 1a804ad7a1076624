"""A deployment's `offload:` block (`kvcalc check`): the engine's offload flags as the engine reads
them, checked against the node's host memory; a tier the host cannot hold is "does not fit" with
the figures; a size in the wrong unit is refused against the `offload` key.

Llama-3.1-70B on 8 x H100 SXM (tp 8), vLLM 0.33: the figures of tests/cli/test_offload_done_when.py."""

from __future__ import annotations

import json

import pytest

BASE = """name: agents-70b
model: llama-3.1-70b
gpu: h100-sxm
count: 8
tp: 8
max_seq_len: 32768
concurrency: 40
offload:
  engine: {engine}
  {size}
  host_memory: 2TB
  shared_prefix: 12k
"""


def write(tmp_path, size: str, engine: str = "vllm"):
    p = tmp_path / "d.yaml"
    p.write_text(BASE.format(engine=engine, size=size))
    return str(p)


def test_offload_that_fits(cli, tmp_path):
    r = cli("check", write(tmp_path, "kv_offloading_size: 1600"), "-f", "json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["deployments"][0]["status"] == "ok"


def test_offload_the_host_cannot_hold(cli, tmp_path):
    r = cli("check", write(tmp_path, "kv_offloading_size: 2000"), "-f", "json")
    assert r.exit_code == 1
    row = json.loads(r.stdout)["deployments"][0]
    assert row["status"] == "does not fit"
    assert row["problems"] == [
        "offload: the vllm-native tier pins 2,000.00 GiB (2,147.48 GB) of host memory per node (8 ranks x 250.00 "
        "GiB (268.44 GB)), more than --host-memory 1,862.65 GiB (2,000.00 GB): lower --kv-offloading-size to at "
        "most 1862.64"
    ]


@pytest.mark.parametrize(
    "size, engine, words",
    [
        ("kv_offloading_size: 1600GB", "vllm", "for 1600 GB pass --kv-offloading-size 1490.12"),
        ("hicache_size: 100GiB", "sglang", "pass --hicache-size 107"),
        ("hicache_ratio: 2.0", "vllm", "--hicache-* / --enable-hierarchical-cache is sglang's"),
        ("kv_offloading_size: 10", "llamacpp", "Input should be 'vllm' or 'sglang'"),
    ],
)
def test_offload_refusals_name_the_key(cli, tmp_path, size, engine, words):
    r = cli("check", write(tmp_path, size, engine))
    assert r.exit_code == 2
    err = " ".join(r.stderr.split())
    assert "d.yaml" in err and "offload" in err and words in err


def test_sglang_offload_in_a_deployment(cli, tmp_path):
    # SGLang refuses in its own words: 8 ranks x 300 GB against (2 TB - 10 GiB) / 8 = 248.66 GB each
    r = cli("check", write(tmp_path, "hicache_size: 300", "sglang"), "-f", "json")
    assert r.exit_code == 1
    assert "Requesting 300.00 GB but only have 248.66 GB free" in json.loads(r.stdout)["deployments"][0]["problems"][0]
