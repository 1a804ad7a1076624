"""Issue 12, item 7: one set of bounds (`kvcalc.units.BOUNDS`) for every numeric option of every
command, checked at the bound, one past it, 0 and -1, with the same words wherever the value
came from (CLI, Python API, engine options objects). Sizes are parsed exactly, then bounded.

The CLI matrix runs in ONE subprocess (an in-process driver over typer's runner), so the whole
matrix is bounded by the subprocess `timeout=` and costs one interpreter start-up.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from kvcalc.errors import KvcalcError
from kvcalc.units import (
    BOUNDS,
    LLAMACPP_MAX_N_CTX,
    MAX_CONCURRENCY,
    MAX_DEVICE_BYTES,
    MAX_GPUS,
    MAX_PLAN_GPUS,
    MAX_SEQ_LEN,
    MAX_STEPS,
    check_bound,
    parse_count,
    parse_size,
)

#: runs each case in-process and prints [exit code, stdout, stderr] per case as JSON
DRIVER = """
import json, sys
from typer.testing import CliRunner
from kvcalc.cli import app
runner = CliRunner()
out = []
for args in json.loads(sys.stdin.read()):
    r = runner.invoke(app, args)
    out.append([r.exit_code, r.stdout, r.stderr])
print(json.dumps(out))
"""

LLAMA = ["capacity", "llama-3.1-8b", "--engine", "llamacpp"]
#: (command line before the option, option, its bound, values below the bound that mean something)
MATRIX = [
    (["estimate", "llama-3.1-8b"], "--seq-len", MAX_SEQ_LEN, ()),
    (["estimate", "llama-3.1-8b"], "--batch", MAX_CONCURRENCY, ()),
    (["estimate", "llama-3.1-8b"], "--tp", MAX_GPUS, ()),
    (["estimate", "llama-3.1-8b"], "--pp", MAX_GPUS, ()),
    (["estimate", "llama-3.1-8b"], "--dp", MAX_GPUS, ()),
    (["estimate", "llama-3.1-8b"], "--count", MAX_GPUS, ()),
    (["compare", "llama-3.1-8b"], "--seq-len", MAX_SEQ_LEN, ()),
    (["compare", "llama-3.1-8b"], "--batch", MAX_CONCURRENCY, ()),
    (["compare", "llama-3.1-8b", "gpt2", "--kv-dtype", "fp16"], "--batch", MAX_CONCURRENCY, ()),
    (["sweep", "llama-3.1-8b", "-s", "1k"], "--batch", MAX_CONCURRENCY, ()),
    (["sweep", "llama-3.1-8b", "--batch", "1", "--beyond-context"], "--seq-len", MAX_SEQ_LEN, ()),
    (["sweep", "llama-3.1-8b"], "--tp", MAX_GPUS, ()),
    (["capacity", "llama-3.1-8b", "--kv-memory", "10GiB"], "--max-model-len", MAX_SEQ_LEN, ()),
    (["capacity", "llama-3.1-8b", "--kv-memory", "10GiB"], "--concurrency", MAX_CONCURRENCY, ()),
    (["capacity", "llama-3.1-8b", "--kv-memory", "10GiB"], "--tp", MAX_GPUS, ()),
    (
        ["capacity", "llama-3.1-8b", "--kv-memory", "10GiB", "--engine", "vllm"],
        "--max-num-batched-tokens",
        MAX_SEQ_LEN,
        (),
    ),
    (LLAMA, "--ctx-size", LLAMACPP_MAX_N_CTX, ("0",)),  # 0: the model's training context (n_ctx_train)
    (LLAMA + ["-c", "8192"], "--gpus", MAX_GPUS, ()),
    (LLAMA + ["-c", "8192"], "--ubatch-size", LLAMACPP_MAX_N_CTX, ()),
    (LLAMA + ["-c", "8192"], "--n-gpu-layers", LLAMACPP_MAX_N_CTX, ("0", "-1")),  # 0: CPU only; -1: all
    (["plan", "llama-3.1-8b", "--gpu", "h100-sxm"], "--max-gpus", MAX_PLAN_GPUS, ()),
    (["plan", "llama-3.1-8b", "--gpu", "h100-sxm"], "--concurrency", MAX_CONCURRENCY, ()),
    (["plan", "llama-3.1-8b", "--gpu", "h100-sxm"], "--why-not", 1_000_000, ("0",)),
    (["measure", "llama-3.1-8b", "--device", "cpu", "-s", "16", "--layers", "1"], "--steps", MAX_STEPS, ()),
    (["measure", "llama-3.1-8b", "--device", "cpu", "-s", "16"], "--layers", 100_000, ()),
    (["measure", "llama-3.1-8b", "--device", "cpu", "-s", "16", "--layers", "1"], "--batch", MAX_CONCURRENCY, ()),
]
#: sizes: (command line, option, bound as written with its unit)
SIZES = [
    (["capacity", "llama-3.1-8b"], "--kv-memory"),
    (["estimate", "llama-3.1-8b", "--gpu", "h100-sxm"], "--cuda-context"),
    (["estimate", "llama-3.1-8b", "--gpu", "h100-sxm"], "--activation-reserve"),
    (["sweep", "llama-3.1-8b", "--gpu", "h100-sxm", "-s", "1k", "--batch", "1"], "--activation-reserve"),
]


def _cases() -> list[tuple[str, list[str], str]]:
    """(kind, args, option): kind is 'at' (the bound: accepted or refused for another reason),
    'past' (bound + 1: refused naming the bound), 'low' (0 and -1: refused), 'ok' (a low value
    that means something)."""
    out = []
    for base, opt, bound, meaningful in MATRIX:
        out.append(("at", [*base, opt, str(bound), "-f", "json"], opt))
        out.append(("past", [*base, opt, str(bound + 1), "-f", "json"], opt))
        for low in ("0", "-1"):
            out.append(("ok" if low in meaningful else "low", [*base, opt, low, "-f", "json"], opt))
    for base, opt in SIZES:
        out.append(("at", [*base, opt, f"{MAX_DEVICE_BYTES}B", "-f", "json"], opt))
        out.append(("past", [*base, opt, f"{MAX_DEVICE_BYTES + 1}B", "-f", "json"], opt))
        out.append(("low", [*base, opt, "-1GiB", "-f", "json"], opt))
    return out


@pytest.fixture(scope="module")
def matrix_results() -> list[tuple[tuple[str, list[str], str], list]]:
    cases = _cases()
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER],
        input=json.dumps([c[1] for c in cases]),
        capture_output=True,
        text=True,
        timeout=240,
    )  # the harness's time bound
    assert proc.returncode == 0, proc.stderr[-2000:]
    return list(zip(cases, json.loads(proc.stdout.strip().splitlines()[-1]), strict=True))


def _valid_json_or_empty(stdout: str) -> None:
    if stdout.strip():
        json.loads(stdout)


def test_every_numeric_option_at_its_bound_past_it_zero_and_minus_one(matrix_results) -> None:
    for (kind, args, opt), (code, out, err) in matrix_results:
        where = " ".join(args)
        lines = [ln for ln in err.splitlines() if not ln.startswith(("warning:", "measure:"))]
        assert code in (0, 1, 2), where
        assert "internal error" not in err and "Traceback" not in err, where
        if kind in ("at", "ok"):  # accepted, or refused for another reason than the bound
            assert not any("is beyond" in ln for ln in lines), (where, err)  # warnings may say it
            if code == 0:
                _valid_json_or_empty(out)
            continue
        assert code == 2, (where, code, err)
        assert len(lines) == 1, (where, err)  # ONE line
        assert lines[0].startswith(f"error: {opt}"), (where, lines)  # names the option first
        assert out == "", (where, out)  # nothing on stdout under --format json
        if kind == "past":
            assert "at most" in lines[0], (where, lines)


@pytest.mark.parametrize(
    "text, expected",
    [
        # 2^50 B = 1,125,899,906,842,624 B: exactly the bound, in bytes and in TiB (1024 TiB)
        ("1125899906842624B", 2**50),
        ("1024TiB", 2**50),
        # a 30-digit figure under a prefix: 0.1234...(30 digits) GB = floor(123456789.012345678901234567890123) B,
        # exact, where Decimal's default 28 digits would round the product
        ("0.123456789012345678901234567890GB", 123_456_789),
        # 999,999,999,999,999,999,999 B: 21 nines, one under 10^21, read as written (no rounding to 1e21)
        ("999999999999999999999", None),
    ],
)
def test_sizes_are_parsed_exactly_then_bounded(text: str, expected: int | None) -> None:
    if expected is None:  # past the per-device bound: refused with the bound, not rounded first
        with pytest.raises(
            KvcalcError, match=r"^--kv-memory 999,999,999,999,999,999,999 is beyond any device's memory"
        ):
            parse_size(text, "--kv-memory")
        assert parse_size(text, None) == 10**21 - 1  # no option, no per-device bound: every digit kept
        return
    assert parse_size(text, "--kv-memory") == expected


def test_a_unit_that_carries_a_figure_past_10_21_is_refused_not_rounded() -> None:
    # 999,999,999,999,999,999,999 TiB < 10^21 as written, but x 2^40 it is ~1.1e33 B: before the fix it
    # was accepted and rounded to 28 digits (1,099,511,627,775,999,999,998,900,488,000,000 B)
    with pytest.raises(KvcalcError, match=r"beyond what kvcalc sizes \(at most 10\^21\)"):
        parse_size("999999999999999999999TiB", "--kv-memory")


def test_one_bound_per_field_whatever_the_entry_point() -> None:
    import kvcalc
    from kvcalc.engines.profile import LlamacppOptions

    # the CLI's parser, the API and the deployment schema name the same bound
    with pytest.raises(KvcalcError, match=r"^--ctx-size 2,147,483,648 is beyond llama.cpp's 32-bit int n_ctx"):
        parse_count(str(2**31), "--ctx-size")
    with pytest.raises(KvcalcError, match=r"^--ctx-size 2,147,483,648 is beyond llama.cpp's 32-bit int n_ctx") as e:
        kvcalc.capacity("llama-3.1-8b", engine="llamacpp", kv_memory_bytes=None, options=LlamacppOptions(n_ctx=2**31))
    assert e.value.field == "n_ctx"
    # the API's arguments are named as the caller wrote them (`dp`, not `--dp`: kvcalc.arguments), in the same words
    with pytest.raises(KvcalcError, match=r"^dp 100,001 is beyond what kvcalc sizes \(at most 100,000 GPUs\)$"):
        kvcalc.estimate("llama-3.1-8b", dp=MAX_GPUS + 1)
    with pytest.raises(KvcalcError, match=r"^kv_memory_bytes 1,125,899,906,842,625 is beyond any device's memory"):
        kvcalc.capacity("llama-3.1-8b", kv_memory_bytes=MAX_DEVICE_BYTES + 1)
    # tp x pp x dp is a GPU count too: 1,000 x 1,000 = 1,000,000 > 100,000
    with pytest.raises(KvcalcError, match=r"= 1,000,000 GPUs is beyond what kvcalc sizes"):
        kvcalc.estimate("llama-3.1-8b", tp=1, pp=1000, dp=1000)
    # ollama hands llama.cpp n_ctx x parallel cells: 2^30 x 4 = 2^32 > 2^31 - 1
    with pytest.raises(KvcalcError, match=r"= 4,294,967,296 is beyond llama.cpp's 32-bit int n_ctx"):
        kvcalc.capacity(
            "llama-3.1-8b",
            engine="llamacpp",
            kv_memory_bytes=None,
            options=LlamacppOptions(n_ctx=2**30, parallel=4, ollama=True, version="legacy"),
        )


def test_bounds_table_is_the_one_source() -> None:
    assert BOUNDS["seq_len"].high == MAX_SEQ_LEN == BOUNDS["max_model_len"].high
    assert BOUNDS["batch"].high == MAX_CONCURRENCY == BOUNDS["concurrency"].high
    assert BOUNDS["dp"].high == BOUNDS["tp"].high == MAX_GPUS
    assert BOUNDS["n_ctx"].high == 2**31 - 1  # llama.cpp's int32 n_ctx
    assert check_bound("n_gpu_layers", -1) == -1  # llama.cpp's "all layers"
    with pytest.raises(KvcalcError, match=r"^--n-gpu-layers must be -1 \(all layers\) or a count of layers, got -2$"):
        check_bound("n_gpu_layers", -2)
