"""Exact figures of `kvcalc.engines.vllm.plan` (the mutation run's survivors in that module),
worked by hand from vLLM's block arithmetic.

Sources: V1 `vllm/v1/core/kv_cache_utils.py` `get_num_blocks` (blocks = M // (page x layers per
group)), `get_max_concurrency_for_kv_cache_config` (requests = blocks // blocks per request),
0.33 `kv_cache_planning.get_kv_cache_configs` (one request + the null block must fit; the
smallest block count over pipeline workers); V0 0.6 `CacheEngine.get_cache_block_size` (one block
of every layer) and cdiv(L, block_size) blocks per request; `vllm/engine/arg_utils.py` flags.
"""

import pytest

from kvcalc.engines import vllm
from kvcalc.engines.profile import VllmOptions
from kvcalc.engines.vllm.plan import (
    VllmPlanKv,
    gpu_options,
    launch_block_size,
    launch_flags,
    resolve,
)
from kvcalc.errors import MESSAGE, KvcalcError
from kvcalc.load.gpus import get_gpu
from kvcalc.load.models import load_model
from kvcalc.schema import ModelSpec

Group = vllm.Group


def six(layer_types: list[str]) -> ModelSpec:
    """6 layers, 8 KV heads of 128: a page of 16 tokens is 16 x 2 x 8 x 128 x 2 B = 65,536 B (bf16)."""
    return ModelSpec(
        name="six",
        model_type="llama",
        n_layers=6,
        n_heads=8,
        n_kv_heads=8,
        head_dim=128,
        hidden_size=1024,
        max_position_embeddings=4096,
        layer_types=layer_types,
    )


SIX = ["full", "mlp", "full", "full", "mlp", "mlp"]  # 3 KV layers, 3 without a cache
MLP_FIRST = ["mlp", "mlp", "full", "mlp", "full", "full"]


def whole(model: ModelSpec, version: str = "0.33", **options) -> VllmPlanKv:
    return resolve(model, VllmOptions(version=version, **options), None, 1, "bf16", "bf16")


# ----- pipeline stages: layers per stage, mlp layers, empty stages ----------------------------------


@pytest.mark.parametrize("version", ["0.33", "0.11"])
def test_v1_stages_count_only_layers_with_a_cache(version):
    w = whole(six(SIX), version)
    assert w.page_bytes == 16 * 2 * 8 * 128 * 2 == 65_536
    assert w.stages == (((Group("full", None, 3),), 3),)
    # layers 0-2: full, mlp, full -> 2; layers 3-5: full, mlp, mlp -> 1
    assert VllmPlanKv.on_stages(six(SIX), w, (range(3), range(3, 6))).stages == (
        ((Group("full", None, 2),), 2),
        ((Group("full", None, 1),), 1),
    )
    # layers 4-5 are both mlp: that stage holds no group at all
    assert VllmPlanKv.on_stages(six(SIX), w, (range(4), range(4, 6))).stages == (
        ((Group("full", None, 3),), 3),
        ((), 0),
    )


def test_v0_stages_count_every_layer():
    # V0 (0.6) allocates a block of every layer (CacheEngine), mlp ones included: 6 per group
    w = whole(six(SIX), "0.6")
    assert w.stages == (((Group("full", None, 6),), 6),)
    assert VllmPlanKv.on_stages(six(SIX), w, (range(3), range(3, 6))).stages == (
        ((Group("full", None, 3),), 3),
        ((Group("full", None, 3),), 3),
    )
    assert VllmPlanKv.on_stages(six(SIX), w, (range(4), range(4, 6))).stages == (
        ((Group("full", None, 4),), 4),
        ((Group("full", None, 2),), 2),
    )


def test_v0_makes_sliding_layers_full():
    # Gemma-2-9B (21 sliding + 21 full) in 0.6: one full group of all 42 layers (V0 CacheEngine)
    w = whole(load_model("gemma-2-9b"), "0.6")
    assert w.stages == (((Group("full", None, 42),), 42),)


def test_a_sliding_groups_window_goes_to_every_stage():
    # Mistral-7B-v0.1: 32 sliding layers of window 4,096, one group; 2 stages of 16
    m = load_model("mistral-7b-v0.1")
    w = whole(m, "0.11")
    assert VllmPlanKv.on_stages(m, w, (range(16), range(16, 32))).stages == (
        ((Group("sliding", 4096, 16, 0),), 16),
        ((Group("sliding", 4096, 16, 0),), 16),
    )


