"""Issue 21 on the command line: whole requests, the speed label, no TPOT without a fit, and
`--calibration` on estimate / sweep / plan (a hand-written calibration file; `kvcalc measure
--calibrate` writes the same fields: tests/measure/test_calibrate.py)."""

from __future__ import annotations

import json

import pytest

from kvcalc.load.speed import speed_table


@pytest.fixture
def cal_file(tmp_path):
    p = tmp_path / "cal.yaml"
    # as measured: a 0.9 ms floor, 2.9 TB/s, 700 TFLOP/s, 20 us per all-reduce at tp 8
    p.write_text(
        "kind: kvcalc-calibration\ngpu: h100-sxm\nstep_floor_s: 0.0009\nread_bytes_per_s: 2.9e12\n"
        "flops_per_s: 7.0e14\nallreduce_latency_s: 2.0e-5\nallreduce_tp: 8\n"
    )
    return p


def test_estimate_whole_requests(cli) -> None:
    r = cli(
        "estimate",
        "llama-3.1-8b",
        "--gpu",
        "h100-sxm",
        "--engine",
        "vllm",
        "--input-len",
        "1000",
        "--output-len",
        "200",
        "--batch",
        "8",
        "--request-rate",
        "2",
        "--format",
        "json",
    )
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    # the plan holds the whole request: seq_len = 1,000 + 200
    assert d["seq_len"] == 1200 and d["input_len"] == 1000 and d["output_len"] == 200
    assert d["speed_model"].startswith("vllm on cuda: floor 0.70 ms/step")
    # E2E = TTFT + (O - 1) x TPOT; Little's law at the rate
    assert d["request_e2e_s"] == pytest.approx(d["request_ttft_s"] + 199 * d["request_tpot_s"])
    assert d["static_batch"] == 8 and d["batch"] == 8 and d["request_fits"] is True
    assert d["rate_concurrency"] == pytest.approx(2 * d["rate_e2e_s"], rel=1e-6)
    assert d["rate_tokens_per_s"] == pytest.approx(400.0)


def test_a_batch_that_does_not_fit_gets_no_tpot(cli) -> None:
    # llama-3.1-70b bf16 (141 GB of weights) on one H100: max batch 0, so no TPOT
    r = cli("estimate", "llama-3.1-70b", "-s", "8k", "--gpu", "h100-sxm", "--format", "json")
    d = json.loads(r.output)
    assert d["max_batch"] == 0 and d["fits"] is False
    assert d["tpot_s"] is None and d["tokens_per_s"] is None
    t = cli("estimate", "llama-3.1-70b", "-s", "8k", "--gpu", "h100-sxm")
    assert "none: the batch does not fit" in t.output and "speed model" in t.output


def test_speed_depends_on_the_engine(cli) -> None:
    tpot = {}
    for e in ("ideal", "vllm", "llamacpp"):
        r = cli("estimate", "llama-3.1-8b", "-s", "1k", "--gpu", "h100-sxm", "--engine", e, "--format", "json")
        assert r.exit_code == 0, r.output
        tpot[e] = json.loads(r.output)["tpot_s"]
    t = speed_table().step_floor_s
    # the same bytes, the engine's floor on top
    assert tpot["vllm"] - tpot["ideal"] == pytest.approx(t["vllm"]["cuda"], rel=1e-9)
    assert tpot["llamacpp"] - tpot["ideal"] == pytest.approx(t["llamacpp"]["cuda"], rel=1e-9)


def test_estimate_with_calibration(cli, cal_file) -> None:
    r = cli(
        "estimate",
        "llama-3.1-70b",
        "-s",
        "8k",
        "--gpu",
        "h100-sxm",
        "--tp",
        "4",
        "--engine",
        "vllm",
        "--calibration",
        cal_file,
        "--format",
        "json",
    )
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["speed_model"].endswith("calibrated: floor, bandwidth, FLOP/s, all-reduce")
    # bandwidth 2.9e12 / 3.35e12 = 0.8657; FLOP/s 7e14 / 9.894e14 = 0.7075
    assert d["bw_efficiency"] == pytest.approx(2.9e12 / 3.35e12)
    assert d["flops_efficiency"] == pytest.approx(7.0e14 / 9.894e14)
    assert d["decode_floor_s"] == pytest.approx(0.0009)


def test_calibration_of_another_gpu_is_refused(cli, cal_file) -> None:
    r = cli("estimate", "llama-3.1-8b", "-s", "8k", "--gpu", "a100-80gb-sxm", "--calibration", cal_file)
    assert r.exit_code == 2 and "measured as h100-sxm, not a100-80gb-sxm" in r.output


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--input-len", "100"], "--output-len"),
        (["--input-len", "100", "--output-len", "10"], "--gpu"),
        (["-s", "8k,32k", "--input-len", "100", "--output-len", "10"], "--gpu"),  # never silently dropped
        (["--input-len", "0", "--output-len", "10", "--gpu", "h100-sxm"], "at least 1"),
        (["--request-rate", "1", "--gpu", "h100-sxm"], "--input-len and --output-len"),
        (["--input-len", "10", "--output-len", "10", "--request-rate", "nan", "--gpu", "h100-sxm"], "> 0"),
    ],
)
def test_whole_request_options_are_checked(cli, args, needle) -> None:
    r = cli("estimate", "llama-3.1-8b", *args)
    assert r.exit_code == 2 and needle in r.output


def test_bad_calibration_file(cli, tmp_path) -> None:
    p = tmp_path / "c.yaml"
    p.write_text("kind: kvcalc-calibration\ngpu: h100-sxm\nread_bytes_per_s: -1\n")
    r = cli("estimate", "llama-3.1-8b", "--gpu", "h100-sxm", "--calibration", p)
    assert r.exit_code == 2 and "read_bytes_per_s" in r.output
    p.write_text("gpu: h100-sxm\n")
    r = cli("estimate", "llama-3.1-8b", "--gpu", "h100-sxm", "--calibration", p)
    assert r.exit_code == 2 and "kind" in r.output


def test_sweep_engine_and_calibration(cli, cal_file) -> None:
    r = cli(
        "sweep",
        "llama-3.1-8b",
        "-s",
        "8k,128k",
        "--batch",
        "1,64",
        "--gpu",
        "h100-sxm",
        "--engine",
        "vllm",
        "--calibration",
        cal_file,
        "--format",
        "json",
    )
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output)
    for row in rows:  # no speed where the point does not fit
        assert (row["tpot_s"] is None) == (not row["fits"])
    assert any(not row["fits"] for row in rows) and any(row["fits"] for row in rows)
    t = cli("sweep", "llama-3.1-8b", "-s", "8k", "--batch", "1", "--gpu", "h100-sxm", "--calibration", cal_file)
    assert "calibrated: floor, bandwidth, FLOP/s" in t.output.replace("\n", " ")


def test_plan_with_calibration(cli, cal_file) -> None:
    r = cli(
        "plan",
        "llama-3.1-8b",
        "-s",
        "8k",
        "--concurrency",
        "8",
        "--gpu",
        "h100-sxm",
        "--calibration",
        cal_file,
        "--format",
        "json",
    )
    assert r.exit_code == 0, r.output
    top = json.loads(r.output)["layouts"][0]
    assert "calibrated: floor, bandwidth, FLOP/s" in top["speed_model"]
    plain = json.loads(
        cli("plan", "llama-3.1-8b", "-s", "8k", "--concurrency", "8", "--gpu", "h100-sxm", "--format", "json").output
    )["layouts"][0]
    assert plain["speed_model"] == "roofline"
