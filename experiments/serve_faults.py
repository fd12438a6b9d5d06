"""Load and faults for ``bayes-sched serve`` on the local backend (issue 40, item 6): real
processes throughout (the command line's ``submit``, ``serve`` and ``status``; jobs that speak the
job-directory protocol, ``examples/protocol_job.py``, no PyTorch), one SQLite state file.

Scenarios (each in a folder of its own):

- ``load``: ``--jobs`` job files submitted by ``--submitters`` concurrent workers, each running
  ``python -m bayes_sched submit`` processes one after another (so that many processes race on
  one fresh state file); then one ``serve --exit-when-idle`` runs them all.
- ``kills``: ``--kill-jobs`` jobs under Pollux on 4 logical GPUs; ``serve`` is SIGKILLed
  ``--kills`` times at seeded instants and restarted after each. The instants come in three
  kinds, in turn: ``random`` (a seeded delay after the start), ``reallocation`` (right after the
  log line announcing that running jobs move, before the one announcing that they moved) and
  ``transaction`` (while ``serve`` holds the state file's write lock: a probe's ``BEGIN
  IMMEDIATE`` finds it taken; ``serve`` runs with ``BAYES_SCHED_TEST_HOLD_SAVE`` so that each of
  its saves holds the lock a while, :mod:`bayes_sched.service.state`) and ``start`` (as soon as a
  job's process started by this serve marks its start, the hold on: between the start and the
  save that records it). A kill counts as landed mid-reallocation / mid-transaction where the
  condition held when the signal was sent.
- ``flood``: one job writes ``--flood-mb`` MB to its log as fast as it can, next to a normal job:
  ``serve`` must keep its rounds going and both jobs finish. What was chosen: ``serve`` does not
  cap a job's log. A replica's stdout and stderr are a file the kernel writes (the launcher hands
  the job the file, no pipe goes through ``serve``), and ``serve`` reads at most a 2000-byte tail
  of a log (:func:`~bayes_sched.client.protocol.log_tail`), so a flood costs disk space, not the
  service's time or memory; a flood that fills the disk is the full-disk case below.
- ``full disk``: ``serve`` (and so its jobs) under ``RLIMIT_FSIZE`` with ``SIGXFSZ`` ignored, so a
  write past the limit fails as on a full disk; ``serve`` must stop with one line (or go on),
  the state stay readable, and a ``serve`` without the limit finish every job.

Checked at the end of each: every submitted job is in the state exactly once and final
(nothing lost), every failure has a one-line reason in ``status``, and nothing ran twice.
*Run twice* is defined on the marker file the jobs append to (``protocol_job.py --marker``):
(a) a replica started while another live process of the same job and rank held the rank's lock
(two live copies of one rank at once), or (b) a replica of a job started after that job had
reported ``done`` (a finished job run again). Restarts from a checkpoint after a kill or a
reallocation are legitimate new attempts, neither (a) nor (b). Nor is a replica of the very start
that reported ``done`` whose own ``begin`` line comes after the ``done``: the replicas of one start
are launched together, but a follower's interpreter may take longer to come up (on a loaded
machine) than rank 0, resuming near the end, takes to finish; such a follower finds the start
finished and ends at once. Every new start has a rank 0, so a finished job run again is still
caught by its rank 0.

    python experiments/serve_faults.py [--quick] [--only load,kills,flood,disk] [--seed N]
        [--workdir DIR] [--json]

Run it under ``flock /work/tools/heavy.lock timeout ...`` on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import resource
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
JOB_SCRIPT = ROOT / "examples" / "protocol_job.py"
HOLD_VARIABLE = "BAYES_SCHED_TEST_HOLD_SAVE"
KILL_KINDS = ("random", "reallocation", "transaction", "start")
#: Examples per epoch of the kill scenario's jobs (a minute or so each on a loaded machine).
KILL_EXAMPLES = 60000
REALLOCATING = re.compile(r"reallocating (\S+)")


@dataclass
class Outcome:
    """What one scenario found (counts; ``problems``: one line per broken invariant)."""

    scenario: str
    submitted: int = 0
    finished: int = 0
    failed: int = 0
    lost: int = 0
    run_twice: int = 0
    attempts: int = 0
    kills: int = 0
    kills_by_kind: dict[str, int] = field(default_factory=dict)
    mid_transaction: int = 0
    mid_reallocation: int = 0
    reasons: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0


def cli(*args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    """``python -m bayes_sched ARGS`` in a subprocess (text output)."""
    return subprocess.run([sys.executable, "-m", "bayes_sched", *args], capture_output=True,
                          text=True, timeout=timeout, check=False, cwd=ROOT)


def write_job(folder: Path, name: str, marker: Path, examples: int, step_seconds: float,
              extra: Sequence[str] = (), max_replicas: int = 4) -> Path:
    """A job file running ``protocol_job.py`` (absolute paths throughout)."""
    args = ["--marker", str(marker), "--examples", str(examples),
            "--step-seconds", str(step_seconds), *extra]
    path = folder / f"{name}.toml"
    path.write_text(f'name = "{name}"\nscript = "{JOB_SCRIPT}"\nargs = {json.dumps(args)}\n'
                    f'python = "{sys.executable}"\ninit_batch_size = 16\nmax_batch_size = 256\n'
                    f"max_local_bsz = 64\ntarget_epochs = 1\nmax_replicas = {max_replicas}\n")
    return path


def submit_concurrently(files: Sequence[Path], state: Path, workers: int) -> list[str]:
    """Submit ``files`` from ``workers`` concurrent workers (one ``submit`` process at a time
    each); returns one line per submission that did not say ``submitted NAME``."""
    def one(path: Path) -> str | None:
        done = cli("submit", str(path), "--state", str(state))
        if done.returncode == 0 and done.stdout.strip() == f"submitted {path.stem}":
            return None
        return f"submit {path.stem}: exit {done.returncode}: {done.stderr.strip()[-300:]}"

    with ThreadPoolExecutor(workers) as pool:
        return [line for line in pool.map(one, files) if line is not None]


def serve_command(state: Path, gpus: int, interval: float, policy: str) -> list[str]:
    return [sys.executable, "-m", "bayes_sched", "serve", "--state", str(state),
            "--gpus", str(gpus), "--interval", str(interval), "--policy", policy,
            "--restart-delay", "1", "--checkpoint-timeout", "5", "--stop-grace", "5",
            "--report-timeout", "60", "--backoff", "0.5", "--exit-when-idle"]


def start_serve(command: list[str], log: Path, env: dict[str, str] | None = None,
                preexec: Callable[[], None] | None = None) -> subprocess.Popen[bytes]:
    with log.open("ab") as stream:
        return subprocess.Popen(command, stdout=stream, stderr=subprocess.STDOUT, cwd=ROOT,
                                env={**os.environ, **(env or {})}, preexec_fn=preexec)


def finish_serve(server: subprocess.Popen[bytes], timeout: float) -> int | None:
    """Wait for ``serve`` to exit (its status), killing it past ``timeout`` (``None``)."""
    try:
        return server.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()
        return None


def read_marker(marker: Path) -> list[dict[str, Any]]:
    if not marker.exists():
        return []
    return [json.loads(line) for line in marker.read_text().splitlines() if line.strip()]


def run_twice(events: Sequence[dict[str, Any]]) -> list[str]:
    """The marker's events that break "nothing run twice" (see the module's documentation)."""
    found = []
    done_by: dict[str, tuple[int, int]] = {}  # job -> (attempt, rank) of its first 'done'
    for event in sorted(events, key=lambda e: e["time"]):
        job = event["job"]
        if event["event"] == "end" and event.get("status") == "done":
            done_by.setdefault(job, (event["attempt"], event["rank"]))
        if event["event"] != "begin":
            continue
        if event["overlap"]:
            found.append(f"{job} rank {event['rank']} attempt {event['attempt']} "
                         f"(pid {event['pid']}) started while another copy was alive")
        if job in done_by:
            attempt, rank = done_by[job]
            if event["attempt"] != attempt or event["rank"] == rank:  # not a late follower
                found.append(f"{job} started again (attempt {event['attempt']}, rank "
                             f"{event['rank']}) after it was done")
    return found


def check_state(state: Path, names: Sequence[str], marker: Path, outcome: Outcome) -> None:
    """Fill ``outcome``'s counts from ``status --json`` and the marker; a broken invariant is a
    line in ``outcome.problems``."""
    shown = cli("status", "--state", str(state), "--json")
    if shown.returncode != 0:
        outcome.problems.append(f"status: exit {shown.returncode}: {shown.stderr.strip()}")
        return
    jobs = json.loads(shown.stdout)["jobs"]
    counts = Counter(job["name"] for job in jobs)
    outcome.submitted = len(names)
    for name in names:
        if counts[name] != 1:
            outcome.problems.append(f"job {name} is in the state {counts[name]} times")
    by_name = {job["name"]: job for job in jobs}
    for name in names:
        job = by_name.get(name)
        status = job["status"] if job else "missing"
        if status == "done":
            outcome.finished += 1
            continue
        reason = ((job or {}).get("record") or {}).get("reason") or ""
        if status in ("failed", "cancelled") and reason.strip():
            outcome.failed += 1
            outcome.reasons.append(f"{name}: {reason.splitlines()[0]}")
            continue
        outcome.lost += 1
        outcome.problems.append(f"job {name} lost: {status} {reason.splitlines()[:1]}")
    table = cli("status", "--state", str(state))
    if table.returncode != 0:
        outcome.problems.append(f"status table: exit {table.returncode}")
    events = read_marker(marker)
    outcome.attempts = sum(e["event"] == "begin" and e["rank"] == 0 for e in events)
    twice = run_twice(events)
    outcome.run_twice = len(twice)
    outcome.problems.extend(twice)


def kill_leftovers(marker: Path) -> int:
    """SIGKILL every job process of the marker still alive (a test must not leave any)."""
    killed = 0
    for event in read_marker(marker):
        if event["event"] != "begin":
            continue
        try:
            cmdline = Path(f"/proc/{event['pid']}/cmdline").read_bytes()
        except OSError:
            continue
        if str(marker).encode() in cmdline:
            try:
                os.kill(event["pid"], signal.SIGKILL)
                killed += 1
            except ProcessLookupError:
                pass
    return killed


# --- scenarios -----------------------------------------------------------------------------------

def scenario_load(work: Path, jobs: int, workers: int, gpus: int, timeout: float) -> Outcome:
    """``jobs`` submitted by ``workers`` concurrent workers to a fresh state; one serve."""
    outcome = Outcome("load")
    state, marker = work / "state", work / "marker.jsonl"
    files = [write_job(work, f"load-{i:03d}", marker, examples=64, step_seconds=0.005,
                       max_replicas=2) for i in range(jobs)]
    outcome.problems.extend(submit_concurrently(files, state, workers))
    log = work / "serve.log"
    serve_to_the_end(serve_command(state, gpus, 1.0, "pollux"), log, timeout, "serve", outcome)
    check_state(state, [f.stem for f in files], marker, outcome)
    kill_leftovers(marker)
    return outcome


def serve_to_the_end(command: list[str], log: Path, timeout: float, what: str,
                     outcome: Outcome) -> None:
    """Run ``command`` (a serve) until it exits; a non-zero exit is a problem of ``outcome``,
    named ``what`` with the log's last line."""
    status = finish_serve(start_serve(command, log), timeout)
    if status != 0:
        outcome.problems.append(f"{what} exited {status}: {_last_line(log)}")


