"""Errors a fresh user met in the trial of issue #11 (items 1 and 2 of h-fixinputs): each one
now names the flag, the file or the field, and the fix, in one line, exit 2. Every case runs
the real CLI (`harness.run_kvcalc`) and compares the whole line where it is short."""

from __future__ import annotations

import json
import struct
import sys

import pytest

from tests.bad_input.harness import ROOT, refused, run_kvcalc

# ----- item 1: group options name the flag and the fix ------------------------------------


def test_group_size_zero_names_the_flag():
    r = run_kvcalc("estimate", "llama-3.1-8b", "--quant-group-size", "0", "--kv-dtype", "int4")
    assert refused(r) == "--quant-group-size must be a positive even integer, got 0"


def test_odd_int4_group_names_the_flag_and_int4():
    # int4 packs two values per byte: a group of 33 values is 16.5 B
    r = run_kvcalc("estimate", "llama-3.1-8b", "--group-size", "33", "--kv-dtype", "int4")
    assert refused(r) == "--quant-group-size must be a positive even integer for int4, got 33"


def test_group_size_without_an_int_dtype_says_which_flag_to_add():
    # llama-3.1-8b's dtype is bf16, which has no group scales
    r = run_kvcalc("estimate", "llama-3.1-8b", "--quant-group-size", "64")
    assert refused(r) == (
        "--quant-group-size applies to int8 and int4 only, not bf16 (the model's dtype); "
        "give --kv-dtype int8 or --kv-dtype int4"
    )


def test_group_size_beside_an_fp8_cache_is_refused_like_bf16():
    # fp8 with group scales exists only as a weight format (fp8_e4m3:g64): a cache keeps group
    # scales in int8 / int4 only, so the flag and the fix are named (not "is a weight format")
    r = run_kvcalc("estimate", "llama-3.1-8b", "--kv-dtype", "fp8", "--quant-group-size", "64")
    assert refused(r) == (
        "--quant-group-size applies to int8 and int4 only, not fp8_e4m3; give --kv-dtype int8 or --kv-dtype int4"
    )
    r = run_kvcalc("estimate", "llama-3.1-8b", "--k-dtype", "fp8_e5m2", "--scale-dtype", "fp32")
    assert refused(r) == (
        "--scale-dtype applies to int8 and int4 only, not fp8_e5m2; give --k-dtype int8 or --k-dtype int4"
    )


def test_both_group_options_on_q8_0_are_named():
    r = run_kvcalc(
        "estimate", "llama-3.1-8b", "--kv-dtype", "q8_0", "--quant-group-size", "64", "--scale-dtype", "fp32"
    )
    assert refused(r) == (
        "--quant-group-size and --scale-dtype apply to int8 and int4 only, not q8_0; "
        "give --kv-dtype int8 or --kv-dtype int4"
    )


def test_group_in_the_name_is_named_by_the_name():
    r = run_kvcalc("estimate", "llama-3.1-8b", "--kv-dtype", "int4:g0")
    assert refused(r) == "'int4:g0': the group size must be a positive even integer, got 0"


# ----- item 1: a model file that cannot size the weights is named, with that file's fix ---------

YAML_NO_VOCAB = """\
name: x
n_layers: 2
n_heads: 4
n_kv_heads: 2
head_dim: 8
hidden_size: 32
max_position_embeddings: 64
"""

CONFIG_NO_VOCAB = {
    "model_type": "llama",
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "hidden_size": 32,
    "intermediate_size": 64,
    "max_position_embeddings": 64,
    "torch_dtype": "bfloat16",
}


@pytest.mark.parametrize(
    "command",
    [["estimate"], ["sweep", "--seq-len", "32,64", "--batch", "1"], ["plan", "--seq-len", "64"]],
    ids=["estimate", "sweep", "plan"],
)
def test_yaml_without_vocab_size_names_the_file(tmp_path, command):
    p = tmp_path / "my.yaml"
    p.write_text(YAML_NO_VOCAB)
    r = run_kvcalc(command[0], p, *command[1:], "--gpu", "h100-sxm")
    assert refused(r) == (
        f"{p}: cannot count the parameters of x (for the weight memory) without vocab_size; "
        "add vocab_size to that file, or give the parameter count there as n_params "
        "(and n_active_params for a mixture of experts)"
    )


