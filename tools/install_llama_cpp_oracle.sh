#!/usr/bin/env bash
# Install llama-cpp-python FROM SOURCE into the active virtual environment, for the llama.cpp
# oracle tests (tests/oracle/, `pytest -m oracle tests/oracle`).
#
# Usage:  . VENV/bin/activate && bash tools/install_llama_cpp_oracle.sh [VERSION] [SDIST]
#   VERSION  0.3.36 (default): llama.cpp "current" (kvcalc --llamacpp-version current);
#            0.3.8 (March 2025): a llama.cpp from before the MLA latent cache (PR #12801,
#            April 2025) that prints "KV self size" (kvcalc --llamacpp-version legacy).
#            Give each its own venv (e.g. /work/oracle/venv-llama-legacy for 0.3.8).
#   SDIST    optional path to llama_cpp_python-VERSION.tar.gz (otherwise pip fetches the sdist).
#
# The CMake flags keep the build to the llama/ggml shared libraries: no tests, examples, tools,
# server, web UI, mtmd/llava, curl/openssl; CPU backend only; GGML_NATIVE=OFF so the library runs
# on any x86-64 the tests move to. Option names are those of the vendored llama.cpp
# (vendor/llama.cpp/CMakeLists.txt: LLAMA_BUILD_TESTS/TOOLS/EXAMPLES/SERVER/APP, LLAMA_OPENSSL;
# ggml/CMakeLists.txt: GGML_NATIVE, GGML_OPENMP) and of llama-cpp-python's own CMakeLists.txt
# (LLAVA_BUILD). About 17-30 minutes on 2 cores. 0.3.8's vendored llama.cpp knows only
# LLAMA_BUILD_TESTS/EXAMPLES/SERVER of the LLAMA_BUILD_* options (CMake ignores the others with a
# warning) and llama-cpp-python forces LLAMA_BUILD_COMMON on; the GGML_* names are the same.
set -euo pipefail

VERSION=0.3.36
if [[ $# -ge 1 && "$1" != *.tar.gz ]]; then
    VERSION="$1"
    shift
fi
case "$VERSION" in
    0.3.36|0.3.8) ;;
    *) echo "install_llama_cpp_oracle.sh: version $VERSION is not one the oracle knows (0.3.36, 0.3.8)" >&2
       exit 2 ;;
esac
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
