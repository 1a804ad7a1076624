"""The newcomer's frictions of issue 23 ("tried as a new user would, from the README on a clean
clone"), each pinned where it was fixed: a command's help names only options it has."""

from __future__ import annotations

import json

import pytest

from kvcalc.cli.app import COMMANDS


@pytest.mark.parametrize("command", [c.name for c in COMMANDS])
def test_help_mentions_engine_only_where_the_command_has_it(cli, command):
    # friction 6: `measure --help` and `compare --help` said "with --engine, the engine's default"
    # (the shared --kv-dtype help) on commands without --engine
    r = cli(command, "--help")
    assert r.exit_code == 0, r.output
    has_option = any(line.lstrip().startswith(("--engine", "-e, --engine")) for line in r.stdout.splitlines())
    mentions = "--engine" in r.stdout
    assert mentions == has_option, (command, has_option)


def _sections(help_text: str) -> dict[str, int]:
    """Section title -> the options listed under it (lines that start an option)."""
    out: dict[str, int] = {}
    title = None
    for line in help_text.splitlines():
        if line and not line.startswith(" ") and line.endswith(":"):
            title = line[:-1]
            out[title] = 0
        elif title and line.startswith("  -"):
            out[title] += 1
    return out


def test_capacity_help_groups_its_options(cli):
    # friction 5: 43 options in one flat list; now one heading per kind (typer's rich_help_panel,
    # honoured in kvcalc's plain help by `lazy.LazyGroupCommand.format_options`)
    r = cli("capacity", "--help")
    assert r.exit_code == 0, r.output
    assert _sections(r.stdout) == {
        "Arguments": 0,
        "Options": 3,  # --engine, --format, --help
        "KV memory, offload tiers and shared prefixes": 16,  # --kv-memory and the tiers below the GPU (issue 22)
        "Requests": 2,
        "Parallel layout": 8,
        "KV cache format": 3,
        "vLLM (--engine vllm)": 10,
        "SGLang (--engine sglang)": 10,  # + the 4 Mamba state-pool options
        "llama.cpp (--engine llamacpp)": 14,
        "GPU and model source": 5,
    }


@pytest.mark.parametrize("command", ["estimate", "sweep", "plan"])
def test_other_commands_group_the_same_option_groups(cli, command):
    sections = _sections(cli(command, "--help").stdout)
    assert "Options" in sections and ("GPU and memory plan" in sections or "vLLM (--engine vllm)" in sections)


# ----- friction 4: "how many 32k requests fit on one H100" asked of llama.cpp -------------------

#: Llama-3.1-8B in f16: 2 x 32 layers x 8 KV heads x 128 x 2 B = 131,072 B per token; a request
#: of 32,768 tokens is 4,294,967,296 B (4 GiB) of llama.cpp cells (meta-llama/Llama-3.1-8B config.json)
REQUEST_32K_BYTES = 131_072 * 32_768


