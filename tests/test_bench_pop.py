"""experiments/bench_pop.py's decision part run as a user runs it (nothing imports experiments):
POP's sub-problems solved side by side by worker processes started from a script, and a bad
``--workers`` refused before any run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = [sys.executable, str(ROOT / "experiments" / "bench_pop.py"), "--parts", "decision"]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([*BENCH, *args], capture_output=True, text=True, env=env, timeout=300)


def test_a_decision_with_workers_reports_wall_and_all_processes_cpu() -> None:
    done = _run("--sizes", "128", "--policies", "finish_time_fairness_packed",
                "sia", "--partitions", "3", "--workers", "2", "--json")
    assert done.returncode == 0, done.stderr
    assert "2 solver workers started" in done.stderr
    # (Each row is printed as it is measured; the whole table last.)
    packed, sia = json.loads(done.stdout.splitlines()[-1])["decision"]
    assert packed["k"] == 3 and packed["workers"] == 2 and packed["pop_critical_s"] is None
    assert packed["pop_wall_s"] > 0 and packed["pop_cpu_s"] > 0
    assert packed["exact_cpu_s"] > 0
    # Sia takes no such option: its sub-problems are solved here, one after another.
    assert sia["k"] == 3 and sia["workers"] == 1 and sia["pop_critical_s"] is not None


@pytest.mark.parametrize(("flag", "value", "expected"), [
    ("--workers", "0", "expected a count of processes in 1..64"),
    ("--partitions", "x", "expected 'auto' or a count in 1..512"),
    ("--partitions", "0", "expected 'auto' or a count in 1..512"),
])
def test_a_bad_worker_or_partition_count_is_refused_before_any_run(
        flag: str, value: str, expected: str) -> None:
    done = _run(flag, value)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().splitlines()[-1].endswith(f"{flag} {value}: {expected}"), \
        done.stderr


def test_gap_part_reports_the_median_finish_time_ratio_for_ftf_only() -> None:
    """The gap part's FTF rows carry the median job's ratio under the exact and POP answers
    (positive and finite); other rows a dash."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, str(ROOT / "experiments" / "bench_pop.py"), "--parts", "gap",
         "--gap-gpus", "48", "--snapshots", "2", "--gap-partitions", "2", "--policies",
         "finish_time_fairness_perf", "max_min_fairness_perf", "--json"],
        capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    ftf, maxmin = json.loads(done.stdout.splitlines()[-1])["gap"]
    assert ftf["policy"] == "finish_time_fairness_perf" and ftf["snapshots"] == 2
    for key in ("median_ratio_exact", "median_ratio_pop"):
        assert 0 < ftf[key] < float("inf")
        assert maxmin[key] == "-"


def test_jct_part_compares_two_exact_solvers_with_jct_exact_opt() -> None:
    """``--jct-partitions 1 --jct-exact-opt solver=HIGHS``: the exact arm runs HiGHS, the other
    the default solver, both unsplit, over a 3-job window; the row names the exact arm's
    options. A solver the policy does not take is refused in one line, before any run."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, str(ROOT / "experiments" / "bench_pop.py"), "--parts", "jct",
               "--jct-window", "0", "3", "--jct-seeds", "0", "--jct-partitions", "1",
               "--policies", "max_min_fairness"]
    done = subprocess.run([*command, "--jct-exact-opt", "solver=HIGHS", "--json"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(done.stdout.splitlines()[-1])["jct"]
    assert row["exact_opts"] == "solver=HIGHS" and row["k"] == 1
    assert row["exact_avg_jct_h"] > 0 and row["pop_avg_jct_h"] > 0
    # one seed: its ratio is the mean's, and gives no interval
    assert abs(row["mean_seed_ratio"] - row["ratio"]) <= 1e-4
    assert row["lower_90"] == row["upper_90"] == "-"
    bad = subprocess.run([*command, "--jct-exact-opt", "solver=GUROBI"], capture_output=True,
                         text=True, env=env, timeout=300)
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.strip().splitlines()[-1].endswith(
        "--jct-exact-opt: policy 'max_min_fairness': option solver is 'GUROBI': expected "
        "'CLARABEL' or 'HIGHS'"), bad.stderr


def test_jct_part_stops_at_its_horizon_and_counts_the_windows_unfinished_jobs() -> None:
    """A run is bounded by ``--jct-max-hours``: one simulated hour is too short for the 3-job
    window, so the row counts its unfinished jobs and gives no mean; 0 hours is refused."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, str(ROOT / "experiments" / "bench_pop.py"), "--parts", "jct",
               "--jct-window", "0", "3", "--jct-seeds", "0", "--jct-partitions", "2",
               "--policies", "max_min_fairness"]
    done = subprocess.run([*command, "--jct-max-hours", "1", "--json"], capture_output=True,
                          text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(done.stdout.splitlines()[-1])["jct"]
    assert row["unfinished"] > 0 and row["seeds"] == 0
    assert row["ratio"] == "-" and row["per_seed_ratio"] == "-"
    assert row["mean_seed_ratio"] == row["lower_90"] == "-"
    bad = subprocess.run([*command, "--jct-max-hours", "0"], capture_output=True, text=True,
                         env=env, timeout=300)
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.strip().splitlines()[-1].endswith(
        "--jct-max-hours 0.0: expected simulated hours in (0, 100000]"), bad.stderr
