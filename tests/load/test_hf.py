"""Hugging Face config.json -> ModelSpec (kvcalc/hf.py) and `kvcalc import` (kvcalc/cli_hf.py).

Fixtures in tests/data/hf/ are copies of /work/shared/fixtures/hf-configs/ (published configs;
see tests/data/hf/README.md for where each was found). Every expected byte count below is
derived by hand with the arithmetic in a comment: per token = sum over caching layers of
2 (K and V) x KV heads x head_dim x bytes per element (MLA: one latent of kv_lora_rank +
qk_rope_head_dim values, no factor 2).

Mistral-7B-v0.1.json: the copy MLC vendors renamed "sliding_window" to "sliding_window_size";
the real HF file (huggingface.co/mistralai/Mistral-7B-v0.1/blob/main/config.json) has
"sliding_window": 4096. The shared fixture we copied is already the corrected one (it has
"sliding_window": 4096 and no sliding_window_size), so the test reads the real field.
"""

from __future__ import annotations

import json
import os
import warnings
from collections import Counter
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from kvcalc.calc import kv_cache
from kvcalc.cli import app
from kvcalc.errors import ConfigError, KvcalcWarning
from kvcalc.load.export import spec_to_yaml
from kvcalc.load.files import bundled
from kvcalc.load.hf import model_from_hf_config
from kvcalc.load.hf.reader import compact_layers
from kvcalc.load.models import load_model

HF = Path(__file__).parents[1] / "data" / "hf"
runner = CliRunner()


def load(name: str):
    return load_model(HF / name)


# file, dtype, layer kinds (counts), window, KV bytes per token in the config's dtype
FIXTURES = [
    # meta-llama/Llama-3.1-8B: 2 x 32 layers x 8 KV x 128 (4096 / 32) x 2 B = 131,072
    ("Llama-3.1-8B.json", "bf16", {"full": 32}, None, 131_072),
    # meta-llama/Llama-2-7b-hf: MHA, fp16: 2 x 32 x 32 x 128 x 2 = 524,288
    ("Llama-2-7b-hf.json", "fp16", {"full": 32}, None, 524_288),
    # Qwen/Qwen3-4B: head_dim 128 explicit (2560 / 32 = 80 would be wrong): 2 x 36 x 8 x 128 x 2 = 147,456
    ("Qwen3-4B.json", "bf16", {"full": 36}, None, 147_456),
    # mistralai/Mistral-7B-v0.1: every layer slides (4096): 2 x 32 x 8 x 128 x 2 = 131,072
    ("Mistral-7B-v0.1.json", "bf16", {"sliding": 32}, 4096, 131_072),
    # mistralai/Mixtral-8x7B-v0.1: sliding_window null -> none: 2 x 32 x 8 x 128 x 2 = 131,072
    ("Mixtral-8x7B-v0.1.json", "bf16", {"full": 32}, None, 131_072),
    # tiiuae/falcon-7b: multi_query -> 1 KV head, head_dim 4544 / 71 = 64: 2 x 32 x 1 x 64 x 2 = 8,192
    ("falcon-7b.json", "bf16", {"full": 32}, None, 8_192),
    # openai-community/gpt2: no dtype -> fp32, MHA 768 / 12 = 64: 2 x 12 x 12 x 64 x 4 = 73,728
    ("gpt2.json", "fp32", {"full": 12}, None, 73_728),
    # google/gemma-2-9b-it: 42 layers, even ones slide: 21 + 21; 2 x 42 x 8 x 256 x 2 = 344,064
    ("gemma-2-9b-it.json", "bf16", {"sliding": 21, "full": 21}, 4096, 344_064),
    # google/gemma-3-1b-it: every 6th global (5, 11, 17, 23) -> 4 full + 22 sliding (512);
    # 2 x 26 x 1 x 256 x 2 = 26,624
    ("gemma-3-1b-it.json", "bf16", {"sliding": 22, "full": 4}, 512, 26_624),
    # deepseek-ai/DeepSeek-V2-Lite-Chat: MLA, 27 x (512 + 64) x 2 = 31,104
    ("DeepSeek-V2-Lite-Chat.json", "bf16", {"mla": 27}, None, 31_104),
    # openai/gpt-oss-20b: 24 layers alternating sliding (128) / full, 8 KV x 64: 2 x 24 x 8 x 64 x 2 = 49,152
    ("gpt-oss-20b.json", "bf16", {"sliding": 12, "full": 12}, 128, 49_152),
    # ai21labs/AI21-Jamba-1.5-Mini: attention on layers 4, 12, 20, 28 (period 8, offset 4), the
    # other 28 mamba: 2 x 4 x 8 x 128 x 2 = 16,384 (plus the fixed mamba state, below)
    ("AI21-Jamba-1.5-Mini.json", "bf16", {"mamba": 28, "full": 4}, None, 16_384),
]
FIXTURE_FILES = [f[0] for f in FIXTURES]


def test_every_fixture_is_tested():
    assert sorted(p.name for p in HF.glob("*.json")) == sorted(FIXTURE_FILES)


@pytest.mark.parametrize("file,dtype,kinds,window,per_token", FIXTURES, ids=FIXTURE_FILES)
def test_fixture_bytes_per_token(file, dtype, kinds, window, per_token):
    spec = load(file)
    assert spec.dtype == dtype
    assert dict(Counter(spec.layer_kinds)) == kinds
    assert spec.sliding_window == window
    assert kv_cache.kv_bytes_per_token(spec, spec.dtype) == per_token
    assert spec.source == f"{HF / file} (HF config.json, model_type {spec.model_type})"


