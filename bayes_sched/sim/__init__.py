"""Trace-driven cluster simulator: the bench on which scheduling policies are judged.

Typical use::

    from bayes_sched.sim import run_simulation, write_report
    results = [run_simulation("workload-6", policy) for policy in ("pollux", "tiresias")]
    write_report(results, "report/")

The names below load on first use, so that importing one light part of the simulator (a law, the
contention generator, the workload reader) does not import the run driver, the policies and torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bayes_sched.lazy_exports import lazy_exports

if TYPE_CHECKING:  # the exported names, for type checkers
    from bayes_sched.sim.report import write_report
    from bayes_sched.sim.result import RunResult
    from bayes_sched.sim.run import run_simulation
    from bayes_sched.sim.simulator import SimConfig, SimulatedCluster
    from bayes_sched.sim.workload import JobSpec, Workload, read_workload

#: Public name -> module that defines it (imported on first use).
_EXPORTS: dict[str, str] = {
    "write_report": "bayes_sched.sim.report",
    "RunResult": "bayes_sched.sim.result",
    "run_simulation": "bayes_sched.sim.run",
    "SimConfig": "bayes_sched.sim.simulator",
    "SimulatedCluster": "bayes_sched.sim.simulator",
    "JobSpec": "bayes_sched.sim.workload",
    "Workload": "bayes_sched.sim.workload",
    "read_workload": "bayes_sched.sim.workload",
}


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())

__all__ = ["JobSpec", "SimConfig", "SimulatedCluster", "RunResult", "Workload",
           "read_workload", "run_simulation", "write_report"]
