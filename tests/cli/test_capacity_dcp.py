"""`kvcalc capacity --engine vllm --dcp D`: vLLM 0.33.0's decode context parallel.

The rules (vLLM 0.33.0, `vllm/v1/kv_cache_interface.py` and `vllm/v1/core/`):

- the number of blocks does not change: each rank's pool is its KV memory // bytes per block;
- a request of L tokens takes cdiv(cdiv(L, dcp), block_size) blocks of each rank's pool in a
  group vLLM shards by position (`FullAttentionSpec.max_memory_usage_bytes`: "max_model_len =
  cdiv(max_model_len, dcp_world_size)" when `dcp_sharded`; full attention, MLA and the DSA
  indexer's key cache are `AttentionSpec`s, `dcp_sharded = True`); hybrid Mamba models are
  refused (kvcalc's vLLM profile, `engines/vllm/dcp.py`, does not model them under DCP);
- max concurrency = blocks / (the sum over groups of those blocks)
  (`kv_cache_utils.get_max_concurrency_for_kv_cache_config`), and "GPU KV cache size" is
  int(concurrency x L) (`get_kv_cache_capacity`), so in whole-request tokens;
- a request's block table holds at most cdiv(L, block_size x dcp) blocks, each of
  block_size x dcp tokens (`AttentionSpec.max_num_blocks_per_req`,
  `kv_cache_utils.resolve_dcp_kv_block_size`).
"""

from __future__ import annotations

import json

import pytest

#: DeepSeek-V3 (configs/models/deepseek-v3.yaml, deepseek-ai/DeepSeek-V3 config.json): 61 MLA
#: layers of kv_lora_rank 512 + rope 64 = 576 values, bf16; FLASH_ATTN_MLA's 16-token blocks
#: on Hopper: 61 x 16 x 576 x 2 = 1,124,352 B a block; 40 GiB // that = 38,199 blocks.
V3 = ["deepseek-v3", "--engine", "vllm", "--kv-memory", "40GiB", "--tp", "8"]


def capacity(cli, *args: str) -> dict:
    r = cli("capacity", *args, "-f", "json")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


@pytest.mark.parametrize(
    "dcp,max_len,per_request,tokens",
    [
        # no DCP: cdiv(131,072, 16) = 8,192 blocks a request; 38,199 / 8,192 x 131,072 = 611,184
        (1, 131072, 8192, 611_184),
        # dcp 8: cdiv(cdiv(131,072, 8), 16) = cdiv(16,384, 16) = 1,024 blocks a request;
        # int(38,199 / 1,024 x 131,072) = 38,199 x 128 = 4,889,472 tokens
        (8, 131072, 1024, 4_889_472),
        # dcp 4, 64k: cdiv(16,384, 16) = 1,024; int(38,199 / 1,024 x 65,536) = 2,444,736
        (4, 65536, 1024, 2_444_736),
        # dcp 8 at a length that does not divide: cdiv(100,001, 8) = 12,501 positions,
        # cdiv(12,501, 16) = 782 blocks; int(38,199 / 782 x 100,001) = 4,884,831
        (8, 100001, 782, 4_884_831),
    ],
)
def test_mla_positions_divided_by_dcp(cli, dcp, max_len, per_request, tokens):
    d = capacity(cli, *V3, "--dcp", str(dcp), "--max-model-len", str(max_len))
    assert d["page_size_bytes"] == 61 * 16 * 576 * 2 == 1_124_352
    assert d["num_gpu_blocks"] == 42_949_672_960 // 1_124_352 == 38_199  # the pool does not change
    assert d["max_concurrency"] == 38_199 / per_request
    assert d["kv_cache_tokens"] == int(38_199 / per_request * max_len) == tokens
    assert d["log_lines"][-1] == (
        f"GPU KV cache size: {tokens:,} tokens, Maximum concurrency for {max_len:,} tokens per request: "
        f"{38_199 / per_request:.2f}x"
    )


def test_the_per_request_block_limit_is_stated(cli):
    """dcp 8, 128k: each rank holds cdiv(131,072, 8) = 16,384 positions, 1,024 blocks of 16
    tokens; the block table's limit is cdiv(131,072, 16 x 8) = 1,024 blocks of 128 tokens
    (`AttentionSpec.max_num_blocks_per_req`)."""
    d = capacity(cli, *V3, "--dcp", "8", "--max-model-len", "128k")
    assert (
        "decode context parallel 8 (-dcp): a request of 131,072 tokens holds 16,384 on each rank, "
        "1,024 blocks of 16 (128 tokens a block across the 8 ranks)"
    ) in d["notes"]


