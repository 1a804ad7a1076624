"""The engine profiles (`kvcalc/engines/profile.py`): each option object reaches the engine
function it stands for, each default, each refusal's whole line, the KV label, the plan formats.

A profile only maps its options onto the engine module's functions (whose arithmetic
tests/engines/test_{vllm,sglang,llamacpp}_exact.py pin). So each test here (1) derives a figure
by hand where the arithmetic is short, and (2) for the rest checks that the profile's result is
the module function's result with the same non-default option, and that the option changes that
result (so an option dropped or reset on the way is seen).

Models: configs/models/llama-3.1-8b.yaml (32 layers, 8 KV heads x 128: bf16 K + V = 4,096 B per
layer per token, 131,072 B per token over the 32 layers) and gemma-3-27b.yaml (62 layers: 52
sliding with window 1024 + 10 full, 16 KV heads x 128: 8,192 B per layer per token in bf16).
GiB = 2^30 B.
"""

from __future__ import annotations

import dataclasses
import warnings

import pytest

from kvcalc.engines import ideal, llamacpp, sglang, vllm
from kvcalc.engines.profile import IdealOptions, LlamacppOptions, SglangOptions, VllmOptions, get_profile
from kvcalc.errors import KvcalcError, KvcalcWarning
from kvcalc.formats import kv_format
from kvcalc.load.models import load_model

BF16, FP16, Q8 = kv_format("bf16"), kv_format("fp16"), kv_format("q8_0")
GiB = 2**30
IDEAL, VLLM, SGLANG, LLAMACPP = (get_profile(n) for n in ("ideal", "vllm", "sglang", "llamacpp"))


@pytest.fixture(scope="module")
def llama():
    return load_model("llama-3.1-8b")


@pytest.fixture(scope="module")
def gemma():
    return load_model("gemma-3-27b")


def refusal(fn, *args, **kwargs) -> KvcalcError:
    with pytest.raises(KvcalcError) as e:
        fn(*args, **kwargs)
    return e.value


# ----- the base interface: capacity, memory_for, for_batch, kv_formats ------------------------


def test_capacity_default_tp_is_one(llama):
    # SGLang, page 1, tp 1: 2^30 B / 131,072 B per token = 8,192 tokens; tp 2 halves the heads
    assert SGLANG.capacity(llama, GiB, BF16, BF16).kv_cache_tokens == 8192
    assert SGLANG.capacity(llama, GiB, BF16, BF16, tp=2).kv_cache_tokens == 16384
    # vLLM: one block of 16 tokens over 32 layers = 16 x 131,072 = 2 MiB: 512 blocks in 1 GiB
    assert VLLM.capacity(llama, GiB, BF16, BF16).num_gpu_blocks == 512


def test_capacity_needs_memory(llama):
    e = refusal(VLLM.capacity, llama, None, BF16, BF16)
    assert str(e) == "--engine vllm needs --kv-memory (the KV memory of one GPU rank, e.g. 6.51GiB)"


def test_ideal_sizes_no_budget_and_no_batch(llama):
    assert str(refusal(IDEAL.memory_for, llama, 1000, 2, BF16, BF16)) == (
        "--engine ideal does not size a KV memory budget"
    )
    assert str(refusal(IDEAL.for_batch, llama, 1000, 2, BF16, BF16)) == "--engine ideal is estimate's own result"


def test_ideal_capacity_keeps_its_dtype_label(llama):
    # no label given: ideal.capacity's own (the format name); a label given replaces it
    assert IDEAL.capacity(llama, GiB, BF16, BF16) == ideal.capacity(llama, GiB, BF16, BF16)
    assert IDEAL.capacity(llama, GiB, BF16, BF16).kv_cache_dtype == "bf16"
    assert IDEAL.capacity(llama, GiB, BF16, BF16, kv_cache_dtype="auto (bf16)").kv_cache_dtype == "auto (bf16)"
    # 2^30 / 131,072 = 8,192 tokens; tp 2: 16,384
    assert IDEAL.capacity(llama, GiB, BF16, BF16).kv_cache_tokens == 8192
    assert IDEAL.capacity(llama, GiB, BF16, BF16, tp=2).kv_cache_tokens == 16384


