"""Gavel's jobs: the ``.trace`` reader (shipped traces, bad rows) and the continuous-arrival
generator (seeded, Gavel's distributions)."""

from __future__ import annotations

import subprocess
import sys
from itertools import islice
from pathlib import Path

import numpy as np
import pytest

from bayes_sched.cluster_spec import load_cluster_spec
from bayes_sched.errors import InputError
from bayes_sched.sim.gavel_jobs import (
    TRACE_COLUMNS,
    generate_continuous_jobs,
    read_gavel_trace,
    shipped_gavel_trace,
)
from bayes_sched.sim.table_cluster import TableCluster
from bayes_sched.throughputs import gavel_job_types, load_gavel_throughputs, load_throughputs

ROOT = Path(__file__).resolve().parents[1]


def test_shipped_trace_is_read_field_by_field() -> None:
    path = shipped_gavel_trace("medium_test")
    jobs = read_gavel_trace(path)
    lines = [line.split("\t") for line in path.read_text().splitlines() if line.strip()]
    assert len(jobs) == len(lines) == 20
    for job, fields in zip(jobs, lines, strict=True):
        row = dict(zip(TRACE_COLUMNS, fields, strict=True))
        assert job.job_type == row["job_type"]
        assert job.total_steps == float(row["total_steps"])
        assert job.scale_factor == int(row["scale_factor"])
        assert job.submit_time == float(row["arrival_time"])
        assert job.priority_weight == float(row["priority_weight"])
    assert [job.name for job in jobs] == [str(i) for i in range(20)]


GOOD = "ResNet-50 (batch size 32)\tpython3 main.py\timagenet\t--num_minibatches\t1\t500\t1\t1\t-1\t0"


@pytest.mark.parametrize(("line", "column"), [
    ("\t".join(GOOD.split("\t")[:9]), None),  # 9 columns
    (GOOD.replace("\t500\t", "\tmany\t"), "total_steps"),
    (GOOD.replace("\t500\t1\t", "\t500\t3\t"), "scale_factor"),  # not measured at 3 GPUs
    (GOOD.replace("ResNet-50 (batch size 32)", "ResNet-51"), "job_type"),
    (GOOD.replace("ResNet-50 (batch size 32)", "A3C").replace("\t500\t1\t", "\t500\t2\t"),
     "scale_factor"),  # A3C runs on one GPU only
    (GOOD.replace("\t1\t1\t-1\t0", "\t1\t0\t-1\t0"), "priority_weight"),
    (GOOD[:-1] + "-5", "arrival_time"),
])
def test_bad_trace_rows_name_file_row_and_column(tmp_path: Path, line: str,
                                                 column: str | None) -> None:
    path = tmp_path / "bad.trace"
    path.write_text(GOOD + "\n" + line + "\n")
    with pytest.raises(InputError) as caught:
        read_gavel_trace(path)
    message = str(caught.value)
    assert str(path) in message and "row 2" in message and "\n" not in message
    if column is not None:
        assert f"column '{column}'" in message


def test_arrivals_must_not_go_back(tmp_path: Path) -> None:
    path = tmp_path / "order.trace"
    path.write_text(GOOD[:-1] + "100\n" + GOOD + "\n")
    with pytest.raises(InputError, match="row 2, column 'arrival_time'.*non-decreasing"):
        read_gavel_trace(path)


