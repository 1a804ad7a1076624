"""Plan speed: the whole default search of `kvcalc plan` (every GPU row x counts 1..8, 16, 24, 32 x
tp / pp / dp x the default KV and weight formats), in process on one core, planners' set-up and
launch lines included; prints points searched per second (target: the search under 1 s).

    python3 benchmarks/bench_plan.py [--runs 7]

Each run is a fresh search (no cache carries over); the model and the GPU table are loaded once
before timing, as a CLI run loads them before it searches.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CASES = [
    ("llama-3.1-70b", "32k", 64, 50.0),
    ("deepseek-v3", "32k", 16, 100.0),
    ("qwen3-30b-a3b", "16k", 64, 40.0),
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()

    from kvcalc.load.gpus import gpu_table
    from kvcalc.load.models import load_model
    from kvcalc.requests import PlanRequest, run_plan

    gpu_table()
    print(f"plan: the default search (every GPU of the table, counts up to 32), median of {args.runs} runs, one core:")
    for name, seq, conc, tpot in CASES:
        model = load_model(name)
        times, res = [], None
        for _ in range(args.runs):
            t0 = time.perf_counter()
            res = run_plan(PlanRequest.build(model, seq_len=seq, concurrency=conc, max_tpot_ms=tpot))
            times.append(time.perf_counter() - t0)
        med = statistics.median(times)
        top = res.layouts[0] if res.layouts else None
        best = f"{top.count} x {top.gpu} tp{top.tp} pp{top.pp} dp{top.dp}" if top else "none"
        print(
            f"  {name:14s} {conc} x {seq:>4s}, TPOT <= {tpot:g} ms: {res.points_searched:,} points in "
            f"{med * 1e3:,.0f} ms (min {min(times) * 1e3:,.0f}, max {max(times) * 1e3:,.0f}) = "
            f"{res.points_searched / med:,.0f} points/s; best {best}"
        )


if __name__ == "__main__":
    main()
