"""experiments/paired_gavel_runs.py, run as a user runs it (nothing imports experiments): per seed
a run with the defaults and one with the baseline's setting, their ratios, and the ratios' means
with intervals over the seeds; bad input is one line before any run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = [sys.executable, str(ROOT / "experiments" / "paired_gavel_runs.py")]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([*SCRIPT, *args], capture_output=True, text=True, env=env, timeout=300)


def test_each_seed_pairs_the_defaults_with_the_baseline_and_the_ratios_get_intervals() -> None:
    # Packed max-min with 2 sub-problems against the exact program: two settings that decide
    # differently on a few jobs.
    done = _run("--policy", "max_min_fairness_packed", "--baseline-opt", "partitions=1",
                "--policy-opt", "partitions=2", "--seeds", "0", "1", "--jobs", "12", "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert [row["seed"] for row in out["per_seed"]] == [0, 1]
    for row in out["per_seed"]:
        assert row["avg_jct_h"] > 0 and row["baseline_avg_jct_h"] > 0
        assert row["jct_ratio"] == pytest.approx(row["avg_jct_h"] / row["baseline_avg_jct_h"],
                                                 abs=1e-3)
        # How the rounds carried each run out: a fraction of the GPUs held, restarts counted.
        for key in ("utilization", "baseline_utilization"):
            assert 0 < row[key] <= 1
        for key in ("restarts_per_job", "baseline_restarts_per_job"):
            assert row[key] >= 0
    jct = next(row for row in out["summary"] if row["ratio"] == "jct_ratio")
    ratios = [row["jct_ratio"] for row in out["per_seed"]]
    assert jct["seeds"] == 2 and jct["mean"] == pytest.approx(sum(ratios) / 2, abs=1e-4)
    assert jct["lower_90"] <= jct["mean"] <= jct["upper_90"]


@pytest.mark.parametrize(("args", "flag"), [
    (("--policy", "pollux", "--baseline-opt", "p=-1"), "--policy"),
    (("--policy", "sia", "--baseline-opt", "bogus=1"), "--baseline-opt"),
    (("--policy", "sia", "--baseline-opt", "mip_heuristics=true", "--jobs", "6001"), "--jobs"),
    (("--policy", "sia", "--baseline-opt", "mip_heuristics=true", "--rate", "nan"), "--rate"),
    (("--policy", "sia", "--baseline-opt", "mip_heuristics=true", "--seeds",
      *map(str, range(101))), "--seeds"),
])
def test_bad_input_is_one_line_naming_the_flag_before_any_run(args: tuple[str, ...],
                                                              flag: str) -> None:
    done = _run(*args)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert flag in done.stderr.strip().splitlines()[-1]
