"""Issue 12 item 9: terminal control characters from a user's file never reach the terminal raw.

A model name holding `ESC ] 0 ; ... BEL` retitles the terminal and `ESC [ 2 J` clears it; C1
`CSI` (U+009B) does the same on some terminals; U+202E reverses what follows. Every text output
writes them visibly (`\\x1b`, `\\x07`, `\\x9b`, `\\u202e`: kvcalc.text.escape_controls): the
tables (key/value, grid, wide-or-records), CSV, markdown, error and warning lines, `kvcalc
check`, plan and capacity lines; JSON (`\\u001b`) and YAML (`\\e`) escape them their own way.
"""

from __future__ import annotations

import json

import pytest

from tests.bad_input.harness import no_raw_controls, refused, run_kvcalc

#: YAML double-quoted escapes: ESC ] 0 ; title BEL, ESC [ 2 J, C1 CSI, RLO
EVIL_NAME_YAML = r'"evil\e]0;pwned\a\e[2J\x9b\u202ename"'
EVIL_NAME_SHOWN = r"evil\x1b]0;pwned\x07\x1b[2J\x9b\u202ename"
EVIL_NAME = "evil\x1b]0;pwned\x07\x1b[2J\x9b\u202ename"


@pytest.fixture
def evil_model(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(
        f'name: {EVIL_NAME_YAML}\nsource: "a\\e[31mred"\nn_layers: 2\nn_heads: 2\nhead_dim: 2\n'
        "max_position_embeddings: 4096\ndtype: fp16\nhidden_size: 4\nvocab_size: 100\nintermediate_size: 8\n"
    )
    return path


@pytest.mark.parametrize(
    "args",
    [
        ["estimate", "{}", "-s", "1k"],
        ["estimate", "{}", "-s", "1k", "-f", "csv"],
        ["estimate", "{}", "-s", "1k", "-f", "markdown"],
        ["estimate", "{}", "-s", "1k,2k"],
        ["compare", "{}", "gpt2", "-s", "1k", "--kv-dtype", "fp16"],
        ["sweep", "{}", "-s", "1k", "--batch", "1"],
        ["estimate", "{}", "-s", "1k", "--gpu", "h100-sxm"],
        ["capacity", "{}", "--engine", "vllm", "--kv-memory", "1GiB", "--max-model-len", "1024"],
    ],
    ids=["table", "csv", "markdown", "lengths", "compare", "sweep", "gpu", "capacity"],
)
def test_every_text_output_escapes_them(evil_model, args):
    r = run_kvcalc(*[str(evil_model) if a == "{}" else a for a in args])
    assert r.code == 0, r.stderr
    no_raw_controls(r)
    assert EVIL_NAME_SHOWN in r.stdout


@pytest.mark.parametrize("fmt", ["json", "yaml"])
def test_machine_formats_escape_them_their_own_way(evil_model, fmt):
    r = run_kvcalc("estimate", str(evil_model), "-s", "1k", "-f", fmt)
    assert r.code == 0, r.stderr
    no_raw_controls(r)
    if fmt == "json":
        assert json.loads(r.stdout)["model"] == EVIL_NAME  # the value itself is kept exactly
    else:
        import yaml

        assert yaml.safe_load(r.stdout)["model"] == EVIL_NAME


def test_an_error_line_escapes_them(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text('name: m\nn_layers: 2\nn_heads: 2\nhead_dim: 2\n"bad\\e[2Jkey": 1\n')
    line = refused(run_kvcalc("estimate", str(path), "-s", "1k", "-f", "json"), str(path), json_out=True)
    assert line.startswith(f"{path}:5: field 'bad\\x1b[2Jkey': unknown field; known fields: name, source, ")


def test_a_warning_line_escapes_them(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(
        json.dumps(
            {
                "model_type": "evil\x1b[2J",
                "num_hidden_layers": 2,
                "num_attention_heads": 2,
                "hidden_size": 8,
                "torch_dtype": "bfloat16",
            }
        )
    )
    r = run_kvcalc("estimate", str(path), "-s", "1k", "-f", "json", "--trust-plain-decoder")
    assert r.code == 0, r.stderr
    no_raw_controls(r)
    assert r.stderr.startswith(f"warning: {path}: model_type 'evil\\x1b[2J' has no kvcalc mapping")


def test_check_escapes_them_in_its_table_and_its_errors(tmp_path):
    (tmp_path / "ok.yaml").write_text(
        f"name: {EVIL_NAME_YAML}\nmodel: gpt2\ngpu: h100-sxm\nmax_seq_len: 1024\nconcurrency: 1\n"
    )
    (tmp_path / "bad.yaml").write_text('name: bad\nmodel: gpt2\ngpu: "h100\\e[2J"\nmax_seq_len: 1024\nconcurrency: 1\n')
    r = run_kvcalc("check", str(tmp_path))
    assert r.code == 2
    no_raw_controls(r)
    assert r.stderr.splitlines() == [
        f"error: {tmp_path / 'bad.yaml'}:3: field 'gpu': unknown GPU 'h100\\x1b[2J'; "
        "did you mean 'h200', 'h100-sxm' or 'h100-nvl'?"
    ]


def test_plan_escapes_them_in_its_lines(evil_model):
    r = run_kvcalc("plan", str(evil_model), "--seq-len", "1k", "--concurrency", "1", "--gpu", "h100-sxm")
    assert r.code == 0, r.stderr
    no_raw_controls(r)


def test_import_writes_them_as_yaml_escapes(evil_model, tmp_path):
    r = run_kvcalc("import", str(evil_model))
    assert r.code == 0, r.stderr
    no_raw_controls(r)
    assert 'name: "evil\\e]0;pwned\\a\\e[2J\\x9B\\u202ename"' in r.stdout.splitlines()
    out = tmp_path / "back.yaml"
    out.write_text(r.stdout)
    from kvcalc.load.models import load_model

    assert load_model(out).name == EVIL_NAME
