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
from counters.store import open_store, parts, pending_journals

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
MODELS = ("torch", "pyro", "botorch", "gpytorch")
#: Besides the models, what a Prometheus-only collector does not load either.
HEAVY = (*MODELS, "matplotlib", "pandas", "xarray", "scipy")

#: What writing a store part loads, which a storing collector leaves to its commit processes.
STORE_WRITING = ("xarray", "pandas", "zarr", "numcodecs", "dask")
#: The collector's resident-memory target (issue 17), whether or not it writes a store.
MAX_RESIDENT_BYTES = 80 * 2**20

#: Runs a command line in-process, then prints the modules imported.
PROBE = """
import sys
from bayes_sched.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print(" ".join(sorted(sys.modules)))
"""


def modules_imported_by(*args: str) -> set[str]:
    """Every module ``bayes-sched ARGS`` imports, by its dotted name (the probe's last line:
    what the command prints comes before it)."""
    result = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True,
                            env=ENV, timeout=120)
    assert result.returncode == 0, result.stderr
    return set(result.stdout.splitlines()[-1].split())


def imported_by(*args: str) -> set[str]:
    """The top-level packages ``bayes-sched ARGS`` imports."""
    return {name.split(".")[0] for name in modules_imported_by(*args)}


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
    assert "numpy" in stored and not stored & {*HEAVY, *STORE_WRITING}
    assert len(parts(tmp_path / "store")) == 1  # committed, by a child process
    result = subprocess.run(
        [sys.executable, "-c", "import sys, collectors, counters, perfmodel, bayes_sched; "
                               "print(' '.join(sorted(sys.modules)))"],
        capture_output=True, text=True, env=ENV, timeout=120)
    assert result.returncode == 0 and not {m.split(".")[0] for m in result.stdout.split()} & {
        *HEAVY, "numpy"}



def test_listing_estimators_imports_no_models() -> None:
    # Reading the estimators' options imports each estimator's module (its factory's
    # signature), the co-location learning's too: its fits import torch and pyro when they run,
    # not when it is listed (3.5 s of CPU before).
    listed = modules_imported_by("list", "estimators")
    assert "bayes_sched.interference.colocation" in listed
    assert not {name.split(".")[0] for name in listed} & set(MODELS)
def test_simulations_on_point_estimates_and_point_fits_import_only_their_work() -> None:
    # Pollux's point fits, its batch choice and Gavel's table world run on numpy and scipy: torch
    # and pyro cost seconds per process and belong to the Bayesian estimators alone. A run that
    # writes no report or plot leaves out matplotlib, one seed leaves out scipy.stats (its
    # intervals over seeds), no progress bar leaves out rich. A point fit needs scipy.optimize,
    # never torch and pyro (the posterior methods').
    for world in (("--workload", "workload-1", "--policy", "pollux"),
                  ("--trace", "small_test", "--policy", "max_min_fairness")):
        modules = modules_imported_by("simulate", *world, "--max-jobs", "2", "--no-progress",
                                      "--json")
        assert {"numpy", "xarray"} <= modules and not modules & set(MODELS), world
        assert not modules & {"matplotlib", "scipy.stats", "rich"}, world
    fit = modules_imported_by("fit", "throughput", "cifar10", "--method", "point", "--json")
    assert "scipy.optimize" in fit and not {name.split(".")[0] for name in fit} & {
        *MODELS, "matplotlib"}


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
        assert resident_kib * 1024 <= MAX_RESIDENT_BYTES, \
            f"collector resident {resident_kib / 1024:.0f} MiB"
    finally:
        process.terminate()
        process.communicate(timeout=60)
    assert process.returncode == 0


def resident_bytes(pid: int) -> int | None:
    """VmRSS of a live process, from /proc (None once it has exited)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        return int(next(line for line in status.splitlines()
                        if line.startswith("VmRSS:")).split()[1]) * 1024
    except (OSError, StopIteration):
        return None


def test_a_storing_collector_stays_small_and_never_imports_xarray(tmp_path: Path) -> None:
    """``collect --out`` at 50 Hz committing every 0.2 s (commits and a compaction of 12 parts
    run in child processes), serving Prometheus too: it serves its first scrape as quickly as
    without a store, its resident memory, polled all along, stays under the target, and the
    interpreter's own import log shows no xarray, pandas, zarr or dask."""
    from collectors.daemon import Collector
    from collectors.procfs import ProcfsSource
    from counters.store import StoreWriter

    store = tmp_path / "store"
    # Eleven parts of this node's procfs counters first: the collector's first commit makes the
    # twelfth of level 0, and compacts them.
    filler = Collector([ProcfsSource()], interval_s=0.01, writer=StoreWriter(store), node="rss",
                       flush_every=1000)
    filler.discover()
    for _ in range(11):
        filler.sample_once()
        filler.flush(wait=True)
    filler.close()
    assert len(parts(store)) == 11
    log = tmp_path / "collect.log"
    python = wall(sys.executable, "-c", "pass")
    first_scrape = None
    with open(log, "w") as stderr:  # a file, not a pipe: the import log must never block it
        started = time.monotonic()
        process = subprocess.Popen(
            [sys.executable, "-X", "importtime", "-m", "bayes_sched", "collect", "--out",
             str(store), "--sources", "procfs", "--node", "rss", "--interval", "0.02s",
             "--flush-every", "0.2s", "--duration", "8s", "--prometheus", "0", "--quiet"],
            stderr=stderr, env=ENV)
        peak = 0
        while process.poll() is None:
            peak = max(peak, resident_bytes(process.pid) or 0)
            serving = [line for line in log.read_text().splitlines()
                       if "serving Prometheus metrics on" in line]
            if first_scrape is None and serving:
                port = int(serving[0].rsplit(":", 1)[1].split("/")[0])
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                    if "bayes_sched_collector_samples_total" in r.read().decode():
                        first_scrape = time.monotonic() - started
            time.sleep(0.02)
    text = log.read_text()
    assert process.returncode == 0, text[-2000:]
    assert first_scrape is not None and first_scrape <= max(1.0, 10 * python), first_scrape
    assert 0 < peak <= MAX_RESIDENT_BYTES, f"collector resident {peak / 2**20:.0f} MiB"
    imported = {line.rsplit("|", 1)[1].strip().split(".")[0] for line in text.splitlines()
                if line.startswith("import time:") and "|" in line}
    assert "numpy" in imported and not imported & {*STORE_WRITING, *MODELS}
    summary = next(line for line in text.splitlines() if "samples taken" in line)
    taken = int(summary.split("collect: ")[1].split()[0])
    assert f"{taken} samples taken, {taken} written" in summary and taken >= 100
    names = [p.name for p in parts(store)]
    assert names[0].startswith("part-00000-") and len(names) < 12, names  # compacted
    assert pending_journals(store) == []
    assert open_store(store, lazy=False).sizes["time"] == 11 + taken


@pytest.mark.filterwarnings("ignore")
def test_the_command_table_matches_what_each_module_registers() -> None:
    parser = build_parser()  # every module, registered in full
    (subparsers,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    registered = {action.dest: action.help for action in subparsers._choices_actions}
    assert registered == {name: command.help for name, command in COMMANDS.items()}
