"""The JSON the commands print (issue 35, item 1): counts are JSON integers, and every fit method
gives the same top-level keys."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import bayes_sched.cli as cli

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
ENV.pop(cli.DEBUG_VARIABLE, None)

#: Summary keys that count things (jobs, rounds, solver outcomes, fits): JSON integers.
COUNT_KEYS = {"jobs", "finished", "rounds", "solver_failures", "allocation_updates",
              "fallback_allocations", "trials", "lp_inaccurate", "node_limit_hits", "solves",
              "ilp_solves", "reused_answers", "thompson_draws", "rounds_recorded", "fit_problems",
              "colocation_fit_problems", "job_model_refits", "posterior_fits",
              "rejected_reports", "fits", "seed"}


def run_json(*args: str) -> object:
    result = subprocess.run([sys.executable, "-m", "bayes_sched", *args, "--json"],
                            capture_output=True, text=True, env=ENV, timeout=300)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.parametrize("args", [
    ("--trace", "small_test", "--cluster", "v100:4,p100:4,k80:4", "--max-jobs", "3"),
    ("--trace", "small_test", "--cluster", "v100:4,p100:4,k80:4", "--max-jobs", "3",
     "--policy", "finish_time_fairness"),
    ("--workload", "workload-1", "--max-jobs", "3", "--policy", "fifo"),
])
def test_simulate_json_counts_are_integers(args: tuple[str, ...]) -> None:
    rows = run_json("simulate", *args, "--no-progress")
    assert isinstance(rows, list) and rows
    for row in rows:
        counts = COUNT_KEYS & row.keys()
        assert {"finished"} <= counts, row
        for key in counts:
            assert type(row[key]) is int, (key, row[key])


def test_every_fit_method_gives_the_same_top_level_keys() -> None:
    # The SVI document of the same profile is held to the same keys by
    # tests/test_cli_perfmodel.py::test_fit_throughput_posterior_json_carries_its_diagnostics
    # (one Bayesian fit of cifar10 for both checks: it is the costly one).
    from bayes_sched.cli.fit import FIT_JSON_KEYS

    point = run_json("fit", "throughput", "cifar10", "--method", "point")
    assert isinstance(point, dict)
    assert tuple(point) == FIT_JSON_KEYS
    assert point["interval_level"] is None and point["diagnostics"] is None
    assert point["seed"] is None and isinstance(point["objective"], float)