def test_options_of_another_engine_refused():
    e = refusal(VLLM.options, SglangOptions())
    assert str(e) == "--engine vllm takes VllmOptions, not SglangOptions"
    assert IDEAL.options(None) == IdealOptions()


def test_for_batch_sizes_memory_with_tp_and_options(llama):
    # vLLM, tp 2, block 32: cdiv(1000, 32) = 32 blocks x (32 layers x 32 tokens x 2,048 B per rank
    # = 2 MiB) = 64 MiB a request; 2 requests: 134,217,728 B
    res = VLLM.for_batch(llama, 1000, 2, BF16, BF16, tp=2, options=VllmOptions(block_size=32))
    assert res.kv_memory_bytes == 134_217_728
    assert (res.block_size, res.max_model_len, res.concurrency) == (32, 1000, 2)
    # vLLM's concurrency: num_blocks / blocks a request = 64 / 32 = 2.0 (get_max_concurrency_for_kv_cache_config)
    assert (res.num_gpu_blocks, res.max_concurrency) == (64, 2.0)
    # the default tp (1), given memory: 1 GiB / 2 MiB = 512 blocks
    res = VLLM.for_batch(llama, 1000, 2, BF16, BF16, kv_memory_bytes=GiB)
    assert (res.kv_memory_bytes, res.num_gpu_blocks, res.concurrency) == (GiB, 512, 2)
    # SGLang, default tp 1, page 1: 2 x 1,000 tokens x 131,072 B = 262,144,000 B
    assert SGLANG.for_batch(llama, 1000, 2, BF16, BF16).kv_memory_bytes == 262_144_000


def test_kv_formats_labels(llama):
    # no dtype: the engine's default, labelled by it
    assert VLLM.kv_formats(llama).label == "auto (bf16)"
    assert VLLM.kv_formats(llama, "AUTO").label == "auto (bf16)"
    # a dtype as typed
    c = VLLM.kv_formats(llama, "fp8")
    assert (c.k.name, c.v.name, c.label) == ("fp8_e4m3", "fp8_e4m3", "fp8")
    # one side overridden: K/V; both the same: one name
    assert VLLM.kv_formats(llama, k_dtype="fp8").label == "fp8_e4m3/bf16"
    assert VLLM.kv_formats(llama, v_dtype="fp8").label == "bf16/fp8_e4m3"
    assert VLLM.kv_formats(llama, k_dtype="fp8", v_dtype="fp8_e4m3").label == "fp8_e4m3"
    assert SGLANG.kv_formats(llama, "bf16", k_dtype="fp8", v_dtype="fp8").label == "fp8_e4m3"


def test_kv_formats_per_token_head_scales(llama):
    c = VLLM.kv_formats(llama, "fp8_per_token_head")
    assert (c.k.name, c.label, c.options.per_token_head_scales) == ("fp8_e4m3", "fp8_per_token_head", True)
    c = VLLM.kv_formats(llama, "int8_per_token_head")
    assert (c.k.name, c.options.per_token_head_scales) == ("int8", True)
    assert VLLM.kv_formats(llama, "int8").options.per_token_head_scales is False
    e = refusal(VLLM.kv_formats, llama, "bf16_per_token_head")
    assert str(e) == "--kv-dtype bf16_per_token_head: vLLM has int8_per_token_head and fp8_per_token_head only"


def test_weight_only_format_refused_per_side(llama):
    # the ideal profile has no engine check of its own: the base check names the side
    e = refusal(IDEAL.kv_formats, llama, k_dtype="mxfp4")
    assert (e.field, e.value) == ("k_dtype", "mxfp4")
    assert str(e).startswith("mxfp4 is a weight format, not a KV-cache format; for the cache use one of ")
    e = refusal(IDEAL.kv_formats, llama, v_dtype="mxfp4")
    assert (e.field, e.value) == ("v_dtype", "mxfp4")


