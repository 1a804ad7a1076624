"""`kvcalc plan --engine vllm` sizes each candidate GPU with vLLM's own blocks
(`kvcalc.engines.vllm.plan`), so that a plan's max concurrency and fit on a GPU are what
`kvcalc capacity --engine vllm --gpu G` gives for the KV memory the plan leaves.

DeepSeek-V2-Lite (configs/models/deepseek-v2-lite.yaml: 27 MLA layers, latent 512 + rope 64 =
576 values), bf16: 27 x 576 x 2 B = 31,104 B per token over all layers. vLLM's MLA backend sets
the block size from the GPU. vLLM 0.11 (`vllm/platforms/cuda.py` `check_and_update_config`,
`rocm.py`): FlashMLA 64 tokens on an H100 (compute capability 9.0), CUTLASS MLA 128 on a B200
(10.0), ROCm's TRITON_MLA keeps the default 16 on an MI300X. One block of every layer is then 64 x
31,104 = 1,990,656 B, 128 x 31,104 = 3,981,312 B, 16 x 31,104 = 497,664 B. With 1 GiB
(1,073,741,824 B) of KV memory: 539, 269 and 2,157 blocks (the issue's "539 blocks / 34,496
tokens" on an H100). vLLM 0.33 (`_get_backend_priorities`, `get_preferred_block_size`):
FLASH_ATTN_MLA 16 on the H100, FLASHINFER_MLA 32 on the B200 (32 x 31,104 = 995,328 B: 1,078
blocks), TRITON_MLA 16 on the MI300X.

A request of 1,025 tokens (one past 1,024) takes cdiv(1,025, 64) = 17, cdiv(1,025, 128) = 9,
cdiv(1,025, 32) = 33, cdiv(1,025, 16) = 65 blocks, so 1 GiB admits under 0.11 539 // 17 = 31 on
the H100, 269 // 9 = 29 on the B200, 2,157 // 65 = 33 on the MI300X; under 0.33 33, 1,078 // 33 =
32 and 33, where the exact formula says 1,073,741,824 // (1,025 x 31,104) = 33 on every GPU.
"""

from __future__ import annotations

import dataclasses
import json

import pytest

from kvcalc.calc.defaults import DEFAULT_CUDA_CONTEXT_BYTES
from kvcalc.calc.memory_plan import GpuFit, Layout
from kvcalc.engines import vllm
from kvcalc.engines.profile import VllmOptions
from kvcalc.engines.vllm.plan import VllmPlanKv
from kvcalc.errors import KvcalcError
from kvcalc.load.gpus import get_gpu
from kvcalc.load.models import load_model
from kvcalc.requests import PlanRequest, run_plan

GIB = 2**30
LITE = load_model("deepseek-v2-lite")
TOKEN_BYTES = 27 * 576 * 2  # 31,104 B per token, all layers, bf16

#: vLLM 0.11: GPU -> (block size, blocks in 1 GiB, blocks per 1,025-token request, requests admitted)
PER_GPU = {
    "h100-sxm": (64, 539, 17, 31),  # 1,073,741,824 // 1,990,656 = 539; 539 // 17 = 31
    "b200": (128, 269, 9, 29),  # 1,073,741,824 // 3,981,312 = 269; 269 // 9 = 29
    "mi300x": (16, 2157, 65, 33),  # 1,073,741,824 // 497,664 = 2,157; 2,157 // 65 = 33
}
#: vLLM 0.33 (the default), the same columns
PER_GPU_033 = {
    "h100-sxm": (16, 2157, 65, 33),  # FLASH_ATTN_MLA: 1,073,741,824 // 497,664 = 2,157; // 65 = 33
    "b200": (32, 1078, 33, 32),  # FLASHINFER_MLA: 1,073,741,824 // 995,328 = 1,078; // 33 = 32
    "mi300x": (16, 2157, 65, 33),  # TRITON_MLA
}
V011 = VllmOptions(version="0.11")


