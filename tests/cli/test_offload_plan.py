"""`kvcalc plan` with an offload tier (issue 22): each layout's sessions kept warm over the GPU and the
host tier, the host refusals dropping layouts with the figures, a --sessions target, the engine's
offload flags on the launch line and in --write-deployment's `offload:` (which `kvcalc check` reads).

Llama-3.1-70B (meta-llama/Llama-3.1-70B config.json: 80 layers, 8 KV heads of 128) on H200, 64
sequences of 32,768 tokens; plan picks fp8 KV (1 B) on H200. One rank at tp t holds 8 / t KV heads:
bytes per token 80 x 2 x (8 / t) x 128 x 1 B = 163,840 / t; a vLLM block of 16 tokens 2,621,440 / t B."""

from __future__ import annotations

import json

import pytest

BASE = (
    "plan",
    "llama-3.1-70b",
    "-s",
    "32k",
    "--concurrency",
    "64",
    "--gpu",
    "h200",
    "--max-gpus",
    "8",
    "--shared-prefix",
    "12k",
)


def run_json(cli, *args):
    r = cli(*BASE, *args, "-f", "json")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_vllm_native_sessions_per_layout_and_the_launch_line(cli):
    d = run_json(cli, "--kv-offloading-size", "1600", "--host-memory", "2TB")
    top = d["layouts"][0]
    assert (top["count"], top["tp"], top["dp"]) == (4, 4, 1)
    o = top["offload"]
    # tp 4: a chunk is one block of each of the 4 ranks, 4 x 655,360 = 2,621,440 B; 1,600 x 2^30 /
    # 2,621,440 = 655,360 chunks; a session 2,048, the 12,288-token prompt's 768 once:
    # (655,360 - 768) // 1,280 = 511
    assert o["num_chunks"] == 655_360 and o["bytes_per_chunk"] == 2_621_440
    assert top["sessions_warm"] == o["sessions_warm"] == 511
    # 4 ranks of one engine on the node: 1,600 GiB = 1,717,986,918,400 B
    assert (o["ranks_per_node"], o["host_bytes_per_node"]) == (4, 1_717_986_918_400)
    assert top["launch"].endswith(" --kv-offloading-size 1600 --kv-offloading-backend native")
    # 6 x h200 is tp 2 x dp 3: three engines of 1,600 GiB each on one node; at most
    # floor(2e12 x 100 / (3 x 2^30)) / 100 = 620.88 each
    assert any(
        n.startswith("dropped 6 x h200: the vllm-native tier pins 4,800.00 GiB (5,153.96 GB) of host memory per node")
        and n.endswith("lower --kv-offloading-size to at most 620.88")
        for n in d["notes"]
    ), d["notes"]


def test_sglang_hicache_per_rank_and_replicas(cli):
    d = run_json(cli, "--engine", "sglang", "--hicache-size", "200", "--host-memory", "2TB")
    by_count = {lay["count"]: lay for lay in d["layouts"]}
    eight = by_count[8]
    # tp 8: 20,480 B per token per rank; 200e9 // 20,480 = 9,765,625 + one padding page = 9,765,626 tokens;
    # (9,765,626 - 12,288) // (32,768 - 12,288) = 476; 8 ranks x 9,765,626 x 20,480 B
    assert eight["offload"]["tiers"][1]["tokens_per_rank"] == 9_765_626
    assert eight["sessions_warm"] == 476
    assert eight["offload"]["host_bytes_per_node"] == 8 * 9_765_626 * 20_480
    # 6 x h200, tp 2 x dp 3: 81,920 B per token; 200e9 // 81,920 + 1 = 2,441,407 tokens a rank;
    # (2,441,407 - 12,288) // 20,480 = 118 per engine x 3 replicas = 354
    six = by_count[6]
    assert (six["tp"], six["dp"], six["sessions_warm"]) == (2, 3, 354)
    assert six["launch"].endswith("--enable-hierarchical-cache --hicache-size 200")


def test_sessions_target_drops_the_layouts_that_keep_fewer_warm(cli):
    d = run_json(cli, "--engine", "sglang", "--hicache-size", "200", "--host-memory", "2TB", "--sessions", "400")
    assert [lay["count"] for lay in d["layouts"]] == [7, 8]  # 7 x tp 1: 59 x 7 = 413; 8 x tp 8: 476
    assert [lay["rank"] for lay in d["layouts"]] == [1, 2]
    assert any("keeps fewer than --sessions 400 warm" in n for n in d["notes"])


def test_nothing_the_host_holds_exits_1_with_the_figures(cli):
    # 4,470 GiB (4.8 TB) a tp-8 engine on a 3 TB node; every smaller tp puts more engines on the node
    r = cli(*BASE, "--kv-offloading-size", "4470", "--host-memory", "3TB")
    assert r.exit_code == 1, r.output
    out = " ".join(r.stdout.split())
    assert "layouts meet the targets, but none with the offload tier (the notes say why):" in out
    assert "dropped 8 x h200: the vllm-native tier pins 4,470.00 GiB (4,799.63 GB)" in out
    assert "lower --kv-offloading-size to at most 2793.96" in out