def _last_line(log: Path) -> str:
    lines = log.read_text(errors="replace").strip().splitlines()
    return lines[-1] if lines else ""


def _write_locked(state: Path) -> bool:
    """Whether a writer holds the state file's write lock now (a probe's ``BEGIN IMMEDIATE``
    without waiting)."""
    connection = sqlite3.connect(state / "state.db", timeout=0, isolation_level=None)
    try:
        connection.execute("BEGIN IMMEDIATE")
        connection.execute("ROLLBACK")
        return False
    except sqlite3.OperationalError:
        return True
    finally:
        connection.close()


def _mid_reallocation(log: bytes) -> bool:
    """Whether the log's last reallocation had begun and not ended."""
    text = log.decode(errors="replace")
    moves = [m.start() for m in REALLOCATING.finditer(text)]
    return bool(moves) and "reallocated" not in text[moves[-1]:]


def _await_kill_instant(kind: str, server: subprocess.Popen[bytes], log: Path, offset: int,
                        state: Path, rng: random.Random, limit: float,
                        marker: tuple[Path, int] | None = None) -> bool:
    """Wait for an instant of ``kind`` (at most ``limit`` seconds); returns whether the instant
    of that kind was reached (``False``: the limit passed, or serve exited, first)."""
    deadline = time.monotonic() + limit
    if kind == "random":
        time.sleep(rng.uniform(0.3, min(limit, 4.0)))
        return True
    time.sleep(rng.uniform(0.0, 1.0))
    while time.monotonic() < deadline and server.poll() is None:
        if kind == "transaction" and _write_locked(state):
            return True
        if kind == "reallocation" and _mid_reallocation(log.read_bytes()[offset:]):
            return True
        if kind == "start" and marker is not None and marker[0].exists() \
                and b'"begin"' in marker[0].read_bytes()[marker[1]:]:
            return True
        time.sleep(0.005)
    return False


