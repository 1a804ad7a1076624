"""`kvcalc check` reports an error the calc raises against the deployment key of its `field`,
at that key's line (no wording parsed): tp, pp, kv_dtype (a weight-only format refused by the
schema; a group the heads do not divide refused by the calc) and weight_dtype."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvcalc.cli import app
from kvcalc.errors import ConfigError, KvcalcError
from kvcalc.load.deployments import field_error

runner = CliRunner()
HEAD = "model: llama-3.1-8b\ngpu: h100-sxm\nmax_seq_len: 8192\n"  # lines 1-3

CASES = {
    # file name: (line 4, line 5, the error line)
    "tp": (
        "count: 3\n",
        "tp: 3\n",
        "tp.yaml:5: field 'tp': llama-3.1-8b has 32 attention heads, not divisible by 3; use a tp that divides 32",
    ),
    "pp": ("count: 64\n", "pp: 64\n", "pp.yaml:5: field 'pp': 64 exceeds the model's 32 layers"),
    "kv-mxfp4": (
        "concurrency: 2\n",
        "kv_dtype: mxfp4\n",
        "kv-mxfp4.yaml:5: field 'kv_dtype': mxfp4 is a weight format, not a KV-cache format; "
        "for the cache use one of fp32,",
    ),
    "kv-group": (
        "concurrency: 2\n",
        "kv_dtype: int4:g256\n",
        "kv-group.yaml:5: field 'kv_dtype': int4:g256:fp16 packs 256 values per block; "
        "a K head of 128 values is not a whole number of blocks",
    ),
    "weights": (
        "concurrency: 2\n",
        "weight_dtype: int4:g48\n",
        "weights.yaml:5: field 'weight_dtype': int4:g48:fp16 packs 48 values per block; "
        "a layer's weight matrices of 218103808 values is not a whole number of blocks",
    ),
}


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    for name, (l4, l5, _) in CASES.items():
        (tmp_path / f"{name}.yaml").write_text(HEAD + l4 + l5)
    return tmp_path


@pytest.mark.parametrize("name", list(CASES))
def test_each_error_against_its_own_field_and_line(folder: Path, name: str) -> None:
    r = runner.invoke(app, ["check", str(folder / f"{name}.yaml")])
    assert r.exit_code == 2, r.output
    assert r.output.startswith("error: " + str(folder / CASES[name][2])), r.output
    assert "--" not in r.output.replace(str(folder), "")  # no CLI flag in a deployment file's report


def test_one_folder_one_line_each(folder: Path) -> None:
    r = runner.invoke(app, ["check", str(folder), "--format", "json"])
    assert r.exit_code == 2
    import json

    errors = json.loads(r.stdout)["errors"]
    assert len(errors) == len(CASES)
    # -f json also prints each error on stderr, one line each (issue 12, item 11)
    assert r.stderr.splitlines() == [f"error: {e}" for e in errors]
    for name, (_, _, line) in CASES.items():
        assert any(e.startswith(str(folder / line)) for e in errors), (name, errors)


def test_a_field_not_written_falls_back() -> None:
    lines = {"model": 1, "gpu": 2, "count": 3, "max_seq_len": 4}
    # tp derived from count: the count's line
    e = field_error(KvcalcError("m", field="tp", value=3), Path("d.yaml"), lines)
    assert isinstance(e, ConfigError) and (e.field, e.line, e.value) == ("tp", 3, 3)
    assert str(e) == "d.yaml:3: field 'tp': m"
    # kv_dtype not written: the format is the model's dtype, so the model's line
    e = field_error(KvcalcError("m", field="k_dtype"), Path("d.yaml"), lines)
    assert (e.field, e.line) == ("kv_dtype", 1)
    # a field the file has no key for (the model's config), or none: against `model`
    for field in ("cuda_context_bytes", None):
        e = field_error(KvcalcError("m", field=field), Path("d.yaml"), lines)
        assert (e.field, e.line) == ("model", 1)
