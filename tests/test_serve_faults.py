"""``bayes-sched serve`` under load and faults (issue 40, item 6), at the harness's ``--quick``
size: ``experiments/serve_faults.py`` runs real ``submit``/``serve``/``status`` processes and
protocol-speaking jobs without PyTorch; these tests assert the invariants it reports (nothing
lost, nothing run twice, one-line reasons) and read its folders back themselves. Plus the parts
the fixes rest on: stray processes of an unrecorded start are found and stopped."""

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
from bayes_sched.client.protocol import ENV_JOB_DIR
from bayes_sched.service.jobfile import read_job_file

ROOT = Path(__file__).resolve().parents[1]
HARNESS = ROOT / "experiments" / "serve_faults.py"
JOB_SCRIPT = ROOT / "examples" / "protocol_job.py"


def _run_harness(scenario: str, workdir: Path) -> dict[str, Any]:
    done = subprocess.run([sys.executable, str(HARNESS), "--quick", "--only", scenario,
                           "--json", "--seed", "0", "--timeout", "240",
                           "--workdir", str(workdir)],
                          capture_output=True, text=True, timeout=600, check=False, cwd=ROOT)
    assert done.stdout, done.stderr[-3000:]
    (outcome,) = json.loads(done.stdout)["outcomes"]
    return dict(outcome)


def _assert_invariants(outcome: dict[str, Any], workdir: Path) -> None:
    assert outcome["problems"] == []
    assert outcome["lost"] == 0 and outcome["run_twice"] == 0
    assert outcome["finished"] + outcome["failed"] == outcome["submitted"] > 0
    # Read back apart from the harness: one row per job file, every one final, every failure
    # with a one-line reason, and the service never printed a traceback or an internal error.
    folder = workdir / {"full disk": "disk"}.get(outcome["scenario"], outcome["scenario"])
    names = {path.stem for path in folder.glob("*.toml")}
    shown = subprocess.run([sys.executable, "-m", "bayes_sched", "status", "--state",
                            str(folder / "state"), "--json"], capture_output=True, text=True,
                           check=True, cwd=ROOT)
    jobs = json.loads(shown.stdout)["jobs"]
    assert sorted(job["name"] for job in jobs) == sorted(names)
    for job in jobs:
        assert job["status"] in ("done", "failed"), job["name"]
        if job["status"] == "failed":
            assert job["record"]["reason"].splitlines()[0].strip()
    log = (folder / "serve.log").read_text(errors="replace")
    assert "Traceback" not in log and "internal error" not in log


def _begins(workdir: Path, scenario: str) -> list[dict[str, Any]]:
    lines = (workdir / scenario / "marker.jsonl").read_text().splitlines()
    return [event for event in map(json.loads, lines) if event["event"] == "begin"]


def test_concurrent_submits_then_one_serve_runs_every_job_once(tmp_path: Path) -> None:
    outcome = _run_harness("load", tmp_path)
    _assert_invariants(outcome, tmp_path)
    assert outcome["submitted"] == outcome["finished"] == 16
    begins = _begins(tmp_path, "load")
    assert sorted(e["job"] for e in begins if e["rank"] == 0) == sorted(
        f"load-{i:03d}" for i in range(16))  # each started once: no kill, no reallocation here


def test_serve_killed_at_seeded_instants_loses_nothing_and_runs_nothing_twice(
        tmp_path: Path) -> None:
    outcome = _run_harness("kills", tmp_path)
    _assert_invariants(outcome, tmp_path)
    assert outcome["kills"] + sum("exited" in note for note in outcome["notes"]) == 4
    assert not any(event["overlap"] for event in _begins(tmp_path, "kills"))


def test_run_twice_spares_a_late_follower_of_the_finishing_start_and_catches_a_rerun(
        tmp_path: Path) -> None:
    """The harness's check on a marker of the failure seen once in CI: a 4-replica start whose
    rank 0 resumed near the end and finished before its rank 3's interpreter came up. That is
    one start, not a re-run; a new start after ``done`` (a new attempt, or the same attempt's
    rank 0 again) is one."""
    def mark(time_: float, event: str, job: str, attempt: int, rank: int, **more: Any) -> str:
        return json.dumps({"event": event, "job": job, "attempt": attempt, "rank": rank,
                           "overlap": False, "pid": 1000 + rank, "time": time_, **more})

    late = [mark(1.0, "begin", "a", 2, 0), mark(1.001, "begin", "a", 2, 1),
            mark(1.002, "begin", "a", 2, 2), mark(1.05, "end", "a", 2, 0, status="done"),
            mark(1.06, "begin", "a", 2, 3), mark(1.07, "end", "a", 2, 3, status="follower")]
    marker = tmp_path / "marker.jsonl"

    def check(lines: list[str]) -> subprocess.CompletedProcess[str]:
        marker.write_text("\n".join(lines) + "\n")
        return subprocess.run([sys.executable, str(HARNESS), "--check-marker", str(marker)],
                              capture_output=True, text=True, timeout=60, check=False)

    spared = check(late)
    assert (spared.returncode, spared.stdout) == (0, "")
    for rerun in (mark(2.0, "begin", "a", 3, 0), mark(2.0, "begin", "a", 2, 0)):
        caught = check([*late, rerun])
        assert caught.returncode == 1
        assert caught.stdout.strip().startswith("a started again (attempt ")
    broken = check(["{not json"])
    assert broken.returncode == 2 and str(marker) in broken.stderr
    assert len(broken.stderr.strip().splitlines()) == 1


