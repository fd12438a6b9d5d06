"""Start-up: ``--help`` is about as quick as Python itself, and the collector path never imports
the models (torch, pyro, botorch, gpytorch), so a collector-only node needs none of them."""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from bayes_sched.cli import COMMANDS, build_parser

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
MODELS = ("torch", "pyro", "botorch", "gpytorch")
#: Besides the models, what a Prometheus-only collector does not load either.
HEAVY = (*MODELS, "matplotlib", "pandas", "xarray", "scipy")

#: Runs a command line in-process, then prints the top-level packages imported.
PROBE = """
import sys
from bayes_sched.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print(" ".join(sorted({name.split(".")[0] for name in sys.modules})))
"""


def imported_by(*args: str) -> set[str]:
    result = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True,
                            env=ENV, timeout=120)
    assert result.returncode == 0, result.stderr
    return set(result.stdout.split())


def wall(*command: str) -> float:
    """Median wall time of three runs (s)."""
    times = []
    for _ in range(3):
        started = time.perf_counter()
        subprocess.run(command, capture_output=True, env=ENV, timeout=120, check=True)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def test_help_of_every_command_is_as_quick_as_python_itself() -> None:
    python = wall(sys.executable, "-c", "pass")
    # Robust on a loaded 2-core machine, yet 10x below the 100x of importing torch for --help.
    bound = max(10 * python, 0.6)
    for command in ["", *COMMANDS]:
        args = [command, "--help"] if command else ["--help"]
        took = wall(sys.executable, "-m", "bayes_sched", *args)
        assert took <= bound, f"bayes-sched {' '.join(args)}: {took:.2f} s (python: {python:.2f} s)"


def test_help_imports_only_the_chosen_command() -> None:
    assert not imported_by("--help") & {*HEAVY, "numpy", "rich"}
    for command in COMMANDS:
        assert not imported_by(command, "--help") & {*HEAVY, "numpy"}, command


def test_the_collector_path_imports_no_models(tmp_path: Path) -> None:
    assert not imported_by("collect", "--help") & {*HEAVY, "numpy"}
    served = imported_by("collect", "--sources", "nvml,pcie,perf,procfs", "--prometheus", "0",
                         "--samples", "3", "--interval", "0.05s", "--quiet")
    assert "prometheus_client" in served and not served & set(HEAVY)
    stored = imported_by("collect", "--sources", "procfs", "--out", str(tmp_path / "store"),
                         "--samples", "3", "--interval", "0.05s", "--quiet")
    assert "zarr" in stored and not stored & set(MODELS)
    assert (tmp_path / "store").is_dir()
    result = subprocess.run(
        [sys.executable, "-c", "import sys, collectors, counters, perfmodel, bayes_sched; "
                               "print(' '.join(sorted(sys.modules)))"],
        capture_output=True, text=True, env=ENV, timeout=120)
    assert result.returncode == 0 and not {m.split(".")[0] for m in result.stdout.split()} & {
        *HEAVY, "numpy"}


def test_a_collector_serves_its_first_scrape_quickly_and_stays_small() -> None:
    python = wall(sys.executable, "-c", "pass")
    started = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-m", "bayes_sched", "collect", "--prometheus", "0", "--interval", "0.1s",
         "--sources", "pcie,perf,procfs", "--quiet"],
        stderr=subprocess.PIPE, text=True, env=ENV)
    assert process.stderr is not None
    try:
        port = None
        for line in process.stderr:
            if "serving Prometheus metrics on" in line:
                port = int(line.rsplit(":", 1)[1].split("/")[0])
                break
        assert port is not None
        text = ""
        while "bayes_sched_collector_samples_total" not in text:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
                text = reply.read().decode()
        first_scrape = time.monotonic() - started
        # 1 s on an idle machine; scaled like Python's own start-up on a loaded one.
        assert first_scrape <= max(1.0, 10 * python), f"first scrape after {first_scrape:.2f} s"
        time.sleep(1.0)  # some samples later
        status = Path(f"/proc/{process.pid}/status").read_text()
        resident_kib = int(next(line for line in status.splitlines()
                                if line.startswith("VmRSS:")).split()[1])
        assert resident_kib <= 80 * 1024, f"collector resident {resident_kib / 1024:.0f} MiB"
    finally:
        process.terminate()
        process.communicate(timeout=60)
    assert process.returncode == 0


@pytest.mark.filterwarnings("ignore")
def test_the_command_table_matches_what_each_module_registers() -> None:
    parser = build_parser()  # every module, registered in full
    (subparsers,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    registered = {action.dest: action.help for action in subparsers._choices_actions}
    assert registered == {name: command.help for name, command in COMMANDS.items()}
