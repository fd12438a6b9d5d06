"""End to end on a small slice: every policy finishes jobs; the report lands on disk intact."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from bayes_sched.sim import SimConfig, Workload, read_workload, run_simulation, write_report

ROOT = Path(__file__).resolve().parents[1]
SMALL = SimConfig(num_nodes=4, gpus_per_node=4, max_time=2400.0)


def small_workload() -> Workload:
    """The first 20 jobs of workload 1 that fit on 16 GPUs."""
    jobs = [job for job in read_workload("workload-1").jobs if job.num_replicas <= 16][:20]
    return Workload("workload-1-small", tuple(jobs))


@pytest.fixture(scope="module")
def results() -> list:
    return [run_simulation(small_workload(), policy, SMALL)
            for policy in ("pollux", "tiresias", "optimus", "fifo")]


def test_every_policy_runs_and_finishes_short_jobs(results: list) -> None:
    for result in results:
        jobs = result.jobs
        assert len(jobs) == 20
        assert result.summary["finished"] >= (1 if result.policy == "fifo" else 3)
        done = jobs.dropna(subset=["jct"])
        assert np.all(done["jct"] > 0) and np.all(done["queueing_delay"] >= 0)
        assert np.all(done["gpu_time"] > 0) and result.rejected == []
        util = result.timeline["utilization"].values
        assert np.all((util >= 0) & (util <= 1)) and util.max() > 0.2
        assert result.timeline.sizes["time"] == 2400 // 60
    pollux = results[0]
    assert pollux.decision_seconds.size > 0 and pollux.refits > 0


def test_report_files(results: list, tmp_path: Path) -> None:
    report = write_report(results, tmp_path / "rep")
    assert report.read_text().startswith("# Simulation report")
    summary = pd.read_csv(tmp_path / "rep" / "summary.csv")
    assert list(summary["policy"]) == ["pollux", "tiresias", "optimus", "fifo"]
    assert json.loads((tmp_path / "rep" / "summary.json").read_text())[0]["jobs"] == 20
    for png in ("jct_cdf.png", "utilization.png"):
        assert (tmp_path / "rep" / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    path = tmp_path / "rep" / "timelines" / "tiresias__workload-1-small.nc"
    with xr.open_dataset(path, engine="h5netcdf") as timeline:
        assert timeline["gpus"].dims == ("time", "job") and timeline["time"].attrs["units"] == "s"
        assert int(timeline["gpus"].sum("job").max()) <= 16
    assert not list((tmp_path / "rep").rglob("*.tmp"))


def test_cli_simulate_json(tmp_path: Path) -> None:
    path = tmp_path / "w.csv"
    path.write_text("name,time,application,num_replicas,batch_size\n"
                    "a,0,cifar10,2,256\nb,30,ncf,1,1024\nc,200,bert,4,48\n")
    done = subprocess.run(
        [sys.executable, "-m", "bayes_sched", "simulate", "--workload", str(path),
         "--policy", "tiresias", "--nodes", "2", "--json",
         "--out", str(tmp_path / "r")],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert rows[0]["policy"] == "tiresias" and rows[0]["finished"] == 3
    assert (tmp_path / "r" / "report.md").exists()


def _simulate_json(tmp_path: Path, *extra: str) -> list[dict[str, object]]:
    path = tmp_path / "w.csv"
    path.write_text("name,time,application,num_replicas,batch_size\n"
                    "a,0,cifar10,2,256\nb,0,cifar10,2,256\n")
    done = subprocess.run(
        [sys.executable, "-m", "bayes_sched", "simulate", "--workload", str(path),
         "--policy", "fifo", "--nodes", "1", "--json", "--no-progress", *extra],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_cli_simulate_hidden_gavel_slows_jobs_sharing_a_node(tmp_path: Path) -> None:
    alone = _simulate_json(tmp_path)[0]
    shared = _simulate_json(tmp_path, "--hidden", "gavel")[0]
    # Both 2-GPU jobs share the one node from the start: Gavel's pairs must cost them time.
    assert shared["finished"] == alone["finished"] == 2
    assert float(shared["avg_jct"]) > 1.02 * float(alone["avg_jct"])


def test_min_refit_interval_reaches_the_estimation_stage() -> None:
    """``SimConfig.min_refit_interval`` throttles the refits the loop's estimation stage makes for
    jobs that report no fit of their own (Optimus runs fixed-batch jobs): with an interval longer
    than the run, each job's model is fitted once; with 0, again at every new shape."""
    from bayes_sched.policies import OptimusPolicy

    workload = Workload("workload-1-8", small_workload().jobs[:8])
    refits = {}
    for interval in (0.0, 1e9):
        policy = OptimusPolicy()
        config = SimConfig(num_nodes=4, gpus_per_node=4, max_time=1800.0,
                           min_refit_interval=interval)
        result = run_simulation(workload, policy, config)
        refits[interval] = result.estimator_stats["job_model_refits"]
    assert 1 <= refits[1e9] <= len(workload.jobs) < refits[0.0]