@pytest.mark.parametrize(
    "typed, field, option",
    [({"k_dtype": "fp8"}, "k_dtype", "--k-dtype"), ({"v_dtype": "fp8"}, "v_dtype", "--v-dtype"),
     ({"kv_dtype": "fp8"}, "kv_dtype", "--kv-dtype"), ({"kv_dtype": "nvfp4"}, "kv_dtype", "--kv-dtype")],
)  # fmt: skip
def test_llamacpp_kv_formats_name_the_side_as_typed(llama, typed, field, option):
    # the option that gave the format and the name typed (fp8, not kvcalc's fp8_e4m3)
    e = refusal(LLAMACPP.kv_formats, llama, **typed)
    name = next(iter(typed.values()))
    assert (e.field, e.value) == (field, name)
    assert str(e) == (
        f"{option}: llama.cpp 0c1e570 has no '{name}' KV cache type; use one of f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, "
        "q5_1, iq4_nl"
    )


# ----- plan formats ---------------------------------------------------------------------------


def test_plan_formats(llama):
    fp8 = frozenset({"fp8_e4m3"})
    assert VLLM.plan_formats(llama) == (("bf16", "fp8_e4m3"), (None, "fp8_e4m3"), fp8)
    # an fp16 model keeps fp16; an fp32 one is served in bf16
    assert SGLANG.plan_formats(llama.model_copy(update={"dtype": "fp16"})) == (
        ("fp16", "fp8_e4m3"),
        (None, "fp8_e4m3"),
        fp8,
    )
    assert VLLM.plan_formats(llama.model_copy(update={"dtype": "fp32"})) == (
        ("bf16", "fp8_e4m3"),
        (None, "fp8_e4m3"),
        fp8,
    )
    # an fp8 checkpoint: its own weights only
    assert VLLM.plan_formats(llama.model_copy(update={"weight_dtype": "fp8_e4m3"})) == (
        ("bf16", "fp8_e4m3"),
        (None,),
        fp8,
    )


def test_llamacpp_plan_formats(llama):
    assert LLAMACPP.plan_formats(llama) == (("fp16", "q8_0"), (None, "q8_0"), frozenset())
    # an fp8 checkpoint: GGUF has no fp8, so the model's 16-bit dtype
    assert LLAMACPP.plan_formats(llama.model_copy(update={"weight_dtype": "fp8_e4m3"})) == (
        ("fp16", "q8_0"),
        ("bf16", "q8_0"),
        frozenset(),
    )


# ----- vLLM -----------------------------------------------------------------------------------


def test_vllm_memory_for_by_hand(llama):
    # 2 requests x cdiv(1000, 16) = 63 blocks x (32 layers x 16 tokens x 4,096 B = 2,097,152 B)
    assert VLLM.memory_for(llama, 1000, 2, BF16, BF16) == 264_241_152
    # tp 2: 2,048 B per layer per token per rank: half
    assert VLLM.memory_for(llama, 1000, 2, BF16, BF16, tp=2) == 132_120_576
    # block 32: 2 x 32 blocks x 4,194,304 B
    assert VLLM.memory_for(llama, 1000, 2, BF16, BF16, options=VllmOptions(block_size=32)) == 268_435_456
    # int8 with per-token-head scales: + 8 heads x (K + V) x 4 B = 64 B per layer per token,
    # 2,048 + 64 = 2,112 B: 2 x 63 x 32 x 16 x 2,112 = 136,249,344 (without: 132,120,576)
    i8 = kv_format("int8")
    assert VLLM.memory_for(llama, 1000, 2, i8, i8, options=VllmOptions(per_token_head_scales=True)) == 136_249_344
    assert VLLM.memory_for(llama, 1000, 2, i8, i8) == 132_120_576


