"""The storage-format table (`kvcalc/formats.py`): every row pinned against its source, the
builders that make the rows, group-quantized formats, and the KV / weight checks.

Written for mutation testing (tools/mutation.py). Sources: llama.cpp ggml/src/ggml-common.h
(block_q8_0 = fp16 scale + 32 x int8 = 34 B; block_q4_0 = 2 + 16 = 18 B; block_q4_1 = 2 + 2 + 16
= 20 B; block_q5_0 = 2 + 4 + 16 = 22 B; block_q5_1 = 2 + 2 + 4 + 16 = 24 B; block_iq4_nl = 2 + 16
= 18 B, each per 32 values); IEEE / torch dtypes for the plain types (bytes = bits / 8); OCP MX v1.0
for mxfp4 (32 x 4 bit + one 8-bit scale = 17 B); int4 with an fp16 scale per 32: 16 + 2 = 18 B.
"""

from __future__ import annotations

import pytest

from kvcalc import formats
from kvcalc.errors import KvcalcError
from kvcalc.formats import ALIASES, STORAGE_FORMATS, StorageFormat, kv_format, storage_format, weight_format

#: name: (block_values, block_bytes, bits, torch_dtype, quant_group_size, scale_bytes, kind)
TABLE = {
    "fp32": (1, 4, 32, "float32", None, 0, "both"),
    "fp16": (1, 2, 16, "float16", None, 0, "both"),
    "bf16": (1, 2, 16, "bfloat16", None, 0, "both"),
    "fp8_e4m3": (1, 1, 8, "float8_e4m3fn", None, 0, "both"),
    "fp8_e5m2": (1, 1, 8, "float8_e5m2", None, 0, "both"),
    "int8": (1, 1, 8, "int8", None, 0, "both"),
    "int4": (32, 18, 4, "uint8", 32, 2, "both"),
    "q8_0": (32, 34, 8, None, None, 0, "both"),
    "q4_0": (32, 18, 4, None, None, 0, "both"),
    "q4_1": (32, 20, 4, None, None, 0, "both"),
    "q5_0": (32, 22, 5, None, None, 0, "both"),
    "q5_1": (32, 24, 5, None, None, 0, "both"),
    "iq4_nl": (32, 18, 4, None, None, 0, "both"),
    "mxfp4": (32, 17, 4, None, 32, 1, "weight"),
    # llama.cpp super-blocks of 256 values (ggml-common.h; each checked against the gguf package's
    # GGML_QUANT_SIZES in tests/test_formats_ggml.py): q2_K 16 + 64 + 2 + 2 = 84 B; q3_K 32 + 64 + 12 + 2
    # = 110; q4_K 2 + 2 + 12 + 128 = 144; q5_K 2 + 2 + 12 + 32 + 128 = 176; q6_K 128 + 64 + 16 + 2 = 210;
    # iq1_s 2 + 32 + 16 = 50; iq1_m 32 + 16 + 8 = 56; iq2_xxs 2 + 64 = 66; iq2_xs 2 + 64 + 8 = 74; iq2_s
    # 2 + 64 + 8 + 8 = 82; iq3_xxs 2 + 96 = 98; iq3_s 2 + 64 + 8 + 32 + 4 = 110; iq4_xs 2 + 2 + 4 + 128 =
    # 136; tq1_0 48 + 4 + 2 = 54; tq2_0 64 + 2 = 66
    "q2_k": (256, 84, 2, None, None, 0, "weight"),
    "q3_k": (256, 110, 3, None, None, 0, "weight"),
    "q4_k": (256, 144, 4, None, None, 0, "weight"),
    "q5_k": (256, 176, 5, None, None, 0, "weight"),
    "q6_k": (256, 210, 6, None, None, 0, "weight"),
    "iq1_s": (256, 50, 1, None, None, 0, "weight"),
    "iq1_m": (256, 56, 1, None, None, 0, "weight"),
    "iq2_xxs": (256, 66, 2, None, None, 0, "weight"),
    "iq2_xs": (256, 74, 2, None, None, 0, "weight"),
    "iq2_s": (256, 82, 2, None, None, 0, "weight"),
    "iq3_xxs": (256, 98, 3, None, None, 0, "weight"),
    "iq3_s": (256, 110, 3, None, None, 0, "weight"),
    "iq4_xs": (256, 136, 4, None, None, 0, "weight"),
    "tq1_0": (256, 54, 1, None, None, 0, "weight"),
    "tq2_0": (256, 66, 2, None, None, 0, "weight"),
    "nf4": (64, 36, 4, None, 64, 4, "weight"),  # 32 B of 4-bit values + fp32 absmax
    # NVFP4: 16 e2m1 values (8 B) + one fp8 e4m3 scale = 9 B; a weight format and vLLM 0.33's / SGLang 0.5.23's
    # KV format (vllm/utils/torch_utils.py nvfp4_kv_cache_full_dim: head_size // 2 + head_size // 16)
    "nvfp4": (16, 9, 4, None, 16, 1, "both"),
    # SGLang 0.5.23 fp4_mx_block16 (fp4_kv_cache_quant_method.py: head_dim // 2 + head_dim // 16 per head): KV only
    "fp4_mx_block16": (16, 9, 4, None, 16, 1, "kv"),
    # OCP MX v1.0 MXFP8: 32 x fp8 + one e8m0 scale = 33 B (SGLang pool_configurator.py: + values // 32 B)
    "mxfp8": (32, 33, 8, None, 32, 1, "both"),
    "nf4_dq": (16384, 8452, 4, None, 64, 1, "weight"),  # 8,192 + 256 uint8 absmax + one fp32
}


