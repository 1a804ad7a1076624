"""The steps of benchmarks/gpu_check.sh, each a fresh process with its own time limit, and one
short table at the end. `gpu_check.sh` finds a Python with torch and kvcalc's packages, then
runs this file; run it directly only with such a Python (`python3 benchmarks/gpu_check_run.py`).

    python3 benchmarks/gpu_check_run.py [--dry-run] [--out DIR | DIR] [--budget-s S]

Steps, in order (the cheap, decisive ones first; the sweep gets the time that is left):

1. env         torch, CUDA, the device and its GPU table key (`kvcalc gpus`)
2. tests       `pytest -m gpu tests/measure` (the tests that need CUDA; skipped on the CPU)
3. measure     `kvcalc measure` on llama-3.1-8b (GQA), deepseek-v2-lite (MLA), gemma-3-4b
               (sliding + global layers): bytes predicted == allocated, step time, GB/s
4. calibrate   `kvcalc measure --calibrate FILE --gpu KEY` (the all-reduce too when 2+ GPUs)
5. estimate    `kvcalc estimate` with and without `--calibration FILE` (TPOT, the label)
6. sweep+plan  `kvcalc sweep` and `kvcalc plan` with `--calibration FILE` (the label)
7. sweep       benchmarks/gpu_check.py: measure over models x contexts x batches (budgeted)

`--dry-run` runs the same steps on the CPU with small sizes (2 layers, 1k tokens, the
all-reduce over 2 gloo processes, the GPU key h200 pretended), to prove the script here.

Outputs under DIR (`--out`, else $OUT when set, else benchmarks/results/), at most 8 files, none
in a subfolder (the device tool brings back 8): `summary.txt` (the table), `gpu_check.log`
(every step's command and output), `calibration-KEY.yaml`, `measure.jsonl` (one result per
model), `estimate.json` (with and without the calibration), and the sweep's own
`<device>-<date>.txt`. Exit status: 0 when every step passed, 1 when one failed (the table says
which and why), 2 when nothing could be measured (no torch, no CUDA without --dry-run).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shlex
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: the whole run's time (s): 6 minutes, so that a 15-minute device lease holds the machine's start,
#: this run and one rerun
TOTAL_BUDGET_S = 360.0
#: (model, what it exercises) measured by step 3
MEASURE_MODELS = [
    ("llama-3.1-8b", "GQA"),
    ("deepseek-v2-lite", "MLA"),
    ("gemma-3-4b", "sliding+global"),
]
#: measure's sizes: on the GPU 32k tokens x 4 sequences (llama-3.1-8b: 131,072 B/token x 32,768
#: x 4 = 16 GiB of KV, a few ms per step), on the CPU 1k x 1 over 2 layers
GPU_MEASURE_ARGS = ["-s", "32k", "--batch", "4", "--steps", "30"]
CPU_MEASURE_ARGS = ["-s", "1k", "--batch", "1", "--layers", "2", "--steps", "2"]
#: the GPU table key for a CUDA device name (first match wins); KVCALC_GPU_KEY overrides
GPU_KEYS = [
    ("H200", "h200"),
    ("H100 80GB HBM3", "h100-sxm"),
    ("H100 SXM", "h100-sxm"),
    ("H100 PCIe", "h100-pcie"),
    ("H100 NVL", "h100-nvl"),
    ("A100-SXM4-80GB", "a100-80gb-sxm"),
    ("A100 80GB", "a100-80gb-sxm"),
    ("B200", "b200"),
    ("L40S", "l40s"),
    ("RTX 4090", "rtx-4090"),
]
#: the workload estimate / sweep / plan are asked about
WORKLOAD = ["llama-3.1-8b", "--engine", "vllm"]

ENV_PROBE = """
import json, torch
d = {"torch": torch.__version__, "cuda_build": torch.version.cuda, "cuda": torch.cuda.is_available()}
if d["cuda"]:
    d["count"] = torch.cuda.device_count()
    d["name"] = torch.cuda.get_device_name(0)
    d["memory_bytes"] = torch.cuda.get_device_properties(0).total_memory
print(json.dumps(d))
"""


@dataclass
class Step:
    """One step's outcome: PASS / FAIL / SKIP, seconds, and the figure or reason for the table."""

    name: str
    status: str = "SKIP"
    seconds: float = 0.0
    result: str = ""
    data: dict = field(default_factory=dict)


def gpu_key(name: str) -> str | None:
    """The GPU table key for a CUDA device name, or None (then KVCALC_GPU_KEY must say it)."""
    return next((key for part, key in GPU_KEYS if part in name), None)


