"""The newcomer's frictions of issue 23 ("tried as a new user would, from the README on a clean
clone"), each pinned where it was fixed: a command's help names only options it has."""

from __future__ import annotations

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
        "Arguments": 0, "Options": 4,  # --kv-memory, --engine, --format, --help
        "Requests": 2, "Parallel layout": 3, "KV cache format": 3, "vLLM (--engine vllm)": 10,
        "SGLang (--engine sglang)": 4, "llama.cpp (--engine llamacpp)": 14, "GPU and model source": 4}


@pytest.mark.parametrize("command", ["estimate", "sweep", "plan"])
def test_other_commands_group_the_same_option_groups(cli, command):
    sections = _sections(cli(command, "--help").stdout)
    assert "Options" in sections and ("GPU and memory plan" in sections or "vLLM (--engine vllm)" in sections)