def test_fixture_exact_layer_positions():
    # gemma-2: layer i slides when i % 2 == 0; gemma-3: (i + 1) % 6 == 0 is global; Jamba:
    # i % 8 == 4 is attention.
    assert [i for i, k in enumerate(load("gemma-2-9b-it.json").layer_kinds) if k == "sliding"] == list(range(0, 42, 2))
    assert [i for i, k in enumerate(load("gemma-3-1b-it.json").layer_kinds) if k == "full"] == [5, 11, 17, 23]
    assert [i for i, k in enumerate(load("AI21-Jamba-1.5-Mini.json").layer_kinds) if k == "full"] == [4, 12, 20, 28]
    assert load("gpt-oss-20b.json").layer_kinds[:2] == ["sliding", "full"]


# file, seq_len, window-aware cache bytes (batch 1, config dtype)
LONG_CONTEXT = [
    # Mistral-7B-v0.1 at 32768: every layer keeps 4096 tokens: 131,072 x 4096 = 536,870,912
    ("Mistral-7B-v0.1.json", 32768, 536_870_912),
    # gemma-2-9b at 8192: one layer is 2 x 8 x 256 x 2 = 8192 B/token;
    # 21 x 8192 x 8192 (full) + 21 x 4096 x 8192 (sliding) = 1,409,286,144 + 704,643,072 = 2,113,929,216
    ("gemma-2-9b-it.json", 8192, 2_113_929_216),
    # gemma-3-1b at 32768: one layer 2 x 1 x 256 x 2 = 1024 B/token;
    # 4 x 32768 x 1024 + 22 x 512 x 1024 = 134,217,728 + 11,534,336 = 145,752,064
    ("gemma-3-1b-it.json", 32768, 145_752_064),
    # gpt-oss-20b at 131072: one layer 2 x 8 x 64 x 2 = 2048 B/token;
    # 12 x 131072 x 2048 + 12 x 128 x 2048 = 3,221,225,472 + 3,145,728 = 3,224,371,200
    ("gpt-oss-20b.json", 131072, 3_224_371_200),
]


@pytest.mark.parametrize("file,seq_len,expected", LONG_CONTEXT, ids=[x[0] for x in LONG_CONTEXT])
def test_window_aware_long_context(file, seq_len, expected):
    spec = load(file)
    assert kv_cache.kv_cache_bytes(spec, seq_len, 1, spec.dtype) == expected
    # without the window saving every layer holds seq_len tokens: per token x seq_len
    no_window = kv_cache.kv_cache_bytes(spec, seq_len, 1, spec.dtype, window_aware=False)
    assert no_window == kv_cache.kv_bytes_per_token(spec, spec.dtype) * seq_len > expected


def test_jamba_mamba_state():
    # Mamba-1 state per layer (schema._state_values): d_inner = 2 x 4096 = 8192;
    # conv 8192 x (4 - 1) = 24,576 + ssm 8192 x 16 = 131,072 -> 155,648 values;
    # 28 mamba layers x 155,648 x 2 B = 8,716,288 B per sequence. dt_rank "auto" is not used there.
    spec = load("AI21-Jamba-1.5-Mini.json")
    assert kv_cache.state_bytes_per_seq(spec) == 28 * 155_648 * 2 == 8_716_288
    assert (spec.n_experts, spec.n_experts_per_token, spec.moe_layer_period, spec.moe_layer_offset) == (16, 2, 2, 1)


def test_jamba_attention_slides_only_with_a_window():
    # configuration_jamba.py: a set sliding_window makes the attention layers (4, 12, 20, 28) slide.
    # Jamba-1.5-Mini with sliding_window 4096, at 8,192 tokens: each attention layer caches 4,096
    # tokens of 2 x 8 KV heads x 128 x 2 B = 4,096 B: 4 x 4,096 x 4,096 = 67,108,864 B
    data = json.loads((HF / "AI21-Jamba-1.5-Mini.json").read_text())
    spec = model_from_hf_config({**data, "sliding_window": 4096}, "AI21-Jamba-1.5-Mini/config.json")
    assert [i for i, k in enumerate(spec.layer_kinds) if k == "sliding"] == [4, 12, 20, 28]
    assert kv_cache.kv_cache_bytes(spec, 8192, 1, "bf16") == 67_108_864


# ----- round trip: config.json -> YAML -> ModelSpec gives the same numbers ------------------


@pytest.mark.parametrize("file", FIXTURE_FILES)
def test_import_round_trip(file, tmp_path):
    spec = load(file)
    text = spec_to_yaml(spec)
    assert text.startswith("# Converted by `kvcalc import`")
    data = yaml.safe_load(text)
    assert list(data)[:2] == ["name", "source"]
    assert "layer_types" not in data  # every fixture's kinds repeat with a short period
    out = tmp_path / f"{spec.name}.yaml"
    out.write_text(text)
    back = load_model(out)
    assert back.model_dump() == spec.model_dump()
    assert back.layer_kinds == spec.layer_kinds
    assert kv_cache.kv_bytes_per_token(back, back.dtype) == kv_cache.kv_bytes_per_token(spec, spec.dtype)
    for T in (1, 127, 128, 129, 513, 4097, 32768, 262144):
        assert kv_cache.kv_cache_bytes(back, T, 3, back.dtype) == kv_cache.kv_cache_bytes(spec, T, 3, spec.dtype)


