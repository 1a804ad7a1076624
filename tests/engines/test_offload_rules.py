"""Each engine's offload rule, exactly: vLLM 0.33 native (`--kv-offloading-size`, GiB for all
ranks together), LMCache (GiB per worker; the multi-process server's GiB per node), SGLang
0.5.23 HiCache (`--hicache-size` GB per rank, `--hicache-ratio` per rank, auto-sizing), llama.cpp
`--no-kv-offload`; the host-memory refusal with its figures.

Model: Llama-3.1-8B (configs/models/llama-3.1-8b.yaml, meta-llama/Llama-3.1-8B config.json: 32
layers, 8 KV heads of 128, bf16): 2 x 32 x 8 x 128 x 2 B = 131,072 B per token at tp 1;
Llama-3.1-70B (80 layers, 8 KV heads of 128): 327,680 B per token, 40,960 per rank at tp 8."""

from __future__ import annotations

import json

import pytest

GiB = 1 << 30


def words(args: tuple[str, ...]) -> list[str]:
    """Command-line words from lines of them ("llama-3.1-8b --engine vllm" is two): no value here
    has a space."""
    return [w for a in args for w in a.split()]


@pytest.fixture
def cap(cli):
    """`kvcalc capacity ARGS -f json` as a dict; asserts it succeeded. ARGS as one line or several
    words (`words`)."""

    def run(*args: str) -> dict:
        r = cli("capacity", *words(args), "-f", "json")
        assert r.exit_code == 0, r.output
        return json.loads(r.stdout)

    return run


@pytest.fixture
def refused(cli):
    """The one error line of a `kvcalc capacity ARGS` that exits 2 (ARGS as `cap` takes them)."""

    def run(*args: str) -> str:
        r = cli("capacity", *words(args))
        assert r.exit_code == 2, r.output
        return " ".join(r.stderr.split())

    return run


# ----- vLLM 0.33 native: vllm/config/vllm.py, vllm/v1/kv_offload/cpu/spec.py, cpu/common.py -------------


def test_vllm_native_8b_tp1(cap):
    o = cap("llama-3.1-8b --engine vllm --kv-memory 20GiB -L 32768 --kv-offloading-size 100 --host-memory 2TB")[
        "offload"
    ]
    # 100 x 2^30 = 107,374,182,400 B; block 16 x 131,072 = 2,097,152 B (4 KiB-aligned): 51,200 chunks
    assert o["num_chunks"] == 51_200 and o["bytes_per_chunk"] == 2_097_152
    assert o["host_bytes_per_rank"] == o["host_bytes_per_node"] == 107_374_182_400
    gpu, cpu = o["tiers"]
    # GPU: 20 GiB / 2 MiB = 10,240 blocks, 10,239 usable; a session of 32,768 tokens is 2,048 blocks: 4
    assert (gpu["tokens_per_rank"], gpu["sessions"]) == (163_840, 4)
    # CPU: 51,200 chunks x 16 tokens = 819,200 tokens; 51,200 // 2,048 = 25 sessions
    assert (cpu["tokens_per_rank"], cpu["sessions"]) == (819_200, 25)
    assert o["sessions_warm"] == 25  # inclusive tiers: the larger
    assert o["flags"] == ["--kv-offloading-size 100", "--kv-offloading-backend native"]
    assert o["log_lines"] == ["Creating offloading spec with name: CPUOffloadingSpec"]  # kv_offload/factory.py
    assert o["fits_host"] is True


def test_vllm_native_is_for_all_ranks_together(cap):
    o = cap("llama-3.1-70b --engine vllm --kv-memory 30GiB -L 32768 --tp 8 --kv-offloading-size 1000")["offload"]
    # cache.py: "When TP > 1, this is the total buffer size summed across all TP ranks".
    # rank block 16 x 40,960 = 655,360 B; chunk = 8 ranks x 655,360 = 5,242,880 B; 1,000 GiB / 5,242,880 = 204,800
    assert o["num_chunks"] == 204_800 and o["bytes_per_chunk"] == 5_242_880
    # each rank: 204,800 x 655,360 = 134,217,728,000 B (125 GiB), not 1,000 GiB; the node: all 1,000 GiB
    assert o["host_bytes_per_rank"] == 134_217_728_000 == 125 * GiB
    assert o["host_bytes_per_node"] == 1000 * GiB
    assert o["tiers"][1]["tokens_per_rank"] == 204_800 * 16


