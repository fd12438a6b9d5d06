"""SIGKILL of a real collector at seeded random instants: the store always opens, keeps every
sample it held before, and loses at most the last second."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from counters import schema
from counters.repair import repair
from counters.store import open_store, parts, pending_journals

ROOT = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
INTERVAL_S = 0.02
#: Commit every ~2 samples to journal-only (1h): kills land in segment creation, journal appends
#: and seals; the commit processes (counters.committer) a killed collector leaves go on beside
#: the reads below and the next collector, their commits and compactions serialised by the
#: store's lock (tests/test_counters_committer.py kills a committer itself).
FLUSH_EVERY = ("0.04s", "0.1s", "0.3s", "1h")


@pytest.fixture(scope="module")
def forkserver() -> Iterator[subprocess.Popen[str]]:
    server = subprocess.Popen([sys.executable, str(ROOT / "tests" / "collect_forkserver.py")],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=ENV,
                              cwd=ROOT)
    yield server
    assert server.stdin is not None
    server.stdin.close()
    server.wait(timeout=60)


def start(server: subprocess.Popen[str], argv: list[str], log: Path) -> int:
    """Fork ``bayes-sched ARGV`` in the server; returns its pid once it is sampling."""
    assert server.stdin is not None and server.stdout is not None
    server.stdin.write(json.dumps({"argv": argv, "stderr": str(log)}) + "\n")
    server.stdin.flush()
    pid = int(server.stdout.readline())
    deadline = time.monotonic() + 60
    while "counters every" not in (log.read_text() if log.exists() else ""):
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            raise AssertionError(f"collect did not start: {log.read_text()}")
        time.sleep(0.01)
    return pid


def gone(pid: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.005)
    raise AssertionError(f"process {pid} survived SIGKILL")


def kill_repeatedly(server: subprocess.Popen[str], store: Path, tmp: Path, kills: int,
                    seed: int) -> list[float]:
    """Start a collector on ``store``, SIGKILL it after a random delay, check the store; again.

    Returns the seconds between each kill and the last sample the store holds afterwards.
    """
    rng = np.random.default_rng(seed)
    held: xr.Dataset | None = None
    lost: list[float] = []
    grew = 0  # kills after which the store held more samples than before
    for k in range(kills):
        flush = FLUSH_EVERY[int(rng.integers(len(FLUSH_EVERY)))]
        pid = start(server, ["collect", "--interval", f"{INTERVAL_S}s", "--out", str(store),
                             "--flush-every", flush, "--sources", "procfs", "--node", "crash",
                             "--quiet"], tmp / f"run-{k}.log")
        time.sleep(float(rng.uniform(0.3 if k == 0 else 0.02, 0.6)))
        os.kill(pid, signal.SIGKILL)
        killed_at = time.time()
        gone(pid)
        ds = open_store(store, lazy=False)  # opens after every kill (else CountersError)
        assert schema.problems(ds, check_values=False) == []
        if held is not None:  # every sample it held before is still there, unchanged
            before = ds.isel(time=slice(0, held.sizes["time"]))
            np.testing.assert_array_equal(before["time"].values, held["time"].values)
            xr.testing.assert_equal(before["cpu_user"], held["cpu_user"])
            grew += ds.sizes["time"] > held.sizes["time"]
        last = schema.time_to_seconds(ds["time"].values[-1:])[0]
        lost.append(killed_at - float(last))
        held = ds
    # A kill soon after a slow start (a loaded machine) may come before the first sample; most
    # runs must still add samples, or the test would pass on a collector that writes nothing.
    assert grew >= (kills - 1) / 2, f"only {grew} of {kills - 1} restarts kept a sample"
    return lost


def check_kills(forkserver: subprocess.Popen[str], tmp_path: Path, kills: int, seed: int) -> None:
    store = tmp_path / "store"
    lost = kill_repeatedly(forkserver, store, tmp_path, kills, seed)
    # At most the last second of samples lost (SIGKILL keeps everything journalled; the gap is
    # the sampling interval plus scheduling delay on a loaded machine).
    assert max(lost) <= 1.0, lost
    # What a kill may leave for repair is only crash debris, never a committed part dropped: a
    # segment killed between its header and its first sample holds no sample.
    changed = repair(store)
    assert all(("journal" in line and ("torn" in line or "(0 sample(s)," in line))
               or ".tmp" in line or ".trash-" in line or "merged part" in line
               for line in changed), changed
    final = open_store(store, lazy=False)
    assert len(parts(store)) < 2 * 12 + 2  # compaction keeps parts bounded
    assert final.sizes["time"] >= kills
    print(f"{kills} kills: {final.sizes['time']} samples in {len(parts(store))} parts and "
          f"{len(pending_journals(store))} journals; kill-to-last-sample max "
          f"{max(lost) * 1e3:.0f} ms, median {np.median(lost) * 1e3:.0f} ms")


def test_sigkill_at_random_instants_never_loses_committed_samples(
        forkserver: subprocess.Popen[str], tmp_path: Path) -> None:
    check_kills(forkserver, tmp_path, kills=20, seed=14)


@pytest.mark.slow
def test_sigkill_at_random_instants_many_times(forkserver: subprocess.Popen[str],
                                               tmp_path: Path) -> None:
    check_kills(forkserver, tmp_path, kills=120, seed=1414)
