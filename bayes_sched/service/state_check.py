"""What a state file is: healthy, of an older schema, empty, damaged, another program's, newer.

One diagnosis serves every reader: :class:`~bayes_sched.service.state.StateStore` refuses to
open anything but a healthy file (or an older one, which it migrates), and ``bayes-sched state
check`` prints the diagnosis. The checks, cheapest first: the folder and file can be read and
written (SQLite's write-ahead log needs write access to the folder even to read); the file is
not empty; SQLite reads it as a database (where it does not, the file's first bytes say whether
it is SQLite's at all); its application id is bayes-sched's (or 0, the first releases'); its
schema version is not newer than this bayes-sched's; ``PRAGMA quick_check`` finds the pages and
records intact; it holds the tables and columns of its version
(:mod:`bayes_sched.service.state_schema`).

A state file is read through SQLite only, never opened by this module, while SQLite may have it
open: closing any descriptor of a file drops every POSIX lock the process holds on it, SQLite's
included. A process that opened a second store on a state it holds would so lose the shared
lock that marks its connection as live; another process closing its own connection would then
take itself for the last one and delete the write-ahead log, and every later write of the first
connection would go to the deleted log, seen by nobody. Only a file SQLite refuses is opened
here (:func:`header_problem`), to say what it is.
"""

from __future__ import annotations

import os
import sqlite3
import stat
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from bayes_sched.service.state_schema import (
    APPLICATION_ID,
    JSON_COLUMNS,
    SCHEMA_VERSION,
    json_problem,
    marks,
    schema_problem,
    table_columns,
)
from bayes_sched.service.state_trust import describe_user

STATE_FILE = "state.db"
#: The first bytes of every SQLite 3 database file.
SQLITE_MAGIC = b"SQLite format 3\x00"
#: Lines of ``PRAGMA quick_check`` kept in a diagnosis.
CHECK_LINES = 20

#: What reading a state needs (said where an operation fails for the file system's reasons).
ACCESS_NEEDED = ("expected a state file this user can read and write, on a file system with "
                 "room")

# What a diagnosis can say of a state file.
HEALTHY = "healthy"
OLDER = "older schema"  # healthy, migrated by the next command that writes it
EMPTY = "empty"
NOT_SQLITE = "not sqlite"
DAMAGED = "damaged"
FOREIGN = "foreign"
NEWER = "newer schema"
UNREADABLE = "unreadable"
MISSING = "missing"


@dataclass
class Diagnosis:
    """What one state file is.

    Attributes:
        path: the file.
        verdict: one of the module's verdicts (:data:`HEALTHY`, :data:`DAMAGED`, ...).
        problem: one line saying what is wrong and what to do (``None`` when usable).
        size: bytes on disk (``None`` when it cannot be read).
        application_id: ``PRAGMA application_id`` where the file opened.
        version: ``PRAGMA user_version`` (the schema version) where the file opened.
        findings: ``PRAGMA quick_check``'s lines (at most :data:`CHECK_LINES`).
        rows: rows per table, where they could be counted.
    """

    path: str
    verdict: str
    problem: str | None = None
    size: int | None = None
    application_id: int | None = None
    version: int | None = None
    findings: list[str] = field(default_factory=list)
    rows: dict[str, int] = field(default_factory=dict)

    @property
    def usable(self) -> bool:
        """Whether a command may open the file (an older schema is migrated on opening)."""
        return self.verdict in (HEALTHY, OLDER)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "usable": self.usable}


def access_problem(path: Path, folder: bool) -> str | None:
    """Why this process cannot read and write ``path`` (a folder if ``folder``), or ``None``.

    Write access is needed to read as well: SQLite's write-ahead log keeps its shared index in
    a file beside the database (``state.db-shm``)."""
    try:
        info = path.stat()
    except FileNotFoundError:
        return None
    except OSError as error:
        return f"cannot be used: {error.strerror}"
    kind = "folder" if folder else "file"
    if folder and not stat.S_ISDIR(info.st_mode):
        return "is not a folder: expected the --state directory of 'bayes-sched serve'"
    if not folder and not stat.S_ISREG(info.st_mode):
        return "is not a regular file: expected the service's SQLite state file"
    wanted = os.R_OK | os.W_OK | (os.X_OK if folder else 0)
    if os.access(path, wanted):
        return None
    return (f"this {kind} cannot be read and written by {describe_user(os.geteuid())} (mode "
            f"{stat.S_IMODE(info.st_mode):04o}, owner {describe_user(info.st_uid)}"
            f"{', read-only file system' if _read_only_fs(path) else ''}): SQLite needs write "
            "access to the state, also to read it; run as the state's owner or ask them")


