"""The engines' own flag names (issue 11, item 3): each alias gives exactly the JSON of kvcalc's
long form, and that JSON holds the value typed (so neither side can be silently ignored);
choices are case-insensitive; `--version`; click's usage errors as one line plus the hint.

Models: llama-3.1-8b (32 layers, 8 KV heads of 128: 2 x 32 x 8 x 128 x 2 B = 131,072 B/token in
bf16, configs/models/llama-3.1-8b.yaml) and gemma-3-27b (52 sliding + 10 full layers).
"""

from __future__ import annotations

import json

import pytest

import kvcalc

M = "llama-3.1-8b"


def js(cli, *args: str) -> dict:
    """The command's JSON; fails with its output when it exits non-zero."""
    r = cli(*args, "-f", "json")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


# (long form, [aliases...], key, value the JSON must hold): estimate
ESTIMATE = [
    (["--kv-dtype", "fp8"], [["--kv-cache-dtype", "fp8"]], "k_dtype", "fp8_e4m3"),
    (["--tp", "2"], [["--tensor-parallel-size", "2"], ["-tp", "2"], ["--tp-size", "2"]], "tp", 2),
    (["--pp", "2"], [["--pipeline-parallel-size", "2"], ["-pp", "2"], ["--pp-size", "2"]], "pp", 2),
    (["--dp", "2"], [["--data-parallel-size", "2"], ["-dp", "2"], ["--dp-size", "2"]], "dp", 2),
    (
        ["--seq-len", "8k"],
        [["-s", "8192"], ["--max-model-len", "8k"], ["-L", "8k"], ["--context-length", "8192"]],
        "seq_len",
        8192,
    ),
    (["--batch", "4"], [["--max-num-seqs", "4"], ["--parallel", "4"], ["-np", "4"]], "batch", 4),
    (
        ["--k-dtype", "q8_0", "--v-dtype", "q4_0"],
        [["-ctk", "q8_0", "-ctv", "q4_0"], ["--cache-type-k", "q8_0", "--cache-type-v", "q4_0"]],
        "v_dtype",
        "q4_0",
    ),
    # --gpu: the plan's utilization; SGLang's --mem-fraction-static is the same fraction
    (
        ["--gpu", "h100-sxm", "--gpu-memory-utilization", "0.85"],
        [["--gpu", "h100-sxm", "--mem-fraction-static", "0.85"]],
        "gpu_memory_utilization",
        0.85,
    ),
    # 'auto' is the default: the model's dtype (bf16), or the engine's own under --engine
    ([], [["--kv-dtype", "auto"], ["--kv-cache-dtype", "AUTO"]], "kv_dtype", "bf16"),
    (["-e", "vllm"], [["-e", "vllm", "--kv-dtype", "auto"]], "kv_cache_dtype", "auto (bf16)"),
]


@pytest.mark.parametrize("long,alias,key,value", [(lo, a, k, v) for lo, aliases, k, v in ESTIMATE for a in aliases])
def test_estimate_alias_gives_the_long_forms_json(cli, long, alias, key, value):
    want = js(cli, "estimate", M, "-s", "4k", *long)
    assert want[key] == value
    assert js(cli, "estimate", M, "-s", "4k", *alias) == want


# capacity, with 10 GiB of KV memory per rank unless the row says otherwise
CAPACITY = [
    (
        ["--max-model-len", "32k"],
        [["-L", "32k"], ["--seq-len", "32k"], ["-s", "32768"], ["--context-length", "32k"]],
        "max_model_len",
        32_768,
    ),
    # vLLM: 10 GiB / 131,072 B = 81,920 tokens; 4 requests at once -> 20,480 tokens each
    (
        ["-e", "vllm", "--concurrency", "4"],
        [["-e", "vllm", "--max-num-seqs", "4"], ["-e", "VLLM", "--concurrency", "4"]],
        "longest_context",
        20_480,
    ),
    (
        ["-e", "vllm", "--tp", "2"],
        [["-e", "vllm", "-tp", "2"], ["-e", "vllm", "--tensor-parallel-size", "2"]],
        "kv_cache_tokens",
        163_840,
    ),  # 8 KV heads over 2 ranks: 65,536 B/token per rank -> 163,840 tokens
    (["-e", "vllm", "--kv-dtype", "fp8"], [["-e", "vllm", "--kv-cache-dtype", "fp8"]], "kv_cache_tokens", 163_840),
]


