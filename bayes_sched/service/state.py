"""The service's state in one SQLite file (stdlib :mod:`sqlite3`, write-ahead log).

Tables (:mod:`bayes_sched.service.state_schema`): ``meta`` (the cluster's time origin, the
backend, the service's heartbeat and the tenants it serves), ``jobs`` (one row per job: its spec,
tenant, status, the record the cluster keeps of it as JSON: observations, gradient statistics,
progress, allocation, attempts, report offset, the handle of its running processes; and a cancel
flag the ``cancel`` command sets), ``rounds`` (one row per scheduling round: time, decision,
predictions), ``events``. ``submit`` and ``cancel`` write rows the
service takes up at its next round, so they need no server. Each round's changes are one
transaction, so a service killed at any point leaves the state of its last transaction, whole.

Opening a state checks it first (:mod:`bayes_sched.service.state_check`): a damaged file,
another program's, one of a newer schema, or an empty one (unless ``init``) is refused with one
line naming it; one of an older schema is migrated. A new state file is written whole under a
temporary name and then linked into place, so a state file exists complete or not at all (and
two processes creating it at once keep one). The folder and the jobs folder are made 0700 and
the files 0600; ``serve`` refuses a state others can write
(:mod:`bayes_sched.service.state_trust`). ``bayes-sched state check`` and ``state repair``
(:mod:`bayes_sched.service.state_repair`) diagnose and salvage a damaged file.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, TextIO

from bayes_sched.backends.job_spec import RealJobSpec
from bayes_sched.errors import InputError
from bayes_sched.service.events import Event
from bayes_sched.service.state_check import (
    ACCESS_NEEDED,
    EMPTY,
    OLDER,
    STATE_FILE,
    access_problem,
    diagnose,
    repair_hint,
)
from bayes_sched.service.state_schema import create_schema, migrate
from bayes_sched.service.state_trust import check_private_state

__all__ = ["JOBS_DIR", "LOCK_FILE", "STATE_FILE", "StateStore", "create_state_file",
           "fsync_folder", "hold_service_lock", "new_state_file", "probe_service_lock",
           "release_service_lock"]

LOCK_FILE = "serve.lock"
#: ``meta`` keys of the running service: its pid, start, round interval (seconds), the
#: wall-clock time of its last round and of its clean stop (all seconds since the Unix epoch).
SERVE_PID, SERVE_STARTED, SERVE_INTERVAL = "serve_pid", "serve_started", "serve_interval"
HEARTBEAT, SERVE_STOPPED = "serve_heartbeat", "serve_stopped"
#: ``meta`` key of the tenants the running (or last) service serves, as JSON
#: (:func:`bayes_sched.service.tenants.tenants_meta`); absent where it serves none.
SERVE_TENANTS = "serve_tenants"
JOBS_DIR = "jobs"
#: Seconds a command waits for another's write transaction before it gives up.
BUSY_TIMEOUT = 30.0
PRIVATE_FILE = 0o600
PRIVATE_FOLDER = 0o700


def fsync_folder(folder: Path) -> None:
    """Make a folder's entries (a file linked or renamed in) durable."""
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def new_state_file(folder: Path, prefix: str) -> Path:
    """A new, private (0600) state file of the current schema in ``folder``, under a name of
    its own starting with ``prefix`` (no other process writes it); synced to disk."""
    for attempt in range(100):
        path = folder / f"{prefix}-{os.getpid()}-{attempt}"
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE))
            break
        except FileExistsError:
            continue
    else:
        raise InputError(f"cannot pick a new file name like {prefix}-{os.getpid()}-N", folder)
    try:
        connection = sqlite3.connect(path, isolation_level=None)
        try:
            connection.execute("PRAGMA journal_mode=WAL")  # kept in the file's header
            create_schema(connection)
        finally:
            connection.close()  # checkpoints: the file alone holds everything
        with path.open("rb") as stream:
            os.fsync(stream.fileno())
    except BaseException:  # e.g. a full disk: leave nothing half-made behind
        for suffix in ("", "-wal", "-shm"):
            with suppress(FileNotFoundError):
                os.unlink(f"{path}{suffix}")
        raise
    return path


