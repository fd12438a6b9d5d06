"""The scheduler service on the local backend: real job processes (tiny seeded PyTorch jobs, gloo
on the CPU), a real SQLite state file, the real command line; the scheduler killed with SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bayes_sched.backends.local import LocalLauncher, process_start_ticks
from bayes_sched.backends.real_cluster import RealCluster, RealClusterConfig
from bayes_sched.client.protocol import read_reports, replica_log_path, replica_logs
from bayes_sched.errors import InputError
from bayes_sched.policies import make_policy
from bayes_sched.service.serve import Service
from bayes_sched.service.state import StateStore
from tests.cli_inprocess import run_cli
from tests.real_jobs import check_moved_jobs, check_step_times_reach_the_model

ROOT = Path(__file__).resolve().parents[1]
JOBS = Path(__file__).resolve().parent / "jobs"
EXAMPLE = ROOT / "examples" / "train_tiny.py"


def _toml_value(value: Any) -> str:
    """A TOML value of JSON-like data (JSON's strings, numbers and lists are TOML's)."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {_toml_value(v)}"
                               for k, v in value.items()) + "}"
    return json.dumps(value)


def _job_file(folder: Path, name: str, script: Path | str, **fields: Any) -> Path:
    values = {"name": name, "script": str(script), "init_batch_size": 32, "max_batch_size": 256,
              "max_local_bsz": 64, "target_epochs": 2, **fields}
    lines = [f"{key} = {_toml_value(value)}" for key, value in values.items()]
    path = folder / f"{name}.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


# --- submit: bad job files ---------------------------------------------------------------------

@pytest.mark.parametrize(("fields", "field", "expected"), [
    ({"script": "missing.py"}, "script", "not found"),
    ({"max_local_bsz": 0}, "max_local_bsz", "expected an integer in [1, "),
    ({"target_epochs": 0}, "target_epochs", "expected an integer in [1, "),
    ({"gpus": 3}, "gpus", "unknown field"),
    ({"max_batch_size": 16}, "max_batch_size", "expected an integer in [32, "),
    # Bounds: the profile readers' batch and GPU bounds, a million epochs.
    ({"target_epochs": 2**63 - 1}, "target_epochs", "in [1, 1000000]"),
    ({"max_batch_size": 1e26}, "max_batch_size", "expected an integer"),
    ({"max_batch_size": 10**17}, "max_batch_size", f"in [32, {2**31}]"),
    ({"init_batch_size": 4e12}, "init_batch_size", "expected an integer"),
    ({"init_batch_size": 4 * 10**12}, "init_batch_size", f"in [1, {2**31}]"),
    ({"max_replicas": 2**30}, "max_replicas", f"in [1, {2**20}]"),
    # An interpreter that does not exist is named as such (not blamed on the script later).
    ({"python": "/nonexistent/python3"}, "python", "not found"),
    ({"python": "no-such-python-here"}, "python", "not found"),
    # The environment: loader variables, the scheduler's own, names that are no names.
    ({"env": {"LD_PRELOAD": "/tmp/x.so"}}, "env.LD_PRELOAD", "--allow-loader-env"),
    ({"env": {"LD_AUDIT": "/tmp/x.so"}}, "env.LD_AUDIT", "loader variable"),
    ({"env": {"PYTHONPATH": "/tmp"}}, "env.PYTHONPATH", "--allow-loader-env"),
    ({"env": {"PYTHONSTARTUP": "/tmp/s.py"}}, "env.PYTHONSTARTUP", "loader variable"),
    ({"env": {"RANK": "3"}}, "env.RANK", "set by the scheduler"),
    ({"env": {"BAYES_SCHED_JOB_DIR": "/tmp"}}, "env.BAYES_SCHED_JOB_DIR", "set by the scheduler"),
    ({"env": {"A B": "1"}}, "env.A B", "expected a variable name"),
])
def test_submit_rejects_bad_job_files(tmp_path: Path, fields: dict[str, Any], field: str,
                                      expected: str) -> None:
    path = _job_file(tmp_path, "bad", **{"script": EXAMPLE, **fields})
    state = tmp_path / "state"
    result = run_cli("submit", str(path), "--state", str(state))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert str(path) in lines[0] and f"field '{field}'" in lines[0] and expected in lines[0]
    assert not state.exists()  # nothing written


