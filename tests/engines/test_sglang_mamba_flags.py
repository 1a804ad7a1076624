"""SGLang's state-pool options on the command line (issue 19): `--mamba-full-memory-ratio`,
`--max-mamba-cache-size`, `--mamba-ssm-dtype`, `--disable-radix-cache` on `capacity` and
`estimate` reach `sglang_mamba.MambaOptions` (`SglangOptions.mamba`), as the Python API takes them.

Qwen3.5-27B (bundled `qwen3.5-27b`, Qwen/Qwen3.5-27B config.json), tp 1, bf16, 80 GiB =
85,899,345,920 B: a request's state is 153,944,064 B (sglang_mamba.mamba_state: 48 x (61,440 +
3,145,728)); with --max-mamba-cache-size 100 the pool takes (100 + 1) x 153,944,064 =
15,548,350,464 B, 70,350,995,456 B are left, // 65,536 B a token = 1,073,471 tokens.
"""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from kvcalc.cli import app
from kvcalc.cli.options import SglangFlags
from kvcalc.engines import sglang, sglang_mamba
from kvcalc.engines.profile import SglangOptions
from kvcalc.formats import kv_format
from kvcalc.load.models import load_model

runner = CliRunner()
GiB = 2**30
BF16 = kv_format("bf16")


def test_flags_reach_the_options():
    flags = SglangFlags(
        mamba_full_memory_ratio=0.5, max_mamba_cache_size=100, mamba_ssm_dtype="bfloat16", disable_radix_cache=True
    )
    assert flags.to_options().mamba == sglang_mamba.MambaOptions(0.5, 100, "bfloat16", True)
    assert SglangFlags().to_options().mamba == sglang_mamba.DEFAULT_OPTIONS == SglangOptions().mamba


def test_capacity_max_mamba_cache_size():
    args = ["capacity", "qwen3.5-27b", "--engine", "sglang", "--kv-memory", "80GiB", "--kv-dtype", "bf16"]
    out = runner.invoke(app, [*args, "--max-mamba-cache-size", "100", "--disable-radix-cache"])
    assert out.exit_code == 0, out.output
    assert "1,073,471" in out.output
    api = sglang.capacity(
        load_model("qwen3.5-27b"),
        80 * GiB,
        BF16,
        BF16,
        mamba=sglang_mamba.MambaOptions(max_mamba_cache_size=100, disable_radix_cache=True),
    )
    assert api.kv_cache_tokens == 1_073_471
    assert api.engine_state_bytes == 101 * 153_944_064


def test_estimate_ssm_dtype_halves_the_state():
    """bfloat16 SSM state: 48 x (61,440 + 48 x 128 x 128 x 2) = 48 x 1,634,304 = 78,446,592 B a request
    against 153,944,064 B in float32: the least budget for one 32k request holds 22 state slots
    instead of 10 (SGLang's log line, `sglang_mamba.least_budget`)."""
    base = ["estimate", "qwen3.5-27b", "-s", "32k", "--engine", "sglang", "--kv-dtype", "bf16"]
    f32 = runner.invoke(app, base)
    bf16 = runner.invoke(app, [*base, "--mamba-ssm-dtype", "bfloat16"])
    assert f32.exit_code == bf16.exit_code == 0
    assert "Mamba Cache is allocated. max_mamba_cache_size: 10," in f32.output
    assert "Mamba Cache is allocated. max_mamba_cache_size: 22," in bf16.output


@pytest.mark.parametrize(
    "flag, value, says",
    [
        ("--mamba-ssm-dtype", "int8", "--mamba-ssm-dtype must be one of float32, bfloat16, float16, got 'int8'"),
        ("--max-mamba-cache-size", "0", "--max-mamba-cache-size must be at least 1"),
        ("--mamba-full-memory-ratio", "0", "--mamba-full-memory-ratio must be above 0"),
    ],
)
@pytest.mark.parametrize("command", ["capacity", "estimate"])
def test_bad_values_refused(command, flag, value, says):
    args = ["llama-3.1-8b", "--engine", "sglang", flag, value]
    args += ["--kv-memory", "80GiB"] if command == "capacity" else ["-s", "32k"]
    out = runner.invoke(app, [command, *args])
    assert out.exit_code == 2
    assert says in out.output
