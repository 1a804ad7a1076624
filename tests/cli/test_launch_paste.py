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


#: the engines whose profile refuses a model outright (plan refuses it as capacity does)
REFUSED = {("jamba-1.5-mini", "sglang")}


def launch_flags(cli, model: str, seq_len: str, concurrency: int, engine: str) -> list[str] | None:
    """The flags of plan's top launch line on h200, with the program, the model (vLLM's
    positional argument) and the `NOT_SIZING` flags dropped; None where plan refuses the model
    for the engine (`REFUSED`)."""
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
    )
    if (model, engine) in REFUSED:
        assert r.exit_code == 2
        assert "layout to plan; --engine ideal or --engine llamacpp size it" in r.output
        return None
    assert r.exit_code == 0, r.output
    layouts = json.loads(r.stdout)["layouts"]
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
        r = cli("estimate", model, "--engine", engine, "--gpu", "h200", *flags)
        assert r.exit_code == 0, r.output
    r = cli("capacity", model, "--engine", engine, *(["--gpu", "h200"] if engine != "llamacpp" else []), *flags)
    pp = next((int(flags[i + 1]) for i, f in enumerate(flags) if f in ("--pipeline-parallel-size", "--pp-size")), 1)
    if pp > 1:  # capacity figures one rank holding every layer: stages are refused with the reason
        assert r.exit_code == 2
        assert r.output.splitlines()[0].startswith(
            f"error: --pp {pp}: capacity figures one GPU rank that holds every layer"
        )
    else:
        assert r.exit_code == 0, r.output
