#!/usr/bin/env bash
# Install vLLM's Python code into a venv of its own, for the vLLM oracle (tests/oracle/test_vllm_oracle.py).
#
#   tools/install_vllm_oracle.sh VERSION [VENV]
#   e.g. tools/install_vllm_oracle.sh 0.33.0      (venv: /work/oracle/venv-vllm-0.33.0)
#        tools/install_vllm_oracle.sh 0.11.0 /tmp/venv-vllm-0.11
#        tools/install_vllm_oracle.sh 0.6.6.post1    (the V0 engine: tests/oracle/vllm06_harness.py)
#
# Then, from the repository root:
#   VENV/bin/python -m pytest tests/oracle/test_vllm_oracle.py -q     (the oracle as tests)
#   VENV/bin/python tests/oracle/vllm_harness.py                      (the same run as a summary)
#
# What it installs, and why (nothing here touches kvcalc's own venv):
# - the CPU build of torch (torch==2.13.0, found locally; a bare `torch` would pull the CUDA build),
# - vllm==VERSION with --no-deps (from /work/oracle/wheels when there, else PyPI): its compiled
#   extensions need a CUDA torch and are never loaded; the oracle drives only vLLM's KV cache
#   sizing code (vllm/v1/core/kv_cache_utils.py, kv_cache_planning.py, vllm/v1/kv_cache_interface.py)
#   on vLLM's own CPU platform (tests/oracle/vllm_harness.py says what it builds itself),
# - the Python packages that code path imports, found by importing it and adding what failed,
# - kvcalc itself, editable from this repository, and pytest.
# About 3 GiB and a few minutes; it needs PyPI (or the local package index) for the packages.
set -euo pipefail

VERSION="${1:?usage: tools/install_vllm_oracle.sh VERSION [VENV]  (VERSION: 0.33.0, 0.11.0 or 0.6.6.post1)}"
VENV="${2:-/work/oracle/venv-vllm-${VERSION}}"
REPO="$(cd "$(dirname "$0")/.." && pwd)"
PYTHON="${PYTHON:-python3.11}"
WHEELS="${VLLM_WHEELS:-/work/oracle/wheels}"

if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
PIP=("$VENV/bin/python" -m pip install --quiet)

"${PIP[@]}" torch==2.13.0
wheel="$(ls "$WHEELS"/vllm-"$VERSION"-*.whl 2>/dev/null | head -n 1 || true)"
if [ -n "$wheel" ]; then
    "${PIP[@]}" --no-deps "$wheel"
else
    "${PIP[@]}" --no-deps "vllm==$VERSION"
fi

# What `import vllm.v1.core.kv_cache_utils` / `kv_cache_planning` and `VllmConfig()` on vLLM's
# CPU platform import beyond torch; transformers in the range each vLLM requires. Each comes with
# its own dependencies, never vllm's: a plain `pip install vllm` would pull the CUDA torch.
COMMON=(packaging pydantic regex numpy cbor2 psutil pyzmq urllib3 requests aiohttp openai openai-harmony pillow
        pybase64 cachetools msgspec cloudpickle uvloop py-cpuinfo prometheus_client fastapi partial-json-parser
        einops blake3 sentencepiece tokenizers protobuf pyyaml filelock tqdm setproctitle diskcache)
case "$VERSION" in
    0.6.*) EXTRA=("transformers>=4.45.2,<4.48" "numpy<2" "gguf==0.10.0" tiktoken py-cpuinfo importlib_metadata
                "mistral_common>=1.5.0" opencv-python-headless) ;;
    0.11.*) EXTRA=("transformers>=4.56,<5") ;;
    *) EXTRA=("transformers>=5.16.1,<5.21" xgrammar llguidance) ;;
esac
"${PIP[@]}" "${COMMON[@]}" "${EXTRA[@]}"
# The hybrid models' files (their `get_mamba_state_shape_from_config`), pinned as each vLLM's
# metadata pins them, without their dependencies: 0.11's nemotron_h.py imports gguf, 0.33's
# qwen3_next.py compressed_tensors (and loguru through it).
case "$VERSION" in
    0.6.*) ;;
    0.11.*) "${PIP[@]}" --no-deps "gguf>=0.13.0" ;;
    *) "${PIP[@]}" --no-deps "compressed-tensors==0.17.0" loguru ;;
esac

"${PIP[@]}" pytest
"${PIP[@]}" -e "$REPO"

# The CUDA build of torch must not have come in with any of them.
"$VENV/bin/python" -c "import sys, torch; sys.exit(0 if torch.__version__.endswith('+cpu') else 'torch ' + torch.__version__ + ' is not the CPU build')"
# vLLM's sizing code must import (the harness names vLLM's CPU platform itself where 0.11 cannot infer it).
case "$VERSION" in
    0.6.*) HARNESS=vllm06_harness ;;
    *) HARNESS=vllm_harness ;;
esac
(cd "$REPO" && "$VENV/bin/python" -c "import sys; sys.path.insert(0, 'tests/oracle'); import $HARNESS as h; print('vllm', h.VLLM_VERSION, 'imports')")
echo "installed vllm $VERSION into $VENV"
