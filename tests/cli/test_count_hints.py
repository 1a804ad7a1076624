"""The hint for a count or context option a command lacks names THAT command's own option, or
says it has none (issue 11, user trial items 2 and 4): `plan -b` is --concurrency (not
--batch), `check -b` has neither, `capacity --batch` is --concurrency (not click's
"Possible options: --batch-size, --ubatch-size", llama.cpp's n_batch), `estimate -c 4096` is a
context length: --seq-len (-s). `--batch` stays off plan and capacity
(tests/cli/test_flag_meanings.py: it is estimate / compare / measure / sweep's name)."""

from __future__ import annotations

import pytest

from kvcalc.cli.app import COMMANDS

B = "-b is llama.cpp's --batch-size (n_batch: `kvcalc capacity --engine llamacpp -b`)"
C = "-c is llama.cpp's --ctx-size (n_ctx: `kvcalc capacity --engine llamacpp -c`)"


@pytest.mark.parametrize(
    "args,hint",
    [
        (["plan", "llama-3.1-8b", "-b", "3"], f"-b; {B}; the number of sequences is --concurrency"),
        (
            ["capacity", "llama-3.1-8b", "--batch", "3"],
            (
                "--batch; the number of sequences is --concurrency on `kvcalc capacity`; "
                "its --batch-size (-b) is llama.cpp's n_batch"
            ),
        ),
        (
            ["plan", "llama-3.1-8b", "--batch", "3"],
            "--batch; the number of sequences is --concurrency on `kvcalc plan`",
        ),
        (
            ["estimate", "llama-3.1-8b", "--concurrency", "3"],
            "--concurrency; the number of sequences is --batch on `kvcalc estimate`",
        ),
        (
            ["check", "d.yaml", "-b", "3"],
            f"-b; {B}; `kvcalc check` takes no number of sequences (a deployment file's concurrency: field)",
        ),
        (
            ["check", "d.yaml", "-c", "3"],
            f"-c; {C}; `kvcalc check` takes no context length (a deployment file's max_seq_len: field)",
        ),
        (
            ["estimate", "llama-3.1-8b", "-c", "4096"],
            f"-c; {C}; a context length is --seq-len (-s), the number of sequences --batch",
        ),
        (
            ["plan", "llama-3.1-8b", "-c", "64"],
            f"-c; {C}; a context length is --seq-len (-s), the number of sequences --concurrency",
        ),
        (
            ["sweep", "llama-3.1-8b", "--ctx-size", "4096"],
            (
                "--ctx-size; --ctx-size is llama.cpp's n_ctx (`kvcalc capacity --engine llamacpp --ctx-size`); "
                "a context length is --seq-len (-s), the number of sequences --batch"
            ),
        ),
        (["models", "-b", "2"], f"-b; {B}; `kvcalc models` takes no number of sequences"),
    ],
)
def test_the_hint_names_this_commands_option(cli, args, hint):
    r = cli(*args)
    assert r.exit_code == 2
    assert r.output.splitlines()[0] == f"error: no such option: {hint}"
    assert "Possible options" not in r.output


def test_b_before_the_command_says_options_follow_it(cli):
    r = cli("-b", "3", "estimate", "llama-3.1-8b")
    assert r.exit_code == 2
    assert r.output.splitlines()[0] == (
        f"error: no such option: -b; {B}; options follow the command (`kvcalc estimate MODEL --seq-len 32k --batch 8`)"
    )


def command_options(cli_name: str) -> set[str]:
    cmd = next(c for c in COMMANDS if c.name == cli_name).load(None)
    return {o for p in cmd.params for o in getattr(p, "opts", ())}


@pytest.mark.parametrize("name", [c.name for c in COMMANDS if c.name != "capacity"])
def test_every_hint_names_an_option_the_command_has(cli, name):
    """On every command but capacity (which has -b): the option the `-b` hint names exists there."""
    import re

    args = [name, "-b", "3"] if name not in ("check",) else [name, "x.yaml", "-b", "3"]
    first = cli(*args).output.splitlines()[0]
    named = re.search(r"the number of sequences is (--[a-z-]+)", first)
    if named:
        assert named.group(1) in command_options(name)
    else:
        assert f"`kvcalc {name}` takes no number of sequences" in first
        assert not command_options(name) & {"--batch", "--concurrency"}


def test_a_word_click_reads_as_its_first_letter_is_named_as_typed(cli):
    """`sweep -ctk fp16`: click reports `-c` (it reads -c, t, k), which is not what was typed."""
    r = cli("sweep", "llama-3.1-8b", "-ctk", "fp16")
    assert r.exit_code == 2
    assert r.output.splitlines()[0] == (
        "error: no such option: -ctk; `kvcalc sweep` sets K and V together with "
        "--kv-dtype (-ctk / -ctv are on estimate and capacity)"
    )
    r = cli("models", "-ctv", "fp16")
    assert r.output.splitlines()[0] == "error: no such option: -ctv"
