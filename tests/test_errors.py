"""Errors carry what they are about as data: `field` (the standard name), `option` (the CLI flag)
and `value`; `str(err)` (the CLI's line) is rendered from that data, and `message` is the bare
sentence `kvcalc check` puts after a deployment file's `field 'x':`. One test per error kind."""

from __future__ import annotations

import pytest

from kvcalc.calc import kv_cache, weights
from kvcalc.calc.memory_plan import Layout
from kvcalc.engines import llamacpp, sglang, vllm
from kvcalc.engines.llamacpp import LlamacppOptions
from kvcalc.engines.vllm import VllmOptions
from kvcalc.errors import (
    FIELDS,
    MESSAGE,
    OPTION,
    OPTION_SAYS,
    OPTIONS,
    ConfigError,
    KvcalcError,
    MissingExtraError,
    UnknownNameError,
)
from kvcalc.formats import canonical_name, kv_format, storage_format, weight_format
from kvcalc.load.models import load_model
from kvcalc.report.plot import plot_path
from kvcalc.schema import ModelSpec
from kvcalc.units import parse_count, parse_counts, parse_size

FP16 = kv_format("fp16")


def raised(fn, *args, **kwargs) -> KvcalcError:
    with pytest.raises(KvcalcError) as info:
        fn(*args, **kwargs)
    return info.value


def carries(e: KvcalcError, field: str | None, option: str | None, value, text: str, message: str | None = None):
    assert (e.field, e.option, e.value) == (field, option, value)
    assert str(e) == text
    if message is not None:
        assert e.message == message


# ----- the error type itself -------------------------------------------------------------------


def test_forms_render_the_option_from_the_field() -> None:
    assert str(KvcalcError("m", field="tp", value=3)) == "--tp 3: m"  # OPTION_VALUE (a value)
    assert str(KvcalcError("m", field="plot")) == "--plot: m"  # OPTION (no value)
    assert str(KvcalcError("m", field="plot", value="x", form=OPTION)) == "--plot: m"
    assert str(KvcalcError("is bad", field="block_size", value=0, form=OPTION_SAYS)) == "--block-size is bad"
    assert str(KvcalcError("m", field="kv_dtype", value="x", form=MESSAGE)) == "m"
    assert str(KvcalcError("m", field="model", value="x")) == "m"  # no flag sets the model: the message alone
    assert str(KvcalcError("plain")) == "plain" and KvcalcError("plain").field is None
    with pytest.raises(ValueError):
        KvcalcError("m", form="{message}!")


def test_option_table_is_one_to_one() -> None:
    # FIELDS inverts OPTIONS, so an error raised with only a flag (units) still names its field
    assert len(set(OPTIONS.values())) == len(OPTIONS)
    assert all(FIELDS[flag] == field for field, flag in OPTIONS.items())
    e = KvcalcError("m", option="--cuda-context")
    assert (e.field, e.option) == ("cuda_context_bytes", "--cuda-context")


def test_config_error_keeps_path_field_line() -> None:
    e = ConfigError("is bad", path="d.yaml", field="tp", line=5, value=3)
    assert (e.path, e.field, e.line, e.value, e.option, e.message) == ("d.yaml", "tp", 5, 3, None, "is bad")
    assert str(e) == "d.yaml:5: field 'tp': is bad"
    assert str(ConfigError("file not found", path="x.yaml")) == "x.yaml: file not found"
    e.path = "other.yaml"  # the text is fixed when the error is made
    assert str(e) == "d.yaml:5: field 'tp': is bad"


def test_unknown_name_and_missing_extra() -> None:
    e = UnknownNameError("dtype", "fp7", ["fp8", "fp16"], field="kv_dtype")
    # the CLI line names the option (a user trial: `--kv-dtype nope` did not say which option was wrong);
    # the bare message, which a file's reader uses, does not
    carries(
        e,
        "kv_dtype",
        "--kv-dtype",
        "fp7",
        "--kv-dtype: unknown dtype 'fp7'; did you mean 'fp8' or 'fp16'?",
        "unknown dtype 'fp7'; did you mean 'fp8' or 'fp16'?",
    )
    e = UnknownNameError("model", "x", ["y"])  # no option sets it: the message alone
    assert str(e) == "unknown model 'x'; choose one of: y"
    e = MissingExtraError("torch", "measure")
    assert (e.field, e.option, e.package, e.extra) == (None, None, "torch", "measure")
    assert str(e) == "this needs torch: pip install 'kvcalc[measure]'"


# ----- calc -----------------------------------------------------------------------------------


