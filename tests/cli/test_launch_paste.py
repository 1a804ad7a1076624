"""Issue #11 item 3: a launch line that `kvcalc plan` prints can be pasted back. Every flag of the
vLLM, SGLang and llama.cpp lines `plan` prints for a few models (dense, MLA, sliding window,
hybrid Mamba, tensor / pipeline / data parallel, several nodes) is taken by `kvcalc estimate`
(vLLM, SGLang) and `kvcalc capacity` (all three), under the engine's own name: --quantization,
--max-running-requests, --pipeline-parallel-size, --gpu-memory-utilization, --mem-fraction-static,
--kv-cache-dtype ... Only the words listed in `NOT_SIZING` are dropped (the program, the model
path, the multi-node rendezvous); kvcalc adds only what the line cannot say (--engine, the plan's
GPU with --gpu)."""

from __future__ import annotations

import json
import shlex

import pytest

#: per engine: the program words, and the flags (with their value) that are no sizing flag: the
#: model path (kvcalc takes the model as its argument) and SGLang's multi-node rendezvous
PROGRAM = {"vllm": ("vllm", "serve"), "sglang": ("python", "-m", "sglang.launch_server"), "llamacpp": ("llama-server",)}
NOT_SIZING = {
    "vllm": (),
    "sglang": ("--model-path", "--nnodes", "--node-rank", "--dist-init-addr"),
    "llamacpp": ("-m",),
}

#: (model, context, concurrency): dense, MLA over pipeline stages, sliding window, two hybrids,
#: MoE, and a 405B that takes tp 8 x dp 2 over two nodes
WORKLOADS = [
    ("llama-3.1-8b", "32k", 16),
    ("deepseek-v3", "32k", 64),
    ("gpt-oss-20b", "32k", 8),
    ("jamba-1.5-mini", "64k", 8),
    ("qwen3-next-80b-a3b", "64k", 8),
    ("qwen3-30b-a3b", "8k", 256),
    ("llama-3.1-405b", "128k", 32),
]


#: sliding-window and hybrid models: plan's KV per GPU is what the engine allocates (vLLM's and
#: SGLang's pools for the full-attention share), estimate's the model's own bytes, so the figures
#: are compared on the other models only
ENGINE_KV_DIFFERS = {"gpt-oss-20b", "jamba-1.5-mini", "qwen3-next-80b-a3b"}

#: plan's top layout per call of `launch_flags`
TOP: dict[tuple[str, ...], dict] = {}

#: the engines whose profile refuses a model outright (plan refuses it as capacity does)
REFUSED = {("jamba-1.5-mini", "sglang")}


def launch_flags(cli, model: str, seq_len: str, concurrency: int, engine: str, *extra: str) -> list[str] | None:
    """The flags of plan's top launch line on h200, with the program, the model (vLLM's
    positional argument) and the `NOT_SIZING` flags dropped; None where plan refuses the model
    for the engine (`REFUSED`). `extra`: more plan options. The top layout's JSON is kept in
    `TOP[(model, seq_len, concurrency, engine, *extra)]`."""
    r = cli(
        "plan",
        model,
        "-s",
        seq_len,
        "--concurrency",
        str(concurrency),
        "--engine",
        engine,
        "--gpu",
        "h200",
        "-f",
        "json",
        *extra,
    )
    if (model, engine) in REFUSED:
        assert r.exit_code == 2
        assert "layout to plan; --engine ideal or --engine llamacpp size it" in r.output
        return None
    assert r.exit_code == 0, r.output
    layouts = json.loads(r.stdout)["layouts"]
    TOP[(model, seq_len, concurrency, engine, *extra)] = layouts[0]
    words = shlex.split(layouts[0]["launch"])
    prog = PROGRAM[engine]
    assert tuple(words[: len(prog)]) == prog
    words = words[len(prog) :]
    if engine == "vllm":
        words = words[1:]  # `vllm serve MODEL`
    out, i = [], 0
    while i < len(words):
        assert words[i].startswith("-"), words
        has_value = i + 1 < len(words) and not words[i + 1].startswith("-")
        if words[i] not in NOT_SIZING[engine]:
            out += words[i : i + 1 + has_value]
        i += 1 + has_value
    return out


#: every workload on every engine; 405B's llama.cpp layer split over one node's 8 GPUs at a
#: workload that fits one node (128k x 32 does not: plan finds no layout)
CASES = [
    (m, s, c, e)
    for m, s, c in WORKLOADS
    for e in ("vllm", "sglang", "llamacpp")
    if (m, e) != ("llama-3.1-405b", "llamacpp")
] + [("llama-3.1-405b", "32k", 4, "llamacpp")]


