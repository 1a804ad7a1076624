"""Issue #11 (trial): `kvcalc plan falcon-h1-7b` on vLLM (plan's default engine) printed a vLLM
launch line with a note telling the user to use --engine ideal, while `capacity` / `estimate
--engine vllm` refuse the model. plan now refuses a model the engine profile refuses outright
(`EngineProfile.check_model`), in one line, exit 2, naming the engines that do size it."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(
    "model,engine,reason,display",
    [
        (
            "falcon-h1-7b",
            "vllm",
            (
                "falcon-h1-7b runs attention and a Mamba-2 mixer side by side in every layer; the vLLM "
                "profile does not yet size the state those layers keep beside their KV cache"
            ),
            "vLLM",
        ),
        (
            "jamba-1.5-mini",
            "sglang",
            (
                "jamba-1.5-mini: SGLang 0.5.23 registers no JambaForCausalLM (no model class of srt/models/ "
                "names it): it would fall back to its Transformers backend (models/registry.py "
                "_normalize_archs), whose pool kvcalc does not model"
            ),
            "SGLang",
        ),
    ],
)
def test_plan_refuses_as_capacity_does(cli, model, engine, reason, display):
    args = ["plan", model, "-s", "32k", "--gpu", "h200"] + (["--engine", engine] if engine != "vllm" else [])
    r = cli(*args)
    assert r.exit_code == 2
    assert r.output.strip().splitlines() == [
        f"error: {reason}: no {display} layout to plan; --engine ideal or --engine llamacpp size it"
    ]
    cap = cli("capacity", model, "--engine", engine, "--kv-memory", "10GiB")
    assert cap.exit_code == 2
    assert cap.output.strip().splitlines()[0].startswith(f"error: {reason}")


@pytest.mark.parametrize("engine", ["ideal", "llamacpp"])
def test_the_engines_named_do_plan_it(cli, engine):
    r = cli("plan", "falcon-h1-7b", "-s", "32k", "--gpu", "h200", "--engine", engine)
    assert r.exit_code == 0, r.output
    assert "sized by the exact formula instead" not in r.output


def test_a_detail_not_modelled_still_falls_back_with_its_note(cli):
    """gpt-oss's two KV cache groups over pipeline stages: vLLM sizes the model, kvcalc does not
    model that projection; plan says what it did (the exact formula) and still plans vLLM."""
    r = cli("plan", "gpt-oss-20b", "-s", "32k", "--concurrency", "8")
    assert r.exit_code == 0
    assert "which kvcalc does not model: sized by the exact formula instead" in r.output
    assert "\nvllm serve openai/gpt-oss-20b " in r.output
