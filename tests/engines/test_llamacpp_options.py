"""llama.cpp's option checks (`kvcalc/engines/llamacpp.py`): the field each refusal names and its
whole line, the 32-bit bounds of n_ctx / n_ubatch / n_gpu_layers (llama.cpp's `common_params`
holds them as `int32_t`: common/common.h), ollama's n_ctx x parallel product, the tensor-split
shares, and `device_of_layers` for a direct caller.

Model: configs/models/llama-3.1-8b.yaml (32 layers, 8 KV heads x 128: an f16 cell is
32 x 2 x 8 x 128 x 2 = 131,072 B). MiB = 2^20 B.
"""

from __future__ import annotations

import warnings

import pytest

from kvcalc.engines import llamacpp
from kvcalc.engines.llamacpp import LlamacppOptions
from kvcalc.errors import KvcalcError, KvcalcWarning
from kvcalc.formats import kv_format
from kvcalc.load.models import load_model

F16, Q8, FP8 = kv_format("fp16"), kv_format("q8_0"), kv_format("fp8")
INT32 = "beyond llama.cpp's 32-bit int"


@pytest.fixture(scope="module")
def llama():
    return load_model("llama-3.1-8b")


def refusal(*args, **kwargs) -> KvcalcError:
    with pytest.raises(KvcalcError) as e:
        llamacpp.allocate(*args, options=LlamacppOptions(**kwargs))
    return e.value


@pytest.mark.parametrize(
    "kw, field, value",
    [
        (dict(parallel=0), "parallel", 0),
        (dict(n_ubatch=-1), "n_ubatch", -1),
        # two bad: the first named
        (dict(parallel=-2, n_ubatch=0), "parallel", -2),
    ],
)
def test_non_positive_counts_name_their_field(llama, kw, field, value):
    kw = dict(kw)  # the parameter is shared between runs: never change it
    e = refusal(llama, 4096, F16, F16, **kw)
    assert (e.field, e.value) == (field, value)
    assert str(e) == "--parallel and --ubatch-size must be positive"


def test_a_negative_context_is_refused_and_zero_is_the_training_context(llama):
    e = refusal(llama, -1, F16, F16)
    assert (e.field, e.value) == ("n_ctx", -1)
    assert str(e) == "--ctx-size must be 0 (the model's training context) or a count of tokens, got -1"


@pytest.mark.parametrize(
    "kw, line",
    [
        # 2^31 = 2,147,483,648: one past int32
        (
            dict(n_ctx=2**31),
            f"--ctx-size 2,147,483,648 is {INT32} n_ctx (common_params.n_ctx is an int32_t: llama.cpp "
            "refuses -c past 2^31 - 1) (at most 2,147,483,647 tokens)",
        ),
        (dict(n_ubatch=2**31), f"--ubatch-size 2,147,483,648 is {INT32} n_ubatch (at most 2,147,483,647 tokens)"),
        (
            dict(n_gpu_layers=2**31),
            f"--n-gpu-layers 2,147,483,648 is {INT32} n_gpu_layers (at most 2,147,483,647 layers)",
        ),
        # units.MAX_GPUS = 100,000
        (dict(n_devices=100_001), "--gpus 100,001 is beyond what kvcalc sizes (at most 100,000 GPUs)"),
        # the legacy format has no 256-sequence limit: units.MAX_CONCURRENCY = 10,000,000 applies
        (
            dict(parallel=10_000_001, version="legacy"),
            "--parallel 10,000,001 is beyond what kvcalc sizes (at most 10,000,000 sequences)",
        ),
    ],
)
def test_bounds_name_the_flag(llama, kw, line):
    kw = dict(kw)  # the parameter is shared between runs: never change it
    n_ctx = kw.pop("n_ctx", 4096)
    e = refusal(llama, n_ctx, F16, F16, **kw)
    assert str(e) == line


def test_bounds_admit_the_largest(llama):
    # n_ubatch and n_gpu_layers at 2^31 - 1 pass the check (-ngl past the layer count is every layer)
    r = llamacpp.allocate(llama, 256, F16, F16, options=LlamacppOptions(n_ubatch=2**31 - 1, n_gpu_layers=2**31 - 1))
    assert r.engine_kv_bytes == 256 * 131_072


def test_ollama_product_checked_against_int32(llama):
    # ollama hands llama.cpp n_ctx x parallel = 2^30 x 2 = 2^31 cells: one past int32
    e = refusal(llama, 2**30, F16, F16, parallel=2, ollama=True)
    assert str(e) == (
        f"--ctx-size 1073741824 x --parallel 2 = 2,147,483,648 is {INT32} n_ctx (common_params.n_ctx "
        "is an int32_t: llama.cpp refuses -c past 2^31 - 1) (at most 2,147,483,647 tokens)"
    )
    assert (e.field, e.value) == ("n_ctx", 2**31)


