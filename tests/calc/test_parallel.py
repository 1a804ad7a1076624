"""Issue 20 items 1-3: attention data-parallel + expert parallel, decode context parallel, the plan's
first layout for DeepSeek-V3, and speculative decoding's memory and TPOT.

DeepSeek-V3 (configs/models/deepseek-v3.yaml, from deepseek-ai/DeepSeek-V3 config.json): 61
layers, the first 3 dense, 58 MoE layers of 256 routed experts (moe_intermediate_size 2048,
hidden 7168), fp8 matrices; MLA latent 512 + rope 64 = 576 values per token per layer.
One routed expert: gate + up + down = 3 x 7168 x 2048 = 44,040,192 fp8 values = 44,040,192 B.
H200: 141 GB (143,771,500,544 B in the GPU table) x 0.9 -> budget 135,679,338,086 B.
"""

from __future__ import annotations

import pytest

import kvcalc
from kvcalc.calc import parallel, speculative
from kvcalc.calc.kv_cache import estimate
from kvcalc.calc.memory_plan import GpuFit, Layout
from kvcalc.calc.weights import weight_bytes
from kvcalc.errors import KvcalcError
from kvcalc.load.gpus import get_gpu
from kvcalc.load.models import load_model
from kvcalc.schema import Parallelism, Workload

EXPERT_B = 3 * 7168 * 2048  # 44,040,192 B, one fp8 routed expert
MOE_LAYERS = 61 - 3
FP8 = dict(k_dtype="fp8_e4m3", v_dtype="fp8_e4m3")


@pytest.fixture(scope="module")
def v3():
    return load_model("deepseek-v3")


@pytest.fixture(scope="module")
def h200():
    return get_gpu("h200")


def test_weights_per_gpu_under_dp8_ep8(v3):
    """vLLM 0.33.0 `--data-parallel-size 8 --enable-expert-parallel` (tp 1): the attention, dense
    MLPs, shared experts, router, embedding and head whole on each rank (`deepseek_v2.py`: shared
    experts on the attention TP group, here 1 GPU), and 256 / 8 = 32 routed experts per MoE layer
    (`fused_moe/config.py` `FusedMoEParallelConfig.make`: ep_size = tp x dp = 8;
    `determine_expert_map`: 256 // 8 each).

    Non-expert bytes at tp 1 = 672,987,199,488 (all) - 58 x 256 x 44,040,192 (653,908,770,816)
    = 19,078,428,672; + 58 x 32 x 44,040,192 = 81,738,596,352 -> 100,817,025,024 B."""
    whole = weight_bytes(v3, None, 1)
    assert whole.total_bytes == 672_987_199_488
    assert whole.total_bytes - MOE_LAYERS * 256 * EXPERT_B == 19_078_428_672
    wb = parallel.rank_weight_bytes(v3, None, tp=1, dp_attention=8, ep=8)
    assert wb.layer_n_experts[3] == 32 and wb.layer_expert_bytes[3] == EXPERT_B
    assert wb.total_bytes == 19_078_428_672 + MOE_LAYERS * 32 * EXPERT_B == 100_817_025_024
    # TP 8 + EP 8 (one engine, no attention DP): experts whole, 32 each; the rest split by tp 8
    tp_ep = parallel.rank_weight_bytes(v3, None, tp=8, dp_attention=1, ep=8)
    assert tp_ep.layer_n_experts[3] == 32
    assert tp_ep.total_bytes == weight_bytes(v3, None, 8).total_bytes == 85_119_449_088
    # an uneven split: 256 over 7 -> ceil = 37 on the fullest rank (`determine_expert_map` gives
    # the remainder 256 % 7 = 4 one each on the first ranks)
    assert parallel.local_experts(256, 7) == 37


@pytest.mark.parametrize(
    "par,batch,batch_per_gpu",
    [
        (dict(tp=8), 64, 64),
        (dict(tp=1, dp_attention=8, ep=8), 64, 8),
        (dict(tp=1, dp_attention=8, ep=8), 65, 9),  # the fullest rank holds ceil(65 / 8)
    ],
)
def test_kv_per_gpu_dp8_vs_tp8(v3, par, batch, batch_per_gpu):
    """64 sequences of 32,768 tokens, fp8 latent (576 B per token per layer, 61 layers).
    TP 8: MLA has one latent, copied on each of the 8 ranks (vLLM `MLAAttentionSpec` num_kv_heads
    1, `max_tp_shards=1`): 64 x 32,768 x 61 x 576 = 73,685,532,672 B per GPU.
    DP 8 (attention data-parallel): each rank holds its own 64 / 8 = 8 sequences:
    8 x 32,768 x 61 x 576 = 9,210,691,584 B per GPU."""
    wl = Workload(seq_len=32768, batch=batch, **FP8, parallel=Parallelism(**par))
    est = estimate(v3, wl)
    assert est.kv_cache_bytes_per_gpu == batch_per_gpu * 32768 * 61 * 576
    assert est.n_gpus == 8


