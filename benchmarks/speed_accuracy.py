"""kvcalc's speed model against published measurements: predicted / measured speed per regime,
engine and GPU family, on the calibration split (the rows `kvcalc/data/speed.yaml` was fitted on)
and the held-out split (rows the fit never saw: other GPUs, another model, other engine runs).

    python benchmarks/speed_accuracy.py            # the table (what docs/speed-model.md keeps)
    python benchmarks/speed_accuracy.py --rows     # and every row's ratio
    python benchmarks/speed_accuracy.py --fit      # refit on the calibration split; prints the
                                                   # constants to write into speed.yaml

Ratio = kvcalc's speed / the published speed (tokens/s; for a time, published / predicted): above
1, kvcalc promises more than the engine delivered. The rows are tests/data/published-calibration.yaml
(a copy of the shared fixture, 79 rows with their sources). Each row runs through the same
`GpuFit` that `kvcalc estimate --gpu G --engine E` uses, with the engine's speed terms.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kvcalc.calc import request_speed, speed  # noqa: E402
from kvcalc.calc.memory_plan import GpuFit, Layout  # noqa: E402
from kvcalc.load.gpus import get_gpu  # noqa: E402
from kvcalc.load.models import load_model  # noqa: E402
from kvcalc.load.speed import speed_table  # noqa: E402

ROWS_PATH = ROOT / "tests" / "data" / "published-calibration.yaml"
#: the row's engine -> the speed table's engine name
ENGINES = {"llama.cpp": "llamacpp", "vLLM": "vllm", "TensorRT-LLM": "tensorrt-llm", "gpt-fast": "gpt-fast"}
#: published KV names -> kvcalc formats
KV = {"fp16": "fp16", "bf16": "bf16", "fp8": "fp8"}
#: the held-out split: rows on these GPUs, or of these (engine, model) pairs, are never fitted on
HELD_OUT_GPUS = ("m3-max", "m3-ultra", "m4-max", "h100-sxm")
CALIBRATION_EXCEPTIONS = (("vLLM", "llama-3.1-8b"),)  # the only vLLM rows to fit its floor on
REGIMES = ("batch1_decode", "batched_decode", "prefill")


def held_out(row: dict[str, Any]) -> bool:
    """True for a row of the held-out split: a GPU in HELD_OUT_GPUS, except the vLLM Llama-3.1-8B
    rows (the fit's only vLLM rows; vLLM's gpt-oss-20b rows stay held out)."""
    if (row["engine"], row["kvcalc_model"]) in CALIBRATION_EXCEPTIONS:
        return False
    return row["kvcalc_gpu"] in HELD_OUT_GPUS or row["engine"] == "vLLM"


def family(gpu: str) -> str:
    """'apple', 'a100' or 'h100' for the table's rows."""
    return "apple" if gpu.startswith("m") else gpu.split("-")[0]


@dataclass
class Case:
    """One expressible row, its planner (speed terms swapped in by `predict`) and what to compare."""

    row: dict[str, Any]
    planner: GpuFit
    gpu: Any

    @property
    def held_out(self) -> bool:
        return held_out(self.row)


def build_cases() -> tuple[list[Case], list[str]]:
    rows = yaml.safe_load(ROWS_PATH.read_text())["rows"]
    cases, skipped = [], []
    models: dict[str, Any] = {}
    for r in rows:
        if not r["expressible"]:
            skipped.append(f"{r['id']}: {r['why_not']}")
            continue
        name = r["kvcalc_model"]
        model = models.setdefault(name, load_model(name))
        gpu = get_gpu(r["kvcalc_gpu"])
        kv = KV[r["kvcalc_kv_dtype"]]
        lay = Layout(
            tp=r["tp"], weight_dtype=r["kvcalc_weight_dtype"], k_dtype=kv, v_dtype=kv, gpu_memory_utilization=1.0
        )
        cases.append(Case(row=r, planner=GpuFit(model, gpu, lay), gpu=gpu))
    return cases, skipped


def terms_for(case: Case, table: speed.SpeedTable) -> speed.SpeedTerms:
    g = case.gpu
    return speed.resolve_terms(
        table,
        engine=ENGINES[case.row["engine"]],
        vendor=g.vendor,
        name=g.name,
        interconnect_bytes_per_s=g.interconnect_bytes_per_s,
        hbm_bytes_per_s=g.hbm_bytes_per_s,
        bf16_flops_per_s=g.bf16_flops_per_s,
        tp=case.row["tp"],
    )