def knobs_leaving(gpu: str, kv_memory_bytes: int) -> Layout:
    """Knobs under which one `gpu` with bf16 weights leaves vLLM exactly `kv_memory_bytes` of KV
    memory: the activation reserve is budget - weights - CUDA context - that."""
    base = GpuFit(LITE, get_gpu(gpu), Layout(weight_dtype="bf16"))
    act = base.budget - base.stage_weight_bytes[0] - DEFAULT_CUDA_CONTEXT_BYTES - kv_memory_bytes
    return Layout(activation_reserve_bytes=act)


def plan_one(gpu: str, seq_len: int, concurrency: int, engine: str = "vllm", kv_memory_bytes: int = GIB, options=None):
    req = PlanRequest.build(
        LITE,
        seq_len=seq_len,
        concurrency=concurrency,
        gpus=gpu,
        max_gpus=1,
        engine=engine,
        kv_dtypes="bf16",
        weight_dtypes="bf16",
        knobs=knobs_leaving(gpu, kv_memory_bytes),
        engine_options=options,
    )
    return run_plan(req)


@pytest.mark.parametrize("version,gpu", [(v, g) for v in ("0.11", "0.33") for g in PER_GPU])
def test_mla_plan_per_gpu_is_capacity_on_that_gpu(version, gpu, cli):
    block, blocks, per_req, admitted = (PER_GPU if version == "0.11" else PER_GPU_033)[gpu]
    r = plan_one(gpu, 1025, 1, options=VllmOptions(version=version))
    (lay,) = r.layouts
    assert lay.max_concurrency == admitted
    # the KV memory the plan leaves vLLM: what `capacity --kv-memory` is given below
    assert lay.headroom_bytes + lay.kv_cache_bytes_per_gpu == GIB
    # one request: its blocks, + the null block in 0.33 ((65 + 1) x 497,664 = 32,845,824 B on an H100;
    # 0.11: 17 x 1,990,656 = 33,841,152 B)
    assert lay.kv_cache_bytes_per_gpu == (per_req + (version == "0.33")) * block * TOKEN_BYTES
    out = cli(
        "capacity",
        "deepseek-v2-lite",
        "--engine",
        "vllm",
        "--gpu",
        gpu,
        "--kv-memory",
        str(GIB),
        "-L",
        "1025",
        "-f",
        "json",
        "--vllm-version",
        version,
    )
    assert out.exit_code == 0, out.output
    cap = json.loads(out.stdout)
    assert (cap["block_size"], cap["num_gpu_blocks"]) == (block, blocks)
    assert int(cap["max_concurrency"]) == admitted == blocks // per_req


def test_the_exact_formula_ignores_the_block_size():
    # engine ideal: 1,073,741,824 // (1,025 x 31,104 = 31,881,600) = 33 on every GPU
    for gpu in PER_GPU:
        (lay,) = plan_one(gpu, 1025, 1, engine="ideal").layouts
        assert lay.max_concurrency == 33


def test_the_block_size_decides_whether_30_requests_fit():
    # vLLM 0.11's forced blocks (PER_GPU)
    # 30 requests: the H100 admits 31 (539 blocks >= 30 x 17 = 510), the B200 only 29
    # (269 blocks < 30 x 9 = 270): it needs 1,074,954,240 B, 1,212,416 B past the 1 GiB it has
    assert plan_one("h100-sxm", 1025, 30, options=V011).layouts[0].max_concurrency == 31
    r = plan_one("b200", 1025, 30, options=V011)
    assert r.layouts == []
    (miss,) = r.misses
    budget = int(get_gpu("b200").memory_bytes * 0.9)
    assert 30 * 9 * 3_981_312 - GIB == 1_212_416
    assert miss.score == pytest.approx((budget + 1_212_416) / budget, rel=1e-12)
    # what would fix it, in whole blocks: 269 // 30 = 8 blocks = 1,024 tokens; 269 // 9 = 29 requests
    assert miss.fixes[-2:] == ["a context of at most 1,024 tokens", "at most 29 concurrent sequences"]
    # and 32 requests fit on the MI300X (2,157 >= 32 x 65 = 2,080), not on the H100 (539 < 32 x 17 = 544)
    assert plan_one("mi300x", 1025, 32, options=V011).layouts[0].max_concurrency == 33
    assert plan_one("h100-sxm", 1025, 32, options=V011).layouts == []


