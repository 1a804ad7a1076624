"""Offline Hub ids whose cached snapshot holds the weights themselves (trial item 3): the
safetensors headers are read from the snapshot folder (`hub._snapshot_headers`), as a local
checkpoint folder's are, when kvcalc has kept none for the commit. The cache is built in a
temporary folder as huggingface_hub writes it (`refs/main`, `snapshots/<commit>/<file>` linked to
`blobs/<sha256>`), and the CLI runs in a fresh process with HF_HUB_OFFLINE=1: no network.

Also: a path-like reference that is neither a file nor a Hub id (`a/b/c`) says both.

The model is a tiny Llama (2 layers, hidden 64, 4 heads of 16, 2 KV heads, MLP 128, vocab 256,
untied head), its tensors written in F32 while its config says bfloat16, so weights read from
the headers (4 B a value) differ from weights counted from the architecture (2 B a value).
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("huggingface_hub", reason="Hub ids need huggingface_hub: pip install 'kvcalc[hub]'")

ROOT = Path(__file__).resolve().parents[2]
COMMIT = "89abcdef0123456789abcdef0123456789abcdef"
CONFIG = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "num_hidden_layers": 2,
    "hidden_size": 64,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 128,
    "vocab_size": 256,
    "max_position_embeddings": 1024,
    "torch_dtype": "bfloat16",
    "tie_word_embeddings": False,
}

# parameters: embedding 256 x 64 = 16,384, LM head 16,384, final norm 64; per layer q 64 x 64 = 4,096,
# k and v 32 x 64 = 2,048 each, o 4,096, gate / up / down 128 x 64 = 8,192 each, two norms 64 each:
# 12,288 + 24,576 + 128 = 36,992; all: 2 x 36,992 + 16,384 + 16,384 + 64 = 106,816
N_PARAMS = 106_816


def shapes() -> dict[str, list[int]]:
    out = {"model.embed_tokens.weight": [256, 64], "lm_head.weight": [256, 64], "model.norm.weight": [64]}
    for i in range(2):
        for name, s in {
            "self_attn.q_proj": [64, 64],
            "self_attn.k_proj": [32, 64],
            "self_attn.v_proj": [32, 64],
            "self_attn.o_proj": [64, 64],
            "mlp.gate_proj": [128, 64],
            "mlp.up_proj": [128, 64],
            "mlp.down_proj": [64, 128],
            "input_layernorm": [64],
            "post_attention_layernorm": [64],
        }.items():
            out[f"model.layers.{i}.{name}.weight"] = s
    return out


def safetensors_bytes(tensors: dict[str, list[int]]) -> bytes:
    """A real safetensors file: 8-byte length, JSON header, the F32 data (zeros)."""
    header, offset = {}, 0
    for name, s in tensors.items():
        n = 4 * (s[0] * s[1] if len(s) == 2 else s[0])
        header[name] = {"dtype": "F32", "shape": s, "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + bytes(offset)


def cache_repo(cache: Path, repo_id: str, files: dict[str, bytes]) -> Path:
    """The repo in a Hub cache as huggingface_hub writes it: each file a link to its blob."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(COMMIT)
    snap = repo / "snapshots" / COMMIT
    snap.mkdir(parents=True)
    for name, content in files.items():
        blob = repo / "blobs" / hashlib.sha256(content).hexdigest()
        blob.parent.mkdir(exist_ok=True)
        blob.write_bytes(content)
        (snap / name).symlink_to(os.path.relpath(blob, snap))
    return snap


