"""SGLang's token pool (`kvcalc/engines/sglang.py`), every field of `capacity` pinned, and
`memory_for`, the start-up refusals and `default_kv_dtype`.

Written for mutation testing (tools/mutation.py). Models: configs/models/llama-3.1-8b.yaml,
gemma-3-27b.yaml and tests/data/engine-configs/deepseek-v2-lite.yaml. GiB = 2^30 B; SGLang
labels GiB "GB" (memory_pool.py: GB = 1024 * 1024 * 1024).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kvcalc.engines import sglang
from kvcalc.errors import KvcalcError
from kvcalc.formats import kv_format
from kvcalc.load.models import load_model
from kvcalc.schema import ModelSpec

CFG = Path(__file__).parents[1] / "data" / "engine-configs"
BF16, FP8, Q8 = kv_format("bf16"), kv_format("fp8"), kv_format("q8_0")
GiB = 2**30
GB_NOTE = 'SGLang prints GiB values (bytes / 2^30) labelled "GB" (memory_pool.py: GB = 1024 * 1024 * 1024)'
SWA_NOTE = (
    "sliding-window layers sized like full ones (SGLang's SWA pool serves only the architectures "
    "model_config.is_hybrid_swa_model lists)"
)
EMPTY = dict(
    engine_state_bytes=None,
    kv_memory_basis=None,
    usable_blocks=None,
    num_cpu_blocks=None,
    n_cells=None,
    n_ctx=None,
    devices=None,
)


def llama():
    return load_model("llama-3.1-8b")


def test_llama_8b_tp2_pages_of_16():
    # cell (tp 2: 8 // 2 = 4 KV heads per rank) = 2 x 32 layers x 4 x 128 x 2 B = 65,536 B.
    # 10 GiB // 65,536 = 163,840 tokens, a multiple of 16 already; 163,840 / 16 = 10,240 pages.
    # pool rows = 163,840 + 16 (page_size dummy rows) = 163,856; K = 32 x 4 x 128 x 2 B = 32,768 B/row
    #   -> 5,369,233,408 B (5.0005 GiB, "5.00 GB"); V the same; total 10,738,466,816 B.
    # a request of 1,000 tokens takes cdiv(1000, 16) x 16 = 1,008 -> 163,840 / 1,008 = 162.54.
    # 4 requests of t tokens: 4 x cdiv(t, 16) x 16 <= 163,840 -> t <= 40,960.
    r = sglang.capacity(llama(), 10 * GiB, BF16, BF16, tp=2, page_size=16, max_model_len=1000, concurrency=4)
    assert r.model_dump() == dict(
        EMPTY,
        engine="sglang",
        engine_version="SGLang 0.5.23",
        kv_memory_bytes=10 * GiB,
        kv_cache_dtype="bf16",
        block_size=16,
        page_size_bytes=65_536 * 16,
        num_gpu_blocks=10_240,
        kv_cache_tokens=163_840,
        engine_kv_bytes=10_738_466_816,
        max_model_len=1000,
        max_concurrency=pytest.approx(163_840 / 1_008),
        concurrency=4,
        longest_context=40_960,
        k_bytes=5_369_233_408,
        v_bytes=5_369_233_408,
        log_lines=["KV Cache is allocated. dtype: torch.bfloat16, #tokens: 163840, K size: 5.00 GB, V size: 5.00 GB"],
        notes=[GB_NOTE],
    )


def test_mla_one_latent_buffer_and_kv_size_line():
    # deepseek-v2-lite: 27 layers x (512 + 64) x 2 B = 31,104 B per token, one buffer (no V).
    # 1 GiB // 31,104 = 34,521 tokens (31,104 x 34,521 = 1,073,741,184 B); rows 34,522
    #   -> 34,522 x 31,104 = 1,073,772,288 B = 1.00003 GiB ("1.00 GB").
    # L = 163,840 (max_position_embeddings): 34,521 / 163,840 = 0.2107.
    r = sglang.capacity(load_model(CFG / "deepseek-v2-lite.yaml"), GiB, BF16, BF16)
    assert r.model_dump() == dict(
        EMPTY,
        engine="sglang",
        engine_version="SGLang 0.5.23",
        kv_memory_bytes=GiB,
        kv_cache_dtype="bf16",
        block_size=1,
        page_size_bytes=31_104,
        num_gpu_blocks=34_521,
        kv_cache_tokens=34_521,
        engine_kv_bytes=1_073_772_288,
        max_model_len=163_840,
        max_concurrency=pytest.approx(34_521 / 163_840),
        concurrency=None,
        longest_context=None,
        k_bytes=1_073_772_288,
        v_bytes=0,
        log_lines=["KV Cache is allocated. dtype: torch.bfloat16, #tokens: 34521, KV size: 1.00 GB"],
        notes=[GB_NOTE],
    )


def test_sliding_layers_sized_full_with_mixed_dtypes_and_a_given_label():
    # gemma-3-27b, tp 1: 16 KV heads x (128 x 2 B + 128 x 1 B) = 6,144 B per layer x 62 = 380,928 B;
    # sliding layers are sized like full ones. 1 GiB // 380,928 = 2,818 tokens; rows 2,819:
    # K = 62 x 16 x 128 x 2 = 253,952 B/row -> 715,890,688 B ("0.67 GB");
    # V = 62 x 16 x 128 x 1 = 126,976 B/row -> 357,945,344 B ("0.33 GB").
    r = sglang.capacity(load_model("gemma-3-27b"), GiB, BF16, FP8, kv_cache_dtype="bf16/fp8")
    assert r.model_dump() == dict(
        EMPTY,
        engine="sglang",
        engine_version="SGLang 0.5.23",
        kv_memory_bytes=GiB,
        kv_cache_dtype="bf16/fp8",
        block_size=1,
        page_size_bytes=380_928,
        num_gpu_blocks=2_818,
        kv_cache_tokens=2_818,
        engine_kv_bytes=1_073_836_032,
        max_model_len=131_072,
        max_concurrency=pytest.approx(2_818 / 131_072),
        concurrency=None,
        longest_context=None,
        k_bytes=715_890_688,
        v_bytes=357_945_344,
        log_lines=["KV Cache is allocated. dtype: torch.bfloat16, #tokens: 2818, K size: 0.67 GB, V size: 0.33 GB"],
        notes=[GB_NOTE, SWA_NOTE],
    )
    # without a label, K and V names joined
    assert sglang.capacity(load_model("gemma-3-27b"), GiB, BF16, FP8).kv_cache_dtype == "bf16/fp8_e4m3"


def test_exactly_one_cell_starts():
    # 131,072 B (one llama-3.1-8b cell at tp 1) holds exactly 1 token: SGLang starts (n = 1 > 0);
    # the pool has 1 + 1 rows: K = V = 65,536 x 2 = 131,072 B.
    r = sglang.capacity(llama(), 131_072, BF16, BF16)
    assert (r.kv_cache_tokens, r.num_gpu_blocks, r.k_bytes, r.v_bytes) == (1, 1, 131_072, 131_072)


@pytest.mark.parametrize("budget", [0, 131_071, -5])
def test_no_cell_fits_is_sglangs_start_up_error(budget):
    # under one cell (131,072 B) or no memory: "Not enough memory" (model_runner.init_memory_pool);
    # a negative budget prints as 0 B. The page is 131,072 x 16 = 2,097,152 B with --page-size 16.
    with pytest.raises(
        KvcalcError,
        match=rf"\({max(budget, 0):,} B holds no page of 2,097,152 B\): "
        r"Not enough memory\. Please try to increase --mem-fraction-static\.",
    ):
        sglang.capacity(llama(), budget, BF16, BF16, page_size=16)


def test_no_page_error_names_the_tp_page():
    # tp 2 halves the cell: 65,536 B x page 1
    with pytest.raises(KvcalcError, match=r"holds no page of 65,536 B\)"):
        sglang.capacity(llama(), 100, BF16, BF16, tp=2)


@pytest.mark.parametrize("fn", ["capacity", "memory_for"])
def test_page_size_must_be_positive(fn):
    args = (llama(), GiB, BF16, BF16) if fn == "capacity" else (llama(), 1000, 1, BF16, BF16)
    with pytest.raises(KvcalcError, match="--page-size must be a positive integer, got 0"):
        getattr(sglang, fn)(*args, page_size=0)


@pytest.mark.parametrize("fn", ["capacity", "memory_for"])
def test_block_formats_and_recurrent_layers_refused(fn):
    call = (
        (lambda m, k: sglang.capacity(m, GiB, k, k))
        if fn == "capacity"
        else (lambda m, k: sglang.memory_for(m, 1000, 1, k, k))
    )
    with pytest.raises(KvcalcError, match="SGLang 0.5.23 has no 'q8_0' KV cache dtype; its pool stores auto, bf16"):
        call(llama(), Q8)
    # SGLang 0.5.23 sizes Qwen3-Next's MambaPool (test_sglang_mamba.py) and has no Jamba
    hybrid = load_model("jamba-1.5-mini")
    with pytest.raises(KvcalcError, match="SGLang 0.5.23 registers no JambaForCausalLM"):
        call(hybrid, BF16)
    with pytest.raises(KvcalcError, match="not divisible by 3"):
        sglang.memory_for(llama(), 1000, 1, BF16, BF16, tp=3)


def test_memory_for_rounds_each_request_up_to_pages():
    # batch 3 x cdiv(1000, 16) x 16 = 3 x 1,008 = 3,024 tokens x 131,072 B = 396,361,728 B
    assert sglang.memory_for(llama(), 1000, 3, BF16, BF16, page_size=16) == 396_361_728
    # page 1, tp 2: 3 x 1,000 x 65,536 = 196,608,000 B; default page_size is 1
    assert sglang.memory_for(llama(), 1000, 3, BF16, BF16, tp=2) == 196_608_000
    # K bf16 + V fp8 at tp 1: 32 x 8 x 128 x (2 + 1) = 98,304 B/token x 7 = 688,128 B
    assert sglang.memory_for(llama(), 7, 1, BF16, FP8) == 688_128


def test_default_kv_dtype_fp32_checkpoints():
    # model_config._get_and_verify_dtype: fp32 -> fp16, gemma* fp32 -> bf16; others keep their dtype
    fp32 = dict(name="t", n_layers=2, n_heads=4, n_kv_heads=2, head_dim=16, dtype="fp32")
    assert sglang.default_kv_dtype(ModelSpec(**fp32)) == ("fp16", "auto (fp16: fp32 checkpoint served in fp16)")
    assert sglang.default_kv_dtype(ModelSpec(**fp32, model_type="gemma2")) == (
        "bf16",
        "auto (bf16: fp32 checkpoint served in bf16)",
    )
    assert sglang.default_kv_dtype(ModelSpec(**fp32, model_type="llama")) == (
        "fp16",
        "auto (fp16: fp32 checkpoint served in fp16)",
    )
    assert sglang.default_kv_dtype(llama()) == ("bf16", "auto (bf16)")


def test_pool_bytes_tp_default_and_split():
    # llama-3.1-8b, 10 rows, page 2 -> 12 rows x 65,536 B (K half, tp 1) = 786,432 B each
    assert sglang.pool_bytes(llama(), 10, 2, BF16, BF16) == (786_432, 786_432)
    assert sglang.pool_bytes(llama(), 10, 2, BF16, BF16, tp=2) == (393_216, 393_216)


def test_no_request_length_no_concurrency_and_tp_defaults():
    # no max_position_embeddings and no max_model_len: no concurrency figure
    m = ModelSpec(name="t", n_layers=2, n_heads=4, n_kv_heads=2, head_dim=16, dtype="fp16")
    r = sglang.capacity(m, 1000, kv_format("fp16"), kv_format("fp16"))
    assert (r.max_model_len, r.max_concurrency, r.kv_cache_tokens) == (None, None, 3)  # 1,000 // 256
    # tp defaults to 1: a llama-3.1-8b cell is 131,072 B; 1 GiB // 131,072 = 8,192 tokens
    assert sglang.cell_size_bytes(llama(), BF16, BF16) == 131_072
    assert sglang.max_total_num_tokens(llama(), GiB, BF16, BF16) == 8192