def scenario_kills(work: Path, jobs: int, kills: int, seed: int, timeout: float,
                   examples: int = KILL_EXAMPLES) -> Outcome:
    """``kills`` SIGKILLs of serve at seeded instants, a restart after each; the jobs come in
    four waves (before the first start, then before a kill aimed at a reallocation after each
    further quarter of the kills), so that Pollux grows jobs onto free GPUs and shrinks them
    for newcomers: reallocations throughout."""
    outcome = Outcome("kills")
    rng = random.Random(seed)
    state, marker, log = work / "state", work / "marker.jsonl", work / "serve.log"
    files = [write_job(work, f"kill-{i:02d}", marker, examples=examples, step_seconds=0.02,
                       extra=["--checkpoint-seconds", "0.3"]) for i in range(jobs)]
    waves = [files[i::4] for i in range(4)]
    command = serve_command(state, 4, 1.0, "pollux")
    kinds: Counter[str] = Counter()
    for number in range(kills):
        kind = KILL_KINDS[number % len(KILL_KINDS)]
        if waves and number >= kills * (4 - len(waves)) / 4 and (
                kind == "reallocation" or len(waves) == 4):
            outcome.problems.extend(submit_concurrently(waves.pop(0), state, 4))
        offset = log.stat().st_size if log.exists() else 0
        hold = {HOLD_VARIABLE: {"transaction": "0.2", "start": "1.0"}[kind]} \
            if kind in ("transaction", "start") else {}
        server = start_serve(command, log, env=hold)
        marked = (marker, marker.stat().st_size if marker.exists() else 0)
        reached = _await_kill_instant(kind, server, log, offset, state, rng, limit=30.0,
                                      marker=marked)
        if server.poll() is not None:
            outcome.notes.append(f"kill {number}: serve had exited ({server.returncode}) "
                                 f"before the {kind} instant")
            if server.returncode != 0:
                outcome.problems.append(f"serve exited {server.returncode}: {_last_line(log)}")
            continue
        transaction = _write_locked(state)
        server.send_signal(signal.SIGKILL)
        server.wait()
        outcome.kills += 1
        kinds[kind if reached else f"{kind} (not reached)"] += 1
        outcome.mid_transaction += transaction
        outcome.mid_reallocation += _mid_reallocation(log.read_bytes()[offset:])
    for wave in waves:
        outcome.problems.extend(submit_concurrently(wave, state, 4))
    outcome.kills_by_kind = dict(kinds)
    serve_to_the_end(command, log, timeout, "final serve", outcome)
    check_state(state, [f.stem for f in files], marker, outcome)
    kill_leftovers(marker)
    return outcome


