"""`kvcalc.formats.storage_format`'s names and group options, each refusal as its whole line and
its field / value (the CLI and `kvcalc check` render an error from them), and the loose scale
dtype comparison (`_scale_key`).

Group-quantized sizes (KIVI, arXiv:2402.02750: values in groups sharing one scale): int8 in groups
of G with an S-byte scale costs G + S bytes per G values; int4 costs G / 2 + S.
"""

from __future__ import annotations

import pytest

from kvcalc.errors import KvcalcError, UnknownNameError
from kvcalc.formats import STORAGE_FORMATS, StorageFormat, canonical_name, kv_format, storage_format, weight_format


def refusal(fn, *args, **kwargs) -> KvcalcError:
    with pytest.raises(KvcalcError) as e:
        fn(*args, **kwargs)
    return e.value


# ----- names ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "typed, name",
    [
        ("FP8", "fp8_e4m3"),
        (" bf16 ", "bf16"),
        ("fp8-e5m2", "fp8_e5m2"),
        ("Float8_E4M3FN", "fp8_e4m3"),
        ("F16", "fp16"),
        ("q8_0", "q8_0"),
    ],
)
def test_canonical_name(typed, name):
    assert canonical_name(typed) == name
    assert storage_format(typed) is STORAGE_FORMATS[name]


def test_a_format_object_passes_through():
    f = StorageFormat(name="x", block_values=1, block_bytes=3, bits=24)
    assert storage_format(f) is f


def test_unknown_name_offers_formats_of_its_kind():
    e = refusal(storage_format, "bf17", field="kv_dtype")
    assert isinstance(e, UnknownNameError)
    assert (e.field, e.value) == ("kv_dtype", "bf17")
    assert str(e) == "--kv-dtype: unknown dtype 'bf17'; did you mean 'bf16', 'f16' or 'fp16'?"
    # a weight dtype is offered bf16; a KV dtype typed like mxfp4 is never offered mxfp4
    assert "bf16" in str(refusal(weight_format, "bf17"))
    assert "mxfp4" not in str(refusal(kv_format, "mxfp5"))
    # a KV dtype is offered the formats of both kinds
    assert refusal(kv_format, "bf17").message == "unknown dtype 'bf17'; did you mean 'bf16', 'f16' or 'fp16'?"
    assert "mxfp4" in str(refusal(weight_format, "mxfp5"))
    assert refusal(weight_format, "bf17").field == "weight_dtype"


# ----- group options --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "typed, name, block_values, block_bytes, scale_bytes",
    [
        # int4 in groups of 64 with the default fp16 scale: 32 + 2 = 34 B / 64 values
        ("int4:g64", "int4:g64:fp16", 64, 34, 2),
        # int8 in groups of 128 with an fp32 scale: 128 + 4 = 132 B / 128 values
        ("int8:g128:fp32", "int8:g128:fp32", 128, 132, 4),
        # upper case and spaces, the scale before the group: 16 + 1 = 17 B / 32 (fp8 scale, int4 default group 32)
        ("INT4: FP8 ", "int4:g32:fp8_e4m3", 32, 17, 1),
        # int8 has no default group: 32 with a scale alone (32 + 2 = 34 B)
        ("int8:bf16", "int8:g32:bf16", 32, 34, 2),
        # an empty option is skipped: int8:g16 -> 16 + 2 = 18 B / 16 values
        ("int8::g16", "int8:g16:fp16", 16, 18, 2),
    ],
)
def test_group_options_in_the_name(typed, name, block_values, block_bytes, scale_bytes):
    f = storage_format(typed)
    assert (f.name, f.block_values, f.block_bytes, f.scale_bytes, f.quant_group_size) == (
        name,
        block_values,
        block_bytes,
        scale_bytes,
        block_values,
    )
    base = STORAGE_FORMATS[name.split(":")[0]]
    assert (f.bits, f.torch_dtype) == (base.bits, base.torch_dtype)
    g, s = block_values, name.split(":")[2]
    assert f.description == f"{name.split(':')[0]}, one {s} scale per group of {g}: {block_bytes} B / {g} values"


def test_group_options_given_separately():
    # the same as in the name: int4, groups of 128, fp32 scale: 64 + 4 = 68 B
    assert storage_format("int4", 128, "fp32") == storage_format("int4:g128:fp32")
    # agreeing twice is fine; scale dtypes compare loosely (float16 = fp16, FP8-E4M3 = fp8_e4m3, fp8)
    assert storage_format("int4:g64", 64).block_bytes == 34
    assert storage_format("int4:fp16", scale_dtype=" Float16 ").name == "int4:g32:fp16"
    assert storage_format("int4:fp8", scale_dtype="FP8-E4M3").name == "int4:g32:fp8_e4m3"
    assert storage_format("int4:fp8_e4m3", scale_dtype="e4m3").name == "int4:g32:fp8_e4m3"


