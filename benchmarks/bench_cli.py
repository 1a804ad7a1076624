"""Benchmarks that print figures (record them in the README):

1. CLI start-up: `kvcalc estimate llama-3.1-8b` against `python -c "import typer, rich, pydantic,
   yaml"` (its own dependencies) and against the floor any typer CLI pays: a one-command typer
   app that parses one option and prints a rich table of one pydantic model read from the same
   YAML (typer loads its option adapters and rich its renderer only when a command runs). Each
   runs as a fresh subprocess N times in the same run, interleaved, so drift from other jobs on
   the machine hits all three alike; medians and the ratios (target: within 1.15x of the floor).
2. Sweep speed: 100,000 (model, seq_len, batch) points through the engine's per-layer KV bytes
   (`plan.KvProfile`), the memory plan and the roofline (`plan.Planner.point`), on one core
   (target: under 1 s), planners' set-up included.

    python3 benchmarks/bench_cli.py [--runs 15]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _time_cmd(cmd: list[str], runs: int, env: dict[str, str]) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(cmd, cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        out.append(time.perf_counter() - t0)
    return out


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
#: the start-up target: `kvcalc estimate MODEL` within this factor of the floor app
TARGET_RATIO = 1.15


def startup(runs: int) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    py = sys.executable
    base_cmd = [py, "-c", "import typer, rich, pydantic, yaml"]
    floor_cmd = [py, "-c", FLOOR_APP, str(ROOT / "configs" / "models" / f"{MODEL}.yaml")]
    cli_cmd = [py, "-m", "kvcalc", "estimate", MODEL]
    for cmd in (base_cmd, floor_cmd, cli_cmd):
        _time_cmd(cmd, 2, env)  # warm the page cache
    base, floor, cli = [], [], []
    for _ in range(runs):  # interleave so drift hits all alike
        base += _time_cmd(base_cmd, 1, env)
        floor += _time_cmd(floor_cmd, 1, env)
        cli += _time_cmd(cli_cmd, 1, env)
    mb, mf, mc = statistics.median(base), statistics.median(floor), statistics.median(cli)
    print(f"start-up, median of {runs} fresh processes:")
    print(f"  python -c 'import typer, rich, pydantic, yaml' : {mb * 1e3:7.1f} ms "
          f"(min {min(base) * 1e3:.1f}, max {max(base) * 1e3:.1f})")
    print(f"  {'kvcalc estimate ' + MODEL:<46} : {mc * 1e3:7.1f} ms "
          f"(min {min(cli) * 1e3:.1f}, max {max(cli) * 1e3:.1f})")
    print(f"  a bare typer + rich + pydantic + yaml command  : {mf * 1e3:7.1f} ms "
          f"(min {min(floor) * 1e3:.1f}, max {max(floor) * 1e3:.1f})")
    print(f"  ratio to the imports                           : {mc / mb:7.2f} x")
    print(f"  ratio to the bare command                      : {mc / mf:7.2f} x "
          f"(estimate {MODEL}; target <= {TARGET_RATIO:g})")


def sweep_speed() -> None:
    from kvcalc.load.gpus import get_gpu
    from kvcalc.load.models import load_model
    from kvcalc.calc.memory_plan import Layout, Planner

    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    cases = [("llama-3.1-8b", "h100-sxm", Layout()),
             ("llama-3.1-70b", "h100-sxm", Layout(tp=4, k_dtype="fp8_e4m3")),
             ("gemma-3-27b", "h200", Layout()),
             ("deepseek-v3", "h200", Layout(tp=8, weight_dtype="fp8"))]
    models = [(load_model(m), get_gpu(g), lay) for m, g, lay in cases]
    seq_lens = [256 * (i + 1) for i in range(250)]          # 256 .. 64,000 tokens
    batches = list(range(1, 101))                            # 1 .. 100
    n = len(models) * len(seq_lens) * len(batches)
    t0 = time.perf_counter()
    acc = 0.0
    fits = 0
    for spec, gpu, lay in models:
        p = Planner(spec, gpu, lay)
        point = p.point
        for T in seq_lens:
            for B in batches:
                used, ok, tpot, tok = point(T, B)
                fits += ok
                acc += tpot
    dt = time.perf_counter() - t0
    print(f"sweep: {n:,} (model, seq_len, batch) points over {len(models)} models on one core: "
          f"{dt:.3f} s ({dt / n * 1e6:.2f} us/point; {fits:,} fit; target < 1 s)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15, help="fresh processes per start-up command")
    ap.add_argument("--skip-startup", action="store_true")
    a = ap.parse_args()
    print(f"python {sys.version.split()[0]} on {os.cpu_count()} CPUs")
    if not a.skip_startup:
        startup(a.runs)
    sweep_speed()


if __name__ == "__main__":
    main()
