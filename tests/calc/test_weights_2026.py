"""Parameter counts of the 2026 architectures kvcalc used to refuse: DeepSeek-V4 (Flash, and the
Pro sibling it never saw), MiniMax-M3 and Kimi-K3, from their published config.json files
(`tests/data/hf-configs-2026/`, copied from ai-dynamo/aiconfigurator) and the bundled YAMLs.

The shapes are the engines' own: vLLM 0.33.0 `vllm/models/deepseek_v4/attention.py`,
`compressor.py`, `cpu/model.py` (with DeepSeek's reference `inference/model.py`),
`vllm/models/minimax_m3/nvidia/model.py`, `vllm/models/kimi_k3/nvidia/{model,mla,kda}.py`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvcalc.calc.speculative import mtp_weight_bytes
from kvcalc.calc.weights import (
    layer_params,
    linear_modules,
    model_params,
    mtp_params,
    param_counts,
    tensor_scale_bytes,
    weight_bytes,
)
from kvcalc.load.hf import model_from_hf_config
from kvcalc.load.models import load_model

DATA = Path(__file__).parents[1] / "data" / "hf-configs-2026"


def _hf(name: str):
    return model_from_hf_config(json.loads((DATA / f"{name}.json").read_text()), name)


# (config file or bundled name, total, active). Against the model cards:
# - DeepSeek-V4-Flash: card 284B total / 13B active. kvcalc 284,334,567,511 (0.12% over 284e9, the
#   card rounds); active 13,801,959,511 counts the embedding and the head (2 x 129,280 x 4,096 =
#   1,059,061,760): without them 12,742,897,751, the card's 13B rounded.
# - DeepSeek-V4-Pro (the NVFP4 sibling, never seen when the mapping was written): card 1.6T / 49B.
#   kvcalc 1,572,999,528,803 (1.6T to two figures, 1.7% under 1.6e12); active 49,781,408,099.
# - MiniMax-M3: card ~428B / ~23B, counting its vision tower, which kvcalc does not (a text model):
#   426,174,572,928 (0.4% under); active 25,962,473,856 with the embedding and head (2 x 200,064 x
#   6,144 = 2,458,386,432), 23,504,087,424 without: the card's ~23B.
# - Kimi-K3: no published parameter count was found (press reports say "over 2.5T"): 2,779,484,476,000.
# - Nemotron-3-Super-120B-A12B: the name's 120B / 12B; kvcalc 120,668,707,840 / 12,770,237,440.
COUNTS = {
    "nvidia--NVIDIA-Nemotron-3-Super-120B-A12B-FP8": (120_668_707_840, 12_770_237_440),
    "deepseek-ai--DeepSeek-V4-Flash": (284_334_567_511, 13_801_959_511),
    "siblings/nvidia--DeepSeek-V4-Pro-NVFP4": (1_572_999_528_803, 49_781_408_099),
    "MiniMaxAI--MiniMax-M3": (426_174_572_928, 25_962_473_856),
    "moonshotai--Kimi-K3": (2_779_484_476_000, 105_364_017_760),
}
BUNDLED = {
    "deepseek-v4-flash": "deepseek-ai--DeepSeek-V4-Flash",
    "minimax-m3": "MiniMaxAI--MiniMax-M3",
    "kimi-k3": "moonshotai--Kimi-K3",
    "nemotron-3-super-120b-a12b": "nvidia--NVIDIA-Nemotron-3-Super-120B-A12B-FP8",
}


@pytest.mark.parametrize("name", sorted(COUNTS))
def test_param_counts_from_config_json(name):
    assert param_counts(_hf(name)) == COUNTS[name]


@pytest.mark.parametrize("bundled", sorted(BUNDLED))
def test_bundled_yaml_counts_as_its_config_json(bundled):
    assert param_counts(load_model(bundled)) == COUNTS[BUNDLED[bundled]]


# ----- DeepSeek-V4-Flash, layer by layer (hidden 4,096, 64 heads of 512, q_lora 1,024, o_groups 8 of
# o_lora 1,024, hc_mult 4, 256 experts of 2,048 + 1 shared, vocab 129,280, 3 hash layers) -----------
#
# Each part in the dtype the checkpoint stores it (DeepSeek's reference inference/model.py; vLLM 0.33.0
# models/deepseek_v4/): linear = fp8 matrices, other = bf16, fp32, int64.
# linear of every layer: wq_a 4,096 x 1,024 = 4,194,304; wq_b 1,024 x 64 x 512 = 33,554,432; wkv
# 4,096 x 512 = 2,097,152; wo_a (64 x 512 / 8) x (8 x 1,024) = 33,554,432; wo_b 8,192 x 4,096 =
# 33,554,432: 106,954,752; + the shared expert 3 x 4,096 x 2,048 = 25,165,824 -> 132,120,576; a CSA
# layer adds the indexer's wq_b 1,024 x 64 x 128 = 8,388,608.
# other (bf16) of every layer: q_norm 1,024 + kv_norm 512 + two norms 8,192 + router 256 x 4,096 =
# 1,048,576 -> 1,058,304; compressor(ratio, D) = wkv, wgate 2 x 4,096 x coff D + norm D (coff 2 at
# ratio 4): (4, 512) = 8,389,120, (128, 512) = 4,194,816, (4, 128) = 2,097,280; the CSA indexer's
# weights_proj 4,096 x 64 = 262,144.
# fp32 of every layer: attn_sink 64 + hyper-connections 2 x (24 x 16,384 + 24 + 3) = 786,486 ->
# 786,550; + the gate bias 256 (layers 3-42); + each compressor's ape ratio x coff D: (4, 512) 4,096,
# (128, 512) 65,536, (4, 128) 1,024.
# int64: the hash table tid2eid 129,280 x 6 = 775,680 (layers 0-2).
CSA_OTHER = 1_058_304 + 8_389_120 + 262_144 + 2_097_280  # = 11,806,848
V4_LAYERS = {  # layer: (linear, other, fp32, int64)
    0: (132_120_576, 1_058_304, 786_550, 775_680),  # sliding only, hash-routed
    2: (132_120_576 + 8_388_608, CSA_OTHER, 786_550 + 4_096 + 1_024, 775_680),  # CSA, hash
    3: (132_120_576, 1_058_304 + 4_194_816, 786_550 + 256 + 65_536, 0),  # HCA
    4: (132_120_576 + 8_388_608, CSA_OTHER, 786_550 + 256 + 4_096 + 1_024, 0),  # CSA
    42: (132_120_576 + 8_388_608, CSA_OTHER, 786_550 + 256 + 4_096 + 1_024, 0),  # CSA, the last
}


@pytest.mark.parametrize("i", sorted(V4_LAYERS))
def test_deepseek_v4_layer(i):
    p = layer_params(load_model("deepseek-v4-flash"), i)
    assert (p.linear, p.other, p.fp32, p.int64) == V4_LAYERS[i]
    assert (p.expert_linear, p.n_experts, p.n_active_experts) == (3 * 4_096 * 2_048, 256, 6)


def test_deepseek_v4_head_and_mtp():
    spec = load_model("deepseek-v4-flash")
    p = model_params(spec)
    # embedding and head 129,280 x 4,096 each; final norm 4,096 (bf16) and the fp32 hyper-connection
    # head 4 x 16,384 + 4 + 1 = 65,541
    assert (p.embedding, p.lm_head, p.final_norm, p.head_fp32) == (529_530_880, 529_530_880, 4_096, 65_541)
    # MTP: one layer like the last but sliding-window only (vLLM 0.33.0 deepseek_v4/attention.py: a layer
    # past num_hidden_layers gets compress_ratio 1; the config's 44th compress_ratios entry is 0): linear
    # 132,120,576 + other 1,058,304 + fp32 786,550 + 256 + experts 256 x 25,165,824 = 6,576,416,630; + e_proj,
    # h_proj 2 x 4,096^2 + 3 norms + its hyper-connection head 65,541
    last = layer_params(spec, 42).total - (8_388_608 + 10_748_544 + 5_120)  # no compressor, no indexer
    assert last == 132_120_576 + 1_058_304 + 786_806 + 256 * 25_165_824 == 6_576_416_630
    assert mtp_params(spec) == last + 2 * 4_096 * 4_096 + 3 * 4_096 + 65_541 == 6_610_048_891
    # its bytes (tp 1): fp8 132,120,576 + 8,064 scales + bf16 1,058,304 x 2 + fp32 786,806 x 4 + experts
    # 3,422,552,064 + e_proj / h_proj 33,554,432 + 2,048 scales + norms 3 x 4,096 x 2 + head 65,541 x 4
    assert mtp_weight_bytes(spec, None) == (
        132_128_640 + 2_116_608 + 3_147_224 + 3_422_552_064 + 33_556_480 + 24_576 + 262_164
    )


# ----- weight bytes of the published checkpoints, each tensor in the dtype it is stored ----------
#
# deepseek-ai/DeepSeek-V4-Flash (quantization_config fp8, [128, 128] blocks, expert_dtype fp4): the
# matrices fp8 with ONE e8m0 byte per 128 x 128 block (vLLM 0.33.0 deepseek_v4/quant_config.py
# is_scale_e8m0: "FP4 checkpoints store FP8 linear scales as e8m0fnu"; the reference Linear's scale is
# float8_e8m0fnu), the experts MXFP4 (17 B per 32 values: 16 B of e2m1 + one e8m0 scale; the checkpoint's
# experts.N.w1.weight is I8 [2048, 2048] beside an F8_E8M0 scale [2048, 128]), other bf16, fp32 x 4 B,
# int64 x 8 B:
#   fp8 132,120,576 + 8,064 scales = 132,128,640 B; a CSA layer 140,509,184 + 8,576 = 140,517,760 B
#   layer 0, 1: 132,128,640 + 1,058,304 x 2 + 786,550 x 4 + 775,680 x 8              = 143,596,888
#   layer 2:    140,517,760 + 11,806,848 x 2 + 791,670 x 4 + 775,680 x 8             = 173,503,576
#   HCA (3, 5, .., 41; 20): 132,128,640 + 5,253,120 x 2 + 852,342 x 4                 = 146,044,248
#   CSA (4, 6, .., 42; 20): 140,517,760 + 11,806,848 x 2 + 791,926 x 4               = 167,299,160
#   experts: 256 x 25,165,824 / 32 x 17 = 256 x 13,369,344 = 3,422,552,064 per layer
#   embedding 529,530,880 x 2 = 1,059,061,760; head (529,530,880 + 4,096) x 2 + 65,541 x 4 = 1,059,332,116
V4_FLASH_BYTES = (
    2 * 143_596_888
    + 173_503_576
    + 20 * 146_044_248
    + 20 * 167_299_160
    + 43 * 3_422_552_064
    + 1_059_061_760
    + 1_059_332_116
)
# nvidia/DeepSeek-V4-Flash-NVFP4 (+ its hf_quant_config.json: MIXED_PRECISION, NVFP4 routed experts
# only; config.json's fp8 [128, 128] blocks and expert_dtype fp4, so e8m0 scales, for the rest): an
# expert 25,165,824 / 16 x 9 = 14,155,776 B (8 B of e2m1 + one fp8 e4m3 scale per 16) + w1, w2, w3
# each an fp32 weight_scale_2 and an fp32 input_scale, 3 x 8 = 24 B -> 14,155,800 B (vLLM 0.33.0
# modelopt.py ModelOptNvFp4FusedMoE); everything else as DeepSeek-V4-Flash.
V4_FLASH_NVFP4_BYTES = V4_FLASH_BYTES - 43 * 3_422_552_064 + 43 * 256 * 14_155_800


def test_deepseek_v4_flash_weight_bytes_per_layer():
    w = weight_bytes(_hf("deepseek-ai--DeepSeek-V4-Flash"))
    by_kind = (w.layer_dense_bytes[0], w.layer_dense_bytes[2], w.layer_dense_bytes[3], w.layer_dense_bytes[42])
    assert by_kind == (143_596_888, 173_503_576, 146_044_248, 167_299_160)
    assert w.layer_dense_bytes[3] == 132_120_576 + 132_120_576 // 16_384 + 5_253_120 * 2 + 852_342 * 4
    assert w.layer_expert_bytes[3] == 25_165_824 // 32 * 17 == 13_369_344
    assert (w.embedding_bytes, w.head_bytes) == (1_059_061_760, 1_059_332_116)


@pytest.mark.parametrize(
    ("source", "hf_quant", "total_bytes"),
    [
        ("deepseek-ai--DeepSeek-V4-Flash", False, V4_FLASH_BYTES),  # 156,015,698,140 B
        ("nvidia--DeepSeek-V4-Flash-NVFP4", False, V4_FLASH_NVFP4_BYTES),  # 164,673,005,788 B
        ("nvidia--DeepSeek-V4-Flash-NVFP4", True, V4_FLASH_NVFP4_BYTES),
        ("deepseek-v4-flash", False, V4_FLASH_BYTES),  # the bundled YAML
    ],
)
def test_deepseek_v4_total_weight_bytes(source, hf_quant, total_bytes):
    if source.startswith("deepseek-v4"):
        spec = load_model(source)
    else:
        quant = json.loads((DATA / f"{source}.hf_quant_config.json").read_text()) if hf_quant else None
        spec = model_from_hf_config(json.loads((DATA / f"{source}.json").read_text()), source, hf_quant=quant)
    assert weight_bytes(spec).total_bytes == total_bytes
    assert (V4_FLASH_BYTES, V4_FLASH_NVFP4_BYTES) == (156_015_698_140, 164_673_005_788)


def test_deepseek_v4_formats_from_the_configs():
    flash = _hf("deepseek-ai--DeepSeek-V4-Flash")
    assert (flash.weight_dtype, flash.expert_weight_dtype, flash.expert_tensor_scale_bytes) == (
        "fp8_e4m3:b128:e8m0",
        "mxfp4",
        0,
    )
    # nvidia/DeepSeek-V4-Flash-NVFP4: quantization_config moe_quant_algo NVFP4 (vLLM 0.33.0
    # DeepseekV4FP8Config.get_quant_method: ModelOptNvFp4FusedMoE), the rest fp8 blocks as the base
    nvfp4 = _hf("nvidia--DeepSeek-V4-Flash-NVFP4")
    assert (nvfp4.weight_dtype, nvfp4.expert_weight_dtype, nvfp4.expert_tensor_scale_bytes) == (
        "fp8_e4m3:b128:e8m0",
        "nvfp4",
        8,
    )


def test_deepseek_v4_fp8_experts_keep_fp32_scales():
    # expert_dtype fp8 (DeepSeek-V4-Flash-Base): vLLM 0.33.0 is_scale_e8m0 is false, the block scales
    # float32 (4 B a block), and the experts fp8 as the rest
    cfg = json.loads((DATA / "deepseek-ai--DeepSeek-V4-Flash.json").read_text())
    cfg["expert_dtype"] = "fp8"
    spec = model_from_hf_config(cfg)
    assert (spec.weight_dtype, spec.expert_weight_dtype) == ("fp8_e4m3:b128:fp32", None)
    w = weight_bytes(spec)
    assert w.layer_dense_bytes[3] == 132_120_576 + 8_064 * 4 + 5_253_120 * 2 + 852_342 * 4
    assert w.layer_expert_bytes[3] == 25_165_824 + 25_165_824 // 16_384 * 4


# ----- MiniMax-M3 (hidden 6,144, 64 heads, 4 KV heads of 128, indexer 4 heads of 128) ------------


def test_minimax_m3_sparse_layer():
    # layer 3, the first sparse MoE layer: q 6,144 x 64 x 128 = 50,331,648; k and v 2 x 6,144 x 4 x 128 =
    # 6,291,456; o 50,331,648; index_q 6,144 x 4 x 128 = 3,145,728 and index_k 6,144 x 128 = 786,432;
    # shared expert 3 x 6,144 x 3,072 = 56,623,104 -> 167,510,016.
    # other: q/k norms 2 x 128 + index q/k norms 2 x 128 + two norms 12,288 + router 128 x 6,144 =
    # 786,432 + routing bias 128 -> 799,360
    p = layer_params(load_model("minimax-m3"), 3)
    assert (p.linear, p.other) == (167_510_016, 799_360)
    assert (p.expert_linear, p.n_experts, p.n_active_experts) == (56_623_104, 128, 4)


def test_minimax_m3_dense_layer_has_no_indexer():
    # layer 0 (sparse_attention_freq 0, dense MLP of 12,288): attention 50,331,648 + 6,291,456 + 50,331,648
    # + MLP 3 x 6,144 x 12,288 = 226,492,416 -> 333,447,168; other 256 + 12,288 = 12,544
    p = layer_params(load_model("minimax-m3"), 0)
    assert (p.linear, p.other, p.n_experts) == (333_447_168, 12_544, 0)


# ----- Kimi-K3 (hidden 7,168; KDA 96 heads of 128; MLA 96 heads, q_lora 1,536, kv_lora 512 + 64 rope,
# nope 128, v 128; 896 experts of 3,072 in a 3,584 latent, 16 active, 2 shared) --------------------


def test_kimi_k3_kda_layer():
    # layer 1 (KDA, MoE), P = 96 x 128 = 12,288: in_proj_qkvgfab 7,168 x (4 x 12,288 + 128 + 96) =
    # 353,927,168; f_b_proj 128 x 12,288 = 1,572,864; o_proj 12,288 x 7,168 = 88,080,384; shared experts
    # 3 x 7,168 x 6,144 = 132,120,576; latent down and up 2 x 7,168 x 3,584 = 51,380,224 -> 627,081,216.
    # other: dt_bias 12,288 + conv1d 3 x 12,288 x 4 = 147,456 + A_log 96 + o_norm 128 + two norms 14,336
    # + attention residuals 2 x 7,168 + 2 x 7,168 = 28,672 + router 896 x 7,168 = 6,422,528 + bias 896
    # + latent norm 3,584 -> 6,629,984
    p = layer_params(load_model("kimi-k3"), 1)
    assert (p.linear + p.latent_linear, p.other) == (627_081_216, 6_629_984)
    assert p.latent_linear == 51_380_224
    # an expert works in the latent: 3 x 3,584 x 3,072
    assert (p.expert_linear, p.n_experts, p.n_active_experts) == (33_030_144, 896, 16)


def test_kimi_k3_mla_layer_with_output_gate():
    # layer 3 (MLA): q_a 7,168 x 1,536 = 11,010,048; q_b 1,536 x 96 x 192 = 28,311,552; kv_a 7,168 x 576 =
    # 4,128,768; kv_b 512 x 96 x 256 = 12,582,912; o 96 x 128 x 7,168 = 88,080,384; gate 7,168 x 96 x 128
    # = 88,080,384 -> 232,194,048 + shared 132,120,576 = 364,314,624; the latent projections apart
    p = layer_params(load_model("kimi-k3"), 3)
    assert (p.linear, p.latent_linear) == (232_194_048 + 132_120_576, 2 * 7_168 * 3_584)


def test_kimi_k3_experts_and_latent_projections_are_mxfp4():
    # moonshotai/Kimi-K3 quantization_config: compressed-tensors float 4-bit, group 32, uint8 scales
    # (format mxfp4-pack-quantized): vLLM 0.33.0 compressed_tensors.py `_is_mxfp4`, not NVFP4 (group 16).
    # Its one config group targets "Linear" (vLLM `find_matched_target`: any module class with Linear in
    # its name) less `ignore`: re:.*self_attn.* (MLA and KDA), re:.*shared_experts.*, the dense
    # re:.*mlp\.(gate|up|gate_up|down)_proj.*, lm_head and the vision parts. Left quantized: the routed
    # experts and KimiMoE's block_sparse_moe.routed_expert_{down,up}_proj (ReplicatedLinear with the
    # quant_config, vLLM 0.33.0 kimi_k3/nvidia/model.py); the router (GateLinear) and the attention
    # residual projections are built without it.
    spec = _hf("moonshotai--Kimi-K3")
    assert (spec.weight_dtype, spec.expert_weight_dtype, spec.latent_weight_dtype) == (None, "mxfp4", "mxfp4")


# moonshotai/Kimi-K3: bf16 except the MXFP4 routed experts and latent projections (17 B per 32 values):
#   layer 0 (KDA, dense MLP 3 x 7,168 x 33,792): (1,170,243,584 + 202,976) x 2         = 2,340,893,120
#   a KDA MoE layer (68): (575,700,992 + 6,629,984) x 2 + 51,380,224 / 32 x 17
#                         = 1,151,401,984 + 13,259,968 + 27,295,744                     = 1,191,957,696
#   an MLA layer (24):    (364,314,624 + 6,472,064) x 2 + 27,295,744                    =   768,869,120
#   experts: 896 x 33,030,144 / 32 x 17 = 896 x 17,547,264 = 15,722,348,544 per MoE layer (92)
#   embedding 1,174,405,120 x 2 = 2,348,810,240; head (1,174,405,120 + 7,168 + 2 x 7,168) x 2 = 2,348,853,248
# The latent projections in bf16 (the old count) were 92 x (102,760,448 - 27,295,744) = 6,942,752,768 B more.
K3_BYTES = 2_340_893_120 + 68 * 1_191_957_696 + 24 * 768_869_120 + 92 * 15_722_348_544 + 2_348_810_240 + 2_348_853_248


@pytest.mark.parametrize("source", ["moonshotai--Kimi-K3", "kimi-k3"])
def test_kimi_k3_total_weight_bytes(source):
    spec = _hf(source) if source.startswith("moonshotai") else load_model(source)
    w = weight_bytes(spec)
    assert (w.layer_dense_bytes[0], w.layer_dense_bytes[1], w.layer_dense_bytes[3]) == (
        2_340_893_120,
        1_191_957_696,
        768_869_120,
    )
    assert w.total_bytes == K3_BYTES == 1_553_000_604_864


def test_nemotron_3_moe_block():
    # layer 1 (an E block; vLLM 0.33.0 nemotron_h.py NemotronHMoE): norm 4,096 + router 512 x 4,096 =
    # 2,097,152 + e_score_correction_bias 512 -> other 2,101,760; shared expert (relu2 up and down)
    # 2 x 4,096 x 5,376 = 44,040,192 (linear) + fc1 / fc2 latent projections 2 x 4,096 x 1,024 = 8,388,608
    # (latent); an expert 2 x 1,024 x 2,688 = 5,505,024, 22 of 512 active
    p = layer_params(load_model("nemotron-3-super-120b-a12b"), 1)
    assert (p.linear, p.latent_linear, p.other) == (44_040_192, 8_388_608, 2_101_760)
    assert (p.expert_linear, p.n_experts, p.n_active_experts) == (5_505_024, 512, 22)


def test_nemotron_h_mixed_dense_and_moe_blocks_still_refused():
    from kvcalc.errors import KvcalcError

    cfg = json.loads((DATA / "nvidia--NVIDIA-Nemotron-3-Super-120B-A12B-FP8.json").read_text())
    pattern = cfg["hybrid_override_pattern"]
    cfg["hybrid_override_pattern"] = pattern[:1] + "-" + pattern[2:]  # one dense MLP block among the E ones
    with pytest.raises(KvcalcError, match="its MoE layers .Nemotron-H's 'E' blocks. are not counted"):
        param_counts(model_from_hf_config(cfg))


@pytest.mark.parametrize(
    "bundled",
    ["deepseek-v4-flash", "minimax-m3", "kimi-k3", "glm-5.2", "deepseek-v3.2", "nemotron-3-super-120b-a12b"],
)
def test_estimate_with_a_gpu(cli, bundled):
    # the weights are counted, so --gpu gives a memory plan (it used to refuse: "give n_params")
    r = cli("estimate", bundled, "--gpu", "h200", "-s", "32k")
    assert r.exit_code == 0, r.output
    assert "weights per GPU" in r.output


# ----- Kimi Linear: the low-rank KDA gate (no longer refused) ------------------------------------
#
# The weight-shaping fields of moonshotai/Kimi-Linear-48B-A3B-Instruct's config.json (model_type
# kimi_linear, no use_full_rank_gate): hidden 2,304, 27 layers, MLA at 1-indexed 4, 8, .., 24, 27 with 32
# heads, no q_lora, kv_lora 512 + rope 64, nope 128, v 128; KDA 32 heads of 128, conv 4; 256 experts of
# 1,024, 8 active, 1 shared; layer 0 dense (9,216); vocab 163,840, untied. vLLM 0.33.0 builds its KDA as
# mamba/gdn/kimi_gdn_linear_attn.py KimiGatedDeltaNetAttention (kimi_k3/nvidia/model.py KimiDecoderLayer).
KIMI_LINEAR = {
    "architectures": ["KimiLinearForCausalLM"],
    "model_type": "kimi_linear",
    "torch_dtype": "bfloat16",
    "hidden_size": 2304,
    "num_hidden_layers": 27,
    "vocab_size": 163840,
    "tie_word_embeddings": False,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "q_lora_rank": None,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "mla_use_nope": True,
    "num_experts": 256,
    "num_experts_per_token": 8,
    "num_shared_experts": 1,
    "moe_intermediate_size": 1024,
    "first_k_dense_replace": 1,
    "intermediate_size": 9216,
    "linear_attn_config": {
        "full_attn_layers": [4, 8, 12, 16, 20, 24, 27],
        "kda_layers": [i for i in range(1, 28) if i not in (4, 8, 12, 16, 20, 24, 27)],
        "head_dim": 128,
        "num_heads": 32,
        "short_conv_kernel_size": 4,
    },
}

# (layer, linear, other), P = 32 x 128 = 4,096:
# KDA: in_proj_qkvgfab 2,304 x (3 x 4,096 + 32 + 128) = 28,680,192; f_b_proj 128 x 4,096 = 524,288; g_a_proj
#   2,304 x 128 = 294,912; g_b_proj 128 x 4,096 = 524,288; o_proj 4,096 x 2,304 = 9,437,184 -> 39,460,864;
#   other dt_bias 4,096 + conv1d 3 x 4,096 x 4 = 49,152 + A_log 32 + o_norm 128 = 53,408, + two norms 4,608
# MLA: q_proj 2,304 x 32 x 192 = 14,155,776; kv_a 2,304 x 576 = 1,327,104; kv_b 512 x 32 x 256 = 4,194,304;
#   o_proj 32 x 128 x 2,304 = 9,437,184 -> 29,114,368; other kv_a norm 512 + two norms 4,608
# MoE: shared expert 3 x 2,304 x 1,024 = 7,077,888; router 256 x 2,304 = 589,824 + bias 256; an expert
#   3 x 2,304 x 1,024 = 7,077,888. Layer 0: dense MLP 3 x 2,304 x 9,216 = 63,700,992.
KIMI_LINEAR_LAYERS = {
    0: (39_460_864 + 63_700_992, 53_408 + 4_608),
    1: (39_460_864 + 7_077_888, 53_408 + 4_608 + 589_824 + 256),
    3: (29_114_368 + 7_077_888, 512 + 4_608 + 589_824 + 256),
}


@pytest.mark.parametrize("i", sorted(KIMI_LINEAR_LAYERS))
def test_kimi_linear_low_rank_kda_layers(i):
    spec = model_from_hf_config(KIMI_LINEAR)
    assert spec.linear_attention == "kda_lowrank"
    p = layer_params(spec, i)
    assert (p.linear, p.other) == KIMI_LINEAR_LAYERS[i]


def test_kimi_linear_param_counts():
    # 20 KDA layers (layer 0 dense, 19 MoE) and 7 MLA, every one but layer 0 with 256 experts of 7,077,888:
    # 103,219,872 + 19 x (47,186,848 + 1,811,939,328) + 7 x (36,787,456 + 1,811,939,328)
    # + embedding and head 2 x 163,840 x 2,304 = 754,974,720 + final norm 2,304 = 49,122,681,728
    # (the card's "48B": 48,367,704,704 without the embedding and head); active, 8 experts:
    # 103,219,872 + 19 x 103,809,952 + 7 x 93,410,560 + 754,977,024 = 3,484,459,904 (card "A3B": 2.73B
    # without the embedding and head)
    assert param_counts(model_from_hf_config(KIMI_LINEAR)) == (49_122_681_728, 3_484_459_904)


def test_kimi_latent_moe_without_its_norm_counted():
    # latent_moe_use_norm false: vLLM 0.33.0 KimiMoE builds no routed_expert_norm, so each of the 92 MoE
    # layers has 3,584 parameters fewer (it used to be refused)
    cfg = json.loads((DATA / "moonshotai--Kimi-K3.json").read_text())
    cfg["text_config"]["latent_moe_use_norm"] = False
    assert param_counts(model_from_hf_config(cfg))[0] == 2_779_484_476_000 - 92 * 3_584


def test_deepseek_v4_flash_against_the_hub_size():
    # The Hub lists deepseek-ai/DeepSeek-V4-Flash's safetensors as "Model size 158B" (featherless.ai's
    # copy of the Hub page: "Model Size: 158B"): the Hub counts tensor ELEMENTS, so a packed fp4 expert
    # matrix counts values / 2 (I8) + values / 32 (its F8_E8M0 scales) and an fp8 matrix values + one
    # scale per 128 x 128 block. From kvcalc's count, with the MTP layer the checkpoint also holds:
    spec = load_model("deepseek-v4-flash")
    experts = 43 * 256 * 25_165_824  # 277,025,390,592 routed-expert values
    fp8_blocks = 22 * 8_064 + 21 * 8_576  # 357,504 scales (21 CSA layers carry the indexer's wq_b)
    main = param_counts(spec)[0] - experts + fp8_blocks + experts * 17 // 32
    mtp_experts = 256 * 25_165_824
    mtp = mtp_params(spec) - mtp_experts + 8_064 + 2 * 1_024 + mtp_experts * 17 // 32
    assert main + mtp == 158_069_433_298  # 158B, as the Hub rounds it
    # and the bytes of every stored tensor: the model's 156,015,698,140 + the MTP layer's 3,593,787,756
    assert weight_bytes(spec).total_bytes + mtp_weight_bytes(spec, None) == 159_609_485_896


def test_kimi_k3_latent_projections_follow_the_ignore_list():
    # an ignore pattern that names the latent projections leaves them in bf16 beside the MXFP4 experts
    cfg = json.loads((DATA / "moonshotai--Kimi-K3.json").read_text())
    cfg["text_config"]["quantization_config"]["ignore"].append("re:.*routed_expert_(down|up)_proj.*")
    spec = model_from_hf_config(cfg)
    assert (spec.expert_weight_dtype, spec.latent_weight_dtype) == ("mxfp4", None)
    # each of the 92 MoE layers: 51,380,224 latent values at 2 B instead of 17 B per 32
    assert weight_bytes(spec).total_bytes == K3_BYTES + 92 * (51_380_224 * 2 - 51_380_224 // 32 * 17)


@pytest.mark.parametrize(
    ("name", "block_bytes"),
    [("fp8_e4m3:b128:e8m0", 16_385), ("fp8_e4m3:b128:ue8m0", 16_385), ("fp8_e4m3:b128:fp32", 16_388)],
)
def test_fp8_block_scale_dtypes(name, block_bytes):
    # a 128 x 128 block of fp8 values and its one scale: e8m0 (float8_e8m0fnu, DeepSeek's `scale_fmt`
    # spelling ue8m0) 1 B, fp32 4 B
    from kvcalc.formats import weight_format

    fmt = weight_format(name)
    assert (fmt.block_values, fmt.block_bytes) == (16_384, block_bytes)


# ----- ModelOpt FP8 / NVFP4: the per-tensor fp32 scalars of each quantized module ---------------
# nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-FP8 (hf_quant_config.json: quant_algo FP8,
# kv_cache_quant_algo FP8, no exclude_modules). vLLM 0.33.0 modelopt.py KFp8StaticTensor: per linear
# module an fp32 weight_scale and input_scale (8 B; qkv fused keeps one per shard, the checkpoint
# one per q_proj / k_proj / v_proj); ModelOptFp8MoEMethod likewise per expert matrix; kv_cache.py
# k_scale / v_scale per attention layer (8 B).
# Layers (pattern M E * ...): 40 Mamba-2 (in_proj, out_proj: 2 modules), 8 attention (q, k, v, o: 4,
# plus 8 B of KV scales), 40 latent MoE (shared up / down + fc1 / fc2_latent_proj: 4; the router is
# GateLinear, unquantized; 512 experts x up / down).
NEMOTRON_FP8 = "nvidia--NVIDIA-Nemotron-3-Super-120B-A12B-FP8"
NEMOTRON_FP8_SCALE_BYTES = (40 * 2 + 8 * 4 + 40 * 4) * 8 + 8 * 8 + 40 * 512 * 2 * 8  # 2,240 + 327,680
NEMOTRON_FP8_PLAIN_BYTES = 121_829_111_808  # the fp8 values, scales uncounted (kvcalc before)


def _with_hf_quant(name: str):
    quant = json.loads((DATA / f"{name}.hf_quant_config.json").read_text())
    return model_from_hf_config(json.loads((DATA / f"{name}.json").read_text()), name, hf_quant=quant)


def test_modelopt_fp8_scales_counted():
    spec = _with_hf_quant(NEMOTRON_FP8)
    assert (spec.linear_tensor_scale_bytes, spec.expert_tensor_scale_bytes, spec.kv_scale_bytes) == (8, 8, 8)
    assert tensor_scale_bytes(spec) == 272 * 8 + 8 * 8 == 2_240
    total = weight_bytes(spec).total_bytes
    assert total == NEMOTRON_FP8_PLAIN_BYTES + NEMOTRON_FP8_SCALE_BYTES == 121_829_441_728
    # an explicit format is the values alone, as before
    assert weight_bytes(spec, "fp8_e4m3").total_bytes == NEMOTRON_FP8_PLAIN_BYTES
    # per layer: a Mamba-2 layer +16 B, an attention layer +40 B, a MoE layer's dense part +32 B
    w, plain = weight_bytes(spec), weight_bytes(spec, "fp8_e4m3")
    kinds = spec.layer_kinds
    extra = {kinds[i]: w.layer_dense_bytes[i] - plain.layer_dense_bytes[i] for i in range(spec.n_layers)}
    assert extra == {"mamba": 16, "full": 40, "mlp": 32}
    assert w.layer_expert_bytes[1] - plain.layer_expert_bytes[1] == 2 * 8
    # the same per TP rank: the scalars are replicated, not split
    assert (
        weight_bytes(spec, tp=4).layer_dense_bytes[7] - weight_bytes(spec, "fp8_e4m3", tp=4).layer_dense_bytes[7] == 40
    )


@pytest.mark.parametrize(
    ("name", "layer", "modules"),
    [
        (NEMOTRON_FP8, 0, 2),  # Mamba-2: in_proj, out_proj
        (NEMOTRON_FP8, 7, 4),  # attention: q, k, v, o
        (NEMOTRON_FP8, 1, 4),  # MoE: shared up / down, fc1 / fc2_latent_proj
        ("deepseek-ai--DeepSeek-V3.2", 0, 5 + 3),  # MLA q_a, q_b, kv_a, kv_b, o + dense gate / up / down
        ("deepseek-ai--DeepSeek-V3.2", 3, 5 + 3),  # MLA + the shared expert's three
        ("Qwen--Qwen3-VL-8B-Instruct", 0, 4 + 3),
        ("moonshotai--Kimi-K3", 0, None),  # KDA: its module list is not kvcalc's
        ("deepseek-ai--DeepSeek-V4-Flash", 0, None),  # compressed MQA: not listed
    ],
)
def test_linear_modules(name, layer, modules):
    assert linear_modules(_hf(name), layer) == modules
