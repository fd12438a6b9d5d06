"""POP's sub-problems solved side by side: solver calls in worker processes
(:mod:`bayes_sched.mechanisms.solver_pool`), the same allocations as one after another, and
workers that neither print on Ctrl-C nor outlive a killed parent."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from bayes_sched.errors import InputError
from bayes_sched.mechanisms.solver_pool import (
    check_workers,
    map_concurrently,
    run_solver,
)
from bayes_sched.policies import make_policy
from tests.test_pop import ESTIMATES, _policy, _problem


def _pid_of_solver() -> int:
    return run_solver(os.getpid)


def _raise_in_solver() -> int:
    return run_solver(int, "not a number")


def test_solver_calls_go_to_the_workers_only_inside_map_concurrently() -> None:
    assert run_solver(os.getpid) == os.getpid()
    assert map_concurrently([_pid_of_solver] * 3, 1) == [os.getpid()] * 3
    pids = map_concurrently([_pid_of_solver] * 6, 2)
    assert os.getpid() not in pids and 1 <= len(set(pids)) <= 2
    # The workers' own error reaches the caller, and the pool still serves.
    with pytest.raises(ValueError, match="not a number"):
        map_concurrently([_pid_of_solver, _raise_in_solver], 2)
    assert os.getpid() not in map_concurrently([_pid_of_solver] * 2, 2)


@pytest.mark.parametrize("name", ["finish_time_fairness_packed", "min_total_duration_packed",
                                  "max_min_fairness_packed", "max_sum_throughput_perf"])
def test_sub_problems_side_by_side_decide_as_one_after_another(name: str) -> None:
    state, views = _problem(60)
    runs = []
    for workers in (1, 2):
        policy = _policy(name, partitions=4, partition_workers=workers)
        policy.decide(state, views, ESTIMATES)
        assert policy.partitioner.last_count == 4 and policy.solver_failures == 0
        runs.append((policy.fractions(), policy.pair_fractions()))
    assert runs[0] == runs[1]
    assert runs[0][0]  # an allocation, not two empty ones


@pytest.mark.parametrize("bad", [0, -1, 65, 1.5, True, "2"])
def test_bad_worker_counts_are_refused(bad: object) -> None:
    with pytest.raises(ValueError, match="partition_workers is"):
        check_workers(bad)
    with pytest.raises(InputError, match="partition_workers") as caught:
        make_policy("finish_time_fairness_packed", partition_workers=bad)
    assert "\n" not in str(caught.value)


def test_a_policy_without_a_program_to_partition_refuses_workers() -> None:
    with pytest.raises(InputError, match="partition_workers"):
        make_policy("fifo", partition_workers=2)


#: A parent that starts two workers, prints their process ids and waits. It takes SIGINT as a
#: terminal's foreground command does: a suite started as a background job of a shell runs with
#: SIGINT ignored, and its children inherit that (then the Ctrl-C below could not reach them).
PARENT = """
import os, signal, sys, time
signal.signal(signal.SIGINT, signal.default_int_handler)
from bayes_sched.mechanisms.solver_pool import map_concurrently, run_solver
def pid():
    return run_solver(os.getpid)
try:
    pids = set(map_concurrently([pid] * 8, 2))
    print(" ".join(map(str, sorted(pids))), flush=True)
    time.sleep(60)
except KeyboardInterrupt:
    sys.exit(130)
"""


def _start_parent() -> tuple[subprocess.Popen[str], list[int]]:
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, start_new_session=True)
    assert parent.stdout is not None
    line = parent.stdout.readline()
    assert line.strip(), parent.stderr.read() if parent.stderr else ""
    return parent, [int(p) for p in line.split()]


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _wait_gone(pids: list[int], seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not all(_gone(p) for p in pids):
        time.sleep(0.1)
    return [p for p in pids if not _gone(p)]


def test_workers_end_when_their_parent_is_killed() -> None:
    parent, workers = _start_parent()
    assert workers and all(not _gone(p) for p in workers)
    parent.kill()
    parent.wait(timeout=10)
    assert _wait_gone(workers, 10.0) == []


def test_ctrl_c_stops_the_parent_and_its_workers_without_a_traceback() -> None:
    parent, workers = _start_parent()
    os.killpg(parent.pid, signal.SIGINT)  # the terminal's Ctrl-C: the whole process group
    _, err = parent.communicate(timeout=30)
    assert parent.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert _wait_gone(workers, 10.0) == []


#: A parent that says when it starts its workers, then solves and waits (SIGINT as in PARENT).
STARTING = """
import os, signal, sys, time
signal.signal(signal.SIGINT, signal.default_int_handler)
from bayes_sched.mechanisms.solver_pool import map_concurrently, run_solver
def pid():
    return run_solver(os.getpid)
