"""Context limits as engines derive them (issue 9 item 5): `rope_scaling` / `rope_parameters`
scale max_position_embeddings the way vLLM's `_get_and_verify_max_len` does
(vllm/config/model.py): a factor multiplies the limit unless the rope type is su / longrope /
llama3; YaRN starts from its original_max_position_embeddings; gemma3 is never scaled; longrope
serves original_max_position_embeddings by default. The default --seq-len, the "beyond the
model's limit" warnings and the sweep's cap use the derived limit.

The configs are the real published files in tests/data/hf (copied from
/work/shared/fixtures/hf-configs) with the rope_scaling their model cards tell users to add
(Qwen/Qwen3-4B README: `{"rope_type": "yarn", "factor": 4.0,
"original_max_position_embeddings": 32768}` for 131,072 tokens).
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from kvcalc.errors import ConfigError, KvcalcWarning
from kvcalc.load.hf import model_from_hf_config
from kvcalc.load.models import load_model, load_model_file
from kvcalc.requests import resolve_seq_len, warn_beyond_context

DATA = Path(__file__).resolve().parents[1] / "data" / "hf"
YARN_4 = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}


def hf(name: str, **changes) -> dict:
    d = json.loads((DATA / name).read_text())
    d.update(changes)
    return d


def qwen3_4b_yarn():
    return model_from_hf_config(hf("Qwen3-4B.json", rope_scaling=YARN_4), "Qwen3-4B/config.json")


def test_qwen3_4b_yarn_factor_4_allows_131072_not_40960():
    m = qwen3_4b_yarn()
    assert m.max_position_embeddings == 40_960  # kept as the config states it
    assert m.context_limit == 131_072  # int(32,768 x 4.0): YaRN scales from the original, not from 40,960
    assert m.default_context == 131_072
    assert resolve_seq_len(m, None) == 131_072
    assert m.context_limit_label == (
        "context limit (131,072 = yarn factor 4 x original_max_position_embeddings 32,768)"
    )


def test_qwen3_4b_without_rope_scaling_stays_40960():
    m = model_from_hf_config(hf("Qwen3-4B.json"), "Qwen3-4B/config.json")
    assert m.rope_scaling is None and m.context_limit == 40_960
    assert m.context_limit_label == "max_position_embeddings (40,960)"


def test_llama3_rope_does_not_scale():
    # Llama-3.1-8B: rope_type llama3, factor 8 over 8,192; max_position_embeddings is already 131,072
    m = model_from_hf_config(hf("Llama-3.1-8B.json"), "Llama-3.1-8B/config.json")
    assert (m.rope_scaling.rope_type, m.rope_scaling.factor) == ("llama3", 8.0)
    assert m.context_limit == 131_072


@pytest.mark.parametrize(
    "rope, limit",
    [
        ({"type": "linear", "factor": 2.0}, 4096),  # legacy "type" key: 2,048 x 2
        ({"rope_type": "dynamic", "factor": 2.0}, 4096),  # dynamic NTK multiplies too: 2,048 x 2
        ({"rope_type": "yarn", "factor": 4.0}, 8192),  # YaRN without an original: 2,048 x 4
        ({"rope_type": "default"}, 2048),  # no factor: 2,048 x 1
        ({"rope_type": "linear", "factor": 2.5}, 5120),  # int(2,048 x 2.5)
    ],
)
def test_factor_multiplies_llama_2(rope, limit):
    # tests/data/hf/Llama-2-7b-hf.json is MLC's copy, which predates 4,096: 2,048
    m = model_from_hf_config(hf("Llama-2-7b-hf.json", rope_scaling=rope), "Llama-2-7b-hf/config.json")
    assert m.max_position_embeddings == 2048
    assert m.context_limit == limit


def test_longrope_limit_is_max_position_default_is_original():
    # microsoft/Phi-3-mini-128k-instruct (published config, from the model page): max_position_embeddings
    # 131,072, original_max_position_embeddings 4,096 at the top level, rope_scaling type "longrope"
    # (once "su") with long/short factor lists and no factor: vLLM allows 131,072, serves 4,096 by default.
    d = {
        "model_type": "phi3",
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 32,
        "hidden_size": 3072,
        "intermediate_size": 8192,
        "vocab_size": 32064,
        "torch_dtype": "bfloat16",
        "max_position_embeddings": 131072,
        "original_max_position_embeddings": 4096,
        "sliding_window": 262144,
        "rope_scaling": {"type": "su", "long_factor": [1.0] * 48, "short_factor": [1.0] * 48},
    }
    m = model_from_hf_config(d, "Phi-3-mini-128k-instruct/config.json")
    assert m.rope_scaling.rope_type == "longrope"
    assert m.context_limit == 131_072
    assert m.default_context == 4096
    assert resolve_seq_len(m, None) == 4096


def test_gemma3_is_never_scaled():
    # gemma-3-1b-it: rope_scaling null; the larger Gemma 3 configs carry {linear, factor 8} over an
    # already scaled 131,072, which vLLM leaves alone ("Gemma3's max_model_len (128K) is already scaled")
    m = model_from_hf_config(
        hf("gemma-3-1b-it.json", max_position_embeddings=131072, rope_scaling={"rope_type": "linear", "factor": 8.0}),
        "gemma-3/config.json",
    )
    assert m.context_limit == 131_072


def test_rope_parameters_per_layer_type():
    # transformers v5 writes rope_parameters, possibly one dict per layer type
    d = hf(
        "Qwen3-4B.json",
        rope_parameters={
            "full_attention": {"rope_type": "default", "rope_theta": 1e6},
            "sliding_attention": dict(YARN_4, rope_theta=1e6),
        },
    )
    assert model_from_hf_config(d, "q/config.json").context_limit == 131_072


def test_bad_factor_is_one_line_naming_the_field():
    with pytest.raises(ConfigError) as e:
        model_from_hf_config(hf("Qwen3-4B.json", rope_scaling={"rope_type": "yarn", "factor": "4"}), "q/config.json")
    assert e.value.field == "rope_scaling" and "factor must be a positive number" in str(e.value)


def test_warning_names_the_derived_limit():
    m = qwen3_4b_yarn()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert warn_beyond_context(m, [131_072]) == []  # 131,072 is within: no warning
    with pytest.warns(KvcalcWarning, match=r"131,073 tokens is beyond qwen3-4b's context limit \(131,072 = yarn"):
        assert warn_beyond_context(m, [131_073]) == [131_073]


def test_yaml_schema_accepts_rope_scaling(tmp_path):
    p = tmp_path / "q.yaml"
    text = (DATA.parents[1] / ".." / "configs" / "models" / "qwen3-4b.yaml").resolve().read_text()
    p.write_text(text + "rope_scaling: {rope_type: yarn, factor: 4, original_max_position_embeddings: 32k}\n")
    m = load_model_file(p)
    assert (m.max_position_embeddings, m.context_limit) == (40_960, 131_072)


def test_yaml_refuses_a_bad_rope_field(tmp_path):
    p = tmp_path / "q.yaml"
    p.write_text(
        "name: t\nn_layers: 2\nn_heads: 4\nhead_dim: 8\nmax_position_embeddings: 4096\n"
        "rope_scaling: {rope_type: yarn, factr: 4}\n"
    )
    with pytest.raises(ConfigError) as e:
        load_model_file(p)
    assert "factr" in str(e.value)


def test_cli_default_seq_len_and_sweep_cap_use_the_derived_limit(cli, tmp_path):
    (tmp_path / "qwen3-4b").mkdir()
    p = tmp_path / "qwen3-4b" / "config.json"
    p.write_text(json.dumps(hf("Qwen3-4B.json", rope_scaling=YARN_4)))
    r = cli("estimate", str(p), "-f", "json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    # 2 x 36 layers x 8 KV heads x 128 x 2 B = 147,456 B per token; x 131,072 = 19,327,352,832 B
    assert (out["seq_len"], out["kv_bytes_per_token"], out["kv_cache_bytes"]) == (131_072, 147_456, 19_327_352_832)
    r = cli("sweep", str(p), "-s", "32k,128k,256k", "--batch", "1", "-f", "json")
    assert r.exit_code == 0, r.output
    assert [row["seq_len"] for row in json.loads(r.stdout)] == [32_768, 131_072]  # 262,144 dropped
    assert "beyond qwen3-4b's context limit (131,072" in r.stderr


def test_bundled_models_keep_their_limits():
    # DeepSeek-V3's published config: YaRN factor 40 over 4,096 = 163,840 = its max_position_embeddings
    for name, limit in [("llama-3.1-8b", 131_072), ("qwen3-4b", 40_960), ("deepseek-v3", 163_840)]:
        assert load_model(name).context_limit == limit
