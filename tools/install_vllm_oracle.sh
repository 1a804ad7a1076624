#!/usr/bin/env bash
# Install vLLM's Python code into a venv of its own, for the vLLM oracle (tests/oracle/test_vllm_oracle.py).
#
#   tools/install_vllm_oracle.sh VERSION [VENV]
#   e.g. tools/install_vllm_oracle.sh 0.33.0      (venv: /work/oracle/venv-vllm-0.33.0)
#        tools/install_vllm_oracle.sh 0.11.0 /tmp/venv-vllm-0.11
#
# Then run the oracle with that venv's python, from the repository root:
#   VENV/bin/python -m pytest tests/oracle/test_vllm_oracle.py -m oracle -q
#
# What it installs, and why (nothing here touches kvcalc's own venv):
# - the CPU build of torch (torch==2.13.0, found locally; a bare `torch` would pull the CUDA build),
# - vllm==VERSION with --no-deps (its compiled extensions need a CUDA torch and are never loaded:
#   the oracle drives only vLLM's KV-cache sizing code, vllm/v1/core/kv_cache_utils.py and
#   vllm/v1/kv_cache_interface.py, with the few imports stubbed there, in tests/oracle/vllm_harness.py),
# - the pure-Python packages that code path imports (found by importing it and adding what failed),
# - kvcalc itself, editable from this repository, and pytest.
set -euo pipefail

VERSION="${1:?usage: tools/install_vllm_oracle.sh VERSION [VENV]  (VERSION: 0.33.0 or 0.11.0)}"
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
# What `import vllm.v1.core.kv_cache_utils` (and the config classes it pulls) needs beyond torch.
"${PIP[@]}" \
    "pydantic>=2.10" "typing_extensions>=4.10" cachetools msgspec cloudpickle psutil pyzmq \
    "transformers>=4.56,<5" sentencepiece tokenizers regex pyyaml requests tqdm numpy \
    prometheus_client prometheus-fastapi-instrumentator fastapi openai "huggingface_hub" \
    blake3 cbor2 pybase64 py-cpuinfo packaging filelock einops partial-json-parser \
    diskcache gguf protobuf pillow setproctitle

"${PIP[@]}" pytest hypothesis
"${PIP[@]}" -e "$REPO"

"$VENV/bin/python" - <<'EOF'
import sys
sys.path.insert(0, "tests/oracle")
EOF
echo "installed vllm $VERSION into $VENV"
"$VENV/bin/python" -c "import importlib.metadata as m; print('vllm', m.version('vllm'), 'torch', m.version('torch'))"
