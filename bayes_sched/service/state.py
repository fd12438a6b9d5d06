"""The service's state in one SQLite file (stdlib :mod:`sqlite3`, write-ahead log).

Tables: ``meta`` (the cluster's time origin, the backend), ``jobs`` (one row per job: its spec,
status, the record the cluster keeps of it as JSON: observations, gradient statistics, progress,
allocation, attempts, report offset, the handle of its running processes; and a cancel flag the
``cancel`` command sets), ``rounds`` (one row per scheduling round: time, decision, predictions).
``submit`` and ``cancel`` write rows the service takes up at its next round, so they need no
server. Each round's changes are one transaction, so a service killed at any point leaves the
state of its last transaction, whole.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

from bayes_sched.backends.job_spec import RealJobSpec
from bayes_sched.errors import InputError

STATE_FILE = "state.db"
LOCK_FILE = "serve.lock"
JOBS_DIR = "jobs"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (
    name TEXT PRIMARY KEY,
    spec TEXT NOT NULL,
    submitted REAL NOT NULL,
    status TEXT NOT NULL DEFAULT 'submitted',
    record TEXT,
    cancel INTEGER NOT NULL DEFAULT 0,
    updated REAL
);
CREATE TABLE IF NOT EXISTS rounds (
    round INTEGER PRIMARY KEY,
    time REAL NOT NULL,
    allocations TEXT NOT NULL,
    predictions TEXT NOT NULL,
    decision_seconds REAL
);
"""