@pytest.mark.parametrize("model,seq_len,concurrency,engine", CASES)
def test_plan_launch_line_pastes_into_estimate_and_capacity(cli, model, seq_len, concurrency, engine):
    flags = launch_flags(cli, model, seq_len, concurrency, engine)
    if flags is None:  # refused by plan: capacity refuses it too
        r = cli("capacity", model, "--engine", engine, "--kv-memory", "10GiB")
        assert r.exit_code == 2 and "SGLang 0.5.23 registers no JambaForCausalLM" in r.output
        return
    if engine != "llamacpp":  # estimate has no llama.cpp options (-c is n_ctx: capacity's)
        r = cli("estimate", model, "--engine", engine, "--gpu", "h200", *flags, "-f", "json")
        assert r.exit_code == 0, r.output
        if model not in ENGINE_KV_DIFFERS:
            assert_same_figures(TOP[(model, seq_len, concurrency, engine)], json.loads(r.stdout))
    r = cli("capacity", model, "--engine", engine, *(["--gpu", "h200"] if engine != "llamacpp" else []), *flags)
    pp = next((int(flags[i + 1]) for i, f in enumerate(flags) if f in ("--pipeline-parallel-size", "--pp-size")), 1)
    if pp > 1:  # capacity figures one rank holding every layer: stages are refused with the reason
        assert r.exit_code == 2
        assert r.output.splitlines()[0].startswith(
            f"error: --pp {pp}: capacity figures one GPU rank that holds every layer"
        )
    else:
        assert r.exit_code == 0, r.output


def assert_same_figures(top: dict, est: dict) -> None:
    """The layout plan printed is the one estimate figures from its launch line: the same
    sequences in all (plan's --concurrency; vLLM's --max-num-seqs is per attention-DP rank,
    SGLang's --max-running-requests the engine's total), KV bytes per GPU exactly, TPOT and
    tokens/s to the last bits of a float (both over all replicas)."""
    assert est["batch"] * top["dp"] == top["concurrency"]  # plain dp: separate engines, each its own line
    assert est["dp_attention"] == top["dp_attention"]
    assert est["kv_cache_bytes_per_gpu"] == top["kv_cache_bytes_per_gpu"]
    assert est["max_batch"] * top["dp"] == top["max_concurrency"]
    assert est["tpot_s"] * 1e3 == pytest.approx(top["tpot_ms"], rel=1e-12)
    assert est["tokens_per_s"] == pytest.approx(top["tokens_per_s"], rel=1e-12)


#: the new-user trial's layout: deepseek-v3, 32k, 32 sequences under 60 ms TPOT on h200 plans
#: tp 2 x dp-attention 4 (EP 8); vLLM's line says --max-num-seqs 8 (32 over 4 engine cores),
#: SGLang's --max-running-requests 32 (the total, each rank taking 32 // 4: SGLang 0.5.23
#: `model_executor/pool_configurator.py`); plan's figures (kvcalc 02922f8): KV 9,210,691,584 B
#: per GPU = 61 layers x 576 x 32,768 tokens x 8 sequences x 1 B (fp8), TPOT 26.534 ms,
#: 1,206.0 tok/s
@pytest.mark.parametrize(
    "engine,batch_flag", [("vllm", ["--max-num-seqs", "8"]), ("sglang", ["--max-running-requests", "32"])]
)
def test_attention_dp_launch_line_reproduces_plan(cli, engine, batch_flag):
    extra = ("--max-tpot-ms", "60")
    flags = launch_flags(cli, "deepseek-v3", "32k", 32, engine, *extra)
    assert flags is not None
    i = flags.index(batch_flag[0])
    assert flags[i : i + 2] == batch_flag
    top = TOP[("deepseek-v3", "32k", 32, engine, *extra)]
    assert (top["tp"], top["dp_attention"], top["ep"]) == (2, 4, 8)
    assert top["kv_cache_bytes_per_gpu"] == 61 * 576 * 32_768 * 8 == 9_210_691_584
    r = cli("estimate", "deepseek-v3", "--engine", engine, "--gpu", "h200", *flags, "-f", "json")
    assert r.exit_code == 0, r.output
    est = json.loads(r.stdout)
    assert_same_figures(top, est)
    assert round(est["tpot_s"] * 1e3, 3) == 26.534 and round(est["tokens_per_s"], 1) == 1206.0
    shown = cli("estimate", "deepseek-v3", "--engine", engine, "--gpu", "h200", *flags, env={"COLUMNS": "200"})
    assert "x batch 32 (8 per attention-DP rank x 4)" in shown.stdout
    assert "148 sequences of 32,768 tokens per replica (37 per attention-DP rank x 4)" in shown.stdout
