"""Who may write the state: the trust model of the service's state folder.

The state holds the job specs the service runs: whoever can write the state folder, its SQLite
file (or that file's write-ahead log) or the jobs folder can make ``bayes-sched serve`` run any
program, as the service's user. So the state is private: the store creates the folder and the
jobs folder 0700 and its files 0600 (whatever the umask), and :func:`check_private_state`,
which ``serve`` runs before it takes the service lock (so before any job starts), refuses a
state that is not owned by the service's user or that its group or others can write, and one
whose parent folder others can write without the sticky bit (they could swap the state folder).

``submit``, ``cancel`` and ``status`` do not check: the operating system's permissions decide
whether they can write or read the state, and what they write is run only by a service that
passed the check (where several users submit, they do so through an operator's service; see the
README). Reading a state others can write is no risk to the reader.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from bayes_sched.errors import InputError

#: What the check looks at, relative to the state folder ("" is the folder itself), and whether
#: each is a folder.
PRIVATE_PATHS: tuple[tuple[str, bool], ...] = (
    ("", True), ("jobs", True), ("state.db", False), ("state.db-wal", False),
    ("state.db-shm", False), ("serve.lock", False))


def user_name(uid: int) -> str:
    """The login name of ``uid``, or the number where it has none."""
    try:
        import pwd

        return pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        return str(uid)


def describe_user(uid: int) -> str:
    """``uid N (name)``, for messages."""
    return f"uid {uid} ({user_name(uid)})"


def check_private_state(root: Path) -> None:
    """Refuse a state that anyone but this process's user could write.

    Raises:
        InputError: one line naming the path at fault and the command that fixes it: a path
            owned by another user, one its group or others can write, or a parent folder
            others can write without the sticky bit.
    """
    me = os.geteuid()
    for name, folder in PRIVATE_PATHS:
        path = root / name if name else root
        try:
            info = path.stat()
        except FileNotFoundError:
            continue  # made private when created
        if info.st_uid != me:
            raise InputError(
                f"owned by {describe_user(info.st_uid)}, not by {describe_user(me)} who runs "
                "'bayes-sched serve': whoever can write the state can run programs as the "
                "service's user; expected the service user's own state: check its jobs, then "
                f"'chown -R {user_name(me)} {root}', or run serve as that user", path)
        mode = stat.S_IMODE(info.st_mode)
        if mode & 0o022:
            private = "700" if folder else "600"
            raise InputError(
                f"its group or others can write it (mode {mode:04o}), and whoever can write the "
                "state can run programs as the service's user: expected a private state: "
                f"'chmod {private} {path}'", path)
    parent = root.resolve().parent
    mode = parent.stat().st_mode
    if mode & stat.S_IWOTH and not mode & stat.S_ISVTX:
        raise InputError(
            f"others can write this folder (mode {stat.S_IMODE(mode):04o}, no sticky bit), so "
            f"they can replace the state folder {root.name}: expected a parent only its owner "
            f"can change: 'chmod o-w {parent}' (or 'chmod +t')", parent)
