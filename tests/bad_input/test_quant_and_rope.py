"""Bad `quantization_config` and `rope_scaling` in a Hugging Face config.json: one line naming the
file and the field, exit 2, within the harness's time bound. Found by trying the new input kinds
as a new user would (the h-trial session). The config is meta-llama/Llama-3.1-8B's own
(tests/data/hf), with one field replaced."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.bad_input.harness import ROOT, refused, run_kvcalc

LLAMA = json.loads((ROOT / "tests" / "data" / "hf" / "Llama-3.1-8B.json").read_text())


def config(tmp_path: Path, **fields) -> Path:
    p = tmp_path / "config.json"
    p.write_text(json.dumps({**LLAMA, **fields}))
    return p


def estimate(path: Path, *args: str):
    return run_kvcalc("estimate", str(path), "--gpu", "h100-sxm", *args)


@pytest.mark.parametrize(
    "pattern, words",
    [
        # nested repeats and a repeated alternation: each tried against a 38-character module name
        # backtracks 2^n ways (Python's `re` has no time limit): the run hung
        ("re:(.*)*(.*)*X", "a repeat inside a repeat"),
        ("re:(.|.)*(.|.)*X", "an alternation inside a repeat"),
        # seven `.*` in a row: 38^7 ways to split the name, 0.3 s per name, ~30 names per pattern
        ("re:.*.*.*.*.*.*.*X", "holds 7 repeats, more than 5"),
        # a pattern that is not a regular expression was silently taken as matching nothing
        ("re:((", "is not a regular expression"),
    ],
)
def test_unquantized_module_patterns_that_cannot_be_matched_are_refused(tmp_path, pattern, words):
    p = config(tmp_path, quantization_config={"quant_method": "fp8", "ignore": ["lm_head", pattern]})
    line = refused(estimate(p, "-s", "1k"), str(p), "quantization_config.ignore")
    assert words in line, line


def test_real_ignore_patterns_still_work(tmp_path):
    # compressed-tensors and fp8 checkpoints as published: `re:` with one or two repeats, plain names
    p = config(
        tmp_path,
        quantization_config={
            "quant_method": "fp8",
            "weight_block_size": [128, 128],
            "ignore": ["lm_head", "re:.*mlp.gate$", r"re:model\.layers\.\d+\.mlp\.gate"],
        },
    )
    r = estimate(p, "-s", "1k", "-f", "json")
    assert r.code == 0, r.stderr
    # Llama-3.1-8B with fp8 128 x 128 block scales: 6,979,321,856 matrix values in blocks of
    # 16,384 (+ 4 B of fp32 scale each): 6,979,321,856 + 425,984 x 4 = 6,981,025,792 B, plus the
    # bf16 embeddings, head and norms 2,101,878,784 B = 9,082,904,576 B
    assert json.loads(r.stdout)["weights_bytes_per_gpu"] == 9_082_904_576


@pytest.mark.parametrize("value", ["false", 1, None])
def test_bitsandbytes_flags_must_be_booleans(tmp_path, value):
    # transformers' BitsAndBytesConfig.post_init raises TypeError "load_in_4bit must be a boolean";
    # the string "false" was read as true (nf4: 6.03 GB instead of bf16's 16.06 GB)
    q = {"quant_method": "bitsandbytes", "load_in_4bit": value}
    if value is None:
        q = {"quant_method": "bitsandbytes", "load_in_8bit": "yes"}
    p = config(tmp_path, quantization_config=q)
    line = refused(estimate(p, "-s", "1k"), str(p), "quantization_config.load_in_")
    assert "must be true or false" in line, line


def test_a_weight_block_that_does_not_divide_says_weight_format(tmp_path):
    # fp8 with 7 x 7 blocks: 49 values per block; a Llama-3.1-8B layer's matrices hold
    # 218,103,808 values = 49 x 4,451,098 + 6, not whole blocks. The line said "use another KV dtype"
    p = config(tmp_path, quantization_config={"quant_method": "fp8", "weight_block_size": [7, 7]})
    line = refused(estimate(p, "-s", "1k"), "218103808 values")
    assert "KV dtype" not in line and "weight format" in line, line


@pytest.mark.parametrize(
    "factor, words",
    [
        # int(131,072 x 1e-300) = 0 tokens: the line blamed --seq-len, which the user never gave
        (1e-300, "makes the longest context 0 tokens"),
        # 131,072 x 1,000,000 = 131,072,000,000 tokens: again blamed on --seq-len
        (1_000_000.0, "makes the longest context 131,072,000,000 tokens"),
    ],
)
def test_a_rope_factor_that_makes_no_usable_context_is_refused(tmp_path, factor, words):
    p = config(tmp_path, rope_scaling={"rope_type": "linear", "factor": factor})
    line = refused(run_kvcalc("estimate", str(p)), str(p), "rope_scaling")
    assert words in line and "--seq-len" not in line, line


def test_a_small_linear_factor_still_scales(tmp_path):
    # vLLM multiplies by any linear factor: 131,072 x 0.5 = 65,536 tokens, the default --seq-len
    p = config(tmp_path, rope_scaling={"rope_type": "linear", "factor": 0.5})
    r = run_kvcalc("estimate", str(p), "-f", "json")
    assert r.code == 0, r.stderr
    # 2 x 32 layers x 8 KV heads x 128 x 65,536 tokens x 2 B = 8,589,934,592 B
    assert json.loads(r.stdout)["kv_cache_bytes"] == 8_589_934_592
