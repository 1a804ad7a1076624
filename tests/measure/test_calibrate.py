"""`kvcalc measure --calibrate` on the CPU (torch CPU build): the file it writes reads back and
feeds `estimate --calibration`. Nothing here asserts a time (timing goals live in benchmarks/)."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from kvcalc.calc.speed import fit_line  # noqa: E402
from kvcalc.load.speed import load_calibration  # noqa: E402


def test_calibrate_writes_a_file_estimate_reads(cli, tmp_path) -> None:
    path = tmp_path / "cal.yaml"
    r = cli(
        "measure",
        "llama-3.1-8b",
        "--calibrate",
        path,
        "--gpu",
        "h100-sxm",
        "--device",
        "cpu",
        "--layers",
        "2",
        "--format",
        "json",
    )
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["gpu"] == "h100-sxm" and d["device"].startswith("CPU (cpu")
    c = load_calibration(path)
    assert c.gpu == "h100-sxm" and c.read_bytes_per_s > 0 and c.flops_per_s > 0 and c.step_floor_s >= 0
    assert c.allreduce_latency_s is None  # one device: not measured
    e = cli("estimate", "llama-3.1-8b", "-s", "1k", "--gpu", "h100-sxm", "--calibration", path, "--format", "json")
    assert e.exit_code == 0, e.output
    assert "calibrated: floor, bandwidth, FLOP/s" in json.loads(e.stdout)["speed_model"]
    # an existing file is kept without --force
    again = cli("measure", "llama-3.1-8b", "--calibrate", path, "--gpu", "h100-sxm", "--device", "cpu")
    assert again.exit_code == 2 and "--force" in again.output


def test_calibrate_needs_its_gpu(cli, tmp_path) -> None:
    r = cli("measure", "llama-3.1-8b", "--calibrate", tmp_path / "c.yaml", "--device", "cpu")
    assert r.exit_code == 2 and "--gpu" in r.output


def test_read_line_points_lie_on_the_fitted_line() -> None:
    from kvcalc.measure.calibrate import READ_FRACTIONS, read_line

    floor, bw, pts = read_line("cpu", 2, 2 * 2**20, reps=3)
    assert len(pts) == len(READ_FRACTIONS) and [b for b, _ in pts] == sorted(b for b, _ in pts)
    a, b = fit_line([(float(x), t) for x, t in pts])
    assert floor == max(a, 0.0) and (b <= 0 or bw == pytest.approx(1 / b))
