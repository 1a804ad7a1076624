#!/usr/bin/env bash
# Install llama-cpp-python 0.3.36 FROM SOURCE into the active virtual environment, for the
# llama.cpp oracle tests (tests/oracle/, `pytest -m oracle tests/oracle`).
#
# Usage:  . .venv/bin/activate && bash tools/install_llama_cpp_oracle.sh [SDIST]
#   SDIST  optional path to llama_cpp_python-0.3.36.tar.gz (otherwise pip fetches the sdist).
#
# The CMake flags keep the build to the llama/ggml shared libraries: no tests, examples, tools,
# server, web UI, mtmd/llava, curl/openssl; CPU backend only; GGML_NATIVE=OFF so the library runs
# on any x86-64 the tests move to. Option names are those of the vendored llama.cpp
# (vendor/llama.cpp/CMakeLists.txt: LLAMA_BUILD_TESTS/TOOLS/EXAMPLES/SERVER/APP, LLAMA_OPENSSL;
# ggml/CMakeLists.txt: GGML_NATIVE, GGML_OPENMP) and of llama-cpp-python's own CMakeLists.txt
# (LLAVA_BUILD). About 17-30 minutes on 2 cores.
set -euo pipefail

VERSION=0.3.36
if [[ -z "${VIRTUAL_ENV:-}" ]]; then
    echo "install_llama_cpp_oracle.sh: no active virtual environment; run '. .venv/bin/activate' first" >&2
    exit 2
fi
SOURCE="llama-cpp-python==${VERSION}"
if [[ $# -ge 1 ]]; then
    if [[ ! -f "$1" ]]; then
        echo "install_llama_cpp_oracle.sh: sdist not found: $1" >&2
        exit 2
    fi
    SOURCE="$1"
fi

export CMAKE_ARGS="\
 -DLLAVA_BUILD=OFF\
 -DLLAMA_BUILD_TESTS=OFF\
 -DLLAMA_BUILD_EXAMPLES=OFF\
 -DLLAMA_BUILD_TOOLS=OFF\
 -DLLAMA_BUILD_SERVER=OFF\
 -DLLAMA_BUILD_APP=OFF\
 -DLLAMA_BUILD_UI=OFF\
 -DLLAMA_BUILD_MTMD=OFF\
 -DLLAMA_CURL=OFF\
 -DLLAMA_OPENSSL=OFF\
 -DGGML_NATIVE=OFF\
 -DGGML_OPENMP=OFF\
 -DGGML_BLAS=OFF\
 -DGGML_CUDA=OFF\
 -DGGML_VULKAN=OFF\
 -DGGML_METAL=OFF\
 -DGGML_RPC=OFF\
 -DCMAKE_BUILD_TYPE=Release"
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}"
export FORCE_CMAKE=1

echo "installing ${SOURCE} into ${VIRTUAL_ENV}"
echo "CMAKE_ARGS=${CMAKE_ARGS}"
python -m pip install --verbose --no-binary llama-cpp-python "${SOURCE}"
python - <<'PY'
import llama_cpp
print("llama_cpp", llama_cpp.__version__, "imported from", llama_cpp.__file__)
PY