def test_a_job_flooding_its_log_does_not_stop_serve(tmp_path: Path) -> None:
    outcome = _run_harness("flood", tmp_path)
    _assert_invariants(outcome, tmp_path)
    assert outcome["finished"] == 2


def test_full_disk_stops_serve_with_one_line_and_the_state_stays_whole(tmp_path: Path) -> None:
    outcome = _run_harness("disk", tmp_path)
    _assert_invariants(outcome, tmp_path)
    errors = [line for line in (tmp_path / "disk" / "serve.log").read_text().splitlines()
              if line.startswith("bayes-sched: error:")]
    assert errors, "serve under the file size limits never failed a write"
    for line in errors:  # one line naming the state (its folder, or state.db where opening it
        # failed), not an internal error
        assert str(tmp_path / "disk" / "state") in line and "internal error" not in line


def _sleeper(job_dir: Path) -> subprocess.Popen[bytes]:
    """A process group of its own, with a job directory in its environment (what the local
    launcher starts), that ignores nothing: SIGTERM ends it."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                            env={**os.environ, ENV_JOB_DIR: str(job_dir)}, process_group=0)


def test_release_strays_stops_the_unrecorded_processes_of_the_jobs_named(tmp_path: Path) -> None:
    stray, other = _sleeper(tmp_path / "a"), _sleeper(tmp_path / "b")
    try:
        for process in (stray, other):  # the environment is readable once exec is done
            deadline = time.monotonic() + 10
            while b"time.sleep" not in Path(f"/proc/{process.pid}/cmdline").read_bytes():
                assert time.monotonic() < deadline
                time.sleep(0.01)
        released = LocalLauncher(1).release_strays([str(tmp_path / "a")], grace_seconds=5.0)
        assert released == [str(tmp_path / "a")]
        assert stray.wait(timeout=5) == -signal.SIGTERM
        assert other.poll() is None and process_start_ticks(other.pid) is not None
    finally:
        for process in (stray, other):
            process.kill()
            process.wait()


@pytest.mark.slow  # 10-15 minutes on a loaded 2-core machine: 200 jobs, 30 kills, 100 MB
def test_the_full_harness_finds_nothing_lost_or_run_twice(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(HARNESS), "--json", "--workdir", str(tmp_path)],
                          capture_output=True, text=True, timeout=3600, check=False, cwd=ROOT)
    outcomes = json.loads(done.stdout)["outcomes"]
    assert [o["problems"] for o in outcomes] == [[]] * 4
    assert sum(o["kills"] for o in outcomes) == 30
    for outcome in outcomes:
        _assert_invariants(outcome, tmp_path)


def test_a_stop_cut_short_by_a_restart_counts_no_failure(tmp_path: Path) -> None:
    """A scheduler killed after it signalled a job to stop and before it saved the stop: the
    state it left must say so, and the next scheduler then counts no failure for the exit."""
    job_file = tmp_path / "slow.toml"
    job_file.write_text(f'name = "slow"\nscript = "{JOB_SCRIPT}"\n'
                        'args = ["--examples", "100000", "--step-seconds", "0.02"]\n'
                        f'python = "{sys.executable}"\ninit_batch_size = 16\n'
                        "max_local_bsz = 64\ntarget_epochs = 1\n")
    config = RealClusterConfig(poll_interval=0.05, checkpoint_timeout=10, stop_grace=10)
    saved: list[list[dict[str, Any]]] = []
    cluster = RealCluster(LocalLauncher(1), tmp_path / "jobs", config)
    cluster.on_change = lambda: saved.append(cluster.snapshot())
    cluster.submit(read_job_file(job_file))
    try:
        cluster.apply({"slow": np.array([1])})
        deadline = time.monotonic() + 60
        while cluster.records["slow"].reported_attempt < 0:  # training: it will checkpoint
            assert time.monotonic() < deadline
            cluster.advance(0.1)
        cluster.apply({})  # the policy takes its GPU: checkpoint, SIGTERM, exit
        assert cluster.records["slow"].status == "pending"
        # What a scheduler killed at the signal left: the last save holding the processes.
        (last,) = [s for s in saved if s[0]["handle"] is not None][-1:]
        restarted = RealCluster(LocalLauncher(1), tmp_path / "jobs", config)
        assert restarted.restore(last) == []
        record = restarted.records["slow"]
        assert (record.status, record.failures, any(record.allocation)) == ("pending", 0, False)
    finally:
        cluster.launcher.close()
