"""``--profiles DIR``: a workload may name the user's own applications, profiled in the shipped
models' formats; each is simulated from its own files."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from perfmodel.datasets import pollux_model_dir
from tests.cli_inprocess import run_cli

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
HEADER = "name,time,application,num_replicas,batch_size\n"
SIM = ("simulate", "--policy", "fifo", "--nodes", "1", "--json", "--no-progress")


def _run(*argv: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return run_cli(*argv)  # in process: the start-up path is test_cli_startup's


def test_own_application_runs_from_its_profiles(tmp_path: Path) -> None:
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    # "mybert" is profiled with bert's files: it must run exactly as bert does.
    shutil.copytree(pollux_model_dir("bert"), profiles / "mybert")
    theirs, ours = tmp_path / "theirs.csv", tmp_path / "ours.csv"
    theirs.write_text(HEADER + "a,0,mybert,2,48\n")
    ours.write_text(HEADER + "a,0,bert,2,48\n")
    refused = _run(*SIM, "--workload", str(theirs))
    assert refused.returncode == 2 and "unknown application 'mybert'" in refused.stderr
    done = _run(*SIM, "--workload", str(theirs), "--profiles", str(profiles))
    assert done.returncode == 0, done.stderr
    reference = _run(*SIM, "--workload", str(ours))
    assert reference.returncode == 0, reference.stderr
    (row,), (expected,) = json.loads(done.stdout), json.loads(reference.stdout)
    assert row["finished"] == 1 and row["avg_jct"] == expected["avg_jct"]
    # The hidden laws know the shipped applications only: refused up front, one line.
    hidden = _run(*SIM, "--workload", str(theirs), "--profiles", str(profiles),
                  "--hidden", "gavel")
    assert hidden.returncode == 2 and hidden.stderr.count("\n") == 1
    assert "--hidden gavel: the law models the shipped applications only" in hidden.stderr


def test_bad_profiles_fail_with_one_line(tmp_path: Path) -> None:
    workload = tmp_path / "w.csv"
    workload.write_text(HEADER + "a,0,mine,1,48\n")
    shipped = tmp_path / "shipped"
    shutil.copytree(pollux_model_dir("bert"), shipped / "ncf")
    broken = tmp_path / "broken"
    shutil.copytree(pollux_model_dir("bert"), broken / "mine")
    (broken / "mine" / "scalability.csv").unlink()
    cases = {str(tmp_path / "nowhere"): "--profiles: not a folder",
             str(tmp_path): "--profiles: no application in it",
             str(shipped): "--profiles: 'ncf' is a shipped application",
             str(broken): "mine/scalability.csv: no such file"}
    for folder, message in cases.items():
        done = _run(*SIM, "--workload", str(workload), "--profiles", folder)
        assert done.returncode == 2, (folder, done.stderr)
        assert done.stderr.count("\n") == 1 and message in done.stderr, done.stderr
