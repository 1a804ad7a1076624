"""Issue 12, items 5 and 6 for `kvcalc measure`: Ctrl-C exits 130 at once at every stage
(start-up included: a torch import that takes long, or one that turns the interrupt into an
ImportError), only a torch that is really missing says "this needs torch", and memory limits
the machine-wide free figure does not show (a cgroup, `ulimit -v`) count in the fit check; an
allocation that still fails is one line, exit 2.

SIGINT timing is made deterministic without sleeps in the test: the subprocess prints a marker
line on stderr when it reaches the stage (a fake `torch` package on PYTHONPATH that prints and
then blocks in its import; the real run's announce line), the test reads up to that line and
only then sends SIGINT, and `wait(timeout=...)` bounds the exit.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
#: the exit must come this fast after SIGINT (seconds)
EXIT_WITHIN_S = 10

FAKE_SLOW_TORCH = """
import sys, time
sys.stderr.write("fake-torch: importing\\n"); sys.stderr.flush()
time.sleep(120)
"""
#: a half-imported torch that turns the interrupt into an ImportError (what a module's
#: `except ImportError` fallback around a C extension does)
FAKE_HALF_TORCH = """
import sys, time
sys.stderr.write("fake-torch: importing\\n"); sys.stderr.flush()
try:
    time.sleep(120)
except KeyboardInterrupt:
    raise ImportError("cannot import name '_C' from partially initialized module 'torch'")
"""
FAKE_BROKEN_TORCH = """
import kvcalc_test_no_such_cuda_library  # torch present, a library it needs missing
"""


def _env(extra_path: Path | None = None) -> dict[str, str]:
    env = {**os.environ, "COLUMNS": "80"}
    env.pop("KVCALC_DEBUG", None)
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in (extra_path, REPO) if p)
    return env


def _fake_torch(tmp_path: Path, source: str) -> Path:
    pkg = tmp_path / "fake" / "torch"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(source)
    return tmp_path / "fake"


def _interrupt_at(marker: str, args: list[str], env: dict[str, str], wait_s: float = 120) -> tuple[int, str]:
    """Start `python -m kvcalc ARGS`, read stderr up to a line starting with `marker`, send SIGINT,
    and return (exit code, all of stderr); the exit must come within EXIT_WITHIN_S."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvcalc", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=REPO,
    )
    seen = []
    try:
        import selectors

        sel = selectors.DefaultSelector()
        sel.register(proc.stderr, selectors.EVENT_READ)
        import time

        deadline = time.monotonic() + wait_s
        while True:
            left = deadline - time.monotonic()
            assert left > 0, f"never reached {marker!r}: {''.join(seen)}"
            if not sel.select(timeout=left):
                continue
            line = proc.stderr.readline()
            assert line, f"exited before {marker!r}: {''.join(seen)}"
            seen.append(line)
            if line.startswith(marker):
                break
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=EXIT_WITHIN_S)  # the time bound
        assert out == ""  # nothing measured, nothing printed on stdout
        return proc.returncode, "".join(seen) + err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("fake", [FAKE_SLOW_TORCH, FAKE_HALF_TORCH], ids=["slow-import", "half-import"])
def test_ctrl_c_during_the_torch_import_exits_130(tmp_path: Path, fake: str) -> None:
    env = _env(_fake_torch(tmp_path, fake))
    code, err = _interrupt_at(
        "fake-torch: importing", ["measure", "llama-3.1-8b", "--device", "cpu", "-s", "16", "-f", "json"], env
    )
    assert code == 130, err
    assert "this needs torch" not in err  # an interrupted import is not a missing package
    assert err.splitlines()[-1] == "error: interrupted (Ctrl-C); nothing measured"


def test_ctrl_c_during_the_run_exits_130() -> None:
    pytest.importorskip("torch")
    # 10,000 steps over a 32k-token layer: far longer than the time bound, so only the interrupt ends it
    code, err = _interrupt_at(
        "measure: llama-3.1-8b",
        ["measure", "llama-3.1-8b", "--device", "cpu", "-s", "32k", "--layers", "1", "--steps", "10000", "-f", "json"],
        _env(),
    )
    assert code == 130, err
    assert err.splitlines()[-1] == "error: interrupted (Ctrl-C); nothing measured"


