"""The 2026 families (issue 19) under the ideal engine: every config in
`tests/data/hf-configs-2026/` (copies of `shared/fixtures/hf-configs-2026/`, the publishers'
config.json files as shipped in ai-dynamo/aiconfigurator 095f58a) sized exactly, per token and per
sequence at 32,768 tokens in bf16, with the arithmetic beside each figure; the bundled YAMLs load to
the same spec; sibling variants the mappings never saw size exactly too; each refusal is one test.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvcalc.calc import kv_cache
from kvcalc.errors import ConfigError
from kvcalc.load.hf import model_from_hf_config
from kvcalc.load.models import load_model
from kvcalc.schema import Workload

DATA = Path(__file__).parents[1] / "data" / "hf-configs-2026"
T = 32_768


def _cfg(name: str) -> dict:
    return json.loads((DATA / f"{name}.json").read_text())


def _estimate(spec, seq_len=T):
    return kv_cache.estimate(spec, Workload(seq_len=seq_len, k_dtype="bf16", v_dtype="bf16"))


# file -> (KV bytes one token adds while inside every window, KV bytes of one sequence of 32,768
#          tokens, fixed state bytes of one sequence), bf16 (2 B a value)
FAMILIES = {
    # google/gemma-4-26B-A4B: 25 sliding layers x 8 KV heads x 256 (K and V) and 5 global layers x
    # 2 KV heads (num_global_key_value_heads) x 512 (global_head_dim); attention_k_eq_v shares the
    # projection, K and V are still cached apart.
    # per token: 25 x 2 x 8 x 256 x 2 + 5 x 2 x 2 x 512 x 2 = 204,800 + 20,480 = 225,280
    # 32k: 25 x 1,024 x 8,192 B + 5 x 32,768 x 4,096 B = 209,715,200 + 671,088,640 = 880,803,840
    "google--gemma-4-26B-A4B": (225_280, 880_803_840, 0),
    # XiaomiMiMo/MiMo-V2-Flash: 9 full layers (hybrid_layer_pattern 0) x 4 KV heads x (192 + 128) and
    # 39 SWA layers x 8 KV heads x (192 + 128), window sliding_window_size 128 + the query = 129.
    # per token: 9 x 4 x 320 x 2 + 39 x 8 x 320 x 2 = 23,040 + 199,680 = 222,720
    # 32k: 9 x 32,768 x 2,560 + 39 x 129 x 5,120 = 754,974,720 + 25,758,720 = 780,733,440
    "XiaomiMiMo--MiMo-V2-Flash": (222_720, 780_733_440, 0),
    # deepseek-ai/DeepSeek-V4-Flash: 43 layers, each a 128-token window of one 512-value K = V tensor
    # (1,024 B a token); compress_ratios[:43]: 21 CSA layers (4) add one 512-value entry + one 132 B
    # indexer key (128 fp8 + 4 B scale) per 4 tokens, 20 HCA layers (128) one 512-value entry per 128
    # tokens, 2 layers window only.
    # per token: 43 x 1,024 + 21 x (1,024 + 132) / 4 + 20 x 1,024 / 128 = 44,032 + 6,069 + 160 = 50,261
    # 32k: 43 x 128 x 1,024 + 21 x 8,192 x 1,156 + 20 x 256 x 1,024
    #    = 5,636,096 + 198,868,992 + 5,242,880 = 209,747,968
    # + the compressors' fp32 open windows (reference inference/model.py Compressor kv_state and
    #   score_state, 2 x coff r x coff D x 4 B; kv_cache.compressor_state_bytes): CSA 2 x 8 x 1,024 x 4
    #   + its indexer's 2 x 8 x 256 x 4 = 81,920, HCA 2 x 128 x 512 x 4 = 524,288:
    #   21 x 81,920 + 20 x 524,288 = 1,720,320 + 10,485,760 = 12,206,080 -> 221,954,048
    "deepseek-ai--DeepSeek-V4-Flash": (50_261, 209_747_968 + 12_206_080, 0),
    # nvidia/DeepSeek-V4-Flash-NVFP4: the same attention (only the expert weights differ)
    "nvidia--DeepSeek-V4-Flash-NVFP4": (50_261, 221_954_048, 0),
    # deepseek-ai/DeepSeek-V3.2: 61 MLA layers x (512 + 64) x 2 B + 61 indexer keys x 132 B
    # per token: 70,272 + 8,052 = 78,324; 32k: 78,324 x 32,768 = 2,566,520,832
    "deepseek-ai--DeepSeek-V3.2": (78_324, 2_566_520_832, 0),
    # zai-org/GLM-5.2: 78 MLA layers x 576 x 2 B; the indexer key (132 B) on the 21 "full" indexer_types
    # layers only. per token: 78 x 1,152 + 21 x 132 = 89,856 + 2,772 = 92,628
    # 32k: 92,628 x 32,768 = 3,035,234,304
    "zai-org--GLM-5.2": (92_628, 3_035_234_304, 0),
    # moonshotai/Kimi-K3: 24 MLA layers (full_attn_layers) x 576 x 2 B = 27,648 a token; 32k: 905,969,664;
    # 69 KDA layers (kda_layers) keep (3 x 96 x 128 x 3 conv + 96 x 128 x 128 recurrent) x 2 B
    # = (110,592 + 1,572,864) x 2 = 3,366,912 B each: 69 x 3,366,912 = 232,316,928
    "moonshotai--Kimi-K3": (27_648, 905_969_664, 232_316_928),
    # moonshotai/Kimi-K2.5 (text_config kimi_k2): 61 MLA layers x 576 x 2 B = 70,272; 32k: 2,302,672,896
    "moonshotai--Kimi-K2.5": (70_272, 2_302_672_896, 0),
    # MiniMaxAI/MiniMax-M3: 60 layers x 2 x 4 KV heads x 128 x 2 B = 122,880, plus the indexer key
    # (128 values in bf16 = 256 B) on the 57 sparse layers = 14,592: 137,472; 32k: 4,504,682,496
    "MiniMaxAI--MiniMax-M3": (137_472, 4_504_682_496, 0),
    # MiniMaxAI/MiniMax-M2.7: 62 layers x 2 x 8 x 128 x 2 B = 253,952; 32k: 8,321,499,136
    "MiniMaxAI--MiniMax-M2.7": (253_952, 8_321_499_136, 0),
    # stepfun-ai/Step-3.7-Flash: 45 layers x 2 x 8 x 128 x 2 B = 184,320 a token (12 full, 33 sliding
    # over 512); 32k: 12 x 32,768 x 4,096 + 33 x 512 x 4,096 = 1,610,612,736 + 69,206,016 = 1,679,818,752
    "stepfun-ai--Step-3.7-Flash": (184_320, 1_679_818_752, 0),
    # Qwen/Qwen3.5-27B: 16 full layers x 2 x 4 x 256 x 2 B = 65,536; 32k: 2,147,483,648; 48 Gated
    # DeltaNet layers x ((2 x 16 x 128 + 48 x 128) x 3 + 48 x 128 x 128) x 2 B = 48 x 1,634,304
    # = 78,446,592
    "Qwen--Qwen3.5-27B": (65_536, 2_147_483_648, 78_446_592),
    # Qwen/Qwen3-VL-8B-Instruct (text_config qwen3_vl_text): 36 x 2 x 8 x 128 x 2 B = 147,456;
    # 32k: 4,831,838,208
    "Qwen--Qwen3-VL-8B-Instruct": (147_456, 4_831_838_208, 0),
    # nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-FP8: 8 attention layers x 2 x 2 x 128 x 2 B = 8,192;
    # 32k: 268,435,456; 40 Mamba-2 layers keep the state
    "nvidia--NVIDIA-Nemotron-3-Super-120B-A12B-FP8": (8_192, 268_435_456, 86_343_680),
}


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_family_sized_exactly_under_the_ideal_engine(name):
    per_token, per_seq, state = FAMILIES[name]
    e = _estimate(load_model(DATA / f"{name}.json"))
    assert (e.kv_bytes_per_token, e.kv_cache_bytes, e.state_bytes) == (per_token, per_seq, state)


def test_every_fixture_is_in_the_table():
    assert sorted(p.stem for p in DATA.glob("*.json") if "hf_quant_config" not in p.name) == sorted(FAMILIES)


@pytest.mark.parametrize("name", ["google--gemma-4-26B-A4B", "deepseek-ai--DeepSeek-V4-Flash"])
def test_cli_estimate_prints_the_exact_numbers(name):
    from typer.testing import CliRunner

    from kvcalc.cli.app import app

    r = CliRunner().invoke(app, ["estimate", str(DATA / f"{name}.json"), "-s", "32k", "-f", "json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert (d["kv_bytes_per_token"], d["kv_cache_bytes"]) == FAMILIES[name][:2]
    assert "warning" not in r.stderr  # no plain-decoder guess anywhere


def test_deepseek_v4_formula_names_each_part():
    f = _estimate(load_model(DATA / "deepseek-ai--DeepSeek-V4-Flash.json")).formula
    assert "(K = V, once)" in f
    assert "21 layers x 1,156 B compressed entry x 8,192 entries (32,768 // 4)" in f
    assert "20 layers x 1,024 B compressed entry x 256 entries (32,768 // 128)" in f
    assert "21 layers x 81,920 B compressor state (fp32 open windows) x 1 batch" in f
    assert "20 layers x 524,288 B compressor state (fp32 open windows) x 1 batch" in f
    assert f.endswith("= 221,954,048 B")


# ----- the bundled YAMLs ---------------------------------------------------------------------

BUNDLED = {
    "deepseek-v4-flash": "deepseek-ai--DeepSeek-V4-Flash",
    "deepseek-v3.2": "deepseek-ai--DeepSeek-V3.2",
    "glm-5.2": "zai-org--GLM-5.2",
    "kimi-k3": "moonshotai--Kimi-K3",
    "kimi-k2.5": "moonshotai--Kimi-K2.5",
    "minimax-m3": "MiniMaxAI--MiniMax-M3",
    "minimax-m2.7": "MiniMaxAI--MiniMax-M2.7",
    "mimo-v2-flash": "XiaomiMiMo--MiMo-V2-Flash",
    "gemma-4-26b-a4b": "google--gemma-4-26B-A4B",
    "qwen3.5-27b": "Qwen--Qwen3.5-27B",
    "step-3.7-flash": "stepfun-ai--Step-3.7-Flash",
    "nemotron-3-super-120b-a12b": "nvidia--NVIDIA-Nemotron-3-Super-120B-A12B-FP8",
    "qwen3-vl-8b": "Qwen--Qwen3-VL-8B-Instruct",
}


@pytest.mark.parametrize("name", sorted(BUNDLED))
def test_bundled_yaml_loads_to_the_config_json_spec(name):
    yaml_spec = load_model(name).model_dump(exclude={"name", "source", "model_path"})
    hf_spec = load_model(DATA / f"{BUNDLED[name]}.json").model_dump(exclude={"name", "source", "model_path"})
    assert yaml_spec == hf_spec
    assert load_model(name).source.startswith(BUNDLED[name].replace("--", "/", 1) + " config.json")


# ----- sibling variants: the family mapping, a config it never saw ---------------------------
# tests/data/hf-configs-2026/siblings/README.md says where each published config comes from.


def test_deepseek_v4_pro_follows_from_the_family_mapping():
    # nvidia/DeepSeek-V4-Pro-NVFP4: 61 layers; compress_ratios[:61] = 128, 128, then 4 / 128
    # alternating from layer 2: 30 CSA + 31 HCA layers (the 62nd entry, 0, is the MTP layer's).
    # per token: 61 x 1,024 + 30 x 1,156 / 4 + 31 x 1,024 / 128 = 62,464 + 8,670 + 248 = 71,382
    # 32k: 61 x 128 x 1,024 + 30 x 8,192 x 1,156 + 31 x 256 x 1,024
    #    = 7,995,392 + 284,098,560 + 8,126,464 = 300,220,416
    # + compressor states 30 x 81,920 + 31 x 524,288 = 2,457,600 + 16,252,928 = 18,710,528 -> 318,930,944
    e = _estimate(load_model(DATA / "siblings" / "nvidia--DeepSeek-V4-Pro-NVFP4.json"))
    assert (e.kv_bytes_per_token, e.kv_cache_bytes) == (71_382, 300_220_416 + 18_710_528)
    assert {(b.kind, b.n_layers) for b in e.breakdown} == {("sliding+c4+indexer", 30), ("sliding+c128", 31)}


def test_qwen3_5_397b_follows_from_the_family_mapping():
    # Qwen/Qwen3.5-397B-A17B (text_config qwen3_5_moe_text): 15 full layers x 2 x 2 KV heads x 256 x 2 B
    # = 30,720 a token; 32k: 1,006,632,960; 45 Gated DeltaNet layers x ((2 x 16 x 128 + 64 x 128) x 3
    # + 64 x 128 x 128) x 2 B = 45 x 2,170,880 = 97,689,600
    e = _estimate(load_model(DATA / "siblings" / "Qwen--Qwen3.5-397B-A17B.json"))
    assert (e.kv_bytes_per_token, e.kv_cache_bytes, e.state_bytes) == (30_720, 1_006_632_960, 97_689_600)


def test_gemma4_kv_shared_layers_cache_nothing():
    # Gemma-4-26B-A4B's config with num_kv_shared_layers 10 (as Gemma-3n / the small Gemma-4s): layers
    # 20-29 read the cache of the last earlier layer of their type, so 17 sliding + 3 full layers cache:
    # 17 x 1,024 x 8,192 + 3 x 32,768 x 4,096 = 142,606,336 + 402,653,184 = 545,259,520
    cfg = _cfg("google--gemma-4-26B-A4B")
    cfg["text_config"] = {**cfg["text_config"], "num_kv_shared_layers": 10}
    spec = model_from_hf_config(cfg, "g.json")
    assert _estimate(spec).kv_cache_bytes == 545_259_520
    # the last earlier sliding layer is 19, the last earlier full one 17 ((17 + 1) % 6 == 0)
    assert [x.kv_source for x in spec.layers[20:]] == [19, 19, 19, 17, 19, 19, 19, 19, 19, 17]


# ----- refusals, one each --------------------------------------------------------------------


def _refused(cfg: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        model_from_hf_config(cfg, "c.json")


def test_minimax_lightning_layers_refused():
    cfg = _cfg("MiniMaxAI--MiniMax-M2.7")
    cfg["attn_type_list"] = [0] + cfg["attn_type_list"][1:]
    _refused(cfg, "field 'attn_type_list': lists a layer other than 1 .*lightning attention")


def test_minimax_m3_index_value_refused():
    cfg = _cfg("MiniMaxAI--MiniMax-M3")
    sparse = cfg["sparse_attention_config"]
    cfg["sparse_attention_config"] = {**sparse, "sparse_disable_index_value": [0] * 60}
    _refused(cfg, "field 'sparse_attention_config.sparse_disable_index_value': must be 1 on every sparse layer")


def test_mimo_swa_heads_disagreeing_with_transformers_refused():
    cfg = {**_cfg("XiaomiMiMo--MiMo-V2-Flash"), "swa_num_key_value_heads": 16}
    _refused(cfg, "field 'swa_num_key_value_heads': is 16, but transformers' MiMo-V2-Flash gives its sliding layers 8")


def test_deepseek_v4_unknown_compress_ratio_refused():
    cfg = _cfg("deepseek-ai--DeepSeek-V4-Flash")
    cfg["compress_ratios"] = [8] + cfg["compress_ratios"][1:]
    _refused(cfg, "field 'compress_ratios': must list 0 .*, 4 \\(CSA\\) or 128 \\(HCA\\)")


def test_deepseek_v4_more_than_one_kv_head_refused():
    _refused(
        {**_cfg("deepseek-ai--DeepSeek-V4-Flash"), "num_key_value_heads": 2},
        "field 'num_key_value_heads': is 2; DeepSeek-V4's attention is shared-KV MQA",
    )


def test_step_sliding_kv_heads_of_their_own_refused():
    cfg = {**_cfg("stepfun-ai--Step-3.7-Flash"), "attention_other_setting": {"num_attention_groups": 4}}
    _refused(cfg, "field 'attention_other_setting': gives num_attention_groups 4 for the sliding layers")


def test_kimi_linear_layer_in_neither_list_refused():
    cfg = _cfg("moonshotai--Kimi-K3")
    lin = cfg["text_config"]["linear_attn_config"]
    cfg["text_config"]["linear_attn_config"] = {**lin, "kda_layers": lin["kda_layers"][1:]}
    _refused(cfg, "field 'linear_attn_config': layer 1 is in neither full_attn_layers nor kda_layers")


def test_glm_dsa_indexer_types_of_the_wrong_length_refused():
    cfg = _cfg("zai-org--GLM-5.2")
    cfg["indexer_types"] = cfg["indexer_types"][:-1]
    _refused(cfg, "field 'indexer_types': must list full or shared for each of the 78 layers")


def test_dense_layer_after_sparse_ones_refused():
    cfg = _cfg("XiaomiMiMo--MiMo-V2-Flash")
    cfg["moe_layer_freq"] = cfg["moe_layer_freq"][:-1] + [0]
    _refused(cfg, "field 'moe_layer_freq': places dense layers after sparse ones")


def test_unmapped_2026_type_with_its_kv_fields_refused_naming_them():
    # Gemma-4's text config under a model_type kvcalc does not map: its global_head_dim and
    # num_global_key_value_heads are cache fields a plain decoder would ignore
    cfg = {**_cfg("google--gemma-4-26B-A4B")["text_config"], "model_type": "gemma5_text"}
    _refused(
        cfg, "model_type 'gemma5_text' is not one kvcalc maps, and its .*global_head_dim.*num_global_key_value_heads"
    )


# ----- weights: published parameter counts ---------------------------------------------------


def test_gemma4_26b_a4b_parameters_match_the_published_count():
    # Google's Gemma-4-26B-A4B model card: 25.2B total, 3.8B active (as quoted by vast.ai/model/
    # gemma-4-26b-a4b-it and llmradar.eu). kvcalc counts the text model: 30 layers of attention (25
    # sliding: q 2,816 x 16 x 256, k and v 2,816 x 8 x 256, o; 5 global: head 512, k only, 2 KV heads:
    # attention_k_eq_v), a dense MLP of 2,112 beside 128 experts of 704 (8 active), and the tied
    # 262,144 x 2,816 embedding.
    from kvcalc.calc.weights import param_counts

    total, active = param_counts(load_model("gemma-4-26b-a4b"))
    assert (total, active) == (25_232_613_120, 3_822_001_920)
    assert (round(total / 1e9, 1), round(active / 1e9, 1)) == (25.2, 3.8)


def test_gemma4_global_layers_have_no_v_projection():
    from kvcalc.calc.weights import layer_params

    spec = load_model("gemma-4-26b-a4b")
    # global layer 5: q 2,816 x 16 x 512 + k 2,816 x 2 x 512 (no v: attention_k_eq_v) + o 16 x 512 x 2,816
    # = 23,068,672 + 2,883,584 + 23,068,672 = 49,020,928; plus the dense MLP 3 x 2,816 x 2,112 = 17,842,176
    assert layer_params(spec, 5).linear == 49_020_928 + 17_842_176


def test_weights_of_an_uncounted_architecture_refused():
    # a DeepSeek-V4 config without o_groups / hc_mult: the weight shapes are not guessed
    from kvcalc.calc.weights import param_counts
    from kvcalc.errors import KvcalcError

    cfg = {k: v for k, v in _cfg("deepseek-ai--DeepSeek-V4-Flash").items() if k not in ("o_groups", "hc_mult")}
    with pytest.raises(
        KvcalcError, match="the config gives no o_groups, hc_mult .DeepSeek-V4's weight shapes.; give n_params"
    ):
        param_counts(model_from_hf_config(cfg))


def test_mtp_layers_counted_apart():
    # zai-org/GLM-5.2: num_nextn_predict_layers 1: one MoE layer like the last (attention + 256 experts of
    # 2,048 + a shared one + router + norms) + eh_proj 2 x 6,144 x 6,144 + 3 norms of 6,144; the main
    # model's count leaves it out
    from kvcalc.calc.weights import layer_params, mtp_params

    spec = load_model("glm-5.2")
    last = layer_params(spec, 77).total
    assert mtp_params(spec) == last + 2 * 6_144 * 6_144 + 3 * 6_144 == 9_943_548_416


# ----- NVFP4 / FP8 checkpoints: hf_quant_config.json beside config.json -------------------------


def test_nvfp4_experts_from_hf_quant_config():
    # nvidia/DeepSeek-V4-Flash-NVFP4: hf_quant_config.json quant_algo MIXED_PRECISION, every quantized
    # module a layer's ffn.experts in NVFP4; config.json's quantization_config (fp8, e8m0 block scales:
    # expert_dtype fp4, vLLM 0.33.0 deepseek_v4/quant_config.py is_scale_e8m0) for the rest
    spec = load_model(DATA / "nvidia--DeepSeek-V4-Flash-NVFP4.json")
    assert (spec.weight_dtype, spec.expert_weight_dtype) == ("fp8_e4m3:b128:e8m0", "nvfp4")
    assert spec.expert_tensor_scale_bytes == 8  # weight_scale_2 + input_scale, fp32, per expert matrix
    assert spec.source.endswith("; weight formats from hf_quant_config.json)")
    # DeepSeek's own checkpoint: expert_dtype fp4 = MXFP4 experts (vLLM 0.33.0 deepseek_v4/quant_config.py)
    assert load_model(DATA / "deepseek-ai--DeepSeek-V4-Flash.json").expert_weight_dtype == "mxfp4"


def test_fp8_checkpoint_from_hf_quant_config(tmp_path):
    # nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-FP8: config.json has no quantization_config; its
    # hf_quant_config.json says quant_algo FP8 (per-tensor scales). In a folder it is read the same way.
    name = "nvidia--NVIDIA-Nemotron-3-Super-120B-A12B-FP8"
    assert load_model(DATA / f"{name}.json").weight_dtype == "fp8_e4m3"
    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "config.json").write_text((DATA / f"{name}.json").read_text())
    assert load_model(folder).weight_dtype is None  # no file says fp8: the model dtype
    (folder / "hf_quant_config.json").write_text((DATA / f"{name}.hf_quant_config.json").read_text())
    assert load_model(folder).weight_dtype == "fp8_e4m3"


def _hf_quant(quantization: dict, name: str = "nvidia--NVIDIA-Nemotron-3-Super-120B-A12B-FP8"):
    return model_from_hf_config(_cfg(name), name, hf_quant={"quantization": quantization})


@pytest.mark.parametrize(
    ("quantization", "scales"),
    [
        # (linear_tensor_scale_bytes, expert_tensor_scale_bytes, kv_scale_bytes): vLLM 0.33.0 modelopt.py
        # KFp8StaticTensor / KNvfp4Static / ModelOptFp8MoEMethod / ModelOptNvFp4FusedMoE, two fp32
        # scalars per quantized module; kv_cache.py k_scale + v_scale per attention layer
        ({"quant_algo": "FP8", "kv_cache_quant_algo": "FP8"}, (8, 8, 8)),  # the published file
        ({"quant_algo": "FP8", "kv_cache_quant_algo": None}, (8, 8, 0)),
        ({"quant_algo": "NVFP4"}, (8, 8, 0)),
        # attention excluded, the experts quantized (read as experts only): scales on the experts only
        ({"quant_algo": "NVFP4", "exclude_modules": ["*self_attn*"]}, (0, 8, 0)),
        (
            {
                "quant_algo": "MIXED_PRECISION",
                "kv_cache_quant_algo": "FP8",
                "quantized_layers": {"layers.1.mlp.experts": {"quant_algo": "FP8"}},
            },
            (0, 8, 8),
        ),
    ],
)
def test_modelopt_tensor_scales(quantization, scales):
    spec = _hf_quant(quantization)
    assert (spec.linear_tensor_scale_bytes, spec.expert_tensor_scale_bytes, spec.kv_scale_bytes) == scales


def test_modelopt_dense_model_has_no_expert_scales():
    spec = _hf_quant({"quant_algo": "FP8"}, "Qwen--Qwen3-VL-8B-Instruct")
    assert (spec.linear_tensor_scale_bytes, spec.expert_tensor_scale_bytes, spec.kv_scale_bytes) == (8, 0, 0)


def test_hf_quant_config_without_quantization_refused(tmp_path):
    (tmp_path / "config.json").write_text((DATA / "Qwen--Qwen3-VL-8B-Instruct.json").read_text())
    (tmp_path / "hf_quant_config.json").write_text(json.dumps({"producer": {"name": "modelopt"}}))
    with pytest.raises(ConfigError, match="field 'quantization': must hold a `quantization` object"):
        load_model(tmp_path)


# ----- a checkpoint's K / V projection widths held against config.json --------------------------


def _write_safetensors(path: Path, shapes: dict[str, tuple[int, ...]]) -> None:
    """A safetensors file as its format defines it (an 8-byte little-endian header length, the JSON
    header, the data), bf16 tensors of zeros: no torch needed."""
    import struct

    header, offset = {}, 0
    for name, shape in shapes.items():
        n = 2
        for d in shape:
            n *= d
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + bytes(offset))


TINY = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "num_hidden_layers": 2,
    "vocab_size": 32,
    "torch_dtype": "bfloat16",
}


def _tiny_checkpoint(folder: Path, v_rows_layer1: int) -> Path:
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(TINY))
    shapes = {"model.embed_tokens.weight": (32, 64), "model.norm.weight": (64,), "lm_head.weight": (32, 64)}
    for i in range(2):
        p = f"model.layers.{i}."
        shapes.update(
            {
                p + "self_attn.q_proj.weight": (64, 64),
                p + "self_attn.k_proj.weight": (32, 64),
                p + "self_attn.v_proj.weight": (v_rows_layer1 if i else 32, 64),
                p + "self_attn.o_proj.weight": (64, 64),
                p + "mlp.gate_proj.weight": (128, 64),
                p + "mlp.up_proj.weight": (128, 64),
                p + "mlp.down_proj.weight": (64, 128),
                p + "input_layernorm.weight": (64,),
                p + "post_attention_layernorm.weight": (64,),
            }
        )
    _write_safetensors(folder / "model.safetensors", shapes)
    return folder


def test_checkpoint_projection_widths_agree_with_config():
    # 2 KV heads x 16 = 32 rows in k_proj and v_proj of every layer: loads, weights from the headers
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        spec = load_model(_tiny_checkpoint(Path(d) / "ok", 32))
        assert spec.checkpoint is not None and kv_cache.kv_bytes_per_token(spec, "bf16") == 2 * 2 * 2 * 16 * 2


def test_checkpoint_projection_width_disagreeing_with_config_refused(tmp_path):
    # layer 1's v_proj has 64 rows (4 heads of 16) where config.json gives 2 KV heads x 16 = 32
    folder = _tiny_checkpoint(tmp_path / "bad", 64)
    with pytest.raises(
        ConfigError,
        match="layer 1: the checkpoint's model.layers.1.self_attn.v_proj.weight is 64 wide "
        "\\(64 x 64\\), but config.json gives 32 \\(n_kv_heads x v_head_dim\\)",
    ):
        load_model(folder)


def test_mimo_v2_flash_parameters_match_the_published_count():
    # XiaomiMiMo/MiMo-V2-Flash README: "309B total parameters and 15B active parameters". kvcalc: 48
    # layers (9 full: 4 KV heads; 39 SWA: 8 KV heads, K 192, V 128, and 64 sink logits each), layer 0
    # dense (16,384), 47 layers of 256 experts of 2,048 (8 active), untied 152,576 x 4,096 embeddings
    from kvcalc.calc.weights import layer_params, param_counts

    spec = load_model("mimo-v2-flash")
    total, active = param_counts(spec)
    assert (total, active) == (308_778_768_832, 15_445_924_288)
    assert (round(total / 1e9), round(active / 1e9)) == (309, 15)
    # the sinks are weights: layer 1 (SWA) has 64 values more than its norms (2 x 4,096) and router
    # (4,096 x 256); layer 5 (full) none: q 4,096 x 64 x 192 + k 4,096 x 4 x 192 + v 4,096 x 4 x 128
    # + o 64 x 128 x 4,096 = 50,331,648 + 3,145,728 + 2,097,152 + 33,554,432 = 89,128,960 of attention
    assert layer_params(spec, 1).other == 2 * 4_096 + 4_096 * 256 + 64
    assert layer_params(spec, 0).other == 2 * 4_096
    assert layer_params(spec, 5).linear == 89_128_960