class Runner:
    """Runs the steps: each command a subprocess under a time limit no later than the deadline,
    its command and output appended to the log, its outcome one row of the table."""

    def __init__(self, out: Path, budget_s: float, dry_run: bool) -> None:
        self.out, self.dry_run, self.budget_s = out, dry_run, budget_s
        self.t0 = time.monotonic()
        self.deadline = self.t0 + budget_s
        self.steps: list[Step] = []
        self.log = open(out / "gpu_check.log", "w")  # noqa: SIM115 (closed in finish)

    def left_s(self) -> float:
        return self.deadline - time.monotonic()

    def say(self, text: str) -> None:
        print(text, file=sys.stderr, flush=True)
        self.log.write(text + "\n")
        self.log.flush()

    def call(self, argv: list[str], limit_s: float, env: dict[str, str] | None = None) -> tuple[int | None, str, str]:
        """(exit status or None on a timeout, stdout, stderr) of `argv` run from the repo root
        for at most min(limit_s, the time left) seconds."""
        limit = max(1.0, min(limit_s, self.left_s()))
        shown = ["<script>" if "\n" in a else a for a in argv]  # python -c's text: in this file
        self.say(f"$ {shlex.join(shown)}   (limit {limit:.0f} s)")
        try:
            p = subprocess.run(
                argv,
                cwd=ROOT,
                capture_output=True,
                text=True,
                timeout=limit,
                env={**os.environ, **(env or {})},
            )
            rc, out, err = p.returncode, p.stdout, p.stderr
        except subprocess.TimeoutExpired as e:
            rc = None
            out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
            err = (
                e.stderr.decode() if isinstance(e.stderr, bytes) else (e.stderr or "")
            ) + f"\n(killed after {limit:.0f} s)"
        self.log.write(out + ("" if out.endswith("\n") or not out else "\n"))
        self.log.write(err + ("" if err.endswith("\n") or not err else "\n"))
        self.log.flush()
        return rc, out, err

    def step(self, name: str, fn, *, needs_s: float = 5.0) -> Step:  # type: ignore[no-untyped-def]
        """Run `fn(step)` (which sets status and result, or raises) unless under `needs_s` seconds
        are left; a Python error in the step is a FAIL with its text, never a silent pass."""
        s = Step(name)
        start = time.monotonic()
        if self.left_s() < needs_s:
            s.result = f"not run: {max(self.left_s(), 0):.0f} s of the {self.budget_s:.0f} s budget left"
        else:
            self.say(f"== {name}")
            try:
                fn(s)
            except Exception as e:  # a parse error, a missing file: the step failed, say how
                s.status, s.result = "FAIL", f"{type(e).__name__}: {e}"
        s.seconds = time.monotonic() - start
        self.say(f"-- {name}: {s.status} ({s.seconds:.0f} s) {s.result}")
        self.steps.append(s)
        return s


def gbs(bytes_per_s: float) -> str:
    """A rate in GB/s (GB = 1e9 B), three significant figures: '4,310 GB/s', '2.48 GB/s'."""
    v = bytes_per_s / 1e9
    return f"{v:,.0f} GB/s" if v >= 100 else f"{v:.3g} GB/s"


def _why(rc: int | None, err: str) -> str:
    """A failed command in a few words: its status and the last line it printed."""
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    last = lines[-1].strip()[:160] if lines else "no output"
    return ("timed out" if rc is None else f"exit {rc}") + f": {last}"


