"""Flags that contradict each other, or would be ignored, are refused with one line naming them
(issue 11, user trial item 7), never settled silently: `-kvu -no-kvu` (click kept the last),
as `-fa off --flash-attn` already was; `--kv-dtype` beside both -ctk and -ctv (it set neither);
an empty item of plan's comma lists (`--gpu h100-sxm,,h200`, as `-s 8k,,32k`); the vLLM 0.33
flag --no-async-scheduling on 0.11; -kvu on the legacy llama.cpp and ollama (one unified cache)."""

from __future__ import annotations

import json

import pytest

M = "llama-3.1-8b"
LLAMA = ["capacity", M, "-e", "llamacpp", "-m", "1GiB"]
VLLM = ["capacity", M, "-e", "vllm", "-m", "10GiB"]


def one_line(r) -> str:
    assert r.exit_code == 2, r.output
    first, *rest = r.output.splitlines()
    assert rest == []  # one line (issue 23 item 7)
    return first


@pytest.mark.parametrize(
    "flags,line",
    [
        (["-kvu", "-no-kvu"], "error: -kvu and -no-kvu disagree; give one of them"),
        (["--no-kv-unified", "-kvu"], "error: --no-kv-unified and -kvu disagree; give one of them"),
        (
            ["--kv-unified", "-np", "2", "--no-kv-unified"],
            "error: --kv-unified and --no-kv-unified disagree; give one of them",
        ),
        (["-fa", "off", "--flash-attn"], "error: -fa off: --flash-attn and -fa off disagree; give one of them"),
    ],
)
def test_a_flag_and_its_negation_are_refused(cli, flags, line):
    assert one_line(cli(*LLAMA, *flags)) == line


def test_vllm_flag_pairs_too(cli):
    r = cli(*VLLM, "--async-scheduling", "--no-async-scheduling")
    assert one_line(r) == "error: --async-scheduling and --no-async-scheduling disagree; give one of them"
    r = cli(*VLLM, "--enable-prefix-caching", "--no-enable-prefix-caching")
    assert one_line(r) == "error: --enable-prefix-caching and --no-enable-prefix-caching disagree; give one of them"


def test_the_same_flag_twice_agrees_and_passes(cli):
    r = cli(*LLAMA, "-kvu", "--kv-unified", "-np", "2", "-f", "json")
    assert r.exit_code == 0, r.output


def test_a_flag_token_read_as_a_value_is_no_contradiction():
    """`--kv-dtype -no-kvu` gives --kv-dtype the value '-no-kvu' (click's parser): the scan skips it."""
    from kvcalc.cli.app import COMMANDS
    from kvcalc.cli.output import contradicting_options

    cmd = next(c for c in COMMANDS if c.name == "capacity").load(None)
    assert contradicting_options(cmd, ["m", "-kvu", "--kv-dtype", "-no-kvu"]) is None
    assert contradicting_options(cmd, ["m", "-kvu", "--", "-no-kvu"]) is None
    assert (
        contradicting_options(cmd, ["m", "-kvu", "--kv-dtype=f16", "-no-kvu"])
        == "-kvu and -no-kvu disagree; give one of them"
    )


@pytest.mark.parametrize(
    "cmd", [["estimate", M], ["capacity", M, "-m", "10GiB"], ["capacity", M, "-e", "llamacpp", "-m", "1GiB"]]
)
def test_kv_dtype_beside_both_sides_is_refused(cli, cmd):
    first = one_line(
        cli(
            *cmd,
            "--kv-dtype",
            "fp8" if "llamacpp" not in cmd else "q8_0",
            "-ctk",
            "fp16" if "llamacpp" not in cmd else "f16",
            "-ctv",
            "fp16" if "llamacpp" not in cmd else "f16",
        )
    )
    assert first.startswith("error: --kv-dtype ")
    assert "set both K and V, so it would be ignored; give --kv-dtype alone, or --k-dtype and --v-dtype" in first


