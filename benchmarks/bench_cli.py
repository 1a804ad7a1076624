"""Benchmarks that print figures (record them, dated, in docs/benchmarks.md):

1. CLI start-up: `kvcalc estimate llama-3.1-8b` against `python -c "import typer, rich, pydantic,
   yaml"` (its own dependencies) and against the floor any typer CLI pays: a one-command typer
   app that parses one option and prints a rich table of one pydantic model read from the same
   YAML (typer loads its option adapters and rich its renderer only when a command runs). Each
   runs as a fresh subprocess N times in the same run, interleaved, so drift from other jobs on
   the machine hits all three alike; medians and the ratios (target: within 1.2x of the floor,
   in instructions: `--instructions`).
2. Sweep speed: 100,000 (model, seq_len, batch) points through the engine's per-layer KV bytes
   (`plan.KvProfile`), the memory plan and the roofline (`plan.GpuFit.point`), on one core
   (target: under 1 s), planners' set-up included.

    python3 benchmarks/bench_cli.py [--runs 15] [--instructions]

`--instructions` also counts the instructions each start-up command executes, once, under
valgrind (`--tool=callgrind`, where installed): a figure that other jobs on the machine do not
move, for comparing two trees on a busy machine (CPU time still swings a few percent there).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _time_cmd(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds: user + system of the child) of one fresh run of `cmd`. CPU
    time is what the process itself cost: on a busy machine it moves far less than wall time."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


#: the floor: what any typer CLI that reads a YAML into a pydantic model and prints a rich table
#: pays at start-up, whatever it computes.
FLOOR_APP = """
import sys, typer, yaml
from pydantic import BaseModel, ConfigDict
from rich.console import Console
from rich.table import Table
class M(BaseModel):
    model_config = ConfigDict(extra="ignore")
    name: str
    n_layers: int
app = typer.Typer()
@app.command()
def show(path: str, seq_len: int = 8192) -> None:
    m = M.model_validate(yaml.safe_load(open(path)))
    t = Table(); t.add_column("name"); t.add_column("n_layers"); t.add_row(m.name, str(m.n_layers))
    Console().print(t)
app()
"""


#: the model `kvcalc estimate` is timed on (the floor app reads its YAML too)
MODEL = "llama-3.1-8b"
#: the start-up target: `kvcalc estimate MODEL` within this factor of the floor app, in
#: instructions (issue 23 item 4)
TARGET_RATIO = 1.2


def startup(runs: int, count_instructions: bool = False) -> None:
    """Median (and spread) of `runs` fresh processes of each command, interleaved; wall and CPU
    time; the ratios of `kvcalc estimate MODEL` to the imports and to the floor app. Bytecode
    caching is on for the children (PYTHONDONTWRITEBYTECODE is dropped): an installed package
    has its .pyc files, and compiling sources on every run would time the development machine."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"} | {"PYTHONPATH": str(ROOT)}
    py = sys.executable
    cmds = {
        "python -c 'import typer, rich, pydantic, yaml'": [py, "-c", "import typer, rich, pydantic, yaml"],
        f"kvcalc estimate {MODEL}": [py, "-m", "kvcalc", "estimate", MODEL],
        "a bare typer + rich + pydantic + yaml command": [
            py,
            "-c",
            FLOOR_APP,
            str(ROOT / "configs" / "models" / f"{MODEL}.yaml"),
        ],
    }
    for cmd in cmds.values():
        for _ in range(2):
            _time_cmd(cmd, env)  # warm the page cache, write the .pyc files
    wall: dict[str, list[float]] = {k: [] for k in cmds}
    cpu: dict[str, list[float]] = {k: [] for k in cmds}
    for _ in range(runs):  # interleaved, so drift from other jobs hits all alike
        for name, cmd in cmds.items():
            w, c = _time_cmd(cmd, env)
            wall[name].append(w)
            cpu[name].append(c)
    base, cli, floor = list(cmds)
    print(f"start-up, median of {runs} fresh processes (wall | CPU = user + system):")
    for name in cmds:
        w, c = wall[name], cpu[name]
        print(
            f"  {name:<46}: {statistics.median(w) * 1e3:6.1f} ms (min {min(w) * 1e3:.1f}, max {max(w) * 1e3:.1f}) "
            f"| {statistics.median(c) * 1e3:6.1f} ms (min {min(c) * 1e3:.1f}, max {max(c) * 1e3:.1f})"
        )
    for label, other in (("ratio to the imports", base), ("ratio to the bare command", floor)):
        rw = statistics.median(wall[cli]) / statistics.median(wall[other])
        rc = statistics.median(cpu[cli]) / statistics.median(cpu[other])
        target = f"   (target <= {TARGET_RATIO:g})" if other == floor else ""
        print(f"  {label:<46}: {rw:6.2f} x wall | {rc:6.2f} x CPU{target}")
    if count_instructions:
        counts = instructions(cmds, env)
        if counts is None:
            print("instructions: valgrind is not installed")
            return
        print("instructions executed, one run each (valgrind callgrind):")
        for name, n in counts.items():
            print(f"  {name:<46}: {n / 1e6:8.1f} M")
        print(
            f"  {'ratio to the bare command':<46}: {counts[cli] / counts[floor]:8.3f} x   (target <= {TARGET_RATIO:g})"
        )