def test_kv_room_dp8_ep8_against_tp8_on_h200(v3, h200):
    """The mechanism vllm-project/vllm#51454 measured (7.7x more KV room with DP8 + EP than TP8):
    every sequence's latent sits on all 8 GPUs under TP8, on one under DP8.

    Per GPU at 32,768 tokens, one sequence: 32,768 x 61 x 576 = 1,151,336,448 B.
    TP8: free = 135,679,338,086 - 85,119,449,088 (weights) - 851,214,336 (activation reserve
      326,926,336 at tp 8 + CUDA context 524,288,000) = 49,708,674,662 -> 43 sequences, all 8
      GPUs holding the same 43.
    DP8+EP8: free = 135,679,338,086 - 100,817,025,024 - 1,495,531,520 (reserve 971,243,520 at
      tp 1 + 524,288,000) = 33,366,781,542 -> 28 per rank x 8 ranks = 224.
    kvcalc: 224 / 43 = 5.2x. Less than 7.7x because DP8 replicates the 19.1 GB of non-expert
    weights on each GPU (and kvcalc's activation reserve is larger at tp 1), which leaves each
    rank 33.4 GB instead of 49.7 GB: 8 x 33.37 / 49.71 = 5.4 before the rounding to whole
    sequences; the public figure depends on that run's utilization and measured activations."""
    one = 32768 * 61 * 576
    tp8 = GpuFit(v3, h200, Layout(tp=8, **FP8))
    dp8 = GpuFit(v3, h200, Layout(tp=1, dp_attention=8, ep=8, **FP8))
    assert tp8.kv.stage_bytes(32768, 1) == [one] == dp8.kv.stage_bytes(32768, 1)
    assert tp8.budget - tp8.stage_weight_bytes[0] - tp8.fixed_bytes == 49_708_674_662
    assert dp8.budget - dp8.stage_weight_bytes[0] - dp8.fixed_bytes == 33_366_781_542
    assert tp8.max_batch(32768) == 49_708_674_662 // one == 43
    assert dp8.max_batch(32768) == 8 * (33_366_781_542 // one) == 224


def test_dcp_divides_the_positions(v3, h200):
    """vLLM 0.33.0 `-dcp 8` with tp 8: each rank holds ceil(32,768 / 8) = 4,096 positions of
    each sequence's latent (`FullAttentionSpec.max_memory_usage_bytes`: cdiv(max_model_len,
    dcp)): 64 x 4,096 x 61 x 576 = 9,210,691,584 B per GPU, 1/8 of TP8's."""
    wl = Workload(seq_len=32768, batch=64, **FP8, parallel=Parallelism(tp=8, dcp=8))
    assert estimate(v3, wl).kv_cache_bytes_per_gpu == 64 * 4096 * 61 * 576 == 9_210_691_584
    p = GpuFit(v3, h200, Layout(tp=8, dcp=8, **FP8))
    assert p.kv.per_gpu_bytes(32768, 64) == 9_210_691_584
    assert parallel.dcp_tokens(32769, 8) == 4097


@pytest.mark.parametrize(
    "max_len,block,dcp,sharded,blocks",
    [
        (32768, 64, 8, True, 64),  # cdiv(32768, 64 x 8)
        (32769, 64, 8, True, 65),  # one more position: one more block-row of 512 tokens
        (32768, 64, 1, True, 512),  # no DCP: cdiv(32768, 64)
        (32768, 64, 8, False, 512),  # a spec kept whole (MambaSpec, a draft's replicated cache)
    ],
)
def test_dcp_block_limit_per_request(max_len, block, dcp, sharded, blocks):
    """vLLM 0.33.0 `v1/kv_cache_interface.py` `AttentionSpec.max_num_blocks_per_req`:
    cdiv(max_len, block_size x (dcp if dcp_sharded else 1))."""
    assert parallel.dcp_blocks_per_request(max_len, block, dcp, sharded) == blocks


@pytest.mark.parametrize(
    "name,kw,field",
    [
        ("deepseek-v3", dict(tp=8, dcp=3), "dcp"),  # vllm/config/parallel.py: tp % dcp
        ("deepseek-v3", dict(tp=2, dp_attention=2, ep=3), "ep"),  # ep divides tp x dp_attention
        ("llama-3.1-8b", dict(tp=1, dp_attention=2, ep=2), "ep"),  # no routed experts
        ("gemma-3-27b", dict(tp=2, dcp=2), "dcp"),  # SlidingWindowManager asserts dcp == 1
    ],
)
def test_layouts_the_engines_refuse(name, kw, field):
    tp = kw.pop("tp")
    with pytest.raises(KvcalcError) as e:
        parallel.check_layout(load_model(name), tp, **kw)
    assert e.value.field == field


def test_plan_first_layout_deepseek_v3_h200_64x32k():
    """`kvcalc plan deepseek-v3 --seq-len 32k --concurrency 64 --gpu h200` (vLLM): one node of 8
    H200 with expert parallel 8, not a 7-stage pipeline on 7 GPUs. Of the node's layouts the
    speed model (vLLM's terms) puts tp 2 x attention-DP 4 (36.6 ms) ahead of tp 1 x attention-DP
    8 (37.8 ms): MLA's absorbed decode attention is compute-bound on an H200 (8 sequences x 32,768
    tokens x 61 layers x 2 x 128 heads x (2 x 512 + 64) = 4.45e12 FLOPs / (989.4e12 x 0.674) =
    6.7 ms per rank either way, above the latent's read, `speed.attention_time_s`), so the
    duplicated latent of tp 2 costs nothing while its halved attention projections save more
    weight reads than its all-reduces cost. Per GPU: 16 sequences' latent in fp8 (16 x 32,768
    x 61 x 576 = 18,421,383,168 B; FlashMLA's 64-token blocks hold 32,768 exactly) and
    91,846,981,632 B of weights (the tp-1 rank's 100,817,025,024 B less the 8,970,043,392 B of
    attention, shared-expert, dense-MLP and head weights tp 2 moves to the other rank). vLLM's
    --max-num-seqs is per DP rank (each is an engine core with its own scheduler): 64 / 4 = 16."""
    r = kvcalc.plan("deepseek-v3", seq_len="32k", concurrency=64, gpus="h200")
    top = r.layouts[0]
    assert (top.count, top.tp, top.pp, top.dp, top.dp_attention, top.ep, top.nodes) == (8, 2, 1, 1, 4, 8, 1)
    assert top.weights_bytes_per_gpu == 91_846_981_632
    assert top.kv_cache_bytes_per_gpu == 16 * 32768 * 61 * 576
    assert top.why == "own KV, EP8"
    assert top.launch == (
        "vllm serve deepseek-ai/DeepSeek-V3 --tensor-parallel-size 2 --pipeline-parallel-size 1 "
        "--data-parallel-size 4 --enable-expert-parallel --max-model-len 32768 --kv-cache-dtype fp8 "
        "--gpu-memory-utilization 0.9 --max-num-seqs 16 --block-size 64"
    )
    assert all(lay.pp == 1 or lay.nodes > 1 for lay in r.layouts)  # no pipeline inside one node ranks
    sg = kvcalc.plan("deepseek-v3", seq_len="32k", concurrency=64, gpus="h200", engine="sglang", top=1)
    # SGLang 0.5.23 server_args.py: --tp-size the total, --dp-size attention groups, --ep-size
    assert sg.layouts[0].launch.startswith(
        "python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --tp-size 8 --dp-size 4 "
        "--enable-dp-attention --ep-size 8 "
    )


def test_mtp_memory_and_tpot(v3, h200):
    """MTP (num_nextn_predict_layers 1) under DP8 + EP8, 64 x 32,768 tokens, k = 1.

    Weights: the MTP layer like the last decoder layer on this rank (234,848,256 B non-expert at
    tp 1 + 32 x 44,040,192 experts = 1,644,134,400) + eh_proj 2 x 7168 x 7168 bf16 = 205,520,896
    (vLLM 0.33.0 deepseek_mtp.py: an unquantized nn.Linear in the model's dtype, whole on every
    rank) + 3 bf16 norms of 7168 = 43,008 -> 1,849,698,304 B.
    KV: the MTP layer's latent for 8 sequences of 32,768 + 1 lookahead slot: 8 x 32,769 x 576 =
    150,999,552 B; the lookahead slot on the 61 target layers: 8 x 1 x 61 x 576 = 281,088 B
    (`kv_cache_manager.py` allocate_slots: num_lookahead_tokens = k for MTP / EAGLE).
    TPOT: (verify + 1 x draft) / 1.8 (the user's acceptance length)."""
    p = GpuFit(v3, h200, Layout(tp=1, dp_attention=8, ep=8, **FP8))
    est = speculative.estimate(p, speculative.SpecDecode("mtp", 1, 1.8), 32768, 64)
    assert est.draft_weight_bytes == 1_644_134_400 + 2 * 7168 * 7168 * 2 + 43_008 == 1_849_698_304
    assert est.draft_kv_bytes == 8 * 32769 * 576 == 150_999_552
    assert est.lookahead_kv_bytes == 8 * 61 * 576 == 281_088
    assert est.memory_bytes_per_gpu == (max(p.stage_used_bytes(32768, 64)) + 1_849_698_304 + 150_999_552 + 281_088)
    assert est.tpot_s == pytest.approx((est.verify_step_s + est.draft_step_s) / 1.8)
    assert est.vllm_config == '{"method":"mtp","num_speculative_tokens":1}'
    assert est.sglang_flags == (
        "--speculative-algorithm NEXTN --speculative-num-steps 1 --speculative-eagle-topk 1 "
        "--speculative-num-draft-tokens 2"
    )
    # without an acceptance length: no TPOT (never assumed)
    assert speculative.estimate(p, speculative.SpecDecode("mtp", 1), 32768, 64).tpot_s is None


def test_speculative_rules():
    """`MambaSpec.max_memory_usage_bytes` (vLLM 0.33.0): 1 + num_speculative_blocks state pages,
    2 + k in align mode; `allocate_slots` caps the lookahead at max_model_len; TPOT =
    (verify + k draft) / accepted."""
    assert speculative.state_blocks_per_sequence(3) == 4
    assert speculative.state_blocks_per_sequence(3, align_mode=True) == 5
    assert speculative.slots_per_sequence(32768, 3) == 32771
    assert speculative.slots_per_sequence(32768, 3, max_model_len=32768) == 32768
    assert speculative.spec_tpot_s(0.030, 0.002, 3, 2.5) == pytest.approx((0.030 + 3 * 0.002) / 2.5)


@pytest.mark.parametrize(
    "spec,field",
    [
        (speculative.SpecDecode("mtp", 2, 3.5), "accepted"),  # above k + 1
        (speculative.SpecDecode("eagle", 2, 2.0), "draft"),  # a head's size is never assumed
        (speculative.SpecDecode("medusa", 2), "speculative_method"),
    ],
)
def test_speculative_refusals(v3, spec, field):
    with pytest.raises(KvcalcError) as e:
        spec.check(v3)
    assert e.value.field == field


def test_mtp_needs_mtp_layers():
    with pytest.raises(KvcalcError) as e:
        speculative.SpecDecode("mtp", 1).check(load_model("llama-3.1-8b"))
    assert e.value.field == "speculative_method"


@pytest.mark.parametrize(
    "flags,batch,layout",
    [
        (["--dp", "8", "--enable-expert-parallel"], "8", (1, 1, 8, 8, 1)),
        (["--tp", "8", "--dp", "8", "--enable-dp-attention", "--ep", "8"], "8", (1, 1, 8, 8, 1)),
        (["--tp", "8", "--dp", "8", "--enable-dp-attention", "--ep", "8", "--engine", "sglang"], "64", (1, 1, 8, 8, 1)),
        (["--tp", "8", "--dcp", "8"], "64", (8, 1, 1, 1, 8)),
    ],
)
def test_estimate_takes_the_engines_flags(cli, flags, batch, layout):
    """vLLM's `--data-parallel-size 8 --enable-expert-parallel` and SGLang's `--tp 8 --dp 8
    --enable-dp-attention --ep-size 8` are the same layout; `-dcp 8` shards positions. 64
    sequences of 32k on every GPU's 8: `--batch 8` per attention-DP rank (vLLM's --max-num-seqs,
    kvcalc's --batch), SGLang's `--max-running-requests 64` the engine's total
    (`requests.replica_batch`); 61 x 576 x 32,768 x 8 x 1 B = 9,210,691,584."""
    r = cli("estimate", "deepseek-v3", "-s", "32k", "--batch", batch, "--kv-dtype", "fp8", *flags, "-f", "json")
    assert r.exit_code == 0, r.output
    import json

    kv = json.loads(r.stdout)
    kv = kv.get("kv", kv)
    assert kv["kv_cache_bytes_per_gpu"] == 9_210_691_584
    assert (kv["tp"], kv["dp"], kv["dp_attention"], kv["ep"], kv["dcp"]) == layout and kv["n_gpus"] == 8


def test_ep_spans_an_nvl72_domain(v3):
    """GB200 NVL72 (`nvlink_domain_gpus` 72): attention DP + EP over 16 GPUs of the rack, past
    one 8-GPU node; on H200 (domain 8) one engine's attention DP stops at 8."""
    from kvcalc.calc.plan import moe_layouts

    assert (1, 1, 16, 16, 1) in moe_layouts(v3, 16, 8, 72)
    assert (1, 1, 16, 16, 1) not in moe_layouts(v3, 16, 8, None)
    assert (8, 1, 2, 16, 1) in moe_layouts(v3, 16, 8, 72)  # tp 8 inside, 2 DP groups, EP 16


@pytest.mark.parametrize(
    "kw,flags",
    [
        # one node: vLLM 0.33.0 arg_utils.py --data-parallel-size, --enable-expert-parallel
        (dict(dp_attention=8, ep=8, nodes=1), ["--data-parallel-size", "8", "--enable-expert-parallel"]),
        # 16 ranks over 2 nodes of 8: --data-parallel-size-local 8 and the head's address
        (
            dict(dp_attention=16, ep=16, nodes=2),
            [
                "--data-parallel-size",
                "16",
                "--data-parallel-size-local",
                "8",
                "--data-parallel-address",
                "HEAD_NODE_IP",
                "--enable-expert-parallel",
            ],
        ),
        # TP + EP, one engine
        (dict(tp=8, ep=8, nodes=1), ["--enable-expert-parallel"]),
        # a TP x PP engine over 2 nodes (mp backend): --nnodes / --node-rank / --master-addr
        (dict(tp=8, pp=2, nodes=2), ["--nnodes", "2", "--node-rank", "0", "--master-addr", "HEAD_NODE_IP"]),
    ],
)
def test_vllm_parallel_flags(v3, kw, flags):
    from kvcalc.engines.launch import LaunchSpec, vllm_parallel_flags

    base = dict(
        model=v3,
        tp=1,
        pp=1,
        dp=1,
        nodes=1,
        max_model_len=32768,
        max_num_seqs=64,
        k_dtype="bf16",
        v_dtype="bf16",
        weight_dtype=None,
        gpu_memory_utilization=0.9,
    )
    assert vllm_parallel_flags(LaunchSpec(**(base | kw))) == flags


def test_prefill_spreads_the_experts_flops(v3, h200):
    """One prompt on one attention-DP rank: its tokens' routed-expert FLOPs (2 x 8 active x
    44,040,192 x 58 MoE layers = 40,869,298,176 per token) run on all 8 EP ranks, 1/8 here; the
    attention and dense FLOPs stay on the rank."""
    one = GpuFit(v3, h200, Layout(tp=1, **FP8))
    dp8 = GpuFit(v3, h200, Layout(tp=1, dp_attention=8, ep=8, **FP8))
    ex = 2 * 8 * EXPERT_B * MOE_LAYERS
    assert one.expert_flops_per_token == dp8.expert_flops_per_token == ex == 40_869_298_176
    P = 1024
    assert dp8.prefill(P).flops == one.prefill(P).flops - P * (ex - ex // 8)


def test_hybrid_speculative_state_blocks(h200):
    """Jamba-1.5-Mini (configs/models/jamba-1.5-mini.yaml): 28 Mamba layers, d_inner 2 x 4096 =
    8192, d_conv 4, d_state 16: conv 8192 x 3 + ssm 8192 x 16 = 155,648 bf16 values = 311,296 B
    per layer, 28 x 311,296 = 8,716,288 B per sequence. With k = 3 speculative tokens vLLM keeps
    1 + 3 state blocks per sequence (`MambaSpec.num_speculative_blocks` = 3,
    `max_memory_usage_bytes` = page x (1 + 3)): 3 more per sequence, x 4 sequences =
    104,595,456 B. n-gram drafting reserves no lookahead slots and loads no draft."""
    p = GpuFit(load_model("jamba-1.5-mini"), h200, Layout(tp=1))
    assert p.state_per_seq_per_gpu == 28 * 311_296 == 8_716_288
    est = speculative.estimate(p, speculative.SpecDecode("ngram", 3), 8192, 4)
    assert est.state_extra_bytes == 4 * 3 * 8_716_288 == 104_595_456
    assert est.lookahead_kv_bytes == 0 and est.draft_weight_bytes == 0


def test_mtp_kv_counts_each_mtp_layer(v3):
    """Each MTP layer caches its own latent like a target layer: 2 MTP layers x 576 B (fp8)."""
    two = v3.model_copy(update={"n_mtp_layers": 2})
    assert speculative.mtp_kv_bytes_per_token(two, 576) == 2 * 576
    assert speculative.mtp_kv_bytes_per_token(v3, 576) == 576