def test_vllm_native_fraction_and_blocks_per_chunk(cap):
    o = cap(
        "llama-3.1-8b --engine vllm --kv-memory 20GiB -L 32768 --kv-offloading-size 1.1 --offload-blocks-per-chunk 4"
    )["offload"]
    # int(1.1 x 2^30) = 1,181,116,006; chunk 4 x 2,097,152 = 8,388,608: 140 chunks of 64 tokens
    assert (o["num_chunks"], o["chunk_tokens"], o["bytes_per_chunk"]) == (140, 64, 8_388_608)
    assert o["tiers"][1]["sessions"] == 140 // 512  # cdiv(32,768, 64) = 512 chunks a session: 0
    assert '"blocks_per_chunk":4' in o["flags"][2] and '"cpu_bytes_to_use":1181116006' in o["flags"][2]


def test_vllm_native_sliding_window_groups(cap):
    """gpt-oss-20b (configs/models/gpt-oss-20b.yaml: 24 layers [sliding 128, full], 8 KV heads of 64, bf16):
    two vLLM groups of 12 layers; a block is 12 x 16 x 8 x 128 x 2 B = 393,216 B (96 pages of 4 KiB).
    10 GiB // 393,216 = 27,306 chunks. A 32,768-token request takes cdiv(32,768, 16) = 2,048 chunks of the
    full group + cdiv(128, 16) = 8 of the sliding one (offloading/config.py get_sliding_window_size_in_chunks):
    2,056; vLLM reports 27,306 x 32,768 // 2,056 = 435,196 tokens. A 12,000-token shared prefix is 750 blocks
    of the full group held once: (27,306 - 750) // (2,056 - 750) = 20 sessions."""
    o = cap("gpt-oss-20b --engine vllm --kv-memory 20GiB -L 32768 --kv-offloading-size 10 --shared-prefix 12000")[
        "offload"
    ]
    assert (o["num_chunks"], o["bytes_per_chunk"]) == (27_306, 393_216)
    assert (o["tiers"][1]["tokens_per_rank"], o["tiers"][1]["sessions"]) == (435_196, 20)
    # GPU: 20 GiB // 393,216 = 54,613 blocks (54,612 usable); a running request holds the profile's 3,081 blocks
    # (its sliding group keeps the window and 0.33's in-flight tokens); (54,612 - 750) // (3,081 - 750) = 23
    assert o["tiers"][0]["sessions"] == 23


# ----- LMCache 0.5.6: lmcache/v1/cache_engine.py (per TP worker), distributed/config.py (per server) -----


def test_lmcache_in_process_is_gib_per_worker(cap):
    o = cap("llama-3.1-70b --engine vllm --kv-memory 30GiB -L 32768 --tp 4 --lmcache-cpu-size 5")["offload"]
    # LMCache/LMCache#2901: per TP worker; int(5.0 x 1024**3) = 5,368,709,120 B each, logged as "5.0 GB"
    assert o["host_bytes_per_rank"] == 5 * GiB and o["host_bytes_per_node"] == 4 * 5 * GiB
    # rank bytes per token at tp 4: 327,680 / 4 = 81,920; chunk 256 tokens = 20,971,520 B: 256 chunks
    assert o["num_chunks"] == 256 and o["tiers"][1]["tokens_per_rank"] == 65_536
    assert o["flags"][0] == "LMCACHE_MAX_LOCAL_CPU_SIZE=5"
    assert "'max_local_cpu_size': '5.0 GB'" in o["log_lines"][0]


def test_lmcache_multiprocess_server_is_gib_per_node(cap):
    o = cap(
        "llama-3.1-70b --engine vllm --kv-memory 30GiB -L 32768 --tp 4 --kv-offloading-backend lmcache --lmcache-l1-size 100"
    )["offload"]
    # --l1-size-gb 100 -> int(100 x (1 << 30)) for the node; a chunk of all 4 ranks = 83,886,080 B: 1,280 chunks
    assert o["host_bytes_per_node"] == 100 * GiB and o["num_chunks"] == 1_280
    assert o["backend"] == "lmcache-mp"


# ----- SGLang 0.5.23 HiCache: mem_cache/pool_host/base.py, hicache_auto_size.py ---------------------------