@pytest.mark.parametrize(
    "args,n",
    [
        # what the H100 SXM plan leaves for KV (0.9 x memory - bf16 weights - reserves, as vLLM and
        # SGLang are sized): 59,648,604,569 B // 4 GiB = 13 (13.89)
        (["--gpu", "h100-sxm"], 13),
        # 50 GiB // 4 GiB = 12 (12.5): before, one context of 409,600 cells ("12.50x")
        (["-m", "50GiB"], 12),
    ],
)
def test_llamacpp_answers_how_many_requests_fit(cli, args, n):
    r = cli("capacity", "llama-3.1-8b", "-e", "llamacpp", *args, "-L", "32k", "-f", "json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    # llama.cpp allocates -c N x 32,768 cells up front, -np N slots of 32,768
    assert (d["n_ctx"], d["max_concurrency"], d["engine_kv_bytes"]) == (n * 32_768, float(n), n * REQUEST_32K_BYTES)
    assert d["engine_kv_bytes"] <= d["kv_memory_bytes"] < (n + 1) * REQUEST_32K_BYTES
    assert d["notes"][-1] == (
        f"{n} requests of 32,768 tokens fit: llama.cpp allocates the whole context up front, "
        f"-c {n * 32_768} -np {n} ({n * 32_768:,} cells, {n} slots of 32,768)"
    )
    if "--gpu" in args:
        assert d["kv_memory_bytes"] == 59_648_604_569


def test_llamacpp_requests_stop_at_its_slot_limit(cli):
    # Llama-3.2-1B: 2 x 16 x 8 x 64 x 2 B = 32,768 B per token, 32 MiB per 1k request: 50 GiB
    # would hold 1,600, but llama.cpp takes at most 256 sequences (LLAMA_MAX_SEQ)
    r = cli("capacity", "llama-3.2-1b", "-e", "llamacpp", "-m", "50GiB", "-L", "1k", "-f", "json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert (d["n_ctx"], d["max_concurrency"]) == (256 * 1024, 256.0)
    assert "more slots are refused (" in d["notes"][-1] and "256" in d["notes"][-1]


def test_llamacpp_gpu_with_ctx_size_is_still_refused(cli):
    r = cli("capacity", "llama-3.1-8b", "-e", "llamacpp", "--gpu", "h100-sxm", "-c", "8k")
    assert r.exit_code == 2
    assert r.stderr.startswith("error: --gpu h100-sxm: --gpu applies to --engine vllm"), r.stderr


# ----- friction 7: URLs break at `/` only, units stay with their figures ----------------------

UNIT_WORDS = ("B", "GB", "GiB", "MB", "MiB", "GB,", "GiB)", "MiB)", "GB)", "B/token", "ms", "s", "tokens")


def _value_lines(table: str) -> list[str]:
    """The value column's lines of a two-column box table."""
    out = []
    for line in table.splitlines():
        cells = line.split("│")
        if len(cells) == 4:
            out.append(cells[2].strip())
    return out


def _run(args: list[str], columns: str | None) -> str:
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    if columns is not None:
        env["COLUMNS"] = columns
    r = subprocess.run(
        [sys.executable, "-m", "kvcalc", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=Path(__file__).parents[2],
        timeout=120,
    )  # stdout a pipe: rich's 80 columns
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.mark.parametrize("columns", ["60", "80", None])
@pytest.mark.parametrize(
    "args",
    [
        ["estimate", "gemma-3-27b", "-s", "32k", "--gpu", "h100-sxm"],
        ["capacity", "llama-3.1-8b", "-e", "llamacpp", "-m", "50GiB", "-L", "32k"],
    ],
)
def test_tables_fit_urls_break_at_a_slash_and_units_stay(args, columns):
    out = _run(args, columns)
    width = int(columns or 80)
    assert max(len(line) for line in out.splitlines() if line.startswith(("│", "┌", "└"))) <= width
    values = _value_lines(out)
    assert values
    for i, v in enumerate(values):
        assert v.split(" ")[0] not in UNIT_WORDS, (values[i - 1], v)  # a unit never starts a line
    if args[1] == "gemma-3-27b":
        # the source's URL: whole, or broken after a `/` (never `gemma-3-2` / `7b-it`)
        url = "(huggingface.co/google/gemma-3-27b-it/blob/main/config.json)"
        start = next(i for i, v in enumerate(values) if "(huggingface.co/" in v)
        parts = []
        for v in values[start:]:
            parts.append(v.split(" ")[-1] if not parts else v)
            if v.endswith(")"):
                break
        assert "".join(parts) == url and all(p.endswith("/") for p in parts[:-1]), parts


def test_wrap_line_rules():
    from kvcalc.report.widths import wrap_line

    # a figure keeps its unit: "2.91 GiB)" moves as one piece
    assert wrap_line("3,120,562,176 B (3.12 GB, 2.91 GiB)", 34) == ["3,120,562,176 B (3.12 GB,", "2.91 GiB)"]
    # a URL too long for the line breaks after a `/`, never inside a name
    assert wrap_line("(huggingface.co/google/gemma-3-27b-it/blob/main/config.json)", 34) == [
        "(huggingface.co/google/",
        "gemma-3-27b-it/blob/main/",
        "config.json)",
    ]
    # a word with no `/` that cannot fit stays whole (rich folds it; no figure is that long)
    assert wrap_line("a " + "x" * 40, 10) == ["a", "x" * 40]
    assert wrap_line("fits as is", 80) == ["fits as is"]
