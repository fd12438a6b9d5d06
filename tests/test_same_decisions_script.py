"""experiments/same_decisions.py run as a user runs it (nothing imports experiments): a base
revision against a tree with the same code reports every job identical and exits 0; against a tree
whose trace gives one job other work it names the job and exits 1.

The branch side is an export of HEAD (``git archive``), not this checkout, so that uncommitted
work in progress cannot make the identical case fail."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "experiments" / "same_decisions.py"
SCENARIO = "gavel/max_min_fairness_perf"
TRACE = Path("bayes_sched") / "data" / "gavel" / "traces" / "max_min_fairness.trace"


def _head_tree(into: Path) -> Path:
    """The packages of HEAD, exported into ``into``; skips without a git checkout."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    done = subprocess.run(["git", "-C", str(ROOT), "archive", "HEAD", "bayes_sched", "perfmodel",
                           "counters", "collectors"], capture_output=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"not a git checkout with a HEAD: {done.stderr.decode().strip()}")
    with tarfile.open(fileobj=io.BytesIO(done.stdout)) as archive:
        archive.extractall(into, filter="data")
    return into


def _same_decisions(branch: Path) -> tuple[int, list[dict[str, object]], str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--base", "HEAD", "--branch-tree", str(branch),
         "--scenarios", SCENARIO, "--jobs", "4", "--json"],
        capture_output=True, text=True, env=env, timeout=300, check=False)
    return done.returncode, json.loads(done.stdout or "[]"), done.stderr


def test_the_same_code_on_both_sides_gives_identical_jobs_and_exit_0(tmp_path: Path) -> None:
    status, rows, stderr = _same_decisions(_head_tree(tmp_path))
    assert status == 0, stderr
    assert [(r["scenario"], r["jobs"], r["result"]) for r in rows] == [(SCENARIO, 4, "identical")]
    assert rows[0]["max_abs_jct_diff"] == 0
    assert rows[0]["first_difference"] is None


def test_a_job_with_other_work_on_the_branch_is_named_and_exits_1(tmp_path: Path) -> None:
    branch = _head_tree(tmp_path)
    trace = branch / TRACE
    lines = trace.read_text().splitlines(keepends=True)
    fields = lines[0].split("\t")
    fields[5] = str(int(fields[5]) * 2)  # the first job's steps: twice the work
    trace.write_text("\t".join(fields) + "".join(lines[1:]))
    status, rows, stderr = _same_decisions(branch)
    assert status == 1, stderr
    (row,) = rows
    assert row["result"] == "different"
    assert isinstance(row["max_abs_jct_diff"], float) and row["max_abs_jct_diff"] > 0
    assert str(row["first_difference"]).startswith("job ")
