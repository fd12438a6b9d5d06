"""``simulate``/``compare`` --seed, --seeds, --baseline and --skip-unknown, ``list workloads|models``,
``--version`` and ``experiments/fidelity.py --from-report`` on reports it cannot use: each as a user
runs it (real subprocesses on real files)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bayes_sched import __version__
from tests.cli_inprocess import run_cli

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
HEADER = "name,time,application,num_replicas,batch_size\n"


def _run(*argv: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return run_cli(*argv)  # in process: the start-up path is test_cli_startup's


def _strict(text: str) -> object:
    def refuse(name: str) -> None:
        raise ValueError(f"non-strict JSON constant {name}")
    return json.loads(text, parse_constant=refuse)


@pytest.fixture()
def tiny(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.csv"
    path.write_text(HEADER + "a,0,ncf,1,1024\nb,30,bert,2,48\nc,60,ncf,2,1024\n")
    return path


SIM = ("--nodes", "1", "--gpus-per-node", "4", "--no-progress", "--json")


def test_seeds_runs_each_seed_as_seed_alone_would(tiny: Path) -> None:
    many = _run("simulate", "--workload", str(tiny), "--policy", "pollux", *SIM,
                "--seed", "4", "--seeds", "2", "--hidden", "contention")
    assert many.returncode == 0, many.stderr
    document = _strict(many.stdout)
    assert isinstance(document, dict)
    (row,) = document["rows"]
    assert row["seeds"] == 2 and row["per_seed"]["seed"] == [4, 5]
    for i, seed in enumerate((4, 5)):
        one = _run("simulate", "--workload", str(tiny), "--policy", "pollux", *SIM,
                   "--seed", str(seed), "--hidden", "contention")
        assert one.returncode == 0, one.stderr
        (alone,) = _strict(one.stdout)  # type: ignore[misc]
        assert row["per_seed"]["avg_jct"][i] == alone["avg_jct"]
        assert row["per_seed"]["makespan"][i] == alone["makespan"]
    assert row["avg_jct_lower_90"] <= row["avg_jct"] <= row["avg_jct_upper_90"]


def test_compare_seeds_prints_interval_table_and_headline(tiny: Path, tmp_path: Path) -> None:
    done = _run("compare", "--workloads", str(tiny), "--policies", "fifo", "tiresias",
                "--baseline", "fifo", "--seeds", "2", "--processes", "1", "--nodes", "1",
                "--no-progress", "--out", str(tmp_path / "rep"))
    assert done.returncode == 0, done.stderr
    assert "mean [90% Student-t interval on the mean over seeds]" in done.stdout
    assert "tiresias: " in done.stdout and " avg JCT vs fifo [90% t-interval over 2 seeds:" \
        in done.stdout
    assert (tmp_path / "rep" / "report.html").is_file()
    assert "tiresias: " in (tmp_path / "rep" / "report.md").read_text().splitlines()[2]


@pytest.mark.parametrize(("argv", "flag"), [
    (("--seeds", "0"), "--seeds"),
    (("--seeds", "1e9"), "--seeds"),
    (("--seeds", "1000000000"), "--seeds"),
    (("--seed", "-1"), "--seed"),
    (("--seed", "4294967295", "--seeds", "2"), "--seeds"),
])
def test_bad_seed_options_fail_fast_naming_the_flag(tiny: Path, argv: tuple[str, ...],
                                                    flag: str) -> None:
    commands = [("simulate", "--workload", str(tiny))]
    if argv == ("--seeds", "0"):  # the options are shared: one compare case shows they are there
        commands.append(("compare", "--workloads", str(tiny)))
    for command in commands:
        start = time.perf_counter()
        done = _run(*command, *argv, "--no-progress", "--out", "/nonexistent-never-made/x",
                    timeout=60)
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and flag in lines[0] and "Traceback" not in done.stderr
        assert time.perf_counter() - start < 30  # before any simulation


def test_baseline_must_be_a_policy_run(tiny: Path, tmp_path: Path) -> None:
    done = _run("compare", "--workloads", str(tiny), "--policies", "fifo", "tiresias",
                "--baseline", "pollux", "--out", str(tmp_path / "rep"), timeout=60)
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "--baseline pollux: not among --policies" in done.stderr
    assert not (tmp_path / "rep").exists()


def test_skip_unknown_drops_rows_and_counts_them(tmp_path: Path) -> None:
    path = tmp_path / "mixed.csv"
    path.write_text(HEADER + "a,0,ncf,1,1024\nx,10,mymodel,1,64\ny,20,mymodel,2,64\n"
                             "b,30,bert,2,48\n")
    refused = _run("simulate", "--workload", str(path), "--policy", "fifo", *SIM)
    assert refused.returncode == 2
    assert "row 3, column 'application': unknown application 'mymodel'" in refused.stderr
    done = _run("simulate", "--workload", str(path), "--policy", "fifo", *SIM, "--skip-unknown")
    assert done.returncode == 0, done.stderr
    assert "mixed: dropped 2 of 4 rows of unknown applications (mymodel)" in done.stderr
    (row,) = _strict(done.stdout)  # type: ignore[misc]
    assert row["finished"] == 2
    only_unknown = tmp_path / "unknown.csv"
    only_unknown.write_text(HEADER + "x,10,mymodel,1,64\n")
    empty = _run("simulate", "--workload", str(only_unknown), *SIM, "--skip-unknown")
    assert empty.returncode == 2 and "no jobs once 1 rows of unknown applications were " \
        "dropped" in empty.stderr


def test_list_workloads_and_models_and_version() -> None:
    workloads = _run("list", "workloads", "--json")
    assert workloads.returncode == 0, workloads.stderr
    rows = _strict(workloads.stdout)
    assert isinstance(rows, list)
    names = [row["name"] for row in rows]
    assert names[:8] == [f"workload-{i}" for i in range(1, 9)]
    assert "workloads-2.0/workload-3" in names and len(names) == 40
    assert rows[0]["jobs"] == 160
    models = _run("list", "models", "--json")
    assert models.returncode == 0, models.stderr
    apps = {row["name"]: row for row in _strict(models.stdout)}  # type: ignore[union-attr]
    assert set(apps) == {"bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3"}
    assert apps["cifar10"]["max_epochs"] == 100 and Path(apps["cifar10"]["profiles"]).is_dir()
    version = _run("--version")
    assert version.returncode == 0 and version.stdout.strip() == f"bayes-sched {__version__}"


def _fidelity(report: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "experiments" / "fidelity.py"),
                           "--from-report", str(report), "--processes", "1"],
                          capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=60)


def _summary(folder: Path, cluster: str, workloads: list[str]) -> Path:
    folder.mkdir()
    rows = [{"policy": p, "workload": w, "seed": 0, "cluster": cluster, "interference": 0.0,
             "hidden": "none", "avg_jct": 1000.0}
            for p in ("pollux", "tiresias", "optimus") for w in workloads]
    (folder / "summary.json").write_text(json.dumps(rows))
    return folder


@pytest.mark.parametrize(("case", "message"), [
    ("missing", "summary.json: no such file"),
    ("workloads", "no seed-0 run of pollux on workload-1, pollux on workload-2, pollux on "
                  "workload-3 and 21 more (its workloads: workload-1-first3)"),
    ("cluster", "ran on cluster 2x4:t4 with interference 0 and hidden law none; expected the "
                "artifact's setting: cluster 16x4:t4"),
])
def test_fidelity_refuses_a_report_it_cannot_use(tmp_path: Path, case: str, message: str) -> None:
    if case == "missing":
        report = tmp_path / "empty"
        report.mkdir()
    elif case == "workloads":
        report = _summary(tmp_path / "r", "16x4:t4", ["workload-1-first3"])
    else:
        report = _summary(tmp_path / "r", "2x4:t4", [f"workload-{i}" for i in range(1, 9)])
    start = time.perf_counter()
    done = _fidelity(report)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], lines
    assert done.stdout == "" and time.perf_counter() - start < 45