def test_compact_layers():
    assert compact_layers(["full"] * 4) == {}
    assert compact_layers(["sliding"] * 4) == {}
    assert compact_layers(["sliding", "full"] * 3) == {"layer_pattern": ["sliding", "full"]}
    # not periodic within half the layers -> one kind per layer
    kinds = ["full"] * 3 + ["sliding"] * 3
    assert compact_layers(kinds) == {"layer_types": kinds}


# ----- family rules on small published-shape configs ----------------------------------------


def test_falcon_kv_heads():
    base = {"model_type": "falcon", "hidden_size": 4544, "num_hidden_layers": 32, "num_attention_heads": 71}
    assert model_from_hf_config({**base, "multi_query": True}).resolved_n_kv_heads == 1
    assert model_from_hf_config({**base, "multi_query": False}).resolved_n_kv_heads == 71
    # tiiuae/falcon-40b (old names): n_head 128, n_head_kv 8, new_decoder_architecture,
    # 8192 / 128 = 64: 2 x 60 x 8 x 64 x 2 = 122,880
    f40 = {
        "model_type": "RefinedWeb",
        "hidden_size": 8192,
        "n_layer": 60,
        "n_head": 128,
        "n_head_kv": 8,
        "new_decoder_architecture": True,
        "multi_query": True,
    }
    spec = model_from_hf_config(f40)
    assert spec.resolved_n_kv_heads == 8
    assert kv_cache.kv_bytes_per_token(spec, "bf16") == 122_880


def test_transformers_defaults_when_fields_are_absent():
    # FalconConfig: multi_query defaults to true -> 1 KV head
    falcon = json.loads((HF / "falcon-7b.json").read_text())
    del falcon["multi_query"]
    assert model_from_hf_config(falcon).resolved_n_kv_heads == 1
    # Qwen3Config: head_dim defaults to 128 (not hidden 2560 / 32 = 80); use_sliding_window
    # defaults to false, so a sliding_window of 4096 alone makes nothing slide
    qwen = json.loads((HF / "Qwen3-4B.json").read_text())
    for k in ("head_dim", "use_sliding_window"):
        del qwen[k]
    spec = model_from_hf_config({**qwen, "sliding_window": 4096})
    assert spec.resolved_head_dim == 128 and set(spec.layer_kinds) == {"full"} and spec.sliding_window is None
    # Gemma2Config: sliding_window 4096 by default; GptOssConfig: layer_types alternate from sliding
    gemma = json.loads((HF / "gemma-2-9b-it.json").read_text())
    for k in ("sliding_window", "sliding_window_size"):
        del gemma[k]
    assert model_from_hf_config(gemma).sliding_window == 4096
    oss = json.loads((HF / "gpt-oss-20b.json").read_text())
    del oss["layer_types"]
    assert model_from_hf_config(oss).layer_kinds == load("gpt-oss-20b.json").layer_kinds


QWEN2 = {
    "model_type": "qwen2",
    "hidden_size": 3584,
    "num_hidden_layers": 28,
    "num_attention_heads": 28,
    "num_key_value_heads": 4,
    "sliding_window": 131072,
    "max_window_layers": 28,
    "torch_dtype": "bfloat16",
}


def test_qwen2_sliding_window_rules():
    # Qwen/Qwen2-7B-Instruct: use_sliding_window false -> no window at all; qkv bias
    off = model_from_hf_config({**QWEN2, "use_sliding_window": False})
    assert off.sliding_window is None and set(off.layer_kinds) == {"full"} and off.attention_bias
    # 2 x 28 x 4 x 128 x 2 = 57,344
    assert kv_cache.kv_bytes_per_token(off, "bf16") == 57_344
    # enabled: layers >= max_window_layers slide (here 20..27)
    on = model_from_hf_config({**QWEN2, "use_sliding_window": True, "sliding_window": 4096, "max_window_layers": 20})
    assert [i for i, k in enumerate(on.layer_kinds) if k == "sliding"] == list(range(20, 28))
    assert on.layer_types is not None  # 20 full then 8 sliding does not repeat


def test_gemma3_multimodal_text_config_inherits_defaults():
    # google/gemma-3-4b-it config.json: the text_config leaves heads to Gemma3TextConfig's
    # defaults (8 heads, 4 KV, head_dim 256); dtype at the top level. 34 layers, every 6th
    # global (5, 11, 17, 23, 29) -> 5 full + 29 sliding (1024); 2 x 34 x 4 x 256 x 2 = 139,264
    cfg = {
        "architectures": ["Gemma3ForConditionalGeneration"],
        "model_type": "gemma3",
        "torch_dtype": "bfloat16",
        "_name_or_path": "google/gemma-3-4b-it",
        "text_config": {
            "hidden_size": 2560,
            "intermediate_size": 10240,
            "model_type": "gemma3_text",
            "num_hidden_layers": 34,
            "sliding_window": 1024,
            "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
        },
        "vision_config": {"hidden_size": 1152, "model_type": "siglip_vision_model"},
    }
    spec = model_from_hf_config(cfg, "x/config.json")
    assert spec.name == "gemma-3-4b-it"
    assert (spec.n_heads, spec.resolved_n_kv_heads, spec.resolved_head_dim) == (8, 4, 256)
    assert dict(Counter(spec.layer_kinds)) == {"sliding": 29, "full": 5}
    assert spec.sliding_window == 1024 and spec.max_position_embeddings == 131072
    assert kv_cache.kv_bytes_per_token(spec, spec.dtype) == 139_264
    assert "gemma3 > gemma3_text" in spec.source


