"""benchmarks/gpu_check.sh and gpu_check_run.py without a GPU: the device-name -> table-key map,
a step that fails, times out or finds no time left (each a row that says so, never a silent
pass), the 80-column table, and the script's refusal, one line, when its Python lacks a package.
The whole script in --dry-run takes minutes on this machine: docs/benchmarks.md records a run."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvcalc.load.gpus import get_gpu

ROOT = Path(__file__).resolve().parents[2]


def _run_mod():
    if "gpu_check_run" not in sys.modules:  # registered first: its dataclasses look their module up
        spec = importlib.util.spec_from_file_location("gpu_check_run", ROOT / "benchmarks" / "gpu_check_run.py")
        sys.modules["gpu_check_run"] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules["gpu_check_run"])
    return sys.modules["gpu_check_run"]


@pytest.mark.parametrize(
    ("name", "key"),
    [
        ("NVIDIA H200", "h200"),  # torch.cuda.get_device_name on the lent H200 (device/KINDS.md)
        ("NVIDIA H100 80GB HBM3", "h100-sxm"),
        ("NVIDIA H100 PCIe", "h100-pcie"),
        ("NVIDIA A100-SXM4-80GB", "a100-80gb-sxm"),
        ("NVIDIA GeForce RTX 4090", "rtx-4090"),
        ("Tesla T4", None),
    ],
)
def test_gpu_key(name: str, key: str | None) -> None:
    assert _run_mod().gpu_key(name) == key


def test_every_key_is_in_the_gpu_table() -> None:
    for _, key in _run_mod().GPU_KEYS:
        assert get_gpu(key).key == key


def test_a_failing_step_is_a_row_that_says_why(tmp_path) -> None:
    g = _run_mod()
    r = g.Runner(tmp_path, budget_s=60, dry_run=True)

    def boom(s) -> None:
        raise KeyError("fraction_of_table")

    def slow(s) -> None:
        rc, _, err = r.call([sys.executable, "-c", "import time; time.sleep(30)"], 1)
        s.status, s.result = "FAIL", g._why(rc, err)

    def fine(s) -> None:
        rc, out, _ = r.call([sys.executable, "-c", "print('x' * 3)"], 30)
        s.status, s.result = ("PASS" if rc == 0 and out == "xxx\n" else "FAIL"), "a long result " * 8

    assert r.step("parse", boom).status == "FAIL"
    assert r.step("slow", slow).result == "timed out: (killed after 1 s)"
    assert r.step("fine", fine).status == "PASS"
    r.deadline = 0.0  # the budget is spent: the next step is not started
    late = r.step("late", fine)
    assert late.status == "SKIP" and late.result.startswith("not run: 0 s of the 60 s budget left")
    assert g.finish(r) == 1
    text = (tmp_path / "summary.txt").read_text()
    assert "parse  FAIL" in text and "KeyError: 'fraction_of_table'" in text
    assert "result: FAILED: parse, slow" in text
    assert max(len(line) for line in text.splitlines()) <= 80
    log = (tmp_path / "gpu_check.log").read_text()
    assert "== slow" in log and "-- fine: PASS" in log


@pytest.mark.parametrize("package", ["torch", "pydantic"])
def test_script_names_what_its_python_lacks(tmp_path, package: str) -> None:
    shadow = tmp_path / "shadow" / package  # a package that fails to import, ahead of the real one
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('not here')\n")
    (tmp_path / "nowheels").mkdir()
    env = {
        **os.environ,
        "PYTHON": sys.executable,
        "PYTHONPATH": str(tmp_path / "shadow"),
        "KVCALC_GPU_CHECK_WHEELS": str(tmp_path / "nowheels"),
    }
    p = subprocess.run(
        ["bash", str(ROOT / "benchmarks" / "gpu_check.sh"), "--dry-run", "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert p.returncode == 2
    dist = {"torch": "torch", "pydantic": "pydantic"}[package]
    assert f"lacks: {dist} (import {package}: ImportError)" in p.stderr
    assert "benchmarks/gpu_wheels.sh" in p.stderr and not (tmp_path / "out").exists()
