"""Worlds as objects: each owns its defaults, reads its jobs, runs to one result type with one
utilisation, and the command line reads them instead of redeclaring them."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bayes_sched.cluster_spec import load_cluster_spec
from bayes_sched.errors import InputError
from bayes_sched.sim.result import RunResult
from bayes_sched.worlds import GAVEL, POLLUX, SHOCKWAVE, TYPED_POLLUX, WORLDS, get_world, world_of
from tests.cli_inprocess import run_cli

ROOT = Path(__file__).resolve().parents[1]


def test_the_registry_holds_the_four_worlds_with_their_published_settings() -> None:
    assert list(WORLDS) == ["pollux", "typed_pollux", "gavel", "shockwave"]
    assert (GAVEL.cluster().describe(), GAVEL.cluster().round_interval) == (
        "9x4:v100,9x4:p100,9x4:k80", 360.0)
    assert (SHOCKWAVE.cluster().total_gpus, SHOCKWAVE.cluster().round_interval) == (32, 120.0)
    assert POLLUX.cluster().describe() == "16x4:t4" and POLLUX.round_seconds == 60.0
    assert set(TYPED_POLLUX.cluster().types) == {"v100", "p100", "k80"}
    assert "shockwave" in SHOCKWAVE.policies and "shockwave" not in GAVEL.policies
    with pytest.raises(InputError, match="--world nowhere: unknown world; expected one of"):
        get_world("nowhere")


def test_a_job_source_names_its_world() -> None:
    assert world_of("small_test") is GAVEL
    assert world_of("tacc_120") is SHOCKWAVE
    assert world_of("workload-3") is POLLUX
    with pytest.raises(InputError, match="--trace nothing-here: no such workload or trace"):
        world_of("nothing-here")


def test_a_world_gives_a_policy_its_setting_and_refuses_a_foreign_one() -> None:
    assert SHOCKWAVE.policy_options("allox")["alpha"] == 0.2
    assert SHOCKWAVE.policy_options("gandiva_fair")["split"] == "time"
    assert SHOCKWAVE.policy_options("max_min_fairness")["min_reset_interval"] == 1000.0
    assert GAVEL.policy_options("allox") == {}
    assert SHOCKWAVE.make_policy("allox").alpha == 0.2  # type: ignore[attr-defined]
    with pytest.raises(InputError, match="--policy pollux: not a policy of the gavel world"):
        GAVEL.make_policy("pollux")


def _utilization_by_hand(result: RunResult) -> float:
    """GPUs held over all GPUs, averaged over the rounds with jobs, from the raw timeline."""
    timeline = result.timeline
    held = timeline["type_utilization"].values * np.array(
        [result.spec.gpus_of_type(str(t)) for t in timeline["gpu_type"].values])
    rounds = timeline["active_jobs"].values > 0
    return float((held.sum(axis=1) / result.spec.total_gpus)[rounds].mean())


def test_both_kinds_of_world_run_to_one_result_with_one_utilisation() -> None:
    name, jobs = GAVEL.read_jobs("small_test", max_jobs=6)
    table = GAVEL.run(jobs, GAVEL.make_policy("max_min_fairness_perf"),
                      GAVEL.cluster(load_cluster_spec("v100:4,p100:4,k80:4")), name=name)
    name, workload = POLLUX.read_jobs("workload-1", max_jobs=4)
    pollux = POLLUX.run(workload, POLLUX.make_policy("tiresias"), name=name)
    for result, world in ((table, "gavel"), (pollux, "pollux")):
        assert isinstance(result, RunResult) and result.world == world
        assert result.summary["finished"] == len(result.jobs) > 0
        assert 0 < result.summary["utilization"] <= 1
        assert result.summary["utilization"] == pytest.approx(_utilization_by_hand(result))
        assert {"jct", "queueing_delay", "restarts", "gpu_time", "ftf"} <= set(result.jobs)
        assert len(result.estimate_seconds) == len(result.decision_seconds)
    assert table.workload == "small_test" and pollux.workload == "workload-1-first4"
    assert table.config is None and pollux.config is not None


def test_a_table_world_run_writes_the_report_every_world_writes(tmp_path: Path) -> None:
    """``simulate --trace --out`` (once refused) writes the per-job table and the plots; the
    world's own cluster and round apply when none is given."""
    done = run_cli("simulate", "--trace", "small_test", "--max-jobs", "6", "--out",
                   str(tmp_path / "rep"), "--no-progress", "--json")
    assert done.returncode == 0, done.stderr
    jobs = pd.read_csv(tmp_path / "rep" / "jobs.csv")
    summary = pd.read_csv(tmp_path / "rep" / "summary.csv")
    assert len(jobs) == 6 and jobs["jct"].notna().all()
    assert summary.loc[0, "world"] == "gavel" and summary.loc[0, "cluster"] == (
        "9x4:v100,9x4:p100,9x4:k80")
    assert (tmp_path / "rep" / "report.md").is_file()
    assert list((tmp_path / "rep" / "type_utilization").glob("*.png"))


def test_the_worlds_page_python_example_runs() -> None:
    page = (ROOT / "docs" / "worlds.md").read_text()
    block = re.search(r"```python\n(.*?)```", page, re.S)
    assert block is not None
    exec(compile(block.group(1), "docs/worlds.md", "exec"), {})  # noqa: S102