def test_check_tp_query_heads() -> None:
    # Llama-3.1-70B: 64 query heads, 64 % 3 = 1
    e = raised(kv_cache.check_tp, load_model("llama-3.1-70b"), 3)
    carries(
        e,
        "tp",
        "--tp",
        3,
        "--tp 3: llama-3.1-70b has 64 attention heads, not divisible by 3; use a tp that divides 64",
        "llama-3.1-70b has 64 attention heads, not divisible by 3; use a tp that divides 64",
    )


def test_check_tp_kv_heads() -> None:
    # 12 query heads split by 6, but 4 KV heads and 6 ranks: neither divides the other
    m = ModelSpec(name="m", n_layers=2, n_heads=12, n_kv_heads=4, head_dim=64)
    e = raised(kv_cache.check_tp, m, 6)
    carries(
        e,
        "tp",
        "--tp",
        6,
        "--tp 6: 4 KV heads cannot be split over 6 ranks (neither divides the other); "
        "use a tp that divides 4 or a multiple of it",
    )


def test_pp_stages() -> None:
    e = raised(kv_cache.pp_stages, 4, 5)
    carries(e, "pp", "--pp", 5, "--pp 5 exceeds the model's 4 layers", "5 exceeds the model's 4 layers")


def test_kv_head_not_whole_blocks() -> None:
    # q4_0 packs 32 values per block; a head of 80 values is 2.5 blocks
    m = ModelSpec(name="m", n_layers=2, n_heads=4, head_dim=80)
    e = raised(kv_cache.kv_bytes_per_token, m, "q4_0")
    carries(
        e,
        "k_dtype",
        "--k-dtype",
        "q4_0",
        "q4_0 packs 32 values per block; a K head of 80 values is not a whole number of blocks; use another KV dtype",
    )
    e = raised(kv_cache.kv_bytes_per_token, m, "fp16", "q4_0")
    assert (e.field, e.value) == ("v_dtype", "q4_0") and "a V head of 80 values" in str(e)


def test_weight_matrices_not_whole_groups() -> None:
    # Llama-3.1-8B's layer: 218,103,808 matrix weights; 218,103,808 % 48 = 16 (int4 groups of 48)
    e = raised(weights.weight_bytes, load_model("llama-3.1-8b"), "int4:g48")
    carries(
        e,
        "weight_dtype",
        "--weight-dtype",
        "int4:g48:fp16",
        "int4:g48:fp16 packs 48 values per block; a layer's weight matrices of 218103808 values is not a "
        "whole number of blocks; use another weight format",
    )


def test_cannot_count_parameters() -> None:
    m = ModelSpec(name="m", n_layers=2, n_heads=4, head_dim=64)
    e = raised(weights.model_params, m)
    carries(
        e,
        "model",
        None,
        "m",
        "m: cannot count parameters without hidden_size, vocab_size; add them to "
        "the config, "
        "or give n_params (and n_active_params)",
    )


def test_compare_refuses_mla() -> None:
    e = raised(kv_cache.compare_attention, load_model("deepseek-v3"), 1024, 1, "bf16")
    assert (e.field, e.option, e.value) == ("model", None, "deepseek-v3")
    assert str(e).startswith("deepseek-v3 uses MLA")


@pytest.mark.parametrize(
    "knob,flag",
    [
        ("gpu_memory_utilization", "--gpu-memory-utilization"),
        ("bw_efficiency", "--bw-efficiency"),
        ("flops_efficiency", "--flops-efficiency"),
    ],
)
def test_layout_fractions(knob: str, flag: str) -> None:
    e = raised(Layout(**{knob: 1.5}).check)
    carries(e, knob, flag, 1.5, f"{flag} must be in (0, 1], got 1.5", "must be in (0, 1], got 1.5")


def test_layout_cuda_context() -> None:
    e = raised(Layout(cuda_context_bytes=-1).check)
    carries(e, "cuda_context_bytes", "--cuda-context", -1, "--cuda-context must not be negative, got -1")


# ----- formats --------------------------------------------------------------------------------


def test_weight_only_format_as_kv() -> None:
    e = raised(kv_format, "mxfp4")
    assert (e.field, e.option, e.value) == ("kv_dtype", "--kv-dtype", "mxfp4")
    assert str(e).startswith("mxfp4 is a weight format, not a KV-cache format; for the cache use one of fp32,")


