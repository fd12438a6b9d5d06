"""What HiGHS keeps per process, and how our calls live with it: its console banner and its
thread scheduler."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator

#: The ``threads`` option of every HiGHS run of ours (highspy, directly or through cvxpy).
#: HiGHS keeps one thread scheduler per process, sized by the first run; a later run that asks
#: for another size fails ("the scheduler has already been initialized to use 2 threads"). Sia's
#: integer program ran with HiGHS's default (half the cores: 2 here) and Shockwave's planner
#: with 1, so in a process that had solved Sia's program every Shockwave solve failed, no job
#: was ever planned and a simulation ran on to its horizon (a hang the tests once met). One
#: thread: these programs are small, and the answer then does not depend on the machine's
#: cores. (scipy's ``linprog`` carries its own copy of HiGHS, with its own scheduler.)
HIGHS_THREADS = 1


@contextlib.contextmanager
def quiet_stdout() -> Iterator[None]:
    """Silence file descriptor 1: HiGHS prints a banner from C++ on its first use in a process,
    which would corrupt a command's ``--json`` output."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "wb") as null:
            os.dup2(null.fileno(), 1)
            yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)
