"""Issue 21 deliver 4, the whole loop on the CPU: `kvcalc measure --calibrate` (with the
all-reduce timed over gloo between 2 local processes, `--allreduce-ranks 2`) writes a file, and
`estimate`, `sweep` and `plan --calibration FILE` use its figures and say so.

One measurement per module (2 layers of llama-3.1-8b: a 16 MiB read line, a 256^3 matmul, two
spawned gloo ranks; seconds). Nothing asserts a time: each check recomputes the speed model's
arithmetic from the file's own figures (`calc/speed.py`: memory-bound batch-1 decode =
floor + bytes / read bandwidth + all-reduce), so it holds however fast this machine is."""

from __future__ import annotations

import json

import pytest
import yaml

torch = pytest.importorskip("torch")

from kvcalc.load.gpus import get_gpu  # noqa: E402
from kvcalc.load.speed import load_calibration, speed_table  # noqa: E402

GPU = "h100-sxm"
#: llama-3.1-8b (configs/models): 32 layers, 2 all-reduces per layer under TP (Megatron)
N_LAYERS = 32


def _run(*args: str):
    from typer.testing import CliRunner

    from kvcalc.cli import app

    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> tuple:
    """(path, the file's mapping): one CPU calibration with a 2-rank gloo all-reduce."""
    path = tmp_path_factory.mktemp("cal") / "cpu.yaml"
    r = _run(
        "measure",
        "llama-3.1-8b",
        "--calibrate",
        path,
        "--gpu",
        GPU,
        "--device",
        "cpu",
        "--layers",
        "2",
        "--allreduce-ranks",
        "2",
        "--format",
        "json",
    )
    assert r.exit_code == 0, r.output
    return path, yaml.safe_load(path.read_text())


def _estimate(*extra: str) -> dict:
    r = _run("estimate", "llama-3.1-8b", "-s", "1k", "--gpu", GPU, "--engine", "vllm", "--format", "json", *extra)
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


def test_the_file_holds_every_figure(measured) -> None:
    path, d = measured
    assert list(d) == [
        "kind",
        "gpu",
        "device",
        "measured",
        "source",
        "step_floor_s",
        "read_bytes_per_s",
        "flops_per_s",
        "allreduce_latency_s",
        "allreduce_tp",
    ]
    assert d["kind"] == "kvcalc-calibration" and d["gpu"] == GPU and d["device"].startswith("CPU (cpu, torch ")
    assert "2-layer GEMV read line (llama-3.1-8b)" in d["source"]
    assert "16 KiB gloo all-reduce over 2 CPU processes" in d["source"]
    assert d["step_floor_s"] >= 0 and d["read_bytes_per_s"] > 0 and d["flops_per_s"] > 0
    assert d["allreduce_latency_s"] > 0 and d["allreduce_tp"] == 2
    c = load_calibration(path)  # what estimate reads: the same numbers
    assert (c.step_floor_s, c.read_bytes_per_s, c.flops_per_s, c.allreduce_latency_s, c.allreduce_tp) == (
        d["step_floor_s"],
        d["read_bytes_per_s"],
        d["flops_per_s"],
        d["allreduce_latency_s"],
        2,
    )


@pytest.mark.parametrize("tp", [1, 2])
def test_estimate_uses_the_measured_figures(measured, tp: int) -> None:
    path, d = measured
    gpu = get_gpu(GPU)
    table = _estimate("--tp", str(tp))
    cal = _estimate("--tp", str(tp), "--calibration", str(path))
    named = "floor, bandwidth, FLOP/s, all-reduce" if tp > 1 else "floor, bandwidth, FLOP/s"
    assert cal["speed_model"].endswith(f"calibrated: {named}") and "calibrated" not in table["speed_model"]
    assert cal["bw_efficiency"] == pytest.approx(d["read_bytes_per_s"] / gpu.hbm_bytes_per_s, rel=1e-12)
    assert cal["flops_efficiency"] == pytest.approx(d["flops_per_s"] / gpu.bf16_flops_per_s, rel=1e-12)
    assert cal["decode_floor_s"] == d["step_floor_s"]
    # the all-reduce: 2 per layer at the measured latency (measured at tp 2), in place of the
    # table's NVLink figure (alpha_call + alpha_step x log2 2); the bytes term is the same
    a_call, a_step = speed_table().allreduce_latency_s["nvlink"]
    per_call = d["allreduce_latency_s"] - (a_call + a_step) if tp == 2 else 0.0
    assert cal["decode_allreduce_s"] - table["decode_allreduce_s"] == pytest.approx(
        2 * N_LAYERS * per_call, rel=1e-9, abs=1e-15
    )
    # a step takes at least its bytes at the measured read rate (more where this CPU's measured
    # FLOP/s made a kernel compute-bound: which one depends on the machine's load)
    assert cal["decode_bytes_read_per_step"] == table["decode_bytes_read_per_step"]
    floor_read_ar = (
        d["step_floor_s"] + cal["decode_bytes_read_per_step"] / d["read_bytes_per_s"] + cal["decode_allreduce_s"]
    )
    assert cal["tpot_s"] >= floor_read_ar * (1 - 1e-12)