@pytest.mark.parametrize("long,alias,key,value", [(lo, a, k, v) for lo, aliases, k, v in CAPACITY for a in aliases])
def test_capacity_alias_gives_the_long_forms_json(cli, long, alias, key, value):
    want = js(cli, "capacity", M, "-m", "10GiB", *long)
    assert want[key] == value
    assert js(cli, "capacity", M, "-m", "10GiB", *alias) == want


LLAMACPP = [
    # -c under --engine llamacpp is llama.cpp's context (n_ctx), as on a llama-server line
    (["--ctx-size", "8192"], [["-c", "8192"], ["-c", "8k"]], "n_ctx", 8192),
    (["--ctx-size", "8k", "--parallel", "4"], [["-c", "8192", "-np", "4"]], "n_ctx", 8192),
    # q8_0, 34 B per 32 values: 2 x 32 layers x (8 x 128) values x 34/32 B = 69,632 B/token,
    # x 8,192 cells = 570,425,344 B
    (
        ["--ctx-size", "8k", "--k-dtype", "q8_0", "--v-dtype", "q8_0"],
        [
            ["-c", "8k", "-ctk", "q8_0", "-ctv", "q8_0"],
            ["-c", "8k", "--cache-type-k", "q8_0", "--cache-type-v", "q8_0"],
        ],
        "engine_kv_bytes",
        570_425_344,
    ),
    # legacy padding: 4,100 cells padded to 256 with flash attention = 4,352 (to 32: 4,128)
    (
        ["--ctx-size", "4100", "--llamacpp-version", "legacy", "--flash-attn"],
        [
            ["-c", "4100", "--llamacpp-version", "LEGACY", "-fa", "on"],
            ["-c", "4100", "--llamacpp-version", "legacy", "-fa", "ON"],
            ["-c", "4100", "--llamacpp-version", "legacy", "-fa", "auto"],
        ],
        "n_ctx",
        4352,
    ),
    (
        ["--ctx-size", "4100", "--llamacpp-version", "legacy"],
        [["-c", "4100", "--llamacpp-version", "legacy", "-fa", "off"]],
        "n_ctx",
        4128,
    ),
    (
        ["--ctx-size", "8k", "--n-gpu-layers", "10"],
        [["-c", "8k", "-ngl", "10"], ["-c", "8k", "--gpu-layers", "10"]],
        "devices",
        None,
    ),
    (["--ctx-size", "8k", "--parallel", "2", "--kv-unified"], [["-c", "8k", "-np", "2", "-kvu"]], "n_ctx", 8192),
    (["--ctx-size", "8k", "--tensor-split", "3,1"], [["-c", "8k", "-ts", "3,1"]], "devices", None),
]


@pytest.mark.parametrize("long,alias,key,value", [(lo, a, k, v) for lo, aliases, k, v in LLAMACPP for a in aliases])
def test_llamacpp_alias_gives_the_long_forms_json(cli, long, alias, key, value):
    want = js(cli, "capacity", M, "-e", "llamacpp", *long)
    if value is not None:
        assert want[key] == value
    assert js(cli, "capacity", M, "-e", "llamacpp", *alias) == want


def test_llamacpp_layers_and_split_reach_the_devices(cli):
    # -ngl 10: 10 of 32 layers offloaded (the rest on the CPU). -ts 3,1: llama.cpp splits the 33
    # offloadable layers (32 + output) at 3/4: layer il goes to device 0 while il / 33 < 0.75, i.e.
    # layers 0-24 (25) on device 0 and 25-31 (7, plus the output layer) on device 1
    ngl = js(cli, "capacity", M, "-e", "llamacpp", "-c", "8k", "-ngl", "10")["devices"]
    ts = js(cli, "capacity", M, "-e", "llamacpp", "-c", "8k", "-ts", "3,1")["devices"]
    assert [d["n_layers"] for d in ngl if d["device"].startswith("CUDA")] == [10]
    assert [d["n_layers"] for d in ts] == [25, 7]


