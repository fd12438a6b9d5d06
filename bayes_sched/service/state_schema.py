"""The state file's schema, its version and the migrations between versions.

A state file says what it is in its SQLite header: ``PRAGMA application_id`` holds
:data:`APPLICATION_ID` (the bytes ``BSCH``: a bayes-sched state, not another program's database)
and ``PRAGMA user_version`` the schema version, :data:`SCHEMA_VERSION`. Version 1 is the schema
of the first releases, which wrote neither mark: a file with both marks 0 and version 1's tables
is a version-1 file, stamped by its first migration (:data:`MIGRATIONS`).

To change the schema: write the new tables in :data:`_SCHEMA`, add the step from the last
version to :data:`MIGRATIONS` (SQL applied to a file of the previous version), give the new
version's columns in :data:`COLUMNS` and raise :data:`SCHEMA_VERSION`. Every command that opens
the state through :class:`~bayes_sched.service.state.StateStore` (``serve``, ``submit``,
``status``, ``cancel``: all open it read-write, as SQLite's write-ahead log needs) migrates a file
of an older version in one transaction (:func:`migrate`); ``state check`` only reports it. A
file of a newer version is refused (this bayes-sched cannot know its meaning).
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from bayes_sched.tenants import DEFAULT_TENANT

#: ``PRAGMA application_id`` of a bayes-sched state file: b"BSCH" as a big-endian integer.
APPLICATION_ID = int.from_bytes(b"BSCH", "big")
#: The schema version this bayes-sched writes and reads.
SCHEMA_VERSION = 3

#: The events table (version 2).
_EVENTS = """CREATE TABLE events (
    id INTEGER PRIMARY KEY,
    time REAL NOT NULL,
    job TEXT,
    kind TEXT NOT NULL,
    message TEXT NOT NULL,
    detail TEXT NOT NULL
)"""

#: The tenants column of ``jobs`` (version 3): the team that submitted the job; rows of older
#: files read as :data:`~bayes_sched.tenants.DEFAULT_TENANT`'s.
_TENANT_COLUMN = f"tenant TEXT NOT NULL DEFAULT '{DEFAULT_TENANT}'"

#: Tables of the current version: ``meta`` (the cluster's time origin, the service's heartbeat,
#: the tenants it serves), ``jobs`` (one row per job: spec, status, the record the cluster keeps
#: of it as JSON, cancel flag, tenant), ``rounds`` (one row per scheduling round: time,
#: decision, predictions), ``events`` (one row per job transition or service start and stop:
#: wall-clock time, job (``NULL`` for the service's own), kind, one-line message, details as
#: JSON).
_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE jobs (
    name TEXT PRIMARY KEY,
    spec TEXT NOT NULL,
    submitted REAL NOT NULL,
    status TEXT NOT NULL DEFAULT 'submitted',
    record TEXT,
    cancel INTEGER NOT NULL DEFAULT 0,
    updated REAL,
    """ + _TENANT_COLUMN + """
);
CREATE TABLE rounds (
    round INTEGER PRIMARY KEY,
    time REAL NOT NULL,
    allocations TEXT NOT NULL,
    predictions TEXT NOT NULL,
    decision_seconds REAL
);
""" + _EVENTS + ";"

#: Each version's tables and their columns (what a file must hold to be read as that version).
COLUMNS: dict[int, dict[str, tuple[str, ...]]] = {
    1: {"meta": ("key", "value"),
        "jobs": ("name", "spec", "submitted", "status", "record", "cancel", "updated"),
        "rounds": ("round", "time", "allocations", "predictions", "decision_seconds")},
}
COLUMNS[2] = {**COLUMNS[1], "events": ("id", "time", "job", "kind", "message", "detail")}
COLUMNS[3] = {**COLUMNS[2], "jobs": (*COLUMNS[2]["jobs"], "tenant")}

#: Columns holding JSON text, per table (checked when rows are salvaged).
JSON_COLUMNS: dict[str, tuple[str, ...]] = {"jobs": ("spec", "record"),
                                            "rounds": ("allocations", "predictions"),
                                            "events": ("detail",)}

#: Version -> the SQL statements that turn a file of that version into one of the next (run one
#: by one inside :func:`migrate`'s transaction). Version 0 is a file of the first releases (no
#: marks, version 1's tables): stamping it is the whole step. Version 2 adds the events table,
#: version 3 the jobs' tenant (the default tenant's for the jobs already there).
MIGRATIONS: dict[int, tuple[str, ...]] = {
    0: (),
    1: (_EVENTS,),
    2: (f"ALTER TABLE jobs ADD COLUMN {_TENANT_COLUMN}",),
}


def create_schema(connection: sqlite3.Connection) -> None:
    """Create the current version's tables and marks in an empty database (one transaction)."""
    connection.executescript(f"BEGIN; {_SCHEMA} PRAGMA application_id = {APPLICATION_ID}; "
                             f"PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;")


def marks(connection: sqlite3.Connection) -> tuple[int, int]:
    """``(application_id, user_version)`` of an open database."""
    application = connection.execute("PRAGMA application_id").fetchone()[0]
    version = connection.execute("PRAGMA user_version").fetchone()[0]
    return int(application), int(version)


def table_columns(connection: sqlite3.Connection) -> dict[str, tuple[str, ...]]:
    """Every table of an open database (SQLite's own excepted) with its columns, in order."""
    names = [str(name) for (name,) in connection.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' "
        "ORDER BY name")]
    return {name: tuple(str(row[1]) for row in connection.execute(
        f'PRAGMA table_info("{name}")')) for name in names}


def schema_problem(tables: dict[str, tuple[str, ...]], version: int) -> str | None:
    """What keeps ``tables`` from being schema ``version``'s (version 0 reads as 1), or ``None``."""
    expected = COLUMNS[max(version, 1)]
    missing = [name for name in expected if name not in tables]
    if missing:
        return f"no table {', '.join(missing)}"
    for name, columns in expected.items():
        lacking = [column for column in columns if column not in tables[name]]
        if lacking:
            return f"table {name} lacks column {', '.join(lacking)}"
    return None


def migrate(connection: sqlite3.Connection) -> int:
    """Bring an open state file to :data:`SCHEMA_VERSION` in one write transaction (taken at
    once, so two processes opening an old file migrate it once); returns the version found.

    The caller has checked that the file is a bayes-sched state of a version not newer than
    this one. ``connection`` must be in autocommit mode (``isolation_level=None``).
    """
    connection.execute("BEGIN IMMEDIATE")
    try:
        found = marks(connection)[1]  # read again under the write lock
        for version in range(found, SCHEMA_VERSION):
            for statement in MIGRATIONS[version]:
                connection.execute(statement)
        connection.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        connection.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    except BaseException:
        connection.execute("ROLLBACK")
        raise
    connection.execute("COMMIT")
    return found


def json_problem(table: str, columns: tuple[str, ...], values: tuple[Any, ...]) -> str | None:
    """Why a row of ``table`` (``values`` of ``columns``) cannot be read back: a column of
    :data:`JSON_COLUMNS` that holds no JSON; ``None`` when it can."""
    for column in JSON_COLUMNS.get(table, ()):
        if column not in columns:
            continue
        value = values[columns.index(column)]
        if value is None:
            continue
        try:
            json.loads(value)
        except (TypeError, ValueError):
            return f"column {column} is not JSON"
    return None
