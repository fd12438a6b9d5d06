"""Solver calls run in worker processes, so that POP's sub-problems are solved side by side.

POP (:mod:`bayes_sched.mechanisms.pop`) solves its ``k`` sub-problems independently, and its
harness solves them in parallel. Here :func:`map_concurrently` runs a policy's sub-problems on
threads of this process; each thread builds its sub-problem's program here, and the solve itself
(:func:`run_solver`, which :func:`~bayes_sched.mechanisms.time_fraction_lp.solve_program` and
:func:`~bayes_sched.mechanisms.time_fraction_lp.highs_optimum` go through) is sent to a worker
process. Threads alone would not overlap the solves: CLARABEL's Python binding holds the GIL
(four solves on two threads take as long as four in a row). Outside
:func:`map_concurrently` :func:`run_solver` calls the solver in the calling thread.

The workers:

* are started with ``spawn``, not ``fork``: a fork of a process that holds torch's and HiGHS's
  threads may inherit a lock held by a thread that does not exist in the child;
* import only the solvers' modules, ignore SIGINT (Ctrl-C reaches the whole process group; the
  parent stops on it and its pool with it; blocked from their start, so that one during their
  start-up ends nothing mid-import) and end themselves when their parent is gone (a
  thread that watches the parent's process id), so a killed simulation leaves none behind;
* are kept: one pool per worker count per process (:func:`worker_pool`), started on first use
  (its start is stated in :func:`worker_pool`) and shut down when the process exits (also a
  forked pool worker of another library's, whose exit would otherwise wait for them).

The answer does not depend on where a program is solved: the same program goes to the same
deterministic solver, only in another process (``tests/test_solver_pool.py`` checks that the
policies' allocations are equal).
"""

from __future__ import annotations

import contextlib
import contextvars
import multiprocessing
import multiprocessing.util
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import ParamSpec, TypeVar

#: The most worker processes a caller may ask for.
MAX_WORKERS = 64

#: Seconds between a worker's checks that its parent is alive.
PARENT_CHECK_SECONDS = 1.0

P = ParamSpec("P")
R = TypeVar("R")

_ACTIVE: contextvars.ContextVar[ProcessPoolExecutor | None] = contextvars.ContextVar(
    "solver_pool", default=None)
_POOLS: dict[int, ProcessPoolExecutor] = {}
_POOLS_LOCK = threading.Lock()


def check_workers(value: object) -> int:
    """``value`` as a worker count; ``ValueError`` (one line) unless it is an integer in
    1..:data:`MAX_WORKERS`."""
    if (isinstance(value, bool) or not isinstance(value, int)
            or not 1 <= value <= MAX_WORKERS):
        raise ValueError(f"partition_workers is {value!r}: expected an integer from 1 to "
                         f"{MAX_WORKERS}")
    return value


def worker_pool(workers: int) -> ProcessPoolExecutor:
    """This process's pool of ``workers`` solver processes, started on first use. The processes
    themselves start at their first task (Python, numpy, scipy and the solvers imported; the
    time is printed by ``experiments/bench_pop.py --workers``), once per process and count.

    ``RuntimeError`` where a spawned process calls it while importing its parent's main module
    (a script that starts workers outside ``if __name__ == "__main__":``): raised before any
    thread or process starts, so that process ends instead of waiting for one."""
    workers = check_workers(workers)
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        raise RuntimeError(
            "solver workers started while a spawned process imports its parent's main module: "
            "a script that sets partition_workers must run its code under "
            "if __name__ == '__main__':")
    with _POOLS_LOCK:
        pool = _POOLS.get(workers)
        if pool is None:
            if not _POOLS:
                # Before multiprocessing joins a process's children at its exit (a pool worker
                # of another library's that used ours): ours wait for tasks, so end them first.
                multiprocessing.util.Finalize(None, _shut_down, exitpriority=100)
            pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                                       initializer=_start_worker, initargs=(os.getpid(),))
            _POOLS[workers] = pool
        return pool


def _shut_down() -> None:
    """End this process's pools and their workers (at exit)."""
    with _POOLS_LOCK:
        pools = list(_POOLS.values())
        _POOLS.clear()
    for pool in pools:
        pool.shutdown(wait=True, cancel_futures=True)


def _forget_inherited() -> None:
    """In a forked child: the parent's pools are the parent's (their threads did not come
    along, nor would a thread that held the lock); the child starts its own."""
    global _POOLS_LOCK
    _POOLS_LOCK = threading.Lock()
    _POOLS.clear()


os.register_at_fork(after_in_child=_forget_inherited)


def _forget(pool: ProcessPoolExecutor) -> None:
    """Drop a broken ``pool``, so the next call starts a new one."""
    with _POOLS_LOCK:
        for count, held in list(_POOLS.items()):
            if held is pool:
                del _POOLS[count]
    pool.shutdown(wait=False, cancel_futures=True)


@contextlib.contextmanager
def _sigint_blocked() -> Iterator[None]:
    """SIGINT blocked in this thread meanwhile. A worker process that a pool starts here begins
    with SIGINT blocked (a signal mask survives ``fork`` and ``exec``), so a Ctrl-C during its
    start-up, before :func:`_start_worker` ignores the signal, stays pending and is then
    discarded; else it would end the worker mid-import with a traceback on the terminal."""
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _start_worker(parent: int) -> None:
    """A worker's start: SIGINT ignored (then unblocked: one pending from the start-up is
    discarded), the parent watched, the solvers imported."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    threading.Thread(target=_exit_without_parent, args=(parent,), daemon=True,
                     name="parent-watch").start()
    import clarabel  # noqa: F401 -- imported once here, not in the first solve
    import highspy  # noqa: F401


def _exit_without_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(PARENT_CHECK_SECONDS)
    os._exit(0)


def run_solver(solve: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    """``solve(*args, **kwargs)``: in a worker process inside :func:`map_concurrently`, else
    here. ``solve`` and its arguments must pickle (a module-level function; arrays, scipy
    matrices, dataclasses of them). A worker that died raises ``RuntimeError`` (saying so); the
    next call starts a new pool."""
    pool = _ACTIVE.get()
    if pool is None:
        return solve(*args, **kwargs)
    try:
        with _sigint_blocked():  # a worker the submit starts inherits the mask
            future = pool.submit(solve, *args, **kwargs)
        return future.result()
    except BrokenProcessPool as error:
        _forget(pool)
        raise RuntimeError(
            "a solver worker process ended abruptly (killed, or out of memory; a script that "
            "starts workers must run its own code under if __name__ == '__main__':, as for "
            "any spawned process)") from error


def map_concurrently(tasks: Sequence[Callable[[], R]], workers: int) -> list[R]:
    """Each of ``tasks`` run on one of ``workers`` threads, its solver calls
    (:func:`run_solver`) in ``workers`` processes; the answers in the order of ``tasks``. The
    first task to raise raises here, after the others have ended. With one worker, or one task,
    the tasks run here in order."""
    workers = check_workers(workers)
    if workers == 1 or len(tasks) < 2:
        return [task() for task in tasks]
    pool = worker_pool(workers)

    def run(task: Callable[[], R]) -> R:
        token = _ACTIVE.set(pool)
        try:
            return task()
        finally:
            _ACTIVE.reset(token)

    with ThreadPoolExecutor(min(workers, len(tasks)), thread_name_prefix="pop") as threads:
        return list(threads.map(run, tasks))
