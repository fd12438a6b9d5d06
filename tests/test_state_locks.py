"""A process that opens its state a second time (another store, ``state check``'s diagnosis)
keeps the SQLite locks of the store it holds: closing any descriptor of a file drops every
POSIX lock the process holds on it, so a second open must go through SQLite too. Otherwise
another process closing its connection takes itself for the last one, deletes the write-ahead
log under the first store, and the first store's later writes are seen by nobody (what made
``events --follow`` miss an event now and then). Real SQLite files; the other process is a
real subprocess."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from bayes_sched.service.events import Event
from bayes_sched.service.state import STATE_FILE, StateStore
from bayes_sched.service.state_check import inspect_state

#: Another process: open the state file, count its events, close it (a reader's whole life).
COUNT_EVENTS = ("import sqlite3, sys; connection = sqlite3.connect(sys.argv[1]); "
                "print(connection.execute('SELECT count(*) FROM events').fetchone()[0]); "
                "connection.close()")


def _events_seen_elsewhere(root: Path) -> int:
    done = subprocess.run([sys.executable, "-c", COUNT_EVENTS, str(root / STATE_FILE)],
                          capture_output=True, text=True, timeout=60, check=True)
    return int(done.stdout)


def _second_store(root: Path) -> None:
    StateStore(root, create=False).close()


def _state_check(root: Path) -> None:
    assert inspect_state(root).usable


@pytest.mark.parametrize("open_again", [_second_store, _state_check])
def test_opening_the_state_again_keeps_the_first_stores_writes_seen(
        tmp_path: Path, open_again: Callable[[Path], None]) -> None:
    root = tmp_path / "state"
    store = StateStore(root)
    store.add_events([Event(1.0, "j", "started", "first", {})])
    open_again(root)
    assert _events_seen_elsewhere(root) == 1  # its close leaves the write-ahead log in place
    store.add_events([Event(2.0, "j", "grown", "second", {})])
    assert _events_seen_elsewhere(root) == 2
    store.close()
    assert [e["message"] for e in StateStore(root, create=False).events()] == ["first", "second"]