def test_ubatch_alias_on_a_sliding_window_model(cli):
    # gemma-3-27b's sliding cache holds window + n_ubatch cells: -ub changes it, as --ubatch-size does
    base = ["capacity", "gemma-3-27b", "-e", "llamacpp", "-c", "32k"]
    want = js(cli, *base, "--ubatch-size", "256")
    assert js(cli, *base, "-ub", "256") == want
    assert want != js(cli, *base)  # the default n_ubatch (512) gives another size


def test_sweep_takes_the_layout_and_dtype_aliases(cli):
    args = ["sweep", "llama-3.1-70b", "-s", "1k,8k", "--batch", "1,8"]
    assert js(cli, *args, "-tp", "2", "--kv-cache-dtype", "fp8") == js(cli, *args, "--tp", "2", "--kv-dtype", "fp8")


def test_short_c_is_llama_cpps_ctx_size_only(cli):
    # -c is llama.cpp's --ctx-size (one meaning on every command): with another engine it is
    # refused as every llama.cpp option is, never read as --concurrency (kvcalc's -c before)
    r = cli("capacity", M, "-m", "10GiB", "-c", "4")
    assert (r.exit_code, r.output) == (2, "error: --ctx-size applies to --engine llamacpp only\n")
    base = ["capacity", M, "-e", "llamacpp", "-np", "1"]
    assert js(cli, *base, "-c", "4096") == js(cli, *base, "--ctx-size", "4096")
    assert js(cli, *base, "-c", "4096")["n_ctx"] == 4096


def test_fa_takes_llama_cpps_values_only(cli):
    r = cli("capacity", M, "-e", "llamacpp", "-c", "4096", "-fa", "maybe")
    assert (r.exit_code, r.output) == (2, "error: -fa maybe: 'maybe' is not on, off or auto (llama.cpp's values)\n")


# ----- case-insensitive choices ----------------------------------------------------------------


def test_choices_are_case_insensitive(cli):
    assert js(cli, "estimate", M, "-s", "4k", "-e", "VLLM") == js(cli, "estimate", M, "-s", "4k", "-e", "vllm")
    r = cli("estimate", M, "-s", "4k", "--format", "JSON")
    assert r.exit_code == 0 and json.loads(r.stdout) == js(cli, "estimate", M, "-s", "4k")
    assert cli("gpus", "-f", "YAML").stdout == cli("gpus", "-f", "yaml").stdout
    r = cli("check", "configs/deployments/", "-f", "JSON")
    assert r.exit_code == 0 and json.loads(r.stdout)["ok"] is True
    assert cli("schema", "GPU").stdout == cli("schema", "gpu").stdout


def test_measure_device_and_backend_are_case_insensitive(cli, tmp_path):
    pytest.importorskip("torch")
    tiny = "tests/data/tiny-gqa.yaml"
    d = js(cli, "measure", tiny, "-s", "64", "--steps", "1", "--device", "CPU", "--backend", "SDPA")
    assert (d["device"], d["backend"]) == ("cpu", "sdpa")


# ----- --version -------------------------------------------------------------------------------


def test_version(cli):
    r = cli("--version")
    assert (r.exit_code, r.stdout) == (0, "kvcalc 0.2.0\n")
    assert kvcalc.__version__ == "0.2.0"


# ----- usage errors: one line, the problem (issue 23 item 7) ----------------------------------


@pytest.mark.parametrize(
    "args,lines",
    [
        (
            ["estimate", M, "--sq-len", "5"],
            ["error: no such option: --sq-len (Possible options: --input-len, --output-len, --seq-len)"],
        ),
        (["estimate"], ["error: missing argument 'model'"]),
        (
            ["estimate", M, "--batch", "x"],
            [
                "error: invalid value for '--batch': Input should be a valid integer, unable to parse string as an integer"
            ],
        ),
        (["estimate", M, "extra"], ["error: got unexpected extra argument(s) (extra)"]),
        (["capacity", M, "-c"], ["error: option '-c' requires an argument"]),
        (["--foo"], ["error: no such option: --foo"]),
        (["nosuch"], ["error: no such command 'nosuch'"]),
    ],
)
def test_usage_errors_are_one_line(cli, args, lines):
    r = cli(*args)
    assert (r.exit_code, r.stdout, r.stderr.splitlines()) == (2, "", lines)
