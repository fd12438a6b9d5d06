"""``serve`` you can watch: a real service (a subprocess of the command line) runs a real tiny
PyTorch job that fails its first start, restarts, grows from 1 to 2 GPUs and finishes; each event
is read back from ``events --json`` and from serve's own log lines, each metric from its
Prometheus endpoint over loopback while it runs, and the job's log from ``logs``. Then
``status`` says the service stopped, and a lock file a killed service left is cleaned."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from bayes_sched.service.state import LOCK_FILE, StateStore
from tests.cli_inprocess import run_cli
from tests.test_service import _job_file

ROOT = Path(__file__).resolve().parents[1]
FAIL_FIRST = Path(__file__).resolve().parent / "jobs" / "fail_first.py"

#: (metric name, labels) -> the largest value any scrape served.
Seen = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _scrape(port: int, seen: Seen) -> None:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = (sample.name, tuple(sorted(sample.labels.items())))
            seen[key] = max(seen.get(key, float("-inf")), sample.value)


#: The options of the service :func:`serve_and_scrape` runs by default.
SERVE_OPTIONS = ("--gpus", "2", "--interval", "1.5", "--backoff", "0.5", "--restart-delay", "2",
                 "--exit-when-idle", "--max-rounds", "200")


def serve_and_scrape(state: Path, options: Sequence[str] = SERVE_OPTIONS,
                     during: Callable[[], object] | None = None, cwd: Path | None = None
                     ) -> tuple[int, list[str], Seen]:
    """Run ``serve --state STATE OPTIONS --prometheus 0`` (from ``cwd``) to the end, scraping
    its endpoint every 0.3 s and calling ``during`` after each scrape; returns its exit status,
    its log lines and the largest value of each series served."""
    command = [sys.executable, "-m", "bayes_sched", "serve", "--state", str(state), *options,
               "--prometheus", "0"]
    server = subprocess.Popen(command, env={**os.environ, "PYTHONPATH": str(ROOT)},
                              stderr=subprocess.PIPE, text=True, cwd=cwd)
    assert server.stderr is not None
    lines: list[str] = []
    port: list[int] = []
    ready = threading.Event()

    def read() -> None:
        assert server.stderr is not None
        for line in server.stderr:
            lines.append(line.rstrip("\n"))
            found = re.search(r"serving Prometheus metrics on http://127\.0\.0\.1:(\d+)/", line)
            if found:
                port.append(int(found[1]))
                ready.set()
        ready.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    seen: Seen = {}
    try:
        assert ready.wait(60) and port, "\n".join(lines)
        while server.poll() is None:
            try:
                _scrape(port[0], seen)
            except OSError:  # the service is on its way out
                break
            if during is not None:
                during()
            time.sleep(0.3)
        status = server.wait(timeout=240)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    reader.join(timeout=10)
    return status, lines, seen


def test_serve_reports_each_transition_as_event_log_line_and_metric(tmp_path: Path) -> None:
    state = tmp_path / "state"
    path = _job_file(tmp_path, "tiny", FAIL_FIRST, args=[
        "--examples", "4096", "--example-sleep", "0.002", "--report-interval", "0.3"])
    assert run_cli("submit", str(path), "--state", str(state)).returncode == 0
    status, lines, seen = serve_and_scrape(state)
    assert status == 0, "\n".join(lines[-40:])

    # The events, in order, from `events --json`.
    shown = run_cli("events", "--state", str(state), "--json")
    assert shown.returncode == 0, shown.stderr
    events = json.loads(shown.stdout)
    kinds = [e["kind"] for e in events if e["job"] == "tiny"]
    assert kinds[:4] == ["submitted", "started", "retrying", "restarted"], kinds
    assert "grown" in kinds and kinds[-1] == "finished", kinds
    assert [e["kind"] for e in events if e["job"] is None] == ["serve-started", "serve-stopped"]
    by_kind = {e["kind"]: e for e in events if e["job"] == "tiny"}
    started, grown = by_kind["started"]["detail"], by_kind["grown"]["detail"]
    assert started["gpus"] == 1 and started["gpu_types"] == ["cpu"]
    assert re.fullmatch(r"\d+x\d+x1", started["batch"])
    assert grown["from_gpus"] == 1 and grown["gpus"] == 2 and grown["batch"].endswith("x2")
    retrying = by_kind["retrying"]
    assert retrying["message"].startswith("exited with status 3")
    assert retrying["detail"]["log_tail"] == ["first start: failing on purpose"]
    assert "after: exited with status 3" in by_kind["restarted"]["message"]
    assert by_kind["checkpoint"]["detail"]["epochs"] > 0  # asked before it grew
    # ... each one a line of serve's log (a failure's log tail indented under it).
    for event in events:
        who = f"job {event['job']} " if event["job"] else ""
        assert any(line.endswith(f"{who}{event['kind']}: {event['message']}")
                   for line in lines), (event, lines)
    assert "    | first start: failing on purpose" in lines

    # The metrics, as served while it ran.
    assert seen[("bayes_sched_serve_rounds_total", ())] >= 3
    assert seen[("bayes_sched_serve_decision_seconds_count", ())] >= 3
    assert seen[("bayes_sched_serve_estimate_seconds_count", ())] >= 3
    assert seen[("bayes_sched_serve_jobs", (("state", "running"),))] == 1
    assert seen[("bayes_sched_serve_jobs", (("state", "backoff"),))] == 1
    assert seen[("bayes_sched_serve_jobs", (("state", "done"),))] <= 1
    assert seen[("bayes_sched_serve_gpus", (("gpu_type", "cpu"),))] == 2
    assert seen[("bayes_sched_serve_gpus_allocated", (("gpu_type", "cpu"),))] == 2
    assert seen[("bayes_sched_serve_job_gpus", (("gpu_type", "cpu"), ("job_name", "tiny")))] == 2
    assert seen[("bayes_sched_serve_job_goodput", (("job_name", "tiny"),))] > 0
    assert seen[("bayes_sched_serve_job_epochs", (("job_name", "tiny"),))] > 0
    assert seen[("bayes_sched_serve_restarts_total", ())] >= 2  # the failure's and the growth's
    assert seen[("bayes_sched_serve_failures_total", ())] == 1
    assert seen[("bayes_sched_serve_last_round_timestamp_seconds", ())] > time.time() - 600
    counted = {dict(labels)["kind"]: value for (name, labels), value in seen.items()
               if name == "bayes_sched_serve_events_total"}
    assert counted["started"] == counted["retrying"] == counted["restarted"] == 1
    assert counted["submitted"] == 1 and counted["grown"] >= 1

    # The job's log says what it did (the client's lines), under an absolute path.
    log = run_cli("logs", "tiny", "--state", str(state))
    assert log.returncode == 0, log.stderr
    assert log.stderr.startswith(f"==> {state}/jobs/tiny/logs/attempt-")
    assert re.search(r"step \d+, epoch [\d.]+ of 2, loss [\d.e-]+, batch \d+x\d+x2", log.stdout)
    assert "restored the checkpoint at step" in log.stdout and "done at step" in log.stdout
    first = run_cli("logs", "tiny", "--attempt", "0", "--state", str(state))
    assert first.stdout == "first start: failing on purpose\n"

    # The service is gone: status says so (and since when), and left no lock behind.
    text = run_cli("status", "--state", str(state)).stdout
    assert text.startswith("serve: NOT running since ") and "stopped cleanly" in text
    assert "batch: LxMxR" in text and "goodput: predicted examples per second" in text
    assert not (state / LOCK_FILE).exists()
    assert json.loads(run_cli("status", "--state", str(state), "--json").stdout)["serve"][
        "state"] == "stopped"


def test_status_tells_a_killed_service_and_cleans_its_lock(tmp_path: Path) -> None:
    state = tmp_path / "state"
    store = StateStore(state)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (state / LOCK_FILE).write_text(f"{dead.pid}\n")  # what a SIGKILLed service leaves
    store.set_meta({"serve_pid": str(dead.pid), "serve_started": repr(time.time() - 600),
                    "serve_heartbeat": repr(time.time() - 300), "serve_interval": "30"})
    shown = run_cli("status", "--state", str(state))
    assert shown.returncode == 0, shown.stderr
    first, second = shown.stdout.splitlines()[:2]
    assert first.startswith("serve: NOT running since ") and "killed or crashed" in first
    assert second == f"serve: removed a stale serve.lock (pid {dead.pid} holds it no longer)"
    assert not (state / LOCK_FILE).exists()

    # A live holder of the lock is running, or stalled when its heartbeat is old.
    store.lock_for_service()
    store.set_meta({"serve_pid": str(os.getpid()), "serve_heartbeat": repr(time.time())})
    live = json.loads(run_cli("status", "--state", str(state), "--json").stdout)["serve"]
    assert live["state"] == "running" and live["pid"] == os.getpid()
    store.set_meta({"serve_heartbeat": repr(time.time() - 200)})  # rounds every 30 s
    assert run_cli("status", "--state", str(state)).stdout.startswith(
        f"serve: STALLED? pid {os.getpid()} holds the lock but last round 3.3 min ago")
    assert (state / LOCK_FILE).exists()  # a live service's lock stays
    store.close()
    assert not (state / LOCK_FILE).exists()


def test_events_and_logs_follow_what_is_appended(tmp_path: Path) -> None:
    from bayes_sched.client.protocol import replica_log_path
    from bayes_sched.service.events import Event

    state = tmp_path / "state"
    store = StateStore(state)
    assert run_cli("submit", str(_job_file(tmp_path, "j", FAIL_FIRST)), "--state",
                   str(state)).returncode == 0
    store.add_events([Event(time.time(), "j", "started", "first", {})])
    first_log = replica_log_path(store.jobs_dir / "j", 0, 0)
    first_log.parent.mkdir(parents=True)
    first_log.write_text("attempt 0 says hello\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    base = [sys.executable, "-m", "bayes_sched"]
    followers = {name: subprocess.Popen([*base, *argv, "--state", str(state), "--follow",
                                         "--poll", "0.1"], stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True, env=env)
                 for name, argv in (("events", ["events", "--job", "j"]),
                                    ("logs", ["logs", "j"]))}
    received: dict[str, list[str]] = defaultdict(list)

    def read(name: str) -> None:
        stream = followers[name].stdout
        assert stream is not None
        for line in stream:
            received[name].append(line.rstrip("\n"))

    readers = [threading.Thread(target=read, args=(name,), daemon=True) for name in followers]
    for reader in readers:
        reader.start()
    try:
        # Each phase waits on its own deadline: the followers' start (two interpreters importing
        # the package) may take most of a minute on a loaded 2-core machine.
        deadline = time.monotonic() + 120
        while (len(received["events"]) < 1 or len(received["logs"]) < 1) and \
                time.monotonic() < deadline:
            time.sleep(0.1)
        store.add_events([Event(time.time(), "j", "grown", "second", {}),
                          Event(time.time(), "other", "started", "not j's", {})])
        with first_log.open("a") as stream:
            stream.write("and goodbye\n")
        second_log = replica_log_path(store.jobs_dir / "j", 1, 0)
        second_log.write_text("attempt 1 starts\n")
        deadline = time.monotonic() + 60
        while (len(received["events"]) < 2 or len(received["logs"]) < 3) and \
                time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        for process in followers.values():
            process.terminate()
            process.wait(timeout=30)
    said = {name: process.stderr.read() if process.stderr else "" for name, process
            in followers.items()}
    assert [line.split(" UTC ", 1)[1] for line in received["events"]] == [
        "job j started: first", "job j grown: second"], said
    assert received["logs"] == ["attempt 0 says hello", "and goodbye", "attempt 1 starts"]


def test_serve_refuses_a_taken_prometheus_port_in_one_line(tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_cli("serve", "--state", str(tmp_path / "state"), "--gpus", "1",
                         "--prometheus", str(port), "--max-rounds", "1")
    assert result.returncode == 2
    assert result.stderr.strip() == (f"bayes-sched: error: --prometheus: Prometheus port {port} "
                                     "on 127.0.0.1 is already in use: expected a free port")
