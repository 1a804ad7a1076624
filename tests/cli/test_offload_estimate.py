"""Issue 22's "Done when" on `kvcalc estimate`: "with 2 TB of host memory per node and a 12k-token
system prompt, how many agent sessions stay warm, and what do I pass to the engine?" for vLLM
native offload, LMCache and SGLang HiCache, and the refusal when the host cannot hold it (about
4.8 TB pinned on a 3 TB node, LMCache/LMCache#2777-style).

Llama-3.1-70B (meta-llama/Llama-3.1-70B config.json: 80 layers, 8 KV heads of 128, bf16) on
8 x H200 (tp 8), sessions of 32,768 tokens, batch 64, the 12,288-token prompt shared.
One rank's bytes per token: 80 layers x 2 (K, V) x 1 KV head (8 / tp 8) x 128 x 2 B = 40,960 B;
a vLLM block of 16 tokens: 655,360 B.

The GPU tier is the estimate's own plan (kvcalc/data/gpus.yaml h200: 140.40 GiB): 0.9 x
150,754,820,096 B = 135,679,338,086 B - weights 17,640,734,720 - activations 402,292,736 -
CUDA context 524,288,000 = 117,112,022,630 B of KV memory per rank (vLLM's "Available KV cache
memory: 109.07 GiB"): 117,112,022,630 // 655,360 = 178,698 blocks, 178,697 usable."""

from __future__ import annotations

import json

import pytest

BASE = (
    "estimate",
    "llama-3.1-70b",
    "--tp",
    "8",
    "--gpu",
    "h200",
    "-s",
    "32k",
    "--batch",
    "64",
    "--shared-prefix",
    "12k",
)
TWO_TB = ("--host-memory", "2TB")
THREE_TB = ("--host-memory", "3TB")


def run_json(cli, *args):
    r = cli(*BASE, *args, "-f", "json")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_the_gpu_tier_is_the_estimates_own_plan(cli):
    d = run_json(cli, "--engine", "vllm", "--kv-offloading-size", "1600", *TWO_TB)
    assert d["kv_memory_bytes"] == 117_112_022_630
    assert d["usable_blocks"] == 178_697
    # the shared prefix on the GPU: 768 blocks once, 2,048 - 768 = 1,280 own: (178,697 - 768) // 1,280 = 139;
    # unshared 178,697 // 2,048 = 87 (vLLM's "Maximum concurrency ... 87.25x")
    p = d["shared_prefix"]
    assert (p["shared_blocks"], p["own_blocks_per_request"]) == (768, 1280)
    assert (p["max_concurrency_shared"], p["max_concurrency_unshared"]) == (139, 87)
    # occupancy at the batch of 64: (768 + 64 x 1,280) / 178,697 = 82,688 / 178,697
    assert p["kv_occupancy"] == pytest.approx(82_688 / 178_697)


