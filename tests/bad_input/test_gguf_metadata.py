"""GGUF files whose header reads but whose metadata or tensor table would mislead: found by trying
`kvcalc estimate model.gguf` as a new user would (the h-trial session). The files are written by
`gguf.GGUFWriter` (tests/load/gguf_files.py) with Llama-3.1-8B's real hyperparameters."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.bad_input.harness import refused, run_kvcalc

sys.path.insert(0, str(Path(__file__).parents[1] / "load"))
from gguf_files import ENDS, LLAMA_8B_KV, gguf, tiny_layers, write_gguf


def test_an_empty_tensor_table_counts_weights_from_the_architecture(tmp_path):
    # a vocab-only GGUF (llama.cpp ships such files in models/ggml-vocab-*.gguf): no tensor at all.
    # It printed "weights per GPU 0 B in Q4_K_M as stored" and 0 parameters.
    p = write_gguf(tmp_path / "vocab-only.gguf", "llama", LLAMA_8B_KV, [])
    r = run_kvcalc("estimate", str(p), "-s", "1k", "--gpu", "h100-sxm", "-f", "json")
    assert r.code == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["weights_source"] == "architecture"
    # Llama-3.1-8B from its hyperparameters, counted in fp16 (the file states Q4_K_M, a per-tensor
    # mix kvcalc cannot count without the tensors): 8,030,261,248 parameters less the LM head
    # 128,256 x 4,096 = 525,336,576 (without a tensor table no output.weight says it is untied) =
    # 7,504,924,672 parameters x 2 B = 15,009,849,344 B
    assert d["n_params"] == 7_504_924_672 and d["weights_bytes_per_gpu"] == 15_009_849_344
    assert any(ln.startswith(f"warning: {p}: the GGUF tensor table is empty") for ln in r.err_lines), r.stderr


def test_a_number_stored_as_a_string_is_shown_as_a_string(tmp_path):
    # `must be an integer, got 32` for the string "32" read as a contradiction
    p = tmp_path / "m.gguf"
    w = gguf.GGUFWriter(str(p), "llama")
    for k, v in LLAMA_8B_KV.items():
        full = k if k.startswith("general.") else f"llama.{k}"
        w.add_string(full, "32") if k == "block_count" else (
            w.add_string(full, v) if isinstance(v, str) else w.add_uint32(full, v)
        )
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    line = refused(run_kvcalc("estimate", str(p), "-s", "1k"), str(p), "field 'llama.block_count'")
    assert line.endswith("must be an integer, got the string '32'"), line


def test_zero_kv_heads_name_the_kv_key(tmp_path):
    # head_count 32, head_count_kv 0: the line named llama.attention.head_count, which is fine
    p = write_gguf(tmp_path / "m.gguf", "llama", {**LLAMA_8B_KV, "attention.head_count_kv": 0}, tiny_layers(32) + ENDS)
    refused(
        run_kvcalc("estimate", str(p), "-s", "1k"),
        str(p),
        "field 'llama.attention.head_count_kv': is 0 for every layer",
    )