def test_sglang_hicache_size_is_decimal_gb_per_rank(cap):
    o = cap("llama-3.1-8b --engine sglang --kv-memory 20GiB -L 32768 --hicache-size 100")["offload"]
    # int(100e9 // 131,072) = 762,939 tokens + one padding page of 1 = 762,940; x 131,072 B = 100,000,071,680
    assert o["tiers"][1]["tokens_per_rank"] == 762_940
    assert o["host_bytes_per_rank"] == 762_940 * 131_072 == 100_000_071_680
    assert o["log_lines"] == ["Allocating kv hierarchical KV host pool: 762940 tokens, 100.00 GB host memory."]
    assert o["flags"] == ["--enable-hierarchical-cache", "--hicache-size 100"]
    # sessions of 32,768: GPU 163,840 // 32,768 = 5; host 762,940 // 32,768 = 23
    assert [t["sessions"] for t in o["tiers"]] == [5, 23] and o["sessions_warm"] == 23


def test_sglang_hicache_ratio_is_per_rank(cap):
    o = cap("llama-3.1-8b --engine sglang --kv-memory 20GiB -L 32768 --dp 8 --hicache-ratio 3")["offload"]
    # int(163,840 x 3.0) = 491,520 + 1 = 491,521 tokens per rank; 8 ranks on the node
    assert o["tiers"][1]["tokens_per_rank"] == 491_521
    assert o["host_bytes_per_node"] == 8 * 491_521 * 131_072


@pytest.mark.parametrize("flag", [("--hicache-host-memory-fraction", "0.8"), ("--enable-hierarchical-cache",)])
def test_sglang_auto_ratio_fits_the_host(cap, flag):
    o = cap("llama-3.1-8b --engine sglang --kv-memory 20GiB -L 32768 --dp 8 --host-memory 400GB", *flag)["offload"]
    # budget (400e9 - 10 GiB) // 8 = 48,657,822,720; x 0.8 = 38,926,258,176; x 0.95 / 21,474,967,552 device
    # bytes (163,841 x 131,072) = 1.72200...: int(163,840 x 1.72200...) + 1 = 282,133 tokens
    assert o["tiers"][1]["tokens_per_rank"] == 282_133
    assert o["log_lines"][0].startswith("HiCache auto-sizing: ratio 2.000 -> 1.722; 36.3 GiB host memory per rank")


# ----- llama.cpp: src/llama-kv-cache.cpp (offload_kqv) -----------------------------------------------


def test_llamacpp_no_kv_offload(cap):
    o = cap("llama-3.1-8b --engine llamacpp --ctx-size 8192 --no-kv-offload")["offload"]
    # f16 cache: 8,192 cells x 131,072 B = 1,073,741,824 B (1,024 MiB), all of it in host memory
    assert o["host_bytes_per_rank"] == 1_073_741_824 and o["tiers"][0]["bytes_per_rank"] == 0
    assert o["log_lines"] == ["llama_kv_cache:        CPU KV buffer size =  1024.00 MiB"]
    assert o["flags"] == ["--no-kv-offload"]


def test_vllm_native_mla_replicated_layout(cap):
    """DeepSeek-V3 (61 layers, MLA latent 512 + 64, bf16) at tp 8 on one node: offloading/config.py
    replicated_layout (use_mla, kv_tp_replicas == tp, one node, mp): one copy of each block for all 8
    ranks. Block 16 x 61 x 576 x 2 B = 1,124,352 B, padded to 1,126,400 (275 pages of 4 KiB);
    100 GiB // 1,126,400 = 95,325 chunks (not 100 GiB // (8 x 1,124,352) = 11,937)."""
    o = cap("deepseek-v3 --engine vllm --kv-memory 60GiB -L 32768 --tp 8 --kv-offloading-size 100")["offload"]
    assert (o["num_chunks"], o["bytes_per_chunk"]) == (95_325, 1_126_400)
    assert o["host_bytes_per_node"] == 95_325 * 1_126_400 == 107_374_080_000
    assert o["tiers"][1]["tokens_per_rank"] == 95_325 * 16


def test_llamacpp_layers_left_on_the_cpu(cap):
    o = cap("llama-3.1-8b --engine llamacpp --ctx-size 8192 -ngl 16 --host-memory 64GB")["offload"]
    # -ngl 16 of 32 layers: the first 16 stay on the CPU with their KV: 16 x 8,192 x 4,096 B = 536,870,912 B
    assert o["host_bytes_per_rank"] == 536_870_912 and o["tiers"][0]["bytes_per_rank"] == 536_870_912
    assert o["flags"][0].startswith("--n-gpu-layers 16") and o["fits_host"] is True
    assert o["log_lines"] == ["llama_kv_cache:        CPU KV buffer size =   512.00 MiB"]


# ----- refusals, each with the words (and figures) it must say ------------------------------------------

