"""What HiGHS keeps per process, and how our calls live with it: its console banner, its
thread scheduler, and the options of our small integer programs."""

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

#: HiGHS options that switch off its primal heuristics that search on their own: RINS and RENS
#: (each solves a sub-MIP, which may run the heuristics again, nested), root reduced-cost
#: fixing (a sub-MIP too) and feasibility jump. They find good solutions early in large MIPs. On
#: small assignment programs (tens to a few hundred binaries, where the root LP with its cuts
#: is nearly integral) they take most of a solve and the search ends at the same optimum
#: without them: the answer is optimal within the gap either way, but where several choices
#: tie the solver may return another of them.
MIP_HEURISTICS_OFF: dict[str, object] = {
    "mip_heuristic_run_rins": False, "mip_heuristic_run_rens": False,
    "mip_heuristic_run_root_reduced_cost": False, "mip_heuristic_run_feasibility_jump": False}


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
