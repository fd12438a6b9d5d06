"""Workload CSVs: shipped ones load; bad ones fail with one line naming the row and column."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bayes_sched.errors import InputError
from bayes_sched.sim.workload import WORKLOAD_SETS, read_workload, resolve_workload

ROOT = Path(__file__).resolve().parents[1]
HEADER = "name,time,application,num_replicas,batch_size\n"


def test_shipped_workloads_load_sorted() -> None:
    for workload_set in WORKLOAD_SETS:
        workload = read_workload(f"{workload_set}/workload-1")
        times = [job.submit_time for job in workload.jobs]
        assert times == sorted(times) and len(workload) > 0
    assert len(read_workload("workload-3")) == 160
    assert resolve_workload("7").name == "workload-7.csv"


@pytest.mark.parametrize(("rows", "row", "column", "words"), [
    ("a,0,resnet9000,1,128\n", 2, "application", "unknown application"),
    ("a,-5,cifar10,1,128\n", 2, "time", "negative"),
    ("a,10,cifar10,1,128\nb,5,cifar10,1,128\n", 3, "time", "sorted"),
    ("a,0,cifar10,1.5,128\n", 2, "num_replicas", "integer"),
    ("a,0,cifar10,0,128\n", 2, "num_replicas", "positive integer"),
    ("a,0,cifar10,2,abc\n", 2, "batch_size", "not a number"),
    ("a,0,cifar10,2,128\na,1,cifar10,2,128\n", 3, "name", "duplicate"),
])
def test_bad_rows_name_file_row_and_column(tmp_path: Path, rows: str, row: int, column: str,
                                           words: str) -> None:
    path = tmp_path / "w.csv"
    path.write_text(HEADER + rows)
    with pytest.raises(InputError) as info:
        read_workload(path)
    message = str(info.value)
    assert str(path) in message and f"row {row}" in message and f"'{column}'" in message
    assert words in message and "\n" not in message


def test_missing_column(tmp_path: Path) -> None:
    path = tmp_path / "w.csv"
    path.write_text("name,time,application\na,0,cifar10\n")
    with pytest.raises(InputError, match="missing column.*num_replicas"):
        read_workload(path)


def test_cli_bad_workload_exits_2_with_one_line(tmp_path: Path) -> None:
    path = tmp_path / "w.csv"
    path.write_text(HEADER + "a,0,cifar10,1,128\nb,-1,cifar10,1,128\n")
    done = subprocess.run([sys.executable, "-m", "bayes_sched", "simulate", "--workload",
                           str(path), "--no-progress"], capture_output=True, text=True, cwd=ROOT,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("bayes-sched: error:")
    assert "row 3" in lines[0] and "'time'" in lines[0] and "Traceback" not in done.stderr
