"""A weight-only format (MXFP4) is refused for the KV cache, in each engine's own words, and
never offered as a KV suggestion; a model whose checkpoint dtype is weight-only still sizes a
cache in another format (found by the new-user regression run of the 0.2.0 layout)."""

from __future__ import annotations

import pytest

from kvcalc.errors import UnknownNameError
from kvcalc.formats import kv_format, weight_format


def test_unknown_kv_dtype_is_never_offered_a_weight_format():
    with pytest.raises(UnknownNameError) as e:
        kv_format("mxfp5")
    assert "mxfp4" not in str(e.value)
    # ... while a weight dtype is
    with pytest.raises(UnknownNameError, match="mxfp4"):
        weight_format("mxfp5")


@pytest.mark.parametrize(
    "engine,args,message",
    [
        (
            "vllm",
            ["--kv-memory", "10GiB"],
            "vLLM 0.33 has no 'mxfp4' KV cache dtype; vLLM 0.33's --kv-cache-dtype takes auto, float16",
        ),
        ("sglang", ["--kv-memory", "10GiB"], "SGLang 0.5.23 has no 'mxfp4' KV cache dtype; its pool stores auto, bf16"),
        ("llamacpp", ["--ctx-size", "4096"], "llama.cpp 0c1e570 has no 'mxfp4' KV cache type; use one of f32, f16"),
        ("ideal", ["--kv-memory", "10GiB"], "mxfp4 is a weight format, not a KV-cache format"),
    ],
)
def test_each_engine_refuses_a_weight_format_in_its_own_words(cli, engine, args, message):
    r = cli("capacity", "llama-3.1-8b", "--engine", engine, *args, "--kv-dtype", "mxfp4")
    assert r.exit_code == 2
    assert r.stderr.strip().splitlines() == [f"error: {r.stderr.strip()[len('error: ') :]}"]
    assert message in r.stderr


def test_a_model_in_mxfp4_sizes_a_cache_in_another_format(cli, tmp_path):
    path = tmp_path / "tiny-mxfp4.yaml"
    path.write_text(
        "name: tiny-mxfp4\nsource: test\nn_layers: 4\nn_heads: 8\nn_kv_heads: 2\nhead_dim: 64\n"
        "dtype: mxfp4\nmax_position_embeddings: 4096\n"
    )
    r = cli("estimate", str(path), "--seq-len", "1024", "--kv-dtype", "fp16", "--format", "json")
    assert r.exit_code == 0, r.stderr
    import json

    # 2 (K and V) x 4 layers x 2 KV heads x 64 head_dim x 1,024 tokens x 2 B = 2,097,152 B
    assert json.loads(r.stdout)["kv_cache_bytes"] == 2_097_152
    # without --kv-dtype the model's own dtype would be the cache's: refused, naming the fix
    r = cli("estimate", str(path), "--seq-len", "1024")
    assert r.exit_code == 2 and "mxfp4 is a weight format, not a KV-cache format" in r.stderr
