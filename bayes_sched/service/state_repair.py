"""``bayes-sched state repair``: salvage what can be read from a damaged state file.

The damaged file is never changed. Under the service lock (so no ``serve`` runs meanwhile), it is
first snapshotted into a private scratch folder with SQLite's backup API, which also takes in
what its write-ahead log holds (a plain byte copy where SQLite cannot open it at all). The backup
copies pages as they are, damage included, so the rows are then salvaged one table at a time into
a new state file of the current schema: a scan by rowid up to the first unreadable page, a scan
down from the top, and a lookup of each rowid between (bounded: :data:`MAX_PROBES` per table, and
at most :data:`MAX_MISSES` unreadable rowids in a row past the last one read). A row whose JSON
does not parse, or that the schema refuses, is left out. Where a table's primary-key index can
still be read, the keys it lists that no salvaged row holds are reported lost (e.g. the names of
jobs whose rows sat on a lost page). Then the damaged file is linked to
``state.db.damaged-<UTC time>`` (its ``-wal`` renamed beside it) and the new file
renamed over ``state.db``: a reader sees the old file or the new one, never a part of either.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager, suppress
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bayes_sched.errors import InputError
from bayes_sched.service.state import (
    STATE_FILE,
    fsync_folder,
    hold_service_lock,
    new_state_file,
)
from bayes_sched.service.state_check import (
    DAMAGED,
    FOREIGN,
    MISSING,
    NEWER,
    UNREADABLE,
    Diagnosis,
    inspect_state,
    read_only_uri,
)
from bayes_sched.service.state_schema import (
    COLUMNS,
    SCHEMA_VERSION,
    json_problem,
    table_columns,
)

#: Rowids looked up one by one per table, at most.
MAX_PROBES = 1_000_000
#: Unreadable rowids in a row, past the last row read, after which a table's tail is given up.
MAX_MISSES = 10_000
#: The suffixes of SQLite's files beside a database in write-ahead-log mode.
SIDE_FILES = ("-wal", "-shm")

#: What receives each row read: ``(rowid, *columns)``.
Take = Callable[[tuple[Any, ...]], None]


@dataclass
class TableSalvage:
    """What one table gave.

    Attributes:
        table: its name.
        recovered: rows copied into the new file.
        unreadable: what could not be read, one line each (rowid ranges and why).
        lost: primary keys the table's key index lists that no recovered row holds.
    """

    table: str
    recovered: int = 0
    unreadable: list[str] = field(default_factory=list)
    lost: list[str] = field(default_factory=list)


@dataclass
class RepairReport:
    """What ``state repair`` did.

    Attributes:
        path: the state file.
        diagnosis: what it was before (see :mod:`bayes_sched.service.state_check`).
        repaired: whether a new file replaced it (``False``: it was usable, nothing done).
        kept: where the damaged file is kept.
        nothing_read: why nothing at all could be read from it, if so.
        tables: what each table gave.
    """

    path: str
    diagnosis: Diagnosis
    repaired: bool = False
    kept: str | None = None
    nothing_read: str | None = None
    tables: list[TableSalvage] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "diagnosis": self.diagnosis.to_dict()}


def repair_state(root: Path) -> RepairReport:
    """Replace a damaged, empty or non-SQLite ``state.db`` in ``root`` by what can be salvaged
    from it, keeping it beside (see the module's docstring). A usable file is left alone.

    Raises:
        InputError: no state there, one this user cannot read and write, another program's,
            one of a newer schema, or a ``serve`` holding the state's lock.
    """
    path = root / STATE_FILE
    diagnosis = inspect_state(root)
    report = RepairReport(str(path), diagnosis)
    if diagnosis.usable:
        return report
    if diagnosis.verdict in (MISSING, UNREADABLE):
        raise InputError(str(diagnosis.problem), diagnosis.path)
    if diagnosis.verdict in (FOREIGN, NEWER):
        raise InputError(f"{diagnosis.problem} (repair salvages this bayes-sched's states "
                         "only)", diagnosis.path)
    lock = hold_service_lock(root, "a 'bayes-sched serve' (pid {pid}) uses this state: "
                             "expected no service while it is repaired; stop it first")
    try:
        fresh = new_state_file(root, f".{STATE_FILE}.repair")
        try:
            with _scratch_folder(root) as scratch:
                source = _snapshot(path, scratch) if diagnosis.verdict == DAMAGED else None
                _salvage(source, fresh, report)
            with fresh.open("rb") as stream:
                os.fsync(stream.fileno())
            report.kept = str(_swap(path, fresh))
        finally:
            with suppress(FileNotFoundError):
                fresh.unlink()
    except (OSError, sqlite3.OperationalError) as error:  # e.g. no room for the new file
        raise InputError(f"cannot write the repaired state beside it ({error}): expected a "
                         "folder with room for a copy; the damaged file is kept as it was",
                         path) from None
    finally:
        lock.close()
    report.repaired = True
    return report


@contextmanager
def _scratch_folder(root: Path) -> Iterator[Path]:
    folder = Path(tempfile.mkdtemp(prefix=".repair-", dir=root))  # 0700
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _snapshot(path: Path, scratch: Path) -> Path:
    """A copy of the damaged file (with what its write-ahead log holds) in ``scratch``."""
    copy = scratch / STATE_FILE
    try:
        with closing(sqlite3.connect(read_only_uri(path), uri=True)) as source, \
                closing(sqlite3.connect(copy)) as target:
            source.execute("PRAGMA writable_schema = ON")  # read a truncated file's pages
            source.backup(target)
    except sqlite3.DatabaseError:
        for suffix in ("", *SIDE_FILES):
            with suppress(FileNotFoundError):
                os.unlink(f"{copy}{suffix}")
        for suffix in ("", "-wal"):
            with suppress(FileNotFoundError):
                shutil.copyfile(f"{path}{suffix}", f"{copy}{suffix}")
    return copy


def _salvage(source_path: Path | None, fresh: Path, report: RepairReport) -> None:
    """Copy every readable, valid row of ``source_path`` into the new file ``fresh``."""
    tables = COLUMNS[SCHEMA_VERSION]
    report.tables = [TableSalvage(name) for name in tables]
    if source_path is None:
        report.nothing_read = report.diagnosis.problem
        return
    with closing(sqlite3.connect(source_path)) as source, \
            closing(sqlite3.connect(fresh, isolation_level=None)) as target:
        try:
            source.execute("PRAGMA writable_schema = ON")
            found = table_columns(source)
        except sqlite3.DatabaseError as error:
            report.nothing_read = f"its table list cannot be read ({error})"
            return
        target.execute("BEGIN IMMEDIATE")
        for salvage in report.tables:
            columns = tuple(c for c in tables[salvage.table] if c in found.get(salvage.table, ()))
            if not columns:
                salvage.unreadable.append("the table is missing from the damaged file")
                continue
            _salvage_table(source, target, salvage, columns)
        target.execute("COMMIT")


def _salvage_table(source: sqlite3.Connection, target: sqlite3.Connection,
                   salvage: TableSalvage, columns: tuple[str, ...]) -> None:
    table = salvage.table
    listed = ", ".join(f'"{c}"' for c in columns)
    select = f'SELECT rowid, {listed} FROM "{table}"'
    insert = (f'INSERT INTO "{table}" (rowid, {listed}) '
              f'VALUES ({", ".join("?" * (len(columns) + 1))})')
    index = _key_index(source, table)
    key = None if index is None or index[1] not in columns else index[1]
    kept: set[str] = set()

    def take(row: tuple[Any, ...]) -> None:
        problem = json_problem(table, columns, row[1:])
        if problem is None:
            try:
                target.execute(insert, row)
            except sqlite3.DatabaseError as error:
                problem = str(error)
        if problem is not None:
            salvage.unreadable.append(f"rowid {row[0]}: {problem}")
            return
        salvage.recovered += 1
        if key is not None:
            kept.add(str(row[1 + columns.index(key)]))

    low, stopped = _scan(source, f"{select} ORDER BY rowid", take)
    if stopped is not None:
        high, _ = _scan(source, f"{select} WHERE rowid > {low} ORDER BY rowid DESC", take)
        _probe(source, f"{select} WHERE rowid = ?", take, low, high, stopped, salvage)
    if index is not None and key is not None:
        salvage.lost = sorted(_index_keys(source, table, index) - kept)


def _scan(source: sqlite3.Connection, sql: str, take: Take) -> tuple[int, str | None]:
    """Feed the rows of ``sql`` to ``take`` until the end or an unreadable page; returns the
    last rowid read (the far end's sentinel where none) and the error that stopped it."""
    descending = sql.endswith("DESC")
    last = 2**63 - 1 if descending else -(2**63)
    try:
        for row in source.execute(sql):
            take(row)
            last = int(row[0])
    except sqlite3.DatabaseError as error:
        return last, str(error)
    return last, None


def _probe(source: sqlite3.Connection, sql: str, take: Take, low: int, high: int,
           stopped: str, salvage: TableSalvage) -> None:
    """Look up each rowid between ``low`` and ``high`` (exclusive), listing the unreadable ones
    as ranges. Where the top could not be read (``high`` is the sentinel), the table's end is
    unknown: the lookups stop after :data:`MAX_MISSES` rowids in a row that gave nothing, and
    an unreadable range still open then is reported open-ended."""
    open_top = high == 2**63 - 1
    start = max(low, 0) + 1
    end = min(high, start + MAX_PROBES)
    failed: tuple[int, int, str] | None = None  # first, last, error of the current range
    misses = 0
    rowid = start - 1
    for rowid in range(start, end):
        try:
            row = source.execute(sql, (rowid,)).fetchone()
        except sqlite3.DatabaseError as error:
            failed = (failed[0], rowid, failed[2]) if failed else (rowid, rowid, str(error))
            row = None
        else:
            if failed:
                salvage.unreadable.append(_rowids(*failed))
                failed = None
            if row is not None:
                take(row)
        misses = 0 if row is not None else misses + 1
        if open_top and misses >= MAX_MISSES:
            break
    if failed and open_top:
        salvage.unreadable.append(f"rowids from {failed[0]}: {failed[2]} (the end of the "
                                  "table could not be read)")
    elif failed:
        salvage.unreadable.append(_rowids(*failed))
    if rowid + 1 < high and not (open_top and misses >= MAX_MISSES):
        salvage.unreadable.append(f"rowids from {rowid + 1}: not looked up (more than "
                                  f"{MAX_PROBES} after the scan stopped: {stopped})")


def _rowids(first: int, last: int, error: str) -> str:
    where = f"rowid {first}" if first == last else f"rowids {first}..{last}"
    return f"{where}: {error}"


def _key_index(source: sqlite3.Connection, table: str) -> tuple[str, str] | None:
    """``(index, column)`` of ``table``'s one-column primary-key index, where it has one."""
    try:
        for _, name, _, origin, _ in source.execute(f'PRAGMA index_list("{table}")'):
            if origin == "pk":
                columns = source.execute(f'PRAGMA index_info("{name}")').fetchall()
                return (str(name), str(columns[0][2])) if len(columns) == 1 else None
    except sqlite3.DatabaseError:
        return None
    return None


def _index_keys(source: sqlite3.Connection, table: str, index: tuple[str, str]) -> set[str]:
    """The keys ``table``'s primary-key index lists (read from both ends, each up to the first
    unreadable page): the index is a b-tree of its own, often intact where the table is not."""
    name, key = index
    keys: set[str] = set()
    for order in ("", " DESC"):
        sql = f'SELECT "{key}" FROM "{table}" INDEXED BY "{name}" ORDER BY "{key}"{order}'
        with suppress(sqlite3.DatabaseError):
            for (value,) in source.execute(sql):
                keys.add(str(value))
    return keys


def _swap(path: Path, fresh: Path) -> Path:
    """Keep the damaged file as ``state.db.damaged-<UTC time>`` and put ``fresh`` in its place;
    returns the kept file's path."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    kept = path.with_name(f"{path.name}.damaged-{stamp}")
    number = 1
    while any(Path(f"{kept}{suffix}").exists() for suffix in ("", *SIDE_FILES)):
        number += 1
        kept = path.with_name(f"{path.name}.damaged-{stamp}-{number}")
    os.link(path, kept)
    with suppress(FileNotFoundError):  # a stale log must not be replayed into the new file
        os.rename(f"{path}-wal", f"{kept}-wal")
    with suppress(FileNotFoundError):  # the log's index, rebuilt from the log when needed
        os.unlink(f"{path}-shm")
    os.replace(fresh, path)
    fsync_folder(path.parent)
    return kept
