"""The sweep behind benchmarks/gpu_check.sh (its last step; benchmarks/gpu_check_run.py runs it
with the time the other steps left): `kvcalc.measure.run` over bundled models, contexts
1k..128k and batches 1..64 on one GPU, skipping points that do not fit, and one compact table.

Usage: python3 benchmarks/gpu_check.py [RESULTS_DIR]   (run from the repo root)
KVCALC_GPU_CHECK_CPU=1: a CPU smoke mode (tests/data/tiny-gqa.yaml, short contexts, 2 steps)
that exercises the same code path without a GPU. KVCALC_GPU_CHECK_BUDGET_S: stop starting new
points after this many seconds (default 420; gpu_check_run.py passes what its budget has left).
"""

from __future__ import annotations

import datetime
import os
import re
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kvcalc.errors import KvcalcError  # noqa: E402
from kvcalc.formats import kv_format  # noqa: E402
from kvcalc.load.models import load_model  # noqa: E402

GIB = 2**30
#: (model, --layers or None for all): two dense GQA models and a GQA 70B at 8 layers
GPU_MODELS = [("llama-3.1-8b", None), ("qwen3-4b", None), ("llama-3.1-70b", 8)]
GPU_CONTEXTS = [1024, 8192, 32768, 131072]
GPU_BATCHES = [1, 8, 64]
CPU_MODELS = [(str(ROOT / "tests" / "data" / "tiny-gqa.yaml"), None), ("llama-3.1-8b", 2)]
CPU_CONTEXTS = [64, 1024]
CPU_BATCHES = [1, 4]


#: a point runs only when its plan needs at most this share of the free memory at the start
#: (kvcalc.measure.run then checks again, against the free memory of that moment less a margin)
FIT_FRACTION = 0.85
#: seconds one run costs beside its timed reads (a guess, generous): the CUDA probe (4 GiB fill
#: and 12 sums), allocation and random fill, planning, Python launches, a graph capture
RUN_OVERHEAD_S = 3.0
#: H200 HBM3e read bandwidth for the time estimate (NVIDIA H200 datasheet: 4.8 TB/s)
EST_BYTES_PER_S = 4.8e12
WARMUP_STEPS = 5  # kvcalc.measure.run's warm-up on CUDA


def select_points(
    specs: list, contexts: list[int], batches: list[int], free_bytes: int, make_plan
) -> tuple[list[tuple], list[str]]:
    """The sweep's points that fit: (spec, layers, T, B, kv_bytes, needed_bytes) for each
    model x context x batch whose plan (`make_plan(spec, T, B, layers)`, no tensor allocated)
    needs at most FIT_FRACTION x `free_bytes`; and a note for each point skipped."""
    points, notes = [], []
    for spec, layers in specs:
        for T in contexts:
            for B in batches:
                plan = make_plan(spec, T, B, layers)
                if plan.needed_bytes > FIT_FRACTION * free_bytes:
                    notes.append(
                        f"skip {spec.name} T={T} B={B}: needs {plan.needed_bytes / GIB:.1f} GiB, "
                        f"{free_bytes / GIB:.1f} GiB free"
                    )
                    continue
                points.append((spec, layers, T, B, plan.predicted_kv_bytes, plan.needed_bytes))
    return points, notes


def estimate_s(
    points: list[tuple],
    steps: int,
    modes: int,
    bytes_per_s: float = EST_BYTES_PER_S,
    overhead_s: float = RUN_OVERHEAD_S,
) -> float:
    """Seconds the sweep should take: per point and mode, (warm-up + steps) reads of its KV
    bytes at `bytes_per_s`, plus `overhead_s`."""
    return sum(modes * ((WARMUP_STEPS + steps) * p[4] / bytes_per_s + overhead_s) for p in points)