def predict(case: Case, table: speed.SpeedTable | None) -> float:
    """kvcalc's speed / the published speed for one row (`table` None: the bare roofline,
    bandwidth efficiency 0.8 and FLOP/s efficiency 0.5, with no speed terms)."""
    r = case.row
    p = copy.copy(case.planner)
    p.layout = dataclasses.replace(p.layout, speed=terms_for(case, table) if table is not None else None)
    I, O, B, m = r["input_len"], r["output_len"], r["batch"], r["method"]  # noqa: E741  (I, O: input and output tokens, as in the docstring)
    if m == "tg":  # tokens/s of one sequence over O steps from context I
        return (1 / p.decode(I + O // 2, B).step_time_s) / r["measured"]
    if m == "pp":  # prompt tokens/s
        return (I / p.prefill(I).step_time_s) / r["measured"]
    if m == "ttft":  # ms
        return r["measured"] / (p.prefill(I).step_time_s * 1e3)
    if m in ("itl", "tpot"):  # ms per output token at concurrency B
        return r["measured"] / (p.decode(I + O // 2, B).step_time_s * 1e3)
    if m == "static":  # output tokens/s per GPU of a static batch
        pre, dec = request_speed.static_run_s(p, I, O, B)
        return (B * O / (pre + dec) / r["tp"]) / r["measured"]
    raise ValueError(f"{r['id']}: unknown method {m}")


def quartiles(xs: list[float]) -> tuple[float, float, float]:
    """(25th, 50th, 75th percentile), linear interpolation (numpy's default)."""
    s = sorted(xs)

    def q(f: float) -> float:
        k = (len(s) - 1) * f
        lo = math.floor(k)
        return s[lo] + (s[min(lo + 1, len(s) - 1)] - s[lo]) * (k - lo)

    return q(0.25), q(0.5), q(0.75)


def table_lines(cases: list[Case], ratios: list[float], title: str) -> list[str]:
    """One block: per regime, then per engine and per GPU family, n / median / IQR."""
    out = [title, f"{'group':<34}{'n':>4}{'median':>8}  {'IQR':<12}"]

    def line(name: str, pick: Callable[[Case], bool]) -> None:
        xs = [x for c, x in zip(cases, ratios, strict=True) if pick(c)]
        if xs:
            a, m, b = quartiles(xs)
            out.append(f"{name:<34}{len(xs):>4}{m:>8.2f}  {a:.2f}-{b:.2f}")

    line("all rows", lambda c: True)
    for reg in REGIMES:
        line(f"regime {reg}", lambda c, reg=reg: c.row["regime"] == reg)
    # issue 21's fourth regime: whole runs (prefill + decode) at the engine's own batch are the
    # static-batch rows, which the fixture files under batched_decode
    line("  of which whole runs (static)", lambda c: c.row["method"] == "static")
    for eng in ENGINES:
        line(f"engine {eng}", lambda c, eng=eng: c.row["engine"] == eng)
    for fam in ("apple", "a100", "h100"):
        line(f"gpu {fam}", lambda c, fam=fam: family(c.row["kvcalc_gpu"]) == fam)
    for reg in REGIMES:
        for eng in ENGINES:
            line(f"  {reg} / {eng}", lambda c, reg=reg, eng=eng: c.row["regime"] == reg and c.row["engine"] == eng)
    return out


# ----- the fit ---------------------------------------------------------------------------

#: the fitted constants: (section, key path) in speed.yaml
FITTED: list[tuple[str, tuple[Any, ...]]] = [
    ("step_floor_s", ("llamacpp", "metal")),
    ("step_floor_s", ("vllm", "cuda")),
    ("step_floor_s", ("tensorrt-llm", "cuda")),
    ("step_floor_s", ("gpt-fast", "cuda")),
    ("bw_efficiency", ("cuda",)),
    ("bw_efficiency", ("metal",)),
    ("format_efficiency", ("cuda", 8)),
    ("format_efficiency", ("cuda", 4)),
    ("format_efficiency", ("metal", 8)),
    ("format_efficiency", ("metal", 4)),
    ("flops_efficiency", ("datacenter",)),
    ("flops_efficiency", ("apple",)),
    ("allreduce_latency_s", ("nvlink", 0)),
    ("allreduce_latency_s", ("nvlink", 1)),
]
#: fractions are capped at 1
CAPPED = ("bw_efficiency", "format_efficiency", "flops_efficiency")


def get_param(t: speed.SpeedTable, sec: str, path: tuple[Any, ...]) -> float:
    node: Any = getattr(t, sec)
    for k in path:
        node = node[k]
    return float(node)


def with_param(t: speed.SpeedTable, sec: str, path: tuple[Any, ...], v: float) -> speed.SpeedTable:
    d = copy.deepcopy(getattr(t, sec))
    if sec == "allreduce_latency_s":
        pair = list(d[path[0]])
        pair[path[1]] = v
        d[path[0]] = tuple(pair)
    else:
        node = d
        for k in path[:-1]:
            node = node[k]
        node[path[-1]] = v
    return dataclasses.replace(t, **{sec: d})


def loss(cases: list[Case], t: speed.SpeedTable) -> float:
    return sum(math.log(predict(c, t)) ** 2 for c in cases)


def _set_all(t: speed.SpeedTable, x: list[float]) -> speed.SpeedTable:
    for (sec, path), lv in zip(FITTED, x, strict=True):
        v = math.exp(lv)
        t = with_param(t, sec, path, min(v, 1.0) if sec in CAPPED else v)
    return t


def fit(cases: list[Case], t: speed.SpeedTable, rounds: int = 3, iters: int = 1500) -> speed.SpeedTable:
    """Nelder-Mead (Nelder & Mead 1965) in log space on the sum of squared log ratios over
    `cases`, restarted `rounds` times from the best point; fractions are capped at 1."""

    def f(x: list[float]) -> float:
        return loss(cases, _set_all(t, x))

    x0 = [math.log(max(get_param(t, sec, path), 1e-7)) for sec, path in FITTED]
    n = len(x0)
    for _ in range(rounds):
        simplex = [x0] + [[v + (0.3 if k == i else 0.0) for k, v in enumerate(x0)] for i in range(n)]
        vals = [f(x) for x in simplex]
        for _ in range(iters):
            order = sorted(range(n + 1), key=lambda k: vals[k])
            simplex, vals = [simplex[k] for k in order], [vals[k] for k in order]
            c = [sum(x[k] for x in simplex[:-1]) / n for k in range(n)]
            xr = [c[k] + (c[k] - simplex[-1][k]) for k in range(n)]
            fr = f(xr)
            if fr < vals[0]:
                xe = [c[k] + 2 * (c[k] - simplex[-1][k]) for k in range(n)]
                fe = f(xe)
                simplex[-1], vals[-1] = (xe, fe) if fe < fr else (xr, fr)
            elif fr < vals[-2]:
                simplex[-1], vals[-1] = xr, fr
            else:
                xc = [c[k] + 0.5 * (simplex[-1][k] - c[k]) for k in range(n)]
                fc = f(xc)
                if fc < vals[-1]:
                    simplex[-1], vals[-1] = xc, fc
                else:
                    simplex = [simplex[0]] + [
                        [simplex[0][k] + 0.5 * (x[k] - simplex[0][k]) for k in range(n)] for x in simplex[1:]
                    ]
                    vals = [vals[0]] + [f(x) for x in simplex[1:]]
        x0 = simplex[min(range(n + 1), key=lambda k: vals[k])]
    return _set_all(t, x0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", action="store_true", help="print every row's ratio")
    ap.add_argument("--fit", action="store_true", help="refit on the calibration split and print the constants")
    ap.add_argument("--roofline", action="store_true", help="the bare roofline instead (no speed terms): the 'before'")
    args = ap.parse_args()
    cases, skipped = build_cases()
    table: speed.SpeedTable | None = None if args.roofline else speed_table()
    if args.fit and table is not None:
        table = fit([c for c in cases if not c.held_out], table)
        for sec, path in FITTED:
            print(f"{sec}.{'.'.join(map(str, path))}: {get_param(table, sec, path):.6g}")
    ratios = [predict(c, table) for c in cases]
    cal = [(c, x) for c, x in zip(cases, ratios, strict=True) if not c.held_out]
    held = [(c, x) for c, x in zip(cases, ratios, strict=True) if c.held_out]
    what = "bare roofline (no speed terms)" if table is None else "speed model"
    print(f"kvcalc {what} vs {ROWS_PATH.name}: ratio = predicted / measured speed")
    for title, part in (("CALIBRATION split (fitted on)", cal), ("HELD-OUT split (never fitted on)", held)):
        print()
        print("\n".join(table_lines([c for c, _ in part], [x for _, x in part], title)))
    if skipped:
        print(f"\nnot expressible in kvcalc ({len(skipped)} rows):")
        for s in skipped:
            print(f"  {s}")
    if args.rows:
        print()
        for c, x in zip(cases, ratios, strict=True):
            print(f"{'H' if c.held_out else 'C'} {x:6.2f}  {c.row['id']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