try:
    print("starting", flush=True)
    map_concurrently([pid] * 8, 2)
    time.sleep(60)
except KeyboardInterrupt:
    sys.exit(130)
"""


@pytest.mark.parametrize("delay", [0.0, 0.03, 0.06, 0.1, 0.2])
def test_ctrl_c_while_the_workers_start_prints_no_traceback(delay: float) -> None:
    """A Ctrl-C during a worker's start-up, before it ignores SIGINT, ended it mid-import with
    a traceback (or "Fatal Python error") on the terminal; workers now start with it blocked.
    The delays sweep the start-up (one import of Python and the solvers)."""
    parent = subprocess.Popen([sys.executable, "-c", STARTING], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, start_new_session=True)
    assert parent.stdout is not None
    assert parent.stdout.readline().strip() == "starting"
    time.sleep(delay)
    os.killpg(parent.pid, signal.SIGINT)
    try:
        _, err = parent.communicate(timeout=60)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(parent.pid, signal.SIGKILL)
    assert parent.returncode == 130, err
    assert "Traceback" not in err and "Fatal Python error" not in err, err


#: A pool worker of another library's (forked, as ProcessPoolExecutor's on Linux) that solves
#: side by side, then ends with its pool.
NESTED = """
import functools, multiprocessing, os
from concurrent.futures import ProcessPoolExecutor
from bayes_sched.mechanisms.solver_pool import map_concurrently, run_solver
def inner():
    return map_concurrently([functools.partial(run_solver, os.getpid)] * 4, 2)
if __name__ == "__main__":
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("fork")) as pool:
        pids = pool.submit(inner).result()
    print(len(pids))
"""

#: A script that starts workers outside ``if __name__ == "__main__":``.
UNGUARDED = """
import functools, os
from bayes_sched.mechanisms.solver_pool import map_concurrently, run_solver
print(map_concurrently([functools.partial(run_solver, os.getpid)] * 4, 2))
"""


def _session_processes(session: int) -> list[int]:
    found = []
    for pid in psutil.pids():
        try:
            if os.getsid(pid) == session and not _gone(pid):
                found.append(pid)
        except OSError:
            continue
    return found


def _run_script(path: Path, text: str) -> tuple[int, str, str, list[int]]:
    """Run ``text`` as the script ``path`` in a session of its own: its exit status, output,
    errors, and the processes of its session still there 10 s after it ended (killed then)."""
    path.write_text(text)
    child = subprocess.Popen([sys.executable, str(path)], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = child.communicate(timeout=120)
        deadline = time.monotonic() + 10
        while _session_processes(child.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        return child.returncode, out, err, _session_processes(child.pid)
    finally:
        for pid in _session_processes(child.pid):  # what a hang left
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_a_forked_pool_worker_that_solved_side_by_side_ends_with_its_pool(
        tmp_path: Path) -> None:
    # (Its idle workers kept it from ending, before.)
    status, out, err, left = _run_script(tmp_path / "nested.py", NESTED)
    assert status == 0 and out.split() == ["4"] and left == [], err


def test_a_script_without_a_main_guard_fails_in_one_message_and_leaves_no_process(
        tmp_path: Path) -> None:
    status, _, err, left = _run_script(tmp_path / "unguarded.py", UNGUARDED)
    assert status != 0
    assert "if __name__ == '__main__':" in err.strip().splitlines()[-1], err
    assert left == []  # no worker left behind, waiting