class StateStore:
    """The state file of one service, in directory ``root`` (made where missing)."""

    def __init__(self, root: str | Path, create: bool = True) -> None:
        self.root = Path(root)
        self._lock: TextIO | None = None
        path = self.root / STATE_FILE
        if not path.exists() and not create:
            raise InputError("no scheduler state here: expected the --state directory of "
                             "'bayes-sched serve' (or submit a job first)", self.root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.jobs_dir.mkdir(exist_ok=True)
        self.connection = sqlite3.connect(path, timeout=30.0, isolation_level=None)
        self.connection.execute("PRAGMA journal_mode=WAL")
        self.connection.execute("PRAGMA synchronous=FULL")
        self.connection.executescript(_SCHEMA)

    def lock_for_service(self) -> None:
        """Make this process the state directory's only service (an advisory lock, released
        by the kernel when the process ends, SIGKILL included).

        Raises:
            InputError: another service holds it (two would start every job twice).
        """
        import fcntl

        stream = (self.root / LOCK_FILE).open("a+")
        try:
            fcntl.flock(stream.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            stream.seek(0)
            holder = stream.read().strip() or "?"
            stream.close()
            raise InputError(f"another 'bayes-sched serve' (pid {holder}) uses this state "
                             "directory: expected one service per --state", self.root) from None
        stream.seek(0)
        stream.truncate()
        stream.write(f"{os.getpid()}\n")
        stream.flush()
        self._lock = stream  # held open for the life of the process

    @property
    def jobs_dir(self) -> Path:
        return self.root / JOBS_DIR

    def close(self) -> None:
        """Close the state file (and give up the service lock, if this store holds it)."""
        self.connection.close()
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction (taken at once, so concurrent writers queue)."""
        self.connection.execute("BEGIN IMMEDIATE")
        try:
            yield self.connection
        except BaseException:
            self.connection.execute("ROLLBACK")
            raise
        self.connection.execute("COMMIT")

    # --- meta ---------------------------------------------------------------------------------

    def meta(self, key: str) -> str | None:
        row = self.connection.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def epoch(self) -> float:
        """Wall-clock seconds that the cluster's time 0 stands for (set on first use)."""
        with self.transaction() as db:
            row = db.execute("SELECT value FROM meta WHERE key = 'epoch'").fetchone()
            if row is not None:
                return float(row[0])
            now = time.time()
            db.execute("INSERT INTO meta VALUES ('epoch', ?)", (repr(now),))
            return now

    # --- jobs ---------------------------------------------------------------------------------

    def submit(self, spec: RealJobSpec) -> None:
        """Add a job for the service to take up; raises :class:`InputError` for a taken name."""
        with self.transaction() as db:
            if db.execute("SELECT 1 FROM jobs WHERE name = ?", (spec.name,)).fetchone():
                raise InputError(f"job '{spec.name}' exists already: expected a new name "
                                 "(set 'name' in the job file)", self.root)
            db.execute("INSERT INTO jobs (name, spec, submitted) VALUES (?, ?, ?)",
                       (spec.name, json.dumps(spec.to_dict()), time.time()))

    def request_cancel(self, name: str) -> str:
        """Flag a job for cancelling; returns its status. Raises :class:`InputError` for an
        unknown job."""
        with self.transaction() as db:
            row = db.execute("SELECT status FROM jobs WHERE name = ?", (name,)).fetchone()
            if row is None:
                raise InputError(f"no job '{name}': expected one 'bayes-sched status' lists",
                                 self.root)
            db.execute("UPDATE jobs SET cancel = 1 WHERE name = ?", (name,))
            return str(row[0])

    def new_submissions(self) -> list[tuple[RealJobSpec, float]]:
        """Jobs submitted but not yet taken up: ``(spec, wall-clock submission time)``."""
        rows = self.connection.execute(
            "SELECT spec, submitted FROM jobs WHERE record IS NULL ORDER BY submitted, name")
        return [(RealJobSpec.from_dict(json.loads(spec)), float(t)) for spec, t in rows]

    def cancel_requests(self) -> list[str]:
        rows = self.connection.execute(
            "SELECT name FROM jobs WHERE cancel = 1 AND record IS NOT NULL")
        return [str(name) for (name,) in rows]

    def records(self) -> list[dict[str, Any]]:
        """The records the service saved (jobs it had taken up)."""
        rows = self.connection.execute(
            "SELECT record FROM jobs WHERE record IS NOT NULL ORDER BY submitted, name")
        return [json.loads(record) for (record,) in rows]

    def save(self, records: Sequence[dict[str, Any]], cancelled: Sequence[str] = (),
             round_row: tuple[int, float, Any, Any, float | None] | None = None) -> None:
        """Write every job's record (and a round's row) in one transaction."""
        now = time.time()
        with self.transaction() as db:
            db.executemany("UPDATE jobs SET record = ?, status = ?, updated = ? WHERE name = ?",
                           [(json.dumps(r), r["status"], now, r["spec"]["name"])
                            for r in records])
            db.executemany("UPDATE jobs SET cancel = 0 WHERE name = ?",
                           [(name,) for name in cancelled])
            if round_row is not None:
                number, t, allocations, predictions, seconds = round_row
                db.execute("INSERT OR REPLACE INTO rounds VALUES (?, ?, ?, ?, ?)",
                           (number, t, json.dumps(allocations), json.dumps(predictions),
                            seconds))

    def jobs(self) -> list[dict[str, Any]]:
        """Every job: name, status, submission time, spec and record (``None`` before the
        service took it up)."""
        rows = self.connection.execute(
            "SELECT name, status, submitted, spec, record, cancel FROM jobs "
            "ORDER BY submitted, name")
        return [{"name": n, "status": s, "submitted": t, "spec": json.loads(spec),
                 "record": json.loads(rec) if rec else None, "cancel": bool(c)}
                for n, s, t, spec, rec, c in rows]

    def last_round(self) -> dict[str, Any] | None:
        row = self.connection.execute(
            "SELECT round, time, allocations, predictions, decision_seconds FROM rounds "
            "ORDER BY round DESC LIMIT 1").fetchone()
        if row is None:
            return None
        return {"round": row[0], "time": row[1], "allocations": json.loads(row[2]),
                "predictions": json.loads(row[3]), "decision_seconds": row[4]}
