"""Tenants in ``serve``, without running jobs: a job file's and ``submit --tenant``'s tenant,
refused where the service does not serve it; a state of schema version 2 migrated (its jobs the
default tenant's); ``serve --tenants`` files refused in one line; ``status`` and ``events`` per
tenant; the reclaims the quota stage's decision makes, as events, and the per-tenant metrics.
(tests/test_serve_tenants_reclaim.py runs a real service and real jobs.)"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from bayes_sched.backends.local import LocalLauncher
from bayes_sched.backends.real_cluster import JobRecord
from bayes_sched.cluster_spec import parse_cluster_spec
from bayes_sched.policies import make_policy
from bayes_sched.service import state_check
from bayes_sched.service.events import Event, EventTracker
from bayes_sched.service.metrics import ServeMetrics
from bayes_sched.service.serve import Service
from bayes_sched.service.state import SERVE_TENANTS, STATE_FILE, StateStore
from bayes_sched.service.state_schema import APPLICATION_ID, SCHEMA_VERSION, marks
from bayes_sched.service.tenants import read_tenants_file, reclaims, tenants_meta
from bayes_sched.tenants import TenantSpec
from tests.cli_inprocess import run_cli
from tests.state_files import one_error_line, spec
from tests.test_service import EXAMPLE, _job_file
from tests.test_state_damage import FIRST_RELEASE_SCHEMA, _sqlite_file

ROOT = Path(__file__).resolve().parents[1]
TENANTS = ROOT / "examples" / "tenants.toml"
#: Two tenants of one GPU each on two logical GPUs, as serve records them.
TWO_GPUS = replace(parse_cluster_spec("1x2:cpu"),
                   tenants=(TenantSpec("vision", {"*": 1}), TenantSpec("nlp", {"*": 1})))
#: Version 2's events table (the schema before tenants).
EVENTS_V2 = ("CREATE TABLE events (id INTEGER PRIMARY KEY, time REAL NOT NULL, job TEXT, "
             "kind TEXT NOT NULL, message TEXT NOT NULL, detail TEXT NOT NULL);")


def _served(state: Path) -> StateStore:
    """A state whose service serves :data:`TWO_GPUS`'s tenants."""
    store = StateStore(state)
    store.set_meta({SERVE_TENANTS: tenants_meta(TWO_GPUS)})
    return store


def test_a_job_file_names_its_tenant_and_submit_tenant_wins(tmp_path: Path) -> None:
    state = tmp_path / "state"
    in_file = _job_file(tmp_path, "a", EXAMPLE, tenant="vision")
    plain = _job_file(tmp_path, "b", EXAMPLE)
    assert run_cli("submit", str(in_file), "--state", str(state)).stdout == \
        "submitted a for tenant vision\n"
    assert run_cli("submit", str(plain), "--state", str(state)).stdout == "submitted b\n"
    flagged = _job_file(tmp_path, "c", EXAMPLE, tenant="vision")
    assert run_cli("submit", str(flagged), "--tenant", "nlp", "--state",
                   str(state)).returncode == 0
    jobs = {job["name"]: job for job in StateStore(state, create=False).jobs()}
    assert {name: (job["tenant"], job["spec"]["tenant"]) for name, job in jobs.items()} == {
        "a": ("vision", "vision"), "b": ("default", "default"), "c": ("nlp", "nlp")}


@pytest.mark.parametrize(("fields", "flag", "where"), [
    ({"tenant": ""}, (), "field 'tenant': '': expected a tenant's name"),
    ({"tenant": 3}, (), "field 'tenant': 3: expected a tenant's name"),
    ({"tenant": " vision"}, (), "field 'tenant': ' vision': expected"),
    ({}, ("--tenant", ""), "--tenant: '': expected a tenant's name"),
])
def test_bad_tenant_names_are_refused_in_one_line(tmp_path: Path, fields: dict[str, object],
                                                  flag: tuple[str, ...], where: str) -> None:
    path = _job_file(tmp_path, "bad", EXAMPLE, **fields)
    result = run_cli("submit", str(path), *flag, "--state", str(tmp_path / "state"))
    one_error_line(result, where)


