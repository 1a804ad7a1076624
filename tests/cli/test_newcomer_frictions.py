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