def _read_only_fs(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def _empty_problem(root: Path) -> str:
    return (f"is empty (0 bytes): expected a bayes-sched state; start an empty one with 'serve "
            f"--init' or 'submit --init', or keep this file aside with 'bayes-sched state repair "
            f"--state {root}'")


def header_problem(path: Path) -> tuple[str, str] | None:
    """``(verdict, problem)`` for a file that cannot be a SQLite database (empty, no SQLite
    header), read from its first bytes; ``None`` for a file that may be one. It opens the file:
    call it only on a file SQLite refused (see the module's note on locks)."""
    with path.open("rb") as stream:
        head = stream.read(len(SQLITE_MAGIC))
    root = path.parent
    if not head:
        return EMPTY, _empty_problem(root)
    if head != SQLITE_MAGIC:
        return NOT_SQLITE, (f"is not a SQLite database (it starts with {head[:8]!r}): expected "
                            f"a bayes-sched state; 'bayes-sched state repair --state {root}' "
                            "keeps it aside and starts an empty state")
    return None


def repair_hint(root: Path) -> str:
    """What to do about a damaged state file in folder ``root``."""
    return f"'bayes-sched state repair --state {root}' salvages what can be read"


def diagnose(connection: sqlite3.Connection, path: Path, thorough: bool = False) -> Diagnosis:
    """Diagnose a SQLite connection's file ``path``; reads, never writes (an empty file is not
    even read: SQLite would take it for an empty database). With ``thorough``, the rows of each
    table are counted and every JSON column parsed too (which reads the whole file: ``state
    check``; opening a state does not)."""
    result = Diagnosis(str(path), HEALTHY, size=path.stat().st_size)
    if not result.size:
        return _verdict(result, EMPTY, _empty_problem(path.parent))
    repair = repair_hint(path.parent)
    try:
        application, version = marks(connection)
        result.application_id, result.version = application, version
        if application not in (0, APPLICATION_ID):
            return _verdict(result, FOREIGN, f"is another program's SQLite database "
                            f"(application id {application:#x}): expected a bayes-sched state; "
                            "choose another --state")
        if application == APPLICATION_ID and version > SCHEMA_VERSION:
            return _verdict(result, NEWER, f"was written by a newer bayes-sched (schema "
                            f"version {version}; this one knows up to {SCHEMA_VERSION}): "
                            "upgrade bayes-sched")
        result.findings = [str(row[0]) for row in
                           connection.execute(f"PRAGMA quick_check({CHECK_LINES})")]
        if result.findings != ["ok"]:
            return _verdict(result, DAMAGED, f"is damaged ({result.findings[0]}): {repair}")
        tables = table_columns(connection)
        bad_rows = _count_rows(connection, tables, result) if thorough else []
    except sqlite3.OperationalError as error:  # the file system's, not the file's
        return _verdict(result, UNREADABLE, f"cannot be read ({error}): {ACCESS_NEEDED}")
    except sqlite3.DatabaseError as error:
        refused = getattr(error, "sqlite_errorcode", None) == sqlite3.SQLITE_NOTADB
        found = header_problem(path) if refused else None
        if found is not None:  # not SQLite's at all (or emptied since)
            return _verdict(result, *found)
        return _verdict(result, DAMAGED, f"is damaged ({error}): {repair}")
    if bad_rows:
        result.findings = bad_rows[:CHECK_LINES]
        return _verdict(result, DAMAGED, f"is damaged ({bad_rows[0]}): {repair}")
    if application == 0:
        return _unmarked(result, tables)
    wrong = schema_problem(tables, version)
    if wrong is not None:
        return _verdict(result, DAMAGED, f"is damaged (schema version {version} but {wrong}): "
                        f"{repair}")
    return _verdict(result, OLDER if version < SCHEMA_VERSION else HEALTHY, None)


def _count_rows(connection: sqlite3.Connection, tables: dict[str, tuple[str, ...]],
                result: Diagnosis) -> list[str]:
    """Count each table's rows into ``result``; returns the rows whose JSON does not parse."""
    bad = []
    for name, columns in tables.items():
        listed = [c for c in JSON_COLUMNS.get(name, ()) if c in columns]
        rows = 0
        sql = f'SELECT rowid{"".join(f", {c}" for c in listed)} FROM "{name}"'
        for row in connection.execute(sql):
            rows += 1
            problem = json_problem(name, tuple(listed), row[1:])
            if problem is not None:
                bad.append(f"table {name}, rowid {row[0]}: {problem}")
        result.rows[name] = rows
    return bad


def _unmarked(result: Diagnosis, tables: dict[str, tuple[str, ...]]) -> Diagnosis:
    """A file without bayes-sched's application id: the first releases' (version 0), empty
    (no tables, e.g. a service killed while creating it), or another program's."""
    if not tables and not result.version:
        return _verdict(result, EMPTY, "holds no tables: expected a bayes-sched state; start "
                        "an empty one with 'serve --init' or 'submit --init'")
    wrong = schema_problem(tables, 0)
    if wrong is not None or result.version:
        held = ", ".join(tables) or "none"
        return _verdict(result, FOREIGN, f"is not a bayes-sched state (tables: {held}; "
                        f"user_version {result.version}): choose another --state")
    return _verdict(result, OLDER, None)


def _verdict(result: Diagnosis, verdict: str, problem: str | None) -> Diagnosis:
    result.verdict, result.problem = verdict, problem
    return result


def read_only_uri(path: Path) -> str:
    """The URI that opens ``path`` read-only (SQLite never writes the file through it)."""
    return f"file:{quote(str(path.resolve()))}?mode=ro"


def inspect_state(root: Path) -> Diagnosis:
    """Diagnose the state file in folder ``root`` without changing it (``state check``)."""
    path = root / STATE_FILE
    for where, folder in ((root, True), (path, False)):
        if not where.exists():
            return Diagnosis(str(where), MISSING, "no scheduler state here: expected the "
                             "--state directory of 'bayes-sched serve'")
        problem = access_problem(where, folder)
        if problem is not None:
            return Diagnosis(str(where), UNREADABLE, problem)
    connection = sqlite3.connect(read_only_uri(path), uri=True, timeout=30.0)
    try:
        return diagnose(connection, path, thorough=True)
    finally:
        connection.close()