REFUSALS = [
    # SemiAnalysisAI/InferenceX#1262: GB passed where vLLM reads GiB; 100 x 10^9 / 2^30 = 93.13
    pytest.param(
        "llama-3.1-8b --engine vllm --kv-memory 20GiB --kv-offloading-size 100GB",
        ("vLLM reads --kv-offloading-size in GiB (2^30 bytes), not GB", "pass --kv-offloading-size 93.13"),
        id="vllm-decimal-gb-100",
    ),
    # 2,000 x 10^9 / 2^30 = 1,862.65
    pytest.param(
        "llama-3.1-8b --engine vllm --kv-memory 20GiB --kv-offloading-size 2000GB",
        ("vLLM reads --kv-offloading-size in GiB (2^30 bytes), not GB", "pass --kv-offloading-size 1862.65"),
        id="vllm-decimal-gb-2000",
    ),
    # 3,000 GiB = 3,221.23 GB pinned on one node (8 ranks x 375 GiB) against 2 TB
    pytest.param(
        "llama-3.1-70b --engine vllm --kv-memory 30GiB -L 32k --tp 8 --kv-offloading-size 3000 --host-memory 2TB",
        (
            "pins 3,000.00 GiB (3,221.23 GB) of host memory per node (8 ranks x 375.00 GiB (402.65 GB))",
            "more than --host-memory 1,862.65 GiB (2,000.00 GB)",
        ),
        id="vllm-host-memory",
    ),
    # native offload is modelled for vLLM 0.33 only; --hicache-ratio is SGLang's
    pytest.param(
        "llama-3.1-8b --engine vllm --vllm-version 0.11 --kv-memory 20GiB --kv-offloading-size 10",
        ("vLLM 0.33",),
        id="vllm-native-before-0.33",
    ),
    pytest.param(
        "llama-3.1-8b --engine vllm --kv-memory 20GiB --hicache-ratio 2", ("sglang's",), id="vllm-sglang-flag"
    ),
    # vllm/config/vllm.py: the lmcache backend does not receive --kv-offloading-size
    pytest.param(
        "llama-3.1-8b --engine vllm --kv-memory 20GiB --kv-offloading-backend lmcache --kv-offloading-size 100",
        ("vLLM 0.33 does not pass --kv-offloading-size to LMCache",),
        id="lmcache-no-kv-offloading-size",
    ),
    # 5 x 10^9 / 2^30 = 4.66
    pytest.param(
        "llama-3.1-8b --engine vllm --kv-memory 20GiB --lmcache-cpu-size 5GB",
        ("pass --lmcache-cpu-size 4.66",),
        id="lmcache-decimal-gb",
    ),
    # one LMCache server per node: 3,000 GiB against 2 TB
    pytest.param(
        "llama-3.1-70b --engine vllm --kv-memory 30GiB -L 32k --tp 4 --lmcache-l1-size 3000 --host-memory 2TB",
        ("lower the server's --l1-size-gb (--lmcache-l1-size) to at most 1862.64",),
        id="lmcache-server-host-memory",
    ),
    # 8 ranks x --hicache-size 300: 300,000,083,968 B each against (2e12 - 10 GiB) // 8 = 248,657,822,720
    pytest.param(
        "llama-3.1-8b --engine sglang --kv-memory 20GiB -L 32768 --dp 8 --hicache-size 300 --host-memory 2TB",
        (
            "Not enough host memory available. Requesting 300.00 GB but only have 248.66 GB free. Please reduce "
            "the size of the hierarchical cache.",
        ),
        id="sglang-host-memory-in-its-own-words",
    ),
    pytest.param(
        "llama-3.1-8b --engine sglang --kv-memory 20GiB --hicache-ratio 2 --hicache-host-memory-fraction 0.5",
        ("SGLang drops it",),
        id="sglang-ratio-and-fraction",
    ),
    # GiB where SGLang reads GB: 100 x 2^30 / 10^9 = 107.37 -> a whole number of GB: 107
    pytest.param(
        "llama-3.1-8b --engine sglang --kv-memory 20GiB --hicache-size 100GiB",
        ("pass --hicache-size 107",),
        id="sglang-gib-where-it-reads-gb",
    ),
    # 131,072 cells x 131,072 B = 16 GiB of host memory against 10 GB
    pytest.param(
        "llama-3.1-8b --engine llamacpp --ctx-size 131072 --no-kv-offload --host-memory 10GB",
        ("the llamacpp-host tier takes 16.00 GiB (17.18 GB) of host memory per node",),
        id="llamacpp-host-memory",
    ),
]


@pytest.mark.parametrize("args, says", REFUSALS)
def test_refusal_says(refused, args, says):
    err = refused(args)
    assert [w for w in says if w not in err] == []


