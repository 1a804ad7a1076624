"""Defaults that cannot hurt (issue 11 item 4): `kvcalc measure` without --seq-len runs a size of
seconds on the device and says so, announces its bytes and rough time before any tensor, shows
progress lines when piped; `kvcalc sweep` grids stop at the model's context unless asked.

llama-3.1-8b (meta-llama/Llama-3.1-8B config.json): 2 x 32 layers x 8 KV heads x 128 x 2 B =
131,072 B per token in bf16. tests/data/tiny-gqa.yaml: 256 B per token (fp16), 64 positions."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from kvcalc.calc.sweep import within_context
from kvcalc.formats import kv_format
from kvcalc.load.models import load_model
from kvcalc.measure.defaults import (
    CPU_BUDGET_BYTES,
    Announcement,
    budget_bytes,
    default_rule,
    default_seq_len,
    estimate_run_s,
)

BF16 = kv_format("bf16")
TINY_YAML = str(Path(__file__).parents[1] / "data" / "tiny-gqa.yaml")


# ----- the default size (torch-free) -----------------------------------------------------------


def test_cpu_budget_and_gpu_fraction():
    assert CPU_BUDGET_BYTES == 33_554_432  # 32 MiB
    assert budget_bytes("cpu", 64 * 2**30) == 33_554_432
    assert budget_bytes("cuda", 80 * 2**30) == 10 * 2**30  # 1/8 of free
    assert budget_bytes("cuda", None) == 33_554_432  # free memory unknown: the small budget


@pytest.mark.parametrize(
    "batch,budget,limit,expected",
    [
        (1, 32 * 2**20, 131_072, 256),  # 131,072 B x 256 = 33,554,432 = the budget exactly
        (1, 32 * 2**20 - 1, 131_072, 128),  # one byte less: 256 no longer fits
        (8, 32 * 2**20, 131_072, 32),  # 8 x 131,072 x 32 = 33,554,432
        (1, 10 * 2**30, 131_072, 65_536),  # 10 GiB / 131,072 B = 81,920 tokens -> 65,536
        (1, 1 << 60, 131_072, 131_072),  # never past the model's context
        (1, 1 << 60, 100_000, 65_536),  # the largest power of two <= 100,000
        (1, 1 << 60, None, 131_072),  # no stated context: capped at 2^17
        (1, 1000, 131_072, 1),  # not one token fits: 1 (the fit check refuses by name)
    ],
)
def test_default_seq_len(batch, budget, limit, expected):
    layers = load_model("llama-3.1-8b").layers
    assert default_seq_len(layers, limit, batch, BF16, BF16, budget) == expected


def test_the_rule_in_words():
    assert default_rule("cpu", None) == (
        "the largest power of two up to the model's context whose KV cache fits 32 MiB"
    )
    assert default_rule("cuda", 10 * 2**30).endswith("fits 1/8 of the GPU's free memory")


def test_time_estimate_arithmetic():
    # CPU fp32: fill 1e9 B at 0.5e9 B/s = 2 s, then 10 steps x 1e9 B at 1e9 B/s = 10 s
    assert estimate_run_s(10**9, 0, 10, "cpu", "float32") == pytest.approx(12.0)
    # CPU bf16 (emulated): 2 s + 10 x 1e9 / 0.2e9 = 52 s
    assert estimate_run_s(10**9, 0, 10, "cpu", "bfloat16") == pytest.approx(52.0)
    # GPU at a given 2e12 B/s: (4e9 + 1e9) / 50e9 = 0.1 s, + 35 x 4e9 / 2e12 = 0.07 s
    assert estimate_run_s(4 * 10**9, 10**9, 35, "cuda", "bfloat16", 2e12) == pytest.approx(0.17)


# ----- the announcement and the progress lines (CLI, torch-free) -------------------------------


def test_announce_line_states_bytes_and_time():
    from kvcalc.cli.measure import announce_line

    a = Announcement(
        model="llama-3.1-8b",
        seq_len=256,
        batch=1,
        device="cpu",
        kv_bytes=33_554_432,
        other_bytes=262_144,
        estimated_s=3.4,
        seq_len_rule="--seq-len not given: ...",
    )
    assert announce_line(a) == (
        "measure: llama-3.1-8b, 256 tokens (default size: --seq-len to choose) x batch 1 on cpu: "
        "33,554,432 B (33.55 MB, 32.00 MiB) of KV cache + 262,144 B (262.14 KB, 256.00 KiB) beside it; about 3 s"
    )
    short = Announcement("t", 64, 1, "cpu", 16_384, 0, 0.2)
    assert (
        announce_line(short)
        == "measure: t, 64 tokens x batch 1 on cpu: 16,384 B (16.38 KB, 16.00 KiB) of KV cache; under a second"
    )


def test_pipe_progress_prints_a_line_every_few_seconds():
    from kvcalc.cli.measure import PipeProgress

    now = [100.0]
    out = io.StringIO()
    p = PipeProgress(every_s=5.0, clock=lambda: now[0], out=out)
    for i in range(1, 13):  # one update a second for 12 s
        now[0] = 100.0 + i
        p("decode steps", i, 12)
    assert out.getvalue().splitlines() == ["measure: decode steps 5/12, 5 s", "measure: decode steps 10/12, 10 s"]
    quiet = io.StringIO()
    q = PipeProgress(every_s=5.0, clock=lambda: now[0], out=quiet)
    now[0] += 4.9  # a run shorter than the interval prints nothing
    q("decode steps", 1, 1)
    assert quiet.getvalue() == ""


# ----- a run without --seq-len (torch) ------------------------------------------------------------


def test_run_without_seq_len_uses_the_default_and_announces_first():
    pytest.importorskip("torch")
    from kvcalc import measure as M

    spec = load_model(TINY_YAML)
    fp16 = kv_format("fp16")
    events: list[object] = []
    res = M.run(
        M.MeasureRequest(model=spec, batch=1, k_format=fp16, v_format=fp16, device="cpu", steps=2),
        progress=lambda name, done, total: events.append(name),
        announce=events.append,
    )
    # the tiny model's 64 positions x 256 B = 16,384 B fit 32 MiB: the whole context
    assert res.seq_len == 64 and res.predicted_kv_bytes == res.measured_kv_bytes == 16_384
    assert isinstance(events[0], Announcement)  # before the probe, the allocation and the steps
    a = events[0]
    assert (a.seq_len, a.kv_bytes, a.device) == (64, 16_384, "cpu") and a.seq_len_rule is not None
    assert not any(isinstance(e, Announcement) for e in events[1:])
    note = next(n for n in res.notes if n.startswith("--seq-len not given"))
    assert note == (
        "--seq-len not given: 64 tokens, the largest power of two up to the model's context whose KV "
        "cache fits 32 MiB (33,554,432 B); context limit 64 (max_position_embeddings); give --seq-len "
        "for another size"
    )


def test_cli_announces_on_stderr_and_keeps_stdout_clean(cli):
    pytest.importorskip("torch")
    r = cli("measure", TINY_YAML, "--device", "cpu", "--steps", "2", "-f", "json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["seq_len"] == 64
    first = r.stderr.splitlines()[0]
    assert first.startswith(
        "measure: tiny-gqa, 64 tokens (default size: --seq-len to choose) x batch 1 on cpu: "
        "16,384 B (16.38 KB, 16.00 KiB) of KV cache + "
    )
    given = cli("measure", TINY_YAML, "--device", "cpu", "--steps", "2", "-s", "32", "-f", "json")
    assert given.stderr.startswith("measure: tiny-gqa, 32 tokens x batch 1 on cpu: 8,192 B (8.19 KB, 8.00 KiB)")


def test_help_states_the_rule(cli):
    text = " ".join(cli("measure", "--help").stdout.split())
    assert "largest power of two up to the model's context whose KV cache fits 32 MiB on the CPU" in text


# ----- sweep grids stop at the model's context ----------------------------------------------------


def test_within_context():
    assert within_context([1024, 8192, 32768, 131072], 1024) == ([1024], [8192, 32768, 131072])
    assert within_context([8192, 131072], 131072) == ([8192, 131072], [])  # the limit itself is kept
    assert within_context([2**21], None) == ([2**21], [])  # no stated context: nothing dropped


def test_sweep_drops_contexts_beyond_the_model_in_one_warning(cli):
    # gpt2: 1,024 positions; the default grid is 1k,8k,32k,128k
    r = cli("sweep", "gpt2", "--batch", "1", "-f", "json")
    assert r.exit_code == 0
    assert [row["seq_len"] for row in json.loads(r.stdout)] == [1024]
    assert r.stderr.strip() == (
        "warning: dropped the contexts of 8,192, 32,768, 131,072 tokens: beyond gpt2's "
        "max_position_embeddings (1,024); --beyond-context keeps them"
    )


def test_sweep_beyond_context_keeps_them_and_all_beyond_is_refused(cli):
    r = cli("sweep", "gpt2", "-s", "1k,8k", "--batch", "1", "--beyond-context", "-f", "json")
    assert [row["seq_len"] for row in json.loads(r.stdout)] == [1024, 8192]
    assert r.stderr.count("warning:") == 1 and "8,192 tokens is beyond gpt2's" in r.stderr
    bad = cli("sweep", "gpt2", "-s", "8k,32k")
    assert bad.exit_code == 2 and bad.stdout == ""
    assert bad.stderr.strip() == (
        "error: every --seq-len is beyond gpt2's max_position_embeddings (1,024): give "
        "shorter contexts, or --beyond-context to sweep them anyway"
    )
