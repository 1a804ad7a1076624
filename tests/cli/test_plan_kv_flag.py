"""`kvcalc plan` takes one --kv-dtype (a list of formats, each for K and V alike): a format the
engine's launch line cannot take is refused naming --kv-dtype, the flag the user typed, never
--k-dtype, which plan does not have (issue 11, user trial item 3)."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(
    "args,line",
    [
        # parsed once by the engine (issue 20): its version and what its --kv-cache-dtype takes
        # (vLLM 0.33.0 vllm/config/cache.py CacheDType; SGLang 0.5.23's choices)
        (
            ["--kv-dtype", "q8_0"],
            "error: --kv-dtype q8_0: vLLM 0.33 has no 'q8_0' KV cache dtype; vLLM 0.33's --kv-cache-dtype takes "
            "auto, float16, bfloat16, fp8, fp8_e4m3, fp8_e5m2, fp8_inc, fp8_ds_mla, nvfp4_ds_mla, turboquant_k8v4, "
            "turboquant_4bit_nc, turboquant_k3v4_nc, turboquant_3bit_nc, octave_k3v4, octave_k3v3, "
            "octave_k3v3_compact, ultraquant_4bit, int4_per_token_head, int8_per_token_head, fp8_per_token_head, "
            "nvfp4, nvfp4_4over6 (vllm/config/cache.py CacheDType); kvcalc sizes auto, bfloat16, float16, fp8, "
            "fp8_e5m2, int8_per_token_head, fp8_per_token_head and nvfp4 (fp8_ds_mla as sparse MLA's fp8)",
        ),
        (
            ["--kv-dtype", "fp8,int8", "-e", "sglang"],
            "error: --kv-dtype int8: SGLang 0.5.23 has no 'int8' KV cache dtype; its pool stores auto, bf16, fp16, "
            "fp8_e4m3, fp8_e5m2, mxfp8, nvfp4, fp4_mx_block16",
        ),
    ],
)
def test_plan_names_its_own_kv_flag(cli, args, line):
    r = cli("plan", "llama-3.1-8b", *args)
    assert r.exit_code == 2
    assert "".join(r.output.splitlines()) == line
    assert "--k-dtype" not in r.output


def test_plan_has_no_k_dtype_flag():
    from kvcalc.cli.app import COMMANDS

    cmd = next(c for c in COMMANDS if c.name == "plan").load(None)
    flags = {o for p in cmd.params for o in p.opts}
    assert "--kv-dtype" in flags and "--k-dtype" not in flags