def test_submit_refuses_a_tenant_the_service_does_not_serve(tmp_path: Path) -> None:
    state = tmp_path / "state"
    _served(state)
    path = _job_file(tmp_path, "j", EXAMPLE)
    one_error_line(run_cli("submit", str(path), "--tenant", "audio", "--state", str(state)),
                   "--tenant: tenant 'audio' is not one the service serves: expected one of "
                   "vision, nlp")
    one_error_line(run_cli("submit", str(path), "--state", str(state)),
                   f"{path}, column 'tenant': tenant 'default' is not one")
    assert StateStore(state, create=False).jobs() == []  # nothing submitted
    assert run_cli("submit", str(path), "--tenant", "nlp", "--state", str(state)).stdout == \
        "submitted j for tenant nlp\n"


def test_a_version_2_state_is_migrated_with_its_jobs_the_default_tenants(tmp_path: Path) -> None:
    root = tmp_path / "v2"
    root.mkdir()
    path = root / STATE_FILE
    _sqlite_file(path, FIRST_RELEASE_SCHEMA + EVENTS_V2, application=APPLICATION_ID, version=2)
    old_spec = spec("old").to_dict()
    del old_spec["tenant"]  # a spec written before tenants existed
    with sqlite3.connect(path) as connection:
        connection.execute("INSERT INTO jobs (name, spec, submitted) VALUES (?, ?, ?)",
                           ("old", json.dumps(old_spec), 1.0))
    connection.close()
    assert state_check.inspect_state(root).verdict == state_check.OLDER
    store = StateStore(root)
    assert marks(store.connection) == (APPLICATION_ID, SCHEMA_VERSION) and SCHEMA_VERSION == 3
    (job,) = store.jobs()
    assert job["tenant"] == "default" and "tenant" not in job["spec"]
    store.submit(spec("new"))
    assert [j["name"] for j in store.jobs(tenant="default")] == ["old", "new"]
    assert state_check.inspect_state(root).verdict == state_check.HEALTHY


@pytest.mark.parametrize(("text", "options", "expected"), [
    (None, ("--gpus", "1"), "'tenants': quotas sum to 2 GPUs, the cluster has 1: expected at "
     "most 1"),
    ("", ("--gpus", "2"), "no [[tenants]] table"),
    ('[[tenants]]\nname = "a"\nweight = -1\n', ("--gpus", "2"),
     "column 'tenants[0].weight': -1: expected a finite weight"),
    ('[[tenants]]\nname = "a"\nquota = { v100 = 1 }\n', ("--gpus", "2"),
     "GPU type 'v100' is not in the cluster; expected one of cpu"),
    ("nodes = [", ("--gpus", "2"), "not TOML"),
])
def test_serve_refuses_bad_tenants_files_in_one_line(tmp_path: Path, text: str | None,
                                                     options: tuple[str, ...],
                                                     expected: str) -> None:
    path = TENANTS if text is None else tmp_path / "tenants.toml"
    if text is not None:
        path.write_text(text)
    state = tmp_path / "state"
    result = run_cli("serve", "--state", str(state), "--gpu-type", "cpu", *options, "--tenants",
                     str(path), "--max-rounds", "1")
    one_error_line(result, str(path), expected)
    assert not (state / STATE_FILE).exists()  # refused before the state was touched
    missing = run_cli("serve", "--state", str(state), "--gpus", "2", "--tenants",
                      str(tmp_path / "nope.toml"), "--max-rounds", "1")
    one_error_line(missing, "nope.toml: no such tenants file")


def test_read_tenants_file_takes_a_cluster_files_tenants_and_the_backends_nodes(
        tmp_path: Path) -> None:
    path = tmp_path / "cluster.toml"
    path.write_text('nodes = "9x4:v100"\n[[tenants]]\nname = "a"\nquota = 1\nlend = false\n'
                    '[[tenants]]\nname = "b"\nweight = 3.0\n')
    spec_read = read_tenants_file(path, parse_cluster_spec("1x2:cpu"))
    assert spec_read.total_gpus == 2  # the backend's nodes, not the file's
    table = spec_read.tenant_table()
    assert table.names == ("a", "b") and dict(table.entitlement) == {"a": 1.0, "b": 1.0}
    assert not table["a"].lend and table["b"].weight == 3.0
    as_json = tmp_path / "tenants.json"
    as_json.write_text(json.dumps({"tenants": [{"name": "a", "quota": {"cpu": 2}}]}))
    assert read_tenants_file(as_json, parse_cluster_spec("1x2:cpu")).tenant_table().entitlement[
        "a"] == 2.0


