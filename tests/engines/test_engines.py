"""Engine profiles: every figure in tests/data/engine-logs.yaml (copied from
/work/shared/fixtures/engine-logs.yaml), reproduced from the published configs in
tests/data/engine-configs/ (sources in each file), plus the rules each profile models.

GiB = 2^30 B, MiB = 2^20 B. vLLM and llama.cpp print binary units; SGLang prints GiB labelled "GB".
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from kvcalc.cli import app
from kvcalc.engines import canonical, llamacpp, sglang, vllm
from kvcalc.engines.llamacpp import LlamacppOptions
from kvcalc.engines.vllm import VllmOptions
from kvcalc.errors import KvcalcError, UnknownNameError
from kvcalc.formats import kv_format
from kvcalc.load.models import load_model
from kvcalc.units import parse_size

DATA = Path(__file__).parents[1] / "data"
CFG = DATA / "engine-configs"
BF16, F16, Q8 = kv_format("bf16"), kv_format("f16"), kv_format("q8_0")
MiB, GiB = 2**20, 2**30


def model(name: str):
    return load_model(CFG / f"{name}.yaml")


@pytest.fixture(scope="module")
def fixtures() -> dict:
    return {f["id"]: f for f in yaml.safe_load((DATA / "engine-logs.yaml").read_text())}


# ----- O01: vLLM V0 0.6.x, Llama-3.1-8B-Instruct, bf16, block 16, max_model_len 20000 ----------


def test_o01_vllm_v0_blocks_swap_and_concurrency(fixtures):
    rep = fixtures["O01"]["reported"]
    m = model("llama-3.1-8b")
    # block = 16 tokens x 2*32*8*128*2 B = 16 x 131,072 = 2,097,152 B (2 MiB) over all 32 layers
    block = 16 * 131_072
    # The log gives the KV memory only rounded (3.81 GiB); any budget in [1952, 1953) blocks gives
    # 1952 blocks: 1952 x 2 MiB = 4,093,640,704 B = 3.8125 GiB, printed "3.81". (3.81 GiB itself is
    # 4,090,956,267 B = 1950.7 blocks: the printed figure is rounded down from 3.8125.)
    for budget in (1952 * block, 1953 * block - 1):
        r = vllm.capacity(
            m, budget, BF16, BF16, max_model_len=20000, options=VllmOptions(version="0.6", swap_space_bytes=4 * GiB)
        )
        assert r.num_gpu_blocks == rep["gpu_blocks"] == 1952
        assert r.num_cpu_blocks == rep["cpu_blocks"] == 2048  # 4 GiB / 2 MiB = 2048 exactly
        assert r.page_size_bytes == block
        # max concurrency = 1952 x 16 / 20000 = 1.5616 -> "1.56x" (V0 prints L without separators)
        assert r.log_lines[1:] == [
            "# GPU blocks: 1952, # CPU blocks: 2048",
            "Maximum concurrency for 20000 tokens per request: 1.56x",
        ]
        assert f"{r.max_concurrency:.2f}x" == rep["max_concurrency@20000"]
    assert 1952 * block == 4_093_640_704 and f"{1952 * block / GiB:.2f} GiB" == rep["kv_cache_size"]
    # at the model's 131,072 tokens V0 would not start (1950 x 16 = 31,200 tokens): kvcalc warns
    with pytest.warns(UserWarning, match=r"max seq len \(131072\) is larger than .* \(31200\)"):
        assert (
            vllm.capacity(m, parse_size("3.81GiB"), BF16, BF16, options=VllmOptions(version="0.6")).num_gpu_blocks
            == 1950
        )


# ----- O03: vLLM V1, Qwen3-14B, bf16, block 16, max_model_len 32768 ---------------------------


def test_o03_vllm_v1_tokens_and_concurrency_from_rounded_memory(fixtures):
    rep = fixtures["O03"]["reported"]
    m = model("qwen3-14b")
    # page = 2 x 16 x 8 x 128 x 2 = 65,536 B per layer; 40 layers -> 2,621,440 B per block.
    # 6.51 GiB = 6,990,059,274 B (parse_size floors); // 65,536 // 40 = 2666 blocks
    # (2666.47); tokens = 2666 x 16 = 42,656. The real budget lay in [2666, 2667) blocks =
    # [6.5088, 6.5112) GiB, all printed "6.51", so the rounded figure lands on the same block.
    # the report's lines are a V1 release before 0.33's one combined line (separate "GPU KV cache
    # size" and "Maximum concurrency" lines, kv_cache_utils lines 1087-1092 of 0.11): pinned to 0.11
    r = vllm.capacity(
        m,
        parse_size(rep["available_kv_cache_memory"].replace(" ", "")),
        BF16,
        BF16,
        max_model_len=32768,
        options=VllmOptions(version="0.11"),
    )
    assert r.num_gpu_blocks == 2666 and r.kv_cache_tokens == rep["gpu_kv_cache_size_tokens"] == 42_656
    # concurrency = 2666 / cdiv(32768, 16) = 2666 / 2048 = 1.3018 -> "1.30x"
    assert r.log_lines == [
        "Available KV cache memory: 6.51 GiB",
        "GPU KV cache size: 42,656 tokens",
        "Maximum concurrency for 32,768 tokens per request: 1.30x",
    ]
    assert f"{r.max_concurrency:.2f}x" == rep["max_concurrency@32768"]
    assert r.engine_kv_bytes == 42_656 * 163_840 == 6_988_759_040


# ----- O09: llama.cpp (Jan 2025), Qwen2.5-Coder-32B, n_ctx 32768, q8_0 K and V, 2 GPUs ----------
# The reporter's command line (ggml-org/llama.cpp#11200, build 4462, 2 x RTX 3090 Ti):
#   llama-server ... -b 512 -ub 256 -ts 10,6 --threads 8 -ngl 99 -c 32768 --flash-attn
#   --cache-type-k q8_0 --cache-type-v q8_0 -m qwen2.5-coder:32b-instruct-q8_0.gguf ...
O09_OPTS = dict(n_devices=2, tensor_split=[10, 6], n_gpu_layers=99, flash_attn=True, n_ubatch=256)


@pytest.mark.parametrize("version", ["legacy", "current"])
def test_o09_llamacpp_q8_sizes_and_two_device_split(fixtures, version):
    rep = fixtures["O09"]["reported"]
    m = model("qwen2.5-coder-32b")
    # K = 32768 cells x 64 layers x 1024 (8 heads x 128) x 34/32 B = 2,281,701,376 B = 2176 MiB;
    # per layer K+V = 68 MiB. Layers to devices: -ts 10,6 -> cumulative [10/16 = 0.625, 1.0];
    # -ngl 99: i_gpu_start = max(64 - 99, 0) = 0, act = min(99, 64 + 1) = 65; layer il -> CUDA0
    # while il/65 < 0.625 (40/65 = 0.615, 41/65 = 0.631), i.e. il <= 40:
    # 41 layers x 68 = 2788 MiB on CUDA0, 23 x 68 = 1564 MiB on CUDA1.
    r = llamacpp.allocate(m, 32768, Q8, Q8, options=LlamacppOptions(version=version, **O09_OPTS))
    assert r.k_bytes == r.v_bytes == 2_281_701_376 and r.n_cells == 32768
    assert [(d.device, d.n_layers, d.kv_bytes) for d in r.devices] == [
        ("CUDA0", 41, 41 * 68 * MiB),
        ("CUDA1", 23, 23 * 68 * MiB),
    ]
    assert f"{r.devices[0].kv_bytes / MiB:.2f} MiB" == rep["CUDA0 KV buffer"]
    assert f"{r.devices[1].kv_bytes / MiB:.2f} MiB" == rep["CUDA1 KV buffer"]
    assert f"{r.k_bytes / MiB:.2f} MiB" == rep["K (q8_0)"] and f"{r.v_bytes / MiB:.2f} MiB" == rep["V (q8_0)"]
    assert f"{(r.k_bytes + r.v_bytes) / MiB:.2f} MiB" == rep["KV self size"]
    assert "CUDA0 KV buffer size =  2788.00 MiB" in r.log_lines[-3]
    if version == "legacy":
        assert r.log_lines[-1] == (
            "llama_init_from_model: KV self size  = 4352.00 MiB, K (q8_0): 2176.00 MiB, V (q8_0): 2176.00 MiB"
        )
    else:  # today's llama-server, given no -np, runs 4 slots in the one unified cache: the same cells, "4/1 seqs"
        assert r.log_lines[-1] == (
            "llama_kv_cache: size = 4352.00 MiB ( 32768 cells,  64 layers,  4/1 seqs), "
            "K (q8_0): 2176.00 MiB, V (q8_0): 2176.00 MiB"
        )


@pytest.mark.parametrize(
    "ngl, split, expected",
    [
        (None, None, [33, 31]),  # even split: il/65 < 0.5 -> il <= 32
        (99, [10, 6], [41, 23]),  # O09: il/65 < 0.625 -> il <= 40
        (-1, [10, 6], [41, 23]),  # -ngl -1 = llama.cpp's default: every layer, as ngl None
        (40, [1, 1], [-24, 20, 20]),  # 24 layers stay on the CPU, 40 offloaded: il' / 40 < 0.5
    ],
)
def test_llamacpp_layer_to_device_rule(ngl, split, expected):
    dev = llamacpp.device_of_layers(64, ngl, split, 2)
    counts = [dev.count(0), dev.count(1)]
    if expected[0] < 0:
        assert dev.count(-1) == -expected[0] and counts == expected[1:]
    else:
        assert counts == expected


# ----- O13: ollama (llama.cpp runner), Qwen2.5-7B class, 2048 per sequence x 4 parallel, f16 -----


def test_o13_ollama_parallel_cells(fixtures):
    rep = fixtures["O13"]["reported"]
    # ollama passes n_ctx x OLLAMA_NUM_PARALLEL = 2048 x 4 = 8192 cells.
    # K = 8192 x 28 layers x 512 (4 heads x 128) x 2 B = 234,881,024 B = 224 MiB; K+V = 448 MiB.
    r = llamacpp.allocate(
        model("qwen2.5-7b"), 2048, F16, F16, options=LlamacppOptions(parallel=4, ollama=True, version="legacy")
    )
    assert r.n_cells == fixtures["O13"]["settings"]["kv_size"] == 8192
    assert r.k_bytes == r.v_bytes == 234_881_024
    # the reported figures, in llama.cpp's %7.2f fields
    assert r.log_lines[-1] == (
        f"llama_init_from_model: KV self size  = {rep['KV self size']:>11}, "
        f"K (f16): {rep['K (f16)']:>11}, V (f16): {rep['V (f16)']:>11}"
    )
    assert r.log_lines[-1].endswith("448.00 MiB, K (f16):  224.00 MiB, V (f16):  224.00 MiB")


# ----- O19: pegainfer (vLLM-like block allocator), Qwen3-4B, bf16, block 16 ---------------------


def test_o19_pegainfer_as_vllm_blocks(fixtures):
    rep = fixtures["O19"]["reported"]
    m = model("qwen3-4b")
    # pegainfer sizes a block pool as vLLM V1 does: page = 16 x 147,456 B = 2,359,296 B over all
    # 36 layers; 5385 blocks = 12,704,808,960 B = 12116.25 MiB (logged "12116 MiB"; the fixture's
    # byte figure 12,704,747,520 is an arithmetic slip, its MiB figure is right); block 0 is the
    # null block (vLLM BlockPool.null_block), so 5384 x 16 = 86,144 tokens are usable.
    r = vllm.capacity(m, 5385 * 2_359_296, BF16, BF16)
    assert r.num_gpu_blocks == rep["physical_blocks"] == 5385
    assert r.usable_blocks == rep["usable_blocks"] == 5384
    assert r.usable_blocks * 16 == rep["usable_tokens"] == 86_144
    assert r.engine_kv_bytes == 5385 * 2_359_296 == 12_704_808_960 and round(r.engine_kv_bytes / MiB) == 12116
    assert r.engine_kv_bytes / MiB == 12116.25
    # The logged 12116 MiB is rounded down: 12116 MiB = 12,704,481,280 B holds only 5384.89 -> 5384.
    assert vllm.capacity(m, 12116 * MiB, BF16, BF16).num_gpu_blocks == 5384


# ----- vLLM rules ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, dtype, scales, tp, page",
    [
        ("llama-3.1-8b", "bf16", False, 1, 2 * 16 * 8 * 128 * 2),  # 65,536
        ("llama-3.1-8b", "fp8", False, 1, 2 * 16 * 8 * 128 * 1),  # per-tensor scale: none in pages
        ("llama-3.1-8b", "int8", True, 1, 2 * 16 * 8 * 128 * 1 + 2 * 16 * 8 * 4),  # + fp32 per token, head: 33,792
        ("llama-3.1-8b", "bf16", False, 2, 2 * 16 * 4 * 128 * 2),  # tp 2: 4 heads per rank
        ("llama-3.1-8b", "bf16", False, 16, 2 * 16 * 1 * 128 * 2),  # tp 16 > 8 heads: 1 (replicated)
        ("deepseek-v2-lite", "bf16", False, 1, 16 * (512 + 64) * 2),  # MLA: one latent, 18,432
        ("deepseek-v2-lite", "bf16", False, 8, 16 * (512 + 64) * 2),  # MLA latent replicated per rank
    ],
)
def test_vllm_page_size(name, dtype, scales, tp, page):
    m = model(name)
    f = kv_format(dtype)
    assert vllm.page_size_bytes(m.layers[0], f, f, 16, tp, scales) == page


def test_vllm_hybrid_groups_sliding_pages_and_tokens():
    m = model("gemma-3-27b")  # 52 sliding (window 1024) + 10 full layers
    groups, size = vllm.rules("0.11").kv_cache_groups(m)
    # group_size = 10 (52 >= 1.5 x 10): 6 sliding groups (52 layers + 8 padding) + 1 full group
    assert size == 10 and len(groups) == 7 and sum(g.n_layers for g in groups) == 62
    page = 2 * 16 * 16 * 128 * 2  # 131,072 B per layer
    r = vllm.capacity(m, 20 * GiB, BF16, BF16, max_model_len=131072, options=VllmOptions(version="0.11"))
    blocks = 20 * GiB // page // 10  # 16,384
    assert r.num_gpu_blocks == blocks == 16384
    assert r.kv_cache_tokens == blocks // 7 * 16 == 37_440
    # per request: full cdiv(131072, 16) = 8192 pages + 6 sliding groups x
    # (cdiv(min(1023 + 8192, 131072), 16) + 1 = 576 + 1 = 577) = 11,654 pages
    assert vllm.blocks_per_request(groups, 131072, 16) == 8192 + 6 * 577 == 11_654
    # 16384 / 11654 = 1.4059 -> "1.41x"
    assert r.log_lines[-1] == "Maximum concurrency for 131,072 tokens per request: 1.41x"
    # without the hybrid allocator 0.11 still checks memory on the layers' own specs, before
    # `get_kv_cache_groups` unifies them (kv_cache_utils.get_kv_cache_configs, lines 1241-1258):
    # 10 full x 8,192 pages + 52 sliding x 577 pages = 111,924 pages x 131,072 B = 14,670,102,528 B
    # = 13.66 GiB <= 20 GiB: vLLM starts (no warning), though one request needs 8,192 full blocks
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        off = vllm.capacity(
            m, 20 * GiB, BF16, BF16, max_model_len=131072, options=VllmOptions(hybrid_allocator=False, version="0.11")
        )
    with pytest.warns(
        UserWarning,
        match=r"\(13\.66 GiB KV cache is needed, which is larger than the available KV "
        r"cache memory \(12\.00 GiB\)",
    ):
        vllm.capacity(
            m, 12 * GiB, BF16, BF16, max_model_len=131072, options=VllmOptions(hybrid_allocator=False, version="0.11")
        )
    # without the hybrid allocator: one group of 62 full-length layers
    assert off.num_gpu_blocks == 20 * GiB // page // 62 and off.kv_cache_tokens == off.num_gpu_blocks * 16
    assert off.max_concurrency == off.num_gpu_blocks / 8192


def test_vllm_longest_context_search():
    m = model("qwen3-14b")
    r = vllm.capacity(
        m, 2666 * 2_621_440, BF16, BF16, max_model_len=32768, concurrency=2, options=VllmOptions(version="0.11")
    )
    # 2 requests need 2 x cdiv(L, 16) <= 2666 blocks: cdiv(L,16) <= 1333 -> L <= 21,328
    assert r.longest_context == 1333 * 16 == 21_328
    # gemma-3 with the hybrid allocator: the sliding groups cap at 578 pages, the full one grows
    g = vllm.capacity(model("gemma-3-27b"), 20 * GiB, BF16, BF16, concurrency=4, options=VllmOptions(version="0.11"))
    # 4 x (cdiv(L, 16) + 6 x 577) <= 16384 once L > 9215 -> cdiv(L, 16) <= 634 -> L = 10,144
    n = g.longest_context
    assert n == 634 * 16 == 10_144
    groups, _ = vllm.rules("0.11").kv_cache_groups(model("gemma-3-27b"))
    assert 4 * vllm.blocks_per_request(groups, n, 16) <= 16384 < 4 * vllm.blocks_per_request(groups, n + 1, 16)


def test_vllm_refuses_block_formats_and_bad_tp():
    m = model("llama-3.1-8b")
    with pytest.raises(KvcalcError, match="q8_0"):
        vllm.capacity(m, GiB, Q8, Q8)
    with pytest.raises(KvcalcError, match="--tp 3"):
        vllm.capacity(m, GiB, BF16, BF16, tp=3)


# ----- SGLang rules ---------------------------------------------------------------------------


def test_sglang_pool_tokens_and_logged_gib_labelled_gb():
    m = model("qwen3-4b")
    # cell = 8 heads x 128 x 36 layers x 2 x 2 B = 147,456 B; 10 GiB // 147,456 = 72,817 tokens
    r = sglang.capacity(m, 10 * GiB, BF16, BF16)
    assert r.kv_cache_tokens == 10 * GiB // 147_456 == 72_817
    # K buffer: 36 layers x (72,817 + 1 padded slot) rows x 8 x 128 x 2 B = 5,368,725,504 B = 5.0001 GiB
    assert r.k_bytes == r.v_bytes == 36 * 72_818 * 8 * 128 * 2 == 5_368_725_504
    assert r.log_lines == [
        "KV Cache is allocated. dtype: torch.bfloat16, #tokens: 72817, K size: 5.00 GB, V size: 5.00 GB"
    ]
    assert any('labelled "GB"' in n for n in r.notes)
    # --page-size 16: tokens rounded down to a page (72,816), each buffer has 16 padded rows
    p = sglang.capacity(m, 10 * GiB, BF16, BF16, page_size=16)
    assert p.kv_cache_tokens == 72_816 and p.num_gpu_blocks == 4551
    assert p.k_bytes == 36 * (72_816 + 16) * 8 * 128 * 2
    # tp 2: 4 heads per rank -> cell 73,728 B, twice the tokens
    assert sglang.capacity(m, 10 * GiB, BF16, BF16, tp=2).kv_cache_tokens == 10 * GiB // 73_728


def test_sglang_mla_one_buffer():
    m = model("deepseek-v2-lite")
    # cell = (512 + 64) x 27 layers x 2 B = 31,104 B; one KV buffer per layer of (size + 1, 1, 576)
    r = sglang.capacity(m, 4 * GiB, BF16, BF16)
    n = 4 * GiB // 31_104
    assert r.kv_cache_tokens == n and r.v_bytes == 0 and r.k_bytes == 27 * (n + 1) * 576 * 2
    assert r.log_lines == [
        f"KV Cache is allocated. dtype: torch.bfloat16, #tokens: {n}, KV size: {r.k_bytes / GiB:.2f} GB"
    ]


# ----- llama.cpp rules ------------------------------------------------------------------------


def test_llamacpp_current_padding_streams_and_seqs():
    m = model("llama-3.1-8b")
    # n_ctx 35000 -> GGML_PAD(35000, 256) = 35072 cells
    assert llamacpp.allocate(m, 35000, F16, F16).n_cells == 35072
    # non-unified, 4 sequences of 8192: n_ctx_seq = pad(8192 / 4, 256) = 2048 cells x 4 streams
    r = llamacpp.allocate(m, 8192, F16, F16, options=LlamacppOptions(parallel=4, unified=False))
    assert r.n_cells == 8192 and r.k_bytes == 8192 * 32 * 1024 * 2 == 512 * MiB
    assert r.log_lines[-1] == (
        "llama_kv_cache: size = 1024.00 MiB (  2048 cells,  32 layers,  4/4 seqs), "
        "K (f16):  512.00 MiB, V (f16):  512.00 MiB"
    )
    # unified: one stream of 8192 cells, "4/1 seqs": llama-server without -np (4 slots, unified), or -np 4 -kvu
    assert "(  8192 cells,  32 layers,  4/1 seqs)" in llamacpp.allocate(m, 8192, F16, F16).log_lines[-1]
    assert (
        "(  8192 cells,  32 layers,  4/1 seqs)"
        in llamacpp.allocate(m, 8192, F16, F16, options=LlamacppOptions(parallel=4, unified=True)).log_lines[-1]
    )
    # legacy without flash attention pads to 32: 1001 -> 1024; with it to 256: 1001 -> 1024, 1025 -> 1280
    assert llamacpp.allocate(m, 1001, F16, F16, options=LlamacppOptions(version="legacy")).n_cells == 1024
    assert llamacpp.allocate(m, 1025, F16, F16, options=LlamacppOptions(version="legacy")).n_cells == 1056
    assert (
        llamacpp.allocate(m, 1025, F16, F16, options=LlamacppOptions(version="legacy", flash_attn=True)).n_cells == 1280
    )


def test_llamacpp_swa_cache_and_swa_full():
    m = model("gemma-3-27b")  # 10 full + 52 sliding layers, window 1024, 16 KV heads x 128
    r = llamacpp.allocate(m, 32768, F16, F16, options=LlamacppOptions(parallel=1))
    # SWA cache = GGML_PAD(min(32768, 1024 x 1 + n_ubatch 512), 256) = 1536 cells for the 52 sliding layers
    assert "llama_kv_cache_iswa: creating     SWA KV cache, size = 1536 cells" in r.log_lines
    per_cell = 16 * 128 * 2  # K bytes per cell per layer
    assert r.k_bytes == 32768 * 10 * per_cell + 1536 * 52 * per_cell
    full = llamacpp.allocate(m, 32768, F16, F16, options=LlamacppOptions(parallel=1, swa_full=True))
    assert full.k_bytes == 32768 * 62 * per_cell
    assert full.log_lines[0].startswith("llama_kv_cache_iswa: using full-size SWA cache")
    # 4 sequences in a unified cache: the window is kept per sequence: 4 x 1024 + 512 = 4608
    assert (
        "size = 4608 cells"
        in llamacpp.allocate(m, 32768, F16, F16, options=LlamacppOptions(parallel=4, unified=True)).log_lines[3]
    )


def test_llamacpp_capacity_from_memory_and_type_names():
    m = model("qwen2.5-coder-32b")
    r = llamacpp.capacity(m, 4352 * MiB, Q8, Q8)  # exactly the O09 cache
    assert r.n_ctx == 32768 and r.engine_kv_bytes == 4352 * MiB
    assert llamacpp.capacity(m, 4352 * MiB - 1, Q8, Q8).n_ctx == 32768 - 256
    with pytest.raises(KvcalcError, match="no 'fp8_e4m3' KV cache type"):
        llamacpp.allocate(m, 4096, kv_format("fp8"), kv_format("fp8"))
    for name in ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl"):
        assert llamacpp.ggml_name(kv_format(name)) == name


def test_registry():
    assert canonical("llama.cpp") == "llamacpp" and canonical("VLLM") == "vllm"
    with pytest.raises(UnknownNameError, match="did you mean 'vllm'"):
        canonical("vlm")


# ----- CLI ------------------------------------------------------------------------------------

runner = CliRunner()


def run_json(*args: str) -> dict:
    res = runner.invoke(app, [*args, "-f", "json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)  # warnings go to stderr


def test_cli_capacity_vllm_json():
    out = run_json(
        "capacity",
        str(CFG / "qwen3-14b.yaml"),
        "--kv-memory",
        "6.51GiB",
        "--engine",
        "vllm",
        "--max-model-len",
        "32768",
        "--concurrency",
        "2",
    )
    assert out["num_gpu_blocks"] == 2666 and out["kv_cache_tokens"] == 42656
    assert round(out["max_concurrency"], 2) == 1.30 and out["longest_context"] == 21328
    # 0.33 logs both figures in one line (kv_cache_utils.update_kv_cache_capacity, lines 1147-1153)
    assert (
        out["log_lines"][1]
        == "GPU KV cache size: 42,656 tokens, Maximum concurrency for 32,768 tokens per request: 1.30x"
    )
    assert out["kv_cache_dtype"] == "auto (bf16)"


def test_cli_capacity_vllm_v0_and_per_token_head_dtype():
    out = run_json(
        "capacity",
        str(CFG / "llama-3.1-8b.yaml"),
        "--kv-memory",
        str(1952 * 2 * MiB),
        "-e",
        "vllm",
        "--vllm-v0",
        "--swap-space",
        "4GiB",
        "-L",
        "20000",
    )
    assert out["log_lines"][1:] == [
        "# GPU blocks: 1952, # CPU blocks: 2048",
        "Maximum concurrency for 20000 tokens per request: 1.56x",
    ]
    out = run_json(
        "capacity",
        str(CFG / "llama-3.1-8b.yaml"),
        "--kv-memory",
        "1GiB",
        "-e",
        "vllm",
        "--kv-dtype",
        "int8_per_token_head",
    )
    assert out["page_size_bytes"] == 33_792 * 32 and out["num_gpu_blocks"] == GiB // 33_792 // 32


def test_cli_capacity_llamacpp_json_and_table():
    args = [
        "capacity",
        str(CFG / "qwen2.5-coder-32b.yaml"),
        "-e",
        "llamacpp",
        "--ctx-size",
        "32768",
        "--kv-dtype",
        "q8_0",
        "--tensor-split",
        "10,6",
        "-ngl",
        "99",
        "--flash-attn",
        "--ubatch-size",
        "256",
        "--llamacpp-version",
        "legacy",
    ]  # O09, as the reporter ran it
    out = run_json(*args)
    assert out["n_cells"] == 32768 and out["k_bytes"] == out["v_bytes"] == 2_281_701_376
    assert [d["kv_bytes"] for d in out["devices"]] == [2788 * MiB, 1564 * MiB]
    table = runner.invoke(app, args, env={"COLUMNS": "80"})
    assert table.exit_code == 0
    # the engine's own lines come out unwrapped, to diff against the engine's log
    assert (
        "llama_init_from_model: KV self size  = 4352.00 MiB, K (q8_0): 2176.00 MiB, V (q8_0): 2176.00 MiB"
    ) in table.output.splitlines()
    assert "llama_kv_cache_init:      CUDA1 KV buffer size =  1564.00 MiB" in table.output.splitlines()


def test_cli_capacity_ollama_and_sglang():
    out = run_json(
        "capacity",
        str(CFG / "qwen2.5-7b.yaml"),
        "-e",
        "llamacpp",
        "--ctx-size",
        "2048",
        "--parallel",
        "4",
        "--ollama",
        "--kv-dtype",
        "f16",
    )
    assert out["n_cells"] == 8192 and out["k_bytes"] == 224 * MiB
    out = run_json("capacity", str(CFG / "qwen3-4b.yaml"), "-e", "sglang", "--kv-memory", "10GiB")
    assert out["kv_cache_tokens"] == 72_817 and out["log_lines"][0].startswith(
        "KV Cache is allocated. dtype: torch.bfloat16, #tokens: 72817"
    )


def test_cli_estimate_engine_keys_beside_kv_keys():
    out = run_json("estimate", str(CFG / "qwen3-14b.yaml"), "-s", "32768", "--batch", "2", "--engine", "vllm")
    # KvEstimate keys and the engine's keys in one object: 2 requests of 32,768 tokens need
    # 2 x 2048 blocks of 2,621,440 B; vLLM then logs 65,536 tokens and 2.00x.
    assert out["kv_cache_bytes"] == 2 * 32768 * 163_840 and out["num_gpu_blocks"] == 4096
    assert out["log_lines"][1:] == [
        ("GPU KV cache size: 65,536 tokens, Maximum concurrency for 32,768 tokens per request: 2.00x")
    ]  # one line in 0.33 (update_kv_cache_capacity)
    out = run_json(
        "estimate",
        str(CFG / "qwen2.5-7b.yaml"),
        "-s",
        "2048",
        "--batch",
        "4",
        "--engine",
        "llamacpp",
        "--kv-dtype",
        "f16",
    )
    assert out["n_cells"] == 8192 and out["k_bytes"] == 224 * MiB


@pytest.mark.parametrize(
    "args, message",
    [
        (["-e", "vlm", "--kv-memory", "1GiB"], "unknown engine 'vlm'"),
        (["-e", "vllm"], "needs --kv-memory"),
        (["-e", "llamacpp"], "give --ctx-size"),
        (["-e", "vllm", "--kv-memory", "lots"], "not a size"),
        (["-e", "llamacpp", "--ctx-size", "4096", "--tp", "2"], "splits layers"),
    ],
)
def test_cli_capacity_errors_exit_2(args, message):
    res = runner.invoke(app, ["capacity", str(CFG / "llama-3.1-8b.yaml"), *args])
    assert res.exit_code == 2 and message in res.output


# ----- issue 6 follow-ups: options the engines refuse, defaults they pick, budgets -----------------


def run_err(*args: str) -> str:
    """stderr of a command that must exit 2 with exactly one line."""
    res = runner.invoke(app, list(args))
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1, res.stderr
    return lines[0]


@pytest.mark.parametrize(
    "args, message",
    [
        # shared validation (cli.check_positive): before, ZeroDivisionError and exit 1
        (["--engine", "vllm", "--block-size", "0"], "error: --block-size must be a positive integer, got 0"),
        (["--engine", "sglang", "--page-size", "0"], "error: --page-size must be a positive integer, got 0"),
        (
            ["--engine", "vllm", "--block-size", "7"],
            "error: --block-size 7: vLLM accepts 1, 8, 16, 32, 64, 128, 256 (vllm/config/cache.py BlockSize)",
        ),
    ],
)
def test_estimate_engine_block_and_page_size_one_line_exit_2(args, message):
    assert run_err("estimate", str(CFG / "llama-3.1-8b.yaml"), "-s", "8k", *args) == message


def test_vllm_block_sizes_it_accepts():
    m = model("llama-3.1-8b")
    # vllm/config/cache.py BlockSize = Literal[1, 8, 16, 32, 64, 128, 256]
    for bad in (0, 7, 12, 512):
        with pytest.raises(KvcalcError, match="--block-size"):
            vllm.capacity(m, GiB, BF16, BF16, max_model_len=4096, options=VllmOptions(block_size=bad))
    # 256: one block over all 32 layers = 256 tokens x 131,072 B = 32 MiB; 1 GiB // 32 MiB = 32
    # blocks = 8192 tokens
    r = vllm.capacity(m, GiB, BF16, BF16, max_model_len=4096, options=VllmOptions(block_size=256))
    assert r.num_gpu_blocks == 32 and r.kv_cache_tokens == 8192


@pytest.mark.parametrize(
    "name, ctx, k_mib",
    [
        # llama.cpp's default --cache-type-k/-v is f16 (common/common.h), whatever the model's dtype:
        # llama-3.1-8b (bf16): 32768 cells x 32 layers x 1024 x 2 B = 2048 MiB of K
        ("llama-3.1-8b", "32k", "2048.00"),
        # gpt2 (fp32 checkpoint): 1024 x 12 layers x 768 x 2 B = 18 MiB of K (not f32's 36)
        ("gpt2", "1024", "18.00"),
    ],
)
def test_llamacpp_default_kv_type_is_f16(name, ctx, k_mib):
    cfg = str(CFG / "llama-3.1-8b.yaml") if name == "llama-3.1-8b" else name
    out = run_json("capacity", cfg, "--engine", "llamacpp", "--ctx-size", ctx, "-np", "4")
    assert out["kv_cache_dtype"] == "f16"
    assert f"K (f16): {k_mib:>7} MiB" in out["log_lines"][-1]
    if name == "gpt2":
        assert out["k_bytes"] == out["v_bytes"] == 1024 * 12 * 768 * 2 == 18 * MiB
        # an explicit -np 4 gives 4 streams of pad(1024 / 4, 256) = 256 cells (llama-server: no -kvu)
        assert out["log_lines"][-1] == (
            "llama_kv_cache: size =   36.00 MiB (   256 cells,  12 layers,  4/4 seqs), "
            "K (f16):   18.00 MiB, V (f16):   18.00 MiB"
        )
    # estimate --engine llamacpp without --kv-dtype: the same f16 default
    est = run_json("estimate", cfg, "-s", ctx, "--engine", "llamacpp")
    assert est["kv_cache_dtype"] == "f16" and "K (f16)" in est["log_lines"][-1]


def test_engine_auto_dtype_of_fp32_checkpoints():
    # gpt2 is fp32: vLLM (0.10.1+ on sm80+: bf16; V0: fp16) and SGLang (fp16) serve it in 2 bytes:
    # 12 layers x 2 x 12 heads x 64 x 2 B = 36,864 B/token (not fp32's 73,728).
    out = run_json("capacity", "gpt2", "-e", "vllm", "-m", "1GiB")
    assert out["page_size_bytes"] == 16 * 36_864 == 589_824  # one block over 12 layers
    # per-layer page = 16 x 12 heads x 64 x 2 (K, V) x 2 B = 49,152; 1 GiB // 49,152 // 12 = 21,845 // 12
    assert out["num_gpu_blocks"] == GiB // 49_152 // 12 == 1820
    assert out["kv_cache_dtype"] == "auto (bf16: fp32 checkpoint served in bf16)"
    v0 = run_json("capacity", "gpt2", "-e", "vllm", "-m", "1GiB", "--vllm-v0")
    assert v0["kv_cache_dtype"].startswith("auto (fp16") and v0["page_size_bytes"] == 589_824
    sg = run_json("capacity", "gpt2", "-e", "sglang", "-m", "1GiB")
    assert sg["kv_cache_tokens"] == GiB // 36_864 == 29_127 and sg["kv_cache_dtype"].startswith("auto (fp16")
    # a bf16 model stays bf16; --kv-dtype still wins
    assert (
        run_json("capacity", str(CFG / "qwen3-4b.yaml"), "-e", "sglang", "-m", "1GiB")["kv_cache_dtype"]
        == "auto (bf16)"
    )
    assert run_json("capacity", "gpt2", "-e", "vllm", "-m", "1GiB", "--kv-dtype", "fp8")["page_size_bytes"] == 294_912
    # estimate --engine vllm with no --kv-dtype: the engine's default, not the model's fp32
    est = run_json("estimate", "gpt2", "-s", "1024", "--engine", "vllm")
    assert est["kv_bytes_per_token"] == 73_728 and est["page_size_bytes"] == 589_824


def test_llamacpp_kv_memory_too_small_warns_and_notes():
    args = [
        "capacity",
        str(CFG / "llama-3.1-8b.yaml"),
        "-e",
        "llamacpp",
        "--ctx-size",
        "128k",
        "-np",
        "4",
        "--kv-memory",
        "1GiB",
    ]
    res = runner.invoke(app, [*args, "-f", "json"])
    assert res.exit_code == 0
    # 131072 cells x 131,072 B = 16384 MiB > 1024 MiB; 1 GiB holds 1 GiB / 131,072 B = 8192 cells
    msg = (
        "--ctx-size 131072 allocates 16384.00 MiB of KV cache, more than --kv-memory 1024.00 MiB: llama.cpp "
        "would fail to allocate the KV buffer on a device that size; the largest --ctx-size that fits is 8192"
    )
    assert json.loads(res.stdout)["notes"] == [msg]
    assert res.stderr.strip() == f"warning: {msg}"
    # fits: no warning, no note
    ok = runner.invoke(
        app,
        [
            "capacity",
            str(CFG / "llama-3.1-8b.yaml"),
            "-e",
            "llamacpp",
            "--ctx-size",
            "8192",
            "-np",
            "1",
            "--kv-memory",
            "1GiB",
            "-f",
            "json",
        ],
    )
    assert ok.exit_code == 0 and ok.stderr == "" and json.loads(ok.stdout)["notes"] == []


def test_llamacpp_parallel_cap_ngl_minus_one_and_gpus():
    m = model("llama-3.1-8b")
    # src/llama-cparams.h LLAMA_MAX_SEQ 256: 256 sequences allowed, 257 refused as llama_context does
    assert (
        "256/1 seqs"
        in llamacpp.allocate(m, 65536, F16, F16, options=LlamacppOptions(parallel=256, unified=True)).log_lines[-1]
    )
    with pytest.raises(KvcalcError, match="n_seq_max must be <= 256"):
        llamacpp.allocate(m, 65536, F16, F16, options=LlamacppOptions(parallel=257))
    assert run_err(
        "capacity", str(CFG / "llama-3.1-8b.yaml"), "-e", "llamacpp", "--ctx-size", "4k", "-np", "100000"
    ).startswith("error: --parallel 100000: llama.cpp refuses it: n_seq_max must be <= 256")
    # -ngl -1 is llama.cpp's default (all layers on the GPU), not CPU-only
    r = llamacpp.allocate(m, 4096, F16, F16, options=LlamacppOptions(n_gpu_layers=-1))
    assert [(d.device, d.n_layers) for d in r.devices] == [("CUDA0", 32)]
    with pytest.raises(KvcalcError, match="-1 for llama.cpp's default"):
        llamacpp.allocate(m, 4096, F16, F16, options=LlamacppOptions(n_gpu_layers=-2))
    assert (
        run_err("capacity", str(CFG / "llama-3.1-8b.yaml"), "-e", "llamacpp", "--ctx-size", "4k", "--gpus", "0")
        == "error: --gpus must be a positive integer, got 0"
    )


def test_vllm_startup_failures_and_refused_options():
    cfg = str(CFG / "llama-3.1-8b.yaml")
    # 1 byte (written 1B: a bare 1 is refused as a unit left off): not one block (16 x 131,072 B = 2 MiB); vLLM's check_enough_kv_cache_memory text,
    # a request of 131,072 tokens needs 131072 x 131,072 B = 16.00 GiB (vLLM 0.11)
    assert run_err("capacity", cfg, "-e", "vllm", "-m", "1B", "--vllm-version", "0.11") == (
        "error: vLLM would fail at start-up: To serve at least one request with the models's max seq len (131072), "
        "(16.00 GiB KV cache is needed, which is larger than the available KV cache memory (0.00 GiB).  Try "
        "increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the engine."
    )
    # (two spaces before "Try": 0.11 kv_cache_utils.py lines 720-722 write f"... GiB). " f"{estimated_msg} "
    # "Try ...", and no length fits, so estimated_msg is "")
    # vLLM 0.33 checks 1 B less the null block (one 2 MiB block of 32 layers): <= 0, "No available memory"
    assert run_err("capacity", cfg, "-e", "vllm", "-m", "1B") == (
        "error: vLLM would fail at start-up: No available memory for the cache blocks. Try increasing "
        "`gpu_memory_utilization` when initializing the engine (this flag also controls CPU memory reservation on "
        "the CPU backend, despite its name). See "
        "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
    )  # kv_cache_planning.py 57-64
    m = model("llama-3.1-8b")
    with pytest.raises(KvcalcError, match="No available memory for the cache blocks"):
        vllm.capacity(m, 0, BF16, BF16, options=VllmOptions(version="0.11"))
    with pytest.raises(KvcalcError, match="No available memory for the cache blocks"):
        vllm.capacity(m, 2 * MiB - 1, BF16, BF16, options=VllmOptions(version="0.6"))  # V0: 0 GPU blocks
    # 1 GiB holds 512 blocks = 8192 tokens: a 131,072-token request does not fit; vLLM would refuse
    # to start (estimated maximum model length 8192), kvcalc still answers and says so
    with pytest.warns(UserWarning, match="estimated maximum model length is 8192"):
        r = vllm.capacity(m, GiB, BF16, BF16, options=VllmOptions(version="0.11"))
    assert r.num_gpu_blocks == 512 and any("refuses to start" in n for n in r.notes)
    assert (
        run_err("capacity", cfg, "-e", "vllm", "-m", "1GiB", "--max-num-batched-tokens", "0")
        == "error: --max-num-batched-tokens must be a positive integer, got 0"
    )
    assert run_err("capacity", cfg, "-e", "vllm", "-m", "1GiB", "--swap-space", "4GiB").startswith(
        "error: --swap-space is vLLM V0's CPU swap"
    )


def test_sglang_no_tokens_is_its_startup_error():
    # cell = 147,456 B (qwen3-4b); 147,455 B holds none
    with pytest.raises(KvcalcError, match=r"Not enough memory\. Please try to increase --mem-fraction-static\."):
        sglang.capacity(model("qwen3-4b"), 147_455, BF16, BF16)


def test_estimate_engine_kv_memory_from_gpu_plan():
    # bundled llama-3.1-8b (8,030,261,248 params) on h100-sxm (85,520,809,984 B, nvidia-smi 81559 MiB):
    # budget = floor(0.9 x 85,520,809,984) = 76,968,728,985; weights bf16 = 16,060,522,496;
    # KV memory = 76,968,728,985 - 16,060,522,496 - 2 GiB (2,147,483,648) - 500 MiB (524,288,000)
    #           = 58,236,434,841 B (54.24 GiB) = the plan's headroom + this batch's KV
    # blocks = 58,236,434,841 // (16 x 131,072 = 2,097,152) = 27,769; tokens 444,304;
    # concurrency 27,769 / 2048 = 13.56x
    out = run_json(
        "estimate",
        "llama-3.1-8b",
        "-s",
        "32k",
        "--batch",
        "2",
        "--engine",
        "vllm",
        "--gpu",
        "h100-sxm",
        "--activation-reserve",
        "2GiB",
        "--cuda-context",
        "500MiB",
    )
    assert out["kv_memory_bytes"] == out["headroom_bytes"] + out["kv_cache_bytes_per_gpu"] == 58_236_434_841
    assert out["num_gpu_blocks"] == 27_769 and out["kv_cache_tokens"] == 444_304
    # 0.33: GiB by format_gib (gpu_worker.py line 772), the figures in one line (update_kv_cache_capacity)
    assert out["log_lines"] == [
        "Available KV cache memory: 54.24 GiB",
        ("GPU KV cache size: 444,304 tokens, Maximum concurrency for 32,768 tokens per request: 13.56x"),
    ]
    assert out["kv_memory_basis"].startswith("what the h100-sxm plan leaves for KV per GPU")
    # without --gpu: sized for the batch, and labelled so
    out = run_json("estimate", "llama-3.1-8b", "-s", "32k", "--batch", "2", "--engine", "vllm")
    assert out["kv_memory_bytes"] == 2 * 2048 * 2_097_152 and out["kv_memory_basis"].startswith("sized for this batch")
    table = runner.invoke(app, ["estimate", "llama-3.1-8b", "-s", "32k", "--batch", "2", "--engine", "vllm"])
    assert "vllm: sized for this batch (2 x 32,768 tokens)" in table.stdout