def test_qwen3_next_linear_attention():
    # Qwen/Qwen3-Next-80B-A3B-Instruct: 48 layers, full_attention_interval 4 -> 12 full + 36
    # linear; full: 16 heads, 2 KV x 256: 2 x 12 x 2 x 256 x 2 = 24,576 B/token. Gated DeltaNet
    # state per layer: conv (2 x 16 x 128 + 32 x 128) x (4 - 1) = 24,576 + recurrent
    # 32 x 128 x 128 = 524,288 -> 548,864 values; x 36 layers x 2 B = 39,518,208 B per sequence.
    cfg = {
        "model_type": "qwen3_next",
        "hidden_size": 2048,
        "num_hidden_layers": 48,
        "num_attention_heads": 16,
        "num_key_value_heads": 2,
        "head_dim": 256,
        "full_attention_interval": 4,
        "linear_num_key_heads": 16,
        "linear_num_value_heads": 32,
        "linear_key_head_dim": 128,
        "linear_value_head_dim": 128,
        "linear_conv_kernel_dim": 4,
        "num_experts": 512,
        "num_experts_per_tok": 10,
        "moe_intermediate_size": 512,
        "shared_expert_intermediate_size": 512,
        "max_position_embeddings": 262144,
        "torch_dtype": "bfloat16",
    }
    spec = model_from_hf_config(cfg)
    assert spec.layer_pattern == ["linear", "linear", "linear", "full"]
    assert kv_cache.kv_bytes_per_token(spec, "bf16") == 24_576
    assert kv_cache.state_bytes_per_seq(spec) == 39_518_208
    # an explicit layer_types list wins over the interval
    lt = ["full_attention"] + ["linear_attention"] * 47
    assert Counter(model_from_hf_config({**cfg, "layer_types": lt}).layer_kinds) == {"full": 1, "linear": 47}


def test_kimi_k2_is_mla_and_moe():
    # moonshotai/Kimi-K2-Instruct (DeepSeek-V3 shape): 61 x (512 + 64) x 2 = 70,272 B/token;
    # num_key_value_heads 64 is ignored; 1 shared expert x 2048
    cfg = {
        "model_type": "kimi_k2",
        "hidden_size": 7168,
        "num_hidden_layers": 61,
        "num_attention_heads": 64,
        "num_key_value_heads": 64,
        "q_lora_rank": 1536,
        "kv_lora_rank": 512,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "v_head_dim": 128,
        "n_routed_experts": 384,
        "num_experts_per_tok": 8,
        "n_shared_experts": 1,
        "moe_intermediate_size": 2048,
        "first_k_dense_replace": 1,
        "torch_dtype": "bfloat16",
    }
    spec = model_from_hf_config(cfg)
    assert spec.attention == "mla" and spec.n_kv_heads is None
    assert kv_cache.kv_bytes_per_token(spec, "bf16") == 70_272
    assert (spec.n_experts, spec.shared_expert_intermediate_size, spec.first_dense_layers) == (384, 2048, 1)


@pytest.mark.parametrize(
    "file,fields",
    [
        (
            "gpt2.json",
            {
                "mlp_kind": "plain",
                "tie_word_embeddings": True,
                "intermediate_size": 3072,
                "max_position_embeddings": 1024,
                "attention_bias": True,
            },
        ),
        (
            "falcon-7b.json",
            {
                "mlp_kind": "plain",
                "tie_word_embeddings": True,
                "intermediate_size": 4 * 4544,
                "max_position_embeddings": 2048,
            },
        ),
        ("Qwen3-4B.json", {"mlp_kind": "gated", "tie_word_embeddings": True, "attention_bias": False}),
        ("Llama-3.1-8B.json", {"tie_word_embeddings": False, "intermediate_size": 14336}),
        ("gemma-2-9b-it.json", {"tie_word_embeddings": True}),  # Gemma2Config default, absent from the file
        (
            "Mixtral-8x7B-v0.1.json",
            {"n_experts": 8, "n_experts_per_token": 2, "moe_intermediate_size": 14336, "intermediate_size": None},
        ),
        ("gpt-oss-20b.json", {"n_experts": 32, "n_experts_per_token": 4, "attention_bias": True}),
        ("DeepSeek-V2-Lite-Chat.json", {"v_head_dim": 128, "qk_nope_head_dim": 128, "q_lora_rank": None}),
    ],
)
def test_weight_fields(file, fields):
    spec = load(file)
    assert {k: getattr(spec, k) for k in fields} == fields


def test_name_from_name_or_path_else_folder():
    cfg = json.loads((HF / "Llama-3.1-8B.json").read_text())
    assert (
        model_from_hf_config({**cfg, "_name_or_path": "/models/Meta-Llama-3.1-8B/"}, "a/b.json").name
        == "meta-llama-3.1-8b"
    )
    assert model_from_hf_config(cfg, "/x/My-Model/config.json").name == "my-model"
    assert model_from_hf_config(cfg, "/x/My-Model.json").name == "my-model"


# ----- unknown types, missing fields, unsizable features ------------------------------------

PLAIN = {
    "model_type": "olmo",
    "hidden_size": 4096,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "torch_dtype": "float32",
}


def test_unknown_model_type_is_refused_without_the_users_say_so():
    # every field of PLAIN that shapes the cache is one a plain decoder reads: still a guess
    with pytest.raises(
        ConfigError,
        match="olmo.json: field 'model_type': model_type 'olmo' is not one kvcalc maps; "
        "every field of it that shapes the cache is one a plain decoder reads.*"
        "pass --trust-plain-decoder to accept it",
    ):
        model_from_hf_config(PLAIN, "olmo.json")