def test_unknown_dtype_names_the_callers_field() -> None:
    e = raised(weight_format, "fp7")
    assert (e.field, e.value) == ("weight_dtype", "fp7") and isinstance(e, UnknownNameError)
    e = raised(kv_format, "fp7", field="v_dtype")
    assert (e.field, e.value) == ("v_dtype", "fp7")
    assert raised(canonical_name, "fp7").field is None  # no caller, no field


@pytest.mark.parametrize(
    "name,text",
    [
        ("int4:gx", "'int4:gx': group option 'gx' is not a group size; write e.g. int4:g64"),
        (
            "q8_0:g64",
            "'q8_0:g64': group options apply to int8 and int4 only, not q8_0; give --kv-dtype int8 or --kv-dtype int4",
        ),
        ("int4:g3", "'int4:g3': the group size must be a positive even integer for int4, got 3"),
    ],
)
def test_group_options(name: str, text: str) -> None:
    carries(raised(kv_format, name), "kv_dtype", "--kv-dtype", name, text)


def test_unknown_scale_dtype() -> None:
    e = raised(storage_format, "int8:g64:fp7", field="kv_dtype")
    assert isinstance(e, UnknownNameError) and e.field == "kv_dtype" and e.value == "fp7"


# ----- units ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fn,text,what,field,line",
    [
        (
            parse_count,
            "abc",
            "--seq-len",
            "seq_len",
            "--seq-len: 'abc' is not a positive whole number (e.g. 16, 8192 or 32k)",
        ),
        (parse_count, "0", "--max-model-len", "max_model_len", "--max-model-len must be a positive integer, got 0"),
        (
            parse_counts,
            "1,,2",
            "--batch",
            "batch",
            "--batch: '1,,2' has an empty item; write values separated by single commas",
        ),
        (
            parse_size,
            "80 GBs",
            "--kv-memory",
            "kv_memory_bytes",
            "--kv-memory: '80 GBs' is not a size (write 80GB, 6.51GiB or a byte count)",
        ),
        (parse_size, "0", "--kv-memory", "kv_memory_bytes", "--kv-memory must be positive, got 0"),
        (
            parse_size,
            "1.5",
            "--cuda-context",
            "cuda_context_bytes",
            "--cuda-context: '1.5' has no unit and is not a whole number of bytes; did you mean 1.5GiB?",
        ),
        (
            parse_size,
            "12",
            "--activation-reserve",
            "activation_reserve_bytes",
            "--activation-reserve: '12' has no unit, so it would be 12 bytes; did you mean 12GiB? (write 12B for bytes)",
        ),
    ],
)
def test_units(fn, text: str, what: str, field: str, line: str) -> None:
    carries(raised(fn, text, what), field, what, text, line)


def test_units_label_that_is_no_flag() -> None:
    e = raised(parse_size, "0")  # what="size": a label, no field
    assert (e.field, e.option, str(e)) == (None, "size", "size must be positive, got 0")


# ----- engines --------------------------------------------------------------------------------


def test_vllm_block_size() -> None:
    carries(
        raised(vllm.rules().check_block_size, 0),
        "block_size",
        "--block-size",
        0,
        "--block-size must be a positive integer, got 0",
    )
    carries(
        raised(vllm.rules().check_block_size, 7),
        "block_size",
        "--block-size",
        7,
        "--block-size 7: vLLM accepts 1, 8, 16, 32, 64, 128, 256 (vllm/config/cache.py BlockSize)",
    )


