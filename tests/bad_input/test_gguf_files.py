"""Bad GGUF files: every one is refused in one line naming the file, exit 2, no traceback, and
within the harness's time bound (a count of 2^60 strings is refused from the bytes left, never
looped over). The files are built by hand with `struct` (GGUF v3, little-endian) or cut from a
good one written by `gguf.GGUFWriter`."""

from __future__ import annotations

import os
import struct
import sys
from pathlib import Path

import pytest

from tests.bad_input.harness import refused, run_kvcalc

sys.path.insert(0, str(Path(__file__).parents[1] / "load"))
from gguf_files import ENDS, LLAMA_8B_KV, tiny_layers, write_gguf


def s(text: str) -> bytes:
    b = text.encode()
    return struct.pack("<Q", len(b)) + b


def header(n_tensors: int, kvs: list[bytes], version: int = 3) -> bytes:
    return b"GGUF" + struct.pack("<IQQ", version, n_tensors, len(kvs)) + b"".join(kvs)


def kv_str(key: str, value: str) -> bytes:
    return s(key) + struct.pack("<I", 8) + s(value)


def kv_u32(key: str, value: int) -> bytes:
    return s(key) + struct.pack("<II", 4, value)


def estimate(path: Path):
    return run_kvcalc("estimate", str(path), "-s", "1k")


@pytest.fixture
def good(tmp_path) -> Path:
    return write_gguf(tmp_path / "good.gguf", "llama", LLAMA_8B_KV, tiny_layers(32) + ENDS)


def test_a_good_file_is_read(good):
    r = estimate(good)
    assert r.code == 0 and "131,072 B" in r.stdout, r.stderr


@pytest.mark.parametrize(
    "content, words",
    [
        (b"name: x\nn_layers: 2\n", "not a GGUF file: it starts with b'name'"),
        (b"", "not a GGUF file: it is empty"),
        (b"GG", "not a GGUF file: it starts with b'GG'"),
        (b"GGUF\x03\x00\x00", "the header is truncated (at byte 4 of 7)"),
        (header(0, [], version=1), "GGUF version 1 cannot be read"),
        (
            b"GGUF" + struct.pack("<IQQ", 3, 0, 2**60),
            "the metadata key count is 1,152,921,504,606,846,976, more than the 0 B left can hold",
        ),
        (b"GGUF" + struct.pack("<IQQ", 3, 2**60, 0), "the tensor count is 1,152,921,504,606,846,976, more than"),
        (
            header(0, [s("general.architecture") + struct.pack("<I", 8) + struct.pack("<Q", 2**62)]),
            "the length of the string value of general.architecture is 4,611,686,018,427,387,904, more than the 0 B",
        ),
        (header(0, [s("k") + struct.pack("<I", 99)]), "value type 99"),
        (header(0, [s("k") + struct.pack("<IIQ", 9, 8, 2**60)]), "the length of array k is 1,152,921,504,606,846,976"),
        (header(0, [kv_str("general.architecture", "llama"), kv_str("general.architecture", "llama")]), "given twice"),
        (header(0, [kv_u32("general.architecture", 3)]), "field 'general.architecture': is missing or not a string"),
        (header(0, [kv_str("general.architecture", "rwkv7")]), "'rwkv7' is not a GGUF architecture kvcalc reads"),
        (header(0, [kv_str("general.architecture", "llama")]), "field 'llama.block_count': is missing"),
        (
            header(0, [kv_str("general.architecture", "llama"), kv_u32("llama.block_count", 0)]),
            "field 'llama.block_count': must be from 1 to 100,000, got 0",
        ),
        (header(1, [kv_str("general.architecture", "llama")]) + s("t") + struct.pack("<I", 7), "has 7 dimensions"),
        (
            header(1, [kv_str("general.architecture", "llama")]) + s("t") + struct.pack("<IQIQ", 1, 8, 77, 0),
            "ggml type 77, unknown",
        ),
        (
            header(1, [kv_str("general.architecture", "llama")]) + s("t") + struct.pack("<IQIQ", 1, 48, 12, 0),
            "a row of 48 values is not a whole number of Q4_K blocks of 256",
        ),
        (
            header(1, [kv_str("general.architecture", "llama")]) + s("t") + struct.pack("<IQIQ", 1, 1 << 20, 0, 0),
            "truncated: its tensor data ends at byte",
        ),
    ],
)
def test_corrupt_files_are_refused(tmp_path, content, words):
    p = tmp_path / "bad.gguf"
    p.write_bytes(content)
    line = refused(estimate(p), str(p))
    assert words in line, line


def test_a_cut_file_is_refused(good, tmp_path):
    data = good.read_bytes()
    for cut, words in (
        (200, "the header is truncated or corrupt: the tensor count is 67, more than the 184 B left can hold"),
        (len(data) - 10, "truncated: its tensor data ends"),
    ):
        p = tmp_path / f"cut{cut}.gguf"
        p.write_bytes(data[:cut])
        assert words in refused(estimate(p), str(p))


def test_control_characters_in_the_file_are_not_echoed_raw(tmp_path):
    p = tmp_path / "esc.gguf"
    p.write_bytes(header(0, [kv_str("general.architecture", "\x1b[31mred\x07")]))
    refused(estimate(p), "is not a GGUF architecture kvcalc reads")  # refused() checks for raw controls


def test_not_a_regular_file(tmp_path):
    folder = tmp_path / "folder.gguf"
    folder.mkdir()
    refused(estimate(folder), "folder.gguf")
    if hasattr(os, "mkfifo"):
        fifo = tmp_path / "fifo.gguf"
        os.mkfifo(fifo)
        assert "not a regular file" in refused(estimate(fifo), "fifo.gguf")


def test_missing_file(tmp_path):
    assert "file not found" in refused(estimate(tmp_path / "nope.gguf"), "nope.gguf")
