#!/usr/bin/env bash
# Set up (if needed) and run the whole test suite plus the linter.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/bayes-sched ] || bash scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/python -m pytest -q "$@"
