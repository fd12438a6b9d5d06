#!/usr/bin/env bash
# Set up (if needed) and run the linter, the type checker, the import contracts (pyproject.toml's
# [tool.importlinter]) and the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
{ [ -x .venv/bin/bayes-sched ] && [ -x .venv/bin/mypy ] && [ -x .venv/bin/ray ] \
  && [ -x .venv/bin/lint-imports ] \
  && .venv/bin/python -c "import xdist, pytest_timeout, psutil, material, mkdocstrings_handlers.python" \
  2>/dev/null; } || bash scripts/setup.sh
# The numba loops, compiled into their on-disk cache while the checks below run (a minute of
# CPU after an install or a change to their source, a few seconds otherwise), so that the test
# workers load them instead of each compiling them at once.
.venv/bin/python -m bayes_sched.precompile &
precompile=$!
.venv/bin/ruff check .
.venv/bin/mypy
.venv/bin/lint-imports
# The documentation site, warnings as errors (a few seconds; not --quiet, which hides the
# warnings that --strict counts); the site goes to an ignored folder.
NO_MKDOCS_2_WARNING=1 .venv/bin/python -m mkdocs build --strict --site-dir .site
wait "$precompile"
# Test files run in parallel, one worker per core up to 4 (a file's fixtures are built once).
.venv/bin/python -m pytest -q -n auto --maxprocesses=4 --dist loadfile --durations=15 "$@"