def run_all(out: Path, dry_run: bool, budget_s: float = TOTAL_BUDGET_S, python: str = sys.executable) -> int:
    """Every step (module docstring); returns the exit status."""
    out.mkdir(parents=True, exist_ok=True)
    r = Runner(out, budget_s, dry_run)
    kvcalc = [python, "-m", "kvcalc"]
    ctx: dict[str, str] = {}

    def env(s: Step) -> None:
        rc, o, e = r.call([python, "-c", ENV_PROBE], 90)
        if rc != 0:
            s.status, s.result = "FAIL", _why(rc, e)
            return
        d = json.loads(o.strip().splitlines()[-1])
        s.data = d
        if dry_run:
            ctx["device"], ctx["key"] = "cpu", os.environ.get("KVCALC_GPU_KEY", "h200")
            s.status = "PASS"
            s.result = f"dry run on the CPU, torch {d['torch']}; GPU key {ctx['key']} pretended"
            return
        if not d["cuda"]:
            s.status = "FAIL"
            s.result = f"torch {d['torch']} (CUDA build {d['cuda_build']}) sees no CUDA GPU; --dry-run runs on the CPU"
            return
        key = os.environ.get("KVCALC_GPU_KEY") or gpu_key(d["name"])
        if key is None:
            s.status, s.result = "FAIL", f"no GPU table key for '{d['name']}': set KVCALC_GPU_KEY (kvcalc gpus)"
            return
        ctx["device"], ctx["key"] = "cuda", key
        s.status = "PASS"
        s.result = f"{d['count']} x {d['name']} ({d['memory_bytes'] / 2**30:.0f} GiB) = {key}, torch {d['torch']}"

    if r.step("env", env).status != "PASS":
        return finish(r, exit_status=2)
    device, key = ctx["device"], ctx["key"]
    cal_path = out / f"calibration-{key}.yaml"

    def tests(s: Step) -> None:
        rc, o, e = r.call(
            [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "gpu", "tests/measure"],
            150,
        )
        tail = [ln for ln in o.strip().splitlines() if ln.strip()]
        last = tail[-1] if tail else ""
        # exit 5: every test deselected or none collected -- a marker that selects nothing is a failure on a GPU
        ok = rc == 0 and ("passed" in last if device == "cuda" else ("skipped" in last or "passed" in last))
        s.status, s.result = ("PASS" if ok else "FAIL"), (last[:200] if rc is not None and last else _why(rc, e))

    r.step("tests (-m gpu)", tests, needs_s=30)

    measured: list[dict] = []

    def measure_one(model: str, kind: str):  # type: ignore[no-untyped-def]
        def run(s: Step) -> None:
            args = CPU_MEASURE_ARGS if device == "cpu" else GPU_MEASURE_ARGS
            rc, o, e = r.call([*kvcalc, "measure", model, "--device", device, *args, "--format", "json"], 120)
            if rc != 0:
                s.status, s.result = "FAIL", _why(rc, e)
                return
            d = json.loads(o)
            measured.append(d)
            table = "" if d["fraction_of_table"] is None else f", {100 * d['fraction_of_table']:.0f}% of table"
            s.status = "PASS" if d["kv_bytes_equal"] else "FAIL"
            s.result = (
                f"{kind}: bytes {'equal' if d['kv_bytes_equal'] else 'DIFFER'}, "
                f"{d['measured_step_s_median'] * 1e3:.3f} ms/step, "
                f"{gbs(d['achieved_bytes_per_s'])} = {100 * d['fraction_of_probe']:.0f}% of probe{table}"
            )

        return run

    for model, kind in MEASURE_MODELS:
        r.step(f"measure {model}", measure_one(model, kind), needs_s=20)
    if measured:
        (out / "measure.jsonl").write_text("".join(json.dumps(d) + "\n" for d in measured))

    def calibrate(s: Step) -> None:
        extra = ["--layers", "2", "--allreduce-ranks", "2"] if device == "cpu" else []
        argv = [*kvcalc, "measure", "llama-3.1-8b", "--calibrate", str(cal_path), "--gpu", key, "--device", device]
        rc, o, e = r.call([*argv, *extra, "--force", "--format", "json"], 150)
        if rc != 0:
            s.status, s.result = "FAIL", _why(rc, e)
            return
        d = json.loads(o)
        ar = (
            "no all-reduce (1 device)"
            if d["allreduce_latency_s"] is None
            else f"all-reduce {d['allreduce_latency_s'] * 1e6:.0f} us at tp {d['allreduce_tp']}"
        )
        s.status = "PASS"
        s.result = (
            f"floor {d['step_floor_s'] * 1e3:.3f} ms, {gbs(d['read_bytes_per_s'])}, "
            f"{d['flops_per_s'] / 1e12:.3g} TFLOP/s, {ar}"
        )

    cal = r.step("calibrate", calibrate, needs_s=30)

    def estimate(s: Step) -> None:
        base = [*kvcalc, "estimate", *WORKLOAD, "--gpu", key, "--input-len", "1024", "--output-len", "128"]
        runs = {}
        for label, extra in (("table", []), ("calibrated", ["--calibration", str(cal_path)])):
            rc, o, e = r.call([*base, *extra, "--format", "json"], 60)
            if rc != 0:
                s.status, s.result = "FAIL", f"{label}: {_why(rc, e)}"
                return
            runs[label] = json.loads(o)
        (out / "estimate.json").write_text(json.dumps(runs, indent=1) + "\n")
        t, c = runs["table"], runs["calibrated"]
        ok = "calibrated: " in c["speed_model"] and "calibrated" not in t["speed_model"]
        s.status = "PASS" if ok else "FAIL"
        s.result = (
            f"TPOT {t['tpot_s'] * 1e3:.3f} ms (table) -> {c['tpot_s'] * 1e3:.3f} ms "
            f"({c['speed_model'].split('; ')[-1]})"
        )

    def sweep_plan(s: Step) -> None:
        want = "calibrated: floor, bandwidth, FLOP/s"
        for argv in (
            [*kvcalc, "sweep", *WORKLOAD, "--gpu", key, "-s", "8k", "--batch", "1,8"],
            [*kvcalc, "plan", "llama-3.1-8b", "-s", "8k", "--concurrency", "8", "--gpu", key],
        ):
            rc, o, e = r.call([*argv, "--calibration", str(cal_path)], 60, env={"COLUMNS": "80"})
            if rc != 0 or want not in " ".join(o.split()):
                s.status = "FAIL"
                s.result = f"{argv[3]}: " + (_why(rc, e) if rc != 0 else f"output does not say '{want}'")
                return
        s.status, s.result = "PASS", f"both print '{want}'"

    if cal.status == "PASS":
        r.step("estimate --calibration", estimate)
        r.step("sweep, plan --calibration", sweep_plan)
    else:
        for name in ("estimate --calibration", "sweep, plan --calibration"):
            r.steps.append(Step(name, "SKIP", 0.0, "no calibration file (calibrate failed)"))

    def sweep(s: Step) -> None:
        left = r.left_s()
        env = {"KVCALC_GPU_CHECK_BUDGET_S": f"{max(left - 45, 10):.0f}"}
        if device == "cpu":
            env["KVCALC_GPU_CHECK_CPU"] = "1"
        rc, o, e = r.call([python, "benchmarks/gpu_check.py", str(out)], left - 5, env=env)
        rows = [ln for ln in o.splitlines() if re.search(r"\s(yes|NO)\s", ln)]
        notes = [ln for ln in o.splitlines() if ln.startswith("note: ")]
        s.status = "PASS" if rc == 0 else "FAIL"
        s.result = f"{len(rows)} points, {sum(' NO ' in ln for ln in rows)} with bytes differing, {len(notes)} notes"
        if rc != 0:
            s.result += f"; {_why(rc, e)}"

    r.step("sweep (gpu_check.py)", sweep, needs_s=40)
    return finish(r)


