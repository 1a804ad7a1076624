"""`kvcalc plan ... --speculative-config '{"method":"mtp",...}'` on the bundled models whose
config.json has MTP layers (issue 20 item 3): DeepSeek-V3.2 plans and its launch line carries the
config; the hybrid models, whose MTP block kvcalc does not count, are refused naming why."""

from __future__ import annotations

import pytest

MTP = '{"method":"mtp","num_speculative_tokens":1}'
ARGS = ["--gpu", "h200", "-s", "32k", "--concurrency", "64", "--engine", "vllm", "--speculative-config", MTP]


def test_deepseek_v32_plans_with_mtp(cli):
    r = cli("plan", "deepseek-v3.2", *ARGS)
    assert r.exit_code == 0, r.output
    launch = [ln for ln in r.stdout.splitlines() if ln.startswith("vllm serve deepseek-ai/DeepSeek-V3.2 ")]
    assert launch and launch[0].endswith(f"--speculative-config '{MTP}'"), r.stdout


@pytest.mark.parametrize(
    "name, why",
    [
        # vLLM 0.33.0 qwen3_5_mtp.py: fc + full-attention layers, not the model's last layer
        ("qwen3.5-27b", "qwen3.5-27b's MTP block cannot be sized: with linear layers"),
        # vLLM 0.33.0 nemotron_h_mtp.py: the blocks of mtp_hybrid_override_pattern ("*E")
        ("nemotron-3-super-120b-a12b", "nemotron-3-super-120b-a12b's MTP block cannot be sized: with mamba, mlp"),
    ],
)
def test_hybrid_mtp_refused_naming_why(cli, name, why):
    r = cli("plan", name, *ARGS)
    assert r.exit_code == 2 and len(r.stderr.splitlines()) == 1, r.output
    assert r.stderr.startswith(f"error: {why}"), r.stderr
    assert "cannot be planned" in r.stderr


def test_no_mtp_layers_refused(cli):
    r = cli("plan", "kimi-k2", *ARGS)
    assert r.exit_code == 2, r.output
    assert "kimi-k2 has no MTP layers (n_mtp_layers 0" in r.stderr
