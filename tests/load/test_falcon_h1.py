"""Falcon-H1: attention AND a Mamba-2 mixer in every layer (kind `hybrid`), from config.json and
from a GGUF file, with exact KV bytes, state bytes and parameters, and the engine profiles'
refusals.

FALCON_H1_7B is tiiuae/Falcon-H1-7B-Instruct's config.json as far as sizing reads it; its shape
agrees with the table of transformers' Falcon-H1 documentation (H1 7B: 44 layers, hidden 3072, 12
attention heads on 2 KV heads, 24 Mamba heads, head dims 128 / 128, d_state 256, 256K context);
mamba_d_ssm 3072 = 24 x 128, one group, conv kernel 4, MLP 12288, vocab 130048, untied,
mamba_rms_norm false, every bias false. H1 34B (same table): 72 layers, 20 heads on 4 KV heads of 128.
"""

from __future__ import annotations

import json

import pytest

from kvcalc.calc.kv_cache import estimate, kv_bytes_per_token, state_bytes_per_seq
from kvcalc.calc.weights import layer_params, param_counts
from kvcalc.errors import ConfigError, KvcalcError
from kvcalc.formats import kv_format
from kvcalc.load.hf import model_from_hf_config
from kvcalc.schema import ModelSpec, Workload
from tests.published_configs import FALCON_H1_7B

#: H1 34B's attention shape (transformers' table): 72 layers, 20 heads on 4 KV heads of 128
FALCON_H1_34B = dict(
    FALCON_H1_7B,
    hidden_size=5120,
    num_hidden_layers=72,
    num_attention_heads=20,
    num_key_value_heads=4,
    mamba_n_heads=32,
    mamba_d_ssm=4096,
)

BF16 = kv_format("bf16")


def h1_7b() -> ModelSpec:
    return model_from_hf_config(FALCON_H1_7B, "Falcon-H1-7B-Instruct/config.json")


def test_every_layer_is_hybrid():
    m = h1_7b()
    assert m.layer_kinds == ["hybrid"] * 44
    layer = m.layers[0]
    assert layer.caches_kv and layer.keeps_state
    assert (layer.n_kv_heads, layer.head_dim_k, layer.head_dim_v) == (2, 128, 128)
    assert (m.mamba_n_heads, m.mamba_head_dim, m.mamba_n_groups, m.mamba_d_state, m.mamba_d_conv) == (
        24,
        128,
        1,
        256,
        4,
    )
    assert m.mamba_norm is False


def test_kv_cache_of_every_layer():
    m = h1_7b()
    # 2 (K and V) x 44 layers x 2 KV heads x 128 x 2 B = 45,056 B per token
    assert kv_bytes_per_token(m, "bf16") == 45_056
    e = estimate(m, Workload(seq_len=32768, batch=4, k_dtype="bf16", v_dtype="bf16"))
    # 45,056 x 32,768 tokens x 4 sequences = 5,905,580,032 B
    assert e.kv_cache_bytes == 5_905_580_032
    assert e.formula == ("2 x 44 layers x 2 KV heads x 128 head_dim x 32,768 tokens x 4 batch x 2 B = 5,905,580,032 B")
    assert [b.kind for b in e.breakdown] == ["hybrid"]


def test_mamba2_state_of_every_layer():
    m = h1_7b()
    # per layer: conv (d_conv 4 - 1) x (d_inner 3,072 + 2 x 1 group x 256) = 3 x 3,584 = 10,752 values;
    # SSM 24 heads x 128 x 256 = 786,432 values -> 797,184 values x 2 B (bf16) = 1,594,368 B;
    # x 44 layers = 70,152,192 B per sequence
    assert m.layers[0].state_values == 797_184
    assert state_bytes_per_seq(m) == 70_152_192
    e = estimate(m, Workload(seq_len=1024, batch=4, k_dtype="bf16", v_dtype="bf16"))
    assert e.state_bytes == 4 * 70_152_192


def test_34b_kv_and_state():
    m = model_from_hf_config(FALCON_H1_34B, "Falcon-H1-34B-Instruct/config.json")
    # 2 x 72 x 4 KV heads x 128 x 2 B = 147,456 B per token
    assert kv_bytes_per_token(m, "bf16") == 147_456
    # conv 3 x (4,096 + 512) = 13,824; SSM 32 x 128 x 256 = 1,048,576 -> 1,062,400 values x 2 B x 72 layers
    assert state_bytes_per_seq(m) == 1_062_400 * 2 * 72 == 152_985_600


