"""A state file that is damaged, foreign, empty, newer or older: refused with one line naming it
(exit 2, never an internal error), checked, repaired, migrated. Real SQLite files; the command
line as real subprocesses."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from bayes_sched.errors import InputError
from bayes_sched.service import state_check, state_schema
from bayes_sched.service.events import Event
from bayes_sched.service.state import STATE_FILE, StateStore, hold_service_lock
from bayes_sched.service.state_check import inspect_state
from bayes_sched.service.state_schema import APPLICATION_ID, SCHEMA_VERSION, marks
from tests.state_files import cli, one_error_line, populated_state, spec, truncate_half

#: The schema of the first releases: version 1's tables, no application id, no version.
FIRST_RELEASE_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (name TEXT PRIMARY KEY, spec TEXT NOT NULL,
    submitted REAL NOT NULL, status TEXT NOT NULL DEFAULT 'submitted', record TEXT,
    cancel INTEGER NOT NULL DEFAULT 0, updated REAL);
CREATE TABLE IF NOT EXISTS rounds (round INTEGER PRIMARY KEY, time REAL NOT NULL,
    allocations TEXT NOT NULL, predictions TEXT NOT NULL, decision_seconds REAL);
"""


def _sqlite_file(path: Path, script: str, application: int = 0, version: int = 0) -> None:
    with sqlite3.connect(path) as connection:
        connection.executescript(script)
        connection.execute(f"PRAGMA application_id = {application}")
        connection.execute(f"PRAGMA user_version = {version}")
    connection.close()


def _bad_state(tmp_path: Path, kind: str) -> Path:
    """A state folder whose state.db is ``kind`` of bad."""
    root = tmp_path / kind
    root.mkdir()
    path = root / STATE_FILE
    if kind == "garbage":
        path.write_bytes(b"name,spec\nthis is not a database\n" * 50)
    elif kind == "zero-byte":
        path.write_bytes(b"")
    elif kind == "truncated":
        populated_state(root, jobs=20, rounds=5)
        truncate_half(path)
    elif kind == "foreign":
        _sqlite_file(path, "CREATE TABLE songs (title TEXT, artist TEXT);")
    elif kind == "foreign-app":  # another program's mark, even with our tables
        _sqlite_file(path, FIRST_RELEASE_SCHEMA, application=0x4D504247)
    elif kind == "no-tables":
        _sqlite_file(path, "")
    elif kind == "newer":
        _sqlite_file(path, FIRST_RELEASE_SCHEMA + "CREATE TABLE later (x);",
                     application=APPLICATION_ID, version=SCHEMA_VERSION + 1)
    return root


@pytest.mark.parametrize(("kind", "said"), [
    ("garbage", "not a SQLite database"),
    ("zero-byte", "--init"),
    ("truncated", "is damaged"),
    ("foreign", "not a bayes-sched state"),
    ("foreign-app", "another program's"),
    ("no-tables", "--init"),
    ("newer", "upgrade bayes-sched"),
])
def test_bad_state_files_are_refused_by_name_and_left_as_they_were(
        tmp_path: Path, kind: str, said: str) -> None:
    root = _bad_state(tmp_path, kind)
    path = root / STATE_FILE
    before = path.read_bytes()
    one_error_line(cli("status", "--state", str(root)), str(path), said)
    job = tmp_path / "job.toml"
    job.write_text(f'name = "a"\nscript = "{tmp_path / "t.py"}"\ninit_batch_size = 32\n'
                   "max_local_bsz = 64\ntarget_epochs = 2\n")
    (tmp_path / "t.py").write_text("pass\n")
    one_error_line(cli("submit", str(job), "--state", str(root)), str(path), said)
    assert path.read_bytes() == before  # nothing written, nothing lost


