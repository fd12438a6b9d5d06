"""The service's trust model on the local backend, with real job processes: a job's environment is
the allow-list plus its ``[env]`` (the scheduler's own variables last), and a two-replica job's
rendezvous and collectives listen on loopback only (its sockets read from the kernel, psutil)."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from bayes_sched.backends.job_env import INHERITED, inherited_environment
from bayes_sched.backends.launcher import ExitStatus, LaunchSpec
from bayes_sched.backends.local import LOOPBACK, LocalLauncher, LocalProcesses, loopback_interface
from bayes_sched.client.protocol import ENV_INIT_BATCH, ENV_JOB_DIR, ENV_TARGET_EPOCHS, read_reports

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "train_tiny.py"
DUMP_ENV = "import json, os; json.dump(dict(os.environ), open('env.json', 'w'))"


def _wait(processes: LocalProcesses, seconds: float) -> ExitStatus:
    deadline = time.monotonic() + seconds
    while (status := processes.poll()) is None:
        assert time.monotonic() < deadline, "the job did not end"
        time.sleep(0.05)
    return status


def test_job_environment_is_the_allow_list_then_env_then_the_schedulers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {"AWS_SECRET_ACCESS_KEY": "s3cr3t", "LD_LIBRARY_PATH": "/nonexistent",
                        "PYTHONPATH": str(ROOT), "HTTPS_PROXY": "http://proxy:1",
                        "OMP_NUM_THREADS": "3", "LC_TIME": "C", "TZ": "UTC"}.items():
        monkeypatch.setenv(name, value)
    job_dir = tmp_path / "job"
    job_dir.mkdir()
    processes = LocalLauncher(1).start(LaunchSpec(
        "env", (sys.executable, "-c", DUMP_ENV), (1,), str(job_dir),
        env={"MY_SETTING": "x", "TZ": "Europe/Paris", "MASTER_ADDR": "0.0.0.0"}))
    status = _wait(processes, 60)
    assert status.returncode == 0, status.log_tail
    env: dict[str, Any] = json.loads((job_dir / "env.json").read_text())
    for name in ("AWS_SECRET_ACCESS_KEY", "LD_LIBRARY_PATH", "PYTHONPATH", "HTTPS_PROXY"):
        assert name not in env
    assert env["OMP_NUM_THREADS"] == "3" and env["LC_TIME"] == "C"
    assert env["MY_SETTING"] == "x" and env["TZ"] == "Europe/Paris"  # [env] over the inherited
    assert env["MASTER_ADDR"] == LOOPBACK  # the scheduler's over [env]
    assert env[ENV_JOB_DIR] == str(job_dir) and env["CUDA_VISIBLE_DEVICES"] == ""
    assert env["GLOO_SOCKET_IFNAME"] == env["NCCL_SOCKET_IFNAME"] == loopback_interface()
    assert {k: env[k] for k in inherited_environment(env) if k != "LC_CTYPE"} == {
        k: v for k, v in inherited_environment({**os.environ, "TZ": "Europe/Paris"}).items()
        if k != "LC_CTYPE"}  # Python may set LC_CTYPE itself (PEP 538)
    assert set(INHERITED) >= {"PATH", "HOME"}


def _listening(pid: int) -> list[tuple[str, int]]:
    """The TCP addresses process ``pid`` listens on."""
    return [(c.laddr.ip, c.laddr.port) for c in psutil.Process(pid).net_connections("tcp")
            if c.status == psutil.CONN_LISTEN]


def test_two_replica_local_job_listens_on_loopback_only(tmp_path: Path) -> None:
    job_dir = tmp_path / "job"
    argv = (sys.executable, str(EXAMPLE), "--examples", "200000", "--step-sleep", "0.01",
            "--report-interval", "0.3")
    processes = LocalLauncher(2).start(LaunchSpec(
        "pair", argv, (2,), str(job_dir), env={ENV_INIT_BATCH: "32", ENV_TARGET_EPOCHS: "1"}))
    try:
        deadline = time.monotonic() + 120
        while not any(r["kind"] == "step" for r in read_reports(job_dir)[0]):
            assert processes.poll() is None, f"the job ended: {processes.poll()}"
            assert time.monotonic() < deadline, "no step reported"
            time.sleep(0.1)
        rank0, rank1 = (r.pid for r in processes.replicas)
        port = int(psutil.Process(rank0).environ()["MASTER_PORT"])
        sockets = {pid: _listening(pid) for pid in (rank0, rank1)}
        assert (LOOPBACK, port) in sockets[rank0]  # the rendezvous store
        assert sockets[rank1]  # gloo's listener of each replica
        assert {ip for found in sockets.values() for ip, _ in found} == {LOOPBACK}, sockets
    finally:
        processes.stop(5.0)