# ----- bad values of the offload flags: one line, exit 2, the flag named ---------------------------------


@pytest.mark.parametrize("ratio", ["nan", "inf", "-inf", "0"])
def test_sglang_hicache_ratio_not_finite_is_refused(refused, ratio):
    # nan / inf reached int() in the host-pool size: an internal error (exit 1) before
    err = refused("llama-3.1-8b", "--engine", "sglang", "--kv-memory", "20GiB", "--hicache-ratio", ratio)
    assert err == f"error: --hicache-ratio must be a positive number, got {ratio}"


@pytest.mark.parametrize("host", [(), ("--host-memory", "64GiB")])
@pytest.mark.parametrize("fraction", ["2", "0", "nan"])
def test_sglang_hicache_host_memory_fraction_out_of_range_is_refused(refused, fraction, host):
    # without --host-memory, 2 was taken silently (and dropped); 0 read as "no offload flag given"
    err = refused(
        "llama-3.1-8b", "--engine", "sglang", "--kv-memory", "20GiB", "--hicache-host-memory-fraction", fraction, *host
    )
    assert err == f"error: --hicache-host-memory-fraction must be in (0, 1], got {fraction}"


def test_offload_blocks_per_chunk_refusal_names_the_flag(refused):
    err = refused("llama-3.1-8b --engine vllm --kv-memory 20GiB --kv-offloading-size 10 --offload-blocks-per-chunk 0")
    assert err == "error: --offload-blocks-per-chunk must be a positive integer, got 0"


@pytest.mark.parametrize(
    "size, bpc, words",
    [
        # 2,097,152 B a block (131,072 B x 16 tokens) x 10^23 blocks: past 10 x 2^30 = 10,737,418,240 B;
        # 10,737,418,240 // 2,097,152 = 5,120 blocks fit one chunk
        (
            "10",
            "99999999999999999999999",
            "error: --offload-blocks-per-chunk 99999999999999999999999 makes one vLLM offload chunk of "
            "209,715,199,999,999,999,999,997,902,848 B, more than --kv-offloading-size 10 (10,737,418,240 B): "
            "the CPU tier would hold 0 chunks; pass --offload-blocks-per-chunk 5120 or less",
        ),
        # int(0.001 x 2^30) = 1,073,741 B < one 2,097,152 B block; 2,097,152 / 2^30 = 0.00195 GiB -> 0.01
        (
            "0.001",
            "1",
            "error: --kv-offloading-size 0.001 (1,073,741 B) is less than one vLLM offload chunk of "
            "2,097,152 B: the CPU tier would hold 0 chunks; pass --kv-offloading-size 0.01 or more",
        ),
    ],
)
def test_vllm_native_tier_that_holds_no_chunk_is_refused(refused, size, bpc, words):
    err = refused(
        "llama-3.1-8b", "--engine", "vllm", "--kv-memory", "20GiB",
        "--kv-offloading-size", size, "--offload-blocks-per-chunk", bpc,
    )  # fmt: skip
    assert err == words


@pytest.mark.parametrize(
    "flags, words",
    [
        # native offload was dropped silently and LMCache sized alone
        (
            ("--kv-offloading-size", "10", "--lmcache-cpu-size", "10"),
            "error: --kv-offloading-size sizes vLLM's native CPU offload and --lmcache-cpu-size an LMCache tier",
        ),
        # --lmcache-cpu-size was dropped silently and the server sized alone
        (
            ("--lmcache-l1-size", "10", "--lmcache-cpu-size", "10"),
            "error: --lmcache-cpu-size (LMCache inside vLLM, LMCACHE_MAX_LOCAL_CPU_SIZE) and --lmcache-l1-size",
        ),
    ],
)
def test_two_vllm_offload_tiers_at_once_are_refused(refused, flags, words):
    assert refused("llama-3.1-8b", "--engine", "vllm", "--kv-memory", "20GiB", *flags).startswith(words)


@pytest.mark.parametrize("size", ["100gib", "100GIB"])
def test_engine_unit_in_another_case_is_the_engine_unit(cap, size):
    """`--kv-offloading-size 100gib` was refused as "takes a number in GiB, got '100gib'" while
    --kv-memory 100gib reads as GiB; it is vLLM's 100 (GiB), as 100GiB is."""
    a = cap("llama-3.1-8b", "--engine", "vllm", "--kv-memory", "20GiB", "--kv-offloading-size", size)
    b = cap("llama-3.1-8b --engine vllm --kv-memory 20GiB --kv-offloading-size 100")
    assert a == b