def test_zero_byte_state_starts_empty_only_with_init(tmp_path: Path) -> None:
    root = _bad_state(tmp_path, "zero-byte")
    with pytest.raises(InputError, match="0 bytes"):
        StateStore(root)
    StateStore(root, init=True).submit(spec("first"))
    store = StateStore(root, init=True)  # --init never empties a state with content
    assert [job["name"] for job in store.jobs()] == ["first"]
    assert marks(store.connection) == (APPLICATION_ID, SCHEMA_VERSION)


def test_permission_problems_name_the_path(tmp_path: Path) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("x\n")
    one_error_line(cli("status", "--state", str(a_file)), str(a_file), "not a folder")
    one_error_line(cli("state", "check", "--state", str(a_file)), str(a_file), "not a folder")
    with pytest.raises(InputError, match="a-file/sub: cannot be used: Not a directory"):
        StateStore(a_file / "sub")
    folder_db = tmp_path / "folder-db"
    (folder_db / STATE_FILE).mkdir(parents=True)
    with pytest.raises(InputError, match="state.db: is not a regular file"):
        StateStore(folder_db)


def test_a_version_less_first_release_file_is_stamped_and_migrated(tmp_path: Path) -> None:
    root = tmp_path / "old"
    root.mkdir()
    path = root / STATE_FILE
    _sqlite_file(path, FIRST_RELEASE_SCHEMA)
    with sqlite3.connect(path) as connection:
        connection.execute("INSERT INTO jobs (name, spec, submitted) VALUES (?, ?, ?)",
                           ("old-job", json.dumps(spec("old-job").to_dict()), 1.0))
    connection.close()
    diagnosis = inspect_state(root)
    assert diagnosis.verdict == state_check.OLDER and diagnosis.usable
    assert marks(sqlite3.connect(path)) == (0, 0)  # checking changed nothing
    store = StateStore(root)
    assert marks(store.connection) == (APPLICATION_ID, SCHEMA_VERSION)
    assert [job["name"] for job in store.jobs()] == ["old-job"]
    # Version 2's events table came with the migration, and takes events.
    assert state_schema.table_columns(store.connection)["events"] == state_schema.COLUMNS[2][
        "events"]
    store.add_events([Event(1.0, "old-job", "started", "on 1 GPU", {"gpus": 1})])
    assert [(e["job"], e["kind"], e["detail"]) for e in store.events()] == [
        ("old-job", "started", {"gpus": 1})]
    assert inspect_state(root).verdict == state_check.HEALTHY


