"""llama.cpp's weight types in the format table (`kvcalc.formats`): each block size as the `gguf`
package's own `GGML_QUANT_SIZES` gives it, and llama.cpp's file types (a mix per tensor) answered
with one line that points at the GGUF file and the per-tensor type."""

from __future__ import annotations

import pytest

from kvcalc.errors import KvcalcError
from kvcalc.formats import GGUF_FILE_TYPE_MIXES, STORAGE_FORMATS, kv_format, weight_format

gguf = pytest.importorskip("gguf", reason="the gguf package is not installed (pip install 'kvcalc[gguf]')")

#: every ggml type kvcalc names (the rest of the table is not llama.cpp's)
GGML = [
    "q8_0",
    "q4_0",
    "q4_1",
    "q5_0",
    "q5_1",
    "iq4_nl",
    "mxfp4",
    "q2_k",
    "q3_k",
    "q4_k",
    "q5_k",
    "q6_k",
    "iq1_s",
    "iq1_m",
    "iq2_xxs",
    "iq2_xs",
    "iq2_s",
    "iq3_xxs",
    "iq3_s",
    "iq4_xs",
    "tq1_0",
    "tq2_0",
]


@pytest.mark.parametrize("name", GGML)
def test_block_sizes_match_the_package_table(name):
    f = STORAGE_FORMATS[name]
    assert (f.block_values, f.block_bytes) == gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType[name.upper()]]


@pytest.mark.parametrize(
    "name, n_values, n_bytes",
    [
        ("q4_K", 4096 * 4096, 4096 * 4096 // 256 * 144),  # 9,437,184 B: 4.5 bits per value
        ("Q6_K", 256, 210),
        ("iq4_xs", 512, 272),  # 2 blocks x 136 B
        ("q2_k", 14336 * 4096, 14336 * 4096 // 256 * 84),  # 19,267,584 B
    ],
)
def test_weight_bytes(name, n_values, n_bytes):
    assert weight_format(name).bytes_for(n_values) == n_bytes


def test_a_row_that_is_not_whole_blocks_is_refused():
    with pytest.raises(KvcalcError, match="q4_k packs 256 values per block; a row of 128 values"):
        weight_format("q4_k").bytes_for(128)


def test_k_quants_are_not_cache_types():
    # llama.cpp's --cache-type-k takes f32, f16, bf16, q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1 only
    with pytest.raises(KvcalcError, match="q4_k is a weight format, not a KV-cache format"):
        kv_format("q4_K")


@pytest.mark.parametrize("mix, near", sorted(GGUF_FILE_TYPE_MIXES.items()))
def test_file_type_mixes_point_at_the_file_and_a_type(mix, near):
    assert near in STORAGE_FORMATS
    with pytest.raises(KvcalcError) as e:
        weight_format(mix.upper())
    msg = str(e.value)
    assert msg.startswith(f"--weight-dtype {mix.upper()}: '{mix.upper()}' is a llama.cpp file type")
    assert f"did you mean {near} (every matrix in {near.upper()})?" in msg and len(msg.splitlines()) == 1


def test_every_mix_is_a_llama_cpp_file_type():
    names = {t.name.removeprefix("MOSTLY_").lower() for t in gguf.LlamaFileType}
    assert set(GGUF_FILE_TYPE_MIXES) <= names
    # and none of them is a per-tensor type
    assert not set(GGUF_FILE_TYPE_MIXES) & {t.name.lower() for t in gguf.GGMLQuantizationType}