def create_state_file(path: Path, replace_empty: bool = False) -> None:
    """Put a new, empty state at ``path``: written whole under another name, then linked into
    place. Where another process did so first, its file is kept. With ``replace_empty`` an
    existing empty file (0 bytes or no tables: checked by the caller) is replaced."""
    fresh = new_state_file(path.parent, f".{path.name}.new")
    try:
        if replace_empty:
            os.replace(fresh, path)
        else:
            with suppress(FileExistsError):
                os.link(fresh, path)
    finally:
        with suppress(FileNotFoundError):
            fresh.unlink()
    fsync_folder(path.parent)


def hold_service_lock(root: Path, refusal: str) -> TextIO:
    """Take the state folder's service lock (an advisory lock, released by the kernel when the
    process ends, SIGKILL included) and write this process's id into it; the stream returned
    holds it until closed (:func:`release_service_lock` also removes the file).

    The lock is the file the path names when it is taken: where another process removed the
    file meanwhile (a stale lock cleaned by ``status``, a service's exit), it is opened again,
    so two processes never hold locks on two files of one name.

    Args:
        root: the state folder.
        refusal: the message when another process holds it; ``{pid}`` is replaced by its id.

    Raises:
        InputError: another process holds it.
    """
    import fcntl

    path = root / LOCK_FILE
    for _ in range(100):
        try:
            stream = os.fdopen(os.open(path, os.O_RDWR | os.O_CREAT, PRIVATE_FILE), "r+")
        except OSError as error:
            raise InputError(f"cannot open the service lock: {error.strerror}", path) from None
        try:
            fcntl.flock(stream.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = stream.read().strip() or "?"
            stream.close()
            raise InputError(refusal.format(pid=holder), root) from None
        if _same_file(stream, path):
            break
        stream.close()  # removed (or replaced) before we locked it: lock the file there now
    else:
        raise InputError("cannot take the service lock: it is removed as often as taken", path)
    stream.seek(0)
    stream.truncate()
    stream.write(f"{os.getpid()}\n")
    stream.flush()
    return stream


def _same_file(stream: TextIO, path: Path) -> bool:
    """Whether ``path`` still names the file ``stream`` has open."""
    try:
        named = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(stream.fileno())
    return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)


def release_service_lock(stream: TextIO, root: Path) -> None:
    """Remove the service lock ``stream`` holds (:func:`hold_service_lock`) and give it up: a
    stopped service leaves no ``serve.lock`` behind."""
    with suppress(FileNotFoundError):
        if _same_file(stream, root / LOCK_FILE):
            os.unlink(root / LOCK_FILE)
    stream.close()


def probe_service_lock(root: Path) -> tuple[int | None, int | None]:
    """Who holds the state folder's service lock: ``(pid of the running service, None)``, or
    ``(None, pid)`` where a lock file was left by a process that no longer holds it (a service
    killed with SIGKILL: the kernel dropped its lock, the file stayed; it is removed here while
    locked, and :func:`hold_service_lock` never keeps a removed file), or ``(None, None)`` where
    there is none. A pid the file does not hold reads as ``-1``."""
    import fcntl

    path = root / LOCK_FILE
    try:
        stream = os.fdopen(os.open(path, os.O_RDWR), "r+")
    except FileNotFoundError:
        return None, None
    except OSError as error:
        raise InputError(f"cannot open the service lock: {error.strerror}", path) from None
    with stream:
        text = stream.read().strip()
        pid = int(text) if text.isdigit() else -1
        try:
            fcntl.flock(stream.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return pid, None
        if not _same_file(stream, path):  # a service removed it on its way out
            return None, None
        stream.seek(0)
        pid = int(text) if (text := stream.read().strip()).isdigit() else -1
        os.unlink(path)
        return None, pid


def _write_meta(db: sqlite3.Connection, values: Mapping[str, str | None]) -> None:
    for key, value in values.items():
        if value is None:
            db.execute("DELETE FROM meta WHERE key = ?", (key,))
        else:
            db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, value))