def test_unknown_model_type_maps_as_plain_decoder_when_trusted():
    with pytest.warns(
        KvcalcWarning, match="model_type 'olmo' has no kvcalc mapping.*a guess, accepted by --trust-plain-decoder"
    ):
        spec = model_from_hf_config(PLAIN, "olmo.json", trust_plain_decoder=True)
    # 2 x 32 x 32 x 128 x 4 (fp32) = 1,048,576
    assert kv_cache.kv_bytes_per_token(spec, spec.dtype) == 1_048_576
    assert spec.source.endswith("; read as a plain decoder: a guess, --trust-plain-decoder)")


def test_unknown_model_type_with_an_unconsumed_kv_field_is_refused_even_when_trusted():
    # Gemma-4's global_head_dim (its global layers' head size) under a model_type kvcalc does not map:
    # a plain decoder would size every layer with head_dim, so no flag lets it through
    cfg = {**PLAIN, "global_head_dim": 512}
    for trust in (False, True):
        with pytest.raises(
            ConfigError,
            match="odd.json: model_type 'olmo' is not one kvcalc maps, and its "
            "global_head_dim cannot be sized without a mapping",
        ):
            model_from_hf_config(cfg, "odd.json", trust_plain_decoder=trust)


@pytest.mark.parametrize(
    "extra,named",
    [
        ({"kv_lora_rank": 512}, "kv_lora_rank"),
        ({"sliding_window": 4096}, "sliding_window"),
        ({"attn_layer_period": 8}, "attn_layer_period"),
    ],
)
def test_unknown_model_type_with_unsizable_feature_fails(extra, named):
    with pytest.raises(ConfigError, match=named) as e:
        model_from_hf_config({**PLAIN, **extra}, "odd.json")
    assert str(e.value).startswith("odd.json: ")


def test_unknown_model_type_missing_fields_fails():
    cfg = {k: v for k, v in PLAIN.items() if k not in ("num_attention_heads", "hidden_size")}
    with pytest.raises(
        ConfigError, match="odd.json: model_type 'olmo' needs num_attention_heads, hidden_size or head_dim"
    ):
        model_from_hf_config(cfg, "odd.json", trust_plain_decoder=True)


def test_unknown_layer_kind_fails():
    cfg = {**json.loads((HF / "gpt-oss-20b.json").read_text())}
    cfg["layer_types"] = ["chunked_attention"] * 24
    with pytest.raises(ConfigError, match="layer_types.*chunked_attention"):
        model_from_hf_config(cfg, "x.json")


@pytest.mark.parametrize("drop", ["num_hidden_layers", "num_attention_heads"])
def test_missing_field_named(drop):
    cfg = json.loads((HF / "Llama-3.1-8B.json").read_text())
    del cfg[drop]
    with pytest.raises(ConfigError, match=f"x.json: .*needs {drop}"):
        model_from_hf_config(cfg, "x.json")


def test_cli_missing_num_hidden_layers_exit_2(tmp_path):
    cfg = json.loads((HF / "Qwen3-4B.json").read_text())
    del cfg["num_hidden_layers"]
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    r = runner.invoke(app, ["estimate", str(p), "--seq-len", "1k"])
    assert r.exit_code == 2
    assert "error:" in r.stderr and str(p) in r.stderr and "num_hidden_layers" in r.stderr
    assert "Traceback" not in r.output


def test_cli_unknown_type_prints_yellow_warning(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(PLAIN))
    r = runner.invoke(app, ["estimate", str(p), "--seq-len", "1", "--format", "json"])
    assert r.exit_code == 2 and "pass --trust-plain-decoder to accept it" in r.stderr
    r = runner.invoke(app, ["estimate", str(p), "--seq-len", "1", "--format", "json", "--trust-plain-decoder"])
    assert r.exit_code == 0, r.output
    assert [ln for ln in r.stderr.splitlines() if ln.startswith("warning:")][0].startswith(
        "warning: " + str(p) + ": model_type 'olmo'"
    )
    assert json.loads(r.stdout)["kv_bytes_per_token"] == 1_048_576