def test_submit_takes_loader_variables_only_when_allowed_and_stores_the_interpreter_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(Path(sys.executable).parent))
    state = str(tmp_path / "state")
    path = _job_file(tmp_path, "loader", EXAMPLE, python=Path(sys.executable).name,
                     env={"PYTHONPATH": "/opt/lib", "OMP_NUM_THREADS": "2"})
    refused = run_cli("submit", str(path), "--state", state)
    assert refused.returncode == 2 and "field 'env.PYTHONPATH'" in refused.stderr
    done = run_cli("submit", str(path), "--allow-loader-env", "--state", state)
    assert done.returncode == 0, done.stderr
    (job,) = StateStore(state, create=False).jobs()
    assert job["spec"]["env"] == {"PYTHONPATH": "/opt/lib", "OMP_NUM_THREADS": "2"}
    assert job["spec"]["argv"][0] == sys.executable  # found on PATH at submit, kept as a path


def test_submit_status_cancel_through_the_state_file(tmp_path: Path) -> None:
    state = str(tmp_path / "state")
    (tmp_path / "broken.toml").write_text("name = [\n")
    result = run_cli("submit", str(tmp_path / "broken.toml"), "--state", state)
    assert result.returncode == 2 and "not TOML" in result.stderr
    assert run_cli("status", "--state", state).returncode == 2  # no state yet: one line
    path = _job_file(tmp_path, "ok", EXAMPLE)
    assert run_cli("submit", str(path), "--state", state).returncode == 0
    again = run_cli("submit", str(path), "--state", state)
    assert again.returncode == 2 and "exists already" in again.stderr
    status = run_cli("status", "--state", state, "--json")
    jobs = json.loads(status.stdout)["jobs"]
    assert [(j["name"], j["status"]) for j in jobs] == [("ok", "submitted")]
    assert jobs[0]["spec"]["argv"][1] == str(EXAMPLE)
    assert run_cli("cancel", "nope", "--state", state).returncode == 2
    assert run_cli("cancel", "ok", "--state", state).returncode == 0
    assert json.loads(run_cli("status", "--state", state, "--json").stdout)["jobs"][0]["cancel"]


# --- serve: failing jobs -----------------------------------------------------------------------