@pytest.mark.parametrize(
    ("args", "flags", "cpu_tokens", "per_rank", "per_node", "sessions"),
    [
        # vLLM 0.33 native: 1,600 x 2^30 = 1,717,986,918,400 B for all 8 ranks (vllm/config/vllm.py), chunks of
        # one block of every rank: 8 x 655,360 = 5,242,880 B (cpu/spec.py): 327,680 chunks = 5,242,880 tokens;
        # a session 2,048 chunks, the prompt's 768 once: (327,680 - 768) // 1,280 = 255
        (
            ("--engine", "vllm", "--kv-offloading-size", "1600"),
            ["--kv-offloading-size 1600", "--kv-offloading-backend native"],
            5_242_880,
            214_748_364_800,
            1_717_986_918_400,
            255,
        ),
        # LMCache in-process: 200 x 1024^3 = 214,748,364,800 B per TP worker (cache_engine.py; #2901), chunks of
        # 256 tokens x 40,960 = 10,485,760 B: 20,480 chunks = 5,242,880 tokens; a session 128 chunks, the prompt's
        # 48 once: (20,480 - 48) // 80 = 255; 8 workers pin 1,717,986,918,400 B
        (
            ("--engine", "vllm", "--lmcache-cpu-size", "200"),
            [
                "LMCACHE_MAX_LOCAL_CPU_SIZE=200",
                "LMCACHE_CHUNK_SIZE=256",
                "LMCACHE_LOCAL_CPU=True",
                'vllm serve ... --kv-transfer-config \'{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}\'',
            ],
            5_242_880,
            214_748_364_800,
            1_717_986_918_400,
            255,
        ),
        # SGLang 0.5.23 --hicache-size 200: GB per rank (pool_host/base.py): 200e9 // 40,960 = 4,882,812 tokens
        # + one padding page (page 1) = 4,882,813 x 40,960 = 200,000,020,480 B; page 1 reuses all 12,288 prompt
        # tokens: (4,882,813 - 12,288) // (32,768 - 12,288) = 237
        (
            ("--engine", "sglang", "--hicache-size", "200"),
            ["--enable-hierarchical-cache", "--hicache-size 200"],
            4_882_813,
            200_000_020_480,
            1_600_000_163_840,
            237,
        ),
    ],
    ids=["vllm-native", "lmcache", "sglang-hicache-size"],
)
def test_sessions_warm_and_what_to_pass(cli, args, flags, cpu_tokens, per_rank, per_node, sessions):
    o = run_json(cli, *args, *TWO_TB)["offload"]
    assert o["flags"] == flags
    assert o["tiers"][1]["tokens_per_rank"] == cpu_tokens
    assert (o["host_bytes_per_rank"], o["host_bytes_per_node"], o["ranks_per_node"]) == (per_rank, per_node, 8)
    assert o["host_bytes_per_node"] <= 2 * 10**12 and o["fits_host"] is True
    assert o["tiers"][1]["sessions"] == o["sessions_warm"] == sessions
    assert o["session_tokens"] == 32_768


def test_sglang_sizes_itself_to_the_host(cli):
    """--enable-hierarchical-cache alone (hicache_auto_size.py): per-rank budget (2e12 - 10 x 2^30) // 8 =
    248,657,822,720 B, x 0.8 = 198,926,258,176; ratio min(2.0, 198,926,258,176 x 0.95 / device pool bytes
    117,112,053,760) = 1.6137; host tokens int(2,859,180 x 1.6137...) + 1 = 4,613,767; sessions
    (4,613,767 - 12,288) // 20,480 = 224."""
    o = run_json(cli, "--engine", "sglang", "--enable-hierarchical-cache", *TWO_TB)["offload"]
    assert o["tiers"][0]["bytes_per_rank"] == 117_112_053_760
    assert o["tiers"][1]["tokens_per_rank"] == 4_613_767
    assert o["host_bytes_per_rank"] == 4_613_767 * 40_960
    assert o["sessions_warm"] == 224
    assert o["log_lines"][0] == (
        "HiCache auto-sizing: ratio 2.000 -> 1.614; 185.3 GiB host memory per rank (fraction 0.80, 8 ranks on "
        "this host), host pools 176.0 GiB."
    )
    assert o["log_lines"][-1] == "Allocating kv hierarchical KV host pool: 4613767 tokens, 188.98 GB host memory."


@pytest.mark.parametrize(
    ("args", "message"),
    [
        # 4,470 GiB = 4,799,628,165,120 B (4.8 TB) for all 8 ranks; the largest that fits 3e12 B: 2793.96
        (
            ("--engine", "vllm", "--kv-offloading-size", "4470"),
            "the vllm-native tier pins 4,470.00 GiB (4,799.63 GB) of host memory per node (8 ranks x 558.75 GiB "
            "(599.95 GB)), more than --host-memory 2,793.97 GiB (3,000.00 GB): lower --kv-offloading-size to at "
            "most 2793.96",
        ),
        # 600 GiB per worker x 8 = 4,800 GiB; 3e12 / 8 / 2^30 = 349.24
        (
            ("--engine", "vllm", "--lmcache-cpu-size", "600"),
            "the lmcache tier pins 4,800.00 GiB (5,153.96 GB) of host memory per node (8 ranks x 600.00 GiB "
            "(644.25 GB)), more than --host-memory 2,793.97 GiB (3,000.00 GB): lower LMCACHE_MAX_LOCAL_CPU_SIZE "
            "(--lmcache-cpu-size) to at most 349.24",
        ),
        # 600 GB per rank (600e9 // 40,960 + 1 = 14,648,438 tokens = 600,000,020,480 B) x 8 = 4.8 TB against
        # SGLang's per-rank budget (3e12 - 10 x 2^30) // 8 = 373,657,822,720 B
        (
            ("--engine", "sglang", "--hicache-size", "600"),
            "SGLang refuses: Not enough host memory available. Requesting 600.00 GB but only have 373.66 GB free. "
            "Please reduce the size of the hierarchical cache. (8 ranks x 558.79 GiB (600.00 GB) against "
            "(--host-memory 2,793.97 GiB (3,000.00 GB) - 10 GiB reserve) / 8)",
        ),
    ],
    ids=["vllm-native", "lmcache", "sglang"],
)
def test_refused_with_the_figures_when_the_host_cannot_hold_it(cli, args, message):
    r = cli(*BASE, *args, *THREE_TB)
    assert r.exit_code == 2
    assert message in " ".join(r.stderr.split())


