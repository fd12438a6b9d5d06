#!/usr/bin/env bash
# Create .venv and install bayes-sched with the CPU build of PyTorch pinned by constraints.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install -q -c constraints.txt -e ".[test]"
