#!/usr/bin/env bash
# Set up (if needed) and run the linter, the type checker and the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
{ [ -x .venv/bin/bayes-sched ] && [ -x .venv/bin/mypy ] && [ -x .venv/bin/ray ]; } || bash scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/mypy
.venv/bin/python -m pytest -q --durations=15 "$@"