def test_kv_dtype_beside_one_side_sets_the_other(cli):
    # K fp16 (2 B), V fp8 (1 B): 32 layers x 8 KV heads x 128 x (2 + 1) B = 98,304 B/token
    r = cli("estimate", M, "-s", "1k", "--kv-dtype", "fp8", "-ctk", "fp16", "-f", "json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert (d["k_dtype"], d["v_dtype"]) == ("fp16", "fp8_e4m3")
    assert d["kv_cache_bytes"] == 98_304 * 1024


def test_kv_dtype_beside_both_sides_in_the_api(gqa_spec):
    from kvcalc.errors import KvcalcError
    from kvcalc.requests import EstimateRequest

    with pytest.raises(KvcalcError) as e:
        EstimateRequest.build(gqa_spec, seq_len=1024, kv_dtype="fp8", k_dtype="fp16", v_dtype="fp16")
    assert (e.value.field, e.value.value) == ("kv_dtype", "fp8")


@pytest.mark.parametrize(
    "flag,value",
    [
        ("--gpu", "h100-sxm,,h200"),
        ("--gpu", "h100-sxm,"),
        ("--gpu", ",h200"),
        ("--kv-dtype", "fp8,,bf16"),
        ("--weight-dtype", "bf16,"),
    ],
)
def test_plan_list_with_an_empty_item(cli, flag, value):
    assert (
        one_line(cli("plan", M, flag, value))
        == f"error: {flag}: '{value}' has an empty item; write values separated by single commas"
    )


def test_plan_gpu_set_with_an_empty_device(cli):
    assert (
        one_line(cli("plan", M, "-e", "llamacpp", "--gpu", "h100-sxm+"))
        == "error: --gpu: 'h100-sxm+' has an empty item; write values separated by single commas"
    )


def test_plan_empty_gpu(cli):
    assert (
        one_line(cli("plan", M, "--gpu", ""))
        == "error: --gpu is empty; give names separated by commas, or leave --gpu out for the default"
    )


def test_plan_seq_len_list_is_refused_the_same_way(cli):
    assert (
        one_line(cli("sweep", M, "-s", "8k,,32k"))
        == "error: --seq-len: '8k,,32k' has an empty item; write values separated by single commas"
    )


@pytest.mark.parametrize("flag", ["--async-scheduling", "--no-async-scheduling"])
@pytest.mark.parametrize(
    "version,why",
    [
        (
            ["--vllm-version", "0.11"],
            (
                "vLLM 0.11 holds --max-num-batched-tokens in flight for a sliding-window "
                "request either way (SlidingWindowSpec.max_memory_usage_bytes)"
            ),
        ),
        (
            ["--vllm-v0"],
            "vLLM 0.6 (the V0 engine) keeps sliding-window layers at full length, with no tokens in flight",
        ),
    ],
)
def test_async_scheduling_only_on_033(cli, flag, version, why):
    assert (
        one_line(cli(*VLLM, flag, *version))
        == f"error: {flag} applies to --vllm-version 0.33 only (two batches in flight); {why}: "
        "drop it, or give --vllm-version 0.33"
    )


def test_async_scheduling_on_033_still_counts(cli):
    """gemma-3-27b (sliding layers): 0.33 holds 2 x 8,192 tokens in flight with async scheduling,
    8,192 without, so the concurrency figure differs (tests/engines/test_vllm_versions.py)."""
    on = cli(*VLLM[:1], "gemma-3-27b", *VLLM[2:], "-L", "32k", "-f", "json")
    off = cli(*VLLM[:1], "gemma-3-27b", *VLLM[2:], "-L", "32k", "--no-async-scheduling", "-f", "json")
    assert on.exit_code == off.exit_code == 0, on.output + off.output
    assert json.loads(on.stdout)["max_concurrency"] < json.loads(off.stdout)["max_concurrency"]


@pytest.mark.parametrize("flag", ["-kvu", "-no-kvu"])
@pytest.mark.parametrize("legacy,who", [(["--llamacpp-version", "legacy"], ""), (["--ollama"], " of ollama")])
def test_kv_unified_is_refused_on_legacy(cli, flag, legacy, who):
    name = "--kv-unified" if flag == "-kvu" else "--no-kv-unified"
    assert (
        one_line(cli(*LLAMA, *legacy, flag))
        == f"error: {name} applies to --llamacpp-version current only; the legacy llama.cpp{who} keeps one "
        "unified cache of n_ctx cells for every sequence whatever the flag: drop it"
    )
