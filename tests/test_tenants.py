"""Tenants as data: the ``[[tenants]]`` table of a cluster file (real TOML files), its bad input
refused in one line with exit 2 by the command line, the tenant column of the workload CSV and of
Gavel's and Shockwave's traces, and jobs naming an unknown tenant."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest

from bayes_sched.cluster_spec import read_cluster_spec
from bayes_sched.errors import InputError
from bayes_sched.jobs import DEFAULT_TENANT
from bayes_sched.sim.gavel_jobs import read_gavel_trace
from bayes_sched.sim.workload import Workload, read_workload, write_workload
from bayes_sched.tenants import ANY_TYPE, check_job_tenants
from tests.cli_inprocess import run_cli

TENANTS = '''nodes = "v100:2x4,k80:2x4"
[[tenants]]
name = "vision"
quota = { v100 = 4, k80 = 2 }
weight = 2.0
[[tenants]]
name = "speech"
quota = 6
lend = false
[[tenants]]
name = "misc"
weight = 3
borrow = false
'''


def test_a_cluster_file_lists_tenants_with_quotas_weights_and_flags(tmp_path: Path) -> None:
    path = tmp_path / "cluster.toml"
    path.write_text(TENANTS)
    spec = read_cluster_spec(path)
    vision, speech, misc = spec.tenants
    assert dict(vision.quota or {}) == {"v100": 4, "k80": 2} and vision.weight == 2.0
    assert dict(speech.quota or {}) == {ANY_TYPE: 6} and not speech.lend and speech.borrow
    assert misc.quota is None and misc.weight == 3.0 and misc.lend and not misc.borrow
    table = spec.tenant_table()
    # 16 GPUs, 12 reserved by quotas: the tenant without one is entitled to the other 4.
    assert dict(table.entitlement) == {"vision": 6.0, "speech": 6.0, "misc": 4.0}
    assert pickle.loads(pickle.dumps(spec)) == spec  # compare sends specs to workers


def test_a_cluster_without_tenants_has_one_default_tenant_with_every_gpu(tmp_path: Path) -> None:
    path = tmp_path / "cluster.toml"
    path.write_text('nodes = "2x4:t4"\n')
    table = read_cluster_spec(path).tenant_table()
    assert table.names == (DEFAULT_TENANT,) and table.entitlement[DEFAULT_TENANT] == 8.0


@pytest.mark.parametrize("tenants, expected", [
    ('[[tenants]]\nname = "a"\nquota = 6\n[[tenants]]\nname = "b"\nquota = 6\n',
     "quotas sum to 12 GPUs, the cluster has 8: expected at most 8"),
    ('[[tenants]]\nname = "a"\nweight = -1.0\n', "tenants[0].weight"),
    ('[[tenants]]\nname = "a"\nweight = nan\n', "nan: expected a finite weight"),
    ('[[tenants]]\nname = "a"\n[[tenants]]\nname = "a"\n', "repeats an earlier tenant"),
    ('[[tenants]]\nname = "a"\nquota = { k80 = 2 }\n', "GPU type 'k80' is not in the cluster"),
    ('[[tenants]]\nname = "a"\nquota = 1.5\n', "expected a whole number of GPUs"),
    ('[[tenants]]\nname = "a"\nshare = 1\n', "tenants[0].share"),
    ('[[tenants]]\nquota = 1\n', "tenants[0].name"),
])
def test_bad_tenants_are_refused_in_one_line_with_exit_2(tmp_path: Path, tenants: str,
                                                         expected: str) -> None:
    path = tmp_path / "cluster.toml"
    path.write_text('nodes = "2x4:t4"\n' + tenants)
    with pytest.raises(InputError, match="tenants"):
        read_cluster_spec(path)
    done = run_cli("simulate", "--workload", "workload-1", "--max-jobs", "2", "--no-progress",
                   "--cluster", str(path))
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert expected in done.stderr and str(path) in done.stderr


def test_the_workload_csv_carries_a_tenant_column_and_writes_it_back(tmp_path: Path) -> None:
    path = tmp_path / "w.csv"
    path.write_text("name,time,application,num_replicas,batch_size,tenant\n"
                    "a,0,cifar10,2,256,vision\nb,5,cifar10,1,128,\n")
    workload = read_workload(path)
    assert [job.tenant for job in workload.jobs] == ["vision", DEFAULT_TENANT]
    out = tmp_path / "out.csv"
    write_workload(workload, out)
    assert out.read_text().splitlines()[0].endswith(",tenant")
    assert read_workload(out).jobs == workload.jobs
    plain = Workload("p", tuple(j for j in workload.jobs if j.tenant == DEFAULT_TENANT))
    write_workload(plain, out)
    assert "tenant" not in out.read_text()  # no column where every job is the default's


def test_gavel_traces_take_an_eleventh_tenant_column(tmp_path: Path) -> None:
    line = "ResNet-18 (batch size 16)\tcmd\tdir\t--n\t0\t1000\t1\t1\t-1\t{t}"
    path = tmp_path / "t.trace"
    path.write_text(line.format(t=0) + "\tvision\n" + line.format(t=10) + "\n")
    jobs = read_gavel_trace(path)
    assert [job.tenant for job in jobs] == ["vision", DEFAULT_TENANT]
    path.write_text(line.format(t=0) + "\tvision\textra\n")
    with pytest.raises(InputError, match="12 tab-separated columns: expected 10 .* or 11 with"):
        read_gavel_trace(path)


def test_a_job_of_an_unknown_tenant_is_refused_naming_its_row(tmp_path: Path) -> None:
    path = tmp_path / "cluster.toml"
    path.write_text(TENANTS)
    spec = read_cluster_spec(path)
    workload = tmp_path / "w.csv"
    workload.write_text("name,time,application,num_replicas,batch_size,tenant\n"
                        "a,0,cifar10,2,256,vision\nb,5,cifar10,1,128,robotics\n")
    jobs = read_workload(workload).jobs
    with pytest.raises(InputError) as error:
        check_job_tenants(jobs, spec.tenants, str(workload), first_row=2)
    message = str(error.value)
    assert "job 'b'" in message and "'robotics'" in message and "row 3" in message
    assert "misc, speech, vision" in message and "\n" not in message
    check_job_tenants(jobs[:1], spec.tenants)  # a tenant with no jobs is fine


def test_simulate_runs_a_tenant_trace_under_astraea_and_refuses_an_unknown_tenant(
        tmp_path: Path) -> None:
    cluster = tmp_path / "cluster.toml"
    cluster.write_text('nodes = "v100:2x4"\n[[tenants]]\nname = "a"\nquota = 4\n'
                       '[[tenants]]\nname = "b"\nquota = 4\n')
    line = "ResNet-18 (batch size 16)\tcmd\tdir\t--n\t0\t20000\t{g}\t1\t-1\t{t}\t{tenant}\n"
    trace = tmp_path / "t.trace"
    trace.write_text("".join(line.format(g=g, t=t, tenant=n) for g, t, n in (
        (4, 0, "a"), (4, 0, "a"), (1, 60, "b"), (1, 60, "b"))))
    done = run_cli("simulate", "--trace", str(trace), "--cluster", str(cluster), "--policy",
                   "astraea", "--json", "--no-progress")
    assert done.returncode == 0, done.stderr
    row = json.loads(done.stdout)[0]
    assert row["finished"] == 4 and 0 <= row["ltgf_spread"] and row["ltgf_min"] > 0
    trace.write_text(trace.read_text() + line.format(g=1, t=120, tenant="c"))
    done = run_cli("simulate", "--trace", str(trace), "--cluster", str(cluster), "--policy",
                   "astraea", "--no-progress")
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "job '4' names tenant 'c': expected one of a, b" in done.stderr