def test_parameters_layer_by_layer():
    m = h1_7b()
    p = layer_params(m, 0)
    # attention: q 3,072 x 12 x 128 = 4,718,592, k and v 2 x 3,072 x 2 x 128 = 1,572,864, o 1,536 x 3,072 =
    # 4,718,592 -> 11,010,048; Mamba-2: in_proj 3,072 x (2 x 3,072 + 2 x 1 x 256 + 24) = 3,072 x 6,680 =
    # 20,520,960, out_proj 3,072 x 3,072 = 9,437,184; gated MLP 3 x 3,072 x 12,288 = 113,246,208
    assert p.linear == 11_010_048 + 20_520_960 + 9_437_184 + 113_246_208 == 154_214_400
    # conv weight and bias 3,584 x (4 + 1) = 17,920; dt_bias, A_log, D 3 x 24 = 72; no gated norm
    # (mamba_rms_norm false); input_layernorm and pre_ff_layernorm 2 x 3,072 = 6,144
    assert p.other == 17_920 + 72 + 6_144 == 24_136


def test_total_parameters():
    # 44 x 154,238,536 + embeddings and untied head 2 x 130,048 x 3,072 + final norm 3,072
    total = 44 * (154_214_400 + 24_136) + 2 * 130_048 * 3_072 + 3_072
    assert param_counts(h1_7b()) == (total, total) == (7_585_513_568, 7_585_513_568)
    # with the gated norm (mamba_rms_norm true): 3,072 more per layer
    normed = model_from_hf_config(dict(FALCON_H1_7B, mamba_rms_norm=True), "c/config.json")
    assert param_counts(normed)[0] == total + 44 * 3_072


def test_defaults_follow_falcon_h1_config():
    # FalconH1Config: mamba_d_head "auto" = d_ssm // heads; num_key_value_heads null -> the query heads
    d = {k: v for k, v in FALCON_H1_7B.items() if k != "mamba_d_head"}
    assert model_from_hf_config(d, "c/config.json").mamba_head_dim == 128
    m = model_from_hf_config(dict(FALCON_H1_7B, num_key_value_heads=None), "c/config.json")
    assert m.resolved_n_kv_heads == 12
    # mamba_d_ssm null: mamba_expand x hidden = 6,144 = 24 x 256
    m = model_from_hf_config(dict(FALCON_H1_7B, mamba_d_ssm=None, mamba_d_head="auto"), "c/config.json")
    assert m.mamba_head_dim == 256


def test_heads_that_do_not_fill_the_mixer_are_refused():
    with pytest.raises(ConfigError) as e:
        model_from_hf_config(dict(FALCON_H1_7B, mamba_d_head=64), "Falcon-H1/config.json")
    assert e.value.field == "mamba_d_head" and "24 x 64 = 1,536" in str(e.value) and "3,072" in str(e.value)


def test_attention_on_some_layers_only_is_refused():
    with pytest.raises(ConfigError) as e:
        model_from_hf_config(dict(FALCON_H1_7B, attn_layer_indices=[0, 4]), "Falcon-H1/config.json")
    assert e.value.field == "attn_layer_indices"


@pytest.mark.parametrize("engine, name", [("vllm", "vLLM"), ("sglang", "SGLang")])
def test_engine_profiles_refuse_rather_than_drop_the_state(engine, name):
    # llama.cpp sizes both parts (tests/engines/test_llamacpp_mamba2_hybrids.py)
    from kvcalc.engines.profile import get_profile

    m = h1_7b()
    with pytest.raises(KvcalcError) as e:
        get_profile(engine).capacity(m, 20 * 2**30, BF16, BF16, max_model_len=32768)
    assert e.value.field == "model"
    assert e.value.reason == (
        f"{m.name} runs attention and a Mamba-2 mixer side by side in every layer; the {name} "
        "profile does not yet size the state those layers keep beside their KV cache"
    )
    assert e.value.fix == "use --engine ideal"


