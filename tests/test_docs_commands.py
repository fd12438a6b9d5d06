"""Every ``bayes-sched`` command the README and the docs show runs as written.

Each line of a ``bash`` block in README.md, EXPERIMENTS.md and docs/**/*.md that starts with
``bayes-sched `` is in exactly one of three tables below: :data:`QUICK` (run here, from a fresh
folder as the working directory, in reading order), :data:`SLOW` (run by the
``slow`` test, with the reason it is slow) or :data:`ELSEWHERE` (a named test runs it, or the same
command with only its paths and output options changed). A command added to a page without an
entry fails :func:`test_every_shown_command_is_run_somewhere`, so none slips in unrun.
Syntax templates (placeholders such as ``STORE``) go in ``text`` blocks, which are not commands.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", ROOT / "EXPERIMENTS.md", *sorted((ROOT / "docs").rglob("*.md"))]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}

#: Quick commands (a few seconds each; about 40 s of CPU together on a loaded 2-core machine).
QUICK = {
    "bayes-sched fit throughput cifar10 --method point",
    "bayes-sched fit efficiency imagenet --batch-size 400 3200",
    "bayes-sched list policies",
    "bayes-sched list worlds",
    "bayes-sched list estimators",
    "bayes-sched counters catalog",
    "bayes-sched collect --samples 5 --out counters",
    "bayes-sched counters info counters",
    "bayes-sched counters validate counters",
    "bayes-sched simulate --workload workload-1 --policy pollux --max-jobs 4 --out sim",
    "bayes-sched compare --workloads workload-1 --policies pollux tiresias --max-jobs 4 --out cmp",
    "bayes-sched simulate --trace max_min_fairness --policy max_min_fairness_perf --seed 0",
}

#: Commands too long for the default suite -> why; ``pytest -m slow`` runs them all.
SLOW = {
    "bayes-sched fit throughput cifar10": "a Bayesian fit with the NUTS fallback: minutes",
    "bayes-sched fit throughput ncf": "a Bayesian fit (SVI, PSIS check): tens of seconds",
    "bayes-sched report ncf --out report/ncf": "a Bayesian fit and its plots",
    "bayes-sched report ncf yolov3 --out report/two-models": "two Bayesian fits and their plots",
    "bayes-sched demo --out report --max-jobs 40": "six fits and two simulations: minutes",
    "bayes-sched simulate --workload workload-6 --policy pollux --out report/sim":
        "160 jobs under Pollux: minutes",
    "bayes-sched compare --out sim-report": "32 whole-workload runs (4 policies x 8 workloads)",
    "bayes-sched simulate --workload workload-1 --policy pollux --policy-opt p=-0.5 "
    "--policy-opt ga.population=24": "a whole workload under Pollux: minutes",
    "bayes-sched simulate --workload workload-1 --cluster 8x8:t4 --hidden contention "
    "--hidden-opt demand_spread=0.3": "a whole workload: minutes",
    "bayes-sched compare --workloads workload-1 --policies pollux tiresias "
    "--policy-opt tiresias:thresholds=[3600]": "two whole workload runs: minutes",
    "bayes-sched compare --workloads workload-1 workload-2 --policies pollux tiresias "
    "--baseline tiresias --seeds 3": "twelve whole workload runs",
    "bayes-sched simulate --trace small_test --cluster v100:36,p100:36,k80:36 "
    "--policy max_min_fairness_packed --estimator throughput=bayes --seed 0":
        "a learned-throughput run: a GP refit per round",
    "bayes-sched simulate --trace tacc_120 --cluster v100:32 --policy shockwave":
        "120 jobs, a MILP per round: minutes",
    "bayes-sched simulate --trace workload-1 --cluster v100:36,p100:36,k80:36 "
    "--policy sia_adaptive --seed 0 --plot plots": "a whole workload, an ILP per round",
    "bayes-sched compare --policies pollux sia_adaptive max_min_fairness_perf sia "
    "--workloads workload-1 --traces small_test --cluster v100:36,p100:36,k80:36":
        "four policies over a whole workload and a trace",
    "bayes-sched infer synthetic cluster --nodes 4 --seed 0": "writes four counters stores",
    "bayes-sched infer contention cluster --out report/contention":
        "an SVI fit of the contention network (needs the synthetic cluster above)",
}

#: The test that runs serve's tenant commands (tests/test_serve_tenants_reclaim.py).
TENANTS_TEST = ("tests/test_serve_tenants_reclaim.py::"
                "test_borrowed_gpu_is_reclaimed_for_its_owner_through_checkpoint_stop_restart")

#: Commands another test runs -> "tests/FILE.py::TEST" (checked to exist).
ELSEWHERE = {
    "bayes-sched submit examples/tiny_job.toml":
        "tests/test_service_readme.py::test_readme_service_commands_run_from_a_fresh_folder",
    "bayes-sched serve --gpus 2 --interval 2 --exit-when-idle":
        "tests/test_service_readme.py::test_readme_service_commands_run_from_a_fresh_folder",
    "bayes-sched status":
        "tests/test_service_readme.py::test_readme_service_commands_run_from_a_fresh_folder",
    "bayes-sched events":
        "tests/test_serve_events.py::test_serve_reports_each_transition_as_event_log_line_and_metric",
    "bayes-sched logs tiny":
        "tests/test_serve_events.py::test_serve_reports_each_transition_as_event_log_line_and_metric",
    "bayes-sched submit examples/tiny_job.toml --tenant vision": TENANTS_TEST,
    "bayes-sched serve --gpus 2 --interval 1 --policy fifo --tenants examples/tenants.toml "
    "--exit-when-idle": TENANTS_TEST,
    "bayes-sched status --tenant vision": TENANTS_TEST,
    "bayes-sched events --tenant nlp": TENANTS_TEST,
    "bayes-sched infer solo-features --log resnet=resnet.csv --log lm=lm.csv --log a3c=a3c.csv "
    "--out solo.csv":
        "tests/test_colocation_cli.py::test_the_guides_colocation_commands_run_on_logs_and_pairs",
    "bayes-sched infer interference pairs.csv solo.csv --jobs resnet,lm --model gp":
        "tests/test_colocation_cli.py::test_the_guides_colocation_commands_run_on_logs_and_pairs",
    "bayes-sched compare --ray auto --workloads workload-1 workload-2 --seeds 3":
        "tests/test_ray_backend.py::test_compare_on_ray_equals_local_processes",
    # after the page's python line writes the folder they read
    "bayes-sched simulate --workload workload-1 --max-jobs 4 --cluster v100:8,a100:8,k80:8 "
    "--type-profiles type-profiles --policy sia_adaptive --policy-opt skip_profiling_within=0.1 "
    "--out typed-sim":
        "tests/test_type_profiles_world.py::test_clusters_page_type_profile_commands_run_as_written",
    "bayes-sched fit throughput type-profiles --gpu-type a100 --method point":
        "tests/test_type_profiles_world.py::test_clusters_page_type_profile_commands_run_as_written",
}


def shown_commands() -> list[tuple[Path, str]]:
    """(page, command) for every ``bayes-sched`` line of a bash block, as the shell splits it
    (comments stripped), in page order."""
    return [(page, " ".join(shlex.split(line, comments=True))) for page in PAGES
            for block in re.findall(r"```bash\n(.*?)```", page.read_text(), flags=re.S)
            for line in block.splitlines() if line.startswith("bayes-sched ")]


def test_every_shown_command_is_run_somewhere() -> None:
    shown = {command for _, command in shown_commands()}
    tables = [set(QUICK), set(SLOW), set(ELSEWHERE)]
    assert not (tables[0] & tables[1] or tables[0] & tables[2] or tables[1] & tables[2])
    unlisted = shown - set().union(*tables)
    assert not unlisted, f"commands shown but run nowhere (add each to QUICK, SLOW or ELSEWHERE): " \
                         f"{sorted(unlisted)}"
    stale = set().union(*tables) - shown
    assert not stale, f"listed but no longer shown: {sorted(stale)}"
    for command, where in ELSEWHERE.items():
        path, name = where.split("::")
        assert re.search(rf"^def {name}\(", (ROOT / path).read_text(), flags=re.M), (command, where)


def run_in(folder: Path, command: str) -> subprocess.CompletedProcess[str]:
    argv = shlex.split(command)[1:]
    return subprocess.run([sys.executable, "-m", "bayes_sched", *argv], capture_output=True,
                          text=True, env=ENV, cwd=folder, timeout=3600)


def commands_in_order(table: set[str] | dict[str, str]) -> list[tuple[Path, str]]:
    """(page, command) of ``table`` in reading order (README first), each command once."""
    seen: set[str] = set()
    ordered = []
    for page, command in shown_commands():
        if command in table and command not in seen:
            seen.add(command)
            ordered.append((page, command))
    return ordered


def test_quick_commands_run_from_a_fresh_folder(tmp_path: Path) -> None:
    # One folder for all, as a reader following the pages has: a command may read what an
    # earlier one wrote (``counters info counters`` after ``collect --out counters``).
    commands = commands_in_order(QUICK)
    assert len(commands) == len(QUICK)
    for page, command in commands:
        result = run_in(tmp_path, command)
        assert result.returncode == 0, (page.name, command, result.stderr[-3000:])
        assert (result.stdout + result.stderr).strip(), (page.name, command)  # says what it did


@pytest.mark.slow
def test_slow_commands_run_from_a_fresh_folder(tmp_path: Path) -> None:
    for page, command in commands_in_order(SLOW):
        result = run_in(tmp_path, command)
        assert result.returncode == 0, (page.name, command, SLOW[command], result.stderr[-3000:])