def test_the_launch_line_states_the_forced_block_size():
    lines = {gpu: plan_one(gpu, 1025, 1, options=V011).layouts[0].launch for gpu in PER_GPU}
    assert lines["h100-sxm"].endswith("--max-num-seqs 1 --block-size 64")
    assert lines["b200"].endswith("--max-num-seqs 1 --block-size 128")
    assert "--block-size" not in lines["mi300x"]  # TRITON_MLA keeps vLLM's default 16
    notes = plan_one("mi300x", 1025, 1, options=V011).notes
    assert notes == [
        (
            "vllm on mi300x: MLA attention backend TRITON_MLA (vLLM's default MLA backend on ROCm "
            "(VLLM_ROCM_USE_AITER unset)) stores auto (bf16) latent rows (576 values, 1,152 B a token), "
            "keeps block size 16"
        )
    ]


def test_the_launch_line_states_033s_block_size_only_where_it_is_not_16():
    # 0.33, bf16: FLASH_ATTN_MLA 16 on the H100 and TRITON_MLA 16 on the MI300X: nothing stated;
    # FLASHINFER_MLA 32 on the B200: stated (vLLM would pick it itself; the line pins the plan's block)
    lines = {gpu: plan_one(gpu, 1025, 1).layouts[0].launch for gpu in PER_GPU_033}
    assert "--block-size" not in lines["h100-sxm"] and "--block-size" not in lines["mi300x"]
    assert lines["b200"].endswith("--max-num-seqs 1 --block-size 32")
    # a --block-size 16 given on the B200 moves vLLM to TRITON_MLA (FLASHINFER_MLA takes 32 or 64, CUTLASS_MLA
    # 128): it differs from vLLM's own 32, so it is stated; the same 16 on the H100 is vLLM's own choice
    assert (
        plan_one("b200", 1025, 1, options=VllmOptions(block_size=16))
        .layouts[0]
        .launch.endswith("--max-num-seqs 1 --block-size 16")
    )
    assert "--block-size" not in plan_one("h100-sxm", 1025, 1, options=VllmOptions(block_size=16)).layouts[0].launch
    note = plan_one("h100-sxm", 1025, 1).notes[0]
    assert note == (
        "vllm on h100-sxm: MLA attention backend FLASH_ATTN_MLA (vLLM 0.33's first valid MLA backend "
        "on compute capability 9.0) stores auto (bf16) latent rows (576 values, 1,152 B a token), sets block "
        "size 16"  # issue 20: a note naming an MLA backend says which KV format it stores
    )


def test_an_attention_backend_given_applies_to_every_gpu():
    # TRITON_MLA on the H100 keeps 16-token blocks: 2,157 // 65 = 33 requests, as on the MI300X
    r = plan_one("h100-sxm", 1025, 1, options=VllmOptions(attention_backend="TRITON_MLA"))
    (lay,) = r.layouts
    assert lay.max_concurrency == 33
    assert lay.launch.endswith("--max-num-seqs 1 --attention-backend TRITON_MLA")


def test_pipeline_stages_take_the_smallest_block_count():
    # DeepSeek-V3 (61 MLA layers) over pp 2: vLLM splits 31 + 30 layers (`get_pp_indices`). fp8,
    # FlashMLA's 64-token blocks: a page of one layer is 64 x 576 x 1 B = 36,864 B, a block of
    # stage 0 is 31 x 36,864 = 1,142,784 B, of stage 1 30 x 36,864 = 1,105,920 B.
    v3 = load_model("deepseek-v3")
    stages = (range(31), range(31, 61))
    ekv = VllmPlanKv.build(v3, VllmOptions(), get_gpu("h100-sxm"), 8, stages, "fp8_e4m3", "fp8_e4m3")
    assert (ekv.block_size, ekv.page_bytes) == (64, 36_864)
    # 2 requests of 32,768 tokens: 2 x 512 blocks on each stage
    assert ekv.stage_bytes(32768, 2) == [1024 * 1_142_784, 1024 * 1_105_920]
    # one request: 512 + the null block
    assert ekv.stage_bytes(32768, 1) == [513 * 1_142_784, 513 * 1_105_920]
    # stage 0 leaves 1,025 blocks, stage 1 1,100: vLLM takes the smaller, 1,025 // 512 = 2
    assert ekv.max_batch(32768, [1025 * 1_142_784 + 5, 1100 * 1_105_920]) == 2
    # stage 1 with 512 blocks holds one request but not the null block beside it: 0.33 will not start
    assert ekv.max_batch(32768, [1025 * 1_142_784, 512 * 1_105_920]) == 0
    assert ekv.max_batch(32768, [1025 * 1_142_784, 513 * 1_105_920]) == 1