@pytest.mark.parametrize("opts", [dict(hybrid_allocator=False), dict(max_num_batched_tokens=2048), dict(version="0.6")])
def test_vllm_memory_for_passes_each_option(gemma, opts):
    if opts.get("version") == "0.6":  # vLLM 0.6.6 cannot load Gemma-3 (tests/engines/test_vllm06_refusals.py): Gemma-2
        gemma = load_model("gemma-2-9b")
    o = VllmOptions(**opts)
    got = VLLM.memory_for(gemma, 8000, 2, BF16, BF16, options=o)
    assert got == vllm.memory_for(gemma, 8000, 2, BF16, BF16, options=o)
    assert got != VLLM.memory_for(gemma, 8000, 2, BF16, BF16)


def test_vllm_memory_for_without_hybrid_by_hand(gemma):
    # every layer keeps every token: 62 x 8,192 B = 507,904 B per token; cdiv(8000, 16) x 16 = 8,000
    # tokens; 2 requests: 8,126,464,000 B
    assert VLLM.memory_for(gemma, 8000, 2, BF16, BF16, options=VllmOptions(hybrid_allocator=False)) == 8_126_464_000
    # V0 sizes sliding layers the same way, but 0.6.6 cannot load Gemma-3; Gemma-2-9B: 42 layers x 8 heads x
    # 256 x 2 (K, V) x 2 B = 344,064 B per token x 8,000 x 2 requests = 5,505,024,000 B
    assert (
        VLLM.memory_for(load_model("gemma-2-9b"), 8000, 2, BF16, BF16, options=VllmOptions(version="0.6"))
        == 5_505_024_000
    )


@pytest.mark.parametrize(
    "opts",
    [
        dict(block_size=32),
        dict(hybrid_allocator=False),
        dict(max_num_batched_tokens=2048),
        dict(version="0.6", swap_space_bytes=4 * GiB),
    ],
)
def test_vllm_capacity_passes_each_option(gemma, opts):
    if opts.get("version") == "0.6":  # vLLM 0.6.6 cannot load Gemma-3: Gemma-2
        gemma = load_model("gemma-2-9b")
    kw = dict(tp=2, max_model_len=8000, concurrency=3)
    o = VllmOptions(**opts)
    got = VLLM.capacity(gemma, 8 * GiB, BF16, BF16, options=o, **kw)
    assert got == vllm.capacity(gemma, 8 * GiB, BF16, BF16, **kw, options=VllmOptions(**opts))
    assert got != VLLM.capacity(gemma, 8 * GiB, BF16, BF16, **kw)
    assert (got.max_model_len, got.concurrency) == (8000, 3)


def test_vllm_capacity_label_and_scales(llama):
    i8 = kv_format("int8")
    got = VLLM.capacity(
        llama, GiB, i8, i8, options=VllmOptions(per_token_head_scales=True), kv_cache_dtype="int8_per_token_head"
    )
    assert got == vllm.capacity(
        llama,
        GiB,
        i8,
        i8,
        kv_cache_dtype="int8_per_token_head",
        options=VllmOptions(per_token_head_scales=True, version=VllmOptions().version),
    )
    assert got.kv_cache_dtype == "int8_per_token_head"
    # 32 x 16 x 2,112 B = 1,081,344 B a block: floor(2^30 / 1,081,344) = 992 blocks
    assert got.num_gpu_blocks == 992


def test_vllm_check_options():
    VLLM.check_options(VllmOptions(block_size=32))
    with pytest.raises(KvcalcError):
        VLLM.check_options(VllmOptions(block_size=24))


# ----- SGLang ---------------------------------------------------------------------------------


def test_sglang_memory_for_by_hand(llama):
    # 2 requests x 1,000 tokens x 131,072 B
    assert SGLANG.memory_for(llama, 1000, 2, BF16, BF16) == 262_144_000
    # tp 2: 65,536 B per token per rank
    assert SGLANG.memory_for(llama, 1000, 2, BF16, BF16, tp=2) == 131_072_000
    # pages of 64: cdiv(1000, 64) x 64 = 1,024 tokens a request: 2 x 1,024 x 131,072
    assert SGLANG.memory_for(llama, 1000, 2, BF16, BF16, options=SglangOptions(page_size=64)) == 268_435_456
    # K fp8, V bf16: 32 x 8 x 128 x (1 + 2) = 98,304 B per token: 2 x 1,000 x 98,304
    assert SGLANG.memory_for(llama, 1000, 2, kv_format("fp8"), BF16) == 196_608_000
    assert SGLANG.memory_for(llama, 1000, 3, BF16, BF16) == 393_216_000
    assert SGLANG.memory_for(llama, 500, 2, BF16, BF16) == 131_072_000