@pytest.mark.parametrize("as_folder", [False, True], ids=["file", "folder"])
def test_config_json_without_vocab_size_is_not_told_to_add_n_params(tmp_path, as_folder):
    p = tmp_path / "config.json"
    p.write_text(json.dumps(CONFIG_NO_VOCAB))
    line = refused(run_kvcalc("estimate", tmp_path if as_folder else p, "--gpu", "h100-sxm"))
    assert line.startswith(f"{p}: cannot count the parameters of ")
    assert "add vocab_size to the config.json, or put the checkpoint's *.safetensors files beside it" in line
    # n_params is a kvcalc YAML field, not a config.json one: it is offered only through a YAML
    assert "or give n_params" not in line and "a kvcalc YAML may give n_params instead" in line


def test_yaml_without_vocab_size_still_sizes_the_kv_cache(tmp_path):
    p = tmp_path / "my.yaml"
    p.write_text(YAML_NO_VOCAB)
    r = run_kvcalc("estimate", p, "-f", "json")
    # no --gpu: no weights to count; 2 x 2 layers x 2 KV heads x 8 head_dim x 2 B x 64 tokens = 8,192 B
    assert r.code == 0 and json.loads(r.stdout)["kv_cache_bytes"] == 8192


# ----- item 1: a safetensors header with an unknown dtype says so -----------------------------


def _header_file(obj: object) -> bytes:
    raw = json.dumps(obj).encode()
    return struct.pack("<Q", len(raw)) + raw


@pytest.mark.parametrize(
    "entry, words",
    [
        (
            {"dtype": "Q9", "shape": [2], "data_offsets": [0, 4]},
            (
                "'Q9' is not a safetensors dtype; the known ones are: BF16, BOOL, C64, F16, F32, F4, F64, F6_E2M3, F6_E3M2, "
                "F8_E4M3, F8_E5M2, F8_E8M0, I16, I32, I64, I8, U16, U32, U64, U8"
            ),
        ),
        ({"shape": [2], "data_offsets": [0, 4]}, "has no dtype; give one of the safetensors dtypes: BF16, BOOL,"),
        ({"dtype": "F16", "shape": "2", "data_offsets": [0, 4]}, 'shape "2" is not a list of whole numbers'),
        (
            {"dtype": "F16", "shape": [2], "data_offsets": [4, 0]},
            "data_offsets [4, 0] is not [begin, end] with 0 <= begin <= end",
        ),
        ([1, 2], "is [1, 2], not a tensor entry"),
    ],
    ids=["unknown-dtype", "no-dtype", "shape", "offsets", "not-an-object"],
)
def test_safetensors_entry_problems_are_named(tmp_path, entry, words):
    folder = tmp_path / "ck"
    folder.mkdir()
    (folder / "config.json").write_text((ROOT / "tests" / "data" / "hf" / "Llama-3.1-8B.json").read_text())
    (folder / "model.safetensors").write_bytes(_header_file({"model.embed_tokens.weight": entry}))
    line = refused(run_kvcalc("estimate", folder, "-s", "1k"))
    assert line.startswith(f"{folder / 'model.safetensors'}: field 'model.embed_tokens.weight': {words}"), line


# ----- item 2: a llama.cpp file type as --weight-dtype on a model that IS a GGUF file ------------


def test_file_type_on_a_gguf_model_says_to_drop_the_option(tmp_path):
    pytest.importorskip("gguf", reason="the gguf package is not installed")
    sys.path.insert(0, str(ROOT / "tests" / "load"))
    from gguf_files import ENDS, LLAMA_8B_KV, tiny_layers, write_gguf

    p = write_gguf(tmp_path / "tiny.gguf", "llama", LLAMA_8B_KV, tiny_layers(32) + ENDS)
    for command in (["estimate", "--gpu", "h100-sxm"], ["plan", "-s", "1k"]):
        line = refused(run_kvcalc(command[0], p, *command[1:], "--weight-dtype", "q4_K_M"))
        assert line == (
            f"--weight-dtype q4_K_M: 'q4_K_M' is a llama.cpp file type, not one format, and the model "
            f"{p} is a GGUF file whose tensors are already counted as stored: drop --weight-dtype, or "
            "give one format to count the architecture in it instead (did you mean q4_k, every matrix "
            "in Q4_K?)"
        )
        assert "give the .gguf file as the model" not in line
    # a bundled model keeps the advice to give the .gguf file
    line = refused(run_kvcalc("estimate", "llama-3.1-8b", "--gpu", "h100-sxm", "--weight-dtype", "q4_K_M"))
    assert "give the .gguf file as the model to count its tensors as stored" in line


def _nemotron_mixed(cfg: dict) -> dict:
    p = cfg["hybrid_override_pattern"]
    return {**cfg, "hybrid_override_pattern": p[:1] + "-" + p[2:]}  # a dense MLP block among the MoE ones


