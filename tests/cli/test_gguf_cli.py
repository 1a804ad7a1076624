"""`kvcalc estimate model.gguf` and `kvcalc capacity model.gguf --engine llamacpp` end to end,
llama.cpp's type names for `--weight-dtype`, and the lazy import of the gguf package."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "load"))
from gguf_files import ENDS, LLAMA_8B_KV, tiny_layers, write_gguf

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def llama8b(tmp_path) -> Path:
    return write_gguf(tmp_path / "Llama-3.1-8B-Q4_K_M.gguf", "llama", LLAMA_8B_KV, tiny_layers(32) + ENDS)


def test_estimate_json(cli, llama8b):
    r = cli("estimate", llama8b, "-s", "8k", "--gpu", "h100-sxm", "-f", "json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    # 2 x 32 x 8 x 128 x 2 B (f16) = 131,072 B per token; x 8,192 tokens = 1,073,741,824 B
    assert (d["kv_bytes_per_token"], d["kv_cache_bytes"], d["kv_dtype"]) == (131072, 1073741824, "fp16")
    assert d["weights_source"] == "GGUF tensor table" and d["weight_dtype"] == "Q4_K_M as stored"
    # the tensor table: 32 x 320 B + 840 B token_embd + 2,240 B output and its norm = 13,320 B, 19,728 values
    assert d["weights_bytes_per_gpu"] == 13320 and d["n_params"] == 19728


def test_estimate_table_names_the_source(cli, llama8b):
    r = cli("estimate", llama8b, "-s", "8k", "--gpu", "h100-sxm")
    assert r.exit_code == 0, r.output
    assert "19,728 (from GGUF tensor table)" in r.stdout
    assert "in Q4_K_M as stored" in r.stdout


def test_capacity_llamacpp_end_to_end(cli, llama8b):
    r = cli("capacity", llama8b, "--engine", "llamacpp", "--ctx-size", "8192", "-f", "json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    # 8,192 cells x 131,072 B = 1,073,741,824 B = 1024.00 MiB; K and V 512.00 MiB each; llama-server
    # without -np: 4 slots sharing one unified stream ("4/1 seqs")
    assert d["log_lines"][-1] == (
        "llama_kv_cache: size = 1024.00 MiB (  8192 cells,  32 layers,  4/1 seqs), "
        "K (f16):  512.00 MiB, V (f16):  512.00 MiB"
    )


def test_capacity_llamacpp_with_sliding_layers(cli, tmp_path):
    # Gemma-3-27B (62 layers: 10 global, 52 sliding over 1,024) at n_ctx 32,768: the SWA cache holds
    # (-np 1: one sequence) pad(min(32,768, 1,024 + n_ubatch 512), 256) = 1,536 cells; per cell and layer
    # 2 x 16 x 128 x 2 B = 8,192 B:
    # global 32,768 x 10 x 8,192 = 2,684,354,560 B = 2560.00 MiB; SWA 1,536 x 52 x 8,192 = 654,311,424 B = 624.00 MiB
    kv = {
        "block_count": 62,
        "embedding_length": 5376,
        "attention.head_count": 32,
        "attention.head_count_kv": 16,
        "attention.key_length": 128,
        "attention.value_length": 128,
        "attention.sliding_window": 1024,
        "context_length": 131072,
    }
    p = write_gguf(tmp_path / "gemma-3-27b.gguf", "gemma3", kv, [("blk.0.attn_norm.weight", "F32", (8,))])
    r = cli("capacity", p, "--engine", "llamacpp", "--ctx-size", "32768", "-np", "1", "-f", "json")
    assert r.exit_code == 0, r.output
    sizes = [ln for ln in json.loads(r.stdout)["log_lines"] if ln.startswith("llama_kv_cache: size =")]
    assert sizes[0].startswith("llama_kv_cache: size = 2560.00 MiB ( 32768 cells,  10 layers")
    assert sizes[1].startswith("llama_kv_cache: size =  624.00 MiB (  1536 cells,  52 layers")


def test_q4_k_m_without_a_file_says_it_is_a_file_property(cli):
    r = cli("estimate", "llama-3.1-8b", "--gpu", "h100-sxm", "--weight-dtype", "q4_K_M")
    assert r.exit_code == 2
    line = r.stderr.strip()
    assert len(line.splitlines()) == 1
    assert line.startswith("error: --weight-dtype q4_K_M: 'q4_K_M' is a llama.cpp file type")
    assert "give the .gguf file as the model" in line and "did you mean q4_k (every matrix in Q4_K)?" in line


def test_weight_dtype_takes_llama_cpp_type_names(cli):
    r = cli("estimate", "llama-3.1-8b", "--gpu", "h100-sxm", "--weight-dtype", "q4_K", "-f", "json")
    assert r.exit_code == 0, r.output
    # 32 x 218,103,808 matrix values x 144 B / 256 = 3,925,868,544; bf16 embeddings and head
    # 2 x 128,256 x 4,096 x 2 B = 2,101,346,304; norms 65 x 4,096 x 2 B = 532,480
    assert json.loads(r.stdout)["weights_bytes_per_gpu"] == 6027747328


def test_weight_dtype_override_on_a_gguf_counts_the_architecture(cli, llama8b):
    r = cli("estimate", llama8b, "--gpu", "h100-sxm", "--weight-dtype", "q8_0", "-f", "json")
    assert r.exit_code == 0, r.output
    s = json.loads(r.stdout)
    assert s["weights_source"] == "architecture"
    # 32 x 218,103,808 x 34 / 32 = 7,415,529,472; fp16 (a Q4_K_M file's dtype) rest 2,101,346,304 + 532,480
    assert s["weights_bytes_per_gpu"] == 7415529472 + 2101346304 + 532480


def test_estimate_of_a_bundled_model_imports_neither_gguf_nor_numpy():
    code = (
        "import sys; from kvcalc.cli import main; sys.argv = ['kvcalc', 'estimate', 'llama-3.1-8b', '-s', '1k'];\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print('LOADED', [m for m in ('gguf', 'numpy') if m in sys.modules])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=False,
        env={"PYTHONPATH": str(ROOT), "COLUMNS": "80", "PATH": "/usr/bin:/bin"},
    )
    assert "LOADED []" in out.stdout, (out.stdout[-500:], out.stderr[-2000:])


def test_without_the_gguf_package_one_line(tmp_path, llama8b):
    # a `gguf` that cannot be imported: the one line names the extra to install
    (tmp_path / "gguf").mkdir()
    (tmp_path / "gguf" / "__init__.py").write_text("raise ImportError('no gguf here')\n")
    out = subprocess.run(
        [sys.executable, "-m", "kvcalc", "estimate", str(llama8b)],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
        timeout=60,
        env={"PYTHONPATH": f"{tmp_path}:{ROOT}", "COLUMNS": "80", "PATH": "/usr/bin:/bin"},
    )
    assert out.returncode == 2
    assert out.stderr.strip() == "error: this needs the gguf package to read .gguf files: pip install 'kvcalc[gguf]'"