def refused_in_one_line(trace: Path, cluster: str) -> str:
    """``simulate --trace TRACE --cluster CLUSTER`` (max-min fairness, from the trace's folder):
    checks it exits 2 with one line and no traceback; that line."""
    done = subprocess.run(
        [sys.executable, "-m", "bayes_sched", "simulate", "--trace", str(trace), "--cluster",
         cluster, "--policy", "max_min_fairness_perf", "--no-progress"],
        capture_output=True, text=True, cwd=trace.parent, timeout=120,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    return done.stderr


def test_cli_bad_trace_is_one_line_exit_2(tmp_path: Path) -> None:
    path = tmp_path / "bad.trace"
    path.write_text(GOOD.replace("ResNet-50 (batch size 32)", "NoSuchNet") + "\n")
    line = refused_in_one_line(path, "v100:4")
    assert "row 1, column 'job_type'" in line and "NoSuchNet" in line


def test_cli_refuses_a_gpu_type_the_table_does_not_measure(tmp_path: Path) -> None:
    # Gavel's table measures k80, p100 and v100: A100s there could run no job and would sit
    # idle all run (before: accepted, utilisation_a100 0 and the run's utilisation a third).
    path = tmp_path / "good.trace"
    path.write_text(GOOD + "\n")
    line = refused_in_one_line(path, "a100:4,v100:4")
    assert line.startswith("bayes-sched: error: --cluster a100:4,v100:4: GPU type a100 ")
    assert "expected types of k80, p100, v100" in line
    assert [p.name for p in tmp_path.iterdir()] == ["good.trace"], "nothing written"


def test_table_cluster_refuses_unmeasured_types_and_runs_measured_ones() -> None:
    table = load_throughputs("simulation")
    jobs = read_gavel_trace(shipped_gavel_trace("small_test"), max_jobs=2)
    with pytest.raises(InputError, match=r"GPU types a100, h100 of the cluster .* have no "
                                         r"measured throughputs"):
        TableCluster(jobs, load_cluster_spec("a100:4,v100:4,h100:4"), table)
    TableCluster(jobs, load_cluster_spec("p100:4,v100:4"), table)  # every type measured


def test_generator_is_reproducible_per_seed() -> None:
    first = list(islice(generate_continuous_jobs(4.0, seed=0), 300))
    again = list(islice(generate_continuous_jobs(4.0, seed=0), 300))
    other = list(islice(generate_continuous_jobs(4.0, seed=1), 300))
    assert first == again
    assert first != other
    # Arrival gaps and job parameters are separate streams: another rate rescales the
    # arrivals and leaves every job's type and length as they were.
    slower = list(islice(generate_continuous_jobs(2.0, seed=0), 300))
    assert [(j.job_type, j.total_steps) for j in slower] == \
        [(j.job_type, j.total_steps) for j in first]
    assert np.allclose([j.submit_time for j in slower], [2 * j.submit_time for j in first])


def test_generator_follows_gavels_distributions() -> None:
    table = load_gavel_throughputs()
    jobs = list(islice(generate_continuous_jobs(5.6, seed=3), 4000))
    assert jobs[0].submit_time == 0.0
    gaps = np.diff([j.submit_time for j in jobs])
    assert np.all(gaps >= 0)
    assert gaps.mean() == pytest.approx(3600 / 5.6, rel=0.05)
    assert all(j.scale_factor == 1 for j in jobs)
    minutes = np.array([j.total_steps / table.steps_per_second(j.job_type, 1, "v100")
                        for j in jobs]) / 60
    assert minutes.min() >= 10**1.5 - 1e-6 and minutes.max() <= 10**4 + 1e-6
    assert np.mean(minutes > 10**3) == pytest.approx(0.2, abs=0.03)
    types = {t for t, _ in gavel_job_types()}
    counts = np.array([sum(j.job_type == t for j in jobs) for t in types])
    assert counts.min() > 0.5 * len(jobs) / len(types)  # uniform over the 26 types
    multi = list(islice(generate_continuous_jobs(5.6, seed=3, multi_gpu=True), 4000))
    sizes = np.array([j.scale_factor for j in multi])
    for size, share in ((1, 0.70), (2, 0.10), (4, 0.15), (8, 0.05)):
        assert np.mean(sizes == size) == pytest.approx(share, abs=0.03)
    distributed = {t for t, d in gavel_job_types() if d}
    assert all(j.job_type in distributed for j in multi if j.scale_factor > 1)


def test_generator_rejects_a_bad_rate() -> None:
    with pytest.raises(InputError, match="jobs/h"):
        next(generate_continuous_jobs(0.0))
