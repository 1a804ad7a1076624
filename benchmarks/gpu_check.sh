#!/usr/bin/env bash
# kvcalc on a lent GPU (issue 21): the CUDA-only tests, `kvcalc measure` on a GQA, an MLA and a
# sliding-window model, the calibration file (`measure --calibrate`), estimate / sweep / plan with
# `--calibration`, and the measure sweep; one short table at the end. docs/benchmarks.md has how
# to run it on the device machine.
#
# usage:  benchmarks/gpu_check.sh [--dry-run] [--out DIR] [DIR]
#   --dry-run   the same steps on the CPU with small sizes (proves this script without a GPU)
#   DIR         where the outputs go: --out DIR, else $OUT when set, else benchmarks/results/
#   PYTHON=...  the interpreter (default: python3 on PATH, the one that holds torch on the GPU
#               box; never the repo's .venv, whose torch is a CPU build made on another machine)
#   KVCALC_GPU_KEY=h200   the GPU table key, when the device name does not say it
#
# Needs, and installs nothing from a network: a Python >= 3.10 with torch (CUDA build for a
# real run), pyyaml, rich, typer >= 0.12, pydantic >= 2.6 and psutil. kvcalc runs from this
# checkout (PYTHONPATH), not installed. Packages that are missing are taken from wheels in .whl/
# at the repo root (or KVCALC_GPU_CHECK_WHEELS) when they are there (benchmarks/gpu_wheels.sh downloads them on a machine with
# pip's index; carry .whl to the GPU box): installed with --no-index into a temporary folder.
# Anything still missing stops the script at once, with one line naming it (exit 2).
# Budget: 360 s for every step together (benchmarks/gpu_check_run.py), well under 8 minutes.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
PY=${PYTHON:-python3}
DRY=0
for a in "$@"; do [ "$a" = --dry-run ] && DRY=1; done

if ! command -v "$PY" >/dev/null 2>&1; then
  echo "gpu_check: no '$PY' on PATH; set PYTHON=/path/to/python3 (one with torch)" >&2
  exit 2
fi
echo "gpu_check: $("$PY" -c 'import sys; print(sys.executable, sys.version.split()[0])')" >&2

# what kvcalc needs, each as (module, distribution, lowest version); prints the missing ones
missing() {
  "$PY" - <<'EOF'
import importlib, importlib.metadata as md, sys
need = [("torch", "torch", "2.4"), ("yaml", "PyYAML", "6"), ("rich", "rich", "13"), ("typer", "typer", "0.12"),
        ("pydantic", "pydantic", "2.6"), ("psutil", "psutil", "5.9")]
def tup(v):
    out = []
    for p in v.split("+")[0].split(".")[:3]:
        digits = "".join(c for c in p if c.isdigit())
        out.append(int(digits or 0))
    return tuple(out)
bad = []
for mod, dist, low in need:
    try:
        importlib.import_module(mod)
        v = md.version(dist)
    except Exception as e:  # absent, or present and broken (a torch without its CUDA libraries)
        bad.append(f"{dist} (import {mod}: {type(e).__name__})")
        continue
    if tup(v) < tup(low):
        bad.append(f"{dist} {v} (needs >= {low})")
print("; ".join(bad))
EOF
}

WHEELS=${KVCALC_GPU_CHECK_WHEELS:-.whl}
MISSING=$(missing)
if [ -n "$MISSING" ] && ls "$WHEELS"/*.whl >/dev/null 2>&1; then
  SITE=${TMPDIR:-/tmp}/kvcalc-gpu-check-site
  echo "gpu_check: missing here: $MISSING; installing the wheels in $WHEELS/ into $SITE (no network)" >&2
  if ! "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" \
      "$WHEELS"/*.whl >&2; then
    echo "gpu_check: the wheels in $WHEELS/ did not install with $PY (made for another Python? see" \
      "benchmarks/gpu_wheels.sh, PY_VERSION)" >&2
    exit 2
  fi
  export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
  MISSING=$(missing)
fi
if [ -n "$MISSING" ]; then
  echo "gpu_check: $PY lacks: $MISSING. Torch must be the machine's own; for the rest run" \
    "benchmarks/gpu_wheels.sh where pip can download, and carry $WHEELS/ here" >&2
  exit 2
fi
# kvcalc from this checkout, ahead of any installed copy; the spawned all-reduce ranks inherit it
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
if ! err=$("$PY" -m kvcalc --help 2>&1 >/dev/null); then
  echo "gpu_check: 'python -m kvcalc' does not start from $ROOT: $(echo "$err" | tail -1)" >&2
  exit 2
fi
if [ "$DRY" = 0 ]; then
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version \
    --format=csv,noheader >&2 || echo "gpu_check: no nvidia-smi (torch decides whether CUDA is there)" >&2
fi
# exact memory_allocated deltas need expandable segments, set before CUDA starts
export PYTORCH_CUDA_ALLOC_CONF=${PYTORCH_CUDA_ALLOC_CONF:-expandable_segments:True}
export PYTHONUNBUFFERED=1
exec "$PY" benchmarks/gpu_check_run.py "$@"