def test_sglang_capacity_passes_everything(llama):
    kw = dict(tp=2, max_model_len=1000, concurrency=3)
    got = SGLANG.capacity(llama, GiB, BF16, BF16, options=SglangOptions(page_size=64), kv_cache_dtype="auto", **kw)
    assert got == sglang.capacity(llama, GiB, BF16, BF16, page_size=64, kv_cache_dtype="auto", **kw)
    # tp 2: 2^30 / 65,536 = 16,384 tokens = 256 pages of 64; requests of 1,000 tokens take 1,024
    assert (got.kv_cache_tokens, got.num_gpu_blocks, got.max_model_len, got.concurrency) == (16384, 256, 1000, 3)
    assert got.max_concurrency == 16  # 16,384 / 1,024
    # the longest context 3 requests share: 16,384 // 3 = 5,461 tokens, whole pages of 64: 5,440
    assert got.longest_context == 5440


def test_sglang_page_size_checked():
    assert str(refusal(SGLANG.check_options, SglangOptions(page_size=0))) == (
        "--page-size must be a positive integer, got 0"
    )
    SGLANG.check_options(SglangOptions(page_size=1))


# ----- llama.cpp ------------------------------------------------------------------------------

# each option, set away from its default (gemma: sliding and full layers, so swa_full and n_ubatch
# change the SWA cache)
LLAMACPP_OPTIONS = [
    dict(parallel=2),
    dict(parallel=2, unified=False),
    dict(version="legacy"),
    dict(version="legacy", flash_attn=True),
    dict(swa_full=True),
    dict(n_ubatch=2048),
    dict(n_gpu_layers=40),
    dict(n_devices=2),
    dict(n_devices=2, tensor_split=(3.0, 1.0)),
    dict(parallel=2, ollama=True),
]


def _kwargs(opts: dict) -> dict:
    return {**opts, "tensor_split": list(opts["tensor_split"])} if "tensor_split" in opts else opts


@pytest.mark.parametrize("opts", LLAMACPP_OPTIONS)
def test_llamacpp_allocate_passes_each_option(gemma, opts):
    o = LlamacppOptions(**opts)
    kw = dict(max_model_len=4000, concurrency=2, kv_memory_bytes=64 * GiB)
    got = LLAMACPP.allocate(gemma, 8000, BF16, BF16, options=o, **kw)
    assert got == llamacpp.allocate(gemma, 8000, BF16, BF16, **kw, options=LlamacppOptions(**_kwargs(opts)))
    assert got != LLAMACPP.allocate(gemma, 8000, BF16, BF16, **kw)
    assert (got.max_model_len, got.concurrency, got.kv_memory_bytes) == (4000, 2, 64 * GiB)