@pytest.mark.parametrize("tp", [1, 2])
def test_estimate_read_time_scales_by_the_measured_bandwidth(measured, tmp_path, tp: int) -> None:
    """The same file without its FLOP/s (a file may give any of the figures): the GEMMs keep the
    table's datacenter FLOP/s, so batch-1 bf16 decode is memory-bound whatever this CPU measured,
    TPOT = floor + bytes / BW + all-reduce, and the read time changes by exactly
    (table efficiency x table bandwidth) / measured bandwidth."""
    _, d = measured
    part = tmp_path / "no-flops.yaml"
    part.write_text(yaml.safe_dump({k: v for k, v in d.items() if k != "flops_per_s"}, sort_keys=False))
    table = _estimate("--tp", str(tp))
    cal = _estimate("--tp", str(tp), "--calibration", str(part))
    named = "floor, bandwidth, all-reduce" if tp > 1 else "floor, bandwidth"
    assert cal["speed_model"].endswith(f"calibrated: {named}")
    assert cal["decode_bound"] == table["decode_bound"] == "memory"
    bytes_ = cal["decode_bytes_read_per_step"]
    assert cal["tpot_s"] == pytest.approx(
        d["step_floor_s"] + bytes_ / d["read_bytes_per_s"] + cal["decode_allreduce_s"], rel=1e-9
    )
    eta = speed_table().bw_efficiency["cuda"]
    read_tab = table["tpot_s"] - table["decode_floor_s"] - table["decode_allreduce_s"]
    read_cal = cal["tpot_s"] - cal["decode_floor_s"] - cal["decode_allreduce_s"]
    assert read_cal / read_tab == pytest.approx(eta * get_gpu(GPU).hbm_bytes_per_s / d["read_bytes_per_s"], rel=1e-9)


def test_sweep_uses_the_measured_figures(measured) -> None:
    path, _ = measured
    r = _run(
        "sweep", "llama-3.1-8b", "-s", "1k", "--batch", "1", "--gpu", GPU, "--tp", "2", "--engine", "vllm",
        "--calibration", path, "--format", "json",
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    (row,) = json.loads(r.stdout)
    est = _estimate("--tp", "2", "--calibration", str(path))
    assert row["tpot_s"] == pytest.approx(est["tpot_s"], rel=1e-12)
    t = _run("sweep", "llama-3.1-8b", "-s", "1k", "--batch", "1", "--gpu", GPU, "--tp", "2", "--calibration", path)
    assert "calibrated: floor, bandwidth, FLOP/s, all-reduce" in " ".join(t.output.split())


def test_plan_uses_the_measured_figures(measured) -> None:
    path, _ = measured
    r = _run(
        "plan", "llama-3.1-8b", "-s", "8k", "--concurrency", "8", "--gpu", GPU, "--calibration", path,
        "--format", "json",
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    layouts = json.loads(r.stdout)["layouts"]
    assert {lay["tp"] for lay in layouts} >= {1, 2}
    for lay in layouts:  # every layout on the calibrated GPU names the file's figures; TP ones the all-reduce
        assert lay["speed_model"].endswith(
            "calibrated: floor, bandwidth, FLOP/s" + (", all-reduce" if lay["tp"] > 1 else "")
        ), lay["speed_model"]


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (torch.cuda.is_available() is False)")
def test_gpu_calibration_file(tmp_path) -> None:
    """On CUDA: every figure measured and read back; the all-reduce over NCCL exactly when two or
    more GPUs are visible. No figure is held to a speed here (benchmarks/gpu_check.sh prints them)."""
    path = tmp_path / "gpu.yaml"
    r = _run("measure", "llama-3.1-8b", "--calibrate", path, "--gpu", GPU, "--device", "cuda", "--layers", "4")
    assert r.exit_code == 0, r.output
    d = yaml.safe_load(path.read_text())
    assert d["device"].startswith(f"{torch.cuda.get_device_name()} (cuda, torch ")
    assert d["step_floor_s"] >= 0 and d["read_bytes_per_s"] > 0 and d["flops_per_s"] > 0
    n = torch.cuda.device_count()
    assert (d.get("allreduce_tp"), "nccl all-reduce" in d["source"]) == ((n, True) if n > 1 else (None, False))