def test_every_row_of_the_table():
    got = {
        n: (f.block_values, f.block_bytes, f.bits, f.torch_dtype, f.quant_group_size, f.scale_bytes, f.kind)
        for n, f in STORAGE_FORMATS.items()
    }
    assert got == TABLE
    assert all(f.name == n and f.description for n, f in STORAGE_FORMATS.items())


def test_the_builders_make_the_rows():
    # the table is built at import time, so a test of the builders themselves guards it too
    assert formats._plain("fp16", 2, "float16", "IEEE float16") == STORAGE_FORMATS["fp16"]
    assert formats._plain("fp32", 4, "float32", "IEEE float32") == STORAGE_FORMATS["fp32"]
    q8 = STORAGE_FORMATS["q8_0"]
    assert formats._ggml("q8_0", 34, 8, q8.description) == q8


@pytest.mark.parametrize(
    "name, n_values, expected",
    [
        ("fp16", 128, 256),
        ("fp8", 128, 128),
        ("fp32", 3, 12),
        ("q8_0", 128, 136),  # 4 blocks x 34
        ("q4_0", 128, 72),  # 4 x 18
        ("q5_1", 64, 48),  # 2 x 24
        ("int4", 128, 72),  # 4 x (16 + 2)
    ],
)
def test_bytes_for(name, n_values, expected):
    assert storage_format(name).bytes_for(n_values) == expected


def test_bytes_for_a_partial_block_is_refused():
    with pytest.raises(
        KvcalcError,
        match="^q8_0 packs 32 values per block; a K head of 80 values is not a whole "
        r"number of blocks; use another KV dtype$",
    ):
        STORAGE_FORMATS["q8_0"].bytes_for(80, what="K head")


def test_the_names_and_aliases_accepted():
    names = sorted(set(STORAGE_FORMATS) | set(ALIASES))
    assert names == sorted(
        set(TABLE)
        | {
            "float32",
            "f32",
            "float",
            "float16",
            "f16",
            "half",
            "bfloat16",
            "fp8",
            "fp8e4m3",
            "e4m3",
            "float8_e4m3fn",
            "fp8_e4m3fn",
            "fp8e5m2",
            "e5m2",
            "float8_e5m2",
            "uint4",
            "bnb_nf4",
            "bnb_4bit",
        }
    )
    assert len(names) == 52  # 34 formats (19 + the 15 llama.cpp super-block types) + 18 aliases


def test_weight_format_with_groups_and_a_kv_only_format():
    # int8 in groups of 64 with an fp32 scale: 64 + 4 = 68 B per 64 values
    f = weight_format("int8", 64, "fp32")
    assert (f.name, f.block_values, f.block_bytes, f.scale_bytes, f.kind) == ("int8:g64:fp32", 64, 68, 4, "both")
    # int4 groups of 128, default fp16 scale: 64 + 2 = 66 B per 128
    assert weight_format("int4", 128).block_bytes == 66
    assert weight_format("int4", scale_dtype="fp8").name == "int4:g32:fp8_e4m3"
    assert weight_format("mxfp4") == STORAGE_FORMATS["mxfp4"]
    kv_only = StorageFormat(name="kvonly", block_values=1, block_bytes=1, bits=8, kind="kv")
    with pytest.raises(KvcalcError, match="^kvonly is a KV-cache format, not a weight format$"):
        weight_format(kv_only)
    assert kv_format(kv_only) is kv_only


def test_kv_format_refuses_weight_only_formats():
    with pytest.raises(
        KvcalcError,
        match="^mxfp4 is a weight format, not a KV-cache format; for the cache use one of "
        "fp32, fp16, bf16, fp8_e4m3, fp8_e5m2, int8, int4, q8_0, q4_0, q4_1, q5_0, "
        "q5_1, iq4_nl, nvfp4, fp4_mx_block16, mxfp8$",
    ):
        kv_format("mxfp4")
