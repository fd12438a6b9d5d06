"""Trace-driven cluster simulator: the bench on which scheduling policies are judged.

Typical use::

    from bayes_sched.sim import run_simulation, write_report
    results = [run_simulation("workload-6", policy) for policy in ("pollux", "tiresias")]
    write_report(results, "report/")
"""

from bayes_sched.sim.report import write_report
from bayes_sched.sim.run import SimulationResult, run_simulation
from bayes_sched.sim.simulator import SimConfig, SimulatedCluster
from bayes_sched.sim.workload import JobSpec, Workload, read_workload

__all__ = ["JobSpec", "SimConfig", "SimulatedCluster", "SimulationResult", "Workload",
           "read_workload", "run_simulation", "write_report"]
