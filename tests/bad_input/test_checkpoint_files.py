"""Bad checkpoint folders (config.json beside safetensors files, or an index naming shards) and a
damaged copy of kvcalc's own cache of Hub headers: every one is refused in one line naming the
file, exit 2, no traceback, within the harness's time bound. Found by trying the new input kinds
as a new user would (the h-trial session): each case here once crashed (`internal error:`) or
hung. The safetensors files are written by hand (8-byte little-endian length + JSON header), the
config.json is the real one of meta-llama/Llama-3.1-8B (tests/data/hf)."""

from __future__ import annotations

import hashlib
import json
import os
import struct
from pathlib import Path

import pytest

from tests.bad_input.harness import ROOT, refused, run_kvcalc

CONFIG = (ROOT / "tests" / "data" / "hf" / "Llama-3.1-8B.json").read_text()


def header_file(obj: object, data: bytes = b"") -> bytes:
    raw = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
    return struct.pack("<Q", len(raw)) + raw + data


def folder_with(tmp_path: Path, name: str, content: bytes) -> Path:
    folder = tmp_path / "ck"
    folder.mkdir()
    (folder / "config.json").write_text(CONFIG)
    (folder / name).write_bytes(content)
    return folder


def estimate(folder: Path):
    return run_kvcalc("estimate", str(folder), "-s", "1k", "--gpu", "h100-sxm")


@pytest.mark.parametrize(
    "content, words",
    [
        # a dtype that is not a string: `[...] in DTYPE_BITS` raised TypeError (unhashable)
        (
            header_file({"model.layers.0.a.weight": {"dtype": ["F16"], "shape": [2], "data_offsets": [0, 4]}}),
            "field 'model.layers.0.a.weight': '['F16']' is not a safetensors dtype; the known ones are: BF16, BOOL",
        ),
        (
            header_file({"model.layers.0.a.weight": {"dtype": {}, "shape": [2], "data_offsets": [0, 4]}}),
            "field 'model.layers.0.a.weight': '{}' is not a safetensors dtype; the known ones are: BF16, BOOL",
        ),
        # nesting past the JSON decoder's recursion limit: RecursionError
        (header_file(b"[" * 20_000), "the safetensors header is not valid JSON"),
        # an integer of more than 4,300 digits: ValueError, not a JSONDecodeError
        (header_file(b'{"a": ' + b"9" * 5_000 + b"}"), "the safetensors header is not valid JSON"),
    ],
    ids=["dtype-list", "dtype-dict", "deep-json", "huge-int"],
)
def test_bad_safetensors_headers(tmp_path, content, words):
    folder = folder_with(tmp_path, "model.safetensors", content)
    line = refused(estimate(folder), str(folder / "model.safetensors"))
    assert words in line, line


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_named_model_safetensors_is_refused_not_read(tmp_path):
    # open() on a FIFO blocks until a writer comes: the run hung (the harness's time bound fails it)
    folder = tmp_path / "ck"
    folder.mkdir()
    (folder / "config.json").write_text(CONFIG)
    os.mkfifo(folder / "model.safetensors")
    assert "not a regular file" in refused(estimate(folder), str(folder / "model.safetensors"))


def test_dev_zero_linked_as_a_shard_is_refused_as_not_a_file(tmp_path):
    folder = tmp_path / "ck"
    folder.mkdir()
    (folder / "config.json").write_text(CONFIG)
    (folder / "model.safetensors").symlink_to("/dev/zero")
    assert "not a regular file" in refused(estimate(folder), "model.safetensors")


@pytest.mark.parametrize(
    "index, words",
    [
        (b"[" * 100_000, "nested deeper than 32 levels"),
        (b'{"weight_map": {"a": "model.safetensors"}, "x": ' + b"9" * 5_000 + b"}", "invalid JSON"),
    ],
    ids=["deep-json", "huge-int"],
)
def test_bad_index_files(tmp_path, index, words):
    folder = folder_with(tmp_path, "model.safetensors.index.json", index)
    line = refused(estimate(folder), str(folder / "model.safetensors.index.json"))
    assert words in line, line


def test_headers_that_miss_a_layer_warn_naming_the_folder(tmp_path):
    # an empty header ({}): no tensor for any of the 32 layers; the warning named "checkpoint"
    folder = folder_with(tmp_path, "model.safetensors", header_file({}))
    r = estimate(folder)
    assert r.code == 0, r.stderr
    warnings = [ln for ln in r.err_lines if ln.startswith("warning:")]
    assert len(warnings) == 1 and warnings[0].startswith(f"warning: {folder}: no tensors for decoder layers 0, 1"), (
        warnings
    )


def test_damaged_cached_hub_headers_are_refused(tmp_path):
    # kvcalc's own per-commit cache of a Hub repo's headers, nested past the recursion limit
    pytest.importorskip("huggingface_hub", reason="Hub ids need huggingface_hub")
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hub" / "models--acme--llama-copy"
    blob = repo / "blobs" / hashlib.sha256(CONFIG.encode()).hexdigest()
    blob.parent.mkdir(parents=True)
    blob.write_text(CONFIG)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    snap = repo / "snapshots" / commit
    snap.mkdir(parents=True)
    (snap / "config.json").symlink_to(os.path.relpath(blob, snap))
    cached = tmp_path / "kvcalc" / "safetensors" / "acme--llama-copy" / f"{commit}.json"
    cached.parent.mkdir(parents=True)
    cached.write_text("[" * 50_000)
    env = {"HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path / "hub"), "KVCALC_CACHE": str(tmp_path / "kvcalc")}
    r = run_kvcalc("estimate", "acme/llama-copy", "-s", "1k", env=env)
    assert "kvcalc's cached safetensors headers are damaged" in refused(r, str(cached))
