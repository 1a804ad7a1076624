#!/usr/bin/env bash
# kvcalc measure on a lent GPU: a sweep over bundled models (llama-3.1-8b, qwen3-4b, and
# llama-3.1-70b at --layers 8), contexts 1k..128k and batches 1..64, skipping points that do
# not fit; prints one compact table (predicted against measured bytes and step time).
#
# usage:  benchmarks/gpu_check.sh [RESULTS_DIR]     e.g. benchmarks/gpu_check.sh benchmarks/results
#   writes RESULTS_DIR/<gpu>-<date>.txt when a folder is given.
#   KVCALC_GPU_CHECK_CPU=1   CPU smoke mode (tiny model, short contexts) to test this script anywhere.
#
# Installs nothing; assumes the repo is checked out (run from anywhere) and torch is installed.
# Budget: the sweep stops starting points after 420 s, and the whole run is killed at 480 s.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

if ! "$PY" -c "import torch" 2>/dev/null; then
  echo "gpu_check: torch is not installed here (pip install 'kvcalc[measure]'); nothing measured" >&2
  exit 2
fi
if ! "$PY" -m kvcalc --help >/dev/null 2>&1; then
  echo "gpu_check: 'python -m kvcalc' does not run from $(pwd); check the checkout" >&2
  exit 2
fi
if [ "${KVCALC_GPU_CHECK_CPU:-0}" != 1 ]; then
  if ! "$PY" -c "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"; then
    echo "gpu_check: torch sees no CUDA GPU; KVCALC_GPU_CHECK_CPU=1 runs the CPU smoke mode" >&2
    exit 2
  fi
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv,noheader || true
fi
# exact memory_allocated deltas need expandable segments, set before CUDA starts
export PYTORCH_CUDA_ALLOC_CONF=${PYTORCH_CUDA_ALLOC_CONF:-expandable_segments:True}
exec timeout 480 "$PY" benchmarks/gpu_check.py "$@"
