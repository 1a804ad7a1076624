"""The KV dtype is parsed once, where the request is built, against the chosen engine's table
(issue 23, "validation once"): `estimate --engine vllm --kv-dtype turboquant_k8v4` was refused as
an unknown dtype because `EstimateRequest.build` read the name with kvcalc's generic format
names before it knew the engine, while `capacity` asked the engine profile. Both now ask the
profile (`EngineProfile.kv_formats`), and a name neither knows is refused naming the engine
version and what it accepts."""

from __future__ import annotations

import json

import pytest


def _engine_part(cli, *args: str) -> dict:
    r = cli(*args, "-f", "json")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_estimate_takes_a_vllm_turboquant_dtype_as_capacity_does(cli):
    # Llama-3.1-8B (meta-llama/Llama-3.1-8B config.json: 32 layers, 8 KV heads, head_dim 128), vLLM
    # 0.33 turboquant_k8v4: 1,568 B a token per layer on 28 layers, the first and last two layers
    # kept in bf16 (2 x 8 x 128 x 2 B = 4,096 B): 28 x 1,568 + 4 x 4,096 = 60,288 B a token; a block
    # of 48 tokens is 48 x 60,288 = 2,893,824 B. 8,192 tokens need ceil(8,192 / 48) = 171 blocks, plus
    # vLLM's null block = 172 blocks = 497,737,728 B.
    est = _engine_part(cli, "estimate", "llama-3.1-8b", "--engine", "vllm", "--kv-dtype", "turboquant_k8v4", "-s", "8k")
    assert est["kv_cache_dtype"] == "turboquant_k8v4"
    assert (est["block_size"], est["page_size_bytes"], est["num_gpu_blocks"]) == (48, 2_893_824, 172)
    assert est["kv_memory_bytes"] == 172 * 2_893_824 == 497_737_728
    cap = _engine_part(
        cli,
        "capacity",
        "llama-3.1-8b",
        "--engine",
        "vllm",
        "--kv-dtype",
        "turboquant_k8v4",
        "--kv-memory",
        "497737728B",
        "-s",
        "8k",
    )
    for key in ("kv_cache_dtype", "block_size", "page_size_bytes", "num_gpu_blocks", "kv_cache_tokens"):
        assert est[key] == cap[key], key


@pytest.mark.parametrize("dtype", ["fp8_per_token_head", "int8_per_token_head", "turboquant_4bit_nc"])
def test_estimate_takes_every_vllm_dtype_capacity_takes(cli, dtype):
    r = cli("estimate", "llama-3.1-8b", "--engine", "vllm", "--kv-dtype", dtype, "-s", "8k", "-f", "json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["kv_cache_dtype"] == dtype


def test_fp8_ds_mla_on_sparse_mla_and_its_refusal_elsewhere(cli):
    r = cli("estimate", "deepseek-v3.2", "--engine", "vllm", "--kv-dtype", "fp8_ds_mla", "-s", "8k", "-f", "json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["kv_cache_dtype"] == "fp8_ds_mla"
    r = cli("estimate", "llama-3.1-8b", "--engine", "vllm", "--kv-dtype", "fp8_ds_mla", "-s", "8k")
    assert r.exit_code == 2
    assert "vLLM 0.33 stores fp8_ds_mla rows only for sparse MLA" in r.stderr


@pytest.mark.parametrize(
    "engine,line",
    [
        (
            "vllm",
            "error: --kv-dtype: vLLM 0.33 has no 'nope' KV cache dtype; vLLM 0.33's --kv-cache-dtype takes auto, ",
        ),
        (
            "sglang",
            "error: --kv-dtype: SGLang 0.5.23 has no 'nope' KV cache dtype; its pool stores auto, bf16, fp16, "
            "fp8_e4m3, fp8_e5m2, mxfp8, nvfp4, fp4_mx_block16",
        ),
        (
            "llamacpp",
            "error: --kv-dtype: llama.cpp (current) has no 'nope' KV cache type; use one of f32, f16, bf16, q8_0, "
            "q4_0, q4_1, q5_0, q5_1, iq4_nl",
        ),
    ],
)
@pytest.mark.parametrize("command", ["estimate", "capacity"])
def test_an_unknown_dtype_names_the_engine_version_and_what_it_takes(cli, engine, line, command):
    extra = ("-s", "8k") if command == "estimate" else ("--kv-memory", "10GiB", "-c", "8192")
    if command == "capacity" and engine != "llamacpp":
        extra = ("--kv-memory", "10GiB")
    r = cli(command, "llama-3.1-8b", "--engine", engine, "--kv-dtype", "nope", *extra)
    assert r.exit_code == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith(line), lines[0]


@pytest.mark.parametrize(
    "args",
    [
        ("estimate", "llama-3.1-8b", "--kv-dtype", "turboquant_k8v4"),  # the ideal engine
        # plan's own engine (vllm) sizes it (issue 20); the exact formula does not
        ("plan", "llama-3.1-8b", "--gpu", "h200", "--engine", "ideal", "--kv-dtype", "turboquant_k8v4"),
        ("compare", "llama-3.1-8b", "--kv-dtype", "turboquant_k8v4"),
    ],
)
def test_a_vllm_only_cache_dtype_elsewhere_points_to_engine_vllm(cli, args):
    """Was "unknown dtype 'turboquant_k8v4'; choose one of ..." though `--engine vllm` sizes it."""
    r = cli(*args)
    assert r.exit_code == 2 and len(r.stderr.splitlines()) == 1, r.output
    assert r.stderr.startswith("error: --kv-dtype: 'turboquant_k8v4' is a vLLM 0.33 --kv-cache-dtype"), r.stderr
    assert "use it with --engine vllm (`kvcalc estimate`, `capacity`, `plan`, `sweep --gpu`)" in r.stderr
    assert cli("estimate", "llama-3.1-8b", "--engine", "vllm", "--kv-dtype", "turboquant_k8v4").exit_code == 0


@pytest.mark.parametrize(
    "args, name",
    [
        (("estimate", "llama-3.1-8b", "--engine", "llamacpp", "--kv-dtype", "nvfp4"), "nvfp4"),
        (("plan", "llama-3.1-8b", "--engine", "llamacpp", "--gpu", "h200", "--kv-dtype", "fp8"), "fp8"),
        (("capacity", "llama-3.1-8b", "--engine", "llamacpp", "--kv-memory", "10GiB", "--kv-dtype", "fp8"), "fp8"),
    ],
)
def test_llamacpp_dtype_refusal_names_kv_dtype_as_typed(cli, args, name):
    # was "llama.cpp 0c1e570 has no 'nvfp4' ..." without the option, and plan's "no 'fp8_e4m3'" for the fp8 typed
    r = cli(*args)
    assert r.exit_code == 2
    assert r.stderr.strip().splitlines() == [
        f"error: --kv-dtype: llama.cpp 0c1e570 has no '{name}' KV cache type; use one of f32, f16, bf16, q8_0, q4_0, q4_1, "
        "q5_0, q5_1, iq4_nl"
    ]