def test_cli_estimate_qwen3_json():
    r = runner.invoke(app, ["estimate", str(HF / "Qwen3-4B.json"), "--format", "json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    # default seq_len = max_position_embeddings 40960: 147,456 x 40,960 = 6,039,797,760
    assert (d["head_dim"], d["n_kv_heads"], d["seq_len"]) == (128, 8, 40960)
    assert d["kv_bytes_per_token"] == 147_456
    assert d["kv_cache_bytes"] == 6_039_797_760
    assert d["model"] == "qwen3-4b"


# ----- kvcalc import ---------------------------------------------------------------------


@pytest.mark.parametrize("file", ["gemma-3-1b-it.json", "DeepSeek-V2-Lite-Chat.json", "AI21-Jamba-1.5-Mini.json"])
def test_cli_import_round_trip(file, tmp_path):
    out = tmp_path / "m.yaml"
    r = runner.invoke(app, ["import", str(HF / file), "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert r.stdout == ""
    assert f"wrote {out}" in r.stderr
    assert load_model(out).model_dump() == load(file).model_dump()
    assert [p.name for p in tmp_path.iterdir()] == ["m.yaml"]  # no temporary file left
    # to stdout without -o: the same text
    r2 = runner.invoke(app, ["import", str(HF / file)])
    assert r2.exit_code == 0 and r2.stdout.rstrip("\n") == out.read_text().rstrip("\n")


def test_cli_import_failed_write_leaves_no_file(tmp_path, monkeypatch):
    out = tmp_path / "m.yaml"
    out.write_text("old\n")

    def boom(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", boom)
    # --force: without it the existing file is refused before any write (tests/bad_input/test_writers.py)
    r = runner.invoke(app, ["import", str(HF / "gpt2.json"), "-o", str(out), "--force"])
    assert r.exit_code == 2 and "No space left on device" in r.stderr
    assert out.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["m.yaml"]


def test_cli_import_missing_folder(tmp_path):
    r = runner.invoke(app, ["import", str(HF / "gpt2.json"), "-o", str(tmp_path / "no" / "m.yaml")])
    assert r.exit_code == 2 and "does not exist" in r.stderr


# ----- bundled configs agree with the published config.json ---------------------------------

BUNDLED = {
    "Llama-3.1-8B.json": "llama-3.1-8b",
    "Llama-2-7b-hf.json": "llama-2-7b",
    "Qwen3-4B.json": "qwen3-4b",
    "gemma-2-9b-it.json": "gemma-2-9b",
    "DeepSeek-V2-Lite-Chat.json": "deepseek-v2-lite",
    "gpt-oss-20b.json": "gpt-oss-20b",
    "AI21-Jamba-1.5-Mini.json": "jamba-1.5-mini",
    "Mistral-7B-v0.1.json": "mistral-7b-v0.1",
    "Mixtral-8x7B-v0.1.json": "mixtral-8x7b",
    "falcon-7b.json": "falcon-7b",
    "gpt2.json": "gpt2",
    "gemma-3-1b-it.json": "gemma-3-1b",
}


@pytest.mark.parametrize("file,name", BUNDLED.items(), ids=list(BUNDLED))
def test_bundled_matches_fixture(file, name):
    if name not in bundled("models"):
        pytest.skip(f"bundled config {name}.yaml does not exist (yet) in configs/models/")
    ours, theirs = load_model(name), load(file)
    assert ours.layer_kinds == theirs.layer_kinds
    assert ours.sliding_window == theirs.sliding_window
    assert ours.dtype == theirs.dtype
    for dt in ("bf16", "fp8"):
        assert kv_cache.kv_bytes_per_token(ours, dt) == kv_cache.kv_bytes_per_token(theirs, dt)
    assert kv_cache.state_bytes_per_seq(ours) == kv_cache.state_bytes_per_seq(theirs)


# ----- issue 3 (new-user tester): KV layout rules, refusals, strict types ----------------------

# tiiuae/falcon-40b config.json (old format, model_type RefinedWeb): no multi_query key, n_head_kv 8.
FALCON_40B = {
    "model_type": "RefinedWeb",
    "hidden_size": 8192,
    "n_layer": 60,
    "n_head": 128,
    "n_head_kv": 8,
    "parallel_attn": True,
    "bias": False,
    "alibi": False,
    "torch_dtype": "bfloat16",
}
# tiiuae/falcon-7b before its transformers port (RefinedWebModel): multi_query, no n_head_kv.
FALCON_7B_RW = {
    "model_type": "RefinedWebModel",
    "hidden_size": 4544,
    "n_layer": 32,
    "n_head": 71,
    "multi_query": True,
    "parallel_attn": True,
    "bias": False,
    "torch_dtype": "bfloat16",
}


@pytest.mark.parametrize(
    "cfg,kv_heads,per_token",
    [
        # vLLM RWConfig "Hack for falcon-40b" / falcon-40b's modelling_RW.py: n_head_kv present -> new
        # decoder architecture, multi_query ignored; 8192 / 128 = 64: 2 x 60 x 8 x 64 x 2 = 122,880
        (FALCON_40B, 8, 122_880),
        # no n_head_kv, hidden 4544: multi_query -> 1 KV head; 4544 / 71 = 64: 2 x 32 x 1 x 64 x 2 = 8,192
        (FALCON_7B_RW, 1, 8_192),
        # the same with multi_query false -> MHA: 2 x 32 x 71 x 64 x 2 = 581,632
        ({**FALCON_7B_RW, "multi_query": False}, 71, 581_632),
    ],
    ids=["falcon-40b-RefinedWeb", "falcon-7b-RefinedWebModel", "RefinedWebModel-mha"],
)
def test_falcon_old_format_kv_heads(cfg, kv_heads, per_token):
    spec = model_from_hf_config(cfg, "config.json")
    assert spec.resolved_n_kv_heads == kv_heads
    assert kv_cache.kv_bytes_per_token(spec, spec.dtype) == per_token


# bigcode/starcoder config.json (shape): gpt_bigcode, multi_query, fp32 (no dtype field)
STARCODER = {
    "model_type": "gpt_bigcode",
    "multi_query": True,
    "n_head": 48,
    "n_embd": 6144,
    "n_layer": 40,
    "n_positions": 8192,
    "n_inner": 24576,
    "vocab_size": 49152,
    "torch_dtype": "float32",
}
# THUDM/chatglm2-6b config.json (shape)
CHATGLM2 = {
    "model_type": "chatglm",
    "num_layers": 28,
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "kv_channels": 128,
    "multi_query_attention": True,
    "multi_query_group_num": 2,
    "seq_length": 32768,
    "padded_vocab_size": 65024,
    "ffn_hidden_size": 13696,
    "add_qkv_bias": True,
    "torch_dtype": "float16",
}
# mosaicml/mpt-7b config.json (shape): n_layers at the top level, MHA
MPT_7B = {
    "model_type": "mpt",
    "d_model": 4096,
    "n_heads": 32,
    "n_layers": 32,
    "max_seq_len": 2048,
    "expansion_ratio": 4,
    "vocab_size": 50432,
    "no_bias": True,
    "attn_config": {"alibi": True, "attn_type": "multihead_attention", "attn_impl": "torch"},
    "torch_dtype": "bfloat16",
}
# databricks/dbrx-instruct config.json (shape)
DBRX = {
    "model_type": "dbrx",
    "d_model": 6144,
    "n_heads": 48,
    "n_layers": 40,
    "max_seq_len": 32768,
    "vocab_size": 100352,
    "attn_config": {"clip_qkv": 8, "kv_n_heads": 8, "rope_theta": 500000},
    "ffn_config": {"ffn_hidden_size": 10752, "moe_num_experts": 16, "moe_top_k": 4},
    "torch_dtype": "bfloat16",
}


@pytest.mark.parametrize(
    "cfg,dtype,kv_heads,head_dim,per_token",
    [
        # GPTBigCodeAttention: kv_heads = 1 if multi_query; 6144 / 48 = 128: 2 x 40 x 1 x 128 x 4 = 40,960
        (STARCODER, "fp32", 1, 128, 40_960),
        # ChatGLM SelfAttention: multi_query_group_num KV heads of kv_channels: 2 x 28 x 2 x 128 x 2 = 28,672
        (CHATGLM2, "fp16", 2, 128, 28_672),
        # MptAttention is multi-head, 4096 / 32 = 128: 2 x 32 x 32 x 128 x 2 = 524,288
        (MPT_7B, "bf16", 32, 128, 524_288),
        # DbrxAttentionConfig kv_n_heads 8, 6144 / 48 = 128: 2 x 40 x 8 x 128 x 2 = 163,840
        (DBRX, "bf16", 8, 128, 163_840),
    ],
    ids=["starcoder", "chatglm2-6b", "mpt-7b", "dbrx-instruct"],
)
def test_newly_mapped_families(cfg, dtype, kv_heads, head_dim, per_token):
    with warnings.catch_warnings():
        warnings.simplefilter("error", KvcalcWarning)  # a real mapping, not the generic fallback
        spec = model_from_hf_config(cfg, "config.json")
    assert (spec.dtype, spec.resolved_n_kv_heads, spec.resolved_head_dim) == (dtype, kv_heads, head_dim)
    assert kv_cache.kv_bytes_per_token(spec, spec.dtype) == per_token


def test_family_defaults_and_details():
    # GPTBigCodeConfig: multi_query defaults to true; false -> 48 KV heads
    assert model_from_hf_config({k: v for k, v in STARCODER.items() if k != "multi_query"}).resolved_n_kv_heads == 1
    assert model_from_hf_config({**STARCODER, "multi_query": False}).resolved_n_kv_heads == 48
    assert model_from_hf_config({k: v for k, v in STARCODER.items() if k != "torch_dtype"}).dtype == "fp32"
    # ChatGLM: seq_length is the context; multi_query_attention false without a group number -> MHA
    glm = model_from_hf_config(CHATGLM2)
    assert (glm.max_position_embeddings, glm.vocab_size, glm.attention_bias) == (32768, 65024, True)
    mha = {k: v for k, v in CHATGLM2.items() if k != "multi_query_group_num"}
    assert model_from_hf_config({**mha, "multi_query_attention": False}).resolved_n_kv_heads == 32
    # DBRX: kv_n_heads defaults to 1 (DbrxAttentionConfig); experts from ffn_config
    d = model_from_hf_config({**DBRX, "attn_config": {}})
    assert d.resolved_n_kv_heads == 1
    assert (d.n_experts, d.n_experts_per_token, d.moe_intermediate_size) == (16, 4, 10752)
    # MPT grouped-query attention: attn_config.kv_n_heads
    gqa = {**MPT_7B, "attn_config": {"attn_type": "grouped_query_attention", "kv_n_heads": 8}}
    assert model_from_hf_config(gqa).resolved_n_kv_heads == 8


@pytest.mark.parametrize(
    "cfg,field",
    [
        # model code: MHA; vLLM get_total_num_kv_heads: 2 -> refused, naming the switch
        ({**CHATGLM2, "multi_query_attention": False}, "multi_query_attention"),
        ({k: v for k, v in CHATGLM2.items() if k != "multi_query_attention"}, "multi_query_attention"),
        # llm-foundry: 1 KV head; transformers / vLLM: 32
        ({**MPT_7B, "attn_config": {"attn_type": "multiquery_attention"}}, "attn_config.attn_type"),
        ({**MPT_7B, "attn_config": {"attn_type": "multihead_attention", "kv_n_heads": 8}}, "attn_config.kv_n_heads"),
        ({**MPT_7B, "attn_config": {"sliding_window_size": 4096}}, "attn_config.sliding_window_size"),
        (
            {**MPT_7B, "attn_config": {"kv_n_heads": 8.0, "attn_type": "grouped_query_attention"}},
            "attn_config.kv_n_heads",
        ),
        ({**DBRX, "attn_config": "8"}, "attn_config"),
    ],
)
def test_family_contradictions_refused(cfg, field):
    with pytest.raises(ConfigError, match=f"^x.json: field '{field}': "):
        model_from_hf_config(cfg, "x.json")


@pytest.mark.parametrize(
    "extra",
    [
        {"multi_query": True},
        {"multi_query_group_num": 2},
        {"multi_query_attention": True},
        {"kv_channels": 128},
        {"n_kv_heads": 8},
        {"kv_n_heads": 8},
        {"num_key_value_groups": 4},
        {"attention_chunk_size": 8192},
        {"cross_attention_layers": [3, 8, 13]},
        {"attn_config": {"kv_n_heads": 8}},
        {"num_kv_shared_layers": 10},
        {"v_head_dim": 128},
    ],
    ids=lambda e: next(iter(e)),
)
def test_generic_fallback_refuses_layout_fields(extra):
    field = next(iter(extra))
    with pytest.raises(ConfigError, match=f"odd.json: model_type 'olmo' is not one kvcalc maps, and its {field}"):
        model_from_hf_config({**PLAIN, **extra}, "odd.json")
    # false / null spell "off" and stay readable
    if extra[field] is True:
        with pytest.warns(KvcalcWarning):
            model_from_hf_config({**PLAIN, field: False}, "odd.json", trust_plain_decoder=True)


def test_mllama_refused_naming_cross_attention_layers():
    # meta-llama/Llama-3.2-11B-Vision config.json (shape): 40 text layers, 8 of them cross-attention
    # layers that cache the image tokens, not the text; a plain-decoder reading would be wrong.
    cfg = {
        "model_type": "mllama",
        "torch_dtype": "bfloat16",
        "text_config": {
            "model_type": "mllama_text_model",
            "hidden_size": 4096,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "num_hidden_layers": 40,
            "cross_attention_layers": [3, 8, 13, 18, 23, 28, 33, 38],
        },
        "vision_config": {"model_type": "mllama_vision_model"},
    }
    with pytest.raises(ConfigError, match="cross_attention_layers \\(those layers cache the image tokens"):
        model_from_hf_config(cfg, "config.json")


LLAMA_MIN = {"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32, "num_hidden_layers": 32}


@pytest.mark.parametrize(
    "text,line",
    [
        ('"num_hidden_layers": 32.0', "field 'num_hidden_layers': must be an integer, got 32.0"),
        ('"num_hidden_layers": NaN', "field 'num_hidden_layers': must be an integer, got NaN"),
        ('"num_hidden_layers": Infinity', "field 'num_hidden_layers': must be an integer, got Infinity"),
        ('"num_hidden_layers": 1e308', "field 'num_hidden_layers': must be an integer, got 1e+308"),
        ('"num_hidden_layers": 1000000000', "field 'num_hidden_layers': is too large (1000000000); at most 100,000"),
        ('"num_hidden_layers": 0', "field 'num_hidden_layers': must be at least 1, got 0"),
        ('"num_key_value_heads": true', "field 'num_key_value_heads': must be an integer, got true"),
        ('"num_key_value_heads": "8"', "field 'num_key_value_heads': must be an integer, got \"8\""),
        ('"head_dim": -128', "field 'head_dim': must be at least 1, got -128"),
        ('"vocab_size": 0', "field 'vocab_size': must be at least 1, got 0"),
        ('"tie_word_embeddings": "false"', "field 'tie_word_embeddings': must be true or false, got \"false\""),
        ('"torch_dtype": 5', "field 'torch_dtype': must be a dtype name such as \"bfloat16\", got 5"),
        ('"text_config": [1]', "field 'text_config': must be a JSON object (the text model's config), got [1]"),
        ('"model_type": 7', "field 'model_type': must be a string such as \"llama\", got 7"),
    ],
)
def test_cli_bad_value_is_one_line_naming_file_and_field(tmp_path, text, line):
    key = text.split('"')[1]
    base = json.dumps({k: v for k, v in LLAMA_MIN.items() if k != key})
    p = tmp_path / "config.json"
    p.write_text(base[:-1] + ", " + text + "}")
    r = runner.invoke(app, ["estimate", str(p), "--seq-len", "1"])
    assert r.exit_code == 2, r.output
    assert r.stderr.strip().splitlines() == [f"error: {p}: {line}"]
    assert "Traceback" not in r.output


@pytest.mark.parametrize(
    "cfg,per_token",
    [
        (MPT_7B, 524_288),  # 2 x 32 x 32 x 128 x 2, as above
        (DBRX, 163_840),  # 2 x 40 x 8 x 128 x 2, as above
    ],
    ids=["mpt", "dbrx"],
)
def test_cli_hf_config_with_n_layers_key(tmp_path, cfg, per_token):
    # MPT / DBRX put n_layers at the top level; with model_type and no name it is an HF config
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    r = runner.invoke(app, ["estimate", str(p), "--seq-len", "1", "--format", "json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["kv_bytes_per_token"] == per_token


def test_cli_import_writes_warnings_into_header(tmp_path):
    src = tmp_path / "config.json"
    src.write_text(json.dumps(PLAIN))
    out = tmp_path / "olmo.yaml"
    r = runner.invoke(app, ["import", str(src), "-o", str(out), "--trust-plain-decoder"])
    assert r.exit_code == 0, r.output
    assert f"warning: {src}: model_type 'olmo' has no kvcalc mapping" in r.stderr  # still shown
    text = out.read_text()
    header = [ln for ln in text.splitlines() if ln.startswith("#")]
    assert header[0].startswith("# Converted by `kvcalc import`")
    assert header[2].startswith(f"# warning: {src}: model_type 'olmo' has no kvcalc mapping")
    # the file still loads to the same numbers: 2 x 32 x 32 x 128 x 4 (fp32) = 1,048,576
    assert kv_cache.kv_bytes_per_token(load_model(out), "fp32") == 1_048_576
    # a mapped family has no warning line
    r2 = runner.invoke(app, ["import", str(HF / "gpt2.json")])
    assert r2.exit_code == 0 and "# warning:" not in r2.stdout