def run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "HF_HUB_CACHE": str(tmp_path / "hub"),
        "KVCALC_CACHE": str(tmp_path / "kvcalc"),
        "HF_HUB_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "PYTHONPATH": str(ROOT),
        "COLUMNS": "80",
    }
    env.pop("HF_TOKEN", None)
    return subprocess.run(
        [sys.executable, "-m", "kvcalc", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=60,
        check=False,
    )


def estimate_json(tmp_path: Path) -> dict:
    r = run(tmp_path, "estimate", "acme/tiny-llama", "-s", "1k", "--gpu", "h100-sxm", "-f", "json")
    assert r.returncode == 0 and r.stderr == "", r.stderr
    return json.loads(r.stdout)


def test_snapshot_with_one_safetensors_file_gives_the_stored_bytes(tmp_path):
    cache_repo(
        tmp_path / "hub",
        "acme/tiny-llama",
        {"config.json": json.dumps(CONFIG).encode(), "model.safetensors": safetensors_bytes(shapes())},
    )
    d = estimate_json(tmp_path)
    # 106,816 values x 4 B (F32 as stored), not x 2 B (the config's bf16)
    assert (d["n_params"], d["weights_bytes_per_gpu"]) == (N_PARAMS, 4 * N_PARAMS) == (106_816, 427_264)
    assert d["weights_source"] == "safetensors headers of 1 file"
    assert d["source"] == (
        "acme/tiny-llama config.json (Hugging Face cache, commit 89abcdef0123); weights from "
        "safetensors headers of 1 file"
    )


def test_snapshot_with_an_index_and_shards(tmp_path):
    all_shapes = shapes()
    first = {k: v for k, v in all_shapes.items() if "layers.1." not in k}
    second = {k: v for k, v in all_shapes.items() if "layers.1." in k}
    names = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")
    index = {"metadata": {}, "weight_map": {**{k: names[0] for k in first}, **{k: names[1] for k in second}}}
    cache_repo(
        tmp_path / "hub",
        "acme/tiny-llama",
        {
            "config.json": json.dumps(CONFIG).encode(),
            "model.safetensors.index.json": json.dumps(index).encode(),
            names[0]: safetensors_bytes(first),
            names[1]: safetensors_bytes(second),
        },
    )
    d = estimate_json(tmp_path)
    assert (d["n_params"], d["weights_bytes_per_gpu"]) == (N_PARAMS, 427_264)
    assert d["weights_source"] == "safetensors headers of 2 files"


def test_snapshot_with_the_index_but_no_shards_counts_the_architecture_quietly(tmp_path):
    # a config-only download (the index came along, the shards did not): no warning, the source says so
    index = {"weight_map": {k: "model-00001-of-00001.safetensors" for k in shapes()}}
    cache_repo(
        tmp_path / "hub",
        "acme/tiny-llama",
        {"config.json": json.dumps(CONFIG).encode(), "model.safetensors.index.json": json.dumps(index).encode()},
    )
    d = estimate_json(tmp_path)
    # 106,816 parameters x 2 B (bf16, the config's dtype)
    assert (d["weights_source"], d["weights_bytes_per_gpu"]) == ("architecture", 2 * N_PARAMS)
    assert d["source"].endswith("weights counted from the architecture (no safetensors headers cached for this commit)")


def test_damaged_snapshot_header_is_named(tmp_path):
    bad = json.dumps({"model.embed_tokens.weight": {"dtype": "Q9", "shape": [2], "data_offsets": [0, 4]}}).encode()
    snap = cache_repo(
        tmp_path / "hub",
        "acme/tiny-llama",
        {"config.json": json.dumps(CONFIG).encode(), "model.safetensors": struct.pack("<Q", len(bad)) + bad},
    )
    r = run(tmp_path, "estimate", "acme/tiny-llama")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith(
        f"error: {snap / 'model.safetensors'}: field 'model.embed_tokens.weight': 'Q9' is not a safetensors dtype"
    ), r.stderr
    assert len(r.stderr.splitlines()) == 1


@pytest.mark.parametrize("ref", ["a/b/c", "acme/", "org/name/extra"])
def test_neither_a_file_nor_a_hub_id(tmp_path, ref):
    r = run(tmp_path, "estimate", ref)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == (
        f"error: {ref}: no such file or folder, and not a Hugging Face Hub id (org/name or "
        "org/name@revision, e.g. meta-llama/Llama-3.1-8B)\n"
    )


def test_a_missing_yaml_path_is_still_file_not_found(tmp_path):
    r = run(tmp_path, "estimate", "a/b/c.yaml")
    assert (r.returncode, r.stderr) == (2, "error: a/b/c.yaml: file not found\n")


def test_hub_id_is_the_launch_lines_model(tmp_path):
    # trial finding B: a Hub id input launches by that id (`engines.launch.model_ref`), even where
    # the config.json's `_name_or_path` is the folder it was saved from
    cache_repo(
        tmp_path / "hub",
        "acme/tiny-llama",
        {"config.json": json.dumps({**CONFIG, "_name_or_path": "/home/someone/tiny"}).encode()},
    )
    r = run(tmp_path, "plan", "acme/tiny-llama", "-s", "1k", "--gpu", "h100-sxm", "--engine", "vllm", "-f", "json")
    assert r.returncode == 0, r.stderr
    launch = json.loads(r.stdout)["layouts"][0]["launch"]
    assert launch.startswith("vllm serve acme/tiny-llama --tensor-parallel-size 1 "), launch