def test_tables_fit_80_columns_and_the_log_lines_stay_whole(cli):
    r = cli(*BASE, "--engine", "vllm", "--kv-offloading-size", "1600", *TWO_TB)
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    tables = [x for x in lines if x[:1] in "│┃┏┡└┌├┗╇━"]
    assert all(len(x) <= 80 for x in tables), [x for x in tables if len(x) > 80]
    assert "Creating offloading spec with name: CPUOffloadingSpec" in lines
    assert "sessions: of 32,768 tokens each" in r.stdout
    assert "Load the 12,288-token prefix or recompute it (h200)" in r.stdout


@pytest.mark.parametrize(
    ("args", "option", "words"),
    [
        (("llama-3.1-8b", "-s", "8k", "--shared-prefix", "1k"), "--shared-prefix", "give --engine"),
        (("llama-3.1-8b", "-s", "8k", "--engine", "vllm", "--link", "pcie5-x16"), "--link", "applies to"),
        (("llama-3.1-8b", "-s", "8k", "--engine", "vllm", "--gpus-per-node", "4"), "--gpus-per-node", "applies to"),
        (("llama-3.1-8b", "-s", "8k,16k", "--engine", "vllm", "--shared-prefix", "1k"), "--seq-len", "one --seq-len"),
        (("llama-3.1-8b", "-s", "8k", "--engine", "sglang", "--kv-offloading-size", "10"), "--kv-offloading-size", ""),
    ],
)
def test_refused_not_ignored(cli, args, option, words):
    r = cli("estimate", *args)
    assert r.exit_code == 2, r.output
    err = " ".join(r.stderr.split())
    assert option in err and words in err


def test_the_python_api_gives_the_cli_figures(cli):
    import kvcalc
    from kvcalc.engines.offload_rules import OffloadSettings

    d = run_json(cli, "--engine", "vllm", "--kv-offloading-size", "1600", *TWO_TB)
    r = kvcalc.estimate(
        "llama-3.1-70b",
        seq_len="32k",
        batch=64,
        tp=8,
        gpu="h200",
        engine="vllm",
        offload=OffloadSettings(kv_offloading_size="1600", host_memory_bytes=2 * 10**12, shared_prefix_tokens=12_288),
    )
    assert r.offload.model_dump(mode="json") == d["offload"]
    assert r.shared_prefix.model_dump(mode="json") == d["shared_prefix"]
    assert [x.model_dump(mode="json") for x in r.load_or_recompute] == d["load_or_recompute"]
    from kvcalc.errors import KvcalcError

    with pytest.raises(KvcalcError, match="more than --host-memory"):
        kvcalc.estimate(
            "llama-3.1-70b",
            seq_len="32k",
            tp=8,
            engine="vllm",
            offload=OffloadSettings(kv_offloading_size="4470", host_memory_bytes=3 * 10**12),
        )


@pytest.mark.parametrize(
    "link, words",
    [
        ("nvme-gen5,,", "error: --link: 'nvme-gen5,,' has an empty item"),  # the stray comma was dropped
        ("", "error: --link is empty"),  # was every link, as if --link were left out
    ],
)
def test_link_list_with_an_empty_item_is_refused(cli, link, words):
    r = cli(
        "estimate", "llama-3.1-70b", "--engine", "vllm", "--tp", "8", "--gpu", "h200", "-s", "32k",
        "--shared-prefix", "12k", "--link", link,
    )  # fmt: skip
    assert r.exit_code == 2 and len(r.stderr.splitlines()) == 1, r.output
    assert r.stderr.startswith(words), r.stderr
