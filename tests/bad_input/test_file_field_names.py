"""A loaded file's bad geometry is refused in the file's own words: one line naming the file,
the field as that file spells it (config.json `num_key_value_heads`, GGUF
`llama.attention.head_count_kv`, kvcalc YAML `n_kv_heads`) and the fix; exit 2 (issue 23, the
new user's finding: a config.json with more KV heads than query heads named kvcalc's
`n_kv_heads`). The schema checks the geometry once (`ModelSpec._check_heads`); the loaders
pass the file's names to it as data (`kvcalc.load.files.build(..., names=...)`)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

from tests.bad_input.harness import refused, run_kvcalc

#: Llama-2-7B's geometry (meta-llama/Llama-2-7b-hf config.json), the fields a test changes
#: replaced or dropped (None).
LLAMA = {
    "model_type": "llama",
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "hidden_size": 4096,
    "intermediate_size": 11008,
    "vocab_size": 32000,
    "max_position_embeddings": 4096,
    "torch_dtype": "float16",
}


def config(tmp_path: Path, **change: object) -> Path:
    data = {k: v for k, v in {**LLAMA, **change}.items() if v is not None}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(data))
    return p


@pytest.mark.parametrize(
    "change,field,says",
    [
        # the finding: 64 KV heads over 32 query heads
        (
            {"num_key_value_heads": 64},
            "num_key_value_heads",
            "num_key_value_heads (64) exceeds num_attention_heads (32); each KV head serves one or "
            "more query heads, so give at most 32 (are the two fields swapped?)",
        ),
        # 32 % 5 = 2: no whole group of query heads per KV head
        (
            {"num_key_value_heads": 5},
            "num_key_value_heads",
            "num_attention_heads (32) must be divisible by num_key_value_heads (5); give a "
            "num_key_value_heads that divides 32",
        ),
        # head_dim derived as hidden_size // heads: 4,001 / 32 is not whole
        (
            {"hidden_size": 4001},
            "hidden_size",
            "hidden_size (4001) is not divisible by num_attention_heads (32); give head_dim",
        ),
        ({"num_hidden_layers": 0}, "num_hidden_layers", "must be at least 1, got 0"),
        ({"num_attention_heads": -32}, "num_attention_heads", "must be at least 1, got -32"),
        ({"num_key_value_heads": -8}, "num_key_value_heads", "must be at least 1, got -8"),
        ({"head_dim": 0}, "head_dim", "must be at least 1, got 0"),
    ],
)
def test_config_json_names_its_own_field(tmp_path, change, field, says):
    p = config(tmp_path, **change)
    line = refused(run_kvcalc("estimate", str(p)), str(p), f"field '{field}': ")
    assert line.endswith(says), line
    assert not re.search(r"\b(n_kv_heads|n_heads|n_layers)\b", line), line  # never kvcalc's names


def test_multimodal_config_names_the_text_config_field(tmp_path):
    # a wrapper's text model is read from text_config: the line names that nested key
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"model_type": "llava", "text_config": {**LLAMA, "num_key_value_heads": 64}}))
    refused(run_kvcalc("estimate", str(p)), str(p), "field 'text_config.num_key_value_heads': ")


def test_config_folder_names_its_own_field(tmp_path):
    # a checkpoint folder (config.json beside the weights) is read by another path: same line
    config(tmp_path, num_key_value_heads=64)
    refused(run_kvcalc("estimate", str(tmp_path)), "config.json", "field 'num_key_value_heads': ")


def test_kvcalc_yaml_names_kvcalc_field(tmp_path):
    # a kvcalc YAML spells the field n_kv_heads, so its line does (line 4 of the file)
    p = tmp_path / "m.yaml"
    p.write_text("name: m\nn_layers: 2\nn_heads: 4\nn_kv_heads: 8\nhead_dim: 8\n")
    line = refused(run_kvcalc("estimate", str(p)), f"{p}:4: field 'n_kv_heads': ")
    assert line.endswith(
        "n_kv_heads (8) exceeds n_heads (4); each KV head serves one or more query heads, "
        "so give at most 4 (are the two fields swapped?)"
    ), line


def _gguf():
    sys.path.insert(0, str(Path(__file__).parents[1] / "load"))
    import gguf_files  # skips without the gguf package

    return gguf_files


@pytest.mark.parametrize(
    "change,key,says",
    [
        ({"attention.head_count_kv": 64}, "llama.attention.head_count_kv", "exceeds llama.attention.head_count (32)"),
        (
            {"attention.head_count_kv": 5},
            "llama.attention.head_count_kv",
            "llama.attention.head_count (32) must be divisible by llama.attention.head_count_kv (5)",
        ),
        ({"block_count": 0}, "llama.block_count", "must be from 1 to"),
        # no key_length: the head size would be 4,001 // 32 = 125, which no tensor of the file has
        (
            {"embedding_length": 4001},
            "llama.embedding_length",
            "(4,001) is not divisible by llama.attention.head_count (32) and the file gives no "
            "llama.attention.key_length; convert the model again",
        ),
    ],
)
def test_gguf_names_its_own_key(tmp_path, change, key, says):
    g = _gguf()
    p = g.write_gguf(tmp_path / "m.gguf", "llama", {**g.LLAMA_8B_KV, **change}, g.tiny_layers(32) + g.ENDS)
    line = refused(run_kvcalc("estimate", str(p), "-s", "1k"), str(p), f"field '{key}': ", says)
    assert not re.search(r"\bn_kv_heads\b", line), line


@pytest.mark.parametrize(
    "global_kv,says",
    [
        (32, "text_config.num_global_key_value_heads (32) exceeds text_config.num_attention_heads (16)"),
        (3, "text_config.num_attention_heads (16) must be divisible by text_config.num_global_key_value_heads (3)"),
    ],
)
def test_gemma4_global_kv_heads_name_their_own_field(tmp_path, global_kv, says):
    # google/gemma-4-26B-A4B config.json (tests/data): its full-attention layers take
    # num_global_key_value_heads (2) KV heads over its 16 query heads; 32 or 3 is refused by that name
    data = json.loads((Path(__file__).parents[1] / "data/hf-configs-2026/google--gemma-4-26B-A4B.json").read_text())
    data["text_config"]["num_global_key_value_heads"] = global_kv
    p = tmp_path / "config.json"
    p.write_text(json.dumps(data))
    refused(run_kvcalc("estimate", str(p)), str(p), "field 'text_config.num_global_key_value_heads': ", says)
