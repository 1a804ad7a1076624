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
    assert d["speed_model"].startswith("vllm on cuda: floor 0.44 ms/step")
    # E2E = TTFT + (O - 1) x TPOT; Little's law at the rate
    assert d["request_e2e_s"] == pytest.approx(d["request_ttft_s"] + 199 * d["request_tpot_s"])
    assert d["static_batch"] == 8 and d["batch"] == 8 and d["request_fits"] is True
    assert d["rate_concurrency"] == pytest.approx(2 * d["rate_e2e_s"], rel=1e-6)
    assert d["rate_tokens_per_s"] == pytest.approx(400.0)


def test_a_batch_that_does_not_fit_gets_no_tpot(cli) -> None:
    # llama-3.1-70b bf16 (141 GB of weights) on one H100: max batch 0, so no TPOT, no TTFT, no tokens/s
    r = cli("estimate", "llama-3.1-70b", "-s", "8k", "--gpu", "h100-sxm", "--format", "json")
    d = json.loads(r.output)
    assert d["max_batch"] == 0 and d["fits"] is False
    speed = ("tpot_s", "tokens_per_s", "tokens_per_s_per_seq", "ttft_s", "prefill_bound")
    assert [d[k] for k in speed] == [None] * 5
    t = cli("estimate", "llama-3.1-70b", "-s", "8k", "--gpu", "h100-sxm")
    assert "none: the batch does not fit" in t.output and "speed model" in t.output
    flat = " ".join(t.output.replace("│", " ").split())
    assert "for a 8,192-token prompt" not in flat and "in total" not in flat  # no TTFT, no tokens/s row
    # the Python API: the same None figures
    import kvcalc

    s = kvcalc.estimate("llama-3.1-70b", seq_len="8k", gpu="h100-sxm").serving
    assert s is not None and not s.fits and [getattr(s, k) for k in speed] == [None] * 5
    # the batch that fits (70B on 8 x H100 at tp 8) keeps every figure
    ok = kvcalc.estimate("llama-3.1-70b", seq_len="8k", gpu="h100-sxm", tp=8).serving
    assert ok is not None and ok.fits and None not in [getattr(ok, k) for k in speed]


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
        # a negative length was summed into --seq-len first: "--seq-len must be a positive integer, got 0"
        (["--input-len", "5", "--output-len", "-5", "--gpu", "h100-sxm"], "--output-len -5: must be at least 1"),
        (["--input-len", "0", "--output-len", "0"], "--input-len 0: must be at least 1"),
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
    # without a calibration, plan times with the speed table (what estimate uses), not the roofline
    assert (
        plain["speed_model"].startswith("vllm on cuda: floor 0.44 ms/step") and "calibrated" not in plain["speed_model"]
    )
    # the calibrated TPOT is estimate's with the same file: 8 sequences on 1 x h100-sxm tp1
    assert (top["count"], top["tp"], top["dp"]) == (1, 1, 1)
    est = _estimate_json(
        cli,
        "llama-3.1-8b",
        "-s",
        "8k",
        "--batch",
        "8",
        "--gpu",
        "h100-sxm",
        "--kv-dtype",
        top["kv_dtype"],
        "--weight-dtype",
        top["weight_dtype"],
        "--engine",
        "vllm",
        "--calibration",
        str(cal_file),
    )
    assert top["tpot_ms"] == pytest.approx(est["tpot_s"] * 1e3, rel=1e-12)
    t = cli("plan", "llama-3.1-8b", "-s", "8k", "--concurrency", "8", "--gpu", "h100-sxm", "--calibration", cal_file)
    assert "calibrated: floor, bandwidth, FLOP/s" in " ".join(t.output.split())


# ----- plan ranks on what estimate prints (issue 21 deliver 2) --------------------------------


def _estimate_json(cli, *args: str) -> dict:
    r = cli("estimate", *args, "--format", "json")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def _plan_json(cli, *args: str) -> dict:
    r = cli("plan", *args, "--format", "json")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def _same_layout(top: dict) -> list[str]:
    """estimate's flags for plan's layout `top` (vLLM, plan's default engine)."""
    return [
        "--gpu",
        top["gpu"],
        "--tp",
        str(top["tp"]),
        "--pp",
        str(top["pp"]),
        "--dp",
        str(top["dp"]),
        "--dp-attention",
        str(top["dp_attention"]),
        "--ep",
        str(top["ep"]),
        "--kv-dtype",
        top["kv_dtype"],
        "--weight-dtype",
        top["weight_dtype"],
        "--engine",
        "vllm",
    ]