def test_cli_estimate(cli, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(FALCON_H1_7B))
    r = cli("estimate", str(tmp_path / "config.json"), "-s", "32k", "-f", "json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert (d["kv_bytes_per_token"], d["kv_cache_bytes"], d["state_bytes"]) == (45_056, 1_476_395_008, 70_152_192)
    r = cli("capacity", str(tmp_path / "config.json"), "--engine", "vllm", "--kv-memory", "20GiB")
    assert r.exit_code == 2 and "side by side in every layer" in r.stderr and len(r.stderr.splitlines()) == 1


def test_yaml_layer_kind_hybrid():
    m = ModelSpec(
        name="h",
        n_layers=4,
        n_heads=8,
        n_kv_heads=2,
        head_dim=64,
        layer_pattern=["hybrid"],
        mamba_n_groups=1,
        mamba_n_heads=8,
        mamba_head_dim=32,
        mamba_d_state=16,
        mamba_d_conv=4,
    )
    # KV: 2 x 4 x 2 x 64 x 2 B = 2,048 B per token; state: 3 x (256 + 32) + 8 x 32 x 16 = 864 + 4,096 = 4,960
    # values x 2 B x 4 layers = 39,680 B
    assert (kv_bytes_per_token(m, "bf16"), state_bytes_per_seq(m)) == (2_048, 39_680)


# ----- the GGUF path -------------------------------------------------------------------------


def test_gguf_gives_the_same_spec(tmp_path):
    from gguf_files import write_gguf

    from kvcalc.load.gguf import model_from_gguf

    kv = {
        "block_count": 44,
        "context_length": 262144,
        "embedding_length": 3072,
        "feed_forward_length": 12288,
        "attention.head_count": 12,
        "attention.head_count_kv": 2,
        "attention.key_length": 128,
        "attention.value_length": 128,
        "ssm.conv_kernel": 4,
        "ssm.inner_size": 3072,
        "ssm.state_size": 256,
        "ssm.time_step_rank": 24,
        "ssm.group_count": 1,
        "vocab_size": 130048,
        "general.file_type": 32,
    }
    tensors = [(f"blk.{i}.attn_norm.weight", "F32", (32,)) for i in range(44)]
    g = model_from_gguf(write_gguf(tmp_path / "Falcon-H1-7B-Instruct-BF16.gguf", "falcon-h1", kv, tensors))
    h = h1_7b()
    assert g.layer_kinds == h.layer_kinds == ["hybrid"] * 44
    for f in (
        "n_layers",
        "n_heads",
        "resolved_n_kv_heads",
        "resolved_head_dim",
        "mamba_n_heads",
        "mamba_head_dim",
        "mamba_n_groups",
        "mamba_d_state",
        "mamba_d_conv",
        "mamba_norm",
        "max_position_embeddings",
    ):
        assert getattr(g, f) == getattr(h, f), f
    assert (kv_bytes_per_token(g, "bf16"), state_bytes_per_seq(g)) == (45_056, 70_152_192)
    # a file with the gated norm tensor sizes it
    tensors.append(("blk.0.ssm_norm.weight", "F32", (3072,)))
    assert model_from_gguf(write_gguf(tmp_path / "n.gguf", "falcon-h1", kv, tensors)).mamba_norm is True


def test_gguf_mixer_heads_must_divide(tmp_path):
    from gguf_files import write_gguf

    from kvcalc.load.gguf import model_from_gguf

    kv = {
        "block_count": 2,
        "embedding_length": 64,
        "attention.head_count": 4,
        "attention.head_count_kv": 2,
        "ssm.conv_kernel": 4,
        "ssm.inner_size": 100,
        "ssm.state_size": 16,
        "ssm.time_step_rank": 3,
        "ssm.group_count": 1,
    }
    with pytest.raises(ConfigError) as e:
        model_from_gguf(
            write_gguf(
                tmp_path / "x.gguf",
                "falcon-h1",
                kv,
                [("blk.0.attn_norm.weight", "F32", (32,)), ("blk.1.attn_norm.weight", "F32", (32,))],
            )
        )
    assert e.value.field == "falcon-h1.ssm.time_step_rank"


def test_bundled_copy_matches_the_config():
    from kvcalc.load.models import load_model

    b, h = load_model("falcon-h1-7b"), h1_7b()
    assert b.source.startswith("tiiuae/Falcon-H1-7B-Instruct config.json")
    assert (
        (kv_bytes_per_token(b, "bf16"), state_bytes_per_seq(b), param_counts(b))
        == (kv_bytes_per_token(h, "bf16"), state_bytes_per_seq(h), param_counts(h))
        == (45_056, 70_152_192, (7_585_513_568,) * 2)
    )
