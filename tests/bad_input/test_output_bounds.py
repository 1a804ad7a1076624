"""Issue 12 item 4: output that grows without bound.

A 5 MB `source` once took 25 s to wrap into the table; 100,000 unknown keys printed 100,002
lines (78 MB), each repeating the full field list. Now a text cell, title or caption is cut to
`TEXT_CELL_CHARS` (1,000) characters with an ellipsis before any layout (kvcalc.report.tables),
and a file's problems are listed up to 10, then "and N more problems" (kvcalc.load.files).
"""

from __future__ import annotations

import json

from tests.bad_input.harness import no_raw_controls, run_kvcalc

#: a tighter bound than the harness's: the old table took 8-25 s, the new one well under 1 s
TABLE_BOUND_S = 15


def test_a_4_mb_source_is_cut_in_the_table_quickly(tmp_path):
    # 4 MB: the most a model config may be (tests/bad_input/test_readers.py); words, so that the
    # old layout wrapped all of them
    path = tmp_path / "m.yaml"
    path.write_text("name: m\nn_layers: 2\nn_heads: 2\nhead_dim: 2\nsource: '" + "word " * 800_000 + "'\n")
    r = run_kvcalc("estimate", str(path), "-s", "1k", timeout=TABLE_BOUND_S)
    assert r.code == 0, r.stderr
    source = [ln for ln in r.stdout.splitlines() if "word" in ln]
    # 1,000 characters in a 58-column value cell: 17-18 lines, the last ending in the ellipsis
    assert 15 <= len(source) <= 20
    assert "…" in source[-1]
    assert len(r.stdout) < 6_000
    # the figures are whole: 2 x 2 layers x 2 KV heads x 2 head_dim x 1024 tokens x 2 B = 32,768 B
    assert "│ KV cache        │ 32,768 B (32.77 KB, 32.00 KiB)" in r.stdout


def test_a_long_model_name_is_cut_in_every_table(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(
        "name: " + "n" * 100_000 + "\nn_layers: 2\nn_heads: 2\nhead_dim: 2\nmax_position_embeddings: 4096\n"
    )
    for args in (
        ["estimate", str(path), "-s", "1k"],
        ["estimate", str(path), "-s", "1k,2k"],
        ["compare", str(path), "gpt2", "-s", "1k", "--kv-dtype", "fp16"],
        ["sweep", str(path), "-s", "1k", "--batch", "1"],
    ):
        r = run_kvcalc(*args, timeout=TABLE_BOUND_S)
        assert r.code == 0, (args, r.stderr)
        assert "n" * 1000 not in r.stdout and "…" in r.stdout, args
        assert len(r.stdout) < 20_000, (args, len(r.stdout))


def test_an_error_line_that_names_a_long_value_is_cut(tmp_path):
    # `compare` names each model in its dtype error: the whole 100,000-character name once
    path = tmp_path / "m.yaml"
    path.write_text("name: " + "n" * 100_000 + "\nn_layers: 2\nn_heads: 2\nhead_dim: 2\n")
    r = run_kvcalc("compare", str(path), "gpt2", "-s", "1k", timeout=TABLE_BOUND_S)
    assert r.code == 2 and r.stdout == ""
    (line,) = r.stderr.splitlines()
    # the safety net of kvcalc.cli.output.message_lines: 2,000 characters after "error: "
    assert line.startswith("error: the models' dtypes differ (nnnn") and line.endswith("…")
    assert len(line) == len("error: ") + 2000


def test_100000_unknown_keys_give_ten_lines_and_a_count(tmp_path):
    path = tmp_path / "m.json"
    data = {"name": "m", "n_layers": 2, "n_heads": 2, "head_dim": 2}
    data.update({f"unknown_{i}": i for i in range(100_000)})
    path.write_text(json.dumps(data))
    r = run_kvcalc("estimate", str(path), "-s", "1k", "-f", "json", timeout=TABLE_BOUND_S)
    assert r.code == 2 and r.stdout == ""
    lines = r.stderr.splitlines()
    assert len(lines) == 11
    assert lines[0].startswith(f"error: {path}: field 'unknown_0': unknown field; known fields: name, source, ")
    assert lines[1] == f"error: {path}: field 'unknown_1': unknown field"  # the field list is not repeated
    assert lines[-1] == f"error: {path}: and 99,990 more problems"
    no_raw_controls(r)


def test_the_cell_cap_is_far_above_every_figure_bearing_cell():
    # the cap cuts text only: the longest cell kvcalc builds itself (the formula, one term per
    # layer kind) over every bundled model, with K and V in different block formats, stays
    # under half of it
    import kvcalc
    from kvcalc.errors import KvcalcError
    from kvcalc.load.files import bundled
    from kvcalc.report.widths import TEXT_CELL_CHARS

    assert TEXT_CELL_CHARS == 1000
    longest = 0
    for name in bundled("models"):
        for kw in ({"kv_dtype": "fp16"}, {"k_dtype": "int4:g32:fp32", "v_dtype": "q4_1"}):
            try:
                est = kvcalc.estimate(name, seq_len=1_048_576, batch=4096, **kw)
            except KvcalcError:  # a head that is no whole number of 32-value blocks
                continue
            longest = max(longest, len(est.formula))
    assert 150 < longest < TEXT_CELL_CHARS // 2, longest