def test_hybrid_groups_over_pipeline_stages_keep_the_formula_and_say_so():
    # gemma-3-27b: 52 sliding + 10 full layers make 7 KV cache groups; over pp > 1 vLLM projects
    # them onto each stage, which kvcalc does not model
    with pytest.raises(KvcalcError) as e:
        VllmPlanKv.build(
            load_model("gemma-3-27b"), VllmOptions(), get_gpu("l40s"), 1, (range(31), range(31, 62)), "bf16", "bf16"
        )
    assert "7 KV cache groups" in str(e.value)
    r = run_plan(PlanRequest.build(load_model("gemma-3-27b"), seq_len="32k", concurrency=4, gpus="l40s", max_gpus=4))
    assert (
        "vllm on l40s: gemma-3-27b has 7 KV cache groups: vLLM projects them onto each pipeline stage "
        "(kv_cache_planning._project_kv_cache_groups_to_worker), which kvcalc does not model: sized by the "
        "exact formula instead"
    ) in r.notes


CASES = [
    ("deepseek-v2-lite", None),
    ("gemma-3-27b", None),
    ("gemma-3-27b", VllmOptions(version="0.11")),
    ("gpt-oss-20b", None),
    ("qwen3-next-80b-a3b", None),
    ("llama-3.1-8b", VllmOptions(block_size=32)),
]


@pytest.mark.parametrize("name,options", CASES)
def test_every_single_stage_layout_agrees_with_capacity(name, options):
    """For each layout shown (pp 1), the KV memory it leaves (headroom + KV bytes) given to
    `kvcalc.capacity(engine='vllm')` with that GPU's compute capability and vendor (what
    `capacity --gpu` sets) admits max_concurrency / dp requests: floor of vLLM's "Maximum
    concurrency"."""
    import kvcalc

    model = load_model(name)
    r = run_plan(
        PlanRequest.build(
            model, seq_len="32k", concurrency=2, gpus="h100-sxm,b200,mi300x", max_gpus=8, top=40, engine_options=options
        )
    )
    checked = 0
    for lay in r.layouts:
        if lay.pp != 1:
            continue
        g = get_gpu(lay.gpu)
        opts = dataclasses.replace(
            options or VllmOptions(),
            compute_capability=g.compute_capability,
            vendor=None if g.vendor == "other" else g.vendor,
        )
        cap = kvcalc.capacity(
            model,
            engine="vllm",
            kv_memory_bytes=lay.headroom_bytes + lay.kv_cache_bytes_per_gpu,
            max_model_len=32768,
            kv_dtype=lay.kv_dtype,
            tp=lay.tp,
            options=opts,
        )
        # each attention-DP rank (`calc.parallel`) admits its own requests from its own KV memory
        assert int(cap.max_concurrency) * lay.dp * lay.dp_attention == lay.max_concurrency, (lay.gpu, lay.tp, lay.dp)
        checked += 1
    assert checked >= 3


def test_vllm_plan_kv_is_memory_for_and_capacity():
    # the sizer's bytes for a batch are `vllm.memory_for`'s, for a sliding-window model too
    from kvcalc.formats import kv_format

    gemma = load_model("gemma-3-27b")
    ekv = VllmPlanKv.build(gemma, VllmOptions(), get_gpu("h100-sxm"), 1, (range(62),), "bf16", "bf16")
    k = kv_format("bf16")
    for batch in (1, 2, 7):
        assert ekv.stage_bytes(32768, batch) == [vllm.memory_for(gemma, 32768, batch, k, k)]
