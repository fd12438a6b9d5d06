"""experiments/tables.py, the benchmarks' one table printer, run as a benchmark runs it (nothing
imports experiments): columns as wide as their widest cell, or one JSON line per table."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_PRINT = """
from experiments.tables import print_rows
rows = [{"model": "deepspeech2-with-a-long-name", "setting": "cold-physics-robust", "x": 0.123456},
        {"model": "ncf", "setting": "warm", "x": 2.0}]
print_rows("Title", rows, {as_json})
"""


def _run(as_json: bool) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", _PRINT.replace("{as_json}", str(as_json))], env=env,
                          capture_output=True, text=True, check=True, timeout=60)
    return done.stdout


def test_text_tables_pad_each_column_to_its_widest_cell() -> None:
    lines = _run(False).splitlines()
    assert lines[:2] == ["", "Title"]
    header, *body = lines[2:]
    assert len(body) == 2
    assert len({len(line) for line in (header, *body)}) == 1  # every line as wide
    assert body[0].split() == ["deepspeech2-with-a-long-name", "cold-physics-robust", "0.1235"]
    assert header.split() == ["model", "setting", "x"]
    assert body[1].endswith(" 2")


def test_json_tables_are_one_line_with_the_rows() -> None:
    table = json.loads(_run(True))
    assert table["table"] == "Title" and table["rows"][1] == {"model": "ncf", "setting": "warm",
                                                              "x": 2.0}