def scenario_flood(work: Path, megabytes: int, timeout: float) -> Outcome:
    """A job that writes ``megabytes`` MB to its log at once, next to a normal one."""
    outcome = Outcome("flood")
    state, marker, log = work / "state", work / "marker.jsonl", work / "serve.log"
    files = [write_job(work, "flood", marker, 256, 0.01, ["--flood-mb", str(megabytes)]),
             write_job(work, "calm", marker, 256, 0.01)]
    outcome.problems.extend(submit_concurrently(files, state, 2))
    serve_to_the_end(serve_command(state, 2, 1.0, "pollux"), log, timeout, "serve", outcome)
    check_state(state, [f.stem for f in files], marker, outcome)
    logs = sorted((state / "jobs" / "flood" / "logs").glob("*.log"))
    size = sum(p.stat().st_size for p in logs)
    outcome.notes.append(f"flood job's logs: {len(logs)} file(s), {size / 2**20:.1f} MB on disk")
    rounds = len(re.findall(r"round", log.read_text(errors="replace")))
    outcome.notes.append(f"serve log: {rounds} round lines")
    kill_leftovers(marker)
    return outcome


def _file_size_limit(limit: int) -> Callable[[], None]:
    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a failed write, as on a full disk
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


def scenario_disk(work: Path, limits_kb: Sequence[int], timeout: float) -> Outcome:
    """serve (and so its jobs) under ``RLIMIT_FSIZE``, once per limit; then serve without."""
    outcome = Outcome("full disk")
    state, marker, log = work / "state", work / "marker.jsonl", work / "serve.log"
    files = [write_job(work, f"disk-{i}", marker, 4096, 0.01) for i in range(3)]
    outcome.problems.extend(submit_concurrently(files, state, 3))
    for limit in limits_kb:
        server = start_serve(serve_command(state, 2, 1.0, "pollux"), log,
                             preexec=_file_size_limit(limit * 1024))
        status = finish_serve(server, timeout)
        last = _last_line(log)
        outcome.notes.append(f"serve under a {limit} KiB file size limit exited {status}: {last}")
        if status not in (0, 2) or "Traceback" in log.read_text(errors="replace") \
                or "internal error" in last:
            outcome.problems.append(f"serve under a {limit} KiB limit: exit {status}, {last}")
        checked = cli("status", "--state", str(state))
        if checked.returncode != 0:
            outcome.problems.append(f"state after the full disk: status exit "
                                    f"{checked.returncode}: {checked.stderr.strip()}")
    serve_to_the_end(serve_command(state, 2, 1.0, "pollux"), log, timeout,
                     "serve after the full disk", outcome)
    check_state(state, [f.stem for f in files], marker, outcome)
    kill_leftovers(marker)
    return outcome


