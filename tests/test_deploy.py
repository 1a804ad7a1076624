"""Deployment files and `kvcalc check` / `kvcalc schema`: the bundled examples pass, the broken
ones in tests/data/deployments fail with the right exit code (1: does not fit or misses a
target; 2: invalid file)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvcalc.cli import app
from kvcalc.deploy import Deployment

runner = CliRunner()
ROOT = Path(__file__).resolve().parent.parent
BROKEN = ROOT / "tests" / "data" / "deployments"


def check(*args: str):
    return runner.invoke(app, ["check", *args])


def test_bundled_deployments_pass() -> None:
    files = sorted((ROOT / "configs" / "deployments").glob("*.yaml"))
    assert len(files) >= 3
    r = check(str(ROOT / "configs" / "deployments"), "--format", "json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["ok"] and len(d["deployments"]) == len(files)
    assert all(x["status"] == "ok" and x["fits"] and x["meets_targets"] for x in d["deployments"])


@pytest.mark.parametrize("name,code,status", [
    ("does-not-fit", 1, "does not fit"),
    ("misses-target", 1, "misses target"),
])
def test_broken_deployments_exit_1(name: str, code: int, status: str) -> None:
    r = check(str(BROKEN / f"{name}.yaml"), "--format", "json")
    assert r.exit_code == code, r.output
    row = json.loads(r.output)["deployments"][0]
    assert row["status"] == status and row["problems"]


def test_does_not_fit_numbers() -> None:
    r = check(str(BROKEN / "does-not-fit.yaml"), "--format", "json")
    row = json.loads(r.output)["deployments"][0]
    # Llama-3.1-70B bf16 weights alone: 2 x 70,553,706,496 = 141,107,412,992 B > 76,968,728,985
    assert row["memory_bytes_per_gpu"] > 141_107_412_992 and row["budget_bytes_per_gpu"] == 76_968_728_985
    assert row["max_concurrency"] == 0


def test_misses_target_table() -> None:
    r = runner.invoke(app, ["check", str(BROKEN / "misses-target.yaml")], env={"COLUMNS": "200"})
    assert r.exit_code == 1
    assert "misses target" in r.output and "max_tpot_ms 2" in r.output


def test_invalid_file_exits_2_naming_line_and_field() -> None:
    r = check(str(BROKEN / "invalid.yaml"))
    assert r.exit_code == 2
    assert "invalid.yaml:7" in r.output and "concurency" in r.output and "did you mean 'concurrency'" in r.output


def test_folder_with_invalid_exits_2_and_still_tabulates() -> None:
    r = check(str(BROKEN), "--format", "markdown")
    assert r.exit_code == 2
    assert r.output.startswith("| deployment |") and "does not fit" in r.output and "invalid.yaml" in r.output


def test_relative_model_path_and_unknown_gpu(tmp_path: Path) -> None:
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "tiny.yaml").write_text(
        "name: tiny\nn_layers: 2\nn_heads: 4\nhead_dim: 64\nhidden_size: 256\nvocab_size: 1000\n"
        "intermediate_size: 512\n")
    (tmp_path / "deps").mkdir()
    ok = tmp_path / "deps" / "ok.yaml"
    ok.write_text("model: ../models/tiny.yaml\ngpu: l4\nmax_seq_len: 1024\nconcurrency: 2\n")
    r = check(str(ok), "--format", "json")
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["deployments"][0]["model"] == "tiny"
    bad = tmp_path / "deps" / "bad.yaml"
    bad.write_text("model: ../models/tiny.yaml\ngpu: h100-smx\nmax_seq_len: 1024\n")
    r = check(str(bad))
    assert r.exit_code == 2 and "bad.yaml:2" in r.output and "'gpu'" in r.output and "h100-sxm" in r.output


def test_missing_path_exits_2() -> None:
    assert check("/nonexistent/deploy.yaml").exit_code == 2


@pytest.mark.parametrize("data,msg", [
    ({"count": 3, "tp": 2}, "multiple of tp x pp"),
    ({"kv_dtype": "fp7"}, "unknown dtype"),
    ({"gpu_memory_utilization": 1.5}, "less than or equal to 1"),
])
def test_deployment_validation(data: dict, msg: str) -> None:
    base = {"model": "llama-3.1-8b", "gpu": "h100-sxm", "max_seq_len": 8192}
    with pytest.raises(Exception, match=msg):
        Deployment.model_validate({**base, **data})


def test_layout_defaults() -> None:
    d = Deployment(model="m", gpu="h200", count=8, pp=2, max_seq_len=1, concurrency=5)
    assert (d.resolved_tp, d.dp, d.batch_per_replica) == (4, 1, 5)
    d = Deployment(model="m", gpu="h200", count=8, tp=2, max_seq_len=1, concurrency=5)
    assert (d.dp, d.batch_per_replica) == (4, 2)  # ceil(5 / 4)


def test_schema_command() -> None:
    r = runner.invoke(app, ["schema"])
    assert r.exit_code == 0
    s = json.loads(r.output)
    assert {"ModelSpec", "Deployment", "GpuSpec"} <= set(s["$defs"])
    r = runner.invoke(app, ["schema", "deployment"])
    dep = json.loads(r.output)
    assert "max_seq_len" in dep["required"] and dep["additionalProperties"] is False
    assert runner.invoke(app, ["schema", "deploymnt"]).exit_code == 2
