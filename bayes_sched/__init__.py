"""The scheduling side of bayes-sched: contention inference, interference, search, policies, simulator.

Depends on :mod:`counters` and :mod:`perfmodel`; only :mod:`bayes_sched.cli` may import every package.
The main objects are importable from here (``from bayes_sched import run_simulation``); they load
on first use, so ``import bayes_sched`` (and the command line's start-up) imports no torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bayes_sched.lazy_exports import lazy_exports

__version__ = "0.1.0"

if TYPE_CHECKING:  # the exported names, for type checkers
    from bayes_sched.errors import InputError
    from bayes_sched.policies import POLICIES, Policy, make_policy
    from bayes_sched.sim import SimConfig, SimulatedCluster, read_workload, run_simulation

#: Public name -> module that defines it (imported on first use).
_EXPORTS: dict[str, str] = {
    "InputError": "bayes_sched.errors",
    "POLICIES": "bayes_sched.policies",
    "Policy": "bayes_sched.policies",
    "make_policy": "bayes_sched.policies",
    "SimConfig": "bayes_sched.sim",
    "SimulatedCluster": "bayes_sched.sim",
    "read_workload": "bayes_sched.sim",
    "run_simulation": "bayes_sched.sim",
}


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())

__all__ = [
    "__version__",
    "InputError",
    "POLICIES",
    "Policy",
    "make_policy",
    "SimConfig",
    "SimulatedCluster",
    "read_workload",
    "run_simulation",
]
