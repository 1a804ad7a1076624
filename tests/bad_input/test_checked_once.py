"""Validation happens once, where the request is built (issue 23 item 2): `EstimateRequest.build`
checks the TP degree, the attention-DP / EP / DCP layout, the engine's options and speculative
decoding; `kv_cache.estimate`, `GpuFit` and `calc.speculative` trust them. Each refusal is still
one line naming the flag, exit 2. Where each kind of check lives: docs/architecture.md."""

from __future__ import annotations

import pytest

import kvcalc
from kvcalc.calc import memory_plan, parallel, speculative
from kvcalc.errors import KvcalcError
from tests.bad_input.harness import refused, run_kvcalc


@pytest.mark.parametrize(
    "args,names",
    [
        # llama-3.1-8b (meta-llama/Llama-3.1-8B config.json) has no routed experts
        (["llama-3.1-8b", "--ep", "2"], ["no routed experts", "expert parallel"]),
        # deepseek-v3: ep 3 does not divide tp 8 x dp_attention 1 = 8 GPUs
        (["deepseek-v3", "--tp", "8", "--ep", "3"], ["ep 3 must divide tp x dp_attention = 8"]),
        (["deepseek-v3", "--tp", "8", "--dcp", "3"], ["dcp 3 must divide tp 8"]),
        (["llama-3.1-8b", "--gpu-memory-utilization", "1.5", "--gpu", "h100-sxm"], ["--gpu-memory-utilization"]),
        (
            ["llama-3.1-8b", "-sc", '{"method": "mtp", "num_speculative_tokens": 2}'],
            ["--speculative-config needs --gpu"],
        ),
        (
            ["llama-3.1-8b", "-sc", '{"method": "mtp", "num_speculative_tokens": 2}', "--gpu", "h100-sxm"],
            ["llama-3.1-8b has no MTP layers"],
        ),
    ],
)
def test_estimate_refuses_a_bad_layout_in_one_line(args, names):
    refused(run_kvcalc("estimate", *args), *names)


def _count(monkeypatch, owner, name):
    calls = []
    real = getattr(owner, name)

    def counted(*a, **kw):
        calls.append(a)
        return real(*a, **kw)

    monkeypatch.setattr(owner, name, counted)
    return calls


def test_the_parallel_layout_is_checked_once(monkeypatch):
    # deepseek-v3 at tp 8, dp_attention 2, ep 16 on H200s: the layout is checked where the request
    # is built, and neither kv_cache.estimate nor GpuFit asks again
    calls = _count(monkeypatch, parallel, "check_layout")
    kvcalc.estimate("deepseek-v3", seq_len=4096, batch=4, tp=8, dp_attention=2, ep=16, kv_dtype="fp8")
    assert len(calls) == 1


def test_speculative_decoding_is_checked_once(monkeypatch):
    # MTP with one draft token on deepseek-v3 (1 MTP layer) at tp 8 on an H200: checked by the
    # request builder, trusted by calc.speculative.estimate
    from kvcalc.load.gpus import get_gpu
    from kvcalc.requests import EstimateRequest, run_estimate

    calls = _count(monkeypatch, speculative.SpecDecode, "check")
    req = EstimateRequest.build(
        kvcalc.load_model("deepseek-v3"),
        seq_len=4096,
        tp=8,
        kv_dtype="fp8",
        gpu=get_gpu("h200"),
        layout=memory_plan.Layout(),
        speculative=speculative.SpecDecode(method="mtp", num_speculative_tokens=1, accepted=1.8),
    )
    assert run_estimate(req).speculative is not None
    assert len(calls) == 1


def test_the_memory_plan_knobs_are_checked_once(monkeypatch):
    # llama-3.1-8b on an H100 at utilization 0.8: the knobs are checked where the request is
    # built, and GpuFit (the plan, its fit hint, its speed) trusts them
    calls = _count(monkeypatch, memory_plan.Layout, "check")
    kvcalc.estimate("llama-3.1-8b", seq_len=8192, gpu="h100-sxm", gpu_memory_utilization=0.8)
    assert len(calls) == 1
    with pytest.raises(KvcalcError) as e:
        kvcalc.estimate("llama-3.1-8b", seq_len=8192, gpu="h100-sxm", gpu_memory_utilization=0)
    assert e.value.field == "gpu_memory_utilization"
