"""The suite's own order (tests/conftest.py): every file it names to run first exists."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import LONG_RUNNING_FILES


def test_every_long_running_file_named_exists() -> None:
    here = Path(__file__).parent
    assert [name for name in LONG_RUNNING_FILES if not (here / name).is_file()] == []
    assert len(set(LONG_RUNNING_FILES)) == len(LONG_RUNNING_FILES)
