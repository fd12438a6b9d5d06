#!/usr/bin/env bash
# Set up (if needed) and run the main job on the data the package ships.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/bayes-sched ] || bash scripts/setup.sh
.venv/bin/bayes-sched demo --out "${1:-report}"
