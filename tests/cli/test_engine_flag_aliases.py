"""Issue #11 item 3: the engines' own flag names, where they mean what kvcalc's flag means.
--quantization fp8 is the fp8 weight format (a method such as awq names no one format: refused
with the format to give); --max-running-requests (SGLang) is the sequence count; plan's
--kv-cache-dtype / --max-num-seqs / --quantization are its --kv-dtype / --concurrency /
--weight-dtype; capacity takes --pp 1 (more stages refused with the reason), --dp (figures per
replica) and, with --gpu and no --kv-memory, --gpu-memory-utilization / --mem-fraction-static and
--quantization: the KV memory is then what the GPU's plan leaves, as `estimate --gpu --engine`
sizes it."""

from __future__ import annotations

import json

import pytest


def js(r):
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_quantization_fp8_is_the_fp8_weight_format(cli):
    a = js(cli("estimate", "llama-3.1-8b", "--gpu", "h200", "--quantization", "fp8", "-f", "json"))
    b = js(cli("estimate", "llama-3.1-8b", "--gpu", "h200", "--weight-dtype", "fp8", "-f", "json"))
    assert a == b
    # 8,030,261,248 parameters: the embedding and head (128,256 x 4,096 = 525,336,576 each) and
    # the 65 RMSNorms of 4,096 (266,240) stay 16-bit, 2 x 1,050,939,392 = 2,101,878,784 B; the
    # other 6,979,321,856 matrix weights take 1 B each: 9,081,200,640 B
    assert a["weights_bytes_per_gpu"] == 9_081_200_640
    assert a["weight_dtype"] == "fp8_e4m3"


@pytest.mark.parametrize(
    "method,fmt",
    [
        ("awq", "int4:g128"),
        ("gptq", "int4:g128 or int8"),
        ("bitsandbytes", "nf4 or int8"),
        ("compressed-tensors", "fp8, int8 or int4:g128"),
    ],
)
def test_quantization_methods_name_the_format_to_give(cli, method, fmt):
    r = cli("estimate", "llama-3.1-8b", "--gpu", "h200", "--quantization", method)
    assert r.exit_code == 2
    lines = r.output.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(
        f"error: --weight-dtype {method}: '{method}' is a quantization method "
        "(vLLM / SGLang --quantization), not one format"
    )
    assert f"give the weight format, e.g. {fmt}" in lines[0]


def test_max_running_requests_is_the_batch(cli):
    # 12 x 32,768 tokens x 2 (K, V) x 80 layers x 8 KV heads x 128 x 2 B = 128,849,018,880 B
    a = js(cli("estimate", "llama-3.1-70b", "-s", "32k", "--max-running-requests", "12", "-f", "json"))
    assert a["batch"] == 12 and a["kv_cache_bytes"] == 128_849_018_880


def test_plan_takes_the_engines_names(cli):
    base = js(
        cli(
            "plan",
            "llama-3.1-8b",
            "-s",
            "32k",
            "--gpu",
            "h200",
            "--concurrency",
            "16",
            "--kv-dtype",
            "fp8",
            "--weight-dtype",
            "fp8",
            "-f",
            "json",
        )
    )
    for seqs in ("--max-num-seqs", "--max-running-requests"):
        alias = js(
            cli(
                "plan",
                "llama-3.1-8b",
                "-s",
                "32k",
                "--gpu",
                "h200",
                seqs,
                "16",
                "--kv-cache-dtype",
                "fp8",
                "--quantization",
                "fp8",
                "-f",
                "json",
            )
        )
        assert alias == base
    assert base["concurrency"] == 16
    assert base["layouts"][0]["launch"].endswith(
        "--kv-cache-dtype fp8 --gpu-memory-utilization 0.9 --max-num-seqs 16 --quantization fp8"
    )
    # `--kv-cache-dtype auto` is vLLM's default: plan's own default formats
    auto = js(cli("plan", "llama-3.1-8b", "-s", "32k", "--gpu", "h200", "--kv-cache-dtype", "auto", "-f", "json"))
    plain = js(cli("plan", "llama-3.1-8b", "-s", "32k", "--gpu", "h200", "-f", "json"))
    assert auto == plain


