#!/usr/bin/env bash
# Create .venv and install bayes-sched with everything the test suite needs (".[test]": the
# collector, the models, Ray core for the Ray backend and the test tools), with the CPU build of PyTorch pinned by
# constraints.txt. pip prints each package as it is collected and installed, so a first set-up
# (a few minutes, mostly torch) shows progress instead of silence.
set -euo pipefail
cd "$(dirname "$0")/.."
stage() { printf '\n==> setup.sh [%s] %s\n' "$(date +%H:%M:%S)" "$*"; }
stage "1/2 creating .venv with $(python3 --version)"
python3 -m venv .venv
stage "2/2 installing bayes-sched[test] (collector, models, Ray, test tools; torch pinned by constraints.txt)"
.venv/bin/python -m pip install --progress-bar off -c constraints.txt -e ".[test]"
stage "done: $(.venv/bin/bayes-sched --version)"
