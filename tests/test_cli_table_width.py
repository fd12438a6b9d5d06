"""Tables sized to the terminal that never cut a value (issue 35, item 1).

At ``COLUMNS=80`` and ``120`` each quick ``--json``-capable command's table is read back: the box
characters are removed, each column's fragments (a value folded over several lines) are joined in
order, and every column must spell exactly the ``--json`` values of its key, row after row, as
the table formats them (floats to 4 significant digits, missing values ``-``). A table too wide
for the terminal stacks into ``field | value`` blocks, read back the same way. A dropped
character, an ellipsis or a collapsed column fails the comparison.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import bayes_sched.cli as cli

ROOT = Path(__file__).resolve().parents[1]
BASE_ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
BASE_ENV.pop(cli.DEBUG_VARIABLE, None)
VERTICALS = "│┃"

COMMANDS: list[tuple[tuple[str, ...], str | None]] = [
    # (arguments, the key of the JSON document's rows; None: the JSON is the rows)
    (("list", "policies"), None),
    (("counters", "catalog"), None),
    (("fit", "throughput", "cifar10", "--method", "point"), "parameters"),
    (("simulate", "--trace", "small_test", "--cluster", "v100:4,p100:4,k80:4", "--max-jobs",
      "3", "--no-progress"), None),
    (("simulate", "--workload", "workload-1", "--max-jobs", "3", "--policy", "fifo",
      "--no-progress"), None),
]


def _run(args: tuple[str, ...], columns: int, *extra: str) -> str:
    env = {**BASE_ENV, "COLUMNS": str(columns)}
    result = subprocess.run([sys.executable, "-m", "bayes_sched", *args, *extra],
                            capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    return result.stdout


def _shown(value: Any) -> str:
    """A JSON value as the table shows it (bayes_sched.tables._format), spaces removed."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        text = "-"
    elif isinstance(value, float):
        text = f"{value:.4g}"
    else:
        text = str(value)
    return "".join(text.split())


def _columns(table: str) -> tuple[list[str], list[str]]:
    """The header and each column's text: fragments joined top to bottom, spaces removed."""
    header: list[str] = []
    body: list[str] = []
    for line in table.splitlines():
        if "┃" in line:
            cells = line.split("┃")[1:-1]
            header = [h + "".join(c.split()) for h, c in zip(header or [""] * len(cells), cells,
                                                             strict=True)]
        elif "│" in line:
            cells = line.split("│")[1:-1]
            body = [b + "".join(c.split()) for b, c in zip(body or [""] * len(cells), cells,
                                                         strict=True)]
    return header, body


def _stacked(table: str) -> list[tuple[str, str]]:
    """A stacked table's ``(field, value)`` entries: a line with a field starts one, a line
    without continues its folded value."""
    entries: list[tuple[str, str]] = []
    for line in table.splitlines():
        if "│" not in line:
            continue
        field, value = ("".join(c.split()) for c in line.split("│")[1:-1])
        if field:
            entries.append((field, value))
        else:
            entries[-1] = (entries[-1][0], entries[-1][1] + value)
    return entries


#: Wall-clock figures differ between the JSON run and the table run: checked to be whole numbers.
WALL_CLOCK = {"wall_s", "decision_median_ms", "decision_p95_ms", "fit_seconds",
              "solve_median_seconds"}
NUMBER = re.compile(r"^-?[0-9]+(\.[0-9]+)?(e[+-][0-9]+)?$|^-$")


def _matches(shown: str, key: str, value: Any) -> bool:
    return bool(NUMBER.match(shown)) if key in WALL_CLOCK else shown == _shown(value)


@pytest.mark.parametrize(("args", "rows_key"), COMMANDS)
def test_table_shows_every_json_value_whole(args: tuple[str, ...], rows_key: str | None) -> None:
    document = json.loads(_run(args, 120, "--json"))
    rows = document if rows_key is None else document[rows_key]
    for width in (80, 120):
        table = _run(args, width)
        assert "…" not in table
        assert all(len(line) <= width for line in table.splitlines()), table
        header, body = _columns(table)
        assert header and body, table
        if header != ["field", "value"]:
            for name, column in zip(header, body, strict=True):
                if name in WALL_CLOCK:  # one row here: its cell is one whole number
                    assert len(rows) > 1 or NUMBER.match(column), (name, table)
                    continue
                assert column == "".join(_shown(row[name]) for row in rows), (name, table)
            continue
        # Stacked: blocks of (field, value), one per row, each block's fields in one order.
        entries = _stacked(table)
        first = entries[0][0]
        block = -1
        for field, value in entries:
            block += field == first
            assert _matches(value, field, rows[block][field]), (block, field, table)
        assert block == len(rows) - 1, table


def test_rows_with_different_keys_share_one_table(capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # A benchmark's runs of different cases (decision rows with "gpus", trace rows with "hours")
    # print as one table: the union of the keys, "-" where a row has none.
    from bayes_sched.tables import print_table

    monkeypatch.setenv("COLUMNS", "120")
    print_table([{"case": "scale-64", "gpus": 64}, {"case": "trace", "hours": 48.0}])
    header, body = _columns(capsys.readouterr().out)
    assert header == ["case", "gpus", "hours"]
    assert body == ["scale-64trace", "64-", "-48"]

