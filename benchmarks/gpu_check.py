"""The sweep behind benchmarks/gpu_check.sh: `kvcalc.measure.run` over bundled models, contexts
1k..128k and batches 1..64 on one GPU, skipping points that do not fit, and one compact table.

Usage: python3 benchmarks/gpu_check.py [RESULTS_DIR]   (run from the repo root)
KVCALC_GPU_CHECK_CPU=1: a CPU smoke mode (tests/data/tiny-gqa.yaml, short contexts, 2 steps)
that exercises the same code path without a GPU. KVCALC_GPU_CHECK_BUDGET_S: stop starting new
points after this many seconds (default 420, so the whole script stays under 8 minutes).
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

from kvcalc.dtypes import kv_format  # noqa: E402
from kvcalc.errors import KvcalcError  # noqa: E402
from kvcalc.loaders import load_model  # noqa: E402

GIB = 2**30
#: (model, --layers or None for all): two dense GQA models and a GQA 70B at 8 layers
GPU_MODELS = [("llama-3.1-8b", None), ("qwen3-4b", None), ("llama-3.1-70b", 8)]
GPU_CONTEXTS = [1024, 8192, 32768, 131072]
GPU_BATCHES = [1, 8, 64]
CPU_MODELS = [(str(ROOT / "tests" / "data" / "tiny-gqa.yaml"), None), ("llama-3.1-8b", 2)]
CPU_CONTEXTS = [64, 1024]
CPU_BATCHES = [1, 4]


def main(argv: list[str]) -> int:
    cpu = os.environ.get("KVCALC_GPU_CHECK_CPU") == "1"
    budget_s = float(os.environ.get("KVCALC_GPU_CHECK_BUDGET_S", "420"))
    out_dir = Path(argv[0]) if argv else None
    import torch

    from kvcalc import measure as M

    device = "cpu" if cpu else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        print("gpu_check: torch sees no CUDA GPU; KVCALC_GPU_CHECK_CPU=1 runs the CPU smoke mode", file=sys.stderr)
        return 2
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    models, contexts, batches = (CPU_MODELS, CPU_CONTEXTS, CPU_BATCHES) if cpu else (GPU_MODELS, GPU_CONTEXTS, GPU_BATCHES)
    steps = 2 if cpu else 30
    head = (f"kvcalc gpu_check: {name}, torch {torch.__version__}, "
            f"PYTORCH_CUDA_ALLOC_CONF={os.environ.get('PYTORCH_CUDA_ALLOC_CONF', '')}, "
            f"{datetime.datetime.now().isoformat(timespec='seconds')}")
    cols = ["model", "mode", "layers", "T", "B", "KV GiB", "bytes equal", "median ms", "p10-p90 ms", "GB/s",
            "% probe", "% table", "err % (probe)", "err % (table)", "probe GB/s"]
    rows: list[list[str]] = []
    notes: list[str] = []
    t0 = time.monotonic()
    fmt = kv_format("bf16")
    over = False
    for model_name, layers in models:
        try:
            spec = load_model(model_name)
        except KvcalcError as e:
            notes.append(f"skip {model_name}: {e}")
            continue
        for T in contexts:
            for B in batches:
                if time.monotonic() - t0 > budget_s:
                    if not over:
                        notes.append(f"budget {budget_s:.0f} s reached: skipped {model_name} T={T} B={B} and after")
                    over = True
                    continue
                plan = M.make_plan(spec, T, B, fmt, fmt, device, layers)
                free = M.free_memory_bytes(device) or 0
                if plan.needed_bytes > 0.85 * free:
                    notes.append(f"skip {spec.name} T={T} B={B}: needs {plan.needed_bytes / GIB:.1f} GiB, "
                                 f"{free / GIB:.1f} GiB free")
                    continue
                for graph in ([False] if cpu else [False, True]):
                    try:
                        r = M.run(spec, T, B, fmt, fmt, device=device, layers=layers, steps=steps, cuda_graph=graph)
                    except KvcalcError as e:
                        notes.append(f"skip {spec.name} T={T} B={B}: {e}")
                        continue
                    rows.append(_row(r, T, "graph" if graph else "eager"))
                    if rows[-1][6] != "yes":
                        notes.append(f"{spec.name} T={T} B={B}: storage {r.measured_kv_bytes}, requested "
                                     f"{r.allocator_requested_delta_bytes}, allocated {r.allocator_allocated_delta_bytes} "
                                     f"(expected {r.allocator_allocated_expected_bytes}) vs predicted {r.predicted_kv_bytes}")
                    print(" | ".join(rows[-1]), file=sys.stderr, flush=True)
    widths = [max(len(c), *(len(r[i]) for r in rows)) if rows else len(c) for i, c in enumerate(cols)]
    lines = [head, "KV bf16, backend sdpa; mode eager = one Python step per token, graph = one step captured "
             "in a CUDA graph and replayed; bytes equal = tensor storage == allocator requested == engine "
             "prediction, and memory_allocated == tensors rounded to 512 B; err % = 100 x (predicted - "
             "measured) / measured, predicted = bytes read / bandwidth (probe: measured in the same run; "
             "table: kvcalc/data/gpus.yaml)", ""]
    lines.append("  ".join(c.rjust(w) for c, w in zip(cols, widths)))
    lines += ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in rows]
    lines += [""] + [f"note: {n}" for n in notes] + [f"elapsed {time.monotonic() - t0:.0f} s"]
    text = "\n".join(lines)
    print(text)
    if out_dir is not None:
        out_dir.mkdir(parents=True, exist_ok=True)
        slug = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
        path = out_dir / f"{slug}-{datetime.date.today().isoformat()}.txt"
        path.write_text(text + "\n")
        print(f"wrote {path}")
    return 0 if rows and all(r[6] == "yes" for r in rows) else 1


def _row(r, T: int, mode: str) -> list[str]:
    """One table row from a MeasureResult."""
    eq = r.measured_kv_bytes == r.predicted_kv_bytes and (
        r.allocator_requested_delta_bytes in (None, r.predicted_kv_bytes)) and (
        r.allocator_allocated_delta_bytes == r.allocator_allocated_expected_bytes)
    return [r.model, mode, f"{r.layers_measured}/{r.n_layers}", f"{T // 1024}k" if T >= 1024 else str(T),
            str(r.batch), f"{r.predicted_kv_bytes / GIB:.3f}", "yes" if eq else "NO",
            f"{r.measured_step_s_median * 1e3:.3f}",
            f"{r.measured_step_s_p10 * 1e3:.3f}-{r.measured_step_s_p90 * 1e3:.3f}",
            f"{r.achieved_bytes_per_s / 1e9:.0f}", f"{100 * r.fraction_of_probe:.1f}",
            "n/a" if r.fraction_of_table is None else f"{100 * r.fraction_of_table:.1f}",
            f"{r.error_percent:+.1f}",
            "n/a" if r.error_percent_table is None else f"{r.error_percent_table:+.1f}",
            f"{r.probe_bytes_per_s / 1e9:.0f}"]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