def test_dsa_indexer_sharded_with_the_latent(cli):
    """DeepSeek-V3.2 (configs/models/deepseek-v3.2.yaml): the lightning indexer's key cache is an
    `MLAAttentionSpec` (vLLM 0.33.0 `model_executor/models/deepseek_v2.py`
    `DeepseekV32IndexerCache.get_kv_cache_spec`), so `dcp_sharded` like the latent. One group of
    122 layers (61 latent + 61 indexer) in 64-token blocks: 61 x 64 x (576 x 2 + 128 + 4) =
    5,012,736 B a block; 40 GiB // that = 8,568 blocks. dcp 4, 64k: cdiv(cdiv(65,536, 4), 64) =
    256 blocks a request, 8,568 / 256 = 33.46875; tokens int(33.46875 x 65,536) = 2,193,408.
    64 requests: 8,568 // 64 = 133 blocks each, cdiv(n, 4) <= 133 x 64 = 8,512, n <= 34,048."""
    d = capacity(
        cli,
        "deepseek-v3.2",
        "--engine",
        "vllm",
        "--kv-memory",
        "40GiB",
        "--tp",
        "8",
        "--dcp",
        "4",
        "-L",
        "64k",
        "--concurrency",
        "64",
    )
    assert d["page_size_bytes"] == 61 * 64 * (576 * 2 + 128 + 4) == 5_012_736
    assert d["num_gpu_blocks"] == 8_568
    assert d["max_concurrency"] == 8_568 / 256 == 33.46875
    assert d["kv_cache_tokens"] == 2_193_408
    assert d["longest_context"] == 133 * 64 * 4 == 34_048


def test_start_up_check_in_whole_request_tokens(cli):
    """1 GiB at dcp 8, 128k: a request needs 1,024 blocks x 1,124,352 B = 1.07 GiB against
    1 GiB less the null block (1,072,617,472 B): vLLM refuses, and its binary search over
    max_model_len (`kv_cache_planning.estimate_max_model_len`, each length n at cdiv(n, 8)
    positions) finds 1,072,617,472 // 1,124,352 = 953 blocks, cdiv(n, 8) <= 953 x 16 = 15,248,
    n <= 121,984."""
    r = cli("capacity", *V3[:3], "--kv-memory", "1GiB", "--tp", "8", "--dcp", "8", "-L", "128k", "-f", "json")
    assert r.exit_code == 0, r.output
    note = json.loads(r.stdout)["notes"][1]
    assert note.startswith(
        "vLLM refuses to start at this max_model_len: To serve at least one request with the model's "
        "max seq len (131072), (1.07 GiB KV cache is needed, which is larger than the available KV cache "
        "memory (1.0 GiB). Based on the available memory, the estimated maximum model length is 121984."
    )


@pytest.mark.parametrize(
    "args,says",
    [
        # vllm/config/model.py: GQA needs tp > the KV heads (Llama-3.1-8B: 8)
        (["llama-3.1-8b", "--tp", "8", "--dcp", "4"], "to be greater than the model's total number of KV heads (8)"),
        # dcp <= tp // KV heads = 16 // 8 = 2
        (["llama-3.1-8b", "--tp", "16", "--dcp", "4"], "(4) exceeds the maximum supported value (2)"),
        # SlidingWindowManager: "DCP not support sliding window attn now"
        (["gemma-3-27b", "--tp", "32", "--dcp", "2"], "DCP not support sliding window"),
        # hybrid Gated DeltaNet: not modelled under DCP (engines/vllm/dcp.py)
        # DeepSeek-V4: its sliding-window specs assert at start-up (vLLM 0.33.0 v1/kv_cache_interface.py
        # SlidingWindowSpec.max_memory_usage_bytes; models/deepseek_v4/compressor.py SlidingWindowMLASpec)
        (["deepseek-v4-flash", "--tp", "8", "--dcp", "2"], 'assert "DCP not support sliding window."'),
        # vllm/config/parallel.py: tp % dcp
        (["deepseek-v3", "--tp", "8", "--dcp", "3"], "tp_size=8 must be divisible by dcp_size=3"),
        (["deepseek-v3", "--tp", "8", "--dcp", "2", "--vllm-version", "0.11"], "for vLLM 0.33 only"),
        (["deepseek-v3", "--tp", "8", "--dcp", "2", "--engine", "sglang"], "--dcp is vLLM's decode context"),
    ],
)
def test_refused_as_vllm_refuses(cli, args, says):
    engine = [] if "--engine" in args else ["--engine", "vllm"]
    r = cli("capacity", *args, *engine, "--kv-memory", "40GiB", "-L", "32k")
    assert r.exit_code == 2, r.output
    assert says in " ".join(r.output.split())


def test_gqa_dcp_llama_70b(cli):
    """Llama-3.1-70B (8 KV heads x 128, 80 layers, bf16) at tp 16, dcp 2: each rank holds one KV
    head (16 ranks over 8 heads), page 80 x 16 x 2 x 128 x 2 = 655,360 B, 40 GiB // that =
    65,536 blocks; 64k at dcp 2: cdiv(32,768, 16) = 2,048 blocks a request, 32.00x."""
    d = capacity(
        cli, "llama-3.1-70b", "--engine", "vllm", "--kv-memory", "40GiB", "--tp", "16", "--dcp", "2", "-L", "64k"
    )
    assert (d["page_size_bytes"], d["num_gpu_blocks"]) == (655_360, 65_536)
    assert d["max_concurrency"] == 65_536 / 2_048 == 32.0
    assert d["kv_cache_tokens"] == 32 * 65_536