@pytest.mark.parametrize(
    "model,seq,conc,gpu",
    [
        ("llama-3.1-8b", "8k", 8, "h100-sxm"),  # 1 GPU: the whole batch on one replica
        ("llama-3.1-70b", "32k", 64, "h200"),  # tp 4: the all-reduce latency term
        ("qwen3-30b-a3b", "16k", 24, "l40s"),  # MoE: attention DP 2 x EP 2 over PCIe
    ],
)
def test_plan_tpot_is_estimates(cli, model, seq, conc, gpu) -> None:
    # every sequence at --seq-len: plan's TPOT and TTFT for its top layout are what estimate
    # prints for that layout at the fullest replica's batch ceil(concurrency / dp), given per
    # attention-DP rank as vLLM's --max-num-seqs is (qwen3-30b-a3b: 24 over 2 ranks, --batch 12)
    top = _plan_json(cli, model, "-s", seq, "--concurrency", str(conc), "--gpu", gpu)["layouts"][0]
    replica = -(-conc // top["dp"])
    batch = -(-replica // top.get("dp_attention", 1))
    est = _estimate_json(cli, model, "-s", seq, "--batch", str(batch), *_same_layout(top))
    assert top["tpot_ms"] == pytest.approx(est["tpot_s"] * 1e3, rel=1e-12)
    assert top["ttft_s"] == pytest.approx(est["ttft_s"], rel=1e-12)
    assert top["speed_model"] == est["speed_model"]


def test_plan_whole_requests_are_estimates(cli) -> None:
    # 8 requests of 1,024 in / 256 out on h100-sxm: the context defaults to 1,280; the top layout's
    # TPOT is the static batch's at the mean context 1,024 + 128 = 1,152, its tokens/s the static
    # batch's output tokens/s with the prefill, its TTFT one 1,024-token prompt, its E2E the batch's
    d = _plan_json(
        cli, "llama-3.1-8b", "--concurrency", "8", "--input-len", "1024", "--output-len", "256", "--gpu", "h100-sxm"
    )
    assert (d["seq_len"], d["input_len"], d["output_len"], d["request_rate"]) == (1280, 1024, 256, None)
    top = d["layouts"][0]
    assert (top["count"], top["dp"]) == (1, 1)
    est = _estimate_json(
        cli,
        "llama-3.1-8b",
        "-s",
        "1280",
        "--batch",
        "8",
        "--input-len",
        "1024",
        "--output-len",
        "256",
        *_same_layout(top),
    )
    assert top["tpot_ms"] == pytest.approx(est["static_tpot_s"] * 1e3, rel=1e-12)
    assert top["tokens_per_s"] == pytest.approx(est["static_tokens_per_s"], rel=1e-12)
    assert top["tokens_per_s_per_gpu"] == pytest.approx(est["static_tokens_per_s_per_gpu"], rel=1e-12)
    assert top["ttft_s"] == pytest.approx(est["request_ttft_s"], rel=1e-12)
    assert top["e2e_s"] == pytest.approx(est["static_e2e_s"], rel=1e-12)
    # static: 8 x 256 tokens over prefill(1,024, 8) + 255 TPOTs
    assert top["tokens_per_s"] == pytest.approx(8 * 256 / top["e2e_s"], rel=1e-12)
    t = cli(
        "plan", "llama-3.1-8b", "--concurrency", "8", "--input-len", "1024", "--output-len", "256", "--gpu", "h100-sxm"
    )
    assert "8 requests of 1,024 in / 256 out" in t.stdout and "E2E" in t.stdout


def test_plan_at_a_request_rate_is_estimates(cli) -> None:
    # 10 requests/s of 1,024 / 256 on one h100-sxm: Little's law holds L = 10 x E2E requests in
    # flight; plan sizes the launch line for ceil(L) and ranks on the rate's TPOT and E2E
    args = ("--input-len", "1024", "--output-len", "256", "--request-rate", "10")
    top = _plan_json(cli, "llama-3.1-8b", *args, "--gpu", "h100-sxm")["layouts"][0]
    assert (top["count"], top["dp"]) == (1, 1)
    est = _estimate_json(cli, "llama-3.1-8b", "-s", "1280", *args, *_same_layout(top))
    assert est["rate_sustainable"] is True
    assert top["tpot_ms"] == pytest.approx(est["rate_tpot_s"] * 1e3, rel=1e-12)
    assert top["e2e_s"] == pytest.approx(est["rate_e2e_s"], rel=1e-12)
    assert top["tokens_per_s"] == pytest.approx(10 * 256, rel=1e-12) == est["rate_tokens_per_s"]
    in_flight = -(-est["rate_concurrency"] // 1)
    assert f"--max-num-seqs {int(in_flight)} " in top["launch"]


def test_plan_rate_that_no_layout_keeps_up_with(cli) -> None:
    # one l40s cannot decode 1,000 requests/s x 256 tokens = 256,000 tokens/s: a miss that says so
    r = cli(
        "plan", "llama-3.1-8b", "--input-len", "1024", "--output-len", "256", "--request-rate", "1000",
        "--gpu", "l40s", "--max-gpus", "1", "--format", "json",
    )  # fmt: skip
    assert r.exit_code == 1, r.output
    (miss,) = json.loads(r.stdout)["misses"]
    assert any("has no steady state (needs 256,000 output tokens/s" in p for p in miss["problems"])
    assert miss["score"] > 1


@pytest.mark.parametrize(
    "args,needle",
    [
        (
            ["--seq-len", "1000", "--input-len", "1024", "--output-len", "256"],
            "shorter than --input-len + --output-len",
        ),
        (["--request-rate", "5"], "needs --input-len and --output-len"),
        (["--input-len", "1024"], "need both --input-len and --output-len"),
        (["--input-len", "0", "--output-len", "8"], "--input-len"),
        (["--input-len", "8", "--output-len", "8", "--request-rate", "-1"], "--request-rate"),
    ],
)
def test_plan_whole_request_options_are_checked(cli, args, needle) -> None:
    r = cli("plan", "llama-3.1-8b", "--gpu", "h100-sxm", *args)
    assert r.exit_code == 2 and needle in r.output, r.output


# ----- a batch that does not fit gets no TPOT, anywhere (issue 21 deliver 5) ------------------


def test_check_of_a_deployment_that_does_not_fit_has_no_tpot(cli, tmp_path) -> None:
    # llama-3.1-70b bf16 on one H100 (141 GB of weights in a 77 GB budget): memory verdict only,
    # no TPOT or tokens/s, and no target verdict on figures it does not have
    f = tmp_path / "big.yaml"
    f.write_text(
        "model: llama-3.1-70b\ngpu: h100-sxm\ncount: 1\nmax_seq_len: 8192\nconcurrency: 1\ntargets: {max_tpot_ms: 50}\n"
    )
    r = cli("check", str(f), "--format", "json")
    assert r.exit_code == 1, r.output
    row = json.loads(r.stdout)["deployments"][0]
    assert row["status"] == "does not fit" and row["tpot_ms"] is None and row["tokens_per_s"] is None
    assert not any("TPOT" in p for p in row["problems"])
    assert row["speed_model"].startswith("ideal on cuda")  # the figures it would have are the model's
    t = cli("check", str(f), env={"COLUMNS": "120"})
    line = next(ln for ln in t.stdout.splitlines() if ln.startswith("│ big "))
    cells = [c.strip() for c in line.strip("│").split("│")]
    assert cells[5:8] == ["- (≤50)", "-", "does not fit"]


def test_speculative_tpot_needs_a_fit(cli) -> None:
    args = ["estimate", "llama-3.1-70b", "-s", "8k", "--gpu", "h100-sxm", "--speculative-config"]
    spec = '{"method":"ngram","num_speculative_tokens":4}'
    r = cli(*args, spec, "--accepted-len", "2.5", "--format", "json")
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["fits"] is False and d["tpot_s"] is None and d["tokens_per_s"] is None
    # on two GPUs it fits, and the acceptance length gives a TPOT
    ok = json.loads(cli(*args, spec, "--accepted-len", "2.5", "--tp", "2", "--format", "json").stdout)
    assert ok["fits"] is True and ok["tpot_s"] > 0


def test_plan_misses_that_do_not_fit_carry_no_speed(cli) -> None:
    import kvcalc

    r = kvcalc.plan("llama-3.1-70b", seq_len="8k", gpus="l40s", max_gpus=1, weight_dtypes="bf16", kv_dtypes="bf16")
    assert not r.layouts
    (m,) = r.misses
    assert m.problems and all("GiB per GPU" in p for p in m.problems)  # memory only, no TPOT
