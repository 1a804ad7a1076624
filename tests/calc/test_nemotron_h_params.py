"""Nemotron-H parameters counted from the architecture (`weights._separate_block_params`): each
layer is one norm and one of a Mamba-2 mixer, an attention block or a relu2 MLP (transformers
`modeling_nemotron_h.py` NemotronHBlock / NemotronHMamba2Mixer / NemotronHMLP; vLLM `nemotron_h.py`).

Configs: nvidia/Nemotron-H-8B-Base-8K config.json (the dict of tests/load/test_hf_families_served.py)
and nvidia/NVIDIA-Nemotron-Nano-9B-v2 config.json (hidden 4,480, 56 layers: 27 Mamba-2, 25 MLP,
4 attention, as its model card lists them). The publisher's counts: "This model has 8B of model
parameters" (Nemotron-H-8B-Base-8K card); Nemotron-Nano-9B-v2 is sold as 9B; both are rounded to
whole billions, so the checks are exact hand counts that round to those figures.
"""

from __future__ import annotations

import pytest

from kvcalc.calc.weights import layer_params, param_counts, weight_bytes
from kvcalc.errors import KvcalcError
from kvcalc.load.hf import model_from_hf_config
from tests.published_configs import NEMOTRON_H_8B as _NEMOTRON_H_8B

NEMOTRON_H_8B = {**_NEMOTRON_H_8B, "tie_word_embeddings": False}

NANO_9B_V2 = {
    "architectures": ["NemotronHForCausalLM"],
    "model_type": "nemotron_h",
    "hidden_size": 4480,
    "hybrid_override_pattern": "M-M-M-MM-M-M-M*-M-M-M*-M-M-M-M*-M-M-M-M*-M-MM-M-M-M-M-M-",
    "intermediate_size": 15680,
    "max_position_embeddings": 131072,
    "num_attention_heads": 40,
    "num_hidden_layers": 56,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "mamba_num_heads": 128,
    "mamba_head_dim": 80,
    "ssm_state_size": 128,
    "n_groups": 8,
    "conv_kernel": 4,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "vocab_size": 131072,
}


def kinds(m):
    return [m.layer_kinds.count(k) for k in ("mamba", "mlp", "full")]


def test_nemotron_h_8b_layer_by_layer():
    m = model_from_hf_config(NEMOTRON_H_8B, "Nemotron-H-8B-Base-8K/config.json")
    assert kinds(m) == [24, 24, 4]
    mamba, mlp, attn = (layer_params(m, m.layer_kinds.index(k)) for k in ("mamba", "mlp", "full"))
    # Mamba-2, d_inner = 128 x 64 = 8,192, 8 groups x 128 state: in_proj 4,096 x (2 x 8,192 + 2 x 8 x 128 + 128)
    # = 4,096 x 18,560 = 76,021,760, out_proj 8,192 x 4,096 = 33,554,432 -> 109,576,192
    assert mamba.linear == 109_576_192
    # conv (8,192 + 2,048) x (4 + 1) (weight and bias) = 51,200, dt_bias + A_log + D 3 x 128 = 384,
    # gated norm 8,192, the block's norm 4,096 -> 63,872 (and no MLP, no second norm)
    assert mamba.other == 63_872 and mamba.total == 109_640_064
    # relu2 MLP: up and down 2 x 4,096 x 21,504 = 176,160,768 + norm 4,096
    assert (mlp.linear, mlp.other) == (176_160_768, 4_096)
    # attention: q and o 2 x 4,096 x 4,096 = 33,554,432, k and v 2 x 4,096 x 8 x 128 = 8,388,608 + norm
    assert (attn.linear, attn.other) == (41_943_040, 4_096)


def test_nemotron_h_8b_total_is_the_published_8b():
    m = model_from_hf_config(NEMOTRON_H_8B, "Nemotron-H-8B-Base-8K/config.json")
    # 24 x 109,640,064 + 24 x 176,164,864 + 4 x 41,947,136 = 7,027,106,816 in the layers;
    # embeddings and untied head 2 x 131,072 x 4,096 = 1,073,741,824; final norm 4,096
    total = 24 * 109_640_064 + 24 * 176_164_864 + 4 * 41_947_136 + 2 * 131_072 * 4_096 + 4_096
    assert param_counts(m) == (total, total) == (8_100_852_736, 8_100_852_736)
    assert round(total / 1e9) == 8  # "This model has 8B of model parameters"
    # bf16: 2 B each
    assert weight_bytes(m).total_bytes == 2 * 8_100_852_736


def test_nemotron_nano_9b_v2_total():
    m = model_from_hf_config(NANO_9B_V2, "NVIDIA-Nemotron-Nano-9B-v2/config.json")
    assert kinds(m) == [27, 25, 4]
    # Mamba-2, d_inner 128 x 80 = 10,240: in_proj 4,480 x (20,480 + 2,048 + 128) = 101,498,880, out_proj
    # 10,240 x 4,480 = 45,875,200; conv 12,288 x 5 = 61,440, 384, norm 10,240, block norm 4,480 -> 147,450,624
    # MLP 2 x 4,480 x 15,680 + 4,480 = 140,497,280; attention 2 x 4,480 x 5,120 + 2 x 4,480 x 1,024 + 4,480 = 55,054,720
    total = 27 * 147_450_624 + 25 * 140_497_280 + 4 * 55_054_720 + 2 * 131_072 * 4_480 + 4_480
    assert param_counts(m)[0] == total == 8_888_227_328
    assert round(total / 1e9) == 9  # the "9B" of its name


def test_moe_blocks_are_refused_not_miscounted():
    # Nemotron 3 style: E blocks are routed experts, not dense MLPs of intermediate_size
    moe = dict(
        NEMOTRON_H_8B,
        hybrid_override_pattern="MEMEM*EMEMEMEMEMEMEMEMEMEMEMEMEMEMEMEMEMEMEMEMEMEMEM",
    )
    m = model_from_hf_config(moe, "n/config.json")
    assert m.intermediate_size is None
    with pytest.raises(KvcalcError, match="MoE layers .* give n_params"):
        param_counts(m)