def test_python_api_takes_dcp_in_vllm_options():
    """`kvcalc.capacity(..., options=VllmOptions(dcp=8))` is `capacity --engine vllm --dcp 8`."""
    import kvcalc
    from kvcalc.engines.vllm import VllmOptions

    r = kvcalc.capacity(
        "deepseek-v3", engine="vllm", kv_memory_bytes="40GiB", max_model_len="128k", tp=8, options=VllmOptions(dcp=8)
    )
    assert (r.num_gpu_blocks, r.kv_cache_tokens) == (38_199, 4_889_472)


def test_estimate_engine_vllm_takes_dcp(cli):
    """`estimate --engine vllm --dcp 8` (was refused): vLLM's memory for 16 requests of 131,072
    tokens at tp 8, dcp 8, fp8 (FlashMLA's 64-token blocks, 61 x 64 x 576 = 2,248,704 B a block):
    cdiv(cdiv(131,072, 8), 64) = 256 blocks a request, 16 x 256 = 4,096 blocks =
    9,210,691,584 B, the same bytes as kvcalc's own 16 x 16,384 x 61 x 576."""
    r = cli(
        "estimate", "deepseek-v3", "-s", "128k", "--batch", "16", "--tp", "8", "--dcp", "8", "--engine", "vllm",
        "--kv-dtype", "fp8", "-f", "json",
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    e = json.loads(r.stdout)
    assert (e["block_size"], e["page_size_bytes"], e["num_gpu_blocks"]) == (64, 2_248_704, 4_096)
    assert e["kv_memory_bytes"] == 4_096 * 2_248_704 == 16 * 16_384 * 61 * 576 == 9_210_691_584
    assert e["max_concurrency"] == 16.0


@pytest.mark.parametrize("engine", ["sglang", "llamacpp"])
@pytest.mark.parametrize("model", ["deepseek-v3", "llama-3.1-8b"])
def test_estimate_dcp_with_another_engine_names_dcp_once(cli, model, engine):
    """Was `--dcp 2: --dcp 2 with --engine sglang: ...`; for llama-3.1-8b (8 KV heads, tp 8) it
    was vLLM's own GQA rule (`tp 8 must be greater than the model's 8 KV heads`): the engine is
    checked first."""
    r = cli("estimate", model, "--engine", engine, "--tp", "8", "--dcp", "2", "--gpu", "h200")
    assert r.exit_code == 2 and len(r.stderr.splitlines()) == 1, r.output
    assert r.stderr.startswith(f"error: --dcp 2 with --engine {engine}: decode context parallel is vLLM's"), r.stderr


def test_dcp_on_a_gated_deltanet_hybrid(cli):
    """vLLM 0.33.0 takes DCP on a Mamba / linear-attention hybrid (issue 20 item 3): the full-attention
    group is `dcp_sharded`, the state is not ("Mamba state is replicated across DCP/PCP ranks, never
    sharded", v1/kv_cache_interface.py MambaSpec.max_num_blocks_per_req; HybridKVCacheCoordinator:
    "DCP with hybrid KV cache layouts only supports full-attention, Mamba, and replicated draft
    groups"). Qwen3-Next-80B-A3B (configs/models/qwen3-next-80b-a3b.yaml: 12 full-attention and 36
    Gated DeltaNet layers, 4 groups of 12) at tp 4, dcp 2, 20 GiB, 128k: blocks of 320 tokens
    (the page unified with the state's), 3,932,160 B a block of the pool; 21,474,836,480 //
    3,932,160 = 5,461 blocks. A request: the attention group cdiv(cdiv(131,072, 2), 320) =
    cdiv(65,536, 320) = 205 blocks + 3 state groups x 3 pages (prefix caching's 'align' mode) = 214;
    vLLM's "Maximum concurrency" 5,461 / 214 = 25.52x. Without dcp: 410 + 9 = 419, 13.03x.
    The same rule is held against vLLM's own sizing for Qwen3.5-27B at tp 8, dcp 2 (the grid's
    `dcp` part, tests/oracle/fixtures/vllm-0.33-grid.json)."""
    args = ("qwen3-next-80b-a3b", "--engine", "vllm", "--tp", "4", "--kv-memory", "20GiB", "-L", "128k", "-f", "json")
    with_dcp = json.loads(cli("capacity", *args, "--dcp", "2").stdout)
    plain = json.loads(cli("capacity", *args).stdout)
    assert with_dcp["num_gpu_blocks"] == plain["num_gpu_blocks"] == 5_461
    assert with_dcp["max_concurrency"] == 5_461 / 214
    assert plain["max_concurrency"] == 5_461 / 419
