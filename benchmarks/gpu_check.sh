#!/usr/bin/env bash
# kvcalc measure on a lent GPU: a calibration file (issue 21) and a sweep over bundled models (llama-3.1-8b, qwen3-4b, and
# llama-3.1-70b at --layers 8), contexts 1k..128k and batches 1..64, skipping points that do
# not fit; prints one compact table (predicted against measured bytes and step time).
#
# usage:  benchmarks/gpu_check.sh [RESULTS_DIR]     e.g. benchmarks/gpu_check.sh benchmarks/results
#   writes RESULTS_DIR/<gpu>-<date>.txt when a folder is given.
#   KVCALC_GPU_CHECK_CPU=1   CPU smoke mode (tiny model, short contexts) to test this script anywhere.
#
# Installs nothing; assumes the repo is checked out (run from anywhere) and torch is installed.
# Budget: the sweep stops starting points after 330 s and is killed at 360 s; the calibration
# (kvcalc measure --calibrate, then estimate with and without it) has 120 s more: under 8 minutes.
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
# the sweep gets 6 minutes (it stops starting points at KVCALC_GPU_CHECK_BUDGET_S), the
# calibration (issue 21: per-step floor, read bandwidth, FLOP/s, all-reduce over the visible
# GPUs) at most 2 more; the calibration file lands beside the results (or in /tmp)
export KVCALC_GPU_CHECK_BUDGET_S=${KVCALC_GPU_CHECK_BUDGET_S:-330}
status=0
timeout 360 "$PY" benchmarks/gpu_check.py "$@" || status=$?
OUT_DIR=${1:-/tmp}
if [ "${KVCALC_GPU_CHECK_CPU:-0}" = 1 ]; then
  KEY=${KVCALC_GPU_KEY:-h100-sxm}; DEV=cpu; LAYERS="--layers 2"
else
  # the GPU table key of device 0: KVCALC_GPU_KEY, else from the name nvidia-smi prints
  NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 || true)
  case "$NAME" in
    *H200*) KEY=h200 ;; *"H100 80GB HBM3"*|*"H100 SXM"*) KEY=h100-sxm ;; *"H100 PCIe"*) KEY=h100-pcie ;;
    *"H100 NVL"*) KEY=h100-nvl ;; *"A100-SXM4-80GB"*|*"A100 80GB"*) KEY=a100-80gb-sxm ;; *B200*) KEY=b200 ;;
    *L40S*) KEY=l40s ;; *"RTX 4090"*) KEY=rtx-4090 ;; *) KEY=${KVCALC_GPU_KEY:-} ;;
  esac
  KEY=${KVCALC_GPU_KEY:-$KEY}; DEV=cuda; LAYERS=""
fi
if [ -z "$KEY" ]; then
  echo "gpu_check: no GPU table key for '$NAME': set KVCALC_GPU_KEY (see kvcalc gpus); calibration skipped" >&2
  exit $(( status ? status : 2 ))
fi
CAL="$OUT_DIR/calibration-$KEY-$(date -u +%Y%m%d-%H%M%S).yaml"
timeout 120 "$PY" -m kvcalc measure llama-3.1-8b --calibrate "$CAL" --gpu "$KEY" --device "$DEV" $LAYERS || status=$?
if [ -f "$CAL" ]; then
  echo "--- $CAL"; cat "$CAL"
  # the calibrated speed model beside the table's, for one workload
  "$PY" -m kvcalc estimate llama-3.1-8b --gpu "$KEY" --engine vllm --input-len 1024 --output-len 128 --format json \
    | "$PY" -c "import json,sys; d=json.load(sys.stdin); print('table:     ', d['speed_model'], '| TPOT', round(d['tpot_s']*1e3, 3), 'ms')"
  "$PY" -m kvcalc estimate llama-3.1-8b --gpu "$KEY" --engine vllm --input-len 1024 --output-len 128 --calibration "$CAL" --format json \
    | "$PY" -c "import json,sys; d=json.load(sys.stdin); print('calibrated:', d['speed_model'], '| TPOT', round(d['tpot_s']*1e3, 3), 'ms')"
fi
exit $status