# --- the command line ----------------------------------------------------------------------------

def print_outcomes(outcomes: Sequence[Outcome], cpu_seconds: float) -> None:
    columns = ("scenario", "submitted", "finished", "failed", "lost", "run_twice", "attempts",
               "kills", "mid_transaction", "mid_reallocation", "seconds")
    print(" ".join(f"{c:>16}" for c in columns))
    for outcome in outcomes:
        row = asdict(outcome)
        print(" ".join(f"{row[c]:>16.1f}" if isinstance(row[c], float) else f"{row[c]:>16}"
                       for c in columns))
    for outcome in outcomes:
        for line in (f"kills by kind: {outcome.kills_by_kind}" if outcome.kills else None,
                     *outcome.notes, *outcome.reasons[:5],
                     *(f"PROBLEM: {p}" for p in outcome.problems)):
            if line:
                print(f"{outcome.scenario}: {line}")
    print(f"CPU seconds (this process and its children): {cpu_seconds:.1f}")


def check_marker(path: Path) -> int:
    """``--check-marker``: print :func:`run_twice`'s findings on the marker file ``path``; the
    exit status is 1 where there are any, 2 where the file is not a marker."""
    try:
        found = run_twice(read_marker(path))
    except (OSError, ValueError, KeyError, TypeError) as error:
        print(f"serve_faults: error: {path}: not a marker file ({error})", file=sys.stderr)
        return 2
    for line in found:
        print(line)
    return 1 if found else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="16 jobs from 4 workers, 4 kills (one per kind) of 4 shorter "
                             "jobs, a 20 MB flood (the test's size)")
    parser.add_argument("--only", default="load,kills,flood,disk",
                        help="scenarios to run, comma-separated (default: all)")
    parser.add_argument("--jobs", type=int, default=None, help="jobs of the load (default 200)")
    parser.add_argument("--submitters", type=int, default=None, help="default 8")
    parser.add_argument("--kills", type=int, default=None, help="default 30")
    parser.add_argument("--kill-jobs", type=int, default=None, help="default 12")
    parser.add_argument("--flood-mb", type=int, default=None, help="default 100")
    parser.add_argument("--disk-limits-kb", default="32,160",
                        help="RLIMIT_FSIZE of each full-disk serve, KiB, comma-separated "
                             "(default 32: at its start, 160: after some rounds)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timeout", type=float, default=900.0,
                        help="seconds each serve gets to finish its jobs")
    parser.add_argument("--workdir", type=Path, default=None,
                        help="keep the scenarios' folders here (default: a temporary folder)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--check-marker", type=Path, default=None, metavar="FILE",
                        help="run no scenario: print the run-twice findings of the marker "
                             "FILE (one line each; exit 1 where there are any)")
    args = parser.parse_args(argv)
    if args.check_marker is not None:
        return check_marker(args.check_marker)
    quick = args.quick
    jobs = args.jobs or (16 if quick else 200)
    submitters = args.submitters or (4 if quick else 8)
    kills = args.kills if args.kills is not None else (4 if quick else 30)
    kill_jobs = args.kill_jobs or (4 if quick else 12)
    flood_mb = args.flood_mb or (20 if quick else 100)
    runs: dict[str, Callable[[Path], Outcome]] = {
        "load": lambda w: scenario_load(w, jobs, submitters, 4, args.timeout),
        "kills": lambda w: scenario_kills(w, kill_jobs, kills, args.seed, args.timeout,
                                          8000 if quick else KILL_EXAMPLES),
        "flood": lambda w: scenario_flood(w, flood_mb, args.timeout),
        "disk": lambda w: scenario_disk(w, [int(v) for v in args.disk_limits_kb.split(",")],
                                        args.timeout)}
    only = [name for name in args.only.split(",") if name]
    unknown = [name for name in only if name not in runs]
    if unknown:
        parser.error(f"--only: unknown scenario {unknown[0]!r}; expected {', '.join(runs)}")
    with tempfile.TemporaryDirectory(prefix="serve-faults-") as scratch:
        base = args.workdir or Path(scratch)
        outcomes = []
        for name in only:
            work = base / name
            work.mkdir(parents=True, exist_ok=True)
            began = time.monotonic()
            outcome = runs[name](work)
            outcome.seconds = time.monotonic() - began
            outcomes.append(outcome)
    usage = [resource.getrusage(who) for who in (resource.RUSAGE_SELF,
                                                 resource.RUSAGE_CHILDREN)]
    cpu = sum(u.ru_utime + u.ru_stime for u in usage)
    if args.json:
        print(json.dumps({"outcomes": [asdict(o) for o in outcomes], "cpu_seconds": cpu},
                         indent=1))
    else:
        print_outcomes(outcomes, cpu)
    return 1 if any(o.problems for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