@pytest.mark.parametrize(
    ("name", "change"),
    [
        # the published DeepSeek-V4, Kimi-K3, MiniMax-M3 and Nemotron-3 configs are counted now, and
        # Kimi Linear's low-rank KDA gate too (tests/calc/test_weights_2026.py); what kvcalc still does
        # not count, derived from them:
        ("deepseek-ai--DeepSeek-V4-Flash.json", lambda c: {k: v for k, v in c.items() if k != "o_groups"}),
        ("MiniMaxAI--MiniMax-M3.json", lambda c: {**c, "attention_output_gate": True}),
        ("nvidia--NVIDIA-Nemotron-3-Super-120B-A12B-FP8.json", _nemotron_mixed),
    ],
)
def test_uncounted_2026_weights_say_where_n_params_goes(name, change, tmp_path):
    """`estimate CONFIG --gpu` on a family whose weights kvcalc does not count: n_params is a
    kvcalc YAML field, so the line says how to get one (not only 'give n_params')."""
    cfg = change(json.loads((ROOT / "tests/data/hf-configs-2026" / name).read_text()))
    path = tmp_path / name
    path.write_text(json.dumps(cfg))
    line = refused(run_kvcalc("estimate", path, "-s", "32k", "--gpu", "h200", "--tp", "8"))
    assert "give n_params (and n_active_params) in a kvcalc YAML (`kvcalc import` writes one" in line


def test_deepseek_v4_with_n_params_plans_its_compressed_caches(tmp_path):
    """`estimate V4.yaml --gpu h200` once n_params is given: the GPU plan's KV per GPU counted
    the sliding windows only (43 x 1,024 B x 128 = 5,636,096 B) and the consistency check
    crashed ('internal error: RuntimeError: KV per GPU ...'). deepseek-ai/DeepSeek-V4-Flash
    config.json, 32,768 tokens, bf16: 43 x 1,024 x 128 + 21 x 1,156 x 8,192 (CSA entry + indexer
    key, one per 4 tokens) + 20 x 1,024 x 256 (HCA, one per 128) = 209,747,968 B, + the compressors'
    fp32 open windows 21 x 81,920 + 20 x 524,288 = 12,206,080 B (`kv_cache.compressor_state_bytes`)."""
    y = tmp_path / "v4.yaml"
    assert (
        run_kvcalc("import", ROOT / "tests/data/hf-configs-2026/deepseek-ai--DeepSeek-V4-Flash.json", "-o", y).code == 0
    )
    # n_params made up for the test: any count reaches the plan
    y.write_text(y.read_text() + "n_params: 284000000000\nn_active_params: 13000000000\n")
    r = run_kvcalc("estimate", y, "-s", "32k", "--gpu", "h200", "--tp", "8", "-f", "json")
    assert r.code == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["kv_cache_bytes_per_gpu"] == 209_747_968 + 12_206_080
    assert out["kv_cache_bytes"] == 209_747_968 + 12_206_080


def test_whole_request_longer_than_seq_len_refused():
    """`-s 32k --input-len 40000 --output-len 1000`: the KV table sized 32,768 tokens while the
    request rows sized 41,000 (vLLM refuses a request past --max-model-len)."""
    line = refused(
        run_kvcalc(
            "estimate", "llama-3.1-8b", "-s", "32k", "--gpu", "h200", "--input-len", "40000", "--output-len", "1000"
        )
    )
    assert line == (
        "--input-len 40000: with --output-len 1,000 a request is 41,000 tokens, past --seq-len 32,768 "
        "(an engine's max-model-len refuses such a request): raise --seq-len, or leave it out (it "
        "defaults to input + output)"
    )


def test_engine_start_up_failure_says_gb_and_gib():
    """GLM-5.2 in bf16 on 8 x H200 (188.20 GB of weights a GPU against a 135.68 GB budget): the
    warning's negative KV memory carries GB and GiB like every printed size."""
    r = run_kvcalc(
        "estimate",
        ROOT / "tests/data/hf-configs-2026/zai-org--GLM-5.2.json",
        "-s",
        "32k",
        "--engine",
        "vllm",
        "--gpu",
        "h200",
        "--tp",
        "8",
        "--kv-dtype",
        "fp8",
    )
    assert r.code == 0, r.stderr
    line = next(x for x in r.stderr.splitlines() if "would fail at start-up" in x)
    assert "the plan leaves -53,345,755,546 B (-53.35 GB, -49.68 GiB) for the KV cache" in line
