#!/usr/bin/env bash
# Wheels of kvcalc's own packages for a GPU box with no network (benchmarks/gpu_check.sh installs
# them from .whl/ with --no-index when its Python lacks them). Run here, where pip can download;
# then carry .whl (it is git-ignored). Torch is never among them: the GPU box's own CUDA build
# is used. The versions are this repo's tested ones (the .venv of 2026-12-02); the platform is
# the device machine's (x86-64 Linux, CPython 3.12; PY_VERSION=3.11 etc. for another).
#
# usage:  benchmarks/gpu_wheels.sh        -> .whl/*.whl (about 3 MB)
set -euo pipefail
cd "$(dirname "$0")/.."
PYV=${PY_VERSION:-3.12}
rm -rf .whl && mkdir .whl
# pydantic and its compiled core, its two small helpers, and typer (the box's own may be older than 0.12)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version "$PYV" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d .whl pydantic==2.14.4 pydantic_core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 \
  typing-extensions==4.16.0 typer==0.29.2 click==8.5.1 shellingham==1.5.4 annotated-doc==0.0.7
ls -la .whl
