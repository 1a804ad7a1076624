"""Weights read from a checkpoint's own headers (`ModelSpec.checkpoint`): the bytes the loaders
of safetensors folders, Hub ids and GGUF files hand to the memory plan. Hand-built figures."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from kvcalc.calc.memory_plan import GpuFit, Layout
from kvcalc.calc.weights import checkpoint_weight_bytes, param_counts, weight_bytes, weight_format_label, weights_source
from kvcalc.errors import KvcalcError
from kvcalc.schema import CheckpointWeights, GpuSpec, ModelSpec

# A tiny MoE: layer 0 dense (first_dense_layers 1), layer 1 with 4 experts, 2 per token.
ARCH = dict(
    name="tiny-moe",
    n_layers=2,
    n_heads=4,
    n_kv_heads=2,
    head_dim=8,
    hidden_size=32,
    vocab_size=100,
    intermediate_size=64,
    n_experts=4,
    n_experts_per_token=2,
    moe_intermediate_size=16,
    first_dense_layers=1,
)
CK = CheckpointWeights(
    source="safetensors headers of 2 files",
    label="bf16",
    n_params=3700,
    layer_bytes=[1000, 5000],
    layer_expert_bytes=[0, 4000],
    embedding_bytes=640,
    head_bytes=700,
    other_bytes=60,
    bytes_by_dtype={"BF16": 7400},
)
MODEL = ModelSpec(**ARCH, checkpoint=CK)


def test_total_bytes_sums_every_part():
    # 1000 + 5000 layers + 640 embedding + 700 head + 60 other = 7,400
    assert CK.total_bytes == 7400


def test_one_rank_is_exact():
    wb = weight_bytes(MODEL)
    # layer 1: 5000 - 4000 expert bytes = 1000 dense; 4000 / 4 experts = 1000 per expert
    assert wb.layer_dense_bytes == (1000, 1000)
    assert wb.layer_expert_bytes == (0, 1000)
    assert wb.layer_n_experts == (0, 4)
    assert wb.layer_n_active_experts == (0, 2)
    assert wb.embedding_bytes == 700  # 640 embedding + 60 other, on the first stage
    assert wb.head_bytes == 700
    assert wb.total_bytes == CK.total_bytes


@pytest.mark.parametrize(
    "tp, dense, expert, emb",
    [
        (2, 500, 500, 350),  # 1000 / 2; 1000 / 2; 700 / 2
        (3, 334, 334, 234),  # ceil(1000 / 3) = 334; ceil(700 / 3) = 234
    ],
)
def test_tensor_parallel_divides_each_part_rounding_up(tp, dense, expert, emb):
    wb = checkpoint_weight_bytes(MODEL, tp)
    assert wb.layer_dense_bytes == (dense, dense)
    assert wb.layer_expert_bytes == (0, expert)
    assert wb.embedding_bytes == emb and wb.head_bytes == emb


def test_pipeline_stages_split_by_layer():
    # stage 0: layer 0 (1000) + embedding/other (700); stage 1: layer 1 (1000 + 4 x 1000) + head 700
    assert weight_bytes(MODEL).stage_bytes([range(0, 1), range(1, 2)]) == [1700, 5700]


def test_override_counts_from_the_architecture():
    assert weight_bytes(MODEL, "bf16") == weight_bytes(ModelSpec(**ARCH), "bf16")
    assert weights_source(MODEL, "fp8") == "architecture"
    assert weights_source(MODEL) == "safetensors headers of 2 files"
    assert weights_source(ModelSpec(**ARCH)) == "architecture"
    assert weight_format_label(MODEL) == "bf16 as stored"
    assert weight_format_label(MODEL, "fp8") == "fp8_e4m3"


def test_param_counts_from_the_checkpoint():
    # MoE: active = 3700 stored - the 2 skipped experts of layer 1 (2 x 3 x 32 x 16 = 3,072) = 628
    assert param_counts(MODEL) == (3700, 628)
    dense = ModelSpec(
        **{
            **ARCH,
            "n_experts": None,
            "n_experts_per_token": None,
            "moe_intermediate_size": None,
            "first_dense_layers": 0,
        },
        checkpoint=CK.model_copy(update={"layer_expert_bytes": [0, 0]}),
    )
    assert param_counts(dense) == (3700, 3700)
    # experts the architecture does not place are read as dense bytes
    assert checkpoint_weight_bytes(dense).layer_dense_bytes == (1000, 5000)


def test_planner_reports_the_source_and_bytes():
    gpu = GpuSpec(
        key="g", name="G", memory_bytes=80 * 2**30, hbm_bytes_per_s=3 * 10**12, bf16_flops_per_s=10**15, source="test"
    )
    planner = GpuFit(MODEL, gpu, Layout())
    assert planner.weights_source == "safetensors headers of 2 files"
    assert planner.stage_weight_bytes == [7400]


def test_no_checkpoint_is_an_error():
    with pytest.raises(KvcalcError, match="no checkpoint weight bytes"):
        checkpoint_weight_bytes(ModelSpec(**ARCH))


def test_layers_must_match():
    with pytest.raises(ValidationError, match="cover 1 layers but n_layers is 2"):
        ModelSpec(**ARCH, checkpoint=CK.model_copy(update={"layer_bytes": [1], "layer_expert_bytes": [0]}))
    with pytest.raises(ValidationError, match="expert bytes exceed"):
        CheckpointWeights(source="s", label="l", n_params=1, layer_bytes=[1], layer_expert_bytes=[2])