def test_llamacpp_allocate_warns_against_the_budget(llama):
    # 8,192 cells x 131,072 B = 1 GiB: more than 512 MiB
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        res = LLAMACPP.allocate(llama, 8192, BF16, BF16, kv_memory_bytes=GiB // 2)
    assert res.engine_kv_bytes == GiB
    assert [x.category for x in w] == [KvcalcWarning]
    assert res.notes[-1].endswith("the largest --ctx-size that fits is 4096")


def test_llamacpp_capacity_with_n_ctx(llama):
    # --ctx-size 8192 given: allocate it (no search); the result carries max_model_len and concurrency
    res = LLAMACPP.capacity(
        llama, None, BF16, BF16, max_model_len=2048, concurrency=4, options=LlamacppOptions(n_ctx=8192)
    )
    assert (res.n_ctx, res.engine_kv_bytes, res.max_model_len, res.concurrency) == (8192, GiB, 2048, 4)
    # one stream of 8,192 cells: 8,192 / 2,048 = 4 requests; 4 requests: 2,048 tokens each
    assert (res.max_concurrency, res.longest_context) == (4.0, 2048)


def test_llamacpp_capacity_searches_the_budget(llama):
    # 1 GiB / 131,072 B = 8,192 cells: --ctx-size 8192
    res = LLAMACPP.capacity(llama, GiB, BF16, BF16, max_model_len=2048, concurrency=4)
    assert res == llamacpp.capacity(
        llama, GiB, BF16, BF16, max_model_len=2048, concurrency=4, options=LlamacppOptions()
    )
    assert (res.n_ctx, res.kv_memory_bytes, res.max_model_len, res.concurrency) == (8192, GiB, 2048, 4)
    # K q8_0 (34 B a block of 32: 8 x 128 / 32 x 34 = 1,088 B a layer) and V f16 (2,048 B a layer):
    # 32 x 3,136 = 100,352 B a cell; floor(2^30 / 100,352) = 10,699 cells. Two streams (not unified)
    # of GGML_PAD(n_ctx / 2, 256): -c 10,496 makes 2 x 5,376 = 10,752 cells (too many); -c 10,240
    # makes 2 x 5,120 = 10,240 (fits)
    res = LLAMACPP.capacity(llama, GiB, Q8, FP16, options=LlamacppOptions(parallel=2, unified=False))
    assert (res.n_ctx, res.n_cells, res.kv_cache_dtype) == (10240, 10240, "q8_0/f16")


def test_llamacpp_capacity_refusals(llama):
    assert str(refusal(LLAMACPP.capacity, llama, GiB, BF16, BF16, tp=2)) == (
        "llama.cpp splits layers over devices, not heads: drop --tp, use --gpus / --tensor-split"
    )
    assert str(refusal(LLAMACPP.capacity, llama, None, BF16, BF16)) == (
        "give --ctx-size (llama.cpp's -c) or --kv-memory"
    )


def test_llamacpp_for_batch(gemma, llama):
    # n_ctx = 2,048 x 3 = 6,144 cells, --parallel 3, one request a slot
    res = LLAMACPP.for_batch(llama, 2048, 3, BF16, BF16)
    assert (res.n_ctx, res.max_model_len, res.concurrency) == (6144, 2048, 3)
    assert res.engine_kv_bytes == 6144 * 131_072
    assert res == llamacpp.allocate(
        llama, 6144, BF16, BF16, max_model_len=2048, concurrency=3, options=LlamacppOptions(parallel=3)
    )
    # the options given are kept (legacy, split streams), with --parallel set to the batch
    o = LlamacppOptions(unified=False, swa_full=True, parallel=7)
    got = LLAMACPP.for_batch(gemma, 2048, 3, BF16, BF16, options=o)
    assert got == llamacpp.allocate(
        gemma,
        6144,
        BF16,
        BF16,
        max_model_len=2048,
        concurrency=3,
        options=LlamacppOptions(parallel=3, unified=False, swa_full=True),
    )
    assert got != LLAMACPP.for_batch(gemma, 2048, 3, BF16, BF16)


def test_llamacpp_options_fields():
    o = LlamacppOptions(
        n_ctx=4096,
        parallel=4,
        unified=False,
        version="legacy",
        flash_attn=True,
        swa_full=True,
        n_ubatch=1024,
        n_gpu_layers=20,
        n_devices=2,
        tensor_split=(1.0, 2.0),
        ollama=True,
    )
    assert dataclasses.asdict(o) == dict(
        n_ctx=4096,
        parallel=4,
        unified=False,
        version="legacy",
        flash_attn=True,
        swa_full=True,
        n_ubatch=1024,
        n_gpu_layers=20,
        n_devices=2,
        ollama=True,
        tensor_split=(1.0, 2.0),
        n_batch=2048,
        tool="llama-server",
    )
    assert LlamacppOptions().tensor_split is None
    assert dataclasses.asdict(LlamacppOptions())["n_ctx"] is None