def test_a_broken_torch_is_not_reported_as_missing(tmp_path: Path) -> None:
    env = _env(_fake_torch(tmp_path, FAKE_BROKEN_TORCH))
    proc = subprocess.run(
        [sys.executable, "-m", "kvcalc", "measure", "llama-3.1-8b", "-s", "16", "-f", "json"],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=60,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines() == [
        "error: torch is installed but failed to import: No module named 'kvcalc_test_no_such_cuda_library'"
    ]


def test_a_missing_torch_says_what_to_install(cli, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` -> ModuleNotFoundError(name='torch')
    r = cli("measure", "llama-3.1-8b", "-s", "16", "-f", "json")
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr.splitlines() == ["error: this needs torch: pip install 'kvcalc[measure]'"]


# ----- memory limits ---------------------------------------------------------------------------


def test_cgroup_v2_and_v1_limits_count(tmp_path: Path, monkeypatch) -> None:
    pytest.importorskip("torch")
    from kvcalc.measure import device

    v2, v1 = tmp_path / "v2", tmp_path / "v1"
    v2.mkdir(), v1.mkdir()
    (v2 / "memory.max").write_text("1073741824\n")  # 1 GiB limit
    (v2 / "memory.current").write_text("73741824\n")  # 73,741,824 B used
    (v1 / "memory.limit_in_bytes").write_text("2147483648\n")
    (v1 / "memory.usage_in_bytes").write_text("147483648\n")
    monkeypatch.setattr(device, "_cgroup_dirs", lambda: [str(v2)])
    assert device.cgroup_free_bytes() == 1_000_000_000  # 1,073,741,824 - 73,741,824
    monkeypatch.setattr(device, "_cgroup_dirs", lambda: [str(v1)])
    assert device.cgroup_free_bytes() == 2_000_000_000  # 2,147,483,648 - 147,483,648
    (v2 / "memory.max").write_text("max\n")  # no limit: the next folder, none here
    monkeypatch.setattr(device, "_cgroup_dirs", lambda: [str(v2)])
    assert device.cgroup_free_bytes() is None
    # the CPU's free figure is the least of the machine's and the process's limits
    monkeypatch.setattr(device, "_machine_available_bytes", lambda: 64 * 2**30)
    monkeypatch.setattr(device, "cgroup_free_bytes", lambda: 3 * 2**30)
    monkeypatch.setattr(device, "address_space_free_bytes", lambda: None)
    assert device.free_memory_bytes("cpu") == 3 * 2**30


def test_ulimit_v_is_seen_by_the_fit_check() -> None:
    pytest.importorskip("torch")
    import resource

    def limit() -> None:  # 3 GB of address space: torch fits, an 8 GiB cache does not
        resource.setrlimit(resource.RLIMIT_AS, (3 * 10**9, 3 * 10**9))

    proc = subprocess.run(
        [sys.executable, "-m", "kvcalc", "measure", "llama-3.1-8b", "--device", "cpu", "-s", "64k", "-f", "json"],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=REPO,
        timeout=120,
        preexec_fn=limit,
    )
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    # 64k tokens x 32 layers x 2 x 8 heads x 128 x 2 B = 8,589,934,592 B of KV cache
    assert len(errors) == 1 and "8,589,934,592 B of KV cache" in errors[0] and "--layers" in errors[0], proc.stderr


def test_an_allocation_refused_past_the_check_is_one_line(cli, monkeypatch) -> None:
    pytest.importorskip("torch")
    from kvcalc.measure import runner

    def refuse(*args, **kwargs):
        raise RuntimeError(
            "[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate memory: "
            "you tried to allocate 1073741824 bytes. Error code 12 (Cannot allocate memory)"
        )

    monkeypatch.setattr(runner, "allocate", refuse)
    r = cli("measure", "llama-3.1-8b", "--device", "cpu", "-s", "16", "--layers", "1", "-f", "json")
    errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
    assert r.exit_code == 2 and r.stdout == ""
    assert len(errors) == 1 and errors[0].startswith("error: cpu refused an allocation (")
    assert "another process or a memory limit took it" in errors[0]