def test_raising_job_backs_off_then_fails_and_silent_job_times_out(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state")
    for name, script in (("raising", JOBS / "raising.py"), ("silent", JOBS / "silent.py")):
        assert run_cli("submit", str(_job_file(tmp_path, name, script)), "--state",
                       str(store.root)).returncode == 0
    config = RealClusterConfig(report_timeout=4.0, max_restarts=2, backoff=0.4, stop_grace=2.0,
                               poll_interval=0.05, exit_when_idle=True)
    service = Service(store, LocalLauncher(2), make_policy("pollux"), config)
    start = time.monotonic()
    service.run(interval=0.3, max_rounds=100)
    assert time.monotonic() - start < 30  # never a hung scheduler
    jobs = {j["name"]: j for j in StateStore(store.root, create=False).jobs()}
    raising = jobs["raising"]["record"]
    assert jobs["raising"]["status"] == "failed"
    assert raising["attempt"] == 3 and raising["failures"] == 3
    assert "exited with status 1, 3 times" in raising["reason"]
    assert "RuntimeError: tiny job exploded on purpose" in raising["reason"]  # the log's tail
    logs = [(attempt, rank) for attempt, rank, _ in replica_logs(store.jobs_dir / "raising")]
    assert logs == [(0, 0), (1, 0), (2, 0)]  # one log per start, as under the Ray launcher
    assert "tiny job exploded" in replica_log_path(store.jobs_dir / "raising", 2, 0).read_text()
    shown = run_cli("status", "--json", "--state", str(store.root))
    assert shown.returncode == 0, shown.stderr
    logs_shown = {j["name"]: j["log"] for j in json.loads(shown.stdout)["jobs"]}
    assert logs_shown["raising"] == str(store.jobs_dir.resolve() / "raising" / "logs" /
                                        "attempt-2.rank-0.log")  # absolute, wherever run
    # Each transition is an event in the state; the failure's carries the log's last lines.
    events = [(e["job"], e["kind"]) for e in StateStore(store.root, create=False).events()]
    assert [kind for job, kind in events if job == "raising"] == [
        "submitted", "started", "retrying", "restarted", "retrying", "restarted", "failed"]
    assert [kind for job, kind in events if job == "silent"] == [
        "submitted", "started", "failed"]
    failed = StateStore(store.root, create=False).events(job="raising", last=1)[0]
    assert failed["message"].startswith("exited with status 1")
    assert failed["detail"]["log_tail"][-1] == "RuntimeError: tiny job exploded on purpose"
    restarted = StateStore(store.root, create=False).events(job="raising")[3]
    assert "after: exited with status 1; restart 1 of 2" in restarted["message"]
    history = [t for t, placement in raising["allocation_history"] if placement]
    assert len(history) >= 1
    silent = jobs["silent"]
    assert silent["status"] == "failed"
    assert silent["record"]["reason"].startswith("no report within 4 s")
    assert not any(process_start_ticks(r["pid"]) for j in (raising, silent["record"])
                   for r in (j.get("handle") or {}).get("replicas", []))


# --- serve: a restarted service reattaches --------------------------------------------------------

def test_restarted_service_reattaches_and_starts_nothing_twice(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state")
    path = _job_file(tmp_path, "tiny", EXAMPLE, args=[
        "--examples", "2048", "--step-sleep", "0.01", "--report-interval", "0.3"])
    assert run_cli("submit", str(path), "--state", str(store.root)).returncode == 0
    config = RealClusterConfig(exit_when_idle=True, poll_interval=0.05)
    first = Service(store, LocalLauncher(1), make_policy("pollux"), config)
    deadline = time.monotonic() + 90
    while first.cluster.records["tiny"].progress == 0 and time.monotonic() < deadline:
        first.run(interval=0.3, max_rounds=1)
    handle = first.cluster.records["tiny"].handle
    assert handle is not None and first.cluster.records["tiny"].status == "running"
    # One service per state directory: a second one is refused while the first lives.
    with pytest.raises(InputError, match="another 'bayes-sched serve'"):
        Service(StateStore(store.root), LocalLauncher(1), make_policy("pollux"), config)
    # The first service vanishes without stopping anything (as under SIGKILL, where the kernel
    # drops its lock): a second one over the same state file takes the job up where it runs.
    first.store.close()
    second = Service(StateStore(store.root), LocalLauncher(1), make_policy("pollux"), config)
    assert second.reattached == ["tiny"]
    assert second.cluster.records["tiny"].handle == handle
    second.run(interval=0.3, max_rounds=300)
    job = StateStore(store.root, create=False).jobs()[0]
    assert job["status"] == "done" and job["record"]["attempt"] == 1
    reports = read_reports(store.jobs_dir / "tiny")[0]
    assert [r["pid"] for r in reports if r["kind"] == "start"] == [handle["replicas"][0]["pid"]]
    assert [r["status"] for r in reports if r["kind"] == "exit"] == ["done"]


# --- serve: three jobs under Pollux, the scheduler killed and restarted -------------------------

def _serve(state: Path, log: Path) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "bayes_sched", "serve", "--state", str(state),
               "--gpus", "4", "--interval", "1.5", "--restart-delay", "2",
               "--checkpoint-timeout", "20", "--stop-grace", "20", "--report-timeout", "60",
               "--exit-when-idle", "--max-rounds", "400"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with log.open("ab") as stream:
        return subprocess.Popen(command, env=env, stdout=stream, stderr=subprocess.STDOUT)


def _kill_leftovers(store: StateStore) -> None:
    for job in store.jobs():
        handle = (job["record"] or {}).get("handle") or {}
        for replica in handle.get("replicas", []):
            if process_start_ticks(replica["pid"]) == replica["start_ticks"]:
                os.kill(replica["pid"], signal.SIGKILL)


@pytest.mark.slow  # 2-3 minutes on a loaded 2-core machine: a dozen PyTorch processes start
def test_serve_pollux_reallocates_and_survives_sigkill(tmp_path: Path) -> None:
    state = tmp_path / "state"
    names = ("a", "b", "c")
    for seed, name in enumerate(names):
        path = _job_file(tmp_path, name, EXAMPLE, target_epochs=2, args=[
            "--examples", "4096", "--seed", str(seed), "--step-sleep", "0.03",
            "--report-interval", "0.5"])
        assert run_cli("submit", str(path), "--state", str(state)).returncode == 0
    log = tmp_path / "serve.log"
    server = _serve(state, log)
    store = StateStore(state, create=False)
    try:
        # Kill the scheduler once every job runs and one has been reallocated (or all run).
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            records = [j["record"] for j in store.jobs() if j["record"]]
            running = [r for r in records if r["status"] == "running" and r["progress"] > 0]
            if len(running) >= 2 and any(r["num_restarts"] for r in records):
                break
            assert server.poll() is None, log.read_text()[-3000:]
            time.sleep(0.2)
        server.send_signal(signal.SIGKILL)
        server.wait()
        before = {j["name"]: j["record"] for j in store.jobs()}
        alive = {name for name, r in before.items() if r["status"] == "running" and any(
            process_start_ticks(p["pid"]) == p["start_ticks"] for p in r["handle"]["replicas"])}
        assert alive, "no job was running when the scheduler was killed"

        server = _serve(state, log)
        assert server.wait(timeout=150) == 0, log.read_text()[-3000:]
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        _kill_leftovers(store)
    text = log.read_text()
    reattached = set(text.split("reattached: ")[1].splitlines()[0].split(", "))
    assert reattached and reattached <= alive

    jobs = {j["name"]: j for j in store.jobs()}
    assert set(jobs) == set(names)
    for name in alive - reattached:  # it ended while no scheduler ran: not started again
        assert jobs[name]["record"]["attempt"] == before[name]["attempt"]
    assert check_moved_jobs(state, jobs, 2.0) >= 1  # Pollux moved at least one job
    check_step_times_reach_the_model(state, jobs["a"]["record"], "cpu", LocalLauncher(4))


# --- the no-flapping rule ------------------------------------------------------------------------

def test_running_batch_changes_only_for_a_significant_predicted_gain(tmp_path: Path) -> None:
    from bayes_sched.backends.job_spec import RealJobSpec
    from bayes_sched.client.protocol import read_control
    from perfmodel.throughput import ThroughputParams, step_time_terms

    cluster = RealCluster(LocalLauncher(4), tmp_path, RealClusterConfig(batch_change_gain=0.05))
    record = cluster.submit(RealJobSpec("j", ("true",), 32, 1024, 128, 2))
    truth = ThroughputParams(0.02, 0.002, 0.05, 0.01, 0.01, 0.002, 1.5)
    # The job's reports: step times on 1 and 2 GPUs at two micro-batches, and its noise.
    record.gradient = [1.0, 20.0]
    for replicas in (1, 2):
        for local in (16, 64):
            t_c, t_o = step_time_terms(truth.as_array(), np.array(1.0), np.array(replicas),
                                       np.array(local))
            cluster._take_report(record, "step", {
                "gpu_type": "cpu", "num_nodes": 1, "num_replicas": replicas, "local_bsz": local,
                "accum_steps": 0, "step_time": float(t_o), "sync_time": float(t_o - t_c)})
    agent = cluster.agent("j", "cpu")
    agent.grad_sqr, agent.grad_var = record.gradient
    best = agent.choose_batch((2,))
    model = agent.goodput_model()
    assert model is not None

    def goodput(local: int, accum: int) -> float:
        return float(model.goodput(np.array([1]), np.array([2]), np.array([local]),
                                   np.array([accum]))[0, 0])

    record.status, record.allocation = "running", [2]
    candidates = [(m, s) for m in range(1, 129) for s in range(0, 4) if 2 * m * (s + 1) <= 1024]
    near = next(c for c in candidates if c != best and 0.97 < goodput(*c) / goodput(*best) < 1.0)
    far = next(c for c in candidates if goodput(*c) / goodput(*best) < 0.8)
    for current, changes in ((best, False), (near, False), (far, True)):
        record.local_bsz, record.accum_steps = current
        version = record.control_version
        cluster.apply({"j": np.array([2])})  # the same allocation: only the batch may change
        control = read_control(cluster.job_dir("j"))
        if changes:
            assert record.control_version == version + 1 and control is not None
            assert (control.local_bsz, control.accum_steps) == best
        else:
            assert record.control_version == version
            assert (record.local_bsz, record.accum_steps) == current