@pytest.mark.parametrize(
    "args, kw, line",
    [
        (("int4:g64:g128",), {}, "'int4:g64:g128' names two group sizes (g64 and g128); give one"),
        (("int4:gx",), {}, "'int4:gx': group option 'gx' is not a group size; write e.g. int4:g64"),
        (("int4:G-",), {}, "'int4:G-': group option 'G-' is not a group size; write e.g. int4:g64"),
        (("int8:fp16:fp32",), {}, "'int8:fp16:fp32' names two scale dtypes (fp16 and fp32); give one"),
        (("int4:g64", 128), {}, "'int4:g64' says group size 64 but --quant-group-size says 128; give one"),
        (
            ("int4:fp16",),
            dict(scale_dtype="fp32"),
            "'int4:fp16' says scale dtype fp16 but --scale-dtype says fp32; give one",
        ),
        # 2^20 = 1,048,576 values: the largest group (units.BOUNDS["quant_group_size"])
        (
            ("int8:g1048577",),
            {},
            "'int8:g1048577': group size 1,048,577 is beyond any quantization group (at most 1,048,576 values)",
        ),
        (
            ("q8_0:g64",),
            {},
            "'q8_0:g64': group options apply to int8 and int4 only, not q8_0; give --kv-dtype int8 or --kv-dtype int4",
        ),
        (
            ("fp16",),
            dict(scale_dtype="fp32"),
            "--scale-dtype applies to int8 and int4 only, not fp16; give --kv-dtype int8 or --kv-dtype int4",
        ),
        (("int4:g0",), {}, "'int4:g0': the group size must be a positive even integer, got 0"),
        (("int4:g33",), {}, "'int4:g33': the group size must be a positive even integer for int4, got 33"),
        (("int8:g-4",), {}, "'int8:g-4': the group size must be a positive integer, got -4"),
    ],
)
def test_group_option_refusals(args, kw, line):
    e = refusal(storage_format, *args, field="kv_dtype", **kw)
    assert str(e) == line
    assert (e.field, e.value) == ("kv_dtype", args[0])


def test_group_size_bounds_and_odd_int8():
    # the largest group passes: int8 in groups of 2^20 with an fp16 scale: 2^20 + 2 B
    assert storage_format("int8:g1048576").block_bytes == 2**20 + 2
    # int8 may take an odd group (one byte per value): 33 + 2 = 35 B
    assert storage_format("int8:g33").block_bytes == 35
    # int4 in groups of 2: 1 + 2 = 3 B; int8 in groups of 1 (a scale per value): 1 + 2 = 3 B
    assert storage_format("int4:g2").block_bytes == 3
    assert storage_format("int8:g1").block_bytes == 3


def test_scale_dtype_must_be_a_scale():
    # q8_0 is a format but no scale dtype (SCALE_BYTES: fp32, fp16, bf16, fp8_e4m3, e8m0); the closest
    # spelling of one is offered
    e = refusal(storage_format, "int8:q8_0", field="kv_dtype")
    assert isinstance(e, UnknownNameError)
    assert str(e) == "--kv-dtype: unknown scale dtype 'q8_0'; did you mean 'e8m0'?"
    assert (e.field, e.value) == ("kv_dtype", "q8_0")
    # a scale dtype given on its own (--scale-dtype) is that option's error, not the format's
    e = refusal(storage_format, "int8", scale_dtype="zz", field="weight_dtype")
    assert isinstance(e, UnknownNameError)
    assert (e.field, e.value) == ("scale_dtype", "zz") and str(e).startswith("--scale-dtype: unknown dtype 'zz'")


# ----- kv_format / weight_format --------------------------------------------------------------


def test_weight_format_refusal_as_data():
    kv_only = StorageFormat(name="kvonly", block_values=1, block_bytes=1, bits=8, kind="kv")
    e = refusal(weight_format, kv_only)
    assert (e.field, e.value, str(e)) == ("weight_dtype", "kvonly", "kvonly is a KV-cache format, not a weight format")
    e = refusal(weight_format, kv_only, field="expert_weight_dtype")
    assert e.field == "expert_weight_dtype"


def test_kv_format_refusal_as_data():
    e = refusal(kv_format, "mxfp4", field="v_dtype")
    assert (e.field, e.value) == ("v_dtype", "mxfp4")
    assert refusal(kv_format, "mxfp4").field == "kv_dtype"
    # the group options reach storage_format: int4 in groups of 64, bf16 scale: 32 + 2 = 34 B
    assert kv_format("int4", 64, "bf16").name == "int4:g64:bf16"
    assert weight_format("int4", 64, "bf16").block_bytes == 34


def test_bytes_for_refusal_as_data():
    e = refusal(STORAGE_FORMATS["q4_0"].bytes_for, 80, what="K head", field="k_dtype")
    assert (e.field, e.value) == ("k_dtype", "q4_0")
    assert str(e) == (
        "q4_0 packs 32 values per block; a K head of 80 values is not a whole number of blocks; use another KV dtype"
    )
    assert str(refusal(STORAGE_FORMATS["q4_0"].bytes_for, 48)).startswith("q4_0 packs 32 values per block; a row of 48")
    # whole blocks: 128 values = 4 blocks x 18 B
    assert STORAGE_FORMATS["q4_0"].bytes_for(128) == 72
    assert STORAGE_FORMATS["q4_0"].bytes_for(0) == 0