def test_migrations_run_in_one_transaction(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A next version that adds a column: a file of this one gains it; a failing step leaves
    it whole."""
    StateStore(tmp_path / "a").submit(spec("kept"))
    StateStore(tmp_path / "b").submit(spec("kept"))
    now, later = SCHEMA_VERSION, SCHEMA_VERSION + 1
    columns = {**state_schema.COLUMNS[now],
               "jobs": (*state_schema.COLUMNS[now]["jobs"], "owner")}
    for module in (state_schema, state_check):
        monkeypatch.setattr(module, "SCHEMA_VERSION", later)
    monkeypatch.setitem(state_schema.COLUMNS, later, columns)
    monkeypatch.setitem(state_schema.MIGRATIONS, now, ("ALTER TABLE jobs ADD COLUMN owner TEXT",))
    store = StateStore(tmp_path / "a")
    assert marks(store.connection)[1] == later
    assert "owner" in state_schema.table_columns(store.connection)["jobs"]
    assert [job["name"] for job in store.jobs()] == ["kept"]
    monkeypatch.setitem(state_schema.MIGRATIONS, now, (
        "ALTER TABLE jobs ADD COLUMN owner TEXT", "UPDATE jobs SET nosuch = 1"))
    with pytest.raises(InputError, match="no such column"):
        StateStore(tmp_path / "b")
    with sqlite3.connect(tmp_path / "b" / STATE_FILE) as connection:
        assert marks(connection)[1] == now
        assert "owner" not in state_schema.table_columns(connection)["jobs"]
    connection.close()


def test_state_check_reports_healthy_and_damaged_files(tmp_path: Path) -> None:
    root = tmp_path / "state"
    populated_state(root, jobs=5, rounds=3)
    healthy = cli("state", "check", "--state", str(root), "--json")
    assert healthy.returncode == 0, healthy.stderr
    report = json.loads(healthy.stdout)
    assert report["verdict"] == "healthy" and report["version"] == SCHEMA_VERSION
    # meta: the time origin and the heartbeat of the rounds' saves
    assert report["rows"] == {"events": 0, "jobs": 5, "meta": 2, "rounds": 3}
    assert report["findings"] == ["ok"]
    truncate_half(root / STATE_FILE)
    damaged = cli("state", "check", "--state", str(root))
    one_error_line(damaged, str(root / STATE_FILE), "is damaged", "state repair")
    assert "damaged" in damaged.stdout


def test_repair_salvages_the_readable_jobs_of_a_truncated_file(tmp_path: Path) -> None:
    root = tmp_path / "state"
    original = populated_state(root, jobs=60)
    path = root / STATE_FILE
    truncate_half(path)
    damaged_bytes = path.read_bytes()
    result = cli("state", "repair", "--state", str(root), "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["repaired"] and report["diagnosis"]["verdict"] == "damaged"
    assert Path(report["kept"]).read_bytes() == damaged_bytes  # the damaged file, kept whole
    jobs = {t["table"]: t for t in report["tables"]}["jobs"]
    store = StateStore(root)  # the new file opens, healthy
    salvaged = {job["name"]: job for job in store.jobs()}
    assert jobs["recovered"] == len(salvaged) > 0
    for name, job in salvaged.items():  # what was read is what was written
        assert job == original[name]
    # Every job is either recovered or listed lost (the key index outlived the table's pages).
    assert sorted([*salvaged, *jobs["lost"]]) == sorted(original)
    assert jobs["unreadable"]
    assert inspect_state(root).verdict == state_check.HEALTHY
    text = cli("status", "--state", str(root), "--json")
    assert text.returncode == 0 and len(json.loads(text.stdout)["jobs"]) == len(salvaged)


def test_repair_keeps_empty_and_non_sqlite_files_aside_and_refuses_others(
        tmp_path: Path) -> None:
    for kind in ("zero-byte", "garbage"):
        root = _bad_state(tmp_path, kind)
        before = (root / STATE_FILE).read_bytes()
        result = cli("state", "repair", "--state", str(root))
        assert result.returncode == 0, result.stderr
        assert "nothing could be read" in result.stdout
        kept = list(root.glob(f"{STATE_FILE}.damaged-*"))
        assert len(kept) == 1 and kept[0].read_bytes() == before
        assert inspect_state(root).verdict == state_check.HEALTHY
    for kind, said in (("foreign", "not a bayes-sched state"), ("newer", "upgrade")):
        root = _bad_state(tmp_path, kind)
        one_error_line(cli("state", "repair", "--state", str(root)), said, "salvages")
    healthy = tmp_path / "healthy"
    StateStore(healthy).submit(spec("a"))
    result = cli("state", "repair", "--state", str(healthy))
    assert result.returncode == 0 and "nothing to repair" in result.stdout
    assert not list(healthy.glob("*.damaged-*"))


def test_repair_is_refused_while_a_service_holds_the_state(tmp_path: Path) -> None:
    root = _bad_state(tmp_path, "truncated")
    lock = hold_service_lock(root, "held")  # what 'serve' holds while it runs
    try:
        one_error_line(cli("state", "repair", "--state", str(root)), "serve", "stop it")
    finally:
        lock.close()
    assert not list(root.glob("*.damaged-*"))


def test_a_state_created_by_many_processes_at_once_is_one_state(tmp_path: Path) -> None:
    """The file is linked into place whole, so concurrent first submissions all land."""
    import subprocess
    import sys

    from tests.state_files import ROOT

    code = ("import sys; from bayes_sched.service.state import StateStore; "
            "from tests.state_files import spec; "
            "StateStore(sys.argv[1]).submit(spec(sys.argv[2]))")
    processes = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "s"), f"j{k}"],
                                  cwd=ROOT) for k in range(6)]
    assert [p.wait(timeout=120) for p in processes] == [0] * 6
    assert sorted(j["name"] for j in StateStore(tmp_path / "s").jobs()) == [
        f"j{k}" for k in range(6)]
    assert not [p.name for p in (tmp_path / "s").iterdir() if ".new" in p.name]


def test_a_row_that_is_not_json_is_damage_that_check_finds_and_repair_leaves_out(
        tmp_path: Path) -> None:
    """Damage inside a record (the pages intact, so quick_check passes): reading it is one line
    naming the file; ``state check`` parses every JSON column and finds it; repair drops it."""
    root = tmp_path / "state"
    original = populated_state(root, jobs=6, rounds=2)
    with sqlite3.connect(root / STATE_FILE) as connection:
        connection.execute("UPDATE jobs SET record = '{\"status\": \"runn' WHERE name = 'job002'")
    connection.close()
    one_error_line(cli("status", "--state", str(root)), str(root / STATE_FILE),
                   "a record in table jobs is not JSON", "state repair")
    check = cli("state", "check", "--state", str(root))
    one_error_line(check, "rowid 3: column record is not JSON")
    report = json.loads(cli("state", "repair", "--state", str(root), "--json").stdout)
    jobs = {t["table"]: t for t in report["tables"]}["jobs"]
    assert jobs["unreadable"] == ["rowid 3: column record is not JSON"]
    assert jobs["lost"] == ["job002"] and jobs["recovered"] == 5
    salvaged = {job["name"]: job for job in StateStore(root).jobs()}
    assert salvaged == {name: job for name, job in original.items() if name != "job002"}


@pytest.mark.parametrize("keep", [0.02, 0.1, 0.3, 0.6, 0.9, 0.99])
def test_a_state_cut_anywhere_is_refused_then_repaired(tmp_path: Path, keep: float) -> None:
    """Cut at several points (inside the header, page 1, mid-file, the last page): opening is
    one input error naming the file, unless the cut took only the unused tail of the last page
    (SQLite reads a short page as zeros), where every job reads as written; repair always ends
    in a healthy file holding a subset of the jobs, each as it was written."""
    from bayes_sched.service.state_repair import repair_state

    root = tmp_path / "state"
    original = populated_state(root, jobs=30, rounds=10)
    path = root / STATE_FILE
    size = path.stat().st_size
    with path.open("r+b") as stream:
        stream.truncate(max(1, int(size * keep)))
    try:
        store = StateStore(root)
    except InputError as error:
        assert str(error).startswith(f"{path}: ")
        report = repair_state(root)
        assert report.repaired
    else:
        assert {job["name"]: job for job in store.jobs()} == original
        assert keep > 0.9
        store.close()
    salvaged = {job["name"]: job for job in StateStore(root).jobs()}
    assert all(job == original[name] for name, job in salvaged.items())
    assert inspect_state(root).verdict == state_check.HEALTHY


def test_a_full_disk_while_the_state_is_made_is_one_line_and_leaves_nothing(
        tmp_path: Path) -> None:
    """A file-size limit (``RLIMIT_FSIZE``, as a full file system) below a new state's size."""
    import resource
    import subprocess
    import sys

    from tests.state_files import ROOT

    def small_files() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (5000, 5000))

    (tmp_path / "t.py").write_text("pass\n")
    job = tmp_path / "job.toml"
    job.write_text('script = "t.py"\ninit_batch_size = 32\nmax_local_bsz = 64\n'
                   "target_epochs = 2\n")
    root = tmp_path / "state"
    result = subprocess.run([sys.executable, "-m", "bayes_sched", "submit", str(job), "--state",
                             str(root)], capture_output=True, text=True, cwd=ROOT,
                            preexec_fn=small_files, timeout=120)
    one_error_line(result, str(root / STATE_FILE), "on a file system with room")
    assert list(root.iterdir()) == []  # no half-made state file, no temporary one
