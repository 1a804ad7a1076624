"""Issue 12 item 10: `kvcalc import` round-trips or refuses.

A two-line `source` once produced YAML that did not load back (the header comment broke over
two lines), and a `source` holding a newline and `sliding_window: 4 #` produced a YAML that
loaded as another model (the second line of the comment became a key). Now the values are
written by the YAML library, the header comments are one escaped line each
(`kvcalc.load.export.comment_line`), and the text is parsed back and compared before it is
printed or written (`check_round_trip`). Every fixture and a list of hostile strings import, then
load back to the same `ModelSpec`, the same bytes, and the same YAML text again.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kvcalc.calc import kv_cache
from kvcalc.load.export import spec_to_yaml
from kvcalc.load.models import load_model
from tests.bad_input.harness import ROOT, no_raw_controls, refused, run_kvcalc

FIXTURES = sorted((ROOT / "tests" / "data" / "hf").glob("*.json"))

#: strings that broke or could break a hand-formatted YAML, or a comment line
HOSTILE = [
    "line one\nline two",  # the two-line source of the report
    "x\nsliding_window: 4 #",  # the source that loaded as another model
    'it\'s "quoted"',
    "a: b: c",
    "- item",
    "#hash",
    "? key",
    "| literal",
    "> folded",
    "---",
    "...",
    "null",
    "yes",
    "1e3",
    "0x10",
    "~",
    "*alias",
    "&anchor",
    "!tag",
    "%directive",
    "@at",
    "`tick`",
    "{a: 1}",
    "[1, 2]",
    "'",
    '"',
    "\\",
    "  leading",
    "trailing  ",
    "ünïcødé 模型 🚀",
    "esc \x1b[2J bel \x07",
    "nul \x00",
    "del \x7f",
    "csi \x9b",
    "nel \x85 next",
    "ls \u2028 ps \u2029",
    "bom \ufeff",
    "rlo \u202e",
    "tab\there",
    "cr\rlf",
    "crlf\r\nx",
    "s" * 5000,
]


def round_trip(spec, tmp_path: Path, name: str = "m.yaml"):
    text = spec_to_yaml(spec, ["a warning\nin two lines \x1b[2J"])
    path = tmp_path / name
    path.write_bytes(text.encode("utf-8"))
    back = load_model(path)
    return text, back


def same_bytes(a, b) -> None:
    for t in (1, 4096, 131_072):
        assert kv_cache.kv_cache_bytes(a, t, 1, "bf16") == kv_cache.kv_cache_bytes(b, t, 1, "bf16")
    assert kv_cache.kv_bytes_per_token(a, "fp8") == kv_cache.kv_bytes_per_token(b, "fp8")


@pytest.mark.parametrize("fixture", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_every_fixture_round_trips(fixture, tmp_path):
    spec = load_model(fixture)
    text, back = round_trip(spec, tmp_path)
    assert back.model_dump() == spec.model_dump()
    same_bytes(spec, back)
    assert spec_to_yaml(back, ["a warning\nin two lines \x1b[2J"]) == text  # the same text again


@pytest.mark.parametrize("field", ["name", "source"])
@pytest.mark.parametrize("value", HOSTILE, ids=[repr(h)[:30] for h in HOSTILE])
def test_hostile_strings_round_trip(field, value, tmp_path, sliding_spec):
    spec = sliding_spec.model_copy(update={"source": "s", field: value})
    text, back = round_trip(spec, tmp_path)
    assert getattr(back, field) == value
    assert back.model_dump() == spec.model_dump()
    same_bytes(spec, back)
    # the header comments stay comments: every line is a comment or a key of the body
    body = yaml.safe_load(text)
    assert list(body)[:2] == ["name", "source"]
    assert "sliding_window" in body and body["sliding_window"] == 256


@pytest.mark.parametrize("value", ["line one\nline two", "x\nsliding_window: 4 #"])
def test_the_reported_sources_through_the_cli(value, tmp_path):
    src = tmp_path / "in.yaml"
    src.write_text(
        yaml.safe_dump(
            {
                "name": "m",
                "source": value,
                "n_layers": 6,
                "n_heads": 4,
                "n_kv_heads": 2,
                "head_dim": 32,
                "layer_pattern": ["sliding", "sliding", "full"],
                "sliding_window": 256,
            }
        )
    )
    out = tmp_path / "out.yaml"
    r = run_kvcalc("import", str(src), "-o", str(out))
    assert r.code == 0, r.stderr
    no_raw_controls(r)
    a, b = load_model(src), load_model(out)
    assert b.source == value and a.model_dump() == b.model_dump()
    # 4 sliding layers at 2 x 2 x 32 x 2 B = 256 B/token each, capped at the 256-token window, plus
    # 2 full layers: (4 x 256 + 2 x 4096) x 256 B = 2,359,296 B at 4,096 tokens; a window of 4 would give less
    assert kv_cache.kv_cache_bytes(b, 4096, 1, "bf16") == 2_359_296
    # stdout gives the same text as the file
    r2 = run_kvcalc("import", str(src))
    assert r2.code == 0 and r2.stdout == out.read_text()


def test_an_import_that_would_not_load_back_is_refused(tmp_path, monkeypatch, cli):
    # if the writer ever produced text that loads as another model, nothing is printed or written
    from kvcalc.load import export

    real = export.spec_to_yaml
    monkeypatch.setattr(export, "spec_to_yaml", lambda spec, w=(): real(spec, w).replace("n_layers: 12", "n_layers: 2"))
    out = tmp_path / "out.yaml"
    r = cli("import", str(ROOT / "tests" / "data" / "hf" / "gpt2.json"), "-o", str(out))
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr.splitlines() == [
        "error: kvcalc import cannot write this model as YAML that loads back the same: field 'n_layers' would change"
    ]
    assert not out.exists()


def test_a_lone_surrogate_is_refused_at_read(tmp_path):
    # JSON may spell "\ud800", which no file or terminal can hold: refused when read, not at write
    path = tmp_path / "config.json"
    path.write_text(
        '{"_name_or_path": "x\\ud800y", "model_type": "llama", "num_hidden_layers": 2, '
        '"num_attention_heads": 2, "hidden_size": 8}'
    )
    line = refused(run_kvcalc("import", str(path), "-o", str(tmp_path / "out.yaml")), str(path))
    # the key that holds it is named (issue 23 item 7: the key where it happens)
    assert line == (
        f"{path}: field '_name_or_path': invalid JSON: a string holds \\ud800, half of a UTF-16 "
        "surrogate pair, which is not text"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json"]
