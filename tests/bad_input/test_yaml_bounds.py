"""Issue 12 item 3: YAML that expands or nests without bound, and messages that echo too much.

A 1.2 KB file with an alias bomb in `source` or `layer_pattern` once took 1.5 GB and never
finished; a list nested 5,000 deep ended in "internal error: RecursionError", exit 1; the
validation message `repr()`ed the whole input. Now (kvcalc.load.files): aliases may add at most
10,000 values, nesting stops at 32 levels (YAML and JSON), an alias inside its own anchor is
refused, and a message echoes at most 60 characters of a value. Every config kind is tried.
"""

from __future__ import annotations

import json

import pytest

from tests.bad_input.harness import refused, run_kvcalc

MODEL = "name: m\nn_layers: 4\nn_heads: 4\nhead_dim: 8\nmax_position_embeddings: 4096\n"
GPU = (
    "key: my-gpu\nname: My GPU\nsource: test\nmemory_bytes: 80000000000\nhbm_bytes_per_s: 3.35e12\n"
    "bf16_flops_per_s: 9.9e14\n"
)


def bomb(levels: int = 9, width: int = 9) -> str:
    """The billion laughs: 9 levels of 9 aliases to the level below, 9^9 = 387,420,489 strings
    from about 1 KB of YAML. Anchors `l0`..`l{levels-1}`, the top one `l{levels-1}`."""
    lines = ["l0: &l0 [" + ", ".join(["lol"] * width) + "]"]
    for i in range(1, levels):
        lines.append(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * width) + "]")
    return "\n".join(lines) + "\n"


# each file: the bomb's anchors (keys the schema does not know: a loader that expanded first and
# validated second would hang before reporting them), then the config with the bomb in one field
CASES = {
    "model source": ("estimate", "m.yaml", MODEL + "source: *l8\n"),
    "model layer_pattern": ("estimate", "m.yaml", MODEL + "layer_pattern: *l8\n"),
    "gpu name": ("gpu", "g.yaml", GPU.replace("name: My GPU\n", "") + "name: *l8\n"),
    "deployment description": (
        "check",
        "d.yaml",
        "name: d\nmodel: gpt2\ngpu: h100-sxm\nmax_seq_len: 1024\nconcurrency: 1\ndescription: *l8\n",
    ),
    "prices": ("prices", "p.yaml", "h100-sxm: *l8\n"),
}


def run_kind(kind: str, path: str):
    if kind == "estimate":
        return run_kvcalc("estimate", path, "-s", "1k", "-f", "json")
    if kind == "gpu":
        return run_kvcalc("estimate", "gpt2", "-s", "1k", "--gpu", path, "-f", "json")
    if kind == "check":
        return run_kvcalc("check", path)
    return run_kvcalc(
        "plan",
        "llama-3.1-8b",
        "--seq-len",
        "8k",
        "--concurrency",
        "4",
        "--gpu",
        "h100-sxm",
        "--prices",
        path,
        "-f",
        "json",
    )


@pytest.mark.parametrize("case", list(CASES))
def test_an_alias_bomb_is_refused_at_once(case, tmp_path):
    kind, name, tail = CASES[case]
    text = bomb() + tail
    path = tmp_path / name
    path.write_text(text)
    assert len(text) < 1500  # a small file
    line = refused(run_kind(kind, str(path)), str(path), json_out=True)
    assert "aliases expand to more than 10,000 values (an alias bomb?)" in line


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_nesting_5000_deep_is_refused_not_an_internal_error(suffix, tmp_path):
    path = tmp_path / f"m{suffix}"
    deep = "[" * 5000 + "]" * 5000
    path.write_text(MODEL + f"source: {deep}\n" if suffix == ".yaml" else '{"source": ' + deep + "}")
    line = refused(run_kvcalc("estimate", str(path), "-s", "1k", "-f", "json"), str(path), json_out=True)
    assert line.endswith("nested deeper than 32 levels")


def test_nesting_past_the_cap_through_aliases_is_refused(tmp_path):
    # each anchor wraps the one before: 40 levels once expanded from 40 short lines
    lines = ["a0: &a0 [x]"] + [f"a{i}: &a{i} [*a{i - 1}]" for i in range(1, 40)]
    path = tmp_path / "m.yaml"
    path.write_text(MODEL + "\n".join(lines) + "\n")
    line = refused(run_kvcalc("estimate", str(path), "-s", "1k"), str(path))
    assert "nested deeper than 32 levels once aliases are expanded" in line


