"""Who may write the state: it is made private, ``serve`` refuses one that others can write or
that another user owns (before any job runs), and a state this user cannot write is one line
naming it. Real folders, real subprocesses, another real user (uid 65534, via ``setpriv``)."""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from bayes_sched.errors import InputError
from bayes_sched.service.state import STATE_FILE, StateStore
from tests.state_files import NOBODY, cli, one_error_line, setpriv, spec


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A folder every user can enter (pytest's own is private to its user)."""
    folder = Path(tempfile.mkdtemp(prefix="state-trust-"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        for path in folder.rglob("*"):
            if path.is_dir():  # a test may have left a folder unwritable
                path.chmod(0o700)
        import shutil

        shutil.rmtree(folder)


def test_a_new_state_is_private_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        store = StateStore(tmp_path / "deep" / "state")
        store.submit(spec("a"))  # the write-ahead log and its index now exist
        store.lock_for_service()
        root = store.root
        assert _mode(root) == 0o700 and _mode(root / "jobs") == 0o700
        for name in (STATE_FILE, f"{STATE_FILE}-wal", f"{STATE_FILE}-shm", "serve.lock"):
            assert _mode(root / name) == 0o600, name
        store.close()
    finally:
        os.umask(old)


def _serve_with_a_marker_job(root: Path, marker: Path) -> None:
    """A state holding one job that would leave ``marker`` if it ever ran."""
    store = StateStore(root)
    store.submit(spec("probe", argv=(sys.executable, "-c",
                                     f"open({str(marker)!r}, 'w').write('ran')")))
    store.close()


def _serve(root: Path) -> tuple[str, ...]:
    return ("serve", "--state", str(root), "--gpus", "1", "--interval", "0.5",
            "--max-rounds", "4", "--exit-when-idle", "--quiet")


@pytest.mark.parametrize("case", ["another-owner", "group-writable"])
def test_serve_refuses_a_state_others_can_write_before_any_job_runs(
        tmp_path: Path, case: str) -> None:
    root = tmp_path / "shared-state"
    marker = tmp_path / "ran"
    _serve_with_a_marker_job(root, marker)
    if case == "another-owner":
        if os.geteuid() != 0:
            pytest.skip("needs root to give the state to uid 65534")
        for path in (root, *root.rglob("*")):
            os.chown(path, NOBODY, NOBODY)  # e.g. a state folder a user 'nobody' prepared
        said = ("owned by uid 65534", f"chown -R {_me()} {root}")
    else:
        root.chmod(0o770)
        said = ("group or others can write it (mode 0770)", f"chmod 700 {root}")
    one_error_line(cli(*_serve(root)), str(root), *said)
    assert not marker.exists()  # refused before the job ran
    os.chown(root, os.geteuid(), os.getegid())  # read back as its reader
    assert [job["status"] for job in StateStore(root).jobs()] == ["submitted"]


def _me() -> str:
    import pwd

    return pwd.getpwuid(os.geteuid()).pw_name


def test_serve_runs_the_same_job_from_a_private_state(tmp_path: Path) -> None:
    """The control of the refusals above: from a private state the job runs."""
    root = tmp_path / "state"
    marker = tmp_path / "ran"
    _serve_with_a_marker_job(root, marker)
    cli(*_serve(root))
    assert marker.read_text() == "ran"


def test_the_service_lock_checks_the_files_and_the_parent(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "open" / "state")
    store.submit(spec("a"))
    (store.root / STATE_FILE).chmod(0o606)
    with pytest.raises(InputError, match=r"state\.db: its group or others can write it "
                                         r"\(mode 0606\).*'chmod 600 "):
        store.lock_for_service()
    (store.root / STATE_FILE).chmod(0o600)
    parent = store.root.parent
    parent.chmod(0o777)
    with pytest.raises(InputError, match=r"others can write this folder \(mode 0777, no sticky"):
        store.lock_for_service()
    parent.chmod(0o1777)  # like /tmp: others cannot move the state folder
    store.lock_for_service()
    store.close()
    parent.chmod(0o755)


def _other_user_args() -> tuple[bool, str]:
    if os.geteuid() != 0:
        return False, ""
    if setpriv() is None:
        pytest.skip("needs setpriv to run a command as another user")
    return True, "uid 65534"


def test_a_state_this_user_cannot_write_is_one_line_naming_it(shared_tmp: Path) -> None:
    """A state made by another user with the first releases' modes (0755 folder, 0644 file):
    readable, not writable, which SQLite's write-ahead log needs even to read."""
    root = shared_tmp / "state"
    StateStore(root).submit(spec("a"))
    as_nobody, who = _other_user_args()
    root.chmod(0o555 if not as_nobody else 0o755)  # as root, only another user is stopped
    (root / STATE_FILE).chmod(0o644)
    job = shared_tmp / "job.toml"
    (shared_tmp / "t.py").write_text("pass\n")
    # submit resolves the job's interpreter first: name one the other user may run (this
    # interpreter may sit in a folder closed to them).
    python = shutil.which("python3", path="/usr/bin:/bin") if as_nobody else sys.executable
    if python is None:
        pytest.skip("needs a system python3 that uid 65534 may run")
    job.write_text(f'name = "b"\nscript = "{shared_tmp / "t.py"}"\npython = "{python}"\n'
                   "init_batch_size = 32\nmax_local_bsz = 64\ntarget_epochs = 2\n")
    for args in (("status",), ("state", "check"), ("submit", str(job)), ("cancel", "a")):
        line = one_error_line(cli(*args, "--state", str(root), as_nobody=as_nobody),
                              f"{root}: this folder cannot be read and written", who,
                              "mode 0", "needs write access")
        assert "Errno" not in line
    new = shared_tmp / "locked" / "state"
    new.parent.mkdir(mode=0o755)
    if not as_nobody:
        new.parent.chmod(0o555)
    one_error_line(cli("submit", str(job), "--state", str(new), as_nobody=as_nobody),
                   str(new), "cannot make the state folder: Permission denied")
    root.chmod(0o700)
    status = cli("status", "--state", str(root), "--json")  # its owner still reads it
    assert [j["name"] for j in json.loads(status.stdout)["jobs"]] == ["a"]
