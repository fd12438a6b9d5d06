"""experiments/bench_sim_speed.py's parts 3 and 4 (continuous Gavel runs, the solver floor), run as
a user runs it (nothing imports experiments): a complete run reports its window's average JCT
and the options it ran with; every program the policy solves is timed and solved again by the
other open solver; a bad policy option is one line naming the flag."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = [sys.executable, str(ROOT / "experiments" / "bench_sim_speed.py"), "--skip-workload",
         "--skip-scale", "--gavel-runs"]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([*BENCH, *args], capture_output=True, text=True, env=env, timeout=300)


def test_a_budgeted_run_times_its_own_solves_and_the_fastest_solver_of_each_program() -> None:
    done = _run("--gavel-policies", "min_total_duration_packed", "max_min_fairness",
                "--solver-floor", "--gavel-jobs", "20", "--gavel-cpu-budget", "2", "--json")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    # Only the policies whose module hands programs to solve_program are run in part 4.
    assert [row["policy"] for row in rows] == ["min_total_duration_packed"]
    row = rows[0]
    assert row["programs"] > 0 and row["rounds"] > 0
    # Two LPs per recompute, at most one recompute per round.
    assert row["programs"] <= 2 * row["rounds"]
    assert 0 < row["fastest_solver_s"] <= row["own_solver_s"] <= row["cpu_s"] + 0.1
    assert row["floor_over_5_min"] is False


def test_a_bad_policy_option_is_one_line_naming_the_flag_before_any_run() -> None:
    done = _run("--gavel-policies", "min_total_duration_packed", "--policy-opt", "bogus=1")
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert "--policy-opt" in last and "'bogus'" in last and "solver" in last


def test_arrivals_stop_at_n_jobs_and_the_watch_shows_the_jobs_left() -> None:
    """``--gavel-arrivals stop`` is Gavel's ``num_total_jobs``: exactly N jobs arrive and the run
    ends when all have finished (with arrivals continuing, more than N arrive meanwhile);
    ``--gavel-watch`` prints the run's state every N rounds."""
    args = ("--gavel-policies", "max_sum_throughput_perf", "--gavel-jobs", "60", "--json")
    stop = _run(*args, "--gavel-arrivals", "stop", "--gavel-watch", "100")
    assert stop.returncode == 0, stop.stderr
    (row,) = json.loads(stop.stdout)
    assert (row["arrived"], row["finished"], row["active"], row["run"]) == (60, 60, 0, "complete")
    lines = [line for line in stop.stderr.splitlines() if line.startswith("max_sum")]
    assert len(lines) == row["rounds"] // 100
    assert " 60 arrived, " in lines[-1] and "of the window left" in lines[-1]
    (going_on,) = json.loads(_run(*args).stdout)
    assert going_on["finished"] == 60 and going_on["arrived"] > 60


def test_a_complete_run_reports_the_windows_average_jct_and_a_stopped_one_does_not() -> None:
    done = _run("--gavel-policies", "max_min_fairness_packed", "--gavel-jobs", "12",
                "--gavel-arrivals", "stop", "--gavel-cpu-budget", "120", "--policy-opt",
                "partitions=2", "--json")
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(done.stdout)
    assert row["run"] == "complete" and row["finished"] == row["arrived"] == 12
    assert row["options"] == "partitions=2"
    # A mean of the jobs' completion less submission times: each positive and within the run.
    assert 0 < row["avg_jct_h"] <= row["sim_hours"]
    # Slowdowns of the same jobs (JCT over the time alone): at least 1, the worst the largest.
    assert 1 <= row["slowdown_p99"] <= row["slowdown_worst"]
    stopped = _run("--gavel-policies", "max_min_fairness_packed", "--gavel-jobs", "12",
                   "--gavel-arrivals", "stop", "--gavel-cpu-budget", "0", "--json")
    assert stopped.returncode == 0, stopped.stderr
    (row,) = json.loads(stopped.stdout)
    assert row["run"] == "stopped" and row["avg_jct_h"] == "-" and row["options"] == "-"
    assert row["slowdown_p99"] == row["slowdown_worst"] == "-"
