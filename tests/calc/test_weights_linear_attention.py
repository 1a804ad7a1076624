"""Parameter counts of a linear-attention (Gated DeltaNet) layer, `kvcalc/calc/weights.py`
`layer_params` -> `_linear_attention_params`, by hand on a small made-up model.

Written for mutation testing (tools/mutation.py): no other test counted a linear-attention
layer's parameters. The formula is the one in weights.py (Qwen3-Next `Qwen3NextGatedDeltaNet`):
  linear = d x (2 hk dk + 2 hv dv) + d x 2 hv + hv dv d    (q, k, v, z projections; a, b; out)
  other  = (2 hk dk + hv dv) x conv_kernel + 2 hv + dv     (conv1d, A_log and dt_bias, norm)
with hk, hv the key / value heads on one TP rank (ceil-divided), plus 2d for the layer norms and a
gated MLP of 3 x d x ceil(intermediate / tp).
"""

from __future__ import annotations

import pytest

from kvcalc.calc.weights import layer_params
from kvcalc.errors import KvcalcError
from kvcalc.schema import ModelSpec

SMALL = dict(
    name="tiny-deltanet",
    n_layers=2,
    n_heads=4,
    n_kv_heads=2,
    head_dim=16,
    hidden_size=64,
    intermediate_size=128,
    dtype="bf16",
    layer_types=["linear", "full"],
    linear_num_key_heads=3,
    linear_num_value_heads=8,
    linear_key_head_dim=16,
    linear_value_head_dim=8,
    linear_conv_kernel_dim=4,
)


def test_linear_attention_layer_tp1():
    # d 64, hk 3, hv 8, dk 16, dv 8:
    # linear = 64 x (96 + 128) + 64 x 16 + 8 x 8 x 64 = 14,336 + 1,024 + 4,096 = 19,456; MLP 3 x 64 x 128 = 24,576
    # other = (96 + 64) x 4 + 16 + 8 = 664; + 2 x 64 norms = 792
    p = layer_params(ModelSpec(**SMALL), 0)
    assert (p.linear, p.other, p.n_experts) == (19_456 + 24_576, 792, 0)


def test_linear_attention_layer_tp2_rounds_heads_up():
    # tp 2: hk = ceil(3 / 2) = 2, hv = 4:
    # linear = 64 x (64 + 64) + 64 x 8 + 4 x 8 x 64 = 8,192 + 512 + 2,048 = 10,752; MLP 3 x 64 x 64 = 12,288
    # other = (64 + 32) x 4 + 8 + 8 = 400; + 128 = 528
    p = layer_params(ModelSpec(**SMALL), 0, tp=2)
    assert (p.linear, p.other) == (10_752 + 12_288, 528)


def test_linear_attention_layer_needs_its_sizes():
    m = ModelSpec(**{**SMALL, "linear_conv_kernel_dim": None})
    with pytest.raises(KvcalcError, match="tiny-deltanet: cannot count parameters without linear_conv_kernel_dim; "):
        layer_params(m, 0)