def instructions(cmds: dict[str, list[str]], env: dict[str, str]) -> dict[str, int] | None:
    """Instructions each command executes (valgrind callgrind's "Collected" count, user space,
    one run each after the timed runs, .pyc files written); None when valgrind is not installed."""
    import re
    import shutil

    if shutil.which("valgrind") is None:
        return None
    out = {}
    for name, cmd in cmds.items():
        r = subprocess.run(
            ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *cmd],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            check=True,
        )
        out[name] = int(re.search(r"Collected : (\d+)", r.stderr).group(1))
    return out


def sweep_speed() -> None:
    from kvcalc.calc.memory_plan import GpuFit, Layout
    from kvcalc.load.gpus import get_gpu
    from kvcalc.load.models import load_model

    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    cases = [
        ("llama-3.1-8b", "h100-sxm", Layout()),
        ("llama-3.1-70b", "h100-sxm", Layout(tp=4, k_dtype="fp8_e4m3")),
        ("gemma-3-27b", "h200", Layout()),
        ("deepseek-v3", "h200", Layout(tp=8, weight_dtype="fp8")),
    ]
    models = [(load_model(m), get_gpu(g), lay) for m, g, lay in cases]
    seq_lens = [256 * (i + 1) for i in range(250)]  # 256 .. 64,000 tokens
    batches = list(range(1, 101))  # 1 .. 100
    n = len(models) * len(seq_lens) * len(batches)
    t0 = time.perf_counter()
    acc = 0.0
    fits = 0
    for spec, gpu, lay in models:
        p = GpuFit(spec, gpu, lay)
        point = p.point
        for T in seq_lens:
            for B in batches:
                used, ok, tpot, tok = point(T, B)
                fits += ok
                acc += tpot
    dt = time.perf_counter() - t0
    print(
        f"sweep: {n:,} (model, seq_len, batch) points over {len(models)} models on one core: "
        f"{dt:.3f} s ({dt / n * 1e6:.2f} us/point; {fits:,} fit; target < 1 s)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15, help="fresh processes per start-up command")
    ap.add_argument("--skip-startup", action="store_true")
    ap.add_argument("--instructions", action="store_true", help="also count instructions under valgrind")
    a = ap.parse_args()
    print(f"python {sys.version.split()[0]} on {os.cpu_count()} CPUs")
    if not a.skip_startup:
        startup(a.runs, a.instructions)
    sweep_speed()


if __name__ == "__main__":
    main()
