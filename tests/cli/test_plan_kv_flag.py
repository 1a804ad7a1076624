"""`kvcalc plan` takes one --kv-dtype (a list of formats, each for K and V alike): a format the
engine's launch line cannot take is refused naming --kv-dtype, the flag the user typed, never
--k-dtype, which plan does not have (issue 11, user trial item 3)."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(
    "args,line",
    [
        # vLLM's --kv-cache-dtype choices for a cache: auto, fp8, fp8_e5m2 (vllm/config/cache.py CacheDType)
        (["--kv-dtype", "q8_0"], "error: --kv-dtype q8_0: vLLM has no q8_0 KV cache (auto, fp8, fp8_e5m2)"),
        (
            ["--kv-dtype", "fp8,int8", "-e", "sglang"],
            "error: --kv-dtype int8: SGLang 0.5.23 has no int8 KV cache (auto, fp8_e4m3, fp8_e5m2, mxfp8, nvfp4, "
            "fp4_mx_block16)",
        ),
    ],
)
def test_plan_names_its_own_kv_flag(cli, args, line):
    r = cli("plan", "llama-3.1-8b", *args)
    assert r.exit_code == 2
    assert r.output.splitlines() == [line]
    assert "--k-dtype" not in r.output


def test_plan_has_no_k_dtype_flag():
    from kvcalc.cli.app import COMMANDS

    cmd = next(c for c in COMMANDS if c.name == "plan").load(None)
    flags = {o for p in cmd.params for o in p.opts}
    assert "--kv-dtype" in flags and "--k-dtype" not in flags