def main(argv: list[str]) -> int:
    cpu = os.environ.get("KVCALC_GPU_CHECK_CPU") == "1"
    budget_s = float(os.environ.get("KVCALC_GPU_CHECK_BUDGET_S", "420"))
    out_dir = Path(argv[0]) if argv else None
    import gc

    import torch

    from kvcalc import measure as M

    device = "cpu" if cpu else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        print("gpu_check: torch sees no CUDA GPU; KVCALC_GPU_CHECK_CPU=1 runs the CPU smoke mode", file=sys.stderr)
        return 2
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    models, contexts, batches = (
        (CPU_MODELS, CPU_CONTEXTS, CPU_BATCHES) if cpu else (GPU_MODELS, GPU_CONTEXTS, GPU_BATCHES)
    )
    steps = 2 if cpu else 30
    modes = [False] if cpu else [False, True]
    cols = [
        "model",
        "mode",
        "layers",
        "T",
        "B",
        "KV GiB",
        "bytes equal",
        "median ms",
        "p10-p90 ms",
        "GB/s",
        "% probe",
        "% table",
        "err % (probe)",
        "err % (table)",
        "probe GB/s",
    ]
    rows: list[list[str]] = []
    notes: list[str] = []
    t0 = time.monotonic()
    fmt = kv_format("bf16")
    specs = []
    for model_name, layers in models:
        try:
            specs.append((load_model(model_name), layers))
        except KvcalcError as e:
            notes.append(f"skip {model_name}: {e}")
    if device == "cuda":
        torch.empty(1, device="cuda")
        torch.cuda.empty_cache()
    free = M.free_memory_bytes(device) or 0
    points, skipped = select_points(
        specs, contexts, batches, free, lambda spec, T, B, layers: M.make_plan(spec, T, B, fmt, fmt, device, layers)
    )
    notes += skipped
    est = estimate_s(points, steps, len(modes))
    head = (
        f"kvcalc gpu_check: {name}, torch {torch.__version__}, "
        f"PYTORCH_CUDA_ALLOC_CONF={os.environ.get('PYTORCH_CUDA_ALLOC_CONF', '')}, "
        f"{datetime.datetime.now().isoformat(timespec='seconds')}; {len(points)} points x {len(modes)} "
        f"mode(s), {free / GIB:.1f} GiB free, estimate {est:.0f} s at {EST_BYTES_PER_S / 1e12:.1f} TB/s"
    )
    print(head, file=sys.stderr, flush=True)
    failed = over = False
    for spec, layers, T, B, _, _ in points:
        if time.monotonic() - t0 > budget_s:
            if not over:
                notes.append(f"budget {budget_s:.0f} s reached: skipped {spec.name} T={T} B={B} and after")
            over = True
            continue
        for graph in modes:
            r = None
            try:
                r = M.run(
                    M.MeasureRequest(
                        model=spec,
                        seq_len=T,
                        batch=B,
                        k_format=fmt,
                        v_format=fmt,
                        device=device,
                        layers=layers,
                        steps=steps,
                        cuda_graph=graph,
                    )
                )
            except KvcalcError as e:
                notes.append(f"skip {spec.name} T={T} B={B}: {e}")
            except Exception as e:  # CUDA OOM, a kernel error: note it, free, go on
                failed = True
                msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
                notes.append(
                    f"FAILED {spec.name} T={T} B={B} {'graph' if graph else 'eager'}: {type(e).__name__}: {msg[:200]}"
                )
            if r is None:  # the exception (and the frames it held) is gone: release the memory
                gc.collect()
                if device == "cuda":
                    torch.cuda.empty_cache()
                continue
            rows.append(_row(r, T, "graph" if graph else "eager"))
            if rows[-1][6] != "yes":
                notes.append(
                    f"{spec.name} T={T} B={B}: storage {r.measured_kv_bytes}, requested "
                    f"{r.allocator_requested_delta_bytes}, allocated {r.allocator_allocated_delta_bytes} "
                    f"(expected {r.allocator_allocated_expected_bytes}) vs predicted {r.predicted_kv_bytes}"
                )
            print(" | ".join(rows[-1]), file=sys.stderr, flush=True)
    widths = [max(len(c), *(len(r[i]) for r in rows)) if rows else len(c) for i, c in enumerate(cols)]
    lines = [
        head,
        "KV bf16, backend sdpa; mode eager = one Python step per token, graph = one step captured "
        "in a CUDA graph and replayed (its write position is baked in: every replay rewrites slot T-1); "
        "bytes equal = tensor storage == allocator requested == engine "
        "prediction, and memory_allocated == tensors rounded to 512 B; err % = 100 x (predicted - "
        "measured) / measured, predicted = bytes read / bandwidth (probe: measured in the same run; "
        "table: kvcalc/data/gpus.yaml)",
        "",
    ]
    lines.append("  ".join(c.rjust(w) for c, w in zip(cols, widths, strict=True)))
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    lines += [""] + [f"note: {n}" for n in notes] + [f"elapsed {time.monotonic() - t0:.0f} s"]
    text = "\n".join(lines)
    print(text)
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
        path = out_dir / f"{slug}-{datetime.date.today().isoformat()}.txt"
        path.write_text(text + "\n")
        print(f"wrote {path}")
    return 0 if rows and not failed and all(r[6] == "yes" for r in rows) else 1


def _row(r, T: int, mode: str) -> list[str]:
    """One table row from a MeasureResult."""
    eq = (
        r.measured_kv_bytes == r.predicted_kv_bytes
        and (r.allocator_requested_delta_bytes in (None, r.predicted_kv_bytes))
        and (r.allocator_allocated_delta_bytes == r.allocator_allocated_expected_bytes)
    )
    return [
        r.model,
        mode,
        f"{r.layers_measured}/{r.n_layers}",
        f"{T // 1024}k" if T >= 1024 else str(T),
        str(r.batch),
        f"{r.predicted_kv_bytes / GIB:.3f}",
        "yes" if eq else "NO",
        f"{r.measured_step_s_median * 1e3:.3f}",
        f"{r.measured_step_s_p10 * 1e3:.3f}-{r.measured_step_s_p90 * 1e3:.3f}",
        f"{r.achieved_bytes_per_s / 1e9:.0f}",
        f"{100 * r.fraction_of_probe:.1f}",
        "n/a" if r.fraction_of_table is None else f"{100 * r.fraction_of_table:.1f}",
        f"{r.error_percent:+.1f}",
        "n/a" if r.error_percent_table is None else f"{r.error_percent_table:+.1f}",
        f"{r.probe_bytes_per_s / 1e9:.0f}",
    ]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