def _record(name: str, tenant: str, status: str, gpus: int) -> dict[str, object]:
    record = JobRecord(replace(spec(name), tenant=tenant), 0.0, status=status,
                       allocation=[gpus]).to_dict()
    return record


def test_status_prints_each_tenants_gpus_against_its_quota_and_filters(tmp_path: Path) -> None:
    state = tmp_path / "state"
    store = _served(state)
    for name, tenant in (("a1", "vision"), ("a2", "vision"), ("b1", "nlp"), ("c1", "audio")):
        store.submit(replace(spec(name), tenant=tenant))
    store.save([_record("a1", "vision", "running", 1), _record("a2", "vision", "running", 1),
                _record("b1", "nlp", "pending", 0)])
    shown = run_cli("status", "--state", str(state))
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[1:4] == [
        "tenant vision: 2 GPUs held of quota 1 (1 borrowed); 2 running, 0 pending",
        "tenant nlp: 0 GPUs held of quota 1; 0 running, 1 pending",
        "tenant audio: 0 GPUs held (no quota: not a tenant the service serves); 0 running, "
        "1 pending"]
    one = run_cli("status", "--tenant", "nlp", "--state", str(state), "--json")
    data = json.loads(one.stdout)
    assert [job["name"] for job in data["jobs"]] == ["b1"]
    assert data["tenants"] == [{"name": "nlp", "gpus": 0, "quota": 1.0, "borrowed": 0.0,
                                "jobs": {"pending": 1}}]
    one_error_line(run_cli("status", "--tenant", "nope", "--state", str(state)),
                   "--tenant: tenant 'nope' is not one the service serves: expected one of "
                   "vision, nlp")
    store.add_events([Event(time.time(), "a1", "started", "x", {"tenant": "vision"}),
                      Event(time.time(), "b1", "submitted", "y", {"tenant": "nlp"})])
    events = json.loads(run_cli("events", "--tenant", "vision", "--state", str(state),
                                "--json").stdout)
    assert [(e["job"], e["kind"]) for e in events] == [("a1", "started")]
    text = run_cli("events", "--state", str(state)).stdout
    assert "job a1 (tenant vision) started: x" in text


def test_status_without_tenants_shows_no_tenant_lines(tmp_path: Path) -> None:
    state = tmp_path / "state"
    StateStore(state).submit(spec("plain"))
    shown = run_cli("status", "--state", str(state))
    assert "tenant" not in shown.stdout
    assert json.loads(run_cli("status", "--state", str(state), "--json").stdout)["tenants"] == []


def _view(name: str, tenant: str, gpus: int) -> SimpleNamespace:
    """What :func:`reclaims` reads of a job view."""
    return SimpleNamespace(name=name, tenant=tenant, num_gpus=gpus)


def test_reclaims_name_the_borrowers_stopped_for_their_owners() -> None:
    table = TWO_GPUS.tenant_table()
    jobs = [_view("a1", "vision", 1), _view("a2", "vision", 1), _view("b1", "nlp", 0)]
    one = np.array([1])
    assert reclaims(table, jobs, {"a1": one, "b1": one}) == {"a2": ("nlp",)}
    assert reclaims(table, jobs, {"a1": one, "a2": one}) == {}  # nobody stopped
    # A tenant within its quota preempted by its policy is no reclaim.
    within = [_view("a1", "vision", 1), _view("b1", "nlp", 0), _view("b2", "nlp", 0)]
    assert reclaims(table, within, {"b1": one}) == {}


