#!/usr/bin/env bash
# Lint, format check and type check, as CI runs them (.ci/run); the tools come with
# `pip install -e '.[dev]'` (ruff and mypy, pinned in pyproject.toml, which holds their rules).
#
#   bash tools/lint.sh         ruff check, ruff format --check, mypy kvcalc: exit non-zero on any finding
#   bash tools/lint.sh --fix   ruff check --fix and ruff format over the whole tree, then the check
#
# tools/format-baseline.txt lists the files that predate the formatter: `ruff format --check`
# skips them until `--fix` formats the tree once (it deletes the list). New files are checked.
set -euo pipefail
cd "$(dirname "$0")/.."
paths=(kvcalc tests benchmarks tools)
baseline=tools/format-baseline.txt

if [[ "${1:-}" == "--fix" ]]; then
    ruff check --fix "${paths[@]}"
    ruff format "${paths[@]}"
    rm -f "$baseline"
    echo "lint.sh --fix: the tree is formatted; $baseline removed (every file is checked from now on)"
elif [[ $# -gt 0 ]]; then
    echo "usage: bash tools/lint.sh [--fix]" >&2
    exit 2
fi

ruff check "${paths[@]}"
files=()
while IFS= read -r f; do files+=("$f"); done < <(
    find "${paths[@]}" -name '*.py' -not -path '*/__pycache__/*' | sort |
        if [[ -f $baseline ]]; then grep -vxF -f <(grep -v '^#' "$baseline"); else cat; fi)
if [[ ${#files[@]} -gt 0 ]]; then ruff format --check "${files[@]}"; fi
mypy kvcalc
