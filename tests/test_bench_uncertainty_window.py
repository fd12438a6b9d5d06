"""experiments/bench_uncertainty.py's window figures, run as a user runs it (nothing imports
experiments): active jobs when the measured window starts and over it, and CPU per round before
and in it (what a steady-state window is chosen and costed from)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_a_gavel_run_reports_active_jobs_and_cpu_per_round_around_its_window() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, str(ROOT / "experiments" / "bench_uncertainty.py"), "--settings",
         "gavel-2.0", "--window", "2", "4", "--seeds", "0", "--sources", "table", "--json"],
        capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    run = json.loads(done.stdout)["runs"][0]
    assert run["jobs"] == run["finished"] == 2
    # Job 2 has just arrived: at least it is active, and at most the three jobs arrived.
    assert 1 <= run["active_at_window"] <= 3
    assert run["active_window_mean"] >= 1
    assert run["cpu_ms_per_round_before"] > 0 and run["cpu_ms_per_round_window"] > 0
    assert all(math.isfinite(run[k]) for k in ("cpu_ms_per_round_before",
                                               "cpu_ms_per_round_window"))