def test_vllm_capacity_errors() -> None:
    m = load_model("llama-3.1-8b")
    carries(
        raised(vllm.capacity, m, 2**30, FP16, FP16, options=VllmOptions(max_num_batched_tokens=0)),
        "max_num_batched_tokens",
        "--max-num-batched-tokens",
        0,
        "--max-num-batched-tokens must be a positive integer, got 0",
    )
    e = raised(vllm.capacity, m, 0, FP16, FP16, options=VllmOptions(version="0.11"))
    assert (e.field, e.value) == ("kv_memory_bytes", 0)
    assert str(e) == (
        "vLLM would fail at start-up: No available memory for the cache blocks. Try increasing "
        "`gpu_memory_utilization` when initializing the engine."
    )
    q8 = kv_format("q8_0")
    e = raised(vllm.capacity, m, 2**30, FP16, q8)
    assert (e.field, e.value) == ("v_dtype", "q8_0") and str(e).startswith("vLLM 0.33 has no 'q8_0' KV cache dtype")
    e = raised(vllm.capacity, m.model_copy(update={"max_position_embeddings": None}), 2**30, FP16, FP16)
    carries(
        e, "max_model_len", "--max-model-len", None, "llama-3.1-8b has no max_position_embeddings; give --max-model-len"
    )
    jamba = load_model("jamba-1.5-mini")  # V0 keeps the Mamba state outside the blocks: refused with the reason
    e = raised(vllm.capacity, jamba, 2**30, FP16, FP16, options=VllmOptions(version="0.6"))
    assert (e.field, e.value) == ("model", "jamba-1.5-mini") and "MambaCacheManager" in str(e)
    e = raised(vllm.rules().kv_cache_groups, jamba, False)  # Mamba layers need the hybrid allocator
    carries(
        e,
        "hybrid_allocator",
        "--disable-hybrid-kv-cache-manager",
        False,
        "jamba-1.5-mini has Mamba / "
        "linear-attention layers: vLLM refuses it without the hybrid KV cache manager (Hybrid KV cache manager "
        "is disabled but failed to convert the KV cache specs to one unified type.)",
    )
    # not one 16-token block of 32 layers x 16 x 2,048 B = 1 MiB fits in 4 KiB
    e = raised(vllm.capacity, m, 4096, FP16, FP16)
    assert (e.field, e.value) == ("kv_memory_bytes", 4096) and str(e).startswith("vLLM would fail at start-up")


def test_sglang_errors() -> None:
    m = load_model("llama-3.1-8b")
    carries(
        raised(sglang.capacity, m, 2**30, FP16, FP16, page_size=0),
        "page_size",
        "--page-size",
        0,
        "--page-size must be a positive integer, got 0",
    )
    # a cell is 32 layers x 8 KV heads x 128 x 2 (K, V) x 2 B = 131,072 B; 10 B hold none
    e = raised(sglang.capacity, m, 10, FP16, FP16)
    carries(
        e,
        "kv_memory_bytes",
        "--kv-memory",
        10,
        "SGLang would fail at start-up (10 B holds no page of "
        "131,072 B): Not enough memory. Please try to increase --mem-fraction-static.",
    )


@pytest.mark.parametrize(
    "kwargs,field,value,text",
    [
        ({"version": "x"}, "llamacpp_version", "x", "--llamacpp-version: use one of current, legacy, not 'x'"),
        ({"n_ubatch": 0}, "n_ubatch", 0, "--parallel and --ubatch-size must be positive"),
        (
            {"parallel": 300},
            "parallel",
            300,
            "--parallel 300: llama.cpp refuses it: n_seq_max must be <= 256 (src/llama-context.cpp, LLAMA_MAX_SEQ)",
        ),
        (
            {"n_gpu_layers": -2},
            "n_gpu_layers",
            -2,
            "--n-gpu-layers -2: use a count >= 0, or -1 for llama.cpp's default (all layers)",
        ),
        (
            {"n_devices": 0},
            "n_devices",
            0,
            "--gpus must be a positive integer, got 0 (for a CPU-only cache use --n-gpu-layers 0)",
        ),
        (
            {"n_devices": 2, "tensor_split": [1.0]},
            "tensor_split",
            [1.0],
            "--tensor-split needs 2 non-negative values that do not all vanish",
        ),
    ],
)
def test_llamacpp_options(kwargs: dict, field: str, value, text: str) -> None:
    e = raised(llamacpp.allocate, load_model("llama-3.1-8b"), 4096, FP16, FP16, options=LlamacppOptions(**kwargs))
    assert (e.field, e.value, str(e)) == (field, value, text)


def test_llamacpp_types_and_capacity() -> None:
    m = load_model("llama-3.1-8b")
    e = raised(llamacpp.allocate, m, 4096, FP16, kv_format("int8"))
    assert (e.field, e.value) == ("v_dtype", "int8") and str(e).startswith(
        "--v-dtype: llama.cpp 0c1e570 has no 'int8' KV cache type"
    )
    # 256 cells of 32 layers x 2,048 B (K) + 2,048 B (V) = 32 MiB; 1 KiB holds none
    e = raised(llamacpp.capacity, m, 1024, FP16, FP16)
    carries(e, "kv_memory_bytes", "--kv-memory", 1024, "1,024 B does not hold even 256 cells of llama-3.1-8b's cache")


def test_plot_path() -> None:
    carries(
        raised(plot_path, "out/"),
        "plot",
        "--plot",
        "out/",
        "--plot: 'out/' is a folder; give a file name such as sweep.png",
    )
    e = raised(plot_path, "a.gif")
    assert (e.field, e.value) == ("plot", "a.gif") and str(e).startswith("--plot: cannot write a .gif file")
