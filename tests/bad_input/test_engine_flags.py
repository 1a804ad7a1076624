"""The engine options added for vLLM 0.33, SGLang's SWA pool and llama.cpp, given bad values:
one line naming the option, exit 2. Found by trying them as a new user would (the h-trial
session)."""

from __future__ import annotations

import json

import pytest

from tests.bad_input.harness import refused, run_kvcalc


@pytest.mark.parametrize("ratio", ["2", "1.0001"])
def test_swa_full_tokens_ratio_past_one_is_refused(ratio):
    # SGLang server_args.py, --swa-full-tokens-ratio help: "It should be between 0 and 1"; 2 was
    # taken and sized an SWA pool twice the full one
    r = run_kvcalc(
        "capacity", "gpt-oss-20b", "--engine", "sglang", "--kv-memory", "10GiB", "--swa-full-tokens-ratio", ratio
    )
    line = refused(r, "--swa-full-tokens-ratio")
    assert "must be in (0, 1]" in line and ratio in line, line


def test_swa_full_tokens_ratio_of_one_is_taken():
    r = run_kvcalc(
        "capacity",
        "gpt-oss-20b",
        "--engine",
        "sglang",
        "--kv-memory",
        "10GiB",
        "--swa-full-tokens-ratio",
        "1",
        "-f",
        "json",
    )
    assert r.code == 0, r.stderr


def test_batch_size_is_bounded_as_llama_cpp_parses_it():
    # llama.cpp's -b is an int32 (common/arg.cpp std::stoi), like -ub, whose bound kvcalc checks;
    # -b 99,999,999,999 was taken
    r = run_kvcalc("capacity", "gpt-oss-20b", "--engine", "llamacpp", "-c", "4096", "-b", "99999999999")
    line = refused(r, "--batch-size")
    assert "32-bit int n_batch (at most 2,147,483,647" in line, line


def test_a_gpu_without_a_compute_capability_is_not_called_no_gpu():
    # DeepSeek-V3 on vLLM with --gpu mi300x: the note said "assumed: no GPU or attention backend
    # given", though a GPU was given; an AMD GPU now takes ROCm's default MLA backend (TRITON_MLA,
    # vllm/platforms/rocm.py), which keeps the block size
    r = run_kvcalc(
        "capacity", "deepseek-v3", "--engine", "vllm", "--kv-memory", "10GiB", "--gpu", "mi300x", "-f", "json"
    )
    assert r.code == 0, r.stderr
    notes = json.loads(r.stdout)["notes"]
    assert not any("no GPU or attention backend given" in n for n in notes), notes
    assert any(
        n == "MLA attention backend TRITON_MLA (vLLM 0.33's first valid MLA backend on ROCm (VLLM_ROCM_USE_AITER "
        "unset)) stores auto (bf16) latent rows (576 values, 1,152 B a token), sets block size 16"
        for n in notes
    ), notes
    assert json.loads(r.stdout)["block_size"] == 16


@pytest.mark.parametrize(
    "layout, words",
    [
        # --count alone sets tp (`resolve_count`); the engine already is llamacpp and --tp was never
        # typed: was "use --engine llamacpp with --tp 1"
        (
            ("--count", "8"),
            "--count 8 alone sets --tp 8, but llama.cpp splits layers, not heads: pass --pp 8 "
            "(with --count 8) to split the layers over 8 GPUs",
        ),
        (
            ("--tp", "8"),
            "--tp 8: llama.cpp splits layers, not heads; give --tp 1 (--pp 8 splits the layers over 8 GPUs)",
        ),
    ],
)
def test_llamacpp_tp_refusal_names_what_was_typed(layout, words):
    r = run_kvcalc("estimate", "llama-3.1-8b", "--gpu", "h200", *layout, "--engine", "llamacpp")
    assert refused(r, layout[0]) == words


def test_llamacpp_count_with_pp_splits_layers():
    r = run_kvcalc(
        "estimate", "llama-3.1-8b", "--gpu", "h200", "--count", "8", "--pp", "8", "--engine", "llamacpp", "-f", "json"
    )
    assert r.code == 0, r.stderr
