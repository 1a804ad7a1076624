#!/usr/bin/env bash
# Lint, format check and type check, as CI runs them (.ci/run); the tools come with
# `pip install -e '.[dev]'` (ruff and mypy, pinned in pyproject.toml, which holds their rules).
#
#   bash tools/lint.sh         ruff check, ruff format --check, mypy kvcalc: exit non-zero on any finding
#   bash tools/lint.sh --fix   ruff check --fix and ruff format over the whole tree, then the check
set -euo pipefail
cd "$(dirname "$0")/.."
paths=(kvcalc tests benchmarks tools)

if [[ "${1:-}" == "--fix" ]]; then
    ruff check --fix "${paths[@]}"
    ruff format "${paths[@]}"
elif [[ $# -gt 0 ]]; then
    echo "usage: bash tools/lint.sh [--fix]" >&2
    exit 2
fi

ruff check "${paths[@]}"
ruff format --check "${paths[@]}"
mypy kvcalc
