"""Per-tenant metrics in the Pollux world (:func:`~bayes_sched.sim.tenant_metrics.
pollux_tenant_report`): a short run on a cluster with two weighted tenants carries a tenant
report whose GPU-time adds up to the jobs' own, ``simulate --plot`` writes the tenant plots, and
a job naming a tenant the cluster lacks is refused in one line."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bayes_sched.cluster_spec import ClusterSpec
from bayes_sched.jobs import JobSpec
from bayes_sched.sim.run import run_simulation
from bayes_sched.sim.simulator import SimConfig
from bayes_sched.sim.tenant_rounds import TenantRounds
from bayes_sched.sim.workload import Workload
from bayes_sched.tenants import TenantSpec
from tests.cli_inprocess import run_cli

PNG = b"\x89PNG\r\n\x1a\n"


def _jobs() -> tuple[JobSpec, ...]:
    """Tenant ``a``: two 2-GPU cifar10 jobs and an ncf one; ``b``: short ncf jobs and a cifar10
    job arriving later."""
    rows = (("cifar10", 0, 2, "a"), ("ncf", 0, 1, "b"), ("cifar10", 0, 2, "a"),
            ("ncf", 120, 1, "b"), ("ncf", 180, 1, "a"), ("cifar10", 300, 1, "b"))
    return tuple(JobSpec(f"{app}-{i}", float(t), app, gpus, 128 if app == "cifar10" else 32768,
                         tenant=tenant) for i, (app, t, gpus, tenant) in enumerate(rows))


def _spec() -> ClusterSpec:
    return dataclasses.replace(ClusterSpec.homogeneous(1, 4, "t4"),
                               tenants=(TenantSpec("a", weight=3.0), TenantSpec("b")))


def test_a_pollux_world_run_reports_both_tenants_and_their_gpu_time_adds_up() -> None:
    result = run_simulation(Workload("w", _jobs()), "fifo", SimConfig(cluster=_spec()))
    report = result.tenants
    assert report is not None
    table = report.tenants.set_index("tenant")
    assert list(table.index) == ["a", "b"] and table["jobs"].tolist() == [3, 3]
    assert table["finished"].sum() == len(result.jobs) == 6
    # Shares of the used GPU-time sum to 1, per tenant and over the timeline's last round.
    assert table["share"].sum() == pytest.approx(1.0)
    assert report.timeline.groupby("tenant")["share"].last().sum() == pytest.approx(1.0)
    # The GPU-hours each tenant's jobs attained equal what its rounds recorded receiving.
    attained = result.jobs.assign(tenant=[j.tenant for j in _jobs()]).groupby("tenant")
    assert (table["gpu_hours"] * 3600).to_numpy() == pytest.approx(
        attained["gpu_time"].sum().to_numpy())
    assert table["quota_fraction"].tolist() == pytest.approx([0.75, 0.25])  # weights 3 : 1
    assert np.isfinite(table["ltgf"]).all() and (table["slowdown"] >= 1.0).all()
    assert result.summary["ltgf_spread"] == report.summary["ltgf_spread"] >= 0.0
    # Every job ran for no longer than it existed, and waited the rest.
    jobs = report.jobs
    assert (jobs["running_time"] <= jobs["jct"] + 1e-9).all() and (jobs["running_time"] > 0).all()


def test_records_read_from_held_gpus_follow_arrivals_and_completions() -> None:
    spec = _spec()
    # Two 60 s rounds; job x (tenant a, asks 2) holds 4 GPUs and completes 30 s into round 2;
    # job y (b, asks 1) arrives at 60 s and holds 1 GPU in round 2.
    rounds, got, ran = TenantRounds.from_held(
        spec.tenant_table(), np.array([60.0, 120.0]), np.array([[4, 0], [4, 1]]),
        [("x", "a", 2.0), ("y", "b", 1.0)], np.array([0.0, 60.0]), np.array([90.0, np.nan]))
    assert got.tolist() == [360.0, 60.0] and ran.tolist() == [90.0, 60.0]
    assert rounds.demand == [{"a": 2.0}, {"a": 2.0, "b": 1.0}]
    assert rounds.received == [{"a": 240.0}, {"a": 120.0, "b": 60.0}]
    assert rounds.job_fair == pytest.approx({"x": 240.0, "y": 60.0})  # within their requests


def test_simulate_plot_writes_the_pollux_worlds_tenant_plots(tmp_path: Path) -> None:
    cluster = tmp_path / "cluster.toml"
    cluster.write_text('nodes = "t4:1x4"\n[[tenants]]\nname = "a"\nweight = 3\n'
                       '[[tenants]]\nname = "b"\n')
    workload = tmp_path / "w.csv"
    workload.write_text("name,time,application,num_replicas,batch_size,tenant\n" + "".join(
        f"{j.name},{j.submit_time:g},{j.application},{j.num_replicas},{j.batch_size},{j.tenant}\n"
        for j in _jobs()))
    plots = tmp_path / "plots"
    done = run_cli("simulate", "--workload", str(workload), "--cluster", str(cluster),
                   "--policy", "fifo", "--no-progress", "--plot", str(plots))
    assert done.returncode == 0, done.stderr
    assert (plots / "tenants_fifo_w_seed0.png").read_bytes().startswith(PNG)
    table = pd.read_csv(plots / "tenants_fifo_w_seed0_tenants.csv").set_index("tenant")
    assert table["jobs"].to_dict() == {"a": 3, "b": 3}
    assert table["share"].sum() == pytest.approx(1.0)
    # A job naming a tenant the cluster does not list: one line naming it and its row.
    workload.write_text(workload.read_text().replace(",b\n", ",nobody\n", 1))
    bad = run_cli("simulate", "--workload", str(workload), "--cluster", str(cluster),
                  "--policy", "fifo", "--no-progress")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "tenant 'nobody'" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