def test_a_reclaim_is_an_event_and_the_restart_says_why(tmp_path: Path) -> None:
    tracker = EventTracker([], tmp_path)
    running = JobRecord(replace(spec("a2"), tenant="vision"), 0.0, status="running", attempt=1,
                        allocation=[1], nodes=["n0"], local_bsz=16, accum_steps=1)
    stopped = replace(running, status="pending")
    waiting = replace(stopped, allocation=[0])
    again = replace(running, attempt=2, num_restarts=1)
    events: list[Event] = []
    for step, record in enumerate((running, stopped, waiting, again)):
        if step == 2:
            tracker.reclaimed({"a2": ("nlp",)})
        events += tracker.update([record.to_dict()], ("cpu",), 0.0)
    assert [e.kind for e in events] == ["submitted", "started", "reclaimed", "restarted"]
    assert events[2].detail == {"reason": "reclaimed for tenant nlp", "for_tenants": ["nlp"],
                                "tenant": "vision"}
    assert events[2].line() == ("job a2 (tenant vision) reclaimed: its tenant's borrowed GPUs "
                                "went back to tenant nlp (their quota); waiting for GPUs")
    assert events[3].message.endswith("; after: reclaimed for tenant nlp")


def test_the_service_cancels_a_job_of_a_tenant_it_does_not_serve(tmp_path: Path) -> None:
    state = tmp_path / "state"
    store = StateStore(state)
    store.submit(replace(spec("stray"), tenant="audio"))
    store.submit(replace(spec("mine"), tenant="nlp"))
    service = Service(store, LocalLauncher(2, "cpu"), make_policy("fifo"),
                      tenants=TWO_GPUS.tenants)
    try:
        assert service.policy.name == "fifo+quota"
        jobs = {job["name"]: job for job in store.jobs()}
        assert jobs["mine"]["status"] == "pending"
        assert jobs["stray"]["status"] == "cancelled"
        assert jobs["stray"]["record"]["reason"] == (
            "refused: tenant 'audio' is not one the service serves: expected one of vision, nlp "
            "(its --tenants file)")
        assert json.loads(store.meta(SERVE_TENANTS) or "")["total_gpus"] == 2
    finally:
        service.close()


def test_metrics_serve_each_tenants_gpus_quota_borrowed_and_jobs() -> None:
    metrics = ServeMetrics()
    metrics.update([_record("a1", "vision", "running", 1), _record("a2", "vision", "running", 1),
                    _record("b1", "nlp", "pending", 0)], TWO_GPUS, [], True)
    served = {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
              for family in metrics.collect() for sample in family.samples
              if sample.name.startswith("bayes_sched_serve_tenant_")}
    prefix = "bayes_sched_serve_tenant_"
    assert served[(f"{prefix}gpus", (("tenant", "vision"),))] == 2
    assert served[(f"{prefix}quota_gpus", (("tenant", "vision"),))] == 1
    assert served[(f"{prefix}borrowed_gpus", (("tenant", "vision"),))] == 1
    assert served[(f"{prefix}borrowed_gpus", (("tenant", "nlp"),))] == 0
    assert served[(f"{prefix}jobs", (("state", "pending"), ("tenant", "nlp")))] == 1
    assert served[(f"{prefix}jobs", (("state", "running"), ("tenant", "vision")))] == 2


class _Shrinking:
    """A launcher whose one node has as many GPUs as ``gpus`` says (no jobs start here)."""

    node_ids = ("n0",)

    def __init__(self, gpus: int) -> None:
        self.gpus = gpus

    def cluster_spec(self) -> object:
        return parse_cluster_spec(f"1x{self.gpus}:cpu")


def test_quotas_are_checked_at_start_and_kept_when_gpus_leave(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from bayes_sched.backends.real_cluster import RealCluster
    from bayes_sched.errors import InputError

    with pytest.raises(InputError, match="quotas sum to 2 GPUs, the cluster has 1"):
        RealCluster(_Shrinking(1), tmp_path / "jobs", tenants=TWO_GPUS.tenants)
    launcher = _Shrinking(2)
    cluster = RealCluster(launcher, tmp_path / "jobs", tenants=TWO_GPUS.tenants)
    assert cluster.spec.tenants == TWO_GPUS.tenants
    launcher.gpus = 1
    cluster.refresh_nodes()
    assert cluster.spec.total_gpus == 1 and cluster.spec.tenants == TWO_GPUS.tenants
    assert dict(cluster.spec.tenant_table().entitlement) == {"vision": 1.0, "nlp": 1.0}
    assert "the tenants' quotas exceed the cluster's GPUs now" in caplog.text