def test_several_groups_over_stages_are_refused_with_pp():
    # 5 sliding + 4 full layers: two kinds, two groups in 0.33
    m = ModelSpec(
        name="nine",
        model_type="gemma2",
        n_layers=9,
        n_heads=8,
        n_kv_heads=8,
        head_dim=128,
        hidden_size=1024,
        max_position_embeddings=8192,
        sliding_window=1024,
        layer_types=["sliding", "full"] * 4 + ["sliding"],
    )
    with pytest.raises(KvcalcError) as info:
        VllmPlanKv.on_stages(m, whole(m), (range(4), range(4, 9)))
    e = info.value
    assert (e.field, e.value, e.form, e.option) == ("pp", 2, MESSAGE, "--pp")
    assert str(e) == (
        "nine has 2 KV cache groups: vLLM projects them onto each pipeline stage "
        "(kv_cache_planning._project_kv_cache_groups_to_worker), which kvcalc does not model"
    )


# ----- bytes and requests per stage ---------------------------------------------------------------


def test_an_empty_first_stage_needs_nothing_and_admits_what_the_others_do():
    m = six(MLP_FIRST)
    kv = VllmPlanKv.on_stages(m, whole(m), (range(2), range(2, 6)))
    assert kv.stages == (((), 0), ((Group("full", None, 3),), 3))
    # 100 tokens: cdiv(100, 16) = 7 blocks; 0.33: max(2 x 7, 7 + 1) = 14 blocks x 65,536 x 3 layers
    assert kv.stage_bytes(100, 2) == [0, 14 * 65_536 * 3] == [0, 2_752_512]
    # 10^7 B: 10,000,000 // (65,536 x 3 = 196,608) = 50 blocks (>= 7 + 1); 50 // 7 = 7 requests
    n = kv.max_batch(100, [0, 10_000_000])
    assert n == 7 and type(n) is int


def test_the_stage_with_fewest_blocks_decides():
    m = six(SIX)
    kv = VllmPlanKv.on_stages(m, whole(m), (range(3), range(3, 6)))
    # stage 0: 10^7 // (65,536 x 2) = 76 blocks -> 76 // 7 = 10; stage 1: 10^7 // 65,536 = 152 -> 21
    assert kv.max_batch(100, [10_000_000, 10_000_000]) == 10


def test_no_stage_with_a_cache_admits_no_request():
    kv = VllmPlanKv(version="0.33", block_size=16, page_bytes=65_536, stages=(((), 0),), in_flight=16_384)
    assert kv.max_batch(100, [10**9]) == 0
    assert kv.stage_bytes(100, 4) == [0]


def test_v0_blocks_per_request_are_cdiv_of_the_length():
    kv = whole(six(SIX), "0.6")
    # cdiv(100, 16) = 7 blocks; V0 has no null-block rule: 2 x 7 = 14 blocks x 65,536 x 6 layers
    assert kv.stage_bytes(100, 2) == [14 * 65_536 * 6] == [5_505_024]
    # 10^7 // (65,536 x 6 = 393,216) = 25 blocks; 25 // 7 = 3
    assert kv.max_batch(100, [10_000_000]) == 3
    # 96 tokens: exactly 6 blocks; 25 // 6 = 4
    assert kv.max_batch(96, [10_000_000]) == 4


# ----- what resolve passes on to the release's resolve-----------------------------------------------------


def test_resolve_passes_the_options_on():
    llama = load_model("llama-3.1-8b")
    # in flight: 0.33 with async scheduling 2 x 8,192, without 8,192
    assert whole(llama).in_flight == 16_384
    assert whole(llama, async_scheduling=False).in_flight == 8_192
    # int8 with per-token-head scales: 16 x 2 x 8 x 128 x 1 B = 32,768 + fp32 scales 16 x 2 x 8 x 4 = 1,024
    assert resolve(llama, VllmOptions(), None, 1, "int8", "int8").page_bytes == 32_768
    assert resolve(llama, VllmOptions(per_token_head_scales=True), None, 1, "int8", "int8").page_bytes == 33_792
    # Qwen3-Next: prefix caching off ('none' mode) -> 1 Mamba page per request, default on ('align') -> 3
    q = load_model("qwen3-next-80b-a3b")
    assert {g.mamba_pages for g in whole(q, prefix_caching=False).stages[0][0] if g.kind == "mamba"} == {1}
    assert {g.mamba_pages for g in whole(q).stages[0][0] if g.kind == "mamba"} == {3}
    # Llama-4-Scout without VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE: one full group of 48
    scout = load_model("llama-4-scout")
    assert resolve(scout, VllmOptions(chunked_local_hybrid=False), None, 8, "bf16", "bf16").stages == (
        ((Group("full", None, 48),), 48),
    )


