"""`kvcalc plan --write-deployment` records decode context parallel (`dcp:`) and speculative
decoding (`speculative:`), and `kvcalc check` of the file gives plan's figures.

DeepSeek-V3 (configs/models/deepseek-v3.yaml), 64 x 163,840 tokens on 8 H200: TP8 + DCP8
(tests/calc/test_plan_dcp.py), MTP with 2 speculative tokens at the user's acceptance length 2.4.
"""

from __future__ import annotations

import json

import yaml

PLAN = ["plan", "deepseek-v3", "-s", "160k", "--concurrency", "64", "--gpu", "h200", "--top", "1", "-f", "json"]
SPEC = ["-sc", '{"method":"mtp","num_speculative_tokens":2}', "--accepted-len", "2.4"]


def test_check_agrees_with_plan(cli, tmp_path):
    out = tmp_path / "d.yaml"
    r = cli(*PLAN, *SPEC, "--write-deployment", str(out))
    assert r.exit_code == 0, r.output
    top = json.loads(r.stdout)["layouts"][0]
    data = yaml.safe_load(out.read_text())
    assert (data["tp"], data["dcp"]) == (8, 8)
    assert data["speculative"] == {"method": "mtp", "num_speculative_tokens": 2, "accepted": 2.4}
    c = cli("check", str(out), "-f", "json")
    assert c.exit_code == 0, c.output
    row = json.loads(c.stdout)["deployments"][0]
    assert row["status"] == "ok"
    assert row["memory_bytes_per_gpu"] == top["memory_bytes_per_gpu"]
    assert row["tpot_ms"] == top["tpot_ms"]


def test_check_counts_the_draft(cli, tmp_path):
    """The same file without `speculative:` needs the MTP layer's weights and cache less: 8 TP
    ranks each hold 1/8 of the MTP layer (`speculative.mtp_weight_bytes`) and its latent for 64
    sequences of cdiv(163,840, 8) = 20,480 positions (dcp 8): 64 x 20,480 x 576 = 754,974,720 B."""
    out = tmp_path / "d.yaml"
    assert cli(*PLAN, *SPEC, "--write-deployment", str(out)).exit_code == 0
    data = yaml.safe_load(out.read_text())
    plain = tmp_path / "plain.yaml"
    plain.write_text(yaml.safe_dump({k: v for k, v in data.items() if k != "speculative"}))
    rows = [json.loads(cli("check", str(p), "-f", "json").stdout)["deployments"][0] for p in (out, plain)]
    from kvcalc.calc.speculative import mtp_weight_bytes
    from kvcalc.load.models import load_model

    mtp_w = mtp_weight_bytes(load_model("deepseek-v3"), "fp8_e4m3", 8)
    assert rows[0]["memory_bytes_per_gpu"] - rows[1]["memory_bytes_per_gpu"] == mtp_w + 64 * 20_480 * 576


def test_bad_speculative_is_refused_at_its_line(cli, tmp_path):
    """MTP on a model without MTP layers (Llama-3.1-8B): the file's `speculative:` key named."""
    f = tmp_path / "bad.yaml"
    f.write_text(
        "model: llama-3.1-8b\ngpu: h100-sxm\nmax_seq_len: 8192\n"
        "speculative:\n  method: mtp\n  num_speculative_tokens: 1\n"
    )
    r = cli("check", str(f))
    assert r.exit_code == 2
    assert "speculative" in r.output and "no MTP layers" in r.output