def test_k_type_refused_as_k(llama):
    # allocate names the K side by ggml_name's default field
    e = refusal(llama, 4096, FP8, F16)
    assert (e.field, e.value) == ("k_dtype", "fp8_e4m3")
    e = refusal(llama, 4096, F16, FP8)
    assert (e.field, e.value) == ("v_dtype", "fp8_e4m3")
    e = pytest.raises(KvcalcError, llamacpp.ggml_name, FP8).value
    assert e.field == "k_dtype"


def test_legacy_flash_attention_fit(llama):
    # legacy with flash attention pads n_ctx to 256: -c 1000 -> 1,024 cells x 131,072 B = 128 MiB,
    # more than 100 MiB; the largest -c that fits 100 MiB: 800 cells -> 768 (a multiple of 256)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        r = llamacpp.allocate(
            llama,
            1000,
            F16,
            F16,
            kv_memory_bytes=100 * 2**20,
            options=LlamacppOptions(version="legacy", flash_attn=True),
        )
    assert r.engine_kv_bytes == 1024 * 131_072
    assert r.notes == [
        "--ctx-size 1000 allocates 128.00 MiB of KV cache, more than --kv-memory 100.00 MiB: "
        "llama.cpp would fail to allocate the KV buffer on a device that size; the largest "
        "--ctx-size that fits is 768"
    ]
    assert [x.category for x in w] == [KvcalcWarning]


def test_legacy_parallel_does_not_change_the_one_cache(llama):
    # the legacy cache is one unified cache of n_ctx cells whatever --parallel is
    one = llamacpp.allocate(llama, 4096, F16, F16, options=LlamacppOptions(version="legacy"))
    four = llamacpp.allocate(llama, 4096, F16, F16, options=LlamacppOptions(version="legacy", parallel=4))
    assert one.log_lines == four.log_lines
    assert one.engine_kv_bytes == four.engine_kv_bytes == 4096 * 131_072


def test_split_streams_each_padded(llama):
    # not unified, --parallel 3: -c 1000 -> GGML_PAD(1000, 256) = 1,024 -> 1,024 // 3 = 341 a stream,
    # padded to 512: 3 streams x 512 = 1,536 cells (n_ctx 1,536)
    r = llamacpp.allocate(
        llama, 1000, F16, F16, max_model_len=500, concurrency=3, options=LlamacppOptions(parallel=3, unified=False)
    )
    assert (r.n_ctx, r.n_cells, r.kv_cache_tokens) == (1536, 1536, 1536)
    assert r.engine_kv_bytes == 1536 * 131_072
    # one request a stream of 512 cells: 3 requests of 500 fit; 3 requests get 512 each
    assert (r.max_concurrency, r.longest_context) == (3.0, 512)


# ----- tensor split ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "splits, shown, value",
    [
        ([1.0, float("nan")], "nan", "1.0,nan"),
        ([float("inf"), 1.0], "inf", "inf,1.0"),
        ([True, 1.0], "True", "True,1.0"),
        (["3", 1.0], "'3'", "3,1.0"),
        # two bad: the first named
        ([float("-inf"), float("nan")], "-inf", "-inf,nan"),
    ],
)
def test_tensor_split_non_finite_refused(splits, shown, value):
    with pytest.raises(KvcalcError) as e:
        llamacpp.check_tensor_split(splits, 2)
    assert str(e.value) == f"--tensor-split: share {shown} is not a finite number; give 2 shares such as 63,37"
    assert (e.value.field, e.value.value) == ("tensor_split", value)


def test_tensor_split_counts_and_signs():
    llamacpp.check_tensor_split(None, 2)
    llamacpp.check_tensor_split([3, 1], 2)
    llamacpp.check_tensor_split([0, 1.5], 2)
    for bad in ([1.0], [1.0, -1.0], [0, 0]):
        with pytest.raises(KvcalcError) as e:
            llamacpp.check_tensor_split(bad, 2)
        assert str(e.value) == "--tensor-split needs 2 non-negative values that do not all vanish"
        assert (e.value.field, e.value.value) == ("tensor_split", bad)


def test_device_of_layers_no_device():
    # no device: every layer on the CPU, without reading the splits
    assert llamacpp.device_of_layers(4, None, [1.0], 0) == [-1, -1, -1, -1]
    assert llamacpp.device_of_layers(4, 0, [1.0, 1.0], 2) == [-1, -1, -1, -1]
    # -ngl 2 of 4 layers on two devices split 1:1: layers 2, 3 offloaded; act = 2, fractions 0 and
    # 0.5 -> device 0 and device 1 (upper_bound of 0.5 in [0.5, 1.0] is 1)
    assert llamacpp.device_of_layers(4, 2, [1.0, 1.0], 2) == [-1, -1, 0, 1]
