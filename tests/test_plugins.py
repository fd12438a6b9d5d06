"""Plugins: a policy and an estimator from a package outside bayes_sched (``tests/plugin_pkg``),
installed for real (``pip install --target``), found through entry points and run by
``simulate``, ``compare`` and ``serve --backend local``; a clashing or broken plugin is named in
one line. Nothing in ``bayes_sched/`` names the plugin."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = ROOT / "tests" / "plugin_pkg"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The plugin installed into a folder of its own, as pip installs it."""
    target = tmp_path_factory.mktemp("site")
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                    "--no-build-isolation", "--no-index", "--target", str(target), str(PLUGIN)],
                   check=True, capture_output=True, text=True, timeout=240)
    assert (target / "bayes_sched_example_plugin-0.1.0.dist-info" / "entry_points.txt").is_file()
    return target


def _env(*paths: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([*map(str, paths), str(ROOT)])}


def _run(site: Path, *argv: str, cwd: Path | None = None,
         timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bayes_sched", *argv], cwd=cwd, env=_env(site),
                          capture_output=True, text=True, timeout=timeout)


def test_nothing_in_the_package_names_the_plugin() -> None:
    for path in (ROOT / "bayes_sched").rglob("*.py"):
        text = path.read_text()
        assert "fewest_epochs_left" not in text and "bayes_sched_example_plugin" not in text \
            and '"epochs_left"' not in text, path


def test_the_plugin_policy_and_estimator_run_in_simulate_and_compare(site: Path,
                                                                     tmp_path: Path) -> None:
    listed = _run(site, "list", "policies", "--json")
    assert listed.returncode == 0, listed.stderr
    [row] = [r for r in json.loads(listed.stdout) if r["name"] == "fewest_epochs_left"]
    assert "(plugin: bayes-sched-example-plugin)" in row["summary"]

    # A few jobs each: what is checked is that the plugin runs and is chosen, not how well.
    done = _run(site, "simulate", "--workload", "workload-1", "--policy", "fewest_epochs_left",
                "--max-jobs", "3", "--no-progress", "--json", "--out", str(tmp_path / "sim"))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)[0]["finished"] == 3

    # The estimator the policy's defaults name was chosen outside it and served its decisions.
    probe = ("from bayes_sched.worlds import POLLUX\n"
             "name, jobs = POLLUX.read_jobs('workload-1', max_jobs=3)\n"
             "r = POLLUX.run(jobs, POLLUX.make_policy('fewest_epochs_left'), name=name)\n"
             "import json; print(json.dumps([r.estimates_from, r.estimator_stats, "
             "r.policy_stats]))\n")
    ran = subprocess.run([sys.executable, "-c", probe], env=_env(site), capture_output=True,
                         text=True, timeout=300)
    assert ran.returncode == 0, ran.stderr
    sources, estimator_stats, policy_stats = json.loads(ran.stdout)
    assert sources == {"remaining_work": "epochs_left"}
    assert estimator_stats["epochs_left_rounds"] > 0 and policy_stats["started"] == 3

    done = _run(site, "compare", "--workloads", "workload-1", "--policies", "fewest_epochs_left",
                "fifo", "--max-jobs", "2", "--processes", "1", "--no-progress",
                "--out", str(tmp_path / "cmp"))
    assert done.returncode == 0, done.stderr
    summary = pd.read_csv(tmp_path / "cmp" / "summary.csv")
    assert sorted(summary["policy"]) == ["fewest_epochs_left", "fifo"]
    assert (summary["finished"] == 2).all()


def test_the_plugin_policy_serves_a_real_job_on_the_local_backend(site: Path,
                                                                  tmp_path: Path) -> None:
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    submitted = _run(site, "submit", "examples/tiny_job.toml", cwd=tmp_path)
    assert submitted.returncode == 0, submitted.stderr
    served = _run(site, "serve", "--backend", "local", "--gpus", "2", "--interval", "2",
                  "--exit-when-idle", "--policy", "fewest_epochs_left", cwd=tmp_path,
                  timeout=240)
    assert served.returncode == 0, served.stderr[-3000:]
    status = _run(site, "status", "--json", cwd=tmp_path)
    assert status.returncode == 0, status.stderr
    [job] = json.loads(status.stdout)["jobs"]
    assert (job["name"], job["status"]) == ("tiny", "done")


def _fake_distribution(site: Path, name: str, entry_points: str) -> None:
    """An installed distribution as importlib.metadata reads one: a dist-info folder with its
    METADATA and entry_points.txt."""
    info = site / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(entry_points)


def test_a_clashing_plugin_is_skipped_and_a_broken_one_fails_in_one_line(tmp_path: Path) -> None:
    _fake_distribution(tmp_path, "clash-plugin", "[bayes_sched.policies]\n"
                                                 "pollux = no_such_module:Policy\n")
    _fake_distribution(tmp_path, "broken-plugin", "[bayes_sched.policies]\n"
                                                  "broken = no_such_module:Policy\n")
    probe = ("import logging; logging.basicConfig()\n"
             "from bayes_sched.policies import POLICIES\n"
             "assert POLICIES.plugin_of('pollux') is None, 'the built-in was replaced'\n"
             "print(POLICIES.plugin_of('broken'))\n")
    ran = subprocess.run([sys.executable, "-c", probe], env=_env(tmp_path), capture_output=True,
                         text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "broken-plugin"
    assert "policy plugin 'pollux' of clash-plugin skipped" in ran.stderr
    done = subprocess.run([sys.executable, "-m", "bayes_sched", "simulate", "--workload",
                           "workload-1", "--policy", "broken", "--max-jobs", "2"],
                          env=_env(tmp_path), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    [line] = [line for line in done.stderr.splitlines() if line.startswith("bayes-sched:")]
    assert "policy 'broken' (plugin: broken-plugin): cannot load no_such_module:Policy" in line
    assert "Traceback" not in done.stderr