def test_an_alias_inside_its_own_anchor_is_refused(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(MODEL + "source: &s [a, *s]\n")
    line = refused(run_kvcalc("estimate", str(path), "-s", "1k"), str(path))
    assert line == f"{path}:6: field 'source[1]': invalid YAML: the alias *s refers to the node it is in"


def test_a_modest_alias_still_works(tmp_path):
    # an anchor used once more is fine: 2 x 4 layers x 4 KV heads x 8 head_dim x 2 B = 512 B/token
    path = tmp_path / "m.yaml"
    path.write_text("name: m\nn_layers: 4\nn_heads: &h 4\nn_kv_heads: *h\nhead_dim: 8\n")
    r = run_kvcalc("estimate", str(path), "-s", "1k", "-f", "json")
    assert r.code == 0, r.stderr
    assert json.loads(r.stdout)["kv_bytes_per_token"] == 512


def test_a_huge_value_is_echoed_as_an_excerpt(tmp_path):
    # `n_layers: "aaaa..."` (100,000 characters) once came back whole in the message
    path = tmp_path / "m.yaml"
    path.write_text(MODEL.replace("n_layers: 4", "n_layers: '" + "a" * 100_000 + "'"))
    line = refused(run_kvcalc("estimate", str(path), "-s", "1k", "-f", "json"), str(path), "n_layers", json_out=True)
    assert "(got 'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa…)" in line
    assert len(line) < len(str(path)) + 200


def test_a_huge_unknown_key_is_echoed_as_an_excerpt(tmp_path):
    path = tmp_path / "m.json"  # JSON: YAML caps a plain key at 1,024 characters itself
    path.write_text(json.dumps({"name": "m", "n_layers": 4, "n_heads": 4, "head_dim": 8, "k" * 100_000: 1}))
    line = refused(run_kvcalc("estimate", str(path), "-s", "1k"), str(path))
    assert f"field '{'k' * 39}…': unknown field; known fields: name, source, " in line  # the list, once
    # the list of ModelSpec's fields (about 1,220 characters with the 2026 layer and weight fields),
    # not the 100,000-character key
    assert len(line) < len(str(path)) + 1400


def test_an_integer_of_5000_digits_is_one_line_not_an_internal_error(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text(MODEL.replace("n_layers: 4", "n_layers: " + "9" * 5000))
    line = refused(run_kvcalc("estimate", str(path), "-s", "1k"), str(path))
    assert line.startswith(f"{path}: invalid YAML: ") and "digits" in line


# ----- the key where it happens (issue 23 item 7) ---------------------------------------------


def test_an_alias_bomb_names_the_key_where_it_goes_past_the_cap(tmp_path):
    # each alias adds its target's nodes, expanded: l1's 9 aliases of l0 (1 + 9 = 10 nodes) add
    # 90, l2's add 9 x 91 = 819, l3's 9 x 820 = 7,380 (8,289 in all); l4's first, an alias of l3
    # (1 + 9 x 820 = 7,381 nodes), passes 10,000: the key is l4, its item 0, on line 5
    path = tmp_path / "m.yaml"
    path.write_text(bomb() + MODEL)
    line = refused(run_kvcalc("estimate", str(path), "-s", "1k"), str(path))
    assert line.startswith(f"{path}:5: field 'l4[0]': invalid YAML: aliases expand to more than 10,000 values"), line


@pytest.mark.parametrize("suffix,field", [(".yaml", "source"), (".json", "source")])
def test_nesting_names_the_key(suffix, field, tmp_path):
    path = tmp_path / f"m{suffix}"
    deep = "[" * 5000 + "]" * 5000
    path.write_text(MODEL + f"source: {deep}\n" if suffix == ".yaml" else '{"source": ' + deep + "}")
    line = refused(run_kvcalc("estimate", str(path), "-s", "1k"), str(path))
    assert f"field '{field}" in line and line.endswith("nested deeper than 32 levels"), line


@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_nested_mappings_name_their_path(suffix, tmp_path):
    # extra: {k0: {k1: {... k39: 1}}}: the 33rd level is k31's value, under `extra`
    data: dict = {}
    cur = data
    for i in range(40):
        cur[f"k{i}"] = {} if i < 39 else 1
        cur = cur[f"k{i}"] if i < 39 else cur
    path = tmp_path / f"m{suffix}"
    if suffix == ".json":
        path.write_text(json.dumps({"name": "m", "n_layers": 4, "extra": data}))
    else:
        import yaml

        path.write_text(MODEL + yaml.safe_dump({"extra": data}))
    line = refused(run_kvcalc("estimate", str(path), "-s", "1k"), str(path))
    assert "field 'extra...." in line and ".k29" in line and "nested deeper than 32 levels" in line, line