def test_capacity_kv_memory_from_the_gpu_plan(cli):
    """The KV memory vLLM gets on h200 is the plan's budget less weights, activations and the
    CUDA context, the figures `estimate --gpu` prints: 135,679,338,086 - 9,081,200,640 -
    735,313,920 - 524,288,000 = 125,338,535,526 B (fp8 weights)."""
    est = js(cli("estimate", "llama-3.1-8b", "--gpu", "h200", "--weight-dtype", "fp8", "-f", "json"))
    assert (
        est["budget_bytes_per_gpu"],
        est["weights_bytes_per_gpu"],
        est["activation_reserve_bytes"],
        est["cuda_context_bytes"],
    ) == (135_679_338_086, 9_081_200_640, 735_313_920, 524_288_000)
    cap = js(
        cli(
            "capacity",
            "llama-3.1-8b",
            "--engine",
            "vllm",
            "--gpu",
            "h200",
            "--quantization",
            "fp8",
            "--gpu-memory-utilization",
            "0.9",
            "-f",
            "json",
        )
    )
    assert cap["kv_memory_bytes"] == 135_679_338_086 - 9_081_200_640 - 735_313_920 - 524_288_000 == 125_338_535_526
    assert cap["kv_memory_basis"].startswith("what the h200 plan leaves for KV per GPU: 0.9 x GPU memory")
    # the same KV memory as estimate's engine part on that plan
    eng = js(
        cli("estimate", "llama-3.1-8b", "--gpu", "h200", "--quantization", "fp8", "--engine", "vllm", "-f", "json")
    )
    assert eng["kv_memory_bytes"] == cap["kv_memory_bytes"]
    # bf16 weights (the checkpoint's: 16,060,522,496 B) and SGLang's --mem-fraction-static 0.5:
    # budget int(0.5 x 150,754,820,096) = 75,377,410,048; less 16,060,522,496 + 735,313,920 + 524,288,000
    sgl = js(
        cli(
            "capacity",
            "llama-3.1-8b",
            "--engine",
            "sglang",
            "--gpu",
            "h200",
            "--mem-fraction-static",
            "0.5",
            "-f",
            "json",
        )
    )
    assert sgl["kv_memory_bytes"] == 75_377_410_048 - 16_060_522_496 - 735_313_920 - 524_288_000 == 58_057_285_632


@pytest.mark.parametrize(
    "args,first",
    [
        (
            ["--engine", "vllm", "--kv-memory", "10GiB", "--gpu-memory-utilization", "0.9"],
            "error: --gpu-memory-utilization applies to --engine vllm, sglang or llamacpp with --gpu and no --kv-memory",
        ),
        (
            ["--engine", "vllm", "--kv-memory", "10GiB", "--mem-fraction-static", "0.9"],
            "error: --gpu-memory-utilization applies to --engine vllm, sglang or llamacpp with --gpu and no --kv-memory",
        ),
        (
            ["--engine", "llamacpp", "-c", "4096", "--quantization", "fp8"],
            "error: --weight-dtype applies to --engine vllm, sglang or llamacpp with --gpu and no --kv-memory",
        ),
        (
            ["--engine", "vllm", "--kv-memory", "10GiB", "--pipeline-parallel-size", "2"],
            (
                "error: --pp 2: capacity figures one GPU rank that holds every layer; 2 pipeline stages are not modelled: "
                "give --pp 1"
            ),
        ),
        (
            ["--engine", "llamacpp", "-c", "4096", "--gpu", "h200"],
            "error: --gpu h200: --gpu applies to --engine vllm and sglang",
        ),
    ],
)
def test_capacity_refuses_what_it_would_ignore(cli, args, first):
    r = cli("capacity", "llama-3.1-8b", *args)
    assert r.exit_code == 2
    assert r.output.splitlines()[0].startswith(first)


def test_capacity_pp_1_and_dp(cli):
    plain = js(cli("capacity", "llama-3.1-8b", "--engine", "vllm", "--kv-memory", "40GiB", "-s", "32k", "-f", "json"))
    assert (
        js(
            cli(
                "capacity",
                "llama-3.1-8b",
                "--engine",
                "vllm",
                "--kv-memory",
                "40GiB",
                "-s",
                "32k",
                "-pp",
                "1",
                "-f",
                "json",
            )
        )
        == plain
    )
    # 40 GiB / (16 tokens x 2 x 32 layers x 8 heads x 128 x 2 B = 2,097,152 B per block) = 20,480 blocks
    assert plain["num_gpu_blocks"] == 20_480
    r = cli("capacity", "llama-3.1-8b", "--engine", "vllm", "--kv-memory", "40GiB", "-s", "32k", "--dp", "2")
    assert r.exit_code == 0
    assert r.output.splitlines()[0].strip() == "KV capacity: llama-3.1-8b on vllm, per replica of dp 2"
