"""Deployment files and `kvcalc check` / `kvcalc schema`: the bundled examples pass, the broken
ones in tests/data/deployments fail with the right exit code (1: does not fit or misses a
target; 2: invalid file)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvcalc.cli import app
from kvcalc.schema import Deployment

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]
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


@pytest.mark.parametrize(
    "name,code,status",
    [
        ("does-not-fit", 1, "does not fit"),
        ("misses-target", 1, "misses target"),
    ],
)
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
        "intermediate_size: 512\n"
    )
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


@pytest.mark.parametrize(
    "data,msg",
    [
        ({"count": 3, "tp": 2}, "multiple of tp x pp"),
        ({"kv_dtype": "fp7"}, "unknown dtype"),
        ({"gpu_memory_utilization": 1.5}, "less than or equal to 1"),
    ],
)
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


def _dep(tmp_path: Path, body: str, name: str = "dep.yaml") -> Path:
    p = tmp_path / name
    p.write_text(body)
    return p


LLAMA_DP8 = (
    "model: llama-3.1-8b\ngpu: h100-sxm\ncount: 8\ntp: 1\nmax_seq_len: 8192\n"
    "concurrency: {c}\ntargets: {{min_tokens_per_s: 1000}}\n"
)


def test_dp_replicas_count_only_real_sequences(tmp_path: Path) -> None:
    # 1 sequence on 8 DP replicas: one replica decodes it, 7 idle. Llama-3.1-8B bf16 on H100 SXM:
    # weights and KV read at the speed model's 0.735 of 3.35e12 B/s (speed.yaml, the file names no
    # engine: the ideal one, no floor; GEMMs and attention both read-bound, their times add)
    r = check(str(_dep(tmp_path, LLAMA_DP8.format(c=1))), "--format", "json")
    assert r.exit_code == 1, r.output
    row = json.loads(r.output)["deployments"][0]
    # decode reads one embedding row, not the table (the 1,050,673,152 B embedding table, 128,256 x
    # 4,096 x 2 B, is read as B rows of 8,192 B): (16,060,522,496 - 1,050,673,152 + 8,192 +
    # 8192 x 131,072 = 1,073,741,824 KV) / (3.35e12 x 0.735) = 6.5321 ms -> 153.1 tokens/s
    # (ceil(1/8) x 8 / TPOT would claim 1,225)
    assert row["tpot_ms"] == pytest.approx(6.5321, rel=1e-4)
    assert row["tokens_per_s"] == pytest.approx(1 / 6.5321e-3, rel=1e-4)
    assert row["status"] == "misses target"


def test_dp_split_uneven() -> None:
    from kvcalc.calc.memory_plan import GpuFit, Layout
    from kvcalc.load.gpus import get_gpu
    from kvcalc.load.models import load_model

    # 5 sequences on 4 replicas: one holds 2, three hold 1; TPOT is the fuller replica's
    p = GpuFit(load_model("llama-3.1-8b"), get_gpu("h100-sxm"), Layout(dp=4))
    t1, t2 = p.decode(8192, 1).step_time_s, p.decode(8192, 2).step_time_s
    # t(2) = (16,060,522,496 - 1,050,673,152 + 2 x 8,192 + 2 x 1,073,741,824) / 2.68e12 = 6.4020 ms
    # (the 1,050,673,152 B embedding table, 128,256 x 4,096 x 2 B, is read as B rows of 8,192 B)
    assert t2 == pytest.approx(6.4020e-3, rel=1e-4)
    step, tok = p.split_decode(8192, 5)
    assert step.step_time_s == t2 and tok == pytest.approx(2 / t2 + 3 / t1)
    step, tok = p.split_decode(8192, 8)  # even: 2 each
    assert tok == pytest.approx(8 / t2)


@pytest.mark.parametrize(
    "line,field,msg",
    [
        ("concurrency: true", "concurrency", "valid integer"),
        ("concurrency: 1.5", "concurrency", "valid integer"),
        ("concurrency: 1.0e+23", "concurrency", "valid integer"),
        ("concurrency: 100000000000", "concurrency", "less than or equal to 10000000"),
        ("count: yes", "count", "valid integer"),
        ("max_seq_len: 1.0e+23", "max_seq_len", "valid integer"),
        ("targets: {max_tpot_ms: .inf}", "targets.max_tpot_ms", "finite"),
        ("targets: {max_tpot_ms: true}", "targets.max_tpot_ms", "valid number"),
    ],
)
def test_strict_fields(tmp_path: Path, line: str, field: str, msg: str) -> None:
    body = "model: llama-3.1-8b\ngpu: h100-sxm\n" + ("" if "max_seq_len" in line else "max_seq_len: 8192\n")
    p = _dep(tmp_path, body + line + "\n")
    r = check(str(p))
    n = body.count("\n") + 1
    assert r.exit_code == 2, r.output
    assert f"dep.yaml:{n}: field '{field}'" in r.output and msg in r.output, r.output
    assert "Traceback" not in r.output


def test_bad_tp_names_file_line_and_field(tmp_path: Path) -> None:
    p = _dep(tmp_path, "model: llama-3.1-8b\ngpu: h100-sxm\ncount: 3\nmax_seq_len: 8192\ntp: 3\n")
    r = check(str(p))
    assert r.exit_code == 2
    assert "dep.yaml:5: field 'tp': llama-3.1-8b has 32 attention heads, not divisible by 3" in r.output
    assert "--tp" not in r.output


def test_nested_unknown_field_hint(tmp_path: Path) -> None:
    p = _dep(tmp_path, "model: llama-3.1-8b\ngpu: h100-sxm\nmax_seq_len: 8192\ntargets: {max_tpot: 50}\n")
    r = check(str(p))
    assert r.exit_code == 2
    assert "field 'targets.max_tpot': unknown field; did you mean 'max_tpot_ms'?" in r.output


def test_context_beyond_the_model_warns(tmp_path: Path) -> None:
    p = _dep(tmp_path, "model: llama-3.1-8b\ngpu: h200\nmax_seq_len: 1000000\n")
    r = check(str(p))
    assert "warning:" in r.output and "dep.yaml:3: field 'max_seq_len'" in r.output
    assert "max_position_embeddings (131,072)" in r.output