def test_lmcache_environment_before_the_command(cli):
    d = run_json(cli, "--lmcache-cpu-size", "200", "--host-memory", "2TB")
    launch = d["layouts"][0]["launch"]
    assert launch.startswith("LMCACHE_MAX_LOCAL_CPU_SIZE=200 LMCACHE_CHUNK_SIZE=256 LMCACHE_LOCAL_CPU=True vllm serve ")
    assert launch.endswith(' --kv-transfer-config \'{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}\'')


def test_the_written_deployment_carries_the_tier_and_check_passes(cli, tmp_path):
    f = tmp_path / "dep.yaml"
    r = cli(*BASE, "--kv-offloading-size", "1600", "--host-memory", "2TB", "--write-deployment", str(f))
    assert r.exit_code == 0, r.output
    import yaml

    data = yaml.safe_load(f.read_text())
    assert data["offload"] == {
        "engine": "vllm",
        "kv_offloading_size": "1600",
        "host_memory": 2 * 10**12,
        "shared_prefix": 12_288,
    }
    c = cli("check", str(f), "-f", "json")
    assert c.exit_code == 0, c.output


def test_table_lines(cli):
    r = cli(*BASE, "--kv-offloading-size", "1600", "--host-memory", "2TB")
    assert r.exit_code == 0, r.output
    assert "sessions of 32,768 tokens kept warm (GPU, offload tier); host per node:" in r.stdout
    assert "  #1: 511 (GPU 138, CPU 511); host 1,717.99 GB of 2,000.00 GB" in r.stdout


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (("--sessions", "5"), "--sessions"),
        (("--host-memory", "2TB"), "--host-memory"),
        (("--engine", "llamacpp", "--no-kv-offload"), "--engine"),
    ],
)
def test_refused_not_ignored(cli, args, option):
    r = cli("plan", "llama-3.1-8b", "-s", "8k", "--gpu", "h200", *args)
    assert r.exit_code == 2, r.output
    assert option in r.stderr


def test_the_python_api_gives_the_cli_figures(cli):
    import kvcalc
    from kvcalc.engines.offload_rules import OffloadSettings

    d = run_json(cli, "--kv-offloading-size", "1600", "--host-memory", "2TB")
    r = kvcalc.plan(
        "llama-3.1-70b",
        seq_len="32k",
        concurrency=64,
        gpus="h200",
        max_gpus=8,
        offload=OffloadSettings(kv_offloading_size="1600", host_memory_bytes=2 * 10**12, shared_prefix_tokens=12_288),
    )
    assert [lay.model_dump(mode="json") for lay in r.layouts] == d["layouts"]


HICACHE_DP = (
    "plan", "llama-3.1-70b", "-s", "32k", "--concurrency", "64", "--gpu", "h200", "--engine", "sglang",
    "--enable-hierarchical-cache", "--host-memory", "2TB", "--sessions", "400", "--top", "3",
)  # fmt: skip


def test_sessions_kept_warm_whole_at_80_columns(cli):
    """The table output's sessions lines (`report.offload.plan_sessions_lines`) carry the JSON's
    figures whole: a layout line past 80 columns ("  #1: 562 = 281 x 2 replicas (GPU 187, host
    281); host 1,511.84 GB of 2,000.00 GB" is 81) puts its host figures on a second line."""
    d = json.loads(cli(*HICACHE_DP, "-f", "json").stdout)
    r = cli(*HICACHE_DP)
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    at = lines.index("sessions of 32,768 tokens kept warm (GPU, offload tier); host per node:")
    block = lines[at + 1 : at + 1 + 2 * len(d["layouts"])]
    assert all(len(line) <= 80 for line in block)
    for i, lay in enumerate(d["layouts"]):
        o = lay["offload"]
        head, host = block[2 * i], block[2 * i + 1]
        per = o["sessions_warm"]
        assert head.startswith(f"  #{lay['rank']}: {lay['sessions_warm']:,} = {per:,} x {lay['dp']} replicas (GPU ")
        assert host == f"      host {o['host_bytes_per_node'] / 1e9:,.2f} GB of 2,000.00 GB"
    top = d["layouts"][0]
    assert (top["dp"], top["sessions_warm"], top["offload"]["sessions_warm"]) == (2, 562, 281)


def test_sessions_warm_column_in_markdown(cli):
    d = json.loads(cli(*HICACHE_DP, "-f", "json").stdout)
    md = cli(*HICACHE_DP, "-f", "markdown").stdout.splitlines()
    head = next(line for line in md if line.startswith("| # |"))
    assert head.endswith("| sessions warm |")
    rows = [line for line in md if line.startswith("| 1 |") or line.startswith("| 2 |") or line.startswith("| 3 |")]
    assert [row.rsplit("|", 2)[1].strip() for row in rows] == [f"{x['sessions_warm']:,}" for x in d["layouts"]]
    plain = cli("plan", "llama-3.1-70b", "-s", "32k", "--concurrency", "64", "--gpu", "h200", "-f", "markdown")
    assert "sessions warm" not in plain.stdout  # no offload tier: no column
