"""``serve --keep-rounds``: the state keeps the latest rounds' rows only, so a long-running
service's state grows with its jobs, not with its uptime."""
from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

from bayes_sched.service.state import STATE_FILE, StateStore
from tests.state_files import cli, one_error_line, spec


def _rounds(root: Path) -> list[int]:
    with sqlite3.connect(root / STATE_FILE) as db:
        return [number for (number,) in db.execute("SELECT round FROM rounds ORDER BY round")]


def test_save_deletes_the_rounds_older_than_the_kept_ones(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state")
    for number in range(1, 8):
        store.save([], round_row=(number, 60.0 * number, {}, {}, 0.01),
                   keep_rounds=3 if number > 4 else None)
    last = store.last_round()
    store.close()
    assert _rounds(tmp_path / "state") == [5, 6, 7]
    assert last is not None and last["round"] == 7 and last["time"] == 420.0


def test_serve_keeps_the_last_rounds_it_is_told_to(tmp_path: Path) -> None:
    root = tmp_path / "state"
    store = StateStore(root)
    store.submit(spec("sleeper", argv=(sys.executable, "-c", "import time; time.sleep(4)")))
    store.close()
    result = cli("serve", "--state", str(root), "--gpus", "1", "--interval", "0.2",
                 "--max-rounds", "6", "--keep-rounds", "2", "--quiet")
    assert result.returncode == 0, result.stderr
    assert _rounds(root) == [5, 6]  # the job (a 4 s sleep) is left running, and ends alone


def test_keep_rounds_below_one_is_refused(tmp_path: Path) -> None:
    one_error_line(cli("serve", "--state", str(tmp_path / "s"), "--keep-rounds", "0"),
                   "--keep-rounds")