def _insert_events(db: sqlite3.Connection, events: Sequence[Event]) -> None:
    db.executemany("INSERT INTO events (time, job, kind, message, detail) VALUES (?, ?, ?, ?, ?)",
                   [(e.time, e.job, e.kind, e.message, json.dumps(e.detail)) for e in events])


class StateStore:
    """The state file of one service, in directory ``root``.

    Args:
        root: the state folder.
        create: make the folder (0700) and an empty state file where they are missing
            (``submit``, ``serve``); otherwise a missing state is refused (``status``,
            ``cancel``).
        init: start an empty state where ``state.db`` holds nothing (0 bytes, or a SQLite file
            without tables). Without it such a file is refused: an empty file where a state
            was means a lost state, which should be noticed, not silently begun again.

    Raises:
        InputError: one line naming the folder or file: not a folder, missing (without
            ``create``), not readable and writable, empty (without ``init``), damaged, another
            program's, of a newer schema.
    """

    def __init__(self, root: str | Path, create: bool = True, init: bool = False) -> None:
        self.root = Path(root)
        self.path = self.root / STATE_FILE
        self._lock: TextIO | None = None
        with self._sqlite_errors():
            self._make_folder(create)
            self.connection = self._open(init)
        if not self.jobs_dir.is_dir():
            try:
                self.jobs_dir.mkdir(mode=PRIVATE_FOLDER, exist_ok=True)
            except OSError as error:
                raise InputError(f"cannot make the jobs folder: {error.strerror}",
                                 self.jobs_dir) from None

    def _make_folder(self, create: bool) -> None:
        problem = access_problem(self.root, folder=True)
        if problem is not None:
            raise InputError(problem, self.root)
        if not self.path.exists() and not create:
            raise InputError("no scheduler state here: expected the --state directory of "
                             "'bayes-sched serve' (or submit a job first)", self.root)
        try:  # parents that others cannot write, whatever the umask: nobody swaps the state
            for parent in reversed(self.root.absolute().parents):
                if not parent.is_dir():
                    parent.mkdir(mode=0o755, exist_ok=True)
            self.root.mkdir(mode=PRIVATE_FOLDER, exist_ok=True)
        except OSError as error:
            raise InputError(f"cannot make the state folder: {error.strerror}",
                             self.root) from None
        if not self.path.exists():
            try:
                create_state_file(self.path)
            except OSError as error:
                raise InputError(f"cannot create the state file: {error.strerror}",
                                 self.path) from None

    def _open(self, init: bool) -> sqlite3.Connection:
        """Connect to a checked state file (an empty one replaced if ``init``), migrated to
        the current schema."""
        problem = access_problem(self.path, folder=False)
        if problem is not None:
            raise InputError(problem, self.path)
        connection = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT, isolation_level=None)
        diagnosis = diagnose(connection, self.path)
        if diagnosis.verdict == EMPTY and init:  # 0 bytes, or a SQLite file without tables
            connection.close()
            create_state_file(self.path, replace_empty=True)
            connection = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT, isolation_level=None)
            diagnosis = diagnose(connection, self.path)
        try:
            if not diagnosis.usable:
                raise InputError(str(diagnosis.problem), self.path)
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute("PRAGMA synchronous=FULL")
            if diagnosis.verdict == OLDER:
                migrate(connection)
        except BaseException:
            connection.close()
            raise
        return connection

    @contextmanager
    def _sqlite_errors(self) -> Iterator[None]:
        """Turn SQLite's errors that come from the file, not the code, into one-line input
        errors naming it: damage found after opening, a read-only file, a full disk, a lock
        held past :data:`BUSY_TIMEOUT`."""
        try:
            yield
        except sqlite3.OperationalError as error:
            raise InputError(f"cannot be used ({error}): {ACCESS_NEEDED}", self.path) from None
        except sqlite3.DatabaseError as error:
            if type(error) is not sqlite3.DatabaseError:  # integrity, programming: a bug
                raise
            raise InputError(f"is damaged ({error}): {repair_hint(self.root)}",
                             self.path) from None

    def _json(self, text: str, table: str, column: str) -> Any:
        """A JSON column's value; text that does not parse is a damaged file."""
        try:
            return json.loads(text)
        except (TypeError, ValueError):
            raise InputError(f"is damaged (a {column} in table {table} is not JSON): "
                             f"{repair_hint(self.root)}", self.path) from None

    def _rows(self, sql: str, parameters: Sequence[Any] = ()) -> list[Any]:
        with self._sqlite_errors():
            return self.connection.execute(sql, parameters).fetchall()

    def lock_for_service(self) -> None:
        """Make this process the state directory's only service, after checking that nobody
        else can write the state (:func:`~bayes_sched.service.state_trust.check_private_state`).

        Raises:
            InputError: the state is not private, or another service holds the lock (two would
                start every job twice).
        """
        check_private_state(self.root)
        self._lock = hold_service_lock(
            self.root, "another 'bayes-sched serve' (pid {pid}) uses this state directory: "
            "expected one service per --state")

    @property
    def jobs_dir(self) -> Path:
        return self.root / JOBS_DIR

    def close(self) -> None:
        """Close the state file (and give up the service lock, removing its file, if this store
        holds it)."""
        self.connection.close()
        if self._lock is not None:
            release_service_lock(self._lock, self.root)
            self._lock = None

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction (taken at once, so concurrent writers queue)."""
        with self._sqlite_errors():
            self.connection.execute("BEGIN IMMEDIATE")
            try:
                yield self.connection
            except BaseException:
                if self.connection.in_transaction:  # SQLite may have rolled back already
                    self.connection.execute("ROLLBACK")
                raise
            self.connection.execute("COMMIT")

    # --- meta ---------------------------------------------------------------------------------

    def meta(self, key: str) -> str | None:
        rows = self._rows("SELECT value FROM meta WHERE key = ?", (key,))
        return str(rows[0][0]) if rows else None

    def epoch(self) -> float:
        """Wall-clock seconds that the cluster's time 0 stands for (set on first use)."""
        with self.transaction() as db:
            row = db.execute("SELECT value FROM meta WHERE key = 'epoch'").fetchone()
            if row is not None:
                return float(row[0])
            now = time.time()
            db.execute("INSERT INTO meta VALUES ('epoch', ?)", (repr(now),))
            return now

    def set_meta(self, values: Mapping[str, str | None]) -> None:
        """Set ``meta`` keys (``None`` removes one), in one transaction."""
        with self.transaction() as db:
            _write_meta(db, values)

    def meta_values(self, prefix: str) -> dict[str, str]:
        """Every ``meta`` key starting with ``prefix``, with its value."""
        rows = self._rows("SELECT key, value FROM meta WHERE key LIKE ? ESCAPE '\\'",
                          (prefix.replace("_", "\\_") + "%",))
        return {str(key): str(value) for key, value in rows}

    # --- events -------------------------------------------------------------------------------

    def add_events(self, events: Sequence[Event]) -> None:
        """Append events (:mod:`bayes_sched.service.events`) in one transaction."""
        with self.transaction() as db:
            _insert_events(db, events)

    def events(self, after: int = 0, job: str | None = None, last: int | None = None,
               tenant: str | None = None) -> list[dict[str, Any]]:
        """Events with an id above ``after``, oldest first (each with its ``id``): of one
        ``job`` where given, of the jobs of one ``tenant`` where given, only the ``last`` ones
        where given."""
        where, parameters = "id > ?", list[Any]([after])
        if job is not None:
            where += " AND job = ?"
            parameters.append(job)
        if tenant is not None:
            where += " AND job IN (SELECT name FROM jobs WHERE tenant = ?)"
            parameters.append(tenant)
        order = "DESC" if last is not None else "ASC"
        limit = f" LIMIT {int(last)}" if last is not None else ""
        rows = self._rows(f"SELECT id, time, job, kind, message, detail FROM events WHERE "
                          f"{where} ORDER BY id {order}{limit}", parameters)
        if last is not None:
            rows.reverse()
        return [{"id": i, "time": t, "job": j, "kind": k, "message": m,
                 "detail": self._json(d, "events", "detail")} for i, t, j, k, m, d in rows]

    # --- jobs ---------------------------------------------------------------------------------

    def submit(self, spec: RealJobSpec) -> None:
        """Add a job for the service to take up; raises :class:`InputError` for a taken name."""
        with self.transaction() as db:
            if db.execute("SELECT 1 FROM jobs WHERE name = ?", (spec.name,)).fetchone():
                raise InputError(f"job '{spec.name}' exists already: expected a new name "
                                 "(set 'name' in the job file)", self.root)
            db.execute("INSERT INTO jobs (name, spec, submitted, tenant) VALUES (?, ?, ?, ?)",
                       (spec.name, json.dumps(spec.to_dict()), time.time(), spec.tenant))

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
        rows = self._rows(
            "SELECT spec, submitted FROM jobs WHERE record IS NULL ORDER BY submitted, name")
        return [(RealJobSpec.from_dict(self._json(spec, "jobs", "spec")), float(t))
                for spec, t in rows]

    def cancel_requests(self) -> list[str]:
        rows = self._rows("SELECT name FROM jobs WHERE cancel = 1 AND record IS NOT NULL")
        return [str(name) for (name,) in rows]

    def records(self) -> list[dict[str, Any]]:
        """The records the service saved (jobs it had taken up)."""
        rows = self._rows(
            "SELECT record FROM jobs WHERE record IS NOT NULL ORDER BY submitted, name")
        return [self._json(record, "jobs", "record") for (record,) in rows]

    def save(self, records: Sequence[dict[str, Any]], cancelled: Sequence[str] = (),
             round_row: tuple[int, float, Any, Any, float | None] | None = None,
             events: Sequence[Event] = (), keep_rounds: int | None = None) -> None:
        """Write every job's record (a round's row, with the service's heartbeat, the
        ``meta`` key ``serve_heartbeat``: the wall-clock time of the round's save; the events
        these records end) in one transaction.

        ``keep_rounds``: where given, the rounds older than the last ``keep_rounds`` are
        deleted in the same transaction, so the ``rounds`` table of a long-running service
        stays bounded (one row a round, each holding the round's allocations and predictions
        of every job, would otherwise grow with uptime, not with the job table).

        A test hook, off by default: ``BAYES_SCHED_TEST_HOLD_SAVE=SECONDS`` in the service's
        environment holds the open transaction that long before it commits, so that a fault
        harness can kill the service mid-transaction (``experiments/serve_faults.py``); unset, a
        save pays one dictionary lookup."""
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
                if keep_rounds is not None:
                    db.execute("DELETE FROM rounds WHERE round <= ?", (number - keep_rounds,))
                _write_meta(db, {HEARTBEAT: repr(now)})
            _insert_events(db, events)
            hold = os.environ.get("BAYES_SCHED_TEST_HOLD_SAVE")
            if hold:
                time.sleep(float(hold))

    def jobs(self, tenant: str | None = None) -> list[dict[str, Any]]:
        """Every job (of one ``tenant`` where given): name, tenant, status, submission time,
        spec and record (``None`` before the service took it up)."""
        where, parameters = ("", ()) if tenant is None else (" WHERE tenant = ?", (tenant,))
        rows = self._rows("SELECT name, tenant, status, submitted, spec, record, cancel FROM jobs"
                          f"{where} ORDER BY submitted, name", parameters)
        return [{"name": n, "tenant": who, "status": s, "submitted": t,
                 "spec": self._json(spec, "jobs", "spec"),
                 "record": self._json(rec, "jobs", "record") if rec else None,
                 "cancel": bool(c)}
                for n, who, s, t, spec, rec, c in rows]

    def last_round(self) -> dict[str, Any] | None:
        rows = self._rows("SELECT round, time, allocations, predictions, decision_seconds "
                          "FROM rounds ORDER BY round DESC LIMIT 1")
        if not rows:
            return None
        row = rows[0]
        return {"round": row[0], "time": row[1],
                "allocations": self._json(row[2], "rounds", "allocations"),
                "predictions": self._json(row[3], "rounds", "predictions"),
                "decision_seconds": row[4]}
