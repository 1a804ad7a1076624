"""One flag, one meaning (issue 11 item 3): every option string (`-b`, `-c`, `--batch`,
`--max-num-seqs` ...) means the same thing on every command that takes it. `-b` and `-c` are
llama.cpp's (`--batch-size` n_batch, `--ctx-size` n_ctx), as pasted llama.cpp launch lines mean
them; the number of sequences is `--batch` / `--concurrency`, and a command without llama.cpp's
options answers `-b` / `-c` with that hint instead of reading them as something else."""

from __future__ import annotations

import collections

import pytest

from kvcalc.cli.app import COMMANDS, app

#: parameter names that differ between commands for the same thing (a list-valued form on
#: `plan`, a command's own name for it); any other parameter means what its name says
SAME_THING = {
    "seq_len": "tokens per sequence",
    "max_model_len": "tokens per sequence",
    "batch": "sequences",
    "concurrency": "sequences",
    "parallel": "sequences",
    "engine": "engine",
    "engine_name": "engine",
    "gpu": "GPU",
    "gpus": "GPU",
    "kv_dtype": "KV format",
    "kv_dtypes": "KV format",
    "weight_dtype": "weight format",
    "weight_dtypes": "weight format",
}


def flag_meanings() -> dict[str, set[tuple[str, str]]]:
    """Every option string of every command (and the app's own) -> {(meaning, command)}."""
    import typer

    out: dict[str, set[tuple[str, str]]] = collections.defaultdict(set)
    commands = [(c.name, c.load(None)) for c in COMMANDS] + [("kvcalc", typer.main.get_command(app))]
    for name, cmd in commands:
        for p in cmd.params:
            for flag in [*getattr(p, "opts", ()), *getattr(p, "secondary_opts", ())]:
                if flag.startswith("-"):
                    out[flag].add((SAME_THING.get(p.name, p.name), name))
    return out


def test_every_flag_means_one_thing_on_every_command():
    clashes = {flag: sorted(uses) for flag, uses in flag_meanings().items() if len({m for m, _ in uses}) > 1}
    assert clashes == {}


def test_b_and_c_are_llama_cpps_wherever_they_exist():
    meanings = flag_meanings()
    assert {m for m, _ in meanings["-b"]} == {"batch_size"}  # llama.cpp n_batch
    assert {m for m, _ in meanings["-c"]} == {"ctx_size"}  # llama.cpp n_ctx
    assert {c for _, c in meanings["-b"]} == {c for _, c in meanings["--batch-size"]} == {"capacity"}
    # the sequence count keeps its long names on the commands that take it
    assert {c for m, c in meanings["--batch"]} == {"estimate", "compare", "measure", "sweep"}
    assert {m for m, _ in meanings["--max-num-seqs"]} == {"sequences"}


@pytest.mark.parametrize(
    "args,flag,count",
    [
        (["estimate", "llama-3.1-8b", "-b", "12"], "-b", "--batch"),
        (["sweep", "llama-3.1-8b", "-b", "1,8"], "-b", "--batch"),
        (["compare", "llama-3.1-8b", "-b", "2"], "-b", "--batch"),
        (["plan", "llama-3.1-8b", "-c", "64"], "-c", "--concurrency"),  # plan's own name for it
        (["estimate", "llama-3.1-8b", "-c", "4096"], "-c", "--batch"),
    ],
)
def test_b_and_c_elsewhere_are_refused_with_the_hint(cli, args, flag, count):
    r = cli(*args)
    assert r.exit_code == 2
    first = r.output.splitlines()[0]
    assert first.startswith(f"error: no such option: {flag}; {flag} is llama.cpp's --")
    assert first.endswith(count)  # "the number of sequences is --batch", "... sequences --concurrency"


def test_sequences_by_their_long_name(cli):
    import json

    # --batch 12 at 32k: 2 x 80 layers x 8 KV heads x 128 x 32,768 tokens x 12 x 2 B = 128,849,018,880 B
    r = cli("estimate", "llama-3.1-70b", "-s", "32k", "--batch", "12", "-f", "json")
    assert r.exit_code == 0
    assert json.loads(r.stdout)["kv_cache_bytes"] == 128_849_018_880