def test_resolve_groups_by_the_version():
    # 5 sliding + 4 full: 0.33 takes 5 layers per group (5 < 4 x 1.5): one sliding group of 5, one full of 4
    m = ModelSpec(
        name="nine",
        model_type="gemma2",
        n_layers=9,
        n_heads=8,
        n_kv_heads=8,
        head_dim=128,
        hidden_size=1024,
        max_position_embeddings=8192,
        sliding_window=1024,
        layer_types=["sliding", "full"] * 4 + ["sliding"],
    )
    assert whole(m).stages == (((Group("sliding", 1024, 5), Group("full", None, 4)), 5),)
    # 0.11: 4 per group: sliding cdiv(5, 4) = 2 groups (layers 0::2 = 3, 1::2 = 2), full 1
    assert whole(m, "0.11").stages == (
        ((Group("sliding", 1024, 3), Group("sliding", 1024, 2), Group("full", None, 4)), 4),
    )


def test_the_gpu_and_backend_set_the_mla_block():
    ds = load_model("deepseek-v3")
    b200, h100 = get_gpu("b200"), get_gpu("h100-sxm")
    # 0.33: FLASHINFER_MLA 32 on Blackwell; no GPU: Hopper assumed, FLASH_ATTN_MLA 16
    assert VllmPlanKv.build(ds, VllmOptions(), b200, 8, (range(61),), "bf16", "bf16").block_size == 32
    assert VllmPlanKv.build(ds, VllmOptions(), None, 8, (range(61),), "bf16", "bf16").block_size == 16
    # --attention-backend FLASHMLA on Hopper: 64
    assert resolve(ds, VllmOptions(attention_backend="FLASHMLA"), h100, 8, "bf16", "bf16").block_size == 64


def test_gpu_options_vendor_other_is_none():
    o = VllmOptions()
    m2 = get_gpu("m2-max")
    assert m2.vendor == "other" and gpu_options(o, m2).vendor is None
    assert gpu_options(o, get_gpu("mi300x")).vendor == "amd"
    assert gpu_options(o, None) is o


# ----- the launch line ------------------------------------------------------------------------------


def test_launch_block_size():
    ds, llama, h100 = load_model("deepseek-v2-lite"), load_model("llama-3.1-8b"), get_gpu("h100-sxm")
    # no MLA: a --block-size given is stated unless it is 16
    assert launch_block_size(llama, VllmOptions(block_size=32), h100) == 32
    assert launch_block_size(llama, VllmOptions(block_size=16), h100) is None
    assert launch_block_size(llama, VllmOptions(), h100) is None
    # MLA on Hopper, 0.33: the model's own dtype (k_dtype None) -> FLASH_ATTN_MLA 16, not stated;
    # fp8 -> FLASHMLA 64; --attention-backend FLASHMLA -> 64; Blackwell FLASHINFER_MLA 32
    assert launch_block_size(ds, VllmOptions(), h100) is None
    assert launch_block_size(ds, VllmOptions(), h100, "fp8") == 64
    assert launch_block_size(ds, VllmOptions(attention_backend="FLASHMLA"), h100) == 64
    assert launch_block_size(ds, VllmOptions(), get_gpu("b200")) == 32
    # V0 (0.6): no MLA backend choice, vLLM's 16
    assert launch_block_size(ds, VllmOptions(version="0.6"), h100) is None
    # per-token-head scales: no 0.33 MLA backend takes fp8_per_token_head
    with pytest.raises(KvcalcError, match="finds no valid MLA attention backend"):
        launch_block_size(ds, VllmOptions(per_token_head_scales=True), h100, "fp8")


def test_launch_flags_prefix_caching_either_way():
    assert launch_flags(VllmOptions(prefix_caching=True)) == ("--enable-prefix-caching",)
    assert launch_flags(VllmOptions(prefix_caching=False)) == ("--no-enable-prefix-caching",)
    assert launch_flags(VllmOptions()) == ()
