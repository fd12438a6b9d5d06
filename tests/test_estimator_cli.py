"""``simulate --estimator [NEED=]NAME``, ``--estimator-opt NAME.KEY=VALUE``, ``[estimator.NAME]``
in ``--config`` and ``bayes-sched list estimators``: the choice reaches the run (its summary names
the estimator of each need), and bad input is one line naming the flag or file, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli_inprocess import run_cli

ROOT = Path(__file__).resolve().parents[1]
SMALL_TRACE = ROOT / "bayes_sched" / "data" / "gavel" / "traces" / "small_test.trace"
CLUSTER = ("--cluster", "v100:1x2,p100:1x2,k80:1x2")


def _simulate(*extra: str) -> dict[str, object]:
    done = run_cli("simulate", "--trace", str(SMALL_TRACE), *CLUSTER, "--max-jobs", "4",
                   "--json", "--no-progress", *extra)
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(done.stdout)
    return row


def test_the_default_is_the_worlds_oracle_and_a_learner_is_chosen_by_flag_or_file(
        tmp_path: Path) -> None:
    oracle = _simulate()
    assert oracle["estimates"] == "throughput=oracle"
    learned = _simulate("--estimator", "throughput=per_cell",
                        "--estimator-opt", "per_cell.refit_interval=720")
    assert learned["estimates"] == "throughput=per_cell" and learned["fits"] >= 1
    by_name = _simulate("--estimator", "per_cell")
    assert by_name["estimates"] == "throughput=per_cell"
    config = tmp_path / "run.toml"
    config.write_text("[estimator.oracle_stage]\nrefit_growth = 4.0\n")
    staged = _simulate("--config", str(config))
    # The table behind the learning stage decides as the known table does.
    assert staged["estimates"] == "throughput=oracle" and staged["avg_jct"] == oracle["avg_jct"]
    assert staged["fits"] >= 1 and "fits" not in oracle


def test_the_pollux_world_refuses_an_estimator_its_policy_has_no_use_for() -> None:
    done = run_cli("simulate", "--workload", "workload-1", "--max-jobs", "2", "--json",
                   "--no-progress", "--policy", "fifo", "--estimator", "bayes")
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "estimator 'bayes' serves throughput: the policy reads no estimates" in done.stderr


@pytest.mark.parametrize(("flags", "message"), [
    (("--estimator", "nope"), "--estimator 'nope': unknown estimator 'nope'; expected one of "
                              "oracle, oracle_stage, oracle_remaining_steps, uniform"),
    (("--estimator", "speed=bayes"), "--estimator 'speed=bayes': unknown need 'speed'"),
    (("--estimator-opt", "bayes.refit_growth=0.5"), "option refit_growth is 0.5: expected "
                                                    "float >= 1"),
    (("--estimator-opt", "refit_growth=2"), "--estimator-opt 'refit_growth=2': expected "
                                            "NAME.KEY=VALUE"),
    (("--estimator-opt", "oracle.table=mine"), "option table is 'mine'"),
    (("--estimator", "throughput=per_cell", "--estimator", "bayes"),
     "estimator 'bayes' serves throughput: the policy reads throughput"),
])
def test_bad_estimator_input_is_one_line_exit_2(flags: tuple[str, ...], message: str) -> None:
    done = run_cli("simulate", "--trace", str(SMALL_TRACE), *CLUSTER, "--max-jobs", "2",
                   "--no-progress", *flags)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().count("\n") == 0 and message in done.stderr
    assert "Traceback" not in done.stderr


def test_list_estimators_names_each_with_the_needs_it_serves() -> None:
    done = run_cli("list", "estimators", "--json")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    named = {row["name"]: row["serves"] for row in rows if row["name"]}
    assert named == {**{name: "throughput" for name in (
        "oracle", "oracle_stage", "uniform", "per_cell", "bayes", "gavel", "sia")},
        "job_models": "job_goodput", "job_posterior": "job_goodput",
        "dirichlet": "remaining_work", "noise_scale": "remaining_work",
        "oracle_remaining_steps": "remaining_steps", "declared": "remaining_steps",
        "ignored": "remaining_steps", "survival": "remaining_steps",
        "bo_colocation": "colocation", "contention_network": "resource_use"}
    assert {"refit_interval", "refit_growth"} <= {row["option"] for row in rows}


def test_compare_gives_each_policy_the_choices_it_reads_and_refuses_one_none_reads(
        tmp_path: Path) -> None:
    compare = ("compare", "--traces", str(SMALL_TRACE), "--workloads", "none", *CLUSTER,
               "--max-jobs", "4", "--json", "--no-progress")
    done = run_cli(*compare, "--policies", "max_min_fairness", "astraea",
                   "--estimator", "throughput=per_cell", "--out", str(tmp_path / "a"))
    assert done.returncode == 0, done.stderr
    estimates = {row["policy"]: row["estimates"] for row in json.loads(done.stdout)}
    assert estimates == {"max_min_fairness": "throughput=per_cell", "astraea": "none"}
    refused = run_cli(*compare, "--policies", "astraea", "harmony", "--estimator", "per_cell",
                      "--out", str(tmp_path / "b"))
    assert refused.returncode == 2 and refused.stderr.strip().count("\n") == 0
    assert ("no policy of --policies has a use for estimator 'per_cell' (astraea reads no "
            "estimates; harmony reads no estimates)") in refused.stderr