def finish(r: Runner, exit_status: int | None = None) -> int:
    """Print the table, write summary.txt, close the log; the exit status (1 if a step failed)."""
    elapsed = time.monotonic() - r.t0
    head = (
        f"kvcalc gpu_check{' --dry-run' if r.dry_run else ''}: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, "
        f"{elapsed:.0f} s of a {r.budget_s:.0f} s budget"
    )
    w = max(len(s.name) for s in r.steps)
    lines = [head, ""]
    for s in r.steps:  # 80 columns: the result wraps under itself
        lead = f"{s.name:<{w}}  {s.status:<4}  {s.seconds:>4.0f} s  "
        # a unit stays by its number, and "tp" by its count
        glued = re.sub(r"(\d) (ms|us|s|GB/s|GiB|TFLOP/s)\b", "\\1\0\\2", s.result)
        glued = re.sub(r"\btp (\d)", "tp\0\\1", glued)
        wrapped = [ln.replace("\0", " ") for ln in textwrap.wrap(glued, max(80 - len(lead), 30))] or [""]
        lines += [lead + wrapped[0]] + [" " * len(lead) + more for more in wrapped[1:]]
    failed = [s.name for s in r.steps if s.status == "FAIL"]
    status = exit_status if exit_status is not None else (1 if failed else 0)
    lines += [
        "",
        f"result: {'FAILED: ' + ', '.join(failed) if failed else 'every step passed' if status == 0 else 'nothing measured'}",
    ]
    names = sorted({p.name for p in r.out.iterdir()} | {"summary.txt"})
    lines += textwrap.wrap(f"outputs: {r.out} ({', '.join(names)})", 80, subsequent_indent="  ")
    text = "\n".join(lines) + "\n"
    (r.out / "summary.txt").write_text(text)
    r.log.close()
    print(text, end="")
    return status


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dry-run", action="store_true", help="the same steps on the CPU, small sizes")
    ap.add_argument("--out", help="folder for the outputs (default: $OUT, else benchmarks/results/)")
    ap.add_argument("dir", nargs="?", help="the same as --out (gpu_check.sh's old form)")
    ap.add_argument("--budget-s", type=float, default=TOTAL_BUDGET_S, help="the whole run's time")
    a = ap.parse_args(argv)
    out = Path(a.out or a.dir or os.environ.get("OUT") or ROOT / "benchmarks" / "results")
    return run_all(out, a.dry_run, a.budget_s)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
