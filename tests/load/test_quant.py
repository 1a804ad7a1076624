"""A checkpoint's `quantization_config` sets the weight formats of the memory plan
(`kvcalc.load.hf.quant`). Configs: Meta-Llama-3.1-8B's published config.json
(tests/data/hf/Llama-3.1-8B.json) with each method's published `quantization_config` added.

Llama-3.1-8B, hand-counted (calc/weights.py module docstring):
- decoder matrices per layer: attention 4096 x 4096 x 2 (q, o) + 4096 x 1024 x 2 (k, v) = 41,943,040,
  MLP 3 x 4096 x 14336 = 176,160,768: 218,103,808 values; x 32 layers = 6,979,321,856 values;
- in bf16 always: embeddings and untied head 2 x 128,256 x 4096 x 2 B = 2,101,346,304 B, layer norms
  32 x 2 x 4096 x 2 B = 524,288 B, final norm 4096 x 2 B = 8,192 B: 2,101,878,784 B.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvcalc.calc.weights import weight_bytes, weight_format_label
from kvcalc.errors import ConfigError, KvcalcWarning
from kvcalc.formats import weight_format
from kvcalc.load.hf import model_from_hf_config
from kvcalc.load.hf.quant import matches

DATA = Path(__file__).parents[1] / "data" / "hf"
LLAMA = json.loads((DATA / "Llama-3.1-8B.json").read_text())
LINEAR = 6_979_321_856  # decoder matrix values (module docstring)
BF16_REST = 2_101_878_784  # embeddings + head + norms, bf16 bytes


def llama(quant: dict | None) -> object:
    data = dict(LLAMA)
    if quant is not None:
        data["quantization_config"] = quant
    return model_from_hf_config(data, path="Llama-3.1-8B/config.json")


def test_unquantized_is_the_16_06_gb_of_bf16():
    # 2 x 8,030,261,248 parameters = 16,060,522,496 B
    assert weight_bytes(llama(None)).total_bytes == 16_060_522_496 == 2 * LINEAR + BF16_REST


def test_fp8_per_tensor_is_no_longer_bf16():
    m = llama({"quant_method": "fp8", "activation_scheme": "dynamic"})
    assert m.weight_dtype == "fp8_e4m3"
    # 6,979,321,856 x 1 B + 2,101,878,784 B = 9,081,200,640 B (9.08 GB, not 16.06)
    assert weight_bytes(m).total_bytes == 9_081_200_640 == LINEAR + BF16_REST
    assert weight_format_label(m) == "fp8_e4m3"


def test_fp8_block_scales():
    # DeepSeek-V3 / Qwen3-FP8: weight_block_size [128, 128], one fp32 scale per 128 x 128 block
    m = llama({"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic", "weight_block_size": [128, 128]})
    assert m.weight_dtype == "fp8_e4m3:b128:fp32"
    # 6,979,321,856 / 16,384 = 425,984 blocks x (16,384 + 4) B = 6,981,025,792 B
    assert weight_bytes(m).total_bytes == 6_981_025_792 + BF16_REST


@pytest.mark.parametrize(
    "quant",
    [
        {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"},
        {"quant_method": "awq", "w_bit": 4, "q_group_size": 128, "zero_point": True},
        {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False, "sym": True},
    ],
)
def test_awq_and_gptq_int4_with_scales_and_zero_points(quant):
    m = llama(quant)
    assert m.weight_dtype == "int4:g128:fp16:zp"
    # per 128 values: 64 B packed + 2 B fp16 scale + 0.5 B packed zero point = 66.5 B
    # 6,979,321,856 / 256 x 133 = 3,625,975,808 B
    assert weight_bytes(m).total_bytes == 3_625_975_808 + BF16_REST


def test_compressed_tensors_int4_group():
    # RedHatAI w4a16: pack-quantized int4, group 128, symmetric, lm_head ignored
    m = llama(
        {
            "quant_method": "compressed-tensors",
            "format": "pack-quantized",
            "ignore": ["lm_head"],
            "config_groups": {
                "group_0": {
                    "targets": ["Linear"],
                    "weights": {
                        "num_bits": 4,
                        "type": "int",
                        "strategy": "group",
                        "group_size": 128,
                        "symmetric": True,
                    },
                }
            },
        }
    )
    assert m.weight_dtype == "int4:g128:bf16"
    # per 128 values 64 B + 2 B bf16 scale: 6,979,321,856 / 128 x 66 = 3,598,712,832 B
    assert weight_bytes(m).total_bytes == 3_598_712_832 + BF16_REST


def test_compressed_tensors_fp8_channel_is_fp8():
    m = llama(
        {
            "quant_method": "compressed-tensors",
            "format": "float-quantized",
            "ignore": ["lm_head"],
            "config_groups": {
                "group_0": {
                    "targets": ["Linear"],
                    "weights": {"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": True},
                }
            },
        }
    )
    assert m.weight_dtype == "fp8_e4m3"
    assert weight_bytes(m).total_bytes == LINEAR + BF16_REST


@pytest.mark.parametrize(
    "double, fmt, quant_bytes",
    [
        # nf4: 64 values in 32 B + fp32 absmax 4 B: 6,979,321,856 / 64 x 36 = 3,925,868,544
        (False, "nf4", 3_925_868_544),
        # double quant: 16,384 values in 8,192 + 256 + 4 B: 425,984 x 8,452 = 3,600,416,768
        (True, "nf4_dq", 3_600_416_768),
    ],
)
def test_bitsandbytes_4bit(double, fmt, quant_bytes):
    m = llama(
        {
            "quant_method": "bitsandbytes",
            "load_in_4bit": True,
            "bnb_4bit_quant_type": "nf4",
            "bnb_4bit_use_double_quant": double,
            "llm_int8_skip_modules": ["lm_head"],
        }
    )
    assert m.weight_dtype == fmt
    assert weight_bytes(m).total_bytes == quant_bytes + BF16_REST


def test_bitsandbytes_8bit_is_int8():
    m = llama({"quant_method": "bitsandbytes", "load_in_8bit": True})
    assert m.weight_dtype == "int8"


def test_weight_dtype_overrides_the_config():
    m = llama({"quant_method": "fp8"})
    assert weight_bytes(m, "bf16").total_bytes == 16_060_522_496


def test_gpt_oss_mxfp4_experts_only():
    # openai/gpt-oss-20b config.json's quantization_config, as published
    data = json.loads((DATA / "gpt-oss-20b.json").read_text())
    data["quantization_config"] = {
        "quant_method": "mxfp4",
        "modules_to_not_convert": [
            "model.layers.*.self_attn",
            "model.layers.*.mlp.router",
            "model.embed_tokens",
            "lm_head",
        ],
    }
    m = model_from_hf_config(data, path="gpt-oss-20b/config.json")
    assert (m.weight_dtype, m.expert_weight_dtype) == (None, "mxfp4")
    assert weight_format_label(m) == "bf16 + mxfp4 experts"


def test_everything_ignored_leaves_the_decoder_unquantized():
    m = llama({"quant_method": "fp8", "modules_to_not_convert": ["self_attn", "mlp"]})
    assert m.weight_dtype is None
    assert weight_bytes(m).total_bytes == 16_060_522_496


def test_dense_attention_left_out_warns():
    with pytest.warns(KvcalcWarning, match="leaves some decoder matrices unquantized"):
        m = llama({"quant_method": "fp8", "ignored_layers": ["re:.*self_attn.*"]})
    assert m.weight_dtype == "fp8_e4m3"


def test_unknown_method_warns_and_counts_the_dtype():
    with pytest.warns(KvcalcWarning, match="quant_method 'hqq' is not one kvcalc sizes"):
        m = llama({"quant_method": "hqq"})
    assert m.weight_dtype is None


@pytest.mark.parametrize(
    "quant, field",
    [
        ({"bits": 4}, "quantization_config.quant_method"),
        ({"quant_method": "fp8", "weight_block_size": [128]}, "quantization_config.weight_block_size"),
        ({"quant_method": "gptq", "bits": "4"}, "quantization_config.bits"),
        ({"quant_method": "compressed-tensors"}, "quantization_config.config_groups"),
    ],
)
def test_malformed_config_names_the_field(quant, field):
    with pytest.raises(ConfigError) as e:
        llama(quant)
    assert e.value.field == field
    assert str(e.value).startswith(f"Llama-3.1-8B/config.json: field '{field}'")


@pytest.mark.parametrize(
    "pattern, module, hit",
    [
        ("lm_head", "lm_head", True),
        ("self_attn", "model.layers.3.self_attn.q_proj", True),
        ("re:.*self_attn.*", "model.layers.3.self_attn.q_proj", True),
        ("re:.*mlp.gate$", "model.layers.3.mlp.gate_proj", False),
        ("model.layers.*.self_attn", "model.layers.3.self_attn.q_proj", True),
        ("model.layers.*.self_attn", "model.layers.3.mlp.down_proj", False),
        ("re:[", "x", False),
    ],
)
def test_patterns(pattern, module, hit):
    assert matches(pattern, module) is hit


@pytest.mark.parametrize(
    "name, values, nbytes",
    [
        ("fp8_e4m3:b128:fp32", 16384, 16388),  # 128 x 128 fp8 + one fp32 scale
        ("fp8:g128:bf16", 128, 130),  # 128 fp8 + one bf16 scale
        ("int4:g128:fp16:zp", 256, 133),  # two groups: 2 x (64 + 2) + 2 x 4 bit
        ("int8:g64:fp16:zp", 64, 67),  # 64 + 2 + 1
        ("nf4", 64, 36),
        ("nf4_dq", 16384, 8452),
        ("nvfp4", 16, 9),  # 16 x 4 bit + one fp8 scale
    ],
)
def test_new_weight_formats(name, values, nbytes):
    f = weight_format(name)
    assert (f.block_values, f.block_bytes) == (values, nbytes)
    assert weight_format(f.name) == f  # the canonical name reads back to the same format


def test_scaled_fp8_is_no_kv_format():
    from kvcalc.errors import KvcalcError
    from kvcalc.formats import kv_format

    with pytest.raises(KvcalcError, match="weight format"):
        kv_format("fp8:b128")
    with pytest.raises(KvcalcError, match="either a group"):
        weight_format("fp8:b128:g128")
    with pytest.raises(KvcalcError, match="fp8 weights only"):
        weight_format("int4:b128")
